/* kernels.cuh: the Hopper forward (sm_90a): the sm80 forward's algorithm with both products on
 * warpgroup MMA. Two warpgroups (256 threads) per 128-row query tile, 64 rows each, sharing the
 * 64-key K/V tiles (each tile is read from L2 once per 128 rows: with one warpgroup per 64 rows
 * the first version was L2-bound, 85 % of L2 throughput at half the sm80 speed). The tiles pass
 * through three shared-memory stages in the core-matrix layout wgmma reads (primitives.cuh,
 * blocked()), filled by cp.async two tiles ahead; each stage has a "full" mbarrier (every thread
 * arrives when its copies land) and an "empty" one (every thread arrives when its products on
 * the stage are done), so there is no block-wide barrier in the key loop and the warpgroups
 * drift rather than run in lock step. S = Q K^T as wgmma m64n64k16 with both operands in shared
 * memory; the online-softmax step, masks and dropout are the sm80 kernels'
 * (fa_sm80::softmax_step: the accumulator layout is the same per warp); P goes back as the A
 * operand from registers and O += P V as wgmma m64n{D}k16 with V transposed by the instruction.
 * Not yet: TMA, a producer warpgroup with setmaxnreg, ping-pong ordering of the two consumers,
 * softmax overlapped with the next S (issue 6). */
#ifndef FA_SM90_KERNELS_CUH
#define FA_SM90_KERNELS_CUH

#include "../sm80/kernels.cuh"
#include "primitives.cuh"

namespace fa_sm90 {

using fa_sm80::elem;
using fa_sm80::imin;

constexpr int BR = 128, BN = 64, THREADS = 256, WG_ROWS = 64, STAGES = 3;
static_assert(BN == FA_SM80_BLOCK && BR % FA_SM80_BLOCK == 0, "the core's 64 x 64 block lists");

/* ROWS x D of head h into a blocked tile (16-byte chunks in blocked() order: the 8 lanes of a
 * core matrix write 128 contiguous bytes); rows >= nrows and columns >= d zero. The caller
 * commits and waits. Needs 16-byte aligned rows and d % 8 == 0 (the chooser's condition). */
template <typename T, int D, int ROWS>
__device__ __forceinline__ void load_blocked(T *dst, const fa_cuda_tensor &t, int64_t b, int64_t row0, int64_t nrows,
                                             int64_t h, int d)
{
    constexpr int CB = D / 8;
    const uint32_t base = fa_sm80::smem_addr(dst);
#pragma unroll 4
    for (int e = threadIdx.x; e < ROWS * CB; e += THREADS) {
        const int cm = e >> 3, r = (cm / CB) * 8 + (e & 7), c = (cm % CB) * 8;
        const bool valid = r < nrows && c < d;
        const T *src = valid ? fa_sm80::row_ptr<T>(t, b, row0 + r, h) + c : static_cast<const T *>(t.data);
        fa_sm80::cp_async16_s(base + 16u * (uint32_t)e, src, valid);
    }
}

template <typename T, int D, int MODE>
__global__ void __launch_bounds__(THREADS, 1) forward_kernel(const fa_cuda_params p)
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
    const uint32_t q_addr = fa_sm80::smem_addr(qs) + (uint32_t)wg * (WG_ROWS / 8) * ROWB;
    const uint32_t k_addr = fa_sm80::smem_addr(ks), v_addr = fa_sm80::smem_addr(vs);
    const uint32_t full0 = fa_sm80::smem_addr(&bars[0]), empty0 = fa_sm80::smem_addr(&bars[STAGES]);

