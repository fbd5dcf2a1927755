/* fake_libcuda.c: a stand-in for libcuda.so.1 with the entry points host/driver_api.c resolves, for
 * testing the driver-API launcher and the runtime calls over the driver (rtc_launch_check.c,
 * driver_runtime_check.c) on a machine without a GPU. It runs no kernel: it hands out handles,
 * records each call's arguments in a fake_cuda_state (fake_libcuda.h) and returns the error the
 * test asks for. Device memory is host memory (malloc), so copies and memsets are memcpy and
 * memset; one primary context per device; other handles are addresses of static objects. */
#include "fake_libcuda.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

static fake_cuda_state state = {.cc_major = 8,
                                .cc_minor = 0,
                                .device_count = 1,
                                .multiprocessors = 108,
                                .shared_optin = 166912,
                                .shared_per_sm = 167936,
                                .total_mem = (size_t)40 << 30,
                                .current_device = -1};
static char context_objects[FAKE_CUDA_MAX_DEVICES], function_object;
static char module_objects[64], stream_objects[64], event_objects[64];
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
    return state.device_count == 0 ? 100 : result_of("cuInit"); /* CUDA_ERROR_NO_DEVICE */
}

static int valid_device(int ordinal)
{
    return ordinal >= 0 && ordinal < state.device_count && ordinal < FAKE_CUDA_MAX_DEVICES;
}

EXPORT int cuDeviceGet(int *device, int ordinal)
{
    *device = ordinal;
    return valid_device(ordinal) ? result_of("cuDeviceGet") : 101; /* CUDA_ERROR_INVALID_DEVICE */
}

EXPORT int cuDeviceGetCount(int *count)
{
    *count = state.device_count;
    return result_of("cuDeviceGetCount");
}

EXPORT int cuDeviceGetName(char *name, int len, int device)
{
    if (!valid_device(device))
        return 101;
    snprintf(name, (size_t)len, "Fake CUDA device %d", device);
    return result_of("cuDeviceGetName");
}

EXPORT int cuDeviceTotalMem_v2(size_t *bytes, int device)
{
    *bytes = state.total_mem;
    return valid_device(device) ? result_of("cuDeviceTotalMem_v2") : 101;
}

EXPORT int cuDeviceGetAttribute(int *value, int attribute, int device)
{
    if (!valid_device(device))
        return 101;
    *value = attribute == 75   ? state.cc_major
             : attribute == 76 ? state.cc_minor
             : attribute == 16 ? state.multiprocessors
             : attribute == 97 ? state.shared_optin
             : attribute == 81 ? state.shared_per_sm
                               : 0;
    return result_of("cuDeviceGetAttribute");
}

EXPORT int cuDevicePrimaryCtxRetain(void **context, int device)
{
    if (!valid_device(device))
        return 101;
    ++state.retain_calls;
    *context = &context_objects[device];
    return result_of("cuDevicePrimaryCtxRetain");
}

EXPORT int cuDevicePrimaryCtxRelease_v2(int device)
{
    return valid_device(device) ? result_of("cuDevicePrimaryCtxRelease_v2") : 101;
}

EXPORT int cuCtxGetCurrent(void **context)
{
    *context = current_context;
    return result_of("cuCtxGetCurrent");
}

EXPORT int cuCtxSetCurrent(void *context)
{
    int r = result_of("cuCtxSetCurrent");
    if (r)
        return r;
    current_context = context;
    state.current_device = context ? (int)((char *)context - context_objects) : -1;
    return 0;
}

EXPORT int cuCtxGetDevice(int *device)
{
    *device = state.current_device;
    return current_context ? result_of("cuCtxGetDevice") : 201; /* CUDA_ERROR_INVALID_CONTEXT */
}

EXPORT int cuCtxSynchronize(void)
{
    ++state.ctx_sync_calls;
    return current_context ? result_of("cuCtxSynchronize") : 201;
}

