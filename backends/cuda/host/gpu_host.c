/* gpu_host.c: the host glue of the CUDA and HIP backends (gpu_host.h says what it holds),
 * compiled once per runtime. */
#include "host/gpu_host.h"
#include "common/split_rule.h"
#if defined(FA_CUDA_RTC) || defined(FA_HIP_RTC)
#include "host/rtc_kernels.h"
#endif
#include "kernels_switch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

fa_status fa_gpu_fail(fa_context *ctx, fa_rt_error e, const char *what)
{
    fa_status st = e == FA_RT_ERR_NO_MEMORY ? FA_ERR_OUT_OF_MEMORY : FA_ERR_BACKEND;
#if defined(FA_CUDA_RTC) || defined(FA_HIP_RTC)
    /* a kernel compiled at run time: what the compiler or the launcher said, after the code */
    const char *rtc = fa_rtc_last_error();
    if (rtc[0])
        return FA_ERROR(ctx, st, "%s: %s (%s): %s", what, FA_RT(GetErrorName)(e), FA_RT(GetErrorString)(e), rtc);
#endif
    return FA_ERROR(ctx, st, "%s: %s (%s)", what, FA_RT(GetErrorName)(e), FA_RT(GetErrorString)(e));
}

fa_status fa_gpu_device_count(int *count)
{
    int n = 0;
    if (FA_RT(GetDeviceCount)(&n) != FA_RT(Success)) {
        (void)FA_RT(GetLastError)(); /* no driver or no device: zero devices, not an error */
        n = 0;
    }
    *count = n;
    return FA_SUCCESS;
}

/* fa_backend.availability: the runtime's own word for why there is no device. Without a device
 * the runtime answers NoDevice; any other error means the driver (CUDA: libcuda, too old or
 * absent; HIP: the kernel driver /dev/kfd) is not usable. */
fa_status fa_gpu_availability(int *count, char *why, size_t len)
{
    int n = 0;
    fa_rt_error e = FA_RT(GetDeviceCount)(&n);
    if (e != FA_RT(Success)) {
        (void)FA_RT(GetLastError)();
        *count = 0;
        const char *name = FA_RT(GetErrorName)(e), *text = FA_RT(GetErrorString)(e);
        snprintf(why, len, "%s: %s%s%s%s", e == FA_RT_ERR_NO_DEVICE ? "no device" : "no driver", name,
                 strcmp(name, text) ? " (" : "", strcmp(name, text) ? text : "", strcmp(name, text) ? ")" : "");
        return FA_ERR_NO_BACKEND;
    }
    *count = n;
    if (n <= 0) {
        *count = 0;
        snprintf(why, len, "no device");
        return FA_ERR_NO_BACKEND;
    }
    return FA_SUCCESS;
}

/* FLASHATTN_KERNELS's family token, FA_GPU_KERNELS_CHOOSER where it names none. */
static fa_gpu_kernels kernels_forced(void)
{
    static const struct {
        const char *token;
        fa_gpu_kernels kernels;
    } families[] = {{"simt", FA_GPU_KERNELS_SIMT},
                    {"mfma-emulated", FA_GPU_KERNELS_MFMA_EMULATED},
                    {"sm90", FA_GPU_KERNELS_SM90},
                    {"sm80", FA_GPU_KERNELS_SM80}};
    for (size_t i = 0; i < sizeof families / sizeof families[0]; ++i)
        if (fa_kernels_switch(families[i].token, NULL, 0))
            return families[i].kernels;
    return FA_GPU_KERNELS_CHOOSER;
}

