/* driver_runtime.c: the runtime API's calls the host code makes, over the driver API
 * (driver_runtime.h says which and how they differ from cudart). */
#include "host/driver_runtime.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* the thread's last error (GetLastError), and why the driver could not be loaded the last time
 * this thread tried: GetErrorString answers it for load_error */
static _Thread_local fa_cu_result last_error;
static _Thread_local fa_cu_result load_error;
static _Thread_local char load_why[512];

/* each device's primary context once retained; never released (driver_runtime.h) */
static _Atomic(fa_cu_context) primary[FA_DRV_MAX_DEVICES];
static pthread_mutex_t primary_lock = PTHREAD_MUTEX_INITIALIZER;

static fa_cu_result note(fa_cu_result result)
{
    if (result != FA_CU_SUCCESS)
        last_error = result;
    return result;
}

fa_cu_result fa_drv_record_error(fa_cu_result result)
{
    return note(result);
}

/* the driver, or NULL with *result its load error (recorded, with why for GetErrorString) */
static const fa_cu_api *driver(fa_cu_result *result)
{
    char why[sizeof load_why];
    const fa_cu_api *api = fa_cu_driver_result(result, why, sizeof why);
    if (!api) {
        load_error = *result;
        snprintf(load_why, sizeof load_why, "%s", why);
        note(*result);
    } else if (load_error != FA_CU_SUCCESS) {
        load_error = FA_CU_SUCCESS; /* loaded since: its error means the driver's again */
        load_why[0] = '\0';
    }
    return api;
}

/* device's primary context, retained on first use */
static fa_cu_result primary_context(const fa_cu_api *api, int device, fa_cu_context *context)
{
    if (device < 0 || device >= FA_DRV_MAX_DEVICES)
        return FA_CU_ERROR_INVALID_DEVICE;
    *context = atomic_load_explicit(&primary[device], memory_order_acquire);
    if (*context)
        return FA_CU_SUCCESS;
    fa_cu_device dev;
    fa_cu_result r = api->DeviceGet(&dev, device);
    if (r != FA_CU_SUCCESS)
        return r;
    pthread_mutex_lock(&primary_lock);
    *context = atomic_load_explicit(&primary[device], memory_order_relaxed);
    if (!*context) {
        r = api->DevicePrimaryCtxRetain(context, dev);
        if (r == FA_CU_SUCCESS)
            atomic_store_explicit(&primary[device], *context, memory_order_release);
    }
    pthread_mutex_unlock(&primary_lock);
    return r;
}

static fa_cu_result make_current(const fa_cu_api *api, int device)
{
    fa_cu_context context;
    fa_cu_result r = primary_context(api, device, &context);
    return r != FA_CU_SUCCESS ? r : api->CtxSetCurrent(context);
}

fa_cu_result fa_drv_context_ready(const fa_cu_api **api)
{
    fa_cu_result r;
    *api = driver(&r);
    if (!*api)
        return r;
    fa_cu_context current = NULL;
    r = (*api)->CtxGetCurrent(&current);
    if (r == FA_CU_SUCCESS && !current)
        r = make_current(*api, 0);
    if (r != FA_CU_SUCCESS)
        *api = NULL;
    return note(r);
}

static fa_cu_deviceptr address(const void *ptr)
{
    return (fa_cu_deviceptr)(uintptr_t)ptr;
}

fa_cu_result fa_drv_GetDeviceCount(int *count)
{
    fa_cu_result r;
    *count = 0;
    const fa_cu_api *api = driver(&r);
    return api ? note(api->DeviceGetCount(count)) : r;
}

fa_cu_result fa_drv_SetDevice(int device)
{
    fa_cu_result r;
    const fa_cu_api *api = driver(&r);
    return api ? note(make_current(api, device)) : r;
}

fa_cu_result fa_drv_DeviceGetAttribute(int *value, enum fa_drv_device_attr attr, int device)
{
    fa_cu_result r;
    fa_cu_device dev;
    const fa_cu_api *api = driver(&r);
    if (!api)
        return r;
    r = api->DeviceGet(&dev, device);
    return note(r != FA_CU_SUCCESS ? r : api->DeviceGetAttribute(value, (int)attr, dev));
}

