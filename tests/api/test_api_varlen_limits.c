/* test_api_varlen_limits.c: the public API's error contract for varlen offsets and for sizes at
 * the limits (lengths whose tile counts overflow, head counts, work items, workspace size, offsets
 * inside an output), through flashattn.h only: the exact status, no buffer touched, and a last
 * error that names the problem (its file and line apart, in fa_context_last_error_location). */
#include "api_fixture.h"

/* ---------------------------------------------------------------- varlen */

/* Packed base: 2 sequences of 3 and 2 queries, 4 and 3 keys. */
static int32_t cu_q_storage[8], cu_k_storage[8];

static fa_fwd_args make_varlen_forward(fixture *fx, fa_varlen *vl, const int32_t *cu_q, const int32_t *cu_k,
                                       int64_t batch)
{
    memcpy(cu_q_storage, cu_q, sizeof cu_q_storage);
    memcpy(cu_k_storage, cu_k, sizeof cu_k_storage);
    memset(vl, 0, sizeof *vl); /* no block_table */
    vl->cu_seqlens_q = cu_q_storage;
    vl->cu_seqlens_k = cu_k_storage;
    vl->batch = batch;
    vl->max_seqlen_q = 3;
    vl->max_seqlen_k = 4;
    fa_fwd_args a;
    memset(&a, 0, sizeof a);
    a.q = tensor3(fx->buf[BUF_Q], FA_DTYPE_F32, 5, HEADS_Q, HEAD_DIM);
    a.k = tensor3(fx->buf[BUF_K], FA_DTYPE_F32, 7, HEADS_KV, HEAD_DIM);
    a.v = tensor3(fx->buf[BUF_V], FA_DTYPE_F32, 7, HEADS_KV, HEAD_DIM);
    a.o = tensor3(fx->buf[BUF_O], FA_DTYPE_F32, 5, HEADS_Q, HEAD_DIM);
    a.lse = tensor2(fx->buf[BUF_LSE], FA_DTYPE_F32, HEADS_Q, 5);
    a.varlen = vl;
    a.opts = fa_options_default();
    return a;
}

static void expect_varlen_rejected(fixture *fx, const char *name, fa_fwd_args *a, fa_status expected,
                                   const char *needle_a, const char *needle_b)
{
    fa_status st = fa_forward(fx->ctx, a);
    if (st != expected)
        print_error("varlen %s: status %d (%s), expected %d\n", name, (int)st, fa_status_string(st), (int)expected);
    assert_int_equal(st, expected);
    assert_no_buffer_touched(fx, name);
    assert_error_message(fx->ctx, name, needle_a, needle_b);
}

