/* cmd_fwd_kvcache.c: `flashattn fwd --k-cache ...`: attention of new query tokens over a KV cache
 * on .npy files, through fa_forward_kvcache. Output paths are checked before anything is read; the
 * outputs (O, LSE, and the updated caches when new keys are appended) are written to temporaries
 * and renamed into place all together, or not at all (tools/outputs.h). The caches given as inputs
 * are never written: the updated caches go to --k-cache-out / --v-cache-out. */
#include "cli.h"
#include "npy.h"
#include "outputs.h"
#include "tensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char fwd_kvcache_help[] =
    "Usage: flashattn fwd --q Q.npy --k-cache KC.npy --v-cache VC.npy --out O.npy [--lse LSE.npy]\n"
    "                     [--cache-seqlens CS.npy] [--block-table BT.npy] [--cache-batch-idx IDX.npy]\n"
    "                     [--cache-leftpad LP.npy]\n"
    "                     [--k-new KN.npy --v-new VN.npy --k-cache-out KC2.npy --v-cache-out VC2.npy]\n"
    "                     [--rotary-cos C.npy --rotary-sin S.npy [--rotary-interleaved]]\n"
    "                     [--num-splits N] [--causal] [--window L R] [--scale S] [--softcap C]\n"
    "                     [--sink S.npy]\n"
    "\n"
    "Attention of new query tokens over a KV cache (fa_forward_kvcache; docs/api.md). Q [batch,\n"
    "seqlen_new, heads_q, d]; the caches [batch_cache, seqlen_cache, heads_kv, d], or with\n"
    "--block-table (int32 [batch, pages per sequence]) pages [num_pages, page_size, heads_kv, d].\n"
    "The value cache's last dimension sets d_v, the head dim of V and O (d for the key cache, Q and\n"
    "--k-new; d_v for --v-new and O; up to 576 / 512, MLA's absorbed decode, where the backend can).\n"
    "--cache-seqlens: int32 [batch], tokens already cached (default: every sequence full).\n"
    "--cache-leftpad: int32 [batch], where each sequence's keys start in its cache row (default 0;\n"
    "contiguous caches only).\n"
    "--k-new / --v-new [batch, seqlen_knew, heads_kv, d] are appended at cache_seqlens, then\n"
    "attended to; the caches with them are written to --k-cache-out / --v-cache-out (required with\n"
    "--k-new; the input caches are not modified). --rotary-cos / --rotary-sin [seqlen_ro,\n"
    "rotary_dim / 2] rotate Q and the new keys (halves, or --rotary-interleaved pairs). The int32\n"
    "arrays are '<i4'; the others share Q's dtype ('<f4', '<f2', '<u2' with --bf16). LSE is\n"
    "float32 [batch, heads_q, seqlen_new]. --sink: float32 [heads_q] sink logits, as 'flashattn fwd\n"
    "--help' describes.\n"
    "Other options: --bf16, --backend NAME --device N --threads T.\n";

enum { K_Q, K_KC, K_VC, K_CS, K_BT, K_BI, K_KN, K_VN, K_COS, K_SIN, K_LP, K_SINK, K_IN };
enum { K_O, K_LSE, K_KC_OUT, K_VC_OUT, K_OUT };
static const char *const kin_opt[K_IN] = {"--q",     "--k-cache", "--v-cache", "--cache-seqlens", "--block-table",
                                          "--cache-batch-idx", "--k-new", "--v-new", "--rotary-cos", "--rotary-sin",
                                          "--cache-leftpad", "--sink"};
static const char *const kout_opt[K_OUT] = {"--out", "--lse", "--k-cache-out", "--v-cache-out"};

typedef struct kv_job {
    const char *in_path[K_IN], *out_path[K_OUT];
    npy_array in[K_IN];
    device_buffer dev[K_IN], out[K_OUT];
    output_file outs[K_OUT];
    int out_role[K_OUT], n_out;
    void *host_out[K_OUT];
    fa_options opts;
    int bf16, interleaved, num_splits, device, threads;
    const char *backend;
    fa_dtype dtype;
    fa_context *ctx;
} kv_job;

