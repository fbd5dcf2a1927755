#!/usr/bin/env bash
# issue 27, session 28, second run: the interleaved exp, and tile shapes for the CPU forward and
# backward (the experiment knobs FA_CPU_FWD_MIN_BLOCK_Q, FA_CPU_BWD_MIN_BLOCK_Q/K of backend.c),
# three builds of the same tree in one run; cpu_tile_parts (one tile's phases per table).
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
rm -rf $B /tmp/v1 /tmp/v2
meson setup $B -Dgpu=disabled -Dopencl=disabled > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
ninja -C $B >> $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
grep -c "warning" $OUT/build.txt | sed 's/^/build warnings: /' | tee -a $log
CFLAGS="-DFA_CPU_FWD_MIN_BLOCK_Q=128 -DFA_CPU_BWD_MIN_BLOCK_K=128" meson setup /tmp/v1 -Dgpu=disabled -Dopencl=disabled -Dtests=false > $OUT/build-v1.txt 2>&1 && ninja -C /tmp/v1 >> $OUT/build-v1.txt 2>&1 || echo "v1 build failed" | tee -a $log
CFLAGS="-DFA_CPU_FWD_MIN_BLOCK_Q=256 -DFA_CPU_BWD_MIN_BLOCK_K=256 -DFA_CPU_BWD_MIN_BLOCK_Q=128" meson setup /tmp/v2 -Dgpu=disabled -Dopencl=disabled -Dtests=false > $OUT/build-v2.txt 2>&1 && ninja -C /tmp/v2 >> $OUT/build-v2.txt 2>&1 || echo "v2 build failed" | tee -a $log
echo "builds $(( $(date +%s) - T0 )) s" | tee -a $log
$B/tools/flashattn info | grep -E "^ +0:" | tee -a $log
$B/bench/cpu_tile_parts --tables amx,avx512,avx2 > $OUT/tile-parts.md 2>&1; cat $OUT/tile-parts.md | tee -a $log
t=$(date +%s)
meson test -C $B --no-rebuild core_cpu_isa conformance-cpu-amx masked-rows-cpu-amx conformance-cpu-avx512 masked-rows-cpu-avx512 decode-cpu > $OUT/test.txt 2>&1
echo "tests rc $? $(( $(date +%s) - t )) s" | tee -a $log
grep -E "^ *[0-9]+/[0-9]+ " $OUT/test.txt | tee -a $log
grep -E "INFO" $B/meson-logs/testlog.txt | grep -v "Inherited" | tee -a $log
export PYTHONPATH=$R/python
bench() { # name library threads args...
  local name=$1 lib=$2 th=$3; shift 3
  local t=$(date +%s)
  FLASHATTN_LIBRARY=$lib timeout ${LIMIT:-300} python bench/cpu_sdpa.py --threads $th "$@" > $OUT/$name.md 2>&1
  echo "$name: rc $? $(( $(date +%s) - t )) s" | tee -a $log
  cat $OUT/$name.md | tee -a $log
}
for v in cpu v1 v2; do
  bench t16-$v /tmp/$v/libflashattn.so 16 --seqlens 2048,4096 --dims 64,128 --heads 16 --dtypes bf16,fp32 --runs 3
done
for v in cpu v1 v2; do
  bench t2-$v /tmp/$v/libflashattn.so 2 --seqlens 2048 --dims 64,128 --heads 16 --dtypes bf16,fp32 --runs 2
done
echo "total $(( $(date +%s) - T0 )) s" | tee -a $log
