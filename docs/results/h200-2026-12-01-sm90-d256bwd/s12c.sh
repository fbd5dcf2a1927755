#!/bin/bash
# H200: the sm90 d 256 backward (column split, dQ transposed): conformance (full grid, default chooser),
# sanitizers on its cases, SASS of its instances, gpu_bench d 256 with the sm80 path, FA2, cuDNN
B=/tmp/b; mkdir -p $B; xz -dc .deps/pk/bins.tar.xz | tar xf - -C $B
export LD_LIBRARY_PATH=$B/lib
mkdir -p $OUT/r
date -u
timeout 200 $B/conformance --backend cuda --grid full > $OUT/r/conformance-full.log 2>&1; echo "conformance rc $?"; tail -2 $OUT/r/conformance-full.log; grep -B3 "FAILED \]" $OUT/r/conformance-full.log | head -30
FLASHATTN_CUDA_KERNELS=sm90 timeout 100 $B/conformance --backend cuda --grid full --filter 256 > $OUT/r/conformance-sm90-256.log 2>&1; echo "sm90 256 rc $?"; tail -1 $OUT/r/conformance-sm90-256.log
date -u
for tool in memcheck racecheck synccheck; do
  for f in hdim256-bf16 hdim256-f16 bwd-d256-varlen-window-bf16 longbwd-d256-causal; do
    timeout 100 compute-sanitizer --tool $tool $B/conformance --backend cuda --grid full --filter $f > $OUT/r/$tool-$f.log 2>&1
    echo "$tool $f rc $? $(grep -h 'ERROR SUMMARY\|RACECHECK SUMMARY' $OUT/r/$tool-$f.log | head -1) $(grep -h 'PASSED\|FAILED' $OUT/r/$tool-$f.log | head -1)"
  done
done
date -u
cuobjdump --dump-sass $B/conformance > /tmp/sass.txt 2>/dev/null
python3 - <<'PY' > $OUT/r/sass-sm90-bwd.txt
import re
cur=None; stats={}
for line in open('/tmp/sass.txt'):
    m=re.search(r'Function : (\S+)', line)
    if m: cur=m.group(1); stats.setdefault(cur,[0,0,0]); continue
    if cur is None: continue
    if 'HGMMA' in line: stats[cur][0]+=1
    if re.search(r'\bSTL\b', line): stats[cur][1]+=1
    if re.search(r'\bLDL\b', line): stats[cur][2]+=1
print("function HGMMA STL LDL (sm90 backward kernels)")
for f,(h,s,l) in sorted(stats.items()):
    if 'ws_backward' in f: print(f, h, s, l)
PY
c++filt < $OUT/r/sass-sm90-bwd.txt | cut -c1-200
grep -A200 'ws_backward_kernelI13__nv_bfloat16Li256' /tmp/sass.txt | grep -m6 HGMMA > $OUT/r/sass-hgmma-d256-sample.txt
timeout 200 python3 bench/gpu_bench.py --lib $B/lib/libflashattn.so.0 --seqlens 1024,4096,16384 --dims 256 --dtype bf16 --causal both --no-math --sm80 2>&1 | tee $OUT/r/bench-d256.md | tail -9
date -u
cd $OUT && tar czf r.tgz r && rm -rf r
