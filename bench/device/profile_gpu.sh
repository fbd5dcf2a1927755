#!/usr/bin/env bash
# Runs on a machine with one CUDA GPU: Nsight Compute (clock control off) on one launch of a kernel
# of ours and, for comparison, of PyTorch's cuDNN attention on the same shape, with where each one's
# warps wait, instruction by instruction. Built the fast way (-Dcuda-kernels=rtc). Logs under $OUT:
#   - ncu-ours.txt / ncu-cudnn.txt: speed of light, occupancy, launch, scheduler and warp-state
#     statistics, memory workload;
#   - stalls-ours.txt: the SASS instructions with the most warp-stall samples (the top TOP), each with
#     its samples, its share, and the stall reason columns ncu gives for it.
# Environment: KERNEL (regex of our kernel, default ws_backward_kernel), RUN (the flashattn run
# arguments, default bf16 d 128, batch 4 x 4096 x 16 heads, forward + backward), CUDNN_KERNEL (regex,
# default the cuDNN backward: bprop), TOP (40), BACKWARD (1: PyTorch's backward, 0: forward), SHAPE
# (the cuDNN call's batch,seqlen,heads,head dim; default 4,4096,16,128, RUN's default shape).
# Usage: bash bench/device/profile_gpu.sh   (carry: [".deps"] is not needed: no tests are built)
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PATH=/opt/torch/.venv/bin:/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader | tee "$OUT/gpu.txt"
date -u "+%F %T UTC"
B=build-profile
if [ ! -f "$B/build.ninja" ]; then
  meson setup "$B" -Dcuda=enabled -Dcuda-kernels=rtc -Dhip=disabled -Dopencl=disabled -Dbench=false -Dtests=false \
    > "$OUT/setup.log" 2>&1 || { echo "setup failed"; tail -20 "$OUT/setup.log"; exit 1; }
fi
ninja -C "$B" tools/flashattn > "$OUT/build.log" 2>&1 || { echo "build failed"; tail -20 "$OUT/build.log"; exit 1; }
export FLASHATTN_CACHE_DIR=$PWD/$B-kernel-cache FLASHATTN_COMPILE_LOG=0
RUN=${RUN:---backend cuda --dtype bf16 --batch 4 --seqlen-q 4096 --seqlen-k 4096 --heads 16 --dim 128 --backward --repeat 1}
"$B/tools/flashattn" run $RUN > "$OUT/warm.txt" 2>&1 || { echo "flashattn run failed"; tail "$OUT/warm.txt"; exit 1; }
sections="--section SpeedOfLight --section Occupancy --section LaunchStats --section SchedulerStats --section WarpStateStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis"
timeout 240 ncu --clock-control none --kernel-name "regex:${KERNEL:-ws_backward_kernel}" --launch-count 1 $sections \
  --section SourceCounters --import-source no -o "$OUT/ours" -f "$B/tools/flashattn" run $RUN > "$OUT/ncu-ours.log" 2>&1
ncu --import "$OUT/ours.ncu-rep" --print-units base > "$OUT/ncu-ours.txt" 2>&1
echo "== ours (${KERNEL:-ws_backward_kernel})"
grep -E "Duration|Registers Per|Achieved Occupancy|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|Eligible Warps|No Eligible|Warp Cycles Per Issued|Stall|L2 Hit" "$OUT/ncu-ours.txt" | sed -E 's/ +/ /g' | head -24
ncu --import "$OUT/ours.ncu-rep" --page source --csv --print-source sass > "$OUT/source-ours.csv" 2>&1
python3 bench/device/ncu_stalls.py "$OUT/source-ours.csv" "${TOP:-40}" "$OUT/sass-stalls-ours.txt" > "$OUT/stalls-ours.txt"
head -60 "$OUT/stalls-ours.txt"
rm -f "$OUT/ours.ncu-rep" "$OUT/build.log" "$OUT/setup.log" "$OUT/ncu-ours.log"
echo "== cuDNN (${CUDNN_KERNEL:-bprop})"
cat > "$OUT/cudnn_call.py" <<'PY'
import os, torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
b, s, h, d = map(int, os.environ.get("SHAPE", "4,4096,16,128").split(","))
q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
    for _ in range(2):
        o = F.scaled_dot_product_attention(q, k, v)
        if os.environ.get("BACKWARD", "1") == "1":
            o.backward(torch.ones_like(o))
torch.cuda.synchronize()
PY
timeout 200 ncu --clock-control none --kernel-name "regex:${CUDNN_KERNEL:-bprop}" --launch-skip 1 --launch-count 1 $sections \
  python3 "$OUT/cudnn_call.py" > "$OUT/ncu-cudnn.txt" 2>&1
grep -E "^  [a-z_]|Duration|Registers Per|Block Size|Grid Size|Achieved Occupancy|Compute \(SM\) Throughput|Issue Slots Busy|Eligible Warps|No Eligible|Warp Cycles Per Issued|Shared Memory Configuration Size|Dynamic Shared" "$OUT/ncu-cudnn.txt" | sed -E 's/ +/ /g' | head -24
rm -f "$OUT/source-ours.csv"
