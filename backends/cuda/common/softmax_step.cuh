/* softmax_step.cuh: the online softmax of the tensor-core forwards (sm80 and sm90) on the mma
 * accumulator layout: exp2 on the MUFU unit, one step over a slice of keys (modifiers, masks,
 * running max and sum, P, dropout), the rescale of O, and the epilogue that stages O / l and
 * writes the LSE. */
#ifndef FA_CUDA_COMMON_SOFTMAX_STEP_CUH
#define FA_CUDA_COMMON_SOFTMAX_STEP_CUH

#include "common/params.h"
#include "common/primitives.cuh"
#include "common/tile_geometry.cuh"
#include "common/tile_class.cuh"
#include "common/score_mod.cuh"
#include "common/dropout.cuh"

#include "empty_row.h"
#include "mask.h"
#include "philox.h"
#include "sink.h"

#if defined(__CUDACC_RTC__) /* NVRTC: the toolkit's names from common/rtc_prelude.cuh */
#include "common/rtc_prelude.cuh"
#else
#include <math_constants.h>
#endif

namespace fa_gpu {

/* exp2 on the MUFU unit, denormals flushed (the softmax never needs them: P < 2^-126 is 0). */
__device__ __forceinline__ float fast_exp2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* One online-softmax step of a forward kernel on a KN-key slice of scores in the mma
 * accumulator layout (a warp's m16 tiles; row wq0 + mt MSTRIDE + g + 8 r, key k0x + 8 nt + 2 t4
 * + c): the score modifiers (MOD: sm, on every score, before anything else), the scale when it
 * is not folded into exp2 (cc), the masks on edge tiles, the running maxima and sums (row_l per
 * thread, reduced at the end), scores turned into P, dropout applied to P, and the factor alpha
 * by which O must be rescaled (left to the caller, which may still have a product into O in
 * flight). Shared by the sm80 and sm90 forwards. */
template <typename T, int MT, int KN, int MSTRIDE, bool LISTS, bool DROP, bool MOD = false>
__device__ __forceinline__ void softmax_scores(const fa_gpu_params &p, const fa_mask &m, const fa_seq &s, int64_t b,
                                               int64_t h, int64_t wq0, int64_t k0x, fa_tile_class cls, float cc,
                                               float (&sacc)[MT][KN / 8][4], float (&row_m)[MT][2],
                                               float (&row_l)[MT][2], float (&alpha)[MT][2],
                                               const fa_score_mod_state &sm = fa_score_mod_state{})
{
    const int lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
    const bool edge = cls != FA_TILE_FULL || k0x + KN > s.sk;
    const bool check_blocks = p.bm_bits && cls != FA_TILE_FULL;
    if constexpr (MOD)
        modify_scores<MT, KN, MSTRIDE>(sm, sacc, wq0, k0x, cls);
    /* scores stay raw when the scale is positive (max and exp2 argument are then one
     * FFMA: s * c - max * c); a negative scale is applied first and cc = 1 */
    if (!(p.scale_log2 > 0.0f)) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < KN / 8; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    sacc[mt][nt][e] *= p.scale_log2;
    }
    if (edge) {
        /* each row's visible key range, relative to k0 and clipped to the tile */
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int64_t i = wq0 + mt * MSTRIDE + g + r * 8;
                int64_t lo = 0, hi = 0;
                if (i < s.sq) {
                    fa_mask_row_range(&m, i, &lo, &hi);
                    hi = imin(hi, s.sk);
                }
                const int clo = (int)(lo < k0x ? 0 : imin(lo - k0x, KN));
                const int chi = (int)(hi < k0x ? 0 : imin(hi - k0x, KN));
#pragma unroll
                for (int nt = 0; nt < KN / 8; ++nt)
#pragma unroll
                    for (int c = 0; c < 2; ++c) {
                        const int col = nt * 8 + 2 * t4 + c;
                        if (col < clo || col >= chi ||
                            (LISTS && check_blocks && !block_keep(p, h, i, k0x + col)))
                            sacc[mt][nt][2 * r + c] = -CUDART_INF_F;
                    }
            }
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float mx = -CUDART_INF_F;
#pragma unroll
            for (int nt = 0; nt < KN / 8; ++nt)
                mx = fmaxf(mx, fmaxf(sacc[mt][nt][2 * r], sacc[mt][nt][2 * r + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            /* the new running max (log2 units); a row that has seen only -inf keeps shift 0 */
            mx = fmaxf(row_m[mt][r], mx * cc);
            const float shift = mx == -CUDART_INF_F ? 0.0f : mx;
            alpha[mt][r] = fast_exp2(row_m[mt][r] - shift); /* old -inf: 0 */
            float sum = 0.0f;
#pragma unroll
            for (int nt = 0; nt < KN / 8; ++nt) {
                sacc[mt][nt][2 * r] = fast_exp2(fmaf(sacc[mt][nt][2 * r], cc, -shift));
                sacc[mt][nt][2 * r + 1] = fast_exp2(fmaf(sacc[mt][nt][2 * r + 1], cc, -shift));
                sum += sacc[mt][nt][2 * r] + sacc[mt][nt][2 * r + 1];
            }
            row_l[mt][r] = row_l[mt][r] * alpha[mt][r] + sum; /* per-thread partial, reduced at the end */
            row_m[mt][r] = mx;
        }
    if (DROP && p.dropout_threshold) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            uint32_t keep[(4 * (KN / 8) + 31) / 32];
            dropout_keep_rows_by_keys_all<KN / 8>(p, b, h, wq0 + mt * MSTRIDE + g, k0x + 2 * t4, keep);
#pragma unroll
            for (int nt = 0; nt < KN / 8; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    sacc[mt][nt][e] *= keep_factor(keep, 4 * nt + e, p.dropout_scale);
        }
    }
}

/* O *= alpha, row by row (the accumulator layout of softmax_scores). */
template <int MT, int DN>
__device__ __forceinline__ void rescale(float (&o)[MT][DN][4], const float (&alpha)[MT][2])
{
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int i = 0; i < DN; ++i) {
            o[mt][i][0] *= alpha[mt][0];
            o[mt][i][1] *= alpha[mt][0];
            o[mt][i][2] *= alpha[mt][1];
            o[mt][i][3] *= alpha[mt][1];
        }
}

