/* score_mod.h: the score modifiers, applied to every score after the softmax scale and before the
 * mask and the softmax, and the derivative the backward needs. One definition for every kernel:
 * compiled as C, CUDA, HIP and OpenCL C (the OpenCL backend prepends it to its kernels).
 *
 * With S the scaled score of query row i and key column j of one sequence:
 *   softcap c > 0:  S' = c * tanh(S / c)                              dS'/dS = 1 - tanh^2(S / c)
 *   ALiBi slope a:  S' = S - a * |i + seqlen_k - seqlen_q - j|        dS'/dS = 1
 * Both together: the softcap first, then the ALiBi bias (FlashAttention-2's order). The distance
 * is aligned bottom-right like the causal mask (core/mask.h).
 *
 * Units. A kernel holds x with S = u * x: the GPU kernels keep the raw product q . k (u = the
 * softmax scale, which they apply inside exp2), the CPU kernels prescale Q (u = 1). The factors
 * below are in x's units, so the modified x' still satisfies S' = u * x' and the kernel's softmax
 * is unchanged. tanh is computed as 1 - 2 / (exp2(2 y log2 e) + 1): one exp2 and one division;
 * +-1 at +-inf, NaN propagates. The C path's |t - tanh| measured at most 1.8e-7 over y in [-40, 40]
 * (docs/options.md); the NVIDIA path's error was not measured on its own (the conformance grid's
 * softcap cases pass with it). */
#ifndef FA_SCORE_MOD_H
#define FA_SCORE_MOD_H

#if defined(__OPENCL_VERSION__)
#define FA_SCORE_EXP2(x) exp2(x)
#define FA_SCORE_FABS(x) fabs(x)
#define FA_SCORE_I64 long /* OpenCL C has no <stdint.h>; its long is 64 bits */
#else
#if !defined(__CUDACC_RTC__) && !defined(__HIPCC_RTC__) /* NVRTC: its built-in math functions, common/rtc_prelude.cuh's types */
#include <math.h>
#include <stdint.h>
#endif
#define FA_SCORE_EXP2(x) exp2f(x)
#define FA_SCORE_FABS(x) fabsf(x)
#define FA_SCORE_I64 int64_t
#endif

#if defined(__CUDACC__) || defined(__HIPCC__)
#define FA_SCORE_FN static __host__ __device__ __forceinline__
#else
#define FA_SCORE_FN static inline
#endif

/* The softcap's factors in x's units for scale u and cap c > 0 (all 0 when c is 0: no softcap).
 *   in  = 2 log2(e) u / c   (x * in = 2 S / c in log2 units)
 *   out = c / u             (x' = out * tanh)
 *   inv = u / c             (tanh = x' * inv, for the derivative) */
typedef struct fa_softcap_factors {
    float in, out, inv;
} fa_softcap_factors;

FA_SCORE_FN fa_softcap_factors fa_softcap_make(float u, float c)
{
    fa_softcap_factors f;
    if (c > 0.0f) {
        f.in = 2.8853900817779268f * (u / c); /* 2 log2(e) */
        f.out = c / u;
        f.inv = u / c;
    } else {
        f.in = f.out = f.inv = 0.0f;
    }
    return f;
}

/* x' = out * tanh(x * inv). On NVIDIA devices exp2 and the reciprocal are the MUFU unit's
 * ex2.approx / rcp.approx (approximations the PTX ISA bounds to a few ulp), two instructions
 * where the IEEE division takes about a dozen. ex2 overflows to +inf and rcp(inf) = 0, so
 * t = +-1 at the extremes. */
FA_SCORE_FN float fa_softcap_apply(fa_softcap_factors f, float x)
{
#if defined(__CUDA_ARCH__)
    float e, r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(x * f.in));
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(e + 1.0f));
    return f.out * (1.0f - 2.0f * r);
#else
    return f.out * (1.0f - 2.0f / (FA_SCORE_EXP2(x * f.in) + 1.0f));
#endif
}

/* dx'/dx from the capped value x' (before any ALiBi bias): 1 - tanh^2 */
FA_SCORE_FN float fa_softcap_grad(fa_softcap_factors f, float x_capped)
{
    float t = x_capped * f.inv;
    return 1.0f - t * t;
}

/* The ALiBi bias in x's units from the signed distance dist = row + diag - col as a float:
 * -slope_x * |dist|, with slope_x = slope / u. Kernels form row + diag - col0 once per row
 * (fa_alibi_row) and subtract the column's offset within the tile, a small exact float. */
FA_SCORE_FN float fa_alibi_bias_at(float slope_x, float dist)
{
    return -slope_x * FA_SCORE_FABS(dist);
}

/* row + diag - col0 as a float (exact below 2^24; beyond, its relative error 2^-24 is that of
 * the fp32 score it is added to), diag = seqlen_k - seqlen_q of the row's sequence */
FA_SCORE_FN float fa_alibi_row(FA_SCORE_I64 row, FA_SCORE_I64 diag, FA_SCORE_I64 col0)
{
    return (float)(row + diag - col0);
}

