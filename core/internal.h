/* internal.h: what the core and the backends share and users never see: the validated problem,
 * the backend table, the context, error reporting. No vendor header is included here. */
#ifndef FA_INTERNAL_H
#define FA_INTERNAL_H

#include "flashattn.h"
#include "mask.h"
#include "score_mod.h"

#include <stdarg.h>
#include <stdint.h>
#include <string.h>

/* ---------------------------------------------------------------- validated problem */

/* One tensor as the kernels address it: element (b, row, h, c) of sequence b lives at
 * data + b*sb + (row_start(b) + row)*ss + h*sh + c, where row_start is 0 for dense tensors and
 * cu_seqlens[b] for packed ones (then sb = 0). LSE uses the same form with c = 0 and ss its
 * row stride. */
typedef struct fa_view {
    void *data;
    int64_t sb, ss, sh;
} fa_view;

/* Per query-tile lists of non-empty key tiles for a block-sparse mask, at the kernel's tiling
 * (CSR): for mask head mh and query tile qt, the key tiles are
 * col[row_ptr[mh*nq + qt] .. row_ptr[mh*nq + qt + 1]) with their class in cls[] (PARTIAL when
 * any element inside the tile is masked by the block mask, FULL otherwise). */
typedef struct fa_block_lists {
    int64_t heads, nq, nk;   /* mask heads (1 or heads_q), query tiles, key tiles */
    int64_t block_q, block_k; /* kernel tile the lists are built for */
    int64_t *row_ptr;         /* heads*nq + 1 */
    int32_t *col;
    uint8_t *cls;
    int64_t nnz;
    /* lists of the context's cache (core/lists_cache.c) are shared between calls; bits: the copy
     * of the mask's bits they were built from; device: the backend's device copies of the bits and
     * lists (fa_backend.lists_upload), NULL where it keeps none */
    int cached;
    const uint8_t *bits;
    void *device;
} fa_block_lists;

typedef struct fa_problem {
    int backward;
    fa_dtype dtype;
    fa_dtype out_dtype;                 /* o / dq, dk, dv: dtype, or fp32 for fp16 / bf16 inputs */
    int64_t batch, heads_q, heads_kv, group;
    int64_t d, d_v;                     /* head dims: d of Q, K (dQ, dK); d_v of V, O (dO, dV) */
    int64_t seqlen_q, seqlen_k;         /* dense: the lengths; varlen: the longest in cu_seqlens */
    int64_t total_q, total_k;           /* rows of the packed tensors (dense: batch * seqlen) */
    float scale;
    int causal;
    int64_t window_left, window_right;  /* as given, -1 unbounded (causal not folded) */
    float dropout_p;
    uint32_t dropout_threshold;         /* from core/philox.h; 0 = no dropout */
    float dropout_scale;                /* 1 / (1 - p) */
    uint64_t seed, offset;
    int deterministic;
    /* score modifiers (core/score_mod.h): the call's scalars, and ALiBi's slopes (NULL: no ALiBi;
     * query head h of sequence b uses alibi_slopes[b * mod.alibi_stride + h]) */
    fa_score_mod mod;
    const float *alibi_slopes;
    /* the learnable sink (core/sink.h): fp32 [heads_q] in the context's memory, NULL: none; the
     * backward writes dsink (fp32 [heads_q], NULL: not asked) */
    const float *sink;
    float *dsink;
    /* varlen: cu_seqlens in the context's memory and validated host copies (batch + 1) */
    int varlen;
    const int32_t *cu_q, *cu_k;
    const int32_t *host_cu_q, *host_cu_k;
    /* tensors */
    fa_view q, k, v, o, lse, dout, dq, dk, dv;
    int has_lse;
    /* paged keys and values of a varlen forward (core/paged_gather.c): k / v above then have the
     * packed workspace's strides and no data until the core gathers the pages into it, before the
     * kernel runs; backends never read these */
    int paged;
    fa_view k_pages, v_pages;           /* sb: the page stride */
    int64_t page_size, num_pages, block_table_stride;
    const int32_t *host_block_table;    /* [batch][block_table_stride], in *cu_host */
    /* block sparsity */
    const fa_block_mask *block_mask;
    const fa_block_lists *lists;        /* built by the core for (block_q, block_k) below */
    /* plan */
    int64_t block_q, block_k;
} fa_problem;

