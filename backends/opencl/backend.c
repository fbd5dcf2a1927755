/* backend.c: the OpenCL backend's table: platforms and devices, one context and one in-order
 * queue per fa_context, device memory, the program cache (in memory per context, binaries on disk
 * per device) and the launch glue. The kernels are the .cl files in kernels/, embedded at build
 * time (embed_cl.py) and compiled at first use per (dtype, head dim, tile shape). Every OpenCL
 * call is checked; errors reach the caller as statuses whose message names the OpenCL error.
 *
 * Device pointers: fa_malloc returns an address inside a range of host address space reserved
 * for the buffer (mmap PROT_NONE, never touched), so device pointers are unique, never alias host
 * memory, and support pointer arithmetic (a tensor may start inside an allocation). The backend
 * maps a pointer back to its cl_mem and byte offset through a sorted table. */
#define CL_TARGET_OPENCL_VERSION 120
#include "internal.h"
#include "kernels/params.h"

#include <CL/cl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

extern const char fa_opencl_source[];
extern const size_t fa_opencl_source_len;

#define OCL_MAX_DEVICES 64
#define OCL_MAX_PROGRAMS 64

/* ---------------------------------------------------------------- errors */

static const char *cl_error_name(cl_int e)
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

static fa_status ocl_fail_at(fa_context *ctx, cl_int e, const char *what, const char *file, int line)
{
    fa_status st = e == CL_MEM_OBJECT_ALLOCATION_FAILURE || e == CL_OUT_OF_HOST_MEMORY ? FA_ERR_OUT_OF_MEMORY
                                                                                         : FA_ERR_BACKEND;
    return fa_error_at(ctx, st, file, line, "%s: %s (%d)", what, cl_error_name(e), (int)e);
}
#define OCL_FAIL(ctx, e, what) ocl_fail_at((ctx), (e), (what), __FILE__, __LINE__)

#define OCL_TRY(ctx, call, what)                                                                                   \
    do {                                                                                                           \
        cl_int e_ = (call);                                                                                        \
        if (e_ != CL_SUCCESS)                                                                                      \
            return OCL_FAIL((ctx), e_, (what));                                                                    \
    } while (0)

/* ---------------------------------------------------------------- devices */

/* Every device of every platform, in platform order; FLASHATTN_OPENCL_PLATFORM=<index> keeps one
 * platform only. The backend's device index is the position in this list. */
static int list_devices(cl_device_id *devs, cl_platform_id *plats, int max)
{
    cl_uint np = 0;
    if (clGetPlatformIDs(0, NULL, &np) != CL_SUCCESS || np == 0)
        return 0; /* no ICD loader configuration, no platform: zero devices, not an error */
    cl_platform_id pl[16];
    if (np > 16)
        np = 16;
    if (clGetPlatformIDs(np, pl, NULL) != CL_SUCCESS)
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
        if (clGetDeviceIDs(pl[i], CL_DEVICE_TYPE_ALL, 0, NULL, &nd) != CL_SUCCESS || nd == 0)
            continue;
        cl_device_id d[OCL_MAX_DEVICES];
        if (nd > (cl_uint)(max - n))
            nd = (cl_uint)(max - n);
        if (clGetDeviceIDs(pl[i], CL_DEVICE_TYPE_ALL, nd, d, NULL) != CL_SUCCESS)
            continue;
        for (cl_uint j = 0; j < nd; ++j) {
            devs[n] = d[j];
            plats[n] = pl[i];
            ++n;
        }
    }
    return n;
}

static fa_status ocl_device_count(int *count)
{
    cl_device_id d[OCL_MAX_DEVICES];
    cl_platform_id p[OCL_MAX_DEVICES];
    *count = list_devices(d, p, OCL_MAX_DEVICES);
    return FA_SUCCESS;
}

static fa_status ocl_device_name(int device, char *buf, size_t len)
{
    cl_device_id d[OCL_MAX_DEVICES];
    cl_platform_id p[OCL_MAX_DEVICES];
    int n = list_devices(d, p, OCL_MAX_DEVICES);
    if (device < 0 || device >= n)
        return FA_ERR_NO_DEVICE;
    char name[256] = "", plat[256] = "";
    cl_device_type type = 0;
    if (clGetDeviceInfo(d[device], CL_DEVICE_NAME, sizeof name, name, NULL) != CL_SUCCESS ||
        clGetPlatformInfo(p[device], CL_PLATFORM_NAME, sizeof plat, plat, NULL) != CL_SUCCESS ||
        clGetDeviceInfo(d[device], CL_DEVICE_TYPE, sizeof type, &type, NULL) != CL_SUCCESS)
        return FA_ERR_BACKEND;
    snprintf(buf, len, "%s (%s, %s)", name, plat, (type & CL_DEVICE_TYPE_GPU) ? "GPU" : (type & CL_DEVICE_TYPE_CPU) ? "CPU" : "other");
    return FA_SUCCESS;
}

static void ocl_capabilities(fa_capabilities *caps)
{
    caps->dtypes = (1u << FA_DTYPE_F32) | (1u << FA_DTYPE_F16) | (1u << FA_DTYPE_BF16);
    caps->max_head_dim = 256;
    caps->features = FA_FEATURE_CAUSAL | FA_FEATURE_WINDOW | FA_FEATURE_VARLEN | FA_FEATURE_GQA |
                     FA_FEATURE_DROPOUT | FA_FEATURE_BLOCK_SPARSE | FA_FEATURE_LSE | FA_FEATURE_DETERMINISTIC |
                     FA_FEATURE_BACKWARD | FA_FEATURE_STRIDES | FA_FEATURE_SOFTCAP | FA_FEATURE_ALIBI;
    snprintf(caps->notes, sizeof caps->notes,
             "OpenCL C 1.2, any device; every d in 1..256 (a program per head dim); fp32 arithmetic, fp16/bf16 "
             "as storage; backward without atomics, always deterministic; not in the default-backend chain");
}

/* ---------------------------------------------------------------- state */

typedef struct ocl_buffer {
    uintptr_t base; /* start of the reserved address range the user sees */
    size_t bytes;
    cl_mem mem;
} ocl_buffer;

/* One row of the tile table (see gpu_fwd_tiles below). */
typedef struct ocl_tile_row {
    int64_t max_d, block_q, block_k;
    int kernel;
    int64_t tm, tn, dc, maxreg; /* maxreg: NVIDIA's register cap for the GPU forward (0: none) */
} ocl_tile_row;

typedef struct ocl_program {
    char options[320];
    cl_program program;
    cl_kernel forward, forward_vec, dsum, dkdv, dq;
} ocl_program;

typedef struct ocl_state {
    cl_platform_id platform;
    cl_device_id device;
    cl_context context;
    cl_command_queue queue;
    cl_device_type type;
    int gpu_tiles;          /* the GPU rows of the tile table and the work-group kernels */
    int nv_options;         /* the device takes NVIDIA's compiler options (cl_nv_compiler_options) */
    int fma;                /* CL_FP_FMA in the single-precision config: the CPU kernels use fma() (FA_FMA) */
    ocl_tile_row fwd_tile; /* FLASHATTN_OPENCL_FWD_TILE's row; block_q 0 when unset */
    size_t max_group;
    cl_ulong local_bytes;
    char device_name[256], device_version[128], driver_version[128], platform_version[256];
    ocl_buffer *buffers; /* sorted by base */
    size_t nbuffers, cap_buffers;
    ocl_program programs[OCL_MAX_PROGRAMS];
    int nprograms;
    cl_mem dummy; /* bound where a kernel's optional buffer is absent */
} ocl_state;

