/* forward.cuh: the sm80 forward kernel, its query-tile shape (fwd_shape) and the kernel itself:
 * K / V tiles double-buffered through shared memory, Q K^T and P V on mma.sync, the online softmax
 * of common/softmax_step.cuh. */
#ifndef FA_SM80_FORWARD_CUH
#define FA_SM80_FORWARD_CUH

#include "common/params.h"
#include "common/primitives.cuh"
#include "sm80/tiles.h"
#include "common/tile_geometry.cuh"
#include "common/tile_io.cuh"
#include "common/tile_class.cuh"
#include "common/score_mod.cuh"
#include "common/softmax_step.cuh"
#include "common/split_combine.cuh"

#include "mask.h"

#if defined(__CUDACC_RTC__) /* NVRTC: the toolkit's names from common/rtc_prelude.cuh */
#include "common/rtc_prelude.cuh"
#else
#include <math_constants.h>
#endif

namespace fa_gpu::sm80 {

/* The forward's query tile: MT m16 tiles per warp, so B_r = 4 warps * 16 * MT rows. Two tiles
 * per warp (B_r = 128) up to d = 128: every K / V fragment read from shared memory feeds two
 * mma instead of one, and each warp has twice the independent accumulator chains. Above d 128
 * the 16 x d accumulator per m tile already takes 64 .. 128 registers, so one tile per warp. */
template <int D> struct fwd_shape {
    static constexpr int MT = tile_of(D).fwd_mtiles;
    static constexpr int BR = FA_SM80_FWD_ROWS(MT);
    static constexpr int KN = tile_of(D).fwd_keys;
    static_assert(MT == 1 || MT == 2, "tiles.h: one or two m tiles per warp");
    static_assert(KN == 32 || KN == BLOCK, "tiles.h: 32 or 64 keys per softmax step");
};

/* MODE (see mode_of): 0 plain, 1 block lists, 2 dropout (and perhaps block lists). Each is its
 * own instance, so registers for Philox state and list cursors do not crowd the accumulators of
 * the cases that need neither. MOD: the score modifiers (in the launchers, with MODE 2, which
 * tests for lists and dropout at run time), a learnable sink (folded in by stage_output) and d_v <
 * d (V's columns from d_v on loaded as zeros, O's p.d_v stored). SPLIT (plain calls: MODE 0, no MOD): each query tile's
 * key tiles shared among p.splits blocks (grid z: sequence x splits), each writing its part's O
 * and LSE for split_combine_kernel (common/split_combine.cuh).
 * STAGES: the K / V tile buffers. 2: the next tile's K and V are copied while this one is
 * computed. 1 (aligned rows; FlashAttention-2's schedule in a third less shared memory, for
 * devices where two stages do not fit or leave one block per SM): V is copied while the first
 * step's Q K^T runs, the next tile's K once the last step's Q K^T is done. */
template <typename T, int D, bool ALIGNED, int MODE, bool MOD = false, bool SPLIT = false, int STAGES = 2>
__global__ void __launch_bounds__(THREADS, 2) forward_kernel(const fa_gpu_params p)
{
    static_assert(!SPLIT || (MODE == 0 && !MOD), "the split instances: plain calls");
    static_assert(STAGES == 2 || (STAGES == 1 && ALIGNED), "one stage: the cp.async instances");
    constexpr bool LISTS = MODE >= 1, DROP = MODE == 2;
    constexpr int LD = D + 8, MT = fwd_shape<D>::MT, BR = fwd_shape<D>::BR, SUB = BR / BLOCK, KN = fwd_shape<D>::KN;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T *qs = reinterpret_cast<T *>(smem_raw); /* [BR][LD], reused to stage O */
    T *ks = qs + BR * LD;                    /* [STAGES][BLOCK][LD] */
    T *vs = ks + STAGES * BLOCK * LD;        /* [STAGES][BLOCK][LD] */

    const int64_t h = blockIdx.y, b = SPLIT ? (int64_t)(blockIdx.z / (unsigned)p.splits) : (int64_t)blockIdx.z;
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
    if constexpr (SPLIT) { /* this block's share of the range: tiles [next + split * per, + per) */
        const int64_t split = (int64_t)blockIdx.z - b * p.splits;
        const int64_t per = (int64_t)((unsigned)(walk.last - walk.next + p.splits - 1) / (unsigned)p.splits);
        const int64_t lo = imin(walk.next + split * per, walk.last);
        walk.last = imin(lo + per, walk.last);
        walk.next = lo;
    }
    const float cc = p.scale_log2 > 0.0f ? p.scale_log2 : 1.0f; /* see the softmax step */
    const fa_score_mod_state sm = MOD ? fa_gpu_score_mod(p, s, b, h) : fa_score_mod_state{};
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
        if constexpr (STAGES == 2)
            load_tile<T, D, ALIGNED>(vs, p.v, b, s.k_start + kt * BLOCK, s.sk - kt * BLOCK, hk,
                                     MOD ? (int)p.d_v : (int)p.d);
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

    if constexpr (STAGES == 1) {
        /* every barrier below is reached by the whole block: the tile sequence is the block's, and
         * the steps' tests guard the work between barriers only */
        while (kt >= 0) {
            const int64_t k0 = kt * BLOCK;
            walk.pop(kt);
            const int64_t kn = walk.peek();
            cp_async_wait<0>();
            __syncthreads(); /* K of this tile is in; every warp is done with the last tile's V */
            load_tile<T, D, true>(vs, p.v, b, s.k_start + k0, s.sk - k0, hk, MOD ? (int)p.d_v : (int)p.d);
            cp_async_commit();
            const fa_tile_class cls = LISTS ? rows_class(p, m, h, wq0, wq0 + 16 * MT, kt)
                                            : fa_mask_classify_tile(&m, wq0, wq0 + 16 * MT, k0, k0 + BLOCK);
#pragma unroll
            for (int kx = 0; kx < BLOCK; kx += KN) {
                const bool first = kx == 0, last = kx + KN == BLOCK;
                const bool live = cls != FA_TILE_EMPTY && k0 + kx < s.sk;
                float sacc[MT][KN / 8][4];
                if (live) {
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                        for (int i = 0; i < KN / 8; ++i)
                            sacc[mt][i][0] = sacc[mt][i][1] = sacc[mt][i][2] = sacc[mt][i][3] = 0.0f;
                    gemm_nt_rows_s<T, MT, KN, D, LD, LD>(sacc, q_frag, k_frag + 2u * (uint32_t)(kx * LD));
                }
                if (last) { /* the next tile's K into the freed buffer */
                    if (first)
                        cp_async_wait<0>(); /* V, copied while Q K^T ran */
                    __syncthreads();        /* (V is in;) every warp is done with K */
                    if (kn >= 0) {
                        load_tile<T, D, true>(ks, p.k, b, s.k_start + kn * BLOCK, s.sk - kn * BLOCK, hk, (int)p.d);
                        cp_async_commit();
                    }
                }
                if (live)
                    softmax_step<T, MT, KN, D / 8, 16, LISTS, DROP, MOD>(p, m, s, b, h, wq0, k0 + kx, cls, cc, sacc,
                                                                         row_m, row_l, o, sm);
                if (first && !last) {
                    cp_async_wait<0>();
                    __syncthreads(); /* V is in */
                }
                if (live) {
                    uint32_t pf[MT][KN / 16][4];
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt)
                        acc_to_a<T, KN>(pf[mt], sacc[mt]);
                    gemm_pn_rows_s<T, MT, D, KN, LD>(o, pf, v_frag + 2u * (uint32_t)(kx * LD));
                }
            }
            kt = kn;
        }
        /* the last tile's last barrier came after every warp's last read of Q (and each warp
         * stages only its own rows), so the epilogue below may stage O in it */
    }
    for (int buf = 0; STAGES == 2 && kt >= 0; buf ^= 1) {
        const int64_t k0 = kt * BLOCK;
        walk.pop(kt);
        const int64_t kn = walk.peek();
        if (kn >= 0) {
            T *kd = ks + (buf ^ 1) * BLOCK * LD, *vd = vs + (buf ^ 1) * BLOCK * LD;
            load_tile<T, D, ALIGNED>(kd, p.k, b, s.k_start + kn * BLOCK, s.sk - kn * BLOCK, hk, (int)p.d);
            load_tile<T, D, ALIGNED>(vd, p.v, b, s.k_start + kn * BLOCK, s.sk - kn * BLOCK, hk,
                                     MOD ? (int)p.d_v : (int)p.d);
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

    if constexpr (SPLIT) { /* this part's O (fp32, from the registers) and LSE */
        stage_output<T, D, MT, 16>(qs, o, row_m, row_l, split_part_params(p, (int64_t)blockIdx.z - b * p.splits), s, b, h,
                                   q0, wrow);
        return;
    }
    /* epilogue: O / l staged through the Q tile (free after the last barrier) for 16-byte row
     * stores */
    stage_output<T, D, MT, 16, MOD>(qs, o, row_m, row_l, p, s, b, h, q0, wrow);
    __syncthreads();
    if (!p.out_f32)
        store_tile<T, D, ALIGNED, BR>(p.o, qs, b, s.q_start + q0, s.sq - q0, h,
                                      MOD ? (int)p.d_v : (int)p.d);
}

} // namespace fa_gpu::sm80

#endif
