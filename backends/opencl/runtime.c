/* runtime.c: the OpenCL runtime side of the backend: OpenCL error names and statuses, the list of
 * platforms' devices, the capabilities, and opening a context (one cl_context and one in-order
 * queue per fa_context) and closing it. Every OpenCL call is checked; errors reach the caller as
 * statuses whose message names the OpenCL error. */
#include "opencl_backend.h"
#include "kernels_switch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* ---------------------------------------------------------------- errors */

const char *ocl_error_name(cl_int e)
{
    switch (e) {
#define N(x) case x: return #x;
        N(CL_SUCCESS) N(CL_DEVICE_NOT_FOUND) N(CL_DEVICE_NOT_AVAILABLE) N(CL_COMPILER_NOT_AVAILABLE)
        N(CL_MEM_OBJECT_ALLOCATION_FAILURE) N(CL_OUT_OF_RESOURCES) N(CL_OUT_OF_HOST_MEMORY)
        N(CL_PROFILING_INFO_NOT_AVAILABLE) N(CL_MEM_COPY_OVERLAP) N(CL_IMAGE_FORMAT_MISMATCH)
        N(CL_IMAGE_FORMAT_NOT_SUPPORTED) N(CL_BUILD_PROGRAM_FAILURE) N(CL_MAP_FAILURE)
        N(CL_MISALIGNED_SUB_BUFFER_OFFSET) N(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
        N(CL_COMPILE_PROGRAM_FAILURE) N(CL_LINKER_NOT_AVAILABLE) N(CL_LINK_PROGRAM_FAILURE)
        N(CL_DEVICE_PARTITION_FAILED) N(CL_KERNEL_ARG_INFO_NOT_AVAILABLE) N(CL_INVALID_VALUE)
        N(CL_INVALID_DEVICE_TYPE) N(CL_INVALID_PLATFORM) N(CL_INVALID_DEVICE) N(CL_INVALID_CONTEXT)
        N(CL_INVALID_QUEUE_PROPERTIES) N(CL_INVALID_COMMAND_QUEUE) N(CL_INVALID_HOST_PTR)
        N(CL_INVALID_MEM_OBJECT) N(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR) N(CL_INVALID_IMAGE_SIZE)
        N(CL_INVALID_SAMPLER) N(CL_INVALID_BINARY) N(CL_INVALID_BUILD_OPTIONS) N(CL_INVALID_PROGRAM)
        N(CL_INVALID_PROGRAM_EXECUTABLE) N(CL_INVALID_KERNEL_NAME) N(CL_INVALID_KERNEL_DEFINITION)
        N(CL_INVALID_KERNEL) N(CL_INVALID_ARG_INDEX) N(CL_INVALID_ARG_VALUE) N(CL_INVALID_ARG_SIZE)
        N(CL_INVALID_KERNEL_ARGS) N(CL_INVALID_WORK_DIMENSION) N(CL_INVALID_WORK_GROUP_SIZE)
        N(CL_INVALID_WORK_ITEM_SIZE) N(CL_INVALID_GLOBAL_OFFSET) N(CL_INVALID_EVENT_WAIT_LIST)
        N(CL_INVALID_EVENT) N(CL_INVALID_OPERATION) N(CL_INVALID_GL_OBJECT) N(CL_INVALID_BUFFER_SIZE)
        N(CL_INVALID_MIP_LEVEL) N(CL_INVALID_GLOBAL_WORK_SIZE) N(CL_INVALID_PROPERTY)
        N(CL_INVALID_IMAGE_DESCRIPTOR) N(CL_INVALID_COMPILER_OPTIONS) N(CL_INVALID_LINKER_OPTIONS)
        N(CL_INVALID_DEVICE_PARTITION_COUNT)
#undef N
    case -1001: return "CL_PLATFORM_NOT_FOUND_KHR";
    default: return "unknown OpenCL error";
    }
}

fa_status ocl_fail_at(fa_context *ctx, cl_int e, const char *what, const char *file, int line)
{
    fa_status st = e == CL_MEM_OBJECT_ALLOCATION_FAILURE || e == CL_OUT_OF_HOST_MEMORY ? FA_ERR_OUT_OF_MEMORY
                                                                                         : FA_ERR_BACKEND;
    return fa_error_at(ctx, st, file, line, "%s: %s (%d)", what, ocl_error_name(e), (int)e);
}

/* ---------------------------------------------------------------- devices */

/* Every device of every platform, in platform order; FLASHATTN_OPENCL_PLATFORM=<index> keeps one
 * platform only. The backend's device index is the position in this list. */
static int list_devices(cl_device_id *devs, cl_platform_id *plats, int max)
{
    if (ocl_api_load())
        return 0; /* no ICD loader: zero devices, and ocl_availability says why */
    cl_uint np = 0;
    if (ocl_api.clGetPlatformIDs(0, NULL, &np) != CL_SUCCESS || np == 0)
        return 0; /* no ICD loader configuration, no platform: zero devices, not an error */
    cl_platform_id pl[16];
    if (np > 16)
        np = 16;
    if (ocl_api.clGetPlatformIDs(np, pl, NULL) != CL_SUCCESS)
        return 0;
    long only = -1;
    const char *env = getenv("FLASHATTN_OPENCL_PLATFORM");
    if (env && *env)
        only = strtol(env, NULL, 10);
    int n = 0;
    for (cl_uint i = 0; i < np && n < max; ++i) {
        if (only >= 0 && (long)i != only)
            continue;
        cl_uint nd = 0;
        if (ocl_api.clGetDeviceIDs(pl[i], CL_DEVICE_TYPE_ALL, 0, NULL, &nd) != CL_SUCCESS || nd == 0)
            continue;
        cl_device_id d[OCL_MAX_DEVICES];
        if (nd > (cl_uint)(max - n))
            nd = (cl_uint)(max - n);
        if (ocl_api.clGetDeviceIDs(pl[i], CL_DEVICE_TYPE_ALL, nd, d, NULL) != CL_SUCCESS)
            continue;
        for (cl_uint j = 0; j < nd; ++j) {
            devs[n] = d[j];
            plats[n] = pl[i];
            ++n;
        }
    }
    return n;
}

fa_status ocl_device_count(int *count)
{
    cl_device_id d[OCL_MAX_DEVICES];
    cl_platform_id p[OCL_MAX_DEVICES];
    *count = list_devices(d, p, OCL_MAX_DEVICES);
    return FA_SUCCESS;
}

fa_status ocl_availability(int *count, char *why, size_t len)
{
    *count = 0;
    const char *load_error = ocl_api_load();
    if (load_error) {
        snprintf(why, len, "%s", load_error);
        return FA_ERR_NO_BACKEND;
    }
    cl_uint np = 0;
    cl_int e = ocl_api.clGetPlatformIDs(0, NULL, &np);
    if (e != CL_SUCCESS || np == 0) {
        snprintf(why, len, "no driver: the OpenCL ICD loader finds no platform (%s; a vendor's driver registers one in "
                 "/etc/OpenCL/vendors)", e != CL_SUCCESS ? ocl_error_name(e) : "0 platforms");
        return FA_ERR_NO_BACKEND;
    }
    cl_device_id d[OCL_MAX_DEVICES];
    cl_platform_id p[OCL_MAX_DEVICES];
    *count = list_devices(d, p, OCL_MAX_DEVICES);
    if (*count == 0) {
        const char *only = getenv("FLASHATTN_OPENCL_PLATFORM");
        snprintf(why, len, "no device: %u platform%s, none with a device%s%s", (unsigned)np, np == 1 ? "" : "s",
                 only && *only ? " among those FLASHATTN_OPENCL_PLATFORM keeps: " : "", only && *only ? only : "");
        return FA_ERR_NO_BACKEND;
    }
    return FA_SUCCESS;
}

fa_status ocl_device_name(int device, char *buf, size_t len)
{
    cl_device_id d[OCL_MAX_DEVICES];
    cl_platform_id p[OCL_MAX_DEVICES];
    int n = list_devices(d, p, OCL_MAX_DEVICES);
    if (device < 0 || device >= n)
        return FA_ERR_NO_DEVICE;
    char name[256] = "", plat[256] = "";
    cl_device_type type = 0;
    if (ocl_api.clGetDeviceInfo(d[device], CL_DEVICE_NAME, sizeof name, name, NULL) != CL_SUCCESS ||
        ocl_api.clGetPlatformInfo(p[device], CL_PLATFORM_NAME, sizeof plat, plat, NULL) != CL_SUCCESS ||
        ocl_api.clGetDeviceInfo(d[device], CL_DEVICE_TYPE, sizeof type, &type, NULL) != CL_SUCCESS)
        return FA_ERR_BACKEND;
    snprintf(buf, len, "%s (%s, %s)", name, plat, (type & CL_DEVICE_TYPE_GPU) ? "GPU" : (type & CL_DEVICE_TYPE_CPU) ? "CPU" : "other");
    return FA_SUCCESS;
}

void ocl_capabilities(fa_capabilities *caps)
{
    caps->dtypes = (1u << FA_DTYPE_F32) | (1u << FA_DTYPE_F16) | (1u << FA_DTYPE_BF16);
    caps->max_head_dim = FA_MAX_HEAD_DIM;
    caps->features = FA_FEATURE_CAUSAL | FA_FEATURE_WINDOW | FA_FEATURE_VARLEN | FA_FEATURE_GQA |
                     FA_FEATURE_DROPOUT | FA_FEATURE_BLOCK_SPARSE | FA_FEATURE_LSE | FA_FEATURE_DETERMINISTIC |
                     FA_FEATURE_BACKWARD | FA_FEATURE_STRIDES | FA_FEATURE_SOFTCAP | FA_FEATURE_ALIBI |
                     FA_FEATURE_KVCACHE | FA_FEATURE_SINK | FA_FEATURE_HEAD_DIM_V;
    snprintf(caps->notes, sizeof caps->notes,
             "OpenCL C 1.2, d, d_v <= 256 (KV cache 576); sink; fp32 math, fp16/bf16 storage; deterministic bwd; "
             "not in the default chain; NVIDIA sm_80+: fp16/bf16 fwd+bwd, d %% 16 == 0, <= 128 on mma.sync "
             "(-mma; FLASHATTN_KERNELS=opencl-matrix=off turns it off)");
}

void ocl_close(fa_context *ctx)
{
    ocl_state *s = ocl_state_of(ctx);
    if (!s)
        return;
    if (s->queue) {
        ocl_api.clFinish(s->queue);
        ocl_api.clReleaseCommandQueue(s->queue);
    }
    for (size_t i = 0; i < s->nbuffers; ++i) {
        ocl_api.clReleaseMemObject(s->buffers[i].mem);
        munmap((void *)s->buffers[i].base, s->buffers[i].bytes);
    }
    free(s->buffers);
    if (s->dummy)
        ocl_api.clReleaseMemObject(s->dummy);
    ocl_release_programs(s);
    if (s->context)
        ocl_api.clReleaseContext(s->context);
    free(s);
    ctx->priv = NULL;
}

/* FLASHATTN_KERNELS' OpenCL tokens (core/kernels_switch.h, docs/options.md): opencl-tiles=gpu|cpu
 * runs the kernels and tiles of that device type on any device (the tests run the GPU kernels on
 * PoCL this way, since CI has no GPU); opencl-matrix=off turns the matrix path off, =require makes
 * a device without it an error (the tests SKIP by that message), =emulate runs it on any device
 * with nv_mma.cl's instructions in plain OpenCL C. Any other value is refused, never ignored. */
enum { OCL_MATRIX_AUTO, OCL_MATRIX_OFF, OCL_MATRIX_REQUIRE, OCL_MATRIX_EMULATE };
typedef struct ocl_switches {
    int tiles;  /* 1 the GPU rows and kernels, 0 the CPU ones, -1 the device type's */
    int matrix; /* OCL_MATRIX_* */
} ocl_switches;

static fa_status read_switches(fa_context *ctx, ocl_switches *sw)
{
    char v[16];
    sw->tiles = -1;
    sw->matrix = OCL_MATRIX_AUTO;
    if (fa_kernels_switch("opencl-tiles", v, sizeof v)) {
        if (strcmp(v, "gpu") != 0 && strcmp(v, "cpu") != 0)
            return FA_ERROR(ctx, FA_ERR_INVALID_ARG,
                            "opencl: " FA_KERNELS_ENV " has opencl-tiles=%s; the values are gpu and cpu", v);
        sw->tiles = strcmp(v, "gpu") == 0;
    }
    if (fa_kernels_switch("opencl-matrix", v, sizeof v)) {
        if (strcmp(v, "off") == 0)
            sw->matrix = OCL_MATRIX_OFF;
        else if (strcmp(v, "require") == 0)
            sw->matrix = OCL_MATRIX_REQUIRE;
        else if (strcmp(v, "emulate") == 0)
            sw->matrix = OCL_MATRIX_EMULATE;
        else
            return FA_ERROR(ctx, FA_ERR_INVALID_ARG,
                            "opencl: " FA_KERNELS_ENV " has opencl-matrix=%s; the values are off, require and emulate",
                            v);
    }
    return FA_SUCCESS;
}

fa_status ocl_open(fa_context *ctx, int device)
{
    cl_device_id d[OCL_MAX_DEVICES];
    cl_platform_id p[OCL_MAX_DEVICES];
    ocl_switches sw;
    fa_status st = read_switches(ctx, &sw);
    if (st != FA_SUCCESS)
        return st;
    const char *load_error = ocl_api_load();
    if (load_error)
        return FA_ERROR(ctx, FA_ERR_NO_BACKEND, "opencl: %s", load_error);
    int n = list_devices(d, p, OCL_MAX_DEVICES);
    if (device < 0 || device >= n)
        return FA_ERROR(ctx, FA_ERR_NO_DEVICE, "opencl: device %d of %d", device, n);
    ocl_state *s = calloc(1, sizeof *s);
    if (!s)
        return FA_ERR_OUT_OF_MEMORY;
    ctx->priv = s;
    s->platform = p[device];
    s->device = d[device];
    cl_int e = ocl_api.clGetDeviceInfo(s->device, CL_DEVICE_TYPE, sizeof s->type, &s->type, NULL);
    if (e == CL_SUCCESS)
        e = ocl_api.clGetDeviceInfo(s->device, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof s->max_group, &s->max_group, NULL);
    if (e == CL_SUCCESS)
        e = ocl_api.clGetDeviceInfo(s->device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof s->local_bytes, &s->local_bytes, NULL);
    if (e == CL_SUCCESS)
        e = ocl_api.clGetDeviceInfo(s->device, CL_DEVICE_NAME, sizeof s->device_name, s->device_name, NULL);
    if (e == CL_SUCCESS)
        e = ocl_api.clGetDeviceInfo(s->device, CL_DEVICE_VERSION, sizeof s->device_version, s->device_version, NULL);
    if (e == CL_SUCCESS)
        e = ocl_api.clGetDeviceInfo(s->device, CL_DRIVER_VERSION, sizeof s->driver_version, s->driver_version, NULL);
    if (e == CL_SUCCESS)
        e = ocl_api.clGetPlatformInfo(s->platform, CL_PLATFORM_VERSION, sizeof s->platform_version, s->platform_version,
                              NULL);
    if (e != CL_SUCCESS) {
        ocl_close(ctx);
        return OCL_FAIL(ctx, e, "clGetDeviceInfo");
    }
    cl_device_fp_config fp = 0;
    if (ocl_api.clGetDeviceInfo(s->device, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp, NULL) == CL_SUCCESS)
        s->fma = (fp & CL_FP_FMA) != 0;
    s->gpu_tiles = sw.tiles >= 0 ? sw.tiles : (s->type & CL_DEVICE_TYPE_GPU) != 0;
    size_t ext_len = 0;
    if (ocl_api.clGetDeviceInfo(s->device, CL_DEVICE_EXTENSIONS, 0, NULL, &ext_len) == CL_SUCCESS && ext_len) {
        char *ext = malloc(ext_len + 1);
        if (ext && ocl_api.clGetDeviceInfo(s->device, CL_DEVICE_EXTENSIONS, ext_len, ext, NULL) == CL_SUCCESS) {
            ext[ext_len] = '\0';
            s->nv_options = strstr(ext, "cl_nv_compiler_options") != NULL;
            s->nv_attributes = strstr(ext, "cl_nv_device_attribute_query") != NULL;
        }
        free(ext);
    }
    /* The matrix path (forward_mma.cl and backward_mma.cl: mma.sync through inline PTX) where
     * NVIDIA's driver reports compute capability 8.0 or newer, unless opencl-matrix says otherwise. */
    cl_uint cc_major = 0;
    if (s->nv_attributes && (s->type & CL_DEVICE_TYPE_GPU) &&
        ocl_api.clGetDeviceInfo(s->device, OCL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV, sizeof cc_major, &cc_major, NULL) !=
            CL_SUCCESS)
        cc_major = 0;
    s->nv_emulate = sw.matrix == OCL_MATRIX_EMULATE;
    s->nv_mma = s->nv_emulate || (cc_major >= 8 && sw.matrix != OCL_MATRIX_OFF);
    if (sw.matrix == OCL_MATRIX_REQUIRE && !s->nv_mma) {
        char name[sizeof s->device_name];
        snprintf(name, sizeof name, "%s", s->device_name);
        ocl_close(ctx);
        return FA_ERROR(ctx, FA_ERR_UNSUPPORTED,
                        "opencl: " FA_KERNELS_ENV " has opencl-matrix=require, but %s has no matrix path (it needs "
                        "NVIDIA's driver and compute capability 8.0 or newer; found %u)",
                        name, (unsigned)cc_major);
    }
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)s->platform, 0};
    s->context = ocl_api.clCreateContext(props, 1, &s->device, NULL, NULL, &e);
    if (e == CL_SUCCESS)
        s->queue = ocl_api.clCreateCommandQueue(s->context, s->device, 0, &e);
    if (e == CL_SUCCESS)
        s->dummy = ocl_api.clCreateBuffer(s->context, CL_MEM_READ_WRITE, 64, NULL, &e);
    if (e != CL_SUCCESS) {
        ocl_close(ctx);
        return OCL_FAIL(ctx, e, "clCreateContext / clCreateCommandQueue");
    }
    return FA_SUCCESS;
}
