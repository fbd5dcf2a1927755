/* sm80_geometry.h: the sm80 kernels' instances and launch geometry, the one source for every
 * launcher of them: sm80/tiles.h and sm80/launch.cuh (compiled by nvcc), generate_instances.py
 * (which reads FA_SM80_TILE_TABLE to write instances/sm80_dispatch.cu) and the driver-API launcher
 * (host/rtc_sm80.c, plain C), so the two paths cannot disagree on which instances exist, their
 * tiles, grids or shared memory. In common/ because the host layer may include common/ only
 * (tests/cuda/check_include_graph.py). Compiles as C and CUDA; under NVRTC the table and the
 * constants only (the rest is host code). */
#ifndef FA_GPU_SM80_GEOMETRY_H
#define FA_GPU_SM80_GEOMETRY_H

#include "common/params.h"

/* One row per padded head dim with an instance: X(d, fwd_mtiles, fwd_keys, bwd_rows).
 *   fwd_mtiles: m16 tiles per warp in the forward (its block owns 4 * 16 * fwd_mtiles query rows);
 *   fwd_keys:   keys per online-softmax step (32 or 64);
 *   bwd_rows:   query rows per fused-backward step; 0: no backward instance.
 * d 32, 64: O (32 / 64 registers) and a 64-wide S tile fit beside each other (235 registers at
 * d 64, no spills); 64 query rows per backward step keep dK, dV and S^T, dP^T in registers.
 * d 96, 128: two m tiles of O take 96 / 128 registers, and a 64-wide S tile next to them spilled
 * (96-112 bytes at d 128); 32-key steps spill 40-60 bytes outside the inner loop. Backward: 64
 * query rows per step, faster than 32 at d 128.
 * d 160 .. 256: one m tile (O is 80 .. 128 registers); two would not fit. Backward: dK and dV of
 * 16 keys x d would need 160 .. 256 registers per thread, so at d 256 the fused backward splits the
 * output columns in two passes of 128 (bwd_shape::PASSES: S and dP recomputed per pass over the
 * whole d, dK, dV, dQ of the pass's columns), 32 query rows per step so the full-width K, V, Q, dO
 * tiles fit in 213.5 KB of shared memory (Hopper-class; an A100 has 164 KB and keeps the SIMT
 * backward); d 160 .. 224 have no backward (their halves are not whole n16 column groups).
 * The register and spill figures are ptxas's for sm_80 (`-Xptxas -v`). */
#define FA_SM80_TILE_TABLE(X)                                                                                         \
    X(32, 2, 64, 64)                                                                                                  \
    X(64, 2, 64, 64)                                                                                                  \
    X(96, 2, 32, 64)                                                                                                  \
    X(128, 2, 32, 64)                                                                                                 \
    X(160, 1, 64, 0)                                                                                                  \
    X(192, 1, 64, 0)                                                                                                  \
    X(224, 1, 64, 0)                                                                                                  \
    X(256, 1, 64, 32)

/* Threads of the forward, the deterministic backward and dsum_kernel (4 warps). */
#define FA_SM80_THREADS 128
/* The fused backward (bwd_kernel, bwd_grid_kernel): 8 warps over 128 keys per block. */
#define FA_SM80_BWD_THREADS 256
#define FA_SM80_BWD_KEYS 128
/* bwd_kernel's narrow d 256 instance (FLASHATTN_KERNELS=sm80-bwd-narrow): 4 warps over 64 keys
 * per block, so that its tiles fit the 163 KB an A100 gives a block (141 KB against 213 KB). */
#define FA_SM80_BWD_NARROW_WARPS 4
#define FA_SM80_BWD_NARROW_THREADS (FA_SM80_BWD_NARROW_WARPS * 32)
#define FA_SM80_BWD_NARROW_KEYS (FA_SM80_BWD_NARROW_WARPS * 16)
/* bwd_grid_kernel: 64 query rows per step, and its table of step classes (bytes). */
#define FA_SM80_GRID_BWD_ROWS 64
#define FA_SM80_GRID_BWD_CLASSES 4096
/* dsum_kernel's query rows per block of FA_SM80_THREADS (eight threads a row). */
#define FA_SM80_DSUM_ROWS 16
/* dq_convert_kernel's block, and the channels of one row each of its threads converts. */
#define FA_SM80_CONVERT_THREADS 256
#define FA_SM80_CONVERT_CHANNELS 8

