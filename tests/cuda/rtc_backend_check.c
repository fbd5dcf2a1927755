/* rtc_backend_check.c: the CUDA backend of a build whose kernels are compiled at run time
 * (-Dcuda-kernels=rtc) through the public API, against a fake driver (fake_libcuda.c, named by
 * argv[1] and given as FLASHATTN_CUDA_DRIVER_LIBRARY): no GPU and no CUDA toolkit at build time,
 * while NVRTC really compiles the kernels. The fake's device memory is host memory and its launches
 * run nothing, so this checks the path from fa_forward to cuLaunchKernel, not the arithmetic (the
 * GPU run does: bench/device/rtc_gpu.sh):
 *   - without libcuda: the backend is unavailable and says why;
 *   - without libnvrtc: fa_forward fails with FA_ERR_BACKEND, a message naming NVRTC, and O as it was;
 *   - fa_forward and fa_backward launch the SIMT kernels the chooser names under
 *     FLASHATTN_KERNELS=simt (the lowered name NVRTC gives the expected name expression, compiled
 *     for the device's sm_86), on the expected grids;
 *   - fa_warmup compiles a shape's kernels, so the same call afterwards loads no module;
 *   - a failing cuLaunchKernel is FA_ERR_BACKEND with the driver's error in the message.
 * Exit 0 when every check holds, 1 on the first that fails, 77 (meson's skip) with the reason
 * where libnvrtc cannot be opened. The kernel cache is a fresh directory of its own. */
#include "flashattn.h"
#include "host/rtc_compiler.h"
#include "rtc_check_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 2, S = 100, H = 4, D = 64 };

typedef struct problem {
    void *q, *k, *v, *o, *lse, *dout, *dq, *dk, *dv;
    fa_fwd_args fwd;
    fa_bwd_args bwd;
} problem;

static void *device_fill(fa_context *ctx, size_t bytes, unsigned char byte)
{
    void *d = NULL, *h = malloc(bytes);
    CHECK(h != NULL, "host memory");
    memset(h, byte, bytes);
    CHECK(fa_malloc(ctx, bytes, &d) == FA_SUCCESS, "fa_malloc: %s", fa_context_last_error(ctx));
    CHECK(fa_memcpy(ctx, d, h, bytes, FA_COPY_HOST_TO_DEVICE) == FA_SUCCESS, "fa_memcpy: %s",
          fa_context_last_error(ctx));
    free(h);
    return d;
}

/* bf16 [B][S][H][D] tensors (the fake's memory is the host's), O filled with 0x5a bytes */
static problem make_problem(fa_context *ctx)
{
    problem p;
    memset(&p, 0, sizeof p);
    const int64_t shape[4] = {B, S, H, D}, lse_shape[3] = {B, H, S};
    const size_t bytes = (size_t)B * S * H * D * 2;
    void **t[] = {&p.q, &p.k, &p.v, &p.dout, &p.dq, &p.dk, &p.dv};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; ++i)
        *t[i] = device_fill(ctx, bytes, 0);
    p.o = device_fill(ctx, bytes, 0x5a);
    p.lse = device_fill(ctx, (size_t)B * H * S * 4, 0);
    void *const bufs[9] = {p.q, p.k, p.v, p.o, p.dout, p.dq, p.dk, p.dv, p.lse};
    attention_args(bufs, FA_DTYPE_BF16, shape, lse_shape, &p.fwd, &p.bwd);
    return p;
}

