/* test_api_errors.c: the public API's error contract, through flashattn.h only.
 * Every invalid argument gets a case that expects its exact status, checks that no buffer
 * (output or input) was touched, and that fa_context_last_error() names the problem with file
 * and line; plus the valid edge cases (empty batch or sequences), discovery, contexts and memory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashattn.h"

/* The base problem: GQA with 4 query heads on 2 KV heads, seqlen_q != seqlen_k. */
enum { BATCH = 2, SEQ_Q = 5, SEQ_K = 7, HEADS_Q = 4, HEADS_KV = 2, HEAD_DIM = 16 };

/* Elements per buffer: room for every mutated shape below, so that a validation bug shows up as
 * a wrong status or a touched buffer rather than as a crash. */
#define CAPACITY 8192
#define POISON_BYTE 0xa5

enum { BUF_Q, BUF_K, BUF_V, BUF_O, BUF_LSE, BUF_DOUT, BUF_DQ, BUF_DK, BUF_DV, BUF_COUNT };

typedef struct fixture {
    fa_context *ctx;
    float *buf[BUF_COUNT];
    unsigned char *snapshot;
} fixture;

static int setup(void **state)
{
    fixture *fx = calloc(1, sizeof *fx);
    if (!fx || fa_context_create(&fx->ctx, "cpu", 0) != FA_SUCCESS)
        return -1;
    for (int b = 0; b < BUF_COUNT; ++b) {
        void *p = NULL;
        if (fa_malloc(fx->ctx, CAPACITY * sizeof(float), &p) != FA_SUCCESS)
            return -1;
        fx->buf[b] = p;
    }
    fx->snapshot = malloc((size_t)BUF_COUNT * CAPACITY * sizeof(float));
    if (!fx->snapshot)
        return -1;
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    fixture *fx = *state;
    for (int b = 0; b < BUF_COUNT; ++b)
        fa_free(fx->ctx, fx->buf[b]);
    fa_context_destroy(fx->ctx);
    free(fx->snapshot);
    free(fx);
    return 0;
}

/* Inputs get small finite values, outputs the poison pattern; then a copy of everything. */
static void fill_buffers(fixture *fx)
{
    for (int b = 0; b < BUF_COUNT; ++b) {
        int output = b == BUF_O || b == BUF_LSE || b == BUF_DQ || b == BUF_DK || b == BUF_DV;
        if (output) {
            memset(fx->buf[b], POISON_BYTE, CAPACITY * sizeof(float));
        } else {
            for (int i = 0; i < CAPACITY; ++i)
                fx->buf[b][i] = (float)((i * 37 + b * 11) % 17) / 17.0f - 0.5f;
        }
    }
    for (int b = 0; b < BUF_COUNT; ++b)
        memcpy(fx->snapshot + (size_t)b * CAPACITY * sizeof(float), fx->buf[b], CAPACITY * sizeof(float));
}

static const char *const buffer_names[BUF_COUNT] = {"q", "k", "v", "o", "lse", "dout", "dq", "dk", "dv"};

static int no_buffer_touched(const fixture *fx, const char *case_name)
{
    int untouched = 1;
    for (int b = 0; b < BUF_COUNT; ++b)
        if (memcmp(fx->snapshot + (size_t)b * CAPACITY * sizeof(float), fx->buf[b], CAPACITY * sizeof(float)) != 0) {
            print_error("%s: buffer %s was modified by a call that failed\n", case_name, buffer_names[b]);
            untouched = 0;
        }
    return untouched;
}

static void assert_no_buffer_touched(const fixture *fx, const char *case_name)
{
    if (!no_buffer_touched(fx, case_name))
        fail();
}

static void fill_lse_for_backward(fixture *fx)
{
    /* in the backward the LSE is an input; any finite value will do for validation */
    for (int i = 0; i < CAPACITY; ++i)
        fx->buf[BUF_LSE][i] = 1.0f;
    memcpy(fx->snapshot + (size_t)BUF_LSE * CAPACITY * sizeof(float), fx->buf[BUF_LSE], CAPACITY * sizeof(float));
}

static fa_tensor tensor4(void *data, fa_dtype dt, int64_t a, int64_t b, int64_t c, int64_t d)
{
    const int64_t shape[4] = {a, b, c, d};
    return fa_tensor_contiguous(data, dt, 4, shape);
}

/* Strides given by hand, for shapes whose contiguous strides would not fit 64 bits. */
static fa_tensor tensor4_strided(void *data, int64_t a, int64_t b, int64_t c, int64_t d, int64_t stride0,
                                 int64_t stride1, int64_t stride2)
{
    fa_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = FA_DTYPE_F32;
    t.ndim = 4;
    t.shape[0] = a;
    t.shape[1] = b;
    t.shape[2] = c;
    t.shape[3] = d;
    t.stride[0] = stride0;
    t.stride[1] = stride1;
    t.stride[2] = stride2;
    t.stride[3] = 1;
    return t;
}

static fa_tensor tensor3(void *data, fa_dtype dt, int64_t a, int64_t b, int64_t c)
{
    const int64_t shape[3] = {a, b, c};
    return fa_tensor_contiguous(data, dt, 3, shape);
}

static fa_tensor tensor2(void *data, fa_dtype dt, int64_t a, int64_t b)
{
    const int64_t shape[2] = {a, b};
    return fa_tensor_contiguous(data, dt, 2, shape);
}

/* The base problem with its sizes overridden (-1 keeps the base value). */
static fa_fwd_args make_forward(fixture *fx, int64_t batch, int64_t seq_q, int64_t seq_k)
{
    batch = batch < 0 ? BATCH : batch;
    seq_q = seq_q < 0 ? SEQ_Q : seq_q;
    seq_k = seq_k < 0 ? SEQ_K : seq_k;
    fa_fwd_args a;
    memset(&a, 0, sizeof a);
    a.q = tensor4(fx->buf[BUF_Q], FA_DTYPE_F32, batch, seq_q, HEADS_Q, HEAD_DIM);
    a.k = tensor4(fx->buf[BUF_K], FA_DTYPE_F32, batch, seq_k, HEADS_KV, HEAD_DIM);
    a.v = tensor4(fx->buf[BUF_V], FA_DTYPE_F32, batch, seq_k, HEADS_KV, HEAD_DIM);
    a.o = tensor4(fx->buf[BUF_O], FA_DTYPE_F32, batch, seq_q, HEADS_Q, HEAD_DIM);
    a.lse = tensor3(fx->buf[BUF_LSE], FA_DTYPE_F32, batch, HEADS_Q, seq_q);
    a.varlen = NULL;
    a.opts = fa_options_default();
    return a;
}

