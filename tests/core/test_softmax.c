/* test_softmax.c: core/softmax.h, the online-softmax state every kernel shares.
 * The tile-by-tile update must reproduce a direct two-pass softmax (max, sum, O, LSE), the merge
 * of partial results must be associative and commutative, and fully masked rows and parts must
 * give O = 0, LSE = -inf and never NaN. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <string.h>

#include "softmax.h"

#define MAX_KEYS 512
#define HEAD_DIM 16

static uint64_t rng_state = 0x0123456789abcdefull;

static double next_uniform(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 0x2545f4914f6cdd1dull) >> 11) / 9007199254740992.0;
}

/* What a kernel does with one query row: walk the keys in tiles, update (m, l), rescale the
 * accumulator by the returned factor, add exp(s - shift) * v. Masked scores are -inf. */
static fa_softmax_row online_softmax_row(const float *scores, const float *values, int n, const int *tile_sizes,
                                         float *out, int *tiles_used)
{
    fa_softmax_row row = fa_softmax_init();
    float acc[HEAD_DIM] = {0};
    int start = 0, tile = 0;
    while (start < n) {
        int size = tile_sizes[tile++];
        if (start + size > n)
            size = n - start;
        float tile_max = -INFINITY;
        for (int j = start; j < start + size; ++j)
            tile_max = scores[j] > tile_max ? scores[j] : tile_max;
        float alpha = fa_softmax_update(&row, tile_max);
        for (int c = 0; c < HEAD_DIM; ++c)
            acc[c] *= alpha;
        float shift = fa_softmax_shift(row.m);
        for (int j = start; j < start + size; ++j) {
            float p = expf(scores[j] - shift);
            row.l += p;
            for (int c = 0; c < HEAD_DIM; ++c)
                acc[c] += p * values[j * HEAD_DIM + c];
        }
        start += size;
    }
    float inv = fa_softmax_inv_sum(row);
    for (int c = 0; c < HEAD_DIM; ++c)
        out[c] = acc[c] * inv;
    *tiles_used = tile;
    return row;
}

/* The textbook two passes in double: max, then sum and weighted sum. */
static void two_pass_softmax(const float *scores, const float *values, int n, double *max_out, double *sum_out,
                             double *out, double *lse_out)
{
    double m = -INFINITY;
    for (int j = 0; j < n; ++j)
        m = scores[j] > m ? scores[j] : m;
    double l = 0.0, acc[HEAD_DIM] = {0};
    for (int j = 0; j < n; ++j) {
        if (scores[j] == -INFINITY)
            continue;
        double p = exp((double)scores[j] - m);
        l += p;
        for (int c = 0; c < HEAD_DIM; ++c)
            acc[c] += p * values[j * HEAD_DIM + c];
    }
    *max_out = m;
    *sum_out = l;
    for (int c = 0; c < HEAD_DIM; ++c)
        out[c] = l > 0.0 ? acc[c] / l : 0.0;
    *lse_out = l > 0.0 ? m + log(l) : -INFINITY;
}

/* Bound on the fp32 online result's relative error: each exp term carries the rounding of
 * s - shift (|s - shift| ulps) and of expf (1 ulp); the sum adds one rounding per term and each
 * rescale one more. Score spread is at most 2 * 8 here, so 24 + n + 2 * tiles units of fp32
 * epsilon cover it; a wrong rescale or a missed term is off by far more. */
static double online_error_bound(int n, int tiles)
{
    return (24.0 + n + 2.0 * tiles) * FLT_EPSILON;
}

