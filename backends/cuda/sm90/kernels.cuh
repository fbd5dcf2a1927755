/* kernels.cuh: the Hopper forward (sm_90a): the sm80 forward's algorithm with both products on
 * warpgroup MMA. Two warpgroups (256 threads) per 128-row query tile, 64 rows each, sharing the
 * 64-key K/V tiles (so each tile is read from L2 once per 128 rows: with one warpgroup per 64
 * rows the first version was L2-bound, 85 % of L2 throughput at half the sm80 speed); the tiles are
 * double-buffered in shared memory through cp.async in the core-matrix layout wgmma reads
 * (primitives.cuh, blocked()); S = Q K^T as wgmma m64n64k16 with both operands in shared memory;
 * the online-softmax step, masks and dropout are the sm80 kernels' (fa_sm80::softmax_step, the
 * accumulator layout is the same per warp); P goes back as the A operand from registers and
 * O += P V as wgmma m64n{D}k16 with V transposed by the instruction. The two warpgroups run
 * independently between the per-tile barriers, so one's softmax overlaps the other's products.
 * Not yet: TMA, warp specialisation, ping-pong scheduling, intra-warpgroup pipelining (issue 6). */
#ifndef FA_SM90_KERNELS_CUH
#define FA_SM90_KERNELS_CUH

#include "../sm80/kernels.cuh"
#include "primitives.cuh"

namespace fa_sm90 {

using fa_sm80::elem;
using fa_sm80::imin;

constexpr int BR = 128, BN = 64, THREADS = 256, WG_ROWS = 64;
static_assert(BN == FA_SM80_BLOCK && BR % FA_SM80_BLOCK == 0, "the core's 64 x 64 block lists");

/* Leading / stride byte offsets of V's descriptor ([keys][D] blocked, read transposed) */
#ifndef FA_SM90_V_LBO_IS_K
#define FA_SM90_V_LBO_IS_K 1
#endif

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
    T *qs = reinterpret_cast<T *>(smem_raw); /* [BR][D] blocked */
    T *ks = qs + BR * D;                     /* [2][BN][D] blocked; with vs, stages O at the end */
    T *vs = ks + 2 * TILE;                   /* [2][BN][D] blocked */

    const int64_t h = blockIdx.y, b = blockIdx.z;
    const fa_seq s = fa_sequence(p, b);
    const int64_t q0 = (int64_t)blockIdx.x * BR;
    if (q0 >= s.sq)
        return;
    const int64_t hk = h / p.group;
    const fa_mask m = fa_mask_make(s.sq, s.sk, p.causal, p.window_left, p.window_right);
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3, wg = warp / 4;
    const int wrow = WG_ROWS * wg + 16 * (warp & 3); /* the warp's first row in the tile */
    const int64_t wq0 = q0 + wrow;                    /* ... in the sequence */
    fa_sm80::key_walk<BR / BN, LISTS> walk = fa_sm80::key_walk_of<BR / BN, LISTS>(p, m, h, q0, BR);
    const float cc = p.scale_log2 > 0.0f ? p.scale_log2 : 1.0f;
    const uint32_t q_addr = fa_sm80::smem_addr(qs) + (uint32_t)wg * (WG_ROWS / 8) * ROWB, k_addr = fa_sm80::smem_addr(ks), v_addr = fa_sm80::smem_addr(vs);
    int64_t kt = s.sk > 0 ? walk.peek() : -1;

    if (kt >= 0) {
        load_blocked<T, D, BR>(qs, p.q, b, s.q_start + q0, s.sq - q0, h, (int)p.d);
        load_blocked<T, D, BN>(ks, p.k, b, s.k_start + kt * BN, s.sk - kt * BN, hk, (int)p.d);
        load_blocked<T, D, BN>(vs, p.v, b, s.k_start + kt * BN, s.sk - kt * BN, hk, (int)p.d);
    }
    fa_sm80::cp_async_commit();

    float o[1][D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; ++i)
        o[0][i][0] = o[0][i][1] = o[0][i][2] = o[0][i][3] = 0.0f;
    float row_m[1][2] = {{-CUDART_INF_F, -CUDART_INF_F}}, row_l[1][2] = {{0.0f, 0.0f}};

    for (int buf = 0; kt >= 0; buf ^= 1) {
        const int64_t k0 = kt * BN;
        walk.pop(kt);
        const int64_t kn = walk.peek();
        if (kn >= 0) {
            load_blocked<T, D, BN>(ks + (buf ^ 1) * TILE, p.k, b, s.k_start + kn * BN, s.sk - kn * BN, hk, (int)p.d);
            load_blocked<T, D, BN>(vs + (buf ^ 1) * TILE, p.v, b, s.k_start + kn * BN, s.sk - kn * BN, hk, (int)p.d);
            fa_sm80::cp_async_commit();
            fa_sm80::cp_async_wait<1>();
        } else {
            fa_sm80::cp_async_wait<0>();
        }
        fence_proxy_async();
        __syncthreads();

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
            rs<T, D>::run(oflat, pf[0][kk / 16], FA_SM90_V_LBO_IS_K ? desc(a, ROWB, 128u) : desc(a, 128u, ROWB));
        }
        commit();
        wait<0>();
        kt = kn;
        __syncthreads();
    }

    /* epilogue: O / l staged row-major ([BR][D + 8]) in the K buffers, free after the loop's
     * last barrier (or never loaded), then 16-byte row stores; LSE as in the sm80 forward */
    constexpr int LD = D + 8;
    T *stage = ks; /* [BR][LD] over the K and V buffers */
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float l = row_l[0][r];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        const int rr = wrow + g + r * 8;
#pragma unroll
        for (int nt = 0; nt < D / 8; ++nt)
            *reinterpret_cast<uint32_t *>(stage + rr * LD + nt * 8 + 2 * t4) =
                elem<T>::pack(o[0][nt][2 * r] * inv, o[0][nt][2 * r + 1] * inv);
        const int64_t i = q0 + rr;
        if (p.lse.data && t4 == 0 && i < s.sq) {
            const float lse = (l > 0.0f && row_m[0][r] != -CUDART_INF_F) ? (row_m[0][r] + log2f(l)) * fa_sm80::LN2
                                                                          : -CUDART_INF_F;
            static_cast<float *>(p.lse.data)[b * p.lse.sb + h * p.lse.sh + (s.q_start + i) * p.lse.ss] = lse;
        }
    }
    __syncthreads();
    fa_sm80::store_tile<T, D, true, BR, THREADS>(p.o, stage, b, s.q_start + q0, s.sq - q0, h, (int)p.d);
}

template <typename T, int D> inline cudaError_t launch_forward(const fa_cuda_params &p, cudaStream_t stream)
{
    constexpr int SMEM = (BR + 4 * BN) * D * (int)sizeof(T);
    static_assert(BR * (D + 8) <= 4 * BN * D, "the O stage fits in the K and V buffers");
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
