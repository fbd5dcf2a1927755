#!/usr/bin/env bash
# issue 27, session 28, third run: the fused forward softmax step (bf16), the backward without
# per-tile transposes (bf16); tile parts; tests; the table for docs/benchmarks.md (16 threads,
# twice, and 2 threads); the backward with 128-key tiles (FA_CPU_BWD_MIN_BLOCK_K=128) beside it.
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
rm -rf $B /tmp/v1
meson setup $B -Dgpu=disabled -Dopencl=disabled > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
ninja -C $B >> $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
grep -c "warning" $OUT/build.txt | sed 's/^/build warnings: /' | tee -a $log
CFLAGS="-DFA_CPU_BWD_MIN_BLOCK_K=128" meson setup /tmp/v1 -Dgpu=disabled -Dopencl=disabled -Dtests=false > $OUT/build-v1.txt 2>&1 && ninja -C /tmp/v1 >> $OUT/build-v1.txt 2>&1 || echo "v1 build failed" | tee -a $log
echo "builds $(( $(date +%s) - T0 )) s" | tee -a $log
$B/tools/flashattn info | grep -E "^ +0:" | tee -a $log
$B/bench/cpu_tile_parts --tables amx,avx512 > $OUT/tile-parts.md 2>&1; cat $OUT/tile-parts.md | tee -a $log
t=$(date +%s)
meson test -C $B --no-rebuild core_cpu_isa conformance-cpu-amx masked-rows-cpu-amx masked-rows-cpu decode-cpu long-seq-cpu-bf16-causal > $OUT/test.txt 2>&1
echo "tests rc $? $(( $(date +%s) - t )) s" | tee -a $log
grep -E "^ *[0-9]+/[0-9]+ " $OUT/test.txt | tee -a $log
export PYTHONPATH=$R/python
bench() { # name library threads args...
  local name=$1 lib=$2 th=$3; shift 3
  local t=$(date +%s)
  FLASHATTN_LIBRARY=$lib timeout ${LIMIT:-300} python bench/cpu_sdpa.py --threads $th "$@" > $OUT/$name.md 2>&1
  echo "$name: rc $? $(( $(date +%s) - t )) s" | tee -a $log
  cat $OUT/$name.md | tee -a $log
}
L=$B/libflashattn.so
bench t16 $L 16 --seqlens 1024,2048,4096 --dims 64,128 --heads 16 --dtypes bf16,fp32 --runs 3
bench t2 $L 2 --seqlens 1024,2048 --dims 64,128 --heads 16 --dtypes bf16,fp32 --runs 3
bench t16-bwdk128 /tmp/v1/libflashattn.so 16 --seqlens 2048,4096 --dims 64,128 --heads 16 --dtypes bf16,fp32 --runs 3
bench t16-repeat $L 16 --seqlens 1024,2048,4096 --dims 64,128 --heads 16 --dtypes bf16,fp32 --runs 3
echo "total $(( $(date +%s) - T0 )) s" | tee -a $log
