/* forward_kernels.cuh: the Hopper forwards (sm_90a), two kernels (kernels.cuh launches them).
 *
 * ws_forward_kernel (below, the one the chooser takes): warp-specialised, for calls with neither
 * block lists nor dropout, d 64 / 128 / 256 padded. Its comment says how it works.
 *
 * forward_kernel (first): the sm80 forward's algorithm with both products on warpgroup MMA, kept
 * for dropout and block lists at d <= 128 (FLASHATTN_KERNELS=sm90; the chooser sends those to
 * sm80, faster there). Two warpgroups (256 threads) per 128-row query tile, 64 rows each, sharing
 * the 64-key K/V tiles. The tiles pass through three shared-memory stages in the core-matrix
 * layout wgmma reads (common/wgmma.cuh, blocked()), filled by cp.async two tiles ahead; each stage
 * has a "full" mbarrier (every thread arrives when its copies land) and an "empty" one (every
 * thread arrives when its products on the stage are done), so there is no block-wide barrier in
 * the key loop. S = Q K^T as wgmma m64n64k16 with both operands in shared memory; the
 * online-softmax step, masks and dropout are the sm80 kernels' (fa_gpu::softmax_step: the
 * accumulator layout is the same per warp); P goes back as the A operand from registers and
 * O += P V as wgmma m64n{D}k16 with V transposed by the instruction. Every wgmma group is waited
 * for at once. */
#ifndef FA_SM90_FORWARD_KERNELS_CUH
#define FA_SM90_FORWARD_KERNELS_CUH

#include "common/params.h"
#include "common/primitives.cuh"
#include "common/tile_geometry.cuh"
#include "common/tile_io.cuh"
#include "common/tile_class.cuh"
#include "common/dropout.cuh"
#include "common/score_mod.cuh"
#include "common/softmax_step.cuh"
#include "common/split_combine.cuh"
#include "common/wgmma.cuh"
#include "sm90/tma.cuh"
#include "common/sm90_geometry.h"

