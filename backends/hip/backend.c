/* backend.c: the HIP backend's table (AMD GPUs through ROCm's HIP runtime): the chooser and the
 * launch glue; devices, streams, memory and errors are the host glue it shares with the CUDA
 * backend (backends/gpu/host.h, compiled here against HIP's runtime). Two kernel families,
 * built by hipcc for the offload targets of -Dhip-archs:
 *   mfma/          the matrix-core forward for CDNA (gfx90a, gfx94x), fp16/bf16, d <= 128;
 *   gpu/portable/  the SIMT kernels shared with the CUDA backend: every dtype, head dim, option
 *                  and the backward, on any target (wave64 and wave32 alike).
 * Both take the score modifiers (softcap, ALiBi): every choice runs them, forward and backward.
 * FLASHATTN_HIP_KERNELS=portable runs everything on the portable family. The chooser refuses, with
 * the reason, a device whose architecture the library was not built for. */
#define FA_RUNTIME_HIP 1
#include "host.h"
#include "kernels.h"
#include "kv_host.h"

#ifndef FA_HIP_ARCHS
#define FA_HIP_ARCHS ""
#endif

/* What runs a call: the MFMA forward or the portable kernels, at a head-dim bucket (64, 128, 256).
 * hip_choose makes it; the launch reads it back from fa_variant.choice. */
typedef struct hip_choice {
    int mfma;
    int bucket;
} hip_choice;
FA_VARIANT_CHOICE(hip_choice)

