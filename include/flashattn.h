/* flashattn.h: the whole public surface of flashattn, a portable FlashAttention library.
 *
 * Exact attention O = softmax(scale * Q K^T + mask) V computed by fused tiled kernels that never
 * materialise the N x N score matrix. C11; every symbol is prefixed fa_ / FA_. The library never
 * aborts and never prints: every call returns an fa_status, and the calling thread keeps the last
 * error message: fa_context_last_error for calls on a context, fa_last_error for calls without one.
 * The library file and line that raised it, for debugging, are apart from the message:
 * fa_context_last_error_location and fa_last_error_location.
 *
 * Threads. Functions that take no context (versions, status strings, dtypes, discovery,
 * capabilities, fa_options_default, fa_tensor_contiguous, block masks, fa_io_model_compute,
 * conversions) may be called from any number of threads at once. Different contexts may be used
 * by different threads at once. One context may be shared by threads that call fa_forward,
 * fa_backward, fa_query_support, fa_plan, fa_malloc, fa_free, fa_memcpy and fa_synchronize on it
 * at the same time on the cpu backend (each call starts its own workers and allocates its own
 * workspace) and on cuda / hip (each call selects the device and allocates its workspace on the
 * context's stream; the calls queue on that one stream, in no guaranteed order between threads);
 * an opencl context must be used by one thread at a time (its program cache and buffer table are
 * not locked). Never concurrently with any other call on the same context: fa_context_destroy,
 * fa_context_set_stream, fa_context_set_num_threads. Error messages are per thread, so a thread
 * always reads the message of its own last call, whatever other threads do with the context. */
#ifndef FLASHATTN_H
#define FLASHATTN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32) && defined(FA_BUILDING_DLL)
#define FA_API __declspec(dllexport)
#elif defined(__GNUC__)
#define FA_API __attribute__((visibility("default")))
#else
#define FA_API
#endif

#define FA_VERSION_MAJOR 0
#define FA_VERSION_MINOR 1
#define FA_VERSION_PATCH 0

/* "MAJOR.MINOR.PATCH" of the library actually loaded. */
FA_API const char *fa_version(void);

/* ---------------------------------------------------------------- status */

typedef enum fa_status {
    FA_SUCCESS = 0,
    FA_ERR_INVALID_ARG,   /* a null pointer, a bad shape, stride, option or size */
    FA_ERR_UNSUPPORTED,   /* valid, but this backend has no kernel for it (dtype, head dim, ...) */
    FA_ERR_OUT_OF_MEMORY, /* host or device allocation failed */
    FA_ERR_NO_BACKEND,    /* the named backend is not compiled in or has no usable device */
    FA_ERR_NO_DEVICE,     /* the device index is out of range */
    FA_ERR_BACKEND,       /* the vendor runtime reported an error (message has its name) */
    FA_ERR_OVERFLOW,      /* a size, offset or byte count does not fit 64 bits / size_t */
    FA_ERR_INTERNAL       /* a bug in flashattn: please report it */
} fa_status;

/* A static string that names and explains a status; never NULL. */
FA_API const char *fa_status_string(fa_status status);

/* ---------------------------------------------------------------- tensors */

typedef enum fa_dtype {
    FA_DTYPE_F32 = 0,
    FA_DTYPE_F16 = 1, /* IEEE binary16 */
    FA_DTYPE_BF16 = 2 /* bfloat16, stored as uint16 */
} fa_dtype;

FA_API size_t fa_dtype_size(fa_dtype dtype);  /* bytes per element, 0 for an unknown dtype */
FA_API const char *fa_dtype_name(fa_dtype dtype);

#define FA_MAX_DIMS 4
/* The largest head dim d of q, k, v that any backend runs (fa_capabilities.max_head_dim may be
 * lower); a larger d is FA_ERR_UNSUPPORTED. */
#define FA_MAX_HEAD_DIM 256
/* fa_forward_kvcache takes head dims up to this (DeepSeek's absorbed multi-head latent attention
 * decodes with d_qk 576 and d_v 512) on the backends that list FA_FEATURE_HEAD_DIM_V and have the
 * on-chip memory for it; the others return FA_ERR_UNSUPPORTED above their own limit. */
#define FA_MAX_HEAD_DIM_KVCACHE 576

/* A strided view. shape/stride are in elements (not bytes); the last dimension must be contiguous
 * (stride 1). Dense layouts:   Q, dQ         [batch, seqlen_q, heads_q,  d]     ndim 4
 *                              O, dO         [batch, seqlen_q, heads_q,  d_v]   ndim 4
 *                              K, dK         [batch, seqlen_k, heads_kv, d]     ndim 4
 *                              V, dV         [batch, seqlen_k, heads_kv, d_v]   ndim 4
 *                              LSE           [batch, heads_q, seqlen_q]  fp32   ndim 3
 * Packed variable length:      Q / O         [total_q, heads_q, d / d_v]        ndim 3
 *                              K / V         [total_k, heads_kv, d / d_v]       ndim 3
 *                              LSE           [heads_q, total_q]          fp32   ndim 2
 * Paged (varlen block_table):  K / V         [num_pages, page_size, heads_kv, d / d_v] ndim 4
 * d is the head dim of queries and keys, d_v that of values and outputs (V's last dimension sets
 * it; d_v = d is the usual case, DeepSeek's MLA trains with 192 / 128). A d_v other than d needs a
 * backend that lists FA_FEATURE_HEAD_DIM_V (else FA_ERR_UNSUPPORTED); both are at most
 * FA_MAX_HEAD_DIM.
 * data lives in the memory of the context's backend (see fa_malloc). Every tensor has the dtype
 * of q, except LSE (fp32) and the outputs o (forward) and dq, dk, dv (backward, all three alike),
 * which may be FA_DTYPE_F32 when q is fp16 / bf16: the result is then written unrounded
 * (FA_FEATURE_F32_OUTPUT; for results that are merged or summed further, as ring attention does). */
