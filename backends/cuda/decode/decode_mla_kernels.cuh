/* decode_mla_kernels.cuh: fa_forward_kvcache's decode kernel for head dims above 256 (multi-head
 * latent attention, MLA: q and k of d <= 576, v of d_v <= 512; sm_80 and later, fp16 / bf16,
 * 16-byte aligned rows; CUDA only), beside the tensor-core kernel of decode_mma_kernels.cuh, whose
 * start (begin_block), check, append and combine kernels it shares.
 *
 * One block of W = 8 warps per (sequence, kv head, tile of 16 of that head's query rows, split).
 * A query row of 576 channels is too wide for one warp to hold its scores' operands and a 512-wide
 * output beside them, so the warps share each step of KS = 32 keys:
 *   - the step's K and V rows land in a ring of two stages (cp.async; eight threads a row, so one
 *     page lookup per row), the next step's copies issued as this one starts;
 *   - warps 0..3 each compute the scores of 8 keys against the 16 rows (mma.sync m16n8k16 over the
 *     whole d), apply the score modifiers, the scale and the mask, and leave them in shared memory;
 *   - after a barrier every warp runs the same online softmax over the 32 scores of its rows (so
 *     the maxima and sums agree in every warp without a merge), and adds P V for its own 64 of the
 *     d_v output channels.
 * At the end each warp writes its channels: O and LSE, or the split's partials for the combine. A
 * learnable sink is folded in here when the keys are not split, else by the combine. */
#ifndef FA_GPU_DECODE_MLA_KERNELS_CUH
#define FA_GPU_DECODE_MLA_KERNELS_CUH

#include "decode/decode_mla_epilogue.cuh"

