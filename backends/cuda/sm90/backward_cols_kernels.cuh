/* backward_cols_kernels.cuh: the Hopper backward at d 256 (d 129..256 padded), its two consumer
 * warpgroups splitting the output columns (backward.cuh launches it).
 *
 * ws_backward_kernel's split of 64 keys per consumer would keep dK and dV of 64 keys x 256
 * columns, 256 registers per thread. Here one block of three warpgroups takes 64 keys, and each
 * consumer keeps dK and dV of all 64 keys for its 128 of the 256 columns (128 registers per
 * thread), so every product is computed once (two blocks per key tile, each recomputing S^T and
 * dP^T for its half of the columns, would compute seven products where the algorithm has five).
 * FlashAttention-3 splits its d 256 backward the same way. Per step of 64 query rows (Q and dO
 * staged by the producer warpgroup exactly as in ws_backward_kernel, by TMA where the views
 * allow):
 *   S^T = K Q^T, dP^T = V dO^T    wgmma m64n32k16: consumer w takes the 32 queries 32 w.., all
 *                                  64 keys, over the 256 columns
 *   P^T, dS^T                      the sm80 element step, as in ws_backward_kernel
 *   P^T, dS^T -> shared memory     [64 keys][64 queries] each, both consumers' halves, 16-bit,
 *                                  two buffers used on alternate steps
 *   dV += P^T dO, dK += dS^T Q     wgmma m64n128k16, A (P^T, dS^T) K-major and B (dO, Q) MN-major
 *                                  from shared memory: consumer w's columns 128 w..
 *   dQ = dS K                      wgmma m64n128k16, both MN-major: the 64 queries x consumer w's
 *                                  128 columns
 * and dQ goes straight from the registers into the fp32 accumulator by vector reductions, so no
 * shared tile of 64 KB is needed and dQ is not bitwise reproducible. The accumulator keeps each
 * 64-row tile in the consumers' register order (acc_offset: consumer w's thread t adds its four
 * values of column block j at 16 bytes ((j x 128 + t)), so a warp's reduction covers 512
 * contiguous bytes, where into row-major rows it would cover 8 rows), each sequence's tiles from
 * row FA_SM90_BW_TILE_ROW0; dq_convert_cols_kernel reads it back. Each step issues the first half
 * of its reductions and keeps the second half in registers until the next step's S^T and dP^T are
 * issued, so that the reductions drain while the tensor cores work rather than in a burst that
 * stalls the warps on the memory queue. Plain calls only (no block mask, no dropout), with or
 * without the score modifiers (MOD). */
#ifndef FA_SM90_BACKWARD_COLS_KERNELS_CUH
#define FA_SM90_BACKWARD_COLS_KERNELS_CUH

#include "sm90/backward_kernels.cuh"

