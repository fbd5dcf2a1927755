# run 16 (issue 23): run 15's A/B and broken-on-purpose checks again, without ninja (run 15's
# relinks recompiled the swapped object from the tree's sources, so its "main" and "broken" libs
# were all the branch). The device builds the tree (w23-persist, 86a87ef) once into /tmp/b; each
# sm90 object compiled here (.deps/v*/X.o, meson's own command) is copied over the build's
# object and ninja's own final link command is run by hand. Then: each broken object must make
# one new case FAIL (run from /tmp/b, its own runpath); A/B main -> persist; persist beside
# cuDNN/FA2 (1k/4k/16k); ncu of main's d 128 backward; per-step backward A/Bs while time lasts.
set -u
C8=${1:-unknown}
export FLASHATTN_BENCH_COMMIT=$C8
export PATH=/opt/torch/.venv/bin:/usr/local/cuda/bin:$PATH
L=$OUT/logs16; mkdir -p $L; T=/tmp/l16; mkdir -p $T
R=$PWD
bash .deps/scripts/dev_build.sh > $L/build.log 2>&1 || { cat $L/build.log; exit 1; }
DEPS=$R/.deps/cm/usr/lib/x86_64-linux-gnu:$R/.deps/ocl/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH=$DEPS
O=/tmp/b/backends/cuda/libflashattn_cuda_sm90.a.p/sm90_instances.cu.o
(cd /tmp/b && ninja -t commands libflashattn.so.0.1.0 | tail -1) > $T/link.sh
echo "link: $(cut -c1-60 $T/link.sh)" >> $L/summary.txt
cp $O $T/persist.o; cp /tmp/b/libflashattn.so.0.1.0 /tmp/lib-persist.so
link() { t0=$(date +%s); cp $1 $O && (cd /tmp/b && sh $T/link.sh) > $T/link-$2.log 2>&1; rc=$?
  cp /tmp/b/libflashattn.so.0.1.0 /tmp/lib-$2.so
  echo "$2 link rc $rc in $(( $(date +%s) - t0 )) s, object md5 $(md5sum < $O | cut -c1-8) (carried $(md5sum < $1 | cut -c1-8)), lib md5 $(md5sum < /tmp/lib-$2.so | cut -c1-8)" >> $L/summary.txt; }
C=/tmp/b/tests/conformance/conformance
for pair in brokenstore:padded16-d60 brokensched:manytiles; do  # each must FAIL
  v=${pair%%:*}; f=${pair#*:}
  link .deps/v15/$v.o $v
  FLASHATTN_CUDA_KERNELS=sm90 timeout 60 $C --backend cuda --grid full --filter $f > $T/broken-$v.log 2>&1; rc=$?
  echo "broken $v on $f rc $rc (must be nonzero): $(grep -c FAILED $T/broken-$v.log) FAILED lines; $(grep -m3 -i 'fail\|mismatch\|gap' $T/broken-$v.log | cut -c1-200 | tr '\n' ' ')" >> $L/summary.txt
done
cp $T/broken-*.log $L/ 2>/dev/null
link $T/persist.o persist-relinked
FLASHATTN_CUDA_KERNELS=sm90 timeout 60 $C --backend cuda --grid full --filter manytiles > $T/persist-relinked.log 2>&1; echo "persist relinked manytiles rc $? (must be 0)" >> $L/summary.txt
for v in main bwdtma overlap writer; do link .deps/v/$v.o $v; done
timeout 100 python3 bench/gpu_ab.py --lib /tmp/lib-main.so --lib /tmp/lib-persist.so --names main-179a2ad,$C8 --repeats 3 --dims 64,128,256 > $L/ab.md 2>&1; echo "ab main -> persist rc $?" >> $L/summary.txt
timeout 130 python3 bench/gpu_bench.py --lib /tmp/lib-persist.so --no-math --dims 64,128,256 --seqlens 1024,4096,16384 > $L/vs-cudnn.md 2>&1; echo "vs-cudnn rc $?" >> $L/summary.txt
timeout 60 ncu --clock-control none --kernel-name-base mangled -k regex:ws_backward_kernelI13__nv_bfloat16Li128ELi0ELb0E --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section InstructionStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
    python3 bench/gpu_bench.py --lib /tmp/lib-main.so --no-math --seqlens 4096 --dims 128 --causal no > $L/ncu-bwd-main.txt 2>&1; echo "ncu main rc $?" >> $L/summary.txt
for p in main:bwdtma bwdtma:overlap overlap:writer; do
  timeout 45 python3 bench/gpu_ab.py --lib /tmp/lib-${p%%:*}.so --lib /tmp/lib-${p#*:}.so --names ${p%%:*},${p#*:} --repeats 3 --dims 64,128,256 --seqlens 4096 >> $L/ab-steps.md 2>&1; echo "ab $p rc $?" >> $L/summary.txt
done
cat $L/summary.txt; cat $L/ab.md; grep -h "Duration\|Compute (SM) Throughput\|Issue Slots Busy\|Eligible Warps\|Registers Per\|Achieved Occ" $L/ncu-bwd-main.txt
