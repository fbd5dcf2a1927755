/* test_half.c: core/half.h, the fp16 / bf16 <-> fp32 conversions every backend and tool uses.
 * Exhaustive over all 65536 16-bit patterns, every halfway point between neighbours, overflow,
 * subnormals and NaN, against oracles written independently in double; and the public
 * fa_f32_to_f16 family must give the same bits as the header's inline functions. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <string.h>

#include "flashattn.h"
#include "half.h"

/* ---------------------------------------------------------------- independent oracles */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t next_random_u32(void)
{
    /* xorshift64*: plenty for choosing test inputs */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545f4914f6cdd1dull) >> 32);
}

static int half_is_nan(uint16_t h)
{
    return (h & 0x7c00u) == 0x7c00u && (h & 0x03ffu) != 0;
}

static int bfloat_is_nan(uint16_t h)
{
    return (h & 0x7f80u) == 0x7f80u && (h & 0x007fu) != 0;
}

/* The value of a non-NaN half pattern from the IEEE definition, in double. */
static double half_value_by_definition(uint16_t h)
{
    int exponent = (h >> 10) & 0x1f;
    int mantissa = h & 0x3ff;
    double magnitude;
    if (exponent == 0x1f)
        magnitude = INFINITY;
    else if (exponent == 0)
        magnitude = ldexp((double)mantissa, -24);
    else
        magnitude = ldexp((double)(1024 + mantissa), exponent - 25);
    return (h & 0x8000u) ? -magnitude : magnitude;
}

/* Nearest half (ties to even) of a non-NaN float: divide by the quantum of the binade (a power
 * of two, so exact), round with rint in the default to-nearest-even mode, and re-encode. */
static uint16_t half_nearest_by_rint(float x)
{
    uint16_t sign = signbit(x) ? 0x8000u : 0u;
    double magnitude = fabs((double)x);
    if (isinf(magnitude))
        return sign | 0x7c00u;
    if (magnitude == 0.0)
        return sign;
    int binade;
    frexp(magnitude, &binade); /* magnitude in [2^(binade-1), 2^binade) */
    int exponent = binade - 1 < -14 ? -14 : binade - 1;
    double quantum = ldexp(1.0, exponent - 10);
    double rounded = rint(magnitude / quantum) * quantum;
    if (rounded > 65504.0)
        return sign | 0x7c00u; /* rounded past the largest finite half: overflow */
    if (rounded < ldexp(1.0, -14))
        return (uint16_t)(sign | (uint16_t)(rounded / ldexp(1.0, -24)));
    frexp(rounded, &binade);
    int biased = binade - 1 + 15;
    int mantissa = (int)(rounded / ldexp(1.0, binade - 1 - 10)) - 1024;
    return (uint16_t)(sign | (biased << 10) | mantissa);
}

/* The value of a non-NaN bf16 pattern; the pattern one past the largest finite (inf) counts as
 * 2^128 so that the rounding decision treats the exponent as unbounded, as IEEE does. */
static double bfloat_magnitude_for_rounding(uint32_t magnitude_bits)
{
    if (magnitude_bits >= 0x7f80u)
        return ldexp(1.0, 128);
    return (double)fa_bits_f32(magnitude_bits << 16);
}

/* Nearest bf16 (ties to even) of a non-NaN float by comparing the distances to the two bf16
 * neighbours in double. */
static uint16_t bfloat_nearest_by_distance(float x)
{
    uint32_t bits = fa_f32_bits(x);
    uint32_t sign = (bits >> 16) & 0x8000u;
    uint32_t below = (bits & 0x7fffffffu) >> 16; /* truncation toward zero */
    if (below >= 0x7f80u)
        return (uint16_t)(sign | 0x7f80u); /* inf stays inf */
    double magnitude = fabs((double)x);
    double distance_below = magnitude - bfloat_magnitude_for_rounding(below);
    double distance_above = bfloat_magnitude_for_rounding(below + 1) - magnitude;
    uint32_t chosen;
    if (distance_below < distance_above)
        chosen = below;
    else if (distance_above < distance_below)
        chosen = below + 1;
    else
        chosen = (below & 1u) ? below + 1 : below;
    return (uint16_t)(sign | chosen);
}

static float random_float_near_half_range(void)
{
    /* exponent field 100..144 covers fp32 values from 2^-27 (below half's smallest subnormal)
     * to 2^17 (past half's overflow); mantissa and sign random */
    uint32_t exponent = 100u + next_random_u32() % 45u;
    uint32_t bits = (next_random_u32() & 0x807fffffu) | (exponent << 23);
    return fa_bits_f32(bits);
}

