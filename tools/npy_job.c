/* npy_job.c: the part of `flashattn fwd` and `flashattn bwd` that does not depend on the direction
 * (npy_job.h): options, output paths, reading and checking the .npy inputs, the context and its
 * buffers, and writing the outputs. */
#include "npy_job.h"
#include "cli.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const out_option[OUT_COUNT] = {"--out", "--lse", "--dq", "--dk", "--dv", "--dsink"};
static const char *const in_option[IN_COUNT] = {"--q",  "--k",           "--v",           "--o",          "--lse",
                                                "--do", "--cu-seqlens-q", "--cu-seqlens-k", "--block-mask",
                                                "--alibi-slopes", "--sink"};

/* What each input option takes, for the message about a dtype the reader does not know. */
#define TAKES_ATTENTION "the option takes " NPY_ATTENTION_DTYPES
static const char *const in_accepts[IN_COUNT] = {
    TAKES_ATTENTION, TAKES_ATTENTION, TAKES_ATTENTION, TAKES_ATTENTION, "the option takes float32 '<f4'",
    TAKES_ATTENTION, "the option takes int32 '<i4'", "the option takes int32 '<i4'",
    "the option takes uint8 '|u1' or bool '|b1'", "the option takes float32 '<f4'", "the option takes float32 '<f4'"};

file_job *file_job_new(int backward)
{
    file_job *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    j->backward = backward;
    j->cmd = backward ? "bwd" : "fwd";
    j->threads = -1;
    j->opts = fa_options_default();
    return j;
}

/* The options fwd and bwd share, then each one's own: the input and output files. */
#define FILE_JOB_COMMON_OPTIONS                                                                          \
    HELP_OPTION, ATTENTION_OPTIONS, {"q", required_argument, NULL, 0}, {"k", required_argument, NULL, 0}, \
        {"v", required_argument, NULL, 0}, {"lse", required_argument, NULL, 0},                          \
        {"cu-seqlens-q", required_argument, NULL, 0}, {"cu-seqlens-k", required_argument, NULL, 0},      \
        {"block-mask", required_argument, NULL, 0}, {"block-size", required_argument, NULL, 0},          \
        {"alibi-slopes", required_argument, NULL, 0}, {"sink", required_argument, NULL, 0},              \
        {"bf16", no_argument, NULL, 0},                                                                  \
        {"backend", required_argument, NULL, 0}, {"device", required_argument, NULL, 0},                 \
        {"threads", required_argument, NULL, 0}

static const struct option fwd_options[] = {
    FILE_JOB_COMMON_OPTIONS,
    {"out", required_argument, NULL, 0},
    {"o", required_argument, NULL, 0}, /* bwd's input, refused with a hint */
    OPTIONS_END,
};

static const struct option bwd_options[] = {
    FILE_JOB_COMMON_OPTIONS,
    {"o", required_argument, NULL, 0},
    {"do", required_argument, NULL, 0},
    {"dq", required_argument, NULL, 0},
    {"dk", required_argument, NULL, 0},
    {"dv", required_argument, NULL, 0},
    {"dsink", required_argument, NULL, 0},
    OPTIONS_END,
};

