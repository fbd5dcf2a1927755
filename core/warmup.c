/* warmup.c: fa_warmup (include/flashattn.h): the kernels that calls of one shape run, made ready
 * before the first real call, by running that call once on zeros in memory of its own. On a
 * backend whose kernels are compiled at run time (CUDA built with -Dcuda-kernels=rtc, OpenCL) the
 * run compiles them, or loads them from the disk cache; elsewhere it is one small call. Running
 * the call itself, rather than naming kernels, keeps warmup and the calls on the one chooser: what
 * is compiled is what the same call will need. */
#include "internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One buffer of the warm-up call, zeroed on the device. */
typedef struct warm_buffer {
    void *data;
} warm_buffer;

/* Its message carries no "fa_warmup: " prefix: fa_warmup adds that to every failure's message. */
static fa_status zeroed(fa_context *ctx, int64_t bytes, warm_buffer *b)
{
    fa_status st = fa_malloc(ctx, (size_t)bytes, &b->data);
    if (st != FA_SUCCESS)
        return st;
    /* a host buffer of zeros copied in: every backend's copy, no memset slot needed */
    void *zeros = calloc(1, (size_t)bytes);
    if (!zeros)
        return FA_ERROR(ctx, FA_ERR_OUT_OF_MEMORY, "%lld bytes of host memory for the zeros", (long long)bytes);
    st = fa_memcpy(ctx, b->data, zeros, (size_t)bytes, FA_COPY_HOST_TO_DEVICE);
    free(zeros);
    return st;
}

/* The bytes of a [1][seqlen][heads][d] tensor of dtype, or 0 with *ok cleared when they overflow
 * int64_t or size_t (fa_malloc's argument). */
static int64_t bytes_of(int64_t seqlen, int64_t heads, int64_t d, fa_dtype dtype, int *ok)
{
    int64_t n = 0;
    if (!fa_mul_ok(seqlen, heads, &n) || !fa_mul_ok(n, d, &n) || !fa_mul_ok(n, (int64_t)fa_dtype_size(dtype), &n) ||
        (uint64_t)n > (uint64_t)SIZE_MAX) {
        *ok = 0;
        return 0;
    }
    return n > 0 ? n : 1;
}

enum { WQ, WK, WV, WO, WLSE, WDO, WDQ, WDK, WDV, WDSINK, WCOUNT };

/* The forward (and backward) of the shape on the zeroed buffers; buffers not needed are NULL. */
static fa_status run_calls(fa_context *ctx, const warm_buffer *buf, fa_dtype dtype, int64_t seqlen, int64_t heads_q,
                           int64_t heads_kv, int64_t d, int64_t d_v, const fa_options *options, int backward)
{
    const int64_t sq[4] = {1, seqlen, heads_q, d}, sk[4] = {1, seqlen, heads_kv, d};
    const int64_t sv[4] = {1, seqlen, heads_kv, d_v}, so[4] = {1, seqlen, heads_q, d_v};
    const int64_t sl[3] = {1, heads_q, seqlen}, ss[1] = {heads_q};
    fa_fwd_args f;
    memset(&f, 0, sizeof f);
    f.q = fa_tensor_contiguous(buf[WQ].data, dtype, 4, sq);
    f.k = fa_tensor_contiguous(buf[WK].data, dtype, 4, sk);
    f.v = fa_tensor_contiguous(buf[WV].data, dtype, 4, sv);
    f.o = fa_tensor_contiguous(buf[WO].data, dtype, 4, so);
    f.lse = fa_tensor_contiguous(buf[WLSE].data, FA_DTYPE_F32, 3, sl);
    f.opts = *options;
    fa_status st = fa_forward(ctx, &f);
    if (st != FA_SUCCESS || !backward)
        return st;
    fa_bwd_args b;
    memset(&b, 0, sizeof b);
    b.q = f.q;
    b.k = f.k;
    b.v = f.v;
    b.o = f.o;
    b.lse = f.lse;
    b.dout = fa_tensor_contiguous(buf[WDO].data, dtype, 4, so);
    b.dq = fa_tensor_contiguous(buf[WDQ].data, dtype, 4, sq);
    b.dk = fa_tensor_contiguous(buf[WDK].data, dtype, 4, sk);
    b.dv = fa_tensor_contiguous(buf[WDV].data, dtype, 4, sv);
    if (options->learnable_sink)
        b.dsink = fa_tensor_contiguous(buf[WDSINK].data, FA_DTYPE_F32, 1, ss);
    b.opts = *options;
    return fa_backward(ctx, &b);
}

