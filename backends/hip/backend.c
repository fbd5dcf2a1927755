/* backend.c: the HIP backend's table (AMD GPUs through ROCm's HIP runtime): the chooser and the
 * launch glue; devices, streams, memory and errors are the host glue it shares with the CUDA
 * backend (backends/cuda/host/, compiled here against HIP's runtime). Two kernel families of the
 * CUDA-language tree, built by hipcc for the offload targets of -Dhip-archs:
 *   mfma/  the matrix-core forward for CDNA (gfx90a, gfx94x), fp16/bf16, d <= 128;
 *   simt/  the SIMT kernels: every dtype, head dim, option and the backward, on any target
 *          (wave64 and wave32 alike).
 * Both take the score modifiers (softcap, ALiBi): every choice runs them, forward and backward.
 * The learnable sink and a value head dim d_v != d are the SIMT kernels' alone (the MFMA forward
 * reads neither): the chooser gives them every such call.
 * FLASHATTN_KERNELS=simt runs everything on the SIMT family. The chooser refuses, with the reason,
 * a device whose architecture the library was not built for (-Dhip-archs). A module built with
 * -Dhip-kernels=rtc (FA_HIP_RTC) compiles the same kernels at run time with hipRTC for the device
 * found, whatever its architecture (rtc_kernels.c); it offers the same capabilities. */
#include "host/gpu_host.h"
#include "kernels.h"

#include <stdio.h>
#include <string.h>

#ifndef FA_HIP_ARCHS
#define FA_HIP_ARCHS ""
#endif

/* Whether the capabilities list FA_FEATURE_SINK and FA_FEATURE_HEAD_DIM_V (until they do, the core
 * refuses those calls before the chooser sees them): the SIMT kernels have them, the chooser routes
 * them, and the listing waits for the conformance grid's sink and d_v != d cases to pass on an AMD
 * GPU, after which that run sets this to 1 (a build may define it to run those cases). */
#ifndef FA_HIP_SINK_AND_DV_VERIFIED
#define FA_HIP_SINK_AND_DV_VERIFIED 0
#endif

/* What runs a call: the MFMA forward or the SIMT kernels, at a head-dim bucket (64, 128, 256).
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

#ifdef FA_HIP_RTC
#define KERNELS_NOTE "kernels compiled at run time by hipRTC for the device"
#else
#define KERNELS_NOTE "built for " FA_HIP_ARCHS
#endif

static void hip_capabilities(fa_capabilities *caps)
{
    caps->dtypes = (1u << FA_DTYPE_F32) | (1u << FA_DTYPE_F16) | (1u << FA_DTYPE_BF16);
    caps->max_head_dim = FA_MAX_HEAD_DIM;
    caps->head_dims[0] = 0;
    caps->features = FA_FEATURE_CAUSAL | FA_FEATURE_WINDOW | FA_FEATURE_VARLEN | FA_FEATURE_GQA |
                     FA_FEATURE_DROPOUT | FA_FEATURE_BLOCK_SPARSE | FA_FEATURE_LSE | FA_FEATURE_DETERMINISTIC |
                     FA_FEATURE_BACKWARD | FA_FEATURE_STRIDES | FA_FEATURE_SOFTCAP | FA_FEATURE_ALIBI |
                     FA_FEATURE_KVCACHE | FA_FEATURE_KVCACHE_DEVICE_CHECK;
    if (FA_HIP_SINK_AND_DV_VERIFIED)
        caps->features |= FA_FEATURE_SINK | FA_FEATURE_HEAD_DIM_V;
    snprintf(caps->notes, sizeof caps->notes,
             "%s; MFMA forward on CDNA (gfx90a, gfx94x; fp16/bf16, d <= 128), SIMT kernels "
             "for the rest (always deterministic), or for all with FLASHATTN_KERNELS=simt; "
             "not yet run on AMD hardware (README)",
             KERNELS_NOTE);
}

/* The device's architecture without feature flags: "gfx90a" of "gfx90a:sramecc+:xnack-". */
static void arch_of(const fa_gpu_state *s, char *out, size_t len)
{
    size_t n = strcspn(s->prop.gcnArchName, ":");
    if (n >= len)
        n = len - 1;
    memcpy(out, s->prop.gcnArchName, n);
    out[n] = '\0';
}

/* Whether `arch` is one of the ';'-separated offload targets the kernels were built for (any,
 * where they are compiled at run time for the device). */
static int arch_built(const char *arch)
{
#ifdef FA_HIP_RTC
    (void)arch;
    return 1;
#else
    const char *list = FA_HIP_ARCHS;
    size_t n = strlen(arch);
    while (*list) {
        size_t m = strcspn(list, ";");
        if (m == n && strncmp(list, arch, n) == 0)
            return 1;
        list += m + (list[m] == ';');
    }
    return 0;
#endif
}

static int arch_is_cdna_mfma(const char *arch)
{
    return strcmp(arch, "gfx90a") == 0 || strcmp(arch, "gfx940") == 0 || strcmp(arch, "gfx941") == 0 ||
           strcmp(arch, "gfx942") == 0;
}

/* The core builds block-sparse lists at the SIMT kernels' 64 x 64 tiles; the MFMA forward's
 * 32-row blocks and 32-key steps lie inside them. */
static void hip_tile_limits(const fa_context *ctx, const fa_problem *p, fa_tile_limits *out)
{
    (void)p;
    fa_gpu_tile_limits(out, (int64_t)fa_gpu_of(ctx)->prop.sharedMemPerBlock);
}

