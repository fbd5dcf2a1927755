/* test_api_edges.c: the public API's valid edge cases (empty batch or sequences, huge windows,
 * negative scale), plan and query, status strings, backend discovery, the capability rule for the
 * score modifiers, contexts, the environment (FLASHATTN_BACKEND, FLASHATTN_KERNELS) and the memory
 * helpers, through flashattn.h only. */
#include "api_fixture.h"

/* ---------------------------------------------------------------- valid edge cases */

static int all_bytes_are_poison(const void *p, size_t bytes)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < bytes; ++i)
        if (c[i] != POISON_BYTE)
            return 0;
    return 1;
}

static void test_empty_batch_succeeds_and_writes_nothing(void **state)
{
    fixture *fx = *state;
    fill_buffers(fx);
    fa_fwd_args f = make_forward(fx, 0, -1, -1);
    assert_int_equal(fa_forward(fx->ctx, &f), FA_SUCCESS);
    assert_string_equal(fa_context_last_error(fx->ctx), "");
    assert_no_buffer_touched(fx, "batch 0 forward");
    fill_buffers(fx);
    fill_lse_for_backward(fx);
    fa_bwd_args b = make_backward(fx, 0, -1, -1);
    assert_int_equal(fa_backward(fx->ctx, &b), FA_SUCCESS);
    assert_no_buffer_touched(fx, "batch 0 backward");
}

static void test_empty_query_sequence(void **state)
{
    fixture *fx = *state;
    fill_buffers(fx);
    fa_fwd_args f = make_forward(fx, -1, 0, -1);
    assert_int_equal(fa_forward(fx->ctx, &f), FA_SUCCESS);
    assert_no_buffer_touched(fx, "seqlen_q 0 forward");
    /* no query contributes to any key's gradient: dK = dV = 0 */
    fill_buffers(fx);
    fill_lse_for_backward(fx);
    fa_bwd_args b = make_backward(fx, -1, 0, -1);
    assert_int_equal(fa_backward(fx->ctx, &b), FA_SUCCESS);
    const int64_t kv_elements = BATCH * SEQ_K * HEADS_KV * HEAD_DIM;
    for (int64_t i = 0; i < kv_elements; ++i) {
        assert_true(fx->buf[BUF_DK][i] == 0.0f);
        assert_true(fx->buf[BUF_DV][i] == 0.0f);
    }
    /* and nothing past them */
    assert_true(all_bytes_are_poison(fx->buf[BUF_DK] + kv_elements, (CAPACITY - kv_elements) * sizeof(float)));
    assert_true(all_bytes_are_poison(fx->buf[BUF_DV] + kv_elements, (CAPACITY - kv_elements) * sizeof(float)));
    assert_true(all_bytes_are_poison(fx->buf[BUF_DQ], CAPACITY * sizeof(float)));
}

/* No query rows and 2^31 - 1 query heads on one kv head: the backward writes dK = dV = 0 key tile
 * by key tile without visiting the heads (2^31 of them for each of the thousands of tiles of 2^20
 * keys would take many minutes), and touches nothing else. */
static void test_empty_query_many_heads(void **state)
{
    fixture *fx = *state;
    const int64_t keys = (int64_t)1 << 20, heads = INT32_MAX;
    float *kv[4];
    for (int i = 0; i < 4; ++i) {
        void *p = NULL;
        assert_int_equal(fa_malloc(fx->ctx, (size_t)keys * sizeof(float), &p), FA_SUCCESS);
        kv[i] = p;
        if (i < 2)
            for (int64_t j = 0; j < keys; ++j)
                kv[i][j] = (float)(j % 7) - 3.0f;
        else
            memset(kv[i], POISON_BYTE, (size_t)keys * sizeof(float));
    }
    fill_buffers(fx);
    fill_lse_for_backward(fx);
    fa_bwd_args b = make_backward(fx, 1, 0, keys);
    b.q = tensor4(fx->buf[BUF_Q], FA_DTYPE_F32, 1, 0, heads, 1);
    b.o = b.dout = b.dq = b.q;
    b.o.data = fx->buf[BUF_O];
    b.dout.data = fx->buf[BUF_DOUT];
    b.dq.data = fx->buf[BUF_DQ];
    b.lse = tensor3(fx->buf[BUF_LSE], FA_DTYPE_F32, 1, heads, 0);
    b.k = tensor4(kv[0], FA_DTYPE_F32, 1, keys, 1, 1);
    b.v = b.dk = b.dv = b.k;
    b.v.data = kv[1];
    b.dk.data = kv[2];
    b.dv.data = kv[3];
    assert_int_equal(fa_backward(fx->ctx, &b), FA_SUCCESS);
    for (int64_t j = 0; j < keys; ++j) {
        assert_true(kv[2][j] == 0.0f);
        assert_true(kv[3][j] == 0.0f);
    }
    assert_no_buffer_touched(fx, "empty Q, 2^31 - 1 heads");
    /* the forward of that has nothing to write */
    fa_fwd_args f = make_forward(fx, 1, 0, keys);
    f.q = b.q;
    f.o = b.o;
    f.lse = b.lse;
    f.k = b.k;
    f.v = b.v;
    assert_int_equal(fa_forward(fx->ctx, &f), FA_SUCCESS);
    assert_no_buffer_touched(fx, "empty Q, 2^31 - 1 heads, forward");
    for (int i = 0; i < 4; ++i)
        fa_free(fx->ctx, kv[i]);
}

