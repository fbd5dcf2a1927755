/* backend.c: the CUDA backend's table: devices, streams, device memory, the chooser (which kernel
 * family and instance runs a problem, or why none does) and the launch glue. Two kernel families:
 * sm80/ (tensor cores, cc >= 8.0, fp16/bf16) and the portable SIMT kernels of backends/portable/
 * (any dtype, any head dim up to 256, any compute capability), which run what sm80 does not cover,
 * or everything when FLASHATTN_CUDA_KERNELS=portable. Every CUDA call is checked; errors reach the
 * caller as FA_ERR_BACKEND with the CUDA error's name. */
#include "internal.h"
#include "params.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct cuda_state {
    cudaStream_t own, stream;
    struct cudaDeviceProp prop;
    int force_portable; /* FLASHATTN_CUDA_KERNELS=portable, read when the context opens */
} cuda_state;

/* fa_variant.kernel: sm80 ids are dpad * 2 + aligned; portable ids carry this bit and the bucket */
#define KERNEL_PORTABLE 0x100000

static int variant_is_portable(const fa_variant *v)
{
    return (v->kernel & KERNEL_PORTABLE) != 0;
}

static cuda_state *state(const fa_context *ctx)
{
    return (cuda_state *)ctx->priv;
}

static fa_status cuda_fail(fa_context *ctx, cudaError_t e, const char *what)
{
    fa_status st = e == cudaErrorMemoryAllocation ? FA_ERR_OUT_OF_MEMORY : FA_ERR_BACKEND;
    return FA_ERROR(ctx, st, "%s: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

#define CUDA_TRY(ctx, call)                                                                                        \
    do {                                                                                                           \
        cudaError_t e_ = (call);                                                                                   \
        if (e_ != cudaSuccess)                                                                                     \
            return cuda_fail((ctx), e_, #call);                                                                    \
    } while (0)

static fa_status cuda_device_count(int *count)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError(); /* no driver or no device: zero devices, not an error */
        n = 0;
    }
    *count = n;
    return FA_SUCCESS;
}

static fa_status cuda_device_name(int device, char *buf, size_t len)
{
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, device) != cudaSuccess)
        return FA_ERR_BACKEND;
    snprintf(buf, len, "%s (sm_%d%d, %d SMs, %.0f GiB)", prop.name, prop.major, prop.minor, prop.multiProcessorCount,
             (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
    return FA_SUCCESS;
}

static void cuda_capabilities(fa_capabilities *caps)
{
    caps->dtypes = (1u << FA_DTYPE_F32) | (1u << FA_DTYPE_F16) | (1u << FA_DTYPE_BF16);
    caps->max_head_dim = 256; /* every d in 1..256: sm80 pads, the portable kernels take d exactly */
    caps->head_dims[0] = 0;
    caps->features = FA_FEATURE_CAUSAL | FA_FEATURE_WINDOW | FA_FEATURE_VARLEN | FA_FEATURE_GQA |
                     FA_FEATURE_DROPOUT | FA_FEATURE_BLOCK_SPARSE | FA_FEATURE_LSE | FA_FEATURE_DETERMINISTIC |
                     FA_FEATURE_BACKWARD | FA_FEATURE_STRIDES;
    snprintf(caps->notes, sizeof caps->notes,
             "sm80 mma.sync path (cc >= 8.0, fp16/bf16, backward d <= 128; fused atomic-dQ backward or "
             "deterministic kernels); portable SIMT kernels for the rest (fp32, backward d > 128, cc < 8.0; "
             "always deterministic), or for all with FLASHATTN_CUDA_KERNELS=portable");
}

static fa_status cuda_open(fa_context *ctx, int device)
{
    cuda_state *s = calloc(1, sizeof *s);
    if (!s)
        return FA_ERR_OUT_OF_MEMORY;
    cudaError_t e = cudaSetDevice(device);
    if (e == cudaSuccess)
        e = cudaGetDeviceProperties(&s->prop, device);
    if (e == cudaSuccess)
        e = cudaStreamCreateWithFlags(&s->own, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        free(s);
        return FA_ERR_BACKEND;
    }
    s->stream = s->own;
    /* FLASHATTN_CUDA_KERNELS=portable runs every call on the portable SIMT kernels (testing them on
     * a GPU the sm80 path covers, comparing the two); unset or any other value: the chooser's pick */
    const char *kernels = getenv("FLASHATTN_CUDA_KERNELS");
    s->force_portable = kernels && strcmp(kernels, "portable") == 0;
    ctx->priv = s;
    return FA_SUCCESS;
}

static void cuda_close(fa_context *ctx)
{
    cuda_state *s = state(ctx);
    if (!s)
        return;
    cudaSetDevice(ctx->device);
    cudaStreamSynchronize(s->own);
    cudaStreamDestroy(s->own);
    free(s);
    ctx->priv = NULL;
}

/* The core builds block-sparse lists (and plans) at the 64 x 64 granularity every sm80 kernel
 * and every portable kernel walks (the portable forward's tiles are 64 x 64; its backward's row
 * blocks divide 64): the forward's 128-row query tiles merge the lists of their two 64-row halves, the fused
 * backward's 128-key blocks test both 64-key halves. The kernels' own tile shapes per head dim,
 * with the reason for each, are in sm80/tiles.h. M is the shared memory a block may opt into. */
static void cuda_tile_limits(const fa_context *ctx, const fa_problem *p, fa_tile_limits *out)
{
    (void)p;
    out->onchip_bytes = (int64_t)state(ctx)->prop.sharedMemPerBlockOptin;
    out->min_block = FA_SM80_BLOCK;
    out->max_block_q = FA_SM80_BLOCK;
    out->max_block_k = FA_SM80_BLOCK;
    out->multiple = FA_SM80_BLOCK;
}

static int view_aligned(const fa_view *v)
{
    return v->data == NULL || ((uintptr_t)v->data % 16 == 0 && v->sb % 8 == 0 && v->ss % 8 == 0 && v->sh % 8 == 0);
}

/* Whether the sm80 tensor-core path has a kernel for p on this device: cc >= 8.0, fp16 or bf16,
 * an instance for the padded head dim (backward d <= 128). Everything else is the portable
 * family's, as is everything under FLASHATTN_CUDA_KERNELS=portable. */
static int sm80_covers(const cuda_state *s, const fa_problem *p)
{
    int dpad = (int)((p->d + 31) / 32 * 32);
    return !s->force_portable && s->prop.major >= 8 && (p->dtype == FA_DTYPE_F16 || p->dtype == FA_DTYPE_BF16) &&
           fa_sm80_has_instance((int)p->dtype, dpad, p->backward);
}

static fa_status cuda_choose(const fa_context *ctx, const fa_problem *p, fa_variant *out)
{
    if (!sm80_covers(state(ctx), p)) {
        int bucket = fa_portable_bucket(p->d);
        if (bucket == 0)
            return FA_ERROR((fa_context *)ctx, FA_ERR_UNSUPPORTED, "cuda: no kernel for head dim %lld (1..256)",
                            (long long)p->d);
        snprintf(out->name, sizeof out->name, "portable-%s-%s-d%d%s", p->backward ? "bwd" : "fwd",
                 fa_dtype_name(p->dtype), bucket, p->backward ? "-deterministic" : "");
        out->kernel = KERNEL_PORTABLE | bucket;
        return FA_SUCCESS;
    }
    int dpad = (int)((p->d + 31) / 32 * 32);
    int aligned = p->d % 8 == 0 && view_aligned(&p->q) && view_aligned(&p->k) && view_aligned(&p->v);
    if (p->backward)
        aligned = aligned && view_aligned(&p->dout);
    snprintf(out->name, sizeof out->name, "sm80-%s-%s-d%d-%s%s", p->backward ? "bwd" : "fwd", fa_dtype_name(p->dtype),
             dpad, aligned ? "cpasync" : "ldg", p->backward && p->deterministic ? "-deterministic" : "");
    out->kernel = dpad * 2 + aligned;
    return FA_SUCCESS;
}

static fa_cuda_tensor tensor_of(const fa_view *v)
{
    fa_cuda_tensor t = {v->data, v->sb, v->ss, v->sh};
    return t;
}

/* Device copies of what the kernels read besides the tensors: block-mask bits and lists. */
typedef struct call_buffers {
    void *bits, *row_ptr, *col, *cls, *dsum, *dq_accum;
} call_buffers;

static fa_status upload(fa_context *ctx, const void *src, size_t bytes, void **dst)
{
    cuda_state *s = state(ctx);
    CUDA_TRY(ctx, cudaMallocAsync(dst, bytes ? bytes : 1, s->stream));
    if (bytes && src)
        CUDA_TRY(ctx, cudaMemcpyAsync(*dst, src, bytes, cudaMemcpyHostToDevice, s->stream));
    return FA_SUCCESS;
}

static void release(fa_context *ctx, call_buffers *cb)
{
    cudaStream_t st = state(ctx)->stream;
    void *all[] = {cb->bits, cb->row_ptr, cb->col, cb->cls, cb->dsum, cb->dq_accum};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i)
        if (all[i])
            cudaFreeAsync(all[i], st);
}

