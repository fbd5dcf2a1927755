/* rtc_sm80.c: the sm80 tensor-core entry points of host/kernels.h for a build whose kernels are
 * compiled at run time (-Dcuda-kernels=rtc): the same instances, sequences, grids and dynamic
 * shared memory as the nvcc-built launchers (sm80/launch.cuh, instances/sm80_dispatch.cu), each
 * kernel compiled by NVRTC on first use (host/rtc_launch.h) and launched through the driver API.
 * Which instances exist, their tiles and their shared memory come from common/sm80_geometry.h,
 * which the nvcc build and generate_instances.py read too.
 *
 * Errors are CUresults (fa_rtc_entry_end): a call the family has no instance for is
 * CUDA_ERROR_INVALID_VALUE, a score modifier on rows that are not 16-byte aligned (no MOD
 * instance) and d > 128 without the fused backward's accumulator CUDA_ERROR_NOT_SUPPORTED, as the
 * nvcc launchers answer cudaErrorInvalidValue and cudaErrorNotSupported; this thread's message
 * (fa_rtc_last_error) says which. Plain C. */
#include "common/instance_mode.h"
#include "common/sm80_geometry.h"
#include "common/split_rule.h"
#include "host/driver_runtime.h"
#include "host/kernels.h"
#include "host/rtc_kernels.h"
#include "host/rtc_launch.h"
#include "kernels_switch.h"
#include "score_mod.h"
#include "host/why.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define CU_ERROR_INVALID_VALUE 1
#define CU_ERROR_NOT_SUPPORTED 801

/* An entry point's call: its element type's name, head dim, tile row and flags. */
typedef struct sm80_call {
    const fa_gpu_params *p;
    const char *t; /* the template argument T: "__half" or "__nv_bfloat16" */
    int d, aligned, mod, mode;
    int narrow; /* backward at d 256: bwd_kernel's 4-warp instance */
    fa_sm80_tile tile;
    void *stream;
} sm80_call;

static const char *bool_name(int b)
{
    return b ? "true" : "false";
}

/* The call for (p, dtype, head_dim, aligned) where the family has that instance; otherwise the
 * entry point's CUresult, with the message written. */
static int call_of(const fa_gpu_params *p, int dtype, int head_dim, int aligned, int backward, void *stream,
                   sm80_call *c)
{
    size_t len;
    char *why = fa_rtc_error_buffer(&len);
    memset(c, 0, sizeof *c);
    if (!p || !fa_sm80_instance_exists(dtype, head_dim, backward, 1, 0)) {
        fa_why_set(why, len, "the sm80 %s has no instance for dtype %d, head dim %d", backward ? "backward" : "forward",
            dtype, head_dim);
        return CU_ERROR_INVALID_VALUE;
    }
    c->p = p;
    c->t = dtype == 1 ? "__half" : "__nv_bfloat16";
    c->d = head_dim;
    c->aligned = aligned != 0;
    /* fa_gpu_has_score_mod; a forward's MOD instance also folds a learnable sink in and takes d_v
     * < d (fa_gpu_forward_mod) */
    c->mod = fa_score_mod_factors_active(p->mod) || (!backward && (p->sink || p->d_v != p->d));
    c->mode = fa_gpu_instance_mode(p);
    c->tile = fa_sm80_tile_of(head_dim);
    c->stream = stream;
    if (c->mod && !c->aligned) {
        fa_why_set(why, len, "the sm80 %s has no score-modifier (or sink) instance for rows that are not 16-byte aligned",
            backward ? "backward" : "forward");
        return CU_ERROR_NOT_SUPPORTED;
    }
    return 0;
}

/* Launches the kernel name names on grid (x, y, z) of threads threads with shared bytes of
 * dynamic shared memory, with p by value as its one parameter. */
static fa_rtc_status launch(const sm80_call *c, const char *name, int64_t x, int64_t y, int64_t z, unsigned threads,
                            size_t shared)
{
    size_t len;
    char *why = fa_rtc_error_buffer(&len);
    const fa_rtc_launch_config config = {"sm80", 0, x, y, z, threads, (unsigned)shared};
    fa_gpu_params params = *c->p;
    void *args[] = {&params};
    return fa_rtc_launch(name, &config, c->stream, args, why, len);
}