/* Sequence b's lengths and row starts within the packed tensors. */
static inline void fa_problem_seq(const fa_problem *p, int64_t b, int64_t *sq, int64_t *sk, int64_t *q0,
                                  int64_t *k0)
{
    if (p->varlen) {
        *q0 = p->host_cu_q[b];
        *k0 = p->host_cu_k[b];
        *sq = p->host_cu_q[b + 1] - *q0;
        *sk = p->host_cu_k[b + 1] - *k0;
    } else {
        *q0 = 0;
        *k0 = 0;
        *sq = p->seqlen_q;
        *sk = p->seqlen_k;
    }
}

static inline fa_mask fa_problem_mask(const fa_problem *p, int64_t sq, int64_t sk)
{
    return fa_mask_make(sq, sk, p->causal, p->window_left, p->window_right);
}

/* Block-mask bit for query head h, local element (i, j); 1 when there is no block mask. */
static inline int fa_problem_block_keep(const fa_problem *p, int64_t h, int64_t i, int64_t j)
{
    const fa_block_mask *bm = p->block_mask;
    if (!bm)
        return 1;
    int64_t mh = bm->heads == 1 ? 0 : h;
    return bm->bits[(mh * bm->rows + i / bm->block_q) * bm->cols + j / bm->block_k] != 0;
}

/* A validated fa_forward_kvcache call. p holds q, o, lse and the options as for fa_forward, with
 * seqlen_q = seqlen_new and seqlen_k = the most keys a sequence attends to after appending (from
 * its left pad on); p.k and p.v are unused. Sequence b's keys are its cache positions
 * fa_kv_leftpad(b) .. fa_kv_seqlen(b) - 1, key j at position fa_kv_leftpad(b) + j; the masks count
 * keys, appending and rotary count positions. The cache views address token (position) t of
 * sequence b as
 *     contiguous  data + row(b) * sb + t * ss + h * sh + c,  row(b) = batch_idx[b] or b
 *     paged       data + page * sb + (t % page_size) * ss + h * sh + c,
 *                 page = block_table[b * block_table_stride + t / page_size]. */
typedef struct fa_kv_problem {
    fa_problem p;
    fa_view k_cache, v_cache;
    int paged;
    int64_t page_size, num_pages, block_table_stride; /* paged */
    int64_t seqlen_cache, batch_cache;                /* contiguous */
    int64_t capacity;                                 /* tokens a sequence may hold */
    /* the int32 arrays in the context's memory (NULL when not given) and their host copies */
    const int32_t *cache_seqlens, *block_table, *batch_idx, *cache_leftpad;
    const int32_t *host_seqlens, *host_block_table, *host_batch_idx, *host_leftpad;
    /* appended keys and values */
    int has_new;
    int64_t seqlen_knew;
    fa_view k_new, v_new;
    /* rotary: cos / sin rows of rotary_dim / 2 values */
    int rotary, rotary_interleaved;
    int64_t rotary_dim, seqlen_ro;
    const void *rotary_cos, *rotary_sin;
    int64_t cos_stride, sin_stride;
    int num_splits; /* as asked; 0 = the backend's choice */
    /* the arrays' values are the backend's to check on the device (check_on_device): no host
     * copies; p.seqlen_k is the capacity) */
    int device_check;
} fa_kv_problem;

/* The end of sequence b's keys after appending: its cached tokens plus the new ones. */
static inline int64_t fa_kv_seqlen(const fa_kv_problem *kp, int64_t b)
{
    return (kp->host_seqlens ? kp->host_seqlens[b] : kp->seqlen_cache) + kp->seqlen_knew;
}