int file_job_parse(file_job *j, int argc, char **argv, int *help)
{
    arg_cursor a;
    int parse_rc = 0;
    *help = 0;
    int seed_given = 0;
    arg_begin(&a, j->cmd, argc, argv, j->backward ? bwd_options : fwd_options);
    while (next_option(&a, &parse_rc)) {
        const char *opt = a.opt;
        int rc = 0, handled = 0;
        if (is_help(opt)) {
            *help = 1;
            return 0;
        }
        rc = parse_attention_option(&a, &j->opts, &handled);
        if (rc)
            return rc;
        if (handled) {
            seed_given |= strcmp(opt, "--seed") == 0;
            if (!j->backward && strcmp(opt, "--deterministic") == 0)
                return usage_error(a.cmd, "--deterministic applies to 'flashattn bwd' only");
            continue;
        }
        const char **slot = NULL;
        if (strcmp(opt, "--q") == 0)
            slot = &j->in_path[IN_Q];
        else if (strcmp(opt, "--k") == 0)
            slot = &j->in_path[IN_K];
        else if (strcmp(opt, "--v") == 0)
            slot = &j->in_path[IN_V];
        else if (strcmp(opt, "--cu-seqlens-q") == 0)
            slot = &j->in_path[IN_CU_Q];
        else if (strcmp(opt, "--cu-seqlens-k") == 0)
            slot = &j->in_path[IN_CU_K];
        else if (strcmp(opt, "--block-mask") == 0)
            slot = &j->in_path[IN_MASK];
        else if (strcmp(opt, "--alibi-slopes") == 0)
            slot = &j->in_path[IN_ALIBI];
        else if (strcmp(opt, "--sink") == 0)
            slot = &j->in_path[IN_SINK];
        else if (strcmp(opt, "--lse") == 0)
            slot = j->backward ? &j->in_path[IN_LSE] : &j->out_path[OUT_LSE];
        else if (j->backward && strcmp(opt, "--o") == 0)
            slot = &j->in_path[IN_O];
        else if (j->backward && strcmp(opt, "--do") == 0)
            slot = &j->in_path[IN_DO];
        else if (j->backward && strcmp(opt, "--dq") == 0)
            slot = &j->out_path[OUT_DQ];
        else if (j->backward && strcmp(opt, "--dk") == 0)
            slot = &j->out_path[OUT_DK];
        else if (j->backward && strcmp(opt, "--dv") == 0)
            slot = &j->out_path[OUT_DV];
        else if (j->backward && strcmp(opt, "--dsink") == 0)
            slot = &j->out_path[OUT_DSINK];
        else if (!j->backward && strcmp(opt, "--out") == 0)
            slot = &j->out_path[OUT_O];
        if (slot) {
            if (*slot)
                return usage_error(a.cmd, "%s given twice", opt);
            rc = take_value(&a, opt, slot);
            if (!rc && (*slot)[0] == '\0')
                rc = usage_error(a.cmd, "%s: empty file name", opt);
        } else if (strcmp(opt, "--block-size") == 0) {
            rc = take_i64_pair(&a, "--block-size (BQ)", "--block-size (BK)", 1, INT64_MAX, &j->block_q, &j->block_k);
            j->have_block_size = 1;
        } else if (strcmp(opt, "--bf16") == 0) {
            j->bf16 = 1;
        } else if (strcmp(opt, "--backend") == 0) {
            rc = take_value(&a, opt, &j->backend);
        } else if (strcmp(opt, "--device") == 0) {
            rc = take_int(&a, opt, 0, 1 << 20, &j->device);
        } else if (strcmp(opt, "--threads") == 0) {
            rc = take_int(&a, opt, 0, 4096, &j->threads);
        } else {
            rc = usage_error(a.cmd, "unknown option '%s'%s", opt,
                             !j->backward && strcmp(opt, "--o") == 0 ? " (the output is --out)" : "");
        }
        if (rc)
            return rc;
    }
    if (parse_rc)
        return parse_rc;
    /* a silent default seed would give every run the same mask, and bwd must be given fwd's: the
     * Python package refuses dropout without a seed too */
    if (j->opts.dropout_p > 0.0f && !seed_given)
        return usage_error(a.cmd, "--dropout %g needs --seed S (and the same --seed and --offset in fwd and bwd: "
                                  "the dropout mask is drawn from them)", (double)j->opts.dropout_p);
    /* required arguments */
    static const int fwd_inputs[] = {IN_Q, IN_K, IN_V};
    static const int bwd_inputs[] = {IN_Q, IN_K, IN_V, IN_O, IN_LSE, IN_DO};
    const int *need = j->backward ? bwd_inputs : fwd_inputs;
    int n_need = j->backward ? 6 : 3;
    for (int i = 0; i < n_need; ++i)
        if (!j->in_path[need[i]])
            return usage_error(a.cmd, "missing %s FILE.npy", in_option[need[i]]);
    if (j->backward) {
        if (!j->out_path[OUT_DQ] || !j->out_path[OUT_DK] || !j->out_path[OUT_DV])
            return usage_error(a.cmd, "missing %s FILE.npy", !j->out_path[OUT_DQ] ? "--dq"
                                                             : !j->out_path[OUT_DK] ? "--dk"
                                                                                    : "--dv");
    } else if (!j->out_path[OUT_O]) {
        return usage_error(a.cmd, "missing --out FILE.npy");
    }
    if (j->out_path[OUT_DSINK] && !j->in_path[IN_SINK])
        return usage_error(a.cmd, "--dsink is the gradient of the sink logits: it needs --sink SINK.npy");
    if (!j->in_path[IN_CU_Q] != !j->in_path[IN_CU_K])
        return usage_error(a.cmd, "--cu-seqlens-q and --cu-seqlens-k go together");
    if (j->in_path[IN_MASK] && !j->have_block_size)
        return usage_error(a.cmd, "--block-mask needs --block-size BQ BK");
    if (!j->in_path[IN_MASK] && j->have_block_size)
        return usage_error(a.cmd, "--block-size is only meaningful with --block-mask");
    return 0;
}

