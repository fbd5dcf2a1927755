/* launch_kv.c: fa_forward_kvcache on OpenCL: the parameter block (kernels/params.h's
 * fa_ocl_kv_param), every buffer bound as its cl_mem with the element offset in the block, and
 * the three kernels of decode.cl on the context's in-order queue: append (when new keys are
 * given), decode, combine (when the keys are split). q, k_cache and k_new have d channels, v_cache,
 * v_new and o d_v; decode.cl holds a row in private memory and no __local memory, so every pair of
 * head dims the core accepts (up to FA_MAX_HEAD_DIM_KVCACHE, MLA's 576 / 512) runs. */
#include "opencl_backend.h"

#include <string.h>

/* The cl_mem holding [ptr, ptr + bytes) and ptr's offset in elements of elem bytes. */
static fa_status bind(fa_context *ctx, const char *name, const void *ptr, size_t bytes, size_t elem, cl_mem *mem,
                      cl_long *off)
{
    ocl_state *s = ocl_state_of(ctx);
    *mem = s->dummy;
    *off = 0;
    if (!ptr)
        return FA_SUCCESS;
    const ocl_buffer *b = ocl_find_buffer(s, ptr, bytes ? bytes : elem);
    if (!b || ((uintptr_t)ptr - b->base) % elem)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG,
                        "%s: %p and its %zu bytes are not an aligned range inside one fa_malloc buffer of this context",
                        name, ptr, bytes);
    *mem = b->mem;
    *off = (cl_long)(((uintptr_t)ptr - b->base) / elem);
    return FA_SUCCESS;
}

/* A view's cl_mem; its four slots are offset and strides. n0, n1, n2: the extents of its first
 * three dimensions (batch or pages, rows, heads), d the channels. */
static fa_status bind_view(fa_context *ctx, const char *name, const fa_view *v, size_t elem, int64_t n0, int64_t n1,
                           int64_t n2, int64_t d, cl_long *slot, cl_mem *mem)
{
    slot[1] = v->sb;
    slot[2] = v->ss;
    slot[3] = v->sh;
    int64_t last = 0;
    if (n0 > 0 && n1 > 0 && n2 > 0 && d > 0)
        last = (n0 - 1) * v->sb + (n1 - 1) * v->ss + (n2 - 1) * v->sh + d - 1;
    return bind(ctx, name, v->data, (size_t)(last + 1) * elem, elem, mem, &slot[0]);
}

static fa_status set_args(fa_context *ctx, cl_kernel k, const char *name, int n, const void *const *vals,
                          const size_t *sizes)
{
    for (int i = 0; i < n; ++i)
        OCL_TRY(ctx, ocl_api.clSetKernelArg(k, (cl_uint)i, sizes[i], vals[i]), name);
    return FA_SUCCESS;
}

static fa_status enqueue(fa_context *ctx, cl_kernel k, const char *name, int64_t items, int64_t batch)
{
    const size_t group = 64;
    size_t global[2] = {(size_t)((items + (int64_t)group - 1) / (int64_t)group) * group, (size_t)batch};
    size_t local[2] = {group, 1};
    OCL_TRY(ctx, ocl_api.clEnqueueNDRangeKernel(ocl_state_of(ctx)->queue, k, 2, NULL, global, local, 0, NULL, NULL),
            name);
    return FA_SUCCESS;
}

/* Splits of each sequence's keys: the caller's (at most one per key), else enough work-items for the device's compute
 * units (64 rows each), at least 256 keys per split, at most 64 splits. */
static int64_t kv_splits(const ocl_state *s, const fa_kv_problem *kp)
{
    if (kp->num_splits > 0) /* at most one split per key */
        return kp->num_splits < kp->p.seqlen_k ? kp->num_splits : kp->p.seqlen_k > 1 ? kp->p.seqlen_k : 1;
    cl_uint units = 1;
    ocl_api.clGetDeviceInfo(s->device, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof units, &units, NULL);
    const int64_t rows = kp->p.batch * kp->p.heads_q * kp->p.seqlen_q, want = (64 * (int64_t)units + rows - 1) / rows;
    int64_t most = (kp->p.seqlen_k + 255) / 256;
    most = most < 1 ? 1 : most > 64 ? 64 : most;
    return want < 1 ? 1 : want < most ? want : most;
}

