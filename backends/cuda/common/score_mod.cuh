/* score_mod.cuh: the score modifiers (softcap, ALiBi) of one call in the units of the raw product
 * q . k the tensor-core kernels hold, built on core/score_mod.h: the per-call state, whether a
 * call has one, and the forward's and backward's element steps. */
#ifndef FA_CUDA_COMMON_SCORE_MOD_CUH
#define FA_CUDA_COMMON_SCORE_MOD_CUH

#include "params.h"
#include "score_mod.h"

namespace fa_sm80 {

/* The score modifiers of one call (core/score_mod.h) in the units of the raw product q . k that
 * the kernels hold: the softcap's factors (cap.out == 0: none), whether ALiBi is on, the slope of
 * the current query head and diag = seqlen_k - seqlen_q of the sequence. Only instances with the
 * MOD template flag build one, so the plain instances carry none of it. */
struct score_mod {
    fa_softcap_factors cap;
    bool alibi;
    float slope;
    int64_t diag;
};

/* Whether a call has a score modifier (selects the MOD instances). */
__host__ __device__ __forceinline__ bool has_score_mod(const fa_cuda_params &p)
{
    return p.softcap.out != 0.0f || p.alibi_slopes != nullptr;
}

/* ALiBi's slope of query head h of sequence b in x units (0 without ALiBi). */
__device__ __forceinline__ float alibi_slope(const fa_cuda_params &p, int64_t b, int64_t h)
{
    return p.alibi_slopes ? p.alibi_slopes[b * p.alibi_stride + h] * p.alibi_mul : 0.0f;
}

__device__ __forceinline__ score_mod score_mod_of(const fa_cuda_params &p, const fa_seq &s, int64_t b, int64_t h)
{
    score_mod sm;
    sm.cap = p.softcap;
    sm.alibi = p.alibi_slopes != nullptr;
    sm.slope = alibi_slope(p, b, h);
    sm.diag = s.sk - s.sq;
    return sm;
}

/* The softcap on every element of an accumulator array, in place (nothing without one). The
 * backward then holds the capped value, from which fa_softcap_grad gives the derivative. */
template <int N> __device__ __forceinline__ void softcap_all(const score_mod &sm, float (&x)[N][4])
{
    if (sm.cap.out == 0.0f)
        return;
#pragma unroll
    for (int i = 0; i < N; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e)
            x[i][e] = fa_softcap_apply(sm.cap, x[i][e]);
}

/* The backward's step for one element after softcap_all: the derivative of the softcap at the
 * capped value xc (1 without a softcap) into grad, and the modified score (xc with ALiBi's bias
 * of sequence row i, column j) returned. */
__device__ __forceinline__ float modified_score(const score_mod &sm, float xc, int64_t i, int64_t j, float &grad)
{
    grad = sm.cap.out != 0.0f ? fa_softcap_grad(sm.cap, xc) : 1.0f;
    return sm.alibi ? xc + fa_alibi_bias(sm.slope, i, j, sm.diag) : xc;
}

/* The same with ALiBi's distance i + diag - j given as a float (fa_alibi_row once per thread and
 * tile step, minus compile-time offsets), as the tensor-core backwards form it. */
__device__ __forceinline__ float modified_score_at(const score_mod &sm, float xc, float dist, float &grad)
{
    grad = sm.cap.out != 0.0f ? fa_softcap_grad(sm.cap, xc) : 1.0f;
    return sm.alibi ? xc + fa_alibi_bias_at(sm.slope, dist) : xc;
}

} // namespace fa_sm80

#endif