static int parse_fwd_tile(ocl_tile_row *out);

static ocl_state *state(const fa_context *ctx)
{
    return (ocl_state *)ctx->priv;
}

static void release_programs(ocl_state *s)
{
    for (int i = 0; i < s->nprograms; ++i) {
        ocl_program *p = &s->programs[i];
        cl_kernel ks[] = {p->forward, p->forward_vec, p->dsum, p->dkdv, p->dq};
        for (size_t k = 0; k < sizeof ks / sizeof ks[0]; ++k)
            if (ks[k])
                clReleaseKernel(ks[k]);
        if (p->program)
            clReleaseProgram(p->program);
    }
    s->nprograms = 0;
}

static void ocl_close(fa_context *ctx)
{
    ocl_state *s = state(ctx);
    if (!s)
        return;
    if (s->queue) {
        clFinish(s->queue);
        clReleaseCommandQueue(s->queue);
    }
    for (size_t i = 0; i < s->nbuffers; ++i) {
        clReleaseMemObject(s->buffers[i].mem);
        munmap((void *)s->buffers[i].base, s->buffers[i].bytes);
    }
    free(s->buffers);
    if (s->dummy)
        clReleaseMemObject(s->dummy);
    release_programs(s);
    if (s->context)
        clReleaseContext(s->context);
    free(s);
    ctx->priv = NULL;
}

static fa_status ocl_open(fa_context *ctx, int device)
{
    cl_device_id d[OCL_MAX_DEVICES];
    cl_platform_id p[OCL_MAX_DEVICES];
    int n = list_devices(d, p, OCL_MAX_DEVICES);
    if (device < 0 || device >= n)
        return FA_ERROR(ctx, FA_ERR_NO_DEVICE, "opencl: device %d of %d", device, n);
    ocl_state *s = calloc(1, sizeof *s);
    if (!s)
        return FA_ERR_OUT_OF_MEMORY;
    ctx->priv = s;
    s->platform = p[device];
    s->device = d[device];
    cl_int e = clGetDeviceInfo(s->device, CL_DEVICE_TYPE, sizeof s->type, &s->type, NULL);
    if (e == CL_SUCCESS)
        e = clGetDeviceInfo(s->device, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof s->max_group, &s->max_group, NULL);
    if (e == CL_SUCCESS)
        e = clGetDeviceInfo(s->device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof s->local_bytes, &s->local_bytes, NULL);
    if (e == CL_SUCCESS)
        e = clGetDeviceInfo(s->device, CL_DEVICE_NAME, sizeof s->device_name, s->device_name, NULL);
    if (e == CL_SUCCESS)
        e = clGetDeviceInfo(s->device, CL_DEVICE_VERSION, sizeof s->device_version, s->device_version, NULL);
    if (e == CL_SUCCESS)
        e = clGetDeviceInfo(s->device, CL_DRIVER_VERSION, sizeof s->driver_version, s->driver_version, NULL);
    if (e == CL_SUCCESS)
        e = clGetPlatformInfo(s->platform, CL_PLATFORM_VERSION, sizeof s->platform_version, s->platform_version,
                              NULL);
    if (e != CL_SUCCESS) {
        ocl_close(ctx);
        return OCL_FAIL(ctx, e, "clGetDeviceInfo");
    }
    cl_device_fp_config fp = 0;
    if (clGetDeviceInfo(s->device, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp, NULL) == CL_SUCCESS)
        s->fma = (fp & CL_FP_FMA) != 0;
    /* FLASHATTN_OPENCL_TILES=gpu|cpu overrides the device type's choice: the tests run the GPU
     * kernels on PoCL this way, since CI has no GPU */
    const char *tiles = getenv("FLASHATTN_OPENCL_TILES");
    s->gpu_tiles = tiles && strcmp(tiles, "gpu") == 0   ? 1
                   : tiles && strcmp(tiles, "cpu") == 0 ? 0
                                                        : (s->type & CL_DEVICE_TYPE_GPU) != 0;
    if (!parse_fwd_tile(&s->fwd_tile))
        s->fwd_tile.block_q = 0;
    size_t ext_len = 0;
    if (clGetDeviceInfo(s->device, CL_DEVICE_EXTENSIONS, 0, NULL, &ext_len) == CL_SUCCESS && ext_len) {
        char *ext = malloc(ext_len + 1);
        if (ext && clGetDeviceInfo(s->device, CL_DEVICE_EXTENSIONS, ext_len, ext, NULL) == CL_SUCCESS) {
            ext[ext_len] = '\0';
            s->nv_options = strstr(ext, "cl_nv_compiler_options") != NULL;
        }
        free(ext);
    }
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)s->platform, 0};
    s->context = clCreateContext(props, 1, &s->device, NULL, NULL, &e);
    if (e == CL_SUCCESS)
        s->queue = clCreateCommandQueue(s->context, s->device, 0, &e);
    if (e == CL_SUCCESS)
        s->dummy = clCreateBuffer(s->context, CL_MEM_READ_WRITE, 64, NULL, &e);
    if (e != CL_SUCCESS) {
        ocl_close(ctx);
        return OCL_FAIL(ctx, e, "clCreateContext / clCreateCommandQueue");
    }
    return FA_SUCCESS;
}

/* ---------------------------------------------------------------- memory */

