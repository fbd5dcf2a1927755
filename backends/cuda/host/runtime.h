/* runtime.h: the host-side twin of vendor.h: the runtime API names the CUDA and HIP backends'
 * host code (host/, backends/{cuda,hip}/backend.c) uses, spelled once. Define FA_RUNTIME_HIP
 * before including it for HIP; CUDA otherwise. Both runtimes have the same calls under another
 * prefix (HIP was modelled on CUDA), so FA_RT(Malloc) is cudaMalloc or hipMalloc; the types and
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
typedef hipDeviceProp_t fa_rt_prop;
typedef hipStreamCaptureStatus fa_rt_capture_status;
#define FA_RT_ERR_NO_MEMORY hipErrorOutOfMemory
#define FA_RT_ERR_NO_DEVICE hipErrorNoDevice
#define FA_RT_CAPTURE_NONE hipStreamCaptureStatusNone
#else
#include <cuda_runtime_api.h>
#define FA_RT(name) cuda##name
#define FA_RT_NAME "cuda"
typedef cudaError_t fa_rt_error;
typedef cudaStream_t fa_rt_stream;
typedef struct cudaDeviceProp fa_rt_prop;
typedef enum cudaStreamCaptureStatus fa_rt_capture_status;
#define FA_RT_ERR_NO_MEMORY cudaErrorMemoryAllocation
#define FA_RT_ERR_NO_DEVICE cudaErrorNoDevice
#define FA_RT_CAPTURE_NONE cudaStreamCaptureStatusNone
#endif

#endif /* FA_GPU_RUNTIME_H */