/* No keys: every row is fully masked, so O = 0 and LSE = -inf (flashattn.h), never NaN. */
static void test_empty_key_sequence(void **state)
{
    fixture *fx = *state;
    fill_buffers(fx);
    fa_fwd_args f = make_forward(fx, -1, -1, 0);
    assert_int_equal(fa_forward(fx->ctx, &f), FA_SUCCESS);
    const int64_t o_elements = BATCH * SEQ_Q * HEADS_Q * HEAD_DIM, lse_elements = BATCH * HEADS_Q * SEQ_Q;
    for (int64_t i = 0; i < o_elements; ++i)
        assert_true(fx->buf[BUF_O][i] == 0.0f);
    for (int64_t i = 0; i < lse_elements; ++i)
        assert_true(isinf(fx->buf[BUF_LSE][i]) && fx->buf[BUF_LSE][i] < 0.0f);
    assert_true(all_bytes_are_poison(fx->buf[BUF_O] + o_elements, (CAPACITY - o_elements) * sizeof(float)));
    assert_true(all_bytes_are_poison(fx->buf[BUF_LSE] + lse_elements, (CAPACITY - lse_elements) * sizeof(float)));
    /* the backward of that: dQ = 0 */
    fill_buffers(fx);
    for (int64_t i = 0; i < lse_elements; ++i)
        fx->buf[BUF_LSE][i] = -INFINITY;
    for (int64_t i = 0; i < o_elements; ++i)
        fx->buf[BUF_O][i] = 0.0f;
    fa_bwd_args b = make_backward(fx, -1, -1, 0);
    assert_int_equal(fa_backward(fx->ctx, &b), FA_SUCCESS);
    for (int64_t i = 0; i < o_elements; ++i)
        assert_true(fx->buf[BUF_DQ][i] == 0.0f);
    assert_true(all_bytes_are_poison(fx->buf[BUF_DQ] + o_elements, (CAPACITY - o_elements) * sizeof(float)));
}

/* Valid windows and dropout are accepted, and so are ALiBi slopes whose only non-finite entries lie
 * in the padding between rows, which the call never reads, and any slopes of a call with no query
 * row (validation reads none: a buffer that holds fewer is not overrun). */
static void test_valid_windows_and_unused_slopes_are_accepted(void **state)
{
    fixture *fx = *state;
    fill_buffers(fx);
    float slopes[BATCH * (HEADS_Q + 1)];
    for (int i = 0; i < BATCH * (HEADS_Q + 1); ++i)
        slopes[i] = i % (HEADS_Q + 1) == HEADS_Q ? NAN : 0.125f;
    fa_fwd_args f = make_forward(fx, -1, -1, -1);
    f.opts.alibi_slopes = slopes;
    f.opts.alibi_batch_stride = HEADS_Q + 1;
    assert_int_equal(fa_forward(fx->ctx, &f), FA_SUCCESS);
    float nan_slopes[HEADS_Q];
    for (int i = 0; i < HEADS_Q; ++i)
        nan_slopes[i] = NAN;
    f = make_forward(fx, -1, 0, -1);
    f.opts.alibi_slopes = nan_slopes;
    assert_int_equal(fa_forward(fx->ctx, &f), FA_SUCCESS);
    f = make_forward(fx, -1, -1, -1);
    f.opts.window_left = -1;
    f.opts.window_right = 0;
    f.opts.dropout_p = 0.0f;
    assert_int_equal(fa_forward(fx->ctx, &f), FA_SUCCESS);
    f = make_forward(fx, -1, -1, -1);
    f.opts.dropout_p = 0.999f;
    f.opts.window_left = 2;
    f.opts.window_right = 3;
    f.opts.causal = 1;
    assert_int_equal(fa_forward(fx->ctx, &f), FA_SUCCESS);
    /* the forward without an LSE is fine */
    f = make_forward(fx, -1, -1, -1);
    f.lse.data = NULL;
    fill_buffers(fx);
    assert_int_equal(fa_forward(fx->ctx, &f), FA_SUCCESS);
    assert_true(all_bytes_are_poison(fx->buf[BUF_LSE], CAPACITY * sizeof(float)));
}

/* A window bound near INT64_MAX means "no limit on that side" (flashattn.h): forward and backward
 * give bit for bit what -1 gives. (The bound once overflowed diag + right + 1 in core/mask.h and
 * masked every key: O = 0, LSE = -inf.) */
static void test_huge_windows_equal_unbounded(void **state)
{
    fixture *fx = *state;
    const int64_t windows[][4] = {
        {0, INT64_MAX, 0, -1},   {INT64_MAX, 0, -1, 0},         {INT64_MAX, INT64_MAX, -1, -1},
        {INT64_MAX, -1, -1, -1}, {3, INT64_MAX - 1, 3, -1},    {INT64_MAX - 7, 1, -1, 1},
    };
    const size_t o_bytes = (size_t)BATCH * SEQ_Q * HEADS_Q * HEAD_DIM * sizeof(float);
    const size_t lse_bytes = (size_t)BATCH * HEADS_Q * SEQ_Q * sizeof(float);
    const size_t kv_bytes = (size_t)BATCH * SEQ_K * HEADS_KV * HEAD_DIM * sizeof(float);
    float *want = malloc(o_bytes + lse_bytes + o_bytes + 2 * kv_bytes);
    assert_non_null(want);
    for (size_t w = 0; w < sizeof windows / sizeof windows[0]; ++w)
        for (int causal = 0; causal <= 1; ++causal) {
            /* forward: the unbounded result, then the huge window's */
            fill_buffers(fx);
            fa_fwd_args f = make_forward(fx, -1, -1, -1);
            f.opts.causal = causal;
            f.opts.window_left = windows[w][2];
            f.opts.window_right = windows[w][3];
            assert_int_equal(fa_forward(fx->ctx, &f), FA_SUCCESS);
            memcpy(want, fx->buf[BUF_O], o_bytes);
            memcpy((char *)want + o_bytes, fx->buf[BUF_LSE], lse_bytes);
            for (int64_t i = 0; i < BATCH * HEADS_Q * SEQ_Q; ++i)
                assert_true(isfinite(fx->buf[BUF_LSE][i])); /* seqlen_k > seqlen_q: no row fully masked */
            f.opts.window_left = windows[w][0];
            f.opts.window_right = windows[w][1];
            memset(fx->buf[BUF_O], POISON_BYTE, CAPACITY * sizeof(float));
            memset(fx->buf[BUF_LSE], POISON_BYTE, CAPACITY * sizeof(float));
            assert_int_equal(fa_forward(fx->ctx, &f), FA_SUCCESS);
            if (memcmp(want, fx->buf[BUF_O], o_bytes) != 0 ||
                memcmp((char *)want + o_bytes, fx->buf[BUF_LSE], lse_bytes) != 0) {
                print_error("window (%lld, %lld) causal %d: forward differs from (%lld, %lld)\n",
                            (long long)windows[w][0], (long long)windows[w][1], causal, (long long)windows[w][2],
                            (long long)windows[w][3]);
                fail();
            }
            /* backward from that forward's O and LSE, unbounded then huge */
            fa_bwd_args b = make_backward(fx, -1, -1, -1);
            b.opts = f.opts;
            b.opts.window_left = windows[w][2];
            b.opts.window_right = windows[w][3];
            assert_int_equal(fa_backward(fx->ctx, &b), FA_SUCCESS);
            char *grads = (char *)want + o_bytes + lse_bytes;
            memcpy(grads, fx->buf[BUF_DQ], o_bytes);
            memcpy(grads + o_bytes, fx->buf[BUF_DK], kv_bytes);
            memcpy(grads + o_bytes + kv_bytes, fx->buf[BUF_DV], kv_bytes);
            b.opts.window_left = windows[w][0];
            b.opts.window_right = windows[w][1];
            memset(fx->buf[BUF_DQ], POISON_BYTE, CAPACITY * sizeof(float));
            memset(fx->buf[BUF_DK], POISON_BYTE, CAPACITY * sizeof(float));
            memset(fx->buf[BUF_DV], POISON_BYTE, CAPACITY * sizeof(float));
            assert_int_equal(fa_backward(fx->ctx, &b), FA_SUCCESS);
            assert_memory_equal(grads, fx->buf[BUF_DQ], o_bytes);
            assert_memory_equal(grads + o_bytes, fx->buf[BUF_DK], kv_bytes);
            assert_memory_equal(grads + o_bytes + kv_bytes, fx->buf[BUF_DV], kv_bytes);
        }
    free(want);
}

