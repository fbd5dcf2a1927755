/* backward_grid.cuh: the sm80 fused backward on FlashAttention-2's warp grid (bwd_grid_kernel),
 * for d 64 and 128 with 16-byte aligned rows and no score modifier; its shape (bwd_grid_shape).
 * Everything else takes bwd_kernel (backward_fused.cuh). */
#ifndef FA_SM80_BACKWARD_GRID_CUH
#define FA_SM80_BACKWARD_GRID_CUH

#include "common/params.h"
#include "common/sm80_geometry.h"
#include "common/primitives.cuh"
#include "philox.h"
#include "common/tile_geometry.cuh"
#include "common/tile_io.cuh"
#include "common/tile_class.cuh"
#include "common/softmax_step.cuh"
#include "common/backward_step.cuh"
#include "common/dropout.cuh"
#include "sm80/backward_walk.cuh"

#include "mask.h"

namespace fa_gpu::sm80 {

/* One block of eight warps per (128-key tile, kv head, batch); query tiles of 64 rows of every
 * query head of the group stream through shared memory (double-buffered). Each step's five
 * products are split over the eight warps three ways:
 *   S = Q K^T and dP = dO V^T (64 x 128):  2 x 4 warps of 32 queries x 32 keys;
 *   dV += (P Z)^T dO, dK += dS^T Q (128 x d): 4 x 2 warps of 32 keys x d / 2 columns (held in
 *                                            registers for the whole walk);
 *   dQ = dS K (64 x d):                      2 x 4 warps of 32 queries x d / 4 columns, added
 *                                            into dq_accum with fp32 reductions.
 * P Z and dS go through shared memory (query-major, [64][128 + 8]) between the first split and
 * the others. A 32 x 32 warp tile reads two A and two B fragments per k16 step for eight MMAs,
 * where bwd_kernel's 16-key warps read one and four. */
template <int D> struct bwd_grid_shape {
    static constexpr int NW = 8, NT = NW * 32, BN = FA_SM80_BWD_KEYS, BQ = FA_SM80_GRID_BWD_ROWS;
    static_assert(NT == FA_SM80_BWD_THREADS, "common/sm80_geometry.h's block");
    static constexpr int LD = D + 8, LDP = BN + 8;
    static constexpr int DKV = D / 2, DQ = D / 4; /* columns per warp of dK / dV and of dQ */
    static_assert(D == 64 || D == 128, "the grid backward has d 64 and 128 instances");
    static_assert(DQ % 16 == 0, "dQ columns per warp must be whole n16 steps");
    /* dynamic shared memory: K, V [BN][LD], Q, dO [2][BQ][LD], P Z and dS [BQ][LDP] (16-bit), then
     * LSE log2(e) and D of two query tiles (fp32), the step classes (bytes): 175 KB at d 128, 110 KB
     * at d 64 (common/sm80_geometry.h) */
    /* steps per table of classes (tabled_walk), with block lists */
    static constexpr int CLASSES = FA_SM80_GRID_BWD_CLASSES;
    static constexpr size_t SMEM = FA_SM80_GRID_BWD_SMEM(D);
};

/* The bit of element (m tile mi, n8 tile ni, accumulator element e) in a thread's 32-element
 * share of a 32 x 32 warp tile. */
__device__ __forceinline__ constexpr int grid_bit(int mi, int ni, int e)
{
    return mi * 16 + ni * 4 + e;
}

/* MODE as mode_of: 0 plain, 1 block lists, 2 dropout (and perhaps block lists). */
template <typename T, int D, int MODE>
__global__ void __launch_bounds__(bwd_grid_shape<D>::NT, 1) bwd_grid_kernel(const fa_gpu_params p)
{
    constexpr bool LISTS = MODE >= 1, DROP = MODE == 2;
    using S = bwd_grid_shape<D>;
    constexpr int LD = S::LD, LDP = S::LDP, BN = S::BN, BQ = S::BQ, NT = S::NT, DKV = S::DKV, DQ = S::DQ;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T *ks = reinterpret_cast<T *>(smem_raw); /* [BN][LD] */
    T *vs = ks + BN * LD;                    /* [BN][LD] */
    T *qs = vs + BN * LD;                    /* [2][BQ][LD] */
    T *dos = qs + 2 * BQ * LD;               /* [2][BQ][LD] */
    T *ps = dos + 2 * BQ * LD;               /* [BQ][LDP]: P Z of the step */
    T *dss = ps + BQ * LDP;                  /* [BQ][LDP]: dS of the step */
    float *lse_s = reinterpret_cast<float *>(dss + BQ * LDP); /* [2][BQ], times log2(e) */
    float *dsum_s = lse_s + 2 * BQ;                           /* [2][BQ] */
    uint8_t *class_s = reinterpret_cast<uint8_t *>(dsum_s + 2 * BQ); /* [CLASSES] */

    const int64_t hk = blockIdx.y, b = blockIdx.z;
    const fa_seq s = fa_sequence(p, b);
    const int64_t k0 = (int64_t)blockIdx.x * BN;
    if (k0 >= s.sk)
        return;
    const fa_mask m = fa_mask_make(s.sq, s.sk, p.causal, p.window_left, p.window_right);
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
    const query_walk<BQ, LISTS> walk(p, m, hk, s.sq);

    /* the warp's place in each split */
    const int sm_q = (warp >> 2) * 32, sm_k = (warp & 3) * 32;  /* S, dP: query and key offsets */
    const int kv_k = (warp >> 1) * 32, kv_c = (warp & 1) * DKV; /* dK, dV: key and column offsets */
    const int dq_q = (warp >> 2) * 32, dq_c = (warp & 3) * DQ;  /* dQ: query and column offsets */

    /* fragment bases (shared-space bytes, lane offset included); buffer offsets added per step */
    const uint32_t q_a0 = smem_addr(qs) + 2u * (uint32_t)(lane_off_a(LD) + sm_q * LD);
    const uint32_t do_a0 = smem_addr(dos) + 2u * (uint32_t)(lane_off_a(LD) + sm_q * LD);
    const uint32_t k_bt = smem_addr(ks) + 2u * (uint32_t)(lane_off_bt(LD) + sm_k * LD);
    const uint32_t v_bt = smem_addr(vs) + 2u * (uint32_t)(lane_off_bt(LD) + sm_k * LD);
    const uint32_t p_at = smem_addr(ps) + 2u * (uint32_t)(lane_off_bt(LDP) + kv_k);
    const uint32_t ds_at = smem_addr(dss) + 2u * (uint32_t)(lane_off_bt(LDP) + kv_k);
    const uint32_t do_nn0 = smem_addr(dos) + 2u * (uint32_t)(lane_off_a(LD) + kv_c);
    const uint32_t q_nn0 = smem_addr(qs) + 2u * (uint32_t)(lane_off_a(LD) + kv_c);
    const uint32_t ds_a = smem_addr(dss) + 2u * (uint32_t)(lane_off_a(LDP) + dq_q * LDP);
    const uint32_t k_nn = smem_addr(ks) + 2u * (uint32_t)(lane_off_a(LD) + dq_c);

    float dk[2][DKV / 8][4], dv[2][DKV / 8][4];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int i = 0; i < DKV / 8; ++i)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                dk[mi][i][e] = dv[mi][i][e] = 0.0f;