typedef struct fa_tensor {
    void *data;
    fa_dtype dtype;
    int ndim;
    int64_t shape[FA_MAX_DIMS];
    int64_t stride[FA_MAX_DIMS];
} fa_tensor;

/* Fill t with a contiguous row-major view of the given shape. */
FA_API fa_tensor fa_tensor_contiguous(void *data, fa_dtype dtype, int ndim, const int64_t *shape);

/* ---------------------------------------------------------------- block-sparse masks */

/* A block bitmap: bits[h * rows * cols + r * cols + c] != 0 means query block r may attend key
 * block c (block r covers query rows [r*block_q, (r+1)*block_q) of each sequence, block c key
 * columns [c*block_k, (c+1)*block_k)). heads is 1 (one mask for every query head) or heads_q.
 * rows must cover ceil(seqlen_q / block_q) and cols ceil(seqlen_k / block_k) (for varlen: of the
 * longest sequence). bits lives in host memory. The mask intersects causal/window masks.
 * A context keeps the per-tile lists it builds from the last 8 masks of up to 16 MiB it ran (with a
 * copy of their bits, and on cuda / hip device copies of both): a call whose mask has the same
 * geometry and the same bytes reuses them, so editing bits in place between calls is safe, and a
 * mask reused over a training loop is prepared once. The copies go with the context
 * (fa_context_destroy). */
typedef struct fa_block_mask {
    int64_t heads;
    int64_t rows, cols;
    int64_t block_q, block_k;
    uint8_t *bits;
} fa_block_mask;

typedef enum fa_block_pattern {
    FA_BLOCK_DENSE = 0,    /* every block */
    FA_BLOCK_BUTTERFLY,    /* (r, c) kept iff popcount(r xor c) <= 1: the union of the butterfly factors */
    FA_BLOCK_LOCAL,        /* |r - c| <= param (a band of blocks around the block diagonal) */
    FA_BLOCK_STRIDED,      /* r == c, or (r - c) a multiple of param (Sparse Transformer, strided) */
    FA_BLOCK_RANDOM        /* each block kept with probability density (seeded), diagonal always kept */
} fa_block_pattern;

/* Allocate mask->bits (host, heads*rows*cols bytes) for a problem of the given sequence lengths and
 * fill it with a pattern. param: band width (LOCAL) or stride (STRIDED), ignored otherwise. density
 * and seed: RANDOM only. Release with fa_block_mask_destroy. These functions take no context: a
 * failure's reason is in fa_last_error(). */
FA_API fa_status fa_block_mask_create(fa_block_mask *mask, fa_block_pattern pattern, int64_t heads,
                                      int64_t seqlen_q, int64_t seqlen_k, int64_t block_q,
                                      int64_t block_k, int64_t param, double density, uint64_t seed);
/* Copy a user bitmap (heads*rows*cols bytes, row-major as above) into a new mask. */
FA_API fa_status fa_block_mask_from_bitmap(fa_block_mask *mask, const uint8_t *bitmap, int64_t heads,
                                           int64_t rows, int64_t cols, int64_t block_q,
                                           int64_t block_k);
FA_API void fa_block_mask_destroy(fa_block_mask *mask);
/* Fraction of non-empty blocks, in [0, 1]. */
FA_API double fa_block_mask_density(const fa_block_mask *mask);

/* The elements dropout keeps, by the rule fa_forward and fa_backward apply (core/philox.h, the
 * dropout bullet of fa_options): keep[((b * heads + h) * rows + i) * cols + j] = 1 where element
 * (b, h, i, j) of P is kept, 0 where it is dropped; heads counts query heads; i and j are local to
 * the sequence (varlen: b is the sequence's index in cu_seqlens). p is the float of
 * fa_options.dropout_p, in [0, 1). For tests and for the probabilities FlashAttention-2 returns
 * (return_attn_probs); takes no context: a failure's reason is in fa_last_error(). */
FA_API fa_status fa_dropout_keep_mask(uint64_t seed, uint64_t offset, float p, int64_t batch, int64_t heads,
                                      int64_t rows, int64_t cols, uint8_t *keep);

/* ---------------------------------------------------------------- options and arguments */