/* "flashattn fwd: --k k.npy: ..." and EXIT_USAGE. */
static int file_error(const file_job *j, int role, const char *fmt, ...) FA_TOOL_PRINTF(3, 4);

static int file_error(const file_job *j, int role, const char *fmt, ...)
{
    fprintf(stderr, "flashattn %s: %s %s: ", j->cmd, in_option[role], j->in_path[role]);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return EXIT_USAGE;
}

/* Q's dtype from its .npy type; the other attention tensors must match it. */
static int attention_dtype(const file_job *j, fa_dtype *dt)
{
    const npy_array *q = &j->in[IN_Q];
    switch (q->type) {
    case NPY_TYPE_F32:
    case NPY_TYPE_F16:
        if (j->bf16)
            return file_error(j, IN_Q, "--bf16 given but the file holds '%s' (bfloat16 travels as '<u2')",
                              npy_type_descr(q->type));
        *dt = q->type == NPY_TYPE_F32 ? FA_DTYPE_F32 : FA_DTYPE_F16;
        return 0;
    case NPY_TYPE_U16:
        if (!j->bf16)
            return file_error(j, IN_Q, "holds uint16 '<u2'; pass --bf16 to read it as bfloat16 bit patterns");
        *dt = FA_DTYPE_BF16;
        return 0;
    default:
        return file_error(j, IN_Q, "dtype '%s' is not an attention input type: " NPY_ATTENTION_DTYPES,
                          npy_type_descr(q->type));
    }
}

/* Checks arr's ndim and shape against expect (-1 = any); layout names the dimensions. */
static int check_shape(const file_job *j, int role, int ndim, const int64_t *expect, const char *layout)
{
    const npy_array *arr = &j->in[role];
    char got[256], want[256];
    npy_format_shape(arr->ndim, arr->shape, got, sizeof got);
    int ok = arr->ndim == ndim;
    for (int i = 0; ok && i < ndim; ++i)
        if (expect[i] >= 0 && arr->shape[i] != expect[i])
            ok = 0;
    if (ok)
        return 0;
    if (arr->ndim != ndim)
        return file_error(j, role, "shape %s has %d dimensions, expected %d: %s%s", got, arr->ndim, ndim, layout,
                          role == IN_Q && !j->in_path[IN_CU_Q] && arr->ndim == 3
                              ? " (a packed [total, heads, d] array needs --cu-seqlens-q/-k)"
                              : "");
    size_t used = 0;
    want[0] = '\0';
    for (int i = 0; i < ndim && used < sizeof want; ++i) {
        int n = expect[i] >= 0 ? snprintf(want + used, sizeof want - used, "%s%lld", i ? ", " : "", (long long)expect[i])
                               : snprintf(want + used, sizeof want - used, "%s*", i ? ", " : "");
        if (n < 0)
            break;
        used += (size_t)n;
    }
    return file_error(j, role, "shape %s does not match the expected (%s) %s", got, want, layout);
}


