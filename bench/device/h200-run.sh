#!/usr/bin/env bash
# Runs on a machine with one CUDA GPU (an H200 in the project's runs): the conformance grid on the CUDA
# backend, compute-sanitizer on a subset, and the side-by-side benchmark. Usage:
#   bash bench/device/h200-run.sh BUILD_DIR [conformance|sanitize|long|bench|bench-extra|all] [bench args...]
# bench-extra (not part of all): the block-sparse and the memory tables of bench/gpu_bench.py
# (--blocksparse, --memory), into $OUT/bench-blocksparse.md and $OUT/bench-memory.md; the bench
# args go to both.
set -uo pipefail
B=${1:-build-h200}
what=${2:-all}
shift 2 || true
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/.deps/h200/lib:$PWD/.deps/cm/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export PATH=/opt/torch/.venv/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
if [ "$what" = conformance ] || [ "$what" = all ]; then
  # the chooser (on Hopper: the sm90 wgmma forward for plain calls, sm80, simt), then each
  # family forced through FLASHATTN_KERNELS: sm80 alone, the SIMT kernels, the HIP MFMA
  # forward emulated, the sm90 forward for every call it has an instance for
  for k in default sm80 simt mfma-emulated sm90; do
    echo "== conformance, CUDA backend, full grid, kernels: $k"
    if [ $k = default ]; then unset FLASHATTN_KERNELS; else export FLASHATTN_KERNELS=$k; fi
    "$B/tests/conformance/conformance" --backend cuda --grid full > "$OUT/conformance-cuda-$k.log" 2>&1
    echo "exit $?"
    grep -E "FAILED|SKIPPED|PASSED|ERROR|error" "$OUT/conformance-cuda-$k.log" | head -40
  done
  unset FLASHATTN_KERNELS
fi
if [ "$what" = sanitize ] || [ "$what" = all ]; then
  # every kernel instance kind at least once: forward and fused backward, common and general
  # (dropout / block lists) instances, cp.async and plain-load tiles (d 111, padded strides),
  # the deterministic two-kernel backward, varlen, d 32 .. 256
  echo "== compute-sanitizer memcheck / racecheck / synccheck"
  for f in ${SAN_FILTERS:-hdim128-bf16 hdim111-f16 hdim256-bf16-fwd hdim160-f16-fwd hdim32-f16 dropout-bf16 blocksparse-random50-48x80 blocksparse-butterfly-16x128 deterministic strides-padded-bf16 varlen1-causal}; do
    for tool in memcheck racecheck synccheck; do
      timeout ${SAN_TIMEOUT:-150} compute-sanitizer --tool $tool --error-exitcode 9 "$B/tests/conformance/conformance" --backend cuda \
        --grid full --filter "$f" > "$OUT/sanitize-$tool-$f.log" 2>&1
      echo "$f $tool exit $?: $(grep -E 'ERROR SUMMARY|PASSED|FAILED' "$OUT/sanitize-$tool-$f.log" | tail -2 | tr '\n' ' ')"
    done
  done
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  echo "== benchmark"
  python3 bench/gpu_bench.py --lib "$B/libflashattn.so" "$@" 2>&1 | tee "$OUT/bench.md"
fi
if [ "$what" = long ] || [ "$what" = all ]; then
  echo "== long sequence: 65536 x 16 heads x d 128, bf16, forward + backward, sampled rows vs float64"
  "$B/tests/conformance/long_seq" --backend cuda --seqlen 65536 --heads 16 --dim 128 --dtype bf16 --rows 4 \
    > "$OUT/long-seq.txt" 2>&1
  echo "exit $?"; tail -5 "$OUT/long-seq.txt"
fi
if [ "$what" = bench-extra ]; then
  echo "== benchmark: block-sparse"
  python3 bench/gpu_bench.py --lib "$B/libflashattn.so" --blocksparse "$@" 2>&1 | tee "$OUT/bench-blocksparse.md"
  echo "== benchmark: memory"
  python3 bench/gpu_bench.py --lib "$B/libflashattn.so" --memory "$@" 2>&1 | tee "$OUT/bench-memory.md"
fi
