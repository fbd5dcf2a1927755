/* driver_api.h: the calls of the CUDA driver API (libcuda) that loading and launching a run-time
 * compiled kernel and the runtime API's stand-in (driver_runtime.h: memory, copies, streams,
 * events) need, with libcuda opened by dlopen on first use, so the library loads on a machine
 * without it and a build needs no CUDA header. The types below are written out as the driver API
 * of CUDA 12 and 13 (cuda.h) defines them: CUresult and CUdevice are ints, a device address
 * (CUdeviceptr) a 64-bit unsigned integer, the context, module, function, stream and event opaque
 * pointers, the enums ints; only the names differ.
 *
 * libcuda: $FLASHATTN_CUDA_DRIVER_LIBRARY when set (a path or a name: tests point it at a fake
 * driver, tests/cuda/fake_libcuda.c), else libcuda.so.1. A library that opened and whose cuInit
 * succeeded is kept for the life of the process; otherwise it is tried again on the next call.
 * Plain C; needs dlopen and POSIX threads. */
#ifndef FA_CUDA_DRIVER_API_H
#define FA_CUDA_DRIVER_API_H

#include <stddef.h>
#include <stdint.h>

typedef int fa_cu_result; /* CUresult: 0 is CUDA_SUCCESS */
typedef int fa_cu_device; /* CUdevice: an ordinal */
typedef struct fa_cu_context_opaque *fa_cu_context;
typedef struct fa_cu_module_opaque *fa_cu_module;
typedef struct fa_cu_function_opaque *fa_cu_function;
typedef struct fa_cu_stream_opaque *fa_cu_stream; /* NULL: the legacy default stream */
typedef struct fa_cu_event_opaque *fa_cu_event;
typedef unsigned long long fa_cu_deviceptr; /* CUdeviceptr: a device address (unified with the host's) */

/* CUtensorMap: the descriptor cuTensorMapEncodeTiled fills, 16 opaque words; the driver wants it
 * aligned to 64 bytes, cuda.h of CUDA 13 aligns it to 128 */
typedef struct fa_cu_tensor_map {
    _Alignas(128) uint64_t opaque[16];
} fa_cu_tensor_map;

/* CUdevice_attribute values used here */
#define FA_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR 75
#define FA_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR 76
#define FA_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT 16
#define FA_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN 97
#define FA_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR 81

/* CUresult values the host code names */
#define FA_CU_SUCCESS 0
#define FA_CU_ERROR_INVALID_VALUE 1
#define FA_CU_ERROR_OUT_OF_MEMORY 2
#define FA_CU_ERROR_NOT_INITIALIZED 3
#define FA_CU_ERROR_NO_DEVICE 100
#define FA_CU_ERROR_INVALID_DEVICE 101
#define FA_CU_ERROR_NO_BINARY_FOR_GPU 209

