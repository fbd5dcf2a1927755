/* rtc_sm90.c: the Hopper family's entry points of host/kernels.h (fa_sm90_*) for a build whose
 * kernels are compiled at run time (-Dcuda-kernels=rtc): the kernels of sm90/kernels_device.cuh
 * compiled by NVRTC for sm_90a (wgmma, setmaxnreg and TMA need the 'a' target) and launched through
 * the driver API (host/rtc_launch.h), with exactly what the nvcc-built launchers do
 * (instances/sm90_dispatch.cu, sm90/kernels.cuh's launch_forward, sm90/backward.cuh's
 * launch_backward): the same instance per (dtype, head dim, mode, score modifier), grids, blocks,
 * dynamic shared memory and tensor maps, all from common/sm90_geometry.h. No kernel of the family
 * uses thread-block clusters, so cuLaunchKernel serves.
 *
 * The tensor maps (the producers' TMA loads of dense calls) are encoded with the driver's
 * cuTensorMapEncodeTiled (fa_cu_api's TensorMapEncodeTiled). A driver without it (older than
 * CUDA 12) has no Hopper instance here (fa_sm90_has_instance and fa_sm90_has_backward answer 0), so
 * the chooser (backend.c) takes another family. Errors as host/rtc_entry.c describes: a CUresult,
 * the message in fa_rtc_last_error. Plain C. */
#include "common/instance_mode.h"
#include "common/sm90_geometry.h"
#include "common/split_rule.h"
#include "host/driver_api.h"
#include "host/kernels.h"
#include "host/rtc_kernels.h"
#include "host/rtc_launch.h"
#include "host/why.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define CU_ERROR_NOT_SUPPORTED 801 /* cudaErrorNotSupported's number too */
#define ELEM_BYTES 2               /* fp16 and bf16 */

/* sm90/tma.cuh's tile_maps: the kernels' second parameter, two CUtensorMap (first: K or Q, second:
 * V or dO), 256 bytes aligned to 128 */
typedef struct sm90_maps {
    fa_cu_tensor_map first, second;
} sm90_maps;

/* The template argument T of dtype (1 fp16, 2 bf16) as the launchers instantiate it; NULL else. */
static const char *type_name(int dtype)
{
    return dtype == 1 ? "__half" : dtype == 2 ? "__nv_bfloat16" : NULL;
}

/* Whether the driver encodes tensor maps (without it the family reports no instance). */
static int driver_encodes_maps(void)
{
    char why[8];
    const fa_cu_api *cu = fa_cu_driver(why, sizeof why);
    return cu && cu->TensorMapEncodeTiled;
}

/* The instances instances/sm90_dispatch.cu has (generate_instances.py writes it): fp16 / bf16, d
 * 64 and 128, d 256 for plain calls, the forward at d 192 for plain calls, MOD kernels for plain
 * calls only; the backward has no MOD kernel at d 128. */
static int instance_exists(int dtype, int head_dim, int plain, int mod, int backward)
{
    if ((dtype != 1 && dtype != 2) || (mod && !plain))
        return 0;
    switch (head_dim) {
    case 64: return 1;
    case 128: return !backward || !mod;
    case 192: return plain && !backward;
    case 256: return plain;
    default: return 0;
    }
}

int fa_sm90_has_instance(int dtype, int head_dim, int plain, int mod)
{
    return instance_exists(dtype, head_dim, plain, mod, 0) && driver_encodes_maps();
}

int fa_sm90_has_backward(int dtype, int head_dim, int plain, int mod)
{
    return instance_exists(dtype, head_dim, plain, mod, 1) && driver_encodes_maps();
}

/* tensor_map.cuh's make_map: view t's map into *map; 0 where TMA cannot describe it or the
 * encoder fails (the caller keeps cp.async). */
static int make_map(const fa_cu_api *cu, fa_cu_tensor_map *map, const fa_gpu_tensor *t, const fa_gpu_params *p,
                    int64_t cols, int64_t rows, int64_t heads, int box_rows, int dtype)
{
    fa_sm90_map_shape m;
    if (!cu->TensorMapEncodeTiled ||
        !fa_sm90_map_shape_of(t, p, cols, rows, heads, box_rows, ELEM_BYTES,
                              dtype == 1 ? FA_SM90_TMA_FLOAT16 : FA_SM90_TMA_BFLOAT16, &m))
        return 0;
    return cu->TensorMapEncodeTiled(map, m.data_type, 4, t->data, m.dims, m.strides, m.box, m.step,
                                    FA_SM90_TMA_INTERLEAVE_NONE, FA_SM90_TMA_SWIZZLE_128B,
                                    FA_SM90_TMA_L2_PROMOTION_256B, FA_SM90_TMA_OOB_FILL_NONE) == FA_CU_SUCCESS;
}