static void test_invalid_varlen_arguments(void **state)
{
    fixture *fx = *state;
    const int32_t good_q[8] = {0, 3, 5}, good_k[8] = {0, 4, 7};
    fa_varlen vl;
    fa_fwd_args a;

    /* the base itself is valid: otherwise every rejection below would prove nothing */
    fill_buffers(fx);
    a = make_varlen_forward(fx, &vl, good_q, good_k, 2);
    assert_int_equal(fa_forward(fx->ctx, &a), FA_SUCCESS);

    const int32_t not_from_zero[8] = {1, 3, 5}, decreasing[8] = {0, 4, 3}, past_total_q[8] = {0, 3, 6};
    const int32_t past_total_k[8] = {0, 4, 8}, too_long_q[8] = {0, 4, 5};
    fill_buffers(fx);
    a = make_varlen_forward(fx, &vl, not_from_zero, good_k, 2);
    expect_varlen_rejected(fx, "cu_seqlens_q not starting at 0", &a, FA_ERR_INVALID_ARG, "cu_seqlens_q", NULL);
    a = make_varlen_forward(fx, &vl, good_q, decreasing, 2);
    expect_varlen_rejected(fx, "cu_seqlens_k decreasing", &a, FA_ERR_INVALID_ARG, "cu_seqlens_k", NULL);
    a = make_varlen_forward(fx, &vl, past_total_q, good_k, 2);
    expect_varlen_rejected(fx, "cu_seqlens_q past total_q", &a, FA_ERR_INVALID_ARG, "cu_seqlens_q", NULL);
    a = make_varlen_forward(fx, &vl, good_q, past_total_k, 2);
    expect_varlen_rejected(fx, "cu_seqlens_k past total_k", &a, FA_ERR_INVALID_ARG, "cu_seqlens_k", NULL);
    a = make_varlen_forward(fx, &vl, too_long_q, good_k, 2);
    expect_varlen_rejected(fx, "sequence longer than max_seqlen_q", &a, FA_ERR_INVALID_ARG, "max_seqlen", NULL);
    /* batch larger than the offsets describe: the extra entries (0) make the offsets decrease */
    a = make_varlen_forward(fx, &vl, good_q, good_k, 3);
    expect_varlen_rejected(fx, "batch larger than the offsets", &a, FA_ERR_INVALID_ARG, "cu_seqlens_q", NULL);
    a = make_varlen_forward(fx, &vl, good_q, good_k, -1);
    expect_varlen_rejected(fx, "negative batch", &a, FA_ERR_INVALID_ARG, "batch", NULL);
    a = make_varlen_forward(fx, &vl, good_q, good_k, 2);
    vl.max_seqlen_k = -1;
    expect_varlen_rejected(fx, "negative max_seqlen_k", &a, FA_ERR_INVALID_ARG, "max_seqlen", NULL);
    a = make_varlen_forward(fx, &vl, good_q, good_k, 2);
    vl.cu_seqlens_k = NULL;
    expect_varlen_rejected(fx, "cu_seqlens_k NULL", &a, FA_ERR_INVALID_ARG, "cu_seqlens_k", "null");
    a = make_varlen_forward(fx, &vl, good_q, good_k, 2);
    vl.cu_seqlens_q = NULL;
    expect_varlen_rejected(fx, "cu_seqlens_q NULL", &a, FA_ERR_INVALID_ARG, "cu_seqlens_q", "null");
    /* dense 4-d tensors with a varlen descriptor */
    a = make_forward(fx, -1, -1, -1);
    a.varlen = &vl;
    vl.cu_seqlens_q = cu_q_storage;
    vl.cu_seqlens_k = cu_k_storage;
    expect_varlen_rejected(fx, "4-d tensors with varlen", &a, FA_ERR_INVALID_ARG, "ndim", NULL);
    /* the dense LSE layout with varlen */
    a = make_varlen_forward(fx, &vl, good_q, good_k, 2);
    a.lse = tensor3(fx->buf[BUF_LSE], FA_DTYPE_F32, 2, HEADS_Q, 3);
    expect_varlen_rejected(fx, "3-d lse with varlen", &a, FA_ERR_INVALID_ARG, "lse", "ndim");
    a = make_varlen_forward(fx, &vl, good_q, good_k, 2);
    a.lse = tensor2(fx->buf[BUF_LSE], FA_DTYPE_F32, HEADS_Q, 4);
    expect_varlen_rejected(fx, "lse of the wrong total", &a, FA_ERR_INVALID_ARG, "lse", "shape");
    /* packed o with the wrong number of rows */
    a = make_varlen_forward(fx, &vl, good_q, good_k, 2);
    a.o = tensor3(fx->buf[BUF_O], FA_DTYPE_F32, 4, HEADS_Q, HEAD_DIM);
    expect_varlen_rejected(fx, "o of the wrong total", &a, FA_ERR_INVALID_ARG, "o", "shape");
}

/* The varlen base as a backward: o and dout inputs, dq / dk / dv outputs in their own buffers. */
static fa_bwd_args varlen_backward_of(fixture *fx, const fa_fwd_args *f)
{
    fa_bwd_args b;
    memset(&b, 0, sizeof b);
    b.q = f->q;
    b.k = f->k;
    b.v = f->v;
    b.o = f->o;
    b.lse = f->lse;
    b.dout = f->o;
    b.dout.data = fx->buf[BUF_DOUT];
    b.dq = f->q;
    b.dq.data = fx->buf[BUF_DQ];
    b.dk = f->k;
    b.dk.data = fx->buf[BUF_DK];
    b.dv = f->v;
    b.dv.data = fx->buf[BUF_DV];
    b.varlen = f->varlen;
    b.opts = f->opts;
    return b;
}

