/* test_cpu_isa.c: every CPU kernel table (backends/cpu/isa.h) that this build has and this CPU
 * runs, against double precision: exp_row's relative error over the whole float range it serves
 * and its special values; gemm_panels, gemm_rows and gemm_tn on shapes that leave partial row
 * blocks and a lone panel, with and without accumulation; the online-softmax step of a tile with
 * masked columns and fully masked rows; the backward's dS step, 0 wherever P is 0; the rounding
 * to bf16; the bf16 products of the tables that have them (amx, and amx-emulated, the same tile
 * program run by plain C). A table the CPU cannot run is named in the output as not run. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "isa.h"

static const char *const table_names[] = {"amx", "amx-emulated", "avx512", "avx2", "generic"};
#define NTABLES (sizeof table_names / sizeof table_names[0])

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static float next_uniform(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (float)((rng_state * 0x2545f4914f6cdd1dull) >> 40) / (float)(1u << 24) * 2.0f - 1.0f;
}

/* The table FLASHATTN_CPU_ISA=name selects, or NULL (not compiled in, or the CPU lacks it). */
static const fa_cpu_isa *table_named(const char *name)
{
    setenv("FLASHATTN_CPU_ISA", name, 1);
    const char *why = NULL;
    const fa_cpu_isa *t = fa_cpu_isa_select(&why);
    unsetenv("FLASHATTN_CPU_ISA");
    if (!t)
        printf("[ NOT RUN  ] table %s: %s\n", name, why ? why : "?");
    else
        assert_string_equal(t->name, name);
    return t;
}

/* The relative error bound of exp_row: 4 units of 2^-23 relative, several times the largest error
 * that the test prints for any table (under one unit). */
#define EXP_REL_BOUND (4.0 * FLT_EPSILON)

static void check_exp(const fa_cpu_isa *t)
{
    enum { N = 4096 };
    float *x = aligned_alloc(64, sizeof(float) * N), *y = aligned_alloc(64, sizeof(float) * N);
    assert_non_null(x);
    assert_non_null(y);
    double worst = 0.0;
    /* a sweep over [-104, 89] (past both ends of the range) in steps that hit many mantissas */
    for (int pass = 0; pass < 48; ++pass) {
        for (int i = 0; i < N; ++i)
            x[i] = -104.0f + 193.0f * (float)(pass * N + i) / (float)(48 * N);
        memcpy(y, x, sizeof(float) * N);
        float shift = pass % 2 ? 0.0f : 0.5f;
        t->exp_row(y, N, shift);
        for (int i = 0; i < N; ++i) {
            /* the kernel subtracts in float: the reference takes the same rounded argument */
            double arg = (double)(x[i] - shift), want = exp(arg);
            /* below -87.3 results are exactly 0 (masked scores); above 88.3 the input is clamped */
            if (arg < -87.3) {
                assert_true(y[i] == 0.0f);
                continue;
            }
            if (arg > 88.3 || want < FLT_MIN)
                continue; /* clamped, or subnormal: not a softmax value */
            double rel = fabs((double)y[i] - want) / want;
            if (rel > worst)
                worst = rel;
            if (rel > EXP_REL_BOUND)
                fail_msg("%s exp(%.9g - %g) = %.9g, want %.9g (relative error %.3g)", t->name, (double)x[i],
                         (double)shift, (double)y[i], want, rel);
        }
    }
    /* the returned sum: scores below the shift, as the softmax gives them */
    for (int i = 0; i < N; ++i)
        y[i] = 15.0f * next_uniform() - 15.0f;
    double want_sum = 0.0;
    for (int i = 0; i < N; ++i)
        want_sum += exp((double)y[i] - 1.0);
    float sum = t->exp_row(y, N, 1.0f);
    assert_true(fabs((double)sum - want_sum) <= 1e-5 * want_sum);
    printf("[ INFO     ] table %s: exp relative error at most %.3g (%.2f ulp)\n", t->name, worst,
           worst / FLT_EPSILON);
    /* special values: -inf -> 0, NaN stays NaN, 0 -> 1 */
    for (int i = 0; i < 64; ++i)
        x[i] = i % 4 == 0 ? -INFINITY : i % 4 == 1 ? NAN : i % 4 == 2 ? 0.0f : -1000.0f;
    t->exp_row(x, 64, 0.0f);
    for (int i = 0; i < 64; ++i) {
        if (i % 4 == 1)
            assert_true(isnan(x[i]));
        else if (i % 4 == 2)
            assert_true(x[i] == 1.0f);
        else
            assert_true(x[i] == 0.0f);
    }
    free(x);
    free(y);
}

