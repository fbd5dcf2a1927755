/* driver_api.c: libcuda by dlopen (driver_api.h says what for). The entry points are looked up by
 * their plain names, which libcuda exports for the default (legacy) stream semantics that the
 * nvcc-built launchers also use. */
#include "host/driver_api.h"
#include "host/dl_symbols.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

static fa_cu_api api;
static atomic_int api_ready; /* 1 once api is filled and cuInit has succeeded; never reset */
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;

static void say(char *why, size_t why_len, const char *fmt, ...)
{
    if (!why || why_len == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, why_len, fmt, ap);
    va_end(ap);
}

fa_cu_status fa_cu_check(const fa_cu_api *driver, fa_cu_result result, const char *call, char *why, size_t why_len)
{
    if (result == 0)
        return FA_CU_OK;
    const char *name = NULL, *text = NULL;
    if (!driver || driver->GetErrorName(result, &name) != 0 || !name)
        name = "an unknown error";
    if (!driver || driver->GetErrorString(result, &text) != 0 || !text)
        text = "no description";
    say(why, why_len, "%s failed: %s (%d): %s", call, name, result, text);
    return FA_CU_DRIVER_ERROR;
}

static int resolve(void *lib, const char *name, char *why, size_t why_len)
{
    const fa_dl_symbol table[] = {
        {"cuInit", (void **)&api.Init},
        {"cuDeviceGet", (void **)&api.DeviceGet},
        {"cuDeviceGetAttribute", (void **)&api.DeviceGetAttribute},
        {"cuDevicePrimaryCtxRetain", (void **)&api.DevicePrimaryCtxRetain},
        {"cuCtxGetCurrent", (void **)&api.CtxGetCurrent},
        {"cuCtxSetCurrent", (void **)&api.CtxSetCurrent},
        {"cuCtxGetDevice", (void **)&api.CtxGetDevice},
        {"cuModuleLoadData", (void **)&api.ModuleLoadData},
        {"cuModuleGetFunction", (void **)&api.ModuleGetFunction},
        {"cuLaunchKernel", (void **)&api.LaunchKernel},
        {"cuModuleUnload", (void **)&api.ModuleUnload},
        {"cuGetErrorName", (void **)&api.GetErrorName},
        {"cuGetErrorString", (void **)&api.GetErrorString},
    };
    const char *err, *missing = fa_dl_resolve(lib, table, sizeof table / sizeof table[0], &err);
    if (missing) {
        say(why, why_len, "%s has no %s: %s", name, missing, err);
        return 0;
    }
    return 1;
}

const fa_cu_api *fa_cu_driver(char *why, size_t why_len)
{
    if (atomic_load_explicit(&api_ready, memory_order_acquire))
        return &api;
    pthread_mutex_lock(&load_lock);
    if (!atomic_load_explicit(&api_ready, memory_order_relaxed)) {
        const char *override = getenv("FLASHATTN_CUDA_DRIVER_LIBRARY");
        const char *name = override && *override ? override : "libcuda.so.1";
        void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
        if (!lib) {
            const char *e = dlerror();
            say(why, why_len, "cannot open the CUDA driver %s%s (the NVIDIA driver is needed to run CUDA kernels): %s",
                override && *override ? "FLASHATTN_CUDA_DRIVER_LIBRARY=" : "", name, e ? e : "dlopen failed");
        } else if (!resolve(lib, name, why, why_len)) {
            dlclose(lib);
        } else if (fa_cu_check(&api, api.Init(0), "cuInit", why, why_len) != FA_CU_OK) {
            dlclose(lib);
        } else {
            atomic_store_explicit(&api_ready, 1, memory_order_release);
        }
    }
    pthread_mutex_unlock(&load_lock);
    return atomic_load_explicit(&api_ready, memory_order_relaxed) ? &api : NULL;
}