static fa_bwd_args make_backward(fixture *fx, int64_t batch, int64_t seq_q, int64_t seq_k)
{
    fa_fwd_args f = make_forward(fx, batch, seq_q, seq_k);
    fa_bwd_args a;
    memset(&a, 0, sizeof a);
    a.q = f.q;
    a.k = f.k;
    a.v = f.v;
    a.o = f.o;
    a.lse = f.lse;
    a.dout = f.o;
    a.dout.data = fx->buf[BUF_DOUT];
    a.dq = f.q;
    a.dq.data = fx->buf[BUF_DQ];
    a.dk = f.k;
    a.dk.data = fx->buf[BUF_DK];
    a.dv = f.v;
    a.dv.data = fx->buf[BUF_DV];
    a.opts = f.opts;
    return a;
}

/* Case-insensitive search; a short identifier (a tensor name such as "q" or "lse") must stand as
 * a word of its own, so that "q" is not found inside "sequence". */
static int message_mentions(const char *message, const char *needle)
{
    size_t n = strlen(needle), m = strlen(message);
    int as_word = n <= 4;
    for (size_t i = 0; i + n <= m; ++i) {
        size_t j = 0;
        while (j < n && tolower((unsigned char)message[i + j]) == tolower((unsigned char)needle[j]))
            ++j;
        if (j < n)
            continue;
        if (!as_word)
            return 1;
        int left_ok = i == 0 || !(isalnum((unsigned char)message[i - 1]) || message[i - 1] == '_');
        int right_ok = i + n == m || !(isalnum((unsigned char)message[i + n]) || message[i + n] == '_');
        if (left_ok && right_ok)
            return 1;
    }
    return 0;
}

/* The last error must be non-empty, say where in the library it was raised (file:line) and
 * mention each needle. */
static int error_message_ok(const fa_context *ctx, const char *case_name, const char *needle_a, const char *needle_b)
{
    const char *message = fa_context_last_error(ctx);
    int ok = message != NULL && strlen(message) > 0 && strstr(message, ".c:") != NULL;
    if (ok && needle_a)
        ok = message_mentions(message, needle_a);
    if (ok && needle_b)
        ok = message_mentions(message, needle_b);
    if (!ok)
        print_error("%s: last error \"%s\" should have file:line and mention \"%s\" and \"%s\"\n", case_name,
                    message ? message : "(null)", needle_a ? needle_a : "", needle_b ? needle_b : "");
    return ok;
}

static void assert_error_message(const fa_context *ctx, const char *case_name, const char *needle_a,
                                 const char *needle_b)
{
    if (!error_message_ok(ctx, case_name, needle_a, needle_b))
        fail();
}

/* ---------------------------------------------------------------- invalid forward / backward */

enum applies { FORWARD = 1, BACKWARD = 2, BOTH = 3 };

typedef enum case_id {
    Q_DATA_NULL, K_DATA_NULL, V_DATA_NULL, O_DATA_NULL, LSE_DATA_NULL,
    Q_NDIM_3, Q_NDIM_5, Q_NDIM_0, K_NDIM_3, O_NDIM_3, LSE_NDIM_2,
    K_BATCH_MISMATCH, V_BATCH_MISMATCH, O_BATCH_MISMATCH, V_SEQLEN_MISMATCH, O_SEQLEN_MISMATCH,
    K_DIM_MISMATCH, V_DIM_MISMATCH, O_DIM_MISMATCH, V_HEADS_MISMATCH, O_HEADS_MISMATCH, LSE_SEQLEN_MISMATCH,
    LSE_HEADS_MISMATCH, HEADS_NOT_MULTIPLE, HEADS_KV_MORE_THAN_Q, HEADS_Q_ZERO, HEAD_DIM_ZERO, HEAD_DIM_257,
    Q_LAST_STRIDE_2, O_LAST_STRIDE_0, K_NEGATIVE_STRIDE, V_NEGATIVE_STRIDE, Q_NEGATIVE_SEQLEN, K_NEGATIVE_SEQLEN,
    Q_NEGATIVE_BATCH, Q_DTYPE_OUT_OF_RANGE, K_DTYPE_NEGATIVE, K_DTYPE_DIFFERS, V_DTYPE_DIFFERS, O_DTYPE_DIFFERS,
    LSE_DTYPE_F16, DROPOUT_NEGATIVE, DROPOUT_ONE, DROPOUT_ABOVE_ONE, DROPOUT_NAN, SCALE_NAN, SCALE_INF,
    SCALE_MINUS_INF, WINDOW_LEFT_MINUS_2, WINDOW_RIGHT_MINUS_5, WINDOW_LEFT_INT64_MIN, WINDOW_RIGHT_INT64_MIN, O_ALIASES_Q, LSE_OVERLAPS_O, O_ROWS_OVERLAP,
    MASK_TOO_FEW_ROWS, MASK_TOO_FEW_COLS, MASK_WRONG_HEADS, MASK_BITS_NULL, MASK_BLOCK_ZERO, MASK_CELLS_OVERFLOW,
    Q_BATCH_TIMES_SEQLEN_OVERFLOWS, Q_ELEMENT_COUNT_OVERFLOWS, Q_STRIDE_OFFSET_OVERFLOWS, Q_STRIDE_INT64_MAX,
    Q_SPAN_PAST_ADDRESS_SPACE,
    DQ_SHAPE_MISMATCH, DK_DTYPE_DIFFERS, DV_DATA_NULL, DOUT_NDIM_3, DOUT_SHAPE_MISMATCH, DQ_ALIASES_Q,
    DK_ALIASES_DV, DQ_ROWS_OVERLAP,
    SOFTCAP_NAN, SOFTCAP_INF, SOFTCAP_NEGATIVE, SOFTCAP_SCALE_RATIO_OVERFLOWS, ALIBI_STRIDE_WITHOUT_SLOPES,
    ALIBI_STRIDE_BELOW_HEADS, ALIBI_STRIDE_NEGATIVE, ALIBI_SPAN_OVERFLOWS, ALIBI_INVERSE_SCALE_OVERFLOWS,
    ALIBI_INSIDE_O, ALIBI_INSIDE_LSE, ALIBI_INSIDE_DK,
} case_id;

