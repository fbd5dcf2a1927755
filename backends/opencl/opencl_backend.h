/* opencl_backend.h: what the OpenCL backend's files share: the per-context state (device, context,
 * queue, buffer table, compiled programs), the tile table's row, OpenCL error reporting, and the
 * functions one file calls in another. The backend table itself is in backend.c:
 *   runtime.c   platforms and devices, capabilities, opening and closing a context
 *   memory.c    device pointers and their cl_mem buffers, copies
 *   tiles.c     the tile table and the chooser
 *   programs.c  building the kernels and the program cache (in memory and on disk)
 *   launch.c    binding a call's arguments and launching the forward and backward kernels
 *   launch_kv.c fa_forward_kvcache's launches (kernels/decode.cl)
 *   loader.c    the OpenCL API itself, loaded at run time (ocl_api, loader.h) */
#ifndef FA_OPENCL_BACKEND_H
#define FA_OPENCL_BACKEND_H

#define CL_TARGET_OPENCL_VERSION 120
#include "internal.h"
#include "kernels/params.h"
#include "loader.h"

#include <CL/cl.h>

#define OCL_MAX_DEVICES 64
#define OCL_MAX_PROGRAMS 64
/* cl_nv_device_attribute_query's CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV (CL/cl_ext.h, not needed) */
#define OCL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV 0x4000

typedef struct ocl_buffer {
    uintptr_t base; /* start of the reserved address range the user sees */
    size_t bytes;
    cl_mem mem;
} ocl_buffer;

/* One row of the tile table (tiles.c). */
typedef struct ocl_tile_row {
    int64_t max_d, block_q, block_k;
    int kernel;
    int64_t tm, tn, dc, maxreg; /* maxreg: NVIDIA's register cap for the GPU kernels (0: none) */
    int64_t da; /* GPU backward: head-dim columns of dK, dV, dQ one work-group accumulates (0: all) */
} ocl_tile_row;

typedef struct ocl_program {
    char options[320];
    cl_program program;
    cl_kernel forward, forward_vec, forward_mma, dsum, dsink, dkdv, dq;
    cl_kernel kv_append, kv_decode, kv_combine; /* fa_forward_kvcache (decode.cl) */
} ocl_program;

typedef struct ocl_state {
    cl_platform_id platform;
    cl_device_id device;
    cl_context context;
    cl_command_queue queue;
    cl_device_type type;
    int gpu_tiles;          /* the GPU rows of the tile table and the work-group kernels */
    int nv_options;         /* the device takes NVIDIA's compiler options (cl_nv_compiler_options) */
    int nv_attributes;      /* cl_nv_device_attribute_query: the compute capability can be read */
    int nv_mma;             /* the matrix path runs (forward_mma.cl, backward_mma.cl, nv_mma.cl; runtime.c) */
    int nv_emulate;         /* ... with its instructions emulated in plain OpenCL C (FA_NV_EMULATE) */
    int fma;                /* CL_FP_FMA in the single-precision config: the CPU kernels use fma() (FA_FMA) */
    size_t max_group;
    cl_ulong local_bytes;
    char device_name[256], device_version[128], driver_version[128], platform_version[256];
    ocl_buffer *buffers; /* sorted by base */
    size_t nbuffers, cap_buffers;
    ocl_program programs[OCL_MAX_PROGRAMS];
    int nprograms;
    cl_mem dummy; /* bound where a kernel's optional buffer is absent */
} ocl_state;

static inline ocl_state *ocl_state_of(const fa_context *ctx)
{
    return (ocl_state *)ctx->priv;
}

/* errors (runtime.c): the status for an OpenCL error, with a message naming it */
const char *ocl_error_name(cl_int e);
fa_status ocl_fail_at(fa_context *ctx, cl_int e, const char *what, const char *file, int line);
#define OCL_FAIL(ctx, e, what) ocl_fail_at((ctx), (e), (what), __FILE__, __LINE__)

#define OCL_TRY(ctx, call, what)                                                                                   \
    do {                                                                                                           \
        cl_int e_ = (call);                                                                                        \
        if (e_ != CL_SUCCESS)                                                                                      \
            return OCL_FAIL((ctx), e_, (what));                                                                    \
    } while (0)

/* runtime.c */
fa_status ocl_device_count(int *count);
fa_status ocl_availability(int *count, char *why, size_t len);
fa_status ocl_device_name(int device, char *buf, size_t len);
void ocl_capabilities(fa_capabilities *caps);
fa_status ocl_open(fa_context *ctx, int device);
void ocl_close(fa_context *ctx);

/* memory.c */
const ocl_buffer *ocl_find_buffer(const ocl_state *s, const void *ptr, size_t bytes);
fa_status ocl_alloc(fa_context *ctx, size_t bytes, void **ptr);
fa_status ocl_free(fa_context *ctx, void *ptr);
fa_status ocl_copy(fa_context *ctx, void *dst, const void *src, size_t bytes, fa_copy_kind kind);
fa_status ocl_sync(fa_context *ctx);

/* tiles.c */
ocl_tile_row ocl_bwd_block(const ocl_state *s, const fa_problem *p);
ocl_tile_row ocl_mma_block(int64_t d);
int ocl_mma_bwd_buffers(const ocl_state *s, int64_t d, int kv);
int ocl_score_mod_on(const fa_problem *p);
ocl_tile_row ocl_fwd_block(const ocl_state *s, const fa_problem *p);
void ocl_tile_limits(const fa_context *ctx, const fa_problem *p, fa_tile_limits *out);
fa_status ocl_choose(const fa_context *ctx, const fa_problem *p, fa_variant *out);

/* programs.c */
fa_status ocl_get_program(fa_context *ctx, const fa_problem *p, int kind, ocl_program **out);
fa_status ocl_get_kv_program(fa_context *ctx, fa_dtype dtype, int64_t d, int64_t d_v, int mod, int sink,
                             ocl_program **out);
void ocl_release_programs(ocl_state *s);

/* launch.c */
fa_status ocl_forward(fa_context *ctx, const fa_problem *p, const fa_variant *v);
fa_status ocl_backward(fa_context *ctx, const fa_problem *p, const fa_variant *v);
int64_t ocl_workspace(const fa_context *ctx, const fa_problem *p);

/* launch_kv.c */
fa_status ocl_forward_kvcache(fa_context *ctx, const fa_kv_problem *kp);

#endif
