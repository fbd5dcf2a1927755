# run 17 (issue 23, branch w23-final = main + the backward's Q/dO-by-TMA step): correctness of
# that step on its own (full sm90 grid, masked_rows, memcheck/racecheck/synccheck on the plain
# TMA backward = the full grid's longbwd cases, racecheck on the short grid's d 128), SASS counts
# per sm90 kernel, then the closing figures: bf16 and fp16 grids beside FA2 and cuDNN (twice
# each, for the spread), GPT-2 small with flashattn, SDPA flash and SDPA cuDNN.
set -u
SECONDS=0
C8=${1:-unknown}
export FLASHATTN_BENCH_COMMIT=$C8
export PATH=/opt/torch/.venv/bin:/usr/local/cuda/bin:$PATH
L=$OUT/logs17; mkdir -p $L; T=/tmp/l17; mkdir -p $T
R=$PWD
bash .deps/scripts/dev_build.sh > $L/build.log 2>&1 || { cat $L/build.log; exit 1; }
export LD_LIBRARY_PATH=/tmp/b:$R/.deps/cm/usr/lib/x86_64-linux-gnu:$R/.deps/ocl/usr/lib/x86_64-linux-gnu
C=/tmp/b/tests/conformance/conformance
O=/tmp/b/backends/cuda/libflashattn_cuda_sm90.a.p/sm90_instances.cu.o
( FLASHATTN_CUDA_KERNELS=sm90 timeout 200 $C --backend cuda --grid full > $L/conf.log 2>&1; echo "conformance sm90 full rc $?" >> $L/summary.txt ) &
( FLASHATTN_CUDA_KERNELS=sm90 timeout 150 /tmp/b/tests/conformance/masked_rows --backend cuda > $T/masked.log 2>&1; echo "masked_rows sm90 rc $? $(tail -1 $T/masked.log)" >> $L/summary.txt ) &
for job in racecheck:full:longbwd synccheck:full:longbwd memcheck:full:longbwd racecheck:short:d128; do
  IFS=: read tool grid f <<< "$job"
  ( FLASHATTN_CUDA_KERNELS=sm90 timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 $C --backend cuda --grid $grid --filter $f > $T/$tool-$grid-$f.log 2>&1; rc=$?
    { echo "=== $tool $grid $f rc $rc"; grep -v "^\[ *\(RUN\|OK\) " $T/$tool-$grid-$f.log | head -40; } >> $L/san.txt; echo "$tool $grid $f rc $rc" >> $L/summary.txt ) &
done
( timeout 150 cuobjdump -sass $O 2>/dev/null | awk '/Function :/{f=$3; n[f]=1} /HGMMA/{h[f]++} /UTMALDG/{u[f]++} /UBLKRED|UTMAREDG/{r[f]++} /LDGSTS/{c[f]++} /[^A-Z](STL|LDL)[. ]/{l[f]++}
   END{print "function HGMMA UTMALDG bulk-reduce LDGSTS local-ld/st"; for (k in n) print k, h[k]+0, u[k]+0, r[k]+0, c[k]+0, l[k]+0}' > $L/sass.txt; echo "sass rc $?" >> $L/summary.txt ) &
wait
for dt in bf16 fp16; do for rep in 1; do
  timeout 70 python3 bench/gpu_bench.py --lib /tmp/b/libflashattn.so.0.1.0 --no-math --dtype $dt --dims 64,128,256 --seqlens 1024,4096,16384 >> $L/vs-cudnn-$dt.md 2>&1; echo "vs-cudnn $dt #$rep rc $?" >> $L/summary.txt
done; done
mkdir -p /tmp/g
LEFT=$(( 585 - SECONDS )); echo "gpt2 given $LEFT s" >> $L/summary.txt
FLASHATTN_LIBRARY=/tmp/b/libflashattn.so.0 timeout $LEFT python3 bench/gpt2_train.py --contexts 1024,4096 --steps 100 --impls flashattn,sdpa-flash,sdpa-cudnn --out /tmp/g --time-limit $(( LEFT - 15 )) > $T/gpt2.log 2>&1; echo "gpt2 rc $?" >> $L/summary.txt
cp /tmp/g/gpt2_train.md $L/ 2>/dev/null || tail -30 $T/gpt2.log >> $L/summary.txt
cat $L/summary.txt; tail -3 $L/conf.log; grep -h "SUMMARY" $L/san.txt; cat $L/gpt2_train.md 2>/dev/null | tail -12
