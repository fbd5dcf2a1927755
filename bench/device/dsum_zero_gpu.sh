#!/usr/bin/env bash
# Runs on a machine with one GPU: the opt-in FLASHATTN_KERNELS=sm90-dsum-zero (the Hopper backward's
# dQ accumulator at d 64 / 128 cleared by dsum_kernel instead of a memset) checked and timed in one
# call of about 4 minutes: this tree built the fast way (-Dcuda-kernels=rtc); bench/gpu_ab.py of the
# build beside itself with the switch (d 64 / 128, 1k and 4k, both causal settings); the short grid's
# d 64 and 128 cases and masked rows with the switch, side by side; memcheck on the d 64 cases with
# it. Logs under $OUT as it goes, packed into all.tgz. Delete this script once the switch is
# decided (made the default or removed).
# Usage: FLASHATTN_BENCH_COMMIT=<hash> bash bench/device/dsum_zero_gpu.sh  (carry: [".deps"])
set -uo pipefail
. "$(dirname "$0")/rtc_build_env.sh"
timeout 90 python3 bench/gpu_ab.py --lib "$B/libflashattn.so" --lib "$B/libflashattn.so" --names default,dsum-zero \
  --kernels-b sm90-dsum-zero --dims 64,128 --seqlens 1024,4096 --repeats 2 2>&1 | tee "$OUT/ab-dsum-zero.md"
echo "$(stamp) A/B done"
pids=()
for f in hdim64 hdim128; do
  timeout 170 env FLASHATTN_KERNELS=sm90-dsum-zero "$B/tests/conformance/conformance" --backend cuda --grid short \
    --filter $f > "$OUT/grid-$f.txt" 2>&1 &
  pids+=($!)
done
timeout 170 env FLASHATTN_KERNELS=sm90-dsum-zero "$B/tests/conformance/masked_rows" --backend cuda \
  > "$OUT/masked-rows.txt" 2>&1 &
pids+=($!)
for i in 0 1 2; do wait "${pids[$i]}"; rc=$?; [ $rc -ne 0 ] && status=1; echo "job $i exit $rc"; done
grep -hE '^\[  (PASSED|FAILED)' "$OUT"/grid-*.txt; grep -hE '^\[  FAILED  \] ' "$OUT"/grid-*.txt | head -5
echo "$(stamp) grids; masked rows: $(tail -1 "$OUT/masked-rows.txt")"
timeout 80 env FLASHATTN_KERNELS=sm90-dsum-zero compute-sanitizer --tool memcheck --error-exitcode 9 \
  "$B/tests/conformance/conformance" --backend cuda --grid short --filter hdim64 > "$OUT/memcheck-hdim64.log" 2>&1
rc=$?; [ $rc -ne 0 ] && status=1
echo "$(stamp) memcheck hdim64: exit $rc; $(grep -E 'ERROR SUMMARY|PASSED|FAILED' "$OUT/memcheck-hdim64.log" | tail -2 | tr '\n' ' ')"
echo "$(stamp) done, status $status"
pack_out
exit $status
