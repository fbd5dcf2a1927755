/* vendor.h: how this CUDA-language tree builds for HIP: the few names that the kernels both
 * backends compile (simt/, decode/, mfma/, common/portable.cuh) need and that CUDA and HIP spell
 * differently: runtime types, the shuffle, the warp (wavefront) width, fp16 conversions. Compiled
 * as CUDA under __CUDACC__ and as HIP under __HIPCC__; nothing else of either toolkit is used, so
 * the kernels themselves are written once (ggml's vendors/hip.h is the model). Under NVRTC
 * (__CUDACC_RTC__) the device names come from common/rtc_prelude.cuh instead of the toolkit; under
 * hipRTC (__HIPCC_RTC__) from hipRTC's built-in headers and the prelude. */
#ifndef FA_GPU_VENDOR_H
#define FA_GPU_VENDOR_H

#if defined(__HIPCC__)
#if defined(__HIPCC_RTC__)
/* hipRTC (which defines __HIPCC__ too): device code alone; its built-in headers give the runtime's
 * device names, common/rtc_prelude.cuh the few others */
#include "common/rtc_prelude.cuh"
#else
#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>

typedef hipError_t fa_gpu_error;
typedef hipStream_t fa_gpu_stream;
#endif
#define FA_GPU_SUCCESS hipSuccess
#define FA_GPU_INVALID_VALUE hipErrorInvalidValue
#define fa_gpu_last_error hipGetLastError
#define fa_gpu_occupancy hipOccupancyMaxActiveBlocksPerMultiprocessor
/* The wavefront width of the target being compiled (64 on CDNA, 32 or 64 on RDNA); the host
 * pass has no target and never uses it. */
#if defined(__AMDGCN_WAVEFRONT_SIZE)
#define FA_WARP_SIZE __AMDGCN_WAVEFRONT_SIZE
#else
#define FA_WARP_SIZE 64
#endif
/* HIP's shuffles take no mask: a wavefront executes in lock step. The _WIDTH forms work within
 * segments of width lanes (src a lane of the caller's segment). */
#define FA_SHFL_XOR(x, lane_mask) __shfl_xor((x), (lane_mask))
#define FA_SHFL_XOR_WIDTH(x, lane_mask, width) __shfl_xor((x), (lane_mask), (width))
#define FA_SHFL_WIDTH(x, src, width) __shfl((x), (src), (width))
/* the C entry points of the kernels both backends compile, named apart from the CUDA build's */
#define FA_GPU_ENTRY(name) fa_hip_##name

#elif defined(__CUDACC_RTC__)
/* NVRTC (which defines __CUDACC__ too): device code alone, without the toolkit's headers; the
 * launchers, which need the runtime, are nvcc's (common/rtc_prelude.cuh) */
#include "common/rtc_prelude.cuh"

#define FA_WARP_SIZE 32
#define FA_SHFL_XOR(x, lane_mask) __shfl_xor_sync(0xffffffffu, (x), (lane_mask))
#define FA_SHFL_XOR_WIDTH(x, lane_mask, width) __shfl_xor_sync(0xffffffffu, (x), (lane_mask), (width))
#define FA_SHFL_WIDTH(x, src, width) __shfl_sync(0xffffffffu, (x), (src), (width))
#define FA_GPU_ENTRY(name) fa_##name

#elif defined(__CUDACC__)
#include <cuda_fp16.h>
#include <cuda_runtime.h>

typedef cudaError_t fa_gpu_error;
typedef cudaStream_t fa_gpu_stream;
#define FA_GPU_SUCCESS cudaSuccess
#define FA_GPU_INVALID_VALUE cudaErrorInvalidValue
#define fa_gpu_last_error cudaGetLastError
#define fa_gpu_occupancy cudaOccupancyMaxActiveBlocksPerMultiprocessor
#define FA_WARP_SIZE 32
/* every lane of the warp must reach them: the kernels call them outside divergent code only; the
 * _WIDTH forms work within segments of width lanes (src a lane of the caller's segment) */
#define FA_SHFL_XOR(x, lane_mask) __shfl_xor_sync(0xffffffffu, (x), (lane_mask))
#define FA_SHFL_XOR_WIDTH(x, lane_mask, width) __shfl_xor_sync(0xffffffffu, (x), (lane_mask), (width))
#define FA_SHFL_WIDTH(x, src, width) __shfl_sync(0xffffffffu, (x), (src), (width))
#define FA_GPU_ENTRY(name) fa_##name

#else
#error "common/vendor.h: compile as CUDA (nvcc) or HIP (hipcc)"
#endif

/* The same spelling in both toolkits, named once so a third dialect has one place to change. */
#define FA_DEVICE __device__ __forceinline__
#define FA_LAUNCH_BOUNDS(threads) __launch_bounds__(threads)
#define FA_SYNC() __syncthreads()
#define FA_SYNC_OR(x) __syncthreads_or(x) /* a barrier that returns whether any thread's x is nonzero */

/* fp16 storage as 16-bit words: the toolkit's conversions (exact widening, round to nearest even
 * when narrowing: core/half.h's rule). */
#if defined(__CUDACC_RTC__)
FA_DEVICE float fa_f16_bits_to_float(unsigned short u)
{
    return fa_rtc_f16_to_f32(u);
}

FA_DEVICE unsigned short fa_float_to_f16_bits(float x)
{
    return fa_rtc_f32_to_f16_rn(x);
}
#else
FA_DEVICE float fa_f16_bits_to_float(unsigned short u)
{
    return __half2float(__ushort_as_half(u));
}

FA_DEVICE unsigned short fa_float_to_f16_bits(float x)
{
    return __half_as_ushort(__float2half_rn(x));
}
#endif

/* bf16 as 16-bit words with core/half.h's rule (round to nearest even, NaN kept quiet): no
 * toolkit type needed, and the bits match the CPU backend's exactly. */
FA_DEVICE float fa_bf16_bits_to_float(unsigned short u)
{
    return __uint_as_float((unsigned)u << 16);
}

FA_DEVICE unsigned short fa_float_to_bf16_bits(float f)
{
    unsigned x = __float_as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (unsigned short)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (unsigned short)(x >> 16);
}

#endif /* FA_GPU_VENDOR_H */
