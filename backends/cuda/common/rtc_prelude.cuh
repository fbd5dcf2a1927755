/* rtc_prelude.cuh: what the kernels take from the CUDA toolkit's headers, for NVRTC, which has no
 * include path to them (a wheel cannot count on a toolkit; NVRTC 13 has no built-in <stdint.h>,
 * <math.h>, <cuda_fp16.h> or <cuda_bf16.h>). Only under __CUDACC_RTC__: common/vendor.h includes
 * it first there, where nvcc's build includes the toolkit headers. It holds exactly the names the
 * SIMT family (simt/, common/portable.cuh and the core headers they read) uses; NVRTC itself
 * provides the rest (float4, uint2, make_float4, dim3, expf / exp2f / logf / log1pf / fmaxf /
 * fmaf, isnan, __uint_as_float, __shfl_xor_sync, __syncthreads, size_t). A family that needs more
 * adds it here, with the toolkit's definition, so the machine code stays the same. */
#ifndef FA_GPU_RTC_PRELUDE_CUH
#define FA_GPU_RTC_PRELUDE_CUH

#if !defined(__CUDACC_RTC__)
#error "common/rtc_prelude.cuh is for NVRTC: nvcc's build includes the toolkit's headers"
#endif

/* <stdint.h>: the fixed-width types as glibc spells them on LP64 (the host ABI nvcc's device code
 * follows there), so overloads and mangled names match the nvcc build's */
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long int64_t;
typedef unsigned long uint64_t;
static_assert(sizeof(int32_t) == 4 && sizeof(int64_t) == 8 && sizeof(uint64_t) == 8, "fixed-width types");

/* <math.h>'s INFINITY, as <math_constants.h> spells CUDART_INF_F (NVRTC's front end knows no
 * __builtin_inff). Not a constant expression: no kernel of the families above needs one. */
#define INFINITY __int_as_float(0x7f800000)

/* <cuda_fp16.h>'s __half2float and __float2half_rn on 16-bit words: the same PTX instructions that
 * the toolkit's device branch emits (exact widening; round to nearest even when narrowing). */
__device__ __forceinline__ float fa_rtc_f16_to_f32(unsigned short h)
{
    float f;
    asm("{  cvt.f32.f16 %0, %1;}\n" : "=f"(f) : "h"(h));
    return f;
}

__device__ __forceinline__ unsigned short fa_rtc_f32_to_f16_rn(float f)
{
    unsigned short h;
    asm("{  cvt.rn.f16.f32 %0, %1;}\n" : "=h"(h) : "f"(f));
    return h;
}

#endif /* FA_GPU_RTC_PRELUDE_CUH */
