/* test_blockmask.c: core/blockmask.c, block-sparse masks and the kernels' per-tile lists.
 * Every fa_block_pattern against its definition in flashattn.h, user bitmaps, density, invalid
 * arguments, fa_block_mask_check, and fa_block_lists_build against brute force at kernel tilings
 * that differ from the mask's block size (smaller, larger, not multiples). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static uint64_t rng_state = 0x243f6a8885a308d3ull;

static int64_t random_below(int64_t n)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (int64_t)(((rng_state * 0x2545f4914f6cdd1dull) >> 33) % (uint64_t)n);
}

static int64_t ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

static int bit_at(const fa_block_mask *m, int64_t h, int64_t r, int64_t c)
{
    return m->bits[(h * m->rows + r) * m->cols + c] != 0;
}

/* The definitions in flashattn.h, for the deterministic patterns. */
static int pattern_keeps(fa_block_pattern pattern, int64_t r, int64_t c, int64_t param)
{
    int64_t diff = r - c;
    switch (pattern) {
    case FA_BLOCK_DENSE: return 1;
    case FA_BLOCK_BUTTERFLY: {
        uint64_t x = (uint64_t)(r ^ c);
        int ones = 0;
        for (; x; x >>= 1)
            ones += (int)(x & 1u);
        return ones <= 1;
    }
    case FA_BLOCK_LOCAL: return llabs(diff) <= param;
    case FA_BLOCK_STRIDED: return r == c || diff % param == 0;
    default: return -1;
    }
}

/* ---------------------------------------------------------------- constructors */

static void test_deterministic_patterns_match_definitions(void **state)
{
    (void)state;
    const fa_block_pattern patterns[] = {FA_BLOCK_DENSE, FA_BLOCK_BUTTERFLY, FA_BLOCK_LOCAL, FA_BLOCK_STRIDED};
    const int64_t params[] = {1, 2, 3, 7};
    const int64_t problems[][4] = {
        /* seqlen_q, seqlen_k, block_q, block_k */
        {256, 256, 16, 16}, {1000, 1000, 64, 64}, {100, 300, 16, 32}, {300, 100, 32, 16},
        {1, 1, 128, 128},   {17, 33, 16, 16},     {1024, 512, 128, 64},
    };
    for (size_t pt = 0; pt < sizeof patterns / sizeof patterns[0]; ++pt)
        for (size_t pr = 0; pr < sizeof params / sizeof params[0]; ++pr)
            for (size_t s = 0; s < sizeof problems / sizeof problems[0]; ++s)
                for (int64_t heads = 1; heads <= 3; heads += 2) {
                    fa_block_mask m;
                    fa_status st = fa_block_mask_create(&m, patterns[pt], heads, problems[s][0], problems[s][1],
                                                        problems[s][2], problems[s][3], params[pr], 0.0, 0);
                    assert_int_equal(st, FA_SUCCESS);
                    assert_int_equal(m.heads, heads);
                    assert_int_equal(m.rows, ceil_div(problems[s][0], problems[s][2]));
                    assert_int_equal(m.cols, ceil_div(problems[s][1], problems[s][3]));
                    assert_int_equal(m.block_q, problems[s][2]);
                    assert_int_equal(m.block_k, problems[s][3]);
                    assert_non_null(m.bits);
                    for (int64_t h = 0; h < heads; ++h)
                        for (int64_t r = 0; r < m.rows; ++r)
                            for (int64_t c = 0; c < m.cols; ++c) {
                                int expected = pattern_keeps(patterns[pt], r, c, params[pr]);
                                if (bit_at(&m, h, r, c) != expected)
                                    print_error("pattern %d param %lld head %lld block (%lld, %lld): %d, expected %d\n",
                                                (int)patterns[pt], (long long)params[pr], (long long)h, (long long)r,
                                                (long long)c, bit_at(&m, h, r, c), expected);
                                assert_int_equal(bit_at(&m, h, r, c), expected);
                            }
                    fa_block_mask_destroy(&m);
                    assert_null(m.bits);
                }
}

