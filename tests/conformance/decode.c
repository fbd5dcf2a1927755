/* decode.c: fa_forward_kvcache on one backend (public API only) against a float64 reference
 * written here from the header's definition: contiguous and paged caches (pages in shuffled
 * order), cache lengths 0, 1, odd and full, appended tokens 0, 1 and 7, rotary in both layouts and
 * partial, GQA and MQA, causal and windows, a batch index, one split and many, softcap. Checks:
 *   - O and LSE: max|kernel - ref64| <= 2 max|naive fp32 - ref64| + 1e-5 max(1, max|ref|), the
 *     conformance rule (naive: the same attention in fp32, scores and sums unfused);
 *   - the caches: appended rows equal k_new / v_new (rotated keys within one unit in the last place
 *     of the float64 rotation rounded to the dtype), every other byte unchanged;
 *   - bad arguments: the status, and o and the caches untouched.
 * Usage: decode --backend NAME [--filter SUBSTRING]. Exits 77 (SKIP, with the reason) when the
 * backend is not compiled in or has no device. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashattn.h"
#include "testrand.h"

typedef struct dcase {
    const char *name;
    fa_dtype dtype;
    int64_t batch, sn, hq, hkv, d;
    int64_t page;        /* 0: contiguous */
    int64_t capacity;    /* tokens per sequence: seqlen_cache, or pages per sequence x page */
    int64_t lens[4];     /* cache_seqlens; -1: the full capacity minus knew */
    int64_t knew;        /* appended tokens */
    int64_t rotary_dim;  /* 0: none */
    int interleaved, causal;
    int64_t left, right;
    int batch_idx, splits;
    float softcap;
    int no_seqlens;      /* cache_seqlens NULL (contiguous, every sequence full) */
    int64_t pad;         /* NaN channels after each cache head row (its stride d + pad): read by no kernel */
} dcase;

#define B16 FA_DTYPE_BF16
#define F16 FA_DTYPE_F16
#define F32 FA_DTYPE_F32
static const dcase cases[] = {
    {"contig-decode-bf16", B16, 3, 1, 8, 2, 64, 0, 300, {0, 1, 257}, 1, 0, 0, 0, -1, -1, 0, 0, 0, 0, 0},
    {"contig-full-nolens-f16", F16, 2, 1, 4, 4, 40, 0, 129, {0}, 0, 0, 0, 0, -1, -1, 0, 0, 0, 1, 0},
    {"contig-full-lens-bf16", B16, 2, 3, 4, 1, 64, 0, 200, {-1, -1}, 0, 0, 0, 1, -1, -1, 0, 1, 0, 0, 0},
    {"contig-batchidx-append7-f16", F16, 3, 7, 6, 2, 64, 0, 90, {10, 0, 83}, 7, 0, 0, 1, -1, -1, 1, 3, 0, 0, 0},
    {"contig-rotary-half-causal-bf16", B16, 2, 5, 8, 2, 128, 0, 160, {31, 100}, 5, 128, 0, 1, -1, -1, 0, 0, 0, 0, 0},
    {"contig-rotary-partial-noncausal-f32", F32, 2, 3, 4, 2, 64, 0, 100, {17, 40}, 3, 32, 1, 0, -1, -1, 0, 4, 0, 0, 0},
    {"paged16-shuffled-decode-bf16", B16, 4, 1, 8, 1, 64, 16, 160, {0, 1, 33, 143}, 1, 0, 0, 0, -1, -1, 0, 0, 0, 0, 0},
    {"paged64-append7-rotary-inter-f16", F16, 3, 7, 4, 2, 128, 64, 256, {63, 1, 200}, 7, 64, 1, 1, -1, -1, 0, 5, 0, 0, 0},
    {"paged256-window-mqa-bf16", B16, 2, 2, 6, 1, 64, 256, 512, {300, 511}, 1, 0, 0, 0, 40, 3, 0, 2, 0, 0, 0},
    {"paged16-chunked-causal-softcap-bf16", B16, 2, 33, 4, 2, 64, 16, 128, {50, 0}, 33, 16, 0, 1, -1, -1, 0, 0,
     30.0f, 0, 0},
    {"paged64-full-nosplit-f32", F32, 2, 1, 2, 2, 40, 64, 128, {-1, 64}, 0, 0, 0, 0, -1, -1, 0, 1, 0, 0, 0},
    {"contig-manysplits-long-bf16", B16, 1, 1, 32, 8, 128, 0, 2100, {2099}, 1, 128, 0, 0, -1, -1, 0, 16, 0, 0, 0},
    /* speculative decoding: two new tokens per sequence, causal and a window, so some rows see only
     * part of a key block */
    {"contig-spec2-causal-window-f16", F16, 2, 2, 8, 2, 64, 0, 300, {70, 200}, 2, 0, 0, 1, 40, -1, 0, 3, 0, 0, 0},
    {"paged32-decode-gqa4-rotary-f16", F16, 3, 1, 16, 4, 128, 32, 256, {255, 0, 97}, 1, 64, 1, 0, -1, -1, 0, 0, 0,
     0, 0},
    {"contig-decode-softcap-d48-f32", F32, 2, 1, 6, 2, 48, 0, 100, {98, 40}, 1, 0, 0, 0, -1, -1, 0, 0, 20.0f, 0, 0},
    {"contig-decode-d36-bf16", B16, 2, 1, 8, 2, 36, 0, 90, {50, 88}, 1, 0, 0, 0, -1, -1, 0, 2, 0, 0, 0},
    /* more splits asked for than there are keys: each backend uses what it can */
    {"contig-splits-beyond-keys-f32", F32, 2, 1, 4, 2, 64, 0, 80, {3, 70}, 1, 0, 0, 0, -1, -1, 0, 1 << 20, 0, 0, 0},
    /* head rows shorter than a kernel's head-dim bucket, NaN in the cache after each (16-byte
     * aligned strides): reading past d shows */
    {"contig-nanpad-d40-bf16", B16, 2, 1, 8, 2, 40, 0, 300, {299, 100}, 1, 0, 0, 0, -1, -1, 0, 0, 0, 0, 8},
    {"paged16-nanpad-d48-append-f16", F16, 2, 2, 4, 1, 48, 16, 64, {30, 0}, 2, 48, 0, 1, -1, -1, 0, 2, 0, 0, 16},
    /* a window whose first key is not a multiple of 16 in pages of 16: a kernel that reads 16 keys
     * from one page address must start them on a page's first key */
    {"paged16-window-unaligned-bf16", B16, 2, 1, 8, 2, 128, 16, 160, {150, 77}, 1, 0, 0, 0, 37, -1, 0, 0, 0, 0, 0},
    /* pages of 48 tokens, not a power of two: a row inside a page is t % 48, not a bit mask */
    {"paged48-append3-causal-gqa-bf16", B16, 3, 3, 8, 2, 64, 48, 192, {47, 100, 0}, 3, 0, 0, 1, -1, -1, 0, 0, 0, 0,
     0},
};

