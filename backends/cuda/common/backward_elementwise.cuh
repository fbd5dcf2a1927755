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
#include "common/sm80_geometry.h"
#include "common/sm90_geometry.h"

#if defined(__CUDACC_RTC__) /* NVRTC: the toolkit's names from common/rtc_prelude.cuh */
#include "common/rtc_prelude.cuh"
#else
#include <math_constants.h>
#endif

namespace fa_gpu {

/* Both families launch these kernels alike, from their geometry headers (which the hosts read). */
constexpr int DSUM_THREADS = FA_SM90_DSUM_THREADS, DSUM_ROWS = FA_SM90_DSUM_ROWS,
              DQ_CONVERT_CHANNELS = FA_SM90_DQ_CONVERT_CHANNELS;
static_assert(FA_SM80_THREADS == DSUM_THREADS && FA_SM80_DSUM_ROWS == DSUM_ROWS &&
                  FA_SM80_CONVERT_CHANNELS == DQ_CONVERT_CHANNELS,
              "the sm80 and sm90 launchers' grids of the row-wise kernels");

/* The rows of a tensor (both of them at once) are 16-byte words from column 0 of every row: the
 * base and the batch, row and head strides are multiples of 16 bytes, and so is d. */
template <typename T> __device__ __forceinline__ bool rows_in_words(const fa_gpu_tensor &a, const fa_gpu_tensor &b, int64_t d)
{
    constexpr int64_t V = 16 / sizeof(T);
    return (((unsigned long long)a.data | (unsigned long long)b.data) & 15) == 0 && d % V == 0 &&
           ((a.sb | a.ss | a.sh | b.sb | b.ss | b.sh) & (V - 1)) == 0;
}

/* The 16-byte word at p (16-byte aligned) */
template <typename T> __device__ __forceinline__ uint4 load_word(const T *p)
{
    return *reinterpret_cast<const uint4 *>(p);
}

/* D = rowsum(dO * O) and, for the fused kernels, LSE log2(e) (and, with p.dq_zero_cols, the rows'
 * dQ accumulator cleared): DSUM_ROWS rows of one
 * (head, sequence) a block of DSUM_THREADS, eight threads a row, each summing 16-byte words
 * (channels 8 t.. of every 64 at 16-bit) where both tensors' rows are made of them, else single
 * channels t, t + 8, ..; grid (ceil(seqlen_q / DSUM_ROWS), heads_q, batch). Sixteen-byte words
 * keep enough bytes in flight per thread for the kernel to run at the copy rate. */
template <typename T> __global__ void dsum_kernel(const fa_gpu_params p)
{
    constexpr int TPR = DSUM_THREADS / DSUM_ROWS, V = 16 / sizeof(T);
    static_assert(TPR == 8, "eight threads a row: the shuffles below");
    const int64_t b = blockIdx.z, h = blockIdx.y, i = (int64_t)blockIdx.x * DSUM_ROWS + threadIdx.x / TPR;
    const int t = threadIdx.x % TPR;
    const fa_seq s = fa_sequence(p, b);
    if (i >= s.sq) /* the row's eight threads leave together */
        return;
    const T *o = row_ptr<T>(p.o, b, s.q_start + i, h), *dout = row_ptr<T>(p.dout, b, s.q_start + i, h);
    float acc = 0.0f;
    if (rows_in_words<T>(p.o, p.dout, p.d)) {
        for (int64_t c = (int64_t)V * t; c < p.d; c += V * TPR) {
            const uint4 wo = load_word(o + c), wd = load_word(dout + c);
            const T *eo = reinterpret_cast<const T *>(&wo), *ed = reinterpret_cast<const T *>(&wd);
#pragma unroll
            for (int k = 0; k < V; ++k)
                acc += elem<T>::to_float(eo[k]) * elem<T>::to_float(ed[k]);
        }
    } else {
        for (int64_t c = t; c < p.d; c += TPR)
            acc += elem<T>::to_float(o[c]) * elem<T>::to_float(dout[c]);
    }
    const int64_t canon = p.cu_q ? s.q_start + i : b * p.seqlen_q + i;
    if (p.dq_zero_cols > 0) { /* the row's dQ accumulator cleared for the backward's reductions */
        float4 *acc_row = reinterpret_cast<float4 *>(p.dq_accum + (h * p.total_q + canon) * p.dq_zero_cols);
        for (int64_t c = t; c < p.dq_zero_cols / 4; c += TPR)
            acc_row[c] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    const unsigned row_lanes = 0xffu << (threadIdx.x & 24); /* the row's eight lanes of the warp */
    for (int off = TPR / 2; off > 0; off >>= 1)
        acc += __shfl_xor_sync(row_lanes, acc, off, TPR);
    if (t == 0) {
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

/* dQ (T, or fp32 for p.out_f32) from the fp32 accumulator: DQ_CONVERT_CHANNELS consecutive
 * channels of one row of one sequence a thread (grid: ceil(seqlen_q D / 8 / threads), heads_q,
 * batch), read as two 16-byte words (the swizzle moves whole groups of eight) and written as one
 * where dQ's rows are 16-byte words of T, else one by one; SWZ: the accumulator's rows swizzled
 * (dq_swizzle, the sm90 backward). */
template <typename T, int D, int DV = D, bool SWZ = false> __global__ void dq_convert_kernel(const fa_gpu_params p)
{
    constexpr int C = DQ_CONVERT_CHANNELS;
    static_assert(!SWZ || DV >= 64, "the swizzle permutes bits 3..5 of a row's column");
    static_assert(C == 8 && D % C == 0 && DV % C == 0, "whole groups of eight channels, in one column block");
    /* DV < D: the accumulator is [D / DV][heads_q][total_q][DV] (column blocks of DV) */
    const int64_t b = blockIdx.z, h = blockIdx.y;
    const fa_seq s = fa_sequence(p, b);
    const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, i = e / (D / C);
    const int c = (int)(e % (D / C)) * C;
    if (i >= s.sq || c >= p.d)
        return;
    const int64_t hp = (int64_t)(c / DV) * p.heads_q + h, token = p.cu_q ? s.q_start + i : b * p.seqlen_q + i;
    const float4 *src = reinterpret_cast<const float4 *>(
        p.dq_accum + (hp * p.total_q + token) * DV + ((c % DV) ^ (SWZ ? dq_swizzle(token) : 0)));
    const float4 lo = src[0], hi = src[1];
    /* a row that saw no key: dQ = 0 (its dS is 0, but 0 times a NaN in K reached the accumulator) */
    const float l = static_cast<const float *>(p.lse.data)[b * p.lse.sb + h * p.lse.sh + (s.q_start + i) * p.lse.ss];
    const float keep = fa_row_absent(l) ? 0.0f : 1.0f;
    const float v[C] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    const int64_t off = b * p.dq.sb + (s.q_start + i) * p.dq.ss + h * p.dq.sh + c;
    if (!p.out_f32 && sizeof(T) * C == 16 && c + C <= p.d && rows_in_words<T>(p.dq, p.dq, C)) {
        union {
            uint4 word;
            T e[C];
        } w;
#pragma unroll
        for (int k = 0; k < C; ++k)
            w.e[k] = elem<T>::from_float(fa_row_output(v[k], keep));
        /* one 16-byte store (a uint4 assigned from parts is stored as four words) */
        asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(static_cast<T *>(p.dq.data) + off),
                     "r"(w.word.x), "r"(w.word.y), "r"(w.word.z), "r"(w.word.w)
                     : "memory");
    } else {
#pragma unroll
        for (int k = 0; k < C; ++k)
            if (c + k < p.d)
                store_out<T>(p.dq.data, off + k, fa_row_output(v[k], keep), p.out_f32);
    }
}

} // namespace fa_gpu

#endif
