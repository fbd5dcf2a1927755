/* rtc_decode.c: fa_forward_kvcache's launches for a build whose kernels are compiled at run time
 * (host/rtc_launch.h's fa_rtc_launch_kv and its kin, which the entry points call: host/kernels.h's
 * fa_kv_* in host/rtc_kernels.c, the HIP module's fa_hip_kv_* in backends/hip/rtc_kernels.c): the
 * kernels of decode/ (the family's root decode/kernels_device.cuh) compiled by NVRTC or hipRTC on
 * first use and launched by fa_rtc_launch, vendor-neutral, in the sequence, on the grids and with
 * the shared memory of the compiled launchers (decode/decode.cuh's launch_call,
 * decode/decode_mma.cuh's launch_mma), which common/kv_geometry.h gives both:
 *   check_kernel<S>       where the call checks its arrays on the device (p->fault) and its decode
 *                         blocks do not (fa_kv_checks_in_blocks), one block of 256 threads per
 *                         sequence;
 *   append_kernel<S>      where new keys are given, a grid-stride loop over their elements;
 *   the decode kernel     decode_kernel<S, D, RT, ASYNC> (FA_KV_THREADS a block) or
 *                         decode_mma_kernel<S, D, ST, W> (W = p->mma_warps; its fifth
 *                         argument true where p->one_token), at bucket
 *                         FA_KV_MLA_D decode_mla_kernel<S, D, DV, KEYS>, or where
 *                         p->mla_sm90 decode_mla_sm90_kernel<S, D, DV, MOD> (for sm_90a), one
 *                         block per (sequence, kv head, row tile) by split;
 *   combine_kernel<S>     where the keys are split, one block per (query row, 32 channels of o);
 *                         combine_groups_kernel<S> instead where p->group_combine, 32 lanes per
 *                         (query row, 128 channels), 8 such a block.
 * Plain C. */
#include "common/kv_geometry.h"
#include "common/simt_geometry.h"
#include "host/rtc_launch.h"
#include "host/why.h"

#include <stdarg.h>
#include <stdio.h>

#define FAMILY "decode"

static FA_WHY_FORMAT fa_rtc_status invalid(char *why, size_t why_len, const char *fmt, ...)
{
    if (why && why_len > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, why_len, fmt, ap);
        va_end(ap);
    }
    return FA_RTC_INVALID_ARG;
}

/* The name expression of the SIMT decode instance (dtype, bucket, row tile, cp.async), as
 * instances/decode_fwd_*.cu instantiate it; 0 (with the reason) where there is none. */
static int simt_name(int dtype, int bucket, int row_tile, int async_copy, char *name, char *why, size_t why_len)
{
    const char *storage = fa_simt_storage_name(dtype);
    if (!storage || (bucket != 64 && bucket != 128 && bucket != 256) ||
        (row_tile != FA_KV_ROW_TILE_SMALL && row_tile != FA_KV_ROW_TILE_LARGE)) {
        invalid(why, why_len, "no decode kernel for dtype %d, head-dim bucket %d, row tile %d", dtype, bucket,
                row_tile);
        return 0;
    }
    /* the cp.async ring exists for the 2-byte storages only (decode.cuh's launch_instance) */
    const int ring = FA_KV_HAVE_ASYNC && async_copy && fa_simt_storage_bytes(dtype) == 2;
    snprintf(name, FA_RTC_NAME_MAX, "fa_gpu::decode::decode_kernel<%s, %d, %d, %s>", storage, bucket, row_tile,
             ring ? "true" : "false");
    return 1;
}

/* The tensor-core decode instance's name expression (fp16 / bf16, buckets 64 and 128, a ring of
 * FA_KV_MMA_STAGES stages, FA_KV_MMA_MIN_WARPS or FA_KV_MMA_MAX_WARPS warps, the ONE_TOKEN instance
 * where one_token; at bucket FA_KV_MLA_D the MLA kernel, which has none). */
