/* kvcache.c: the CPU backend's fa_forward_kvcache. Three phases on the worker pool:
 *   1. append: one task per (sequence, new token) writes its keys (rotated, rounded to the
 *      cache's dtype) and values into the cache;
 *   2. attention: one task per (sequence, kv head, split of the keys, block of query rows); the
 *      rows are the group of query heads that share the kv head times the new tokens, so each
 *      key and value row is widened to fp32 once per task and used by every head of the group;
 *      online softmax over key blocks of KV_BLOCK;
 *   3. merge (more than one split): each query row's partial outputs, merged by their
 *      log-sum-exp in split order (fa_softmax_merge), rounded once into o.
 * With few rows per kv head (decode: DIRECT_ROWS or fewer) the attention reads each key and value
 * row in place (kv_rows.h) instead of widening it to fp32 scratch first.
 * All arithmetic is fp32; a row that sees no key gives O = 0 and LSE = -inf (LSE = the sink with a
 * learnable sink, folded in once per row: core/sink.h). Keys and queries have d channels, values
 * and outputs d_v (any pair up to FA_MAX_HEAD_DIM_KVCACHE). */
#include "cpu.h"
#include "empty_row.h"
#include "half.h"
#include "kv_rows.h"
#include "pool.h"
#include "rotary.h"
#include "score_mod.h"
#include "simd.h"
#include "sink.h"
#include "softmax.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define KV_BLOCK 64  /* keys widened and scored together */
#define ROW_BLOCK 64 /* query rows (heads of a group x new tokens) per task */
#define DIRECT_ROWS 8 /* at most this many rows per kv head: the kernels read the cache rows in place */
#define DIRECT_CHUNK 8 /* keys of every head at a time, in place */

/* Element offset of token t, kv head h of sequence b in a cache view. */
static inline int64_t cache_offset(const fa_kv_problem *kp, const fa_view *v, int64_t b, int64_t t, int64_t h)
{
    if (kp->paged) {
        int64_t page = kp->host_block_table[b * kp->block_table_stride + t / kp->page_size];
        return page * v->sb + (t % kp->page_size) * v->ss + h * v->sh;
    }
    int64_t row = kp->host_batch_idx ? kp->host_batch_idx[b] : b;
    return row * v->sb + t * v->ss + h * v->sh;
}

static inline int64_t cached_len(const fa_kv_problem *kp, int64_t b)
{
    return kp->host_seqlens ? kp->host_seqlens[b] : kp->seqlen_cache;
}

/* x rounded to dtype dt and back (what storing it would keep). */
static inline float round_to(fa_dtype dt, float x)
{
    if (dt == FA_DTYPE_F16)
        return fa_half_to_float(fa_float_to_half(x));
    if (dt == FA_DTYPE_BF16)
        return fa_bfloat_to_float(fa_float_to_bfloat(x));
    return x;
}

/* d elements at base + off, widened to fp32. */
static void load_vec(fa_dtype dt, const void *base, int64_t off, int64_t n, float *dst)
{
    for (int64_t c = 0; c < n; ++c)
        dst[c] = fa_load_elem(dt, base, off + c);
}

/* Rotates the first rotary_dim channels of x (fp32) to position pos. */
static void rotate(const fa_kv_problem *kp, int64_t pos, float *x)
{
    const fa_dtype dt = kp->p.dtype;
    const int half = (int)(kp->rotary_dim / 2);
    for (int i = 0; i < half; ++i) {
        int cx, cy;
        fa_rotary_pair(kp->rotary_interleaved, (int)kp->rotary_dim, i, &cx, &cy);
        float c = fa_load_elem(dt, kp->rotary_cos, pos * kp->cos_stride + i);
        float s = fa_load_elem(dt, kp->rotary_sin, pos * kp->sin_stride + i);
        fa_rotary_apply(c, s, &x[cx], &x[cy]);
    }
}

/* ------------------------------------------------------------------ phase 1: append */

