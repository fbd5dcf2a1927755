/* kernels.cuh: the sm80 tensor-core FlashAttention kernels (FlashAttention-2's algorithm).
 * Tiles of 64 x 64 with four warps of 16 rows; Q K^T and P V on mma.sync m16n8k16 with fp32
 * accumulators, the online softmax in registers with exp2 and the scale folded in, K/V tiles
 * double-buffered in shared memory through cp.async (or plain loads when rows are not 16-byte
 * aligned). Backward, two algorithms after D = rowsum(dO * O): the deterministic one computes
 * dK, dV per key tile with the warps owning key rows (S^T = K Q^T, so no transposes through
 * shared memory) and dQ per query tile in a second kernel, without atomics, so its gradients are
 * bitwise reproducible; the fused one (bwd_kernel) computes all three per key tile and adds dQ
 * into an fp32 accumulator with reductions (red_add2), so its dQ is not. Masks, dropout
 * (core/philox.h), block-sparse lists and the score modifiers (core/score_mod.h, instances with
 * the MOD flag) follow the core's definitions element for element. */
#ifndef FA_SM80_KERNELS_CUH
#define FA_SM80_KERNELS_CUH

#include "params.h"
#include "primitives.cuh"
#include "tiles.h"

#include "empty_row.h"
#include "mask.h"
#include "philox.h"
#include "score_mod.h"

#include <cuda_runtime.h>
#include <math_constants.h>