/* max_seqlen bounds every sequence; a loose bound gives the tight bound's result and plan (the
 * library plans with the longest actual sequence), a bound that int32 offsets cannot reach is a
 * caller's bug and rejected, by every entry point, before anything is written. (A bound of
 * 2^63 - 1 once made fa_plan report -576460752303423487 query blocks and fa_forward return
 * success without writing; 2^40 never returned.) */
static void test_varlen_max_seqlen_bounds(void **state)
{
    fixture *fx = *state;
    const int32_t good_q[8] = {0, 3, 5}, good_k[8] = {0, 4, 7};
    fa_varlen vl;
    const size_t o_bytes = 5 * HEADS_Q * HEAD_DIM * sizeof(float), lse_bytes = HEADS_Q * 5 * sizeof(float);
    float *tight = malloc(o_bytes + lse_bytes);
    assert_non_null(tight);

    fill_buffers(fx);
    fa_fwd_args a = make_varlen_forward(fx, &vl, good_q, good_k, 2);
    fa_plan_info tight_plan, plan;
    assert_int_equal(fa_plan(fx->ctx, &a, &tight_plan), FA_SUCCESS);
    assert_int_equal(tight_plan.num_q_blocks, (3 + tight_plan.block_q - 1) / tight_plan.block_q);
    assert_int_equal(tight_plan.num_k_blocks, (4 + tight_plan.block_k - 1) / tight_plan.block_k);
    assert_int_equal(fa_forward(fx->ctx, &a), FA_SUCCESS);
    memcpy(tight, fx->buf[BUF_O], o_bytes);
    memcpy((char *)tight + o_bytes, fx->buf[BUF_LSE], lse_bytes);

    const int64_t loose[][2] = {{1000, 4}, {3, 1000000}, {INT32_MAX, INT32_MAX}};
    for (size_t l = 0; l < sizeof loose / sizeof loose[0]; ++l) {
        fill_buffers(fx);
        a = make_varlen_forward(fx, &vl, good_q, good_k, 2);
        vl.max_seqlen_q = loose[l][0];
        vl.max_seqlen_k = loose[l][1];
        assert_int_equal(fa_plan(fx->ctx, &a, &plan), FA_SUCCESS);
        assert_int_equal(plan.num_q_blocks, tight_plan.num_q_blocks);
        assert_int_equal(plan.num_k_blocks, tight_plan.num_k_blocks);
        assert_int_equal(fa_forward(fx->ctx, &a), FA_SUCCESS);
        assert_memory_equal(tight, fx->buf[BUF_O], o_bytes);
        assert_memory_equal((char *)tight + o_bytes, fx->buf[BUF_LSE], lse_bytes);
    }

    const int64_t absurd[][2] = {{INT64_MAX, 4}, {(int64_t)1 << 40, 4}, {(int64_t)INT32_MAX + 1, 4}, {3, INT64_MAX},
                                 {INT64_MAX, INT64_MAX}};
    for (size_t l = 0; l < sizeof absurd / sizeof absurd[0]; ++l) {
        char name[96];
        snprintf(name, sizeof name, "max_seqlen (%lld, %lld)", (long long)absurd[l][0], (long long)absurd[l][1]);
        fill_buffers(fx);
        a = make_varlen_forward(fx, &vl, good_q, good_k, 2);
        vl.max_seqlen_q = absurd[l][0];
        vl.max_seqlen_k = absurd[l][1];
        expect_varlen_rejected(fx, name, &a, FA_ERR_INVALID_ARG, "max_seqlen", NULL);
        assert_int_equal(fa_plan(fx->ctx, &a, &plan), FA_ERR_INVALID_ARG);
        assert_error_message(fx->ctx, name, "max_seqlen", NULL);
        assert_int_equal(fa_query_support(fx->ctx, &a, 1, NULL, 0), FA_ERR_INVALID_ARG);
        fill_lse_for_backward(fx);
        fa_bwd_args b = varlen_backward_of(fx, &a);
        assert_int_equal(fa_backward(fx->ctx, &b), FA_ERR_INVALID_ARG);
        assert_error_message(fx->ctx, name, "max_seqlen", NULL);
        assert_no_buffer_touched(fx, name);
    }
    free(tight);
}

