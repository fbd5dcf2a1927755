#!/usr/bin/env bash
# Runs on a machine with one Hopper GPU: FLASHATTN_KERNELS=kv-mla-sm90 (decode/decode_mla_sm90_kernels.cuh:
# MLA decode over a latent cache in 64-row tiles on wgmma) against the default MLA kernel on this
# tree, built the fast way (-Dcuda-kernels=rtc), in one call: mla_ab_gpu.sh with the switch, so
#   - the decode grid and the MLA cases under memcheck, racecheck and synccheck, without and with it;
#   - the MLA table (d 576 over d_v 512, 16 and 128 query heads, shared and separate V, contiguous
#     and paged) on the default kernel and on the Hopper kernel, one round;
#   - the split counts at 1 x 4k and 1 x 32k and the kernel's profile at 64 x 4k under the switch.
# Logs under $OUT (all.tgz). Usage: FLASHATTN_BENCH_COMMIT=<hash> bash bench/device/mla_sm90_gpu.sh
# (carry: [".deps"]; about 6 minutes; LEAN=1: the checks under the switch only, no split counts or
# profile, about 4)
set -uo pipefail
: > build-mla-sm90-empty.patch
if [ "${LEAN:-0}" = 1 ]; then
  export SWITCH_ONLY=1 SPLITS="" MLA_PROFILE=0
fi
BASE_PATCH=build-mla-sm90-empty.patch SWITCH=kv-mla-sm90 \
  AB_SIDES="B B-kv-mla-sm90" REPEAT=${REPEAT:-1} bash "$(dirname "$0")/mla_ab_gpu.sh"
status=$?
rm -f build-mla-sm90-empty.patch
exit $status
