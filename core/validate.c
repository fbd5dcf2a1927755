/* validate.c: every rule about shapes, strides, dtypes, options and sizes, checked once with
 * 64-bit arithmetic before anything is written. Backends never re-validate what is checked here.
 * The result is an fa_problem: the sizes, the options in their effective form, and one fa_view per
 * tensor. */
#include "internal.h"
#include "validate.h"
#include "philox.h"
#include "score_mod.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FA_MAX_SEQLEN ((int64_t)1 << 60)
/* Heads are indexed as int32 on every backend's grid (and a model has far fewer); the bound also
 * keeps the work per key tile, which walks the group of query heads sharing a kv head, finite. */
#define FA_MAX_HEADS (int64_t)INT32_MAX

static int dtype_valid(fa_dtype dt)
{
    return dt == FA_DTYPE_F32 || dt == FA_DTYPE_F16 || dt == FA_DTYPE_BF16;
}

typedef fa_span span;

/* Checks one tensor against its expected ndim and shape (-1 = any), its dtype, strides (last = 1,
 * none negative), and that its byte span fits; outputs must not have overlapping elements. */
static fa_status check_tensor(fa_context *ctx, const char *name, const fa_tensor *t, int ndim,
                              const int64_t *shape, fa_dtype dtype, int output, span *sp)
{
    if (t->ndim != ndim)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "%s: ndim is %d, expected %d", name, t->ndim, ndim);
    if (!dtype_valid(t->dtype))
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "%s: unknown dtype value %d", name, (int)t->dtype);
    if (t->dtype != dtype)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "%s: dtype is %s, expected %s", name, fa_dtype_name(t->dtype),
                        fa_dtype_name(dtype));
    int64_t elems = 1;
    for (int i = 0; i < ndim; ++i) {
        if (t->shape[i] < 0)
            return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "%s: shape[%d] = %lld is negative", name, i,
                            (long long)t->shape[i]);
        if (shape[i] >= 0 && t->shape[i] != shape[i])
            return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "%s: shape[%d] = %lld, expected %lld", name, i,
                            (long long)t->shape[i], (long long)shape[i]);
        if (!fa_mul_ok(elems, t->shape[i], &elems))
            return FA_ERROR(ctx, FA_ERR_OVERFLOW, "%s: element count overflows 64 bits", name);
    }
    /* a tensor without elements addresses no memory: its strides mean nothing (NumPy and torch
     * give such arrays zero strides) */
    sp->lo = sp->hi = 0;
    if (elems == 0)
        return FA_SUCCESS;
    for (int i = 0; i < ndim; ++i)
        if (t->stride[i] < 0)
            return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "%s: stride[%d] = %lld is negative", name, i,
                            (long long)t->stride[i]);
    if (t->stride[ndim - 1] != 1 && t->shape[ndim - 1] > 1)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "%s: the last dimension must be contiguous (stride %lld)", name,
                        (long long)t->stride[ndim - 1]);
    if (!t->data)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "%s: data is NULL", name);
    int64_t last = 0; /* offset of the last element, in elements */
    for (int i = 0; i < ndim; ++i) {
        int64_t term;
        if (!fa_mul_ok(t->shape[i] - 1, t->stride[i], &term) || !fa_add_ok(last, term, &last))
            return FA_ERROR(ctx, FA_ERR_OVERFLOW, "%s: element offsets overflow 64 bits", name);
    }
    int64_t bytes;
    if (!fa_add_ok(last, 1, &bytes) || !fa_mul_ok(bytes, (int64_t)fa_dtype_size(dtype), &bytes) ||
        (uint64_t)bytes > (uint64_t)SIZE_MAX || (uintptr_t)t->data > UINTPTR_MAX - (uintptr_t)bytes)
        return FA_ERROR(ctx, FA_ERR_OVERFLOW, "%s: byte span overflows the address space", name);
    sp->lo = (uintptr_t)t->data;
    sp->hi = sp->lo + (uintptr_t)bytes;
    if (output) {
        /* Distinct indices must map to distinct elements: sort the dimensions of extent > 1 by
         * stride and require each stride to exceed the span of the dimensions inside it. */
        int order[FA_MAX_DIMS], n = 0;
        for (int i = 0; i < ndim; ++i)
            if (t->shape[i] > 1)
                order[n++] = i;
        for (int a = 1; a < n; ++a)
            for (int b = a; b > 0 && t->stride[order[b]] < t->stride[order[b - 1]]; --b) {
                int tmp = order[b];
                order[b] = order[b - 1];
                order[b - 1] = tmp;
            }
        int64_t inner = 0; /* max offset reachable by the inner dimensions */
        for (int a = 0; a < n; ++a) {
            int64_t s = t->stride[order[a]];
            if (s <= inner)
                return FA_ERROR(ctx, FA_ERR_INVALID_ARG,
                                "%s: strides make distinct output elements overlap (dimension %d)", name, order[a]);
            inner += (t->shape[order[a]] - 1) * s;
        }
    }
    return FA_SUCCESS;
}

