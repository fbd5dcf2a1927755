/* kvcache.c: fa_forward_kvcache, attention of a few new query tokens over a KV cache (contiguous
 * or paged), with keys and values appended in place and rotary embedding: every rule checked once
 * with 64-bit arithmetic before anything is written, then the backend's kernel. */
#include "internal.h"
#include "validate.h"

#include <stdlib.h>
#include <string.h>

/* Tokens of one sequence the int32 arrays can count. */
#define FA_KV_MAX_TOKENS ((int64_t)INT32_MAX)

/* Copies n int32 from the context's memory into host[0..n) (host NULL: only checks that the array
 * overlaps no output). */
static fa_status load_int32(fa_context *ctx, const char *name, const int32_t *src, int64_t n, const fa_span *outs,
                            const char *const *out_names, int n_outs, int32_t *host)
{
    int64_t bytes;
    if (!fa_mul_ok(n, (int64_t)sizeof(int32_t), &bytes) || (uint64_t)bytes > (uint64_t)SIZE_MAX ||
        (uintptr_t)src > UINTPTR_MAX - (uintptr_t)bytes)
        return FA_ERROR(ctx, FA_ERR_OVERFLOW, "%s: byte span overflows the address space", name);
    /* the kernels read the arrays while they write the outputs */
    fa_span s = {(uintptr_t)src, (uintptr_t)src + (uintptr_t)bytes};
    for (int i = 0; i < n_outs; ++i)
        if (fa_spans_overlap(s, outs[i]))
            return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "%s overlaps %s in memory", name, out_names[i]);
    if (n == 0 || !host)
        return FA_SUCCESS;
    return ctx->backend->copy(ctx, host, src, (size_t)bytes, FA_COPY_DEVICE_TO_HOST);
}

/* q, o, lse and the options: the problem's sizes from q and the cache. */
static fa_status read_q(fa_context *ctx, const fa_kvcache_args *a, fa_kv_problem *kp)
{
    fa_problem *p = &kp->p;
    const fa_tensor *q = &a->q, *kc = &a->k_cache, *vc = &a->v_cache;
    if (q->ndim != 4 || kc->ndim != 4 || vc->ndim != 4)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "q / k_cache / v_cache: ndim is %d / %d / %d, expected 4", q->ndim,
                        kc->ndim, vc->ndim);
    if (q->dtype != FA_DTYPE_F32 && q->dtype != FA_DTYPE_F16 && q->dtype != FA_DTYPE_BF16)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "q: unknown dtype value %d", (int)q->dtype);
    p->dtype = p->out_dtype = q->dtype;
    if (a->o.dtype == FA_DTYPE_F32 && q->dtype != FA_DTYPE_F32)
        p->out_dtype = FA_DTYPE_F32;
    p->batch = q->shape[0];
    p->seqlen_q = q->shape[1];
    p->heads_q = q->shape[2];
    p->d = q->shape[3];
    p->d_v = vc->shape[3];
    p->heads_kv = kc->shape[2];
    if (p->batch < 0 || p->seqlen_q < 0)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "q: negative batch or seqlen_new");
    if (p->batch > INT32_MAX || p->seqlen_q > FA_KV_MAX_TOKENS)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "q: batch %lld and seqlen_new %lld must each be at most 2^31 - 1",
                        (long long)p->batch, (long long)p->seqlen_q);
    p->total_q = p->batch * p->seqlen_q; /* both below 2^31; fa_check_alibi reads it */
    fa_status st = fa_check_heads(ctx, p, FA_MAX_HEAD_DIM_KVCACHE);
    if (st != FA_SUCCESS)
        return st;
    return FA_SUCCESS;
}