namespace fa_sm80 {

constexpr int BLOCK = FA_SM80_BLOCK;
constexpr int THREADS = 128;
constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;

__device__ __forceinline__ int64_t imin(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

template <typename T>
__device__ __forceinline__ const T *row_ptr(const fa_cuda_tensor &t, int64_t b, int64_t row, int64_t h)
{
    return static_cast<const T *>(t.data) + b * t.sb + row * t.ss + h * t.sh;
}

/* ROWS rows x D columns of head h into a shared tile (leading dimension D + 8), rows >= nrows and
 * columns >= d zero-filled. ALIGNED: 16-byte cp.async (caller commits and waits). */
template <typename T, int D, bool ALIGNED, int ROWS = BLOCK, int NT = THREADS>
__device__ __forceinline__ void load_tile(T *dst, const fa_cuda_tensor &t, int64_t b, int64_t row0, int64_t nrows,
                                          int64_t h, int d)
{
    constexpr int LD = D + 8;
    if (ALIGNED && NT % (D / 8) == 0) {
        /* each thread copies one 16-byte column chunk of every RS-th row: one pointer and one
         * shared address, both advanced by a constant (nothing per row kept in registers) */
        constexpr int CHUNKS = D / 8, RS = NT / CHUNKS;
        const int c = (threadIdx.x % CHUNKS) * 8, r0 = threadIdx.x / CHUNKS;
        const bool cvalid = c < d;
        const T *src = row_ptr<T>(t, b, row0 + r0, h) + c;
        const int64_t step = RS * t.ss;
        uint32_t sdst = smem_addr(dst + r0 * LD + c);
#pragma unroll
        for (int r = r0; r < ROWS; r += RS) {
            const bool valid = cvalid && r < nrows;
            cp_async16_s(sdst, valid ? src : static_cast<const T *>(t.data), valid);
            src += step;
            sdst += RS * LD * (int)sizeof(T);
        }
    } else if (ALIGNED) {
        constexpr int CHUNKS = D / 8;
#pragma unroll 1
        for (int i = threadIdx.x; i < ROWS * CHUNKS; i += NT) {
            int r = i / CHUNKS, c = (i % CHUNKS) * 8;
            bool valid = r < nrows && c < d;
            const T *src = valid ? row_ptr<T>(t, b, row0 + r, h) + c : static_cast<const T *>(t.data);
            cp_async16(dst + r * LD + c, src, valid);
        }
    } else {
        for (int i = threadIdx.x; i < ROWS * D; i += NT) {
            int r = i / D, c = i % D;
            T v = elem<T>::from_float(0.0f);
            if (r < nrows && c < d)
                v = row_ptr<T>(t, b, row0 + r, h)[c];
            dst[r * LD + c] = v;
        }
    }
}

/* The reverse: rows < nrows, columns < d of a shared tile to head h of t. ALIGNED: 16-byte
 * stores where a whole chunk lies inside d. The caller synchronises before. */
template <typename T, int D, bool ALIGNED, int ROWS = BLOCK, int NT = THREADS>
__device__ __forceinline__ void store_tile(const fa_cuda_tensor &t, const T *src, int64_t b, int64_t row0,
                                           int64_t nrows, int64_t h, int d)
{
    constexpr int LD = D + 8, CHUNKS = D / 8;
    for (int i = threadIdx.x; i < ROWS * CHUNKS; i += NT) {
        const int r = i / CHUNKS, c = (i % CHUNKS) * 8;
        if (r >= nrows || c >= d)
            continue;
        T *dst = static_cast<T *>(t.data) + b * t.sb + (row0 + r) * t.ss + h * t.sh + c;
        if (ALIGNED && c + 8 <= d) {
            *reinterpret_cast<uint4 *>(dst) = *reinterpret_cast<const uint4 *>(src + r * LD + c);
        } else {
            for (int e = 0; e < 8 && c + e < d; ++e)
                dst[e] = src[r * LD + c + e];
        }
    }
}

/* Block-mask bit for query head h, local element (i, j). */
__device__ __forceinline__ bool block_keep(const fa_cuda_params &p, int64_t h, int64_t i, int64_t j)
{
    int64_t mh = p.bm_heads == 1 ? 0 : h;
    return p.bm_bits[(mh * p.bm_rows + i / p.bm_bq) * p.bm_cols + j / p.bm_bk] != 0;
}

/* The class of (query tile qt, key tile kt) of head h (64 x 64 tiles) under every mask. */
__device__ __forceinline__ fa_tile_class tile_class(const fa_cuda_params &p, const fa_mask &m, int64_t h, int64_t qt,
                                                    int64_t kt)
{
    fa_tile_class c = fa_mask_classify_tile(&m, qt * BLOCK, (qt + 1) * BLOCK, kt * BLOCK, (kt + 1) * BLOCK);
    if (c == FA_TILE_EMPTY || !p.bl_row_ptr)
        return c;
    int64_t mh = p.bl_heads == 1 ? 0 : h;
    int64_t lo = p.bl_row_ptr[mh * p.bl_nq + qt], hi = p.bl_row_ptr[mh * p.bl_nq + qt + 1];
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (p.bl_col[mid] < kt)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == p.bl_row_ptr[mh * p.bl_nq + qt + 1] || p.bl_col[lo] != kt)
        return FA_TILE_EMPTY;
    return fa_tile_class_meet(c, (fa_tile_class)p.bl_cls[lo]);
}

/* Visible under every mask: the element test of core/mask.h plus the block bit. */
__device__ __forceinline__ bool visible(const fa_cuda_params &p, const fa_mask &m, int64_t h, int64_t i, int64_t j,
                                        bool check_blocks)
{
    if (i >= m.seqlen_q || j >= m.seqlen_k)
        return false;
    int64_t lo, hi;
    fa_mask_row_range(&m, i, &lo, &hi);
    if (j < lo || j >= hi)
        return false;
    return !check_blocks || block_keep(p, h, i, j);
}

/* Key tiles of query tile qt (head h), in order: from the block lists when present, else the
 * range the causal / window mask leaves. Returns the count; tile(n) gives the n-th. */
struct key_tiles {
    int64_t begin, end;      /* range, or list positions */
    const int32_t *list;
    __device__ __forceinline__ int64_t count() const { return end - begin; }
    __device__ __forceinline__ int64_t tile(int64_t n) const { return list ? list[begin + n] : begin + n; }
};

__device__ __forceinline__ key_tiles key_tiles_of(const fa_cuda_params &p, const fa_mask &m, int64_t h, int64_t qt)
{
    key_tiles kt;
    const int64_t q0 = qt * BLOCK;
    if (p.bl_row_ptr) {
        int64_t mh = p.bl_heads == 1 ? 0 : h;
        kt.list = p.bl_col;
        kt.begin = p.bl_row_ptr[mh * p.bl_nq + qt];
        kt.end = p.bl_row_ptr[mh * p.bl_nq + qt + 1];
        return kt;
    }
    kt.list = nullptr;
    int64_t lo, hi;
    fa_mask_rows_range(&m, q0, imin(q0 + BLOCK, m.seqlen_q), &lo, &hi);
    if (hi <= lo) {
        kt.begin = kt.end = 0;
    } else {
        kt.begin = lo / BLOCK;
        kt.end = (hi + BLOCK - 1) / BLOCK;
    }
    return kt;
}

/* Dropout factor of element (b, h, i, j): 0 or 1 / (1 - p). */
__device__ __forceinline__ float dropout_factor(const fa_cuda_params &p, int64_t b, int64_t h, int64_t i, int64_t j)
{
    fa_philox4 r = fa_dropout_block(p.seed, p.offset, (uint64_t)b, (uint64_t)p.heads_q, (uint64_t)h, (uint64_t)i,
                                    (uint64_t)j);
    return r.v[j & 3] >= p.dropout_threshold ? p.dropout_scale : 0.0f;
}

/* ------------------------------------------------------------------ score modifiers */

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

/* ------------------------------------------------------------------ forward */

/* exp2 on the MUFU unit, denormals flushed (the softmax never needs them: P < 2^-126 is 0). */
__device__ __forceinline__ float fast_exp2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* The forward's query tile: MT m16 tiles per warp, so B_r = 4 warps * 16 * MT rows. Two tiles
 * per warp (B_r = 128) up to d = 128: every K / V fragment read from shared memory feeds two
 * mma instead of one, and each warp has twice the independent accumulator chains. Above d 128
 * the 16 x d accumulator per m tile already takes 64 .. 128 registers, so one tile per warp. */
template <int D> struct fwd_shape {
    static constexpr int MT = tile_of(D).fwd_mtiles;
    static constexpr int BR = 4 * 16 * MT;
    static constexpr int KN = tile_of(D).fwd_keys;
    static_assert(MT == 1 || MT == 2, "tiles.h: one or two m tiles per warp");
    static_assert(KN == 32 || KN == BLOCK, "tiles.h: 32 or 64 keys per softmax step");
};

/* Key tiles of a B_r-row query tile in increasing order: the range the causal / window mask
 * leaves, or the merge of the core's per-64-row lists of its SUB = B_r / 64 sub-tiles. */
template <int SUB, bool LISTS> struct key_walk {
    const int32_t *list;
    int64_t pos[SUB], end[SUB];
    int64_t next, last; /* range mode */
    __device__ __forceinline__ int64_t peek() const
    {
        if constexpr (!LISTS) {
            return next < last ? next : -1;
        } else {
            if (!list)
                return next < last ? next : -1;
            int64_t best = -1;
#pragma unroll
            for (int i = 0; i < SUB; ++i)
                if (pos[i] < end[i] && (best < 0 || list[pos[i]] < best))
                    best = list[pos[i]];
            return best;
        }
    }
    __device__ __forceinline__ void pop(int64_t kt)
    {
        if constexpr (!LISTS) {
            ++next;
        } else {
            if (!list) {
                ++next;
                return;
            }
#pragma unroll
            for (int i = 0; i < SUB; ++i)
                if (pos[i] < end[i] && list[pos[i]] == kt)
                    ++pos[i];
        }
    }
};

template <int SUB, bool LISTS>
__device__ __forceinline__ key_walk<SUB, LISTS> key_walk_of(const fa_cuda_params &p, const fa_mask &m, int64_t h,
                                                            int64_t q0, int64_t rows)
{
    key_walk<SUB, LISTS> w;
    w.next = w.last = 0;
    if (LISTS && p.bl_row_ptr) {
        const int64_t mh = p.bl_heads == 1 ? 0 : h;
        w.list = p.bl_col;
#pragma unroll
        for (int i = 0; i < SUB; ++i) {
            const int64_t qt = q0 / BLOCK + i;
            const bool in = qt < p.bl_nq && qt * BLOCK < m.seqlen_q;
            w.pos[i] = in ? p.bl_row_ptr[mh * p.bl_nq + qt] : 0;
            w.end[i] = in ? p.bl_row_ptr[mh * p.bl_nq + qt + 1] : 0;
        }
        return w;
    }
    w.list = nullptr;
    int64_t lo, hi;
    fa_mask_rows_range(&m, q0, imin(q0 + rows, m.seqlen_q), &lo, &hi);
    if (hi > lo) {
        w.next = lo / BLOCK;
        w.last = (hi + BLOCK - 1) / BLOCK;
    }
    return w;
}

/* The class of key tile kt for the query rows [r0, r1) of one warp, which lie inside one 64-row
 * tile of the core's block lists. */
__device__ __forceinline__ fa_tile_class rows_class(const fa_cuda_params &p, const fa_mask &m, int64_t h, int64_t r0,
                                                    int64_t r1, int64_t kt)
{
    fa_tile_class c = fa_mask_classify_tile(&m, r0, r1, kt * BLOCK, (kt + 1) * BLOCK);
    if (c == FA_TILE_EMPTY || !p.bl_row_ptr)
        return c;
    return fa_tile_class_meet(c, tile_class(p, m, h, r0 / BLOCK, kt));
}

/* One online-softmax step of a forward kernel on a KN-key slice of scores in the mma
 * accumulator layout (a warp's m16 tiles; row wq0 + mt MSTRIDE + g + 8 r, key k0x + 8 nt + 2 t4
 * + c): the score modifiers (MOD: sm, on every score, before anything else), the scale when it
 * is not folded into exp2 (cc), the masks on edge tiles, the running maxima and sums (row_l per
 * thread, reduced at the end), scores turned into P, dropout applied to P, and the factor alpha
 * by which O must be rescaled (left to the caller, which may still have a product into O in
 * flight). Shared by the sm80 and sm90 forwards. */
template <typename T, int MT, int KN, int MSTRIDE, bool LISTS, bool DROP, bool MOD = false>
__device__ __forceinline__ void softmax_scores(const fa_cuda_params &p, const fa_mask &m, const fa_seq &s, int64_t b,
                                               int64_t h, int64_t wq0, int64_t k0x, fa_tile_class cls, float cc,
                                               float (&sacc)[MT][KN / 8][4], float (&row_m)[MT][2],
                                               float (&row_l)[MT][2], float (&alpha)[MT][2],
                                               const score_mod &sm = score_mod{})
{
    const int lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
    const bool edge = cls != FA_TILE_FULL || k0x + KN > s.sk;
    const bool check_blocks = p.bm_bits && cls != FA_TILE_FULL;
    if constexpr (MOD) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
            softcap_all<KN / 8>(sm, sacc[mt]);
        if (sm.alibi) {
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    /* the distance at this thread's first key of the slice; the other keys are
                     * compile-time offsets from it */
                    const float d0 = fa_alibi_row(wq0 + mt * MSTRIDE + g + r * 8, sm.diag, k0x + 2 * t4);
#pragma unroll
                    for (int nt = 0; nt < KN / 8; ++nt)
#pragma unroll
                        for (int c = 0; c < 2; ++c)
                            sacc[mt][nt][2 * r + c] += fa_alibi_bias_at(sm.slope, d0 - (float)(nt * 8 + c));
                }
        }
        /* a caller marks a tile its rows do not see with -inf, which the modifiers made finite */
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
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < KN / 8; ++nt)
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    const int64_t i = wq0 + mt * MSTRIDE + g + r * 8;
                    const int64_t j = k0x + nt * 8 + 2 * t4; /* even: j and j + 1 share a Philox block */
                    fa_philox4 bits = fa_dropout_block(p.seed, p.offset, (uint64_t)b, (uint64_t)p.heads_q,
                                                       (uint64_t)h, (uint64_t)i, (uint64_t)j);
                    sacc[mt][nt][2 * r] *= bits.v[j & 3] >= p.dropout_threshold ? p.dropout_scale : 0.0f;
                    sacc[mt][nt][2 * r + 1] *=
                        bits.v[(j + 1) & 3] >= p.dropout_threshold ? p.dropout_scale : 0.0f;
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
__device__ __forceinline__ void softmax_step(const fa_cuda_params &p, const fa_mask &m, const fa_seq &s, int64_t b,
                                             int64_t h, int64_t wq0, int64_t k0x, fa_tile_class cls, float cc,
                                             float (&sacc)[MT][KN / 8][4], float (&row_m)[MT][2],
                                             float (&row_l)[MT][2], float (&o)[MT][DN][4],
                                             const score_mod &sm = score_mod{})
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
 * (a NaN score the row sees) stays NaN in both. The caller
 * synchronises before store_tile. Shared by the sm80 and sm90 forwards. */
