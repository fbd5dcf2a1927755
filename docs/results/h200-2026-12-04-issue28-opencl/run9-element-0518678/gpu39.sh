#!/usr/bin/env bash
# issue 28, session 31: the backward's element step as one function (fa_bwd_element): the same speed and
# results? OpenCL-only build; matrix and portable backward at the shape, a conformance subset on each path.
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
export LIBRARY_PATH=$LD_LIBRARY_PATH
[ -e /etc/OpenCL/vendors/nvidia.icd ] || { mkdir -p /tmp/icd && echo libnvidia-opencl.so.1 > /tmp/icd/nvidia.icd && export OCL_ICD_VENDORS=/tmp/icd; }
T0=$(date +%s); log=$OUT/log.txt; N=/tmp/n1
echo "commit $(cat .deps/scripts/commit)" | tee -a $log
meson setup $N -Dcuda=disabled -Dhip=disabled -Dopencl=enabled -Dbench=true -Dwerror=true > $OUT/build.txt 2>&1 && ninja -C $N -j16 tests/conformance/conformance bench/opencl_bench tools/flashattn >> $OUT/build.txt 2>&1 || { tail -20 $OUT/build.txt; exit 1; }
echo "build $(( $(date +%s) - T0 )) s" | tee -a $log
for P in 0 1 2; do
  if FLASHATTN_OPENCL_PLATFORM=$P $N/tools/flashattn info 2>&1 | grep -A3 "^backend opencl" | grep -q "NVIDIA\|H200"; then export FLASHATTN_OPENCL_PLATFORM=$P; break; fi
done
export FLASHATTN_BENCH_COMMIT=$(cat .deps/scripts/commit)
bench() { local name=$1; shift; local t=$(date +%s)
  timeout 40 $N/bench/opencl_bench --backend opencl --dtype fp16 --batch 4 --no-cpu --no-standard --repeat 5 "$@" > /tmp/b.md 2>&1
  echo "$name: rc $? $(( $(date +%s) - t )) s" | tee -a $log; (echo "## $name"; cat /tmp/b.md) >> $OUT/bench.md; grep -E "^\|" /tmp/b.md | tail -n +3 | tee -a $log; }
for d in 64 128; do h=$(( 2048 / d ))
  bench matrix-d$d --heads $h --dims $d --seqlens 4096 --backward
  FLASHATTN_OPENCL_MATRIX=0 bench portable-d$d --heads $h --dims $d --seqlens 4096 --backward
done
F='hdim64-f16,hdim128-bf16,softcap-alibi-dropout,softcap-alibi-varlen,blocksparse-random50-48x80-causal,window32_8-causal,dropout-bf16,fullymasked,gqa8,-twin'
t=$(date +%s)
FLASHATTN_OPENCL_MATRIX=require FA_CONFORMANCE_VARIANT=mma timeout 60 $N/tests/conformance/conformance --backend opencl --grid short --filter $F > $OUT/conf-matrix.txt 2>&1
echo "conformance subset, matrix required: rc $? $(( $(date +%s) - t )) s; $(grep -E 'PASSED|FAILED' $OUT/conf-matrix.txt | head -4 | tr '\n' ' ')" | tee -a $log
t=$(date +%s)
FLASHATTN_OPENCL_MATRIX=0 timeout 60 $N/tests/conformance/conformance --backend opencl --grid short --filter $F > $OUT/conf-portable.txt 2>&1
echo "conformance subset, matrix off: rc $? $(( $(date +%s) - t )) s; $(grep -E 'PASSED|FAILED' $OUT/conf-portable.txt | head -4 | tr '\n' ' ')" | tee -a $log
echo "total $(( $(date +%s) - T0 )) s" | tee -a $log
