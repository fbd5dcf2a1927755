#!/bin/bash
# H200, issue 21 run A (library at the commit in FLASHATTN_BENCH_COMMIT, kernels as at e7176ee):
# the memory table measured the same way for every implementation (bench/reproduce.py --parts
# memory), GPT-2 small's per-layer gradients against an fp32 reference (bench/gpt2_layergrad.py),
# and GPT-2 training over three seeds with SDPA flash run twice for its own spread.
B=/tmp/b; mkdir -p $B; xz -dc .deps/pk/binsA.tar.xz | tar xf - -C $B
export LD_LIBRARY_PATH=$B:$PWD/.deps/ocl/usr/lib/x86_64-linux-gnu FLASHATTN_LIBRARY=$B/libflashattn.so
export PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u
timeout 150 python3 bench/gpt2_layergrad.py --contexts 1024,4096 --train-steps 0,50 --out $OUT > $OUT/layergrad.log 2>&1; echo "layergrad rc $?"; date -u
timeout 170 python3 bench/reproduce.py --tool $B/tools/flashattn --lib $B/libflashattn.so --out $OUT --parts memory --max-seqlen 65536 > $OUT/memory.log 2>&1; echo "memory rc $?"; date -u
timeout 230 python3 bench/gpt2_train.py --contexts 4096 --steps 200 --seeds 1,2,3 --impls sdpa-flash,flashattn,sdpa-flash#2 --time-limit 210 --out $OUT > $OUT/train.log 2>&1; echo "train rc $?"; date -u
tail -30 $OUT/layergrad.log; tail -8 $OUT/memory.log; tail -20 $OUT/train.log
