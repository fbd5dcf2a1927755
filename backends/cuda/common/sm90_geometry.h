/* sm90_geometry.h: the Hopper kernels' launch geometry and tensor-map shapes, the one source for
 * every launcher of them: sm90/kernels.cuh and sm90/backward.cuh (nvcc) and the driver-API
 * launcher host/rtc_sm90.c (plain C), so the two paths cannot disagree on a tile, a block, a
 * stage count, a dynamic shared memory size or a map's dimensions, strides and boxes. The kernels
 * (sm90/forward_kernels.cuh, sm90/backward_kernels.cuh) take their constants from here too. In
 * common/ because the host layer may include common/ only (tests/cuda/check_include_graph.py).
 * Compiles as C and CUDA; under NVRTC the constants only (the rest is host code).
 *
 * E below is the bytes of one element (2: fp16 and bf16), D the instance's head dim. */
#ifndef FA_GPU_SM90_GEOMETRY_H
#define FA_GPU_SM90_GEOMETRY_H

#include "common/params.h"

/* The dynamic shared memory a Hopper block may opt into (227 KiB), which the stage counts fill. */
#define FA_SM90_SMEM_OPTIN 232448

/* The first forward (modes 1 and 2: block lists, dropout): query rows and keys per tile, two
 * warpgroups, K / V stages; its shared memory: Q and the K and V stages. */
#define FA_SM90_BR 128
#define FA_SM90_BN 64
#define FA_SM90_THREADS 256
#define FA_SM90_STAGES 3
#define FA_SM90_SMEM(E, D) ((FA_SM90_BR + 2 * FA_SM90_STAGES * FA_SM90_BN) * (D) * (E))

/* The warp-specialised forward (mode 0): query rows per block, three warpgroups (one producer,
 * two consumers of 64 rows each); keys per tile 128, or 64 at d 256 (its O accumulator takes 128
 * registers per thread), or in the wide instances (FA_SM90_WS_WIDE: d 128, non-causal calls whose K
 * and V load by TMA, no score modifiers; consumers at 240 registers) 160 (FA_SM90_WS_BN_OF); as many K / V
 * stages as shared memory holds beside Q (less 1 KiB for aligning the tiles and 256 bytes for the
 * barriers), at most 4; its shared memory: Q and the stages, plus 1 KiB of alignment. */
#define FA_SM90_WS_BR 128
#define FA_SM90_WS_CONSUMERS 256
#define FA_SM90_WS_THREADS 384
#define FA_SM90_WS_BN(D) ((D) > 128 ? 64 : 128)
#define FA_SM90_WS_WIDE(D) ((D) > 64 && (D) <= 128)
#define FA_SM90_WS_BN_OF(D, WIDE) ((WIDE) && FA_SM90_WS_WIDE(D) ? 160 : FA_SM90_WS_BN(D))
#define FA_SM90_WS_STAGES_FIT_N(E, D, BN) ((FA_SM90_SMEM_OPTIN - 1280 - FA_SM90_WS_BR * (D) * (E)) / (2 * (BN) * (D) * (E)))
#define FA_SM90_WS_STAGES_N(E, D, BN) (FA_SM90_WS_STAGES_FIT_N(E, D, BN) < 4 ? FA_SM90_WS_STAGES_FIT_N(E, D, BN) : 4)
#define FA_SM90_WS_SMEM_N(E, D, BN) ((FA_SM90_WS_BR + 2 * FA_SM90_WS_STAGES_N(E, D, BN) * (BN)) * (D) * (E) + 1024)
#define FA_SM90_WS_STAGES(E, D) FA_SM90_WS_STAGES_N(E, D, FA_SM90_WS_BN(D))
#define FA_SM90_WS_SMEM(E, D) FA_SM90_WS_SMEM_N(E, D, FA_SM90_WS_BN(D))

