/* masked_rows.c: the contract for rows that see no key and keys that no row sees, on one backend
 * (through the public API), for fp32, fp16 and bf16 and several head dims:
 * - a query row with no visible key writes O = 0 and LSE = -inf in the forward and dQ = 0 in the
 *   backward, and adds nothing to dK / dV, whatever Q, K, V and dO hold (NaN, +inf, -inf placed in
 *   Q and dO of such rows, in K and V of keys no row sees, in V of a key some rows see);
 * - Q of such rows and K of keys no row sees change no O, LSE, dK or dV bit; V of keys no row
 *   sees changes no gradient bit (the backward given the same O and LSE);
 * - NaN / inf in V of a key a row sees propagates to that row's O (as in PyTorch and
 *   FlashAttention-2).
 * Masks: causal with seqlen_q > seqlen_k, windows on both sides of the diagonal, a block mask with
 * an empty block row and an empty block column, varlen with a sequence of no keys and one of no
 * queries; sizes that span several key tiles. Which elements are visible is computed here from
 * the definition in docs/options.md, not from core/mask.h.
 * Usage: masked_rows --backend NAME [--dims 40,64,...] [--dtypes fp32,fp16,bf16]. Exits 77 (SKIP,
 * with the reason) when the backend is not compiled in or has no device. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashattn.h"

typedef struct mcase {
    const char *name;
    int varlen;
    int64_t nseq, lq[4], lk[4]; /* dense: one sequence (batch 1) */
    int64_t hq, hkv;
    int causal;
    int64_t left, right;
    int block;               /* 1: a block bitmap with one empty block row and one empty block column */
    int64_t block_q, block_k, empty_row, empty_col;
} mcase;

static const mcase cases[] = {
    {.name = "causal-sq300-sk200", .nseq = 1, .lq = {300}, .lk = {200}, .hq = 2, .hkv = 1, .causal = 1,
     .left = -1, .right = -1},
    {.name = "window-20-5-sq260-sk130", .nseq = 1, .lq = {260}, .lk = {130}, .hq = 2, .hkv = 2, .left = 20,
     .right = 5},
    {.name = "window-16-0-sq150-sk330", .nseq = 1, .lq = {150}, .lk = {330}, .hq = 2, .hkv = 1, .left = 16,
     .right = 0},
    {.name = "block-empty-row-col", .nseq = 1, .lq = {256}, .lk = {256}, .hq = 2, .hkv = 1, .left = -1, .right = -1,
     .block = 1, .block_q = 32, .block_k = 48, .empty_row = 3, .empty_col = 2},
    {.name = "varlen-causal-empty-seqs", .varlen = 1, .nseq = 4, .lq = {70, 130, 0, 100}, .lk = {0, 60, 40, 200},
     .hq = 2, .hkv = 1, .causal = 1, .left = -1, .right = -1},
};

/* ------------------------------------------------------------------ problem bookkeeping */

typedef struct prob {
    const mcase *c;
    fa_dtype dt;
    int64_t d, total_q, total_k, qs[5], ks[5];
    int64_t rows, cols; /* block bitmap */
    uint8_t *bits;
    char *row_absent; /* [total_q]: the row sees no key */
    char *key_dead;   /* [total_k]: no row sees the key */
    int64_t vis_key, vis_key_seq; /* a key that some row sees (-1: none) */
} prob;

/* The definition in docs/options.md: offset = sk - sq; query i sees key j iff j < sk,
 * left < 0 or j >= i + offset - left, right' < 0 or j <= i + offset + right' (causal: right' = 0
 * when right is unbounded or positive), and the block bit of (i / block_q, j / block_k). */
static int visible(const prob *p, int64_t s, int64_t i, int64_t j)
{
    const mcase *c = p->c;
    int64_t sq = c->lq[s], sk = c->lk[s], off = sk - sq, right = c->right;
    if (c->causal && (right < 0 || right > 0))
        right = 0;
    if (j < 0 || j >= sk || i < 0 || i >= sq)
        return 0;
    if (c->left >= 0 && j < i + off - c->left)
        return 0;
    if (right >= 0 && j > i + off + right)
        return 0;
    if (p->bits && !p->bits[(i / c->block_q) * p->cols + j / c->block_k])
        return 0;
    return 1;
}

