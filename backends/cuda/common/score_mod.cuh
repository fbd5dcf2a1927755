/* score_mod.cuh: the score modifiers (softcap, ALiBi) of one call in the units of the raw product
 * q . k the tensor-core kernels hold, built on core/score_mod.h: the per-call state, whether a
 * call has one, and the forward's and backward's element steps. */
#ifndef FA_CUDA_COMMON_SCORE_MOD_CUH
#define FA_CUDA_COMMON_SCORE_MOD_CUH

#include "common/params.h"
#include "score_mod.h"
#include "common/tile_class.cuh"

#if defined(__CUDACC_RTC__) /* NVRTC: the toolkit's names from common/rtc_prelude.cuh */
#include "common/rtc_prelude.cuh"
#else
#include <math_constants.h>
#endif

namespace fa_gpu {

/* The kernels build the modifiers of one (sequence, query head) with fa_gpu_score_mod
 * (common/params.h: core/score_mod.h's fa_score_mod_state in the units of the raw product
 * q . k); only instances with the MOD template flag build one, so the plain instances carry none
 * of it. */

/* The softcap on every element of an accumulator array, in place (nothing without one). The
 * backward then holds the capped value, from which fa_softcap_grad gives the derivative. */
template <int N> __device__ __forceinline__ void softcap_all(const fa_score_mod_state &sm, float (&x)[N][4])
{
    if (sm.cap.out == 0.0f)
        return;
#pragma unroll
    for (int i = 0; i < N; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e)
            x[i][e] = fa_softcap_apply(sm.cap, x[i][e]);
}

/* The forward's modifiers on a KN-key slice of scores in the mma accumulator layout (row wq0 +
 * mt MSTRIDE + g + 8 r, key k0x + 8 nt + 2 t4 + c), before anything else of the softmax step: the
 * softcap, then ALiBi with the distance formed once per row and thread (the other keys are
 * compile-time offsets from it); a tile the caller marked empty (cls) gets its -inf back, which
 * the modifiers made finite. */
template <int MT, int KN, int MSTRIDE>
__device__ __forceinline__ void modify_scores(const fa_score_mod_state &sm, float (&sacc)[MT][KN / 8][4], int64_t wq0,
                                              int64_t k0x, fa_tile_class cls)
{
    const int lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
        softcap_all<KN / 8>(sm, sacc[mt]);
    if (sm.alibi) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const float d0 = fa_alibi_row(wq0 + mt * MSTRIDE + g + r * 8, sm.diag, k0x + 2 * t4);
#pragma unroll
                for (int nt = 0; nt < KN / 8; ++nt)
#pragma unroll
                    for (int c = 0; c < 2; ++c)
                        sacc[mt][nt][2 * r + c] += fa_alibi_bias_at(sm.slope, d0 - (float)(nt * 8 + c));
            }
    }
    if (cls == FA_TILE_EMPTY) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < KN / 8; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    sacc[mt][nt][e] = -CUDART_INF_F;
    }
}

/* The fused backwards' start on a transposed score tile (thread element e of column block nt: key
 * wk0 + g + 8 (e >> 1), query q0 + 8 nt + 2 t4 + (e & 1)) of query head h of sequence b: the
 * head's ALiBi slope into sm, the softcap on every element, and ALiBi's distance at the thread's
 * first element returned (transposed_offset gives the others' offsets from it). */
template <int N>
__device__ __forceinline__ float modify_transposed_scores(fa_score_mod_state &sm, const fa_gpu_params &p, int64_t b, int64_t h,
                                                          float (&pt)[N][4], int64_t q0, int64_t wk0)
{
    const int lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
    sm.slope = fa_gpu_alibi_slope(p, b, h);
    softcap_all<N>(sm, pt);
    return fa_alibi_row(q0 + 2 * t4, sm.diag, wk0 + g);
}

/* ALiBi's distance of element (nt, e) of a transposed tile relative to the thread's first */
__device__ __forceinline__ constexpr float transposed_offset(int nt, int e)
{
    return (float)(nt * 8 + (e & 1) - (e >> 1) * 8);
}

/* The backward's step for one element after softcap_all: the derivative of the softcap at the
 * capped value xc (1 without a softcap) into grad, and the modified score (xc with ALiBi's bias
 * of sequence row i, column j) returned. */
__device__ __forceinline__ float modified_score(const fa_score_mod_state &sm, float xc, int64_t i, int64_t j, float &grad)
{
    grad = sm.cap.out != 0.0f ? fa_softcap_grad(sm.cap, xc) : 1.0f;
    return sm.alibi ? xc + fa_alibi_bias(sm.slope, i, j, sm.diag) : xc;
}

/* The same with ALiBi's distance i + diag - j given as a float (fa_alibi_row once per thread and
 * tile step, minus compile-time offsets), as the tensor-core backwards form it. */
__device__ __forceinline__ float modified_score_at(const fa_score_mod_state &sm, float xc, float dist, float &grad)
{
    grad = sm.cap.out != 0.0f ? fa_softcap_grad(sm.cap, xc) : 1.0f;
    return sm.alibi ? xc + fa_alibi_bias_at(sm.slope, dist) : xc;
}

} // namespace fa_gpu

#endif
