#!/usr/bin/env bash
# issue 27 on a 2-core machine (the developers' and CI's VM kind: AMD EPYC, family 25 model 1, AVX2, no AVX-512),
# session 32, 2026-12-04: PyTorch from the wheel stage of CI (/tmp/fa-venv, torch 2.15.0 from PyPI, its CPU kernels),
# our library from a CPU-only release build of the same commit. Run twice, one after the other (t2-run1.md, t2-run2.md).
set -eu
meson setup /tmp/bc -Dcuda=disabled -Dopencl=disabled -Dhip=disabled
ninja -C /tmp/bc
FLASHATTN_BENCH_COMMIT=$(git rev-parse --short HEAD) FLASHATTN_LIBRARY=/tmp/bc/libflashattn.so PYTHONPATH=$PWD/python \
  /tmp/fa-venv/bin/python bench/cpu_sdpa.py --threads 2 --seqlens 1024,2048 --dims 64,128 --heads 16 \
  --dtypes bf16,fp32 --runs 3
# one thread and two, our tool alone (the backward's scaling), alternating:
for t in 2 1 2; do
  /tmp/bc/tools/flashattn run --backend cpu --batch 1 --heads 16 --dim 128 --seqlen-q 2048 --dtype fp32 --threads $t \
    --repeat 3 --backward
done