static int spans_overlap(span a, span b)
{
    return a.lo < a.hi && b.lo < b.hi && a.lo < b.hi && b.lo < a.hi;
}

/* floor(a / b) for b > 0 */
static int64_t floor_div(int64_t a, int64_t b)
{
    return a / b - (a % b != 0 && a < 0);
}

/* Whether an offset difference of target elements is sum_k j_k stride_k with |j_k| < shape_k over
 * the dimensions order[a..n) (extent > 1, strides descending); reach[a]: the largest offset those
 * dimensions reach. Each stride exceeds the reach of the dimensions inside it (check_tensor's rule
 * for an output), so j s must lie within reach[a + 1] of target: at most two j per level. */
static int offset_reachable(const fa_tensor *t, const int *order, const int64_t *reach, int a, int n, int64_t target)
{
    if (a >= n || a >= FA_MAX_DIMS)
        return target == 0;
    const int64_t s = t->stride[order[a]], ext = t->shape[order[a]] - 1, rest = reach[a + 1];
    int64_t lo = -floor_div(rest - target, s), hi = floor_div(target + rest, s); /* ceil, floor */
    lo = lo < -ext ? -ext : lo;
    hi = hi > ext ? ext : hi;
    for (int64_t j = lo; j <= hi; ++j)
        if (offset_reachable(t, order, reach, a + 1, n, target - j * s))
            return 1;
    return 0;
}

/* Whether tensors x and y (spans a and b, each checked by check_tensor as an output) share a byte.
 * Where the spans meet and both have one layout (dtype, shape, strides), elements are compared:
 * the gradients of a packed qkv are interleaved views of one tensor, which share no element;
 * otherwise meeting spans count as an overlap. */
static int tensors_overlap(const fa_tensor *x, span a, const fa_tensor *y, span b)
{
    if (!spans_overlap(a, b))
        return 0;
    if (x->ndim != y->ndim || x->dtype != y->dtype)
        return 1;
    int order[FA_MAX_DIMS], n = 0;
    for (int i = 0; i < x->ndim; ++i) {
        if (x->shape[i] != y->shape[i] || (x->shape[i] > 1 && x->stride[i] != y->stride[i]))
            return 1;
        if (x->shape[i] > 1)
            order[n++] = i;
    }
    for (int i = 1; i < n; ++i) /* strides descending */
        for (int j = i; j > 0 && x->stride[order[j]] > x->stride[order[j - 1]]; --j) {
            const int tmp = order[j];
            order[j] = order[j - 1];
            order[j - 1] = tmp;
        }
    int64_t reach[FA_MAX_DIMS + 1];
    reach[n] = 0;
    for (int i = n - 1; i >= 0; --i) /* bounded by the span's size, which check_tensor fitted in 64 bits */
        reach[i] = reach[i + 1] + (x->shape[order[i]] - 1) * x->stride[order[i]];
    /* elements of size e at a.lo + e u and b.lo + e w meet where |e (w - u) + delta| < e, delta = b.lo
     * - a.lo: w - u = -delta / e, or either integer beside it when e does not divide delta */
    const int64_t e = (int64_t)fa_dtype_size(x->dtype);
    const int64_t delta = b.lo >= a.lo ? (int64_t)(b.lo - a.lo) : -(int64_t)(a.lo - b.lo);
    const int64_t first = floor_div(-delta, e);
    const int64_t last = -delta % e == 0 ? first : first + 1;
    for (int64_t t = first; t <= last; ++t)
        if (offset_reachable(x, order, reach, 0, n, t))
            return 1;
    return 0;
}

/* The kernels address a tensor by (batch, row, head); the d dimension is last. */
static fa_view make_view(const fa_tensor *t, int varlen)
{
    fa_view v;
    v.data = t->data;
    if (varlen) {
        v.sb = 0;
        v.ss = t->stride[0];
        v.sh = t->stride[1];
    } else {
        v.sb = t->stride[0];
        v.ss = t->stride[1];
        v.sh = t->stride[2];
    }
    return v;
}

static fa_view make_lse_view(const fa_tensor *t, int varlen)
{
    fa_view v;
    v.data = t->data;
    if (varlen) {
        v.sb = 0;
        v.sh = t->stride[0];
        v.ss = t->stride[1];
    } else {
        v.sb = t->stride[0];
        v.sh = t->stride[1];
        v.ss = t->stride[2];
    }
    return v;
}

