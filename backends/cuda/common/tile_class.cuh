/* tile_class.cuh: what the masks leave of a tile: the block-mask bit, the class of a tile under
 * every mask (causal / window / block lists), the per-element visibility test, and the walks over
 * the key tiles a query tile sees (key_tiles_of for 64-row tiles, key_walk_of for B_r-row ones). */
#ifndef FA_CUDA_COMMON_TILE_CLASS_CUH
#define FA_CUDA_COMMON_TILE_CLASS_CUH

#include "common/params.h"
#include "mask.h"
#include "common/tile_geometry.cuh"

namespace fa_gpu {

/* Block-mask bit for query head h, local element (i, j). */
__device__ __forceinline__ bool block_keep(const fa_gpu_params &p, int64_t h, int64_t i, int64_t j)
{
    int64_t mh = p.bm_heads == 1 ? 0 : h;
    return p.bm_bits[(mh * p.bm_rows + i / p.bm_bq) * p.bm_cols + j / p.bm_bk] != 0;
}

/* The class of (query tile qt, key tile kt) of head h (64 x 64 tiles) under every mask. */
__device__ __forceinline__ fa_tile_class tile_class(const fa_gpu_params &p, const fa_mask &m, int64_t h, int64_t qt,
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
__device__ __forceinline__ bool visible(const fa_gpu_params &p, const fa_mask &m, int64_t h, int64_t i, int64_t j,
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

__device__ __forceinline__ key_tiles key_tiles_of(const fa_gpu_params &p, const fa_mask &m, int64_t h, int64_t qt)
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
__device__ __forceinline__ key_walk<SUB, LISTS> key_walk_of(const fa_gpu_params &p, const fa_mask &m, int64_t h,
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
__device__ __forceinline__ fa_tile_class rows_class(const fa_gpu_params &p, const fa_mask &m, int64_t h, int64_t r0,
                                                    int64_t r1, int64_t kt)
{
    fa_tile_class c = fa_mask_classify_tile(&m, r0, r1, kt * BLOCK, (kt + 1) * BLOCK);
    if (c == FA_TILE_EMPTY || !p.bl_row_ptr)
        return c;
    return fa_tile_class_meet(c, tile_class(p, m, h, r0 / BLOCK, kt));
}

} // namespace fa_gpu

#endif
