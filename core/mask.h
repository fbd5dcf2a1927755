/* mask.h: which (query, key) elements are masked, and the class of a whole tile.
 *
 * Coordinates are local to one sequence. With offset = seqlen_k - seqlen_q (bottom-right
 * alignment), query row i sees key column j iff
 *     j < seqlen_k,
 *     left  < 0  or  j >= i + offset - left,
 *     right < 0  or  j <= i + offset + right,         (causal sets right = min(right, 0))
 *     and the block mask (if any) keeps block (i / block_q, j / block_k).
 * A tile [q0, q1) x [k0, k1) is EMPTY when no element is visible (kernels skip it), FULL when
 * every element inside the sequence bounds is visible (no per-element test), PARTIAL otherwise. */
#ifndef FA_MASK_H
#define FA_MASK_H

/* Includable from CUDA/HIP device code and as OpenCL C text too (the OpenCL backend prepends
 * this file to its kernels): every GPU kernel classifies tiles and tests elements with these same
 * functions. OpenCL C has no <stdint.h>; its long is 64 bits. */
#if defined(__OPENCL_VERSION__)
typedef long int64_t;
#elif !defined(__CUDACC_RTC__) && !defined(__HIPCC_RTC__) /* NVRTC and hipRTC have no <stdint.h>: common/rtc_prelude.cuh, included first there, defines the types */
#include <stdint.h>
#endif

#if defined(__CUDACC__) || defined(__HIPCC__)
#define FA_MASK_FN static __host__ __device__ __forceinline__
#else
#define FA_MASK_FN static inline
#endif

typedef enum fa_tile_class { FA_TILE_EMPTY = 0, FA_TILE_PARTIAL = 1, FA_TILE_FULL = 2 } fa_tile_class;

typedef struct fa_mask {
    int64_t seqlen_q, seqlen_k;
    int64_t left, right; /* effective window in [-1, seqlen_q + seqlen_k), -1 unbounded; causal
                            already folded into right */
} fa_mask;

FA_MASK_FN fa_mask fa_mask_make(int64_t seqlen_q, int64_t seqlen_k, int causal, int64_t left,
                                   int64_t right)
{
    fa_mask m;
    m.seqlen_q = seqlen_q;
    m.seqlen_k = seqlen_k;
    /* Every key j of row i lies within seqlen_q + seqlen_k - 1 of i's diagonal on either side, so
     * a bound of seqlen_q + seqlen_k or more limits nothing: it becomes -1 here, once, which keeps
     * diag - left and diag + right + 1 below from overflowing for bounds up to INT64_MAX (the
     * differences below cannot overflow: the bound is >= 0 and the lengths are). */
    m.left = left < 0 || left - seqlen_k >= seqlen_q ? -1 : left;
    m.right = right < 0 || right - seqlen_k >= seqlen_q ? -1 : right;
    if (causal && (m.right < 0 || m.right > 0))
        m.right = 0;
    return m;
}

/* Visible key columns of query row i: [*lo, *hi), clipped to [0, seqlen_k); lo >= hi if none. */
FA_MASK_FN void fa_mask_row_range(const fa_mask *m, int64_t i, int64_t *lo, int64_t *hi)
{
    int64_t diag = i + m->seqlen_k - m->seqlen_q;
    int64_t a = 0, b = m->seqlen_k;
    if (m->left >= 0 && diag - m->left > a)
        a = diag - m->left;
    if (m->right >= 0 && diag + m->right + 1 < b)
        b = diag + m->right + 1;
    *lo = a;
    *hi = b;
}

/* Keys visible to at least one row of [q0, q1): [*lo, *hi), lo >= hi if none. Both ends of a
 * row's range are non-decreasing in the row and move by at most one per row, so the first row's
 * lo and the last row's hi bound the union, which has no gaps. */
FA_MASK_FN void fa_mask_rows_range(const fa_mask *m, int64_t q0, int64_t q1, int64_t *lo, int64_t *hi)
{
    int64_t unused;
    fa_mask_row_range(m, q0, lo, &unused);
    fa_mask_row_range(m, q1 - 1, &unused, hi);
}

FA_MASK_FN int fa_mask_visible(const fa_mask *m, int64_t i, int64_t j)
{
    int64_t lo, hi;
    fa_mask_row_range(m, i, &lo, &hi);
    return j >= lo && j < hi;
}

/* Class of the tile [q0, q1) x [k0, k1) under the causal/window/bounds mask. Rows beyond
 * seqlen_q and columns beyond seqlen_k are outside the problem and ignored. */
FA_MASK_FN fa_tile_class fa_mask_classify_tile(const fa_mask *m, int64_t q0, int64_t q1, int64_t k0,
                                                  int64_t k1)
{
    if (q1 > m->seqlen_q)
        q1 = m->seqlen_q;
    if (k1 > m->seqlen_k)
        k1 = m->seqlen_k;
    if (q0 >= q1 || k0 >= k1)
        return FA_TILE_EMPTY;
    /* The visible range [lo(i), hi(i)) is non-decreasing in i at both ends, so the first and
     * the last row bound the whole tile. */
    int64_t lo_first, hi_first, lo_last, hi_last;
    fa_mask_row_range(m, q0, &lo_first, &hi_first);
    fa_mask_row_range(m, q1 - 1, &lo_last, &hi_last);
    /* empty: every row's range misses [k0, k1) */
    if (hi_last <= k0 || lo_first >= k1)
        return FA_TILE_EMPTY;
    /* a row in between could still have an empty range that misses the tile; rows whose range
     * is empty make the tile at best PARTIAL. Full needs every row to cover [k0, k1). */
    if (lo_last <= k0 && hi_first >= k1)
        return FA_TILE_FULL;
    return FA_TILE_PARTIAL;
}

/* Combine two classifications of the same tile under two masks that are intersected. */
FA_MASK_FN fa_tile_class fa_tile_class_meet(fa_tile_class a, fa_tile_class b)
{
    if (a == FA_TILE_EMPTY || b == FA_TILE_EMPTY)
        return FA_TILE_EMPTY;
    if (a == FA_TILE_FULL && b == FA_TILE_FULL)
        return FA_TILE_FULL;
    return FA_TILE_PARTIAL;
}

#endif /* FA_MASK_H */
