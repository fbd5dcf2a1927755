/* rtc_entry_points.h: the kernel entry points that the CUDA backend's rtc build (host/kernels.h's
 * fa_simt_*, fa_kv_*: host/rtc_kernels.c) and the HIP module's (backends/hip/kernels.h's
 * fa_hip_simt_*, fa_hip_kv_*: backends/hip/rtc_kernels.c) define alike over the vendor-neutral
 * launchers (host/rtc_simt.c, host/rtc_decode.c): the SIMT forward and backward and
 * fa_forward_kvcache's decode. Definitions, not declarations: each of those two files includes it
 * once, after defining FA_RTC_ENTRY(name) as its prefix (fa_##name, fa_hip_##name), as
 * common/vendor.h's FA_GPU_ENTRY names the compiled launchers. Each entry point turns on the
 * compile notice, keeps a failure's message and returns the runtime's code (host/rtc_entry.c).
 * Plain C. */
#ifndef FA_RTC_ENTRY
#error "host/rtc_entry_points.h: define FA_RTC_ENTRY(name) first"
#endif

#include "common/simt_geometry.h"
#include "host/rtc_kernels.h"
#include "host/rtc_launch.h"

int FA_RTC_ENTRY(simt_bucket)(int64_t head_dim)
{
    return fa_simt_bucket_of(head_dim);
}

int FA_RTC_ENTRY(simt_forward)(const fa_gpu_params *p, int dtype, int head_dim_bucket, void *stream)
{
    (void)head_dim_bucket; /* the launcher takes the bucket from p, by the same rule */
    size_t len;
    char *why = fa_rtc_error_buffer(&len);
    fa_rtc_entry_begin();
    return fa_rtc_entry_end(fa_rtc_launch_simt_forward(p, dtype, stream, why, len));
}

int FA_RTC_ENTRY(simt_backward)(const fa_gpu_params *p, int dtype, int head_dim_bucket, void *stream)
{
    (void)head_dim_bucket;
    size_t len;
    char *why = fa_rtc_error_buffer(&len);
    fa_rtc_entry_begin();
    return fa_rtc_entry_end(fa_rtc_launch_simt_backward(p, dtype, stream, why, len));
}

int FA_RTC_ENTRY(simt_dsink)(const fa_gpu_params *p, void *stream)
{
    size_t len;
    char *why = fa_rtc_error_buffer(&len);
    fa_rtc_entry_begin();
    return fa_rtc_entry_end(fa_rtc_launch_simt_dsink(p, stream, why, len));
}

int FA_RTC_ENTRY(kv_forward)(const fa_gpu_kv_params *p, int dtype, int head_dim_bucket, int row_tile, int async_copy,
                             void *stream)
{
    size_t len;
    char *why = fa_rtc_error_buffer(&len);
    fa_rtc_entry_begin();
    return fa_rtc_entry_end(fa_rtc_launch_kv(p, dtype, head_dim_bucket, row_tile, async_copy, stream, why, len));
}

int FA_RTC_ENTRY(kv_blocks_per_processor)(int dtype, int head_dim_bucket, int row_tile, int async_copy, int *blocks)
{
    size_t len;
    char *why = fa_rtc_error_buffer(&len);
    fa_rtc_entry_begin();
    return fa_rtc_entry_end(fa_rtc_kv_blocks(dtype, head_dim_bucket, row_tile, async_copy, blocks, why, len));
}