/* The buffer holding [ptr, ptr + bytes), or NULL. */
static const ocl_buffer *find_buffer(const ocl_state *s, const void *ptr, size_t bytes)
{
    uintptr_t a = (uintptr_t)ptr;
    size_t lo = 0, hi = s->nbuffers;
    while (lo < hi) { /* the last buffer with base <= a */
        size_t mid = lo + (hi - lo) / 2;
        if (s->buffers[mid].base <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return NULL;
    const ocl_buffer *b = &s->buffers[lo - 1];
    if (a - b->base > b->bytes || bytes > b->bytes - (a - b->base))
        return NULL;
    return b;
}

static fa_status ocl_alloc(fa_context *ctx, size_t bytes, void **ptr)
{
    ocl_state *s = state(ctx);
    size_t size = bytes ? bytes : 1;
    if (s->nbuffers == s->cap_buffers) {
        size_t cap = s->cap_buffers ? 2 * s->cap_buffers : 16;
        ocl_buffer *nb = realloc(s->buffers, cap * sizeof *nb);
        if (!nb)
            return FA_ERROR(ctx, FA_ERR_OUT_OF_MEMORY, "fa_malloc: buffer table");
        s->buffers = nb;
        s->cap_buffers = cap;
    }
    /* address space only: PROT_NONE, no reserve, never touched */
    void *range = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (range == MAP_FAILED)
        return FA_ERROR(ctx, FA_ERR_OUT_OF_MEMORY, "fa_malloc: cannot reserve %zu bytes of address space (%s)",
                        size, strerror(errno));
    cl_int e;
    cl_mem mem = clCreateBuffer(s->context, CL_MEM_READ_WRITE, size, NULL, &e);
    if (e != CL_SUCCESS) {
        munmap(range, size);
        return OCL_FAIL(ctx, e, "clCreateBuffer");
    }
    size_t at = s->nbuffers;
    while (at > 0 && s->buffers[at - 1].base > (uintptr_t)range)
        --at;
    memmove(&s->buffers[at + 1], &s->buffers[at], (s->nbuffers - at) * sizeof *s->buffers);
    s->buffers[at] = (ocl_buffer){.base = (uintptr_t)range, .bytes = size, .mem = mem};
    s->nbuffers++;
    *ptr = range;
    return FA_SUCCESS;
}

static fa_status ocl_free(fa_context *ctx, void *ptr)
{
    ocl_state *s = state(ctx);
    for (size_t i = 0; i < s->nbuffers; ++i)
        if (s->buffers[i].base == (uintptr_t)ptr) {
            ocl_buffer b = s->buffers[i];
            memmove(&s->buffers[i], &s->buffers[i + 1], (s->nbuffers - i - 1) * sizeof *s->buffers);
            s->nbuffers--;
            /* the queue may still use it: OpenCL frees the memory once its commands are done */
            cl_int e = clReleaseMemObject(b.mem);
            munmap((void *)b.base, b.bytes);
            if (e != CL_SUCCESS)
                return OCL_FAIL(ctx, e, "clReleaseMemObject");
            return FA_SUCCESS;
        }
    return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "fa_free: %p was not returned by fa_malloc on this context", ptr);
}

static fa_status ocl_copy(fa_context *ctx, void *dst, const void *src, size_t bytes, fa_copy_kind kind)
{
    ocl_state *s = state(ctx);
    const ocl_buffer *bd = NULL, *bs = NULL;
    if (kind == FA_COPY_HOST_TO_DEVICE || kind == FA_COPY_DEVICE_TO_DEVICE)
        if (!(bd = find_buffer(s, dst, bytes)))
            return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "fa_memcpy: dst %p + %zu bytes is not inside an fa_malloc buffer",
                            dst, bytes);
    if (kind == FA_COPY_DEVICE_TO_HOST || kind == FA_COPY_DEVICE_TO_DEVICE)
        if (!(bs = find_buffer(s, src, bytes)))
            return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "fa_memcpy: src %p + %zu bytes is not inside an fa_malloc buffer",
                            src, bytes);
    switch (kind) {
    case FA_COPY_HOST_TO_DEVICE:
        OCL_TRY(ctx, clEnqueueWriteBuffer(s->queue, bd->mem, CL_TRUE, (uintptr_t)dst - bd->base, bytes, src, 0, NULL, NULL),
                "clEnqueueWriteBuffer");
        break;
    case FA_COPY_DEVICE_TO_HOST:
        OCL_TRY(ctx, clEnqueueReadBuffer(s->queue, bs->mem, CL_TRUE, (uintptr_t)src - bs->base, bytes, dst, 0, NULL, NULL),
                "clEnqueueReadBuffer");
        break;
    case FA_COPY_DEVICE_TO_DEVICE:
        OCL_TRY(ctx, clEnqueueCopyBuffer(s->queue, bs->mem, bd->mem, (uintptr_t)src - bs->base, (uintptr_t)dst - bd->base,
                                         bytes, 0, NULL, NULL),
                "clEnqueueCopyBuffer");
        OCL_TRY(ctx, clFinish(s->queue), "clFinish"); /* the helper's contract: done on return */
        break;
    case FA_COPY_HOST_TO_HOST: memmove(dst, src, bytes); break;
    }
    return FA_SUCCESS;
}

static fa_status ocl_sync(fa_context *ctx)
{
    OCL_TRY(ctx, clFinish(state(ctx)->queue), "clFinish");
    return FA_SUCCESS;
}

/* ---------------------------------------------------------------- tiles */

/* The tile table: per device type and head-dim bound, B_r (query rows per work-group) and B_c
 * (keys per tile), the kernel kind (1: the work-group kernels of forward.cl and backward.cl, 0:
 * one work-item per tile, forward_vec.cl and backward_vec.cl, for CPU devices) and, for the GPU
 * forward, the work-item's block of S (tm x tn) and the head-dim columns per pass (dc). */
static const ocl_tile_row gpu_fwd_tiles[] = {
    /* 64 x 64, 4 x 4 per work-item: 256 work-items, 16 scores and 4 x d / 16 outputs each in
     * registers; Q^T and K^T in 32-column passes (17 KiB) then V in 64-column chunks through the
     * same region, P^T 17 KiB: 34 KiB of __local memory at every head dim */
    {.max_d = 256, .block_q = 64, .block_k = 64, .kernel = 1, .tm = 4, .tn = 4, .dc = 32, .maxreg = 128},
};
static const ocl_tile_row gpu_bwd_tiles[] = {
    /* the dK/dV kernel keeps 4 d floats per work-item; 32 x 64 tiles: 16 + 16 KiB of Q, dO and K, V */
    {.max_d = 64, .block_q = 32, .block_k = 64, .kernel = 1},
    /* 32 x 32: Q + dO 32 KiB, K + V 32 KiB */
    {.max_d = 128, .block_q = 32, .block_k = 32, .kernel = 1},
    /* 16 x 16 at d 256: 32 KiB each */
    {.max_d = 256, .block_q = 16, .block_k = 16, .kernel = 1},
};
/* CPU devices run the forward as fa_forward_vec (one work-item per query tile, float8 blocks) */
static const ocl_tile_row cpu_fwd_tiles[] = {
    /* d <= 64: 64 x 128 (Q, O, K^T, V and S: 128 KiB, a core's L2 share), as the CPU backend;
     * measured at seqlen 1024 on the 2-core EPYC: 31 ms against 42 (64 x 64) and 45 (32 x 64) */
    {.max_d = 64, .block_q = 64, .block_k = 128, .kernel = 0},
    /* d <= 128: 64 x 64 (144 KiB): 61 ms against 64 (64 x 128) and 76 (32 x 64) */
    {.max_d = 128, .block_q = 64, .block_k = 64, .kernel = 0},
    /* larger head dims: 32 x 32 keeps the tiles at 136 KiB at d 256 */
    {.max_d = 256, .block_q = 32, .block_k = 32, .kernel = 0},
};
/* and the backward as backward_vec.cl's kernels: 64 x 64 tiles at d <= 128 (the CPU backend's
 * backward tile at d 64), 32 x 32 above, so that the dK/dV kernel's tiles stay within PoCL's
 * 512 KiB of local memory. Measured on the 2-core EPYC after the float8/fma rework (fp32, 4 heads,
 * not causal; backward ms, single runs, about 5% noise): d 64 at seqlen 1024: 64 x 64 139,
 * 64 x 128 141, 32 x 64 141, 32 x 128 149; at 2048: 290 against 319 for 32 x 128; d 128 at
 * 1024 / 2048: 64 x 64 132 / 514, 128 x 64 130 / 513, 64 x 32 133 / 551, 32 x 64 143 / 581. None
 * is clearly better, so 64 x 64 stays (and the core's B_r <= d rules out 128 rows at d 64). */
