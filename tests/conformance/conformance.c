/* conformance.c: the conformance suite: the grid of grid.c on one backend and device (every
 * backend compiled in by default), plus the dropout checks (the dropped set equals the core's
 * Philox rule exactly, the kept elements are P / (1 - p) against float64; the dropped fraction
 * is within 1% of p) and finite differences on the
 * float64 reference. A backend that is not compiled in, has no device, or rejects a case as
 * unsupported is reported as skipped by name, never as passed.
 * Usage: conformance [--backend NAME] [--device N] [--grid full|short] [--filter SUBSTRING[,SUBSTRING...]]
 * (a case runs when its name contains any of the comma-separated substrings and none of those
 * written -SUBSTRING) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "half.h"
#include "harness.h"
#include "kernels_switch.h"
#include "philox.h"
#include "reference.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static fa_context *g_ctx;

static void run_grid_case(void **state)
{
    const conf_case *c = *state;
    conf_result r;
    conf_run(g_ctx, c, &r);
    if (r.skipped) {
        print_message("[ SKIPPED  ] %s on %s: %s\n", c->name, fa_context_backend_name(g_ctx), r.skip_reason);
        skip();
    }
    if (r.failure[0])
        fail_msg("%s: %s", c->name, r.failure);
    if (r.f32_twin_skip[0])
        print_message("           fp32-output twin not run: %s\n", r.f32_twin_skip);
    if (getenv("FA_CONFORMANCE_VERBOSE"))
        print_message("           O %.2e (bound %.2e)  LSE %.2e  dQ %.2e/%.2e dK %.2e/%.2e dV %.2e/%.2e%s\n", r.err_o,
                      r.bound_o, r.err_lse, r.err_grad[0], r.bound_grad[0], r.err_grad[1], r.bound_grad[1],
                      r.err_grad[2], r.bound_grad[2], r.f32_twin ? "  fp32 twin: rounded exactly" : "");
    if (getenv("FA_CONFORMANCE_VERBOSE") && c->sink && c->backward)
        print_message("           dsink %.2e (bound %.2e, naive %.2e)\n", r.err_dsink, r.bound_dsink, r.naive_dsink);
}

/* ------------------------------------------------------------------ dropout */

static double load_dtype(fa_dtype dt, const void *base, size_t off)
{
    return dt == FA_DTYPE_F32   ? ((const float *)base)[off]
           : dt == FA_DTYPE_F16 ? fa_half_to_float(((const uint16_t *)base)[off])
                                : fa_bfloat_to_float(((const uint16_t *)base)[off]);
}

static float round_dtype(fa_dtype dt, float x)
{
    return dt == FA_DTYPE_F32   ? x
           : dt == FA_DTYPE_F16 ? fa_half_to_float(fa_float_to_half(x))
                                : fa_bfloat_to_float(fa_float_to_bfloat(x));
}

/* The scale of the kept elements: O[b, i, h, j] against P_ij / (1 - p) in float64 (softmax of
 * the stored inputs, 1 / (1 - p) computed here from p, not taken from the library) where the
 * Philox rule keeps (b, h, i, j), 0 where it drops; the pass rule of the grid: within twice the
 * error of a plain same-precision computation (fp32 softmax, P / (1 - p) rounded to the dtype,
 * O rounded to the dtype) plus 1e-5. */
