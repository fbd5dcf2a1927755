/* decode_mla_sm90_kernels.cuh: fa_forward_kvcache's MLA decode kernel on Hopper's warpgroup matrix
 * instructions (sm_90a; FLASHATTN_KERNELS=kv-mla-sm90): head dims d <= 576 and d_v <= 512 where
 * v_cache is a view of k_cache's first d_v channels (multi-head latent attention's cache: one
 * tensor), fp16 / bf16, 16-byte aligned rows. It shares the start (begin_block), check, append and
 * combine kernels of decode_kernels.cuh; decode_mla_kernels.cuh's kernel serves the other calls.
 *
 * One block of two warpgroups per (sequence, kv head, tile of 64 of that head's query rows, split):
 * the tile is wgmma's M, so with MLA's 16 to 128 query heads a key row is read by one to two blocks
 * where 16-row tiles read it up to eight times. Per step of 64 keys:
 *   - the step's key rows land in one of two stages (cp.async, eight threads a row: one page lookup
 *     per row) in the 128-byte swizzled layout wgmma reads, the next step's copies issued as this
 *     one starts; each stage serves as K and, its first d_v channels, as V (each key byte copied
 *     once);
 *   - each warpgroup computes the scores of all 64 rows against the 64 keys (wgmma m64n64k16 over
 *     d, Q and K from shared memory), applies the score modifiers, the scale and the mask, and runs
 *     the online softmax in registers: both warpgroups compute the same scores, so they hold the
 *     same maxima and sums with nothing exchanged;
 *   - each warpgroup adds P V for its half of the d_v channels (wgmma m64n128k16, P from registers
 *     in the accumulator layout, V read MN-major from the stage).
 * At the end each warpgroup writes its channels: O and LSE, or the split's partials for the
 * combine. A learnable sink is folded in here when the keys are not split, else by the combine. */
#ifndef FA_GPU_DECODE_MLA_SM90_KERNELS_CUH
#define FA_GPU_DECODE_MLA_SM90_KERNELS_CUH

#include "decode/decode_mla_epilogue.cuh"
#include "common/wgmma.cuh"

