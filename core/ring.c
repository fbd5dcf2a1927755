/* ring.c: context-parallel (ring) attention over a caller's transport, and an in-process
 * transport whose ranks are threads (the CPU simulation). Every rank holds a shard of Q and of
 * K / V; K / V shards travel the ring one step at a time, each rank runs fa_forward of its Q
 * chunks against the K / V chunks it holds (full, causal or skipped by their places in the
 * sequence) and merges the partial outputs with the log-sum-exp rule (core/softmax.h) in fp32.
 * The backward runs fa_backward per chunk pair with the merged O and LSE (so P and D are the
 * whole sequence's); dK / dV ride the ring with their K / V in fp32 and arrive home after `size`
 * steps. Host memory only for now (the CPU backend): the merge is host code. The CPU backend's
 * kernels compute in fp32 whatever the storage dtype, so the chunk pairs run on fp32 copies of the
 * shards (exact for fp16 / bf16 inputs): the partial outputs and gradients are never rounded to
 * the dtype, only the final ones, once, as on one device. */
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
 * within the chunk (the same tokens on both sides). */
static int pair_mask(int causal, const ring_chunk *qc, const ring_chunk *kc)
{
    if (!causal || kc->place < qc->place)
        return 0;
    return kc->place == qc->place ? 1 : -1;
}

/* ---------------------------------------------------------------- host tensors */

/* Rows [row0, row0 + rows) of a [batch, seq, heads, d] view (or of an LSE [batch, heads, seq]
 * view, seq_dim 2). */
static fa_tensor rows_of(const fa_tensor *t, int seq_dim, int64_t row0, int64_t rows)
{
    fa_tensor r = *t;
    r.data = (char *)t->data + row0 * t->stride[seq_dim] * (int64_t)fa_dtype_size(t->dtype);
    r.shape[seq_dim] = rows;
    return r;
}

/* A contiguous [b, n, h, d] tensor over host memory at data. */
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

/* dst (contiguous fp32 or dtype) <-> a strided [b, n, h, d] view, element by element */
static void gather(const fa_tensor *src, void *dst, fa_dtype dst_dt)
{
    int64_t i = 0;
    for (int64_t b = 0; b < src->shape[0]; ++b)
        for (int64_t s = 0; s < src->shape[1]; ++s)
            for (int64_t h = 0; h < src->shape[2]; ++h) {
                const int64_t o = b * src->stride[0] + s * src->stride[1] + h * src->stride[2];
                for (int64_t c = 0; c < src->shape[3]; ++c, ++i)
                    fa_store_elem(dst_dt, dst, i, fa_load_elem(src->dtype, src->data, o + c));
            }
}

static void scatter(const float *src, const fa_tensor *dst)
{
    int64_t i = 0;
    for (int64_t b = 0; b < dst->shape[0]; ++b)
        for (int64_t s = 0; s < dst->shape[1]; ++s)
            for (int64_t h = 0; h < dst->shape[2]; ++h) {
                const int64_t o = b * dst->stride[0] + s * dst->stride[1] + h * dst->stride[2];
                for (int64_t c = 0; c < dst->shape[3]; ++c, ++i)
                    fa_store_elem(dst->dtype, dst->data, o + c, src[i]);
            }
}

/* acc[b, row0 + s, h, :] += part[b, s, h, :] (part contiguous [b, rows, h, d]) */
static void accumulate(float *acc, int64_t n, const float *part, int64_t b_, int64_t row0, int64_t rows, int64_t h_,
                       int64_t d)
{
    for (int64_t b = 0; b < b_; ++b)
        for (int64_t s = 0; s < rows; ++s) {
            float *a = acc + ((b * n + row0 + s) * h_) * d;
            const int64_t p = ((b * rows + s) * h_) * d;
            for (int64_t e = 0; e < h_ * d; ++e)
                a[e] += part[p + e];
        }
}

/* ---------------------------------------------------------------- checks shared by both passes */

typedef struct ring_call {
    fa_context *ctx;
    const fa_ring_comm *comm;
    fa_ring_layout layout;
    fa_problem p;
    int32_t *cu_host;
} ring_call;

/* The communicator itself: when it is bad no rank can be told, so nothing is exchanged. */
static fa_status comm_check(fa_context *ctx, const fa_ring_comm *c)
{
    if (!c || !c->sendrecv || c->size < 1 || c->rank < 0 || c->rank >= c->size)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "ring: comm is NULL, has no sendrecv, or rank %d / size %d is invalid",
                        c ? c->rank : -1, c ? c->size : -1);
    return FA_SUCCESS;
}

