/* ring.c: context-parallel (ring) attention over a caller's transport, the host versions of its
 * element-wise steps, and an in-process transport whose ranks are threads (the CPU simulation).
 * Every rank holds a shard of Q and of K / V; K / V shards travel the ring one step at a time (the
 * next step's transfer started before the current step's attention, so that it overlaps), each
 * rank runs fa_forward of its Q chunks against the K / V chunks it holds (full, causal or skipped
 * by their places in the sequence) with fp32 outputs, and merges the partial outputs with the
 * log-sum-exp rule (core/softmax.h) in fp32. The backward runs fa_backward per chunk pair with the
 * merged O and LSE (so P and D are the whole sequence's); dK / dV (fp32) follow their K / V one
 * step behind and arrive home after `size` steps. The partial outputs and gradients are never
 * rounded to the dtype, only the final ones, once, as on one device (rounding each partial to
 * bf16 measurably breaks the conformance pass rule: 3 ranks, zigzag, causal). The schedule is
 * the same on every backend; the element-wise steps are the backend's (fa_backend.ring_*). */
#include "half.h"
#include "internal.h"
#include "softmax.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- the shard's chunks */

typedef struct ring_chunk {
    int64_t place; /* index of the chunk in the sequence (chunks of one layout have one length) */
    int64_t row0, rows;
} ring_chunk;

static int chunks_of(fa_ring_layout layout, int rank, int size, int64_t n, ring_chunk out[2])
{
    if (layout == FA_RING_CONTIGUOUS) {
        out[0] = (ring_chunk){rank, 0, n};
        return 1;
    }
    out[0] = (ring_chunk){rank, 0, n / 2};
    out[1] = (ring_chunk){2 * (int64_t)size - 1 - rank, n / 2, n / 2};
    return 2;
}

/* -1: the pair sees nothing (keys after the queries under causal); 0: every key; 1: causal
 * within the chunk (the same tokens on both sides). At step 0 (a rank's own K / V) chunk i of Q
 * and chunk i of K are the same tokens, so every Q chunk and every K chunk has a pair then: the
 * first pair of each writes its accumulator directly (no zero fill needed). */
static int pair_mask(int causal, const ring_chunk *qc, const ring_chunk *kc)
{
    if (!causal || kc->place < qc->place)
        return 0;
    return kc->place == qc->place ? 1 : -1;
}

/* ---------------------------------------------------------------- views */

/* Rows [row0, row0 + rows) of a [batch, seq, heads, d] view (or of an LSE [batch, heads, seq]
 * view, seq_dim 2). */
static fa_tensor rows_of(const fa_tensor *t, int seq_dim, int64_t row0, int64_t rows)
{
    fa_tensor r = *t;
    r.data = (char *)t->data + row0 * t->stride[seq_dim] * (int64_t)fa_dtype_size(t->dtype);
    r.shape[seq_dim] = rows;
    return r;
}

/* A contiguous [b, n, h, d] tensor at data. */
static fa_tensor dense4(void *data, fa_dtype dt, int64_t b, int64_t n, int64_t h, int64_t d)
{
    const int64_t shape[4] = {b, n, h, d};
    return fa_tensor_contiguous(data, dt, 4, shape);
}

static fa_tensor dense3(void *data, int64_t b, int64_t h, int64_t n)
{
    const int64_t shape[3] = {b, h, n};
    return fa_tensor_contiguous(data, FA_DTYPE_F32, 3, shape);
}

/* ---------------------------------------------------------------- host element-wise steps */

static int64_t off4(const fa_tensor *t, int64_t i0, int64_t i1, int64_t i2)
{
    return i0 * t->stride[0] + i1 * t->stride[1] + i2 * t->stride[2];
}