typedef struct invalid_case {
    case_id id;
    const char *name;
    int applies;
    fa_status expected;
    const char *needle_a, *needle_b;
} invalid_case;

#define CASE(id, applies, status, a, b) {id, #id, applies, status, a, b}

static const invalid_case invalid_cases[] = {
    CASE(Q_DATA_NULL, BOTH, FA_ERR_INVALID_ARG, "q", "null"),
    CASE(K_DATA_NULL, BOTH, FA_ERR_INVALID_ARG, "k", "null"),
    CASE(V_DATA_NULL, BOTH, FA_ERR_INVALID_ARG, "v", "null"),
    CASE(O_DATA_NULL, BOTH, FA_ERR_INVALID_ARG, "o", "null"),
    CASE(LSE_DATA_NULL, BACKWARD, FA_ERR_INVALID_ARG, "lse", "null"), /* forward: NULL skips the LSE */
    CASE(Q_NDIM_3, BOTH, FA_ERR_INVALID_ARG, "q", "ndim"),
    CASE(Q_NDIM_5, BOTH, FA_ERR_INVALID_ARG, "q", "ndim"),
    CASE(Q_NDIM_0, BOTH, FA_ERR_INVALID_ARG, "q", "ndim"),
    CASE(K_NDIM_3, BOTH, FA_ERR_INVALID_ARG, "k", "ndim"),
    CASE(O_NDIM_3, BOTH, FA_ERR_INVALID_ARG, "o", "ndim"),
    CASE(LSE_NDIM_2, BOTH, FA_ERR_INVALID_ARG, "lse", "ndim"),
    CASE(K_BATCH_MISMATCH, BOTH, FA_ERR_INVALID_ARG, "k", "shape"),
    CASE(V_BATCH_MISMATCH, BOTH, FA_ERR_INVALID_ARG, "v", "shape"),
    CASE(O_BATCH_MISMATCH, BOTH, FA_ERR_INVALID_ARG, "o", "shape"),
    CASE(V_SEQLEN_MISMATCH, BOTH, FA_ERR_INVALID_ARG, "v", "shape"),
    CASE(O_SEQLEN_MISMATCH, BOTH, FA_ERR_INVALID_ARG, "o", "shape"),
    CASE(K_DIM_MISMATCH, BOTH, FA_ERR_INVALID_ARG, "k", "shape"),
    CASE(V_DIM_MISMATCH, BOTH, FA_ERR_INVALID_ARG, "v", "shape"),
    CASE(O_DIM_MISMATCH, BOTH, FA_ERR_INVALID_ARG, "o", "shape"),
    CASE(V_HEADS_MISMATCH, BOTH, FA_ERR_INVALID_ARG, "v", "shape"),
    CASE(O_HEADS_MISMATCH, BOTH, FA_ERR_INVALID_ARG, "o", "shape"),
    CASE(LSE_SEQLEN_MISMATCH, BOTH, FA_ERR_INVALID_ARG, "lse", "shape"),
    CASE(LSE_HEADS_MISMATCH, BOTH, FA_ERR_INVALID_ARG, "lse", "shape"),
    CASE(HEADS_NOT_MULTIPLE, BOTH, FA_ERR_INVALID_ARG, "heads_q", "heads_kv"),
    CASE(HEADS_KV_MORE_THAN_Q, BOTH, FA_ERR_INVALID_ARG, "heads_q", "heads_kv"),
    CASE(HEADS_Q_ZERO, BOTH, FA_ERR_INVALID_ARG, "heads_q", NULL),
    CASE(HEAD_DIM_ZERO, BOTH, FA_ERR_INVALID_ARG, "head dim", NULL),
    /* flashattn.h: UNSUPPORTED is "valid, but no kernel for it (dtype, head dim, ...)" */
    CASE(HEAD_DIM_257, BOTH, FA_ERR_UNSUPPORTED, "head dim", "256"),
    CASE(Q_LAST_STRIDE_2, BOTH, FA_ERR_INVALID_ARG, "q", "stride"),
    CASE(O_LAST_STRIDE_0, BOTH, FA_ERR_INVALID_ARG, "o", "stride"),
    CASE(K_NEGATIVE_STRIDE, BOTH, FA_ERR_INVALID_ARG, "k", "negative"),
    CASE(V_NEGATIVE_STRIDE, BOTH, FA_ERR_INVALID_ARG, "v", "negative"),
    CASE(Q_NEGATIVE_SEQLEN, BOTH, FA_ERR_INVALID_ARG, "negative", NULL),
    CASE(K_NEGATIVE_SEQLEN, BOTH, FA_ERR_INVALID_ARG, "negative", NULL),
    CASE(Q_NEGATIVE_BATCH, BOTH, FA_ERR_INVALID_ARG, "negative", NULL),
    CASE(Q_DTYPE_OUT_OF_RANGE, BOTH, FA_ERR_INVALID_ARG, "q", "dtype"),
    CASE(K_DTYPE_NEGATIVE, BOTH, FA_ERR_INVALID_ARG, "k", "dtype"),
    CASE(K_DTYPE_DIFFERS, BOTH, FA_ERR_INVALID_ARG, "k", "dtype"),
    CASE(V_DTYPE_DIFFERS, BOTH, FA_ERR_INVALID_ARG, "v", "dtype"),
    CASE(O_DTYPE_DIFFERS, BOTH, FA_ERR_INVALID_ARG, "o", "dtype"),
    CASE(LSE_DTYPE_F16, BOTH, FA_ERR_INVALID_ARG, "lse", "dtype"),
    CASE(DROPOUT_NEGATIVE, BOTH, FA_ERR_INVALID_ARG, "dropout_p", NULL),
    CASE(DROPOUT_ONE, BOTH, FA_ERR_INVALID_ARG, "dropout_p", NULL),
    CASE(DROPOUT_ABOVE_ONE, BOTH, FA_ERR_INVALID_ARG, "dropout_p", NULL),
    CASE(DROPOUT_NAN, BOTH, FA_ERR_INVALID_ARG, "dropout_p", NULL),
    CASE(SCALE_NAN, BOTH, FA_ERR_INVALID_ARG, "softmax_scale", NULL),
    CASE(SCALE_INF, BOTH, FA_ERR_INVALID_ARG, "softmax_scale", NULL),
    CASE(SCALE_MINUS_INF, BOTH, FA_ERR_INVALID_ARG, "softmax_scale", NULL),
    CASE(WINDOW_LEFT_MINUS_2, BOTH, FA_ERR_INVALID_ARG, "window", NULL),
    CASE(WINDOW_RIGHT_MINUS_5, BOTH, FA_ERR_INVALID_ARG, "window", NULL),
    CASE(WINDOW_LEFT_INT64_MIN, BOTH, FA_ERR_INVALID_ARG, "window", NULL),
    CASE(WINDOW_RIGHT_INT64_MIN, BOTH, FA_ERR_INVALID_ARG, "window", NULL),
    /* in the backward o is an input, and inputs may share memory */
    CASE(O_ALIASES_Q, FORWARD, FA_ERR_INVALID_ARG, "overlap", NULL),
    CASE(LSE_OVERLAPS_O, FORWARD, FA_ERR_INVALID_ARG, "overlap", NULL),
    CASE(O_ROWS_OVERLAP, FORWARD, FA_ERR_INVALID_ARG, "o", "overlap"),
    CASE(MASK_TOO_FEW_ROWS, BOTH, FA_ERR_INVALID_ARG, "block_mask", NULL),
    CASE(MASK_TOO_FEW_COLS, BOTH, FA_ERR_INVALID_ARG, "block_mask", NULL),
    CASE(MASK_WRONG_HEADS, BOTH, FA_ERR_INVALID_ARG, "block_mask", "heads"),
    CASE(MASK_BITS_NULL, BOTH, FA_ERR_INVALID_ARG, "block_mask", NULL),
    CASE(MASK_BLOCK_ZERO, BOTH, FA_ERR_INVALID_ARG, "block_mask", NULL),
    /* a hand-made mask claiming 2^40 x 2^40 blocks: heads * rows * cols does not fit 64 bits */
    CASE(MASK_CELLS_OVERFLOW, BOTH, FA_ERR_INVALID_ARG, "block_mask", "overflow"),
    /* sizes whose byte counts cannot be formed: rejected before any pointer is dereferenced (the
     * data pointers here are fake, so touching them would crash the test) */
    CASE(Q_BATCH_TIMES_SEQLEN_OVERFLOWS, BOTH, FA_ERR_OVERFLOW, "overflow", NULL),
    CASE(Q_ELEMENT_COUNT_OVERFLOWS, BOTH, FA_ERR_OVERFLOW, "overflow", NULL),
    CASE(Q_STRIDE_OFFSET_OVERFLOWS, BOTH, FA_ERR_OVERFLOW, "overflow", NULL),
    CASE(Q_STRIDE_INT64_MAX, BOTH, FA_ERR_OVERFLOW, "overflow", NULL),
    CASE(Q_SPAN_PAST_ADDRESS_SPACE, BOTH, FA_ERR_OVERFLOW, "overflow", NULL),
    /* backward only */
    CASE(DQ_SHAPE_MISMATCH, BACKWARD, FA_ERR_INVALID_ARG, "dq", "shape"),
    CASE(DK_DTYPE_DIFFERS, BACKWARD, FA_ERR_INVALID_ARG, "dk", "dtype"),
    CASE(DV_DATA_NULL, BACKWARD, FA_ERR_INVALID_ARG, "dv", "null"),
    CASE(DOUT_NDIM_3, BACKWARD, FA_ERR_INVALID_ARG, "dout", "ndim"),
    CASE(DOUT_SHAPE_MISMATCH, BACKWARD, FA_ERR_INVALID_ARG, "dout", "shape"),
    CASE(DQ_ALIASES_Q, BACKWARD, FA_ERR_INVALID_ARG, "overlap", NULL),
    CASE(DK_ALIASES_DV, BACKWARD, FA_ERR_INVALID_ARG, "overlap", NULL),
    CASE(DQ_ROWS_OVERLAP, BACKWARD, FA_ERR_INVALID_ARG, "dq", "overlap"),
    /* score modifiers */
    CASE(SOFTCAP_NAN, BOTH, FA_ERR_INVALID_ARG, "softcap", NULL),
    CASE(SOFTCAP_INF, BOTH, FA_ERR_INVALID_ARG, "softcap", NULL),
    CASE(SOFTCAP_NEGATIVE, BOTH, FA_ERR_INVALID_ARG, "softcap", NULL),
    CASE(SOFTCAP_SCALE_RATIO_OVERFLOWS, BOTH, FA_ERR_INVALID_ARG, "softcap", "softmax_scale"),
    CASE(ALIBI_STRIDE_WITHOUT_SLOPES, BOTH, FA_ERR_INVALID_ARG, "alibi_batch_stride", NULL),
    CASE(ALIBI_STRIDE_BELOW_HEADS, BOTH, FA_ERR_INVALID_ARG, "alibi_batch_stride", "heads_q"),
    CASE(ALIBI_STRIDE_NEGATIVE, BOTH, FA_ERR_INVALID_ARG, "alibi_batch_stride", NULL),
    CASE(ALIBI_SPAN_OVERFLOWS, BOTH, FA_ERR_OVERFLOW, "alibi", "overflow"),
    CASE(ALIBI_INVERSE_SCALE_OVERFLOWS, BOTH, FA_ERR_INVALID_ARG, "alibi", "scale"),
    CASE(ALIBI_INSIDE_O, FORWARD, FA_ERR_INVALID_ARG, "alibi_slopes", "overlap"),
    CASE(ALIBI_INSIDE_LSE, FORWARD, FA_ERR_INVALID_ARG, "alibi_slopes", "overlap"),
    CASE(ALIBI_INSIDE_DK, BACKWARD, FA_ERR_INVALID_ARG, "alibi_slopes", "overlap"),
};

