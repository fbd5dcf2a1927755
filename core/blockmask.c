/* blockmask.c: block-sparse masks: constructors for the paper's patterns and user bitmaps,
 * validation against a problem, and the per-query-tile lists of non-empty key tiles at the
 * kernel's own tiling (which need not equal the mask's block size). */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t ceil_div(int64_t a, int64_t b)
{
    return a / b + (a % b != 0); /* a + b - 1 could overflow for a near INT64_MAX */
}

/* SplitMix64: a seeded stream for the random pattern (its exact bits are part of the API only
 * through "same seed, same mask"). */
static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* FA_ERR_OVERFLOW when heads * rows * cols bytes cannot even be counted, OUT_OF_MEMORY when
 * they can but calloc fails (each with its message for fa_last_error). */
static fa_status mask_alloc(fa_block_mask *mask, int64_t heads, int64_t rows, int64_t cols, int64_t bq, int64_t bk)
{
    int64_t n;
    if (!fa_mul_ok(heads, rows, &n) || !fa_mul_ok(n, cols, &n) || (uint64_t)n > SIZE_MAX)
        return FA_ERROR(NULL, FA_ERR_OVERFLOW, "block mask: heads %lld x rows %lld x cols %lld bytes overflow",
                        (long long)heads, (long long)rows, (long long)cols);
    mask->bits = calloc(n > 0 ? (size_t)n : 1, 1);
    if (!mask->bits)
        return FA_ERROR(NULL, FA_ERR_OUT_OF_MEMORY, "block mask: cannot allocate %lld bytes", (long long)n);
    mask->heads = heads;
    mask->rows = rows;
    mask->cols = cols;
    mask->block_q = bq;
    mask->block_k = bk;
    return FA_SUCCESS;
}

fa_status fa_block_mask_create(fa_block_mask *mask, fa_block_pattern pattern, int64_t heads, int64_t seqlen_q,
                               int64_t seqlen_k, int64_t block_q, int64_t block_k, int64_t param, double density,
                               uint64_t seed)
{
    if (!mask)
        return FA_ERROR(NULL, FA_ERR_INVALID_ARG, "fa_block_mask_create: mask is NULL");
    memset(mask, 0, sizeof *mask);
    if (heads < 1)
        return FA_ERROR(NULL, FA_ERR_INVALID_ARG, "fa_block_mask_create: heads = %lld must be >= 1", (long long)heads);
    if (seqlen_q < 0 || seqlen_k < 0)
        return FA_ERROR(NULL, FA_ERR_INVALID_ARG, "fa_block_mask_create: seqlen_q = %lld and seqlen_k = %lld must be >= 0",
                        (long long)seqlen_q, (long long)seqlen_k);
    if (block_q < 1 || block_k < 1)
        return FA_ERROR(NULL, FA_ERR_INVALID_ARG, "fa_block_mask_create: block_q = %lld and block_k = %lld must be >= 1",
                        (long long)block_q, (long long)block_k);
    if (pattern < FA_BLOCK_DENSE || pattern > FA_BLOCK_RANDOM)
        return FA_ERROR(NULL, FA_ERR_INVALID_ARG, "fa_block_mask_create: unknown pattern %d", (int)pattern);
    if (pattern == FA_BLOCK_LOCAL && param < 0)
        return FA_ERROR(NULL, FA_ERR_INVALID_ARG, "fa_block_mask_create: LOCAL band width param = %lld must be >= 0",
                        (long long)param);
    if (pattern == FA_BLOCK_STRIDED && param < 1)
        return FA_ERROR(NULL, FA_ERR_INVALID_ARG, "fa_block_mask_create: STRIDED stride param = %lld must be >= 1",
                        (long long)param);
    if (pattern == FA_BLOCK_RANDOM && !(density >= 0.0 && density <= 1.0))
        return FA_ERROR(NULL, FA_ERR_INVALID_ARG, "fa_block_mask_create: RANDOM density = %g must be in [0, 1]", density);
    int64_t rows = ceil_div(seqlen_q, block_q), cols = ceil_div(seqlen_k, block_k);
    fa_status st = mask_alloc(mask, heads, rows, cols, block_q, block_k);
    if (st != FA_SUCCESS)
        return st;
    uint64_t state = seed;
    /* keep probability as a 53-bit fraction compare */
    for (int64_t h = 0; h < heads; ++h)
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < cols; ++c) {
                int keep = 0;
                int64_t diff = r > c ? r - c : c - r;
                switch (pattern) {
                case FA_BLOCK_DENSE: keep = 1; break;
                case FA_BLOCK_BUTTERFLY: keep = __builtin_popcountll((uint64_t)(r ^ c)) <= 1; break;
                case FA_BLOCK_LOCAL: keep = diff <= param; break;
                case FA_BLOCK_STRIDED: keep = diff % param == 0; break;
                case FA_BLOCK_RANDOM: {
                    double u = (double)(splitmix64(&state) >> 11) * (1.0 / 9007199254740992.0);
                    keep = u < density || c == r * cols / (rows > 0 ? rows : 1);
                    break;
                }
                }
                mask->bits[(h * rows + r) * cols + c] = (uint8_t)keep;
            }
    fa_clear_error(NULL);
    return FA_SUCCESS;
}

