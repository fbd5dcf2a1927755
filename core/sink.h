/* sink.h: the learnable attention sink, one logit per query head that joins every row's softmax
 * and carries no value (gpt-oss; FlashAttention-4's learnable_sink). Compiled as C, CUDA, HIP and
 * OpenCL C (the OpenCL backend prepends it to its kernels), so that every kernel folds the sink in
 * and forms its gradient by the same arithmetic.
 *
 * A kernel runs its online softmax over the keys as without a sink, which gives the row's
 * normalised output O0 and its log-sum-exp LSE0 (-inf for a row that sees no key), and then folds
 * the sink in once, in its epilogue:
 *     LSE = log(exp(LSE0) + exp(sink)),   O = O0 * exp(LSE0 - LSE).
 * A row that saw no key gets LSE = sink and O = 0; a NaN LSE0 stays NaN. The sink is in the units
 * of the modified scores, natural log, like LSE; dropout never drops it (the factor scales O0,
 * which already holds the dropped and rescaled probabilities).
 *
 * Backward: with D_i = sum_c dO_ic O_ic, dsink_h = -sum over the rows i of head h of
 * exp(sink_h - LSE_i) D_i; dQ, dK and dV need nothing but the LSE the forward wrote. */
#ifndef FA_SINK_H
#define FA_SINK_H

#if defined(__OPENCL_VERSION__)
#define FA_SINK_EXP(x) exp(x)
#define FA_SINK_LOG1P(x) log1p(x)
#define FA_SINK_ISNAN(x) isnan(x)
#define FA_SINK_INF INFINITY
#elif defined(__CUDACC__) || defined(__HIPCC__)
/* INFINITY (math.h, which the CUDA and HIP headers include), not __int_as_float: that is a
 * __device__ function, and these are __host__ __device__ */
#define FA_SINK_EXP(x) expf(x)
#define FA_SINK_LOG1P(x) log1pf(x)
#define FA_SINK_ISNAN(x) isnan(x)
#define FA_SINK_INF INFINITY
#else
#include <math.h>
#define FA_SINK_EXP(x) expf(x)
#define FA_SINK_LOG1P(x) log1pf(x)
#define FA_SINK_ISNAN(x) isnan(x)
#define FA_SINK_INF INFINITY
#endif

#if defined(__CUDACC__) || defined(__HIPCC__)
#define FA_SINK_FN static __host__ __device__ __forceinline__
#else
#define FA_SINK_FN static inline
#endif

/* The row's LSE with the sink folded in, from its LSE0 over the keys (-inf: no key seen). */
FA_SINK_FN float fa_sink_lse(float lse0, float sink)
{
    if (FA_SINK_ISNAN(lse0))
        return lse0;
    if (lse0 == -FA_SINK_INF)
        return sink;
    const float hi = lse0 > sink ? lse0 : sink, lo = lse0 > sink ? sink : lse0;
    return hi + FA_SINK_LOG1P(FA_SINK_EXP(lo - hi));
}

/* The factor exp(LSE0 - LSE) that scales the row's normalised output: 0 for a row that saw no
 * key, NaN for a NaN row, else in (0, 1]. */
FA_SINK_FN float fa_sink_factor(float lse0, float lse)
{
    if (FA_SINK_ISNAN(lse0))
        return lse0;
    return lse0 == -FA_SINK_INF ? 0.0f : FA_SINK_EXP(lse0 - lse);
}

/* Row i's term of dsink_h: -exp(sink_h - LSE_i) * D_i (LSE_i as the forward wrote it). */
FA_SINK_FN float fa_sink_grad_term(float sink, float lse, float d_row)
{
    return -FA_SINK_EXP(sink - lse) * d_row;
}

#endif /* FA_SINK_H */
