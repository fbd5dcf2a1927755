#!/usr/bin/env bash
# Runs on a machine with one GPU: the opt-in FLASHATTN_KERNELS=dsum-zero (the fused backwards' dQ
# accumulator, sm80 and Hopper at d 64 / 128, cleared by dsum_kernel instead of a memset) checked
# and timed in one call of about 6 minutes: this tree built the fast way (-Dcuda-kernels=rtc);
# bench/gpu_ab.py of the build beside itself with the switch (d 64 / 128, 1k and 4k, both causal
# settings) under the chooser, then with the sm80 family forced on both sides; the short grid's d 64
# and 128 cases with the switch under the chooser and with sm80 forced, and masked rows with it, side
# by side; memcheck on the d 64 cases with it. Logs under $OUT as it goes, packed into all.tgz.
# Delete this script once the switch is decided (made the default or removed).
# Usage: FLASHATTN_BENCH_COMMIT=<hash> bash bench/device/dsum_zero_gpu.sh  (carry: [".deps"])
set -uo pipefail
. "$(dirname "$0")/rtc_build_env.sh"
for family in default sm80; do
  prefix=; [ $family = sm80 ] && prefix=sm80,
  timeout 90 env $([ $family = sm80 ] && echo FLASHATTN_KERNELS=sm80 || echo -u FLASHATTN_KERNELS) \
    python3 bench/gpu_ab.py --lib "$B/libflashattn.so" --lib "$B/libflashattn.so" --names $family,dsum-zero \
    --kernels-b "${prefix}dsum-zero" --dims 64,128 --seqlens 1024,4096 --repeats 2 2>&1 | tee "$OUT/ab-$family.md"
  echo "$(stamp) A/B ($family) done"
done
pids=() logs=()
for family in default sm80; do
  prefix=; [ $family = sm80 ] && prefix=sm80,
  for f in hdim64 hdim128; do
    timeout 200 env FLASHATTN_KERNELS="${prefix}dsum-zero" "$B/tests/conformance/conformance" --backend cuda \
      --grid short --filter $f > "$OUT/grid-$family-$f.txt" 2>&1 &
    pids+=($!) logs+=("grid-$family-$f")
  done
done
timeout 200 env FLASHATTN_KERNELS=dsum-zero "$B/tests/conformance/masked_rows" --backend cuda \
  > "$OUT/masked-rows.txt" 2>&1 &
pids+=($!) logs+=(masked-rows)
for i in "${!pids[@]}"; do
  wait "${pids[$i]}"; rc=$?; [ $rc -ne 0 ] && status=1
  echo "${logs[$i]}: exit $rc $(grep -hE '^\[  (PASSED|FAILED)' "$OUT/${logs[$i]}.txt" | tr '\n' ' ')$(tail -1 "$OUT/${logs[$i]}.txt" | grep checks)"
done
grep -hE '^\[  FAILED  \] ' "$OUT"/grid-*.txt | head -5
echo "$(stamp) grids"
timeout 80 env FLASHATTN_KERNELS=dsum-zero compute-sanitizer --tool memcheck --error-exitcode 9 \
  "$B/tests/conformance/conformance" --backend cuda --grid short --filter hdim64 > "$OUT/memcheck-hdim64.log" 2>&1
rc=$?; [ $rc -ne 0 ] && status=1
echo "$(stamp) memcheck hdim64: exit $rc; $(grep -E 'ERROR SUMMARY|PASSED|FAILED' "$OUT/memcheck-hdim64.log" | tail -2 | tr '\n' ' ')"
echo "$(stamp) done, status $status"
pack_out
exit $status
