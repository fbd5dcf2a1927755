/* decode_mma.cuh: the launcher of the tensor-core decode kernel (decode_mma_kernels.cuh describes
 * it) and its occupancy, on decode.cuh's launch sequence. */
#ifndef FA_GPU_DECODE_MMA_CUH
#define FA_GPU_DECODE_MMA_CUH

#include "decode/decode.cuh"
#include "decode/decode_mma_kernels.cuh"

namespace fa_gpu {
namespace decode {

/* The kernel's shared-memory limit on the current device for `warps` warps (set at every launch:
 * it is per device). */
template <class S, int D, int ST> fa_gpu_error prepare_mma(int warps)
{
    return cudaFuncSetAttribute(decode_mma_kernel<S, D, ST>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                FA_KV_MMA_SMEM(D, ST, warps));
}

template <class S, int D, int ST> fa_gpu_error launch_mma(const fa_gpu_kv_params &p, fa_gpu_stream stream)
{
    return launch_call<S>(p, stream, [&](dim3 grid) {
        fa_gpu_error e = prepare_mma<S, D, ST>(p.mma_warps);
        if (e != FA_GPU_SUCCESS)
            return e;
        decode_mma_kernel<S, D, ST><<<grid, 32 * p.mma_warps, FA_KV_MMA_SMEM(D, ST, p.mma_warps), stream>>>(p);
        return fa_gpu_last_error();
    });
}

/* Decode blocks of an instance of `warps` warps resident on one multiprocessor at a time. */
template <class S, int D, int ST> fa_gpu_error blocks_per_processor_mma(int warps, int *n)
{
    fa_gpu_error e = prepare_mma<S, D, ST>(warps);
    if (e == FA_GPU_SUCCESS)
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(n, decode_mma_kernel<S, D, ST>, 32 * warps,
                                                          FA_KV_MMA_SMEM(D, ST, warps));
    return e;
}

} // namespace decode
} // namespace fa_gpu

#endif
