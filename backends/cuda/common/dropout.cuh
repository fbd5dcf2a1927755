/* dropout.cuh: the dropout factor of one score element from the core's Philox stream
 * (core/philox.h), the same on every backend. */
#ifndef FA_CUDA_COMMON_DROPOUT_CUH
#define FA_CUDA_COMMON_DROPOUT_CUH

#include "params.h"
#include "philox.h"

namespace fa_sm80 {

/* Dropout factor of element (b, h, i, j): 0 or 1 / (1 - p). */
__device__ __forceinline__ float dropout_factor(const fa_gpu_params &p, int64_t b, int64_t h, int64_t i, int64_t j)
{
    fa_philox4 r = fa_dropout_block(p.seed, p.offset, (uint64_t)b, (uint64_t)p.heads_q, (uint64_t)h, (uint64_t)i,
                                    (uint64_t)j);
    return r.v[j & 3] >= p.dropout_threshold ? p.dropout_scale : 0.0f;
}

} // namespace fa_sm80

#endif
