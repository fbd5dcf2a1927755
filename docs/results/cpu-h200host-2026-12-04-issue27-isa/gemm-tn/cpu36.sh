#!/usr/bin/env bash
# issue 27, the table for docs/benchmarks.md: CPU-only build with tests on the H200 machine's host;
# the kernel-table unit test and the avx512 conformance / masked-rows / decode tests; then
# bench/cpu_sdpa.py at 16 and 2 threads (default table: avx512), fp32.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export PATH=/opt/torch/.venv/bin:$PATH
R=$PWD
mkdir -p /tmp/pc
d=$R/.deps/cm/usr; pc=$d/lib/x86_64-linux-gnu/pkgconfig/cmocka.pc
sed -e "s|^prefix=/usr|prefix=$d|; s|-L/usr/lib|-L$d/lib|; s|-I/usr/include|-I$d/include|" $pc > /tmp/pc/cmocka.pc
export PKG_CONFIG_PATH=/tmp/pc
export LD_LIBRARY_PATH=$R/.deps/cm/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export LIBRARY_PATH=$LD_LIBRARY_PATH PYTHONUNBUFFERED=1
export FLASHATTN_BENCH_COMMIT=$(cat .deps/scripts/commit)
log=$OUT/log.txt
T0=$(date +%s)
B=/tmp/cpu
rm -rf $B
meson setup $B -Dgpu=disabled -Dopencl=disabled > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
ninja -C $B >> $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
grep -c "warning" $OUT/build.txt | sed 's/^/build warnings: /' | tee -a $log
$B/tools/flashattn info | grep -E "^ +0:" | tee -a $log
t=$(date +%s)
meson test -C $B --no-rebuild core_cpu_isa conformance-cpu-avx512 masked-rows-cpu-avx512 decode-cpu > $OUT/test.txt 2>&1
echo "tests rc $? $(( $(date +%s) - t )) s" | tee -a $log
grep -E "^ *[0-9]+/[0-9]+ " $OUT/test.txt | tee -a $log
grep -E "INFO" $B/meson-logs/testlog.txt | tee -a $log
export FLASHATTN_LIBRARY=$B/libflashattn.so PYTHONPATH=$R/python
bench() { # name threads args...
  local name=$1 th=$2; shift 2
  local t=$(date +%s)
  timeout ${LIMIT:-200} python bench/cpu_sdpa.py --threads $th "$@" > $OUT/$name.md 2>&1
  echo "$name: rc $? $(( $(date +%s) - t )) s" | tee -a $log
  cat $OUT/$name.md | tee -a $log
}
bench t16 16 --seqlens 1024,2048,4096 --dims 64,128 --heads 16 --dtypes fp32 --runs 3
bench t2 2 --seqlens 1024,2048 --dims 64,128 --heads 16 --dtypes fp32 --runs 3
echo "total $(( $(date +%s) - T0 )) s" | tee -a $log
