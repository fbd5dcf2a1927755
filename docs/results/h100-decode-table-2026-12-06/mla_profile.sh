#!/usr/bin/env bash
# one-off: profile the MLA decode kernel
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
: > build-empty.patch
AB_NAME=mla BASE_PATCH=build-empty.patch
. bench/device/ab_builds.sh
B=$root/build-mla-B
export FLASHATTN_CACHE_DIR=$root/build-mla-cache FLASHATTN_COMPILE_LOG=0 FLASHATTN_LIBRARY=$B/libflashattn.so
for shape in "16/1 1x4096" "16/1 64x4096" "128/1 1x32768"; do
  set -- $shape; tag=$(echo "$1-$2" | tr / _)
  timeout 150 ncu --clock-control none --kernel-name regex:decode_mla --launch-skip 3 --launch-count 1 \
    --section LaunchStats --section Occupancy --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section WarpStateStats --section SchedulerStats --section SourceCounters --import-source no -o "$OUT/mla-$tag" -f \
    python3 bench/decode_bench.py --heads $1 --dim 576 --dim-v 512 --shared-v --shapes $2 > "$OUT/ncu-$tag.log" 2>&1
  ncu --import "$OUT/mla-$tag.ncu-rep" --print-units base > "$OUT/ncu-$tag.txt" 2>&1
  ncu --import "$OUT/mla-$tag.ncu-rep" --page source --csv --print-source sass > /tmp/src-$tag.csv 2>&1
  python3 bench/device/ncu_stalls.py /tmp/src-$tag.csv 40 > "$OUT/stalls-$tag.txt"
  echo "== $tag"; grep -E "Grid Size|Block Size|Duration|Memory Throughput|DRAM Throughput|L2 Cache Throughput|L1/TEX Cache Throughput|Issue Slots Busy|Eligible Warps|Warp Cycles Per Issued|Achieved Occupancy|Registers Per" "$OUT/ncu-$tag.txt" | sed -E 's/ +/ /g'
  head -22 "$OUT/stalls-$tag.txt"
  rm -f "$OUT/mla-$tag.ncu-rep"
done
pack_out