static void test_online_update_matches_two_pass(void **state)
{
    (void)state;
    static float scores[MAX_KEYS], values[MAX_KEYS * HEAD_DIM];
    int tile_sizes[MAX_KEYS];
    double worst_sum = 0.0, worst_out = 0.0;
    for (int trial = 0; trial < 400; ++trial) {
        int n = 1 + (int)(next_uniform() * MAX_KEYS);
        double masked_fraction = (trial % 4 == 0) ? 0.0 : next_uniform() * 0.9;
        int visible = 0;
        for (int j = 0; j < n; ++j) {
            int masked = next_uniform() < masked_fraction;
            scores[j] = masked ? -INFINITY : (float)(next_uniform() * 16.0 - 8.0);
            visible += !masked;
            for (int c = 0; c < HEAD_DIM; ++c)
                values[j * HEAD_DIM + c] = (float)(next_uniform() * 2.0 - 1.0);
        }
        if (visible == 0)
            scores[n / 2] = 0.5f; /* all-masked rows have their own test */
        for (int t = 0; t < n; ++t)
            tile_sizes[t] = 1 + (int)(next_uniform() * 64);
        float out[HEAD_DIM];
        int tiles;
        fa_softmax_row row = online_softmax_row(scores, values, n, tile_sizes, out, &tiles);
        double m, l, expected[HEAD_DIM], lse;
        two_pass_softmax(scores, values, n, &m, &l, expected, &lse);

        assert_true((double)row.m == m); /* the max is exact: no arithmetic */
        double bound = online_error_bound(n, tiles);
        double sum_error = fabs(row.l - l) / l;
        worst_sum = sum_error > worst_sum ? sum_error : worst_sum;
        if (sum_error > bound)
            print_error("trial %d: n %d tiles %d: l %.9g vs %.9g (rel %.3g > %.3g)\n", trial, n, tiles,
                        (double)row.l, l, sum_error, bound);
        assert_true(sum_error <= bound);
        /* O is a convex combination of values in [-1, 1]: compare to the scale 1 */
        for (int c = 0; c < HEAD_DIM; ++c) {
            double err = fabs(out[c] - expected[c]);
            worst_out = err > worst_out ? err : worst_out;
            assert_true(err <= 2.0 * bound);
        }
        double lse_err = fabs(fa_softmax_lse(row) - lse);
        assert_true(lse_err <= bound * (1.0 + fabs(lse)));
    }
    print_message("worst relative error: sum %.3g, output %.3g\n", worst_sum, worst_out);
}

/* Scores of magnitude 1e4 overflow exp() unless the running max is subtracted; the online form
 * must stay finite and exact in the shift. */
static void test_online_update_is_stable_for_large_scores(void **state)
{
    (void)state;
    float scores[8] = {10000.0f, 10001.0f, -20000.0f, 9999.0f, 10002.0f, -INFINITY, 10000.5f, 88.0f};
    float values[8 * HEAD_DIM];
    for (int j = 0; j < 8; ++j)
        for (int c = 0; c < HEAD_DIM; ++c)
            values[j * HEAD_DIM + c] = (float)(j + 1) * (c % 2 ? 1.0f : -1.0f);
    int tile_sizes[8] = {1, 1, 2, 1, 3, 1, 1, 1};
    float out[HEAD_DIM];
    int tiles;
    fa_softmax_row row = online_softmax_row(scores, values, 8, tile_sizes, out, &tiles);
    double m, l, expected[HEAD_DIM], lse;
    two_pass_softmax(scores, values, 8, &m, &l, expected, &lse);
    assert_true(isfinite(row.l) && isfinite(fa_softmax_lse(row)));
    assert_true(row.m == 10002.0f);
    assert_true(fabs(row.l - l) <= online_error_bound(8, tiles) * l);
    for (int c = 0; c < HEAD_DIM; ++c)
        assert_true(fabs(out[c] - expected[c]) <= online_error_bound(8, tiles) * 8.0);
}

/* A row whose first tiles are all masked: the -inf guard keeps m = -inf, l = 0 without NaN until
 * a visible key arrives; the result equals the softmax over the visible keys alone. */
static void test_masked_leading_tiles_leave_no_trace(void **state)
{
    (void)state;
    float scores[6] = {-INFINITY, -INFINITY, -INFINITY, 1.0f, 2.0f, -INFINITY};
    float values[6 * HEAD_DIM];
    for (int j = 0; j < 6 * HEAD_DIM; ++j)
        values[j] = (float)j * 0.01f;
    int tile_sizes[6] = {2, 1, 3};
    float out[HEAD_DIM];
    int tiles;
    fa_softmax_row row = online_softmax_row(scores, values, 6, tile_sizes, out, &tiles);
    double m, l, expected[HEAD_DIM], lse;
    two_pass_softmax(scores, values, 6, &m, &l, expected, &lse);
    assert_true(row.m == 2.0f);
    assert_true(fabs(row.l - l) <= online_error_bound(6, tiles) * l);
    for (int c = 0; c < HEAD_DIM; ++c)
        assert_true(fabs(out[c] - expected[c]) <= online_error_bound(6, tiles));
}

