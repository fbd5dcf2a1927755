/* backend.c: the CPU backend's table: host memory, the tile table and the chooser. The kernels
 * are in flash_forward.c and flash_backward.c (what they share in flash_tiles.h); the float64
 * oracle in tests/support/reference.c is for tests and `flashattn run --check`. */
#include "cpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int fa_cpu_threads(const fa_context *ctx)
{
    long n = ctx && ctx->num_threads > 0 ? ctx->num_threads : 0;
    if (n <= 0) {
        const char *env = getenv("FLASHATTN_NUM_THREADS");
        if (env && *env)
            n = strtol(env, NULL, 10);
    }
    if (n <= 0)
        n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        n = 1;
    if (n > FA_CPU_MAX_THREADS)
        n = FA_CPU_MAX_THREADS;
    return (int)n;
}

static fa_status cpu_device_count(int *count)
{
    *count = 1;
    return FA_SUCCESS;
}

static fa_status cpu_device_name(int device, char *buf, size_t len)
{
    (void)device;
    char model[128] = "host CPU";
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[256];
        while (fgets(line, sizeof line, f))
            if (strncmp(line, "model name", 10) == 0) {
                char *colon = strchr(line, ':');
                if (colon) {
                    snprintf(model, sizeof model, "%s", colon + 2);
                    model[strcspn(model, "\n")] = '\0';
                }
                break;
            }
        fclose(f);
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const char *why = NULL;
    const fa_cpu_isa *isa = fa_cpu_isa_select(&why);
    snprintf(buf, len, "%s (%ld threads, %s kernels)", model, cores, isa ? isa->name : "no runnable");
    return FA_SUCCESS;
}

static void cpu_capabilities(fa_capabilities *caps)
{
    caps->dtypes = (1u << FA_DTYPE_F32) | (1u << FA_DTYPE_F16) | (1u << FA_DTYPE_BF16);
    caps->max_head_dim = FA_MAX_HEAD_DIM;
    caps->features = FA_FEATURE_CAUSAL | FA_FEATURE_WINDOW | FA_FEATURE_VARLEN | FA_FEATURE_GQA |
                     FA_FEATURE_DROPOUT | FA_FEATURE_BLOCK_SPARSE | FA_FEATURE_LSE | FA_FEATURE_DETERMINISTIC |
                     FA_FEATURE_BACKWARD | FA_FEATURE_STRIDES | FA_FEATURE_F32_OUTPUT |
                     FA_FEATURE_SOFTCAP | FA_FEATURE_ALIBI | FA_FEATURE_KVCACHE | FA_FEATURE_SINK |
                     FA_FEATURE_HEAD_DIM_V;
    snprintf(caps->notes, sizeof caps->notes,
             "every d and d_v in 1..256 (padded to 16 inside the tiles; fa_forward_kvcache to 576); fp32 "
             "arithmetic for every dtype; the backward is always deterministic");
}

/* The kernel table is chosen once per context (cpuid, or FLASHATTN_CPU_ISA for tests and
 * benchmarks); a table the CPU cannot run is refused here, before any call. */
static fa_status cpu_open(fa_context *ctx, int device)
{
    (void)device;
    const char *why = NULL;
    const fa_cpu_isa *isa = fa_cpu_isa_select(&why);
    if (!isa)
        return FA_ERROR(ctx, FA_ERR_UNSUPPORTED, "FLASHATTN_CPU_ISA=%s: %s", getenv("FLASHATTN_CPU_ISA"), why);
    ctx->priv = (void *)(uintptr_t)isa; /* the tables are const; the context only reads them */
    return FA_SUCCESS;
}

const fa_cpu_isa *fa_cpu_isa_of(const fa_context *ctx)
{
    if (ctx && ctx->priv)
        return (const fa_cpu_isa *)ctx->priv;
    const fa_cpu_isa *isa = fa_cpu_isa_select(NULL);
    return isa ? isa : &fa_cpu_isa_generic;
}

static void cpu_close(fa_context *ctx)
{
    ctx->priv = NULL;
}

/* The tile table of the CPU backend. Each row gives M, the on-chip budget of the paper's formula
 * (B_c = M / 4d, B_r = min(B_c, d)), and a cap on B_r; tiles are then clamped to multiples of 16
 * (the micro-kernel's width) and at most 128 x 256. The forward picks the first row whose d
 * bound covers the head dim; the backward always uses the last row (docs/backends/cpu.md gives
 * the measurements behind each row). */
typedef struct cpu_tile_row {
    int64_t max_d;
    int64_t onchip_bytes;
    int64_t max_block_q;
} cpu_tile_row;

