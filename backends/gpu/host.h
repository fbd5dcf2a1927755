/* host.h: the host glue the CUDA and HIP backends share (their tables differ in the chooser and
 * the kernel families only): per-context state, runtime errors mapped to statuses, device memory,
 * copies, streams, the kernels' parameter block and the device copies of block-sparse lists. Each
 * backend.c includes runtime.h (FA_RUNTIME_HIP or not) and then this file once; every function is
 * static, so the two backends' copies are separate objects of the same source. Plain C. */
#ifndef FA_GPU_HOST_H
#define FA_GPU_HOST_H

#include "decode/kv_params.h"
#include "internal.h"
#include "params.h"
#include "runtime.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gpu_state {
    fa_rt_stream own, stream; /* the context's stream, and the one calls run on (fa_set_stream) */
    fa_rt_prop prop;
    int kernels;              /* FLASHATTN_<BACKEND>_KERNELS, read when the context opens: */
    /* fa_forward_kvcache's kernel knobs, read when the context opens: FLASHATTN_KV_KERNEL=simt
     * (no tensor-core decode kernel), FLASHATTN_KV_COPY=registers (SIMT kernel without its
     * cp.async ring), FLASHATTN_KV_L2_PREFETCH (0, 128 or 256; kv_host.h's default otherwise) */
    int kv_simt, kv_registers, kv_l2_prefetch;
    /* scratch the context keeps between calls (gpu_scratch): its size, and the stream its last
     * user ran on */
    void *scratch;
    size_t scratch_bytes;
    fa_rt_stream scratch_stream;
    /* fa_forward_kvcache's fault record (kv_params.h) for calls checked on the device, allocated
     * by the first of them; fault_armed: such a call ran since fa_synchronize last read it */
    long long *fault;
    int fault_armed;
} gpu_state;

enum {
    GPU_KERNELS_CHOOSER = 0,  /* unset or unknown: the chooser's pick */
    GPU_KERNELS_PORTABLE,     /* "portable": the portable SIMT family for everything */
    GPU_KERNELS_MFMA_EMULATED, /* "mfma-emulated" (CUDA only): the HIP backend's choice on gfx90a, its
                                  MFMA forward emulated (backends/hip/mfma/mfma.cuh) */
    GPU_KERNELS_SM90,          /* "sm90" (CUDA only): the chooser, with the Hopper wgmma forward for every
                                  call it has an instance for, dropout and block lists included (the
                                  chooser itself takes it only for calls with neither) */
    GPU_KERNELS_SM80           /* "sm80" (CUDA only): the chooser without the Hopper path */
};

static gpu_state *gpu_of(const fa_context *ctx)
{
    return (gpu_state *)ctx->priv;
}

static fa_status gpu_fail(fa_context *ctx, fa_rt_error e, const char *what)
{
    fa_status st = e == FA_RT_ERR_NO_MEMORY ? FA_ERR_OUT_OF_MEMORY : FA_ERR_BACKEND;
    return FA_ERROR(ctx, st, "%s: %s (%s)", what, FA_RT(GetErrorName)(e), FA_RT(GetErrorString)(e));
}