/* fa_tensor_contiguous on shapes whose strides or element count do not fit 64 bits must not
 * overflow (undefined behaviour, caught by -fsanitize=undefined) and must lead fa_forward to
 * FA_ERR_OVERFLOW, never to a wrapped stride that passes validation. */
static void test_contiguous_tensor_of_impossible_shape(void **state)
{
    fixture *fx = *state;
    const int64_t huge = (int64_t)1 << 40;
    fa_fwd_args f = make_forward(fx, -1, -1, -1);
    f.q = tensor4(FAKE_POINTER, FA_DTYPE_F32, huge, huge, HEADS_Q, HEAD_DIM);
    f.k = tensor4(FAKE_POINTER, FA_DTYPE_F32, huge, huge, HEADS_KV, HEAD_DIM);
    f.v = f.k;
    f.o = tensor4(FAKE_POINTER, FA_DTYPE_F32, huge, huge, HEADS_Q, HEAD_DIM);
    f.lse = tensor3(FAKE_POINTER, FA_DTYPE_F32, huge, HEADS_Q, huge);
    fill_buffers(fx);
    assert_int_equal(fa_forward(fx->ctx, &f), FA_ERR_OVERFLOW);
    /* the strides themselves overflow: [1, 2^40, 2^20, 256] has stride[0] = 2^68 */
    f = make_forward(fx, -1, -1, -1);
    f.q = tensor4(FAKE_POINTER, FA_DTYPE_F32, 1, huge, (int64_t)1 << 20, 256);
    assert_int_equal(fa_forward(fx->ctx, &f), FA_ERR_OVERFLOW);
    assert_error_message(fx->ctx, "contiguous tensor of 2^68 elements", "overflow", NULL);
    assert_no_buffer_touched(fx, "impossible contiguous shapes");
}

/* Gradients into views of one packed tensor, as FlashAttention-2's packed functions write them:
 * dK and dV interleaved in [batch, seqlen_k, 2, heads_kv, d] (dQ beside them in its own buffer)
 * share no element, so the call succeeds with the bits of separate buffers; with dV one element
 * further on, every dV row but the last shares elements with dK, and the call fails untouched. */
static void test_packed_gradients_are_accepted(void **state)
{
    fixture *fx = *state;
    enum { ROW = HEADS_KV * HEAD_DIM, KV = BATCH * SEQ_K * ROW };
    fill_buffers(fx);
    fill_lse_for_backward(fx);
    fa_bwd_args b = make_backward(fx, -1, -1, -1);
    assert_int_equal(fa_backward(fx->ctx, &b), FA_SUCCESS);
    float want_k[KV], want_v[KV];
    memcpy(want_k, fx->buf[BUF_DK], sizeof want_k);
    memcpy(want_v, fx->buf[BUF_DV], sizeof want_v);

    memset(fx->buf[BUF_DK], POISON_BYTE, CAPACITY * sizeof(float));
    b.dk = tensor4_strided(fx->buf[BUF_DK], BATCH, SEQ_K, HEADS_KV, HEAD_DIM, SEQ_K * 2 * ROW, 2 * ROW, HEAD_DIM);
    b.dv = b.dk;
    b.dv.data = fx->buf[BUF_DK] + ROW;
    assert_int_equal(fa_backward(fx->ctx, &b), FA_SUCCESS);
    for (int64_t r = 0; r < BATCH * SEQ_K; ++r) {
        assert_memory_equal(fx->buf[BUF_DK] + r * 2 * ROW, want_k + r * ROW, ROW * sizeof(float));
        assert_memory_equal(fx->buf[BUF_DK] + r * 2 * ROW + ROW, want_v + r * ROW, ROW * sizeof(float));
    }

    fill_buffers(fx);
    fill_lse_for_backward(fx);
    b.dv.data = fx->buf[BUF_DK] + ROW + 1;
    assert_int_equal(fa_backward(fx->ctx, &b), FA_ERR_INVALID_ARG);
    assert_non_null(strstr(fa_context_last_error(fx->ctx), "overlap"));
    assert_no_buffer_touched(fx, "dv one element past its packed place");
}