/* ------------------------------------------------------------------ dtype helpers */

static size_t esz(fa_dtype dt)
{
    return dt == F32 ? 4 : 2;
}

static double get(fa_dtype dt, const void *base, int64_t i)
{
    if (dt == F32)
        return ((const float *)base)[i];
    uint16_t h = ((const uint16_t *)base)[i];
    return dt == F16 ? fa_f16_to_f32(h) : fa_bf16_to_f32(h);
}

static void put(fa_dtype dt, void *base, int64_t i, double x)
{
    if (dt == F32)
        ((float *)base)[i] = (float)x;
    else
        ((uint16_t *)base)[i] = dt == F16 ? fa_f32_to_f16((float)x) : fa_f32_to_bf16((float)x);
}

static double rounded(fa_dtype dt, double x)
{
    char buf[4];
    put(dt, buf, 0, x);
    return get(dt, buf, 0);
}

/* one unit in the last place of |x| in dtype dt */
static double ulp(fa_dtype dt, double x)
{
    int e;
    frexp(x, &e);
    int mant = dt == F32 ? 24 : dt == F16 ? 11 : 8;
    double u = ldexp(1.0, e - mant);
    double tiny = dt == F32 ? ldexp(1.0, -149) : dt == F16 ? ldexp(1.0, -24) : ldexp(1.0, -133);
    return u > tiny ? u : tiny;
}

/* ------------------------------------------------------------------ the reference */

static int visible(const dcase *c, int64_t i, int64_t t, int64_t sk)
{
    int64_t diag = i + sk - c->sn;
    const int64_t right = c->causal ? 0 : c->right; /* causal is a right window of 0 */
    if (t < 0 || t >= sk)
        return 0;
    if (c->left >= 0 && t < diag - c->left)
        return 0;
    if (right >= 0 && t > diag + right)
        return 0;
    return 1;
}

/* Rotates vector x (double) to position pos with the tables (dtype values). */
static void rotate64(const dcase *c, const void *cosb, const void *sinb, int64_t pos, double *x)
{
    int64_t half = c->rotary_dim / 2;
    for (int64_t i = 0; i < half; ++i) {
        int64_t cx = c->interleaved ? 2 * i : i, cy = c->interleaved ? 2 * i + 1 : i + half;
        double co = get(c->dtype, cosb, pos * half + i), si = get(c->dtype, sinb, pos * half + i);
        double a = x[cx], b = x[cy];
        x[cx] = a * co - b * si;
        x[cy] = a * si + b * co;
    }
}

typedef struct host_case {
    int64_t nb, rows, pages_per_seq, seqlen_ro;
    int64_t dp; /* a cache head row's stride: d + pad */
    int64_t qn, cn, nn, rn; /* element counts: q / o, each cache, each new, each rotary table */
    void *q, *kc, *vc, *kn, *vn, *cos, *sin;
    int32_t *lens, *table, *bidx;
} host_case;

static int64_t token_offset(const dcase *c, const host_case *h, int64_t b, int64_t t, int64_t head)
{
    int64_t row, pos;
    if (c->page) {
        row = h->table[b * h->pages_per_seq + t / c->page];
        pos = t % c->page;
    } else {
        row = h->bidx ? h->bidx[b] : b;
        pos = t;
    }
    return ((row * h->rows + pos) * c->hkv + head) * h->dp;
}

static int64_t cached_of(const dcase *c, const host_case *h, int64_t b)
{
    return h->lens ? h->lens[b] : c->capacity;
}