template <typename T, int D, int MT, int MSTRIDE>
__device__ __forceinline__ void stage_output(T *stage, const float (&o)[MT][D / 8][4], const float (&row_m)[MT][2],
                                             const float (&row_l)[MT][2], const fa_cuda_params &p, const fa_seq &s,
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
            const float inv = l == 0.0f ? 0.0f : 1.0f / l;
            const int rr = wrow + mt * MSTRIDE + g + r * 8;
            const int64_t i = q0 + rr;
            if (p.out_f32) { /* fp32 output: straight from the registers, unrounded */
                float *orow = static_cast<float *>(p.o.data) + b * p.o.sb + (s.q_start + i) * p.o.ss + h * p.o.sh;
#pragma unroll
                for (int nt = 0; nt < D / 8; ++nt) {
                    const int c = nt * 8 + 2 * t4;
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
                const float lse = (l == 0.0f || row_m[mt][r] == -CUDART_INF_F) ? -CUDART_INF_F
                                                                                : (row_m[mt][r] + log2f(l)) * LN2;
                static_cast<float *>(p.lse.data)[b * p.lse.sb + h * p.lse.sh + (s.q_start + i) * p.lse.ss] = lse;
            }
        }
}

/* MODE (see mode_of): 0 plain, 1 block lists, 2 dropout (and perhaps block lists). Each is its
 * own instance, so registers for Philox state and list cursors do not crowd the accumulators of
 * the cases that need neither. MOD: the score modifiers (in the launchers, with MODE 2, which
 * tests for lists and dropout at run time). */
template <typename T, int D, bool ALIGNED, int MODE, bool MOD = false>
__global__ void __launch_bounds__(THREADS, 2) forward_kernel(const fa_cuda_params p)
{
    constexpr bool LISTS = MODE >= 1, DROP = MODE == 2;
    constexpr int LD = D + 8, MT = fwd_shape<D>::MT, BR = fwd_shape<D>::BR, SUB = BR / BLOCK, KN = fwd_shape<D>::KN;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T *qs = reinterpret_cast<T *>(smem_raw); /* [BR][LD], reused to stage O */
    T *ks = qs + BR * LD;                    /* [2][BLOCK][LD] */
    T *vs = ks + 2 * BLOCK * LD;             /* [2][BLOCK][LD] */

    const int64_t h = blockIdx.y, b = blockIdx.z;
    const fa_seq s = fa_sequence(p, b);
    const int64_t q0 = (int64_t)blockIdx.x * BR;
    if (q0 >= s.sq)
        return;
    const int64_t hk = h / p.group;
    const fa_mask m = fa_mask_make(s.sq, s.sk, p.causal, p.window_left, p.window_right);
    const int warp = threadIdx.x / 32;
    const int wrow = warp * 16 * MT;        /* the warp's first row in the tile */
    const int64_t wq0 = q0 + wrow;          /* ... in the sequence */
    key_walk<SUB, LISTS> walk = key_walk_of<SUB, LISTS>(p, m, h, q0, BR);
    const float cc = p.scale_log2 > 0.0f ? p.scale_log2 : 1.0f; /* see the softmax step */
    const score_mod sm = MOD ? score_mod_of(p, s, b, h) : score_mod{};
    /* fragment base addresses (bytes, shared space); everything else is an immediate offset */
    const uint32_t q_frag = smem_addr(qs) + 2u * (uint32_t)(lane_off_a(LD) + wrow * LD);
    const uint32_t k_frag = smem_addr(ks) + 2u * (uint32_t)lane_off_bt(LD);
    const uint32_t v_frag = smem_addr(vs) + 2u * (uint32_t)lane_off_a(LD);
    int64_t kt = s.sk > 0 ? walk.peek() : -1;

    /* no visible key tile: no loads at all, since the epilogue below stages O in the Q tile
     * without the loop's barrier (an in-flight Q copy would land on top of it) */
    if (kt >= 0) {
        load_tile<T, D, ALIGNED, BR>(qs, p.q, b, s.q_start + q0, s.sq - q0, h, (int)p.d);
        load_tile<T, D, ALIGNED>(ks, p.k, b, s.k_start + kt * BLOCK, s.sk - kt * BLOCK, hk, (int)p.d);
        load_tile<T, D, ALIGNED>(vs, p.v, b, s.k_start + kt * BLOCK, s.sk - kt * BLOCK, hk, (int)p.d);
    }
    cp_async_commit();

    float o[MT][D / 8][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int i = 0; i < D / 8; ++i)
            o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.0f;
    float row_m[MT][2], row_l[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
        row_m[mt][0] = row_m[mt][1] = -CUDART_INF_F, row_l[mt][0] = row_l[mt][1] = 0.0f;

    for (int buf = 0; kt >= 0; buf ^= 1) {
        const int64_t k0 = kt * BLOCK;
        walk.pop(kt);
        const int64_t kn = walk.peek();
        if (kn >= 0) {
            T *kd = ks + (buf ^ 1) * BLOCK * LD, *vd = vs + (buf ^ 1) * BLOCK * LD;
            load_tile<T, D, ALIGNED>(kd, p.k, b, s.k_start + kn * BLOCK, s.sk - kn * BLOCK, hk, (int)p.d);
            load_tile<T, D, ALIGNED>(vd, p.v, b, s.k_start + kn * BLOCK, s.sk - kn * BLOCK, hk, (int)p.d);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const fa_tile_class cls = LISTS ? rows_class(p, m, h, wq0, wq0 + 16 * MT, kt)
                                          : fa_mask_classify_tile(&m, wq0, wq0 + 16 * MT, k0, k0 + BLOCK);
        /* the 64-key tile in steps of KN keys (one online-softmax update each) */
#pragma unroll
        for (int kx = 0; kx < BLOCK; kx += KN) {
            if (cls == FA_TILE_EMPTY || k0 + kx >= s.sk)
                break;
            const uint32_t kb = k_frag + 2u * (uint32_t)(buf * BLOCK * LD + kx * LD),
                           vb = v_frag + 2u * (uint32_t)(buf * BLOCK * LD + kx * LD);
            const int64_t k0x = k0 + kx;
            float sacc[MT][KN / 8][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int i = 0; i < KN / 8; ++i)
                    sacc[mt][i][0] = sacc[mt][i][1] = sacc[mt][i][2] = sacc[mt][i][3] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < D; kk += 16) {
                uint32_t af[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
                    ldsm_x4(af[mt], q_frag + 2u * (uint32_t)(mt * 16 * LD + kk));
#pragma unroll
                for (int n = 0; n < KN; n += 16) {
                    uint32_t bf[4];
                    ldsm_x4(bf, kb + 2u * (uint32_t)(n * LD + kk));
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) {
                        elem<T>::mma(sacc[mt][n / 8], af[mt], bf[0], bf[1]);
                        elem<T>::mma(sacc[mt][n / 8 + 1], af[mt], bf[2], bf[3]);
                    }
                }
            }
            softmax_step<T, MT, KN, D / 8, 16, LISTS, DROP, MOD>(p, m, s, b, h, wq0, k0x, cls, cc, sacc, row_m, row_l, o,
                                                                 sm);
            uint32_t pf[MT][KN / 16][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
                acc_to_a<T, KN>(pf[mt], sacc[mt]);
#pragma unroll
            for (int kk = 0; kk < KN; kk += 16)
#pragma unroll
                for (int n = 0; n < D; n += 16) {
                    uint32_t bf[4];
                    ldsm_x4_t(bf, vb + 2u * (uint32_t)(kk * LD + n));
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) {
                        elem<T>::mma(o[mt][n / 8], pf[mt][kk / 16], bf[0], bf[1]);
                        elem<T>::mma(o[mt][n / 8 + 1], pf[mt][kk / 16], bf[2], bf[3]);
                    }
                }
        }
        kt = kn;
        __syncthreads();
    }

    /* epilogue: O / l staged through the Q tile (free after the last barrier) for 16-byte row
     * stores */
    stage_output<T, D, MT, 16>(qs, o, row_m, row_l, p, s, b, h, q0, wrow);
    __syncthreads();
    if (!p.out_f32)
        store_tile<T, D, ALIGNED, BR>(p.o, qs, b, s.q_start + q0, s.sq - q0, h, (int)p.d);
}

/* ------------------------------------------------------------------ backward: D = rowsum(dO * O) */

template <typename T> __global__ void dsum_kernel(const fa_cuda_params p)
{
    /* one warp per (row, head) of one sequence: grid (ceil(seqlen_q / 4), heads_q, batch) */
    const int64_t b = blockIdx.z, h = blockIdx.y, i = blockIdx.x * 4 + threadIdx.x / 32;
    const fa_seq s = fa_sequence(p, b);
    if (i >= s.sq)
        return;
    const T *o = row_ptr<T>(p.o, b, s.q_start + i, h), *dout = row_ptr<T>(p.dout, b, s.q_start + i, h);
    float acc = 0.0f;
    for (int c = threadIdx.x & 31; c < p.d; c += 32)
        acc += elem<T>::to_float(o[c]) * elem<T>::to_float(dout[c]);
    for (int off = 16; off > 0; off >>= 1)
        acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if ((threadIdx.x & 31) == 0) {
        int64_t canon = p.cu_q ? s.q_start + i : b * p.seqlen_q + i;
        const float l = static_cast<const float *>(p.lse.data)[b * p.lse.sb + h * p.lse.sh + (s.q_start + i) * p.lse.ss];
        /* a row that saw no key has D = 0 whatever dO holds (core/empty_row.h): the kernels set dP to
         * 0 on masked elements, so dS = P (dP - D) is then 0, not 0 * NaN */
        p.dsum[h * p.total_q + canon] = fa_row_absent(l) ? 0.0f : acc;
        if (p.lse2) /* LSE * log2(e) for the fused kernel; +inf for a fully masked row, so P = 0 */
            p.lse2[h * p.total_q + canon] = fa_row_absent(l) ? CUDART_INF_F : l * LOG2E;
    }
}

/* ------------------------------------------------------------------ backward: dK, dV */

/* One output element at element offset off: fp32 when the call asks for fp32 outputs
 * (p.out_f32, written unrounded), else converted to T. */
template <typename T> __device__ __forceinline__ void store_out(void *data, int64_t off, float v, int out_f32)
{
    if (out_f32)
        static_cast<float *>(data)[off] = v;
    else
        static_cast<T *>(data)[off] = elem<T>::from_float(v);
}

/* The end of every backward kernel that keeps dK and dV of its keys in registers (the mma / wgmma
 * accumulator layout: n8 block nt holds columns col0 + 8 nt + 2 t4 and + 1, elements 2 r and
 * 2 r + 1 of row r): the thread's two key rows j[0], j[1] of kv head hk converted and stored; rows
 * past the sequence and columns past d skipped. */
template <typename T, int D>
__device__ __forceinline__ void store_dkdv(const fa_cuda_params &p, const fa_seq &s, int64_t b, int64_t hk,
                                           const int64_t (&j)[2], int t4, const float (*dk)[4], const float (*dv)[4],
                                           int col0 = 0)
{
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        if (j[r] >= s.sk)
            continue;
        const int64_t ko = b * p.dk.sb + (s.k_start + j[r]) * p.dk.ss + hk * p.dk.sh;
        const int64_t vo = b * p.dv.sb + (s.k_start + j[r]) * p.dv.ss + hk * p.dv.sh;
#pragma unroll
        for (int nt = 0; nt < D / 8; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int c = col0 + nt * 8 + 2 * t4 + e;
                if (c < p.d) {
                    store_out<T>(p.dk.data, ko + c, dk[nt][2 * r + e], p.out_f32);
                    store_out<T>(p.dv.data, vo + c, dv[nt][2 * r + e], p.out_f32);
                }
            }
    }
}