/* Semantics (docs/options.md):
 * - scores s_ij = softmax_scale * q_i . k_j; softmax_scale 0 means 1/sqrt(d); a negative value, NaN
 *   or +-inf is FA_ERR_INVALID_ARG (the kernels take a row's maximum before scaling). Scores are formed in fp32: a row with a score that overflows fp32 (huge
 *   scale or inputs) has no defined result (typically NaN).
 * - causal: bottom-right aligned. With offset = seqlen_k - seqlen_q, query i sees key j only if
 *   j <= i + offset. Sliding window (left, right), -1 = unbounded on that side: query i sees key j
 *   only if i + offset - left <= j <= i + offset + right. causal is window right = 0. A bound of
 *   seqlen_q + seqlen_k or more (up to INT64_MAX) limits nothing and acts as -1; a bound below -1
 *   is FA_ERR_INVALID_ARG.
 * - GQA/MQA: heads_q a multiple of heads_kv; query head h uses kv head h / (heads_q / heads_kv).
 *   heads_q is at most 2^31 - 1 (FA_ERR_UNSUPPORTED), and batch x heads_q x the longest sequence
 *   (query or key) must fit 64 bits (FA_ERR_OVERFLOW), even when a tensor is empty.
 * - dropout: element (b, h, i, j) of P is dropped iff fa_dropout_keep() in core/philox.h says so
 *   (Philox4x32-10, key = seed, counter from (offset, b, h, i, j)); kept values are scaled by
 *   1/(1 - p). p in [0, 1).
 * - a row that sees no key gives O = 0, LSE = -inf and dQ = 0 and adds nothing to dK / dV,
 *   whatever Q, K, V, dO hold (NaN / inf included). NaN / inf in a row's query or in a key it sees
 *   propagates to that row's O and LSE (fa_forward, fa_forward_kvcache, ring: one rule); NaN / inf in V or K of a key the row cannot see but which shares a kernel tile with
 *   keys it sees may reach its O or dQ (0 * NaN in the tile's products), as in PyTorch's math
 *   attention (docs/options.md).
 * - softcap c > 0: each scaled score becomes S' = c * tanh(S / c) (Gemma 2: c = 50); 0 = off; NaN,
 *   inf or a negative value is FA_ERR_INVALID_ARG, and so is a c whose ratio to the scale does not
 *   fit fp32 (c / scale and scale / c must be finite and non-zero).
 * - ALiBi: alibi_slopes (fp32, in the context's memory like the tensors, not overlapping an
 *   output) gives query head h of sequence b the slope a = alibi_slopes[b * alibi_batch_stride +
 *   h]; each score becomes S' = S - a * |i + seqlen_k - seqlen_q - j| (the distance aligned
 *   bottom-right like causal). alibi_batch_stride 0: one slope per head for every sequence
 *   ([heads_q]); >= heads_q: [batch][heads_q] rows that far apart. NULL = off. The slopes a call
 *   uses are read on the host to check them (a copy on GPU backends, as cu_seqlens): NaN or +-inf
 *   is FA_ERR_INVALID_ARG.
 * - softcap then ALiBi when both are set; the mask applies after both, and LSE is that of the
 *   modified scores. Ring attention takes softcap, not ALiBi (FA_ERR_UNSUPPORTED). A backend
 *   lists what it runs in fa_capabilities (FA_FEATURE_SOFTCAP, FA_FEATURE_ALIBI); a call asking a
 *   backend for one it lacks is FA_ERR_UNSUPPORTED.
 * - learnable sink (gpt-oss; FlashAttention-4's learnable_sink): learnable_sink, fp32 [heads_q] in
 *   the context's memory (not overlapping an output), one logit per query head that joins every
 *   row's softmax and carries no value, in the units of the modified scores (no scale, softcap or
 *   ALiBi is applied to it): LSE_i = log(sum_j exp(S_ij) + exp(sink_h)), P_ij = exp(S_ij - LSE_i),
 *   O_i = sum_j P_ij V_j. A row that sees no key gets O = 0, LSE = sink_h and dQ = 0 (for finite
 *   inputs: its LSE no longer tells it apart, so NaN / inf in such a row's Q or dO may reach dK /
 *   dV). Dropout never drops the sink. The backward writes dsink_h = -sum_{b,i} exp(sink_h -
 *   LSE_i) D_i, D_i = sum_c dO_ic O_ic (fa_bwd_args.dsink), summed in a fixed order (the same bits
 *   on every run). The values are read on the host to check them (a copy on GPU backends): NaN or
 *   +-inf is FA_ERR_INVALID_ARG. NULL: off. Backends list it as FA_FEATURE_SINK. */
typedef struct fa_options {
    float softmax_scale;
    int causal;
    int64_t window_left, window_right;
    float dropout_p;
    uint64_t dropout_seed;
    uint64_t dropout_offset;
    const fa_block_mask *block_mask; /* NULL: dense */
    int deterministic;               /* backward: bitwise-identical gradients on every run */
    float softcap;                   /* 0: off */
    const float *alibi_slopes;       /* NULL: off */
    int64_t alibi_batch_stride;      /* 0: [heads_q] slopes for every sequence */
    const float *learnable_sink;     /* NULL: off; fp32 [heads_q] (above) */
} fa_options;

/* Defaults: scale 1/sqrt(d) (d of queries and keys), no causal, unbounded window, no dropout, no
 * block mask, no softcap, no ALiBi, no sink. A zeroed fa_options differs only in the window (0, 0):
 * use this function, and fields added later read as off. */
FA_API fa_options fa_options_default(void);

