/* softmax.h: the online-softmax state, its update with a new tile, the merge of two partial
 * states, and the LSE convention. One invariant: a row whose every score is masked has
 * m = -inf and l = 0, yields O = 0 and LSE = -inf, and never produces NaN.
 *
 * State of one query row after seeing some keys: m = max score, l = sum exp(s - m), and an
 * accumulator acc = sum exp(s - m) * v (unnormalised). Final O = acc / l, LSE = m + log(l). */
#ifndef FA_SOFTMAX_H
#define FA_SOFTMAX_H

#include <math.h>
#include <stdint.h>

typedef struct fa_softmax_row {
    float m;
    float l;
} fa_softmax_row;

static inline fa_softmax_row fa_softmax_init(void)
{
    fa_softmax_row r = {-INFINITY, 0.0f};
    return r;
}

/* exp(a - b) with the guard: when b is -inf (nothing seen yet) the factor is 0, not NaN. */
static inline float fa_softmax_rescale_factor(float m_old, float m_new)
{
    return m_new == -INFINITY ? 0.0f : expf(m_old - m_new);
}

/* The shift used when exponentiating a tile's scores: the -inf guard maps a row that is still
 * fully masked to shift 0 so exp(-inf - 0) = 0 instead of exp(-inf + inf) = NaN. */
static inline float fa_softmax_shift(float m)
{
    return m == -INFINITY ? 0.0f : m;
}

/* Update a row with tile_max (max over the tile's unmasked scores, -inf if none); returns the
 * factor by which the old l and accumulator must be multiplied. The caller then adds
 * sum exp(s - fa_softmax_shift(row->m)) to row->l. */
static inline float fa_softmax_update(fa_softmax_row *row, float tile_max)
{
    float m_new = row->m > tile_max ? row->m : tile_max;
    /* an unchanged max gives exactly 1 without the call (most tiles after the first few) */
    float alpha = row->m == -INFINITY ? 0.0f : m_new == row->m ? 1.0f : expf(row->m - m_new);
    row->m = m_new;
    row->l *= alpha;
    return alpha;
}

/* Log-sum-exp of a finished row: natural log; -inf for a fully masked row. */
static inline float fa_softmax_lse(fa_softmax_row row)
{
    if (row.l == 0.0f || row.m == -INFINITY)
        return -INFINITY;
    return row.m + logf(row.l);
}

/* 1 / l for the final normalisation, 0 for a fully masked row. */
static inline float fa_softmax_inv_sum(fa_softmax_row row)
{
    return row.l == 0.0f ? 0.0f : 1.0f / row.l;
}

/* Merge of two partial results of the same query row over disjoint key sets, given as
 * normalised outputs o_a, o_b (length d) and their LSEs (the form split-KV and ring attention
 * exchange). Writes the merged output into o_out (may alias o_a) and returns the merged LSE.
 * Fully masked parts (LSE -inf) contribute nothing; both masked gives O = 0, LSE = -inf; a NaN
 * LSE gives NaN. */
static inline float fa_softmax_merge(float lse_a, const float *o_a, float lse_b, const float *o_b,
                                     float *o_out, int64_t d)
{
    /* a NaN part makes the merge NaN: never mistaken for a masked one */
    float m = lse_a > lse_b || isnan(lse_a) ? lse_a : lse_b;
    if (m == -INFINITY) {
        for (int64_t c = 0; c < d; ++c)
            o_out[c] = 0.0f;
        return -INFINITY;
    }
    float wa = expf(lse_a - m), wb = expf(lse_b - m);
    float sum = wa + wb;
    float lse = m + logf(sum);
    wa /= sum;
    wb /= sum;
    for (int64_t c = 0; c < d; ++c)
        o_out[c] = wa * o_a[c] + wb * o_b[c];
    return lse;
}

/* P element from a score and the row's LSE in the backward; 0 for a fully masked row. */
static inline float fa_softmax_prob(float s, float lse)
{
    return lse == -INFINITY ? 0.0f : expf(s - lse);
}

#endif /* FA_SOFTMAX_H */
