/* driver_api.c: libcuda by dlopen (driver_api.h says what for). The entry points are looked up by
 * the names cuda.h maps its calls to without CUDA_API_PER_THREAD_DEFAULT_STREAM: the plain names
 * (the default (legacy) stream semantics the nvcc-built launchers also use), with the _v2 suffix
 * where cuda.h adds one (cuMemAlloc_v2, ...: the current version of a call whose signature
 * changed). */
#include "host/driver_api.h"
#include "host/dl_symbols.h"
#include "host/why.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

static fa_cu_api api;
static atomic_int api_ready; /* 1 once api is filled and cuInit has succeeded; never reset */
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;

fa_cu_status fa_cu_check(const fa_cu_api *driver, fa_cu_result result, const char *call, char *why, size_t why_len)
{
    if (result == 0)
        return FA_CU_OK;
    const char *name = NULL, *text = NULL;
    if (!driver || driver->GetErrorName(result, &name) != 0 || !name)
        name = "an unknown error";
    if (!driver || driver->GetErrorString(result, &text) != 0 || !text)
        text = "no description";
    fa_why_set(why, why_len, "%s failed: %s (%d): %s", call, name, result, text);
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
        {"cuDeviceGetCount", (void **)&api.DeviceGetCount},
        {"cuDeviceGetName", (void **)&api.DeviceGetName},
        {"cuDeviceTotalMem_v2", (void **)&api.DeviceTotalMem},
        {"cuDevicePrimaryCtxRelease_v2", (void **)&api.DevicePrimaryCtxRelease},
        {"cuCtxSynchronize", (void **)&api.CtxSynchronize},
        {"cuMemAlloc_v2", (void **)&api.MemAlloc},
        {"cuMemFree_v2", (void **)&api.MemFree},
        {"cuMemAllocAsync", (void **)&api.MemAllocAsync},
        {"cuMemFreeAsync", (void **)&api.MemFreeAsync},
        {"cuMemcpy", (void **)&api.Memcpy},
        {"cuMemcpyAsync", (void **)&api.MemcpyAsync},
        {"cuMemsetD8_v2", (void **)&api.MemsetD8},
        {"cuMemsetD8Async", (void **)&api.MemsetD8Async},
        {"cuStreamCreate", (void **)&api.StreamCreate},
        {"cuStreamDestroy_v2", (void **)&api.StreamDestroy},
        {"cuStreamSynchronize", (void **)&api.StreamSynchronize},
        {"cuStreamWaitEvent", (void **)&api.StreamWaitEvent},
        {"cuStreamIsCapturing", (void **)&api.StreamIsCapturing},
        {"cuEventCreate", (void **)&api.EventCreate},
        {"cuEventRecord", (void **)&api.EventRecord},
        {"cuEventDestroy_v2", (void **)&api.EventDestroy},
        {"cuFuncSetAttribute", (void **)&api.FuncSetAttribute},
        {"cuOccupancyMaxActiveBlocksPerMultiprocessor", (void **)&api.OccupancyMaxActiveBlocksPerMultiprocessor},
        {"cuModuleGetGlobal_v2", (void **)&api.ModuleGetGlobal},
    };
    const char *err, *missing = fa_dl_resolve(lib, table, sizeof table / sizeof table[0], &err);
    if (missing) {
        fa_why_set(why, why_len, "%s has no %s: %s", name, missing, err);
        return 0;
    }
    /* optional: CUDA 12 added it */
    *(void **)&api.TensorMapEncodeTiled = dlsym(lib, "cuTensorMapEncodeTiled");
    return 1;
}

const fa_cu_api *fa_cu_driver(char *why, size_t why_len)
{
    fa_cu_result result;
    return fa_cu_driver_result(&result, why, why_len);
}

const fa_cu_api *fa_cu_driver_result(fa_cu_result *result, char *why, size_t why_len)
{
    *result = FA_CU_SUCCESS;
    if (atomic_load_explicit(&api_ready, memory_order_acquire))
        return &api;
    pthread_mutex_lock(&load_lock);
    if (!atomic_load_explicit(&api_ready, memory_order_relaxed)) {
        const char *override = getenv("FLASHATTN_CUDA_DRIVER_LIBRARY");
        const char *name = override && *override ? override : "libcuda.so.1";
        void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
        if (!lib) {
            const char *e = dlerror();
            fa_why_set(why, why_len, "cannot open the CUDA driver %s%s (the NVIDIA driver is needed to run CUDA kernels): %s",
                override && *override ? "FLASHATTN_CUDA_DRIVER_LIBRARY=" : "", name, e ? e : "dlopen failed");
            *result = FA_CU_ERROR_NOT_INITIALIZED;
        } else if (!resolve(lib, name, why, why_len)) {
            dlclose(lib);
            *result = FA_CU_ERROR_NOT_INITIALIZED;
        } else if (fa_cu_check(&api, (*result = api.Init(0)), "cuInit", why, why_len) != FA_CU_OK) {
            dlclose(lib);
        } else {
            atomic_store_explicit(&api_ready, 1, memory_order_release);
        }
    }
    pthread_mutex_unlock(&load_lock);
    return atomic_load_explicit(&api_ready, memory_order_relaxed) ? &api : NULL;
}
