/* flash_tiles.h: what the CPU backend's fused forward (flash_forward.c) and backward
 * (flash_backward.c) share: moving tiles between the tensors (any dtype and strides) and fp32
 * buffers, the masks, score modifiers and dropout applied to a tile of scores, the shapes of the
 * per-thread buffers; it includes the headers all three files use. Included by those two files and
 * flash_workspace.c only. */
#ifndef FA_CPU_FLASH_TILES_H
#define FA_CPU_FLASH_TILES_H

#include "bf16_pack.h"
#include "cpu.h"
#include "empty_row.h"
#include "half.h"
#include "philox.h"
#include "pool.h"
#include "score_mod.h"
#include "sink.h"
#include "softmax.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PANEL FA_CPU_PANEL

static inline int64_t round_up(int64_t x, int64_t m)
{
    return (x + m - 1) / m * m;
}

/* ------------------------------------------------------------------ tile movement */

/* n elements of dtype dt at src, times mul, into fp32 dst; the dtype switch is outside the loop */
static inline void convert_row(fa_dtype dt, const void *src, int64_t off, int64_t n, float mul, float *dst)
{
    if (dt == FA_DTYPE_F32) {
        const float *x = (const float *)src + off;
        for (int64_t c = 0; c < n; ++c)
            dst[c] = mul * x[c];
    } else if (dt == FA_DTYPE_F16) {
        const uint16_t *x = (const uint16_t *)src + off;
        for (int64_t c = 0; c < n; ++c)
            dst[c] = mul * fa_half_to_float(x[c]);
    } else {
        const uint16_t *x = (const uint16_t *)src + off;
        for (int64_t c = 0; c < n; ++c)
            dst[c] = mul * fa_bfloat_to_float(x[c]);
    }
}

/* The head dim of one of the problem's views: d_v for V, O, dO and dV, d for Q, K, dQ and dK. */
static inline int64_t view_dim(const fa_problem *p, const fa_view *v)
{
    return v == &p->v || v == &p->o || v == &p->dout || v == &p->dv ? p->d_v : p->d;
}

/* rows [row0, row0 + n) of head h of batch b into dst (n x ld, row-major), times mul, zero-padded
 * to `rows` rows and ld columns. */
static inline void load_rows(const fa_problem *p, const fa_view *v, int64_t b, int64_t row0, int64_t n, int64_t rows,
                      int64_t h, float mul, float *dst, int64_t ld)
{
    const int64_t dim = view_dim(p, v);
    for (int64_t r = 0; r < rows; ++r) {
        float *out = dst + r * ld;
        if (r < n) {
            convert_row(p->dtype, v->data, b * v->sb + (row0 + r) * v->ss + h * v->sh, dim, mul, out);
            for (int64_t c = dim; c < ld; ++c)
                out[c] = 0.0f;
        } else {
            memset(out, 0, sizeof(float) * (size_t)ld);
        }
    }
}

/* The same rows transposed: dst is d_pad x ld with dst[c * ld + r]. */
static inline void load_rows_transposed(const fa_problem *p, const fa_view *v, int64_t b, int64_t row0, int64_t n,
                                 int64_t h, float *dst, int64_t d_pad, int64_t ld)
{
    float row[FA_MAX_HEAD_DIM];
    const int64_t dim = view_dim(p, v);
    if (n < ld || dim < d_pad)
        memset(dst, 0, sizeof(float) * (size_t)(d_pad * ld));
    for (int64_t r = 0; r < n; ++r) {
        convert_row(p->dtype, v->data, b * v->sb + (row0 + r) * v->ss + h * v->sh, dim, 1.0f, row);
        for (int64_t c = 0; c < dim; ++c)
            dst[c * ld + r] = row[c];
    }
}

/* rows of src, times mul_default or (row_mul given: the forward's 1/l per row) the row's own
 * factor, into rows [row0, row0 + n) of head h of batch b. A factor of 0 writes 0 (fa_row_output:
 * a row that saw no key), whatever src holds. */
static inline void store_rows(const fa_problem *p, const fa_view *v, int64_t b, int64_t row0, int64_t n, int64_t h,
                       const float *src, int64_t ld, float mul_default, const float *row_mul)
{
    const int64_t dim = view_dim(p, v);
    for (int64_t r = 0; r < n; ++r) {
        int64_t off = b * v->sb + (row0 + r) * v->ss + h * v->sh;
        float mul = row_mul ? row_mul[r] : mul_default;
        if (p->out_dtype == FA_DTYPE_F32) { /* the dtype switch outside the loop */
            float *out = (float *)v->data + off;
            for (int64_t c = 0; c < dim; ++c)
                out[c] = fa_row_output(src[r * ld + c], mul);
        } else {
            for (int64_t c = 0; c < dim; ++c)
                fa_store_elem(p->out_dtype, v->data, off + c, fa_row_output(src[r * ld + c], mul));
        }
    }
}

/* ------------------------------------------------------------------ masks on a tile */

