/* rtc_launch.h: kernels compiled at run time (host/rtc_compiler.h) and launched: fa_rtc_launch,
 * fa_rtc_function and fa_rtc_occupancy for any kernel by name expression, through the CUDA driver
 * API (host/driver_api.h, host/rtc_launch.c) or, in the HIP backend's module, through the HIP
 * runtime (backends/hip/rtc_launch.c, which defines fa_rtc_launch and fa_rtc_occupancy alike); and
 * over them, vendor-neutral, the SIMT family's forward and backward (host/rtc_simt.c) and
 * fa_forward_kvcache's decode sequence (host/rtc_decode.c) with the grids, blocks and arguments
 * of the compiled launchers (simt/forward.cuh, simt/backward.cuh, decode/decode.cuh; they read
 * common/simt_geometry.h and common/kv_geometry.h), so that a build without nvcc or hipcc runs the
 * same kernels. tests/cuda/rtc_launch_check.c runs them against a fake driver. Plain C. */
#ifndef FA_RTC_LAUNCH_H
#define FA_RTC_LAUNCH_H

#include "common/kv_params.h"
#include "common/params.h"
#include "host/driver_api.h"
#include "host/rtc_compiler.h"
#include "host/rtc_loaded.h" /* FA_RTC_NAME_MAX */
#include "host/why.h"
#include "common/simt_geometry.h" /* fa_simt_grid_ok */

#include <stddef.h>
#include <stdint.h>


/* How a kernel is launched: its family (host/rtc_sources.h: "simt", "sm80", "sm90", "decode",
 * "ring"), the architecture suffix ('a': compiled for sm_<major><minor>a, which the sm90 family's
 * wgmma and TMA need; 0: plain), the grid, the block's threads and its dynamic shared memory. */
typedef struct fa_rtc_launch_config {
    const char *family;
    char suffix;
    int64_t grid_x, grid_y, grid_z;
    unsigned threads;
    unsigned shared_bytes; /* the kernel's limit is raised to it before the launch (once per size) */
} fa_rtc_launch_config;

/* What each vendor's fa_rtc_launch checks first: a configuration with threads, arguments, and a
 * grid within the launch limits; FA_RTC_INVALID_ARG with why set otherwise. */
static inline fa_rtc_status fa_rtc_launch_config_check(const char *name_expression, const fa_rtc_launch_config *c,
                                                       void **args, char *why, size_t why_len)
{
    if (!c || c->threads == 0 || !args) {
        fa_why_set(why, why_len, "%s: no launch configuration, no threads or no arguments",
                   name_expression ? name_expression : "(no kernel name)");
        return FA_RTC_INVALID_ARG;
    }
    if (!fa_simt_grid_ok(c->grid_x, c->grid_y, c->grid_z)) {
        fa_why_set(why, why_len, "%s: the grid (%lld, %lld, %lld) exceeds the launch limits", name_expression,
                   (long long)c->grid_x, (long long)c->grid_y, (long long)c->grid_z);
        return FA_RTC_INVALID_ARG;
    }
    return FA_RTC_OK;
}

/* Launches the kernel name_expression names, of c's family, compiled for the current device's
 * exact architecture (HIP: its gcnArchName, c's suffix unused; CUDA: its compute capability (sm_<major><minor>, with c's suffix), on c's grid and block, on stream
 * (a CUstream; NULL for the legacy default stream), with args as cuLaunchKernel takes them (one
 * pointer per kernel parameter). The kernel runs in the current context, else in device 0's
 * primary context, which is then made current; its module is loaded once per (context, kernel)
 * and kept. A grid outside CUDA's limits is FA_RTC_INVALID_ARG. On failure, why names the step: no
 * driver, the driver call and its error string, or the compiler's reason. Thread-safe. */
fa_rtc_status fa_rtc_launch(const char *name_expression, const fa_rtc_launch_config *c, void *stream, void **args,
                            char *why, size_t why_len);

/* The function of that kernel in the current context (compiled and loaded as fa_rtc_launch does),
 * for the driver's questions about it. CUDA only. */
fa_rtc_status fa_rtc_function(const char *family, char suffix, const char *name_expression, fa_cu_function *function,
                              char *why, size_t why_len);

/* Blocks of that kernel (compiled for the current device, no suffix) with `threads` threads and
 * shared_bytes of dynamic shared memory resident on one multiprocessor at a time, into *blocks;
 * the kernel's shared memory limit is raised to shared_bytes first, as a launch would. */
fa_rtc_status fa_rtc_occupancy(const char *family, const char *name_expression, unsigned threads,
                               unsigned shared_bytes, int *blocks, char *why, size_t why_len);

/* Launches forward_kernel<S, D, MOD> (fa_rtc_launch) for the call p describes: S from dtype (0
 * fp32, 1 fp16, 2 bf16), D the head-dim bucket of the larger of p->d and p->d_v, MOD whether p has
 * a score modifier. A call with no query rows or no batch launches nothing. An unsupported dtype
 * or head dim is FA_RTC_INVALID_ARG. */
fa_rtc_status fa_rtc_launch_simt_forward(const fa_gpu_params *p, int dtype, void *stream, char *why, size_t why_len);

/* The SIMT backward for p on stream: dsum_kernel<S>, dsink_kernel (with p->sink and p->dsink),
 * dkdv_kernel<S, D, MOD> and dq_kernel<S, D, MOD>, each where it has blocks to run, in that order;
 * p->dsum is the workspace the backend provides. The first failure stops the sequence. */
fa_rtc_status fa_rtc_launch_simt_backward(const fa_gpu_params *p, int dtype, void *stream, char *why,
                                          size_t why_len);
/* dsink_kernel alone for p (after a dsum on the same stream). */
fa_rtc_status fa_rtc_launch_simt_dsink(const fa_gpu_params *p, void *stream, char *why, size_t why_len);

/* fa_forward_kvcache's kernels (host/rtc_decode.c): the SIMT decode instance (dtype 0 fp32, 1 fp16,
 * 2 bf16; bucket 64, 128 or 256; row tile FA_KV_ROW_TILE_SMALL or _LARGE; the cp.async ring where
 * asked and the build has it: FA_KV_HAVE_ASYNC) launched in decode.cuh's sequence (check, append,
 * decode, combine), and its blocks per multiprocessor. */
fa_rtc_status fa_rtc_launch_kv(const fa_gpu_kv_params *p, int dtype, int bucket, int row_tile, int async_copy,
                               void *stream, char *why, size_t why_len);
fa_rtc_status fa_rtc_kv_blocks(int dtype, int bucket, int row_tile, int async_copy, int *blocks, char *why,
                               size_t why_len);
/* The same with the tensor-core decode instance (fp16 / bf16, buckets 64 and 128, a ring of
 * FA_KV_MMA_STAGES stages; CUDA only). */
fa_rtc_status fa_rtc_launch_kv_mma(const fa_gpu_kv_params *p, int dtype, int bucket, void *stream, char *why,
                                   size_t why_len);
fa_rtc_status fa_rtc_kv_blocks_mma(int dtype, int bucket, int warps, int one_token, int *blocks, char *why,
                                   size_t why_len);

/* Unloads every module the launcher loaded (each in its own context) and forgets them: for a
 * context about to be destroyed, or a test. Not to be called while another thread launches. */
void fa_rtc_launch_release(void);

#endif
