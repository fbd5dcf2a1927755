/* oracle.c: the float64 reference behind the public API (oracle.h): validation on a CPU context
 * fills the fa_problem that reference.c reads. */
#include "oracle.h"
#include "internal.h"
#include "reference.h"

#include <stdlib.h>
#include <string.h>

static fa_status require_cpu(fa_context *cpu)
{
    if (!cpu)
        return FA_ERR_INVALID_ARG;
    if (strcmp(fa_context_backend_name(cpu), "cpu") != 0)
        return FA_ERROR(cpu, FA_ERR_INVALID_ARG, "the float64 reference reads host memory: it needs a cpu context, "
                                                 "not %s", fa_context_backend_name(cpu));
    return FA_SUCCESS;
}

fa_status fa_oracle_forward(fa_context *cpu, const fa_fwd_args *args, double *ref_o, double *ref_lse,
                            double *naive_o, double *naive_lse, fa_oracle_progress_fn progress, void *user)
{
    fa_status st = require_cpu(cpu);
    if (st != FA_SUCCESS)
        return st;
    if (!args || !ref_o || !ref_lse || !naive_o || !naive_lse)
        return FA_ERROR(cpu, FA_ERR_INVALID_ARG, "fa_oracle_forward: NULL argument");
    fa_problem p;
    int32_t *cu_host = NULL;
    st = fa_validate_forward(cpu, args, &p, &cu_host);
    fa_ref_progress pr = {progress, user, 0, st == FA_SUCCESS ? 2 * fa_ref_progress_units(&p) : 0};
    if (st == FA_SUCCESS)
        st = fa_ref_forward_progress(&p, ref_o, ref_lse, &pr);
    if (st == FA_SUCCESS)
        st = fa_naive_forward_progress(&p, naive_o, naive_lse, &pr);
    free(cu_host);
    return st;
}

fa_status fa_oracle_backward(fa_context *cpu, const fa_bwd_args *args, double *ref_dq, double *ref_dk,
                             double *ref_dv, double *naive_dq, double *naive_dk, double *naive_dv,
                             fa_oracle_progress_fn progress, void *user)
{
    fa_status st = require_cpu(cpu);
    if (st != FA_SUCCESS)
        return st;
    if (!args || !ref_dq || !ref_dk || !ref_dv || !naive_dq || !naive_dk || !naive_dv)
        return FA_ERROR(cpu, FA_ERR_INVALID_ARG, "fa_oracle_backward: NULL argument");
    fa_problem p;
    int32_t *cu_host = NULL;
    st = fa_validate_backward(cpu, args, &p, &cu_host);
    fa_ref_progress pr = {progress, user, 0, st == FA_SUCCESS ? 2 * fa_ref_progress_units(&p) : 0};
    if (st == FA_SUCCESS)
        st = fa_ref_backward_progress(&p, ref_dq, ref_dk, ref_dv, NULL, &pr);
    if (st == FA_SUCCESS)
        st = fa_naive_backward_progress(&p, naive_dq, naive_dk, naive_dv, NULL, &pr);
    free(cu_host);
    return st;
}
