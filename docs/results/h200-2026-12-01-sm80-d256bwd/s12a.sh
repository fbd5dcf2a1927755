#!/bin/bash
# H200: the sm80 column-split d 256 backward: full conformance grid (chooser), the d 256 cases under
# FLASHATTN_CUDA_KERNELS=sm80, memcheck / racecheck / synccheck on its instances, SASS local memory
R=$PWD; B=/tmp/b; mkdir -p $B; xz -dc .deps/pk/bins.tar.xz | tar xf - -C $B
export LD_LIBRARY_PATH=$B/lib
mkdir -p $OUT/r
date -u
timeout 200 $B/conformance --backend cuda --grid full > $OUT/r/conformance-full.log 2>&1; echo "conformance rc $?"; tail -2 $OUT/r/conformance-full.log; grep -B2 "FAILED \]\|mismatch\|error" $OUT/r/conformance-full.log | head -20
FLASHATTN_CUDA_KERNELS=sm80 timeout 100 $B/conformance --backend cuda --grid full --filter 25 > $OUT/r/conformance-sm80-d25x.log 2>&1; echo "sm80 d25x rc $?"; tail -1 $OUT/r/conformance-sm80-d25x.log
grep -c OK $OUT/r/conformance-sm80-d25x.log
date -u
for tool in memcheck racecheck synccheck; do
  for f in hdim256-bf16 bwd-d256-dropout-bf16 bwd-d256-blocksparse-f16 bwd-d250-causal-f16; do
    timeout 60 compute-sanitizer --tool $tool $B/conformance --backend cuda --grid full --filter $f > $OUT/r/$tool-$f.log 2>&1
    echo "$tool $f rc $? $(grep -h 'ERROR SUMMARY' $OUT/r/$tool-$f.log | head -1) $(grep -h 'PASSED\|FAILED' $OUT/r/$tool-$f.log | head -1)"
  done
done
date -u
cuobjdump --dump-sass $B/conformance > /tmp/sass.txt 2>/dev/null
python3 - <<'PY' > $OUT/r/sass-sm80-bwd.txt
import re
cur=None; stats={}
for line in open('/tmp/sass.txt'):
    m=re.search(r'Function : (\S+)', line)
    if m: cur=m.group(1); stats.setdefault(cur,[0,0,0]); continue
    if cur is None: continue
    if re.search(r'\bHMMA\b', line): stats[cur][0]+=1
    if re.search(r'\bSTL\b', line): stats[cur][1]+=1
    if re.search(r'\bLDL\b', line): stats[cur][2]+=1
print("function HMMA STL LDL (sm80 fused backward kernels)")
for f,(h,s,l) in sorted(stats.items()):
    if 'bwd_kernel' in f: print(f, h, s, l)
PY
c++filt < $OUT/r/sass-sm80-bwd.txt | cut -c1-200 | grep -i '256\|function'
timeout 150 python3 bench/gpu_bench.py --lib $B/lib/libflashattn.so.0 --seqlens 1024,4096,16384 --dims 256 --dtype bf16 --causal both --no-math 2>&1 | tee $OUT/r/bench-d256.txt | tail -10
date -u
cd $OUT && tar czf r.tgz r && rm -rf r
