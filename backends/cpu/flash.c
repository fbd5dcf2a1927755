/* flash.c: the CPU backend's fused, tiled FlashAttention (Dao et al. 2022, Algorithms 1 and 2).
 * Tiles of B_r x B_c scores live in per-thread buffers sized by the plan; inputs of any dtype are
 * widened to fp32 tile by tile, all arithmetic is fp32. Forward: one task per (batch, head, query
 * tile) with the online softmax. Backward: D = rowsum(dO * O); then one task per (batch, kv head,
 * chunk of key tiles) that recomputes S and P, accumulates dK and dV in its tile and dQ in a
 * per-chunk fp32 buffer; the chunks' dQ are summed in a fixed order, so the backward is always
 * deterministic. Matrix products, exp and the softmax step come from the context's kernel table
 * (isa.h: AVX-512, AVX2 or generic, chosen by cpuid); the forward prefetches the next key tile
 * into L2 while it computes with the current one. */
#include "bf16_pack.h"
#include "cpu.h"
#include "empty_row.h"
#include "half.h"
#include "philox.h"
#include "pool.h"
#include "score_mod.h"
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
static void convert_row(fa_dtype dt, const void *src, int64_t off, int64_t n, float mul, float *dst)
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

/* rows [row0, row0 + n) of head h of batch b into dst (n x ld, row-major), times mul, zero-padded
 * to `rows` rows and ld columns. */
static void load_rows(const fa_problem *p, const fa_view *v, int64_t b, int64_t row0, int64_t n, int64_t rows,
                      int64_t h, float mul, float *dst, int64_t ld)
{
    for (int64_t r = 0; r < rows; ++r) {
        float *out = dst + r * ld;
        if (r < n) {
            convert_row(p->dtype, v->data, b * v->sb + (row0 + r) * v->ss + h * v->sh, p->d, mul, out);
            for (int64_t c = p->d; c < ld; ++c)
                out[c] = 0.0f;
        } else {
            memset(out, 0, sizeof(float) * (size_t)ld);
        }
    }
}

/* The same rows transposed: dst is d_pad x ld with dst[c * ld + r]. */
static void load_rows_transposed(const fa_problem *p, const fa_view *v, int64_t b, int64_t row0, int64_t n,
                                 int64_t h, float *dst, int64_t d_pad, int64_t ld)
{
    float row[FA_MAX_HEAD_DIM];
    if (n < ld || p->d < d_pad)
        memset(dst, 0, sizeof(float) * (size_t)(d_pad * ld));
    for (int64_t r = 0; r < n; ++r) {
        convert_row(p->dtype, v->data, b * v->sb + (row0 + r) * v->ss + h * v->sh, p->d, 1.0f, row);
        for (int64_t c = 0; c < p->d; ++c)
            dst[c * ld + r] = row[c];
    }
}

/* rows of src, times mul_default or (row_mul given: the forward's 1/l per row) the row's own
 * factor, into rows [row0, row0 + n) of head h of batch b. A factor of 0 writes 0 (fa_row_output:
 * a row that saw no key), whatever src holds. */
static void store_rows(const fa_problem *p, const fa_view *v, int64_t b, int64_t row0, int64_t n, int64_t h,
                       const float *src, int64_t ld, float mul_default, const float *row_mul)
{
    for (int64_t r = 0; r < n; ++r) {
        int64_t off = b * v->sb + (row0 + r) * v->ss + h * v->sh;
        float mul = row_mul ? row_mul[r] : mul_default;
        if (p->out_dtype == FA_DTYPE_F32) { /* the dtype switch outside the loop */
            float *out = (float *)v->data + off;
            for (int64_t c = 0; c < p->d; ++c)
                out[c] = fa_row_output(src[r * ld + c], mul);
        } else {
            for (int64_t c = 0; c < p->d; ++c)
                fa_store_elem(p->out_dtype, v->data, off + c, fa_row_output(src[r * ld + c], mul));
        }
    }
}

/* ------------------------------------------------------------------ masks on a tile */

