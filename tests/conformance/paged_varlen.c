/* paged_varlen.c: fa_forward over paged keys and values (fa_varlen.block_table) against the same
 * call on the packed K / V gathered by hand, bit for bit (o and lse), through the public API only:
 * shuffled and shared pages, runs of adjacent pages, page sizes 1 to larger than any sequence,
 * strided page layouts, GQA, causal, windows, softcap + ALiBi, dropout, fp32 / fp16 / bf16; then
 * the bad arguments: each status, a message naming the argument and the sequence, o untouched.
 * Exits 77 (SKIP) when the backend is not compiled in or has no device. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashattn.h"

static uint64_t rng = 0x243F6A8885A308D3ull;

static uint32_t next_u32(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng >> 33);
}

static float next_float(void)
{
    return (float)next_u32() / 2147483648.0f - 1.0f; /* [-1, 1) */
}

static void put(fa_dtype dt, void *buf, int64_t i, float x)
{
    if (dt == FA_DTYPE_F32)
        ((float *)buf)[i] = x;
    else
        ((uint16_t *)buf)[i] = dt == FA_DTYPE_F16 ? fa_f32_to_f16(x) : fa_f32_to_bf16(x);
}

typedef struct paged_case {
    const char *name;
    fa_dtype dt;
    int batch;
    int len_q[4], len_k[4];
    int hq, hkv, d, page_size;
    int causal, window_left, window_right;
    float softcap, dropout_p;
    int alibi;
    /* page layout: 0 pages of a dense cache; 1 K and V pages interleaved ([num_pages, 2, page,
     * h, d]: the page stride is twice a page); 2 heads strided ([num_pages, page, h, 2 d]) */
    int layout;
    int in_order; /* pages handed out in order (runs of adjacent pages), else shuffled */
    int share;    /* sequence 1 reads sequence 0's first page too (a shared prefix) */
} paged_case;

static const paged_case cases[] = {
    {"page1-gqa", FA_DTYPE_F32, 3, {3, 1, 4}, {5, 2, 7}, 4, 2, 16, 1, 0, -1, -1, 0, 0, 0, 0, 0, 0},
    {"page3-causal-bf16", FA_DTYPE_BF16, 3, {4, 2, 7}, {9, 2, 7}, 4, 1, 32, 3, 1, -1, -1, 0, 0, 0, 0, 0, 0},
    {"page4-in-order-f16", FA_DTYPE_F16, 2, {5, 3}, {13, 8}, 2, 2, 64, 4, 1, -1, -1, 0, 0, 0, 0, 1, 0},
    {"page16-longer-than-sequences", FA_DTYPE_F32, 3, {2, 5, 1}, {11, 5, 0}, 6, 3, 40, 16, 0, -1, -1, 0, 0, 0, 0, 0, 0},
    {"page64-window-empty-seq", FA_DTYPE_BF16, 4, {3, 0, 6, 2}, {7, 4, 6, 0}, 4, 2, 32, 64, 0, 2, 1, 0, 0, 0, 0, 0, 0},
    {"page2-interleaved-kv", FA_DTYPE_F32, 2, {6, 4}, {11, 9}, 4, 2, 16, 2, 1, -1, -1, 0, 0, 0, 1, 1, 0},
    {"page3-strided-heads", FA_DTYPE_F16, 2, {4, 4}, {8, 10}, 2, 2, 32, 3, 0, -1, -1, 0, 0, 0, 2, 0, 0},
    {"page4-shared-prefix-causal", FA_DTYPE_BF16, 2, {5, 6}, {14, 10}, 4, 2, 64, 4, 1, -1, -1, 0, 0, 0, 0, 0, 1},
    {"page5-softcap-alibi", FA_DTYPE_F32, 3, {3, 4, 2}, {12, 6, 9}, 4, 1, 32, 5, 1, -1, -1, 30.0f, 0, 1, 0, 0, 0},
    {"page8-dropout", FA_DTYPE_F32, 2, {7, 3}, {20, 9}, 2, 1, 16, 8, 0, -1, -1, 0, 0.25f, 0, 0, 1, 0},
};

