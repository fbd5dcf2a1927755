#!/bin/bash
# H200: the ws forward with 176-key tiles at d 128 (FA_SM90_WS_BN_D128): conformance, then
# gpu_bench A/B against the 128-key build, with PyTorch's flash and cuDNN in the same runs
R=$PWD; B=/tmp/b; mkdir -p $B; xz -dc .deps/pk/bins.tar.xz | tar xf - -C $B
xz -dc .deps/pk/lib-bn128.so.xz > $B/lib128.so; xz -dc .deps/pk/lib-bn176.so.xz > $B/lib176.so
export LD_LIBRARY_PATH=$B/lib
date -u
timeout 200 $B/conformance --backend cuda --grid full > $OUT/conformance-bn176.log 2>&1; echo "conformance rc $?"; tail -2 $OUT/conformance-bn176.log; grep -B1 "FAILED \]" $OUT/conformance-bn176.log | head
for v in 176 128 176 128; do
  echo "== BN $v"
  timeout 120 python3 bench/gpu_bench.py --lib $B/lib$v.so --seqlens 4096,16384 --dims 128 --dtype bf16 --causal both --no-math 2>&1 | tee -a $OUT/bench-bn$v.txt | grep -v "^#" | tail -8
done
date -u
