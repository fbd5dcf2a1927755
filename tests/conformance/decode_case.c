/* decode_case.c: the buffers of one decode case (decode_case.h): its inputs drawn in host memory
 * from a seed, and the fa_forward_kvcache arguments over device copies of them, outputs poisoned so
 * that unwritten elements show. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "decode_case.h"
#include "testrand.h"

/* ------------------------------------------------------------------ dtype helpers */

size_t esz(fa_dtype dt)
{
    return dt == F32 ? 4 : 2;
}

double get(fa_dtype dt, const void *base, int64_t i)
{
    if (dt == F32)
        return ((const float *)base)[i];
    uint16_t h = ((const uint16_t *)base)[i];
    return dt == F16 ? fa_f16_to_f32(h) : fa_bf16_to_f32(h);
}

void put(fa_dtype dt, void *base, int64_t i, double x)
{
    if (dt == F32)
        ((float *)base)[i] = (float)x;
    else
        ((uint16_t *)base)[i] = dt == F16 ? fa_f32_to_f16((float)x) : fa_f32_to_bf16((float)x);
}

/* ------------------------------------------------------------------ host and device buffers */

static void *rand_buf(fa_dtype dt, int64_t n, uint64_t *rng, double amp)
{
    void *p = malloc(esz(dt) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; ++i)
        put(dt, p, i, amp * rng_normal(rng));
    return p;
}

/* device copy of n bytes of host data */
void *dev(fa_context *ctx, const void *src, size_t n)
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

void make_host(const dcase *c, host_case *h, uint64_t seed)
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
    h->dv = c->dv > 0 ? c->dv : d;
    h->qn = c->batch * c->sn * c->hq * d;
    h->on = c->batch * c->sn * c->hq * h->dv;
    h->dp = d + c->pad;
    h->dvp = c->shared_v ? h->dp : h->dv + c->pad;
    h->cn = h->nb * h->rows * c->hkv * h->dp;
    h->cvn = h->nb * h->rows * c->hkv * h->dvp;
    h->nn = c->batch * c->knew * c->hkv * d;
    h->nvn = c->batch * c->knew * c->hkv * h->dv;
    h->q = rand_buf(c->dtype, h->qn, &rng, 1.0);
    h->kc = rand_buf(c->dtype, h->cn, &rng, 1.0);
    h->vc = rand_buf(c->dtype, h->cvn, &rng, 1.0);
    for (int64_t i = 0; i < h->cn; ++i)
        if (i % h->dp >= d)
            put(c->dtype, h->kc, i, NAN);
    if (c->shared_v) /* the key rows themselves: channels dv .. d are keys, the pad NaN */
        memcpy(h->vc, h->kc, esz(c->dtype) * (size_t)h->cn);
    else
        for (int64_t i = 0; i < h->cvn; ++i)
            if (i % h->dvp >= h->dv)
                put(c->dtype, h->vc, i, NAN);
    h->kn = rand_buf(c->dtype, h->nn, &rng, 1.0);
    h->vn = rand_buf(c->dtype, h->nvn, &rng, 1.0);
    if (c->sink) { /* different across heads, so that a kernel reading another head's shows */
        h->sink = malloc(sizeof(float) * (size_t)c->hq);
        for (int64_t i = 0; i < c->hq; ++i) {
            const double u = (double)(rng_next(&rng) >> 11) * (1.0 / 9007199254740992.0);
            h->sink[i] = (float)(c->sink == 2 ? 8.0 + 0.5 * u : -2.0 + 4.0 * u);
        }
    }
    if (c->alibi) { /* in (0, 1], different across heads and (alibi 2) sequences */
        const int64_t n = (c->alibi == 2 ? c->batch : 1) * c->hq;
        h->slopes = malloc(sizeof(float) * (size_t)n);
        for (int64_t i = 0; i < n; ++i)
            h->slopes[i] = (float)((double)((rng_next(&rng) >> 11) + 1) * (1.0 / 9007199254740992.0));
        h->slope_stride = c->alibi == 2 ? c->hq : 0;
    }
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

void set_leftpad(const dcase *c, host_case *h, const int64_t *pads)
{
    h->pads = malloc(sizeof(int32_t) * (size_t)c->batch);
    for (int64_t b = 0; b < c->batch; ++b) {
        h->pads[b] = (int32_t)pads[b];
        const int64_t row = h->bidx ? h->bidx[b] : b, n = pads[b] * c->hkv * h->dp, nv = pads[b] * c->hkv * h->dvp;
        for (int64_t i = 0; i < n; ++i)
            put(c->dtype, h->kc, row * h->rows * c->hkv * h->dp + i, NAN);
        for (int64_t i = 0; i < nv; ++i)
            put(c->dtype, h->vc, row * h->rows * c->hkv * h->dvp + i, NAN);
    }
}