/* The cache's layout: contiguous or paged, and how many tokens a sequence may hold. */
static fa_status read_cache(fa_context *ctx, const fa_kvcache_args *a, fa_kv_problem *kp)
{
    const fa_tensor *kc = &a->k_cache;
    kp->paged = a->block_table != NULL;
    if (kp->paged) {
        kp->num_pages = kc->shape[0];
        kp->page_size = kc->shape[1];
        kp->block_table_stride = a->block_table_stride;
        if (kp->page_size < 16 || kp->page_size % 16 != 0)
            return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "paged cache: page_size = %lld must be a positive multiple of 16",
                            (long long)kp->page_size);
        if (kp->num_pages < 1 || kp->num_pages > INT32_MAX)
            return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "paged cache: %lld pages (1 .. 2^31 - 1)",
                            (long long)kp->num_pages);
        if (kp->block_table_stride < 1)
            return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "block_table_stride = %lld must be >= 1",
                            (long long)kp->block_table_stride);
        if (a->cache_batch_idx)
            return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "cache_batch_idx is for a contiguous cache, not a paged one");
        if (a->cache_leftpad) /* FlashAttention-2 refuses the pair too */
            return FA_ERROR(ctx, FA_ERR_INVALID_ARG,
                            "cache_leftpad is for a contiguous cache, not a paged one (as in FlashAttention-2)");
        if (!a->cache_seqlens)
            return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "a paged cache needs cache_seqlens");
        if (!fa_mul_ok(kp->block_table_stride, kp->page_size, &kp->capacity))
            return FA_ERROR(ctx, FA_ERR_OVERFLOW, "block_table_stride x page_size overflows 64 bits");
    } else {
        if (a->block_table_stride != 0)
            return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "block_table_stride = %lld without block_table",
                            (long long)a->block_table_stride);
        kp->batch_cache = kc->shape[0];
        kp->seqlen_cache = kc->shape[1];
        kp->capacity = kp->seqlen_cache;
        if (kp->batch_cache < 0 || kp->seqlen_cache < 0)
            return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "k_cache: negative batch_cache or seqlen_cache");
        if (!a->cache_batch_idx && kp->batch_cache != kp->p.batch)
            return FA_ERROR(ctx, FA_ERR_INVALID_ARG,
                            "k_cache: batch_cache = %lld differs from q's batch %lld (and no cache_batch_idx)",
                            (long long)kp->batch_cache, (long long)kp->p.batch);
    }
    if (kp->capacity > FA_KV_MAX_TOKENS)
        kp->capacity = FA_KV_MAX_TOKENS; /* int32 cache_seqlens cannot count further */
    return FA_SUCCESS;
}

/* A tensor argument is given when it names memory or a shape: an empty table (a 0-byte buffer
 * may come back from an allocator as NULL) is given, and judged by its shape. */
static int tensor_given(const fa_tensor *t)
{
    return t->data != NULL || t->ndim != 0;
}

/* Rotary tables and the positions they must cover. */
static fa_status read_rotary(fa_context *ctx, const fa_kvcache_args *a, fa_kv_problem *kp, fa_span *s_cos,
                             fa_span *s_sin)
{
    s_cos->lo = s_cos->hi = s_sin->lo = s_sin->hi = 0;
    kp->rotary = tensor_given(&a->rotary_cos) || tensor_given(&a->rotary_sin);
    if (!kp->rotary)
        return FA_SUCCESS;
    const fa_tensor *c = &a->rotary_cos, *s = &a->rotary_sin;
    if (c->ndim != 2)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "rotary_cos: ndim is %d, expected 2 [seqlen_ro, rotary_dim / 2]",
                        c->ndim);
    int64_t shape[2] = {c->shape[0], c->shape[1]};
    if (shape[1] < 1 || shape[1] > kp->p.d / 2)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "rotary_cos: rotary_dim / 2 = %lld, rotary_dim must be in 2 .. d = %lld",
                        (long long)shape[1], (long long)kp->p.d);
    fa_status st;
    if ((st = fa_check_tensor(ctx, "rotary_cos", c, 2, shape, kp->p.dtype, 0, s_cos)) ||
        (st = fa_check_tensor(ctx, "rotary_sin", s, 2, shape, kp->p.dtype, 0, s_sin)))
        return st;
    kp->rotary_dim = 2 * shape[1];
    kp->seqlen_ro = shape[0];
    kp->rotary_interleaved = a->rotary_interleaved != 0;
    kp->rotary_cos = c->data;
    kp->rotary_sin = s->data;
    kp->cos_stride = c->stride[0];
    kp->sin_stride = s->stride[0];
    return FA_SUCCESS;
}

