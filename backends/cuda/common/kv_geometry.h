/* kv_geometry.h: the launch geometry of fa_forward_kvcache's kernels (decode/), the one source
 * for every launcher of them: decode.cuh and decode_mma.cuh (nvcc and HIP) and the driver-API
 * launcher of a build whose kernels are compiled at run time (host/rtc_decode.c, plain C), so the
 * two paths cannot disagree on a grid, a block or a kernel's shared memory. The kernels read the
 * same shapes (decode_kernels.cuh's decode_shape, decode_mma_kernels.cuh's mma_shape). Compiles as
 * C, CUDA and HIP; under NVRTC the constants only (the rest is host code). */
#ifndef FA_GPU_KV_GEOMETRY_H
#define FA_GPU_KV_GEOMETRY_H

#include "common/kv_params.h"

/* The check, append and combine kernels: blocks of 256 threads; the check takes one block per
 * sequence (grid-stride beyond FA_KV_CHECK_MAX_BLOCKS), append a grid-stride loop over its elements
 * and combine one over its items (below), each in at most FA_KV_STRIDE_MAX_BLOCKS blocks. */
#define FA_KV_ELEMENTWISE_THREADS 256
#define FA_KV_CHECK_MAX_BLOCKS 65535
#define FA_KV_STRIDE_MAX_BLOCKS 65536
#define FA_KV_COMBINE_CHANNELS 32 /* output channels per combine block (a divisor of the threads) */
#define FA_KV_COMBINE_AHEAD 4     /* splits per thread whose partials the combine reads beside the LSEs */
#define FA_KV_COMBINE_LANES 32    /* combine_groups_kernel: lanes per (row, channels) item */
#define FA_KV_COMBINE_GROUP_CHANNELS 128 /* ... and its channels, 4 a lane */

/* The SIMT decode kernel at head-dim bucket D (FA_KV_THREADS threads): D / 8 threads hold one key
 * row, FA_KV_THREADS / (D / 8) key rows ("streams") read side by side, U keys in flight per thread,
 * STAGES steps in the cp.async ring, whose bytes are its only dynamic shared memory. */
#define FA_KV_SIMT_LPK(D) ((D) / 8)
#define FA_KV_SIMT_STREAMS(D) (FA_KV_THREADS / FA_KV_SIMT_LPK(D))
#define FA_KV_SIMT_U(D) ((D) == 256 ? 8 : 4)
#define FA_KV_SIMT_STAGES(D) ((D) == 256 ? 2 : 3)
#define FA_KV_SIMT_RING_BYTES(D) (FA_KV_SIMT_STAGES(D) * 2 * FA_KV_SIMT_U(D) * FA_KV_THREADS * 16)

/* The SIMT decode kernel's cp.async ring: CUDA only (HIP's kernels load through registers); the
 * instances with it are the fp16 / bf16 ones. FA_RUNTIME_HIP: the HIP module's host code (its
 * run-time launcher names the instances). */
#if defined(__HIPCC__) || defined(FA_RUNTIME_HIP)
#define FA_KV_HAVE_ASYNC 0
#else
#define FA_KV_HAVE_ASYNC 1
#endif

/* The tensor-core decode kernel at bucket D (64 or 128) with a ring of ST stages and W warps a
 * block (fa_gpu_kv_params.mma_warps, chosen per call): each warp takes 16 keys of every step from
 * its own ring of K and V rows padded to D + 8 elements (2 bytes each); the warps' fp32 merge of
 * 16 x D outputs reuses the ring, so the dynamic shared memory is the larger. The instances have
 * FA_KV_MMA_STAGES = 2. Eight warps where a block's shared memory holds them (every bucket on
 * sm_80 and sm_90: 136 KB at d 128), four where it does not (d 128 on sm_86 / sm_89: 68 KB); the
 * kernel's static shared memory stays below FA_KV_MMA_STATIC_BYTES. */