static fa_rtc_status launch(const char *name, int64_t x, int64_t y, int64_t z, unsigned threads, unsigned shared,
                            void *stream, void **args, char *why, size_t why_len)
{
    const fa_rtc_launch_config c = {"sm90", 'a', x, y, z, threads, shared};
    return fa_rtc_launch(name, &c, stream, args, why, why_len);
}

/* launch_forward<T, D>: mode 0 on ws_forward_kernel<T, D, MOD, TMA> (TMA where K and V have maps),
 * modes 1 and 2 on forward_kernel<T, D, MODE> (d <= 128, no score modifier). */
static fa_rtc_status forward(const fa_gpu_params *p, int dtype, int d, void *stream, char *why, size_t why_len,
                             int *not_supported)
{
    const char *type = type_name(dtype);
    if (!type || (d != 64 && d != 128 && d != 192 && d != 256)) {
        fa_why_set(why, why_len, "the sm90 forward has no kernel for dtype %d, head dim %d", dtype, d);
        return FA_RTC_INVALID_ARG;
    }
    const int64_t nq = (p->seqlen_q + FA_SM90_BR - 1) / FA_SM90_BR;
    if (nq == 0 || p->batch == 0)
        return FA_RTC_OK;
    if (nq > 0x7fffffff || p->heads_q > 65535 || p->batch > 65535) {
        fa_why_set(why, why_len, "the sm90 forward's grid exceeds CUDA's limits: %lld query tiles, %lld heads, %lld sequences",
            (long long)nq, (long long)p->heads_q, (long long)p->batch);
        return FA_RTC_INVALID_ARG;
    }
    /* the MOD instances also fold a learnable sink in and take d_v < d (fa_gpu_forward_mod) */
    const int mode = fa_gpu_instance_mode(p),
              mod = fa_score_mod_factors_active(p->mod) || p->sink || p->d_v != p->d;
    fa_gpu_params params = *p; /* the kernels' first parameter, by value */
    char name[FA_RTC_NAME_MAX];
    /* dropout without block lists or score modifiers on the warp-specialised kernel too (d 64 and
     * 128) */
    const int ws_drop = mode == 2 && !p->bm_bits && !mod && d <= 128;
    if (mode == 0 || ws_drop) {
        const fa_cu_api *cu = fa_cu_driver(why, why_len);
        if (!cu)
            return FA_RTC_NO_DRIVER;
        sm90_maps maps;
        memset(&maps, 0, sizeof maps);
        /* split keys (p->splits > 1; d <= 128, not with dropout): batch x splits blocks along z,
         * then split_combine_kernel<T, D> */
        const int split = !ws_drop && d <= 128 && p->splits > 1 && !p->sink && p->d_v == p->d;
        /* the wide instance where it applies (FA_SM90_WS_WIDE): non-causal d 128 calls without
         * score modifiers whose K and V load by TMA */
        const int wide_asked = FA_SM90_WS_WIDE(d) && !p->causal && !mod && !ws_drop && !split;
        const int bn = FA_SM90_WS_BN_OF(d, wide_asked);
        const int tma = !p->cu_k && make_map(cu, &maps.first, &p->k, p, p->d, p->seqlen_k, p->heads_kv, bn, dtype) &&
                        make_map(cu, &maps.second, &p->v, p, p->d_v, p->seqlen_k, p->heads_kv, bn, dtype);
        const int wide = wide_asked && tma;
        snprintf(name, sizeof name, "fa_gpu::sm90::ws_forward_kernel<%s, %d, %s, %s%s>", type, d,
                 mod ? "true" : "false", tma ? "true" : "false",
                 ws_drop ? ", false, true" : split ? ", false, false, true" : wide ? ", true" : "");
        void *args[] = {&params, &maps};
        const unsigned smem = wide ? (unsigned)FA_SM90_WS_SMEM_N(ELEM_BYTES, d, FA_SM90_WS_BN_OF(d, 1))
                                   : (unsigned)FA_SM90_WS_SMEM(ELEM_BYTES, d);
        fa_rtc_status st = launch(name, (p->seqlen_q + FA_SM90_WS_BR - 1) / FA_SM90_WS_BR, p->heads_q,
                                  split ? p->batch * p->splits : p->batch, FA_SM90_WS_THREADS, smem, stream, args,
                                  why, why_len);
        if (st != FA_RTC_OK || !split)
            return st;
        const int64_t rows = FA_SPLIT_COMBINE_THREADS / 32; /* (row, head) items per block */
        snprintf(name, sizeof name, "fa_gpu::split_combine_kernel<%s, %d>", type, d);
        return launch(name, (p->total_q * p->heads_q + rows - 1) / rows, 1, 1, FA_SPLIT_COMBINE_THREADS, 0,
                      stream, args, why, why_len);
    }
    if (mod) {
        *not_supported = 1;
        fa_why_set(why, why_len, "the sm90 forward takes score modifiers without dropout and block masks only");
        return FA_RTC_INVALID_ARG;
    }
    if (d > 128) {
        fa_why_set(why, why_len, "the sm90 forward has no kernel for dropout or block masks at head dim %d", d);
        return FA_RTC_INVALID_ARG;
    }
    snprintf(name, sizeof name, "fa_gpu::sm90::forward_kernel<%s, %d, %d>", type, d, mode);
    void *args[] = {&params};
    return launch(name, nq, p->heads_q, p->batch, FA_SM90_THREADS, (unsigned)FA_SM90_SMEM(ELEM_BYTES, d), stream,
                  args, why, why_len);
}