/* ALiBi slopes for the cases above that need a valid pointer: [BATCH][HEADS_Q + 1] */
static float alibi_slopes[BATCH * (HEADS_Q + 1)];

/* Block masks used by the mask cases; built once per test run. */
static fa_block_mask mask_short_rows, mask_short_cols, mask_two_heads, mask_null_bits, mask_zero_block;
static uint8_t huge_mask_bits[16];
static const fa_block_mask mask_huge = {1, (int64_t)1 << 40, (int64_t)1 << 40, 2, 2, huge_mask_bits};

/* A fake, never-mapped address: if validation let it through, the test would crash. */
#define FAKE_POINTER ((void *)(uintptr_t)0x1000)

/* The tensors both argument structs share; in the backward o and lse are inputs. The d* and
 * dout pointers are NULL for the forward. */
typedef struct arg_view {
    fa_tensor *q, *k, *v, *o, *lse, *dout, *dq, *dk, *dv;
    fa_options *opts;
} arg_view;

static void apply_case(case_id id, fixture *fx, arg_view a)
{
    switch (id) {
    case Q_DATA_NULL: a.q->data = NULL; break;
    case K_DATA_NULL: a.k->data = NULL; break;
    case V_DATA_NULL: a.v->data = NULL; break;
    case O_DATA_NULL: a.o->data = NULL; break;
    case LSE_DATA_NULL: a.lse->data = NULL; break;
    case Q_NDIM_3: a.q->ndim = 3; break;
    case Q_NDIM_5: a.q->ndim = 5; break;
    case Q_NDIM_0: a.q->ndim = 0; break;
    case K_NDIM_3: a.k->ndim = 3; break;
    case O_NDIM_3: a.o->ndim = 3; break;
    case LSE_NDIM_2: a.lse->ndim = 2; break;
    case K_BATCH_MISMATCH: *a.k = tensor4(fx->buf[BUF_K], FA_DTYPE_F32, BATCH + 1, SEQ_K, HEADS_KV, HEAD_DIM); break;
    case V_BATCH_MISMATCH: *a.v = tensor4(fx->buf[BUF_V], FA_DTYPE_F32, 1, SEQ_K, HEADS_KV, HEAD_DIM); break;
    case O_BATCH_MISMATCH: *a.o = tensor4(a.o->data, FA_DTYPE_F32, BATCH + 1, SEQ_Q, HEADS_Q, HEAD_DIM); break;
    case V_SEQLEN_MISMATCH: *a.v = tensor4(fx->buf[BUF_V], FA_DTYPE_F32, BATCH, SEQ_K + 1, HEADS_KV, HEAD_DIM); break;
    case O_SEQLEN_MISMATCH: *a.o = tensor4(a.o->data, FA_DTYPE_F32, BATCH, SEQ_Q - 1, HEADS_Q, HEAD_DIM); break;
    case K_DIM_MISMATCH: *a.k = tensor4(fx->buf[BUF_K], FA_DTYPE_F32, BATCH, SEQ_K, HEADS_KV, HEAD_DIM * 2); break;
    case V_DIM_MISMATCH: *a.v = tensor4(fx->buf[BUF_V], FA_DTYPE_F32, BATCH, SEQ_K, HEADS_KV, HEAD_DIM / 2); break;
    case O_DIM_MISMATCH: *a.o = tensor4(a.o->data, FA_DTYPE_F32, BATCH, SEQ_Q, HEADS_Q, HEAD_DIM + 1); break;
    case V_HEADS_MISMATCH: *a.v = tensor4(fx->buf[BUF_V], FA_DTYPE_F32, BATCH, SEQ_K, HEADS_KV * 2, HEAD_DIM); break;
    case O_HEADS_MISMATCH: *a.o = tensor4(a.o->data, FA_DTYPE_F32, BATCH, SEQ_Q, HEADS_Q / 2, HEAD_DIM); break;
    case LSE_SEQLEN_MISMATCH: *a.lse = tensor3(a.lse->data, FA_DTYPE_F32, BATCH, HEADS_Q, SEQ_Q + 1); break;
    case LSE_HEADS_MISMATCH: *a.lse = tensor3(a.lse->data, FA_DTYPE_F32, BATCH, HEADS_KV, SEQ_Q); break;
    case HEADS_NOT_MULTIPLE:
        *a.k = tensor4(fx->buf[BUF_K], FA_DTYPE_F32, BATCH, SEQ_K, 3, HEAD_DIM);
        *a.v = tensor4(fx->buf[BUF_V], FA_DTYPE_F32, BATCH, SEQ_K, 3, HEAD_DIM);
        break;
    case HEADS_KV_MORE_THAN_Q:
        *a.k = tensor4(fx->buf[BUF_K], FA_DTYPE_F32, BATCH, SEQ_K, HEADS_Q * 2, HEAD_DIM);
        *a.v = tensor4(fx->buf[BUF_V], FA_DTYPE_F32, BATCH, SEQ_K, HEADS_Q * 2, HEAD_DIM);
        break;
    case HEADS_Q_ZERO:
        /* every tensor consistent with heads_q = 0, so only the head count is wrong */
        *a.q = tensor4(fx->buf[BUF_Q], FA_DTYPE_F32, BATCH, SEQ_Q, 0, HEAD_DIM);
        *a.o = tensor4(a.o->data, FA_DTYPE_F32, BATCH, SEQ_Q, 0, HEAD_DIM);
        *a.lse = tensor3(a.lse->data, FA_DTYPE_F32, BATCH, 0, SEQ_Q);
        break;
    case HEAD_DIM_ZERO:
    case HEAD_DIM_257: {
        int64_t d = id == HEAD_DIM_ZERO ? 0 : 257;
        /* the capacity fits 2 x 1 x 4 x 257 and 2 x 1 x 2 x 257 */
        *a.q = tensor4(fx->buf[BUF_Q], FA_DTYPE_F32, BATCH, 1, HEADS_Q, d);
        *a.k = tensor4(fx->buf[BUF_K], FA_DTYPE_F32, BATCH, 1, HEADS_KV, d);
        *a.v = tensor4(fx->buf[BUF_V], FA_DTYPE_F32, BATCH, 1, HEADS_KV, d);
        *a.o = tensor4(a.o->data, FA_DTYPE_F32, BATCH, 1, HEADS_Q, d);
        *a.lse = tensor3(a.lse->data, FA_DTYPE_F32, BATCH, HEADS_Q, 1);
        if (a.dq) {
            *a.dout = tensor4(fx->buf[BUF_DOUT], FA_DTYPE_F32, BATCH, 1, HEADS_Q, d);
            *a.dq = tensor4(fx->buf[BUF_DQ], FA_DTYPE_F32, BATCH, 1, HEADS_Q, d);
            *a.dk = tensor4(fx->buf[BUF_DK], FA_DTYPE_F32, BATCH, 1, HEADS_KV, d);
            *a.dv = tensor4(fx->buf[BUF_DV], FA_DTYPE_F32, BATCH, 1, HEADS_KV, d);
        }
        break;
    }
    case Q_LAST_STRIDE_2: a.q->stride[3] = 2; break;
    case O_LAST_STRIDE_0: a.o->stride[3] = 0; break;
    case K_NEGATIVE_STRIDE: a.k->stride[1] = -a.k->stride[1]; break;
    case V_NEGATIVE_STRIDE: a.v->stride[0] = -1; break;
    case Q_NEGATIVE_SEQLEN: a.q->shape[1] = -1; break;
    case K_NEGATIVE_SEQLEN:
        a.k->shape[1] = -3;
        a.v->shape[1] = -3;
        break;
    case Q_NEGATIVE_BATCH: a.q->shape[0] = -2; break;
    case Q_DTYPE_OUT_OF_RANGE: a.q->dtype = (fa_dtype)7; break;
    case K_DTYPE_NEGATIVE: a.k->dtype = (fa_dtype)-1; break;
    case K_DTYPE_DIFFERS: a.k->dtype = FA_DTYPE_F16; break;
    case V_DTYPE_DIFFERS: a.v->dtype = FA_DTYPE_BF16; break;
    case O_DTYPE_DIFFERS: a.o->dtype = FA_DTYPE_F16; break;
    case LSE_DTYPE_F16: a.lse->dtype = FA_DTYPE_F16; break;
    case DROPOUT_NEGATIVE: a.opts->dropout_p = -0.1f; break;
    case DROPOUT_ONE: a.opts->dropout_p = 1.0f; break;
    case DROPOUT_ABOVE_ONE: a.opts->dropout_p = 1.5f; break;
    case DROPOUT_NAN: a.opts->dropout_p = NAN; break;
    case SOFTCAP_NAN: a.opts->softcap = NAN; break;
    case SOFTCAP_INF: a.opts->softcap = INFINITY; break;
    case SOFTCAP_NEGATIVE: a.opts->softcap = -1.0f; break;
    case SOFTCAP_SCALE_RATIO_OVERFLOWS: a.opts->softcap = 1e-30f; a.opts->softmax_scale = 1e10f; break;
    case ALIBI_STRIDE_WITHOUT_SLOPES: a.opts->alibi_batch_stride = HEADS_Q; break;
    case ALIBI_STRIDE_BELOW_HEADS: a.opts->alibi_slopes = alibi_slopes; a.opts->alibi_batch_stride = HEADS_Q - 1; break;
    case ALIBI_STRIDE_NEGATIVE: a.opts->alibi_slopes = alibi_slopes; a.opts->alibi_batch_stride = -HEADS_Q; break;
    case ALIBI_SPAN_OVERFLOWS: a.opts->alibi_slopes = alibi_slopes; a.opts->alibi_batch_stride = INT64_MAX - 1; break;
    case ALIBI_INVERSE_SCALE_OVERFLOWS: a.opts->alibi_slopes = alibi_slopes; a.opts->softmax_scale = 1e-40f; break;
    case ALIBI_INSIDE_O: a.opts->alibi_slopes = (const float *)a.o->data + 3; break;
    case ALIBI_INSIDE_LSE: a.opts->alibi_slopes = (const float *)a.lse->data + 3; break;
    case ALIBI_INSIDE_DK:
        a.opts->alibi_slopes = (const float *)a.dk->data + 3;
        a.opts->alibi_batch_stride = HEADS_Q;
        break;
    case SCALE_NAN: a.opts->softmax_scale = NAN; break;
    case SCALE_INF: a.opts->softmax_scale = INFINITY; break;
    case SCALE_MINUS_INF: a.opts->softmax_scale = -INFINITY; break;
    case WINDOW_LEFT_MINUS_2: a.opts->window_left = -2; break;
    case WINDOW_RIGHT_MINUS_5: a.opts->window_right = -5; break;
    case WINDOW_LEFT_INT64_MIN: a.opts->window_left = INT64_MIN; break;
    case WINDOW_RIGHT_INT64_MIN: a.opts->window_right = INT64_MIN; break;
    case O_ALIASES_Q: a.o->data = a.q->data; break;
    case LSE_OVERLAPS_O: a.lse->data = (float *)a.o->data + 8; break;
    case O_ROWS_OVERLAP: a.o->stride[1] = 0; break; /* every query row written to the same place */
    case MASK_TOO_FEW_ROWS: a.opts->block_mask = &mask_short_rows; break;
    case MASK_TOO_FEW_COLS: a.opts->block_mask = &mask_short_cols; break;
    case MASK_WRONG_HEADS: a.opts->block_mask = &mask_two_heads; break;
    case MASK_BITS_NULL: a.opts->block_mask = &mask_null_bits; break;
    case MASK_BLOCK_ZERO: a.opts->block_mask = &mask_zero_block; break;
    case MASK_CELLS_OVERFLOW: a.opts->block_mask = &mask_huge; break;
    case Q_BATCH_TIMES_SEQLEN_OVERFLOWS: {
        /* 2^40 x 2^40 rows: batch * seqlen does not fit 64 bits */
        const int64_t huge = (int64_t)1 << 40;
        fa_tensor *all[] = {a.q, a.k, a.v, a.o, a.dout, a.dq, a.dk, a.dv};
        for (size_t t = 0; t < sizeof all / sizeof all[0]; ++t) {
            if (!all[t])
                continue;
            int64_t heads = (all[t] == a.k || all[t] == a.v || all[t] == a.dk || all[t] == a.dv) ? HEADS_KV : HEADS_Q;
            *all[t] = tensor4_strided(FAKE_POINTER, huge, huge, heads, HEAD_DIM, huge * heads * HEAD_DIM,
                                      heads * HEAD_DIM, HEAD_DIM);
        }
        *a.lse = tensor3(FAKE_POINTER, FA_DTYPE_F32, 1, HEADS_Q, 1);
        a.lse->shape[0] = huge;
        a.lse->shape[2] = huge;
        a.lse->stride[0] = HEADS_Q * huge;
        a.lse->stride[1] = huge;
        break;
    }
    case Q_ELEMENT_COUNT_OVERFLOWS:
        /* 2^40 rows x 2^20 heads x 2^8 = 2^68 elements */
        *a.q = tensor4_strided(FAKE_POINTER, 1, (int64_t)1 << 40, (int64_t)1 << 20, 256, 0, (int64_t)1 << 28, 256);
        break;
    case Q_STRIDE_OFFSET_OVERFLOWS:
        /* a legal element offset (2^62) whose byte offset (2^64) is not */
        a.q->data = FAKE_POINTER;
        a.q->stride[0] = (int64_t)1 << 62;
        break;
    case Q_STRIDE_INT64_MAX:
        a.q->data = FAKE_POINTER;
        a.q->stride[0] = INT64_MAX;
        break;
    case Q_SPAN_PAST_ADDRESS_SPACE:
        /* 2560 bytes starting 1 KiB below the top of the address space */
        a.q->data = (void *)(UINTPTR_MAX - 1023);
        break;
    case DQ_SHAPE_MISMATCH: *a.dq = tensor4(fx->buf[BUF_DQ], FA_DTYPE_F32, BATCH, SEQ_Q + 1, HEADS_Q, HEAD_DIM); break;
    case DK_DTYPE_DIFFERS: a.dk->dtype = FA_DTYPE_F16; break;
    case DV_DATA_NULL: a.dv->data = NULL; break;
    case DOUT_NDIM_3: a.dout->ndim = 3; break;
    case DOUT_SHAPE_MISMATCH: *a.dout = tensor4(fx->buf[BUF_DOUT], FA_DTYPE_F32, BATCH, SEQ_Q, HEADS_Q, HEAD_DIM - 1); break;
    case DQ_ALIASES_Q: a.dq->data = a.q->data; break;
    case DK_ALIASES_DV: a.dk->data = a.dv->data; break;
    case DQ_ROWS_OVERLAP: a.dq->stride[2] = 0; break;
    }
}