static fa_status check_options(fa_context *ctx, const fa_options *o, fa_problem *p)
{
    if (!(o->softmax_scale >= 0.0f) || isinf(o->softmax_scale))
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "softmax_scale = %g must be finite and >= 0 (0 selects 1/sqrt(d))",
                        (double)o->softmax_scale);
    p->scale = o->softmax_scale != 0.0f ? o->softmax_scale : (float)(1.0 / sqrt((double)p->d));
    if (o->window_left < -1 || o->window_right < -1)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "window (%lld, %lld): each side must be >= 0, or -1 for unbounded",
                        (long long)o->window_left, (long long)o->window_right);
    if (!(o->dropout_p >= 0.0f && o->dropout_p < 1.0f))
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "dropout_p = %g must be in [0, 1)", (double)o->dropout_p);
    p->causal = o->causal != 0;
    p->window_left = o->window_left;
    p->window_right = o->window_right;
    p->dropout_p = o->dropout_p;
    p->dropout_threshold = fa_dropout_threshold(o->dropout_p);
    p->dropout_scale = (float)(1.0 / (1.0 - (double)o->dropout_p));
    p->seed = o->dropout_seed;
    p->offset = o->dropout_offset;
    p->deterministic = o->deterministic != 0;
    if (!(o->softcap >= 0.0f) || isinf(o->softcap))
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "softcap = %g must be finite and >= 0 (0 = off)", (double)o->softcap);
    if (o->softcap > 0.0f) {
        /* the kernels hold scores in the scale's units (core/score_mod.h) */
        fa_softcap_factors f = fa_softcap_make(p->scale, o->softcap);
        if (!isfinite(f.in) || !isfinite(f.out) || f.in == 0.0f || f.out == 0.0f)
            return FA_ERROR(ctx, FA_ERR_INVALID_ARG,
                            "softcap = %g with softmax_scale = %g: their ratio does not fit fp32", (double)o->softcap,
                            (double)p->scale);
    }
    p->mod.softcap = o->softcap;
    p->block_mask = o->block_mask;
    if (o->block_mask) {
        char why[200];
        if (fa_block_mask_check(o->block_mask, p->heads_q, p->seqlen_q, p->seqlen_k, why, sizeof why) != FA_SUCCESS)
            return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "block_mask: %s", why);
    }
    return FA_SUCCESS;
}

/* The learnable sink: fp32 [heads_q] in the context's memory, not inside an output (the kernels
 * read it while they write); with read_values, each value is read on the host (a copy on device
 * backends) and must be finite. */
fa_status fa_check_sink(fa_context *ctx, const fa_options *o, fa_problem *p, const span *outs,
                        const char *const *out_names, int n_outs, int read_values)
{
    p->sink = o->learnable_sink;
    if (!o->learnable_sink)
        return FA_SUCCESS;
    const int64_t bytes = p->heads_q * (int64_t)sizeof(float); /* heads_q < 2^31 */
    if ((uintptr_t)o->learnable_sink > UINTPTR_MAX - (uintptr_t)bytes)
        return FA_ERROR(ctx, FA_ERR_OVERFLOW, "learnable_sink: byte span overflows the address space");
    span s_s = {(uintptr_t)o->learnable_sink, (uintptr_t)o->learnable_sink + (uintptr_t)bytes};
    for (int i = 0; i < n_outs; ++i)
        if (spans_overlap(s_s, outs[i]))
            return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "learnable_sink overlaps output %s in memory", out_names[i]);
    if (!read_values)
        return FA_SUCCESS;
    float *host = malloc((size_t)bytes);
    if (!host)
        return FA_ERROR(ctx, FA_ERR_OUT_OF_MEMORY, "cannot allocate a host copy of %lld sink values",
                        (long long)p->heads_q);
    fa_status st = ctx->backend->copy(ctx, host, o->learnable_sink, (size_t)bytes, FA_COPY_DEVICE_TO_HOST);
    if (st != FA_SUCCESS) {
        char why[400];
        snprintf(why, sizeof why, "%s", fa_context_last_error(ctx));
        st = FA_ERROR(ctx, st, "learnable_sink: %s", why);
    }
    for (int64_t h = 0; h < p->heads_q && st == FA_SUCCESS; ++h)
        if (!isfinite(host[h]))
            st = FA_ERROR(ctx, FA_ERR_INVALID_ARG, "learnable_sink[%lld] = %g is not finite", (long long)h,
                          (double)host[h]);
    free(host);
    return st;
}

fa_status fa_check_features(fa_context *ctx, const fa_problem *p)
{
    /* a backend that has not implemented an option must say so, never ignore it */
    fa_capabilities caps;
    memset(&caps, 0, sizeof caps);
    ctx->backend->capabilities(&caps);
    if (p->mod.softcap > 0.0f && !(caps.features & FA_FEATURE_SOFTCAP))
        return FA_ERROR(ctx, FA_ERR_UNSUPPORTED, "softcap: the %s backend does not implement it", ctx->backend->name);
    if (p->mod.alibi && !(caps.features & FA_FEATURE_ALIBI))
        return FA_ERROR(ctx, FA_ERR_UNSUPPORTED, "ALiBi: the %s backend does not implement it", ctx->backend->name);
    if (p->sink && !(caps.features & FA_FEATURE_SINK))
        return FA_ERROR(ctx, FA_ERR_UNSUPPORTED, "learnable_sink: the %s backend does not implement it",
                        ctx->backend->name);
    if (p->d_v != p->d && !(caps.features & FA_FEATURE_HEAD_DIM_V))
        return FA_ERROR(ctx, FA_ERR_UNSUPPORTED,
                        "d_v = %lld differs from d = %lld: the %s backend runs value head dims equal to d only",
                        (long long)p->d_v, (long long)p->d, ctx->backend->name);
    return FA_SUCCESS;
}

