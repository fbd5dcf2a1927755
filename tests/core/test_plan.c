/* test_plan.c: core/plan.c, the tile sizes.
 * fa_plan_paper_blocks must follow the paper's formula (B_c = ceil(M / 4d), B_r = min(B_c, d),
 * M = on-chip bytes / 4 fp32 elements) and fa_plan_tiles must clamp it with the documented rule:
 * cap at the maximum, round down to the multiple, never below min_block. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>

#include "internal.h"

static const int64_t onchip_sizes[] = {
    4, 7, 100, 1024, 48 * 1024, 64 * 1024, 96 * 1024, 100 * 1000, 128 * 1024, 164 * 1024, 192 * 1024,
    228 * 1024, 256 * 1024, 1 << 20, (int64_t)1 << 30,
};

static void test_paper_blocks_follow_formula(void **state)
{
    (void)state;
    for (size_t s = 0; s < sizeof onchip_sizes / sizeof onchip_sizes[0]; ++s)
        for (int64_t d = 1; d <= 256; ++d) {
            int64_t block_q = -1, block_k = -1;
            fa_plan_paper_blocks(onchip_sizes[s], d, &block_q, &block_k);
            int64_t m = onchip_sizes[s] / 4;
            /* B_c is the least integer with B_c * 4d >= M (written as the definition of the
             * ceiling rather than the same integer expression the code uses) */
            assert_true(block_k >= 1);
            assert_true(block_k * 4 * d >= m);
            assert_true((block_k - 1) * 4 * d < m);
            assert_true((double)block_k == ceil((double)m / (4.0 * (double)d)));
            assert_int_equal(block_q, block_k < d ? block_k : d);
        }
}

/* Values worked by hand: the paper's A100 example (M = 192 KiB of SRAM) and the CPU table's
 * M = 128 KiB row (64 x 128 at d 64, 64 x 64 at d 128, 32 x 32 at d 256). */
static void test_paper_blocks_known_values(void **state)
{
    (void)state;
    const struct {
        int64_t onchip, d, block_q, block_k;
    } cases[] = {
        {192 * 1024, 64, 64, 192}, {192 * 1024, 128, 96, 96}, {128 * 1024, 64, 64, 128},
        {128 * 1024, 128, 64, 64}, {128 * 1024, 256, 32, 32}, {128 * 1024, 100, 82, 82},
        {100, 64, 1, 1},           /* M = 25 < 4d: one column, one row */
        {7, 1, 1, 1},              /* M = 1 */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
        int64_t block_q, block_k;
        fa_plan_paper_blocks(cases[c].onchip, cases[c].d, &block_q, &block_k);
        if (block_q != cases[c].block_q || block_k != cases[c].block_k)
            print_error("M = %lld bytes, d = %lld: %lld x %lld, expected %lld x %lld\n", (long long)cases[c].onchip,
                        (long long)cases[c].d, (long long)block_q, (long long)block_k, (long long)cases[c].block_q,
                        (long long)cases[c].block_k);
        assert_int_equal(block_q, cases[c].block_q);
        assert_int_equal(block_k, cases[c].block_k);
    }
}

/* The rule from plan.c's comment, written out: cap at the maximum, round down to a multiple of
 * `multiple`, and if that falls below min_block (itself a multiple) use min_block. */
static int64_t clamp_by_documented_rule(int64_t paper, int64_t min_block, int64_t max_block, int64_t multiple)
{
    int64_t b = paper < max_block ? paper : max_block;
    if (multiple > 1)
        b = (b / multiple) * multiple;
    return b < min_block ? min_block : b;
}