/* The backward's rule for rows that saw no key (core/empty_row.h): their Q and dO enter the
 * products as 0, whatever they hold (0 * NaN in an MMA is NaN). lse2 holds the tile's LSE log2(e),
 * +inf for such a row. Every thread of the block calls this with the same tile once it and lse2
 * are visible; the rows are zeroed in place (row stride ld, d padded to D, NT threads), and the
 * return value says whether any was, in which case the caller synchronises before reading the
 * tiles. Called on edge tiles only: a row that sees no key makes its tile PARTIAL. */
template <typename T, int D, int ROWS, int NT>
__device__ __forceinline__ bool zero_absent_rows(T *q, T *dout, int ld, const float *lse2)
{
    bool any = false;
#pragma unroll 8
    for (int r = 0; r < ROWS; ++r)
        any |= lse2[r] == CUDART_INF_F;
    if (!any)
        return false;
    for (int e = threadIdx.x; e < ROWS * (D / 8); e += NT) {
        const int r = e / (D / 8), c = (e % (D / 8)) * 8;
        if (lse2[r] == CUDART_INF_F) {
            *reinterpret_cast<uint4 *>(q + r * ld + c) = make_uint4(0u, 0u, 0u, 0u);
            *reinterpret_cast<uint4 *>(dout + r * ld + c) = make_uint4(0u, 0u, 0u, 0u);
        }
    }
    return true;
}

/* dS from pr = P (times the softcap's derivative in the MOD instances), dP (dropout factor
 * applied) and D: a select where pr = 0, so that a masked element
 * whose dP is NaN (V = NaN there) gives 0 rather than 0 * NaN. The dK/dV kernel's form, where dP
 * is computed after P has been masked; the fused kernels instead set dP to 0 on the masked
 * elements of edge tiles (with D = 0 for rows that saw no key, dsum_kernel), which costs nothing
 * on FULL tiles. */
__device__ __forceinline__ float ds_of(float pr, float dpz, float d, float scale)
{
    return pr == 0.0f ? 0.0f : pr * (dpz - d) * scale;
}

/* One block per (key tile, kv head, batch); warps own 16 key rows; query tiles of BQ rows of every
 * query head of the group stream through shared memory. Everything is computed transposed:
 * S^T = K Q^T, dP^T = V dO^T, so P^T and dS^T are A fragments for dV += P^T dO, dK += dS^T Q.
 * MOD: the score modifiers, and dS times the softcap's derivative. */