int fa_sm80_has_instance(int dtype, int head_dim, int backward, int aligned, int mod)
{
    return fa_sm80_instance_exists(dtype, head_dim, backward, aligned, mod);
}

size_t fa_sm80_fused_backward_smem(int head_dim)
{
    return fa_sm80_bwd_smem(head_dim);
}

/* launch_forward: forward_kernel<T, D, ALIGNED, MODE>, or <T, D, true, 2, true> with a score
 * modifier, over (ceil(seqlen_q / B_r), heads_q, batch) */
int fa_sm80_forward(const fa_gpu_params *p, int dtype, int head_dim, int aligned, int stages, void *stream)
{
    fa_rtc_entry_begin();
    sm80_call c;
    int r = call_of(p, dtype, head_dim, aligned, 0, stream, &c);
    if (r)
        return r;
    const int rows = FA_SM80_FWD_ROWS(c.tile.fwd_mtiles);
    /* split keys (p->splits > 1: plain calls, aligned rows, d <= 128): batch x splits blocks along
     * z, then split_combine_kernel<T, D> */
    const int split = p->splits > 1 && c.aligned && c.d <= 128 && c.mode == 0 && !c.mod;
    stages = c.aligned && stages == 1 ? 1 : 2; /* one stage: aligned rows only */
    char name[FA_RTC_NAME_MAX];
    if (stages == 1)
        snprintf(name, sizeof name, "fa_gpu::sm80::forward_kernel<%s, %d, true, %d, %s, %s, 1>", c.t, c.d,
                 c.mod ? 2 : c.mode, bool_name(c.mod), bool_name(split));
    else if (c.mod)
        snprintf(name, sizeof name, "fa_gpu::sm80::forward_kernel<%s, %d, true, 2, true>", c.t, c.d);
    else if (split)
        snprintf(name, sizeof name, "fa_gpu::sm80::forward_kernel<%s, %d, true, 0, false, true>", c.t, c.d);
    else
        snprintf(name, sizeof name, "fa_gpu::sm80::forward_kernel<%s, %d, %s, %d>", c.t, c.d, bool_name(c.aligned),
                 c.mode);
    fa_rtc_status st = launch(&c, name, (p->seqlen_q + rows - 1) / rows, p->heads_q, split ? p->batch * p->splits : p->batch,
                              FA_SM80_THREADS, FA_SM80_FWD_SMEM_STAGES(sizeof(uint16_t), c.d, rows, stages));
    if (st == FA_RTC_OK && split) {
        const int64_t items = FA_SPLIT_COMBINE_THREADS / 32; /* (row, head) items per block */
        snprintf(name, sizeof name, "fa_gpu::split_combine_kernel<%s, %d>", c.t, c.d);
        st = launch(&c, name, (p->total_q * p->heads_q + items - 1) / items, 1, 1, FA_SPLIT_COMBINE_THREADS, 0);
    }
    return fa_rtc_entry_end(st);
}

/* launch_fused: dq_accum zeroed (unless dsum_kernel cleared its rows, p->dq_zero_cols), kernel over
 * blocks_x key tiles (x kv heads x batch) of threads threads with shared bytes, dQ converted by
 * dq_convert_kernel<T, D>. */
