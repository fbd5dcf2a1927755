/* cmd_warmup.c: `flashattn warmup`: fa_warmup over the cartesian product of a list of dtypes and
 * a list of head dims, with one set of options, so that a backend compiling its kernels at run
 * time (OpenCL; CUDA built with -Dcuda-kernels=rtc) has them in its disk cache before the first
 * real call. One progress line per shape on stderr, a summary, --json on stdout. */
#include "cli.h"
#include "json.h"
#include "progress.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DTYPES 3
#define MAX_DIMS 32

static const char warmup_help[] =
    "Usage: flashattn warmup --dtype T[,T...] --dim D[,D...] [options]\n"
    "\n"
    "Runs fa_warmup once per shape of the cartesian product of --dtype and --dim: one call of\n"
    "the shape (and its backward with --backward) on zeros, so that a backend that compiles its\n"
    "kernels at run time (OpenCL; CUDA built with -Dcuda-kernels=rtc) compiles them now, or loads\n"
    "them from the disk cache ($FLASHATTN_CACHE_DIR, else ~/.cache/flashattn), and the first real\n"
    "call does not wait. The kernels depend on the dtype, the head dims and the options, not on\n"
    "the lengths. One line per shape on stderr, then a summary; the first failure stops the run\n"
    "with the library's message.\n"
    "\n"
    "  --backend NAME        cpu, cuda, hip, opencl or default (default: best available)\n"
    "  --device N            device index within the backend (0)\n"
    "  --dtype T[,T...]      fp32, fp16, bf16 (required; at most 3)\n"
    "  --dim D[,D...]        head dims of Q and K (required; at most 32)\n"
    "  --dim-v N             head dim of V and O (0: each --dim)\n"
    "  --heads-q N           query heads (1)\n"
    "  --heads-kv N          key/value heads (= --heads-q; GQA when fewer)\n"
    "  --seqlen N            sequence length of the warm-up call (128)\n"
    "  --backward            warm the backward as well\n"
    "  --sink                a learnable sink (zeros, [heads-q] float32)\n"
    "  --causal, --window L R, --softcap C, --scale S, --dropout P, --deterministic\n"
    "                        as in `flashattn run` (--seed and --offset are taken and unused)\n"
    "  --json                one JSON object on stdout (docs/tool.md lists its members)\n";

static const struct option warmup_options[] = {
    HELP_OPTION,
    {"backend", required_argument, NULL, 0},
    {"device", required_argument, NULL, 0},
    {"dtype", required_argument, NULL, 0},
    {"dim", required_argument, NULL, 0},
    {"dim-v", required_argument, NULL, 0},
    {"heads-q", required_argument, NULL, 0},
    {"heads-kv", required_argument, NULL, 0},
    {"seqlen", required_argument, NULL, 0},
    {"backward", no_argument, NULL, 0},
    {"sink", no_argument, NULL, 0},
    {"json", no_argument, NULL, 0},
    ATTENTION_OPTIONS,
    OPTIONS_END,
};

typedef struct warmup_config {
    const char *backend;
    int device;
    fa_dtype dtypes[MAX_DTYPES];
    int ndtypes;
    int64_t dims[MAX_DIMS];
    int ndims;
    int64_t dim_v, heads_q, heads_kv, seqlen;
    int backward, sink, json;
    fa_options opts;
} warmup_config;

/* --dtype's comma list: 0 or EXIT_USAGE after a message. */
static int parse_dtype_list(const char *cmd, const char *list, warmup_config *c)
{
    const char *p = list;
    for (;;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char name[16];
        fa_dtype dt;
        if (len == 0 || len >= sizeof name || c->ndtypes == MAX_DTYPES)
            return usage_error(cmd, "--dtype: '%s' is not a list of at most %d of fp32, fp16, bf16", list, MAX_DTYPES);
        memcpy(name, p, len);
        name[len] = '\0';
        if (!parse_dtype_name(name, &dt))
            return usage_error(cmd, "--dtype: '%s' is not fp32, fp16 or bf16", name);
        c->dtypes[c->ndtypes++] = dt;
        if (!end)
            return 0;
        p = end + 1;
    }
}

/* --dim's comma list of positive integers: 0 or EXIT_USAGE after a message. */
static int parse_dim_list(const char *cmd, const char *list, warmup_config *c)
{
    for (const char *p = list;;) {
        char *end = NULL;
        errno = 0;
        long long d = strtoll(p, &end, 10);
        if (end == p || errno == ERANGE || d < 1 || (*end != ',' && *end != '\0') || (*end == ',' && !end[1]) ||
            c->ndims == MAX_DIMS)
            return usage_error(cmd, "--dim: '%s' is not a list of at most %d positive integers", list, MAX_DIMS);
        c->dims[c->ndims++] = d;
        if (*end == '\0')
            return 0;
        p = end + 1;
    }
}

