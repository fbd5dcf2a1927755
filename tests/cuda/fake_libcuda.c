/* fake_libcuda.c: a stand-in for libcuda.so.1 with the entry points host/driver_api.c resolves, for
 * testing the driver-API launcher on a machine without a GPU (tests/cuda/rtc_launch_check.c). It
 * runs nothing: it hands out handles, records each call's arguments in a fake_cuda_state
 * (fake_libcuda.h) and returns the error the test asks for. One device, one context, handles are
 * addresses of static objects. */
#include "fake_libcuda.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

static fake_cuda_state state = {.cc_major = 8, .cc_minor = 0};
static char context_object, function_object;
static char module_objects[64];
static void *current_context;

EXPORT fake_cuda_state *fake_cuda_state_get(void)
{
    return &state;
}

/* the error the test configured for call, else 0 */
static int result_of(const char *call)
{
    return state.fail_call && strcmp(state.fail_call, call) == 0 ? state.fail_result : 0;
}

EXPORT int cuInit(unsigned flags)
{
    (void)flags;
    ++state.init_calls;
    return result_of("cuInit");
}

EXPORT int cuDeviceGet(int *device, int ordinal)
{
    *device = ordinal;
    return ordinal == 0 ? result_of("cuDeviceGet") : 101; /* CUDA_ERROR_INVALID_DEVICE */
}

EXPORT int cuDeviceGetAttribute(int *value, int attribute, int device)
{
    (void)device;
    *value = attribute == 75 ? state.cc_major : attribute == 76 ? state.cc_minor : 0;
    return result_of("cuDeviceGetAttribute");
}

EXPORT int cuDevicePrimaryCtxRetain(void **context, int device)
{
    (void)device;
    ++state.retain_calls;
    *context = &context_object;
    return result_of("cuDevicePrimaryCtxRetain");
}

EXPORT int cuCtxGetCurrent(void **context)
{
    *context = current_context;
    return result_of("cuCtxGetCurrent");
}

EXPORT int cuCtxSetCurrent(void *context)
{
    current_context = context;
    return result_of("cuCtxSetCurrent");
}

EXPORT int cuCtxGetDevice(int *device)
{
    *device = 0;
    return current_context ? result_of("cuCtxGetDevice") : 201; /* CUDA_ERROR_INVALID_CONTEXT */
}

/* a 64-bit ELF image's size: the end of whatever lies furthest in it, the section and program
 * header tables or a section's contents (SHT_NOBITS sections occupy none) */
static size_t elf_size(const unsigned char *image)
{
    uint64_t shoff, phoff, end;
    uint16_t phentsize, phnum, shentsize, shnum;
    if (memcmp(image, "\177ELF", 4) != 0 || image[4] != 2)
        return 0;
    memcpy(&phoff, image + 0x20, 8);
    memcpy(&shoff, image + 0x28, 8);
    memcpy(&phentsize, image + 0x36, 2);
    memcpy(&phnum, image + 0x38, 2);
    memcpy(&shentsize, image + 0x3a, 2);
    memcpy(&shnum, image + 0x3c, 2);
    end = shoff + (uint64_t)shentsize * shnum;
    if (phoff + (uint64_t)phentsize * phnum > end)
        end = phoff + (uint64_t)phentsize * phnum;
    for (uint16_t i = 0; i < shnum; ++i) {
        const unsigned char *sh = image + shoff + (uint64_t)i * shentsize;
        uint32_t type;
        uint64_t offset, size;
        memcpy(&type, sh + 0x04, 4);
        memcpy(&offset, sh + 0x18, 8);
        memcpy(&size, sh + 0x20, 8);
        if (type != 8 && offset + size > end) /* 8: SHT_NOBITS */
            end = offset + size;
    }
    return (size_t)end;
}

EXPORT int cuModuleLoadData(void **module, const void *image)
{
    int r = result_of("cuModuleLoadData");
    if (r)
        return r;
    state.image_size = elf_size(image);
    if (state.image_size == 0)
        return 200; /* CUDA_ERROR_INVALID_IMAGE */
    *module = &module_objects[state.load_calls++ % sizeof module_objects];
    return 0;
}

EXPORT int cuModuleGetFunction(void **function, void *module, const char *name)
{
    (void)module;
    ++state.get_function_calls;
    snprintf(state.function_name, sizeof state.function_name, "%s", name);
    *function = &function_object;
    return result_of("cuModuleGetFunction");
}

EXPORT int cuLaunchKernel(void *function, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                          unsigned shared_bytes, void *stream, void **params, void **extra)
{
    (void)function;
    (void)extra;
    ++state.launch_calls;
    state.grid[0] = gx, state.grid[1] = gy, state.grid[2] = gz;
    state.block[0] = bx, state.block[1] = by, state.block[2] = bz;
    state.shared_bytes = shared_bytes;
    state.stream = stream;
    for (int i = 0; i < FAKE_CUDA_MAX_ARGS && state.arg_sizes[i]; ++i)
        memcpy(state.args[i], params[i], state.arg_sizes[i] <= sizeof state.args[i] ? state.arg_sizes[i] : 0);
    return result_of("cuLaunchKernel");
}

EXPORT int cuModuleUnload(void *module)
{
    (void)module;
    ++state.unload_calls;
    return result_of("cuModuleUnload");
}

EXPORT int cuGetErrorName(int result, const char **name)
{
    *name = result == 719 ? "CUDA_ERROR_LAUNCH_FAILED" : result == 100 ? "CUDA_ERROR_NO_DEVICE" : "CUDA_ERROR_UNKNOWN";
    return 0;
}

EXPORT int cuGetErrorString(int result, const char **text)
{
    /* the real driver's texts for these */
    *text = result == 719   ? "unspecified launch failure"
            : result == 100 ? "no CUDA-capable device is detected"
                            : "unknown error";
    return 0;
}