/* An error message belongs to the call that raised it: the next successful call clears it. */
static void test_success_clears_last_error(void **state)
{
    fixture *fx = *state;
    fill_buffers(fx);
    fa_fwd_args f = make_forward(fx, -1, -1, -1);
    f.opts.dropout_p = 2.0f;
    assert_int_equal(fa_forward(fx->ctx, &f), FA_ERR_INVALID_ARG);
    assert_true(strlen(fa_context_last_error(fx->ctx)) > 0);
    f.opts.dropout_p = 0.0f;
    assert_int_equal(fa_forward(fx->ctx, &f), FA_SUCCESS);
    assert_string_equal(fa_context_last_error(fx->ctx), "");
    assert_string_equal(fa_context_last_error_location(fx->ctx), "");
    assert_string_equal(fa_context_last_error_location(NULL), "");
}

/* fa_plan reports the paper's formula for the on-chip size it used and a grid that covers the
 * problem; the chooser names a variant. */
static void test_plan_and_query_on_a_valid_problem(void **state)
{
    fixture *fx = *state;
    fill_buffers(fx);
    fa_fwd_args f = make_forward(fx, -1, -1, -1);
    fa_plan_info plan;
    assert_int_equal(fa_plan(fx->ctx, &f, &plan), FA_SUCCESS);
    int64_t m = plan.onchip_bytes / 4;
    assert_true(m >= 1);
    assert_int_equal(plan.paper_block_k, (m + 4 * HEAD_DIM - 1) / (4 * HEAD_DIM));
    assert_int_equal(plan.paper_block_q, plan.paper_block_k < HEAD_DIM ? plan.paper_block_k : HEAD_DIM);
    assert_true(plan.block_q >= 1 && plan.block_k >= 1);
    assert_int_equal(plan.num_q_blocks, (SEQ_Q + plan.block_q - 1) / plan.block_q);
    assert_int_equal(plan.num_k_blocks, (SEQ_K + plan.block_k - 1) / plan.block_k);
    assert_true(plan.workspace_fwd >= 0 && plan.workspace_bwd >= 0);
    char variant[64] = "";
    assert_int_equal(fa_query_support(fx->ctx, &f, 0, variant, sizeof variant), FA_SUCCESS);
    assert_true(strlen(variant) > 0);
    assert_int_equal(fa_query_support(fx->ctx, &f, 1, variant, sizeof variant), FA_SUCCESS);
    assert_no_buffer_touched(fx, "plan and query");
}

/* ---------------------------------------------------------------- statuses, discovery, contexts */

static void test_status_strings_are_distinct(void **state)
{
    (void)state;
    const fa_status all[] = {FA_SUCCESS,       FA_ERR_INVALID_ARG, FA_ERR_UNSUPPORTED, FA_ERR_OUT_OF_MEMORY,
                             FA_ERR_NO_BACKEND, FA_ERR_NO_DEVICE,   FA_ERR_BACKEND,     FA_ERR_OVERFLOW,
                             FA_ERR_INTERNAL};
    const size_t n = sizeof all / sizeof all[0];
    for (size_t i = 0; i < n; ++i) {
        const char *s = fa_status_string(all[i]);
        assert_non_null(s);
        assert_true(strlen(s) > 0);
        for (size_t j = 0; j < i; ++j)
            assert_string_not_equal(s, fa_status_string(all[j]));
    }
    assert_non_null(fa_status_string((fa_status)999));
    assert_non_null(fa_status_string((fa_status)-1));
    assert_int_equal(fa_dtype_size(FA_DTYPE_F32), 4);
    assert_int_equal(fa_dtype_size(FA_DTYPE_F16), 2);
    assert_int_equal(fa_dtype_size(FA_DTYPE_BF16), 2);
    assert_int_equal(fa_dtype_size((fa_dtype)9), 0);
    assert_string_not_equal(fa_dtype_name(FA_DTYPE_F16), fa_dtype_name(FA_DTYPE_BF16));
    assert_non_null(fa_dtype_name((fa_dtype)9));
}

static void test_backend_discovery(void **state)
{
    (void)state;
    int count = fa_backend_count(), has_cpu = 0;
    assert_true(count >= 1);
    for (int i = 0; i < count; ++i) {
        const char *name = fa_backend_name(i);
        assert_non_null(name);
        has_cpu |= strcmp(name, "cpu") == 0;
    }
    assert_true(has_cpu);
    assert_null(fa_backend_name(-1));
    assert_null(fa_backend_name(count));
    int devices = 0;
    assert_int_equal(fa_device_count("cpu", &devices), FA_SUCCESS);
    assert_true(devices >= 1);
    assert_int_equal(fa_device_count("no-such-backend", &devices), FA_ERR_NO_BACKEND);
    assert_int_equal(fa_device_count(NULL, &devices), FA_ERR_INVALID_ARG);
    assert_int_equal(fa_device_count("cpu", NULL), FA_ERR_INVALID_ARG);
    char name[128] = "";
    assert_int_equal(fa_device_name("cpu", 0, name, sizeof name), FA_SUCCESS);
    assert_true(strlen(name) > 0);
    assert_int_equal(fa_device_name("cpu", devices, name, sizeof name), FA_ERR_NO_DEVICE);
    assert_int_equal(fa_device_name("cpu", -1, name, sizeof name), FA_ERR_NO_DEVICE);
    assert_int_equal(fa_device_name("no-such-backend", 0, name, sizeof name), FA_ERR_NO_BACKEND);
    assert_int_equal(fa_device_name("cpu", 0, NULL, 16), FA_ERR_INVALID_ARG);
    fa_capabilities caps;
    assert_int_equal(fa_backend_capabilities("cpu", &caps), FA_SUCCESS);
    assert_true(caps.max_head_dim >= 256); /* HEAD_DIM_257 above is UNSUPPORTED, 256 is not */
    assert_true(caps.dtypes & (1u << FA_DTYPE_F32));
    assert_int_equal(fa_backend_capabilities("no-such-backend", &caps), FA_ERR_NO_BACKEND);
    assert_int_equal(fa_backend_capabilities("cpu", NULL), FA_ERR_INVALID_ARG);
}

