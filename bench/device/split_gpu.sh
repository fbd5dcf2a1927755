#!/usr/bin/env bash
# Runs on a machine with one Hopper GPU: the Hopper forward's split keys (FLASHATTN_KERNELS=
# sm90-fwd-split, docs/options.md) checked and timed in one build of this tree made the fast way
# (-Dcuda-kernels=rtc). Prints, logs under $OUT as it goes, each step time-boxed:
#   - the short grid with SPLITS splits (default 3) on every call the split kernel takes, and under
#     the chooser (its rule), four shards each, eight processes side by side; masked rows with both;
#   - the decode grid with =3 and the dense path forced (kv-prefill-dense), so that chunked prefill
#     runs split; the decode grid (its NaN rule included) under the chooser and with kv-simt;
#   - compute-sanitizer memcheck, racecheck and synccheck on the hdim128 cases with =3;
#   - chunked prefill, bench/decode_bench.py --new N --shapes 1x8192,4x8192 for N in PREFILL
#     (default 16,64,128,512), under the chooser and without the split (=1); the kernels' times of
#     128 new tokens (bench/decode_kernel_times.py --new 128) under the chooser.
# Usage: bash bench/device/split_gpu.sh  (carry: [".deps"] for cmocka; pass FLASHATTN_BENCH_COMMIT,
# the device's copy of the tree may carry stale git metadata)
set -uo pipefail
AB_NAME=split AB_MESON_ARGS=-Dconformance_grid=short
mkdir -p .ab && : > .ab/split-empty.patch
BASE_PATCH=.ab/split-empty.patch
. "$(dirname "$0")/ab_builds.sh"
export FLASHATTN_CACHE_DIR=$root/build-split-kernel-cache FLASHATTN_COMPILE_LOG=0
B=$root/build-split-B
forced="sm90-fwd-split=${SPLITS:-3}"
shards=("hdim64" "hdim128" "hdim256" "-hdim64,-hdim128,-hdim256")
pids=() names=()
kernels_env() { [ "$1" = default ] && echo -u FLASHATTN_KERNELS || echo FLASHATTN_KERNELS=$1; }
for kernels in "$forced" default; do
  for i in 0 1 2 3; do
    timeout 300 env $(kernels_env $kernels) "$B/tests/conformance/conformance" --backend cuda --grid short \
      --filter "${shards[$i]}" > "$OUT/grid-${kernels#*=}-$i.txt" 2>&1 &
    pids+=($!) names+=("$kernels ${shards[$i]}:${kernels#*=}-$i")
  done
done
for j in "${!pids[@]}"; do
  wait "${pids[$j]}"; rc=$?; [ $rc -ne 0 ] && status=1
  f="$OUT/grid-${names[$j]##*:}.txt"
  echo "$(stamp) short grid, FLASHATTN_KERNELS=${names[$j]%:*}: exit $rc; $(grep -E '^\[  (PASSED|FAILED)' "$f" | tr '\n' ' ')"
  grep -E '^\[  FAILED  \] ' "$f" | head -5
done
for kernels in "$forced" default; do
  timeout 120 env $(kernels_env $kernels) "$B/tests/conformance/masked_rows" --backend cuda \
    > "$OUT/masked-rows-${kernels#*=}.txt" 2>&1
  rc=$?; [ $rc -ne 0 ] && status=1
  echo "$(stamp) masked rows, FLASHATTN_KERNELS=$kernels: exit $rc; $(tail -1 "$OUT/masked-rows-${kernels#*=}.txt")"
done
for kernels in "$forced,kv-prefill-dense" default kv-simt; do
  f="$OUT/decode-${kernels//[=,]/-}.txt"
  timeout 150 env $(kernels_env $kernels) "$B/tests/conformance/decode" --backend cuda > "$f" 2>&1
  rc=$?; [ $rc -ne 0 ] && status=1
  echo "$(stamp) decode grid, FLASHATTN_KERNELS=$kernels: exit $rc; $(tail -1 "$f")"
  grep -E "FAIL|nan rule" "$f" | head -8
done
for tool in memcheck racecheck synccheck; do
  timeout 150 env FLASHATTN_KERNELS=$forced compute-sanitizer --tool $tool --error-exitcode 9 \
    "$B/tests/conformance/conformance" --backend cuda --grid short --filter hdim128 > "$OUT/$tool.log" 2>&1
  rc=$?; [ $rc -ne 0 ] && status=1
  echo "$(stamp) $tool hdim128, FLASHATTN_KERNELS=$forced: exit $rc; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$tool.log" | tail -1)"
done
lib=$B/libflashattn.so
for kernels in default sm90-fwd-split=1; do
  for n in $(echo "${PREFILL:-16,64,128,512}" | tr ',' ' '); do
    echo "== FLASHATTN_KERNELS=$kernels: decode_bench.py --new $n"
    env $(kernels_env $kernels) FLASHATTN_LIBRARY=$lib timeout 100 python3 bench/decode_bench.py --new "$n" --shapes 1x8192,4x8192 2>&1 |
      tee -a "$OUT/prefill-${kernels//[=,]/-}.md"
  done
done
env -u FLASHATTN_KERNELS FLASHATTN_LIBRARY=$lib timeout 60 python3 bench/decode_kernel_times.py \
  --new 128 --shapes 1x8192,4x8192 2>&1 | grep -v -i warn | tee "$OUT/prefill-kernels-split.md"
echo "$(stamp) done"
echo "== overall: $([ $status -eq 0 ] && echo PASSED || echo FAILED)"
exit $status
