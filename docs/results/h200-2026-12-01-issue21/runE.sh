#!/bin/bash
# H200, issue 21 run E: the fused sm80/sm90 backwards with dP = 0 on masked elements of edge tiles
# (no per-element select on FULL tiles) and D = 0 for rows that saw no key: the masked-rows test
# on the CUDA families, the full grid with the default chooser and forced sm80, and the d 128
# backward speed beside FA2 and cuDNN (the command of runs C and D).
B=/tmp/b; L=/tmp/logs; mkdir -p $B $L; xz -dc .deps/pk/binsE.tar.xz | tar xf - -C $B
export LD_LIBRARY_PATH=$B:$PWD/.deps/ocl/usr/lib/x86_64-linux-gnu:$PWD/.deps/cm/usr/lib/x86_64-linux-gnu
save() { tar czf $OUT/logsE.tar.gz -C $L .; }
date -u
timeout 60 python3 bench/gpu_bench.py --lib $B/libflashattn.so --seqlens 4096,16384 --dims 128 --dtype bf16 --causal both --no-math > $L/bench.md 2>&1
echo "bench rc $?"; tail -6 $L/bench.md; save; date -u
for k in default sm80 sm90 portable; do
  if [ $k = default ]; then unset FLASHATTN_CUDA_KERNELS; else export FLASHATTN_CUDA_KERNELS=$k; fi
  timeout 30 $B/tests/conformance/masked_rows --backend cuda --dims 40,64,128,256 > $L/masked-rows-$k.log 2>&1
  echo "masked-rows $k rc $? | $(tail -1 $L/masked-rows-$k.log)"
done; save
for k in default sm80; do
  if [ $k = default ]; then unset FLASHATTN_CUDA_KERNELS; else export FLASHATTN_CUDA_KERNELS=$k; fi
  timeout 75 $B/tests/conformance/conformance --backend cuda --grid full > $L/conformance-$k.log 2>&1
  echo "conformance full $k rc $? | $(grep -E '^\[  (PASSED|FAILED|SKIPPED)' $L/conformance-$k.log | tr '\n' ' ')"; save
done; date -u