static const ocl_tile_row cpu_bwd_tiles[] = {
    {.max_d = 128, .block_q = 64, .block_k = 64, .kernel = 0},
    {.max_d = 256, .block_q = 32, .block_k = 32, .kernel = 0},
};

#define OCL_ROWS(t) (sizeof(t) / sizeof((t)[0]))

/* The call sets a score modifier: its program is compiled with FA_SCORE_MOD=1. */
static int score_mod_on(const fa_problem *p)
{
    return p->softcap > 0.0f || p->alibi_slopes != NULL;
}

static ocl_tile_row tile_row(const ocl_state *s, const fa_problem *p)
{
    int gpu = s->gpu_tiles;
    if (!p->backward && gpu && s->fwd_tile.block_q) /* FLASHATTN_OPENCL_FWD_TILE */
        return s->fwd_tile;
    const ocl_tile_row *t = p->backward ? (gpu ? gpu_bwd_tiles : cpu_bwd_tiles) : (gpu ? gpu_fwd_tiles : cpu_fwd_tiles);
    size_t n = p->backward ? (gpu ? OCL_ROWS(gpu_bwd_tiles) : OCL_ROWS(cpu_bwd_tiles))
                           : (gpu ? OCL_ROWS(gpu_fwd_tiles) : OCL_ROWS(cpu_fwd_tiles));
    size_t i = 0;
    while (i + 1 < n && p->d > t[i].max_d)
        ++i;
    return t[i];
}

/* FLASHATTN_OPENCL_FWD_TILE=bm,bn,tm,tn,dc replaces the GPU forward's row (for tuning; the
 * benchmarks name it where they use it). Returns 0 when the variable is unset or malformed. */
static int parse_fwd_tile(ocl_tile_row *out)
{
    const char *v = getenv("FLASHATTN_OPENCL_FWD_TILE");
    long long bm, bn, tm, tn, dc;
    if (!v || sscanf(v, "%lld,%lld,%lld,%lld,%lld", &bm, &bn, &tm, &tn, &dc) != 5)
        return 0;
    if (bm < 32 || bn < 32 || tm < 4 || tn < 4 || dc < 4 || bm % tm || bn % tn || tm % 4 || tn % 4 || dc % 4 ||
        bm > 256 || bn > 256)
        return 0;
    *out = (ocl_tile_row){.max_d = 256, .block_q = bm, .block_k = bn, .kernel = 1, .tm = tm, .tn = tn, .dc = dc,
                          .maxreg = 32768 / (bm / tm * bn / tn) >= 255 ? 0 : 32768 / (bm / tm * bn / tn)};
    return 1;
}

/* The core plans (and builds block lists) at exactly the table's tile: M is made large enough
 * that the paper's formula never binds below the table, except B_r = min(.., d) for small d
 * (then the kernel is compiled for that smaller B_r). */
static void ocl_tile_limits(const fa_context *ctx, const fa_problem *p, fa_tile_limits *out)
{
    ocl_tile_row t = tile_row(state(ctx), p);
    int64_t small = t.block_q < t.block_k ? t.block_q : t.block_k;
    out->onchip_bytes = 16 * t.block_q * t.block_k * (p->d > 0 ? p->d : 1);
    out->min_block = small;
    out->max_block_q = t.block_q;
    out->max_block_k = t.block_k;
    out->multiple = small;
}

/* The kernel kind for the planned tile: the table's, except that the vec kernels need B_r a
 * multiple of 4 and B_c of 16 (the work-group kernels take any planned tile). */
static int kernel_kind(const ocl_state *s, const fa_problem *p)
{
    ocl_tile_row t = tile_row(s, p);
    if (t.kernel == 0)
        return p->block_q % 4 == 0 && p->block_k % 16 == 0 ? 0 : 1;
    return 1;
}

/* The GPU forward's work-item block for the planned tile: the table's when the tile is the
 * table's, else 4 x 4 in 32-column passes (a tile of at least 32 x 32 keeps its kernel valid). */
static ocl_tile_row fwd_block(const ocl_state *s, const fa_problem *p)
{
    ocl_tile_row t = tile_row(s, p);
    if (t.block_q != p->block_q || t.block_k != p->block_k || t.tm == 0)
        t = (ocl_tile_row){.block_q = p->block_q, .block_k = p->block_k, .kernel = 1, .tm = 4, .tn = 4, .dc = 32,
                           .maxreg = 128};
    return t;
}

static fa_status ocl_choose(const fa_context *ctx, const fa_problem *p, fa_variant *out)
{
    if (p->out_dtype != p->dtype)
        return FA_ERROR((fa_context *)ctx, FA_ERR_UNSUPPORTED,
                        "opencl: fp32 outputs from %s inputs are not supported (the cpu and cuda backends have them)",
                        fa_dtype_name(p->dtype));
    const ocl_state *s = state(ctx);
    if (p->d > 256)
        return FA_ERROR((fa_context *)ctx, FA_ERR_UNSUPPORTED, "opencl: head dim %lld > 256", (long long)p->d);
    if (p->seqlen_q > INT32_MAX || p->seqlen_k > INT32_MAX) /* the kernels index within a sequence in 32 bits */
        return FA_ERROR((fa_context *)ctx, FA_ERR_UNSUPPORTED, "opencl: sequences longer than %d tokens",
                        (int)INT32_MAX);
    int kind = kernel_kind(s, p);
    int64_t wider = p->block_q > p->block_k ? p->block_q : p->block_k;
    int64_t dv = (p->d + 15) / 16 * 16;
    int64_t group, local;
    if (p->backward) { /* the larger of the dQ (B_r) and dK/dV (B_c) kernels, their larger pair of
                        * tiles plus LSE and D; backward_vec.cl: dK/dV holds Q and dO, K^T, V^T, a
                        * row buffer, dK and dV, dQ holds Q, dO, dQ, K^T, V^T and K, both P, dS and
                        * Z (B_r x B_c each) */
        int64_t vec_tiles = 2 * p->block_q + 5 * p->block_k > 3 * p->block_q + 3 * p->block_k
                                ? 2 * p->block_q + 5 * p->block_k
                                : 3 * p->block_q + 3 * p->block_k;
        group = kind ? wider : 1;
        local = kind ? 4 * (2 * p->d * wider + 2 * p->block_q) : 4 * (vec_tiles * dv + 3 * p->block_q * p->block_k);
    } else if (kind) { /* forward.cl: region A (Q and K passes; V chunks) and P^T */
        ocl_tile_row t = fwd_block(s, p);
        if (p->block_q < 32 || p->block_k < 32 || p->block_q % t.tm || p->block_k % t.tn ||
            (t.dc + 4) * (p->block_q + p->block_k) / p->block_k < 4 * (p->block_k / t.tn))
            return FA_ERROR((fa_context *)ctx, FA_ERR_UNSUPPORTED,
                            "opencl: forward tile %lld x %lld with %lld x %lld per work-item and %lld columns per "
                            "pass is not a shape forward.cl takes",
                            (long long)p->block_q, (long long)p->block_k, (long long)t.tm, (long long)t.tn,
                            (long long)t.dc);
        group = (p->block_q / t.tm) * (p->block_k / t.tn);
        local = 4 * ((t.dc + 4) * (p->block_q + p->block_k) + p->block_k * (p->block_q + 4));
    } else {
        group = 1;
        local = 4 * (2 * dv * (p->block_k + p->block_q) + p->block_q * p->block_k);
    }
    if ((size_t)group > s->max_group || (cl_ulong)local > s->local_bytes)
        return FA_ERROR((fa_context *)ctx, FA_ERR_UNSUPPORTED,
                        "opencl: tile %lld x %lld at d %lld needs %lld work-items and %lld bytes of local memory; "
                        "the device has %zu and %llu",
                        (long long)p->block_q, (long long)p->block_k, (long long)p->d, (long long)group,
                        (long long)local, s->max_group, (unsigned long long)s->local_bytes);
    snprintf(out->name, sizeof out->name, "opencl-%s-%s-d%lld-b%lldx%lld-%s%lld%s", p->backward ? "bwd" : "fwd",
             fa_dtype_name(p->dtype), (long long)p->d, (long long)p->block_q, (long long)p->block_k,
             kind ? "wg" : "vec", (long long)group, score_mod_on(p) ? "-scoremod" : "");
    out->kernel = kind;
    return FA_SUCCESS;
}

