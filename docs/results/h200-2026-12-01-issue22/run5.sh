# run 5: the final tree: build, full conformance grid on four CUDA families (parallel), the modifiers' cost, A/B of the plain calls against 6b238e5
set -u
export FLASHATTN_BENCH_COMMIT=$1
export PATH=/opt/torch/.venv/bin:/usr/local/cuda/bin:$PATH
L=/tmp/logs5; rm -rf $L; mkdir -p $L
if [ -d /tmp/b ]; then
  export PKG_CONFIG_PATH=/tmp/pc LIBRARY_PATH=$PWD/.deps/cm/usr/lib/x86_64-linux-gnu:$PWD/.deps/ocl/usr/lib/x86_64-linux-gnu
  find /tmp/b -name '*.cu.o' -delete
  t0=$(date +%s); ninja -C /tmp/b -j16 > $L/build.log 2>&1 || { grep -A20 FAILED $L/build.log | head -60; exit 1; }; echo "build $(( $(date +%s) - t0 )) s"
else
  bash .deps/scripts/dev_build.sh || exit 1
fi
export LD_LIBRARY_PATH=/tmp/b:$PWD/.deps/cm/usr/lib/x86_64-linux-gnu:$PWD/.deps/ocl/usr/lib/x86_64-linux-gnu
C=/tmp/b/tests/conformance/conformance
for fam in default sm80 sm90 portable; do
  ( [ $fam = default ] || export FLASHATTN_CUDA_KERNELS=$fam
    t0=$(date +%s); timeout 300 $C --backend cuda --grid full > $L/conf-cuda-$fam.log 2>&1
    echo "conformance cuda $fam: rc $? in $(( $(date +%s) - t0 )) s" >> $L/summary.txt ) &
done
wait
mkdir -p /tmp/before; xz -dc .deps/pk/before.so.xz > /tmp/before/libflashattn.so
timeout 100 python3 bench/gpu_bench.py --lib /tmp/b/libflashattn.so --modifiers --seqlens 4096,16384 --dims 128 > $L/modifiers.md 2>&1; echo "modifiers rc $?" >> $L/summary.txt
timeout 150 python3 bench/gpu_ab.py --lib /tmp/before/libflashattn.so --lib /tmp/b/libflashattn.so --names 6b238e5,$1 --repeats 3 > $L/ab.md 2>&1; echo "ab rc $?" >> $L/summary.txt
cat $L/summary.txt; grep -h "PASSED\|FAILED" $L/conf-*.log | sort | uniq -c; cat $L/modifiers.md $L/ab.md
tar cJf $OUT/logs5.tar.xz -C /tmp logs5