/* ALiBi slopes: fp32 [heads_q] (stride 0) or [batch][stride >= heads_q] in the context's memory,
 * not inside an output (the kernels read them while they write); with read_values, the slopes the
 * call uses are read on the host (a copy on device backends) and each must be finite, unless the
 * call has no query row (then no kernel reads them either). */
static fa_status check_alibi(fa_context *ctx, const fa_options *o, fa_problem *p, const span *outs,
                             const char *const *out_names, int n_outs, int read_values)
{
    p->alibi_slopes = o->alibi_slopes;
    p->mod.alibi = o->alibi_slopes != NULL;
    p->mod.alibi_stride = o->alibi_batch_stride;
    if (!o->alibi_slopes) {
        if (o->alibi_batch_stride != 0)
            return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "alibi_batch_stride = %lld without alibi_slopes",
                            (long long)o->alibi_batch_stride);
        return FA_SUCCESS;
    }
    if (!isfinite(1.0f / p->scale))
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "ALiBi with softmax_scale = %g: 1 / scale does not fit fp32",
                        (double)p->scale);
    int64_t stride = o->alibi_batch_stride, count = p->heads_q;
    if (stride != 0 && stride < p->heads_q)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "alibi_batch_stride = %lld must be 0 or >= heads_q = %lld",
                        (long long)stride, (long long)p->heads_q);
    if (stride != 0 && p->batch > 1 &&
        (!fa_mul_ok(p->batch - 1, stride, &count) || !fa_add_ok(count, p->heads_q, &count)))
        return FA_ERROR(ctx, FA_ERR_OVERFLOW, "alibi_slopes: batch x alibi_batch_stride overflows 64 bits");
    int64_t bytes;
    if (!fa_mul_ok(count, (int64_t)sizeof(float), &bytes) || (uint64_t)bytes > (uint64_t)SIZE_MAX ||
        (uintptr_t)o->alibi_slopes > UINTPTR_MAX - (uintptr_t)bytes)
        return FA_ERROR(ctx, FA_ERR_OVERFLOW, "alibi_slopes: byte span overflows the address space");
    span s_a = {(uintptr_t)o->alibi_slopes, (uintptr_t)o->alibi_slopes + (uintptr_t)bytes};
    for (int i = 0; i < n_outs; ++i)
        if (spans_overlap(s_a, outs[i]))
            return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "alibi_slopes overlaps output %s in memory", out_names[i]);
    if (!read_values || p->batch == 0 || (p->varlen ? p->total_q == 0 : p->seqlen_q == 0)) /* no query row */
        return FA_SUCCESS;
    float *host = malloc((size_t)bytes);
    if (!host)
        return FA_ERROR(ctx, FA_ERR_OUT_OF_MEMORY, "cannot allocate a host copy of %lld ALiBi slopes", (long long)count);
    fa_status st = ctx->backend->copy(ctx, host, o->alibi_slopes, (size_t)bytes, FA_COPY_DEVICE_TO_HOST);
    if (st != FA_SUCCESS) { /* the backend's reason, with the argument it concerns */
        char why[400];
        snprintf(why, sizeof why, "%s", fa_context_last_error(ctx));
        st = FA_ERROR(ctx, st, "alibi_slopes: %s", why);
    }
    const int64_t rows = stride != 0 ? p->batch : 1;
    for (int64_t b = 0; b < rows && st == FA_SUCCESS; ++b)
        for (int64_t h = 0; h < p->heads_q; ++h)
            if (!isfinite(host[b * stride + h])) {
                st = FA_ERROR(ctx, FA_ERR_INVALID_ARG, "alibi_slopes[%lld] = %g (sequence %lld, head %lld) is not finite",
                              (long long)(b * stride + h), (double)host[b * stride + h], (long long)b, (long long)h);
                break;
            }
    free(host);
    return st;
}

/* Reads and checks cu_seqlens (batch + 1 int32 in the context's memory, not inside any output);
 * *longest receives the longest sequence's length. */
static fa_status load_cu_seqlens(fa_context *ctx, const char *name, const int32_t *cu, int64_t batch,
                                 int64_t total, int64_t max_len, const span *outs, const char *const *out_names,
                                 int n_outs, int32_t *host, int64_t *longest)
{
    if (!cu)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "varlen: %s is NULL", name);
    /* the kernels read the offsets while they write the outputs (on GPUs, from device memory) */
    span s_cu = {(uintptr_t)cu, (uintptr_t)cu + (uintptr_t)(batch + 1) * sizeof(int32_t)};
    for (int i = 0; i < n_outs; ++i)
        if (spans_overlap(s_cu, outs[i]))
            return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "varlen: %s overlaps output %s in memory", name, out_names[i]);
    fa_status st = ctx->backend->copy(ctx, host, cu, (size_t)(batch + 1) * sizeof(int32_t), FA_COPY_DEVICE_TO_HOST);
    if (st != FA_SUCCESS)
        return st;
    if (host[0] != 0)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "varlen: %s[0] = %d, must be 0", name, (int)host[0]);
    *longest = 0;
    for (int64_t b = 0; b < batch; ++b) {
        int64_t len = (int64_t)host[b + 1] - host[b];
        if (len < 0)
            return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "varlen: %s decreases at %lld", name, (long long)b);
        if (len > max_len)
            return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "varlen: sequence %lld of %s has length %lld > max_seqlen %lld",
                            (long long)b, name, (long long)len, (long long)max_len);
        if (len > *longest)
            *longest = len;
    }
    if (host[batch] > total)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "varlen: %s[%lld] = %d exceeds the %lld packed rows", name,
                        (long long)batch, (int)host[batch], (long long)total);
    return FA_SUCCESS;
}

