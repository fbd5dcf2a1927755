/* validate.h: the checks of validate.c that other entry points (core/kvcache.c) share: one tensor
 * against its shape, dtype and strides; byte spans and their overlap; the options. */
#ifndef FA_VALIDATE_H
#define FA_VALIDATE_H

#include "internal.h"

#include <stdint.h>

/* The byte range [lo, hi) a tensor may touch; lo == hi for an empty tensor. */
typedef struct fa_span {
    uintptr_t lo, hi;
} fa_span;

/* Checks t against ndim and shape (-1 = any extent), dtype, strides (last 1, none negative) and
 * the fit of its byte span in the address space; an output must not have overlapping elements. */
fa_status fa_check_tensor(fa_context *ctx, const char *name, const fa_tensor *t, int ndim, const int64_t *shape,
                          fa_dtype dtype, int output, fa_span *sp);
int fa_spans_overlap(fa_span a, fa_span b);
/* Whether tensors x and y (spans a and b, both checked as outputs) share a byte: exact where they
 * have one dtype, shape and strides (interleaved views of one packed tensor), else whether the
 * spans meet. */
int fa_tensors_overlap(const fa_tensor *x, fa_span a, const fa_tensor *y, fa_span b);
/* heads_q, heads_kv, d and d_v: at least 1, heads_q a multiple of heads_kv and at most 2^31 - 1,
 * d and d_v at most max_d; sets p->group. */
fa_status fa_check_heads(fa_context *ctx, fa_problem *p, int64_t max_d);
/* The options into p (scale, masks, dropout, softcap, block mask; p's sizes must be set). */
fa_status fa_check_options(fa_context *ctx, const fa_options *o, fa_problem *p);
/* ALiBi's slopes: their span must not meet an output's; read_values: each slope used is finite
 * (read on the host). */
/* The learnable sink (fp32 [heads_q], not inside an output; read_values: each is finite, read on
 * the host) into p->sink. */
fa_status fa_check_sink(fa_context *ctx, const fa_options *o, fa_problem *p, const fa_span *outs,
                        const char *const *out_names, int n_outs, int read_values);
/* The backend's capabilities cover what p asks for (score modifiers, the sink, d_v != d). */
fa_status fa_check_features(fa_context *ctx, const fa_problem *p);
fa_status fa_check_alibi(fa_context *ctx, const fa_options *o, fa_problem *p, const fa_span *outs,
                         const char *const *out_names, int n_outs, int read_values);

#endif