/* Variable-length packed batches: cu_seqlens_q/k are int32 arrays of batch + 1 non-decreasing
 * offsets into the packed token dimension, starting at 0, in the context's memory (like the
 * tensors), not overlapping any output. NULL for both means dense layout. max_seqlen_q/k bound
 * every sequence's length and are at most 2^31 - 1 (FA_ERR_INVALID_ARG otherwise); a loose bound
 * costs nothing: the library plans with the longest sequence in cu_seqlens. Dense sequence
 * lengths are at most 2^60 (FA_ERR_OVERFLOW; only an empty batch can name a longer one).
 *
 * Paged keys and values (FlashAttention-2's block_table in flash_attn_varlen_func; chunked
 * prefill over a paged KV cache): with block_table set, k and v are caches of pages
 * [num_pages, page_size, heads_kv, d] (both the same shape; page_size >= 1) and cu_seqlens_k
 * counts each sequence's keys (its differences are the lengths; they index no packed tensor).
 * Key j of sequence b is row j % page_size of page block_table[b * block_table_stride +
 * j / page_size]: block_table is int32 [batch][block_table_stride] in the context's memory, not
 * overlapping an output, read on the host like cu_seqlens (a copy on GPU backends); the
 * ceil(len_b / page_size) entries sequence b uses must lie in 0 .. num_pages - 1, and len_b at
 * most block_table_stride x page_size (FA_ERR_INVALID_ARG otherwise, naming the sequence and the
 * value); entries past those are not read. Pages may be shared between sequences (a common
 * prefix). The core gathers each sequence's keys and values from the pages into a packed
 * workspace of total_k x heads_kv x d elements each (2 x that in all, on the context's device;
 * one device-to-device copy per run of adjacent pages) and runs the ordinary varlen forward on
 * it, so every option works as without pages. fa_forward and fa_query_support / fa_plan of a
 * forward only: fa_backward (and fa_query_support with backward) with a block_table is
 * FA_ERR_UNSUPPORTED. NULL: k and v are packed [total_k, heads_kv, d] as above, and
 * block_table_stride must be 0. */
typedef struct fa_varlen {
    const int32_t *cu_seqlens_q;
    const int32_t *cu_seqlens_k;
    int64_t batch;
    int64_t max_seqlen_q, max_seqlen_k;
    const int32_t *block_table; /* NULL: k and v packed; else paged (above) */
    int64_t block_table_stride; /* entries per sequence in block_table */
} fa_varlen;

typedef struct fa_fwd_args {
    fa_tensor q, k, v;
    fa_tensor o;          /* written */
    fa_tensor lse;        /* written; data NULL to skip */
    const fa_varlen *varlen; /* NULL: dense */
    fa_options opts;
} fa_fwd_args;

typedef struct fa_bwd_args {
    fa_tensor q, k, v, o, lse, dout; /* inputs: o and lse from fa_forward with the same options */
    fa_tensor dq, dk, dv;            /* written */
    const fa_varlen *varlen;
    fa_options opts;
    fa_tensor dsink; /* fp32 [heads_q], written (not accumulated) when opts.learnable_sink is set;
                        data NULL: not computed. Without a sink it must be left empty. */
} fa_bwd_args;

/* ---------------------------------------------------------------- context */

typedef struct fa_context fa_context;

/* backend: "cpu", "cuda", "hip", "opencl", or NULL / "default" for the best one available
 * (CUDA, HIP, then CPU; OpenCL only when named, so that a CPU OpenCL platform never replaces the
 * native CPU backend), overridden by the environment variable FLASHATTN_BACKEND.
 * device: index within that backend; for "opencl", the position in the list of every platform's
 * devices in platform order (FLASHATTN_OPENCL_PLATFORM=<index> keeps one platform's devices). */
FA_API fa_status fa_context_create(fa_context **ctx, const char *backend, int device);
FA_API void fa_context_destroy(fa_context *ctx);
FA_API const char *fa_context_backend_name(const fa_context *ctx);
FA_API int fa_context_device(const fa_context *ctx);
/* The message of the calling thread's last failed call on ctx; "" before any failure and after
 * fa_forward, fa_backward, fa_query_support or fa_plan succeed. Per thread: another thread's calls on the same context
 * never change it. A thread keeps the messages of the 7 contexts it used most recently. The string
 * belongs to the library and is valid until this thread's next call on ctx. "no context" for NULL. */
FA_API const char *fa_context_last_error(const fa_context *ctx);
/* The message of the calling thread's last failed call that takes no context: fa_context_create,
 * fa_block_mask_create, fa_block_mask_from_bitmap ("" if that call succeeded). Valid until this
 * thread's next such call. */
FA_API const char *fa_last_error(void);
/* Where in the library the message of fa_context_last_error(ctx) / fa_last_error() was raised:
 * "validate.c:261" (the source file's name, no directory, and its line); "" when there is no
 * message, and for a NULL ctx. For debugging and bug reports: the messages themselves never carry
 * it. Same lifetime as the message. */
FA_API const char *fa_context_last_error_location(const fa_context *ctx);
FA_API const char *fa_last_error_location(void);
/* GPU backends: the stream to run on (cudaStream_t, hipStream_t); NULL restores the context's
 * own, a non-blocking stream that is not ordered with the legacy default stream: to run there
 * (PyTorch's default stream, which it names 0), pass cudaStreamLegacy. The CPU and OpenCL backends accept only NULL (OpenCL: one in-order queue per context,
 * owned by the library, since buffers belong to the context's own cl_context). */
FA_API fa_status fa_context_set_stream(fa_context *ctx, void *stream);
/* CPU backend: worker threads (0 = FLASHATTN_NUM_THREADS or the number of online processors).
 * fa_context_num_threads gives the count a call would use (1 on backends without threads). */
FA_API fa_status fa_context_set_num_threads(fa_context *ctx, int threads);
FA_API int fa_context_num_threads(const fa_context *ctx);

/* ---------------------------------------------------------------- discovery */