static fa_rtc_status launch_fused(const sm80_call *c, const char *kernel, int threads, size_t shared, int64_t blocks_x)
{
    const fa_gpu_params *p = c->p;
    size_t len;
    char *why = fa_rtc_error_buffer(&len);
    if (p->dq_accum && p->dq_zero_cols == 0) {
        int64_t elems;
        if (__builtin_mul_overflow(p->heads_q, p->total_q, &elems) || __builtin_mul_overflow(elems, c->d, &elems) ||
            elems < 0 || (uint64_t)elems > SIZE_MAX / sizeof(float)) {
            fa_why_set(why, len, "the sm80 backward's dQ accumulator of %lld x %lld x %d floats overflows",
                (long long)p->heads_q, (long long)p->total_q, c->d);
            return FA_RTC_INVALID_ARG;
        }
        fa_cu_result e = fa_drv_MemsetAsync(p->dq_accum, 0, sizeof(float) * (size_t)elems, (fa_cu_stream)c->stream);
        if (e != FA_CU_SUCCESS) {
            const fa_cu_api *cu = fa_cu_driver(NULL, 0);
            fa_cu_check(cu, e, "cuMemsetD8Async", why, len);
            return FA_RTC_DRIVER_ERROR;
        }
    }
    fa_rtc_status st;
    if (p->seqlen_k > 0 &&
        (st = launch(c, kernel, blocks_x, p->heads_kv, p->batch, threads, shared)) != FA_RTC_OK)
        return st;
    if (p->seqlen_q == 0)
        return FA_RTC_OK;
    int64_t elems;
    /* the convert kernel's threads, eight channels each */
    if (__builtin_mul_overflow(p->seqlen_q, c->d / FA_SM80_CONVERT_CHANNELS, &elems) ||
        elems > INT64_MAX - FA_SM80_CONVERT_THREADS) {
        fa_why_set(why, len, "the sm80 backward's dQ of %lld x %d elements overflows", (long long)p->seqlen_q, c->d);
        return FA_RTC_INVALID_ARG;
    }
    char name[FA_RTC_NAME_MAX];
    snprintf(name, sizeof name, "fa_gpu::dq_convert_kernel<%s, %d>", c->t, c->d);
    return launch(c, name, (elems + FA_SM80_CONVERT_THREADS - 1) / FA_SM80_CONVERT_THREADS, p->heads_q, p->batch,
                  FA_SM80_CONVERT_THREADS, 0);
}

/* grid_backward_fits: d 64 and 128, unless FLASHATTN_KERNELS=sm80-backward=rows, where the
 * current device gives a block bwd_grid_kernel's shared memory (false where the driver cannot
 * say). The switch is read on each call (the nvcc launcher reads it once per process). */
static int grid_backward_fits(int d)
{
    char v[8];
    if ((d != 64 && d != 128) || (fa_kernels_switch("sm80-backward", v, sizeof v) && strcmp(v, "rows") == 0))
        return 0;
    const fa_cu_api *cu = fa_cu_driver(NULL, 0);
    fa_cu_device dev;
    int optin = 0;
    if (!cu || cu->CtxGetDevice(&dev) != FA_CU_SUCCESS ||
        cu->DeviceGetAttribute(&optin, FA_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev) != FA_CU_SUCCESS)
        return 0;
    return optin >= 0 && (size_t)optin >= FA_SM80_GRID_BWD_SMEM(d);
}

/* launch_deterministic_backward: dkdv_kernel over key blocks, then dq_kernel over query blocks */
static fa_rtc_status launch_deterministic(const sm80_call *c)
{
    const fa_gpu_params *p = c->p;
    const int bq = FA_SM80_DET_ROWS(c->d);
    char name[FA_RTC_NAME_MAX];
    fa_rtc_status st = FA_RTC_OK;
    if (p->seqlen_k > 0) {
        if (c->mod)
            snprintf(name, sizeof name, "fa_gpu::sm80::dkdv_kernel<%s, %d, %d, true, true>", c->t, c->d, bq);
        else
            snprintf(name, sizeof name, "fa_gpu::sm80::dkdv_kernel<%s, %d, %d, %s>", c->t, c->d, bq,
                     bool_name(c->aligned));
        st = launch(c, name, (p->seqlen_k + FA_GPU_BLOCK - 1) / FA_GPU_BLOCK, p->heads_kv, p->batch, FA_SM80_THREADS,
                    FA_SM80_DKDV_SMEM(sizeof(uint16_t), c->d));
        if (st != FA_RTC_OK)
            return st;
    }
    if (p->seqlen_q > 0) {
        if (c->mod)
            snprintf(name, sizeof name, "fa_gpu::sm80::dq_kernel<%s, %d, true, true>", c->t, c->d);
        else
            snprintf(name, sizeof name, "fa_gpu::sm80::dq_kernel<%s, %d, %s>", c->t, c->d, bool_name(c->aligned));
        st = launch(c, name, (p->seqlen_q + FA_GPU_BLOCK - 1) / FA_GPU_BLOCK, p->heads_q, p->batch, FA_SM80_THREADS,
                    FA_SM80_DQ_SMEM(sizeof(uint16_t), c->d));
    }
    return st;
}

