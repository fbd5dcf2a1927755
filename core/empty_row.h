/* empty_row.h: the rule for a query row that sees no key (causal with seqlen_q > seqlen_k, a
 * window, an empty block-mask row, a zero-length key sequence). Such a row writes O = 0 and
 * LSE = -inf, its dQ is 0, and it adds nothing to dK or dV, whatever Q, K, V and dO hold.
 *
 * Kernels multiply whole tiles, so a probability of exactly 0 still meets the values it weights:
 * 0 * NaN = NaN and 0 * inf = NaN. The rule is therefore applied by selection, never by a product:
 *   forward:  O = acc * (1/l) only where l > 0, else 0 (fa_row_output);
 *   backward: a row with LSE = -inf (fa_row_absent) has its Q and dO treated as 0 where they
 *             enter dK = dS^T Q and dV = P^T dO, and its dQ written 0; a masked element's dS is
 *             selected to 0 rather than computed as P (dP - D).
 * Compiled as C, CUDA, HIP and OpenCL C (the OpenCL backend prepends this file to its kernels). */
#ifndef FA_EMPTY_ROW_H
#define FA_EMPTY_ROW_H

#if !defined(__OPENCL_VERSION__) && !defined(__CUDACC__) && !defined(__HIPCC__)
#include <math.h>
#endif

#if defined(__CUDACC__) || defined(__HIPCC__)
#define FA_EMPTY_ROW_FN static __host__ __device__ __forceinline__
#else
#define FA_EMPTY_ROW_FN static inline
#endif

/* One element of the normalised output: acc / l for a row that saw a key, 0 for a row that saw
 * none. inv_sum is 1/l, or 0 when l = 0 (l is a sum of terms at most 1, so 1/l is never 0 when
 * l > 0): the select keeps a NaN that acc picked up from masked keys (P = 0 times V = NaN) out of
 * an empty row. */
FA_EMPTY_ROW_FN float fa_row_output(float acc, float inv_sum)
{
    return inv_sum == 0.0f ? 0.0f : acc * inv_sum;
}

#if defined(__OPENCL_VERSION__)
/* The same for four elements (OpenCL's float4 epilogues). */
static inline float4 fa_row_output4(float4 acc, float inv_sum)
{
    return inv_sum == 0.0f ? (float4)(0.0f) : acc * inv_sum;
}
#endif

/* The backward's test for a row that saw no key: its LSE is -inf (and only then). */
FA_EMPTY_ROW_FN int fa_row_absent(float lse)
{
    return lse == -INFINITY;
}

#endif /* FA_EMPTY_ROW_H */