static int prob_init(prob *p, const mcase *c, fa_dtype dt, int64_t d)
{
    memset(p, 0, sizeof *p);
    p->c = c;
    p->dt = dt;
    p->d = d;
    for (int64_t s = 0; s < c->nseq; ++s) {
        p->qs[s + 1] = p->qs[s] + c->lq[s];
        p->ks[s + 1] = p->ks[s] + c->lk[s];
    }
    p->total_q = p->qs[c->nseq];
    p->total_k = p->ks[c->nseq];
    if (c->block) {
        int64_t mq = 0, mk = 0;
        for (int64_t s = 0; s < c->nseq; ++s) {
            mq = c->lq[s] > mq ? c->lq[s] : mq;
            mk = c->lk[s] > mk ? c->lk[s] : mk;
        }
        p->rows = (mq + c->block_q - 1) / c->block_q;
        p->cols = (mk + c->block_k - 1) / c->block_k;
        p->bits = malloc((size_t)(p->rows * p->cols));
        if (!p->bits)
            return -1;
        for (int64_t r = 0; r < p->rows; ++r) /* a mixed pattern, then the empty row and column */
            for (int64_t k = 0; k < p->cols; ++k)
                p->bits[r * p->cols + k] = (uint8_t)(r != c->empty_row && k != c->empty_col && (r + 2 * k) % 5 != 1);
    }
    p->row_absent = calloc((size_t)p->total_q + 1, 1);
    p->key_dead = calloc((size_t)p->total_k + 1, 1);
    if (!p->row_absent || !p->key_dead)
        return -1;
    p->vis_key = -1;
    for (int64_t s = 0; s < c->nseq; ++s) {
        for (int64_t i = 0; i < c->lq[s]; ++i) {
            int any = 0;
            for (int64_t j = 0; j < c->lk[s] && !any; ++j)
                any = visible(p, s, i, j);
            p->row_absent[p->qs[s] + i] = (char)!any;
        }
        for (int64_t j = 0; j < c->lk[s]; ++j) {
            int any = 0;
            for (int64_t i = 0; i < c->lq[s] && !any; ++i)
                any = visible(p, s, i, j);
            p->key_dead[p->ks[s] + j] = (char)!any;
            if (any && p->vis_key < 0 && j >= c->lk[s] / 2) {
                p->vis_key = p->ks[s] + j;
                p->vis_key_seq = s;
            }
        }
    }
    return 0;
}

static void prob_free(prob *p)
{
    free(p->bits);
    free(p->row_absent);
    free(p->key_dead);
}

/* ------------------------------------------------------------------ host data */

static uint64_t rng_state;

