/* test_kv_rows.c: backends/cpu/kv_rows.h, the CPU decode kernels that read cache rows in place.
 * The widening loads exhaustively over all 65536 fp16 and bf16 patterns against half.h (exact
 * bits; NaN stays NaN) and the channel order they give, the eight-way lane reduction, and the score and P V micro-kernels against
 * double-precision loops on random rows of every dtype, with scattered row pointers (as a paged
 * cache gives) and masked keys holding NaN that the one-row P V must skip. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "half.h"
#include "kv_rows.h"

static uint64_t rng_state = 0x243f6a8885a308d3ull;

static float next_uniform(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (float)((rng_state * 0x2545f4914f6cdd1dull) >> 40) / (float)(1u << 24) * 2.0f - 1.0f;
}

static uint32_t float_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* kv_load16 over every 16-bit pattern: the bits half.h's scalar conversions give, the even
 * channels of each 16 in lo and the odd ones in hi; kv_to_load_order puts a row in that order and
 * kv_from_load_order takes it back */
static void test_widening_exhaustive(void **state)
{
    (void)state;
    uint16_t *all = malloc(sizeof(uint16_t) * 65536);
    assert_non_null(all);
    /* every pattern once (a rotation, then a product with an odd number: both bijections), with
     * neighbours unrelated, so that a lane's even and odd halves both take every bit value */
    for (uint32_t i = 0; i < 65536; ++i)
        all[i] = (uint16_t)(((i >> 1) | (i << 15)) * 40503u);
    for (int64_t c = 0; c < 65536; c += 2 * VEC) {
        float h[2 * VEC], b[2 * VEC];
        v8f lo, hi;
        kv_load16(FA_DTYPE_F16, all, c, &lo, &hi);
        store8(h, lo);
        store8(h + VEC, hi);
        kv_load16(FA_DTYPE_BF16, all, c, &lo, &hi);
        store8(b, lo);
        store8(b + VEC, hi);
        for (int k = 0; k < 2 * VEC; ++k) {
            const uint16_t x = all[c + (k < VEC ? 2 * k : 2 * (k - VEC) + 1)];
            const float want_h = fa_half_to_float(x), want_b = fa_bfloat_to_float(x);
            if (isnan(want_h))
                assert_true(isnan(h[k]) && (float_bits(h[k]) >> 31) == (uint32_t)(x >> 15));
            else
                assert_int_equal(float_bits(h[k]), float_bits(want_h));
            assert_int_equal(float_bits(b[k]), float_bits(want_b));
        }
    }
    free(all);
    float x[32], y[32];
    for (int i = 0; i < 32; ++i)
        x[i] = y[i] = (float)i;
    kv_to_load_order(FA_DTYPE_BF16, y, 32);
    for (int i = 0; i < 32; ++i)
        assert_true(y[i] == (float)(i / 16 * 16 + (i % 16 < 8 ? 2 * (i % 16) : 2 * (i % 16 - 8) + 1)));
    kv_from_load_order(FA_DTYPE_BF16, y, 32);
    assert_memory_equal(x, y, sizeof x);
    kv_to_load_order(FA_DTYPE_F32, y, 32);
    assert_memory_equal(x, y, sizeof x);
    float f[2 * VEC];
    v8f lo, hi;
    kv_load16(FA_DTYPE_F32, x, 16, &lo, &hi);
    store8(f, lo);
    store8(f + VEC, hi);
    assert_memory_equal(f, x + 16, sizeof f);
}

static void test_sum8x8(void **state)
{
    (void)state;
    v8f x[8];
    double want[8];
    for (int i = 0; i < 8; ++i) {
        float t[VEC];
        want[i] = 0.0;
        for (int k = 0; k < VEC; ++k) {
            t[k] = (float)(i * 8 + k + 1) * (k % 2 ? -0.5f : 1.0f);
            want[i] += t[k];
        }
        x[i] = load8(t);
    }
    float got[VEC];
    store8(got, kv_sum8x8(x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7]));
    for (int i = 0; i < 8; ++i)
        assert_true(got[i] == (float)want[i]);
}

enum { D = 48, KEYS = 13, KEYS_PAD = 16, ROWS = 4, LD = 20 };

/* keys rows of D elements of dtype dt, scattered in a buffer in reverse order with gaps */
static void make_rows(fa_dtype dt, unsigned char *buf, const void **row, double (*val)[D])
{
    const size_t es = fa_dtype_size(dt);
    for (int j = 0; j < KEYS; ++j) {
        unsigned char *r = buf + (size_t)(KEYS - 1 - j) * (D + 8) * es;
        row[j] = r;
        for (int c = 0; c < D; ++c) {
            const float x = next_uniform();
            if (dt == FA_DTYPE_F32)
                memcpy(r + c * es, &x, es);
            else {
                const uint16_t h = dt == FA_DTYPE_F16 ? fa_float_to_half(x) : fa_float_to_bfloat(x);
                memcpy(r + c * es, &h, es);
            }
            val[j][c] = dt == FA_DTYPE_F32 ? x : dt == FA_DTYPE_F16 ? fa_half_to_float(fa_float_to_half(x))
                                                                   : fa_bfloat_to_float(fa_float_to_bfloat(x));
        }
    }
    for (int j = KEYS; j < KEYS_PAD; ++j)
        row[j] = row[0];
}

