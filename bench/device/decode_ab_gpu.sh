#!/usr/bin/env bash
# Runs on a machine with one CUDA GPU: a change to fa_forward_kvcache's kernels checked and timed
# against the code before it, both built the fast way (-Dcuda-kernels=rtc). B is this tree; A is
# this tree with BASE_PATCH reversed (`git diff > .ab/change.patch`). Prints, logs under $OUT (packed at
# the end into $OUT/all.tgz):
#   - the decode grid on B under the chooser and with each FLASHATTN_KERNELS value of FAMILIES
#     (default kv-simt; SWITCH too);
#   - compute-sanitizer memcheck, racecheck and synccheck on B's bf16 decode cases (and again under
#     SWITCH), and memcheck on its bad calls;
#   - each kernel's time per call on A and on B (bench/decode_kernel_times.py), and in CUDA graph
#     replays with the GPU's idle time before each kernel, beside SDPA cuDNN's (--graph);
#   - bench/decode_bench.py --graph (contiguous, and paged with --page 64) on A and on B, each
#     beside PyTorch's SDPA flash and cuDNN in the same process.
# SWITCH (a FLASHATTN_KERNELS value, a decode opt-in): the kernel times and decode_bench.py once more on
# B with it set, an opt-in measured against B's default in the same call. PREFILL (a list of new
# token counts, e.g. 16,128,512): chunked prefill (decode_bench.py --new N, batch 1 and 4 over 8k
# cached keys) on A and on B under the chooser. DECODE_BENCH_ARGS: more arguments for every
# decode_bench.py --graph run (e.g. --sink). AB_SIDES: which of A, B and B-$SWITCH the kernel times
# and decode_bench.py run on (default all), e.g. "B B-$SWITCH" when the patch does not touch decode;
# any B-<tokens> side runs B with FLASHATTN_KERNELS=<tokens>. REPEAT=N (REPEAT_SHAPES): the sides'
# decode_bench.py N rounds more, interleaved, into repeat-<side>.md.
# Usage: BASE_PATCH=.ab/change.patch [SWITCH=<token>] bash bench/device/decode_ab_gpu.sh  (carry:
# [".deps"] for cmocka). Pass FLASHATTN_BENCH_COMMIT: the device's copy of the tree may carry stale
# git metadata. An empty patch file makes A the same tree as B.
set -uo pipefail
AB_NAME=decode
. "$(dirname "$0")/ab_builds.sh"
export FLASHATTN_CACHE_DIR=$root/build-decode-kernel-cache FLASHATTN_COMPILE_LOG=0
B=$root/build-decode-B
for kernels in default ${FAMILIES:-kv-simt} ${SWITCH:-}; do
  timeout 150 env $([ "$kernels" = default ] && echo -u FLASHATTN_KERNELS || echo FLASHATTN_KERNELS=$kernels) \
    "$B/tests/conformance/decode" --backend cuda > "$OUT/decode-$kernels.txt" 2>&1
  rc=$?; [ $rc -ne 0 ] && status=1
  echo "$(stamp) decode grid, FLASHATTN_KERNELS=$kernels: exit $rc; $(tail -1 "$OUT/decode-$kernels.txt")"
  grep -E "FAIL" "$OUT/decode-$kernels.txt" | head -5
done
for tool in memcheck racecheck synccheck; do
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 "$B/tests/conformance/decode" --backend cuda \
    --filter bf16 > "$OUT/$tool.log" 2>&1
  rc=$?; [ $rc -ne 0 ] && status=1
  echo "$(stamp) $tool decode bf16: exit $rc; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$tool.log" | tail -1)"
done
# the bad calls (pages and lengths out of range, checked on the device too): a block must read
# nothing outside the caches before it has seen the fault
timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/tests/conformance/decode" --backend cuda \
  --filter bad > "$OUT/memcheck-bad.log" 2>&1
