/* rtc_decode_check.c: fa_forward_kvcache in a build whose kernels are compiled at run time
 * (-Dcuda-kernels=rtc) through the public API, against the fake driver (fake_libcuda.c, named by
 * argv[1] and given as FLASHATTN_CUDA_DRIVER_LIBRARY; its launch log): the kernels NVRTC compiled
 * for the decode family (their lowered names), in the nvcc launchers' order (decode/decode.cuh:
 * check, append, decode, combine), on their grids, blocks and dynamic shared memory:
 *   - bf16, d 128, a contiguous cache of 4096 keys, GQA (8 query heads on 2 kv heads), one new
 *     token appended, arrays checked on the device, splits chosen by the backend: on cc 8.0 the
 *     tensor-core decode kernel's one-token instance in eight warps, on cc 8.6 (99 KB a block)
 *     and under FLASHATTN_KERNELS=kv-mma-4-warps in four, with a softcap its general instance,
 *     under kv-simt the SIMT one with its cp.async ring;
 *     the splits merged by the lane groups' combine where they are 2 to 4, by the block one where
 *     5 are asked for;
 *   - MLA (d 576 over d_v 512, MQA): the MLA kernel in splits with the combine on cc 8.0, refused
 *     where a block may have 99 KB;
 *   - a paged cache with 2 splits asked for, nothing appended: checked on the host; checked on the
 *     device, by its decode blocks (no check kernel); in one split, by the check kernel;
 *   - fp32, d 64, MQA, two query tokens (the large row tile), one split: the decode kernel alone;
 *   - a learnable sink: the tensor-core kernel in at least two splits with the combine, which
 *     folds the sink in; under FLASHATTN_KERNELS=kv-simt the SIMT kernel;
 *   - cache_leftpad: refused with the arrays checked on the device, else the core's appends and
 *     one dense forward (sm80) instead of the decode kernels;
 *   - a failing occupancy query and a failing launch: FA_ERR_BACKEND naming the call;
 *   - on a stream being captured, a fresh context's first device-checked call (its fault words and
 *     split partials not yet allocated): FA_ERR_UNSUPPORTED naming the capture, nothing launched;
 *     after one call outside the capture, the same call captured; a context whose one call outside
 *     ran whole (one split asked for) refuses a captured call in splits, naming the partials.
 * The expected geometry is spelled out here (not read from common/kv_geometry.h), so a launcher
 * and the header wrong together still fail. Exit 0 when every check holds, 1 on the first that
 * fails, 77 (meson's skip) where libnvrtc cannot be opened. */
#include "flashattn.h"
#include "host/rtc_compiler.h"
#include "rtc_check_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static fake_cuda_state *fake;

/* One launch the test expects: the name expression, grid (x, y), block, dynamic shared memory;
 * sm90a: compiled by the backend for sm_90a (else its name is lowered for sm_80). */
typedef struct expected {
    const char *name;
    unsigned x, y, threads, shared;
    int sm90a;
} expected;

/* the launches since the log was cleared are `want`, in that order */
static void check_launches(const char *what, const expected *want, int count)
{
    CHECK(fake->launch_log_len == count, "%s: %d launches, expected %d", what, fake->launch_log_len, count);
    for (int i = 0; i < count; ++i) {
        const fake_cuda_launch *l = &fake->launches[i];
        char lowered[256];
        if (want[i].sm90a)
            lowered_name_of("decode", 90, 'a', 1, want[i].name, lowered, sizeof lowered);
        else
            lowered_name_of("decode", 80, 0, 0, want[i].name, lowered, sizeof lowered);
        CHECK(strcmp(l->name, lowered) == 0, "%s: launch %d is %s, expected %s (%s)", what, i, l->name, lowered,
              want[i].name);
        CHECK(l->grid[0] == want[i].x && l->grid[1] == want[i].y && l->grid[2] == 1 && l->block[0] == want[i].threads &&
                  l->block[1] == 1 && l->shared_bytes == want[i].shared,
              "%s: %s on (%u, %u, %u) x %u with %u bytes; expected (%u, %u, 1) x %u with %u", what, want[i].name,
              l->grid[0], l->grid[1], l->grid[2], l->block[0], l->shared_bytes, want[i].x, want[i].y, want[i].threads,
              want[i].shared);
        printf("  %s (%s) on (%u, %u) x %u, %u bytes\n", want[i].name, l->name, l->grid[0], l->grid[1], l->block[0],
               l->shared_bytes);
    }
}

