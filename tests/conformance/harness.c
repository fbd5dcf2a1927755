/* harness.c: builds a case's inputs, runs the backend under test through the public API and the
 * memory helpers only (so GPU backends plug in unchanged), and checks every output against the
 * float64 reference with the tolerance taken from the naive same-precision baseline's error. */
#include "harness.h"
#include "harness_buffers.h"
#include "half.h"
#include "reference.h"
#include "testrand.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

conf_case conf_case_default(const char *name)
{
    conf_case c;
    memset(&c, 0, sizeof c);
    snprintf(c.name, sizeof c.name, "%s", name);
    c.dtype = FA_DTYPE_F32;
    c.batch = 1;
    c.seqlen_q = c.seqlen_k = 64;
    c.heads_q = c.heads_kv = 1;
    c.d = 64;
    c.window_left = c.window_right = -1;
    c.seed = 1234;
    return c;
}

/* ------------------------------------------------------------------ comparisons */

typedef struct cmp {
    double err;       /* max |x - ref| over elements where both are finite */
    int nan_mismatch; /* x NaN/inf where ref is finite (or the reverse) */
    double ref_max;
} cmp;

static cmp compare(const double *x, const double *ref, int64_t n)
{
    cmp c = {0, 0, 0};
    for (int64_t i = 0; i < n; ++i) {
        if (isfinite(ref[i])) {
            if (!isfinite(x[i])) {
                c.nan_mismatch = 1;
                continue;
            }
            double e = fabs(x[i] - ref[i]);
            if (e > c.err)
                c.err = e;
            if (fabs(ref[i]) > c.ref_max)
                c.ref_max = fabs(ref[i]);
        } else if (!(x[i] == ref[i])) { /* -inf LSE must be -inf exactly; NaN stays NaN */
            if (!(isnan(ref[i]) && isnan(x[i])))
                c.nan_mismatch = 1;
        }
    }
    return c;
}

/* Canonical [rows, heads, width] doubles from a downloaded tensor (host image); width is d for dQ,
 * dK and d_v for O, dV. */
static void canon_from(const tbuf *b, const fa_problem *p, int is_q, int64_t heads, int64_t width, double *out)
{
    fa_view v = {b->host, 0, 0, 0};
    const fa_tensor *t = &b->t;
    if (t->ndim == 4) {
        v.sb = t->stride[0];
        v.ss = t->stride[1];
        v.sh = t->stride[2];
    } else {
        v.ss = t->stride[0];
        v.sh = t->stride[1];
    }
    int64_t rows = is_q ? p->total_q : p->total_k, per = is_q ? p->seqlen_q : p->seqlen_k;
    for (int64_t r = 0; r < rows; ++r) {
        int64_t bb = t->ndim == 4 ? r / per : 0, row = t->ndim == 4 ? r % per : r;
        for (int64_t h = 0; h < heads; ++h)
            for (int64_t c = 0; c < width; ++c)
                out[(r * heads + h) * width + c] = fa_view_get(&v, t->dtype, bb, row, h, c);
    }
}

static void lse_from(const tbuf *b, const fa_problem *p, double *out)
{
    const float *x = (const float *)b->host;
    for (int64_t h = 0; h < p->heads_q; ++h)
        for (int64_t r = 0; r < p->total_q; ++r) {
            int64_t off;
            if (b->t.ndim == 3)
                off = (r / p->seqlen_q) * b->t.stride[0] + h * b->t.stride[1] + (r % p->seqlen_q) * b->t.stride[2];
            else
                off = h * b->t.stride[0] + r;
            out[h * p->total_q + r] = x[off];
        }
}

/* ------------------------------------------------------------------ the fp32-output twin */

/* x rounded to nearest even with `digits` significant bits, exponent floor emin (subnormals keep
 * the step 2^(emin - digits + 1)), infinity above max_finite: fp16 (11, -14, 65504) and bf16
 * (8, -126, 0x1.fep127). Written without the library's conversions (core/half.h), which are what
 * the twin check tests; nearbyint rounds half to even in the default rounding mode. */
static double round_nearest_even(double x, int digits, int emin, double max_finite)
{
    if (!isfinite(x) || x == 0.0)
        return x;
    int e;
    frexp(x, &e);
    int lead = e - 1 < emin ? emin : e - 1;
    double step = ldexp(1.0, lead - (digits - 1));
    double r = nearbyint(x / step) * step;
    return fabs(r) > max_finite ? copysign(INFINITY, x) : r;
}

static double round_to_dtype(fa_dtype dt, double x)
{
    if (dt == FA_DTYPE_F16)
        return round_nearest_even(x, 11, -14, 65504.0);
    return round_nearest_even(x, 8, -126, ldexp(255.0, 120));
}

