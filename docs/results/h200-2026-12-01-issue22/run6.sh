# run 6 (session 14): build; softcap on the FMA units vs MUFU (old header) same run; device accuracy test; ptxas of sm90
set -u
export FLASHATTN_BENCH_COMMIT=$1
export PATH=/opt/torch/.venv/bin:/usr/local/cuda/bin:$PATH
L=/tmp/logs6; rm -rf $L; mkdir -p $L
R=$PWD
( nvcc -DNDEBUG -O3 -Ibackends/cuda/sm80 -Ibackends/cuda -Ibackends/cpu -Iinclude -Icore -Ibackends/portable -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v -c backends/cuda/sm90/instances.cu -o /tmp/sm90.o > $L/ptxas-sm90-new.log 2>&1 ) &
bash .deps/scripts/dev_build.sh > $L/build.log 2>&1 || { cat $L/build.log; exit 1; }
cat $L/build.log
# the old header's library: the same tree, core/score_mod.h as it was at e3313f7
rm -rf /tmp/old && mkdir /tmp/old && cp -r core include backends tools tests bench python examples meson.build meson_options.txt /tmp/old/ 2>/dev/null; cp .deps/old/score_mod.h /tmp/old/core/score_mod.h
( cd /tmp/old && PKG_CONFIG_PATH=/tmp/pc meson setup /tmp/bo -Dcuda=enabled -Dcuda-archs=90 -Dhip=disabled -Dopencl=disabled -Dnccl=disabled -Dtests=false -Dbench=false > $L/old-setup.log 2>&1; t0=$(date +%s); ninja -C /tmp/bo -j16 libflashattn.so > $L/old-build.log 2>&1; echo "old build rc $? $(( $(date +%s) - t0 )) s" )
wait
export LD_LIBRARY_PATH=/tmp/b:$R/.deps/cm/usr/lib/x86_64-linux-gnu:$R/.deps/ocl/usr/lib/x86_64-linux-gnu
/tmp/b/tests/cuda/cuda_score_mod_accuracy > $L/accuracy.log 2>&1; echo "accuracy rc $?" >> $L/accuracy.log
cuobjdump -sass /tmp/b/tests/cuda/cuda_score_mod_accuracy | grep -E "^\s+/\*[0-9a-f]+\*/" | grep -c MUFU > $L/accuracy-mufu-count.txt
for rep in 1 2; do
  for lib in old new; do
    so=/tmp/b/libflashattn.so; [ $lib = old ] && so=/tmp/bo/libflashattn.so
    timeout 120 python3 bench/gpu_bench.py --lib $so --modifiers --seqlens 4096,16384 --dims 128 > $L/modifiers-$lib-$rep.md 2>&1; echo "modifiers $lib $rep rc $?" >> $L/summary.txt
  done
done
grep -E "spill" $L/ptxas-sm90-new.log | sort | uniq -c > $L/ptxas-summary.txt
cat $L/summary.txt $L/accuracy.log $L/accuracy-mufu-count.txt; cat $L/ptxas-summary.txt
for f in $L/modifiers-*.md; do echo "== $f"; grep -v "^#" $f | head -30; done
tar cJf $OUT/logs6.tar.xz -C /tmp logs6