static void *device_int32(fa_context *ctx, const int32_t *values, size_t count)
{
    void *d = device_zeros(ctx, count * sizeof *values);
    CHECK(fa_memcpy(ctx, d, values, count * sizeof *values, FA_COPY_HOST_TO_DEVICE) == FA_SUCCESS, "fa_memcpy: %s",
          fa_context_last_error(ctx));
    return d;
}

static fa_tensor tensor(fa_context *ctx, fa_dtype dtype, int64_t a, int64_t b, int64_t c, int64_t d)
{
    const int64_t shape[4] = {a, b, c, d};
    return fa_tensor_contiguous(device_zeros(ctx, (size_t)(a * b * c * d) * fa_dtype_size(dtype)), dtype, 4, shape);
}

/* A decode call: batch 2, hq query heads on hkv kv heads, head dims d (q, k) and dv (v, o), bf16;
 * a contiguous cache of 4096 keys holding 4000 per sequence, one new token appended, the arrays
 * checked on the device. */
static fa_kvcache_args decode_call(fa_context *ctx, int64_t hq, int64_t hkv, int64_t d, int64_t dv)
{
    fa_kvcache_args a;
    memset(&a, 0, sizeof a);
    const int32_t seqlens[2] = {4000, 4000};
    a.q = tensor(ctx, FA_DTYPE_BF16, 2, 1, hq, d);
    a.o = tensor(ctx, FA_DTYPE_BF16, 2, 1, hq, dv);
    a.k_cache = tensor(ctx, FA_DTYPE_BF16, 2, 4096, hkv, d);
    a.v_cache = tensor(ctx, FA_DTYPE_BF16, 2, 4096, hkv, dv);
    a.k_new = tensor(ctx, FA_DTYPE_BF16, 2, 1, hkv, d);
    a.v_new = tensor(ctx, FA_DTYPE_BF16, 2, 1, hkv, dv);
    a.cache_seqlens = device_int32(ctx, seqlens, 2);
    a.opts = fa_options_default();
    a.check_on_device = 1;
    return a;
}

/* The GQA decode call: 8 query heads on 2 kv heads, d 128. */
static fa_kvcache_args gqa_call(fa_context *ctx)
{
    return decode_call(ctx, 8, 2, 128, 128);
}

/* The launch that merges `splits` splits of `rows` query rows of `channels` output channels:
 * combine_groups_kernel where a row's splits fit its lanes' read-ahead (2 to 4; a group of 32
 * lanes per row and 128 channels, 8 groups a block), else combine_kernel (a block per row and 32
 * channels). */
static expected combine_launch(unsigned splits, unsigned rows, unsigned channels)
{
    if (splits <= 4) {
        const expected groups = {"fa_gpu::decode::combine_groups_kernel<fa_gpu::store_bf16>",
                                 (rows * ((channels + 127) / 128) + 7) / 8, 1, 256, 0, 0};
        return groups;
    }
    const expected blocks = {"fa_gpu::decode::combine_kernel<fa_gpu::store_bf16>", rows * channels / 32, 1, 256, 0, 0};
    return blocks;
}

/* The GQA call's launches (gqa_call): check, append (one block each per sequence and per 2 x 2 x
 * 128 elements), the decode kernel `decode` on 4 x `splits` blocks of `threads` with `shared`
 * bytes, then the combine of 2 x 8 rows of 128 channels (combine_launch). */
static void check_gqa_launches(const char *what, const char *decode, unsigned splits, unsigned threads, unsigned shared)
{
    const expected want[] = {
        {"fa_gpu::decode::check_kernel<fa_gpu::store_bf16>", 2, 1, 256, 0, 0},
        {"fa_gpu::decode::append_kernel<fa_gpu::store_bf16>", 2, 1, 256, 0, 0},
        {decode, 4, splits, threads, shared, 0},
        combine_launch(splits, 16, 128),
    };
    check_launches(what, want, 4);
}

/* The last occupancy query asked about the decode instance `name` (so an rtc build compiles the
 * instance it launches, not another one as well). */
static void check_occupancy(const char *what, const char *name)
{
    char lowered[256];
    lowered_name_of("decode", 80, 0, 0, name, lowered, sizeof lowered);
    CHECK(strcmp(fake->occupancy_name, lowered) == 0, "%s: occupancy of %s, expected %s (%s)", what,
          fake->occupancy_name, lowered, name);
    printf("  occupancy of %s\n", name);
}