/* The forward's query rows per block at fwd_mtiles MT, and its dynamic shared memory at head dim D
 * with elements of ELEM bytes: Q [ROWS][D + 8] and K, V [STAGES][64][D + 8] (forward.cuh's
 * STAGES; FA_SM80_FWD_SMEM: the default two). */
#define FA_SM80_FWD_ROWS(MT) (4 * 16 * (MT))
#define FA_SM80_FWD_SMEM_STAGES(ELEM, D, ROWS, STAGES) ((ELEM) * ((ROWS) + 2 * (STAGES) * FA_GPU_BLOCK) * ((D) + 8))
#define FA_SM80_FWD_SMEM(ELEM, D, ROWS) FA_SM80_FWD_SMEM_STAGES(ELEM, D, ROWS, 2)
/* The one-stage forward's mode 2 kernels (dropout, score modifiers): from this head dim only */
#define FA_SM80_ONE_STAGE_MODE2_MIN_D 128
/* bwd_kernel's blocks per 128-key tile: above d 128, two passes of d / 2 output columns. */
#define FA_SM80_BWD_PASSES(D) ((D) > 128 ? 2 : 1)
/* bwd_kernel's dynamic shared memory (16-bit elements) at head dim D, BQ query rows per step:
 * K, V [128][D + 8], Q, dO [2][BQ][D + 8], dS^T [128][BQ + 8], then LSE and D of two query tiles in
 * fp32. */
#define FA_SM80_BWD_SMEM(D, BQ) FA_SM80_BWD_SMEM_KEYS(D, BQ, FA_SM80_BWD_KEYS)
/* the same with KEYS keys per block instead of 128 (the narrow instance's 64) */
#define FA_SM80_BWD_SMEM_KEYS(D, BQ, KEYS)                                                                            \
    (2 * (2 * (KEYS) * ((D) + 8) + 4 * (BQ) * ((D) + 8) + (KEYS) * ((BQ) + 8)) + sizeof(float) * 4 * (BQ))
/* bwd_grid_kernel's: K, V [128][D + 8], Q, dO [2][64][D + 8], P Z and dS [64][128 + 8] (16-bit),
 * then LSE log2(e) and D of two query tiles (fp32), the step classes (bytes): 175 KB at d 128,
 * 110 KB at d 64. */
#define FA_SM80_GRID_BWD_SMEM(D)                                                                                      \
    (2 * (2 * FA_SM80_BWD_KEYS * ((D) + 8) + 4 * FA_SM80_GRID_BWD_ROWS * ((D) + 8) +                                  \
          2 * FA_SM80_GRID_BWD_ROWS * (FA_SM80_BWD_KEYS + 8)) +                                                       \
     sizeof(float) * 4 * FA_SM80_GRID_BWD_ROWS + FA_SM80_GRID_BWD_CLASSES)
/* The deterministic backward (d <= 128): dkdv_kernel's query rows per step, its dynamic shared
 * memory (6 tiles of 64 x (D + 8) elements and 4 x BQ floats), and dq_kernel's (the 6 tiles). */
#define FA_SM80_DET_ROWS(D) ((D) > 64 ? 32 : 64)
#define FA_SM80_DKDV_SMEM(ELEM, D) ((ELEM) * 6 * FA_GPU_BLOCK * ((D) + 8) + sizeof(float) * 4 * FA_SM80_DET_ROWS(D))
#define FA_SM80_DQ_SMEM(ELEM, D) ((ELEM) * 6 * FA_GPU_BLOCK * ((D) + 8))

