/* rtc_ring_check.c: ring attention's element-wise steps in a build whose kernels are compiled at
 * run time (host/rtc_ring.c's fa_cuda_ring_copy, _add, _merge, called directly) against the fake
 * driver (fake_libcuda.c, named by argv[1] and given as FLASHATTN_CUDA_DRIVER_LIBRARY): each launches
 * the ring kernel NVRTC compiled (its lowered name) on ring.cu's grid and block, with the views
 * ring.cu builds (4-D, a 3-D tensor given a leading extent of 1) as its arguments; an empty tensor
 * launches nothing; a huge one is capped at 65535 x 16 blocks; a failing launch returns the
 * driver's error with a message. The expected values are spelled out here, not read from
 * common/ring_view.h. Exit 0 when every check holds, 1 on the first that fails, 77 (meson's skip)
 * where libnvrtc cannot be opened. */
#include "flashattn.h"
#include "host/rtc_compiler.h"
#include "host/rtc_kernels.h"
#include "rtc_check_common.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* host/rtc_ring.c's entry points (ring/ring.h) */
int fa_cuda_ring_copy(const fa_tensor *dst, const fa_tensor *src, void *stream);
int fa_cuda_ring_add(const fa_tensor *acc, const fa_tensor *part, void *stream);
int fa_cuda_ring_merge(const fa_tensor *o, const fa_tensor *lse, const fa_tensor *o_part, const fa_tensor *lse_part,
                       void *stream);

/* the kernels' view as they read it (ring_kernels.cuh's view4) */
typedef struct view {
    void *data;
    int dtype;
    int64_t n[4], s[4];
} view;

/* a contiguous row-major tensor (fa_tensor_contiguous's rule: this check links no libflashattn) */
static fa_tensor contiguous(void *data, fa_dtype dtype, int ndim, const int64_t *shape)
{
    fa_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = dtype;
    t.ndim = ndim;
    int64_t stride = 1;
    for (int i = ndim - 1; i >= 0; --i) {
        t.shape[i] = shape[i];
        t.stride[i] = stride;
        stride *= shape[i];
    }
    return t;
}

static fake_cuda_state *fake;

/* the fake records the first FAKE_CUDA_MAX_ARGS arguments of a launch, of these sizes: copy and
 * add take (view, view, int64_t), merge (view, view, view, view, int64_t) */
static void expect_arguments(int views)
{
    for (int i = 0; i < FAKE_CUDA_MAX_ARGS; ++i)
        fake->arg_sizes[i] = i < views ? sizeof(view) : i == views ? sizeof(int64_t) : 0;
}

/* the last launch ran `name` on `blocks` blocks of 256 threads, no shared memory */
static void check_launch(const char *what, const char *name, unsigned blocks, int launches)
{
    char lowered[256];
    lowered_name_of("ring", 80, 0, 0, name, lowered, sizeof lowered);
    printf("  %s: %s\n", name, lowered);
    CHECK(fake->launch_calls == launches, "%s: %d launches, expected %d", what, fake->launch_calls, launches);
    CHECK(fake->launch_log_len > 0 && strcmp(fake->launches[fake->launch_log_len - 1].name, lowered) == 0,
          "%s: launched %s", what, fake->launch_log_len > 0 ? fake->launches[fake->launch_log_len - 1].name : "nothing");
    CHECK(fake->grid[0] == blocks && fake->grid[1] == 1 && fake->grid[2] == 1 && fake->block[0] == 256 &&
              fake->shared_bytes == 0,
          "%s: (%u, %u, %u) x %u with %u bytes; expected (%u, 1, 1) x 256 with 0", what, fake->grid[0], fake->grid[1],
          fake->grid[2], fake->block[0], fake->shared_bytes, blocks);
    printf("ok: %s: %s on %u blocks of 256\n", what, name, blocks);
}

/* argument i of the last launch is the view of {data, dtype, n, s} */
static void check_view(int i, void *data, int dtype, const int64_t n[4], const int64_t s[4])
{
    view want;
    memset(&want, 0, sizeof want);
    want.data = data;
    want.dtype = dtype;
    memcpy(want.n, n, sizeof want.n);
    memcpy(want.s, s, sizeof want.s);
    view got;
    memcpy(&got, fake->args[i], sizeof got);
    CHECK(got.data == want.data && got.dtype == want.dtype && memcmp(got.n, want.n, sizeof want.n) == 0 &&
              memcmp(got.s, want.s, sizeof want.s) == 0,
          "argument %d: data %p dtype %d n (%lld %lld %lld %lld) s (%lld %lld %lld %lld)", i, got.data, got.dtype,
          (long long)got.n[0], (long long)got.n[1], (long long)got.n[2], (long long)got.n[3], (long long)got.s[0],
          (long long)got.s[1], (long long)got.s[2], (long long)got.s[3]);
}

