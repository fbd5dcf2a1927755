/* decode_mla_epilogue.cuh: the end of both MLA decode kernels (decode_mla_kernels.cuh on mma.sync,
 * decode_mla_sm90_kernels.cuh on wgmma): each thread's two query rows, whose online-softmax state
 * (running maximum m in log2 units, sum l over the thread's columns, output o in the m16n8
 * accumulator layout) every warp of the block holds alike, written out for the thread's channels:
 * O and LSE, or the split's partials (normalised O and LSE) for the combine. A learnable sink is
 * folded in here when the keys are not split, else by the combine. CUDA only. */
#ifndef FA_GPU_DECODE_MLA_EPILOGUE_CUH
#define FA_GPU_DECODE_MLA_EPILOGUE_CUH

#include "decode/decode_mma_kernels.cuh"

namespace fa_gpu {
namespace decode {

/* Rows row0 + g and row0 + g + 8 of the block's tile (query rows of kv head hk, sequence b; split
 * `split` of the keys), channels ch0 + nn * 8 + 2 t4 + {0, 1} for nn < NV / 8: l is first summed
 * over the row's quad. l 0: no key seen (O 0, LSE -inf); NaN (a NaN score seen) stays NaN in both. */
template <class S, int NV>
__device__ __forceinline__ void mla_store_rows(const fa_gpu_kv_params &p, const float (&o)[NV / 8][4], const float (&m)[2],
                                               float (&l)[2], int64_t row0, int ch0, int64_t hk, int64_t b,
                                               int64_t split, int g, int t4)
{
    const int64_t sn = p.seqlen_new, hq = p.heads_q;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int64_t row = row0 + g + 8 * h;
        if (row >= p.rows)
            continue;
        const float lse = l[h] == 0.0f ? -INFINITY : (m[h] + log2f(l[h])) * 0.69314718055994531f;
        const float inv = l[h] == 0.0f ? 0.0f : 1.0f / l[h];
        const int64_t qh = hk * p.group + row / sn, i = row % sn;
        const int64_t at = ((b * hq + qh) * sn + i) * p.splits + split;
        float lse_out = lse, factor = 1.0f;
        if (p.splits == 1 && p.sink) {
            lse_out = fa_sink_lse(lse, p.sink[qh]);
            factor = fa_sink_factor(lse, lse_out);
        }
#pragma unroll
        for (int nn = 0; nn < NV / 8; ++nn)
#pragma unroll
            for (int c = 0; c < 2; ++c) {
                const int64_t ch = ch0 + nn * 8 + 2 * t4 + c;
                if (ch >= p.d_v)
                    continue;
                const float out = l[h] == 0.0f ? 0.0f : o[nn][2 * h + c] * inv;
                if (p.splits > 1) {
                    p.partial[at * p.d_v + ch] = out;
                    if (ch == 0)
                        p.partial[p.batch * hq * sn * p.splits * p.d_v + at] = lse;
                } else {
                    store_output<S>(p, b, i, qh, ch, out * factor, lse_out);
                }
            }
    }
}

} // namespace decode
} // namespace fa_gpu

#endif /* FA_GPU_DECODE_MLA_EPILOGUE_CUH */
