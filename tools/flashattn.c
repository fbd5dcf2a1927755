/* flashattn.c: the flashattn command-line tool. `info` lists backends, devices, capabilities and
 * plans; `run` times fa_forward/fa_backward on random inputs and can check them against the float64
 * reference; `fwd` and `bwd` run attention on .npy files; `iomodel` prints the paper's IO model.
 * Exit status (main_help states it for users): 0 success; 1 the library or the device could not do
 * it, an output could not be written, or --check failed; 2 a usage error: a bad option, an input
 * that is missing, unreadable, not a valid .npy file or does not fit the others (what the library
 * rejects as an invalid argument included), an output path refused before computing. */
#include "flashattn.h"
#include "internal.h"
#include "npy.h"
#include "outputs.h"
#include "reference.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#define EXIT_LIBRARY 1
#define EXIT_USAGE 2

/* ================================================================ messages */

static void print_usage_hint(const char *cmd)
{
    if (cmd)
        fprintf(stderr, "Try 'flashattn %s --help'.\n", cmd);
    else
        fprintf(stderr, "Try 'flashattn --help'.\n");
}

/* A usage error: the message, a hint, and the exit status to return. */
static int usage_error(const char *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static int usage_error(const char *cmd, const char *fmt, ...)
{
    fprintf(stderr, "flashattn%s%s: ", cmd ? " " : "", cmd ? cmd : "");
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    print_usage_hint(cmd);
    return EXIT_USAGE;
}

/* A failed library call: the status string and the context's message (with its file and line).
 * An argument the library rejects as invalid (a bad shape, option or size) is the user's input:
 * a usage error; anything else is the library's or the device's failure. */
static int library_error(const char *cmd, fa_context *ctx, const char *what, fa_status st)
{
    const char *detail = ctx ? fa_context_last_error(ctx) : "";
    fprintf(stderr, "flashattn %s: %s failed: %s%s%s\n", cmd, what, fa_status_string(st),
            detail && *detail ? "\n  " : "", detail ? detail : "");
    return st == FA_ERR_INVALID_ARG ? EXIT_USAGE : EXIT_LIBRARY;
}

/* fa_context_create leaves no context to hold a message, so explain the common causes here. */
static int context_error(const char *cmd, const char *backend, int device, fa_status st)
{
    fprintf(stderr, "flashattn %s: cannot create a context for backend '%s', device %d: %s\n", cmd,
            backend ? backend : "default", device, fa_status_string(st));
    fprintf(stderr, "  backends compiled in:");
    for (int i = 0; i < fa_backend_count(); ++i)
        fprintf(stderr, " %s", fa_backend_name(i));
    fprintf(stderr, " (see 'flashattn info')\n");
    return EXIT_LIBRARY;
}

static void format_bytes(double bytes, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024.0 && u < 4) {
        bytes /= 1024.0;
        ++u;
    }
    if (u == 0)
        snprintf(buf, len, "%.0f B", bytes);
    else
        snprintf(buf, len, "%.1f %s", bytes, units[u]);
}

/* ================================================================ option parsing */

/* Walks argv after the subcommand name. */
typedef struct arg_cursor {
    const char *cmd;
    int argc;
    char **argv;
    int pos; /* index of the option being handled */
} arg_cursor;

/* The next word as the value of option opt; returns 0 or EXIT_USAGE. */
static int take_value(arg_cursor *a, const char *opt, const char **value)
{
    if (a->pos + 1 >= a->argc)
        return usage_error(a->cmd, "option %s needs a value", opt);
    *value = a->argv[++a->pos];
    return 0;
}

static int parse_i64_text(const char *cmd, const char *opt, const char *text, int64_t lo, int64_t hi, int64_t *out)
{
    errno = 0;
    char *end = NULL;
    long long v = strtoll(text, &end, 10);
    if (end == text || *end != '\0' || errno == ERANGE)
        return usage_error(cmd, "%s: '%s' is not an integer", opt, text);
    if (v < lo || v > hi)
        return usage_error(cmd, "%s: %lld is out of range [%lld, %lld]", opt, v, (long long)lo, (long long)hi);
    *out = (int64_t)v;
    return 0;
}

static int parse_u64_text(const char *cmd, const char *opt, const char *text, uint64_t *out)
{
    const char *s = text;
    while (*s == ' ')
        ++s;
    if (*s == '-')
        return usage_error(cmd, "%s: '%s' must not be negative", opt, text);
    errno = 0;
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 0);
    if (end == s || *end != '\0' || errno == ERANGE)
        return usage_error(cmd, "%s: '%s' is not an unsigned 64-bit integer", opt, text);
    *out = (uint64_t)v;
    return 0;
}

static int parse_f64_text(const char *cmd, const char *opt, const char *text, double lo, double hi,
                          int hi_inclusive, double *out)
{
    errno = 0;
    char *end = NULL;
    double v = strtod(text, &end);
    if (end == text || *end != '\0' || errno == ERANGE || !isfinite(v))
        return usage_error(cmd, "%s: '%s' is not a finite number", opt, text);
    if (v < lo || v > hi || (!hi_inclusive && v == hi))
        return usage_error(cmd, "%s: %g is out of range [%g, %g%s", opt, v, lo, hi, hi_inclusive ? "]" : ")");
    *out = v;
    return 0;
}

static int take_i64(arg_cursor *a, const char *opt, int64_t lo, int64_t hi, int64_t *out)
{
    const char *v = NULL;
    int rc = take_value(a, opt, &v);
    return rc ? rc : parse_i64_text(a->cmd, opt, v, lo, hi, out);
}

static int take_int(arg_cursor *a, const char *opt, int lo, int hi, int *out)
{
    int64_t v;
    int rc = take_i64(a, opt, lo, hi, &v);
    if (!rc)
        *out = (int)v;
    return rc;
}

static int take_u64(arg_cursor *a, const char *opt, uint64_t *out)
{
    const char *v = NULL;
    int rc = take_value(a, opt, &v);
    return rc ? rc : parse_u64_text(a->cmd, opt, v, out);
}

static int take_f64(arg_cursor *a, const char *opt, double lo, double hi, int hi_inclusive, double *out)
{
    const char *v = NULL;
    int rc = take_value(a, opt, &v);
    return rc ? rc : parse_f64_text(a->cmd, opt, v, lo, hi, hi_inclusive, out);
}

static int is_help(const char *s)
{
    return strcmp(s, "--help") == 0 || strcmp(s, "-h") == 0;
}

/* Options shared by run, fwd and bwd that map straight onto fa_options. *handled is set when
 * a->argv[a->pos] was one of them. */
static int parse_attention_option(arg_cursor *a, fa_options *opts, int *handled)
{
    const char *opt = a->argv[a->pos];
    *handled = 1;
    if (strcmp(opt, "--causal") == 0) {
        opts->causal = 1;
        return 0;
    }
    if (strcmp(opt, "--deterministic") == 0) {
        opts->deterministic = 1;
        return 0;
    }
    if (strcmp(opt, "--window") == 0) {
        int rc = take_i64(a, "--window (left)", -1, INT64_MAX, &opts->window_left);
        return rc ? rc : take_i64(a, "--window (right)", -1, INT64_MAX, &opts->window_right);
    }
    if (strcmp(opt, "--scale") == 0) {
        double s;
        int rc = take_f64(a, opt, -3.0e38, 3.0e38, 1, &s);
        if (!rc)
            opts->softmax_scale = (float)s;
        if (!rc && s != 0.0 && opts->softmax_scale == 0.0f) /* 0 would mean the default 1/sqrt(d) */
            return usage_error(a->cmd, "--scale: %g rounds to 0 in single precision (0 means 1/sqrt(d))", s);
        return rc;
    }
    if (strcmp(opt, "--dropout") == 0) {
        double p;
        int rc = take_f64(a, opt, 0.0, 1.0, 0, &p);
        if (!rc)
            opts->dropout_p = (float)p;
        if (!rc && opts->dropout_p >= 1.0f) /* p just below 1 can round up to 1 in float */
            return usage_error(a->cmd, "--dropout: %.17g rounds to 1 in single precision", p);
        return rc;
    }
    if (strcmp(opt, "--seed") == 0)
        return take_u64(a, opt, &opts->dropout_seed);
    if (strcmp(opt, "--offset") == 0)
        return take_u64(a, opt, &opts->dropout_offset);
    *handled = 0;
    return 0;
}

/* ================================================================ device memory */

/* A buffer in the context's memory. bytes == 0 keeps ptr NULL: the library accepts NULL data for
 * tensors with no elements, and backends need not support zero-byte allocations. */
typedef struct device_buffer {
    void *ptr;
    size_t bytes;
} device_buffer;

static fa_status device_alloc(fa_context *ctx, size_t bytes, device_buffer *buf)
{
    buf->ptr = NULL;
    buf->bytes = bytes;
    if (bytes == 0)
        return FA_SUCCESS;
    return fa_malloc(ctx, bytes, &buf->ptr);
}

static fa_status device_upload(fa_context *ctx, const void *host, size_t bytes, device_buffer *buf)
{
    fa_status st = device_alloc(ctx, bytes, buf);
    if (st == FA_SUCCESS && bytes)
        st = fa_memcpy(ctx, buf->ptr, host, bytes, FA_COPY_HOST_TO_DEVICE);
    return st;
}

static fa_status device_download(fa_context *ctx, const device_buffer *buf, void *host)
{
    if (buf->bytes == 0)
        return FA_SUCCESS;
    return fa_memcpy(ctx, host, buf->ptr, buf->bytes, FA_COPY_DEVICE_TO_HOST);
}

static void device_release(fa_context *ctx, device_buffer *buf)
{
    if (ctx && buf->ptr)
        fa_free(ctx, buf->ptr);
    buf->ptr = NULL;
    buf->bytes = 0;
}

/* ================================================================ dtypes and shapes */

static int parse_dtype_name(const char *s, fa_dtype *out)
{
    if (strcmp(s, "fp32") == 0 || strcmp(s, "f32") == 0 || strcmp(s, "float32") == 0)
        *out = FA_DTYPE_F32;
    else if (strcmp(s, "fp16") == 0 || strcmp(s, "f16") == 0 || strcmp(s, "float16") == 0)
        *out = FA_DTYPE_F16;
    else if (strcmp(s, "bf16") == 0 || strcmp(s, "bfloat16") == 0)
        *out = FA_DTYPE_BF16;
    else
        return 0;
    return 1;
}

static npy_type npy_type_of(fa_dtype dt)
{
    switch (dt) {
    case FA_DTYPE_F16: return NPY_TYPE_F16;
    case FA_DTYPE_BF16: return NPY_TYPE_U16;
    default: return NPY_TYPE_F32;
    }
}

static float dtype_load(fa_dtype dt, const void *data, int64_t i)
{
    switch (dt) {
    case FA_DTYPE_F16: return fa_f16_to_f32(((const uint16_t *)data)[i]);
    case FA_DTYPE_BF16: return fa_bf16_to_f32(((const uint16_t *)data)[i]);
    default: return ((const float *)data)[i];
    }
}

static void dtype_store(fa_dtype dt, void *data, int64_t i, float x)
{
    switch (dt) {
    case FA_DTYPE_F16: ((uint16_t *)data)[i] = fa_f32_to_f16(x); break;
    case FA_DTYPE_BF16: ((uint16_t *)data)[i] = fa_f32_to_bf16(x); break;
    default: ((float *)data)[i] = x; break;
    }
}

