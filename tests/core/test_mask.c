/* test_mask.c: core/mask.h, which (query, key) elements are visible and the class of a tile.
 * fa_mask_visible against docs/options.md's definition written out independently, and
 * fa_mask_classify_tile against brute force over many random problems and tiles: EMPTY and FULL
 * must be sound (kernels skip EMPTY tiles and drop the per-element test on FULL ones) and, as
 * measured here, exact. Also fa_mask_make's folding of causal into the right window. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>

#include "mask.h"

static uint64_t rng_state = 0xfeedfacecafebeefull;

static int64_t random_below(int64_t n)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (int64_t)(((rng_state * 0x2545f4914f6cdd1dull) >> 33) % (uint64_t)n);
}

/* The rule as the public header states it, in the user's terms (causal and window separately,
 * any negative window meaning unbounded), written as the signed distance of key j from query i's
 * diagonal: dist = j - (i + seqlen_k - seqlen_q). With i and j inside the sequence, dist lies in
 * (-seqlen_k, seqlen_q), so no window bound, however large, can overflow the comparison. */
static int visible_by_definition(int64_t seqlen_q, int64_t seqlen_k, int causal, int64_t left, int64_t right,
                                 int64_t i, int64_t j)
{
    if (i < 0 || i >= seqlen_q || j < 0 || j >= seqlen_k)
        return 0;
    int64_t dist = (j - seqlen_k) - (i - seqlen_q);
    if (causal && dist > 0)
        return 0;
    if (left >= 0 && dist < -left)
        return 0;
    if (right >= 0 && dist > right)
        return 0;
    return 1;
}

typedef struct random_problem {
    int64_t seqlen_q, seqlen_k, left, right;
    int causal;
} random_problem;

/* Small bounds, negative ones (any negative value means unbounded), and bounds at the edge of
 * mattering (around seqlen_q + seqlen_k) or near INT64_MAX, where diagonal +- bound overflows. */
static int64_t random_window(int64_t seqlen_q, int64_t seqlen_k)
{
    switch (random_below(9)) {
    case 0: return -1;
    case 1: return -1 - random_below(5);
    case 2: return INT64_MIN + random_below(2);
    case 3: return 0;
    case 4: return 1;
    case 5: return seqlen_q + seqlen_k - 2 + random_below(4);
    case 6: return INT64_MAX - random_below(3);
    default: return random_below(40);
    }
}

static random_problem make_random_problem(int trial)
{
    random_problem p;
    /* every fourth problem has a single query row (decoding); lengths cover sq > sk and sq < sk */
    p.seqlen_q = trial % 4 == 0 ? 1 : 1 + random_below(48);
    p.seqlen_k = 1 + random_below(48);
    p.causal = (int)random_below(2);
    p.left = random_window(p.seqlen_q, p.seqlen_k);
    p.right = random_window(p.seqlen_q, p.seqlen_k);
    return p;
}

static void test_visible_matches_definition(void **state)
{
    (void)state;
    for (int trial = 0; trial < 3000; ++trial) {
        random_problem p = make_random_problem(trial);
        fa_mask m = fa_mask_make(p.seqlen_q, p.seqlen_k, p.causal, p.left, p.right);
        for (int64_t i = 0; i < p.seqlen_q; ++i)
            for (int64_t j = -2; j < p.seqlen_k + 2; ++j) {
                int expected = visible_by_definition(p.seqlen_q, p.seqlen_k, p.causal, p.left, p.right, i, j);
                int got = fa_mask_visible(&m, i, j);
                if (got != expected)
                    print_error("sq %lld sk %lld causal %d left %lld right %lld: (%lld, %lld) visible %d, "
                                "expected %d\n",
                                (long long)p.seqlen_q, (long long)p.seqlen_k, p.causal, (long long)p.left,
                                (long long)p.right, (long long)i, (long long)j, got, expected);
                assert_int_equal(got, expected);
            }
    }
}

/* A random tile, sometimes reaching past the sequence ends, sometimes a single element. */
static void random_tile(const random_problem *p, int64_t *q0, int64_t *q1, int64_t *k0, int64_t *k1)
{
    *q0 = random_below(p->seqlen_q + 4);
    *q1 = *q0 + 1 + random_below(20);
    *k0 = random_below(p->seqlen_k + 4);
    *k1 = *k0 + 1 + random_below(20);
}

/* fa_mask_rows_range: for rows [q0, q1) inside the sequence, every visible key lies in
 * [lo, hi), and every key of [lo, hi) is visible to some row (no gaps); lo >= hi iff no row of
 * them sees a key. */
