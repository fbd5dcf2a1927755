/* test_philox.c: core/philox.h, the one definition of which attention elements dropout drops.
 * Philox4x32-10 against Random123's published known-answer vectors, the counter layout and
 * keep rule of fa_dropout_block / fa_dropout_keep, the integer threshold, and the statistics. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>

#include "philox.h"

typedef struct philox_kat {
    uint32_t ctr[4];
    uint32_t key[2];
    uint32_t expected[4];
} philox_kat;

/* From Random123's kat_vectors ("philox4x32 10 ..."): a wrong round count, multiplier, Weyl
 * constant or key-bump order changes every word. */
static const philox_kat random123_vectors[] = {
    {{0x00000000u, 0x00000000u, 0x00000000u, 0x00000000u},
     {0x00000000u, 0x00000000u},
     {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
    {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
     {0xffffffffu, 0xffffffffu},
     {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
    {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
     {0xa4093822u, 0x299f31d0u},
     {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
};

static void test_philox_matches_random123_known_answers(void **state)
{
    (void)state;
    for (size_t v = 0; v < sizeof random123_vectors / sizeof random123_vectors[0]; ++v) {
        const philox_kat *kat = &random123_vectors[v];
        fa_philox4 ctr = {{kat->ctr[0], kat->ctr[1], kat->ctr[2], kat->ctr[3]}};
        fa_philox4 out = fa_philox4x32_10(ctr, kat->key[0], kat->key[1]);
        for (int w = 0; w < 4; ++w) {
            if (out.v[w] != kat->expected[w])
                print_error("vector %zu word %d: got %08x, expected %08x\n", v, w, out.v[w],
                            kat->expected[w]);
            assert_int_equal(out.v[w], kat->expected[w]);
        }
    }
}

/* The counter layout is part of the cross-backend contract (docs/options.md): (j/4, i, lo(stream),
 * hi(stream)) with stream = offset + b*heads_q + h, key = (lo(seed), hi(seed)). Rebuild it by
 * hand, including a stream that wraps past 2^64 and needs its high word. */
static void test_dropout_block_uses_documented_counter_layout(void **state)
{
    (void)state;
    const struct {
        uint64_t seed, offset, batch, heads_q, head, row, col;
    } cases[] = {
        {0, 0, 0, 1, 0, 0, 0},
        {0x123456789abcdef0ull, 7, 3, 16, 5, 1000, 4095},
        {0xffffffffffffffffull, 0xfffffffffffffff0ull, 2, 8, 3, 1, 2},   /* stream wraps to 3 */
        {42, 0x00000001fffffff0ull, 1, 32, 31, 0xffffffffull, 0x3ffffffffull}, /* hi(stream) != 0 */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
        uint64_t stream = cases[c].offset + cases[c].batch * cases[c].heads_q + cases[c].head;
        fa_philox4 ctr = {{(uint32_t)(cases[c].col >> 3), (uint32_t)cases[c].row, (uint32_t)stream,
                           (uint32_t)(stream >> 32)}};
        fa_philox4 expected =
            fa_philox4x32_10(ctr, (uint32_t)cases[c].seed, (uint32_t)(cases[c].seed >> 32));
        fa_philox4 got = fa_dropout_block(cases[c].seed, cases[c].offset, cases[c].batch, cases[c].heads_q,
                                          cases[c].head, cases[c].row, cases[c].col);
        for (int w = 0; w < 4; ++w)
            assert_int_equal(got.v[w], expected.v[w]);
    }
}

/* Kernels that walk a row fetch one block per eight columns and take each key's 16 bits
 * themselves (key j: word (j % 8) / 2, bits 16 (j % 2)); they must reach exactly
 * fa_dropout_keep's verdict for every column and threshold. */
static void test_dropout_keep_agrees_with_block_words(void **state)
{
    (void)state;
    const uint32_t thresholds[] = {0u, 1u, 0x2b85u, 0x8000u, 0xfffeu, 0xffffu};
    const uint64_t seed = 0x0123456789abcdefull, offset = 99;
    for (uint64_t b = 0; b < 2; ++b)
        for (uint64_t h = 0; h < 3; ++h)
            for (uint64_t i = 0; i < 5; ++i)
                for (uint64_t j0 = 0; j0 < 64; j0 += 8) {
                    fa_philox4 words = fa_dropout_block(seed, offset, b, 3, h, i, j0);
                    for (uint64_t j = j0; j < j0 + 8; ++j) {
                        /* any column of the same group of eight gives the same block */
                        fa_philox4 again = fa_dropout_block(seed, offset, b, 3, h, i, j);
                        for (int w = 0; w < 4; ++w)
                            assert_int_equal(again.v[w], words.v[w]);
                        const uint32_t word = words.v[(j % 8) / 2];
                        const uint32_t bits = (j % 2) ? word >> 16 : word & 0xffffu;
                        assert_int_equal(fa_dropout_word(words, j), word);
                        assert_int_equal(fa_dropout_bits(word, j), bits);
                        for (size_t t = 0; t < sizeof thresholds / sizeof thresholds[0]; ++t)
                            assert_int_equal(fa_dropout_keep(seed, offset, b, 3, h, i, j, thresholds[t]),
                                             bits >= thresholds[t]);
                        /* the boundary: bits equal to the threshold are kept, one below dropped */
                        assert_true(fa_dropout_keep(seed, offset, b, 3, h, i, j, bits));
                        if (bits < 0xffffu)
                            assert_false(fa_dropout_keep(seed, offset, b, 3, h, i, j, bits + 1u));
                    }
                }
}

/* threshold = min(floor(p * 2^16), 2^16 - 1), 0 for p <= 0: checked against exact integer
 * arithmetic on p's binary expansion (p * 2^16 is exact in double). */
static void test_dropout_threshold_is_floor_of_p_times_2_16(void **state)
{
    (void)state;
    assert_int_equal(fa_dropout_threshold(0.0), 0u);
    assert_int_equal(fa_dropout_threshold(-0.0), 0u);
    assert_int_equal(fa_dropout_threshold(-0.5), 0u);
    assert_int_equal(fa_dropout_threshold(NAN), 0u);
    /* tinier than one step: floor gives 0, which means "no dropout" in fa_problem */
    assert_int_equal(fa_dropout_threshold(1e-12), 0u);
    assert_int_equal(fa_dropout_threshold(ldexp(1.0, -17)), 0u);
    assert_int_equal(fa_dropout_threshold(ldexp(1.0, -16) - ldexp(1.0, -60)), 0u);
    /* exactly one step and just under two */
    assert_int_equal(fa_dropout_threshold(ldexp(1.0, -16)), 1u);
    assert_int_equal(fa_dropout_threshold(ldexp(1.0, -15) - ldexp(1.0, -60)), 1u);
    assert_int_equal(fa_dropout_threshold(0.25), 0x4000u);
    assert_int_equal(fa_dropout_threshold(0.5), 0x8000u);
    assert_int_equal(fa_dropout_threshold(0.75), 0xc000u);
    /* p close to 1: the largest thresholds, never wrapping to 0 */
    assert_int_equal(fa_dropout_threshold(1.0 - ldexp(1.0, -15)), 0xfffeu);
    assert_int_equal(fa_dropout_threshold(1.0 - ldexp(1.0, -16)), 0xffffu);
    assert_int_equal(fa_dropout_threshold(1.0 - 1e-12), 0xffffu);
    assert_int_equal(fa_dropout_threshold(nextafter(1.0, 0.0)), 0xffffu);
    assert_int_equal(fa_dropout_threshold(1.0), 0xffffu);
    /* a sweep: floor of the exact product, and monotone */
    uint32_t previous = 0;
    for (int k = 0; k <= 100000; ++k) {
        double p = (double)k / 100000.0;
        uint32_t t = fa_dropout_threshold(p);
        double exact = floor(p * 65536.0); /* exact: p has 53 bits, the scale is 2^16 */
        uint32_t expected = exact >= 65535.0 ? 0xffffu : (uint32_t)exact;
        if (t != expected)
            print_error("p = %.17g: threshold %u, expected %u\n", p, t, expected);
        assert_int_equal(t, expected);
        assert_true(t >= previous);
        previous = t;
    }
}

/* Threshold 0 must keep everything: r >= 0 is always true. The largest threshold keeps only
 * r == 2^16 - 1, one key in 65,536: a few of 16,384, never many. */
static void test_dropout_threshold_edges_keep_all_or_almost_none(void **state)
{
    (void)state;
    uint32_t t_zero = fa_dropout_threshold(0.0);
    uint32_t t_tiny = fa_dropout_threshold(1e-12);
    uint32_t t_near_one = fa_dropout_threshold(1.0 - 1e-12);
    int64_t kept_near_one = 0;
    for (uint64_t i = 0; i < 128; ++i)
        for (uint64_t j = 0; j < 128; ++j) {
            assert_true(fa_dropout_keep(7, 0, 0, 1, 0, i, j, t_zero));
            assert_true(fa_dropout_keep(7, 0, 0, 1, 0, i, j, t_tiny));
            kept_near_one += fa_dropout_keep(7, 0, 0, 1, 0, i, j, t_near_one);
        }
    /* expected 0.25 of 16,384; more than 4 has probability below 1e-5 */
    assert_true(kept_near_one <= 4);
}

/* Over 1e6 elements the dropped fraction of p = 0.17 is 0.17 +- 0.00038 (one sigma), so a 1%
 * relative band (0.0017, 4.5 sigma) passes a correct generator and catches a biased one. */
static void test_dropped_fraction_matches_p(void **state)
{
    (void)state;
    const double p = 0.17;
    uint32_t threshold = fa_dropout_threshold(p);
    int64_t dropped = 0, total = 0;
    for (uint64_t b = 0; b < 2; ++b)
        for (uint64_t h = 0; h < 2; ++h)
            for (uint64_t i = 0; i < 250; ++i)
                for (uint64_t j0 = 0; j0 < 1000; j0 += 8) {
                    fa_philox4 words = fa_dropout_block(0xdeadbeefcafef00dull, 12345, b, 2, h, i, j0);
                    for (int w = 0; w < 4; ++w)
                        dropped += (words.v[w] & 0xffffu) < threshold;
                    for (int w = 0; w < 4; ++w)
                        dropped += (words.v[w] >> 16) < threshold;
                    total += 8;
                }
    assert_int_equal(total, 1000000);
    double fraction = (double)dropped / (double)total;
    if (fabs(fraction - p) > 0.01 * p)
        print_error("dropped fraction %.6f, expected %.6f within 1%%\n", fraction, p);
    assert_true(fabs(fraction - p) <= 0.01 * p);
}

/* How many of 4 * 64 * 8 words differ between two parameter sets; independent streams differ in
 * all but about 2^-32 of them. */
static int64_t count_different_words(uint64_t seed_a, uint64_t offset_a, uint64_t batch_a, uint64_t head_a,
                                     uint64_t seed_b, uint64_t offset_b, uint64_t batch_b, uint64_t head_b)
{
    int64_t different = 0;
    for (uint64_t i = 0; i < 8; ++i)
        for (uint64_t j = 0; j < 512; j += 8) {
            fa_philox4 a = fa_dropout_block(seed_a, offset_a, batch_a, 4, head_a, i, j);
            fa_philox4 b = fa_dropout_block(seed_b, offset_b, batch_b, 4, head_b, i, j);
            for (int w = 0; w < 4; ++w)
                different += a.v[w] != b.v[w];
        }
    return different;
}

static void test_seeds_offsets_heads_give_different_streams(void **state)
{
    (void)state;
    const int64_t words = 8 * 64 * 4;
    /* same parameters: the same stream (the generator is a pure function) */
    assert_int_equal(count_different_words(1, 0, 0, 0, 1, 0, 0, 0), 0);
    /* seeds differing only in the low or only in the high key word */
    assert_true(count_different_words(1, 0, 0, 0, 2, 0, 0, 0) >= words - 2);
    assert_true(count_different_words(1, 0, 0, 0, 1 | (1ull << 32), 0, 0, 0) >= words - 2);
    /* offsets, heads and batches each select another stream */
    assert_true(count_different_words(1, 0, 0, 0, 1, 1, 0, 0) >= words - 2);
    assert_true(count_different_words(1, 0, 0, 0, 1, 0, 0, 1) >= words - 2);
    assert_true(count_different_words(1, 0, 0, 0, 1, 0, 1, 0) >= words - 2);
    assert_true(count_different_words(1, 0, 0, 0, 1, 1ull << 32, 0, 0) >= words - 2);
    /* stream = offset + b*heads_q + h, so offset advances the stream exactly like one more head:
     * a caller reserves batch*heads_q streams per call by bumping offset by that much */
    assert_int_equal(count_different_words(1, 1, 0, 0, 1, 0, 0, 1), 0);
    assert_int_equal(count_different_words(1, 4, 0, 0, 1, 0, 1, 0), 0);
}

/* Rows and columns: neighbouring rows and neighbouring column groups are different blocks. */
static void test_rows_and_column_groups_differ(void **state)
{
    (void)state;
    fa_philox4 base = fa_dropout_block(5, 0, 0, 1, 0, 10, 20);
    fa_philox4 next_row = fa_dropout_block(5, 0, 0, 1, 0, 11, 20);
    fa_philox4 next_group = fa_dropout_block(5, 0, 0, 1, 0, 10, 24);
    int same_row = 0, same_group = 0;
    for (int w = 0; w < 4; ++w) {
        same_row += base.v[w] == next_row.v[w];
        same_group += base.v[w] == next_group.v[w];
    }
    assert_int_equal(same_row, 0);
    assert_int_equal(same_group, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_philox_matches_random123_known_answers),
        cmocka_unit_test(test_dropout_block_uses_documented_counter_layout),
        cmocka_unit_test(test_dropout_keep_agrees_with_block_words),
        cmocka_unit_test(test_dropout_threshold_is_floor_of_p_times_2_16),
        cmocka_unit_test(test_dropout_threshold_edges_keep_all_or_almost_none),
        cmocka_unit_test(test_dropped_fraction_matches_p),
        cmocka_unit_test(test_seeds_offsets_heads_give_different_streams),
        cmocka_unit_test(test_rows_and_column_groups_differ),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
