/* test_reference_sink.c: the float64 reference (tests/support/reference.c) with a learnable sink
 * and a value head dim d_v other than d, checked on its own before it judges any kernel:
 * - its gradients dQ, dK, dV and dsink against central differences of L = sum(O * G) for a random
 *   G (the backward's dO), on a small GQA problem with d = 8, d_v = 5, causal with more queries
 *   than keys (so the first rows see no key) and without, dropout off and on;
 * - the sink's identities against a run without it: LSE = log(exp(LSE0) + exp(sink)),
 *   O = O0 exp(LSE0 - LSE), and a row that sees no key gets O = 0, LSE = sink, dQ = 0.
 * Every input is a multiple of 2^-12 below 1 in magnitude and the step is 2^-20, so x +- step is
 * exact in fp32 (the dtype the reference reads) and the difference quotient is computed from the
 * very inputs it names; in double its error is about 1e-9, far below the tolerance. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "reference.h"

enum { B = 2, SQ = 6, SK = 4, HQ = 2, HK = 1, D = 8, DV = 5 };
enum { NQ = B * SQ * HQ * D, NK = B * SK * HK * D, NV = B * SK * HK * DV, NO = B * SQ * HQ * DV, NL = B * HQ * SQ };

static float q[NQ], k[NK], v[NV], o[NO], dout[NO], lse[NL], dq[NQ], dk[NK], dv[NV], dsink_out[HQ];
static float sink[HQ];

static const double STEP = 0x1p-20;

static void fill(float *x, int n, uint64_t *s)
{
    for (int i = 0; i < n; ++i) {
        *s = *s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((int)((*s >> 33) % 4095) - 2047) * 0x1p-12f; /* (-0.5, 0.5), multiples of 2^-12 */
    }
}

typedef struct fd_problem {
    fa_fwd_args f;
    fa_bwd_args g;
    fa_problem pf, pb;
} fd_problem;

static void make_problem(fa_context *host, fd_problem *x, int causal, float dropout, int with_sink)
{
    const int64_t qs[4] = {B, SQ, HQ, D}, ks[4] = {B, SK, HK, D}, vs[4] = {B, SK, HK, DV}, os[4] = {B, SQ, HQ, DV},
                  ls[3] = {B, HQ, SQ}, ss[1] = {HQ};
    memset(x, 0, sizeof *x);
    x->f.q = fa_tensor_contiguous(q, FA_DTYPE_F32, 4, qs);
    x->f.k = fa_tensor_contiguous(k, FA_DTYPE_F32, 4, ks);
    x->f.v = fa_tensor_contiguous(v, FA_DTYPE_F32, 4, vs);
    x->f.o = fa_tensor_contiguous(o, FA_DTYPE_F32, 4, os);
    x->f.lse = fa_tensor_contiguous(lse, FA_DTYPE_F32, 3, ls);
    x->f.opts = fa_options_default();
    x->f.opts.causal = causal;
    x->f.opts.dropout_p = dropout;
    x->f.opts.dropout_seed = 11;
    x->f.opts.learnable_sink = with_sink ? sink : NULL;
    x->g = (fa_bwd_args){.q = x->f.q, .k = x->f.k, .v = x->f.v, .o = x->f.o, .lse = x->f.lse,
                         .dout = fa_tensor_contiguous(dout, FA_DTYPE_F32, 4, os),
                         .dq = fa_tensor_contiguous(dq, FA_DTYPE_F32, 4, qs),
                         .dk = fa_tensor_contiguous(dk, FA_DTYPE_F32, 4, ks),
                         .dv = fa_tensor_contiguous(dv, FA_DTYPE_F32, 4, vs), .opts = x->f.opts};
    if (with_sink)
        x->g.dsink = fa_tensor_contiguous(dsink_out, FA_DTYPE_F32, 1, ss);
    int32_t *cu = NULL;
    assert_int_equal(fa_validate_forward(host, &x->f, &x->pf, &cu), FA_SUCCESS);
    free(cu);
    cu = NULL;
    assert_int_equal(fa_validate_backward(host, &x->g, &x->pb, &cu), FA_SUCCESS);
    free(cu);
    assert_int_equal(x->pf.d_v, DV);
    assert_true(with_sink ? x->pf.sink == sink : x->pf.sink == NULL);
}

/* L = sum over O's elements of O * G (canonical [rows, heads, d_v] is the contiguous layout). */
static double loss(const fa_problem *pf)
{
    double ro[NO], rl[NL];
    assert_int_equal(fa_ref_forward(pf, ro, rl), FA_SUCCESS);
    double l = 0.0;
    for (int e = 0; e < NO; ++e)
        l += ro[e] * (double)dout[e];
    return l;
}

