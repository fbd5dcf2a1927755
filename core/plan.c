/* plan.c: tile sizes. The paper's rule (Dao et al. 2022, Algorithm 1): with on-chip memory of M
 * elements, B_c = ceil(M / 4d) and B_r = min(ceil(M / 4d), d), so that the Q, K, V, O tiles fit.
 * A backend then clamps these into what its kernels are built for. */
#include "internal.h"

static int64_t ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

void fa_plan_paper_blocks(int64_t onchip_bytes, int64_t d, int64_t *block_q, int64_t *block_k)
{
    int64_t m = onchip_bytes / 4; /* fp32 elements */
    if (m < 1)
        m = 1;
    if (d < 1)
        d = 1;
    int64_t bc = ceil_div(m, 4 * d);
    *block_k = bc;
    *block_q = bc < d ? bc : d;
}

/* Clamp into [min_block, max] and round down to a multiple of lim->multiple (never below
 * min_block, which must itself be a multiple). */
static int64_t clamp_block(int64_t b, int64_t lo, int64_t hi, int64_t multiple)
{
    if (b > hi)
        b = hi;
    if (multiple > 1)
        b -= b % multiple;
    if (b < lo)
        b = lo;
    return b;
}

void fa_plan_tiles(const fa_tile_limits *lim, int64_t d, int64_t *block_q, int64_t *block_k)
{
    int64_t bq, bk;
    fa_plan_paper_blocks(lim->onchip_bytes, d, &bq, &bk);
    *block_q = clamp_block(bq, lim->min_block, lim->max_block_q, lim->multiple);
    *block_k = clamp_block(bk, lim->min_block, lim->max_block_k, lim->multiple);
}