/* The output paths, checked before anything is read or computed. */
static int check_output_paths(file_job *j)
{
    char err[1200];
    j->n_out = 0;
    for (int r = 0; r < OUT_COUNT; ++r)
        if (j->out_path[r]) {
            memset(&j->outs[j->n_out], 0, sizeof j->outs[j->n_out]);
            j->outs[j->n_out].option = out_option[r];
            j->outs[j->n_out].path = j->out_path[r];
            j->out_role[j->n_out++] = r;
        }
    if (outputs_check(j->outs, j->n_out, j->in_path, in_option, IN_COUNT, err, sizeof err) != 0) {
        fprintf(stderr, "flashattn %s: %s\n", j->cmd, err);
        return EXIT_USAGE;
    }
    return 0;
}

/* Q, K, V (and O, dO) against each other: dtype and shapes. V has K's shape but for its last
 * dimension, the head dim d_v of V, O and dO (d_v may differ from Q's and K's d). */
static int check_attention_inputs(file_job *j)
{
    int rc = attention_dtype(j, &j->dtype);
    if (rc)
        return rc;
    static const int same_type_roles[] = {IN_K, IN_V, IN_O, IN_DO};
    for (size_t i = 0; i < sizeof same_type_roles / sizeof same_type_roles[0]; ++i) {
        int r = same_type_roles[i];
        if (j->in_path[r] && j->in[r].type != j->in[IN_Q].type)
            return file_error(j, r, "dtype '%s' differs from the query's '%s' (%s)", npy_type_descr(j->in[r].type),
                              npy_type_descr(j->in[IN_Q].type), j->in_path[IN_Q]);
    }
    j->varlen = j->in_path[IN_CU_Q] != NULL;
    const npy_array *q = &j->in[IN_Q], *k = &j->in[IN_K];
    int nd = j->nd = j->varlen ? 3 : 4;
    int64_t any[4] = {-1, -1, -1, -1};
    const char *q_layout =
        j->varlen ? "[total_q, heads_q, d] (packed, with --cu-seqlens)" : "[batch, seqlen_q, heads_q, d]";
    const char *k_layout =
        j->varlen ? "[total_k, heads_kv, d] (packed, with --cu-seqlens)" : "[batch, seqlen_k, heads_kv, d]";
    const char *v_layout = j->varlen ? "[total_k, heads_kv, d_v] (K's but for the head dim; packed)"
                                     : "[batch, seqlen_k, heads_kv, d_v] (K's but for the head dim)";
    if ((rc = check_shape(j, IN_Q, nd, any, q_layout)))
        return rc;
    int64_t kexp[4] = {-1, -1, -1, -1};
    if (j->varlen) {
        kexp[0] = -1, kexp[1] = -1, kexp[2] = q->shape[2];
    } else {
        kexp[0] = q->shape[0], kexp[1] = -1, kexp[2] = -1, kexp[3] = q->shape[3];
    }
    if ((rc = check_shape(j, IN_K, nd, kexp, k_layout)))
        return rc;
    int64_t vexp[4];
    memcpy(vexp, k->shape, sizeof vexp);
    vexp[nd - 1] = -1;
    if ((rc = check_shape(j, IN_V, nd, vexp, v_layout)))
        return rc;
    memcpy(j->o_shape, q->shape, sizeof j->o_shape);
    j->o_shape[nd - 1] = j->in[IN_V].shape[nd - 1];
    const char *o_layout = "(the query's shape with V's head dim d_v)";
    if (j->backward &&
        ((rc = check_shape(j, IN_O, nd, j->o_shape, o_layout)) || (rc = check_shape(j, IN_DO, nd, j->o_shape, o_layout))))
        return rc;
    return 0;
}

