#!/bin/bash
# H200, final build of issue 6: full conformance grid with every call forced onto the Hopper kernels
# where they exist (FLASHATTN_CUDA_KERNELS=sm90), then compute-sanitizer memcheck on the whole grid
# with the default chooser
B=/tmp/b; mkdir -p $B; xz -dc .deps/pk/bins.tar.xz | tar xf - -C $B
export LD_LIBRARY_PATH=$B/lib
date -u
FLASHATTN_CUDA_KERNELS=sm90 timeout 150 $B/conformance --backend cuda --grid full > $OUT/conformance-sm90.log 2>&1; echo "sm90 rc $?"; tail -2 $OUT/conformance-sm90.log; grep -B3 "FAILED \]" $OUT/conformance-sm90.log | head
date -u
timeout 420 compute-sanitizer --tool memcheck $B/conformance --backend cuda --grid full > $OUT/memcheck-full.log 2>&1; echo "memcheck rc $?"; grep 'ERROR SUMMARY' $OUT/memcheck-full.log; tail -3 $OUT/memcheck-full.log
date -u
