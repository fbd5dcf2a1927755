# run 13 (issue 23): which step of the backward branch costs time. The sm90 object
# (sm90/instances.cu, the only file the steps change) was compiled here for each step with the
# same meson command (.deps/v/<step>.o: main 179a2ad, bwdtma 8c4d40a, overlap 076149d, writer
# 469e01f); on the device the tree (469e01f) is built once, then each object is swapped into the
# build and the library relinked. A/B per step (same process, interleaved), then ncu of main's
# and the branch's d 128 backward. Logs go to $OUT as they are written (5 files).
set -u
C8=${1:-unknown}
export FLASHATTN_BENCH_COMMIT=$C8
export PATH=/opt/torch/.venv/bin:/usr/local/cuda/bin:$PATH
L=$OUT/logs13; mkdir -p $L
R=$PWD
bash .deps/scripts/dev_build.sh > $L/build.log 2>&1 || { cat $L/build.log; exit 1; }
O=/tmp/b/backends/cuda/libflashattn_cuda_sm90.a.p/sm90_instances.cu.o
echo "device-built object $(md5sum < $O) carried writer $(md5sum < .deps/v/writer.o)" >> $L/summary.txt
for v in main bwdtma overlap writer; do
  cp .deps/v/$v.o $O && touch $O && ninja -C /tmp/b libflashattn.so.0.1.0 > /tmp/relink-$v.log 2>&1; rc=$?
  cp /tmp/b/libflashattn.so.0.1.0 /tmp/lib-$v.so
  echo "$v relink rc $rc, steps: $(grep -c '^\[' /tmp/relink-$v.log), recompiled sm90: $(grep -c 'sm90_instances.cu.o$' /tmp/relink-$v.log), UTMALDG $(cuobjdump -sass /tmp/lib-$v.so 2>/dev/null | grep -c UTMALDG), md5 $(md5sum < /tmp/lib-$v.so)" >> $L/summary.txt
done
export LD_LIBRARY_PATH=$R/.deps/cm/usr/lib/x86_64-linux-gnu:$R/.deps/ocl/usr/lib/x86_64-linux-gnu
prev=main
for v in bwdtma overlap writer; do
  timeout 45 python3 bench/gpu_ab.py --lib /tmp/lib-$prev.so --lib /tmp/lib-$v.so --names $prev,$v --repeats 3 --dims 64,128,256 --seqlens 4096 >> $L/ab.md 2>&1; echo "ab $prev -> $v rc $?" >> $L/summary.txt
  prev=$v
done
for v in main writer; do
  timeout 60 ncu --clock-control none --kernel-name-base mangled -k regex:ws_backward_kernelI13__nv_bfloat16Li128ELi0ELb0E --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section InstructionStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
    python3 bench/gpu_bench.py --lib /tmp/lib-$v.so --no-math --seqlens 4096 --dims 128 --causal no > $L/ncu-bwd-$v.txt 2>&1; echo "ncu $v rc $?" >> $L/summary.txt
done
cat $L/summary.txt $L/ab.md; grep -h "Duration\|Compute (SM) Throughput\|Issue Slots Busy\|Eligible Warps\|Executed Instructions  " $L/ncu-bwd-*.txt