int main(int argc, char **argv)
{
    char why[2048];
    setvbuf(stdout, NULL, _IONBF, 0);
    CHECK(argc == 2, "usage: rtc_ring_check FAKE_LIBCUDA");
    if (!fa_rtc_nvrtc_version(why, sizeof why)) {
        printf("SKIP: %s\n", why);
        return SKIP;
    }
    check_cache_dir("/tmp/fa-rtc-ring-XXXXXX");
    setenv("FLASHATTN_CUDA_DRIVER_LIBRARY", argv[1], 1);
    fake = fake_cuda_open(argv[1], NULL);
    fake->device_count = 1;
    fake->cc_major = 8;
    fake->cc_minor = 0;
    fake->multiprocessors = 4;
    fake->total_mem = (size_t)1 << 30;

    /* the launches never run: the views' data need only be distinct addresses */
    static float a[4], b[4], c[4], d[4];
    void *stream = (void *)0x5;

    /* copy: bf16 [2, 100, 4, 64] from fp32 of the same shape, 51200 elements in 200 blocks */
    const int64_t shape[4] = {2, 100, 4, 64};
    fa_tensor dst = contiguous(a, FA_DTYPE_BF16, 4, shape), src = contiguous(b, FA_DTYPE_F32, 4, shape);
    const int64_t s4[4] = {25600, 256, 64, 1};
    expect_arguments(2);
    int r = fa_cuda_ring_copy(&dst, &src, stream);
    CHECK(r == 0, "copy: %d: %s", r, fa_rtc_last_error());
    check_launch("copy", "fa_gpu::ring::copy_kernel", 200, 1);
    check_view(0, a, FA_DTYPE_BF16, shape, s4);
    check_view(1, b, FA_DTYPE_F32, shape, s4);
    CHECK(*(const int64_t *)fake->args[2] == 51200, "copy: count %lld", (long long)*(const int64_t *)fake->args[2]);
    CHECK(fake->stream == stream, "copy: stream %p", fake->stream);

    /* add: fp32 [4, 100, 64] (3-D: a leading extent of 1, stride 0), 25600 elements in 100 blocks */
    const int64_t shape3[3] = {4, 100, 64}, n3[4] = {1, 4, 100, 64}, s3[4] = {0, 6400, 64, 1};
    fa_tensor acc = contiguous(c, FA_DTYPE_F32, 3, shape3), part = contiguous(d, FA_DTYPE_F32, 3, shape3);
    r = fa_cuda_ring_add(&acc, &part, stream);
    CHECK(r == 0, "add: %d: %s", r, fa_rtc_last_error());
    check_launch("add", "fa_gpu::ring::add_kernel", 100, 2);
    check_view(0, c, FA_DTYPE_F32, n3, s3);
    check_view(1, d, FA_DTYPE_F32, n3, s3);

    /* merge: o [2, 100, 4, 64], lse [2, 4, 100]: 800 rows of one warp each, 100 blocks */
    const int64_t lse_shape[3] = {2, 4, 100}, lse_n[4] = {1, 2, 4, 100}, lse_s[4] = {0, 400, 100, 1};
    fa_tensor o = contiguous(a, FA_DTYPE_F32, 4, shape), lse = contiguous(b, FA_DTYPE_F32, 3, lse_shape);
    fa_tensor o_part = contiguous(c, FA_DTYPE_F32, 4, shape),
              lse_part = contiguous(d, FA_DTYPE_F32, 3, lse_shape);
    expect_arguments(4);
    r = fa_cuda_ring_merge(&o, &lse, &o_part, &lse_part, stream);
    CHECK(r == 0, "merge: %d: %s", r, fa_rtc_last_error());
    check_launch("merge", "fa_gpu::ring::merge_kernel", 100, 3);
    check_view(0, a, FA_DTYPE_F32, shape, s4);
    check_view(1, b, FA_DTYPE_F32, lse_n, lse_s);
    check_view(2, c, FA_DTYPE_F32, shape, s4);
    check_view(3, d, FA_DTYPE_F32, lse_n, lse_s);

    /* an empty tensor launches nothing; 2^30 elements take the cap of 65535 x 16 blocks */
    expect_arguments(2);
    const int64_t empty[4] = {2, 0, 4, 64}, huge[4] = {1, (int64_t)1 << 20, 1, 1024};
    dst = contiguous(a, FA_DTYPE_F32, 4, empty);
    r = fa_cuda_ring_copy(&dst, &dst, stream);
    CHECK(r == 0 && fake->launch_calls == 3, "empty copy: %d, %d launches", r, fake->launch_calls);
    printf("ok: an empty copy launches nothing\n");
    dst = contiguous(a, FA_DTYPE_F32, 4, huge);
    r = fa_cuda_ring_copy(&dst, &dst, stream);
    CHECK(r == 0, "huge copy: %d: %s", r, fa_rtc_last_error());
    check_launch("2^30 elements", "fa_gpu::ring::copy_kernel", 65535 * 16, 4);

    /* a failing launch: the driver's error, and a message naming the call */
    fake->fail_call = "cuLaunchKernel";
    fake->fail_result = 719; /* CUDA_ERROR_LAUNCH_FAILED */
    r = fa_cuda_ring_add(&acc, &part, stream);
    CHECK(r == 719 && strstr(fa_rtc_last_error(), "cuLaunchKernel"), "failing launch: %d: %s", r,
          fa_rtc_last_error());
    printf("ok: a failing launch: %s\n", fa_rtc_last_error());
    fake->fail_call = NULL;
    printf("PASS\n");
    return 0;
}
