/* decode_mma.cuh: the launcher of the tensor-core decode kernel (decode_mma_kernels.cuh describes
 * it) and its occupancy, on decode.cuh's launch sequence. */
#ifndef FA_GPU_DECODE_MMA_CUH
#define FA_GPU_DECODE_MMA_CUH

#include "decode/decode.cuh"
#include "decode/decode_mma_kernels.cuh"
#include "decode/decode_mla_kernels.cuh"

/* The Hopper MLA kernel's launch (host/kernels.h declares it too; instances/sm90_decode_mla.cu,
 * which defines it, sees both declarations) */
extern "C" int fa_sm90_kv_mla(const fa_gpu_kv_params *p, int dtype, unsigned blocks, unsigned splits, void *stream);

namespace fa_gpu {
namespace decode {

/* The shared-memory limit of the instance of W warps on the current device (set at every launch:
 * it is per device). */
template <class S, int D, int ST, int W, bool ONE_TOKEN = false> fa_gpu_error prepare_mma()
{
    static_assert(mma_shape<D, ST, W>::SMEM == FA_KV_MMA_SMEM(D, ST, W), "one shared-memory size");
    return cudaFuncSetAttribute(decode_mma_kernel<S, D, ST, W, ONE_TOKEN>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                FA_KV_MMA_SMEM(D, ST, W));
}

/* The instance of W warps, its ONE_TOKEN one where p.one_token. */
template <class S, int D, int ST, int W, bool ONE_TOKEN>
fa_gpu_error launch_mma_instance(const fa_gpu_kv_params &p, dim3 grid, fa_gpu_stream stream)
{
    fa_gpu_error e = prepare_mma<S, D, ST, W, ONE_TOKEN>();
    if (e != FA_GPU_SUCCESS)
        return e;
    decode_mma_kernel<S, D, ST, W, ONE_TOKEN><<<grid, 32 * W, FA_KV_MMA_SMEM(D, ST, W), stream>>>(p);
    return fa_gpu_last_error();
}
template <class S, int D, int ST, int W> fa_gpu_error launch_mma_warps(const fa_gpu_kv_params &p, dim3 grid,
                                                                        fa_gpu_stream stream)
{
    return p.one_token ? launch_mma_instance<S, D, ST, W, true>(p, grid, stream)
                       : launch_mma_instance<S, D, ST, W, false>(p, grid, stream);
}

/* The MLA kernel's instance (bucket FA_KV_MLA_D) and its shared-memory limit. */
template <class S> fa_gpu_error prepare_mla()
{
    return cudaFuncSetAttribute(decode_mla_kernel<S, FA_KV_MLA_D, FA_KV_MLA_DV, FA_KV_MLA_KEYS>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize, FA_KV_MLA_SMEM);
}

/* The call's kernels with the instance of p.mma_warps warps; at bucket FA_KV_MLA_D with the MLA
 * kernel (its FA_KV_MLA_WARPS warps), or where p.mla_sm90 the Hopper one (the sm90 library's). */
template <class S, int D, int ST> fa_gpu_error launch_mma(const fa_gpu_kv_params &p, fa_gpu_stream stream)
{
    if constexpr (D == FA_KV_MLA_D) {
        if (p.mla_sm90)
            return launch_call<S>(p, stream, [&](dim3 grid) {
                return (fa_gpu_error)fa_sm90_kv_mla(&p, S::bf16 ? 2 : 1, grid.x, grid.y, stream);
            });
        return launch_call<S>(p, stream, [&](dim3 grid) {
            fa_gpu_error e = prepare_mla<S>();
            if (e != FA_GPU_SUCCESS)
                return e;
            decode_mla_kernel<S, FA_KV_MLA_D, FA_KV_MLA_DV, FA_KV_MLA_KEYS>
                <<<grid, 32 * FA_KV_MLA_WARPS, FA_KV_MLA_SMEM, stream>>>(p);
            return fa_gpu_last_error();
        });
    } else {
        if (p.mma_warps != FA_KV_MMA_MIN_WARPS && p.mma_warps != FA_KV_MMA_MAX_WARPS)
            return FA_GPU_INVALID_VALUE;
        return launch_call<S>(p, stream, [&](dim3 grid) {
            return p.mma_warps == FA_KV_MMA_MAX_WARPS ? launch_mma_warps<S, D, ST, FA_KV_MMA_MAX_WARPS>(p, grid, stream)
                                                      : launch_mma_warps<S, D, ST, FA_KV_MMA_MIN_WARPS>(p, grid, stream);
        });
    }
}

/* Decode blocks of the instance of `warps` warps (its ONE_TOKEN one where one_token) resident on
 * one multiprocessor at a time. */
template <class S, int D, int ST, int W, bool ONE_TOKEN> fa_gpu_error blocks_per_processor_mma_instance(int *n)
{
    fa_gpu_error e = prepare_mma<S, D, ST, W, ONE_TOKEN>();
    if (e == FA_GPU_SUCCESS)
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(n, decode_mma_kernel<S, D, ST, W, ONE_TOKEN>, 32 * W,
                                                          FA_KV_MMA_SMEM(D, ST, W));
    return e;
}
template <class S, int D, int ST, int W> fa_gpu_error blocks_per_processor_mma_warps(int one_token, int *n)
{
    return one_token ? blocks_per_processor_mma_instance<S, D, ST, W, true>(n)
                     : blocks_per_processor_mma_instance<S, D, ST, W, false>(n);
}

template <class S, int D, int ST> fa_gpu_error blocks_per_processor_mma(int warps, int one_token, int *n)
{
    if constexpr (D == FA_KV_MLA_D) {
        fa_gpu_error e = prepare_mla<S>();
        if (e == FA_GPU_SUCCESS)
            e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                n, decode_mla_kernel<S, FA_KV_MLA_D, FA_KV_MLA_DV, FA_KV_MLA_KEYS>, 32 * FA_KV_MLA_WARPS, FA_KV_MLA_SMEM);
        return e;
    } else {
        if (warps == FA_KV_MMA_MAX_WARPS)
            return blocks_per_processor_mma_warps<S, D, ST, FA_KV_MMA_MAX_WARPS>(one_token, n);
        if (warps == FA_KV_MMA_MIN_WARPS)
            return blocks_per_processor_mma_warps<S, D, ST, FA_KV_MMA_MIN_WARPS>(one_token, n);
        return FA_GPU_INVALID_VALUE;
    }
}

} // namespace decode
} // namespace fa_gpu

#endif
