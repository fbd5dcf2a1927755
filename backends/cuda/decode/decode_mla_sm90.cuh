/* decode_mla_sm90.cuh: the launcher of the Hopper MLA decode kernel (decode_mla_sm90_kernels.cuh
 * describes it): the kernel alone, on the grid decode_mma.cuh's launch_mma gives it between the
 * call's check, append and combine kernels (those are compiled once, in the decode library). Built
 * for sm_90a only (the sm90 library's instances/sm90_decode_mla.cu). */
#ifndef FA_GPU_DECODE_MLA_SM90_CUH
#define FA_GPU_DECODE_MLA_SM90_CUH

#include "decode/decode_mla_sm90_kernels.cuh"

namespace fa_gpu {
namespace decode {

/* The instance for the call's score modifiers (MOD: softcap or ALiBi) on `grid`, its shared-memory
 * limit set first (per device). */
template <class S> fa_gpu_error launch_mla_sm90(const fa_gpu_kv_params &p, dim3 grid, fa_gpu_stream stream)
{
    auto launch = [&](auto kernel) {
        fa_gpu_error e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, FA_KV_MLA_SM90_SMEM);
        if (e != FA_GPU_SUCCESS)
            return e;
        kernel<<<grid, FA_KV_MLA_SM90_THREADS, FA_KV_MLA_SM90_SMEM, stream>>>(p);
        return fa_gpu_last_error();
    };
    if (fa_score_mod_factors_active(p.mod))
        return launch(decode_mla_sm90_kernel<S, FA_KV_MLA_D, FA_KV_MLA_DV, true>);
    return launch(decode_mla_sm90_kernel<S, FA_KV_MLA_D, FA_KV_MLA_DV, false>);
}

} // namespace decode
} // namespace fa_gpu

#endif /* FA_GPU_DECODE_MLA_SM90_CUH */
