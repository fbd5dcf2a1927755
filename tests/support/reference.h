/* reference.h: the float64 materialising oracle and the naive same-precision baseline.
 *
 * Both read the problem's inputs (host memory, any dtype and strides) and write outputs in a
 * canonical contiguous layout that does not depend on the user's strides:
 *   dq           [total_q, heads_q, d]       row r = b*seqlen_q + i (dense) or cu_q[b] + i (varlen)
 *   o            [total_q, heads_q, d_v]
 *   dk           [total_k, heads_kv, d]
 *   dv           [total_k, heads_kv, d_v]
 *   lse          [heads_q, total_q]
 *   dsink        [heads_q]                   (the backward's, when asked: not NULL, and p->sink set)
 * fa_ref_*: every product and sum in double, S and P materialised, dropout from core/philox.h, and
 * visibility (causal / window) from flashattn.h's rule written out here, not from core/mask.h.
 * fa_naive_*: what a plain implementation in the input precision gives: fp32 arithmetic, P (and
 * in the backward dP, dS) rounded to the input dtype before each matrix product, outputs rounded
 * to the dtype; dsink in fp32 (its output's dtype) from D_i = dO_i . O_i with the problem's o, the
 * O a backward is given (its rounding to the dtype reaches dsink whole). Its error against
 * fa_ref_* is the yardstick of the conformance pass rule. p->sink (the learnable sink) must point
 * to host memory here. */
#ifndef FA_CPU_REFERENCE_H
#define FA_CPU_REFERENCE_H

#include "internal.h"

/* Returns FA_ERR_OUT_OF_MEMORY if the N x N scratch cannot be allocated. For the backward,
 * p->backward must be set and the problem's o, lse, dout views are read (o and lse from any
 * implementation: the reference recomputes what it needs from Q, K, V, dO only and ignores them;
 * the naive baseline reads o for dsink). */
fa_status fa_ref_forward(const fa_problem *p, double *o, double *lse);
/* dsink may be NULL (not computed); without a sink it is written as zeros. */
fa_status fa_ref_backward(const fa_problem *p, double *dq, double *dk, double *dv, double *dsink);
fa_status fa_naive_forward(const fa_problem *p, double *o, double *lse);
fa_status fa_naive_backward(const fa_problem *p, double *dq, double *dk, double *dv, double *dsink);

/* Progress of a long call (run --check at long sequence lengths takes minutes): report, when not
 * NULL, is called after each query row of each phase with done and total, which start as the
 * caller sets them; the caller decides what to show and how often (the reference never prints).
 * One fa_ref_* or fa_naive_* call counts fa_ref_progress_units(p) rows: two phases (scores and
 * probabilities, then the products) over every query row of every head. */
typedef struct fa_ref_progress {
    void (*report)(void *user, int64_t done, int64_t total);
    void *user;
    int64_t done, total;
} fa_ref_progress;
int64_t fa_ref_progress_units(const fa_problem *p);
fa_status fa_ref_forward_progress(const fa_problem *p, double *o, double *lse, fa_ref_progress *progress);
fa_status fa_ref_backward_progress(const fa_problem *p, double *dq, double *dk, double *dv, double *dsink,
                                   fa_ref_progress *progress);
fa_status fa_naive_forward_progress(const fa_problem *p, double *o, double *lse, fa_ref_progress *progress);
fa_status fa_naive_backward_progress(const fa_problem *p, double *dq, double *dk, double *dv, double *dsink,
                                     fa_ref_progress *progress);

/* Element (row, head, c) of a view as double. */
double fa_view_get(const fa_view *v, fa_dtype dt, int64_t b, int64_t row, int64_t h, int64_t c);
/* Round x to the precision of dt (identity for fp32 beyond float rounding). */
double fa_round_to(fa_dtype dt, double x);

#endif
