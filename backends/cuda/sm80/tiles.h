/* tiles.h: the sm80 tile shapes, one row per padded head dim: common/sm80_geometry.h's
 * FA_SM80_TILE_TABLE (with the reason for each row), which the run-time launcher and
 * generate_instances.py read too. The kernels (forward.cuh, backward_fused.cuh) read their shapes
 * from here and nowhere else.
 *
 * Forward: a block of 4 warps owns B_r = 4 * 16 * fwd_mtiles query rows; key tiles of 64 rows
 * stream through shared memory, consumed fwd_keys keys per online-softmax step.
 * Backward (fused): a block of 8 warps owns 128 keys (16 per warp); query tiles of bwd_rows rows
 * stream through shared memory. The deterministic kernels use fixed 64 x 64 tiles. */
#ifndef FA_SM80_TILES_H
#define FA_SM80_TILES_H

#include "common/sm80_geometry.h"

namespace fa_gpu::sm80 {

struct tile_row {
    int d;          /* padded head dim */
    int fwd_mtiles; /* m16 tiles per warp in the forward */
    int fwd_keys;   /* keys per online-softmax step (32 or 64) */
    int bwd_rows;   /* query rows per fused-backward step; 0: no backward instance */
};

#define FA_SM80_TILE_ROW(D, MT, KN, BQ) {D, MT, KN, BQ},
constexpr tile_row TILES[] = {FA_SM80_TILE_TABLE(FA_SM80_TILE_ROW)};
#undef FA_SM80_TILE_ROW

__host__ __device__ constexpr tile_row tile_of(int d)
{
    for (const tile_row &r : TILES)
        if (r.d == d)
            return r;
    return tile_row{0, 0, 0, 0};
}

} // namespace fa_gpu::sm80

#endif
