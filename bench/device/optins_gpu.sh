#!/usr/bin/env bash
# Runs on a machine with one CUDA GPU: this tree's opt-ins (FLASHATTN_KERNELS tokens not yet on by
# default) checked and timed in one device call, most telling first, each step time-boxed (DEADLINE
# seconds in all, default 470), logs under $OUT as it goes. One build, the fast way
# (-Dcuda-kernels=rtc), then:
#   - the short grid with the sm90 family and the Hopper opt-ins SW forced (default
#     sm90-fwd-wide), four processes side by side;
#   - bench/gpu_ab.py: the build beside itself with SW (--kernels-b), d 64 / 128 / 256, 4k and 16k;
#   - the decode grid under the chooser and with kv-prefill-dense;
#   - chunked prefill (decode_bench.py --new 512) without and with kv-prefill-dense;
#   - compute-sanitizer memcheck on the d 128 grid with SW forced, and on bf16 decode.
# Usage: [SW=tokens] [DEADLINE=470] bash bench/device/optins_gpu.sh  (carry: [".deps"] for cmocka;
# pass FLASHATTN_BENCH_COMMIT, the device's copy of the tree may carry stale git metadata)
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PATH=/opt/torch/.venv/bin:/usr/local/cuda/bin:$PATH
. bench/device/cmocka_env.sh
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader
date -u "+%F %T UTC"; t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 )) s]"; }
# each step's time limit: its own cap, or what is left of DEADLINE seconds (default 470), whichever
# is less (1 s once the deadline has passed)
cap() { local left=$(( ${DEADLINE:-470} - ($(date +%s) - t0) )); [ $left -lt 1 ] && left=1; [ $left -lt $1 ] && echo $left || echo $1; }
B=$PWD/build-optins
export FLASHATTN_CACHE_DIR=$PWD/build-optins-kernel-cache FLASHATTN_COMPILE_LOG=0
meson setup "$B" -Dcuda=enabled -Dcuda-kernels=rtc -Dhip=disabled -Dopencl=disabled -Dbench=false \
  -Dconformance_grid=short > "$OUT/setup.log" 2>&1 || { tail -20 "$OUT/setup.log"; exit 1; }
ninja -C "$B" > "$OUT/build.log" 2>&1 || { grep -E "error|FAILED" "$OUT/build.log" | head; exit 1; }
echo "$(stamp) built"
SW=${SW:-sm90-fwd-wide}
shards=("hdim64" "hdim128" "hdim256" "-hdim64,-hdim128,-hdim256")
pids=()
for i in 0 1 2 3; do
  timeout $(cap 170) env FLASHATTN_KERNELS=sm90,$SW "$B/tests/conformance/conformance" --backend cuda --grid short \
    --filter "${shards[$i]}" > "$OUT/grid-sm90-wide-$i.txt" 2>&1 & pids+=($!)
done
for i in 0 1 2 3; do wait "${pids[$i]}"; rc=$?; echo "$(stamp) grid sm90,$SW ${shards[$i]}: exit $rc $(grep -E '^\[  (PASSED|FAILED)' "$OUT/grid-sm90-wide-$i.txt" | tr '\n' ' ')"; grep -E '^\[  FAILED  \] ' "$OUT/grid-sm90-wide-$i.txt" | head -4; done
timeout $(cap 150) python3 bench/gpu_ab.py --lib "$B/libflashattn.so" --lib "$B/libflashattn.so" --names default,opt-ins \
  --kernels-b "$SW" --dims 64,128,256 --seqlens 4096,16384 --repeats 2 2>&1 | tee "$OUT/ab-wide.md"
echo "$(stamp) A/B of $SW done"
for k in default kv-prefill-dense; do
  timeout $(cap 90) env $([ $k = default ] && echo -u FLASHATTN_KERNELS || echo FLASHATTN_KERNELS=$k) \
    "$B/tests/conformance/decode" --backend cuda > "$OUT/decode-$k.txt" 2>&1
  rc=$?; echo "$(stamp) decode grid $k: exit $rc $(tail -1 "$OUT/decode-$k.txt")"; grep FAIL "$OUT/decode-$k.txt" | head -4
done
for k in default kv-prefill-dense; do
  echo "== FLASHATTN_KERNELS=$k: decode_bench.py --new 512"
  timeout $(cap 80) env $([ $k = default ] && echo -u FLASHATTN_KERNELS || echo FLASHATTN_KERNELS=$k) FLASHATTN_LIBRARY=$B/libflashattn.so \
    python3 bench/decode_bench.py --new 512 --shapes 1x8192,4x8192 2>&1 | tee -a "$OUT/prefill.md"
done
echo "$(stamp) prefill done"
timeout $(cap 100) env FLASHATTN_KERNELS=sm90,$SW compute-sanitizer --tool memcheck --error-exitcode 9 "$B/tests/conformance/conformance" \
  --backend cuda --grid short --filter hdim128 > "$OUT/memcheck-wide.log" 2>&1
rc=$?; echo "$(stamp) memcheck wide hdim128: exit $rc $(grep -E 'ERROR SUMMARY|PASSED|FAILED' "$OUT/memcheck-wide.log" | tail -2 | tr '\n' ' ')"
timeout $(cap 60) compute-sanitizer --tool memcheck --error-exitcode 9 "$B/tests/conformance/decode" --backend cuda --filter bf16 \
  > "$OUT/memcheck-decode.log" 2>&1
rc=$?; echo "$(stamp) memcheck decode bf16: exit $rc $(grep -E 'ERROR SUMMARY' "$OUT/memcheck-decode.log" | tail -1)"