fa_status fa_gpu_open(fa_context *ctx, int device)
{
    char value[16];
    if (fa_kernels_switch("sm80-backward", value, sizeof value) && strcmp(value, "rows") != 0)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "%s: " FA_KERNELS_ENV " has sm80-backward=%s; its value is rows",
                        FA_RT_NAME, value);
    int stages = 0; /* auto */
    if (fa_kernels_switch("sm80-fwd-stages", value, sizeof value)) {
        if (strcmp(value, "1") != 0 && strcmp(value, "2") != 0 && strcmp(value, "auto") != 0)
            return FA_ERROR(ctx, FA_ERR_INVALID_ARG,
                            "%s: " FA_KERNELS_ENV " has sm80-fwd-stages=%s; its value is 1, 2 or auto", FA_RT_NAME,
                            value);
        stages = value[0] == 'a' ? 0 : value[0] - '0';
    }
    /* fwd-split=N: N splits (1 .. FA_SPLIT_MAX; 1 turns the split off) wherever a split kernel
     * takes a call, instead of the rule's count */
    int split = 0;
    if (fa_kernels_switch("fwd-split", value, sizeof value)) {
        char *end = NULL;
        const long n = strtol(value, &end, 10);
        if (end == value || *end || n < 1 || n > FA_SPLIT_MAX)
            return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "%s: " FA_KERNELS_ENV " has fwd-split=%s; its value is 1..%d",
                            FA_RT_NAME, value, FA_SPLIT_MAX);
        split = (int)n;
    }
    fa_gpu_state *s = calloc(1, sizeof *s);
    if (!s)
        return FA_ERR_OUT_OF_MEMORY;
    fa_rt_error e = FA_RT(SetDevice)(device);
    if (e == FA_RT(Success))
        e = FA_RT(GetDeviceProperties)(&s->prop, device);
    if (e == FA_RT(Success))
        e = FA_RT(StreamCreateWithFlags)(&s->own, FA_RT(StreamNonBlocking));
    if (e != FA_RT(Success)) {
        free(s);
        return FA_ERR_BACKEND;
    }
    s->stream = s->own;
    s->kernels = kernels_forced();
    s->kv_simt = fa_kernels_switch("kv-simt", NULL, 0);
    s->kv_mma_four = fa_kernels_switch("kv-mma-4-warps", NULL, 0);
    s->kv_mla_sm90 = fa_kernels_switch("kv-mla-sm90", NULL, 0);
    s->kv_mla_16_rows = fa_kernels_switch("kv-mla-16-rows", NULL, 0);
    s->sm80_bwd_narrow = fa_kernels_switch("sm80-bwd-narrow", NULL, 0);
    s->dsum_zero = fa_kernels_switch("dsum-zero", NULL, 0);
    s->fwd_split = split;
    s->sm80_fwd_stages = stages;
    ctx->priv = s;
    return FA_SUCCESS;
}

void fa_gpu_close(fa_context *ctx)
{
    fa_gpu_state *s = fa_gpu_of(ctx);
    if (!s)
        return;
    FA_RT(SetDevice)(ctx->device);
    FA_RT(StreamSynchronize)(s->own);
    if (s->scratch)
        FA_RT(Free)(s->scratch); /* waits for the kernels still using it */
    if (s->fault)
        FA_RT(Free)(s->fault);
    FA_RT(StreamDestroy)(s->own);
    free(s);
    ctx->priv = NULL;
}

fa_gpu_tensor fa_gpu_tensor_of(const fa_view *v)
{
    fa_gpu_tensor t = {v->data, v->sb, v->ss, v->sh};
    return t;
}

/* Stream-ordered: *dst (bytes, at least 1) holds src's bytes (when src) by the time the stream
 * reaches the kernels. */
fa_status fa_gpu_upload(fa_context *ctx, const void *src, size_t bytes, void **dst)
{
    fa_gpu_state *s = fa_gpu_of(ctx);
    FA_GPU_TRY(ctx, FA_RT(MallocAsync)(dst, bytes ? bytes : 1, s->stream));
    if (bytes && src)
        FA_GPU_TRY(ctx, FA_RT(MemcpyAsync)(*dst, src, bytes, FA_RT(MemcpyHostToDevice), s->stream));
    return FA_SUCCESS;
}

void fa_gpu_release(fa_context *ctx, fa_gpu_buffers *cb)
{
    fa_rt_stream st = fa_gpu_of(ctx)->stream;
    void *all[] = {cb->bits, cb->row_ptr, cb->col, cb->cls, cb->dsum, cb->dq_accum};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i)
        if (all[i])
            FA_RT(FreeAsync)(all[i], st);
}

/* Device copies of block lists the context keeps (core/lists_cache.c): the mask's bits and the
 * lists' three arrays in one allocation. */
static size_t gpu_align16(size_t n)
{
    return (n + 15) & ~(size_t)15;
}