/* Class of tile (qt, kt) of query head h under every mask; for block-sparse, the core's lists. */
static inline fa_tile_class tile_class(const fa_problem *p, const fa_mask *m, int64_t h, int64_t qt, int64_t kt)
{
    int64_t q0 = qt * p->block_q, k0 = kt * p->block_k;
    fa_tile_class cls = fa_mask_classify_tile(m, q0, q0 + p->block_q, k0, k0 + p->block_k);
    if (cls == FA_TILE_EMPTY || !p->lists)
        return cls;
    const fa_block_lists *l = p->lists;
    int64_t mh = l->heads == 1 ? 0 : h;
    int64_t lo = l->row_ptr[mh * l->nq + qt], hi = l->row_ptr[mh * l->nq + qt + 1];
    while (lo < hi) { /* binary search: columns are ascending */
        int64_t mid = lo + (hi - lo) / 2;
        if (l->col[mid] < kt)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == l->row_ptr[mh * l->nq + qt + 1] || l->col[lo] != kt)
        return FA_TILE_EMPTY;
    return fa_tile_class_meet(cls, (fa_tile_class)l->cls[lo]);
}

/* Sets masked scores of the tile (width columns, row stride ld) to -inf: columns beyond the nc
 * keys left in the sequence, elements outside the causal/window range, and (block class
 * PARTIAL) elements the block mask drops. */
static inline void apply_mask(const fa_problem *p, const fa_mask *m, int64_t h, int64_t q0, int64_t nr, int64_t k0,
                       int64_t nc, int64_t width, int64_t ld, float *s, fa_tile_class cls)
{
    for (int64_t r = 0; r < nr; ++r) {
        float *row = s + r * ld;
        int64_t lo = k0, hi = k0 + nc;
        if (cls != FA_TILE_FULL) {
            int64_t a, b;
            fa_mask_row_range(m, q0 + r, &a, &b);
            if (a > lo)
                lo = a;
            if (b < hi)
                hi = b;
            if (hi < lo)
                hi = lo;
        }
        /* visible columns [jlo, jhi) of the width computed */
        int64_t jlo = lo - k0 < width ? lo - k0 : width, jhi = hi - k0 < width ? hi - k0 : width;
        for (int64_t j = 0; j < jlo; ++j)
            row[j] = -INFINITY;
        for (int64_t j = jhi; j < width; ++j)
            row[j] = -INFINITY;
        if (cls != FA_TILE_FULL && p->block_mask)
            for (int64_t j = jlo; j < jhi; ++j)
                if (!fa_problem_block_keep(p, h, q0 + r, k0 + j))
                    row[j] = -INFINITY;
    }
}

/* The score modifiers (core/score_mod.h; Q is prescaled, so the tile holds scaled scores: u = 1)
 * on columns [0, width) of nr rows of a tile whose first element is (q0, k0) of sequence b, query
 * head h; diag = seqlen_k - seqlen_q of the sequence. grad (row stride ld, may be NULL) receives
 * the softcap's derivative. Applied before the mask: softcap(-inf) is finite. */
static inline void apply_score_mod(const fa_problem *p, int64_t b, int64_t h, int64_t diag, int64_t q0, int64_t nr,
                            int64_t k0, int64_t width, int64_t ld, float *s, float *grad)
{
    const fa_score_mod_factors f = fa_score_mod_prepare(p->mod, 1.0f);
    const float slope = p->alibi_slopes ? p->alibi_slopes[fa_alibi_slope_index(f, b, h)] : 0.0f;
    const fa_score_mod_state st = fa_score_mod_begin(f, slope, diag);
    for (int64_t r = 0; r < nr; ++r) {
        float *row = s + r * ld, *grow = grad ? grad + r * ld : NULL;
        const float d0 = fa_alibi_row(q0 + r, diag, k0);
        for (int64_t j = 0; j < width; ++j)
            row[j] = fa_score_mod_apply(&st, row[j], d0 - (float)j, grow ? &grow[j] : NULL);
    }
}

/* Multiplies P (nr x ld) by the dropout factor of each element: 0 or 1/(1-p), by the kernel
 * table's dropout_row (k0 is a multiple of FA_DROPOUT_BLOCK_KEYS). */
static inline void apply_dropout(const fa_cpu_isa *isa, const fa_problem *p, int64_t b, int64_t h, int64_t q0, int64_t nr,
                                 int64_t k0, int64_t nc, int64_t ld, float *pm)
{
    for (int64_t r = 0; r < nr; ++r)
        for (int64_t j0 = 0; j0 < nc; j0 += FA_CPU_DROPOUT_KEYS)
            isa->dropout_row(p->seed, p->offset, (uint64_t)b, (uint64_t)p->heads_q, (uint64_t)h, (uint64_t)(q0 + r),
                             (uint64_t)(k0 + j0), nc - j0 < FA_CPU_DROPOUT_KEYS ? nc - j0 : FA_CPU_DROPOUT_KEYS,
                             p->dropout_threshold, p->dropout_scale, pm + r * ld + j0);
}

