/* rtc_sources.h: the kernel families' source as the library embeds it for NVRTC
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

/* A family ("simt", "sm80", "sm90", "decode", "ring"; HIP's "mfma"): its files, as indices into
 * the sources table, its root header (the one that holds its kernels and no host code:
 * simt/kernels.cuh, sm80/kernels_device.cuh) first, then every file that reaches. */
typedef struct fa_rtc_family {
    const char *name;
    const unsigned short *files;
    size_t file_count;
} fa_rtc_family;

/* Every family's files, each once: the CUDA backend's (prefix fa_cuda_rtc) and, in the HIP
 * module, the HIP families' (simt, decode, mfma; prefix fa_hip_rtc). */
extern const fa_rtc_source fa_cuda_rtc_sources[];
extern const size_t fa_cuda_rtc_source_count;
extern const fa_rtc_family fa_cuda_rtc_families[];
extern const size_t fa_cuda_rtc_family_count;
extern const fa_rtc_source fa_hip_rtc_sources[];
extern const size_t fa_hip_rtc_source_count;
extern const fa_rtc_family fa_hip_rtc_families[];
extern const size_t fa_hip_rtc_family_count;

#endif