/* The MLA decode call: 16 query heads on one kv head, d 576 over d_v 512. */
static fa_kvcache_args mla_call(fa_context *ctx)
{
    return decode_call(ctx, 16, 1, 576, 512);
}

/* MLA over a latent cache: hq query heads on one kv head, d 576, v_cache a view of k_cache's first
 * 512 channels, nothing appended, the arrays checked on the host. */
static fa_kvcache_args mla_latent_call(fa_context *ctx, int64_t hq)
{
    fa_kvcache_args a = decode_call(ctx, hq, 1, 576, 512);
    a.v_cache = a.k_cache;
    a.v_cache.shape[3] = 512;
    memset(&a.k_new, 0, sizeof a.k_new);
    memset(&a.v_new, 0, sizeof a.v_new);
    a.check_on_device = 0;
    return a;
}

/* The latent call over caches of `capacity` keys a sequence (every key cached: the chooser counts
 * batch x capacity keys a call). */
static fa_kvcache_args mla_latent_call_of(fa_context *ctx, int64_t hq, int64_t capacity)
{
    fa_kvcache_args a = mla_latent_call(ctx, hq);
    const int32_t seqlens[2] = {(int32_t)capacity, (int32_t)capacity};
    a.k_cache = tensor(ctx, FA_DTYPE_BF16, 2, capacity, 1, 576);
    a.v_cache = a.k_cache;
    a.v_cache.shape[3] = 512;
    a.cache_seqlens = device_int32(ctx, seqlens, 2);
    return a;
}

/* The latent call's launches on the Hopper MLA kernel (`mod`: its softcap / ALiBi instance): one
 * block per sequence and row tile of 64 (x), its splits, 256 threads with the query tile and two
 * stages of 64 keys, 576 channels of 2 bytes each, and 1 KB to align them; then the combine
 * (combine_launch). */
static void check_mla_sm90_launches(const char *what, unsigned x, unsigned rows, int mod)
{
    const unsigned splits = fake->launch_log_len > 0 ? fake->launches[0].grid[1] : 0;
    CHECK(splits >= 2, "%s: %u splits, expected the 16 slots shared", what, splits);
    const expected want[] = {
        {mod ? "fa_gpu::decode::decode_mla_sm90_kernel<fa_gpu::store_bf16, 576, 512, true>"
             : "fa_gpu::decode::decode_mla_sm90_kernel<fa_gpu::store_bf16, 576, 512, false>",
         x, splits, 256, (64 + 2 * 64) * 576 * 2 + 1024, 1},
        combine_launch(splits, rows, 512),
    };
    check_launches(what, want, 2);
}

static fa_context *open_context(void)
{
    fa_context *ctx = NULL;
    CHECK(fa_context_create(&ctx, "cuda", 0) == FA_SUCCESS, "fa_context_create(cuda): %s", fa_last_error());
    fa_capabilities caps;
    CHECK(fa_backend_capabilities("cuda", &caps) == FA_SUCCESS, "capabilities: %s", fa_last_error());
    CHECK((caps.features & FA_FEATURE_KVCACHE) && (caps.features & FA_FEATURE_KVCACHE_DEVICE_CHECK),
          "the rtc build lists fa_forward_kvcache: features %#x", caps.features);
    return ctx;
}

static void run(fa_context *ctx, const fa_kvcache_args *a, const char *what)
{
    fake->launch_log_len = 0;
    fa_status st = fa_forward_kvcache(ctx, a);
    CHECK(st == FA_SUCCESS, "%s: %s", what, fa_context_last_error(ctx));
    CHECK(fa_synchronize(ctx) == FA_SUCCESS, "%s: fa_synchronize: %s", what, fa_context_last_error(ctx));
    printf("ok: %s\n", what);
}

