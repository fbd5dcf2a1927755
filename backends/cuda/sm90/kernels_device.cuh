/* kernels_device.cuh: every Hopper kernel (forward_kernels.cuh, backward_kernels.cuh,
 * backward_cols_kernels.cuh, and the dsum
 * and dQ conversion kernels of common/backward_elementwise.cuh) and the device code they need,
 * without the launchers and the tensor maps' host encoder (kernels.cuh, backward.cuh,
 * tensor_map.cuh): what NVRTC compiles (the family's root in embed_sources.py). */
#ifndef FA_SM90_KERNELS_DEVICE_CUH
#define FA_SM90_KERNELS_DEVICE_CUH

#include "sm90/forward_kernels.cuh"
#include "sm90/backward_kernels.cuh"
#include "sm90/backward_cols_kernels.cuh"

#endif /* FA_SM90_KERNELS_DEVICE_CUH */