FA_API int fa_backend_count(void);                 /* backends compiled in */
FA_API const char *fa_backend_name(int index);     /* NULL when out of range */
FA_API fa_status fa_device_count(const char *backend, int *count);
FA_API fa_status fa_device_name(const char *backend, int device, char *buf, size_t len);
/* Whether a backend can run on this machine, in one line written to why (truncated to len):
 * FA_SUCCESS with "available: N device(s)", or FA_ERR_NO_BACKEND with the reason: "not compiled
 * in", "library not found: <the loader's message>" (the vendor runtime, or the backend's module,
 * cannot be loaded), "no driver: ..." or "no device...". FA_ERR_INVALID_ARG for a null argument. */
FA_API fa_status fa_backend_availability(const char *backend, char *why, size_t len);

#define FA_FEATURE_CAUSAL        (1u << 0)
#define FA_FEATURE_WINDOW        (1u << 1)
#define FA_FEATURE_VARLEN        (1u << 2)
#define FA_FEATURE_GQA           (1u << 3)
#define FA_FEATURE_DROPOUT       (1u << 4)
#define FA_FEATURE_BLOCK_SPARSE  (1u << 5)
#define FA_FEATURE_LSE           (1u << 6)
#define FA_FEATURE_DETERMINISTIC (1u << 7)
#define FA_FEATURE_BACKWARD      (1u << 8)
#define FA_FEATURE_STRIDES       (1u << 9)
#define FA_FEATURE_F32_OUTPUT    (1u << 10) /* fp32 o / dq, dk, dv from fp16 / bf16 inputs */
#define FA_FEATURE_SOFTCAP       (1u << 11) /* fa_options.softcap, forward and backward */
#define FA_FEATURE_ALIBI         (1u << 12) /* fa_options.alibi_slopes, forward and backward */
#define FA_FEATURE_KVCACHE       (1u << 13) /* fa_forward_kvcache */
#define FA_FEATURE_KVCACHE_DEVICE_CHECK (1u << 14) /* fa_kvcache_args.check_on_device honoured */
#define FA_FEATURE_SINK          (1u << 15) /* fa_options.learnable_sink, forward, backward (dsink), KV cache */
#define FA_FEATURE_HEAD_DIM_V    (1u << 16) /* d_v != d: V / O / dO / dV of a head dim of their own */

typedef struct fa_capabilities {
    unsigned dtypes;       /* bit (1 << fa_dtype) per supported dtype */
    int max_head_dim;      /* every d in 1..max_head_dim unless head_dims lists them */
    int head_dims[16];     /* exact list (0-terminated) if non-empty; other d padded up, see notes */
    unsigned features;     /* FA_FEATURE_* */
    char notes[256];
} fa_capabilities;

FA_API fa_status fa_backend_capabilities(const char *backend, fa_capabilities *caps);

/* Asks the backend's chooser whether it would run these arguments, and which kernel variant;
 * the same function picks the kernel in fa_forward/fa_backward, so the answers agree.
 * Returns FA_SUCCESS, FA_ERR_UNSUPPORTED (message says why) or FA_ERR_INVALID_ARG. */
FA_API fa_status fa_query_support(fa_context *ctx, const fa_fwd_args *args, int backward,
                                  char *variant, size_t variant_len);

/* The tiling the core planned for these arguments on this context. FA_ERR_OVERFLOW when a
 * workspace size would not fit 64 bits (the call itself would fail the same way). */
typedef struct fa_plan_info {
    int64_t block_q, block_k;   /* B_r, B_c */
    int64_t onchip_bytes;       /* M used for the paper's formula */
    int64_t paper_block_q, paper_block_k; /* before clamping to the backend's kernels */
    int64_t num_q_blocks, num_k_blocks;
    int64_t workspace_fwd, workspace_bwd; /* bytes the library allocates itself; with a varlen
                                              block_table, workspace_fwd includes the gathered K / V
                                              and workspace_bwd is 0 (no backward) */
} fa_plan_info;
FA_API fa_status fa_plan(fa_context *ctx, const fa_fwd_args *args, fa_plan_info *plan);

/* The IO model of Dao et al. 2022 (section 3.2), counted exactly: device-memory bytes read and
 * written by one head's forward pass with seqlen_q queries, seqlen_k keys and head dim d, for
 * standard attention (S and P through memory), the paper's Algorithm 1 (K/V blocks outside) and
 * FlashAttention-2's order (query blocks outside; this library's kernels). Elements take
 * elem_bytes, the softmax statistics 4. block_q / block_k = 0 take the paper's B_r, B_c from
 * onchip_bytes (M); caches are not modelled. core/iomodel.c writes the constants down.
 * FA_ERR_INVALID_ARG for a null out or bad sizes, FA_ERR_OVERFLOW when a count exceeds 64 bits. */
typedef struct fa_io_model {
    int64_t block_q, block_k;                        /* B_r, B_c used */
    int64_t standard_read, standard_write;           /* bytes */
    int64_t flash_read, flash_write;                 /* Algorithm 1 */
    int64_t flash_qouter_read, flash_qouter_write;   /* query blocks outside */
} fa_io_model;
FA_API fa_status fa_io_model_compute(int64_t seqlen_q, int64_t seqlen_k, int64_t d, int64_t onchip_bytes,
                                     int64_t block_q, int64_t block_k, size_t elem_bytes, fa_io_model *out);

/* ---------------------------------------------------------------- memory helpers */

