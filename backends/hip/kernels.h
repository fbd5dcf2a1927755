/* kernels.h: the HIP backend's kernel entry points, compiled by hipcc from the CUDA-language tree
 * (backends/cuda: simt/, decode/, mfma/; named fa_hip_* there by common/vendor.h's FA_GPU_ENTRY).
 * They take the parameter block both backends share (common/params.h) and return a hipError_t
 * value. */
#ifndef FA_HIP_KERNELS_H
#define FA_HIP_KERNELS_H

#include "common/kv_params.h"
#include "common/params.h"

/* The SIMT kernels: dtype 0 fp32, 1 fp16, 2 bf16; head dims 1..256 in buckets 64, 128,
 * 256 (fa_hip_simt_bucket: 0 outside; the bucket of the larger of d and d_v), with the learnable
 * sink and d_v != d; the backward is deterministic and needs p->dsum. */
int fa_hip_simt_forward(const fa_gpu_params *p, int dtype, int head_dim_bucket, void *stream);
int fa_hip_simt_backward(const fa_gpu_params *p, int dtype, int head_dim_bucket, void *stream);
int fa_hip_simt_bucket(int64_t head_dim);
/* dsink_kernel alone after a dsum on the same stream (the CUDA backend's tensor-core families use it;
 * compiled here from the same sources). */
int fa_hip_simt_dsink(const fa_gpu_params *p, void *stream);

/* fa_forward_kvcache's kernels (decode/): dtype 0 fp32, 1 fp16, 2 bf16; buckets 64,
 * 128, 256; row tiles FA_KV_ROW_TILE_SMALL and _LARGE. */
int fa_hip_kv_forward(const fa_gpu_kv_params *p, int dtype, int head_dim_bucket, int row_tile, int async_copy,
                 void *stream);
/* Decode blocks of that instance resident on one processor (occupancy), into *blocks. */
int fa_hip_kv_blocks_per_processor(int dtype, int head_dim_bucket, int row_tile, int async_copy, int *blocks);

/* The matrix-core forward for CDNA (gfx90a, gfx94x): dtype 1 fp16 or 2 bf16, buckets 64 and 128. */
int fa_hip_mfma_forward(const fa_gpu_params *p, int dtype, int head_dim_bucket, void *stream);

#endif
