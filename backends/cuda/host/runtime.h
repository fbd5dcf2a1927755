/* runtime.h: the host-side twin of vendor.h: the runtime API names the CUDA and HIP backends'
 * host code (host/, backends/{cuda,hip}/backend.c) uses, spelled once. Define FA_RUNTIME_HIP
 * before including it for HIP, FA_RUNTIME_DRIVER for CUDA without the toolkit (the runtime's calls
 * over the driver API: driver_runtime.h, which says how they differ from cudart's); the CUDA
 * runtime (cudart) otherwise. The runtimes have the same calls under another prefix (HIP was
 * modelled on CUDA), so FA_RT(Malloc) is cudaMalloc, hipMalloc or fa_drv_Malloc; the types and
 * constants whose spelling differs beyond the prefix are named here. Plain C. */
#ifndef FA_GPU_RUNTIME_H
#define FA_GPU_RUNTIME_H

#if defined(FA_RUNTIME_HIP)
#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__ 1
#endif
#include <hip/hip_runtime_api.h>
#define FA_RT(name) hip##name
#define FA_RT_NAME "hip"
typedef hipError_t fa_rt_error;
typedef hipStream_t fa_rt_stream;
typedef hipEvent_t fa_rt_event;
typedef hipDeviceProp_t fa_rt_prop;
typedef hipStreamCaptureStatus fa_rt_capture_status;
#define FA_RT_ERR_NO_MEMORY hipErrorOutOfMemory
#define FA_RT_ERR_NO_DEVICE hipErrorNoDevice
#define FA_RT_ERR_INVALID_VALUE hipErrorInvalidValue
#define FA_RT_ERR_NO_KERNEL hipErrorInvalidDeviceFunction
#define FA_RT_CAPTURE_NONE hipStreamCaptureStatusNone
#elif defined(FA_RUNTIME_DRIVER)
#include "host/driver_runtime.h"
#define FA_RT(name) fa_drv_##name
#define FA_RT_NAME "cuda"
typedef fa_cu_result fa_rt_error;
typedef fa_cu_stream fa_rt_stream;
typedef fa_cu_event fa_rt_event;
typedef fa_drv_prop fa_rt_prop;
typedef int fa_rt_capture_status;
#define FA_RT_ERR_NO_MEMORY FA_CU_ERROR_OUT_OF_MEMORY
#define FA_RT_ERR_NO_DEVICE FA_CU_ERROR_NO_DEVICE
#define FA_RT_ERR_INVALID_VALUE FA_CU_ERROR_INVALID_VALUE
#define FA_RT_ERR_NO_KERNEL FA_CU_ERROR_NO_BINARY_FOR_GPU
#define FA_RT_CAPTURE_NONE fa_drv_StreamCaptureStatusNone
#else
#include <cuda_runtime_api.h>
#define FA_RT(name) cuda##name
#define FA_RT_NAME "cuda"
typedef cudaError_t fa_rt_error;
typedef cudaStream_t fa_rt_stream;
typedef cudaEvent_t fa_rt_event;
typedef struct cudaDeviceProp fa_rt_prop;
typedef enum cudaStreamCaptureStatus fa_rt_capture_status;
#define FA_RT_ERR_NO_MEMORY cudaErrorMemoryAllocation
#define FA_RT_ERR_NO_DEVICE cudaErrorNoDevice
#define FA_RT_ERR_INVALID_VALUE cudaErrorInvalidValue
#define FA_RT_ERR_NO_KERNEL cudaErrorInvalidDeviceFunction /* the build has no kernel for the call */
#define FA_RT_CAPTURE_NONE cudaStreamCaptureStatusNone
#endif

#endif /* FA_GPU_RUNTIME_H */