/* kin_opt and kout_opt, and the rest; the attention options that do not apply (--deterministic,
 * dropout) are in the table so that parse can say why they are refused. */
static const struct option kvcache_options[] = {
    HELP_OPTION,
    ATTENTION_OPTIONS,
    {"q", required_argument, NULL, 0},
    {"k-cache", required_argument, NULL, 0},
    {"v-cache", required_argument, NULL, 0},
    {"cache-seqlens", required_argument, NULL, 0},
    {"block-table", required_argument, NULL, 0},
    {"cache-batch-idx", required_argument, NULL, 0},
    {"cache-leftpad", required_argument, NULL, 0},
    {"sink", required_argument, NULL, 0},
    {"k-new", required_argument, NULL, 0},
    {"v-new", required_argument, NULL, 0},
    {"rotary-cos", required_argument, NULL, 0},
    {"rotary-sin", required_argument, NULL, 0},
    {"out", required_argument, NULL, 0},
    {"lse", required_argument, NULL, 0},
    {"k-cache-out", required_argument, NULL, 0},
    {"v-cache-out", required_argument, NULL, 0},
    {"rotary-interleaved", no_argument, NULL, 0},
    {"num-splits", required_argument, NULL, 0},
    {"bf16", no_argument, NULL, 0},
    {"backend", required_argument, NULL, 0},
    {"device", required_argument, NULL, 0},
    {"threads", required_argument, NULL, 0},
    OPTIONS_END,
};

/* 0, EXIT_USAGE after a message, or -1 for --help (printed) */
static int parse(kv_job *j, int argc, char **argv)
{
    arg_cursor a;
    int parse_rc = 0;
    arg_begin(&a, "fwd", argc, argv, kvcache_options);
    while (next_option(&a, &parse_rc)) {
        const char *opt = a.opt;
        int rc = 0, handled = 0;
        if (is_help(opt)) {
            fputs(fwd_kvcache_help, stdout);
            return -1;
        }
        if ((rc = parse_attention_option(&a, &j->opts, &handled)))
            return rc;
        if (handled) {
            if (strcmp(opt, "--deterministic") == 0 || strcmp(opt, "--dropout") == 0 || strcmp(opt, "--seed") == 0 ||
                strcmp(opt, "--offset") == 0)
                return usage_error(a.cmd, "%s does not apply to attention over a KV cache (inference)", opt);
            continue;
        }
        const char **slot = NULL;
        for (int r = 0; r < K_IN && !slot; ++r)
            if (strcmp(opt, kin_opt[r]) == 0)
                slot = &j->in_path[r];
        for (int r = 0; r < K_OUT && !slot; ++r)
            if (strcmp(opt, kout_opt[r]) == 0)
                slot = &j->out_path[r];
        if (slot) {
            if (*slot)
                return usage_error(a.cmd, "%s given twice", opt);
            rc = take_value(&a, opt, slot);
            if (!rc && (*slot)[0] == '\0')
                rc = usage_error(a.cmd, "%s: empty file name", opt);
        } else if (strcmp(opt, "--rotary-interleaved") == 0) {
            j->interleaved = 1;
        } else if (strcmp(opt, "--num-splits") == 0) {
            rc = take_int(&a, opt, 0, 1 << 16, &j->num_splits);
        } else if (strcmp(opt, "--bf16") == 0) {
            j->bf16 = 1;
        } else if (strcmp(opt, "--backend") == 0) {
            rc = take_value(&a, opt, &j->backend);
        } else if (strcmp(opt, "--device") == 0) {
            rc = take_int(&a, opt, 0, 1 << 20, &j->device);
        } else if (strcmp(opt, "--threads") == 0) {
            rc = take_int(&a, opt, 0, 4096, &j->threads);
        } else {
            rc = usage_error(a.cmd, "unknown option '%s' with --k-cache", opt); /* in kvcache_options */
        }
        if (rc)
            return rc;
    }
    if (parse_rc)
        return parse_rc;
    static const int need[] = {K_Q, K_KC, K_VC};
    for (int i = 0; i < 3; ++i)
        if (!j->in_path[need[i]])
            return usage_error(a.cmd, "missing %s FILE.npy", kin_opt[need[i]]);
    if (!j->out_path[K_O])
        return usage_error(a.cmd, "missing --out FILE.npy");
    if (!j->in_path[K_KN] != !j->in_path[K_VN])
        return usage_error(a.cmd, "--k-new and --v-new go together");
    if (!j->in_path[K_COS] != !j->in_path[K_SIN])
        return usage_error(a.cmd, "--rotary-cos and --rotary-sin go together");
    if (j->interleaved && !j->in_path[K_COS])
        return usage_error(a.cmd, "--rotary-interleaved needs --rotary-cos / --rotary-sin");
    int appending = j->in_path[K_KN] != NULL;
    if (appending && (!j->out_path[K_KC_OUT] || !j->out_path[K_VC_OUT]))
        return usage_error(a.cmd, "--k-new needs --k-cache-out and --v-cache-out (the updated caches)");
    if (!appending && (j->out_path[K_KC_OUT] || j->out_path[K_VC_OUT]))
        return usage_error(a.cmd, "--k-cache-out / --v-cache-out are written only when --k-new appends keys");
    return 0;
}

