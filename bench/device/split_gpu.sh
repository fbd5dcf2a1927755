#!/usr/bin/env bash
# Runs on a machine with one Hopper GPU: the Hopper forward's split keys (FLASHATTN_KERNELS=
# fwd-split, docs/options.md) checked and timed in one build of this tree made the fast way
# (-Dcuda-kernels=rtc). Prints, logs under $OUT as it goes, each step time-boxed:
#   - the short grid with SPLITS splits (default 3) on every call a split kernel takes, and under
#     the chooser (its rule), four shards each, eight processes side by side; masked rows with both;
#     the same with the sm80 family forced, with SPLITS splits and under its rule;
#   - the decode grid with =3 and the dense path forced (kv-prefill-dense), so that chunked prefill
#     runs split; the decode grid (its NaN rule included) under the chooser and with kv-simt;
#   - compute-sanitizer memcheck, racecheck and synccheck on the hdim128 cases with =3;
#   - chunked prefill, bench/decode_bench.py --new N --shapes 1x8192,4x8192 for N in PREFILL
#     (default 16,64,128,512), under the chooser and without the split (=1), and with the sm80
#     family forced with the split turned off (fwd-split=1) and by its rule; the kernels' times of 128 new tokens
#     (bench/decode_kernel_times.py --new 128) under the chooser and with sm80.
# STEPS (default checks,bench): checks (grids, masked rows, decode, sanitizers) and bench (the
# timings), about five minutes each, so that a call of ten minutes can take one of them.
# Usage: bash bench/device/split_gpu.sh  (carry: [".deps"] for cmocka; pass FLASHATTN_BENCH_COMMIT,
# the device's copy of the tree may carry stale git metadata)
set -uo pipefail
AB_NAME=split AB_MESON_ARGS=-Dconformance_grid=short
mkdir -p .ab && : > .ab/split-empty.patch
BASE_PATCH=.ab/split-empty.patch
. "$(dirname "$0")/ab_builds.sh"
export FLASHATTN_CACHE_DIR=$root/build-split-kernel-cache FLASHATTN_COMPILE_LOG=0
B=$root/build-split-B
forced="fwd-split=${SPLITS:-3}"
shards=("hdim64" "hdim128" "hdim256" "-hdim64,-hdim128,-hdim256")
kernels_env() { [ "$1" = default ] && echo -u FLASHATTN_KERNELS || echo FLASHATTN_KERNELS=$1; }
tag() { echo "${1//[=,]/-}"; }
# the short grid in four shards under each FLASHATTN_KERNELS value given, side by side
grids() {
  local pids=() names=() kernels i j f
  for kernels in "$@"; do
    for i in 0 1 2 3; do
      timeout 300 env $(kernels_env $kernels) "$B/tests/conformance/conformance" --backend cuda --grid short \
        --filter "${shards[$i]}" > "$OUT/grid-$(tag $kernels)-$i.txt" 2>&1 &
      pids+=($!) names+=("$kernels ${shards[$i]}:$(tag $kernels)-$i")
    done
  done
  for j in "${!pids[@]}"; do
    wait "${pids[$j]}"; rc=$?; [ $rc -ne 0 ] && status=1
    f="$OUT/grid-${names[$j]##*:}.txt"
    echo "$(stamp) short grid, FLASHATTN_KERNELS=${names[$j]%:*}: exit $rc; $(grep -E '^\[  (PASSED|FAILED)' "$f" | tr '\n' ' ')"
    grep -E '^\[  FAILED  \] ' "$f" | head -5
  done
}
steps=${STEPS:-checks,bench}
if [[ $steps == *checks* ]]; then
grids "$forced" default
grids "sm80,$forced" sm80
for kernels in "$forced" default "sm80,$forced" sm80; do
  f="$OUT/masked-rows-$(tag $kernels).txt"
  timeout 120 env $(kernels_env $kernels) "$B/tests/conformance/masked_rows" --backend cuda > "$f" 2>&1
  rc=$?; [ $rc -ne 0 ] && status=1
  echo "$(stamp) masked rows, FLASHATTN_KERNELS=$kernels: exit $rc; $(tail -1 "$f")"
done
for kernels in "$forced,kv-prefill-dense" default kv-simt; do
  f="$OUT/decode-$(tag $kernels).txt"
  timeout 150 env $(kernels_env $kernels) "$B/tests/conformance/decode" --backend cuda > "$f" 2>&1
  rc=$?; [ $rc -ne 0 ] && status=1
  echo "$(stamp) decode grid, FLASHATTN_KERNELS=$kernels: exit $rc; $(tail -1 "$f")"
  grep -E "FAIL|nan rule" "$f" | head -8
done
for kernels in "$forced" "sm80,$forced"; do
  for tool in memcheck racecheck synccheck; do
    f="$OUT/$tool-$(tag $kernels).log"
    timeout 150 env FLASHATTN_KERNELS=$kernels compute-sanitizer --tool $tool --error-exitcode 9 \
      "$B/tests/conformance/conformance" --backend cuda --grid short --filter hdim128 > "$f" 2>&1
    rc=$?; [ $rc -ne 0 ] && status=1
    echo "$(stamp) $tool hdim128, FLASHATTN_KERNELS=$kernels: exit $rc; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$f" | tail -1)"
  done
done
fi
lib=$B/libflashattn.so
if [[ $steps == *bench* ]]; then
for kernels in default fwd-split=1 sm80,fwd-split=1 sm80; do
  for n in $(echo "${PREFILL:-16,64,128,512}" | tr ',' ' '); do
    echo "== FLASHATTN_KERNELS=$kernels: decode_bench.py --new $n"
    env $(kernels_env $kernels) FLASHATTN_LIBRARY=$lib timeout 100 python3 bench/decode_bench.py --new "$n" --shapes 1x8192,4x8192 2>&1 |
      tee -a "$OUT/prefill-$(tag $kernels).md"
  done
done
for kernels in default sm80; do
  env $(kernels_env $kernels) FLASHATTN_LIBRARY=$lib timeout 60 python3 bench/decode_kernel_times.py \
    --new 128 --shapes 1x8192,4x8192 2>&1 | grep -v -i warn | tee -a "$OUT/prefill-kernels-split.md"
done
fi
echo "$(stamp) done"
echo "== overall: $([ $status -eq 0 ] && echo PASSED || echo FAILED)"
exit $status
