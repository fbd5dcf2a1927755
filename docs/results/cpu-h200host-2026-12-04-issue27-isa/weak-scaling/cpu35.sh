#!/usr/bin/env bash
# issue 27, why the backward scales worse than the forward on the H200 host: weak scaling, one
# head per thread (N threads, N heads), fp32, batch 1, d 128, seqlen 1024 and 2048; if the time per
# call grows with N, the threads contend for something they share (L3, memory, the VM's cores).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export PATH=/opt/torch/.venv/bin:$PATH
log=$OUT/log.txt
B=/tmp/cpu
rm -rf $B; meson setup $B -Dgpu=disabled -Dopencl=disabled -Dtests=false -Dbench=false > $OUT/build.txt 2>&1 && ninja -C $B >> $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
echo "commit $(cat .deps/scripts/commit); $(date -u +%FT%TZ); $(lscpu | grep 'Model name')" | tee -a $log
for s in 1024 2048; do
  for n in 1 2 4 8 16; do
    for causal in "" "--causal"; do
      r=$($B/tools/flashattn run --backend cpu --dtype fp32 --batch 1 --heads $n --seqlen-q $s --dim 128 --threads $n --repeat 3 --backward $causal 2>&1 | grep -E "^(forward|backward):" | awk '{printf "%s min %s ms; ", $1, $5}')
      echo "s $s threads=heads $n ${causal:-noncausal}: $r" | tee -a $log
    done
  done
done
