#!/usr/bin/env bash
# Runs on a machine with one CUDA GPU: the SIMT forward compiled at run time (NVRTC, the disk
# cache) and launched through the driver API (backends/cuda/host/rtc_launch.h), which no GPU has
# run yet, against the same kernel built by nvcc and launched by the backend. Builds the library
# and the run-time compiler's checks, then, logs under $OUT:
#   - tests/cuda/rtc_launch_gpu: O and LSE of both paths bitwise identical for bf16 d 64 causal,
#     fp16 d 128 softcap, fp32 d 40 with misaligned strides, and bf16 d 128 seqlen 4096 16 heads;
#     the cold (NVRTC) / disk-cached / loaded latencies and both paths' kernel times, printed;
#   - the host-only checks of the same code (cuda-rtc-compiler, cuda-rtc-launch against a fake
#     libcuda), for the record of the toolkit this machine has;
#   - compute-sanitizer memcheck on rtc_launch_gpu (both paths' kernels).
# Usage: bash bench/device/rtc_gpu.sh [BUILD_DIR]   (a fresh BUILD_DIR is configured and built;
# run it with carry: [".deps"] where cmocka comes as .deps/libcmocka*.deb)
# Environment: OUT (logs, default /tmp/out), CUDA_ARCHS (meson's cuda-archs, default auto: the
# GPU's), SAN_TIMEOUT (seconds for memcheck, default 300). The build is incremental: a run cut
# short by a time limit can be started again on the same BUILD_DIR.
set -uo pipefail
B=${1:-build-rtc-gpu}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
. "$(dirname "$0")/cmocka_env.sh"
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader | tee "$OUT/gpu.txt"
status=0

if [ ! -f "$B/build.ninja" ]; then
  echo "== configure $B"
  meson setup "$B" -Dcuda=enabled -Dcuda-archs="${CUDA_ARCHS:-auto}" -Dhip=disabled -Dopencl=disabled -Dnccl=disabled \
    -Dbench=false > "$OUT/setup.log" 2>&1 \
    || { echo "meson setup failed"; tail -30 "$OUT/setup.log"; exit 1; }
fi
echo "== build"
ninja -C "$B" tests/cuda/rtc_launch_gpu tests/cuda/rtc_compiler_check tests/cuda/rtc_launch_check tests/cuda/libfake_libcuda.so \
  > "$OUT/build.log" 2>&1 \
  || { echo "build failed"; grep -E "error|FAILED" "$OUT/build.log" | head -30; exit 1; }

run() { # name, program and arguments; exit 77 (skip) counts as a failure here: this machine has a GPU
  local name=$1
  shift
  "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  [ $rc -ne 0 ] && status=1
  echo "$name: exit $rc"
  grep -E "PASS|FAIL|SKIP|ERROR|latency|kernel time|NVRTC" "$OUT/$name.log" | head -30
}

echo "== the SIMT forward, backend (nvcc) against run-time compiled (NVRTC, driver API)"
run rtc-launch-gpu "$B/tests/cuda/rtc_launch_gpu"
echo "== the host-only checks of the run-time compiler and launcher"
run rtc-compiler-check "$B/tests/cuda/rtc_compiler_check"
run rtc-launch-check "$B/tests/cuda/rtc_launch_check" "$B/tests/cuda/libfake_libcuda.so"

echo "== compute-sanitizer memcheck"
timeout "${SAN_TIMEOUT:-300}" compute-sanitizer --tool memcheck --error-exitcode 9 "$B/tests/cuda/rtc_launch_gpu" \
  > "$OUT/memcheck-rtc-launch-gpu.log" 2>&1
rc=$?; [ $rc -ne 0 ] && status=1
echo "memcheck rtc_launch_gpu: exit $rc; $(grep -E 'ERROR SUMMARY' "$OUT/memcheck-rtc-launch-gpu.log" | tail -1)"
echo "== overall: $([ $status -eq 0 ] && echo PASSED || echo FAILED)"
exit $status