/* --cu-seqlens-q/-k: int32, batch + 1 entries each, the last equal to the packed rows; fills j->vl
 * but its pointers. */
static int check_cu_seqlens(file_job *j)
{
    fa_varlen *vl = &j->vl;
    for (int r = IN_CU_Q; r <= IN_CU_K; ++r) {
        const npy_array *cu = &j->in[r];
        if (cu->type != NPY_TYPE_I32)
            return file_error(j, r, "dtype '%s'; cu_seqlens must be int32 '<i4'", npy_type_descr(cu->type));
        if (cu->ndim != 1 || cu->shape[0] < 1) {
            char s[256];
            npy_format_shape(cu->ndim, cu->shape, s, sizeof s);
            return file_error(j, r, "shape %s; cu_seqlens must be 1-D with batch + 1 >= 1 entries", s);
        }
    }
    if (j->in[IN_CU_Q].shape[0] != j->in[IN_CU_K].shape[0])
        return file_error(j, IN_CU_K, "%lld entries but %s has %lld: both need batch + 1",
                          (long long)j->in[IN_CU_K].shape[0], j->in_path[IN_CU_Q], (long long)j->in[IN_CU_Q].shape[0]);
    vl->batch = j->in[IN_CU_Q].shape[0] - 1;
    /* rows after the last offset would belong to no sequence and their outputs to nothing */
    for (int r = IN_CU_Q; r <= IN_CU_K; ++r) {
        int packed = r == IN_CU_Q ? IN_Q : IN_K;
        int64_t last = ((const int32_t *)j->in[r].data)[vl->batch], rows = j->in[packed].shape[0];
        if (last != rows)
            return file_error(j, r, "the last offset is %lld but %s %s has %lld packed rows: they must be equal",
                              (long long)last, in_option[packed], j->in_path[packed], (long long)rows);
    }
    /* the longest sequence bounds each side; a decreasing array is the library's to reject */
    for (int r = IN_CU_Q; r <= IN_CU_K; ++r) {
        const int32_t *cu = j->in[r].data;
        int64_t longest = 0;
        for (int64_t b = 0; b < vl->batch; ++b) {
            int64_t len = (int64_t)cu[b + 1] - cu[b];
            if (len > longest)
                longest = len;
        }
        if (r == IN_CU_Q)
            vl->max_seqlen_q = longest;
        else
            vl->max_seqlen_k = longest;
    }
    return 0;
}

/* --block-mask: the bitmap made into j->mask. */
static int load_block_mask(file_job *j)
{
    const npy_array *m = &j->in[IN_MASK];
    if (m->type != NPY_TYPE_U8 && m->type != NPY_TYPE_BOOL)
        return file_error(j, IN_MASK, "dtype '%s'; a block mask must be uint8 '|u1' or bool '|b1'",
                          npy_type_descr(m->type));
    if (m->ndim != 2 && m->ndim != 3)
        return file_error(j, IN_MASK, "%d dimensions; a block mask is [rows, cols] or [heads_q, rows, cols]",
                          m->ndim);
    int64_t heads = m->ndim == 3 ? m->shape[0] : 1;
    fa_status st = fa_block_mask_from_bitmap(&j->mask, m->data, heads, m->shape[m->ndim - 2], m->shape[m->ndim - 1],
                                             j->block_q, j->block_k);
    if (st != FA_SUCCESS)
        return file_error(j, IN_MASK, "rejected by fa_block_mask_from_bitmap: %s", fa_status_string(st));
    j->have_mask = 1;
    j->opts.block_mask = &j->mask;
    return 0;
}