/* float64 (ref) and fp32 (naive) attention over the cache as the call left it (kc, vc). */
static void attention(const dcase *c, const host_case *h, const void *kc, const void *vc, int naive, double *o,
                      double *lse)
{
    const int64_t d = c->d, group = c->hq / c->hkv;
    const double scale = 1.0 / sqrt((double)d);
    const int advance = c->causal || c->left >= 0 || c->right >= 0;
    double *qv = malloc(sizeof(double) * (size_t)d), *s = malloc(sizeof(double) * (size_t)(c->capacity + 1));
    double *acc = malloc(sizeof(double) * (size_t)d);
    for (int64_t b = 0; b < c->batch; ++b) {
        const int64_t cached = cached_of(c, h, b), sk = cached + c->knew;
        for (int64_t hq = 0; hq < c->hq; ++hq)
            for (int64_t i = 0; i < c->sn; ++i) {
                for (int64_t e = 0; e < d; ++e)
                    qv[e] = get(c->dtype, h->q, ((b * c->sn + i) * c->hq + hq) * d + e);
                if (c->rotary_dim) {
                    rotate64(c, h->cos, h->sin, advance ? cached + i : cached, qv);
                    for (int64_t e = 0; e < c->rotary_dim; ++e)
                        qv[e] = rounded(c->dtype, qv[e]);
                }
                double mx = -INFINITY;
                for (int64_t t = 0; t < sk; ++t) {
                    if (!visible(c, i, t, sk)) {
                        s[t] = -INFINITY;
                        continue;
                    }
                    const int64_t off = token_offset(c, h, b, t, hq / group);
                    double x = 0;
                    float xf = 0;
                    for (int64_t e = 0; e < d; ++e) {
                        double kv = get(c->dtype, kc, off + e);
                        x += qv[e] * kv;
                        xf += (float)qv[e] * (float)kv;
                    }
                    x = naive ? (double)(xf * (float)scale) : x * scale;
                    if (c->softcap > 0)
                        x = naive ? (double)(c->softcap * tanhf((float)x / c->softcap)) : c->softcap * tanh(x / c->softcap);
                    s[t] = x;
                    if (x > mx)
                        mx = x;
                }
                double l = 0;
                float lf = 0;
                for (int64_t e = 0; e < d; ++e)
                    acc[e] = 0;
                for (int64_t t = 0; t < sk && mx > -INFINITY; ++t) {
                    if (s[t] == -INFINITY)
                        continue;
                    double p = naive ? (double)expf((float)(s[t] - mx)) : exp(s[t] - mx);
                    l += p;
                    lf += (float)p;
                    const int64_t off = token_offset(c, h, b, t, hq / group);
                    for (int64_t e = 0; e < d; ++e)
                        acc[e] = naive ? (double)((float)acc[e] + (float)p * (float)get(c->dtype, vc, off + e))
                                       : acc[e] + p * get(c->dtype, vc, off + e);
                }
                if (naive)
                    l = lf;
                const int64_t ro = ((b * c->sn + i) * c->hq + hq) * d;
                for (int64_t e = 0; e < d; ++e)
                    o[ro + e] = l > 0 ? (naive ? rounded(c->dtype, (float)acc[e] / (float)l) : acc[e] / l) : 0.0;
                lse[(b * c->hq + hq) * c->sn + i] = l > 0 ? mx + log(l) : -INFINITY;
            }
    }
    free(qv);
    free(s);
    free(acc);
}

/* ------------------------------------------------------------------ one case */

static void *rand_buf(fa_dtype dt, int64_t n, uint64_t *rng, double amp)
{
    void *p = malloc(esz(dt) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; ++i)
        put(dt, p, i, amp * rng_normal(rng));
    return p;
}

/* device copy of n bytes of host data */
static void *dev(fa_context *ctx, const void *src, size_t n)
{
    void *p = NULL;
    if (fa_malloc(ctx, n ? n : 4, &p) != FA_SUCCESS)
        return NULL;
    if (n && src && fa_memcpy(ctx, p, src, n, FA_COPY_HOST_TO_DEVICE) != FA_SUCCESS)
        return NULL;
    if (n && !src) { /* an output: a poison pattern, so that unwritten elements show */
        unsigned char *poison = malloc(n);
        memset(poison, 0x7f, n);
        fa_status st = fa_memcpy(ctx, p, poison, n, FA_COPY_HOST_TO_DEVICE);
        free(poison);
        if (st != FA_SUCCESS)
            return NULL;
    }
    return p;
}

static fa_tensor t4(void *data, fa_dtype dt, int64_t a, int64_t b, int64_t c, int64_t d)
{
    int64_t s[4] = {a, b, c, d};
    return fa_tensor_contiguous(data, dt, 4, s);
}

static void make_host(const dcase *c, host_case *h, uint64_t seed)
{
    uint64_t rng = seed;
    memset(h, 0, sizeof *h);
    const int64_t d = c->d;
    if (c->page) {
        h->pages_per_seq = c->capacity / c->page;
        h->nb = c->batch * h->pages_per_seq + 3; /* spare pages the call must not touch */
        h->rows = c->page;
    } else {
        h->nb = c->batch + (c->batch_idx ? 2 : 0);
        h->rows = c->capacity;
    }
    h->qn = c->batch * c->sn * c->hq * d;
    h->dp = d + c->pad;
    h->cn = h->nb * h->rows * c->hkv * h->dp;
    h->nn = c->batch * c->knew * c->hkv * d;
    h->q = rand_buf(c->dtype, h->qn, &rng, 1.0);
    h->kc = rand_buf(c->dtype, h->cn, &rng, 1.0);
    h->vc = rand_buf(c->dtype, h->cn, &rng, 1.0);
    for (int64_t i = 0; i < h->cn; ++i)
        if (i % h->dp >= d) {
            put(c->dtype, h->kc, i, NAN);
            put(c->dtype, h->vc, i, NAN);
        }
    h->kn = rand_buf(c->dtype, h->nn, &rng, 1.0);
    h->vn = rand_buf(c->dtype, h->nn, &rng, 1.0);
    if (!c->no_seqlens) {
        h->lens = malloc(sizeof(int32_t) * (size_t)c->batch);
        for (int64_t b = 0; b < c->batch; ++b)
            h->lens[b] = (int32_t)(c->lens[b] < 0 ? c->capacity - c->knew : c->lens[b]);
    }
    if (c->page) { /* a random permutation of the pages */
        int64_t n = c->batch * h->pages_per_seq;
        h->table = malloc(sizeof(int32_t) * (size_t)n);
        int32_t *perm = malloc(sizeof(int32_t) * (size_t)h->nb);
        for (int64_t i = 0; i < h->nb; ++i)
            perm[i] = (int32_t)i;
        for (int64_t i = h->nb - 1; i > 0; --i) {
            int64_t j = (int64_t)(rng_next(&rng) % (uint64_t)(i + 1));
            int32_t tmp = perm[i];
            perm[i] = perm[j];
            perm[j] = tmp;
        }
        memcpy(h->table, perm, sizeof(int32_t) * (size_t)n);
        free(perm);
    }
    if (c->batch_idx) {
        h->bidx = malloc(sizeof(int32_t) * (size_t)c->batch);
        for (int64_t b = 0; b < c->batch; ++b)
            h->bidx[b] = (int32_t)((b * 2 + 1) % h->nb);
    }
    if (c->rotary_dim) {
        h->seqlen_ro = c->capacity + c->sn + 1;
        h->rn = h->seqlen_ro * c->rotary_dim / 2;
        h->cos = malloc(esz(c->dtype) * (size_t)h->rn);
        h->sin = malloc(esz(c->dtype) * (size_t)h->rn);
        for (int64_t p = 0; p < h->seqlen_ro; ++p)
            for (int64_t i = 0; i < c->rotary_dim / 2; ++i) {
                double th = p * pow(10000.0, -2.0 * (double)i / (double)c->rotary_dim);
                put(c->dtype, h->cos, p * c->rotary_dim / 2 + i, cos(th));
                put(c->dtype, h->sin, p * c->rotary_dim / 2 + i, sin(th));
            }
    }
}

