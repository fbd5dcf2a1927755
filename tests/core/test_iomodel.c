/* test_iomodel.c: core/iomodel.c, the paper's IO model counted exactly.
 * Each algorithm's count is checked against a simulation that walks the algorithm's loops block by
 * block and adds up every tile it moves (partial edge blocks included), so the closed forms in
 * iomodel.c are tested against the algorithms, not against themselves. Also: the paper's block
 * sizes when none are given, the asymptotic claims (flash traffic falls as M grows and is far
 * below standard attention's for long sequences), and bad arguments and overflow. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "internal.h"

#include <string.h>

typedef struct traffic {
    int64_t read, write;
} traffic;

static int64_t rows_of(int64_t block, int64_t i, int64_t n)
{
    int64_t r = n - i * block;
    return r < block ? r : block;
}

/* Algorithm 0 as the paper writes it: load Q, K; write S; load S; write P; load P, V; write O */
static traffic sim_standard(int64_t nq, int64_t nk, int64_t d, int64_t e)
{
    traffic t = {0, 0};
    t.read += (nq * d + nk * d) * e; /* Q, K */
    t.write += nq * nk * e;          /* S */
    t.read += nq * nk * e;           /* S */
    t.write += nq * nk * e;          /* P */
    t.read += nq * nk * e + nk * d * e; /* P, V */
    t.write += nq * d * e;           /* O */
    return t;
}

/* Algorithm 1: initialise O, l, m in HBM; for each K/V block load it; for each query block load
 * Q_i, O_i, l_i, m_i and write O_i, l_i, m_i */
static traffic sim_flash(int64_t nq, int64_t nk, int64_t d, int64_t e, int64_t br, int64_t bc)
{
    traffic t = {0, 0};
    t.write += nq * d * e + 2 * nq * 4;
    for (int64_t j = 0; j * bc < nk; ++j) {
        const int64_t kr = rows_of(bc, j, nk);
        t.read += 2 * kr * d * e;
        for (int64_t i = 0; i * br < nq; ++i) {
            const int64_t qr = rows_of(br, i, nq);
            t.read += 2 * qr * d * e + 2 * qr * 4;
            t.write += qr * d * e + 2 * qr * 4;
        }
    }
    return t;
}

/* query blocks outside: load Q_i; stream every K_j, V_j; write O_i and the LSE of its rows */
static traffic sim_qouter(int64_t nq, int64_t nk, int64_t d, int64_t e, int64_t br, int64_t bc)
{
    traffic t = {0, 0};
    for (int64_t i = 0; i * br < nq; ++i) {
        const int64_t qr = rows_of(br, i, nq);
        t.read += qr * d * e;
        for (int64_t j = 0; j * bc < nk; ++j)
            t.read += 2 * rows_of(bc, j, nk) * d * e;
        t.write += qr * d * e + qr * 4;
    }
    return t;
}

static void test_counts_match_simulation(void **state)
{
    (void)state;
    const int64_t lens[] = {0, 1, 7, 64, 100, 257, 1000};
    const int64_t dims[] = {1, 16, 64, 80, 128};
    const int64_t blocks[] = {1, 3, 16, 64, 128, 300};
    const size_t elems[] = {2, 4};
    for (size_t a = 0; a < 7; ++a)
        for (size_t b = 0; b < 7; ++b)
            for (size_t c = 0; c < 5; ++c)
                for (size_t x = 0; x < 6; ++x)
                    for (size_t y = 0; y < 6; ++y)
                        for (size_t z = 0; z < 2; ++z) {
                            const int64_t nq = lens[a], nk = lens[b], d = dims[c], br = blocks[x], bc = blocks[y];
                            const int64_t e = (int64_t)elems[z];
                            fa_io_model m;
                            assert_int_equal(fa_io_model_compute(nq, nk, d, 0, br, bc, elems[z], &m), FA_SUCCESS);
                            assert_int_equal(m.block_q, br);
                            assert_int_equal(m.block_k, bc);
                            traffic s = sim_standard(nq, nk, d, e), f = sim_flash(nq, nk, d, e, br, bc),
                                    q = sim_qouter(nq, nk, d, e, br, bc);
                            assert_int_equal(m.standard_read, s.read);
                            assert_int_equal(m.standard_write, s.write);
                            assert_int_equal(m.flash_read, f.read);
                            assert_int_equal(m.flash_write, f.write);
                            assert_int_equal(m.flash_qouter_read, q.read);
                            assert_int_equal(m.flash_qouter_write, q.write);
                        }
}

/* With no blocks given, the paper's B_r, B_c from M (fa_plan_paper_blocks) are used. */
static void test_paper_blocks_by_default(void **state)
{
    (void)state;
    const int64_t onchip[] = {16 * 1024, 100 * 1000, 192 * 1024, 228 * 1024};
    for (size_t i = 0; i < 4; ++i)
        for (int64_t d = 16; d <= 256; d *= 2) {
            int64_t bq, bk;
            fa_plan_paper_blocks(onchip[i], d, &bq, &bk);
            fa_io_model m;
            assert_int_equal(fa_io_model_compute(4096, 4096, d, onchip[i], 0, 0, 2, &m), FA_SUCCESS);
            assert_int_equal(m.block_q, bq);
            assert_int_equal(m.block_k, bk);
            /* one block given, the other from M */
            assert_int_equal(fa_io_model_compute(4096, 4096, d, onchip[i], 32, 0, 2, &m), FA_SUCCESS);
            assert_int_equal(m.block_q, 32);
            assert_int_equal(m.block_k, bk);
        }
}

