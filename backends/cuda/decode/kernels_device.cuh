/* kernels_device.cuh: every kernel of fa_forward_kvcache (check.cuh, decode_kernels.cuh, combine_groups.cuh,
 * decode_mma_kernels.cuh, decode_mla_kernels.cuh and decode_mla_sm90_kernels.cuh, the last three CUDA
 * only, the last compiled for sm_90a) and the device code they need, without the launchers
 * (decode.cuh, decode_mma.cuh): what NVRTC and hipRTC compile (the family's root in
 * embed_sources.py). */
#ifndef FA_GPU_DECODE_KERNELS_DEVICE_CUH
#define FA_GPU_DECODE_KERNELS_DEVICE_CUH

#include "decode/combine_groups.cuh"
#include "decode/decode_kernels.cuh"
#if !defined(__HIPCC__) /* mma.sync: NVIDIA's tensor cores */
#include "decode/decode_mma_kernels.cuh"
#include "decode/decode_mla_kernels.cuh"
#include "decode/decode_mla_sm90_kernels.cuh"
#endif

#endif /* FA_GPU_DECODE_KERNELS_DEVICE_CUH */
