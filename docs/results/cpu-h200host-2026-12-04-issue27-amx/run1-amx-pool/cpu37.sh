#!/usr/bin/env bash
# issue 27, session 28: the amx table (bf16 products on AMX tiles) and the persistent pool on the
# H200 machine's host. Builds HEAD and the same tree with the per-call thread pool (pool.h of
# a7a81e9) for an A/B in the same run; tests (kernel tables, the full CPU conformance grid on the
# default table, amx forced, masked rows, decode); bench/cpu_sdpa.py.
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
rm -rf $B /tmp/np /tmp/npb
meson setup $B -Dgpu=disabled -Dopencl=disabled > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
ninja -C $B >> $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
grep -c "warning" $OUT/build.txt | sed 's/^/build warnings: /' | tee -a $log
# the per-call pool variant: pool.h of a7a81e9 (static inline fa_parallel_for), pool.c emptied
cp -r $R/. /tmp/np/ && rm -rf /tmp/np/build* /tmp/np/.git
cp .deps/scripts/nopool/pool.h /tmp/np/backends/cpu/pool.h
echo 'typedef int fa_pool_per_call;' > /tmp/np/backends/cpu/pool.c
(cd /tmp/np && meson setup /tmp/npb -Dgpu=disabled -Dopencl=disabled -Dtests=false > $OUT/build-np.txt 2>&1 && ninja -C /tmp/npb >> $OUT/build-np.txt 2>&1) || { echo "per-call pool build failed" | tee -a $log; tail -20 $OUT/build-np.txt; }
$B/tools/flashattn info | grep -E "^ +0:" | tee -a $log
t=$(date +%s)
meson test -C $B --no-rebuild core_cpu_isa conformance-cpu conformance-cpu-amx masked-rows-cpu-amx masked-rows-cpu conformance-cpu-avx512 decode-cpu long-seq-cpu-bf16-causal > $OUT/test.txt 2>&1
echo "tests rc $? $(( $(date +%s) - t )) s" | tee -a $log
grep -E "^ *[0-9]+/[0-9]+ " $OUT/test.txt | tee -a $log
grep -E "INFO" $B/meson-logs/testlog.txt | tee -a $log
cp $B/meson-logs/testlog.txt $OUT/testlog.txt
export PYTHONPATH=$R/python
bench() { # name library threads args...
  local name=$1 lib=$2 th=$3; shift 3
  local t=$(date +%s)
  FLASHATTN_LIBRARY=$lib timeout ${LIMIT:-300} python bench/cpu_sdpa.py --threads $th "$@" > $OUT/$name.md 2>&1
  echo "$name: rc $? $(( $(date +%s) - t )) s" | tee -a $log
  cat $OUT/$name.md | tee -a $log
}
L=$B/libflashattn.so; NP=/tmp/npb/libflashattn.so
bench t16 $L 16 --seqlens 1024,2048,4096 --dims 64,128 --heads 16 --dtypes bf16,fp32 --runs 3
bench ab-pool-t16 $L 16 --seqlens 1024,2048 --dims 64,128 --heads 16 --dtypes fp32,bf16 --runs 3
bench ab-percall-t16 $NP 16 --seqlens 1024,2048 --dims 64,128 --heads 16 --dtypes fp32,bf16 --runs 3
bench t2 $L 2 --seqlens 1024,2048 --dims 64,128 --heads 16 --dtypes bf16,fp32 --runs 3
FLASHATTN_CPU_ISA=avx512 bench t16-bf16-avx512 $L 16 --seqlens 2048 --dims 64,128 --heads 16 --dtypes bf16 --runs 3
echo "total $(( $(date +%s) - T0 )) s" | tee -a $log
