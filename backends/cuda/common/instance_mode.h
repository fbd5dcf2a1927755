/* instance_mode.h: which kernel instance (MODE) a call needs, for the sm80 and sm90 launchers:
 * the nvcc-built ones (sm80/launch.cuh, sm90/kernels.cuh, as fa_gpu::mode_of) and the driver-API
 * ones of a run-time compiled build (host/rtc_sm80.c, host/rtc_sm90.c). Compiles as C and CUDA
 * host code. */
#ifndef FA_CUDA_COMMON_INSTANCE_MODE_H
#define FA_CUDA_COMMON_INSTANCE_MODE_H

#include "common/params.h"

/* The kernel instance a call needs: 0 neither dropout nor a block mask, 1 a block mask only,
 * 2 dropout (with or without a block mask). A call with a score modifier (fa_gpu_has_score_mod) takes
 * the MOD instance of mode 2, whose tests for block lists and dropout are made at run time: one
 * more instance per kernel, for 16-byte aligned rows only (the chooser sends the others to the
 * SIMT kernels). */
static inline int fa_gpu_instance_mode(const fa_gpu_params *p)
{
    return p->dropout_threshold ? 2 : p->bm_bits ? 1 : 0;
}

#ifdef __cplusplus
namespace fa_gpu {
inline int mode_of(const fa_gpu_params &p)
{
    return fa_gpu_instance_mode(&p);
}
} // namespace fa_gpu
#endif

#endif
