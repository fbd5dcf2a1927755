#!/usr/bin/env bash
# issue 24 on the H200: build, decode grid (cuda, cuda portable env, OpenCL NVIDIA), sanitizers, benches.
# usage: bash .deps/scripts/gpu24.sh STAGES   (STAGES: any of build,grid,san,bench,py,prefill)
set -u
STAGES=${1:-build,grid,bench}
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
export PATH=/opt/torch/.venv/bin:/usr/local/cuda/bin:$PATH
R=$PWD
CM=$R/.deps/cm/usr
printf "Name: cmocka\nDescription: cmocka\nVersion: 1.1.5\nLibs: -L$CM/lib/x86_64-linux-gnu -lcmocka\nCflags: -I$CM/include\n" > $CM/lib/x86_64-linux-gnu/pkgconfig/cmocka.pc
export PKG_CONFIG_PATH=$CM/lib/x86_64-linux-gnu/pkgconfig
export LD_LIBRARY_PATH=$CM/lib/x86_64-linux-gnu:$R/.deps/ocl/lib:${LD_LIBRARY_PATH:-}
export CPATH=$R/.deps/ocl/include:$CM/include LIBRARY_PATH=$R/.deps/ocl/lib:$CM/lib/x86_64-linux-gnu
mkdir -p /tmp/icd && echo libnvidia-opencl.so.1 > /tmp/icd/nvidia.icd && export OCL_ICD_VENDORS=/tmp/icd
has() { [[ ",$STAGES," == *",$1,"* ]]; }
log=$OUT/log.txt
echo "== $(date -u) $(git rev-parse --short HEAD 2>/dev/null) $(git status --short | wc -l) dirty; stages $STAGES" | tee -a $log
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee -a $log
if has build; then
  t0=$(date +%s)
  meson setup build-gpu -Dcuda-archs=90 -Dhip=disabled -Dbuildtype=release -Dwerror=true -Dc_args=-I$R/.deps/ocl/include -Dc_link_args=-L$R/.deps/ocl/lib > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
  grep -E "OpenCL|CUDA backend" $OUT/build.txt | head -5 | tee -a $log
  ninja -C build-gpu >> $OUT/build.txt 2>&1 || { grep -B5 -A20 "error" $OUT/build.txt | head -80; exit 1; }
  echo "build $(( $(date +%s) - t0 )) s" | tee -a $log
fi
B=build-gpu
if has grid; then
  for be in cuda opencl; do
    echo "== decode grid $be" | tee -a $log
    timeout 300 $B/tests/conformance/decode --backend $be 2>&1 | tail -40 | tee -a $log
  done
  echo "== decode grid cuda, FLASHATTN_KV_KERNEL=simt" | tee -a $log
  FLASHATTN_KV_KERNEL=simt timeout 120 $B/tests/conformance/decode --backend cuda 2>&1 | grep -v "bad arg" | tail -22 | tee -a $log
  echo "== decode grid cuda, FLASHATTN_KV_KERNEL=simt FLASHATTN_KV_COPY=registers" | tee -a $log
  export FLASHATTN_KV_KERNEL=simt
  FLASHATTN_KV_COPY=registers timeout 120 $B/tests/conformance/decode --backend cuda 2>&1 | grep -v "bad arg" | tail -20 | tee -a $log
  unset FLASHATTN_KV_KERNEL
  echo "== decode grid cuda, FLASHATTN_CUDA_KERNELS=portable" | tee -a $log
  FLASHATTN_CUDA_KERNELS=portable timeout 120 $B/tests/conformance/decode --backend cuda 2>&1 | tail -3 | tee -a $log
fi
if has san; then
  for tool in memcheck racecheck synccheck; do
    echo "== compute-sanitizer $tool decode grid" | tee -a $log
    timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 $B/tests/conformance/decode --backend cuda > $OUT/san-$tool.txt 2>&1
    echo "rc $?" | tee -a $log; tail -4 $OUT/san-$tool.txt | tee -a $log
  done
fi
if has py; then
  echo "== python CUDA tests" | tee -a $log
  FLASHATTN_LIBRARY=$B/libflashattn.so PYTHONPATH=python:python/tests timeout 200 python -m pytest -q -x python/tests 2>&1 | tail -8 | tee -a $log
fi
if has bench; then
  echo "== decode bench" | tee -a $log
  export FLASHATTN_LIBRARY=$B/libflashattn.so
  timeout 200 python bench/decode_bench.py ${BENCH_ARGS:-} 2>&1 | tee -a $OUT/bench.txt | tee -a $log
  timeout 150 python bench/decode_bench.py --page 64 --shapes 8x32768,64x32768,1x131072 2>&1 | tee -a $OUT/bench.txt | tee -a $log
  echo "== FLASHATTN_KV_KERNEL=simt" | tee -a $OUT/bench.txt | tee -a $log
  FLASHATTN_KV_KERNEL=simt timeout 150 python bench/decode_bench.py --shapes 1x16384,1x131072,8x32768,64x32768 2>&1 | tee -a $OUT/bench.txt | tee -a $log
  for sh in "8 32768" "64 32768" "1 131072" "1 4096"; do set -- $sh
    ./$B/tools/flashattn run --decode --backend cuda --batch $1 --kv $2 --dtype bf16 --repeat 20 2>&1 | grep -E "fa_forward_kvcache|copy" | tee -a $log
  done
fi
if has ncu; then
  export FLASHATTN_LIBRARY=$B/libflashattn.so
  timeout 150 ncu --clock-control none -k regex:"decode_(mma_)?kernel" -c 1 --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats --section LaunchStats python bench/decode_bench.py --shapes 8x32768 > $OUT/ncu.txt 2>&1
  grep -vE "^\|" $OUT/ncu.txt | tail -90 | tee -a $log
  for be in "--backend cuda"; do
    ./$B/tools/flashattn run --decode $be --batch 8 --kv 32768 --dtype bf16 --repeat 20 2>&1 | tail -4 | tee -a $log
    ./$B/tools/flashattn run --decode $be --batch 1 --kv 4096 --dtype bf16 --repeat 20 2>&1 | tail -4 | tee -a $log
  done
fi
if has g23; then
  echo "== issue 23: conformance full grid, FLASHATTN_CUDA_KERNELS=sm90" | tee -a $log
  FLASHATTN_CUDA_KERNELS=sm90 timeout ${G23_LIMIT:-280} $B/tests/conformance/conformance --backend cuda --grid full > $OUT/conf23.txt 2>&1
  echo "rc $?" | tee -a $log; grep -c "^\[ *OK" $OUT/conf23.txt | sed 's/^/OK lines: /' | tee -a $log; grep -E "FAIL|passed|failed" $OUT/conf23.txt | tail -5 | tee -a $log
fi
if has prefill; then
  export FLASHATTN_LIBRARY=$B/libflashattn.so
  timeout 100 python bench/decode_bench.py --new 512 --shapes 1x8192,4x8192 2>&1 | tee -a $OUT/bench.txt | tee -a $log
fi
echo "== done $(date -u)" | tee -a $log
