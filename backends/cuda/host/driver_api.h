/* driver_api.h: the few calls of the CUDA driver API (libcuda) that loading and launching a
 * run-time compiled kernel needs, with libcuda opened by dlopen on first use, so the library loads
 * on a machine without it and a build needs no CUDA header. The types below are written out as
 * the driver API of CUDA 12 and 13 (cuda.h) defines them: CUresult and CUdevice are ints, the
 * context, module, function and stream are opaque pointers; only the names differ.
 *
 * libcuda: $FLASHATTN_CUDA_DRIVER_LIBRARY when set (a path or a name: tests point it at a fake
 * driver, tests/cuda/fake_libcuda.c), else libcuda.so.1. A library that opened and whose cuInit
 * succeeded is kept for the life of the process; otherwise it is tried again on the next call.
 * Plain C; needs dlopen and POSIX threads. */
#ifndef FA_CUDA_DRIVER_API_H
#define FA_CUDA_DRIVER_API_H

#include <stddef.h>

typedef int fa_cu_result; /* CUresult: 0 is CUDA_SUCCESS */
typedef int fa_cu_device; /* CUdevice: an ordinal */
typedef struct fa_cu_context_opaque *fa_cu_context;
typedef struct fa_cu_module_opaque *fa_cu_module;
typedef struct fa_cu_function_opaque *fa_cu_function;
typedef struct fa_cu_stream_opaque *fa_cu_stream; /* NULL: the legacy default stream */

/* CUdevice_attribute values used here */
#define FA_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR 75
#define FA_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR 76

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
} fa_cu_api;

typedef enum fa_cu_status {
    FA_CU_OK = 0,
    FA_CU_NO_LIBRARY,   /* libcuda cannot be opened or lacks a function; why says which */
    FA_CU_DRIVER_ERROR, /* a driver call failed; why names the call and the driver's error */
} fa_cu_status;

/* The driver, opened and initialised (cuInit(0)) on first use; NULL with why set when libcuda
 * cannot be opened, lacks one of the functions above, or cuInit fails. Thread-safe. */
const fa_cu_api *fa_cu_driver(char *why, size_t why_len);

/* For a driver call that returned result: FA_CU_OK when it is 0, else FA_CU_DRIVER_ERROR with why
 * set to "<call> failed: <CUDA_ERROR_NAME> (<number>): <the driver's error string>". */
fa_cu_status fa_cu_check(const fa_cu_api *api, fa_cu_result result, const char *call, char *why, size_t why_len);

#endif
