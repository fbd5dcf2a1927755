#!/bin/bash
# H200: the bf16 benchmark grid (d 64/128/256, 1k/4k/16k, causal and not): default chooser (sm90 path),
# the sm80 path, PyTorch flash (FA2), cuDNN and standard attention in one run
B=/tmp/b; mkdir -p $B; xz -dc .deps/pk/bins.tar.xz | tar xf - -C $B
export LD_LIBRARY_PATH=$B/lib
date -u; nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader
timeout 560 python3 bench/gpu_bench.py --lib $B/lib/libflashattn.so.0 --seqlens 1024,4096,16384 --dims 64,128,256 --dtype bf16 --causal both --sm80 2>&1 | tee $OUT/bench-grid-bf16.md
date -u
