#!/usr/bin/env bash
# issue 28, first run: the work-group-tiled OpenCL backward (backward.cl) on the H200 through NVIDIA's
# OpenCL. Build N = this tree, O = HEAD~1 (the row-per-work-item backward), OpenCL only; the
# conformance short grid on NVIDIA's OpenCL with N; opencl_bench forward + backward at the issue's
# shapes (fp16, batch 4, 4096 tokens, hidden 2048) with O and N; N with register caps.
set -u
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
[ -e /etc/OpenCL/vendors/nvidia.icd ] || { mkdir -p /tmp/icd && echo libnvidia-opencl.so.1 > /tmp/icd/nvidia.icd && export OCL_ICD_VENDORS=/tmp/icd; }
export FLASHATTN_BENCH_COMMIT=$(cat .deps/scripts/commit)
T0=$(date +%s)
log=$OUT/log.txt
N=/tmp/n O=/tmp/o
opts="-Dcuda=disabled -Dhip=disabled -Dopencl=enabled -Dnccl=disabled -Dbench=true"
(meson setup $N $opts -Dwerror=true > $OUT/build-n.txt 2>&1 && ninja -C $N -j16 >> $OUT/build-n.txt 2>&1) || { tail -30 $OUT/build-n.txt; exit 1; }
rm -rf /tmp/srcO && mkdir /tmp/srcO && git archive HEAD~1 | tar -C /tmp/srcO -xf -
(cd /tmp/srcO && meson setup $O $opts -Dtests=false > $OUT/build-o.txt 2>&1 && ninja -C $O -j16 >> $OUT/build-o.txt 2>&1) || { tail -30 $OUT/build-o.txt; exit 1; }
echo "builds $(( $(date +%s) - T0 )) s; HEAD $(git rev-parse --short HEAD), old = HEAD~1" | tee -a $log
for P in 0 1 2; do
  if FLASHATTN_OPENCL_PLATFORM=$P $N/tools/flashattn info 2>&1 | grep -A3 "^backend opencl" | grep -q "NVIDIA\|H200"; then export FLASHATTN_OPENCL_PLATFORM=$P; break; fi
done
echo "FLASHATTN_OPENCL_PLATFORM=${FLASHATTN_OPENCL_PLATFORM:-unset}" | tee -a $log
$N/tools/flashattn info 2>&1 | grep -A4 "^backend opencl" | tee -a $log
export FLASHATTN_OPENCL_CACHE=/tmp/oclcache
bench() { # name build extra-env args...
  local name=$1 b=$2 e=$3; shift 3
  local t=$(date +%s)
  env $e timeout 120 $b/bench/opencl_bench --backend opencl --dtype fp16 --batch 4 --no-cpu --no-standard --repeat 5 "$@" > $OUT/$name.md 2>&1
  echo "$name ($e): rc $? $(( $(date +%s) - t )) s" | tee -a $log
  grep -E "^\|" $OUT/$name.md | tee -a $log
}
for d in 64 128; do
  h=$(( 2048 / d ))
  bench old-d$d $O X=1 --heads $h --dims $d --seqlens 4096 --backward
  bench new-d$d $N X=1 --heads $h --dims $d --seqlens 4096 --backward
  bench new-r128-d$d $N FLASHATTN_OPENCL_BWD_TILE=64,64,4,4,16,128,128 --heads $h --dims $d --seqlens 4096 --backward
  bench new-r168-d$d $N FLASHATTN_OPENCL_BWD_TILE=64,64,4,4,16,128,168 --heads $h --dims $d --seqlens 4096 --backward
  bench new-causal-d$d $N X=1 --heads $h --dims $d --seqlens 4096 --backward --causal
done
t=$(date +%s)
timeout 300 $N/tests/conformance/conformance --backend opencl --grid short > $OUT/conf-ocl-nv.txt 2>&1
echo "conformance short (NVIDIA OpenCL): rc $? $(( $(date +%s) - t )) s; $(grep -E 'PASSED|FAILED' $OUT/conf-ocl-nv.txt | tr '\n' ' ' | cut -c1-400)" | tee -a $log
echo "total $(( $(date +%s) - T0 )) s" | tee -a $log
