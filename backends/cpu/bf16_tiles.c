/* bf16_tiles.c: the bf16 matrix product of the kernel table "amx" (isa.h), on Intel AMX tiles:
 * C[M x N] fp32 (+)= A[M x K] B[K x N] with A and B in bf16. TDPBF16PS multiplies a 16 x 32
 * bf16 tile of A by a 32 x 16 tile of B held as 16 rows of 16 bf16 pairs (row kp holds
 * B[2 kp][n], B[2 kp + 1][n] for n = 0 .. 15: the "pair-packed" layout of isa.h) and adds the
 * products into a 16 x 16 fp32 tile; products of bf16 are exact in fp32, the sums are fp32.
 *
 * The eight tiles are used as C 2 x 2 (tiles 0-3), A 2 x 1 (4, 5) and B 1 x 2 (6, 7): a 32 x 32
 * block of C per pass over K, each loaded A and B tile used twice. Every tile is 16 rows x 64
 * bytes (one configuration for the whole task: bf16_tiles_begin loads it, bf16_tiles_end releases
 * the tiles).
 *
 * Compiled twice (meson.build): with -mamx-tile -mamx-bf16 for the "amx" table, and, in builds with
 * the tests (-Dtests=true), with FA_CPU_AMX_EMULATE: the same tile program
 * run by plain C on eight tile-sized arrays, so that machines without AMX test every line above
 * the tile instructions (table "amx-emulated", chosen only by FLASHATTN_CPU_ISA). */
#include "isa.h"

#include <string.h>

#if defined(FA_CPU_AMX_EMULATE)
#define FN(name) fa_cpu_amx_emulated_##name

/* the eight tile registers: 16 rows of 64 bytes, read as bf16 (A and B tiles) or fp32 (C tiles)
 * through the union */
typedef union tile_bytes {
    unsigned char b[16][64];
    uint16_t h[16][32];
    float f[16][16];
} tile_bytes;
static _Thread_local tile_bytes tile_reg[8];

static void tile_load(int t, const void *p, int64_t stride)
{
    for (int r = 0; r < 16; ++r)
        memcpy(tile_reg[t].b[r], (const char *)p + r * stride, 64);
}

static void tile_store(int t, void *p, int64_t stride)
{
    for (int r = 0; r < 16; ++r)
        memcpy((char *)p + r * stride, tile_reg[t].b[r], 64);
}

static float bf16_value(uint16_t h)
{
    union {
        uint32_t u;
        float f;
    } x = {.u = (uint32_t)h << 16};
    return x.f;
}

/* C tile c += A tile a (16 x 32 bf16) times pair-packed B tile b (16 pair rows x 16 columns: pair
 * n of row kp at h[kp][2 n], h[kp][2 n + 1]), the sums in k order */
static void tile_dp(int c, int a, int b)
{
    const tile_bytes *ta = &tile_reg[a], *tb = &tile_reg[b];
    tile_bytes *tc = &tile_reg[c];
    for (int m = 0; m < 16; ++m)
        for (int n = 0; n < 16; ++n) {
            float acc = tc->f[m][n];
            for (int kp = 0; kp < 16; ++kp) {
                acc += bf16_value(ta->h[m][2 * kp]) * bf16_value(tb->h[kp][2 * n]);
                acc += bf16_value(ta->h[m][2 * kp + 1]) * bf16_value(tb->h[kp][2 * n + 1]);
            }
            tc->f[m][n] = acc;
        }
}

#define TILE_LOAD(t, p, stride) tile_load(t, p, stride)
#define TILE_STORE(t, p, stride) tile_store(t, p, stride)
#define TILE_ZERO(t) memset(&tile_reg[t], 0, sizeof tile_reg[t])
#define TILE_DP(c, a, b) tile_dp(c, a, b)

void FN(bf16_tiles_begin)(void)
{
}

void FN(bf16_tiles_end)(void)
{
}

#else /* AMX */
#include <immintrin.h>
#define FN(name) fa_cpu_amx_##name

#define TILE_LOAD(t, p, stride) _tile_loadd(t, p, stride)
#define TILE_STORE(t, p, stride) _tile_stored(t, p, stride)
#define TILE_ZERO(t) _tile_zero(t)
#define TILE_DP(c, a, b) _tile_dpbf16ps(c, a, b)

/* LDTILECFG's 64-byte operand, palette 1 */
typedef struct tile_config {
    uint8_t palette;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

void FN(bf16_tiles_begin)(void)
{
    tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; ++t) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = 16;
    }
    _tile_loadconfig(&cfg);
}

void FN(bf16_tiles_end)(void)
{
    _tile_release();
}
#endif

/* One block of C: mb x nb tiles of 16 x 16 (mb, nb in {1, 2}) at C, over all of K. */
static inline __attribute__((always_inline)) void block(const int mb, const int nb, int64_t K, const uint16_t *A,
                                                        int64_t lda, const uint32_t *B, int64_t ldb, float *C,
                                                        int64_t ldc, int accumulate)
{
    const int64_t sa = lda * 2, sb = ldb * 4, sc = ldc * 4; /* row strides in bytes */
    if (accumulate) {
        TILE_LOAD(0, C, sc);
        if (nb > 1)
            TILE_LOAD(1, C + 16, sc);
        if (mb > 1) {
            TILE_LOAD(2, C + 16 * ldc, sc);
            if (nb > 1)
                TILE_LOAD(3, C + 16 * ldc + 16, sc);
        }
    } else {
        TILE_ZERO(0);
        if (nb > 1)
            TILE_ZERO(1);
        if (mb > 1) {
            TILE_ZERO(2);
            if (nb > 1)
                TILE_ZERO(3);
        }
    }
    for (int64_t k = 0; k < K; k += 32) {
        const uint32_t *b = B + k / 2 * ldb;
        TILE_LOAD(4, A + k, sa);
        TILE_LOAD(6, b, sb);
        if (nb > 1)
            TILE_LOAD(7, b + 16, sb);
        if (mb > 1)
            TILE_LOAD(5, A + 16 * lda + k, sa);
        TILE_DP(0, 4, 6);
        if (nb > 1)
            TILE_DP(1, 4, 7);
        if (mb > 1) {
            TILE_DP(2, 5, 6);
            if (nb > 1)
                TILE_DP(3, 5, 7);
        }
    }
    TILE_STORE(0, C, sc);
    if (nb > 1)
        TILE_STORE(1, C + 16, sc);
    if (mb > 1) {
        TILE_STORE(2, C + 16 * ldc, sc);
        if (nb > 1)
            TILE_STORE(3, C + 16 * ldc + 16, sc);
    }
}

void FN(gemm_bf16)(int64_t M, int64_t N, int64_t K, const uint16_t *A, int64_t lda, const uint32_t *B, int64_t ldb,
                   float *C, int64_t ldc, int accumulate)
{
    for (int64_t j = 0; j < N; j += 32) {
        const int nb = N - j >= 32 ? 2 : 1;
        for (int64_t i = 0; i < M; i += 32) {
            const uint16_t *a = A + i * lda;
            float *c = C + i * ldc + j;
            if (M - i >= 32) {
                if (nb == 2)
                    block(2, 2, K, a, lda, B + j, ldb, c, ldc, accumulate);
                else
                    block(2, 1, K, a, lda, B + j, ldb, c, ldc, accumulate);
            } else {
                if (nb == 2)
                    block(1, 2, K, a, lda, B + j, ldb, c, ldc, accumulate);
                else
                    block(1, 1, K, a, lda, B + j, ldb, c, ldc, accumulate);
            }
        }
    }
}
