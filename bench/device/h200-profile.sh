#!/usr/bin/env bash
# Profiles the sm80 kernels on a CUDA machine (an H200 in the project's runs): ncu (clock control off) on one launch of
# each kernel at bf16, d 128, seqlen 4096, and per-kernel SASS statistics (matrix, shared-memory
# fragment, local-memory and special-function instructions). Usage: bash bench/device/h200-profile.sh DIR
set -uo pipefail
B=${1:-.deps/h200}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/$B/lib:${LD_LIBRARY_PATH:-}
export PATH=/opt/torch/.venv/bin:/usr/local/cuda/bin:$PATH
run="$B/tools/flashattn run --backend cuda --dtype bf16 --batch 4 --seqlen-q 4096 --seqlen-k 4096 --heads 16 --dim 128 --backward --repeat 1"
stalls=smsp__warp_issue_stalled_barrier_per_warp_active.pct,smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct,smsp__warp_issue_stalled_short_scoreboard_per_warp_active.pct,smsp__warp_issue_stalled_mio_throttle_per_warp_active.pct,smsp__warp_issue_stalled_math_pipe_throttle_per_warp_active.pct,smsp__warp_issue_stalled_wait_per_warp_active.pct,smsp__warp_issue_stalled_lg_throttle_per_warp_active.pct,smsp__warp_issue_stalled_not_selected_per_warp_active.pct,smsp__warp_issue_stalled_selected_per_warp_active.pct,smsp__warp_issue_stalled_dispatch_stall_per_warp_active.pct,smsp__warp_issue_stalled_no_instruction_per_warp_active.pct,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum
for k in ${KERNELS:-forward_kernel bwd_kernel}; do
  timeout 150 ncu --clock-control none --kernel-name "regex:$k" --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section WarpStateStats --section ComputeWorkloadAnalysis \
    --section LaunchStats $run > "$OUT/ncu-$k.txt" 2>&1
  echo "== $k"; grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Theoretical Occupancy|Stall|Warp Cycles Per Issued|Issue Slots Busy|Executed Ipc A" "$OUT/ncu-$k.txt" | head -16
  timeout 150 ncu --clock-control none --kernel-name "regex:$k" --launch-skip 1 --launch-count 1 \
    --metrics "$stalls" $run > "$OUT/ncu-stalls-$k.txt" 2>&1
  grep -E "smsp__|sm__pipe|l1tex__" "$OUT/ncu-stalls-$k.txt" | sed -E 's/ +/ /g' 
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
        for op in ("HMMA", "LDSM", "LDL", "STL", "MUFU.EX2", "BAR.SYNC", "LDGSTS", "STG", "RED", "STS"):
            if re.search(r"\b" + re.escape(op), line):
                stats[cur][op] = stats[cur].get(op, 0) + 1
for f, s in stats.items():
    if "Li128E" in f and s:
        print(f[:70], s)
PY