static void test_rows_range_is_union_of_rows(void **state)
{
    (void)state;
    for (int trial = 0; trial < 3000; ++trial) {
        random_problem p = make_random_problem(trial);
        fa_mask m = fa_mask_make(p.seqlen_q, p.seqlen_k, p.causal, p.left, p.right);
        for (int t = 0; t < 20; ++t) {
            const int64_t q0 = random_below(p.seqlen_q);
            const int64_t q1 = q0 + 1 + random_below(p.seqlen_q - q0);
            int64_t lo, hi;
            fa_mask_rows_range(&m, q0, q1, &lo, &hi);
            int any = 0;
            for (int64_t j = 0; j < p.seqlen_k; ++j) {
                int seen = 0;
                for (int64_t i = q0; i < q1 && !seen; ++i)
                    seen = visible_by_definition(p.seqlen_q, p.seqlen_k, p.causal, p.left, p.right, i, j);
                any |= seen;
                assert_int_equal(seen, j >= lo && j < hi);
            }
            assert_int_equal(any, lo < hi);
        }
    }
}

static void test_tile_class_matches_brute_force(void **state)
{
    (void)state;
    int64_t tiles_checked = 0, empty_by_brute_force = 0, empty_classified = 0;
    int64_t full_by_brute_force = 0, full_classified = 0;
    for (int trial = 0; trial < 3000; ++trial) {
        random_problem p = make_random_problem(trial);
        fa_mask m = fa_mask_make(p.seqlen_q, p.seqlen_k, p.causal, p.left, p.right);
        for (int t = 0; t < 60; ++t) {
            int64_t q0, q1, k0, k1;
            random_tile(&p, &q0, &q1, &k0, &k1);
            int64_t in_bounds = 0, visible = 0;
            for (int64_t i = q0; i < q1; ++i)
                for (int64_t j = k0; j < k1; ++j) {
                    if (i >= p.seqlen_q || j >= p.seqlen_k)
                        continue;
                    ++in_bounds;
                    visible += visible_by_definition(p.seqlen_q, p.seqlen_k, p.causal, p.left, p.right, i, j);
                }
            fa_tile_class cls = fa_mask_classify_tile(&m, q0, q1, k0, k1);
            int truly_empty = visible == 0;
            int truly_full = in_bounds > 0 && visible == in_bounds;
            if ((cls == FA_TILE_EMPTY && !truly_empty) || (cls == FA_TILE_FULL && !truly_full) ||
                (truly_empty && cls != FA_TILE_EMPTY) || (truly_full && cls != FA_TILE_FULL))
                print_error("sq %lld sk %lld causal %d left %lld right %lld tile [%lld,%lld)x[%lld,%lld): "
                            "class %d, %lld of %lld in-bounds elements visible\n",
                            (long long)p.seqlen_q, (long long)p.seqlen_k, p.causal, (long long)p.left,
                            (long long)p.right, (long long)q0, (long long)q1, (long long)k0, (long long)k1,
                            (int)cls, (long long)visible, (long long)in_bounds);
            /* soundness: skipping an EMPTY tile or not masking inside a FULL one is only safe if
             * the class is true */
            if (cls == FA_TILE_EMPTY)
                assert_true(truly_empty);
            if (cls == FA_TILE_FULL)
                assert_true(truly_full);
            /* exactness: causal / window / bounds are monotone staircases, so the first and last
             * rows decide; an inexact EMPTY would waste work, an inexact FULL a masking pass */
            if (truly_empty)
                assert_int_equal(cls, FA_TILE_EMPTY);
            if (truly_full)
                assert_int_equal(cls, FA_TILE_FULL);
            ++tiles_checked;
            empty_by_brute_force += truly_empty;
            empty_classified += cls == FA_TILE_EMPTY;
            full_by_brute_force += truly_full;
            full_classified += cls == FA_TILE_FULL;
        }
    }
    print_message("%lld tiles: EMPTY %lld (brute force %lld), FULL %lld (brute force %lld)\n",
                  (long long)tiles_checked, (long long)empty_classified, (long long)empty_by_brute_force,
                  (long long)full_classified, (long long)full_by_brute_force);
    /* the random grid must actually exercise every class */
    assert_true(empty_by_brute_force > 1000);
    assert_true(full_by_brute_force > 1000);
    assert_true(tiles_checked - empty_by_brute_force - full_by_brute_force > 1000);
}

/* Tiles of a regular kernel grid (what the kernels really ask for), including the ragged last
 * tile, on the classic shapes. */