/* A score modifier a backend does not list in its capabilities is FA_ERR_UNSUPPORTED through
 * every entry point (never ignored); one it lists passes the query. Every backend with a device. */
static void test_score_modifiers_follow_capabilities(void **state)
{
    (void)state;
    static float q[2 * 3 * 2 * 8], k[2 * 3 * 2 * 8], v[2 * 3 * 2 * 8], o[2 * 3 * 2 * 8], l[2 * 2 * 3];
    static const float slopes[2] = {0.5f, 0.25f};
    int tried = 0;
    for (int i = 0; i < fa_backend_count(); ++i) {
        const char *name = fa_backend_name(i);
        fa_capabilities caps;
        fa_context *ctx = NULL;
        assert_int_equal(fa_backend_capabilities(name, &caps), FA_SUCCESS);
        if (fa_context_create(&ctx, name, 0) != FA_SUCCESS)
            continue; /* no device for this backend here */
        void *dev[5] = {NULL};
        size_t bytes[5] = {sizeof q, sizeof k, sizeof v, sizeof o, sizeof l};
        const float *host[3] = {q, k, v};
        void *dslopes = NULL;
        int ok = 1;
        for (int b = 0; b < 5; ++b)
            ok &= fa_malloc(ctx, bytes[b], &dev[b]) == FA_SUCCESS;
        ok &= fa_malloc(ctx, sizeof slopes, &dslopes) == FA_SUCCESS;
        for (int b = 0; ok && b < 3; ++b)
            ok &= fa_memcpy(ctx, dev[b], host[b], bytes[b], FA_COPY_HOST_TO_DEVICE) == FA_SUCCESS;
        ok &= fa_memcpy(ctx, dslopes, slopes, sizeof slopes, FA_COPY_HOST_TO_DEVICE) == FA_SUCCESS;
        assert_true(ok);
        for (int mod = 0; mod < 2; ++mod) {
            fa_fwd_args a;
            memset(&a, 0, sizeof a);
            a.q = tensor4(dev[0], FA_DTYPE_F32, 2, 3, 2, 8);
            a.k = tensor4(dev[1], FA_DTYPE_F32, 2, 3, 2, 8);
            a.v = tensor4(dev[2], FA_DTYPE_F32, 2, 3, 2, 8);
            a.o = tensor4(dev[3], FA_DTYPE_F32, 2, 3, 2, 8);
            a.lse = tensor3(dev[4], FA_DTYPE_F32, 2, 2, 3);
            a.opts = fa_options_default();
            unsigned bit = mod == 0 ? FA_FEATURE_SOFTCAP : FA_FEATURE_ALIBI;
            if (mod == 0)
                a.opts.softcap = 30.0f;
            else
                a.opts.alibi_slopes = dslopes;
            fa_status expected = (caps.features & bit) ? FA_SUCCESS : FA_ERR_UNSUPPORTED;
            char variant[64];
            fa_status st = fa_query_support(ctx, &a, 1, variant, sizeof variant);
            if (st != expected)
                print_error("%s %s: query status %s, expected %s (%s)\n", name, mod ? "alibi" : "softcap",
                            fa_status_string(st), fa_status_string(expected), fa_context_last_error(ctx));
            assert_int_equal(st, expected);
            if (expected == FA_ERR_UNSUPPORTED) {
                assert_int_equal(fa_forward(ctx, &a), FA_ERR_UNSUPPORTED);
                assert_error_message(ctx, name, mod ? "ALiBi" : "softcap", name);
            } else {
                assert_int_equal(fa_forward(ctx, &a), FA_SUCCESS);
            }
        }
        for (int b = 0; b < 5; ++b)
            fa_free(ctx, dev[b]);
        fa_free(ctx, dslopes);
        fa_context_destroy(ctx);
        ++tried;
    }
    assert_true(tried >= 1);
}

static void test_context_creation_errors(void **state)
{
    (void)state;
    fa_context *ctx = (fa_context *)FAKE_POINTER;
    assert_int_equal(fa_context_create(NULL, "cpu", 0), FA_ERR_INVALID_ARG);
    assert_int_equal(fa_context_create(&ctx, "no-such-backend", 0), FA_ERR_NO_BACKEND);
    assert_null(ctx);
    ctx = (fa_context *)FAKE_POINTER;
    assert_int_equal(fa_context_create(&ctx, "cpu", 1), FA_ERR_NO_DEVICE);
    assert_null(ctx);
    assert_int_equal(fa_context_create(&ctx, "cpu", -1), FA_ERR_NO_DEVICE);
    int devices = 0;
    fa_device_count("cpu", &devices);
    assert_int_equal(fa_context_create(&ctx, "cpu", devices), FA_ERR_NO_DEVICE);
    /* a GPU backend that is not compiled in is NO_BACKEND, never a silent CPU fallback */
    const char *gpus[] = {"cuda", "hip", "opencl"};
    for (size_t g = 0; g < 3; ++g) {
        int compiled = 0;
        for (int i = 0; i < fa_backend_count(); ++i)
            compiled |= strcmp(fa_backend_name(i), gpus[g]) == 0;
        if (!compiled)
            assert_int_equal(fa_context_create(&ctx, gpus[g], 0), FA_ERR_NO_BACKEND);
    }
    /* "default" and NULL give a context */
    unsetenv("FLASHATTN_BACKEND");
    assert_int_equal(fa_context_create(&ctx, "default", 0), FA_SUCCESS);
    assert_non_null(fa_context_backend_name(ctx));
    assert_int_equal(fa_context_device(ctx), 0);
    fa_context_destroy(ctx);
    fa_context_destroy(NULL);
    assert_non_null(fa_context_last_error(NULL));
}