/* Host images of one case: q, packed K / V, the pages, the table. */
typedef struct host_case {
    int64_t total_q, total_k, num_pages, stride, page_elems; /* page_elems: elements per page slot */
    int64_t sb, ss, sh;                                      /* the pages' strides */
    int32_t cu[2][5];
    int32_t *table;
    size_t es, q_bytes, kv_bytes, pages_bytes, o_bytes, lse_bytes;
    void *q, *k, *v, *pages; /* pages: K at offset 0 and V at v_at elements */
    int64_t v_at;
} host_case;

static int64_t ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

static void build(const paged_case *c, host_case *h)
{
    memset(h, 0, sizeof *h);
    h->es = fa_dtype_size(c->dt);
    int64_t used = 0, longest_pages = 1;
    for (int b = 0; b < c->batch; ++b) {
        h->cu[0][b + 1] = h->cu[0][b] + c->len_q[b];
        h->cu[1][b + 1] = h->cu[1][b] + c->len_k[b];
        int64_t n = ceil_div(c->len_k[b], c->page_size);
        used += n;
        if (n > longest_pages)
            longest_pages = n;
    }
    h->total_q = h->cu[0][c->batch];
    h->total_k = h->cu[1][c->batch];
    h->num_pages = used + 3; /* spare pages hold noise that must never be read */
    h->stride = longest_pages + 2;
    const int64_t row = (int64_t)c->hkv * c->d, page = c->page_size * row;
    h->sh = c->layout == 2 ? 2 * c->d : c->d;
    h->ss = c->layout == 2 ? 2 * row : row;
    h->sb = c->layout == 1 ? 2 * page : c->page_size * h->ss;
    h->v_at = c->layout == 1 ? page : h->num_pages * h->sb;
    const int64_t pages_elems = c->layout == 1 ? h->num_pages * h->sb : 2 * h->num_pages * h->sb;
    h->q_bytes = (size_t)(h->total_q * c->hq * c->d) * h->es;
    h->kv_bytes = (size_t)(h->total_k * row) * h->es;
    h->pages_bytes = (size_t)pages_elems * h->es;
    h->o_bytes = (size_t)(h->total_q * c->hq * c->d) * h->es;
    h->lse_bytes = (size_t)(c->hq * h->total_q) * sizeof(float);
    h->q = malloc(h->q_bytes + 1);
    h->k = malloc(h->kv_bytes + 1);
    h->v = malloc(h->kv_bytes + 1);
    h->pages = malloc(h->pages_bytes);
    h->table = malloc(sizeof(int32_t) * (size_t)(c->batch * h->stride));
    for (int64_t i = 0; i < h->total_q * c->hq * c->d; ++i)
        put(c->dt, h->q, i, next_float());
    for (int64_t i = 0; i < pages_elems; ++i)
        put(c->dt, h->pages, i, 1e3f * next_float()); /* noise: a key read from the wrong place shows */
    /* the page order: in order, or a shuffle of all pages */
    int32_t *order = malloc(sizeof(int32_t) * (size_t)h->num_pages);
    for (int64_t i = 0; i < h->num_pages; ++i)
        order[i] = (int32_t)i;
    for (int64_t i = h->num_pages - 1; i > 0 && !c->in_order; --i) {
        int64_t j = next_u32() % (uint64_t)(i + 1);
        int32_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    int64_t next = 0;
    for (int b = 0; b < c->batch; ++b) {
        for (int64_t i = 0; i < h->stride; ++i) /* entries past the used ones are never read */
            h->table[b * h->stride + i] = i % 2 ? -7 : INT32_MAX;
        for (int64_t i = 0; i < ceil_div(c->len_k[b], c->page_size); ++i)
            h->table[b * h->stride + i] = c->share && b == 1 && i == 0 ? h->table[0] : order[next++];
    }
    free(order);
    /* the keys: random where a sequence owns the slot, else the owner's (shared prefix) */
    for (int b = 0; b < c->batch; ++b)
        for (int64_t j = 0; j < c->len_k[b]; ++j) {
            const int64_t pg = h->table[b * h->stride + j / c->page_size], r = j % c->page_size;
            for (int64_t hh = 0; hh < c->hkv; ++hh)
                for (int64_t e = 0; e < c->d; ++e) {
                    const int64_t at = pg * h->sb + r * h->ss + hh * h->sh + e;
                    const int64_t packed = (h->cu[1][b] + j) * row + hh * c->d + e;
                    const int shared = c->share && b == 1 && j < c->page_size && j < c->len_k[0];
                    if (!shared) {
                        put(c->dt, h->pages, at, next_float());
                        put(c->dt, h->pages, h->v_at + at, next_float());
                    }
                    memcpy((char *)h->k + packed * h->es, (char *)h->pages + at * h->es, h->es);
                    memcpy((char *)h->v + packed * h->es, (char *)h->pages + (h->v_at + at) * h->es, h->es);
                }
        }
}

static void release(host_case *h)
{
    free(h->q);
    free(h->k);
    free(h->v);
    free(h->pages);
    free(h->table);
}

/* Device buffers of one case: every input once, o / lse for each of the two calls. */
typedef struct device_case {
    void *q, *k, *v, *pages, *cu, *table, *slopes, *o[2], *lse[2];
} device_case;

static void *upload(fa_context *ctx, const void *src, size_t bytes)
{
    void *p = NULL;
    if (fa_malloc(ctx, bytes ? bytes : 1, &p) != FA_SUCCESS)
        return NULL;
    if (bytes && fa_memcpy(ctx, p, src, bytes, FA_COPY_HOST_TO_DEVICE) != FA_SUCCESS)
        return NULL;
    return p;
}

static fa_tensor tensor(void *data, fa_dtype dt, int ndim, const int64_t *shape)
{
    return fa_tensor_contiguous(data, dt, ndim, shape);
}

/* The arguments of the paged call (paged 1) or the packed one (paged 0). */
static fa_fwd_args make_args(const paged_case *c, const host_case *h, const device_case *dv, fa_varlen *vl, int paged,
                             int which)
{
    memset(vl, 0, sizeof *vl);
    vl->cu_seqlens_q = dv->cu;
    vl->cu_seqlens_k = (const int32_t *)dv->cu + 5;
    vl->batch = c->batch;
    vl->max_seqlen_q = 8;
    vl->max_seqlen_k = 32;
    fa_fwd_args a;
    memset(&a, 0, sizeof a);
    const int64_t sq[3] = {h->total_q, c->hq, c->d}, sk[3] = {h->total_k, c->hkv, c->d}, sl[2] = {c->hq, h->total_q};
    a.q = tensor(dv->q, c->dt, 3, sq);
    a.o = tensor(dv->o[which], c->dt, 3, sq);
    a.lse = tensor(dv->lse[which], FA_DTYPE_F32, 2, sl);
    if (paged) {
        const int64_t sp[4] = {h->num_pages, c->page_size, c->hkv, c->d};
        const int64_t st[4] = {h->sb, h->ss, h->sh, 1};
        a.k = tensor(dv->pages, c->dt, 4, sp);
        memcpy(a.k.stride, st, sizeof st);
        a.v = a.k;
        a.v.data = (char *)dv->pages + h->v_at * (int64_t)h->es;
        vl->block_table = dv->table;
        vl->block_table_stride = h->stride;
    } else {
        a.k = tensor(dv->k, c->dt, 3, sk);
        a.v = tensor(dv->v, c->dt, 3, sk);
    }
    a.varlen = vl;
    a.opts = fa_options_default();
    a.opts.causal = c->causal;
    a.opts.window_left = c->window_left;
    a.opts.window_right = c->window_right;
    a.opts.softcap = c->softcap;
    a.opts.dropout_p = c->dropout_p;
    a.opts.dropout_seed = 1234;
    a.opts.alibi_slopes = c->alibi ? dv->slopes : NULL;
    return a;
}

static int run_case(fa_context *ctx, const paged_case *c, fa_capabilities *caps)
{
    if (c->dropout_p > 0 && !(caps->features & FA_FEATURE_DROPOUT)) {
        printf("  SKIP %s: no dropout on this backend\n", c->name);
        return 1;
    }
    host_case h;
    build(c, &h);
    device_case dv;
    memset(&dv, 0, sizeof dv);
    float slopes[8];
    for (int i = 0; i < 8; ++i)
        slopes[i] = 0.25f / (float)(i + 1);
    int ok = (dv.q = upload(ctx, h.q, h.q_bytes)) && (dv.k = upload(ctx, h.k, h.kv_bytes)) &&
             (dv.v = upload(ctx, h.v, h.kv_bytes)) && (dv.pages = upload(ctx, h.pages, h.pages_bytes)) &&
             (dv.cu = upload(ctx, h.cu, sizeof h.cu)) &&
             (dv.table = upload(ctx, h.table, sizeof(int32_t) * (size_t)(c->batch * h.stride))) &&
             (dv.slopes = upload(ctx, slopes, sizeof slopes));
    unsigned char *got[2][2] = {{NULL, NULL}, {NULL, NULL}};
    for (int w = 0; w < 2 && ok; ++w) {
        got[w][0] = malloc(h.o_bytes + 1);
        got[w][1] = malloc(h.lse_bytes + 1);
        memset(got[w][0], 0x5a, h.o_bytes + 1);
        memset(got[w][1], 0x5a, h.lse_bytes + 1);
        ok = (dv.o[w] = upload(ctx, got[w][0], h.o_bytes)) && (dv.lse[w] = upload(ctx, got[w][1], h.lse_bytes));
    }
    if (!ok)
        printf("  FAILED %s: cannot upload the inputs (%s)\n", c->name, fa_context_last_error(ctx));
    for (int w = 0; w < 2 && ok; ++w) {
        fa_varlen vl;
        fa_fwd_args a = make_args(c, &h, &dv, &vl, w == 0, w);
        fa_status st = fa_forward(ctx, &a);
        if (st == FA_ERR_UNSUPPORTED && w == 0) {
            printf("  SKIP %s: %s\n", c->name, fa_context_last_error(ctx));
            break;
        }
        if (st != FA_SUCCESS) {
            printf("  FAILED %s: %s call: %s (%s)\n", c->name, w == 0 ? "paged" : "packed", fa_status_string(st),
                   fa_context_last_error(ctx));
            ok = 0;
            break;
        }
        ok = fa_memcpy(ctx, got[w][0], dv.o[w], h.o_bytes, FA_COPY_DEVICE_TO_HOST) == FA_SUCCESS &&
             fa_memcpy(ctx, got[w][1], dv.lse[w], h.lse_bytes, FA_COPY_DEVICE_TO_HOST) == FA_SUCCESS;
        if (w == 1 && ok && (memcmp(got[0][0], got[1][0], h.o_bytes) || memcmp(got[0][1], got[1][1], h.lse_bytes))) {
            printf("  FAILED %s: the paged call's %s differs from the packed call's\n", c->name,
                   memcmp(got[0][0], got[1][0], h.o_bytes) ? "o" : "lse");
            ok = 0;
        }
    }
    for (int w = 0; w < 2; ++w) {
        free(got[w][0]);
        free(got[w][1]);
        fa_free(ctx, dv.o[w]);
        fa_free(ctx, dv.lse[w]);
    }
    void *bufs[] = {dv.q, dv.k, dv.v, dv.pages, dv.cu, dv.table, dv.slopes};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; ++i)
        fa_free(ctx, bufs[i]);
    release(&h);
    if (ok)
        printf("  ok %s\n", c->name);
    return ok;
}