typedef enum fa_copy_kind {
    FA_COPY_HOST_TO_DEVICE = 0,
    FA_COPY_DEVICE_TO_HOST,
    FA_COPY_DEVICE_TO_DEVICE,
    FA_COPY_HOST_TO_HOST
} fa_copy_kind;

/* Device memory of the context's backend. CUDA/HIP: device pointers. OpenCL: the pointer is an
 * address the library reserved for the buffer (never dereferenceable on the host) that stands for
 * (cl_mem, offset): pointer arithmetic inside the allocation works (a tensor or cu_seqlens may
 * start inside it), and only fa_memcpy and the attention calls of the same context accept it. */
FA_API fa_status fa_malloc(fa_context *ctx, size_t bytes, void **ptr);
FA_API fa_status fa_free(fa_context *ctx, void *ptr);
FA_API fa_status fa_memcpy(fa_context *ctx, void *dst, const void *src, size_t bytes, fa_copy_kind kind);
/* Waits for the work queued on the context's stream; then reports (and clears) the bad value a
 * fa_forward_kvcache call with check_on_device found since the last fa_synchronize. */
FA_API fa_status fa_synchronize(fa_context *ctx);

/* ---------------------------------------------------------------- attention */

FA_API fa_status fa_forward(fa_context *ctx, const fa_fwd_args *args);
FA_API fa_status fa_backward(fa_context *ctx, const fa_bwd_args *args);

/* Makes ready ahead of the first real call the kernels that calls of one shape run: fa_forward
 * (and with backward = 1 fa_backward) of batch 1, seqlen_q = seqlen_k = seqlen, heads_q query and
 * heads_kv key / value heads, head dims d and d_v (0: d_v = d), dtype and options (their pointers,
 * slopes, sink and block mask, are read as in a call of that shape), run once on zeros in memory
 * the function allocates and frees, then synchronized. Where a backend compiles its kernels at run
 * time (CUDA built with -Dcuda-kernels=rtc, OpenCL: docs/building.md) this compiles them, or loads
 * them from the disk cache, so the first real call does not wait; elsewhere it is one small call.
 * The kernels chosen depend on the dtype, the head dims and the options, not on the lengths: a
 * short seqlen warms what long calls run. A shape the backend refuses is that call's status, its
 * message behind "fa_warmup: "; sizes past 64 bits are FA_ERR_OVERFLOW before anything is
 * allocated. `flashattn warmup` runs it over lists of shapes, flashattn.warmup from Python. */
FA_API fa_status fa_warmup(fa_context *ctx, fa_dtype dtype, int64_t seqlen, int64_t heads_q, int64_t heads_kv,
                           int64_t d, int64_t d_v, const fa_options *options, int backward);

/* ---------------------------------------------------------------- attention over a KV cache (inference) */

