#!/usr/bin/env bash
# issue 25 on the H200: build (CUDA sm_90), conformance (default chooser; sm80 forced; sm80 with
# FLASHATTN_SM80_BWD variants when the tree has them), decode grid, benches beside FA2 / cuDNN.
# usage: bash .deps/scripts/gpu25.sh STAGES   (any of build,conf,decode,ab,side,drop,drop90,bs,bs80,san,ncu)
set -u
STAGES=${1:-build,conf}
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export PATH=/opt/torch/.venv/bin:/usr/local/cuda/bin:$PATH
R=$PWD
mkdir -p /tmp/pc
for pair in cm:cmocka.pc ocl:OpenCL.pc; do
  d=$R/.deps/${pair%%:*}/usr; pc=$d/lib/x86_64-linux-gnu/pkgconfig/${pair#*:}
  sed -e "s|^prefix=/usr|prefix=$d|; s|-L/usr/lib|-L$d/lib|; s|-I/usr/include|-I$d/include|" $pc > /tmp/pc/${pair#*:}
done
export PKG_CONFIG_PATH=/tmp/pc
export LD_LIBRARY_PATH=$R/.deps/cm/usr/lib/x86_64-linux-gnu:$R/.deps/ocl/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export LIBRARY_PATH=$LD_LIBRARY_PATH PYTHONUNBUFFERED=1
export FLASHATTN_BENCH_COMMIT=${FLASHATTN_BENCH_COMMIT:-unknown}
has() { [[ ",$STAGES," == *",$1,"* ]]; }
T0=$(date +%s)
left() { echo $(( ${BUDGET:-570} - ($(date +%s) - T0) )); }
log=$OUT/log.txt
echo "== $(date -u) tree $FLASHATTN_BENCH_COMMIT; stages $STAGES" | tee -a $log
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee -a $log
B=/tmp/b
if has build; then
  meson setup $B -Dcuda=enabled -Dcuda-archs=90 -Dhip=disabled -Dopencl=disabled -Dnccl=disabled -Dwerror=true > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
  ninja -C $B -j16 >> $OUT/build.txt 2>&1 || { grep -B5 -A20 "error" $OUT/build.txt | head -80; exit 1; }
  echo "build $(( $(date +%s) - T0 )) s" | tee -a $log
fi
LIB=$B/libflashattn.so
conf() { # label, env...
  local label=$1; shift
  local t=$(date +%s)
  env "$@" timeout ${CONF_LIMIT:-150} $B/tests/conformance/conformance --backend cuda --grid full > $OUT/conf-$label.txt 2>&1
  echo "conformance $label ($*): rc $? $(( $(date +%s) - t )) s; $(grep -E 'PASSED|FAILED' $OUT/conf-$label.txt | tr '\n' ' ' | cut -c1-300)" | tee -a $log
}
if has conf; then # the two grids side by side (their float64 references keep the CPU busy)
  conf default & conf sm80 FLASHATTN_CUDA_KERNELS=sm80 & wait
  [ -n "${CONF_ROWS:-}" ] && conf sm80rows FLASHATTN_CUDA_KERNELS=sm80 FLASHATTN_SM80_BWD=rows
fi
if has decode; then
  timeout 120 $B/tests/conformance/decode --backend cuda > $OUT/decode.txt 2>&1; echo "decode grid: rc $?; $(grep -E 'PASSED|FAILED|case\(s\)' $OUT/decode.txt | tr '\n' ' ' | cut -c1-300)" | tee -a $log
fi
gb() { # file, args...
  local f=$1; shift
  [ $(left) -gt 60 ] || { echo "skip $f: $(left) s left" | tee -a $log; return; }
  timeout $(( $(left) - 30 )) python bench/gpu_bench.py --lib $LIB "$@" > $OUT/$f 2>&1; echo "bench $f ($*): rc $?" | tee -a $log
  cat $OUT/$f >> $log
}
has side && gb side.md --sm80 --no-math --dims ${DIMS:-64,128,256} --seqlens ${SEQS:-1024,4096,16384}
if has ab; then
  FLASHATTN_SM80_BWD=rows gb ab-rows.md --sm80 --no-math --dims 64,128 --seqlens 4096,16384 --causal no
fi
has drop && gb drop.md --dropout --sm80 --dims 64,128 --seqlens 1024,4096,16384
has drop90 && gb drop90.md --dropout --dims 64,128 --seqlens 1024,4096,16384
has bs && gb bs.md --blocksparse --seqlens 4096,16384
has bs80 && gb bs80.md --blocksparse --sm80 --seqlens 4096,16384
if has san; then
  for tool in racecheck memcheck synccheck; do
    [ $(left) -gt 40 ] || break
    FLASHATTN_CUDA_KERNELS=sm80 timeout $(( $(left) - 20 )) compute-sanitizer --tool $tool --error-exitcode 9 $B/tests/conformance/conformance --backend cuda --grid full --filter ${SAN_FILTER:-blocksparse} > $OUT/san-$tool.txt 2>&1
    echo "sanitizer $tool sm80 (filter ${SAN_FILTER:-blocksparse}): rc $?; $(grep -E 'SUMMARY|PASSED|FAILED|test\(s\) run' $OUT/san-$tool.txt | tr '\n' ' ' | cut -c1-200)" | tee -a $log
  done
fi
if has ncu && [ $(left) -gt 50 ]; then
  FLASHATTN_CUDA_KERNELS=sm80 timeout $(( $(left) - 10 )) ncu --clock-control none -k regex:bwd_grid_kernel -c 1 --section SpeedOfLight --section Occupancy --section WarpStateStats --section ComputeWorkloadAnalysis --metrics regex:"smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" python bench/gpu_bench.py --lib $LIB --no-math --dims 128 --seqlens 4096 --causal no > $OUT/ncu.txt 2>&1
  echo "ncu: rc $?" | tee -a $log
  grep -E "Duration|Compute \(SM\) Through|Memory Through|Issued Warp|Eligible Warps|Registers|Achieved Occ|stalled|Pipe" $OUT/ncu.txt | sort -k3 -n -r | head -40 | tee -a $log
fi
echo "== done $(date -u), $(( $(date +%s) - T0 )) s" | tee -a $log
