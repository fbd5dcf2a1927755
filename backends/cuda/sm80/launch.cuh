/* launch.cuh: the sm80 launchers: the forward, the fused backward and the deterministic backward
 * (after dsum_kernel), each choosing the kernel instance a call needs; the fused backward takes
 * bwd_grid_kernel where it serves (grid_backward_fits), else bwd_kernel. */
#ifndef FA_SM80_LAUNCH_CUH
#define FA_SM80_LAUNCH_CUH

#include "common/params.h"
#include "common/sm80_geometry.h"
#include "common/split_rule.h"
#include "kernels_switch.h"
#include "common/tile_geometry.cuh"
#include "common/score_mod.cuh"
#include "common/instance_mode.h"
#include "sm80/forward.cuh"
#include "common/backward_elementwise.cuh"
#include "sm80/backward_deterministic.cuh"
#include "sm80/backward_fused.cuh"
#include "sm80/backward_grid.cuh"

#include <cuda_runtime.h>

#include <stdlib.h>
#include <string.h>

namespace fa_gpu::sm80 {

static_assert(THREADS == FA_SM80_THREADS, "common/sm80_geometry.h's block");

/* The forward with STAGES K / V stages (forward.cuh; 1: aligned rows only, the instance files
 * sm80_fwd_*_stages1.cu of generate_instances.py). */
template <typename T, int D, bool ALIGNED, int STAGES = 2>
cudaError_t launch_forward(const fa_gpu_params &p, cudaStream_t st)
{
    constexpr int BR = fwd_shape<D>::BR;
    const size_t smem = FA_SM80_FWD_SMEM_STAGES(sizeof(T), D, BR, STAGES);
    const int mode = mode_of(p);
    auto kernel = mode == 1 ? forward_kernel<T, D, ALIGNED, 1, false, false, STAGES>
                            : forward_kernel<T, D, ALIGNED, 0, false, false, STAGES>;
    /* one stage: no mode 2 kernels below FA_SM80_ONE_STAGE_MODE2_MIN_D (the chooser keeps two) */
    if constexpr (STAGES == 2 || D >= FA_SM80_ONE_STAGE_MODE2_MIN_D) {
        if (mode == 2)
            kernel = forward_kernel<T, D, ALIGNED, 2, false, false, STAGES>;
        if (fa_gpu_forward_mod(p)) {
            if constexpr (ALIGNED)
                kernel = forward_kernel<T, D, true, 2, true, false, STAGES>;
            else
                return cudaErrorNotSupported;
        }
    } else if (mode == 2 || fa_gpu_forward_mod(p)) {
        return cudaErrorNotSupported;
    }
    /* split keys (p.splits > 1: plain calls, aligned rows, d <= 128): batch x splits blocks along
     * z, then the merge */
    constexpr bool SPLIT_D = ALIGNED && D <= 128;
    const bool split = SPLIT_D && p.splits > 1 && mode == 0 && !fa_gpu_forward_mod(p);
    if constexpr (SPLIT_D)
        if (split)
            kernel = forward_kernel<T, D, true, 0, false, true, STAGES>;
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess)
        return e;
    dim3 grid((unsigned)((p.seqlen_q + BR - 1) / BR), (unsigned)p.heads_q,
              (unsigned)(split ? p.batch * p.splits : p.batch));
    kernel<<<grid, THREADS, smem, st>>>(p);
    if constexpr (SPLIT_D)
        if (split && (e = cudaGetLastError()) == cudaSuccess) {
            constexpr int ROWS = FA_SPLIT_COMBINE_THREADS / 32; /* (row, head) items per block */
            const int64_t blocks = (p.total_q * p.heads_q + ROWS - 1) / ROWS;
            split_combine_kernel<T, D><<<(unsigned)blocks, FA_SPLIT_COMBINE_THREADS, 0, st>>>(p);
        }
    return e != cudaSuccess ? e : cudaGetLastError();
}

/* The fused backward's three launches: dq_accum zeroed (unless dsum_kernel cleared its rows,
 * p.dq_zero_cols), KERNEL over blocks_x key tiles (x kv heads x batch) of THREADS threads with smem
 * bytes of dynamic shared memory, dQ converted. */