/* launch_backward<T, D>: dsum_kernel<T> (clearing the fp32 dQ accumulator's rows with
 * p->dq_zero_cols, else a memset), ws_backward_kernel<T, D,
 * MODE, MOD, TMA> (TMA: the plain mode of a dense call, where Q and dO have maps) over key tiles,
 * at d 256 ws_backward_cols_kernel<T, MOD, TMA>, then dq_convert_kernel<T, D, D, true> (the
 * accumulator swizzled; d 256: dq_convert_cols_kernel<T>, its tiles in the consumers' register
 * order); the first failure stops the sequence. */
static fa_rtc_status backward(const fa_gpu_params *p, int dtype, int d, void *stream, char *why, size_t why_len)
{
    const char *type = type_name(dtype);
    if (!type || (d != 64 && d != 128 && d != 256)) {
        fa_why_set(why, why_len, "the sm90 backward has no kernel for dtype %d, head dim %d", dtype, d);
        return FA_RTC_INVALID_ARG;
    }
    if (p->seqlen_q == 0 || p->batch == 0)
        return FA_RTC_OK;
    const int mode = fa_gpu_instance_mode(p), mod = fa_score_mod_factors_active(p->mod);
    if (!p->dq_accum || !p->lse2 || p->heads_kv > 65535 || p->batch > 65535 || mode == 2 ||
        (mod && (mode != 0 || d == 128))) {
        fa_why_set(why, why_len,
            "the sm90 backward needs the dQ accumulator and LSE workspaces, at most 65535 KV heads and sequences, "
            "no dropout, and score modifiers only without block masks and at head dims other than 128");
        return FA_RTC_INVALID_ARG;
    }
    const fa_cu_api *cu = fa_cu_driver(why, why_len);
    if (!cu)
        return FA_RTC_NO_DRIVER;
    /* d 256's tiles hold rows of no sequence too (FA_SM90_BW_ACC_ROWS): never cleared by dsum_kernel */
    if (p->dq_zero_cols != 0 && (d > 128 || p->dq_zero_cols != d)) {
        fa_why_set(why, why_len, "the sm90 backward at head dim %d cannot have dsum_kernel clear %lld columns", d,
                   (long long)p->dq_zero_cols);
        return FA_RTC_INVALID_ARG;
    }
    fa_gpu_params params = *p;
    sm90_maps maps;
    memset(&maps, 0, sizeof maps);
    void *args[] = {&params, &maps}; /* the elementwise kernels take the first only */
    char name[FA_RTC_NAME_MAX];
    snprintf(name, sizeof name, "fa_gpu::dsum_kernel<%s>", type);
    fa_rtc_status st = launch(name, (p->seqlen_q + FA_SM90_DSUM_ROWS - 1) / FA_SM90_DSUM_ROWS, p->heads_q, p->batch,
                              FA_SM90_DSUM_THREADS, 0, stream, args, why, why_len);
    if (st != FA_RTC_OK)
        return st;
    size_t bytes, rows;
    if (p->heads_q < 0 || p->total_q < 0 || p->batch > INT64_MAX / 64 ||
        __builtin_add_overflow((size_t)p->total_q, d > 128 ? (size_t)FA_SM90_BW_BQ(d) * (size_t)p->batch : 0, &rows) ||
        __builtin_mul_overflow((size_t)p->heads_q, rows, &bytes) ||
        __builtin_mul_overflow(bytes, sizeof(float) * (size_t)d, &bytes)) {
        fa_why_set(why, why_len, "the sm90 backward's dQ accumulator: %lld heads x %lld rows overflow",
            (long long)p->heads_q, (long long)p->total_q);
        return FA_RTC_INVALID_ARG;
    }
    st = p->dq_zero_cols != 0 || fa_cu_check(cu, cu->MemsetD8Async((fa_cu_deviceptr)(uintptr_t)p->dq_accum, 0, bytes,
                                                        (fa_cu_stream)stream),
                                 "cuMemsetD8Async", why, why_len) == FA_CU_OK
             ? FA_RTC_OK
             : FA_RTC_DRIVER_ERROR;
    if (st != FA_RTC_OK)
        return st;
    if (p->seqlen_k > 0) {
        if (d > 128 && mode != 0) {
            fa_why_set(why, why_len, "the sm90 backward has no block-mask kernel at head dim %d", d);
            return FA_RTC_INVALID_ARG;
        }
        const int bq = FA_SM90_BW_BQ(d);
        const int tma = mode == 0 && !p->cu_q &&
                        make_map(cu, &maps.first, &p->q, p, p->d, p->seqlen_q, p->heads_q, bq, dtype) &&
                        make_map(cu, &maps.second, &p->dout, p, p->d_v, p->seqlen_q, p->heads_q, bq, dtype);
        if (d == 256)
            snprintf(name, sizeof name, "fa_gpu::sm90::ws_backward_cols_kernel<%s, %s, %s>", type,
                     mod ? "true" : "false", tma ? "true" : "false");
        else
            snprintf(name, sizeof name, "fa_gpu::sm90::ws_backward_kernel<%s, %d, %d, %s, %s>", type, d, mode,
                     mode == 0 && mod ? "true" : "false", tma ? "true" : "false");
        st = launch(name, (p->seqlen_k + FA_SM90_BW_BN(d) - 1) / FA_SM90_BW_BN(d), p->heads_kv, p->batch,
                    FA_SM90_BW_THREADS, (unsigned)FA_SM90_BW_SMEM(ELEM_BYTES, d), stream, args, why, why_len);
        if (st != FA_RTC_OK)
            return st;
    }
    int64_t elements; /* the convert kernel's threads: eight channels each, one at d 256 */
    if (__builtin_mul_overflow(p->seqlen_q, (int64_t)(d == 256 ? d : d / FA_SM90_DQ_CONVERT_CHANNELS), &elements)) {
        fa_why_set(why, why_len, "the sm90 backward's dQ: %lld rows x %d columns overflow", (long long)p->seqlen_q, d);
        return FA_RTC_INVALID_ARG;
    }
    if (d == 256)
        snprintf(name, sizeof name, "fa_gpu::sm90::dq_convert_cols_kernel<%s>", type);
    else
        snprintf(name, sizeof name, "fa_gpu::dq_convert_kernel<%s, %d, %d, true>", type, d, d);
    return launch(name, elements / FA_SM90_DQ_CONVERT_THREADS + (elements % FA_SM90_DQ_CONVERT_THREADS != 0),
                  p->heads_q, p->batch, FA_SM90_DQ_CONVERT_THREADS, 0, stream, args, why, why_len);
}

int fa_sm90_forward(const fa_gpu_params *p, int dtype, int head_dim, void *stream)
{
    fa_rtc_entry_begin();
    size_t len;
    char *why = fa_rtc_error_buffer(&len);
    why[0] = 0;
    int not_supported = 0;
    const int r = fa_rtc_entry_end(forward(p, dtype, head_dim, stream, why, len, &not_supported));
    return not_supported ? CU_ERROR_NOT_SUPPORTED : r; /* launch_forward's cudaErrorNotSupported */
}

int fa_sm90_backward(const fa_gpu_params *p, int dtype, int head_dim, void *stream)
{
    fa_rtc_entry_begin();
    size_t len;
    char *why = fa_rtc_error_buffer(&len);
    why[0] = 0;
    return fa_rtc_entry_end(backward(p, dtype, head_dim, stream, why, len));
}