/* The warp-specialised backward: three warpgroups (one producer, two consumers). At d 64 and 128
 * (backward_kernels.cuh) 128 keys per block, 64 per consumer; query rows per step, 128 at d 64 and
 * 64 at d 128; its fixed shared memory: K, V [128][D], dS^T [128][BQ], the fp32 dQ [BQ][D]. At
 * d 256 (backward_cols_kernels.cuh) 64 keys per block, 64 query rows per step, the consumers
 * splitting the columns; its fixed shared memory: K, V [64][256], P^T and dS^T [64][64] twice.
 * As many query-side stages [BQ][D] x 2 as fit beside the fixed part (less 1 KiB of alignment,
 * the static arrays and the barriers), at most 3, and the total, plus 1 KiB of alignment. The fp32
 * dQ accumulator: at d 64 and 128 [heads_q][total_q][D]; at d 256 [heads_q][ACC_ROWS][256] in
 * tiles of 64 rows in the consumers' register order (backward_cols_kernels.cuh), sequence b's
 * first tile at row FA_SM90_BW_TILE_ROW0, so ACC_ROWS = total_q + 64 x batch rows hold them all. */
#define FA_SM90_BW_CONSUMERS 256
#define FA_SM90_BW_THREADS 384
#define FA_SM90_BW_BN(D) ((D) > 128 ? 64 : 128)
#define FA_SM90_BW_BQ(D) ((D) <= 64 ? 128 : 64)
#define FA_SM90_BW_FIXED_BYTES(E, D)                                                                                   \
    ((D) > 128 ? (2 * FA_SM90_BW_BN(D) * (D) + 4 * FA_SM90_BW_BN(D) * FA_SM90_BW_BQ(D)) * (E)                          \
               : (2 * FA_SM90_BW_BN(D) * (D) + FA_SM90_BW_BN(D) * FA_SM90_BW_BQ(D)) * (E) + FA_SM90_BW_BQ(D) * (D) * 4)
#define FA_SM90_BW_STAGES_FIT(E, D)                                                                                    \
    ((FA_SM90_SMEM_OPTIN - 1024 - 3 * 2 * FA_SM90_BW_BQ(D) * 4 - 256 - FA_SM90_BW_FIXED_BYTES(E, D)) /                \
     (2 * FA_SM90_BW_BQ(D) * (D) * (E)))
#define FA_SM90_BW_STAGES(E, D) (FA_SM90_BW_STAGES_FIT(E, D) < 3 ? FA_SM90_BW_STAGES_FIT(E, D) : 3)
#define FA_SM90_BW_SMEM(E, D)                                                                                          \
    (FA_SM90_BW_FIXED_BYTES(E, D) + 2 * FA_SM90_BW_STAGES(E, D) * FA_SM90_BW_BQ(D) * (D) * (E) + 1024)
#define FA_SM90_BW_ACC_ROWS(D, TOTAL_Q, BATCH) ((D) > 128 ? (TOTAL_Q) + FA_SM90_BW_BQ(D) * (BATCH) : (TOTAL_Q))
/* sequence b's first accumulator row at d 256, its first packed row (b x seqlen_q when dense)
 * q_start: a multiple of 64 past the previous sequence's last tile */
#define FA_SM90_BW_TILE_ROW0(Q_START, B) (((Q_START) + 64 * (B)) / 64 * 64)

/* The backward's elementwise kernels (common/backward_elementwise.cuh): dsum_kernel, eight threads
 * a query row, 16 rows per block of 128 threads (fa_gpu::THREADS); dq_convert_kernel, 256 threads,
 * eight channels each (dq_convert_cols_kernel at d 256: one element each). */
#define FA_SM90_DSUM_THREADS 128
#define FA_SM90_DSUM_ROWS 16
#define FA_SM90_DQ_CONVERT_THREADS 256
#define FA_SM90_DQ_CONVERT_CHANNELS 8

