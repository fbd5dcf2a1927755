#!/usr/bin/env bash
# session 23 run 2: conformance tail (softcap / alibi cases that the 280 s limit cut), block-sparse
# ratios on both paths, sanitizers on the block-list kernels (tabled_walk) with sm80 forced
set -u
OUT=${OUT:-/tmp/out}
BUDGET=${BUDGET:-300} bash .deps/scripts/gpu25.sh build,bs,bs80
export PATH=/opt/torch/.venv/bin:/usr/local/cuda/bin:$PATH
R=$PWD; export LD_LIBRARY_PATH=$R/.deps/cm/usr/lib/x86_64-linux-gnu:$R/.deps/ocl/usr/lib/x86_64-linux-gnu
B=/tmp/b; log=$OUT/log.txt
for f in softcap alibi; do
  for mode in default sm80; do
    e=""; [ $mode = sm80 ] && e=FLASHATTN_CUDA_KERNELS=sm80
    env $e timeout 28 $B/tests/conformance/conformance --backend cuda --grid full --filter $f > $OUT/conf-tail-$f-$mode.txt 2>&1
    echo "conformance tail $f $mode: rc $? $(grep -E 'PASSED|FAILED' $OUT/conf-tail-$f-$mode.txt | tr '\n' ' ' | cut -c1-200)" | tee -a $log
  done
done
for tool in memcheck synccheck racecheck; do
  filt=blocksparse; [ $tool = racecheck ] && filt=blocksparse-random50
  FLASHATTN_CUDA_KERNELS=sm80 timeout 45 compute-sanitizer --tool $tool --error-exitcode 9 $B/tests/conformance/conformance --backend cuda --grid full --filter $filt > $OUT/san-$tool.txt 2>&1
  echo "sanitizer $tool sm80 (filter $filt): rc $?; $(grep -E 'SUMMARY|PASSED|FAILED|test\(s\) run|RUN' $OUT/san-$tool.txt | tr '\n' ' ' | cut -c1-400)" | tee -a $log
done
echo "== run2 done $(date -u)" | tee -a $log
