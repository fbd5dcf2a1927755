#!/usr/bin/env bash
# issue 26 on the H200: build with the tests (CUDA sm_90, OpenCL on NVIDIA's ICD), the Python
# suite with torch and CUDA tensors, the cold-start benchmark, the mfma-emulated and example tests.
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
B=/tmp/b
meson setup $B -Dcuda-archs=90 -Dhip=disabled -Dopencl=enabled -Dnccl=disabled -Dbench=false -Dwerror=true > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
grep "flashattn:" $OUT/build.txt | tee -a $log
ninja -C $B -j16 >> $OUT/build.txt 2>&1 || { grep -B5 -A20 "error" $OUT/build.txt | head -80; exit 1; }
echo "build $(( $(date +%s) - T0 )) s" | tee -a $log
$B/tools/flashattn info 2>&1 | tee -a $log
export FLASHATTN_LIBRARY=$B/libflashattn.so
meson test -C $B --print-errorlogs --suite cli 2>&1 | grep -E "^ *[0-9]+/|Ok:|Fail:|Skipped:" | tee -a $log
$B/tools/flashattn info --json > $OUT/info.json; echo "info --json rc $?" | tee -a $log
$B/tools/flashattn run --json --seqlen-q 1024 --seqlen-k 1024 --heads 8 --dim 128 --dtype bf16 --causal --backward --check > $OUT/run.json; echo "run --json rc $?" | tee -a $log; head -c 1500 $OUT/run.json | tee -a $log
(cd /tmp && PYTHONPATH=$R/python:$R/python/tests timeout 300 python -m pytest -q -rs -p no:cacheprovider $R/python/tests > $OUT/pytest.txt 2>&1; echo "pytest rc $?" | tee -a $log); tail -5 $OUT/pytest.txt | tee -a $log
meson test -C $B --print-errorlogs masked-rows-cuda-mfma-emulated masked-rows-cuda example-c example-python python-pytest 2>&1 | grep -E "^ *[0-9]+/|Ok:|Fail:|Skipped:" | tee -a $log
echo "total $(( $(date +%s) - T0 )) s" | tee -a $log