static void free_host(host_case *h)
{
    free(h->q), free(h->kc), free(h->vc), free(h->kn), free(h->vn), free(h->cos), free(h->sin);
    free(h->lens), free(h->table), free(h->bidx);
}

/* The arguments in device memory; every pointer into dv[] for freeing. */
typedef struct dev_case {
    void *ptr[16];
    int n;
    fa_kvcache_args a;
} dev_case;

static void *track(dev_case *x, void *p)
{
    x->ptr[x->n++] = p;
    return p;
}

/* check_on_device for every call the grid makes (--device-check, or the second pass on backends
 * that list FA_FEATURE_KVCACHE_DEVICE_CHECK) */
static int device_check;

static int make_dev(fa_context *ctx, const dcase *c, const host_case *h, dev_case *x)
{
    memset(x, 0, sizeof *x);
    const int64_t d = c->d;
    const size_t es = esz(c->dtype);
    fa_kvcache_args *a = &x->a;
    a->q = t4(track(x, dev(ctx, h->q, es * (size_t)h->qn)), c->dtype, c->batch, c->sn, c->hq, d);
    a->k_cache = t4(track(x, dev(ctx, h->kc, es * (size_t)h->cn)), c->dtype, h->nb, h->rows, c->hkv, d);
    a->v_cache = t4(track(x, dev(ctx, h->vc, es * (size_t)h->cn)), c->dtype, h->nb, h->rows, c->hkv, d);
    for (fa_tensor *t = &a->k_cache; t; t = t == &a->k_cache ? &a->v_cache : NULL) {
        t->stride[2] = h->dp;
        t->stride[1] = c->hkv * h->dp;
        t->stride[0] = h->rows * c->hkv * h->dp;
    }
    if (h->lens)
        a->cache_seqlens = track(x, dev(ctx, h->lens, sizeof(int32_t) * (size_t)c->batch));
    if (h->table) {
        a->block_table = track(x, dev(ctx, h->table, sizeof(int32_t) * (size_t)(c->batch * h->pages_per_seq)));
        a->block_table_stride = h->pages_per_seq;
    }
    if (h->bidx)
        a->cache_batch_idx = track(x, dev(ctx, h->bidx, sizeof(int32_t) * (size_t)c->batch));
    if (c->knew > 0) {
        a->k_new = t4(track(x, dev(ctx, h->kn, es * (size_t)h->nn)), c->dtype, c->batch, c->knew, c->hkv, d);
        a->v_new = t4(track(x, dev(ctx, h->vn, es * (size_t)h->nn)), c->dtype, c->batch, c->knew, c->hkv, d);
    }
    if (c->rotary_dim) {
        int64_t s[2] = {h->seqlen_ro, c->rotary_dim / 2};
        a->rotary_cos = fa_tensor_contiguous(track(x, dev(ctx, h->cos, es * (size_t)h->rn)), c->dtype, 2, s);
        a->rotary_sin = fa_tensor_contiguous(track(x, dev(ctx, h->sin, es * (size_t)h->rn)), c->dtype, 2, s);
        a->rotary_interleaved = c->interleaved;
    }
    a->o = t4(track(x, dev(ctx, NULL, es * (size_t)h->qn)), c->dtype, c->batch, c->sn, c->hq, d);
    int64_t ls[3] = {c->batch, c->hq, c->sn};
    a->lse = fa_tensor_contiguous(track(x, dev(ctx, NULL, sizeof(float) * (size_t)(c->batch * c->hq * c->sn))),
                                  F32, 3, ls);
    a->opts = fa_options_default();
    a->opts.causal = c->causal;
    a->opts.window_left = c->left;
    a->opts.window_right = c->right;
    a->opts.softcap = c->softcap;
    a->num_splits = c->splits;
    a->check_on_device = device_check;
    for (int i = 0; i < x->n; ++i)
        if (!x->ptr[i])
            return 0;
    return 1;
}

static void free_dev(fa_context *ctx, dev_case *x)
{
    for (int i = 0; i < x->n; ++i)
        if (x->ptr[i])
            fa_free(ctx, x->ptr[i]);
}

static void *back(fa_context *ctx, const void *src, size_t n)
{
    void *p = malloc(n ? n : 4);
    if (n && fa_memcpy(ctx, p, src, n, FA_COPY_DEVICE_TO_HOST) != FA_SUCCESS) {
        free(p);
        return NULL;
    }
    return p;
}

/* The expected caches after the call. rot[i] > 0 for a rotated key element: what the rotation in
 * fp32 may differ by, besides one unit in the last place of the dtype: a few fp32 rounding errors
 * of the pair's terms, 2^-22 (|x| + |y|) (cancellation makes the result itself small). */
