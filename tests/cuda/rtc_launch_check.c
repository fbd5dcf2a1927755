/* rtc_launch_check.c: the SIMT forward launched through the driver API (host/rtc_launch.c) against
 * a fake driver (fake_libcuda.c, named by argv[1] and given as FLASHATTN_CUDA_DRIVER_LIBRARY), so
 * no GPU is needed; the kernels are really compiled by NVRTC. For bf16 d64, fp16 d128 with a
 * softcap (the MOD instance) and fp32 d40 with unaligned rows (vec false): the function asked for
 * is the lowered name NVRTC gives the expected name expression, the module loaded is that cubin,
 * the grid is (ceil(seqlen_q / BM), heads_q, batch), the block THREADS, no dynamic shared memory,
 * the stream the one given, the arguments the params struct's bytes and the vec flag. A second
 * launch loads nothing; a failing cuLaunchKernel is a status whose message names the call and the
 * driver's error string; a driver library that is not there is a status with a message naming it.
 * Exit 0 when every check holds, 1 on the first that fails, 77 (meson's skip) with the reason
 * where libnvrtc cannot be opened. The kernel cache is a fresh directory of its own. */
#include "common/simt_geometry.h"
#include "host/rtc_launch.h"
#include "rtc_check_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CUDA_ERROR_LAUNCH_FAILED 719

/* A dense [batch][seqlen][heads][d] problem; data are fake device addresses that are never read,
 * chosen to be aligned to 16 bytes or not. */
static fa_gpu_params problem(int64_t batch, int64_t seqlen_q, int64_t seqlen_k, int64_t heads_q, int64_t heads_kv,
                             int64_t d, int aligned)
{
    fa_gpu_params p;
    memset(&p, 0, sizeof p);
    const uintptr_t base = aligned ? 0x10000 : 0x10002;
    fa_gpu_tensor *views[] = {&p.q, &p.k, &p.v, &p.o};
    for (int i = 0; i < 4; ++i) {
        const int64_t heads = i == 1 || i == 2 ? heads_kv : heads_q, seq = i == 1 || i == 2 ? seqlen_k : seqlen_q;
        views[i]->data = (void *)(base + 0x1000000 * (uintptr_t)i);
        views[i]->sh = d;
        views[i]->ss = heads * d;
        views[i]->sb = seq * heads * d;
    }
    p.batch = batch;
    p.heads_q = heads_q;
    p.heads_kv = heads_kv;
    p.group = heads_q / heads_kv;
    p.d = p.d_v = d;
    p.seqlen_q = seqlen_q;
    p.seqlen_k = seqlen_k;
    p.total_q = batch * seqlen_q;
    p.scale = 0.125f;
    p.scale_log2 = 0.125f * 1.44269504f;
    p.window_left = p.window_right = -1;
    return p;
}

static size_t cubin_size_of(const char *name, int arch)
{
    fa_rtc_kernel k;
    char why[1024];
    CHECK(fa_rtc_compile(arch, 0, name, NULL, 0, &k, why, sizeof why) == FA_RTC_OK, "compile %s: %s", name, why);
    size_t n = k.cubin_len;
    fa_rtc_kernel_free(&k);
    return n;
}

