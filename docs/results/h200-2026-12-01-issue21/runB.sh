#!/bin/bash
# H200, issue 21 run B: the merged kernels (rows that see no key, window clamp) and the
# strengthened conformance checks (poisoned determinism re-runs, bf16/fp16 outputs equal to the
# fp32-output twin rounded to nearest even, dropout scale) on every CUDA kernel family, then
# compute-sanitizer memcheck on the masked-rows test, and the
# memory table (bench/reproduce.py --parts memory). All logs into $OUT/logs.tar.gz.
B=/tmp/b; L=/tmp/logs; mkdir -p $B $L; xz -dc .deps/pk/binsB.tar.xz | tar xf - -C $B
export LD_LIBRARY_PATH=$B:$PWD/.deps/ocl/usr/lib/x86_64-linux-gnu
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u
save() { tar czf $OUT/logs.tar.gz -C $L .; }
fam() { if [ $1 = default ]; then unset FLASHATTN_CUDA_KERNELS; else export FLASHATTN_CUDA_KERNELS=$1; fi; }
for k in default sm80 sm90 portable mfma-emulated; do
  fam $k; timeout 90 $B/tests/conformance/masked_rows --backend cuda --dims 40,64,128,256 > $L/masked-rows-$k.log 2>&1
  echo "masked-rows $k rc $? | $(tail -1 $L/masked-rows-$k.log)"; save
done
for k in default sm80 sm90; do
  fam $k; timeout ${GRID_T:-130} $B/tests/conformance/conformance --backend cuda --grid full > $L/conformance-$k.log 2>&1
  echo "conformance full $k rc $? | $(grep -E '^\[  (PASSED|FAILED|SKIPPED)' $L/conformance-$k.log | tr '\n' ' ')"; date -u
  grep -B2 -A3 "FAILED \]\|Failure\|failed" $L/conformance-$k.log | head -12; save
done
unset FLASHATTN_CUDA_KERNELS
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 $B/tests/conformance/masked_rows --backend cuda --dims 64,128 > $L/memcheck-masked-rows.log 2>&1
echo "memcheck masked-rows rc $? | $(grep 'ERROR SUMMARY' $L/memcheck-masked-rows.log)"; date -u
save
# the memory table of docs/reproduction.md, every implementation from one baseline
PYTHONPATH=$PWD/python timeout 90 python3 bench/reproduce.py --tool $B/tools/flashattn --lib $B/libflashattn.so \
  --out $L/figures --parts memory --max-seqlen 65536 > $L/memory.log 2>&1; echo "memory rc $?"; tail -3 $L/memory.log
save
