/* iomodel.c: device-memory (HBM) traffic of one attention head's forward pass under the IO model
 * of Dao et al. 2022, section 3.2 (Theorem 2), counted exactly for given sizes rather than up to
 * constants. Three algorithms:
 *
 *   standard (the paper's Algorithm 0), every matrix through HBM:
 *     reads  Q, K (N_q d + N_k d), S (N_q N_k), P (N_q N_k), V (N_k d)
 *     writes S (N_q N_k), P (N_q N_k), O (N_q d)
 *   flash, the paper's Algorithm 1 (K/V blocks in the outer loop, T_c = ceil(N_k / B_c) of them):
 *     writes O, l, m once to initialise them (line 2), then for each K/V block j it reads K_j, V_j
 *     once and, for each query block, reads Q_i, O_i, l_i, m_i and writes O_i, l_i, m_i back:
 *     reads  2 N_k d + T_c (2 N_q d) elements and T_c (2 N_q) statistics
 *     writes (T_c + 1) N_q d elements and (T_c + 1) (2 N_q) statistics
 *   flash with query blocks outside (FlashAttention-2's order, the one this library's kernels
 *   use, T_r = ceil(N_q / B_r)): each query block is read once, streams every K and V block, and
 *   writes its O and its log-sum-exp once:
 *     reads  N_q d + T_r (2 N_k d) elements; writes N_q d elements and N_q statistics
 *
 * Elements (Q, K, V, S, P, O) take elem_bytes each, the statistics (l, m, LSE) 4 bytes (fp32).
 * With B_c = ceil(M / 4d) (M in fp32 elements) both flash counts are Theta(N^2 d^2 / M), against
 * Theta(N d + N^2) for the standard algorithm. Caches are not modelled: on a GPU whose L2 holds
 * K and V, the K/V re-reads of the flash algorithms are L2 hits and DRAM sees less. */
#include "internal.h"

#include <string.h>

static int64_t ceil_div64(int64_t a, int64_t b)
{
    return a / b + (a % b != 0);
}

/* a * b + c * e, or -1 when any step overflows */
static int64_t mad2(int64_t a, int64_t b, int64_t c, int64_t e)
{
    int64_t x, y, z;
    if (!fa_mul_ok(a, b, &x) || !fa_mul_ok(c, e, &y) || __builtin_add_overflow(x, y, &z))
        return -1;
    return z;
}

fa_status fa_io_model_compute(int64_t seqlen_q, int64_t seqlen_k, int64_t d, int64_t onchip_bytes, int64_t block_q,
                              int64_t block_k, size_t elem_bytes, fa_io_model *out)
{
    if (!out || seqlen_q < 0 || seqlen_k < 0 || d < 1 || elem_bytes < 1 || elem_bytes > 8 || block_q < 0 ||
        block_k < 0 || (onchip_bytes < 1 && (block_q == 0 || block_k == 0)))
        return FA_ERR_INVALID_ARG;
    fa_io_model r;
    memset(&r, 0, sizeof r);
    int64_t pq = 1, pk = 1;
    if (onchip_bytes >= 1)
        fa_plan_paper_blocks(onchip_bytes, d, &pq, &pk);
    r.block_q = block_q ? block_q : pq;
    r.block_k = block_k ? block_k : pk;
    const int64_t e = (int64_t)elem_bytes, nq = seqlen_q, nk = seqlen_k;
    const int64_t tc = ceil_div64(nk, r.block_k), tr = ceil_div64(nq, r.block_q);
    int64_t nqd, nkd, nn, x, y;
    /* every sum below adds at most three of these, each then below INT64_MAX / 4 */
    if (!fa_mul_ok(nq, d, &nqd) || !fa_mul_ok(nk, d, &nkd) || !fa_mul_ok(nq, nk, &nn) || nqd > INT64_MAX / 4 ||
        nkd > INT64_MAX / 4 || nn > INT64_MAX / 4)
        return FA_ERR_OVERFLOW;

    /* standard: reads (N_q + 2 N_k) d + 2 N_q N_k, writes 2 N_q N_k + N_q d, in elements */
    x = mad2(nqd + 2 * nkd, e, 2 * nn, e);
    y = mad2(2 * nn, e, nqd, e);
    if (x < 0 || y < 0)
        return FA_ERR_OVERFLOW;
    r.standard_read = x;
    r.standard_write = y;

    /* Algorithm 1 */
    int64_t kv, per_j;
    if (!fa_mul_ok(2 * nkd, e, &kv) || (per_j = mad2(2 * nqd, e, 2 * nq, 4)) < 0 || !fa_mul_ok(tc, per_j, &x) ||
        __builtin_add_overflow(x, kv, &x))
        return FA_ERR_OVERFLOW;
    r.flash_read = x;
    if ((per_j = mad2(nqd, e, 2 * nq, 4)) < 0 || !fa_mul_ok(tc + 1, per_j, &y))
        return FA_ERR_OVERFLOW;
    r.flash_write = y;

    /* query blocks outside */
    if (!fa_mul_ok(tr, kv, &x) || (y = mad2(nqd, e, 0, 0)) < 0 || __builtin_add_overflow(x, y, &x))
        return FA_ERR_OVERFLOW;
    r.flash_qouter_read = x;
    if ((y = mad2(nqd, e, nq, 4)) < 0)
        return FA_ERR_OVERFLOW;
    r.flash_qouter_write = y;
    *out = r;
    return FA_SUCCESS;
}
