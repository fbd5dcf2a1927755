/* gpu_host.h: the host glue the CUDA and HIP backends share (their tables differ in the chooser
 * and the kernel families only): per-context state, runtime errors mapped to statuses, device
 * memory, copies, streams, the kernels' parameter block, the device copies of block-sparse lists
 * (gpu_host.c) and fa_forward_kvcache's host side (kv_host.c). Both .c files are compiled once per
 * runtime: into libflashattn against CUDA's, into the HIP module with FA_RUNTIME_HIP against
 * HIP's (runtime.h names the calls). Plain C. */
#ifndef FA_GPU_HOST_H
#define FA_GPU_HOST_H

#include "common/kv_params.h"
#include "host/runtime.h"
#include "internal.h"
#include "common/params.h"

#include <stddef.h>
#include <stdint.h>

/* Which kernels a context runs: the chooser's pick unless FLASHATTN_KERNELS names a family. */
typedef enum fa_gpu_kernels {
    FA_GPU_KERNELS_CHOOSER = 0,   /* the chooser's pick */
    FA_GPU_KERNELS_SIMT,          /* "simt": the SIMT family for everything */
    FA_GPU_KERNELS_MFMA_EMULATED, /* "mfma-emulated" (CUDA only): the HIP backend's choice on gfx90a, its
                                     MFMA forward emulated (mfma/mfma.cuh) */
    FA_GPU_KERNELS_SM90,          /* "sm90" (CUDA only): the chooser, with the Hopper wgmma forward for every
                                     call it has an instance for, dropout and block lists included (the
                                     chooser itself takes it only for calls with neither) */
    FA_GPU_KERNELS_SM80           /* "sm80" (CUDA only): the chooser without the Hopper path */
} fa_gpu_kernels;

typedef struct fa_gpu_state {
    fa_rt_stream own, stream; /* the context's stream, and the one calls run on (fa_set_stream) */
    fa_rt_prop prop;
    fa_gpu_kernels kernels;   /* read from FLASHATTN_KERNELS when the context opens */
    int kv_simt;              /* FLASHATTN_KERNELS=kv-simt: no tensor-core decode kernel */
    int kv_mma_four;          /* FLASHATTN_KERNELS=kv-mma-4-warps: that kernel with four warps a block */
    int kv_mla_sm90;          /* FLASHATTN_KERNELS=kv-mla-sm90: the Hopper MLA decode kernel where it fits */
    int sm80_bwd_narrow;      /* FLASHATTN_KERNELS=sm80-bwd-narrow: the sm80 d 256 backward on bwd_kernel's
                                 4-warp instance where the 8-warp one fits too (backend.c) */
    int dsum_zero;            /* FLASHATTN_KERNELS=dsum-zero: the fused backwards (sm80; sm90 at d 64 / 128)
                                 have dsum_kernel clear the dQ accumulator's rows (fa_gpu_params.dq_zero_cols)
                                 instead of a memset */
    int kv_mla_16_rows;       /* FLASHATTN_KERNELS=kv-mla-16-rows: MLA decode on the 16-row kernel only */
    int fwd_split;            /* FLASHATTN_KERNELS=fwd-split=N: a forward's keys in N splits wherever a split
                                 kernel takes the call (1: none); 0: the rule's count (split_rule.h) */
    int sm80_fwd_stages;      /* FLASHATTN_KERNELS=sm80-fwd-stages=N: the sm80 forward's K / V stages where
                                 rows are 16-byte aligned, 1 or 2; 0 (auto, the default): one where two
                                 do not fit a block or hold fewer blocks an SM (backend.c) */
    /* scratch the context keeps between calls (fa_gpu_scratch): its size, and the stream its last
     * user ran on */
    void *scratch;
    size_t scratch_bytes;
    fa_rt_stream scratch_stream;
    /* fa_forward_kvcache's fault record (kv_params.h) for calls checked on the device, allocated
     * by the first of them; fault_armed: such a call ran since fa_synchronize last read it */
    long long *fault;
    int fault_armed;
} fa_gpu_state;

static inline fa_gpu_state *fa_gpu_of(const fa_context *ctx)
{
    return (fa_gpu_state *)ctx->priv;
}

/* The runtime's error e as FA_ERR_OUT_OF_MEMORY or FA_ERR_BACKEND, with `what` and its name. */
fa_status fa_gpu_fail(fa_context *ctx, fa_rt_error e, const char *what);

