#!/usr/bin/env bash
# Runs on a machine with one CUDA GPU: where one-sequence decode spends its time, ours against
# PyTorch's SDPA backends, in one build of this tree made the fast way (-Dcuda-kernels=rtc). Logs
# under $OUT as it goes:
#   - splits.md: bench/decode_bench.py --graph at batch 1 (4k, 16k, 128k) with the library's split
#     count and with num_splits forced to each of SPLITS (default 8,32,64,128);
#   - kernels.md: bench/decode_kernel_times.py (each kernel's time in the same calls) at the
#     library's count and at 32 / 64 splits;
#   - ncu-ours-<kv>.txt: Nsight Compute (clock control off) on the check, decode and combine kernels
#     of `flashattn run --decode` at batch 1, with the decode kernel's stall reasons by instruction
#     (stalls-<kv>.txt, bench/device/ncu_stalls.py);
#   - ncu-sdpa-<kv>.txt: the same sections on every kernel of SDPA's cuDNN and flash backends on
#     that shape: their grids, blocks, registers and durations.
# Usage: bash bench/device/decode_profile_gpu.sh   (pass FLASHATTN_BENCH_COMMIT)
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PATH=/opt/torch/.venv/bin:/usr/local/cuda/bin:$PATH
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0)) s]"; }
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader | tee "$OUT/gpu.txt"
date -u "+%F %T UTC"
B=build-decode-profile
if [ ! -f "$B/build.ninja" ]; then
  meson setup "$B" -Dcuda=enabled -Dcuda-kernels=rtc -Dhip=disabled -Dopencl=disabled -Dbench=false -Dtests=false \
    > "$OUT/setup.log" 2>&1 || { echo "setup failed"; tail -20 "$OUT/setup.log"; exit 1; }
fi
ninja -C "$B" > "$OUT/build.log" 2>&1 || { echo "build failed"; tail -20 "$OUT/build.log"; exit 1; }
export FLASHATTN_CACHE_DIR=$PWD/$B-kernel-cache FLASHATTN_COMPILE_LOG=0 FLASHATTN_LIBRARY=$PWD/$B/libflashattn.so
echo "$(stamp) built"
shapes=${SHAPES:-1x4096,1x16384,1x131072}
for n in 0 $(echo "${SPLITS:-8,32,64,128}" | tr ',' ' '); do
  echo "== splits $n" >> "$OUT/splits.md"
  timeout 120 python3 bench/decode_bench.py --graph --splits "$n" --shapes "$shapes" >> "$OUT/splits.md" 2>&1
done
grep -E "^== |^\| 1 " "$OUT/splits.md"
echo "$(stamp) splits"
for n in 0 32 64; do
  echo "== splits $n" >> "$OUT/kernels.md"
  timeout 60 python3 bench/decode_kernel_times.py --splits "$n" --shapes "$shapes" 2>&1 | grep -v -i warn >> "$OUT/kernels.md"
done
grep -E "^== |^\| 1 " "$OUT/kernels.md"
echo "$(stamp) kernel times"
sections="--section SpeedOfLight --section Occupancy --section LaunchStats --section SchedulerStats --section WarpStateStats --section MemoryWorkloadAnalysis"
for kv in 4096 131072; do
  RUN="--decode --backend cuda --dtype bf16 --batch 1 --kv $kv --new 1 --heads 32 --heads-kv 8 --dim 128 --check-on-device --repeat 3"
  "$B/tools/flashattn" run $RUN > "$OUT/warm-$kv.txt" 2>&1 || { echo "flashattn run failed"; tail "$OUT/warm-$kv.txt"; }
  timeout 150 ncu --clock-control none --kernel-name "regex:check|decode|combine" --launch-skip 4 --launch-count 4 $sections \
    --section SourceCounters --import-source no -o "$OUT/ours-$kv" -f "$B/tools/flashattn" run $RUN > "$OUT/ncu-ours-$kv.log" 2>&1
  ncu --import "$OUT/ours-$kv.ncu-rep" --print-units base > "$OUT/ncu-ours-$kv.txt" 2>&1
  echo "== ours, 1 x $kv"
  grep -E "^  [a-zA-Z_]|Duration|Grid Size|Block Size|Registers Per|Achieved Occupancy|Memory Throughput|DRAM Throughput|Issue Slots Busy|Eligible Warps|No Eligible|Warp Cycles Per Issued" \
    "$OUT/ncu-ours-$kv.txt" | sed -E 's/ +/ /g' | head -45
  ncu --import "$OUT/ours-$kv.ncu-rep" --kernel-name regex:decode --page source --csv --print-source sass > "$OUT/source-$kv.csv" 2>&1
  python3 bench/device/ncu_stalls.py "$OUT/source-$kv.csv" 40 > "$OUT/stalls-$kv.txt"
  head -40 "$OUT/stalls-$kv.txt"
  rm -f "$OUT/ours-$kv.ncu-rep" "$OUT/source-$kv.csv"
  cat > "$OUT/sdpa_call.py" <<PY
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
q = torch.randn(1, 32, 1, 128, device="cuda", dtype=torch.bfloat16)
k, v = (torch.randn(1, 8, $kv, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION):
    with sdpa_kernel([backend]):
        for _ in range(3):
            F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
torch.cuda.synchronize()
PY
  timeout 150 ncu --clock-control none $sections python3 "$OUT/sdpa_call.py" > "$OUT/ncu-sdpa-$kv.txt" 2>&1
  echo "== SDPA (cuDNN, then flash), 1 x $kv: every kernel of three calls each"
  grep -E "^  [a-zA-Z_]|Duration|Grid Size|Block Size|Registers Per|DRAM Throughput" "$OUT/ncu-sdpa-$kv.txt" | sed -E 's/ +/ /g' | head -80
  echo "$(stamp) ncu 1 x $kv"
done
echo "$(stamp) done"
