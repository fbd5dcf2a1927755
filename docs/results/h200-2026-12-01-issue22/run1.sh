# run 1: build on the device, smoke run with the modifiers
set -u
export FLASHATTN_BENCH_COMMIT=$1
bash .deps/scripts/dev_build.sh 2>&1 | tee $OUT/build.txt || exit 1
export LD_LIBRARY_PATH=/tmp/b:$PWD/.deps/cm/usr/lib/x86_64-linux-gnu:$PWD/.deps/ocl/usr/lib/x86_64-linux-gnu
/tmp/b/tools/flashattn run --backend cuda --seqlen-q 300 --seqlen-k 500 --heads 4 --dim 128 --dtype bf16 --causal --softcap 30 --alibi --backward --check 2>&1 | tee -a $OUT/build.txt
/tmp/b/tools/flashattn run --backend cuda --seqlen-q 300 --seqlen-k 500 --heads 4 --dim 64 --dtype fp16 --softcap 2 --backward --check 2>&1 | tee -a $OUT/build.txt
mkdir -p /tmp/icd && echo libnvidia-opencl.so.1 > /tmp/icd/nvidia.icd
OCL_ICD_VENDORS=/tmp/icd /tmp/b/tools/flashattn info 2>&1 | head -30 | tee -a $OUT/build.txt