/* heads_q, heads_kv, d and d_v as every call takes them (GQA ratio, the heads' and dims' limits);
 * sets group. */
fa_status fa_check_heads(fa_context *ctx, fa_problem *p, int64_t max_d)
{
    if (p->heads_q < 1 || p->heads_kv < 1)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "heads_q = %lld and heads_kv = %lld must be >= 1",
                        (long long)p->heads_q, (long long)p->heads_kv);
    if (p->heads_q > FA_MAX_HEADS)
        return FA_ERROR(ctx, FA_ERR_UNSUPPORTED, "heads_q = %lld: at most 2^31 - 1 heads are supported",
                        (long long)p->heads_q);
    if (p->heads_q % p->heads_kv != 0)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "GQA: heads_q = %lld is not a multiple of heads_kv = %lld",
                        (long long)p->heads_q, (long long)p->heads_kv);
    p->group = p->heads_q / p->heads_kv;
    if (p->d < 1 || p->d_v < 1)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "head dims d = %lld (q, k) and d_v = %lld (v) must be >= 1",
                        (long long)p->d, (long long)p->d_v);
    if (p->d > max_d || p->d_v > max_d)
        return FA_ERROR(ctx, FA_ERR_UNSUPPORTED, "head dims d = %lld (q, k), d_v = %lld (v): at most %lld are supported",
                        (long long)p->d, (long long)p->d_v, (long long)max_d);
    return FA_SUCCESS;
}

/* Sizes from Q, K and V; sets batch, seqlens, heads, d, d_v. */
static fa_status read_sizes(fa_context *ctx, const fa_tensor *q, const fa_tensor *k, const fa_tensor *v,
                            const fa_varlen *vl, fa_problem *p)
{
    int nd = vl ? 3 : 4;
    const int paged = vl && vl->block_table, nd_k = paged ? 4 : nd; /* pages [num_pages, page_size, heads, d] */
    if (q->ndim != nd || k->ndim != nd_k || v->ndim != nd_k)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "q/k/v: ndim is %d/%d/%d, expected %d/%d/%d (%s layout)", q->ndim,
                        k->ndim, v->ndim, nd, nd_k, nd_k,
                        paged ? "packed varlen q, paged k / v [num_pages, page_size, heads, d]"
                        : vl  ? "packed varlen [total, heads, d]"
                              : "[batch, seqlen, heads, d]");
    if (vl && !vl->block_table && vl->block_table_stride != 0)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "varlen: block_table_stride = %lld without block_table",
                        (long long)vl->block_table_stride);
    if (vl) {
        if (vl->batch < 0 || vl->max_seqlen_q < 0 || vl->max_seqlen_k < 0)
            return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "varlen: batch and max_seqlen must be >= 0");
        if (vl->batch >= INT32_MAX)
            return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "varlen: batch too large");
        /* int32 offsets cannot describe a longer sequence; a larger bound is a caller's bug (a
         * bound that is merely loose is accepted: the plan uses the longest actual sequence) */
        if (vl->max_seqlen_q > INT32_MAX || vl->max_seqlen_k > INT32_MAX)
            return FA_ERROR(ctx, FA_ERR_INVALID_ARG,
                            "varlen: max_seqlen_q = %lld, max_seqlen_k = %lld: each must be at most 2^31 - 1 (the "
                            "longest sequence int32 cu_seqlens can describe)",
                            (long long)vl->max_seqlen_q, (long long)vl->max_seqlen_k);
        p->varlen = 1;
        p->batch = vl->batch;
        p->seqlen_q = vl->max_seqlen_q;
        p->seqlen_k = vl->max_seqlen_k;
        p->total_q = q->shape[0];
        p->total_k = paged ? 0 : k->shape[0]; /* paged: from cu_seqlens_k (finish_varlen) */
        if (p->total_q > INT32_MAX || p->total_k > INT32_MAX)
            return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "varlen: more than 2^31 - 1 packed rows cannot be addressed by int32 cu_seqlens");
    } else {
        p->varlen = 0;
        p->batch = q->shape[0];
        p->seqlen_q = q->shape[1];
        p->seqlen_k = k->shape[1];
        if (!fa_mul_ok(p->batch, p->seqlen_q, &p->total_q) || !fa_mul_ok(p->batch, p->seqlen_k, &p->total_k))
            return FA_ERROR(ctx, FA_ERR_OVERFLOW, "batch * seqlen overflows 64 bits");
        /* only an empty batch lets a length this large through the element counts; tile counts,
         * diagonals (seqlen_k - seqlen_q + i) and window edges must stay inside 64 bits */
        if (p->seqlen_q > FA_MAX_SEQLEN || p->seqlen_k > FA_MAX_SEQLEN)
            return FA_ERROR(ctx, FA_ERR_OVERFLOW, "seqlen_q = %lld, seqlen_k = %lld: each must be at most 2^60",
                            (long long)p->seqlen_q, (long long)p->seqlen_k);
    }
    p->heads_q = q->shape[nd - 2];
    p->heads_kv = k->shape[nd_k - 2];
    p->d = q->shape[nd - 1];
    p->d_v = v->shape[nd_k - 1];
    if (p->batch < 0 || p->seqlen_q < 0 || p->seqlen_k < 0)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "negative batch or sequence length");
    fa_status st = fa_check_heads(ctx, p, FA_MAX_HEAD_DIM);
    if (st != FA_SUCCESS)
        return st;
    if (!dtype_valid(q->dtype))
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "q: unknown dtype value %d", (int)q->dtype);
    p->dtype = q->dtype;
    p->out_dtype = q->dtype;
    return FA_SUCCESS;
}

