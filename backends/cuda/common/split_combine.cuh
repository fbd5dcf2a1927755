/* split_combine.cuh: the merge of a forward whose keys were split among blocks
 * (fa_gpu_params.splits > 1; the Hopper forward's split instances write the parts): for each query
 * row and head, the parts' normalised O (fp32, split_o) weighted by exp(LSE_s - LSE) with LSE =
 * log sum_s exp(LSE_s) (split_lse), into o (the call's dtype, or fp32 under out_f32) and lse where
 * the call asked for it.
 *
 * A part whose rows saw no key has LSE -inf and weight 0 (its O, zero, is not read); a row no part
 * saw gets O = 0 and LSE = -inf. A NaN LSE (a NaN score the part's rows saw) makes the row's O and
 * LSE NaN: the maximum below lets NaN through, where fmaxf would drop it. One warp per (row, head),
 * each lane summing channels lane, lane + 32, ... of the instance's head dim D (d <= D, a multiple
 * of 32): the parts' rows read coalesced, one after another. */
#ifndef FA_GPU_SPLIT_COMBINE_CUH
#define FA_GPU_SPLIT_COMBINE_CUH

#include "common/params.h"
#include "common/primitives.cuh"
#include "common/split_rule.h"

namespace fa_gpu {

template <typename T, int D>
__global__ void __launch_bounds__(FA_SPLIT_COMBINE_THREADS) split_combine_kernel(const fa_gpu_params p)
{
    constexpr int WARPS = FA_SPLIT_COMBINE_THREADS / 32, CH = D / 32;
    static_assert(D % 32 == 0, "whole channel groups of 32");
    const int lane = threadIdx.x & 31;
    const int64_t items = p.total_q * p.heads_q;
    const int64_t item = (int64_t)blockIdx.x * WARPS + threadIdx.x / 32; /* (packed row, head) */
    if (item >= items)
        return;
    const int64_t row = item / p.heads_q, h = item % p.heads_q, d = p.d;
    /* the row's place in o, lse and the parts: (sequence, row) of a dense call, the packed row of a
     * varlen one */
    const int64_t b = p.cu_q ? 0 : row / p.seqlen_q, i = p.cu_q ? row : row % p.seqlen_q;
    const float *lse_part =
        static_cast<const float *>(p.split_lse.data) + b * p.split_lse.sb + i * p.split_lse.ss + h * p.split_lse.sh;
    const float *o_part =
        static_cast<const float *>(p.split_o.data) + b * p.split_o.sb + i * p.split_o.ss + h * p.split_o.sh;
    float mx = -CUDART_INF_F;
    for (int64_t s = 0; s < p.splits; ++s) {
        const float l = lse_part[s * p.split_stride_lse];
        mx = (l > mx || l != l) ? l : mx; /* NaN once seen stays: neither test holds against it */
    }
    float acc[CH], sum = 0.0f;
#pragma unroll
    for (int j = 0; j < CH; ++j)
        acc[j] = 0.0f;
    if (mx != -CUDART_INF_F) /* the same for the whole warp */
        for (int64_t s = 0; s < p.splits; ++s) {
            const float l = lse_part[s * p.split_stride_lse];
            const float w = l == -CUDART_INF_F ? 0.0f : expf(l - mx);
            sum += w;
            if (w != 0.0f) {
                const float *part = o_part + s * p.split_stride_o;
#pragma unroll
                for (int j = 0; j < CH; ++j)
                    if (lane + 32 * j < d)
                        acc[j] += w * part[lane + 32 * j];
            }
        }
    const bool empty = sum == 0.0f;
    const float inv = empty ? 0.0f : 1.0f / sum;
    const int64_t at = b * p.o.sb + i * p.o.ss + h * p.o.sh;
#pragma unroll
    for (int j = 0; j < CH; ++j) {
        const int64_t c = lane + 32 * j;
        if (c < d) {
            const float v = empty ? 0.0f : acc[j] * inv;
            if (p.out_f32)
                static_cast<float *>(p.o.data)[at + c] = v;
            else
                static_cast<T *>(p.o.data)[at + c] = elem<T>::from_float(v);
        }
    }
    if (p.lse.data && lane == 0)
        static_cast<float *>(p.lse.data)[b * p.lse.sb + h * p.lse.sh + i * p.lse.ss] =
            empty ? -CUDART_INF_F : mx + logf(sum);
}

/* Part `split`'s view for the forward's epilogue (stage_output): o and lse its parts, fp32 output. */
__device__ __forceinline__ fa_gpu_params split_part_params(const fa_gpu_params &p, int64_t split)
{
    fa_gpu_params q = p;
    q.out_f32 = 1;
    q.o = p.split_o;
    q.o.data = static_cast<float *>(p.split_o.data) + split * p.split_stride_o;
    q.lse = p.split_lse;
    q.lse.data = static_cast<float *>(p.split_lse.data) + split * p.split_stride_lse;
    return q;
}

} // namespace fa_gpu

#endif /* FA_GPU_SPLIT_COMBINE_CUH */