/* A dense problem with no batch lets any sequence length through the element counts; lengths
 * whose tile counts and diagonals overflow are rejected rather than planned. */
static void test_empty_batch_of_impossible_length(void **state)
{
    fixture *fx = *state;
    fill_buffers(fx);
    fa_fwd_args f = make_forward(fx, 0, INT64_MAX, -1);
    fa_plan_info plan;
    assert_int_equal(fa_plan(fx->ctx, &f, &plan), FA_ERR_OVERFLOW);
    assert_error_message(fx->ctx, "seqlen_q INT64_MAX, batch 0", "seqlen_q", NULL);
    assert_int_equal(fa_forward(fx->ctx, &f), FA_ERR_OVERFLOW);
    f = make_forward(fx, 0, -1, INT64_MAX - 5);
    assert_int_equal(fa_forward(fx->ctx, &f), FA_ERR_OVERFLOW);
    fa_bwd_args b = make_backward(fx, 0, INT64_MAX, INT64_MAX);
    assert_int_equal(fa_backward(fx->ctx, &b), FA_ERR_OVERFLOW);
    assert_no_buffer_touched(fx, "batch 0 of impossible length");
    /* a long but possible empty batch is fine */
    f = make_forward(fx, 0, (int64_t)1 << 40, (int64_t)1 << 40);
    assert_int_equal(fa_plan(fx->ctx, &f, &plan), FA_SUCCESS);
    assert_int_equal(plan.num_q_blocks, (((int64_t)1 << 40) + plan.block_q - 1) / plan.block_q);
    assert_int_equal(fa_forward(fx->ctx, &f), FA_SUCCESS);
    assert_no_buffer_touched(fx, "batch 0 of length 2^40");
}

/* Heads are bounded (2^31 - 1) and so is batch x heads x the longest sequence (64 bits), even
 * when Q is empty: the CPU backward walks every query head of a kv head's group per key tile. */
static void test_head_count_and_work_item_limits(void **state)
{
    fixture *fx = *state;
    const int64_t too_many = (int64_t)INT32_MAX + 1;
    fill_buffers(fx);
    fill_lse_for_backward(fx);
    fa_fwd_args f = make_forward(fx, 1, 0, -1);
    f.q = tensor4(fx->buf[BUF_Q], FA_DTYPE_F32, 1, 0, too_many, HEAD_DIM);
    f.o = f.q;
    f.o.data = fx->buf[BUF_O];
    f.lse = tensor3(fx->buf[BUF_LSE], FA_DTYPE_F32, 1, too_many, 0);
    f.k = tensor4(fx->buf[BUF_K], FA_DTYPE_F32, 1, SEQ_K, 1, HEAD_DIM);
    f.v = tensor4(fx->buf[BUF_V], FA_DTYPE_F32, 1, SEQ_K, 1, HEAD_DIM);
    assert_int_equal(fa_forward(fx->ctx, &f), FA_ERR_UNSUPPORTED);
    assert_error_message(fx->ctx, "heads_q 2^31, forward", "heads_q", "2^31");
    fa_plan_info plan;
    assert_int_equal(fa_plan(fx->ctx, &f, &plan), FA_ERR_UNSUPPORTED);
    fa_bwd_args b = make_backward(fx, 1, 0, -1);
    b.q = b.o = b.dout = b.dq = f.q;
    b.o.data = fx->buf[BUF_O];
    b.dout.data = fx->buf[BUF_DOUT];
    b.dq.data = fx->buf[BUF_DQ];
    b.lse = f.lse;
    b.k = f.k;
    b.v = f.v;
    b.dk = f.k;
    b.dk.data = fx->buf[BUF_DK];
    b.dv = f.v;
    b.dv.data = fx->buf[BUF_DV];
    assert_int_equal(fa_backward(fx->ctx, &b), FA_ERR_UNSUPPORTED);
    assert_error_message(fx->ctx, "heads_q 2^31, backward", "heads_q", "2^31");
    /* tests/fuzz/findings/api-backward-empty-q-2e62-heads-hang.bin: 2^62 query heads on one kv head */
    b.q.shape[2] = b.o.shape[2] = b.dout.shape[2] = b.dq.shape[2] = b.lse.shape[1] = (int64_t)1 << 62;
    assert_int_equal(fa_backward(fx->ctx, &b), FA_ERR_UNSUPPORTED);
    assert_no_buffer_touched(fx, "heads_q above 2^31 - 1");

    /* 2^20 sequences x 2^30 heads x 2^20 keys: an empty Q, but 2^70 work items */
    fill_buffers(fx);
    f = make_forward(fx, (int64_t)1 << 20, 0, (int64_t)1 << 20);
    f.q.shape[2] = f.o.shape[2] = f.lse.shape[1] = (int64_t)1 << 30;
    f.k = tensor4(fx->buf[BUF_K], FA_DTYPE_F32, (int64_t)1 << 20, (int64_t)1 << 20, 1, HEAD_DIM);
    f.v = f.k;
    assert_int_equal(fa_forward(fx->ctx, &f), FA_ERR_OVERFLOW);
    assert_error_message(fx->ctx, "2^70 work items", "work items", "overflow");
    assert_no_buffer_touched(fx, "2^70 work items");
}