/* The outputs' dtype: the inputs', or fp32 for fp16 / bf16 inputs (written unrounded, e.g. the
 * partial results that ring attention merges); out is the first output tensor. */
static void read_out_dtype(const fa_tensor *out, fa_problem *p)
{
    if (out->dtype == FA_DTYPE_F32 && p->dtype != FA_DTYPE_F32)
        p->out_dtype = FA_DTYPE_F32;
}

/* Q-like ([.., heads_q, d]) and K-like ([.., heads_kv, d]) shapes with last dimension d. */
static void shape_qlike(const fa_problem *p, int64_t d, int64_t *s)
{
    if (p->varlen) {
        s[0] = p->total_q; s[1] = p->heads_q; s[2] = d;
    } else {
        s[0] = p->batch; s[1] = p->seqlen_q; s[2] = p->heads_q; s[3] = d;
    }
}

static void shape_klike(const fa_problem *p, int64_t d, int64_t *s)
{
    if (p->varlen) {
        s[0] = p->total_k; s[1] = p->heads_kv; s[2] = d;
    } else {
        s[0] = p->batch; s[1] = p->seqlen_k; s[2] = p->heads_kv; s[3] = d;
    }
}

static void shape_lse(const fa_problem *p, int64_t *s)
{
    if (p->varlen) {
        s[0] = p->heads_q; s[1] = p->total_q;
    } else {
        s[0] = p->batch; s[1] = p->heads_q; s[2] = p->seqlen_q;
    }
}

/* The backends count their work items, (batch, head, row) for the longest sequence, in int64. */
static fa_status check_work_items(fa_context *ctx, const fa_problem *p)
{
    int64_t longest = p->seqlen_q > p->seqlen_k ? p->seqlen_q : p->seqlen_k, items;
    if (!fa_mul_ok(p->batch, p->heads_q, &items) || !fa_mul_ok(items, longest, &items))
        return FA_ERROR(ctx, FA_ERR_OVERFLOW,
                        "batch %lld x heads_q %lld x longest sequence %lld work items overflow 64 bits",
                        (long long)p->batch, (long long)p->heads_q, (long long)longest);
    return FA_SUCCESS;
}

/* Loads cu_seqlens; the problem's seqlen_q / seqlen_k become the longest actual sequences (the
 * kernels' grids and tile counts follow them, however loose max_seqlen was). */
static fa_status finish_varlen(fa_context *ctx, const fa_varlen *vl, fa_problem *p, const span *outs,
                               const char *const *out_names, int n_outs, int32_t **cu_host)
{
    *cu_host = NULL;
    if (!vl)
        return FA_SUCCESS;
    /* one host block: the two offset arrays, then a paged call's block table */
    int64_t n = 2 * (p->batch + 1), table = 0;
    if (vl->block_table && (!fa_mul_ok(p->batch, vl->block_table_stride > 0 ? vl->block_table_stride : 0, &table) ||
                            !fa_add_ok(n, table, &n) || (uint64_t)n > (uint64_t)(SIZE_MAX / sizeof(int32_t))))
        return FA_ERROR(ctx, FA_ERR_OVERFLOW, "block_table: batch %lld x block_table_stride %lld overflows",
                        (long long)p->batch, (long long)vl->block_table_stride);
    int32_t *h = malloc(sizeof(int32_t) * (size_t)n);
    if (!h)
        return FA_ERROR(ctx, FA_ERR_OUT_OF_MEMORY, "varlen: cannot allocate %lld host offsets", (long long)n);
    int64_t longest_q = 0, longest_k = 0;
    fa_status st = load_cu_seqlens(ctx, "cu_seqlens_q", vl->cu_seqlens_q, p->batch, p->total_q, p->seqlen_q, outs,
                                   out_names, n_outs, h, &longest_q);
    /* paged: the offsets count keys and index no packed tensor (int32 bounds them) */
    if (st == FA_SUCCESS)
        st = load_cu_seqlens(ctx, "cu_seqlens_k", vl->cu_seqlens_k, p->batch, vl->block_table ? INT32_MAX : p->total_k,
                             p->seqlen_k, outs, out_names, n_outs, h + p->batch + 1, &longest_k);
    if (st != FA_SUCCESS) {
        free(h);
        return st;
    }
    p->cu_q = vl->cu_seqlens_q;
    p->cu_k = vl->cu_seqlens_k;
    p->host_cu_q = h;
    p->host_cu_k = h + p->batch + 1;
    p->seqlen_q = longest_q;
    p->seqlen_k = longest_k;
    *cu_host = h;
    return FA_SUCCESS;
}

