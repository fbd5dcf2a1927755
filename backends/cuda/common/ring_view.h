/* ring_view.h: how ring attention's element-wise kernels (ring/ring_kernels.cuh) see a tensor and
 * how they are launched, the one source for both launchers: ring/ring.cu (nvcc) and
 * host/rtc_ring.c (the driver API, kernels compiled at run time). A view has up to 4 dimensions,
 * the last contiguous; a tensor of fewer gets leading extents of 1. Compiles as C, CUDA and HIP;
 * under NVRTC the view and the constants only (the rest is host code). */
#ifndef FA_GPU_RING_VIEW_H
#define FA_GPU_RING_VIEW_H

#if defined(__CUDACC_RTC__) /* NVRTC: the toolkit's names from common/rtc_prelude.cuh */
#include "common/rtc_prelude.cuh"
#else
#include <stdint.h>
#endif

/* The kernels' view (the kernels take fa_gpu::ring::view4, which is this layout). */
typedef struct fa_ring_view {
    void *data;
    int dtype; /* fa_dtype: 0 fp32, 1 fp16, 2 bf16 */
    int64_t n[4], s[4];
} fa_ring_view;

/* Threads per block of every ring kernel; the merge kernel gives each row one warp. */
#define FA_RING_THREADS 256
#define FA_RING_MERGE_LANES 32
#define FA_RING_MAX_BLOCKS (65535 * 16)

#if !defined(__CUDACC_RTC__)

#ifdef __cplusplus
extern "C" {
#endif

/* The view of a tensor (an fa_tensor's fields: this header does not need flashattn.h, which is not
 * among the sources NVRTC is given) of ndim <= 4 dimensions. */
static inline fa_ring_view fa_ring_view_of(void *data, int dtype, int ndim, const int64_t *shape,
                                           const int64_t *stride)
{
    fa_ring_view v;
    v.data = data;
    v.dtype = dtype;
    const int pad = 4 - ndim;
    for (int i = 0; i < 4; ++i) {
        v.n[i] = i < pad ? 1 : shape[i - pad];
        v.s[i] = i < pad ? 0 : stride[i - pad];
    }
    return v;
}

/* Blocks of FA_RING_THREADS for a grid-stride loop over `threads` threads (at least 1). */
static inline unsigned fa_ring_blocks(int64_t threads)
{
    const int64_t b = (threads + FA_RING_THREADS - 1) / FA_RING_THREADS;
    return (unsigned)(b < FA_RING_MAX_BLOCKS ? (b > 0 ? b : 1) : FA_RING_MAX_BLOCKS);
}

/* The view's elements (the tensor's, which the core checked fit in 64 bits). */
static inline int64_t fa_ring_count(const fa_ring_view *v)
{
    return v->n[0] * v->n[1] * v->n[2] * v->n[3];
}

/* The merge's rows: one per (batch, row, head) of o [b, n, h, d]. */
static inline int64_t fa_ring_rows(const fa_ring_view *o)
{
    return o->n[0] * o->n[1] * o->n[2];
}

#ifdef __cplusplus
}
#endif

#endif /* !__CUDACC_RTC__ */

#endif /* FA_GPU_RING_VIEW_H */