namespace fa_gpu {
namespace decode {

template <int D, int DV, int KS> struct mla_shape { /* common/kv_geometry.h's FA_KV_MLA_* */
    static constexpr int WARPS = FA_KV_MLA_WARPS, THREADS = 32 * WARPS, RT = 16;
    static constexpr int LDK = D + 8, LDV = DV + 8; /* row pitches: ldmatrix without bank conflicts */
    static constexpr int NV = DV / WARPS;           /* output channels per warp */
    static constexpr int SCORE_WARPS = KS / 8;      /* warps computing scores, 8 keys each */
    static constexpr int ROW_THREADS = THREADS / KS; /* threads copying one key row */
    static constexpr int STAGE = KS * (LDK + LDV);  /* elements of one stage (K rows, then V rows) */
    static constexpr int SMEM = 2 * STAGE * 2 + RT * LDK * 2 + RT * KS * 4;
    static_assert(SMEM == FA_KV_MLA_SMEM, "one shared-memory size");
    static_assert(D % 32 == 0 && DV % 16 == 0 && NV % 16 == 0, "whole k32 chunks of d and n16 tiles of d_v per warp");
    static_assert(SCORE_WARPS <= WARPS && THREADS % KS == 0, "the warps cover the step's keys and copies");
    static_assert((D / 8) % ROW_THREADS == 0 && (DV / 8) % ROW_THREADS == 0, "whole 16-byte chunks per thread");
};

template <class S, int D, int DV, int KS>
__global__ __launch_bounds__(32 * FA_KV_MLA_WARPS, 1) void decode_mla_kernel(const fa_gpu_kv_params p)
{
    typedef typename S::T T;
    typedef typename mma_elem<S::bf16>::type E;
    typedef mla_shape<D, DV, KS> shape;
    constexpr int RT = shape::RT, LDK = shape::LDK, LDV = shape::LDV, NV = shape::NV, THREADS = shape::THREADS;
    constexpr int RTH = shape::ROW_THREADS;
    extern __shared__ __align__(16) unsigned char smem[];
    E *ring = reinterpret_cast<E *>(smem);                   /* [2][KS][LDK] K, [KS][LDV] V per stage */
    E *q_s = ring + 2 * shape::STAGE;                        /* [RT][LDK] */
    float *s_s = reinterpret_cast<float *>(q_s + RT * LDK);  /* [RT][KS] the step's scores, log2 units */
    __shared__ int64_t lo_s[RT], hi_s[RT];
    __shared__ fa_score_mod_state mod_s[RT];
    /* with begin_block's row offsets */
    static_assert(sizeof lo_s + sizeof hi_s + sizeof mod_s + RT * sizeof(int64_t) <= FA_KV_MLA_STATIC_BYTES,
                  "static shared memory within FA_KV_MLA_STATIC_BYTES");

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t4 = lane % 4;
    const uint32_t bx = blockIdx.x, tiles = (uint32_t)p.row_tiles, hkv = (uint32_t)p.heads_kv;
    const int64_t tile = bx % tiles, bh = bx / tiles;
    const int64_t hk = (uint32_t)bh % hkv, b = (uint32_t)bh / hkv, split = blockIdx.y, sn = p.seqlen_new;
    const bool has_mod = fa_score_mod_factors_active(p.mod);
    const T *kc = static_cast<const T *>(p.k_cache.data), *vc = static_cast<const T *>(p.v_cache.data);

    const block_keys keys = begin_block<S, RT, D, THREADS>(
        p, b, hk, tile, split, lo_s, hi_s, mod_s,
        [&](int r, int c, float x) { q_s[r * LDK + c] = fa_gpu::elem<E>::from_float(x); });
    if (keys.skip)
        return;
    const int64_t k_begin = keys.k_begin, k_end = keys.k_end;
    const int64_t steps = k_end > k_begin ? (k_end - k_begin + KS - 1) / KS : 0;

    /* step n's rows into stage n % 2: thread tid copies 16-byte chunks tid % RTH, + RTH, ... of key
     * row tid / RTH, K then V (rows past k_end and channels past d / d_v zero-filled) */
    const int crow = tid / RTH, cch = (tid % RTH) * 8;
    auto issue = [&](const int64_t n) {
        E *kt = ring + (n % 2) * shape::STAGE, *vt = kt + KS * LDK;
        const int64_t t = k_begin + n * KS + crow;
        const bool in = t < k_end;
        const T *ks = kc + (in ? token_offset(p, p.k_cache, b, t, hk) : 0);
        const T *vs = vc + (in ? token_offset(p, p.v_cache, b, t, hk) : 0);
#pragma unroll
        for (int c = cch; c < D; c += 8 * RTH) {
            const bool ok = in && c < p.d;
            fa_gpu::cp_async16_prefetch<128>(kt + crow * LDK + c, ok ? ks + c : kc, ok);
        }
#pragma unroll
        for (int c = cch; c < DV; c += 8 * RTH) {
            const bool ok = in && c < p.d_v;
            fa_gpu::cp_async16_prefetch<128>(vt + crow * LDV + c, ok ? vs + c : vc, ok);
        }
        fa_gpu::cp_async_commit();
    };
    if (steps > 0)
        issue(0);

    float o[NV / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < NV / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e)
            o[n][e] = 0.0f;

    for (int64_t n = 0; n < steps; ++n) {
        const int64_t t0 = k_begin + n * KS;
        fa_gpu::cp_async_wait<0>();
        /* step n is in every thread's view, and every warp is done with step n - 1 (its stage, which
         * step n + 1 takes, and the scores) */
        FA_SYNC();
        if (n + 1 < steps)
            issue(n + 1);
        const E *kt = ring + (n % 2) * shape::STAGE, *vt = kt + KS * LDK;

        if (warp < shape::SCORE_WARPS) { /* S (16 rows x keys 8 warp .. + 8) = Q K^T, two chains */
            float sa[4] = {0.0f, 0.0f, 0.0f, 0.0f}, sb[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int kk = 0; kk < D; kk += 32) {
                uint32_t qa[4], qb[4], kf[4];
                fa_gpu::load_a(qa, q_s, LDK, 0, kk);
                fa_gpu::load_a(qb, q_s, LDK, 0, kk + 16);
                /* B fragments of keys 8 warp .. + 8 over channels kk .. kk + 32: matrices 0, 1 the
                 * first k16 chunk, 2, 3 the second */
                fa_gpu::ldmatrix_x4(kf, kt + (warp * 8 + (lane & 7)) * LDK + kk + (lane >> 3) * 8);
                fa_gpu::elem<E>::mma(sa, qa, kf[0], kf[1]);
                fa_gpu::elem<E>::mma(sb, qb, kf[2], kf[3]);
            }
            /* element e: row g + 8 (e / 2), key t0 + 8 warp + 2 t4 + e % 2 */
            const bool full = t0 >= keys.lo_full && t0 + KS <= keys.hi_full && t0 + KS <= k_end;
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int r = g + 8 * (e / 2), kx = warp * 8 + 2 * t4 + e % 2;
                const int64_t t = t0 + kx;
                float x = sa[e] + sb[e];
                if (has_mod)
                    x = fa_score_mod_apply_at(&mod_s[r], x, (tile * RT + r) % sn, t, nullptr);
                x *= p.scale_log2;
                if (!full && (t >= k_end || t < lo_s[r] || t >= hi_s[r]))
                    x = -INFINITY;
                s_s[r * KS + kx] = x;
            }
        }
        FA_SYNC();

        /* every warp: the online softmax of rows g (h 0) and g + 8 (h 1) over the step's keys, in
         * the accumulator layout of KS / 8 n8 tiles (the lane's keys 8 nt + 2 t4, + 1) */
        float s[KS / 8][4];
#pragma unroll
        for (int nt = 0; nt < KS / 8; ++nt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const float2 x = *reinterpret_cast<const float2 *>(&s_s[(g + 8 * h) * KS + nt * 8 + 2 * t4]);
                s[nt][2 * h] = x.x;
                s[nt][2 * h + 1] = x.y;
            }
        online_softmax_step<KS / 8, NV / 8>(s, m, l, o);
        /* O[:, NV warp .. + NV] += P V: P's k16 chunk kc is the accumulators of n8 tiles 2 kc, 2 kc + 1 */
#pragma unroll
        for (int kc = 0; kc < KS / 16; ++kc) {
            const uint32_t pf[4] = {fa_gpu::elem<E>::pack(s[2 * kc][0], s[2 * kc][1]),
                                    fa_gpu::elem<E>::pack(s[2 * kc][2], s[2 * kc][3]),
                                    fa_gpu::elem<E>::pack(s[2 * kc + 1][0], s[2 * kc + 1][1]),
                                    fa_gpu::elem<E>::pack(s[2 * kc + 1][2], s[2 * kc + 1][3])};
#pragma unroll
            for (int nn = 0; nn < NV / 16; ++nn) {
                uint32_t bf[4];
                fa_gpu::load_b_nn(bf, vt, LDV, kc * 16, warp * NV + nn * 16);
                fa_gpu::elem<E>::mma(o[2 * nn], pf, bf[0], bf[1]);
                fa_gpu::elem<E>::mma(o[2 * nn + 1], pf, bf[2], bf[3]);
            }
        }
    }

    /* each thread's two rows (every warp holds the same m and l), its channels */
    mla_store_rows<S, NV>(p, o, m, l, tile * RT, warp * NV, hk, b, split, g, t4);
}

} // namespace decode
} // namespace fa_gpu

#endif /* FA_GPU_DECODE_MLA_KERNELS_CUH */