static void dropout_scale_error(fa_dtype dt, int64_t batch, int64_t heads, int64_t sq, int64_t sk, int64_t d,
                                float p, uint64_t seed, uint64_t offset, const void *hq, const void *hk,
                                const void *ho, double *err, double *bound)
{
    const double keep_scale = 1.0 / (1.0 - (double)p), scale = 1.0 / sqrt((double)d);
    const uint32_t thr = fa_dropout_threshold(p);
    double *s64 = malloc(sizeof(double) * (size_t)sk);
    float *s32 = malloc(sizeof(float) * (size_t)sk);
    assert_non_null(s64);
    assert_non_null(s32);
    double worst = 0.0, worst_naive = 0.0, ref_max = 0.0;
    for (int64_t b = 0; b < batch; ++b)
        for (int64_t h = 0; h < heads; ++h)
            for (int64_t i = 0; i < sq; ++i) {
                double m64 = -INFINITY, l64 = 0.0;
                float m32 = -INFINITY, l32 = 0.0f;
                for (int64_t j = 0; j < sk; ++j) {
                    double dot = 0.0;
                    float dot32 = 0.0f;
                    for (int64_t c = 0; c < d; ++c) {
                        double qv = load_dtype(dt, hq, (size_t)(((b * sq + i) * heads + h) * d + c));
                        double kv = load_dtype(dt, hk, (size_t)((b * sk + j) * d + c));
                        dot += qv * kv;
                        dot32 += (float)qv * (float)kv;
                    }
                    s64[j] = dot * scale;
                    s32[j] = dot32 * (float)scale;
                    m64 = fmax(m64, s64[j]);
                    m32 = fmaxf(m32, s32[j]);
                }
                for (int64_t j = 0; j < sk; ++j) {
                    l64 += exp(s64[j] - m64);
                    l32 += expf(s32[j] - m32);
                }
                for (int64_t j = 0; j < sk; ++j) {
                    int keep = fa_dropout_keep(seed, offset, (uint64_t)b, (uint64_t)heads, (uint64_t)h, (uint64_t)i,
                                               (uint64_t)j, thr);
                    double ref = keep ? exp(s64[j] - m64) / l64 * keep_scale : 0.0;
                    float naive = keep ? round_dtype(dt, round_dtype(dt, expf(s32[j] - m32) / l32 * (float)keep_scale))
                                       : 0.0f;
                    double got = load_dtype(dt, ho, (size_t)(((b * sq + i) * heads + h) * d + j));
                    worst = fmax(worst, fabs(got - ref));
                    worst_naive = fmax(worst_naive, fabs((double)naive - ref));
                    ref_max = fmax(ref_max, fabs(ref));
                }
            }
    free(s64);
    free(s32);
    *err = worst;
    *bound = 2.0 * worst_naive + 1e-5 * fmax(1.0, ref_max);
}

/* Forward with V = identity (seqlen_k <= d): O[i, j] = P_ij * z_ij / (1 - p) with P > 0
 * everywhere, so the zeros of O are exactly the dropped elements, and the kept ones show the
 * scale (dropout_scale_error). Returns the dropped count. */
