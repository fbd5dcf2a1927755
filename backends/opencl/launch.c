/* launch.c: one call's launches. The parameter block (kernels/params.h) and the block-sparse
 * lists go to temporary buffers, every tensor is bound as its cl_mem and element offset, and the
 * kernels run on the context's in-order queue: the forward as one kernel, the backward as D
 * (fa_backward_dsum), then dK / dV, then dQ, then dsink where it is asked for. */
#include "opencl_backend.h"

#include <string.h>

/* What one call binds besides the tensors: the parameter block and the block-sparse data, as
 * temporary buffers released after the enqueue (OpenCL keeps them alive until the kernels ran). */
typedef struct call_args {
    cl_long prm[FA_P_COUNT];
    cl_mem mem[FA_T_COUNT];
    cl_mem cu_q, cu_k;
    cl_mem alibi; /* the slopes' buffer (the user's memory) or the dummy */
    cl_mem sink, dsink; /* the learnable sink's and dsink's buffers (the user's memory) or the dummy */
    cl_mem params, bits, row_ptr, col, cls, dsum;
} call_args;

static void call_release(call_args *a)
{
    cl_mem all[] = {a->params, a->bits, a->row_ptr, a->col, a->cls, a->dsum};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i)
        if (all[i])
            ocl_api.clReleaseMemObject(all[i]);
}

/* A buffer holding bytes from src (or uninitialised when src is NULL); an empty one gets 4 bytes,
 * since OpenCL has no zero-sized buffers (the kernels never read them). */
static fa_status upload(fa_context *ctx, const void *src, size_t bytes, cl_mem *out)
{
    cl_int e;
    if (src && bytes)
        *out = ocl_api.clCreateBuffer(ocl_state_of(ctx)->context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bytes,
                                      (void *)src, &e);
    else
        *out = ocl_api.clCreateBuffer(ocl_state_of(ctx)->context, CL_MEM_READ_WRITE, bytes ? bytes : 4, NULL, &e);
    if (e != CL_SUCCESS)
        return OCL_FAIL(ctx, e, "clCreateBuffer");
    return FA_SUCCESS;
}

/* A tensor's cl_mem and element offset; the whole extent it addresses must lie in the buffer. */
static fa_status bind_view(fa_context *ctx, const fa_problem *p, const fa_view *v, int t, size_t elem, int64_t rows,
                           int64_t heads, int64_t cols, call_args *a)
{
    ocl_state *s = ocl_state_of(ctx);
    cl_long *slot = &a->prm[FA_P_TENSORS + 4 * t];
    slot[1] = v->sb;
    slot[2] = v->ss;
    slot[3] = v->sh;
    a->mem[t] = s->dummy;
    slot[0] = 0;
    if (!v->data)
        return FA_SUCCESS;
    int64_t batches = p->varlen ? 1 : p->batch;
    int64_t last = (batches - 1) * v->sb + (rows - 1) * v->ss + (heads - 1) * v->sh + cols - 1;
    if (batches < 1 || rows < 1 || heads < 1)
        last = 0;
    const ocl_buffer *b = ocl_find_buffer(s, v->data, (size_t)(last + 1) * elem);
    static const char *const names[] = {"q", "k", "v", "o", "lse", "dout", "dq", "dk", "dv"};
    if (!b)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG,
                        "%s: %p and its %lld elements are not inside one fa_malloc buffer of this context", names[t],
                        v->data, (long long)(last + 1));
    size_t off = (uintptr_t)v->data - b->base;
    if (off % elem)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "%s: data is not aligned to its %zu-byte elements", names[t], elem);
    slot[0] = (cl_long)(off / elem);
    a->mem[t] = b->mem;
    return FA_SUCCESS;
}

static fa_status bind_cu(fa_context *ctx, const fa_problem *p, const int32_t *cu, cl_mem *mem, cl_long *off)
{
    ocl_state *s = ocl_state_of(ctx);
    *mem = s->dummy;
    *off = 0;
    if (!p->varlen)
        return FA_SUCCESS;
    const ocl_buffer *b = ocl_find_buffer(s, cu, sizeof(int32_t) * (size_t)(p->batch + 1));
    if (!b || ((uintptr_t)cu - b->base) % sizeof(int32_t))
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "cu_seqlens: %p is not an aligned pointer into an fa_malloc buffer",
                        (const void *)cu);
    *mem = b->mem;
    *off = (cl_long)(((uintptr_t)cu - b->base) / sizeof(int32_t));
    return FA_SUCCESS;
}