/* Class of tile (qt, kt) of query head h under every mask; for block-sparse, the core's lists. */
static fa_tile_class tile_class(const fa_problem *p, const fa_mask *m, int64_t h, int64_t qt, int64_t kt)
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
static void apply_mask(const fa_problem *p, const fa_mask *m, int64_t h, int64_t q0, int64_t nr, int64_t k0,
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
static void apply_score_mod(const fa_problem *p, int64_t b, int64_t h, int64_t diag, int64_t q0, int64_t nr,
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

/* Multiplies P (nr x ld) by the dropout factor of each element: 0 or 1/(1-p). */
static void apply_dropout(const fa_problem *p, int64_t b, int64_t h, int64_t q0, int64_t nr, int64_t k0, int64_t nc,
                          int64_t ld, float *pm)
{
    for (int64_t r = 0; r < nr; ++r) {
        float *row = pm + r * ld;
        for (int64_t j = 0; j < nc; j += 4) {
            /* k0 is a multiple of 4, so columns j..j+3 share one Philox block */
            fa_philox4 bits = fa_dropout_block(p->seed, p->offset, (uint64_t)b, (uint64_t)p->heads_q, (uint64_t)h,
                                               (uint64_t)(q0 + r), (uint64_t)(k0 + j));
            for (int64_t t = 0; t < 4 && j + t < nc; ++t)
                row[j + t] = bits.v[t] >= p->dropout_threshold ? row[j + t] * p->dropout_scale : 0.0f;
        }
    }
}

/* ------------------------------------------------------------------ shapes of the buffers */

typedef struct tile_dims {
    int64_t bq, bk;   /* B_r, B_c (B_c a multiple of PANEL) */
    int64_t dp;       /* d padded to PANEL, or to 32 for the bf16 products */
    int bf16;         /* the products take bf16 operands (gemm_bf16) */
} tile_dims;

/* bf16 inputs go to the table's bf16 products where it has them and the tiles are whole
 * multiples of their K step (32; the tile table asks for that, backend.c) */
static int uses_bf16_products(const fa_problem *p, const fa_cpu_isa *isa)
{
    return p->dtype == FA_DTYPE_BF16 && isa->gemm_bf16 && p->block_q % 32 == 0 && p->block_k % 32 == 0;
}

static tile_dims dims_of(const fa_problem *p, const fa_cpu_isa *isa)
{
    tile_dims t;
    t.bq = p->block_q;
    t.bk = p->block_k;
    t.bf16 = uses_bf16_products(p, isa);
    t.dp = round_up(p->d, t.bf16 ? 32 : PANEL);
    return t;
}

static int64_t fwd_scratch_floats(const tile_dims *t)
{
    /* Q, O (bq x dp), S (bq x bk), row factors; for the bf16 products P in bf16 (bq x bk) */
    return 2 * t->bq * t->dp + t->bq * t->bk + 3 * t->bq + 64 + (t->bf16 ? t->bq * t->bk / 2 : 0);
}

static int64_t bwd_scratch_floats(const tile_dims *t)
{
    /* K (bk x dp), K^T, V^T (dp x bk), dK, dV (bk x dp), P, P o Z, dS, the softcap's derivative
     * (bq x bk), LSE, D; for the bf16 products also P o Z and dS in pairs of rows, dS in bf16 and
     * this tile's dQ (bq x dp) */
    return 3 * t->bk * t->dp + 2 * t->dp * t->bk + 4 * t->bq * t->bk + 2 * t->bq + 64 +
           (t->bf16 ? 3 * t->bq * t->bk / 2 + t->bq * t->dp : 0);
}

/* a * b * c floats in bytes, rounded up to the 64 of aligned_alloc; -1 when that overflows 64 bits
 * or size_t */
static int64_t float_bytes(int64_t a, int64_t b, int64_t c)
{
    int64_t n;
    if (!fa_mul_ok(a, b, &n) || !fa_mul_ok(n, c, &n) || !fa_mul_ok(n, 4, &n) || n > INT64_MAX - 63 ||
        (uint64_t)n > SIZE_MAX - 63)
        return -1;
    return round_up(n, 64);
}

/* The sum of byte counts from float_bytes; -1 when one is -1 or the sum overflows. */
static int64_t sum_bytes(const int64_t *parts, int n)
{
    int64_t total = 0;
    for (int i = 0; i < n; ++i)
        if (parts[i] < 0 || !fa_add_ok(total, parts[i], &total))
            return -1;
    return total;
}

/* Rows of whole tiles of `block` over every sequence (keys, or queries): an upper bound for
 * varlen, whose exact count needs cu_seqlens; -1 when it overflows. */
static int64_t padded_rows(const fa_problem *p, int64_t block, int queries)
{
    int64_t longest = queries ? p->seqlen_q : p->seqlen_k, total = queries ? p->total_q : p->total_k;
    int64_t rows, padded;
    if (!fa_mul_ok(p->batch, (longest + block - 1) / block * block, &rows) || !fa_mul_ok(p->batch, block, &padded) ||
        !fa_add_ok(padded, total, &padded))
        return -1;
    return rows < padded ? rows : padded;
}

int64_t fa_cpu_workspace_bytes(const fa_problem *p, const fa_cpu_isa *isa, int threads)
{
    tile_dims t = dims_of(p, isa);
    int64_t part[4] = {float_bytes(threads, p->backward ? bwd_scratch_floats(&t) : fwd_scratch_floats(&t), 1), 0, 0, 0};
    if (!p->backward) {
        /* packed K^T and V tiles */
        int64_t rows = padded_rows(p, t.bk, 0);
        if (rows < 0)
            return -1;
        part[1] = float_bytes(rows, p->heads_kv, t.bf16 ? t.dp : 2 * t.dp);
    } else {
        int64_t q_rows; /* rows of every head */
        if (!fa_mul_ok(p->total_q, p->heads_q, &q_rows))
            return -1;
        part[1] = float_bytes(q_rows, 1, 1);                                  /* D */
        part[2] = float_bytes(fa_cpu_bwd_chunks(p, threads), q_rows, t.dp);   /* dQ partials */
        int64_t rows = padded_rows(p, t.bq, 1); /* Q and dO packed: 2 dp floats per padded row and head */
        if (rows < 0)
            return -1;
        part[3] = float_bytes(rows, p->heads_q, 2 * t.dp);
    }
    return sum_bytes(part, 4);
}

int64_t fa_cpu_bwd_chunks(const fa_problem *p, int threads)
{
    int64_t nk = (p->seqlen_k + p->block_k - 1) / p->block_k;
    int64_t units = p->batch * p->heads_kv;
    if (units < 1 || nk < 1)
        return 1;
    int64_t chunks = (threads + units - 1) / units;
    if (chunks > nk)
        chunks = nk;
    return chunks < 1 ? 1 : chunks;
}

/* ------------------------------------------------------------------ forward */

/* K and V converted once per call into fp32 tiles, K transposed: tile (b, kt, hk) at
 * kv_pack + ((tile_base[b] + kt) * heads_kv + hk) * kv_tile_floats, K^T (dp x bk) then V
 * (bk x dp), both in panels; for the bf16 products both pair-packed in bf16 (bf16_pack.h), K^T
 * as dp / 2 x bk pairs, V as bk / 2 x dp. Every query tile of the head reuses them, so the
 * forward's inner loop does no conversion. Extra memory: about 2 * total_k * heads_kv * d
 * elements, linear in N. */
typedef struct fwd_ctx {
    const fa_problem *p;
    const fa_cpu_isa *isa;
    tile_dims t;
    int64_t nq; /* query tiles of the longest sequence */
    int64_t *tile_base; /* batch + 1 prefix sums of key tiles per sequence */
    float *kv_pack;
} fwd_ctx;

static int64_t kv_tile_floats(const tile_dims *t)
{
    return (t->bf16 ? 1 : 2) * t->dp * t->bk;
}

static void pack_kv_task(void *argp, int64_t task, float *scratch)
{
    (void)scratch;
    const fwd_ctx *fc = argp;
    const fa_problem *p = fc->p;
    const tile_dims *t = &fc->t;
    int64_t hk = task % p->heads_kv, tile = task / p->heads_kv;
    int64_t b = 0;
    while (fc->tile_base[b + 1] <= tile) /* batches are few; tasks are many */
        ++b;
    int64_t kt = tile - fc->tile_base[b];
    int64_t sq, sk, qs, ks;
    fa_problem_seq(p, b, &sq, &sk, &qs, &ks);
    int64_t k0 = kt * t->bk, nc = sk - k0 < t->bk ? sk - k0 : t->bk, dp = t->dp, bk = t->bk;
    float *kT = fc->kv_pack + task * kv_tile_floats(t), *v = kT + kv_tile_floats(t) / 2;
    if (t->bf16) {
        const uint16_t *k = (const uint16_t *)p->k.data + b * p->k.sb + (ks + k0) * p->k.ss + hk * p->k.sh;
        const uint16_t *vs = (const uint16_t *)p->v.data + b * p->v.sb + (ks + k0) * p->v.ss + hk * p->v.sh;
        fa_bf16_pairs_of_rows(k, p->k.ss, nc, bk, p->d, dp, (uint32_t *)kT);
        fa_bf16_pairs_of_columns(vs, p->v.ss, nc, bk, p->d, dp, (uint32_t *)v);
        return;
    }
    /* each key row straight into its panels (K^T: dp x bk, V: bk x dp, both in 16-column
     * panels), zero-padded to dp columns and bk rows */
    float row[FA_MAX_HEAD_DIM];
    if (nc < bk)
        memset(kT, 0, sizeof(float) * (size_t)(2 * dp * bk));
    for (int64_t c = p->d; c < dp; ++c)
        row[c] = 0.0f;
    for (int64_t r = 0; r < nc; ++r) {
        int64_t off = b * p->k.sb + (ks + k0 + r) * p->k.ss + hk * p->k.sh;
        convert_row(p->dtype, p->k.data, off, p->d, 1.0f, row);
        float *kp = kT + r / PANEL * dp * PANEL + r % PANEL;
        for (int64_t c = 0; c < dp; ++c)
            kp[c * PANEL] = row[c];
        off = b * p->v.sb + (ks + k0 + r) * p->v.ss + hk * p->v.sh;
        convert_row(p->dtype, p->v.data, off, p->d, 1.0f, row);
        for (int64_t c = 0; c < dp; c += PANEL)
            memcpy(v + c * bk + r * PANEL, row + c, sizeof(float) * PANEL);
    }
}

static void fwd_task(void *argp, int64_t task, float *scratch)
{
    const fwd_ctx *fc = argp;
    const fa_problem *p = fc->p;
    const tile_dims *t = &fc->t;
    /* (batch, head) by (batch, head), so the threads stream the same K and V through L3 at the
     * same time; within one, the last query tile first: under a causal mask it sees the most
     * keys, and the pool's threads finish together when the small tasks come last */
    int64_t qt = fc->nq - 1 - task % fc->nq, h = (task / fc->nq) % p->heads_q, b = task / fc->nq / p->heads_q;
    int64_t sq, sk, qs, ks;
    fa_problem_seq(p, b, &sq, &sk, &qs, &ks);
    int64_t q0 = qt * t->bq;
    if (q0 >= sq)
        return;
    int64_t nr = sq - q0 < t->bq ? sq - q0 : t->bq;
    int64_t hk = h / p->group;
    fa_mask m = fa_problem_mask(p, sq, sk);

    float *qtile = scratch, *otile = qtile + t->bq * t->dp;
    float *s = otile + t->bq * t->dp, *inv = s + t->bq * t->bk;
    fa_softmax_row rows[FA_CPU_MAX_BLOCK];
    /* the bf16 products: Q as it is (S scaled after the product), P rounded to bf16 in pb; the
     * products run on nr16 rows, the padding rows zero */
    const fa_cpu_isa *isa = fc->isa;
    int64_t nr16 = round_up(nr, 16);
    /* without score modifiers and dropout, the scale, the softmax step and the rounding of P are
     * one pass over the tile */
    const int fused = t->bf16 && p->scale > 0.0f && !fa_score_mod_active(p->mod) && !p->dropout_threshold;
    uint16_t *qb = (uint16_t *)qtile, *pb = (uint16_t *)(inv + 3 * t->bq + 64);
    if (t->bf16) {
        isa->bf16_tiles_begin();
        fa_bf16_rows((const uint16_t *)p->q.data + b * p->q.sb + (qs + q0) * p->q.ss + h * p->q.sh, p->q.ss, nr, nr16,
                     p->d, qb, t->dp);
        memset(pb + nr * t->bk, 0, sizeof(uint16_t) * (size_t)((nr16 - nr) * t->bk));
    } else {
        load_rows(p, &p->q, b, qs + q0, nr, nr, h, p->scale, qtile, t->dp);
    }
    memset(otile, 0, sizeof(float) * (size_t)(nr16 * t->dp));
    for (int64_t r = 0; r < nr; ++r)
        rows[r] = fa_softmax_init();

    int64_t nk = (sk + t->bk - 1) / t->bk;
    for (int64_t kt = 0; kt < nk; ++kt) {
        fa_tile_class cls = tile_class(p, &m, h, qt, kt);
        if (cls == FA_TILE_EMPTY)
            continue;
        int64_t k0 = kt * t->bk, nc = sk - k0 < t->bk ? sk - k0 : t->bk;
        /* Only the panels that hold a visible key: the visible range of rows q0 .. q0 + nr - 1
         * lies in [lo of the first row, hi of the last) (both ends are monotone), so columns
         * [j0, j1) of the tile, rounded out to whole panels, hold every visible score. */
        const int64_t align = t->bf16 ? 32 : PANEL; /* the bf16 product's K step */
        int64_t j0 = 0, j1 = nc;
        if (cls != FA_TILE_FULL) {
            int64_t lo, hi;
            fa_mask_rows_range(&m, q0, q0 + nr, &lo, &hi);
            if (lo > k0)
                j0 = (lo - k0) / align * align;
            if (hi - k0 < j1)
                j1 = hi - k0;
            if (j1 <= j0)
                continue;
        }
        int64_t w = round_up(j1, align) - j0; /* columns computed, from j0 */
        const float *kT = fc->kv_pack + ((fc->tile_base[b] + kt) * p->heads_kv + hk) * kv_tile_floats(t);
        const float *vtile = kT + kv_tile_floats(t) / 2;
        float *sj = s + j0;
        /* the next key tile (if any) into L2 during this one's two products: K^T, then V */
        const char *next = NULL;
        if (kt + 1 < nk && tile_class(p, &m, h, qt, kt + 1) != FA_TILE_EMPTY)
            next = (const char *)(kT + kv_tile_floats(t) * p->heads_kv);
        int64_t half_bytes = kv_tile_floats(t) / 2 * (int64_t)sizeof(float);
        if (t->bf16) {
            for (int64_t x = 0; next && x < 2 * half_bytes; x += 64) /* the next K and V tile */
                __builtin_prefetch(next + x, 0, 2);
            isa->gemm_bf16(nr16, w, t->dp, qb, t->dp, (const uint32_t *)kT + j0, t->bk, sj, t->bk, 0);
            for (int64_t r = 0; !fused && r < nr; ++r)
                isa->scale_row(sj + r * t->bk, w, p->scale);
        } else {
            isa->gemm_panels(nr, w, t->dp, qtile, t->dp, kT + j0 * t->dp, t->dp * PANEL, sj, t->bk, 0, next,
                             half_bytes);
        }
        if (fa_score_mod_active(p->mod))
            apply_score_mod(p, b, h, sk - sq, q0, nr, k0 + j0, w, t->bk, sj, NULL);
        if (cls != FA_TILE_FULL || j0 + w > nc)
            apply_mask(p, &m, h, q0, nr, k0 + j0, nc - j0, w, t->bk, sj, cls);
        if (fused) {
            isa->online_softmax_tile_bf16(sj, nr, w, t->bk, p->scale, rows, otile, t->dp, pb + j0, t->bk);
        } else {
            isa->online_softmax_tile(sj, nr, w, t->bk, rows, otile, t->dp);
            if (p->dropout_threshold)
                apply_dropout(p, b, h, q0, nr, k0 + j0, j1 - j0, t->bk, sj);
            for (int64_t r = 0; t->bf16 && r < nr; ++r)
                isa->to_bf16_row(sj + r * t->bk, pb + r * t->bk + j0, w);
        }
        if (t->bf16) {
            isa->gemm_bf16(nr16, t->dp, w, pb + j0, t->bk, (const uint32_t *)vtile + j0 / 2 * t->dp, t->dp, otile,
                           t->dp, 1);
        } else {
            isa->gemm_panels(nr, t->dp, w, sj, t->bk, vtile + j0 * PANEL, t->bk * PANEL, otile, t->dp, 1,
                             next ? next + half_bytes : NULL, half_bytes);
        }
    }
    if (t->bf16)
        isa->bf16_tiles_end();
    for (int64_t r = 0; r < nr; ++r) {
        inv[r] = fa_softmax_inv_sum(rows[r]);
        if (p->has_lse) {
            int64_t off = b * p->lse.sb + h * p->lse.sh + (qs + q0 + r) * p->lse.ss;
            ((float *)p->lse.data)[off] = fa_softmax_lse(rows[r]);
        }
    }
    store_rows(p, &p->o, b, qs + q0, nr, h, otile, t->dp, 1.0f, inv);
}

/* Prefix sums of each sequence's tiles of `block` keys (or queries); NULL when out of memory. */
static int64_t *tile_prefix(const fa_problem *p, int64_t block, int queries)
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

fa_status fa_cpu_flash_forward(fa_context *ctx, const fa_problem *p)
{
    fwd_ctx fc = {.p = p, .isa = fa_cpu_isa_of(ctx)};
    fc.t = dims_of(p, fc.isa);
    fc.nq = (p->seqlen_q + fc.t.bq - 1) / fc.t.bq;
    int64_t ntasks = p->batch * p->heads_q * fc.nq;
    if (ntasks == 0)
        return FA_SUCCESS;
    int threads = fa_cpu_threads(ctx);
    if (threads > ntasks)
        threads = (int)ntasks;
    int64_t per = fwd_scratch_floats(&fc.t);
    fc.tile_base = tile_prefix(p, fc.t.bk, 0);
    if (!fc.tile_base)
        return FA_ERROR(ctx, FA_ERR_OUT_OF_MEMORY, "cpu forward: cannot allocate %lld key tile offsets",
                        (long long)p->batch + 1);
    int64_t key_tiles = fc.tile_base[p->batch];
    int64_t scratch_bytes = float_bytes(per, threads, 1);
    int64_t pack_bytes = float_bytes(key_tiles, p->heads_kv, kv_tile_floats(&fc.t));
    if (scratch_bytes < 0 || pack_bytes < 0) {
        free(fc.tile_base);
        return FA_ERROR(ctx, FA_ERR_OVERFLOW,
                        "cpu forward: workspace for %lld key tiles x %lld kv heads overflows 64 bits",
                        (long long)key_tiles, (long long)p->heads_kv);
    }
    int64_t npack = key_tiles * p->heads_kv; /* fits: pack_bytes counts more than it */
    float *scratch = aligned_alloc(64, (size_t)scratch_bytes);
    fc.kv_pack = aligned_alloc(64, (size_t)(pack_bytes > 0 ? pack_bytes : 64));
    if (!scratch || !fc.kv_pack) {
        free(scratch);
        free(fc.tile_base);
        free(fc.kv_pack);
        return FA_ERROR(ctx, FA_ERR_OUT_OF_MEMORY, "cpu forward: cannot allocate %lld bytes of workspace",
                        (long long)fa_cpu_workspace_bytes(p, fc.isa, threads));
    }
    fa_parallel_for(threads, npack, pack_kv_task, &fc, scratch, per);
    fa_parallel_for(threads, ntasks, fwd_task, &fc, scratch, per);
    free(scratch);
    free(fc.tile_base);
    free(fc.kv_pack);
    return FA_SUCCESS;
}

/* ------------------------------------------------------------------ backward */

typedef struct bwd_ctx {
    const fa_problem *p;
    const fa_cpu_isa *isa;
    tile_dims t;
    int64_t nq, nk, chunks;
    float *dsum;   /* D = rowsum(dO * O): [heads_q][total_q] */
    float *dq_acc; /* [chunks][heads_q][total_q][dp]: one head's rows contiguous */
    /* Q and dO of query tile (b, qt), head h, packed once per call at q_pack + ((qtile_base[b] +
     * qt) * heads_q + h) * 2 * dp * bq floats: fp32 Q rows then dO rows (bq x dp each); for the
     * bf16 products Q rows, dO rows (bq x dp bf16), Q^T, dO^T (dp x bq bf16). Rows past the
     * sequence and rows that saw no key are 0. */
    int64_t *qtile_base;
    float *q_pack;
} bwd_ctx;

static float *q_pack_of(const bwd_ctx *bc, int64_t b, int64_t qt, int64_t h)
{
    return bc->q_pack + ((bc->qtile_base[b] + qt) * bc->p->heads_q + h) * 2 * bc->t.dp * bc->t.bq;
}

static int64_t canon_q_row(const fa_problem *p, int64_t b, int64_t qs, int64_t i)
{
    return p->varlen ? qs + i : b * p->seqlen_q + i;
}

/* D and the packed Q, dO of one (batch, head, query tile). */
static void bwd_prepare_task(void *argp, int64_t task, float *scratch)
{
    (void)scratch;
    const bwd_ctx *bc = argp;
    const fa_problem *p = bc->p;
    int64_t qt = task % bc->nq, h = (task / bc->nq) % p->heads_q, b = task / bc->nq / p->heads_q;
    int64_t sq, sk, qs, ks;
    fa_problem_seq(p, b, &sq, &sk, &qs, &ks);
    const int64_t dp = bc->t.dp, bq = bc->t.bq, q0 = qt * bq;
    if (q0 >= sq)
        return;
    const int64_t nr = sq - q0 < bq ? sq - q0 : bq;
    for (int64_t i = q0; i < q0 + nr; ++i) {
        int64_t oo = b * p->o.sb + (qs + i) * p->o.ss + h * p->o.sh;
        int64_t od = b * p->dout.sb + (qs + i) * p->dout.ss + h * p->dout.sh;
        float acc = 0.0f;
        for (int64_t c = 0; c < p->d; ++c)
            acc += fa_load_elem(p->dtype, p->o.data, oo + c) * fa_load_elem(p->dtype, p->dout.data, od + c);
        bc->dsum[h * p->total_q + canon_q_row(p, b, qs, i)] = acc;
    }
    float *pack = q_pack_of(bc, b, qt, h);
    if (!bc->t.bf16) {
        load_rows(p, &p->q, b, qs + q0, nr, bq, h, 1.0f, pack, dp);
        load_rows(p, &p->dout, b, qs + q0, nr, bq, h, 1.0f, pack + bq * dp, dp);
    } else {
        uint16_t *qr = (uint16_t *)pack, *dr = qr + bq * dp, *qtr = dr + bq * dp, *dtr = qtr + dp * bq;
        fa_bf16_rows((const uint16_t *)p->q.data + b * p->q.sb + (qs + q0) * p->q.ss + h * p->q.sh, p->q.ss, nr, bq,
                     p->d, qr, dp);
        fa_bf16_rows((const uint16_t *)p->dout.data + b * p->dout.sb + (qs + q0) * p->dout.ss + h * p->dout.sh,
                     p->dout.ss, nr, bq, p->d, dr, dp);
        for (int64_t c = 0; c < dp; ++c)
            for (int64_t r = 0; r < bq; ++r) {
                qtr[c * bq + r] = qr[r * dp + c];
                dtr[c * bq + r] = dr[r * dp + c];
            }
    }
    /* a row that saw no key: its Q and dO enter as 0 */
    for (int64_t r = 0; r < nr; ++r) {
        if (!fa_row_absent(((const float *)p->lse.data)[b * p->lse.sb + h * p->lse.sh + (qs + q0 + r) * p->lse.ss]))
            continue;
        if (!bc->t.bf16) {
            memset(pack + r * dp, 0, sizeof(float) * (size_t)dp);
            memset(pack + (bq + r) * dp, 0, sizeof(float) * (size_t)dp);
            continue;
        }
        uint16_t *qr = (uint16_t *)pack, *dr = qr + bq * dp, *qtr = dr + bq * dp, *dtr = qtr + dp * bq;
        memset(qr + r * dp, 0, sizeof(uint16_t) * (size_t)dp);
        memset(dr + r * dp, 0, sizeof(uint16_t) * (size_t)dp);
        for (int64_t c = 0; c < dp; ++c)
            qtr[c * bq + r] = dtr[c * bq + r] = 0;
    }
}

/* The bf16 products' operands of one backward task, in the fp32 path's buffers and the extras
 * bwd_scratch_floats counts. dV and dK are accumulated transposed (dV^T += dO^T P, dK^T += Q^T dS),
 * so that their B operands are P and dS in pairs of rows, built as they are rounded, and their A
 * operands Q^T and dO^T come packed once per call (bwd_prepare_task). */
typedef struct bwd_bf16_tiles {
    uint32_t *k_cols, *k_rows, *v_rows; /* K as B of dS K; K^T, V^T as B of Q K^T, dO V^T */
    const uint16_t *q, *dout;           /* rows of the query tile, A of Q K^T and dO V^T */
    const uint16_t *qT, *doutT;         /* the packed Q^T, dO^T of the query tile (dp x bq) */
    uint32_t *p_pairs, *ds_pairs;       /* P o Z and dS in pairs of rows (nr32 / 2 x bk) */
    uint16_t *ds;                       /* dS rows (nr16 x bk), A of dS K */
    float *dq;                          /* this tile's dS K */
} bwd_bf16_tiles;

/* rows [0, nr) of x (row stride ld, n columns) rounded to bf16 in pairs of rows: nr32 / 2 rows of
 * pairs, the rows past nr zero */
static void bf16_row_pairs(const fa_cpu_isa *isa, const float *x, int64_t ld, int64_t nr, int64_t nr32, int64_t n,
                           uint32_t *out)
{
    for (int64_t kp = 0; kp < nr32 / 2; ++kp) {
        int64_t r = 2 * kp;
        if (r >= nr)
            memset(out + kp * n, 0, sizeof(uint32_t) * (size_t)n);
        else
            isa->to_bf16_pairs(x + r * ld, r + 1 < nr ? x + (r + 1) * ld : NULL, out + kp * n, n);
    }
}

/* The products of one (query tile, key tile) pair with bf16 operands: P = exp(scale * Q K^T -
 * LSE) as in the fp32 path, then dV^T += dO^T (P o Z), dP = dO V^T, dS, dQ += dS K, dK^T +=
 * Q^T dS. P and dS are rounded to bf16 before their products (as the GPU kernels do). nr query
 * rows, padded to nr16 (rows of A) and nr32 (the K extent of the transposed products). */
static void bwd_tile_bf16(const bwd_ctx *bc, const bwd_bf16_tiles *bt, int64_t b, int64_t h, int64_t q0,
                          int64_t nr, int64_t sq, int64_t sk, int64_t k0, int64_t nc, const fa_mask *m, fa_tile_class cls,
                          const float *lse, const float *dsum, float *pm, float *pz, float *ds, float *grad,
                          float *dkT, float *dvT, float *dq_rows, int64_t ld_dq)
{
    const fa_problem *p = bc->p;
    const fa_cpu_isa *isa = bc->isa;
    const int64_t dp = bc->t.dp, bk = bc->t.bk, bq = bc->t.bq, nr16 = round_up(nr, 16), nr32 = round_up(nr, 32);
    isa->gemm_bf16(nr16, bk, dp, bt->q, dp, bt->k_rows, bk, pm, bk, 0);
    for (int64_t r = 0; r < nr; ++r)
        isa->scale_row(pm + r * bk, bk, p->scale);
    if (fa_score_mod_active(p->mod))
        apply_score_mod(p, b, h, sk - sq, q0, nr, k0, bk, bk, pm, grad);
    if (cls != FA_TILE_FULL || nc < bk)
        apply_mask(p, m, h, q0, nr, k0, nc, bk, bk, pm, cls);
    for (int64_t r = 0; r < nr; ++r) {
        if (fa_row_absent(lse[r]))
            memset(pm + r * bk, 0, sizeof(float) * (size_t)bk);
        else
            isa->exp_row(pm + r * bk, bk, lse[r]);
    }
    const float *pzv = pm;
    if (p->dropout_threshold) {
        memcpy(pz, pm, sizeof(float) * (size_t)(nr * bk));
        apply_dropout(p, b, h, q0, nr, k0, nc, bk, pz);
        pzv = pz;
    }
    bf16_row_pairs(isa, pzv, bk, nr, nr32, bk, bt->p_pairs);
    isa->gemm_bf16(dp, bk, nr32, bt->doutT, bq, bt->p_pairs, bk, dvT, bk, 1);
    isa->gemm_bf16(nr16, bk, dp, bt->dout, dp, bt->v_rows, bk, ds, bk, 0);
    if (p->dropout_threshold)
        apply_dropout(p, b, h, q0, nr, k0, nc, bk, ds);
    isa->softmax_grad_tile(ds, pm, nr, bk, bk, dsum, p->scale);
    if (p->mod.softcap > 0.0f)
        for (int64_t x = 0; x < nr * bk; ++x)
            ds[x] *= grad[x];
    for (int64_t r = 0; r < nr; ++r)
        isa->to_bf16_row(ds + r * bk, bt->ds + r * bk, bk);
    memset(bt->ds + nr * bk, 0, sizeof(uint16_t) * (size_t)((nr16 - nr) * bk));
    bf16_row_pairs(isa, ds, bk, nr, nr32, bk, bt->ds_pairs);
    isa->gemm_bf16(nr16, dp, bk, bt->ds, bk, bt->k_cols, dp, bt->dq, dp, 0);
    for (int64_t r = 0; r < nr; ++r) {
        float *acc = dq_rows + r * ld_dq;
        const float *add = bt->dq + r * dp;
        for (int64_t x = 0; x < dp; ++x)
            acc[x] += add[x];
    }
    isa->gemm_bf16(dp, bk, nr32, bt->qT, bq, bt->ds_pairs, bk, dkT, bk, 1);
}

/* rows [row0, row0 + n) of head h of batch b from the transposed tile srcT (d rows x ld) */
static void store_rows_transposed(const fa_problem *p, const fa_view *v, int64_t b, int64_t row0, int64_t n, int64_t h,
                                  const float *srcT, int64_t ld)
{
    for (int64_t r = 0; r < n; ++r) {
        int64_t off = b * v->sb + (row0 + r) * v->ss + h * v->sh;
        for (int64_t c = 0; c < p->d; ++c)
            fa_store_elem(p->out_dtype, v->data, off + c, srcT[c * ld + r]);
    }
}

static void bwd_main_task(void *argp, int64_t task, float *scratch)
{
    const bwd_ctx *bc = argp;
    const fa_problem *p = bc->p;
    const tile_dims *t = &bc->t;
    int64_t chunk = task % bc->chunks, hk = (task / bc->chunks) % p->heads_kv;
    int64_t b = task / bc->chunks / p->heads_kv;
    int64_t sq, sk, qs, ks;
    fa_problem_seq(p, b, &sq, &sk, &qs, &ks);
    fa_mask m = fa_problem_mask(p, sq, sk);
    int64_t nk = (sk + t->bk - 1) / t->bk, nq = (sq + t->bq - 1) / t->bq;
    int64_t dp = t->dp, bk = t->bk;

    float *ktile = scratch, *kT = ktile + bk * dp, *vT = kT + dp * bk;
    float *dk = vT + dp * bk, *dv = dk + bk * dp;
    float *pm = dv + bk * dp, *pz = pm + t->bq * bk, *ds = pz + t->bq * bk, *grad = ds + t->bq * bk;
    float *lse = grad + t->bq * bk, *dsum = lse + t->bq;
    float *dq_acc = bc->dq_acc + chunk * p->total_q * p->heads_q * dp;
    bwd_bf16_tiles bt = {0};
    if (t->bf16) {
        bt.k_cols = (uint32_t *)ktile;
        bt.k_rows = (uint32_t *)kT;
        bt.v_rows = (uint32_t *)vT;
        bt.p_pairs = (uint32_t *)(dsum + t->bq + 64);
        bt.ds_pairs = bt.p_pairs + t->bq * bk / 2;
        bt.ds = (uint16_t *)(bt.ds_pairs + t->bq * bk / 2);
        bt.dq = (float *)(bt.ds + t->bq * bk);
        bc->isa->bf16_tiles_begin();
    }

    /* interleaved key tiles balance causal work across chunks */
    for (int64_t kt = chunk; kt < nk; kt += bc->chunks) {
        int64_t k0 = kt * bk, nc = sk - k0 < bk ? sk - k0 : bk;
        if (t->bf16) {
            const uint16_t *k = (const uint16_t *)p->k.data + b * p->k.sb + (ks + k0) * p->k.ss + hk * p->k.sh;
            const uint16_t *v = (const uint16_t *)p->v.data + b * p->v.sb + (ks + k0) * p->v.ss + hk * p->v.sh;
            fa_bf16_pairs_of_columns(k, p->k.ss, nc, bk, p->d, dp, bt.k_cols);
            fa_bf16_pairs_of_rows(k, p->k.ss, nc, bk, p->d, dp, bt.k_rows);
            fa_bf16_pairs_of_rows(v, p->v.ss, nc, bk, p->d, dp, bt.v_rows);
        } else {
            load_rows(p, &p->k, b, ks + k0, nc, bk, hk, 1.0f, ktile, dp);
            load_rows_transposed(p, &p->k, b, ks + k0, nc, hk, kT, dp, bk);
            load_rows_transposed(p, &p->v, b, ks + k0, nc, hk, vT, dp, bk);
        }
        memset(dk, 0, sizeof(float) * (size_t)(bk * dp)); /* dK^T, dV^T (dp x bk) for the bf16 products */
        memset(dv, 0, sizeof(float) * (size_t)(bk * dp));
        /* no query rows (nq = 0): dK = dV = 0 without walking the group's heads */
        for (int64_t h = hk * p->group; nq > 0 && h < (hk + 1) * p->group; ++h) {
            for (int64_t qt = 0; qt < nq; ++qt) {
                fa_tile_class cls = tile_class(p, &m, h, qt, kt);
                if (cls == FA_TILE_EMPTY)
                    continue;
                int64_t q0 = qt * t->bq, nr = sq - q0 < t->bq ? sq - q0 : t->bq;
                int64_t cr0 = canon_q_row(p, b, qs, q0);
                for (int64_t r = 0; r < nr; ++r) {
                    lse[r] = ((const float *)p->lse.data)[b * p->lse.sb + h * p->lse.sh + (qs + q0 + r) * p->lse.ss];
                    dsum[r] = bc->dsum[h * p->total_q + cr0 + r];
                }
                float *dq_rows = dq_acc + (h * p->total_q + cr0) * dp;
                const float *pack = q_pack_of(bc, b, qt, h);
                if (t->bf16) {
                    bt.q = (const uint16_t *)pack;
                    bt.dout = bt.q + t->bq * dp;
                    bt.qT = bt.dout + t->bq * dp;
                    bt.doutT = bt.qT + dp * t->bq;
                    bwd_tile_bf16(bc, &bt, b, h, q0, nr, sq, sk, k0, nc, &m, cls, lse, dsum, pm, pz, ds, grad, dk,
                                  dv, dq_rows, dp);
                    continue;
                }
                const float *qtile = pack, *dotile = pack + t->bq * dp;
                /* P = exp(scale * Q K^T - LSE); a row with LSE = -inf is fully masked: P = 0 */
                bc->isa->gemm_rows(nr, bk, p->d, qtile, dp, kT, bk, pm, bk, 0);
                for (int64_t r = 0; r < nr; ++r)
                    bc->isa->scale_row(pm + r * bk, bk, p->scale);
                if (fa_score_mod_active(p->mod))
                    apply_score_mod(p, b, h, sk - sq, q0, nr, k0, bk, bk, pm, grad);
                if (cls != FA_TILE_FULL || nc < bk)
                    apply_mask(p, &m, h, q0, nr, k0, nc, bk, bk, pm, cls);
                for (int64_t r = 0; r < nr; ++r) { /* LSE = -inf: a row that saw no key, P = 0 */
                    if (fa_row_absent(lse[r]))
                        memset(pm + r * bk, 0, sizeof(float) * (size_t)bk);
                    else
                        bc->isa->exp_row(pm + r * bk, bk, lse[r]);
                }
                /* dV += (P o Z)^T dO, with Z the dropout factors (0 or 1/(1-p)) */
                const float *pzv = pm;
                if (p->dropout_threshold) {
                    memcpy(pz, pm, sizeof(float) * (size_t)(nr * bk));
                    apply_dropout(p, b, h, q0, nr, k0, nc, bk, pz);
                    pzv = pz;
                }
                bc->isa->gemm_tn(bk, dp, nr, pzv, bk, dotile, dp, dv, dp, 1);
                /* dP = Z o (dO V^T); dS = P o (dP - D) * scale */
                bc->isa->gemm_rows(nr, bk, p->d, dotile, dp, vT, bk, ds, bk, 0);
                if (p->dropout_threshold)
                    apply_dropout(p, b, h, q0, nr, k0, nc, bk, ds);
                /* a select inside: P = 0 meets dP = NaN from V = NaN */
                bc->isa->softmax_grad_tile(ds, pm, nr, bk, bk, dsum, p->scale);
                if (p->mod.softcap > 0.0f) /* dS = dS' * (1 - tanh^2) */
                    for (int64_t x = 0; x < nr * bk; ++x)
                        ds[x] *= grad[x];
                /* dQ (this chunk's part) += dS K ; dK += dS^T Q */
                bc->isa->gemm_rows(nr, dp, bk, ds, bk, ktile, dp, dq_rows, dp, 1);
                bc->isa->gemm_tn(bk, dp, nr, ds, bk, qtile, dp, dk, dp, 1);
            }
        }
        if (t->bf16) {
            store_rows_transposed(p, &p->dk, b, ks + k0, nc, hk, dk, bk);
            store_rows_transposed(p, &p->dv, b, ks + k0, nc, hk, dv, bk);
        } else {
            store_rows(p, &p->dk, b, ks + k0, nc, hk, dk, dp, 1.0f, NULL);
            store_rows(p, &p->dv, b, ks + k0, nc, hk, dv, dp, 1.0f, NULL);
        }
    }
    if (t->bf16)
        bc->isa->bf16_tiles_end();
}

/* dQ of one (batch, query tile), every head: the chunks' partial sums in chunk order. */
static void bwd_dq_task(void *argp, int64_t task, float *scratch)
{
    (void)scratch;
    const bwd_ctx *bc = argp;
    const fa_problem *p = bc->p;
    int64_t qt = task % bc->nq, b = task / bc->nq;
    int64_t sq, sk, qs, ks;
    fa_problem_seq(p, b, &sq, &sk, &qs, &ks);
    int64_t q0 = qt * bc->t.bq, dp = bc->t.dp;
    int64_t plane = p->total_q * p->heads_q * dp;
    for (int64_t i = q0; i < sq && i < q0 + bc->t.bq; ++i) {
        int64_t cr = canon_q_row(p, b, qs, i);
        for (int64_t h = 0; h < p->heads_q; ++h) {
            float *acc = bc->dq_acc + (h * p->total_q + cr) * dp;
            for (int64_t c = 1; c < bc->chunks; ++c) {
                const float *part = acc + c * plane;
                for (int64_t x = 0; x < p->d; ++x)
                    acc[x] += part[x];
            }
            int64_t off = b * p->dq.sb + (qs + i) * p->dq.ss + h * p->dq.sh;
            /* a row that saw no key: dQ = 0 (dS = 0 there, but 0 times a NaN in K is NaN) */
            float keep = fa_row_absent(((const float *)p->lse.data)[b * p->lse.sb + h * p->lse.sh + (qs + i) * p->lse.ss])
                             ? 0.0f
                             : 1.0f;
            for (int64_t x = 0; x < p->d; ++x)
                fa_store_elem(p->out_dtype, p->dq.data, off + x, fa_row_output(acc[x], keep));
        }
    }
}

fa_status fa_cpu_flash_backward(fa_context *ctx, const fa_problem *p)
{
    bwd_ctx bc = {.p = p, .isa = fa_cpu_isa_of(ctx)};
    bc.t = dims_of(p, bc.isa);
    bc.nq = (p->seqlen_q + bc.t.bq - 1) / bc.t.bq;
    bc.nk = (p->seqlen_k + bc.t.bk - 1) / bc.t.bk;
    int threads = fa_cpu_threads(ctx);
    bc.chunks = fa_cpu_bwd_chunks(p, threads);
    int64_t per = bwd_scratch_floats(&bc.t);
    int64_t q_rows = 0, scratch_bytes = float_bytes(per, threads, 1), dsum_bytes = -1, acc_bytes = -1, pack_bytes = 0;
    if (fa_mul_ok(p->total_q, p->heads_q, &q_rows)) {
        dsum_bytes = float_bytes(q_rows, 1, 1);
        acc_bytes = float_bytes(bc.chunks, q_rows, bc.t.dp);
    }
    bc.qtile_base = tile_prefix(p, bc.t.bq, 1);
    if (!bc.qtile_base)
        return FA_ERROR(ctx, FA_ERR_OUT_OF_MEMORY, "cpu backward: cannot allocate %lld query tile offsets",
                        (long long)p->batch + 1);
    pack_bytes = float_bytes(bc.qtile_base[p->batch] * bc.t.bq, p->heads_q, 2 * bc.t.dp);
    if (scratch_bytes < 0 || dsum_bytes < 0 || acc_bytes < 0 || pack_bytes < 0) {
        free(bc.qtile_base);
        return FA_ERROR(ctx, FA_ERR_OVERFLOW,
                        "cpu backward: workspace for %lld chunks x %lld query rows x %lld heads overflows 64 bits",
                        (long long)bc.chunks, (long long)p->total_q, (long long)p->heads_q);
    }
    float *scratch = aligned_alloc(64, (size_t)scratch_bytes);
    bc.dsum = malloc((size_t)(dsum_bytes > 0 ? dsum_bytes : 64));
    bc.dq_acc = calloc((size_t)(acc_bytes > 0 ? acc_bytes : 64), 1);
    bc.q_pack = aligned_alloc(64, (size_t)(pack_bytes > 0 ? pack_bytes : 64));
    if (!scratch || !bc.dsum || !bc.dq_acc || !bc.q_pack) {
        free(scratch);
        free(bc.dsum);
        free(bc.dq_acc);
        free(bc.q_pack);
        free(bc.qtile_base);
        return FA_ERROR(ctx, FA_ERR_OUT_OF_MEMORY, "cpu backward: cannot allocate %lld bytes of workspace",
                        (long long)fa_cpu_workspace_bytes(p, bc.isa, threads));
    }
    fa_parallel_for(threads, p->batch * p->heads_q * bc.nq, bwd_prepare_task, &bc, scratch, per);
    fa_parallel_for(threads, p->batch * p->heads_kv * bc.chunks, bwd_main_task, &bc, scratch, per);
    fa_parallel_for(threads, p->batch * bc.nq, bwd_dq_task, &bc, scratch, per);
    free(scratch);
    free(bc.dsum);
    free(bc.dq_acc);
    free(bc.q_pack);
    free(bc.qtile_base);
    return FA_SUCCESS;
}
