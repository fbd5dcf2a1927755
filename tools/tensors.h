/* tensors.h: the flashattn tool's tensor plumbing (tools/tensors.c): buffers in the context's
 * memory, element access by dtype, overflow-checked sizes, and the float32 score-range check that
 * run, fwd and bwd make before computing. */
#ifndef FA_TOOL_TENSORS_H
#define FA_TOOL_TENSORS_H

#include "flashattn.h"
#include "npy.h"

#include <stddef.h>
#include <stdint.h>

/* 64-bit products and sums that report overflow (1: *out holds the result). */
static inline int tool_mul_ok(int64_t a, int64_t b, int64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}
static inline int tool_add_ok(int64_t a, int64_t b, int64_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}

/* A buffer in the context's memory. bytes == 0 keeps ptr NULL: the library accepts NULL data for
 * tensors with no elements, and backends need not support zero-byte allocations. */
typedef struct device_buffer {
    void *ptr;
    size_t bytes;
} device_buffer;

fa_status device_alloc(fa_context *ctx, size_t bytes, device_buffer *buf);
fa_status device_upload(fa_context *ctx, const void *host, size_t bytes, device_buffer *buf);
fa_status device_download(fa_context *ctx, const device_buffer *buf, void *host);
void device_release(fa_context *ctx, device_buffer *buf);

/* The .npy element type that carries dt (bf16 travels as '<u2' bit patterns). */
npy_type npy_type_of(fa_dtype dt);
float dtype_load(fa_dtype dt, const void *data, int64_t i);
void dtype_store(fa_dtype dt, void *data, int64_t i, float x);

/* Element count and bytes of a shape, with overflow checks; returns 0 on overflow. count may be
 * NULL. */
int shape_bytes(int ndim, const int64_t *shape, size_t elem, int64_t *count, size_t *bytes);

/* Every score is scale * q_i . k_j, bounded by |scale| * |q_i| * |k_j|. Kernels also multiply it
 * by log2(e) and subtract a running maximum of either sign, so the bound must stay below
 * FLT_MAX / 4 for no intermediate to overflow float32 (where it would become inf and then NaN).
 * Returns 0, or EXIT_USAGE after a message naming the inputs (q_name, k_name). */
int check_score_range(const char *cmd, float softmax_scale, fa_dtype dt, int64_t d, const void *q, int64_t q_count,
                      const char *q_name, const void *k, int64_t k_count, const char *k_name);
/* The same bound from the largest row norms of q (nq) and of the keys the call reads (nk). */
int check_score_bound(const char *cmd, float softmax_scale, int64_t d, double nq, const char *q_name, double nk,
                      const char *k_name);
/* The largest Euclidean norm of the count / d rows of d elements at data (non-finite elements left
 * out). */
double max_row_norm(fa_dtype dt, const void *data, int64_t count, int64_t d);

/* The layout of ALiBi slopes read from a .npy file for batch sequences of heads query heads:
 * float32 [heads] (*stride 0: every sequence) or [batch, heads] (*stride heads), the forms of
 * fa_options.alibi_slopes / alibi_batch_stride. Returns 0, or -1 with the reason in why. */
int alibi_slopes_layout(const npy_array *slopes, int64_t batch, int64_t heads, int64_t *stride, char *why,
                        size_t why_len);

/* Sink logits read from a .npy file (fa_options.learnable_sink): float32 [heads] for the heads
 * query heads. Returns 0, or -1 with the reason in why. */
int sink_layout(const npy_array *sink, int64_t heads, char *why, size_t why_len);

#endif
