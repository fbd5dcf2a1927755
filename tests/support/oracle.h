/* oracle.h: the float64 reference (reference.c) behind the public API, for code that
 * sees include/flashattn.h only: the flashattn tool's `run --check`. Part of the flashattn_reference
 * static library (tests/support/meson.build), not of libflashattn.
 *
 * The arguments are those of fa_forward / fa_backward with every tensor, cu_seqlens,
 * alibi_slopes and learnable_sink in host memory; cpu must be a context of the "cpu" backend,
 * which validates them exactly as a call would (its message says why a call is refused); the
 * backward computes no dsink here (reference.h's fa_ref_backward does). Each function computes the
 * float64 reference (fa_ref_*) and the naive same-precision baseline (fa_naive_*: fp32 arithmetic,
 * P, dP and dS rounded to the input dtype), the yardstick of the conformance rule. The outputs are
 * in a canonical contiguous layout that does not depend on the arguments' strides:
 *   dq           [total_q, heads_q, d]    row b * seqlen_q + i (dense) or cu_seqlens_q[b] + i
 *   o            [total_q, heads_q, d_v]  (d_v: v's last dimension)
 *   dk           [total_k, heads_kv, d]
 *   dv           [total_k, heads_kv, d_v]
 *   lse          [heads_q, total_q]
 * Returns FA_ERR_INVALID_ARG for a context of another backend or a NULL output, what validation
 * returns for bad arguments, FA_ERR_OUT_OF_MEMORY when the scratch cannot be allocated.
 * progress (may be NULL) is called with user after each query row of each phase, the reference's
 * and then the naive baseline's, with the rows done and the total: for a progress display, since
 * at long sequence lengths a call takes minutes. */
#ifndef FA_SUPPORT_ORACLE_H
#define FA_SUPPORT_ORACLE_H

#include "flashattn.h"

typedef void (*fa_oracle_progress_fn)(void *user, int64_t done, int64_t total);

fa_status fa_oracle_forward(fa_context *cpu, const fa_fwd_args *args, double *ref_o, double *ref_lse,
                            double *naive_o, double *naive_lse, fa_oracle_progress_fn progress, void *user);
fa_status fa_oracle_backward(fa_context *cpu, const fa_bwd_args *args, double *ref_dq, double *ref_dk,
                             double *ref_dv, double *naive_dq, double *naive_dk, double *naive_dv,
                             fa_oracle_progress_fn progress, void *user);

#endif
