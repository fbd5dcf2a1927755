# run 9 (issue 23 branch w23-tma at d275b25): the sm90 conformance cases run 8's limit cut (d256),
# and ncu of the plain and softcap d128 forward (issue 22's profile; this tree's kernels).
set -u
export PATH=/opt/torch/.venv/bin:/usr/local/cuda/bin:$PATH
export FLASHATTN_BENCH_COMMIT=${1:-unknown}
R=$PWD; L=$OUT/logs9; mkdir -p $L
bash .deps/scripts/dev_build.sh > $L/build.log 2>&1 || { cat $L/build.log; exit 1; }
export LD_LIBRARY_PATH=/tmp/b:$R/.deps/cm/usr/lib/x86_64-linux-gnu:$R/.deps/ocl/usr/lib/x86_64-linux-gnu
( FLASHATTN_CUDA_KERNELS=sm90 timeout 140 /tmp/b/tests/conformance/conformance --backend cuda --grid full --filter d256 > $L/conf-sm90-d256.log 2>&1; echo "conformance sm90 d256 rc $?" >> $L/summary.txt ) &
( for m in 1 0; do
  timeout 50 ncu --clock-control none --kernel-name-base mangled -k regex:ws_forward_kernelI13__nv_bfloat16Li128ELb${m}ELb1 --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section InstructionStats --section WarpStateStats --section SchedulerStats \
    python3 bench/gpu_bench.py --lib /tmp/b/libflashattn.so.0.1.0 --modifiers --seqlens 4096 --dims 128 --causal no > $L/ncu-fwd-mod$m.txt 2>&1; echo "ncu mod$m rc $?" >> $L/summary.txt
  done ) &
wait
cat $L/summary.txt; tail -2 $L/conf-sm90-d256.log
