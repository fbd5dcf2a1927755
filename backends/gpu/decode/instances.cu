// The decode kernels (decode.cuh) for every dtype, head-dim bucket (64, 128, 256) and row tile
// (FA_KV_ROW_TILE_SMALL, _LARGE), and their C entry point: fa_kv_forward compiled as CUDA
// (backends/cuda/kernels.h), fa_hip_kv_forward as HIP (backends/hip/kernels.h).
#include "decode.cuh"

namespace {
using namespace FA_PORTABLE_NS;

template <class S> fa_gpu_error launch_dtype(const fa_gpu_kv_params &p, int bucket, int row_tile, fa_gpu_stream st)
{
    const bool small = row_tile == FA_KV_ROW_TILE_SMALL;
    switch (bucket) {
    case 64: return small ? kv::launch<S, 64, FA_KV_ROW_TILE_SMALL>(p, st) : kv::launch<S, 64, FA_KV_ROW_TILE_LARGE>(p, st);
    case 128:
        return small ? kv::launch<S, 128, FA_KV_ROW_TILE_SMALL>(p, st) : kv::launch<S, 128, FA_KV_ROW_TILE_LARGE>(p, st);
    case 256:
        return small ? kv::launch<S, 256, FA_KV_ROW_TILE_SMALL>(p, st) : kv::launch<S, 256, FA_KV_ROW_TILE_LARGE>(p, st);
    default: return FA_GPU_INVALID_VALUE;
    }
}
} // namespace

extern "C" int FA_PORTABLE_ENTRY(kv_forward)(const fa_gpu_kv_params *p, int dtype, int head_dim_bucket, int row_tile,
                                             void *stream)
{
    const fa_gpu_stream st = static_cast<fa_gpu_stream>(stream);
    if (row_tile != FA_KV_ROW_TILE_SMALL && row_tile != FA_KV_ROW_TILE_LARGE)
        return (int)FA_GPU_INVALID_VALUE;
    switch (dtype) {
    case 0: return (int)launch_dtype<store_f32>(*p, head_dim_bucket, row_tile, st);
    case 1: return (int)launch_dtype<store_f16>(*p, head_dim_bucket, row_tile, st);
    case 2: return (int)launch_dtype<store_bf16>(*p, head_dim_bucket, row_tile, st);
    default: return (int)FA_GPU_INVALID_VALUE;
    }
}