static int make_masks(void **state)
{
    (void)state;
    /* the base problem is 5 x 7 with 4 query heads; blocks of 2 x 2 need 3 x 4 */
    if (fa_block_mask_create(&mask_short_rows, FA_BLOCK_DENSE, 1, SEQ_Q - 2, SEQ_K, 2, 2, 0, 0.0, 0) ||
        fa_block_mask_create(&mask_short_cols, FA_BLOCK_DENSE, 1, SEQ_Q, SEQ_K - 2, 2, 2, 0, 0.0, 0) ||
        fa_block_mask_create(&mask_two_heads, FA_BLOCK_DENSE, 2, SEQ_Q, SEQ_K, 2, 2, 0, 0.0, 0) ||
        fa_block_mask_create(&mask_null_bits, FA_BLOCK_DENSE, 1, SEQ_Q, SEQ_K, 2, 2, 0, 0.0, 0) ||
        fa_block_mask_create(&mask_zero_block, FA_BLOCK_DENSE, 1, SEQ_Q, SEQ_K, 2, 2, 0, 0.0, 0))
        return -1;
    free(mask_null_bits.bits);
    mask_null_bits.bits = NULL;
    mask_zero_block.block_q = 0;
    return setup(state);
}

static int free_masks(void **state)
{
    fa_block_mask_destroy(&mask_short_rows);
    fa_block_mask_destroy(&mask_short_cols);
    fa_block_mask_destroy(&mask_two_heads);
    fa_block_mask_destroy(&mask_null_bits);
    mask_zero_block.block_q = 2;
    fa_block_mask_destroy(&mask_zero_block);
    return teardown(state);
}

