/* kvcache_dense.c: fa_forward_kvcache's attention on the dense forward, for chunked prefill. Many
 * new query rows per sequence (a prompt prefilled in chunks over its cache, long speculative
 * drafts) are what the dense kernels are built for, where a decode kernel reads every key row
 * once per tile of 16 query rows. Here the core appends the new keys and values itself (the
 * backend's ring_copy: one strided copy per sequence and tensor, or per page a sequence's new
 * tokens touch) and then runs dense fa_forward calls: over views of the cache rows (contiguous
 * caches: no copy of the cache, no workspace; one call per run of sequences that read the same
 * keys of consecutive rows, so a batch of equal lengths is one call), or per sequence a varlen
 * call of one sequence over the pages (fa_varlen.block_table: the core gathers the sequence's
 * pages, one copy per run of adjacent pages, core/paged_gather.c).
 * Sequence b's query i sees keys leftpad_b .. len_b + seqlen_knew - 1, the dense forward's
 * bottom-right aligned causal mask and windows over them, exactly fa_forward_kvcache's rule.
 *
 * The chooser takes it for calls of FA_KV_DENSE_MIN_ROWS new query rows per sequence or more, and
 * for cache_leftpad on backends whose decode kernels do not take it (FLASHATTN_KERNELS=
 * kv-prefill-dense: for every call), that it can serve: no rotary (the decode
 * kernels rotate q and k_new as they read them), lengths known on the host (not check_on_device)
 * and within int32 (the varlen arrays), head dims the dense forward takes, and a backend with
 * ring_copy when keys are appended. */
#include "internal.h"
#include "kernels_switch.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FA_KV_DENSE_SWITCH "kv-prefill-dense"

/* New query rows per sequence from which the dense forward is taken: the decode kernels read every
 * key once per 16 query rows, the dense forward once per query tile (whose keys the Hopper forward
 * splits among blocks where the tiles alone leave SMs idle); below this the decode kernels are as
 * fast or faster (docs/benchmarks.md, chunked prefill, has the crossover). */
#define FA_KV_DENSE_MIN_ROWS 64

int fa_kv_dense_takes(const fa_context *ctx, const fa_kv_problem *kp)
{
    /* a backend whose decode kernels start every sequence's keys at 0 runs cache_leftpad here */
    const int leftpad_here = kp->cache_leftpad != NULL && !ctx->backend->kv_leftpad;
    if (!leftpad_here && kp->p.seqlen_q < FA_KV_DENSE_MIN_ROWS && !fa_kernels_switch(FA_KV_DENSE_SWITCH, NULL, 0))
        return 0;
    if (kp->rotary || kp->device_check || kp->p.seqlen_q < 1)
        return 0;
    if (kp->p.d > FA_MAX_HEAD_DIM || kp->p.d_v > FA_MAX_HEAD_DIM)
        return 0;
    if (kp->p.seqlen_q > INT32_MAX || kp->p.seqlen_k > INT32_MAX) /* the varlen arrays of paged calls */
        return 0;
    if (kp->has_new && !ctx->backend->ring_copy)
        return 0;
    return 1;
}

/* t [rows, n, ...] (ndim >= 2) narrowed to rows row .. row + nrows - 1 and positions t0 .. t0 +
 * n - 1 of its second dimension. The offsets lie inside spans the validation checked. */
static fa_tensor narrow_rows(const fa_tensor *t, int64_t row, int64_t nrows, int64_t t0, int64_t n)
{
    fa_tensor v = *t;
    const int64_t es = (int64_t)fa_dtype_size(t->dtype);
    if (v.data)
        v.data = (char *)v.data + (row * t->stride[0] + t0 * t->stride[1]) * es;
    v.shape[0] = nrows;
    v.shape[1] = n;
    return v;
}

/* The same for one row: a view of batch 1. */
static fa_tensor narrow(const fa_tensor *t, int64_t row, int64_t t0, int64_t n)
{
    return narrow_rows(t, row, 1, t0, n);
}

/* t [batch, n, heads, d] (or lse [batch, heads, n]) of sequence b without its batch dimension:
 * varlen's packed layout of one sequence */
static fa_tensor packed_one(const fa_tensor *t, int64_t b)
{
    fa_tensor v;
    memset(&v, 0, sizeof v);
    v.dtype = t->dtype;
    v.ndim = t->ndim - 1;
    v.data = t->data ? (char *)t->data + b * t->stride[0] * (int64_t)fa_dtype_size(t->dtype) : NULL;
    for (int i = 0; i < v.ndim; ++i) {
        v.shape[i] = t->shape[i + 1];
        v.stride[i] = t->stride[i + 1];
    }
    return v;
}

/* The call's options for sequence b alone: its row of per-sequence ALiBi slopes. */
static fa_options options_of(const fa_kvcache_args *a, int64_t b)
{
    fa_options o = a->opts;
    if (o.alibi_slopes && o.alibi_batch_stride)
        o.alibi_slopes += b * o.alibi_batch_stride;
    return o;
}

/* Paged caches: each sequence a varlen call of one sequence over the pages (its row of the block
 * table), its cu_seqlens (0, seqlen_new) and (0, keys) in one device array for the whole call. */