static void append_task(void *argp, int64_t task, float *scratch)
{
    const fa_kv_problem *kp = (const fa_kv_problem *)argp;
    const fa_problem *p = &kp->p;
    const int64_t b = task / kp->seqlen_knew, j = task % kp->seqlen_knew, t = cached_len(kp, b) + j;
    const size_t row_bytes = (size_t)p->d * fa_dtype_size(p->dtype), vrow_bytes = (size_t)p->d_v * fa_dtype_size(p->dtype);
    const size_t es = fa_dtype_size(p->dtype);
    for (int64_t h = 0; h < p->heads_kv; ++h) {
        const int64_t src = b * kp->k_new.sb + j * kp->k_new.ss + h * kp->k_new.sh;
        const int64_t kdst = cache_offset(kp, &kp->k_cache, b, t, h);
        if (kp->rotary) {
            load_vec(p->dtype, kp->k_new.data, src, p->d, scratch);
            rotate(kp, t, scratch);
            for (int64_t c = 0; c < p->d; ++c)
                fa_store_elem(p->dtype, kp->k_cache.data, kdst + c, scratch[c]);
        } else {
            memcpy((char *)kp->k_cache.data + kdst * es, (const char *)kp->k_new.data + src * es, row_bytes);
        }
        const int64_t vsrc = b * kp->v_new.sb + j * kp->v_new.ss + h * kp->v_new.sh;
        const int64_t vdst = cache_offset(kp, &kp->v_cache, b, t, h);
        memcpy((char *)kp->v_cache.data + vdst * es, (const char *)kp->v_new.data + vsrc * es, vrow_bytes);
    }
}

/* ------------------------------------------------------------------ phase 2: attention */

/* A task: one sequence, one split of its keys, and a block of rows. The rows of all query heads
 * are ordered (kv head, query head of its group, new token); a task takes the rows of `hb` whole
 * kv heads when a group's rows fit ROW_BLOCK (so one task reads each token's rows of all those
 * heads, which a [token, kv head, d] cache holds side by side), else ROW_BLOCK rows of one head. */
typedef struct attn_ctx {
    const fa_kv_problem *kp;
    int64_t splits, hb, head_blocks, row_blocks; /* row_blocks: per kv head when hb is 1 */
    int direct;                                  /* cache rows read in place (kv_rows.h) */
    float *partial;                              /* splits > 1: [batch][heads_q][seqlen_new][splits][d_v + 1] */
} attn_ctx;

/* row[j] = the cache row of token k0 + j, kv head h, for j < nk; up to a whole vector of keys the
 * first row again (valid memory, its scores overwritten by the mask) */
static inline void gather_rows(const fa_kv_problem *kp, const fa_view *v, int64_t b, int64_t k0, int64_t nk, int64_t h,
                               const void **row)
{
    const int64_t es = (int64_t)fa_dtype_size(kp->p.dtype);
    for (int64_t j = 0; j < nk; ++j)
        row[j] = (const char *)v->data + es * cache_offset(kp, v, b, k0 + j, h);
    for (int64_t j = nk; j < fa_round_up(nk, VEC); ++j)
        row[j] = row[0];
}

/* The key and value rows of kv head h for tokens t0 .. t1 on their way to L2. */
static inline void prefetch_rows(const fa_kv_problem *kp, int64_t b, int64_t t0, int64_t t1, int64_t h)
{
    const int64_t es = (int64_t)fa_dtype_size(kp->p.dtype), row_bytes = kp->p.d * es;
    for (int64_t t = t0; t < t1; ++t) {
        const char *kr = (const char *)kp->k_cache.data + es * cache_offset(kp, &kp->k_cache, b, t, h);
        const char *vr = (const char *)kp->v_cache.data + es * cache_offset(kp, &kp->v_cache, b, t, h);
        for (int64_t c = 0; c < row_bytes; c += 64) {
            __builtin_prefetch(kr + c, 0, 2);
            __builtin_prefetch(vr + c, 0, 2);
        }
    }
}

/* Scores of nr rows (four at a time, then one) against the keys in krow, of dtype dt. */
FA_VINLINE void direct_scores_of(fa_dtype dt, const float *q, int64_t dp, const void *const *krow, int64_t nr,
                                 int64_t nk, int64_t d, float *s)
{
    int64_t r = 0;
    for (; r + 4 <= nr; r += 4)
        kv_scores4(dt, q + r * dp, dp, krow, nk, d, s + r * KV_BLOCK, KV_BLOCK);
    for (; r < nr; ++r)
        kv_scores1(dt, q + r * dp, krow, nk, d, s + r * KV_BLOCK);
}

