/* backward_fused.cuh: the sm80 fused backward (FlashAttention-2's): dK, dV and dQ per key tile in
 * one kernel, dQ added into an fp32 accumulator with reductions; its shape (bwd_shape) and the
 * kernel. */
#ifndef FA_SM80_BACKWARD_FUSED_CUH
#define FA_SM80_BACKWARD_FUSED_CUH

#include "common/params.h"
#include "common/primitives.cuh"
#include "sm80/tiles.h"
#include "common/tile_geometry.cuh"
#include "common/tile_io.cuh"
#include "common/tile_class.cuh"
#include "common/dropout.cuh"
#include "common/score_mod.cuh"
#include "common/softmax_step.cuh"
#include "common/backward_step.cuh"
#include "sm80/backward_walk.cuh"

#include "mask.h"

namespace fa_gpu::sm80 {

/* FlashAttention-2's backward: one block of eight warps per (128-key tile, kv head, batch), each
 * warp owning 16 keys; query tiles of BQ rows of every query head of the group stream through
 * shared memory. Per query tile: S^T = K Q^T and dP^T = V dO^T (in one k loop), P^T,
 * dV += P^T dO, dS^T (as in dkdv_kernel), then dS goes through shared memory and the block
 * computes dQ += dS K, added with fp32 reductions into dq_accum [heads_q][total_q][D] (the order of the
 * additions varies, so dQ is not bitwise reproducible; the deterministic option uses the
 * two-kernel path), and last dK += dS^T Q, whose MMAs overlap the draining reductions. Five
 * products per tile instead of seven. */
template <int D, int WARPS = 8> struct bwd_shape {
    static constexpr int NW = WARPS, NT = NW * 32, BN = NW * 16;
    static_assert((NT == FA_SM80_BWD_THREADS && BN == FA_SM80_BWD_KEYS) ||
                      (D == 256 && NW == FA_SM80_BWD_NARROW_WARPS && BN == FA_SM80_BWD_NARROW_KEYS),
                  "common/sm80_geometry.h's block (or the narrow d 256 one)");
    /* output columns per pass: d > 128 runs PASSES blocks per key tile, each computing S and dP
     * over all D columns and dK, dV, dQ for its DV of them (tiles.h) */
    static constexpr int DV = D > 128 ? D / 2 : D, PASSES = D / DV;
    static_assert(PASSES == FA_SM80_BWD_PASSES(D), "common/sm80_geometry.h's passes");
    /* query rows per step (tiles.h). BQ / 16 m tiles times NW / (BQ / 16) column groups of
     * DV / (NW / (BQ / 16)) columns (a multiple of 16) cover the pass's dQ tile. */
    static constexpr int BQ = tile_of(D).bwd_rows;
    static_assert(BQ == 32 || BQ == 64, "tiles.h: no fused backward tile for this head dim");
    static constexpr int MTQ = BQ / 16, CG = NW / MTQ, DC = DV / CG;
    static_assert(DC % 16 == 0, "dQ column groups must be whole n16 steps");
    static constexpr int LDS = BQ + 8, LD = D + 8;
    /* dynamic shared memory (16-bit elements): K, V [BN][LD], Q, dO [2][BQ][LD], dS^T [BN][LDS],
     * then LSE and D of two query tiles in fp32 (common/sm80_geometry.h) */
    static constexpr size_t SMEM = FA_SM80_BWD_SMEM_KEYS(D, BQ, BN);
};

/* MODE as in the forward; MOD: the score modifiers, and dS times the softcap's derivative (then
 * computed with P, since dP^T is already there, so that the derivative needs no registers);
 * WARPS: 8 (128 keys a block), or 4 (64 keys) for the narrow d 256 instance. */
template <typename T, int D, bool ALIGNED, int MODE, bool MOD = false, int WARPS = 8>
__global__ void __launch_bounds__(bwd_shape<D, WARPS>::NT, 1) bwd_kernel(const fa_gpu_params p)
{
    constexpr bool LISTS = MODE >= 1, DROP = MODE == 2;
    using S = bwd_shape<D, WARPS>;
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
    fa_score_mod_state sm = MOD ? fa_gpu_score_mod(p, s, b, hk * p.group) : fa_score_mod_state{};

    float dk[DV / 8][4], dv[DV / 8][4];
#pragma unroll
    for (int i = 0; i < DV / 8; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e)
            dk[i][e] = dv[i][e] = 0.0f;

    const query_walk<BQ, LISTS> walk(p, m, hk, s.sq);
    auto load_q_side = [&](int64_t it, int buf) {
        load_query_side<T, D, ALIGNED, BQ, NT>(p, s, b, walk.head(it), walk.row0(it), qs + buf * BQ * LD,
                                               dos + buf * BQ * LD, lse_s + buf * BQ, dsum_s + buf * BQ);
    };

    load_tile<T, D, ALIGNED, BN, NT>(ks, p.k, b, s.k_start + k0, s.sk - k0, hk, (int)p.d);
    load_tile<T, D, ALIGNED, BN, NT>(vs, p.v, b, s.k_start + k0, s.sk - k0, hk, (int)p.d);
    int64_t it = walk.next(0, k0, k0 + BN);
    if (it < walk.niter)
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

    for (int n = 0; it < walk.niter; ++n) {
        const int buf = n & 1;
        const int64_t h = walk.head(it), q0 = walk.row0(it);
        /* this step's tiles landed and every warp is done with the previous step: its buffers
         * (Q, dO, LSE, D of buf ^ 1, and dS^T) are free for the prefetch and the dS^T stores */
        cp_async_wait<0>();
        __syncthreads();
        const int64_t it_next = walk.next(it + 1, k0, k0 + BN);
        if (it_next < walk.niter) {
            load_q_side(it_next, buf ^ 1);
            cp_async_commit();
        }
        /* rows that saw no key (a tile with one is not FULL for the block's keys): Q, dO zeroed */
        if ((walk.keys_class(h, q0, k0, k0 + BN) != FA_TILE_FULL || q0 + BQ > s.sq) &&
            zero_absent_rows<T, D, BQ, NT>(qs + buf * BQ * LD, dos + buf * BQ * LD, LD, lse_s + buf * BQ)) /* uniform */
            __syncthreads();
        /* fragment bases of this step's Q and dO tiles (A: lane_off_a, transposed-B: lane_off_bt) */
        const uint32_t q_a = q_a0 + 2u * (uint32_t)(buf * BQ * LD), q_bt = q_bt0 + 2u * (uint32_t)(buf * BQ * LD);
        const uint32_t do_a = do_a0 + 2u * (uint32_t)(buf * BQ * LD), do_bt = do_bt0 + 2u * (uint32_t)(buf * BQ * LD);
        const float *lse2 = lse_s + buf * BQ, *dd = dsum_s + buf * BQ;
        const fa_tile_class cls = walk.keys_class(h, q0, wk0, wk0 + 16);
        uint32_t df[BQ / 16][4]; /* dS^T as A fragments, for dK after the dQ product */
        if (cls != FA_TILE_EMPTY) {
            const bool edge = cls != FA_TILE_FULL || wk0 + 16 > s.sk || q0 + BQ > s.sq;
            const bool check_blocks = LISTS && p.bm_bits && cls != FA_TILE_FULL;
            const bool drop = DROP && p.dropout_threshold;
            uint32_t keep[(BQ / 2 + 31) / 32] = {}; /* dropout's verdicts, bit 4 nt + e */
            if (drop)
                dropout_keep_keys_by_rows<BQ / 8>(p, b, h, q0 + 2 * t4, wk0 + g, keep);
            /* P^T = exp2(S^T * scale log2 e - LSE log2 e) */
            /* and dP^T = V dO^T in the same k loop: the two products are independent */
            float pt[BQ / 8][4], dpt[BQ / 8][4];
#pragma unroll
            for (int i = 0; i < BQ / 8; ++i)
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    pt[i][e] = dpt[i][e] = 0.0f;
            gemm_nt2_s<T, BQ, D, LD, LD>(pt, k_a, q_bt, dpt, v_a, do_bt);
            float alibi_d0 = 0.0f;
            if constexpr (MOD)
                alibi_d0 = modify_transposed_scores<BQ / 8>(sm, p, b, h, pt, q0, wk0);
            /* The loop is peeled: one copy, for the steps where some element may be hidden
             * (edge), tests each element, the other has no branch per element (a branch around
             * each element's test costs instruction fetches in the hot loop). Where the registers
             * do not allow two copies (the score modifiers; unaligned rows' element-wise loads;
             * d 128 with block lists or dropout, which already spill) only the testing copy is
             * built, which tests edge per element. */
            constexpr bool PEEL = ALIGNED && !MOD && !(D == 128 && MODE != 0);
            auto p_step = [&](const bool masked) {
#pragma unroll
                for (int nt = 0; nt < BQ / 8; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int col = nt * 8 + 2 * t4 + (e & 1);
                        float sx = pt[nt][e], grad = 1.0f;
                        if constexpr (MOD)
                            sx = modified_score_at(sm, sx, alibi_d0 + transposed_offset(nt, e), grad);
                        float x = fast_exp2(sx * p.scale_log2 - lse2[col]);
                        if (masked && edge && !visible(p, m, h, q0 + col, wk0 + g + (e >> 1) * 8, check_blocks)) {
                            x = 0.0f;
                            dpt[nt][e] = 0.0f; /* dS = 0 (0 - D) = 0 below even where V is NaN */
                            grad = 1.0f;
                        }
                        pt[nt][e] = x;
                        if constexpr (MOD) { /* dS^T = P^T (Z dP^T - D) scale, times the derivative */
                            const float z = drop ? keep_factor(keep, 4 * nt + e, p.dropout_scale) : 1.0f;
                            dpt[nt][e] = x * (dpt[nt][e] * z - dd[col]) * p.scale * grad;
                        }
                    }
            };
            if (!PEEL || edge)
                p_step(true);
            else
                p_step(false); /* inlined with a constant: no test, no branch */
            {
                uint32_t pf[BQ / 16][4];
                if (drop) {
                    float pz[BQ / 8][4];
#pragma unroll
                    for (int nt = 0; nt < BQ / 8; ++nt)
#pragma unroll
                        for (int e = 0; e < 4; ++e)
                            pz[nt][e] = pt[nt][e] * keep_factor(keep, 4 * nt + e, p.dropout_scale);
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
                        float z = drop ? keep_factor(keep, 4 * nt + e, p.dropout_scale) : 1.0f;
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

} // namespace fa_gpu::sm80

#endif