/* The position of sequence b's first key (cache_leftpad; 0 without it). */
static inline int64_t fa_kv_leftpad(const fa_kv_problem *kp, int64_t b)
{
    return kp->host_leftpad ? kp->host_leftpad[b] : 0;
}

/* ---------------------------------------------------------------- backend table */

/* The chooser's answer for one call: a name (logs, the tool, tests) and the backend's own record of
 * what runs it. A backend with one kind of kernel per dtype keeps an id in `kernel`; one that
 * chooses among families and instances copies its typed choice struct into `choice` (checked to
 * fit at compile time: FA_VARIANT_CHOICE) and reads it back in forward / backward. */
typedef struct fa_variant {
    char name[64];
    int kernel; /* backend-private kernel id */
    union {
        unsigned char bytes[32];
        int64_t align_;
    } choice;
} fa_variant;

/* Declares a backend's choice struct as what its variants carry: checks that it fits and defines
 * type##_put (into a variant) and type##_get (read back). */
#define FA_VARIANT_CHOICE(type)                                                                    \
    _Static_assert(sizeof(type) <= sizeof(((fa_variant *)0)->choice), #type " fits fa_variant.choice"); \
    static inline void type##_put(fa_variant *v, const type *c)                                    \
    {                                                                                              \
        memcpy(&v->choice, c, sizeof *c);                                                          \
    }                                                                                              \
    static inline type type##_get(const fa_variant *v)                                             \
    {                                                                                              \
        type c;                                                                                    \
        memcpy(&c, &v->choice, sizeof c);                                                          \
        return c;                                                                                  \
    }

typedef struct fa_tile_limits {
    int64_t onchip_bytes;            /* M for the paper's formula */
    int64_t min_block, max_block_q, max_block_k;
    int64_t multiple;                /* tiles are rounded to a multiple of this */
} fa_tile_limits;

struct fa_context;

typedef struct fa_backend {
    const char *name;
    int is_gpu;
    fa_status (*device_count)(int *count);
    /* Whether the backend can run on this machine: FA_SUCCESS with *count >= 1 devices, else
     * FA_ERR_NO_BACKEND with *count 0 and one line in why that starts with the reason's class:
     * "library not found: " (with the loader's message), "no driver: " or "no device". Optional
     * (NULL: device_count decides, and zero devices reads "no device"). */
    fa_status (*availability)(int *count, char *why, size_t len); // optional
    fa_status (*device_name)(int device, char *buf, size_t len);
    void (*capabilities)(fa_capabilities *caps);
    fa_status (*open)(struct fa_context *ctx, int device);
    void (*close)(struct fa_context *ctx);
    void (*tile_limits)(const struct fa_context *ctx, const fa_problem *p, fa_tile_limits *out);
    fa_status (*choose)(const struct fa_context *ctx, const fa_problem *p, fa_variant *out);
    fa_status (*forward)(struct fa_context *ctx, const fa_problem *p, const fa_variant *v);
    fa_status (*backward)(struct fa_context *ctx, const fa_problem *p, const fa_variant *v);
    int64_t (*workspace)(const struct fa_context *ctx, const fa_problem *p); /* bytes; -1: overflows */
    fa_status (*alloc)(struct fa_context *ctx, size_t bytes, void **ptr);
    fa_status (*free)(struct fa_context *ctx, void *ptr);
    fa_status (*copy)(struct fa_context *ctx, void *dst, const void *src, size_t bytes, fa_copy_kind kind);
    fa_status (*sync)(struct fa_context *ctx);
    fa_status (*set_stream)(struct fa_context *ctx, void *stream); // optional
    int (*num_threads)(const struct fa_context *ctx);               // optional
    /* Ring attention's element-wise steps (core/ring.c), in the context's memory, queued on its
     * stream; optional (NULL: no ring attention on this backend). Q-like views [b, n, h, d],
     * LSE views [b, h, n]; strides as fa_tensor's. ring_copy: dst = src, same shape, converting
     * the dtype. ring_merge (fp32): o, lse = the log-sum-exp merge of (o, lse) and (o_part,
     * lse_part), row by row (fa_softmax_merge). ring_add (fp32): acc += part. stream: the
     * stream a transport orders its transfers against (NULL on the host). */
    fa_status (*ring_copy)(struct fa_context *ctx, const fa_tensor *dst, const fa_tensor *src);
    fa_status (*ring_merge)(struct fa_context *ctx, const fa_tensor *o, const fa_tensor *lse, const fa_tensor *o_part,
                            const fa_tensor *lse_part);
    fa_status (*ring_add)(struct fa_context *ctx, const fa_tensor *acc, const fa_tensor *part);
    void *(*stream)(const struct fa_context *ctx);
    /* fa_forward_kvcache; optional (NULL: FA_ERR_UNSUPPORTED). Appends, rotates and attends. */
    fa_status (*forward_kvcache)(struct fa_context *ctx, const fa_kv_problem *kp);
    /* 1 when forward_kvcache takes cache_leftpad itself; else the core runs such calls on the dense
     * forward (core/kvcache_dense.c) where that path serves them, and forward_kvcache refuses the
     * rest */
    int kv_leftpad;
    /* Device copies of block lists the context keeps between calls (core/lists_cache.c); optional
     * (NULL: the kernels read what the call passes them). lists_upload sets l->device to copies of
     * geometry->bits and of l's arrays, or leaves it NULL and returns an error when it cannot keep
     * copies now (the lists are then not kept); lists_free releases them, once no kernel uses them. */
    fa_status (*lists_upload)(struct fa_context *ctx, fa_block_lists *l, const fa_block_mask *geometry);
    void (*lists_free)(struct fa_context *ctx, fa_block_lists *l);
} fa_backend;

/* The host versions of the ring steps (core/ring.c), for backends whose memory is the host's. */
fa_status fa_host_ring_copy(struct fa_context *ctx, const fa_tensor *dst, const fa_tensor *src);
fa_status fa_host_ring_merge(struct fa_context *ctx, const fa_tensor *o, const fa_tensor *lse, const fa_tensor *o_part,
                             const fa_tensor *lse_part);
fa_status fa_host_ring_add(struct fa_context *ctx, const fa_tensor *acc, const fa_tensor *part);

extern const fa_backend fa_backend_cpu;

/* ---------------------------------------------------------------- context */

struct fa_context {
    const fa_backend *backend;
    int device;
    int num_threads;
    void *priv;      /* backend state */
    uint64_t serial; /* distinct for every context created: a thread's stored message for an
                        earlier context at the same address is not this one's */
    struct fa_lists_cache *lists_cache; /* core/lists_cache.c */
};

/* Error messages are per thread (core/status.c): each thread keeps, for itself, the last message
 * of calls without a context (ctx NULL) and of each of the few contexts it used most recently, so a
 * thread sharing a context with others reads its own call's message. */
#define FA_ERROR_MESSAGE_BYTES 512
#define FA_ERROR_LOCATION_BYTES 64
/* Records a message, and apart from it the file:line that raised it, for the calling thread and
 * ctx (NULL: a call without a context) and returns status; FA_SUCCESS clears both. */
fa_status fa_error_at(fa_context *ctx, fa_status status, const char *file, int line, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;
#define FA_ERROR(ctx, status, ...) fa_error_at((ctx), (status), __FILE__, __LINE__, __VA_ARGS__)
void fa_clear_error(const fa_context *ctx);
/* Moves the calling thread's message for ctx to its context-free slot (for a context that failed to
 * open and is about to be freed, so that fa_last_error() reports why). */
void fa_error_move_to_thread(const fa_context *ctx);
/* The next context serial. */
uint64_t fa_context_next_serial(void);

/* ---------------------------------------------------------------- core modules */

/* validate.c: every rule once; fills p (without plan and lists). Host copies of cu_seqlens are
 * allocated into *cu_host (caller frees). */
fa_status fa_validate_forward(fa_context *ctx, const fa_fwd_args *a, fa_problem *p, int32_t **cu_host);
fa_status fa_validate_backward(fa_context *ctx, const fa_bwd_args *a, fa_problem *p, int32_t **cu_host);

/* paged_gather.c: a varlen forward over paged K / V. fa_paged_load checks the block table (read
 * into host_table, batch x block_table_stride int32) against cu_seqlens_k (p's host copy) and the
 * pages, and sets p's paged fields and workspace-form k / v views; fa_paged_workspace_bytes is the
 * packed K / V workspace (0 when not paged, -1 when it overflows); fa_paged_gather allocates it
 * on the context's device, copies the pages in and points p->k / p->v at it (*workspace: free
 * with backend->free after the kernel). */
struct fa_span;
fa_status fa_paged_load(fa_context *ctx, const fa_varlen *vl, const fa_tensor *k, const fa_tensor *v, fa_problem *p,
                        const struct fa_span *outs, const char *const *out_names, int n_outs, int32_t *host_table);
int64_t fa_paged_workspace_bytes(const fa_problem *p);
fa_status fa_paged_gather(fa_context *ctx, fa_problem *p, void **workspace);

/* kvcache.c: validation of fa_forward_kvcache's arguments; host copies of the int32 arrays are
 * allocated into *host (caller frees). */
fa_status fa_validate_kvcache(fa_context *ctx, const fa_kvcache_args *a, fa_kv_problem *kp, int32_t **host);
/* kvcache_dense.c: a validated fa_forward_kvcache call run as appends and one dense fa_forward per
 * sequence (chunked prefill); fa_kv_dense_takes says whether it serves the call. */
int fa_kv_dense_takes(const struct fa_context *ctx, const fa_kv_problem *kp);
fa_status fa_kv_dense_forward(struct fa_context *ctx, const fa_kvcache_args *a, const fa_kv_problem *kp);

/* plan.c: the paper's block sizes, B_c = ceil(M / 4d), B_r = min(ceil(M / 4d), d) with M counted
 * in fp32 elements, then clamped to the backend's limits. */
void fa_plan_paper_blocks(int64_t onchip_bytes, int64_t d, int64_t *block_q, int64_t *block_k);
void fa_plan_tiles(const fa_tile_limits *lim, int64_t d, int64_t *block_q, int64_t *block_k);

/* blockmask.c */
fa_status fa_block_lists_build(const fa_block_mask *m, int64_t heads_q, int64_t seqlen_q, int64_t seqlen_k,
                               int64_t block_q, int64_t block_k, fa_block_lists *out);
void fa_block_lists_free(fa_block_lists *l);

/* lists_cache.c: the block lists of the context's last few masks, kept between calls. acquire
 * returns lists for the mask and tiling (the cache's, or the call's own when none can be kept);
 * every successful acquire is paired with a release when the call is done with them. */
typedef struct fa_lists_cache fa_lists_cache;
fa_status fa_lists_cache_create(fa_context *ctx);
void fa_lists_cache_destroy(fa_context *ctx);
fa_status fa_lists_acquire(fa_context *ctx, const fa_block_mask *m, int64_t heads_q, int64_t seqlen_q,
                           int64_t seqlen_k, int64_t block_q, int64_t block_k, fa_block_lists **out);
void fa_lists_release(fa_context *ctx, fa_block_lists *l);
/* Entries held, and lists built since the context opened (for tests). */
void fa_lists_cache_stats(const fa_context *ctx, int *entries, int64_t *builds);
fa_status fa_block_mask_check(const fa_block_mask *m, int64_t heads_q, int64_t seqlen_q, int64_t seqlen_k,
                              char *why, size_t why_len);

/* 64-bit helpers that report overflow */
static inline int fa_mul_ok(int64_t a, int64_t b, int64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}
static inline int fa_add_ok(int64_t a, int64_t b, int64_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}

#endif /* FA_INTERNAL_H */