/* P V of nr rows against the values in vrow: rows that see every key of the block four at a time,
 * the others one by one, skipping the keys they cannot see. */
FA_VINLINE void direct_pv_of(fa_dtype dt, float *acc, int64_t dp, const float *s, const float *e, const int *full,
                             const void *const *vrow, int64_t nr, int64_t nk, int64_t d)
{
    int64_t r = 0;
    for (; r + 4 <= nr && full[r] && full[r + 1] && full[r + 2] && full[r + 3]; r += 4)
        kv_pv4(dt, acc + r * dp, dp, e + r * KV_BLOCK, KV_BLOCK, vrow, nk, d);
    for (; r < nr; ++r)
        kv_pv1(dt, acc + r * dp, s + r * KV_BLOCK, e + r * KV_BLOCK, vrow, nk, d);
}

/* The two above with the dtype a constant in each copy, so that each one's loads are specialised. */
FA_VINLINE void direct_scores(fa_dtype dt, const float *q, int64_t dp, const void *const *krow, int64_t nr,
                              int64_t nk, int64_t d, float *s)
{
    if (dt == FA_DTYPE_F32)
        direct_scores_of(FA_DTYPE_F32, q, dp, krow, nr, nk, d, s);
    else if (dt == FA_DTYPE_BF16)
        direct_scores_of(FA_DTYPE_BF16, q, dp, krow, nr, nk, d, s);
    else
        direct_scores_of(FA_DTYPE_F16, q, dp, krow, nr, nk, d, s);
}

FA_VINLINE void direct_pv(fa_dtype dt, float *acc, int64_t dp, const float *s, const float *e, const int *full,
                          const void *const *vrow, int64_t nr, int64_t nk, int64_t d)
{
    if (dt == FA_DTYPE_F32)
        direct_pv_of(FA_DTYPE_F32, acc, dp, s, e, full, vrow, nr, nk, d);
    else if (dt == FA_DTYPE_BF16)
        direct_pv_of(FA_DTYPE_BF16, acc, dp, s, e, full, vrow, nr, nk, d);
    else
        direct_pv_of(FA_DTYPE_F16, acc, dp, s, e, full, vrow, nr, nk, d);
}

/* Channels padded to whole vectors: the rows in scratch are dp floats (the larger of d and d_v),
 * zero past their own dim. */
static int64_t padded_dim(const fa_problem *p)
{
    return fa_round_up(p->d > p->d_v ? p->d : p->d_v, VEC);
}

/* Floats of one worker's scratch for tasks of hb kv heads. */
static int64_t attn_scratch_floats(const fa_problem *p, int64_t hb)
{
    const int64_t dp = padded_dim(p);
    return 2 * ROW_BLOCK * dp + 2 * ROW_BLOCK * KV_BLOCK + 2 * hb * KV_BLOCK * dp + 2 * ROW_BLOCK;
}

/* d elements of dtype dt at base + off widened into dst, zero up to dp; the dtype switch outside
 * the loops so that each one vectorises. */
FA_VINLINE void widen_row(fa_dtype dt, const void *base, int64_t off, int64_t d, int64_t dp, float *dst)
{
    if (dt == FA_DTYPE_F32) {
        memcpy(dst, (const float *)base + off, sizeof(float) * (size_t)d);
    } else if (dt == FA_DTYPE_BF16) {
        const uint16_t *x = (const uint16_t *)base + off;
        for (int64_t c = 0; c < d; ++c) {
            uint32_t u = (uint32_t)x[c] << 16;
            memcpy(&dst[c], &u, sizeof u);
        }
    } else {
        const uint16_t *x = (const uint16_t *)base + off;
        for (int64_t c = 0; c < d; ++c)
            dst[c] = fa_half_to_float(x[c]);
    }
    for (int64_t c = d; c < dp; ++c)
        dst[c] = 0.0f;
}

FA_VINLINE float hsum8(v8f a)
{
    float t[VEC];
    store8(t, a);
    return ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));
}

/* s[r * KV_BLOCK + j] = q_r . k_j for nr rows and nk keys, dp channels (a multiple of VEC); four
 * rows at a time share each key's loads and keep four independent sums in flight. */