enum { LAYOUT_ROWS, LAYOUT_PANELS, LAYOUT_TN };

/* C (+)= A B in double, then the table's product (B row-major, B in panels, or A stored
 * transposed), compared element by element with a bound of K rounding errors of the largest
 * term. */
static void check_gemm(const fa_cpu_isa *t, int layout, int64_t M, int64_t N, int64_t K, int accumulate)
{
    int64_t lda = K + 3, ldb = N + 16, ldc = N + 16, ldp = 16 * K + 16, ldat = M + 5;
    float *A = malloc(sizeof(float) * (size_t)(M * lda));
    float *At = malloc(sizeof(float) * (size_t)(K * ldat));
    float *B = malloc(sizeof(float) * (size_t)(K * ldb));
    float *Bp = malloc(sizeof(float) * (size_t)(N / 16 * ldp));
    float *C = malloc(sizeof(float) * (size_t)(M * ldc));
    double *want = malloc(sizeof(double) * (size_t)(M * N));
    assert_true(A && At && B && Bp && C && want);
    for (int64_t i = 0; i < M * lda; ++i)
        A[i] = next_uniform();
    for (int64_t i = 0; i < M; ++i) /* A^T, K x M */
        for (int64_t k = 0; k < K; ++k)
            At[k * ldat + i] = A[i * lda + k];
    for (int64_t i = 0; i < K * ldb; ++i)
        B[i] = next_uniform();
    for (int64_t i = 0; i < M * ldc; ++i)
        C[i] = next_uniform();
    for (int64_t j = 0; j < N; ++j) /* the panel layout of B */
        for (int64_t k = 0; k < K; ++k)
            Bp[j / 16 * ldp + k * 16 + j % 16] = B[k * ldb + j];
    for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
            double acc = accumulate ? (double)C[i * ldc + j] : 0.0;
            for (int64_t k = 0; k < K; ++k)
                acc += (double)A[i * lda + k] * (double)B[k * ldb + j];
            want[i * N + j] = acc;
        }
    float guard = C[ldc - 1]; /* a column past N: never written */
    if (layout == LAYOUT_PANELS)
        t->gemm_panels(M, N, K, A, lda, Bp, ldp, C, ldc, accumulate, (const char *)B, K * ldb * (int64_t)sizeof(float));
    else if (layout == LAYOUT_TN)
        t->gemm_tn(M, N, K, At, ldat, B, ldb, C, ldc, accumulate);
    else
        t->gemm_rows(M, N, K, A, lda, B, ldb, C, ldc, accumulate);
    double bound = (double)(K + 2) * FLT_EPSILON * 2.0;
    for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j)
            if (fabs((double)C[i * ldc + j] - want[i * N + j]) > bound)
                fail_msg("%s %s M %lld N %lld K %lld acc %d: C[%lld][%lld] = %.9g, want %.9g", t->name,
                         layout == LAYOUT_PANELS ? "gemm_panels" : layout == LAYOUT_TN ? "gemm_tn" : "gemm_rows", (long long)M, (long long)N, (long long)K,
                         accumulate, (long long)i, (long long)j, (double)C[i * ldc + j], want[i * N + j]);
    assert_true(C[ldc - 1] == guard);
    free(A);
    free(At);
    free(B);
    free(Bp);
    free(C);
    free(want);
}