fa_status fa_warmup(fa_context *ctx, fa_dtype dtype, int64_t seqlen, int64_t heads_q, int64_t heads_kv, int64_t d,
                    int64_t d_v, const fa_options *options, int backward)
{
    if (!ctx)
        return FA_ERR_INVALID_ARG;
    if (!options)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "fa_warmup: options is NULL (fa_options_default() for none)");
    if (fa_dtype_size(dtype) == 0)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "fa_warmup: unknown dtype %d", (int)dtype);
    if (seqlen < 1 || heads_q < 1 || heads_kv < 1 || d < 1 || d_v < 0)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG,
                        "fa_warmup: seqlen %lld, heads_q %lld, heads_kv %lld and d %lld must be >= 1, d_v %lld >= 0",
                        (long long)seqlen, (long long)heads_q, (long long)heads_kv, (long long)d, (long long)d_v);
    if (backward != 0 && backward != 1)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "fa_warmup: backward is %d (0 or 1)", backward);
    if (d_v == 0)
        d_v = d;
    /* the shape's tensors: sizes checked here, the rest (head dims, GQA, options) by the calls */
    int ok = 1;
    int64_t bytes[WCOUNT];
    bytes[WQ] = bytes_of(seqlen, heads_q, d, dtype, &ok);
    bytes[WK] = bytes_of(seqlen, heads_kv, d, dtype, &ok);
    bytes[WV] = bytes_of(seqlen, heads_kv, d_v, dtype, &ok);
    bytes[WO] = bytes_of(seqlen, heads_q, d_v, dtype, &ok);
    bytes[WLSE] = bytes_of(heads_q, seqlen, 1, FA_DTYPE_F32, &ok);
    bytes[WDO] = bytes[WO];
    bytes[WDQ] = bytes[WQ];
    bytes[WDK] = bytes[WK];
    bytes[WDV] = bytes[WV];
    bytes[WDSINK] = bytes_of(heads_q, 1, 1, FA_DTYPE_F32, &ok);
    if (!ok)
        return FA_ERROR(ctx, FA_ERR_OVERFLOW, "fa_warmup: seqlen %lld x heads %lld x d %lld overflows", (long long)seqlen,
                        (long long)(heads_q > heads_kv ? heads_q : heads_kv), (long long)(d > d_v ? d : d_v));

    /* a message left by an earlier call must not pass for this one's */
    fa_clear_error(ctx);
    warm_buffer buf[WCOUNT];
    memset(buf, 0, sizeof buf);
    fa_status st = FA_SUCCESS;
    for (int i = 0; i < WCOUNT && st == FA_SUCCESS; ++i) {
        const int needed = i < WDO || (backward && (i != WDSINK || options->learnable_sink));
        if (needed)
            st = zeroed(ctx, bytes[i], &buf[i]);
    }
    if (st == FA_SUCCESS)
        st = run_calls(ctx, buf, dtype, seqlen, heads_q, heads_kv, d, d_v, options, backward);
    /* the failure's message (why a shape is refused) is kept before the clean-up calls */
    char message[FA_ERROR_MESSAGE_BYTES];
    snprintf(message, sizeof message, "%s", st != FA_SUCCESS ? fa_context_last_error(ctx) : "");
    /* the kernels of a forward that ran finish before their buffers are freed, even when the
     * backward was refused */
    if (buf[WQ].data) {
        fa_status sync = fa_synchronize(ctx);
        if (st == FA_SUCCESS && sync != FA_SUCCESS) {
            st = sync;
            snprintf(message, sizeof message, "%s", fa_context_last_error(ctx));
        }
    }
    for (int i = 0; i < WCOUNT; ++i) {
        fa_status freed = fa_free(ctx, buf[i].data);
        if (st == FA_SUCCESS && freed != FA_SUCCESS) {
            st = freed;
            snprintf(message, sizeof message, "%s", fa_context_last_error(ctx));
        }
    }
    if (st != FA_SUCCESS)
        return FA_ERROR(ctx, st, "fa_warmup: %s", message[0] ? message : fa_status_string(st));
    fa_clear_error(ctx);
    return FA_SUCCESS;
}
