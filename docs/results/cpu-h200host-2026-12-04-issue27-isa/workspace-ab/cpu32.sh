#!/usr/bin/env bash
# issue 27: does the per-call workspace (fresh mmap'd pages each call, faulted in by all threads)
# cost time? The same bench with glibc keeping freed memory (MALLOC_MMAP_THRESHOLD_ /
# MALLOC_TRIM_THRESHOLD_ large: big blocks come from the heap and stay there between calls).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export PATH=/opt/torch/.venv/bin:$PATH
R=$PWD
export PYTHONUNBUFFERED=1 FLASHATTN_BENCH_COMMIT=$(cat .deps/scripts/commit)
log=$OUT/log.txt
B=/tmp/cpu
[ -e $B/build.ninja ] || meson setup $B -Dgpu=disabled -Dopencl=disabled -Dtests=false -Dbench=false > $OUT/build.txt 2>&1
ninja -C $B >> $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
export FLASHATTN_LIBRARY=$B/libflashattn.so PYTHONPATH=$R/python
bench() { # name threads env... -- args
  local name=$1 th=$2; shift 2
  local t=$(date +%s)
  env "$@" timeout ${LIMIT:-200} python bench/cpu_sdpa.py --threads $th --seqlens 2048,4096 --dims 64,128 --heads 16 --dtypes fp32 --causal no --runs 3 > $OUT/$name.md 2>&1
  echo "$name: rc $? $(( $(date +%s) - t )) s" | tee -a $log
  grep -E "SGEMM|^\| fp32" $OUT/$name.md | tee -a $log
}
for rep in 1 2; do
  bench t16-plain-$rep 16 A=1
  bench t16-keep-$rep 16 MALLOC_MMAP_THRESHOLD_=4294967296 MALLOC_TRIM_THRESHOLD_=17179869184 MALLOC_TOP_PAD_=0
done
bench t2-plain 2 A=1
bench t2-keep 2 MALLOC_MMAP_THRESHOLD_=4294967296 MALLOC_TRIM_THRESHOLD_=17179869184