int file_job_load(file_job *j)
{
    int rc = check_output_paths(j);
    if (rc)
        return rc;
    char err[1200];
    for (int r = 0; r < IN_COUNT; ++r) {
        if (!j->in_path[r])
            continue;
        if (npy_read_accepting(j->in_path[r], in_accepts[r], &j->in[r], err, sizeof err) != 0) {
            fprintf(stderr, "flashattn %s: %s %s\n", j->cmd, in_option[r], err);
            return EXIT_USAGE;
        }
    }
    if ((rc = check_attention_inputs(j)) || (j->varlen && (rc = check_cu_seqlens(j))))
        return rc;
    const npy_array *q = &j->in[IN_Q], *k = &j->in[IN_K];
    int64_t batch = j->varlen ? j->vl.batch : q->shape[0];
    int64_t heads_q = q->shape[j->nd - 2];
    int64_t total_q = j->varlen ? q->shape[0] : q->shape[1]; /* rows per LSE head (dense: seqlen_q) */
    j->lse_nd = j->varlen ? 2 : 3;
    if (j->varlen) {
        j->lse_shape[0] = heads_q, j->lse_shape[1] = total_q;
    } else {
        j->lse_shape[0] = batch, j->lse_shape[1] = heads_q, j->lse_shape[2] = total_q;
    }
    if (j->backward) {
        if (j->in[IN_LSE].type != NPY_TYPE_F32)
            return file_error(j, IN_LSE, "dtype '%s'; LSE must be float32 '<f4'", npy_type_descr(j->in[IN_LSE].type));
        if ((rc = check_shape(j, IN_LSE, j->lse_nd, j->lse_shape,
                              j->varlen ? "[heads_q, total_q]" : "[batch, heads_q, seqlen_q]")))
            return rc;
    }
    if (j->in_path[IN_MASK] && (rc = load_block_mask(j)))
        return rc;
    if (j->in_path[IN_ALIBI] &&
        alibi_slopes_layout(&j->in[IN_ALIBI], batch, heads_q, &j->alibi_stride, err, sizeof err) != 0)
        return file_error(j, IN_ALIBI, "%s", err);
    j->sink_shape[0] = heads_q;
    if (j->in_path[IN_SINK] && sink_layout(&j->in[IN_SINK], heads_q, err, sizeof err) != 0)
        return file_error(j, IN_SINK, "%s", err);
    return check_score_range(j->cmd, j->opts.softmax_scale, j->dtype, q->shape[j->nd - 1], q->data, q->count,
                             j->in_path[IN_Q], k->data, k->count, j->in_path[IN_K]);
}

int file_job_open(file_job *j)
{
    fa_status st = fa_context_create(&j->ctx, j->backend, j->device);
    if (st != FA_SUCCESS)
        return context_error(j->cmd, j->backend, j->device, st);
    if (j->threads >= 0 && (st = fa_context_set_num_threads(j->ctx, j->threads)) != FA_SUCCESS)
        return library_error(j->cmd, j->ctx, "fa_context_set_num_threads", st);
    for (int r = 0; r < IN_COUNT; ++r) {
        if (!j->in_path[r] || r == IN_MASK) /* the block mask lives in host memory */
            continue;
        if ((st = device_upload(j->ctx, j->in[r].data, j->in[r].bytes, &j->dev[r])) != FA_SUCCESS)
            return library_error(j->cmd, j->ctx, "uploading the inputs", st);
    }
    if (j->varlen) {
        j->vl.cu_seqlens_q = j->dev[IN_CU_Q].ptr;
        j->vl.cu_seqlens_k = j->dev[IN_CU_K].ptr;
    }
    if (j->in_path[IN_ALIBI]) {
        j->opts.alibi_slopes = j->dev[IN_ALIBI].ptr;
        j->opts.alibi_batch_stride = j->alibi_stride;
    }
    if (j->in_path[IN_SINK])
        j->opts.learnable_sink = j->dev[IN_SINK].ptr;
    if (!shape_bytes(j->lse_nd, j->lse_shape, sizeof(float), NULL, &j->lse_bytes))
        return usage_error(j->cmd, "the LSE size overflows");
    for (int i = 0; i < j->n_out; ++i) {
        int r = j->out_role[i];
        fa_tensor t = file_job_tensor(j, r, 1);
        size_t bytes;
        if (!shape_bytes(t.ndim, t.shape, fa_dtype_size(t.dtype), NULL, &bytes))
            return usage_error(j->cmd, "the size of %s overflows", out_option[r]);
        if ((st = device_alloc(j->ctx, bytes, &j->out[r])) != FA_SUCCESS)
            return library_error(j->cmd, j->ctx, "allocating the outputs", st);
    }
    return 0;
}