/* A few new query tokens per sequence (decode: 1; speculative decoding, chunked prefill: more)
 * attending over a KV cache, with FlashAttention-2's flash_attn_with_kvcache semantics:
 *
 * - q [batch, seqlen_new, heads_q, d], o [batch, seqlen_new, heads_q, d_v]; lse [batch, heads_q,
 *   seqlen_new] fp32 (data NULL: skip). d is the head dim of q, k_cache and k_new, d_v that of
 *   v_cache, v_new and o (below, "d" in the cache's shapes is d for k and d_v for v); both up to
 *   FA_MAX_HEAD_DIM_KVCACHE (576 / 512: MLA's absorbed decode) where the backend lists
 *   FA_FEATURE_HEAD_DIM_V, else up to FA_MAX_HEAD_DIM with d_v = d.
 * - The cache, k_cache and v_cache alike, is one of
 *     contiguous  [batch_cache, seqlen_cache, heads_kv, d]   block_table NULL; sequence b lives in
 *                 cache row cache_batch_idx[b] (or b when cache_batch_idx is NULL);
 *     paged       [num_pages, page_size, heads_kv, d]        token t of sequence b in page
 *                 block_table[b * block_table_stride + t / page_size], row t % page_size;
 *                 page_size a multiple of 16 (16 .. 256 are the sizes the kernels are tuned for).
 * - cache_seqlens: int32 [batch], tokens already in sequence b's cache (0 is legal); NULL means
 *   every sequence holds seqlen_cache tokens (contiguous only).
 * - k_new, v_new (data NULL: none): [batch, seqlen_knew, heads_kv, d], written into the cache at
 *   positions cache_seqlens[b] .. cache_seqlens[b] + seqlen_knew - 1 before the attention, in
 *   place; the attention then sees cache_seqlens[b] + seqlen_knew keys (cache_seqlens[b] without
 *   them). Every position written or read must lie inside the cache (seqlen_cache, or
 *   block_table_stride * page_size), else FA_ERR_INVALID_ARG. No other cache byte is written.
 *   A slot one sequence writes must be used by no other sequence, nor by the same one at another
 *   position (a page listed twice in its block_table row, a cache_batch_idx repeated), else
 *   FA_ERR_INVALID_ARG before anything is written: a key would be lost. Pages and rows shared
 *   only for reading (a common prefix) are legal.
 * - cache_leftpad (NULL: 0 for every sequence): int32 [batch], FlashAttention-2's cache_leftpad,
 *   the position where sequence b's keys start in its cache row: the attention sees positions
 *   cache_leftpad[b] .. cache_seqlens[b] + seqlen_knew - 1, i.e. cache_seqlens[b] -
 *   cache_leftpad[b] + seqlen_knew keys, and causal / windows / ALiBi count key j from there (key
 *   j is position cache_leftpad[b] + j). Appending and rotary positions are unchanged (absolute:
 *   new key j at cache_seqlens[b] + j), as in FlashAttention-2. 0 <= cache_leftpad[b] <=
 *   cache_seqlens[b] (seqlen_cache without cache_seqlens), else FA_ERR_INVALID_ARG. Contiguous
 *   caches only (FlashAttention-2 refuses it with a paged one too: FA_ERR_INVALID_ARG). The CUDA
 *   and HIP backends refuse it (FA_ERR_UNSUPPORTED) with rotary embeddings, check_on_device or no
 *   query rows, HIP also with appended keys; they run the rest on the dense forward. For the exclusivity rule
 *   above, a sequence still counts as using its cache row from position 0.
 * - rotary (rotary_cos data NULL and ndim 0: none; an empty table is a table): cos and sin [seqlen_ro, rotary_dim / 2] in q's dtype,
 *   rotary_dim even and <= d, applied to the first rotary_dim channels of q and k_new (never to
 *   the cache already there): interleaved pairs (2i, 2i + 1) or, with rotary_interleaved 0, the
 *   halves (i, i + rotary_dim / 2) (GPT-NeoX); x' = x cos - y sin, y' = x sin + y cos at
 *   position p. New key j sits at p = cache_seqlens[b] + j; query i likewise when causal or a
 *   window is set, else every query at p = cache_seqlens[b]. seqlen_ro must exceed every p used.
 *   The rotated keys are stored rounded to the cache's dtype, and the rotated q is rounded to q's.
 * - opts: scale, causal and windows (bottom-right against the cache length after appending),
 *   softcap, ALiBi and the learnable sink as in fa_forward; dropout, block masks and the deterministic flag are
 *   FA_ERR_INVALID_ARG here (a forward for inference). GQA / MQA as in fa_forward.
 * - num_splits: the keys of one sequence cut into this many parts computed in parallel and merged
 *   by their log-sum-exp (0: the backend chooses from batch x heads_kv and its processors; a
 *   backend uses at most as many as it has key blocks to give them); the result does not depend
 *   on it beyond rounding.
 * Every tensor, cache_seqlens, block_table, cache_batch_idx and cache_leftpad live in the context's
 * memory; the library reads the int32 arrays on the host to check them (a copy on GPU backends, which
 * waits for the work queued before the call), unless check_on_device asks otherwise (below). q,
 * k_cache, v_cache, k_new, v_new and the rotary tables share one dtype; o may be fp32 as in
 * fa_forward. Backends list it as FA_FEATURE_KVCACHE; the others return FA_ERR_UNSUPPORTED.
 * - check_on_device (backends listing FA_FEATURE_KVCACHE_DEVICE_CHECK; the others check on the
 *   host as usual): the int32 arrays are checked by the device, in stream order, so the call never
 *   waits for the host and can be captured in a CUDA graph. The shapes, strides and options are
 *   still checked at once; the values of the arrays (lengths against the capacity, pages, batch
 *   rows, rotary positions) are checked by the device: a bad value makes the call write nothing
 *   (o, lse and the caches keep their bytes), and so does every device-checked call after it on
 *   the context until fa_synchronize reports it (FA_ERR_INVALID_ARG naming the array, sequence and
 *   value) and clears it. Splits are then planned from the capacity rather than the longest
 *   sequence. The device does not check that appended slots are exclusive (above), nor the ALiBi
 *   slopes (a NaN slope gives NaN rows): the caller vouches for both. */
typedef struct fa_kvcache_args {
    fa_tensor q;
    fa_tensor k_cache, v_cache;        /* updated in place when k_new is given */
    const int32_t *cache_seqlens;      /* [batch]; NULL: seqlen_cache each (contiguous) */
    const int32_t *block_table;        /* NULL: contiguous cache */
    int64_t block_table_stride;        /* entries per sequence in block_table */
    const int32_t *cache_batch_idx;    /* NULL: sequence b in cache row b (contiguous only) */
    fa_tensor k_new, v_new;            /* data NULL: nothing appended */
    fa_tensor rotary_cos, rotary_sin;  /* data NULL: no rotary */
    int rotary_interleaved;
    fa_tensor o;                       /* written */
    fa_tensor lse;                     /* written; data NULL to skip */
    fa_options opts;
    int num_splits;                    /* 0: chosen by the backend */
    int check_on_device;               /* 1: the int32 arrays checked by the device (see above) */
    const int32_t *cache_leftpad;      /* [batch]; NULL: every sequence's keys start at 0 (contiguous only) */
} fa_kvcache_args;

FA_API fa_status fa_forward_kvcache(fa_context *ctx, const fa_kvcache_args *args);

/* ---------------------------------------------------------------- ring (context-parallel) attention */

/* One rank's link in a ring of `size` ranks: a transport the caller provides (or one of the two
 * below). Every rank makes the same calls in the same order with the same byte counts.
 * - start: begin sending `bytes` at `send` to rank (rank + 1) % size and receiving as many from
 *   rank (rank + size - 1) % size into `recv` (both in the context's memory, not overlapping), on
 *   `channel` (0: K / V, 1: dK / dV). GPU contexts: `stream` is the context's stream; the
 *   transfer must start only after the work already queued on it, and may run alongside the work
 *   queued later. Host transports may complete the transfer before returning.
 * - finish: the work queued on `stream` from now on waits for every transfer started on `channel`
 *   (host transports: returns when they are done).
 * - agree: blocking; *all_ok = whether every rank passed ok != 0 (so that ranks stop together).
 * Each returns 0 on success. */