static float rnd(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void put(fa_dtype dt, void *buf, size_t i, float x)
{
    if (dt == FA_DTYPE_F32)
        ((float *)buf)[i] = x;
    else
        ((uint16_t *)buf)[i] = dt == FA_DTYPE_F16 ? fa_f32_to_f16(x) : fa_f32_to_bf16(x);
}

static float get(fa_dtype dt, const void *buf, size_t i)
{
    if (dt == FA_DTYPE_F32)
        return ((const float *)buf)[i];
    uint16_t h = ((const uint16_t *)buf)[i];
    return dt == FA_DTYPE_F16 ? fa_f16_to_f32(h) : fa_bf16_to_f32(h);
}

/* Every element of packed row `row` ([rows, heads, d]) set to NaN, +inf, -inf in turn. */
static void poison_row(fa_dtype dt, void *buf, int64_t row, int64_t heads, int64_t d)
{
    static const float bad[3] = {NAN, INFINITY, -INFINITY};
    for (int64_t e = 0; e < heads * d; ++e)
        put(dt, buf, (size_t)(row * heads * d + e), bad[e % 3]);
}

enum { T_Q, T_K, T_V, T_O, T_LSE, T_DO, T_DQ, T_DK, T_DV, T_N };

typedef struct bufs {
    void *h[T_N];
    size_t bytes[T_N];
} bufs;

static size_t elems(const prob *p, int t)
{
    switch (t) {
    case T_K: case T_V: case T_DK: case T_DV:
        return (size_t)(p->total_k * p->c->hkv * p->d);
    case T_LSE:
        return (size_t)(p->total_q * p->c->hq);
    default:
        return (size_t)(p->total_q * p->c->hq * p->d);
    }
}

static int bufs_alloc(const prob *p, bufs *b)
{
    for (int t = 0; t < T_N; ++t) {
        b->bytes[t] = elems(p, t) * (t == T_LSE ? sizeof(float) : fa_dtype_size(p->dt));
        b->h[t] = calloc(1, b->bytes[t] + 1);
        if (!b->h[t])
            return -1;
    }
    return 0;
}

static void bufs_free(bufs *b)
{
    for (int t = 0; t < T_N; ++t)
        free(b->h[t]);
}

static void bufs_copy_inputs(const prob *p, bufs *dst, const bufs *src)
{
    (void)p;
    for (int t = 0; t < T_N; ++t)
        memcpy(dst->h[t], src->h[t], src->bytes[t]);
}

/* ------------------------------------------------------------------ running the backend */

static fa_context *g_ctx;
static char g_fail[512];
static char g_variant[3][128]; /* the kernels that ran: forward, deterministic backward, backward */

/* Uploads the inputs of b, runs the forward (backward = 0) or the backward, downloads the
 * outputs into b. Returns the status; FA_ERR_UNSUPPORTED is a skip. */
static fa_status run(const prob *p, bufs *b, int backward, int deterministic)
{
    const mcase *c = p->c;
    void *dev[T_N] = {0};
    void *cu = NULL;
    fa_block_mask bm = {0};
    fa_status st = FA_SUCCESS;
    for (int t = 0; t < T_N && st == FA_SUCCESS; ++t) {
        st = fa_malloc(g_ctx, b->bytes[t] ? b->bytes[t] : 1, &dev[t]);
        if (st == FA_SUCCESS && b->bytes[t])
            st = fa_memcpy(g_ctx, dev[t], b->h[t], b->bytes[t], FA_COPY_HOST_TO_DEVICE);
    }
    int32_t cu_host[10];
    for (int64_t s = 0; s <= c->nseq; ++s) {
        cu_host[s] = (int32_t)p->qs[s];
        cu_host[5 + s] = (int32_t)p->ks[s];
    }
    if (st == FA_SUCCESS && c->varlen) {
        st = fa_malloc(g_ctx, sizeof cu_host, &cu);
        if (st == FA_SUCCESS)
            st = fa_memcpy(g_ctx, cu, cu_host, sizeof cu_host, FA_COPY_HOST_TO_DEVICE);
    }
    if (st == FA_SUCCESS && c->block)
        st = fa_block_mask_from_bitmap(&bm, p->bits, 1, p->rows, p->cols, c->block_q, c->block_k);
    if (st != FA_SUCCESS) {
        snprintf(g_fail, sizeof g_fail, "setup: %s: %s", fa_status_string(st), fa_context_last_error(g_ctx));
        goto done;
    }
    fa_varlen vl = {.cu_seqlens_q = (const int32_t *)cu, .cu_seqlens_k = (const int32_t *)cu + 5,
                    .batch = c->nseq};
    for (int64_t s = 0; s < c->nseq; ++s) {
        vl.max_seqlen_q = c->lq[s] > vl.max_seqlen_q ? c->lq[s] : vl.max_seqlen_q;
        vl.max_seqlen_k = c->lk[s] > vl.max_seqlen_k ? c->lk[s] : vl.max_seqlen_k;
    }
    fa_options o = fa_options_default();
    o.causal = c->causal;
    o.window_left = c->left;
    o.window_right = c->right;
    o.block_mask = c->block ? &bm : NULL;
    o.deterministic = deterministic;
    int nd = c->varlen ? 3 : 4;
    int64_t qsh[4], ksh[4], lsh[3];
    if (c->varlen) {
        int64_t a[3] = {p->total_q, c->hq, p->d}, k[3] = {p->total_k, c->hkv, p->d};
        memcpy(qsh, a, sizeof a);
        memcpy(ksh, k, sizeof k);
        lsh[0] = c->hq;
        lsh[1] = p->total_q;
    } else {
        int64_t a[4] = {1, p->total_q, c->hq, p->d}, k[4] = {1, p->total_k, c->hkv, p->d};
        memcpy(qsh, a, sizeof a);
        memcpy(ksh, k, sizeof k);
        lsh[0] = 1;
        lsh[1] = c->hq;
        lsh[2] = p->total_q;
    }
    fa_tensor tq = fa_tensor_contiguous(dev[T_Q], p->dt, nd, qsh), tk = fa_tensor_contiguous(dev[T_K], p->dt, nd, ksh);
    fa_tensor tv = fa_tensor_contiguous(dev[T_V], p->dt, nd, ksh), to = fa_tensor_contiguous(dev[T_O], p->dt, nd, qsh);
    fa_tensor tl = fa_tensor_contiguous(dev[T_LSE], FA_DTYPE_F32, nd - 1, lsh);
    const fa_varlen *vp = c->varlen ? &vl : NULL;
    fa_fwd_args fa = {.q = tq, .k = tk, .v = tv, .o = to, .lse = tl, .varlen = vp, .opts = o};
    char variant[128] = "";
    st = fa_query_support(g_ctx, &fa, backward, variant, sizeof variant);
    if (st != FA_SUCCESS) {
        snprintf(g_fail, sizeof g_fail, "%s", fa_context_last_error(g_ctx));
        goto done;
    }
    snprintf(g_variant[backward ? 2 - deterministic : 0], sizeof g_variant[0], "%s", variant);
    if (!backward) {
        st = fa_forward(g_ctx, &fa);
    } else {
        fa_bwd_args ba = {.q = tq, .k = tk, .v = tv, .o = to, .lse = tl, .varlen = vp, .opts = o,
                          .dout = fa_tensor_contiguous(dev[T_DO], p->dt, nd, qsh),
                          .dq = fa_tensor_contiguous(dev[T_DQ], p->dt, nd, qsh),
                          .dk = fa_tensor_contiguous(dev[T_DK], p->dt, nd, ksh),
                          .dv = fa_tensor_contiguous(dev[T_DV], p->dt, nd, ksh)};
        st = fa_backward(g_ctx, &ba);
    }
    if (st == FA_SUCCESS)
        st = fa_synchronize(g_ctx);
    if (st != FA_SUCCESS) {
        snprintf(g_fail, sizeof g_fail, "%s (%s): %s", backward ? "backward" : "forward", variant,
                 fa_context_last_error(g_ctx));
        goto done;
    }
    static const int fwd_out[] = {T_O, T_LSE}, bwd_out[] = {T_DQ, T_DK, T_DV};
    const int *outs = backward ? bwd_out : fwd_out;
    for (int x = 0; x < (backward ? 3 : 2) && st == FA_SUCCESS; ++x)
        if (b->bytes[outs[x]])
            st = fa_memcpy(g_ctx, b->h[outs[x]], dev[outs[x]], b->bytes[outs[x]], FA_COPY_DEVICE_TO_HOST);
    if (st != FA_SUCCESS)
        snprintf(g_fail, sizeof g_fail, "download: %s", fa_context_last_error(g_ctx));
done:
    for (int t = 0; t < T_N; ++t)
        if (dev[t])
            fa_free(g_ctx, dev[t]);
    if (cu)
        fa_free(g_ctx, cu);
    if (c->block)
        fa_block_mask_destroy(&bm);
    return st;
}

/* ------------------------------------------------------------------ checks */

static int failures, checks;

#define CHECK(cond, ...)                                                                                       \
    do {                                                                                                       \
        ++checks;                                                                                              \
        if (!(cond)) {                                                                                         \
            ++failures;                                                                                        \
            printf("  FAIL %s: ", label);                                                                      \
            printf(__VA_ARGS__);                                                                               \
            printf("\n");                                                                                      \
            return;                                                                                            \
        }                                                                                                      \
    } while (0)

/* Elements of rows whose flag is set (flag NULL: every row) of a packed [rows, heads, d] output. */
static int64_t first_nonzero(const prob *p, const void *buf, const char *flag, int64_t rows, int64_t heads)
{
    for (int64_t r = 0; r < rows; ++r) {
        if (flag && !flag[r])
            continue;
        for (int64_t e = 0; e < heads * p->d; ++e)
            if (get(p->dt, buf, (size_t)(r * heads * p->d + e)) != 0.0f)
                return r;
    }
    return -1;
}

/* Rows (flag set, or all when flag is NULL) bitwise equal between a and b; -1, or the first row
 * that differs. */
static int64_t first_diff(const prob *p, const void *a, const void *b, const char *flag, int64_t rows, int64_t heads)
{
    size_t es = fa_dtype_size(p->dt), w = (size_t)(heads * p->d) * es;
    for (int64_t r = 0; r < rows; ++r)
        if ((!flag || flag[r]) && memcmp((const char *)a + (size_t)r * w, (const char *)b + (size_t)r * w, w))
            return r;
    return -1;
}

static void check_forward_rows(const prob *p, const bufs *out, const char *label)
{
    const float *lse = out->h[T_LSE];
    int64_t r = first_nonzero(p, out->h[T_O], p->row_absent, p->total_q, p->c->hq);
    CHECK(r < 0, "row %lld sees no key but O != 0 (O[%lld][0][0] = %g)", (long long)r, (long long)r,
          (double)get(p->dt, out->h[T_O], (size_t)(r * p->c->hq * p->d)));
    for (int64_t h = 0; h < p->c->hq; ++h)
        for (int64_t i = 0; i < p->total_q; ++i)
            CHECK(!p->row_absent[i] || lse[h * p->total_q + i] == -INFINITY, "row %lld head %lld sees no key but LSE = %g",
                  (long long)i, (long long)h, (double)lse[h * p->total_q + i]);
}

static int64_t count(const char *flag, int64_t n)
{
    int64_t k = 0;
    for (int64_t i = 0; i < n; ++i)
        k += flag[i] != 0;
    return k;
}

static int is_finite_buf(const prob *p, const void *buf, size_t n)
{
    for (size_t i = 0; i < n; ++i)
        if (!isfinite(get(p->dt, buf, i)))
            return 0;
    return 1;
}

static int skipped;

/* forward with NaN / inf in Q of rows that see nothing and in K of keys that no row sees: every O
 * and LSE bit as in the clean run */
static void fwd_unseen_q_k(const prob *p, const bufs *clean, bufs *x, const char *label)
{
    bufs_copy_inputs(p, x, clean);
    for (int64_t i = 0; i < p->total_q; ++i)
        if (p->row_absent[i])
            poison_row(p->dt, x->h[T_Q], i, p->c->hq, p->d);
    for (int64_t j = 0; j < p->total_k; ++j)
        if (p->key_dead[j])
            poison_row(p->dt, x->h[T_K], j, p->c->hkv, p->d);
    memset(x->h[T_O], 0x7f, x->bytes[T_O]);
    memset(x->h[T_LSE], 0x7f, x->bytes[T_LSE]);
    CHECK(run(p, x, 0, 1) == FA_SUCCESS, "%s", g_fail);
    check_forward_rows(p, x, label);
    int64_t r = first_diff(p, x->h[T_O], clean->h[T_O], NULL, p->total_q, p->c->hq);
    CHECK(r < 0, "O of row %lld differs from the run with finite values", (long long)r);
    CHECK(!memcmp(x->h[T_LSE], clean->h[T_LSE], x->bytes[T_LSE]), "LSE differs from the run with finite values");
}

/* forward with NaN / inf in V of keys that no row sees and of one key that some rows see (and in Q
 * of rows that see nothing): rows that see nothing still give O = 0 and LSE = -inf; every row that
 * sees the poisoned key has a non-finite O (propagation); LSE is unchanged (V does not enter it). */
static void fwd_nan_v(const prob *p, const bufs *clean, bufs *x, const char *label)
{
    bufs_copy_inputs(p, x, clean);
    for (int64_t i = 0; i < p->total_q; ++i)
        if (p->row_absent[i])
            poison_row(p->dt, x->h[T_Q], i, p->c->hq, p->d);
    for (int64_t j = 0; j < p->total_k; ++j)
        if (p->key_dead[j] || j == p->vis_key)
            poison_row(p->dt, x->h[T_V], j, p->c->hkv, p->d);
    memset(x->h[T_O], 0x7f, x->bytes[T_O]);
    CHECK(run(p, x, 0, 1) == FA_SUCCESS, "%s", g_fail);
    check_forward_rows(p, x, label);
    CHECK(!memcmp(x->h[T_LSE], clean->h[T_LSE], x->bytes[T_LSE]), "LSE differs from the run with finite values");
    if (p->vis_key < 0)
        return;
    int64_t s = p->vis_key_seq, j = p->vis_key - p->ks[s], seen = 0;
    for (int64_t i = 0; i < p->c->lq[s]; ++i) {
        if (!visible(p, s, i, j))
            continue;
        ++seen;
        int64_t row = p->qs[s] + i;
        for (int64_t h = 0; h < p->c->hq; ++h) {
            int bad = 0;
            for (int64_t e = 0; e < p->d; ++e)
                bad |= !isfinite(get(p->dt, x->h[T_O], (size_t)((row * p->c->hq + h) * p->d + e)));
            CHECK(bad, "row %lld head %lld sees key %lld whose V is NaN/inf, but its O is finite", (long long)row,
                  (long long)h, (long long)p->vis_key);
        }
    }
    CHECK(seen > 0, "the key chosen as visible is seen by no row");
}

typedef enum bwd_poison { POISON_Q_DO_V, POISON_Q_DO_K } bwd_poison;

/* backward given the clean forward's O and LSE, with NaN / inf in Q and dO of rows that see
 * nothing and in V (POISON_Q_DO_V) or K (POISON_Q_DO_K) of keys that no row sees:
 * dQ of rows that see nothing is 0; dK and dV are the clean run's, bit for bit when deterministic,
 * else within the run-to-run spread of the clean backward; POISON_Q_DO_V leaves every dQ bit too
 * (a masked element's dS is 0 by selection, whatever dP holds). */
static void bwd_poisoned(const prob *p, const bufs *clean, const bufs *ref, bufs *x, bwd_poison what,
                         int deterministic, const char *label)
{
    int64_t hq = p->c->hq, hkv = p->c->hkv;
    bufs_copy_inputs(p, x, clean);
    for (int64_t i = 0; i < p->total_q; ++i)
        if (p->row_absent[i]) {
            poison_row(p->dt, x->h[T_Q], i, hq, p->d);
            poison_row(p->dt, x->h[T_DO], i, hq, p->d);
        }
    for (int64_t j = 0; j < p->total_k; ++j)
        if (p->key_dead[j])
            poison_row(p->dt, x->h[what == POISON_Q_DO_V ? T_V : T_K], j, hkv, p->d);
    for (int t = T_DQ; t <= T_DV; ++t)
        memset(x->h[t], 0x7f, x->bytes[t]);
    CHECK(run(p, x, 1, deterministic) == FA_SUCCESS, "%s", g_fail);
    int64_t r = first_nonzero(p, x->h[T_DQ], p->row_absent, p->total_q, hq);
    CHECK(r < 0, "row %lld sees no key but dQ != 0 (dQ[%lld][0][0] = %g)", (long long)r, (long long)r,
          (double)get(p->dt, x->h[T_DQ], (size_t)(r * hq * p->d)));
    if (deterministic) {
        r = first_diff(p, x->h[T_DK], ref->h[T_DK], NULL, p->total_k, hkv);
        CHECK(r < 0, "dK of key %lld differs from the run with finite values", (long long)r);
        r = first_diff(p, x->h[T_DV], ref->h[T_DV], NULL, p->total_k, hkv);
        CHECK(r < 0, "dV of key %lld differs from the run with finite values", (long long)r);
        if (what == POISON_Q_DO_V) {
            r = first_diff(p, x->h[T_DQ], ref->h[T_DQ], NULL, p->total_q, hq);
            CHECK(r < 0, "dQ of row %lld differs from the run with finite values", (long long)r);
        }
        return;
    }
    /* the fused backward adds dQ (and on some kernels dK, dV) in an order that varies between
     * runs: dK and dV must be finite and within twice the spread between two clean runs plus four
     * units of the output dtype's rounding of the largest gradient */
    bufs again;
    CHECK(bufs_alloc(p, &again) == 0, "out of memory");
    bufs_copy_inputs(p, &again, clean);
    fa_status st = run(p, &again, 1, 0);
    double spread = 0, big = 0, diff = 0;
    double u = p->dt == FA_DTYPE_F32 ? 0x1p-24 : p->dt == FA_DTYPE_F16 ? 0x1p-11 : 0x1p-8;
    int finite = 1;
    for (int t = T_DK; t <= T_DV && st == FA_SUCCESS; ++t) {
        size_t n = elems(p, t);
        finite &= is_finite_buf(p, x->h[t], n);
        for (size_t e = 0; e < n; ++e) {
            double a = get(p->dt, ref->h[t], e), b = get(p->dt, again.h[t], e), c = get(p->dt, x->h[t], e);
            spread = fabs(a - b) > spread ? fabs(a - b) : spread;
            diff = fabs(a - c) > diff ? fabs(a - c) : diff;
            big = fabs(a) > big ? fabs(a) : big;
        }
    }
    bufs_free(&again);
    CHECK(st == FA_SUCCESS, "%s", g_fail);
    CHECK(finite, "dK or dV is not finite");
    CHECK(diff <= 2 * spread + 4 * u * big, "dK/dV differ from the clean run by %g (spread %g, largest %g)", diff,
          spread, big);
}

static void run_case(const prob *p, const char *tag)
{
    char label[256];
    bufs clean, ref, x;
    if (bufs_alloc(p, &clean) || bufs_alloc(p, &ref) || bufs_alloc(p, &x)) {
        printf("out of memory\n");
        exit(1);
    }
    rng_state = 0x9E3779B97F4A7C15ull ^ (uint64_t)p->d ^ ((uint64_t)p->dt << 20);
    for (int t = 0; t < T_N; ++t)
        if (t == T_Q || t == T_K || t == T_V || t == T_DO)
            for (size_t e = 0; e < elems(p, t); ++e)
                put(p->dt, clean.h[t], e, rnd());

    snprintf(label, sizeof label, "%s/fwd-clean", tag);
    fa_status st = run(p, &clean, 0, 1);
    if (st == FA_ERR_UNSUPPORTED) {
        printf("  SKIP %s: unsupported: %s\n", tag, g_fail);
        ++skipped;
        goto out;
    }
    ++checks;
    if (st != FA_SUCCESS) {
        ++failures;
        printf("  FAIL %s: %s\n", label, g_fail);
        goto out;
    }
    check_forward_rows(p, &clean, label);
    snprintf(label, sizeof label, "%s/fwd-nan-in-Q-of-empty-rows-K-of-unseen-keys", tag);
    fwd_unseen_q_k(p, &clean, &x, label);
    snprintf(label, sizeof label, "%s/fwd-nan-in-V", tag);
    fwd_nan_v(p, &clean, &x, label);

    for (int det = 1; det >= 0; --det) {
        bufs_copy_inputs(p, &ref, &clean);
        snprintf(label, sizeof label, "%s/bwd-clean%s", tag, det ? "-deterministic" : "");
        st = run(p, &ref, 1, det);
        if (st == FA_ERR_UNSUPPORTED) {
            printf("  SKIP %s: unsupported: %s\n", label, g_fail);
            ++skipped;
            continue;
        }
        ++checks;
        if (st != FA_SUCCESS) {
            ++failures;
            printf("  FAIL %s: %s\n", label, g_fail);
            continue;
        }
        snprintf(label, sizeof label, "%s/bwd-nan-in-Q-dO-of-empty-rows-V-of-unseen-keys%s", tag,
                 det ? "-deterministic" : "");
        bwd_poisoned(p, &clean, &ref, &x, POISON_Q_DO_V, det, label);
        snprintf(label, sizeof label, "%s/bwd-nan-in-Q-dO-of-empty-rows-K-of-unseen-keys%s", tag,
                 det ? "-deterministic" : "");
        bwd_poisoned(p, &clean, &ref, &x, POISON_Q_DO_K, det, label);
    }
out:
    bufs_free(&clean);
    bufs_free(&ref);
    bufs_free(&x);
}

static int compiled_in(const char *name)
{
    for (int i = 0; i < fa_backend_count(); ++i)
        if (strcmp(fa_backend_name(i), name) == 0)
            return 1;
    return 0;
}

/* want[t] = 1 for each dtype of dts named in the comma-separated list (fa_dtype_name's names);
 * 1 for an unknown name or an empty list */
static int parse_dtypes(const char *list, const fa_dtype *dts, int *want)
{
    int any = 0;
    for (int t = 0; t < 3; ++t)
        want[t] = 0;
    for (const char *s = list; *s;) {
        size_t n = strcspn(s, ",");
        int found = 0;
        for (int t = 0; t < 3; ++t) {
            const char *name = fa_dtype_name(dts[t]);
            if (strlen(name) == n && !strncmp(s, name, n))
                want[t] = found = any = 1;
        }
        if (!found) {
            fprintf(stderr, "masked_rows: unknown dtype '%.*s'\n", (int)n, s);
            return 1;
        }
        s += n;
        if (*s == ',')
            ++s;
    }
    return !any;
}

int main(int argc, char **argv)
{
    static const fa_dtype dts[] = {FA_DTYPE_F32, FA_DTYPE_F16, FA_DTYPE_BF16};
    const char *backend = NULL, *dims = "40,64,128,256";
    int want[3] = {1, 1, 1}; /* of dts */
    int usage = 0;
    for (int i = 1; i < argc && !usage; ++i) {
        if (!strcmp(argv[i], "--backend") && i + 1 < argc)
            backend = argv[++i];
        else if (!strcmp(argv[i], "--dims") && i + 1 < argc)
            dims = argv[++i];
        else if (!strcmp(argv[i], "--dtypes") && i + 1 < argc)
            usage = parse_dtypes(argv[++i], dts, want);
        else
            usage = 1;
    }
    if (usage || !backend) {
        fprintf(stderr, "usage: %s --backend NAME [--dims D,D,...] [--dtypes fp32,fp16,bf16]\n", argv[0]);
        return 2;
    }
    int ndev = 0;
    if (!compiled_in(backend)) {
        printf("SKIP masked-rows/%s: backend not compiled in\n", backend);
        return 77;
    }
    if (fa_device_count(backend, &ndev) != FA_SUCCESS || ndev < 1) {
        printf("SKIP masked-rows/%s: no device\n", backend);
        return 77;
    }
    fa_status st = fa_context_create(&g_ctx, backend, 0);
    if (st != FA_SUCCESS) {
        /* a CPU kernel table forced by FLASHATTN_CPU_ISA that this CPU cannot run, or OpenCL's matrix
         * path required (the token opencl-matrix=require in FLASHATTN_KERNELS) on a device without it:
         * SKIP by name */
        const char *isa = getenv("FLASHATTN_CPU_ISA"), *kernels = getenv("FLASHATTN_KERNELS");
        int forced_isa = isa && *isa && strcmp(backend, "cpu") == 0;
        int forced_matrix = kernels && strstr(kernels, "opencl-matrix=require") && strcmp(backend, "opencl") == 0;
        if (st == FA_ERR_UNSUPPORTED && (forced_isa || forced_matrix)) {
            printf("[ SKIPPED  ] masked-rows/%s: %s\n", backend, fa_last_error());
            return 77;
        }
        printf("masked-rows/%s: cannot create a context: %s\n", backend, fa_status_string(st));
        return 1;
    }
    char devname[256] = "";
    fa_device_name(backend, 0, devname, sizeof devname);
    printf("masked-rows on %s (%s)\n", backend, devname);
    int ran = 0;
    for (const char *dp = dims; *dp;) {
        int64_t d = strtoll(dp, NULL, 10);
        for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ++ci)
            for (int t = 0; t < 3; ++t) {
                if (!want[t])
                    continue;
                prob p;
                if (prob_init(&p, &cases[ci], dts[t], d)) {
                    printf("out of memory\n");
                    return 1;
                }
                char tag[160];
                snprintf(tag, sizeof tag, "%s/%s/%s/d%lld", backend, cases[ci].name, fa_dtype_name(dts[t]),
                         (long long)d);
                int f0 = failures, s0 = skipped;
                memset(g_variant, 0, sizeof g_variant);
                run_case(&p, tag);
                printf("%s %s (rows seeing no key %lld, keys no row sees %lld; kernels %s | %s | %s)\n",
                       failures > f0 ? "FAIL" : skipped > s0 ? "SKIP" : "ok  ", tag,
                       (long long)count(p.row_absent, p.total_q), (long long)count(p.key_dead, p.total_k),
                       g_variant[0], g_variant[1], g_variant[2]);
                ran += skipped == s0;
                prob_free(&p);
            }
        dp = strchr(dp, ',');
        if (!dp)
            break;
        ++dp;
    }
    fa_context_destroy(g_ctx);
    printf("masked-rows/%s: %d checks, %d failed, %d case(s) skipped\n", backend, checks, failures, skipped);
    if (failures)
        return 1;
    return ran ? 0 : 77;
}