/* The ALiBi slopes' cl_mem and element offset: slopes[b * stride + h] for every sequence b and
 * query head h must lie in one buffer (the core validated the extent's arithmetic). */
static fa_status bind_alibi(fa_context *ctx, const fa_problem *p, call_args *a)
{
    ocl_state *s = ocl_state_of(ctx);
    a->alibi = s->dummy;
    if (!p->alibi_slopes)
        return FA_SUCCESS;
    int64_t count = p->mod.alibi_stride ? (p->batch - 1) * p->mod.alibi_stride + p->heads_q : p->heads_q;
    if (p->batch < 1)
        count = p->heads_q;
    const ocl_buffer *b = ocl_find_buffer(s, p->alibi_slopes, sizeof(float) * (size_t)count);
    if (!b || ((uintptr_t)p->alibi_slopes - b->base) % sizeof(float))
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG,
                        "alibi_slopes: %p and its %lld floats are not an aligned range inside one fa_malloc buffer of "
                        "this context",
                        (const void *)p->alibi_slopes, (long long)count);
    a->alibi = b->mem;
    a->prm[FA_P_ALIBI_OFF] = (cl_long)(((uintptr_t)p->alibi_slopes - b->base) / sizeof(float));
    return FA_SUCCESS;
}

/* fp32 [heads_q] in the context's memory (the learnable sink, dsink): its cl_mem and element
 * offset; the dummy and 0 when ptr is NULL. */
static fa_status bind_heads(fa_context *ctx, const fa_problem *p, const char *name, const float *ptr, cl_mem *mem,
                            cl_long *off)
{
    ocl_state *s = ocl_state_of(ctx);
    *mem = s->dummy;
    *off = 0;
    if (!ptr)
        return FA_SUCCESS;
    const ocl_buffer *b = ocl_find_buffer(s, ptr, sizeof(float) * (size_t)p->heads_q);
    if (!b || ((uintptr_t)ptr - b->base) % sizeof(float))
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG,
                        "%s: %p and its %lld floats are not an aligned range inside one fa_malloc buffer of this "
                        "context",
                        name, (const void *)ptr, (long long)p->heads_q);
    *mem = b->mem;
    *off = (cl_long)(((uintptr_t)ptr - b->base) / sizeof(float));
    return FA_SUCCESS;
}