FA_VINLINE void scores(const float *q, const float *kt, int64_t nr, int64_t nk, int64_t dp, float *s)
{
    int64_t r = 0;
    for (; r + 4 <= nr; r += 4)
        for (int64_t j = 0; j < nk; ++j) {
            const float *k = kt + j * dp;
            v8f a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
            for (int64_t c = 0; c < dp; c += VEC) {
                const v8f kv = load8(k + c);
                a0 += load8(q + r * dp + c) * kv;
                a1 += load8(q + (r + 1) * dp + c) * kv;
                a2 += load8(q + (r + 2) * dp + c) * kv;
                a3 += load8(q + (r + 3) * dp + c) * kv;
            }
            s[r * KV_BLOCK + j] = hsum8(a0);
            s[(r + 1) * KV_BLOCK + j] = hsum8(a1);
            s[(r + 2) * KV_BLOCK + j] = hsum8(a2);
            s[(r + 3) * KV_BLOCK + j] = hsum8(a3);
        }
    for (; r < nr; ++r)
        for (int64_t j = 0; j < nk; ++j) {
            const float *k = kt + j * dp;
            v8f a0 = {0};
            for (int64_t c = 0; c < dp; c += VEC)
                a0 += load8(q + r * dp + c) * load8(k + c);
            s[r * KV_BLOCK + j] = hsum8(a0);
        }
}

/* acc rows 0..3 (dp floats apart) += sum over the block's keys j of e[row][j] v_j; each 8-channel
 * slice of the four rows stays in registers through the block */
FA_VINLINE void pv4(float *acc, const float *e, const float *vt, int64_t nk, int64_t dp)
{
    for (int64_t c = 0; c < dp; c += VEC) {
        v8f a0 = load8(acc + c), a1 = load8(acc + dp + c), a2 = load8(acc + 2 * dp + c), a3 = load8(acc + 3 * dp + c);
        for (int64_t j = 0; j < nk; ++j) {
            const v8f v = load8(vt + j * dp + c);
            a0 += e[j] * v;
            a1 += e[KV_BLOCK + j] * v;
            a2 += e[2 * KV_BLOCK + j] * v;
            a3 += e[3 * KV_BLOCK + j] * v;
        }
        store8(acc + c, a0);
        store8(acc + dp + c, a1);
        store8(acc + 2 * dp + c, a2);
        store8(acc + 3 * dp + c, a3);
    }
}

