#!/usr/bin/env bash
# issue 28, third run: the matrix-path forward with ldmatrix (A/B -DFA_NV_LDMATRIX=0), register caps, PyTorch SDPA for context;
# second run: the matrix-path forward (forward_mma.cl, mma.sync through inline PTX) on the
# H200 through NVIDIA's OpenCL: its register count, the conformance short grid with the path required,
# then opencl_bench forward (+ backward) with the path on and off (FLASHATTN_OPENCL_MATRIX=0).
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
T0=$(date +%s)
log=$OUT/log.txt
N=/tmp/n
opts="-Dcuda=disabled -Dhip=disabled -Dopencl=enabled -Dnccl=disabled -Dbench=true"
[ -e $N/build.ninja ] || meson setup $N $opts -Dwerror=true > $OUT/build-n.txt 2>&1 || { tail -30 $OUT/build-n.txt; exit 1; }
ninja -C $N -j16 >> $OUT/build-n.txt 2>&1 || { grep -A5 error $OUT/build-n.txt | head -30; exit 1; }
echo "build $(( $(date +%s) - T0 )) s; warnings $(grep -c warning $OUT/build-n.txt)" | tee -a $log
for P in 0 1 2; do
  if FLASHATTN_OPENCL_PLATFORM=$P $N/tools/flashattn info 2>&1 | grep -A3 "^backend opencl" | grep -q "NVIDIA\|H200"; then export FLASHATTN_OPENCL_PLATFORM=$P; break; fi
done
export FLASHATTN_OPENCL_CACHE=/tmp/oclcache
# registers and a first forward: the variant name says which kernel ran
for d in 64 128; do
  FLASHATTN_OPENCL_LOG=1 FLASHATTN_OPENCL_OPTIONS=-cl-nv-verbose timeout 60 $N/tools/flashattn run --backend opencl --dtype fp16 --batch 1 --heads 2 --seqlen-q 1000 --seqlen-k 1000 --dim $d --check --causal > $OUT/run-d$d.txt 2>&1
  echo "run d$d rc $?" | tee -a $log; grep -iE "registers|kernel:|error|check|used" $OUT/run-d$d.txt | head -12 | tee -a $log
done
t=$(date +%s)
FLASHATTN_OPENCL_MATRIX=require timeout 240 $N/tests/conformance/conformance --backend opencl --grid short > $OUT/conf-matrix.txt 2>&1
echo "conformance short, matrix required: rc $? $(( $(date +%s) - t )) s; $(grep -E 'PASSED|FAILED|ERROR' $OUT/conf-matrix.txt | head -12 | tr '\n' ' ' | cut -c1-900)" | tee -a $log
bench() { local name=$1 e=$2; shift 2; local t=$(date +%s)
  env "$e" timeout 120 $N/bench/opencl_bench --backend opencl --dtype fp16 --batch 4 --no-cpu --no-standard --repeat 5 "$@" > /tmp/b.md 2>&1
  echo "$name ($e): rc $? $(( $(date +%s) - t )) s" | tee -a $log; (echo "## $name ($e)"; cat /tmp/b.md) >> $OUT/bench.md; grep -E "^\|" /tmp/b.md | tail -n +3 | tee -a $log; }
for d in 64 128; do h=$(( 2048 / d ))
  bench mma-d$d X=1 --heads $h --dims $d --seqlens 4096,16384
  bench lds-d$d "FLASHATTN_OPENCL_OPTIONS=-DFA_NV_LDMATRIX=0" --heads $h --dims $d --seqlens 4096
  for r in 128 168 200; do bench mma-r$r-d$d "FLASHATTN_OPENCL_OPTIONS=-cl-nv-maxrregcount=$r" --heads $h --dims $d --seqlens 4096; done
  bench mma-causal-d$d X=1 --heads $h --dims $d --seqlens 4096 --causal
  bench bwd-d$d X=1 --heads $h --dims $d --seqlens 4096 --backward
done
timeout 120 python .deps/scripts/sdpa_ref.py $(cat .deps/scripts/commit) > $OUT/sdpa.md 2>&1; echo "sdpa rc $?" | tee -a $log; cat $OUT/sdpa.md | tee -a $log
echo "total $(( $(date +%s) - T0 )) s" | tee -a $log
