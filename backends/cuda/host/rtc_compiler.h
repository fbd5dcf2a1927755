/* rtc_compiler.h: the CUDA backend's run-time compiler, host side: a kernel of one of the families,
 * named by its C++ name expression, compiled with NVRTC into a cubin for one exact architecture,
 * kept in the disk cache (core/kernel_cache.h, kind "cuda") so that later calls and later processes
 * load it instead. libnvrtc is opened with dlopen on first use, so the library loads without it.
 * The source is embedded at build time (host/rtc_sources.h): nothing is read from the tree.
 *
 * host/rtc_launch.h loads and launches what it compiles through the driver API; nothing in the
 * library calls either yet. Plain C; needs libc, POSIX threads and dlopen only. */
#ifndef FA_RTC_COMPILER_H
#define FA_RTC_COMPILER_H

#include "kernel_cache.h"

#include <stddef.h>

typedef enum fa_rtc_status {
    FA_RTC_OK = 0,
    FA_RTC_INVALID_ARG,     /* an architecture, name expression or define that cannot be compiled */
    FA_RTC_NO_LIBRARY,      /* libnvrtc cannot be opened, or lacks a function this file calls */
    FA_RTC_COMPILE_FAILED,  /* NVRTC rejected the program; why holds the first lines of its log */
    FA_RTC_NVRTC_ERROR,     /* another NVRTC call failed (why names it and NVRTC's error string) */
    FA_RTC_OUT_OF_MEMORY,
    FA_RTC_NO_DRIVER,       /* host/rtc_launch.h: libcuda cannot be opened or initialised */
    FA_RTC_DRIVER_ERROR,    /* host/rtc_launch.h: a driver call failed (why names it and its error) */
} fa_rtc_status;

/* A compiled kernel. The caller owns it: fa_rtc_kernel_free releases cubin and lowered_name. */
typedef struct fa_rtc_kernel {
    unsigned char *cubin;  /* an ELF image for cuModuleLoadData */
    size_t cubin_len;
    char *lowered_name;    /* the kernel's mangled name in the cubin, for cuModuleGetFunction */
    fa_kernel_key key;     /* the cache key it is stored under */
    int from_cache;        /* 1: loaded from the disk cache; 0: compiled by this call */
    double compile_seconds; /* NVRTC's time when compiled by this call, else 0 */
} fa_rtc_kernel;

/* Compiles (or loads from the cache) the kernel that name_expression names, for sm_<arch><suffix>
 * (arch 90, suffix 'a' for sm_90a; suffix 0 for none, 'a' or 'f' otherwise), with each of
 * defines[0..ndefines) ("NAME" or "NAME=VALUE") passed as -D. The options are those nvcc's build
 * gives these kernels (-std=c++17, and -DNDEBUG where this file is compiled with it), so the
 * kernel is the one nvcc builds, up to what common/rtc_prelude.cuh says about shared memory.
 * The cache key covers the embedded source, NVRTC's version, every option and the name expression.
 * On failure *out is zeroed and, where why_len > 0, why holds a one-paragraph reason (library not
 * found with dlerror's text; the compile log's first lines). Thread-safe; one compile runs at a
 * time, so threads that need the same kernel compile it once. */
fa_rtc_status fa_rtc_compile(int arch, char suffix, const char *name_expression, const char *const *defines,
                             size_t ndefines, fa_rtc_kernel *out, char *why, size_t why_len);

/* fa_rtc_compile for a kernel of family ("simt", "sm80", "sm90", "decode", "ring":
 * host/rtc_sources.h), whose root header the program includes (fa_rtc_compile: "simt"). A family
 * not embedded is FA_RTC_INVALID_ARG. The sm90 family's kernels need sm_90a (arch 90, suffix 'a'). */
fa_rtc_status fa_rtc_compile_family(const char *family, int arch, char suffix, const char *name_expression,
                                    const char *const *defines, size_t ndefines, fa_rtc_kernel *out, char *why,
                                    size_t why_len);

/* fa_rtc_compile_family for an architecture named as the compiler's option takes it: "sm_90a"
 * (NVRTC's -arch=), or, where this file is built for the HIP backend (FA_RTC_HIP: hipRTC, cache kind
 * "hip", the HIP families simt, decode and mfma), "gfx90a:sramecc+:xnack-" (--offload-arch=, the
 * device's gcnArchName as HIP reports it); the two above exist only in the CUDA build. */
fa_rtc_status fa_rtc_compile_target(const char *family, const char *target, const char *name_expression,
                                    const char *const *defines, size_t ndefines, fa_rtc_kernel *out, char *why,
                                    size_t why_len);

/* For checks that a family's instances compile (tests/hip, tests/cuda): one program holding every
 * kernel names[0..n) names, of family, compiled for target as fa_rtc_compile_target would, not
 * cached; each kernel's lowered name into lowered[i] and the code object (cubin, or AMD's ELF
 * code object) into *code, *code_len bytes; the caller frees them all (free). On failure all are
 * NULL and why names the compiler's reason. */
fa_rtc_status fa_rtc_compile_names(const char *family, const char *target, const char *const *names, size_t n,
                                   char **lowered, unsigned char **code, size_t *code_len, char *why, size_t why_len);

void fa_rtc_kernel_free(fa_rtc_kernel *kernel);

/* What a caller may want to show while a kernel compiles (several seconds on first use). */
typedef enum fa_rtc_event {
    FA_RTC_COMPILE_BEGIN, /* a cache miss: NVRTC starts */
    FA_RTC_COMPILE_END,   /* NVRTC has finished: status and seconds are set */
} fa_rtc_event;

typedef struct fa_rtc_progress {
    fa_rtc_event event;
    const char *name_expression;
    const char *arch;      /* "sm_90a" */
    const char *cache_dir; /* where the cubin is kept; NULL when the cache is off */
    fa_rtc_status status;  /* FA_RTC_COMPILE_END only */
    double seconds;        /* FA_RTC_COMPILE_END only */
} fa_rtc_progress;

typedef void (*fa_rtc_notify_fn)(const fa_rtc_progress *progress, void *user);

/* Sets the function told of each compile (NULL, the default: nobody; the library never prints by
 * itself). It is called on the compiling thread with fa_rtc_compile's lock held, so it must not
 * call fa_rtc_compile. */
void fa_rtc_set_notify(fa_rtc_notify_fn fn, void *user);

/* A notify function for tools: on FA_RTC_COMPILE_BEGIN, one line on stderr,
 * "flashattn: compiling <kernel> for sm_90a (first use; cached in <dir>)". */
void fa_rtc_notify_stderr(const fa_rtc_progress *progress, void *user);

/* "13.0" for the libnvrtc that fa_rtc_compile uses (hipRTC's version in the HIP build), opening it
 * if need be; NULL with why set when it cannot be opened. */
const char *fa_rtc_nvrtc_version(char *why, size_t why_len);

#endif
