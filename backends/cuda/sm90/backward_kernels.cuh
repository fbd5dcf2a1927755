/* backward_kernels.cuh: the Hopper backward (sm_90a), FlashAttention-2's algorithm on warpgroup
 * MMA (backward.cuh launches it).
 *
 * One block of three warpgroups per (128-key tile, kv head, batch). Warpgroups 0 and 1 consume,
 * 64 keys each; warpgroup 2 produces: it copies the query-side tiles (Q and dO, BQ rows each,
 * with the rows' LSE log2(e) and D = rowsum(dO * O)) of every query tile that sees the key tile,
 * for every query head of the group, into a ring of stages guarded by "full" and "empty"
 * mbarriers, and does nothing else (its registers go to the consumers by setmaxnreg). Dense calls
 * in the plain mode (TMA): one warp of it works, one thread issuing TMA copies of the Q and dO
 * tiles through tensor maps (tensor_map.cuh) that complete on the full barrier by their byte
 * count, the warp's 32 threads copying the rows' LSE and D with cp.async; otherwise the whole
 * warpgroup copies everything with cp.async.
 * Every tile is in the 128-byte swizzled layout (common/wgmma.cuh, sw128). Per query tile, each
 * consumer computes, transposed as in the sm80 kernel so that P^T and dS^T come out as A
 * fragments:
 *   S^T = K Q^T and dP^T = V dO^T     wgmma m64n{BQ}k16, both operands K-major in shared memory
 *   P^T = exp2(S^T scale log2 e - LSE log2 e), dS^T = P^T (Z dP^T - D) scale (the sm80 element step)
 *   dV += P^T dO, dK += dS^T Q        wgmma m64n{D}k16, A from registers, B MN-major (transposed)
 * then writes dS^T to shared memory; after a named barrier between the two consumers,
 *   dQ = dS K                          wgmma m64n64k16 with both operands MN-major
 * over the block's 128 keys, each consumer a 64 x 64 part of the BQ x D tile (split along the
 * rows at BQ 128, along the columns at BQ 64); the parts go through shared memory in fp32 and one
 * thread adds the tile into the fp32 dQ accumulator with one bulk asynchronous reduction
 * (cp.reduce.async.bulk .add.f32), so dQ is not bitwise reproducible (the deterministic option
 * keeps the sm80 two-kernel path). dK and dV stay in registers until the end.
 *
 * d 64 and 128; at d 256 dK and dV of 64 keys x 256 columns would need 256 registers per thread,
 * and backward_cols_kernels.cuh's kernel, whose consumers split the columns, takes the calls. */
#ifndef FA_SM90_BACKWARD_KERNELS_CUH
#define FA_SM90_BACKWARD_KERNELS_CUH

#include "sm90/forward_kernels.cuh"
#include "common/backward_step.cuh"
/* dsum_kernel before the backward and dq_convert_kernel after it */
#include "common/backward_elementwise.cuh"

namespace fa_gpu::sm90 {

constexpr int BW_THREADS = FA_SM90_BW_THREADS, BW_CONSUMERS = FA_SM90_BW_CONSUMERS;

/* fa_gpu::zero_absent_rows over a stage's Q and dO tiles in the 128-byte swizzled layout (shared
 * addresses q, dout; ROWS rows, D / 8 chunks each): the rows whose lse2 is +inf (rows that saw no
 * key) are set to 0 by the NT consumer threads (tid); returns whether any was. The caller then
 * makes the stores visible to wgmma (fence_proxy_async) and synchronises the consumers. */
template <int D, int ROWS, int NT>
__device__ __forceinline__ bool zero_absent_rows_sw128(uint32_t q, uint32_t dout, const float *lse2, int tid)
{
    bool any = false;
#pragma unroll 8
    for (int r = 0; r < ROWS; ++r)
        any |= lse2[r] == CUDART_INF_F;
    if (!any)
        return false;
    for (int e = tid; e < ROWS * (D / 8); e += NT) {
        const int r = e / (D / 8), c = e % (D / 8);
        if (lse2[r] == CUDART_INF_F) {
            asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(q + sw128<ROWS>(r, c)), "r"(0u) : "memory");
            asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(dout + sw128<ROWS>(r, c)), "r"(0u) : "memory");
        }
    }
    return true;
}
/* keys per block: 128 at d 64 and 128 (64 per consumer), 64 at d 256 (backward_cols_kernels.cuh) */
template <int D> __host__ __device__ constexpr int bw_bn()
{
    return FA_SM90_BW_BN(D);
}
/* query rows per step: 128 at d 64 (S^T and dP^T take 64 registers each, dK and dV 32), 64 at
 * d 128 (dK and dV take 64 each) and 256 */