fa_status fa_host_ring_copy(fa_context *ctx, const fa_tensor *dst, const fa_tensor *src)
{
    (void)ctx;
    const int four = src->ndim == 4;
    const int64_t inner = four ? src->shape[3] : src->shape[2];
    for (int64_t a = 0; a < src->shape[0]; ++a)
        for (int64_t b = 0; b < src->shape[1]; ++b)
            for (int64_t c = 0; c < (four ? src->shape[2] : 1); ++c) {
                const int64_t so = four ? off4(src, a, b, c) : a * src->stride[0] + b * src->stride[1];
                const int64_t d_o = four ? off4(dst, a, b, c) : a * dst->stride[0] + b * dst->stride[1];
                const int64_t ss = four ? 1 : src->stride[2], ds = four ? 1 : dst->stride[2];
                for (int64_t e = 0; e < inner; ++e)
                    fa_store_elem(dst->dtype, dst->data, d_o + e * ds, fa_load_elem(src->dtype, src->data, so + e * ss));
            }
    return FA_SUCCESS;
}

fa_status fa_host_ring_merge(fa_context *ctx, const fa_tensor *o, const fa_tensor *lse, const fa_tensor *o_part,
                             const fa_tensor *lse_part)
{
    (void)ctx;
    const int64_t d = o->shape[3];
    for (int64_t b = 0; b < o->shape[0]; ++b)
        for (int64_t s = 0; s < o->shape[1]; ++s)
            for (int64_t h = 0; h < o->shape[2]; ++h) {
                float *acc = (float *)o->data + off4(o, b, s, h);
                const float *part = (const float *)o_part->data + off4(o_part, b, s, h);
                float *l = (float *)lse->data + b * lse->stride[0] + h * lse->stride[1] + s * lse->stride[2];
                const float lp =
                    ((const float *)lse_part->data)[b * lse_part->stride[0] + h * lse_part->stride[1] + s * lse_part->stride[2]];
                *l = fa_softmax_merge(*l, acc, lp, part, acc, d);
            }
    return FA_SUCCESS;
}

fa_status fa_host_ring_add(fa_context *ctx, const fa_tensor *acc, const fa_tensor *part)
{
    (void)ctx;
    for (int64_t b = 0; b < acc->shape[0]; ++b)
        for (int64_t s = 0; s < acc->shape[1]; ++s)
            for (int64_t h = 0; h < acc->shape[2]; ++h) {
                float *a = (float *)acc->data + off4(acc, b, s, h);
                const float *p = (const float *)part->data + off4(part, b, s, h);
                for (int64_t e = 0; e < acc->shape[3]; ++e)
                    a[e] += p[e];
            }
    return FA_SUCCESS;
}

/* ---------------------------------------------------------------- checks shared by both passes */

typedef struct ring_call {
    fa_context *ctx;
    const fa_ring_comm *comm;
    fa_ring_layout layout;
    fa_problem p;
    int32_t *cu_host;
    void *stream;
    void *bufs[9]; /* the call's buffers in the context's memory */
    int nbufs;
} ring_call;

/* The communicator itself: when it is bad no rank can be told, so nothing is exchanged. */
static fa_status comm_check(fa_context *ctx, const fa_ring_comm *c)
{
    if (!c || !c->start || !c->finish || !c->agree || c->size < 1 || c->rank < 0 || c->rank >= c->size)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG,
                        "ring: comm is NULL, lacks start / finish / agree, or rank %d / size %d is invalid",
                        c ? c->rank : -1, c ? c->size : -1);
    return FA_SUCCESS;
}

static fa_status ring_check(ring_call *rc, const fa_options *o, const fa_varlen *varlen)
{
    fa_context *ctx = rc->ctx;
    if (rc->layout != FA_RING_CONTIGUOUS && rc->layout != FA_RING_ZIGZAG)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "ring: unknown layout %d", (int)rc->layout);
    const fa_backend *be = ctx->backend;
    if (!be->ring_copy || !be->ring_merge || !be->ring_add)
        return FA_ERROR(ctx, FA_ERR_UNSUPPORTED, "ring: the %s backend has no ring attention (cpu and cuda have it)",
                        be->name);
    if (varlen || o->block_mask || o->dropout_p != 0.0f || o->window_left >= 0 || o->window_right >= 0)
        return FA_ERROR(ctx, FA_ERR_UNSUPPORTED, "ring: varlen, block masks, dropout and windows are not supported");
    if (o->alibi_slopes)
        return FA_ERROR(ctx, FA_ERR_UNSUPPORTED, "ring: ALiBi is not supported (its distance needs global positions)");
    const fa_problem *p = &rc->p;
    if (p->out_dtype != p->dtype)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "ring: the outputs must have the inputs' dtype (%s)",
                        fa_dtype_name(p->dtype));
    if (p->causal && p->seqlen_q != p->seqlen_k)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "ring: causal needs self-attention shards (n_q %lld != n_k %lld)",
                        (long long)p->seqlen_q, (long long)p->seqlen_k);
    if (rc->layout == FA_RING_ZIGZAG && (p->seqlen_q % 2 || p->seqlen_k % 2))
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "ring: the zigzag layout needs even shards (n_q %lld, n_k %lld)",
                        (long long)p->seqlen_q, (long long)p->seqlen_k);
    return FA_SUCCESS;
}

