/* rtc_sm90_check.c: the Hopper family of a build whose kernels are compiled at run time
 * (-Dcuda-kernels=rtc, host/rtc_sm90.c) through the public API, against a fake driver
 * (fake_libcuda.c, argv[1], given as FLASHATTN_CUDA_DRIVER_LIBRARY) of a device of compute
 * capability 9.0 with 227 KiB of shared memory per block; NVRTC really compiles the kernels, the
 * fake runs none. The expected geometry is written out here as numbers (not read from
 * common/sm90_geometry.h), so a launcher that drifts from the nvcc-built one fails:
 *   - bf16 d 128, a plain forward: the warp-specialised kernel's wide instance with TMA (its
 *     lowered name, compiled for sm_90a), grid, 384 threads (three warpgroups), dynamic shared
 *     memory, the K and V maps' arguments to cuTensorMapEncodeTiled, the maps passed as the
 *     kernel's second parameter; the same forward causal on the instance of 128-key tiles;
 *   - its backward: dsum, the dQ accumulator cleared, the warp-specialised backward on the Q and
 *     dO maps, dQ converted, each with its grid, block and shared memory;
 *   - fp16 d 64, a plain forward; with dropout, under the chooser and FLASHATTN_KERNELS=sm90: the
 *     warp-specialised kernel's dropout instance;
 *   - bf16 d 160 and 192, plain: the forward on the d 192 instance (grid, block, shared memory;
 *     the sm80 family's under FLASHATTN_KERNELS=sm80), the backward on the d 256 kernel whose
 *     consumers split the columns (grid, block, shared memory, 64-row maps) and dQ's conversion;
 *   - a learnable sink (bf16 d 128): the forward on the MOD instance, one launch, the backward
 *     followed by dsink_kernel, SIMT under FLASHATTN_KERNELS=simt; d 128 over d_v 64: the forward
 *     on the MOD instance with V's map d_v wide, the backward on SIMT;
 *   - split keys: 128 query rows over 2048 keys (bf16 d 128, causal, one query tile per head) in
 *     four blocks per head (the rule's count for 132 SMs) followed by split_combine_kernel, the
 *     parts counted in fa_plan's workspace; in one under FLASHATTN_KERNELS=fwd-split=1; =3
 *     splits the first problem's forward (24 blocks, which the rule leaves whole) in three; =0
 *     and =auto are refused; on a stream being captured, a fresh context (no scratch yet) runs the
 *     long-key forward whole and, once its scratch has grown outside the capture, split;
 *   - with "--no-tensor-maps" (argv[2]; argv[1] then a fake built without cuTensorMapEncodeTiled,
 *     as drivers older than CUDA 12 are): the same plain forward runs on another family.
 * Exit 0 when every check holds, 1 on the first that fails, 77 (meson's skip) with the reason
 * where libnvrtc cannot be opened. The kernel cache is a fresh directory of its own. */
#include "common/params.h"
#include "flashattn.h"
#include "host/rtc_compiler.h"
#include "rtc_check_common.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 2, S = 300, H = 4, DMAX = 192 };

typedef struct problem {
    void *q, *k, *v, *o, *lse, *dout, *dq, *dk, *dv;
    fa_fwd_args fwd;
    fa_bwd_args bwd;
} problem;

/* [B][S][H][d] tensors of dtype (the fake's memory is the host's); buffers sized for DMAX */
static problem make_problem(fa_context *ctx, fa_dtype dtype, int64_t d)
{
    problem p;
    memset(&p, 0, sizeof p);
    const int64_t shape[4] = {B, S, H, d}, lse_shape[3] = {B, H, S};
    const size_t bytes = (size_t)B * S * H * DMAX * 2;
    void **t[] = {&p.q, &p.k, &p.v, &p.o, &p.dout, &p.dq, &p.dk, &p.dv};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; ++i)
        *t[i] = device_zeros(ctx, bytes);
    p.lse = device_zeros(ctx, (size_t)B * H * S * 4);
    void *const bufs[9] = {p.q, p.k, p.v, p.o, p.dout, p.dq, p.dk, p.dv, p.lse};
    attention_args(bufs, dtype, shape, lse_shape, &p.fwd, &p.bwd);
    return p;
}

static void free_problem(fa_context *ctx, problem *p)
{
    void *bufs[] = {p->q, p->k, p->v, p->o, p->lse, p->dout, p->dq, p->dk, p->dv};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; ++i)
        fa_free(ctx, bufs[i]);
}

