/* rtc_kernels.c: the HIP module's kernel entry points (kernels.h) for a build whose kernels are
 * compiled at run time (-Dhip-kernels=rtc): each compiles its instance with hipRTC on first use
 * (the disk cache keeps it for later processes) and launches it through the HIP runtime
 * (rtc_launch.c) with the hipcc-built launchers' geometry: the SIMT forward and backward and the
 * decode sequence defined as the CUDA backend's rtc build defines them
 * (../cuda/host/rtc_entry_points.h, over the vendor-neutral ../cuda/host/rtc_simt.c and
 * rtc_decode.c), the MFMA forward here (mfma/forward.cuh's launch_forward, whose geometry
 * common/mfma_geometry.h gives both). Each returns a hipError_t, the message of a failure kept
 * for the backend's error (../cuda/host/rtc_entry.c). Plain C. */
#include "kernels.h"

#include "common/mfma_geometry.h"
#include "common/simt_geometry.h"
#include "host/rtc_kernels.h"
#include "host/rtc_launch.h"
#include "host/why.h"

#include <stdio.h>

/* the SIMT and decode entry points, shared with the CUDA backend's rtc build */
#define FA_RTC_ENTRY(name) fa_hip_##name
#include "host/rtc_entry_points.h"

/* mfma/forward.cuh's launch_forward: forward_kernel<S, D, MOD> on ceil(seqlen_q / FA_MFMA_ROWS) x
 * heads_q x batch wavefronts, its arguments the parameter block and the vec flag. */
static fa_rtc_status launch_mfma_forward(const fa_gpu_params *p, int dtype, int bucket, void *stream, char *why,
                                         size_t why_len)
{
    if ((dtype != 1 && dtype != 2) || (bucket != 64 && bucket != 128)) {
        fa_why_set(why, why_len, "the MFMA forward has no kernel for dtype %d, head-dim bucket %d", dtype, bucket);
        return FA_RTC_INVALID_ARG;
    }
    const int64_t nq = (p->seqlen_q + FA_MFMA_ROWS - 1) / FA_MFMA_ROWS;
    if (nq == 0 || p->batch == 0)
        return FA_RTC_OK;
    /* the kernel's bool parameter: one byte, as the device ABI lays out bool */
    unsigned char vec = fa_simt_view_vec4(&p->q, 2) && fa_simt_view_vec4(&p->k, 2) && fa_simt_view_vec4(&p->v, 2) &&
                        fa_simt_view_vec4(&p->o, 2);
    char name[FA_RTC_NAME_MAX];
    snprintf(name, sizeof name, "fa_gpu::mfma::forward_kernel<%s, %d, %s>", fa_simt_storage_name(dtype), bucket,
             fa_score_mod_factors_active(p->mod) ? "true" : "false");
    fa_gpu_params params = *p; /* the kernel's first parameter, by value */
    void *args[] = {&params, &vec};
    const fa_rtc_launch_config c = {"mfma", 0, nq, p->heads_q, p->batch, FA_MFMA_WAVE, 0};
    return fa_rtc_launch(name, &c, stream, args, why, why_len);
}

int fa_hip_mfma_forward(const fa_gpu_params *p, int dtype, int head_dim_bucket, void *stream)
{
    size_t len;
    char *why = fa_rtc_error_buffer(&len);
    fa_rtc_entry_begin();
    return fa_rtc_entry_end(launch_mfma_forward(p, dtype, head_dim_bucket, stream, why, len));
}
