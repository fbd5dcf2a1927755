/* reference.c: the float64 oracle (S and P materialised per (batch, head), every product and sum
 * in double) and the naive same-precision baseline (fp32 arithmetic with the rounding a plain
 * implementation in the input dtype incurs). Tests measure kernels against the first and take
 * their tolerance from the second's error. Clarity is the point; the one concession to speed is
 * that each (sequence, head)'s rows are widened to double once (head_rows), not per product, since
 * the conformance suites spend most of their time here.
 *
 * The learnable sink is written out here on its own, not with core/sink.h (which the kernels use):
 * the reference adds exp(sink_h) to the row's sum of exponentials before it normalises (one more
 * term of the softmax that carries no value), and forms dsink_h = -sum_i exp(sink_h - LSE_i) D_i
 * with D_i = sum_j P_ij dP_ij, so that a fault in that header shows up as a difference. Q, K, dQ,
 * dK have p->d columns; V, O, dO, dV have p->d_v. */
#include "reference.h"
#include "half.h"
#include "philox.h"
#include "softmax.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Counts n rows done and tells the caller, who decides what to show and how often. */
static void progress_rows(fa_ref_progress *progress, int64_t n)
{
    if (progress && progress->report) {
        progress->done += n;
        progress->report(progress->user, progress->done, progress->total);
    }
}

int64_t fa_ref_progress_units(const fa_problem *p)
{
    return 2 * p->heads_q * p->total_q;
}

double fa_view_get(const fa_view *v, fa_dtype dt, int64_t b, int64_t row, int64_t h, int64_t c)
{
    int64_t off = b * v->sb + row * v->ss + h * v->sh + c;
    switch (dt) {
    case FA_DTYPE_F32: return ((const float *)v->data)[off];
    case FA_DTYPE_F16: return fa_half_to_float(((const uint16_t *)v->data)[off]);
    case FA_DTYPE_BF16: return fa_bfloat_to_float(((const uint16_t *)v->data)[off]);
    }
    return NAN;
}

double fa_round_to(fa_dtype dt, double x)
{
    float f = (float)x;
    switch (dt) {
    case FA_DTYPE_F16: return fa_half_to_float(fa_float_to_half(f));
    case FA_DTYPE_BF16: return fa_bfloat_to_float(fa_float_to_bfloat(f));
    default: return f;
    }
}

/* Row of sequence b's local row i within the canonical [total, heads, d] outputs. */
static int64_t canon_row(const fa_problem *p, int64_t b, int64_t start, int64_t i, int is_q)
{
    if (p->varlen)
        return start + i;
    return b * (is_q ? p->seqlen_q : p->seqlen_k) + i;
}

/* Dropout factor of element (b, h, i, j): 0 if dropped, 1/(1-p) if kept, 1 without dropout. */
static double dropout_factor(const fa_problem *p, int64_t b, int64_t h, int64_t i, int64_t j)
{
    if (p->dropout_threshold == 0)
        return 1.0;
    return fa_dropout_keep(p->seed, p->offset, (uint64_t)b, (uint64_t)p->heads_q, (uint64_t)h, (uint64_t)i,
                           (uint64_t)j, p->dropout_threshold)
               ? (double)p->dropout_scale
               : 0.0;
}

/* Whether query i of a sequence of sq queries sees key j of sk keys: flashattn.h's rule written out
 * on its own, deliberately not with core/mask.h (which the kernels use), so that a fault in that
 * header shows up as a difference from this oracle. The rule is put as the signed distance of j from
 * i's bottom-right diagonal, dist = j - (i + sk - sq), which lies in (-sk, sq) for i, j inside the
 * sequence: comparing it with a window bound of any size (up to INT64_MAX) cannot overflow. */