static void test_fully_masked_row_gives_zero_and_minus_infinity(void **state)
{
    (void)state;
    float scores[5] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    float values[5 * HEAD_DIM];
    for (int j = 0; j < 5 * HEAD_DIM; ++j)
        values[j] = 1.0f + (float)j;
    int tile_sizes[5] = {2, 2, 1};
    float out[HEAD_DIM];
    int tiles;
    fa_softmax_row row = online_softmax_row(scores, values, 5, tile_sizes, out, &tiles);
    assert_true(row.m == -INFINITY);
    assert_true(row.l == 0.0f);
    assert_true(fa_softmax_lse(row) == -INFINITY);
    assert_true(fa_softmax_inv_sum(row) == 0.0f);
    for (int c = 0; c < HEAD_DIM; ++c)
        assert_true(out[c] == 0.0f);
    /* an untouched row (no keys at all, seqlen_k = 0) */
    assert_true(fa_softmax_lse(fa_softmax_init()) == -INFINITY);
    assert_true(fa_softmax_inv_sum(fa_softmax_init()) == 0.0f);
    /* the guards themselves */
    assert_true(fa_softmax_rescale_factor(-INFINITY, -INFINITY) == 0.0f);
    assert_true(fa_softmax_shift(-INFINITY) == 0.0f);
    assert_true(fa_softmax_prob(3.0f, -INFINITY) == 0.0f);
    assert_true(fa_softmax_prob(-INFINITY, -INFINITY) == 0.0f);
    assert_true(fa_softmax_rescale_factor(1.0f, 1.0f) == 1.0f);
    assert_true(fabsf(fa_softmax_prob(1.0f, 2.0f) - expf(-1.0f)) <= FLT_EPSILON);
}

/* ---------------------------------------------------------------- merge */

typedef struct partial_result {
    float lse;
    float o[HEAD_DIM];
} partial_result;

static partial_result merge_two(const partial_result *a, const partial_result *b)
{
    partial_result r;
    r.lse = fa_softmax_merge(a->lse, a->o, b->lse, b->o, r.o, HEAD_DIM);
    return r;
}

/* Three partial results over disjoint key sets, from the online form over each set, plus the
 * two-pass answer over the union for reference. */
static void make_three_partials(partial_result parts[3], double *union_out, double *union_lse, int masked_part)
{
    static float scores[3 * 64], values[3 * 64 * HEAD_DIM];
    int sizes[3] = {1 + (int)(next_uniform() * 64), 1 + (int)(next_uniform() * 64), 1 + (int)(next_uniform() * 64)};
    int tile_sizes[64];
    for (int t = 0; t < 64; ++t)
        tile_sizes[t] = 16;
    int start = 0;
    for (int k = 0; k < 3; ++k) {
        /* a different scale per part so that the weights are far from equal */
        double offset = next_uniform() * 20.0 - 10.0;
        for (int j = start; j < start + sizes[k]; ++j) {
            scores[j] = k == masked_part ? -INFINITY : (float)(offset + next_uniform() * 4.0);
            for (int c = 0; c < HEAD_DIM; ++c)
                values[j * HEAD_DIM + c] = (float)(next_uniform() * 2.0 - 1.0);
        }
        int tiles;
        fa_softmax_row row = online_softmax_row(scores + start, values + start * HEAD_DIM, sizes[k], tile_sizes,
                                                parts[k].o, &tiles);
        parts[k].lse = fa_softmax_lse(row);
        start += sizes[k];
    }
    double m, l;
    two_pass_softmax(scores, values, start, &m, &l, union_out, union_lse);
}

static double max_abs_difference(const float *a, const float *b)
{
    double worst = 0.0;
    for (int c = 0; c < HEAD_DIM; ++c) {
        double d = fabs((double)a[c] - (double)b[c]);
        worst = d > worst ? d : worst;
    }
    return worst;
}

/* Merging is a weighted average with weights summing to 1, so every order gives the same answer
 * up to a few fp32 roundings: 1e-6 against outputs of scale 1 (about 8 ulps) and relative on LSE. */