static void test_gradients_match_finite_differences(void **state)
{
    (void)state;
    fa_context *host = NULL;
    assert_int_equal(fa_context_create(&host, "cpu", 0), FA_SUCCESS);
    for (int variant = 0; variant < 4; ++variant) {
        const int causal = variant & 1;
        const float dropout = variant & 2 ? 0.3f : 0.0f;
        uint64_t s = 29 + (uint64_t)variant;
        fill(q, NQ, &s);
        fill(k, NK, &s);
        fill(v, NV, &s);
        fill(dout, NO, &s);
        for (int i = 0; i < NQ; ++i) /* scores of a few units: the sink competes with the keys */
            q[i] *= 4.0f;
        sink[0] = 0.75f;
        sink[1] = -1.25f;
        fd_problem x;
        make_problem(host, &x, causal, dropout, 1);
        double g_q[NQ], g_k[NK], g_v[NV], g_s[HQ];
        assert_int_equal(fa_ref_backward(&x.pb, g_q, g_k, g_v, g_s), FA_SUCCESS);
        float *wrt[4] = {q, k, v, sink};
        const double *an[4] = {g_q, g_k, g_v, g_s};
        const int n[4] = {NQ, NK, NV, HQ};
        static const char *const names[4] = {"dQ", "dK", "dV", "dsink"};
        double worst = 0.0;
        for (int w = 0; w < 4; ++w)
            for (int i = 0; i < n[w]; ++i) {
                const float keep = wrt[w][i];
                wrt[w][i] = (float)(keep + STEP);
                assert_true((double)wrt[w][i] == (double)keep + STEP);
                const double up = loss(&x.pf);
                wrt[w][i] = (float)(keep - STEP);
                assert_true((double)wrt[w][i] == (double)keep - STEP);
                const double down = loss(&x.pf);
                wrt[w][i] = keep;
                const double fd = (up - down) / (2.0 * STEP);
                const double err = fabs(fd - an[w][i]) / fmax(1.0, fabs(an[w][i]));
                if (err > 1e-6)
                    fail_msg("variant %d (causal %d, dropout %.1f): %s[%d] is %.12g, finite differences give %.12g",
                             variant, causal, (double)dropout, names[w], i, an[w][i], fd);
                worst = err > worst ? err : worst;
            }
        /* the sink's gradient is not trivially zero here: the test would pass a reference that
         * ignored it otherwise */
        assert_true(fabs(g_s[0]) > 1e-3 && fabs(g_s[1]) > 1e-3);
        print_message("           variant %d: worst relative |finite difference - analytic| = %.2e\n", variant, worst);
    }
    fa_context_destroy(host);
}

/* With and without the sink on the same inputs: the sink folds in as core/sink.h says, and the
 * first SQ - SK rows of a causal problem (no key) get O = 0, LSE = sink and dQ = 0. */
static void test_sink_identities(void **state)
{
    (void)state;
    fa_context *host = NULL;
    assert_int_equal(fa_context_create(&host, "cpu", 0), FA_SUCCESS);
    uint64_t s = 3;
    fill(q, NQ, &s);
    fill(k, NK, &s);
    fill(v, NV, &s);
    fill(dout, NO, &s);
    sink[0] = 8.0f; /* dominates every row */
    sink[1] = -0.5f;
    fd_problem with, without;
    make_problem(host, &with, 1, 0.0f, 1);
    make_problem(host, &without, 1, 0.0f, 0);
    double o1[NO], l1[NL], o0[NO], l0[NL];
    assert_int_equal(fa_ref_forward(&with.pf, o1, l1), FA_SUCCESS);
    assert_int_equal(fa_ref_forward(&without.pf, o0, l0), FA_SUCCESS);
    for (int64_t h = 0; h < HQ; ++h)
        for (int64_t r = 0; r < B * SQ; ++r) {
            const double lse0 = l0[h * B * SQ + r], got = l1[h * B * SQ + r];
            const int no_key = r % SQ < SQ - SK;
            const double want = no_key ? (double)sink[h] : fmax(lse0, sink[h]) + log1p(exp(-fabs(lse0 - sink[h])));
            assert_true(no_key == (lse0 == -INFINITY));
            if (fabs(got - want) > 1e-12 * fmax(1.0, fabs(want)))
                fail_msg("row %lld head %lld: LSE %.15g, expected %.15g", (long long)r, (long long)h, got, want);
            const double factor = no_key ? 0.0 : exp(lse0 - got);
            for (int64_t c = 0; c < DV; ++c) {
                const int64_t e = (r * HQ + h) * DV + c;
                if (fabs(o1[e] - o0[e] * factor) > 1e-12)
                    fail_msg("O[%lld] = %.15g, expected O0 * exp(LSE0 - LSE) = %.15g", (long long)e, o1[e],
                             o0[e] * factor);
            }
        }
    double g_q[NQ], g_k[NK], g_v[NV], g_s[HQ];
    assert_int_equal(fa_ref_backward(&with.pb, g_q, g_k, g_v, g_s), FA_SUCCESS);
    for (int64_t r = 0; r < B * SQ; ++r)
        if (r % SQ < SQ - SK)
            for (int64_t e = 0; e < HQ * D; ++e)
                assert_true(g_q[r * HQ * D + e] == 0.0);
    /* the naive baseline agrees with the reference to fp32's accuracy, dsink included (from the O
     * a backward is given: the reference's, rounded to fp32) */
    for (int e = 0; e < NO; ++e)
        o[e] = (float)o1[e];
    double n_q[NQ], n_k[NK], n_v[NV], n_s[HQ], n_o[NO], n_l[NL];
    assert_int_equal(fa_naive_forward(&with.pf, n_o, n_l), FA_SUCCESS);
    assert_int_equal(fa_naive_backward(&with.pb, n_q, n_k, n_v, n_s), FA_SUCCESS);
    for (int e = 0; e < NO; ++e)
        assert_true(fabs(n_o[e] - o1[e]) < 1e-5);
    for (int e = 0; e < NL; ++e)
        assert_true(fabs(n_l[e] - l1[e]) < 1e-5);
    for (int h = 0; h < HQ; ++h)
        if (fabs(n_s[h] - g_s[h]) > 1e-5 * fmax(1.0, fabs(g_s[h])))
            fail_msg("naive dsink[%d] = %.9g, reference %.9g", h, n_s[h], g_s[h]);
    fa_context_destroy(host);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradients_match_finite_differences),
        cmocka_unit_test(test_sink_identities),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