static fa_status prepare_args(fa_context *ctx, const fa_problem *p, call_args *a)
{
    memset(a, 0, sizeof *a);
    cl_long *q = a->prm;
    q[FA_P_BATCH] = p->batch;
    q[FA_P_HEADS_Q] = p->heads_q;
    q[FA_P_HEADS_KV] = p->heads_kv;
    q[FA_P_GROUP] = p->group;
    q[FA_P_SEQLEN_Q] = p->seqlen_q;
    q[FA_P_SEQLEN_K] = p->seqlen_k;
    q[FA_P_TOTAL_Q] = p->total_q;
    q[FA_P_VARLEN] = p->varlen;
    q[FA_P_CAUSAL] = p->causal;
    q[FA_P_WINDOW_LEFT] = p->window_left;
    q[FA_P_WINDOW_RIGHT] = p->window_right;
    q[FA_P_DROPOUT_THRESHOLD] = p->dropout_threshold;
    q[FA_P_SEED] = (cl_long)p->seed;
    q[FA_P_OFFSET] = (cl_long)p->offset;
    q[FA_P_HAS_LSE] = p->has_lse;
    /* the kernels read these bytes back as an fa_score_mod (host and device share the byte order,
     * as every tensor's bytes assume) */
    _Static_assert(sizeof(fa_score_mod) <= sizeof(cl_long) * (FA_P_MOD_END - FA_P_MOD), "fa_score_mod fits its slots");
    memcpy(&q[FA_P_MOD], &p->mod, sizeof p->mod);
    size_t el = fa_dtype_size(p->dtype);
    int64_t rq = p->varlen ? p->total_q : p->seqlen_q, rk = p->varlen ? p->total_k : p->seqlen_k;
    fa_status st;
    if ((st = bind_view(ctx, p, &p->q, FA_T_Q, el, rq, p->heads_q, p->d, a)) ||
        (st = bind_view(ctx, p, &p->k, FA_T_K, el, rk, p->heads_kv, p->d, a)) ||
        (st = bind_view(ctx, p, &p->v, FA_T_V, el, rk, p->heads_kv, p->d_v, a)) ||
        (st = bind_view(ctx, p, &p->o, FA_T_O, el, rq, p->heads_q, p->d_v, a)) ||
        (st = bind_view(ctx, p, p->has_lse || p->backward ? &p->lse : &(fa_view){0}, FA_T_LSE, sizeof(float), rq,
                        p->heads_q, 1, a)))
        return st;
    if (p->backward &&
        ((st = bind_view(ctx, p, &p->dout, FA_T_DO, el, rq, p->heads_q, p->d_v, a)) ||
         (st = bind_view(ctx, p, &p->dq, FA_T_DQ, el, rq, p->heads_q, p->d, a)) ||
         (st = bind_view(ctx, p, &p->dk, FA_T_DK, el, rk, p->heads_kv, p->d, a)) ||
         (st = bind_view(ctx, p, &p->dv, FA_T_DV, el, rk, p->heads_kv, p->d_v, a))))
        return st;
    if ((st = bind_cu(ctx, p, p->cu_q, &a->cu_q, &q[FA_P_CU_Q_OFF])) ||
        (st = bind_cu(ctx, p, p->cu_k, &a->cu_k, &q[FA_P_CU_K_OFF])) || (st = bind_alibi(ctx, p, a)) ||
        (st = bind_heads(ctx, p, "learnable_sink", p->sink, &a->sink, &q[FA_P_SINK_OFF])) ||
        (st = bind_heads(ctx, p, "dsink", p->backward ? p->dsink : NULL, &a->dsink, &q[FA_P_DSINK_OFF])))
        return st;
    if (p->block_mask && p->lists) {
        const fa_block_mask *bm = p->block_mask;
        const fa_block_lists *l = p->lists;
        q[FA_P_BLOCK_MASK] = 1;
        q[FA_P_BM_HEADS] = bm->heads;
        q[FA_P_BM_ROWS] = bm->rows;
        q[FA_P_BM_COLS] = bm->cols;
        q[FA_P_BM_BQ] = bm->block_q;
        q[FA_P_BM_BK] = bm->block_k;
        q[FA_P_BL_HEADS] = l->heads;
        q[FA_P_BL_NQ] = l->nq;
        if ((st = upload(ctx, bm->bits, (size_t)(bm->heads * bm->rows * bm->cols), &a->bits)) ||
            (st = upload(ctx, l->row_ptr, sizeof(int64_t) * (size_t)(l->heads * l->nq + 1), &a->row_ptr)) ||
            (st = upload(ctx, l->col, sizeof(int32_t) * (size_t)l->nnz, &a->col)) ||
            (st = upload(ctx, l->cls, (size_t)l->nnz, &a->cls)))
            return st;
    }
    return upload(ctx, a->prm, sizeof a->prm, &a->params);
}

static cl_mem or_dummy(const ocl_state *s, cl_mem m)
{
    return m ? m : s->dummy;
}

/* Sets a kernel's arguments in order; every value is a cl_mem or a float, as listed in `kinds`
 * ('m' or 'f'). */
static cl_int set_args(cl_kernel k, const char *kinds, const void *const *values)
{
    for (cl_uint i = 0; kinds[i]; ++i) {
        cl_int e = ocl_api.clSetKernelArg(k, i, kinds[i] == 'm' ? sizeof(cl_mem) : sizeof(float), values[i]);
        if (e != CL_SUCCESS)
            return e;
    }
    return CL_SUCCESS;
}

