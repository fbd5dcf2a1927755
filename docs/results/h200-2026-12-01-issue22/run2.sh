# run 2: the conformance grid (full) on every CUDA kernel family and on NVIDIA's OpenCL, in parallel
set -u
export LD_LIBRARY_PATH=/tmp/b:$PWD/.deps/cm/usr/lib/x86_64-linux-gnu:$PWD/.deps/ocl/usr/lib/x86_64-linux-gnu
mkdir -p /tmp/icd && echo libnvidia-opencl.so.1 > /tmp/icd/nvidia.icd
C=/tmp/b/tests/conformance/conformance
L=/tmp/logs2; mkdir -p $L
for fam in default sm80 sm90 portable mfma-emulated; do
  ( if [ $fam = default ]; then unset FLASHATTN_CUDA_KERNELS; else export FLASHATTN_CUDA_KERNELS=$fam; fi
    t0=$(date +%s); timeout 500 $C --backend cuda --grid full > $L/conf-cuda-$fam.log 2>&1; rc=$?
    echo "conformance cuda $fam: rc $rc in $(( $(date +%s) - t0 )) s" >> $L/summary.txt ) &
done
( t0=$(date +%s); OCL_ICD_VENDORS=/tmp/icd timeout 500 $C --backend opencl --grid full > $L/conf-opencl-nvidia.log 2>&1; rc=$?
  echo "conformance opencl (NVIDIA): rc $rc in $(( $(date +%s) - t0 )) s" >> $L/summary.txt ) &
wait
for fam in default sm80 sm90 portable mfma-emulated; do
  ( [ $fam = default ] || export FLASHATTN_CUDA_KERNELS=$fam; timeout 60 /tmp/b/tests/conformance/masked_rows --backend cuda > $L/masked-$fam.log 2>&1; echo "masked_rows cuda $fam: rc $?" >> $L/summary.txt )
done
cat $L/summary.txt
for f in $L/conf-*.log; do echo "== $f"; grep -E "PASSED|FAILED|SKIPPED|test\(s\) run" $f | tail -4; grep -B1 "^ERROR\|FAILED  \]" $f | head -20; done
tar cJf $OUT/logs2.tar.xz -C /tmp logs2