template <typename T, int D, int BQ, bool ALIGNED, bool MOD = false>
__global__ void __launch_bounds__(THREADS) dkdv_kernel(const fa_cuda_params p)
{
    constexpr int LD = D + 8;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T *ks = reinterpret_cast<T *>(smem_raw);
    T *vs = ks + BLOCK * LD;
    T *qs = vs + BLOCK * LD;   /* [2][BLOCK * LD], the first BQ rows used */
    T *dos = qs + 2 * BLOCK * LD; /* [2][BLOCK * LD] */
    float *lse_s = reinterpret_cast<float *>(dos + 2 * BLOCK * LD); /* [2][BQ], times log2(e) */
    float *dsum_s = lse_s + 2 * BQ;                                  /* [2][BQ] */

    const int64_t kt = blockIdx.x, hk = blockIdx.y, b = blockIdx.z;
    const fa_seq s = fa_sequence(p, b);
    const int64_t k0 = kt * BLOCK;
    if (k0 >= s.sk)
        return;
    const fa_mask m = fa_mask_make(s.sq, s.sk, p.causal, p.window_left, p.window_right);
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
    const int64_t my_key[2] = {k0 + warp * 16 + g, k0 + warp * 16 + g + 8};
    const int64_t nqt = (s.sq + BQ - 1) / BQ, niter = p.group * nqt;
    score_mod sm = MOD ? score_mod_of(p, s, b, hk * p.group) : score_mod{};

    float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e)
            dk[i][e] = dv[i][e] = 0.0f;

    /* the (head, query tile) iterations that are not EMPTY for this key tile */
    auto next_iter = [&](int64_t it) -> int64_t {
        for (; it < niter; ++it) {
            int64_t h = hk * p.group + it / nqt, q0 = (it % nqt) * BQ;
            if (tile_class(p, m, h, q0 / BLOCK, kt) != FA_TILE_EMPTY &&
                fa_mask_classify_tile(&m, q0, q0 + BQ, k0, k0 + BLOCK) != FA_TILE_EMPTY)
                return it;
        }
        return niter;
    };
    auto load_q_side = [&](int64_t it, int buf) {
        int64_t h = hk * p.group + it / nqt, q0 = (it % nqt) * BQ;
        load_tile<T, D, ALIGNED>(qs + buf * BLOCK * LD, p.q, b, s.q_start + q0, imin(s.sq - q0, BQ), h, (int)p.d);
        load_tile<T, D, ALIGNED>(dos + buf * BLOCK * LD, p.dout, b, s.q_start + q0, imin(s.sq - q0, BQ), h,
                                 (int)p.d);
        for (int r = threadIdx.x; r < BQ; r += THREADS) {
            int64_t i = q0 + r;
            float l = -CUDART_INF_F, dd = 0.0f;
            if (i < s.sq) {
                l = static_cast<const float *>(p.lse.data)[b * p.lse.sb + h * p.lse.sh + (s.q_start + i) * p.lse.ss];
                dd = p.dsum[h * p.total_q + (p.cu_q ? s.q_start + i : b * p.seqlen_q + i)];
            }
            lse_s[buf * BQ + r] = l == -CUDART_INF_F ? CUDART_INF_F : l * LOG2E; /* +inf: fully masked row, P = 0 */
            dsum_s[buf * BQ + r] = dd;
        }
    };

    load_tile<T, D, ALIGNED>(ks, p.k, b, s.k_start + k0, s.sk - k0, hk, (int)p.d);
    load_tile<T, D, ALIGNED>(vs, p.v, b, s.k_start + k0, s.sk - k0, hk, (int)p.d);
    int64_t it = next_iter(0);
    if (it < niter)
        load_q_side(it, 0);
    cp_async_commit();

    for (int n = 0; it < niter; ++n) {
        const int buf = n & 1;
        const int64_t h = hk * p.group + it / nqt, q0 = (it % nqt) * BQ;
        /* this step's tiles landed and every warp is done with the previous step: its buffers
         * (Q, dO, LSE, D of buf ^ 1) are free for the prefetch */
        cp_async_wait<0>();
        __syncthreads();
        const int64_t it_next = next_iter(it + 1);
        if (it_next < niter) {
            load_q_side(it_next, buf ^ 1);
            cp_async_commit();
        }
        T *q = qs + buf * BLOCK * LD, *dout = dos + buf * BLOCK * LD;
        const float *lse2 = lse_s + buf * BQ, *dd = dsum_s + buf * BQ;
        const fa_tile_class cls =
            fa_tile_class_meet(tile_class(p, m, h, q0 / BLOCK, kt), fa_mask_classify_tile(&m, q0, q0 + BQ, k0, k0 + BLOCK));
        const bool edge = cls != FA_TILE_FULL || k0 + BLOCK > s.sk || q0 + BQ > s.sq;
        const bool check_blocks = p.bm_bits && cls != FA_TILE_FULL;
        if (edge && zero_absent_rows<T, D, BQ, THREADS>(q, dout, LD, lse2)) /* uniform */
            __syncthreads();

        /* P^T = exp2(S^T * scale log2 e - LSE log2 e) */
        float pt[BQ / 8][4];
#pragma unroll
        for (int i = 0; i < BQ / 8; ++i)
            pt[i][0] = pt[i][1] = pt[i][2] = pt[i][3] = 0.0f;
        gemm_nt<T, BQ, D>(pt, ks, LD, warp * 16, q, LD);
        float z[BQ / 8][4]; /* dropout factors */
        float grad[MOD ? BQ / 8 : 1][4]; /* MOD: the softcap's derivative (1 on masked elements) */
        if constexpr (MOD) {
            sm.slope = alibi_slope(p, b, h);
            softcap_all<BQ / 8>(sm, pt);
        }
#pragma unroll
        for (int nt = 0; nt < BQ / 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int col = nt * 8 + 2 * t4 + (e & 1);
                const int64_t i = q0 + col, j = my_key[e >> 1];
                float sx = pt[nt][e];
                if constexpr (MOD)
                    sx = modified_score(sm, sx, i, j, grad[nt][e]);
                float x = exp2f(sx * p.scale_log2 - lse2[col]);
                if (edge && !visible(p, m, h, i, j, check_blocks)) {
                    x = 0.0f;
                    if constexpr (MOD)
                        grad[nt][e] = 1.0f;
                }
                pt[nt][e] = x;
                z[nt][e] = p.dropout_threshold ? dropout_factor(p, b, h, i, j) : 1.0f;
            }
        {
            float pz[BQ / 8][4];
#pragma unroll
            for (int nt = 0; nt < BQ / 8; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    pz[nt][e] = pt[nt][e] * z[nt][e];
            uint32_t pf[BQ / 16][4];
            acc_to_a<T, BQ>(pf, pz);
            if constexpr (MOD) { /* P is in pf now; dS below needs only P times the derivative */
#pragma unroll
                for (int nt = 0; nt < BQ / 8; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        pt[nt][e] *= grad[nt][e];
            }
            gemm_pn<T, D, BQ>(dv, pf, dout, LD);
        }
        /* dP^T = V dO^T, dS^T = P^T (Z dP^T - D) scale */
        float dpt[BQ / 8][4];
#pragma unroll
        for (int i = 0; i < BQ / 8; ++i)
            dpt[i][0] = dpt[i][1] = dpt[i][2] = dpt[i][3] = 0.0f;
        gemm_nt<T, BQ, D>(dpt, vs, LD, warp * 16, dout, LD);
#pragma unroll
        for (int nt = 0; nt < BQ / 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int col = nt * 8 + 2 * t4 + (e & 1);
                dpt[nt][e] = ds_of(pt[nt][e], dpt[nt][e] * z[nt][e], dd[col], p.scale);
            }
        uint32_t df[BQ / 16][4];
        acc_to_a<T, BQ>(df, dpt);
        gemm_pn<T, D, BQ>(dk, df, q, LD);
        __syncthreads();
        it = it_next;
    }

    store_dkdv<T, D>(p, s, b, hk, my_key, t4, dk, dv);
}

/* ------------------------------------------------------------------ backward: dQ */

/* One block per (query tile, head, batch), warps own 16 query rows, key tiles stream through
 * shared memory: S = Q K^T, P = exp(S - LSE), dP = Z (dO V^T), dS = P (dP - D), dQ += dS K.
 * MOD: the score modifiers, and dS times the softcap's derivative. */
template <typename T, int D, bool ALIGNED, bool MOD = false>
__global__ void __launch_bounds__(THREADS) dq_kernel(const fa_cuda_params p)
{
    constexpr int LD = D + 8;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T *qs = reinterpret_cast<T *>(smem_raw);
    T *dos = qs + BLOCK * LD;
    T *ks = dos + BLOCK * LD; /* [2] */
    T *vs = ks + 2 * BLOCK * LD; /* [2] */

    const int64_t qt = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const fa_seq s = fa_sequence(p, b);
    const int64_t q0 = qt * BLOCK;
    if (q0 >= s.sq)
        return;
    const int64_t hk = h / p.group;
    const fa_mask m = fa_mask_make(s.sq, s.sk, p.causal, p.window_left, p.window_right);
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
    const key_tiles tiles = key_tiles_of(p, m, h, qt);
    const int64_t ntiles = s.sk > 0 ? tiles.count() : 0;
    const int64_t my_row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
    const score_mod sm = MOD ? score_mod_of(p, s, b, h) : score_mod{};
    float lse2[2], dd[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        lse2[r] = CUDART_INF_F;
        dd[r] = 0.0f;
        if (my_row[r] < s.sq) {
            float l = static_cast<const float *>(p.lse.data)[b * p.lse.sb + h * p.lse.sh + (s.q_start + my_row[r]) * p.lse.ss];
            lse2[r] = l == -CUDART_INF_F ? CUDART_INF_F : l * LOG2E;
            dd[r] = p.dsum[h * p.total_q + (p.cu_q ? s.q_start + my_row[r] : b * p.seqlen_q + my_row[r])];
        }
    }

    load_tile<T, D, ALIGNED>(qs, p.q, b, s.q_start + q0, s.sq - q0, h, (int)p.d);
    load_tile<T, D, ALIGNED>(dos, p.dout, b, s.q_start + q0, s.sq - q0, h, (int)p.d);
    if (ntiles > 0) {
        int64_t k0 = tiles.tile(0) * BLOCK;
        load_tile<T, D, ALIGNED>(ks, p.k, b, s.k_start + k0, s.sk - k0, hk, (int)p.d);
        load_tile<T, D, ALIGNED>(vs, p.v, b, s.k_start + k0, s.sk - k0, hk, (int)p.d);
    }
    cp_async_commit();

    float dq[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; ++i)
        dq[i][0] = dq[i][1] = dq[i][2] = dq[i][3] = 0.0f;

    for (int64_t n = 0; n < ntiles; ++n) {
        const int buf = n & 1;
        const int64_t kt = tiles.tile(n), k0 = kt * BLOCK;
        if (n + 1 < ntiles) {
            int64_t k1 = tiles.tile(n + 1) * BLOCK;
            load_tile<T, D, ALIGNED>(ks + (buf ^ 1) * BLOCK * LD, p.k, b, s.k_start + k1, s.sk - k1, hk, (int)p.d);
            load_tile<T, D, ALIGNED>(vs + (buf ^ 1) * BLOCK * LD, p.v, b, s.k_start + k1, s.sk - k1, hk, (int)p.d);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const fa_tile_class cls = tile_class(p, m, h, qt, kt);
        if (cls != FA_TILE_EMPTY) {
            const T *k = ks + buf * BLOCK * LD, *v = vs + buf * BLOCK * LD;
            float pm[BLOCK / 8][4], dp[BLOCK / 8][4];
#pragma unroll
            for (int i = 0; i < BLOCK / 8; ++i)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    pm[i][e] = dp[i][e] = 0.0f;
            gemm_nt<T, BLOCK, D>(pm, qs, LD, warp * 16, k, LD);
            gemm_nt<T, BLOCK, D>(dp, dos, LD, warp * 16, v, LD);
            const bool edge = cls != FA_TILE_FULL || k0 + BLOCK > s.sk;
            const bool check_blocks = p.bm_bits && cls != FA_TILE_FULL;
            if constexpr (MOD)
                softcap_all<BLOCK / 8>(sm, pm);
#pragma unroll
            for (int nt = 0; nt < BLOCK / 8; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int64_t i = my_row[e >> 1], j = k0 + nt * 8 + 2 * t4 + (e & 1);
                    float sx = pm[nt][e], grad = 1.0f;
                    if constexpr (MOD)
                        sx = modified_score(sm, sx, i, j, grad);
                    float x = exp2f(sx * p.scale_log2 - lse2[e >> 1]);
                    if (edge && !visible(p, m, h, i, j, check_blocks)) {
                        x = 0.0f;
                        dp[nt][e] = 0.0f; /* dS = 0 (0 - D) = 0 even where V is NaN */
                        grad = 1.0f;
                    }
                    float zf = p.dropout_threshold ? dropout_factor(p, b, h, i, j) : 1.0f;
                    dp[nt][e] = x * (dp[nt][e] * zf - dd[e >> 1]) * p.scale;
                    if constexpr (MOD)
                        dp[nt][e] *= grad;
                }
            uint32_t df[BLOCK / 16][4];
            acc_to_a<T, BLOCK>(df, dp);
            gemm_pn<T, D, BLOCK>(dq, df, k, LD);
        }
        __syncthreads();
    }

#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int64_t i = my_row[r];
        if (i >= s.sq)
            continue;
        const int64_t off = b * p.dq.sb + (s.q_start + i) * p.dq.ss + h * p.dq.sh;
        const float keep = lse2[r] == CUDART_INF_F ? 0.0f : 1.0f; /* a row that saw no key: dQ = 0 */
#pragma unroll
        for (int nt = 0; nt < D / 8; ++nt) {
            int c = nt * 8 + 2 * t4;
            for (int e = 0; e < 2; ++e)
                if (c + e < p.d)
                    store_out<T>(p.dq.data, off + c + e, fa_row_output(dq[nt][2 * r + e], keep), p.out_f32);
        }
    }
}

/* ------------------------------------------------------------------ backward: one fused kernel */

/* FlashAttention-2's backward: one block of eight warps per (128-key tile, kv head, batch), each
 * warp owning 16 keys; query tiles of BQ rows of every query head of the group stream through
 * shared memory. Per query tile: S^T = K Q^T and dP^T = V dO^T (in one k loop), P^T,
 * dV += P^T dO, dS^T (as in dkdv_kernel), then dS goes through shared memory and the block
 * computes dQ += dS K, added with fp32 reductions into dq_accum [heads_q][total_q][D] (the order of the
 * additions varies, so dQ is not bitwise reproducible; the deterministic option uses the
 * two-kernel path), and last dK += dS^T Q, whose MMAs overlap the draining reductions. Five
 * products per tile instead of seven. */
template <int D> struct bwd_shape {
    static constexpr int NW = 8, NT = NW * 32, BN = NW * 16;
    /* output columns per pass: d > 128 runs PASSES blocks per key tile, each computing S and dP
     * over all D columns and dK, dV, dQ for its DV of them (tiles.h) */
    static constexpr int DV = D > 128 ? D / 2 : D, PASSES = D / DV;
    /* query rows per step (tiles.h). BQ / 16 m tiles times NW / (BQ / 16) column groups of
     * DV / (NW / (BQ / 16)) columns (a multiple of 16) cover the pass's dQ tile. */
    static constexpr int BQ = tile_of(D).bwd_rows;
    static_assert(BQ == 32 || BQ == 64, "tiles.h: no fused backward tile for this head dim");
    static constexpr int MTQ = BQ / 16, CG = NW / MTQ, DC = DV / CG;
    static_assert(DC % 16 == 0, "dQ column groups must be whole n16 steps");
    static constexpr int LDS = BQ + 8, LD = D + 8;
    /* dynamic shared memory (16-bit elements): K, V [BN][LD], Q, dO [2][BQ][LD], dS^T [BN][LDS],
     * then LSE and D of two query tiles in fp32 */
    static constexpr size_t SMEM = 2 * (2 * BN * LD + 4 * BQ * LD + BN * LDS) + sizeof(float) * 4 * BQ;
};

/* MODE as in the forward; MOD: the score modifiers, and dS times the softcap's derivative (then
 * computed with P, since dP^T is already there, so that the derivative needs no registers). */
template <typename T, int D, bool ALIGNED, int MODE, bool MOD = false>
__global__ void __launch_bounds__(bwd_shape<D>::NT, 1) bwd_kernel(const fa_cuda_params p)
{
    constexpr bool LISTS = MODE >= 1, DROP = MODE == 2;
    using S = bwd_shape<D>;
    constexpr int LD = D + 8, BN = S::BN, BQ = S::BQ, NT = S::NT, LDS = S::LDS, DV = S::DV;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T *ks = reinterpret_cast<T *>(smem_raw); /* [BN][LD] */
    T *vs = ks + BN * LD;                    /* [BN][LD] */
    T *qs = vs + BN * LD;                    /* [2][BQ][LD] */
    T *dos = qs + 2 * BQ * LD;               /* [2][BQ][LD] */
    T *dss = dos + 2 * BQ * LD;              /* [BN][LDS]: dS^T of the current step */
    float *lse_s = reinterpret_cast<float *>(dss + BN * LDS); /* [2][BQ], times log2(e) */
    float *dsum_s = lse_s + 2 * BQ;                           /* [2][BQ] */

    const int64_t kblk = blockIdx.x / S::PASSES, hk = blockIdx.y, b = blockIdx.z;
    const int col0 = (int)(blockIdx.x % S::PASSES) * DV; /* this pass's output columns [col0, col0 + DV) */
    const fa_seq s = fa_sequence(p, b);
    const int64_t k0 = kblk * BN;
    if (k0 >= s.sk)
        return;
    const fa_mask m = fa_mask_make(s.sq, s.sk, p.causal, p.window_left, p.window_right);
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
    const int64_t wk0 = k0 + warp * 16; /* the warp's first key */
    const int64_t nqt = (s.sq + BQ - 1) / BQ, niter = p.group * nqt;
    score_mod sm = MOD ? score_mod_of(p, s, b, hk * p.group) : score_mod{};

    float dk[DV / 8][4], dv[DV / 8][4];
#pragma unroll
    for (int i = 0; i < DV / 8; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e)
            dk[i][e] = dv[i][e] = 0.0f;

    /* the class of query rows [q0, q0 + rows) against keys [j0, j0 + 16 * n) (inside one 64-key tile
     * of the block lists when n == 1) */
    auto keys_class = [&](int64_t h, int64_t q0, int64_t j0, int64_t j1) -> fa_tile_class {
        fa_tile_class c = fa_mask_classify_tile(&m, q0, q0 + BQ, j0, j1);
        if (!LISTS || c == FA_TILE_EMPTY || !p.bl_row_ptr)
            return c;
        fa_tile_class best = FA_TILE_EMPTY;
        for (int64_t t = j0 / BLOCK; t * BLOCK < j1; ++t) {
            fa_tile_class u = tile_class(p, m, h, q0 / BLOCK, t);
            best = best == FA_TILE_EMPTY ? u : (u == FA_TILE_EMPTY ? best : fa_tile_class_meet(best, u));
        }
        return fa_tile_class_meet(c, best);
    };
    auto next_iter = [&](int64_t it) -> int64_t {
        for (; it < niter; ++it) {
            int64_t h = hk * p.group + it / nqt, q0 = (it % nqt) * BQ;
            if (keys_class(h, q0, k0, k0 + BN) != FA_TILE_EMPTY)
                return it;
        }
        return niter;
    };
    auto load_q_side = [&](int64_t it, int buf) {
        int64_t h = hk * p.group + it / nqt, q0 = (it % nqt) * BQ;
        load_tile<T, D, ALIGNED, BQ, NT>(qs + buf * BQ * LD, p.q, b, s.q_start + q0, imin(s.sq - q0, BQ), h, (int)p.d);
        load_tile<T, D, ALIGNED, BQ, NT>(dos + buf * BQ * LD, p.dout, b, s.q_start + q0, imin(s.sq - q0, BQ), h,
                                         (int)p.d);
        /* LSE log2(e) and D of the rows, asynchronously like the tiles; rows past the end get
         * zeros (their P is masked) */
        if (threadIdx.x < 2 * BQ) {
            const int r = threadIdx.x % BQ;
            const int64_t i = q0 + r;
            const float *src = (threadIdx.x < BQ ? p.lse2 : p.dsum) + h * p.total_q +
                               (p.cu_q ? s.q_start + i : b * p.seqlen_q + i);
            float *dst = (threadIdx.x < BQ ? lse_s : dsum_s) + buf * BQ + r;
            cp_async4(dst, i < s.sq ? src : p.dsum, i < s.sq);
        }
    };

    load_tile<T, D, ALIGNED, BN, NT>(ks, p.k, b, s.k_start + k0, s.sk - k0, hk, (int)p.d);
    load_tile<T, D, ALIGNED, BN, NT>(vs, p.v, b, s.k_start + k0, s.sk - k0, hk, (int)p.d);
    int64_t it = next_iter(0);
    if (it < niter)
        load_q_side(it, 0);
    cp_async_commit();

    /* dQ step: warp -> (m tile, column group); its A fragments (dS, 16 queries x 16 keys) come
     * transposed out of the key-major dS^T tile */
    const int dq_mt = warp % S::MTQ, dq_c0 = col0 + (warp / S::MTQ) * S::DC;
    const uint32_t dss_frag = smem_addr(dss) + 2u * (uint32_t)(lane_off_bt(LDS) + dq_mt * 16);
    const uint32_t k_a = smem_addr(ks) + 2u * (uint32_t)(lane_off_a(LD) + warp * 16 * LD);
    const uint32_t v_a = smem_addr(vs) + 2u * (uint32_t)(lane_off_a(LD) + warp * 16 * LD);
    const uint32_t k_nn = smem_addr(ks) + 2u * (uint32_t)(lane_off_a(LD) + dq_c0);
    const uint32_t q_a0 = smem_addr(qs) + 2u * (uint32_t)lane_off_a(LD), q_bt0 = smem_addr(qs) + 2u * (uint32_t)lane_off_bt(LD);
    const uint32_t do_a0 = smem_addr(dos) + 2u * (uint32_t)lane_off_a(LD),
                   do_bt0 = smem_addr(dos) + 2u * (uint32_t)lane_off_bt(LD);

    for (int n = 0; it < niter; ++n) {
        const int buf = n & 1;
        const int64_t h = hk * p.group + it / nqt, q0 = (it % nqt) * BQ;
        /* this step's tiles landed and every warp is done with the previous step: its buffers
         * (Q, dO, LSE, D of buf ^ 1, and dS^T) are free for the prefetch and the dS^T stores */
        cp_async_wait<0>();
        __syncthreads();
        const int64_t it_next = next_iter(it + 1);
        if (it_next < niter) {
            load_q_side(it_next, buf ^ 1);
            cp_async_commit();
        }
        /* rows that saw no key (a tile with one is not FULL for the block's keys): Q, dO zeroed */
        if ((keys_class(h, q0, k0, k0 + BN) != FA_TILE_FULL || q0 + BQ > s.sq) &&
            zero_absent_rows<T, D, BQ, NT>(qs + buf * BQ * LD, dos + buf * BQ * LD, LD, lse_s + buf * BQ)) /* uniform */
            __syncthreads();
        /* fragment bases of this step's Q and dO tiles (A: lane_off_a, transposed-B: lane_off_bt) */
        const uint32_t q_a = q_a0 + 2u * (uint32_t)(buf * BQ * LD), q_bt = q_bt0 + 2u * (uint32_t)(buf * BQ * LD);
        const uint32_t do_a = do_a0 + 2u * (uint32_t)(buf * BQ * LD), do_bt = do_bt0 + 2u * (uint32_t)(buf * BQ * LD);
        const float *lse2 = lse_s + buf * BQ, *dd = dsum_s + buf * BQ;
        const fa_tile_class cls = keys_class(h, q0, wk0, wk0 + 16);
        uint32_t df[BQ / 16][4]; /* dS^T as A fragments, for dK after the dQ product */
        if (cls != FA_TILE_EMPTY) {
            const bool edge = cls != FA_TILE_FULL || wk0 + 16 > s.sk || q0 + BQ > s.sq;
            const bool check_blocks = LISTS && p.bm_bits && cls != FA_TILE_FULL;
            const bool drop = DROP && p.dropout_threshold;
            /* P^T = exp2(S^T * scale log2 e - LSE log2 e) */
            /* and dP^T = V dO^T in the same k loop: the two products are independent */
            float pt[BQ / 8][4], dpt[BQ / 8][4];
#pragma unroll
            for (int i = 0; i < BQ / 8; ++i)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    pt[i][e] = dpt[i][e] = 0.0f;
            gemm_nt2_s<T, BQ, D, LD, LD>(pt, k_a, q_bt, dpt, v_a, do_bt);
            if constexpr (MOD) {
                sm.slope = alibi_slope(p, b, h);
                softcap_all<BQ / 8>(sm, pt);
            }
#pragma unroll
            for (int nt = 0; nt < BQ / 8; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int col = nt * 8 + 2 * t4 + (e & 1);
                    float sx = pt[nt][e], grad = 1.0f;
                    if constexpr (MOD)
                        sx = modified_score(sm, sx, q0 + col, wk0 + g + (e >> 1) * 8, grad);
                    float x = fast_exp2(sx * p.scale_log2 - lse2[col]);
                    if (edge && !visible(p, m, h, q0 + col, wk0 + g + (e >> 1) * 8, check_blocks)) {
                        x = 0.0f;
                        dpt[nt][e] = 0.0f; /* dS = 0 (0 - D) = 0 below even where V is NaN */
                        grad = 1.0f;
                    }
                    pt[nt][e] = x;
                    if constexpr (MOD) { /* dS^T = P^T (Z dP^T - D) scale, times the derivative */
                        const float z = drop ? dropout_factor(p, b, h, q0 + col, wk0 + g + (e >> 1) * 8) : 1.0f;
                        dpt[nt][e] = x * (dpt[nt][e] * z - dd[col]) * p.scale * grad;
                    }
                }
            {
                uint32_t pf[BQ / 16][4];
                if (drop) { /* the factors are recomputed for dS below rather than kept: their 32
                               registers are the accumulators' (dropout calls only) */
                    float pz[BQ / 8][4];
#pragma unroll
                    for (int nt = 0; nt < BQ / 8; ++nt)
#pragma unroll
                        for (int e = 0; e < 4; ++e)
                            pz[nt][e] = pt[nt][e] * dropout_factor(p, b, h, q0 + nt * 8 + 2 * t4 + (e & 1),
                                                                   wk0 + g + (e >> 1) * 8);
                    acc_to_a<T, BQ>(pf, pz);
                } else {
                    acc_to_a<T, BQ>(pf, pt);
                }
                gemm_pn_s<T, DV, BQ, LD>(dv, pf, do_a + 2u * (uint32_t)col0);
            }
            /* dS^T = P^T (Z dP^T - D) scale (MOD: computed above) */
            if constexpr (!MOD) {
#pragma unroll
                for (int nt = 0; nt < BQ / 8; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int col = nt * 8 + 2 * t4 + (e & 1);
                        float z = drop ? dropout_factor(p, b, h, q0 + col, wk0 + g + (e >> 1) * 8) : 1.0f;
                        dpt[nt][e] = pt[nt][e] * (dpt[nt][e] * z - dd[col]) * p.scale;
                    }
            }
            acc_to_a<T, BQ>(df, dpt);
            /* dS^T (key-major, query pairs in one word) for the dQ product */
#pragma unroll
            for (int nt = 0; nt < BQ / 8; ++nt)
#pragma unroll
                for (int r = 0; r < 2; ++r)
                    *reinterpret_cast<uint32_t *>(dss + (warp * 16 + g + r * 8) * LDS + nt * 8 + 2 * t4) =
                        df[nt / 2][(nt & 1) * 2 + r];
        } else {
#pragma unroll
            for (int nt = 0; nt < BQ / 8; ++nt)
#pragma unroll
                for (int r = 0; r < 2; ++r)
                    *reinterpret_cast<uint32_t *>(dss + (warp * 16 + g + r * 8) * LDS + nt * 8 + 2 * t4) = 0u;
        }
        __syncthreads();
        /* dQ[q0 .. q0 + BQ) += dS K over the block's BN keys; this warp: 16 rows x DC columns */
        {
            float acc[S::DC / 8][4];
#pragma unroll
            for (int i = 0; i < S::DC / 8; ++i)
                acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < BN; kk += 16) {
                uint32_t af[4];
                ldsm_x4_t(af, dss_frag + 2u * (uint32_t)(kk * LDS));
#pragma unroll
                for (int c = 0; c < S::DC; c += 16) {
                    uint32_t bf[4];
                    ldsm_x4_t(bf, k_nn + 2u * (uint32_t)(kk * LD + c));
                    elem<T>::mma(acc[c / 8], af, bf[0], bf[1]);
                    elem<T>::mma(acc[c / 8 + 1], af, bf[2], bf[3]);
                }
            }
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int64_t i = q0 + dq_mt * 16 + g + r * 8;
                if (i < s.sq) {
                    float *row = p.dq_accum + (h * p.total_q + (p.cu_q ? s.q_start + i : b * p.seqlen_q + i)) * D + dq_c0;
#pragma unroll
                    for (int nt = 0; nt < S::DC / 8; ++nt)
                        red_add2(row + nt * 8 + 2 * t4, acc[nt][2 * r], acc[nt][2 * r + 1]);
                }
            }
        }
        /* dK += dS^T Q after dQ (FlashAttention-2's order), so these MMAs overlap the draining
         * reductions */
        if (cls != FA_TILE_EMPTY)
            gemm_pn_s<T, DV, BQ, LD>(dk, df, q_a + 2u * (uint32_t)col0);
        it = it_next;
    }

    const int64_t rows[2] = {wk0 + g, wk0 + g + 8};
    store_dkdv<T, DV>(p, s, b, hk, rows, t4, dk, dv, col0);
}