static void expected_caches(const dcase *c, const host_case *h, void *ek, void *ev, double *rot)
{
    const size_t es = esz(c->dtype);
    memcpy(ek, h->kc, es * (size_t)h->cn);
    memcpy(ev, h->vc, es * (size_t)h->cn);
    for (int64_t i = 0; i < h->cn; ++i)
        rot[i] = 0;
    double x[256], mag[256];
    for (int64_t b = 0; b < c->batch; ++b)
        for (int64_t j = 0; j < c->knew; ++j) {
            const int64_t t = cached_of(c, h, b) + j;
            for (int64_t hk = 0; hk < c->hkv; ++hk) {
                const int64_t src = ((b * c->knew + j) * c->hkv + hk) * c->d, dst = token_offset(c, h, b, t, hk);
                for (int64_t e = 0; e < c->d; ++e)
                    x[e] = get(c->dtype, h->kn, src + e);
                for (int64_t i = 0; i < c->rotary_dim / 2; ++i) {
                    int64_t cx = c->interleaved ? 2 * i : i, cy = c->interleaved ? 2 * i + 1 : i + c->rotary_dim / 2;
                    mag[cx] = mag[cy] = ldexp(fabs(x[cx]) + fabs(x[cy]), -22);
                }
                if (c->rotary_dim)
                    rotate64(c, h->cos, h->sin, t, x);
                for (int64_t e = 0; e < c->d; ++e) {
                    put(c->dtype, ek, dst + e, x[e]);
                    rot[dst + e] = e < c->rotary_dim ? mag[e] : 0.0;
                }
                memcpy((char *)ev + es * (size_t)dst, (const char *)h->vn + es * (size_t)src, es * (size_t)c->d);
            }
        }
}

static int run_case(fa_context *ctx, const dcase *c, uint64_t seed)
{
    host_case h;
    make_host(c, &h, seed);
    dev_case x;
    int ok = 0;
    const size_t es = esz(c->dtype);
    void *ko = NULL, *vo = NULL, *oo = NULL, *lo = NULL, *ek = malloc(es * (size_t)h.cn), *ev = malloc(es * (size_t)h.cn);
    double *rot = malloc(sizeof(double) * (size_t)h.cn);
    double *ref_o = malloc(sizeof(double) * (size_t)h.qn), *nv_o = malloc(sizeof(double) * (size_t)h.qn);
    const int64_t nl = c->batch * c->hq * c->sn;
    double *ref_l = malloc(sizeof(double) * (size_t)(nl + 1)), *nv_l = malloc(sizeof(double) * (size_t)(nl + 1));
    if (!make_dev(ctx, c, &h, &x)) {
        printf("  %s: cannot allocate device buffers\n", c->name);
        goto out;
    }
    fa_status st = fa_forward_kvcache(ctx, &x.a);
    if (st == FA_SUCCESS)
        st = fa_synchronize(ctx); /* where the device checks the arrays, their faults surface here */
    if (st != FA_SUCCESS) {
        printf("  %s: fa_forward_kvcache: %s (%s)\n", c->name, fa_status_string(st), fa_context_last_error(ctx));
        goto out;
    }
    ko = back(ctx, x.a.k_cache.data, es * (size_t)h.cn);
    vo = back(ctx, x.a.v_cache.data, es * (size_t)h.cn);
    oo = back(ctx, x.a.o.data, es * (size_t)h.qn);
    lo = back(ctx, x.a.lse.data, sizeof(float) * (size_t)nl);
    if (!ko || !vo || !oo || !lo) {
        printf("  %s: cannot copy the results back\n", c->name);
        goto out;
    }
    /* the caches */
    expected_caches(c, &h, ek, ev, rot);
    for (int64_t i = 0; i < h.cn; ++i) {
        double want = get(c->dtype, ek, i), got = get(c->dtype, ko, i);
        int same = memcmp((char *)ek + es * (size_t)i, (char *)ko + es * (size_t)i, es) == 0;
        if (!same && !(rot[i] > 0 && fabs(got - want) <= ulp(c->dtype, want) + rot[i])) {
            printf("  %s: k_cache element %lld is %.9g, expected %.9g%s\n", c->name, (long long)i, got, want,
                   rot[i] > 0 ? " (rotated: one ulp and fp32 rounding allowed)" : " (bit-identical)");
            goto out;
        }
    }
    if (memcmp(ev, vo, es * (size_t)h.cn) != 0) {
        printf("  %s: v_cache differs from the expected bytes\n", c->name);
        goto out;
    }
    /* O and LSE against the float64 reference over the cache the call left */
    attention(c, &h, ko, vo, 0, ref_o, ref_l);
    attention(c, &h, ko, vo, 1, nv_o, nv_l);
    double err = 0, nerr = 0, rmax = 0, lerr = 0, nlerr = 0, lmax = 0;
    for (int64_t i = 0; i < h.qn; ++i) {
        double k = get(c->dtype, oo, i);
        if (!(fabs(k - ref_o[i]) <= err))
            err = isnan(k) ? INFINITY : fabs(k - ref_o[i]);
        nerr = fmax(nerr, fabs(nv_o[i] - ref_o[i]));
        rmax = fmax(rmax, fabs(ref_o[i]));
    }
    for (int64_t i = 0; i < nl; ++i) {
        double k = ((float *)lo)[i];
        if (isinf(ref_l[i]) || isinf(k)) {
            if (k != ref_l[i]) {
                printf("  %s: LSE %lld is %g, expected %g\n", c->name, (long long)i, k, ref_l[i]);
                goto out;
            }
            continue;
        }
        if (!(fabs(k - ref_l[i]) <= lerr))
            lerr = isnan(k) ? INFINITY : fabs(k - ref_l[i]);
        nlerr = fmax(nlerr, fabs(nv_l[i] - ref_l[i]));
        lmax = fmax(lmax, fabs(ref_l[i]));
    }
    double bound = 2 * nerr + 1e-5 * fmax(1.0, rmax), lbound = 2 * nlerr + 1e-5 * fmax(1.0, lmax);
    printf("  %s: O error %.3g (bound %.3g, naive %.3g), LSE error %.3g (bound %.3g)\n", c->name, err, bound, nerr,
           lerr, lbound);
    ok = err <= bound && lerr <= lbound;
out:
    free_dev(ctx, &x);
    free_host(&h);
    free(ko), free(vo), free(oo), free(lo), free(ek), free(ev), free(rot), free(ref_o), free(nv_o), free(ref_l), free(nv_l);
    return ok;
}

