#!/usr/bin/env bash
# Runs on a machine with one GPU: GPT-2 small training through this tree's Python package, and
# through a base tree's package for an A/B, both on this tree's library built the fast way
# (-Dcuda-kernels=rtc). Logs under $OUT as it goes (all.tgz at the end):
#   train: bench/gpt2_train.py at context 1024 with this package, SDPA flash and SDPA cuDNN in one
#     process, then the same with the base package (against SDPA in its own process); then 4096;
#   profile: bench/gpt2_step_profile.py at contexts 1024 and 4096, this package and SDPA flash,
#     then the base package (where a step's GPU time goes, kernel by kernel);
#   checks: the Python suite's torch cases on CUDA tensors (python/tests/test_torch.py), masked
#     rows on CUDA (tests/conformance/masked_rows, its every case).
# Each step's time is cut so that the run packs its logs within DEADLINE seconds (default 570).
# BASE: a directory holding the base tree's python/flashattn and bench/ (gpt2_train.py,
#   gpt2_step_profile.py, provenance.py), made by the caller, e.g.
#   mkdir -p .deps/base && git archive <base> python/flashattn bench | tar -x -C .deps/base
#   && cp bench/gpt2_step_profile.py .deps/base/bench/   (default .deps/base; none: no A/B).
# STEPS (default train,profile,checks, in that order; about 6, 2 and 4 minutes at TRAIN_STEPS 200,
# the default).
# Usage:
# FLASHATTN_BENCH_COMMIT=<hash> bash bench/device/gpt2_gpu.sh  (carry: [".deps"])
set -uo pipefail
. "$(dirname "$0")/rtc_build_env.sh"
steps=${STEPS:-train,profile,checks}
base=${BASE:-$PWD/.deps/base}
export FLASHATTN_LIBRARY=$B/libflashattn.so
# left N: N seconds, or fewer so that the run ends (and packs its logs) before DEADLINE seconds
# from its start (default 570: the device's 600-second limit on a command)
left() {
  local r=$(( t0 + ${DEADLINE:-570} - $(date +%s) ))
  if [ "$r" -lt "$1" ]; then echo $(( r > 1 ? r : 1 )); else echo "$1"; fi
}
if [[ $steps == *train* ]]; then
  n=${TRAIN_STEPS:-200}
  for ctx in 1024 4096; do
    for side in new base; do
      dir=$PWD; [ $side = base ] && dir=$base
      [ -d "$dir/bench" ] || continue
      mkdir -p "$OUT/train-$side"
      timeout "$(left 300)" python3 "$dir/bench/gpt2_train.py" --contexts $ctx --steps "$n" \
        --impls flashattn,sdpa-flash,sdpa-cudnn --out "$OUT/train-$side/$ctx" > "$OUT/train-$side-$ctx.txt" 2>&1 ||
        status=1
      echo "$(stamp) train, $side package:"; grep -E "^\| $ctx \|" "$OUT/train-$side-$ctx.txt"
    done
  done
fi
if [[ $steps == *profile* ]]; then
  for ctx in 1024 4096; do
    timeout "$(left 120)" python3 bench/gpt2_step_profile.py --context $ctx --impls flashattn,sdpa-flash \
      > "$OUT/profile-$ctx.md" 2>&1 || status=1
    echo "$(stamp) profile $ctx: $(grep -E '^## (flashattn|sdpa)' "$OUT/profile-$ctx.md" | tr '\n' ' ')"
    if [ -d "$base/bench" ]; then
      timeout "$(left 120)" python3 "$base/bench/gpt2_step_profile.py" --context $ctx --impls flashattn \
        > "$OUT/profile-$ctx-base.md" 2>&1 || status=1
      echo "$(stamp) profile $ctx base: $(grep -E '^## flashattn' "$OUT/profile-$ctx-base.md")"
    fi
  done
fi
if [[ $steps == *checks* ]]; then
  PYTHONPATH=$PWD/python:$PWD/python/tests timeout "$(left 400)" python3 -m pytest -q -p no:cacheprovider \
    python/tests/test_torch.py > "$OUT/pytest-torch.txt" 2>&1
  rc=$?; [ $rc -ne 0 ] && status=1
  echo "$(stamp) test_torch.py: exit $rc; $(tail -1 "$OUT/pytest-torch.txt")"
  timeout "$(left 300)" "$B/tests/conformance/masked_rows" --backend cuda > "$OUT/masked-rows.txt" 2>&1
  rc=$?; [ $rc -ne 0 ] && status=1
  echo "$(stamp) masked_rows: exit $rc; $(tail -1 "$OUT/masked-rows.txt")"
fi
echo "$(stamp) done, status $status"
pack_out
exit $status
