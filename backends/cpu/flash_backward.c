/* flash_backward.c: the CPU backend's fused, tiled backward (Dao et al. 2022, Algorithm 2). First
 * D = rowsum(dO * O) with Q and dO packed once per (query tile, head); then one task per (batch,
 * kv head, chunk of key tiles) that recomputes S and P from the forward's LSE, accumulates dK and
 * dV in its tile and dQ in a per-chunk fp32 buffer; then the chunks' dQ summed in a fixed order,
 * so the backward is always deterministic. The products come from the context's kernel table
 * (isa.h), with bf16 operands on tables that have them. */
#include "flash_tiles.h"

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
        for (int64_t c = 0; c < p->d_v; ++c)
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
                     p->dout.ss, nr, bq, p->d_v, dr, dp);
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
        apply_dropout(isa, p, b, h, q0, nr, k0, nc, bk, pz);
        pzv = pz;
    }
    bf16_row_pairs(isa, pzv, bk, nr, nr32, bk, bt->p_pairs);
    isa->gemm_bf16(dp, bk, nr32, bt->doutT, bq, bt->p_pairs, bk, dvT, bk, 1);
    isa->gemm_bf16(nr16, bk, dp, bt->dout, dp, bt->v_rows, bk, ds, bk, 0);
    if (p->dropout_threshold)
        apply_dropout_of(p, pz, nr, nc, bk, ds);
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
    const int64_t dim = view_dim(p, v);
    for (int64_t r = 0; r < n; ++r) {
        int64_t off = b * v->sb + (row0 + r) * v->ss + h * v->sh;
        for (int64_t c = 0; c < dim; ++c)
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
            fa_bf16_pairs_of_rows(v, p->v.ss, nc, bk, p->d_v, dp, bt.v_rows);
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
                    apply_dropout(bc->isa, p, b, h, q0, nr, k0, nc, bk, pz);
                    pzv = pz;
                }
                bc->isa->gemm_tn(bk, dp, nr, pzv, bk, dotile, dp, dv, dp, 1);
                /* dP = Z o (dO V^T); dS = P o (dP - D) * scale */
                bc->isa->gemm_rows(nr, bk, p->d_v, dotile, dp, vT, bk, ds, bk, 0);
                if (p->dropout_threshold)
                    apply_dropout_of(p, pz, nr, nc, bk, ds);
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

/* dsink of one query head (core/sink.h): its rows' terms in row order, the same bits on every run. */
static void bwd_dsink_task(void *argp, int64_t h, float *scratch)
{
    (void)scratch;
    const bwd_ctx *bc = argp;
    const fa_problem *p = bc->p;
    float acc = 0.0f;
    for (int64_t b = 0; b < p->batch; ++b) {
        int64_t sq, sk, qs, ks;
        fa_problem_seq(p, b, &sq, &sk, &qs, &ks);
        for (int64_t i = 0; i < sq; ++i) {
            const float lse = ((const float *)p->lse.data)[b * p->lse.sb + h * p->lse.sh + (qs + i) * p->lse.ss];
            acc += fa_sink_grad_term(p->sink[h], lse, bc->dsum[h * p->total_q + canon_q_row(p, b, qs, i)]);
        }
    }
    p->dsink[h] = acc;
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
    if (p->dsink)
        fa_parallel_for(threads, p->heads_q, bwd_dsink_task, &bc, scratch, per);
    free(scratch);
    free(bc.dsum);
    free(bc.dq_acc);
    free(bc.q_pack);
    free(bc.qtile_base);
    return FA_SUCCESS;
}