/* launch_backward: dsum_kernel<T>, then the fused backward (bwd_grid_kernel where it fits, else
 * bwd_kernel) where p has the fp32 dQ accumulator (above d 128: always, it being the only one),
 * else the deterministic pair; *unsupported set where none serves (d > 128 without the
 * accumulator, after dsum_kernel as the nvcc launcher) */
static fa_rtc_status launch_backward(const sm80_call *c, int *unsupported)
{
    const fa_gpu_params *p = c->p;
    char name[FA_RTC_NAME_MAX];
    fa_rtc_status st;
    if (p->dq_zero_cols != 0 && p->dq_zero_cols != c->d) { /* dsum_kernel would clear rows of another width */
        size_t len;
        fa_why_set(fa_rtc_error_buffer(&len), len, "the sm80 backward at head dim %d cannot have dsum_kernel clear "
                   "%lld columns", c->d, (long long)p->dq_zero_cols);
        return FA_RTC_INVALID_ARG;
    }
    if (p->seqlen_q > 0) {
        snprintf(name, sizeof name, "fa_gpu::dsum_kernel<%s>", c->t);
        if ((st = launch(c, name, (p->seqlen_q + FA_SM80_DSUM_ROWS - 1) / FA_SM80_DSUM_ROWS, p->heads_q, p->batch,
                         FA_SM80_THREADS, 0)) != FA_RTC_OK)
            return st;
    }
    const int fused = c->d > 128 ? (p->dq_accum || p->seqlen_q == 0) : (p->dq_accum && p->seqlen_q > 0);
    const int64_t key_tiles = (p->seqlen_k + FA_SM80_BWD_KEYS - 1) / FA_SM80_BWD_KEYS;
    if (fused && !c->mod && c->aligned && grid_backward_fits(c->d)) {
        snprintf(name, sizeof name, "fa_gpu::sm80::bwd_grid_kernel<%s, %d, %d>", c->t, c->d, c->mode);
        return launch_fused(c, name, FA_SM80_BWD_THREADS, FA_SM80_GRID_BWD_SMEM(c->d), key_tiles);
    }
    if (fused) {
        /* bwd_kernel<T, D, ALIGNED, MODE, MOD, WARPS>: 8 warps over 128 keys a block, or the narrow
         * d 256 instance's 4 over 64; MOD (aligned here: call_of refused the others) in mode 2 */
        const int narrow = c->d == 256 && c->narrow;
        const int keys = narrow ? FA_SM80_BWD_NARROW_KEYS : FA_SM80_BWD_KEYS;
        char warps[16] = "";
        if (narrow)
            snprintf(warps, sizeof warps, ", %d", FA_SM80_BWD_NARROW_WARPS);
        if (c->mod)
            snprintf(name, sizeof name, "fa_gpu::sm80::bwd_kernel<%s, %d, true, 2, true%s>", c->t, c->d, warps);
        else
            snprintf(name, sizeof name, "fa_gpu::sm80::bwd_kernel<%s, %d, %s, %d%s%s>", c->t, c->d,
                     bool_name(c->aligned), c->mode, narrow ? ", false" : "", warps);
        return launch_fused(c, name, narrow ? FA_SM80_BWD_NARROW_THREADS : FA_SM80_BWD_THREADS,
                            narrow ? fa_sm80_bwd_narrow_smem(c->d) : fa_sm80_bwd_smem(c->d),
                            (p->seqlen_k + keys - 1) / keys * FA_SM80_BWD_PASSES(c->d));
    }
    if (c->d > 128) {
        size_t len;
        char *why = fa_rtc_error_buffer(&len);
        fa_why_set(why, len, "the sm80 backward at head dim %d needs the fused kernel's dQ accumulator (no deterministic "
                      "kernels above 128)",
            c->d);
        *unsupported = 1;
        return FA_RTC_OK;
    }
    return launch_deterministic(c);
}

int fa_sm80_backward(const fa_gpu_params *p, int dtype, int head_dim, int aligned, int narrow, void *stream)
{
    fa_rtc_entry_begin();
    sm80_call c;
    int r = call_of(p, dtype, head_dim, aligned, 1, stream, &c);
    if (r)
        return r;
    c.narrow = narrow != 0;
    int unsupported = 0;
    fa_rtc_status st = launch_backward(&c, &unsupported);
    return unsupported ? CU_ERROR_NOT_SUPPORTED : fa_rtc_entry_end(st);
}
