// The C entry points of the portable kernels: one launcher per (dtype, head-dim bucket),
// instantiated in fp32.cu, fp16.cu and bf16.cu. Compiled as CUDA they are fa_portable_* (declared
// in backends/cuda/kernels.h), as HIP fa_hip_portable_* (backends/hip/kernels.h).
#include "../kernels.cuh"

namespace FA_PORTABLE_NS {
#define FA_PORTABLE_EXTERN(S, D)                                                                                       \
    extern template fa_gpu_error launch_forward<S, D>(const fa_gpu_params &, fa_gpu_stream);                        \
    extern template fa_gpu_error launch_backward<S, D>(const fa_gpu_params &, fa_gpu_stream);
FA_PORTABLE_EXTERN(store_f32, 64)
FA_PORTABLE_EXTERN(store_f32, 128)
FA_PORTABLE_EXTERN(store_f32, 256)
FA_PORTABLE_EXTERN(store_f16, 64)
FA_PORTABLE_EXTERN(store_f16, 128)
FA_PORTABLE_EXTERN(store_f16, 256)
FA_PORTABLE_EXTERN(store_bf16, 64)
FA_PORTABLE_EXTERN(store_bf16, 128)
FA_PORTABLE_EXTERN(store_bf16, 256)
#undef FA_PORTABLE_EXTERN

template <class S> static fa_gpu_error run(const fa_gpu_params &p, int bucket, int backward, fa_gpu_stream st)
{
    switch (bucket) {
    case 64: return backward ? launch_backward<S, 64>(p, st) : launch_forward<S, 64>(p, st);
    case 128: return backward ? launch_backward<S, 128>(p, st) : launch_forward<S, 128>(p, st);
    case 256: return backward ? launch_backward<S, 256>(p, st) : launch_forward<S, 256>(p, st);
    default: return FA_GPU_INVALID_VALUE;
    }
}

static fa_gpu_error run_dtype(const fa_gpu_params &p, int dtype, int bucket, int backward, void *stream)
{
    fa_gpu_stream st = static_cast<fa_gpu_stream>(stream);
    switch (dtype) {
    case 0: return run<store_f32>(p, bucket, backward, st);
    case 1: return run<store_f16>(p, bucket, backward, st);
    case 2: return run<store_bf16>(p, bucket, backward, st);
    default: return FA_GPU_INVALID_VALUE;
    }
}
} // namespace FA_PORTABLE_NS

extern "C" int FA_PORTABLE_ENTRY(portable_forward)(const fa_gpu_params *p, int dtype, int head_dim_bucket, void *stream)
{
    return (int)FA_PORTABLE_NS::run_dtype(*p, dtype, head_dim_bucket, 0, stream);
}

extern "C" int FA_PORTABLE_ENTRY(portable_backward)(const fa_gpu_params *p, int dtype, int head_dim_bucket, void *stream)
{
    return (int)FA_PORTABLE_NS::run_dtype(*p, dtype, head_dim_bucket, 1, stream);
}

extern "C" int FA_PORTABLE_ENTRY(portable_bucket)(int64_t head_dim)
{
    return FA_PORTABLE_NS::bucket_of(head_dim);
}