FA_MULTIVERSION
static void attn_task(void *argp, int64_t task, float *scratch)
{
    const attn_ctx *ac = (const attn_ctx *)argp;
    const fa_kv_problem *kp = ac->kp;
    const fa_problem *p = &kp->p;
    const int64_t d = p->d, dv = p->d_v, dp = padded_dim(p), Sn = p->seqlen_q;
    const int64_t gr = p->group * Sn; /* rows of one kv head */
    const int64_t rb = task % ac->row_blocks, split = task / ac->row_blocks % ac->splits;
    const int64_t rest = task / ac->row_blocks / ac->splits, hblk = rest % ac->head_blocks, b = rest / ac->head_blocks;
    const int64_t hk0 = hblk * ac->hb, nh = p->heads_kv - hk0 < ac->hb ? p->heads_kv - hk0 : ac->hb;
    /* the task's rows: global rows base .. base + nr (global row R: kv head R / gr, query head
     * R / Sn, token R % Sn) */
    const int64_t base = hk0 * gr + rb * ROW_BLOCK;
    const int64_t nr = ac->hb > 1 ? nh * gr : (gr - rb * ROW_BLOCK < ROW_BLOCK ? gr - rb * ROW_BLOCK : ROW_BLOCK);
    float *q = scratch, *acc = q + ROW_BLOCK * dp, *s = acc + ROW_BLOCK * dp, *kt = s + ROW_BLOCK * KV_BLOCK;
    float *vt = kt + ac->hb * KV_BLOCK * dp, *ex = vt + ac->hb * KV_BLOCK * dp, *rowm = ex + ROW_BLOCK * KV_BLOCK;
    float *rowl = rowm + ROW_BLOCK;
    /* direct: the block's key and value rows of each of the task's kv heads (KV_BLOCK apart), in
     * the scratch the widening path uses for the rows themselves */
    const void **krows = (const void **)(void *)kt, **vrows = (const void **)(void *)vt;

    /* key j of the sequence is its cache position pad + j (cache_leftpad); rotary counts positions */
    const int64_t cached = cached_len(kp, b), pad = fa_kv_leftpad(kp, b), sk = cached - pad + kp->seqlen_knew;
    const int advance = p->causal || p->window_left >= 0 || p->window_right >= 0;
    const fa_mask m = fa_mask_make(Sn, sk, p->causal, p->window_left, p->window_right);
    /* this split's keys: an even share, in whole key blocks */
    const int64_t per = ((sk + ac->splits - 1) / ac->splits + KV_BLOCK - 1) / KV_BLOCK * KV_BLOCK;
    const int64_t k_lo = split * per < sk ? split * per : sk, k_hi = k_lo + per < sk ? k_lo + per : sk;

    /* the rows rotated, rounded, scaled */
    int64_t lo[ROW_BLOCK], hi[ROW_BLOCK], row_lo = INT64_MAX, row_hi = 0;
    fa_score_mod_state mod[ROW_BLOCK];
    const fa_score_mod_factors f = fa_score_mod_prepare(p->mod, 1.0f);
    const int modded = fa_score_mod_factors_active(f);
    for (int64_t r = 0; r < nr; ++r) {
        const int64_t hq = (base + r) / Sn, i = (base + r) % Sn;
        float *qr = q + r * dp;
        widen_row(p->dtype, p->q.data, b * p->q.sb + i * p->q.ss + hq * p->q.sh, d, dp, qr);
        if (kp->rotary) {
            rotate(kp, advance ? cached + i : cached, qr);
            for (int64_t c = 0; c < kp->rotary_dim; ++c)
                qr[c] = round_to(p->dtype, qr[c]);
        }
        for (int64_t c = 0; c < d; ++c)
            qr[c] *= p->scale;
        if (ac->direct)
            kv_to_load_order(p->dtype, qr, d);
        fa_mask_row_range(&m, i, &lo[r], &hi[r]);
        row_lo = lo[r] < row_lo ? lo[r] : row_lo;
        row_hi = hi[r] > row_hi ? hi[r] : row_hi;
        if (modded)
            mod[r] = fa_score_mod_begin(f, p->alibi_slopes ? p->alibi_slopes[fa_alibi_slope_index(f, b, hq)] : 0.0f,
                                        sk - Sn);
        rowm[r] = -INFINITY;
        rowl[r] = 0.0f;
    }
    memset(acc, 0, sizeof(float) * (size_t)(nr * dp));

    /* only the key blocks some row sees: from the block holding row_lo to row_hi */
    const int64_t first = row_lo > k_lo ? k_lo + (row_lo - k_lo) / KV_BLOCK * KV_BLOCK : k_lo;
    const int64_t last = row_hi < k_hi ? row_hi : k_hi;
    for (int64_t k0 = first; k0 < last; k0 += KV_BLOCK) {
        const int64_t nk = k_hi - k0 < KV_BLOCK ? k_hi - k0 : KV_BLOCK;
        const int64_t ahead = k0 + 2 * KV_BLOCK, ahead_end = ahead + nk < last ? ahead + nk : last;
        if (ac->direct) {
            /* each kv head's rows against its keys in place, DIRECT_CHUNK keys of every head at a
             * time: the task's heads of a token lie side by side, so memory is read in order */
            for (int64_t h = 0; h < nh; ++h)
                gather_rows(kp, &kp->k_cache, b, pad + k0, nk, hk0 + h, krows + h * KV_BLOCK);
            for (int64_t j0 = 0; j0 < nk; j0 += DIRECT_CHUNK)
                for (int64_t rs = 0; rs < nr;) {
                    const int64_t h = (base + rs) / gr - hk0, seg_end = (h + hk0 + 1) * gr - base;
                    const int64_t re = seg_end < nr ? seg_end : nr;
                    direct_scores(p->dtype, q + rs * dp, dp, krows + h * KV_BLOCK + j0, re - rs,
                                  nk - j0 < DIRECT_CHUNK ? nk - j0 : DIRECT_CHUNK, d, s + rs * KV_BLOCK + j0);
                    rs = re;
                }
        } else {
            for (int64_t h = 0; h < nh; ++h) /* the rows two blocks ahead on their way to L2 */
                prefetch_rows(kp, b, pad + ahead, pad + ahead_end, hk0 + h);
            for (int64_t j = 0; j < nk; ++j)
                for (int64_t h = 0; h < nh; ++h) {
                    widen_row(p->dtype, kp->k_cache.data, cache_offset(kp, &kp->k_cache, b, pad + k0 + j, hk0 + h),
                              d, dp, kt + (h * KV_BLOCK + j) * dp);
                    widen_row(p->dtype, kp->v_cache.data, cache_offset(kp, &kp->v_cache, b, pad + k0 + j, hk0 + h),
                              dv, dp, vt + (h * KV_BLOCK + j) * dp);
                }
            /* each kv head's rows against its keys */
            for (int64_t rs = 0; rs < nr;) {
                const int64_t h = (base + rs) / gr - hk0, seg_end = (h + hk0 + 1) * gr - base;
                const int64_t re = seg_end < nr ? seg_end : nr;
                scores(q + rs * dp, kt + h * KV_BLOCK * dp, re - rs, nk, dp, s + rs * KV_BLOCK);
                rs = re;
            }
        }
        /* per row: modifiers, mask, online softmax, the block's weights into ex (0 where masked) */
        int full[ROW_BLOCK];
        for (int64_t r = 0; r < nr; ++r) {
            float *sr = s + r * KV_BLOCK, *er = ex + r * KV_BLOCK, tmax = -INFINITY;
            const int64_t i = (base + r) % Sn;
            full[r] = lo[r] <= k0 && hi[r] >= k0 + nk;
            for (int64_t j = 0; j < nk; ++j) {
                const int64_t col = k0 + j;
                if (col < lo[r] || col >= hi[r]) {
                    sr[j] = -INFINITY;
                    continue;
                }
                if (modded)
                    sr[j] = fa_score_mod_apply(&mod[r], sr[j], fa_alibi_row(i, sk - Sn, col), NULL);
                tmax = sr[j] > tmax || isnan(sr[j]) ? sr[j] : tmax; /* NaN is kept: the row's result is NaN */
            }
            for (int64_t j = nk; j < fa_round_up(nk, VEC); ++j)
                sr[j] = -INFINITY;
            if (tmax == -INFINITY) { /* nothing visible in this block */
                full[r] = 0;
                memset(er, 0, sizeof(float) * KV_BLOCK);
                continue;
            }
            fa_softmax_row st = {rowm[r], rowl[r]};
            const float alpha = fa_softmax_update(&st, tmax);
            float *ar = acc + r * dp;
            if (alpha != 1.0f)
                for (int64_t c = 0; c < dp; c += VEC)
                    store8(ar + c, load8(ar + c) * alpha);
            /* 8 at a time; exactly 0 for masked scores and the padding */
            const float shift = fa_softmax_shift(st.m);
            v8f sum = {0};
            for (int64_t j = 0; j < nk; j += VEC) {
                const v8f e = fa_exp8(load8(sr + j) - shift);
                store8(er + j, e);
                sum += e;
            }
            st.l += hsum8(sum);
            rowm[r] = st.m;
            rowl[r] = st.l;
        }
        /* P V: rows whose keys in this block are all visible four at a time, accumulators in
         * registers over each 8-channel slice; the others key by key, skipping the keys they
         * cannot see (whatever V holds there) */
        if (ac->direct) {
            for (int64_t h = 0; h < nh; ++h)
                gather_rows(kp, &kp->v_cache, b, pad + k0, nk, hk0 + h, vrows + h * KV_BLOCK);
            for (int64_t j0 = 0; j0 < nk; j0 += DIRECT_CHUNK)
                for (int64_t rs = 0; rs < nr;) {
                    const int64_t h = (base + rs) / gr - hk0, seg_end = (h + hk0 + 1) * gr - base;
                    const int64_t re = seg_end < nr ? seg_end : nr;
                    direct_pv(p->dtype, acc + rs * dp, dp, s + rs * KV_BLOCK + j0, ex + rs * KV_BLOCK + j0, full + rs,
                              vrows + h * KV_BLOCK + j0, re - rs, nk - j0 < DIRECT_CHUNK ? nk - j0 : DIRECT_CHUNK, dv);
                    rs = re;
                }
            continue;
        }
        for (int64_t rs = 0; rs < nr;) {
            const int64_t h = (base + rs) / gr - hk0, seg_end = (h + hk0 + 1) * gr - base;
            const int64_t re = seg_end < nr ? seg_end : nr;
            const float *vh = vt + h * KV_BLOCK * dp;
            int64_t r = rs;
            for (; r + 4 <= re && full[r] && full[r + 1] && full[r + 2] && full[r + 3]; r += 4)
                pv4(acc + r * dp, ex + r * KV_BLOCK, vh, nk, dp);
            for (; r < re; ++r) {
                const float *sr = s + r * KV_BLOCK, *er = ex + r * KV_BLOCK;
                float *ar = acc + r * dp;
                for (int64_t j = 0; j < nk; ++j) {
                    if (sr[j] == -INFINITY)
                        continue;
                    const float *vr = vh + j * dp;
                    for (int64_t c = 0; c < dp; c += VEC)
                        store8(ar + c, load8(ar + c) + er[j] * load8(vr + c));
                }
            }
            rs = re;
        }
    }

    for (int64_t r = 0; r < nr; ++r) {
        const int64_t hq = (base + r) / Sn, i = (base + r) % Sn;
        const fa_softmax_row st = {rowm[r], rowl[r]};
        float inv = fa_softmax_inv_sum(st), lse = fa_softmax_lse(st);
        float *ar = acc + r * dp;
        if (ac->direct)
            kv_from_load_order(p->dtype, ar, dv);
        if (ac->splits > 1) { /* the sink joins once, at the merge */
            float *dst = ac->partial + (((b * p->heads_q + hq) * Sn + i) * ac->splits + split) * (dv + 1);
            for (int64_t c = 0; c < dv; ++c)
                dst[c] = fa_row_output(ar[c], inv);
            dst[dv] = lse;
            continue;
        }
        if (p->sink) { /* core/sink.h */
            const float lse0 = lse;
            lse = fa_sink_lse(lse0, p->sink[hq]);
            inv *= fa_sink_factor(lse0, lse);
        }
        const int64_t off = b * p->o.sb + i * p->o.ss + hq * p->o.sh;
        for (int64_t c = 0; c < dv; ++c)
            fa_store_elem(p->out_dtype, p->o.data, off + c, fa_row_output(ar[c], inv));
        if (p->has_lse)
            ((float *)p->lse.data)[b * p->lse.sb + hq * p->lse.sh + i * p->lse.ss] = lse;
    }
}