/* The verdict of every rank: a rank whose own status failed keeps it, the others get `others`
 * naming the ring. */
static fa_status ring_agree(ring_call *rc, fa_status mine, fa_status others, const char *what)
{
    int all_ok = 0;
    if (rc->comm->agree(rc->comm->user, mine == FA_SUCCESS, &all_ok) != 0)
        return mine != FA_SUCCESS ? mine
                                  : FA_ERROR(rc->ctx, FA_ERR_BACKEND, "ring: rank %d: the transport's agree failed",
                                             rc->comm->rank);
    if (mine != FA_SUCCESS)
        return mine;
    if (!all_ok)
        return FA_ERROR(rc->ctx, others, "ring: another rank %s", what);
    return FA_SUCCESS;
}

/* The checks both passes start with (the communicator has passed comm_check): the arguments
 * through the single-device validation (fwd or bwd), then what the ring supports. */
static fa_status ring_begin(ring_call *rc, const fa_fwd_args *fwd, const fa_bwd_args *bwd)
{
    fa_context *ctx = rc->ctx;
    fa_status st;
    if (!fwd && !bwd)
        st = FA_ERROR(ctx, FA_ERR_INVALID_ARG, "ring: args is NULL");
    else
        st = fwd ? fa_validate_forward(ctx, fwd, &rc->p, &rc->cu_host) : fa_validate_backward(ctx, bwd, &rc->p, &rc->cu_host);
    free(rc->cu_host);
    rc->cu_host = NULL;
    if (st == FA_SUCCESS)
        st = ring_check(rc, fwd ? &fwd->opts : &bwd->opts, fwd ? fwd->varlen : bwd->varlen);
    rc->stream = ctx->backend->stream ? ctx->backend->stream(ctx) : NULL;
    return st;
}

/* A buffer of count elements of elem bytes in the context's memory, released by ring_end. */
static void *ring_alloc(ring_call *rc, int64_t count, size_t elem, fa_status *st)
{
    void *ptr = NULL;
    if (*st != FA_SUCCESS)
        return NULL;
    if (count < 0 || (uint64_t)count > SIZE_MAX / elem / 2 || rc->nbufs == (int)(sizeof rc->bufs / sizeof rc->bufs[0])) {
        *st = FA_ERROR(rc->ctx, FA_ERR_OVERFLOW, "ring: a shard buffer of %lld elements", (long long)count);
        return NULL;
    }
    if ((*st = fa_malloc(rc->ctx, (size_t)(count > 0 ? count : 1) * elem, &ptr)) != FA_SUCCESS)
        return NULL;
    rc->bufs[rc->nbufs++] = ptr;
    return ptr;
}

/* Waits for the queued work (so no buffer is freed under it) and frees the buffers. */
static fa_status ring_end(ring_call *rc, fa_status st)
{
    const fa_status s = rc->nbufs ? fa_synchronize(rc->ctx) : FA_SUCCESS;
    if (st == FA_SUCCESS)
        st = s;
    for (int i = 0; i < rc->nbufs; ++i)
        fa_free(rc->ctx, rc->bufs[i]);
    return st;
}

