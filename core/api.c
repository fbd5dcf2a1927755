/* api.c: the path of one call: validate (64-bit) -> plan tiles -> build block-sparse lists ->
 * the backend's chooser -> the backend's kernel. Also the memory helpers and context settings. */
#include "internal.h"
#include "validate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

fa_options fa_options_default(void)
{
    fa_options o;
    memset(&o, 0, sizeof o);
    o.softmax_scale = 0.0f;
    o.window_left = -1;
    o.window_right = -1;
    return o;
}

/* Everything a call owns between validation and the kernel. */
typedef struct fa_call {
    fa_problem p;
    int32_t *cu_host;
    fa_block_lists *lists; /* from the context's cache (core/lists_cache.c) */
    fa_variant variant;
    void *paged_kv;        /* the packed K / V gathered from pages (core/paged_gather.c) */
} fa_call;

static void call_release(fa_context *ctx, fa_call *c)
{
    free(c->cu_host);
    fa_lists_release(ctx, c->lists);
    if (c->paged_kv) /* after the kernel: every backend frees in order with the work queued before */
        ctx->backend->free(ctx, c->paged_kv);
}

static void plan_problem(fa_context *ctx, fa_problem *p, fa_tile_limits *lim)
{
    memset(lim, 0, sizeof *lim);
    ctx->backend->tile_limits(ctx, p, lim);
    fa_plan_tiles(lim, p->d > p->d_v ? p->d : p->d_v, &p->block_q, &p->block_k);
}

/* After validation: plan, lists, choice. */
static fa_status prepare(fa_context *ctx, fa_call *c)
{
    fa_problem *p = &c->p;
    fa_tile_limits lim;
    plan_problem(ctx, p, &lim);
    /* the lists follow the query tiles; a call with no rows (batch 0 included) runs nothing */
    if (p->block_mask && p->batch > 0 && p->seqlen_q > 0 && p->seqlen_k > 0) {
        fa_status st = fa_lists_acquire(ctx, p->block_mask, p->heads_q, p->seqlen_q, p->seqlen_k, p->block_q,
                                        p->block_k, &c->lists);
        if (st != FA_SUCCESS)
            return FA_ERROR(ctx, st, "block_mask: cannot build the per-tile lists (%s)", fa_status_string(st));
        p->lists = c->lists;
    }
    fa_status st = fa_check_features(ctx, p);
    return st != FA_SUCCESS ? st : ctx->backend->choose(ctx, p, &c->variant);
}

fa_status fa_forward(fa_context *ctx, const fa_fwd_args *args)
{
    if (!ctx)
        return FA_ERR_INVALID_ARG;
    fa_call c;
    memset(&c, 0, sizeof c);
    fa_status st = fa_validate_forward(ctx, args, &c.p, &c.cu_host);
    if (st == FA_SUCCESS)
        st = prepare(ctx, &c);
    if (st == FA_SUCCESS && c.p.paged) /* the chooser saw the workspace's layout already */
        st = fa_paged_gather(ctx, &c.p, &c.paged_kv);
    if (st == FA_SUCCESS)
        st = ctx->backend->forward(ctx, &c.p, &c.variant);
    if (st == FA_SUCCESS)
        fa_clear_error(ctx);
    call_release(ctx, &c);
    return st;
}

fa_status fa_backward(fa_context *ctx, const fa_bwd_args *args)
{
    if (!ctx)
        return FA_ERR_INVALID_ARG;
    fa_call c;
    memset(&c, 0, sizeof c);
    fa_status st = fa_validate_backward(ctx, args, &c.p, &c.cu_host);
    /* no query and no key row anywhere: dQ, dK and dV have no element to write (the batch may
     * still be huge, and a backend would walk it) */
    const int empty = st == FA_SUCCESS && c.p.total_q == 0 && c.p.total_k == 0;
    if (st == FA_SUCCESS)
        st = empty ? fa_check_features(ctx, &c.p) : prepare(ctx, &c);
    if (st == FA_SUCCESS && empty && c.p.dsink) { /* no row: dsink is a sum of nothing */
        float zeros[256] = {0};
        for (int64_t h = 0; h < c.p.heads_q && st == FA_SUCCESS; h += 256) {
            const int64_t n = c.p.heads_q - h < 256 ? c.p.heads_q - h : 256;
            st = ctx->backend->copy(ctx, c.p.dsink + h, zeros, (size_t)n * sizeof(float), FA_COPY_HOST_TO_DEVICE);
        }
    }
    if (st == FA_SUCCESS && !empty)
        st = ctx->backend->backward(ctx, &c.p, &c.variant);
    if (st == FA_SUCCESS)
        fa_clear_error(ctx);
    call_release(ctx, &c);
    return st;
}