/* memory: the host's */
static int allocate(unsigned long long *ptr, size_t bytes, const char *call)
{
    int r = result_of(call);
    if (r)
        return r;
    void *p = bytes ? malloc(bytes) : NULL;
    if (!p)
        return bytes ? 2 : 1; /* CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_INVALID_VALUE */
    ++state.alloc_calls;
    ++state.live_allocations;
    *ptr = (unsigned long long)(uintptr_t)p;
    return 0;
}

static int release(unsigned long long ptr, const char *call)
{
    int r = result_of(call);
    if (r)
        return r;
    if (!ptr)
        return 1;
    ++state.free_calls;
    --state.live_allocations;
    free((void *)(uintptr_t)ptr);
    return 0;
}

EXPORT int cuMemAlloc_v2(unsigned long long *ptr, size_t bytes)
{
    return current_context ? allocate(ptr, bytes, "cuMemAlloc_v2") : 201;
}

EXPORT int cuMemFree_v2(unsigned long long ptr)
{
    return current_context ? release(ptr, "cuMemFree_v2") : 201;
}

EXPORT int cuMemAllocAsync(unsigned long long *ptr, size_t bytes, void *stream)
{
    state.last_async_stream = stream;
    return current_context ? allocate(ptr, bytes, "cuMemAllocAsync") : 201;
}

EXPORT int cuMemFreeAsync(unsigned long long ptr, void *stream)
{
    state.last_async_stream = stream;
    return current_context ? release(ptr, "cuMemFreeAsync") : 201;
}

static int copy(unsigned long long dst, unsigned long long src, size_t bytes, const char *call)
{
    int r = result_of(call);
    if (r)
        return r;
    ++state.copy_calls;
    state.last_copy_bytes = bytes;
    memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, bytes);
    return 0;
}

EXPORT int cuMemcpy(unsigned long long dst, unsigned long long src, size_t bytes)
{
    return current_context ? copy(dst, src, bytes, "cuMemcpy") : 201;
}

EXPORT int cuMemcpyAsync(unsigned long long dst, unsigned long long src, size_t bytes, void *stream)
{
    state.last_async_stream = stream;
    return current_context ? copy(dst, src, bytes, "cuMemcpyAsync") : 201;
}

static int fill(unsigned long long dst, unsigned char value, size_t count, const char *call)
{
    int r = result_of(call);
    if (r)
        return r;
    ++state.memset_calls;
    state.launches_at_memset = state.launch_log_len;
    memset((void *)(uintptr_t)dst, value, count);
    return 0;
}

EXPORT int cuMemsetD8_v2(unsigned long long dst, unsigned char value, size_t count)
{
    return current_context ? fill(dst, value, count, "cuMemsetD8_v2") : 201;
}

EXPORT int cuMemsetD8Async(unsigned long long dst, unsigned char value, size_t count, void *stream)
{
    state.last_async_stream = stream;
    return current_context ? fill(dst, value, count, "cuMemsetD8Async") : 201;
}

/* streams and events: counted handles */
EXPORT int cuStreamCreate(void **stream, unsigned flags)
{
    int r = current_context ? result_of("cuStreamCreate") : 201;
    if (r)
        return r;
    state.last_stream_flags = flags;
    *stream = &stream_objects[state.streams_created++ % sizeof stream_objects];
    return 0;
}

EXPORT int cuStreamDestroy_v2(void *stream)
{
    (void)stream;
    ++state.streams_destroyed;
    return result_of("cuStreamDestroy_v2");
}

EXPORT int cuStreamSynchronize(void *stream)
{
    (void)stream;
    ++state.stream_syncs;
    return result_of("cuStreamSynchronize");
}

EXPORT int cuStreamWaitEvent(void *stream, void *event, unsigned flags)
{
    (void)stream;
    (void)event;
    (void)flags;
    ++state.stream_waits;
    return result_of("cuStreamWaitEvent");
}

EXPORT int cuStreamIsCapturing(void *stream, int *capture_status)
{
    (void)stream;
    *capture_status = state.capture_status;
    return result_of("cuStreamIsCapturing");
}

