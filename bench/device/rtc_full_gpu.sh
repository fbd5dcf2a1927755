#!/usr/bin/env bash
# Runs on a machine with one CUDA GPU: what a build whose kernels are compiled at run time
# (-Dcuda-kernels=rtc, no nvcc involved) must pass before it can be the default where nvcc is
# present. Configures and builds BUILD_DIR with -Dconformance_grid=full and the NCCL transport, then,
# logs under $OUT:
#   - the full conformance grid on the CUDA backend under the chooser, from a cold kernel cache, in
#     four processes side by side that fill one FLASHATTN_CACHE_DIR together (shards by case name:
#     sink; dv; softcap, alibi, block-sparse and dropout; the rest), and the number of cases each ran;
#   - every CUDA test of the build (the grid again in one process, now from the cache; masked rows,
#     paged varlen, decode, the 65,536-key sequence, the fake-driver checks) and ring-cpu, whose
#     NCCL cases run one rank per GPU through this build's transport;
#   - with SANITIZE=1 (a second call: each fits the 10-minute limit), compute-sanitizer memcheck,
#     racecheck and synccheck on the d 128 bf16 cases of the short grid and on the decode cases.
# Usage: bash bench/device/rtc_full_gpu.sh [BUILD_DIR]  (run with carry: [".deps"] where cmocka
# comes as .deps/libcmocka*.deb). Environment: OUT (default /tmp/out), SANITIZE (0), SAN_TIMEOUT
# (seconds per sanitizer run, default 150). The build is incremental across calls.
set -uo pipefail
B=${1:-build-rtc-full}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
. "$(dirname "$0")/cmocka_env.sh"
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader | tee "$OUT/gpu.txt"
date -u "+%F %T UTC"
status=0
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 )) s]"; }

if [ ! -f "$B/build.ninja" ]; then
  meson setup "$B" -Dcuda=enabled -Dcuda-kernels=rtc -Dhip=disabled -Dopencl=disabled -Dnccl=enabled -Dbench=false \
    -Dconformance_grid=full > "$OUT/setup.log" 2>&1 || { echo "meson setup failed"; tail -20 "$OUT/setup.log"; exit 1; }
fi
grep -E "kernels compiled at run time|NCCL" "$OUT/setup.log" | head -3
ninja -C "$B" > "$OUT/build.log" 2>&1 || { echo "build failed"; grep -E "error|FAILED" "$OUT/build.log" | head -20; exit 1; }
echo "$(stamp) built"
"$B/tools/flashattn" info --backend cuda 2>&1 | grep -E "availability|notes" | head -2
export FLASHATTN_CACHE_DIR=${FLASHATTN_CACHE_DIR:-$PWD/$B-kernel-cache}
export FLASHATTN_COMPILE_LOG=0

if [ "${SANITIZE:-0}" = 0 ]; then
  echo "== the full grid under the chooser, four shards side by side, cold cache ($FLASHATTN_CACHE_DIR)"
  rm -rf "$FLASHATTN_CACHE_DIR"
  shards=("sink" "dv,-sink" "softcap,alibi,blocksparse,dropout,-sink,-dv"
          "-sink,-dv,-softcap,-alibi,-blocksparse,-dropout")
  pids=()
  for i in 0 1 2 3; do
    "$B/tests/conformance/conformance" --backend cuda --grid full --filter "${shards[$i]}" > "$OUT/grid-full-rtc-$i.txt" 2>&1 &
    pids+=($!)
  done
  total=0
  for i in 0 1 2 3; do
    wait "${pids[$i]}"; rc=$?
    [ $rc -ne 0 ] && status=1
    n=$(grep -oE '^\[==========\] [0-9]+' "$OUT/grid-full-rtc-$i.txt" | tail -1 | grep -oE '[0-9]+$')
    total=$(( total + ${n:-0} ))
    echo "shard '${shards[$i]}': exit $rc, $(grep -E '^\[  (PASSED|FAILED)' "$OUT/grid-full-rtc-$i.txt" | tr '\n' ' ')"
    grep -E '^\[  FAILED  \] ' "$OUT/grid-full-rtc-$i.txt" | head -10
  done
  echo "$(stamp) shards done: $total cases; kernels compiled into the cache: $(find "$FLASHATTN_CACHE_DIR" -type f | wc -l)"

  echo "== every CUDA test of the build, and ring-cpu (NCCL, one rank per GPU)"
  tests=$(cd "$B" && meson test --list 2>/dev/null | sed -E 's|.* / ||; s|.*:||' | grep -E 'cuda|^ring' | grep -v mfma-emulated)
  (cd "$B" && meson test --no-rebuild --print-errorlogs --timeout-multiplier 3 $tests) > "$OUT/suite-rtc.log" 2>&1
  rc=$?; [ $rc -ne 0 ] && status=1
  echo "$(stamp) meson test: exit $rc; $(grep -E '^(Ok|Fail|Skipped|Timeout):' "$OUT/suite-rtc.log" | tr -s ' ' | tr '\n' ' ')"
  grep -E '(OK|FAIL|SKIP|TIMEOUT) +[0-9.]+s' "$OUT/suite-rtc.log" | sed -E 's/ +/ /g' | head -30
  grep -hE 'NCCL|nccl|ranks' "$B/meson-logs/testlog.txt" | grep -v '^ *$' | head -8
  cp "$B/meson-logs/testlog.txt" "$OUT/testlog-rtc.txt"
else
  echo "== compute-sanitizer on the rtc build"
  for tool in memcheck racecheck synccheck; do
    timeout "${SAN_TIMEOUT:-150}" compute-sanitizer --tool $tool --error-exitcode 9 "$B/tests/conformance/conformance" \
      --backend cuda --grid short --filter hdim128-bf16 > "$OUT/$tool-grid-hdim128-bf16.log" 2>&1
    rc=$?; [ $rc -ne 0 ] && status=1
    echo "$(stamp) $tool conformance hdim128-bf16: exit $rc; $(grep -E 'ERROR SUMMARY|PASSED|FAILED' "$OUT/$tool-grid-hdim128-bf16.log" | tail -2 | tr '\n' ' ')"
  done
  for tool in memcheck racecheck; do
    timeout "${SAN_TIMEOUT:-150}" compute-sanitizer --tool $tool --error-exitcode 9 "$B/tests/conformance/decode" \
      --backend cuda --filter bf16 > "$OUT/$tool-decode-bf16.log" 2>&1
    rc=$?; [ $rc -ne 0 ] && status=1
    echo "$(stamp) $tool decode bf16: exit $rc; $(grep -E 'ERROR SUMMARY' "$OUT/$tool-decode-bf16.log" | tail -1)"
  done
fi
echo "== overall: $([ $status -eq 0 ] && echo PASSED || echo FAILED)"
exit $status