/* fa_plan reports the workspace the CPU backend would allocate; a size past 64 bits is an error,
 * not a wrapped number. The tensors are never read (fake addresses far apart, so that the claimed
 * spans do not overlap): K of 2^53 rows x d 256 in fp16 (2^62 bytes) needs 2^64 bytes of packed
 * fp32 K^T / V tiles; Q of that size 2^64 bytes of fp32 dQ partial sums in the backward. */
static void test_workspace_size_overflow(void **state)
{
    fixture *fx = *state;
    const int64_t rows = (int64_t)1 << 53;
    void *const far_a = (void *)((uintptr_t)1 << 62), *const far_b = (void *)((uintptr_t)1 << 63);
    fill_buffers(fx);
    fa_fwd_args f;
    memset(&f, 0, sizeof f);
    f.opts = fa_options_default();
    f.q = tensor4(fx->buf[BUF_Q], FA_DTYPE_F16, 1, 1, 1, 256);
    f.o = tensor4(fx->buf[BUF_O], FA_DTYPE_F16, 1, 1, 1, 256);
    f.k = tensor4(far_a, FA_DTYPE_F16, 1, rows, 1, 256);
    f.v = f.k;
    fa_plan_info plan, untouched;
    memset(&plan, POISON_BYTE, sizeof plan);
    memcpy(&untouched, &plan, sizeof plan);
    assert_int_equal(fa_plan(fx->ctx, &f, &plan), FA_ERR_OVERFLOW);
    assert_error_message(fx->ctx, "forward workspace of 2^64 bytes", "workspace", "overflow");
    assert_memory_equal(&plan, &untouched, sizeof plan); /* a failed plan writes nothing */
    assert_int_equal(fa_forward(fx->ctx, &f), FA_ERR_OVERFLOW);
    assert_error_message(fx->ctx, "forward of 2^64 workspace bytes", "workspace", "overflow");
    f.q = tensor4(far_a, FA_DTYPE_F16, 1, rows, 1, 256);
    f.o = tensor4(far_b, FA_DTYPE_F16, 1, rows, 1, 256);
    f.k = tensor4(fx->buf[BUF_K], FA_DTYPE_F16, 1, 1, 1, 256);
    f.v = f.k;
    assert_int_equal(fa_plan(fx->ctx, &f, &plan), FA_ERR_OVERFLOW);
    assert_error_message(fx->ctx, "backward workspace of 2^64 bytes", "backward", "workspace");
    assert_memory_equal(&plan, &untouched, sizeof plan);
    assert_no_buffer_touched(fx, "workspace size overflow");
}

/* An empty batch with a block mask runs nothing, so the core builds no per-tile lists for it:
 * at seqlen_q 2^40 they would take 2^34 row offsets (tests/fuzz/findings/
 * api-forward-empty-batch-blockmask-2e32-rows-hang.bin: 2^32 rows, a hang under ASan). */