EXPORT int cuEventCreate(void **event, unsigned flags)
{
    int r = current_context ? result_of("cuEventCreate") : 201;
    if (r)
        return r;
    state.last_event_flags = flags;
    *event = &event_objects[state.events_created++ % sizeof event_objects];
    return 0;
}

EXPORT int cuEventRecord(void *event, void *stream)
{
    (void)event;
    (void)stream;
    ++state.event_records;
    return result_of("cuEventRecord");
}

EXPORT int cuEventDestroy_v2(void *event)
{
    (void)event;
    ++state.events_destroyed;
    return result_of("cuEventDestroy_v2");
}

/* resolved for the launchers; answered, not modelled */
/* each function's CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES plus 1, 0 until set (by function
 * slot, function_names below) */
static long function_max_dynamic[64];
static char function_names[64][256];
static int function_count;

/* the slot of a function handle, or -1 */
static int slot_of(const void *function)
{
    const char *f = (const char *)function, *first = &function_names[0][0];
    return f >= first && f < first + sizeof function_names ? (int)((f - first) / sizeof function_names[0]) : -1;
}

EXPORT int cuFuncSetAttribute(void *function, int attribute, int value)
{
    int r = result_of("cuFuncSetAttribute");
    const int slot = slot_of(function);
    /* the driver refuses more than the device's opt-in limit less the kernel's static bytes */
    if (!r && attribute == 8 && state.shared_optin > 0 && (long)value > (long)state.shared_optin - (long)state.static_shared_bytes)
        return 1; /* CUDA_ERROR_INVALID_VALUE */
    if (!r && attribute == 8 /* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */ && slot >= 0)
        function_max_dynamic[slot] = (long)value + 1;
    return r;
}

EXPORT int cuOccupancyMaxActiveBlocksPerMultiprocessor(int *blocks, void *function, int block_size,
                                                       size_t dynamic_shared_bytes)
{
    const int slot = slot_of(function);
    snprintf(state.occupancy_name, sizeof state.occupancy_name, "%s", slot >= 0 ? function_names[slot] : "");
    (void)block_size;
    (void)dynamic_shared_bytes;
    *blocks = 1;
    return result_of("cuOccupancyMaxActiveBlocksPerMultiprocessor");
}

