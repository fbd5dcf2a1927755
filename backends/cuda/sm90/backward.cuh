/* backward.cuh: the launcher of the Hopper backward (backward_kernels.cuh describes it at d 64 and
 * 128, backward_cols_kernels.cuh at d 256): D and LSE log2(e) first, the backward kernel (on
 * tensor maps where TMA serves), dQ converted last. */
#ifndef FA_SM90_BACKWARD_CUH
#define FA_SM90_BACKWARD_CUH

#include "sm90/backward_cols_kernels.cuh"
#include "sm90/backward_kernels.cuh"
#include "sm90/kernels.cuh"

namespace fa_gpu::sm90 {

/* D and LSE log2(e) (common's dsum_kernel, which with p.dq_zero_cols clears the fp32 dQ
 * accumulator's rows too; else a memset does), ws_backward_kernel, dQ
 * converted (common's dq_convert_kernel). Needs p.dq_accum ([heads_q][total_q][D] floats) and
 * p.lse2. No dropout (mode 2), and no score modifiers at d 128: at 168 registers per consumer
 * thread ptxas serializes those kernels' wgmma, so they have no instance and the chooser keeps
 * such calls on sm80. d 256 and score modifiers: calls with neither dropout nor a block mask only;
 * d 256 on ws_backward_cols_kernel, over 64-key blocks, its accumulator in tiles
 * (FA_SM90_BW_ACC_ROWS rows a head) read back by dq_convert_cols_kernel. */
template <typename T, int D> cudaError_t launch_backward(const fa_gpu_params &p, cudaStream_t st)
{
    constexpr int SMEM = FA_SM90_BW_SMEM((int)sizeof(T), D);
    static_assert(bw_stages<T, D>() >= 2, "two query-side stages at least");
    static_assert(fa_gpu::THREADS == FA_SM90_DSUM_THREADS, "dsum_kernel's block, as host/rtc_sm90.c launches it");
    if (p.seqlen_q == 0 || p.batch == 0)
        return cudaSuccess;
    if (!p.dq_accum || !p.lse2 || p.heads_kv > 65535 || p.batch > 65535 || fa_gpu::mode_of(p) == 2 ||
        (fa_gpu_has_score_mod(p) && (fa_gpu::mode_of(p) != 0 || D == 128)))
        return cudaErrorInvalidValue;
    /* d 256's tiles hold rows of no sequence too (FA_SM90_BW_ACC_ROWS): never cleared by dsum_kernel */
    if (p.dq_zero_cols != 0 && (D > 128 || p.dq_zero_cols != D))
        return cudaErrorInvalidValue;
    dim3 g0((unsigned)((p.seqlen_q + FA_SM90_DSUM_ROWS - 1) / FA_SM90_DSUM_ROWS), (unsigned)p.heads_q, (unsigned)p.batch);
    fa_gpu::dsum_kernel<T><<<g0, fa_gpu::THREADS, 0, st>>>(p);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess && p.dq_zero_cols == 0)
        e = cudaMemsetAsync(p.dq_accum, 0,
                            sizeof(float) * (size_t)(p.heads_q * FA_SM90_BW_ACC_ROWS(D, p.total_q, p.batch) * D), st);
    if (e == cudaSuccess && p.seqlen_k > 0) {
        const int mode = fa_gpu::mode_of(p);
        /* the plain mode of a dense call loads Q and dO by TMA where the views allow it */
        tile_maps maps;
        memset(&maps, 0, sizeof maps);
        const bool tma = mode == 0 && make_qdo_maps<T>(p, bw_bq<D>(), &maps);
        const bool mod = fa_gpu_has_score_mod(p);
        void (*k)(const fa_gpu_params, const tile_maps);
        if constexpr (D == 256) {
            if (mode != 0)
                return cudaErrorInvalidValue;
            k = tma ? ws_backward_cols_kernel<T, false, true> : ws_backward_cols_kernel<T, false, false>;
            if (mod)
                k = tma ? ws_backward_cols_kernel<T, true, true> : ws_backward_cols_kernel<T, true, false>;
        } else {
            k = tma ? ws_backward_kernel<T, D, 0, false, true> : ws_backward_kernel<T, D, 0>;
            if constexpr (D != 128) /* d 128: no MOD kernel (launch_backward's comment) */
                if (mod)
                    k = tma ? ws_backward_kernel<T, D, 0, true, true> : ws_backward_kernel<T, D, 0, true>;
            k = mode == 1 ? ws_backward_kernel<T, D, 1> : k;
        }
        e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM);
        if (e == cudaSuccess) {
            const dim3 g1((unsigned)((p.seqlen_k + bw_bn<D>() - 1) / bw_bn<D>()), (unsigned)p.heads_kv, (unsigned)p.batch);
            k<<<g1, BW_THREADS, SMEM, st>>>(p, maps);
            e = cudaGetLastError();
        }
    }
    if (e == cudaSuccess) {
        /* dq_convert_kernel: eight channels a thread; dq_convert_cols_kernel: one */
        const int64_t threads = p.seqlen_q * (D == 256 ? D : D / FA_SM90_DQ_CONVERT_CHANNELS);
        const dim3 g2((unsigned)((threads + FA_SM90_DQ_CONVERT_THREADS - 1) / FA_SM90_DQ_CONVERT_THREADS),
                      (unsigned)p.heads_q, (unsigned)p.batch);
        if constexpr (D == 256)
            dq_convert_cols_kernel<T><<<g2, FA_SM90_DQ_CONVERT_THREADS, 0, st>>>(p);
        else
            fa_gpu::dq_convert_kernel<T, D, D, true><<<g2, FA_SM90_DQ_CONVERT_THREADS, 0, st>>>(p);
        e = cudaGetLastError();
    }
    return e;
}

} // namespace fa_gpu::sm90

#endif /* FA_SM90_BACKWARD_CUH */