fa_status fa_gpu_lists_upload(fa_context *ctx, fa_block_lists *l, const fa_block_mask *m)
{
    fa_gpu_state *s = fa_gpu_of(ctx);
    fa_rt_capture_status cs;
    /* while the stream is captured, a copy would only land when the graph replays: the call uploads
     * its own (fa_gpu_make_params), as a captured call must */
    if (FA_RT(StreamIsCapturing)(s->stream, &cs) != FA_RT(Success) || cs != FA_RT_CAPTURE_NONE)
        return FA_ERR_UNSUPPORTED;
    const size_t sizes[4] = {(size_t)(m->heads * m->rows * m->cols), sizeof(int64_t) * (size_t)(l->heads * l->nq + 1),
                             sizeof(int32_t) * (size_t)l->nnz, (size_t)l->nnz};
    const void *src[4] = {m->bits, l->row_ptr, l->col, l->cls};
    size_t off[4], total = 0;
    for (int i = 0; i < 4; ++i) {
        off[i] = total;
        total += gpu_align16(sizes[i]);
    }
    fa_gpu_lists *g = calloc(1, sizeof *g);
    if (!g)
        return FA_ERR_OUT_OF_MEMORY;
    FA_GPU_TRY(ctx, FA_RT(SetDevice)(ctx->device));
    fa_rt_error e = FA_RT(Malloc)(&g->base, total ? total : 1);
    /* synchronous copies: the lists are complete before any stream's kernel can read them */
    for (int i = 0; i < 4 && e == FA_RT(Success); ++i)
        if (sizes[i])
            e = FA_RT(Memcpy)((char *)g->base + off[i], src[i], sizes[i], FA_RT(MemcpyHostToDevice));
    if (e != FA_RT(Success)) {
        if (g->base)
            FA_RT(Free)(g->base);
        free(g);
        return fa_gpu_fail(ctx, e, "block lists: device copies");
    }
    g->bits = (char *)g->base + off[0];
    g->row_ptr = (char *)g->base + off[1];
    g->col = (char *)g->base + off[2];
    g->cls = (char *)g->base + off[3];
    l->device = g;
    return FA_SUCCESS;
}

void fa_gpu_lists_free(fa_context *ctx, fa_block_lists *l)
{
    fa_gpu_lists *g = (fa_gpu_lists *)l->device;
    if (!g)
        return;
    FA_RT(SetDevice)(ctx->device);
    FA_RT(Free)(g->base); /* waits for the kernels still reading them */
    free(g);
    l->device = NULL;
}

int fa_gpu_grid_refuses(const fa_problem *p, char *why, size_t len)
{
    if (p->batch <= 65535 && p->heads_q <= 65535)
        return 0;
    snprintf(why, len,
             "%s: a call of %lld sequences with %lld query heads; the kernels' grids take at most 65535 of each "
             "(call in parts)",
             FA_RT_NAME, (long long)p->batch, (long long)p->heads_q);
    return 1;
}

