/* flash_forward.c: the CPU backend's fused, tiled forward (Dao et al. 2022, Algorithm 1). Tiles of
 * B_r x B_c scores live in per-thread buffers sized by the plan; inputs of any dtype are widened
 * to fp32 tile by tile (or rounded to bf16 pairs for the bf16 products), all sums are fp32. One
 * task per (batch, head, query tile) with the online softmax, over K and V packed once per call.
 * Matrix products, exp and the softmax step come from the context's kernel table (isa.h: AMX,
 * AVX-512, AVX2 or generic, chosen by cpuid); the forward prefetches the next key tile into L2
 * while it computes with the current one. */
#include "flash_tiles.h"

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
        fa_bf16_pairs_of_columns(vs, p->v.ss, nc, bk, p->d_v, dp, (uint32_t *)v);
        return;
    }
    /* each key row straight into its panels (K^T: dp x bk, V: bk x dp, both in 16-column
     * panels), zero-padded to dp columns and bk rows */
    float row[FA_MAX_HEAD_DIM];
    if (nc < bk)
        memset(kT, 0, sizeof(float) * (size_t)(2 * dp * bk));
    for (int64_t r = 0; r < nc; ++r) {
        int64_t off = b * p->k.sb + (ks + k0 + r) * p->k.ss + hk * p->k.sh;
        convert_row(p->dtype, p->k.data, off, p->d, 1.0f, row);
        for (int64_t c = p->d; c < dp; ++c)
            row[c] = 0.0f;
        float *kp = kT + r / PANEL * dp * PANEL + r % PANEL;
        for (int64_t c = 0; c < dp; ++c)
            kp[c * PANEL] = row[c];
        off = b * p->v.sb + (ks + k0 + r) * p->v.ss + hk * p->v.sh;
        convert_row(p->dtype, p->v.data, off, p->d_v, 1.0f, row);
        for (int64_t c = p->d_v; c < dp; ++c)
            row[c] = 0.0f;
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
                apply_dropout(isa, p, b, h, q0, nr, k0 + j0, j1 - j0, t->bk, sj);
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
        float lse = fa_softmax_lse(rows[r]);
        if (p->sink) { /* the sink joins the row's softmax (core/sink.h) */
            const float lse0 = lse;
            lse = fa_sink_lse(lse0, p->sink[h]);
            inv[r] *= fa_sink_factor(lse0, lse);
        }
        if (p->has_lse) {
            int64_t off = b * p->lse.sb + h * p->lse.sh + (qs + q0 + r) * p->lse.ss;
            ((float *)p->lse.data)[off] = lse;
        }
    }
    store_rows(p, &p->o, b, qs + q0, nr, h, otile, t->dp, 1.0f, inv);
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
