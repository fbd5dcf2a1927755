/* ring.cu: the element-wise steps of ring attention (core/ring.c) on the device: a strided copy
 * that converts dtypes (shards into the travelling bundle, fp32 accumulators into the caller's
 * outputs), the log-sum-exp merge of a partial output into the accumulator, and an fp32 add.
 * Memory-bound and small beside the attention of a step (O(n d) against O(n^2 d)); every index
 * is 64-bit. */
#include "common/ring_view.h"
#include "ring/ring.h"
#include "ring/ring_kernels.cuh"

#include <cuda_runtime.h>
#include <stdint.h>

namespace {

using fa_gpu::ring::view4;

/* common/ring_view.h's view of t, as the kernels take it */
view4 view_of(const fa_tensor *t)
{
    view4 v;
    static_cast<fa_ring_view &>(v) = fa_ring_view_of(t->data, (int)t->dtype, t->ndim, t->shape, t->stride);
    return v;
}

} // namespace

extern "C" int fa_cuda_ring_copy(const fa_tensor *dst, const fa_tensor *src, void *stream)
{
    const view4 d = view_of(dst), s = view_of(src);
    const int64_t n = fa_ring_count(&s);
    if (n == 0)
        return (int)cudaSuccess;
    fa_gpu::ring::copy_kernel<<<fa_ring_blocks(n), FA_RING_THREADS, 0, (cudaStream_t)stream>>>(d, s, n);
    return (int)cudaGetLastError();
}

extern "C" int fa_cuda_ring_add(const fa_tensor *acc, const fa_tensor *part, void *stream)
{
    const view4 a = view_of(acc), p = view_of(part);
    const int64_t n = fa_ring_count(&a);
    if (n == 0)
        return (int)cudaSuccess;
    fa_gpu::ring::add_kernel<<<fa_ring_blocks(n), FA_RING_THREADS, 0, (cudaStream_t)stream>>>(a, p, n);
    return (int)cudaGetLastError();
}

extern "C" int fa_cuda_ring_merge(const fa_tensor *o, const fa_tensor *lse, const fa_tensor *o_part,
                                  const fa_tensor *lse_part, void *stream)
{
    const view4 a = view_of(o), l = view_of(lse), p = view_of(o_part), lp = view_of(lse_part);
    const int64_t rows = fa_ring_rows(&a);
    if (rows == 0)
        return (int)cudaSuccess;
    fa_gpu::ring::merge_kernel<<<fa_ring_blocks(rows * FA_RING_MERGE_LANES), FA_RING_THREADS, 0, (cudaStream_t)stream>>>(a, l, p, lp, rows);
    return (int)cudaGetLastError();
}
