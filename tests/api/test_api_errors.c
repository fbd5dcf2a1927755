/* test_api_errors.c: the public API's error contract, through flashattn.h only.
 * Every invalid argument gets a case that expects its exact status, checks that no buffer
 * (output or input) was touched, and that fa_context_last_error() names the problem, without the
 * file and line, which fa_context_last_error_location() gives; also a NULL context and NULL
 * arguments. Varlen and size limits are in test_api_varlen_limits.c, the valid edge cases,
 * discovery, contexts and memory in test_api_edges.c. */
#include "api_fixture.h"

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
    DK_ALIASES_DV, DQ_ROWS_OVERLAP, DV_ONE_ELEMENT_INTO_DK, DV_HALF_AN_ELEMENT_INTO_DK,
    SOFTCAP_NAN, SOFTCAP_INF, SOFTCAP_NEGATIVE, SOFTCAP_SCALE_RATIO_OVERFLOWS, ALIBI_STRIDE_WITHOUT_SLOPES,
    ALIBI_STRIDE_BELOW_HEADS, ALIBI_STRIDE_NEGATIVE, ALIBI_SPAN_OVERFLOWS, ALIBI_INVERSE_SCALE_OVERFLOWS,
    ALIBI_INSIDE_O, ALIBI_INSIDE_LSE, ALIBI_INSIDE_DK, SCALE_NEGATIVE, ALIBI_SLOPE_NAN, ALIBI_SLOPE_INF,
    ALIBI_SLOPE_MINUS_INF,
    SINK_NAN, SINK_INF, SINK_MINUS_INF, SINK_INSIDE_O, SINK_INSIDE_LSE, SINK_INSIDE_DK, SINK_INSIDE_DSINK,
    DSINK_WITHOUT_SINK, DSINK_SHAPE_MISMATCH, DSINK_DTYPE_F16, DSINK_NDIM_2, DSINK_OVERLAPS_DQ, DSINK_ALIASES_Q,
    V_DIM_ZERO, V_DIM_264, DV_DIM_D_NOT_DV, DOUT_DIM_D_NOT_DV,
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
    CASE(V_DIM_MISMATCH, BOTH, FA_ERR_INVALID_ARG, "o", "shape"), /* v sets d_v: o must follow it */
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
    /* one layout, so compared element by element (packed gradients pass): these share elements */
    CASE(DV_ONE_ELEMENT_INTO_DK, BACKWARD, FA_ERR_INVALID_ARG, "dv", "overlap"),
    CASE(DV_HALF_AN_ELEMENT_INTO_DK, BACKWARD, FA_ERR_INVALID_ARG, "dv", "overlap"),
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
    /* the kernels take a row's maximum before scaling, which a negative scale would turn into its minimum */
    CASE(SCALE_NEGATIVE, BOTH, FA_ERR_INVALID_ARG, "softmax_scale", ">= 0"),
    CASE(ALIBI_SLOPE_NAN, BOTH, FA_ERR_INVALID_ARG, "alibi_slopes[7]", "not finite"),
    CASE(ALIBI_SLOPE_INF, BOTH, FA_ERR_INVALID_ARG, "alibi_slopes[7]", "not finite"),
    CASE(ALIBI_SLOPE_MINUS_INF, BOTH, FA_ERR_INVALID_ARG, "alibi_slopes[3]", "not finite"),
    /* the learnable sink: each value read on the host and finite; not inside an output */
    CASE(SINK_NAN, BOTH, FA_ERR_INVALID_ARG, "learnable_sink[2]", "not finite"),
    CASE(SINK_INF, BOTH, FA_ERR_INVALID_ARG, "learnable_sink[3]", "not finite"),
    CASE(SINK_MINUS_INF, BOTH, FA_ERR_INVALID_ARG, "learnable_sink[0]", "not finite"),
    CASE(SINK_INSIDE_O, FORWARD, FA_ERR_INVALID_ARG, "learnable_sink", "overlap"),
    CASE(SINK_INSIDE_LSE, FORWARD, FA_ERR_INVALID_ARG, "learnable_sink", "overlap"),
    CASE(SINK_INSIDE_DK, BACKWARD, FA_ERR_INVALID_ARG, "learnable_sink", "overlap"),
    CASE(SINK_INSIDE_DSINK, BACKWARD, FA_ERR_INVALID_ARG, "learnable_sink", "overlap"),
    /* dsink: fp32 [heads_q], only with a sink, an output like dq, dk, dv */
    CASE(DSINK_WITHOUT_SINK, BACKWARD, FA_ERR_INVALID_ARG, "dsink", "learnable_sink"),
    CASE(DSINK_SHAPE_MISMATCH, BACKWARD, FA_ERR_INVALID_ARG, "dsink", "shape"),
    CASE(DSINK_DTYPE_F16, BACKWARD, FA_ERR_INVALID_ARG, "dsink", "dtype"),
    CASE(DSINK_NDIM_2, BACKWARD, FA_ERR_INVALID_ARG, "dsink", "ndim"),
    CASE(DSINK_OVERLAPS_DQ, BACKWARD, FA_ERR_INVALID_ARG, "dsink", "overlap"),
    CASE(DSINK_ALIASES_Q, BACKWARD, FA_ERR_INVALID_ARG, "dsink", "overlap"),
    /* d_v, set by v's last dimension: at least 1, at most 256; o, dout and dv follow it */
    CASE(V_DIM_ZERO, BOTH, FA_ERR_INVALID_ARG, "d_v", ">= 1"),
    CASE(V_DIM_264, BOTH, FA_ERR_UNSUPPORTED, "d_v = 264", "256"),
    CASE(DV_DIM_D_NOT_DV, BACKWARD, FA_ERR_INVALID_ARG, "dv", "shape"),
    CASE(DOUT_DIM_D_NOT_DV, BACKWARD, FA_ERR_INVALID_ARG, "dout", "shape"),
};