static void test_invalid_forward_arguments(void **state)
{
    fixture *fx = *state;
    int checked = 0, failed = 0;
    for (size_t c = 0; c < sizeof invalid_cases / sizeof invalid_cases[0]; ++c) {
        const invalid_case *ic = &invalid_cases[c];
        if (!(ic->applies & FORWARD))
            continue;
        fill_buffers(fx);
        fa_fwd_args a = make_forward(fx, -1, -1, -1);
        arg_view view = {&a.q, &a.k, &a.v, &a.o, &a.lse, NULL, NULL, NULL, NULL, &a.opts};
        apply_case(ic->id, fx, view);
        fa_status st = fa_forward(fx->ctx, &a);
        int ok = st == ic->expected;
        if (!ok)
            print_error("forward %s: status %d (%s), expected %d\n", ic->name, (int)st, fa_status_string(st),
                        (int)ic->expected);
        ok &= no_buffer_touched(fx, ic->name);
        ok &= error_message_ok(fx->ctx, ic->name, ic->needle_a, ic->needle_b);
        /* the query and the plan validate with the same rules */
        char variant[64];
        st = fa_query_support(fx->ctx, &a, 0, variant, sizeof variant);
        if (st != ic->expected) {
            print_error("fa_query_support %s: status %d, expected %d\n", ic->name, (int)st, (int)ic->expected);
            ok = 0;
        }
        ok &= error_message_ok(fx->ctx, ic->name, ic->needle_a, ic->needle_b);
        fa_plan_info plan;
        st = fa_plan(fx->ctx, &a, &plan);
        if (st != ic->expected) {
            print_error("fa_plan %s: status %d, expected %d\n", ic->name, (int)st, (int)ic->expected);
            ok = 0;
        }
        ok &= no_buffer_touched(fx, ic->name);
        failed += !ok;
        ++checked;
    }
    assert_true(checked > 50);
    assert_int_equal(failed, 0); /* each failing case is printed above */
}