fa_status fa_validate_forward(fa_context *ctx, const fa_fwd_args *a, fa_problem *p, int32_t **cu_host)
{
    memset(p, 0, sizeof *p);
    *cu_host = NULL;
    if (!a)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "args is NULL");
    fa_status st = read_sizes(ctx, &a->q, &a->k, &a->v, a->varlen, p);
    if (st != FA_SUCCESS)
        return st;
    int nd = p->varlen ? 3 : 4;
    const int paged = a->varlen && a->varlen->block_table, nd_k = paged ? 4 : nd;
    int64_t sq[4], so[4], sk[4], sv[4], sl[3];
    shape_qlike(p, p->d, sq);
    shape_qlike(p, p->d_v, so);
    shape_klike(p, p->d, sk);
    shape_klike(p, p->d_v, sv);
    shape_lse(p, sl);
    if (paged) { /* v has k's pages */
        sk[0] = sv[0] = a->k.shape[0]; sk[1] = sv[1] = a->k.shape[1]; sk[2] = sv[2] = p->heads_kv;
        sk[3] = p->d; sv[3] = p->d_v;
    }
    span s_q, s_k, s_v, s_o, s_l = {0, 0};
    read_out_dtype(&a->o, p);
    if ((st = check_tensor(ctx, "q", &a->q, nd, sq, p->dtype, 0, &s_q)) ||
        (st = check_tensor(ctx, "k", &a->k, nd_k, sk, p->dtype, 0, &s_k)) ||
        (st = check_tensor(ctx, "v", &a->v, nd_k, sv, p->dtype, 0, &s_v)) ||
        (st = check_tensor(ctx, "o", &a->o, nd, so, p->out_dtype, 1, &s_o)))
        return st;
    p->has_lse = a->lse.data != NULL;
    if (p->has_lse && (st = check_tensor(ctx, "lse", &a->lse, nd - 1, sl, FA_DTYPE_F32, 1, &s_l)))
        return st;
    span ins[3] = {s_q, s_k, s_v};
    static const char *const in_names[3] = {"q", "k", "v"};
    for (int i = 0; i < 3; ++i)
        if (spans_overlap(ins[i], s_o) || spans_overlap(ins[i], s_l))
            return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "an output (o or lse) overlaps input %s in memory", in_names[i]);
    if (spans_overlap(s_o, s_l))
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "o and lse overlap in memory");
    /* varlen first: the options' block mask is checked against the longest actual sequences */
    span outs[2] = {s_o, s_l};
    static const char *const out_names[2] = {"o", "lse"};
    if ((st = finish_varlen(ctx, a->varlen, p, outs, out_names, 2, cu_host)) ||
        (paged && (st = fa_paged_load(ctx, a->varlen, &a->k, &a->v, p, outs, out_names, 2,
                                      *cu_host + 2 * (p->batch + 1)))) ||
        (st = check_work_items(ctx, p)) || (st = check_options(ctx, &a->opts, p)) ||
        (st = check_alibi(ctx, &a->opts, p, outs, out_names, 2, 1)) ||
        (st = fa_check_sink(ctx, &a->opts, p, outs, out_names, 2, 1)))
        return st;
    p->q = make_view(&a->q, p->varlen);
    if (!paged) { /* paged: the gathered workspace's views (core/paged_gather.c) */
        p->k = make_view(&a->k, p->varlen);
        p->v = make_view(&a->v, p->varlen);
    }
    p->o = make_view(&a->o, p->varlen);
    if (p->has_lse)
        p->lse = make_lse_view(&a->lse, p->varlen);
    return FA_SUCCESS;
}

