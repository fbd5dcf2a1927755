#!/usr/bin/env bash
# Runs on a machine with one CUDA GPU: everything docs/benchmarks.md's decode section reports, on
# this tree built the fast way (-Dcuda-kernels=rtc), in one call. Logs under $OUT as it goes (packed
# at the end into $OUT/all.tgz):
#   - decode_ab_gpu.sh on this tree alone (no A side): the decode grid under the chooser and
#     kv-simt, memcheck / racecheck / synccheck on the bf16 cases and memcheck on the bad calls,
#     the kernel times and replay timelines, and bench/decode_bench.py --graph contiguous and paged
#     (page 64) beside SDPA flash and cuDNN (the decode table);
#   - the MLA cases (d 576 over d_v 512) under the three sanitizers (*-mla.log);
#   - MLA decode timed (bench-mla.md): --dim 576 --dim-v 512 --shared-v at 128 and 16 query heads
#     over one KV head, contiguous, and at 128 paged with pages of 64; against the device's copy rate
#     (SDPA's flash and cuDNN backends refuse these head dims);
#   - Nsight Compute (clock control off) on the tensor-core decode kernel at 1 x 4k: its sections
#     (ncu-ours-4096.txt) and its stall samples by instruction (stalls-4096.txt,
#     bench/device/ncu_stalls.py).
# Usage: FLASHATTN_BENCH_COMMIT=<hash> bash bench/device/decode_table_gpu.sh  (carry: [".deps"])
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
: > build-decode-table-empty.patch
BASE_PATCH=build-decode-table-empty.patch FAMILIES=kv-simt AB_SIDES=B REPEAT=0 \
  bash "$(dirname "$0")/decode_ab_gpu.sh" > "$OUT/console-ab.txt" 2>&1
status=$?
grep -E "^\[|PASSED|FAILED|FAIL" "$OUT/console-ab.txt" | head -30
export PATH=/opt/torch/.venv/bin:/usr/local/cuda/bin:$PATH
. "$(dirname "$0")/cmocka_env.sh"
B=$PWD/build-decode-B
export FLASHATTN_CACHE_DIR=$PWD/build-decode-kernel-cache FLASHATTN_COMPILE_LOG=0 FLASHATTN_LIBRARY=$B/libflashattn.so
for tool in memcheck racecheck synccheck; do
  timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 "$B/tests/conformance/decode" --backend cuda --filter mla \
    > "$OUT/$tool-mla.log" 2>&1
  rc=$?; [ $rc -ne 0 ] && status=1
  echo "$tool, the MLA cases: exit $rc; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$tool-mla.log" | tail -1)"
done
for args in "--heads 128/1" "--heads 16/1" "--heads 128/1 --page 64"; do
  timeout 120 python3 bench/decode_bench.py --graph $args --dim 576 --dim-v 512 --shared-v \
    --shapes 1x4096,1x32768,8x8192,64x4096 2>&1 | tee -a "$OUT/bench-mla.md" | grep -vE "^# provenance"
done
RUN="--decode --backend cuda --dtype bf16 --batch 1 --kv 4096 --new 1 --heads 32 --heads-kv 8 --dim 128 --check-on-device --repeat 3"
"$B/tools/flashattn" run $RUN > "$OUT/warm-4096.txt" 2>&1 || tail -3 "$OUT/warm-4096.txt"
timeout 150 ncu --clock-control none --kernel-name regex:decode_mma --launch-skip 2 --launch-count 2 --section SpeedOfLight \
  --section WarpStateStats --section SchedulerStats --section SourceCounters --import-source no -o "$OUT/ours-4096" -f \
  "$B/tools/flashattn" run $RUN > "$OUT/ncu-ours-4096.log" 2>&1
ncu --import "$OUT/ours-4096.ncu-rep" --print-units base > "$OUT/ncu-ours-4096.txt" 2>&1
ncu --import "$OUT/ours-4096.ncu-rep" --page source --csv --print-source sass > /tmp/decode-source-4096.csv 2>&1
python3 bench/device/ncu_stalls.py /tmp/decode-source-4096.csv 40 > "$OUT/stalls-4096.txt"
grep -E "Duration|Issue Slots Busy|Eligible Warps|No Eligible|Warp Cycles Per Issued" "$OUT/ncu-ours-4096.txt" | sed -E 's/ +/ /g' | head
head -25 "$OUT/stalls-4096.txt"
rm -f "$OUT/ours-4096.ncu-rep" build-decode-table-empty.patch
echo "== overall: $([ $status -eq 0 ] && echo PASSED || echo FAILED)"
(cd "$OUT" && tar -czf /tmp/decode-table-out.tgz . && rm -rf ./* && mv /tmp/decode-table-out.tgz all.tgz)
exit $status
