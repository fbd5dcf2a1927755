/* kernels.cuh: the launchers of the Hopper forwards (forward_kernels.cuh describes the two
 * kernels): the tensor maps encoded where TMA serves (tensor_map.cuh), the kernel instance a call
 * needs chosen by its mode. */
#ifndef FA_SM90_KERNELS_CUH
#define FA_SM90_KERNELS_CUH

#include "common/instance_mode.h"
#include "common/sm90_geometry.h"
#include "common/split_rule.h"
#include "sm90/forward_kernels.cuh"
#include "sm90/tensor_map.cuh"

namespace fa_gpu::sm90 {

template <typename T, int D, bool MOD, bool DROP = false>
inline cudaError_t launch_ws_forward(const fa_gpu_params &p, cudaStream_t stream)
{
    /* Q, the K / V stages, 1 KiB of alignment; and the wide instance's */
    constexpr int SMEM = FA_SM90_WS_SMEM((int)sizeof(T), D);
    constexpr int SMEM_WIDE = FA_SM90_WS_SMEM_N((int)sizeof(T), D, (ws_bn<D, true>()));
    static_assert(ws_stages<T, D>() >= 2 && WS_BR * (D + 8) <= 2 * ws_stages<T, D>() * ws_bn<D>() * D &&
                      ws_stages<T, D, true>() >= 2 && WS_BR * (D + 8) <= 2 * ws_stages<T, D, true>() * ws_bn<D, true>() * D,
                  "two stages at least, and the O stage fits in the K and V buffers");
    /* split keys (p.splits > 1; d <= 128, not with dropout): batch x splits blocks along z, then
     * the merge */
    constexpr bool SPLIT_D = !DROP && D <= 128;
    const bool split = SPLIT_D && p.splits > 1 && !p.sink && p.d_v == p.d;
    const dim3 grid((unsigned)((p.seqlen_q + WS_BR - 1) / WS_BR), (unsigned)p.heads_q,
                    (unsigned)(split ? p.batch * p.splits : p.batch));
    static_assert(D % 64 == 0 && ws_bn<D>() <= 256 && ws_bn<D, true>() <= 256, "TMA boxes: 64 columns, at most 256 rows");
    tile_maps maps;
    memset(&maps, 0, sizeof maps);
    /* the wide instance where it applies (FA_SM90_WS_WIDE): non-causal d 128 calls without score
     * modifiers whose K and V load by TMA */
    constexpr bool WIDE_D = !MOD && !DROP && FA_SM90_WS_WIDE(D);
    const bool wide_asked = WIDE_D && !p.causal && !split;
    const bool tma = make_kv_maps<T>(p, wide_asked ? ws_bn<D, true>() : ws_bn<D>(), &maps);
    const bool wide = wide_asked && tma;
    auto kernel = tma ? ws_forward_kernel<T, D, MOD, true, false, DROP> : ws_forward_kernel<T, D, MOD, false, false, DROP>;
    if constexpr (WIDE_D)
        if (wide)
            kernel = ws_forward_kernel<T, D, false, true, true>;
    if constexpr (SPLIT_D)
        if (split)
            kernel = tma ? ws_forward_kernel<T, D, MOD, true, false, false, true>
                         : ws_forward_kernel<T, D, MOD, false, false, false, true>;
    const int smem = wide ? SMEM_WIDE : SMEM;
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e == cudaSuccess)
        kernel<<<grid, WS_THREADS, smem, stream>>>(p, maps);
    if constexpr (SPLIT_D)
        if (e == cudaSuccess && split) {
            constexpr int ROWS = FA_SPLIT_COMBINE_THREADS / 32; /* (row, head) items per block */
            const int64_t blocks = (p.total_q * p.heads_q + ROWS - 1) / ROWS;
            split_combine_kernel<T, D><<<(unsigned)blocks, FA_SPLIT_COMBINE_THREADS, 0, stream>>>(p);
        }
    return e != cudaSuccess ? e : cudaGetLastError();
}

/* Mode 0 (neither block lists nor dropout) on the warp-specialised kernel, with or without score
 * modifiers, and dropout without block lists there too (no modifiers, d 64 and 128); block lists
 * on the first one (d 64 and 128 only, and no modifiers: the chooser sends d 256 and modifiers
 * only in mode 0). */
template <typename T, int D> cudaError_t launch_forward(const fa_gpu_params &p, cudaStream_t stream)
{
    const int64_t nq = (p.seqlen_q + BR - 1) / BR;
    if (nq == 0 || p.batch == 0)
        return cudaSuccess;
    if (nq > 0x7fffffff || p.heads_q > 65535 || p.batch > 65535)
        return cudaErrorInvalidValue;
    const int mode = fa_gpu::mode_of(p);
    if (mode == 0)
        return fa_gpu_forward_mod(p) ? launch_ws_forward<T, D, true>(p, stream)
                                       : launch_ws_forward<T, D, false>(p, stream);
    if (fa_gpu_forward_mod(p))
        return cudaErrorNotSupported;
    if constexpr (D <= 128)
        if (mode == 2 && !p.bm_bits)
            return launch_ws_forward<T, D, false, true>(p, stream);
    if constexpr (D > 128) {
        return cudaErrorInvalidValue;
    } else {
        constexpr int SMEM = FA_SM90_SMEM((int)sizeof(T), D);
        static_assert(BR * (D + 8) <= 2 * STAGES * BN * D, "the O stage fits in the K and V buffers");
        const dim3 grid((unsigned)nq, (unsigned)p.heads_q, (unsigned)p.batch);
        cudaError_t e = cudaSuccess;
        switch (mode) {
#define FA_SM90_LAUNCH(M)                                                                                           \
    case M:                                                                                                         \
        e = cudaFuncSetAttribute(forward_kernel<T, D, M>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM);      \
        if (e == cudaSuccess)                                                                                       \
            forward_kernel<T, D, M><<<grid, THREADS, SMEM, stream>>>(p);                                            \
        break;
            FA_SM90_LAUNCH(1)
            FA_SM90_LAUNCH(2)
#undef FA_SM90_LAUNCH
        default: return cudaErrorInvalidValue;
        }
        return e != cudaSuccess ? e : cudaGetLastError();
    }
}

} // namespace fa_gpu::sm90

#endif /* FA_SM90_KERNELS_CUH */
