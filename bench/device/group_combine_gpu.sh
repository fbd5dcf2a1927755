#!/usr/bin/env bash
# Runs on a machine with one CUDA GPU: FLASHATTN_KERNELS=kv-group-combine (decode/combine_groups.cuh:
# the splits of each row merged by a group of 32 lanes where they fit its read-ahead) against the
# default combine on this tree, built the fast way (-Dcuda-kernels=rtc), in one call:
#   - decode_ab_gpu.sh with the switch: the decode grid under the chooser, kv-simt and the switch,
#     memcheck / racecheck / synccheck on the bf16 cases and memcheck on the bad calls with and
#     without it, kernel times and replay timelines, the d 128 decode table contiguous and paged,
#     one more round at batch 1 (d128.tgz);
#   - mla_ab_gpu.sh with the switch: the MLA cases under the sanitizers, the MLA table (d 576 over
#     d_v 512) on each side, two rounds, the split counts and the MLA kernel's profile.
# Logs under $OUT (d128.tgz, all.tgz). Usage: FLASHATTN_BENCH_COMMIT=<hash> bash
# bench/device/group_combine_gpu.sh  (carry: [".deps"])
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
: > build-group-combine-empty.patch
BASE_PATCH=build-group-combine-empty.patch FAMILIES=kv-simt SWITCH=kv-group-combine \
  AB_SIDES="B B-kv-group-combine" REPEAT=1 bash "$(dirname "$0")/decode_ab_gpu.sh" > /tmp/group-combine-d128.txt 2>&1
status=$?
grep -E "^\[|^== overall" /tmp/group-combine-d128.txt
grep -E "^== |^\| (1|8|64) \|" /tmp/group-combine-d128.txt | grep -vE "kernel times" | cut -d'|' -f1-7
mv "$OUT/all.tgz" /tmp/group-combine-d128.tgz
BASE_PATCH=build-group-combine-empty.patch AB_SIDES="B B-kv-group-combine" REPEAT=2 \
  bash "$(dirname "$0")/mla_ab_gpu.sh" 2>&1 | tail -50
[ "${PIPESTATUS[0]}" -ne 0 ] && status=1
mv /tmp/group-combine-d128.tgz "$OUT/d128.tgz"
rm -f build-group-combine-empty.patch
exit $status