#define FA_KV_MMA_KEYS 16
#define FA_KV_MMA_STAGES 2
#define FA_KV_MMA_MAX_WARPS 8
#define FA_KV_MMA_MIN_WARPS 4
#define FA_KV_MMA_STATIC_BYTES 8192
#define FA_KV_MMA_LD(D) ((D) + 8)
#define FA_KV_MMA_RING_BYTES(D, ST, W) ((ST) * (W) * 2 * FA_KV_MMA_KEYS * FA_KV_MMA_LD(D) * 2)
#define FA_KV_MMA_MERGE_BYTES(D, W) ((W) * 16 * (D) * 4)
#define FA_KV_MMA_SMEM(D, ST, W)                                                                                     \
    (FA_KV_MMA_RING_BYTES(D, ST, W) > FA_KV_MMA_MERGE_BYTES(D, W) ? FA_KV_MMA_RING_BYTES(D, ST, W)                 \
                                                                   : FA_KV_MMA_MERGE_BYTES(D, W))

/* The MLA decode kernel (decode/decode_mla_kernels.cuh; CUDA only): head dims d <= FA_KV_MLA_D and
 * d_v <= FA_KV_MLA_DV where either is above 256, reached through the tensor-core entry points with
 * head-dim bucket FA_KV_MLA_D. FA_KV_MLA_WARPS warps, FA_KV_MLA_KEYS keys a step in a ring of two
 * stages of K rows (D + 8 elements of 2 bytes) and V rows (DV + 8), beside the query tile (16 rows
 * of D + 8) and the step's scores (16 x KEYS fp32), all dynamic shared memory: 158.25 KB, within
 * the 163 KB a block may have on sm_80 and 227 KB on sm_90, not sm_86 / sm_89's 99 KB; its static
 * shared memory (begin_block's rows) stays below FA_KV_MLA_STATIC_BYTES. */
#define FA_KV_MLA_D 576
#define FA_KV_MLA_DV 512
#define FA_KV_MLA_WARPS 8
#define FA_KV_MLA_KEYS 32
#define FA_KV_MLA_STATIC_BYTES 1024
#define FA_KV_MLA_SMEM                                                                                               \
    (2 * FA_KV_MLA_KEYS * ((FA_KV_MLA_D + 8) + (FA_KV_MLA_DV + 8)) * 2 + 16 * (FA_KV_MLA_D + 8) * 2 +               \
     16 * FA_KV_MLA_KEYS * 4)

/* The Hopper MLA decode kernel (decode/decode_mla_sm90_kernels.cuh; sm_90a) for the same head
 * dims where v_cache is a view of k_cache's first d_v channels (MLA's latent cache): tiles of
 * FA_KV_MLA_SM90_ROWS query rows (wgmma's M), steps of FA_KV_MLA_SM90_KEYS keys,
 * FA_KV_MLA_SM90_THREADS threads (two warpgroups). Dynamic shared memory: the query tile and
 * two stages of key rows, all D channels of 2 bytes in the 128-byte swizzled layout, and 1 KB to
 * align them; more than half of an sm_90 multiprocessor's 228 KB, so one block is resident on each
 * (the host's occupancy); its static shared memory (begin_block's rows) stays below
 * FA_KV_MLA_SM90_STATIC_BYTES. */
#define FA_KV_MLA_SM90_ROWS 64
/* The keys a call (batch x the longest cache) from which the chooser takes the Hopper MLA kernel
 * for calls that fill its 64-row tiles (kv_host.c) */
#define FA_KV_MLA_SM90_MIN_KEYS 32768
#define FA_KV_MLA_SM90_KEYS 64
#define FA_KV_MLA_SM90_THREADS 256
#define FA_KV_MLA_SM90_STATIC_BYTES 4096
#define FA_KV_MLA_SM90_SMEM ((FA_KV_MLA_SM90_ROWS + 2 * FA_KV_MLA_SM90_KEYS) * FA_KV_MLA_D * 2 + 1024)

#if !defined(__CUDACC_RTC__) && !defined(__HIPCC_RTC__)