static fa_status ring_check(ring_call *rc, const fa_options *o, const fa_varlen *varlen)
{
    fa_context *ctx = rc->ctx;
    if (rc->layout != FA_RING_CONTIGUOUS && rc->layout != FA_RING_ZIGZAG)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "ring: unknown layout %d", (int)rc->layout);
    if (strcmp(ctx->backend->name, "cpu") != 0)
        return FA_ERROR(ctx, FA_ERR_UNSUPPORTED, "ring: the %s backend has no ring attention yet (cpu only)",
                        ctx->backend->name);
    if (varlen || o->block_mask || o->dropout_p != 0.0f || o->window_left >= 0 || o->window_right >= 0)
        return FA_ERROR(ctx, FA_ERR_UNSUPPORTED, "ring: varlen, block masks, dropout and windows are not supported");
    const fa_problem *p = &rc->p;
    if (p->causal && p->seqlen_q != p->seqlen_k)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "ring: causal needs self-attention shards (n_q %lld != n_k %lld)",
                        (long long)p->seqlen_q, (long long)p->seqlen_k);
    if (rc->layout == FA_RING_ZIGZAG && (p->seqlen_q % 2 || p->seqlen_k % 2))
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "ring: the zigzag layout needs even shards (n_q %lld, n_k %lld)",
                        (long long)p->seqlen_q, (long long)p->seqlen_k);
    return FA_SUCCESS;
}

/* the transport: 0 bytes carry only the verdicts */
static fa_status ring_exchange(ring_call *rc, const void *send, void *recv, size_t bytes, int ok, int *all_ok)
{
    *all_ok = 0;
    if (rc->comm->sendrecv(rc->comm->user, send, recv, bytes, ok, all_ok) != 0)
        return FA_ERROR(rc->ctx, FA_ERR_BACKEND, "ring: rank %d: the transport's sendrecv failed", rc->comm->rank);
    return FA_SUCCESS;
}

/* The verdict of every rank on its arguments: a rank whose arguments failed keeps its own status,
 * the others get FA_ERR_INVALID_ARG naming the ring. */
static fa_status ring_agree(ring_call *rc, fa_status mine)
{
    int all_ok;
    fa_status st = ring_exchange(rc, NULL, NULL, 0, mine == FA_SUCCESS, &all_ok);
    if (mine != FA_SUCCESS)
        return mine;
    if (st != FA_SUCCESS)
        return st;
    if (!all_ok)
        return FA_ERROR(rc->ctx, FA_ERR_INVALID_ARG, "ring: another rank's arguments were rejected");
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
    return st;
}

/* One step's exchange; folds its outcome into *st. Returns 0 when every rank is to stop (each
 * rank gets the same verdict, so all stop at the same step). */
static int ring_pass(ring_call *rc, const void *send, void *recv, size_t bytes, fa_status *st, int step)
{
    int all_ok;
    const fa_status t = ring_exchange(rc, send, recv, bytes, *st == FA_SUCCESS, &all_ok);
    if (*st == FA_SUCCESS && t != FA_SUCCESS)
        *st = t;
    if (*st == FA_SUCCESS && !all_ok)
        *st = FA_ERROR(rc->ctx, FA_ERR_BACKEND, "ring: another rank failed at step %d", step);
    return all_ok;
}