static fa_status make_params(fa_context *ctx, const fa_problem *p, fa_cuda_params *kp, call_buffers *cb)
{
    memset(kp, 0, sizeof *kp);
    memset(cb, 0, sizeof *cb);
    kp->q = tensor_of(&p->q);
    kp->k = tensor_of(&p->k);
    kp->v = tensor_of(&p->v);
    kp->o = tensor_of(&p->o);
    kp->lse = tensor_of(&p->lse);
    if (!p->has_lse)
        kp->lse.data = NULL;
    kp->dout = tensor_of(&p->dout);
    kp->dq = tensor_of(&p->dq);
    kp->dk = tensor_of(&p->dk);
    kp->dv = tensor_of(&p->dv);
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
    kp->window_left = p->window_left;
    kp->window_right = p->window_right;
    kp->dropout_threshold = p->dropout_threshold;
    kp->dropout_scale = p->dropout_scale;
    kp->seed = p->seed;
    kp->offset = p->offset;
    fa_status st = FA_SUCCESS;
    if (p->block_mask && p->lists) {
        const fa_block_mask *bm = p->block_mask;
        const fa_block_lists *l = p->lists;
        if ((st = upload(ctx, bm->bits, (size_t)(bm->heads * bm->rows * bm->cols), &cb->bits)) ||
            (st = upload(ctx, l->row_ptr, sizeof(int64_t) * (size_t)(l->heads * l->nq + 1), &cb->row_ptr)) ||
            (st = upload(ctx, l->col, sizeof(int32_t) * (size_t)l->nnz, &cb->col)) ||
            (st = upload(ctx, l->cls, (size_t)l->nnz, &cb->cls)))
            return st;
        kp->bm_bits = cb->bits;
        kp->bm_heads = bm->heads;
        kp->bm_rows = bm->rows;
        kp->bm_cols = bm->cols;
        kp->bm_bq = bm->block_q;
        kp->bm_bk = bm->block_k;
        kp->bl_row_ptr = cb->row_ptr;
        kp->bl_col = cb->col;
        kp->bl_cls = cb->cls;
        kp->bl_heads = l->heads;
        kp->bl_nq = l->nq;
    }
    return st;
}

