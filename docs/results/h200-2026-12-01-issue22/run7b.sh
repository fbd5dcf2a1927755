# run 7b (issue 22 close-out, part 2): the conformance cases run 7a's time limit cut (every d256
# case) on default/sm80/sm90/portable; racecheck and synccheck on the modifier cases; the
# modifiers' cost; A/B of plain calls against 6b238e5. Reuses /tmp/b when the machine is warm.
set -u
C8=${1:-unknown}
export FLASHATTN_BENCH_COMMIT=$C8
export PATH=/opt/torch/.venv/bin:/usr/local/cuda/bin:$PATH
L=/tmp/logs7b; rm -rf $L; mkdir -p $L
R=$PWD
[ -f /tmp/b/tests/conformance/conformance ] && echo "reusing /tmp/b" >> $L/summary.txt || { bash .deps/scripts/dev_build.sh > $L/build.log 2>&1 || { cat $L/build.log; exit 1; }; }
export LD_LIBRARY_PATH=/tmp/b:$R/.deps/cm/usr/lib/x86_64-linux-gnu:$R/.deps/ocl/usr/lib/x86_64-linux-gnu
C=/tmp/b/tests/conformance/conformance
for fam in default sm80 sm90 portable; do
  ( [ $fam = default ] || export FLASHATTN_CUDA_KERNELS=$fam
    t0=$(date +%s); timeout 200 $C --backend cuda --grid full --filter d256 > $L/conf-cuda-$fam-d256.log 2>&1
    echo "conformance cuda $fam d256: rc $? in $(( $(date +%s) - t0 )) s" >> $L/summary.txt ) &
done
wait
for tool in racecheck synccheck; do
  for fam in sm80 sm90 portable; do
    ( export FLASHATTN_CUDA_KERNELS=$fam
      timeout 110 compute-sanitizer --tool $tool --error-exitcode 9 $C --backend cuda --grid short --filter softcap-alibi > $L/$tool-$fam.log 2>&1
      echo "$tool $fam rc $?" >> $L/summary.txt ) &
  done
done
wait
mkdir -p /tmp/before; xz -dc .deps/pk/before.so.xz > /tmp/before/libflashattn.so
timeout 90 python3 bench/gpu_bench.py --lib /tmp/b/libflashattn.so --modifiers --seqlens 4096,16384 --dims 128 > $L/modifiers.md 2>&1; echo "modifiers rc $?" >> $L/summary.txt
timeout 130 python3 bench/gpu_ab.py --lib /tmp/before/libflashattn.so --lib /tmp/b/libflashattn.so --names 6b238e5,$C8 --repeats 3 > $L/ab.md 2>&1; echo "ab rc $?" >> $L/summary.txt
cat $L/summary.txt; grep -h "PASSED\|FAILED" $L/conf-*.log | sort | uniq -c; grep -h "ERROR SUMMARY" $L/*check*.log | sort | uniq -c; cat $L/modifiers.md $L/ab.md
tar cJf $OUT/logs7b.tar.xz -C /tmp logs7b