static int element_visible(const fa_problem *p, int64_t sq, int64_t sk, int64_t h, int64_t i, int64_t j)
{
    if (i < 0 || i >= sq || j < 0 || j >= sk)
        return 0;
    int64_t dist = (j - sk) - (i - sq);
    if (p->causal && dist > 0)
        return 0;
    if (p->window_left >= 0 && dist < -p->window_left)
        return 0;
    if (p->window_right >= 0 && dist > p->window_right)
        return 0;
    return fa_problem_block_keep(p, h, i, j);
}

/* The score modifiers of query head h of sequence b on the scaled score v of element (i, j):
 * flashattn.h's definitions written out in double with tanh from libm, deliberately not with
 * core/score_mod.h (which the kernels use). *grad receives dS'/dS (1 without a softcap). */
static double modified_score(const fa_problem *p, int64_t b, int64_t h, int64_t sq, int64_t sk, int64_t i,
                             int64_t j, double v, double *grad)
{
    *grad = 1.0;
    if (p->mod.softcap > 0.0f) {
        double c = (double)p->mod.softcap, t = tanh(v / c);
        v = c * t;
        *grad = 1.0 - t * t;
    }
    if (p->alibi_slopes) {
        double slope = (double)p->alibi_slopes[b * p->mod.alibi_stride + h];
        double dist = (double)(j - sk) - (double)(i - sq);
        v -= slope * fabs(dist);
    }
    return v;
}

/* The same in fp32 arithmetic with libm's tanhf, for the naive same-precision baseline. */
static float modified_score_f(const fa_problem *p, int64_t b, int64_t h, int64_t sq, int64_t sk, int64_t i,
                              int64_t j, float v, float *grad)
{
    *grad = 1.0f;
    if (p->mod.softcap > 0.0f) {
        float t = tanhf(v / p->mod.softcap);
        v = p->mod.softcap * t;
        *grad = 1.0f - t * t;
    }
    if (p->alibi_slopes) {
        int64_t dist = (j - sk) - (i - sq);
        v -= p->alibi_slopes[b * p->mod.alibi_stride + h] * (float)(dist < 0 ? -dist : dist);
    }
    return v;
}

/* One (sequence, head)'s inputs widened to double (exact for fp32, fp16 and bf16), row-major: Q
 * (d columns) and dO (d_v) of query head h (sq rows), K (d) and V (d_v) of its KV head (sk rows). */
typedef struct head_rows {
    double *q, *dout, *k, *v;
} head_rows;

/* Per (b, h) scratch: the materialised matrices and the head's rows. */
typedef struct ref_scratch {
    double *s, *pm, *g; /* S, P and dS'/dS of the score modifiers, sq x sk */
    float *sf, *pf, *gf;
    head_rows x;
} ref_scratch;

static int scratch_alloc(const fa_problem *p, ref_scratch *sc, int single)
{
    memset(sc, 0, sizeof *sc);
    int64_t n = p->seqlen_q * p->seqlen_k;
    const int64_t dmax = p->d > p->d_v ? p->d : p->d_v;
    int64_t nq = p->seqlen_q * dmax, nk = p->seqlen_k * dmax;
    if (n < 1)
        n = 1;
    if (nq < 1)
        nq = 1;
    if (nk < 1)
        nk = 1;
    sc->x.q = malloc(sizeof(double) * (size_t)nq);
    sc->x.dout = malloc(sizeof(double) * (size_t)nq);
    sc->x.k = malloc(sizeof(double) * (size_t)nk);
    sc->x.v = malloc(sizeof(double) * (size_t)nk);
    if (!sc->x.q || !sc->x.dout || !sc->x.k || !sc->x.v)
        return 0;
    if (single) {
        sc->sf = malloc(sizeof(float) * (size_t)n);
        sc->pf = malloc(sizeof(float) * (size_t)n);
        sc->gf = malloc(sizeof(float) * (size_t)n);
        return sc->sf && sc->pf && sc->gf;
    }
    sc->s = malloc(sizeof(double) * (size_t)n);
    sc->pm = malloc(sizeof(double) * (size_t)n);
    sc->g = malloc(sizeof(double) * (size_t)n);
    return sc->s && sc->pm && sc->g;
}