/* The driver's entry points this backend calls, resolved by name from libcuda. */
typedef struct fa_cu_api {
    fa_cu_result (*Init)(unsigned flags);
    fa_cu_result (*DeviceGet)(fa_cu_device *device, int ordinal);
    fa_cu_result (*DeviceGetAttribute)(int *value, int attribute, fa_cu_device device);
    fa_cu_result (*DevicePrimaryCtxRetain)(fa_cu_context *context, fa_cu_device device);
    fa_cu_result (*CtxGetCurrent)(fa_cu_context *context);
    fa_cu_result (*CtxSetCurrent)(fa_cu_context context);
    fa_cu_result (*CtxGetDevice)(fa_cu_device *device);
    fa_cu_result (*ModuleLoadData)(fa_cu_module *module, const void *image);
    fa_cu_result (*ModuleGetFunction)(fa_cu_function *function, fa_cu_module module, const char *name);
    fa_cu_result (*LaunchKernel)(fa_cu_function function, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                                 unsigned block_x, unsigned block_y, unsigned block_z, unsigned shared_bytes,
                                 fa_cu_stream stream, void **params, void **extra);
    fa_cu_result (*ModuleUnload)(fa_cu_module module);
    fa_cu_result (*GetErrorName)(fa_cu_result result, const char **name);
    fa_cu_result (*GetErrorString)(fa_cu_result result, const char **text);
    /* devices and contexts */
    fa_cu_result (*DeviceGetCount)(int *count);
    fa_cu_result (*DeviceGetName)(char *name, int len, fa_cu_device device);
    fa_cu_result (*DeviceTotalMem)(size_t *bytes, fa_cu_device device);             /* cuDeviceTotalMem_v2 */
    fa_cu_result (*DevicePrimaryCtxRelease)(fa_cu_device device);                   /* _v2 */
    fa_cu_result (*CtxSynchronize)(void);
    /* memory: device addresses are unified with the host's, so cuMemcpy infers the direction */
    fa_cu_result (*MemAlloc)(fa_cu_deviceptr *ptr, size_t bytes);                   /* cuMemAlloc_v2 */
    fa_cu_result (*MemFree)(fa_cu_deviceptr ptr);                                   /* cuMemFree_v2 */
    fa_cu_result (*MemAllocAsync)(fa_cu_deviceptr *ptr, size_t bytes, fa_cu_stream stream);
    fa_cu_result (*MemFreeAsync)(fa_cu_deviceptr ptr, fa_cu_stream stream);
    fa_cu_result (*Memcpy)(fa_cu_deviceptr dst, fa_cu_deviceptr src, size_t bytes);
    fa_cu_result (*MemcpyAsync)(fa_cu_deviceptr dst, fa_cu_deviceptr src, size_t bytes, fa_cu_stream stream);
    fa_cu_result (*MemsetD8)(fa_cu_deviceptr dst, unsigned char value, size_t count); /* cuMemsetD8_v2 */
    fa_cu_result (*MemsetD8Async)(fa_cu_deviceptr dst, unsigned char value, size_t count, fa_cu_stream stream);
    /* streams and events */
    fa_cu_result (*StreamCreate)(fa_cu_stream *stream, unsigned flags);
    fa_cu_result (*StreamDestroy)(fa_cu_stream stream);                             /* cuStreamDestroy_v2 */
    fa_cu_result (*StreamSynchronize)(fa_cu_stream stream);
    fa_cu_result (*StreamWaitEvent)(fa_cu_stream stream, fa_cu_event event, unsigned flags);
    fa_cu_result (*StreamIsCapturing)(fa_cu_stream stream, int *capture_status);
    fa_cu_result (*EventCreate)(fa_cu_event *event, unsigned flags);
    fa_cu_result (*EventRecord)(fa_cu_event event, fa_cu_stream stream);
    fa_cu_result (*EventDestroy)(fa_cu_event event);                                /* cuEventDestroy_v2 */
    /* kernels */
    fa_cu_result (*FuncSetAttribute)(fa_cu_function function, int attribute, int value);
    fa_cu_result (*OccupancyMaxActiveBlocksPerMultiprocessor)(int *blocks, fa_cu_function function, int block_size,
                                                              size_t dynamic_shared_bytes);
    fa_cu_result (*ModuleGetGlobal)(fa_cu_deviceptr *ptr, size_t *bytes, fa_cu_module module,
                                    const char *name); /* cuModuleGetGlobal_v2 */
    /* NULL where the driver has none (drivers older than CUDA 12): the caller says so */
    fa_cu_result (*TensorMapEncodeTiled)(fa_cu_tensor_map *map, int data_type, unsigned rank, void *global_address,
                                         const uint64_t *global_dim, const uint64_t *global_strides,
                                         const unsigned *box_dim, const unsigned *element_strides, int interleave,
                                         int swizzle, int l2_promotion, int oob_fill);
} fa_cu_api;

typedef enum fa_cu_status {
    FA_CU_OK = 0,
    FA_CU_NO_LIBRARY,   /* libcuda cannot be opened or lacks a function; why says which */
    FA_CU_DRIVER_ERROR, /* a driver call failed; why names the call and the driver's error */
} fa_cu_status;

/* The driver, opened and initialised (cuInit(0)) on first use; NULL with why set when libcuda
 * cannot be opened, lacks one of the functions above (TensorMapEncodeTiled excepted), or cuInit
 * fails. Thread-safe. */
const fa_cu_api *fa_cu_driver(char *why, size_t why_len);
/* fa_cu_driver, with *result: 0 with the driver; cuInit's error where it failed (the real driver
 * answers CUDA_ERROR_NO_DEVICE there on a machine without a GPU); FA_CU_ERROR_NOT_INITIALIZED where
 * libcuda cannot be opened or lacks a function. */
const fa_cu_api *fa_cu_driver_result(fa_cu_result *result, char *why, size_t why_len);

/* For a driver call that returned result: FA_CU_OK when it is 0, else FA_CU_DRIVER_ERROR with why
 * set to "<call> failed: <CUDA_ERROR_NAME> (<number>): <the driver's error string>". */
fa_cu_status fa_cu_check(const fa_cu_api *api, fa_cu_result result, const char *call, char *why, size_t why_len);

#endif