/* Compares `low` (fp16/bf16) with `twin` (fp32, same shape and strides) element by element.
 * exact: every element must be the twin's value rounded. Otherwise (dQ of a backward whose fp32
 * dQ is summed with atomics in no fixed order, so the twin's fp32 dQ is not the one that was
 * rounded) the element must lie within half a unit in the last place of the twin's value plus
 * 2^-16 max|twin|, which a rounding toward zero (up to a whole unit) exceeds on about half the
 * elements. Returns the first offending offset or -1. */
static int64_t twin_mismatch(const tbuf *low, const tbuf *twin, int exact, double *got, double *want)
{
    size_t n = low->bytes / fa_dtype_size(low->t.dtype);
    double floor_abs = 0.0;
    if (!exact)
        for (size_t e = 0; e < n; ++e)
            if (low->elem_map[e] && isfinite(((const float *)twin->host)[e]))
                floor_abs = fmax(floor_abs, fabs(((const float *)twin->host)[e]));
    floor_abs *= ldexp(1.0, -16);
    int digits = low->t.dtype == FA_DTYPE_F16 ? 11 : 8, emin = low->t.dtype == FA_DTYPE_F16 ? -14 : -126;
    for (size_t e = 0; e < n; ++e) {
        if (!low->elem_map[e])
            continue;
        uint16_t bits;
        memcpy(&bits, low->host + 2 * e, 2);
        double x = low->t.dtype == FA_DTYPE_F16 ? fa_half_to_float(bits) : fa_bfloat_to_float(bits);
        double t = ((const float *)twin->host)[e], w = round_to_dtype(low->t.dtype, t);
        int ok;
        if (isnan(t) || isnan(x))
            ok = isnan(t) && isnan(x);
        else if (exact || !isfinite(w))
            ok = x == w;
        else {
            int ex;
            frexp(t, &ex);
            double half_ulp = ldexp(1.0, (ex - 1 < emin ? emin : ex - 1) - digits);
            ok = fabs(x - t) <= half_ulp + floor_abs;
        }
        if (!ok) {
            *got = x;
            *want = w;
            return (int64_t)e;
        }
    }
    return -1;
}

/* The twin tbuf: the same shape and strides as `like`, in fp32. */
static int twin_alloc(fa_context *ctx, tbuf *twin, const tbuf *like)
{
    memset(twin, 0, sizeof *twin);
    twin->t = like->t;
    twin->t.dtype = FA_DTYPE_F32;
    return tbuf_alloc(ctx, twin, 1) && tbuf_upload(ctx, twin) == FA_SUCCESS;
}

/* ------------------------------------------------------------------ one case */

typedef struct case_bufs {
    tbuf q, k, v, o, lse, dout, dq, dk, dv, dsink;
    tbuf o32, lse32, dq32, dk32, dv32; /* the fp32-output twin's */
    int32_t *cu_host;
    void *cu_dev;
    fa_block_mask mask;
    fa_varlen varlen;
    float *slopes_host; /* ALiBi slopes: the host image and the context's copy */
    void *slopes_dev;
    float *sink_host;   /* the learnable sink: the host image and the context's copy */
    void *sink_dev;
} case_bufs;

static void bufs_free(fa_context *ctx, case_bufs *cb)
{
    tbuf *all[] = {&cb->q,   &cb->k,     &cb->v,    &cb->o,    &cb->lse,  &cb->dout, &cb->dq, &cb->dk,
                   &cb->dv,  &cb->dsink, &cb->o32,  &cb->lse32, &cb->dq32, &cb->dk32, &cb->dv32};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i)
        tbuf_free(ctx, all[i]);
    free(cb->cu_host);
    if (cb->cu_dev)
        fa_free(ctx, cb->cu_dev);
    fa_block_mask_destroy(&cb->mask);
    free(cb->slopes_host);
    if (cb->slopes_dev)
        fa_free(ctx, cb->slopes_dev);
    free(cb->sink_host);
    if (cb->sink_dev)
        fa_free(ctx, cb->sink_dev);
}

/* The learnable sink of a case (enum conf_sink), one value per query head, different across heads
 * so that a kernel reading another head's sink gives another LSE. Returns 0 when out of memory. */
static int make_sink(const conf_case *c, case_bufs *cb, uint64_t seed)
{
    if (c->sink == SINK_NONE)
        return 1;
    cb->sink_host = malloc(sizeof(float) * (size_t)c->heads_q);
    if (!cb->sink_host)
        return 0;
    uint64_t s = seed ^ 0x5151ull;
    for (int64_t h = 0; h < c->heads_q; ++h) {
        const double u = (double)(rng_next(&s) >> 11) * (1.0 / 9007199254740992.0); /* [0, 1) */
        cb->sink_host[h] = (float)(c->sink == SINK_LARGE      ? 8.0 + 0.5 * u
                                   : c->sink == SINK_NEGATIVE ? -20.0 - 4.0 * u
                                                              : -2.0 + 4.0 * u);
    }
    return 1;
}

