#!/usr/bin/env bash
# issue 27 baseline on the H200 machine's CPU host: CPU-only build, bench/cpu_sdpa.py (ours vs
# PyTorch CPU SDPA, same threads, SGEMM rate) with all 16 threads and with 2.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export PATH=/opt/torch/.venv/bin:$PATH
R=$PWD
export FLASHATTN_BENCH_COMMIT=$(cat .deps/scripts/commit) PYTHONUNBUFFERED=1
log=$OUT/log.txt
T0=$(date +%s)
meson setup /tmp/cpu -Dgpu=disabled -Dtests=false -Dbench=false > $OUT/build.txt 2>&1 && ninja -C /tmp/cpu >> $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
echo "build $(( $(date +%s) - T0 )) s" | tee -a $log
lscpu | grep -E "Model name|^CPU\(s\)|Thread|Core|Socket|Flags" | cut -c1-400 | tee -a $log
python -c "import ml_dtypes" 2>/dev/null && DT=fp32,bf16 || DT=fp32
export FLASHATTN_LIBRARY=/tmp/cpu/libflashattn.so PYTHONPATH=$R/python
for th in ${THREADS:-16 2}; do
  t=$(date +%s)
  seqs=1024,2048,4096; [ $th -le 2 ] && seqs=1024,2048
  timeout ${LIMIT:-250} python bench/cpu_sdpa.py --threads $th --seqlens $seqs --dims 64,128 --heads 16 --dtypes $DT --runs 3 > $OUT/cpu-sdpa-t$th.md 2>&1
  echo "cpu_sdpa threads $th: rc $? $(( $(date +%s) - t )) s" | tee -a $log
  cat $OUT/cpu-sdpa-t$th.md | tee -a $log
done
echo "total $(( $(date +%s) - T0 )) s" | tee -a $log
