/* backward_step.cuh: pieces every tensor-core backward kernel (sm80 and sm90) shares: the store of
 * one output element, the store of dK / dV from registers, the zeroing of rows that saw no key,
 * and dS from P, dP and D. */
#ifndef FA_CUDA_COMMON_BACKWARD_STEP_CUH
#define FA_CUDA_COMMON_BACKWARD_STEP_CUH

#include "common/params.h"
#include "common/primitives.cuh"

#if defined(__CUDACC_RTC__) /* NVRTC: the toolkit's names from common/rtc_prelude.cuh */
#include "common/rtc_prelude.cuh"
#else
#include <math_constants.h>
#endif

namespace fa_gpu {

/* One output element at element offset off: fp32 when the call asks for fp32 outputs
 * (p.out_f32, written unrounded), else converted to T. */
template <typename T> __device__ __forceinline__ void store_out(void *data, int64_t off, float v, int out_f32)
{
    if (out_f32)
        static_cast<float *>(data)[off] = v;
    else
        static_cast<T *>(data)[off] = elem<T>::from_float(v);
}

/* The end of every backward kernel that keeps dK and dV of its keys in registers (the mma / wgmma
 * accumulator layout: n8 block nt holds columns col0 + 8 nt + 2 t4 and + 1, elements 2 r and
 * 2 r + 1 of row r): the thread's two key rows j[0], j[1] of kv head hk converted and stored; rows
 * past the sequence and columns past d skipped. */
template <typename T, int D>
__device__ __forceinline__ void store_dkdv(const fa_gpu_params &p, const fa_seq &s, int64_t b, int64_t hk,
                                           const int64_t (&j)[2], int t4, const float (*dk)[4], const float (*dv)[4],
                                           int col0 = 0)
{
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        if (j[r] >= s.sk)
            continue;
        const int64_t ko = b * p.dk.sb + (s.k_start + j[r]) * p.dk.ss + hk * p.dk.sh;
        const int64_t vo = b * p.dv.sb + (s.k_start + j[r]) * p.dv.ss + hk * p.dv.sh;
#pragma unroll
        for (int nt = 0; nt < D / 8; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int c = col0 + nt * 8 + 2 * t4 + e;
                if (c < p.d) {
                    store_out<T>(p.dk.data, ko + c, dk[nt][2 * r + e], p.out_f32);
                    store_out<T>(p.dv.data, vo + c, dv[nt][2 * r + e], p.out_f32);
                }
            }
    }
}

/* The backward's rule for rows that saw no key (core/empty_row.h): their Q and dO enter the
 * products as 0, whatever they hold (0 * NaN in an MMA is NaN). lse2 holds the tile's LSE log2(e),
 * +inf for such a row. Every thread of the block calls this with the same tile once it and lse2
 * are visible; the rows are zeroed in place (row stride ld, d padded to D, NT threads), and the
 * return value says whether any was, in which case the caller synchronises before reading the
 * tiles. Called on edge tiles only: a row that sees no key makes its tile PARTIAL. */
template <typename T, int D, int ROWS, int NT>
__device__ __forceinline__ bool zero_absent_rows(T *q, T *dout, int ld, const float *lse2)
{
    bool any = false;
#pragma unroll 8
    for (int r = 0; r < ROWS; ++r)
        any |= lse2[r] == CUDART_INF_F;
    if (!any)
        return false;
    for (int e = threadIdx.x; e < ROWS * (D / 8); e += NT) {
        const int r = e / (D / 8), c = (e % (D / 8)) * 8;
        if (lse2[r] == CUDART_INF_F) {
            *reinterpret_cast<uint4 *>(q + r * ld + c) = make_uint4(0u, 0u, 0u, 0u);
            *reinterpret_cast<uint4 *>(dout + r * ld + c) = make_uint4(0u, 0u, 0u, 0u);
        }
    }
    return true;
}

/* dS from pr = P (times the softcap's derivative in the MOD instances), dP (dropout factor
 * applied) and D: a select where pr = 0, so that a masked element
 * whose dP is NaN (V = NaN there) gives 0 rather than 0 * NaN. The dK/dV kernel's form, where dP
 * is computed after P has been masked; the fused kernels instead set dP to 0 on the masked
 * elements of edge tiles (with D = 0 for rows that saw no key, dsum_kernel), which costs nothing
 * on FULL tiles. */
__device__ __forceinline__ float ds_of(float pr, float dpz, float d, float scale)
{
    return pr == 0.0f ? 0.0f : pr * (dpz - d) * scale;
}

} // namespace fa_gpu

#endif