/* ALiBi slopes of a case: head h of H has the geometric slope 2^(-8 (h + 1) / H) of Press et al.,
 * and with per-sequence rows (alibi 2) sequence b's are (1 + b / 2) times those, so a kernel that
 * reads the wrong row or head gives other scores. Rows are heads_q + 3 apart (the stride is not
 * the row length). Returns the element count, 0 for no ALiBi, -1 when out of memory. */
static int64_t make_slopes(const conf_case *c, case_bufs *cb, int64_t *stride)
{
    *stride = 0;
    if (!c->alibi)
        return 0;
    int64_t rows = c->alibi == 2 ? c->batch : 1, n;
    *stride = c->alibi == 2 ? c->heads_q + 3 : 0;
    n = c->alibi == 2 ? rows * *stride : c->heads_q;
    cb->slopes_host = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    if (!cb->slopes_host)
        return -1;
    for (int64_t x = 0; x < n; ++x)
        cb->slopes_host[x] = -1.0f; /* the padding: a kernel reading it gives a wrong bias */
    for (int64_t b = 0; b < rows; ++b)
        for (int64_t h = 0; h < c->heads_q; ++h)
            cb->slopes_host[b * *stride + h] =
                (float)(exp2(-8.0 * (double)(h + 1) / (double)c->heads_q) * (1.0 + 0.5 * (double)b));
    return n;
}

#define FAIL(...)                                                                                                  \
    do {                                                                                                           \
        snprintf(r->failure, sizeof r->failure, __VA_ARGS__);                                                      \
        goto done;                                                                                                 \
    } while (0)

static void set_tensor_shape(tbuf *b, fa_dtype dt, int ndim, int64_t a0, int64_t a1, int64_t a2, int64_t a3)
{
    memset(&b->t, 0, sizeof b->t);
    b->t.dtype = dt;
    b->t.ndim = ndim;
    int64_t s[4] = {a0, a1, a2, a3};
    for (int i = 0; i < ndim; ++i)
        b->t.shape[i] = s[i];
}

static double bound_of(double factor, double naive_err, double ref_max)
{
    return factor * naive_err + 1e-5 * (ref_max > 1.0 ? ref_max : 1.0);
}