/* The tensor maps' constants, as cuda.h numbers them (tensor_map.cuh checks each against its
 * enum): the data types, no interleave, the 128-byte swizzle wgmma reads (sw128 in
 * common/wgmma.cuh), L2 promotion by 256 bytes, zeros out of bounds; boxes of 64 columns. */
#define FA_SM90_TMA_FLOAT16 6
#define FA_SM90_TMA_BFLOAT16 9
#define FA_SM90_TMA_INTERLEAVE_NONE 0
#define FA_SM90_TMA_SWIZZLE_128B 3
#define FA_SM90_TMA_L2_PROMOTION_256B 3
#define FA_SM90_TMA_OOB_FILL_NONE 0
#define FA_SM90_TMA_BOX_COLUMNS 64

#if !defined(__CUDACC_RTC__)

#ifdef __cplusplus
extern "C" {
#endif

/* A view's map, as cuTensorMapEncodeTiled takes it: a 4-D tensor (head dim, rows, heads, batch),
 * the byte strides of the upper three dimensions, the box (64 columns x the kernel's tile rows),
 * element strides of 1, and the data type. */
typedef struct fa_sm90_map_shape {
    uint64_t dims[4];
    uint64_t strides[3];
    uint32_t box[4];
    uint32_t step[4];
    int data_type; /* FA_SM90_TMA_FLOAT16 or FA_SM90_TMA_BFLOAT16 */
} fa_sm90_map_shape;

/* A stride in bytes as TMA takes it: a multiple of 16 below 2^40 (any such value where the
 * dimension has one index, as its stride is then never used). */
static inline int fa_sm90_tma_stride(int64_t elems, int64_t extent, size_t elem_bytes, uint64_t *out)
{
    if (extent == 1) {
        *out = 16;
        return 1;
    }
    if (elems <= 0 || elems > ((int64_t)1 << 40) / (int64_t)elem_bytes)
        return 0;
    *out = (uint64_t)elems * elem_bytes;
    return *out % 16 == 0;
}

/* The map of view t (cols columns: p->d for Q and K, p->d_v for V and dO; rows rows per sequence,
 * heads heads, p->batch sequences) in boxes of 64 columns x box_rows rows, elements of elem_bytes
 * bytes (2) of data_type; 0 where TMA cannot describe it (the caller keeps cp.async): no data,
 * data not 16-byte aligned, cols above 256, a dimension out of the 32-bit signed coordinates, a
 * stride TMA cannot take. */
static inline int fa_sm90_map_shape_of(const fa_gpu_tensor *t, const fa_gpu_params *p, int64_t cols, int64_t rows,
                                       int64_t heads, int box_rows, size_t elem_bytes, int data_type,
                                       fa_sm90_map_shape *out)
{
    const int64_t limit = (int64_t)1 << 31; /* coordinates are 32-bit signed */
    if (!t->data || (uintptr_t)t->data % 16 != 0 || cols < 1 || cols > 256 || rows < 1 || rows >= limit ||
        heads >= limit || p->batch >= limit)
        return 0;
    out->dims[0] = (uint64_t)cols;
    out->dims[1] = (uint64_t)rows;
    out->dims[2] = (uint64_t)heads;
    out->dims[3] = (uint64_t)p->batch;
    if (!fa_sm90_tma_stride(t->ss, rows, elem_bytes, &out->strides[0]) ||
        !fa_sm90_tma_stride(t->sh, heads, elem_bytes, &out->strides[1]) ||
        !fa_sm90_tma_stride(t->sb, p->batch, elem_bytes, &out->strides[2]))
        return 0;
    out->box[0] = FA_SM90_TMA_BOX_COLUMNS;
    out->box[1] = (uint32_t)box_rows;
    out->box[2] = out->box[3] = 1;
    out->step[0] = out->step[1] = out->step[2] = out->step[3] = 1;
    out->data_type = data_type;
    return 1;
}

#ifdef __cplusplus
}
#endif

#endif /* !__CUDACC_RTC__ */

#endif /* FA_GPU_SM90_GEOMETRY_H */
