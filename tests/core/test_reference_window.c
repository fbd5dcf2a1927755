/* test_reference_window.c: the float64 reference (tests/support/reference.c) decides visibility with
 * its own arithmetic, not core/mask.h's, so that `flashattn run --check` and the conformance
 * suite can catch a kernel whose mask is wrong. Window bounds near INT64_MAX mean "no limit"
 * (flashattn.h): the reference must give exactly the unbounded result for them, and a window
 * that limits must still limit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "reference.h"

enum { SEQ_Q = 6, SEQ_K = 9, HEADS = 2, DIM = 8 };

static float q_data[SEQ_Q * HEADS * DIM], k_data[SEQ_K * HEADS * DIM], v_data[SEQ_K * HEADS * DIM];
static float o_data[SEQ_Q * HEADS * DIM], lse_data[HEADS * SEQ_Q];

/* The reference's O and LSE for one window on a 1 x 6 x 2 x 8 (queries) / 9 (keys) problem. */
static void reference_for_window(fa_context *ctx, int causal, int64_t left, int64_t right, double *o, double *lse)
{
    const int64_t qs[4] = {1, SEQ_Q, HEADS, DIM}, ks[4] = {1, SEQ_K, HEADS, DIM}, ls[3] = {1, HEADS, SEQ_Q};
    fa_fwd_args a;
    memset(&a, 0, sizeof a);
    a.q = fa_tensor_contiguous(q_data, FA_DTYPE_F32, 4, qs);
    a.k = fa_tensor_contiguous(k_data, FA_DTYPE_F32, 4, ks);
    a.v = fa_tensor_contiguous(v_data, FA_DTYPE_F32, 4, ks);
    a.o = fa_tensor_contiguous(o_data, FA_DTYPE_F32, 4, qs);
    a.lse = fa_tensor_contiguous(lse_data, FA_DTYPE_F32, 3, ls);
    a.opts = fa_options_default();
    a.opts.causal = causal;
    a.opts.window_left = left;
    a.opts.window_right = right;
    fa_problem p;
    int32_t *cu_host = NULL;
    assert_int_equal(fa_validate_forward(ctx, &a, &p, &cu_host), FA_SUCCESS);
    assert_int_equal(fa_ref_forward(&p, o, lse), FA_SUCCESS);
    free(cu_host);
}

static void test_reference_huge_windows_are_unbounded(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof q_data / sizeof q_data[0]; ++i)
        q_data[i] = (float)((int)(i * 7 % 13) - 6) / 8.0f;
    for (size_t i = 0; i < sizeof k_data / sizeof k_data[0]; ++i) {
        k_data[i] = (float)((int)(i * 5 % 11) - 5) / 8.0f;
        v_data[i] = (float)((int)(i * 3 % 17) - 8) / 4.0f;
    }
    fa_context *ctx = NULL;
    assert_int_equal(fa_context_create(&ctx, "cpu", 0), FA_SUCCESS);
    const int64_t windows[][4] = {
        /* huge (left, right), then the same with -1 for each huge side */
        {0, INT64_MAX, 0, -1},
        {INT64_MAX, 0, -1, 0},
        {INT64_MAX, INT64_MAX, -1, -1},
        {INT64_MAX - 1, 2, -1, 2},
        {1, INT64_MAX - 2, 1, -1},
        {SEQ_Q + SEQ_K, SEQ_Q + SEQ_K, -1, -1}, /* already past every key */
    };
    double o[SEQ_Q * HEADS * DIM], lse[HEADS * SEQ_Q], o_unbounded[SEQ_Q * HEADS * DIM], lse_unbounded[HEADS * SEQ_Q];
    for (size_t w = 0; w < sizeof windows / sizeof windows[0]; ++w)
        for (int causal = 0; causal <= 1; ++causal) {
            reference_for_window(ctx, causal, windows[w][0], windows[w][1], o, lse);
            reference_for_window(ctx, causal, windows[w][2], windows[w][3], o_unbounded, lse_unbounded);
            /* the unbounded problem has no fully masked row (seqlen_k >= seqlen_q): LSE finite */
            for (int i = 0; i < HEADS * SEQ_Q; ++i) {
                assert_true(isfinite(lse_unbounded[i]));
                assert_memory_equal(&lse[i], &lse_unbounded[i], sizeof lse[i]);
            }
            assert_memory_equal(o, o_unbounded, sizeof o);
        }
    /* and a window that limits still limits: (0, 0) sees one key per row, so O is that key's V */
    reference_for_window(ctx, 0, 0, 0, o, lse);
    for (int i = 0; i < SEQ_Q; ++i)
        for (int h = 0; h < HEADS; ++h)
            for (int c = 0; c < DIM; ++c)
                assert_true(o[(i * HEADS + h) * DIM + c] == (double)v_data[((i + SEQ_K - SEQ_Q) * HEADS + h) * DIM + c]);
    fa_context_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_huge_windows_are_unbounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