/* LOCAL with band 0 is the block diagonal; STRIDED with stride 1 keeps everything. */
static void test_pattern_parameter_edges(void **state)
{
    (void)state;
    fa_block_mask m;
    assert_int_equal(fa_block_mask_create(&m, FA_BLOCK_LOCAL, 1, 64, 64, 8, 8, 0, 0.0, 0), FA_SUCCESS);
    for (int64_t r = 0; r < 8; ++r)
        for (int64_t c = 0; c < 8; ++c)
            assert_int_equal(bit_at(&m, 0, r, c), r == c);
    fa_block_mask_destroy(&m);
    assert_int_equal(fa_block_mask_create(&m, FA_BLOCK_STRIDED, 1, 64, 64, 8, 8, 1, 0.0, 0), FA_SUCCESS);
    assert_true(fa_block_mask_density(&m) == 1.0);
    fa_block_mask_destroy(&m);
    /* a butterfly over 8 x 8 blocks keeps 8 * (1 + 3) = 32 of 64 */
    assert_int_equal(fa_block_mask_create(&m, FA_BLOCK_BUTTERFLY, 1, 64, 64, 8, 8, 0, 0.0, 0), FA_SUCCESS);
    assert_true(fa_block_mask_density(&m) == 0.5);
    fa_block_mask_destroy(&m);
}

static int64_t count_kept(const fa_block_mask *m)
{
    int64_t kept = 0;
    for (int64_t i = 0; i < m->heads * m->rows * m->cols; ++i)
        kept += m->bits[i] != 0;
    return kept;
}

/* Square 1000 x 1000 blocks: the kept fraction is density + (1 - density) / 1000 (the forced
 * diagonal), with a standard deviation below 0.0005; a band of 0.003 (6 sigma) catches a wrong
 * comparison or a biased generator. */
static void test_random_pattern_density_and_diagonal(void **state)
{
    (void)state;
    const double densities[] = {0.0, 0.05, 0.3, 0.5, 0.9, 1.0};
    for (size_t k = 0; k < sizeof densities / sizeof densities[0]; ++k) {
        fa_block_mask m;
        assert_int_equal(fa_block_mask_create(&m, FA_BLOCK_RANDOM, 1, 16000, 16000, 16, 16, 0, densities[k], 1234),
                         FA_SUCCESS);
        assert_int_equal(m.rows, 1000);
        assert_int_equal(m.cols, 1000);
        for (int64_t r = 0; r < m.rows; ++r)
            assert_true(bit_at(&m, 0, r, r));
        double expected = densities[k] + (1.0 - densities[k]) / 1000.0;
        double measured = fa_block_mask_density(&m);
        if (fabs(measured - expected) > 0.003)
            print_error("density %.3f: kept fraction %.5f, expected %.5f\n", densities[k], measured, expected);
        assert_true(fabs(measured - expected) <= 0.003);
        if (densities[k] == 0.0)
            assert_int_equal(count_kept(&m), 1000); /* the diagonal only */
        if (densities[k] == 1.0)
            assert_int_equal(count_kept(&m), 1000 * 1000);
        fa_block_mask_destroy(&m);
    }
}

/* The point of the kept diagonal is that no query block row is left with nothing to attend; for
 * rectangular masks ("the diagonal" is then a matter of definition) that is what is checked. */
static void test_random_pattern_never_leaves_a_row_empty(void **state)
{
    (void)state;
    const int64_t shapes[][2] = {{64, 1024}, {1024, 64}, {100, 300}, {16, 16}, {16, 1}, {1, 16}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s)
        for (int64_t heads = 1; heads <= 4; heads += 3) {
            fa_block_mask m;
            assert_int_equal(
                fa_block_mask_create(&m, FA_BLOCK_RANDOM, heads, shapes[s][0], shapes[s][1], 4, 4, 0, 0.0, 99),
                FA_SUCCESS);
            for (int64_t h = 0; h < heads; ++h)
                for (int64_t r = 0; r < m.rows; ++r) {
                    int any = 0;
                    for (int64_t c = 0; c < m.cols; ++c)
                        any |= bit_at(&m, h, r, c);
                    assert_true(any);
                    if (m.rows == m.cols)
                        assert_true(bit_at(&m, h, r, r));
                }
            fa_block_mask_destroy(&m);
        }
}

