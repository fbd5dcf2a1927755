#!/bin/bash
# H200 x2: where the ring's forward overhead over compute alone comes from: NCCL's CTA count
R=$PWD; B=/tmp/b; mkdir -p $B; xz -dc .deps/pk/bins.tar.xz | tar xf - -C $B
export LD_LIBRARY_PATH=$B/lib NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ND=$(python3 -c "import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$ND
for cfg in "" "NCCL_MAX_CTAS=1 NCCL_MIN_CTAS=1" "NCCL_MAX_CTAS=4 NCCL_MIN_CTAS=1" "NCCL_P2P_USE_CUDA_MEMCPY=1" "NCCL_PROTO=Simple"; do
  echo "== $cfg"
  env $cfg timeout 100 $B/ring_bench --seqlens 262144 --single-max 0 --iters 2 2>&1 | grep -v "^#"
done