static void test_plan_tiles_clamps_by_documented_rule(void **state)
{
    (void)state;
    const int64_t min_blocks[] = {1, 8, 16, 32};
    const int64_t max_blocks[] = {16, 64, 100, 128, 256};
    const int64_t multiples[] = {1, 4, 8, 16};
    const int64_t onchip[] = {1024, 16 * 1024, 64 * 1024, 128 * 1024, 228 * 1024, 1 << 22};
    int64_t cases = 0;
    for (size_t a = 0; a < sizeof min_blocks / sizeof min_blocks[0]; ++a)
        for (size_t b = 0; b < sizeof max_blocks / sizeof max_blocks[0]; ++b)
            for (size_t c = 0; c < sizeof multiples / sizeof multiples[0]; ++c)
                for (size_t o = 0; o < sizeof onchip / sizeof onchip[0]; ++o) {
                    if (min_blocks[a] % multiples[c] != 0 || min_blocks[a] > max_blocks[b])
                        continue; /* the documented precondition of a tile table */
                    fa_tile_limits lim = {
                        .onchip_bytes = onchip[o],
                        .min_block = min_blocks[a],
                        .max_block_q = max_blocks[b],
                        .max_block_k = max_blocks[(b + 2) % (sizeof max_blocks / sizeof max_blocks[0])],
                        .multiple = multiples[c],
                    };
                    if (lim.max_block_k < lim.min_block)
                        lim.max_block_k = lim.min_block;
                    for (int64_t d = 1; d <= 256; d += (d < 16 ? 1 : 7)) {
                        int64_t paper_q, paper_k, block_q, block_k;
                        fa_plan_paper_blocks(lim.onchip_bytes, d, &paper_q, &paper_k);
                        fa_plan_tiles(&lim, d, &block_q, &block_k);
                        assert_int_equal(block_q, clamp_by_documented_rule(paper_q, lim.min_block, lim.max_block_q,
                                                                           lim.multiple));
                        assert_int_equal(block_k, clamp_by_documented_rule(paper_k, lim.min_block, lim.max_block_k,
                                                                           lim.multiple));
                        /* what the kernels rely on */
                        assert_true(block_q >= lim.min_block && block_q <= lim.max_block_q);
                        assert_true(block_k >= lim.min_block && block_k <= lim.max_block_k);
                        assert_int_equal(block_q % lim.multiple, 0);
                        assert_int_equal(block_k % lim.multiple, 0);
                        /* nothing is changed that was already admissible */
                        if (paper_q >= lim.min_block && paper_q <= lim.max_block_q && paper_q % lim.multiple == 0)
                            assert_int_equal(block_q, paper_q);
                        ++cases;
                    }
                }
    assert_true(cases > 1000);
}

/* The CPU backend's table (backends/cpu/backend.c) through the core's clamp, at the head dims
 * the comment there quotes plus the edges that need clamping. */
static void test_plan_tiles_with_cpu_table(void **state)
{
    (void)state;
    fa_tile_limits cpu = {.onchip_bytes = 128 * 1024, .min_block = 16, .max_block_q = 128, .max_block_k = 256,
                          .multiple = 16};
    const struct {
        int64_t d, block_q, block_k;
    } cases[] = {
        {64, 64, 128}, {128, 64, 64}, {256, 32, 32},
        {16, 16, 256},  /* B_c = 512 capped at 256 */
        {8, 16, 256},   /* B_r = d = 8 raised to the minimum */
        {100, 80, 80},  /* 82 rounded down to a multiple of 16 */
        {1, 16, 256},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
        int64_t block_q, block_k;
        fa_plan_tiles(&cpu, cases[c].d, &block_q, &block_k);
        if (block_q != cases[c].block_q || block_k != cases[c].block_k)
            print_error("d = %lld: %lld x %lld, expected %lld x %lld\n", (long long)cases[c].d, (long long)block_q,
                        (long long)block_k, (long long)cases[c].block_q, (long long)cases[c].block_k);
        assert_int_equal(block_q, cases[c].block_q);
        assert_int_equal(block_k, cases[c].block_k);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_paper_blocks_follow_formula),
        cmocka_unit_test(test_paper_blocks_known_values),
        cmocka_unit_test(test_plan_tiles_clamps_by_documented_rule),
        cmocka_unit_test(test_plan_tiles_with_cpu_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
