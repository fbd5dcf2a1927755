/* tiles.h: the sm80 tile shapes, one row per padded head dim with the reason for it. The kernels
 * (forward.cuh, backward_fused.cuh) read their shapes from here and nowhere else; the register
 * and spill figures are ptxas's for sm_80 (`-Xptxas -v`).
 *
 * Forward: a block of 4 warps owns B_r = 4 * 16 * fwd_mtiles query rows; key tiles of 64 rows
 * stream through shared memory, consumed fwd_keys keys per online-softmax step.
 * Backward (fused): a block of 8 warps owns 128 keys (16 per warp); query tiles of bwd_rows rows
 * stream through shared memory. The deterministic kernels use fixed 64 x 64 tiles. */
#ifndef FA_SM80_TILES_H
#define FA_SM80_TILES_H

namespace fa_gpu::sm80 {

struct tile_row {
    int d;          /* padded head dim */
    int fwd_mtiles; /* m16 tiles per warp in the forward */
    int fwd_keys;   /* keys per online-softmax step (32 or 64) */
    int bwd_rows;   /* query rows per fused-backward step; 0: no backward instance */
};

constexpr tile_row TILES[] = {
    /* d 32, 64: O (32 / 64 registers) and a 64-wide S tile fit beside each other (235 registers
     * at d 64, no spills); 64 query rows per backward step keep dK, dV and S^T, dP^T in registers */
    {32, 2, 64, 64},
    {64, 2, 64, 64},
    /* d 96, 128: two m tiles of O take 96 / 128 registers, and a 64-wide S tile next to them
     * spilled (96-112 bytes at d 128); 32-key steps spill 40-60 bytes outside the inner loop.
     * Backward: 64 query rows per step, faster than 32 at d 128 */
    {96, 2, 32, 64},
    {128, 2, 32, 64},
    /* d 160 .. 256: one m tile (O is 80 .. 128 registers); two would not fit. Backward: dK and dV
     * of 16 keys x d would need 160 .. 256 registers per thread, so at d 256 the fused backward
     * splits the output columns in two passes of 128 (bwd_shape::PASSES: S and dP recomputed per
     * pass over the whole d, dK, dV, dQ of the pass's columns), 32 query rows per step so the
     * full-width K, V, Q, dO tiles fit in 213.5 KB of shared memory (Hopper-class; an A100 has
     * 164 KB and keeps the SIMT backward); d 160 .. 224 have no backward (their halves are not
     * whole n16 column groups) */
    {160, 1, 64, 0},
    {192, 1, 64, 0},
    {224, 1, 64, 0},
    {256, 1, 64, 32},
};

__host__ __device__ constexpr tile_row tile_of(int d)
{
    for (const tile_row &r : TILES)
        if (r.d == d)
            return r;
    return tile_row{0, 0, 0, 0};
}

} // namespace fa_gpu::sm80

#endif
