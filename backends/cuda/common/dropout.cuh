/* dropout.cuh: dropout's keep verdicts for the elements a warp holds in the mma layouts, from the
 * core's Philox rule (core/philox.h), the same on every backend, with one Philox evaluation per
 * eight elements. */
#ifndef FA_CUDA_COMMON_DROPOUT_CUH
#define FA_CUDA_COMMON_DROPOUT_CUH

#include "common/params.h"
#include "philox.h"

namespace fa_gpu {

/* Word k (0..3, known only at run time) of a Philox block, by selects: an index would put the
 * block in local memory. */
__device__ __forceinline__ uint32_t philox_word(const fa_philox4 &x, int k)
{
    const uint32_t lo = (k & 1) ? x.v[1] : x.v[0], hi = (k & 1) ? x.v[3] : x.v[2];
    return (k & 2) ? hi : lo;
}

/* Keep bits of the elements a thread holds in two n8 blocks of the mma accumulator layout (rows
 * i0 and i0 + 8, keys j and j + 1 of the block at j and of the one at j + 8, j = a multiple of 8
 * plus 2 (lane & 3)): bit 4 n + e for n8 block n and accumulator element e (row i0 + 8 (e >> 1),
 * key j + 8 n + (e & 1)). A row's eight keys of an n8 block are one Philox block, whose word
 * lane & 3 holds this lane's two keys (core/philox.h). The four lanes of a quad need the same four
 * blocks (two rows by two n8 blocks): each computes one and the quad exchanges words in three
 * shuffles, one Philox evaluation per eight elements. With two false only the block at j is
 * meant (bits 0..3; lanes 2 and 3 repeat lanes 0 and 1). All 32 lanes of the warp call it
 * together. */
__device__ __forceinline__ uint32_t dropout_keep_rows_by_keys(const fa_gpu_params &p, int64_t b, int64_t h, int64_t i0,
                                                              int64_t j, bool two)
{
    const int s = (int)((j >> 1) & 3); /* lane & 3: the word this lane needs; it computes block s */
    const fa_philox4 x = fa_dropout_block(p.seed, p.offset, (uint64_t)b, (uint64_t)p.heads_q, (uint64_t)h,
                                          (uint64_t)(i0 + 8 * (s & 1)), (uint64_t)(j + (two ? 8 * (s >> 1) : 0)));
    uint32_t keep = 0u;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        /* lane s ^ k needs word s ^ k of this lane's block; this lane gets word s of block s ^ k */
        uint32_t w = philox_word(x, s ^ k);
        if (k)
            w = __shfl_xor_sync(0xffffffffu, w, k);
        const uint32_t pair = (uint32_t)((w & 0xffffu) >= p.dropout_threshold) |
                              (uint32_t)((w >> 16) >= p.dropout_threshold) << 1;
        keep |= pair << (2 * (s ^ k)); /* block s ^ k = (n8 block, row) = ((s ^ k) >> 1, (s ^ k) & 1) */
    }
    return two ? keep : keep & 0xfu;
}

/* The same for NT8 n8 blocks of keys from j (the block at j + 8 nt is n8 block nt): bit 4 nt + e
 * of keep[(4 nt + e) / 32]. */
template <int NT8>
__device__ __forceinline__ void dropout_keep_rows_by_keys_all(const fa_gpu_params &p, int64_t b, int64_t h, int64_t i0,
                                                              int64_t j, uint32_t (&keep)[(4 * NT8 + 31) / 32])
{
#pragma unroll
    for (int k = 0; k < (4 * NT8 + 31) / 32; ++k)
        keep[k] = 0u;
#pragma unroll
    for (int nt = 0; nt < NT8; nt += 2)
        keep[(4 * nt) / 32] |= dropout_keep_rows_by_keys(p, b, h, i0, j + 8 * nt, nt + 1 < NT8) << ((4 * nt) % 32);
}

/* Keep bits of the 4 NT8 elements a thread holds in the transposed layout (keys as rows) over NT8
 * n8 blocks of queries: bit (4 nt + e) % 32 of keep[(4 nt + e) / 32] for query i0 + 8 nt + (e & 1)
 * and key j0 + 8 (e >> 1) (i0 = the tile's first query + 2 (lane & 3), j0 = a multiple of 8 plus
 * lane >> 2). The eight lanes with the same lane & 3 hold the eight keys of the same Philox blocks
 * (one per query row and eight keys); for two n8 blocks of queries they need eight blocks: each
 * computes one (block g = lane >> 2: query block g >> 2, key half (g >> 1) & 1, query g & 1) and
 * they exchange the 16 bits each needs in seven shuffles, one Philox evaluation per eight
 * elements. All 32 lanes of the warp call it together. */
template <int NT8>
__device__ __forceinline__ void dropout_keep_keys_by_rows(const fa_gpu_params &p, int64_t b, int64_t h, int64_t i0,
                                                          int64_t j0, uint32_t (&keep)[(4 * NT8 + 31) / 32])
{
    const int g = (int)(j0 & 7);
#pragma unroll
    for (int k = 0; k < (4 * NT8 + 31) / 32; ++k)
        keep[k] = 0u;
#pragma unroll
    for (int nt = 0; nt < NT8; nt += 2) {
        const bool two = nt + 1 < NT8;
        const int qb = two ? g >> 2 : 0; /* with one n8 block left, lanes g >= 4 repeat lanes g - 4 */
        const fa_philox4 x = fa_dropout_block(p.seed, p.offset, (uint64_t)b, (uint64_t)p.heads_q, (uint64_t)h,
                                              (uint64_t)(i0 + 8 * (nt + qb) + (g & 1)),
                                              (uint64_t)(j0 + 8 * ((g >> 1) & 1)));
        uint32_t byte = 0u;
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            /* lane g ^ k needs the 16 bits of key g ^ k (of its block group) from this lane's block;
             * this lane gets key g's bits of block g ^ k */
            uint32_t v = fa_dropout_bits(philox_word(x, (g ^ k) >> 1), (uint64_t)(g ^ k));
            if (k)
                v = __shfl_xor_sync(0xffffffffu, v, 4 * k);
            byte |= (uint32_t)(v >= p.dropout_threshold) << (g ^ k);
        }
        keep[(4 * nt) / 32] |= (two ? byte : byte & 0xfu) << ((4 * nt) % 32);
    }
}

/* The factor of bit `bit` of keep bits: 1 / (1 - p) where kept, 0 where dropped. */
template <int N>
__device__ __forceinline__ float keep_factor(const uint32_t (&keep)[N], int bit, float scale)
{
    return (keep[bit / 32] >> (bit % 32)) & 1u ? scale : 0.0f;
}

} // namespace fa_gpu

#endif
