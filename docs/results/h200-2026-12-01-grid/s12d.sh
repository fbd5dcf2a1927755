#!/bin/bash
# H200: the final benchmark grid of issue 6 (bf16 and fp16, d 64/128/256, 1k/4k/16k, causal and not):
# the default chooser (sm90 path), the sm80 path, PyTorch flash (FA2), cuDNN, standard attention, one run
B=/tmp/b; mkdir -p $B; xz -dc .deps/pk/bins.tar.xz | tar xf - -C $B
export LD_LIBRARY_PATH=$B/lib
date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader
timeout 560 python3 bench/gpu_bench.py --lib $B/lib/libflashattn.so.0 --seqlens 1024,4096,16384 --dims 64,128,256 --dtype bf16,fp16 --causal both --sm80 2>&1 | tee $OUT/bench-grid.md
date -u