/* softmax_scores, then O rescaled at once. */
template <typename T, int MT, int KN, int DN, int MSTRIDE, bool LISTS, bool DROP, bool MOD = false>
__device__ __forceinline__ void softmax_step(const fa_gpu_params &p, const fa_mask &m, const fa_seq &s, int64_t b,
                                             int64_t h, int64_t wq0, int64_t k0x, fa_tile_class cls, float cc,
                                             float (&sacc)[MT][KN / 8][4], float (&row_m)[MT][2],
                                             float (&row_l)[MT][2], float (&o)[MT][DN][4],
                                             const fa_score_mod_state &sm = fa_score_mod_state{})
{
    float alpha[MT][2];
    softmax_scores<T, MT, KN, MSTRIDE, LISTS, DROP, MOD>(p, m, s, b, h, wq0, k0x, cls, cc, sacc, row_m, row_l, alpha,
                                                         sm);
    rescale<MT, DN>(o, alpha);
}

/* A forward's epilogue, for warps holding rows wrow + mt MSTRIDE + g + 8 r of the tile at q0:
 * O / l (l summed over the quad) into a row-major shared stage [rows][D + 8] for store_tile (or,
 * for an fp32 output, p.out_f32, straight to global, and the caller skips store_tile), and
 * LSE = (m + log2 l) ln 2 to global; a row that saw no key (l = 0) gives O = 0 by selection
 * (fa_row_output: its accumulator may hold 0 * NaN from masked keys) and LSE = -inf, and a NaN l
 * (a NaN score the row sees) stays NaN in both. GENERAL (the MOD instances): with p.sink, the
 * learnable sink folded into O and LSE (core/sink.h), and O's p.d_v columns (d_v <= d; V's
 * columns from d_v on loaded as zeros) where the others store p.d. The caller synchronises before
 * store_tile. Shared by the sm80 and sm90 forwards. */
template <typename T, int D, int MT, int MSTRIDE, bool GENERAL = false>
__device__ __forceinline__ void stage_output(T *stage, const float (&o)[MT][D / 8][4], const float (&row_m)[MT][2],
                                             const float (&row_l)[MT][2], const fa_gpu_params &p, const fa_seq &s,
                                             int64_t b, int64_t h, int64_t q0, int wrow)
{
    constexpr int LD = D + 8;
    const int lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float l = row_l[mt][r];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            float inv = l == 0.0f ? 0.0f : 1.0f / l;
            float sink_lse = 0.0f;
            if constexpr (GENERAL)
                if (p.sink) { /* LSE over the keys and the sink; O scaled by exp(LSE0 - LSE) */
                    const float lse0 = l == 0.0f ? -CUDART_INF_F : (row_m[mt][r] + log2f(l)) * LN2;
                    sink_lse = fa_sink_lse(lse0, p.sink[h]);
                    inv *= fa_sink_factor(lse0, sink_lse);
                }
            const int rr = wrow + mt * MSTRIDE + g + r * 8;
            const int64_t i = q0 + rr;
            if (p.out_f32) { /* fp32 output: straight from the registers, unrounded */
                float *orow = static_cast<float *>(p.o.data) + b * p.o.sb + (s.q_start + i) * p.o.ss + h * p.o.sh;
#pragma unroll
                for (int nt = 0; nt < D / 8; ++nt) {
                    const int c = nt * 8 + 2 * t4;
                    if constexpr (GENERAL) { /* O's d_v columns */
                        if (i < s.sq && c < p.d_v)
                            orow[c] = fa_row_output(o[mt][nt][2 * r], inv);
                        if (i < s.sq && c + 1 < p.d_v)
                            orow[c + 1] = fa_row_output(o[mt][nt][2 * r + 1], inv);
                        continue;
                    }
                    if (i < s.sq && c < p.d)
                        orow[c] = fa_row_output(o[mt][nt][2 * r], inv);
                    if (i < s.sq && c + 1 < p.d)
                        orow[c + 1] = fa_row_output(o[mt][nt][2 * r + 1], inv);
                }
            } else {
#pragma unroll
                for (int nt = 0; nt < D / 8; ++nt)
                    *reinterpret_cast<uint32_t *>(stage + rr * LD + nt * 8 + 2 * t4) =
                        elem<T>::pack(fa_row_output(o[mt][nt][2 * r], inv), fa_row_output(o[mt][nt][2 * r + 1], inv));
            }
            if (p.lse.data && t4 == 0 && i < s.sq) {
                /* l 0: no key seen; a NaN score seen leaves l NaN and row_m -inf (fmaxf
                 * drops NaN), and the LSE NaN */
                float lse = l == 0.0f ? -CUDART_INF_F : (row_m[mt][r] + log2f(l)) * LN2;
                if constexpr (GENERAL)
                    if (p.sink)
                        lse = sink_lse;
                static_cast<float *>(p.lse.data)[b * p.lse.sb + h * p.lse.sh + (s.q_start + i) * p.lse.ss] = lse;
            }
        }
}

} // namespace fa_gpu

#endif
