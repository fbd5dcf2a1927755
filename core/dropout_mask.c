/* dropout_mask.c: fa_dropout_keep_mask, the elements dropout keeps, computed on the host from the
 * one Philox definition (core/philox.h) that every backend's kernels apply. */
#include "internal.h"
#include "philox.h"

#include <stdint.h>

/* The same fa_dropout_keep and threshold as the kernels (the CPU backend's apply_dropout), one
 * element at a time. */
fa_status fa_dropout_keep_mask(uint64_t seed, uint64_t offset, float p, int64_t batch, int64_t heads, int64_t rows,
                               int64_t cols, uint8_t *keep)
{
    if (!(p >= 0.0f && p < 1.0f))
        return FA_ERROR(NULL, FA_ERR_INVALID_ARG, "fa_dropout_keep_mask: p = %g must be in [0, 1)", (double)p);
    if (batch < 0 || heads < 0 || rows < 0 || cols < 0)
        return FA_ERROR(NULL, FA_ERR_INVALID_ARG,
                        "fa_dropout_keep_mask: batch = %lld, heads = %lld, rows = %lld, cols = %lld must be >= 0",
                        (long long)batch, (long long)heads, (long long)rows, (long long)cols);
    int64_t n;
    if (!fa_mul_ok(batch, heads, &n) || !fa_mul_ok(n, rows, &n) || !fa_mul_ok(n, cols, &n))
        return FA_ERROR(NULL, FA_ERR_OVERFLOW, "fa_dropout_keep_mask: batch x heads x rows x cols overflows 64 bits");
    if (!keep && n > 0)
        return FA_ERROR(NULL, FA_ERR_INVALID_ARG, "fa_dropout_keep_mask: keep is NULL");
    uint32_t threshold = fa_dropout_threshold(p);
    for (int64_t b = 0; b < batch; ++b)
        for (int64_t h = 0; h < heads; ++h)
            for (int64_t i = 0; i < rows; ++i) {
                uint8_t *row = keep + ((b * heads + h) * rows + i) * cols;
                for (int64_t j = 0; j < cols; ++j)
                    row[j] = (uint8_t)fa_dropout_keep(seed, offset, (uint64_t)b, (uint64_t)heads, (uint64_t)h,
                                                      (uint64_t)i, (uint64_t)j, threshold);
            }
    fa_clear_error(NULL);
    return FA_SUCCESS;
}