static void test_random_pattern_is_seeded(void **state)
{
    (void)state;
    fa_block_mask a, b, c;
    assert_int_equal(fa_block_mask_create(&a, FA_BLOCK_RANDOM, 2, 2048, 2048, 32, 32, 0, 0.4, 77), FA_SUCCESS);
    assert_int_equal(fa_block_mask_create(&b, FA_BLOCK_RANDOM, 2, 2048, 2048, 32, 32, 0, 0.4, 77), FA_SUCCESS);
    assert_int_equal(fa_block_mask_create(&c, FA_BLOCK_RANDOM, 2, 2048, 2048, 32, 32, 0, 0.4, 78), FA_SUCCESS);
    int64_t n = a.heads * a.rows * a.cols, differ_ab = 0, differ_ac = 0;
    for (int64_t i = 0; i < n; ++i) {
        differ_ab += (a.bits[i] != 0) != (b.bits[i] != 0);
        differ_ac += (a.bits[i] != 0) != (c.bits[i] != 0);
    }
    assert_int_equal(differ_ab, 0);
    /* independent masks at density 0.4 disagree on 2 * 0.4 * 0.6 = 48% of the off-diagonal */
    assert_true(differ_ac > n / 3);
    fa_block_mask_destroy(&a);
    fa_block_mask_destroy(&b);
    fa_block_mask_destroy(&c);
}

static void test_create_rejects_invalid_arguments(void **state)
{
    (void)state;
    fa_block_mask m;
    assert_int_equal(fa_block_mask_create(NULL, FA_BLOCK_DENSE, 1, 64, 64, 16, 16, 0, 0.0, 0), FA_ERR_INVALID_ARG);
    const struct {
        fa_block_pattern pattern;
        int64_t heads, seqlen_q, seqlen_k, block_q, block_k, param;
        double density;
    } bad[] = {
        {FA_BLOCK_DENSE, 1, 64, 64, 0, 16, 0, 0.0},
        {FA_BLOCK_DENSE, 1, 64, 64, 16, 0, 0, 0.0},
        {FA_BLOCK_DENSE, 1, 64, 64, -16, 16, 0, 0.0},
        {FA_BLOCK_DENSE, 0, 64, 64, 16, 16, 0, 0.0},
        {FA_BLOCK_DENSE, 1, -1, 64, 16, 16, 0, 0.0},
        {FA_BLOCK_DENSE, 1, 64, -1, 16, 16, 0, 0.0},
        {FA_BLOCK_RANDOM, 1, 64, 64, 16, 16, 0, -0.01},
        {FA_BLOCK_RANDOM, 1, 64, 64, 16, 16, 0, 1.01},
        {FA_BLOCK_RANDOM, 1, 64, 64, 16, 16, 0, NAN},
        {FA_BLOCK_RANDOM, 1, 64, 64, 16, 16, 0, INFINITY},
        {FA_BLOCK_STRIDED, 1, 64, 64, 16, 16, 0, 0.0},  /* stride 0: nothing is a multiple of it */
        {FA_BLOCK_STRIDED, 1, 64, 64, 16, 16, -2, 0.0},
        {FA_BLOCK_LOCAL, 1, 64, 64, 16, 16, -1, 0.0},   /* a negative band width */
        {(fa_block_pattern)99, 1, 64, 64, 16, 16, 1, 0.0},
        {(fa_block_pattern)-1, 1, 64, 64, 16, 16, 1, 0.0},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; ++k) {
        memset(&m, 0xa5, sizeof m);
        fa_status st = fa_block_mask_create(&m, bad[k].pattern, bad[k].heads, bad[k].seqlen_q, bad[k].seqlen_k,
                                            bad[k].block_q, bad[k].block_k, bad[k].param, bad[k].density, 0);
        if (st != FA_ERR_INVALID_ARG)
            print_error("invalid case %zu returned %d\n", k, (int)st);
        assert_int_equal(st, FA_ERR_INVALID_ARG);
        /* a failed create leaves a mask that destroy accepts */
        assert_null(m.bits);
        fa_block_mask_destroy(&m);
    }
    /* the density is ignored, not checked, for patterns that do not use it */
    assert_int_equal(fa_block_mask_create(&m, FA_BLOCK_DENSE, 1, 64, 64, 16, 16, 0, 7.0, 0), FA_SUCCESS);
    fa_block_mask_destroy(&m);
    fa_block_mask_destroy(NULL);
}