int main(int argc, char **argv)
{
    char why[2048];
    setvbuf(stdout, NULL, _IONBF, 0);
    CHECK(argc == 2, "usage: rtc_launch_check FAKE_LIBCUDA");

    /* a driver library that is not there: the status, and a message naming it (first: a library
     * that opened is kept for the process) */
    fa_gpu_params p = problem(2, 100, 100, 4, 4, 64, 1);
    setenv("FLASHATTN_CUDA_DRIVER_LIBRARY", "/nonexistent/libcuda.so.1", 1);
    fa_rtc_status st = fa_rtc_launch_simt_forward(&p, 2, NULL, why, sizeof why);
    CHECK(st == FA_RTC_NO_DRIVER, "status %d: %s", (int)st, why);
    CHECK(strstr(why, "FLASHATTN_CUDA_DRIVER_LIBRARY=/nonexistent/libcuda.so.1") != NULL,
          "the message names the variable and the library: %s", why);
    printf("ok: FLASHATTN_CUDA_DRIVER_LIBRARY=/nonexistent/libcuda.so.1: %s\n", why);

    const char *version = fa_rtc_nvrtc_version(why, sizeof why);
    if (!version) {
        printf("SKIP: %s\n", why);
        return SKIP;
    }
    check_cache_dir("/tmp/fa-rtc-launch-XXXXXX");

    setenv("FLASHATTN_CUDA_DRIVER_LIBRARY", argv[1], 1);
    fake_cuda_state *fake = fake_cuda_open(argv[1], NULL);
    fake->cc_major = 8;
    fake->cc_minor = 6; /* the kernel is compiled for sm_86, the device's own architecture */
    fake->arg_sizes[0] = sizeof(fa_gpu_params);
    fake->arg_sizes[1] = 1;

    static const struct {
        const char *label;
        int dtype;
        int64_t batch, seqlen_q, heads_q, heads_kv, d;
        int aligned, softcap;
        const char *name;
        int vec;
    } cases[] = {
        {"bf16 d64", 2, 2, 100, 8, 2, 64, 1, 0, "fa_gpu::simt::forward_kernel<fa_gpu::store_bf16, 64, false>", 1},
        {"fp16 d128 softcap", 1, 3, 64, 4, 4, 128, 1, 1, "fa_gpu::simt::forward_kernel<fa_gpu::store_f16, 128, true>",
         1},
        {"fp32 d40 unaligned", 0, 1, 129, 3, 1, 40, 0, 0, "fa_gpu::simt::forward_kernel<fa_gpu::store_f32, 64, false>",
         0},
    };
    void *const stream = (void *)0x5157;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
        p = problem(cases[c].batch, cases[c].seqlen_q, 77, cases[c].heads_q, cases[c].heads_kv, cases[c].d,
                    cases[c].aligned);
        if (cases[c].softcap)
            p.mod.cap = fa_softcap_make(p.scale, 30.0f);
        const int loads = fake->load_calls, launches = fake->launch_calls;
        st = fa_rtc_launch_simt_forward(&p, cases[c].dtype, stream, why, sizeof why);
        CHECK(st == FA_RTC_OK, "%s: status %d: %s", cases[c].label, (int)st, why);
        CHECK(fake->launch_calls == launches + 1 && fake->load_calls == loads + 1, "%s: one load, one launch",
              cases[c].label);

        char lowered[256];
        lowered_name_of(NULL, 86, 0, 0, cases[c].name, lowered, sizeof lowered);
        CHECK(strcmp(fake->function_name, lowered) == 0, "%s: asked for %s, NVRTC lowers %s to %s", cases[c].label,
              fake->function_name, cases[c].name, lowered);
        const size_t cubin = cubin_size_of(cases[c].name, 86);
        CHECK(fake->image_size == cubin, "%s: the module image is %zu bytes, the cubin %zu", cases[c].label,
              fake->image_size, cubin);
        const unsigned nq = (unsigned)((cases[c].seqlen_q + FA_SIMT_BM - 1) / FA_SIMT_BM);
        CHECK(fake->grid[0] == nq && fake->grid[1] == cases[c].heads_q && fake->grid[2] == cases[c].batch,
              "%s: grid (%u, %u, %u), expected (%u, %lld, %lld)", cases[c].label, fake->grid[0], fake->grid[1],
              fake->grid[2], nq, (long long)cases[c].heads_q, (long long)cases[c].batch);
        CHECK(fake->block[0] == FA_SIMT_THREADS && fake->block[1] == 1 && fake->block[2] == 1,
              "%s: block (%u, %u, %u)", cases[c].label, fake->block[0], fake->block[1], fake->block[2]);
        CHECK(fake->shared_bytes == 0 && fake->stream == stream, "%s: %u shared bytes, stream %p", cases[c].label,
              fake->shared_bytes, fake->stream);
        CHECK(memcmp(fake->args[0], &p, sizeof p) == 0, "%s: the params argument is the struct given", cases[c].label);
        CHECK(fake->args[1][0] == cases[c].vec, "%s: vec %d, expected %d", cases[c].label, fake->args[1][0],
              cases[c].vec);
        printf("ok: %s: %s (%zu-byte cubin for sm_86), grid (%u, %u, %u), block %u, vec %d\n", cases[c].label, lowered,
               cubin, fake->grid[0], fake->grid[1], fake->grid[2], fake->block[0], fake->args[1][0]);

        /* the second launch of the kernel finds its module */
        st = fa_rtc_launch_simt_forward(&p, cases[c].dtype, stream, why, sizeof why);
        CHECK(st == FA_RTC_OK && fake->launch_calls == launches + 2, "%s: second launch: status %d: %s",
              cases[c].label, (int)st, why);
        CHECK(fake->load_calls == loads + 1, "%s: the module is loaded once: %d loads", cases[c].label,
              fake->load_calls - loads);
    }
    CHECK(fake->retain_calls == 1, "device 0's primary context retained once, not %d times", fake->retain_calls);
    printf("ok: a second launch of each kernel loads no module\n");

    /* the backward: dsum, dsink (with a sink and dsink asked), dK / dV, dQ, in that order, each
     * compiled once; the last launch is dQ's over query blocks of FA_SIMT_BWD_ROWS(D) rows */
    fake->arg_sizes[1] = 0;
    float sink_dev[4];
    for (int with_sink = 1; with_sink >= 0; --with_sink) {
        p = problem(2, 100, 90, 8, 2, 96, 1);
        p.d_v = 64; /* the bucket of the larger head dim: 128 */
        p.dsum = (void *)0x90000;
        if (with_sink) {
            p.sink = sink_dev;
            p.dsink = sink_dev;
        }
        const int loads = fake->load_calls, launches = fake->launch_calls;
        st = fa_rtc_launch_simt_backward(&p, 1, stream, why, sizeof why);
        CHECK(st == FA_RTC_OK, "backward: status %d: %s", (int)st, why);
        CHECK(fake->launch_calls == launches + 3 + with_sink && fake->load_calls == loads + (with_sink ? 4 : 0),
              "backward%s: %d launches, %d loads", with_sink ? " with a sink" : "", fake->launch_calls - launches,
              fake->load_calls - loads);
        char lowered[256];
        lowered_name_of(NULL, 86, 0, 0, "fa_gpu::simt::dq_kernel<fa_gpu::store_f16, 128, false>",
                        lowered, sizeof lowered);
        const unsigned rows = FA_SIMT_BWD_ROWS(128);
        CHECK(strcmp(fake->function_name, lowered) == 0, "backward: last kernel %s, expected %s",
              fake->function_name, lowered);
        CHECK(fake->grid[0] == (100 + rows - 1) / rows && fake->grid[1] == 8 && fake->grid[2] == 2 &&
                  fake->block[0] == FA_SIMT_THREADS,
              "backward: dQ grid (%u, %u, %u) block %u", fake->grid[0], fake->grid[1], fake->grid[2], fake->block[0]);
        CHECK(memcmp(fake->args[0], &p, sizeof p) == 0, "backward: the params argument is the struct given");
    }
    printf("ok: the backward launches dsum, dsink, dK / dV and dQ, each module loaded once\n");
    fake->arg_sizes[1] = 1;

    /* nothing to do: no launch */
    p = problem(2, 0, 10, 4, 4, 64, 1);
    int launches = fake->launch_calls;
    st = fa_rtc_launch_simt_forward(&p, 2, stream, why, sizeof why);
    CHECK(st == FA_RTC_OK && fake->launch_calls == launches, "no query rows: status %d, %d launches", (int)st,
          fake->launch_calls - launches);

    /* unsupported arguments: statuses with reasons, no launch */
    p = problem(2, 100, 100, 4, 4, 300, 1);
    st = fa_rtc_launch_simt_forward(&p, 2, stream, why, sizeof why);
    CHECK(st == FA_RTC_INVALID_ARG && strstr(why, "300"), "head dim 300: status %d: %s", (int)st, why);
    p = problem(2, 100, 100, 4, 4, 64, 1);
    st = fa_rtc_launch_simt_forward(&p, 7, stream, why, sizeof why);
    CHECK(st == FA_RTC_INVALID_ARG && strstr(why, "dtype 7"), "dtype 7: status %d: %s", (int)st, why);
    p = problem(70000, 100, 100, 4, 4, 64, 1);
    st = fa_rtc_launch_simt_forward(&p, 2, stream, why, sizeof why);
    CHECK(st == FA_RTC_INVALID_ARG && strstr(why, "grid"), "batch 70000: status %d: %s", (int)st, why);
    CHECK(fake->launch_calls == launches, "no launch for an unsupported call");
    printf("ok: unsupported head dim, dtype and grid are statuses with reasons\n");

    /* a driver error: the status, the call and the driver's error string */
    fake->fail_call = "cuLaunchKernel";
    fake->fail_result = CUDA_ERROR_LAUNCH_FAILED;
    p = problem(2, 100, 100, 8, 2, 64, 1);
    st = fa_rtc_launch_simt_forward(&p, 2, stream, why, sizeof why);
    CHECK(st == FA_RTC_DRIVER_ERROR, "status %d: %s", (int)st, why);
    CHECK(strstr(why, "cuLaunchKernel") && strstr(why, "CUDA_ERROR_LAUNCH_FAILED") &&
              strstr(why, "unspecified launch failure"),
          "the message names the call and the driver's error: %s", why);
    printf("ok: a failing cuLaunchKernel: %s\n", why);
    fake->fail_call = NULL;

    const int unloads = fake->unload_calls;
    fa_rtc_launch_release();
    CHECK(fake->unload_calls == unloads + 7, "release unloads the 7 modules (3 forward, 4 backward), not %d",
          fake->unload_calls - unloads);
    printf("PASS\n");
    return 0;
}
