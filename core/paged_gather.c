/* paged_gather.c: a varlen forward whose keys and values live in pages (FlashAttention-2's
 * block_table in flash_attn_varlen_func). The core checks the block table on the host, then
 * gathers each sequence's keys and values into a packed workspace on the context's device with
 * the backend's device-to-device copies, so that every backend runs its ordinary varlen kernel:
 * correct and portable first; a kernel that reads the pages itself is a backend's future work. */
#include "internal.h"
#include "validate.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* v's part of the workspace starts on this boundary, so that both halves are as aligned as the
 * allocation itself (the choosers test the alignment of k and v alike) */
#define FA_PAGED_ALIGN 256

fa_status fa_paged_load(fa_context *ctx, const fa_varlen *vl, const fa_tensor *k, const fa_tensor *v, fa_problem *p,
                        const fa_span *outs, const char *const *out_names, int n_outs, int32_t *host_table)
{
    const int64_t num_pages = k->shape[0], page_size = k->shape[1], stride = vl->block_table_stride;
    if (page_size < 1)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "block_table: page_size (k.shape[1]) = %lld must be >= 1",
                        (long long)page_size);
    if (stride < 1)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "block_table_stride = %lld must be >= 1 with a block_table",
                        (long long)stride);
    int64_t entries, bytes;
    if (!fa_mul_ok(p->batch, stride, &entries) || !fa_mul_ok(entries, (int64_t)sizeof(int32_t), &bytes) ||
        (uint64_t)bytes > (uint64_t)SIZE_MAX || (uintptr_t)vl->block_table > UINTPTR_MAX - (uintptr_t)bytes)
        return FA_ERROR(ctx, FA_ERR_OVERFLOW, "block_table: batch %lld x block_table_stride %lld overflows",
                        (long long)p->batch, (long long)stride);
    /* the table is read while the outputs are written (and a later fused kernel would read it on
     * the device) */
    fa_span s_bt = {(uintptr_t)vl->block_table, (uintptr_t)vl->block_table + (uintptr_t)bytes};
    for (int i = 0; i < n_outs; ++i)
        if (fa_spans_overlap(s_bt, outs[i]))
            return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "block_table overlaps output %s in memory", out_names[i]);
    if (bytes > 0) {
        fa_status st = ctx->backend->copy(ctx, host_table, vl->block_table, (size_t)bytes, FA_COPY_DEVICE_TO_HOST);
        if (st != FA_SUCCESS)
            return st;
    }
    for (int64_t b = 0; b < p->batch; ++b) {
        const int64_t len = (int64_t)p->host_cu_k[b + 1] - p->host_cu_k[b];
        const int64_t pages = len / page_size + (len % page_size != 0);
        if (pages > stride)
            return FA_ERROR(ctx, FA_ERR_INVALID_ARG,
                            "block_table: sequence %lld has %lld keys (cu_seqlens_k), more than its "
                            "block_table_stride %lld pages of page_size %lld hold",
                            (long long)b, (long long)len, (long long)stride, (long long)page_size);
        for (int64_t i = 0; i < pages; ++i) {
            const int32_t pg = host_table[b * stride + i];
            if (pg < 0 || pg >= num_pages)
                return FA_ERROR(ctx, FA_ERR_INVALID_ARG,
                                "block_table[%lld][%lld] = %d (sequence %lld) is outside the pages 0 .. %lld",
                                (long long)b, (long long)i, (int)pg, (long long)b, (long long)num_pages - 1);
        }
    }
    p->paged = 1;
    p->page_size = page_size;
    p->num_pages = num_pages;
    p->block_table_stride = stride;
    p->host_block_table = host_table;
    p->k_pages = (fa_view){k->data, k->stride[0], k->stride[1], k->stride[2]};
    p->v_pages = (fa_view){v->data, v->stride[0], v->stride[1], v->stride[2]};
    p->total_k = p->host_cu_k[p->batch];
    /* the kernels see packed [total_k, heads_kv, d] K and [total_k, heads_kv, d_v] V; their
     * addresses come with the gather */
    p->k = (fa_view){NULL, 0, p->heads_kv * p->d, p->d};
    p->v = (fa_view){NULL, 0, p->heads_kv * p->d_v, p->d_v};
    if (fa_paged_workspace_bytes(p) < 0)
        return FA_ERROR(ctx, FA_ERR_OVERFLOW, "block_table: the gathered K / V (%lld x %lld x (%lld + %lld) elements) "
                        "overflow 64 bits", (long long)p->total_k, (long long)p->heads_kv, (long long)p->d,
                        (long long)p->d_v);
    return FA_SUCCESS;
}

/* Bytes of one packed half (K with dim d or V with dim d_v), rounded up to FA_PAGED_ALIGN; -1 when
 * it overflows. */
static int64_t half_bytes(const fa_problem *p, int64_t dim)
{
    int64_t n;
    if (!fa_mul_ok(p->total_k, p->heads_kv, &n) || !fa_mul_ok(n, dim, &n) ||
        !fa_mul_ok(n, (int64_t)fa_dtype_size(p->dtype), &n) || !fa_add_ok(n, FA_PAGED_ALIGN - 1, &n))
        return -1;
    return n / FA_PAGED_ALIGN * FA_PAGED_ALIGN;
}