static void test_from_bitmap_copies(void **state)
{
    (void)state;
    const int64_t heads = 2, rows = 3, cols = 5;
    uint8_t bitmap[2 * 3 * 5];
    for (int i = 0; i < 30; ++i)
        bitmap[i] = (uint8_t)((i * 7) % 3 == 0 ? 0 : i); /* nonzero values other than 1 count as kept */
    fa_block_mask m;
    assert_int_equal(fa_block_mask_from_bitmap(&m, bitmap, heads, rows, cols, 32, 64), FA_SUCCESS);
    assert_int_equal(m.heads, heads);
    assert_int_equal(m.rows, rows);
    assert_int_equal(m.cols, cols);
    assert_int_equal(m.block_q, 32);
    assert_int_equal(m.block_k, 64);
    assert_true(m.bits != bitmap);
    int64_t kept = 0;
    for (int i = 0; i < 30; ++i) {
        assert_int_equal(m.bits[i] != 0, bitmap[i] != 0);
        kept += bitmap[i] != 0;
    }
    assert_true(fa_block_mask_density(&m) == (double)kept / 30.0);
    /* a copy: changing the user's bitmap afterwards changes nothing */
    memset(bitmap, 0, sizeof bitmap);
    assert_true(fa_block_mask_density(&m) == (double)kept / 30.0);
    fa_block_mask_destroy(&m);
}

static void test_from_bitmap_rejects_invalid_arguments(void **state)
{
    (void)state;
    uint8_t bitmap[16] = {1};
    fa_block_mask m;
    assert_int_equal(fa_block_mask_from_bitmap(NULL, bitmap, 1, 4, 4, 16, 16), FA_ERR_INVALID_ARG);
    assert_int_equal(fa_block_mask_from_bitmap(&m, NULL, 1, 4, 4, 16, 16), FA_ERR_INVALID_ARG);
    assert_null(m.bits);
    assert_int_equal(fa_block_mask_from_bitmap(&m, bitmap, 1, 4, 4, 0, 16), FA_ERR_INVALID_ARG);
    assert_int_equal(fa_block_mask_from_bitmap(&m, bitmap, 1, 4, 4, 16, 0), FA_ERR_INVALID_ARG);
    assert_int_equal(fa_block_mask_from_bitmap(&m, bitmap, 0, 4, 4, 16, 16), FA_ERR_INVALID_ARG);
    assert_int_equal(fa_block_mask_from_bitmap(&m, bitmap, 1, -4, 4, 16, 16), FA_ERR_INVALID_ARG);
    assert_int_equal(fa_block_mask_from_bitmap(&m, bitmap, 1, 4, -4, 16, 16), FA_ERR_INVALID_ARG);
    assert_null(m.bits);
    fa_block_mask_destroy(&m);
}

/* flashattn.h: FA_ERR_OVERFLOW is for sizes that do not fit 64 bits. 2^40 x 2^40 blocks are
 * 2^80 bytes: that is an overflow to report (without undefined behaviour on the way), not an
 * allocation to attempt. */
static void test_mask_sizes_that_overflow(void **state)
{
    (void)state;
    const int64_t huge = (int64_t)1 << 40;
    uint8_t bitmap[4] = {1, 1, 1, 1};
    fa_block_mask m;
    assert_int_equal(fa_block_mask_from_bitmap(&m, bitmap, 1, huge, huge, 1, 1), FA_ERR_OVERFLOW);
    assert_null(m.bits);
    assert_int_equal(fa_block_mask_from_bitmap(&m, bitmap, huge, huge, 2, 1, 1), FA_ERR_OVERFLOW);
    /* with a NULL bitmap the answer is INVALID_ARG either way, but reaching it must not
     * multiply rows by cols in signed 64 bits */
    fa_status st = fa_block_mask_from_bitmap(&m, NULL, 1, huge, huge, 1, 1);
    assert_true(st == FA_ERR_INVALID_ARG || st == FA_ERR_OVERFLOW);
    assert_int_equal(fa_block_mask_create(&m, FA_BLOCK_DENSE, 1, huge, huge, 1, 1, 0, 0.0, 0), FA_ERR_OVERFLOW);
    assert_null(m.bits);
    assert_int_equal(fa_block_mask_create(&m, FA_BLOCK_LOCAL, huge, huge, 1 << 20, 1, 1, 1, 0.0, 0),
                     FA_ERR_OVERFLOW);
    /* the largest sequence lengths: counting the blocks must not overflow either */
    assert_int_equal(fa_block_mask_create(&m, FA_BLOCK_DENSE, 1, INT64_MAX, INT64_MAX, 2, 3, 0, 0.0, 0),
                     FA_ERR_OVERFLOW);
    fa_block_mask_destroy(&m);
}