fa_status fa_gpu_make_params(fa_context *ctx, const fa_problem *p, fa_gpu_params *kp, fa_gpu_buffers *cb)
{
    memset(kp, 0, sizeof *kp);
    memset(cb, 0, sizeof *cb);
    kp->q = fa_gpu_tensor_of(&p->q);
    kp->k = fa_gpu_tensor_of(&p->k);
    kp->v = fa_gpu_tensor_of(&p->v);
    kp->o = fa_gpu_tensor_of(&p->o);
    kp->lse = fa_gpu_tensor_of(&p->lse);
    if (!p->has_lse)
        kp->lse.data = NULL;
    kp->dout = fa_gpu_tensor_of(&p->dout);
    kp->dq = fa_gpu_tensor_of(&p->dq);
    kp->dk = fa_gpu_tensor_of(&p->dk);
    kp->dv = fa_gpu_tensor_of(&p->dv);
    kp->batch = p->batch;
    kp->heads_q = p->heads_q;
    kp->heads_kv = p->heads_kv;
    kp->group = p->group;
    kp->d = p->d;
    kp->d_v = p->d_v;
    kp->sink = p->sink;
    kp->dsink = p->backward ? p->dsink : NULL;
    kp->seqlen_q = p->seqlen_q;
    kp->seqlen_k = p->seqlen_k;
    kp->total_q = p->total_q;
    kp->cu_q = p->varlen ? p->cu_q : NULL;
    kp->cu_k = p->varlen ? p->cu_k : NULL;
    kp->scale = p->scale;
    kp->scale_log2 = (float)((double)p->scale * 1.4426950408889634);
    kp->causal = p->causal;
    kp->out_f32 = p->out_dtype != p->dtype;
    kp->window_left = p->window_left;
    kp->window_right = p->window_right;
    kp->dropout_threshold = p->dropout_threshold;
    kp->dropout_scale = p->dropout_scale;
    kp->seed = p->seed;
    kp->offset = p->offset;
    kp->mod = fa_score_mod_prepare(p->mod, p->scale);
    kp->alibi_slopes = p->alibi_slopes;
    fa_status st = FA_SUCCESS;
    if (p->block_mask && p->lists) {
        const fa_block_mask *bm = p->block_mask;
        const fa_block_lists *l = p->lists;
        const fa_gpu_lists *g = (const fa_gpu_lists *)l->device;
        if (g) { /* kept by the context */
            kp->bm_bits = g->bits;
            kp->bl_row_ptr = g->row_ptr;
            kp->bl_col = g->col;
            kp->bl_cls = g->cls;
        } else { /* this call's own, released after its kernels */
            if ((st = fa_gpu_upload(ctx, l->bits, (size_t)(bm->heads * bm->rows * bm->cols), &cb->bits)) ||
                (st = fa_gpu_upload(ctx, l->row_ptr, sizeof(int64_t) * (size_t)(l->heads * l->nq + 1), &cb->row_ptr)) ||
                (st = fa_gpu_upload(ctx, l->col, sizeof(int32_t) * (size_t)l->nnz, &cb->col)) ||
                (st = fa_gpu_upload(ctx, l->cls, (size_t)l->nnz, &cb->cls)))
                return st;
            kp->bm_bits = cb->bits;
            kp->bl_row_ptr = cb->row_ptr;
            kp->bl_col = cb->col;
            kp->bl_cls = cb->cls;
        }
        kp->bm_heads = bm->heads;
        kp->bm_rows = bm->rows;
        kp->bm_cols = bm->cols;
        kp->bm_bq = bm->block_q;
        kp->bm_bk = bm->block_k;
        kp->bl_heads = l->heads;
        kp->bl_nq = l->nq;
    }
    return st;
}

/* The backward's workspace: D and LSE log2(e), [heads_q][total_q] floats each, then (from a
 * 256-byte boundary) the fp32 dQ accumulator of the non-deterministic kernels. It is the context's
 * scratch, kept from call to call, wherever the scratch may be used (fa_gpu_scratch_usable): a
 * training step's backwards then reuse one buffer instead of taking and returning tens of
 * megabytes through the stream-ordered pool each call. Otherwise (a graph capture the scratch is
 * too small for) the call allocates its own, freed after its kernels. */
static fa_status gpu_backward_workspace(fa_context *ctx, const fa_problem *p, int64_t dq_accum_floats,
                                        fa_gpu_call *call)
{
    int64_t rows_bytes, acc_bytes, bytes;
    if (!fa_mul_ok(p->total_q, p->heads_q, &rows_bytes) || !fa_mul_ok(rows_bytes, 2 * sizeof(float), &rows_bytes) ||
        !fa_mul_ok(dq_accum_floats, sizeof(float), &acc_bytes) || !fa_add_ok(rows_bytes, 255, &bytes) ||
        !fa_add_ok(bytes & ~(int64_t)255, acc_bytes, &bytes) || (uint64_t)bytes > SIZE_MAX)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "the backward's workspace (%lld rows x %lld heads) overflows",
                       (long long)p->total_q, (long long)p->heads_q);
    const size_t acc_offset = (size_t)((rows_bytes + 255) & ~(int64_t)255);
    fa_status st = FA_SUCCESS;
    if (fa_gpu_scratch_usable(ctx, (size_t)bytes)) {
        void *base = NULL;
        if ((st = fa_gpu_scratch(ctx, (size_t)bytes, &base)) != FA_SUCCESS)
            return st;
        call->kp.dsum = base;
        call->kp.dq_accum = dq_accum_floats > 0 ? (float *)((char *)base + acc_offset) : NULL;
    } else {
        if ((st = fa_gpu_upload(ctx, NULL, (size_t)rows_bytes, &call->cb.dsum)) != FA_SUCCESS ||
            (dq_accum_floats > 0 && (st = fa_gpu_upload(ctx, NULL, (size_t)acc_bytes, &call->cb.dq_accum)) != FA_SUCCESS))
            return st;
        call->kp.dsum = call->cb.dsum;
        call->kp.dq_accum = call->cb.dq_accum;
    }
    if (call->kp.dq_accum)
        call->kp.lse2 = call->kp.dsum + p->total_q * p->heads_q;
    return FA_SUCCESS;
}

