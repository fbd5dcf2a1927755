/* dropout.cuh: the dropout factor of one score element from the core's Philox stream
 * (core/philox.h), the same on every backend. */
#ifndef FA_CUDA_COMMON_DROPOUT_CUH
#define FA_CUDA_COMMON_DROPOUT_CUH

#include "params.h"
#include "philox.h"

namespace fa_sm80 {

/* Words k & 3 and (k & 3) + 1 of a Philox block for an even k (the two keys a thread holds in the
 * mma accumulator layout), selected rather than indexed: an index known only at run time would
 * put the block in local memory. */
__device__ __forceinline__ void philox_pair(const fa_philox4 &x, int64_t k, uint32_t &w0, uint32_t &w1)
{
    w0 = (k & 2) ? x.v[2] : x.v[0];
    w1 = (k & 2) ? x.v[3] : x.v[1];
}

/* Dropout factor of element (b, h, i, j): 0 or 1 / (1 - p). */
__device__ __forceinline__ float dropout_factor(const fa_gpu_params &p, int64_t b, int64_t h, int64_t i, int64_t j)
{
    fa_philox4 r = fa_dropout_block(p.seed, p.offset, (uint64_t)b, (uint64_t)p.heads_q, (uint64_t)h, (uint64_t)i,
                                    (uint64_t)j);
    return r.v[j & 3] >= p.dropout_threshold ? p.dropout_scale : 0.0f;
}

} // namespace fa_sm80

#endif
