#!/usr/bin/env bash
# Runs on a machine with one CUDA GPU: a kernel change checked and timed against the code before it,
# both built the fast way (-Dcuda-kernels=rtc: host code only, kernels compiled on first use), so
# that one device call holds both builds, the checks and the A/B. B is this tree; A is this tree
# with BASE_PATCH reversed (git diff of the change: `git diff > .ab/change.patch`). Logs under $OUT,
# packed at the end into $OUT/all.tgz:
#   - the short conformance grid on B under the chooser and with FLASHATTN_KERNELS (FORCE, default
#     sm90) forced, four processes side by side each (the kernels compile on first use), and masked rows;
#   - compute-sanitizer memcheck, racecheck and synccheck (SAN_TOOLS) on B's SAN_FILTER cases (default
#     hdim128), the FORCE family forced;
#   - bench/gpu_ab.py: A and B interleaved in one process (DIMS, SEQLENS, both causal settings);
#   - with SWITCH (a FLASHATTN_KERNELS list, an opt-in of B's): bench/gpu_ab.py once more, B beside
#     itself with the opt-in (--kernels-b), and the short grid with it;
#   - bench/gpu_bench.py on B: beside PyTorch's FA2 and cuDNN in the same process (BENCH=0 skips).
# AB=0 skips the A/B of the two builds (an empty patch, where only SWITCH is measured).
# Usage: BASE_PATCH=.ab/change.patch [SWITCH=tokens] bash bench/device/rtc_ab_gpu.sh  (carry: [".deps"]
# for cmocka; an empty patch makes A the same tree as B)
set -uo pipefail
AB_NAME=ab AB_MESON_ARGS=-Dconformance_grid=short
. "$(dirname "$0")/ab_builds.sh"
export FLASHATTN_CACHE_DIR=$root/build-ab-kernel-cache FLASHATTN_COMPILE_LOG=0
B=$root/build-ab-B
shards=("hdim64" "hdim128" "hdim256" "-hdim64,-hdim128,-hdim256")
for kernels in default "${FORCE:-sm90}"; do
  pids=()
  for i in 0 1 2 3; do
    env $([ "$kernels" = default ] && echo -u FLASHATTN_KERNELS || echo FLASHATTN_KERNELS=$kernels) \
      "$B/tests/conformance/conformance" --backend cuda --grid short --filter "${shards[$i]}" \
      > "$OUT/grid-$kernels-$i.txt" 2>&1 &
    pids+=($!)
  done
  line=""
  for i in 0 1 2 3; do
    wait "${pids[$i]}"; rc=$?; [ $rc -ne 0 ] && status=1
    line="$line ${shards[$i]}: exit $rc $(grep -E '^\[  (PASSED|FAILED)' "$OUT/grid-$kernels-$i.txt" | tr '\n' ' ');"
    grep -E '^\[  FAILED  \] ' "$OUT/grid-$kernels-$i.txt" | head -5
  done
  echo "$(stamp) short grid, FLASHATTN_KERNELS=$kernels:$line"
done
"$B/tests/conformance/masked_rows" --backend cuda > "$OUT/masked-rows.txt" 2>&1; rc=$?; [ $rc -ne 0 ] && status=1
echo "$(stamp) masked rows: exit $rc; $(tail -1 "$OUT/masked-rows.txt")"
for tool in ${SAN_TOOLS:-memcheck racecheck synccheck}; do
  timeout 200 env FLASHATTN_KERNELS=${FORCE:-sm90} compute-sanitizer --tool $tool --error-exitcode 9 \
    "$B/tests/conformance/conformance" --backend cuda --grid short --filter "${SAN_FILTER:-hdim128}" > "$OUT/$tool.log" 2>&1
  rc=$?; [ $rc -ne 0 ] && status=1
  echo "$(stamp) $tool ${SAN_FILTER:-hdim128}: exit $rc; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED' "$OUT/$tool.log" | tail -2 | tr '\n' ' ')"
done
if [ "${AB:-1}" = 1 ]; then
  python3 bench/gpu_ab.py --lib "$root/build-ab-A/libflashattn.so" --lib "$B/libflashattn.so" --names before,after \
    --dims "${DIMS:-64,128,256}" --seqlens "${SEQLENS:-1024,4096,16384}" --repeats "${REPEATS:-3}" 2>&1 | tee "$OUT/ab.md"
  echo "$(stamp) A/B done"
fi
if [ -n "${SWITCH:-}" ]; then
  FLASHATTN_KERNELS=$SWITCH "$B/tests/conformance/conformance" --backend cuda --grid short > "$OUT/grid-switch.txt" 2>&1
  rc=$?; [ $rc -ne 0 ] && status=1
  echo "$(stamp) short grid, FLASHATTN_KERNELS=$SWITCH: exit $rc; $(grep -E '^\[  (PASSED|FAILED)' "$OUT/grid-switch.txt" | tr '\n' ' ')"
  python3 bench/gpu_ab.py --lib "$B/libflashattn.so" --lib "$B/libflashattn.so" --names default,switch \
    --kernels-b "$SWITCH" --dims "${DIMS:-64,128,256}" --seqlens "${SEQLENS:-1024,4096,16384}" \
    --repeats "${REPEATS:-3}" 2>&1 | tee "$OUT/ab-switch.md"
  echo "$(stamp) A/B of $SWITCH done"
fi
if [ "${BENCH:-1}" = 1 ]; then
  python3 bench/gpu_bench.py --lib "$B/libflashattn.so" --dims "${DIMS:-64,128,256}" --no-math 2>&1 | tee "$OUT/bench.md"
  echo "$(stamp) bench done"
fi
echo "== overall: $([ $status -eq 0 ] && echo PASSED || echo FAILED)"
pack_out
exit $status
