#!/usr/bin/env bash
# Runs on a machine with one GPU: whether GPT-2 training's run-to-run spread at context 1024 comes
# from the backward's workspace. Every fa_backward allocates its workspace (the fp32 dQ accumulator,
# about 50 MB at GPT-2's shape) with cuMemAllocAsync from the device's default memory pool and frees
# it with cuMemFreeAsync; with the pool's release threshold at 0 (the driver's default) a
# synchronisation may hand that memory back, so the next step maps it again. Two processes, each
# training ours three times beside SDPA flash (bench/gpt2_train.py --impls
# flashattn,sdpa-flash,flashattn#2,flashattn#3): the default pool, then the pool told to keep what
# it holds (CU_MEMPOOL_ATTR_RELEASE_THRESHOLD = UINT64_MAX, set through the driver before torch
# starts). If the spread of ours (the median, fastest and slowest steps of each run) closes in the
# second, the fix is a workspace the context keeps, as the decode path's fa_gpu_scratch. Logs under
# $OUT, packed into all.tgz. CONTEXT (default 1024), TRAIN_STEPS (default 60).
# Usage: FLASHATTN_BENCH_COMMIT=<hash> bash bench/device/gpt2_pool_gpu.sh  (carry: [".deps"])
set -uo pipefail
. "$(dirname "$0")/rtc_build_env.sh"
export FLASHATTN_LIBRARY=$B/libflashattn.so
ctx=${CONTEXT:-1024}
n=${TRAIN_STEPS:-60}
for pool in default keep; do
  mkdir -p "$OUT/$pool"
  POOL=$pool timeout 280 python3 - --contexts "$ctx" --steps "$n" --impls flashattn,sdpa-flash,flashattn#2,flashattn#3 \
    --out "$OUT/$pool" > "$OUT/train-$pool.txt" 2>&1 <<'EOF' || status=1
import ctypes, os, runpy, sys
if os.environ["POOL"] == "keep":
    cu = ctypes.CDLL("libcuda.so.1")
    dev, pool = ctypes.c_int(), ctypes.c_void_p()
    keep = ctypes.c_uint64(2 ** 64 - 1)
    assert cu.cuInit(0) == 0 and cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
    assert cu.cuDeviceGetDefaultMemPool(ctypes.byref(pool), dev) == 0
    assert cu.cuMemPoolSetAttribute(pool, 4, ctypes.byref(keep)) == 0  # CU_MEMPOOL_ATTR_RELEASE_THRESHOLD
sys.argv = ["bench/gpt2_train.py"] + sys.argv[1:]
runpy.run_path("bench/gpt2_train.py", run_name="__main__")
EOF
  echo "$(stamp) pool $pool:"; grep -E "^\| $ctx \|" "$OUT/train-$pool.txt"
done
echo "$(stamp) done, status $status"
pack_out
exit $status
