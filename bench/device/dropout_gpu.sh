#!/usr/bin/env bash
# Runs on a machine with one CUDA GPU: a change to dropout's kernels checked and timed against the
# code before it, both built the fast way (-Dcuda-kernels=rtc): B is this tree, A this tree with
# BASE_PATCH reversed (`git diff main BRANCH -- core backends > .ab/dropout.patch`). Prints, logs
# under $OUT as it goes, each step time-boxed:
#   - the short grid's dropout cases on B under the chooser and with each CUDA family forced (sm90,
#     sm80, sm80 with its row backward, simt), five processes side by side;
#   - compute-sanitizer memcheck, racecheck and synccheck on B's dropout cases (sm80 forced);
#   - bench/gpu_bench.py --dropout (ours without and with p = 0.1 beside PyTorch's FA2) on A and on
#     B, under the chooser and with --sm80 (AB_SIDES=B: on B only, for an empty patch).
# Usage: BASE_PATCH=.ab/dropout.patch bash bench/device/dropout_gpu.sh  (carry: [".deps"] for cmocka;
# pass FLASHATTN_BENCH_COMMIT, the device's copy of the tree may carry stale git metadata)
set -uo pipefail
AB_NAME=dropout
. "$(dirname "$0")/ab_builds.sh"
export FLASHATTN_CACHE_DIR=$root/build-dropout-kernel-cache FLASHATTN_COMPILE_LOG=0
B=$root/build-dropout-B
families=("default" "sm90" "sm80" "sm80,sm80-backward=rows" "simt")
pids=()
for i in "${!families[@]}"; do
  k=${families[$i]}
  timeout 240 env $([ "$k" = default ] && echo -u FLASHATTN_KERNELS || echo FLASHATTN_KERNELS=$k) \
    "$B/tests/conformance/conformance" --backend cuda --grid short --filter dropout > "$OUT/grid-dropout-$i.txt" 2>&1 &
  pids+=($!)
done
for i in "${!families[@]}"; do
  wait "${pids[$i]}"; rc=$?; [ $rc -ne 0 ] && status=1
  echo "$(stamp) dropout grid, FLASHATTN_KERNELS=${families[$i]}: exit $rc; $(grep -E '^\[  (PASSED|FAILED)' "$OUT/grid-dropout-$i.txt" | tr '\n' ' ')"
  grep -E '^\[  FAILED  \] ' "$OUT/grid-dropout-$i.txt" | head -4
done
for tool in memcheck racecheck synccheck; do
  timeout 120 env FLASHATTN_KERNELS=sm80 compute-sanitizer --tool $tool --error-exitcode 9 "$B/tests/conformance/conformance" \
    --backend cuda --grid short --filter dropout > "$OUT/$tool.log" 2>&1
  rc=$?; [ $rc -ne 0 ] && status=1
  echo "$(stamp) $tool, dropout cases, sm80: exit $rc; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$tool.log" | tail -1)"
done
for side in ${AB_SIDES:-A B}; do
  for flags in "" "--sm80"; do
    echo "== $side: gpu_bench.py --dropout $flags"
    timeout 100 python3 bench/gpu_bench.py --lib "$root/build-dropout-$side/libflashattn.so" --dropout $flags \
      --dims 64,128 --seqlens 4096,16384 2>&1 | tee -a "$OUT/dropout-$side.md"
  done
done
echo "$(stamp) done"
echo "== overall: $([ $status -eq 0 ] && echo PASSED || echo FAILED)"
exit $status
