/* rtc_kernels.c: the kernel entry points of host/kernels.h for a build whose kernels are compiled
 * at run time (-Dcuda-kernels=rtc): each compiles its instance with NVRTC on first use (the disk
 * cache keeps it for later processes; host/rtc_compiler.h) and launches it through the driver API
 * (host/rtc_launch.h), with the nvcc-built launchers' geometry. This file has the SIMT forward and
 * backward and what every family's entry points share; the other families' are in their own
 * host/rtc_<family>.c (rtc_sm80.c, rtc_sm90.c, rtc_decode.c, rtc_ring.c).
 *
 * Errors: an entry point returns a CUresult (the runtime of such a build is the driver API,
 * host/driver_runtime.h). A failure of the compiler or the launcher is kept as this thread's
 * message (fa_rtc_last_error) and returned as the CUresult nearest to it, so the backend's error
 * names the driver's code and the message says what happened.
 *
 * A kernel compiled on first use takes a second or more (a cache hit a fraction of a
 * millisecond): each such compile prints one line on stderr naming the kernel, the architecture
 * and the cache (fa_rtc_notify_stderr), unless FLASHATTN_COMPILE_LOG=0. fa_warmup compiles ahead.
 * Plain C. */
#include "host/rtc_kernels.h"

#include "common/simt_geometry.h"
#include "host/kernels.h"
#include "host/rtc_launch.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* CUresult values (cuda.h) an entry point returns for each fa_rtc_status */
#define CU_SUCCESS 0
#define CU_ERROR_INVALID_VALUE 1
#define CU_ERROR_OUT_OF_MEMORY 2
#define CU_ERROR_NO_DEVICE 100
#define CU_ERROR_INVALID_SOURCE 300
#define CU_ERROR_JIT_COMPILER_NOT_FOUND 221
#define CU_ERROR_UNKNOWN 999

static _Thread_local char last_error[1024];

const char *fa_rtc_last_error(void)
{
    return last_error;
}

/* The CUresult for st (the driver's own code where a driver call failed: its message holds it). */
static int result_of(fa_rtc_status st, int driver_result)
{
    switch (st) {
    case FA_RTC_OK: return CU_SUCCESS;
    case FA_RTC_INVALID_ARG: return CU_ERROR_INVALID_VALUE;
    case FA_RTC_NO_LIBRARY: return CU_ERROR_JIT_COMPILER_NOT_FOUND;
    case FA_RTC_COMPILE_FAILED: return CU_ERROR_INVALID_SOURCE;
    case FA_RTC_NVRTC_ERROR: return CU_ERROR_UNKNOWN;
    case FA_RTC_OUT_OF_MEMORY: return CU_ERROR_OUT_OF_MEMORY;
    case FA_RTC_NO_DRIVER: return CU_ERROR_NO_DEVICE;
    case FA_RTC_DRIVER_ERROR: return driver_result != CU_SUCCESS ? driver_result : CU_ERROR_UNKNOWN;
    }
    return CU_ERROR_UNKNOWN;
}

/* The driver's code in a message of fa_cu_check's form "<call> failed: <NAME> (<code>): ...". */
static int driver_result_in(const char *why)
{
    const char *open = why;
    int code = 0;
    while ((open = strchr(open, '(')) != NULL) {
        if (sscanf(open, "(%d)", &code) == 1)
            return code;
        ++open;
    }
    return CU_SUCCESS;
}

char *fa_rtc_error_buffer(size_t *len)
{
    *len = sizeof last_error;
    return last_error;
}

static pthread_once_t notify_once = PTHREAD_ONCE_INIT;

static void set_notify(void)
{
    const char *log = getenv("FLASHATTN_COMPILE_LOG");
    if (!log || strcmp(log, "0") != 0)
        fa_rtc_set_notify(fa_rtc_notify_stderr, NULL);
}

void fa_rtc_entry_begin(void)
{
    pthread_once(&notify_once, set_notify);
}

int fa_rtc_entry_end(fa_rtc_status st)
{
    if (st == FA_RTC_OK) {
        last_error[0] = 0;
        return CU_SUCCESS;
    }
    return result_of(st, driver_result_in(last_error));
}

int fa_simt_bucket(int64_t head_dim)
{
    return fa_simt_bucket_of(head_dim);
}

int fa_simt_forward(const fa_gpu_params *p, int dtype, int head_dim_bucket, void *stream)
{
    (void)head_dim_bucket; /* the launcher takes the bucket from p, by the same rule */
    fa_rtc_entry_begin();
    return fa_rtc_entry_end(fa_rtc_launch_simt_forward(p, dtype, stream, last_error, sizeof last_error));
}

int fa_simt_backward(const fa_gpu_params *p, int dtype, int head_dim_bucket, void *stream)
{
    (void)head_dim_bucket;
    fa_rtc_entry_begin();
    return fa_rtc_entry_end(fa_rtc_launch_simt_backward(p, dtype, stream, last_error, sizeof last_error));
}