/* The backward's second use of the dropout factors, on dP, read from P o Z (pz, what
 * apply_dropout made of P) instead of from the Philox rule again: where P > 0, the element was
 * kept iff P o Z != 0 (Z = 1/(1-p) >= 1 cannot underflow it). x (nr x ld, nc columns) is scaled
 * where kept and set to 0 elsewhere, a select, so NaN and inf in x do not leak through a drop;
 * where P = 0 the callers' dS = P o (x - D) scale is 0 whatever x holds. */
static inline void apply_dropout_of(const fa_problem *p, const float *pz, int64_t nr, int64_t nc, int64_t ld, float *x)
{
    for (int64_t r = 0; r < nr; ++r)
        for (int64_t j = 0; j < nc; ++j)
            x[r * ld + j] = pz[r * ld + j] != 0.0f ? x[r * ld + j] * p->dropout_scale : 0.0f;
}

/* ------------------------------------------------------------------ shapes of the buffers */

typedef struct tile_dims {
    int64_t bq, bk;   /* B_r, B_c (B_c a multiple of PANEL) */
    int64_t dp;       /* the larger of d and d_v, padded to PANEL, or to 32 for the bf16 products;
                         every tile is zero beyond its own dim, so the products are exact */
    int bf16;         /* the products take bf16 operands (gemm_bf16) */
} tile_dims;

/* bf16 inputs go to the table's bf16 products where it has them and the tiles are whole
 * multiples of their K step (32; the tile table asks for that, backend.c) */
static inline int uses_bf16_products(const fa_problem *p, const fa_cpu_isa *isa)
{
    return p->dtype == FA_DTYPE_BF16 && isa->gemm_bf16 && p->block_q % 32 == 0 && p->block_k % 32 == 0;
}

static inline tile_dims dims_of(const fa_problem *p, const fa_cpu_isa *isa)
{
    tile_dims t;
    t.bq = p->block_q;
    t.bk = p->block_k;
    t.bf16 = uses_bf16_products(p, isa);
    t.dp = round_up(p->d > p->d_v ? p->d : p->d_v, t.bf16 ? 32 : PANEL);
    return t;
}

static inline int64_t fwd_scratch_floats(const tile_dims *t)
{
    /* Q, O (bq x dp), S (bq x bk), row factors; for the bf16 products P in bf16 (bq x bk) */
    return 2 * t->bq * t->dp + t->bq * t->bk + 3 * t->bq + 64 + (t->bf16 ? t->bq * t->bk / 2 : 0);
}

static inline int64_t bwd_scratch_floats(const tile_dims *t)
{
    /* K (bk x dp), K^T, V^T (dp x bk), dK, dV (bk x dp), P, P o Z, dS, the softcap's derivative
     * (bq x bk), LSE, D; for the bf16 products also P o Z and dS in pairs of rows, dS in bf16 and
     * this tile's dQ (bq x dp) */
    return 3 * t->bk * t->dp + 2 * t->dp * t->bk + 4 * t->bq * t->bk + 2 * t->bq + 64 +
           (t->bf16 ? 3 * t->bq * t->bk / 2 + t->bq * t->dp : 0);
}

/* a * b * c floats in bytes, rounded up to the 64 of aligned_alloc; -1 when that overflows 64 bits
 * or size_t */
static inline int64_t float_bytes(int64_t a, int64_t b, int64_t c)
{
    int64_t n;
    if (!fa_mul_ok(a, b, &n) || !fa_mul_ok(n, c, &n) || !fa_mul_ok(n, 4, &n) || n > INT64_MAX - 63 ||
        (uint64_t)n > SIZE_MAX - 63)
        return -1;
    return round_up(n, 64);
}

/* The sum of byte counts from float_bytes; -1 when one is -1 or the sum overflows. */
static inline int64_t sum_bytes(const int64_t *parts, int n)
{
    int64_t total = 0;
    for (int i = 0; i < n; ++i)
        if (parts[i] < 0 || !fa_add_ok(total, parts[i], &total))
            return -1;
    return total;
}

/* Rows of whole tiles of `block` over every sequence (keys, or queries): an upper bound for
 * varlen, whose exact count needs cu_seqlens; -1 when it overflows. */
static inline int64_t padded_rows(const fa_problem *p, int64_t block, int queries)
{
    int64_t longest = queries ? p->seqlen_q : p->seqlen_k, total = queries ? p->total_q : p->total_k;
    int64_t rows, padded;
    if (!fa_mul_ok(p->batch, (longest + block - 1) / block * block, &rows) || !fa_mul_ok(p->batch, block, &padded) ||
        !fa_add_ok(padded, total, &padded))
        return -1;
    return rows < padded ? rows : padded;
}

/* Prefix sums of each sequence's tiles of `block` keys (or queries); NULL when out of memory. */
static inline int64_t *tile_prefix(const fa_problem *p, int64_t block, int queries)
{
    int64_t *base = malloc(sizeof(int64_t) * (size_t)(p->batch + 1));
    if (!base)
        return NULL;
    base[0] = 0;
    for (int64_t b = 0; b < p->batch; ++b) {
        int64_t sq, sk, qs, ks;
        fa_problem_seq(p, b, &sq, &sk, &qs, &ks);
        base[b + 1] = base[b] + ((queries ? sq : sk) + block - 1) / block;
    }
    return base;
}

#endif