static int mma_name(int dtype, int bucket, int warps, int one_token, char *name, char *why, size_t why_len)
{
    if ((dtype != 1 && dtype != 2) || (bucket != 64 && bucket != 128 && bucket != FA_KV_MLA_D) ||
        (bucket == FA_KV_MLA_D ? warps != FA_KV_MLA_WARPS : warps != FA_KV_MMA_MIN_WARPS && warps != FA_KV_MMA_MAX_WARPS)) {
        invalid(why, why_len, "no tensor-core decode kernel for dtype %d, head-dim bucket %d, %d warps", dtype, bucket,
                warps);
        return 0;
    }
    if (bucket == FA_KV_MLA_D) /* the MLA kernel (decode_mla_kernels.cuh): one instance a dtype */
        snprintf(name, FA_RTC_NAME_MAX, "fa_gpu::decode::decode_mla_kernel<%s, %d, %d, %d>", fa_simt_storage_name(dtype),
                 FA_KV_MLA_D, FA_KV_MLA_DV, FA_KV_MLA_KEYS);
    else
        snprintf(name, FA_RTC_NAME_MAX, "fa_gpu::decode::decode_mma_kernel<%s, %d, %d, %d%s>",
                 fa_simt_storage_name(dtype), bucket, FA_KV_MMA_STAGES, warps, one_token ? ", true" : "");
    return 1;
}

/* One kernel of the call on (x, y) blocks of `threads`, its one argument the parameter block;
 * compiled for the device's sm with the architecture letter `suffix` (0: none). */
static fa_rtc_status launch_kv(const char *name, char suffix, int64_t x, int64_t y, unsigned threads,
                               unsigned shared_bytes, const fa_gpu_kv_params *p, void *stream, char *why,
                               size_t why_len)
{
    const fa_rtc_launch_config c = {FAMILY, suffix, x, y, 1, threads, shared_bytes};
    void *args[] = {(void *)p};
    return fa_rtc_launch(name, &c, stream, args, why, why_len);
}

/* decode.cuh's launch_call: check and append, the decode kernel `decode` (for the architecture
 * letter decode_suffix), then combine. */
static fa_rtc_status launch_call(const fa_gpu_kv_params *p, int dtype, const char *decode, char decode_suffix,
                                 unsigned decode_threads, unsigned decode_smem, void *stream, char *why,
                                 size_t why_len)
{
    const char *storage = fa_simt_storage_name(dtype);
    char name[FA_RTC_NAME_MAX];
    fa_rtc_status st;
    if (p->fault && p->batch != 0 && !fa_kv_checks_in_blocks(p)) {
        snprintf(name, sizeof name, "fa_gpu::decode::check_kernel<%s>", storage);
        if ((st = launch_kv(name, 0, fa_kv_check_blocks(p->batch), 1, FA_KV_ELEMENTWISE_THREADS, 0, p, stream, why,
                            why_len)) != FA_RTC_OK)
            return st;
    }
    if (p->k_new.data && p->seqlen_knew != 0) {
        snprintf(name, sizeof name, "fa_gpu::decode::append_kernel<%s>", storage);
        if ((st = launch_kv(name, 0, fa_kv_stride_blocks(fa_kv_append_elements(p)), 1, FA_KV_ELEMENTWISE_THREADS, 0, p,
                            stream, why, why_len)) != FA_RTC_OK)
            return st;
    }
    if (p->seqlen_new == 0)
        return FA_RTC_OK;
    unsigned blocks, splits;
    if (!fa_kv_decode_grid(p, &blocks, &splits))
        return invalid(why, why_len, "%s: %lld blocks by %lld splits exceed CUDA's grid", decode,
                       (long long)(p->batch * p->heads_kv * p->row_tiles), (long long)p->splits);
    if ((st = launch_kv(decode, decode_suffix, blocks, splits, decode_threads, decode_smem, p, stream, why,
                        why_len)) != FA_RTC_OK)
        return st;
    if (p->splits == 1)
        return FA_RTC_OK;
    snprintf(name, sizeof name, "fa_gpu::decode::%s<%s>", p->group_combine ? "combine_groups_kernel" : "combine_kernel",
             storage);
    return launch_kv(name, 0, fa_kv_combine_blocks(p), 1, FA_KV_ELEMENTWISE_THREADS, 0, p, stream, why, why_len);
}

