#!/bin/bash
# H200: d 128 backward, each consumer's dQ over its own keys (FA_SM90_BW_OWN_DQ=1) against the shared
# dQ (=0): conformance with the candidate, then gpu_bench A/B (alternating, same run)
B=/tmp/b; mkdir -p $B; xz -dc .deps/pk/conf.tar.xz | tar xf - -C $B
xz -dc .deps/pk/lib-own.so.xz > $B/libown.so; xz -dc .deps/pk/lib-base.so.xz > $B/libbase.so
export LD_LIBRARY_PATH=$B/lib
date -u
timeout 200 $B/conformance --backend cuda --grid full > $OUT/conformance-own.log 2>&1; echo "conformance rc $?"; tail -2 $OUT/conformance-own.log; grep -B3 "FAILED \]" $OUT/conformance-own.log | head -20
timeout 60 compute-sanitizer --tool racecheck $B/conformance --backend cuda --grid full --filter longbwd-d128 > $OUT/racecheck-own.log 2>&1; echo "racecheck rc $? $(grep -h 'RACECHECK SUMMARY' $OUT/racecheck-own.log)"
for v in own base own base; do
  echo "== $v"
  timeout 100 python3 bench/gpu_bench.py --lib $B/lib$v.so --seqlens 4096,16384 --dims 128 --dtype bf16 --causal both --no-math 2>&1 | tee -a $OUT/bench-$v.txt | grep '^| 128' | cut -d'|' -f2-6
done
date -u
