/* rtc_prelude.cuh: what the kernels take from the toolkit's headers, for the run-time compilers,
 * which have no include path to them (a wheel cannot count on a toolkit).
 *
 * NVRTC (__CUDACC_RTC__): NVRTC 13 has no built-in <stdint.h>, <math.h>, <math_constants.h>,
 * <cuda_fp16.h>, <cuda_bf16.h> or <cuda.h>. common/vendor.h and common/params.h include this file
 * there (and each header that would include a toolkit header includes it instead), where nvcc's
 * build includes the toolkit headers. It holds exactly the names the kernel families NVRTC
 * compiles (simt, sm80, sm90, decode, ring: host/rtc_sources.h) use; NVRTC itself provides the rest
 * (float4, uint2, make_float4, dim3, expf / exp2f / logf / log1pf / fmaxf / fmaf, isnan,
 * __uint_as_float, __shfl_xor_sync, __syncthreads, __cvta_generic_to_shared, memcpy, size_t). A
 * family that needs more adds it here, with the toolkit's definition, so the machine code stays
 * the same.
 *
 * hipRTC (__HIPCC_RTC__): its built-in headers are hip_runtime.h's device side with hip_fp16.h
 * (the fixed-width types, __half and its conversions, the vector types, the math functions, the
 * shuffles); an #include of a HIP or C header would reach the system's copy, if any, and clash
 * with them. What the families hipRTC compiles (simt, decode, mfma: backends/hip/meson.build) need
 * beyond that is <stdint.h>'s 8- and 16-bit types (hipRTC has the 32- and 64-bit ones) and INT64_MAX,
 * and <math.h>'s INFINITY, defined below as glibc's headers define them. */
#ifndef FA_GPU_RTC_PRELUDE_CUH
#define FA_GPU_RTC_PRELUDE_CUH

#if defined(__HIPCC_RTC__)

typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
#ifndef INT64_MAX
#define INT64_MAX 9223372036854775807L
#endif
#ifndef INFINITY
#define INFINITY (__builtin_inff())
#endif

#else /* NVRTC */

#if !defined(__CUDACC_RTC__)
#error "common/rtc_prelude.cuh is for NVRTC and hipRTC: nvcc's and hipcc's builds include the toolkit's headers"
#endif

/* <stdint.h>: the fixed-width types (and INT64_MAX) as glibc spells them on LP64 (the host ABI nvcc's device code
 * follows there), so overloads and mangled names match the nvcc build's */
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long int64_t;
typedef unsigned long uint64_t;
#define INT64_MAX 9223372036854775807L
static_assert(sizeof(int16_t) == 2 && sizeof(int32_t) == 4 && sizeof(int64_t) == 8 && sizeof(uint64_t) == 8,
              "fixed-width types");

/* <math.h>'s INFINITY, as <math_constants.h> spells CUDART_INF_F (NVRTC's front end knows no
 * __builtin_inff). Not a constant expression: no kernel of these families needs one. */
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

/* <math_constants.h>'s CUDART_INF_F, spelled as the toolkit spells it */
#define CUDART_INF_F __int_as_float(0x7f800000)

/* <cuda_fp16.h> and <cuda_bf16.h>: the four storage types, as structs of the toolkit's names, size
 * and alignment in the global namespace, so that templates instantiated on them (forward_kernel<
 * __nv_bfloat16, ...>) have the nvcc build's mangled names; only the conversions the sm80, sm90
 * and decode kernels call, each with the PTX that the toolkit's device branch emits for sm_80 and
 * later (the only targets of those families). Unlike the toolkit's, these types have no
 * arithmetic operators and no implicit conversions: the kernels use none. */
struct __align__(2) __half {
    unsigned short __x;
};
struct __align__(4) __half2 {
    __half x, y;
};
struct __align__(2) __nv_bfloat16 {
    unsigned short __x;
};
struct __align__(4) __nv_bfloat162 {
    __nv_bfloat16 x, y;
};

__device__ __forceinline__ float __half2float(const __half a)
{
    return fa_rtc_f16_to_f32(a.__x);
}

__device__ __forceinline__ __half __float2half_rn(const float a)
{
    __half val;
    val.__x = fa_rtc_f32_to_f16_rn(a);
    return val;
}

__device__ __forceinline__ __half2 __floats2half2_rn(const float a, const float b)
{
    __half2 val;
    asm("{ cvt.rn.f16x2.f32 %0, %2, %1; }\n" : "=r"(*reinterpret_cast<unsigned int *>(&val)) : "f"(a), "f"(b));
    return val;
}

__device__ __forceinline__ float __bfloat162float(const __nv_bfloat16 a)
{
    float f;
#if __CUDA_ARCH__ >= 900
    asm("{ cvt.f32.bf16 %0, %1;}\n" : "=f"(f) : "h"(a.__x));
#else
    asm("{ mov.b32 %0, {0,%1};}\n" : "=f"(f) : "h"(a.__x));
#endif
    return f;
}

__device__ __forceinline__ __nv_bfloat16 __float2bfloat16_rn(const float a)
{
    __nv_bfloat16 val;
    asm("{  cvt.rn.bf16.f32 %0, %1;}\n" : "=h"(val.__x) : "f"(a));
    return val;
}

__device__ __forceinline__ __nv_bfloat162 __floats2bfloat162_rn(const float a, const float b)
{
    __nv_bfloat162 val;
    asm("{ cvt.rn.bf16x2.f32 %0, %2, %1;}\n" : "=r"(*reinterpret_cast<unsigned int *>(&val)) : "f"(a), "f"(b));
    return val;
}

/* <cuda.h>'s CUtensorMap (the sm90 kernels' TMA descriptors, kernel parameters the host encodes):
 * opaque to the device, 128 bytes, aligned as CUDA 13's <cuda.h> aligns it (128; CUDA 12's said
 * 64), which places the kernels' parameters as nvcc's build of this toolkit does */
typedef struct CUtensorMap_st {
    alignas(128) unsigned long long opaque[16];
} CUtensorMap;
static_assert(sizeof(CUtensorMap) == 128 && alignof(CUtensorMap) == 128, "CUtensorMap");

#endif /* NVRTC */

#endif /* FA_GPU_RTC_PRELUDE_CUH */
