/* rtc_entry.c: what every kernel entry point of a build whose kernels are compiled at run time
 * shares (host/rtc_kernels.h): this thread's message, the stderr notice of each compile, and the
 * status a launcher's fa_rtc_status becomes. Vendor-neutral: in the CUDA backend an entry point
 * returns a CUresult (the runtime of such a build is the driver API, host/driver_runtime.h), in the
 * HIP module (FA_RUNTIME_HIP, backends/hip/rtc_kernels.c) a hipError_t; the table below holds both
 * vendors' codes. A failure of the compiler or the launcher is kept as this thread's message
 * (fa_rtc_last_error) and returned as the code nearest to it, so the backend's error names the
 * runtime's code and the message says what happened.
 *
 * A kernel compiled on first use takes a second or more (a cache hit a fraction of a
 * millisecond): each such compile prints one line on stderr naming the kernel, the architecture
 * and the cache (fa_rtc_notify_stderr), unless FLASHATTN_COMPILE_LOG=0. fa_warmup compiles ahead.
 * Plain C. */
#include "host/rtc_kernels.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the entry point's result for each fa_rtc_status */
#ifdef FA_RUNTIME_HIP
/* hipError_t values (hip_runtime_api.h) */
#define RESULT_SUCCESS 0 /* hipSuccess */
#define RESULT_INVALID_VALUE 1 /* hipErrorInvalidValue */
#define RESULT_OUT_OF_MEMORY 2 /* hipErrorOutOfMemory */
#define RESULT_NO_DEVICE 100 /* hipErrorNoDevice */
#define RESULT_INVALID_SOURCE 300 /* hipErrorInvalidSource */
#define RESULT_JIT_COMPILER_NOT_FOUND 303 /* hipErrorSharedObjectInitFailed: HIP has no closer code */
#define RESULT_UNKNOWN 999 /* hipErrorUnknown */
#else
/* CUresult values (cuda.h) an entry point returns for each fa_rtc_status */
#define RESULT_SUCCESS 0
#define RESULT_INVALID_VALUE 1
#define RESULT_OUT_OF_MEMORY 2
#define RESULT_NO_DEVICE 100
#define RESULT_INVALID_SOURCE 300
#define RESULT_JIT_COMPILER_NOT_FOUND 221
#define RESULT_UNKNOWN 999
#endif

static _Thread_local char last_error[1024];

const char *fa_rtc_last_error(void)
{
    return last_error;
}

/* The entry point's code for st (the runtime's own where a runtime call failed: its message
 * holds it). */
static int result_of(fa_rtc_status st, int driver_result)
{
    switch (st) {
    case FA_RTC_OK: return RESULT_SUCCESS;
    case FA_RTC_INVALID_ARG: return RESULT_INVALID_VALUE;
    case FA_RTC_NO_LIBRARY: return RESULT_JIT_COMPILER_NOT_FOUND;
    case FA_RTC_COMPILE_FAILED: return RESULT_INVALID_SOURCE;
    case FA_RTC_NVRTC_ERROR: return RESULT_UNKNOWN;
    case FA_RTC_OUT_OF_MEMORY: return RESULT_OUT_OF_MEMORY;
    case FA_RTC_NO_DRIVER: return RESULT_NO_DEVICE;
    case FA_RTC_DRIVER_ERROR: return driver_result != RESULT_SUCCESS ? driver_result : RESULT_UNKNOWN;
    }
    return RESULT_UNKNOWN;
}

/* The runtime's code in a message of fa_cu_check's form "<call> failed: <NAME> (<code>): ..." (the HIP
 * launcher writes the same form). */
static int driver_result_in(const char *why)
{
    const char *open = why;
    int code = 0;
    while ((open = strchr(open, '(')) != NULL) {
        if (sscanf(open, "(%d)", &code) == 1)
            return code;
        ++open;
    }
    return RESULT_SUCCESS;
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
        return RESULT_SUCCESS;
    }
    return result_of(st, driver_result_in(last_error));
}