template <typename T, int D, int THREADS = 256, typename KERNEL>
cudaError_t launch_fused(KERNEL kernel, size_t smem, int64_t blocks_x, const fa_gpu_params &p, cudaStream_t st)
{
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess)
        return e;
    if (p.dq_accum && p.dq_zero_cols == 0 &&
        (e = cudaMemsetAsync(p.dq_accum, 0, sizeof(float) * (size_t)(p.heads_q * p.total_q * D), st)) != cudaSuccess)
        return e;
    if (p.seqlen_k > 0) {
        dim3 g1((unsigned)blocks_x, (unsigned)p.heads_kv, (unsigned)p.batch);
        kernel<<<g1, THREADS, smem, st>>>(p);
        if ((e = cudaGetLastError()) != cudaSuccess)
            return e;
    }
    if (p.seqlen_q == 0)
        return cudaSuccess;
    constexpr int CT = FA_SM80_CONVERT_THREADS;
    dim3 g2((unsigned)((p.seqlen_q * (D / FA_SM80_CONVERT_CHANNELS) + CT - 1) / CT), (unsigned)p.heads_q,
            (unsigned)p.batch);
    dq_convert_kernel<T, D><<<g2, CT, 0, st>>>(p);
    return cudaGetLastError();
}

template <typename T, int D, bool ALIGNED, int MODE, bool MOD = false, int WARPS = 8>
cudaError_t launch_fused_backward(const fa_gpu_params &p, cudaStream_t st)
{
    using S = bwd_shape<D, WARPS>;
    static_assert(sizeof(T) == 2, "bwd_shape::SMEM counts 16-bit elements");
    return launch_fused<T, D, S::NT>(bwd_kernel<T, D, ALIGNED, MODE, MOD, WARPS>, S::SMEM,
                                     (p.seqlen_k + S::BN - 1) / S::BN * S::PASSES, p, st);
}

/* The fused bwd_kernel at D in MODE (MOD: the score modifiers' instance, mode 2); narrow (d 256
 * only): its 4-warp instance, 64 keys a block (the context's FLASHATTN_KERNELS=sm80-bwd-narrow). */
template <typename T, int D, bool ALIGNED, int MODE, bool MOD = false>
cudaError_t launch_bwd_kernel(const fa_gpu_params &p, cudaStream_t st, bool narrow)
{
    if constexpr (D == 256) {
        if (narrow)
            return launch_fused_backward<T, D, ALIGNED, MODE, MOD, FA_SM80_BWD_NARROW_WARPS>(p, st);
    }
    return launch_fused_backward<T, D, ALIGNED, MODE, MOD>(p, st);
}

template <typename T, int D, int MODE> cudaError_t launch_grid_backward(const fa_gpu_params &p, cudaStream_t st)
{
    using S = bwd_grid_shape<D>;
    static_assert(sizeof(T) == 2 && S::NT == 256, "bwd_grid_shape::SMEM counts 16-bit elements");
    return launch_fused<T, D>(bwd_grid_kernel<T, D, MODE>, S::SMEM, (p.seqlen_k + S::BN - 1) / S::BN, p, st);
}

/* Whether the grid backward (bwd_grid_kernel) serves a fused call at head dim D: d 64 and 128,
 * 16-byte aligned rows, no score modifier, and the device gives a block the kernel's shared memory
 * (171 KB at d 128: Hopper-class devices; an A100's 164 KB takes bwd_kernel).
 * FLASHATTN_KERNELS=sm80-backward=rows selects bwd_kernel everywhere (to test it on such devices). */
__host__ inline bool sm80_backward_rows_forced()
{
    static const bool rows = [] {
        char v[8];
        return fa_kernels_switch("sm80-backward", v, sizeof v) && strcmp(v, "rows") == 0;
    }();
    return rows;
}