static const cpu_tile_row cpu_tiles[] = {
    /* d <= 64: 64 x 128. Q, O, S and one K, V tile (160 KiB) fit a core's L2 share with the next
     * K, V tile prefetched beside them */
    {.max_d = 64, .onchip_bytes = 128 * 1024, .max_block_q = 128},
    /* d <= 128: 64 x 128 rather than the formula's 64 x 64: the P V product gets K = 128 and the
     * per-row softmax bookkeeping is paid every 128 keys; not 128 x 128, whose square diagonal
     * tile computes its masked half under causal, nor 64 x 256, whose prefetched next tile
     * overflows a 512 KiB L2 */
    {.max_d = 128, .onchip_bytes = 256 * 1024, .max_block_q = 64},
    /* the formula at M = 128 KiB (a core's share of L2 on current x86 and Arm server parts):
     * 32 x 32 at d 256; also every backward (64 x 128 at d 64, 64 x 64 at d 128) */
    {.max_d = FA_MAX_HEAD_DIM, .onchip_bytes = 128 * 1024, .max_block_q = 128},
};

static void cpu_tile_limits(const fa_context *ctx, const fa_problem *p, fa_tile_limits *out)
{
    size_t n = sizeof cpu_tiles / sizeof cpu_tiles[0], i = 0;
    if (p->backward)
        i = n - 1;
    const int64_t d = p->d > p->d_v ? p->d : p->d_v;
    while (i + 1 < n && d > cpu_tiles[i].max_d)
        ++i;
    out->onchip_bytes = cpu_tiles[i].onchip_bytes;
    out->min_block = 16;
    out->max_block_q = cpu_tiles[i].max_block_q;
    out->max_block_k = 256;
    out->multiple = 16;
    if (p->dtype == FA_DTYPE_BF16 && fa_cpu_isa_of(ctx)->gemm_bf16) /* the bf16 products' K step */
        out->min_block = out->multiple = 32;
}

static fa_status cpu_choose(const fa_context *ctx, const fa_problem *p, fa_variant *out)
{
    snprintf(out->name, sizeof out->name, "cpu-flash-%s-%s-b%lldx%lld-%s", p->backward ? "bwd" : "fwd",
             fa_dtype_name(p->dtype), (long long)p->block_q, (long long)p->block_k, fa_cpu_isa_of(ctx)->name);
    out->kernel = 0;
    return FA_SUCCESS;
}

static fa_status cpu_forward(fa_context *ctx, const fa_problem *p, const fa_variant *v)
{
    (void)v;
    return fa_cpu_flash_forward(ctx, p);
}

static fa_status cpu_backward(fa_context *ctx, const fa_problem *p, const fa_variant *v)
{
    (void)v;
    return fa_cpu_flash_backward(ctx, p);
}

static int64_t cpu_workspace(const fa_context *ctx, const fa_problem *p)
{
    return fa_cpu_workspace_bytes(p, fa_cpu_isa_of(ctx), fa_cpu_threads(ctx));
}

static fa_status cpu_alloc(fa_context *ctx, size_t bytes, void **ptr)
{
    size_t rounded = (bytes + 63) / 64 * 64;
    if (rounded < bytes)
        return FA_ERROR(ctx, FA_ERR_OVERFLOW, "fa_malloc: %zu bytes", bytes);
    *ptr = aligned_alloc(64, rounded ? rounded : 64);
    if (!*ptr)
        return FA_ERROR(ctx, FA_ERR_OUT_OF_MEMORY, "fa_malloc: cannot allocate %zu bytes", bytes);
    return FA_SUCCESS;
}

static fa_status cpu_free(fa_context *ctx, void *ptr)
{
    (void)ctx;
    free(ptr);
    return FA_SUCCESS;
}

static fa_status cpu_copy(fa_context *ctx, void *dst, const void *src, size_t bytes, fa_copy_kind kind)
{
    (void)ctx;
    (void)kind; /* host and "device" memory are the same on the CPU backend */
    memmove(dst, src, bytes);
    return FA_SUCCESS;
}

static fa_status cpu_sync(fa_context *ctx)
{
    (void)ctx;
    return FA_SUCCESS;
}

const fa_backend fa_backend_cpu = {
    .name = "cpu",
    .is_gpu = 0,
    .device_count = cpu_device_count,
    .device_name = cpu_device_name,
    .capabilities = cpu_capabilities,
    .open = cpu_open,
    .close = cpu_close,
    .tile_limits = cpu_tile_limits,
    .choose = cpu_choose,
    .forward = cpu_forward,
    .backward = cpu_backward,
    .workspace = cpu_workspace,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy = cpu_copy,
    .sync = cpu_sync,
    .set_stream = NULL, // optional
    .num_threads = fa_cpu_threads,
    .ring_copy = fa_host_ring_copy,
    .ring_merge = fa_host_ring_merge,
    .ring_add = fa_host_ring_add,
    .forward_kvcache = fa_cpu_forward_kvcache,
    .kv_leftpad = 1,
};