static fa_status cuda_forward(fa_context *ctx, const fa_problem *p, const fa_variant *v)
{
    if (p->batch == 0 || p->seqlen_q == 0)
        return FA_SUCCESS;
    fa_cuda_params kp;
    call_buffers cb;
    CUDA_TRY(ctx, cudaSetDevice(ctx->device));
    fa_status st = make_params(ctx, p, &kp, &cb);
    if (st == FA_SUCCESS) {
        cudaError_t e = variant_is_portable(v)
                            ? (cudaError_t)fa_portable_forward(&kp, (int)p->dtype, v->kernel & ~KERNEL_PORTABLE,
                                                               state(ctx)->stream)
                            : (cudaError_t)fa_sm80_forward(&kp, (int)p->dtype, v->kernel / 2, v->kernel & 1,
                                                           state(ctx)->stream);
        if (e != cudaSuccess)
            st = cuda_fail(ctx, e, v->name);
    }
    release(ctx, &cb);
    return st;
}

static fa_status cuda_backward(fa_context *ctx, const fa_problem *p, const fa_variant *v)
{
    fa_cuda_params kp;
    call_buffers cb;
    CUDA_TRY(ctx, cudaSetDevice(ctx->device));
    fa_status st = make_params(ctx, p, &kp, &cb);
    if (st == FA_SUCCESS)
        st = upload(ctx, NULL, sizeof(float) * (size_t)(p->total_q * p->heads_q) * 2, &cb.dsum); /* D, LSE log2 e */
    if (st == FA_SUCCESS && !p->deterministic && !variant_is_portable(v)) /* fp32 dQ for the fused kernel's atomics */
        st = upload(ctx, NULL, sizeof(float) * (size_t)(p->total_q * p->heads_q * (v->kernel / 2)), &cb.dq_accum);
    if (st == FA_SUCCESS && p->batch > 0) {
        kp.dsum = cb.dsum;
        kp.dq_accum = cb.dq_accum;
        if (kp.dq_accum)
            kp.lse2 = (float *)cb.dsum + p->total_q * p->heads_q;
        cudaError_t e = variant_is_portable(v)
                            ? (cudaError_t)fa_portable_backward(&kp, (int)p->dtype, v->kernel & ~KERNEL_PORTABLE,
                                                                state(ctx)->stream)
                            : (cudaError_t)fa_sm80_backward(&kp, (int)p->dtype, v->kernel / 2, v->kernel & 1,
                                                            state(ctx)->stream);
        if (e != cudaSuccess)
            st = cuda_fail(ctx, e, v->name);
    }
    release(ctx, &cb);
    return st;
}