/* ------------------------------------------------------------------ bad arguments */

typedef void (*breaker)(fa_kvcache_args *a, void *scratch);
static void b_null_q(fa_kvcache_args *a, void *s) { (void)s; a->q.data = NULL; }
static void b_page_size(fa_kvcache_args *a, void *s) { (void)s; a->k_cache.shape[1] = a->v_cache.shape[1] = 24; }
static void b_table_range(fa_kvcache_args *a, void *s)
{
    int32_t *t = s; /* holds the case's block table (run_bad): a->block_table may be device memory */
    t[0] = 999; /* sequence 0's first page: in use */
    a->block_table = t;
}
static void b_overflow_len(fa_kvcache_args *a, void *s)
{
    int32_t *t = s;
    t[0] = 0;
    t[1] = (int32_t)(a->block_table_stride * a->k_cache.shape[1]); /* full: no room for the new token */
    a->cache_seqlens = t;
}
static void b_negative_len(fa_kvcache_args *a, void *s) { int32_t *t = s; t[0] = -1; t[1] = 0; a->cache_seqlens = t; }
static void b_rotary_short(fa_kvcache_args *a, void *s) { (void)s; a->rotary_cos.shape[0] = a->rotary_sin.shape[0] = 3; }
static void b_rotary_odd(fa_kvcache_args *a, void *s) { (void)s; a->rotary_cos.shape[1] = a->rotary_sin.shape[1] = a->q.shape[3]; }
static void b_batch_idx_paged(fa_kvcache_args *a, void *s) { int32_t *t = s; t[0] = t[1] = 0; a->cache_batch_idx = t; }
static void b_dropout(fa_kvcache_args *a, void *s) { (void)s; a->opts.dropout_p = 0.1f; }
static void b_splits(fa_kvcache_args *a, void *s) { (void)s; a->num_splits = -2; }
static void b_head_dim(fa_kvcache_args *a, void *s) { (void)s; a->q.shape[3] = 300; }
static void b_gqa(fa_kvcache_args *a, void *s) { (void)s; a->q.shape[2] = 3; }
static void b_new_shape(fa_kvcache_args *a, void *s) { (void)s; a->v_new.shape[1] = 2; }
static void b_o_overlaps_cache(fa_kvcache_args *a, void *s) { (void)s; a->o.data = a->k_cache.data; }
static void b_nan_scale(fa_kvcache_args *a, void *s) { (void)s; a->opts.softmax_scale = NAN; }
static void b_page_count_overflow(fa_kvcache_args *a, void *s) { (void)s; a->block_table_stride = INT64_MAX / 8; }
/* run_bad's case: pages of 16, 4 per sequence, lengths 5 and 20, one new token each, rotary
 * positions up to 20 (21 table rows) */
static void b_rotary_one_short(fa_kvcache_args *a, void *s) { (void)s; a->rotary_cos.shape[0] = a->rotary_sin.shape[0] = 20; }
static void b_two_seqs_one_page(fa_kvcache_args *a, void *s)
{
    int32_t *t = s; /* sequence 1 reads rows 0 .. 15 of sequence 0's first page, where sequence 0 appends row 5 */
    t[4] = t[0];
    a->block_table = t;
}
static void b_page_twice_in_row(fa_kvcache_args *a, void *s)
{
    int32_t *t = s; /* sequence 1's pages 0 and 1 are one page: its new token (row 4 of page 1) overwrites key 4 */
    t[5] = t[4];
    a->block_table = t;
}

static const struct {
    const char *name;
    breaker fn;
    fa_status want;
} bad[] = {
    {"q NULL", b_null_q, FA_ERR_INVALID_ARG},
    {"page size 24", b_page_size, FA_ERR_INVALID_ARG},
    {"block_table entry out of range", b_table_range, FA_ERR_INVALID_ARG},
    {"cache full, token appended", b_overflow_len, FA_ERR_INVALID_ARG},
    {"negative cache_seqlens", b_negative_len, FA_ERR_INVALID_ARG},
    {"rotary table too short", b_rotary_short, FA_ERR_INVALID_ARG},
    {"rotary_dim > d", b_rotary_odd, FA_ERR_INVALID_ARG},
    {"cache_batch_idx with a paged cache", b_batch_idx_paged, FA_ERR_INVALID_ARG},
    {"dropout", b_dropout, FA_ERR_INVALID_ARG},
    {"num_splits < 0", b_splits, FA_ERR_INVALID_ARG},
    {"head dim 300", b_head_dim, FA_ERR_UNSUPPORTED},
    {"heads_q not a multiple of heads_kv", b_gqa, FA_ERR_INVALID_ARG},
    {"v_new of another length", b_new_shape, FA_ERR_INVALID_ARG},
    {"o inside k_cache", b_o_overlaps_cache, FA_ERR_INVALID_ARG},
    {"NaN scale", b_nan_scale, FA_ERR_INVALID_ARG},
    {"block_table_stride x batch overflows", b_page_count_overflow, FA_ERR_OVERFLOW},
    {"rotary table one row short", b_rotary_one_short, FA_ERR_INVALID_ARG},
    {"two sequences append into one page", b_two_seqs_one_page, FA_ERR_INVALID_ARG},
    {"one page twice in a sequence's row, appended into", b_page_twice_in_row, FA_ERR_INVALID_ARG},
};