/* launch i of the fake's log (0 the oldest kept) is kernel name (of family, for sm_90 with
 * suffix), on grid (x, y, z) of threads threads with shared bytes of dynamic shared memory */
static void check_launch(const fake_cuda_state *fake, int i, const char *family, char suffix, const char *name,
                         unsigned x, unsigned y, unsigned z, unsigned threads, unsigned shared)
{
    char lowered[256];
    lowered_name_of(family, 90, suffix, 1, name, lowered, sizeof lowered);
    CHECK(i >= 0 && i < fake->launch_log_len, "launch %d of %d logged", i, fake->launch_log_len);
    const fake_cuda_launch *l = &fake->launches[i];
    CHECK(strcmp(l->name, lowered) == 0, "launch %d: %s, expected %s (%s)", i, l->name, lowered, name);
    CHECK(l->grid[0] == x && l->grid[1] == y && l->grid[2] == z && l->block[0] == threads && l->block[1] == 1 &&
              l->block[2] == 1 && l->shared_bytes == shared,
          "%s: grid (%u, %u, %u), block %u x %u x %u, %u shared bytes; expected (%u, %u, %u), %u, %u", name,
          l->grid[0], l->grid[1], l->grid[2], l->block[0], l->block[1], l->block[2], l->shared_bytes, x, y, z, threads,
          shared);
    printf("ok: %s (%s): grid (%u, %u, %u), %u threads, %u bytes\n", name, l->name, x, y, z, threads, shared);
}

/* map i of the fake's log: view data, dtype code, [B][S][H][d] contiguous of 2-byte elements, boxes
 * of 64 columns x box_rows rows, the 128-byte swizzle, L2 promotion by 256 bytes, no OOB fill */
static void check_map(const fake_cuda_state *fake, int i, const void *data, int data_type, unsigned long long d,
                      unsigned box_rows, const char *what)
{
    CHECK(i >= 0 && i < fake->tensor_map_log_len, "map %d of %d logged", i, fake->tensor_map_log_len);
    const fake_cuda_tensor_map *m = &fake->tensor_maps[i];
    CHECK(m->address == data && m->data_type == data_type && m->rank == 4, "%s map: address %p (expected %p), type %d, rank %u",
          what, m->address, data, m->data_type, m->rank);
    CHECK(m->dims[0] == d && m->dims[1] == S && m->dims[2] == H && m->dims[3] == B,
          "%s map: dims %llu %llu %llu %llu", what, m->dims[0], m->dims[1], m->dims[2], m->dims[3]);
    CHECK(m->strides[0] == H * d * 2 && m->strides[1] == d * 2 && m->strides[2] == S * H * d * 2,
          "%s map: strides %llu %llu %llu", what, m->strides[0], m->strides[1], m->strides[2]);
    CHECK(m->box[0] == 64 && m->box[1] == box_rows && m->box[2] == 1 && m->box[3] == 1,
          "%s map: box %u %u %u %u", what, m->box[0], m->box[1], m->box[2], m->box[3]);
    CHECK(m->element_strides[0] == 1 && m->element_strides[1] == 1 && m->element_strides[2] == 1 &&
              m->element_strides[3] == 1,
          "%s map: element strides", what);
    CHECK(m->interleave == 0 && m->swizzle == 3 && m->l2_promotion == 3 && m->oob_fill == 0,
          "%s map: interleave %d, swizzle %d, L2 promotion %d, OOB fill %d", what, m->interleave, m->swizzle,
          m->l2_promotion, m->oob_fill);
    printf("ok: the %s map: dims (%llu, %d, %d, %d), strides (%llu, %llu, %llu), box (64, %u, 1, 1)\n", what, d, S, H,
           B, m->strides[0], m->strides[1], m->strides[2], box_rows);
}

/* the driver without cuTensorMapEncodeTiled: the plain forward that the sm90 family would take
 * runs on another family (no sm90 kernel launched) */
static int check_without_tensor_maps(fa_context *ctx, fake_cuda_state *fake)
{
    problem p = make_problem(ctx, FA_DTYPE_BF16, 128);
    const int launches = fake->launch_calls;
    fa_status st = fa_forward(ctx, &p.fwd);
    CHECK(st == FA_SUCCESS, "fa_forward: %s", fa_context_last_error(ctx));
    CHECK(fake->launch_calls > launches && fake->tensor_map_calls == 0, "%d launches, %d maps",
          fake->launch_calls - launches, fake->tensor_map_calls);
    const char *last = fake->launches[fake->launch_log_len - 1].name;
    CHECK(strstr(last, "4sm90") == NULL, "a driver without tensor maps launched %s", last);
    printf("ok: without cuTensorMapEncodeTiled the bf16 d 128 forward ran %s\n", last);
    free_problem(ctx, &p);
    return 0;
}

