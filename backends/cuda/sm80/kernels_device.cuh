/* kernels_device.cuh: every sm80 kernel (kernels.cuh describes them) and the device code they
 * need, without the launchers (launch.cuh): what NVRTC compiles (the family's root in
 * embed_sources.py); kernels.cuh adds the launchers for nvcc's build. */
#ifndef FA_SM80_KERNELS_DEVICE_CUH
#define FA_SM80_KERNELS_DEVICE_CUH

#include "sm80/forward.cuh"
#include "common/backward_elementwise.cuh"
#include "sm80/backward_deterministic.cuh"
#include "sm80/backward_fused.cuh"
#include "sm80/backward_grid.cuh"

#endif /* FA_SM80_KERNELS_DEVICE_CUH */