/* ---------------------------------------------------------------- fp16 */

static void test_every_half_decodes_to_its_ieee_value(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 65536u; ++h) {
        float decoded = fa_half_to_float((uint16_t)h);
        if (half_is_nan((uint16_t)h)) {
            assert_true(isnan(decoded));
            assert_int_equal(!!signbit(decoded), !!(h & 0x8000u));
            continue;
        }
        double expected = half_value_by_definition((uint16_t)h);
        if ((double)decoded != expected || !!signbit(decoded) != !!(h & 0x8000u))
            print_error("half %04x decodes to %a, expected %a\n", h, (double)decoded, expected);
        assert_true((double)decoded == expected);
        assert_int_equal(!!signbit(decoded), !!(h & 0x8000u)); /* -0 stays -0 */
    }
}

/* Every half is exactly representable in fp32, so float -> half must give the same bits back;
 * a NaN must stay a NaN with its sign and payload, gaining only the quiet bit. */
static void test_every_half_round_trips_through_float(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 65536u; ++h) {
        uint16_t back = fa_float_to_half(fa_half_to_float((uint16_t)h));
        uint16_t expected = half_is_nan((uint16_t)h) ? (uint16_t)(h | 0x0200u) : (uint16_t)h;
        if (back != expected)
            print_error("half %04x came back as %04x, expected %04x\n", h, back, expected);
        assert_int_equal(back, expected);
    }
}

/* For each pair of neighbouring finite halves (and the largest finite with the would-be next,
 * 65536, whose midpoint 65520 must overflow to inf), the exact midpoint rounds to the even one
 * and one fp32 ulp either side rounds to the nearer one. */
static void test_half_halfway_points_round_to_even(void **state)
{
    (void)state;
    for (uint32_t low = 0; low < 0x7c00u; ++low) {
        uint32_t high = low + 1;
        double midpoint = (half_value_by_definition((uint16_t)low) + (high == 0x7c00u ? 65536.0
                                                                      : half_value_by_definition((uint16_t)high))) /
                          2.0;
        float mid = (float)midpoint; /* both halves have 11 significant bits: the sum is exact */
        assert_true((double)mid == midpoint);
        uint32_t even = (low & 1u) ? high : low;
        float just_below = nextafterf(mid, 0.0f), just_above = nextafterf(mid, INFINITY);
        for (uint32_t sign = 0; sign <= 0x8000u; sign += 0x8000u) {
            float s = sign ? -1.0f : 1.0f;
            uint16_t got_mid = fa_float_to_half(s * mid);
            uint16_t got_below = fa_float_to_half(s * just_below);
            uint16_t got_above = fa_float_to_half(s * just_above);
            if (got_mid != (sign | even) || got_below != (sign | low) || got_above != (sign | high))
                print_error("between %04x and %04x: midpoint %a -> %04x, below -> %04x, above -> %04x\n",
                            sign | low, sign | high, (double)(s * mid), got_mid, got_below, got_above);
            assert_int_equal(got_mid, sign | even);
            assert_int_equal(got_below, sign | low);
            assert_int_equal(got_above, sign | high);
        }
    }
}