/* The SIMT instance's dynamic shared memory: the ring's where the instance has one. */
static unsigned simt_smem(int dtype, int bucket, int async_copy)
{
    return (unsigned)fa_kv_simt_smem(bucket, FA_KV_HAVE_ASYNC && async_copy && fa_simt_storage_bytes(dtype) == 2);
}

fa_rtc_status fa_rtc_launch_kv(const fa_gpu_kv_params *p, int dtype, int bucket, int row_tile, int async_copy,
                               void *stream, char *why, size_t why_len)
{
    char name[FA_RTC_NAME_MAX];
    if (!simt_name(dtype, bucket, row_tile, async_copy, name, why, why_len))
        return FA_RTC_INVALID_ARG;
    return launch_call(p, dtype, name, 0, FA_KV_THREADS, simt_smem(dtype, bucket, async_copy), stream, why, why_len);
}

fa_rtc_status fa_rtc_kv_blocks(int dtype, int bucket, int row_tile, int async_copy, int *blocks, char *why,
                               size_t why_len)
{
    char name[FA_RTC_NAME_MAX];
    if (!simt_name(dtype, bucket, row_tile, async_copy, name, why, why_len))
        return FA_RTC_INVALID_ARG;
    return fa_rtc_occupancy(FAMILY, name, FA_KV_THREADS, simt_smem(dtype, bucket, async_copy), blocks, why, why_len);
}

/* The tensor-core (or, at bucket FA_KV_MLA_D, MLA) instance's dynamic shared memory. */
static unsigned mma_smem(int bucket, int warps)
{
    return bucket == FA_KV_MLA_D ? (unsigned)FA_KV_MLA_SMEM : (unsigned)FA_KV_MMA_SMEM(bucket, FA_KV_MMA_STAGES, warps);
}

fa_rtc_status fa_rtc_launch_kv_mma(const fa_gpu_kv_params *p, int dtype, int bucket, void *stream, char *why,
                                   size_t why_len)
{
    char name[FA_RTC_NAME_MAX];
    if (p->mla_sm90) { /* the Hopper MLA kernel (decode_mla_sm90_kernels.cuh), its MOD instance for a
                        * softcap or ALiBi */
        if ((dtype != 1 && dtype != 2) || bucket != FA_KV_MLA_D)
            return invalid(why, why_len, "no Hopper MLA decode kernel for dtype %d, head-dim bucket %d", dtype, bucket);
        snprintf(name, FA_RTC_NAME_MAX, "fa_gpu::decode::decode_mla_sm90_kernel<%s, %d, %d, %s>",
                 fa_simt_storage_name(dtype), FA_KV_MLA_D, FA_KV_MLA_DV,
                 fa_score_mod_factors_active(p->mod) ? "true" : "false");
        return launch_call(p, dtype, name, 'a', FA_KV_MLA_SM90_THREADS, FA_KV_MLA_SM90_SMEM, stream, why, why_len);
    }
    if (!mma_name(dtype, bucket, p->mma_warps, p->one_token, name, why, why_len))
        return FA_RTC_INVALID_ARG;
    return launch_call(p, dtype, name, 0, 32u * (unsigned)p->mma_warps, mma_smem(bucket, p->mma_warps), stream, why,
                       why_len);
}

fa_rtc_status fa_rtc_kv_blocks_mma(int dtype, int bucket, int warps, int one_token, int *blocks, char *why,
                                   size_t why_len)
{
    char name[FA_RTC_NAME_MAX];
    if (!mma_name(dtype, bucket, warps, one_token, name, why, why_len))
        return FA_RTC_INVALID_ARG;
    return fa_rtc_occupancy(FAMILY, name, 32u * (unsigned)warps, mma_smem(bucket, warps), blocks, why, why_len);
}