int main(int argc, char **argv)
{
    char why[2048];
    setvbuf(stdout, NULL, _IONBF, 0);
    CHECK(argc == 2, "usage: rtc_backend_check FAKE_LIBCUDA");

    /* no driver: unavailable, with the reason */
    setenv("FLASHATTN_CUDA_DRIVER_LIBRARY", "/nonexistent/libcuda.so.1", 1);
    fa_status st = fa_backend_availability("cuda", why, sizeof why);
    CHECK(st != FA_SUCCESS && strstr(why, "/nonexistent/libcuda.so.1"), "no driver: status %d: %s", (int)st, why);
    printf("ok: no driver: %s\n", why);

    if (!fa_rtc_nvrtc_version(why, sizeof why)) {
        printf("SKIP: %s\n", why);
        return SKIP;
    }
    check_cache_dir("/tmp/fa-rtc-backend-XXXXXX");

    setenv("FLASHATTN_CUDA_DRIVER_LIBRARY", argv[1], 1);
    fake_cuda_state *fake = fake_cuda_open(argv[1], NULL);
    fake->device_count = 1;
    fake->cc_major = 8;
    fake->cc_minor = 6;
    fake->multiprocessors = 4;
    fake->shared_optin = 101376;
    fake->total_mem = (size_t)1 << 30;
    fake->arg_sizes[0] = 0; /* no argument recorded: rtc_launch_check checks them */

    /* the SIMT kernels on this sm_86 device, which the sm80 family would otherwise take
     * (rtc_sm80_check drives that one) */
    setenv("FLASHATTN_KERNELS", "simt", 1);
    fa_context *ctx = NULL;
    st = fa_context_create(&ctx, "cuda", 0);
    CHECK(st == FA_SUCCESS, "fa_context_create(cuda): %s", fa_last_error());
    problem p = make_problem(ctx);
    const size_t o_bytes = (size_t)B * S * H * D * 2;
    unsigned char *o_host = malloc(o_bytes);
    CHECK(o_host != NULL, "host memory");

    /* no libnvrtc: the call fails, says why, and O is as it was */
    setenv("FLASHATTN_NVRTC_LIBRARY", "/nonexistent/libnvrtc.so", 1);
    st = fa_forward(ctx, &p.fwd);
    const char *msg = fa_context_last_error(ctx);
    CHECK(st == FA_ERR_BACKEND && strstr(msg, "CUDA_ERROR_JIT_COMPILER_NOT_FOUND") &&
              strstr(msg, "FLASHATTN_NVRTC_LIBRARY=/nonexistent/libnvrtc.so"),
          "no NVRTC: status %d: %s", (int)st, msg);
    CHECK(fa_memcpy(ctx, o_host, p.o, o_bytes, FA_COPY_DEVICE_TO_HOST) == FA_SUCCESS, "read O back");
    for (size_t i = 0; i < o_bytes; ++i)
        CHECK(o_host[i] == 0x5a, "no NVRTC: O byte %zu changed", i);
    CHECK(fake->launch_calls == 0, "no NVRTC: %d launches", fake->launch_calls);
    printf("ok: no NVRTC: %s\n", msg);
    unsetenv("FLASHATTN_NVRTC_LIBRARY");

    /* the forward: one launch of the SIMT forward the chooser names, grid (ceil(S / 64), H, B) */
    char lowered[256];
    st = fa_forward(ctx, &p.fwd);
    CHECK(st == FA_SUCCESS, "fa_forward: %s", fa_context_last_error(ctx));
    CHECK(fa_synchronize(ctx) == FA_SUCCESS, "fa_synchronize: %s", fa_context_last_error(ctx));
    lowered_name_of(NULL, 86, 0, 0, "fa_gpu::simt::forward_kernel<fa_gpu::store_bf16, 64, false>",
                    lowered, sizeof lowered);
    CHECK(fake->launch_calls == 1 && strcmp(fake->function_name, lowered) == 0, "forward: %d launches of %s",
          fake->launch_calls, fake->function_name);
    CHECK(fake->grid[0] == (S + 63) / 64 && fake->grid[1] == H && fake->grid[2] == B && fake->block[0] == 256,
          "forward: grid (%u, %u, %u), block %u", fake->grid[0], fake->grid[1], fake->grid[2], fake->block[0]);
    printf("ok: fa_forward launched %s on (%u, %u, %u)\n", fake->function_name, fake->grid[0], fake->grid[1],
           fake->grid[2]);

    /* the backward: dsum, dK / dV, dQ */
    int launches = fake->launch_calls;
    st = fa_backward(ctx, &p.bwd);
    CHECK(st == FA_SUCCESS, "fa_backward: %s", fa_context_last_error(ctx));
    lowered_name_of(NULL, 86, 0, 0, "fa_gpu::simt::dq_kernel<fa_gpu::store_bf16, 64, false>", lowered, sizeof lowered);
    CHECK(fake->launch_calls == launches + 3 && strcmp(fake->function_name, lowered) == 0,
          "backward: %d launches, the last %s", fake->launch_calls - launches, fake->function_name);
    printf("ok: fa_backward launched dsum, dK / dV and dQ (%s)\n", fake->function_name);

    /* 65536 sequences, one more than a grid's z takes: refused with the reason before anything
     * launches, O as it was */
    {
        const int64_t n = 65536, wide_shape[4] = {n, 1, 1, 8}, wide_lse[3] = {n, 1, 1};
        const size_t bytes = (size_t)n * 8 * 2;
        void *bufs[9];
        for (int i = 0; i < 9; ++i)
            bufs[i] = device_fill(ctx, i == 8 ? (size_t)n * 4 : bytes, i == 3 ? 0x5a : 0);
        fa_fwd_args fwd;
        fa_bwd_args bwd;
        memset(&fwd, 0, sizeof fwd);
        memset(&bwd, 0, sizeof bwd);
        attention_args(bufs, FA_DTYPE_BF16, wide_shape, wide_lse, &fwd, &bwd);
        launches = fake->launch_calls;
        for (int backward = 0; backward < 2; ++backward) {
            st = backward ? fa_backward(ctx, &bwd) : fa_forward(ctx, &fwd);
            msg = fa_context_last_error(ctx);
            CHECK(st == FA_ERR_UNSUPPORTED && strstr(msg, "65536 sequences") && strstr(msg, "at most 65535"),
                  "65536 sequences, %s: status %d: %s", backward ? "backward" : "forward", (int)st, msg);
            printf("ok: 65536 sequences refused (%s): %s\n", backward ? "backward" : "forward", msg);
        }
        CHECK(fake->launch_calls == launches, "65536 sequences: %d launches", fake->launch_calls - launches);
        unsigned char *o_wide = malloc(bytes);
        CHECK(o_wide != NULL, "host memory");
        CHECK(fa_memcpy(ctx, o_wide, bufs[3], bytes, FA_COPY_DEVICE_TO_HOST) == FA_SUCCESS, "read O back");
        for (size_t i = 0; i < bytes; ++i)
            CHECK(o_wide[i] == 0x5a, "65536 sequences: O byte %zu changed", i);
        free(o_wide);
        for (int i = 0; i < 9; ++i)
            CHECK(fa_free(ctx, bufs[i]) == FA_SUCCESS, "fa_free: %s", fa_context_last_error(ctx));
    }

    /* fa_warmup compiles and loads a shape's kernels (fp16, d 128, softcap: the MOD instances);
     * the same shape's call afterwards loads nothing */
    fa_options opts = fa_options_default();
    opts.softcap = 30.0f;
    int loads = fake->load_calls;
    st = fa_warmup(ctx, FA_DTYPE_F16, 64, 2, 1, 128, 0, &opts, 1);
    CHECK(st == FA_SUCCESS, "fa_warmup: %s", fa_context_last_error(ctx));
    CHECK(fake->load_calls == loads + 4, "fa_warmup: %d modules loaded, expected 4 (forward, dsum, dK / dV, dQ)",
          fake->load_calls - loads);
    loads = fake->load_calls;
    st = fa_warmup(ctx, FA_DTYPE_F16, 256, 2, 1, 100, 0, &opts, 1); /* another length, the same kernels */
    CHECK(st == FA_SUCCESS && fake->load_calls == loads, "after fa_warmup: %d modules loaded",
          fake->load_calls - loads);
    printf("ok: fa_warmup loaded the shape's 4 kernels; the same shape then loads none\n");

    /* a driver error at launch: FA_ERR_BACKEND naming the call and the driver's error */
    fake->fail_call = "cuLaunchKernel";
    fake->fail_result = 719; /* CUDA_ERROR_LAUNCH_FAILED */
    st = fa_forward(ctx, &p.fwd);
    msg = fa_context_last_error(ctx);
    CHECK(st == FA_ERR_BACKEND && strstr(msg, "cuLaunchKernel") && strstr(msg, "CUDA_ERROR_LAUNCH_FAILED"),
          "failing launch: status %d: %s", (int)st, msg);
    printf("ok: a failing launch: %s\n", msg);
    fake->fail_call = NULL;

    void *bufs[] = {p.q, p.k, p.v, p.o, p.lse, p.dout, p.dq, p.dk, p.dv};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; ++i)
        fa_free(ctx, bufs[i]);
    fa_context_destroy(ctx);
    free(o_host);
    printf("PASS\n");
    return 0;
}
