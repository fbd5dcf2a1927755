/* params.h: the plain-old-data description of one call that every kernel family of the CUDA and
 * HIP backends receives by value (sm80, sm90, simt, mfma), filled once by
 * host/gpu_host.c. Included from C (backend.c), CUDA and HIP. */
#ifndef FA_GPU_PARAMS_H
#define FA_GPU_PARAMS_H

#if defined(__CUDACC_RTC__) || defined(__HIPCC_RTC__) /* NVRTC and hipRTC have no <stdint.h>: the prelude's types */
#include "common/rtc_prelude.cuh"
#else
#include <stddef.h>
#include <stdint.h>
#endif

#include "score_mod.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fa_gpu_tensor {
    void *data;
    int64_t sb, ss, sh; /* element strides: batch, row, head (see fa_view) */
} fa_gpu_tensor;

typedef struct fa_gpu_params {
    fa_gpu_tensor q, k, v, o, lse, dout, dq, dk, dv;
    float *dsum;                 /* backward: D = rowsum(dO * O), [heads_q][total_q] */
    float *lse2;                 /* backward, fused path: LSE * log2(e) per row, [heads_q][total_q] */
    float *dq_accum;             /* backward, non-deterministic: fp32 dQ [heads_q][total_q][padded d],
                                    NULL selects the deterministic two-kernel path */
    int64_t batch, heads_q, heads_kv, group, d;
    int64_t seqlen_q, seqlen_k;  /* dense lengths or varlen maxima */
    int64_t total_q;
    const int32_t *cu_q, *cu_k;  /* device, NULL when dense */
    float scale, scale_log2;     /* softmax scale, and scale * log2(e) */
    int causal;
    int out_f32;                 /* o (forward) or dq, dk, dv (backward) are fp32 while the inputs are
                                    fp16 / bf16 (fa_problem.out_dtype): written unrounded */
    int64_t window_left, window_right;
    uint32_t dropout_threshold;
    float dropout_scale;
    uint64_t seed, offset;
    /* the call's score modifiers (core/score_mod.h) in the units of the raw product q . k (u = scale),
     * and ALiBi's slopes on the device (used where mod.alibi is set) */
    fa_score_mod_factors mod;
    const float *alibi_slopes;
    /* block sparsity: the mask bits and the core's per-query-tile lists, on the device */
    const uint8_t *bm_bits;
    int64_t bm_heads, bm_rows, bm_cols, bm_bq, bm_bk;
    const int64_t *bl_row_ptr;
    const int32_t *bl_col;
    const uint8_t *bl_cls;
    int64_t bl_heads, bl_nq;
    /* appended last, so that the kernels which read neither keep every other field's offset: the
     * value head dim of V, O, dO, dV (d is Q's, K's); the learnable sink, fp32 [heads_q] on the
     * device (NULL: none; core/sink.h), and the backward's dsink output (NULL: not asked). The
     * SIMT kernels read d_v, and the tensor-core forwards' MOD instances with d_v < d (the chooser
     * gives the other calls with d_v != d to the SIMT kernels); those instances also fold the sink
     * in, and a backward's dsink is the SIMT family's dsink_kernel after any family's dsum. */
    int64_t d_v;
    const float *sink;
    float *dsink;
    /* the Hopper forward's split keys (sm90/forward_kernels.cuh; 0 or 1: not split): each query
     * tile's key tiles shared among `splits` blocks, whose O (fp32, normalised) and LSE go to part
     * 0's views split_o and split_lse (fp32, indexed as o and lse are), part s's at s *
     * split_stride_o and s * split_stride_lse elements further (the call's scratch on the device);
     * split_combine_kernel (common/split_combine.cuh) merges them into o and lse. */
    int64_t splits;
    fa_gpu_tensor split_o, split_lse;
    int64_t split_stride_o, split_stride_lse;
    /* dsum_kernel clears the fp32 dQ accumulator's row of every row it reads (dq_accum as
     * [heads_q][total_q][dq_zero_cols] floats, 16-byte aligned, dq_zero_cols a multiple of 4) before
     * the backward adds into them, in place of a memset of the whole accumulator; 0: it does not
     * (the launcher clears it, or there is none) */
    int64_t dq_zero_cols;
} fa_gpu_params;

/* The edge of the core's block-sparse tiles (rows and keys) that every CUDA and HIP kernel family
 * walks, and so the key-tile width of all of them: sm80 and sm90 (their query tiles are multiples
 * of it; per-head-dim shapes in sm80/tiles.h and sm90/kernels.cuh), the SIMT kernels' 64 x 64
 * tiles and the MFMA forward. host/gpu_host.c reports it as the backends' block-list granularity. */
#define FA_GPU_BLOCK 64

#ifdef __cplusplus
}
#endif

#if defined(__cplusplus) && (defined(__CUDACC__) || defined(__HIPCC__))
/* Sequence b's lengths and first packed rows (fa_problem_seq's rule), for every kernel family of
 * the CUDA and HIP backends: the offsets from cu_q/cu_k when packed, else the dense lengths. */
struct fa_seq {
    int64_t sq, sk, q_start, k_start;
};

__device__ __forceinline__ fa_seq fa_sequence(const fa_gpu_params &p, int64_t b)
{
    fa_seq s;
    if (p.cu_q) {
        s.q_start = p.cu_q[b];
        s.k_start = p.cu_k[b];
        s.sq = p.cu_q[b + 1] - s.q_start;
        s.sk = p.cu_k[b + 1] - s.k_start;
    } else {
        s.q_start = s.k_start = 0;
        s.sq = p.seqlen_q;
        s.sk = p.seqlen_k;
    }
    return s;
}

/* Whether a call has a score modifier: the launchers pick the kernels' MOD instances. */
__host__ __device__ __forceinline__ bool fa_gpu_has_score_mod(const fa_gpu_params &p)
{
    return fa_score_mod_factors_active(p.mod);
}

/* Whether a forward runs the tensor-core families' MOD instances: a score modifier, a learnable
 * sink, which their epilogue folds in (stage_output), or d_v < d (their V loads and O stores take
 * p.d_v columns); a forward with a sink or d_v != d never splits its keys (the parts' merge reads
 * neither). */
__host__ __device__ __forceinline__ bool fa_gpu_forward_mod(const fa_gpu_params &p)
{
    return fa_gpu_has_score_mod(p) || p.sink != nullptr || p.d_v != p.d;
}

/* ALiBi's slope of query head h of sequence b as given (0 without ALiBi). */
__device__ __forceinline__ float fa_gpu_alibi_slope_given(const fa_gpu_params &p, int64_t b, int64_t h)
{
    return p.mod.alibi ? p.alibi_slopes[fa_alibi_slope_index(p.mod, b, h)] : 0.0f;
}

/* The same in q . k units. */
__device__ __forceinline__ float fa_gpu_alibi_slope(const fa_gpu_params &p, int64_t b, int64_t h)
{
    return fa_gpu_alibi_slope_given(p, b, h) * p.mod.alibi_mul;
}

/* The score modifiers of query head h of sequence b (core/score_mod.h's state). */
__device__ __forceinline__ fa_score_mod_state fa_gpu_score_mod(const fa_gpu_params &p, const fa_seq &s, int64_t b,
                                                               int64_t h)
{
    return fa_score_mod_begin(p.mod, fa_gpu_alibi_slope_given(p, b, h), s.sk - s.sq);
}
#endif
#endif