static void check_softmax(const fa_cpu_isa *t)
{
    enum { NR = 11, W = 48, LD = 64, LDO = 32 };
    float s[NR * LD], o[NR * LDO], s0[NR * LD], o0[NR * LDO];
    fa_softmax_row rows[NR], rows0[NR];
    for (int r = 0; r < NR; ++r) {
        rows[r] = fa_softmax_init();
        if (r % 3 == 1) { /* a row that has seen keys before */
            rows[r].m = 2.0f;
            rows[r].l = 3.0f;
        }
        for (int j = 0; j < LD; ++j) {
            float v = 4.0f * next_uniform();
            if (r == 4 || (r % 2 == 0 && j >= 40) || j >= W) /* masked columns; row 4 all masked */
                v = -INFINITY;
            s[r * LD + j] = v;
        }
        for (int c = 0; c < LDO; ++c)
            o[r * LDO + c] = next_uniform();
        rows0[r] = rows[r];
    }
    memcpy(s0, s, sizeof s);
    memcpy(o0, o, sizeof o);
    t->online_softmax_tile(s, NR, W, LD, rows, o, LDO);
    for (int r = 0; r < NR; ++r) {
        double m = rows0[r].m;
        for (int j = 0; j < W; ++j)
            m = s0[r * LD + j] > m ? s0[r * LD + j] : m;
        assert_true(rows[r].m == (float)m);
        double shift = m == -INFINITY ? 0.0 : m;
        double alpha = rows0[r].m == -INFINITY ? 0.0 : exp((double)rows0[r].m - m);
        double l = rows0[r].l * alpha;
        for (int j = 0; j < W; ++j) {
            double p = exp((double)s0[r * LD + j] - shift);
            l += p;
            assert_true(fabs((double)s[r * LD + j] - p) <= 4.0 * FLT_EPSILON * p + 1e-30);
        }
        assert_true(fabs((double)rows[r].l - l) <= 1e-5 * l + 1e-30);
        for (int c = 0; c < LDO; ++c)
            assert_true(fabs((double)o[r * LDO + c] - alpha * o0[r * LDO + c]) <= 1e-6 * fabs(o0[r * LDO + c]) + 1e-30);
    }
}

