#!/bin/bash
# H200: racecheck and synccheck on every Hopper kernel variant (FLASHATTN_CUDA_KERNELS=sm90 so that
# the dropout / block-list instances run too), one conformance filter per variant
R=$PWD; B=/tmp/b; mkdir -p $B; xz -dc .deps/pk/bins.tar.xz | tar xf - -C $B
export LD_LIBRARY_PATH=$B/lib NCCL_NVLS_ENABLE=0
ND=$(python3 -c "import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$ND
mkdir -p $OUT/san
date -u
for tool in racecheck synccheck; do
  for f in hdim64-bf16 hdim64-f16 hdim128-bf16 hdim128-f16 hdim256-bf16-fwd hdim256-f16-fwd dropout-bf16 dropout-f16 blocksparse-random50-perhead blocksparse-random50-48x80-causal varlen1-causal gqa8-causal; do
    FLASHATTN_CUDA_KERNELS=sm90 timeout 20 compute-sanitizer --tool $tool $B/conformance --backend cuda --grid full --filter $f > $OUT/san/$tool-$f.log 2>&1
    echo "$tool $f rc $? $(grep -h 'ERROR SUMMARY' $OUT/san/$tool-$f.log | head -1) $(grep -h 'PASSED\|FAILED' $OUT/san/$tool-$f.log | head -1)"
  done
  date -u
done
cd $OUT && tar czf san.tgz san && rm -rf san