template <int D> __host__ bool grid_backward_fits()
{
    if constexpr (D != 64 && D != 128) {
        return false;
    } else {
        int dev = 0, optin = 0;
        if (sm80_backward_rows_forced() || cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
            return false;
        return (size_t)optin >= bwd_grid_shape<D>::SMEM;
    }
}

/* The deterministic two-kernel backward (dK / dV, then dQ), d <= 128; D already computed. */
template <typename T, int D, bool ALIGNED> cudaError_t launch_deterministic_backward(const fa_gpu_params &p, cudaStream_t st)
{
    constexpr int BQ = FA_SM80_DET_ROWS(D);
    const size_t smem1 = FA_SM80_DKDV_SMEM(sizeof(T), D);
    auto k1 = dkdv_kernel<T, D, BQ, ALIGNED>;
    auto k2 = dq_kernel<T, D, ALIGNED>;
    if constexpr (ALIGNED) { /* launch_backward refuses a modifier on unaligned rows */
        if (fa_gpu_has_score_mod(p)) {
            k1 = dkdv_kernel<T, D, BQ, true, true>;
            k2 = dq_kernel<T, D, true, true>;
        }
    }
    cudaError_t e = cudaFuncSetAttribute(k1, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem1);
    if (e != cudaSuccess)
        return e;
    if (p.seqlen_k > 0) {
        dim3 g1((unsigned)((p.seqlen_k + BLOCK - 1) / BLOCK), (unsigned)p.heads_kv, (unsigned)p.batch);
        k1<<<g1, THREADS, smem1, st>>>(p);
        if ((e = cudaGetLastError()) != cudaSuccess)
            return e;
    }
    const size_t smem2 = FA_SM80_DQ_SMEM(sizeof(T), D);
    if ((e = cudaFuncSetAttribute(k2, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem2)) != cudaSuccess)
        return e;
    if (p.seqlen_q > 0) {
        dim3 g2((unsigned)((p.seqlen_q + BLOCK - 1) / BLOCK), (unsigned)p.heads_q, (unsigned)p.batch);
        k2<<<g2, THREADS, smem2, st>>>(p);
        e = cudaGetLastError();
    }
    return e;
}

template <typename T, int D, bool ALIGNED>
cudaError_t launch_backward(const fa_gpu_params &p, cudaStream_t st, bool narrow)
{
    if (!ALIGNED && fa_gpu_has_score_mod(p)) /* no MOD instance (mode_of) */
        return cudaErrorNotSupported;
    if (p.dq_zero_cols != 0 && p.dq_zero_cols != D) /* dsum_kernel would clear rows of another width */
        return cudaErrorInvalidValue;
    if (p.seqlen_q > 0) {
        dim3 g0((unsigned)((p.seqlen_q + FA_SM80_DSUM_ROWS - 1) / FA_SM80_DSUM_ROWS), (unsigned)p.heads_q,
                (unsigned)p.batch);
        dsum_kernel<T><<<g0, THREADS, 0, st>>>(p);
        cudaError_t e0 = cudaGetLastError();
        if (e0 != cudaSuccess)
            return e0;
    }
    /* d > 128 has the fused kernel only (no deterministic kernels; the chooser takes the SIMT
     * ones for that option); with no queries it writes dK = dV = 0 */
    const bool fused = D > 128 ? (p.dq_accum || p.seqlen_q == 0) : (p.dq_accum && p.seqlen_q > 0);
    if (fused && fa_gpu_has_score_mod(p)) /* ALIGNED here (refused above otherwise) */
        return launch_bwd_kernel<T, D, ALIGNED, 2, ALIGNED>(p, st, narrow);
    if constexpr (ALIGNED && (D == 64 || D == 128)) {
        if (fused && grid_backward_fits<D>())
            return mode_of(p) == 2   ? launch_grid_backward<T, D, 2>(p, st)
                   : mode_of(p) == 1 ? launch_grid_backward<T, D, 1>(p, st)
                                     : launch_grid_backward<T, D, 0>(p, st);
    }
    if (fused)
        return mode_of(p) == 2   ? launch_bwd_kernel<T, D, ALIGNED, 2>(p, st, narrow)
               : mode_of(p) == 1 ? launch_bwd_kernel<T, D, ALIGNED, 1>(p, st, narrow)
                                 : launch_bwd_kernel<T, D, ALIGNED, 0>(p, st, narrow);
    if constexpr (D > 128)
        return cudaErrorNotSupported;
    else
        return launch_deterministic_backward<T, D, ALIGNED>(p, st);
}

} // namespace fa_gpu::sm80

#endif
