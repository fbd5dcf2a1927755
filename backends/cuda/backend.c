/* backend.c: the CUDA backend's table: the chooser (which kernel family and instance runs a
 * problem, or why none does: cuda_choice_of, one typed answer for the capability query, the
 * workspace size and the launch) and the launch glue; devices, streams, memory and errors are the
 * host glue it shares with the HIP backend (host/). Three kernel families: sm90/ (Hopper wgmma,
 * cc 9.0 exactly: the forward of plain fp16/bf16 calls and the non-deterministic backward), sm80/
 * (tensor cores, cc >= 8.0, fp16/bf16) and simt/ (any dtype, any head dim up to 256, any compute
 * capability), which runs what the others do not cover, or everything under
 * FLASHATTN_KERNELS=simt. Every family applies the score modifiers (softcap, ALiBi) where it takes
 * a call that has them. The learnable sink and a value head dim d_v != d are the SIMT kernels'
 * alone (forward, backward and the SIMT decode kernel): the chooser gives them every such call.
 * Every CUDA call is checked; errors reach the caller as FA_ERR_BACKEND with
 * the CUDA error's name. */
#include "common/sm80_geometry.h"
#include "common/sm90_geometry.h"
#include "common/split_rule.h"
#include "host/gpu_host.h"
#include "host/kernels.h"
#include "ring/ring.h"

#include <stdio.h>
#include <string.h>

#ifndef FA_HAVE_SM90 /* cuda-archs without 90: no Hopper instances */
int fa_sm90_has_instance(int dtype, int head_dim_pad, int plain, int mod)
{
    (void)dtype;
    (void)head_dim_pad;
    (void)plain;
    (void)mod;
    return 0;
}

int fa_sm90_forward(const fa_gpu_params *p, int dtype, int head_dim_pad, void *stream)
{
    (void)p;
    (void)dtype;
    (void)head_dim_pad;
    (void)stream;
    return (int)FA_RT_ERR_NO_KERNEL;
}

int fa_sm90_has_backward(int dtype, int head_dim_pad, int plain, int mod)
{
    (void)dtype;
    (void)head_dim_pad;
    (void)plain;
    (void)mod;
    return 0;
}

int fa_sm90_backward(const fa_gpu_params *p, int dtype, int head_dim_pad, void *stream)
{
    return fa_sm90_forward(p, dtype, head_dim_pad, stream);
}

int fa_sm90_kv_mla(const fa_gpu_kv_params *p, int dtype, unsigned blocks, unsigned splits, void *stream)
{
    (void)p;
    (void)dtype;
    (void)blocks;
    (void)splits;
    (void)stream;
    return (int)FA_RT_ERR_NO_KERNEL;
}
#endif

