// The decode kernels (decode.cuh) for every dtype, head-dim bucket (64, 128, 256) and row tile
// (FA_KV_ROW_TILE_SMALL, _LARGE), with the cp.async ring for fp16 / bf16 on CUDA, and their C entry
// points: fa_kv_forward / fa_kv_blocks_per_processor compiled as CUDA (backends/cuda/kernels.h),
// fa_hip_kv_* as HIP (backends/hip/kernels.h).
#include "decode.cuh"

#include <type_traits>

namespace {
using namespace FA_PORTABLE_NS;

#if defined(__HIPCC__)
constexpr bool HAVE_ASYNC = false;
#else
constexpr bool HAVE_ASYNC = true;
#endif

/* f(instance) for the instance of (dtype, bucket, row tile, async); async only where it exists */
template <class F> fa_gpu_error with_instance(int dtype, int bucket, int row_tile, int async_copy, F f)
{
    const bool small = row_tile == FA_KV_ROW_TILE_SMALL;
    if (!small && row_tile != FA_KV_ROW_TILE_LARGE)
        return FA_GPU_INVALID_VALUE;
    auto by_tile = [&](auto store, auto d) -> fa_gpu_error {
        using S = decltype(store);
        constexpr int D = decltype(d)::value;
        constexpr bool A = HAVE_ASYNC && sizeof(typename S::T) == 2;
        if (async_copy && A)
            return small ? f.template run<S, D, FA_KV_ROW_TILE_SMALL, A>() : f.template run<S, D, FA_KV_ROW_TILE_LARGE, A>();
        return small ? f.template run<S, D, FA_KV_ROW_TILE_SMALL, false>()
                     : f.template run<S, D, FA_KV_ROW_TILE_LARGE, false>();
    };
    auto by_dim = [&](auto store) -> fa_gpu_error {
        switch (bucket) {
        case 64: return by_tile(store, std::integral_constant<int, 64>());
        case 128: return by_tile(store, std::integral_constant<int, 128>());
        case 256: return by_tile(store, std::integral_constant<int, 256>());
        default: return FA_GPU_INVALID_VALUE;
        }
    };
    switch (dtype) {
    case 0: return by_dim(store_f32());
    case 1: return by_dim(store_f16());
    case 2: return by_dim(store_bf16());
    default: return FA_GPU_INVALID_VALUE;
    }
}

struct launch_fn {
    const fa_gpu_kv_params &p;
    fa_gpu_stream stream;
    template <class S, int D, int RT, bool A> fa_gpu_error run() const { return kv::launch<S, D, RT, A>(p, stream); }
};

struct occupancy_fn {
    int *n;
    template <class S, int D, int RT, bool A> fa_gpu_error run() const
    {
        return kv::blocks_per_processor<S, D, RT, A>(n);
    }
};
} // namespace

extern "C" int FA_PORTABLE_ENTRY(kv_forward)(const fa_gpu_kv_params *p, int dtype, int head_dim_bucket, int row_tile,
                                             int async_copy, void *stream)
{
    return (int)with_instance(dtype, head_dim_bucket, row_tile, async_copy,
                              launch_fn{*p, static_cast<fa_gpu_stream>(stream)});
}

extern "C" int FA_PORTABLE_ENTRY(kv_blocks_per_processor)(int dtype, int head_dim_bucket, int row_tile, int async_copy,
                                                          int *blocks)
{
    return (int)with_instance(dtype, head_dim_bucket, row_tile, async_copy, occupancy_fn{blocks});
}