    load_tile<T, D, true, BN, NT>(ks, p.k, b, s.k_start + k0, s.sk - k0, hk, (int)p.d);
    load_tile<T, D, true, BN, NT>(vs, p.v, b, s.k_start + k0, s.sk - k0, hk, (int)p.d);
    /* with block lists the step classes come from a table in shared memory */
    const bool tabled = LISTS && p.bl_row_ptr;
    tabled_walk<BQ, LISTS, S::CLASSES> table(walk, class_s, k0, k0 + BN);
    if (tabled)
        table.begin();
    auto next = [&](int64_t i) { return tabled ? table.next(i) : walk.next(i, k0, k0 + BN); };
    int64_t it = next(0);
    if (it < walk.niter)
        load_query_side<T, D, true, BQ, NT>(p, s, b, walk.head(it), walk.row0(it), qs, dos, lse_s, dsum_s);
    cp_async_commit();

    for (int n = 0; it < walk.niter; ++n) {
        const int buf = n & 1;
        const int64_t h = walk.head(it), q0 = walk.row0(it);
        /* this step's tiles landed and every warp is done with the previous step, whose buffers
         * (Q, dO, LSE, D of buf ^ 1, P Z and dS) are free for the prefetch and this step's stores */
        cp_async_wait<0>();
        __syncthreads();
        const fa_tile_class cls = tabled ? table.class_at(it) : walk.keys_class(h, q0, k0, k0 + BN);
        const int64_t it_next = next(it + 1);
        if (it_next < walk.niter) {
            load_query_side<T, D, true, BQ, NT>(p, s, b, walk.head(it_next), walk.row0(it_next),
                                                qs + (buf ^ 1) * BQ * LD, dos + (buf ^ 1) * BQ * LD,
                                                lse_s + (buf ^ 1) * BQ, dsum_s + (buf ^ 1) * BQ);
            cp_async_commit();
        }
        /* rows that saw no key (a tile with one is not FULL): Q, dO zeroed */
        if ((cls != FA_TILE_FULL || q0 + BQ > s.sq) &&
            zero_absent_rows<T, D, BQ, NT>(qs + buf * BQ * LD, dos + buf * BQ * LD, LD, lse_s + buf * BQ)) /* uniform */
            __syncthreads();
        const uint32_t boff = 2u * (uint32_t)(buf * BQ * LD);

        /* ---- S and dP of the warp's 32 queries x 32 keys, then P Z and dS into shared memory */
        {
            const int64_t wq0 = q0 + sm_q, wk0 = k0 + sm_k;
            const bool edge = cls != FA_TILE_FULL || k0 + BN > s.sk || q0 + BQ > s.sq;
            const bool seen = !edge || fa_mask_classify_tile(&m, wq0, wq0 + 32, wk0, wk0 + 32) != FA_TILE_EMPTY;
            const bool drop = DROP && p.dropout_threshold;
            /* the thread's rows: element (mi, ni, e) is query row sm_q + mi 16 + g + 8 (e >> 1),
             * key sm_k + ni 8 + 2 t4 + (e & 1) */
            /* visibility and dropout of the thread's 32 elements as bits, formed before the
             * products so that their registers are free again by then */
            uint32_t vis = ~0u, keep = ~0u;
            if (edge && seen) {
                const bool check_blocks = LISTS && p.bm_bits && cls != FA_TILE_FULL;
                vis = 0u;
#pragma unroll
                for (int mi = 0; mi < 2; ++mi)
#pragma unroll
                    for (int r = 0; r < 2; ++r) {
                        const int64_t i = wq0 + mi * 16 + g + 8 * r;
                        if (i >= s.sq)
                            continue;
                        int64_t lo, hi;
                        fa_mask_row_range(&m, i, &lo, &hi);
                        hi = hi < s.sk ? hi : s.sk;
#pragma unroll
                        for (int ni = 0; ni < 4; ++ni)
#pragma unroll
                            for (int c = 0; c < 2; ++c) {
                                const int64_t j = wk0 + ni * 8 + 2 * t4 + c;
                                const bool v = j >= lo && j < hi && (!check_blocks || block_keep(p, h, i, j));
                                vis |= (uint32_t)v << grid_bit(mi, ni, 2 * r + c);
                            }
                    }
            }
            if (drop && seen) {
                keep = 0u;
#pragma unroll
                for (int mi = 0; mi < 2; ++mi)
#pragma unroll
                    for (int ni = 0; ni < 4; ni += 2) {
                        const uint32_t k8 = dropout_keep_rows_by_keys(p, b, h, wq0 + mi * 16 + g, wk0 + ni * 8 + 2 * t4, true);
#pragma unroll
                        for (int e = 0; e < 8; ++e)
                            keep |= ((k8 >> e) & 1u) << grid_bit(mi, ni + (e >> 2), e & 3);
                    }
            }
            uint32_t pw[2][4][2], dw[2][4][2]; /* P Z and dS of the thread's elements, packed in pairs */
            if (seen) {
                float sc[2][4][4], dp[2][4][4];
#pragma unroll
                for (int mi = 0; mi < 2; ++mi)
#pragma unroll
                    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
                        for (int e = 0; e < 4; ++e)
                            sc[mi][ni][e] = dp[mi][ni][e] = 0.0f;
                /* S = Q K^T and dP = dO V^T in one k loop (independent products) */
#pragma unroll
                for (int kk = 0; kk < D; kk += 16) {
                    uint32_t qa[2][4], da[2][4], kb[2][4], vb[2][4];
#pragma unroll
                    for (int x = 0; x < 2; ++x) {
                        ldsm_x4(qa[x], q_a0 + boff + 2u * (uint32_t)(x * 16 * LD + kk));
                        ldsm_x4(kb[x], k_bt + 2u * (uint32_t)(x * 16 * LD + kk));
                        ldsm_x4(da[x], do_a0 + boff + 2u * (uint32_t)(x * 16 * LD + kk));
                        ldsm_x4(vb[x], v_bt + 2u * (uint32_t)(x * 16 * LD + kk));
                    }
#pragma unroll
                    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
                        for (int x = 0; x < 2; ++x) {
                            elem<T>::mma(sc[mi][2 * x], qa[mi], kb[x][0], kb[x][1]);
                            elem<T>::mma(sc[mi][2 * x + 1], qa[mi], kb[x][2], kb[x][3]);
                            elem<T>::mma(dp[mi][2 * x], da[mi], vb[x][0], vb[x][1]);
                            elem<T>::mma(dp[mi][2 * x + 1], da[mi], vb[x][2], vb[x][3]);
                        }
                }
                /* P = exp2(S scale log2 e - LSE log2 e); dS = P (Z dP - D) scale. A hidden element
                 * gets P = 0 and dP = 0, so dS = 0 even where V holds NaN or inf. */
                const float *lse2 = lse_s + buf * BQ + sm_q, *dd = dsum_s + buf * BQ + sm_q;
#pragma unroll
                for (int mi = 0; mi < 2; ++mi)
#pragma unroll
                    for (int r = 0; r < 2; ++r) {
                        const float l = lse2[mi * 16 + g + 8 * r], dr = dd[mi * 16 + g + 8 * r];
#pragma unroll
                        for (int ni = 0; ni < 4; ++ni) {
                            float pz[2], ds[2];
#pragma unroll
                            for (int c = 0; c < 2; ++c) {
                                const int e = 2 * r + c, bit = grid_bit(mi, ni, e);
                                float x = fast_exp2(sc[mi][ni][e] * p.scale_log2 - l), dpv = dp[mi][ni][e];
                                if (!((vis >> bit) & 1u)) {
                                    x = 0.0f;
                                    dpv = 0.0f;
                                }
                                const float z = !drop ? 1.0f : ((keep >> bit) & 1u) ? p.dropout_scale : 0.0f;
                                pz[c] = x * z;
                                ds[c] = x * (dpv * z - dr) * p.scale;
                            }
                            pw[mi][ni][r] = elem<T>::pack(pz[0], pz[1]);
                            dw[mi][ni][r] = elem<T>::pack(ds[0], ds[1]);
                        }
                    }
            } else { /* no element of the warp tile is visible */
#pragma unroll
                for (int mi = 0; mi < 2; ++mi)
#pragma unroll
                    for (int ni = 0; ni < 4; ++ni)
                        pw[mi][ni][0] = pw[mi][ni][1] = dw[mi][ni][0] = dw[mi][ni][1] = 0u;
            }
#pragma unroll
            for (int mi = 0; mi < 2; ++mi)
#pragma unroll
                for (int r = 0; r < 2; ++r)
#pragma unroll
                    for (int ni = 0; ni < 4; ++ni) {
                        const int off = (sm_q + mi * 16 + g + 8 * r) * LDP + sm_k + ni * 8 + 2 * t4;
                        *reinterpret_cast<uint32_t *>(ps + off) = pw[mi][ni][r];
                        *reinterpret_cast<uint32_t *>(dss + off) = dw[mi][ni][r];
                    }
        }
        __syncthreads();

        /* ---- dV += (P Z)^T dO over the step's 64 queries; A fragments come transposed out of
         * the query-major P Z tile */
#pragma unroll
        for (int kk = 0; kk < BQ; kk += 16) {
            uint32_t a[2][4];
#pragma unroll
            for (int mi = 0; mi < 2; ++mi)
                ldsm_x4_t(a[mi], p_at + 2u * (uint32_t)(kk * LDP + mi * 16));
#pragma unroll
            for (int c = 0; c < DKV; c += 16) {
                uint32_t bf[4];
                ldsm_x4_t(bf, do_nn0 + boff + 2u * (uint32_t)(kk * LD + c));
#pragma unroll
                for (int mi = 0; mi < 2; ++mi) {
                    elem<T>::mma(dv[mi][c / 8], a[mi], bf[0], bf[1]);
                    elem<T>::mma(dv[mi][c / 8 + 1], a[mi], bf[2], bf[3]);
                }
            }
        }
        /* ---- dQ[q0 .. q0 + 64) += dS K over the block's 128 keys, into dq_accum */
        {
            float acc[2][DQ / 8][4];
#pragma unroll
            for (int mi = 0; mi < 2; ++mi)
#pragma unroll
                for (int i = 0; i < DQ / 8; ++i)
                    acc[mi][i][0] = acc[mi][i][1] = acc[mi][i][2] = acc[mi][i][3] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < BN; kk += 16) {
                uint32_t a[2][4];
#pragma unroll
                for (int mi = 0; mi < 2; ++mi)
                    ldsm_x4(a[mi], ds_a + 2u * (uint32_t)(mi * 16 * LDP + kk));
#pragma unroll
                for (int c = 0; c < DQ; c += 16) {
                    uint32_t bf[4];
                    ldsm_x4_t(bf, k_nn + 2u * (uint32_t)(kk * LD + c));
#pragma unroll
                    for (int mi = 0; mi < 2; ++mi) {
                        elem<T>::mma(acc[mi][c / 8], a[mi], bf[0], bf[1]);
                        elem<T>::mma(acc[mi][c / 8 + 1], a[mi], bf[2], bf[3]);
                    }
                }
            }
#pragma unroll
            for (int mi = 0; mi < 2; ++mi)
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    const int64_t i = q0 + dq_q + mi * 16 + g + 8 * r;
                    if (i < s.sq) {
                        float *row = p.dq_accum + (h * p.total_q + (p.cu_q ? s.q_start + i : b * p.seqlen_q + i)) * D + dq_c;
#pragma unroll
                        for (int nt = 0; nt < DQ / 8; ++nt)
                            red_add2(row + nt * 8 + 2 * t4, acc[mi][nt][2 * r], acc[mi][nt][2 * r + 1]);
                    }
                }
        }
        /* ---- dK += dS^T Q after dQ (FlashAttention-2's order: these MMAs overlap the draining
         * reductions) */
#pragma unroll
        for (int kk = 0; kk < BQ; kk += 16) {
            uint32_t a[2][4];
#pragma unroll
            for (int mi = 0; mi < 2; ++mi)
                ldsm_x4_t(a[mi], ds_at + 2u * (uint32_t)(kk * LDP + mi * 16));
#pragma unroll
            for (int c = 0; c < DKV; c += 16) {
                uint32_t bf[4];
                ldsm_x4_t(bf, q_nn0 + boff + 2u * (uint32_t)(kk * LD + c));
#pragma unroll
                for (int mi = 0; mi < 2; ++mi) {
                    elem<T>::mma(dk[mi][c / 8], a[mi], bf[0], bf[1]);
                    elem<T>::mma(dk[mi][c / 8 + 1], a[mi], bf[2], bf[3]);
                }
            }
        }
        it = it_next;
    }

#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
        const int64_t rows[2] = {k0 + kv_k + mi * 16 + g, k0 + kv_k + mi * 16 + g + 8};
        store_dkdv<T, DKV>(p, s, b, hk, rows, t4, dk[mi], dv[mi], kv_c);
    }
}

} // namespace fa_gpu::sm80

#endif