static int parse_warmup(int argc, char **argv, warmup_config *c)
{
    arg_cursor a;
    int parse_rc = 0;
    arg_begin(&a, "warmup", argc, argv, warmup_options);
    while (next_option(&a, &parse_rc)) {
        const char *opt = a.opt, *v = NULL;
        int rc = 0, handled = 0;
        if (is_help(opt)) {
            fputs(warmup_help, stdout);
            return -1;
        } else if (strcmp(opt, "--backend") == 0) {
            rc = take_value(&a, opt, &c->backend);
        } else if (strcmp(opt, "--device") == 0) {
            rc = take_int(&a, opt, 0, 1 << 20, &c->device);
        } else if (strcmp(opt, "--dtype") == 0) {
            c->ndtypes = 0;
            rc = take_value(&a, opt, &v);
            if (!rc)
                rc = parse_dtype_list(a.cmd, v, c);
        } else if (strcmp(opt, "--dim") == 0) {
            c->ndims = 0;
            rc = take_value(&a, opt, &v);
            if (!rc)
                rc = parse_dim_list(a.cmd, v, c);
        } else if (strcmp(opt, "--dim-v") == 0) {
            rc = take_i64(&a, opt, 0, INT64_MAX, &c->dim_v);
        } else if (strcmp(opt, "--heads-q") == 0) {
            rc = take_i64(&a, opt, 1, INT64_MAX, &c->heads_q);
        } else if (strcmp(opt, "--heads-kv") == 0) {
            rc = take_i64(&a, opt, 1, INT64_MAX, &c->heads_kv);
        } else if (strcmp(opt, "--seqlen") == 0) {
            rc = take_i64(&a, opt, 1, INT64_MAX, &c->seqlen);
        } else if (strcmp(opt, "--backward") == 0) {
            c->backward = 1;
        } else if (strcmp(opt, "--sink") == 0) {
            c->sink = 1;
        } else if (strcmp(opt, "--json") == 0) {
            c->json = 1;
        } else {
            rc = parse_attention_option(&a, &c->opts, &handled);
            if (!rc && !handled)
                rc = usage_error(a.cmd, "unknown option '%s'", opt); /* in warmup_options, not here */
        }
        if (rc)
            return rc;
    }
    if (parse_rc)
        return parse_rc;
    if (c->ndtypes == 0 || c->ndims == 0)
        return usage_error(a.cmd, "--dtype and --dim name the shapes to warm: both are required");
    if (c->heads_kv == 0)
        c->heads_kv = c->heads_q;
    return 0;
}

/* "bf16 d128 fwd+bwd causal" */
static void shape_label(const warmup_config *c, fa_dtype dt, int64_t d, char *buf, size_t len)
{
    int n = snprintf(buf, len, "%s d%lld", fa_dtype_name(dt), (long long)d);
    if (c->dim_v > 0 && n >= 0 && (size_t)n < len)
        n += snprintf(buf + n, len - (size_t)n, " dv%lld", (long long)c->dim_v);
    if (c->heads_kv != c->heads_q && n >= 0 && (size_t)n < len)
        n += snprintf(buf + n, len - (size_t)n, " h%lld/%lld", (long long)c->heads_q, (long long)c->heads_kv);
    if (n >= 0 && (size_t)n < len)
        n += snprintf(buf + n, len - (size_t)n, " %s", c->backward ? "fwd+bwd" : "fwd");
    const fa_options *o = &c->opts;
    if (o->causal && n >= 0 && (size_t)n < len)
        n += snprintf(buf + n, len - (size_t)n, " causal");
    if ((o->window_left >= 0 || o->window_right >= 0) && n >= 0 && (size_t)n < len)
        n += snprintf(buf + n, len - (size_t)n, " window %lld,%lld", (long long)o->window_left,
                      (long long)o->window_right);
    if (o->softcap != 0.0f && n >= 0 && (size_t)n < len)
        n += snprintf(buf + n, len - (size_t)n, " softcap %g", (double)o->softcap);
    if (c->sink && n >= 0 && (size_t)n < len)
        n += snprintf(buf + n, len - (size_t)n, " sink");
    if (o->dropout_p > 0.0f && n >= 0 && (size_t)n < len)
        n += snprintf(buf + n, len - (size_t)n, " dropout");
    if (o->deterministic && n >= 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, " deterministic");
}

typedef struct shape_result {
    fa_dtype dtype;
    int64_t dim;
    double seconds;
} shape_result;

