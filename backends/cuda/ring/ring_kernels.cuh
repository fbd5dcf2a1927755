/* ring_kernels.cuh: the kernels of ring attention's element-wise steps (ring.cu describes them and
 * launches them), without host code: what NVRTC compiles (the family's root in embed_sources.py).
 * In a named namespace, so that NVRTC and nvcc give the kernels one mangled name (an unnamed
 * namespace's name carries a hash of the file that includes it). */
#ifndef FA_CUDA_RING_KERNELS_CUH
#define FA_CUDA_RING_KERNELS_CUH

#if defined(__CUDACC_RTC__) /* NVRTC: the toolkit's names from common/rtc_prelude.cuh */
#include "common/rtc_prelude.cuh"
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>
#endif

#include "common/ring_view.h"

namespace fa_gpu::ring {

/* a view with up to 4 dimensions, the last contiguous (3-D views: a leading extent of 1): the
 * layout of common/ring_view.h, which both launchers fill, under the name the kernels' mangled
 * names have always carried */
struct view4 : fa_ring_view {
};

__device__ __forceinline__ int64_t offset(const view4 &v, int64_t e)
{
    const int64_t i3 = e % v.n[3], r = e / v.n[3];
    const int64_t i2 = r % v.n[2], r2 = r / v.n[2];
    const int64_t i1 = r2 % v.n[1], i0 = r2 / v.n[1];
    return i0 * v.s[0] + i1 * v.s[1] + i2 * v.s[2] + i3 * v.s[3];
}

__device__ __forceinline__ float load(const view4 &v, int64_t o)
{
    switch (v.dtype) {
    case 1:
        return __half2float(static_cast<const __half *>(v.data)[o]);
    case 2:
        return __bfloat162float(static_cast<const __nv_bfloat16 *>(v.data)[o]);
    default:
        return static_cast<const float *>(v.data)[o];
    }
}

__device__ __forceinline__ void store(const view4 &v, int64_t o, float x)
{
    switch (v.dtype) {
    case 1:
        static_cast<__half *>(v.data)[o] = __float2half_rn(x);
        break;
    case 2:
        static_cast<__nv_bfloat16 *>(v.data)[o] = __float2bfloat16_rn(x);
        break;
    default:
        static_cast<float *>(v.data)[o] = x;
    }
}

__global__ void copy_kernel(view4 dst, view4 src, int64_t count)
{
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < count; e += (int64_t)gridDim.x * blockDim.x)
        store(dst, offset(dst, e), load(src, offset(src, e)));
}

__global__ void add_kernel(view4 acc, view4 part, int64_t count)
{
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < count; e += (int64_t)gridDim.x * blockDim.x)
        static_cast<float *>(acc.data)[offset(acc, e)] += static_cast<const float *>(part.data)[offset(part, e)];
}

/* one warp per (b, row, head) of o [b, n, h, d]; lse [b, h, n] (core/softmax.h's fa_softmax_merge) */
__global__ void merge_kernel(view4 o, view4 lse, view4 op, view4 lp, int64_t rows)
{
    const int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x & 31;
    if (w >= rows)
        return;
    const int64_t h = w % o.n[2], r = w / o.n[2], s = r % o.n[1], b = r / o.n[1];
    float *l = static_cast<float *>(lse.data) + b * lse.s[1] + h * lse.s[2] + s * lse.s[3];
    const float la = *l, lb = static_cast<const float *>(lp.data)[b * lp.s[1] + h * lp.s[2] + s * lp.s[3]];
    const float m = fmaxf(la, lb);
    float *acc = static_cast<float *>(o.data) + b * o.s[0] + s * o.s[1] + h * o.s[2];
    const float *part = static_cast<const float *>(op.data) + b * op.s[0] + s * op.s[1] + h * op.s[2];
    float wa = 0.0f, wb = 0.0f, out = -INFINITY;
    if (m != -INFINITY) {
        wa = expf(la - m);
        wb = expf(lb - m);
        const float sum = wa + wb;
        out = m + logf(sum);
        wa /= sum;
        wb /= sum;
    }
    for (int64_t c = lane; c < o.n[3]; c += 32)
        acc[c] = m == -INFINITY ? 0.0f : wa * acc[c] + wb * part[c];
    __syncwarp();
    if (lane == 0)
        *l = out;
}

} // namespace fa_gpu::ring

#endif /* FA_CUDA_RING_KERNELS_CUH */