fa_tensor file_job_tensor(const file_job *j, int role, int is_output)
{
    void *data = is_output ? j->out[role].ptr : j->dev[role].ptr;
    if (is_output ? role == OUT_LSE : role == IN_LSE)
        return fa_tensor_contiguous(data, FA_DTYPE_F32, j->lse_nd, j->lse_shape);
    if (is_output && role == OUT_DSINK)
        return fa_tensor_contiguous(data, FA_DTYPE_F32, 1, j->sink_shape);
    const int64_t *shape = j->in[IN_Q].shape; /* Q, dQ */
    if (is_output ? role == OUT_O : role == IN_O || role == IN_DO)
        shape = j->o_shape;
    else if (is_output ? role == OUT_DK : role == IN_K)
        shape = j->in[IN_K].shape;
    else if (is_output ? role == OUT_DV : role == IN_V)
        shape = j->in[IN_V].shape;
    return fa_tensor_contiguous(data, j->dtype, j->nd, shape);
}

int file_job_write_outputs(file_job *j)
{
    char err[1200];
    for (int i = 0; i < j->n_out; ++i) {
        int r = j->out_role[i];
        fa_tensor t = file_job_tensor(j, r, 1);
        j->host_out[r] = malloc(j->out[r].bytes ? j->out[r].bytes : 1);
        if (!j->host_out[r]) {
            fprintf(stderr, "flashattn %s: out of host memory for %s\n", j->cmd, j->out_path[r]);
            return EXIT_LIBRARY;
        }
        fa_status st = device_download(j->ctx, &j->out[r], j->host_out[r]);
        if (st != FA_SUCCESS)
            return library_error(j->cmd, j->ctx, "downloading the outputs", st);
        FILE *f = outputs_open_temp(&j->outs[i], err, sizeof err);
        if (!f) {
            fprintf(stderr, "flashattn %s: %s\n", j->cmd, err);
            return EXIT_IO;
        }
        char close_err[sizeof err];
        int written = npy_write_stream(f, j->out_path[r], npy_type_of(t.dtype), t.ndim, t.shape, j->host_out[r], err,
                                       sizeof err) == 0;
        int closed = outputs_close_temp(&j->outs[i], f, close_err, sizeof close_err) == 0;
        if (!written || !closed) {
            fprintf(stderr, "flashattn %s: %s; no output was changed\n", j->cmd, written ? close_err : err);
            return EXIT_IO;
        }
    }
    if (outputs_commit(j->outs, j->n_out, err, sizeof err) != 0) {
        fprintf(stderr, "flashattn %s: %s\n", j->cmd, err);
        return EXIT_IO;
    }
    return 0;
}

void file_job_release(file_job *j)
{
    if (!j)
        return;
    outputs_discard(j->outs, j->n_out);
    for (int r = 0; r < IN_COUNT; ++r) {
        device_release(j->ctx, &j->dev[r]);
        npy_free(&j->in[r]);
    }
    for (int r = 0; r < OUT_COUNT; ++r) {
        device_release(j->ctx, &j->out[r]);
        free(j->host_out[r]);
    }
    if (j->have_mask)
        fa_block_mask_destroy(&j->mask);
    fa_context_destroy(j->ctx);
    free(j);
}