static fa_status paged_attention(fa_context *ctx, const fa_kvcache_args *a, const fa_kv_problem *kp)
{
    const int64_t batch = kp->p.batch, sn = kp->p.seqlen_q;
    const size_t bytes = sizeof(int32_t) * 4 * (size_t)batch; /* batch < 2^31: the validation */
    int32_t *host = malloc(bytes), *cu = NULL;
    if (!host)
        return FA_ERROR(ctx, FA_ERR_OUT_OF_MEMORY, "fa_forward_kvcache: %zu bytes of host memory", bytes);
    for (int64_t b = 0; b < batch; ++b) {
        host[4 * b] = 0;
        host[4 * b + 1] = (int32_t)sn; /* both within int32: fa_kv_dense_takes */
        host[4 * b + 2] = 0;
        host[4 * b + 3] = (int32_t)fa_kv_seqlen(kp, b);
    }
    fa_status st = ctx->backend->alloc(ctx, bytes, (void **)&cu);
    if (st == FA_SUCCESS)
        st = ctx->backend->copy(ctx, cu, host, bytes, FA_COPY_HOST_TO_DEVICE);
    for (int64_t b = 0; b < batch && st == FA_SUCCESS; ++b) {
        fa_varlen vl;
        memset(&vl, 0, sizeof vl);
        vl.cu_seqlens_q = cu + 4 * b;
        vl.cu_seqlens_k = cu + 4 * b + 2;
        vl.batch = 1;
        vl.max_seqlen_q = sn;
        vl.max_seqlen_k = host[4 * b + 3];
        vl.block_table = a->block_table + b * kp->block_table_stride;
        vl.block_table_stride = kp->block_table_stride;
        fa_fwd_args f;
        memset(&f, 0, sizeof f);
        f.q = packed_one(&a->q, b);
        f.k = a->k_cache;
        f.v = a->v_cache;
        f.o = packed_one(&a->o, b);
        f.lse = packed_one(&a->lse, b);
        f.varlen = &vl;
        f.opts = options_of(a, b);
        st = fa_forward(ctx, &f);
    }
    if (cu) { /* after the kernels that read the arrays */
        fa_status sync = ctx->backend->sync(ctx);
        if (st == FA_SUCCESS)
            st = sync;
        ctx->backend->free(ctx, cu);
    }
    free(host);
    return st;
}

fa_status fa_kv_dense_forward(fa_context *ctx, const fa_kvcache_args *a, const fa_kv_problem *kp)
{
    const int64_t batch = kp->p.batch, sn = kp->p.seqlen_q, knew = kp->has_new ? kp->seqlen_knew : 0;
    /* every sequence's new keys and values first: the validation ruled out a slot written by one
     * sequence and read by another, so no attention below reads a row another append changes */
    for (int64_t b = 0; b < batch && knew > 0; ++b) {
        const int64_t len = kp->host_seqlens ? kp->host_seqlens[b] : kp->seqlen_cache;
        /* positions len .. len + knew - 1: one piece in a cache row, or one per page they touch */
        for (int64_t t = len; t < len + knew;) {
            int64_t row = kp->host_batch_idx ? kp->host_batch_idx[b] : b, at = t, n = len + knew - t;
            if (kp->paged) {
                row = kp->host_block_table[b * kp->block_table_stride + t / kp->page_size];
                at = t % kp->page_size;
                n = n < kp->page_size - at ? n : kp->page_size - at;
            }
            const fa_tensor kd = narrow(&a->k_cache, row, at, n), ks = narrow(&a->k_new, b, t - len, n);
            const fa_tensor vd = narrow(&a->v_cache, row, at, n), vs = narrow(&a->v_new, b, t - len, n);
            fa_status st = ctx->backend->ring_copy(ctx, &kd, &ks);
            if (st == FA_SUCCESS)
                st = ctx->backend->ring_copy(ctx, &vd, &vs);
            if (st != FA_SUCCESS)
                return st;
            t += n;
        }
    }
    if (kp->paged)
        return paged_attention(ctx, a, kp);
    /* contiguous caches: one dense call per run of sequences b0 .. b0 + nb - 1 that read the same
     * keys (first and count) of consecutive cache rows, batched as views over those rows; a batch
     * of equal lengths is one call */
    for (int64_t b0 = 0; b0 < batch;) {
        const int64_t row = kp->host_batch_idx ? kp->host_batch_idx[b0] : b0;
        const int64_t first = kp->host_leftpad ? kp->host_leftpad[b0] : 0;
        const int64_t keys = fa_kv_seqlen(kp, b0) - first;
        int64_t nb = 1;
        while (b0 + nb < batch) {
            const int64_t b = b0 + nb;
            if ((kp->host_batch_idx ? kp->host_batch_idx[b] : b) != row + nb ||
                (kp->host_leftpad ? kp->host_leftpad[b] : 0) != first || fa_kv_seqlen(kp, b) - first != keys)
                break;
            ++nb;
        }
        fa_fwd_args f;
        memset(&f, 0, sizeof f);
        f.q = narrow_rows(&a->q, b0, nb, 0, sn);
        f.k = narrow_rows(&a->k_cache, row, nb, first, keys);
        f.v = narrow_rows(&a->v_cache, row, nb, first, keys);
        f.o = narrow_rows(&a->o, b0, nb, 0, sn);
        f.lse = a->lse;
        if (f.lse.data) { /* [batch, heads_q, seqlen_new] */
            f.lse.data = (char *)f.lse.data + b0 * a->lse.stride[0] * (int64_t)sizeof(float);
            f.lse.shape[0] = nb;
        }
        f.opts = options_of(a, b0); /* per-sequence ALiBi slopes from b0 on, at their batch stride */
        fa_status st = fa_forward(ctx, &f);
        if (st != FA_SUCCESS)
            return st;
        b0 += nb;
    }
    return FA_SUCCESS;
}