static void scratch_free(ref_scratch *sc)
{
    free(sc->s);
    free(sc->pm);
    free(sc->g);
    free(sc->sf);
    free(sc->pf);
    free(sc->gf);
    free(sc->x.q);
    free(sc->x.dout);
    free(sc->x.k);
    free(sc->x.v);
}

/* rows [row0, row0 + n) of head h of view v in batch b, widened to double, n x width */
static void widen_rows(const fa_problem *p, const fa_view *v, int64_t width, int64_t b, int64_t row0, int64_t n,
                       int64_t h, double *out)
{
    for (int64_t i = 0; i < n; ++i)
        for (int64_t c = 0; c < width; ++c)
            out[i * width + c] = fa_view_get(v, p->dtype, b, row0 + i, h, c);
}

/* sc->x for query head h of sequence b (sq queries from row q0, sk keys from row k0); dO only for
 * the backward (with_dout: a forward's problem may have no dO view) */
static void load_head(const fa_problem *p, ref_scratch *sc, int64_t b, int64_t h, int64_t sq, int64_t sk, int64_t q0,
                      int64_t k0, int with_dout)
{
    int64_t hk = h / p->group;
    widen_rows(p, &p->q, p->d, b, q0, sq, h, sc->x.q);
    widen_rows(p, &p->k, p->d, b, k0, sk, hk, sc->x.k);
    widen_rows(p, &p->v, p->d_v, b, k0, sk, hk, sc->x.v);
    if (with_dout)
        widen_rows(p, &p->dout, p->d_v, b, q0, sq, h, sc->x.dout);
}

/* Query head h's sink logit, or -inf (no sink: exp of it adds nothing). */
static double sink_of(const fa_problem *p, int64_t h)
{
    return p->sink ? (double)p->sink[h] : -INFINITY;
}

/* P (without dropout) of (b, h) in double; row LSE into lse_row (may be NULL); g receives the
 * score modifiers' dS'/dS per element. With a sink, exp(sink_h) joins each row's sum: the row's
 * probabilities add up to 1 - exp(sink_h - LSE_i), and a row that sees no key has P = 0 and
 * LSE = sink_h. */
static void ref_probs(const fa_problem *p, int64_t b, int64_t h, int64_t sq, int64_t sk, const head_rows *x,
                      double *s, double *pm, double *g, double *lse_row, fa_ref_progress *progress)
{
    const int64_t d = p->d;
    for (int64_t i = 0; i < sq; ++i) {
        double mx = -INFINITY;
        for (int64_t j = 0; j < sk; ++j) {
            double v = -INFINITY;
            g[i * sk + j] = 0.0;
            if (element_visible(p, sq, sk, h, i, j)) {
                double dot = 0.0;
                for (int64_t c = 0; c < d; ++c)
                    dot += x->q[i * d + c] * x->k[j * d + c];
                v = modified_score(p, b, h, sq, sk, i, j, (double)p->scale * dot, &g[i * sk + j]);
            }
            s[i * sk + j] = v;
            if (v > mx)
                mx = v;
        }
        const double sink = sink_of(p, h);
        if (sink > mx)
            mx = sink;
        double sum = mx == -INFINITY ? 0.0 : exp(sink - mx);
        for (int64_t j = 0; j < sk; ++j) {
            double e = mx == -INFINITY ? 0.0 : exp(s[i * sk + j] - mx);
            pm[i * sk + j] = e;
            sum += e;
        }
        for (int64_t j = 0; j < sk; ++j)
            pm[i * sk + j] = sum > 0.0 ? pm[i * sk + j] / sum : 0.0;
        if (lse_row)
            lse_row[i] = sum > 0.0 ? mx + log(sum) : -INFINITY;
        progress_rows(progress, 1);
    }
}

