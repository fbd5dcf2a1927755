#!/usr/bin/env bash
# Runs on a machine with one CUDA GPU: the MLA decode kernel (d 576 over d_v 512) of this tree (B)
# against the same tree with BASE_PATCH reversed (A), both built the fast way (-Dcuda-kernels=rtc),
# in one call; logs under $OUT as it goes, packed at the end into $OUT/all.tgz:
#   - B: the decode grid (decode-default.txt), the MLA cases under memcheck, racecheck and synccheck;
#     with SWITCH=<tokens> the same again under FLASHATTN_KERNELS=<tokens> (decode-<tokens>.txt,
#     <tool>-mla-<tokens>.log; SWITCH_ONLY=1: only under it), which the split counts and the
#     profile below then run under too;
#   - bench/decode_bench.py --graph on A and B (AB_SIDES; B-<tokens>: B under
#     FLASHATTN_KERNELS=<tokens>) in turn, REPEAT rounds (bench-mla.md): 16 and 128
#     query heads over one KV head with v_cache a view of k_cache (--shared-v, MLA's latent cache),
#     contiguous and paged (64), and 16 heads with V a cache of its own; against the device's copy
#     rate (SDPA's backends refuse these head dims);
#   - B's split counts at 1 x 4k and 1 x 32k (--splits; splits.md; SPLITS="": none);
#   - Nsight Compute (clock control off) on B's MLA kernel at 64 x 4k: its sections and stall
#     samples (ncu-mla.txt, stalls-mla.txt; MLA_PROFILE=0: none).
# Usage: BASE_PATCH=<patch> FLASHATTN_BENCH_COMMIT=<hash> bash bench/device/mla_ab_gpu.sh  (carry: [".deps"]);
# an empty BASE_PATCH with AB_SIDES="B B-<switch>" compares a switch on this tree.
set -uo pipefail
AB_NAME=mla
. "$(dirname "$0")/ab_builds.sh"
export FLASHATTN_CACHE_DIR=$root/build-mla-kernel-cache FLASHATTN_COMPILE_LOG=0
B=$root/build-mla-B
SWITCH=${SWITCH:-}
checks=("" ${SWITCH:+"$SWITCH"})
[ "${SWITCH_ONLY:-0}" = 1 ] && checks=("$SWITCH")
for sw in "${checks[@]}"; do
  tag=${sw:-default}
  env ${sw:+FLASHATTN_KERNELS=$sw} timeout 150 "$B/tests/conformance/decode" --backend cuda > "$OUT/decode-$tag.txt" 2>&1
  rc=$?; [ $rc -ne 0 ] && status=1
  echo "$(stamp) decode grid ($tag): exit $rc; $(tail -1 "$OUT/decode-$tag.txt")"
  grep -E "FAIL" "$OUT/decode-$tag.txt" | head -5
  for tool in memcheck racecheck synccheck; do
    env ${sw:+FLASHATTN_KERNELS=$sw} timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 \
      "$B/tests/conformance/decode" --backend cuda --filter mla > "$OUT/$tool-mla${sw:+-$sw}.log" 2>&1
    rc=$?; [ $rc -ne 0 ] && status=1
    echo "$(stamp) $tool, the MLA cases ($tag): exit $rc; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$tool-mla${sw:+-$sw}.log" | tail -1)"
  done
done
[ -n "$SWITCH" ] && export FLASHATTN_KERNELS=$SWITCH
SHAPES=${MLA_SHAPES:-1x4096,1x32768,8x8192,64x4096}
switch_of() { case $1 in *-*) echo "FLASHATTN_KERNELS=${1#*-}" ;; *) echo "-u FLASHATTN_KERNELS" ;; esac; }
for r in $(seq 1 "${REPEAT:-2}"); do
  for side in ${AB_SIDES:-A B}; do
    for args in "--heads 16/1 --shared-v" "--heads 128/1 --shared-v" "--heads 128/1 --shared-v --page 64" "--heads 16/1"; do
      echo "== round $r, $side: $args" | tee -a "$OUT/bench-mla.md"
      env $(switch_of $side) FLASHATTN_LIBRARY=$root/build-mla-${side%%-*}/libflashattn.so timeout 90 \
        python3 bench/decode_bench.py --graph $args \
        --dim 576 --dim-v 512 --shapes "$SHAPES" 2>&1 | grep -vE "Warning|return F\." | tee -a "$OUT/bench-mla.md" |
        grep -E "^\| [0-9]" | cut -d'|' -f2-4
    done
  done
done
echo "$(stamp) timed"
for shape in 1x4096 1x32768; do
  for n in ${SPLITS-8 16 32 64 128}; do
    echo "== B, $shape, --splits $n" >> "$OUT/splits.md"
    FLASHATTN_LIBRARY=$B/libflashattn.so timeout 60 python3 bench/decode_bench.py --graph --heads 16/1 --shared-v \
      --dim 576 --dim-v 512 --splits "$n" --shapes "$shape" 2>&1 | grep -E "^\| [0-9]" | tee -a "$OUT/splits.md" |
      sed "s/^/splits $n: /" | cut -d'|' -f1-4
  done
done
if [ "${MLA_PROFILE:-1}" = 1 ]; then
  FLASHATTN_LIBRARY=$B/libflashattn.so timeout 150 ncu --clock-control none --kernel-name regex:decode_mla --launch-skip 3 \
    --launch-count 1 --section LaunchStats --section Occupancy --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section WarpStateStats --section SchedulerStats --section SourceCounters --import-source no -o "$OUT/mla" -f \
    python3 bench/decode_bench.py --heads 16/1 --shared-v --dim 576 --dim-v 512 --shapes 64x4096 > "$OUT/ncu-mla.log" 2>&1
  ncu --import "$OUT/mla.ncu-rep" --print-units base > "$OUT/ncu-mla.txt" 2>&1
  ncu --import "$OUT/mla.ncu-rep" --page source --csv --print-source sass > /tmp/mla-source.csv 2>&1
  python3 bench/device/ncu_stalls.py /tmp/mla-source.csv 40 > "$OUT/stalls-mla.txt"
  grep -E "Grid Size|Duration|DRAM Throughput|L2 Cache Throughput|Eligible Warps|Warp Cycles Per Issued" "$OUT/ncu-mla.txt" |
    sed -E 's/ +/ /g'
  head -16 "$OUT/stalls-mla.txt"
  rm -f "$OUT/mla.ncu-rep"
fi
echo "$(stamp) done"
echo "== overall: $([ $status -eq 0 ] && echo PASSED || echo FAILED)"
pack_out
exit $status