/* dQ (T, or fp32 for p.out_f32) from the fp32 accumulator: one thread per element of one sequence's rows. */
template <typename T, int D, int DV = D> __global__ void dq_convert_kernel(const fa_cuda_params p)
{
    /* DV < D: the accumulator is [D / DV][heads_q][total_q][DV] (column blocks of DV, sm90 d 256) */
    const int64_t b = blockIdx.z, h = blockIdx.y;
    const fa_seq s = fa_sequence(p, b);
    const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, i = e / D;
    const int c = (int)(e % D);
    if (i >= s.sq || c >= p.d)
        return;
    const int64_t hp = (int64_t)(c / DV) * p.heads_q + h;
    const float v = p.dq_accum[(hp * p.total_q + (p.cu_q ? s.q_start + i : b * p.seqlen_q + i)) * DV + c % DV];
    /* a row that saw no key: dQ = 0 (its dS is 0, but 0 times a NaN in K reached the accumulator) */
    const float l = static_cast<const float *>(p.lse.data)[b * p.lse.sb + h * p.lse.sh + (s.q_start + i) * p.lse.ss];
    store_out<T>(p.dq.data, b * p.dq.sb + (s.q_start + i) * p.dq.ss + h * p.dq.sh + c,
                 fa_row_output(v, fa_row_absent(l) ? 0.0f : 1.0f), p.out_f32);
}