namespace fa_gpu {
namespace decode {

template <int D, int DV> struct mla_sm90_shape { /* common/kv_geometry.h's FA_KV_MLA_SM90_* */
    static constexpr int ROWS = FA_KV_MLA_SM90_ROWS, KEYS = FA_KV_MLA_SM90_KEYS, THREADS = FA_KV_MLA_SM90_THREADS;
    static constexpr int NV = DV / 2;                       /* output channels per warpgroup */
    static constexpr int PV_N = 128;                        /* channels per P V instruction */
    static constexpr uint32_t Q_BYTES = ROWS * D * 2, STAGE_BYTES = KEYS * D * 2;
    static constexpr int SMEM = (int)(Q_BYTES + 2 * STAGE_BYTES) + 1024;
    static_assert(SMEM == FA_KV_MLA_SM90_SMEM && 2 * SMEM > 228 * 1024, "one size; one block per multiprocessor");
    static_assert(THREADS == 256 && ROWS == 64 && KEYS % 32 == 0, "two warpgroups of m64 products; whole copy passes");
    static_assert(D % 64 == 0 && NV % PV_N == 0 && DV <= D, "whole 64-column blocks of d; V inside K's rows");
};

template <class S, int D, int DV, bool MOD>
__global__ __launch_bounds__(FA_KV_MLA_SM90_THREADS, 1) void decode_mla_sm90_kernel(const fa_gpu_kv_params p)
{
    typedef typename S::T T;
    typedef typename mma_elem<S::bf16>::type E;
    typedef mla_sm90_shape<D, DV> shape;
    constexpr int ROWS = shape::ROWS, KEYS = shape::KEYS, THREADS = shape::THREADS, NV = shape::NV;
    constexpr int PV_N = shape::PV_N;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    __shared__ int64_t lo_s[ROWS], hi_s[ROWS];
    __shared__ fa_score_mod_state mod_s[ROWS];
    /* with begin_block's row offsets */
    static_assert(sizeof lo_s + sizeof hi_s + sizeof mod_s + ROWS * sizeof(int64_t) <= FA_KV_MLA_SM90_STATIC_BYTES,
                  "static shared memory within FA_KV_MLA_SM90_STATIC_BYTES");
    /* 1024-byte aligned (the swizzle's atoms): the query tile [D / 64][ROWS][64], then two stages
     * [D / 64][KEYS][64], each 64-column block of 128-byte rows (sm90::sw128) */
    unsigned char *base = smem_raw + ((1024u - (fa_gpu::smem_addr(smem_raw) & 1023u)) & 1023u);
    const uint32_t q_addr = fa_gpu::smem_addr(base), k_addr = q_addr + shape::Q_BYTES;

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t4 = lane % 4;
    const int wg = warp / 4, wrow = 16 * (warp % 4); /* the warp's first row in the tile */
    const uint32_t bx = blockIdx.x, tiles = (uint32_t)p.row_tiles, hkv = (uint32_t)p.heads_kv;
    const int64_t tile = bx % tiles, bh = bx / tiles;
    const int64_t hk = (uint32_t)bh % hkv, b = (uint32_t)bh / hkv, split = blockIdx.y, sn = p.seqlen_new;
    const T *kc = static_cast<const T *>(p.k_cache.data);

    const block_keys keys = begin_block<S, ROWS, D, THREADS>(
        p, b, hk, tile, split, lo_s, hi_s, mod_s, [&](int r, int c, float x) {
            *reinterpret_cast<E *>(base + sm90::sw128<ROWS>(r, c / 8) + (c % 8) * 2) = fa_gpu::elem<E>::from_float(x);
        });
    if (keys.skip)
        return;
    sm90::fence_proxy_async(); /* the query tile, written by this thread, in wgmma's view */
    FA_SYNC();
    const int64_t k_begin = keys.k_begin, k_end = keys.k_end;
    const int64_t steps = k_end > k_begin ? (k_end - k_begin + KEYS - 1) / KEYS : 0;

    /* step n's rows into stage n % 2: thread tid copies 16-byte chunk tid % 8 of every 64-column
     * block of key rows tid / 8 and tid / 8 + 32 (rows past k_end and channels past d zero-filled);
     * a chunk keeps its swizzled place from block to block */
    const int crow = tid / 8, cch = tid % 8;
    auto issue = [&](const int64_t n) {
        const uint32_t stage = k_addr + (uint32_t)(n % 2) * shape::STAGE_BYTES;
#pragma unroll
        for (int pass = 0; pass < KEYS / 32; ++pass) {
            const int r = crow + 32 * pass;
            const int64_t t = k_begin + n * KEYS + r;
            const bool in = t < k_end;
            const T *src = kc + (in ? token_offset(p, p.k_cache, b, t, hk) : 0) + cch * 8;
            const uint32_t dst = stage + sm90::sw128<KEYS>(r, cch);
#pragma unroll
            for (int cb = 0; cb < D / 64; ++cb) {
                const bool ok = in && cb * 64 + cch * 8 < p.d;
                fa_gpu::cp_async16_s(dst + (uint32_t)(cb * KEYS * 128), ok ? src + cb * 64 : kc, ok);
            }
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
    float(&oflat)[NV / 2] = *reinterpret_cast<float(*)[NV / 2]>(&o[0][0]);
    float s[KEYS / 8][4];
    float(&sflat)[KEYS / 2] = *reinterpret_cast<float(*)[KEYS / 2]>(&s[0][0]);
    uint32_t pf[KEYS / 16][4];

    for (int64_t n = 0; n < steps; ++n) {
        const int64_t t0 = k_begin + n * KEYS;
        fa_gpu::cp_async_wait<0>();
        sm90::fence_proxy_async();
        /* step n is in every thread's view and wgmma's, and both warpgroups are done with step
         * n - 1's stage, which step n + 1 takes */
        FA_SYNC();
        if (n + 1 < steps)
            issue(n + 1);
        const uint32_t kb = k_addr + (uint32_t)(n % 2) * shape::STAGE_BYTES;

        /* S (64 rows x 64 keys) = Q K^T: 64-column block kk / 64, 32 bytes per k16 inside it */
        sm90::fence();
#pragma unroll
        for (int kk = 0; kk < D; kk += 16)
            sm90::ss<E, KEYS>::run(sflat, sm90::desc_sw128(q_addr + (uint32_t)((kk / 64) * ROWS * 128 + (kk % 64) * 2), 16u, 1024u),
                                   sm90::desc_sw128(kb + (uint32_t)((kk / 64) * KEYS * 128 + (kk % 64) * 2), 16u, 1024u),
                                   kk > 0);
        sm90::commit();
        sm90::wait<0>();

        /* element e of n8 tile j: row wrow + g + 8 (e / 2), key t0 + 8 j + 2 t4 + e % 2 */
#pragma unroll
        for (int j = 0; j < KEYS / 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                float x = s[j][e];
                if constexpr (MOD)
                    x = fa_score_mod_apply_at(&mod_s[wrow + g + 8 * (e / 2)], x, (tile * ROWS + wrow + g + 8 * (e / 2)) % sn,
                                              t0 + 8 * j + 2 * t4 + e % 2, nullptr);
                s[j][e] = x * p.scale_log2;
            }
        if (!(t0 >= keys.lo_full && t0 + KEYS <= keys.hi_full && t0 + KEYS <= k_end)) {
            /* a step some row does not see whole: each row's visible keys as offsets from t0,
             * clamped to 0 .. KEYS */
            int lo[2], hi[2];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = wrow + g + 8 * h;
                lo[h] = (int)min(max(lo_s[r] - t0, (int64_t)0), (int64_t)KEYS);
                hi[h] = (int)min(max(min(hi_s[r], k_end) - t0, (int64_t)0), (int64_t)KEYS);
            }
#pragma unroll
            for (int j = 0; j < KEYS / 8; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int kx = 8 * j + 2 * t4 + e % 2;
                    if (kx < lo[e / 2] || kx >= hi[e / 2])
                        s[j][e] = -INFINITY;
                }
        }
        online_softmax_step<KEYS / 8, NV / 8>(s, m, l, o);
        fa_gpu::acc_to_a<E, KEYS>(pf, s);

        /* O[:, NV wg .. + NV] += P V: V [keys][channels] is the MN-major B operand, 64-column
         * blocks KEYS rows apart, 16 keys = two 8-row groups */
        sm90::fence();
#pragma unroll
        for (int kc = 0; kc < KEYS / 16; ++kc)
#pragma unroll
            for (int nh = 0; nh < NV / PV_N; ++nh)
                sm90::rs<E, PV_N>::run(*reinterpret_cast<float(*)[PV_N / 2]>(&oflat[nh * PV_N / 2]), pf[kc],
                                       sm90::desc_sw128(kb + (uint32_t)(((wg * NV + nh * PV_N) / 64) * KEYS * 128 +
                                                                        kc * 16 * 128),
                                                        KEYS * 128u, 1024u));
        sm90::commit();
        sm90::wait<0>();
    }

    /* each thread's two rows (every warp holds the same m and l), its channels */
    mla_store_rows<S, NV>(p, o, m, l, tile * ROWS + wrow, wg * NV, hk, b, split, g, t4);
}

} // namespace decode
} // namespace fa_gpu

#endif /* FA_GPU_DECODE_MLA_SM90_KERNELS_CUH */
