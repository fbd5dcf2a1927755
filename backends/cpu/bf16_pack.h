/* bf16_pack.h: the operands of the bf16 products (isa.h's gemm_bf16) built from bf16 rows. A is
 * row-major bf16; B is pair-packed: a uint32_t array whose element (kp, n) holds B[2 kp][n] in
 * its low half and B[2 kp + 1][n] in its high half. Every builder zero-pads to the padded shape
 * the product reads, so the padding adds 0 to every sum. */
#ifndef FA_CPU_BF16_PACK_H
#define FA_CPU_BF16_PACK_H

#include "half.h"

#include <stdint.h>
#include <string.h>

static inline uint32_t fa_bf16_pair(uint16_t lo, uint16_t hi)
{
    return (uint32_t)lo | (uint32_t)hi << 16;
}

/* n rows of d bf16 (row i at src + i * ss) into dst (rows x ld, row-major), zero beyond. */
static inline void fa_bf16_rows(const uint16_t *src, int64_t ss, int64_t n, int64_t rows, int64_t d, uint16_t *dst,
                                int64_t ld)
{
    for (int64_t r = 0; r < rows; ++r) {
        uint16_t *out = dst + r * ld;
        if (r < n) {
            memcpy(out, src + r * ss, sizeof(uint16_t) * (size_t)d);
            memset(out + d, 0, sizeof(uint16_t) * (size_t)(ld - d));
        } else {
            memset(out, 0, sizeof(uint16_t) * (size_t)ld);
        }
    }
}

/* B = X^T for the product A X^T, X given as n rows of d (row i at src + i * ss): element (kp, i)
 * of dst (dp / 2 x cols, dp even) pairs X[i][2 kp] and X[i][2 kp + 1]; zero for i >= n or
 * columns >= d. */
static inline void fa_bf16_pairs_of_rows(const uint16_t *src, int64_t ss, int64_t n, int64_t cols, int64_t d,
                                         int64_t dp, uint32_t *dst)
{
    if (n < cols || d < dp)
        memset(dst, 0, sizeof(uint32_t) * (size_t)(dp / 2 * cols));
    for (int64_t i = 0; i < n; ++i) {
        const uint16_t *x = src + i * ss;
        int64_t kp = 0;
        for (; 2 * kp + 1 < d; ++kp)
            dst[kp * cols + i] = fa_bf16_pair(x[2 * kp], x[2 * kp + 1]);
        if (2 * kp < d) /* odd d: the last pair's high half is padding */
            dst[kp * cols + i] = fa_bf16_pair(x[2 * kp], 0);
    }
}

/* B = X for the product A X, X given as n rows of d (row i at src + i * ss), padded to rows
 * (even) x dp: element (kp, c) of dst (rows / 2 x dp) pairs X[2 kp][c] and X[2 kp + 1][c]. */
static inline void fa_bf16_pairs_of_columns(const uint16_t *src, int64_t ss, int64_t n, int64_t rows, int64_t d,
                                            int64_t dp, uint32_t *dst)
{
    for (int64_t kp = 0; kp < rows / 2; ++kp) {
        uint32_t *out = dst + kp * dp;
        int64_t i = 2 * kp;
        if (i + 1 < n) {
            const uint16_t *x0 = src + i * ss, *x1 = x0 + ss;
            for (int64_t c = 0; c < d; ++c)
                out[c] = fa_bf16_pair(x0[c], x1[c]);
        } else if (i < n) {
            const uint16_t *x0 = src + i * ss;
            for (int64_t c = 0; c < d; ++c)
                out[c] = fa_bf16_pair(x0[c], 0);
        } else {
            memset(out, 0, sizeof(uint32_t) * (size_t)d);
        }
        memset(out + d, 0, sizeof(uint32_t) * (size_t)(dp - d));
    }
}

#endif