/* Sink logits for the cases above: a valid [HEADS_Q] (its own memory, in the CPU context's host
 * memory), one with a non-finite entry, and a dsink buffer with room for the wrong shapes. */
static float sink_ok[HEADS_Q] = {0.5f, -1.0f, 2.0f, 0.0f};
static fa_tensor tensor1(void *data, int64_t n)
{
    fa_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = FA_DTYPE_F32;
    t.ndim = 1;
    t.shape[0] = n;
    t.stride[0] = 1;
    return t;
}
static float bad_sink[HEADS_Q];
static float dsink_buf[4 * HEADS_Q];

static const float *sink_with(int bad, float value)
{
    for (int i = 0; i < HEADS_Q; ++i)
        bad_sink[i] = 0.25f;
    bad_sink[bad] = value;
    return bad_sink;
}

/* ALiBi slopes for the cases above that need a valid pointer: [BATCH][HEADS_Q + 1] */
static float alibi_slopes[BATCH * (HEADS_Q + 1)];
/* Slopes of which one that the call uses is not finite: entry `bad` holds `value` */
static float bad_slopes[BATCH * (HEADS_Q + 1)];

static const float *slopes_with(int bad, float value)
{
    for (int i = 0; i < BATCH * (HEADS_Q + 1); ++i)
        bad_slopes[i] = 0.25f;
    bad_slopes[bad] = value;
    return bad_slopes;
}

/* Block masks used by the mask cases; built once per test run. */
static fa_block_mask mask_short_rows, mask_short_cols, mask_two_heads, mask_null_bits, mask_zero_block;
static uint8_t huge_mask_bits[16];
static const fa_block_mask mask_huge = {1, (int64_t)1 << 40, (int64_t)1 << 40, 2, 2, huge_mask_bits};

/* The tensors both argument structs share; in the backward o and lse are inputs. The d* and
 * dout pointers are NULL for the forward. */