/* ------------------------------------------------------------------ phase 3: merge */

static void merge_task(void *argp, int64_t task, float *scratch)
{
    const attn_ctx *ac = (const attn_ctx *)argp;
    const fa_problem *p = &ac->kp->p;
    const int64_t d = p->d_v, Sn = p->seqlen_q;
    const int64_t i = task % Sn, hq = task / Sn % p->heads_q, b = task / Sn / p->heads_q;
    const float *part = ac->partial + task * ac->splits * (d + 1);
    float lse = part[d];
    memcpy(scratch, part, sizeof(float) * (size_t)d);
    for (int64_t sp = 1; sp < ac->splits; ++sp)
        lse = fa_softmax_merge(lse, scratch, part[sp * (d + 1) + d], part + sp * (d + 1), scratch, d);
    float factor = 1.0f;
    if (p->sink) { /* core/sink.h, once per row after the splits */
        const float lse0 = lse;
        lse = fa_sink_lse(lse0, p->sink[hq]);
        factor = fa_sink_factor(lse0, lse);
    }
    const int64_t off = b * p->o.sb + i * p->o.ss + hq * p->o.sh;
    for (int64_t c = 0; c < d; ++c)
        fa_store_elem(p->out_dtype, p->o.data, off + c, fa_row_output(scratch[c], factor));
    if (p->has_lse)
        ((float *)p->lse.data)[b * p->lse.sb + hq * p->lse.sh + i * p->lse.ss] = lse;
}