fa_status fa_ref_forward_progress(const fa_problem *p, double *o, double *lse, fa_ref_progress *progress)
{
    ref_scratch sc;
    if (!scratch_alloc(p, &sc, 0)) {
        scratch_free(&sc);
        return FA_ERR_OUT_OF_MEMORY;
    }
    double *lse_row = malloc(sizeof(double) * (size_t)(p->seqlen_q > 0 ? p->seqlen_q : 1));
    if (!lse_row) {
        scratch_free(&sc);
        return FA_ERR_OUT_OF_MEMORY;
    }
    for (int64_t b = 0; b < p->batch; ++b) {
        int64_t sq, sk, q0, k0;
        fa_problem_seq(p, b, &sq, &sk, &q0, &k0);
        for (int64_t h = 0; h < p->heads_q; ++h) {
            load_head(p, &sc, b, h, sq, sk, q0, k0, 0);
            ref_probs(p, b, h, sq, sk, &sc.x, sc.s, sc.pm, sc.g, lse_row, progress);
            for (int64_t i = 0; i < sq; ++i) {
                int64_t r = canon_row(p, b, q0, i, 1);
                double *orow = o + (r * p->heads_q + h) * p->d_v;
                for (int64_t c = 0; c < p->d_v; ++c)
                    orow[c] = 0.0;
                for (int64_t j = 0; j < sk; ++j) {
                    double w = sc.pm[i * sk + j] * dropout_factor(p, b, h, i, j);
                    if (w == 0.0)
                        continue;
                    for (int64_t c = 0; c < p->d_v; ++c)
                        orow[c] += w * sc.x.v[j * p->d_v + c];
                }
                if (lse)
                    lse[h * p->total_q + r] = lse_row[i];
                progress_rows(progress, 1);
            }
        }
    }
    free(lse_row);
    scratch_free(&sc);
    return FA_SUCCESS;
}

static void zero(double *x, int64_t n)
{
    if (n > 0)
        memset(x, 0, sizeof(double) * (size_t)n);
}

fa_status fa_ref_backward_progress(const fa_problem *p, double *dq, double *dk, double *dv, double *dsink,
                                   fa_ref_progress *progress)
{
    ref_scratch sc;
    if (!scratch_alloc(p, &sc, 0)) {
        scratch_free(&sc);
        return FA_ERR_OUT_OF_MEMORY;
    }
    double *lse_row = malloc(sizeof(double) * (size_t)(p->seqlen_q > 0 ? p->seqlen_q : 1));
    if (!lse_row) {
        scratch_free(&sc);
        return FA_ERR_OUT_OF_MEMORY;
    }
    zero(dq, p->total_q * p->heads_q * p->d);
    zero(dk, p->total_k * p->heads_kv * p->d);
    zero(dv, p->total_k * p->heads_kv * p->d_v);
    if (dsink)
        zero(dsink, p->heads_q);
    for (int64_t b = 0; b < p->batch; ++b) {
        int64_t sq, sk, q0, k0;
        fa_problem_seq(p, b, &sq, &sk, &q0, &k0);
        for (int64_t h = 0; h < p->heads_q; ++h) {
            int64_t hk = h / p->group;
            load_head(p, &sc, b, h, sq, sk, q0, k0, 1);
            const double *qr = sc.x.q, *dor = sc.x.dout, *kr = sc.x.k, *vr = sc.x.v;
            const int64_t d = p->d, dvw = p->d_v;
            ref_probs(p, b, h, sq, sk, &sc.x, sc.s, sc.pm, sc.g, lse_row, progress);
            for (int64_t i = 0; i < sq; ++i) {
                int64_t r = canon_row(p, b, q0, i, 1);
                /* dP_ij = z_ij * (dO_i . V_j); D_i = sum_j P_ij dP_ij; dS = P (dP - D) */
                double *dprow = sc.s + i * sk; /* S no longer needed: reuse its row for dP */
                double dsum = 0.0;
                for (int64_t j = 0; j < sk; ++j) {
                    double z = dropout_factor(p, b, h, i, j);
                    double pij = sc.pm[i * sk + j];
                    double dot = 0.0;
                    if (pij != 0.0 && z != 0.0)
                        for (int64_t c = 0; c < dvw; ++c)
                            dot += dor[i * dvw + c] * vr[j * dvw + c];
                    dprow[j] = z * dot;
                    dsum += pij * dprow[j];
                    /* dV_j += P_ij z_ij dO_i */
                    double w = pij * z;
                    if (w != 0.0) {
                        int64_t rk = canon_row(p, b, k0, j, 0);
                        double *dvrow = dv + (rk * p->heads_kv + hk) * dvw;
                        for (int64_t c = 0; c < dvw; ++c)
                            dvrow[c] += w * dor[i * dvw + c];
                    }
                }
                /* the sink's probability exp(sink_h - LSE_i) has no value and so no dP: its
                 * softmax gradient is -exp(sink_h - LSE_i) D_i (0 for a row with no key, D_i = 0) */
                if (dsink && p->sink && lse_row[i] > -INFINITY)
                    dsink[h] -= exp(sink_of(p, h) - lse_row[i]) * dsum;
                double *dqrow = dq + (r * p->heads_q + h) * p->d;
                for (int64_t j = 0; j < sk; ++j) {
                    double ds = sc.pm[i * sk + j] * (dprow[j] - dsum) * sc.g[i * sk + j] * (double)p->scale;
                    if (ds == 0.0)
                        continue;
                    int64_t rk = canon_row(p, b, k0, j, 0);
                    double *dkrow = dk + (rk * p->heads_kv + hk) * p->d;
                    for (int64_t c = 0; c < d; ++c) {
                        dqrow[c] += ds * kr[j * d + c];
                        dkrow[c] += ds * qr[i * d + c];
                    }
                }
                progress_rows(progress, 1);
            }
        }
    }
    free(lse_row);
    scratch_free(&sc);
    return FA_SUCCESS;
}

