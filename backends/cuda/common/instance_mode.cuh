/* instance_mode.cuh: which kernel instance (MODE) a call needs, for the sm80 and sm90 launchers. */
#ifndef FA_CUDA_COMMON_INSTANCE_MODE_CUH
#define FA_CUDA_COMMON_INSTANCE_MODE_CUH

#include "common/params.h"

#include <cuda_runtime.h>

namespace fa_gpu {

/* The kernel instance a call needs: 0 neither dropout nor a block mask, 1 a block mask only,
 * 2 dropout (with or without a block mask). A call with a score modifier (fa_gpu_has_score_mod) takes
 * the MOD instance of mode 2, whose tests for block lists and dropout are made at run time: one
 * more instance per kernel, for 16-byte aligned rows only (the chooser sends the others to the
 * SIMT kernels). */
__host__ __forceinline__ int mode_of(const fa_gpu_params &p)
{
    return p.dropout_threshold ? 2 : p.bm_bits ? 1 : 0;
}

} // namespace fa_gpu

#endif
