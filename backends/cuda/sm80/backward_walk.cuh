/* backward_walk.cuh: what the fused backward kernels (bwd_kernel, bwd_grid_kernel) share about
 * their walk: a block owns a tile of keys of one kv head and visits, in order, the query tiles of
 * every query head of the group that see at least one of those keys; each step's query side
 * (Q, dO, LSE log2(e) and D of BQ rows) is copied into one of two buffers while the other is used. */
#ifndef FA_SM80_BACKWARD_WALK_CUH
#define FA_SM80_BACKWARD_WALK_CUH

#include "common/params.h"
#include "common/primitives.cuh"
#include "common/tile_geometry.cuh"
#include "common/tile_io.cuh"
#include "common/tile_class.cuh"

#include "mask.h"

namespace fa_gpu::sm80 {

/* The walk of one block: steps it = 0 .. niter - 1 stand for (query head hk * group + it / nqt,
 * query rows [(it % nqt) * BQ, + BQ)). LISTS: the block lists refine the mask's classes. */
template <int BQ, bool LISTS> struct query_walk {
    const fa_gpu_params &p;
    const fa_mask &m;
    int64_t hk, nqt, niter;

    __device__ __forceinline__ query_walk(const fa_gpu_params &p_, const fa_mask &m_, int64_t hk_, int64_t sq)
        : p(p_), m(m_), hk(hk_), nqt((sq + BQ - 1) / BQ), niter(p_.group * ((sq + BQ - 1) / BQ))
    {
    }
    __device__ __forceinline__ int64_t head(int64_t it) const { return hk * p.group + it / nqt; }
    __device__ __forceinline__ int64_t row0(int64_t it) const { return (it % nqt) * BQ; }

    /* The class of query rows [q0, q0 + BQ) of head h against keys [j0, j1) (whole 64-key tiles of
     * the block lists, or a part of one) under every mask: EMPTY when every list tile is, FULL when
     * every one is, PARTIAL otherwise (a range that spans an EMPTY and a FULL tile is PARTIAL). */
    __device__ __forceinline__ fa_tile_class keys_class(int64_t h, int64_t q0, int64_t j0, int64_t j1) const
    {
        fa_tile_class c = fa_mask_classify_tile(&m, q0, q0 + BQ, j0, j1);
        if (!LISTS || c == FA_TILE_EMPTY || !p.bl_row_ptr)
            return c;
        bool any = false, all_full = true;
        for (int64_t t = j0 / BLOCK; t * BLOCK < j1; ++t) {
            fa_tile_class u = tile_class(p, m, h, q0 / BLOCK, t);
            any |= u != FA_TILE_EMPTY;
            all_full &= u == FA_TILE_FULL;
        }
        return !any ? FA_TILE_EMPTY : all_full ? c : fa_tile_class_meet(c, FA_TILE_PARTIAL);
    }

    /* The first step at or after it whose query tile sees a key of [j0, j1); niter if none. */
    __device__ __forceinline__ int64_t next(int64_t it, int64_t j0, int64_t j1) const
    {
        for (; it < niter; ++it)
            if (keys_class(head(it), row0(it), j0, j1) != FA_TILE_EMPTY)
                return it;
        return niter;
    }
};

/* The classes of a block's steps against its keys [j0, j1), CAP at a time in shared memory (tab),
 * computed by all threads side by side. With block lists a class costs two binary searches in the
 * lists (dependent global loads), which the walk would otherwise pay one step after another. Every
 * thread of the block calls fill (through begin and next) at the same points: the table holds the
 * same bytes for all, so next takes the same path in every thread. */
template <int BQ, bool LISTS, int CAP> struct tabled_walk {
    const query_walk<BQ, LISTS> &w;
    uint8_t *tab;
    int64_t j0, j1, c0;

    __device__ __forceinline__ tabled_walk(const query_walk<BQ, LISTS> &w_, uint8_t *tab_, int64_t j0_, int64_t j1_)
        : w(w_), tab(tab_), j0(j0_), j1(j1_), c0(0)
    {
    }
    /* steps [from, from + CAP): every thread has finished reading the table before it changes */
    __device__ __forceinline__ void fill(int64_t from)
    {
        __syncthreads();
        c0 = from;
        for (int64_t i = threadIdx.x; i < CAP && from + i < w.niter; i += blockDim.x)
            tab[i] = (uint8_t)w.keys_class(w.head(from + i), w.row0(from + i), j0, j1);
        __syncthreads();
    }
    __device__ __forceinline__ void begin() { fill(0); }
    __device__ __forceinline__ int64_t next(int64_t it)
    {
        for (; it < w.niter; ++it) {
            if (it >= c0 + CAP)
                fill(it);
            if (tab[it - c0] != FA_TILE_EMPTY)
                return it;
        }
        return w.niter;
    }
    /* step it's class: it was the last step next returned */
    __device__ __forceinline__ fa_tile_class class_at(int64_t it) const { return (fa_tile_class)tab[it - c0]; }
};

/* Step it's query side into buffers qs, dos [BQ][D + 8], lse2s, dsums [BQ] (cp.async; the caller
 * commits; plain loads when !ALIGNED): Q and dO rows past the sequence zero-filled, LSE log2(e)
 * and D of those rows 0 (their P is masked). All NT threads call it; NT >= 2 BQ. */
template <typename T, int D, bool ALIGNED, int BQ, int NT>
__device__ __forceinline__ void load_query_side(const fa_gpu_params &p, const fa_seq &s, int64_t b, int64_t h, int64_t q0,
                                                T *qs, T *dos, float *lse2s, float *dsums)
{
    static_assert(NT >= 2 * BQ, "one thread per LSE / D value");
    load_tile<T, D, ALIGNED, BQ, NT>(qs, p.q, b, s.q_start + q0, imin(s.sq - q0, BQ), h, (int)p.d);
    load_tile<T, D, ALIGNED, BQ, NT>(dos, p.dout, b, s.q_start + q0, imin(s.sq - q0, BQ), h, (int)p.d);
    if (threadIdx.x < 2 * BQ) {
        const int r = threadIdx.x % BQ;
        const int64_t i = q0 + r;
        const float *src = (threadIdx.x < BQ ? p.lse2 : p.dsum) + h * p.total_q + (p.cu_q ? s.q_start + i : b * p.seqlen_q + i);
        float *dst = (threadIdx.x < BQ ? lse2s : dsums) + r;
        cp_async4(dst, i < s.sq ? src : p.dsum, i < s.sq);
    }
}

} // namespace fa_gpu::sm80

#endif
