#!/usr/bin/env bash
# Runs on a machine with one GPU: GPT-2 small training through this tree's Python package, and
# through a base tree's package for an A/B, both on this tree's library built the fast way
# (-Dcuda-kernels=rtc). Logs under $OUT as it goes (all.tgz at the end):
#   checks: the Python suite's torch cases on CUDA tensors (python/tests/test_torch.py), masked
#     rows on CUDA (tests/conformance/masked_rows, its every case);
#   profile: bench/gpt2_step_profile.py at contexts 1024 and 4096, this package and SDPA flash,
#     then the base package (where a step's GPU time goes, kernel by kernel);
#   train: bench/gpt2_train.py --contexts 1024,4096 with this package, SDPA flash and SDPA cuDNN in
#     one process, then the same with the base package (each against SDPA in its own process).
# BASE: a directory holding the base tree's python/flashattn and bench/ (gpt2_train.py,
#   gpt2_step_profile.py, provenance.py), made by the caller, e.g.
#   mkdir -p .deps/base && git archive <base> python/flashattn bench | tar -x -C .deps/base
#   && cp bench/gpt2_step_profile.py .deps/base/bench/   (default .deps/base; none: no A/B).
# STEPS (default checks,profile,train; about 4, 2 and 6 minutes), TRAIN_STEPS (default 200).
# Usage:
# FLASHATTN_BENCH_COMMIT=<hash> bash bench/device/gpt2_gpu.sh  (carry: [".deps"])
set -uo pipefail
. "$(dirname "$0")/rtc_build_env.sh"
steps=${STEPS:-checks,profile,train}
base=${BASE:-$PWD/.deps/base}
export FLASHATTN_LIBRARY=$B/libflashattn.so
if [[ $steps == *checks* ]]; then
  PYTHONPATH=$PWD/python:$PWD/python/tests timeout 400 python3 -m pytest -q -p no:cacheprovider \
    python/tests/test_torch.py > "$OUT/pytest-torch.txt" 2>&1
  rc=$?; [ $rc -ne 0 ] && status=1
  echo "$(stamp) test_torch.py: exit $rc; $(tail -1 "$OUT/pytest-torch.txt")"
  timeout 300 "$B/tests/conformance/masked_rows" --backend cuda > "$OUT/masked-rows.txt" 2>&1
  rc=$?; [ $rc -ne 0 ] && status=1
  echo "$(stamp) masked_rows: exit $rc; $(tail -1 "$OUT/masked-rows.txt")"
fi
if [[ $steps == *profile* ]]; then
  for ctx in 1024 4096; do
    python3 bench/gpt2_step_profile.py --context $ctx --impls flashattn,sdpa-flash > "$OUT/profile-$ctx.md" 2>&1 || status=1
    echo "$(stamp) profile $ctx: $(grep -E '^## (flashattn|sdpa)' "$OUT/profile-$ctx.md" | tr '\n' ' ')"
    if [ -d "$base/bench" ]; then
      python3 "$base/bench/gpt2_step_profile.py" --context $ctx --impls flashattn > "$OUT/profile-$ctx-base.md" 2>&1 || status=1
      echo "$(stamp) profile $ctx base: $(grep -E '^## flashattn' "$OUT/profile-$ctx-base.md")"
    fi
  done
fi
if [[ $steps == *train* ]]; then
  n=${TRAIN_STEPS:-200}
  mkdir -p "$OUT/train" "$OUT/train-base"
  python3 bench/gpt2_train.py --contexts 1024,4096 --steps "$n" --impls flashattn,sdpa-flash,sdpa-cudnn \
    --out "$OUT/train" > "$OUT/train.txt" 2>&1 || status=1
  echo "$(stamp) train:"; grep -E '^\| (1024|4096) \|' "$OUT/train.txt"
  if [ -d "$base/bench" ]; then
    python3 "$base/bench/gpt2_train.py" --contexts 1024,4096 --steps "$n" --impls flashattn,sdpa-flash,sdpa-cudnn \
      --out "$OUT/train-base" > "$OUT/train-base.txt" 2>&1 || status=1
    echo "$(stamp) train, base package:"; grep -E '^\| (1024|4096) \|' "$OUT/train-base.txt"
  fi
fi
echo "$(stamp) done, status $status"
pack_out
exit $status