/* A context opened with FLASHATTN_KERNELS=kernels (read when a context opens), the variable unset
 * again */
static fa_context *context_with(const char *kernels)
{
    setenv("FLASHATTN_KERNELS", kernels, 1);
    fa_context *ctx = NULL;
    const fa_status st = fa_context_create(&ctx, "cuda", 0);
    unsetenv("FLASHATTN_KERNELS");
    CHECK(st == FA_SUCCESS, "fa_context_create(cuda) with FLASHATTN_KERNELS=%s: %s", kernels, fa_last_error());
    return ctx;
}

/* Split keys (see the top): the long-key problem's forward and plan by default and under
 * fwd-split=1, the short one by default and under =3, and =0 and =auto refused. */
static void check_split(fa_context *ctx, fake_cuda_state *fake)
{
    enum { SQ = 128, SK = 2048, D = 128, SPLITS = 4 };
    void *bufs[5];
    const fa_fwd_args a = long_keys_call(ctx, SQ, SK, H, D, bufs);
    const char *ws = "fa_gpu::sm90::ws_forward_kernel<__nv_bfloat16, 128, false, true>";
    const char *ws_split = "fa_gpu::sm90::ws_forward_kernel<__nv_bfloat16, 128, false, true, false, false, true>";
    const unsigned smem = (128 + 2 * 3 * 128) * 128 * 2 + 1024;
    fa_plan_info plain_plan, split_plan;
    fa_context *whole = context_with("fwd-split=1");
    fa_status st = fa_forward(whole, &a);
    CHECK(st == FA_SUCCESS && fa_plan(whole, &a, &plain_plan) == FA_SUCCESS, "fa_forward, one split: %s",
          fa_context_last_error(whole));
    check_launch(fake, fake->launch_log_len - 1, "sm90", 'a', ws, 1, H, 1, 384, smem);
    fa_context_destroy(whole);

    int launches = fake->launch_calls;
    st = fa_forward(ctx, &a);
    CHECK(st == FA_SUCCESS && fa_plan(ctx, &a, &split_plan) == FA_SUCCESS, "fa_forward, split: %s",
          fa_context_last_error(ctx));
    CHECK(fake->launch_calls == launches + 2, "split: %d launches", fake->launch_calls - launches);
    check_launch(fake, fake->launch_log_len - 2, "sm90", 'a', ws_split, 1, H, SPLITS, 384, smem);
    check_launch(fake, fake->launch_log_len - 1, "sm90", 'a', "fa_gpu::split_combine_kernel<__nv_bfloat16, 128>",
                 (SQ * H + 3) / 4, 1, 1, 128, 0);
    const int64_t parts = 4 * (int64_t)SPLITS * SQ * H * (D + 1); /* fp32 O and LSE of each part */
    CHECK(split_plan.workspace_fwd == plain_plan.workspace_fwd + parts,
          "the plan's forward workspace: %lld bytes split, %lld not, expected %lld more",
          (long long)split_plan.workspace_fwd, (long long)plain_plan.workspace_fwd, (long long)parts);
    printf("ok: the plan counts the split parts' %lld bytes\n", (long long)parts);

    /* the [B][S][H][128] problem's causal forward (three query tiles a head, 24 blocks, 3 key
     * tiles): whole by the rule, in three splits under =3 */
    problem p = make_problem(ctx, FA_DTYPE_BF16, 128);
    p.fwd.opts.causal = 1;
    launches = fake->launch_calls;
    st = fa_forward(ctx, &p.fwd);
    CHECK(st == FA_SUCCESS && fake->launch_calls == launches + 1, "fa_forward, short keys: %s, %d launches",
          fa_context_last_error(ctx), fake->launch_calls - launches);
    check_launch(fake, fake->launch_log_len - 1, "sm90", 'a', ws, 3, H, B, 384, smem);
    fa_context *split = context_with("fwd-split=3");
    st = fa_forward(split, &p.fwd);
    CHECK(st == FA_SUCCESS, "fa_forward, 3 splits: %s", fa_context_last_error(split));
    check_launch(fake, fake->launch_log_len - 2, "sm90", 'a', ws_split, 3, H, B * 3, 384, smem);
    check_launch(fake, fake->launch_log_len - 1, "sm90", 'a', "fa_gpu::split_combine_kernel<__nv_bfloat16, 128>",
                 (B * S * H + 3) / 4, 1, 1, 128, 0);
    fa_context_destroy(split);
    free_problem(ctx, &p);

    /* a captured stream: no scratch to grow, so the first call runs whole; after one call outside
     * the capture the scratch holds the parts, and a captured call splits */
    fa_context *fresh = NULL;
    CHECK(fa_context_create(&fresh, "cuda", 0) == FA_SUCCESS, "fa_context_create: %s", fa_last_error());
    const int calls[3][2] = {{1, 1}, {0, 2}, {1, 2}}; /* capture status, launches expected */
    for (int i = 0; i < 3; ++i) {
        fake->capture_status = calls[i][0];
        launches = fake->launch_calls;
        st = fa_forward(fresh, &a);
        fake->capture_status = 0;
        CHECK(st == FA_SUCCESS && fake->launch_calls == launches + calls[i][1],
              "call %d, %s: %s, %d launches, expected %d", i, calls[i][0] ? "captured" : "not captured",
              fa_context_last_error(fresh), fake->launch_calls - launches, calls[i][1]);
        check_launch(fake, fake->launch_log_len - calls[i][1], "sm90", 'a', calls[i][1] == 2 ? ws_split : ws, 1, H,
                     calls[i][1] == 2 ? SPLITS : 1, 384, smem);
    }
    printf("ok: a captured stream splits only once the scratch holds the parts\n");
    fa_context_destroy(fresh);

    static const char *const refused[] = {"fwd-split=0", "fwd-split=auto", "fwd-split=129"};
    for (int i = 0; i < 3; ++i) {
        setenv("FLASHATTN_KERNELS", refused[i], 1);
        fa_context *bad = NULL;
        st = fa_context_create(&bad, "cuda", 0);
        unsetenv("FLASHATTN_KERNELS");
        CHECK(st == FA_ERR_INVALID_ARG && bad == NULL && strstr(fa_last_error(), refused[i]), "%s: status %d: %s",
              refused[i], (int)st, fa_last_error());
        printf("ok: %s refused: %s\n", refused[i], fa_last_error());
    }
    for (int i = 0; i < 5; ++i)
        fa_free(ctx, bufs[i]);
}

