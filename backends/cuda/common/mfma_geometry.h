/* mfma_geometry.h: the MFMA forward's launch geometry (mfma/forward.cuh), the one source for both
 * of its launchers: launch_forward (compiled by hipcc, or by nvcc for the emulated test build) and
 * the HIP module's run-time launcher (backends/hip/rtc_kernels.c, plain C). One wavefront of
 * FA_MFMA_WAVE lanes per block owns FA_MFMA_ROWS query rows, so grid.x = ceil(seqlen_q /
 * FA_MFMA_ROWS) by heads_q by batch, with no dynamic shared memory. Compiles as C, CUDA and HIP. */
#ifndef FA_GPU_MFMA_GEOMETRY_H
#define FA_GPU_MFMA_GEOMETRY_H

#define FA_MFMA_WAVE 64 /* threads per block: one CDNA wavefront */
#define FA_MFMA_ROWS 32 /* query rows per block */
#define FA_MFMA_KEYS 32 /* keys per step of the key loop */

#endif /* FA_GPU_MFMA_GEOMETRY_H */
