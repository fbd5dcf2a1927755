/* test_api_threads.c: threads sharing one context each read their own call's error message.
 * Several threads call fa_forward on one CPU context with arguments that fail with a message
 * naming a value of their own (dropout_p = 2, 3, ...), interleaved with calls that succeed and
 * clear the message; after every call the thread checks fa_context_last_error. With one message
 * per context, another thread's call can overwrite or clear it between a call and the read (seen
 * as 1-22 wrong messages in 20,000 calls); messages are per thread, so none may be wrong. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashattn.h"

enum { THREADS = 6, CALLS_PER_THREAD = 20000, SEQ = 4, HEADS = 2, DIM = 8 };

typedef struct worker {
    fa_context *ctx;
    int index;
    float *q, *o, *lse;
    long wrong; /* calls whose message was not this thread's own */
    char first_wrong[600];
    pthread_barrier_t *start;
} worker;

static void *run_worker(void *arg)
{
    worker *w = arg;
    const int64_t shape[4] = {1, SEQ, HEADS, DIM}, lse_shape[3] = {1, HEADS, SEQ};
    fa_fwd_args a;
    memset(&a, 0, sizeof a);
    a.q = fa_tensor_contiguous(w->q, FA_DTYPE_F32, 4, shape);
    a.k = a.q;
    a.v = a.q;
    a.o = fa_tensor_contiguous(w->o, FA_DTYPE_F32, 4, shape);
    a.lse = fa_tensor_contiguous(w->lse, FA_DTYPE_F32, 3, lse_shape);
    a.opts = fa_options_default();
    char own[64];
    snprintf(own, sizeof own, "dropout_p = %d ", w->index + 2);
    pthread_barrier_wait(w->start);
    for (int call = 0; call < CALLS_PER_THREAD; ++call) {
        const char *message;
        int right;
        if (call % 2 == 0) {
            a.opts.dropout_p = (float)(w->index + 2);
            right = fa_forward(w->ctx, &a) == FA_ERR_INVALID_ARG;
            message = fa_context_last_error(w->ctx);
            right = right && strstr(message, own) != NULL;
        } else {
            a.opts.dropout_p = 0.0f;
            right = fa_query_support(w->ctx, &a, 0, NULL, 0) == FA_SUCCESS;
            message = fa_context_last_error(w->ctx);
            right = right && message[0] == '\0';
        }
        if (!right && w->wrong++ == 0)
            snprintf(w->first_wrong, sizeof w->first_wrong, "thread %d call %d: \"%s\"", w->index, call, message);
    }
    return NULL;
}

static void test_each_thread_reads_its_own_message(void **state)
{
    (void)state;
    fa_context *ctx = NULL;
    assert_int_equal(fa_context_create(&ctx, "cpu", 0), FA_SUCCESS);
    assert_int_equal(fa_context_set_num_threads(ctx, 1), FA_SUCCESS);
    static float q[THREADS][SEQ * HEADS * DIM], o[THREADS][SEQ * HEADS * DIM], lse[THREADS][HEADS * SEQ];
    pthread_barrier_t start;
    assert_int_equal(pthread_barrier_init(&start, NULL, THREADS), 0);
    worker workers[THREADS];
    pthread_t threads[THREADS];
    for (int t = 0; t < THREADS; ++t) {
        workers[t] = (worker){.ctx = ctx, .index = t, .q = q[t], .o = o[t], .lse = lse[t], .start = &start};
        assert_int_equal(pthread_create(&threads[t], NULL, run_worker, &workers[t]), 0);
    }
    long wrong = 0;
    for (int t = 0; t < THREADS; ++t) {
        pthread_join(threads[t], NULL);
        wrong += workers[t].wrong;
        if (workers[t].wrong)
            print_error("%ld wrong messages, first: %s\n", workers[t].wrong, workers[t].first_wrong);
    }
    print_message("%d threads x %d calls on one context: %ld wrong messages\n", THREADS, CALLS_PER_THREAD, wrong);
    pthread_barrier_destroy(&start);
    fa_context_destroy(ctx);
    assert_int_equal(wrong, 0);
}

/* A context destroyed and another created at the same address: the new one starts without the old
 * one's message. */
static void test_new_context_has_no_old_message(void **state)
{
    (void)state;
    for (int round = 0; round < 20; ++round) {
        fa_context *ctx = NULL;
        assert_int_equal(fa_context_create(&ctx, "cpu", 0), FA_SUCCESS);
        assert_string_equal(fa_context_last_error(ctx), "");
        assert_int_equal(fa_context_set_num_threads(ctx, -3), FA_ERR_INVALID_ARG);
        assert_true(strstr(fa_context_last_error(ctx), "threads") != NULL);
        fa_context_destroy(ctx);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_thread_reads_its_own_message),
        cmocka_unit_test(test_new_context_has_no_old_message),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