void free_host(host_case *h)
{
    free(h->q), free(h->kc), free(h->vc), free(h->kn), free(h->vn), free(h->cos), free(h->sin);
    free(h->lens), free(h->table), free(h->bidx), free(h->pads), free(h->sink), free(h->slopes);
}

void *track(dev_case *x, void *p)
{
    x->ptr[x->n++] = p;
    return p;
}

int device_check;

int make_dev(fa_context *ctx, const dcase *c, const host_case *h, dev_case *x)
{
    memset(x, 0, sizeof *x);
    const int64_t d = c->d;
    const size_t es = esz(c->dtype);
    fa_kvcache_args *a = &x->a;
    a->q = t4(track(x, dev(ctx, h->q, es * (size_t)h->qn)), c->dtype, c->batch, c->sn, c->hq, d);
    a->k_cache = t4(track(x, dev(ctx, h->kc, es * (size_t)h->cn)), c->dtype, h->nb, h->rows, c->hkv, d);
    a->v_cache = t4(c->shared_v ? a->k_cache.data : track(x, dev(ctx, h->vc, es * (size_t)h->cvn)), c->dtype, h->nb,
                    h->rows, c->hkv, h->dv);
    for (fa_tensor *t = &a->k_cache; t; t = t == &a->k_cache ? &a->v_cache : NULL) {
        const int64_t row = t == &a->k_cache ? h->dp : h->dvp;
        t->stride[2] = row;
        t->stride[1] = c->hkv * row;
        t->stride[0] = h->rows * c->hkv * row;
    }
    if (h->lens)
        a->cache_seqlens = track(x, dev(ctx, h->lens, sizeof(int32_t) * (size_t)c->batch));
    if (h->table) {
        a->block_table = track(x, dev(ctx, h->table, sizeof(int32_t) * (size_t)(c->batch * h->pages_per_seq)));
        a->block_table_stride = h->pages_per_seq;
    }
    if (h->bidx)
        a->cache_batch_idx = track(x, dev(ctx, h->bidx, sizeof(int32_t) * (size_t)c->batch));
    if (h->pads)
        a->cache_leftpad = track(x, dev(ctx, h->pads, sizeof(int32_t) * (size_t)c->batch));
    if (c->knew > 0) {
        a->k_new = t4(track(x, dev(ctx, h->kn, es * (size_t)h->nn)), c->dtype, c->batch, c->knew, c->hkv, d);
        a->v_new = t4(track(x, dev(ctx, h->vn, es * (size_t)h->nvn)), c->dtype, c->batch, c->knew, c->hkv, h->dv);
    }
    if (c->rotary_dim) {
        int64_t s[2] = {h->seqlen_ro, c->rotary_dim / 2};
        a->rotary_cos = fa_tensor_contiguous(track(x, dev(ctx, h->cos, es * (size_t)h->rn)), c->dtype, 2, s);
        a->rotary_sin = fa_tensor_contiguous(track(x, dev(ctx, h->sin, es * (size_t)h->rn)), c->dtype, 2, s);
        a->rotary_interleaved = c->interleaved;
    }
    a->o = t4(track(x, dev(ctx, NULL, es * (size_t)h->on)), c->dtype, c->batch, c->sn, c->hq, h->dv);
    int64_t ls[3] = {c->batch, c->hq, c->sn};
    a->lse = fa_tensor_contiguous(track(x, dev(ctx, NULL, sizeof(float) * (size_t)(c->batch * c->hq * c->sn))),
                                  F32, 3, ls);
    a->opts = fa_options_default();
    a->opts.causal = c->causal;
    a->opts.window_left = c->left;
    a->opts.window_right = c->right;
    a->opts.softcap = c->softcap;
    a->num_splits = c->splits;
    if (h->sink)
        a->opts.learnable_sink = track(x, dev(ctx, h->sink, sizeof(float) * (size_t)c->hq));
    if (h->slopes) {
        a->opts.alibi_slopes = track(x, dev(ctx, h->slopes, sizeof(float) * (size_t)((c->alibi == 2 ? c->batch : 1) * c->hq)));
        a->opts.alibi_batch_stride = h->slope_stride;
    }
    a->check_on_device = device_check;
    for (int i = 0; i < x->n; ++i)
        if (!x->ptr[i])
            return 0;
    return 1;
}

void free_dev(fa_context *ctx, dev_case *x)
{
    for (int i = 0; i < x->n; ++i)
        if (x->ptr[i])
            fa_free(ctx, x->ptr[i]);
}

void *back(fa_context *ctx, const void *src, size_t n)
{
    void *p = malloc(n ? n : 4);
    if (n && fa_memcpy(ctx, p, src, n, FA_COPY_DEVICE_TO_HOST) != FA_SUCCESS) {
        free(p);
        return NULL;
    }
    return p;
}