/* The bad values of the int32 arrays (and of the rotary rows they need): what a device check
 * finds, and fa_synchronize reports. */
static int value_fault(breaker fn)
{
    return fn == b_table_range || fn == b_overflow_len || fn == b_negative_len || fn == b_rotary_short ||
           fn == b_rotary_one_short;
}

/* Points the call's int32 arrays that a breaker set to `scratch` (host memory) at a copy of it in
 * the context's memory. */
static int upload_scratch(fa_context *ctx, fa_kvcache_args *a, const int32_t *scratch, size_t n, dev_case *x)
{
    const int32_t **arrays[3] = {&a->cache_seqlens, &a->block_table, &a->cache_batch_idx};
    void *copy = NULL;
    for (int i = 0; i < 3; ++i)
        if (*arrays[i] == scratch) {
            if (!copy && !(copy = track(x, dev(ctx, scratch, sizeof(int32_t) * n))))
                return 0;
            *arrays[i] = copy;
        }
    return 1;
}

/* The NaN rule (docs/options.md), as fa_forward keeps it: NaN in a query row, or in a key that rows
 * see, makes those rows' O and LSE NaN, never O = 0 and LSE = -inf (a row that sees no key); the
 * other rows stay finite. One split and several, a contiguous and a paged cache. */
static int run_nan_rule(fa_context *ctx, fa_dtype dt)
{
    int failures = 0;
    for (int variant = 0; variant < 4; ++variant) {
        const int paged = variant & 1, splits = variant & 2 ? 4 : 1;
        const dcase c = {"nan", dt, 2, 1, 4, 2, 64, paged ? 16 : 0, 128, {40, 70}, 1, 0, 0, 0, -1, -1, 0, splits,
                         0, 0, 0};
        host_case h;
        make_host(&c, &h, 7 + (uint64_t)variant);
        /* q of sequence 0, head 0 (kv head 0); key 2 of sequence 1, kv head 1 (query heads 2, 3) */
        for (int64_t ch = 0; ch < c.d; ++ch)
            put(dt, h.q, ch, NAN);
        const int64_t row = paged ? h.table[h.pages_per_seq] : 1;
        put(dt, h.kc, ((row * h.rows + 2) * c.hkv + 1) * h.dp, NAN);
        dev_case x;
        fa_status st = make_dev(ctx, &c, &h, &x) ? fa_forward_kvcache(ctx, &x.a) : FA_ERR_OUT_OF_MEMORY;
        if (st == FA_SUCCESS)
            st = fa_synchronize(ctx);
        const size_t es = esz(dt);
        void *o = back(ctx, x.a.o.data, es * (size_t)h.qn);
        float *lse = back(ctx, x.a.lse.data, sizeof(float) * (size_t)(c.batch * c.hq));
        int bad_rows = 0;
        for (int64_t b = 0; st == FA_SUCCESS && o && lse && b < c.batch; ++b)
            for (int64_t hq = 0; hq < c.hq; ++hq) {
                const int want_nan = (b == 0 && hq == 0) || (b == 1 && hq >= 2);
                int nan_o = 1, finite_o = 1;
                for (int64_t ch = 0; ch < c.d; ++ch) {
                    const double v = get(dt, o, (b * c.hq + hq) * c.d + ch);
                    nan_o &= isnan(v) != 0;
                    finite_o &= isfinite(v) != 0;
                }
                const float l = lse[b * c.hq + hq];
                if (want_nan ? !(nan_o && isnan(l)) : !(finite_o && isfinite(l))) {
                    printf("  nan rule, %s cache, %d split(s): sequence %lld head %lld: o %s, lse %g, expected %s\n",
                           paged ? "paged" : "contiguous", splits, (long long)b, (long long)hq,
                           nan_o ? "NaN" : finite_o ? "finite" : "mixed", (double)l, want_nan ? "NaN" : "finite");
                    ++bad_rows;
                }
            }
        if (st != FA_SUCCESS || !o || !lse || bad_rows) {
            printf("  FAILED nan rule (%s cache, %d split(s), %s): %s\n", paged ? "paged" : "contiguous", splits,
                   dt == F32 ? "f32" : "bf16", fa_status_string(st));
            ++failures;
        }
        free(o), free(lse);
        free_dev(ctx, &x);
        free_host(&h);
    }
    return failures;
}

/* Each bad call returns its status and leaves o and the caches as they were. With check_on_device
 * (device_check_pass) only the bad array values are tried: the call returns FA_SUCCESS, a good
 * call made after it writes nothing either, fa_synchronize returns the status, and after that a
 * good call runs again. */