    /* the key tiles, in order: one walk that issues copies STAGES - 1 tiles ahead, one that consumes */
    fa_sm80::key_walk<BR / BN, LISTS> ahead = fa_sm80::key_walk_of<BR / BN, LISTS>(p, m, h, q0, BR);
    fa_sm80::key_walk<BR / BN, LISTS> walk = ahead;
    if (threadIdx.x == 0) {
        for (int i = 0; i < STAGES; ++i) {
            mbar_init(full0 + 8u * i, THREADS);
            mbar_init(empty0 + 8u * i, THREADS);
        }
    }
    int64_t kt = s.sk > 0 ? walk.peek() : -1;
    if (kt >= 0)
        load_blocked<T, D, BR>(qs, p.q, b, s.q_start + q0, s.sq - q0, h, (int)p.d);
    fa_sm80::cp_async_commit();
    fa_sm80::cp_async_wait<0>();
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
#pragma unroll
        for (int i = 0; i < BN / 2; ++i)
            sflat[i] = 0.0f;
        const uint32_t kb = k_addr + (uint32_t)(buf * TILE * 2), vb = v_addr + (uint32_t)(buf * TILE * 2);
        fence();
#pragma unroll
        for (int kk = 0; kk < D; kk += 16)
            ss_n64<T>(sflat, desc(q_addr + (uint32_t)(kk / 8) * 128u, 128u, ROWB),
                      desc(kb + (uint32_t)(kk / 8) * 128u, 128u, ROWB));
        commit();
        wait<0>();

        const fa_tile_class cls = LISTS ? fa_sm80::rows_class(p, m, h, wq0, wq0 + 16, kt)
                                        : fa_mask_classify_tile(&m, wq0, wq0 + 16, k0, k0 + BN);
        if (cls == FA_TILE_EMPTY || k0 >= s.sk) { /* this warp's rows see none of the tile: P = 0 */
#pragma unroll
            for (int i = 0; i < BN / 2; ++i)
                sflat[i] = -CUDART_INF_F;
        }
        fa_sm80::softmax_step<T, 1, BN, D / 8, 16, LISTS, DROP>(p, m, s, b, h, wq0, k0, cls, cc, sacc, row_m, row_l,
                                                                o);
        uint32_t pf[1][BN / 16][4];
        fa_sm80::acc_to_a<T, BN>(pf[0], sacc[0]);

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
    fa_sm80::stage_output<T, D, 1, 0>(ks, o, row_m, row_l, p, s, b, h, q0, wrow); /* [BR][D + 8] over the stages */
    __syncthreads();
    fa_sm80::store_tile<T, D, true, BR, THREADS>(p.o, ks, b, s.q_start + q0, s.sq - q0, h, (int)p.d);
}

template <typename T, int D> inline cudaError_t launch_forward(const fa_cuda_params &p, cudaStream_t stream)
{
    constexpr int SMEM = (BR + 2 * STAGES * BN) * D * (int)sizeof(T);
    static_assert(BR * (D + 8) <= 2 * STAGES * BN * D, "the O stage fits in the K and V buffers");
    const int64_t nq = (p.seqlen_q + BR - 1) / BR;
    if (nq == 0 || p.batch == 0)
        return cudaSuccess;
    if (nq > 0x7fffffff || p.heads_q > 65535 || p.batch > 65535)
        return cudaErrorInvalidValue;
    const int mode = fa_sm80::mode_of(p);
    const dim3 grid((unsigned)nq, (unsigned)p.heads_q, (unsigned)p.batch);
    cudaError_t e = cudaSuccess;
    switch (mode) {
#define FA_SM90_LAUNCH(M)                                                                                           \
    case M:                                                                                                         \
        e = cudaFuncSetAttribute(forward_kernel<T, D, M>, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM);      \
        if (e == cudaSuccess)                                                                                       \
            forward_kernel<T, D, M><<<grid, THREADS, SMEM, stream>>>(p);                                            \
        break;
        FA_SM90_LAUNCH(0)
        FA_SM90_LAUNCH(1)
        FA_SM90_LAUNCH(2)
#undef FA_SM90_LAUNCH
    default: return cudaErrorInvalidValue;
    }
    return e != cudaSuccess ? e : cudaGetLastError();
}

} // namespace fa_sm90

#endif /* FA_SM90_KERNELS_CUH */