static fa_view cache_view(const fa_tensor *t)
{
    fa_view v = {t->data, t->stride[0], t->stride[1], t->stride[2]};
    return v;
}

/* One sequence's use of one page (paged) or cache row (contiguous, cache_batch_idx): it reads or
 * writes rows 0 .. len - 1 of it, and writes rows from wlo on (none when wlo >= len). */
typedef struct kv_slot_use {
    int64_t page, len, wlo, seq, index;
} kv_slot_use;

static int compare_slot_use(const void *a, const void *b)
{
    const kv_slot_use *x = a, *y = b;
    return x->page < y->page ? -1 : x->page > y->page;
}

/* Appending must not lose a key: a cache slot that a sequence writes is used by no other sequence
 * (nor by the same sequence at another position, a page listed twice in its block_table row).
 * Pages shared only for reading (a common prefix) stay legal. Every use of a page starts at its
 * row 0 (a cache row's use counts from 0 even with a cache_leftpad: a write below another
 * sequence's left pad is refused too, which keeps the rule one comparison per page), so a write
 * from row w conflicts exactly with another use longer than w: per page, the two longest uses
 * tell. Called with the host arrays checked in range. */
static fa_status check_exclusive_writes(fa_context *ctx, const fa_kv_problem *kp)
{
    const fa_problem *p = &kp->p;
    if (kp->device_check || !kp->has_new || kp->seqlen_knew == 0 || (!kp->paged && !kp->host_batch_idx))
        return FA_SUCCESS; /* no host arrays, no writes, or each sequence in its own cache row */
    int64_t n = 0;
    for (int64_t b = 0; b < p->batch; ++b)
        n += kp->paged ? (fa_kv_seqlen(kp, b) + kp->page_size - 1) / kp->page_size : 1;
    if (n < 2)
        return FA_SUCCESS;
    if ((uint64_t)n > (uint64_t)(SIZE_MAX / sizeof(kv_slot_use)))
        return FA_ERROR(ctx, FA_ERR_OVERFLOW, "the pages in use overflow the host's memory");
    kv_slot_use *use = malloc(sizeof *use * (size_t)n);
    if (!use)
        return FA_ERROR(ctx, FA_ERR_OUT_OF_MEMORY, "cannot allocate %lld page records", (long long)n);
    int64_t k = 0;
    for (int64_t b = 0; b < p->batch; ++b) {
        const int64_t total = fa_kv_seqlen(kp, b), cached = total - kp->seqlen_knew;
        if (!kp->paged) {
            use[k++] = (kv_slot_use){kp->host_batch_idx[b], total, cached, b, 0};
            continue;
        }
        for (int64_t i = 0; i * kp->page_size < total; ++i) {
            const int64_t first = i * kp->page_size, rest = total - first;
            use[k++] = (kv_slot_use){kp->host_block_table[b * kp->block_table_stride + i],
                                     rest < kp->page_size ? rest : kp->page_size,
                                     cached > first ? cached - first : 0, b, i};
        }
    }
    qsort(use, (size_t)n, sizeof *use, compare_slot_use);
    fa_status st = FA_SUCCESS;
    for (int64_t g = 0, end; g < n && st == FA_SUCCESS; g = end) {
        int64_t top = g, second = -1; /* the longest use of the page and the next longest */
        for (end = g + 1; end < n && use[end].page == use[g].page; ++end) {
            if (use[end].len > use[top].len) {
                second = top;
                top = end;
            } else if (second < 0 || use[end].len > use[second].len) {
                second = end;
            }
        }
        for (int64_t e = g; e < end && second >= 0; ++e) {
            const int64_t other = e == top ? second : top;
            if (use[e].wlo >= use[e].len || use[other].len <= use[e].wlo)
                continue;
            const kv_slot_use *w = &use[e], *o = &use[other];
            if (kp->paged)
                st = FA_ERROR(ctx, FA_ERR_INVALID_ARG,
                              "block_table: sequence %lld appends into page %lld (block_table[%lld][%lld], rows %lld .. "
                              "%lld), which block_table[%lld][%lld] also uses (rows 0 .. %lld): a slot written by one "
                              "sequence must be used by no other, or a key is lost",
                              (long long)w->seq, (long long)w->page, (long long)w->seq, (long long)w->index,
                              (long long)w->wlo, (long long)w->len - 1, (long long)o->seq, (long long)o->index,
                              (long long)o->len - 1);
            else
                st = FA_ERROR(ctx, FA_ERR_INVALID_ARG,
                              "cache_batch_idx: sequences %lld and %lld share cache row %lld, and sequence %lld appends "
                              "at positions %lld .. %lld, which sequence %lld also uses (0 .. %lld): a slot written by "
                              "one sequence must be used by no other, or a key is lost",
                              (long long)(w->seq < o->seq ? w->seq : o->seq), (long long)(w->seq < o->seq ? o->seq : w->seq),
                              (long long)w->page, (long long)w->seq, (long long)w->wlo, (long long)w->len - 1,
                              (long long)o->seq, (long long)o->len - 1);
            break;
        }
    }
    free(use);
    return st;
}