static void test_tile_grid_on_standard_shapes(void **state)
{
    (void)state;
    const int64_t shapes[][2] = {{128, 128}, {1, 128}, {128, 1}, {100, 37}, {37, 100}, {64, 65}, {0, 16}, {16, 0}};
    const int64_t windows[][2] = {{-1, -1}, {0, 0}, {16, -1}, {-1, 16}, {3, 5}, {64, 64}};
    const int64_t blocks[][2] = {{16, 16}, {32, 8}, {7, 13}, {128, 128}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s)
        for (size_t w = 0; w < sizeof windows / sizeof windows[0]; ++w)
            for (int causal = 0; causal <= 1; ++causal)
                for (size_t b = 0; b < sizeof blocks / sizeof blocks[0]; ++b) {
                    int64_t sq = shapes[s][0], sk = shapes[s][1], bq = blocks[b][0], bk = blocks[b][1];
                    fa_mask m = fa_mask_make(sq, sk, causal, windows[w][0], windows[w][1]);
                    for (int64_t q0 = 0; q0 < sq; q0 += bq)
                        for (int64_t k0 = 0; k0 < sk; k0 += bk) {
                            int64_t visible = 0, in_bounds = 0;
                            for (int64_t i = q0; i < q0 + bq && i < sq; ++i)
                                for (int64_t j = k0; j < k0 + bk && j < sk; ++j) {
                                    ++in_bounds;
                                    visible += visible_by_definition(sq, sk, causal, windows[w][0], windows[w][1],
                                                                     i, j);
                                }
                            fa_tile_class expected = visible == 0           ? FA_TILE_EMPTY
                                                     : visible == in_bounds ? FA_TILE_FULL
                                                                            : FA_TILE_PARTIAL;
                            assert_int_equal(fa_mask_classify_tile(&m, q0, q0 + bq, k0, k0 + bk), expected);
                        }
                }
}

/* A sequence with no keys or no queries has nothing visible anywhere. */
static void test_empty_sequences_classify_empty(void **state)
{
    (void)state;
    fa_mask no_keys = fa_mask_make(8, 0, 0, -1, -1);
    fa_mask no_queries = fa_mask_make(0, 8, 1, -1, -1);
    assert_int_equal(fa_mask_classify_tile(&no_keys, 0, 8, 0, 8), FA_TILE_EMPTY);
    assert_int_equal(fa_mask_classify_tile(&no_queries, 0, 8, 0, 8), FA_TILE_EMPTY);
    int64_t lo, hi;
    fa_mask_row_range(&no_keys, 3, &lo, &hi);
    assert_true(lo >= hi);
}

static void test_mask_make_folds_causal_into_right(void **state)
{
    (void)state;
    const int64_t windows[] = {-7, -1, 0, 1, 5};
    for (size_t l = 0; l < sizeof windows / sizeof windows[0]; ++l)
        for (size_t r = 0; r < sizeof windows / sizeof windows[0]; ++r)
            for (int causal = 0; causal <= 1; ++causal) {
                fa_mask m = fa_mask_make(10, 20, causal, windows[l], windows[r]);
                int64_t expected_left = windows[l] < 0 ? -1 : windows[l];
                int64_t expected_right = windows[r] < 0 ? -1 : windows[r];
                if (causal)
                    expected_right = 0; /* causal is window right = 0, and intersects any wider one */
                assert_int_equal(m.seqlen_q, 10);
                assert_int_equal(m.seqlen_k, 20);
                assert_int_equal(m.left, expected_left);
                assert_int_equal(m.right, expected_right);
            }
}

/* Bottom-right alignment on the examples people check by hand. */
static void test_causal_is_bottom_right_aligned(void **state)
{
    (void)state;
    fa_mask wide = fa_mask_make(2, 5, 1, -1, -1); /* offset 3: row 0 sees keys 0..3 */
    assert_true(fa_mask_visible(&wide, 0, 3));
    assert_false(fa_mask_visible(&wide, 0, 4));
    assert_true(fa_mask_visible(&wide, 1, 4));
    fa_mask tall = fa_mask_make(5, 2, 1, -1, -1); /* offset -3: rows 0..2 see nothing */
    for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 2; ++j)
            assert_false(fa_mask_visible(&tall, i, j));
    assert_true(fa_mask_visible(&tall, 3, 0));
    assert_false(fa_mask_visible(&tall, 3, 1));
    assert_true(fa_mask_visible(&tall, 4, 1));
    assert_int_equal(fa_mask_classify_tile(&tall, 0, 3, 0, 2), FA_TILE_EMPTY);
    fa_mask band = fa_mask_make(4, 4, 0, 1, 0); /* the diagonal and one to its left */
    assert_true(fa_mask_visible(&band, 2, 1));
    assert_true(fa_mask_visible(&band, 2, 2));
    assert_false(fa_mask_visible(&band, 2, 0));
    assert_false(fa_mask_visible(&band, 2, 3));
}

/* Window bounds so large that diagonal - left or diagonal + right + 1 would overflow 64 bits mean
 * "no limit on that side": every element and tile is as with -1, and fa_mask_make stores -1, so
 * the kernels (which all test through this header) never form the overflowing sums. */