#define FA_GPU_TRY(ctx, call)                                                                                      \
    do {                                                                                                           \
        fa_rt_error e_ = (call);                                                                                   \
        if (e_ != FA_RT(Success))                                                                                  \
            return fa_gpu_fail((ctx), e_, #call);                                                                  \
    } while (0)

/* Device copies of what the kernels read besides the tensors (block-mask bits and lists) and the
 * backward's workspace. */
typedef struct fa_gpu_buffers {
    void *bits, *row_ptr, *col, *cls, *dsum, *dq_accum;
} fa_gpu_buffers;

/* Device copies of block lists the context keeps (core/lists_cache.c): the mask's bits and the
 * lists' three arrays in one allocation. */
typedef struct fa_gpu_lists {
    void *base;
    const void *bits, *row_ptr, *col, *cls;
} fa_gpu_lists;

/* The backend's decode entries (fa_kv_forward and fa_kv_blocks_per_processor, or fa_hip_kv_*):
 * return the runtime's error. */
typedef struct fa_gpu_kv_entries {
    int (*forward)(const fa_gpu_kv_params *p, int dtype, int head_dim_bucket, int row_tile, int async_copy,
                   void *stream);
    int (*blocks_per_processor)(int dtype, int head_dim_bucket, int row_tile, int async_copy, int *blocks);
    /* the tensor-core kernel (NULL where the backend has none) */
    int (*forward_mma)(const fa_gpu_kv_params *p, int dtype, int head_dim_bucket, void *stream);
    int (*blocks_per_processor_mma)(int dtype, int head_dim_bucket, int warps, int one_token, int *blocks);
} fa_gpu_kv_entries;

/* fa_backend slots, shared by both tables */
fa_status fa_gpu_device_count(int *count);
fa_status fa_gpu_availability(int *count, char *why, size_t len);
fa_status fa_gpu_open(fa_context *ctx, int device);
void fa_gpu_close(fa_context *ctx);
fa_status fa_gpu_lists_upload(fa_context *ctx, fa_block_lists *l, const fa_block_mask *m);
void fa_gpu_lists_free(fa_context *ctx, fa_block_lists *l);
fa_status fa_gpu_alloc(fa_context *ctx, size_t bytes, void **ptr);
fa_status fa_gpu_free(fa_context *ctx, void *ptr);
fa_status fa_gpu_copy(fa_context *ctx, void *dst, const void *src, size_t bytes, fa_copy_kind kind);
fa_status fa_gpu_sync(fa_context *ctx);
fa_status fa_gpu_set_stream(fa_context *ctx, void *stream);

/* 1, with the reason in why, where p's grid would not launch: the attention kernels put the
 * sequences on the grid's z and the heads on its y, 65535 at most each. */
int fa_gpu_grid_refuses(const fa_problem *p, char *why, size_t len);

/* The tensors, sizes and options of p as the kernels receive them; block lists uploaded into cb
 * where the context keeps none (fa_gpu_release frees them after the kernels). */
fa_gpu_tensor fa_gpu_tensor_of(const fa_view *v);
fa_status fa_gpu_make_params(fa_context *ctx, const fa_problem *p, fa_gpu_params *kp, fa_gpu_buffers *cb);
fa_status fa_gpu_upload(fa_context *ctx, const void *src, size_t bytes, void **dst);
void fa_gpu_release(fa_context *ctx, fa_gpu_buffers *cb);
/* At least `bytes` of device memory kept by the context for the kernels of this call. */
fa_status fa_gpu_scratch(fa_context *ctx, size_t bytes, void **ptr);
int fa_gpu_scratch_usable(fa_context *ctx, size_t bytes);
int fa_gpu_capturing(fa_context *ctx);

/* One forward or backward call: fa_gpu_call_begin fills the kernels' parameter block (with the
 * backward's workspace: dq_accum_floats, the fp32 dQ accumulator a non-deterministic kernel adds
 * into, 0 for none) and makes the device copies; where run is set, the backend then launches its
 * kernel family on kp and stream; fa_gpu_call_end frees the copies and turns the launch's error
 * (the runtime's, as an int) into the call's status. After a failed begin there is nothing to end. */
typedef struct fa_gpu_call {
    fa_gpu_params kp;
    fa_gpu_buffers cb;
    void *stream;
    int run; /* 0: an empty problem, nothing to launch */
} fa_gpu_call;
fa_status fa_gpu_call_begin(fa_context *ctx, const fa_problem *p, int64_t dq_accum_floats, fa_gpu_call *call);
fa_status fa_gpu_call_end(fa_context *ctx, fa_gpu_call *call, int launch_error, const char *what);
/* fa_forward_kvcache on the backend's decode kernels (kv_host.c). */
fa_status fa_gpu_forward_kvcache(fa_context *ctx, const fa_kv_problem *kp, const fa_gpu_kv_entries *entry);

/* Tiles of the core's plans and block-sparse lists (64 x 64 for every family); onchip_bytes: the
 * shared memory one block may use. */
void fa_gpu_tile_limits(fa_tile_limits *out, int64_t onchip_bytes);
/* Bytes of the block-sparse device copies for tiles of `block` rows and keys. */
int64_t fa_gpu_mask_workspace(const fa_problem *p, int64_t block);

#endif /* FA_GPU_HOST_H */