/* Splits of the keys: the caller's (at most one per key block), else enough tasks (units of
 * sequence and rows, times splits) to give every thread two, with at least 256 keys per split. */
static int64_t choose_splits(const fa_kv_problem *kp, int threads, int64_t units)
{
    const int64_t blocks = (kp->p.seqlen_k + KV_BLOCK - 1) / KV_BLOCK; /* more splits would be empty */
    if (kp->num_splits > 0)
        return kp->num_splits < blocks ? kp->num_splits : blocks > 1 ? blocks : 1;
    if (units < 1 || units >= threads || kp->p.seqlen_k <= 256) /* no query row: nothing to split */
        return 1;
    int64_t want = (2 * (int64_t)threads + units - 1) / units, most = (kp->p.seqlen_k + 255) / 256;
    return want < most ? want : most;
}

fa_status fa_cpu_forward_kvcache(fa_context *ctx, const fa_kv_problem *kp)
{
    const fa_problem *p = &kp->p;
    const int threads = fa_cpu_threads(ctx);
    if (p->batch == 0)
        return FA_SUCCESS;
    /* everything is allocated before the cache is written: a failure leaves every output as it was */
    const int64_t gr = p->group * p->seqlen_q; /* rows of one kv head */
    attn_ctx ac = {kp, 1, 1, p->heads_kv, 1, 0, NULL};
    ac.direct = gr <= DIRECT_ROWS && p->d % (2 * VEC) == 0 && p->d_v % (2 * VEC) == 0;
    if (gr > 0 && gr <= ROW_BLOCK) {
        ac.hb = ROW_BLOCK / gr < p->heads_kv ? ROW_BLOCK / gr : p->heads_kv;
        ac.head_blocks = (p->heads_kv + ac.hb - 1) / ac.hb;
    } else {
        ac.row_blocks = (gr + ROW_BLOCK - 1) / ROW_BLOCK;
    }
    int64_t per_worker = attn_scratch_floats(p, ac.hb), scratch_floats, units, tasks, pf = 0;
    if (!fa_mul_ok(per_worker, threads, &scratch_floats) || !fa_mul_ok(p->batch, ac.head_blocks, &units) ||
        !fa_mul_ok(units, ac.row_blocks, &units))
        return FA_ERROR(ctx, FA_ERR_OVERFLOW, "kv cache: the task count overflows 64 bits");
    ac.splits = choose_splits(kp, threads, units);
    if (!fa_mul_ok(units, ac.splits, &tasks))
        return FA_ERROR(ctx, FA_ERR_OVERFLOW, "kv cache: the task count overflows 64 bits");
    if (ac.splits > 1 && p->seqlen_q > 0 &&
        (!fa_mul_ok(p->total_q, p->heads_q, &pf) || !fa_mul_ok(pf, ac.splits, &pf) || !fa_mul_ok(pf, p->d_v + 1, &pf) ||
         (uint64_t)pf > (uint64_t)(SIZE_MAX / sizeof(float))))
        return FA_ERROR(ctx, FA_ERR_OVERFLOW, "kv cache: the split partials' size overflows");
    float *scratch = malloc(sizeof(float) * (size_t)scratch_floats);
    if (pf > 0)
        ac.partial = malloc(sizeof(float) * (size_t)pf);
    if (!scratch || (pf > 0 && !ac.partial)) {
        free(scratch);
        free(ac.partial);
        return FA_ERROR(ctx, FA_ERR_OUT_OF_MEMORY, "kv cache: cannot allocate the workers' scratch and %lld floats of "
                        "split partials", (long long)pf);
    }
    if (kp->has_new && kp->seqlen_knew > 0)
        fa_parallel_for(threads, p->batch * kp->seqlen_knew, append_task, (void *)kp, scratch, per_worker);
    if (p->seqlen_q > 0) {
        fa_parallel_for(threads, tasks, attn_task, &ac, scratch, per_worker);
        if (ac.splits > 1)
            fa_parallel_for(threads, p->total_q * p->heads_q, merge_task, &ac, scratch, per_worker);
    }
    free(ac.partial);
    free(scratch);
    return FA_SUCCESS;
}