/* Element count and bytes of a shape, with overflow checks; returns 0 on overflow. */
static int shape_bytes(int ndim, const int64_t *shape, size_t elem, int64_t *count, size_t *bytes)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i)
        if (shape[i] < 0 || !fa_mul_ok(n, shape[i], &n))
            return 0;
    int64_t b;
    if (!fa_mul_ok(n, (int64_t)elem, &b) || (uint64_t)b > (uint64_t)SIZE_MAX)
        return 0;
    if (count)
        *count = n;
    *bytes = (size_t)b;
    return 1;
}

/* The largest Euclidean norm of the count / d rows of d elements (non-finite elements left out:
 * they propagate as documented, and are not what the score bound is about). */
static double max_row_norm(fa_dtype dt, const void *data, int64_t count, int64_t d)
{
    double best = 0.0;
    for (int64_t row = 0; row < count / d; ++row) {
        double sum = 0.0;
        for (int64_t c = 0; c < d; ++c) {
            double x = dtype_load(dt, data, row * d + c);
            if (isfinite(x))
                sum += x * x;
        }
        if (sqrt(sum) > best)
            best = sqrt(sum);
    }
    return best;
}

/* Every score is scale * q_i . k_j, bounded by |scale| * |q_i| * |k_j|. Kernels also multiply it
 * by log2(e) and subtract a running maximum of either sign, so the bound must stay below
 * FLT_MAX / 4 for no intermediate to overflow float32 (where it would become inf and then NaN).
 * Returns 0, or EXIT_USAGE after a message naming the inputs (q_name, k_name). */
static int check_score_range(const char *cmd, float softmax_scale, fa_dtype dt, int64_t d, const void *q,
                             int64_t q_count, const char *q_name, const void *k, int64_t k_count, const char *k_name)
{
    if (d <= 0) /* no scores at all; the library judges the shape */
        return 0;
    double scale = softmax_scale != 0.0f ? fabs((double)softmax_scale) : 1.0 / sqrt((double)d);
    double nq = max_row_norm(dt, q, q_count, d), nk = max_row_norm(dt, k, k_count, d);
    double reach = scale * nq * nk;
    if (reach <= (double)FLT_MAX / 4.0)
        return 0;
    fprintf(stderr,
            "flashattn %s: the scores can reach %.3g (scale %.3g x largest row norm of %s %.3g x of %s %.3g), above "
            "FLT_MAX / 4 = %.3g: they could overflow float32; use a smaller --scale or scale the inputs down\n",
            cmd, reach, scale, q_name, nq, k_name, nk, (double)FLT_MAX / 4.0);
    return EXIT_USAGE;
}

/* ================================================================ info */

static void print_capabilities(const fa_capabilities *caps)
{
    printf("    dtypes:");
    for (int dt = FA_DTYPE_F32; dt <= FA_DTYPE_BF16; ++dt)
        if (caps->dtypes & (1u << dt))
            printf(" %s", fa_dtype_name((fa_dtype)dt));
    printf("\n    head dims:");
    if (caps->head_dims[0] > 0) {
        for (int i = 0; i < 16 && caps->head_dims[i] > 0; ++i)
            printf(" %d", caps->head_dims[i]);
        printf(" (other d up to %d padded)", caps->max_head_dim);
    } else {
        printf(" 1..%d", caps->max_head_dim);
    }
    static const struct {
        unsigned bit;
        const char *word;
    } features[] = {
        {FA_FEATURE_CAUSAL, "causal"},   {FA_FEATURE_WINDOW, "window"},
        {FA_FEATURE_VARLEN, "varlen"},   {FA_FEATURE_GQA, "gqa"},
        {FA_FEATURE_DROPOUT, "dropout"}, {FA_FEATURE_BLOCK_SPARSE, "block-sparse"},
        {FA_FEATURE_LSE, "lse"},         {FA_FEATURE_DETERMINISTIC, "deterministic"},
        {FA_FEATURE_BACKWARD, "backward"}, {FA_FEATURE_STRIDES, "strides"},
        {FA_FEATURE_F32_OUTPUT, "f32-output"},
    };
    printf("\n    features:");
    for (size_t i = 0; i < sizeof features / sizeof features[0]; ++i)
        if (caps->features & features[i].bit)
            printf(" %s", features[i].word);
    char notes[sizeof caps->notes + 1];
    memcpy(notes, caps->notes, sizeof caps->notes);
    notes[sizeof caps->notes] = '\0'; /* never trust a fixed buffer to be terminated */
    printf("\n    notes: %s\n", notes[0] ? notes : "-");
}

/* The plan and kernel choice for one example shape; buffers come from the context so this works
 * on any backend. */
static void print_example_plan(fa_context *ctx, fa_dtype dt, int64_t seqlen, int64_t d)
{
    int64_t shape[4] = {1, seqlen, 1, d};
    int64_t lse_shape[3] = {1, 1, seqlen};
    size_t bytes = (size_t)(seqlen * d) * fa_dtype_size(dt);
    device_buffer q = {0}, k = {0}, v = {0}, o = {0}, lse = {0};
    fa_status st;
    if ((st = device_alloc(ctx, bytes, &q)) || (st = device_alloc(ctx, bytes, &k)) ||
        (st = device_alloc(ctx, bytes, &v)) || (st = device_alloc(ctx, bytes, &o)) ||
        (st = device_alloc(ctx, (size_t)seqlen * sizeof(float), &lse))) {
        printf("    d %lld: cannot allocate the example: %s\n", (long long)d, fa_status_string(st));
        goto done;
    }
    fa_fwd_args args;
    memset(&args, 0, sizeof args);
    args.q = fa_tensor_contiguous(q.ptr, dt, 4, shape);
    args.k = fa_tensor_contiguous(k.ptr, dt, 4, shape);
    args.v = fa_tensor_contiguous(v.ptr, dt, 4, shape);
    args.o = fa_tensor_contiguous(o.ptr, dt, 4, shape);
    args.lse = fa_tensor_contiguous(lse.ptr, FA_DTYPE_F32, 3, lse_shape);
    args.opts = fa_options_default();
    fa_plan_info plan;
    st = fa_plan(ctx, &args, &plan);
    if (st != FA_SUCCESS) {
        printf("    d %lld: %s (%s)\n", (long long)d, fa_status_string(st), fa_context_last_error(ctx));
        goto done;
    }
    char ws_f[32], ws_b[32];
    format_bytes((double)plan.workspace_fwd, ws_f, sizeof ws_f);
    format_bytes((double)plan.workspace_bwd, ws_b, sizeof ws_b);
    printf("    d %lld: tiles B_r x B_c = %lld x %lld (paper %lld x %lld from M = %lld bytes), %lld x %lld "
           "blocks, workspace forward %s, backward %s\n",
           (long long)d, (long long)plan.block_q, (long long)plan.block_k, (long long)plan.paper_block_q,
           (long long)plan.paper_block_k, (long long)plan.onchip_bytes, (long long)plan.num_q_blocks,
           (long long)plan.num_k_blocks, ws_f, ws_b);
    for (int backward = 0; backward <= 1; ++backward) {
        char variant[128] = "";
        st = fa_query_support(ctx, &args, backward, variant, sizeof variant);
        printf("      %s kernel: %s%s%s\n", backward ? "backward" : "forward ",
               st == FA_SUCCESS ? variant : fa_status_string(st), st == FA_SUCCESS ? "" : ": ",
               st == FA_SUCCESS ? "" : fa_context_last_error(ctx));
    }
done:
    device_release(ctx, &q);
    device_release(ctx, &k);
    device_release(ctx, &v);
    device_release(ctx, &o);
    device_release(ctx, &lse);
}

static const char info_help[] =
    "Usage: flashattn info [--backend NAME] [--device N]\n"
    "\n"
    "Prints the library version, the backends compiled in with their devices and capabilities, the\n"
    "backend a context gets by default (FLASHATTN_BACKEND overrides it), and the tiles the library\n"
    "plans, with the kernels it would choose, for an example shape (batch 1, seqlen 2048, 1 head,\n"
    "d = 64 and 128) on that backend or on the one given with --backend.\n";

static int cmd_info(int argc, char **argv)
{
    const char *backend = NULL;
    int device = 0;
    arg_cursor a = {"info", argc, argv, 0};
    for (a.pos = 1; a.pos < argc; ++a.pos) {
        const char *opt = argv[a.pos];
        int rc = 0;
        if (is_help(opt)) {
            fputs(info_help, stdout);
            return 0;
        } else if (strcmp(opt, "--backend") == 0) {
            rc = take_value(&a, opt, &backend);
        } else if (strcmp(opt, "--device") == 0) {
            rc = take_int(&a, opt, 0, 1 << 20, &device);
        } else {
            rc = usage_error(a.cmd, "unknown option '%s'", opt);
        }
        if (rc)
            return rc;
    }

    printf("flashattn %s\n", fa_version());
    int nb = fa_backend_count();
    printf("backends compiled in (%d):", nb);
    for (int i = 0; i < nb; ++i)
        printf(" %s", fa_backend_name(i));
    printf("\n");
    for (int i = 0; i < nb; ++i) {
        const char *name = fa_backend_name(i);
        if (!name)
            continue;
        printf("\nbackend %s\n", name);
        int count = 0;
        fa_status st = fa_device_count(name, &count);
        if (st != FA_SUCCESS) {
            printf("    devices: none usable (%s)\n", fa_status_string(st));
        } else {
            printf("    devices: %d\n", count);
            for (int dev = 0; dev < count; ++dev) {
                char dev_name[256] = "";
                st = fa_device_name(name, dev, dev_name, sizeof dev_name);
                dev_name[sizeof dev_name - 1] = '\0';
                printf("      %d: %s\n", dev, st == FA_SUCCESS ? dev_name : fa_status_string(st));
            }
        }
        fa_capabilities caps;
        st = fa_backend_capabilities(name, &caps);
        if (st == FA_SUCCESS)
            print_capabilities(&caps);
        else
            printf("    capabilities: %s\n", fa_status_string(st));
    }

    const char *env = getenv("FLASHATTN_BACKEND");
    fa_context *ctx = NULL;
    fa_status st = fa_context_create(&ctx, NULL, 0);
    printf("\ndefault backend: ");
    if (st == FA_SUCCESS)
        printf("%s (device 0)%s%s\n", fa_context_backend_name(ctx), env && *env ? ", from FLASHATTN_BACKEND=" : "",
               env && *env ? env : "");
    else
        printf("none: %s\n", fa_status_string(st));
    if (backend) {
        fa_context_destroy(ctx);
        ctx = NULL;
        st = fa_context_create(&ctx, backend, device);
        if (st != FA_SUCCESS)
            return context_error(a.cmd, backend, device, st);
    }
    if (ctx) {
        const char *name = fa_context_backend_name(ctx);
        fa_capabilities caps;
        fa_dtype dt = FA_DTYPE_F32;
        if (fa_backend_capabilities(name, &caps) == FA_SUCCESS && (caps.dtypes & (1u << FA_DTYPE_F16)))
            dt = FA_DTYPE_F16;
        printf("\nplan on %s device %d for batch 1, seqlen_q = seqlen_k = 2048, 1 head, %s:\n", name,
               fa_context_device(ctx), fa_dtype_name(dt));
        print_example_plan(ctx, dt, 2048, 64);
        print_example_plan(ctx, dt, 2048, 128);
        fa_context_destroy(ctx);
    }
    return 0;
}