fa_status fa_gpu_call_begin(fa_context *ctx, const fa_problem *p, int64_t dq_accum_floats, fa_gpu_call *call)
{
    memset(call, 0, sizeof *call);
    if (!p->backward && (p->batch == 0 || p->seqlen_q == 0))
        return FA_SUCCESS; /* nothing to launch */
    FA_GPU_TRY(ctx, FA_RT(SetDevice)(ctx->device));
    fa_status st = fa_gpu_make_params(ctx, p, &call->kp, &call->cb);
    if (st == FA_SUCCESS && p->backward)
        st = gpu_backward_workspace(ctx, p, dq_accum_floats, call);
    if (st != FA_SUCCESS) {
        fa_gpu_release(ctx, &call->cb);
        return st;
    }
    call->run = p->batch > 0;
    call->stream = fa_gpu_of(ctx)->stream;
    return FA_SUCCESS;
}

fa_status fa_gpu_call_end(fa_context *ctx, fa_gpu_call *call, int launch_error, const char *what)
{
    fa_status st = launch_error != (int)FA_RT(Success) ? fa_gpu_fail(ctx, (fa_rt_error)launch_error, what) : FA_SUCCESS;
    fa_gpu_release(ctx, &call->cb);
    return st;
}

/* Whether fa_gpu_scratch can give this call `bytes` without allocating or waiting for the device,
 * neither of which a stream being captured into a graph allows: the stream is not being captured,
 * or the scratch is already that large and was last used on this stream. */
int fa_gpu_scratch_usable(fa_context *ctx, size_t bytes)
{
    const fa_gpu_state *s = fa_gpu_of(ctx);
    return !fa_gpu_capturing(ctx) || (s->scratch && bytes <= s->scratch_bytes && s->scratch_stream == s->stream);
}

/* Whether the context's stream is being captured into a graph (or its state cannot be read). */
int fa_gpu_capturing(fa_context *ctx)
{
    fa_rt_capture_status cs;
    return FA_RT(StreamIsCapturing)(fa_gpu_of(ctx)->stream, &cs) != FA_RT(Success) || cs != FA_RT_CAPTURE_NONE;
}

/* At least `bytes` of device memory for the kernels of this call on the context's stream, kept
 * for the next call (no allocation per call; a stream-ordered allocation would be returned to
 * the device at every synchronisation, and made again). A call on another stream than the
 * previous user's first waits for the device. */
fa_status fa_gpu_scratch(fa_context *ctx, size_t bytes, void **ptr)
{
    fa_gpu_state *s = fa_gpu_of(ctx);
    if (s->scratch && s->scratch_stream != s->stream) /* that stream may be gone: wait for the device */
        FA_GPU_TRY(ctx, FA_RT(DeviceSynchronize)());
    if (bytes > s->scratch_bytes) {
        if (s->scratch) {
            FA_GPU_TRY(ctx, FA_RT(StreamSynchronize)(s->stream));
            FA_GPU_TRY(ctx, FA_RT(Free)(s->scratch));
            s->scratch = NULL;
            s->scratch_bytes = 0;
        }
        FA_GPU_TRY(ctx, FA_RT(Malloc)(&s->scratch, bytes));
        s->scratch_bytes = bytes;
    }
    s->scratch_stream = s->stream;
    *ptr = s->scratch;
    return FA_SUCCESS;
}

fa_status fa_gpu_alloc(fa_context *ctx, size_t bytes, void **ptr)
{
    FA_GPU_TRY(ctx, FA_RT(SetDevice)(ctx->device));
    FA_GPU_TRY(ctx, FA_RT(Malloc)(ptr, bytes ? bytes : 1));
    return FA_SUCCESS;
}

fa_status fa_gpu_free(fa_context *ctx, void *ptr)
{
    FA_GPU_TRY(ctx, FA_RT(SetDevice)(ctx->device));
    FA_GPU_TRY(ctx, FA_RT(Free)(ptr));
    return FA_SUCCESS;
}

