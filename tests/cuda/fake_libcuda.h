/* fake_libcuda.h: what the fake CUDA driver (fake_libcuda.c, a shared library standing in for
 * libcuda.so.1 under FLASHATTN_CUDA_DRIVER_LIBRARY) records of the calls made to it, and how a
 * test configures it. A test finds the state with dlsym(handle, "fake_cuda_state_get"). */
#ifndef FA_FAKE_LIBCUDA_H
#define FA_FAKE_LIBCUDA_H

#include <stddef.h>

#define FAKE_CUDA_MAX_ARGS 4

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
} fake_cuda_state;

#endif