/* ------------------------------------------------------------------ naive same precision */

/* P of (b, h) in fp32 (softmax in fp32, scores accumulated in fp32, the sink's exponential added to
 * the row's sum) and row LSE. */
static void naive_probs(const fa_problem *p, int64_t b, int64_t h, int64_t sq, int64_t sk, const head_rows *x,
                        float *s, float *pm, float *g, double *lse_row, fa_ref_progress *progress)
{
    const int64_t d = p->d;
    for (int64_t i = 0; i < sq; ++i) {
        float mx = -INFINITY;
        for (int64_t j = 0; j < sk; ++j) {
            float v = -INFINITY;
            g[i * sk + j] = 0.0f;
            if (element_visible(p, sq, sk, h, i, j)) {
                float dot = 0.0f;
                for (int64_t c = 0; c < d; ++c)
                    dot += (float)x->q[i * d + c] * (float)x->k[j * d + c];
                v = modified_score_f(p, b, h, sq, sk, i, j, p->scale * dot, &g[i * sk + j]);
            }
            s[i * sk + j] = v;
            if (v > mx)
                mx = v;
        }
        const float sink = p->sink ? p->sink[h] : -INFINITY;
        if (sink > mx)
            mx = sink;
        float sum = mx == -INFINITY ? 0.0f : expf(sink - mx);
        for (int64_t j = 0; j < sk; ++j) {
            float e = mx == -INFINITY ? 0.0f : expf(s[i * sk + j] - mx);
            pm[i * sk + j] = e;
            sum += e;
        }
        for (int64_t j = 0; j < sk; ++j)
            pm[i * sk + j] = sum > 0.0f ? pm[i * sk + j] / sum : 0.0f;
        if (lse_row)
            lse_row[i] = sum > 0.0f ? (double)(mx + logf(sum)) : -INFINITY;
        progress_rows(progress, 1);
    }
}