fa_status fa_block_mask_from_bitmap(fa_block_mask *mask, const uint8_t *bitmap, int64_t heads, int64_t rows,
                                    int64_t cols, int64_t block_q, int64_t block_k)
{
    if (!mask)
        return FA_ERROR(NULL, FA_ERR_INVALID_ARG, "fa_block_mask_from_bitmap: mask is NULL");
    memset(mask, 0, sizeof *mask);
    if (heads < 1)
        return FA_ERROR(NULL, FA_ERR_INVALID_ARG, "fa_block_mask_from_bitmap: heads = %lld must be >= 1",
                        (long long)heads);
    if (rows < 0 || cols < 0)
        return FA_ERROR(NULL, FA_ERR_INVALID_ARG, "fa_block_mask_from_bitmap: rows = %lld and cols = %lld must be >= 0",
                        (long long)rows, (long long)cols);
    if (block_q < 1 || block_k < 1)
        return FA_ERROR(NULL, FA_ERR_INVALID_ARG, "fa_block_mask_from_bitmap: block_q = %lld and block_k = %lld must be >= 1",
                        (long long)block_q, (long long)block_k);
    if (!bitmap && rows > 0 && cols > 0)
        return FA_ERROR(NULL, FA_ERR_INVALID_ARG, "fa_block_mask_from_bitmap: bitmap is NULL");
    fa_status st = mask_alloc(mask, heads, rows, cols, block_q, block_k);
    if (st != FA_SUCCESS)
        return st;
    for (int64_t i = 0; i < heads * rows * cols; ++i)
        mask->bits[i] = bitmap[i] != 0;
    fa_clear_error(NULL);
    return FA_SUCCESS;
}

void fa_block_mask_destroy(fa_block_mask *mask)
{
    if (!mask)
        return;
    free(mask->bits);
    memset(mask, 0, sizeof *mask);
}

double fa_block_mask_density(const fa_block_mask *mask)
{
    if (!mask || !mask->bits)
        return 0.0;
    int64_t n, kept = 0;
    if (mask->heads < 1 || mask->rows < 0 || mask->cols < 0 || !fa_mul_ok(mask->heads, mask->rows, &n) ||
        !fa_mul_ok(n, mask->cols, &n) || n <= 0)
        return 0.0;
    for (int64_t i = 0; i < n; ++i)
        kept += mask->bits[i] != 0;
    return (double)kept / (double)n;
}

fa_status fa_block_mask_check(const fa_block_mask *m, int64_t heads_q, int64_t seqlen_q, int64_t seqlen_k, char *why,
                              size_t why_len)
{
    const char *msg = NULL;
    char buf[160];
    int64_t cells;
    if (m->block_q < 1 || m->block_k < 1)
        msg = "block sizes must be >= 1";
    else if (m->heads != 1 && m->heads != heads_q)
        msg = "heads must be 1 (broadcast) or heads_q";
    else if (!fa_mul_ok(m->heads, m->rows, &cells) || !fa_mul_ok(cells, m->cols, &cells))
        msg = "heads x rows x cols overflows 64 bits";
    else if (m->rows < ceil_div(seqlen_q, m->block_q) || m->cols < ceil_div(seqlen_k, m->block_k)) {
        snprintf(buf, sizeof buf, "%lld x %lld blocks do not cover seqlen %lld x %lld at block size %lld x %lld",
                 (long long)m->rows, (long long)m->cols, (long long)seqlen_q, (long long)seqlen_k,
                 (long long)m->block_q, (long long)m->block_k);
        msg = buf;
    } else if (!m->bits && m->rows > 0 && m->cols > 0)
        msg = "bits is NULL";
    if (!msg)
        return FA_SUCCESS;
    if (why && why_len)
        snprintf(why, why_len, "%s", msg);
    return FA_ERR_INVALID_ARG;
}