static void *alloc_bytes(int64_t count, size_t elem)
{
    if (count < 0 || (uint64_t)count > SIZE_MAX / elem / 2)
        return NULL;
    return calloc((size_t)(count > 0 ? count : 1), elem);
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
    ring_call rc = {ctx, comm, layout, {0}, NULL};
    st = ring_begin(&rc, args, NULL);
    const fa_problem *p = &rc.p;
    const int64_t B = p->batch, H = p->heads_q, HK = p->heads_kv, D = p->d, NQ = p->seqlen_q, NK = p->seqlen_k;
    const fa_dtype F = FA_DTYPE_F32;
    const size_t es = sizeof(float);
    float *oacc = NULL, *lacc = NULL, *lpart = NULL, *qf = NULL;
    float *opart = NULL;
    unsigned char *bundle[2] = {NULL, NULL};
    const int64_t kv = B * NK * HK * D; /* elements of one K (or V) shard */
    if (st == FA_SUCCESS) {
        oacc = alloc_bytes(B * NQ * H * D, sizeof(float));
        lacc = alloc_bytes(B * H * NQ, sizeof(float));
        lpart = alloc_bytes(B * H * NQ, sizeof(float));
        qf = alloc_bytes(B * NQ * H * D, sizeof(float));
        opart = alloc_bytes(B * NQ * H * D, es);
        bundle[0] = alloc_bytes(2 * kv, es);
        bundle[1] = alloc_bytes(2 * kv, es);
        if (!oacc || !lacc || !lpart || !qf || !opart || !bundle[0] || !bundle[1])
            st = FA_ERROR(ctx, FA_ERR_OUT_OF_MEMORY, "ring: out of host memory for the shard buffers");
    }
    st = ring_agree(&rc, st);
    if (st == FA_SUCCESS) {
        for (int64_t i = 0; i < B * H * NQ; ++i)
            lacc[i] = -INFINITY;
        gather(&args->q, qf, F);
        gather(&args->k, bundle[0], F);
        gather(&args->v, bundle[0] + kv * es, F);
        const fa_tensor qt = dense4(qf, F, B, NQ, H, D);
        ring_chunk qc[2], kc[2];
        const int nq = chunks_of(layout, comm->rank, comm->size, NQ, qc);
        int cur = 0;
        for (int step = 0; step < comm->size; ++step) {
            const int src = (comm->rank - step + comm->size) % comm->size;
            const int nk = chunks_of(layout, src, comm->size, NK, kc);
            const fa_tensor kt = dense4(bundle[cur], F, B, NK, HK, D);
            const fa_tensor vt = dense4(bundle[cur] + kv * es, F, B, NK, HK, D);
            for (int i = 0; i < nq && st == FA_SUCCESS; ++i)
                for (int j = 0; j < nk && st == FA_SUCCESS; ++j) {
                    const int m = pair_mask(p->causal, &qc[i], &kc[j]);
                    if (m < 0)
                        continue;
                    fa_fwd_args a = *args;
                    a.q = rows_of(&qt, 1, qc[i].row0, qc[i].rows);
                    a.k = rows_of(&kt, 1, kc[j].row0, kc[j].rows);
                    a.v = rows_of(&vt, 1, kc[j].row0, kc[j].rows);
                    a.o = dense4(opart, F, B, qc[i].rows, H, D);
                    a.lse = dense3(lpart, B, H, qc[i].rows);
                    a.opts.causal = m;
                    if ((st = fa_forward(ctx, &a)) != FA_SUCCESS)
                        break;
                    for (int64_t b = 0; b < B; ++b)
                        for (int64_t s = 0; s < qc[i].rows; ++s)
                            for (int64_t h = 0; h < H; ++h) {
                                const int64_t row = qc[i].row0 + s;
                                const float *part = (const float *)opart + ((b * qc[i].rows + s) * H + h) * D;
                                float *acc = oacc + ((b * NQ + row) * H + h) * D;
                                float *l = lacc + (b * H + h) * NQ + row;
                                *l = fa_softmax_merge(*l, acc, lpart[(b * H + h) * qc[i].rows + s], part, acc, D);
                            }
                }
            if (step + 1 == comm->size || !ring_pass(&rc, bundle[cur], bundle[1 - cur], (size_t)(2 * kv) * es, &st, step))
                break;
            cur = 1 - cur;
        }
    }
    if (st == FA_SUCCESS) {
        scatter(oacc, &args->o);
        if (args->lse.data)
            for (int64_t b = 0; b < B; ++b)
                for (int64_t h = 0; h < H; ++h)
                    for (int64_t s = 0; s < NQ; ++s)
                        ((float *)args->lse.data)[b * args->lse.stride[0] + h * args->lse.stride[1] +
                                                  s * args->lse.stride[2]] = lacc[(b * H + h) * NQ + s];
    }
    free(oacc);
    free(lacc);
    free(lpart);
    free(qf);
    free(opart);
    free(bundle[0]);
    free(bundle[1]);
    return st;
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
    ring_call rc = {ctx, comm, layout, {0}, NULL};
    st = ring_begin(&rc, NULL, args);
    const fa_problem *p = &rc.p;
    const int64_t B = p->batch, H = p->heads_q, HK = p->heads_kv, D = p->d, NQ = p->seqlen_q, NK = p->seqlen_k;
    const fa_dtype F = FA_DTYPE_F32;
    const size_t es = sizeof(float);
    const int64_t kv = B * NK * HK * D;
    /* the travelling bundle (fp32): K, V, then dK, dV */
    const size_t kv_bytes = (size_t)(2 * kv) * es, bundle_bytes = 2 * kv_bytes;
    float *dqacc = NULL, *qf = NULL, *of = NULL, *dof = NULL;
    unsigned char *bundle[2] = {NULL, NULL}, *dqpart = NULL, *dkpart = NULL, *dvpart = NULL;
    if (st == FA_SUCCESS) {
        dqacc = alloc_bytes(B * NQ * H * D, sizeof(float));
        qf = alloc_bytes(B * NQ * H * D, sizeof(float));
        of = alloc_bytes(B * NQ * H * D, sizeof(float));
        dof = alloc_bytes(B * NQ * H * D, sizeof(float));
        dqpart = alloc_bytes(B * NQ * H * D, es);
        dkpart = alloc_bytes(kv, es);
        dvpart = alloc_bytes(kv, es);
        bundle[0] = alloc_bytes((int64_t)bundle_bytes, 1);
        bundle[1] = alloc_bytes((int64_t)bundle_bytes, 1);
        if (!dqacc || !qf || !of || !dof || !dqpart || !dkpart || !dvpart || !bundle[0] || !bundle[1])
            st = FA_ERROR(ctx, FA_ERR_OUT_OF_MEMORY, "ring: out of host memory for the shard buffers");
    }
    st = ring_agree(&rc, st);
    int cur = 0;
    if (st == FA_SUCCESS) {
        gather(&args->q, qf, F);
        gather(&args->o, of, F);
        gather(&args->dout, dof, F);
        gather(&args->k, bundle[0], F);
        gather(&args->v, bundle[0] + kv * es, F);
        const fa_tensor qt = dense4(qf, F, B, NQ, H, D), ot = dense4(of, F, B, NQ, H, D),
                        dot = dense4(dof, F, B, NQ, H, D);
        ring_chunk qc[2], kc[2];
        const int nq = chunks_of(layout, comm->rank, comm->size, NQ, qc);
        for (int step = 0; step < comm->size; ++step) {
            const int src = (comm->rank - step + comm->size) % comm->size;
            const int nk = chunks_of(layout, src, comm->size, NK, kc);
            const fa_tensor kt = dense4(bundle[cur], F, B, NK, HK, D);
            const fa_tensor vt = dense4(bundle[cur] + kv * es, F, B, NK, HK, D);
            float *dk = (float *)(bundle[cur] + kv_bytes), *dv = dk + kv;
            for (int i = 0; i < nq && st == FA_SUCCESS; ++i)
                for (int j = 0; j < nk && st == FA_SUCCESS; ++j) {
                    const int m = pair_mask(p->causal, &qc[i], &kc[j]);
                    if (m < 0)
                        continue;
                    fa_bwd_args a = *args;
                    a.q = rows_of(&qt, 1, qc[i].row0, qc[i].rows);
                    a.o = rows_of(&ot, 1, qc[i].row0, qc[i].rows);
                    a.dout = rows_of(&dot, 1, qc[i].row0, qc[i].rows);
                    a.lse = rows_of(&args->lse, 2, qc[i].row0, qc[i].rows);
                    a.k = rows_of(&kt, 1, kc[j].row0, kc[j].rows);
                    a.v = rows_of(&vt, 1, kc[j].row0, kc[j].rows);
                    a.dq = dense4(dqpart, F, B, qc[i].rows, H, D);
                    a.dk = dense4(dkpart, F, B, kc[j].rows, HK, D);
                    a.dv = dense4(dvpart, F, B, kc[j].rows, HK, D);
                    a.opts.causal = m;
                    if ((st = fa_backward(ctx, &a)) != FA_SUCCESS)
                        break;
                    accumulate(dqacc, NQ, (const float *)dqpart, B, qc[i].row0, qc[i].rows, H, D);
                    accumulate(dk, NK, (const float *)dkpart, B, kc[j].row0, kc[j].rows, HK, D);
                    accumulate(dv, NK, (const float *)dvpart, B, kc[j].row0, kc[j].rows, HK, D);
                }
            /* size sends: after the last, each bundle (with its dK, dV) is back at its owner */
            if (!ring_pass(&rc, bundle[cur], bundle[1 - cur], bundle_bytes, &st, step))
                break;
            cur = 1 - cur;
        }
    }
    if (st == FA_SUCCESS) {
        const float *dk = (const float *)(bundle[cur] + kv_bytes), *dv = dk + kv;
        scatter(dqacc, &args->dq);
        scatter(dk, &args->dk);
        scatter(dv, &args->dv);
    }
    free(dqacc);
    free(qf);
    free(of);
    free(dof);
    free(dqpart);
    free(dkpart);
    free(dvpart);
    free(bundle[0]);
    free(bundle[1]);
    return st;
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
 * send buffer is reused before it has been read). */
static int local_sendrecv(void *user, const void *send, void *recv, size_t bytes, int ok, int *all_ok)
{
    ring_rank *me = user;
    fa_ring_local *r = me->ring;
    r->send[me->rank] = send;
    r->bytes[me->rank] = bytes;
    r->ok[me->rank] = ok;
    local_barrier(r);
    const int prev = (me->rank + r->size - 1) % r->size;
    int all = 1, same = 1;
    for (int i = 0; i < r->size; ++i) {
        all = all && r->ok[i];
        same = same && r->bytes[i] == bytes;
    }
    if (same && bytes)
        memcpy(recv, r->send[prev], bytes);
    local_barrier(r);
    *all_ok = all;
    return same ? 0 : -1;
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
        c.sendrecv = local_sendrecv;
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