fa_status fa_query_support(fa_context *ctx, const fa_fwd_args *args, int backward, char *variant,
                           size_t variant_len)
{
    if (!ctx)
        return FA_ERR_INVALID_ARG;
    fa_call c;
    memset(&c, 0, sizeof c);
    fa_status st = fa_validate_forward(ctx, args, &c.p, &c.cu_host);
    c.p.backward = backward != 0;
    if (st == FA_SUCCESS && c.p.backward && c.p.paged)
        st = FA_ERROR(ctx, FA_ERR_UNSUPPORTED, "block_table: the backward over paged keys and values is not offered");
    if (st == FA_SUCCESS)
        st = prepare(ctx, &c);
    if (st == FA_SUCCESS) {
        if (variant && variant_len)
            snprintf(variant, variant_len, "%s", c.variant.name);
        fa_clear_error(ctx);
    }
    call_release(ctx, &c);
    return st;
}

fa_status fa_plan(fa_context *ctx, const fa_fwd_args *args, fa_plan_info *info)
{
    if (!ctx)
        return FA_ERR_INVALID_ARG;
    if (!info)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "plan info is NULL");
    fa_call c;
    memset(&c, 0, sizeof c);
    fa_status st = fa_validate_forward(ctx, args, &c.p, &c.cu_host);
    if (st == FA_SUCCESS) {
        fa_tile_limits lim;
        fa_plan_info pi; /* copied to *info only on success */
        plan_problem(ctx, &c.p, &lim);
        memset(&pi, 0, sizeof pi);
        pi.block_q = c.p.block_q;
        pi.block_k = c.p.block_k;
        pi.onchip_bytes = lim.onchip_bytes;
        fa_plan_paper_blocks(lim.onchip_bytes, c.p.d > c.p.d_v ? c.p.d : c.p.d_v, &pi.paper_block_q, &pi.paper_block_k);
        pi.num_q_blocks = c.p.seqlen_q / c.p.block_q + (c.p.seqlen_q % c.p.block_q != 0);
        pi.num_k_blocks = c.p.seqlen_k / c.p.block_k + (c.p.seqlen_k % c.p.block_k != 0);
        pi.workspace_fwd = ctx->backend->workspace(ctx, &c.p);
        c.p.backward = 1; /* a backend may tile its backward differently */
        plan_problem(ctx, &c.p, &lim);
        pi.workspace_bwd = ctx->backend->workspace(ctx, &c.p);
        if (c.p.paged) { /* the gathered K / V; no backward */
            const int64_t gathered = fa_paged_workspace_bytes(&c.p);
            if (pi.workspace_fwd >= 0 && !fa_add_ok(pi.workspace_fwd, gathered, &pi.workspace_fwd))
                pi.workspace_fwd = -1;
            pi.workspace_bwd = 0;
        }
        if (pi.workspace_fwd < 0 || pi.workspace_bwd < 0) {
            st = FA_ERROR(ctx, FA_ERR_OVERFLOW, "plan: the %s workspace size overflows 64 bits",
                          pi.workspace_fwd < 0 ? "forward" : "backward");
        } else {
            *info = pi;
            fa_clear_error(ctx);
        }
    }
    call_release(ctx, &c);
    return st;
}

fa_status fa_malloc(fa_context *ctx, size_t bytes, void **ptr)
{
    if (!ctx)
        return FA_ERR_INVALID_ARG;
    if (!ptr)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "fa_malloc: ptr is NULL");
    *ptr = NULL;
    return ctx->backend->alloc(ctx, bytes, ptr);
}

fa_status fa_free(fa_context *ctx, void *ptr)
{
    if (!ctx)
        return FA_ERR_INVALID_ARG;
    if (!ptr)
        return FA_SUCCESS;
    return ctx->backend->free(ctx, ptr);
}

fa_status fa_memcpy(fa_context *ctx, void *dst, const void *src, size_t bytes, fa_copy_kind kind)
{
    if (!ctx)
        return FA_ERR_INVALID_ARG;
    if (kind < FA_COPY_HOST_TO_DEVICE || kind > FA_COPY_HOST_TO_HOST)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "fa_memcpy: unknown copy kind %d", (int)kind);
    if (bytes == 0)
        return FA_SUCCESS;
    if (!dst || !src)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "fa_memcpy: %s is NULL", dst ? "src" : "dst");
    return ctx->backend->copy(ctx, dst, src, bytes, kind);
}

fa_status fa_synchronize(fa_context *ctx)
{
    if (!ctx)
        return FA_ERR_INVALID_ARG;
    return ctx->backend->sync(ctx);
}

fa_status fa_context_set_stream(fa_context *ctx, void *stream)
{
    if (!ctx)
        return FA_ERR_INVALID_ARG;
    if (!ctx->backend->set_stream)
        return stream ? FA_ERROR(ctx, FA_ERR_UNSUPPORTED, "the %s backend has no streams", ctx->backend->name)
                      : FA_SUCCESS;
    return ctx->backend->set_stream(ctx, stream);
}

fa_status fa_context_set_num_threads(fa_context *ctx, int threads)
{
    if (!ctx)
        return FA_ERR_INVALID_ARG;
    if (threads < 0 || threads > 4096)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "threads = %d must be in 0..4096", threads);
    ctx->num_threads = threads;
    return FA_SUCCESS;
}

int fa_context_num_threads(const fa_context *ctx)
{
    if (!ctx)
        return 0;
    return ctx->backend->num_threads ? ctx->backend->num_threads(ctx) : 1;
}