fa_status fa_validate_backward(fa_context *ctx, const fa_bwd_args *a, fa_problem *p, int32_t **cu_host)
{
    memset(p, 0, sizeof *p);
    *cu_host = NULL;
    if (!a)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "args is NULL");
    if (a->varlen && a->varlen->block_table) /* as FlashAttention-2's */
        return FA_ERROR(ctx, FA_ERR_UNSUPPORTED,
                        "block_table: the backward over paged keys and values is not offered; gather the pages into "
                        "packed k / v (and dk / dv) and call fa_backward on those");
    fa_status st = read_sizes(ctx, &a->q, &a->k, &a->v, a->varlen, p);
    if (st != FA_SUCCESS)
        return st;
    p->backward = 1;
    int nd = p->varlen ? 3 : 4;
    int64_t sq[4], so[4], sk[4], sv[4], sl[3];
    shape_qlike(p, p->d, sq);
    shape_qlike(p, p->d_v, so);
    shape_klike(p, p->d, sk);
    shape_klike(p, p->d_v, sv);
    shape_lse(p, sl);
    span in[6], out[4] = {{0, 0}, {0, 0}, {0, 0}, {0, 0}};
    read_out_dtype(&a->dq, p);
    if ((st = check_tensor(ctx, "q", &a->q, nd, sq, p->dtype, 0, &in[0])) ||
        (st = check_tensor(ctx, "k", &a->k, nd, sk, p->dtype, 0, &in[1])) ||
        (st = check_tensor(ctx, "v", &a->v, nd, sv, p->dtype, 0, &in[2])) ||
        (st = check_tensor(ctx, "o", &a->o, nd, so, p->dtype, 0, &in[3])) ||
        (st = check_tensor(ctx, "dout", &a->dout, nd, so, p->dtype, 0, &in[4])) ||
        (st = check_tensor(ctx, "lse", &a->lse, nd - 1, sl, FA_DTYPE_F32, 0, &in[5])) ||
        (st = check_tensor(ctx, "dq", &a->dq, nd, sq, p->out_dtype, 1, &out[0])) ||
        (st = check_tensor(ctx, "dk", &a->dk, nd, sk, p->out_dtype, 1, &out[1])) ||
        (st = check_tensor(ctx, "dv", &a->dv, nd, sv, p->out_dtype, 1, &out[2])))
        return st;
    /* dsink: only with a sink; fp32 [heads_q] */
    const int has_dsink = a->dsink.data != NULL;
    if (has_dsink && !a->opts.learnable_sink)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "dsink is given but opts.learnable_sink is NULL (no sink, no gradient)");
    const int64_t sd[1] = {p->heads_q};
    if (has_dsink && (st = check_tensor(ctx, "dsink", &a->dsink, 1, sd, FA_DTYPE_F32, 1, &out[3])))
        return st;
    const int n_out = has_dsink ? 4 : 3;
    static const char *const in_names[6] = {"q", "k", "v", "o", "dout", "lse"};
    static const char *const out_names[4] = {"dq", "dk", "dv", "dsink"};
    for (int i = 0; i < 6; ++i)
        for (int j = 0; j < n_out; ++j)
            if (spans_overlap(in[i], out[j]))
                return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "output %s overlaps input %s in memory", out_names[j],
                                in_names[i]);
    /* two gradients written into the same memory would race and keep only one of them (the views
     * of one packed gradient share no element and pass) */
    const fa_tensor *out_t[4] = {&a->dq, &a->dk, &a->dv, &a->dsink};
    for (int i = 0; i < n_out; ++i)
        for (int j = i + 1; j < n_out; ++j)
            if (tensors_overlap(out_t[i], out[i], out_t[j], out[j]))
                return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "outputs %s and %s overlap in memory", out_names[i],
                                out_names[j]);
    if ((st = finish_varlen(ctx, a->varlen, p, out, out_names, n_out, cu_host)) || (st = check_work_items(ctx, p)) ||
        (st = check_options(ctx, &a->opts, p)) || (st = check_alibi(ctx, &a->opts, p, out, out_names, n_out, 1)) ||
        (st = fa_check_sink(ctx, &a->opts, p, out, out_names, n_out, 1)))
        return st;
    p->dsink = has_dsink ? (float *)a->dsink.data : NULL;
    p->has_lse = 1;
    p->q = make_view(&a->q, p->varlen);
    p->k = make_view(&a->k, p->varlen);
    p->v = make_view(&a->v, p->varlen);
    p->o = make_view(&a->o, p->varlen);
    p->dout = make_view(&a->dout, p->varlen);
    p->lse = make_lse_view(&a->lse, p->varlen);
    p->dq = make_view(&a->dq, p->varlen);
    p->dk = make_view(&a->dk, p->varlen);
    p->dv = make_view(&a->dv, p->varlen);
    return FA_SUCCESS;
}

fa_status fa_check_tensor(fa_context *ctx, const char *name, const fa_tensor *t, int ndim, const int64_t *shape,
                          fa_dtype dtype, int output, fa_span *sp)
{
    return check_tensor(ctx, name, t, ndim, shape, dtype, output, sp);
}

int fa_spans_overlap(fa_span a, fa_span b)
{
    return spans_overlap(a, b);
}

int fa_tensors_overlap(const fa_tensor *x, fa_span a, const fa_tensor *y, fa_span b)
{
    return tensors_overlap(x, a, y, b);
}

fa_status fa_check_options(fa_context *ctx, const fa_options *o, fa_problem *p)
{
    return check_options(ctx, o, p);
}

fa_status fa_check_alibi(fa_context *ctx, const fa_options *o, fa_problem *p, const fa_span *outs,
                         const char *const *out_names, int n_outs, int read_values)
{
    return check_alibi(ctx, o, p, outs, out_names, n_outs, read_values);
}