/* ------------------------------------------------------------------ bad arguments */

/* The base: 2 sequences of 2 and 3 queries over 5 and 3 keys in pages of 2 rows; 6 pages, 3
 * table entries per sequence; fp32, 2 query heads on 1 kv head, d 16. */
enum { BAD_PAGES = 6, BAD_PAGE = 2, BAD_HQ = 2, BAD_D = 16, BAD_TQ = 5 };
static const int32_t bad_cu[6] = {0, 2, 5, 0, 5, 8};
static const int32_t bad_table[6] = {4, 0, 2, 1, 5, -1};

typedef struct bad_bufs {
    void *q, *pages, *cu, *table, *o, *lse;
    size_t o_bytes;
} bad_bufs;

static fa_fwd_args bad_args(const bad_bufs *bb, fa_varlen *vl)
{
    memset(vl, 0, sizeof *vl);
    vl->cu_seqlens_q = bb->cu;
    vl->cu_seqlens_k = (const int32_t *)bb->cu + 3;
    vl->batch = 2;
    vl->max_seqlen_q = 3;
    vl->max_seqlen_k = 5;
    vl->block_table = bb->table;
    vl->block_table_stride = 3;
    fa_fwd_args a;
    memset(&a, 0, sizeof a);
    const int64_t sq[3] = {BAD_TQ, BAD_HQ, BAD_D}, sp[4] = {BAD_PAGES, BAD_PAGE, 1, BAD_D}, sl[2] = {BAD_HQ, BAD_TQ};
    a.q = tensor(bb->q, FA_DTYPE_F32, 3, sq);
    a.k = tensor(bb->pages, FA_DTYPE_F32, 4, sp);
    a.v = tensor((float *)bb->pages + BAD_PAGES * BAD_PAGE * BAD_D, FA_DTYPE_F32, 4, sp);
    a.o = tensor(bb->o, FA_DTYPE_F32, 3, sq);
    a.lse = tensor(bb->lse, FA_DTYPE_F32, 2, sl);
    a.varlen = vl;
    a.opts = fa_options_default();
    return a;
}