static void test_environment_selects_backend(void **state)
{
    (void)state;
    fa_context *ctx = NULL;
    setenv("FLASHATTN_BACKEND", "cpu", 1);
    assert_int_equal(fa_context_create(&ctx, NULL, 0), FA_SUCCESS);
    assert_string_equal(fa_context_backend_name(ctx), "cpu");
    fa_context_destroy(ctx);
    assert_int_equal(fa_context_create(&ctx, "default", 0), FA_SUCCESS);
    assert_string_equal(fa_context_backend_name(ctx), "cpu");
    fa_context_destroy(ctx);
    /* the variable overrides the default choice, so naming a missing backend there is an error */
    setenv("FLASHATTN_BACKEND", "no-such-backend", 1);
    assert_int_equal(fa_context_create(&ctx, NULL, 0), FA_ERR_NO_BACKEND);
    /* an explicit backend argument is not the default choice, so it wins */
    assert_int_equal(fa_context_create(&ctx, "cpu", 0), FA_SUCCESS);
    assert_string_equal(fa_context_backend_name(ctx), "cpu");
    fa_context_destroy(ctx);
    unsetenv("FLASHATTN_BACKEND");
    /* with only the CPU compiled in, the default is the CPU */
    if (fa_backend_count() == 1) {
        assert_int_equal(fa_context_create(&ctx, NULL, 0), FA_SUCCESS);
        assert_string_equal(fa_context_backend_name(ctx), "cpu");
        fa_context_destroy(ctx);
    }
}

static void test_context_settings(void **state)
{
    fixture *fx = *state;
    /* the CPU backend has no streams: only NULL (the context's own) is accepted */
    assert_int_equal(fa_context_set_stream(fx->ctx, NULL), FA_SUCCESS);
    assert_int_equal(fa_context_set_stream(fx->ctx, FAKE_POINTER), FA_ERR_UNSUPPORTED);
    assert_error_message(fx->ctx, "set_stream", "stream", NULL);
    assert_int_equal(fa_context_set_stream(NULL, NULL), FA_ERR_INVALID_ARG);
    assert_int_equal(fa_context_set_num_threads(fx->ctx, -1), FA_ERR_INVALID_ARG);
    assert_error_message(fx->ctx, "set_num_threads", "threads", NULL);
    assert_int_equal(fa_context_set_num_threads(NULL, 1), FA_ERR_INVALID_ARG);
    assert_int_equal(fa_context_set_num_threads(fx->ctx, 1), FA_SUCCESS);
    assert_int_equal(fa_context_num_threads(fx->ctx), 1);
    assert_int_equal(fa_context_set_num_threads(fx->ctx, 0), FA_SUCCESS);
    assert_int_equal(fa_synchronize(fx->ctx), FA_SUCCESS);
    assert_int_equal(fa_synchronize(NULL), FA_ERR_INVALID_ARG);
}

/* Calls without a context report their reason through fa_last_error(), per thread; a success
 * clears it. */
static void expect_contextless_failure(fa_status got, fa_status expected, const char *case_name, const char *needle)
{
    const char *message = fa_last_error();
    const char *location = fa_last_error_location();
    if (got != expected || has_source_location(message) || !is_source_location(location) ||
        !message_mentions(message, needle)) {
        print_error("%s: status %d (expected %d), fa_last_error \"%s\" (location \"%s\") should mention \"%s\", "
                    "with file:line in the location only\n",
                    case_name, (int)got, (int)expected, message, location, needle);
        fail();
    }
}

/* fa_dropout_keep_mask is the mask fa_forward applies: with q = 0 every probability is 1 / sk and
 * V = the identity (d = sk), so O[i][j] = keep(i, j) / (sk (1 - p)): kept exactly where O > 0. */
static void test_dropout_keep_mask_is_the_forwards(void **state)
{
    (void)state;
    enum { B = 2, S = 12, H = 3, D = 12 };
    static float q[B * S * H * D], kv[B * S * H * D], o[B * S * H * D];
    static uint8_t keep[B * H * S * S];
    for (int b = 0; b < B; ++b)
        for (int s = 0; s < S; ++s)
            for (int h = 0; h < H; ++h)
                kv[((b * S + s) * H + h) * D + s] = 1.0f;
    fa_context *ctx = NULL;
    assert_int_equal(fa_context_create(&ctx, "cpu", 0), FA_SUCCESS);
    int64_t shape[4] = {B, S, H, D};
    fa_fwd_args a;
    memset(&a, 0, sizeof a);
    a.q = fa_tensor_contiguous(q, FA_DTYPE_F32, 4, shape);
    a.k = fa_tensor_contiguous(kv, FA_DTYPE_F32, 4, shape);
    a.v = fa_tensor_contiguous(kv, FA_DTYPE_F32, 4, shape);
    a.o = fa_tensor_contiguous(o, FA_DTYPE_F32, 4, shape);
    a.opts = fa_options_default();
    a.opts.dropout_p = 0.4f;
    a.opts.dropout_seed = 0x123456789abcdefull;
    a.opts.dropout_offset = 7;
    assert_int_equal(fa_forward(ctx, &a), FA_SUCCESS);
    assert_int_equal(fa_dropout_keep_mask(a.opts.dropout_seed, 7, 0.4f, B, H, S, S, keep), FA_SUCCESS);
    assert_string_equal(fa_last_error(), "");
    int kept = 0;
    for (int b = 0; b < B; ++b)
        for (int h = 0; h < H; ++h)
            for (int i = 0; i < S; ++i)
                for (int j = 0; j < S; ++j) {
                    int k = keep[((b * H + h) * S + i) * S + j];
                    assert_int_equal(k, o[((b * S + i) * H + h) * D + j] > 0.0f);
                    kept += k;
                }
    assert_true(kept > B * H * S * S / 4 && kept < B * H * S * S);  /* p = 0.4 dropped some, not all */
    assert_int_equal(fa_dropout_keep_mask(1, 0, 0.0f, 1, 1, 2, 2, keep), FA_SUCCESS);
    assert_int_equal(keep[0] + keep[1] + keep[2] + keep[3], 4);
    expect_contextless_failure(fa_dropout_keep_mask(1, 0, 1.0f, 1, 1, 2, 2, keep), FA_ERR_INVALID_ARG, "p = 1", "p");
    expect_contextless_failure(fa_dropout_keep_mask(1, 0, 0.1f, 1, -1, 2, 2, keep), FA_ERR_INVALID_ARG,
                               "heads -1", "heads");
    expect_contextless_failure(fa_dropout_keep_mask(1, 0, 0.1f, 1, 1, 2, 2, NULL), FA_ERR_INVALID_ARG,
                               "keep NULL", "keep");
    expect_contextless_failure(fa_dropout_keep_mask(1, 0, 0.1f, (int64_t)1 << 40, (int64_t)1 << 40, 1 << 20, 2,
                                                    NULL), FA_ERR_OVERFLOW, "2^101 elements", "overflow");
    fa_context_destroy(ctx);
}