static int64_t cuda_workspace(const fa_context *ctx, const fa_problem *p)
{
    int64_t bytes = 0;
    if (p->backward) {
        bytes += p->total_q * p->heads_q * 8; /* D and LSE log2(e) */
        if (!p->deterministic && sm80_covers(state(ctx), p)) /* fp32 dQ accumulator at the padded head dim */
            bytes += p->total_q * p->heads_q * ((p->d + 31) / 32 * 32) * 4;
    }
    if (p->block_mask) {
        const fa_block_mask *bm = p->block_mask;
        int64_t nq = (p->seqlen_q + FA_SM80_BLOCK - 1) / FA_SM80_BLOCK, nk = (p->seqlen_k + FA_SM80_BLOCK - 1) / FA_SM80_BLOCK;
        bytes += bm->heads * bm->rows * bm->cols + bm->heads * (nq * 8 + nq * nk * 5);
    }
    return bytes;
}

static fa_status cuda_alloc(fa_context *ctx, size_t bytes, void **ptr)
{
    CUDA_TRY(ctx, cudaSetDevice(ctx->device));
    CUDA_TRY(ctx, cudaMalloc(ptr, bytes ? bytes : 1));
    return FA_SUCCESS;
}

static fa_status cuda_free(fa_context *ctx, void *ptr)
{
    CUDA_TRY(ctx, cudaSetDevice(ctx->device));
    CUDA_TRY(ctx, cudaFree(ptr));
    return FA_SUCCESS;
}

static fa_status cuda_copy(fa_context *ctx, void *dst, const void *src, size_t bytes, fa_copy_kind kind)
{
    static const enum cudaMemcpyKind kinds[] = {cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost,
                                                cudaMemcpyDeviceToDevice, cudaMemcpyHostToHost};
    cuda_state *s = state(ctx);
    CUDA_TRY(ctx, cudaSetDevice(ctx->device));
    CUDA_TRY(ctx, cudaMemcpyAsync(dst, src, bytes, kinds[kind], s->stream));
    CUDA_TRY(ctx, cudaStreamSynchronize(s->stream)); /* the helper's contract: done on return */
    return FA_SUCCESS;
}

static fa_status cuda_sync(fa_context *ctx)
{
    CUDA_TRY(ctx, cudaStreamSynchronize(state(ctx)->stream));
    return FA_SUCCESS;
}

static fa_status cuda_set_stream(fa_context *ctx, void *stream)
{
    state(ctx)->stream = stream ? (cudaStream_t)stream : state(ctx)->own;
    return FA_SUCCESS;
}

const fa_backend fa_backend_cuda = {
    .name = "cuda",
    .is_gpu = 1,
    .device_count = cuda_device_count,
    .device_name = cuda_device_name,
    .capabilities = cuda_capabilities,
    .open = cuda_open,
    .close = cuda_close,
    .tile_limits = cuda_tile_limits,
    .choose = cuda_choose,
    .forward = cuda_forward,
    .backward = cuda_backward,
    .workspace = cuda_workspace,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .copy = cuda_copy,
    .sync = cuda_sync,
    .set_stream = cuda_set_stream,
    .num_threads = NULL, // optional
};