int main(int argc, char **argv)
{
    char why[2048];
    setvbuf(stdout, NULL, _IONBF, 0);
    CHECK(argc == 2 || (argc == 3 && strcmp(argv[2], "--no-tensor-maps") == 0),
          "usage: rtc_sm90_check FAKE_LIBCUDA [--no-tensor-maps]");
    if (!fa_rtc_nvrtc_version(why, sizeof why)) {
        printf("SKIP: %s\n", why);
        return SKIP;
    }
    check_cache_dir("/tmp/fa-rtc-sm90-XXXXXX");
    unsetenv("FLASHATTN_KERNELS");

    setenv("FLASHATTN_CUDA_DRIVER_LIBRARY", argv[1], 1);
    void *fake_lib = NULL;
    fake_cuda_state *fake = fake_cuda_open(argv[1], &fake_lib);
    const int has_encoder = dlsym(fake_lib, "cuTensorMapEncodeTiled") != NULL;
    CHECK(has_encoder == (argc == 2), "%s %s cuTensorMapEncodeTiled", argv[1], has_encoder ? "has" : "lacks");
    fake->device_count = 1;
    fake->cc_major = 9;
    fake->cc_minor = 0;
    fake->multiprocessors = 132;
    fake->shared_optin = 232448;
    fake->total_mem = (size_t)1 << 30;

    fa_context *ctx = NULL;
    fa_status st = fa_context_create(&ctx, "cuda", 0);
    CHECK(st == FA_SUCCESS, "fa_context_create(cuda): %s", fa_last_error());
    if (argc == 3) {
        check_without_tensor_maps(ctx, fake);
        fa_context_destroy(ctx);
        printf("PASS\n");
        return 0;
    }

    /* bf16 d 128, plain: ws_forward_kernel's wide instance with TMA, one block per 128 query rows,
     * three warpgroups, Q and 2 stages of K and V tiles of 160 keys plus 1 KiB of alignment */
    problem p = make_problem(ctx, FA_DTYPE_BF16, 128);
    fake->arg_sizes[0] = sizeof(fa_gpu_params);
    fake->arg_sizes[1] = 256; /* the two maps */
    fake->arg_sizes[2] = 0;
    double t0 = now_seconds();
    st = fa_forward(ctx, &p.fwd);
    CHECK(st == FA_SUCCESS, "fa_forward: %s", fa_context_last_error(ctx));
    printf("the bf16 d 128 forward's first call (its compile): %.1f s\n", now_seconds() - t0);
    fake->arg_sizes[0] = 0;
    CHECK(fake->launch_calls == 1 && fake->tensor_map_calls == 2, "%d launches, %d maps", fake->launch_calls,
          fake->tensor_map_calls);
    check_launch(fake, fake->launch_log_len - 1, "sm90", 'a',
                 "fa_gpu::sm90::ws_forward_kernel<__nv_bfloat16, 128, false, true, true>", 3, H, B, 384,
                 (128 + 2 * 2 * 160) * 128 * 2 + 1024);
    check_map(fake, 0, p.k, 9, 128, 160, "K");
    check_map(fake, 1, p.v, 9, 128, 160, "V");
    uint64_t first, second;
    memcpy(&first, fake->args[1], sizeof first);
    memcpy(&second, fake->args[1] + 128, sizeof second);
    CHECK(first == 1 && second == 2, "the kernel's maps hold the encoder's calls %llu and %llu",
          (unsigned long long)first, (unsigned long long)second);
    printf("ok: the kernel's second parameter holds the K and V maps\n");

    /* the same forward causal: the instance of 128-key tiles, 3 stages of them beside Q */
    p.fwd.opts.causal = 1;
    t0 = now_seconds();
    st = fa_forward(ctx, &p.fwd);
    CHECK(st == FA_SUCCESS, "fa_forward: %s", fa_context_last_error(ctx));
    printf("the bf16 d 128 causal forward's first call (its compile): %.1f s\n", now_seconds() - t0);
    p.fwd.opts.causal = 0;
    CHECK(fake->launch_calls == 2 && fake->tensor_map_calls == 4, "%d launches, %d maps", fake->launch_calls,
          fake->tensor_map_calls);
    check_launch(fake, fake->launch_log_len - 1, "sm90", 'a',
                 "fa_gpu::sm90::ws_forward_kernel<__nv_bfloat16, 128, false, true>", 3, H, B, 384,
                 (128 + 2 * 3 * 128) * 128 * 2 + 1024);
    check_map(fake, 2, p.k, 9, 128, 128, "causal K");
    check_map(fake, 3, p.v, 9, 128, 128, "causal V");

    /* its backward: dsum (16 rows per block of 128 threads), the fp32 dQ accumulator cleared by a
     * memset, the warp-specialised backward on Q and dO maps of 64-row boxes (128 keys per block, K,
     * V, dS^T, dQ and 3 query-side stages), dQ converted (256 elements per block); every launch gets
     * the one params struct, the last one's recorded */
    const int launches = fake->launch_calls, memsets = fake->memset_calls;
    fake->arg_sizes[0] = sizeof(fa_gpu_params);
    t0 = now_seconds();
    st = fa_backward(ctx, &p.bwd);
    CHECK(st == FA_SUCCESS, "fa_backward: %s", fa_context_last_error(ctx));
    printf("the bf16 d 128 backward's first call (its compiles): %.1f s\n", now_seconds() - t0);
    fake->arg_sizes[0] = 0;
    fa_gpu_params bwd_params;
    memcpy(&bwd_params, fake->args[0], sizeof bwd_params);
    CHECK(fake->launch_calls == launches + 3 && fake->memset_calls == memsets + 1 && fake->tensor_map_calls == 6 &&
              bwd_params.dq_zero_cols == 0,
          "backward: %d launches, %d memsets, %d maps, dq_zero_cols %lld", fake->launch_calls - launches,
          fake->memset_calls - memsets, fake->tensor_map_calls, (long long)bwd_params.dq_zero_cols);
    const int n = fake->launch_log_len;
    check_launch(fake, n - 3, "sm90", 'a', "fa_gpu::dsum_kernel<__nv_bfloat16>", (S + 15) / 16, H, B, 128, 0);
    check_launch(fake, n - 2, "sm90", 'a', "fa_gpu::sm90::ws_backward_kernel<__nv_bfloat16, 128, 0, false, true>",
                 (S + 127) / 128, H, B, 384,
                 (2 * 128 * 128 + 128 * 64) * 2 + 64 * 128 * 4 + 2 * 3 * 64 * 128 * 2 + 1024);
    check_launch(fake, n - 1, "sm90", 'a', "fa_gpu::dq_convert_kernel<__nv_bfloat16, 128, 128, true>", (S * 16 + 255) / 256,
                 H, B, 256, 0);
    check_map(fake, 4, p.q, 9, 128, 64, "Q");
    check_map(fake, 5, p.dout, 9, 128, 64, "dO");

    /* under FLASHATTN_KERNELS=dsum-zero dsum_kernel clears the accumulator's rows of 128 floats
     * (fa_gpu_params.dq_zero_cols) and no memset runs; the same three launches */
    {
        fa_context *zero = context_with("dsum-zero");
        const int zero_memsets = fake->memset_calls;
        fake->arg_sizes[0] = sizeof(fa_gpu_params);
        fake->launch_log_len = 0;
        st = fa_backward(zero, &p.bwd);
        fake->arg_sizes[0] = 0;
        memcpy(&bwd_params, fake->args[0], sizeof bwd_params);
        CHECK(st == FA_SUCCESS && fake->launch_log_len == 3 && fake->memset_calls == zero_memsets &&
                  bwd_params.dq_zero_cols == 128,
              "dsum-zero backward: %s; %d launches, %d memsets, dq_zero_cols %lld", fa_context_last_error(zero),
              fake->launch_log_len, fake->memset_calls - zero_memsets, (long long)bwd_params.dq_zero_cols);
        check_launch(fake, 0, "sm90", 'a', "fa_gpu::dsum_kernel<__nv_bfloat16>", (S + 15) / 16, H, B, 128, 0);
        fa_context_destroy(zero);
        printf("ok: dsum-zero: dsum_kernel clears the accumulator's rows, no memset\n");
    }

    /* the workspace (D, LSE log2(e), the dQ accumulator) is the context's scratch: a second backward
     * of the shape allocates and frees nothing */
    const int allocs = fake->alloc_calls, frees = fake->free_calls;
    st = fa_backward(ctx, &p.bwd);
    CHECK(st == FA_SUCCESS && fake->alloc_calls == allocs && fake->free_calls == frees,
          "second backward: %s; %d allocations, %d frees", fa_context_last_error(ctx), fake->alloc_calls - allocs,
          fake->free_calls - frees);

    free_problem(ctx, &p);

    /* fp16 d 64, plain: 4 stages of 128 keys */
    p = make_problem(ctx, FA_DTYPE_F16, 64);
    t0 = now_seconds();
    st = fa_forward(ctx, &p.fwd);
    CHECK(st == FA_SUCCESS, "fa_forward: %s", fa_context_last_error(ctx));
    printf("the fp16 d 64 forward's first call (its compile): %.1f s\n", now_seconds() - t0);
    check_launch(fake, fake->launch_log_len - 1, "sm90", 'a', "fa_gpu::sm90::ws_forward_kernel<__half, 64, false, true>",
                 3, H, B, 384, (128 + 2 * 4 * 128) * 64 * 2 + 1024);
    check_map(fake, fake->tensor_map_log_len - 2, p.k, 6, 64, 128, "fp16 K");
    check_map(fake, fake->tensor_map_log_len - 1, p.v, 6, 64, 128, "fp16 V");

    /* with dropout (no block mask): the warp-specialised kernel's dropout instance, with TMA, as the
     * plain call (4 stages of 128-key tiles at d 64), under the chooser and with
     * FLASHATTN_KERNELS=sm90 (read when a context opens) */
    p.fwd.opts.dropout_p = 0.25f;
    p.fwd.opts.dropout_seed = 7;
    fa_context *forced = context_with("sm90");
    fa_context *const dropout_ctxs[2] = {ctx, forced};
    for (int c = 0; c < 2; ++c) {
        const int maps = fake->tensor_map_calls;
        t0 = now_seconds();
        st = fa_forward(dropout_ctxs[c], &p.fwd);
        CHECK(st == FA_SUCCESS, "fa_forward: %s", fa_context_last_error(dropout_ctxs[c]));
        printf("the fp16 d 64 dropout forward's %s call (%s): %.1f s\n", c ? "second" : "first",
               c ? "FLASHATTN_KERNELS=sm90, compiled already" : "the chooser, its compile", now_seconds() - t0);
        check_launch(fake, fake->launch_log_len - 1, "sm90", 'a',
                     "fa_gpu::sm90::ws_forward_kernel<__half, 64, false, true, false, true>", 3, H, B, 384,
                     (128 + 2 * 4 * 128) * 64 * 2 + 1024);
        CHECK(fake->tensor_map_calls == maps + 2, "the dropout forward encoded %d maps", fake->tensor_map_calls - maps);
    }
    fa_context_destroy(forced);
    free_problem(ctx, &p);

    /* bf16 d 192, plain: the warp-specialised forward's d 192 instance (its stages of 64 keys: Q
     * [128][192] and three K / V stages [2][64][192], 1 KiB of alignment), at d 160 too (the
     * columns from d on zeros of the maps' bounds); FLASHATTN_KERNELS=sm80 leaves the forward to
     * the sm80 family's d 192 instance. The backward on the d 256 kernel whose consumers split the
     * columns: 64-key blocks, Q and dO maps of 64-row boxes; its shared memory: K, V [64][256], P^T
     * and dS^T [64][64] twice, two stages of Q and dO [64][256], 1 KiB of alignment; then dQ
     * converted from its accumulator of tiles in register order */
    char variant[96];
    for (int dd = 160; dd <= 192; dd += 32) {
        p = make_problem(ctx, FA_DTYPE_BF16, dd);
        st = fa_query_support(ctx, &p.fwd, 0, variant, sizeof variant);
        CHECK(st == FA_SUCCESS && strcmp(variant, "sm90-fwd-bf16-d192-wgmma-ws") == 0, "d %d forward: %d, %s", dd,
              (int)st, variant);
        st = fa_forward(ctx, &p.fwd);
        CHECK(st == FA_SUCCESS, "fa_forward: %s", fa_context_last_error(ctx));
        check_launch(fake, fake->launch_log_len - 1, "sm90", 'a',
                     "fa_gpu::sm90::ws_forward_kernel<__nv_bfloat16, 192, false, true>", (S + 127) / 128, H, B, 384,
                     (128 + 2 * 3 * 64) * 192 * 2 + 1024);
        st = fa_query_support(ctx, &p.fwd, 1, variant, sizeof variant);
        CHECK(st == FA_SUCCESS && strcmp(variant, "sm90-bwd-bf16-d256-wgmma-ws") == 0, "d %d backward: %d, %s", dd,
              (int)st, variant);
        fake->launch_log_len = 0;
        const int memsets256 = fake->memset_calls;
        st = fa_backward(ctx, &p.bwd);
        CHECK(st == FA_SUCCESS, "fa_backward: %s", fa_context_last_error(ctx));
        /* the accumulator's tiles hold rows of no sequence too: cleared by a memset */
        CHECK(fake->launch_log_len == 3 && fake->memset_calls == memsets256 + 1, "d %d backward: %d launches, %d memsets",
              dd, fake->launch_log_len, fake->memset_calls - memsets256);
        check_launch(fake, 1, "sm90", 'a', "fa_gpu::sm90::ws_backward_cols_kernel<__nv_bfloat16, false, true>",
                     (S + 63) / 64, H, B, 384, (2 * 64 * 256 + 4 * 64 * 64 + 2 * 2 * 64 * 256) * 2 + 1024);
        check_launch(fake, 2, "sm90", 'a', "fa_gpu::sm90::dq_convert_cols_kernel<__nv_bfloat16>", (S * 256 + 255) / 256,
                     H, B, 256, 0);
        check_map(fake, fake->tensor_map_log_len - 2, p.q, 9, (unsigned long long)dd, 64, "bf16 Q (backward)");
        check_map(fake, fake->tensor_map_log_len - 1, p.dout, 9, (unsigned long long)dd, 64, "bf16 dO (backward)");
        if (dd == 192) {
            fa_context *sm80 = context_with("sm80");
            st = fa_query_support(sm80, &p.fwd, 0, variant, sizeof variant);
            CHECK(st == FA_SUCCESS && strncmp(variant, "sm80-fwd-bf16-d192", 18) == 0, "d 192 forward, sm80: %d, %s",
                  (int)st, variant);
            printf("ok: the d 192 forward under FLASHATTN_KERNELS=sm80: %s\n", variant);
            fa_context_destroy(sm80);
        }
        free_problem(ctx, &p);
    }

    /* a learnable sink, bf16 d 128: the forward on the warp-specialised kernel's MOD instance
     * (which folds it in; one launch, its keys never split), the backward on the Hopper one
     * followed by the SIMT family's dsink_kernel (one block of 256 threads per query head);
     * FLASHATTN_KERNELS=simt on the SIMT kernels */
    p = make_problem(ctx, FA_DTYPE_BF16, 128);
    void *sink = device_zeros(ctx, H * sizeof(float)), *dsink = device_zeros(ctx, H * sizeof(float));
    const int64_t heads = H;
    p.fwd.opts.learnable_sink = (const float *)sink;
    p.bwd.opts.learnable_sink = (const float *)sink;
    p.bwd.dsink = fa_tensor_contiguous(dsink, FA_DTYPE_F32, 1, &heads);
    st = fa_query_support(ctx, &p.fwd, 0, variant, sizeof variant);
    CHECK(st == FA_SUCCESS && strcmp(variant, "sm90-fwd-bf16-d128-wgmma-ws+sink") == 0, "sink forward: %d, %s",
          (int)st, variant);
    fake->launch_log_len = 0;
    st = fa_forward(ctx, &p.fwd);
    CHECK(st == FA_SUCCESS, "fa_forward: %s", fa_context_last_error(ctx));
    CHECK(fake->launch_log_len == 1, "sink forward: %d launches", fake->launch_log_len);
    check_launch(fake, 0, "sm90", 'a', "fa_gpu::sm90::ws_forward_kernel<__nv_bfloat16, 128, true, true>",
                 (S + 127) / 128, H, B, 384, (128 + 2 * 3 * 128) * 128 * 2 + 1024);
    printf("ok: the sink forward on the MOD instance\n");
    fake->launch_log_len = 0;
    st = fa_backward(ctx, &p.bwd);
    CHECK(st == FA_SUCCESS, "fa_backward: %s", fa_context_last_error(ctx));
    CHECK(fake->launch_log_len >= 2 && strstr(fake->launches[fake->launch_log_len - 2].name, "dq_convert_kernel"),
          "sink backward: %d launches, the one before last %s", fake->launch_log_len,
          fake->launch_log_len >= 2 ? fake->launches[fake->launch_log_len - 2].name : "none");
    check_launch(fake, fake->launch_log_len - 1, "simt", 0, "fa_gpu::simt::dsink_kernel<256>", H, 1, 1, 256, 0);
    printf("ok: the sink backward: the Hopper backward, then dsink_kernel\n");
    fa_context *simt = context_with("simt");
    st = fa_query_support(simt, &p.fwd, 0, variant, sizeof variant);
    CHECK(st == FA_SUCCESS && strncmp(variant, "simt-", 5) == 0, "sink forward, simt: %d, %s", (int)st, variant);
    fa_context_destroy(simt);
    fa_free(ctx, sink);
    fa_free(ctx, dsink);
    free_problem(ctx, &p);

    /* d_v < d, bf16 d 128 over d_v 64: the forward on the warp-specialised kernel's MOD instance, V's
     * map 64 columns wide (its columns from 64 on zeros by the map's bounds); the backward on the
     * SIMT kernels */
    p = make_problem(ctx, FA_DTYPE_BF16, 128);
    const int64_t vshape[4] = {B, S, H, 64};
    p.fwd.v = fa_tensor_contiguous(p.v, FA_DTYPE_BF16, 4, vshape);
    p.fwd.o = fa_tensor_contiguous(p.o, FA_DTYPE_BF16, 4, vshape);
    st = fa_query_support(ctx, &p.fwd, 0, variant, sizeof variant);
    CHECK(st == FA_SUCCESS && strcmp(variant, "sm90-fwd-bf16-d128-wgmma-ws+dv") == 0, "d_v 64 forward: %d, %s",
          (int)st, variant);
    st = fa_query_support(ctx, &p.fwd, 1, variant, sizeof variant);
    CHECK(st == FA_SUCCESS && strncmp(variant, "simt-bwd", 8) == 0, "d_v 64 backward: %d, %s", (int)st, variant);
    fake->launch_log_len = 0;
    st = fa_forward(ctx, &p.fwd);
    CHECK(st == FA_SUCCESS, "fa_forward: %s", fa_context_last_error(ctx));
    CHECK(fake->launch_log_len == 1, "d_v 64 forward: %d launches", fake->launch_log_len);
    check_launch(fake, 0, "sm90", 'a', "fa_gpu::sm90::ws_forward_kernel<__nv_bfloat16, 128, true, true>",
                 (S + 127) / 128, H, B, 384, (128 + 2 * 3 * 128) * 128 * 2 + 1024);
    check_map(fake, fake->tensor_map_log_len - 2, p.k, 9, 128, 128, "K (d 128)");
    check_map(fake, fake->tensor_map_log_len - 1, p.v, 9, 64, 128, "V (d_v 64)");
    printf("ok: the d_v 64 forward on the MOD instance\n");
    free_problem(ctx, &p);

    check_split(ctx, fake);
    fa_context_destroy(ctx);
    printf("PASS\n");
    return 0;
}
