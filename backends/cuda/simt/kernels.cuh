/* kernels.cuh: the SIMT kernel family, written once for CUDA and HIP (common/vendor.h maps the
 * names): plain fp32 FMAs, no tensor cores, so it runs on any NVIDIA GPU (sm_50+) and on AMD. The
 * forward (forward.cuh) and the deterministic backward (backward.cuh) on the device helpers of
 * common/portable.cuh; instances/ instantiates them per dtype and head-dim bucket. */
#ifndef FA_PORTABLE_KERNELS_CUH
#define FA_PORTABLE_KERNELS_CUH

#include "simt/backward.cuh"
#include "simt/forward.cuh"

#endif /* FA_PORTABLE_KERNELS_CUH */