static fa_status launch(fa_context *ctx, cl_kernel k, const char *name, int64_t groups, int64_t group_size,
                        int64_t heads, int64_t batch)
{
    if (groups <= 0 || heads <= 0 || batch <= 0)
        return FA_SUCCESS;
    size_t global[3] = {(size_t)(groups * group_size), (size_t)heads, (size_t)batch};
    size_t local[3] = {(size_t)group_size, 1, 1};
    OCL_TRY(ctx, ocl_api.clEnqueueNDRangeKernel(ocl_state_of(ctx)->queue, k, 3, NULL, global, local, 0, NULL, NULL),
            name);
    return FA_SUCCESS;
}

fa_status ocl_forward(fa_context *ctx, const fa_problem *p, const fa_variant *v)
{
    if (p->batch == 0 || p->seqlen_q == 0)
        return FA_SUCCESS;
    ocl_state *s = ocl_state_of(ctx);
    ocl_program *pr;
    fa_status st = ocl_get_program(ctx, p, v->kernel, &pr);
    if (st != FA_SUCCESS)
        return st;
    call_args a;
    st = prepare_args(ctx, p, &a);
    if (st == FA_SUCCESS) {
        cl_mem bits = or_dummy(s, a.bits), rp = or_dummy(s, a.row_ptr), col = or_dummy(s, a.col), cls = or_dummy(s, a.cls);
        float scale = p->scale, drop = p->dropout_scale;
        const void *vals[] = {&a.params, &scale, &drop, &a.mem[FA_T_Q], &a.mem[FA_T_K], &a.mem[FA_T_V], &a.mem[FA_T_O],
                              &a.mem[FA_T_LSE], &a.cu_q, &a.cu_k, &bits, &rp, &col, &cls, &a.alibi, &a.sink};
        cl_kernel k = v->kernel == 2 ? pr->forward_mma : v->kernel ? pr->forward : pr->forward_vec;
        cl_int e = set_args(k, "mffmmmmmmmmmmmmm", vals);
        if (e != CL_SUCCESS)
            st = OCL_FAIL(ctx, e, "clSetKernelArg(fa_forward)");
        else {
            int64_t group = 1;
            if (v->kernel == 2)
                group = 128; /* forward_mma.cl: 4 warps */
            else if (v->kernel) {
                ocl_tile_row t = ocl_fwd_block(s, p);
                group = (p->block_q / t.tm) * (p->block_k / t.tn);
            }
            st = launch(ctx, k,
                        v->kernel == 2 ? "clEnqueueNDRangeKernel(fa_forward_mma)"
                        : v->kernel    ? "clEnqueueNDRangeKernel(fa_forward)"
                                       : "clEnqueueNDRangeKernel(fa_forward_vec)",
                        (p->seqlen_q + p->block_q - 1) / p->block_q, group, p->heads_q, p->batch);
        }
    }
    call_release(&a);
    if (st == FA_SUCCESS)
        OCL_TRY(ctx, ocl_api.clFlush(s->queue), "clFlush");
    return st;
}

