/* backward_deterministic.cuh: the sm80 two-kernel backward without atomics, so its gradients are
 * bitwise reproducible: dkdv_kernel (dK, dV per key tile, computed transposed) and dq_kernel (dQ
 * per query tile). */
#ifndef FA_SM80_BACKWARD_DETERMINISTIC_CUH
#define FA_SM80_BACKWARD_DETERMINISTIC_CUH

#include "common/params.h"
#include "common/primitives.cuh"
#include "common/tile_geometry.cuh"
#include "common/tile_io.cuh"
#include "common/tile_class.cuh"
#include "common/dropout.cuh"
#include "common/score_mod.cuh"
#include "common/backward_step.cuh"

#include "empty_row.h"
#include "mask.h"

#if defined(__CUDACC_RTC__) /* NVRTC: the toolkit's names from common/rtc_prelude.cuh */
#include "common/rtc_prelude.cuh"
#else
#include <math_constants.h>
#endif

namespace fa_gpu::sm80 {

/* One block per (key tile, kv head, batch); warps own 16 key rows; query tiles of BQ rows of every
 * query head of the group stream through shared memory. Everything is computed transposed:
 * S^T = K Q^T, dP^T = V dO^T, so P^T and dS^T are A fragments for dV += P^T dO, dK += dS^T Q.
 * MOD: the score modifiers, and dS times the softcap's derivative. */
template <typename T, int D, int BQ, bool ALIGNED, bool MOD = false>
__global__ void __launch_bounds__(THREADS) dkdv_kernel(const fa_gpu_params p)
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
    fa_score_mod_state sm = MOD ? fa_gpu_score_mod(p, s, b, hk * p.group) : fa_score_mod_state{};

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
            sm.slope = fa_gpu_alibi_slope(p, b, h);
            softcap_all<BQ / 8>(sm, pt);
        }
        uint32_t keep[(BQ / 2 + 31) / 32] = {}; /* dropout's verdicts, bit 4 nt + e */
        if (p.dropout_threshold)
            dropout_keep_keys_by_rows<BQ / 8>(p, b, h, q0 + 2 * t4, my_key[0], keep);
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
                z[nt][e] = p.dropout_threshold ? keep_factor(keep, 4 * nt + e, p.dropout_scale) : 1.0f;
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

/* One block per (query tile, head, batch), warps own 16 query rows, key tiles stream through
 * shared memory: S = Q K^T, P = exp(S - LSE), dP = Z (dO V^T), dS = P (dP - D), dQ += dS K.
 * MOD: the score modifiers, and dS times the softcap's derivative. */
template <typename T, int D, bool ALIGNED, bool MOD = false>
__global__ void __launch_bounds__(THREADS) dq_kernel(const fa_gpu_params p)
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
    const fa_score_mod_state sm = MOD ? fa_gpu_score_mod(p, s, b, h) : fa_score_mod_state{};
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
            uint32_t keep[(BLOCK / 2 + 31) / 32] = {}; /* dropout's verdicts, bit 4 nt + e */
            if (p.dropout_threshold)
                dropout_keep_rows_by_keys_all<BLOCK / 8>(p, b, h, my_row[0], k0 + 2 * t4, keep);
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
                    float zf = p.dropout_threshold ? keep_factor(keep, 4 * nt + e, p.dropout_scale) : 1.0f;
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

} // namespace fa_gpu::sm80

#endif
