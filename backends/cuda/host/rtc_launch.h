/* rtc_launch.h: the SIMT forward compiled at run time (host/rtc_compiler.h) and launched through
 * the CUDA driver API (host/driver_api.h), with the grid, block and arguments of the nvcc-built
 * launcher (simt/forward.cuh's launch_forward; both read common/simt_geometry.h), so that a build
 * without nvcc can run it. Nothing in the library calls it yet: the backend still launches the
 * nvcc-built kernels; tests/cuda/rtc_launch_check.c runs it against a fake driver. Plain C. */
#ifndef FA_RTC_LAUNCH_H
#define FA_RTC_LAUNCH_H

#include "common/params.h"
#include "host/rtc_compiler.h"

#include <stddef.h>

/* Launches forward_kernel<S, D, MOD> on stream (a CUstream; NULL for the legacy default stream)
 * for the call p describes: S from dtype (0 fp32, 1 fp16, 2 bf16), D the head-dim bucket of the
 * larger of p->d and p->d_v, MOD whether p has a score modifier. The kernel is compiled for the
 * current device's compute capability (sm_<major><minor>; the SIMT family needs no arch-specific
 * feature) in the current context, else in device 0's primary context, which is then made
 * current; its module is loaded once per (context, kernel) and kept. A call with no query rows or
 * no batch launches nothing. On failure, why names the step: an unsupported dtype, head dim or
 * grid (FA_RTC_INVALID_ARG), no driver, the driver call and its error string, or the compiler's
 * reason. Thread-safe. */
fa_rtc_status fa_rtc_launch_simt_forward(const fa_gpu_params *p, int dtype, void *stream, char *why, size_t why_len);

/* Unloads every module the launcher loaded (each in its own context) and forgets them: for a
 * context about to be destroyed, or a test. Not to be called while another thread launches. */
void fa_rtc_launch_release(void);

#endif
