/* combine_groups.cuh: fa_forward_kvcache's other combine kernel, for calls whose rows have few
 * splits (kv_host.c chooses it where each row's splits fit the lanes' read-ahead,
 * FA_KV_COMBINE_AHEAD). decode_kernels.cuh's combine_kernel gives a block of
 * FA_KV_ELEMENTWISE_THREADS to each (row, 32 channels) and merges through shared memory with
 * barriers; here a group of 32 lanes takes a row's 128 channels, several rows a block, and merges
 * by shuffles: where a call has many rows and few splits (batch >= 8, MLA's 512 channels) it
 * launches an eighth of the blocks and no barrier. Written once for CUDA and HIP (a group is a
 * warp, or half of a 64-wide wavefront). */
#ifndef FA_GPU_DECODE_COMBINE_GROUPS_CUH
#define FA_GPU_DECODE_COMBINE_GROUPS_CUH

#include "decode/decode_kernels.cuh"

namespace fa_gpu {
namespace decode {

/* x reduced over a group of FA_KV_COMBINE_LANES consecutive lanes by max (MAX; NaN if any is) or
 * sum, every lane getting the result in the same order of operations. */
template <bool MAX> FA_DEVICE float group_reduce(float x)
{
#pragma unroll
    for (int k = FA_KV_COMBINE_LANES / 2; k > 0; k /= 2) {
        const float y = FA_SHFL_XOR_WIDTH(x, k, FA_KV_COMBINE_LANES);
        x = MAX ? max_nan(x, y) : x + y;
    }
    return x;
}

/* The splits of each query row merged by their LSEs: one group of L = FA_KV_COMBINE_LANES lanes
 * per (row, C = FA_KV_COMBINE_GROUP_CHANNELS channels of o), each lane CPL = C / L consecutive channels,
 * FA_KV_ELEMENTWISE_THREADS / L groups a block, grid-stride. Lane j reads the LSEs of splits j,
 * j + L, ... and, in the same round trip to memory, its channels of the first A =
 * FA_KV_COMBINE_AHEAD splits; the group finds the maximum and each split's weight by shuffles, no
 * barrier, and each lane sums its channels over the splits (the weights broadcast from the lane
 * that holds them). A split whose weight is 0 (no visible key: LSE -inf) adds nothing (its
 * partials, which may never have been written, are read ahead but not used). */
template <class S>
__global__ FA_LAUNCH_BOUNDS(FA_KV_ELEMENTWISE_THREADS) void combine_groups_kernel(const fa_gpu_kv_params p)
{
    constexpr int L = FA_KV_COMBINE_LANES, C = FA_KV_COMBINE_GROUP_CHANNELS, CPL = C / L, A = FA_KV_COMBINE_AHEAD;
    constexpr int GROUPS = FA_KV_ELEMENTWISE_THREADS / L;
    static_assert(C % L == 0 && FA_KV_ELEMENTWISE_THREADS % L == 0 && L <= FA_WARP_SIZE && FA_WARP_SIZE % L == 0,
                  "whole groups of lanes inside a warp, whole channels per lane");
    if (skip_on_fault(p))
        return;
    const int lane = threadIdx.x % L, grp = threadIdx.x / L;
    const int64_t sn = p.seqlen_new, hq = p.heads_q, splits = p.splits, dv = p.d_v;
    const int64_t chunks = (dv + C - 1) / C, items = p.batch * hq * sn * chunks;
    const float *lses = p.partial + p.batch * hq * sn * splits * dv;
    const bool vec = dv % CPL == 0; /* the lane's channels one aligned vector of each split's row */
    for (int64_t it = (int64_t)blockIdx.x * GROUPS + grp; it < items; it += (int64_t)gridDim.x * GROUPS) {
        const int64_t row = it / chunks, c0 = (it % chunks) * C + lane * CPL; /* row = (b * hq + h) * sn + i */
        const float *ls_row = lses + row * splits, *part_row = p.partial + row * splits * dv + c0;
        auto load = [&](int64_t j, float (&x)[CPL]) {
            if (vec && c0 < dv) {
                if constexpr (CPL == 4) {
                    const float4 v = *reinterpret_cast<const float4 *>(part_row + j * dv);
                    x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
                } else {
#pragma unroll
                    for (int e = 0; e < CPL; ++e)
                        x[e] = part_row[j * dv + e];
                }
            } else {
#pragma unroll
                for (int e = 0; e < CPL; ++e)
                    x[e] = c0 + e < dv ? part_row[j * dv + e] : 0.0f;
            }
        };
        float ahead[A][CPL];
#pragma unroll
        for (int k = 0; k < A; ++k) {
            if (k < splits)
                load(k, ahead[k]);
            else
#pragma unroll
                for (int e = 0; e < CPL; ++e)
                    ahead[k][e] = 0.0f;
        }
        float mx = -INFINITY;
        for (int64_t s = lane; s < splits; s += L)
            mx = max_nan(mx, ls_row[s]);
        mx = group_reduce<true>(mx);
        float sum = 0.0f, acc[CPL];
#pragma unroll
        for (int e = 0; e < CPL; ++e)
            acc[e] = 0.0f;
        if (mx != -INFINITY) /* the same for the whole group */
            for (int64_t s0 = 0; s0 < splits; s0 += L) {
                const int64_t s = s0 + lane;
                const float ls = s < splits ? ls_row[s] : -INFINITY;
                const float w = ls == -INFINITY ? 0.0f : expf(ls - mx);
                sum += w;
                const int n = (int)(splits - s0 < L ? splits - s0 : L);
                int j = 0;
                if (s0 == 0) { /* the splits read ahead */
#pragma unroll
                    for (int k = 0; k < A; ++k) {
                        const float wk = FA_SHFL_WIDTH(w, k, L);
                        if (k < n && wk != 0.0f)
#pragma unroll
                            for (int e = 0; e < CPL; ++e)
                                acc[e] += wk * ahead[k][e];
                    }
                    j = A;
                }
                for (; j < n; ++j) {
                    const float wj = FA_SHFL_WIDTH(w, j, L);
                    if (wj != 0.0f) {
                        float x[CPL];
                        load(s0 + j, x);
#pragma unroll
                        for (int e = 0; e < CPL; ++e)
                            acc[e] += wj * x[e];
                    }
                }
            }
        sum = group_reduce<false>(sum);
        const int64_t i = row % sn, h = row / sn % hq, b = row / (sn * hq);
        const float lse0 = sum == 0.0f ? -INFINITY : mx + logf(sum);
        float lse = lse0, factor = 1.0f;
        if (p.sink) { /* the row's final LSE over the keys of every split: the sink joins it here */
            lse = fa_sink_lse(lse0, p.sink[h]);
            factor = fa_sink_factor(lse0, lse);
        }
#pragma unroll
        for (int e = 0; e < CPL; ++e)
            if (c0 + e < dv)
                store_output<S>(p, b, i, h, c0 + e, (sum == 0.0f ? 0.0f : acc[e] / sum) * factor, lse);
    }
}

} // namespace decode
} // namespace fa_gpu

#endif /* FA_GPU_DECODE_COMBINE_GROUPS_CUH */
