#!/usr/bin/env bash
# Profiles the sm80 kernels on the H200 device machine: ncu (clock control off) on one launch of
# each kernel at bf16, d 128, seqlen 4096, and per-kernel SASS statistics (matrix, shared-memory
# fragment, local-memory and special-function instructions). Usage: bash ci/h200-profile.sh DIR
set -uo pipefail
B=${1:-.deps/h200}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/$B/lib:${LD_LIBRARY_PATH:-}
export PATH=/opt/torch/.venv/bin:/usr/local/cuda/bin:$PATH
run="$B/tools/flashattn run --backend cuda --dtype bf16 --batch 4 --seqlen-q 4096 --seqlen-k 4096 --heads 16 --dim 128 --backward --repeat 1"
for k in forward_kernel dkdv_kernel dq_kernel; do
  timeout 150 ncu --clock-control none --kernel-name "regex:$k" --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section WarpStateStats --section ComputeWorkloadAnalysis \
    --section LaunchStats $run > "$OUT/ncu-$k.txt" 2>&1
  echo "== $k"; grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Theoretical Occupancy|Stall|Warp Cycles Per Issued|Issue Slots Busy|Executed Ipc A" "$OUT/ncu-$k.txt" | head -16
done
cuobjdump --dump-sass "$B/libflashattn.so" > "$OUT/sass.txt" 2>/dev/null
python3 - "$OUT/sass.txt" <<'PY' | tee "$OUT/sass-stats.txt"
import re, sys
cur, stats = None, {}
for line in open(sys.argv[1]):
    m = re.search(r"Function : (\S+)", line)
    if m:
        cur = m.group(1); stats[cur] = {}
        continue
    if cur and "bf16" not in cur and "nv_bfloat16" not in cur:
        continue
    if cur:
        for op in ("HMMA", "LDSM", "LDL", "STL", "MUFU.EX2", "BAR.SYNC", "LDGSTS", "STG"):
            if re.search(r"\b" + re.escape(op), line):
                stats[cur][op] = stats[cur].get(op, 0) + 1
for f, s in stats.items():
    if "Li128E" in f and s:
        print(f[:70], s)
PY
