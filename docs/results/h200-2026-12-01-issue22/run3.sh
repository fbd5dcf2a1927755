# run 3: A/B (6b238e5 before vs this tree), the modifiers' cost, compute-sanitizer on modifier cases
set -u
export FLASHATTN_BENCH_COMMIT=$1
export PATH=/opt/torch/.venv/bin:$PATH
export LD_LIBRARY_PATH=$PWD/.deps/cm/usr/lib/x86_64-linux-gnu:$PWD/.deps/ocl/usr/lib/x86_64-linux-gnu
mkdir -p /tmp/before /tmp/logs3; L=/tmp/logs3
xz -dc .deps/pk/before.so.xz > /tmp/before/libflashattn.so; chmod +x /tmp/before/libflashattn.so
timeout 330 python3 bench/gpu_ab.py --lib /tmp/before/libflashattn.so --lib /tmp/b/libflashattn.so --names 6b238e5,$1 --repeats 3 > $L/ab.md 2>&1; echo "ab rc $?" >> $L/summary.txt
timeout 120 python3 bench/gpu_bench.py --lib /tmp/b/libflashattn.so --modifiers --seqlens 4096,16384 --dims 128 > $L/modifiers.md 2>&1; echo "modifiers rc $?" >> $L/summary.txt
C=/tmp/b/tests/conformance/conformance
export LD_LIBRARY_PATH=/tmp/b:$LD_LIBRARY_PATH
for fam in NONE; do
  ( [ $fam = default ] || export FLASHATTN_CUDA_KERNELS=$fam
    timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 $C --backend cuda --grid short --filter softcap-alibi > $L/memcheck-$fam.log 2>&1; echo "memcheck $fam rc $?" >> $L/summary.txt ) &
done
wait
cat $L/summary.txt; cat $L/ab.md $L/modifiers.md; tail -n 3 $L/memcheck-*.log
tar cJf $OUT/logs3.tar.xz -C /tmp logs3