fa_status fa_gpu_copy(fa_context *ctx, void *dst, const void *src, size_t bytes, fa_copy_kind kind)
{
    const int kinds[] = {FA_RT(MemcpyHostToDevice), FA_RT(MemcpyDeviceToHost), FA_RT(MemcpyDeviceToDevice),
                         FA_RT(MemcpyHostToHost)};
    fa_gpu_state *s = fa_gpu_of(ctx);
    FA_GPU_TRY(ctx, FA_RT(SetDevice)(ctx->device));
    FA_GPU_TRY(ctx, FA_RT(MemcpyAsync)(dst, src, bytes, kinds[kind], s->stream));
    FA_GPU_TRY(ctx, FA_RT(StreamSynchronize)(s->stream)); /* the helper's contract: done on return */
    return FA_SUCCESS;
}

/* The fault a device-checked fa_forward_kvcache recorded, as the error the host check would have
 * given (then the record is cleared); FA_SUCCESS when none. Waits for the device: the calls may
 * have run on a stream the context no longer uses. */
static fa_status gpu_report_fault(fa_context *ctx)
{
    fa_gpu_state *s = fa_gpu_of(ctx);
    long long f[FA_KV_FAULT_WORDS];
    FA_GPU_TRY(ctx, FA_RT(SetDevice)(ctx->device));
    FA_GPU_TRY(ctx, FA_RT(DeviceSynchronize)());
    FA_GPU_TRY(ctx, FA_RT(Memcpy)(f, s->fault, sizeof f, FA_RT(MemcpyDeviceToHost)));
    s->fault_armed = 0;
    if (f[0] == FA_KV_FAULT_NONE)
        return FA_SUCCESS;
    FA_GPU_TRY(ctx, FA_RT(Memset)(s->fault, 0, sizeof f));
    FA_GPU_TRY(ctx, FA_RT(DeviceSynchronize)());
    const long long b = f[1], i = f[2], v = f[3];
    switch (f[0]) {
    case FA_KV_FAULT_NEGATIVE_LENGTH:
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "fa_forward_kvcache (checked on the device): cache_seqlens[%lld] = %lld is negative", b, v);
    case FA_KV_FAULT_OVER_CAPACITY:
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG,
                        "fa_forward_kvcache (checked on the device): sequence %lld: cache_seqlens = %lld and the new "
                        "tokens make %lld, more than the cache's positions",
                        b, v, i);
    case FA_KV_FAULT_BATCH_IDX:
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "fa_forward_kvcache (checked on the device): cache_batch_idx[%lld] = %lld is outside the cache's rows", b, v);
    case FA_KV_FAULT_PAGE:
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "fa_forward_kvcache (checked on the device): block_table[%lld][%lld] = %lld is outside the pages", b, i, v);
    case FA_KV_FAULT_ROTARY:
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "fa_forward_kvcache (checked on the device): rotary: sequence %lld needs %lld table rows, more than seqlen_ro", b, v);
    default:
        return FA_ERROR(ctx, FA_ERR_BACKEND, "fa_forward_kvcache: unknown fault record %lld", (long long)f[0]);
    }
}

fa_status fa_gpu_sync(fa_context *ctx)
{
    FA_GPU_TRY(ctx, FA_RT(StreamSynchronize)(fa_gpu_of(ctx)->stream));
    return fa_gpu_of(ctx)->fault_armed ? gpu_report_fault(ctx) : FA_SUCCESS;
}

fa_status fa_gpu_set_stream(fa_context *ctx, void *stream)
{
    fa_gpu_state *s = fa_gpu_of(ctx);
    s->stream = stream ? (fa_rt_stream)stream : s->own;
    return FA_SUCCESS;
}

/* Tiles of the core's plans and block-sparse lists: 64 x 64 for every kernel family of both
 * backends (each family's own tiles lie inside them or merge whole ones); M is the shared memory
 * one block may use (onchip_bytes). */
void fa_gpu_tile_limits(fa_tile_limits *out, int64_t onchip_bytes)
{
    out->onchip_bytes = onchip_bytes;
    out->min_block = FA_GPU_BLOCK;
    out->max_block_q = FA_GPU_BLOCK;
    out->max_block_k = FA_GPU_BLOCK;
    out->multiple = FA_GPU_BLOCK;
}

/* Bytes of the block-sparse device copies for tiles of `block` rows and keys. */
int64_t fa_gpu_mask_workspace(const fa_problem *p, int64_t block)
{
    if (!p->block_mask)
        return 0;
    const fa_block_mask *bm = p->block_mask;
    int64_t nq = (p->seqlen_q + block - 1) / block, nk = (p->seqlen_k + block - 1) / block;
    return bm->heads * bm->rows * bm->cols + bm->heads * (nq * 8 + nq * nk * 5);
}