#ifdef __cplusplus
extern "C" {
#endif

/* Blocks of FA_KV_ELEMENTWISE_THREADS for a grid-stride loop over n elements. */
static inline unsigned fa_kv_stride_blocks(int64_t n)
{
    const int64_t b = (n + FA_KV_ELEMENTWISE_THREADS - 1) / FA_KV_ELEMENTWISE_THREADS;
    return (unsigned)(b < 1 ? 1 : b > FA_KV_STRIDE_MAX_BLOCKS ? FA_KV_STRIDE_MAX_BLOCKS : b);
}

/* The check kernel's blocks: one per sequence, at most FA_KV_CHECK_MAX_BLOCKS. */
static inline unsigned fa_kv_check_blocks(int64_t batch)
{
    return (unsigned)(batch < FA_KV_CHECK_MAX_BLOCKS ? batch : FA_KV_CHECK_MAX_BLOCKS);
}

/* The append kernel's elements: one per (sequence, new token, kv head, channel of the larger head
 * dim). Each factor is a dimension of k_new or v_new, whose sizes the core checked, so the product
 * fits. */
static inline int64_t fa_kv_append_elements(const fa_gpu_kv_params *p)
{
    return p->batch * p->seqlen_knew * p->heads_kv * (p->d > p->d_v ? p->d : p->d_v);
}

/* The combine kernel's blocks, grid-stride beyond FA_KV_STRIDE_MAX_BLOCKS: combine_kernel takes
 * one per (query row, FA_KV_COMBINE_CHANNELS output channels); combine_groups_kernel
 * (p->group_combine) FA_KV_ELEMENTWISE_THREADS / FA_KV_COMBINE_LANES such items a block, of
 * FA_KV_COMBINE_GROUP_CHANNELS channels. */
static inline unsigned fa_kv_combine_blocks(const fa_gpu_kv_params *p)
{
    const int64_t channels = p->group_combine ? FA_KV_COMBINE_GROUP_CHANNELS : FA_KV_COMBINE_CHANNELS;
    const int64_t per = p->group_combine ? FA_KV_ELEMENTWISE_THREADS / FA_KV_COMBINE_LANES : 1;
    const int64_t items = p->batch * p->heads_q * p->seqlen_new * ((p->d_v + channels - 1) / channels);
    const int64_t n = (items + per - 1) / per;
    return (unsigned)(n < 1 ? 1 : n > FA_KV_STRIDE_MAX_BLOCKS ? FA_KV_STRIDE_MAX_BLOCKS : n);
}

/* The decode kernel's grid: one block per (sequence, kv head, row tile) along x, one per split
 * along y; 0 where CUDA's limits cannot take it. */
static inline int fa_kv_decode_grid(const fa_gpu_kv_params *p, unsigned *x, unsigned *y)
{
    const int64_t blocks = p->batch * p->heads_kv * p->row_tiles; /* below 2^31: kv_host.c checked it */
    if (blocks > 0x7fffffff || p->splits > 65535)
        return 0;
    *x = (unsigned)blocks;
    *y = (unsigned)p->splits;
    return 1;
}

/* The tensor-core decode kernel's warps at bucket D on a device whose blocks may use optin bytes of
 * shared memory: the most that fit (FA_KV_MMA_MAX_WARPS or FA_KV_MMA_MIN_WARPS). */
static inline int fa_kv_mma_warps(int head_dim_bucket, long long optin)
{
    return FA_KV_MMA_SMEM(head_dim_bucket, FA_KV_MMA_STAGES, FA_KV_MMA_MAX_WARPS) + FA_KV_MMA_STATIC_BYTES <= optin
               ? FA_KV_MMA_MAX_WARPS
               : FA_KV_MMA_MIN_WARPS;
}

/* The SIMT decode kernel's dynamic shared memory at bucket D: the ring's with cp.async, else none. */
static inline int fa_kv_simt_smem(int head_dim_bucket, int async_copy)
{
    return async_copy ? FA_KV_SIMT_RING_BYTES(head_dim_bucket) : 0;
}

#ifdef __cplusplus
}
#endif

#endif /* !__CUDACC_RTC__ && !__HIPCC_RTC__ */

#endif /* FA_GPU_KV_GEOMETRY_H */
