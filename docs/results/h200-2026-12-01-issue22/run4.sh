# run 4: rebuild (CUDA objects again: meson does not track the .cuh / core headers for them), modifiers cost, conformance of the modifier cases
set -u
export FLASHATTN_BENCH_COMMIT=$1
export PATH=/opt/torch/.venv/bin:/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=/tmp/b:$PWD/.deps/cm/usr/lib/x86_64-linux-gnu:$PWD/.deps/ocl/usr/lib/x86_64-linux-gnu
export PKG_CONFIG_PATH=/tmp/pc LIBRARY_PATH=$PWD/.deps/cm/usr/lib/x86_64-linux-gnu:$PWD/.deps/ocl/usr/lib/x86_64-linux-gnu
L=/tmp/logs4; rm -rf $L; mkdir -p $L
if [ -d /tmp/b ]; then
  find /tmp/b -name '*.cu.o' -delete
  t0=$(date +%s); ninja -C /tmp/b -j16 > $L/build.log 2>&1 || { grep -A20 FAILED $L/build.log | head -60; exit 1; }; echo "build $(( $(date +%s) - t0 )) s"
else
  bash .deps/scripts/dev_build.sh || exit 1
fi
timeout 150 python3 bench/gpu_bench.py --lib /tmp/b/libflashattn.so --modifiers --seqlens 4096,16384 --dims 128 > $L/modifiers.md 2>&1; echo "modifiers rc $?"
C=/tmp/b/tests/conformance/conformance
for fam in default sm80 portable mfma-emulated; do
  ( [ $fam = default ] || export FLASHATTN_CUDA_KERNELS=$fam
    for f in softcap alibi-d; do timeout 200 $C --backend cuda --grid full --filter $f > $L/conf-$fam-$f.log 2>&1; echo "conf $fam $f rc $?" >> $L/summary.txt; done ) &
done
wait
cat $L/modifiers.md $L/summary.txt; grep -h "PASSED\|FAILED" $L/conf-*.log | sort | uniq -c
tar cJf $OUT/logs4.tar.xz -C /tmp logs4
