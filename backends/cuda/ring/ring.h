/* ring.h: ring attention's element-wise steps on the device (ring.cu), for backend.c; what each
 * does is fa_backend.ring_* in core/internal.h. Queued on stream; return a cudaError_t value. */
#ifndef FA_CUDA_RING_H
#define FA_CUDA_RING_H

#include "flashattn.h"

#ifdef __cplusplus
extern "C" {
#endif

int fa_cuda_ring_copy(const fa_tensor *dst, const fa_tensor *src, void *stream);
int fa_cuda_ring_add(const fa_tensor *acc, const fa_tensor *part, void *stream);
int fa_cuda_ring_merge(const fa_tensor *o, const fa_tensor *lse, const fa_tensor *o_part, const fa_tensor *lse_part,
                       void *stream);

#ifdef __cplusplus
}
#endif
#endif