static void test_half_overflow_and_subnormal_edges(void **state)
{
    (void)state;
    assert_int_equal(fa_float_to_half(65504.0f), 0x7bffu);
    assert_int_equal(fa_float_to_half(nextafterf(65520.0f, 0.0f)), 0x7bffu);
    assert_int_equal(fa_float_to_half(65520.0f), 0x7c00u);
    assert_int_equal(fa_float_to_half(-65520.0f), 0xfc00u);
    assert_int_equal(fa_float_to_half(1e10f), 0x7c00u);
    assert_int_equal(fa_float_to_half(FLT_MAX), 0x7c00u);
    assert_int_equal(fa_float_to_half(-FLT_MAX), 0xfc00u);
    assert_int_equal(fa_float_to_half(INFINITY), 0x7c00u);
    assert_int_equal(fa_float_to_half(-INFINITY), 0xfc00u);
    assert_int_equal(fa_float_to_half(0.0f), 0x0000u);
    assert_int_equal(fa_float_to_half(-0.0f), 0x8000u);
    /* smallest subnormal 2^-24; half of it ties to 0 (even); anything more rounds up */
    assert_int_equal(fa_float_to_half(ldexpf(1.0f, -24)), 0x0001u);
    assert_int_equal(fa_float_to_half(ldexpf(1.0f, -25)), 0x0000u);
    assert_int_equal(fa_float_to_half(nextafterf(ldexpf(1.0f, -25), 1.0f)), 0x0001u);
    assert_int_equal(fa_float_to_half(-ldexpf(1.0f, -25)), 0x8000u);
    assert_int_equal(fa_float_to_half(ldexpf(3.0f, -25)), 0x0002u);
    /* fp32 subnormals are far below half's range */
    assert_int_equal(fa_float_to_half(FLT_TRUE_MIN), 0x0000u);
    assert_int_equal(fa_float_to_half(-FLT_TRUE_MIN), 0x8000u);
    /* the largest subnormal and the carry into the smallest normal */
    assert_int_equal(fa_float_to_half(ldexpf(1023.0f, -24)), 0x03ffu);
    assert_int_equal(fa_float_to_half(ldexpf(1023.5f, -24)), 0x0400u);
    assert_int_equal(fa_float_to_half(ldexpf(1.0f, -14)), 0x0400u);
    /* a mantissa carry into the next binade */
    assert_int_equal(fa_float_to_half(2047.5f), 0x6800u); /* ties to 2048 (even) */
    assert_int_equal(fa_float_to_half(1.0f), 0x3c00u);
}

static void test_float_nan_becomes_quiet_half_nan(void **state)
{
    (void)state;
    const uint32_t nans[] = {0x7f800001u, 0x7fc00000u, 0x7fffffffu, 0x7f802000u, 0xff800001u, 0xffc00000u,
                             0x7f801fffu};
    for (size_t n = 0; n < sizeof nans / sizeof nans[0]; ++n) {
        uint16_t h = fa_float_to_half(fa_bits_f32(nans[n]));
        assert_true(half_is_nan(h));
        assert_true(h & 0x0200u); /* quiet */
        assert_int_equal(h & 0x8000u, (nans[n] >> 16) & 0x8000u);
    }
    for (int k = 0; k < 100000; ++k) {
        uint32_t bits = 0x7f800000u | (next_random_u32() & 0x807fffffu);
        if ((bits & 0x7fffffu) == 0)
            continue; /* an infinity */
        uint16_t h = fa_float_to_half(fa_bits_f32(bits));
        assert_true(half_is_nan(h));
        assert_int_equal(h & 0x8000u, (bits >> 16) & 0x8000u);
    }
}

static void test_random_floats_round_to_nearest_half(void **state)
{
    (void)state;
    for (int k = 0; k < 1000000; ++k) {
        float x = (k & 1) ? random_float_near_half_range() : fa_bits_f32(next_random_u32());
        if (isnan(x))
            continue;
        uint16_t got = fa_float_to_half(x), expected = half_nearest_by_rint(x);
        if (got != expected)
            print_error("%a -> %04x, expected %04x\n", (double)x, got, expected);
        assert_int_equal(got, expected);
    }
}

/* ---------------------------------------------------------------- bf16 */

static void test_every_bfloat_round_trips_through_float(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 65536u; ++h) {
        float decoded = fa_bfloat_to_float((uint16_t)h);
        assert_int_equal(fa_f32_bits(decoded), h << 16); /* bf16 is the top half of fp32 */
        uint16_t back = fa_float_to_bfloat(decoded);
        if (bfloat_is_nan((uint16_t)h)) {
            assert_true(bfloat_is_nan(back));
            assert_int_equal(back & 0x8000u, h & 0x8000u);
            assert_true(back & 0x0040u); /* quiet */
        } else {
            if (back != h)
                print_error("bf16 %04x came back as %04x\n", h, back);
            assert_int_equal(back, h);
        }
    }
}

