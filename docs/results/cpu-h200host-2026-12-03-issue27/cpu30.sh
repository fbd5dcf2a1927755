#!/usr/bin/env bash
# issue 27: thread scaling of ours and PyTorch's CPU SDPA (fp32, d 128, seqlen 2048, causal and not),
# 1 to 16 threads, and the host's full CPU flags.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export PATH=/opt/torch/.venv/bin:$PATH
R=$PWD
export FLASHATTN_BENCH_COMMIT=$(cat .deps/scripts/commit) PYTHONUNBUFFERED=1
log=$OUT/log.txt
meson setup /tmp/cpu -Dgpu=disabled -Dtests=false -Dbench=false > $OUT/build.txt 2>&1 && ninja -C /tmp/cpu >> $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
grep -m1 "^flags" /proc/cpuinfo | tr ' ' '\n' | grep -E "avx|amx|fma|f16c" | tr '\n' ' ' | tee -a $log; echo | tee -a $log
lscpu | grep -E "Model name|MHz|L1d|L2|L3" | tee -a $log
export FLASHATTN_LIBRARY=/tmp/cpu/libflashattn.so PYTHONPATH=$R/python
for th in 1 2 4 8 16; do
  timeout 120 python bench/cpu_sdpa.py --threads $th --seqlens 2048 --dims 128 --heads 16 --dtypes fp32 --runs 3 > $OUT/scale-t$th.md 2>&1
  echo "threads $th rc $?" | tee -a $log; grep -E "SGEMM|^\| fp32" $OUT/scale-t$th.md | tee -a $log
done
