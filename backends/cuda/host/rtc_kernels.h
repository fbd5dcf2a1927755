/* rtc_kernels.h: what a build whose kernels are compiled at run time (-Dcuda-kernels=rtc,
 * host/rtc_kernels.c) adds to host/kernels.h's entry points: the message of this thread's last
 * failed entry point. Plain C. */
#ifndef FA_RTC_KERNELS_H
#define FA_RTC_KERNELS_H

/* Why the last entry point this thread called failed to compile or launch its kernel (the
 * compiler's log, the driver call and its error, no libnvrtc: host/rtc_launch.h's messages); ""
 * after one that succeeded. Valid until the thread's next entry-point call. */
const char *fa_rtc_last_error(void);

#endif