namespace fa_gpu::sm90 {

/* the fp32 dQ accumulator's offset, in floats, of consumer w's thread t's value k (0..3: rows r, r,
 * r + 8, r + 8 at columns c, c + 1) of column block j (0..15) in the 64-row tile whose first
 * accumulator row is row0, query head h; rows are 256 floats, acc_rows of them per head */
__device__ __forceinline__ int64_t acc_offset(int64_t h, int64_t acc_rows, int64_t row0, int w, int j, int t, int k)
{
    return (h * acc_rows + row0) * 256 + w * 8192 + (j * 128 + t) * 4 + k;
}

template <typename T, bool MOD, bool TMA>
__global__ void __launch_bounds__(BW_THREADS, 1) ws_backward_cols_kernel(const fa_gpu_params p,
                                                                         const __grid_constant__ tile_maps maps)
{
    constexpr int D = 256, BN = bw_bn<D>(), BQ = bw_bq<D>(), STAGES = bw_stages<T, D>();
    constexpr int QW = BQ / 2, CW = D / 2; /* a consumer's queries in S^T, its output columns */
    constexpr uint32_t KVB = BN * D * sizeof(T), PB = BN * BQ * sizeof(T), QB = BQ * D * sizeof(T);
    static_assert(BN == 64 && BQ == 64 && STAGES >= 2, "the tiles below");
    static_assert(bw_fixed_bytes<T, D>() == 2 * KVB + 4 * PB, "the layout below");
    extern __shared__ __align__(128) unsigned char smem_raw[];
    __shared__ __align__(8) uint64_t bars[2 * STAGES]; /* full, empty */
    __shared__ float rowv[STAGES][2][BQ];              /* LSE log2(e), D of the stage's rows */
    unsigned char *base = smem_raw + ((1024u - (fa_gpu::smem_addr(smem_raw) & 1023u)) & 1023u);
    /* K, V; P^T and dS^T of even steps, then of odd ones; the stages */
    const uint32_t k_addr = fa_gpu::smem_addr(base), v_addr = k_addr + KVB, pd_addr = v_addr + KVB,
                   st_addr = pd_addr + 4 * PB;

    const int64_t hk = blockIdx.y, b = blockIdx.z;
    const fa_seq s = fa_sequence(p, b);
    const int64_t k0 = (int64_t)blockIdx.x * BN;
    if (k0 >= s.sk)
        return;
    const fa_mask m = fa_mask_make(s.sq, s.sk, p.causal, p.window_left, p.window_right);
    const int64_t nqt = (s.sq + BQ - 1) / BQ, niter = p.group * nqt;
    /* the next (head, query tile) step at or after it that sees the block's keys; niter: none */
    auto next_iter = [&](int64_t it) -> int64_t {
        for (; it < niter; ++it) {
            const int64_t q0 = (it % nqt) * BQ;
            if (fa_mask_classify_tile(&m, q0, q0 + BQ, k0, k0 + BN) != FA_TILE_EMPTY)
                return it;
        }
        return niter;
    };

    constexpr int COPIERS = TMA ? 32 : BW_THREADS - BW_CONSUMERS;
    const uint32_t full0 = fa_gpu::smem_addr(&bars[0]), empty0 = full0 + 8u * STAGES;
    if (threadIdx.x == 0) {
        for (int i = 0; i < STAGES; ++i) {
            mbar_init(full0 + 8u * i, COPIERS + (TMA ? 1 : 0));
            mbar_init(empty0 + 8u * i, BW_CONSUMERS);
        }
        if constexpr (TMA)
            fence_mbar_init();
    }
    __syncthreads();

    if (threadIdx.x >= BW_CONSUMERS) { /* the producer, as in ws_backward_kernel */
        setmaxnreg_dec<BW_PRODUCER_REGS>();
        const int tid = threadIdx.x - BW_CONSUMERS;
        if (tid >= COPIERS)
            return;
        int64_t n = 0;
        for (int64_t it = next_iter(0); it < niter; it = next_iter(it + 1), ++n) {
            const int st = (int)(n % STAGES);
            if (n >= STAGES)
                mbar_wait(empty0 + 8u * st, (uint32_t)((n / STAGES - 1) & 1));
            const int64_t h = hk * p.group + it / nqt, q0 = (it % nqt) * BQ;
            const uint32_t qa = st_addr + 2u * QB * (uint32_t)st;
            if constexpr (TMA) {
                if (tid == 0) {
                    mbar_arrive_expect_tx(full0 + 8u * st, 2u * QB);
                    tma_load_tile<D, BQ>(qa, &maps.first, full0 + 8u * st, (int)q0, (int)h, (int)b);
                    tma_load_tile<D, BQ>(qa + QB, &maps.second, full0 + 8u * st, (int)q0, (int)h, (int)b);
                }
            } else { /* Q, then dO: one copy of the loop (the producer has 56 registers) */
#pragma unroll 1
                for (int t = 0; t < 2; ++t)
                    load_sw128<T, D, BQ, COPIERS>(qa + QB * (uint32_t)t, t ? p.dout : p.q, b, s.q_start + q0, s.sq - q0,
                                                  h, (int)p.d, tid);
            }
            for (int r = tid; r < 2 * BQ; r += COPIERS) {
                const int64_t i = q0 + r % BQ;
                const float *src = (r < BQ ? p.lse2 : p.dsum) + h * p.total_q + (p.cu_q ? s.q_start + i : b * p.seqlen_q + i);
                fa_gpu::cp_async4(&rowv[st][r / BQ][r % BQ], i < s.sq ? src : p.dsum, i < s.sq);
            }
            mbar_arrive_cp_async(full0 + 8u * st);
        }
        fa_gpu::cp_async_wait<0>();
        return;
    }

    setmaxnreg_inc<BW_CONSUMER_REGS>();
    const int warp = threadIdx.x / 32, wg = warp / 4, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
    const int krow = 16 * (warp & 3) + g; /* the thread's first key row in the tile (and + 8) */
    const int64_t wk0 = k0 + 16 * (warp & 3); /* the warp's first key */
    const int qc = QW * wg, col0 = CW * wg;   /* the consumer's first query of a step, first column */
    fa_score_mod_state sm = MOD ? fa_gpu_score_mod(p, s, b, hk * p.group) : fa_score_mod_state{};
    load_sw128<T, D, BN, BW_CONSUMERS>(k_addr, p.k, b, s.k_start + k0, s.sk - k0, hk, (int)p.d, threadIdx.x);
    load_sw128<T, D, BN, BW_CONSUMERS>(v_addr, p.v, b, s.k_start + k0, s.sk - k0, hk, (int)p.d, threadIdx.x);
    fa_gpu::cp_async_commit();
    fa_gpu::cp_async_wait<0>();
    fence_proxy_async();
    bar_sync<1, BW_CONSUMERS>();

    float dk[CW / 2], dv[CW / 2];
#pragma unroll
    for (int i = 0; i < CW / 2; ++i)
        dk[i] = dv[i] = 0.0f;
    const uint32_t kc = k_addr + (uint32_t)(col0 / 64) * BN * 128u; /* K's columns col0.. */
    const uint32_t cb = (uint32_t)(col0 / 64) * BQ * 128u;          /* a stage tile's columns col0.. */
    /* the previous step's second half of dQ and where it goes (the first step's: zeros into its own
     * tile, so that no branch guards the reductions) */
    float dqh[CW / 4];
    float *pend = nullptr;
#pragma unroll
    for (int i = 0; i < CW / 4; ++i)
        dqh[i] = 0.0f;
    auto flush = [&]() {
#pragma unroll
        for (int j = 0; j < CW / 16; ++j)
            fa_gpu::red_add4(pend + (CW / 16 + j) * 512, dqh[4 * j], dqh[4 * j + 1], dqh[4 * j + 2], dqh[4 * j + 3]);
    };

    int64_t n = 0;
    for (int64_t it = next_iter(0); it < niter; it = next_iter(it + 1), ++n) {
        const int st = (int)(n % STAGES);
        const int64_t h = hk * p.group + it / nqt, q0 = (it % nqt) * BQ;
        const uint32_t qa = st_addr + 2u * QB * (uint32_t)st, da = qa + QB;
        const uint32_t pt_addr = pd_addr + 2u * PB * (uint32_t)(n & 1), ds_addr = pt_addr + PB;
        const float *lse2 = rowv[st][0] + qc, *dd = rowv[st][1] + qc; /* the consumer's queries' */
        pend = n == 0 ? p.dq_accum + acc_offset(h, FA_SM90_BW_ACC_ROWS(D, p.total_q, p.batch),
                                                FA_SM90_BW_TILE_ROW0(p.cu_q ? s.q_start : b * p.seqlen_q, b) + q0, wg,
                                                0, (int)threadIdx.x % 128, 0)
                      : pend;
        mbar_wait(full0 + 8u * st, (uint32_t)((n / STAGES) & 1));
        fence_proxy_async();
        /* rows that saw no key: Q, dO zeroed before either consumer's wgmma reads them */
        if ((fa_mask_classify_tile(&m, q0, q0 + BQ, k0, k0 + BN) != FA_TILE_FULL || q0 + BQ > s.sq) &&
            zero_absent_rows_sw128<D, BQ, BW_CONSUMERS>(qa, da, rowv[st][0], (int)threadIdx.x)) { /* uniform */
            fence_proxy_async();
            bar_sync<4, BW_CONSUMERS>();
        }

        uint32_t pf[QW / 16][4], df[QW / 16][4]; /* P^T and dS^T, 16-bit pairs of queries */
        const int64_t qw0 = q0 + qc;             /* the consumer's first query */
        /* S^T and dP^T on every step (a wgmma under the branch below would be serialized); the
         * previous step's second half of dQ goes out while they run */
        float pt[QW / 8][4], dpt[QW / 8][4];
        float(&ptf)[QW / 2] = *reinterpret_cast<float(*)[QW / 2]>(&pt[0][0]);
        float(&dptf)[QW / 2] = *reinterpret_cast<float(*)[QW / 2]>(&dpt[0][0]);
        fence();
#pragma unroll
        for (int kk = 0; kk < D; kk += 16) {
            ss<T, QW>::run(ptf, desc_sw128(k_addr + kmaj(BN, 0, kk), 16u, 1024u),
                           desc_sw128(qa + kmaj(BQ, qc, kk), 16u, 1024u), kk > 0);
            ss<T, QW>::run(dptf, desc_sw128(v_addr + kmaj(BN, 0, kk), 16u, 1024u),
                           desc_sw128(da + kmaj(BQ, qc, kk), 16u, 1024u), kk > 0);
        }
        commit();
        flush();
        wait<0>();
        if (fa_mask_classify_tile(&m, qw0, qw0 + QW, k0, k0 + BN) != FA_TILE_EMPTY) {
            const fa_tile_class cls = fa_mask_classify_tile(&m, qw0, qw0 + QW, wk0, wk0 + 16);
            const bool edge = cls != FA_TILE_FULL || wk0 + 16 > s.sk || qw0 + QW > s.sq;
            float alibi_d0 = 0.0f;
            if constexpr (MOD)
                alibi_d0 = fa_gpu::modify_transposed_scores<QW / 8>(sm, p, b, h, pt, qw0, wk0);
            /* P^T = exp2(S^T scale log2 e - LSE log2 e), masked; dS^T = P^T (dP^T - D) scale (times
             * the softcap's derivative); peeled as in ws_backward_kernel */
            auto p_step = [&](const bool masked) {
#pragma unroll
                for (int nt = 0; nt < QW / 8; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int col = nt * 8 + 2 * t4 + (e & 1);
                        float sx = pt[nt][e], grad = 1.0f;
                        if constexpr (MOD)
                            sx = fa_gpu::modified_score_at(sm, sx, alibi_d0 + fa_gpu::transposed_offset(nt, e), grad);
                        float x = fa_gpu::fast_exp2(sx * p.scale_log2 - lse2[col]);
                        if (masked && edge &&
                            (cls == FA_TILE_EMPTY ||
                             !fa_gpu::visible(p, m, h, qw0 + col, wk0 + g + (e >> 1) * 8, false))) {
                            x = 0.0f;
                            dpt[nt][e] = 0.0f;
                            grad = 1.0f;
                        }
                        pt[nt][e] = x;
                        dpt[nt][e] = x * (dpt[nt][e] - dd[col]) * p.scale * grad;
                    }
            };
            if (MOD || edge)
                p_step(true);
            else
                p_step(false);
            fa_gpu::acc_to_a<T, QW>(pf, pt);
            fa_gpu::acc_to_a<T, QW>(df, dpt);
        } else {
#pragma unroll
            for (int i = 0; i < QW / 16; ++i)
                pf[i][0] = pf[i][1] = pf[i][2] = pf[i][3] = df[i][0] = df[i][1] = df[i][2] = df[i][3] = 0u;
        }
        /* P^T and dS^T [64 keys][64 queries] (swizzled): the consumer's 32 queries, pairs in one word */
#pragma unroll
        for (int nt = 0; nt < QW / 8; ++nt)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const uint32_t o = sw128<BN>(krow + 8 * r, qc / 8 + nt) + 4u * (uint32_t)t4;
                asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(pt_addr + o), "r"(pf[nt / 2][(nt & 1) * 2 + r]) : "memory");
                asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(ds_addr + o), "r"(df[nt / 2][(nt & 1) * 2 + r]) : "memory");
            }
        fence_proxy_async();
        bar_sync<2, BW_CONSUMERS>();

        /* dV += P^T dO, dK += dS^T Q over the 64 queries, the consumer's columns; then its part of
         * dQ = dS K over the 64 keys */
        float dq[CW / 2];
        fence();