fa_status fa_naive_forward_progress(const fa_problem *p, double *o, double *lse, fa_ref_progress *progress)
{
    ref_scratch sc;
    if (!scratch_alloc(p, &sc, 1)) {
        scratch_free(&sc);
        return FA_ERR_OUT_OF_MEMORY;
    }
    double *lse_row = malloc(sizeof(double) * (size_t)(p->seqlen_q > 0 ? p->seqlen_q : 1));
    float *acc = malloc(sizeof(float) * (size_t)p->d_v);
    if (!lse_row || !acc) {
        free(lse_row);
        free(acc);
        scratch_free(&sc);
        return FA_ERR_OUT_OF_MEMORY;
    }
    for (int64_t b = 0; b < p->batch; ++b) {
        int64_t sq, sk, q0, k0;
        fa_problem_seq(p, b, &sq, &sk, &q0, &k0);
        for (int64_t h = 0; h < p->heads_q; ++h) {
            load_head(p, &sc, b, h, sq, sk, q0, k0, 0);
            naive_probs(p, b, h, sq, sk, &sc.x, sc.sf, sc.pf, sc.gf, lse_row, progress);
            for (int64_t i = 0; i < sq; ++i) {
                int64_t r = canon_row(p, b, q0, i, 1);
                for (int64_t c = 0; c < p->d_v; ++c)
                    acc[c] = 0.0f;
                for (int64_t j = 0; j < sk; ++j) {
                    float w = (float)fa_round_to(p->dtype, sc.pf[i * sk + j] * (float)dropout_factor(p, b, h, i, j));
                    if (w == 0.0f)
                        continue;
                    for (int64_t c = 0; c < p->d_v; ++c)
                        acc[c] += w * (float)sc.x.v[j * p->d_v + c];
                }
                for (int64_t c = 0; c < p->d_v; ++c)
                    o[(r * p->heads_q + h) * p->d_v + c] = fa_round_to(p->dtype, acc[c]);
                if (lse)
                    lse[h * p->total_q + r] = lse_row[i];
                progress_rows(progress, 1);
            }
        }
    }
    free(lse_row);
    free(acc);
    scratch_free(&sc);
    return FA_SUCCESS;
}