static float bf16_value(uint16_t h)
{
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

/* a random bf16 in [-1, 1) */
static uint16_t next_bf16(void)
{
    float f = next_uniform();
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    return (uint16_t)(x >> 16);
}

/* The fused step: the scale folded in, P rounded to bf16 into its own buffer (the scores left as
 * they were), the sums and the output's rescaling as in the fp32 step. */
static void check_softmax_bf16(const fa_cpu_isa *t)
{
    enum { NR = 11, W = 80, LD = 96, LDO = 32, LDP = 112 };
    const float scale = 0.0883883476f;
    float s[NR * LD], o[NR * LDO], s0[NR * LD], o0[NR * LDO];
    uint16_t pb[NR * LDP];
    fa_softmax_row rows[NR], rows0[NR];
    for (int r = 0; r < NR; ++r) {
        rows[r] = fa_softmax_init();
        if (r % 3 == 1) {
            rows[r].m = 0.25f;
            rows[r].l = 3.0f;
        }
        for (int j = 0; j < LD; ++j)
            s[r * LD + j] = r == 4 || (r % 2 == 0 && j >= 64) || j >= W ? -INFINITY : 40.0f * next_uniform();
        for (int c = 0; c < LDO; ++c)
            o[r * LDO + c] = next_uniform();
        for (int j = 0; j < LDP; ++j)
            pb[r * LDP + j] = 0xabcdu;
        rows0[r] = rows[r];
    }
    memcpy(s0, s, sizeof s);
    memcpy(o0, o, sizeof o);
    t->online_softmax_tile_bf16(s, NR, W, LD, scale, rows, o, LDO, pb, LDP);
    assert_memory_equal(s, s0, sizeof s);
    for (int r = 0; r < NR; ++r) {
        double m = rows0[r].m;
        for (int j = 0; j < W; ++j)
            m = (double)(scale * s0[r * LD + j]) > m ? (double)(scale * s0[r * LD + j]) : m;
        assert_true(rows[r].m == (float)m);
        double shift = m == -INFINITY ? 0.0 : m;
        double alpha = rows0[r].m == -INFINITY ? 0.0 : exp((double)rows0[r].m - m);
        double l = rows0[r].l * alpha;
        for (int j = 0; j < W; ++j) {
            double p = exp((double)scale * s0[r * LD + j] - shift);
            l += p;
            /* one bf16 rounding (2^-8 relative) after an exp within 4 x 2^-23 */
            if (fabs((double)bf16_value(pb[r * LDP + j]) - p) > (0x1p-8 + 8.0 * FLT_EPSILON) * p + 1e-30)
                fail_msg("%s softmax bf16 row %d col %d: %g, want %g", t->name, r, j,
                         (double)bf16_value(pb[r * LDP + j]), p);
        }
        for (int j = W; j < LDP; ++j) /* past the width: untouched */
            assert_true(pb[r * LDP + j] == 0xabcdu);
        assert_true(fabs((double)rows[r].l - l) <= 1e-5 * l + 1e-30);
        for (int c = 0; c < LDO; ++c)
            assert_true(fabs((double)o[r * LDO + c] - alpha * o0[r * LDO + c]) <= 1e-6 * fabs(o0[r * LDO + c]) + 1e-30);
    }
}

/* dS = P o (dP - D) scale, and exactly 0 where P is 0 whatever dP holds */
static void check_softmax_grad(const fa_cpu_isa *t)
{
    enum { NR = 5, W = 48, LD = 64 };
    float p[NR * LD], ds[NR * LD], dp[NR * LD], dsum[NR];
    const float scale = 0.125f;
    for (int r = 0; r < NR; ++r) {
        dsum[r] = next_uniform();
        for (int j = 0; j < LD; ++j) {
            p[r * LD + j] = j % 5 == 0 ? 0.0f : 0.5f + 0.5f * next_uniform();
            dp[r * LD + j] = j % 10 == 0 ? (j % 20 == 0 ? NAN : INFINITY) : next_uniform();
        }
    }
    memcpy(ds, dp, sizeof ds);
    t->softmax_grad_tile(ds, p, NR, W, LD, dsum, scale);
    for (int r = 0; r < NR; ++r)
        for (int j = 0; j < LD; ++j) {
            float got = ds[r * LD + j];
            if (j >= W) { /* past the width: untouched */
                assert_memory_equal(&got, &dp[r * LD + j], sizeof got);
                continue;
            }
            if (p[r * LD + j] == 0.0f) {
                assert_true(got == 0.0f);
                continue;
            }
            double want = (double)p[r * LD + j] * ((double)dp[r * LD + j] - dsum[r]) * scale;
            assert_true(fabs((double)got - want) <= 4.0 * FLT_EPSILON * fabs(want) + 1e-30);
        }
}

/* to_bf16_row: round to nearest even (ties both ways), NaN stays NaN, infinities and the
 * largest finite values that round up to infinity */
static void check_to_bf16(const fa_cpu_isa *t)
{
    enum { N = 64 };
    const uint32_t bits[] = {0x3f800000u, 0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x3f808001u, 0xbf808000u,
                             0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u, 0xffffffffu, 0x7f7fffffu,
                             0x00000001u, 0x80000000u, 0x00000000u, 0x7f7f8000u, 0x7f7f0001u, 0xff7f7fffu};
    float x[N];
    uint16_t y[N];
    for (int i = 0; i < N; ++i) {
        uint32_t b = i < (int)(sizeof bits / sizeof bits[0]) ? bits[i] : (uint32_t)(next_uniform() * 1e9f);
        memcpy(&x[i], &b, sizeof b);
    }
    t->to_bf16_row(x, y, N);
    /* to_bf16_pairs: the same roundings, two rows into the halves of one word (no second row: 0) */
    uint32_t pairs[N], single[N];
    float x1[N];
    for (int i = 0; i < N; ++i)
        x1[i] = x[N - 1 - i];
    t->to_bf16_pairs(x, x1, pairs, N);
    t->to_bf16_pairs(x1, NULL, single, N);
    for (int i = 0; i < N; ++i) {
        assert_true((uint16_t)pairs[i] == y[i]);
        assert_true((uint16_t)(pairs[i] >> 16) == y[N - 1 - i]);
        assert_true(single[i] == y[N - 1 - i]);
    }
    for (int i = 0; i < N; ++i) {
        if (x[i] != x[i]) {
            assert_true(bf16_value(y[i]) != bf16_value(y[i]));
            continue;
        }
        /* the nearest of the two bf16 neighbours, the even one on a tie, in double */
        uint32_t b;
        memcpy(&b, &x[i], sizeof b);
        uint16_t lo = (uint16_t)(b >> 16), hi = (uint16_t)(lo + 1);
        /* past bf16's largest finite value the upper neighbour is infinity, at 2^128 for rounding */
        double vhi = (hi & 0x7fffu) == 0x7f80u ? copysign(0x1p128, (double)x[i]) : (double)bf16_value(hi);
        double dlo = fabs((double)x[i] - bf16_value(lo)), dhi = fabs(vhi - (double)x[i]);
        uint16_t want = (b & 0xffffu) == 0 ? lo : dlo < dhi ? lo : dhi < dlo ? hi : (lo & 1u) ? hi : lo;
        if (y[i] != want)
            fail_msg("%s to_bf16_row(%a) = 0x%04x, want 0x%04x", t->name, (double)x[i], y[i], want);
    }
}

/* C (+)= A B with A (M x K) and B (K x N) in bf16, B pair-packed, against double: the products
 * are exact, the sums fp32, so the bound is K + 2 roundings of the sum of |terms|. Columns past N
 * and rows past M of C are never written. */
static void check_gemm_bf16(const fa_cpu_isa *t, int64_t M, int64_t N, int64_t K, int accumulate)
{
    int64_t lda = K + 32, ldb = N + 16, ldc = N + 16;
    uint16_t *A = malloc(sizeof(uint16_t) * (size_t)(M * lda));
    uint16_t *B = malloc(sizeof(uint16_t) * (size_t)(K * N));
    uint32_t *Bp = malloc(sizeof(uint32_t) * (size_t)(K / 2 * ldb));
    float *C = malloc(sizeof(float) * (size_t)((M + 1) * ldc));
    double *want = malloc(sizeof(double) * (size_t)(M * N)), *mag = malloc(sizeof(double) * (size_t)(M * N));
    assert_true(A && B && Bp && C && want && mag);
    for (int64_t i = 0; i < M * lda; ++i)
        A[i] = next_bf16();
    for (int64_t i = 0; i < K * N; ++i)
        B[i] = next_bf16();
    for (int64_t i = 0; i < (M + 1) * ldc; ++i)
        C[i] = next_uniform();
    for (int64_t kp = 0; kp < K / 2; ++kp)
        for (int64_t j = 0; j < N; ++j)
            Bp[kp * ldb + j] = (uint32_t)B[2 * kp * N + j] | (uint32_t)B[(2 * kp + 1) * N + j] << 16;
    for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
            double acc = accumulate ? (double)C[i * ldc + j] : 0.0, m = fabs(acc);
            for (int64_t k = 0; k < K; ++k) {
                double term = (double)bf16_value(A[i * lda + k]) * (double)bf16_value(B[k * N + j]);
                acc += term;
                m += fabs(term);
            }
            want[i * N + j] = acc;
            mag[i * N + j] = m;
        }
    float guard_col = C[ldc - 1], guard_row = C[M * ldc];
    t->bf16_tiles_begin();
    t->gemm_bf16(M, N, K, A, lda, Bp, ldb, C, ldc, accumulate);
    t->bf16_tiles_end();
    for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j)
            if (fabs((double)C[i * ldc + j] - want[i * N + j]) > (double)(K + 2) * FLT_EPSILON * mag[i * N + j])
                fail_msg("%s gemm_bf16 M %lld N %lld K %lld acc %d: C[%lld][%lld] = %.9g, want %.9g", t->name,
                         (long long)M, (long long)N, (long long)K, accumulate, (long long)i, (long long)j,
                         (double)C[i * ldc + j], want[i * N + j]);
    assert_true(C[ldc - 1] == guard_col);
    assert_true(C[M * ldc] == guard_row);
    free(A);
    free(B);
    free(Bp);
    free(C);
    free(want);
    free(mag);
}

