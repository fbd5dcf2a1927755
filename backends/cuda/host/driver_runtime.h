/* driver_runtime.h: the part of the CUDA runtime API (cudart) the backend's host code calls,
 * written over the driver API (driver_api.h: libcuda by dlopen), so that host code builds without
 * the CUDA toolkit. runtime.h maps FA_RT(name) to fa_drv_<name> under FA_RUNTIME_DRIVER; each
 * function keeps its cudart namesake's contract, with these differences:
 *
 * - Errors are the driver's CUresult values (ints), not cudaError_t: the same number for success
 *   (0), invalid value (1), out of memory (2) and no device (100), other numbers elsewhere.
 *   GetErrorName answers the driver's names ("CUDA_ERROR_OUT_OF_MEMORY"), GetErrorString its text.
 * - Without a usable libcuda every call answers CUDA_ERROR_NOT_INITIALIZED (cudart:
 *   cudaErrorInsufficientDriver), and GetErrorString of it, on that thread, says why (the library,
 *   dlopen's message); where cuInit fails, its error (CUDA_ERROR_NO_DEVICE without a GPU). The
 *   library is tried again on the next call.
 * - SetDevice retains the device's primary context (the one cudart uses) once per process and
 *   makes it current; the shim never releases it: the driver frees it when the process exits, as
 *   cudart leaves it. A call other than SetDevice, GetDeviceCount, GetDeviceProperties and
 *   DeviceGetAttribute on a thread with no current context makes device 0's current first, as
 *   cudart does. Devices beyond FA_DRV_MAX_DEVICES answer CUDA_ERROR_INVALID_DEVICE.
 * - Free synchronises the current context before freeing (cudart's cudaFree waits for the device
 *   too), so host code may free what kernels still use.
 * - Memcpy and MemcpyAsync check the kind (0..4, cudaMemcpyKind's values) and then let the driver
 *   infer the direction from the addresses (unified addressing), so a wrong kind is not an error.
 * - GetLastError: the thread's last error from these calls, reset by reading it, as cudart keeps
 *   it; launches through the driver record theirs with fa_drv_record_error. Errors are never
 *   sticky here (a kernel fault stays sticky in the context: the driver reports it on every call).
 * Plain C; no CUDA header. */
#ifndef FA_CUDA_DRIVER_RUNTIME_H
#define FA_CUDA_DRIVER_RUNTIME_H

#include "host/driver_api.h"

#include <stddef.h>

#define FA_DRV_MAX_DEVICES 64

/* cudart's constants under the prefix FA_RT gives them, with cudart's values (which the driver's
 * flags and enums share) */
#define fa_drv_Success 0
#define fa_drv_StreamNonBlocking 1u  /* CU_STREAM_NON_BLOCKING */
#define fa_drv_EventDisableTiming 2u /* CU_EVENT_DISABLE_TIMING */
#define fa_drv_StreamCaptureStatusNone 0
enum fa_drv_memcpy_kind {
    fa_drv_MemcpyHostToHost = 0,
    fa_drv_MemcpyHostToDevice = 1,
    fa_drv_MemcpyDeviceToHost = 2,
    fa_drv_MemcpyDeviceToDevice = 3,
    fa_drv_MemcpyDefault = 4
};
enum fa_drv_device_attr { /* cudaDeviceAttr's values, the same as CUdevice_attribute's */
    fa_drv_DevAttrMultiProcessorCount = FA_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
    fa_drv_DevAttrComputeCapabilityMajor = FA_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
    fa_drv_DevAttrComputeCapabilityMinor = FA_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
    fa_drv_DevAttrMaxSharedMemoryPerBlockOptin = FA_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
};

/* What the host code reads of cudaDeviceProp, under cudaDeviceProp's names. */
typedef struct fa_drv_prop {
    char name[256];
    int major, minor;              /* compute capability */
    int multiProcessorCount;
    size_t totalGlobalMem;
    size_t sharedMemPerBlockOptin; /* bytes one block may opt in to */
    size_t sharedMemPerMultiprocessor; /* bytes an SM has for all its blocks */
} fa_drv_prop;

fa_cu_result fa_drv_GetDeviceCount(int *count);
fa_cu_result fa_drv_SetDevice(int device);
fa_cu_result fa_drv_GetDeviceProperties(fa_drv_prop *prop, int device);
fa_cu_result fa_drv_DeviceGetAttribute(int *value, enum fa_drv_device_attr attr, int device);
fa_cu_result fa_drv_DeviceSynchronize(void);

fa_cu_result fa_drv_Malloc(void **ptr, size_t bytes);
fa_cu_result fa_drv_Free(void *ptr);
fa_cu_result fa_drv_MallocAsync(void **ptr, size_t bytes, fa_cu_stream stream);
fa_cu_result fa_drv_FreeAsync(void *ptr, fa_cu_stream stream);
fa_cu_result fa_drv_Memcpy(void *dst, const void *src, size_t bytes, enum fa_drv_memcpy_kind kind);
fa_cu_result fa_drv_MemcpyAsync(void *dst, const void *src, size_t bytes, enum fa_drv_memcpy_kind kind,
                                fa_cu_stream stream);
fa_cu_result fa_drv_Memset(void *ptr, int value, size_t bytes);
fa_cu_result fa_drv_MemsetAsync(void *ptr, int value, size_t bytes, fa_cu_stream stream);

fa_cu_result fa_drv_StreamCreateWithFlags(fa_cu_stream *stream, unsigned flags);
fa_cu_result fa_drv_StreamDestroy(fa_cu_stream stream);
fa_cu_result fa_drv_StreamSynchronize(fa_cu_stream stream);
fa_cu_result fa_drv_StreamWaitEvent(fa_cu_stream stream, fa_cu_event event, unsigned flags);
fa_cu_result fa_drv_StreamIsCapturing(fa_cu_stream stream, int *capture_status);
fa_cu_result fa_drv_EventCreateWithFlags(fa_cu_event *event, unsigned flags);
fa_cu_result fa_drv_EventRecord(fa_cu_event event, fa_cu_stream stream);
fa_cu_result fa_drv_EventDestroy(fa_cu_event event);

fa_cu_result fa_drv_GetLastError(void);  /* and resets it to 0 */
fa_cu_result fa_drv_PeekAtLastError(void);
const char *fa_drv_GetErrorName(fa_cu_result error);
const char *fa_drv_GetErrorString(fa_cu_result error);

/* For launchers on the driver API: result becomes the thread's last error when it is one
 * (cudart's launches do the same); returns result. */
fa_cu_result fa_drv_record_error(fa_cu_result result);
/* The driver, with a context current on this thread (device 0's primary context where the thread
 * has none), as the calls above have before they run; *api NULL and the error recorded otherwise. */
fa_cu_result fa_drv_context_ready(const fa_cu_api **api);

#endif /* FA_CUDA_DRIVER_RUNTIME_H */
