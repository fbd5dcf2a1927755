/* rtc_ring.c: ring attention's element-wise steps (ring/ring.h's fa_cuda_ring_*, which backend.c
 * calls) for a build whose kernels are compiled at run time: the kernels of ring/ring_kernels.cuh
 * (fa_gpu::ring::copy_kernel, add_kernel, merge_kernel) compiled by NVRTC on first use and launched
 * through the driver API (host/rtc_launch.h) on the views, grids and blocks of the nvcc-built
 * launchers (ring/ring.cu), which common/ring_view.h gives both. Each returns a CUresult, the
 * message of a failure kept (host/rtc_kernels.h). Plain C. */
#include "common/ring_view.h"
#include "host/rtc_kernels.h"
#include "host/rtc_launch.h"

#include "flashattn.h"

/* ring/ring.h's declarations (host/ includes common/ and host/ only; backend.c includes ring.h) */
int fa_cuda_ring_copy(const fa_tensor *dst, const fa_tensor *src, void *stream);
int fa_cuda_ring_add(const fa_tensor *acc, const fa_tensor *part, void *stream);
int fa_cuda_ring_merge(const fa_tensor *o, const fa_tensor *lse, const fa_tensor *o_part, const fa_tensor *lse_part,
                       void *stream);

static fa_ring_view view_of(const fa_tensor *t)
{
    return fa_ring_view_of(t->data, (int)t->dtype, t->ndim, t->shape, t->stride);
}

/* One ring kernel on `threads` threads of grid-stride work, with its arguments. */
static int launch_ring(const char *name, int64_t threads, void **args, void *stream)
{
    size_t len;
    char *why = fa_rtc_error_buffer(&len);
    fa_rtc_entry_begin();
    const fa_rtc_launch_config c = {"ring", 0, fa_ring_blocks(threads), 1, 1, FA_RING_THREADS, 0};
    return fa_rtc_entry_end(fa_rtc_launch(name, &c, stream, args, why, len));
}

int fa_cuda_ring_copy(const fa_tensor *dst, const fa_tensor *src, void *stream)
{
    fa_ring_view d = view_of(dst), s = view_of(src);
    int64_t n = fa_ring_count(&s);
    if (n == 0)
        return fa_rtc_entry_end(FA_RTC_OK);
    void *args[] = {&d, &s, &n};
    return launch_ring("fa_gpu::ring::copy_kernel", n, args, stream);
}

int fa_cuda_ring_add(const fa_tensor *acc, const fa_tensor *part, void *stream)
{
    fa_ring_view a = view_of(acc), p = view_of(part);
    int64_t n = fa_ring_count(&a);
    if (n == 0)
        return fa_rtc_entry_end(FA_RTC_OK);
    void *args[] = {&a, &p, &n};
    return launch_ring("fa_gpu::ring::add_kernel", n, args, stream);
}

int fa_cuda_ring_merge(const fa_tensor *o, const fa_tensor *lse, const fa_tensor *o_part, const fa_tensor *lse_part,
                       void *stream)
{
    fa_ring_view a = view_of(o), l = view_of(lse), p = view_of(o_part), lp = view_of(lse_part);
    int64_t rows = fa_ring_rows(&a);
    if (rows == 0)
        return fa_rtc_entry_end(FA_RTC_OK);
    void *args[] = {&a, &l, &p, &lp, &rows};
    return launch_ring("fa_gpu::ring::merge_kernel", rows * FA_RING_MERGE_LANES, args, stream);
}