/* The transport's start / finish; a failure of the transport itself ends the call (*broken). */
static void ring_start(ring_call *rc, int channel, const void *send, void *recv, size_t bytes, fa_status *st,
                       int *broken)
{
    if (*broken || rc->comm->start(rc->comm->user, channel, send, recv, bytes, rc->stream) == 0)
        return;
    *broken = 1;
    if (*st == FA_SUCCESS)
        *st = FA_ERROR(rc->ctx, FA_ERR_BACKEND, "ring: rank %d: the transport's start failed", rc->comm->rank);
}

static void ring_finish(ring_call *rc, int channel, fa_status *st, int *broken)
{
    if (*broken || rc->comm->finish(rc->comm->user, channel, rc->stream) == 0)
        return;
    *broken = 1;
    if (*st == FA_SUCCESS)
        *st = FA_ERROR(rc->ctx, FA_ERR_BACKEND, "ring: rank %d: the transport's finish failed", rc->comm->rank);
}

/* K and V of a shard into a contiguous bundle [K | V] in the dtype (the unit that travels) */
static fa_status pack_kv(ring_call *rc, const fa_tensor *k, const fa_tensor *v, void *bundle)
{
    const fa_problem *p = &rc->p;
    const int64_t kv = p->batch * p->seqlen_k * p->heads_kv * p->d;
    const fa_tensor kt = dense4(bundle, p->dtype, p->batch, p->seqlen_k, p->heads_kv, p->d);
    const fa_tensor vt = dense4((char *)bundle + kv * (int64_t)fa_dtype_size(p->dtype), p->dtype, p->batch,
                                p->seqlen_k, p->heads_kv, p->d_v);
    fa_status st = rc->ctx->backend->ring_copy(rc->ctx, &kt, k);
    return st == FA_SUCCESS ? rc->ctx->backend->ring_copy(rc->ctx, &vt, v) : st;
}

/* ---------------------------------------------------------------- forward */

fa_status fa_ring_forward(fa_context *ctx, const fa_ring_comm *comm, fa_ring_layout layout, const fa_fwd_args *args)
{
    if (!ctx)
        return FA_ERR_INVALID_ARG;
    fa_clear_error(ctx);
    fa_status st = comm_check(ctx, comm); /* a bad communicator: nothing can be exchanged */
    if (st != FA_SUCCESS)
        return st;
    ring_call rc = {.ctx = ctx, .comm = comm, .layout = layout};
    st = ring_begin(&rc, args, NULL);
    const fa_problem *p = &rc.p;
    const fa_backend *be = ctx->backend;
    const int64_t B = p->batch, H = p->heads_q, HK = p->heads_kv, D = p->d, DV = p->d_v, NQ = p->seqlen_q,
                  NK = p->seqlen_k;
    const fa_dtype F = FA_DTYPE_F32;
    const size_t es = fa_dtype_size(p->dtype);
    const int64_t kv = B * NK * HK * D, kvv = B * NK * HK * DV; /* elements of one K, one V shard */
    float *oacc = ring_alloc(&rc, B * NQ * H * DV, sizeof(float), &st);
    float *lacc = ring_alloc(&rc, B * H * NQ, sizeof(float), &st);
    float *opart = ring_alloc(&rc, B * NQ * H * DV, sizeof(float), &st);
    float *lpart = ring_alloc(&rc, B * H * NQ, sizeof(float), &st);
    unsigned char *bundle[2] = {ring_alloc(&rc, kv + kvv, es, &st), ring_alloc(&rc, kv + kvv, es, &st)};
    st = ring_agree(&rc, st, FA_ERR_INVALID_ARG, "rejected its arguments or could not allocate");
    if (st != FA_SUCCESS)
        return ring_end(&rc, st);
    st = pack_kv(&rc, &args->k, &args->v, bundle[0]);
    const fa_tensor ot = dense4(oacc, F, B, NQ, H, DV), lt = dense3(lacc, B, H, NQ);
    ring_chunk qc[2], kc[2];
    const int nq = chunks_of(layout, comm->rank, comm->size, NQ, qc);
    int cur = 0, broken = 0, done[2] = {0, 0};
    for (int step = 0; step < comm->size && !broken; ++step) {
        if (step > 0)
            ring_finish(&rc, 0, &st, &broken); /* this step's K / V have arrived */
        if (step + 1 < comm->size) /* the next step's move under this step's attention */
            ring_start(&rc, 0, bundle[cur], bundle[1 - cur], (size_t)(kv + kvv) * es, &st, &broken);
        const int src = (comm->rank - step + comm->size) % comm->size;
        const int nk = chunks_of(layout, src, comm->size, NK, kc);
        const fa_tensor kt = dense4(bundle[cur], p->dtype, B, NK, HK, D);
        const fa_tensor vt = dense4(bundle[cur] + kv * (int64_t)es, p->dtype, B, NK, HK, DV);
        for (int i = 0; i < nq && st == FA_SUCCESS; ++i)
            for (int j = 0; j < nk && st == FA_SUCCESS; ++j) {
                const int m = pair_mask(p->causal, &qc[i], &kc[j]);
                if (m < 0)
                    continue;
                fa_fwd_args a = *args;
                a.q = rows_of(&args->q, 1, qc[i].row0, qc[i].rows);
                a.k = rows_of(&kt, 1, kc[j].row0, kc[j].rows);
                a.v = rows_of(&vt, 1, kc[j].row0, kc[j].rows);
                const fa_tensor oi = rows_of(&ot, 1, qc[i].row0, qc[i].rows), li = rows_of(&lt, 2, qc[i].row0, qc[i].rows);
                a.o = done[i] ? dense4(opart, F, B, qc[i].rows, H, DV) : oi;
                a.lse = done[i] ? dense3(lpart, B, H, qc[i].rows) : li;
                a.opts.causal = m;
                /* the sink joins each query row's softmax once: in the chunk's first part */
                a.opts.learnable_sink = done[i] ? NULL : args->opts.learnable_sink;
                st = fa_forward(ctx, &a);
                if (st == FA_SUCCESS && done[i])
                    st = be->ring_merge(ctx, &oi, &li, &a.o, &a.lse);
                done[i] = 1;
            }
        cur = 1 - cur;
    }
    if (!broken) /* a rank that failed has still moved every shard along, so the others did not wait */
        st = ring_agree(&rc, st, FA_ERR_BACKEND, "failed during the ring");
    if (st == FA_SUCCESS)
        st = be->ring_copy(ctx, &args->o, &ot);
    if (st == FA_SUCCESS && args->lse.data)
        st = be->ring_copy(ctx, &args->lse, &lt);
    return ring_end(&rc, st);
}