/* The host arrays: lengths against capacity, left pads within the lengths, pages and batch rows in
 * range; p.seqlen_k. Arrays checked on the device: p.seqlen_k is the capacity. */
static fa_status check_arrays(fa_context *ctx, fa_kv_problem *kp)
{
    fa_problem *p = &kp->p;
    int64_t longest = kp->device_check ? kp->capacity : 0, rot_need = 0;
    /* without per-sequence arrays every sequence is the first: one pass, however large the batch */
    const int per_seq = kp->host_seqlens || kp->host_batch_idx || kp->host_leftpad || kp->paged;
    const int64_t checked = per_seq ? p->batch : p->batch < 1 ? p->batch : 1;
    for (int64_t b = 0; b < checked && !kp->device_check; ++b) {
        int64_t cached = kp->host_seqlens ? kp->host_seqlens[b] : kp->seqlen_cache;
        if (cached < 0)
            return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "cache_seqlens[%lld] = %lld is negative", (long long)b,
                            (long long)cached);
        int64_t total = cached + kp->seqlen_knew;
        if (total > kp->capacity)
            return FA_ERROR(ctx, FA_ERR_INVALID_ARG,
                            "sequence %lld: %lld cached + %lld new tokens exceed the cache's %lld positions",
                            (long long)b, (long long)cached, (long long)kp->seqlen_knew, (long long)kp->capacity);
        const int64_t pad = fa_kv_leftpad(kp, b);
        if (pad < 0 || pad > cached)
            return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "cache_leftpad[%lld] = %lld is outside 0 .. %s[%lld] = %lld",
                            (long long)b, (long long)pad, kp->host_seqlens ? "cache_seqlens" : "seqlen_cache",
                            (long long)b, (long long)cached);
        if (total - pad > longest)
            longest = total - pad; /* the keys it attends to */
        if (kp->host_batch_idx && (kp->host_batch_idx[b] < 0 || kp->host_batch_idx[b] >= kp->batch_cache))
            return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "cache_batch_idx[%lld] = %d is outside 0 .. %lld", (long long)b,
                            (int)kp->host_batch_idx[b], (long long)kp->batch_cache - 1);
        if (kp->paged) {
            int64_t pages = (total + kp->page_size - 1) / kp->page_size;
            for (int64_t i = 0; i < pages; ++i) {
                int32_t pg = kp->host_block_table[b * kp->block_table_stride + i];
                if (pg < 0 || pg >= kp->num_pages)
                    return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "block_table[%lld][%lld] = %d is outside 0 .. %lld",
                                    (long long)b, (long long)i, (int)pg, (long long)kp->num_pages - 1);
            }
        }
        /* positions the rotary tables must cover: new keys, and queries when they advance */
        int64_t qpos = (p->causal || p->window_left >= 0 || p->window_right >= 0) ? cached + p->seqlen_q : cached + 1;
        int64_t need = kp->has_new ? total : 0;
        if (p->seqlen_q > 0 && qpos > need)
            need = qpos;
        if (need > rot_need)
            rot_need = need;
    }
    fa_status st = check_exclusive_writes(ctx, kp);
    if (st != FA_SUCCESS)
        return st;
    if (kp->rotary && rot_need > kp->seqlen_ro)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "rotary: positions up to %lld need %lld table rows, seqlen_ro is %lld",
                        (long long)rot_need - 1, (long long)rot_need, (long long)kp->seqlen_ro);
    p->seqlen_k = longest;
    p->total_q = p->batch * p->seqlen_q;
    int64_t items, rows = longest > p->seqlen_q ? longest : p->seqlen_q;
    if (!fa_mul_ok(p->batch, p->heads_q, &items) || !fa_mul_ok(items, rows, &items))
        return FA_ERROR(ctx, FA_ERR_OVERFLOW, "batch x heads_q x the longest sequence overflows 64 bits");
    return FA_SUCCESS;
}