fa_status ocl_backward(fa_context *ctx, const fa_problem *p, const fa_variant *v)
{
    if (p->batch == 0 && !p->dsink) /* with no rows dsink is still written: zeros */
        return FA_SUCCESS;
    ocl_state *s = ocl_state_of(ctx);
    ocl_program *pr;
    fa_status st = ocl_get_program(ctx, p, v->kernel, &pr);
    if (st != FA_SUCCESS)
        return st;
    call_args a;
    st = prepare_args(ctx, p, &a);
    if (st == FA_SUCCESS)
        st = upload(ctx, NULL, sizeof(float) * (size_t)(p->total_q * p->heads_q), &a.dsum);
    if (st == FA_SUCCESS) {
        cl_mem bits = or_dummy(s, a.bits), rp = or_dummy(s, a.row_ptr), col = or_dummy(s, a.col), cls = or_dummy(s, a.cls);
        float scale = p->scale, drop = p->dropout_scale;
        const void *vd[] = {&a.params, &a.mem[FA_T_O], &a.mem[FA_T_DO], &a.dsum, &a.cu_q, &a.cu_k};
        const void *vkv[] = {&a.params, &scale, &drop, &a.mem[FA_T_Q], &a.mem[FA_T_K], &a.mem[FA_T_V], &a.mem[FA_T_DO],
                             &a.mem[FA_T_LSE], &a.dsum, &a.mem[FA_T_DK], &a.mem[FA_T_DV], &a.cu_q, &a.cu_k, &bits,
                             &rp, &col, &cls, &a.alibi};
        const void *vq[] = {&a.params, &scale, &drop, &a.mem[FA_T_Q], &a.mem[FA_T_K], &a.mem[FA_T_V], &a.mem[FA_T_DO],
                            &a.mem[FA_T_LSE], &a.dsum, &a.mem[FA_T_DQ], &a.cu_q, &a.cu_k, &bits, &rp, &col, &cls,
                            &a.alibi};
        const void *vs[] = {&a.params, &a.mem[FA_T_LSE], &a.dsum, &a.sink, &a.dsink, &a.cu_q};
        cl_int e = set_args(pr->dsum, "mmmmmm", vd);
        if (e == CL_SUCCESS)
            e = set_args(pr->dkdv, "mffmmmmmmmmmmmmmmm", vkv);
        if (e == CL_SUCCESS)
            e = set_args(pr->dq, "mffmmmmmmmmmmmmmm", vq);
        if (e == CL_SUCCESS && p->dsink)
            e = set_args(pr->dsink, "mmmmmm", vs);
        int64_t nq = (p->seqlen_q + p->block_q - 1) / p->block_q, nk = (p->seqlen_k + p->block_k - 1) / p->block_k;
        /* backward.cl: work-groups of (B_r / tm) x (B_c / tn) work-items, one per tile and FA_DA
         * columns (of dK and dV: of the wider of d and d_v; of dQ: of d); backward_vec.cl: one
         * work-item per tile */
        int64_t group = 1, splits_kv = 1, splits_q = 1;
        if (v->kernel == 2) /* backward_mma.cl: 4 warps */
            group = 128;
        else if (v->kernel) {
            ocl_tile_row t = ocl_bwd_block(s, p);
            const int64_t dm = p->d > p->d_v ? p->d : p->d_v;
            group = (p->block_q / t.tm) * (p->block_k / t.tn);
            splits_kv = (dm + t.da - 1) / t.da;
            splits_q = (p->d + t.da - 1) / t.da;
        }
        if (e != CL_SUCCESS)
            st = OCL_FAIL(ctx, e, "clSetKernelArg(backward)");
        else if ((st = launch(ctx, pr->dsum, "clEnqueueNDRangeKernel(fa_backward_dsum)", nq, p->block_q, p->heads_q,
                              p->batch)) == FA_SUCCESS &&
                 (st = launch(ctx, pr->dkdv, "clEnqueueNDRangeKernel(fa_backward_dkdv)", nk * splits_kv, group,
                              p->heads_kv, p->batch)) == FA_SUCCESS &&
                 (st = launch(ctx, pr->dq, "clEnqueueNDRangeKernel(fa_backward_dq)", nq * splits_q, group, p->heads_q,
                              p->batch)) == FA_SUCCESS &&
                 p->dsink) /* backward.cl's FA_SINK_WG work-items per query head */
            st = launch(ctx, pr->dsink, "clEnqueueNDRangeKernel(fa_backward_dsink)", 1, 64, p->heads_q, 1);
    }
    call_release(&a);
    if (st == FA_SUCCESS)
        OCL_TRY(ctx, ocl_api.clFlush(s->queue), "clFlush");
    return st;
}

int64_t ocl_workspace(const fa_context *ctx, const fa_problem *p)
{
    (void)ctx;
    int64_t bytes = FA_P_COUNT * 8;
    if (p->backward)
        bytes += p->total_q * p->heads_q * 4; /* D */
    if (p->block_mask) {
        const fa_block_mask *bm = p->block_mask;
        int64_t nq = (p->seqlen_q + p->block_q - 1) / p->block_q, nk = (p->seqlen_k + p->block_k - 1) / p->block_k;
        bytes += bm->heads * bm->rows * bm->cols + bm->heads * (nq * 8 + nq * nk * 5);
    }
    return bytes;
}
