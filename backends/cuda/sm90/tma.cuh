/* tma.cuh: the device side of the Hopper kernels' TMA loads (tensor_map.cuh describes the maps
 * and encodes them on the host): the kernel parameter holding two maps, the mbarrier fence and
 * arrival the copies complete on, and the tile copies. What NVRTC compiles of the maps: CUtensorMap
 * comes from <cuda.h> in nvcc's build and from common/rtc_prelude.cuh under NVRTC. */
#ifndef FA_CUDA_SM90_TMA_CUH
#define FA_CUDA_SM90_TMA_CUH

#include "common/params.h"

#if !defined(__CUDACC_RTC__) /* NVRTC: CUtensorMap from common/rtc_prelude.cuh (through params.h) */
#include <cuda.h> /* CUtensorMap only */
#endif

namespace fa_gpu::sm90 {

/* The two maps a kernel's producer reads through (the forward: K, V; the backward: Q, dO): a
 * kernel parameter (__grid_constant__), aligned as CUtensorMap is. */
struct tile_maps {
    CUtensorMap first, second;
};

/* Makes initialised mbarriers visible to the asynchronous proxy (the TMA unit); before the
 * block's barrier that publishes them. */
__device__ __forceinline__ void fence_mbar_init()
{
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

/* This thread's arrival on an mbarrier, announcing bytes of TMA transfers for the phase. */
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

/* The box of map at coordinates (column c0, row c1, head c2, sequence c3) into shared memory at
 * dst; its bytes complete on bar. */
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap *map, uint32_t bar, int c0, int c1, int c2,
                                            int c3)
{
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%3, %4, %5, %6}], [%2];\n" ::"r"(dst),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
                 : "memory");
}

/* The D / 64 boxes of one tile of ROWS rows (rows row0.., head h, sequence b) through map into
 * the swizzled tile at dst (64-column blocks of ROWS x 128 bytes), completing on bar. */
template <int D, int ROWS>
__device__ __forceinline__ void tma_load_tile(uint32_t dst, const CUtensorMap *map, uint32_t bar, int row0, int h, int b)
{
#pragma unroll
    for (int cb = 0; cb < D / 64; ++cb)
        tma_load_4d(dst + cb * (ROWS * 128), map, bar, cb * 64, row0, h, b);
}

} // namespace fa_gpu::sm90

#endif /* FA_CUDA_SM90_TMA_CUH */
