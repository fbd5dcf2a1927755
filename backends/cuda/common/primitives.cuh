/* primitives.cuh: the warp-level pieces of the sm80 kernels: mma.sync m16n8k16 (fp16/bf16 in,
 * fp32 accumulate), ldmatrix (plain and transposed), cp.async 16-byte copies with zero fill,
 * fragment packing. Needs compute capability 8.0 or newer. */
#ifndef FA_SM80_PRIMITIVES_CUH
#define FA_SM80_PRIMITIVES_CUH

#if defined(__CUDACC_RTC__) /* NVRTC: the toolkit's names from common/rtc_prelude.cuh */
#include "common/rtc_prelude.cuh"
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#endif

namespace fa_gpu {

/* The instructions below (mma.sync m16n8k16 with f32 accumulators, ldmatrix, cp.async) need
 * compute capability 8.0. A build whose cuda-archs also lists older targets (70, 75: the
 * SIMT kernels serve those devices) compiles these kernels for them with trapping bodies;
 * the backend's chooser never launches an sm80 kernel on a device below 8.0. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define FA_SM80_ASM(...) __trap()
#else
#define FA_SM80_ASM(...) asm volatile(__VA_ARGS__)
#endif

template <typename T> struct elem;
template <> struct elem<__half> {
    static __device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
    static __device__ __forceinline__ __half from_float(float x) { return __float2half_rn(x); }
    static __device__ __forceinline__ uint32_t pack(float a, float b)
    {
        __half2 h = __floats2half2_rn(a, b);
        return *reinterpret_cast<uint32_t *>(&h);
    }
    static __device__ __forceinline__ void mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
    {
        FA_SM80_ASM("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
};
template <> struct elem<__nv_bfloat16> {
    static __device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
    static __device__ __forceinline__ __nv_bfloat16 from_float(float x) { return __float2bfloat16_rn(x); }
    static __device__ __forceinline__ uint32_t pack(float a, float b)
    {
        __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
        return *reinterpret_cast<uint32_t *>(&h);
    }
    static __device__ __forceinline__ void mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
    {
        FA_SM80_ASM("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
};

__device__ __forceinline__ uint32_t smem_addr(const void *p)
{
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void *p)
{
    FA_SM80_ASM("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], const void *p)
{
    FA_SM80_ASM("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

/* The same on 32-bit shared-space addresses: a kernel keeps one base register per tile and adds
 * compile-time offsets, which ptxas folds into the instruction's immediate (no address registers
 * hoisted per fragment). */
__device__ __forceinline__ void ldsm_x4(uint32_t r[4], uint32_t addr)
{
    FA_SM80_ASM("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

__device__ __forceinline__ void ldsm_x4_t(uint32_t r[4], uint32_t addr)
{
    FA_SM80_ASM("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

/* Per-lane element offsets inside a row-major tile of leading dimension ld for the three
 * fragment loads below: A (16 x 16 at the origin) and the transposed B of load_b_nn share one
 * pattern, load_b_nt has the other. */
__device__ __forceinline__ int lane_off_a(int ld)
{
    int lane = threadIdx.x & 31;
    return ((lane & 7) + ((lane >> 3) & 1) * 8) * ld + (lane >> 4) * 8;
}
__device__ __forceinline__ int lane_off_bt(int ld)
{
    int lane = threadIdx.x & 31;
    return ((lane & 7) + (lane >> 4) * 8) * ld + ((lane >> 3) & 1) * 8;
}

/* 16 bytes global -> shared; zero-filled when !valid (src is then not read). */
__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool valid)
{
    FA_SM80_ASM("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(valid ? 16 : 0));
}

/* cp_async16 asking L2 to fetch the whole 128- or 256-byte span around src from memory (the
 * .L2::128B / .L2::256B prefetch-size hint), for rows read whole by neighbouring copies. */
template <int PREFETCH> __device__ __forceinline__ void cp_async16_prefetch(void *dst, const void *src, bool valid)
{
    static_assert(PREFETCH == 128 || PREFETCH == 256, "prefetch sizes 128 and 256");
    if (PREFETCH == 256)
        FA_SM80_ASM("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                     "r"(valid ? 16 : 0));
    else
        FA_SM80_ASM("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                     "r"(valid ? 16 : 0));
}

/* The same to a shared-memory address already converted (smem_addr). */
__device__ __forceinline__ void cp_async16_s(uint32_t dst, const void *src, bool valid)
{
    FA_SM80_ASM("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}

/* 4 bytes global -> shared through L1; zero-filled when !valid (src is then not read). */
__device__ __forceinline__ void cp_async4(void *dst, const void *src, bool valid)
{
    FA_SM80_ASM("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                "r"(valid ? 4 : 0));
}

__device__ __forceinline__ void cp_async_commit()
{
    FA_SM80_ASM("cp.async.commit_group;\n" ::);
}

template <int N> __device__ __forceinline__ void cp_async_wait()
{
    FA_SM80_ASM("cp.async.wait_group %0;\n" ::"n"(N));
}

/* A fragment (16 x 16, row-major) at (row0, col0) of a row-major tile with leading dimension ld. */
template <typename T> __device__ __forceinline__ void load_a(uint32_t a[4], const T *tile, int ld, int row0, int col0)
{
    int lane = threadIdx.x & 31;
    int r = row0 + (lane & 7) + ((lane >> 3) & 1) * 8, c = col0 + (lane >> 4) * 8;
    ldmatrix_x4(a, tile + r * ld + c);
}

/* B fragments of two n8 tiles for C = A * X^T, X stored row-major [n][k] (rows n0 .. n0 + 16,
 * columns k0 .. k0 + 16): b[0], b[1] for n0 .. n0 + 8, b[2], b[3] for n0 + 8 .. n0 + 16. */
template <typename T> __device__ __forceinline__ void load_b_nt(uint32_t b[4], const T *tile, int ld, int n0, int k0)
{
    int lane = threadIdx.x & 31;
    int r = n0 + (lane & 7) + (lane >> 4) * 8, c = k0 + ((lane >> 3) & 1) * 8;
    ldmatrix_x4(b, tile + r * ld + c);
}

/* B fragments of two n8 tiles for C = A * X, X stored row-major [k][n] (rows k0 .. k0 + 16,
 * columns n0 .. n0 + 16), through the transposing ldmatrix. */
template <typename T> __device__ __forceinline__ void load_b_nn(uint32_t b[4], const T *tile, int ld, int k0, int n0)
{
    int lane = threadIdx.x & 31;
    int r = k0 + (lane & 7) + ((lane >> 3) & 1) * 8, c = n0 + (lane >> 4) * 8;
    ldmatrix_x4_trans(b, tile + r * ld + c);
}

/* acc[N/8][4] (16 x N) += A (16 x K, rows arow0.. of tile a) * X^T (X rows [n][k] in tile x) */
template <typename T, int N, int K>
__device__ __forceinline__ void gemm_nt(float (*acc)[4], const T *a, int lda, int arow0, const T *x, int ldx)
{
#pragma unroll
    for (int kk = 0; kk < K; kk += 16) {
        uint32_t af[4];
        load_a(af, a, lda, arow0, kk);
#pragma unroll
        for (int n = 0; n < N; n += 16) {
            uint32_t bf[4];
            load_b_nt(bf, x, ldx, n, kk);
            elem<T>::mma(acc[n / 8], af, bf[0], bf[1]);
            elem<T>::mma(acc[n / 8 + 1], af, bf[2], bf[3]);
        }
    }
}

/* acc[N/8][4] (16 x N) += P (16 x K, as A fragments pf[K/16][4]) * X (X rows [k][n] in tile x) */
template <typename T, int N, int K>
__device__ __forceinline__ void gemm_pn(float (*acc)[4], const uint32_t (*pf)[4], const T *x, int ldx)
{
#pragma unroll
    for (int kk = 0; kk < K; kk += 16) {
#pragma unroll
        for (int n = 0; n < N; n += 16) {
            uint32_t bf[4];
            load_b_nn(bf, x, ldx, kk, n);
            elem<T>::mma(acc[n / 8], pf[kk / 16], bf[0], bf[1]);
            elem<T>::mma(acc[n / 8 + 1], pf[kk / 16], bf[2], bf[3]);
        }
    }
}

/* gemm_nt / gemm_pn on shared-space base addresses (bytes) that already include the lane offset
 * (lane_off_a for A and for gemm_pn's X, lane_off_bt for gemm_nt's X) and the tile origin: every
 * fragment address is then base + a compile-time immediate. */
template <typename T, int N, int K, int LDA, int LDX>
__device__ __forceinline__ void gemm_nt_s(float (*acc)[4], uint32_t a, uint32_t x)
{
#pragma unroll
    for (int kk = 0; kk < K; kk += 16) {
        uint32_t af[4];
        ldsm_x4(af, a + 2u * kk);
#pragma unroll
        for (int n = 0; n < N; n += 16) {
            uint32_t bf[4];
            ldsm_x4(bf, x + 2u * (n * LDX + kk));
            elem<T>::mma(acc[n / 8], af, bf[0], bf[1]);
            elem<T>::mma(acc[n / 8 + 1], af, bf[2], bf[3]);
        }
    }
}

/* gemm_nt_s for MT m16 tiles of A (rows 16 mt.. at a + 2 * 16 mt LDA) at once: each X fragment
 * read from shared memory feeds MT mma. */
template <typename T, int MT, int N, int K, int LDA, int LDX>
__device__ __forceinline__ void gemm_nt_rows_s(float (&acc)[MT][N / 8][4], uint32_t a, uint32_t x)
{
#pragma unroll
    for (int kk = 0; kk < K; kk += 16) {
        uint32_t af[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
            ldsm_x4(af[mt], a + 2u * (uint32_t)(mt * 16 * LDA + kk));
#pragma unroll
        for (int n = 0; n < N; n += 16) {
            uint32_t bf[4];
            ldsm_x4(bf, x + 2u * (uint32_t)(n * LDX + kk));
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                elem<T>::mma(acc[mt][n / 8], af[mt], bf[0], bf[1]);
                elem<T>::mma(acc[mt][n / 8 + 1], af[mt], bf[2], bf[3]);
            }
        }
    }
}

/* Two independent products in one k loop, C0 += A0 X0^T and C1 += A1 X1^T (the backward's S^T
 * and dP^T): twice the independent MMAs behind each wait for fragments. */
template <typename T, int N, int K, int LDA, int LDX>
__device__ __forceinline__ void gemm_nt2_s(float (*acc0)[4], uint32_t a0, uint32_t x0, float (*acc1)[4], uint32_t a1,
                                           uint32_t x1)
{
#pragma unroll
    for (int kk = 0; kk < K; kk += 16) {
        uint32_t af0[4], af1[4];
        ldsm_x4(af0, a0 + 2u * kk);
        ldsm_x4(af1, a1 + 2u * kk);
#pragma unroll
        for (int n = 0; n < N; n += 16) {
            uint32_t bf0[4], bf1[4];
            ldsm_x4(bf0, x0 + 2u * (n * LDX + kk));
            ldsm_x4(bf1, x1 + 2u * (n * LDX + kk));
            elem<T>::mma(acc0[n / 8], af0, bf0[0], bf0[1]);
            elem<T>::mma(acc0[n / 8 + 1], af0, bf0[2], bf0[3]);
            elem<T>::mma(acc1[n / 8], af1, bf1[0], bf1[1]);
            elem<T>::mma(acc1[n / 8 + 1], af1, bf1[2], bf1[3]);
        }
    }
}

/* p[0] += a, p[1] += b in global memory (p 8-byte aligned), unordered: one vector reduction on
 * sm_90 (half the instructions through the LSU), two scalar ones before. */
__device__ __forceinline__ void red_add2(float *p, float a, float b)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(p), "f"(a), "f"(b) : "memory");
#else
    atomicAdd(p, a);
    atomicAdd(p + 1, b);
#endif
}

/* p[0..3] += a, b, c, d in global memory (p 16-byte aligned), unordered: one vector reduction
 * (sm_90). */
__device__ __forceinline__ void red_add4(float *p, float a, float b, float c, float d)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
#else
    atomicAdd(p, a);
    atomicAdd(p + 1, b);
    atomicAdd(p + 2, c);
    atomicAdd(p + 3, d);
#endif
}

template <typename T, int N, int K, int LDX>
__device__ __forceinline__ void gemm_pn_s(float (*acc)[4], const uint32_t (*pf)[4], uint32_t x)
{
#pragma unroll
    for (int kk = 0; kk < K; kk += 16) {
#pragma unroll
        for (int n = 0; n < N; n += 16) {
            uint32_t bf[4];
            ldsm_x4_t(bf, x + 2u * (kk * LDX + n));
            elem<T>::mma(acc[n / 8], pf[kk / 16], bf[0], bf[1]);
            elem<T>::mma(acc[n / 8 + 1], pf[kk / 16], bf[2], bf[3]);
        }
    }
}

/* gemm_pn_s for MT m16 tiles of P at once: each X fragment feeds MT mma. */
template <typename T, int MT, int N, int K, int LDX>
__device__ __forceinline__ void gemm_pn_rows_s(float (&acc)[MT][N / 8][4], const uint32_t (&pf)[MT][K / 16][4],
                                               uint32_t x)
{
#pragma unroll
    for (int kk = 0; kk < K; kk += 16)
#pragma unroll
        for (int n = 0; n < N; n += 16) {
            uint32_t bf[4];
            ldsm_x4_t(bf, x + 2u * (uint32_t)(kk * LDX + n));
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                elem<T>::mma(acc[mt][n / 8], pf[mt][kk / 16], bf[0], bf[1]);
                elem<T>::mma(acc[mt][n / 8 + 1], pf[mt][kk / 16], bf[2], bf[3]);
            }
        }
}

/* Accumulators (16 x K, fp32) to A fragments for the next product: the C layout of two
 * neighbouring n8 tiles is the A layout of one k16 step. */
template <typename T, int K>
__device__ __forceinline__ void acc_to_a(uint32_t (*pf)[4], const float (*acc)[4])
{
#pragma unroll
    for (int kk = 0; kk < K / 16; ++kk) {
        pf[kk][0] = elem<T>::pack(acc[2 * kk][0], acc[2 * kk][1]);
        pf[kk][1] = elem<T>::pack(acc[2 * kk][2], acc[2 * kk][3]);
        pf[kk][2] = elem<T>::pack(acc[2 * kk + 1][0], acc[2 * kk + 1][1]);
        pf[kk][3] = elem<T>::pack(acc[2 * kk + 1][2], acc[2 * kk + 1][3]);
    }
}

} // namespace fa_gpu

#endif
