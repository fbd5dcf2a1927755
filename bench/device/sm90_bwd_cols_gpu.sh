#!/usr/bin/env bash
# Runs on a machine with one Hopper GPU (cc 9.0): FLASHATTN_KERNELS=sm90-bwd-cols (the d 256
# backward, d 129..256 padded, on ws_backward_cols_kernel: one pass over 64-key blocks, the
# consumers splitting the columns) checked and timed in one build of this tree made the fast way
# (-Dcuda-kernels=rtc). Logs under $OUT as it goes (all.tgz at the end):
#   the short grid with it (two shards side by side); the full grid's cases at d 160-256 (hdim*,
#   longbwd-d256, bwd-d256 / d250 / d176, the score modifiers at d 256) with it; memcheck,
#   racecheck and synccheck on the full grid's hdim256, longbwd-d256, bwd-d176 and softcap-d256
#   cases with it;
#   bench/gpu_ab.py: the chooser (A) against it (B) in one process, d 192 and 256, 1k-16k, causal
#   and not, bf16 (3 rounds) and fp16 (1 round);
#   bench/gpu_bench.py --dims 256 --no-math with it, beside PyTorch's FA2 and cuDNN, bf16.
# Usage:
# FLASHATTN_BENCH_COMMIT=<hash> bash bench/device/sm90_bwd_cols_gpu.sh  (carry: [".deps"])
set -uo pipefail
. "$(dirname "$0")/rtc_build_env.sh"
export FLASHATTN_KERNELS=sm90-bwd-cols
shards=("hdim,gqa,strides,seqlen" "-hdim,-gqa,-strides,-seqlen")
pids=()
for i in "${!shards[@]}"; do
  timeout 300 "$B/tests/conformance/conformance" --backend cuda --grid short --filter "${shards[$i]}" \
    > "$OUT/grid-short-$i.txt" 2>&1 &
  pids+=($!)
done
timeout 300 "$B/tests/conformance/conformance" --backend cuda --grid full \
  --filter hdim160,hdim192,hdim224,hdim256,d256,d250,d176 > "$OUT/grid-full-wide.txt" 2>&1 &
pids+=($!)
files=("$OUT/grid-short-0.txt" "$OUT/grid-short-1.txt" "$OUT/grid-full-wide.txt")
for i in 0 1 2; do
  wait "${pids[$i]}"; rc=$?; [ $rc -ne 0 ] && status=1
  echo "$(stamp) $(basename "${files[$i]}") (sm90-bwd-cols): exit $rc; $(grep -E '^\[  (PASSED|FAILED)' "${files[$i]}" | tr '\n' ' ')"
  grep -E '^\[  FAILED  \] ' "${files[$i]}" | head -5
done
for tool in memcheck racecheck synccheck; do
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 \
    "$B/tests/conformance/conformance" --backend cuda --grid full --filter hdim256,longbwd-d256,bwd-d176,softcap-d256 \
    > "$OUT/$tool-cols.log" 2>&1
  rc=$?; [ $rc -ne 0 ] && status=1
  echo "$(stamp) $tool hdim256,longbwd-d256,bwd-d176,softcap-d256 (sm90-bwd-cols): exit $rc; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$tool-cols.log" | tail -1)"
done
for dtype in bf16 fp16; do
  timeout 200 env -u FLASHATTN_KERNELS python3 bench/gpu_ab.py --lib "$B/libflashattn.so" --lib "$B/libflashattn.so" \
    --names default,bwd-cols --kernels-b sm90-bwd-cols --dtype $dtype --dims 192,256 --seqlens 1024,4096,16384 \
    --repeats $([ $dtype = bf16 ] && echo 3 || echo 1) 2>&1 | tee -a "$OUT/ab-bwd-cols-$dtype.md"
done
echo "== bf16, flashattn = FLASHATTN_KERNELS=sm90-bwd-cols"
timeout 200 python3 bench/gpu_bench.py --lib "$B/libflashattn.so" --no-math --dims 256 2>&1 |
  grep -vE "Warning|return F\." | tee "$OUT/vs-cudnn-bf16-cols.md"
echo "$(stamp) done"
echo "== overall: $([ $status -eq 0 ] && echo PASSED || echo FAILED)"
pack_out
exit $status