/* ---------------------------------------------------------------- program cache */

static uint64_t fnv1a(uint64_t h, const void *data, size_t n)
{
    const unsigned char *c = data;
    for (size_t i = 0; i < n; ++i) {
        h ^= c[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* The directory for program binaries: $FLASHATTN_CACHE_DIR/opencl, else
 * $XDG_CACHE_HOME/flashattn/opencl, else $HOME/.cache/flashattn/opencl; FLASHATTN_CACHE_DIR=off
 * disables the disk cache. Returns 0 when there is none. */
static int cache_dir(char *buf, size_t len)
{
    const char *v = getenv("FLASHATTN_CACHE_DIR");
    int n;
    if (v && strcmp(v, "off") == 0)
        return 0;
    if (v && *v)
        n = snprintf(buf, len, "%s/opencl", v);
    else if ((v = getenv("XDG_CACHE_HOME")) && *v)
        n = snprintf(buf, len, "%s/flashattn/opencl", v);
    else if ((v = getenv("HOME")) && *v)
        n = snprintf(buf, len, "%s/.cache/flashattn/opencl", v);
    else
        return 0;
    return n > 0 && (size_t)n < len;
}

static void make_dirs(char *path)
{
    for (char *c = path + 1; *c; ++c)
        if (*c == '/') {
            *c = '\0';
            mkdir(path, 0755);
            *c = '/';
        }
    mkdir(path, 0755);
}

static unsigned char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    unsigned char *data = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 && (data = malloc((size_t)n)) &&
        fread(data, 1, (size_t)n, f) != (size_t)n) {
        free(data);
        data = NULL;
    }
    fclose(f);
    *len = data ? (size_t)n : 0;
    return data;
}

/* Best effort: the cache only saves time, so a failure to write it is not an error. Written to a
 * temporary name and renamed, so a concurrent reader never sees half a file. */
static void save_binary(cl_program prog, const char *dir, const char *path)
{
    size_t size = 0;
    if (clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL) != CL_SUCCESS || size == 0)
        return;
    unsigned char *bin = malloc(size);
    if (!bin)
        return;
    unsigned char *bins[1] = {bin};
    if (clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof bins, bins, NULL) == CL_SUCCESS) {
        char tmp[4300], d[4096];
        snprintf(d, sizeof d, "%s", dir);
        make_dirs(d);
        if (snprintf(tmp, sizeof tmp, "%.4200s.%ld.tmp", path, (long)getpid()) >= (int)sizeof tmp) {
            free(bin);
            return;
        }
        FILE *f = fopen(tmp, "wb");
        if (f) {
            int ok = fwrite(bin, 1, size, f) == size;
            ok = (fclose(f) == 0) && ok;
            if (!ok || rename(tmp, path) != 0)
                remove(tmp);
        }
    }
    free(bin);
}

static fa_status build_failed(fa_context *ctx, const ocl_state *s, cl_program prog, cl_int e, const char *options)
{
    char log[400] = "";
    size_t n = 0;
    clGetProgramBuildInfo(prog, s->device, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, &n);
    log[sizeof log - 1] = '\0';
    return FA_ERROR(ctx, FA_ERR_BACKEND, "clBuildProgram: %s (%s): %s", cl_error_name(e), options, log);
}

/* The program compiled for these options on this context's device: from the context's list,
 * else from a cached binary, else from the embedded source (then cached). */
