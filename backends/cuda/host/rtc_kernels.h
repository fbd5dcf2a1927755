/* rtc_kernels.h: what a build whose kernels are compiled at run time (-Dcuda-kernels=rtc,
 * -Dhip-kernels=rtc) adds to the kernel entry points (host/kernels.h, backends/hip/kernels.h): the
 * message of this thread's last failed entry point, and the three calls each entry point
 * (host/rtc_kernels.c and the other host/rtc_*.c, backends/hip/rtc_kernels.c) is made of; defined
 * in host/rtc_entry.c. Plain C. */
#ifndef FA_RTC_KERNELS_H
#define FA_RTC_KERNELS_H

/* Why the last entry point this thread called failed to compile or launch its kernel (the
 * compiler's log, the driver call and its error, no libnvrtc: host/rtc_launch.h's messages); ""
 * after one that succeeded. Valid until the thread's next entry-point call. */
const char *fa_rtc_last_error(void);

#include "host/rtc_compiler.h"

#include <stddef.h>

/* An entry point's first call, before anything is compiled: turns on the one-line stderr notice
 * of each compile (once per process; FLASHATTN_COMPILE_LOG=0 leaves it off). */
void fa_rtc_entry_begin(void);
/* This thread's message buffer (*len bytes), for the launchers' why. */
char *fa_rtc_error_buffer(size_t *len);
/* The entry point's result for the launchers' status st: CUDA_SUCCESS / hipSuccess (the message
 * cleared), else the CUresult / hipError_t nearest to st (the runtime's own where one of its calls
 * failed), the message kept. */
int fa_rtc_entry_end(fa_rtc_status st);

#endif
