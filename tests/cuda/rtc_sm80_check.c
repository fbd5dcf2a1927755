/* rtc_sm80_check.c: the sm80 tensor-core family of a build whose kernels are compiled at run time
 * (-Dcuda-kernels=rtc, host/rtc_sm80.c) through the public API, against the fake driver
 * (fake_libcuda.c, named by argv[1]): the kernels NVRTC really compiles and the launches' names,
 * grids, blocks and dynamic shared memory, which must be those of the nvcc launchers
 * (sm80/launch.cuh), in order (the fake's launch log). bf16, B = 2, S = 200, H = 4:
 *   - cc 8.0 with an A100's 166912 bytes of opt-in shared memory: the d 128 causal forward, with an
 *     output whose rows are not 16-byte aligned on the ldg instance, and its split instance with split_combine_kernel under FLASHATTN_KERNELS=fwd-split=3; 128 query
 *     rows over 2048 keys in four splits by default (the rule's count for 108 SMs of two blocks
 *     each) and whole under fwd-split=1, the parts counted in fa_plan's workspace; the
 *     fused backward on bwd_kernel (bwd_grid_kernel does not fit): dsum, the dQ accumulator's
 *     memset, bwd_kernel, dq_convert; the deterministic dkdv / dq pair; an unaligned call (d 100:
 *     the ldg instance); softcap (the MOD instance); d 256's backward on bwd_kernel's 4-warp
 *     instance (141 KB; the 8-warp one's 213.5 KB do not fit), d 160's too, and its forward
 *     (169 KB) on the SIMT kernels, where d 224's fits; a failing memset
 *     as FA_ERR_BACKEND naming the driver's error;
 *   - cc 8.6 with 101376 bytes (sm_86 and sm_89): the d 96 forward; d 96's backward on the
 *     deterministic pair where bwd_kernel does not fit; d 64's on bwd_kernel; d 128's forward and
 *     backward on the SIMT kernels, none of the sm80 ones fitting; under
 *     FLASHATTN_KERNELS=sm80-fwd-stages=1 the one-stage forward at d 128 (plain and softcap) and
 *     d 256, unaligned rows still on the SIMT kernels; a d 64 softcap call on two stages (no
 *     one-stage mode 2 kernels below d 128); its split instance (cc 8.0); under
 *     the default (sm80-fwd-stages=auto) one stage on cc 8.0 at d 128 and 256, two at d 64, two
 *     on cc 9.0 at d 128 and one at d 192 (the sm80 family forced); the switch's bad values refused;
 *   - cc 9.0 with 232448 bytes under FLASHATTN_KERNELS=sm80 (the sm80 family, not the Hopper
 *     one): the fused backward on bwd_grid_kernel; d 256's on bwd_kernel in two column passes, as
 *     is d 160's (the backward pads every d from 129 to 256); with sm80-bwd-narrow on the 4-warp
 *     instance;
 *     FLASHATTN_KERNELS=sm80,sm80-backward=rows back on bwd_kernel.
 * Prints each kernel's lowered name and the seconds of the call that compiled it (NVRTC's compile,
 * a cold cache). Exit 0 when every check holds, 1 on the first that fails, 77 (meson's skip) where
 * libnvrtc cannot be opened. The kernel cache is a fresh directory of its own. */
#include "common/params.h"
#include "flashattn.h"
#include "host/rtc_compiler.h"
#include "rtc_check_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 2, S = 200, H = 4 };

static fake_cuda_state *fake;
static int arch; /* the fake device's sm, for the lowered names */

/* one expected launch: the name expression, grid, block and dynamic shared memory */
typedef struct launch {
    const char *name;
    unsigned gx, gy, gz, block, shared;
} launch;

/* The fake's launch log since it was cleared is exactly want[0..n), with the memset of the dQ
 * accumulator after the first memset_after launches (-1: no memset). */
