/* tile_geometry.cuh: the block geometry of the sm80 kernels and of the helpers they share with the
 * sm90 kernels (64 x 64 tiles, 128 threads), the log2(e) / ln(2) constants of the exp2 softmax,
 * and imin. */
#ifndef FA_CUDA_COMMON_TILE_GEOMETRY_CUH
#define FA_CUDA_COMMON_TILE_GEOMETRY_CUH

#include "common/params.h"

#if defined(__CUDACC_RTC__) /* NVRTC: the toolkit's names from common/rtc_prelude.cuh */
#include "common/rtc_prelude.cuh"
#else
#include <cuda_runtime.h>
#include <stdint.h>
#endif

namespace fa_gpu {

constexpr int BLOCK = FA_GPU_BLOCK;
constexpr int THREADS = 128;
constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;

__device__ __forceinline__ int64_t imin(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

} // namespace fa_gpu

#endif