static void test_tables(void **state)
{
    (void)state;
    int ran = 0;
    for (size_t i = 0; i < NTABLES; ++i) {
        const fa_cpu_isa *t = table_named(table_names[i]);
        if (!t)
            continue;
        ++ran;
        check_exp(t);
        static const int64_t Ms[] = {1, 2, 3, 4, 5, 7, 8, 9, 13, 16, 19, 64};
        static const int64_t Ns[] = {16, 32, 48, 80, 128};
        static const int64_t Ks[] = {1, 7, 64, 129};
        for (size_t a = 0; a < sizeof Ms / sizeof Ms[0]; ++a)
            for (size_t b = 0; b < sizeof Ns / sizeof Ns[0]; ++b)
                for (size_t c = 0; c < sizeof Ks / sizeof Ks[0]; ++c)
                    for (int acc = 0; acc < 2; ++acc) {
                        check_gemm(t, LAYOUT_PANELS, Ms[a], Ns[b], Ks[c], acc);
                        check_gemm(t, LAYOUT_ROWS, Ms[a], Ns[b], Ks[c], acc);
                        check_gemm(t, LAYOUT_TN, Ms[a], Ns[b], Ks[c], acc);
                    }
        check_softmax(t);
        check_softmax_grad(t);
        check_to_bf16(t);
        check_softmax_bf16(t);
        if (t->gemm_bf16) { /* M, N multiples of 16 (one or two tiles, and more), K of 32 */
            static const int64_t Mb[] = {16, 32, 48, 64, 112}, Nb[] = {16, 32, 48, 128}, Kb[] = {32, 64, 160};
            for (size_t a = 0; a < sizeof Mb / sizeof Mb[0]; ++a)
                for (size_t b = 0; b < sizeof Nb / sizeof Nb[0]; ++b)
                    for (size_t c = 0; c < sizeof Kb / sizeof Kb[0]; ++c)
                        for (int acc = 0; acc < 2; ++acc)
                            check_gemm_bf16(t, Mb[a], Nb[b], Kb[c], acc);
        }
        printf("[ INFO     ] table %s (%d lanes): exp, products, the softmax step, dS and bf16 rounding checked%s\n",
               t->name, t->lanes, t->gemm_bf16 ? "; bf16 products checked" : "");
    }
    assert_true(ran >= 1); /* generic always runs */
    /* the default choice is one of the tables */
    const fa_cpu_isa *best = fa_cpu_isa_select(NULL);
    assert_non_null(best);
    printf("[ INFO     ] default table: %s\n", best->name);
    /* a name that is no table */
    setenv("FLASHATTN_CPU_ISA", "sse9", 1);
    const char *why = NULL;
    assert_null(fa_cpu_isa_select(&why));
    assert_non_null(why);
    unsetenv("FLASHATTN_CPU_ISA");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tables),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