static void warmup_json(const warmup_config *c, const char *backend, const char *device_name,
                        const shape_result *done, int ndone, double total, int rc)
{
    json_writer jw;
    json_init(&jw, stdout);
    json_begin_object(&jw, NULL);
    json_string(&jw, "command", "warmup");
    json_string(&jw, "version", fa_version());
    json_string(&jw, "backend", backend);
    json_int(&jw, "device", c->device);
    json_string(&jw, "device_name", device_name);
    json_int(&jw, "seqlen", c->seqlen);
    json_int(&jw, "heads_q", c->heads_q);
    json_int(&jw, "heads_kv", c->heads_kv);
    json_int(&jw, "dim_v", c->dim_v);
    json_bool(&jw, "backward", c->backward);
    json_begin_object(&jw, "options");
    json_bool(&jw, "causal", c->opts.causal);
    json_int(&jw, "window_left", c->opts.window_left);
    json_int(&jw, "window_right", c->opts.window_right);
    json_double(&jw, "softmax_scale", c->opts.softmax_scale);
    json_double(&jw, "softcap", c->opts.softcap);
    json_bool(&jw, "sink", c->sink);
    json_double(&jw, "dropout", c->opts.dropout_p);
    json_bool(&jw, "deterministic", c->opts.deterministic);
    json_end_object(&jw);
    json_begin_array(&jw, "shapes");
    for (int i = 0; i < ndone; ++i) {
        json_begin_object(&jw, NULL);
        json_string(&jw, "dtype", fa_dtype_name(done[i].dtype));
        json_int(&jw, "dim", done[i].dim);
        json_double(&jw, "seconds", done[i].seconds);
        json_end_object(&jw);
    }
    json_end_array(&jw);
    json_int(&jw, "shapes_total", (int64_t)c->ndtypes * c->ndims);
    json_double(&jw, "seconds", total);
    json_int(&jw, "exit_status", rc);
    if (rc)
        json_string(&jw, "error", last_error_message());
    else
        json_null(&jw, "error");
    json_end_object(&jw);
    json_finish(&jw);
}

/* The shapes in order, each timed; stops at the first failure. The number warmed in *ndone. */
static int warm_shapes(const warmup_config *c, fa_context *ctx, const fa_options *opts, shape_result *done,
                       int *ndone)
{
    const int count = c->ndtypes * c->ndims;
    for (int i = 0; i < count; ++i) {
        const fa_dtype dt = c->dtypes[i / c->ndims];
        const int64_t d = c->dims[i % c->ndims];
        char label[160];
        shape_label(c, dt, d, label, sizeof label);
        const double t0 = progress_clock();
        fa_status st = fa_warmup(ctx, dt, c->seqlen, c->heads_q, c->heads_kv, d, c->dim_v, opts, c->backward);
        const double seconds = progress_clock() - t0;
        if (st != FA_SUCCESS) {
            char what[200];
            snprintf(what, sizeof what, "[%d/%d] %s", i + 1, count, label);
            return library_error("warmup", ctx, what, st);
        }
        fprintf(stderr, "[%d/%d] %s: %.2f s\n", i + 1, count, label, seconds);
        done[i] = (shape_result){dt, d, seconds};
        *ndone = i + 1;
    }
    return 0;
}

int cmd_warmup(int argc, char **argv)
{
    warmup_config c;
    memset(&c, 0, sizeof c);
    c.heads_q = 1;
    c.seqlen = 128;
    c.opts = fa_options_default();
    int rc = parse_warmup(argc, argv, &c);
    if (rc)
        return rc < 0 ? 0 : rc;

    const double start = progress_clock();
    shape_result done[MAX_DTYPES * MAX_DIMS];
    int ndone = 0;
    char device_name[256] = "";
    const char *backend_name = c.backend;
    fa_context *ctx = NULL;
    void *sink = NULL;
    fa_status st = fa_context_create(&ctx, c.backend, c.device);
    if (st != FA_SUCCESS) {
        rc = context_error("warmup", c.backend, c.device, st);
    } else {
        backend_name = fa_context_backend_name(ctx);
        if (fa_device_name(backend_name, c.device, device_name, sizeof device_name) != FA_SUCCESS)
            device_name[0] = '\0';
        fa_options opts = c.opts;
        if (c.sink) {
            /* zero logits: which kernels run depends on there being a sink, not on its values */
            int64_t bytes = 0;
            if (__builtin_mul_overflow(c.heads_q, (int64_t)sizeof(float), &bytes))
                rc = usage_error("warmup", "--heads-q %lld: the sink's bytes overflow", (long long)c.heads_q);
            float *zeros = rc ? NULL : calloc((size_t)bytes, 1);
            if (!rc && !zeros) {
                fprintf(stderr, "flashattn warmup: out of host memory for the sink\n");
                remember_error("out of host memory for the sink");
                rc = EXIT_LIBRARY;
            }
            if (!rc && (st = fa_malloc(ctx, (size_t)bytes, &sink)) != FA_SUCCESS)
                rc = library_error("warmup", ctx, "allocating the sink", st);
            if (!rc && (st = fa_memcpy(ctx, sink, zeros, (size_t)bytes, FA_COPY_HOST_TO_DEVICE)) != FA_SUCCESS)
                rc = library_error("warmup", ctx, "copying the sink", st);
            free(zeros);
            opts.learnable_sink = sink;
        }
        if (!rc)
            rc = warm_shapes(&c, ctx, &opts, done, &ndone);
    }
    const double total = progress_clock() - start;
    if (!rc)
        fprintf(stderr, "warmed %d shape%s on %s device %d%s%s%s in %.2f s\n", ndone, ndone == 1 ? "" : "s",
                backend_name, c.device, device_name[0] ? " (" : "", device_name, device_name[0] ? ")" : "", total);
    if (c.json)
        warmup_json(&c, backend_name, device_name[0] ? device_name : NULL, done, ndone, total, rc);
    if (sink)
        fa_free(ctx, sink);
    fa_context_destroy(ctx);
    return rc;
}
