#!/usr/bin/env bash
# Runs on a machine with one GPU: whether GPT-2 training's run-to-run spread at context 1024 came
# from the backward's workspace, and whether keeping it in the context's scratch removes it. A is
# this tree with BASE_PATCH reversed (every fa_backward allocating its workspace, the fp32 dQ
# accumulator of about 50 MB at GPT-2's shape, with cuMemAllocAsync from the device's default
# pool and freeing it after its kernels), B this tree. Processes, each training ours three times
# beside SDPA flash (bench/gpt2_train.py --impls flashattn,sdpa-flash,flashattn#2,flashattn#3):
# A with the driver's default pool, A with the pool told to keep what it holds
# (CU_MEMPOOL_ATTR_RELEASE_THRESHOLD = UINT64_MAX, set through the driver before torch starts),
# B with the default pool, B with FLASHATTN_KERNELS=sm90-bwd-lpt (its opt-in order of the backward's
# blocks). Then B's GPT-2 table (contexts 1024 and 4096 beside SDPA flash and
# cuDNN), the short conformance grid on B under the chooser, memcheck on its d 64 cases, and the
# Python suite's torch cases on CUDA, each cut to end by DEADLINE seconds (default 570). Logs
# under $OUT, packed into all.tgz. TRAIN_STEPS (default 100).
# Usage: BASE_PATCH=.ab/change.patch FLASHATTN_BENCH_COMMIT=<hash> bash bench/device/gpt2_pool_gpu.sh
#   (carry: [".deps"])
set -uo pipefail
AB_NAME=pool AB_MESON_ARGS=-Dconformance_grid=short
. "$(dirname "$0")/ab_builds.sh"
export FLASHATTN_CACHE_DIR=$root/build-pool-kernel-cache FLASHATTN_COMPILE_LOG=0
echo "commit ${FLASHATTN_BENCH_COMMIT:-unknown}" > "$OUT/provenance.txt"
n=${TRAIN_STEPS:-100}
left() {
  local r=$(( t0 + ${DEADLINE:-570} - $(date +%s) ))
  if [ "$r" -lt "$1" ]; then echo $(( r > 1 ? r : 1 )); else echo "$1"; fi
}
for run in A-default A-keep B-default B-lpt; do
  side=${run%%-*} pool=${run#*-} kernels=
  [ "$pool" = lpt ] && pool=default kernels=sm90-bwd-lpt
  mkdir -p "$OUT/$run"
  FLASHATTN_KERNELS=$kernels FLASHATTN_LIBRARY=$root/build-pool-$side/libflashattn.so POOL=$pool \
    timeout "$(left 150)" python3 - \
    --contexts 1024 --steps "$n" --impls flashattn,sdpa-flash,flashattn#2,flashattn#3 --out "$OUT/$run/1024" \
    > "$OUT/train-$run.txt" 2>&1 <<'EOF' || status=1
import ctypes, os, runpy, sys
if os.environ["POOL"] == "keep":
    cu = ctypes.CDLL("libcuda.so.1")
    dev, pool = ctypes.c_int(), ctypes.c_void_p()
    keep = ctypes.c_uint64(2 ** 64 - 1)
    assert cu.cuInit(0) == 0 and cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
    assert cu.cuDeviceGetDefaultMemPool(ctypes.byref(pool), dev) == 0
    assert cu.cuMemPoolSetAttribute(pool, 4, ctypes.byref(keep)) == 0  # CU_MEMPOOL_ATTR_RELEASE_THRESHOLD
sys.path.insert(0, "bench")
sys.argv = ["bench/gpt2_train.py"] + sys.argv[1:]
runpy.run_path("bench/gpt2_train.py", run_name="__main__")
EOF
  echo "$(stamp) $run:"; grep -E "^\| 1024 \|" "$OUT/train-$run.txt"
done
export FLASHATTN_LIBRARY=$root/build-pool-B/libflashattn.so
for ctx in 1024 4096; do
  mkdir -p "$OUT/table"
  timeout "$(left 100)" python3 bench/gpt2_train.py --contexts $ctx --steps "$n" --impls flashattn,sdpa-flash,sdpa-cudnn \
    --out "$OUT/table/$ctx" > "$OUT/table-$ctx.txt" 2>&1 || status=1
  echo "$(stamp) table $ctx:"; grep -E "^\| $ctx \|" "$OUT/table-$ctx.txt"
done
B=$root/build-pool-B
shards=("hdim64" "hdim128" "hdim256" "-hdim64,-hdim128,-hdim256")
pids=()
for i in 0 1 2 3; do
  timeout "$(left 150)" env -u FLASHATTN_KERNELS "$B/tests/conformance/conformance" --backend cuda --grid short \
    --filter "${shards[$i]}" > "$OUT/grid-$i.txt" 2>&1 &
  pids+=($!)
done
line=""
for i in 0 1 2 3; do
  wait "${pids[$i]}"; rc=$?; [ $rc -ne 0 ] && status=1
  line="$line ${shards[$i]}: exit $rc $(grep -E '^\[  (PASSED|FAILED)' "$OUT/grid-$i.txt" | tr '\n' ' ');"
done
echo "$(stamp) short grid:$line"
timeout "$(left 90)" compute-sanitizer --tool memcheck --error-exitcode 9 "$B/tests/conformance/conformance" \
  --backend cuda --grid short --filter hdim64 > "$OUT/memcheck.log" 2>&1; rc=$?; [ $rc -ne 0 ] && status=1
echo "$(stamp) memcheck hdim64: exit $rc; $(grep -E 'ERROR SUMMARY|PASSED|FAILED' "$OUT/memcheck.log" | tail -2 | tr '\n' ' ')"
PYTHONPATH=$root/python:$root/python/tests timeout "$(left 200)" python3 -m pytest -q -p no:cacheprovider \
  python/tests/test_torch.py > "$OUT/pytest-torch.txt" 2>&1; rc=$?; [ $rc -ne 0 ] && status=1
echo "$(stamp) test_torch.py: exit $rc; $(tail -1 "$OUT/pytest-torch.txt")"
echo "$(stamp) done, status $status"
pack_out
exit $status