static int run_bad(fa_context *ctx, int device_check_pass)
{
    const dcase c = {"bad", B16, 2, 1, 4, 2, 64, 16, 64, {5, 20}, 1, 32, 0, 0, -1, -1, 0, 0, 0, 0, 0};
    host_case h;
    make_host(&c, &h, 99);
    if (c.batch * h.pages_per_seq > 64) {
        printf("  bad: the block table does not fit the scratch array\n");
        free_host(&h);
        return 1;
    }
    int failures = 0;
    const size_t es = esz(c.dtype);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
        if (device_check_pass && !value_fault(bad[i].fn))
            continue;
        dev_case x;
        int32_t scratch[64];
        memcpy(scratch, h.table, sizeof(int32_t) * (size_t)(c.batch * h.pages_per_seq));
        int made = make_dev(ctx, &c, &h, &x);
        fa_kvcache_args a = x.a;
        bad[i].fn(&a, scratch);
        if (!made || !upload_scratch(ctx, &a, scratch, 64, &x)) {
            printf("  bad: cannot allocate\n");
            free_dev(ctx, &x);
            ++failures;
            continue;
        }
        void *o0 = back(ctx, x.a.o.data, es * (size_t)h.qn);
        fa_status st = fa_forward_kvcache(ctx, &a), st_good = FA_SUCCESS, st_after = FA_SUCCESS;
        int deferred = 0;
        if (device_check_pass) {
            deferred = st == FA_SUCCESS;
            st_good = fa_forward_kvcache(ctx, &x.a); /* must write nothing: the fault is not yet reported */
            if (deferred)
                st = fa_synchronize(ctx);
        }
        void *o1 = back(ctx, x.a.o.data, es * (size_t)h.qn), *k1 = back(ctx, x.a.k_cache.data, es * (size_t)h.cn);
        void *v1 = back(ctx, x.a.v_cache.data, es * (size_t)h.cn);
        int untouched = o0 && o1 && k1 && v1 && memcmp(o0, o1, es * (size_t)h.qn) == 0 &&
                        memcmp(k1, h.kc, es * (size_t)h.cn) == 0 && memcmp(v1, h.vc, es * (size_t)h.cn) == 0;
        const char *msg = fa_context_last_error(ctx);
        int ok = st == bad[i].want && untouched && msg && msg[0];
        printf("  bad argument%s, %s: %s%s (%s)\n", device_check_pass ? " (checked on the device)" : "", bad[i].name,
               fa_status_string(st), untouched ? "" : ", OUTPUTS CHANGED", msg);
        if (device_check_pass) {
            /* reported once: the same context then runs the good call */
            st_after = fa_forward_kvcache(ctx, &x.a);
            if (st_after == FA_SUCCESS)
                st_after = fa_synchronize(ctx);
            ok = ok && deferred && st_good == FA_SUCCESS && st_after == FA_SUCCESS;
            if (!deferred || st_good != FA_SUCCESS || st_after != FA_SUCCESS)
                printf("    the call %s, the good call after it %s, the good call after fa_synchronize %s\n",
                       deferred ? "returned FA_SUCCESS" : "was refused at once", fa_status_string(st_good),
                       fa_status_string(st_after));
        }
        if (!ok) {
            printf("    FAILED: expected %s with outputs untouched\n", fa_status_string(bad[i].want));
            ++failures;
        }
        free(o0), free(o1), free(k1), free(v1);
        free_dev(ctx, &x);
    }
    if (fa_forward_kvcache(ctx, NULL) != FA_ERR_INVALID_ARG || fa_forward_kvcache(NULL, NULL) != FA_ERR_INVALID_ARG) {
        printf("  bad argument, NULL args / context: not FA_ERR_INVALID_ARG\n    FAILED\n");
        ++failures;
    }
    free_host(&h);
    return failures;
}

int main(int argc, char **argv)
{
    const char *backend = "cpu", *filter = NULL;
    int only_device_check = 0;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--backend") && i + 1 < argc)
            backend = argv[++i];
        else if (!strcmp(argv[i], "--filter") && i + 1 < argc)
            filter = argv[++i];
        else if (!strcmp(argv[i], "--device-check"))
            only_device_check = 1;
        else {
            fprintf(stderr, "usage: %s [--backend NAME] [--filter SUBSTRING] [--device-check]\n", argv[0]);
            return 2;
        }
    }
    fa_context *ctx = NULL;
    fa_status st = fa_context_create(&ctx, backend, 0);
    if (st == FA_ERR_NO_BACKEND || st == FA_ERR_NO_DEVICE) {
        printf("SKIP: backend %s: %s (%s)\n", backend, fa_status_string(st), fa_last_error());
        return 77;
    }
    if (st != FA_SUCCESS) {
        printf("backend %s: %s (%s)\n", backend, fa_status_string(st), fa_last_error());
        return 1;
    }
    fa_capabilities caps;
    memset(&caps, 0, sizeof caps);
    if (fa_backend_capabilities(backend, &caps) == FA_SUCCESS && !(caps.features & FA_FEATURE_KVCACHE)) {
        printf("SKIP: backend %s has no fa_forward_kvcache (FA_FEATURE_KVCACHE)\n", backend);
        fa_context_destroy(ctx);
        return 77;
    }
    int failures = 0, run = 0;
    /* passes: check_on_device 0, then 1 on backends that offer it (--device-check: 1 alone; a
     * backend without it checks on the host then, and the bad calls fail at once) */
    const int has_device_check = (caps.features & FA_FEATURE_KVCACHE_DEVICE_CHECK) != 0;
    for (int pass = only_device_check; pass <= (has_device_check || only_device_check); ++pass) {
        device_check = pass;
        printf("decode on %s, check_on_device %d%s\n", backend, pass,
               pass && !has_device_check ? " (the backend checks on the host)" : "");
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
            if (filter && !strstr(cases[i].name, filter))
                continue;
            ++run;
            if (!run_case(ctx, &cases[i], 1000 + i)) {
                printf("  FAILED %s%s\n", cases[i].name, pass ? " (checked on the device)" : "");
                ++failures;
            }
        }
        if (!filter || strstr("bad", filter))
            failures += run_bad(ctx, pass && has_device_check);
        if (!filter || strstr("nan", filter)) {
            if (!strcmp(backend, "cuda") || !strcmp(backend, "hip"))
                printf("  SKIP nan rule: the CUDA / HIP decode kernels do not follow it yet\n");
            else
                failures += run_nan_rule(ctx, F32) + run_nan_rule(ctx, B16);
        }
    }
    fa_context_destroy(ctx);
    printf("%d case(s) run, %d failure(s)\n", run, failures);
    return failures ? 1 : 0;
}
