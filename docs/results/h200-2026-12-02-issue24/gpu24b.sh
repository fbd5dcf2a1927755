#!/usr/bin/env bash
# issue 24 on the H200, second script: build, decode grid (both check_on_device passes) on cuda
# (tensor-core kernel chosen; SIMT with both copy modes; portable env) and NVIDIA OpenCL,
# sanitizers, the Python CUDA tests of the decode path, benches (check_on_device; CUDA graphs),
# a mutation the new grid case must catch, the sm90 full grid (issue 23).
# usage: bash .deps/scripts/gpu24b.sh STAGES   (STAGES: any of build,grid,san,py,bench,prefill,tune,ncu,mut,g23)
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
export FLASHATTN_BENCH_COMMIT=${FLASHATTN_BENCH_COMMIT:-unknown}
has() { [[ ",$STAGES," == *",$1,"* ]]; }
T0=$(date +%s)
left() { echo $(( ${BUDGET:-570} - ($(date +%s) - T0) )); }
log=$OUT/log.txt
echo "== $(date -u) tree $FLASHATTN_BENCH_COMMIT; stages $STAGES" | tee -a $log
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee -a $log
B=build-gpu
if has build; then
  meson setup $B -Dcuda-archs=90 -Dhip=disabled -Dbuildtype=release -Dwerror=true -Dc_args=-I$R/.deps/ocl/include -Dc_link_args=-L$R/.deps/ocl/lib > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
  ninja -C $B >> $OUT/build.txt 2>&1 || { grep -B5 -A20 "error" $OUT/build.txt | head -80; exit 1; }
  echo "build $(( $(date +%s) - T0 )) s" | tee -a $log
fi
if has grid; then
  echo "== decode grid cuda (default: tensor-core kernel)" | tee -a $log
  timeout 200 $B/tests/conformance/decode --backend cuda > $OUT/grid.txt 2>&1; echo "rc $?" | tee -a $log
  grep -E "check_on_device|FAILED|case\(s\)|checked on the device\)" $OUT/grid.txt | cut -c1-200 | tee -a $log
  for env in "FLASHATTN_KV_KERNEL=simt" "FLASHATTN_KV_KERNEL=simt FLASHATTN_KV_COPY=registers" "FLASHATTN_CUDA_KERNELS=portable"; do
    echo "== decode grid cuda, $env" | tee -a $log
    env $env timeout 120 $B/tests/conformance/decode --backend cuda 2>&1 | grep -E "FAILED|case\(s\)" | tee -a $log
  done
  echo "== decode grid opencl" | tee -a $log
  timeout 200 $B/tests/conformance/decode --backend opencl 2>&1 | grep -E "FAILED|case\(s\)" | tee -a $log
fi
if has san && [ $(left) -gt 200 ]; then
  for tool in memcheck racecheck synccheck; do
    echo "== compute-sanitizer $tool decode grid (both passes)" | tee -a $log
    timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 $B/tests/conformance/decode --backend cuda > $OUT/san-$tool.txt 2>&1
    echo "rc $?" | tee -a $log; grep -E "case\(s\)|SUMMARY" $OUT/san-$tool.txt | tee -a $log
  done
fi
export FLASHATTN_LIBRARY=$B/libflashattn.so
if has py && [ $(left) -gt 150 ]; then
  echo "== python CUDA tests (kvcache)" | tee -a $log
  PYTHONPATH=python:python/tests timeout 150 python -m pytest -q python/tests/test_kvcache.py python/tests/test_torch.py -k "kvcache" 2>&1 | tail -5 | tee -a $log