/* The call must fail with `expected`, a message mentioning both needles, and o untouched. */
static int expect(fa_context *ctx, const bad_bufs *bb, const char *name, fa_status got, fa_status expected,
                  const char *needle_a, const char *needle_b)
{
    const char *msg = fa_context_last_error(ctx);
    int ok = got == expected && strstr(msg, needle_a) && (!needle_b || strstr(msg, needle_b));
    unsigned char *o = malloc(bb->o_bytes);
    if (o && fa_memcpy(ctx, o, bb->o, bb->o_bytes, FA_COPY_DEVICE_TO_HOST) == FA_SUCCESS) {
        for (size_t i = 0; i < bb->o_bytes; ++i)
            if (o[i] != 0x5a) {
                printf("  FAILED bad %s: o was written\n", name);
                ok = 0;
                break;
            }
    } else {
        ok = 0;
    }
    free(o);
    if (got != expected || !ok)
        printf("  FAILED bad %s: %s, expected %s; message \"%s\" should mention \"%s\" and \"%s\"\n", name,
               fa_status_string(got), fa_status_string(expected), msg, needle_a, needle_b ? needle_b : "");
    return ok;
}

static int run_bad(fa_context *ctx)
{
    bad_bufs bb;
    memset(&bb, 0, sizeof bb);
    float q[BAD_TQ * BAD_HQ * BAD_D], pages[2 * BAD_PAGES * BAD_PAGE * BAD_D];
    for (size_t i = 0; i < sizeof q / sizeof q[0]; ++i)
        q[i] = next_float();
    for (size_t i = 0; i < sizeof pages / sizeof pages[0]; ++i)
        pages[i] = next_float();
    bb.o_bytes = sizeof q;
    unsigned char poison[sizeof q];
    memset(poison, 0x5a, sizeof poison);
    if (!(bb.q = upload(ctx, q, sizeof q)) || !(bb.pages = upload(ctx, pages, sizeof pages)) ||
        !(bb.cu = upload(ctx, bad_cu, sizeof bad_cu)) || !(bb.table = upload(ctx, bad_table, sizeof bad_table)) ||
        !(bb.o = upload(ctx, poison, sizeof poison)) ||
        !(bb.lse = upload(ctx, poison, BAD_HQ * BAD_TQ * sizeof(float)))) {
        printf("  FAILED bad: cannot upload (%s)\n", fa_context_last_error(ctx));
        return 1;
    }
    int failures = 0;
    fa_varlen vl;
    fa_fwd_args a;
    int32_t t[6];
#define SET_TABLE(i, val)                                                                                         \
    do {                                                                                                           \
        memcpy(t, bad_table, sizeof t);                                                                            \
        t[i] = (val);                                                                                              \
        fa_memcpy(ctx, bb.table, t, sizeof t, FA_COPY_HOST_TO_DEVICE);                                             \
    } while (0)

    /* the base is valid (else every rejection below proves nothing); then o is poisoned again */
    a = bad_args(&bb, &vl);
    if (fa_forward(ctx, &a) != FA_SUCCESS) {
        printf("  FAILED bad: the base call fails: %s\n", fa_context_last_error(ctx));
        ++failures;
    }
    fa_memcpy(ctx, bb.o, poison, sizeof poison, FA_COPY_HOST_TO_DEVICE);

    SET_TABLE(1, BAD_PAGES);
    a = bad_args(&bb, &vl);
    failures += !expect(ctx, &bb, "page index = num_pages", fa_forward(ctx, &a), FA_ERR_INVALID_ARG,
                        "block_table[0][1] = 6", "sequence 0");
    SET_TABLE(4, -1);
    a = bad_args(&bb, &vl);
    failures += !expect(ctx, &bb, "negative page index", fa_forward(ctx, &a), FA_ERR_INVALID_ARG,
                        "block_table[1][1] = -1", "sequence 1");
    SET_TABLE(5, -1); /* the base again: entry [1][2] is past sequence 1's pages, never read */

    a = bad_args(&bb, &vl);
    a.v.shape[0] = BAD_PAGES - 1;
    failures += !expect(ctx, &bb, "v with other pages than k", fa_forward(ctx, &a), FA_ERR_INVALID_ARG, "v:", "shape[0]");
    a = bad_args(&bb, &vl);
    a.k.shape[2] = a.v.shape[2] = 3;
    failures += !expect(ctx, &bb, "k heads not dividing q's", fa_forward(ctx, &a), FA_ERR_INVALID_ARG, "heads_kv = 3",
                        NULL);
    a = bad_args(&bb, &vl);
    a.k.ndim = 3;
    failures += !expect(ctx, &bb, "packed k with a block table", fa_forward(ctx, &a), FA_ERR_INVALID_ARG, "ndim",
                        "paged");
    a = bad_args(&bb, &vl);
    vl.block_table_stride = 2; /* sequence 0 needs 3 pages of 2 for its 5 keys */
    failures += !expect(ctx, &bb, "block table too short", fa_forward(ctx, &a), FA_ERR_INVALID_ARG, "sequence 0",
                        "block_table_stride 2");
    a = bad_args(&bb, &vl);
    vl.block_table_stride = 0;
    failures += !expect(ctx, &bb, "block_table_stride 0", fa_forward(ctx, &a), FA_ERR_INVALID_ARG,
                        "block_table_stride = 0", NULL);
    a = bad_args(&bb, &vl);
    a.k.shape[1] = a.v.shape[1] = 0;
    failures += !expect(ctx, &bb, "page_size 0", fa_forward(ctx, &a), FA_ERR_INVALID_ARG, "page_size", NULL);
    a = bad_args(&bb, &vl);
    vl.block_table = NULL;
    const int64_t sk[3] = {8, 1, BAD_D};
    a.k = tensor(bb.pages, FA_DTYPE_F32, 3, sk);
    a.v = tensor((float *)bb.pages + 8 * BAD_D, FA_DTYPE_F32, 3, sk);
    failures += !expect(ctx, &bb, "block_table_stride without block_table", fa_forward(ctx, &a), FA_ERR_INVALID_ARG,
                        "block_table_stride = 3", "without");
    a = bad_args(&bb, &vl);
    vl.block_table = (const int32_t *)a.lse.data + 2;
    failures += !expect(ctx, &bb, "block_table inside lse", fa_forward(ctx, &a), FA_ERR_INVALID_ARG,
                        "block_table overlaps", "lse");

    /* no backward over pages, nor a query for one */
    a = bad_args(&bb, &vl);
    fa_bwd_args g;
    memset(&g, 0, sizeof g);
    g.q = a.q, g.k = a.k, g.v = a.v, g.o = a.q, g.lse = a.lse, g.dout = a.q;
    g.dq = a.o, g.dk = a.k, g.dv = a.v, g.varlen = &vl, g.opts = a.opts;
    failures += !expect(ctx, &bb, "backward", fa_backward(ctx, &g), FA_ERR_UNSUPPORTED, "block_table", "backward");
    failures += !expect(ctx, &bb, "query_support backward", fa_query_support(ctx, &a, 1, NULL, 0), FA_ERR_UNSUPPORTED,
                        "block_table", "backward");
    if (fa_query_support(ctx, &a, 0, NULL, 0) != FA_SUCCESS) {
        printf("  FAILED bad: fa_query_support of the paged forward: %s\n", fa_context_last_error(ctx));
        ++failures;
    }
    /* fa_plan counts the gathered K / V (8 keys x 1 head x 16 x 4 bytes = 512, twice) in the
     * forward's workspace */
    fa_plan_info paged_plan, packed_plan;
    fa_varlen vl_packed;
    fa_fwd_args packed = bad_args(&bb, &vl_packed);
    vl_packed.block_table = NULL;
    vl_packed.block_table_stride = 0;
    packed.k = tensor(bb.pages, FA_DTYPE_F32, 3, sk);
    packed.v = tensor((float *)bb.pages + 8 * BAD_D, FA_DTYPE_F32, 3, sk);
    if (fa_plan(ctx, &a, &paged_plan) != FA_SUCCESS || fa_plan(ctx, &packed, &packed_plan) != FA_SUCCESS ||
        paged_plan.workspace_fwd != packed_plan.workspace_fwd + 2 * 512 || paged_plan.workspace_bwd != 0) {
        printf("  FAILED bad: fa_plan's workspace_fwd %lld (packed %lld + 1024 expected), workspace_bwd %lld (0)\n",
               (long long)paged_plan.workspace_fwd, (long long)packed_plan.workspace_fwd,
               (long long)paged_plan.workspace_bwd);
        ++failures;
    }
    void *bufs[] = {bb.q, bb.pages, bb.cu, bb.table, bb.o, bb.lse};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; ++i)
        fa_free(ctx, bufs[i]);
    if (!failures)
        printf("  ok bad arguments\n");
    return failures;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IONBF, 0); /* a crash keeps the lines before it */
    const char *backend = "cpu";
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--backend") && i + 1 < argc) {
            backend = argv[++i];
        } else {
            fprintf(stderr, "usage: %s [--backend NAME]\n", argv[0]);
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
    fa_backend_capabilities(backend, &caps);
    int failures = 0;
    printf("paged varlen forward on %s\n", backend);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i)
        failures += !run_case(ctx, &cases[i], &caps);
    failures += run_bad(ctx);
    fa_context_destroy(ctx);
    printf("%d failure(s)\n", failures);
    return failures ? 1 : 0;
}