static void test_block_mask_and_context_failures_have_reasons(void **state)
{
    (void)state;
    fa_block_mask m;
    const uint8_t bits[4] = {1, 0, 1, 1};
    expect_contextless_failure(fa_block_mask_create(NULL, FA_BLOCK_DENSE, 1, 8, 8, 4, 4, 0, 0.0, 0),
                               FA_ERR_INVALID_ARG, "mask NULL", "mask");
    expect_contextless_failure(fa_block_mask_create(&m, FA_BLOCK_DENSE, 0, 8, 8, 4, 4, 0, 0.0, 0),
                               FA_ERR_INVALID_ARG, "heads 0", "heads");
    expect_contextless_failure(fa_block_mask_create(&m, FA_BLOCK_DENSE, 1, -1, 8, 4, 4, 0, 0.0, 0),
                               FA_ERR_INVALID_ARG, "negative seqlen", "seqlen_q");
    expect_contextless_failure(fa_block_mask_create(&m, FA_BLOCK_DENSE, 1, 8, 8, 0, 4, 0, 0.0, 0),
                               FA_ERR_INVALID_ARG, "block_q 0", "block_q");
    expect_contextless_failure(fa_block_mask_create(&m, (fa_block_pattern)99, 1, 8, 8, 4, 4, 0, 0.0, 0),
                               FA_ERR_INVALID_ARG, "unknown pattern", "pattern");
    expect_contextless_failure(fa_block_mask_create(&m, FA_BLOCK_LOCAL, 1, 8, 8, 4, 4, -1, 0.0, 0),
                               FA_ERR_INVALID_ARG, "LOCAL param -1", "param");
    expect_contextless_failure(fa_block_mask_create(&m, FA_BLOCK_STRIDED, 1, 8, 8, 4, 4, 0, 0.0, 0),
                               FA_ERR_INVALID_ARG, "STRIDED param 0", "param");
    expect_contextless_failure(fa_block_mask_create(&m, FA_BLOCK_RANDOM, 1, 8, 8, 4, 4, 0, NAN, 0),
                               FA_ERR_INVALID_ARG, "RANDOM density NaN", "density");
    expect_contextless_failure(fa_block_mask_create(&m, FA_BLOCK_DENSE, (int64_t)1 << 40, (int64_t)1 << 40,
                                                    (int64_t)1 << 40, 1, 1, 0, 0.0, 0),
                               FA_ERR_OVERFLOW, "2^120 blocks", "overflow");
    expect_contextless_failure(fa_block_mask_from_bitmap(&m, NULL, 1, 2, 2, 4, 4), FA_ERR_INVALID_ARG,
                               "bitmap NULL", "bitmap");
    expect_contextless_failure(fa_block_mask_from_bitmap(&m, bits, 1, -2, 2, 4, 4), FA_ERR_INVALID_ARG,
                               "rows -2", "rows");
    expect_contextless_failure(fa_block_mask_from_bitmap(NULL, bits, 1, 2, 2, 4, 4), FA_ERR_INVALID_ARG,
                               "from_bitmap mask NULL", "mask");
    assert_int_equal(fa_block_mask_from_bitmap(&m, bits, 1, 2, 2, 4, 4), FA_SUCCESS);
    assert_string_equal(fa_last_error(), "");
    fa_block_mask_destroy(&m);
    /* fa_context_create has no context to keep its reason in either */
    fa_context *ctx = NULL;
    unsetenv("FLASHATTN_BACKEND");
    expect_contextless_failure(fa_context_create(&ctx, "no-such-backend", 0), FA_ERR_NO_BACKEND, "no backend",
                               "no-such-backend");
    expect_contextless_failure(fa_context_create(&ctx, "cpu", 99), FA_ERR_NO_DEVICE, "device 99", "device");
    expect_contextless_failure(fa_context_create(NULL, "cpu", 0), FA_ERR_INVALID_ARG, "out NULL", "out");
    assert_int_equal(fa_context_create(&ctx, "cpu", 0), FA_SUCCESS);
    assert_string_equal(fa_last_error(), "");
    assert_string_equal(fa_last_error_location(), "");
    fa_context_destroy(ctx);
}

/* FLASHATTN_KERNELS (docs/options.md): a token no backend knows, or a token given without the
 * value it takes (or with one it does not take), is refused by fa_context_create with the token
 * in the message, so that a misspelt switch is never silently a no-op; known tokens are accepted
 * by every backend, including those they do not concern. */
static void expect_kernels_refused(const char *value, const char *token)
{
    fa_context *ctx = (fa_context *)FAKE_POINTER;
    setenv("FLASHATTN_KERNELS", value, 1);
    fa_status st = fa_context_create(&ctx, "cpu", 0);
    unsetenv("FLASHATTN_KERNELS");
    expect_contextless_failure(st, FA_ERR_INVALID_ARG, value, token);
    assert_null(ctx);
}