static void test_density(void **state)
{
    (void)state;
    uint8_t bitmap[8] = {1, 0, 0, 1, 0, 0, 1, 0};
    fa_block_mask m;
    assert_int_equal(fa_block_mask_from_bitmap(&m, bitmap, 1, 2, 4, 16, 16), FA_SUCCESS);
    assert_true(fa_block_mask_density(&m) == 0.375);
    fa_block_mask_destroy(&m);
    assert_int_equal(fa_block_mask_create(&m, FA_BLOCK_DENSE, 4, 100, 50, 16, 16, 0, 0.0, 0), FA_SUCCESS);
    assert_true(fa_block_mask_density(&m) == 1.0);
    fa_block_mask_destroy(&m);
    /* a destroyed (empty) mask has nothing kept, and the answer stays in [0, 1] */
    double empty = fa_block_mask_density(&m);
    assert_true(empty >= 0.0 && empty <= 1.0);
    double none = fa_block_mask_density(NULL);
    assert_true(none >= 0.0 && none <= 1.0);
}

/* ---------------------------------------------------------------- validation against a problem */

static void test_mask_check_against_problem(void **state)
{
    (void)state;
    fa_block_mask m;
    char why[200];
    assert_int_equal(fa_block_mask_create(&m, FA_BLOCK_DENSE, 1, 100, 200, 16, 32, 0, 0.0, 0), FA_SUCCESS);
    /* 7 x 7 blocks: covers up to 112 x 224 */
    assert_int_equal(fa_block_mask_check(&m, 8, 100, 200, why, sizeof why), FA_SUCCESS);
    assert_int_equal(fa_block_mask_check(&m, 8, 112, 224, why, sizeof why), FA_SUCCESS);
    assert_int_equal(fa_block_mask_check(&m, 8, 1, 1, why, sizeof why), FA_SUCCESS);
    why[0] = '\0';
    assert_int_equal(fa_block_mask_check(&m, 8, 113, 200, why, sizeof why), FA_ERR_INVALID_ARG);
    assert_true(strlen(why) > 0);
    assert_int_equal(fa_block_mask_check(&m, 8, 100, 225, why, sizeof why), FA_ERR_INVALID_ARG);
    fa_block_mask_destroy(&m);
    /* heads must be 1 or heads_q */
    assert_int_equal(fa_block_mask_create(&m, FA_BLOCK_DENSE, 4, 64, 64, 16, 16, 0, 0.0, 0), FA_SUCCESS);
    assert_int_equal(fa_block_mask_check(&m, 4, 64, 64, why, sizeof why), FA_SUCCESS);
    why[0] = '\0';
    assert_int_equal(fa_block_mask_check(&m, 8, 64, 64, why, sizeof why), FA_ERR_INVALID_ARG);
    assert_non_null(strstr(why, "heads"));
    assert_int_equal(fa_block_mask_check(&m, 2, 64, 64, why, sizeof why), FA_ERR_INVALID_ARG);
    /* a NULL why buffer is allowed */
    assert_int_equal(fa_block_mask_check(&m, 2, 64, 64, NULL, 0), FA_ERR_INVALID_ARG);
    /* hand-built masks: zero block sizes and missing bits */
    fa_block_mask bad = m;
    bad.block_q = 0;
    assert_int_equal(fa_block_mask_check(&bad, 4, 64, 64, why, sizeof why), FA_ERR_INVALID_ARG);
    bad = m;
    bad.bits = NULL;
    assert_int_equal(fa_block_mask_check(&bad, 4, 64, 64, why, sizeof why), FA_ERR_INVALID_ARG);
    fa_block_mask_destroy(&m);
}