static fa_status cuda_device_name(int device, char *buf, size_t len)
{
    fa_rt_prop prop;
    if (FA_RT(GetDeviceProperties)(&prop, device) != FA_RT(Success))
        return FA_ERR_BACKEND;
    snprintf(buf, len, "%s (sm_%d%d, %d SMs, %.0f GiB)", prop.name, prop.major, prop.minor, prop.multiProcessorCount,
             (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
    return FA_SUCCESS;
}

static void cuda_capabilities(fa_capabilities *caps)
{
    caps->dtypes = (1u << FA_DTYPE_F32) | (1u << FA_DTYPE_F16) | (1u << FA_DTYPE_BF16);
    caps->max_head_dim = FA_MAX_HEAD_DIM; /* every d in 1..FA_MAX_HEAD_DIM: sm80 pads, the SIMT kernels take d exactly */
    caps->head_dims[0] = 0;
    caps->features = FA_FEATURE_CAUSAL | FA_FEATURE_WINDOW | FA_FEATURE_VARLEN | FA_FEATURE_GQA |
                     FA_FEATURE_DROPOUT | FA_FEATURE_BLOCK_SPARSE | FA_FEATURE_LSE | FA_FEATURE_DETERMINISTIC |
                     FA_FEATURE_BACKWARD | FA_FEATURE_STRIDES | FA_FEATURE_F32_OUTPUT | FA_FEATURE_SOFTCAP |
                     FA_FEATURE_ALIBI | FA_FEATURE_SINK | FA_FEATURE_HEAD_DIM_V | FA_FEATURE_KVCACHE |
                     FA_FEATURE_KVCACHE_DEVICE_CHECK;
#ifdef FA_CUDA_RTC
    /* kernels compiled at run time (host/rtc_kernels.c, rtc_simt.c, rtc_sm80.c, rtc_sm90.c,
     * rtc_decode.c, rtc_ring.c) */
    snprintf(caps->notes, sizeof caps->notes,
             "kernels compiled at run time by NVRTC for the device's sm (cached under FLASHATTN_CACHE_DIR): "
             "sm80 mma (cc>=8.0), cc 9.0 wgmma (sm_90a, where the driver encodes tensor maps) and simt "
             "as an aot build chooses them; decode and ring kernels");
    return;
#endif
    snprintf(caps->notes, sizeof caps->notes,
             "sm80 mma (cc>=8.0, f16/bf16; bwd d<=128, d256 non-det); cc 9.0 wgmma fwd, non-det bwd, d "
             "64/128/256 w/o dropout/block mask; softcap/ALiBi: 16B rows; simt: the rest (no f32 out from "
             "f16/bf16); FLASHATTN_KERNELS=sm80|sm90|simt|mfma-emulated");
}

/* The core builds block-sparse lists (and plans) at the 64 x 64 granularity every sm80 kernel
 * and every SIMT kernel walks (the SIMT forward's tiles are 64 x 64; its backward's row
 * blocks divide 64): the forward's 128-row query tiles merge the lists of their two 64-row halves, the fused
 * backward's 128-key blocks test both 64-key halves. The kernels' own tile shapes per head dim,
 * with the reason for each, are in sm80/tiles.h. M is the shared memory a block may opt into. */
static void cuda_tile_limits(const fa_context *ctx, const fa_problem *p, fa_tile_limits *out)
{
    (void)p;
    fa_gpu_tile_limits(out, (int64_t)fa_gpu_of(ctx)->prop.sharedMemPerBlockOptin);
}

static int view_aligned(const fa_view *v)
{
    return v->data == NULL || ((uintptr_t)v->data % 16 == 0 && v->sb % 8 == 0 && v->ss % 8 == 0 && v->sh % 8 == 0);
}

/* The kernel families (the file comment says what each covers). */
typedef enum cuda_family {
    FAMILY_SM80 = 1,
    FAMILY_SM90,
    FAMILY_SIMT,
    FAMILY_MFMA_EMULATED /* the HIP backend's MFMA forward, emulated: FLASHATTN_KERNELS=mfma-emulated */
} cuda_family;

/* What runs a problem. cuda_choice_of makes it; the capability query (through cuda_choose), the
 * workspace size and the launch all use that one answer. */
typedef struct cuda_choice {
    cuda_family family;
    fa_dtype dtype;
    int head_dim; /* the instance's: sm80 d padded to a multiple of 32; sm90 64, 128 or 256; simt
                     the bucket 64, 128 or 256 of the larger of d and d_v; mfma-emulated d's */
    int aligned;  /* sm80: every row 16-byte aligned and d % 8 == 0, so tiles move by cp.async */
    int fused;    /* backward: the non-deterministic kernel adding dQ into an fp32 accumulator of
                     total_q x heads_q x head_dim floats (sm80, sm90) */
    int mod;      /* softcap or ALiBi: the kernels' MOD instances */
    int fwd_stages; /* sm80 forward: K / V stages, 1 (aligned rows, FLASHATTN_KERNELS=sm80-fwd-stages) or 2 */
    int narrow;   /* sm80 fused backward at d 256: bwd_kernel's 4-warp instance (FLASHATTN_KERNELS=sm80-bwd-narrow) */
} cuda_choice;

/* The launch callbacks receive the variant, not the context: the choice travels in it. */
FA_VARIANT_CHOICE(cuda_choice)

/* Blocks of the sm80 forward an SM holds at smem bytes of shared memory each: at most two (its
 * registers, __launch_bounds__(128, 2)), each also taking the 1 KB the driver reserves per block on
 * cc >= 8.0; 0 where one does not fit what a block may opt into. */
static int sm80_fwd_blocks_per_sm(const fa_gpu_state *s, size_t smem)
{
    if (smem > s->prop.sharedMemPerBlockOptin)
        return 0;
    const size_t per_sm = s->prop.sharedMemPerMultiprocessor, n = per_sm / (smem + 1024);
    return per_sm == 0 || n >= 2 ? 2 : 1; /* an SM whose size is not known: as if two fit */
}

/* The sm80 forward's K / V stages for a call at padded head dim d: one where rows are 16-byte
 * aligned (the one-stage kernels are cp.async ones) and either the context was opened under
 * FLASHATTN_KERNELS=sm80-fwd-stages=1 or, by default (=auto), two stages do not fit a block or let
 * an SM hold fewer blocks than one (an A100 from d 128, Hopper from d 192: one block of two stages,
 * two of one; sm_86 / sm_89 at d 64 and from d 128); else two, as for dropout and score modifiers
 * below d 128 (no one-stage kernels, fa_sm80_one_stage_covers). Where both hold the same blocks,
 * two stages hide the next tile's copy behind this one's products. */
static int sm80_fwd_stages(const fa_gpu_state *s, const fa_problem *p, int aligned, int mod, int d)
{
    if (!aligned || s->sm80_fwd_stages == 2 || !fa_sm80_one_stage_covers(d, p->dropout_threshold != 0 || mod))
        return 2;
    if (s->sm80_fwd_stages == 1)
        return 1;
    return sm80_fwd_blocks_per_sm(s, fa_sm80_fwd_smem(d, 2)) < sm80_fwd_blocks_per_sm(s, fa_sm80_fwd_smem(d, 1)) ? 1 : 2;
}

/* Whether the sm80 tensor-core family has a kernel for p on this device: cc >= 8.0, fp16 or bf16,
 * an instance for the padded head dim (the backward's: 32, 64, 96, 128 and 256), for a score modifier
 * 16-byte aligned rows (its MOD instances are the cp.async ones), and the shared memory its kernels
 * ask for within what a block may opt into (an A100 gives 163 KB, sm_86 and sm_89 99 KB: the
 * forward needs 104 KB at d 128 and 169 KB at d 256, sm80_geometry.h). *fused says which backward
 * runs: 1 the fused kernel (bwd_kernel, or bwd_grid_kernel where the device has more), 0 the
 * deterministic pair, asked for or where the fused kernel does not fit (d <= 128 only: d 256 has
 * the fused kernel alone). Everything else is the SIMT family's, as is everything under
 * FLASHATTN_KERNELS=simt or =mfma-emulated. */
/* Whether the sm80 fused backward at padded head dim dpad runs bwd_kernel's 4-warp instance (64
 * keys a block, d 256 only): where the 8-warp one does not fit a block's shared memory and the
 * narrow one does, or under FLASHATTN_KERNELS=sm80-bwd-narrow. */
static int sm80_bwd_narrow(const fa_gpu_state *s, int dpad)
{
    const size_t optin = s->prop.sharedMemPerBlockOptin;
    const size_t narrow = fa_sm80_bwd_narrow_smem(dpad);
    return narrow != 0 && (s->sm80_bwd_narrow || (fa_sm80_fused_backward_smem(dpad) > optin && narrow <= optin));
}

static int sm80_covers(const fa_gpu_state *s, const fa_problem *p, int dpad, int aligned, int mod, int *fused)
{
    const size_t optin = s->prop.sharedMemPerBlockOptin;
    *fused = 0;
    if (!((s->kernels == FA_GPU_KERNELS_CHOOSER || s->kernels == FA_GPU_KERNELS_SM90 ||
           s->kernels == FA_GPU_KERNELS_SM80) &&
          s->prop.major >= 8 && (p->dtype == FA_DTYPE_F16 || p->dtype == FA_DTYPE_BF16) &&
          fa_sm80_has_instance((int)p->dtype, dpad, p->backward, aligned, mod)))
        return 0;
    if (!p->backward)
        return fa_sm80_fwd_smem(dpad, sm80_fwd_stages(s, p, aligned, mod, dpad)) <= optin;
    /* with no queries the fused launcher runs the deterministic dK = dV = 0 kernel at d <= 128 */
    const size_t det = fa_sm80_deterministic_smem(dpad);
    const int det_fits = det != 0 && det <= optin;
    /* d 256's narrow instance where the 8-warp one does not fit (an A100) or
     * FLASHATTN_KERNELS=sm80-bwd-narrow asks for it */
    const size_t fused_smem = sm80_bwd_narrow(s, dpad) ? fa_sm80_bwd_narrow_smem(dpad)
                                                       : fa_sm80_fused_backward_smem(dpad);
    *fused = !p->deterministic && fused_smem <= optin && (dpad > 128 || det_fits);
    return *fused || det_fits;
}

/* The Hopper instance's head dim for sm80's padded one: 64, 128, 192 (a forward's d 129..192) or
 * 256 (the backward's dpad above 128 is 256). */
static int sm90_head_dim(int dpad)
{
    return dpad <= 64 ? 64 : dpad <= 128 ? 128 : dpad <= 192 ? 192 : 256;
}

/* Whether p is a dropout forward that the Hopper forward's warp-specialised kernel takes: no block
 * lists, no score modifiers, d <= 128. */
static int sm90_ws_dropout(const fa_problem *p, int mod)
{
    return !p->backward && p->dropout_threshold != 0 && p->block_mask == NULL && !mod && p->d <= 128 &&
           p->d_v == p->d;
}

/* Whether the Hopper family takes p (padded head dim dpad; aligned and mod as the chooser has
 * them); decided before sm80's coverage, which it does not depend on (a build whose kernels are
 * compiled at run time may have the sm90 family without the sm80 one). */
static int sm90_takes(const fa_gpu_state *gs, const fa_problem *p, int dpad, int aligned, int mod)
{
    /* Hopper (cc 9.0 exactly: sm_90a code runs nowhere else): the wgmma forward where it has an
     * instance and the rows are 16-byte aligned. The chooser takes its warp-specialised kernel
     * for calls with neither dropout nor a block mask (with or without score modifiers), at d
     * 33..64 and 97..128 (padded to 64 and 128, where it is faster than the sm80 forward; other
     * d <= 128 would pad further than sm80's 32-column instances) and 129..256 (on the d 192
     * instance to d 192, the d 256 one above: their loads zero the columns from d on, their stores
     * stop at d),
     * and for dropout without block masks or score modifiers at d 33..64 and 97..128; the rest
     * stays on sm80, faster than the first wgmma kernel that covers dropout and block masks,
     * unless FLASHATTN_KERNELS=sm90 asks for that kernel (d <= 128, padded to 64 or 128; no
     * score modifiers) and for every head dim it has.
     * The wgmma backward: the fused non-deterministic algorithm (the deterministic option keeps
     * the sm80 two-kernel path), d 33..64, 97..128 and 129..256 (dpad 256 there; its fp32 dQ
     * accumulator has the padded head dim of the sm80 kernels), every mask at d <= 128; block
     * masks only under FLASHATTN_KERNELS=sm90 (their instances spill, sm80 stays the default) and
     * never with a score modifier; no dropout, and no score modifier at d 128 (at 168 registers
     * their wgmma would be serialized: no instance, fa_sm90_has_backward says so); at d 256 plain
     * calls only, on the kernel whose consumers split the columns (the rest: sm80's column-split
     * kernel). */
    const int plain = p->dropout_threshold == 0 && p->block_mask == NULL;
    const int dpad64 = sm90_head_dim(dpad);
    const int hopper = gs->prop.major == 9 && gs->prop.minor == 0;
    const int padded = dpad == dpad64 || dpad > 128;
    const int want = gs->kernels == FA_GPU_KERNELS_SM90 ||
                     (gs->kernels == FA_GPU_KERNELS_CHOOSER && (plain || sm90_ws_dropout(p, mod)) && padded);
    return want && hopper && aligned &&
           (p->backward ? !p->deterministic && p->dropout_threshold == 0 && dpad == dpad64 &&
                              fa_sm90_has_backward((int)p->dtype, dpad64, plain, mod)
                        : view_aligned(&p->o) && fa_sm90_has_instance((int)p->dtype, dpad64, plain, mod));
}

/* The chooser: the family and instance that run p, or FA_ERR_UNSUPPORTED with the reason in why. */
static fa_status cuda_choice_of(const fa_context *ctx, const fa_problem *p, cuda_choice *c, char *why, size_t why_len)
{
    const fa_gpu_state *gs = fa_gpu_of(ctx);
    memset(c, 0, sizeof *c);
    if (fa_gpu_grid_refuses(p, why, why_len))
        return FA_ERR_UNSUPPORTED;
    c->dtype = p->dtype;
    /* the score modifiers; a forward's learnable sink too, which the tensor-core families' MOD
     * instances fold in, and a forward's d_v < d, whose V loads and O stores they take at p.d_v
     * columns (fa_gpu_forward_mod) */
    const int fwd_dv = !p->backward && p->d_v < p->d;
    c->mod = fa_score_mod_active(p->mod) || (p->sink != NULL && !p->backward) || fwd_dv;
    /* the forward's aligned instances also store O in 16-byte words (store_tile) */
    c->aligned = p->d % 8 == 0 && p->d_v % 8 == 0 && view_aligned(&p->q) && view_aligned(&p->k) && view_aligned(&p->v) &&
                 (p->backward ? view_aligned(&p->dout) : view_aligned(&p->o));
    /* the tensor-core instances' head dim: d rounded up to 32 columns, except the backward's from
     * d 129, which has one instance, at 256 (its loads zero the columns from d on, its stores stop
     * at d) */
    const int d32 = (int)((p->d + 31) / 32 * 32);
    const int dpad = p->backward && d32 > 128 ? 256 : d32;
    /* d_v != d: the SIMT kernels only (the tensor-core families' backwards read one head dim),
     * except a forward with d_v < d (the MOD instances). A learnable sink runs on every family: the
     * tensor-core forwards' MOD instances fold it in, their backwards need only the LSE, and dsink
     * is the SIMT family's dsink_kernel after the family's dsum (tensor_core_dsink). */
    const int simt_only = p->d_v != p->d && !fwd_dv;
    const int sm90 = !simt_only && sm90_takes(gs, p, dpad, c->aligned, c->mod);
    int sm80_fused = 0;
    if (simt_only || (!sm90 && !sm80_covers(gs, p, dpad, c->aligned, c->mod, &sm80_fused))) {
        c->aligned = 0;
        if (p->out_dtype != p->dtype) { /* the SIMT kernels store the input dtype */
            if (simt_only)
                snprintf(why, why_len, "cuda: fp32 outputs from %s inputs need the tensor-core kernels, whose "
                                       "backwards do not run d_v != d, nor their forwards d_v > d",
                         fa_dtype_name(p->dtype));
            else
                snprintf(why, why_len,
                         "cuda: fp32 outputs from %s inputs need the tensor-core kernels (cc >= 8.0, head dim %s%s, "
                         "and the shared memory of their tiles within the %zu bytes a block may have here)",
                         fa_dtype_name(p->dtype), p->backward && p->deterministic ? "<= 128" : "<= 256",
                         c->mod ? "; with softcap or ALiBi also 16-byte aligned rows and d % 8 == 0" : "",
                         (size_t)gs->prop.sharedMemPerBlockOptin);
            return FA_ERR_UNSUPPORTED;
        }
        c->head_dim = fa_simt_bucket(p->d > p->d_v ? p->d : p->d_v);
        if (c->head_dim == 0) {
            snprintf(why, why_len, "cuda: no kernel for head dims d = %lld, d_v = %lld (1..%d)", (long long)p->d,
                     (long long)p->d_v, FA_MAX_HEAD_DIM);
            return FA_ERR_UNSUPPORTED;
        }
#ifndef FA_HAVE_MFMA_EMULATED
        if (gs->kernels == FA_GPU_KERNELS_MFMA_EMULATED) {
            snprintf(why, why_len, "cuda: the mfma-emulated kernels are a test aid, built only with -Dtests=true");
            return FA_ERR_UNSUPPORTED;
        }
#endif
        /* the HIP chooser's rule on gfx90a (its MFMA forward takes the score modifiers too, not the
         * sink nor d_v != d) */
        c->family = gs->kernels == FA_GPU_KERNELS_MFMA_EMULATED && p->sink == NULL && p->d_v == p->d && !p->backward &&
                            c->head_dim <= 128 &&
                            (p->dtype == FA_DTYPE_F16 || p->dtype == FA_DTYPE_BF16)
                        ? FAMILY_MFMA_EMULATED
                        : FAMILY_SIMT;
        return FA_SUCCESS;
    }
    c->family = sm90 ? FAMILY_SM90 : FAMILY_SM80;
    c->head_dim = sm90 ? sm90_head_dim(dpad) : dpad;
    c->fused = p->backward && (sm90 ? !p->deterministic : sm80_fused);
    c->fwd_stages = !sm90 && !p->backward ? sm80_fwd_stages(gs, p, c->aligned, c->mod, dpad) : 2;
    c->narrow = !sm90 && c->fused && sm80_bwd_narrow(gs, dpad);
    return FA_SUCCESS;
}

static fa_status cuda_choose(const fa_context *ctx, const fa_problem *p, fa_variant *out)
{
    cuda_choice c;
    char why[320];
    if (cuda_choice_of(ctx, p, &c, why, sizeof why) != FA_SUCCESS)
        return FA_ERROR((fa_context *)ctx, FA_ERR_UNSUPPORTED, "%s", why);
    const char *dir = p->backward ? "bwd" : "fwd", *dt = fa_dtype_name(p->dtype);
    /* the MOD instances: for a score modifier, else a sink or d_v < d */
    const char *mod = !c.mod ? "" : fa_score_mod_active(p->mod) ? "+mod" : p->sink ? "+sink" : "+dv";
    const int plain = p->dropout_threshold == 0 && p->block_mask == NULL;
    switch (c.family) {
    case FAMILY_SM90:
        snprintf(out->name, sizeof out->name, "sm90-%s-%s-d%d-wgmma%s%s", dir, dt, c.head_dim,
                 p->backward || plain || sm90_ws_dropout(p, c.mod) ? "-ws" : "", mod);
        break;
    case FAMILY_SM80:
        snprintf(out->name, sizeof out->name, "sm80-%s-%s-d%d-%s%s%s%s%s", dir, dt, c.head_dim,
                 c.aligned ? "cpasync" : "ldg", p->backward && !c.fused ? "-deterministic" : "",
                 c.fwd_stages == 1 ? "-1stage" : "", c.narrow ? "-narrow" : "", mod);
        break;
    case FAMILY_MFMA_EMULATED:
        snprintf(out->name, sizeof out->name, "mfma-emulated-fwd-%s-d%d%s", dt, c.head_dim, mod);
        break;
    case FAMILY_SIMT:
        snprintf(out->name, sizeof out->name, "simt-%s-%s-d%d%s%s", dir, dt, c.head_dim,
                 p->backward ? "-deterministic" : "", mod);
        break;
    }
    cuda_choice_put(out, &c);
    return FA_SUCCESS;
}

/* The chosen family's entry point: the runtime's error as an int. */
static int launch_forward(const fa_gpu_params *kp, const cuda_choice *c, void *stream)
{
    switch (c->family) {
    case FAMILY_SM90: return fa_sm90_forward(kp, (int)c->dtype, c->head_dim, stream);
    case FAMILY_SM80: return fa_sm80_forward(kp, (int)c->dtype, c->head_dim, c->aligned, c->fwd_stages, stream);
#ifdef FA_HAVE_MFMA_EMULATED
    case FAMILY_MFMA_EMULATED: return fa_mfma_forward(kp, (int)c->dtype, c->head_dim, stream);
#else
    case FAMILY_MFMA_EMULATED: break; /* never chosen: not built */
#endif
    case FAMILY_SIMT: return fa_simt_forward(kp, (int)c->dtype, c->head_dim, stream);
    }
    return (int)FA_RT_ERR_INVALID_VALUE;
}

/* The tensor-core families' backward with a learnable sink: dQ, dK, dV from the LSE the forward
 * wrote (the sink in it), then dsink from their dsum's D by the SIMT family's dsink_kernel, in a
 * fixed order. */
static int tensor_core_dsink(const fa_gpu_params *kp, int e, void *stream)
{
    return e == 0 && kp->sink && kp->dsink ? fa_simt_dsink(kp, stream) : e;
}

static int launch_backward(const fa_gpu_params *kp, const cuda_choice *c, void *stream)
{
    switch (c->family) {
    case FAMILY_SM90:
        return tensor_core_dsink(kp, fa_sm90_backward(kp, (int)c->dtype, c->head_dim, stream), stream);
    case FAMILY_SM80:
        return tensor_core_dsink(kp, fa_sm80_backward(kp, (int)c->dtype, c->head_dim, c->aligned, c->narrow, stream),
                                 stream);
    case FAMILY_SIMT: return fa_simt_backward(kp, (int)c->dtype, c->head_dim, stream);
    case FAMILY_MFMA_EMULATED: break; /* forward only */
    }
    return (int)FA_RT_ERR_INVALID_VALUE;
}

/* The fused kernels' fp32 dQ accumulator, at the instance's head dim (0: none); the Hopper d 256
 * kernel's has 64 rows a sequence more, for its layout of tiles (sm90_geometry.h's
 * FA_SM90_BW_ACC_ROWS; batch and heads are at most 65535 there, so the product fits). */
static int64_t dq_accum_floats(const fa_problem *p, const cuda_choice *c)
{
    if (!c->fused)
        return 0;
    const int64_t rows = c->family == FAMILY_SM90 ? FA_SM90_BW_ACC_ROWS(c->head_dim, p->total_q, p->batch) : p->total_q;
    return rows * p->heads_q * c->head_dim;
}

/* How many blocks share each query tile's keys in a forward (split_rule.h's rule, 1 unless the
 * grid leaves SMs idle; FLASHATTN_KERNELS=fwd-split=N: N): the Hopper forward's warp-specialised
 * kernel without dropout at d <= 128 (its d 256 instance would spill with the parts' epilogue);
 * the sm80 forward's plain calls (no dropout, block mask or score modifier) with aligned rows at
 * d <= 128 (two blocks per SM); 1 for the rest. At most 65535
 * blocks along z (sequences x splits), and (rows x heads) / 4 merge blocks within a grid's x. */
static int64_t forward_splits(const fa_gpu_state *gs, const fa_problem *p, const cuda_choice *c)
{
    const int sm90 = c->family == FAMILY_SM90, sm80 = c->family == FAMILY_SM80 && c->aligned && !c->mod;
    if ((!sm90 && !sm80) || c->head_dim > 128 || p->backward || p->dropout_threshold != 0 || p->block_mask ||
        p->sink || p->d_v != p->d || p->total_q * p->heads_q > INT32_MAX)
        return 1;
    if (gs->fwd_split > 0)
        return p->batch * gs->fwd_split <= 65535 ? gs->fwd_split : 1;
    /* query rows and keys per tile, blocks resident per SM */
    const int64_t br = sm90 ? FA_SM90_WS_BR : FA_SM80_FWD_ROWS(fa_sm80_tile_of(c->head_dim).fwd_mtiles);
    const int64_t bn = sm90 ? FA_SM90_WS_BN(c->head_dim) : FA_GPU_BLOCK, per_sm = sm90 ? 1 : 2;
    int64_t blocks;
    if (br <= 0 || !fa_mul_ok((p->seqlen_q + br - 1) / br, p->heads_q, &blocks) || !fa_mul_ok(blocks, p->batch, &blocks))
        return 1;
    const int64_t splits =
        fa_split_count(blocks, per_sm * gs->prop.multiProcessorCount, (p->seqlen_k + bn - 1) / bn, bn);
    return p->batch * splits <= 65535 ? splits : 1;
}

/* The split parts' fp32 O and LSE (fa_gpu_params.split_o, split_lse) for `splits` splits, in floats. */
static int split_floats(const fa_problem *p, int64_t splits, int64_t *floats)
{
    return fa_mul_ok(p->total_q * p->heads_q, splits, floats) && fa_mul_ok(*floats, p->d + 1, floats) &&
           (uint64_t)*floats <= SIZE_MAX / sizeof(float);
}

static fa_status cuda_forward(fa_context *ctx, const fa_problem *p, const fa_variant *v)
{
    const cuda_choice c = cuda_choice_get(v);
    fa_gpu_call call;
    fa_status st = fa_gpu_call_begin(ctx, p, 0, &call);
    if (st != FA_SUCCESS || !call.run)
        return st;
    int64_t splits = forward_splits(fa_gpu_of(ctx), p, &c), floats = 0;
    /* whole where the parts' size would overflow, or where a stream being captured into a graph
     * cannot grow the scratch */
    if (splits > 1 &&
        (!split_floats(p, splits, &floats) || !fa_gpu_scratch_usable(ctx, sizeof(float) * (size_t)floats)))
        splits = 1;
    if (splits > 1) { /* the parts in the context's scratch, kept for the next call */
        void *parts = NULL;
        if ((st = fa_gpu_scratch(ctx, sizeof(float) * (size_t)floats, &parts)) != FA_SUCCESS) {
            fa_gpu_call_end(ctx, &call, (int)FA_RT(Success), v->name);
            return st;
        }
        /* part s: O [total_q][heads_q][d] and LSE [total_q][heads_q], viewed as o and lse are
         * indexed (sequence, row, head; a varlen call's packed rows) */
        const int64_t rows = p->total_q * p->heads_q, sq = call.kp.cu_q ? 0 : p->seqlen_q;
        call.kp.splits = splits;
        call.kp.split_o = (fa_gpu_tensor){parts, sq * p->heads_q * p->d, p->heads_q * p->d, p->d};
        call.kp.split_lse = (fa_gpu_tensor){(float *)parts + splits * rows * p->d, sq * p->heads_q, p->heads_q, 1};
        call.kp.split_stride_o = rows * p->d;
        call.kp.split_stride_lse = rows;
    }
    return fa_gpu_call_end(ctx, &call, launch_forward(&call.kp, &c, call.stream), v->name);
}

static fa_status cuda_backward(fa_context *ctx, const fa_problem *p, const fa_variant *v)
{
    const cuda_choice c = cuda_choice_get(v);
    fa_gpu_call call;
    fa_status st = fa_gpu_call_begin(ctx, p, dq_accum_floats(p, &c), &call);
    if (st != FA_SUCCESS)
        return st;
    /* FLASHATTN_KERNELS=dsum-zero: the fused kernels' accumulator rows cleared by dsum_kernel
     * instead of a memset, where the accumulator has one row per query row (sm80; sm90 at d 64 and
     * 128) */
    if (fa_gpu_of(ctx)->dsum_zero && c.fused &&
        (c.family == FAMILY_SM80 || (c.family == FAMILY_SM90 && c.head_dim <= 128)))
        call.kp.dq_zero_cols = c.head_dim;
    return fa_gpu_call_end(ctx, &call, call.run ? launch_backward(&call.kp, &c, call.stream) : 0, v->name);
}

/* fa_forward_kvcache: the decode kernels (decode/) for every dtype and head dim (nvcc's instances, or
 * host/rtc_decode.c's launchers of what NVRTC compiles) */
static const fa_gpu_kv_entries kv_entries = {fa_kv_forward, fa_kv_blocks_per_processor, fa_kv_forward_mma,
                                             fa_kv_blocks_per_processor_mma};

static fa_status cuda_forward_kvcache(fa_context *ctx, const fa_kv_problem *kp)
{
    return fa_gpu_forward_kvcache(ctx, kp, &kv_entries);
}

static int64_t cuda_workspace(const fa_context *ctx, const fa_problem *p)
{
    int64_t bytes = fa_gpu_mask_workspace(p, FA_GPU_BLOCK);
    cuda_choice c;
    char why[320];
    if (p->backward) { /* D and LSE log2(e), and the fused kernels' fp32 dQ (none where no kernel runs p) */
        bytes += p->total_q * p->heads_q * 8;
        if (cuda_choice_of(ctx, p, &c, why, sizeof why) == FA_SUCCESS)
            bytes += 4 * dq_accum_floats(p, &c);
    } else if (cuda_choice_of(ctx, p, &c, why, sizeof why) == FA_SUCCESS) { /* the split keys' parts */
        int64_t floats;
        const int64_t splits = forward_splits(fa_gpu_of(ctx), p, &c);
        if (splits > 1 && split_floats(p, splits, &floats))
            bytes += 4 * floats;
    }
    return bytes;
}

/* ring attention's steps (ring/ring.cu, or host/rtc_ring.c) on the context's device and stream */
static fa_status cuda_ring_copy(fa_context *ctx, const fa_tensor *dst, const fa_tensor *src)
{
    FA_GPU_TRY(ctx, FA_RT(SetDevice)(ctx->device));
    FA_GPU_TRY(ctx, (fa_rt_error)fa_cuda_ring_copy(dst, src, fa_gpu_of(ctx)->stream));
    return FA_SUCCESS;
}

static fa_status cuda_ring_merge(fa_context *ctx, const fa_tensor *o, const fa_tensor *lse, const fa_tensor *o_part,
                                 const fa_tensor *lse_part)
{
    FA_GPU_TRY(ctx, FA_RT(SetDevice)(ctx->device));
    FA_GPU_TRY(ctx, (fa_rt_error)fa_cuda_ring_merge(o, lse, o_part, lse_part, fa_gpu_of(ctx)->stream));
    return FA_SUCCESS;
}

static fa_status cuda_ring_add(fa_context *ctx, const fa_tensor *acc, const fa_tensor *part)
{
    FA_GPU_TRY(ctx, FA_RT(SetDevice)(ctx->device));
    FA_GPU_TRY(ctx, (fa_rt_error)fa_cuda_ring_add(acc, part, fa_gpu_of(ctx)->stream));
    return FA_SUCCESS;
}

static void *cuda_stream(const fa_context *ctx)
{
    return fa_gpu_of(ctx)->stream;
}

const fa_backend fa_backend_cuda = {
    .name = "cuda",
    .is_gpu = 1,
    .device_count = fa_gpu_device_count,
    .availability = fa_gpu_availability,
    .device_name = cuda_device_name,
    .capabilities = cuda_capabilities,
    .open = fa_gpu_open,
    .close = fa_gpu_close,
    .tile_limits = cuda_tile_limits,
    .choose = cuda_choose,
    .forward = cuda_forward,
    .backward = cuda_backward,
    .forward_kvcache = cuda_forward_kvcache,
    .workspace = cuda_workspace,
    .alloc = fa_gpu_alloc,
    .free = fa_gpu_free,
    .copy = fa_gpu_copy,
    .sync = fa_gpu_sync,
    .set_stream = fa_gpu_set_stream,
    .num_threads = NULL, // optional
    .ring_copy = cuda_ring_copy,
    .ring_merge = cuda_ring_merge,
    .ring_add = cuda_ring_add,
    .stream = cuda_stream,
    .lists_upload = fa_gpu_lists_upload,
    .lists_free = fa_gpu_lists_free,
};
