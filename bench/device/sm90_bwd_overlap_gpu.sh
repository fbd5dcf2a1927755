#!/usr/bin/env bash
# Runs on a machine with one Hopper GPU (cc 9.0): FLASHATTN_KERNELS=sm90-bwd-overlap (the d 64 / 128
# backward's reordered step: dP^T beside P^T, dK's product beside dQ's hand-off, a dQ writer warp;
# sm90/backward_kernels.cuh's OVL) checked and timed in one build of this tree made the fast way
# (-Dcuda-kernels=rtc). Logs under $OUT as it goes (all.tgz at the end):
#   checks: the short grid with it (two shards side by side) and the full grid's d 64 / 128 cases
#     (hdim64, hdim128, longbwd-d64, longbwd-d128, gqa, window, the strides) with it; the masked
#     rows test with it; memcheck, racecheck and synccheck on the full grid's hdim64, hdim128,
#     longbwd-d128 and window cases with it;
#   ab: bench/gpu_ab.py, the chooser (A) against it (B) in one process, d 64 and 128, 1k-16k, causal
#     and not, bf16 (3 rounds) and fp16 (1 round);
#   profile: Nsight Compute on its kernel, bf16 d 128, 4 x 4096 x 16 heads (profile_gpu.sh).
# STEPS (default checks,ab; profile on request).
# Usage:
# FLASHATTN_BENCH_COMMIT=<hash> bash bench/device/sm90_bwd_overlap_gpu.sh  (carry: [".deps"])
set -uo pipefail
. "$(dirname "$0")/rtc_build_env.sh"
steps=${STEPS:-checks,ab}
ovl=sm90-bwd-overlap
if [[ $steps == *checks* ]]; then
  full="hdim64,hdim128,longbwd-d64,longbwd-d128,gqa,window,strides"
  shards=("hdim,gqa,strides,seqlen" "-hdim,-gqa,-strides,-seqlen")
  pids=()
  for i in "${!shards[@]}"; do
    timeout 300 env FLASHATTN_KERNELS=$ovl "$B/tests/conformance/conformance" --backend cuda --grid short \
      --filter "${shards[$i]}" > "$OUT/grid-short-$i.txt" 2>&1 &
    pids+=($!)
  done
  timeout 300 env FLASHATTN_KERNELS=$ovl "$B/tests/conformance/conformance" --backend cuda --grid full \
    --filter "$full" > "$OUT/grid-full.txt" 2>&1 &
  pids+=($!)
  timeout 300 env FLASHATTN_KERNELS=$ovl "$B/tests/conformance/masked_rows" > "$OUT/masked.txt" 2>&1 &
  pids+=($!)
  files=("$OUT/grid-short-0.txt" "$OUT/grid-short-1.txt" "$OUT/grid-full.txt" "$OUT/masked.txt")
  for i in 0 1 2 3; do
    wait "${pids[$i]}"; rc=$?; [ $rc -ne 0 ] && status=1
    echo "$(stamp) $(basename "${files[$i]}") ($ovl): exit $rc; $(grep -E '^\[  (PASSED|FAILED)' "${files[$i]}" | tr '\n' ' ')$(tail -1 "${files[$i]}")"
    grep -E '^\[  FAILED  \] ' "${files[$i]}" | head -5
  done
  for tool in memcheck racecheck synccheck; do
    timeout 150 env FLASHATTN_KERNELS=$ovl compute-sanitizer --tool $tool --error-exitcode 9 \
      "$B/tests/conformance/conformance" --backend cuda --grid full --filter hdim64,hdim128,longbwd-d128,window \
      > "$OUT/$tool-ovl.log" 2>&1
    rc=$?; [ $rc -ne 0 ] && status=1
    echo "$(stamp) $tool hdim64,hdim128,longbwd-d128,window ($ovl): exit $rc; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$tool-ovl.log" | tail -1)"
  done
fi
if [[ $steps == *ab* ]]; then
  for dtype in bf16 fp16; do
    timeout 200 env -u FLASHATTN_KERNELS python3 bench/gpu_ab.py --lib "$B/libflashattn.so" --lib "$B/libflashattn.so" \
      --names default,overlap --kernels-b $ovl --dtype $dtype --dims 64,128 --seqlens 1024,4096,16384 \
      --repeats $([ $dtype = bf16 ] && echo 3 || echo 1) 2>&1 | tee -a "$OUT/ab-overlap-$dtype.md"
  done
fi
if [[ $steps == *profile* ]]; then
  FLASHATTN_KERNELS=$ovl OUT=$OUT/profile TOP=30 bash bench/device/profile_gpu.sh 2>&1 | head -50
fi
echo "$(stamp) done"
echo "== overall: $([ $status -eq 0 ] && echo PASSED || echo FAILED)"
pack_out
exit $status