static int64_t dropout_pattern(fa_dtype dt, int64_t batch, int64_t heads, int64_t sq, int64_t sk, float p,
                               uint64_t seed, uint64_t offset, int64_t *mismatches, double *scale_err,
                               double *scale_bound)
{
    int64_t d = 64 > sk ? 64 : sk;
    int64_t qs[4] = {batch, sq, heads, d}, ks[4] = {batch, sk, 1, d};
    size_t esz = fa_dtype_size(dt);
    size_t nq = (size_t)(batch * sq * heads * d), nk = (size_t)(batch * sk * d);
    uint8_t *hq = calloc(nq, esz), *hk = calloc(nk, esz), *hv = calloc(nk, esz), *ho = calloc(nq, esz);
    void *dq = NULL, *dk = NULL, *dv = NULL, *dout = NULL;
    int64_t dropped = -1;
    assert_non_null(hq);
    assert_non_null(hk);
    assert_non_null(hv);
    assert_non_null(ho);
    uint64_t s = 99;
    for (size_t i = 0; i < nq; ++i) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        float x = (float)((s >> 40) & 0xffff) / 65536.0f - 0.5f;
        if (dt == FA_DTYPE_F32)
            ((float *)hq)[i] = x;
        else
            ((uint16_t *)hq)[i] = dt == FA_DTYPE_F16 ? fa_float_to_half(x) : fa_float_to_bfloat(x);
    }
    for (size_t i = 0; i < nk; ++i) {
        int64_t j = (int64_t)(i / (size_t)d) % sk, c = (int64_t)(i % (size_t)d);
        float kx = (float)((i * 7919) % 13) / 13.0f - 0.5f, vx = c == j ? 1.0f : 0.0f;
        if (dt == FA_DTYPE_F32) {
            ((float *)hk)[i] = kx;
            ((float *)hv)[i] = vx;
        } else {
            uint16_t (*cv)(float) = dt == FA_DTYPE_F16 ? fa_float_to_half : fa_float_to_bfloat;
            ((uint16_t *)hk)[i] = cv(kx);
            ((uint16_t *)hv)[i] = cv(vx);
        }
    }
    if (fa_malloc(g_ctx, nq * esz, &dq) || fa_malloc(g_ctx, nk * esz, &dk) || fa_malloc(g_ctx, nk * esz, &dv) ||
        fa_malloc(g_ctx, nq * esz, &dout))
        goto done;
    fa_memcpy(g_ctx, dq, hq, nq * esz, FA_COPY_HOST_TO_DEVICE);
    fa_memcpy(g_ctx, dk, hk, nk * esz, FA_COPY_HOST_TO_DEVICE);
    fa_memcpy(g_ctx, dv, hv, nk * esz, FA_COPY_HOST_TO_DEVICE);
    fa_fwd_args a = {.q = fa_tensor_contiguous(dq, dt, 4, qs), .k = fa_tensor_contiguous(dk, dt, 4, ks),
                     .v = fa_tensor_contiguous(dv, dt, 4, ks), .o = fa_tensor_contiguous(dout, dt, 4, qs)};
    a.opts = fa_options_default();
    a.opts.dropout_p = p;
    a.opts.dropout_seed = seed;
    a.opts.dropout_offset = offset;
    fa_status st = fa_forward(g_ctx, &a);
    if (st == FA_ERR_UNSUPPORTED)
        goto done;
    assert_int_equal(st, FA_SUCCESS);
    fa_memcpy(g_ctx, ho, dout, nq * esz, FA_COPY_DEVICE_TO_HOST);
    uint32_t thr = fa_dropout_threshold(p);
    dropped = 0;
    *mismatches = 0;
    for (int64_t b = 0; b < batch; ++b)
        for (int64_t i = 0; i < sq; ++i)
            for (int64_t h = 0; h < heads; ++h)
                for (int64_t j = 0; j < sk; ++j) {
                    size_t off = (size_t)(((b * sq + i) * heads + h) * d + j);
                    float o = dt == FA_DTYPE_F32 ? ((float *)ho)[off]
                              : dt == FA_DTYPE_F16 ? fa_half_to_float(((uint16_t *)ho)[off])
                                                   : fa_bfloat_to_float(((uint16_t *)ho)[off]);
                    int kept_kernel = o != 0.0f;
                    int kept_rule = fa_dropout_keep(seed, offset, (uint64_t)b, (uint64_t)heads, (uint64_t)h,
                                                    (uint64_t)i, (uint64_t)j, thr);
                    dropped += !kept_kernel;
                    *mismatches += kept_kernel != kept_rule;
                }
    dropout_scale_error(dt, batch, heads, sq, sk, d, p, seed, offset, hq, hk, ho, scale_err, scale_bound);
done:
    fa_free(g_ctx, dq);
    fa_free(g_ctx, dk);
    fa_free(g_ctx, dv);
    fa_free(g_ctx, dout);
    free(hq);
    free(hk);
    free(hv);
    free(ho);
    return dropped;
}