typedef struct fa_ring_comm {
    int rank, size;
    int (*start)(void *user, int channel, const void *send, void *recv, size_t bytes, void *stream);
    int (*finish)(void *user, int channel, void *stream);
    int (*agree)(void *user, int ok, int *all_ok);
    void *user;
} fa_ring_comm;

typedef enum fa_ring_layout {
    FA_RING_CONTIGUOUS = 0, /* rank r holds tokens [r n, (r + 1) n) of the sequence */
    FA_RING_ZIGZAG = 1      /* the sequence cut into 2 size chunks of n / 2 tokens; rank r holds
                               chunks r and 2 size - 1 - r (equal causal work on every rank) */
} fa_ring_layout;

/* Ring attention: every rank calls it with its shards, q, o [batch, n_q, heads_q, d], k, v
 * [batch, n_k, heads_kv, d], lse [batch, heads_q, n_q], of a sequence of size * n tokens in the
 * given layout (the same n on every rank); the result equals attention over the whole sequence.
 * K and V travel the ring in their dtype, one shard per step, the transfer of the next overlapped
 * with the attention of the current one; each rank's chunk pairs write fp32 partial outputs
 * (FA_FEATURE_F32_OUTPUT) that are merged with the log-sum-exp rule in fp32, and rounded to the
 * dtype once at the end. Options: scale, causal (self-attention shards, n_q == n_k), GQA,
 * deterministic; windows, dropout, block masks and varlen are not supported. Backends: cpu
 * (host memory) and cuda (device memory, on the context's stream). */
FA_API fa_status fa_ring_forward(fa_context *ctx, const fa_ring_comm *comm, fa_ring_layout layout,
                                 const fa_fwd_args *args);
/* The backward: o and lse from fa_ring_forward; K and V travel as in the forward, dK and dV (fp32)
 * follow them one step behind and come home after `size` steps; dQ accumulates locally (fp32).
 * With a learnable sink (joined to each query row once in the forward), dsink is the part of this
 * rank's query rows: sum it over the ranks, as any replicated parameter's gradient. d_v != d works
 * as on one device. */
FA_API fa_status fa_ring_backward(fa_context *ctx, const fa_ring_comm *comm, fa_ring_layout layout,
                                  const fa_bwd_args *args);

/* An in-process transport over host memory: `size` threads of one process stand in for the ranks
 * (the CPU simulation of the ring; each thread calls fa_ring_* on a cpu context with
 * fa_ring_local_comm(ring, its rank)). Transfers complete inside start. */
typedef struct fa_ring_local fa_ring_local;
FA_API fa_status fa_ring_local_create(fa_ring_local **ring, int size);
FA_API fa_ring_comm fa_ring_local_comm(fa_ring_local *ring, int rank);
FA_API void fa_ring_local_destroy(fa_ring_local *ring);

/* The NCCL transport (built with -Dnccl, cuda contexts): ncclSend / ncclRecv on a stream of its
 * own, ordered against the context's stream with events, so that K / V of the next step move
 * while the current step computes. One rank per GPU, in one process per GPU or one thread per
 * GPU: rank 0 makes an id with fa_ring_nccl_unique_id and hands it to every rank (any way the
 * caller likes: a file, a socket, fork, shared memory); each rank then calls
 * fa_ring_nccl_create with its context (the GPU it owns), which blocks until all ranks have joined.
 * FA_ERR_NO_BACKEND when the library was built without NCCL. */
#define FA_RING_NCCL_ID_BYTES 128
typedef struct fa_ring_nccl fa_ring_nccl;
FA_API fa_status fa_ring_nccl_unique_id(unsigned char id[FA_RING_NCCL_ID_BYTES]);
FA_API fa_status fa_ring_nccl_create(fa_ring_nccl **ring, fa_context *ctx,
                                     const unsigned char id[FA_RING_NCCL_ID_BYTES], int rank, int size);
FA_API fa_ring_comm fa_ring_nccl_comm(fa_ring_nccl *ring);
FA_API void fa_ring_nccl_destroy(fa_ring_nccl *ring);

/* ---------------------------------------------------------------- layout of the structures */

/* The byte layout of every public structure above, as this library was compiled: one entry per
 * structure (field_name NULL, offset 0, size its sizeof) followed by one entry per field (its
 * offsetof and sizeof), in declaration order. For bindings that restate the structures (the Python
 * package's ctypes declarations are tested against it). The table is static; *count (when count is
 * not NULL) receives its length. */
typedef struct fa_abi_field {
    const char *struct_name; /* "fa_tensor", ... */
    const char *field_name;  /* NULL: the entry of the structure itself */
    size_t offset;
    size_t size;
} fa_abi_field;
FA_API const fa_abi_field *fa_abi_layout(size_t *count);

/* ---------------------------------------------------------------- conversions (host) */

FA_API uint16_t fa_f32_to_f16(float x);
FA_API float fa_f16_to_f32(uint16_t h);
FA_API uint16_t fa_f32_to_bf16(float x);
FA_API float fa_bf16_to_f32(uint16_t h);

#ifdef __cplusplus
}
#endif
#endif /* FLASHATTN_H */