/* ---------------------------------------------------------------- backward */

fa_status fa_ring_backward(fa_context *ctx, const fa_ring_comm *comm, fa_ring_layout layout, const fa_bwd_args *args)
{
    if (!ctx)
        return FA_ERR_INVALID_ARG;
    fa_clear_error(ctx);
    fa_status st = comm_check(ctx, comm); /* a bad communicator: nothing can be exchanged */
    if (st != FA_SUCCESS)
        return st;
    ring_call rc = {.ctx = ctx, .comm = comm, .layout = layout};
    st = ring_begin(&rc, NULL, args);
    const fa_problem *p = &rc.p;
    const fa_backend *be = ctx->backend;
    const int64_t B = p->batch, H = p->heads_q, HK = p->heads_kv, D = p->d, DV = p->d_v, NQ = p->seqlen_q,
                  NK = p->seqlen_k;
    const fa_dtype F = FA_DTYPE_F32;
    const size_t es = fa_dtype_size(p->dtype);
    const int64_t kv = B * NK * HK * D, kvv = B * NK * HK * DV;
    const size_t grad_bytes = (size_t)(kv + kvv) * sizeof(float); /* dK | dV, fp32 */
    float *dqacc = ring_alloc(&rc, B * NQ * H * D, sizeof(float), &st);
    float *dqpart = ring_alloc(&rc, B * NQ * H * D, sizeof(float), &st);
    unsigned char *bundle[2] = {ring_alloc(&rc, kv + kvv, es, &st), ring_alloc(&rc, kv + kvv, es, &st)};
    float *grad[2] = {ring_alloc(&rc, kv + kvv, sizeof(float), &st), ring_alloc(&rc, kv + kvv, sizeof(float), &st)};
    float *gpart = ring_alloc(&rc, kv + kvv, sizeof(float), &st);    /* this step's dK | dV of the visiting shard */
    float *gscratch = ring_alloc(&rc, kv + kvv, sizeof(float), &st); /* one pair's, when a chunk has two pairs */
    /* dsink: each query chunk's rows give a part (in its first pair); the zigzag layout's second
     * chunk's part lands here and is added */
    float *dsink_part = args && args->dsink.data && layout == FA_RING_ZIGZAG ? ring_alloc(&rc, H, sizeof(float), &st)
                                                                            : NULL;
    st = ring_agree(&rc, st, FA_ERR_INVALID_ARG, "rejected its arguments or could not allocate");
    if (st != FA_SUCCESS)
        return ring_end(&rc, st);
    st = pack_kv(&rc, &args->k, &args->v, bundle[0]);
    const fa_tensor dqt = dense4(dqacc, F, B, NQ, H, D);
    ring_chunk qc[2], kc[2];
    const int nq = chunks_of(layout, comm->rank, comm->size, NQ, qc);
    int cur = 0, gcur = 0, broken = 0, qdone[2] = {0, 0};
    for (int step = 0; step < comm->size && !broken; ++step) {
        if (step > 0)
            ring_finish(&rc, 0, &st, &broken);
        if (step + 1 < comm->size)
            ring_start(&rc, 0, bundle[cur], bundle[1 - cur], (size_t)(kv + kvv) * es, &st, &broken);
        const int src = (comm->rank - step + comm->size) % comm->size;
        const int nk = chunks_of(layout, src, comm->size, NK, kc);
        const fa_tensor kt = dense4(bundle[cur], p->dtype, B, NK, HK, D);
        const fa_tensor vt = dense4(bundle[cur] + kv * (int64_t)es, p->dtype, B, NK, HK, DV);
        /* step 0 accumulates into the shard's own travelling dK | dV, later steps into gpart
         * (the travelling one is still arriving) */
        float *gdst = step == 0 ? grad[gcur] : gpart;
        const fa_tensor dkt = dense4(gdst, F, B, NK, HK, D), dvt = dense4(gdst + kv, F, B, NK, HK, DV);
        const fa_tensor dks = dense4(gscratch, F, B, NK, HK, D), dvs = dense4(gscratch + kv, F, B, NK, HK, DV);
        int kdone[2] = {0, 0};
        for (int i = 0; i < nq && st == FA_SUCCESS; ++i)
            for (int j = 0; j < nk && st == FA_SUCCESS; ++j) {
                const int m = pair_mask(p->causal, &qc[i], &kc[j]);
                if (m < 0)
                    continue;
                fa_bwd_args a = *args;
                a.q = rows_of(&args->q, 1, qc[i].row0, qc[i].rows);
                a.o = rows_of(&args->o, 1, qc[i].row0, qc[i].rows);
                a.dout = rows_of(&args->dout, 1, qc[i].row0, qc[i].rows);
                a.lse = rows_of(&args->lse, 2, qc[i].row0, qc[i].rows);
                a.k = rows_of(&kt, 1, kc[j].row0, kc[j].rows);
                a.v = rows_of(&vt, 1, kc[j].row0, kc[j].rows);
                const fa_tensor dqi = rows_of(&dqt, 1, qc[i].row0, qc[i].rows);
                const fa_tensor dkj = rows_of(&dkt, 1, kc[j].row0, kc[j].rows), dvj = rows_of(&dvt, 1, kc[j].row0, kc[j].rows);
                a.dq = qdone[i] ? dense4(dqpart, F, B, qc[i].rows, H, D) : dqi;
                a.dk = kdone[j] ? rows_of(&dks, 1, kc[j].row0, kc[j].rows) : dkj;
                a.dv = kdone[j] ? rows_of(&dvs, 1, kc[j].row0, kc[j].rows) : dvj;
                a.opts.causal = m;
                /* dsink from each query row once, in its chunk's first pair; this rank's rows only */
                a.opts.learnable_sink = qdone[i] ? NULL : args->opts.learnable_sink;
                a.dsink.data = NULL;
                if (!qdone[i] && args->dsink.data) {
                    a.dsink = args->dsink;
                    if (i == 1)
                        a.dsink.data = dsink_part;
                }
                st = fa_backward(ctx, &a);
                if (st == FA_SUCCESS && a.dsink.data && i == 1) {
                    const fa_tensor total = dense4(args->dsink.data, F, 1, 1, 1, H), part = dense4(dsink_part, F, 1, 1, 1, H);
                    st = be->ring_add(ctx, &total, &part);
                }
                if (st == FA_SUCCESS && qdone[i])
                    st = be->ring_add(ctx, &dqi, &a.dq);
                if (st == FA_SUCCESS && kdone[j])
                    st = be->ring_add(ctx, &dkj, &a.dk);
                if (st == FA_SUCCESS && kdone[j])
                    st = be->ring_add(ctx, &dvj, &a.dv);
                qdone[i] = kdone[j] = 1;
            }
        if (step > 0) { /* the shard's dK | dV so far, from the previous rank, plus this step's */
            ring_finish(&rc, 1, &st, &broken);
            const fa_tensor gk = dense4(grad[gcur], F, B, NK, HK, D), gv = dense4(grad[gcur] + kv, F, B, NK, HK, DV);
            for (int j = 0; j < nk && st == FA_SUCCESS; ++j)
                if (kdone[j]) {
                    const fa_tensor a0 = rows_of(&gk, 1, kc[j].row0, kc[j].rows), a1 = rows_of(&gv, 1, kc[j].row0, kc[j].rows);
                    const fa_tensor p0 = rows_of(&dkt, 1, kc[j].row0, kc[j].rows), p1 = rows_of(&dvt, 1, kc[j].row0, kc[j].rows);
                    st = be->ring_add(ctx, &a0, &p0);
                    if (st == FA_SUCCESS)
                        st = be->ring_add(ctx, &a1, &p1);
                }
        }
        /* size sends in all: after the last, each shard's dK | dV is back at its owner */
        if (comm->size > 1) {
            ring_start(&rc, 1, grad[gcur], grad[1 - gcur], grad_bytes, &st, &broken);
            gcur = 1 - gcur;
        }
        cur = 1 - cur;
    }
    if (comm->size > 1)
        ring_finish(&rc, 1, &st, &broken);
    if (!broken)
        st = ring_agree(&rc, st, FA_ERR_BACKEND, "failed during the ring");
    if (st == FA_SUCCESS) {
        const fa_tensor gk = dense4(grad[gcur], F, B, NK, HK, D), gv = dense4(grad[gcur] + kv, F, B, NK, HK, DV);
        st = be->ring_copy(ctx, &args->dq, &dqt);
        if (st == FA_SUCCESS)
            st = be->ring_copy(ctx, &args->dk, &gk);
        if (st == FA_SUCCESS)
            st = be->ring_copy(ctx, &args->dv, &gv);
    }
    return ring_end(&rc, st);
}