/* The ALiBi bias of element (row, col): -slope_x * |row + diag - col| */
FA_SCORE_FN float fa_alibi_bias(float slope_x, FA_SCORE_I64 row, FA_SCORE_I64 col, FA_SCORE_I64 diag)
{
    return fa_alibi_bias_at(slope_x, fa_alibi_row(row, diag, col));
}

/* ---------------------------------------------------------------- a call's modifiers */

/* The score modifiers of one call, as the validation leaves them (fa_problem.mod) and every
 * kernel receives them, whole: the CUDA / HIP parameters carry the struct, the OpenCL parameter
 * block carries its bytes (the same layout in C and OpenCL C: 16 bytes, 8-aligned). ALiBi's
 * slopes are an array in the device's memory, which each backend passes its own way (a pointer,
 * a buffer argument) next to this struct. A new per-call modifier adds its fields here and in
 * fa_score_mod_factors / fa_score_mod_state (and their constructors), its step to
 * fa_score_mod_apply, and its check to core/validate.c. */
typedef struct fa_score_mod {
    float softcap;             /* c > 0; 0: off */
    int alibi;                 /* 1: ALiBi, slopes given */
    FA_SCORE_I64 alibi_stride; /* slope of sequence b, query head h: slopes[b * alibi_stride + h] */
} fa_score_mod;

/* Whether a call has any modifier (the kernels' MOD instances / programs run it). */
FA_SCORE_FN int fa_score_mod_active(fa_score_mod m)
{
    return m.softcap > 0.0f || m.alibi;
}

/* A call's modifiers in a kernel's x units (S = u x), derived once per call: on the host for the
 * CUDA / HIP parameters, in the kernel elsewhere. */
typedef struct fa_score_mod_factors {
    fa_softcap_factors cap;    /* cap.out == 0: no softcap */
    int alibi;
    float alibi_mul;           /* 1 / u: a slope as given times this is in x units */
    FA_SCORE_I64 alibi_stride; /* as fa_score_mod's */
} fa_score_mod_factors;

FA_SCORE_FN fa_score_mod_factors fa_score_mod_prepare(fa_score_mod m, float u)
{
    fa_score_mod_factors f;
    f.cap = fa_softcap_make(u, m.softcap);
    f.alibi = m.alibi;
    f.alibi_mul = m.alibi ? 1.0f / u : 0.0f;
    f.alibi_stride = m.alibi_stride;
    return f;
}

/* Whether the factors modify anything (fa_score_mod_active of the call they came from). */
FA_SCORE_FN int fa_score_mod_factors_active(fa_score_mod_factors f)
{
    return f.cap.out != 0.0f || f.alibi;
}

/* The index of the ALiBi slope of sequence b, query head h in the slopes array. */
FA_SCORE_FN FA_SCORE_I64 fa_alibi_slope_index(fa_score_mod_factors f, FA_SCORE_I64 b, FA_SCORE_I64 h)
{
    return b * f.alibi_stride + h;
}

/* The modifiers of one (sequence, query head) in x units. */
typedef struct fa_score_mod_state {
    fa_softcap_factors cap; /* cap.out == 0: no softcap */
    int alibi;
    float slope;            /* ALiBi's slope in x units */
    FA_SCORE_I64 diag;      /* seqlen_k - seqlen_q of the sequence: the bottom-right alignment */
} fa_score_mod_state;

/* slope: the sequence's and head's ALiBi slope as given (read at fa_alibi_slope_index; any value
 * without ALiBi); diag = seqlen_k - seqlen_q of the sequence. */
FA_SCORE_FN fa_score_mod_state fa_score_mod_begin(fa_score_mod_factors f, float slope, FA_SCORE_I64 diag)
{
    fa_score_mod_state st;
    st.cap = f.cap;
    st.alibi = f.alibi;
    st.slope = f.alibi ? slope * f.alibi_mul : 0.0f;
    st.diag = diag;
    return st;
}

/* The modified score of x, with ALiBi's distance row + diag - col given as a float (fa_alibi_row);
 * *grad (when grad is not null) receives dx'/dx: the softcap's derivative, 1 without one. The
 * softcap, then the ALiBi bias. */
FA_SCORE_FN float fa_score_mod_apply(const fa_score_mod_state *st, float x, float dist, float *grad)
{
    float g = 1.0f;
    if (st->cap.out != 0.0f) {
        x = fa_softcap_apply(st->cap, x);
        g = fa_softcap_grad(st->cap, x);
    }
    if (st->alibi)
        x += fa_alibi_bias_at(st->slope, dist);
    if (grad)
        *grad = g;
    return x;
}

/* The same at element (row i, column j) of the sequence: ALiBi's distance formed here. */
FA_SCORE_FN float fa_score_mod_apply_at(const fa_score_mod_state *st, float x, FA_SCORE_I64 i, FA_SCORE_I64 j,
                                        float *grad)
{
    return fa_score_mod_apply(st, x, fa_alibi_row(i, st->diag, j), grad);
}

#endif /* FA_SCORE_MOD_H */
