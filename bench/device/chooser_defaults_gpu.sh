#!/usr/bin/env bash
# Runs on a machine with one Hopper GPU (cc 9.0): the chooser's defaults checked and timed in one
# build of this tree made the fast way (-Dcuda-kernels=rtc): the Hopper forward at head dims
# 129..192 on its d 192 instance and 193..256 on the d 256 one, the backward at 129..256 on the
# d 256 kernel whose consumers split the columns, a learnable sink and a forward's d_v < d on the
# tensor-core families' MOD instances, the sm80 forward's stages by the occupancy rule, the Hopper
# MLA decode kernel for calls with 64 rows a kv head and 32k keys or more. Logs under $OUT as it
# goes (all.tgz at the end):
#   checks: the short grid under the default chooser, four shards side by side; the full grid's
#     cases at d 160-256 (hdim*, the d 256 / 250 / 176 backwards, the score modifiers at d 256),
#     its sink and d_v cases, under the chooser and with the sm80 family forced; memcheck,
#     racecheck and synccheck on the full grid's d 160-256 cases under both, and on the short
#     grid's sink and d_v cases under the chooser; the decode grid;
#   bench: bench/gpu_bench.py --sm80 --no-math --dims 160,192,224,256, bf16 and fp16, beside
#     PyTorch's FA2 and cuDNN (the "flashattn" column is the default chooser, "sm80 path" the sm80
#     family forced);
#   narrow: FLASHATTN_KERNELS=sm80,sm80-bwd-narrow (the sm80 d 256 backward on 4 warps over 64
#     keys a block, 141 KB, which the chooser takes where the 8-warp one does not fit, as on an
#     A100; d 129..224 padded to it): the full grid's d 160-256 cases and the sanitizers with it,
#     then bench/gpu_bench.py --sm80 --sm80-kernels with it (the "sm80 path" column) beside the
#     chooser, FA2 and cuDNN;
#   mla: bench/decode_bench.py --graph, d 576 / 512 over a latent cache, 128 and 16 heads, under
#     the chooser, kv-mla-16-rows and kv-mla-sm90.
# STEPS (default checks,bench,narrow,mla; about 5, 3, 4 and 2 minutes), DTYPES (default bf16 fp16).
# Usage:
# FLASHATTN_BENCH_COMMIT=<hash> bash bench/device/chooser_defaults_gpu.sh  (carry: [".deps"])
set -uo pipefail
. "$(dirname "$0")/rtc_build_env.sh"
wide=hdim160,hdim192,hdim224,hdim256
steps=${STEPS:-checks,bench,narrow,mla}
# kernels_env K: the env arguments for FLASHATTN_KERNELS=K (default: unset)
kernels_env() { [ "$1" = default ] && echo -u FLASHATTN_KERNELS || echo FLASHATTN_KERNELS=$1; }
# sanitize KERNELS GRID FILTER TAG: memcheck, racecheck and synccheck over the conformance cases
sanitize() {
  for tool in memcheck racecheck synccheck; do
    timeout 150 env $(kernels_env "$1") compute-sanitizer --tool $tool --error-exitcode 9 \
      "$B/tests/conformance/conformance" --backend cuda --grid "$2" --filter "$3" > "$OUT/$tool-$4.log" 2>&1
    rc=$?; [ $rc -ne 0 ] && status=1
    echo "$(stamp) $tool $2 grid $3 ($1): exit $rc; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$tool-$4.log" | tail -1)"
  done
}
if [[ $steps == *checks* ]]; then
  shards=("hdim,gqa,strides" "seqlen" "window,varlen,dropout,blocksparse" "-hdim,-gqa,-strides,-seqlen,-window,-varlen,-dropout,-blocksparse")
  full="$wide,d256,d250,d176,sink,dv"
  pids=()
  for i in "${!shards[@]}"; do
    timeout 300 env -u FLASHATTN_KERNELS "$B/tests/conformance/conformance" --backend cuda --grid short \
      --filter "${shards[$i]}" > "$OUT/grid-$i.txt" 2>&1 &
    pids+=($!)
  done
  for kernels in sm80 default; do
    timeout 300 env $(kernels_env $kernels) "$B/tests/conformance/conformance" --backend cuda --grid full \
      --filter "$full" > "$OUT/grid-full-$kernels.txt" 2>&1 &
    pids+=($!)
  done
  names=("${shards[@]}" "full grid $full, sm80 forced" "full grid $full")
  files=("$OUT"/grid-{0,1,2,3}.txt "$OUT/grid-full-sm80.txt" "$OUT/grid-full-default.txt")
  for i in 0 1 2 3 4 5; do
    wait "${pids[$i]}"; rc=$?; [ $rc -ne 0 ] && status=1
    f=${files[$i]}
    echo "$(stamp) ${names[$i]}: exit $rc; $(grep -E '^\[  (PASSED|FAILED)' "$f" | tr '\n' ' ')"
    grep -E '^\[  FAILED  \] ' "$f" | head -5
  done
  sanitize default full "$wide,longbwd-d256,bwd-d176,softcap-d256" wide-default
  sanitize sm80 full "$wide" wide-sm80
  sanitize default short sink,dv sink-dv-default
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
if [[ $steps == *narrow* ]]; then
  nar=sm80,sm80-bwd-narrow
  timeout 200 env FLASHATTN_KERNELS=$nar "$B/tests/conformance/conformance" --backend cuda --grid full \
    --filter "$wide" > "$OUT/grid-narrow.txt" 2>&1
  rc=$?; [ $rc -ne 0 ] && status=1
  echo "$(stamp) full grid $wide, $nar: exit $rc; $(grep -E '^\[  (PASSED|FAILED)' "$OUT/grid-narrow.txt" | tr '\n' ' ')"
  sanitize $nar full "$wide" narrow
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
      timeout 90 env $(kernels_env $kernels) FLASHATTN_LIBRARY=$B/libflashattn.so python3 bench/decode_bench.py --graph --heads $heads --shared-v \
        --dim 576 --dim-v 512 --shapes 1x4096,1x16384,1x32768,2x16384,8x8192,64x4096 2>&1 |
        grep -vE "Warning|return F\." | tee -a "$OUT/mla.md" | grep -E "^\| [0-9]" | cut -d'|' -f2-4
    done
  done
fi
echo "$(stamp) done"
echo "== overall: $([ $status -eq 0 ] && echo PASSED || echo FAILED)"
pack_out
exit $status