static fa_status get_program(fa_context *ctx, const fa_problem *p, int kind, ocl_program **out)
{
    ocl_state *s = state(ctx);
    char options[320];
    int kernels = p->backward ? (kind ? 3 : 4) : kind ? 1 : 2;
    int n = snprintf(options, sizeof options, "-cl-std=CL1.2 -DFA_KERNELS=%d -DFA_DTYPE=%d -DFA_D=%lld -DFA_BM=%lld -DFA_BN=%lld -DFA_UNROLL=%d",
                     kernels, (int)p->dtype, (long long)p->d, (long long)p->block_q, (long long)p->block_k,
                     (s->type & CL_DEVICE_TYPE_GPU) != 0);
    if (kernels == 1) {
        ocl_tile_row t = fwd_block(s, p);
        n += snprintf(options + n, sizeof options - (size_t)n, " -DFA_TM=%lld -DFA_TN=%lld -DFA_DC=%lld",
                      (long long)t.tm, (long long)t.tn, (long long)t.dc);
        /* two work-groups of 256 per SM instead of one: the kernel has no reqd_work_group_size,
         * so the cap reaches ptxas */
        if (s->nv_options && t.maxreg)
            n += snprintf(options + n, sizeof options - (size_t)n, " -cl-nv-maxrregcount=%lld", (long long)t.maxreg);
    }
    if (!kind && s->fma) /* only the CPU kernels read it: the GPU programs' options stay as they were */
        n += snprintf(options + n, sizeof options - (size_t)n, " -DFA_FMA=1");
    if (score_mod_on(p)) /* a second program: the plain one is compiled without the modifiers */
        n += snprintf(options + n, sizeof options - (size_t)n, " -DFA_SCORE_MOD=1");
    /* FLASHATTN_OPENCL_OPTIONS: more compiler options, for tuning (for example NVIDIA's
     * -cl-nv-verbose -cl-nv-maxrregcount=N); they are part of the program cache's key */
    const char *extra = getenv("FLASHATTN_OPENCL_OPTIONS");
    if (extra && *extra && (size_t)n + strlen(extra) + 2 < sizeof options)
        snprintf(options + n, sizeof options - (size_t)n, " %s", extra);
    for (int i = 0; i < s->nprograms; ++i)
        if (strcmp(s->programs[i].options, options) == 0) {
            *out = &s->programs[i];
            return FA_SUCCESS;
        }
    if (s->nprograms == OCL_MAX_PROGRAMS) /* many shapes in one context: start over */
        release_programs(s);

    uint64_t key = 0xcbf29ce484222325ull;
    const char *parts[] = {fa_opencl_source, options, s->device_name, s->device_version, s->driver_version,
                           s->platform_version};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; ++i)
        key = fnv1a(key, parts[i], strlen(parts[i]) + 1);
    char dir[4096], path[4200];
    int cached = cache_dir(dir, sizeof dir);
    if (cached)
        snprintf(path, sizeof path, "%s/%016llx.bin", dir, (unsigned long long)key);

    cl_program prog = NULL;
    cl_int e = CL_SUCCESS;
    size_t blen = 0;
    unsigned char *bin = cached ? read_file(path, &blen) : NULL;
    if (bin) {
        const unsigned char *bins[1] = {bin};
        cl_int bstatus;
        prog = clCreateProgramWithBinary(s->context, 1, &s->device, &blen, bins, &bstatus, &e);
        free(bin);
        if (e == CL_SUCCESS && bstatus == CL_SUCCESS)
            e = clBuildProgram(prog, 1, &s->device, options, NULL, NULL);
        if (e != CL_SUCCESS || bstatus != CL_SUCCESS) { /* stale or foreign: rebuild from source */
            if (prog)
                clReleaseProgram(prog);
            prog = NULL;
        }
    }
    if (!prog) {
        const char *src = fa_opencl_source;
        size_t len = fa_opencl_source_len;
        prog = clCreateProgramWithSource(s->context, 1, &src, &len, &e);
        if (e != CL_SUCCESS)
            return OCL_FAIL(ctx, e, "clCreateProgramWithSource");
        e = clBuildProgram(prog, 1, &s->device, options, NULL, NULL);
        if (e != CL_SUCCESS) {
            fa_status st = build_failed(ctx, s, prog, e, options);
            clReleaseProgram(prog);
            return st;
        }
        if (getenv("FLASHATTN_OPENCL_LOG")) { /* the compiler's report, e.g. NVIDIA's register counts */
            size_t ln = 0;
            clGetProgramBuildInfo(prog, s->device, CL_PROGRAM_BUILD_LOG, 0, NULL, &ln);
            char *log = ln ? malloc(ln + 1) : NULL;
            if (log && clGetProgramBuildInfo(prog, s->device, CL_PROGRAM_BUILD_LOG, ln, log, NULL) == CL_SUCCESS) {
                log[ln] = '\0';
                fprintf(stderr, "flashattn opencl build (%s):\n%s\n", options, log);
            }
            free(log);
        }
        if (cached)
            save_binary(prog, dir, path);
    }
    ocl_program *pr = &s->programs[s->nprograms];
    memset(pr, 0, sizeof *pr);
    snprintf(pr->options, sizeof pr->options, "%s", options);
    pr->program = prog;
    if (kernels == 1)
        pr->forward = clCreateKernel(prog, "fa_forward", &e);
    if (kernels == 2)
        pr->forward_vec = clCreateKernel(prog, "fa_forward_vec", &e);
    if (kernels >= 3) {
        pr->dsum = clCreateKernel(prog, "fa_backward_dsum", &e);
        if (e == CL_SUCCESS)
            pr->dkdv = clCreateKernel(prog, kernels == 3 ? "fa_backward_dkdv" : "fa_backward_dkdv_vec", &e);
        if (e == CL_SUCCESS)
            pr->dq = clCreateKernel(prog, kernels == 3 ? "fa_backward_dq" : "fa_backward_dq_vec", &e);
    }
    s->nprograms++;
    if (e != CL_SUCCESS)
        return OCL_FAIL(ctx, e, "clCreateKernel");
    *out = pr;
    return FA_SUCCESS;
}

/* ---------------------------------------------------------------- launches */

/* What one call binds besides the tensors: the parameter block and the block-sparse data, as
 * temporary buffers released after the enqueue (OpenCL keeps them alive until the kernels ran). */
typedef struct call_args {
    cl_long prm[FA_P_COUNT];
    cl_mem mem[FA_T_COUNT];
    cl_mem cu_q, cu_k;
    cl_mem alibi; /* the slopes' buffer (the user's memory) or the dummy */
    cl_mem params, bits, row_ptr, col, cls, dsum;
} call_args;

static void call_release(call_args *a)
{
    cl_mem all[] = {a->params, a->bits, a->row_ptr, a->col, a->cls, a->dsum};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i)
        if (all[i])
            clReleaseMemObject(all[i]);
}

/* A buffer holding bytes from src (or uninitialised when src is NULL); an empty one gets 4 bytes,
 * since OpenCL has no zero-sized buffers (the kernels never read them). */
static fa_status upload(fa_context *ctx, const void *src, size_t bytes, cl_mem *out)
{
    cl_int e;
    if (src && bytes)
        *out = clCreateBuffer(state(ctx)->context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bytes, (void *)src, &e);
    else
        *out = clCreateBuffer(state(ctx)->context, CL_MEM_READ_WRITE, bytes ? bytes : 4, NULL, &e);
    if (e != CL_SUCCESS)
        return OCL_FAIL(ctx, e, "clCreateBuffer");
    return FA_SUCCESS;
}

/* A tensor's cl_mem and element offset; the whole extent it addresses must lie in the buffer. */
static fa_status bind_view(fa_context *ctx, const fa_problem *p, const fa_view *v, int t, size_t elem, int64_t rows,
                           int64_t heads, int64_t cols, call_args *a)
{
    ocl_state *s = state(ctx);
    cl_long *slot = &a->prm[FA_P_TENSORS + 4 * t];
    slot[1] = v->sb;
    slot[2] = v->ss;
    slot[3] = v->sh;
    a->mem[t] = s->dummy;
    slot[0] = 0;
    if (!v->data)
        return FA_SUCCESS;
    int64_t batches = p->varlen ? 1 : p->batch;
    int64_t last = (batches - 1) * v->sb + (rows - 1) * v->ss + (heads - 1) * v->sh + cols - 1;
    if (batches < 1 || rows < 1 || heads < 1)
        last = 0;
    const ocl_buffer *b = find_buffer(s, v->data, (size_t)(last + 1) * elem);
    static const char *const names[] = {"q", "k", "v", "o", "lse", "dout", "dq", "dk", "dv"};
    if (!b)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG,
                        "%s: %p and its %lld elements are not inside one fa_malloc buffer of this context", names[t],
                        v->data, (long long)(last + 1));
    size_t off = (uintptr_t)v->data - b->base;
    if (off % elem)
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "%s: data is not aligned to its %zu-byte elements", names[t], elem);
    slot[0] = (cl_long)(off / elem);
    a->mem[t] = b->mem;
    return FA_SUCCESS;
}