#pragma unroll
        for (int kk = 0; kk < BQ; kk += 16)
            ss_nt<T, CW>::run(dv, desc_sw128(pt_addr + kmaj(BN, 0, kk), 16u, 1024u),
                              desc_sw128(da + cb + (uint32_t)kk * 128u, BQ * 128u, 1024u), 1);
#pragma unroll
        for (int kk = 0; kk < BQ; kk += 16)
            ss_nt<T, CW>::run(dk, desc_sw128(ds_addr + kmaj(BN, 0, kk), 16u, 1024u),
                              desc_sw128(qa + cb + (uint32_t)kk * 128u, BQ * 128u, 1024u), 1);
#pragma unroll
        for (int kk = 0; kk < BN; kk += 16)
            ss_tt<T, CW>::run(dq, desc_sw128(ds_addr + (uint32_t)kk * 128u, BN * 128u, 1024u),
                              desc_sw128(kc + (uint32_t)kk * 128u, BN * 128u, 1024u), kk > 0);
        commit();
        wait<0>();
        mbar_arrive(empty0 + 8u * st); /* done with the stage's Q and dO */

        /* the tile's dQ into the accumulator in register order (rows past the sequence land in its
         * padding, which nothing reads) */
        float *acc = p.dq_accum + acc_offset(h, FA_SM90_BW_ACC_ROWS(D, p.total_q, p.batch),
                                             FA_SM90_BW_TILE_ROW0(p.cu_q ? s.q_start : b * p.seqlen_q, b) + q0, wg, 0,
                                             (int)threadIdx.x % 128, 0);
        /* its first half now, the second after the next step's S^T and dP^T are issued */
