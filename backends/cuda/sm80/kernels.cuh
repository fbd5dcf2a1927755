/* kernels.cuh: the sm80 tensor-core FlashAttention kernels (FlashAttention-2's algorithm).
 * Tiles of 64 x 64 with four warps of 16 rows; Q K^T and P V on mma.sync m16n8k16 with fp32
 * accumulators, the online softmax in registers with exp2 and the scale folded in, K/V tiles
 * double-buffered in shared memory through cp.async (or plain loads when rows are not 16-byte
 * aligned). Backward, two algorithms after D = rowsum(dO * O): the deterministic one computes
 * dK, dV per key tile with the warps owning key rows (S^T = K Q^T, so no transposes through
 * shared memory) and dQ per query tile in a second kernel, without atomics, so its gradients are
 * bitwise reproducible; the fused one (bwd_kernel) computes all three per key tile and adds dQ
 * into an fp32 accumulator with reductions (red_add2), so its dQ is not; at d 64 and 128 it runs on
 * FlashAttention-2's warp grid (bwd_grid_kernel) where the device has the shared memory. Masks, dropout
 * (core/philox.h), block-sparse lists and the score modifiers (core/score_mod.h, instances with
 * the MOD flag) follow the core's definitions element for element.
 *
 * This header gathers them by role: the kernels (forward.cuh, backward_deterministic.cuh,
 * backward_fused.cuh, backward_grid.cuh, backward_walk.cuh, backward_elementwise.cuh: dsum_kernel,
 * dq_convert_kernel) through kernels_device.cuh, which NVRTC compiles alone, and their launchers
 * (launch.cuh), on the device helpers of ../common/ that the sm90 kernels share. */
#ifndef FA_SM80_KERNELS_CUH
#define FA_SM80_KERNELS_CUH

#include "sm80/kernels_device.cuh"
#include "sm80/launch.cuh"

#endif