template <int D> __host__ __device__ constexpr int bw_bq()
{
    return FA_SM90_BW_BQ(D);
}
/* shared memory: at d 64 and 128 K, V [128][D], dS^T [128][BQ] (16-bit), dQ [BQ][D] (fp32, the
 * rows as the accumulator holds them, for one bulk reduction), then the query-side stages
 * [BQ][D] x 2; as many stages as fit (227 KiB, less 1 KiB for alignment and the static arrays),
 * at most 3 (sm90_geometry.h; d 256 as backward_cols_kernels.cuh lays it out) */
template <typename T, int D> __host__ __device__ constexpr int bw_fixed_bytes()
{
    return FA_SM90_BW_FIXED_BYTES((int)sizeof(T), D);
}
template <typename T, int D> __host__ __device__ constexpr int bw_stages()
{
    return FA_SM90_BW_STAGES((int)sizeof(T), D);
}
/* byte offset of k-step kk (16 columns) of rows row0.. in a K-major swizzled tile of ROWS rows */
__device__ __forceinline__ uint32_t kmaj(int rows, int row0, int kk)
{
    return (uint32_t)((kk / 64) * rows * 128 + row0 * 128 + (kk % 64) * 2);
}
/* registers per thread of the consumers and the producer: 256 x 224 + 128 x 56 = 384 x 168. The
 * split must not exceed the 384 x 168 registers the block holds from its launch
 * (__launch_bounds__(384, 1): 65536 / 384 rounded down to a multiple of 8): setmaxnreg.inc waits
 * until the registers it asks for are free, and a split over that total waits forever. */
constexpr int BW_CONSUMER_REGS = 224, BW_PRODUCER_REGS = 56;
static_assert(BW_CONSUMERS * BW_CONSUMER_REGS + (BW_THREADS - BW_CONSUMERS) * BW_PRODUCER_REGS <=
                  BW_THREADS * (65536 / BW_THREADS / 8 * 8),
              "the split fits the registers the block holds from its launch");

/* MODE as in the forward (fa_gpu::mode_of); MOD: the score modifiers, with dS times the softcap's
 * derivative computed together with P (dP^T is already there), in the plain mode only; TMA: the
 * producer loads Q and dO through maps (first: Q, second: dO; make_qdo_maps), else maps is unused. */