namespace fa_gpu::sm90 {

using fa_gpu::elem;
using fa_gpu::imin;

constexpr int BR = FA_SM90_BR, BN = FA_SM90_BN, THREADS = FA_SM90_THREADS, WG_ROWS = 64, STAGES = FA_SM90_STAGES;
static_assert(BN == FA_GPU_BLOCK && BR % FA_GPU_BLOCK == 0, "the core's 64 x 64 block lists");

/* ROWS x D of head h into a blocked tile (16-byte chunks in blocked() order: the 8 lanes of a
 * core matrix write 128 contiguous bytes); rows >= nrows and columns >= d zero. The caller
 * commits and waits. Needs 16-byte aligned rows and d % 8 == 0 (the chooser's condition). */
template <typename T, int D, int ROWS, int NT = THREADS>
__device__ __forceinline__ void load_blocked(T *dst, const fa_gpu_tensor &t, int64_t b, int64_t row0, int64_t nrows,
                                             int64_t h, int d, int tid = threadIdx.x)
{
    constexpr int CB = D / 8;
    const uint32_t base = fa_gpu::smem_addr(dst);
#pragma unroll 4
    for (int e = tid; e < ROWS * CB; e += NT) {
        const int cm = e >> 3, r = (cm / CB) * 8 + (e & 7), c = (cm % CB) * 8;
        const bool valid = r < nrows && c < d;
        const T *src = valid ? fa_gpu::row_ptr<T>(t, b, row0 + r, h) + c : static_cast<const T *>(t.data);
        fa_gpu::cp_async16_s(base + 16u * (uint32_t)e, src, valid);
    }
}

/* ROWS x D of head h into a tile in the 128-byte swizzled layout at shared address dst (sw128);
 * rows >= nrows and columns >= d zero. Thread tid takes one 16-byte column chunk of every
 * (NT / (D / 8))-th row: one pointer and one shared address, each advanced by a constant (the
 * swizzle of the chunk is the same in every row it takes), so a copy costs a few instructions;
 * consecutive threads take consecutive chunks of a row (whole 128-byte lines, whole 128-byte
 * shared rows); where NT is not a multiple of the D / 8 chunks (d 192), one chunk per thread and
 * step. The caller commits and waits. Needs 16-byte aligned rows and d % 8 == 0. */
template <typename T, int D, int ROWS, int NT>
__device__ __forceinline__ void load_sw128(uint32_t dst, const fa_gpu_tensor &t, int64_t b, int64_t row0,
                                           int64_t nrows, int64_t h, int d, int tid)
{
    constexpr int CB = D / 8, RS = NT / CB;
    if constexpr (NT % CB != 0) { /* d 192: the threads do not divide a row's chunks; one chunk at a time */
#pragma unroll 4
        for (int e = tid; e < ROWS * CB; e += NT) {
            const int r = e / CB, c = e % CB;
            const bool valid = c * 8 < d && r < nrows;
            const T *src = fa_gpu::row_ptr<T>(t, b, row0 + r, h) + c * 8;
            fa_gpu::cp_async16_s(dst + sw128<ROWS>(r, c), valid ? src : static_cast<const T *>(t.data), valid);
        }
    } else {
        static_assert((RS % 8 == 0 || 8 % RS == 0) && ROWS % RS == 0, "rows per step");
        const int c = tid % CB, r0 = tid / CB;
        const bool cvalid = c * 8 < d;
        const T *src = fa_gpu::row_ptr<T>(t, b, row0 + r0, h) + c * 8;
        const int64_t step = RS * t.ss;
        const uint32_t sdst = dst + sw128<ROWS>(r0, c);
#pragma unroll
        for (int i = 0; i < ROWS / RS; ++i) {
            const int r = r0 + i * RS;
            const bool valid = cvalid && r < nrows;
            /* RS a multiple of 8: every row of the thread has the swizzle of r0; else it cycles */
            const uint32_t a = RS % 8 == 0 ? sdst + i * RS * 128 : dst + sw128<ROWS>(r, c);
            fa_gpu::cp_async16_s(a, valid ? src : static_cast<const T *>(t.data), valid);
            src += step;
        }
    }
}

template <typename T, int D, int MODE>
__global__ void __launch_bounds__(THREADS, 1) forward_kernel(const fa_gpu_params p)
{
    constexpr bool LISTS = MODE >= 1, DROP = MODE == 2;
    constexpr int TILE = BN * D; /* elements of one K or V tile */
    constexpr uint32_t ROWB = D / 8 * 128; /* bytes between core matrices 8 rows apart */
    extern __shared__ __align__(128) unsigned char smem_raw[];
    __shared__ __align__(8) uint64_t bars[2 * STAGES]; /* full[STAGES], empty[STAGES] */
    T *qs = reinterpret_cast<T *>(smem_raw); /* [BR][D] blocked */
    T *ks = qs + BR * D;                     /* [STAGES][BN][D] blocked; with vs, stages O at the end */
    T *vs = ks + STAGES * TILE;              /* [STAGES][BN][D] blocked */

    const int64_t h = blockIdx.y, b = blockIdx.z;
    const fa_seq s = fa_sequence(p, b);
    const int64_t q0 = (int64_t)blockIdx.x * BR;
    if (q0 >= s.sq)
        return;
    const int64_t hk = h / p.group;
    const fa_mask m = fa_mask_make(s.sq, s.sk, p.causal, p.window_left, p.window_right);
    const int warp = threadIdx.x / 32, wg = warp / 4;
    const int wrow = WG_ROWS * wg + 16 * (warp & 3); /* the warp's first row in the tile */
    const int64_t wq0 = q0 + wrow;                    /* ... in the sequence */
    const float cc = p.scale_log2 > 0.0f ? p.scale_log2 : 1.0f;
    const uint32_t q_addr = fa_gpu::smem_addr(qs) + (uint32_t)wg * (WG_ROWS / 8) * ROWB;
    const uint32_t k_addr = fa_gpu::smem_addr(ks), v_addr = fa_gpu::smem_addr(vs);
    const uint32_t full0 = fa_gpu::smem_addr(&bars[0]), empty0 = fa_gpu::smem_addr(&bars[STAGES]);

    /* the key tiles, in order: one walk that issues copies STAGES - 1 tiles ahead, one that consumes */
    fa_gpu::key_walk<BR / BN, LISTS> ahead = fa_gpu::key_walk_of<BR / BN, LISTS>(p, m, h, q0, BR);
    fa_gpu::key_walk<BR / BN, LISTS> walk = ahead;
    if (threadIdx.x == 0) {
        for (int i = 0; i < STAGES; ++i) {
            mbar_init(full0 + 8u * i, THREADS);
            mbar_init(empty0 + 8u * i, THREADS);
        }
    }
    int64_t kt = s.sk > 0 ? walk.peek() : -1;
    if (kt >= 0)
        load_blocked<T, D, BR>(qs, p.q, b, s.q_start + q0, s.sq - q0, h, (int)p.d);
    fa_gpu::cp_async_commit();
    fa_gpu::cp_async_wait<0>();
    fence_proxy_async();
    __syncthreads(); /* Q and the barriers' initialisation are visible */

    /* copies of tile number n (in walk order) into stage n % STAGES; every thread takes its share
     * and arrives on the stage's full barrier when its copies land. Before reusing a stage, wait
     * until every thread is done with the tile it held (its empty barrier). */
    int64_t issued = 0;
    auto issue = [&](int64_t kn) {
        const int st = (int)(issued % STAGES);
        if (issued >= STAGES)
            mbar_wait(empty0 + 8u * st, (uint32_t)((issued / STAGES - 1) & 1));
        load_blocked<T, D, BN>(ks + st * TILE, p.k, b, s.k_start + kn * BN, s.sk - kn * BN, hk, (int)p.d);
        load_blocked<T, D, BN>(vs + st * TILE, p.v, b, s.k_start + kn * BN, s.sk - kn * BN, hk, (int)p.d);
        mbar_arrive_cp_async(full0 + 8u * st);
        ++issued;
    };
    for (int i = 0; i < STAGES - 1; ++i) {
        const int64_t kn = s.sk > 0 ? ahead.peek() : -1;
        if (kn < 0)
            break;
        ahead.pop(kn);
        issue(kn);
    }

    float o[1][D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; ++i)
        o[0][i][0] = o[0][i][1] = o[0][i][2] = o[0][i][3] = 0.0f;
    float row_m[1][2] = {{-CUDART_INF_F, -CUDART_INF_F}}, row_l[1][2] = {{0.0f, 0.0f}};

    for (int64_t n = 0; kt >= 0; ++n) {
        const int64_t k0 = kt * BN;
        walk.pop(kt);
        const int64_t kn = walk.peek();
        {
            const int64_t ka = s.sk > 0 ? ahead.peek() : -1; /* STAGES - 1 tiles ahead */
            if (ka >= 0) {
                ahead.pop(ka);
                issue(ka);
            }
        }
        const int buf = (int)(n % STAGES);
        mbar_wait(full0 + 8u * buf, (uint32_t)((n / STAGES) & 1));
        fence_proxy_async();

        /* S = Q K^T over D / 16 k-steps (every warp of the warpgroup takes part) */
        float sacc[1][BN / 8][4];
        float(&sflat)[BN / 2] = *reinterpret_cast<float(*)[BN / 2]>(&sacc[0][0][0]);
        const uint32_t kb = k_addr + (uint32_t)(buf * TILE * 2), vb = v_addr + (uint32_t)(buf * TILE * 2);
        fence();
#pragma unroll
        for (int kk = 0; kk < D; kk += 16)
            ss<T, BN>::run(sflat, desc(q_addr + (uint32_t)(kk / 8) * 128u, 128u, ROWB),
                           desc(kb + (uint32_t)(kk / 8) * 128u, 128u, ROWB), kk > 0);
        commit();
        wait<0>();

        const fa_tile_class cls = LISTS ? fa_gpu::rows_class(p, m, h, wq0, wq0 + 16, kt)
                                        : fa_mask_classify_tile(&m, wq0, wq0 + 16, k0, k0 + BN);
        if (cls == FA_TILE_EMPTY || k0 >= s.sk) { /* this warp's rows see none of the tile: P = 0 */
#pragma unroll
            for (int i = 0; i < BN / 2; ++i)
                sflat[i] = -CUDART_INF_F;
        }
        fa_gpu::softmax_step<T, 1, BN, D / 8, 16, LISTS, DROP>(p, m, s, b, h, wq0, k0, cls, cc, sacc, row_m, row_l,
                                                                o);
        uint32_t pf[1][BN / 16][4];
        fa_gpu::acc_to_a<T, BN>(pf[0], sacc[0]);

        /* O += P V: V [keys][D] blocked is the MN-major B operand; 16 keys = two core matrices */
        float(&oflat)[D / 2] = *reinterpret_cast<float(*)[D / 2]>(&o[0][0][0]);
        fence();
#pragma unroll
        for (int kk = 0; kk < BN; kk += 16) {
            const uint32_t a = vb + (uint32_t)(kk / 8) * ROWB;
            rs<T, D>::run(oflat, pf[0][kk / 16], desc(a, ROWB, 128u)); /* LBO: along K (keys) */
        }
        commit();
        wait<0>();
        mbar_arrive(empty0 + 8u * buf); /* this thread is done with the stage */
        kt = kn;
    }
    __syncthreads(); /* both warpgroups are done with every stage before O is staged over them */

    /* epilogue: O / l staged row-major ([BR][D + 8]) over the K and V stages, free after the
     * barrier above (every copy was waited for through its full barrier), then 16-byte row
     * stores; LSE as in the sm80 forward */
    fa_gpu::stage_output<T, D, 1, 0>(ks, o, row_m, row_l, p, s, b, h, q0, wrow); /* [BR][D + 8] over the stages */
    __syncthreads();
    if (!p.out_f32)
        fa_gpu::store_tile<T, D, true, BR, THREADS>(p.o, ks, b, s.q_start + q0, s.sq - q0, h, (int)p.d);
}

/* The warp-specialised forward, for calls with neither block lists nor dropout (MODE 0). Three
 * warpgroups: warpgroups 0 and 1 consume, 64 query rows each of a 128-row tile; warpgroup 2
 * produces, copying K and V tiles (128 keys; 64 at d 256) with cp.async into a ring of stages
 * (3 at d 128, 4 at d 64, 2 at d 256; "full" and "empty" mbarriers per stage and operand, so a K
 * stage is refilled as soon as its S = Q K^T is done, before the P V of the same tile) and
 * nothing else, with its registers handed to the consumers by setmaxnreg. Every tile is in the
 * 128-byte swizzled layout (sw128). Each consumer pipelines inside itself: S = Q K_n^T is issued,
 * then O += P_{n-1} V_{n-1}, and the softmax of S_n runs while the second product is still on
 * the tensor cores; O is rescaled once that product is waited for. The two consumers take turns
 * at issuing (ping-pong, below). Causal grids start with the query tiles that see the most keys.
 * MOD: the score modifiers (fa_gpu::softmax_scores applies them), a learnable sink (folded in by
 * stage_output) and d_v < d (V's columns from d_v on zeros, O's p.d_v stored). TMA: the producer is one
 * thread issuing tensor-memory-accelerator copies of whole tiles through the maps (dense calls,
 * tensor_map.cuh), which complete on the "full" barriers by their byte count; without it the
 * producer warpgroup copies with cp.async. SPLIT: the key tiles of each query tile shared among
 * p.splits blocks (grid z: sequence x splits), each writing its part's O and LSE for
 * split_combine_kernel (common/split_combine.cuh), for calls whose query tiles alone leave SMs
 * idle (d <= 128). */
constexpr int WS_BR = FA_SM90_WS_BR, WS_CONSUMERS = FA_SM90_WS_CONSUMERS, WS_THREADS = FA_SM90_WS_THREADS;
/* keys per tile: 128, or 64 at d 256 (its O accumulator takes 128 registers per thread), or 160
 * at d 128 in the wide instance (S 80 registers per thread beside O's 64, in 240) */
template <int D, bool WIDE = false> __host__ __device__ constexpr int ws_bn()
{
    return FA_SM90_WS_BN_OF(D, WIDE);
}
/* as many K/V stages as shared memory holds beside Q (227 KiB per block, less 1 KiB for aligning
 * the tiles and 256 bytes for the barriers), at most 4 */
template <typename T, int D, bool WIDE = false> __host__ __device__ constexpr int ws_stages()
{
    return FA_SM90_WS_STAGES_N((int)sizeof(T), D, (ws_bn<D, WIDE>()));
}
/* registers per thread of the consumers and the producer: 256 x 224 + 128 x 56 = 384 x 168, or in
 * the wide instances 256 x 240 + 128 x 24 (FlashAttention-3's split; a producer that only issues
 * TMA copies fits 24). The two splits must not exceed the 384 x 168 registers the block holds from
 * its launch (__launch_bounds__(384, 1): 65536 / 384 rounded down to a multiple of 8): setmaxnreg.inc
 * waits until the registers it asks for are free, and a split over that total waits forever. */
template <bool WIDE> __host__ __device__ constexpr int ws_consumer_regs()
{
    return WIDE ? 240 : 224;
}
template <bool WIDE> __host__ __device__ constexpr int ws_producer_regs()
{
    return WIDE ? 24 : 56;
}

static_assert(WS_CONSUMERS * ws_consumer_regs<true>() + (WS_THREADS - WS_CONSUMERS) * ws_producer_regs<true>() <=
                      WS_THREADS * (65536 / WS_THREADS / 8 * 8) &&
                  WS_CONSUMERS * ws_consumer_regs<false>() + (WS_THREADS - WS_CONSUMERS) * ws_producer_regs<false>() <=
                      WS_THREADS * (65536 / WS_THREADS / 8 * 8),
              "both splits fit the registers the block holds from its launch");

/* WIDE: the wide instance (ws_bn, ws_consumer_regs), for TMA loads without score modifiers.
 * DROP: dropout (no block lists, no score modifiers, not wide): the consumers apply it to P as the
 * sm80 kernels do (fa_gpu::softmax_scores, common/dropout.cuh). SPLIT: split keys (not wide, no
 * dropout). */
template <typename T, int D, bool MOD = false, bool TMA = false, bool WIDE = false, bool DROP = false, bool SPLIT = false>
__global__ void __launch_bounds__(WS_THREADS, 1) ws_forward_kernel(const fa_gpu_params p, const __grid_constant__ tile_maps maps)
{
    static_assert(!WIDE || (TMA && !MOD), "the wide instances: TMA loads, no score modifiers");
    static_assert(!DROP || (!MOD && !WIDE), "the dropout instances: no score modifiers, not wide");
    static_assert(!SPLIT || (!WIDE && !DROP), "the split instances: not wide, no dropout");
    constexpr int WS_STAGES = ws_stages<T, D, WIDE>(), WS_BN = ws_bn<D, WIDE>();
    /* P V in column slices of at most 128 (m64n{64,128}k16): d 192 in three of 64 */
    constexpr int PV_N = D <= 128 ? D : D % 128 == 0 ? 128 : 64;
    constexpr uint32_t TILEB = WS_BN * D * sizeof(T); /* bytes of one K or V tile */
    extern __shared__ __align__(128) unsigned char smem_raw[];
    __shared__ __align__(8) uint64_t bars[4 * WS_STAGES]; /* full K, full V, empty K, empty V */
    /* every tile in the swizzled layout, 1024-byte aligned: Q [WS_BR][D], then K [WS_STAGES][WS_BN][D]
     * and V [WS_STAGES][WS_BN][D]; the K and V stages hold O's row-major stage at the end */
    unsigned char *base = smem_raw + ((1024u - (fa_gpu::smem_addr(smem_raw) & 1023u)) & 1023u);
    const uint32_t q_all = fa_gpu::smem_addr(base), k_addr = q_all + WS_BR * D * (uint32_t)sizeof(T),
                   v_addr = k_addr + WS_STAGES * TILEB;
    T *ks = reinterpret_cast<T *>(base + WS_BR * D * sizeof(T));

    const int64_t h = blockIdx.y, b = SPLIT ? (int64_t)(blockIdx.z / (unsigned)p.splits) : (int64_t)blockIdx.z;
    /* the split index, read where it is used so that no register holds it through the key loop */
    auto split_index = [&]() { return (int64_t)blockIdx.z - b * p.splits; };
    const fa_seq s = fa_sequence(p, b);
    const int64_t qt = p.causal ? (int64_t)gridDim.x - 1 - blockIdx.x : (int64_t)blockIdx.x;
    const int64_t q0 = qt * WS_BR;
    if (q0 >= s.sq)
        return;
    const fa_mask m = fa_mask_make(s.sq, s.sk, p.causal, p.window_left, p.window_right);
    int64_t first = 0, last = 0; /* the key tiles the mask leaves to the tile's rows */
    if (s.sk > 0) {
        int64_t lo, hi;
        fa_mask_rows_range(&m, q0, imin(q0 + WS_BR, s.sq), &lo, &hi);
        if (hi > lo) {
            first = lo / WS_BN;
            last = (hi + WS_BN - 1) / WS_BN;
        }
    }
    if constexpr (SPLIT) { /* this block's share: tiles [first + split * per, + per) of them */
        const int64_t per = (int64_t)((unsigned)(last - first + p.splits - 1) / (unsigned)p.splits); /* < 2^31 tiles */
        const int64_t lo = imin(first + split_index() * per, last);
        last = imin(lo + per, last);
        first = lo;
    }
    const uint32_t fullk0 = fa_gpu::smem_addr(&bars[0]), fullv0 = fullk0 + 8u * WS_STAGES,
                   emptyk0 = fullk0 + 16u * WS_STAGES, emptyv0 = fullk0 + 24u * WS_STAGES;
    if (threadIdx.x == 0) {
        for (int i = 0; i < WS_STAGES; ++i) {
            mbar_init(fullk0 + 8u * i, TMA ? 1 : WS_THREADS - WS_CONSUMERS);
            mbar_init(fullv0 + 8u * i, TMA ? 1 : WS_THREADS - WS_CONSUMERS);
            mbar_init(emptyk0 + 8u * i, WS_CONSUMERS);
            mbar_init(emptyv0 + 8u * i, WS_CONSUMERS);
        }
        if constexpr (TMA)
            fence_mbar_init();
    }
    __syncthreads();

    if (threadIdx.x >= WS_CONSUMERS) { /* the producer */
        setmaxnreg_dec<ws_producer_regs<WIDE>()>();
        const int tid = threadIdx.x - WS_CONSUMERS;
        const int64_t hk = h / p.group;
        if constexpr (TMA) {
            if (tid != 0)
                return;
            for (int64_t n = 0; first + n < last; ++n) {
                const int st = (int)(n % WS_STAGES);
                const uint32_t parity = (uint32_t)((n / WS_STAGES - 1) & 1);
                const int k0 = (int)((first + n) * WS_BN);
                if (n >= WS_STAGES)
                    mbar_wait(emptyk0 + 8u * st, parity);
                mbar_arrive_expect_tx(fullk0 + 8u * st, TILEB);
                tma_load_tile<D, WS_BN>(k_addr + st * TILEB, &maps.first, fullk0 + 8u * st, k0, (int)hk, (int)b);
                if (n >= WS_STAGES)
                    mbar_wait(emptyv0 + 8u * st, parity);
                mbar_arrive_expect_tx(fullv0 + 8u * st, TILEB);
                tma_load_tile<D, WS_BN>(v_addr + st * TILEB, &maps.second, fullv0 + 8u * st, k0, (int)hk, (int)b);
            }
        } else { /* every thread of the warpgroup copies a part of each tile with cp.async */
            for (int64_t n = 0; first + n < last; ++n) {
                const int st = (int)(n % WS_STAGES);
                const uint32_t parity = (uint32_t)((n / WS_STAGES - 1) & 1);
                if (n >= WS_STAGES)
                    mbar_wait(emptyk0 + 8u * st, parity);
                const int64_t k0 = (first + n) * WS_BN;
                load_sw128<T, D, WS_BN, WS_THREADS - WS_CONSUMERS>(k_addr + st * TILEB, p.k, b, s.k_start + k0, s.sk - k0,
                                                                   hk, (int)p.d, tid);
                mbar_arrive_cp_async(fullk0 + 8u * st);
                if (n >= WS_STAGES)
                    mbar_wait(emptyv0 + 8u * st, parity);
                load_sw128<T, D, WS_BN, WS_THREADS - WS_CONSUMERS>(v_addr + st * TILEB, p.v, b, s.k_start + k0, s.sk - k0,
                                                                   hk, MOD ? (int)p.d_v : (int)p.d, tid);
                mbar_arrive_cp_async(fullv0 + 8u * st);
            }
            fa_gpu::cp_async_wait<0>();
        }
        return;
    }

    setmaxnreg_inc<ws_consumer_regs<WIDE>()>();
    const int warp = threadIdx.x / 32, wg = warp / 4;
    const int wrow = 64 * wg + 16 * (warp & 3); /* the warp's first row in the tile */
    const int64_t wq0 = q0 + wrow;
    const float cc = p.scale_log2 > 0.0f ? p.scale_log2 : 1.0f;
    const fa_score_mod_state sm = MOD ? fa_gpu_score_mod(p, s, b, h) : fa_score_mod_state{};
    const uint32_t q_addr = q_all + (uint32_t)(wg * 64 * D * sizeof(T)); /* this warpgroup's 64 rows, loaded by itself */
    load_sw128<T, D, 64, 128>(q_addr, p.q, b, s.q_start + q0 + 64 * wg, s.sq - q0 - 64 * wg, h, (int)p.d,
                              threadIdx.x & 127);
    fa_gpu::cp_async_commit();
    fa_gpu::cp_async_wait<0>();
    fence_proxy_async();
    if (wg == 0)
        bar_sync<1, 128>();
    else
        bar_sync<2, 128>();

    float o[1][D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; ++i)
        o[0][i][0] = o[0][i][1] = o[0][i][2] = o[0][i][3] = 0.0f;
    float row_m[1][2] = {{-CUDART_INF_F, -CUDART_INF_F}}, row_l[1][2] = {{0.0f, 0.0f}}, alpha[1][2];
    float(&oflat)[D / 2] = *reinterpret_cast<float(*)[D / 2]>(&o[0][0][0]);
    float sacc[1][WS_BN / 8][4];
    float(&sflat)[WS_BN / 2] = *reinterpret_cast<float(*)[WS_BN / 2]>(&sacc[0][0][0]);
    uint32_t pf[WS_BN / 16][4];

    auto wait_full = [&](uint32_t bar0, int64_t n) {
        mbar_wait(bar0 + 8u * (uint32_t)(n % WS_STAGES), (uint32_t)((n / WS_STAGES) & 1));
        fence_proxy_async();
    };
    auto release = [&](uint32_t bar0, int64_t n) { mbar_arrive(bar0 + 8u * (uint32_t)(n % WS_STAGES)); };
    auto issue_s = [&](int64_t n) { /* S = Q K_n^T */
        const uint32_t kb = k_addr + (uint32_t)(n % WS_STAGES) * TILEB;
#pragma unroll
        for (int kk = 0; kk < D; kk += 16) /* 64-column block kk / 64, 32 bytes per k-step inside it */
            ss<T, WS_BN>::run(sflat, desc_sw128(q_addr + (uint32_t)((kk / 64) * 64 * 128 + (kk % 64) * 2), 16u, 1024u),
                              desc_sw128(kb + (uint32_t)((kk / 64) * WS_BN * 128 + (kk % 64) * 2), 16u, 1024u),
                              kk > 0);
        commit();
    };
    auto issue_pv = [&](int64_t n) { /* O += P V_n: V [keys][D] is the MN-major B operand */
        const uint32_t vb = v_addr + (uint32_t)(n % WS_STAGES) * TILEB;
#pragma unroll
        for (int kk = 0; kk < WS_BN; kk += 16) /* 16 keys = two 8-row groups; 64-column blocks WS_BN rows apart */
#pragma unroll
            for (int nh = 0; nh < D / PV_N; ++nh)
                rs<T, PV_N>::run(*reinterpret_cast<float(*)[PV_N / 2]>(&oflat[nh * PV_N / 2]), pf[kk / 16],
                                 desc_sw128(vb + (uint32_t)(nh * (PV_N / 64) * WS_BN * 128 + kk * 128), WS_BN * 128u,
                                            1024u));
        commit();
    };
    auto scores = [&](int64_t n) { /* P of tile n in sacc, alpha for O */
        const int64_t k0 = (first + n) * WS_BN;
        const fa_tile_class cls = fa_mask_classify_tile(&m, wq0, wq0 + 16, k0, k0 + WS_BN);
        if (cls == FA_TILE_EMPTY || k0 >= s.sk) { /* this warp's rows see none of the tile: P = 0 */
#pragma unroll
            for (int i = 0; i < WS_BN / 2; ++i)
                sflat[i] = -CUDART_INF_F;
        }
        fa_gpu::softmax_scores<T, 1, WS_BN, 16, false, DROP, MOD>(p, m, s, b, h, wq0, k0, cls, cc, sacc, row_m,
                                                                   row_l, alpha, sm);
    };

    /* Ping-pong: the two consumers take turns at issuing their products (named barriers 4 and 5,
     * warpgroup 0 first), so one's softmax runs while the other's products occupy the tensor
     * cores. Both make ntiles + 1 turns; the second does not announce its last one. */
    const int64_t ntiles = last - first;
    int64_t turns_left = ntiles + 1;
    auto turn_begin = [&]() {
        if (wg == 0)
            bar_sync<4, WS_CONSUMERS>();
        else
            bar_sync<5, WS_CONSUMERS>();
    };
    auto turn_end = [&]() {
        --turns_left;
        if (wg == 0)
            bar_arrive<5, WS_CONSUMERS>();
        else if (turns_left > 0)
            bar_arrive<4, WS_CONSUMERS>();
    };
    if (ntiles > 0) {
        if (wg == 1)
            bar_arrive<4, WS_CONSUMERS>();
        wait_full(fullk0, 0);
        turn_begin();
        fence();
        issue_s(0);
        turn_end();
        wait<0>();
        release(emptyk0, 0);
        scores(0); /* O is still zero: nothing to rescale */
        fa_gpu::acc_to_a<T, WS_BN>(pf, sacc[0]);
        for (int64_t n = 1; n < ntiles; ++n) {
            wait_full(fullk0, n);
            wait_full(fullv0, n - 1);
            turn_begin();
            fence();
            issue_s(n);
            issue_pv(n - 1);
            turn_end();
            wait<1>(); /* S_n is done; P_{n-1} V_{n-1} may still run */
            release(emptyk0, n);
            scores(n);
            wait<0>();
            release(emptyv0, n - 1);
            fa_gpu::rescale<1, D / 8>(o, alpha);
            fa_gpu::acc_to_a<T, WS_BN>(pf, sacc[0]);
        }
        wait_full(fullv0, ntiles - 1);
        turn_begin();
        fence();
        issue_pv(ntiles - 1);
        turn_end();
        wait<0>();
        release(emptyv0, ntiles - 1);
    }
    bar_sync<3, WS_CONSUMERS>(); /* both consumers are done with every stage before O is staged over them */
    if constexpr (SPLIT) { /* this part's O (fp32, from the registers) and LSE */
        fa_gpu::stage_output<T, D, 1, 0>(ks, o, row_m, row_l, fa_gpu::split_part_params(p, split_index()), s, b, h, q0,
                                         wrow);
        return;
    }
    fa_gpu::stage_output<T, D, 1, 0, MOD>(ks, o, row_m, row_l, p, s, b, h, q0, wrow); /* [WS_BR][D + 8] */
    bar_sync<3, WS_CONSUMERS>();
    if (!p.out_f32)
        fa_gpu::store_tile<T, D, true, WS_BR, WS_CONSUMERS>(p.o, ks, b, s.q_start + q0, s.sq - q0, h,
                                                            MOD ? (int)p.d_v : (int)p.d);
}

} // namespace fa_gpu::sm90

#endif /* FA_SM90_FORWARD_KERNELS_CUH */