fa_cu_result fa_drv_GetDeviceProperties(fa_drv_prop *prop, int device)
{
    fa_cu_result r;
    fa_cu_device dev;
    int optin = 0, per_sm = 0;
    const fa_cu_api *api = driver(&r);
    if (!api)
        return r;
    memset(prop, 0, sizeof *prop);
    if ((r = api->DeviceGet(&dev, device)) == FA_CU_SUCCESS &&
        (r = api->DeviceGetName(prop->name, (int)sizeof prop->name, dev)) == FA_CU_SUCCESS &&
        (r = api->DeviceTotalMem(&prop->totalGlobalMem, dev)) == FA_CU_SUCCESS &&
        (r = api->DeviceGetAttribute(&prop->major, FA_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)) ==
            FA_CU_SUCCESS &&
        (r = api->DeviceGetAttribute(&prop->minor, FA_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)) ==
            FA_CU_SUCCESS &&
        (r = api->DeviceGetAttribute(&prop->multiProcessorCount, FA_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev)) ==
            FA_CU_SUCCESS &&
        (r = api->DeviceGetAttribute(&optin, FA_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev)) ==
            FA_CU_SUCCESS)
        r = api->DeviceGetAttribute(&per_sm, FA_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, dev);
    prop->name[sizeof prop->name - 1] = '\0';
    prop->sharedMemPerBlockOptin = optin > 0 ? (size_t)optin : 0;
    prop->sharedMemPerMultiprocessor = per_sm > 0 ? (size_t)per_sm : 0;
    return note(r);
}

fa_cu_result fa_drv_DeviceSynchronize(void)
{
    const fa_cu_api *api;
    fa_cu_result r = fa_drv_context_ready(&api);
    return api ? note(api->CtxSynchronize()) : r;
}

/* cudart hands out NULL for 0 bytes */
fa_cu_result fa_drv_Malloc(void **ptr, size_t bytes)
{
    const fa_cu_api *api;
    fa_cu_deviceptr d = 0;
    fa_cu_result r = fa_drv_context_ready(&api);
    if (api)
        r = note(bytes ? api->MemAlloc(&d, bytes) : FA_CU_SUCCESS);
    *ptr = r == FA_CU_SUCCESS ? (void *)(uintptr_t)d : NULL;
    return r;
}

fa_cu_result fa_drv_Free(void *ptr)
{
    const fa_cu_api *api;
    if (!ptr)
        return FA_CU_SUCCESS;
    fa_cu_result r = fa_drv_context_ready(&api);
    if (!api)
        return r;
    r = api->CtxSynchronize();
    return note(r != FA_CU_SUCCESS ? r : api->MemFree(address(ptr)));
}

fa_cu_result fa_drv_MallocAsync(void **ptr, size_t bytes, fa_cu_stream stream)
{
    const fa_cu_api *api;
    fa_cu_deviceptr d = 0;
    fa_cu_result r = fa_drv_context_ready(&api);
    if (api)
        r = note(bytes ? api->MemAllocAsync(&d, bytes, stream) : FA_CU_SUCCESS);
    *ptr = r == FA_CU_SUCCESS ? (void *)(uintptr_t)d : NULL;
    return r;
}

fa_cu_result fa_drv_FreeAsync(void *ptr, fa_cu_stream stream)
{
    const fa_cu_api *api;
    if (!ptr)
        return FA_CU_SUCCESS;
    fa_cu_result r = fa_drv_context_ready(&api);
    return api ? note(api->MemFreeAsync(address(ptr), stream)) : r;
}

static int kind_valid(enum fa_drv_memcpy_kind kind)
{
    return (int)kind >= (int)fa_drv_MemcpyHostToHost && (int)kind <= (int)fa_drv_MemcpyDefault;
}

fa_cu_result fa_drv_Memcpy(void *dst, const void *src, size_t bytes, enum fa_drv_memcpy_kind kind)
{
    const fa_cu_api *api;
    if (!kind_valid(kind))
        return note(FA_CU_ERROR_INVALID_VALUE);
    fa_cu_result r = fa_drv_context_ready(&api);
    if (!api || bytes == 0)
        return r;
    return note(api->Memcpy(address(dst), address(src), bytes));
}

fa_cu_result fa_drv_MemcpyAsync(void *dst, const void *src, size_t bytes, enum fa_drv_memcpy_kind kind,
                                fa_cu_stream stream)
{
    const fa_cu_api *api;
    if (!kind_valid(kind))
        return note(FA_CU_ERROR_INVALID_VALUE);
    fa_cu_result r = fa_drv_context_ready(&api);
    if (!api || bytes == 0)
        return r;
    return note(api->MemcpyAsync(address(dst), address(src), bytes, stream));
}

/* cudart, like memset, takes the byte's value as an int and keeps its low 8 bits */
fa_cu_result fa_drv_Memset(void *ptr, int value, size_t bytes)
{
    const fa_cu_api *api;
    fa_cu_result r = fa_drv_context_ready(&api);
    if (!api || bytes == 0)
        return r;
    return note(api->MemsetD8(address(ptr), (unsigned char)value, bytes));
}

