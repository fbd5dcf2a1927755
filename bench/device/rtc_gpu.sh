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
#   - compute-sanitizer memcheck on rtc_launch_gpu (both paths' kernels);
#   - the backend of a build without nvcc's kernels (-Dcuda-kernels=rtc, BUILD_DIR-rtc; the host
#     code on the driver API): the conformance grid (GRID, default short) on it, every call on the
#     SIMT kernels compiled at run time; the cuda suite; flashattn warmup cold (a fresh
#     FLASHATTN_CACHE_DIR) and warm, timed; flashattn run on both builds (the aot one with
#     FLASHATTN_KERNELS=simt), forward + backward, for the speed of the same kernels both ways.
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
  meson setup "$B" -Dcuda=enabled -Dcuda-kernels=aot -Dcuda-archs="${CUDA_ARCHS:-auto}" -Dhip=disabled -Dopencl=disabled -Dnccl=disabled \
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
echo "== the backend of a run-time compiled build (-Dcuda-kernels=rtc)"
R=$B-rtc
if [ ! -f "$R/build.ninja" ]; then
  meson setup "$R" -Dcuda=enabled -Dcuda-kernels=rtc -Dhip=disabled -Dopencl=disabled -Dnccl=disabled -Dbench=false \
    -Dconformance_grid="${GRID:-short}" > "$OUT/setup-rtc.log" 2>&1 || { echo "meson setup (rtc) failed"; tail -20 "$OUT/setup-rtc.log"; exit 1; }
fi
ninja -C "$R" > "$OUT/build-rtc.log" 2>&1 || { echo "build (rtc) failed"; grep -E "error|FAILED" "$OUT/build-rtc.log" | head -20; exit 1; }
"$R/tools/flashattn" info --backend cuda 2>&1 | grep -E "availability|notes" | head -2 | tee "$OUT/info-rtc.txt"
export FLASHATTN_CACHE_DIR=$(mktemp -d)
for pass in cold warm; do
  start=$(date +%s.%N)
  "$R/tools/flashattn" warmup --backend cuda --dtype bf16,fp16 --dim 64,128 --backward > "$OUT/warmup-$pass.log" 2>&1
  rc=$?; [ $rc -ne 0 ] && status=1
  echo "warmup $pass: exit $rc, $(python3 -c "print(round($(date +%s.%N) - $start, 2))") s for the process; $(tail -1 "$OUT/warmup-$pass.log")"
done
run conformance-rtc "$R/tests/conformance/conformance" --backend cuda --grid "${GRID:-short}"
for k in sm80 sm90 simt; do
  run conformance-rtc-$k env FLASHATTN_KERNELS=$k "$R/tests/conformance/conformance" --backend cuda --grid "${GRID:-short}"
done
# every CUDA test of the rtc build: the grid under each family forced, masked rows, decode, paged
# varlen, the 65536-key sequence, the cuda suite (whose fake-driver checks run here too)
# (meson prints a test as "project:suite / name" or, newer, "suite - project:name")
cuda_tests=$(cd "$R" && meson test --list 2>/dev/null | sed -E 's|.* / ||; s|.*:||' | grep -E 'cuda' | grep -v mfma-emulated)
(cd "$R" && meson test --no-rebuild --print-errorlogs $cuda_tests) > "$OUT/suite-cuda-rtc.log" 2>&1
rc=$?; [ $rc -ne 0 ] && status=1
echo "meson test, the CUDA tests of the rtc build: exit $rc; $(grep -E '^(Ok|Fail|Skipped):' "$OUT/suite-cuda-rtc.log" | tr -s ' ' | tr '\n' ' ')"
grep -E ' (FAIL|SKIP|TIMEOUT) ' "$OUT/suite-cuda-rtc.log" | head -20
timeout "${SAN_TIMEOUT:-300}" compute-sanitizer --tool memcheck --error-exitcode 9 "$R/tests/conformance/conformance" \
  --backend cuda --grid short --filter hdim128-bf16 > "$OUT/memcheck-rtc-hdim128.log" 2>&1
rc=$?; [ $rc -ne 0 ] && status=1
echo "memcheck rtc conformance hdim128-bf16: exit $rc; $(grep -E 'ERROR SUMMARY' "$OUT/memcheck-rtc-hdim128.log" | tail -1)"
# the same kernels both ways: the chooser's (tensor cores where the rtc build has them) and the
# SIMT family forced
for kernels in default simt; do
  for shape in "--dtype bf16 --dim 64" "--dtype bf16 --dim 128 --causal" "--dtype fp16 --dim 128"; do
    for build in aot rtc; do
      bin=$B/tools/flashattn; [ $build = rtc ] && bin=$R/tools/flashattn
      [ $build = aot ] && [ ! -x "$bin" ] && ninja -C "$B" tools/flashattn > /dev/null 2>&1
      log="$OUT/run-$kernels-$build-$(echo $shape | tr -d ' -').log"
      if [ $kernels = default ]; then env -u FLASHATTN_KERNELS "$bin" run --backend cuda --batch 4 --seqlen-q 4096 --heads 16 $shape --backward > "$log" 2>&1
      else FLASHATTN_KERNELS=simt "$bin" run --backend cuda --batch 4 --seqlen-q 2048 --heads 16 $shape --backward > "$log" 2>&1; fi
      echo "$kernels $build $shape: $(grep -E '^(kernel|forward|backward):' "$log" | head -3 | tr -s ' ' | tr '\n' ' ')"
    done
  done
done
rm -rf "$FLASHATTN_CACHE_DIR"
echo "== overall: $([ $status -eq 0 ] && echo PASSED || echo FAILED)"
exit $status
