#!/usr/bin/env bash
# Runs on a machine with one CUDA GPU of compute capability 8.0 or newer (an H100 or H200 runs the
# sm80 kernels when they are forced): the sm80 forward with one K / V stage
# (FLASHATTN_KERNELS=sm80-fwd-stages=1, sm80/forward.cuh's STAGES) checked and timed against the
# default two stages in one build of this tree made the fast way (-Dcuda-kernels=rtc). Logs under
# $OUT as it goes (all.tgz at the end), each step time-boxed:
#   checks: the short grid with the sm80 family and one stage forced, four shards side by side;
#     masked rows; the decode grid with the dense path forced (chunked prefill on the forward);
#     compute-sanitizer memcheck, racecheck and synccheck on the hdim128 and hdim256 cases;
#   bench: bench/gpu_bench.py --sm80 --no-math --dims 64,128,256 in a process whose default context
#     has one stage (the "flashattn" column) and whose --sm80 context has two (the "sm80 path"
#     column), beside PyTorch's FA2 and cuDNN on the same inputs, bf16 and fp16; then --dropout
#     --sm80 with and without the one stage (its cost against the plain call and against FA2's).
# STEPS (default checks,bench): about four minutes each.
# Usage: FLASHATTN_BENCH_COMMIT=<hash> bash bench/device/sm80_stages_gpu.sh  (carry: [".deps"])
set -uo pipefail
. "$(dirname "$0")/rtc_build_env.sh"
one=sm80,sm80-fwd-stages=1
steps=${STEPS:-checks,bench}
if [[ $steps == *checks* ]]; then
  shards=("hdim64" "hdim128" "hdim256" "-hdim64,-hdim128,-hdim256")
  pids=()
  for i in "${!shards[@]}"; do
    timeout 300 env FLASHATTN_KERNELS=$one "$B/tests/conformance/conformance" --backend cuda --grid short \
      --filter "${shards[$i]}" > "$OUT/grid-$i.txt" 2>&1 &
    pids+=($!)
  done
  for i in "${!shards[@]}"; do
    wait "${pids[$i]}"; rc=$?; [ $rc -ne 0 ] && status=1
    echo "$(stamp) short grid ${shards[$i]}, FLASHATTN_KERNELS=$one: exit $rc; $(grep -E '^\[  (PASSED|FAILED)' "$OUT/grid-$i.txt" | tr '\n' ' ')"
    grep -E '^\[  FAILED  \] ' "$OUT/grid-$i.txt" | head -5
  done
  timeout 120 env FLASHATTN_KERNELS=$one "$B/tests/conformance/masked_rows" --backend cuda > "$OUT/masked-rows.txt" 2>&1
  rc=$?; [ $rc -ne 0 ] && status=1
  echo "$(stamp) masked rows: exit $rc; $(tail -1 "$OUT/masked-rows.txt")"
  timeout 150 env FLASHATTN_KERNELS=$one,kv-prefill-dense "$B/tests/conformance/decode" --backend cuda > "$OUT/decode.txt" 2>&1
  rc=$?; [ $rc -ne 0 ] && status=1
  echo "$(stamp) decode grid, dense path: exit $rc; $(tail -1 "$OUT/decode.txt")"
  for tool in memcheck racecheck synccheck; do
    timeout 150 env FLASHATTN_KERNELS=$one compute-sanitizer --tool $tool --error-exitcode 9 \
      "$B/tests/conformance/conformance" --backend cuda --grid short --filter hdim128,hdim256 > "$OUT/$tool.log" 2>&1
    rc=$?; [ $rc -ne 0 ] && status=1
    echo "$(stamp) $tool hdim128,hdim256: exit $rc; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$tool.log" | tail -1)"
  done
fi
if [[ $steps == *bench* ]]; then
  for dtype in bf16 fp16; do
    echo "== $dtype: flashattn = one stage, sm80 path = two stages"
    FLASHATTN_KERNELS=$one timeout 150 python3 bench/gpu_bench.py --lib "$B/libflashattn.so" --sm80 --no-math \
      --dtype $dtype --dims 64,128,256 --seqlens 1024,4096,16384 2>&1 | tee -a "$OUT/stages-$dtype.md"
  done
  for kernels in "$one" sm80; do
    echo "== dropout, FLASHATTN_KERNELS=$kernels"
    FLASHATTN_KERNELS=$kernels timeout 100 python3 bench/gpu_bench.py --lib "$B/libflashattn.so" --dropout \
      --dims 64,128 --seqlens 4096,16384 2>&1 | tee -a "$OUT/dropout-${kernels//[=,]/-}.md"
  done
fi
echo "$(stamp) done"
echo "== overall: $([ $status -eq 0 ] && echo PASSED || echo FAILED)"
pack_out
exit $status