typedef struct arg_view {
    fa_tensor *q, *k, *v, *o, *lse, *dout, *dq, *dk, *dv;
    fa_options *opts;
    fa_tensor *dsink; /* NULL for the forward */
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
    case SCALE_NEGATIVE: a.opts->softmax_scale = -0.5f; break;
    /* [BATCH][HEADS_Q + 1] rows: entry 7 is sequence 1's head 2 */
    case ALIBI_SLOPE_NAN: a.opts->alibi_slopes = slopes_with(7, NAN); a.opts->alibi_batch_stride = HEADS_Q + 1; break;
    case ALIBI_SLOPE_INF: a.opts->alibi_slopes = slopes_with(7, INFINITY); a.opts->alibi_batch_stride = HEADS_Q + 1; break;
    case ALIBI_SLOPE_MINUS_INF: a.opts->alibi_slopes = slopes_with(3, -INFINITY); break;
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
    case DV_ONE_ELEMENT_INTO_DK: a.dv->data = (float *)a.dk->data + 1; break;
    case DV_HALF_AN_ELEMENT_INTO_DK: a.dv->data = (char *)a.dk->data + 2; break;
    case SINK_NAN: a.opts->learnable_sink = sink_with(2, NAN); break;
    case SINK_INF: a.opts->learnable_sink = sink_with(3, INFINITY); break;
    case SINK_MINUS_INF: a.opts->learnable_sink = sink_with(0, -INFINITY); break;
    case SINK_INSIDE_O: a.opts->learnable_sink = (const float *)a.o->data + 3; break;
    case SINK_INSIDE_LSE: a.opts->learnable_sink = (const float *)a.lse->data + 3; break;
    case SINK_INSIDE_DK: a.opts->learnable_sink = (const float *)a.dk->data + 3; break;
    case SINK_INSIDE_DSINK: /* the sink is read while dsink is written */
        a.opts->learnable_sink = dsink_buf;
        *a.dsink = tensor1(dsink_buf + 2, HEADS_Q);
        break;
    case DSINK_WITHOUT_SINK: *a.dsink = tensor1(dsink_buf, HEADS_Q); break;
    case DSINK_SHAPE_MISMATCH:
        a.opts->learnable_sink = sink_ok;
        *a.dsink = tensor1(dsink_buf, HEADS_Q + 1);
        break;
    case DSINK_DTYPE_F16:
        a.opts->learnable_sink = sink_ok;
        *a.dsink = tensor1(dsink_buf, HEADS_Q);
        a.dsink->dtype = FA_DTYPE_F16;
        break;
    case DSINK_NDIM_2:
        a.opts->learnable_sink = sink_ok;
        *a.dsink = tensor2(dsink_buf, FA_DTYPE_F32, 1, HEADS_Q);
        break;
    case DSINK_OVERLAPS_DQ:
        a.opts->learnable_sink = sink_ok;
        *a.dsink = tensor1((float *)a.dq->data + 5, HEADS_Q);
        break;
    case DSINK_ALIASES_Q:
        a.opts->learnable_sink = sink_ok;
        *a.dsink = tensor1(a.q->data, HEADS_Q);
        break;
    case V_DIM_ZERO:
    case V_DIM_264: {
        /* v, o (and dout, dv) with d_v = 0 or 264, q and k with HEAD_DIM, one key and query row */
        int64_t dv = id == V_DIM_ZERO ? 0 : 264;
        *a.q = tensor4(fx->buf[BUF_Q], FA_DTYPE_F32, BATCH, 1, HEADS_Q, HEAD_DIM);
        *a.k = tensor4(fx->buf[BUF_K], FA_DTYPE_F32, BATCH, 1, HEADS_KV, HEAD_DIM);
        *a.v = tensor4(fx->buf[BUF_V], FA_DTYPE_F32, BATCH, 1, HEADS_KV, dv);
        *a.o = tensor4(a.o->data, FA_DTYPE_F32, BATCH, 1, HEADS_Q, dv);
        *a.lse = tensor3(a.lse->data, FA_DTYPE_F32, BATCH, HEADS_Q, 1);
        if (a.dq) {
            *a.dout = tensor4(fx->buf[BUF_DOUT], FA_DTYPE_F32, BATCH, 1, HEADS_Q, dv);
            *a.dq = tensor4(fx->buf[BUF_DQ], FA_DTYPE_F32, BATCH, 1, HEADS_Q, HEAD_DIM);
            *a.dk = tensor4(fx->buf[BUF_DK], FA_DTYPE_F32, BATCH, 1, HEADS_KV, HEAD_DIM);
            *a.dv = tensor4(fx->buf[BUF_DV], FA_DTYPE_F32, BATCH, 1, HEADS_KV, dv);
        }
        break;
    }
    case DV_DIM_D_NOT_DV:
    case DOUT_DIM_D_NOT_DV:
        /* v, o, dout and dv with d_v = HEAD_DIM / 2, but for the one that keeps q's d */
        *a.v = tensor4(fx->buf[BUF_V], FA_DTYPE_F32, BATCH, SEQ_K, HEADS_KV, HEAD_DIM / 2);
        *a.o = tensor4(a.o->data, FA_DTYPE_F32, BATCH, SEQ_Q, HEADS_Q, HEAD_DIM / 2);
        *a.dout = tensor4(fx->buf[BUF_DOUT], FA_DTYPE_F32, BATCH, SEQ_Q, HEADS_Q,
                          id == DOUT_DIM_D_NOT_DV ? HEAD_DIM : HEAD_DIM / 2);
        *a.dv = tensor4(fx->buf[BUF_DV], FA_DTYPE_F32, BATCH, SEQ_K, HEADS_KV,
                        id == DV_DIM_D_NOT_DV ? HEAD_DIM : HEAD_DIM / 2);
        break;
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
        arg_view view = {&a.q, &a.k, &a.v, &a.o, &a.lse, NULL, NULL, NULL, NULL, &a.opts, NULL};
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
        arg_view view = {&a.q, &a.k, &a.v, &a.o, &a.lse, &a.dout, &a.dq, &a.dk, &a.dv, &a.opts, &a.dsink};
        for (size_t e = 0; e < sizeof dsink_buf / sizeof dsink_buf[0]; ++e)
            dsink_buf[e] = -7.0f;
        apply_case(ic->id, fx, view);
        fa_status st = fa_backward(fx->ctx, &a);
        for (size_t e = 0; e < sizeof dsink_buf / sizeof dsink_buf[0]; ++e)
            if (dsink_buf[e] != -7.0f) {
                print_error("backward %s: dsink was written\n", ic->name);
                ++failed;
                break;
            }
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_invalid_forward_arguments),
        cmocka_unit_test(test_invalid_backward_arguments),
        cmocka_unit_test(test_null_context_and_arguments),
    };
    return cmocka_run_group_tests(tests, make_masks, free_masks);
}