static void test_empty_batch_with_block_mask_builds_nothing(void **state)
{
    fixture *fx = *state;
    const int64_t huge = (int64_t)1 << 40;
    fa_block_mask mask;
    assert_int_equal(fa_block_mask_create(&mask, FA_BLOCK_DENSE, 1, huge, SEQ_K, huge, 1, 0, 0.0, 0), FA_SUCCESS);
    fill_buffers(fx);
    fa_fwd_args f = make_forward(fx, 0, huge, -1);
    f.opts.block_mask = &mask;
    fa_status st = fa_forward(fx->ctx, &f);
    if (st != FA_SUCCESS)
        print_error("empty batch, block mask, seqlen_q 2^40: %s\n", fa_context_last_error(fx->ctx));
    assert_int_equal(st, FA_SUCCESS);
    assert_int_equal(fa_query_support(fx->ctx, &f, 1, NULL, 0), FA_SUCCESS);
    fill_lse_for_backward(fx);
    fa_bwd_args b = make_backward(fx, 0, huge, -1);
    b.opts.block_mask = &mask;
    assert_int_equal(fa_backward(fx->ctx, &b), FA_SUCCESS);
    assert_no_buffer_touched(fx, "empty batch with a block mask");
    fa_block_mask_destroy(&mask);
}

/* cu_seqlens are inputs: lying inside an output buffer they would be overwritten while the kernels
 * read them, so they are rejected like any other input / output overlap. */
static void test_cu_seqlens_inside_an_output(void **state)
{
    fixture *fx = *state;
    const int32_t good_q[8] = {0, 3, 5}, good_k[8] = {0, 4, 7};
    struct {
        const char *name;
        int buffer, is_q, backward;
        const char *needle;
    } cases[] = {
        {"cu_seqlens_q inside o", BUF_O, 1, 0, "cu_seqlens_q"},
        {"cu_seqlens_k inside lse", BUF_LSE, 0, 0, "cu_seqlens_k"},
        {"cu_seqlens_q inside dq", BUF_DQ, 1, 1, "cu_seqlens_q"},
        {"cu_seqlens_k inside dk", BUF_DK, 0, 1, "cu_seqlens_k"},
        {"cu_seqlens_k inside dv", BUF_DV, 0, 1, "cu_seqlens_k"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
        fill_buffers(fx);
        fa_varlen vl;
        fa_fwd_args a = make_varlen_forward(fx, &vl, good_q, good_k, 2);
        /* the offsets, copied 12 elements into the output (inside its 5-row extent) */
        int32_t *inside = (int32_t *)(fx->buf[cases[c].buffer] + 12);
        memcpy(inside, cases[c].is_q ? good_q : good_k, 3 * sizeof(int32_t));
        if (cases[c].is_q)
            vl.cu_seqlens_q = inside;
        else
            vl.cu_seqlens_k = inside;
        fa_status st;
        if (cases[c].backward) {
            fill_lse_for_backward(fx);
            memcpy(fx->snapshot + (size_t)cases[c].buffer * CAPACITY * sizeof(float), fx->buf[cases[c].buffer],
                   CAPACITY * sizeof(float));
            fa_bwd_args b = varlen_backward_of(fx, &a);
            st = fa_backward(fx->ctx, &b);
        } else {
            memcpy(fx->snapshot + (size_t)cases[c].buffer * CAPACITY * sizeof(float), fx->buf[cases[c].buffer],
                   CAPACITY * sizeof(float));
            st = fa_forward(fx->ctx, &a);
        }
        if (st != FA_ERR_INVALID_ARG)
            print_error("%s: status %d (%s)\n", cases[c].name, (int)st, fa_status_string(st));
        assert_int_equal(st, FA_ERR_INVALID_ARG);
        assert_no_buffer_touched(fx, cases[c].name);
        assert_error_message(fx->ctx, cases[c].name, cases[c].needle, "overlap");
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_invalid_varlen_arguments),
        cmocka_unit_test(test_varlen_max_seqlen_bounds),
        cmocka_unit_test(test_empty_batch_of_impossible_length),
        cmocka_unit_test(test_head_count_and_work_item_limits),
        cmocka_unit_test(test_workspace_size_overflow),
        cmocka_unit_test(test_empty_batch_with_block_mask_builds_nothing),
        cmocka_unit_test(test_cu_seqlens_inside_an_output),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