/* ---------------------------------------------------------------- per-tile lists */

/* Checks one set of lists against brute force over every element of every kernel tile. */
static void check_lists_against_brute_force(const fa_block_mask *m, int64_t heads_q, int64_t seqlen_q,
                                            int64_t seqlen_k, int64_t block_q, int64_t block_k)
{
    fa_block_lists lists;
    assert_int_equal(fa_block_lists_build(m, heads_q, seqlen_q, seqlen_k, block_q, block_k, &lists), FA_SUCCESS);
    int64_t nq = ceil_div(seqlen_q, block_q), nk = ceil_div(seqlen_k, block_k);
    assert_int_equal(lists.heads, m->heads);
    assert_int_equal(lists.nq, nq);
    assert_int_equal(lists.nk, nk);
    assert_int_equal(lists.block_q, block_q);
    assert_int_equal(lists.block_k, block_k);
    assert_int_equal(lists.row_ptr[0], 0);
    assert_int_equal(lists.row_ptr[m->heads * nq], lists.nnz);
    uint8_t *listed = malloc((size_t)(nk > 0 ? nk : 1));
    uint8_t *listed_class = malloc((size_t)(nk > 0 ? nk : 1));
    assert_non_null(listed);
    assert_non_null(listed_class);
    for (int64_t mh = 0; mh < m->heads; ++mh)
        for (int64_t qt = 0; qt < nq; ++qt) {
            int64_t begin = lists.row_ptr[mh * nq + qt], end = lists.row_ptr[mh * nq + qt + 1];
            assert_true(begin <= end);
            memset(listed, 0, (size_t)(nk > 0 ? nk : 1));
            for (int64_t e = begin; e < end; ++e) {
                int64_t kt = lists.col[e];
                assert_true(kt >= 0 && kt < nk);
                /* ascending, so no duplicates and the key walk keeps the dense order */
                if (e > begin)
                    assert_true(lists.col[e] > lists.col[e - 1]);
                listed[kt] = 1;
                listed_class[kt] = lists.cls[e];
            }
            for (int64_t kt = 0; kt < nk; ++kt) {
                int64_t kept = 0, in_bounds = 0;
                for (int64_t i = qt * block_q; i < (qt + 1) * block_q && i < seqlen_q; ++i)
                    for (int64_t j = kt * block_k; j < (kt + 1) * block_k && j < seqlen_k; ++j) {
                        ++in_bounds;
                        kept += bit_at(m, mh, i / m->block_q, j / m->block_k);
                    }
                int expected_listed = kept > 0;
                if (listed[kt] != expected_listed ||
                    (listed[kt] && listed_class[kt] != (kept == in_bounds ? FA_TILE_FULL : FA_TILE_PARTIAL)))
                    print_error("mask %lldx%lld blocks of %lldx%lld, kernel tile %lldx%lld, head %lld tile (%lld, %lld): "
                                "listed %d class %d, but %lld of %lld elements kept\n",
                                (long long)m->rows, (long long)m->cols, (long long)m->block_q, (long long)m->block_k,
                                (long long)block_q, (long long)block_k, (long long)mh, (long long)qt, (long long)kt,
                                listed[kt], listed[kt] ? listed_class[kt] : -1, (long long)kept, (long long)in_bounds);
                assert_int_equal(listed[kt], expected_listed);
                if (listed[kt])
                    assert_int_equal(listed_class[kt], kept == in_bounds ? FA_TILE_FULL : FA_TILE_PARTIAL);
            }
        }
    free(listed);
    free(listed_class);
    fa_block_lists_free(&lists);
    assert_null(lists.row_ptr);
}

