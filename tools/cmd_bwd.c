/* cmd_bwd.c: `flashattn bwd`: attention gradients on .npy files, Q, K, V, O, LSE, dO -> dQ, dK, dV,
 * through fa_backward (the shared steps are npy_job.c's). */
#include "cli.h"
#include "npy_job.h"

#include <stdio.h>
#include <string.h>

static const char bwd_help[] =
    "Usage: flashattn bwd --q Q.npy --k K.npy --v V.npy --o O.npy --lse LSE.npy --do DO.npy\n"
    "                     --dq DQ.npy --dk DK.npy --dv DV.npy [--sink S.npy [--dsink DS.npy]] [options]\n"
    "\n"
    "Attention gradients on NumPy arrays: O and LSE as written by 'flashattn fwd' with the same\n"
    "options, DO the gradient of O (O's shape and Q's dtype). dQ has Q's shape, dK K's and dV V's;\n"
    "all in Q's dtype. Layouts, options and the rules for inputs as for 'flashattn fwd' (see\n"
    "'flashattn fwd --help'), plus\n"
    "  --deterministic       bitwise reproducible gradients\n"
    "  --dsink DS.npy        the gradient of the --sink logits, float32 [heads_q]:\n"
    "                        dsink_h = -sum over batch and rows i of exp(sink_h - LSE_i) D_i,\n"
    "                        D_i = sum_c dO_ic O_ic (needs --sink)\n"
    OUTPUT_FILES_HELP;

int cmd_bwd(int argc, char **argv)
{
    file_job *j = file_job_new(1);
    if (!j) {
        fprintf(stderr, "flashattn bwd: out of host memory\n");
        return EXIT_LIBRARY;
    }
    int help = 0;
    int rc = file_job_parse(j, argc, argv, &help);
    if (!rc && help)
        fputs(bwd_help, stdout);
    if (rc || help || (rc = file_job_load(j)) || (rc = file_job_open(j)))
        goto done;
    fa_bwd_args args;
    memset(&args, 0, sizeof args);
    args.q = file_job_tensor(j, IN_Q, 0);
    args.k = file_job_tensor(j, IN_K, 0);
    args.v = file_job_tensor(j, IN_V, 0);
    args.o = file_job_tensor(j, IN_O, 0);
    args.lse = file_job_tensor(j, IN_LSE, 0);
    args.dout = file_job_tensor(j, IN_DO, 0);
    args.dq = file_job_tensor(j, OUT_DQ, 1);
    args.dk = file_job_tensor(j, OUT_DK, 1);
    args.dv = file_job_tensor(j, OUT_DV, 1);
    if (j->out_path[OUT_DSINK])
        args.dsink = file_job_tensor(j, OUT_DSINK, 1);
    args.varlen = j->varlen ? &j->vl : NULL;
    args.opts = j->opts;
    fa_status st = fa_backward(j->ctx, &args);
    if (st == FA_SUCCESS)
        st = fa_synchronize(j->ctx);
    if (st != FA_SUCCESS) {
        rc = library_error(j->cmd, j->ctx, "fa_backward", st);
        goto done;
    }
    rc = file_job_write_outputs(j);
done:
    file_job_release(j);
    return rc;
}
