/* test_api_warmup.c: fa_warmup through flashattn.h on the CPU backend: the shapes and options it
 * runs (forward, forward + backward, GQA, d_v != d, causal, softcap, a learnable sink,
 * deterministic), and each argument it refuses, with its status and a message that starts with
 * "fa_warmup: " once (the refusals of the calls it makes included). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "flashattn.h"

static int setup(void **state)
{
    fa_context *ctx = NULL;
    if (fa_context_create(&ctx, "cpu", 0) != FA_SUCCESS)
        return -1;
    *state = ctx;
    return 0;
}

static int teardown(void **state)
{
    fa_context_destroy(*state);
    return 0;
}

/* A refused call: its status, and a message that begins with the prefix exactly once and names
 * what was wrong (needle, case-sensitive). */
static void assert_refused(fa_context *ctx, fa_status got, fa_status want, const char *needle)
{
    const char *m = fa_context_last_error(ctx);
    if (got != want || strncmp(m, "fa_warmup: ", 11) != 0 || strncmp(m + 11, "fa_warmup:", 10) == 0 ||
        !strstr(m, needle))
        fail_msg("status %d (want %d), message '%s' (want 'fa_warmup: ' once, mentioning '%s')", (int)got, (int)want, m,
                 needle);
}

/* A failed call leaves a message; a warm-up that succeeds afterwards clears it, as fa_forward does. */
static void leave_an_error(fa_context *ctx)
{
    assert_int_equal(fa_warmup(ctx, FA_DTYPE_F32, 0, 1, 1, 32, 0, NULL, 0), FA_ERR_INVALID_ARG);
    assert_true(fa_context_last_error(ctx)[0] != '\0');
}

static void test_forward_each_dtype(void **state)
{
    fa_context *ctx = *state;
    const fa_dtype dtypes[3] = {FA_DTYPE_F32, FA_DTYPE_F16, FA_DTYPE_BF16};
    const fa_options o = fa_options_default();
    for (int i = 0; i < 3; ++i) {
        leave_an_error(ctx);
        assert_int_equal(fa_warmup(ctx, dtypes[i], 17, 2, 2, 64, 0, &o, 0), FA_SUCCESS);
        assert_string_equal(fa_context_last_error(ctx), "");
    }
}

static void test_forward_backward_options(void **state)
{
    fa_context *ctx = *state;
    fa_options o = fa_options_default();
    leave_an_error(ctx);
    assert_int_equal(fa_warmup(ctx, FA_DTYPE_BF16, 33, 1, 1, 128, 0, &o, 1), FA_SUCCESS);
    assert_string_equal(fa_context_last_error(ctx), "");
    o.causal = 1;
    o.softcap = 30.0f;
    o.deterministic = 1;
    assert_int_equal(fa_warmup(ctx, FA_DTYPE_F16, 40, 4, 2, 64, 0, &o, 1), FA_SUCCESS);
    o = fa_options_default();
    o.window_left = 8;
    o.window_right = 0;
    assert_int_equal(fa_warmup(ctx, FA_DTYPE_F32, 40, 4, 1, 32, 0, &o, 1), FA_SUCCESS);
    assert_string_equal(fa_context_last_error(ctx), "");
}

/* GQA with value heads of another width: every gradient has its own shape. */
static void test_gqa_and_value_dim(void **state)
{
    fa_context *ctx = *state;
    const fa_options o = fa_options_default();
    assert_int_equal(fa_warmup(ctx, FA_DTYPE_BF16, 24, 6, 2, 64, 32, &o, 0), FA_SUCCESS);
    assert_int_equal(fa_warmup(ctx, FA_DTYPE_BF16, 24, 6, 2, 64, 32, &o, 1), FA_SUCCESS);
    assert_int_equal(fa_warmup(ctx, FA_DTYPE_F32, 24, 4, 4, 32, 96, &o, 1), FA_SUCCESS);
    assert_string_equal(fa_context_last_error(ctx), "");
}

/* A learnable sink in the context's memory: the backward then writes dsink, a buffer of its own. */
static void test_learnable_sink(void **state)
{
    fa_context *ctx = *state;
    enum { HEADS = 4 };
    const float sink[HEADS] = {0.5f, -1.0f, 2.0f, 0.0f};
    void *dev = NULL;
    assert_int_equal(fa_malloc(ctx, sizeof sink, &dev), FA_SUCCESS);
    assert_int_equal(fa_memcpy(ctx, dev, sink, sizeof sink, FA_COPY_HOST_TO_DEVICE), FA_SUCCESS);
    fa_options o = fa_options_default();
    o.learnable_sink = dev;
    o.causal = 1;
    assert_int_equal(fa_warmup(ctx, FA_DTYPE_BF16, 19, HEADS, 2, 64, 0, &o, 0), FA_SUCCESS);
    assert_int_equal(fa_warmup(ctx, FA_DTYPE_BF16, 19, HEADS, 2, 64, 0, &o, 1), FA_SUCCESS);
    assert_string_equal(fa_context_last_error(ctx), "");
    /* the sink is read, never written */
    float back[HEADS];
    assert_int_equal(fa_memcpy(ctx, back, dev, sizeof back, FA_COPY_DEVICE_TO_HOST), FA_SUCCESS);
    assert_memory_equal(back, sink, sizeof sink);
    assert_int_equal(fa_free(ctx, dev), FA_SUCCESS);
}

