#!/usr/bin/env bash
# issue 26, build time: build A = this tree for cuda-archs 80;90 (what a machine without a GPU
# builds: the sm80 forward family from compute_80 PTX for sm_80 and sm_90, the sm80 backward from
# compute_80 and compute_90, sm90 instances split by direction and dtype); build B = the same with
# the sm80 backward also from compute_80 PTX (no red.global.add.v2.f32 on sm_90). Runtime suite,
# short conformance grids (default chooser, sm80 forced), decode grid on A; sm80-forced A/B timing.
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
A=/tmp/a
[ -e $A/build.ninja ] && [ "${1:-build}" = build ] && SKIP_A=1
STAGE=${1:-build}
if [ $STAGE = build ]; then
[ -n "${SKIP_A:-}" ] || { meson setup $A "-Dcuda-archs=80;90" -Dhip=disabled -Dopencl=enabled -Dnccl=disabled -Dbench=false -Dwerror=true > $OUT/build-a.txt 2>&1 || { tail -30 $OUT/build-a.txt; exit 1; }
grep "flashattn:\|CUDA backend" $OUT/build-a.txt | tee -a $log
ninja -C $A -j16 >> $OUT/build-a.txt 2>&1 || { grep -B5 -A20 "error" $OUT/build-a.txt | head -80; exit 1; }
echo "build A $(( $(date +%s) - T0 )) s" | tee -a $log
cp $A/.ninja_log $OUT/ninja-a.log
}
ninja -C $A -t commands | grep -o "gencode[^ ]*" | sort | uniq -c | tee -a $log
rm -rf /tmp/srcB && mkdir /tmp/srcB && tar -C $R --exclude=./.deps --exclude=./.git -cf - . | tar -C /tmp/srcB -xf -
sed -i 's/cuda_args: kernel_args + gencode_by90,/cuda_args: kernel_args + gencode_by80,/' /tmp/srcB/backends/cuda/meson.build
grep -c "kernel_args + gencode_by80" /tmp/srcB/backends/cuda/meson.build | tee -a $log
t=$(date +%s)
(rm -rf /tmp/bb; cd /tmp/srcB && meson setup /tmp/bb "-Dcuda-archs=80;90" -Dhip=disabled -Dopencl=disabled -Dnccl=disabled -Dbench=false -Dtests=false > $OUT/build-b.txt 2>&1 && ninja -C /tmp/bb -j16 >> $OUT/build-b.txt 2>&1) || { tail -30 $OUT/build-b.txt; }
echo "build B $(( $(date +%s) - t )) s" | tee -a $log
ninja -C /tmp/bb -t commands | grep -o "gencode[^ ]*" | sort | uniq -c | tee -a $log
FLASHATTN_CUDA_KERNELS=sm80 timeout 240 python bench/gpu_ab.py --lib $A/libflashattn.so --lib /tmp/bb/libflashattn.so --names by90,by80 --seqlens 1024,4096 --dims 64,128 --causal both --repeats 3 > $OUT/ab-sm80.txt 2>&1
echo "gpu_ab rc $?" | tee -a $log; cat $OUT/ab-sm80.txt | tee -a $log
fi
if [ $STAGE = test ]; then
$A/tools/flashattn info 2>&1 | head -30 | tee -a $log
export FLASHATTN_LIBRARY=$A/libflashattn.so
meson test -C $A --print-errorlogs --suite runtime 2>&1 | tail -40 | tee -a $log
for k in default sm80; do
  t=$(date +%s)
  if [ $k = default ]; then e=""; else e="FLASHATTN_CUDA_KERNELS=sm80"; fi
  env $e timeout 200 $A/tests/conformance/conformance --backend cuda --grid short > $OUT/conf-$k.txt 2>&1
  echo "conformance short $k: rc $? $(( $(date +%s) - t )) s; $(grep -E 'PASSED|FAILED' $OUT/conf-$k.txt | tr '\n' ' ' | cut -c1-300)" | tee -a $log
done
timeout 120 $A/tests/conformance/decode --backend cuda > $OUT/decode.txt 2>&1; echo "decode grid: rc $?; $(grep -E 'PASSED|FAILED' $OUT/decode.txt | tr '\n' ' ' | cut -c1-200)" | tee -a $log
fi
echo "total $(( $(date +%s) - T0 )) s" | tee -a $log
if [ $STAGE = old ]; then
  # the landed tree before these changes (96f7ddc), same options as B, timed against A
  rm -rf /tmp/srcO /tmp/old && mkdir /tmp/srcO && git archive 96f7ddc | tar -C /tmp/srcO -xf -
  t=$(date +%s)
  (cd /tmp/srcO && meson setup /tmp/old "-Dcuda-archs=80;90" -Dhip=disabled -Dopencl=disabled -Dnccl=disabled -Dbench=false -Dtests=false > $OUT/build-old.txt 2>&1 && ninja -C /tmp/old -j16 >> $OUT/build-old.txt 2>&1) || { tail -30 $OUT/build-old.txt; }
  echo "build old $(( $(date +%s) - t )) s" | tee -a $log
  ninja -C /tmp/old -t commands | grep -o "gencode[^ ]*" | sort | uniq -c | tee -a $log
  timeout 200 python bench/gpu_ab.py --lib /tmp/old/libflashattn.so --lib $A/libflashattn.so --names old,new --seqlens 1024,4096 --dims 64,128,256 --causal both --repeats 3 > $OUT/ab-default.txt 2>&1
  echo "gpu_ab default rc $?" | tee -a $log; cat $OUT/ab-default.txt | tee -a $log
  FLASHATTN_CUDA_KERNELS=sm80 timeout 200 python bench/gpu_ab.py --lib /tmp/old/libflashattn.so --lib $A/libflashattn.so --names old,new --seqlens 1024,4096 --dims 64,128 --causal both --repeats 3 > $OUT/ab-sm80-old.txt 2>&1
  echo "gpu_ab sm80 rc $?" | tee -a $log; cat $OUT/ab-sm80-old.txt | tee -a $log
fi