static void test_dropout_exact_set(void **state)
{
    (void)state;
    const fa_dtype dts[3] = {FA_DTYPE_F32, FA_DTYPE_F16, FA_DTYPE_BF16};
    for (int t = 0; t < 3; ++t) {
        int64_t mism = 0;
        double err = 0.0, bound = 0.0;
        int64_t dropped = dropout_pattern(dts[t], 2, 3, 67, 64, 0.17f, 0x1234567890abcdefull, 77 + (uint64_t)t, &mism,
                                          &err, &bound);
        if (dropped < 0) {
            print_message("[ SKIPPED  ] dropout unsupported for %s\n", fa_dtype_name(dts[t]));
            continue;
        }
        if (mism != 0)
            fail_msg("%s: %lld elements differ from the core's Philox rule", fa_dtype_name(dts[t]), (long long)mism);
        assert_true(dropped > 0);
        print_message("           %s: kept elements against P / (1 - p): error %.2e (bound %.2e)\n",
                      fa_dtype_name(dts[t]), err, bound);
        if (!(err <= bound))
            fail_msg("%s: kept elements are not P / (1 - p): error %.3g > bound %.3g", fa_dtype_name(dts[t]), err,
                     bound);
    }
}

static void test_dropout_fraction(void **state)
{
    (void)state;
    const float p = 0.17f;
    int64_t mism = 0, batch = 1, heads = 8, sq = 2048, sk = 64;
    double err = 0.0, bound = 0.0;
    int64_t dropped = dropout_pattern(FA_DTYPE_F32, batch, heads, sq, sk, p, 2024, 0, &mism, &err, &bound);
    if (dropped < 0)
        skip();
    if (!(err <= bound))
        fail_msg("kept elements are not P / (1 - p): error %.3g > bound %.3g", err, bound);
    double frac = (double)dropped / (double)(batch * heads * sq * sk);
    print_message("           dropped fraction %.5f for p = %.2f over %lld elements\n", frac, (double)p,
                  (long long)(batch * heads * sq * sk));
    assert_int_equal(mism, 0);
    if (fabs(frac - p) > 0.01 * p)
        fail_msg("dropped fraction %.5f is not within 1%% of p = %.2f", frac, (double)p);
}

/* ------------------------------------------------------------------ finite differences */

/* The float64 reference's gradients against central differences of L = sum(O * dO) on tiny
 * problems with every kind of mask and dropout: the oracle itself is checked. */
static void test_reference_finite_differences(void **state)
{
    (void)state;
    fa_context *host;
    assert_int_equal(fa_context_create(&host, "cpu", 0), FA_SUCCESS);
    for (int variant = 0; variant < 4; ++variant) {
        int64_t B = 1, SQ = 5, SK = 7, HQ = 2, HK = 1, D = 4;
        int64_t qs[4] = {B, SQ, HQ, D}, ks[4] = {B, SK, HK, D}, ls[3] = {B, HQ, SQ};
        float q[40], k[28], v[28], o[40], dout[40], lse[10], dq[40], dk[28], dv[28];
        uint64_t s = 7 + (uint64_t)variant;
        float *all[4] = {q, k, v, dout};
        int sizes[4] = {40, 28, 28, 40};
        for (int a = 0; a < 4; ++a)
            for (int i = 0; i < sizes[a]; ++i) {
                s = s * 6364136223846793005ull + 1442695040888963407ull;
                all[a][i] = (float)((s >> 33) & 0xffff) / 32768.0f - 1.0f;
            }
        fa_fwd_args a = {.q = fa_tensor_contiguous(q, FA_DTYPE_F32, 4, qs),
                         .k = fa_tensor_contiguous(k, FA_DTYPE_F32, 4, ks),
                         .v = fa_tensor_contiguous(v, FA_DTYPE_F32, 4, ks),
                         .o = fa_tensor_contiguous(o, FA_DTYPE_F32, 4, qs),
                         .lse = fa_tensor_contiguous(lse, FA_DTYPE_F32, 3, ls)};
        a.opts = fa_options_default();
        a.opts.causal = variant == 1 || variant == 3;
        a.opts.window_left = variant == 2 ? 2 : -1;
        a.opts.dropout_p = variant == 3 ? 0.3f : 0.0f;
        a.opts.dropout_seed = 5;
        fa_bwd_args g = {.q = a.q, .k = a.k, .v = a.v, .o = a.o, .lse = a.lse,
                         .dout = fa_tensor_contiguous(dout, FA_DTYPE_F32, 4, qs),
                         .dq = fa_tensor_contiguous(dq, FA_DTYPE_F32, 4, qs),
                         .dk = fa_tensor_contiguous(dk, FA_DTYPE_F32, 4, ks),
                         .dv = fa_tensor_contiguous(dv, FA_DTYPE_F32, 4, ks), .opts = a.opts};
        fa_problem pf, pb;
        int32_t *cu = NULL;
        assert_int_equal(fa_validate_forward(host, &a, &pf, &cu), FA_SUCCESS);
        assert_int_equal(fa_validate_backward(host, &g, &pb, &cu), FA_SUCCESS);
        double grad[3][40], ro[40], rl[10];
        assert_int_equal(fa_ref_backward(&pb, grad[0], grad[1], grad[2], NULL), FA_SUCCESS);
        float *wrt[3] = {q, k, v};
        int n[3] = {40, 28, 28};
        double worst = 0.0;
        for (int w = 0; w < 3; ++w)
            for (int i = 0; i < n[w]; ++i) {
                float keep = wrt[w][i];
                double loss[2];
                float xs[2] = {keep + 1e-2f, keep - 1e-2f};
                for (int side = 0; side < 2; ++side) {
                    wrt[w][i] = xs[side];
                    assert_int_equal(fa_ref_forward(&pf, ro, rl), FA_SUCCESS);
                    loss[side] = 0.0;
                    for (int e = 0; e < 40; ++e) /* canonical [rows, heads, d] equals the contiguous layout */
                        loss[side] += ro[e] * (double)dout[e];
                }
                wrt[w][i] = keep;
                /* the loss is smooth: central differences are O(h^2) accurate; the step is the
                 * difference of the two fp32 inputs actually used */
                double fd = (loss[0] - loss[1]) / ((double)xs[0] - (double)xs[1]);
                double err = fabs(fd - grad[w][i]);
                worst = err > worst ? err : worst;
            }
        print_message("           variant %d: worst |finite difference - analytic| = %.2e\n", variant, worst);
        if (worst > 2e-4)
            fail_msg("variant %d: reference gradient differs from finite differences by %.3g", variant, worst);
    }
    fa_context_destroy(host);
}

