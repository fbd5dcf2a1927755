/* philox.h: the one definition of which attention elements dropout drops.
 *
 * Philox4x32-10 (Salmon et al., SC'11, "Parallel random numbers: as easy as 1, 2, 3") and the
 * dropout rule built on it. Plain C99 with no includes beyond the fixed-width integer types, so
 * the same text compiles as C, C++, CUDA, HIP and OpenCL C (which has uint/ulong built in).
 *
 * The rule, for element (b, h, i, j) of the attention matrix P (b batch, h query head, i query
 * row and j key column, both local to the sequence):
 *   key     = (lo32(seed), hi32(seed))
 *   stream  = offset + b * heads_q + h                      (64-bit, wraps)
 *   counter = (j / 8, i, lo32(stream), hi32(stream))
 *   w       = Philox4x32-10(counter, key)[(j % 8) / 2]
 *   r       = (w >> (16 * (j % 2))) & 0xffff               (16 bits per key: key j even the low half)
 *   dropped iff r < threshold, threshold = fa_dropout_threshold(p) = floor(p * 2^16)
 * so one Philox evaluation decides eight keys, and p takes effect in steps of 2^-16 (a p below
 * 2^-16 drops nothing). The threshold is computed once on the host so every backend compares the
 * same integers; the kept elements are scaled by 1 / (1 - p) of the user's p. */
#ifndef FA_PHILOX_H
#define FA_PHILOX_H

#if defined(__OPENCL_VERSION__)
typedef uint fa_u32;
typedef ulong fa_u64;
#define FA_PHILOX_FN static inline
#else
#if !defined(__CUDACC_RTC__) && !defined(__HIPCC_RTC__) /* NVRTC and hipRTC have no <stdint.h>: common/rtc_prelude.cuh, included first there, defines the types */
#include <stdint.h>
#endif
typedef uint32_t fa_u32;
typedef uint64_t fa_u64;
#if defined(__CUDACC__) || defined(__HIPCC__)
#define FA_PHILOX_FN static __host__ __device__ __forceinline__
#else
#define FA_PHILOX_FN static inline
#endif
#endif

#define FA_PHILOX_M0 0xD2511F53u
#define FA_PHILOX_M1 0xCD9E8D57u
#define FA_PHILOX_W0 0x9E3779B9u
#define FA_PHILOX_W1 0xBB67AE85u

typedef struct fa_philox4 {
    fa_u32 v[4];
} fa_philox4;

FA_PHILOX_FN fa_u32 fa_mulhilo32(fa_u32 a, fa_u32 b, fa_u32 *hi)
{
    fa_u64 p = (fa_u64)a * (fa_u64)b;
    *hi = (fa_u32)(p >> 32);
    return (fa_u32)p;
}

/* Ten rounds; the key is bumped between rounds (Random123's order). */
FA_PHILOX_FN fa_philox4 fa_philox4x32_10(fa_philox4 ctr, fa_u32 k0, fa_u32 k1)
{
    for (int round = 0; round < 10; ++round) {
        if (round > 0) {
            k0 += FA_PHILOX_W0;
            k1 += FA_PHILOX_W1;
        }
        fa_u32 hi0, hi1;
        fa_u32 lo0 = fa_mulhilo32(FA_PHILOX_M0, ctr.v[0], &hi0);
        fa_u32 lo1 = fa_mulhilo32(FA_PHILOX_M1, ctr.v[2], &hi1);
        fa_philox4 next;
        next.v[0] = hi1 ^ ctr.v[1] ^ k0;
        next.v[1] = lo1;
        next.v[2] = hi0 ^ ctr.v[3] ^ k1;
        next.v[3] = lo0;
        ctr = next;
    }
    return ctr;
}

/* Keys of a row decided by one Philox block (fa_dropout_block), and by one of its words. */
#define FA_DROPOUT_BLOCK_KEYS 8
#define FA_DROPOUT_WORD_KEYS 2

/* The four words of the Philox block holding columns [8*(j/8), 8*(j/8)+8) of row i. Kernels that
 * walk a row call this once per eight columns. */
FA_PHILOX_FN fa_philox4 fa_dropout_block(fa_u64 seed, fa_u64 offset, fa_u64 batch, fa_u64 heads_q,
                                         fa_u64 head, fa_u64 row, fa_u64 col)
{
    fa_u64 stream = offset + batch * heads_q + head;
    fa_philox4 c;
    c.v[0] = (fa_u32)(col >> 3);
    c.v[1] = (fa_u32)row;
    c.v[2] = (fa_u32)stream;
    c.v[3] = (fa_u32)(stream >> 32);
    return fa_philox4x32_10(c, (fa_u32)seed, (fa_u32)(seed >> 32));
}

/* The word of a block that holds column col's bits: word (col % 8) / 2. */
FA_PHILOX_FN fa_u32 fa_dropout_word(fa_philox4 block, fa_u64 col)
{
    /* by selects: a run-time index would put the block in a GPU's local memory */
    const unsigned k = (unsigned)(col >> 1) & 3u;
    const fa_u32 lo = (k & 1u) ? block.v[1] : block.v[0], hi = (k & 1u) ? block.v[3] : block.v[2];
    return (k & 2u) ? hi : lo;
}

/* Column col's 16 bits of its word w (col even: the low half). */
FA_PHILOX_FN fa_u32 fa_dropout_bits(fa_u32 w, fa_u64 col)
{
    return (w >> (16u * ((unsigned)col & 1u))) & 0xffffu;
}

/* 1 if element (batch, head, row, col) is kept, 0 if dropped. */
FA_PHILOX_FN int fa_dropout_keep(fa_u64 seed, fa_u64 offset, fa_u64 batch, fa_u64 heads_q, fa_u64 head,
                                 fa_u64 row, fa_u64 col, fa_u32 threshold)
{
    fa_philox4 r = fa_dropout_block(seed, offset, batch, heads_q, head, row, col);
    return fa_dropout_bits(fa_dropout_word(r, col), col) >= threshold;
}

#if !defined(__OPENCL_VERSION__) && !defined(__CUDACC_RTC__) && !defined(__HIPCC_RTC__) /* NVRTC and hipRTC compile no host function */
/* Host side: the integer threshold for drop probability p in [0, 1): floor(p * 2^16), at most
 * 2^16 - 1; 0 (nothing dropped) for p < 2^-16, NaN and p <= 0. */
static inline fa_u32 fa_dropout_threshold(double p)
{
    if (!(p > 0.0))
        return 0u;
    double t = p * 65536.0;
    if (t >= 65535.0)
        return 65535u;
    return (fa_u32)t;
}
#endif

#endif /* FA_PHILOX_H */
