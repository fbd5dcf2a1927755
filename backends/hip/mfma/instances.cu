// The MFMA forward's instances (fp16, bf16; head-dim buckets 64 and 128) and its C entry point:
// fa_hip_mfma_forward compiled as HIP (backends/hip/kernels.h), fa_mfma_forward compiled as CUDA,
// the emulated form the CUDA backend runs under FLASHATTN_CUDA_KERNELS=mfma-emulated
// (backends/cuda/kernels.h).
#include "forward.cuh"

extern "C" int FA_PORTABLE_ENTRY(mfma_forward)(const fa_gpu_params *p, int dtype, int head_dim_bucket, void *stream)
{
    using namespace fa_mfma;
    const fa_gpu_stream st = static_cast<fa_gpu_stream>(stream);
    const int key = dtype * 1000 + head_dim_bucket;
    switch (key) {
    case 1064: return (int)launch_forward<pk::store_f16, 64>(*p, st);
    case 1128: return (int)launch_forward<pk::store_f16, 128>(*p, st);
    case 2064: return (int)launch_forward<pk::store_bf16, 64>(*p, st);
    case 2128: return (int)launch_forward<pk::store_bf16, 128>(*p, st);
    default: return (int)FA_GPU_INVALID_VALUE;
    }
}
