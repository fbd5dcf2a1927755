# run 7a (issue 22 close-out, part 1): build; device softcap accuracy test and two broken twins
# (must fail); full conformance grid on every CUDA family; NVIDIA OpenCL modifier cases; memcheck
# on the modifier cases (sm80, sm90, portable); pytest of the modifiers.
set -u
C8=${1:-unknown}
export FLASHATTN_BENCH_COMMIT=$C8
export PATH=/opt/torch/.venv/bin:/usr/local/cuda/bin:$PATH
L=/tmp/logs7a; rm -rf $L; mkdir -p $L
R=$PWD
bash .deps/scripts/dev_build.sh > $L/build.log 2>&1 || { cat $L/build.log; exit 1; }
cat $L/build.log
export LD_LIBRARY_PATH=/tmp/b:$R/.deps/cm/usr/lib/x86_64-linux-gnu:$R/.deps/ocl/usr/lib/x86_64-linux-gnu
mkdir -p /tmp/icd && echo libnvidia-opencl.so.1 > /tmp/icd/nvidia.icd
/tmp/b/tests/cuda/cuda_score_mod_accuracy > $L/accuracy.log 2>&1; echo "accuracy rc $?" >> $L/summary.txt
# broken twins: a coefficient off by 1e-6 relative, and the reciprocal's +1 dropped
for b in "s/2.0f \* r);/2.000002f * r);/" "s/(e + 1.0f)/(e)/"; do
  rm -rf /tmp/brk && mkdir -p /tmp/brk && cp core/score_mod.h /tmp/brk/ && sed -i "$b" /tmp/brk/score_mod.h
  diff core/score_mod.h /tmp/brk/score_mod.h >> $L/accuracy-broken.log
  nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I/tmp/brk -Icore -Iinclude tests/cuda/score_mod_accuracy.cu -o /tmp/brk/t >> $L/accuracy-broken.log 2>&1
  /tmp/brk/t >> $L/accuracy-broken.log 2>&1; echo "broken twin '$b' rc $? (must be non-zero)" >> $L/summary.txt
done
C=/tmp/b/tests/conformance/conformance
for fam in default sm80 sm90 portable mfma-emulated; do
  ( [ $fam = default ] || export FLASHATTN_CUDA_KERNELS=$fam
    t0=$(date +%s); timeout 300 $C --backend cuda --grid full > $L/conf-cuda-$fam.log 2>&1
    echo "conformance cuda $fam: rc $? in $(( $(date +%s) - t0 )) s" >> $L/summary.txt ) &
done
( t0=$(date +%s); OCL_ICD_VENDORS=/tmp/icd timeout 300 $C --backend opencl --grid full --filter softcap > $L/conf-opencl-nvidia-softcap.log 2>&1
  echo "conformance opencl nvidia softcap: rc $? in $(( $(date +%s) - t0 )) s" >> $L/summary.txt
  OCL_ICD_VENDORS=/tmp/icd timeout 200 $C --backend opencl --grid full --filter alibi > $L/conf-opencl-nvidia-alibi.log 2>&1
  echo "conformance opencl nvidia alibi: rc $? in $(( $(date +%s) - t0 )) s" >> $L/summary.txt ) &
for fam in sm80 sm90 portable; do
  ( export FLASHATTN_CUDA_KERNELS=$fam
    timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 $C --backend cuda --grid short --filter softcap-alibi > $L/memcheck-$fam.log 2>&1
    echo "memcheck $fam rc $?" >> $L/summary.txt ) &
done
wait
FLASHATTN_LIBRARY=$(ls /tmp/b/libflashattn.so) PYTHONPATH=$R/python:$R/python/tests timeout 100 python3 -m pytest -q -rs -p no:cacheprovider python/tests -k "softcap or alibi" > $L/pytest.log 2>&1; echo "pytest rc $?" >> $L/summary.txt
cat $L/summary.txt $L/accuracy.log; grep -h "PASSED\|FAILED\|passed\|failed" $L/conf-*.log | sort | uniq -c | head -20; grep -h "ERROR SUMMARY" $L/*check*.log | sort | uniq -c; tail -3 $L/pytest.log
tar cJf $OUT/logs7a.tar.xz -C /tmp logs7a