static fa_status hip_device_name(int device, char *buf, size_t len)
{
    hipDeviceProp_t prop;
    if (hipGetDeviceProperties(&prop, device) != hipSuccess)
        return FA_ERR_BACKEND;
    snprintf(buf, len, "%s (%s, %d CUs, wave%d, %.0f GiB)", prop.name, prop.gcnArchName, prop.multiProcessorCount,
             prop.warpSize, (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
    return FA_SUCCESS;
}

static void hip_capabilities(fa_capabilities *caps)
{
    caps->dtypes = (1u << FA_DTYPE_F32) | (1u << FA_DTYPE_F16) | (1u << FA_DTYPE_BF16);
    caps->max_head_dim = FA_MAX_HEAD_DIM;
    caps->head_dims[0] = 0;
    caps->features = FA_FEATURE_CAUSAL | FA_FEATURE_WINDOW | FA_FEATURE_VARLEN | FA_FEATURE_GQA |
                     FA_FEATURE_DROPOUT | FA_FEATURE_BLOCK_SPARSE | FA_FEATURE_LSE | FA_FEATURE_DETERMINISTIC |
                     FA_FEATURE_BACKWARD | FA_FEATURE_STRIDES | FA_FEATURE_SOFTCAP | FA_FEATURE_ALIBI |
                     FA_FEATURE_KVCACHE | FA_FEATURE_KVCACHE_DEVICE_CHECK;
    snprintf(caps->notes, sizeof caps->notes,
             "built for %s; MFMA forward on CDNA (gfx90a, gfx94x; fp16/bf16, d <= 128), portable SIMT kernels "
             "for the rest (always deterministic), or for all with FLASHATTN_HIP_KERNELS=portable; "
             "not yet run on AMD hardware (README)",
             FA_HIP_ARCHS);
}

static fa_status hip_open(fa_context *ctx, int device)
{
    return gpu_open(ctx, device, "FLASHATTN_HIP_KERNELS");
}

/* The device's architecture without feature flags: "gfx90a" of "gfx90a:sramecc+:xnack-". */
static void arch_of(const gpu_state *s, char *out, size_t len)
{
    size_t n = strcspn(s->prop.gcnArchName, ":");
    if (n >= len)
        n = len - 1;
    memcpy(out, s->prop.gcnArchName, n);
    out[n] = '\0';
}

/* Whether `arch` is one of the ';'-separated offload targets the kernels were built for. */
static int arch_built(const char *arch)
{
    const char *list = FA_HIP_ARCHS;
    size_t n = strlen(arch);
    while (*list) {
        size_t m = strcspn(list, ";");
        if (m == n && strncmp(list, arch, n) == 0)
            return 1;
        list += m + (list[m] == ';');
    }
    return 0;
}

static int arch_is_cdna_mfma(const char *arch)
{
    return strcmp(arch, "gfx90a") == 0 || strcmp(arch, "gfx940") == 0 || strcmp(arch, "gfx941") == 0 ||
           strcmp(arch, "gfx942") == 0;
}

/* The core builds block-sparse lists at the portable kernels' 64 x 64 tiles; the MFMA forward's
 * 32-row blocks and 32-key steps lie inside them. */
static void hip_tile_limits(const fa_context *ctx, const fa_problem *p, fa_tile_limits *out)
{
    (void)p;
    gpu_tile_limits(out, (int64_t)gpu_of(ctx)->prop.sharedMemPerBlock);
}

static fa_status hip_choose(const fa_context *ctx, const fa_problem *p, fa_variant *out)
{
    if (p->out_dtype != p->dtype)
        return FA_ERROR((fa_context *)ctx, FA_ERR_UNSUPPORTED,
                        "hip: fp32 outputs from %s inputs are not supported (the cpu and cuda backends have them)",
                        fa_dtype_name(p->dtype));
    const gpu_state *s = gpu_of(ctx);
    char arch[64];
    arch_of(s, arch, sizeof arch);
    if (!arch_built(arch))
        return FA_ERROR((fa_context *)ctx, FA_ERR_UNSUPPORTED,
                        "hip: the library's kernels are built for %s, the device is %s (configure with "
                        "-Dhip-archs='%s;...' where the toolchain supports it)",
                        FA_HIP_ARCHS, arch, arch);
    int bucket = fa_hip_portable_bucket(p->d);
    if (bucket == 0)
        return FA_ERROR((fa_context *)ctx, FA_ERR_UNSUPPORTED, "hip: no kernel for head dim %lld (1..%d)",
                        (long long)p->d, FA_MAX_HEAD_DIM);
    if (s->kernels != GPU_KERNELS_PORTABLE && !p->backward && arch_is_cdna_mfma(arch) && bucket <= 128 &&
        (p->dtype == FA_DTYPE_F16 || p->dtype == FA_DTYPE_BF16)) {
        snprintf(out->name, sizeof out->name, "mfma-fwd-%s-d%d", fa_dtype_name(p->dtype), bucket);
        const hip_choice c = {.mfma = 1, .bucket = bucket};
        hip_choice_put(out, &c);
        return FA_SUCCESS;
    }
    snprintf(out->name, sizeof out->name, "portable-%s-%s-d%d%s", p->backward ? "bwd" : "fwd",
             fa_dtype_name(p->dtype), bucket, p->backward ? "-deterministic" : "");
    const hip_choice c = {.mfma = 0, .bucket = bucket};
    hip_choice_put(out, &c);
    return FA_SUCCESS;
}

static int launch_forward(const fa_gpu_params *kp, const fa_problem *p, const fa_variant *v, void *stream)
{
    const hip_choice c = hip_choice_get(v);
    if (c.mfma)
        return fa_hip_mfma_forward(kp, (int)p->dtype, c.bucket, stream);
    return fa_hip_portable_forward(kp, (int)p->dtype, c.bucket, stream);
}

static int launch_backward(const fa_gpu_params *kp, const fa_problem *p, const fa_variant *v, void *stream)
{
    return fa_hip_portable_backward(kp, (int)p->dtype, hip_choice_get(v).bucket, stream);
}

static fa_status hip_forward(fa_context *ctx, const fa_problem *p, const fa_variant *v)
{
    return gpu_forward(ctx, p, v, launch_forward);
}

static fa_status hip_backward(fa_context *ctx, const fa_problem *p, const fa_variant *v)
{
    return gpu_backward(ctx, p, v, 0, launch_backward); /* deterministic: no dQ accumulator */
}

/* fa_forward_kvcache: the decode kernels (backends/gpu/decode/), on a device the library was
 * built for */
static const gpu_kv_entries kv_entries = {fa_hip_kv_forward, fa_hip_kv_blocks_per_processor, NULL, NULL};

static fa_status hip_forward_kvcache(fa_context *ctx, const fa_kv_problem *kp)
{
    char arch[64];
    arch_of(gpu_of(ctx), arch, sizeof arch);
    if (!arch_built(arch))
        return FA_ERROR(ctx, FA_ERR_UNSUPPORTED, "hip: the library's kernels are built for %s, the device is %s",
                        FA_HIP_ARCHS, arch);
    return gpu_forward_kvcache(ctx, kp, &kv_entries);
}

static int64_t hip_workspace(const fa_context *ctx, const fa_problem *p)
{
    (void)ctx;
    return gpu_mask_workspace(p, FA_GPU_BLOCK) + (p->backward ? p->total_q * p->heads_q * 8 : 0);
}

const fa_backend fa_backend_hip = {
    .name = "hip",
    .is_gpu = 1,
    .device_count = gpu_device_count,
    .availability = gpu_availability,
    .device_name = hip_device_name,
    .capabilities = hip_capabilities,
    .open = hip_open,
    .close = gpu_close,
    .tile_limits = hip_tile_limits,
    .choose = hip_choose,
    .forward = hip_forward,
    .backward = hip_backward,
    .forward_kvcache = hip_forward_kvcache,
    .workspace = hip_workspace,
    .alloc = gpu_alloc,
    .free = gpu_free,
    .copy = gpu_copy,
    .sync = gpu_sync,
    .set_stream = gpu_set_stream,
    .num_threads = NULL, // optional
    .lists_upload = gpu_lists_upload,
    .lists_free = gpu_lists_free,
};