#define GPU_TRY(ctx, call)                                                                                         \
    do {                                                                                                           \
        fa_rt_error e_ = (call);                                                                                   \
        if (e_ != FA_RT(Success))                                                                                  \
            return gpu_fail((ctx), e_, #call);                                                                     \
    } while (0)

static fa_status gpu_device_count(int *count)
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
static fa_status gpu_availability(int *count, char *why, size_t len)
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

/* kernels_env: the variable that picks the kernel family ("FLASHATTN_CUDA_KERNELS"). */
static fa_status gpu_open(fa_context *ctx, int device, const char *kernels_env)
{
    gpu_state *s = calloc(1, sizeof *s);
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
    /* =portable runs every call on the portable SIMT kernels (testing them on a GPU a fast path
     * covers, comparing the two); unset or any other value: the chooser's pick */
    const char *kernels = getenv(kernels_env);
    s->kernels = !kernels                               ? GPU_KERNELS_CHOOSER
                 : strcmp(kernels, "portable") == 0      ? GPU_KERNELS_PORTABLE
                 : strcmp(kernels, "mfma-emulated") == 0 ? GPU_KERNELS_MFMA_EMULATED
                 : strcmp(kernels, "sm90") == 0          ? GPU_KERNELS_SM90
                 : strcmp(kernels, "sm80") == 0          ? GPU_KERNELS_SM80
                                                         : GPU_KERNELS_CHOOSER;
    const char *kv_kernel = getenv("FLASHATTN_KV_KERNEL"), *kv_copy = getenv("FLASHATTN_KV_COPY");
    const char *kv_prefetch = getenv("FLASHATTN_KV_L2_PREFETCH");
    s->kv_simt = kv_kernel && strcmp(kv_kernel, "simt") == 0;
    s->kv_registers = kv_copy && strcmp(kv_copy, "registers") == 0;
    s->kv_l2_prefetch = kv_prefetch ? atoi(kv_prefetch) : -1;
    ctx->priv = s;
    return FA_SUCCESS;
}

static void gpu_close(fa_context *ctx)
{
    gpu_state *s = gpu_of(ctx);
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

static fa_gpu_tensor gpu_tensor(const fa_view *v)
{
    fa_gpu_tensor t = {v->data, v->sb, v->ss, v->sh};
    return t;
}

/* Device copies of what the kernels read besides the tensors (block-mask bits and lists) and the
 * backward's workspace. */
typedef struct gpu_buffers {
    void *bits, *row_ptr, *col, *cls, *dsum, *dq_accum;
} gpu_buffers;

/* Stream-ordered: *dst (bytes, at least 1) holds src's bytes (when src) by the time the stream
 * reaches the kernels. */
static fa_status gpu_upload(fa_context *ctx, const void *src, size_t bytes, void **dst)
{
    gpu_state *s = gpu_of(ctx);
    GPU_TRY(ctx, FA_RT(MallocAsync)(dst, bytes ? bytes : 1, s->stream));
    if (bytes && src)
        GPU_TRY(ctx, FA_RT(MemcpyAsync)(*dst, src, bytes, FA_RT(MemcpyHostToDevice), s->stream));
    return FA_SUCCESS;
}

static void gpu_release(fa_context *ctx, gpu_buffers *cb)
{
    fa_rt_stream st = gpu_of(ctx)->stream;
    void *all[] = {cb->bits, cb->row_ptr, cb->col, cb->cls, cb->dsum, cb->dq_accum};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i)
        if (all[i])
            FA_RT(FreeAsync)(all[i], st);
}

/* Device copies of block lists the context keeps (core/lists_cache.c): the mask's bits and the
 * lists' three arrays in one allocation. */
typedef struct gpu_lists {
    void *base;
    const void *bits, *row_ptr, *col, *cls;
} gpu_lists;

static size_t gpu_align16(size_t n)
{
    return (n + 15) & ~(size_t)15;
}

static fa_status gpu_lists_upload(fa_context *ctx, fa_block_lists *l, const fa_block_mask *m)
{
    gpu_state *s = gpu_of(ctx);
    fa_rt_capture_status cs;
    /* while the stream is captured, a copy would only land when the graph replays: the call uploads
     * its own (gpu_make_params), as a captured call must */
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
    gpu_lists *g = calloc(1, sizeof *g);
    if (!g)
        return FA_ERR_OUT_OF_MEMORY;
    GPU_TRY(ctx, FA_RT(SetDevice)(ctx->device));
    fa_rt_error e = FA_RT(Malloc)(&g->base, total ? total : 1);
    /* synchronous copies: the lists are complete before any stream's kernel can read them */
    for (int i = 0; i < 4 && e == FA_RT(Success); ++i)
        if (sizes[i])
            e = FA_RT(Memcpy)((char *)g->base + off[i], src[i], sizes[i], FA_RT(MemcpyHostToDevice));
    if (e != FA_RT(Success)) {
        if (g->base)
            FA_RT(Free)(g->base);
        free(g);
        return gpu_fail(ctx, e, "block lists: device copies");
    }
    g->bits = (char *)g->base + off[0];
    g->row_ptr = (char *)g->base + off[1];
    g->col = (char *)g->base + off[2];
    g->cls = (char *)g->base + off[3];
    l->device = g;
    return FA_SUCCESS;
}

static void gpu_lists_free(fa_context *ctx, fa_block_lists *l)
{
    gpu_lists *g = (gpu_lists *)l->device;
    if (!g)
        return;
    FA_RT(SetDevice)(ctx->device);
    FA_RT(Free)(g->base); /* waits for the kernels still reading them */
    free(g);
    l->device = NULL;
}

static fa_status gpu_make_params(fa_context *ctx, const fa_problem *p, fa_gpu_params *kp, gpu_buffers *cb)
{
    memset(kp, 0, sizeof *kp);
    memset(cb, 0, sizeof *cb);
    kp->q = gpu_tensor(&p->q);
    kp->k = gpu_tensor(&p->k);
    kp->v = gpu_tensor(&p->v);
    kp->o = gpu_tensor(&p->o);
    kp->lse = gpu_tensor(&p->lse);
    if (!p->has_lse)
        kp->lse.data = NULL;
    kp->dout = gpu_tensor(&p->dout);
    kp->dq = gpu_tensor(&p->dq);
    kp->dk = gpu_tensor(&p->dk);
    kp->dv = gpu_tensor(&p->dv);
    kp->batch = p->batch;
    kp->heads_q = p->heads_q;
    kp->heads_kv = p->heads_kv;
    kp->group = p->group;
    kp->d = p->d;
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
        const gpu_lists *g = (const gpu_lists *)l->device;
        if (g) { /* kept by the context */
            kp->bm_bits = g->bits;
            kp->bl_row_ptr = g->row_ptr;
            kp->bl_col = g->col;
            kp->bl_cls = g->cls;
        } else { /* this call's own, released after its kernels */
            if ((st = gpu_upload(ctx, l->bits, (size_t)(bm->heads * bm->rows * bm->cols), &cb->bits)) ||
                (st = gpu_upload(ctx, l->row_ptr, sizeof(int64_t) * (size_t)(l->heads * l->nq + 1), &cb->row_ptr)) ||
                (st = gpu_upload(ctx, l->col, sizeof(int32_t) * (size_t)l->nnz, &cb->col)) ||
                (st = gpu_upload(ctx, l->cls, (size_t)l->nnz, &cb->cls)))
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

/* One kernel family's entry for a chosen variant: returns the runtime's error as an int. */
typedef int (*gpu_launch_fn)(const fa_gpu_params *kp, const fa_problem *p, const fa_variant *v, void *stream);

static fa_status gpu_forward(fa_context *ctx, const fa_problem *p, const fa_variant *v, gpu_launch_fn launch)
{
    if (p->batch == 0 || p->seqlen_q == 0)
        return FA_SUCCESS;
    fa_gpu_params kp;
    gpu_buffers cb;
    GPU_TRY(ctx, FA_RT(SetDevice)(ctx->device));
    fa_status st = gpu_make_params(ctx, p, &kp, &cb);
    if (st == FA_SUCCESS) {
        fa_rt_error e = (fa_rt_error)launch(&kp, p, v, gpu_of(ctx)->stream);
        if (e != FA_RT(Success))
            st = gpu_fail(ctx, e, v->name);
    }
    gpu_release(ctx, &cb);
    return st;
}

/* dq_accum_floats: the fp32 dQ accumulator a non-deterministic kernel adds into (0: none). The
 * workspace always holds D and LSE log2(e), [heads_q][total_q] floats each. */
static fa_status gpu_backward(fa_context *ctx, const fa_problem *p, const fa_variant *v, int64_t dq_accum_floats,
                              gpu_launch_fn launch)
{
    fa_gpu_params kp;
    gpu_buffers cb;
    GPU_TRY(ctx, FA_RT(SetDevice)(ctx->device));
    fa_status st = gpu_make_params(ctx, p, &kp, &cb);
    if (st == FA_SUCCESS)
        st = gpu_upload(ctx, NULL, sizeof(float) * (size_t)(p->total_q * p->heads_q) * 2, &cb.dsum);
    if (st == FA_SUCCESS && dq_accum_floats > 0)
        st = gpu_upload(ctx, NULL, sizeof(float) * (size_t)dq_accum_floats, &cb.dq_accum);
    if (st == FA_SUCCESS && p->batch > 0) {
        kp.dsum = cb.dsum;
        kp.dq_accum = cb.dq_accum;
        if (kp.dq_accum)
            kp.lse2 = (float *)cb.dsum + p->total_q * p->heads_q;
        fa_rt_error e = (fa_rt_error)launch(&kp, p, v, gpu_of(ctx)->stream);
        if (e != FA_RT(Success))
            st = gpu_fail(ctx, e, v->name);
    }
    gpu_release(ctx, &cb);
    return st;
}

/* At least `bytes` of device memory for the kernels of this call on the context's stream, kept
 * for the next call (no allocation per call; a stream-ordered allocation would be returned to
 * the device at every synchronisation, and made again). A call on another stream than the
 * previous user's first waits for the device. */
static fa_status gpu_scratch(fa_context *ctx, size_t bytes, void **ptr)
{
    gpu_state *s = gpu_of(ctx);
    if (s->scratch && s->scratch_stream != s->stream) /* that stream may be gone: wait for the device */
        GPU_TRY(ctx, FA_RT(DeviceSynchronize)());
    if (bytes > s->scratch_bytes) {
        if (s->scratch) {
            GPU_TRY(ctx, FA_RT(StreamSynchronize)(s->stream));
            GPU_TRY(ctx, FA_RT(Free)(s->scratch));
            s->scratch = NULL;
            s->scratch_bytes = 0;
        }
        GPU_TRY(ctx, FA_RT(Malloc)(&s->scratch, bytes));
        s->scratch_bytes = bytes;
    }
    s->scratch_stream = s->stream;
    *ptr = s->scratch;
    return FA_SUCCESS;
}

static fa_status gpu_alloc(fa_context *ctx, size_t bytes, void **ptr)
{
    GPU_TRY(ctx, FA_RT(SetDevice)(ctx->device));
    GPU_TRY(ctx, FA_RT(Malloc)(ptr, bytes ? bytes : 1));
    return FA_SUCCESS;
}

static fa_status gpu_free(fa_context *ctx, void *ptr)
{
    GPU_TRY(ctx, FA_RT(SetDevice)(ctx->device));
    GPU_TRY(ctx, FA_RT(Free)(ptr));
    return FA_SUCCESS;
}

static fa_status gpu_copy(fa_context *ctx, void *dst, const void *src, size_t bytes, fa_copy_kind kind)
{
    const int kinds[] = {FA_RT(MemcpyHostToDevice), FA_RT(MemcpyDeviceToHost), FA_RT(MemcpyDeviceToDevice),
                         FA_RT(MemcpyHostToHost)};
    gpu_state *s = gpu_of(ctx);
    GPU_TRY(ctx, FA_RT(SetDevice)(ctx->device));
    GPU_TRY(ctx, FA_RT(MemcpyAsync)(dst, src, bytes, kinds[kind], s->stream));
    GPU_TRY(ctx, FA_RT(StreamSynchronize)(s->stream)); /* the helper's contract: done on return */
    return FA_SUCCESS;
}

/* The fault a device-checked fa_forward_kvcache recorded, as the error the host check would have
 * given (then the record is cleared); FA_SUCCESS when none. Waits for the device: the calls may
 * have run on a stream the context no longer uses. */
static fa_status gpu_report_fault(fa_context *ctx)
{
    gpu_state *s = gpu_of(ctx);
    long long f[FA_KV_FAULT_WORDS];
    GPU_TRY(ctx, FA_RT(SetDevice)(ctx->device));
    GPU_TRY(ctx, FA_RT(DeviceSynchronize)());
    GPU_TRY(ctx, FA_RT(Memcpy)(f, s->fault, sizeof f, FA_RT(MemcpyDeviceToHost)));
    s->fault_armed = 0;
    if (f[0] == FA_KV_FAULT_NONE)
        return FA_SUCCESS;
    GPU_TRY(ctx, FA_RT(Memset)(s->fault, 0, sizeof f));
    GPU_TRY(ctx, FA_RT(DeviceSynchronize)());
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

static fa_status gpu_sync(fa_context *ctx)
{
    GPU_TRY(ctx, FA_RT(StreamSynchronize)(gpu_of(ctx)->stream));
    return gpu_of(ctx)->fault_armed ? gpu_report_fault(ctx) : FA_SUCCESS;
}

static fa_status gpu_set_stream(fa_context *ctx, void *stream)
{
    gpu_state *s = gpu_of(ctx);
    s->stream = stream ? (fa_rt_stream)stream : s->own;
    return FA_SUCCESS;
}

/* Tiles of the core's plans and block-sparse lists: 64 x 64 for every kernel family of both
 * backends (each family's own tiles lie inside them or merge whole ones); M is the shared memory
 * one block may use (onchip_bytes). */
static void gpu_tile_limits(fa_tile_limits *out, int64_t onchip_bytes)
{
    out->onchip_bytes = onchip_bytes;
    out->min_block = FA_GPU_BLOCK;
    out->max_block_q = FA_GPU_BLOCK;
    out->max_block_k = FA_GPU_BLOCK;
    out->multiple = FA_GPU_BLOCK;
}

/* Bytes of the block-sparse device copies for tiles of `block` rows and keys. */
static int64_t gpu_mask_workspace(const fa_problem *p, int64_t block)
{
    if (!p->block_mask)
        return 0;
    const fa_block_mask *bm = p->block_mask;
    int64_t nq = (p->seqlen_q + block - 1) / block, nk = (p->seqlen_k + block - 1) / block;
    return bm->heads * bm->rows * bm->cols + bm->heads * (nq * 8 + nq * nk * 5);
}

#endif /* FA_GPU_HOST_H */