static void test_invalid_backward_arguments(void **state)
{
    fixture *fx = *state;
    int checked = 0, failed = 0;
    for (size_t c = 0; c < sizeof invalid_cases / sizeof invalid_cases[0]; ++c) {
        const invalid_case *ic = &invalid_cases[c];
        if (!(ic->applies & BACKWARD))
            continue;
        fill_buffers(fx);
        fill_lse_for_backward(fx);
        fa_bwd_args a = make_backward(fx, -1, -1, -1);
        arg_view view = {&a.q, &a.k, &a.v, &a.o, &a.lse, &a.dout, &a.dq, &a.dk, &a.dv, &a.opts};
        apply_case(ic->id, fx, view);
        fa_status st = fa_backward(fx->ctx, &a);
        int ok = st == ic->expected;
        if (!ok)
            print_error("backward %s: status %d (%s), expected %d\n", ic->name, (int)st, fa_status_string(st),
                        (int)ic->expected);
        ok &= no_buffer_touched(fx, ic->name);
        ok &= error_message_ok(fx->ctx, ic->name, ic->needle_a, ic->needle_b);
        failed += !ok;
        ++checked;
    }
    assert_true(checked > 50);
    assert_int_equal(failed, 0); /* each failing case is printed above */
}

static void test_null_context_and_arguments(void **state)
{
    fixture *fx = *state;
    fill_buffers(fx);
    fa_fwd_args f = make_forward(fx, -1, -1, -1);
    assert_int_equal(fa_forward(NULL, &f), FA_ERR_INVALID_ARG);
    assert_no_buffer_touched(fx, "forward with a NULL context");
    fill_lse_for_backward(fx);
    fa_bwd_args b = make_backward(fx, -1, -1, -1);
    assert_int_equal(fa_backward(NULL, &b), FA_ERR_INVALID_ARG);
    assert_no_buffer_touched(fx, "backward with a NULL context");
    assert_int_equal(fa_forward(fx->ctx, NULL), FA_ERR_INVALID_ARG);
    assert_error_message(fx->ctx, "forward with NULL args", "args", NULL);
    assert_int_equal(fa_backward(fx->ctx, NULL), FA_ERR_INVALID_ARG);
    assert_error_message(fx->ctx, "backward with NULL args", "args", NULL);
    assert_int_equal(fa_query_support(NULL, &f, 0, NULL, 0), FA_ERR_INVALID_ARG);
    assert_int_equal(fa_query_support(fx->ctx, NULL, 0, NULL, 0), FA_ERR_INVALID_ARG);
    fa_plan_info plan;
    assert_int_equal(fa_plan(NULL, &f, &plan), FA_ERR_INVALID_ARG);
    assert_int_equal(fa_plan(fx->ctx, NULL, &plan), FA_ERR_INVALID_ARG);
    assert_int_equal(fa_plan(fx->ctx, &f, NULL), FA_ERR_INVALID_ARG);
    assert_no_buffer_touched(fx, "NULL arguments");
}

