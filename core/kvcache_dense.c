/* kvcache_dense.c: fa_forward_kvcache's attention on the dense forward, for chunked prefill. Many
 * new query rows per sequence (a prompt prefilled in chunks over its cache, long speculative
 * drafts) are what the dense kernels are built for, where a decode kernel reads every key row
 * once per tile of 16 query rows. Here the core appends the new keys and values itself (the
 * backend's ring_copy: one strided copy per sequence and tensor) and then runs one dense
 * fa_forward per sequence over views of its cache row: no copy of the cache and no workspace.
 * Sequence b's query i sees keys leftpad_b .. len_b + seqlen_knew - 1, the dense forward's
 * bottom-right aligned causal mask and windows over them, exactly fa_forward_kvcache's rule.
 *
 * Taken under FLASHATTN_KERNELS=kv-prefill-dense for the calls it can serve: a contiguous cache,
 * no rotary (the decode kernels rotate q and k_new as they read them), lengths known on the host
 * (not check_on_device), head dims the dense forward takes, q and o rows of the dtype the dense
 * forward reads and writes, and a backend with ring_copy when keys are appended. */
#include "internal.h"
#include "kernels_switch.h"

#include <string.h>

#define FA_KV_DENSE_SWITCH "kv-prefill-dense"

int fa_kv_dense_takes(const fa_context *ctx, const fa_kv_problem *kp)
{
    if (!fa_kernels_switch(FA_KV_DENSE_SWITCH, NULL, 0))
        return 0;
    if (kp->paged || kp->rotary || kp->device_check || kp->p.seqlen_q < 1)
        return 0;
    if (kp->p.d > FA_MAX_HEAD_DIM || kp->p.d_v > FA_MAX_HEAD_DIM)
        return 0;
    if (kp->has_new && !ctx->backend->ring_copy)
        return 0;
    return 1;
}

/* t [rows, n, ...] (ndim >= 2) narrowed to row `row` and positions t0 .. t0 + n - 1 of its second
 * dimension: a view of batch 1. The offsets lie inside spans the validation checked. */
static fa_tensor narrow(const fa_tensor *t, int64_t row, int64_t t0, int64_t n)
{
    fa_tensor v = *t;
    const int64_t es = (int64_t)fa_dtype_size(t->dtype);
    if (v.data)
        v.data = (char *)v.data + (row * t->stride[0] + t0 * t->stride[1]) * es;
    v.shape[0] = 1;
    v.shape[1] = n;
    return v;
}

fa_status fa_kv_dense_forward(fa_context *ctx, const fa_kvcache_args *a, const fa_kv_problem *kp)
{
    const int64_t batch = kp->p.batch, sn = kp->p.seqlen_q, knew = kp->has_new ? kp->seqlen_knew : 0;
    /* every sequence's new keys and values first: the validation ruled out a slot written by one
     * sequence and read by another, so no attention below reads a row another append changes */
    for (int64_t b = 0; b < batch && knew > 0; ++b) {
        const int64_t row = kp->host_batch_idx ? kp->host_batch_idx[b] : b;
        const int64_t len = kp->host_seqlens ? kp->host_seqlens[b] : kp->seqlen_cache;
        const fa_tensor kd = narrow(&a->k_cache, row, len, knew), ks = narrow(&a->k_new, b, 0, knew);
        const fa_tensor vd = narrow(&a->v_cache, row, len, knew), vs = narrow(&a->v_new, b, 0, knew);
        fa_status st = ctx->backend->ring_copy(ctx, &kd, &ks);
        if (st == FA_SUCCESS)
            st = ctx->backend->ring_copy(ctx, &vd, &vs);
        if (st != FA_SUCCESS)
            return st;
    }
    for (int64_t b = 0; b < batch; ++b) {
        const int64_t row = kp->host_batch_idx ? kp->host_batch_idx[b] : b;
        const int64_t first = kp->host_leftpad ? kp->host_leftpad[b] : 0;
        const int64_t keys = fa_kv_seqlen(kp, b) - first;
        fa_fwd_args f;
        memset(&f, 0, sizeof f);
        f.q = narrow(&a->q, b, 0, sn);
        f.k = narrow(&a->k_cache, row, first, keys);
        f.v = narrow(&a->v_cache, row, first, keys);
        f.o = narrow(&a->o, b, 0, sn);
        f.lse = a->lse;
        if (f.lse.data) { /* [batch, heads_q, seqlen_new] */
            f.lse.data = (char *)f.lse.data + b * a->lse.stride[0] * (int64_t)sizeof(float);
            f.lse.shape[0] = 1;
        }
        f.opts = a->opts;
        if (f.opts.alibi_slopes && f.opts.alibi_batch_stride)
            f.opts.alibi_slopes += b * f.opts.alibi_batch_stride;
        fa_status st = fa_forward(ctx, &f);
        if (st != FA_SUCCESS)
            return st;
    }
    return FA_SUCCESS;
}
