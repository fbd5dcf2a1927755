#!/bin/bash
# H200 x2: fp32-output identity on the GPU, the ring tests over NCCL (processes, threads),
# compute-sanitizer on 2 ranks, the conformance grid, ring_bench
R=$PWD; B=/tmp/b; mkdir -p $B; xz -dc .deps/pk/bins.tar.xz | tar xf - -C $B
export LD_LIBRARY_PATH=$B/lib NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ND=$(python3 -c "import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],'lib'))" 2>/dev/null)
for d in $ND /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do [ -e $d/libnccl.so.2 ] && { export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d; echo "nccl from $d"; break; }; done
nvidia-smi --query-gpu=name,driver_version --format=csv; nvidia-smi topo -m
date -u
timeout 120 $B/test_api_f32_output 2>&1 | tee $OUT/f32.log | tail -40
timeout 300 $B/test_ring 2>&1 | tee $OUT/ring.log | grep -v "^    d\|^  cpu" | tail -60
date -u
RING_TEST_FILTER="*threads" timeout 300 compute-sanitizer --tool memcheck --target-processes all $B/test_ring > $OUT/memcheck.log 2>&1; echo "memcheck rc $?"; grep -E "ERROR SUMMARY|PASSED|FAILED|SKIPPED" $OUT/memcheck.log | tail -5
date -u
# the conformance grid on GPU 0 (the out_f32 branches in the kernels' epilogues touched every instance)
timeout 240 $B/conformance --backend cuda --grid full > $OUT/conformance.log 2>&1; echo "conformance rc $?"; tail -3 $OUT/conformance.log
date -u
