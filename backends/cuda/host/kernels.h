/* kernels.h: the CUDA backend's kernel entry points, called by backend.c, each defined by a
 * family's dispatch file in instances/ (generate_instances.py): sm80, sm90, simt (named fa_simt_*
 * when compiled as CUDA by common/vendor.h's FA_GPU_ENTRY), decode and the HIP backend's MFMA
 * forward emulated. Each takes the shared parameter block (common/params.h). */
#ifndef FA_CUDA_KERNELS_H
#define FA_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "common/kv_params.h"
#include "common/params.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Launchers, one per (kernel, dtype, padded head dim); return a cudaError_t value. dtype: 1 fp16,
 * 2 bf16 (fa_dtype). aligned: every row start is 16-byte aligned, so tiles move with cp.async.
 * A call with a score modifier (softcap.out != 0 or alibi_slopes) runs the MOD instances, which
 * exist for aligned rows only. stages: the forward's K / V stages, 1 (aligned calls) or 2
 * (sm80/forward.cuh). narrow: the fused backward at d 256 on bwd_kernel's 4-warp instance
 * (FLASHATTN_KERNELS=sm80-bwd-narrow). */
int fa_sm80_forward(const fa_gpu_params *p, int dtype, int head_dim, int aligned, int stages, void *stream);
int fa_sm80_backward(const fa_gpu_params *p, int dtype, int head_dim, int aligned, int narrow, void *stream);
/* Whether an instance exists for (dtype, padded head dim), direction, alignment and score
 * modifier (mod: softcap or ALiBi). */
int fa_sm80_has_instance(int dtype, int head_dim, int backward, int aligned, int mod);
/* Dynamic shared memory of the fused (non-deterministic) backward at a padded head dim with a
 * backward instance, in bytes; 0 for the others. */
size_t fa_sm80_fused_backward_smem(int head_dim);

/* The SIMT kernels (simt/): any dtype (0 fp32, 1 fp16, 2 bf16), head
 * dims 1..256 exact, grouped into buckets of 64, 128, 256 (fa_simt_bucket: 0 outside 1..256; the
 * bucket of the larger of p->d and p->d_v), any compute capability the build targets; the only
 * family with d_v > d, and with a backward at d_v != d. The backward is always
 * deterministic and needs p->dsum ([heads_q][total_q] floats); p->dq_accum and p->lse2 are unused.
 * Return a cudaError_t value. */
int fa_simt_forward(const fa_gpu_params *p, int dtype, int head_dim_bucket, void *stream);
int fa_simt_backward(const fa_gpu_params *p, int dtype, int head_dim_bucket, void *stream);
int fa_simt_bucket(int64_t head_dim);
/* dsink_kernel alone (p->sink, p->dsink, and p->dsum from a dsum on the same stream): the
 * tensor-core families' backward with a learnable sink. */
int fa_simt_dsink(const fa_gpu_params *p, void *stream);

/* The Hopper forward (sm90/, wgmma; built when cuda-archs lists 90, for sm_90a):
 * fp16/bf16, padded head dims 64 and 128, and 256 for plain calls (neither dropout nor block
 * lists), 16-byte aligned rows; score modifiers (mod) on plain calls only. Return a cudaError_t
 * value. */
int fa_sm90_forward(const fa_gpu_params *p, int dtype, int head_dim, void *stream);
int fa_sm90_has_instance(int dtype, int head_dim, int plain, int mod);
/* The Hopper backward (sm90/backward.cuh): fp16/bf16, padded head dims 64 and 128, and 256 for
 * plain calls, score modifiers on plain calls only, 16-byte aligned rows, the fused
 * non-deterministic algorithm: needs p->dsum, p->lse2 and p->dq_accum (heads_q x total_q x
 * head_dim floats). */
int fa_sm90_backward(const fa_gpu_params *p, int dtype, int head_dim, void *stream);
int fa_sm90_has_backward(int dtype, int head_dim, int plain, int mod);

/* fa_forward_kvcache's kernels (decode/, shared with HIP): append, split-KV decode
 * and combine for dtype 0 fp32, 1 fp16, 2 bf16, head-dim buckets 64, 128, 256 (of the larger of d
 * and d_v; the sink and d_v != d are this SIMT kernel's, not the tensor-core one's), row tiles
 * FA_KV_ROW_TILE_SMALL and _LARGE (common/kv_params.h); async_copy: the cp.async ring (fp16 / bf16,
 * aligned rows). Returns a cudaError_t value. */
int fa_kv_forward(const fa_gpu_kv_params *p, int dtype, int head_dim_bucket, int row_tile, int async_copy,
                 void *stream);
/* Decode blocks of that instance resident on one processor (occupancy), into *blocks. */
int fa_kv_blocks_per_processor(int dtype, int head_dim_bucket, int row_tile, int async_copy, int *blocks);
/* The same for the tensor-core decode kernel (decode/decode_mma.cuh: cc >= 8.0, dtype 1 fp16 or 2 bf16,
 * buckets 64 and 128, aligned rows, row tile FA_KV_ROW_TILE_MMA, a ring of FA_KV_MMA_STAGES stages;
 * p->mma_warps warps a block, the occupancy's `warps`). */
int fa_kv_forward_mma(const fa_gpu_kv_params *p, int dtype, int head_dim_bucket, void *stream);
int fa_kv_blocks_per_processor_mma(int dtype, int head_dim_bucket, int warps, int one_token, int *blocks);
/* The Hopper MLA decode kernel alone (decode/decode_mla_sm90.cuh; the sm90 library, sm_90a) on
 * blocks x splits blocks, for fa_kv_forward_mma's calls at bucket FA_KV_MLA_D with p->mla_sm90;
 * dtype 1 fp16 or 2 bf16. Returns a cudaError_t value. */
int fa_sm90_kv_mla(const fa_gpu_kv_params *p, int dtype, unsigned blocks, unsigned splits, void *stream);

/* The HIP backend's MFMA forward (mfma/) compiled as CUDA, each matrix instruction
 * emulated by a 64-thread block through shared memory: a test of that kernel's logic on NVIDIA
 * hardware (FLASHATTN_KERNELS=mfma-emulated), not a fast path. dtype 1 fp16, 2 bf16; buckets
 * 64 and 128. */
int fa_mfma_forward(const fa_gpu_params *p, int dtype, int head_dim_bucket, void *stream);

#ifdef __cplusplus
}
#endif

#endif