static void check_close(double got, double want, double scale)
{
    /* fp32 sums of D products of magnitude <= 1: a few ulp of the terms' size */
    assert_true(fabs(got - want) <= 1e-5 * scale);
}

static void kernels_for(fa_dtype dt)
{
    static unsigned char kbuf[KEYS * (D + 8) * 4], vbuf[KEYS * (D + 8) * 4];
    static double kval[KEYS][D], vval[KEYS][D];
    const void *krow[KEYS_PAD], *vrow[KEYS_PAD];
    make_rows(dt, kbuf, krow, kval);
    make_rows(dt, vbuf, vrow, vval);
    float q[ROWS * D], ql[ROWS * D], s[ROWS * LD], e[ROWS * LD], acc[ROWS * D], acc1[D];
    for (int i = 0; i < ROWS * D; ++i)
        ql[i] = q[i] = next_uniform();
    for (int r = 0; r < ROWS; ++r)
        kv_to_load_order(dt, ql + r * D, D);

    /* scores, four rows at a time and one */
    kv_scores4(dt, ql, D, krow, KEYS, D, s, LD);
    float s1[KEYS_PAD];
    kv_scores1(dt, ql + 3 * D, krow, KEYS, D, s1);
    for (int r = 0; r < ROWS; ++r)
        for (int j = 0; j < KEYS; ++j) {
            double want = 0.0;
            for (int c = 0; c < D; ++c)
                want += (double)q[r * D + c] * kval[j][c];
            check_close(s[r * LD + j], want, D);
            if (r == 3)
                check_close(s1[j], want, D);
        }

    /* P V from a nonzero start: acc += e V */
    for (int i = 0; i < ROWS * LD; ++i)
        e[i] = 0.5f * (next_uniform() + 1.0f);
    for (int i = 0; i < ROWS * D; ++i)
        acc[i] = next_uniform();
    double want[ROWS][D];
    for (int r = 0; r < ROWS; ++r)
        for (int c = 0; c < D; ++c) {
            want[r][c] = acc[r * D + c];
            for (int j = 0; j < KEYS; ++j)
                want[r][c] += (double)e[r * LD + j] * vval[j][c];
        }
    for (int r = 0; r < ROWS; ++r)
        kv_to_load_order(dt, acc + r * D, D);
    kv_pv4(dt, acc, D, e, LD, vrow, KEYS, D);
    for (int r = 0; r < ROWS; ++r)
        kv_from_load_order(dt, acc + r * D, D);
    for (int r = 0; r < ROWS; ++r)
        for (int c = 0; c < D; ++c)
            check_close(acc[r * D + c], want[r][c], KEYS);

    /* one row, keys 2 and 7 masked (score -inf) with NaN in their values: skipped, not 0 x NaN */
    float srow[KEYS_PAD];
    for (int j = 0; j < KEYS; ++j)
        srow[j] = (j == 2 || j == 7) ? -INFINITY : 1.0f;
    const size_t es = fa_dtype_size(dt);
    const uint32_t nan32 = 0x7fc00000u;
    const uint16_t nan16 = dt == FA_DTYPE_F16 ? 0x7e00u : 0x7fc0u;
    for (int c = 0; c < D; ++c) {
        memcpy((unsigned char *)vrow[2] + c * es, dt == FA_DTYPE_F32 ? (const void *)&nan32 : (const void *)&nan16, es);
        memcpy((unsigned char *)vrow[7] + c * es, dt == FA_DTYPE_F32 ? (const void *)&nan32 : (const void *)&nan16, es);
    }
    for (int c = 0; c < D; ++c)
        acc1[c] = 0.0f;
    kv_pv1(dt, acc1, srow, e, vrow, KEYS, D);
    kv_from_load_order(dt, acc1, D);
    for (int c = 0; c < D; ++c) {
        double w = 0.0;
        for (int j = 0; j < KEYS; ++j)
            if (j != 2 && j != 7)
                w += (double)e[j] * vval[j][c];
        assert_false(isnan(acc1[c]));
        check_close(acc1[c], w, KEYS);
    }
}

static void test_kernels_f32(void **state)
{
    (void)state;
    kernels_for(FA_DTYPE_F32);
}

static void test_kernels_bf16(void **state)
{
    (void)state;
    kernels_for(FA_DTYPE_BF16);
}

static void test_kernels_f16(void **state)
{
    (void)state;
    kernels_for(FA_DTYPE_F16);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_widening_exhaustive), cmocka_unit_test(test_sum8x8),
        cmocka_unit_test(test_kernels_f32),         cmocka_unit_test(test_kernels_bf16),
        cmocka_unit_test(test_kernels_f16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