static void test_window_bounds_near_int64_max_are_unbounded(void **state)
{
    (void)state;
    const int64_t shapes[][2] = {{1, 1}, {5, 7}, {7, 5}, {64, 64}, {1, 128}, {128, 1}};
    const int64_t huge[][2] = {{0, INT64_MAX},         {INT64_MAX, 0},     {INT64_MAX, INT64_MAX},
                               {INT64_MAX, -1},        {-1, INT64_MAX},    {INT64_MAX - 1, 3},
                               {2, INT64_MAX - 1},     {INT64_MIN, INT64_MAX}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s)
        for (size_t w = 0; w < sizeof huge / sizeof huge[0]; ++w)
            for (int causal = 0; causal <= 1; ++causal) {
                int64_t sq = shapes[s][0], sk = shapes[s][1], left = huge[w][0], right = huge[w][1];
                int64_t left_unbounded = left > 1000 ? -1 : left, right_unbounded = right > 1000 ? -1 : right;
                fa_mask m = fa_mask_make(sq, sk, causal, left, right);
                fa_mask u = fa_mask_make(sq, sk, causal, left_unbounded, right_unbounded);
                assert_int_equal(m.left, u.left);
                assert_int_equal(m.right, u.right);
                for (int64_t i = 0; i < sq; ++i)
                    for (int64_t j = 0; j < sk; ++j) {
                        int expected = visible_by_definition(sq, sk, causal, left, right, i, j);
                        assert_int_equal(expected, visible_by_definition(sq, sk, causal, left_unbounded,
                                                                         right_unbounded, i, j));
                        if (fa_mask_visible(&m, i, j) != expected)
                            print_error("sq %lld sk %lld causal %d window (%lld, %lld): (%lld, %lld) visible %d\n",
                                        (long long)sq, (long long)sk, causal, (long long)left, (long long)right,
                                        (long long)i, (long long)j, !expected);
                        assert_int_equal(fa_mask_visible(&m, i, j), expected);
                    }
                for (int64_t q0 = 0; q0 < sq; q0 += 16)
                    for (int64_t k0 = 0; k0 < sk; k0 += 16)
                        assert_int_equal(fa_mask_classify_tile(&m, q0, q0 + 16, k0, k0 + 16),
                                         fa_mask_classify_tile(&u, q0, q0 + 16, k0, k0 + 16));
            }
}

/* The edge: a bound of seqlen_q + seqlen_k - 1 or more already reaches every key of every row, so
 * treating it as unbounded changes nothing, and a bound just below the edge still limits. */
static void test_window_bounds_at_the_edge(void **state)
{
    (void)state;
    for (int64_t sq = 1; sq <= 9; sq += 4)
        for (int64_t sk = 1; sk <= 9; sk += 4)
            for (int64_t delta = -3; delta <= 2; ++delta)
                for (int causal = 0; causal <= 1; ++causal) {
                    int64_t bound = sq + sk + delta;
                    fa_mask l = fa_mask_make(sq, sk, causal, bound, 0);
                    fa_mask r = fa_mask_make(sq, sk, causal, 0, bound);
                    for (int64_t i = 0; i < sq; ++i)
                        for (int64_t j = 0; j < sk; ++j) {
                            assert_int_equal(fa_mask_visible(&l, i, j),
                                             visible_by_definition(sq, sk, causal, bound, 0, i, j));
                            assert_int_equal(fa_mask_visible(&r, i, j),
                                             visible_by_definition(sq, sk, causal, 0, bound, i, j));
                        }
                }
}

static void test_class_meet(void **state)
{
    (void)state;
    const fa_tile_class all[] = {FA_TILE_EMPTY, FA_TILE_PARTIAL, FA_TILE_FULL};
    for (int a = 0; a < 3; ++a)
        for (int b = 0; b < 3; ++b) {
            fa_tile_class expected = (all[a] == FA_TILE_EMPTY || all[b] == FA_TILE_EMPTY) ? FA_TILE_EMPTY
                                     : (all[a] == FA_TILE_FULL && all[b] == FA_TILE_FULL) ? FA_TILE_FULL
                                                                                          : FA_TILE_PARTIAL;
            assert_int_equal(fa_tile_class_meet(all[a], all[b]), expected);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_visible_matches_definition),
        cmocka_unit_test(test_tile_class_matches_brute_force),
        cmocka_unit_test(test_rows_range_is_union_of_rows),
        cmocka_unit_test(test_tile_grid_on_standard_shapes),
        cmocka_unit_test(test_empty_sequences_classify_empty),
        cmocka_unit_test(test_mask_make_folds_causal_into_right),
        cmocka_unit_test(test_causal_is_bottom_right_aligned),
        cmocka_unit_test(test_class_meet),
        cmocka_unit_test(test_window_bounds_near_int64_max_are_unbounded),
        cmocka_unit_test(test_window_bounds_at_the_edge),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