fa_status ocl_forward_kvcache(fa_context *ctx, const fa_kv_problem *kp)
{
    const fa_problem *p = &kp->p;
    if (p->batch == 0)
        return FA_SUCCESS;
    if (p->out_dtype != p->dtype)
        return FA_ERROR(ctx, FA_ERR_UNSUPPORTED, "fa_forward_kvcache on opencl: o must have q's dtype (no fp32 output)");
    ocl_state *s = ocl_state_of(ctx);
    ocl_program *pr;
    fa_status st = ocl_get_kv_program(ctx, p->dtype, p->d, p->d_v, fa_score_mod_active(p->mod), p->sink != NULL, &pr);
    if (st != FA_SUCCESS)
        return st;
    cl_long prm[FA_KV_COUNT];
    memset(prm, 0, sizeof prm);
    prm[FA_KV_BATCH] = p->batch;
    prm[FA_KV_SEQLEN_NEW] = p->seqlen_q;
    prm[FA_KV_SEQLEN_KNEW] = kp->seqlen_knew;
    prm[FA_KV_HEADS_Q] = p->heads_q;
    prm[FA_KV_HEADS_KV] = p->heads_kv;
    prm[FA_KV_GROUP] = p->group;
    prm[FA_KV_PAGED] = kp->paged;
    prm[FA_KV_PAGE_SIZE] = kp->page_size;
    prm[FA_KV_BT_STRIDE] = kp->block_table_stride;
    prm[FA_KV_SEQLEN_CACHE] = kp->seqlen_cache;
    prm[FA_KV_HAS_SEQLENS] = kp->cache_seqlens != NULL;
    prm[FA_KV_HAS_BIDX] = kp->batch_idx != NULL;
    prm[FA_KV_HAS_LEFTPAD] = kp->cache_leftpad != NULL;
    prm[FA_KV_CAUSAL] = p->causal;
    prm[FA_KV_WINDOW_LEFT] = p->window_left;
    prm[FA_KV_WINDOW_RIGHT] = p->window_right;
    prm[FA_KV_HAS_LSE] = p->has_lse;
    prm[FA_KV_ROTARY_DIM] = kp->rotary ? kp->rotary_dim : 0;
    prm[FA_KV_ROTARY_INTERLEAVED] = kp->rotary_interleaved;
    prm[FA_KV_COS_STRIDE] = kp->cos_stride;
    prm[FA_KV_SIN_STRIDE] = kp->sin_stride;
    const int64_t splits = p->seqlen_q > 0 ? kv_splits(s, kp) : 1;
    prm[FA_KV_SPLITS] = splits;
    _Static_assert(sizeof(fa_score_mod) <= sizeof(cl_long) * (FA_KV_MOD_END - FA_KV_MOD), "fa_score_mod fits its slots");
    memcpy(&prm[FA_KV_MOD], &p->mod, sizeof p->mod);

    /* the buffers: the int32 arrays share one kernel argument only if they share a buffer, so
     * each is bound on its own and the kernels read them through one pointer per array kind */
    const size_t el = fa_dtype_size(p->dtype);
    const int64_t nb = kp->paged ? kp->num_pages : kp->batch_cache, rows = kp->paged ? kp->page_size : kp->seqlen_cache;
    cl_mem mq, mo, ml, mkc, mvc, mkn, mvn, mcs, mbt, mbi, mlp, mcos, msin, mal, msink;
    cl_long *t = &prm[FA_KV_TENSORS];
    if ((st = bind_view(ctx, "q", &p->q, el, p->batch, p->seqlen_q, p->heads_q, p->d, t + 4 * FA_KT_Q, &mq)) ||
        (st = bind_view(ctx, "o", &p->o, el, p->batch, p->seqlen_q, p->heads_q, p->d_v, t + 4 * FA_KT_O, &mo)) ||
        (st = bind_view(ctx, "lse", p->has_lse ? &p->lse : &(fa_view){0}, sizeof(float), p->batch, p->seqlen_q,
                        p->heads_q, 1, t + 4 * FA_KT_LSE, &ml)) ||
        (st = bind_view(ctx, "k_cache", &kp->k_cache, el, nb, rows, p->heads_kv, p->d, t + 4 * FA_KT_KC, &mkc)) ||
        (st = bind_view(ctx, "v_cache", &kp->v_cache, el, nb, rows, p->heads_kv, p->d_v, t + 4 * FA_KT_VC, &mvc)) ||
        (st = bind_view(ctx, "k_new", kp->has_new ? &kp->k_new : &(fa_view){0}, el, p->batch, kp->seqlen_knew,
                        p->heads_kv, p->d, t + 4 * FA_KT_KN, &mkn)) ||
        (st = bind_view(ctx, "v_new", kp->has_new ? &kp->v_new : &(fa_view){0}, el, p->batch, kp->seqlen_knew,
                        p->heads_kv, p->d_v, t + 4 * FA_KT_VN, &mvn)) ||
        (st = bind(ctx, "cache_seqlens", kp->cache_seqlens, sizeof(int32_t) * (size_t)p->batch, sizeof(int32_t), &mcs,
                   &prm[FA_KV_CS_OFF])) ||
        (st = bind(ctx, "block_table", kp->paged ? kp->block_table : NULL,
                   sizeof(int32_t) * (size_t)(p->batch * kp->block_table_stride), sizeof(int32_t), &mbt,
                   &prm[FA_KV_BT_OFF])) ||
        (st = bind(ctx, "cache_batch_idx", kp->batch_idx, sizeof(int32_t) * (size_t)p->batch, sizeof(int32_t), &mbi,
                   &prm[FA_KV_BI_OFF])) ||
        (st = bind(ctx, "cache_leftpad", kp->cache_leftpad, sizeof(int32_t) * (size_t)p->batch, sizeof(int32_t), &mlp,
                   &prm[FA_KV_LP_OFF])) ||
        (st = bind(ctx, "rotary_cos", kp->rotary ? kp->rotary_cos : NULL,
                   el * (size_t)((kp->seqlen_ro - 1) * kp->cos_stride + kp->rotary_dim / 2), el, &mcos,
                   &prm[FA_KV_COS_OFF])) ||
        (st = bind(ctx, "rotary_sin", kp->rotary ? kp->rotary_sin : NULL,
                   el * (size_t)((kp->seqlen_ro - 1) * kp->sin_stride + kp->rotary_dim / 2), el, &msin,
                   &prm[FA_KV_SIN_OFF])))
        return st;
    int64_t slopes = p->mod.alibi_stride ? (p->batch - 1) * p->mod.alibi_stride + p->heads_q : p->heads_q;
    if ((st = bind(ctx, "alibi_slopes", p->alibi_slopes, sizeof(float) * (size_t)slopes, sizeof(float), &mal,
                   &prm[FA_KV_ALIBI_OFF])) ||
        (st = bind(ctx, "learnable_sink", p->sink, sizeof(float) * (size_t)p->heads_q, sizeof(float), &msink,
                   &prm[FA_KV_SINK_OFF])))
        return st;
    /* the int32 arrays reach the kernels as one argument: they must live in one buffer, else they
     * are copied side by side into a temporary one */
    cl_mem ints = mcs != s->dummy ? mcs : mbt != s->dummy ? mbt : mbi != s->dummy ? mbi : mlp;
    cl_mem extra = NULL;
    if ((mbt != s->dummy && mbt != ints) || (mbi != s->dummy && mbi != ints) || (mlp != s->dummy && mlp != ints)) {
        /* gather the four arrays into one temporary buffer */
        int64_t n_cs = kp->cache_seqlens ? p->batch : 0, n_bt = kp->paged ? p->batch * kp->block_table_stride : 0;
        int64_t n_bi = kp->batch_idx ? p->batch : 0, n_lp = kp->cache_leftpad ? p->batch : 0;
        const int64_t n = n_cs + n_bt + n_bi + n_lp;
        cl_int e;
        extra = ocl_api.clCreateBuffer(s->context, CL_MEM_READ_WRITE, sizeof(int32_t) * (size_t)(n > 0 ? n : 1), NULL,
                                       &e);
        if (e != CL_SUCCESS)
            return OCL_FAIL(ctx, e, "clCreateBuffer(int32 arrays)");
        const cl_mem src[4] = {mcs, mbt, mbi, mlp};
        const int slot[4] = {FA_KV_CS_OFF, FA_KV_BT_OFF, FA_KV_BI_OFF, FA_KV_LP_OFF};
        const int64_t count[4] = {n_cs, n_bt, n_bi, n_lp};
        int64_t at = 0;
        for (int i = 0; i < 4 && e == CL_SUCCESS; ++i) {
            if (!count[i])
                continue;
            e = ocl_api.clEnqueueCopyBuffer(s->queue, src[i], extra, sizeof(int32_t) * (size_t)prm[slot[i]],
                                    sizeof(int32_t) * (size_t)at, sizeof(int32_t) * (size_t)count[i], 0, NULL, NULL);
            prm[slot[i]] = at;
            at += count[i];
        }
        if (e != CL_SUCCESS) {
            ocl_api.clReleaseMemObject(extra);
            return OCL_FAIL(ctx, e, "clEnqueueCopyBuffer(int32 arrays)");
        }
        ints = extra;
    }
    cl_int e;
    cl_mem params = ocl_api.clCreateBuffer(s->context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof prm, prm, &e);
    cl_mem partial = NULL;
    if (e == CL_SUCCESS && splits > 1)
        partial = ocl_api.clCreateBuffer(s->context, CL_MEM_READ_WRITE,
                                 sizeof(float) * (size_t)(p->total_q * p->heads_q * splits * (p->d_v + 1)), NULL, &e);
    if (e != CL_SUCCESS)
        st = OCL_FAIL(ctx, e, "clCreateBuffer(kv cache parameters)");
    cl_mem part = partial ? partial : s->dummy;
    if (st == FA_SUCCESS && kp->has_new && kp->seqlen_knew > 0) {
        const void *v[] = {&params, &mkn, &mvn, &mkc, &mvc, &ints, &mcos, &msin};
        size_t sz[8];
        for (int i = 0; i < 8; ++i)
            sz[i] = sizeof(cl_mem);
        if ((st = set_args(ctx, pr->kv_append, "clSetKernelArg(fa_kv_append)", 8, v, sz)) == FA_SUCCESS)
            st = enqueue(ctx, pr->kv_append, "clEnqueueNDRangeKernel(fa_kv_append)",
                         kp->seqlen_knew * p->heads_kv * (p->d > p->d_v ? p->d : p->d_v), p->batch);
    }
    if (st == FA_SUCCESS && p->seqlen_q > 0) {
        float scale = p->scale;
        const void *v[] = {&params, &scale, &mq, &mkc, &mvc, &mo, &ml, &part, &ints, &mcos, &msin, &mal, &msink};
        size_t sz[13];
        for (int i = 0; i < 13; ++i)
            sz[i] = i == 1 ? sizeof(float) : sizeof(cl_mem);
        if ((st = set_args(ctx, pr->kv_decode, "clSetKernelArg(fa_kv_decode)", 13, v, sz)) == FA_SUCCESS)
            st = enqueue(ctx, pr->kv_decode, "clEnqueueNDRangeKernel(fa_kv_decode)", p->heads_q * p->seqlen_q * splits,
                         p->batch);
        if (st == FA_SUCCESS && splits > 1) {
            const void *vc[] = {&params, &part, &mo, &ml, &msink};
            const size_t szc[] = {sizeof(cl_mem), sizeof(cl_mem), sizeof(cl_mem), sizeof(cl_mem), sizeof(cl_mem)};
            if ((st = set_args(ctx, pr->kv_combine, "clSetKernelArg(fa_kv_combine)", 5, vc, szc)) == FA_SUCCESS)
                st = enqueue(ctx, pr->kv_combine, "clEnqueueNDRangeKernel(fa_kv_combine)",
                             p->heads_q * p->seqlen_q * p->d_v, p->batch);
        }
    }
    /* OpenCL keeps the released buffers alive until the queued kernels ran */
    if (params)
        ocl_api.clReleaseMemObject(params);
    if (partial)
        ocl_api.clReleaseMemObject(partial);
    if (extra)
        ocl_api.clReleaseMemObject(extra);
    if (st == FA_SUCCESS)
        OCL_TRY(ctx, ocl_api.clFlush(s->queue), "clFlush");
    return st;
}
