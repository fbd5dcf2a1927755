# run 8 (issue 23, the w23-tma tree in the working tree; issue 22's profile): build the branch into
# /tmp/b and copy it to /tmp/bt for the tests; then rebuild /tmp/b with the base's sm90 sources
# (.deps/base-overlay, REMOVE) for the A/B (only the sm90 TU changes). Tests on the branch: full
# grid sm90 forced, masked_rows sm90, memcheck/racecheck/synccheck on d128 short cases, SASS
# counts. Then: A/B base vs branch, the branch beside FA2/cuDNN, ncu of the base's plain and
# softcap d128 forward (issue 22's profile).
set -u
C8=${1:-unknown}
export FLASHATTN_BENCH_COMMIT=$C8
export PATH=/opt/torch/.venv/bin:/usr/local/cuda/bin:$PATH
L=/tmp/logs8; rm -rf $L; mkdir -p $L
R=$PWD
bash .deps/scripts/dev_build.sh > $L/build.log 2>&1 || { cat $L/build.log; exit 1; }
cat $L/build.log
rm -rf /tmp/bt && cp -a /tmp/b /tmp/bt
export LD_LIBRARY_PATH=/tmp/bt:$R/.deps/cm/usr/lib/x86_64-linux-gnu:$R/.deps/ocl/usr/lib/x86_64-linux-gnu
C=/tmp/bt/tests/conformance/conformance
for fam in sm90; do
  ( [ $fam = default ] || export FLASHATTN_CUDA_KERNELS=$fam
    t0=$(date +%s); timeout 230 $C --backend cuda --grid full > $L/conf-$fam.log 2>&1; echo "conformance $fam rc $? in $(( $(date +%s) - t0 )) s" >> $L/summary.txt ) &
done
( FLASHATTN_CUDA_KERNELS=sm90 timeout 120 /tmp/bt/tests/conformance/masked_rows --backend cuda > $L/masked-sm90.log 2>&1; echo "masked_rows sm90 rc $?" >> $L/summary.txt ) &
for tool in memcheck racecheck synccheck; do
  ( FLASHATTN_CUDA_KERNELS=sm90 timeout 220 compute-sanitizer --tool $tool --error-exitcode 9 $C --backend cuda --grid short --filter d128 > $L/$tool.log 2>&1; echo "$tool rc $?" >> $L/summary.txt ) &
done
# the base: the same build with the base's sm90 sources
( cp -r .deps/base-overlay/backends . && xargs rm -f < .deps/base-overlay/REMOVE && t0=$(date +%s) &&
  ninja -C /tmp/b -j6 libflashattn.so.0.1.0 > $L/base-build.log 2>&1; echo "base build rc $? in $(( $(date +%s) - t0 )) s" >> $L/summary.txt ) &
wait
cuobjdump -sass /tmp/bt/libflashattn.so.0.1.0 2>/dev/null > /tmp/sass-branch.txt; cuobjdump -sass /tmp/b/libflashattn.so.0.1.0 2>/dev/null > /tmp/sass-base.txt
for w in UTMALDG LDGSTS HGMMA; do echo "$w branch $(grep -c $w /tmp/sass-branch.txt) base $(grep -c $w /tmp/sass-base.txt)"; done > $L/sass-counts.txt
timeout 120 python3 bench/gpu_ab.py --lib /tmp/b/libflashattn.so.0.1.0 --lib /tmp/bt/libflashattn.so.0.1.0 --names base-90ead5c,$C8 --repeats 3 --dims 64,128,256 > $L/ab.md 2>&1; echo "ab rc $?" >> $L/summary.txt
timeout 120 python3 bench/gpu_bench.py --lib /tmp/bt/libflashattn.so.0.1.0 --no-math --dims 64,128,256 --seqlens 4096,16384 > $L/vs-cudnn.md 2>&1; echo "vs-cudnn rc $?" >> $L/summary.txt
for m in 0 1; do
  timeout 60 ncu --clock-control none --kernel-name-base mangled -k regex:ws_forward_kernelI13__nv_bfloat16Li128ELb${m} --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section InstructionStats --section WarpStateStats --section SchedulerStats \
    python3 bench/gpu_bench.py --lib /tmp/b/libflashattn.so.0.1.0 --modifiers --seqlens 4096 --dims 128 --causal no > $L/ncu-fwd-mod$m.txt 2>&1; echo "ncu mod$m rc $?" >> $L/summary.txt
done
cat $L/summary.txt $L/sass-counts.txt; grep -h "PASSED\|FAILED" $L/conf-*.log; grep -h "ERROR SUMMARY" $L/*check.log; cat $L/ab.md $L/vs-cudnn.md
grep -h "Issue Slots Busy\|Executed Ipc A\|SM Busy\|Compute (SM) Throughput\|Duration\|No Eligible\|Issued Warp" $L/ncu-fwd-mod*.txt
tar cJf $OUT/logs8.tar.xz -C /tmp logs8
