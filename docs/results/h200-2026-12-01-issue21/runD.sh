#!/bin/bash
# H200, issue 21 run D: the sm80/sm90 backwards with dS selected only on edge tiles (ds_tile<EDGE>):
# the masked-rows test on every family, the full grid with the default chooser, the backward speed
# beside FA2 and cuDNN (same command as run C), then racecheck on the masked-rows test at d 64.
B=/tmp/b; L=/tmp/logs; mkdir -p $B $L; xz -dc .deps/pk/binsD.tar.xz | tar xf - -C $B
export LD_LIBRARY_PATH=$B:$PWD/.deps/ocl/usr/lib/x86_64-linux-gnu:$PWD/.deps/cm/usr/lib/x86_64-linux-gnu
save() { tar czf $OUT/logsD.tar.gz -C $L .; }
date -u
for k in default sm80 sm90 portable; do
  if [ $k = default ]; then unset FLASHATTN_CUDA_KERNELS; else export FLASHATTN_CUDA_KERNELS=$k; fi
  timeout 60 $B/tests/conformance/masked_rows --backend cuda --dims 40,64,128,256 > $L/masked-rows-$k.log 2>&1
  echo "masked-rows $k rc $? | $(tail -1 $L/masked-rows-$k.log)"
done; unset FLASHATTN_CUDA_KERNELS; save
timeout 100 $B/tests/conformance/conformance --backend cuda --grid full > $L/conformance-default.log 2>&1
echo "conformance full default rc $? | $(grep -E '^\[  (PASSED|FAILED|SKIPPED)' $L/conformance-default.log | tr '\n' ' ')"; save
timeout 100 python3 bench/gpu_bench.py --lib $B/libflashattn.so --seqlens 4096,16384 --dims 128 --dtype bf16 --causal both --no-math > $L/bench.md 2>&1
echo "bench rc $?"; tail -6 $L/bench.md; save; date -u
for k in default sm80; do
  if [ $k = default ]; then unset FLASHATTN_CUDA_KERNELS; else export FLASHATTN_CUDA_KERNELS=$k; fi
  timeout ${RC_T:-150} compute-sanitizer --tool racecheck --error-exitcode 9 $B/tests/conformance/masked_rows --backend cuda --dims 64 > $L/racecheck-masked-rows-d64-$k.log 2>&1
  echo "racecheck masked-rows d64 $k rc $? | $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' $L/racecheck-masked-rows-d64-$k.log | tr '\n' ' ') $(tail -1 $L/racecheck-masked-rows-d64-$k.log)"; save
done; date -u