/* Class of kernel tile (qt, kt) of mask head bits under the block mask: EMPTY, PARTIAL or FULL. */
static fa_tile_class kernel_tile_class(const fa_block_mask *m, const uint8_t *bits, int64_t seqlen_q,
                                       int64_t seqlen_k, int64_t block_q, int64_t block_k, int64_t qt, int64_t kt)
{
    int64_t q0 = qt * block_q, q1 = q0 + block_q < seqlen_q ? q0 + block_q : seqlen_q;
    int64_t k0 = kt * block_k, k1 = k0 + block_k < seqlen_k ? k0 + block_k : seqlen_k;
    int64_t r0 = q0 / m->block_q, r1 = (q1 - 1) / m->block_q;
    int64_t c0 = k0 / m->block_k, c1 = (k1 - 1) / m->block_k;
    int any = 0, all = 1;
    for (int64_t r = r0; r <= r1; ++r)
        for (int64_t c = c0; c <= c1; ++c) {
            int bit = bits[r * m->cols + c] != 0;
            any |= bit;
            all &= bit;
        }
    return any ? (all ? FA_TILE_FULL : FA_TILE_PARTIAL) : FA_TILE_EMPTY;
}

fa_status fa_block_lists_build(const fa_block_mask *m, int64_t heads_q, int64_t seqlen_q, int64_t seqlen_k,
                               int64_t block_q, int64_t block_k, fa_block_lists *out)
{
    (void)heads_q;
    memset(out, 0, sizeof *out);
    int64_t nq = ceil_div(seqlen_q, block_q), nk = ceil_div(seqlen_k, block_k), heads = m->heads, rows;
    if (!fa_mul_ok(heads, nq, &rows) || rows >= INT64_MAX / (int64_t)sizeof(int64_t) || nk > INT32_MAX)
        return FA_ERR_OVERFLOW;
    out->heads = heads;
    out->nq = nq;
    out->nk = nk;
    out->block_q = block_q;
    out->block_k = block_k;
    out->row_ptr = malloc(sizeof(int64_t) * (size_t)(rows + 1));
    if (!out->row_ptr)
        return FA_ERR_OUT_OF_MEMORY;
    /* two passes: count, then fill, so the lists take memory in proportion to the mask's
     * non-empty tiles rather than to every tile */
    for (int pass = 0; pass < 2; ++pass) {
        int64_t nnz = 0;
        for (int64_t h = 0; h < heads; ++h) {
            const uint8_t *bits = m->bits + h * m->rows * m->cols;
            for (int64_t qt = 0; qt < nq; ++qt) {
                out->row_ptr[h * nq + qt] = nnz;
                for (int64_t kt = 0; kt < nk; ++kt) {
                    fa_tile_class cls = kernel_tile_class(m, bits, seqlen_q, seqlen_k, block_q, block_k, qt, kt);
                    if (cls == FA_TILE_EMPTY)
                        continue;
                    if (pass == 1) {
                        out->col[nnz] = (int32_t)kt;
                        out->cls[nnz] = (uint8_t)cls;
                    }
                    ++nnz;
                }
            }
        }
        out->row_ptr[rows] = nnz;
        out->nnz = nnz;
        if (pass == 0) {
            out->col = malloc(sizeof(int32_t) * (size_t)(nnz + 1));
            out->cls = malloc((size_t)(nnz + 1));
            if (!out->col || !out->cls) {
                fa_block_lists_free(out);
                return FA_ERR_OUT_OF_MEMORY;
            }
        }
    }
    return FA_SUCCESS;
}

void fa_block_lists_free(fa_block_lists *l)
{
    if (!l)
        return;
    free(l->row_ptr);
    free(l->col);
    free(l->cls);
    memset(l, 0, sizeof *l);
}