int conf_run(fa_context *ctx, const conf_case *c, conf_result *r)
{
    memset(r, 0, sizeof *r);
    case_bufs cb;
    memset(&cb, 0, sizeof cb);
    fa_context *host = NULL;
    double *ref_o = NULL, *naive_o = NULL, *ker_o = NULL, *ref_l = NULL, *naive_l = NULL, *ker_l = NULL;
    double *g[3][4] = {{NULL}}; /* [ref, naive, kernel][dq, dk, dv, dsink] */
    int32_t *cu_check = NULL;
    fa_status st;
    uint64_t rng = c->seed * 0x9E3779B97F4A7C15ull + 17;

    if (fa_context_create(&host, "cpu", 0) != FA_SUCCESS)
        FAIL("cannot create the host reference context");

    int64_t batch = c->batch, total_q, total_k, sq = c->seqlen_q, sk = c->seqlen_k;
    const int64_t d_v = c->d_v > 0 ? c->d_v : c->d;
    int nd = c->varlen ? 3 : 4;
    if (c->varlen) {
        total_q = total_k = 0;
        sq = sk = 0;
        cb.cu_host = malloc(sizeof(int32_t) * 2 * (size_t)(batch + 1));
        if (!cb.cu_host)
            FAIL("out of host memory");
        cb.cu_host[0] = cb.cu_host[batch + 1] = 0;
        for (int64_t b = 0; b < batch; ++b) {
            total_q += c->len_q[b];
            total_k += c->len_k[b];
            cb.cu_host[b + 1] = (int32_t)total_q;
            cb.cu_host[batch + 2 + b] = (int32_t)total_k;
            sq = c->len_q[b] > sq ? c->len_q[b] : sq;
            sk = c->len_k[b] > sk ? c->len_k[b] : sk;
        }
        set_tensor_shape(&cb.q, c->dtype, 3, total_q, c->heads_q, c->d, 0);
        set_tensor_shape(&cb.k, c->dtype, 3, total_k, c->heads_kv, c->d, 0);
        set_tensor_shape(&cb.o, c->dtype, 3, total_q, c->heads_q, d_v, 0);
        set_tensor_shape(&cb.v, c->dtype, 3, total_k, c->heads_kv, d_v, 0);
        set_tensor_shape(&cb.lse, FA_DTYPE_F32, 2, c->heads_q, total_q, 0, 0);
    } else {
        set_tensor_shape(&cb.q, c->dtype, 4, batch, sq, c->heads_q, c->d);
        set_tensor_shape(&cb.k, c->dtype, 4, batch, sk, c->heads_kv, c->d);
        set_tensor_shape(&cb.o, c->dtype, 4, batch, sq, c->heads_q, d_v);
        set_tensor_shape(&cb.v, c->dtype, 4, batch, sk, c->heads_kv, d_v);
        set_tensor_shape(&cb.lse, FA_DTYPE_F32, 3, batch, c->heads_q, sq, 0);
    }
    cb.dout.t = cb.o.t;
    cb.dq.t = cb.q.t;
    cb.dk.t = cb.k.t;
    cb.dv.t = cb.v.t;
    tbuf *qlike[] = {&cb.q, &cb.o, &cb.dout, &cb.dq}, *klike[] = {&cb.k, &cb.v, &cb.dk, &cb.dv};
    const int q_output[] = {0, 1, 0, 1}, k_output[] = {0, 0, 1, 1};
    for (int i = 0; i < 4; ++i) {
        const layout_kind out = c->layout == LAYOUT_PADDED_OUTPUTS ? LAYOUT_PADDED : c->layout,
                          in = c->layout == LAYOUT_PADDED_OUTPUTS ? LAYOUT_CONTIGUOUS : c->layout;
        make_strides(&qlike[i]->t, q_output[i] ? out : in);
        make_strides(&klike[i]->t, k_output[i] ? out : in);
    }
    make_lse_strides(&cb.lse.t, c->layout);
    (void)nd;

    if (!tbuf_alloc(ctx, &cb.q, 0) || !tbuf_alloc(ctx, &cb.k, 0) || !tbuf_alloc(ctx, &cb.v, 0) ||
        !tbuf_alloc(ctx, &cb.o, 1) || !tbuf_alloc(ctx, &cb.lse, 1))
        FAIL("cannot allocate the case's buffers");
    fill_normal(&cb.q, &rng);
    fill_normal(&cb.k, &rng);
    fill_normal(&cb.v, &rng);
    if (tbuf_upload(ctx, &cb.q) || tbuf_upload(ctx, &cb.k) || tbuf_upload(ctx, &cb.v) || tbuf_upload(ctx, &cb.o) ||
        tbuf_upload(ctx, &cb.lse))
        FAIL("upload failed: %s", fa_context_last_error(ctx));

    fa_options opts = fa_options_default();
    opts.softmax_scale = c->scale;
    opts.causal = c->causal;
    opts.window_left = c->window_left;
    opts.window_right = c->window_right;
    opts.dropout_p = c->dropout_p;
    opts.dropout_seed = c->seed;
    opts.dropout_offset = c->offset;
    opts.deterministic = c->deterministic;
    opts.softcap = c->softcap;
    int64_t slope_stride, slope_count = make_slopes(c, &cb, &slope_stride);
    if (slope_count < 0)
        FAIL("out of host memory");
    if (slope_count > 0) {
        if (fa_malloc(ctx, sizeof(float) * (size_t)slope_count, &cb.slopes_dev) ||
            fa_memcpy(ctx, cb.slopes_dev, cb.slopes_host, sizeof(float) * (size_t)slope_count,
                      FA_COPY_HOST_TO_DEVICE))
            FAIL("cannot upload the ALiBi slopes");
        opts.alibi_slopes = cb.slopes_dev;
        opts.alibi_batch_stride = slope_stride;
    }
    if (!make_sink(c, &cb, c->seed))
        FAIL("out of host memory");
    if (cb.sink_host) {
        if (fa_malloc(ctx, sizeof(float) * (size_t)c->heads_q, &cb.sink_dev) ||
            fa_memcpy(ctx, cb.sink_dev, cb.sink_host, sizeof(float) * (size_t)c->heads_q, FA_COPY_HOST_TO_DEVICE))
            FAIL("cannot upload the learnable sink");
        opts.learnable_sink = cb.sink_dev;
    }
    if (c->block_q > 0) {
        if (fa_block_mask_create(&cb.mask, c->block, c->block_per_head ? c->heads_q : 1, sq, sk, c->block_q,
                                 c->block_k, c->block_param, c->block_density, c->seed) != FA_SUCCESS)
            FAIL("cannot create the block mask");
        opts.block_mask = &cb.mask;
    }
    if (c->varlen) {
        if (fa_malloc(ctx, sizeof(int32_t) * 2 * (size_t)(batch + 1), &cb.cu_dev) ||
            fa_memcpy(ctx, cb.cu_dev, cb.cu_host, sizeof(int32_t) * 2 * (size_t)(batch + 1), FA_COPY_HOST_TO_DEVICE))
            FAIL("cannot upload cu_seqlens");
        cb.varlen.batch = batch;
        cb.varlen.cu_seqlens_q = cb.cu_dev;
        cb.varlen.cu_seqlens_k = (int32_t *)cb.cu_dev + batch + 1;
        cb.varlen.max_seqlen_q = sq;
        cb.varlen.max_seqlen_k = sk;
    }

    fa_fwd_args fa = {.q = cb.q.t, .k = cb.k.t, .v = cb.v.t, .o = cb.o.t, .lse = cb.lse.t,
                      .varlen = c->varlen ? &cb.varlen : NULL, .opts = opts};
    char variant[64];
    st = fa_query_support(ctx, &fa, c->backward, variant, sizeof variant);
    if (st == FA_ERR_UNSUPPORTED) {
        r->skipped = 1;
        snprintf(r->skip_reason, sizeof r->skip_reason, "%s", fa_context_last_error(ctx));
        goto done;
    }
    if (st != FA_SUCCESS)
        FAIL("fa_query_support: %s: %s", fa_status_string(st), fa_context_last_error(ctx));
    /* FA_CONFORMANCE_VARIANT=SUBSTRING: only the cases whose kernel variant (the backward's for a
     * backward case) contains it run; the others are reported skipped (a test of one kernel
     * family, whose other cases another test runs) */
    const char *only = getenv("FA_CONFORMANCE_VARIANT");
    if (only && *only && !strstr(variant, only)) {
        r->skipped = 1;
        snprintf(r->skip_reason, sizeof r->skip_reason, "variant %s, not %s (FA_CONFORMANCE_VARIANT)", variant,
                 only);
        goto done;
    }
    st = fa_forward(ctx, &fa);
    if (st != FA_SUCCESS)
        FAIL("fa_forward: %s: %s", fa_status_string(st), fa_context_last_error(ctx));
    if (fa_synchronize(ctx) || tbuf_download(ctx, &cb.o) || tbuf_download(ctx, &cb.lse))
        FAIL("download failed: %s", fa_context_last_error(ctx));
    if (!check_output_buffer("o", &cb.o, r->failure, sizeof r->failure) ||
        !check_output_buffer("lse", &cb.lse, r->failure, sizeof r->failure))
        goto done;

    /* the reference sees the same host images through a host context */
    fa_varlen host_varlen = cb.varlen;
    if (c->varlen) {
        host_varlen.cu_seqlens_q = cb.cu_host;
        host_varlen.cu_seqlens_k = cb.cu_host + batch + 1;
    }
    fa_fwd_args ha = fa;
    ha.q = tbuf_host_tensor(&cb.q);
    ha.k = tbuf_host_tensor(&cb.k);
    ha.v = tbuf_host_tensor(&cb.v);
    ha.o = tbuf_host_tensor(&cb.o);
    ha.lse = tbuf_host_tensor(&cb.lse);
    ha.varlen = c->varlen ? &host_varlen : NULL;
    if (cb.slopes_host)
        ha.opts.alibi_slopes = cb.slopes_host;
    if (cb.sink_host) /* the reference reads the sink on the host, as it reads the slopes */
        ha.opts.learnable_sink = cb.sink_host;
    fa_problem p;
    if (fa_validate_forward(host, &ha, &p, &cu_check) != FA_SUCCESS)
        FAIL("reference validation: %s", fa_context_last_error(host));
    int64_t no = p.total_q * p.heads_q * p.d_v, nl = p.total_q * p.heads_q, nk = p.total_k * p.heads_kv * p.d;
    int64_t ndq = p.total_q * p.heads_q * p.d, nv = p.total_k * p.heads_kv * p.d_v;
    ref_o = malloc(sizeof(double) * (size_t)(no + 1));
    naive_o = malloc(sizeof(double) * (size_t)(no + 1));
    ker_o = malloc(sizeof(double) * (size_t)(no + 1));
    ref_l = malloc(sizeof(double) * (size_t)(nl + 1));
    naive_l = malloc(sizeof(double) * (size_t)(nl + 1));
    ker_l = malloc(sizeof(double) * (size_t)(nl + 1));
    if (!ref_o || !naive_o || !ker_o || !ref_l || !naive_l || !ker_l)
        FAIL("out of host memory");
    if (fa_ref_forward(&p, ref_o, ref_l) || fa_naive_forward(&p, naive_o, naive_l))
        FAIL("reference out of memory");
    canon_from(&cb.o, &p, 1, p.heads_q, p.d_v, ker_o);
    lse_from(&cb.lse, &p, ker_l);

    cmp co = compare(ker_o, ref_o, no), cn = compare(naive_o, ref_o, no);
    r->err_o = co.err;
    r->naive_o = cn.err;
    r->bound_o = bound_of(2.0, cn.err, co.ref_max);
    if (co.nan_mismatch)
        FAIL("O has NaN/inf where the reference is finite");
    if (co.err > r->bound_o)
        FAIL("O error %.3g > bound %.3g (naive %s error %.3g)", co.err, r->bound_o, fa_dtype_name(c->dtype), cn.err);
    cmp cl = compare(ker_l, ref_l, nl), cln = compare(naive_l, ref_l, nl);
    r->err_lse = cl.err;
    r->bound_lse = bound_of(2.0, cln.err, cl.ref_max);
    if (cl.nan_mismatch)
        FAIL("LSE is not -inf exactly where the reference row is fully masked (or NaN where it is finite)");
    if (cl.err > r->bound_lse)
        FAIL("LSE error %.3g > bound %.3g", cl.err, r->bound_lse);

    if (c->backward) {
        /* dsink: fp32 [heads_q], asked for whenever the case has a sink */
        const int with_dsink = cb.sink_host != NULL;
        if (with_dsink) {
            set_tensor_shape(&cb.dsink, FA_DTYPE_F32, 1, c->heads_q, 0, 0, 0);
            cb.dsink.t.stride[0] = 1;
        }
        if (!tbuf_alloc(ctx, &cb.dout, 0) || !tbuf_alloc(ctx, &cb.dq, 1) || !tbuf_alloc(ctx, &cb.dk, 1) ||
            !tbuf_alloc(ctx, &cb.dv, 1) || (with_dsink && !tbuf_alloc(ctx, &cb.dsink, 1)))
            FAIL("cannot allocate the gradient buffers");
        fill_normal(&cb.dout, &rng);
        if (tbuf_upload(ctx, &cb.dout) || tbuf_upload(ctx, &cb.dq) || tbuf_upload(ctx, &cb.dk) ||
            tbuf_upload(ctx, &cb.dv) || (with_dsink && tbuf_upload(ctx, &cb.dsink)))
            FAIL("upload failed: %s", fa_context_last_error(ctx));
        fa_bwd_args ba = {.q = cb.q.t, .k = cb.k.t, .v = cb.v.t, .o = cb.o.t, .lse = cb.lse.t, .dout = cb.dout.t,
                          .dq = cb.dq.t, .dk = cb.dk.t, .dv = cb.dv.t, .varlen = fa.varlen, .opts = opts};
        if (with_dsink)
            ba.dsink = cb.dsink.t;
        st = fa_backward(ctx, &ba);
        if (st != FA_SUCCESS)
            FAIL("fa_backward: %s: %s", fa_status_string(st), fa_context_last_error(ctx));
        if (fa_synchronize(ctx) || tbuf_download(ctx, &cb.dq) || tbuf_download(ctx, &cb.dk) ||
            tbuf_download(ctx, &cb.dv) || (with_dsink && tbuf_download(ctx, &cb.dsink)))
            FAIL("download failed: %s", fa_context_last_error(ctx));
        if (!check_output_buffer("dq", &cb.dq, r->failure, sizeof r->failure) ||
            !check_output_buffer("dk", &cb.dk, r->failure, sizeof r->failure) ||
            !check_output_buffer("dv", &cb.dv, r->failure, sizeof r->failure) ||
            (with_dsink && !check_output_buffer("dsink", &cb.dsink, r->failure, sizeof r->failure)))
            goto done;
        if (c->deterministic || with_dsink) {
            /* a second run, into outputs poisoned with a NaN pattern of its own, must give the
             * same bits everywhere (elements, gaps, guards): a second run that writes nothing,
             * or only part of an output, leaves the second pattern behind. dsink is summed in a
             * fixed order whether or not the deterministic flag is set: without the flag it is
             * the only output held to it. */
            tbuf *grads[4];
            const char *gnames[4];
            int ngrads = 0;
            if (c->deterministic) {
                grads[0] = &cb.dq, grads[1] = &cb.dk, grads[2] = &cb.dv;
                gnames[0] = "dq", gnames[1] = "dk", gnames[2] = "dv";
                ngrads = 3;
            }
            if (with_dsink) {
                grads[ngrads] = &cb.dsink;
                gnames[ngrads++] = "dsink";
            }
            uint8_t *first[4] = {NULL, NULL, NULL, NULL};
            int alloc_ok = 1;
            for (int i = 0; i < ngrads; ++i) {
                first[i] = malloc(grads[i]->bytes + GUARD_BYTES);
                alloc_ok &= first[i] != NULL;
                if (first[i])
                    memcpy(first[i], grads[i]->host, grads[i]->bytes + GUARD_BYTES);
                poison_elements(grads[i], SECOND_RUN_POISON);
            }
            st = alloc_ok ? FA_SUCCESS : FA_ERR_OUT_OF_MEMORY;
            for (int i = 0; i < ngrads && st == FA_SUCCESS; ++i)
                st = tbuf_upload(ctx, grads[i]);
            if (st == FA_SUCCESS)
                st = fa_backward(ctx, &ba);
            if (st == FA_SUCCESS)
                st = fa_synchronize(ctx);
            for (int i = 0; i < ngrads && st == FA_SUCCESS; ++i)
                st = tbuf_download(ctx, grads[i]);
            int differs = -1;
            int64_t unwritten = -1;
            for (int i = 0; i < ngrads && st == FA_SUCCESS && differs < 0; ++i) {
                unwritten = first_poisoned_element(grads[i], SECOND_RUN_POISON);
                if (unwritten >= 0 || memcmp(first[i], grads[i]->host, grads[i]->bytes + GUARD_BYTES) != 0)
                    differs = i;
            }
            for (int i = 0; i < ngrads; ++i)
                free(first[i]);
            if (st != FA_SUCCESS)
                FAIL("second fa_backward (determinism check): %s: %s", fa_status_string(st),
                     fa_context_last_error(ctx));
            const char *what = c->deterministic ? "deterministic backward" : "backward (dsink: a fixed order)";
            if (differs >= 0 && unwritten >= 0)
                FAIL("%s: the second run never wrote %s at offset %lld", what, gnames[differs], (long long)unwritten);
            if (differs >= 0)
                FAIL("%s: the second run gave different bits in %s", what, gnames[differs]);
        }
        fa_bwd_args hb = ba;
        hb.q = ha.q;
        hb.k = ha.k;
        hb.v = ha.v;
        hb.o = ha.o;
        hb.lse = ha.lse;
        hb.dout = tbuf_host_tensor(&cb.dout);
        hb.dq = tbuf_host_tensor(&cb.dq);
        hb.dk = tbuf_host_tensor(&cb.dk);
        hb.dv = tbuf_host_tensor(&cb.dv);
        if (with_dsink)
            hb.dsink = tbuf_host_tensor(&cb.dsink);
        hb.varlen = ha.varlen;
        hb.opts.alibi_slopes = ha.opts.alibi_slopes;
        hb.opts.learnable_sink = ha.opts.learnable_sink;
        fa_problem pb;
        free(cu_check);
        cu_check = NULL;
        if (fa_validate_backward(host, &hb, &pb, &cu_check) != FA_SUCCESS)
            FAIL("reference validation (backward): %s", fa_context_last_error(host));
        int64_t sizes[4] = {ndq, nk, nv, pb.heads_q};
        for (int w = 0; w < 3; ++w)
            for (int i = 0; i < 4; ++i) {
                g[w][i] = malloc(sizeof(double) * (size_t)(sizes[i] + 1));
                if (!g[w][i])
                    FAIL("out of host memory");
            }
        if (fa_ref_backward(&pb, g[0][0], g[0][1], g[0][2], g[0][3]) ||
            fa_naive_backward(&pb, g[1][0], g[1][1], g[1][2], g[1][3]))
            FAIL("reference out of memory");
        canon_from(&cb.dq, &pb, 1, pb.heads_q, pb.d, g[2][0]);
        canon_from(&cb.dk, &pb, 0, pb.heads_kv, pb.d, g[2][1]);
        canon_from(&cb.dv, &pb, 0, pb.heads_kv, pb.d_v, g[2][2]);
        static const char *const names[3] = {"dQ", "dK", "dV"};
        for (int i = 0; i < 3; ++i) {
            cmp ck = compare(g[2][i], g[0][i], sizes[i]), cnv = compare(g[1][i], g[0][i], sizes[i]);
            r->err_grad[i] = ck.err;
            r->naive_grad[i] = cnv.err;
            r->bound_grad[i] = bound_of(3.0, cnv.err, ck.ref_max);
            if (ck.nan_mismatch)
                FAIL("%s has NaN/inf where the reference is finite", names[i]);
            if (ck.err > r->bound_grad[i])
                FAIL("%s error %.3g > bound %.3g (naive error %.3g)", names[i], ck.err, r->bound_grad[i], cnv.err);
        }
        if (with_dsink) {
            for (int64_t h = 0; h < pb.heads_q; ++h)
                g[2][3][h] = ((const float *)cb.dsink.host)[h];
            cmp ck = compare(g[2][3], g[0][3], pb.heads_q), cnv = compare(g[1][3], g[0][3], pb.heads_q);
            r->err_dsink = ck.err;
            r->naive_dsink = cnv.err;
            r->bound_dsink = bound_of(3.0, cnv.err, ck.ref_max);
            if (ck.nan_mismatch)
                FAIL("dsink has NaN/inf where the reference is finite");
            if (ck.err > r->bound_dsink)
                FAIL("dsink error %.3g > bound %.3g (naive error %.3g)", ck.err, r->bound_dsink, cnv.err);
        }
    }
    if (c->dtype == FA_DTYPE_F16 || c->dtype == FA_DTYPE_BF16) {
        /* the twin: the same call with fp32 outputs (the backward reads the case's own O and LSE) */
        if (!twin_alloc(ctx, &cb.o32, &cb.o) || !twin_alloc(ctx, &cb.lse32, &cb.lse))
            FAIL("cannot allocate the fp32-output twin's buffers");
        fa_fwd_args ft = fa;
        ft.o = cb.o32.t;
        ft.lse = cb.lse32.t;
        st = fa_query_support(ctx, &ft, c->backward, variant, sizeof variant);
        if (st == FA_ERR_UNSUPPORTED) {
            snprintf(r->f32_twin_skip, sizeof r->f32_twin_skip, "%s", fa_context_last_error(ctx));
            goto done;
        }
        if (st != FA_SUCCESS)
            FAIL("fa_query_support (fp32-output twin): %s: %s", fa_status_string(st), fa_context_last_error(ctx));
        st = fa_forward(ctx, &ft);
        if (st != FA_SUCCESS || fa_synchronize(ctx) || tbuf_download(ctx, &cb.o32) || tbuf_download(ctx, &cb.lse32))
            FAIL("fp32-output twin forward: %s: %s", fa_status_string(st), fa_context_last_error(ctx));
        if (!check_output_buffer("o (fp32 twin)", &cb.o32, r->failure, sizeof r->failure) ||
            !check_output_buffer("lse (fp32 twin)", &cb.lse32, r->failure, sizeof r->failure))
            goto done;
        double got, want;
        int64_t at = twin_mismatch(&cb.o, &cb.o32, 1, &got, &want);
        if (at >= 0)
            FAIL("O at offset %lld is %.9g, not %.9g (the fp32-output twin's %.9g rounded to nearest even)",
                 (long long)at, got, want, (double)((const float *)cb.o32.host)[at]);
        if (memcmp(cb.lse.host, cb.lse32.host, cb.lse.bytes) != 0)
            FAIL("LSE differs between the call and its fp32-output twin");
        if (c->backward) {
            if (!twin_alloc(ctx, &cb.dq32, &cb.dq) || !twin_alloc(ctx, &cb.dk32, &cb.dk) ||
                !twin_alloc(ctx, &cb.dv32, &cb.dv))
                FAIL("cannot allocate the fp32-output twin's gradient buffers");
            fa_bwd_args bt = {.q = cb.q.t, .k = cb.k.t, .v = cb.v.t, .o = cb.o.t, .lse = cb.lse.t, .dout = cb.dout.t,
                              .dq = cb.dq32.t, .dk = cb.dk32.t, .dv = cb.dv32.t, .varlen = fa.varlen, .opts = opts};
            st = fa_backward(ctx, &bt);
            if (st != FA_SUCCESS || fa_synchronize(ctx) || tbuf_download(ctx, &cb.dq32) ||
                tbuf_download(ctx, &cb.dk32) || tbuf_download(ctx, &cb.dv32))
                FAIL("fp32-output twin backward: %s: %s", fa_status_string(st), fa_context_last_error(ctx));
            tbuf *low[3] = {&cb.dq, &cb.dk, &cb.dv}, *hi[3] = {&cb.dq32, &cb.dk32, &cb.dv32};
            static const char *const gn[3] = {"dQ", "dK", "dV"};
            /* dK and dV are written once per element on every backend; dQ too except where the CUDA
             * backend's non-deterministic backward adds it up with atomics */
            int dq_exact = c->deterministic || strcmp(fa_context_backend_name(ctx), "cuda") != 0;
            for (int i = 0; i < 3; ++i) {
                if (!check_output_buffer(gn[i], hi[i], r->failure, sizeof r->failure))
                    goto done;
                at = twin_mismatch(low[i], hi[i], i > 0 || dq_exact, &got, &want);
                if (at >= 0)
                    FAIL("%s at offset %lld is %.9g, not %.9g (the fp32-output twin's %.9g rounded to nearest even%s)",
                         gn[i], (long long)at, got, want, (double)((const float *)hi[i]->host)[at],
                         i > 0 || dq_exact ? "" : ", within half a unit and 2^-16 max|dQ|");
            }
        }
        r->f32_twin = 1;
    }
done:
    free(ref_o);
    free(naive_o);
    free(ker_o);
    free(ref_l);
    free(naive_l);
    free(ker_l);
    for (int w = 0; w < 3; ++w)
        for (int i = 0; i < 4; ++i)
            free(g[w][i]);
    free(cu_check);
    bufs_free(ctx, &cb);
    fa_context_destroy(host);
    return r->failure[0] ? 1 : 0;
}
