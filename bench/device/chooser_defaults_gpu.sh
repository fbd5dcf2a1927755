#!/usr/bin/env bash
# Runs on a machine with one Hopper GPU (cc 9.0): the chooser's defaults checked and timed in one
# build of this tree made the fast way (-Dcuda-kernels=rtc): the forward and the backward at head
# dims 129..224 on the Hopper d 256 instances (padded from d 129), the sm80 forward's stages by the
# occupancy rule (sm80-fwd-stages=auto, one stage from d 192 on Hopper), the Hopper MLA decode
# kernel for calls with 64 rows a kv head and 32k keys or more. Logs under $OUT as it goes (all.tgz
# at the end):
#   checks: the short grid under the default chooser, four shards side by side; the full grid's
#     hdim160 / 192 / 224 / 256 cases (every dtype) under the chooser and with the sm80 family
#     forced; memcheck, racecheck and synccheck on them under both; the decode grid;
#   bench: bench/gpu_bench.py --sm80 --no-math --dims 160,192,224,256, bf16 and fp16, beside
#     PyTorch's FA2 and cuDNN (the "flashattn" column is the default chooser, "sm80 path" the sm80
#     family forced);
#   d192: FLASHATTN_KERNELS=sm90-fwd-d192 (the Hopper forward at d 129..192 on its d 192 instance):
#     the full grid's d 160-256 and bwd-d* cases under the chooser and with it, memcheck, racecheck
#     and synccheck on its d 160 / 192 / 176 cases, then bench/gpu_ab.py against the chooser at d
#     160 / 192 in one process;
#   sink: FLASHATTN_KERNELS=tc-sink (a learnable sink on the tensor-core families: the forward's
#     MOD instances fold it in, the backward's dsink is dsink_kernel after the family's dsum): the
#     full grid's sink cases with it and with sm80,tc-sink, the decode grid with it, memcheck,
#     racecheck and synccheck on the short grid's sink cases, then bench/gpu_ab.py --sink against
#     the chooser (whose sink calls run the SIMT kernels) at d 64 / 128, 1k and 4k, one round;
#   dv: FLASHATTN_KERNELS=tc-dv (a forward with d_v < d on the tensor-core families' MOD
#     instances): the full grid's d_v cases with it and with sm80,tc-dv, memcheck, racecheck and
#     synccheck on the short grid's d_v cases;
#   narrow: FLASHATTN_KERNELS=sm80,sm80-bwd-narrow (the sm80 d 256 backward on 4 warps over 64
#     keys a block, 141 KB, which the chooser takes where the 8-warp one does not fit, as on an
#     A100; d 129..224 padded to it): the full grid's d 160-256 cases and the sanitizers with it,
#     then bench/gpu_bench.py --sm80 --sm80-kernels with it (the "sm80 path" column) beside the
#     chooser, FA2 and cuDNN;
#   mla: bench/decode_bench.py --graph, d 576 / 512 over a latent cache, 128 and 16 heads, under
#     the chooser, kv-mla-16-rows and kv-mla-sm90.
# STEPS (default checks,bench,narrow,mla; about 4, 3, 4 and 2 minutes; d192, sink and dv about 3 each
# on request),
# DTYPES (default bf16 fp16).
# Usage:
# FLASHATTN_BENCH_COMMIT=<hash> bash bench/device/chooser_defaults_gpu.sh  (carry: [".deps"])
set -uo pipefail
. "$(dirname "$0")/rtc_build_env.sh"
wide=hdim160,hdim192,hdim224,hdim256
steps=${STEPS:-checks,bench,narrow,mla}
if [[ $steps == *checks* ]]; then
  shards=("hdim,gqa,strides" "seqlen" "window,varlen,dropout,blocksparse" "-hdim,-gqa,-strides,-seqlen,-window,-varlen,-dropout,-blocksparse")
  pids=()
  for i in "${!shards[@]}"; do
    timeout 300 env -u FLASHATTN_KERNELS "$B/tests/conformance/conformance" --backend cuda --grid short \
      --filter "${shards[$i]}" > "$OUT/grid-$i.txt" 2>&1 &
    pids+=($!)
  done
  timeout 300 env FLASHATTN_KERNELS=sm80 "$B/tests/conformance/conformance" --backend cuda --grid full \
    --filter "$wide" > "$OUT/grid-sm80.txt" 2>&1 &
  pids+=($!)
  timeout 300 env -u FLASHATTN_KERNELS "$B/tests/conformance/conformance" --backend cuda --grid full \
    --filter "$wide" > "$OUT/grid-full-wide.txt" 2>&1 &
  pids+=($!)
  names=("${shards[@]}" "full grid $wide, sm80 forced" "full grid $wide")
  files=("$OUT"/grid-{0,1,2,3}.txt "$OUT/grid-sm80.txt" "$OUT/grid-full-wide.txt")
  for i in 0 1 2 3 4 5; do
    wait "${pids[$i]}"; rc=$?; [ $rc -ne 0 ] && status=1
    f=${files[$i]}
    echo "$(stamp) ${names[$i]}: exit $rc; $(grep -E '^\[  (PASSED|FAILED)' "$f" | tr '\n' ' ')"
    grep -E '^\[  FAILED  \] ' "$f" | head -5
  done
  for kernels in default sm80; do
    for tool in memcheck racecheck synccheck; do
      timeout 150 env $([ $kernels = default ] && echo -u FLASHATTN_KERNELS || echo FLASHATTN_KERNELS=$kernels) \
        compute-sanitizer --tool $tool --error-exitcode 9 \
        "$B/tests/conformance/conformance" --backend cuda --grid full --filter "$wide" > "$OUT/$tool-$kernels.log" 2>&1
      rc=$?; [ $rc -ne 0 ] && status=1
      echo "$(stamp) $tool $wide ($kernels): exit $rc; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$tool-$kernels.log" | tail -1)"
    done
  done
  timeout 150 env -u FLASHATTN_KERNELS "$B/tests/conformance/decode" --backend cuda > "$OUT/decode.txt" 2>&1
  rc=$?; [ $rc -ne 0 ] && status=1
  echo "$(stamp) decode grid: exit $rc; $(tail -1 "$OUT/decode.txt")"