static void test_lists_match_brute_force(void **state)
{
    (void)state;
    /* kernel tiles relative to mask blocks of 16 x 24: equal, smaller, larger, and neither
     * multiples nor divisors */
    const int64_t kernel_tiles[][2] = {{16, 24}, {8, 8}, {32, 48}, {64, 128}, {7, 13}, {20, 30}, {1, 1}, {128, 5}};
    int64_t checked = 0;
    for (int trial = 0; trial < 60; ++trial) {
        int64_t seqlen_q = 1 + random_below(150), seqlen_k = 1 + random_below(150);
        int64_t heads_q = 1 + random_below(3);
        int64_t mask_heads = random_below(2) ? 1 : heads_q;
        fa_block_mask m;
        if (trial % 3 == 0) {
            /* a user bitmap, sometimes with more rows / cols than the problem needs */
            int64_t rows = ceil_div(seqlen_q, 16) + random_below(2), cols = ceil_div(seqlen_k, 24) + random_below(2);
            uint8_t *bitmap = malloc((size_t)(mask_heads * rows * cols));
            assert_non_null(bitmap);
            for (int64_t i = 0; i < mask_heads * rows * cols; ++i)
                bitmap[i] = (uint8_t)(random_below(10) < 6);
            assert_int_equal(fa_block_mask_from_bitmap(&m, bitmap, mask_heads, rows, cols, 16, 24), FA_SUCCESS);
            free(bitmap);
        } else {
            fa_block_pattern pattern = (fa_block_pattern)(trial % 5);
            assert_int_equal(fa_block_mask_create(&m, pattern, mask_heads, seqlen_q, seqlen_k, 16, 24,
                                                  1 + random_below(3), 0.5, (uint64_t)trial),
                             FA_SUCCESS);
        }
        for (size_t t = 0; t < sizeof kernel_tiles / sizeof kernel_tiles[0]; ++t) {
            check_lists_against_brute_force(&m, heads_q, seqlen_q, seqlen_k, kernel_tiles[t][0], kernel_tiles[t][1]);
            ++checked;
        }
        fa_block_mask_destroy(&m);
    }
    assert_int_equal(checked, 60 * 8);
}

/* Whole-mask answers that are easy to see: a dense mask lists every tile as FULL, an all-zero
 * mask lists nothing. */
static void test_lists_of_dense_and_empty_masks(void **state)
{
    (void)state;
    fa_block_mask dense;
    assert_int_equal(fa_block_mask_create(&dense, FA_BLOCK_DENSE, 1, 100, 70, 16, 16, 0, 0.0, 0), FA_SUCCESS);
    fa_block_lists lists;
    assert_int_equal(fa_block_lists_build(&dense, 4, 100, 70, 32, 32, &lists), FA_SUCCESS);
    assert_int_equal(lists.nnz, 4 * 3);
    for (int64_t e = 0; e < lists.nnz; ++e)
        assert_int_equal(lists.cls[e], FA_TILE_FULL);
    fa_block_lists_free(&lists);
    fa_block_mask_destroy(&dense);

    uint8_t zeros[7 * 5] = {0};
    fa_block_mask empty;
    assert_int_equal(fa_block_mask_from_bitmap(&empty, zeros, 1, 7, 5, 16, 16), FA_SUCCESS);
    assert_int_equal(fa_block_lists_build(&empty, 2, 100, 70, 32, 32, &lists), FA_SUCCESS);
    assert_int_equal(lists.nnz, 0);
    for (int64_t qt = 0; qt <= lists.nq; ++qt)
        assert_int_equal(lists.row_ptr[qt], 0);
    fa_block_lists_free(&lists);
    fa_block_mask_destroy(&empty);
    fa_block_lists_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_deterministic_patterns_match_definitions),
        cmocka_unit_test(test_pattern_parameter_edges),
        cmocka_unit_test(test_random_pattern_density_and_diagonal),
        cmocka_unit_test(test_random_pattern_never_leaves_a_row_empty),
        cmocka_unit_test(test_random_pattern_is_seeded),
        cmocka_unit_test(test_create_rejects_invalid_arguments),
        cmocka_unit_test(test_from_bitmap_copies),
        cmocka_unit_test(test_from_bitmap_rejects_invalid_arguments),
        cmocka_unit_test(test_mask_sizes_that_overflow),
        cmocka_unit_test(test_density),
        cmocka_unit_test(test_mask_check_against_problem),
        cmocka_unit_test(test_lists_match_brute_force),
        cmocka_unit_test(test_lists_of_dense_and_empty_masks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
