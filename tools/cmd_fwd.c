/* cmd_fwd.c: `flashattn fwd`: attention on .npy files, Q, K, V -> O (and LSE), through fa_forward
 * (the shared steps are npy_job.c's). */
#include "cli.h"
#include "npy_job.h"

#include <stdio.h>
#include <string.h>

static const char fwd_help[] =
    "Usage: flashattn fwd --q Q.npy --k K.npy --v V.npy --out O.npy [--lse LSE.npy] [options]\n"
    "\n"
    "Attention on NumPy arrays. Dense layout: Q [batch, seqlen_q, heads_q, d], K [batch, seqlen_k,\n"
    "heads_kv, d], V [batch, seqlen_k, heads_kv, d_v]. With --cu-seqlens-q/-k (int32, batch + 1\n"
    "offsets) the packed layout: Q [total_q, heads_q, d], K [total_k, heads_kv, d], V [total_k,\n"
    "heads_kv, d_v]. V's last dimension sets d_v, the head dim of V and O (usually d; DeepSeek's MLA\n"
    "trains with d 192, d_v 128); a backend that cannot run d_v != d says so (exit 3). dtype from\n"
    "the files: '<f4' fp32, '<f2' fp16, '<u2' with --bf16 bfloat16 bit patterns. O has Q's dtype\n"
    "and Q's shape with d_v last; LSE is float32 [batch, heads_q, seqlen_q] (packed: [heads_q,\n"
    "total_q]); -inf for fully masked rows.\n"
    "\n"
    "Options:\n"
    "  --causal              bottom-right aligned causal mask\n"
    "  --window L R          sliding window, -1 = unbounded on that side\n"
    "  --scale S             softmax scale (0 = 1/sqrt(d), the default)\n"
    "  --softcap C           each scaled score S becomes C tanh(S / C) (C > 0; 0 = off)\n"
    "  --alibi-slopes A.npy  ALiBi: query head h of sequence b subtracts slope[b, h] x\n"
    "                        |i + seqlen_k - seqlen_q - j| from its scores; float32 '<f4' slopes\n"
    "                        [heads_q] (every sequence) or [batch, heads_q]\n"
    "  --sink S.npy          learnable attention sink (gpt-oss): one logit per query head, float32\n"
    "                        '<f4' [heads_q], that joins every row's softmax and carries no value:\n"
    "                        LSE_i = log(sum_j exp(S_ij) + exp(sink_h)), in the units of the\n"
    "                        modified scores (no scale, softcap or ALiBi applied to it); a row\n"
    "                        that sees no key gets O = 0 and LSE = sink_h\n"
    "  --dropout P --seed S --offset O   dropout (Philox, see core/philox.h); --seed is required\n"
    "                        with --dropout, and bwd needs the seed and offset fwd had\n"
    "  --block-mask M.npy --block-size BQ BK\n"
    "                        uint8/bool block bitmap [rows, cols] or [heads_q, rows, cols]\n"
    "  --cu-seqlens-q A.npy --cu-seqlens-k B.npy   packed variable-length batch\n"
    "  --bf16                read '<u2' arrays as bfloat16\n"
    "  --backend NAME --device N --threads T\n"
    "\n"
    "Inputs must be regular files: a FIFO, device or directory is refused, never waited on. With\n"
    "--cu-seqlens the last offsets must equal the packed rows (total_q, total_k). --scale (or\n"
    "1/sqrt(d)) times the largest |q_i| and |k_j| (row norms) must stay below FLT_MAX / 4, so no\n"
    "score can overflow float32; an input with larger rows is refused. With --softcap and ALiBi,\n"
    "the softcap applies first, then ALiBi, then the masks; LSE is that of the modified scores.\n"
    "\n"
    "With --k-cache: attention of new tokens over a KV cache, contiguous or paged, with appended\n"
    "keys and rotary embedding (see 'flashattn fwd --k-cache --help').\n"
    OUTPUT_FILES_HELP;

int cmd_fwd(int argc, char **argv)
{
    for (int i = 1; i < argc; ++i)
        if (strcmp(argv[i], "--k-cache") == 0 || strncmp(argv[i], "--k-cache=", 10) == 0)
            return cmd_fwd_kvcache(argc, argv);
    file_job *j = file_job_new(0);
    if (!j) {
        fprintf(stderr, "flashattn fwd: out of host memory\n");
        return EXIT_LIBRARY;
    }
    int help = 0;
    int rc = file_job_parse(j, argc, argv, &help);
    if (!rc && help)
        fputs(fwd_help, stdout);
    if (rc || help || (rc = file_job_load(j)) || (rc = file_job_open(j)))
        goto done;
    fa_fwd_args args;
    memset(&args, 0, sizeof args);
    args.q = file_job_tensor(j, IN_Q, 0);
    args.k = file_job_tensor(j, IN_K, 0);
    args.v = file_job_tensor(j, IN_V, 0);
    args.o = file_job_tensor(j, OUT_O, 1);
    if (j->out_path[OUT_LSE])
        args.lse = file_job_tensor(j, OUT_LSE, 1);
    args.varlen = j->varlen ? &j->vl : NULL;
    args.opts = j->opts;
    fa_status st = fa_forward(j->ctx, &args);
    if (st == FA_SUCCESS)
        st = fa_synchronize(j->ctx);
    if (st != FA_SUCCESS) {
        rc = library_error(j->cmd, j->ctx, "fa_forward", st);
        goto done;
    }
    rc = file_job_write_outputs(j);
done:
    file_job_release(j);
    return rc;
}
