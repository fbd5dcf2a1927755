/* harness.h: one conformance harness for every backend. A case describes a problem; the harness
 * builds strided inputs in the case's dtype, runs the backend under test through the public API
 * and the memory helpers, and holds its outputs to the float64 reference with the measured pass
 * rule: max|kernel - ref64| <= factor * max|naive_same_precision - ref64| + floor (factor 2 for
 * O, 3 for gradients and dsink), no NaN where the reference has none, guard bytes after every buffer and
 * gaps inside strided outputs untouched, every output element written. fp16 / bf16 cases also run
 * an fp32-output twin where the backend offers one (FA_FEATURE_F32_OUTPUT): every fp16 / bf16
 * output must equal the twin's fp32 value rounded to nearest even, by a rounding written here
 * independently of the library's conversions. */
#ifndef FA_HARNESS_H
#define FA_HARNESS_H

#include "flashattn.h"

#include <stdint.h>

typedef enum layout_kind {
    LAYOUT_CONTIGUOUS = 0,
    LAYOUT_PADDED,   /* gaps after d, after each row and each batch */
    LAYOUT_BHSD,     /* [batch, heads, seqlen, d] in memory, addressed through strides */
    LAYOUT_PADDED_OUTPUTS /* inputs contiguous, the outputs (O, dQ, dK, dV) padded: rows that are not
                             16-byte aligned beside inputs that are */
} layout_kind;

typedef struct conf_case {
    char name[128];
    fa_dtype dtype;
    int64_t batch, seqlen_q, seqlen_k, heads_q, heads_kv, d;
    int causal;
    int64_t window_left, window_right;
    float scale;            /* 0 = default */
    float dropout_p;
    uint64_t seed, offset;
    fa_block_pattern block; /* FA_BLOCK_DENSE with block_q 0 = no block mask */
    int64_t block_q, block_k, block_param;
    double block_density;
    int block_per_head;
    int varlen;             /* lengths below instead of seqlen_q/k */
    int64_t len_q[8], len_k[8];
    layout_kind layout;
    int backward;
    int deterministic;
    float softcap;          /* 0 = off */
    int alibi;              /* ALiBi slopes: 0 none, 1 [heads_q], 2 [batch][heads_q + 3] (rows padded) */
    int sink;               /* learnable sink: a conf_sink value (0: none) */
    int64_t d_v;            /* value head dim of V, O, dO, dV; 0: d */
} conf_case;

/* The learnable sink's values per query head: uniform in [-2, 2] (competing with the keys' scores),
 * about +8 (dominating every row: O shrinks by exp(LSE0 - LSE)), or about -20 (almost no effect). */
enum conf_sink { SINK_NONE = 0, SINK_RANDOM, SINK_LARGE, SINK_NEGATIVE };

/* The errors a run measured; filled by conf_run. */
typedef struct conf_result {
    double err_o, naive_o, bound_o;
    double err_lse, bound_lse;
    double err_grad[3], naive_grad[3], bound_grad[3];
    double err_dsink, naive_dsink, bound_dsink; /* backward with a sink */
    int f32_twin; /* 1 when the fp32-output twin ran: the fp16/bf16 outputs equal its values rounded */
    char f32_twin_skip[256]; /* why it did not run, for fp16 / bf16 cases */
    int skipped;
    char skip_reason[256];
    char failure[512]; /* empty when the case passed */
} conf_result;

conf_case conf_case_default(const char *name);
/* Runs one case on ctx; returns 0 when it passed or was skipped (result says which). */
int conf_run(fa_context *ctx, const conf_case *c, conf_result *r);

/* The grid: fills up to max cases, returns the count. full = 0 gives the short CI grid. */
int conf_grid(conf_case *cases, int max, int full);

#endif
