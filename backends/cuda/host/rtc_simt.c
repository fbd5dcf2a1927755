/* rtc_simt.c: the SIMT family's forward and backward launched by fa_rtc_launch (rtc_launch.h) with
 * the grids, blocks and arguments of the compiled launchers (simt/forward.cuh's launch_forward,
 * simt/backward.cuh's launch_backward; both read common/simt_geometry.h). Vendor-neutral: the CUDA
 * backend's rtc build links it with host/rtc_launch.c (the driver API), the HIP module's with
 * backends/hip/rtc_launch.c (the HIP runtime). Plain C. */
#include "host/rtc_launch.h"

#include "common/simt_geometry.h"
#include "host/why.h"

#include <stdio.h>

/* A SIMT kernel's launch: grid (x, y, z) of FA_SIMT_THREADS threads, no dynamic shared memory. */
static fa_rtc_status launch_simt(const char *name, int64_t x, int64_t y, int64_t z, void *stream, void **args,
                                 char *why, size_t why_len)
{
    const fa_rtc_launch_config c = {"simt", 0, x, y, z, FA_SIMT_THREADS, 0};
    return fa_rtc_launch(name, &c, stream, args, why, why_len);
}

/* The head-dim bucket of p (the larger of d and d_v) and the storage type of dtype, or
 * FA_RTC_INVALID_ARG with why set. */
static fa_rtc_status simt_instance(const fa_gpu_params *p, int dtype, const char *what, const char **storage,
                                   int *bucket, char *why, size_t why_len)
{
    *storage = fa_simt_storage_name(dtype);
    if (!p || !*storage) {
        fa_why_set(why, why_len, "the SIMT %s has no kernel for dtype %d", what, dtype);
        return FA_RTC_INVALID_ARG;
    }
    *bucket = fa_simt_bucket_of(p->d > p->d_v ? p->d : p->d_v);
    if (*bucket == 0) {
        fa_why_set(why, why_len, "the SIMT %s has no kernel for head dims d = %lld, d_v = %lld", what, (long long)p->d,
            (long long)p->d_v);
        return FA_RTC_INVALID_ARG;
    }
    return FA_RTC_OK;
}

fa_rtc_status fa_rtc_launch_simt_forward(const fa_gpu_params *p, int dtype, void *stream, char *why, size_t why_len)
{
    if (why && why_len > 0)
        why[0] = 0;
    const char *storage;
    int bucket;
    fa_rtc_status st = simt_instance(p, dtype, "forward", &storage, &bucket, why, why_len);
    if (st != FA_RTC_OK)
        return st;
    /* launch_forward's rules (simt/forward.cuh), from the same header */
    const int64_t nq = fa_simt_query_tiles(p->seqlen_q);
    if (nq == 0 || p->batch == 0)
        return FA_RTC_OK;
    const size_t bytes = fa_simt_storage_bytes(dtype);
    /* the kernel's bool parameter: one byte, as the device ABI lays out bool */
    unsigned char vec = fa_simt_view_vec4(&p->q, bytes) && fa_simt_view_vec4(&p->k, bytes) &&
                        fa_simt_view_vec4(&p->v, bytes) && fa_simt_view_vec4(&p->o, bytes);
    const int mod = fa_score_mod_factors_active(p->mod); /* fa_gpu_has_score_mod's test */
    char name[FA_RTC_NAME_MAX];
    snprintf(name, sizeof name, "fa_gpu::simt::forward_kernel<%s, %d, %s>", storage, bucket, mod ? "true" : "false");
    fa_gpu_params params = *p; /* the kernel's first parameter, by value */
    void *args[] = {&params, &vec};
    return launch_simt(name, nq, p->heads_q, p->batch, stream, args, why, why_len);
}

fa_rtc_status fa_rtc_launch_simt_dsink(const fa_gpu_params *p, void *stream, char *why, size_t why_len)
{
    char name[FA_RTC_NAME_MAX];
    snprintf(name, sizeof name, "fa_gpu::simt::dsink_kernel<%d>", FA_SIMT_THREADS);
    fa_gpu_params params = *p;
    void *args[] = {&params};
    return launch_simt(name, p->heads_q, 1, 1, stream, args, why, why_len);
}

fa_rtc_status fa_rtc_launch_simt_backward(const fa_gpu_params *p, int dtype, void *stream, char *why, size_t why_len)
{
    if (why && why_len > 0)
        why[0] = 0;
    const char *storage;
    int bucket;
    fa_rtc_status st = simt_instance(p, dtype, "backward", &storage, &bucket, why, why_len);
    if (st != FA_RTC_OK || p->batch == 0)
        return st;
    /* launch_backward's sequence and rules (simt/backward.cuh), from the same header: dsum, dsink
     * (with a sink and dsink asked), dK / dV over key blocks, dQ over query blocks, one stream */
    const int rows = FA_SIMT_BWD_ROWS(bucket);
    const int64_t nd = (p->seqlen_q + FA_SIMT_THREADS - 1) / FA_SIMT_THREADS;
    const int64_t nq = (p->seqlen_q + rows - 1) / rows, nk = (p->seqlen_k + rows - 1) / rows;
    const char *mod = fa_score_mod_factors_active(p->mod) ? "true" : "false";
    fa_gpu_params params = *p;
    void *args[] = {&params};
    char name[FA_RTC_NAME_MAX];
    if (nd > 0) {
        snprintf(name, sizeof name, "fa_gpu::simt::dsum_kernel<%s>", storage);
        if ((st = launch_simt(name, nd, p->heads_q, p->batch, stream, args, why, why_len)) !=
            FA_RTC_OK)
            return st;
    }
    if (p->sink && p->dsink && (st = fa_rtc_launch_simt_dsink(p, stream, why, why_len)) != FA_RTC_OK)
        return st;
    if (nk > 0) {
        snprintf(name, sizeof name, "fa_gpu::simt::dkdv_kernel<%s, %d, %s>", storage, bucket, mod);
        if ((st = launch_simt(name, nk, p->heads_kv, p->batch, stream, args, why, why_len)) !=
            FA_RTC_OK)
            return st;
    }
    if (nq > 0) {
        snprintf(name, sizeof name, "fa_gpu::simt::dq_kernel<%s, %d, %s>", storage, bucket, mod);
        st = launch_simt(name, nq, p->heads_q, p->batch, stream, args, why, why_len);
    }
    return st;
}