fa_status fa_validate_kvcache(fa_context *ctx, const fa_kvcache_args *a, fa_kv_problem *kp, int32_t **host)
{
    memset(kp, 0, sizeof *kp);
    *host = NULL;
    if (!a)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "args is NULL");
    fa_problem *p = &kp->p;
    fa_status st;
    if ((st = read_q(ctx, a, kp)) || (st = read_cache(ctx, a, kp)))
        return st;
    const int64_t B = p->batch, Sn = p->seqlen_q, Hq = p->heads_q, Hk = p->heads_kv, d = p->d, dv = p->d_v;
    int64_t sq[4] = {B, Sn, Hq, d}, so[4] = {B, Sn, Hq, dv}, sl[3] = {B, Hq, Sn};
    int64_t sc[4] = {kp->paged ? kp->num_pages : kp->batch_cache, kp->paged ? kp->page_size : kp->seqlen_cache, Hk, d};
    int64_t scv[4] = {sc[0], sc[1], Hk, dv};
    fa_span s_q, s_kc, s_vc, s_o, s_l = {0, 0}, s_kn = {0, 0}, s_vn = {0, 0}, s_cos, s_sin;
    if ((st = fa_check_tensor(ctx, "q", &a->q, 4, sq, p->dtype, 0, &s_q)) ||
        (st = fa_check_tensor(ctx, "k_cache", &a->k_cache, 4, sc, p->dtype, 0, &s_kc)) ||
        (st = fa_check_tensor(ctx, "v_cache", &a->v_cache, 4, scv, p->dtype, 0, &s_vc)) ||
        (st = fa_check_tensor(ctx, "o", &a->o, 4, so, p->out_dtype, 1, &s_o)))
        return st;
    p->has_lse = a->lse.data != NULL;
    if (p->has_lse && (st = fa_check_tensor(ctx, "lse", &a->lse, 3, sl, FA_DTYPE_F32, 1, &s_l)))
        return st;
    kp->has_new = tensor_given(&a->k_new) || tensor_given(&a->v_new);
    if (kp->has_new) {
        if (a->k_new.ndim != 4)
            return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "k_new: ndim is %d, expected 4", a->k_new.ndim);
        kp->seqlen_knew = a->k_new.shape[1];
        int64_t sn[4] = {B, kp->seqlen_knew, Hk, d}, snv[4] = {B, kp->seqlen_knew, Hk, dv};
        if (kp->seqlen_knew < 0 || kp->seqlen_knew > FA_KV_MAX_TOKENS)
            return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "k_new: seqlen_knew = %lld (0 .. 2^31 - 1)",
                            (long long)kp->seqlen_knew);
        /* the cache is written: it must be a valid output view */
        if ((st = fa_check_tensor(ctx, "k_new", &a->k_new, 4, sn, p->dtype, 0, &s_kn)) ||
            (st = fa_check_tensor(ctx, "v_new", &a->v_new, 4, snv, p->dtype, 0, &s_vn)) ||
            (st = fa_check_tensor(ctx, "k_cache", &a->k_cache, 4, sc, p->dtype, 1, &s_kc)) ||
            (st = fa_check_tensor(ctx, "v_cache", &a->v_cache, 4, scv, p->dtype, 1, &s_vc)))
            return st;
    }
    if ((st = read_rotary(ctx, a, kp, &s_cos, &s_sin)))
        return st;
    /* outputs (o, lse, and the caches when appending) overlap no input nor each other */
    fa_span outs[4] = {s_o, s_l, s_kc, s_vc};
    static const char *const out_names[4] = {"o", "lse", "k_cache", "v_cache"};
    const int n_outs = kp->has_new ? 4 : 2;
    fa_span ins[8] = {s_q, s_kn, s_vn, s_cos, s_sin, s_kc, s_vc};
    static const char *const in_names[7] = {"q", "k_new", "v_new", "rotary_cos", "rotary_sin", "k_cache", "v_cache"};
    /* the caches may be interleaved views of one packed cache: compared element by element */
    const fa_tensor *caches[2] = {&a->k_cache, &a->v_cache};
    for (int o = 0; o < n_outs; ++o) {
        for (int i = 0; i < 7; ++i) {
            if (o >= 2 && i == o + 3)
                continue;
            const int both_caches = o >= 2 && i >= 5;
            if (both_caches ? fa_tensors_overlap(caches[o - 2], outs[o], caches[i - 5], ins[i])
                            : fa_spans_overlap(outs[o], ins[i]))
                return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "output %s overlaps input %s in memory", out_names[o],
                                in_names[i]);
        }
        for (int o2 = o + 1; o2 < n_outs; ++o2)
            if (o >= 2 ? fa_tensors_overlap(caches[o - 2], outs[o], caches[o2 - 2], outs[o2])
                       : fa_spans_overlap(outs[o], outs[o2]))
                return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "%s and %s overlap in memory", out_names[o], out_names[o2]);
    }
    /* options: inference takes no dropout, block mask or deterministic flag */
    if (a->opts.dropout_p != 0.0f || a->opts.block_mask || a->opts.deterministic)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG,
                        "fa_forward_kvcache takes no dropout, block mask or deterministic flag (a forward for inference)");
    if (a->check_on_device) {
        fa_capabilities caps;
        memset(&caps, 0, sizeof caps);
        ctx->backend->capabilities(&caps);
        kp->device_check = (caps.features & FA_FEATURE_KVCACHE_DEVICE_CHECK) != 0;
    }
    /* checked on the device, the call reads no value on the host: the slopes included */
    if ((st = fa_check_options(ctx, &a->opts, p)) ||
        (st = fa_check_alibi(ctx, &a->opts, p, outs, out_names, n_outs, !kp->device_check)) ||
        (st = fa_check_sink(ctx, &a->opts, p, outs, out_names, n_outs, !kp->device_check)))
        return st;
    if (a->num_splits < 0)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "num_splits = %d must be >= 0 (0: chosen by the backend)",
                        a->num_splits);
    kp->num_splits = a->num_splits;
    /* the int32 arrays, read on the host unless the device checks them */
    int64_t n_seq = B, n_bt = 0, n_idx = a->cache_batch_idx ? B : 0, n_pad = a->cache_leftpad ? B : 0, n_all;
    if (kp->paged && !fa_mul_ok(B, kp->block_table_stride, &n_bt))
        return FA_ERROR(ctx, FA_ERR_OVERFLOW, "block_table: batch x block_table_stride overflows 64 bits");
    if (!a->cache_seqlens)
        n_seq = 0;
    if (!fa_add_ok(n_seq, n_bt, &n_all) || !fa_add_ok(n_all, n_idx, &n_all) || !fa_add_ok(n_all, n_pad, &n_all) ||
        (uint64_t)n_all > (uint64_t)(SIZE_MAX / sizeof(int32_t)))
        return FA_ERROR(ctx, FA_ERR_OVERFLOW, "the int32 arrays' sizes overflow");
    /* copy: the host copies, none when the device checks the arrays */
    int32_t *copy = NULL;
    if (!kp->device_check) {
        if (!(copy = malloc(sizeof(int32_t) * (size_t)(n_all > 0 ? n_all : 1))))
            return FA_ERROR(ctx, FA_ERR_OUT_OF_MEMORY, "cannot allocate host copies of %lld int32", (long long)n_all);
        *host = copy;
    }
    if (a->cache_seqlens) {
        if ((st = load_int32(ctx, "cache_seqlens", a->cache_seqlens, n_seq, outs, out_names, n_outs, copy)))
            return st;
        kp->cache_seqlens = a->cache_seqlens;
        kp->host_seqlens = copy;
    }
    if (kp->paged) {
        if ((st = load_int32(ctx, "block_table", a->block_table, n_bt, outs, out_names, n_outs, copy ? copy + n_seq : NULL)))
            return st;
        kp->block_table = a->block_table;
        kp->host_block_table = copy ? copy + n_seq : NULL;
    }
    if (a->cache_batch_idx) {
        if ((st = load_int32(ctx, "cache_batch_idx", a->cache_batch_idx, n_idx, outs, out_names, n_outs,
                             copy ? copy + n_seq + n_bt : NULL)))
            return st;
        kp->batch_idx = a->cache_batch_idx;
        kp->host_batch_idx = copy ? copy + n_seq + n_bt : NULL;
    }
    if (a->cache_leftpad) {
        if ((st = load_int32(ctx, "cache_leftpad", a->cache_leftpad, n_pad, outs, out_names, n_outs,
                             copy ? copy + n_seq + n_bt + n_idx : NULL)))
            return st;
        kp->cache_leftpad = a->cache_leftpad;
        kp->host_leftpad = copy ? copy + n_seq + n_bt + n_idx : NULL;
    }
    if ((st = check_arrays(ctx, kp)))
        return st;
    p->q = (fa_view){a->q.data, a->q.stride[0], a->q.stride[1], a->q.stride[2]};
    p->o = (fa_view){a->o.data, a->o.stride[0], a->o.stride[1], a->o.stride[2]};
    if (p->has_lse)
        p->lse = (fa_view){a->lse.data, a->lse.stride[0], a->lse.stride[2], a->lse.stride[1]};
    kp->k_cache = cache_view(&a->k_cache);
    kp->v_cache = cache_view(&a->v_cache);
    if (kp->has_new) {
        kp->k_new = cache_view(&a->k_new);
        kp->v_new = cache_view(&a->v_new);
    }
    return FA_SUCCESS;
}

