/* kv_params.h: the plain-old-data description of one fa_forward_kvcache call that the CUDA and
 * HIP decode kernels (decode.cuh) receive by value, filled by host/kv_host.c from the
 * core's validated fa_kv_problem. Included from C, CUDA and HIP. */
#ifndef FA_GPU_KV_PARAMS_H
#define FA_GPU_KV_PARAMS_H

#if defined(__CUDACC_RTC__) || defined(__HIPCC_RTC__) /* NVRTC, hipRTC: the toolkit's names from common/rtc_prelude.cuh */
#include "common/rtc_prelude.cuh"
#else
#include <stdint.h>
#endif

#include "common/params.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fa_gpu_kv_params {
    fa_gpu_tensor q, o, lse;          /* q [batch][seqlen_new][heads_q][d], o [...][d_v]; lse: sb, ss (row i), sh */
    fa_gpu_tensor k_cache, v_cache;   /* contiguous: sb = one cache row; paged: sb = one page */
    fa_gpu_tensor k_new, v_new;       /* data NULL: nothing appended */
    const int32_t *cache_seqlens;     /* NULL: seqlen_cache tokens in every sequence */
    const int32_t *block_table;       /* NULL: contiguous */
    const int32_t *batch_idx;         /* NULL: sequence b in cache row b */
    const void *rotary_cos, *rotary_sin; /* NULL: no rotary */
    int64_t cos_stride, sin_stride, rotary_dim;
    int rotary_interleaved;
    int64_t batch, seqlen_new, seqlen_knew, heads_q, heads_kv, group, d;
    int64_t seqlen_cache, page_size, block_table_stride;
    int page_shift;                   /* log2(page_size) when a power of two, else -1 */
    int causal;
    int64_t window_left, window_right;
    float scale, scale_log2;          /* softmax scale, and scale * log2(e) */
    int out_f32;                      /* o is fp32 while the inputs are fp16 / bf16 */
    fa_score_mod_factors mod;         /* in the units of the raw product q . k */
    const float *alibi_slopes;
    int aligned;                      /* every cache row 16-byte aligned, d % 8 == 0 and d_v % 8 == 0:
                                         vector loads */
    int mma_warps;                    /* the tensor-core decode kernel's warps a block (kv_geometry.h) */
    /* the launch's shape: query rows per kv head (group x seqlen_new) cut into tiles of the
     * kernel's row count; splits of each sequence's keys, keys_per_split a multiple of the
     * kernel's key chunk */
    int64_t rows, row_tiles, splits, keys_per_split;
    float *partial;                   /* splits > 1: [batch][heads_q][seqlen_new][splits][d_v] outputs
                                         then [...][splits] log-sum-exps, fp32 */
    /* check_on_device: the fault record (NULL: the host checked the arrays), and the bounds the
     * check kernel holds the arrays to */
    long long *fault;
    int64_t capacity, num_pages, batch_cache, seqlen_ro;
    /* appended last (the tensor-core decode kernel reads neither): the value head dim of v_cache,
     * v_new and o (d is q's, k_cache's, k_new's), and the learnable sink, fp32 [heads_q] on the
     * device (NULL: none; core/sink.h), folded in once per row where its final LSE is known. The
     * host gives calls with either to the SIMT decode kernel. */
    int64_t d_v;
    const float *sink;
    int group_combine; /* the splits merged by combine_groups.cuh's kernel, not combine_kernel */
    int mla_sm90;      /* bucket FA_KV_MLA_D: decode_mla_sm90_kernels.cuh's kernel, not decode_mla_kernels.cuh's */
    int one_token;     /* the tensor-core decode kernel's ONE_TOKEN instance: one new token per sequence, no
                          rotary, no softcap or ALiBi (decode_mma_kernels.cuh) */
} fa_gpu_kv_params;

#if defined(__CUDACC__) || defined(__HIPCC__)
#define FA_KV_FN static __host__ __device__ __forceinline__
#else
#define FA_KV_FN static inline
#endif

/* Whether a call's decode blocks check the int32 arrays they read themselves (decode/check.cuh's
 * check_block), in place of a check kernel before them: a device-checked call that appends nothing
 * and splits its keys. Its decode blocks then write only the split partials, the library's
 * scratch, and the combine kernel, the one writer of o and lse, finds any block's fault before it
 * writes; a block whose own arrays are bad reads no key. */
FA_KV_FN int fa_kv_checks_in_blocks(const fa_gpu_kv_params *p)
{
    return p->fault && !(p->k_new.data && p->seqlen_knew != 0) && p->splits > 1;
}

/* The fault record a device check leaves in the context's memory: the first bad value found, as
 * long long [FA_KV_FAULT_WORDS] = {code, sequence, index, value}. While it holds a code, every
 * device-checked call's kernels return at once (they write nothing); fa_synchronize reports it
 * and clears it. A code of -1 is a record being written. */
enum {
    FA_KV_FAULT_NONE = 0,
    FA_KV_FAULT_NEGATIVE_LENGTH,  /* cache_seqlens[sequence] = value < 0 */
    FA_KV_FAULT_OVER_CAPACITY,    /* cache_seqlens[sequence] = value, index = value + the new tokens */
    FA_KV_FAULT_BATCH_IDX,        /* cache_batch_idx[sequence] = value outside the cache's rows */
    FA_KV_FAULT_PAGE,             /* block_table[sequence][index] = value outside the pages */
    FA_KV_FAULT_ROTARY            /* value = the table rows sequence's positions need */
};
#define FA_KV_FAULT_WORDS 4

/* Query rows of one kv head a decode block takes, and the keys it reads per step of its loop
 * (every split but the last is a multiple of these). */
#define FA_KV_ROW_TILE_SMALL 4
#define FA_KV_ROW_TILE_LARGE 8
#define FA_KV_ROW_TILE_MMA 16 /* the tensor-core decode kernel (CUDA: decode/decode_mma.cuh) */
#define FA_KV_THREADS 128
#define FA_KV_KEY_CHUNK 64

#ifdef __cplusplus
}
#endif

#endif
