/* rtc_sources.h: a kernel family's source as the library embeds it for NVRTC
 * (embed_sources.py writes the definitions at build time; rtc_compiler.c reads them). Plain C. */
#ifndef FA_RTC_SOURCES_H
#define FA_RTC_SOURCES_H

#include <stddef.h>

/* One file: the name its includes spell ("common/params.h"), its text (NUL-terminated) and length. */
typedef struct fa_rtc_source {
    const char *name;
    const char *text;
    size_t len;
} fa_rtc_source;

/* The SIMT family: its entry header (simt/kernels.cuh) first, then every file it includes. */
extern const fa_rtc_source fa_cuda_rtc_sources[];
extern const size_t fa_cuda_rtc_source_count;

#endif