fa_status fa_naive_backward_progress(const fa_problem *p, double *dq, double *dk, double *dv, double *dsink,
                                     fa_ref_progress *progress)
{
    ref_scratch sc;
    if (!scratch_alloc(p, &sc, 1)) {
        scratch_free(&sc);
        return FA_ERR_OUT_OF_MEMORY;
    }
    int64_t nq = p->total_q * p->heads_q * p->d, nk = p->total_k * p->heads_kv * p->d;
    int64_t nv = p->total_k * p->heads_kv * p->d_v;
    /* fp32 accumulators, rounded to the dtype at the end like a plain matmul output; dsink stays
     * fp32 (its output is fp32) */
    float *aq = calloc((size_t)(nq > 0 ? nq : 1), sizeof(float));
    float *ak = calloc((size_t)(nk > 0 ? nk : 1), sizeof(float));
    float *av = calloc((size_t)(nv > 0 ? nv : 1), sizeof(float));
    float *as = calloc((size_t)p->heads_q, sizeof(float));
    double *lse_row = malloc(sizeof(double) * (size_t)(p->seqlen_q > 0 ? p->seqlen_q : 1));
    if (!aq || !ak || !av || !as || !lse_row) {
        free(aq);
        free(ak);
        free(av);
        free(as);
        free(lse_row);
        scratch_free(&sc);
        return FA_ERR_OUT_OF_MEMORY;
    }
    for (int64_t b = 0; b < p->batch; ++b) {
        int64_t sq, sk, q0, k0;
        fa_problem_seq(p, b, &sq, &sk, &q0, &k0);
        for (int64_t h = 0; h < p->heads_q; ++h) {
            int64_t hk = h / p->group;
            load_head(p, &sc, b, h, sq, sk, q0, k0, 1);
            const double *qr = sc.x.q, *dor = sc.x.dout, *kr = sc.x.k, *vr = sc.x.v;
            const int64_t d = p->d, dvw = p->d_v;
            naive_probs(p, b, h, sq, sk, &sc.x, sc.sf, sc.pf, sc.gf, lse_row, progress);
            for (int64_t i = 0; i < sq; ++i) {
                int64_t r = canon_row(p, b, q0, i, 1);
                float *dprow = sc.sf + i * sk;
                float dsum = 0.0f;
                for (int64_t j = 0; j < sk; ++j) {
                    float z = (float)dropout_factor(p, b, h, i, j);
                    float pij = sc.pf[i * sk + j];
                    float dot = 0.0f;
                    for (int64_t c = 0; c < dvw; ++c)
                        dot += (float)dor[i * dvw + c] * (float)vr[j * dvw + c];
                    dprow[j] = (float)fa_round_to(p->dtype, dot) * z;
                    dsum += pij * dprow[j];
                    float w = (float)fa_round_to(p->dtype, pij * z);
                    if (w != 0.0f) {
                        int64_t rk = canon_row(p, b, k0, j, 0);
                        float *dvrow = av + (rk * p->heads_kv + hk) * dvw;
                        for (int64_t c = 0; c < dvw; ++c)
                            dvrow[c] += w * (float)dor[i * dvw + c];
                    }
                }
                /* dsink from D_i = dO_i . O_i with the O the backward is given (p->o): every
                 * implementation receives O rounded to the dtype, and dsink inherits that O's
                 * error whole (it is a sum of exp(sink - LSE_i) dO_i . O_i over the head's rows),
                 * which a D_i from P and dP alone would leave out */
                if (p->sink && lse_row[i] > -INFINITY) {
                    float d_row = 0.0f;
                    for (int64_t c = 0; c < dvw; ++c)
                        d_row += (float)dor[i * dvw + c] * (float)fa_view_get(&p->o, p->dtype, b, q0 + i, h, c);
                    as[h] -= expf(p->sink[h] - (float)lse_row[i]) * d_row;
                }
                float *dqrow = aq + (r * p->heads_q + h) * p->d;
                for (int64_t j = 0; j < sk; ++j) {
                    float ds = (float)fa_round_to(p->dtype, sc.pf[i * sk + j] * (dprow[j] - dsum) * sc.gf[i * sk + j]);
                    if (ds == 0.0f)
                        continue;
                    ds *= p->scale;
                    int64_t rk = canon_row(p, b, k0, j, 0);
                    float *dkrow = ak + (rk * p->heads_kv + hk) * p->d;
                    for (int64_t c = 0; c < d; ++c) {
                        dqrow[c] += ds * (float)kr[j * d + c];
                        dkrow[c] += ds * (float)qr[i * d + c];
                    }
                }
                progress_rows(progress, 1);
            }
        }
    }
    for (int64_t x = 0; x < nq; ++x)
        dq[x] = fa_round_to(p->dtype, aq[x]);
    for (int64_t x = 0; x < nk; ++x)
        dk[x] = fa_round_to(p->dtype, ak[x]);
    for (int64_t x = 0; x < nv; ++x)
        dv[x] = fa_round_to(p->dtype, av[x]);
    for (int64_t h = 0; dsink && h < p->heads_q; ++h)
        dsink[h] = as[h];
    free(aq);
    free(ak);
    free(av);
    free(as);
    free(lse_row);
    scratch_free(&sc);
    return FA_SUCCESS;
}

fa_status fa_ref_forward(const fa_problem *p, double *o, double *lse)
{
    return fa_ref_forward_progress(p, o, lse, NULL);
}

fa_status fa_ref_backward(const fa_problem *p, double *dq, double *dk, double *dv, double *dsink)
{
    return fa_ref_backward_progress(p, dq, dk, dv, dsink, NULL);
}

fa_status fa_naive_forward(const fa_problem *p, double *o, double *lse)
{
    return fa_naive_forward_progress(p, o, lse, NULL);
}

fa_status fa_naive_backward(const fa_problem *p, double *dq, double *dk, double *dv, double *dsink)
{
    return fa_naive_backward_progress(p, dq, dk, dv, dsink, NULL);
}
