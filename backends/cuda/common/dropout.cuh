/* dropout.cuh: the dropout factor of one score element from the core's Philox stream
 * (core/philox.h), the same on every backend. */
#ifndef FA_CUDA_COMMON_DROPOUT_CUH
#define FA_CUDA_COMMON_DROPOUT_CUH

#include "common/params.h"
#include "philox.h"

namespace fa_gpu {

/* The dropout words of the four elements a thread holds in one n8 block of the mma accumulator
 * layout: rows i0 (w[0]) and i0 + 8 (w[1]), keys j and j + 1 (j even, j % 4 == 2 (lane & 1)).
 * Lanes 2q and 2q + 1 hold the two halves of the same two Philox blocks (row i0 and row i0 + 8,
 * keys 4 (j / 4) ...), so each computes the block of one row, keeps the two words it needs and
 * hands its partner the other two: one Philox evaluation per four elements, as many as the rule
 * has blocks. All 32 lanes of the warp call it together. */
__device__ __forceinline__ void dropout_words_2x2(const fa_gpu_params &p, int64_t b, int64_t h, int64_t i0,
                                                  int64_t j, uint32_t (&w)[2][2])
{
    const bool odd = (j & 2) != 0; /* this lane's keys are words 2, 3; it computes row i0 + 8 */
    const fa_philox4 x = fa_dropout_block(p.seed, p.offset, (uint64_t)b, (uint64_t)p.heads_q, (uint64_t)h,
                                          (uint64_t)(i0 + (odd ? 8 : 0)), (uint64_t)j);
    const uint32_t mine0 = odd ? x.v[2] : x.v[0], mine1 = odd ? x.v[3] : x.v[1];
    const uint32_t got0 = __shfl_xor_sync(0xffffffffu, odd ? x.v[0] : x.v[2], 1);
    const uint32_t got1 = __shfl_xor_sync(0xffffffffu, odd ? x.v[1] : x.v[3], 1);
    w[0][0] = odd ? got0 : mine0;
    w[0][1] = odd ? got1 : mine1;
    w[1][0] = odd ? mine0 : got0;
    w[1][1] = odd ? mine1 : got1;
}

/* Word k (0..3, known only at run time) of a Philox block, by selects: an index would put the
 * block in local memory. */
__device__ __forceinline__ uint32_t philox_word(const fa_philox4 &x, int k)
{
    const uint32_t lo = (k & 1) ? x.v[1] : x.v[0], hi = (k & 1) ? x.v[3] : x.v[2];
    return (k & 2) ? hi : lo;
}

/* The same for the transposed accumulator layout of the backward kernels (keys as rows): the
 * thread holds keys j0 (w[0]) and j0 + 8 (w[1]) of queries i0 and i0 + 1 (w[.][0], w[.][1]).
 * The four lanes whose keys j0 & ~3 ... j0 | 3 share a Philox block (lanes 4 apart: key = g + 8
 * kh with g = lane / 4) need word j0 & 3 of the same four blocks, so each computes one block and
 * the four exchange words in three shuffles: one Philox evaluation per four elements. All 32
 * lanes of the warp call it together; j0 & 3 == (lane >> 2) & 3. */
__device__ __forceinline__ void dropout_words_keys_by_rows(const fa_gpu_params &p, int64_t b, int64_t h, int64_t i0,
                                                           int64_t j0, uint32_t (&w)[2][2])
{
    const int s = (int)(j0 & 3); /* the word this lane needs of every block; it computes block s */
    const fa_philox4 x = fa_dropout_block(p.seed, p.offset, (uint64_t)b, (uint64_t)p.heads_q, (uint64_t)h,
                                          (uint64_t)(i0 + (s & 1)), (uint64_t)(j0 + 8 * (s >> 1)));
    uint32_t got[4]; /* got[k]: word s of block s ^ k, from the lane whose s is s ^ k */
    got[0] = philox_word(x, s);
#pragma unroll
    for (int k = 1; k < 4; ++k)
        got[k] = __shfl_xor_sync(0xffffffffu, philox_word(x, s ^ k), 4 * k);
#pragma unroll
    for (int blk = 0; blk < 4; ++blk) { /* block blk = (key half blk >> 1, query blk & 1) is got[blk ^ s] */
        const int k = blk ^ s;
        const uint32_t lo = (k & 1) ? got[1] : got[0], hi = (k & 1) ? got[3] : got[2];
        w[blk >> 1][blk & 1] = (k & 2) ? hi : lo;
    }
}

/* Keep bits of the 4 NT8 elements a thread holds in the transposed layout over NT8 n8 blocks of
 * queries: bit (4 nt + e) % 32 of keep[(4 nt + e) / 32] for query i0 + 8 nt + (e & 1) and key
 * j0 + 8 (e >> 1) (i0 = the tile's first query + 2 t4, j0 = the warp's first key + g). */
template <int NT8>
__device__ __forceinline__ void dropout_keep_keys_by_rows(const fa_gpu_params &p, int64_t b, int64_t h, int64_t i0,
                                                          int64_t j0, uint32_t (&keep)[(4 * NT8 + 31) / 32])
{
#pragma unroll
    for (int k = 0; k < (4 * NT8 + 31) / 32; ++k)
        keep[k] = 0u;
#pragma unroll
    for (int nt = 0; nt < NT8; ++nt) {
        uint32_t w[2][2];
        dropout_words_keys_by_rows(p, b, h, i0 + 8 * nt, j0, w);
#pragma unroll
        for (int e = 0; e < 4; ++e)
            keep[(4 * nt + e) / 32] |= (uint32_t)(w[e >> 1][e & 1] >= p.dropout_threshold) << ((4 * nt + e) % 32);
    }
}

/* The factor of bit `bit` of keep bits: 1 / (1 - p) where kept, 0 where dropped. */
template <int N>
__device__ __forceinline__ float keep_factor(const uint32_t (&keep)[N], int bit, float scale)
{
    return (keep[bit / 32] >> (bit % 32)) & 1u ? scale : 0.0f;
}

/* Dropout factor of element (b, h, i, j): 0 or 1 / (1 - p). */
__device__ __forceinline__ float dropout_factor(const fa_gpu_params &p, int64_t b, int64_t h, int64_t i, int64_t j)
{
    fa_philox4 r = fa_dropout_block(p.seed, p.offset, (uint64_t)b, (uint64_t)p.heads_q, (uint64_t)h, (uint64_t)i,
                                    (uint64_t)j);
    return r.v[j & 3] >= p.dropout_threshold ? p.dropout_scale : 0.0f;
}

} // namespace fa_gpu

#endif