/* ---------------------------------------------------------------- varlen */

/* Packed base: 2 sequences of 3 and 2 queries, 4 and 3 keys. */
static int32_t cu_q_storage[8], cu_k_storage[8];

static fa_fwd_args make_varlen_forward(fixture *fx, fa_varlen *vl, const int32_t *cu_q, const int32_t *cu_k,
                                       int64_t batch)
{
    memcpy(cu_q_storage, cu_q, sizeof cu_q_storage);
    memcpy(cu_k_storage, cu_k, sizeof cu_k_storage);
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

/* flashattn.h says only that 0 selects 1/sqrt(d); a negative scale is a finite, meaningful one
 * (validate.c accepts it), so it must not be rejected. */
static void test_negative_scale_and_valid_windows_are_accepted(void **state)
{
    fixture *fx = *state;
    fill_buffers(fx);
    fa_fwd_args f = make_forward(fx, -1, -1, -1);
    f.opts.softmax_scale = -0.5f;
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
    if (got != expected || strstr(message, ".c:") == NULL || !message_mentions(message, needle)) {
        print_error("%s: status %d (expected %d), fa_last_error \"%s\" should have file:line and mention \"%s\"\n",
                    case_name, (int)got, (int)expected, message, needle);
        fail();
    }
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
    fa_context_destroy(ctx);
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
        cmocka_unit_test(test_invalid_forward_arguments),
        cmocka_unit_test(test_invalid_backward_arguments),
        cmocka_unit_test(test_null_context_and_arguments),
        cmocka_unit_test(test_invalid_varlen_arguments),
        cmocka_unit_test(test_varlen_max_seqlen_bounds),
        cmocka_unit_test(test_empty_batch_of_impossible_length),
        cmocka_unit_test(test_head_count_and_work_item_limits),
        cmocka_unit_test(test_workspace_size_overflow),
        cmocka_unit_test(test_empty_batch_with_block_mask_builds_nothing),
        cmocka_unit_test(test_cu_seqlens_inside_an_output),
        cmocka_unit_test(test_empty_batch_succeeds_and_writes_nothing),
        cmocka_unit_test(test_empty_query_sequence),
        cmocka_unit_test(test_empty_query_many_heads),
        cmocka_unit_test(test_empty_key_sequence),
        cmocka_unit_test(test_negative_scale_and_valid_windows_are_accepted),
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
    };
    return cmocka_run_group_tests(tests, make_masks, free_masks);
}