fi
if has bench && [ $(left) -gt 100 ]; then
  echo "== decode bench" | tee -a $log
  timeout 150 python bench/decode_bench.py --graph 2>&1 | tee -a $OUT/bench.txt | tee -a $log
  timeout 120 python bench/decode_bench.py --check-on-device 2>&1 | tee -a $OUT/bench.txt | tee -a $log
  timeout 100 python bench/decode_bench.py --graph --page 64 --shapes 8x32768,64x32768,1x131072 2>&1 | tee -a $OUT/bench.txt | tee -a $log
  echo "== FLASHATTN_KV_KERNEL=simt" | tee -a $OUT/bench.txt | tee -a $log
  [ $(left) -gt 90 ] && FLASHATTN_KV_KERNEL=simt timeout 100 python bench/decode_bench.py --graph --shapes 1x131072,8x32768,64x32768 2>&1 | tee -a $OUT/bench.txt | tee -a $log
  for sh in "8 32768" "1 4096"; do set -- $sh
    ./$B/tools/flashattn run --decode --backend cuda --batch $1 --kv $2 --dtype bf16 --repeat 20 --check-on-device 2>&1 | grep -E "^decode|fa_forward_kvcache|copy" | tee -a $log
  done
fi
if has prefill && [ $(left) -gt 40 ]; then
  timeout 60 python bench/decode_bench.py --graph --new 512 --shapes 1x8192,4x8192 2>&1 | tee -a $OUT/bench.txt | tee -a $log
fi
if has tune && [ $(left) -gt 120 ]; then
  for pf in 0 128 256; do
    echo "== FLASHATTN_KV_L2_PREFETCH=$pf" | tee -a $OUT/bench.txt | tee -a $log
    FLASHATTN_KV_L2_PREFETCH=$pf timeout 100 python bench/decode_bench.py --graph 2>&1 | tee -a $OUT/bench.txt | tee -a $log
  done
  for pf in 128 256; do
    echo "== decode grid cuda, FLASHATTN_KV_L2_PREFETCH=$pf" | tee -a $log
    FLASHATTN_KV_L2_PREFETCH=$pf timeout 100 $B/tests/conformance/decode --backend cuda 2>&1 | grep -E "FAILED|case\(s\)" | tee -a $log
  done
  for sp in 32 64; do
    echo "== --splits $sp" | tee -a $OUT/bench.txt | tee -a $log
    timeout 60 python bench/decode_bench.py --graph --splits $sp --shapes 1x4096,1x16384 2>&1 | tee -a $OUT/bench.txt | tee -a $log
  done
fi
if has ncu && [ $(left) -gt 60 ]; then
  timeout 60 ncu --clock-control none -k regex:"decode_(mma_)?kernel" -c 1 --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats --metrics regex:"smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" python bench/decode_bench.py --shapes 8x32768 --check-on-device > $OUT/ncu.txt 2>&1
  grep -E "Duration|DRAM Through|L2 Cache Through|Issued Warp|Eligible Warps|stalled" $OUT/ncu.txt | sort -k3 -n -r | head -40 | tee -a $log
fi
if has mut && [ $(left) -gt 60 ]; then
  echo "== mutation: decode_mma.cu without k_begin's alignment to 16 keys (paged16-window-unaligned must fail)" | tee -a $log
  cp backends/cuda/decode_mma.cu /tmp/decode_mma.cu.orig
  sed -i 's/keys.k_begin \& ~(int64_t)(KEYS - 1) : keys.k_begin/keys.k_begin : keys.k_begin/' backends/cuda/decode_mma.cu
  grep -c "keys.k_begin : keys.k_begin" backends/cuda/decode_mma.cu | sed 's/^/mutated lines: /' | tee -a $log
  ninja -C $B > /dev/null 2>&1 && timeout 60 $B/tests/conformance/decode --backend cuda --filter window 2>&1 | grep -E "FAILED|case\(s\)|window" | cut -c1-160 | tee -a $log
  cp /tmp/decode_mma.cu.orig backends/cuda/decode_mma.cu && ninja -C $B > /dev/null 2>&1; echo "restored, rebuilt rc $?" | tee -a $log
fi
if has g23 && [ $(left) -gt 60 ]; then
  lim=$(( $(left) - 20 ))
  echo "== issue 23: conformance full grid, FLASHATTN_CUDA_KERNELS=sm90 (limit $lim s)" | tee -a $log
  FLASHATTN_CUDA_KERNELS=sm90 timeout $lim $B/tests/conformance/conformance --backend cuda --grid full > $OUT/conf23.txt 2>&1
  echo "rc $?" | tee -a $log; tail -3 $OUT/conf23.txt | tee -a $log
fi
echo "== done $(date -u), $(( $(date +%s) - T0 )) s" | tee -a $log
