/* memory.c: device memory. fa_malloc returns an address inside a range of host address space
 * reserved for the buffer (mmap PROT_NONE, never touched), so device pointers are unique, never
 * alias host memory, and support pointer arithmetic (a tensor may start inside an allocation). The
 * backend maps a pointer back to its cl_mem and byte offset through a table sorted by address. */
#include "opencl_backend.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* The buffer holding [ptr, ptr + bytes), or NULL. */
const ocl_buffer *ocl_find_buffer(const ocl_state *s, const void *ptr, size_t bytes)
{
    uintptr_t a = (uintptr_t)ptr;
    size_t lo = 0, hi = s->nbuffers;
    while (lo < hi) { /* the last buffer with base <= a */
        size_t mid = lo + (hi - lo) / 2;
        if (s->buffers[mid].base <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return NULL;
    const ocl_buffer *b = &s->buffers[lo - 1];
    if (a - b->base > b->bytes || bytes > b->bytes - (a - b->base))
        return NULL;
    return b;
}

fa_status ocl_alloc(fa_context *ctx, size_t bytes, void **ptr)
{
    ocl_state *s = ocl_state_of(ctx);
    size_t size = bytes ? bytes : 1;
    if (s->nbuffers == s->cap_buffers) {
        size_t cap = s->cap_buffers ? 2 * s->cap_buffers : 16;
        ocl_buffer *nb = realloc(s->buffers, cap * sizeof *nb);
        if (!nb)
            return FA_ERROR(ctx, FA_ERR_OUT_OF_MEMORY, "fa_malloc: buffer table");
        s->buffers = nb;
        s->cap_buffers = cap;
    }
    /* address space only: PROT_NONE, no reserve, never touched */
    void *range = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (range == MAP_FAILED)
        return FA_ERROR(ctx, FA_ERR_OUT_OF_MEMORY, "fa_malloc: cannot reserve %zu bytes of address space (%s)",
                        size, strerror(errno));
    cl_int e;
    cl_mem mem = ocl_api.clCreateBuffer(s->context, CL_MEM_READ_WRITE, size, NULL, &e);
    if (e != CL_SUCCESS) {
        munmap(range, size);
        return OCL_FAIL(ctx, e, "clCreateBuffer");
    }
    size_t at = s->nbuffers;
    while (at > 0 && s->buffers[at - 1].base > (uintptr_t)range)
        --at;
    memmove(&s->buffers[at + 1], &s->buffers[at], (s->nbuffers - at) * sizeof *s->buffers);
    s->buffers[at] = (ocl_buffer){.base = (uintptr_t)range, .bytes = size, .mem = mem};
    s->nbuffers++;
    *ptr = range;
    return FA_SUCCESS;
}

fa_status ocl_free(fa_context *ctx, void *ptr)
{
    ocl_state *s = ocl_state_of(ctx);
    for (size_t i = 0; i < s->nbuffers; ++i)
        if (s->buffers[i].base == (uintptr_t)ptr) {
            ocl_buffer b = s->buffers[i];
            memmove(&s->buffers[i], &s->buffers[i + 1], (s->nbuffers - i - 1) * sizeof *s->buffers);
            s->nbuffers--;
            /* the queue may still use it: OpenCL frees the memory once its commands are done */
            cl_int e = ocl_api.clReleaseMemObject(b.mem);
            munmap((void *)b.base, b.bytes);
            if (e != CL_SUCCESS)
                return OCL_FAIL(ctx, e, "clReleaseMemObject");
            return FA_SUCCESS;
        }
    return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "fa_free: %p was not returned by fa_malloc on this context", ptr);
}

fa_status ocl_copy(fa_context *ctx, void *dst, const void *src, size_t bytes, fa_copy_kind kind)
{
    ocl_state *s = ocl_state_of(ctx);
    const ocl_buffer *bd = NULL, *bs = NULL;
    if (kind == FA_COPY_HOST_TO_DEVICE || kind == FA_COPY_DEVICE_TO_DEVICE)
        if (!(bd = ocl_find_buffer(s, dst, bytes)))
            return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "fa_memcpy: dst %p + %zu bytes is not inside an fa_malloc buffer",
                            dst, bytes);
    if (kind == FA_COPY_DEVICE_TO_HOST || kind == FA_COPY_DEVICE_TO_DEVICE)
        if (!(bs = ocl_find_buffer(s, src, bytes)))
            return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "fa_memcpy: src %p + %zu bytes is not inside an fa_malloc buffer",
                            src, bytes);
    switch (kind) {
    case FA_COPY_HOST_TO_DEVICE:
        OCL_TRY(ctx,
                ocl_api.clEnqueueWriteBuffer(s->queue, bd->mem, CL_TRUE, (uintptr_t)dst - bd->base, bytes, src, 0, NULL,
                                             NULL),
                "clEnqueueWriteBuffer");
        break;
    case FA_COPY_DEVICE_TO_HOST:
        OCL_TRY(ctx,
                ocl_api.clEnqueueReadBuffer(s->queue, bs->mem, CL_TRUE, (uintptr_t)src - bs->base, bytes, dst, 0, NULL,
                                            NULL),
                "clEnqueueReadBuffer");
        break;
    case FA_COPY_DEVICE_TO_DEVICE:
        OCL_TRY(ctx,
                ocl_api.clEnqueueCopyBuffer(s->queue, bs->mem, bd->mem, (uintptr_t)src - bs->base,
                                            (uintptr_t)dst - bd->base, bytes, 0, NULL, NULL),
                "clEnqueueCopyBuffer");
        OCL_TRY(ctx, ocl_api.clFinish(s->queue), "clFinish"); /* the helper's contract: done on return */
        break;
    case FA_COPY_HOST_TO_HOST: memmove(dst, src, bytes); break;
    }
    return FA_SUCCESS;
}

fa_status ocl_sync(fa_context *ctx)
{
    OCL_TRY(ctx, ocl_api.clFinish(ocl_state_of(ctx)->queue), "clFinish");
    return FA_SUCCESS;
}