/* ================================================================ run */

static const char run_help[] =
    "Usage: flashattn run [options]\n"
    "\n"
    "Times fa_forward (and fa_backward) on random normal inputs and reports time, TFLOP/s, the kernel\n"
    "variant, the planned tiles and the extra memory; --check compares with the float64 reference.\n"
    "\n"
    "Problem:\n"
    "  --backend NAME        cpu, cuda, hip, opencl or default (default: best available)\n"
    "  --device N            device index within the backend (0)\n"
    "  --batch B             batch size (2)\n"
    "  --seqlen-q N          query sequence length (1024)\n"
    "  --seqlen-k N          key/value sequence length (= seqlen-q)\n"
    "  --heads H             query heads (8)\n"
    "  --heads-kv H          key/value heads, dividing --heads (= heads; fewer for GQA/MQA)\n"
    "  --dim D               head dimension (64)\n"
    "  --dtype T             fp32, fp16 or bf16 (fp16 when the backend has it, else fp32)\n"
    "Options (see include/flashattn.h, fa_options):\n"
    "  --causal              bottom-right aligned causal mask\n"
    "  --window L R          sliding window, -1 = unbounded on that side\n"
    "  --scale S             softmax scale (0 = 1/sqrt(D)); refused where the scores could\n"
    "                        overflow float32 (see 'flashattn fwd --help')\n"
    "  --dropout P --seed S --offset O   dropout probability in [0, 1) and its Philox seed/offset\n"
    "  --block-sparse PATTERN            butterfly, local, strided or random block mask\n"
    "  --block-size BQ BK    mask block (128 128)\n"
    "  --density X           target fraction of blocks for local/strided/random (0.5)\n"
    "  --block-param P       band width (local) or stride (strided); default derived from --density\n"
    "  --deterministic       bitwise reproducible backward\n"
    "Measurement:\n"
    "  --backward            also time fa_backward\n"
    "  --threads T           CPU worker threads (0 = all)\n"
    "  --repeat R            timed runs after one warm-up (10)\n"
    "  --input-seed S        seed of the random inputs (1)\n"
    "  --check               max abs error against the float64 reference (and the naive\n"
    "                        same-precision error as yardstick); exit 1 if over the conformance bound\n"
    "\n"
    "FLOPs are counted as in the FlashAttention papers: forward 4*b*hq*sq*sk*d, halved with --causal,\n"
    "backward 2.5x the forward, times the mask density with --block-sparse.\n";

typedef struct run_config {
    const char *backend;
    int device;
    int64_t batch, seqlen_q, seqlen_k, heads, heads_kv, dim;
    int have_dtype;
    fa_dtype dtype;
    fa_options opts;
    int block_sparse;
    fa_block_pattern pattern;
    int64_t block_q, block_k, block_param;
    double density;
    int backward, check, threads, repeat;
    uint64_t input_seed;
} run_config;

static int parse_block_pattern(const char *s, fa_block_pattern *out)
{
    if (strcmp(s, "butterfly") == 0)
        *out = FA_BLOCK_BUTTERFLY;
    else if (strcmp(s, "local") == 0)
        *out = FA_BLOCK_LOCAL;
    else if (strcmp(s, "strided") == 0)
        *out = FA_BLOCK_STRIDED;
    else if (strcmp(s, "random") == 0)
        *out = FA_BLOCK_RANDOM;
    else if (strcmp(s, "dense") == 0)
        *out = FA_BLOCK_DENSE;
    else
        return 0;
    return 1;
}

static int parse_run_args(int argc, char **argv, run_config *c, int *help)
{
    memset(c, 0, sizeof *c);
    c->batch = 2;
    c->seqlen_q = 1024;
    c->seqlen_k = -1;
    c->heads = 8;
    c->heads_kv = -1;
    c->dim = 64;
    c->opts = fa_options_default();
    c->block_q = c->block_k = 128;
    c->block_param = -1;
    c->density = 0.5;
    c->threads = -1;
    c->repeat = 10;
    c->input_seed = 1;
    *help = 0;
    const int64_t big = (int64_t)1 << 40;
    arg_cursor a = {"run", argc, argv, 0};
    for (a.pos = 1; a.pos < argc; ++a.pos) {
        const char *opt = argv[a.pos];
        int rc = 0, handled = 0;
        if (is_help(opt)) {
            *help = 1;
            return 0;
        }
        rc = parse_attention_option(&a, &c->opts, &handled);
        if (rc)
            return rc;
        if (handled)
            continue;
        if (strcmp(opt, "--backend") == 0)
            rc = take_value(&a, opt, &c->backend);
        else if (strcmp(opt, "--device") == 0)
            rc = take_int(&a, opt, 0, 1 << 20, &c->device);
        else if (strcmp(opt, "--batch") == 0)
            rc = take_i64(&a, opt, 0, big, &c->batch);
        else if (strcmp(opt, "--seqlen-q") == 0)
            rc = take_i64(&a, opt, 0, big, &c->seqlen_q);
        else if (strcmp(opt, "--seqlen-k") == 0)
            rc = take_i64(&a, opt, 0, big, &c->seqlen_k);
        else if (strcmp(opt, "--heads") == 0)
            rc = take_i64(&a, opt, 1, 1 << 20, &c->heads);
        else if (strcmp(opt, "--heads-kv") == 0)
            rc = take_i64(&a, opt, 1, 1 << 20, &c->heads_kv);
        else if (strcmp(opt, "--dim") == 0)
            rc = take_i64(&a, opt, 1, 1 << 20, &c->dim);
        else if (strcmp(opt, "--dtype") == 0) {
            const char *v = NULL;
            rc = take_value(&a, opt, &v);
            if (!rc && !parse_dtype_name(v, &c->dtype))
                rc = usage_error(a.cmd, "--dtype: '%s' is not fp32, fp16 or bf16", v);
            c->have_dtype = 1;
        } else if (strcmp(opt, "--block-sparse") == 0) {
            const char *v = NULL;
            rc = take_value(&a, opt, &v);
            if (!rc && !parse_block_pattern(v, &c->pattern))
                rc = usage_error(a.cmd, "--block-sparse: '%s' is not butterfly, local, strided or random", v);
            c->block_sparse = 1;
        } else if (strcmp(opt, "--block-size") == 0) {
            rc = take_i64(&a, "--block-size (BQ)", 1, big, &c->block_q);
            if (!rc)
                rc = take_i64(&a, "--block-size (BK)", 1, big, &c->block_k);
        } else if (strcmp(opt, "--density") == 0)
            rc = take_f64(&a, opt, 0.0, 1.0, 1, &c->density);
        else if (strcmp(opt, "--block-param") == 0)
            rc = take_i64(&a, opt, 0, big, &c->block_param);
        else if (strcmp(opt, "--backward") == 0)
            c->backward = 1;
        else if (strcmp(opt, "--check") == 0)
            c->check = 1;
        else if (strcmp(opt, "--threads") == 0)
            rc = take_int(&a, opt, 0, 4096, &c->threads);
        else if (strcmp(opt, "--repeat") == 0)
            rc = take_int(&a, opt, 1, 1000000, &c->repeat);
        else if (strcmp(opt, "--input-seed") == 0)
            rc = take_u64(&a, opt, &c->input_seed);
        else
            rc = usage_error(a.cmd, "unknown option '%s'", opt);
        if (rc)
            return rc;
    }
    if (c->seqlen_k < 0)
        c->seqlen_k = c->seqlen_q;
    if (c->heads_kv < 0)
        c->heads_kv = c->heads;
    if (c->heads % c->heads_kv != 0)
        return usage_error(a.cmd, "--heads %lld is not a multiple of --heads-kv %lld", (long long)c->heads,
                           (long long)c->heads_kv);
    return 0;
}