static void test_kernels_switch_is_checked(void **state)
{
    (void)state;
    expect_kernels_refused("no-such-kernels", "no-such-kernels");
    expect_kernels_refused("simt,sm8O", "sm8O");
    expect_kernels_refused("sm80-backward", "sm80-backward");
    expect_kernels_refused("simt=on", "simt=on");
    expect_kernels_refused("opencl-tiles", "opencl-tiles");
    fa_context *ctx = NULL;
    setenv("FLASHATTN_KERNELS", "simt,opencl-tiles=cpu", 1);
    assert_int_equal(fa_context_create(&ctx, "cpu", 0), FA_SUCCESS);
    assert_string_equal(fa_context_backend_name(ctx), "cpu");
    fa_context_destroy(ctx);
    setenv("FLASHATTN_KERNELS", "", 1);
    assert_int_equal(fa_context_create(&ctx, "cpu", 0), FA_SUCCESS);
    fa_context_destroy(ctx);
    /* the OpenCL backend refuses a value of its own tokens that it does not know */
    int devices = 0;
    if (fa_device_count("opencl", &devices) == FA_SUCCESS && devices > 0) {
        const char *bad[][2] = {{"opencl-matrix=0", "opencl-matrix=0"}, {"opencl-tiles=fpga", "opencl-tiles=fpga"}};
        for (size_t i = 0; i < 2; ++i) {
            ctx = (fa_context *)FAKE_POINTER;
            setenv("FLASHATTN_KERNELS", bad[i][0], 1);
            fa_status st = fa_context_create(&ctx, "opencl", 0);
            unsetenv("FLASHATTN_KERNELS");
            expect_contextless_failure(st, FA_ERR_INVALID_ARG, bad[i][0], bad[i][1]);
            assert_null(ctx);
        }
    }
    unsetenv("FLASHATTN_KERNELS");
}

static void test_memory_helpers(void **state)
{
    fixture *fx = *state;
    void *p = FAKE_POINTER;
    assert_int_equal(fa_malloc(fx->ctx, 0, &p), FA_SUCCESS);
    assert_int_equal(fa_free(fx->ctx, p), FA_SUCCESS);
    assert_int_equal(fa_free(fx->ctx, NULL), FA_SUCCESS);
    assert_int_equal(fa_malloc(fx->ctx, 16, NULL), FA_ERR_INVALID_ARG);
    assert_int_equal(fa_malloc(NULL, 16, &p), FA_ERR_INVALID_ARG);
    /* a size that cannot be rounded up to the allocation granularity */
    p = FAKE_POINTER;
    fa_status st = fa_malloc(fx->ctx, SIZE_MAX, &p);
    assert_true(st == FA_ERR_OVERFLOW || st == FA_ERR_OUT_OF_MEMORY);
    assert_null(p);
    assert_true(strlen(fa_context_last_error(fx->ctx)) > 0);
    /* a size no machine has (needs allocator_may_return_null under AddressSanitizer) */
    p = FAKE_POINTER;
    assert_int_equal(fa_malloc(fx->ctx, (size_t)1 << 62, &p), FA_ERR_OUT_OF_MEMORY);
    assert_null(p);

    char src[32] = "flashattn", dst[32] = {0};
    assert_int_equal(fa_memcpy(fx->ctx, NULL, src, sizeof src, FA_COPY_HOST_TO_HOST), FA_ERR_INVALID_ARG);
    assert_error_message(fx->ctx, "memcpy to NULL", "dst", NULL);
    assert_int_equal(fa_memcpy(fx->ctx, dst, NULL, sizeof dst, FA_COPY_HOST_TO_HOST), FA_ERR_INVALID_ARG);
    assert_error_message(fx->ctx, "memcpy from NULL", "src", NULL);
    assert_int_equal(fa_memcpy(fx->ctx, dst, src, sizeof src, (fa_copy_kind)17), FA_ERR_INVALID_ARG);
    assert_int_equal(fa_memcpy(NULL, dst, src, sizeof src, FA_COPY_HOST_TO_HOST), FA_ERR_INVALID_ARG);
    assert_int_equal(dst[0], 0); /* none of the failed copies wrote */
    void *device = NULL;
    assert_int_equal(fa_malloc(fx->ctx, sizeof src, &device), FA_SUCCESS);
    assert_int_equal(fa_memcpy(fx->ctx, device, src, sizeof src, FA_COPY_HOST_TO_DEVICE), FA_SUCCESS);
    assert_int_equal(fa_memcpy(fx->ctx, dst, device, sizeof dst, FA_COPY_DEVICE_TO_HOST), FA_SUCCESS);
    assert_string_equal(dst, "flashattn");
    assert_int_equal(fa_free(fx->ctx, device), FA_SUCCESS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty_batch_succeeds_and_writes_nothing),
        cmocka_unit_test(test_empty_query_sequence),
        cmocka_unit_test(test_empty_query_many_heads),
        cmocka_unit_test(test_empty_key_sequence),
        cmocka_unit_test(test_valid_windows_and_unused_slopes_are_accepted),
        cmocka_unit_test(test_huge_windows_equal_unbounded),
        cmocka_unit_test(test_contiguous_tensor_of_impossible_shape),
        cmocka_unit_test(test_success_clears_last_error),
        cmocka_unit_test(test_plan_and_query_on_a_valid_problem),
        cmocka_unit_test(test_status_strings_are_distinct),
        cmocka_unit_test(test_backend_discovery),
        cmocka_unit_test(test_score_modifiers_follow_capabilities),
        cmocka_unit_test(test_context_creation_errors),
        cmocka_unit_test(test_environment_selects_backend),
        cmocka_unit_test(test_context_settings),
        cmocka_unit_test(test_memory_helpers),
        cmocka_unit_test(test_block_mask_and_context_failures_have_reasons),
        cmocka_unit_test(test_dropout_keep_mask_is_the_forwards),
        cmocka_unit_test(test_kernels_switch_is_checked),
        cmocka_unit_test(test_packed_gradients_are_accepted),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