static void expect(const char *what, const launch *want, int n, int memset_after)
{
    CHECK(fake->launch_log_len == n, "%s: %d launches, expected %d (the first: %s)", what, fake->launch_log_len, n,
          fake->launches[0].name);
    for (int i = 0; i < n; ++i) {
        const struct fake_cuda_launch *l = &fake->launches[i];
        char lowered[256];
        lowered_name_of("sm80", arch, 0, 0, want[i].name, lowered, sizeof lowered);
        CHECK(strcmp(l->name, lowered) == 0, "%s: launch %d is %s, expected %s (%s)", what, i, l->name, lowered,
              want[i].name);
        CHECK(l->grid[0] == want[i].gx && l->grid[1] == want[i].gy && l->grid[2] == want[i].gz &&
                  l->block[0] == want[i].block && l->block[1] == 1 && l->block[2] == 1 &&
                  l->shared_bytes == want[i].shared,
              "%s: launch %d (%s): grid (%u, %u, %u), block %u, %u shared bytes; expected (%u, %u, %u), %u, %u", what,
              i, want[i].name, l->grid[0], l->grid[1], l->grid[2], l->block[0], l->shared_bytes, want[i].gx,
              want[i].gy, want[i].gz, want[i].block, want[i].shared);
        printf("ok: %s: %s = %s, grid (%u, %u, %u), block %u, %u shared bytes\n", what, want[i].name, l->name,
               l->grid[0], l->grid[1], l->grid[2], l->block[0], l->shared_bytes);
    }
    if (memset_after >= 0)
        CHECK(fake->memset_calls == 1 && fake->launches_at_memset == memset_after,
              "%s: %d memsets, the last after launch %d; expected one after launch %d", what, fake->memset_calls,
              fake->launches_at_memset, memset_after);
    else
        CHECK(fake->memset_calls == 0, "%s: %d memsets, expected none", what, fake->memset_calls);
}

static void clear_log(void)
{
    fake->launch_log_len = 0;
    fake->memset_calls = 0;
    fake->launches_at_memset = -1;
}

/* bf16 [B][S][H][d] tensors, a forward and a backward call over them */
typedef struct problem {
    fa_context *ctx;
    void *bufs[9];
    fa_fwd_args fwd;
    fa_bwd_args bwd;
} problem;

static problem make_problem(fa_context *ctx, int64_t d)
{
    problem p;
    memset(&p, 0, sizeof p);
    p.ctx = ctx;
    const int64_t shape[4] = {B, S, H, d}, lse_shape[3] = {B, H, S};
    const size_t bytes = (size_t)B * S * H * (size_t)d * 2;
    for (int i = 0; i < 8; ++i)
        p.bufs[i] = device_zeros(ctx, bytes);
    p.bufs[8] = device_zeros(ctx, (size_t)B * H * S * 4);
    attention_args(p.bufs, FA_DTYPE_BF16, shape, lse_shape, &p.fwd, &p.bwd);
    p.fwd.opts.causal = 1;
    p.bwd.opts = p.fwd.opts;
    return p;
}

static void free_problem(problem *p)
{
    for (int i = 0; i < 9; ++i)
        fa_free(p->ctx, p->bufs[i]);
}

static void forward(problem *p, const char *what)
{
    clear_log();
    const double t0 = now_seconds();
    fa_status st = fa_forward(p->ctx, &p->fwd);
    CHECK(st == FA_SUCCESS, "%s: fa_forward: %s", what, fa_context_last_error(p->ctx));
    printf("ok: %s: %.2f s (the kernel's NVRTC compile, a cold cache)\n", what, now_seconds() - t0);
}

static void backward(problem *p, const char *what)
{
    clear_log();
    const double t0 = now_seconds();
    fa_status st = fa_backward(p->ctx, &p->bwd);
    CHECK(st == FA_SUCCESS, "%s: fa_backward: %s", what, fa_context_last_error(p->ctx));
    printf("ok: %s: %.2f s (NVRTC's compiles of the kernels not yet cached)\n", what, now_seconds() - t0);
}

static fa_context *open_device_cc(int major, int minor, int optin, const char *kernels)
{
    fake->cc_major = major;
    fake->cc_minor = minor;
    fake->shared_optin = optin;
    fake->shared_per_sm = optin + 1024; /* an SM's shared memory: a block's limit and the 1 KB reserved */
    arch = 10 * major + minor;
    if (kernels)
        setenv("FLASHATTN_KERNELS", kernels, 1);
    else
        unsetenv("FLASHATTN_KERNELS");
    fa_context *ctx = NULL;
    fa_status st = fa_context_create(&ctx, "cuda", 0);
    CHECK(st == FA_SUCCESS, "fa_context_create(cuda): %s", fa_last_error());
    return ctx;
}

