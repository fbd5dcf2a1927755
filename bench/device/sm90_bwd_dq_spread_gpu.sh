#!/usr/bin/env bash
# Runs on a machine with one Hopper GPU (cc 9.0): FLASHATTN_KERNELS=sm90-bwd-dq-spread (the d 256
# backward's dQ reductions split around the next step's S^T and dP^T; backward_cols_kernels.cuh's
# SPREAD) checked and timed in one build of this tree made the fast way (-Dcuda-kernels=rtc). Logs
# under $OUT as it goes (all.tgz at the end):
#   the full grid's d 160-256 cases (hdim*, the d 256 / 250 / 176 backwards, the score modifiers at
#   d 256) with it; memcheck, racecheck and synccheck on its hdim256 and longbwd-d256 cases;
#   bench/gpu_ab.py, the chooser (A) against it (B) in one process, d 192 and 256, 1k-16k, causal
#   and not, bf16 (2 rounds) and fp16 (1 round).
# Usage:
# FLASHATTN_BENCH_COMMIT=<hash> bash bench/device/sm90_bwd_dq_spread_gpu.sh  (carry: [".deps"])
set -uo pipefail
. "$(dirname "$0")/rtc_build_env.sh"
sw=sm90-bwd-dq-spread
timeout 240 env FLASHATTN_KERNELS=$sw "$B/tests/conformance/conformance" --backend cuda --grid full \
  --filter hdim160,hdim192,hdim224,hdim256,d256,d250,d176 > "$OUT/grid-full-wide.txt" 2>&1
rc=$?; [ $rc -ne 0 ] && status=1
echo "$(stamp) full grid d 160-256 ($sw): exit $rc; $(grep -E '^\[  (PASSED|FAILED)' "$OUT/grid-full-wide.txt" | tr '\n' ' ')"
grep -E '^\[  FAILED  \] ' "$OUT/grid-full-wide.txt" | head -5
for tool in memcheck racecheck synccheck; do
  timeout 100 env FLASHATTN_KERNELS=$sw compute-sanitizer --tool $tool --error-exitcode 9 \
    "$B/tests/conformance/conformance" --backend cuda --grid full --filter hdim256,longbwd-d256 > "$OUT/$tool-spread.log" 2>&1
  rc=$?; [ $rc -ne 0 ] && status=1
  echo "$(stamp) $tool hdim256,longbwd-d256 ($sw): exit $rc; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$tool-spread.log" | tail -1)"
done
for dtype in bf16 fp16; do
  timeout 150 env -u FLASHATTN_KERNELS python3 bench/gpu_ab.py --lib "$B/libflashattn.so" --lib "$B/libflashattn.so" \
    --names default,spread --kernels-b $sw --dtype $dtype --dims 192,256 --seqlens 1024,4096,16384 \
    --repeats $([ $dtype = bf16 ] && echo 2 || echo 1) 2>&1 | tee -a "$OUT/ab-spread-$dtype.md"
done
echo "$(stamp) done"
echo "== overall: $([ $status -eq 0 ] && echo PASSED || echo FAILED)"
pack_out
exit $status