fa_cu_result fa_drv_MemsetAsync(void *ptr, int value, size_t bytes, fa_cu_stream stream)
{
    const fa_cu_api *api;
    fa_cu_result r = fa_drv_context_ready(&api);
    if (!api || bytes == 0)
        return r;
    return note(api->MemsetD8Async(address(ptr), (unsigned char)value, bytes, stream));
}

fa_cu_result fa_drv_StreamCreateWithFlags(fa_cu_stream *stream, unsigned flags)
{
    const fa_cu_api *api;
    fa_cu_result r = fa_drv_context_ready(&api);
    return api ? note(api->StreamCreate(stream, flags)) : r;
}

fa_cu_result fa_drv_StreamDestroy(fa_cu_stream stream)
{
    const fa_cu_api *api;
    fa_cu_result r = fa_drv_context_ready(&api);
    return api ? note(api->StreamDestroy(stream)) : r;
}

fa_cu_result fa_drv_StreamSynchronize(fa_cu_stream stream)
{
    const fa_cu_api *api;
    fa_cu_result r = fa_drv_context_ready(&api);
    return api ? note(api->StreamSynchronize(stream)) : r;
}

fa_cu_result fa_drv_StreamWaitEvent(fa_cu_stream stream, fa_cu_event event, unsigned flags)
{
    const fa_cu_api *api;
    fa_cu_result r = fa_drv_context_ready(&api);
    return api ? note(api->StreamWaitEvent(stream, event, flags)) : r;
}

fa_cu_result fa_drv_StreamIsCapturing(fa_cu_stream stream, int *capture_status)
{
    const fa_cu_api *api;
    fa_cu_result r = fa_drv_context_ready(&api);
    return api ? note(api->StreamIsCapturing(stream, capture_status)) : r;
}

fa_cu_result fa_drv_EventCreateWithFlags(fa_cu_event *event, unsigned flags)
{
    const fa_cu_api *api;
    fa_cu_result r = fa_drv_context_ready(&api);
    return api ? note(api->EventCreate(event, flags)) : r;
}

fa_cu_result fa_drv_EventRecord(fa_cu_event event, fa_cu_stream stream)
{
    const fa_cu_api *api;
    fa_cu_result r = fa_drv_context_ready(&api);
    return api ? note(api->EventRecord(event, stream)) : r;
}

fa_cu_result fa_drv_EventDestroy(fa_cu_event event)
{
    const fa_cu_api *api;
    fa_cu_result r = fa_drv_context_ready(&api);
    return api ? note(api->EventDestroy(event)) : r;
}

fa_cu_result fa_drv_GetLastError(void)
{
    fa_cu_result r = last_error;
    last_error = FA_CU_SUCCESS;
    return r;
}

fa_cu_result fa_drv_PeekAtLastError(void)
{
    return last_error;
}

/* Names and texts of the errors the shim itself answers, for when there is no driver to ask. */
static const struct {
    fa_cu_result result;
    const char *name, *text;
} own_errors[] = {
    {FA_CU_SUCCESS, "CUDA_SUCCESS", "no error"},
    {FA_CU_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {FA_CU_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {FA_CU_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {FA_CU_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {FA_CU_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {FA_CU_ERROR_NO_BINARY_FOR_GPU, "CUDA_ERROR_NO_BINARY_FOR_GPU",
     "no kernel image is available for execution on the device"},
};

static const char *describe(fa_cu_result error, int text)
{
    const char *s = NULL;
    char why[8];
    const fa_cu_api *api = fa_cu_driver(why, sizeof why);
    if (api && (text ? api->GetErrorString(error, &s) : api->GetErrorName(error, &s)) == FA_CU_SUCCESS && s)
        return s;
    for (size_t i = 0; i < sizeof own_errors / sizeof own_errors[0]; ++i)
        if (own_errors[i].result == error)
            return text ? own_errors[i].text : own_errors[i].name;
    return text ? "unrecognized error code" : "CUDA_ERROR_UNRECOGNIZED";
}

const char *fa_drv_GetErrorName(fa_cu_result error)
{
    return describe(error, 0);
}

/* why the driver could not be loaded, for that error on this thread; else the driver's text */
const char *fa_drv_GetErrorString(fa_cu_result error)
{
    if (error != FA_CU_SUCCESS && error == load_error && load_why[0])
        return load_why;
    return describe(error, 1);
}