/* ---------------------------------------------------------------- the in-process transport */

typedef struct ring_rank {
    struct fa_ring_local *ring;
    int rank;
} ring_rank;

struct fa_ring_local {
    int size;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int arrived;
    uint64_t generation;
    const void **send;
    size_t *bytes;
    int *ok;
    ring_rank *ranks;
};

static void local_barrier(fa_ring_local *r)
{
    pthread_mutex_lock(&r->mu);
    const uint64_t g = r->generation;
    if (++r->arrived == r->size) {
        r->arrived = 0;
        r->generation++;
        pthread_cond_broadcast(&r->cv);
    } else {
        while (g == r->generation)
            pthread_cond_wait(&r->cv, &r->mu);
    }
    pthread_mutex_unlock(&r->mu);
}

/* Publish the send buffer, wait for every rank, copy the previous rank's, wait again (so that no
 * send buffer is reused before it has been read). The transfer is done when this returns. */
static int local_start(void *user, int channel, const void *send, void *recv, size_t bytes, void *stream)
{
    (void)channel;
    (void)stream;
    ring_rank *me = user;
    fa_ring_local *r = me->ring;
    r->send[me->rank] = send;
    r->bytes[me->rank] = bytes;
    local_barrier(r);
    const int prev = (me->rank + r->size - 1) % r->size;
    int same = 1;
    for (int i = 0; i < r->size; ++i)
        same = same && r->bytes[i] == bytes;
    if (same && bytes)
        memcpy(recv, r->send[prev], bytes);
    local_barrier(r);
    return same ? 0 : -1;
}