template <typename T, int D, int MODE, bool MOD = false, bool TMA = false>
__global__ void __launch_bounds__(BW_THREADS, 1) ws_backward_kernel(const fa_gpu_params p,
                                                                    const __grid_constant__ tile_maps maps)
{
    static_assert(MODE == 0 || MODE == 1, "no dropout mode: launch_backward says why");
    static_assert(D <= 128, "d 256: ws_backward_cols_kernel");
    constexpr bool LISTS = MODE == 1;
    constexpr int BW_BN = bw_bn<D>(), BQ = bw_bq<D>(), STAGES = bw_stages<T, D>();
    constexpr bool MSPLIT = BQ == 128; /* dQ split between the consumers along rows (else columns) */
    static_assert(!MOD || MODE == 0, "score modifiers in the plain mode only");
    constexpr uint32_t DSB = BW_BN * BQ * sizeof(T);
    constexpr uint32_t KVB = BW_BN * D * sizeof(T), QB = BQ * D * sizeof(T);
    extern __shared__ __align__(128) unsigned char smem_raw[];
    __shared__ __align__(8) uint64_t bars[2 * STAGES]; /* full, empty */
    __shared__ float rowv[STAGES][2][BQ];              /* LSE log2(e), D of the stage's rows */
    unsigned char *base = smem_raw + ((1024u - (fa_gpu::smem_addr(smem_raw) & 1023u)) & 1023u);
    const uint32_t k_addr = fa_gpu::smem_addr(base), v_addr = k_addr + KVB, ds_addr = v_addr + KVB,
                   dq_addr = ds_addr + DSB, st_addr = dq_addr + BQ * D * 4u;
    T *dss = reinterpret_cast<T *>(base + 2 * KVB);
    float *dqs = reinterpret_cast<float *>(base + 2 * KVB + BW_BN * BQ * sizeof(T));

    const int64_t hk = blockIdx.y, b = blockIdx.z;
    const fa_seq s = fa_sequence(p, b);
    const int64_t k0 = (int64_t)blockIdx.x * BW_BN;
    if (k0 >= s.sk)
        return;
    const fa_mask m = fa_mask_make(s.sq, s.sk, p.causal, p.window_left, p.window_right);
    const int64_t nqt = (s.sq + BQ - 1) / BQ, niter = p.group * nqt;

    /* the class of query rows [q0, q0 + BQ) of head h against keys [j0, j1) under every mask */
    auto keys_class = [&](int64_t h, int64_t q0, int64_t j0, int64_t j1) -> fa_tile_class {
        fa_tile_class c = fa_mask_classify_tile(&m, q0, q0 + BQ, j0, j1);
        if (!LISTS || c == FA_TILE_EMPTY || !p.bl_row_ptr)
            return c;
        /* the 64 x 64 list tiles the range covers: none listed, empty; all listed, the meet of
         * their classes; some, partial */
        fa_tile_class best = FA_TILE_FULL;
        bool listed = false, missing = false;
        for (int64_t qt = q0 / fa_gpu::BLOCK; qt * fa_gpu::BLOCK < imin(q0 + BQ, s.sq); ++qt)
            for (int64_t t = j0 / fa_gpu::BLOCK; t * fa_gpu::BLOCK < imin(j1, s.sk); ++t) {
                const fa_tile_class u = fa_gpu::tile_class(p, m, h, qt, t);
                if (u == FA_TILE_EMPTY) {
                    missing = true;
                } else {
                    listed = true;
                    best = fa_tile_class_meet(best, u);
                }
            }
        if (!listed)
            return FA_TILE_EMPTY;
        return fa_tile_class_meet(c, missing ? fa_tile_class_meet(best, FA_TILE_PARTIAL) : best);
    };
    /* the next (head, query tile) step at or after it that sees the block's keys; niter: none */
    auto next_iter = [&](int64_t it) -> int64_t {
        for (; it < niter; ++it)
            if (keys_class(hk * p.group + it / nqt, (it % nqt) * BQ, k0, k0 + BW_BN) != FA_TILE_EMPTY)
                return it;
        return niter;
    };

    /* the producer threads that copy: all of its warpgroup, or with TMA its first warp; the full
     * barrier counts their cp.async arrivals, and with TMA the byte-count arrival of thread 0 */
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

    if (threadIdx.x >= BW_CONSUMERS) { /* the producer */
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
            } else {
                load_sw128<T, D, BQ, COPIERS>(qa, p.q, b, s.q_start + q0, s.sq - q0, h, (int)p.d, tid);
                load_sw128<T, D, BQ, COPIERS>(qa + QB, p.dout, b, s.q_start + q0, s.sq - q0, h, (int)p.d, tid);
            }
            /* LSE log2(e) and D of the rows; rows past the end get zeros (their P is masked) */
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
    const int64_t gk0 = k0 + 64 * wg;          /* the warpgroup's first key */
    const int64_t wk0 = gk0 + 16 * (warp & 3); /* the warp's */
    const int krow = 64 * wg + 16 * (warp & 3) + g; /* the thread's first key row in the tile (and + 8) */
    fa_score_mod_state sm = MOD ? fa_gpu_score_mod(p, s, b, hk * p.group) : fa_score_mod_state{};
    /* K and V of the block, every consumer thread taking its share */
    load_sw128<T, D, BW_BN, BW_CONSUMERS>(k_addr, p.k, b, s.k_start + k0, s.sk - k0, hk, (int)p.d, threadIdx.x);
    load_sw128<T, D, BW_BN, BW_CONSUMERS>(v_addr, p.v, b, s.k_start + k0, s.sk - k0, hk, (int)p.d, threadIdx.x);
    fa_gpu::cp_async_commit();
    fa_gpu::cp_async_wait<0>();
    fence_proxy_async();
    bar_sync<1, BW_CONSUMERS>();

    float dk[D / 2], dv[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i)
        dk[i] = dv[i] = 0.0f;
    /* this consumer's part of dQ: rows dq_r0.. (64), columns dq_c0.. (64) */
    const int dq_r0 = MSPLIT ? 64 * wg : 0, dq_c0 = MSPLIT ? 0 : 64 * wg;
    const uint32_t ds_a = ds_addr + (MSPLIT ? (uint32_t)wg * BW_BN * 128u : 0u); /* its 64 queries of dS^T */
    const uint32_t k_b = k_addr + (MSPLIT ? 0u : (uint32_t)wg * BW_BN * 128u);   /* its 64 columns of K */

    int64_t n = 0;
    for (int64_t it = next_iter(0); it < niter; it = next_iter(it + 1), ++n) {
        const int st = (int)(n % STAGES);
        const int64_t h = hk * p.group + it / nqt, q0 = (it % nqt) * BQ;
        const uint32_t qa = st_addr + 2u * QB * (uint32_t)st, da = qa + QB;
        const float *lse2 = rowv[st][0], *dd = rowv[st][1];
        mbar_wait(full0 + 8u * st, (uint32_t)((n / STAGES) & 1));
        fence_proxy_async();
        /* rows that saw no key (a tile with one is not FULL for the block's keys): Q, dO zeroed
         * before either consumer's wgmma reads them (core/empty_row.h) */
        if ((keys_class(h, q0, k0, k0 + BW_BN) != FA_TILE_FULL || q0 + BQ > s.sq) &&
            zero_absent_rows_sw128<D, BQ, BW_CONSUMERS>(qa, da, lse2, (int)threadIdx.x)) { /* uniform */
            fence_proxy_async();
            bar_sync<4, BW_CONSUMERS>();
        }

        uint32_t df[BQ / 16][4]; /* dS^T as A fragments */
        const fa_tile_class gcls = keys_class(h, q0, gk0, gk0 + 64);
        if (gcls != FA_TILE_EMPTY) {
            float pt[BQ / 8][4], dpt[BQ / 8][4];
            float(&ptf)[BQ / 2] = *reinterpret_cast<float(*)[BQ / 2]>(&pt[0][0]);
            float(&dptf)[BQ / 2] = *reinterpret_cast<float(*)[BQ / 2]>(&dpt[0][0]);
            fence();
#pragma unroll
            for (int kk = 0; kk < D; kk += 16) {
                ss<T, BQ>::run(ptf, desc_sw128(k_addr + kmaj(BW_BN, 64 * wg, kk), 16u, 1024u),
                               desc_sw128(qa + kmaj(BQ, 0, kk), 16u, 1024u), kk > 0);
                ss<T, BQ>::run(dptf, desc_sw128(v_addr + kmaj(BW_BN, 64 * wg, kk), 16u, 1024u),
                               desc_sw128(da + kmaj(BQ, 0, kk), 16u, 1024u), kk > 0);
            }
            commit();
            wait<0>();

            const fa_tile_class cls = keys_class(h, q0, wk0, wk0 + 16);
            const bool edge = cls != FA_TILE_FULL || wk0 + 16 > s.sk || q0 + BQ > s.sq;
            const bool check_blocks = LISTS && p.bm_bits && cls != FA_TILE_FULL;
            float alibi_d0 = 0.0f;
            if constexpr (MOD)
                alibi_d0 = fa_gpu::modify_transposed_scores<BQ / 8>(sm, p, b, h, pt, q0, wk0);
            /* P^T = exp2(S^T scale log2 e - LSE log2 e), masked. Without the score modifiers the
             * loop is peeled: one copy, for the steps where some element may be hidden (edge),
             * tests each element, the other has no branch per element (a branch around each
             * element's test costs instruction fetches in the hot loop). With them the registers
             * do not allow two copies: one loop tests edge per element. */
            auto p_step = [&](const bool masked) {
#pragma unroll
                for (int nt = 0; nt < BQ / 8; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int col = nt * 8 + 2 * t4 + (e & 1);
                        float sx = pt[nt][e], grad = 1.0f;
                        if constexpr (MOD)
                            sx = fa_gpu::modified_score_at(sm, sx, alibi_d0 + fa_gpu::transposed_offset(nt, e), grad);
                        float x = fa_gpu::fast_exp2(sx * p.scale_log2 - lse2[col]);
                        if (masked && edge &&
                            (cls == FA_TILE_EMPTY ||
                             !fa_gpu::visible(p, m, h, q0 + col, wk0 + g + (e >> 1) * 8, check_blocks))) {
                            x = 0.0f;
                            dpt[nt][e] = 0.0f; /* dS = 0 (0 - D) = 0 below even where V is NaN */
                            grad = 1.0f;
                        }
                        pt[nt][e] = x;
                        if constexpr (MOD) /* dS^T = P^T (dP^T - D) scale, times the derivative */
                            dpt[nt][e] = x * (dpt[nt][e] - dd[col]) * p.scale * grad;
                    }
            };
            if (MOD || edge)
                p_step(true);
            else
                p_step(false); /* inlined with a constant: no test, no branch */
            uint32_t pf[BQ / 16][4];
            fa_gpu::acc_to_a<T, BQ>(pf, pt);
            /* dS^T = P^T (dP^T - D) scale (MOD: computed above) */
            if constexpr (!MOD) {
#pragma unroll
                for (int nt = 0; nt < BQ / 8; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int col = nt * 8 + 2 * t4 + (e & 1);
                        dpt[nt][e] = pt[nt][e] * (dpt[nt][e] - dd[col]) * p.scale;
                    }
            }
            fa_gpu::acc_to_a<T, BQ>(df, dpt);
            /* dV += P^T dO and dK += dS^T Q: dO and Q [BQ][D] are MN-major B operands */
            fence();
#pragma unroll
            for (int kk = 0; kk < BQ; kk += 16)
                rs<T, D>::run(dv, pf[kk / 16], desc_sw128(da + (uint32_t)kk * 128u, BQ * 128u, 1024u));
#pragma unroll
            for (int kk = 0; kk < BQ; kk += 16)
                rs<T, D>::run(dk, df[kk / 16], desc_sw128(qa + (uint32_t)kk * 128u, BQ * 128u, 1024u));
            commit();
        } else {
#pragma unroll
            for (int i = 0; i < BQ / 16; ++i)
                df[i][0] = df[i][1] = df[i][2] = df[i][3] = 0u;
        }
        /* dS^T [128 keys][BQ] (swizzled) for the dQ product: query pairs in one word */
#pragma unroll
        for (int nt = 0; nt < BQ / 8; ++nt)
#pragma unroll
            for (int r = 0; r < 2; ++r)
                *reinterpret_cast<uint32_t *>(reinterpret_cast<unsigned char *>(dss) + sw128<BW_BN>(krow + 8 * r, nt) +
                                              4 * t4) = df[nt / 2][(nt & 1) * 2 + r];
        fence_proxy_async();
        if (threadIdx.x == 0)
            bulk_wait_read<0>(); /* the previous step's dQ tile has been read out of shared memory */
        bar_sync<2, BW_CONSUMERS>();

        /* dQ part = dS K over the 128 keys: dS^T [keys][queries] and K [keys][D] both MN-major */
        float dq[32];
        fence();
#pragma unroll
        for (int kk = 0; kk < BW_BN; kk += 16)
            ss_tt<T, 64>::run(dq, desc_sw128(ds_a + (uint32_t)kk * 128u, BW_BN * 128u, 1024u),
                              desc_sw128(k_b + (uint32_t)kk * 128u, BW_BN * 128u, 1024u), kk > 0);
        commit();
        wait<0>();                     /* dV, dK and dQ */
        mbar_arrive(empty0 + 8u * st); /* done with the stage's Q and dO */
        const int r0 = dq_r0 + 16 * (warp & 3) + g;
        /* rows r0 and r0 + 8 share their swizzle (the tile's first row in dq_accum, plus r0, mod 8) */
        const int sw = fa_gpu::dq_swizzle(((p.cu_q ? s.q_start : b * p.seqlen_q) + q0 + r0) & 7);
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
            for (int r = 0; r < 2; ++r)
                *reinterpret_cast<float2 *>(dqs + (r0 + 8 * r) * D + ((dq_c0 + 8 * j + 2 * t4) ^ sw)) =
                    make_float2(dq[4 * j + 2 * r], dq[4 * j + 2 * r + 1]);
        fence_proxy_async();
        bar_sync<3, BW_CONSUMERS>();
        if (threadIdx.x == 0) { /* the tile into the accumulator: one bulk reduction */
            const int64_t rows = imin(BQ, s.sq - q0);
            bulk_reduce_add_f32(p.dq_accum + (h * p.total_q + (p.cu_q ? s.q_start + q0 : b * p.seqlen_q + q0)) * D,
                                dq_addr, (uint32_t)(rows * D * 4));
            bulk_commit();
        }
    }
    if (threadIdx.x == 0)
        bulk_wait<0>();

    /* dK, dV: thread rows krow and krow + 8 of the tile (the flat accumulators in the mma layout) */
    const int64_t rows[2] = {k0 + krow, k0 + krow + 8};
    fa_gpu::store_dkdv<T, D>(p, s, b, hk, rows, t4, reinterpret_cast<const float(*)[4]>(dk),
                              reinterpret_cast<const float(*)[4]>(dv));
}

} // namespace fa_gpu::sm90

#endif /* FA_SM90_BACKWARD_KERNELS_CUH */
