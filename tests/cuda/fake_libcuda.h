/* fake_libcuda.h: what the fake CUDA driver (fake_libcuda.c, a shared library standing in for
 * libcuda.so.1 under FLASHATTN_CUDA_DRIVER_LIBRARY) records of the calls made to it, and how a
 * test configures it. A test finds the state with dlsym(handle, "fake_cuda_state_get"). Device
 * memory is the host's (malloc), copies and memsets run at once, streams and events are counted
 * handles. */
#ifndef FA_FAKE_LIBCUDA_H
#define FA_FAKE_LIBCUDA_H

#include <stddef.h>

#define FAKE_CUDA_MAX_ARGS 4
#define FAKE_CUDA_MAX_DEVICES 2
#define FAKE_CUDA_LAUNCH_LOG 16

#define FAKE_CUDA_LAUNCH_LOG 16
#define FAKE_CUDA_TENSOR_MAP_LOG 8

/* one kernel launch: the name given to cuModuleGetFunction for its function, grid, block, dynamic
 * shared memory */
typedef struct fake_cuda_launch {
    char name[256];
    unsigned grid[3], block[3], shared_bytes;
} fake_cuda_launch;

/* one cuTensorMapEncodeTiled call's arguments (rank at most 5) */
typedef struct fake_cuda_tensor_map {
    int data_type;
    unsigned rank;
    void *address;
    unsigned long long dims[5], strides[4]; /* strides: rank - 1 of them */
    unsigned box[5], element_strides[5];
    int interleave, swizzle, l2_promotion, oob_fill;
} fake_cuda_tensor_map;

typedef struct fake_cuda_state {
    /* set by the test */
    int cc_major, cc_minor;           /* the device's compute capability */
    const char *fail_call;            /* a call that fails ("cuLaunchKernel"), or NULL */
    int fail_result;                  /* what it returns then */
    size_t arg_sizes[FAKE_CUDA_MAX_ARGS]; /* the kernel's parameter sizes, which the real driver reads
                                             from the module; 0 ends the list */
    /* recorded by the fake */
    int init_calls, retain_calls, load_calls, get_function_calls, launch_calls, unload_calls;
    size_t image_size;                /* the last module image's size, from its ELF header */
    char function_name[256];          /* the last name given to cuModuleGetFunction */
    unsigned grid[3], block[3], shared_bytes;
    void *stream;
    unsigned char args[FAKE_CUDA_MAX_ARGS][1024]; /* the last launch's arguments, arg_sizes bytes each */

    /* the devices, set by the test: how many (cuInit answers CUDA_ERROR_NO_DEVICE for 0; at most
     * FAKE_CUDA_MAX_DEVICES), named "Fake CUDA device <ordinal>", each with cc_major.cc_minor above
     * and these */
    int device_count;
    int multiprocessors, shared_optin; /* CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, ..._SHARED_MEMORY_PER_BLOCK_OPTIN */
    int shared_per_sm;                 /* CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR */
    size_t total_mem;
    int capture_status;                /* what cuStreamIsCapturing answers */
    unsigned static_shared_bytes;      /* every kernel's static shared memory: a launch whose dynamic
                                          shared memory exceeds 48 KB less it, unless
                                          cuFuncSetAttribute raised the kernel's limit that far, fails
                                          with CUDA_ERROR_INVALID_VALUE, as the driver's does */
    /* recorded by the fake */
    int current_device;                /* the device of the current context, -1 for none */
    int alloc_calls, free_calls, live_allocations, copy_calls, memset_calls, ctx_sync_calls;
    size_t last_copy_bytes;
    int streams_created, streams_destroyed, stream_syncs, stream_waits;
    unsigned last_stream_flags, last_event_flags;
    int events_created, events_destroyed, event_records;
    void *last_async_stream;           /* the stream of the last ...Async memory call */

    /* recorded by the fake: the last FAKE_CUDA_LAUNCH_LOG launches, oldest first (launch_log_len
     * of them, at most FAKE_CUDA_LAUNCH_LOG; launch_calls counts them all; a test sets
     * launch_log_len to 0 to start a sequence) */
    fake_cuda_launch launches[FAKE_CUDA_LAUNCH_LOG];
    int launch_log_len;
    int launches_at_memset;            /* launch_log_len when the last memset ran */
    /* recorded by cuTensorMapEncodeTiled (absent from a fake built with FAKE_CUDA_NO_TENSOR_MAP,
     * as from drivers older than CUDA 12): every call's arguments, the last
     * FAKE_CUDA_TENSOR_MAP_LOG of them oldest first; the map it fills holds the call's number
     * (1, 2, ...) in its first word */
    fake_cuda_tensor_map tensor_maps[FAKE_CUDA_TENSOR_MAP_LOG];
    int tensor_map_calls, tensor_map_log_len;
    char occupancy_name[256]; /* the function of the last occupancy query, as given to cuModuleGetFunction */
} fake_cuda_state;

#endif