rc=$?; [ $rc -ne 0 ] && status=1
echo "$(stamp) memcheck decode bad calls: exit $rc; $(grep -E 'ERROR SUMMARY' "$OUT/memcheck-bad.log" | tail -1)"
if [ -n "${SWITCH:-}" ]; then
  for tool in memcheck racecheck synccheck; do
    timeout 150 env FLASHATTN_KERNELS=$SWITCH compute-sanitizer --tool $tool --error-exitcode 9 "$B/tests/conformance/decode" \
      --backend cuda --filter bf16 > "$OUT/$tool-$SWITCH.log" 2>&1
    rc=$?; [ $rc -ne 0 ] && status=1
    echo "$(stamp) $tool decode bf16, FLASHATTN_KERNELS=$SWITCH: exit $rc; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$tool-$SWITCH.log" | tail -1)"
  done
  timeout 150 env FLASHATTN_KERNELS=$SWITCH compute-sanitizer --tool memcheck --error-exitcode 9 "$B/tests/conformance/decode" \
    --backend cuda --filter bad > "$OUT/memcheck-bad-$SWITCH.log" 2>&1
  rc=$?; [ $rc -ne 0 ] && status=1
  echo "$(stamp) memcheck decode bad calls, FLASHATTN_KERNELS=$SWITCH: exit $rc; $(grep -E 'ERROR SUMMARY' "$OUT/memcheck-bad-$SWITCH.log" | tail -1)"
fi
sides="A B"; [ -n "${SWITCH:-}" ] && sides="A B B-$SWITCH"
sides=${AB_SIDES:-$sides}
lib_of() { echo "$root/build-decode-${1%%-*}/libflashattn.so"; }
switch_of() { case $1 in *-*) echo "FLASHATTN_KERNELS=${1#*-}" ;; *) echo "-u FLASHATTN_KERNELS" ;; esac; }
for side in $sides; do
  echo "== $side: kernel times"
  env $(switch_of $side) FLASHATTN_LIBRARY=$(lib_of $side) timeout 120 python3 bench/decode_kernel_times.py 2>&1 |
    tee "$OUT/kernel-times-$side.md"
  echo "== $side: kernel times in graph replays"
  env $(switch_of $side) FLASHATTN_LIBRARY=$(lib_of $side) timeout 120 python3 bench/decode_kernel_times.py --graph \
    --shapes 1x4096,1x16384,8x32768 2>&1 | tee "$OUT/timeline-$side.md"
done
for side in $sides; do
  for args in "--graph" "--graph --page 64"; do
    echo "== $side: decode_bench.py $args"
    env $(switch_of $side) FLASHATTN_LIBRARY=$(lib_of $side) timeout 120 python3 bench/decode_bench.py $args \
      ${DECODE_BENCH_ARGS:-} 2>&1 |
      tee -a "$OUT/bench-$side.md"
  done
done
# REPEAT=N: the sides' decode_bench.py runs N times more, interleaved (side after side, round after
# round), at REPEAT_SHAPES, so that a difference can be told from the run-to-run spread
for r in $(seq 1 "${REPEAT:-0}"); do
  for side in $sides; do
    for args in "--graph" "--graph --page 64"; do
      echo "== round $r, $side: decode_bench.py $args" | tee -a "$OUT/repeat-$side.md"
      env $(switch_of $side) FLASHATTN_LIBRARY=$(lib_of $side) timeout 60 python3 bench/decode_bench.py $args \
        --shapes "${REPEAT_SHAPES:-1x4096,1x16384,1x131072}" ${DECODE_BENCH_ARGS:-} 2>&1 | tee -a "$OUT/repeat-$side.md"
    done
  done
done
if [ -n "${PREFILL:-}" ]; then
  # chunked prefill (N new tokens over 8k cached keys, causal) on A and on B under the chooser,
  # each beside SDPA in its process
  for side in A B; do
    for n in ${PREFILL//,/ }; do
      echo "== $side: decode_bench.py --new $n"
      env -u FLASHATTN_KERNELS FLASHATTN_LIBRARY=$(lib_of $side) timeout 100 python3 bench/decode_bench.py --new "$n" \
        --shapes 1x8192,4x8192 2>&1 | tee -a "$OUT/prefill-$side.md"
    done
  done
fi
echo "$(stamp) done"
echo "== overall: $([ $status -eq 0 ] && echo PASSED || echo FAILED)"
pack_out
exit $status