fa_status fa_forward_kvcache(fa_context *ctx, const fa_kvcache_args *args)
{
    if (!ctx)
        return FA_ERR_INVALID_ARG;
    fa_kv_problem kp;
    int32_t *host = NULL;
    fa_status st = fa_validate_kvcache(ctx, args, &kp, &host);
    if (st == FA_SUCCESS) {
        fa_capabilities caps;
        memset(&caps, 0, sizeof caps);
        ctx->backend->capabilities(&caps);
        if (!ctx->backend->forward_kvcache || !(caps.features & FA_FEATURE_KVCACHE))
            st = FA_ERROR(ctx, FA_ERR_UNSUPPORTED, "fa_forward_kvcache: the %s backend does not implement it yet",
                          ctx->backend->name);
        else if ((kp.p.d > FA_MAX_HEAD_DIM || kp.p.d_v > FA_MAX_HEAD_DIM) && !(caps.features & FA_FEATURE_HEAD_DIM_V))
            st = FA_ERROR(ctx, FA_ERR_UNSUPPORTED, "head dims d = %lld, d_v = %lld: the %s backend runs at most %d",
                          (long long)kp.p.d, (long long)kp.p.d_v, ctx->backend->name, FA_MAX_HEAD_DIM);
        else
            st = fa_check_features(ctx, &kp.p);
    }
    if (st == FA_SUCCESS)
        st = fa_kv_dense_takes(ctx, &kp) ? fa_kv_dense_forward(ctx, args, &kp) : ctx->backend->forward_kvcache(ctx, &kp);
    if (st == FA_SUCCESS)
        fa_clear_error(ctx);
    free(host);
    return st;
}
