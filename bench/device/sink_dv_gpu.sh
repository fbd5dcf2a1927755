#!/usr/bin/env bash
# Runs on a machine with one CUDA GPU: the learnable sink and d_v != d on the CUDA backend's SIMT
# kernels (forward, backward with dsink, the SIMT decode kernel), the only CUDA kernels that run
# them (the chooser routes every such call there). Builds the library, then, logs under $OUT:
#   - tests/cuda/sink_dv_check (forward, backward, dsink, decode against float64) under the default
#     chooser, with FLASHATTN_KERNELS=simt and with FLASHATTN_KERNELS=kv-simt;
#   - the conformance grid with the SIMT family forced (FLASHATTN_KERNELS=simt): every case, the
#     sink and d_v ones among them;
#   - the sink and d_v cases under the default chooser, which must route them to the SIMT kernels
#     (a tensor-core family would ignore the sink or d_v and fail the comparison);
#   - the decode tests on the SIMT decode kernel (FLASHATTN_KERNELS=kv-simt) and under the default
#     choice (sink / d_v calls must leave the tensor-core decode kernel);
#   - compute-sanitizer memcheck on sink_dv_check and on a few small sink and d_v grid cases.
# Usage: bash bench/device/sink_dv_gpu.sh [BUILD_DIR]   (a fresh BUILD_DIR is configured and built;
# run it with carry: [".deps"] where cmocka comes as .deps/libcmocka*.deb)
# Environment: OUT (logs, default /tmp/out), SINK_DV_FILTER (the conformance
# and decode case-name substrings of the sink and d_v cases, comma-separated), SAN_FILTERS (the
# conformance cases memcheck runs, space-separated), GRID (full or short), CUDA_ARCHS (meson's
# cuda-archs, default auto: the GPU's). The build is incremental: a run cut short by a time limit
# can be started again on the same BUILD_DIR.
set -uo pipefail
B=${1:-build-sink-dv}
OUT=${OUT:-/tmp/out}
GRID=${GRID:-full}
FILTER=${SINK_DV_FILTER:-sink,dv}
mkdir -p "$OUT"
export PATH=/opt/torch/.venv/bin:/usr/local/cuda/bin:$PATH
. "$(dirname "$0")/cmocka_env.sh"
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader | tee "$OUT/gpu.txt"
status=0

if [ ! -f "$B/build.ninja" ]; then
  echo "== configure $B"
  meson setup "$B" -Dcuda=enabled -Dcuda-kernels=aot -Dcuda-archs="${CUDA_ARCHS:-auto}" -Dhip=disabled -Dopencl=disabled -Dnccl=disabled -Dbench=false \
    -Dconformance_grid="$GRID" > "$OUT/setup.log" 2>&1 \
    || { echo "meson setup failed"; tail -30 "$OUT/setup.log"; exit 1; }
fi
echo "== build"
ninja -C "$B" tests/conformance/conformance tests/conformance/decode tests/cuda/sink_dv_check tools/flashattn \
  > "$OUT/build.log" 2>&1 \
  || { echo "build failed"; grep -E "error|FAILED" "$OUT/build.log" | head -30; exit 1; }
"$B/tools/flashattn" info --backend cuda > "$OUT/info.txt" 2>&1
grep -iE "sink|head_dim_v|features" "$OUT/info.txt" | head -5

run() { # name, env assignment (or -), program and arguments
  local name=$1 envset=$2
  shift 2
  if [ "$envset" = - ]; then env -u FLASHATTN_KERNELS "$@" > "$OUT/$name.log" 2>&1; else env "$envset" "$@" > "$OUT/$name.log" 2>&1; fi
  local rc=$?
  [ $rc -ne 0 ] && status=1
  echo "$name: exit $rc"
  grep -E "PASS|FAIL|SKIP|ERROR" "$OUT/$name.log" | head -30
}

for k in default simt kv-simt; do
  echo "== sink_dv_check, kernels: $k"
  if [ $k = default ]; then run sink-dv-check-$k - "$B/tests/cuda/sink_dv_check" cuda
  else run sink-dv-check-$k FLASHATTN_KERNELS=$k "$B/tests/cuda/sink_dv_check" cuda; fi
done
echo "== conformance, CUDA backend, SIMT family forced, $GRID grid"
run conformance-simt FLASHATTN_KERNELS=simt "$B/tests/conformance/conformance" --backend cuda --grid "$GRID"
echo "== conformance, CUDA backend, the chooser, the sink and d_v cases ($FILTER)"
run conformance-chooser-sink-dv - "$B/tests/conformance/conformance" --backend cuda --grid "$GRID" --filter "$FILTER"
echo "== decode, SIMT decode kernel (kv-simt)"
run decode-kv-simt FLASHATTN_KERNELS=kv-simt "$B/tests/conformance/decode" --backend cuda
echo "== decode, the default choice"
run decode-chooser - "$B/tests/conformance/decode" --backend cuda

echo "== compute-sanitizer memcheck"
FLASHATTN_KERNELS=simt timeout ${SAN_TIMEOUT:-300} compute-sanitizer --tool memcheck --error-exitcode 9 \
  "$B/tests/cuda/sink_dv_check" cuda > "$OUT/memcheck-sink-dv-check.log" 2>&1
rc=$?; [ $rc -ne 0 ] && status=1
echo "memcheck sink_dv_check: exit $rc; $(grep -E 'ERROR SUMMARY' "$OUT/memcheck-sink-dv-check.log" | tail -1)"
for f in ${SAN_FILTERS:-sink dv}; do
  FLASHATTN_KERNELS=simt timeout ${SAN_TIMEOUT:-300} compute-sanitizer --tool memcheck --error-exitcode 9 \
    "$B/tests/conformance/conformance" --backend cuda --grid short --filter "$f" > "$OUT/memcheck-$f.log" 2>&1
  rc=$?; [ $rc -ne 0 ] && status=1
  echo "memcheck conformance $f: exit $rc; $(grep -E 'ERROR SUMMARY' "$OUT/memcheck-$f.log" | tail -1)"
done
# decode's --filter takes one substring: each of SINK_DV_FILTER's in turn
for f in ${FILTER//,/ }; do
  FLASHATTN_KERNELS=kv-simt timeout ${SAN_TIMEOUT:-300} compute-sanitizer --tool memcheck --error-exitcode 9 \
    "$B/tests/conformance/decode" --backend cuda --filter "$f" > "$OUT/memcheck-decode-$f.log" 2>&1
  rc=$?; [ $rc -ne 0 ] && status=1
  echo "memcheck decode $f: exit $rc; $(grep -E 'ERROR SUMMARY' "$OUT/memcheck-decode-$f.log" | tail -1)"
done
echo "== overall: $([ $status -eq 0 ] && echo PASSED || echo FAILED)"
exit $status
