#!/bin/bash
# H200 x2: ring_bench (2 GPUs, NCCL, one thread a GPU), then memcheck of the 2-rank ring tests
# reporting memory errors only (NCCL's own API probes, peer access already enabled and kernel-image
# queries, are left out with --report-api-errors no)
R=$PWD; B=/tmp/b; mkdir -p $B; xz -dc .deps/pk/bins.tar.xz | tar xf - -C $B
export LD_LIBRARY_PATH=$B/lib NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ND=$(python3 -c "import nvidia.nccl,os;print(os.path.join(list(nvidia.nccl.__path__)[0],'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$ND
date -u
timeout 200 $B/ring_bench --seqlens 131072,262144,524288 --csv $OUT/ring_full.csv 2>&1 | tee $OUT/bench_full.txt
date -u
timeout 260 $B/ring_bench --causal --seqlens 131072,262144,524288,1048576 --csv $OUT/ring_causal.csv 2>&1 | tee $OUT/bench_causal.txt
date -u
RING_TEST_FILTER="*threads" timeout 120 compute-sanitizer --tool memcheck --report-api-errors no $B/test_ring > $OUT/memcheck2.log 2>&1; echo "memcheck rc $?"; grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/memcheck2.log | tail -3
date -u
