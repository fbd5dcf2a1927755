// The sm90 instances and their C entry points (backends/cuda/kernels.h): the forward (fp16, bf16;
// head dims 64 and 128, and 256 for calls with neither dropout nor a block mask) and the backward
// (fp16, bf16; head dims 64 and 128, and 256 for calls with neither dropout nor a block mask; the
// fused non-deterministic algorithm); score modifiers (softcap, ALiBi) for calls with neither
// dropout nor a block mask. Built only for -gencode=arch=compute_90a,code=sm_90a.
#include "backward.cuh"

extern "C" int fa_sm90_has_instance(int dtype, int head_dim_pad, int plain, int mod)
{
    return (dtype == 1 || dtype == 2) && (plain || !mod) &&
           (head_dim_pad == 64 || head_dim_pad == 128 || (plain && head_dim_pad == 256));
}

extern "C" int fa_sm90_has_backward(int dtype, int head_dim_pad, int plain, int mod)
{
    return (dtype == 1 || dtype == 2) && (plain || !mod) &&
           (head_dim_pad == 64 || head_dim_pad == 128 || (plain && head_dim_pad == 256));
}

extern "C" int fa_sm90_forward(const fa_gpu_params *p, int dtype, int head_dim_pad, void *stream)
{
    const cudaStream_t st = static_cast<cudaStream_t>(stream);
    switch (dtype * 1000 + head_dim_pad) {
    case 1064: return (int)fa_sm90::launch_forward<__half, 64>(*p, st);
    case 1128: return (int)fa_sm90::launch_forward<__half, 128>(*p, st);
    case 2064: return (int)fa_sm90::launch_forward<__nv_bfloat16, 64>(*p, st);
    case 2128: return (int)fa_sm90::launch_forward<__nv_bfloat16, 128>(*p, st);
    case 1256: return (int)fa_sm90::launch_forward<__half, 256>(*p, st);
    case 2256: return (int)fa_sm90::launch_forward<__nv_bfloat16, 256>(*p, st);
    default: return (int)cudaErrorInvalidValue;
    }
}

extern "C" int fa_sm90_backward(const fa_gpu_params *p, int dtype, int head_dim_pad, void *stream)
{
    const cudaStream_t st = static_cast<cudaStream_t>(stream);
    switch (dtype * 1000 + head_dim_pad) {
    case 1064: return (int)fa_sm90::launch_backward<__half, 64>(*p, st);
    case 1128: return (int)fa_sm90::launch_backward<__half, 128>(*p, st);
    case 2064: return (int)fa_sm90::launch_backward<__nv_bfloat16, 64>(*p, st);
    case 2128: return (int)fa_sm90::launch_backward<__nv_bfloat16, 128>(*p, st);
    case 1256: return (int)fa_sm90::launch_backward<__half, 256>(*p, st);
    case 2256: return (int)fa_sm90::launch_backward<__nv_bfloat16, 256>(*p, st);
    default: return (int)cudaErrorInvalidValue;
    }
}
