/* rtc_kernels.c: the kernel entry points of host/kernels.h for a build whose kernels are compiled
 * at run time (-Dcuda-kernels=rtc): each compiles its instance with NVRTC on first use (the disk
 * cache keeps it for later processes; host/rtc_compiler.h) and launches it through the driver API
 * (host/rtc_launch.h), with the nvcc-built launchers' geometry. This file has the SIMT forward and
 * backward (host/rtc_simt.c launches them) and fa_forward_kvcache's (host/rtc_decode.c), the
 * entry points it shares with the HIP module from host/rtc_entry_points.h; the other
 * families' are in their own host/rtc_<family>.c (rtc_sm80.c, rtc_sm90.c, rtc_ring.c), and what
 * every entry point shares (its message, its CUresult, the compile notice) in host/rtc_entry.c.
 * Plain C. */
#include "host/rtc_kernels.h"

#include "host/kernels.h"
#include "host/rtc_launch.h"

/* the SIMT and decode entry points, shared with the HIP module */
#define FA_RTC_ENTRY(name) fa_##name
#include "host/rtc_entry_points.h"

int fa_kv_forward_mma(const fa_gpu_kv_params *p, int dtype, int head_dim_bucket, void *stream)
{
    size_t len;
    char *why = fa_rtc_error_buffer(&len);
    fa_rtc_entry_begin();
    return fa_rtc_entry_end(fa_rtc_launch_kv_mma(p, dtype, head_dim_bucket, stream, why, len));
}

int fa_kv_blocks_per_processor_mma(int dtype, int head_dim_bucket, int warps, int one_token, int *blocks)
{
    size_t len;
    char *why = fa_rtc_error_buffer(&len);
    fa_rtc_entry_begin();
    return fa_rtc_entry_end(fa_rtc_kv_blocks_mma(dtype, head_dim_bucket, warps, one_token, blocks, why, len));
}