static fa_status bind_cu(fa_context *ctx, const fa_problem *p, const int32_t *cu, cl_mem *mem, cl_long *off)
{
    ocl_state *s = state(ctx);
    *mem = s->dummy;
    *off = 0;
    if (!p->varlen)
        return FA_SUCCESS;
    const ocl_buffer *b = find_buffer(s, cu, sizeof(int32_t) * (size_t)(p->batch + 1));
    if (!b || ((uintptr_t)cu - b->base) % sizeof(int32_t))
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG, "cu_seqlens: %p is not an aligned pointer into an fa_malloc buffer",
                        (const void *)cu);
    *mem = b->mem;
    *off = (cl_long)(((uintptr_t)cu - b->base) / sizeof(int32_t));
    return FA_SUCCESS;
}

/* The ALiBi slopes' cl_mem and element offset: slopes[b * stride + h] for every sequence b and
 * query head h must lie in one buffer (the core validated the extent's arithmetic). */
static fa_status bind_alibi(fa_context *ctx, const fa_problem *p, call_args *a)
{
    ocl_state *s = state(ctx);
    a->alibi = s->dummy;
    if (!p->alibi_slopes)
        return FA_SUCCESS;
    int64_t count = p->alibi_stride ? (p->batch - 1) * p->alibi_stride + p->heads_q : p->heads_q;
    if (p->batch < 1)
        count = p->heads_q;
    const ocl_buffer *b = find_buffer(s, p->alibi_slopes, sizeof(float) * (size_t)count);
    if (!b || ((uintptr_t)p->alibi_slopes - b->base) % sizeof(float))
        return FA_ERROR(ctx, FA_ERR_INVALID_ARG,
                        "alibi_slopes: %p and its %lld floats are not an aligned range inside one fa_malloc buffer of "
                        "this context",
                        (const void *)p->alibi_slopes, (long long)count);
    a->alibi = b->mem;
    a->prm[FA_P_ALIBI] = 1;
    a->prm[FA_P_ALIBI_OFF] = (cl_long)(((uintptr_t)p->alibi_slopes - b->base) / sizeof(float));
    a->prm[FA_P_ALIBI_STRIDE] = p->alibi_stride;
    return FA_SUCCESS;
}

static fa_status prepare_args(fa_context *ctx, const fa_problem *p, call_args *a)
{
    memset(a, 0, sizeof *a);
    cl_long *q = a->prm;
    q[FA_P_BATCH] = p->batch;
    q[FA_P_HEADS_Q] = p->heads_q;
    q[FA_P_HEADS_KV] = p->heads_kv;
    q[FA_P_GROUP] = p->group;
    q[FA_P_SEQLEN_Q] = p->seqlen_q;
    q[FA_P_SEQLEN_K] = p->seqlen_k;
    q[FA_P_TOTAL_Q] = p->total_q;
    q[FA_P_VARLEN] = p->varlen;
    q[FA_P_CAUSAL] = p->causal;
    q[FA_P_WINDOW_LEFT] = p->window_left;
    q[FA_P_WINDOW_RIGHT] = p->window_right;
    q[FA_P_DROPOUT_THRESHOLD] = p->dropout_threshold;
    q[FA_P_SEED] = (cl_long)p->seed;
    q[FA_P_OFFSET] = (cl_long)p->offset;
    q[FA_P_HAS_LSE] = p->has_lse;
    uint32_t cap_bits;
    memcpy(&cap_bits, &p->softcap, sizeof cap_bits);
    q[FA_P_SOFTCAP] = (cl_long)cap_bits;
    size_t el = fa_dtype_size(p->dtype);
    int64_t rq = p->varlen ? p->total_q : p->seqlen_q, rk = p->varlen ? p->total_k : p->seqlen_k;
    fa_status st;
    if ((st = bind_view(ctx, p, &p->q, FA_T_Q, el, rq, p->heads_q, p->d, a)) ||
        (st = bind_view(ctx, p, &p->k, FA_T_K, el, rk, p->heads_kv, p->d, a)) ||
        (st = bind_view(ctx, p, &p->v, FA_T_V, el, rk, p->heads_kv, p->d, a)) ||
        (st = bind_view(ctx, p, &p->o, FA_T_O, el, rq, p->heads_q, p->d, a)) ||
        (st = bind_view(ctx, p, p->has_lse || p->backward ? &p->lse : &(fa_view){0}, FA_T_LSE, sizeof(float), rq,
                        p->heads_q, 1, a)))
        return st;
    if (p->backward &&
        ((st = bind_view(ctx, p, &p->dout, FA_T_DO, el, rq, p->heads_q, p->d, a)) ||
         (st = bind_view(ctx, p, &p->dq, FA_T_DQ, el, rq, p->heads_q, p->d, a)) ||
         (st = bind_view(ctx, p, &p->dk, FA_T_DK, el, rk, p->heads_kv, p->d, a)) ||
         (st = bind_view(ctx, p, &p->dv, FA_T_DV, el, rk, p->heads_kv, p->d, a))))
        return st;
    if ((st = bind_cu(ctx, p, p->cu_q, &a->cu_q, &q[FA_P_CU_Q_OFF])) ||
        (st = bind_cu(ctx, p, p->cu_k, &a->cu_k, &q[FA_P_CU_K_OFF])) || (st = bind_alibi(ctx, p, a)))
        return st;
    if (p->block_mask && p->lists) {
        const fa_block_mask *bm = p->block_mask;
        const fa_block_lists *l = p->lists;
        q[FA_P_BLOCK_MASK] = 1;
        q[FA_P_BM_HEADS] = bm->heads;
        q[FA_P_BM_ROWS] = bm->rows;
        q[FA_P_BM_COLS] = bm->cols;
        q[FA_P_BM_BQ] = bm->block_q;
        q[FA_P_BM_BK] = bm->block_k;
        q[FA_P_BL_HEADS] = l->heads;
        q[FA_P_BL_NQ] = l->nq;
        if ((st = upload(ctx, bm->bits, (size_t)(bm->heads * bm->rows * bm->cols), &a->bits)) ||
            (st = upload(ctx, l->row_ptr, sizeof(int64_t) * (size_t)(l->heads * l->nq + 1), &a->row_ptr)) ||
            (st = upload(ctx, l->col, sizeof(int32_t) * (size_t)l->nnz, &a->col)) ||
            (st = upload(ctx, l->cls, (size_t)l->nnz, &a->cls)))
            return st;
    }
    return upload(ctx, a->prm, sizeof a->prm, &a->params);
}

static cl_mem or_dummy(const ocl_state *s, cl_mem m)
{
    return m ? m : s->dummy;
}

/* Sets a kernel's arguments in order; every value is a cl_mem or a float, as listed in `kinds`
 * ('m' or 'f'). */
static cl_int set_args(cl_kernel k, const char *kinds, const void *const *values)
{
    for (cl_uint i = 0; kinds[i]; ++i) {
        cl_int e = clSetKernelArg(k, i, kinds[i] == 'm' ? sizeof(cl_mem) : sizeof(float), values[i]);
        if (e != CL_SUCCESS)
            return e;
    }
    return CL_SUCCESS;
}