static fa_context *open_device(int major, int optin, const char *kernels)
{
    return open_device_cc(major, 0, optin, kernels);
}

/* Every launch since the log was cleared is a SIMT kernel's (and there was one). */
static void expect_simt(const char *what)
{
    CHECK(fake->launch_log_len > 0, "%s: no launch", what);
    for (int i = 0; i < fake->launch_log_len; ++i)
        CHECK(strstr(fake->launches[i].name, "simt") != NULL, "%s: launch %d is %s, not a SIMT kernel", what, i,
              fake->launches[i].name);
    printf("ok: %s: %d SIMT launches (%s)\n", what, fake->launch_log_len,
           fake->launches[fake->launch_log_len - 1].name);
}

#define N(a) ((int)(sizeof a / sizeof a[0]))

/* Split keys on cc 8.0 (see the top); p: the [B][S][H][128] causal problem. */
static void check_split(problem *p)
{
    fa_context *forced = open_device(8, 166912, "sm80-fwd-stages=2,fwd-split=3");
    fa_context *const own = p->ctx;
    p->ctx = forced;
    forward(p, "cc 8.0 bf16 d128 causal forward, fwd-split=3");
    p->ctx = own;
    const launch three[] = {
        {"fa_gpu::sm80::forward_kernel<__nv_bfloat16, 128, true, 0, false, true>", 2, H, B * 3, 128,
         2 * (128 + 4 * 64) * 136},
        {"fa_gpu::split_combine_kernel<__nv_bfloat16, 128>", (B * S * H + 3) / 4, 1, 1, 128, 0},
    };
    expect("cc 8.0 forward in three splits", three, N(three), -1);
    fa_context_destroy(forced);

    enum { SQ = 128, SK = 2048, D = 128, SPLITS = 4 };
    fa_context *rule = open_device(8, 166912, "sm80-fwd-stages=2"), *plain = open_device(8, 166912, "sm80-fwd-stages=2,fwd-split=1");
    void *bufs[5];
    const fa_fwd_args a = long_keys_call(plain, SQ, SK, H, D, bufs);
    fa_plan_info whole_plan, split_plan;
    clear_log();
    CHECK(fa_forward(plain, &a) == FA_SUCCESS && fa_plan(plain, &a, &whole_plan) == FA_SUCCESS, "long keys: %s",
          fa_context_last_error(plain));
    const launch whole[] = {{"fa_gpu::sm80::forward_kernel<__nv_bfloat16, 128, true, 0>", 1, H, 1, 128,
                             2 * (128 + 4 * 64) * 136}};
    expect("cc 8.0 long keys, fwd-split=1: whole", whole, N(whole), -1);
    clear_log();
    CHECK(fa_forward(rule, &a) == FA_SUCCESS && fa_plan(rule, &a, &split_plan) == FA_SUCCESS,
          "long keys, by the rule: %s", fa_context_last_error(rule));
    const launch split[] = {
        {"fa_gpu::sm80::forward_kernel<__nv_bfloat16, 128, true, 0, false, true>", 1, H, SPLITS, 128,
         2 * (128 + 4 * 64) * 136},
        {"fa_gpu::split_combine_kernel<__nv_bfloat16, 128>", SQ * H / 4, 1, 1, 128, 0},
    };
    expect("cc 8.0 long keys, by the rule", split, N(split), -1);
    const int64_t parts = 4 * (int64_t)SPLITS * SQ * H * (D + 1);
    CHECK(split_plan.workspace_fwd == whole_plan.workspace_fwd + parts, "the forward workspace: %lld split, %lld whole",
          (long long)split_plan.workspace_fwd, (long long)whole_plan.workspace_fwd);
    printf("ok: the plan counts the split parts' %lld bytes\n", (long long)parts);
    for (int i = 0; i < 5; ++i)
        fa_free(plain, bufs[i]);
    fa_context_destroy(rule);
    fa_context_destroy(plain);
    unsetenv("FLASHATTN_KERNELS");
}

