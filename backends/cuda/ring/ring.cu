/* ring.cu: the element-wise steps of ring attention (core/ring.c) on the device: a strided copy
 * that converts dtypes (shards into the travelling bundle, fp32 accumulators into the caller's
 * outputs), the log-sum-exp merge of a partial output into the accumulator, and an fp32 add.
 * Memory-bound and small beside the attention of a step (O(n d) against O(n^2 d)); every index
 * is 64-bit. */
#include "ring/ring.h"
#include "ring/ring_kernels.cuh"

#include <cuda_runtime.h>
#include <stdint.h>

namespace {

using fa_gpu::ring::view4;

view4 view_of(const fa_tensor *t)
{
    view4 v;
    v.data = t->data;
    v.dtype = (int)t->dtype;
    const int pad = 4 - t->ndim;
    for (int i = 0; i < 4; ++i) {
        v.n[i] = i < pad ? 1 : t->shape[i - pad];
        v.s[i] = i < pad ? 0 : t->stride[i - pad];
    }
    return v;
}

unsigned blocks_for(int64_t threads)
{
    const int64_t b = (threads + 255) / 256;
    return (unsigned)(b < 65535 * 16 ? (b > 0 ? b : 1) : 65535 * 16);
}

int64_t count_of(const view4 &v)
{
    return v.n[0] * v.n[1] * v.n[2] * v.n[3];
}

} // namespace

extern "C" int fa_cuda_ring_copy(const fa_tensor *dst, const fa_tensor *src, void *stream)
{
    const view4 d = view_of(dst), s = view_of(src);
    const int64_t n = count_of(s);
    if (n == 0)
        return (int)cudaSuccess;
    fa_gpu::ring::copy_kernel<<<blocks_for(n), 256, 0, (cudaStream_t)stream>>>(d, s, n);
    return (int)cudaGetLastError();
}

extern "C" int fa_cuda_ring_add(const fa_tensor *acc, const fa_tensor *part, void *stream)
{
    const view4 a = view_of(acc), p = view_of(part);
    const int64_t n = count_of(a);
    if (n == 0)
        return (int)cudaSuccess;
    fa_gpu::ring::add_kernel<<<blocks_for(n), 256, 0, (cudaStream_t)stream>>>(a, p, n);
    return (int)cudaGetLastError();
}

extern "C" int fa_cuda_ring_merge(const fa_tensor *o, const fa_tensor *lse, const fa_tensor *o_part,
                                  const fa_tensor *lse_part, void *stream)
{
    const view4 a = view_of(o), l = view_of(lse), p = view_of(o_part), lp = view_of(lse_part);
    const int64_t rows = a.n[0] * a.n[1] * a.n[2];
    if (rows == 0)
        return (int)cudaSuccess;
    fa_gpu::ring::merge_kernel<<<blocks_for(rows * 32), 256, 0, (cudaStream_t)stream>>>(a, l, p, lp, rows);
    return (int)cudaGetLastError();
}
