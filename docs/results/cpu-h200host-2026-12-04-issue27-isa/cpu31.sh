#!/usr/bin/env bash
# issue 27, the kernel tables: CPU-only build with tests on the H200 machine's host (AVX-512);
# conformance and masked-rows for every table the host runs; bench/cpu_sdpa.py with the default
# table (avx512) at 16, 2 and 1 threads, and the avx2 table at 16 and 1 for the A/B.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export PATH=/opt/torch/.venv/bin:$PATH
R=$PWD
mkdir -p /tmp/pc
for pair in cm:cmocka.pc; do
  d=$R/.deps/${pair%%:*}/usr; pc=$d/lib/x86_64-linux-gnu/pkgconfig/${pair#*:}
  sed -e "s|^prefix=/usr|prefix=$d|; s|-L/usr/lib|-L$d/lib|; s|-I/usr/include|-I$d/include|" $pc > /tmp/pc/${pair#*:}
done
export PKG_CONFIG_PATH=/tmp/pc
export LD_LIBRARY_PATH=$R/.deps/cm/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export LIBRARY_PATH=$LD_LIBRARY_PATH PYTHONUNBUFFERED=1
export FLASHATTN_BENCH_COMMIT=$(cat .deps/scripts/commit)
log=$OUT/log.txt
T0=$(date +%s)
B=/tmp/cpu
STAGE=${1:-all}
if [ ! -e $B/build.ninja ]; then
  meson setup $B -Dgpu=disabled -Dopencl=disabled > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
fi
ninja -C $B >> $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
grep -c "warning" $OUT/build.txt | sed 's/^/build warnings: /' | tee -a $log
echo "build $(( $(date +%s) - T0 )) s" | tee -a $log
lscpu | grep -E "Model name|^CPU\(s\)|Thread|Core|Socket|MHz" | tee -a $log
$B/tools/flashattn info | grep -E "^ +0:" | tee -a $log
if [ $STAGE = all ] || [ $STAGE = test ]; then
  t=$(date +%s)
  meson test -C $B --no-rebuild --suite conformance --num-processes 4 > $OUT/test.txt 2>&1
  echo "conformance rc $? $(( $(date +%s) - t )) s" | tee -a $log
  grep -E "^ *[0-9]+/[0-9]+ " $OUT/test.txt | grep -v SKIP | tee -a $log
  cp $B/meson-logs/testlog.txt $OUT/testlog.txt 2>/dev/null
fi
python -c "import ml_dtypes" 2>/dev/null && DT=fp32,bf16 || DT=fp32
export FLASHATTN_LIBRARY=$B/libflashattn.so PYTHONPATH=$R/python
bench() { # name threads isa args...
  local name=$1 th=$2 isa=$3; shift 3
  local t=$(date +%s)
  FLASHATTN_CPU_ISA=$isa timeout ${LIMIT:-200} python bench/cpu_sdpa.py --threads $th "$@" > $OUT/$name.md 2>&1
  echo "$name: rc $? $(( $(date +%s) - t )) s" | tee -a $log
  cat $OUT/$name.md | tee -a $log
}
if [ $STAGE = all ] || [ $STAGE = bench ]; then
  bench t16-avx512 16 avx512 --seqlens 1024,2048,4096 --dims 64,128 --heads 16 --dtypes $DT --runs 3
  bench t16-avx2 16 avx2 --seqlens 2048 --dims 64,128 --heads 16 --dtypes fp32 --runs 3
  bench t2-avx512 2 avx512 --seqlens 1024,2048 --dims 64,128 --heads 16 --dtypes $DT --runs 3
  bench t1-avx512 1 avx512 --seqlens 2048 --dims 128 --heads 16 --dtypes fp32 --causal no --runs 2
  bench t1-avx2 1 avx2 --seqlens 2048 --dims 128 --heads 16 --dtypes fp32 --causal no --runs 2
fi
echo "total $(( $(date +%s) - T0 )) s" | tee -a $log