fi
if [[ $steps == *bench* ]]; then
  for dtype in ${DTYPES:-bf16 fp16}; do
    echo "== $dtype: flashattn = default chooser, sm80 path = the sm80 family forced"
    timeout 200 env -u FLASHATTN_KERNELS python3 bench/gpu_bench.py --lib "$B/libflashattn.so" --sm80 --no-math \
      --dtype $dtype --dims 160,192,224,256 --seqlens 1024,4096,16384 2>&1 | tee -a "$OUT/wide-$dtype.md"
  done
fi
if [[ $steps == *d192* ]]; then
  for kernels in default sm90-fwd-d192; do
    timeout 200 env $([ $kernels = default ] && echo -u FLASHATTN_KERNELS || echo FLASHATTN_KERNELS=$kernels) \
      "$B/tests/conformance/conformance" --backend cuda --grid full --filter "$wide,bwd-d" > "$OUT/grid-$kernels.txt" 2>&1
    rc=$?; [ $rc -ne 0 ] && status=1
    echo "$(stamp) full grid $wide,bwd-d ($kernels): exit $rc; $(grep -E '^\[  (PASSED|FAILED)' "$OUT/grid-$kernels.txt" | tr '\n' ' ')"
    grep -E '^\[  FAILED  \] ' "$OUT/grid-$kernels.txt" | head -5
  done
  for tool in memcheck racecheck synccheck; do
    timeout 150 env FLASHATTN_KERNELS=sm90-fwd-d192 compute-sanitizer --tool $tool --error-exitcode 9 \
      "$B/tests/conformance/conformance" --backend cuda --grid full --filter "hdim160,hdim192,bwd-d176" \
      > "$OUT/$tool-d192.log" 2>&1
    rc=$?; [ $rc -ne 0 ] && status=1
    echo "$(stamp) $tool hdim160,hdim192,bwd-d176 (sm90-fwd-d192): exit $rc; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$tool-d192.log" | tail -1)"
  done
  for dtype in ${DTYPES:-bf16 fp16}; do
    timeout 200 env -u FLASHATTN_KERNELS python3 bench/gpu_ab.py --lib "$B/libflashattn.so" --lib "$B/libflashattn.so" \
      --names default,fwd-d192 --kernels-b sm90-fwd-d192 --dtype $dtype --dims 160,192 --seqlens 1024,4096,16384 \
      --repeats 3 2>&1 | tee -a "$OUT/ab-fwd-d192-$dtype.md"
  done
fi
if [[ $steps == *sink* ]]; then
  for kernels in tc-sink sm80,tc-sink; do
    timeout 200 env FLASHATTN_KERNELS=$kernels "$B/tests/conformance/conformance" --backend cuda --grid full \
      --filter sink > "$OUT/grid-sink-$kernels.txt" 2>&1
    rc=$?; [ $rc -ne 0 ] && status=1
    echo "$(stamp) full grid sink cases ($kernels): exit $rc; $(grep -E '^\[  (PASSED|FAILED)' "$OUT/grid-sink-$kernels.txt" | tr '\n' ' ')"
    grep -E '^\[  FAILED  \] ' "$OUT/grid-sink-$kernels.txt" | head -5
  done
  timeout 150 env FLASHATTN_KERNELS=tc-sink "$B/tests/conformance/decode" --backend cuda > "$OUT/decode-tc-sink.txt" 2>&1
  rc=$?; [ $rc -ne 0 ] && status=1
  echo "$(stamp) decode grid (tc-sink): exit $rc; $(tail -1 "$OUT/decode-tc-sink.txt")"
  for tool in memcheck racecheck synccheck; do
    timeout 150 env FLASHATTN_KERNELS=tc-sink compute-sanitizer --tool $tool --error-exitcode 9 \
      "$B/tests/conformance/conformance" --backend cuda --grid short --filter sink > "$OUT/$tool-tc-sink.log" 2>&1
    rc=$?; [ $rc -ne 0 ] && status=1
    echo "$(stamp) $tool short-grid sink cases (tc-sink): exit $rc; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$tool-tc-sink.log" | tail -1)"
  done
  for dtype in ${DTYPES:-bf16 fp16}; do
    timeout 200 env -u FLASHATTN_KERNELS python3 bench/gpu_ab.py --lib "$B/libflashattn.so" --lib "$B/libflashattn.so" \
      --names default,tc-sink --kernels-b tc-sink --sink --dtype $dtype --dims 64,128 --seqlens 1024,4096 \
      --repeats 1 2>&1 | tee -a "$OUT/ab-tc-sink-$dtype.md"
  done