static int local_finish(void *user, int channel, void *stream)
{
    (void)user;
    (void)channel;
    (void)stream;
    return 0;
}

static int local_agree(void *user, int ok, int *all_ok)
{
    ring_rank *me = user;
    fa_ring_local *r = me->ring;
    r->ok[me->rank] = ok;
    local_barrier(r);
    int all = 1;
    for (int i = 0; i < r->size; ++i)
        all = all && r->ok[i];
    local_barrier(r);
    *all_ok = all;
    return 0;
}

fa_status fa_ring_local_create(fa_ring_local **ring, int size)
{
    if (!ring || size < 1 || size > 4096)
        return FA_ERR_INVALID_ARG;
    *ring = NULL;
    fa_ring_local *r = calloc(1, sizeof *r);
    if (!r)
        return FA_ERR_OUT_OF_MEMORY;
    r->size = size;
    r->send = calloc((size_t)size, sizeof *r->send);
    r->bytes = calloc((size_t)size, sizeof *r->bytes);
    r->ok = calloc((size_t)size, sizeof *r->ok);
    r->ranks = calloc((size_t)size, sizeof *r->ranks);
    int mu = -1, cv = -1;
    if (r->send && r->bytes && r->ok && r->ranks && (mu = pthread_mutex_init(&r->mu, NULL)) == 0)
        cv = pthread_cond_init(&r->cv, NULL);
    if (cv != 0) {
        if (mu == 0)
            pthread_mutex_destroy(&r->mu);
        free(r->send);
        free(r->bytes);
        free(r->ok);
        free(r->ranks);
        free(r);
        return FA_ERR_OUT_OF_MEMORY;
    }
    for (int i = 0; i < size; ++i)
        r->ranks[i] = (ring_rank){r, i};
    *ring = r;
    return FA_SUCCESS;
}