/* ------------------------------------------------------------------ main */

static const char *const known_backends[] = {"cpu", "cuda", "hip", "opencl"};

static int compiled_in(const char *name)
{
    for (int i = 0; i < fa_backend_count(); ++i)
        if (strcmp(fa_backend_name(i), name) == 0)
            return 1;
    return 0;
}

/* 1 when name contains n bytes at s */
static int name_has(const char *name, const char *s, size_t n)
{
    size_t nlen = strlen(name);
    for (size_t i = 0; n > 0 && i + n <= nlen; ++i)
        if (memcmp(name + i, s, n) == 0)
            return 1;
    return 0;
}

/* 1 when there is no filter, or name contains one of filter's comma-separated substrings and none
 * of those written with a leading '-' (a filter of '-' entries alone excludes from every case) */
static int filter_selects(const char *filter, const char *name)
{
    if (!filter)
        return 1;
    int any_positive = 0, selected = 0;
    for (const char *p = filter;;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len > 0 && p[0] == '-') {
            if (name_has(name, p + 1, len - 1))
                return 0;
        } else if (len > 0) {
            any_positive = 1;
            selected |= name_has(name, p, len);
        }
        if (!end)
            break;
        p = end + 1;
    }
    return selected || !any_positive;
}

static int run_backend(const char *backend, int device, int full, const char *filter)
{
    int ndev = 0;
    if (!compiled_in(backend)) {
        printf("[ SKIPPED  ] conformance/%s: backend not compiled in\n", backend);
        return 77;
    }
    if (fa_device_count(backend, &ndev) != FA_SUCCESS || ndev <= device) {
        printf("[ SKIPPED  ] conformance/%s: no device %d (found %d)\n", backend, device, ndev);
        return 77;
    }
    fa_status st = fa_context_create(&g_ctx, backend, device);
    if (st != FA_SUCCESS) {
        /* a CPU kernel table forced by FLASHATTN_CPU_ISA that this CPU cannot run, or OpenCL's matrix
         * path required (FLASHATTN_KERNELS=opencl-matrix=require) where the device has none: SKIP by name */
        const char *isa = getenv("FLASHATTN_CPU_ISA");
        char matrix[16] = "";
        fa_kernels_switch("opencl-matrix", matrix, sizeof matrix);
        if (st == FA_ERR_UNSUPPORTED && ((isa && *isa && strcmp(backend, "cpu") == 0) ||
                                         (strcmp(matrix, "require") == 0 && strcmp(backend, "opencl") == 0))) {
            printf("[ SKIPPED  ] conformance/%s: %s\n", backend, fa_last_error());
            return 77;
        }
        printf("conformance/%s: cannot create a context: %s\n", backend, fa_status_string(st));
        return 1;
    }
    char devname[256] = "";
    fa_device_name(backend, device, devname, sizeof devname);
    printf("conformance on %s device %d (%s), %s grid\n", backend, device, devname, full ? "full" : "short");

    enum { MAX_CASES = 512 };
    conf_case *cases = calloc(MAX_CASES, sizeof *cases);
    struct CMUnitTest *tests = calloc(MAX_CASES + 3, sizeof *tests);
    char (*names)[160] = calloc(MAX_CASES + 3, sizeof *names);
    if (!cases || !tests || !names)
        return 1;
    int ncases = conf_grid(cases, MAX_CASES, full), nt = 0;
    if (ncases >= MAX_CASES) { /* conf_grid drops what does not fit: the table must be larger */
        printf("conformance/%s: the grid fills all %d case slots; raise MAX_CASES\n", backend, MAX_CASES);
        return 1;
    }
    for (int i = 0; i < ncases; ++i) {
        if (!filter_selects(filter, cases[i].name))
            continue;
        snprintf(names[nt], sizeof names[nt], "%s/%s", backend, cases[i].name);
        tests[nt].name = names[nt];
        tests[nt].test_func = run_grid_case;
        tests[nt].initial_state = &cases[i];
        ++nt;
    }
    struct {
        const char *name;
        CMUnitTestFunction fn;
    } extra[] = {{"dropout-exact-set", test_dropout_exact_set},
                 {"dropout-fraction", test_dropout_fraction},
                 {"reference-finite-differences", test_reference_finite_differences}};
    for (int i = 0; i < 3; ++i) {
        if (!filter_selects(filter, extra[i].name))
            continue;
        snprintf(names[nt], sizeof names[nt], "%s/%s", backend, extra[i].name);
        tests[nt].name = names[nt];
        tests[nt].test_func = extra[i].fn;
        ++nt;
    }
    char group[64];
    snprintf(group, sizeof group, "conformance-%s", backend);
    int failed = _cmocka_run_group_tests(group, tests, (size_t)nt, NULL, NULL);
    fa_context_destroy(g_ctx);
    free(cases);
    free(tests);
    free(names);
    return failed ? 1 : 0;
}

int main(int argc, char **argv)
{
    const char *backend = NULL, *filter = NULL, *grid = getenv("FA_CONFORMANCE_GRID");
    int device = 0;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--backend") && i + 1 < argc)
            backend = argv[++i];
        else if (!strcmp(argv[i], "--device") && i + 1 < argc)
            device = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--grid") && i + 1 < argc)
            grid = argv[++i];
        else if (!strcmp(argv[i], "--filter") && i + 1 < argc)
            filter = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--backend NAME] [--device N] [--grid full|short] [--filter SUBSTRING[,...]]\n",
                    argv[0]);
            return 2;
        }
    }
    int full = !(grid && strcmp(grid, "short") == 0);
    if (backend)
        return run_backend(backend, device, full, filter);
    int status = 0, ran = 0;
    for (size_t i = 0; i < sizeof known_backends / sizeof known_backends[0]; ++i) {
        int rc = run_backend(known_backends[i], device, full, filter);
        if (rc == 77)
            continue;
        ran = 1;
        status |= rc;
    }
    return ran ? status : 77;
}