/* ------------------------------------------------------------------ launchers */

/* The kernel instance a call needs: 0 neither dropout nor a block mask, 1 a block mask only,
 * 2 dropout (with or without a block mask). A call with a score modifier (has_score_mod) takes
 * the MOD instance of mode 2, whose tests for block lists and dropout are made at run time: one
 * more instance per kernel, for 16-byte aligned rows only (the chooser sends the others to the
 * portable kernels). */
__host__ __forceinline__ int mode_of(const fa_cuda_params &p)
{
    return p.dropout_threshold ? 2 : p.bm_bits ? 1 : 0;
}

template <typename T, int D, bool ALIGNED> cudaError_t launch_forward(const fa_cuda_params &p, cudaStream_t st)
{
    constexpr int LD = D + 8, BR = fwd_shape<D>::BR;
    const size_t smem = sizeof(T) * (BR + 4 * BLOCK) * LD;
    const int mode = mode_of(p);
    auto kernel = mode == 2 ? forward_kernel<T, D, ALIGNED, 2>
                            : mode == 1 ? forward_kernel<T, D, ALIGNED, 1> : forward_kernel<T, D, ALIGNED, 0>;
    if (has_score_mod(p)) {
        if constexpr (ALIGNED)
            kernel = forward_kernel<T, D, true, 2, true>;
        else
            return cudaErrorNotSupported;
    }
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess)
        return e;
    dim3 grid((unsigned)((p.seqlen_q + BR - 1) / BR), (unsigned)p.heads_q, (unsigned)p.batch);
    kernel<<<grid, THREADS, smem, st>>>(p);
    return cudaGetLastError();
}