static void test_bfloat_halfway_points_round_to_even(void **state)
{
    (void)state;
    for (uint32_t low = 0; low < 0x7f80u; ++low) {
        /* the fp32 pattern with the discarded half exactly 0x8000 is the midpoint */
        uint32_t mid = (low << 16) | 0x8000u;
        uint32_t even = (low & 1u) ? low + 1 : low;
        for (int negative = 0; negative <= 1; ++negative) {
            uint32_t sign = negative ? 0x80000000u : 0u;
            uint16_t s16 = (uint16_t)(sign >> 16);
            assert_int_equal(fa_float_to_bfloat(fa_bits_f32(sign | mid)), s16 | even);
            assert_int_equal(fa_float_to_bfloat(fa_bits_f32(sign | (mid - 1))), s16 | low);
            assert_int_equal(fa_float_to_bfloat(fa_bits_f32(sign | (mid + 1))), s16 | (low + 1));
        }
    }
    /* largest finite 0x7f7f is odd, so its midpoint and FLT_MAX round up to inf */
    assert_int_equal(fa_float_to_bfloat(FLT_MAX), 0x7f80u);
    assert_int_equal(fa_float_to_bfloat(-FLT_MAX), 0xff80u);
    assert_int_equal(fa_float_to_bfloat(INFINITY), 0x7f80u);
    assert_int_equal(fa_float_to_bfloat(-INFINITY), 0xff80u);
    assert_int_equal(fa_float_to_bfloat(-0.0f), 0x8000u);
}

static void test_float_nan_becomes_quiet_bfloat_nan(void **state)
{
    (void)state;
    /* 0x7f800001 and 0x7f80ffff would truncate or round to inf (or to the next binade) without
     * the NaN check */
    const uint32_t nans[] = {0x7f800001u, 0x7f80ffffu, 0x7fffffffu, 0xff800001u, 0x7fc00000u, 0xffffffffu};
    for (size_t n = 0; n < sizeof nans / sizeof nans[0]; ++n) {
        uint16_t h = fa_float_to_bfloat(fa_bits_f32(nans[n]));
        assert_true(bfloat_is_nan(h));
        assert_true(h & 0x0040u);
        assert_int_equal(h & 0x8000u, (nans[n] >> 16) & 0x8000u);
    }
}

static void test_random_floats_round_to_nearest_bfloat(void **state)
{
    (void)state;
    for (int k = 0; k < 1000000; ++k) {
        float x = fa_bits_f32(next_random_u32());
        if (isnan(x))
            continue;
        uint16_t got = fa_float_to_bfloat(x), expected = bfloat_nearest_by_distance(x);
        if (got != expected)
            print_error("%a -> %04x, expected %04x\n", (double)x, got, expected);
        assert_int_equal(got, expected);
    }
}

/* ---------------------------------------------------------------- public wrappers */

/* The library exports these for users and tools; they must be the same functions, bit for bit,
 * NaN payloads included. */
static void test_public_conversions_match_inline_ones(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 65536u; ++h) {
        assert_int_equal(fa_f32_bits(fa_f16_to_f32((uint16_t)h)), fa_f32_bits(fa_half_to_float((uint16_t)h)));
        assert_int_equal(fa_f32_bits(fa_bf16_to_f32((uint16_t)h)), fa_f32_bits(fa_bfloat_to_float((uint16_t)h)));
        /* and the midpoints above each pattern, which exercise the rounding paths */
        float f16_mid = fa_bits_f32(fa_f32_bits(fa_half_to_float((uint16_t)h)) | 0x1000u);
        float bf16_mid = fa_bits_f32((h << 16) | 0x8000u);
        assert_int_equal(fa_f32_to_f16(f16_mid), fa_float_to_half(f16_mid));
        assert_int_equal(fa_f32_to_bf16(bf16_mid), fa_float_to_bfloat(bf16_mid));
    }
    for (int k = 0; k < 200000; ++k) {
        float x = fa_bits_f32(next_random_u32());
        float y = random_float_near_half_range();
        assert_int_equal(fa_f32_to_f16(x), fa_float_to_half(x));
        assert_int_equal(fa_f32_to_f16(y), fa_float_to_half(y));
        assert_int_equal(fa_f32_to_bf16(x), fa_float_to_bfloat(x));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_half_decodes_to_its_ieee_value),
        cmocka_unit_test(test_every_half_round_trips_through_float),
        cmocka_unit_test(test_half_halfway_points_round_to_even),
        cmocka_unit_test(test_half_overflow_and_subnormal_edges),
        cmocka_unit_test(test_float_nan_becomes_quiet_half_nan),
        cmocka_unit_test(test_random_floats_round_to_nearest_half),
        cmocka_unit_test(test_every_bfloat_round_trips_through_float),
        cmocka_unit_test(test_bfloat_halfway_points_round_to_even),
        cmocka_unit_test(test_float_nan_becomes_quiet_bfloat_nan),
        cmocka_unit_test(test_random_floats_round_to_nearest_bfloat),
        cmocka_unit_test(test_public_conversions_match_inline_ones),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