static int file_error(const kv_job *j, int role, const char *what)
{
    fprintf(stderr, "flashattn fwd: %s %s: %s\n", kin_opt[role], j->in_path[role], what);
    return EXIT_USAGE;
}

/* The largest row norm among the cached keys the call reads: sequence b's first cache_seqlens[b]
 * tokens (every sequence's seqlen_cache without the array) of every kv head, in its cache row or
 * pages, from its cache_leftpad on (contiguous; the library refuses it with pages). Rows past the
 * lengths and before the pad are never read, so whatever they hold cannot overflow a score.
 * Values the library will refuse (a length past the cache, a page out of range) are skipped. */
static double cached_key_norm(const kv_job *j)
{
    const npy_array *kc = &j->in[K_KC], *cs = &j->in[K_CS], *bt = &j->in[K_BT], *bi = &j->in[K_BI];
    if (kc->ndim != 4 || kc->count == 0)
        return 0.0;
    const int64_t rows = kc->shape[0], per_row = kc->shape[1], d = kc->shape[3], token = kc->shape[2] * d;
    const size_t elem = kc->bytes / (size_t)kc->count;
    const int paged = j->in_path[K_BT] != NULL;
    double best = 0.0;
    for (int64_t b = 0; b < j->in[K_Q].shape[0]; ++b) {
        const int64_t len = j->in_path[K_CS] ? ((const int32_t *)cs->data)[b] : per_row;
        for (int64_t first = 0; first < len; first += per_row) {
            int64_t row = b;
            if (paged) {
                if (first / per_row >= bt->shape[1])
                    break;
                row = ((const int32_t *)bt->data)[b * bt->shape[1] + first / per_row];
            } else if (j->in_path[K_BI]) {
                row = ((const int32_t *)bi->data)[b];
            }
            if (row < 0 || row >= rows || (!paged && first > 0))
                break;
            int64_t pad = !paged && j->in_path[K_LP] ? ((const int32_t *)j->in[K_LP].data)[b] : 0;
            if (pad < 0 || pad > len) /* refused by the library */
                pad = 0;
            const int64_t n = len - first < per_row ? len - first : per_row;
            const char *first_row = (const char *)kc->data + (size_t)((row * per_row + pad) * token) * elem;
            const double norm = max_row_norm(j->dtype, first_row, (n - pad) * token, d);
            best = norm > best ? norm : best;
        }
    }
    return best;
}