template <typename T, int D, bool ALIGNED, int MODE, bool MOD = false>
cudaError_t launch_fused_backward(const fa_cuda_params &p, cudaStream_t st)
{
    using S = bwd_shape<D>;
    static_assert(sizeof(T) == 2, "bwd_shape::SMEM counts 16-bit elements");
    const size_t smem = S::SMEM;
    auto k = bwd_kernel<T, D, ALIGNED, MODE, MOD>;
    cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess)
        return e;
    if (p.dq_accum &&
        (e = cudaMemsetAsync(p.dq_accum, 0, sizeof(float) * (size_t)(p.heads_q * p.total_q * D), st)) != cudaSuccess)
        return e;
    if (p.seqlen_k > 0) {
        dim3 g1((unsigned)((p.seqlen_k + S::BN - 1) / S::BN * S::PASSES), (unsigned)p.heads_kv, (unsigned)p.batch);
        k<<<g1, S::NT, smem, st>>>(p);
        if ((e = cudaGetLastError()) != cudaSuccess)
            return e;
    }
    if (p.seqlen_q == 0)
        return cudaSuccess;
    dim3 g2((unsigned)((p.seqlen_q * D + 255) / 256), (unsigned)p.heads_q, (unsigned)p.batch);
    dq_convert_kernel<T, D><<<g2, 256, 0, st>>>(p);
    return cudaGetLastError();
}

/* The deterministic two-kernel backward (dK / dV, then dQ), d <= 128; D already computed. */
template <typename T, int D, bool ALIGNED> cudaError_t launch_deterministic_backward(const fa_cuda_params &p, cudaStream_t st)
{
    constexpr int LD = D + 8;
    constexpr int BQ = D > 64 ? 32 : 64;
    const size_t smem1 = sizeof(T) * 6 * BLOCK * LD + sizeof(float) * 4 * BQ;
    auto k1 = dkdv_kernel<T, D, BQ, ALIGNED>;
    auto k2 = dq_kernel<T, D, ALIGNED>;
    if constexpr (ALIGNED) { /* launch_backward refuses a modifier on unaligned rows */
        if (has_score_mod(p)) {
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
    const size_t smem2 = sizeof(T) * 6 * BLOCK * LD;
    if ((e = cudaFuncSetAttribute(k2, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem2)) != cudaSuccess)
        return e;
    if (p.seqlen_q > 0) {
        dim3 g2((unsigned)((p.seqlen_q + BLOCK - 1) / BLOCK), (unsigned)p.heads_q, (unsigned)p.batch);
        k2<<<g2, THREADS, smem2, st>>>(p);
        e = cudaGetLastError();
    }
    return e;
}

template <typename T, int D, bool ALIGNED> cudaError_t launch_backward(const fa_cuda_params &p, cudaStream_t st)
{
    if (!ALIGNED && has_score_mod(p)) /* no MOD instance (mode_of) */
        return cudaErrorNotSupported;
    if (p.seqlen_q > 0) {
        dim3 g0((unsigned)((p.seqlen_q + 3) / 4), (unsigned)p.heads_q, (unsigned)p.batch);
        dsum_kernel<T><<<g0, THREADS, 0, st>>>(p);
        cudaError_t e0 = cudaGetLastError();
        if (e0 != cudaSuccess)
            return e0;
    }
    /* d > 128 has the fused kernel only (no deterministic kernels; the chooser takes the portable
     * ones for that option); with no queries it writes dK = dV = 0 */
    const bool fused = D > 128 ? (p.dq_accum || p.seqlen_q == 0) : (p.dq_accum && p.seqlen_q > 0);
    if (fused && has_score_mod(p)) /* ALIGNED here (refused above otherwise) */
        return launch_fused_backward<T, D, ALIGNED, 2, ALIGNED>(p, st);
    if (fused)
        return mode_of(p) == 2   ? launch_fused_backward<T, D, ALIGNED, 2>(p, st)
               : mode_of(p) == 1 ? launch_fused_backward<T, D, ALIGNED, 1>(p, st)
                                 : launch_fused_backward<T, D, ALIGNED, 0>(p, st);
    if constexpr (D > 128)
        return cudaErrorNotSupported;
    else
        return launch_deterministic_backward<T, D, ALIGNED>(p, st);
}

} // namespace fa_sm80

#endif
