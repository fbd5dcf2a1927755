/* rtc_loaded.h: the kernels a run-time launcher has loaded (host/rtc_launch.c through the CUDA
 * driver, backends/hip/rtc_launch.c through the HIP runtime), keyed by where each module was loaded
 * (a CUDA context, a HIP device: an opaque key) and the kernel's name expression, so that a
 * kernel is compiled and loaded once per context or device and kept until the launcher releases
 * them all. The lock is not held while a kernel compiles or loads: two threads that miss together
 * both load, and the second unloads its copy (fa_rtc_loaded_add says which). Plain C. */
#ifndef FA_RTC_LOADED_H
#define FA_RTC_LOADED_H

#include "host/rtc_compiler.h"

/* The longest name expression a launch takes, with its terminating zero. */
#define FA_RTC_NAME_MAX 160

/* The function loaded for (where, name), or NULL; *shared_limit (when not NULL) the dynamic shared
 * memory it was allowed (fa_rtc_loaded_raise; 0 until then). */
void *fa_rtc_loaded_find(const void *where, const char *name, unsigned *shared_limit);

/* Records *module and *function for (where, name) and takes the module (*module = NULL). Where
 * another thread recorded that kernel first, *function becomes its function and *module stays the
 * caller's to unload. FA_RTC_OUT_OF_MEMORY leaves both the caller's. name: shorter than
 * FA_RTC_NAME_MAX. */
fa_rtc_status fa_rtc_loaded_add(const void *where, const char *name, void **module, void **function);

/* Notes that (where, name)'s dynamic shared memory limit is now at least bytes. */
void fa_rtc_loaded_raise(const void *where, const char *name, unsigned bytes);

/* Calls unload(where, module, user) for every module recorded, then forgets them all. */
void fa_rtc_loaded_release(void (*unload)(const void *where, void *module, void *user), void *user);

#endif
