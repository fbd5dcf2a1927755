/* simt_geometry.h: the SIMT kernels' launch geometry, the one source for every launcher of them:
 * launch_forward and launch_backward (simt/, compiled by nvcc, through common/portable.cuh) and the
 * run-time launcher (host/rtc_simt.c, plain C), so the two paths cannot disagree on the tile,
 * the block, the head-dim buckets, the storage types or the vector rule. In common/ because the
 * host layer may include common/ only (tests/cuda/check_include_graph.py). Compiles as C, CUDA and
 * HIP; under NVRTC and hipRTC the tile constants only (the rest is host code). */
#ifndef FA_GPU_SIMT_GEOMETRY_H
#define FA_GPU_SIMT_GEOMETRY_H

#include "common/params.h"

/* Query rows per block (grid.x = ceil(seqlen_q / FA_SIMT_BM)), keys per tile, threads per block. */
#define FA_SIMT_BM 64
#define FA_SIMT_BN 64
#define FA_SIMT_THREADS 256
/* The backward (simt/backward.cuh's bwd_shape): each key (dK / dV) or query row (dQ) is held by
 * D / FA_SIMT_BWD_CPT threads of FA_SIMT_BWD_CPT columns each, so a block covers
 * FA_SIMT_BWD_ROWS(D) of them at head-dim bucket D. */
#define FA_SIMT_BWD_CPT 16
#define FA_SIMT_BWD_ROWS(D) (FA_SIMT_THREADS * FA_SIMT_BWD_CPT / (D))

#if !defined(__CUDACC_RTC__) && !defined(__HIPCC_RTC__)

#ifdef __cplusplus
extern "C" {
#endif

/* The head-dim buckets the instances cover (the template argument D): the bucket of the larger of
 * d and d_v; 0 when it is out of range. */
static inline int fa_simt_bucket_of(int64_t d)
{
    return d < 1 ? 0 : d <= 64 ? 64 : d <= 128 ? 128 : d <= 256 ? 256 : 0;
}

/* The storage type (the template argument S) of each dtype the dispatch takes (0 fp32, 1 fp16,
 * 2 bf16: instances/simt_dispatch.cu), spelled as a name expression needs it; NULL for another. */
static inline const char *fa_simt_storage_name(int dtype)
{
    return dtype == 0 ? "fa_gpu::store_f32" : dtype == 1 ? "fa_gpu::store_f16" : dtype == 2 ? "fa_gpu::store_bf16" : 0;
}

/* The bytes of one element of that storage type (sizeof(S::T)); 0 for another dtype. */
static inline size_t fa_simt_storage_bytes(int dtype)
{
    return dtype == 0 ? 4 : dtype == 1 || dtype == 2 ? 2 : 0;
}

/* Whether a tensor's rows can be read four elements at a time (the kernels' vec argument is this
 * rule over q, k, v and o): data aligned to four elements, every stride a multiple of four. */
static inline int fa_simt_view_vec4(const fa_gpu_tensor *t, size_t elem_bytes)
{
    return (uintptr_t)t->data % (4 * elem_bytes) == 0 && t->sb % 4 == 0 && t->ss % 4 == 0 && t->sh % 4 == 0;
}

/* Whether a grid of x * y * z blocks can be launched (CUDA's limits on each dimension). */
static inline int fa_simt_grid_ok(int64_t x, int64_t y, int64_t z)
{
    return x > 0 && x <= 0x7fffffff && y > 0 && y <= 65535 && z > 0 && z <= 65535;
}

/* The forward's blocks along x: one per FA_SIMT_BM query rows. */
static inline int64_t fa_simt_query_tiles(int64_t seqlen_q)
{
    return (seqlen_q + FA_SIMT_BM - 1) / FA_SIMT_BM;
}

#ifdef __cplusplus
}
#endif

#endif /* !__CUDACC_RTC__ && !__HIPCC_RTC__ */

#endif /* FA_GPU_SIMT_GEOMETRY_H */