static void test_merge_is_associative_and_commutative(void **state)
{
    (void)state;
    const double tolerance = 1e-6;
    for (int trial = 0; trial < 500; ++trial) {
        partial_result p[3];
        double union_out[HEAD_DIM], union_lse;
        make_three_partials(p, union_out, &union_lse, trial % 5 == 0 ? trial % 3 : -1);
        partial_result ab = merge_two(&p[0], &p[1]), ba = merge_two(&p[1], &p[0]);
        partial_result bc = merge_two(&p[1], &p[2]), ca = merge_two(&p[2], &p[0]);
        partial_result orders[4] = {merge_two(&ab, &p[2]), merge_two(&p[0], &bc), merge_two(&ca, &p[1]),
                                    merge_two(&p[2], &ba)};
        for (int k = 1; k < 4; ++k) {
            double d = max_abs_difference(orders[0].o, orders[k].o);
            double lse_d = fabs(orders[0].lse - orders[k].lse) / fmax(1.0, fabs(orders[0].lse));
            if (d > tolerance || lse_d > tolerance)
                print_error("trial %d order %d: O differs by %.3g, LSE by %.3g\n", trial, k, d, lse_d);
            assert_true(d <= tolerance);
            assert_true(lse_d <= tolerance);
        }
        /* commutativity of one merge is exact up to the order of one addition */
        assert_true(max_abs_difference(ab.o, ba.o) <= tolerance);
        /* and the merged result is the softmax over the union (looser: it carries the online
         * error of each part, bounded as in test_online_update_matches_two_pass) */
        double bound = 2.0 * online_error_bound(64, 4);
        for (int c = 0; c < HEAD_DIM; ++c)
            assert_true(fabs(orders[0].o[c] - union_out[c]) <= bound + tolerance);
        assert_true(fabs(orders[0].lse - union_lse) <= (bound + tolerance) * fmax(1.0, fabs(union_lse)));
    }
}

/* A fully masked part (O = 0, LSE = -inf) must contribute exactly nothing: the weights become
 * exactly 0 and 1, log(1) = 0, so the other part comes back bit for bit, in either order. */
static void test_merge_with_masked_part_is_exact(void **state)
{
    (void)state;
    partial_result masked = {-INFINITY, {0}};
    for (int trial = 0; trial < 100; ++trial) {
        partial_result normal;
        normal.lse = (float)(next_uniform() * 200.0 - 100.0);
        for (int c = 0; c < HEAD_DIM; ++c)
            normal.o[c] = (float)(next_uniform() * 2.0 - 1.0);
        partial_result left = merge_two(&masked, &normal), right = merge_two(&normal, &masked);
        assert_true(left.lse == normal.lse);
        assert_true(right.lse == normal.lse);
        assert_memory_equal(left.o, normal.o, sizeof normal.o);
        assert_memory_equal(right.o, normal.o, sizeof normal.o);
    }
}

static void test_merge_of_two_masked_parts_is_zero_and_minus_infinity(void **state)
{
    (void)state;
    partial_result a = {-INFINITY, {0}}, b = {-INFINITY, {0}};
    partial_result r = merge_two(&a, &b);
    assert_true(r.lse == -INFINITY);
    for (int c = 0; c < HEAD_DIM; ++c) {
        assert_false(isnan(r.o[c]));
        assert_true(r.o[c] == 0.0f);
    }
    /* even if a masked part's output buffer holds garbage, the both-masked answer is clean */
    partial_result garbage = {-INFINITY, {0}};
    for (int c = 0; c < HEAD_DIM; ++c)
        garbage.o[c] = NAN;
    r = merge_two(&garbage, &garbage);
    assert_true(r.lse == -INFINITY);
    for (int c = 0; c < HEAD_DIM; ++c)
        assert_true(r.o[c] == 0.0f);
}

/* o_out may alias o_a: split-KV reduces in place. */
static void test_merge_in_place(void **state)
{
    (void)state;
    partial_result a, b;
    a.lse = 1.5f;
    b.lse = 0.25f;
    for (int c = 0; c < HEAD_DIM; ++c) {
        a.o[c] = (float)c / HEAD_DIM;
        b.o[c] = -(float)c;
    }
    partial_result expected = merge_two(&a, &b);
    float lse = fa_softmax_merge(a.lse, a.o, b.lse, b.o, a.o, HEAD_DIM);
    assert_true(lse == expected.lse);
    assert_memory_equal(a.o, expected.o, sizeof a.o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_online_update_matches_two_pass),
        cmocka_unit_test(test_online_update_is_stable_for_large_scores),
        cmocka_unit_test(test_masked_leading_tiles_leave_no_trace),
        cmocka_unit_test(test_fully_masked_row_gives_zero_and_minus_infinity),
        cmocka_unit_test(test_merge_is_associative_and_commutative),
        cmocka_unit_test(test_merge_with_masked_part_is_exact),
        cmocka_unit_test(test_merge_of_two_masked_parts_is_zero_and_minus_infinity),
        cmocka_unit_test(test_merge_in_place),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