fi
if [[ $steps == *dv* ]]; then
  for kernels in tc-dv sm80,tc-dv; do
    timeout 200 env FLASHATTN_KERNELS=$kernels "$B/tests/conformance/conformance" --backend cuda --grid full \
      --filter dv > "$OUT/grid-dv-$kernels.txt" 2>&1
    rc=$?; [ $rc -ne 0 ] && status=1
    echo "$(stamp) full grid d_v cases ($kernels): exit $rc; $(grep -E '^\[  (PASSED|FAILED)' "$OUT/grid-dv-$kernels.txt" | tr '\n' ' ')"
    grep -E '^\[  FAILED  \] ' "$OUT/grid-dv-$kernels.txt" | head -5
  done
  for tool in memcheck racecheck synccheck; do
    timeout 150 env FLASHATTN_KERNELS=tc-dv compute-sanitizer --tool $tool --error-exitcode 9 \
      "$B/tests/conformance/conformance" --backend cuda --grid short --filter dv > "$OUT/$tool-tc-dv.log" 2>&1
    rc=$?; [ $rc -ne 0 ] && status=1
    echo "$(stamp) $tool short-grid d_v cases (tc-dv): exit $rc; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$tool-tc-dv.log" | tail -1)"
  done
fi
if [[ $steps == *narrow* ]]; then
  nar=sm80,sm80-bwd-narrow
  timeout 200 env FLASHATTN_KERNELS=$nar "$B/tests/conformance/conformance" --backend cuda --grid full \
    --filter "$wide" > "$OUT/grid-narrow.txt" 2>&1
  rc=$?; [ $rc -ne 0 ] && status=1
  echo "$(stamp) full grid $wide, $nar: exit $rc; $(grep -E '^\[  (PASSED|FAILED)' "$OUT/grid-narrow.txt" | tr '\n' ' ')"
  for tool in memcheck racecheck synccheck; do
    timeout 150 env FLASHATTN_KERNELS=$nar compute-sanitizer --tool $tool --error-exitcode 9 \
      "$B/tests/conformance/conformance" --backend cuda --grid full --filter "$wide" > "$OUT/$tool-narrow.log" 2>&1
    rc=$?; [ $rc -ne 0 ] && status=1
    echo "$(stamp) $tool $wide ($nar): exit $rc; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$tool-narrow.log" | tail -1)"
  done
  for dtype in ${DTYPES:-bf16 fp16}; do
    echo "== $dtype: flashattn = the chooser, sm80 path = the sm80 family with the narrow d 256 backward"
    timeout 200 env -u FLASHATTN_KERNELS python3 bench/gpu_bench.py --lib "$B/libflashattn.so" --sm80 \
      --sm80-kernels $nar --no-math --dtype $dtype --dims 160,192,224,256 --seqlens 1024,4096,16384 2>&1 |
      tee -a "$OUT/narrow-$dtype.md"
  done
fi
if [[ $steps == *mla* ]]; then
  for kernels in default kv-mla-16-rows kv-mla-sm90; do
    for heads in 128/1 16/1; do
      echo "== MLA, $kernels, --heads $heads" | tee -a "$OUT/mla.md"
      timeout 90 env $([ $kernels = default ] && echo -u FLASHATTN_KERNELS || echo FLASHATTN_KERNELS=$kernels) \
        FLASHATTN_LIBRARY=$B/libflashattn.so python3 bench/decode_bench.py --graph --heads $heads --shared-v \
        --dim 576 --dim-v 512 --shapes 1x4096,1x16384,1x32768,2x16384,8x8192,64x4096 2>&1 |
        grep -vE "Warning|return F\." | tee -a "$OUT/mla.md" | grep -E "^\| [0-9]" | cut -d'|' -f2-4
    done
  done
fi
echo "$(stamp) done"
echo "== overall: $([ $status -eq 0 ] && echo PASSED || echo FAILED)"
pack_out
exit $status
