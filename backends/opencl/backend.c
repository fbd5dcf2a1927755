/* backend.c: the OpenCL backend's table. The pieces are in runtime.c (devices, contexts),
 * memory.c (device pointers), tiles.c (the tile table and the chooser), programs.c (kernel
 * builds and their cache) and launch.c (the launches); the kernels are the .cl files in kernels/;
 * loader.c opens the OpenCL ICD loader at run time (the library does not link libOpenCL).
 * Notes and measurements behind the choices: docs/backends/opencl.md. */
#include "opencl_backend.h"

const fa_backend fa_backend_opencl = {
    .name = "opencl",
    /* Not in the default chain: the table's flag is per backend, and a CPU-only platform (PoCL)
     * must not win over the native CPU backend. OpenCL runs when asked for by name. */
    .is_gpu = 0,
    .device_count = ocl_device_count,
    .availability = ocl_availability,
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
    .forward_kvcache = ocl_forward_kvcache,
    .kv_leftpad = 1,
};