fa_ring_comm fa_ring_local_comm(fa_ring_local *ring, int rank)
{
    fa_ring_comm c;
    memset(&c, 0, sizeof c);
    c.rank = rank;
    c.size = ring ? ring->size : 0;
    if (ring && rank >= 0 && rank < ring->size) {
        c.start = local_start;
        c.finish = local_finish;
        c.agree = local_agree;
        c.user = &ring->ranks[rank];
    }
    return c;
}

void fa_ring_local_destroy(fa_ring_local *ring)
{
    if (!ring)
        return;
    pthread_cond_destroy(&ring->cv);
    pthread_mutex_destroy(&ring->mu);
    free(ring->send);
    free(ring->bytes);
    free(ring->ok);
    free(ring->ranks);
    free(ring);
}

/* ---------------------------------------------------------------- without NCCL */

#ifndef FA_HAVE_NCCL /* built without nccl.h (-Dnccl=disabled or not found): backends/cuda/nccl.c is not compiled */
fa_status fa_ring_nccl_unique_id(unsigned char id[FA_RING_NCCL_ID_BYTES])
{
    (void)id;
    return FA_ERR_NO_BACKEND;
}

fa_status fa_ring_nccl_create(fa_ring_nccl **ring, fa_context *ctx, const unsigned char id[FA_RING_NCCL_ID_BYTES],
                              int rank, int size)
{
    (void)id;
    (void)rank;
    (void)size;
    if (ring)
        *ring = NULL;
    if (!ring || !ctx)
        return FA_ERR_INVALID_ARG;
    return FA_ERROR(ctx, FA_ERR_NO_BACKEND, "ring nccl: this build of flashattn has no NCCL transport (-Dnccl)");
}

fa_ring_comm fa_ring_nccl_comm(fa_ring_nccl *ring)
{
    (void)ring;
    fa_ring_comm c;
    memset(&c, 0, sizeof c);
    return c;
}

void fa_ring_nccl_destroy(fa_ring_nccl *ring)
{
    (void)ring;
}
#endif