/* Outputs checked, inputs read, dtypes checked against Q's (the library checks the shapes). */
static int load(kv_job *j)
{
    char err[1200];
    for (int r = 0; r < K_OUT; ++r)
        if (j->out_path[r]) {
            memset(&j->outs[j->n_out], 0, sizeof j->outs[j->n_out]);
            j->outs[j->n_out].option = kout_opt[r];
            j->outs[j->n_out].path = j->out_path[r];
            j->out_role[j->n_out++] = r;
        }
    if (outputs_check(j->outs, j->n_out, j->in_path, kin_opt, K_IN, err, sizeof err) != 0) {
        fprintf(stderr, "flashattn fwd: %s\n", err);
        return EXIT_USAGE;
    }
    for (int r = 0; r < K_IN; ++r)
        if (j->in_path[r] &&
            npy_read_accepting(j->in_path[r],
                               r == K_CS || r == K_BT || r == K_BI ? "the option takes int32 '<i4'"
                               : r == K_SINK                       ? "the option takes float32 '<f4'"
                                                                   : "the option takes " NPY_ATTENTION_DTYPES,
                               &j->in[r], err, sizeof err) != 0) {
            fprintf(stderr, "flashattn fwd: %s %s\n", kin_opt[r], err);
            return EXIT_USAGE;
        }
    const npy_array *q = &j->in[K_Q];
    if (q->type == NPY_TYPE_F32 || q->type == NPY_TYPE_F16) {
        if (j->bf16)
            return file_error(j, K_Q, "--bf16 given but the file does not hold '<u2'");
        j->dtype = q->type == NPY_TYPE_F32 ? FA_DTYPE_F32 : FA_DTYPE_F16;
    } else if (q->type == NPY_TYPE_U16 && j->bf16) {
        j->dtype = FA_DTYPE_BF16;
    } else {
        return file_error(j, K_Q, q->type == NPY_TYPE_U16 ? "holds '<u2'; pass --bf16 to read it as bfloat16"
                                                         : "not an attention input type: " NPY_ATTENTION_DTYPES);
    }
    for (int r = 0; r < K_IN; ++r) {
        if (!j->in_path[r] || r == K_SINK)
            continue;
        int is_int = r == K_CS || r == K_BT || r == K_BI || r == K_LP;
        if (is_int && j->in[r].type != NPY_TYPE_I32)
            return file_error(j, r, "must be int32 '<i4'");
        if (!is_int && j->in[r].type != q->type)
            return file_error(j, r, "dtype differs from the query's");
        if (j->in[r].ndim > FA_MAX_DIMS)
            return file_error(j, r, "too many dimensions");
    }
    if (q->ndim != 4)
        return file_error(j, K_Q, "must be [batch, seqlen_new, heads_q, d]");
    if ((j->in_path[K_CS] && (j->in[K_CS].ndim != 1 || j->in[K_CS].shape[0] != q->shape[0])) ||
        (j->in_path[K_BI] && (j->in[K_BI].ndim != 1 || j->in[K_BI].shape[0] != q->shape[0])) ||
        (j->in_path[K_LP] && (j->in[K_LP].ndim != 1 || j->in[K_LP].shape[0] != q->shape[0])))
        return usage_error("fwd", "--cache-seqlens, --cache-batch-idx and --cache-leftpad must be int32 [batch]");
    if (j->in_path[K_BT] && (j->in[K_BT].ndim != 2 || j->in[K_BT].shape[0] != q->shape[0]))
        return file_error(j, K_BT, "must be int32 [batch, pages per sequence]");
    if (j->in[K_VC].ndim != 4)
        return file_error(j, K_VC, "must be [batch_cache, seqlen_cache, heads_kv, d_v] or [num_pages, page_size, "
                                   "heads_kv, d_v]");
    if (j->in_path[K_SINK] && sink_layout(&j->in[K_SINK], q->shape[2], err, sizeof err) != 0)
        return file_error(j, K_SINK, err);
    const double nq = max_row_norm(j->dtype, q->data, q->count, q->shape[3]);
    int rc = check_score_bound("fwd", j->opts.softmax_scale, q->shape[3], nq, j->in_path[K_Q], cached_key_norm(j),
                               j->in_path[K_KC]);
    if (!rc && j->in_path[K_KN])
        rc = check_score_range("fwd", j->opts.softmax_scale, j->dtype, q->shape[3], q->data, q->count, j->in_path[K_Q],
                               j->in[K_KN].data, j->in[K_KN].count, j->in_path[K_KN]);
    return rc;
}