int64_t fa_paged_workspace_bytes(const fa_problem *p)
{
    if (!p->paged)
        return 0;
    int64_t hk = half_bytes(p, p->d), hv = half_bytes(p, p->d_v), all;
    if (hk < 0 || hv < 0 || !fa_add_ok(hk, hv, &all) || (uint64_t)all > (uint64_t)SIZE_MAX)
        return -1;
    return all;
}

/* Copies `rows` rows of one page run (rows of heads_kv x dim elements, starting at src) into the
 * packed rows at dst: one copy when the run's rows are dense, else one per row or per row and
 * head. Byte offsets stay inside spans validated by fa_check_tensor. */
static fa_status copy_rows(fa_context *ctx, const fa_problem *p, const fa_view *pages, int64_t dim, char *dst,
                           const char *src, int64_t rows)
{
    const int64_t es = (int64_t)fa_dtype_size(p->dtype), row = p->heads_kv * dim;
    if (pages->sh == dim && (pages->ss == row || rows == 1))
        return ctx->backend->copy(ctx, dst, src, (size_t)(rows * row * es), FA_COPY_DEVICE_TO_DEVICE);
    for (int64_t r = 0; r < rows; ++r) {
        const char *s = src + r * pages->ss * es;
        char *t = dst + r * row * es;
        fa_status st;
        if (pages->sh == dim) {
            st = ctx->backend->copy(ctx, t, s, (size_t)(row * es), FA_COPY_DEVICE_TO_DEVICE);
            if (st != FA_SUCCESS)
                return st;
            continue;
        }
        for (int64_t h = 0; h < p->heads_kv; ++h)
            if ((st = ctx->backend->copy(ctx, t + h * dim * es, s + h * pages->sh * es, (size_t)(dim * es),
                                         FA_COPY_DEVICE_TO_DEVICE)) != FA_SUCCESS)
                return st;
    }
    return FA_SUCCESS;
}

/* Sequence b's keys (or values) from its pages into the packed rows from k0 on. Consecutive page
 * indices whose pages follow each other in memory (a dense cache filled in order) form one run
 * and one copy; every page but a sequence's last is full, so a run is one block of rows. */
static fa_status gather_sequence(fa_context *ctx, const fa_problem *p, const fa_view *pages, int64_t dim, char *packed,
                                 int64_t b, int64_t k0, int64_t len)
{
    const int64_t es = (int64_t)fa_dtype_size(p->dtype), row = p->heads_kv * dim, ps = p->page_size;
    const int32_t *table = p->host_block_table + b * p->block_table_stride;
    const int runs_merge = pages->sh == dim && pages->ss == row && pages->sb == ps * row;
    for (int64_t j = 0; j < len;) {
        const int64_t i = j / ps, first = table[i];
        int64_t n = 1; /* pages in this run */
        while (runs_merge && (i + n) * ps < len && table[i + n] == first + n)
            ++n;
        const int64_t end = (i + n) * ps < len ? (i + n) * ps : len;
        fa_status st = copy_rows(ctx, p, pages, dim, packed + (k0 + j) * row * es,
                                 (const char *)pages->data + first * pages->sb * es, end - j);
        if (st != FA_SUCCESS)
            return st;
        j = end;
    }
    return FA_SUCCESS;
}

fa_status fa_paged_gather(fa_context *ctx, fa_problem *p, void **workspace)
{
    *workspace = NULL;
    const int64_t bytes = fa_paged_workspace_bytes(p);
    if (bytes <= 0) /* not paged, or no key at all: the kernels read no row */
        return bytes < 0 ? FA_ERROR(ctx, FA_ERR_OVERFLOW, "block_table: the gathered K / V overflow") : FA_SUCCESS;
    void *ws = NULL;
    fa_status st = ctx->backend->alloc(ctx, (size_t)bytes, &ws);
    if (st != FA_SUCCESS) {
        char why[400];
        snprintf(why, sizeof why, "%s", fa_context_last_error(ctx));
        return FA_ERROR(ctx, st, "block_table: cannot allocate the %lld bytes of gathered K / V (%s)", (long long)bytes, why);
    }
    *workspace = ws;
    char *k_packed = ws, *v_packed = k_packed + half_bytes(p, p->d);
    for (int64_t b = 0; b < p->batch && st == FA_SUCCESS; ++b) {
        const int64_t k0 = p->host_cu_k[b], len = (int64_t)p->host_cu_k[b + 1] - k0;
        st = gather_sequence(ctx, p, &p->k_pages, p->d, k_packed, b, k0, len);
        if (st == FA_SUCCESS)
            st = gather_sequence(ctx, p, &p->v_pages, p->d_v, v_packed, b, k0, len);
    }
    if (st != FA_SUCCESS)
        return st;
    p->k.data = k_packed;
    p->v.data = v_packed;
    return FA_SUCCESS;
}