static fa_status hip_choose(const fa_context *ctx, const fa_problem *p, fa_variant *out)
{
    if (p->out_dtype != p->dtype)
        return FA_ERROR((fa_context *)ctx, FA_ERR_UNSUPPORTED,
                        "hip: fp32 outputs from %s inputs are not supported (the cpu and cuda backends have them)",
                        fa_dtype_name(p->dtype));
    const fa_gpu_state *s = fa_gpu_of(ctx);
    char arch[64];
    arch_of(s, arch, sizeof arch);
    if (!arch_built(arch))
        return FA_ERROR((fa_context *)ctx, FA_ERR_UNSUPPORTED,
                        "hip: the library's kernels are built for %s, the device is %s (configure with "
                        "-Dhip-archs='%s;...' where the toolchain supports it)",
                        FA_HIP_ARCHS, arch, arch);
    char why[192];
    if (fa_gpu_grid_refuses(p, why, sizeof why))
        return FA_ERROR((fa_context *)ctx, FA_ERR_UNSUPPORTED, "%s", why);
    /* the SIMT kernels' bucket covers both head dims; the sink and d_v != d are theirs alone */
    const int simt_only = p->sink != NULL || p->d_v != p->d;
    int bucket = fa_hip_simt_bucket(p->d > p->d_v ? p->d : p->d_v);
    if (bucket == 0)
        return FA_ERROR((fa_context *)ctx, FA_ERR_UNSUPPORTED, "hip: no kernel for head dims d = %lld, d_v = %lld (1..%d)",
                        (long long)p->d, (long long)p->d_v, FA_MAX_HEAD_DIM);
    if (s->kernels != FA_GPU_KERNELS_SIMT && !simt_only && !p->backward && arch_is_cdna_mfma(arch) && bucket <= 128 &&
        (p->dtype == FA_DTYPE_F16 || p->dtype == FA_DTYPE_BF16)) {
        snprintf(out->name, sizeof out->name, "mfma-fwd-%s-d%d", fa_dtype_name(p->dtype), bucket);
        const hip_choice c = {.mfma = 1, .bucket = bucket};
        hip_choice_put(out, &c);
        return FA_SUCCESS;
    }
    snprintf(out->name, sizeof out->name, "simt-%s-%s-d%d%s", p->backward ? "bwd" : "fwd",
             fa_dtype_name(p->dtype), bucket, p->backward ? "-deterministic" : "");
    const hip_choice c = {.mfma = 0, .bucket = bucket};
    hip_choice_put(out, &c);
    return FA_SUCCESS;
}

static fa_status hip_forward(fa_context *ctx, const fa_problem *p, const fa_variant *v)
{
    const hip_choice c = hip_choice_get(v);
    fa_gpu_call call;
    fa_status st = fa_gpu_call_begin(ctx, p, 0, &call);
    if (st != FA_SUCCESS || !call.run)
        return st;
    const int e = c.mfma ? fa_hip_mfma_forward(&call.kp, (int)p->dtype, c.bucket, call.stream)
                         : fa_hip_simt_forward(&call.kp, (int)p->dtype, c.bucket, call.stream);
    return fa_gpu_call_end(ctx, &call, e, v->name);
}

static fa_status hip_backward(fa_context *ctx, const fa_problem *p, const fa_variant *v)
{
    fa_gpu_call call; /* deterministic: no dQ accumulator */
    fa_status st = fa_gpu_call_begin(ctx, p, 0, &call);
    if (st != FA_SUCCESS)
        return st;
    const int e = call.run ? fa_hip_simt_backward(&call.kp, (int)p->dtype, hip_choice_get(v).bucket, call.stream) : 0;
    return fa_gpu_call_end(ctx, &call, e, v->name);
}

/* fa_forward_kvcache: the decode kernels (backends/cuda/decode/), on a device the library was
 * built for */
static const fa_gpu_kv_entries kv_entries = {fa_hip_kv_forward, fa_hip_kv_blocks_per_processor, NULL, NULL};

static fa_status hip_forward_kvcache(fa_context *ctx, const fa_kv_problem *kp)
{
    char arch[64];
    arch_of(fa_gpu_of(ctx), arch, sizeof arch);
    if (!arch_built(arch))
        return FA_ERROR(ctx, FA_ERR_UNSUPPORTED, "hip: the library's kernels are built for %s, the device is %s",
                        FA_HIP_ARCHS, arch);
    return fa_gpu_forward_kvcache(ctx, kp, &kv_entries);
}

static int64_t hip_workspace(const fa_context *ctx, const fa_problem *p)
{
    (void)ctx;
    return fa_gpu_mask_workspace(p, FA_GPU_BLOCK) + (p->backward ? p->total_q * p->heads_q * 8 : 0);
}

const fa_backend fa_backend_hip = {
    .name = "hip",
    .is_gpu = 1,
    .device_count = fa_gpu_device_count,
    .availability = fa_gpu_availability,
    .device_name = hip_device_name,
    .capabilities = hip_capabilities,
    .open = fa_gpu_open,
    .close = fa_gpu_close,
    .tile_limits = hip_tile_limits,
    .choose = hip_choose,
    .forward = hip_forward,
    .backward = hip_backward,
    .forward_kvcache = hip_forward_kvcache,
    .workspace = hip_workspace,
    .alloc = fa_gpu_alloc,
    .free = fa_gpu_free,
    .copy = fa_gpu_copy,
    .sync = fa_gpu_sync,
    .set_stream = fa_gpu_set_stream,
    .num_threads = NULL, // optional
    .lists_upload = fa_gpu_lists_upload,
    .lists_free = fa_gpu_lists_free,
};
