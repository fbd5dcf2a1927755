#!/usr/bin/env bash
# issue 27, session 29: the table at HEAD (Q and dO packed once per backward call, head-major dQ partials,
# butterfly reductions and two-accumulator row max: tile parts A/B against the previous isa_kernels.c);
# tests; 16 threads to seqlen 8192 and 2 threads; the decode path from 1 to 16 threads (bench/cpu_decode.py).
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
rm -rf /tmp/prev /tmp/prevb && cp -r $R/. /tmp/prev/ && rm -rf /tmp/prev/.git && cp .deps/scripts/isa_kernels_prev.c /tmp/prev/backends/cpu/isa_kernels.c
(cd /tmp/prev && meson setup /tmp/prevb -Dgpu=disabled -Dopencl=disabled -Dtests=false > $OUT/build-prev.txt 2>&1 && ninja -C /tmp/prevb bench/cpu_tile_parts >> $OUT/build-prev.txt 2>&1) || echo "prev build failed" | tee -a $log
echo "builds $(( $(date +%s) - T0 )) s" | tee -a $log
for k in 1 2; do
  echo "tile parts, previous isa_kernels.c ($k)" | tee -a $log
  /tmp/prevb/bench/cpu_tile_parts --tables amx,avx512 | grep -E "softmax|to bf16|scale" | tee -a $log
  echo "tile parts, this tree ($k)" | tee -a $log
  $B/bench/cpu_tile_parts --tables amx,avx512 | tee -a $log
done
$B/tools/flashattn info | grep -E "^ +0:" | tee -a $log
t=$(date +%s)
meson test -C $B --no-rebuild core_cpu_isa conformance-cpu-amx masked-rows-cpu-amx conformance-cpu-avx512 masked-rows-cpu-avx512 long-seq-cpu-bf16-causal long-seq-cpu-fp32 > $OUT/test.txt 2>&1
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
LIMIT=330 bench t16 $L 16 --seqlens 1024,2048,4096,8192 --dims 64,128 --heads 16 --dtypes bf16,fp32 --runs 3
bench t2 $L 2 --seqlens 1024,2048 --dims 64,128 --heads 16 --dtypes bf16,fp32 --runs 3
t=$(date +%s)
FLASHATTN_LIBRARY=$L timeout 240 python bench/cpu_decode.py --threads 1,2,4,8,16 --shapes 1x32768,8x32768,8x8192 --runs 5 > $OUT/decode.md 2>&1
echo "decode: rc $? $(( $(date +%s) - t )) s" | tee -a $log
cat $OUT/decode.md | tee -a $log
echo "total $(( $(date +%s) - T0 )) s" | tee -a $log