static void test_bad_arguments(void **state)
{
    fa_context *ctx = *state;
    const fa_options o = fa_options_default();
    assert_int_equal(fa_warmup(NULL, FA_DTYPE_F32, 16, 1, 1, 32, 0, &o, 0), FA_ERR_INVALID_ARG);
    assert_refused(ctx, fa_warmup(ctx, FA_DTYPE_F32, 16, 1, 1, 32, 0, NULL, 0), FA_ERR_INVALID_ARG, "options");
    assert_refused(ctx, fa_warmup(ctx, (fa_dtype)77, 16, 1, 1, 32, 0, &o, 0), FA_ERR_INVALID_ARG, "dtype 77");
    assert_refused(ctx, fa_warmup(ctx, FA_DTYPE_F32, 0, 1, 1, 32, 0, &o, 0), FA_ERR_INVALID_ARG, "seqlen 0");
    assert_refused(ctx, fa_warmup(ctx, FA_DTYPE_F32, -5, 1, 1, 32, 0, &o, 0), FA_ERR_INVALID_ARG, "seqlen -5");
    assert_refused(ctx, fa_warmup(ctx, FA_DTYPE_F32, 16, 0, 1, 32, 0, &o, 0), FA_ERR_INVALID_ARG, "heads_q 0");
    assert_refused(ctx, fa_warmup(ctx, FA_DTYPE_F32, 16, 1, 0, 32, 0, &o, 0), FA_ERR_INVALID_ARG, "heads_kv 0");
    assert_refused(ctx, fa_warmup(ctx, FA_DTYPE_F32, 16, 1, 1, 0, 0, &o, 0), FA_ERR_INVALID_ARG, "d 0");
    assert_refused(ctx, fa_warmup(ctx, FA_DTYPE_F32, 16, 1, 1, 32, -1, &o, 0), FA_ERR_INVALID_ARG, "d_v -1");
    assert_refused(ctx, fa_warmup(ctx, FA_DTYPE_F32, 16, 1, 1, 32, 0, &o, 2), FA_ERR_INVALID_ARG, "backward is 2");
    assert_refused(ctx, fa_warmup(ctx, FA_DTYPE_F32, 16, 1, 1, 32, 0, &o, -1), FA_ERR_INVALID_ARG, "backward is -1");
}

/* Shapes the calls refuse: their status, and their message behind the prefix. */
static void test_refused_by_the_calls(void **state)
{
    fa_context *ctx = *state;
    fa_options o = fa_options_default();
    assert_refused(ctx, fa_warmup(ctx, FA_DTYPE_F32, 16, 3, 2, 32, 0, &o, 0), FA_ERR_INVALID_ARG, "heads");
    assert_refused(ctx, fa_warmup(ctx, FA_DTYPE_F32, 16, 3, 2, 32, 0, &o, 1), FA_ERR_INVALID_ARG, "heads");
    assert_refused(ctx, fa_warmup(ctx, FA_DTYPE_BF16, 16, 1, 1, 512, 0, &o, 0), FA_ERR_UNSUPPORTED, "512");
    assert_refused(ctx, fa_warmup(ctx, FA_DTYPE_BF16, 16, 1, 1, 64, 320, &o, 1), FA_ERR_UNSUPPORTED, "320");
    o.softcap = -1.0f;
    assert_refused(ctx, fa_warmup(ctx, FA_DTYPE_F32, 16, 1, 1, 32, 0, &o, 1), FA_ERR_INVALID_ARG, "softcap");
}

/* Sizes past 64 bits are refused before anything is allocated. */
static void test_overflow(void **state)
{
    fa_context *ctx = *state;
    const fa_options o = fa_options_default();
    const int64_t big = INT64_C(1) << 40;
    assert_refused(ctx, fa_warmup(ctx, FA_DTYPE_F32, big, 1 << 16, 1, 64, 0, &o, 0), FA_ERR_OVERFLOW, "overflows");
    /* the key heads alone overflow, and the message names them */
    assert_refused(ctx, fa_warmup(ctx, FA_DTYPE_F32, big, 1, 1 << 20, 64, 0, &o, 0), FA_ERR_OVERFLOW,
                   "heads 1048576");
    /* the value width alone: [seqlen][heads][d_v] in bytes past 2^63 */
    assert_refused(ctx, fa_warmup(ctx, FA_DTYPE_BF16, big, 1 << 10, 1 << 10, 1, INT64_C(1) << 12, &o, 0),
                   FA_ERR_OVERFLOW, "d 4096");
    assert_refused(ctx, fa_warmup(ctx, FA_DTYPE_F32, INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX, 0, &o, 1),
                   FA_ERR_OVERFLOW, "overflows");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_forward_each_dtype, setup, teardown),
        cmocka_unit_test_setup_teardown(test_forward_backward_options, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gqa_and_value_dim, setup, teardown),
        cmocka_unit_test_setup_teardown(test_learnable_sink, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_arguments, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refused_by_the_calls, setup, teardown),
        cmocka_unit_test_setup_teardown(test_overflow, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