#if !defined(__CUDACC_RTC__)

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A row of FA_SM80_TILE_TABLE; d == 0 where the table has no such head dim. */
typedef struct fa_sm80_tile {
    int d, fwd_mtiles, fwd_keys, bwd_rows;
} fa_sm80_tile;

static inline fa_sm80_tile fa_sm80_tile_of(int d)
{
#define FA_SM80_TILE_CASE(D, MT, KN, BQ)                                                                              \
    if (d == (D)) {                                                                                                   \
        const fa_sm80_tile t = {(D), (MT), (KN), (BQ)};                                                               \
        return t;                                                                                                     \
    }
    FA_SM80_TILE_TABLE(FA_SM80_TILE_CASE)
#undef FA_SM80_TILE_CASE
    const fa_sm80_tile none = {0, 0, 0, 0};
    return none;
}

/* Whether the family has an instance for (dtype 1 fp16 / 2 bf16, padded head dim), direction,
 * alignment and score modifier: the MOD instances exist for aligned rows only. */
static inline int fa_sm80_instance_exists(int dtype, int d, int backward, int aligned, int mod)
{
    if ((dtype != 1 && dtype != 2) || (mod && !aligned))
        return 0;
    const fa_sm80_tile t = fa_sm80_tile_of(d);
    return t.d != 0 && (!backward || t.bwd_rows != 0);
}

/* bwd_kernel's blocks per 128-key tile: above d 128, two passes of d / 2 output columns. */
#define FA_SM80_BWD_PASSES(D) ((D) > 128 ? 2 : 1)
/* bwd_kernel's dynamic shared memory at a padded head dim with a backward instance; 0 otherwise. */
static inline size_t fa_sm80_bwd_smem(int d)
{
    const fa_sm80_tile t = fa_sm80_tile_of(d);
    return t.bwd_rows ? FA_SM80_BWD_SMEM(d, t.bwd_rows) : 0;
}

/* The narrow bwd_kernel's dynamic shared memory at padded head dim d: d 256 only (its one
 * instance; the chooser pads d 129..224 to it), 0 otherwise. */
static inline size_t fa_sm80_bwd_narrow_smem(int d)
{
    const fa_sm80_tile t = fa_sm80_tile_of(d);
    return d == 256 && t.bwd_rows ? FA_SM80_BWD_SMEM_KEYS(d, t.bwd_rows, FA_SM80_BWD_NARROW_KEYS) : 0;
}

/* Whether the one-stage forward has the instances of a call at padded head dim d: its mode 2
 * kernels (dropout, score modifiers) exist from d 128 (ptxas for sm_90 cannot allocate them below:
 * C7600), the others at every d. */
static inline int fa_sm80_one_stage_covers(int d, int mode2)
{
    return !mode2 || d >= FA_SM80_ONE_STAGE_MODE2_MIN_D;
}

/* The forward's dynamic shared memory (16-bit elements) at a padded head dim with an instance and
 * that many stages; 0 where there is no instance. The split instances use the same. */
static inline size_t fa_sm80_fwd_smem(int d, int stages)
{
    const fa_sm80_tile t = fa_sm80_tile_of(d);
    return t.d ? (size_t)FA_SM80_FWD_SMEM_STAGES(2, d, FA_SM80_FWD_ROWS(t.fwd_mtiles), stages) : 0;
}

/* The larger of the deterministic pair's (dkdv_kernel, dq_kernel) at a padded head dim <= 128 with
 * a backward instance; 0 otherwise (no deterministic kernels). */
static inline size_t fa_sm80_deterministic_smem(int d)
{
    const fa_sm80_tile t = fa_sm80_tile_of(d);
    if (!t.bwd_rows || d > 128)
        return 0;
    const size_t a = FA_SM80_DKDV_SMEM(2, d), b = FA_SM80_DQ_SMEM(2, d);
    return a > b ? a : b;
}

#ifdef __cplusplus
}
#endif

#endif /* !__CUDACC_RTC__ */

#endif /* FA_GPU_SM80_GEOMETRY_H */