/* The paper's claims, on the model: flash traffic is non-increasing in M and falls as 1 / M
 * (Theta(N^2 d^2 / M): doubling M halves it, up to the N d terms); for large N, Algorithm 1 moves
 * about 4 N^2 / (3 N d T_c) = 4 B_c / (3 d) times less than standard attention: 4 at d 64 and
 * M = 192 KiB (B_c = 192), 3.81 once the fp32 statistics (16 bytes per row per K/V block against
 * 3 d 2 = 384 for O and Q) and T_c = ceil(16384 / 192) = 86 are counted; standard attention's
 * traffic grows as N^2. */
static void test_asymptotics(void **state)
{
    (void)state;
    for (int64_t d = 32; d <= 256; d *= 2) {
        int64_t prev_f = INT64_MAX, prev_q = INT64_MAX;
        for (int64_t kib = 16; kib <= 4096; kib *= 2) {
            fa_io_model m;
            assert_int_equal(fa_io_model_compute(8192, 8192, d, kib * 1024, 0, 0, 2, &m), FA_SUCCESS);
            const int64_t f = m.flash_read + m.flash_write, q = m.flash_qouter_read + m.flash_qouter_write;
            assert_true(f <= prev_f);
            assert_true(q <= prev_q);
            prev_f = f;
            prev_q = q;
        }
    }
    fa_io_model a, b, c;
    assert_int_equal(fa_io_model_compute(16384, 16384, 64, 192 * 1024, 0, 0, 2, &a), FA_SUCCESS);
    assert_int_equal(a.block_k, 192);
    const int64_t std16 = a.standard_read + a.standard_write, fl16 = a.flash_read + a.flash_write;
    assert_true((double)std16 / (double)fl16 > 3.75 && (double)std16 / (double)fl16 < 3.85);
    assert_int_equal(fa_io_model_compute(16384, 16384, 64, 384 * 1024, 0, 0, 2, &c), FA_SUCCESS);
    const double halved = (double)fl16 / (double)(c.flash_read + c.flash_write);
    assert_true(halved > 1.9 && halved <= 2.0);
    assert_int_equal(fa_io_model_compute(32768, 32768, 64, 192 * 1024, 0, 0, 2, &b), FA_SUCCESS);
    const double ratio = (double)(b.standard_read + b.standard_write) / (double)std16;
    assert_true(ratio > 3.9 && ratio < 4.0);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    fa_io_model m;
    memset(&m, 0x5a, sizeof m);
    const fa_io_model before = m;
    assert_int_equal(fa_io_model_compute(16, 16, 64, 1024, 0, 0, 2, NULL), FA_ERR_INVALID_ARG);
    assert_int_equal(fa_io_model_compute(-1, 16, 64, 1024, 0, 0, 2, &m), FA_ERR_INVALID_ARG);
    assert_int_equal(fa_io_model_compute(16, -1, 64, 1024, 0, 0, 2, &m), FA_ERR_INVALID_ARG);
    assert_int_equal(fa_io_model_compute(16, 16, 0, 1024, 0, 0, 2, &m), FA_ERR_INVALID_ARG);
    assert_int_equal(fa_io_model_compute(16, 16, 64, 1024, -4, 0, 2, &m), FA_ERR_INVALID_ARG);
    assert_int_equal(fa_io_model_compute(16, 16, 64, 1024, 0, -4, 2, &m), FA_ERR_INVALID_ARG);
    assert_int_equal(fa_io_model_compute(16, 16, 64, 1024, 0, 0, 0, &m), FA_ERR_INVALID_ARG);
    assert_int_equal(fa_io_model_compute(16, 16, 64, 0, 0, 0, 2, &m), FA_ERR_INVALID_ARG); /* no M, no blocks */
    /* sizes whose products overflow 64 bits */
    assert_int_equal(fa_io_model_compute(INT64_MAX / 2, INT64_MAX / 2, 64, 1024, 0, 0, 2, &m), FA_ERR_OVERFLOW);
    assert_int_equal(fa_io_model_compute((int64_t)1 << 31, (int64_t)1 << 31, 1 << 20, 1024, 0, 0, 2, &m),
                     FA_ERR_OVERFLOW);
    assert_int_equal(fa_io_model_compute((int64_t)1 << 40, (int64_t)1 << 40, 256, 0, 1, 1, 2, &m), FA_ERR_OVERFLOW);
    assert_memory_equal(&m, &before, sizeof m); /* failures leave the output alone */
    /* large but representable: N = 2^20, d = 256 */
    assert_int_equal(fa_io_model_compute((int64_t)1 << 20, (int64_t)1 << 20, 256, 228 * 1024, 0, 0, 2, &m),
                     FA_SUCCESS);
    assert_true(m.standard_read > 0 && m.flash_read > 0 && m.flash_qouter_read > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counts_match_simulation),
        cmocka_unit_test(test_paper_blocks_by_default),
        cmocka_unit_test(test_asymptotics),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