int main(int argc, char **argv)
{
    char why[2048];
    setvbuf(stdout, NULL, _IONBF, 0);
    CHECK(argc == 2, "usage: rtc_sm80_check FAKE_LIBCUDA");
    if (!fa_rtc_nvrtc_version(why, sizeof why)) {
        printf("SKIP: %s\n", why);
        return SKIP;
    }
    check_cache_dir("/tmp/fa-rtc-sm80-XXXXXX");
    setenv("FLASHATTN_CUDA_DRIVER_LIBRARY", argv[1], 1);
    fake = fake_cuda_open(argv[1], NULL);
    fake->device_count = 1;
    fake->multiprocessors = 108;
    fake->total_mem = (size_t)1 << 30;
    fake->arg_sizes[0] = 0;

    /* cc 8.0, an A100's opt-in shared memory */
    fa_context *ctx = open_device(8, 166912, "sm80-fwd-stages=2");
    problem p = make_problem(ctx, 128);
    /* 128 query rows per block; Q and double-buffered K, V of 136-element rows */
    forward(&p, "cc 8.0 bf16 d128 causal forward");
    const launch fwd[] = {{"fa_gpu::sm80::forward_kernel<__nv_bfloat16, 128, true, 0>", 2, H, B, 128,
                           2 * (128 + 4 * 64) * 136}};
    expect("cc 8.0 forward", fwd, N(fwd), -1);
    /* an output one element into its buffer, so that its rows are not 16-byte aligned: the ldg
     * instance, which stores O element by element (the cp.async one's 16-byte stores would fault) */
    {
        const size_t o_bytes = (size_t)B * S * H * 128 * 2;
        void *o_buf = device_zeros(ctx, o_bytes + 16);
        const fa_tensor o = p.fwd.o;
        p.fwd.o.data = (char *)o_buf + 2;
        forward(&p, "cc 8.0 bf16 d128 causal forward, O not 16-byte aligned");
        const launch odd[] = {{"fa_gpu::sm80::forward_kernel<__nv_bfloat16, 128, false, 0>", 2, H, B, 128,
                               2 * (128 + 4 * 64) * 136}};
        expect("cc 8.0 forward, O not aligned", odd, N(odd), -1);
        p.fwd.o = o;
        fa_free(ctx, o_buf);
    }
    check_split(&p);

    /* the fused backward: bwd_grid_kernel's 179200 bytes do not fit, so bwd_kernel */
    backward(&p, "cc 8.0 bf16 d128 backward");
    const launch fused[] = {
        {"fa_gpu::dsum_kernel<__nv_bfloat16>", (S + 15) / 16, H, B, 128, 0},
        {"fa_gpu::sm80::bwd_kernel<__nv_bfloat16, 128, true, 0>", 2, H, B, 256,
         2 * (2 * 128 * 136 + 4 * 64 * 136 + 128 * 72) + 4 * 4 * 64},
        {"fa_gpu::dq_convert_kernel<__nv_bfloat16, 128>", (S * 16 + 255) / 256, H, B, 256, 0},
    };
    expect("cc 8.0 fused backward", fused, N(fused), 1);
    {
        /* under FLASHATTN_KERNELS=dsum-zero the same launches, dsum_kernel clearing the accumulator's
         * rows of 128 floats (fa_gpu_params.dq_zero_cols, in the params every launch gets) and no memset */
        fa_context *zero = open_device(8, 166912, "sm80-fwd-stages=2,dsum-zero"), *own = p.ctx;
        p.ctx = zero;
        fake->arg_sizes[0] = sizeof(fa_gpu_params);
        backward(&p, "cc 8.0 bf16 d128 backward, dsum-zero");
        fake->arg_sizes[0] = 0;
        fa_gpu_params kp;
        memcpy(&kp, fake->args[0], sizeof kp);
        CHECK(kp.dq_zero_cols == 128, "dsum-zero: dq_zero_cols %lld, expected 128", (long long)kp.dq_zero_cols);
        expect("cc 8.0 fused backward, dsum-zero", fused, N(fused), -1);
        p.ctx = own;
        fa_context_destroy(zero);
    }

    p.bwd.opts.deterministic = 1;
    backward(&p, "cc 8.0 bf16 d128 deterministic backward");
    const launch det[] = {
        {"fa_gpu::dsum_kernel<__nv_bfloat16>", (S + 15) / 16, H, B, 128, 0},
        {"fa_gpu::sm80::dkdv_kernel<__nv_bfloat16, 128, 32, true>", 4, H, B, 128, 2 * 6 * 64 * 136 + 4 * 4 * 32},
        {"fa_gpu::sm80::dq_kernel<__nv_bfloat16, 128, true>", 4, H, B, 128, 2 * 6 * 64 * 136},
    };
    expect("cc 8.0 deterministic backward", det, N(det), -1);
    p.bwd.opts.deterministic = 0;

    /* a score modifier: the MOD instance (mode 2, its tests made at run time) */
    p.fwd.opts.softcap = 30.0f;
    forward(&p, "cc 8.0 bf16 d128 softcap forward");
    const launch capped[] = {{"fa_gpu::sm80::forward_kernel<__nv_bfloat16, 128, true, 2, true>", 2, H, B, 128,
                              2 * (128 + 4 * 64) * 136}};
    expect("cc 8.0 softcap forward", capped, N(capped), -1);
    p.fwd.opts.softcap = 0.0f;

    /* a failing memset of the dQ accumulator: FA_ERR_BACKEND with the driver's error */
    fake->fail_call = "cuMemsetD8Async";
    fake->fail_result = 700; /* CUDA_ERROR_ILLEGAL_ADDRESS */
    fa_status st = fa_backward(ctx, &p.bwd);
    const char *msg = fa_context_last_error(ctx);
    CHECK(st == FA_ERR_BACKEND && strstr(msg, "cuMemsetD8Async") && strstr(msg, "CUDA_ERROR_ILLEGAL_ADDRESS"),
          "failing memset: status %d: %s", (int)st, msg);
    printf("ok: a failing memset: %s\n", msg);
    fake->fail_call = NULL;
    free_problem(&p);

    /* d 100: rows of 200 bytes are not 16-byte aligned, so the ldg instance at padded d 128 */
    p = make_problem(ctx, 100);
    forward(&p, "cc 8.0 bf16 d100 (unaligned) forward");
    const launch unaligned[] = {{"fa_gpu::sm80::forward_kernel<__nv_bfloat16, 128, false, 0>", 2, H, B, 128,
                                 2 * (128 + 4 * 64) * 136}};
    expect("cc 8.0 unaligned forward", unaligned, N(unaligned), -1);
    free_problem(&p);

    /* d 256's backward: the 8-warp bwd_kernel's 213512 bytes do not fit, so its 4-warp instance, 64
     * keys a block in two column passes: K, V [64][264], Q, dO [2][32][264], dS^T [64][40], LSE and
     * D: 140800 bytes; d 160 is padded to it */
    p = make_problem(ctx, 256);
    {
        const launch nar[] = {
            {"fa_gpu::dsum_kernel<__nv_bfloat16>", (S + 15) / 16, H, B, 128, 0},
            {"fa_gpu::sm80::bwd_kernel<__nv_bfloat16, 256, true, 0, false, 4>", (S + 63) / 64 * 2, H, B, 128,
             2 * (2 * 64 * 264 + 4 * 32 * 264 + 64 * 40) + 4 * 4 * 32},
            {"fa_gpu::dq_convert_kernel<__nv_bfloat16, 256>", (S * 32 + 255) / 256, H, B, 256, 0},
        };
        const int nar_d[2] = {256, 160};
        for (int i = 0; i < 2; ++i) {
            problem q = make_problem(ctx, nar_d[i]);
            backward(&q, nar_d[i] == 256 ? "cc 8.0 bf16 d256 backward" : "cc 8.0 bf16 d160 backward");
            expect("cc 8.0 backward on the narrow d 256 instance", nar, N(nar), 1);
            free_problem(&q);
        }
    }
    /* and its forward's 168960 bytes (Q [64][264], K and V [2][64][264]) do not fit either */
    forward(&p, "cc 8.0 bf16 d256 forward (SIMT)");
    expect_simt("cc 8.0 d 256 forward");
    free_problem(&p);
    /* d 224's 148480 bytes fit */
    p = make_problem(ctx, 224);
    forward(&p, "cc 8.0 bf16 d224 forward");
    const launch f224[] = {{"fa_gpu::sm80::forward_kernel<__nv_bfloat16, 224, true, 0>", 4, H, B, 128,
                            2 * (64 + 4 * 64) * 232}};
    expect("cc 8.0 d224 forward", f224, N(f224), -1);
    free_problem(&p);
    fa_context_destroy(ctx);

    /* cc 8.6 (RTX 30 series; 8.9 has the same limit): 101376 bytes a block may opt into */
    ctx = open_device_cc(8, 6, 101376, "sm80-fwd-stages=2");
    p = make_problem(ctx, 96);
    forward(&p, "cc 8.6 bf16 d96 forward");
    const launch f96[] = {{"fa_gpu::sm80::forward_kernel<__nv_bfloat16, 96, true, 0>", 2, H, B, 128,
                           2 * (128 + 4 * 64) * 104}};
    expect("cc 8.6 d96 forward", f96, N(f96), -1);
    /* bwd_kernel's 125952 bytes do not fit; the deterministic pair's do */
    backward(&p, "cc 8.6 bf16 d96 backward");
    const launch b96[] = {
        {"fa_gpu::dsum_kernel<__nv_bfloat16>", (S + 15) / 16, H, B, 128, 0},
        {"fa_gpu::sm80::dkdv_kernel<__nv_bfloat16, 96, 32, true>", 4, H, B, 128, 2 * 6 * 64 * 104 + 4 * 4 * 32},
        {"fa_gpu::sm80::dq_kernel<__nv_bfloat16, 96, true>", 4, H, B, 128, 2 * 6 * 64 * 104},
    };
    expect("cc 8.6 d96 backward", b96, N(b96), -1);
    free_problem(&p);
    p = make_problem(ctx, 64);
    backward(&p, "cc 8.6 bf16 d64 backward");
    const launch b64[] = {
        {"fa_gpu::dsum_kernel<__nv_bfloat16>", (S + 15) / 16, H, B, 128, 0},
        {"fa_gpu::sm80::bwd_kernel<__nv_bfloat16, 64, true, 0>", 2, H, B, 256,
         2 * (2 * 128 * 72 + 4 * 64 * 72 + 128 * 72) + 4 * 4 * 64},
        {"fa_gpu::dq_convert_kernel<__nv_bfloat16, 64>", (S * 8 + 255) / 256, H, B, 256, 0},
    };
    expect("cc 8.6 d64 fused backward", b64, N(b64), 1);
    free_problem(&p);
    /* d 128: the forward's 104448 bytes, bwd_kernel's 158720 and the deterministic pair's 104960
     * bytes do not fit */
    p = make_problem(ctx, 128);
    forward(&p, "cc 8.6 bf16 d128 forward (SIMT)");
    expect_simt("cc 8.6 d 128 forward");
    backward(&p, "cc 8.6 bf16 d128 backward (SIMT)");
    expect_simt("cc 8.6 d 128 backward");
    free_problem(&p);
    fa_context_destroy(ctx);

    /* FLASHATTN_KERNELS=sm80-fwd-stages=1: the one-stage forward (Q and one K, V tile: 69632 bytes
     * at d 128, 101376 at d 256) fits where two stages do not; unaligned rows have no one-stage
     * kernel, so d 100 stays on the SIMT ones */
    ctx = open_device_cc(8, 6, 101376, "sm80-fwd-stages=1");
    p = make_problem(ctx, 128);
    forward(&p, "cc 8.6 bf16 d128 forward, one stage");
    const launch one128[] = {{"fa_gpu::sm80::forward_kernel<__nv_bfloat16, 128, true, 0, false, false, 1>", 2, H, B,
                              128, 2 * (128 + 2 * 64) * 136}};
    expect("cc 8.6 d128 one-stage forward", one128, N(one128), -1);
    p.fwd.opts.softcap = 30.0f;
    forward(&p, "cc 8.6 bf16 d128 softcap forward, one stage");
    const launch capped1[] = {{"fa_gpu::sm80::forward_kernel<__nv_bfloat16, 128, true, 2, true, false, 1>", 2, H, B,
                               128, 2 * (128 + 2 * 64) * 136}};
    expect("cc 8.6 d128 one-stage softcap forward", capped1, N(capped1), -1);
    free_problem(&p);
    p = make_problem(ctx, 256);
    forward(&p, "cc 8.6 bf16 d256 forward, one stage");
    const launch one256[] = {{"fa_gpu::sm80::forward_kernel<__nv_bfloat16, 256, true, 0, false, false, 1>", 4, H, B,
                              128, 2 * (64 + 2 * 64) * 264}};
    expect("cc 8.6 d256 one-stage forward", one256, N(one256), -1);
    free_problem(&p);
    p = make_problem(ctx, 100);
    forward(&p, "cc 8.6 bf16 d100 (unaligned) forward, one stage asked for");
    expect_simt("cc 8.6 d 100 unaligned forward");
    free_problem(&p);
    fa_context_destroy(ctx);
    /* dropout and score modifiers below d 128 have no one-stage kernels: two stages there */
    ctx = open_device(8, 166912, "sm80-fwd-stages=1");
    p = make_problem(ctx, 64);
    p.fwd.opts.softcap = 30.0f;
    forward(&p, "cc 8.0 bf16 d64 softcap forward, one stage asked for");
    const launch capped64[] = {{"fa_gpu::sm80::forward_kernel<__nv_bfloat16, 64, true, 2, true, false, 2>", 2, H, B,
                                128, 2 * (128 + 4 * 64) * 72}};
    expect("cc 8.0 d64 softcap forward: two stages", capped64, N(capped64), -1);
    free_problem(&p);
    fa_context_destroy(ctx);
    /* and the split instance, in three splits */
    ctx = open_device(8, 166912, "sm80-fwd-stages=1,fwd-split=3");
    p = make_problem(ctx, 128);
    forward(&p, "cc 8.0 bf16 d128 forward, one stage, fwd-split=3");
    const launch split1[] = {
        {"fa_gpu::sm80::forward_kernel<__nv_bfloat16, 128, true, 0, false, true, 1>", 2, H, B * 3, 128,
         2 * (128 + 2 * 64) * 136},
        {"fa_gpu::split_combine_kernel<__nv_bfloat16, 128>", (B * S * H + 3) / 4, 1, 1, 128, 0},
    };
    expect("cc 8.0 one-stage forward in three splits", split1, N(split1), -1);
    free_problem(&p);
    fa_context_destroy(ctx);
    /* =auto: one stage where two do not fit or hold fewer blocks an SM: on an A100 d 128 (one block
     * of two stages, two of one) and d 256, not d 64 (two blocks either way); on an H100 not d 128 */
    ctx = open_device(8, 166912, NULL); /* auto, the default */
    const int auto_d[3] = {64, 128, 256}, auto_rows[3] = {128, 128, 64};
    for (int i = 0; i < 3; ++i) {
        const int d = auto_d[i], stages = d == 64 ? 2 : 1, rows = auto_rows[i];
        char name[128];
        snprintf(name, sizeof name, "fa_gpu::sm80::forward_kernel<__nv_bfloat16, %d, true, 0, false, false, %d>", d,
                 stages);
        p = make_problem(ctx, d);
        forward(&p, "cc 8.0 bf16 forward, sm80-fwd-stages=auto");
        const launch one[] = {{name, (S + rows - 1) / rows, H, B, 128,
                               2 * (rows + 2 * stages * 64) * (d + 8)}};
        expect("cc 8.0 forward, sm80-fwd-stages=auto", one, 1, -1);
        free_problem(&p);
    }
    fa_context_destroy(ctx);
    ctx = open_device(9, 232448, "sm80,sm80-fwd-stages=auto");
    p = make_problem(ctx, 128);
    forward(&p, "cc 9.0 bf16 d128 forward, sm80-fwd-stages=auto");
    const launch two128[] = {{"fa_gpu::sm80::forward_kernel<__nv_bfloat16, 128, true, 0, false, false, 2>", 2, H, B,
                              128, 2 * (128 + 4 * 64) * 136}};
    expect("cc 9.0 d128 forward, sm80-fwd-stages=auto: two stages", two128, N(two128), -1);
    free_problem(&p);
    fa_context_destroy(ctx);
    /* the sm80 family on an H100 under the default stages (the chooser gives d 192 to the Hopper
     * kernel's d 256 instance): d 192 on one stage (two of 133 KB hold one block an SM, one of
     * 100 KB two) */
    ctx = open_device(9, 232448, "sm80");
    p = make_problem(ctx, 192);
    forward(&p, "cc 9.0 bf16 d192 forward");
    const launch one192[] = {{"fa_gpu::sm80::forward_kernel<__nv_bfloat16, 192, true, 0, false, false, 1>",
                              (S + 63) / 64, H, B, 128, 2 * (64 + 2 * 64) * 200}};
    expect("cc 9.0 d192 forward: one stage", one192, N(one192), -1);
    free_problem(&p);
    fa_context_destroy(ctx);
    static const char *const refused[] = {"sm80-fwd-stages=3", "sm80-fwd-stages="};
    for (int i = 0; i < 2; ++i) {
        setenv("FLASHATTN_KERNELS", refused[i], 1);
        fa_context *bad = NULL;
        const fa_status st2 = fa_context_create(&bad, "cuda", 0);
        unsetenv("FLASHATTN_KERNELS");
        CHECK(st2 == FA_ERR_INVALID_ARG && bad == NULL && strstr(fa_last_error(), refused[i]), "%s: status %d: %s",
              refused[i], (int)st2, fa_last_error());
        printf("ok: %s refused: %s\n", refused[i], fa_last_error());
    }

    /* cc 9.0, an H100's opt-in shared memory, the sm80 family forced */
    ctx = open_device(9, 232448, "sm80");
    p = make_problem(ctx, 128);
    backward(&p, "cc 9.0 bf16 d128 backward");
    const launch grid[] = {
        {"fa_gpu::dsum_kernel<__nv_bfloat16>", (S + 15) / 16, H, B, 128, 0},
        {"fa_gpu::sm80::bwd_grid_kernel<__nv_bfloat16, 128, 0>", 2, H, B, 256,
         2 * (2 * 128 * 136 + 4 * 64 * 136 + 2 * 64 * 136) + 4 * 4 * 64 + 4096},
        {"fa_gpu::dq_convert_kernel<__nv_bfloat16, 128>", (S * 16 + 255) / 256, H, B, 256, 0},
    };
    expect("cc 9.0 fused backward", grid, N(grid), 1);
    free_problem(&p);

    /* d 256: two passes of 128 output columns per 128-key tile */
    p = make_problem(ctx, 256);
    backward(&p, "cc 9.0 bf16 d256 backward");
    const launch wide[] = {
        {"fa_gpu::dsum_kernel<__nv_bfloat16>", (S + 15) / 16, H, B, 128, 0},
        {"fa_gpu::sm80::bwd_kernel<__nv_bfloat16, 256, true, 0>", 2 * 2, H, B, 256,
         2 * (2 * 128 * 264 + 4 * 32 * 264 + 128 * 40) + 4 * 4 * 32},
        {"fa_gpu::dq_convert_kernel<__nv_bfloat16, 256>", (S * 32 + 255) / 256, H, B, 256, 0},
    };
    expect("cc 9.0 d256 backward", wide, N(wide), 1);
    free_problem(&p);
    /* d 160 (and every d from 129): the backward's one instance above d 128, at 256 */
    p = make_problem(ctx, 160);
    backward(&p, "cc 9.0 bf16 d160 backward");
    expect("cc 9.0 d160 backward on the d 256 instance", wide, N(wide), 1);
    free_problem(&p);
    fa_context_destroy(ctx);

    /* FLASHATTN_KERNELS=sm80-bwd-narrow: the 4-warp d 256 instance where the 8-warp one fits too */
    ctx = open_device(9, 232448, "sm80,sm80-bwd-narrow");
    p = make_problem(ctx, 256);
    backward(&p, "cc 9.0 bf16 d256 backward, sm80-bwd-narrow");
    const launch nar90[] = {
        {"fa_gpu::dsum_kernel<__nv_bfloat16>", (S + 15) / 16, H, B, 128, 0},
        {"fa_gpu::sm80::bwd_kernel<__nv_bfloat16, 256, true, 0, false, 4>", (S + 63) / 64 * 2, H, B, 128,
         2 * (2 * 64 * 264 + 4 * 32 * 264 + 64 * 40) + 4 * 4 * 32},
        {"fa_gpu::dq_convert_kernel<__nv_bfloat16, 256>", (S * 32 + 255) / 256, H, B, 256, 0},
    };
    expect("cc 9.0 d256 backward, sm80-bwd-narrow", nar90, N(nar90), 1);
    free_problem(&p);
    fa_context_destroy(ctx);

    /* FLASHATTN_KERNELS=sm80-backward=rows: bwd_kernel where bwd_grid_kernel fits */
    ctx = open_device(9, 232448, "sm80,sm80-backward=rows");
    p = make_problem(ctx, 128);
    backward(&p, "cc 9.0 bf16 d128 backward, sm80-backward=rows");
    expect("cc 9.0 sm80-backward=rows", fused, N(fused), 1);
    free_problem(&p);
    fa_context_destroy(ctx);
    unsetenv("FLASHATTN_KERNELS");
    printf("PASS\n");
    return 0;
}