/* every module's every global is one 256-byte object */
EXPORT int cuModuleGetGlobal_v2(unsigned long long *ptr, size_t *bytes, void *module, const char *name)
{
    static unsigned char global_object[256];
    (void)module;
    (void)name;
    *ptr = (unsigned long long)(uintptr_t)global_object;
    *bytes = sizeof global_object;
    return result_of("cuModuleGetGlobal_v2");
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

/* the names of the functions handed out (function_names above): a function is the address of
 * its name's slot, so a launch knows which kernel it runs */

EXPORT int cuModuleGetFunction(void **function, void *module, const char *name)
{
    (void)module;
    ++state.get_function_calls;
    snprintf(state.function_name, sizeof state.function_name, "%s", name);
    int slot = 0;
    while (slot < function_count && strcmp(function_names[slot], name) != 0)
        ++slot;
    if (slot == function_count && function_count < 64)
        snprintf(function_names[function_count++], sizeof function_names[0], "%s", name);
    *function = slot < 64 ? (void *)function_names[slot] : (void *)&function_object;
    return result_of("cuModuleGetFunction");
}

EXPORT int cuLaunchKernel(void *function, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                          unsigned shared_bytes, void *stream, void **params, void **extra)
{
    (void)extra;
    const int slot = slot_of(function);
    const long limit = slot >= 0 && function_max_dynamic[slot] > 0 ? function_max_dynamic[slot] - 1
                                                                    : 49152L - (long)state.static_shared_bytes;
    if ((long)shared_bytes > limit)
        return 1; /* CUDA_ERROR_INVALID_VALUE: more dynamic shared memory than the kernel may use */
    ++state.launch_calls;
    state.grid[0] = gx, state.grid[1] = gy, state.grid[2] = gz;
    state.block[0] = bx, state.block[1] = by, state.block[2] = bz;
    state.shared_bytes = shared_bytes;
    state.stream = stream;
    if (state.launch_log_len == FAKE_CUDA_LAUNCH_LOG) {
        memmove(&state.launches[0], &state.launches[1], sizeof state.launches[0] * (FAKE_CUDA_LAUNCH_LOG - 1));
        --state.launch_log_len;
    }
    fake_cuda_launch *l = &state.launches[state.launch_log_len++];
    snprintf(l->name, sizeof l->name, "%s", function == (void *)&function_object ? "?" : (const char *)function);
    memcpy(l->grid, state.grid, sizeof l->grid);
    memcpy(l->block, state.block, sizeof l->block);
    l->shared_bytes = shared_bytes;
    for (int i = 0; i < FAKE_CUDA_MAX_ARGS && state.arg_sizes[i]; ++i)
        memcpy(state.args[i], params[i], state.arg_sizes[i] <= sizeof state.args[i] ? state.arg_sizes[i] : 0);
    return result_of("cuLaunchKernel");
}

#ifndef FAKE_CUDA_NO_TENSOR_MAP
EXPORT int cuTensorMapEncodeTiled(void *map, int data_type, unsigned rank, void *address,
                                  const unsigned long long *dims, const unsigned long long *strides,
                                  const unsigned *box, const unsigned *element_strides, int interleave, int swizzle,
                                  int l2_promotion, int oob_fill)
{
    int r = result_of("cuTensorMapEncodeTiled");
    if (r)
        return r;
    if (rank < 1 || rank > 5)
        return 1; /* CUDA_ERROR_INVALID_VALUE */
    if (state.tensor_map_log_len == FAKE_CUDA_TENSOR_MAP_LOG) {
        memmove(&state.tensor_maps[0], &state.tensor_maps[1],
                sizeof state.tensor_maps[0] * (FAKE_CUDA_TENSOR_MAP_LOG - 1));
        --state.tensor_map_log_len;
    }
    fake_cuda_tensor_map *m = &state.tensor_maps[state.tensor_map_log_len++];
    memset(m, 0, sizeof *m);
    m->data_type = data_type;
    m->rank = rank;
    m->address = address;
    for (unsigned i = 0; i < rank; ++i) {
        m->dims[i] = dims[i];
        m->box[i] = box[i];
        m->element_strides[i] = element_strides[i];
        if (i + 1 < rank)
            m->strides[i] = strides[i];
    }
    m->interleave = interleave, m->swizzle = swizzle, m->l2_promotion = l2_promotion, m->oob_fill = oob_fill;
    memset(map, 0, 128);
    unsigned long long number = (unsigned long long)++state.tensor_map_calls;
    memcpy(map, &number, sizeof number);
    return 0;
}
#endif

EXPORT int cuModuleUnload(void *module)
{
    (void)module;
    ++state.unload_calls;
    return result_of("cuModuleUnload");
}

/* the real driver's names and texts for the errors the fake and its tests use; others are
 * CUDA_ERROR_INVALID_VALUE, as the real driver answers for a number it does not know */
static const struct {
    int result;
    const char *name, *text;
} errors[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {221, "CUDA_ERROR_JIT_COMPILER_NOT_FOUND", "PTX JIT compiler library not found"},
    {300, "CUDA_ERROR_INVALID_SOURCE", "device kernel image is invalid"},
    {500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {719, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

EXPORT int cuGetErrorName(int result, const char **name)
{
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; ++i)
        if (errors[i].result == result) {
            *name = errors[i].name;
            return 0;
        }
    *name = NULL;
    return 1;
}

EXPORT int cuGetErrorString(int result, const char **text)
{
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; ++i)
        if (errors[i].result == result) {
            *text = errors[i].text;
            return 0;
        }
    *text = NULL;
    return 1;
}
