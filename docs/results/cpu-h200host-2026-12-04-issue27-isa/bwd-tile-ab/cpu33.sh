#!/usr/bin/env bash
# issue 27: the backward's key tile. A = this tree (backward tiles 64 x 64 at d 128, 64 x 128 at
# d 64); B = the tile table's last row at M = 256 KiB, B_r <= 64 (64 x 128 at d 128, 64 x 256 at
# d 64). Alternating A B A B, 16 and 2 threads, fp32.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export PATH=/opt/torch/.venv/bin:$PATH
R=$PWD
export PYTHONUNBUFFERED=1 FLASHATTN_BENCH_COMMIT=$(cat .deps/scripts/commit)
log=$OUT/log.txt
which perf | tee -a $log
rm -rf /tmp/srcB /tmp/cpuB && mkdir /tmp/srcB && tar --exclude=./.deps --exclude=./.git -cf - . | tar -C /tmp/srcB -xf -
sed -i 's/{.max_d = FA_MAX_HEAD_DIM, .onchip_bytes = 128 \* 1024, .max_block_q = 128}/{.max_d = FA_MAX_HEAD_DIM, .onchip_bytes = 256 * 1024, .max_block_q = 64}/' /tmp/srcB/backends/cpu/backend.c
grep -n "onchip_bytes = 256 \* 1024, .max_block_q = 64}" /tmp/srcB/backends/cpu/backend.c | tee -a $log
for v in A B; do
  src=$R; [ $v = B ] && src=/tmp/srcB
  [ -e /tmp/cpu$v/build.ninja ] || meson setup /tmp/cpu$v $src -Dgpu=disabled -Dopencl=disabled -Dtests=false -Dbench=false > $OUT/build$v.txt 2>&1
  ninja -C /tmp/cpu$v >> $OUT/build$v.txt 2>&1 || { tail -30 $OUT/build$v.txt; exit 1; }
done
/tmp/cpuB/tools/flashattn run --backend cpu --dtype fp32 --dim 128 --backward --seqlen-q 256 --repeat 1 | grep kernel | tee -a $log
export PYTHONPATH=$R/python
bench() { # name threads lib
  local t=$(date +%s)
  FLASHATTN_LIBRARY=/tmp/cpu$3/libflashattn.so timeout ${LIMIT:-200} python bench/cpu_sdpa.py --threads $2 --seqlens ${SEQS:-2048,4096} --dims 64,128 --heads 16 --dtypes fp32 --causal both --runs 3 > $OUT/$1.md 2>&1
  echo "$1: rc $? $(( $(date +%s) - t )) s" | tee -a $log
  grep -E "SGEMM|^\| fp32" $OUT/$1.md | tee -a $log
}
for rep in 1 2; do
  bench t16-A-$rep 16 A
  bench t16-B-$rep 16 B
done
SEQS=2048 bench t2-A 2 A
SEQS=2048 bench t2-B 2 B