static fa_status launch(fa_context *ctx, cl_kernel k, const char *name, int64_t groups, int64_t group_size,
                        int64_t heads, int64_t batch)
{
    if (groups <= 0 || heads <= 0 || batch <= 0)
        return FA_SUCCESS;
    size_t global[3] = {(size_t)(groups * group_size), (size_t)heads, (size_t)batch};
    size_t local[3] = {(size_t)group_size, 1, 1};
    OCL_TRY(ctx, clEnqueueNDRangeKernel(state(ctx)->queue, k, 3, NULL, global, local, 0, NULL, NULL), name);
    return FA_SUCCESS;
}

static fa_status ocl_forward(fa_context *ctx, const fa_problem *p, const fa_variant *v)
{
    if (p->batch == 0 || p->seqlen_q == 0)
        return FA_SUCCESS;
    ocl_state *s = state(ctx);
    ocl_program *pr;
    fa_status st = get_program(ctx, p, v->kernel, &pr);
    if (st != FA_SUCCESS)
        return st;
    call_args a;
    st = prepare_args(ctx, p, &a);
    if (st == FA_SUCCESS) {
        cl_mem bits = or_dummy(s, a.bits), rp = or_dummy(s, a.row_ptr), col = or_dummy(s, a.col), cls = or_dummy(s, a.cls);
        float scale = p->scale, drop = p->dropout_scale;
        const void *vals[] = {&a.params, &scale, &drop, &a.mem[FA_T_Q], &a.mem[FA_T_K], &a.mem[FA_T_V], &a.mem[FA_T_O],
                              &a.mem[FA_T_LSE], &a.cu_q, &a.cu_k, &bits, &rp, &col, &cls, &a.alibi};
        cl_kernel k = v->kernel ? pr->forward : pr->forward_vec;
        cl_int e = set_args(k, "mffmmmmmmmmmmmm", vals);
        if (e != CL_SUCCESS)
            st = OCL_FAIL(ctx, e, "clSetKernelArg(fa_forward)");
        else {
            int64_t group = 1;
            if (v->kernel) {
                ocl_tile_row t = fwd_block(s, p);
                group = (p->block_q / t.tm) * (p->block_k / t.tn);
            }
            st = launch(ctx, k, v->kernel ? "clEnqueueNDRangeKernel(fa_forward)" : "clEnqueueNDRangeKernel(fa_forward_vec)",
                        (p->seqlen_q + p->block_q - 1) / p->block_q, group, p->heads_q, p->batch);
        }
    }
    call_release(&a);
    if (st == FA_SUCCESS)
        OCL_TRY(ctx, clFlush(s->queue), "clFlush");
    return st;
}

static fa_status ocl_backward(fa_context *ctx, const fa_problem *p, const fa_variant *v)
{
    if (p->batch == 0)
        return FA_SUCCESS;
    ocl_state *s = state(ctx);
    ocl_program *pr;
    fa_status st = get_program(ctx, p, v->kernel, &pr);
    if (st != FA_SUCCESS)
        return st;
    call_args a;
    st = prepare_args(ctx, p, &a);
    if (st == FA_SUCCESS)
        st = upload(ctx, NULL, sizeof(float) * (size_t)(p->total_q * p->heads_q), &a.dsum);
    if (st == FA_SUCCESS) {
        cl_mem bits = or_dummy(s, a.bits), rp = or_dummy(s, a.row_ptr), col = or_dummy(s, a.col), cls = or_dummy(s, a.cls);
        float scale = p->scale, drop = p->dropout_scale;
        const void *vd[] = {&a.params, &a.mem[FA_T_O], &a.mem[FA_T_DO], &a.dsum, &a.cu_q, &a.cu_k};
        const void *vkv[] = {&a.params, &scale, &drop, &a.mem[FA_T_Q], &a.mem[FA_T_K], &a.mem[FA_T_V], &a.mem[FA_T_DO],
                             &a.mem[FA_T_LSE], &a.dsum, &a.mem[FA_T_DK], &a.mem[FA_T_DV], &a.cu_q, &a.cu_k, &bits,
                             &rp, &col, &cls, &a.alibi};
        const void *vq[] = {&a.params, &scale, &drop, &a.mem[FA_T_Q], &a.mem[FA_T_K], &a.mem[FA_T_V], &a.mem[FA_T_DO],
                            &a.mem[FA_T_LSE], &a.dsum, &a.mem[FA_T_DQ], &a.cu_q, &a.cu_k, &bits, &rp, &col, &cls,
                            &a.alibi};
        cl_int e = set_args(pr->dsum, "mmmmmm", vd);
        if (e == CL_SUCCESS)
            e = set_args(pr->dkdv, "mffmmmmmmmmmmmmmmm", vkv);
        if (e == CL_SUCCESS)
            e = set_args(pr->dq, "mffmmmmmmmmmmmmmm", vq);
        int64_t nq = (p->seqlen_q + p->block_q - 1) / p->block_q, nk = (p->seqlen_k + p->block_k - 1) / p->block_k;
        if (e != CL_SUCCESS)
            st = OCL_FAIL(ctx, e, "clSetKernelArg(backward)");
        else if ((st = launch(ctx, pr->dsum, "clEnqueueNDRangeKernel(fa_backward_dsum)", nq, p->block_q, p->heads_q,
                              p->batch)) == FA_SUCCESS &&
                 (st = launch(ctx, pr->dkdv, "clEnqueueNDRangeKernel(fa_backward_dkdv)", nk, v->kernel ? p->block_k : 1,
                              p->heads_kv, p->batch)) == FA_SUCCESS)
            st = launch(ctx, pr->dq, "clEnqueueNDRangeKernel(fa_backward_dq)", nq, v->kernel ? p->block_q : 1,
                        p->heads_q, p->batch);
    }
    call_release(&a);
    if (st == FA_SUCCESS)
        OCL_TRY(ctx, clFlush(s->queue), "clFlush");
    return st;
}

static int64_t ocl_workspace(const fa_context *ctx, const fa_problem *p)
{
    (void)ctx;
    int64_t bytes = FA_P_COUNT * 8;
    if (p->backward)
        bytes += p->total_q * p->heads_q * 4; /* D */
    if (p->block_mask) {
        const fa_block_mask *bm = p->block_mask;
        int64_t nq = (p->seqlen_q + p->block_q - 1) / p->block_q, nk = (p->seqlen_k + p->block_k - 1) / p->block_k;
        bytes += bm->heads * bm->rows * bm->cols + bm->heads * (nq * 8 + nq * nk * 5);
    }
    return bytes;
}

const fa_backend fa_backend_opencl = {
    .name = "opencl",
    /* Not in the default chain: the table's flag is per backend, and a CPU-only platform (PoCL)
     * must not win over the native CPU backend. OpenCL runs when asked for by name. */
    .is_gpu = 0,
    .device_count = ocl_device_count,
    .device_name = ocl_device_name,
    .capabilities = ocl_capabilities,
    .open = ocl_open,
    .close = ocl_close,
    .tile_limits = ocl_tile_limits,
    .choose = ocl_choose,
    .forward = ocl_forward,
    .backward = ocl_backward,
    .workspace = ocl_workspace,
    .alloc = ocl_alloc,
    .free = ocl_free,
    .copy = ocl_copy,
    .sync = ocl_sync,
    .set_stream = NULL, // optional: one queue per context, owned by the backend
    .num_threads = NULL, // optional
};