static fa_tensor as_tensor(const kv_job *j, int role, void *data)
{
    const npy_array *a = &j->in[role];
    return fa_tensor_contiguous(data, j->dtype, a->ndim, a->shape);
}

static int run(kv_job *j)
{
    fa_status st = fa_context_create(&j->ctx, j->backend, j->device);
    if (st != FA_SUCCESS)
        return context_error("fwd", j->backend, j->device, st);
    if (j->threads > 0 && (st = fa_context_set_num_threads(j->ctx, j->threads)) != FA_SUCCESS)
        return library_error("fwd", j->ctx, "fa_context_set_num_threads", st);
    for (int r = 0; r < K_IN; ++r)
        if (j->in_path[r] && (st = device_upload(j->ctx, j->in[r].data, j->in[r].bytes, &j->dev[r])) != FA_SUCCESS)
            return library_error("fwd", j->ctx, "uploading the inputs", st);
    const npy_array *q = &j->in[K_Q];
    int64_t lse_shape[3] = {q->shape[0], q->shape[2], q->shape[1]};
    /* O: Q's shape with the value cache's head dim d_v */
    int64_t o_shape[4] = {q->shape[0], q->shape[1], q->shape[2], j->in[K_VC].shape[3]};
    size_t lse_bytes, o_bytes;
    if (!shape_bytes(3, lse_shape, sizeof(float), NULL, &lse_bytes) ||
        !shape_bytes(4, o_shape, fa_dtype_size(j->dtype), NULL, &o_bytes))
        return usage_error("fwd", "the size of O or LSE overflows");
    size_t sizes[K_OUT] = {o_bytes, lse_bytes, j->in[K_KC].bytes, j->in[K_VC].bytes};
    for (int r = 0; r < K_OUT; ++r)
        if (j->out_path[r] && (st = device_alloc(j->ctx, sizes[r], &j->out[r])) != FA_SUCCESS)
            return library_error("fwd", j->ctx, "allocating the outputs", st);
    /* the caches are updated in place: the call works on copies, the input files stay as they are */
    int appending = j->in_path[K_KN] != NULL;
    void *kc = j->dev[K_KC].ptr, *vc = j->dev[K_VC].ptr;
    if (appending) {
        if ((j->in[K_KC].bytes &&
             (st = fa_memcpy(j->ctx, j->out[K_KC_OUT].ptr, kc, j->in[K_KC].bytes, FA_COPY_DEVICE_TO_DEVICE))) ||
            (j->in[K_VC].bytes &&
             (st = fa_memcpy(j->ctx, j->out[K_VC_OUT].ptr, vc, j->in[K_VC].bytes, FA_COPY_DEVICE_TO_DEVICE))))
            return library_error("fwd", j->ctx, "copying the caches", st);
        kc = j->out[K_KC_OUT].ptr;
        vc = j->out[K_VC_OUT].ptr;
    }
    fa_kvcache_args a;
    memset(&a, 0, sizeof a);
    a.q = as_tensor(j, K_Q, j->dev[K_Q].ptr);
    a.k_cache = as_tensor(j, K_KC, kc);
    a.v_cache = as_tensor(j, K_VC, vc);
    a.cache_seqlens = j->dev[K_CS].ptr;
    a.cache_batch_idx = j->dev[K_BI].ptr;
    a.cache_leftpad = j->dev[K_LP].ptr;
    if (j->in_path[K_BT]) {
        a.block_table = j->dev[K_BT].ptr;
        a.block_table_stride = j->in[K_BT].shape[1];
    }
    if (appending) {
        a.k_new = as_tensor(j, K_KN, j->dev[K_KN].ptr);
        a.v_new = as_tensor(j, K_VN, j->dev[K_VN].ptr);
    }
    if (j->in_path[K_COS]) {
        a.rotary_cos = as_tensor(j, K_COS, j->dev[K_COS].ptr);
        a.rotary_sin = as_tensor(j, K_SIN, j->dev[K_SIN].ptr);
        a.rotary_interleaved = j->interleaved;
    }
    a.o = fa_tensor_contiguous(j->out[K_O].ptr, j->dtype, 4, o_shape);
    if (j->out_path[K_LSE])
        a.lse = fa_tensor_contiguous(j->out[K_LSE].ptr, FA_DTYPE_F32, 3, lse_shape);
    a.opts = j->opts;
    a.opts.learnable_sink = j->dev[K_SINK].ptr;
    a.num_splits = j->num_splits;
    st = fa_forward_kvcache(j->ctx, &a);
    if (st == FA_SUCCESS)
        st = fa_synchronize(j->ctx);
    if (st != FA_SUCCESS)
        return library_error("fwd", j->ctx, "fa_forward_kvcache", st);
    /* every output into its temporary, then all renamed */
    char err[1200];
    const int64_t *shapes[K_OUT] = {o_shape, lse_shape, j->in[K_KC].shape, j->in[K_VC].shape};
    const int ndims[K_OUT] = {4, 3, j->in[K_KC].ndim, j->in[K_VC].ndim};
    for (int i = 0; i < j->n_out; ++i) {
        int r = j->out_role[i];
        if (!(j->host_out[r] = malloc(j->out[r].bytes ? j->out[r].bytes : 1))) {
            fprintf(stderr, "flashattn fwd: out of host memory for %s\n", j->out_path[r]);
            return EXIT_LIBRARY;
        }
        if ((st = device_download(j->ctx, &j->out[r], j->host_out[r])) != FA_SUCCESS)
            return library_error("fwd", j->ctx, "downloading the outputs", st);
        FILE *f = outputs_open_temp(&j->outs[i], err, sizeof err);
        if (!f) {
            fprintf(stderr, "flashattn fwd: %s\n", err);
            return EXIT_IO;
        }
        char close_err[sizeof err];
        int written = npy_write_stream(f, j->out_path[r], r == K_LSE ? NPY_TYPE_F32 : npy_type_of(j->dtype), ndims[r],
                                       shapes[r], j->host_out[r], err, sizeof err) == 0;
        int closed = outputs_close_temp(&j->outs[i], f, close_err, sizeof close_err) == 0;
        if (!written || !closed) {
            fprintf(stderr, "flashattn fwd: %s; no output was changed\n", written ? close_err : err);
            return EXIT_IO;
        }
    }
    if (outputs_commit(j->outs, j->n_out, err, sizeof err) != 0) {
        fprintf(stderr, "flashattn fwd: %s\n", err);
        return EXIT_IO;
    }
    return 0;
}

int cmd_fwd_kvcache(int argc, char **argv)
{
    kv_job *j = calloc(1, sizeof *j);
    if (!j) {
        fprintf(stderr, "flashattn fwd: out of host memory\n");
        return EXIT_LIBRARY;
    }
    j->opts = fa_options_default();
    j->threads = -1;
    /* --help wins wherever it stands: `fwd --k-cache --help` reads it as no file name */
    for (int i = 1; i < argc; ++i)
        if (is_help(argv[i])) {
            fputs(fwd_kvcache_help, stdout);
            free(j);
            return 0;
        }
    int rc = parse(j, argc, argv);
    if (rc < 0) /* --help */
        rc = 0;
    else if (!rc && !(rc = load(j)))
        rc = run(j);
    outputs_discard(j->outs, j->n_out);
    for (int r = 0; r < K_IN; ++r) {
        device_release(j->ctx, &j->dev[r]);
        npy_free(&j->in[r]);
    }
    for (int r = 0; r < K_OUT; ++r) {
        device_release(j->ctx, &j->out[r]);
        free(j->host_out[r]);
    }
    fa_context_destroy(j->ctx);
    free(j);
    return rc;
}