#pragma unroll
        for (int j = 0; j < CW / 16; ++j)
            fa_gpu::red_add4(acc + j * 512, dq[4 * j], dq[4 * j + 1], dq[4 * j + 2], dq[4 * j + 3]);
#pragma unroll
        for (int i = 0; i < CW / 4; ++i) /* an add, not a move: registers a wgmma defined would make ptxas
                                          * wait for the next step's S^T before reading them */
            dqh[i] = __fadd_rn(dq[CW / 4 + i], 0.0f);
        pend = acc;
    }
    if (n > 0)
        flush();

    const int64_t rows[2] = {k0 + krow, k0 + krow + 8};
    fa_gpu::store_dkdv<T, CW>(p, s, b, hk, rows, t4, reinterpret_cast<const float(*)[4]>(dk),
                              reinterpret_cast<const float(*)[4]>(dv), col0);
}

/* dQ (T, or fp32 for p.out_f32) from ws_backward_cols_kernel's accumulator of tiles: one thread per
 * element of one sequence's rows (256 columns a row), as common/backward_elementwise.cuh's
 * dq_convert_kernel does for the row-major one. */
template <typename T> __global__ void dq_convert_cols_kernel(const fa_gpu_params p)
{
    const int64_t b = blockIdx.z, h = blockIdx.y;
    const fa_seq s = fa_sequence(p, b);
    const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, i = e / 256;
    const int c = (int)(e % 256);
    if (i >= s.sq || c >= p.d)
        return;
    /* the tile's row r is thread 32 (r / 16) + 4 (r % 8) + t4's value 2 ((r / 8) % 2) + c % 2 */
    const int r = (int)(i % 64), cc = c % 128;
    const int t = 32 * (r / 16) + 4 * (r % 8) + (cc % 8) / 2, k = 2 * ((r / 8) % 2) + cc % 2;
    const int64_t row0 = FA_SM90_BW_TILE_ROW0(p.cu_q ? s.q_start : b * p.seqlen_q, b) + i / 64 * 64;
    const float v = p.dq_accum[acc_offset(h, FA_SM90_BW_ACC_ROWS(256, p.total_q, p.batch), row0, c / 128, cc / 8, t, k)];
    /* a row that saw no key: dQ = 0 (its dS is 0, but 0 times a NaN in K reached the accumulator) */
    const float l = static_cast<const float *>(p.lse.data)[b * p.lse.sb + h * p.lse.sh + (s.q_start + i) * p.lse.ss];
    fa_gpu::store_out<T>(p.dq.data, b * p.dq.sb + (s.q_start + i) * p.dq.ss + h * p.dq.sh + c,
                         fa_row_output(v, fa_row_absent(l) ? 0.0f : 1.0f), p.out_f32);
}

} // namespace fa_gpu::sm90

#endif /* FA_SM90_BACKWARD_COLS_KERNELS_CUH */
