/* backward_elementwise.cuh: the row-wise kernels around every backward (sm80 and sm90):
 * dsum_kernel before it (D = rowsum(dO * O), and LSE log2(e) for the fused kernels) and
 * dq_convert_kernel after the fused ones (dQ from the fp32 accumulator). */
#ifndef FA_SM80_BACKWARD_ELEMENTWISE_CUH
#define FA_SM80_BACKWARD_ELEMENTWISE_CUH

#include "common/params.h"
#include "common/primitives.cuh"
#include "common/tile_geometry.cuh"
#include "common/tile_io.cuh"
#include "common/backward_step.cuh"

#include "empty_row.h"

#if defined(__CUDACC_RTC__) /* NVRTC: the toolkit's names from common/rtc_prelude.cuh */
#include "common/rtc_prelude.cuh"
#else
#include <math_constants.h>
#endif

namespace fa_gpu {

template <typename T> __global__ void dsum_kernel(const fa_gpu_params p)
{
    /* one warp per (row, head) of one sequence: grid (ceil(seqlen_q / 4), heads_q, batch) */
    const int64_t b = blockIdx.z, h = blockIdx.y, i = blockIdx.x * 4 + threadIdx.x / 32;
    const fa_seq s = fa_sequence(p, b);
    if (i >= s.sq)
        return;
    const T *o = row_ptr<T>(p.o, b, s.q_start + i, h), *dout = row_ptr<T>(p.dout, b, s.q_start + i, h);
    float acc = 0.0f;
    for (int c = threadIdx.x & 31; c < p.d; c += 32)
        acc += elem<T>::to_float(o[c]) * elem<T>::to_float(dout[c]);
    for (int off = 16; off > 0; off >>= 1)
        acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if ((threadIdx.x & 31) == 0) {
        int64_t canon = p.cu_q ? s.q_start + i : b * p.seqlen_q + i;
        const float l = static_cast<const float *>(p.lse.data)[b * p.lse.sb + h * p.lse.sh + (s.q_start + i) * p.lse.ss];
        /* a row that saw no key has D = 0 whatever dO holds (core/empty_row.h): the kernels set dP to
         * 0 on masked elements, so dS = P (dP - D) is then 0, not 0 * NaN */
        p.dsum[h * p.total_q + canon] = fa_row_absent(l) ? 0.0f : acc;
        if (p.lse2) /* LSE * log2(e) for the fused kernel; +inf for a fully masked row, so P = 0 */
            p.lse2[h * p.total_q + canon] = fa_row_absent(l) ? CUDART_INF_F : l * LOG2E;
    }
}

/* The sm90 backward's accumulator rows are swizzled: token t's column c is held at column
 * c ^ dq_swizzle(t), an XOR on bits 3..5 (rows of at least 64 floats). Its consumers store their dQ
 * fragments to a shared tile of such rows, eight rows at the same columns per store: spread over
 * the eight swizzles, the store touches every bank once or twice instead of eight times, and the
 * bulk reduction copies the tile's rows into the accumulator as they are. */
__device__ __forceinline__ int dq_swizzle(int64_t token)
{
    return (int)(token & 7) << 3;
}

/* dQ (T, or fp32 for p.out_f32) from the fp32 accumulator: one thread per element of one
 * sequence's rows; SWZ: the accumulator's rows swizzled (dq_swizzle, the sm90 backward). */
template <typename T, int D, int DV = D, bool SWZ = false> __global__ void dq_convert_kernel(const fa_gpu_params p)
{
    static_assert(!SWZ || DV >= 64, "the swizzle permutes bits 3..5 of a row's column");
    /* DV < D: the accumulator is [D / DV][heads_q][total_q][DV] (column blocks of DV) */
    const int64_t b = blockIdx.z, h = blockIdx.y;
    const fa_seq s = fa_sequence(p, b);
    const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, i = e / D;
    const int c = (int)(e % D);
    if (i >= s.sq || c >= p.d)
        return;
    const int64_t hp = (int64_t)(c / DV) * p.heads_q + h, token = p.cu_q ? s.q_start + i : b * p.seqlen_q + i;
    const float v = p.dq_accum[(hp * p.total_q + token) * DV + ((c % DV) ^ (SWZ ? dq_swizzle(token) : 0))];
    /* a row that saw no key: dQ = 0 (its dS is 0, but 0 times a NaN in K reached the accumulator) */
    const float l = static_cast<const float *>(p.lse.data)[b * p.lse.sb + h * p.lse.sh + (s.q_start + i) * p.lse.ss];
    store_out<T>(p.dq.data, b * p.dq.sb + (s.q_start + i) * p.dq.ss + h * p.dq.sh + c,
                 fa_row_output(v, fa_row_absent(l) ? 0.0f : 1.0f), p.out_f32);
}

} // namespace fa_gpu

#endif