int main(int argc, char **argv)
{
    char why[2048];
    setvbuf(stdout, NULL, _IONBF, 0);
    CHECK(argc == 2, "usage: rtc_decode_check FAKE_LIBCUDA");
    if (!fa_rtc_nvrtc_version(why, sizeof why)) {
        printf("SKIP: %s\n", why);
        return SKIP;
    }
    check_cache_dir("/tmp/fa-rtc-decode-XXXXXX");
    setenv("FLASHATTN_CUDA_DRIVER_LIBRARY", argv[1], 1);
    unsetenv("FLASHATTN_KERNELS");
    fake = fake_cuda_open(argv[1], NULL);
    fake->device_count = 1;
    fake->cc_major = 8; /* sm_80: the tensor-core decode kernel's first architecture */
    fake->cc_minor = 0;
    fake->multiprocessors = 16; /* one resident block each (the fake's occupancy): 16 slots */
    fake->shared_optin = 166912;
    /* the decode kernels keep some shared memory of their own: a ring of exactly 48 KB then needs
     * the kernel's limit raised, as on a GPU */
    fake->static_shared_bytes = 2048;
    fake->total_mem = (size_t)1 << 30;
    fake->arg_sizes[0] = 0;

    /* GQA, cc 8.0: the tensor-core kernel, one row tile of 16 per kv head (4 query rows), 2 x 2
     * blocks; 4 splits fill the 16 slots; check (one block per sequence), append (2 x 2 x 128
     * elements), decode with 2 stages x 8 warps x (K and V of 16 keys x (128 + 8)) x 2 bytes (an
     * A100's blocks may use 163 KB), combine (one block per query row and 32 channels: 2 x 8 rows x 4) */
    fa_context *ctx = open_context();
    fa_kvcache_args a = gqa_call(ctx);
    run(ctx, &a, "bf16 d 128 GQA decode, cc 8.0");
    check_gqa_launches("GQA, tensor cores", "fa_gpu::decode::decode_mma_kernel<fa_gpu::store_bf16, 128, 2, 8, true>",
                       4, 256, 139264);
    check_occupancy("GQA, tensor cores", "fa_gpu::decode::decode_mma_kernel<fa_gpu::store_bf16, 128, 2, 8, true>");
    /* the same on cc 8.6, whose blocks may use 99 KB: four warps, half the ring */
    fa_context_destroy(ctx);
    fake->cc_minor = 6;
    fake->shared_optin = 101376;
    ctx = open_context();
    a = gqa_call(ctx);
    run(ctx, &a, "bf16 d 128 GQA decode, cc 8.6");
    check_gqa_launches("GQA, tensor cores, cc 8.6: four warps",
                       "fa_gpu::decode::decode_mma_kernel<fa_gpu::store_bf16, 128, 2, 4, true>",
                       4, 128, 69632);
    fa_context_destroy(ctx);
    fake->cc_minor = 0;
    fake->shared_optin = 166912;
    setenv("FLASHATTN_KERNELS", "kv-mma-4-warps", 1); /* four warps where eight fit */
    ctx = open_context();
    a = gqa_call(ctx);
    run(ctx, &a, "bf16 d 128 GQA decode, cc 8.0, kv-mma-4-warps");
    check_gqa_launches("GQA, tensor cores, kv-mma-4-warps",
                       "fa_gpu::decode::decode_mma_kernel<fa_gpu::store_bf16, 128, 2, 4, true>",
                       4, 128, 69632);
    fa_context_destroy(ctx);
    unsetenv("FLASHATTN_KERNELS");
    /* a softcap takes the general instance, not the one-token one of the plain decode step */
    ctx = open_context();
    a = gqa_call(ctx);
    a.opts.softcap = 30.0f;
    run(ctx, &a, "bf16 d 128 GQA decode with a softcap, cc 8.0");
    check_gqa_launches("GQA with a softcap", "fa_gpu::decode::decode_mma_kernel<fa_gpu::store_bf16, 128, 2, 8>", 4,
                       256, 139264);
    check_occupancy("GQA with a softcap", "fa_gpu::decode::decode_mma_kernel<fa_gpu::store_bf16, 128, 2, 8>");
    fa_context_destroy(ctx);
    /* 5 splits asked for do not fit the lane groups' read-ahead: the block combine */
    ctx = open_context();
    a = gqa_call(ctx);
    a.num_splits = 5;
    run(ctx, &a, "bf16 d 128 GQA decode, cc 8.0, 5 splits");
    check_gqa_launches("GQA, 5 splits", "fa_gpu::decode::decode_mma_kernel<fa_gpu::store_bf16, 128, 2, 8, true>", 5,
                       256, 139264);
    fa_context_destroy(ctx);
    /* MLA, cc 8.0: the MLA kernel on one row tile per sequence (16 query rows), 8 warps with 2
     * stages x 32 keys x (576 + 8 + 512 + 8) x 2 bytes, the query tile 16 x (576 + 8) x 2 and the
     * scores 16 x 32 x 4, the 16 slots shared in splits, then the combine of 2 x 16 rows of 512
     * channels; on a device whose blocks may have 99 KB (cc 8.6), refused naming the memory,
     * nothing launched */
    ctx = open_context();
    a = mla_call(ctx);
    run(ctx, &a, "bf16 d 576 / 512 MLA decode, cc 8.0");
    {
        const unsigned splits = fake->launch_log_len > 2 ? fake->launches[2].grid[1] : 0;
        CHECK(splits >= 2, "MLA: %u splits, expected the 16 slots shared among 2 blocks", splits);
        const expected want[] = {
            {"fa_gpu::decode::check_kernel<fa_gpu::store_bf16>", 2, 1, 256, 0, 0},
            {"fa_gpu::decode::append_kernel<fa_gpu::store_bf16>", 5, 1, 256, 0, 0},
            {"fa_gpu::decode::decode_mla_kernel<fa_gpu::store_bf16, 576, 512, 32>", 2, splits, 256, 162048, 0},
            combine_launch(splits, 32, 512),
        };
        check_launches("MLA", want, 4);
    }
    fa_context_destroy(ctx);
    fake->cc_minor = 6;
    fake->shared_optin = 101376;
    ctx = open_context();
    a = mla_call(ctx);
    fake->launch_log_len = 0;
    fa_status mst = fa_forward_kvcache(ctx, &a);
    CHECK(mst == FA_ERR_UNSUPPORTED && strstr(fa_context_last_error(ctx), "shared memory") && fake->launch_log_len == 0,
          "MLA on 99 KB a block: %s, %d launches (%s)", fa_status_string(mst), fake->launch_log_len,
          fa_context_last_error(ctx));
    printf("ok: MLA on 99 KB a block refused (%s)\n", fa_context_last_error(ctx));
    fa_context_destroy(ctx);
    fake->cc_minor = 0;
    fake->shared_optin = 166912;

    /* FLASHATTN_KERNELS=kv-mla-sm90 on cc 9.0 (227 KB a block): the latent call on the Hopper MLA
     * kernel, 16 heads in one row tile of 64 per sequence, 128 heads in two; with a softcap its MOD
     * instance; with a V cache of its own, or on cc 8.0, the MLA kernel */
    setenv("FLASHATTN_KERNELS", "kv-mla-sm90", 1);
    fake->cc_major = 9;
    fake->shared_optin = 232448;
    ctx = open_context();
    a = mla_latent_call(ctx, 16);
    run(ctx, &a, "bf16 MLA decode over a latent cache, 16 heads, cc 9.0, kv-mla-sm90");
    check_mla_sm90_launches("MLA latent, 16 heads, kv-mla-sm90", 2, 2 * 16, 0);
    a = mla_latent_call(ctx, 128);
    run(ctx, &a, "bf16 MLA decode over a latent cache, 128 heads, cc 9.0, kv-mla-sm90");
    check_mla_sm90_launches("MLA latent, 128 heads, kv-mla-sm90", 4, 2 * 128, 0);
    a = mla_latent_call(ctx, 16);
    a.opts.softcap = 30.0f;
    run(ctx, &a, "bf16 MLA decode over a latent cache, softcap, cc 9.0, kv-mla-sm90");
    check_mla_sm90_launches("MLA latent, softcap, kv-mla-sm90", 2, 2 * 16, 1);
    a = mla_call(ctx);
    a.check_on_device = 0;
    run(ctx, &a, "bf16 MLA decode with a V cache of its own, cc 9.0, kv-mla-sm90");
    CHECK(fake->launch_log_len >= 2 && strstr(fake->launches[1].name, "decode_mla_kernel"),
          "MLA with its own V cache under kv-mla-sm90: launch 1 is %s, expected the MLA kernel",
          fake->launch_log_len >= 2 ? fake->launches[1].name : "(none)");
    fa_context_destroy(ctx);
    /* the chooser on cc 9.0: the Hopper MLA kernel for 128 heads (two full row tiles) over 2 x 16384
     * keys, the 16-row kernel over 2 x 4096, for 16 heads, and under kv-mla-16-rows */
    unsetenv("FLASHATTN_KERNELS");
    ctx = open_context();
    a = mla_latent_call_of(ctx, 128, 16384);
    run(ctx, &a, "bf16 MLA decode over a latent cache, 128 heads, 2 x 16384 keys, cc 9.0");
    check_mla_sm90_launches("MLA latent, 128 heads, 2 x 16384 keys, the chooser", 4, 2 * 128, 0);
    const struct {
        int64_t heads, capacity;
    } sixteen_rows[] = {{128, 4096}, {16, 16384}};
    for (size_t i = 0; i < sizeof sixteen_rows / sizeof sixteen_rows[0]; ++i) {
        a = mla_latent_call_of(ctx, sixteen_rows[i].heads, sixteen_rows[i].capacity);
        run(ctx, &a, "bf16 MLA decode over a latent cache, cc 9.0, the chooser");
        CHECK(fake->launch_log_len >= 1 && strstr(fake->launches[0].name, "decode_mla_kernel"),
              "MLA latent, %lld heads over 2 x %lld keys on cc 9.0: launch 0 is %s, expected the 16-row kernel",
              (long long)sixteen_rows[i].heads, (long long)sixteen_rows[i].capacity,
              fake->launch_log_len >= 1 ? fake->launches[0].name : "(none)");
    }
    fa_context_destroy(ctx);
    setenv("FLASHATTN_KERNELS", "kv-mla-16-rows", 1);
    ctx = open_context();
    a = mla_latent_call_of(ctx, 128, 16384);
    run(ctx, &a, "bf16 MLA decode over a latent cache, 128 heads, cc 9.0, kv-mla-16-rows");
    CHECK(fake->launch_log_len >= 1 && strstr(fake->launches[0].name, "decode_mla_kernel"),
          "MLA latent under kv-mla-16-rows: launch 0 is %s, expected the 16-row kernel",
          fake->launch_log_len >= 1 ? fake->launches[0].name : "(none)");
    fa_context_destroy(ctx);
    setenv("FLASHATTN_KERNELS", "kv-mla-sm90", 1);
    fake->cc_major = 8;
    fake->shared_optin = 166912;
    ctx = open_context();
    a = mla_latent_call(ctx, 16);
    run(ctx, &a, "bf16 MLA decode over a latent cache, cc 8.0, kv-mla-sm90");
    CHECK(fake->launch_log_len >= 1 && strstr(fake->launches[0].name, "decode_mla_kernel"),
          "MLA latent on cc 8.0 under kv-mla-sm90: launch 0 is %s, expected the MLA kernel",
          fake->launch_log_len >= 1 ? fake->launches[0].name : "(none)");
    fa_context_destroy(ctx);
    unsetenv("FLASHATTN_KERNELS");
    ctx = open_context();
    a = gqa_call(ctx);

    /* a paged cache (16 pages of 256 keys, 8 per sequence, 2000 keys each), 2 splits asked for,
     * nothing appended, the arrays checked on the host */
    fa_kvcache_args paged = a;
    const int32_t table[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, paged_seqlens[2] = {2000, 2000};
    paged.cache_seqlens = device_int32(ctx, paged_seqlens, 2);
    paged.k_cache = tensor(ctx, FA_DTYPE_BF16, 16, 256, 2, 128);
    paged.v_cache = tensor(ctx, FA_DTYPE_BF16, 16, 256, 2, 128);
    paged.block_table = device_int32(ctx, table, 16);
    paged.block_table_stride = 8;
    memset(&paged.k_new, 0, sizeof paged.k_new);
    memset(&paged.v_new, 0, sizeof paged.v_new);
    paged.check_on_device = 0;
    paged.num_splits = 2;
    run(ctx, &paged, "bf16 d 128 GQA decode over a paged cache, 2 splits");
    const expected paged_launches[] = {
        {"fa_gpu::decode::decode_mma_kernel<fa_gpu::store_bf16, 128, 2, 8, true>", 4, 2, 256, 139264, 0},
        combine_launch(2, 16, 128),
    };
    check_launches("paged", paged_launches, 2);
    /* the same checked on the device: nothing appended and the keys split, so its decode blocks
     * check what they read and no check kernel runs; in one split, the check kernel first */
    paged.check_on_device = 1;
    run(ctx, &paged, "the paged call checked on the device, 2 splits: in its decode blocks");
    check_launches("paged, checked in the decode blocks", paged_launches, 2);
    paged.num_splits = 1;
    run(ctx, &paged, "the paged call checked on the device, 1 split: by the check kernel");
    const expected paged_whole[] = {
        {"fa_gpu::decode::check_kernel<fa_gpu::store_bf16>", 2, 1, 256, 0, 0},
        {"fa_gpu::decode::decode_mma_kernel<fa_gpu::store_bf16, 128, 2, 8, true>", 4, 1, 256, 139264, 0},
    };
    check_launches("paged, one split, checked by the check kernel", paged_whole, 2);

    /* fp32, d 64, MQA (8 query heads on 1), 2 new query tokens: 16 rows in tiles of 8, 2 x 1 x 2
     * blocks, the register-loading SIMT kernel (no dynamic shared memory), one split */
    fa_kvcache_args f = a;
    f.q = tensor(ctx, FA_DTYPE_F32, 2, 2, 8, 64);
    f.o = tensor(ctx, FA_DTYPE_F32, 2, 2, 8, 64);
    f.k_cache = tensor(ctx, FA_DTYPE_F32, 2, 4096, 1, 64);
    f.v_cache = tensor(ctx, FA_DTYPE_F32, 2, 4096, 1, 64);
    memset(&f.k_new, 0, sizeof f.k_new);
    memset(&f.v_new, 0, sizeof f.v_new);
    f.check_on_device = 0;
    f.num_splits = 1;
    run(ctx, &f, "fp32 d 64 MQA, 2 query tokens, 1 split");
    const expected f32[] = {{"fa_gpu::decode::decode_kernel<fa_gpu::store_f32, 64, 8, false>", 4, 1, 128, 0, 0}};
    check_launches("fp32", f32, 1);

    /* cache_leftpad, which the decode kernels do not take: with the arrays checked on the device
     * refused by name; checked on the host, the core's appends and one dense forward for both
     * sequences (equal lengths and pads) on the sm80 kernels, no decode kernel */
    const int32_t pads[2] = {100, 100};
    fa_kvcache_args lp = a;
    lp.cache_leftpad = device_int32(ctx, pads, 2);
    fa_status lst = fa_forward_kvcache(ctx, &lp);
    CHECK(lst == FA_ERR_UNSUPPORTED && strstr(fa_context_last_error(ctx), "check_on_device"),
          "cache_leftpad with check_on_device: status %d: %s", (int)lst, fa_context_last_error(ctx));
    printf("ok: cache_leftpad with check_on_device: %s\n", fa_context_last_error(ctx));
    lp.check_on_device = 0;
    run(ctx, &lp, "bf16 d 128 GQA decode with cache_leftpad, on the dense forward");
    int forwards = 0;
    for (int i = 0; i < fake->launch_log_len; ++i) {
        const char *name = fake->launches[i].name;
        CHECK(!strstr(name, "6decode"), "cache_leftpad: launch %d is a decode kernel, %s", i, name);
        forwards += strstr(name, "4sm8014forward_kernel") != NULL;
    }
    CHECK(forwards == 1, "cache_leftpad: %d sm80 forward launches of %d, expected one", forwards, fake->launch_log_len);
    printf("ok: cache_leftpad ran %d launches, one sm80 forward\n", fake->launch_log_len);

    /* failures: the occupancy query, then the decode kernel's launch */
    fake->fail_call = "cuOccupancyMaxActiveBlocksPerMultiprocessor";
    fake->fail_result = 1; /* CUDA_ERROR_INVALID_VALUE */
    fa_status st = fa_forward_kvcache(ctx, &a);
    const char *msg = fa_context_last_error(ctx);
    CHECK(st == FA_ERR_BACKEND && strstr(msg, "occupancy") && strstr(msg, "CUDA_ERROR_INVALID_VALUE"),
          "failing occupancy: status %d: %s", (int)st, msg);
    printf("ok: a failing occupancy query: %s\n", msg);
    fake->fail_call = "cuLaunchKernel";
    fake->fail_result = 719; /* CUDA_ERROR_LAUNCH_FAILED */
    st = fa_forward_kvcache(ctx, &paged);
    msg = fa_context_last_error(ctx);
    CHECK(st == FA_ERR_BACKEND && strstr(msg, "cuLaunchKernel") && strstr(msg, "CUDA_ERROR_LAUNCH_FAILED"),
          "failing launch: status %d: %s", (int)st, msg);
    printf("ok: a failing launch: %s\n", msg);
    fake->fail_call = NULL;
    fa_context_destroy(ctx);

    /* FLASHATTN_KERNELS=kv-simt: the same GQA call on the SIMT kernel with the cp.async ring (bf16,
     * aligned rows): 4 query rows, one tile of 4 per kv head, 3 stages x (K and V) x 4 keys x 128
     * threads x 16 bytes */
    setenv("FLASHATTN_KERNELS", "kv-simt", 1);
    ctx = open_context();
    a = gqa_call(ctx);
    run(ctx, &a, "bf16 d 128 GQA decode, FLASHATTN_KERNELS=kv-simt");
    check_gqa_launches("GQA, SIMT", "fa_gpu::decode::decode_kernel<fa_gpu::store_bf16, 128, 4, true>",
                       4, 128, 49152);
    fa_context_destroy(ctx);

    /* a learnable sink, which the tensor-core kernel does not read: that kernel in splits (4 here,
     * at least 2) and the combine kernel, which folds the sink in; the SIMT kernel under
     * FLASHATTN_KERNELS=kv-simt (above) */
    ctx = open_context();
    a = gqa_call(ctx);
    a.opts.learnable_sink = device_zeros(ctx, 8 * sizeof(float));
    run(ctx, &a, "bf16 d 128 GQA decode with a sink, FLASHATTN_KERNELS=kv-simt");
    check_gqa_launches("sink, SIMT", "fa_gpu::decode::decode_kernel<fa_gpu::store_bf16, 128, 4, true>",
                       4, 128, 49152);
    fa_context_destroy(ctx);
    unsetenv("FLASHATTN_KERNELS");
    ctx = open_context();
    a = gqa_call(ctx);
    a.opts.learnable_sink = device_zeros(ctx, 8 * sizeof(float));
    run(ctx, &a, "bf16 d 128 GQA decode with a sink");
    check_gqa_launches("sink, tensor cores", "fa_gpu::decode::decode_mma_kernel<fa_gpu::store_bf16, 128, 2, 8, true>",
                       4, 256, 139264);
    a.num_splits = 1; /* one split asked for: two, so that the combine kernel folds the sink in */
    run(ctx, &a, "bf16 d 128 GQA decode with a sink, 1 split asked for");
    check_gqa_launches("sink, tensor cores, two splits",
                       "fa_gpu::decode::decode_mma_kernel<fa_gpu::store_bf16, 128, 2, 8, true>",
                       2, 256, 139264);
    fa_context_destroy(ctx);

    unsetenv("FLASHATTN_KERNELS");

    ctx = open_context();
    a = gqa_call(ctx);
    fake->capture_status = 1;
    fake->launch_log_len = 0;
    st = fa_forward_kvcache(ctx, &a);
    msg = fa_context_last_error(ctx);
    CHECK(st == FA_ERR_UNSUPPORTED && strstr(msg, "captured") && strstr(msg, "fault words") && fake->launch_log_len == 0,
          "a first call on a captured stream: status %d, %d launches: %s", (int)st, fake->launch_log_len, msg);
    printf("ok: a first call on a captured stream: %s\n", msg);
    fake->capture_status = 0;
    run(ctx, &a, "bf16 d 128 GQA decode outside the capture");
    fake->capture_status = 1;
    run(ctx, &a, "bf16 d 128 GQA decode captured, after one call outside");
    check_gqa_launches("captured", "fa_gpu::decode::decode_mma_kernel<fa_gpu::store_bf16, 128, 2, 8, true>",
                       4, 256, 139264);
    fake->capture_status = 0;
    fa_context_destroy(ctx);
    ctx = open_context();
    a = gqa_call(ctx);
    a.num_splits = 1;
    run(ctx, &a, "bf16 d 128 GQA decode in one split, outside the capture");
    a.num_splits = 0;
    fake->capture_status = 1;
    fake->launch_log_len = 0;
    st = fa_forward_kvcache(ctx, &a);
    msg = fa_context_last_error(ctx);
    fake->capture_status = 0;
    CHECK(st == FA_ERR_UNSUPPORTED && strstr(msg, "split partials") && fake->launch_log_len == 0,
          "split partials on a captured stream: status %d, %d launches: %s", (int)st, fake->launch_log_len, msg);
    printf("ok: split partials on a captured stream: %s\n", msg);
    fa_context_destroy(ctx);
    printf("PASS\n");
    return 0;
}