/* splitmix64 feeding Box-Muller: reproducible normal inputs without libc's rand(). */
typedef struct normal_rng {
    uint64_t state;
    int has_spare;
    double spare;
} normal_rng;

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double normal_next(normal_rng *r)
{
    if (r->has_spare) {
        r->has_spare = 0;
        return r->spare;
    }
    /* uniforms in (0, 1): never 0, so log is finite */
    double u1 = ((double)(splitmix64(&r->state) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
    double u2 = ((double)(splitmix64(&r->state) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
    double radius = sqrt(-2.0 * log(u1));
    r->spare = radius * sin(2.0 * M_PI * u2);
    r->has_spare = 1;
    return radius * cos(2.0 * M_PI * u2);
}

static void fill_normal(normal_rng *r, fa_dtype dt, void *data, int64_t count)
{
    for (int64_t i = 0; i < count; ++i)
        dtype_store(dt, data, i, (float)normal_next(r));
}

static double monotonic_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double peak_rss_bytes(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0.0;
    return (double)ru.ru_maxrss * 1024.0; /* Linux reports KiB */
}

/* Everything `run` owns, released in one place. */
typedef struct run_state {
    fa_context *ctx;
    fa_block_mask mask;
    int have_mask;
    device_buffer q, k, v, o, lse, dout, dq, dk, dv;
    void *host[16]; /* host staging buffers, freed at the end */
} run_state;

static void *run_host_alloc(run_state *s, size_t bytes)
{
    for (int i = 0; i < 16; ++i)
        if (!s->host[i]) {
            s->host[i] = malloc(bytes ? bytes : 1);
            return s->host[i];
        }
    return NULL;
}

static void run_state_release(run_state *s)
{
    device_buffer *bufs[] = {&s->q, &s->k, &s->v, &s->o, &s->lse, &s->dout, &s->dq, &s->dk, &s->dv};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; ++i)
        device_release(s->ctx, bufs[i]);
    for (int i = 0; i < 16; ++i)
        free(s->host[i]);
    if (s->have_mask)
        fa_block_mask_destroy(&s->mask);
    fa_context_destroy(s->ctx);
}

/* One timed call: fa_forward or fa_backward, then a synchronize so GPU time is counted. */
static fa_status call_once(fa_context *ctx, const fa_fwd_args *fwd, const fa_bwd_args *bwd)
{
    fa_status st = bwd ? fa_backward(ctx, bwd) : fa_forward(ctx, fwd);
    return st == FA_SUCCESS ? fa_synchronize(ctx) : st;
}

/* A warm-up call, then `repeat` timed calls; a progress line on stderr once a loop passes 2 s. */
static fa_status time_calls(fa_context *ctx, const char *label, const fa_fwd_args *fwd, const fa_bwd_args *bwd,
                            int repeat, double *mean_ms, double *min_ms)
{
    double t0 = monotonic_seconds();
    fa_status st = call_once(ctx, fwd, bwd);
    if (st != FA_SUCCESS)
        return st;
    double warm = monotonic_seconds() - t0;
    if (warm > 2.0)
        fprintf(stderr, "%s: warm-up took %.1f s, %d timed runs follow\n", label, warm, repeat);
    double total = 0.0, best = INFINITY, start = monotonic_seconds(), last_note = start;
    for (int r = 0; r < repeat; ++r) {
        double a = monotonic_seconds();
        st = call_once(ctx, fwd, bwd);
        double b = monotonic_seconds();
        if (st != FA_SUCCESS)
            return st;
        total += b - a;
        if (b - a < best)
            best = b - a;
        if (b - start > 2.0 && b - last_note >= 1.0 && r + 1 < repeat) {
            fprintf(stderr, "run %d/%d (%s, %.1f s so far)\n", r + 1, repeat, label, b - start);
            last_note = b;
        }
    }
    *mean_ms = 1e3 * total / repeat;
    *min_ms = 1e3 * best;
    return FA_SUCCESS;
}

/* max |got - ref| over n elements; -inf == -inf counts as 0, a NaN or a lone infinity as +inf. */
static double max_abs_error(const double *got, const double *ref, int64_t n)
{
    double worst = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        double e;
        if (got[i] == ref[i])
            e = 0.0;
        else
            e = fabs(got[i] - ref[i]);
        if (isnan(e))
            e = INFINITY;
        if (e > worst)
            worst = e;
    }
    return worst;
}

static double max_abs(const double *x, int64_t n)
{
    double m = 0.0;
    for (int64_t i = 0; i < n; ++i)
        if (isfinite(x[i]) && fabs(x[i]) > m)
            m = fabs(x[i]);
    return m;
}

/* Prints one line of the check; returns 1 if within the conformance bound
 * (factor x the naive error + 1e-5 * max(1, max|ref|)). */
static int report_error(const char *name, const double *got, const double *naive, const double *ref, int64_t n,
                        double factor)
{
    double err = max_abs_error(got, ref, n);
    double naive_err = max_abs_error(naive, ref, n);
    double scale = max_abs(ref, n);
    double bound = factor * naive_err + 1e-5 * (scale > 1.0 ? scale : 1.0);
    int ok = err <= bound;
    printf("check: max|%s - ref64| = %.3e   naive same-precision %.3e   bound %.3e   %s\n", name, err, naive_err,
           bound, ok ? "ok" : "EXCEEDS BOUND");
    return ok;
}

/* Device tensor (contiguous, dtype dt) to doubles. */
static void to_doubles(fa_dtype dt, const void *host, int64_t n, double *out)
{
    for (int64_t i = 0; i < n; ++i)
        out[i] = dtype_load(dt, host, i);
}

/* --check: downloads inputs and outputs, rebuilds the problem on a separate CPU context with the
 * host copies (fa_validate_* fills the fa_problem the reference reads), runs the float64 reference
 * and the naive baseline, and compares. The reference writes [total, heads, d] rows b*seqlen + i,
 * which is exactly the dense contiguous layout used here; LSE comes back as [heads, total]. */
static int run_check(const run_config *c, run_state *s, const fa_fwd_args *fwd, const fa_bwd_args *bwd,
                     int64_t n_q, int64_t n_k)
{
    const char *cmd = "run";
    fa_dtype dt = c->dtype;
    int64_t n_lse = c->batch * c->heads * c->seqlen_q;
    size_t es = fa_dtype_size(dt);
    void *hq = run_host_alloc(s, (size_t)n_q * es), *hk = run_host_alloc(s, (size_t)n_k * es);
    void *hv = run_host_alloc(s, (size_t)n_k * es), *ho = run_host_alloc(s, (size_t)n_q * es);
    float *hlse = run_host_alloc(s, (size_t)n_lse * sizeof(float));
    void *hdo = NULL, *hdq = NULL, *hdk = NULL, *hdv = NULL;
    if (bwd) {
        hdo = run_host_alloc(s, (size_t)n_q * es);
        hdq = run_host_alloc(s, (size_t)n_q * es);
        hdk = run_host_alloc(s, (size_t)n_k * es);
        hdv = run_host_alloc(s, (size_t)n_k * es);
    }
    if (!hq || !hk || !hv || !ho || !hlse || (bwd && (!hdo || !hdq || !hdk || !hdv))) {
        fprintf(stderr, "flashattn run: --check: out of host memory\n");
        return EXIT_LIBRARY;
    }
    fa_status st;
    if ((st = device_download(s->ctx, &s->q, hq)) || (st = device_download(s->ctx, &s->k, hk)) ||
        (st = device_download(s->ctx, &s->v, hv)) || (st = device_download(s->ctx, &s->o, ho)) ||
        (st = device_download(s->ctx, &s->lse, hlse)) ||
        (bwd && ((st = device_download(s->ctx, &s->dout, hdo)) || (st = device_download(s->ctx, &s->dq, hdq)) ||
                 (st = device_download(s->ctx, &s->dk, hdk)) || (st = device_download(s->ctx, &s->dv, hdv)))))
        return library_error(cmd, s->ctx, "--check: downloading the results", st);

    fa_context *cpu = NULL;
    st = fa_context_create(&cpu, "cpu", 0);
    if (st != FA_SUCCESS)
        return context_error(cmd, "cpu", 0, st);
    int rc = EXIT_LIBRARY, all_ok = 1;
    int32_t *cu_host = NULL;
    double *ref[4] = {NULL, NULL, NULL, NULL}, *naive[4] = {NULL, NULL, NULL, NULL}, *got = NULL;
    fa_problem p;

    /* forward */
    fa_fwd_args hf = *fwd;
    hf.q.data = hq;
    hf.k.data = hk;
    hf.v.data = hv;
    hf.o.data = ho;
    hf.lse.data = hlse;
    st = fa_validate_forward(cpu, &hf, &p, &cu_host);
    if (st != FA_SUCCESS) {
        rc = library_error(cmd, cpu, "--check: fa_validate_forward on the host copies", st);
        goto done;
    }
    int64_t n_max = n_q > n_k ? n_q : n_k;
    got = malloc(sizeof(double) * (size_t)(n_max > n_lse ? n_max : n_lse));
    ref[0] = malloc(sizeof(double) * (size_t)n_q);
    ref[1] = malloc(sizeof(double) * (size_t)(n_lse ? n_lse : 1));
    naive[0] = malloc(sizeof(double) * (size_t)n_q);
    naive[1] = malloc(sizeof(double) * (size_t)(n_lse ? n_lse : 1));
    if (!got || !ref[0] || !ref[1] || !naive[0] || !naive[1]) {
        fprintf(stderr, "flashattn run: --check: out of host memory for the reference\n");
        goto done;
    }
    fprintf(stderr, "check: running the float64 reference forward...\n");
    if ((st = fa_ref_forward(&p, ref[0], ref[1])) || (st = fa_naive_forward(&p, naive[0], naive[1]))) {
        rc = library_error(cmd, NULL, "--check: the reference forward", st);
        goto done;
    }
    to_doubles(dt, ho, n_q, got);
    all_ok &= report_error("O", got, naive[0], ref[0], n_q, 2.0);
    {
        /* LSE: device [b, h, s], reference [h, b*s]. Not in the conformance factor rule: within 1e-3
         * for half types and 1e-5 for fp32, and -inf exactly where the reference is -inf. */
        double lse_err = 0.0;
        for (int64_t b = 0; b < c->batch; ++b)
            for (int64_t h = 0; h < c->heads; ++h)
                for (int64_t i = 0; i < c->seqlen_q; ++i) {
                    double r = ref[1][h * c->batch * c->seqlen_q + b * c->seqlen_q + i];
                    double g = hlse[(b * c->heads + h) * c->seqlen_q + i];
                    double e = g == r ? 0.0 : fabs(g - r);
                    if (isnan(e))
                        e = INFINITY;
                    if (e > lse_err)
                        lse_err = e;
                }
        double tol = dt == FA_DTYPE_F32 ? 1e-5 : 1e-3;
        int ok = lse_err <= tol;
        printf("check: max|LSE - ref64| = %.3e   tolerance %.0e   %s\n", lse_err, tol, ok ? "ok" : "EXCEEDS BOUND");
        all_ok &= ok;
    }
    free(cu_host);
    cu_host = NULL;

    if (bwd) {
        fa_bwd_args hb = *bwd;
        hb.q.data = hq;
        hb.k.data = hk;
        hb.v.data = hv;
        hb.o.data = ho;
        hb.lse.data = hlse;
        hb.dout.data = hdo;
        hb.dq.data = hdq;
        hb.dk.data = hdk;
        hb.dv.data = hdv;
        st = fa_validate_backward(cpu, &hb, &p, &cu_host);
        if (st != FA_SUCCESS) {
            rc = library_error(cmd, cpu, "--check: fa_validate_backward on the host copies", st);
            goto done;
        }
        free(ref[0]);
        free(naive[0]);
        ref[0] = malloc(sizeof(double) * (size_t)n_q);
        naive[0] = malloc(sizeof(double) * (size_t)n_q);
        ref[2] = malloc(sizeof(double) * (size_t)n_k);
        ref[3] = malloc(sizeof(double) * (size_t)n_k);
        naive[2] = malloc(sizeof(double) * (size_t)n_k);
        naive[3] = malloc(sizeof(double) * (size_t)n_k);
        if (!ref[0] || !naive[0] || !ref[2] || !ref[3] || !naive[2] || !naive[3]) {
            fprintf(stderr, "flashattn run: --check: out of host memory for the reference\n");
            goto done;
        }
        fprintf(stderr, "check: running the float64 reference backward...\n");
        if ((st = fa_ref_backward(&p, ref[0], ref[2], ref[3])) ||
            (st = fa_naive_backward(&p, naive[0], naive[2], naive[3]))) {
            rc = library_error(cmd, NULL, "--check: the reference backward", st);
            goto done;
        }
        to_doubles(dt, hdq, n_q, got);
        all_ok &= report_error("dQ", got, naive[0], ref[0], n_q, 3.0);
        to_doubles(dt, hdk, n_k, got);
        all_ok &= report_error("dK", got, naive[2], ref[2], n_k, 3.0);
        to_doubles(dt, hdv, n_k, got);
        all_ok &= report_error("dV", got, naive[3], ref[3], n_k, 3.0);
    }
    if (all_ok) {
        rc = 0;
    } else {
        fprintf(stderr, "flashattn run: --check: an error exceeds its bound\n");
        rc = EXIT_LIBRARY;
    }
done:
    free(cu_host);
    free(got);
    for (int i = 0; i < 4; ++i) {
        free(ref[i]);
        free(naive[i]);
    }
    fa_context_destroy(cpu);
    return rc;
}

static int cmd_run(int argc, char **argv)
{
    const char *cmd = "run";
    run_config c;
    int help = 0;
    int rc = parse_run_args(argc, argv, &c, &help);
    if (rc)
        return rc;
    if (help) {
        fputs(run_help, stdout);
        return 0;
    }

    run_state s;
    memset(&s, 0, sizeof s);
    fa_status st = fa_context_create(&s.ctx, c.backend, c.device);
    if (st != FA_SUCCESS)
        return context_error(cmd, c.backend, c.device, st);
    const char *backend = fa_context_backend_name(s.ctx);
    rc = EXIT_LIBRARY;
    if (c.threads >= 0 && (st = fa_context_set_num_threads(s.ctx, c.threads)) != FA_SUCCESS) {
        rc = library_error(cmd, s.ctx, "fa_context_set_num_threads", st);
        goto done;
    }
    if (!c.have_dtype) {
        fa_capabilities caps;
        c.dtype = FA_DTYPE_F32;
        if (fa_backend_capabilities(backend, &caps) == FA_SUCCESS && (caps.dtypes & (1u << FA_DTYPE_F16)))
            c.dtype = FA_DTYPE_F16;
    }

    /* sizes, checked before anything is allocated */
    int64_t qshape[4] = {c.batch, c.seqlen_q, c.heads, c.dim};
    int64_t kshape[4] = {c.batch, c.seqlen_k, c.heads_kv, c.dim};
    int64_t lshape[3] = {c.batch, c.heads, c.seqlen_q};
    int64_t n_q, n_k, n_lse;
    size_t b_q, b_k, b_lse;
    size_t es = fa_dtype_size(c.dtype);
    if (!shape_bytes(4, qshape, es, &n_q, &b_q) || !shape_bytes(4, kshape, es, &n_k, &b_k) ||
        !shape_bytes(3, lshape, sizeof(float), &n_lse, &b_lse)) {
        rc = usage_error(cmd, "the problem size overflows 64 bits");
        goto done;
    }

    if (c.block_sparse) {
        int64_t param = c.block_param;
        if (param < 0 && c.pattern == FA_BLOCK_LOCAL) {
            /* a band of 2w+1 of the nk key blocks keeps about the requested fraction */
            int64_t nk = (c.seqlen_k + c.block_k - 1) / c.block_k;
            double w = (c.density * (double)nk - 1.0) / 2.0;
            param = w > 0.0 ? (int64_t)llround(w) : 0;
        } else if (param < 0 && c.pattern == FA_BLOCK_STRIDED) {
            param = c.density > 0.0 ? (int64_t)llround(1.0 / c.density) : INT32_MAX;
            if (param < 1)
                param = 1;
        }
        if (param < 0)
            param = 0;
        st = fa_block_mask_create(&s.mask, c.pattern, 1, c.seqlen_q, c.seqlen_k, c.block_q, c.block_k, param,
                                  c.density, c.input_seed);
        if (st != FA_SUCCESS) {
            rc = library_error(cmd, NULL, "fa_block_mask_create", st);
            goto done;
        }
        s.have_mask = 1;
        c.opts.block_mask = &s.mask;
    }

    /* inputs: random normal on the host, uploaded with fa_memcpy so any backend works */
    {
        normal_rng rng = {c.input_seed, 0, 0.0};
        void *hq = run_host_alloc(&s, b_q), *hk = run_host_alloc(&s, b_k), *hv = run_host_alloc(&s, b_k);
        void *hdo = c.backward ? run_host_alloc(&s, b_q) : NULL;
        if (!hq || !hk || !hv || (c.backward && !hdo)) {
            fprintf(stderr, "flashattn run: out of host memory for the inputs\n");
            goto done;
        }
        fill_normal(&rng, c.dtype, hq, n_q);
        fill_normal(&rng, c.dtype, hk, n_k);
        fill_normal(&rng, c.dtype, hv, n_k);
        if (c.backward)
            fill_normal(&rng, c.dtype, hdo, n_q);
        if ((rc = check_score_range(cmd, c.opts.softmax_scale, c.dtype, c.dim, hq, n_q, "the random q", hk, n_k,
                                    "the random k")) != 0)
            goto done;
        rc = EXIT_LIBRARY;
        if ((st = device_upload(s.ctx, hq, b_q, &s.q)) || (st = device_upload(s.ctx, hk, b_k, &s.k)) ||
            (st = device_upload(s.ctx, hv, b_k, &s.v)) || (st = device_alloc(s.ctx, b_q, &s.o)) ||
            (st = device_alloc(s.ctx, b_lse, &s.lse)) ||
            (c.backward && ((st = device_upload(s.ctx, hdo, b_q, &s.dout)) || (st = device_alloc(s.ctx, b_q, &s.dq)) ||
                            (st = device_alloc(s.ctx, b_k, &s.dk)) || (st = device_alloc(s.ctx, b_k, &s.dv))))) {
            rc = library_error(cmd, s.ctx, "allocating and uploading the inputs", st);
            goto done;
        }
    }

    fa_fwd_args fwd;
    memset(&fwd, 0, sizeof fwd);
    fwd.q = fa_tensor_contiguous(s.q.ptr, c.dtype, 4, qshape);
    fwd.k = fa_tensor_contiguous(s.k.ptr, c.dtype, 4, kshape);
    fwd.v = fa_tensor_contiguous(s.v.ptr, c.dtype, 4, kshape);
    fwd.o = fa_tensor_contiguous(s.o.ptr, c.dtype, 4, qshape);
    fwd.lse = fa_tensor_contiguous(s.lse.ptr, FA_DTYPE_F32, 3, lshape);
    fwd.opts = c.opts;
    fa_bwd_args bwd;
    memset(&bwd, 0, sizeof bwd);
    bwd.q = fwd.q;
    bwd.k = fwd.k;
    bwd.v = fwd.v;
    bwd.o = fwd.o;
    bwd.lse = fwd.lse;
    bwd.dout = fa_tensor_contiguous(s.dout.ptr, c.dtype, 4, qshape);
    bwd.dq = fa_tensor_contiguous(s.dq.ptr, c.dtype, 4, qshape);
    bwd.dk = fa_tensor_contiguous(s.dk.ptr, c.dtype, 4, kshape);
    bwd.dv = fa_tensor_contiguous(s.dv.ptr, c.dtype, 4, kshape);
    bwd.opts = c.opts;

    /* what the library will do */
    char variant_fwd[128] = "", variant_bwd[128] = "";
    if ((st = fa_query_support(s.ctx, &fwd, 0, variant_fwd, sizeof variant_fwd)) != FA_SUCCESS) {
        rc = library_error(cmd, s.ctx, "fa_query_support (forward)", st);
        goto done;
    }
    if (c.backward && (st = fa_query_support(s.ctx, &fwd, 1, variant_bwd, sizeof variant_bwd)) != FA_SUCCESS) {
        rc = library_error(cmd, s.ctx, "fa_query_support (backward)", st);
        goto done;
    }
    fa_plan_info plan;
    if ((st = fa_plan(s.ctx, &fwd, &plan)) != FA_SUCCESS) {
        rc = library_error(cmd, s.ctx, "fa_plan", st);
        goto done;
    }

    char dev_name[256] = "";
    if (fa_device_name(backend, c.device, dev_name, sizeof dev_name) != FA_SUCCESS)
        snprintf(dev_name, sizeof dev_name, "?");
    dev_name[sizeof dev_name - 1] = '\0';
    printf("backend: %s, device %d (%s)", backend, c.device, dev_name);
    if (strcmp(backend, "cpu") == 0)
        printf(", %d threads", fa_context_num_threads(s.ctx));
    printf("\nproblem: batch %lld, seqlen_q %lld, seqlen_k %lld, heads %lld (kv %lld), d %lld, %s", (long long)c.batch,
           (long long)c.seqlen_q, (long long)c.seqlen_k, (long long)c.heads, (long long)c.heads_kv, (long long)c.dim,
           fa_dtype_name(c.dtype));
    if (c.opts.causal)
        printf(", causal");
    if (c.opts.window_left >= 0 || c.opts.window_right >= 0)
        printf(", window (%lld, %lld)", (long long)c.opts.window_left, (long long)c.opts.window_right);
    if (c.opts.softmax_scale != 0.0f)
        printf(", scale %g", (double)c.opts.softmax_scale);
    if (c.opts.dropout_p > 0.0f)
        printf(", dropout %g (seed %llu, offset %llu)", (double)c.opts.dropout_p,
               (unsigned long long)c.opts.dropout_seed, (unsigned long long)c.opts.dropout_offset);
    double density = 1.0;
    if (s.have_mask) {
        density = fa_block_mask_density(&s.mask);
        printf(", block-sparse %lld x %lld blocks, density %.3f", (long long)c.block_q, (long long)c.block_k, density);
    }
    if (c.opts.deterministic)
        printf(", deterministic");
    printf("\nkernel: forward %s", variant_fwd);
    if (c.backward)
        printf(", backward %s", variant_bwd);
    char ws_f[32], ws_b[32];
    format_bytes((double)plan.workspace_fwd, ws_f, sizeof ws_f);
    format_bytes((double)plan.workspace_bwd, ws_b, sizeof ws_b);
    printf("\nplan: tiles B_r x B_c = %lld x %lld (paper %lld x %lld from M = %lld bytes), %lld x %lld blocks\n",
           (long long)plan.block_q, (long long)plan.block_k, (long long)plan.paper_block_q,
           (long long)plan.paper_block_k, (long long)plan.onchip_bytes, (long long)plan.num_q_blocks,
           (long long)plan.num_k_blocks);
    fflush(stdout);

    double flops_fwd = 4.0 * (double)c.batch * (double)c.heads * (double)c.seqlen_q * (double)c.seqlen_k *
                       (double)c.dim * (c.opts.causal ? 0.5 : 1.0) * density;
    double rss_before = peak_rss_bytes();
    double mean_ms, min_ms;
    if ((st = time_calls(s.ctx, "forward", &fwd, NULL, c.repeat, &mean_ms, &min_ms)) != FA_SUCCESS) {
        rc = library_error(cmd, s.ctx, "fa_forward", st);
        goto done;
    }
    printf("forward:  %10.3f ms mean, %10.3f ms min over %d runs, %8.4g TFLOP/s (%.3g FLOP)\n", mean_ms, min_ms,
           c.repeat, mean_ms > 0.0 ? flops_fwd / (mean_ms * 1e-3) / 1e12 : 0.0, flops_fwd);
    fflush(stdout);
    if (c.backward) {
        double flops_bwd = 2.5 * flops_fwd;
        if ((st = time_calls(s.ctx, "backward", NULL, &bwd, c.repeat, &mean_ms, &min_ms)) != FA_SUCCESS) {
            rc = library_error(cmd, s.ctx, "fa_backward", st);
            goto done;
        }
        printf("backward: %10.3f ms mean, %10.3f ms min over %d runs, %8.4g TFLOP/s (%.3g FLOP)\n", mean_ms, min_ms,
               c.repeat, mean_ms > 0.0 ? flops_bwd / (mean_ms * 1e-3) / 1e12 : 0.0, flops_bwd);
    }
    {
        double io = (double)(2 * b_q + 2 * b_k + b_lse) + (c.backward ? (double)(2 * b_q + 2 * b_k) : 0.0);
        char io_text[32];
        format_bytes(io, io_text, sizeof io_text);
        printf("memory: tensors %s; library workspace forward %s, backward %s", io_text, ws_f, ws_b);
        if (strcmp(backend, "cpu") == 0) {
            char before[32], after[32];
            double rss_after = peak_rss_bytes();
            format_bytes(rss_before, before, sizeof before);
            format_bytes(rss_after, after, sizeof after);
            printf("; peak RSS %s (%s before the first call)", after, before);
        }
        printf("\n");
        fflush(stdout);
    }
    rc = 0;
    if (c.check)
        rc = run_check(&c, &s, &fwd, c.backward ? &bwd : NULL, n_q, n_k);
done:
    run_state_release(&s);
    return rc;
}

/* ================================================================ fwd / bwd on .npy files */

/* The output-safety rules of fwd and bwd (tools/outputs.h), and the exit status. */
#define OUTPUT_FILES_HELP                                                                                   \
    "\n"                                                                                                     \
    "Output files are checked before anything is computed: each must be absent or a regular file\n"         \
    "(writable) in an existing, writable directory. A symbolic link is written through: the link\n"          \
    "stays and the file it points to is replaced (a link to a missing file is refused). Two outputs\n"       \
    "naming one file, or an output naming an input (the same path, a link or a hard link), are\n"           \
    "refused. Every output is written to a temporary '.NAME.XXXXXX' beside it, and all are renamed\n"       \
    "into place only when all were written: a failure before then removes the temporaries and\n"           \
    "changes no existing file (a process killed while writing leaves its temporary behind). A\n"           \
    "replaced file keeps its permissions; it is a new file, so its other hard links keep the old\n"        \
    "contents.\n"                                                                                           \
    "\n"                                                                                                     \
    "Exit status: 0 success; 1 the library or device failed (no such backend or device, an\n"              \
    "unsupported case, out of memory) or an output could not be written; 2 a usage error: a bad\n"         \
    "option, an input file missing, unreadable, not a valid .npy or not fitting the others (also\n"         \
    "when the library rejects it as an invalid argument), or an output path refused as above.\n"

static const char fwd_help[] =
    "Usage: flashattn fwd --q Q.npy --k K.npy --v V.npy --out O.npy [--lse LSE.npy] [options]\n"
    "\n"
    "Attention on NumPy arrays. Dense layout: Q [batch, seqlen_q, heads_q, d], K and V\n"
    "[batch, seqlen_k, heads_kv, d]. With --cu-seqlens-q/-k (int32, batch + 1 offsets) the packed\n"
    "layout: Q [total_q, heads_q, d], K and V [total_k, heads_kv, d]. dtype from the files: '<f4'\n"
    "fp32, '<f2' fp16, '<u2' with --bf16 bfloat16 bit patterns. O has Q's dtype and shape; LSE is\n"
    "float32 [batch, heads_q, seqlen_q] (packed: [heads_q, total_q]); -inf for fully masked rows.\n"
    "\n"
    "Options:\n"
    "  --causal              bottom-right aligned causal mask\n"
    "  --window L R          sliding window, -1 = unbounded on that side\n"
    "  --scale S             softmax scale (0 = 1/sqrt(d), the default)\n"
    "  --dropout P --seed S --offset O   dropout (Philox, see core/philox.h)\n"
    "  --block-mask M.npy --block-size BQ BK\n"
    "                        uint8/bool block bitmap [rows, cols] or [heads_q, rows, cols]\n"
    "  --cu-seqlens-q A.npy --cu-seqlens-k B.npy   packed variable-length batch\n"
    "  --bf16                read '<u2' arrays as bfloat16\n"
    "  --backend NAME --device N --threads T\n"
    "\n"
    "Inputs must be regular files: a FIFO, device or directory is refused, never waited on. With\n"
    "--cu-seqlens the last offsets must equal the packed rows (total_q, total_k). --scale (or\n"
    "1/sqrt(d)) times the largest |q_i| and |k_j| (row norms) must stay below FLT_MAX / 4, so no\n"
    "score can overflow float32; an input with larger rows is refused.\n"
    OUTPUT_FILES_HELP;


static const char bwd_help[] =
    "Usage: flashattn bwd --q Q.npy --k K.npy --v V.npy --o O.npy --lse LSE.npy --do DO.npy\n"
    "                     --dq DQ.npy --dk DK.npy --dv DV.npy [options]\n"
    "\n"
    "Attention gradients on NumPy arrays: O and LSE as written by 'flashattn fwd' with the same\n"
    "options, DO the gradient of O (Q's shape and dtype). dQ has Q's shape, dK and dV K's; all in\n"
    "Q's dtype. Layouts, options and the rules for inputs as for 'flashattn fwd' (see 'flashattn\n"
    "fwd --help'), plus\n"
    "  --deterministic       bitwise reproducible gradients\n"
    OUTPUT_FILES_HELP;

/* The arrays fwd/bwd read, by role; the option that names each is kept for messages. */
enum {
    IN_Q,
    IN_K,
    IN_V,
    IN_O,
    IN_LSE,
    IN_DO,
    IN_CU_Q,
    IN_CU_K,
    IN_MASK,
    IN_COUNT
};
enum { OUT_O, OUT_LSE, OUT_DQ, OUT_DK, OUT_DV, OUT_COUNT };

typedef struct file_job {
    int backward;
    const char *cmd;
    const char *in_path[IN_COUNT];
    const char *out_path[OUT_COUNT];
    npy_array in[IN_COUNT];
    int have_block_size;
    int64_t block_q, block_k;
    int bf16;
    const char *backend;
    int device, threads;
    fa_options opts;
} file_job;

static const char *const out_option[OUT_COUNT] = {"--out", "--lse", "--dq", "--dk", "--dv"};
static const char *const in_option[IN_COUNT] = {"--q",   "--k",   "--v",           "--o",           "--lse",
                                                "--do", "--cu-seqlens-q", "--cu-seqlens-k", "--block-mask"};

static int parse_file_args(int argc, char **argv, file_job *j, int *help)
{
    arg_cursor a = {j->cmd, argc, argv, 0};
    *help = 0;
    for (a.pos = 1; a.pos < argc; ++a.pos) {
        const char *opt = argv[a.pos];
        int rc = 0, handled = 0;
        if (is_help(opt)) {
            *help = 1;
            return 0;
        }
        rc = parse_attention_option(&a, &j->opts, &handled);
        if (rc)
            return rc;
        if (handled) {
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
        else if (!j->backward && strcmp(opt, "--out") == 0)
            slot = &j->out_path[OUT_O];
        if (slot) {
            if (*slot)
                return usage_error(a.cmd, "%s given twice", opt);
            rc = take_value(&a, opt, slot);
            if (!rc && (*slot)[0] == '\0')
                rc = usage_error(a.cmd, "%s: empty file name", opt);
        } else if (strcmp(opt, "--block-size") == 0) {
            rc = take_i64(&a, "--block-size (BQ)", 1, INT64_MAX, &j->block_q);
            if (!rc)
                rc = take_i64(&a, "--block-size (BK)", 1, INT64_MAX, &j->block_k);
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
                             !j->backward && (strcmp(opt, "--o") == 0) ? " (the output is --out)" : "");
        }
        if (rc)
            return rc;
    }
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
    if (!j->in_path[IN_CU_Q] != !j->in_path[IN_CU_K])
        return usage_error(a.cmd, "--cu-seqlens-q and --cu-seqlens-k go together");
    if (j->in_path[IN_MASK] && !j->have_block_size)
        return usage_error(a.cmd, "--block-mask needs --block-size BQ BK");
    if (!j->in_path[IN_MASK] && j->have_block_size)
        return usage_error(a.cmd, "--block-size is only meaningful with --block-mask");
    return 0;
}

/* "--k k.npy" for messages. */
static int file_error(const file_job *j, int role, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

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
        return file_error(j, IN_Q, "dtype '%s' is not an attention input type ('<f4', '<f2', or '<u2' with --bf16)",
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

static void file_job_release(file_job *j)
{
    for (int i = 0; i < IN_COUNT; ++i)
        npy_free(&j->in[i]);
}

static int cmd_attention_files(int argc, char **argv, int backward)
{
    file_job j;
    memset(&j, 0, sizeof j);
    j.backward = backward;
    j.cmd = backward ? "bwd" : "fwd";
    j.threads = -1;
    j.opts = fa_options_default();
    int help = 0;
    int rc = parse_file_args(argc, argv, &j, &help);
    if (rc)
        return rc;
    if (help) {
        fputs(backward ? bwd_help : fwd_help, stdout);
        return 0;
    }

    /* ---- the output paths, checked before anything is read or computed (usage errors, exit 2) */
    char err[1200];
    static output_file outs[OUT_COUNT]; /* PATH_MAX buffers: kept off the stack */
    int out_role[OUT_COUNT], n_out = 0;
    for (int r = 0; r < OUT_COUNT; ++r)
        if (j.out_path[r]) {
            memset(&outs[n_out], 0, sizeof outs[n_out]);
            outs[n_out].option = out_option[r];
            outs[n_out].path = j.out_path[r];
            out_role[n_out++] = r;
        }
    if (outputs_check(outs, n_out, j.in_path, in_option, IN_COUNT, err, sizeof err) != 0) {
        fprintf(stderr, "flashattn %s: %s\n", j.cmd, err);
        return EXIT_USAGE;
    }

    fa_context *ctx = NULL;
    fa_block_mask mask;
    int have_mask = 0;
    device_buffer dev[IN_COUNT], out[OUT_COUNT];
    memset(dev, 0, sizeof dev);
    memset(out, 0, sizeof out);
    void *host_out[OUT_COUNT] = {NULL};
    rc = EXIT_USAGE;

    /* ---- read and check the inputs (usage errors, exit 2) */
    for (int r = 0; r < IN_COUNT; ++r) {
        if (!j.in_path[r])
            continue;
        if (npy_read(j.in_path[r], &j.in[r], err, sizeof err) != 0) {
            fprintf(stderr, "flashattn %s: %s %s\n", j.cmd, in_option[r], err);
            goto done;
        }
    }
    fa_dtype dt = FA_DTYPE_F32;
    if ((rc = attention_dtype(&j, &dt)) != 0)
        goto done;
    rc = EXIT_USAGE;
    static const int same_type_roles[] = {IN_K, IN_V, IN_O, IN_DO};
    for (size_t i = 0; i < sizeof same_type_roles / sizeof same_type_roles[0]; ++i) {
        int r = same_type_roles[i];
        if (j.in_path[r] && j.in[r].type != j.in[IN_Q].type) {
            rc = file_error(&j, r, "dtype '%s' differs from the query's '%s' (%s)", npy_type_descr(j.in[r].type),
                            npy_type_descr(j.in[IN_Q].type), j.in_path[IN_Q]);
            goto done;
        }
    }
    int varlen = j.in_path[IN_CU_Q] != NULL;
    const npy_array *q = &j.in[IN_Q], *k = &j.in[IN_K];
    int nd = varlen ? 3 : 4;
    int64_t any[4] = {-1, -1, -1, -1};
    const char *q_layout = varlen ? "[total_q, heads_q, d] (packed, with --cu-seqlens)" : "[batch, seqlen_q, heads_q, d]";
    const char *k_layout = varlen ? "[total_k, heads_kv, d] (packed, with --cu-seqlens)" : "[batch, seqlen_k, heads_kv, d]";
    if ((rc = check_shape(&j, IN_Q, nd, any, q_layout)))
        goto done;
    int64_t kexp[4] = {-1, -1, -1, -1};
    if (varlen) {
        kexp[0] = -1, kexp[1] = -1, kexp[2] = q->shape[2];
    } else {
        kexp[0] = q->shape[0], kexp[1] = -1, kexp[2] = -1, kexp[3] = q->shape[3];
    }
    if ((rc = check_shape(&j, IN_K, nd, kexp, k_layout)) || (rc = check_shape(&j, IN_V, nd, k->shape, k_layout)))
        goto done;
    if (backward && ((rc = check_shape(&j, IN_O, nd, q->shape, "(the query's shape)")) ||
                     (rc = check_shape(&j, IN_DO, nd, q->shape, "(the query's shape)"))))
        goto done;

    fa_varlen vl;
    memset(&vl, 0, sizeof vl);
    if (varlen) {
        for (int r = IN_CU_Q; r <= IN_CU_K; ++r) {
            const npy_array *cu = &j.in[r];
            if (cu->type != NPY_TYPE_I32) {
                rc = file_error(&j, r, "dtype '%s'; cu_seqlens must be int32 '<i4'", npy_type_descr(cu->type));
                goto done;
            }
            if (cu->ndim != 1 || cu->shape[0] < 1) {
                char s[256];
                npy_format_shape(cu->ndim, cu->shape, s, sizeof s);
                rc = file_error(&j, r, "shape %s; cu_seqlens must be 1-D with batch + 1 >= 1 entries", s);
                goto done;
            }
        }
        if (j.in[IN_CU_Q].shape[0] != j.in[IN_CU_K].shape[0]) {
            rc = file_error(&j, IN_CU_K, "%lld entries but %s has %lld: both need batch + 1",
                            (long long)j.in[IN_CU_K].shape[0], j.in_path[IN_CU_Q], (long long)j.in[IN_CU_Q].shape[0]);
            goto done;
        }
        vl.batch = j.in[IN_CU_Q].shape[0] - 1;
        /* rows after the last offset would belong to no sequence and their outputs to nothing */
        for (int r = IN_CU_Q; r <= IN_CU_K; ++r) {
            int packed = r == IN_CU_Q ? IN_Q : IN_K;
            int64_t last = ((const int32_t *)j.in[r].data)[vl.batch], rows = j.in[packed].shape[0];
            if (last != rows) {
                rc = file_error(&j, r, "the last offset is %lld but %s %s has %lld packed rows: they must be equal",
                                (long long)last, in_option[packed], j.in_path[packed], (long long)rows);
                goto done;
            }
        }
        /* the longest sequence bounds each side; a decreasing array is the library's to reject */
        for (int r = IN_CU_Q; r <= IN_CU_K; ++r) {
            const int32_t *cu = j.in[r].data;
            int64_t longest = 0;
            for (int64_t b = 0; b < vl.batch; ++b) {
                int64_t len = (int64_t)cu[b + 1] - cu[b];
                if (len > longest)
                    longest = len;
            }
            if (r == IN_CU_Q)
                vl.max_seqlen_q = longest;
            else
                vl.max_seqlen_k = longest;
        }
    }
    int64_t batch = varlen ? vl.batch : q->shape[0];
    int64_t heads_q = q->shape[nd - 2];
    int64_t total_q = varlen ? q->shape[0] : q->shape[1]; /* rows per LSE head (dense: seqlen_q) */
    int64_t lse_shape[3];
    int lse_nd = varlen ? 2 : 3;
    if (varlen) {
        lse_shape[0] = heads_q, lse_shape[1] = total_q;
    } else {
        lse_shape[0] = batch, lse_shape[1] = heads_q, lse_shape[2] = total_q;
    }
    if (backward) {
        if (j.in[IN_LSE].type != NPY_TYPE_F32) {
            rc = file_error(&j, IN_LSE, "dtype '%s'; LSE must be float32 '<f4'", npy_type_descr(j.in[IN_LSE].type));
            goto done;
        }
        if ((rc = check_shape(&j, IN_LSE, lse_nd, lse_shape,
                              varlen ? "[heads_q, total_q]" : "[batch, heads_q, seqlen_q]")))
            goto done;
    }
    if (j.in_path[IN_MASK]) {
        const npy_array *m = &j.in[IN_MASK];
        if (m->type != NPY_TYPE_U8 && m->type != NPY_TYPE_BOOL) {
            rc = file_error(&j, IN_MASK, "dtype '%s'; a block mask must be uint8 '|u1' or bool '|b1'",
                            npy_type_descr(m->type));
            goto done;
        }
        if (m->ndim != 2 && m->ndim != 3) {
            rc = file_error(&j, IN_MASK, "%d dimensions; a block mask is [rows, cols] or [heads_q, rows, cols]",
                            m->ndim);
            goto done;
        }
        int64_t heads = m->ndim == 3 ? m->shape[0] : 1;
        fa_status st = fa_block_mask_from_bitmap(&mask, m->data, heads, m->shape[m->ndim - 2],
                                                 m->shape[m->ndim - 1], j.block_q, j.block_k);
        if (st != FA_SUCCESS) {
            rc = file_error(&j, IN_MASK, "rejected by fa_block_mask_from_bitmap: %s", fa_status_string(st));
            goto done;
        }
        have_mask = 1;
        j.opts.block_mask = &mask;
    }

    if ((rc = check_score_range(j.cmd, j.opts.softmax_scale, dt, q->shape[nd - 1], q->data, q->count,
                                j.in_path[IN_Q], k->data, k->count, j.in_path[IN_K])) != 0)
        goto done;

    /* ---- the library (exit 1 from here on) */
    rc = EXIT_LIBRARY;
    fa_status st = fa_context_create(&ctx, j.backend, j.device);
    if (st != FA_SUCCESS) {
        rc = context_error(j.cmd, j.backend, j.device, st);
        goto done;
    }
    if (j.threads >= 0 && (st = fa_context_set_num_threads(ctx, j.threads)) != FA_SUCCESS) {
        rc = library_error(j.cmd, ctx, "fa_context_set_num_threads", st);
        goto done;
    }
    for (int r = 0; r < IN_COUNT; ++r) {
        if (!j.in_path[r] || r == IN_MASK) /* the block mask lives in host memory */
            continue;
        if ((st = device_upload(ctx, j.in[r].data, j.in[r].bytes, &dev[r])) != FA_SUCCESS) {
            rc = library_error(j.cmd, ctx, "uploading the inputs", st);
            goto done;
        }
    }
    if (varlen) {
        vl.cu_seqlens_q = dev[IN_CU_Q].ptr;
        vl.cu_seqlens_k = dev[IN_CU_K].ptr;
    }
    size_t lse_bytes;
    if (!shape_bytes(lse_nd, lse_shape, sizeof(float), NULL, &lse_bytes)) {
        rc = usage_error(j.cmd, "the LSE size overflows");
        goto done;
    }
    fa_tensor tq = fa_tensor_contiguous(dev[IN_Q].ptr, dt, nd, q->shape);
    fa_tensor tk = fa_tensor_contiguous(dev[IN_K].ptr, dt, nd, k->shape);
    fa_tensor tv = fa_tensor_contiguous(dev[IN_V].ptr, dt, nd, k->shape);
    const char *call;
    if (!backward) {
        int want_lse = j.out_path[OUT_LSE] != NULL;
        if ((st = device_alloc(ctx, q->bytes, &out[OUT_O])) ||
            (want_lse && (st = device_alloc(ctx, lse_bytes, &out[OUT_LSE])))) {
            rc = library_error(j.cmd, ctx, "allocating the outputs", st);
            goto done;
        }
        fa_fwd_args args;
        memset(&args, 0, sizeof args);
        args.q = tq;
        args.k = tk;
        args.v = tv;
        args.o = fa_tensor_contiguous(out[OUT_O].ptr, dt, nd, q->shape);
        if (want_lse)
            args.lse = fa_tensor_contiguous(out[OUT_LSE].ptr, FA_DTYPE_F32, lse_nd, lse_shape);
        args.varlen = varlen ? &vl : NULL;
        args.opts = j.opts;
        call = "fa_forward";
        st = fa_forward(ctx, &args);
    } else {
        if ((st = device_alloc(ctx, q->bytes, &out[OUT_DQ])) || (st = device_alloc(ctx, k->bytes, &out[OUT_DK])) ||
            (st = device_alloc(ctx, k->bytes, &out[OUT_DV]))) {
            rc = library_error(j.cmd, ctx, "allocating the outputs", st);
            goto done;
        }
        fa_bwd_args args;
        memset(&args, 0, sizeof args);
        args.q = tq;
        args.k = tk;
        args.v = tv;
        args.o = fa_tensor_contiguous(dev[IN_O].ptr, dt, nd, q->shape);
        args.lse = fa_tensor_contiguous(dev[IN_LSE].ptr, FA_DTYPE_F32, lse_nd, lse_shape);
        args.dout = fa_tensor_contiguous(dev[IN_DO].ptr, dt, nd, q->shape);
        args.dq = fa_tensor_contiguous(out[OUT_DQ].ptr, dt, nd, q->shape);
        args.dk = fa_tensor_contiguous(out[OUT_DK].ptr, dt, nd, k->shape);
        args.dv = fa_tensor_contiguous(out[OUT_DV].ptr, dt, nd, k->shape);
        args.varlen = varlen ? &vl : NULL;
        args.opts = j.opts;
        call = "fa_backward";
        st = fa_backward(ctx, &args);
    }
    if (st == FA_SUCCESS)
        st = fa_synchronize(ctx);
    if (st != FA_SUCCESS) {
        rc = library_error(j.cmd, ctx, call, st);
        goto done;
    }

    /* ---- every output into its temporary; all renamed into place only when all were written */
    rc = EXIT_LIBRARY;
    for (int i = 0; i < n_out; ++i) {
        int r = out_role[i];
        int is_lse = r == OUT_LSE;
        const int64_t *shape = is_lse ? lse_shape : (r == OUT_DK || r == OUT_DV) ? k->shape : q->shape;
        int ndim = is_lse ? lse_nd : nd;
        host_out[r] = malloc(out[r].bytes ? out[r].bytes : 1);
        if (!host_out[r]) {
            fprintf(stderr, "flashattn %s: out of host memory for %s\n", j.cmd, j.out_path[r]);
            goto done;
        }
        if ((st = device_download(ctx, &out[r], host_out[r])) != FA_SUCCESS) {
            rc = library_error(j.cmd, ctx, "downloading the outputs", st);
            goto done;
        }
        FILE *f = outputs_open_temp(&outs[i], err, sizeof err);
        if (!f) {
            fprintf(stderr, "flashattn %s: %s\n", j.cmd, err);
            goto done;
        }
        char close_err[sizeof err];
        int written = npy_write_stream(f, j.out_path[r], is_lse ? NPY_TYPE_F32 : npy_type_of(dt), ndim, shape,
                                       host_out[r], err, sizeof err) == 0;
        int closed = outputs_close_temp(&outs[i], f, close_err, sizeof close_err) == 0;
        if (!written || !closed) {
            fprintf(stderr, "flashattn %s: %s; no output was changed\n", j.cmd, written ? close_err : err);
            goto done;
        }
    }
    if (outputs_commit(outs, n_out, err, sizeof err) != 0) {
        fprintf(stderr, "flashattn %s: %s\n", j.cmd, err);
        goto done;
    }
    rc = 0;
done:
    outputs_discard(outs, n_out);
    for (int r = 0; r < IN_COUNT; ++r)
        device_release(ctx, &dev[r]);
    for (int r = 0; r < OUT_COUNT; ++r) {
        device_release(ctx, &out[r]);
        free(host_out[r]);
    }
    if (have_mask)
        fa_block_mask_destroy(&mask);
    fa_context_destroy(ctx);
    file_job_release(&j);
    return rc;
}

/* ================================================================ main */

/* ================================================================ iomodel */

static const char iomodel_help[] =
    "Usage: flashattn iomodel [options]\n"
    "\n"
    "Device-memory (HBM) traffic of the forward pass under the IO model of Dao et al. 2022\n"
    "(section 3.2), counted exactly (fa_io_model_compute; the constants are in core/iomodel.c) for\n"
    "standard attention (S and P written and read back), the paper's Algorithm 1 (K/V blocks in\n"
    "the outer loop) and FlashAttention-2's order (query blocks outside, K/V streamed: this\n"
    "library's kernels). Caches are not modelled. Bytes are for all batch x heads.\n"
    "\n"
    "  --seqlen-q N          query sequence length (1024)\n"
    "  --seqlen-k N          key/value sequence length (= seqlen-q)\n"
    "  --dim D               head dimension (64)\n"
    "  --batch B --heads H   (1, 1)\n"
    "  --dtype T             fp32, fp16 or bf16: bytes per element of Q, K, V, S, P, O (fp16)\n"
    "  --onchip M            on-chip memory in bytes for the paper's block sizes (232448: the\n"
    "                        shared memory a block may use on H100 / H200)\n"
    "  --block-q BR --block-k BC   block sizes (0: the paper's, B_c = ceil(M / 4d) and\n"
    "                        B_r = min(B_c, d) with M in fp32 elements)\n"
    "  --sweep B1,B2,...     one CSV line per block size b (B_r = B_c = b, at most 64 sizes): block,\n"
    "                        then read + written bytes of standard, Algorithm 1, query blocks outside\n"
    "  --csv                 the report as one CSV line (with a header): B_r, B_c and the same\n"
    "                        three totals\n";

/* The three totals (read + written) of m for bh heads; 0 or FA_ERR_OVERFLOW. */
static fa_status iomodel_totals(const fa_io_model *m, int64_t bh, int64_t v[3])
{
    const int64_t rd[3] = {m->standard_read, m->flash_read, m->flash_qouter_read};
    const int64_t wr[3] = {m->standard_write, m->flash_write, m->flash_qouter_write};
    for (int i = 0; i < 3; ++i)
        if (__builtin_add_overflow(rd[i], wr[i], &v[i]) || __builtin_mul_overflow(v[i], bh, &v[i]))
            return FA_ERR_OVERFLOW;
    return FA_SUCCESS;
}

static int cmd_iomodel(int argc, char **argv)
{
    int64_t sq = 1024, sk = -1, d = 64, batch = 1, heads = 1, onchip = 232448, bq = 0, bk = 0;
    size_t elem = 2;
    const char *dtype_name = "fp16", *sweep = NULL;
    int as_csv = 0;
    arg_cursor a = {"iomodel", argc, argv, 0};
    for (a.pos = 1; a.pos < argc; ++a.pos) {
        const char *opt = argv[a.pos];
        int rc = 0;
        if (is_help(opt)) {
            fputs(iomodel_help, stdout);
            return 0;
        } else if (strcmp(opt, "--seqlen-q") == 0) {
            rc = take_i64(&a, opt, 0, INT64_MAX, &sq);
        } else if (strcmp(opt, "--seqlen-k") == 0) {
            rc = take_i64(&a, opt, 0, INT64_MAX, &sk);
        } else if (strcmp(opt, "--dim") == 0) {
            rc = take_i64(&a, opt, 1, INT64_MAX, &d);
        } else if (strcmp(opt, "--batch") == 0) {
            rc = take_i64(&a, opt, 1, INT64_MAX, &batch);
        } else if (strcmp(opt, "--heads") == 0) {
            rc = take_i64(&a, opt, 1, INT64_MAX, &heads);
        } else if (strcmp(opt, "--onchip") == 0) {
            rc = take_i64(&a, opt, 1, INT64_MAX, &onchip);
        } else if (strcmp(opt, "--block-q") == 0) {
            rc = take_i64(&a, opt, 0, INT64_MAX, &bq);
        } else if (strcmp(opt, "--block-k") == 0) {
            rc = take_i64(&a, opt, 0, INT64_MAX, &bk);
        } else if (strcmp(opt, "--sweep") == 0) {
            rc = take_value(&a, opt, &sweep);
        } else if (strcmp(opt, "--csv") == 0) {
            as_csv = 1;
        } else if (strcmp(opt, "--dtype") == 0) {
            rc = take_value(&a, opt, &dtype_name);
            if (!rc) {
                if (strcmp(dtype_name, "fp32") == 0)
                    elem = 4;
                else if (strcmp(dtype_name, "fp16") == 0 || strcmp(dtype_name, "bf16") == 0)
                    elem = 2;
                else
                    rc = usage_error(a.cmd, "--dtype: '%s' is not fp32, fp16 or bf16", dtype_name);
            }
        } else {
            rc = usage_error(a.cmd, "unknown option '%s'", opt);
        }
        if (rc)
            return rc;
    }
    if (sk < 0)
        sk = sq;
    int64_t bh;
    if (__builtin_mul_overflow(batch, heads, &bh))
        return usage_error(a.cmd, "--batch x --heads overflows 64 bits");

    if (sweep) {
        int64_t blocks[64]; /* the whole list is parsed before anything is printed */
        int nb = 0;
        for (const char *p = sweep; *p;) {
            char *end = NULL;
            errno = 0;
            long long b = strtoll(p, &end, 10);
            if (end == p || errno == ERANGE || b < 1 || (*end != ',' && *end != '\0') || (*end == ',' && !end[1]) ||
                nb == 64)
                return usage_error(a.cmd, "--sweep: '%s' is not a list of at most 64 positive integers", sweep);
            blocks[nb++] = b;
            p = *end ? end + 1 : end;
        }
        printf("block,standard_bytes,flash_alg1_bytes,flash_qouter_bytes\n");
        for (int i = 0; i < nb; ++i) {
            fa_io_model m;
            int64_t v[3];
            fa_status st = fa_io_model_compute(sq, sk, d, onchip, blocks[i], blocks[i], elem, &m);
            if (st == FA_SUCCESS)
                st = iomodel_totals(&m, bh, v);
            if (st != FA_SUCCESS) {
                fprintf(stderr, "flashattn iomodel: block %lld: %s\n", (long long)blocks[i], fa_status_string(st));
                return EXIT_LIBRARY;
            }
            printf("%lld,%lld,%lld,%lld\n", (long long)blocks[i], (long long)v[0], (long long)v[1], (long long)v[2]);
        }
        return 0;
    }

    fa_io_model m;
    fa_status st = fa_io_model_compute(sq, sk, d, onchip, bq, bk, elem, &m);
    if (st != FA_SUCCESS) {
        fprintf(stderr, "flashattn iomodel: %s\n", fa_status_string(st));
        return EXIT_LIBRARY;
    }
    if (as_csv) {
        int64_t v[3];
        if (iomodel_totals(&m, bh, v) != FA_SUCCESS) {
            fprintf(stderr, "flashattn iomodel: %s\n", fa_status_string(FA_ERR_OVERFLOW));
            return EXIT_LIBRARY;
        }
        printf("block_q,block_k,standard_bytes,flash_alg1_bytes,flash_qouter_bytes\n%lld,%lld,%lld,%lld,%lld\n",
               (long long)m.block_q, (long long)m.block_k, (long long)v[0], (long long)v[1], (long long)v[2]);
        return 0;
    }
    int64_t pq, pk;
    fa_plan_paper_blocks(onchip, d, &pq, &pk);
    printf("IO model (Dao et al. 2022, section 3.2), forward: batch %lld x heads %lld, seqlen_q %lld, seqlen_k %lld, "
           "d %lld, %s (%zu-byte elements, fp32 statistics)\n",
           (long long)batch, (long long)heads, (long long)sq, (long long)sk, (long long)d, dtype_name, elem);
    printf("on-chip memory M = %lld bytes: the paper's blocks B_r = %lld, B_c = %lld; counted with B_r = %lld, "
           "B_c = %lld\n",
           (long long)onchip, (long long)pq, (long long)pk, (long long)m.block_q, (long long)m.block_k);
    const char *names[3] = {"standard (S, P through memory)", "flash, Algorithm 1 (K/V outside)",
                            "flash, query blocks outside"};
    const int64_t rd[3] = {m.standard_read, m.flash_read, m.flash_qouter_read};
    const int64_t wr[3] = {m.standard_write, m.flash_write, m.flash_qouter_write};
    const double std_total = ((double)rd[0] + (double)wr[0]) * (double)bh;
    printf("%-34s %12s %12s %12s %12s\n", "algorithm", "read", "written", "total", "vs standard");
    for (int i = 0; i < 3; ++i) {
        char r[32], w[32], t[32];
        const double total = ((double)rd[i] + (double)wr[i]) * (double)bh;
        format_bytes((double)rd[i] * (double)bh, r, sizeof r);
        format_bytes((double)wr[i] * (double)bh, w, sizeof w);
        format_bytes(total, t, sizeof t);
        printf("%-34s %12s %12s %12s %11.2fx\n", names[i], r, w, t, total > 0.0 ? std_total / total : 0.0);
    }
    return 0;
}

static const char main_help[] =
    "Usage: flashattn COMMAND [options]\n"
    "\n"
    "Commands:\n"
    "  info   library version, backends, devices, capabilities, the default backend, example plans\n"
    "  run    time fa_forward/fa_backward on random inputs (--check: compare with float64)\n"
    "  fwd    attention on .npy files: Q, K, V -> O (and LSE)\n"
    "  bwd    gradients on .npy files: Q, K, V, O, LSE, dO -> dQ, dK, dV\n"
    "\n"
    "'flashattn COMMAND --help' describes each. Exit status: 0 success; 1 the library or the device\n"
    "failed (no such backend or device, an unsupported case, out of memory), an output could not be\n"
    "written, or --check exceeded its bound; 2 a usage error: a bad option, an input file missing,\n"
    "unreadable, not a valid .npy or not fitting the others (also when the library rejects it as an\n"
    "invalid argument), or an output path refused before computing. FLASHATTN_BACKEND picks the\n"
    "default backend and FLASHATTN_NUM_THREADS the CPU backend's threads.\n";

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage_error(NULL, "missing COMMAND (info, run, fwd, bwd or iomodel)");
    const char *cmd = argv[1];
    if (is_help(cmd) || strcmp(cmd, "help") == 0) {
        fputs(main_help, stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0) {
        printf("flashattn %s\n", fa_version());
        return 0;
    }
    int rc;
    if (strcmp(cmd, "info") == 0)
        rc = cmd_info(argc - 1, argv + 1);
    else if (strcmp(cmd, "run") == 0)
        rc = cmd_run(argc - 1, argv + 1);
    else if (strcmp(cmd, "fwd") == 0)
        rc = cmd_attention_files(argc - 1, argv + 1, 0);
    else if (strcmp(cmd, "bwd") == 0)
        rc = cmd_attention_files(argc - 1, argv + 1, 1);
    else if (strcmp(cmd, "iomodel") == 0)
        rc = cmd_iomodel(argc - 1, argv + 1);
    else
        rc = usage_error(NULL, "unknown command '%s' (info, run, fwd, bwd or iomodel)", cmd);
    if (fflush(stdout) != 0 && rc == 0) {
        fprintf(stderr, "flashattn: cannot write to standard output\n");
        rc = EXIT_LIBRARY;
    }
    return rc;
}
