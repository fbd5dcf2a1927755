/* cmd_run.c: `flashattn run`: times fa_forward (and fa_backward) on random normal inputs and
 * reports time, TFLOP/s, the kernel variant, the planned tiles and the extra memory, as text or
 * with --json as one JSON object (run_json); --check hands the results to run_check.c. */
#include "cli.h"
#include "json.h"
#include "npy.h"
#include "run.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

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
    "  --dim D               head dimension of Q and K (64)\n"
    "  --dim-v N             head dimension of V and O (= D; DeepSeek's MLA trains with 192 / 128)\n"
    "  --dtype T             fp32, fp16 or bf16 (fp16 when the backend has it, else fp32)\n"
    "Options (see include/flashattn.h, fa_options):\n"
    "  --causal              bottom-right aligned causal mask\n"
    "  --window L R          sliding window, -1 = unbounded on that side\n"
    "  --scale S             softmax scale (0 = 1/sqrt(D)); refused where the scores could\n"
    "                        overflow float32 (see 'flashattn fwd --help')\n"
    "  --softcap C           each scaled score S becomes C tanh(S / C) (C > 0; 0 = off)\n"
    "  --alibi               ALiBi with the standard slopes of Press et al. (FlashAttention's\n"
    "                        tests): head h = 1..H gets 2^(-8 h / H) when H is a power of two;\n"
    "                        otherwise, with n the largest power of two below H, heads 1..n get\n"
    "                        2^(-8 h / n) and head n + m gets 2^(-4 (2m - 1) / n)\n"
    "  --alibi-slopes FILE.npy   ALiBi with the slopes of a float32 '<f4' file, [heads] (every\n"
    "                        sequence) or [batch, heads]\n"
    "  --sink X              learnable attention sink, one logit per query head joining every\n"
    "                        row's softmax ('flashattn fwd --help'): X a number for every head, or\n"
    "                        'random': standard normal values drawn after the inputs (--input-seed)\n"
    "  --dropout P --seed S --offset O   dropout probability in [0, 1) and its Philox seed/offset\n"
    "                        (--seed is required with --dropout)\n"
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
    "                        same-precision error as yardstick); exit 1 if over the conformance bound;\n"
    "                        with --sink and --backward also dsink\n"
    "  --json                one JSON object on stdout instead of the text (docs/tool.md lists its\n"
    "                        members); also after a failure once the options were read\n"
    "  --quiet               no notes and no progress line on stderr (only errors); without it, a\n"
    "                        terminal shows the progress of the reference and of the timed runs\n"
    "\n"
    "--decode times fa_forward_kvcache instead ('flashattn run --decode --help').\n"
    "\n"
    "FLOPs are counted as in the FlashAttention papers, two per multiply-add of the matrix products:\n"
    "forward 2*b*hq*sq*sk*(d + d_v) (S = QK^T, O = PV), backward 2*b*hq*sq*sk*(3d + 2d_v) (S again,\n"
    "dP = dO V^T, dV = P^T dO, dQ = dS K, dK = dS^T Q; 2.5x the forward when d_v = d); halved\n"
    "with --causal, times the mask density with --block-sparse.\n"
    "\n" EXIT_STATUS_HELP;

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

static const struct option run_options[] = {
    HELP_OPTION,
    ATTENTION_OPTIONS,
    {"backend", required_argument, NULL, 0},
    {"device", required_argument, NULL, 0},
    {"batch", required_argument, NULL, 0},
    {"seqlen-q", required_argument, NULL, 0},
    {"seqlen-k", required_argument, NULL, 0},
    {"heads", required_argument, NULL, 0},
    {"heads-kv", required_argument, NULL, 0},
    {"dim", required_argument, NULL, 0},
    {"dim-v", required_argument, NULL, 0},
    {"sink", required_argument, NULL, 0},
    {"dtype", required_argument, NULL, 0},
    {"block-sparse", required_argument, NULL, 0},
    {"block-size", required_argument, NULL, 0},
    {"density", required_argument, NULL, 0},
    {"block-param", required_argument, NULL, 0},
    {"alibi", no_argument, NULL, 0},
    {"alibi-slopes", required_argument, NULL, 0},
    {"backward", no_argument, NULL, 0},
    {"check", no_argument, NULL, 0},
    {"threads", required_argument, NULL, 0},
    {"repeat", required_argument, NULL, 0},
    {"input-seed", required_argument, NULL, 0},
    {"json", no_argument, NULL, 0},
    {"quiet", no_argument, NULL, 0},
    OPTIONS_END,
};

static int parse_run_args(int argc, char **argv, run_config *c, int *help)
{
    memset(c, 0, sizeof *c);
    c->batch = 2;
    c->seqlen_q = 1024;
    c->seqlen_k = -1;
    c->heads = 8;
    c->heads_kv = -1;
    c->dim = 64;
    c->dim_v = -1;
    c->opts = fa_options_default();
    c->block_q = c->block_k = 128;
    c->block_param = -1;
    c->density = 0.5;
    c->threads = -1;
    c->repeat = 10;
    c->input_seed = 1;
    *help = 0;
    const int64_t big = (int64_t)1 << 40;
    arg_cursor a;
    int rc = 0;
    int seed_given = 0;
    arg_begin(&a, "run", argc, argv, run_options);
    while (next_option(&a, &rc)) {
        const char *opt = a.opt;
        int handled = 0;
        if (is_help(opt)) {
            *help = 1;
            return 0;
        }
        seed_given |= strcmp(opt, "--seed") == 0;
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
        else if (strcmp(opt, "--dim-v") == 0)
            rc = take_i64(&a, opt, 1, 1 << 20, &c->dim_v);
        else if (strcmp(opt, "--sink") == 0) {
            const char *v = NULL;
            char *end = NULL;
            rc = take_value(&a, opt, &v);
            if (!rc && strcmp(v, "random") == 0) {
                c->sink = 2;
            } else if (!rc) {
                c->sink = 1;
                c->sink_value = strtod(v, &end);
                if (end == v || *end != '\0' || !isfinite(c->sink_value) || fabs(c->sink_value) > FLT_MAX)
                    rc = usage_error(a.cmd, "--sink: '%s' is neither a finite float32 number nor 'random'", v);
            }
        }
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
            rc = take_i64_pair(&a, "--block-size (BQ)", "--block-size (BK)", 1, big, &c->block_q, &c->block_k);
        } else if (strcmp(opt, "--density") == 0)
            rc = take_f64(&a, opt, 0.0, 1.0, 1, &c->density);
        else if (strcmp(opt, "--block-param") == 0)
            rc = take_i64(&a, opt, 0, big, &c->block_param);
        else if (strcmp(opt, "--alibi") == 0)
            c->alibi = 1;
        else if (strcmp(opt, "--alibi-slopes") == 0) {
            rc = take_value(&a, opt, &c->alibi_path);
            if (!rc && c->alibi_path[0] == '\0')
                rc = usage_error(a.cmd, "%s: empty file name", opt);
        } else if (strcmp(opt, "--backward") == 0)
            c->backward = 1;
        else if (strcmp(opt, "--check") == 0)
            c->check = 1;
        else if (strcmp(opt, "--threads") == 0)
            rc = take_int(&a, opt, 0, 4096, &c->threads);
        else if (strcmp(opt, "--repeat") == 0)
            rc = take_int(&a, opt, 1, 1000000, &c->repeat);
        else if (strcmp(opt, "--input-seed") == 0)
            rc = take_u64(&a, opt, &c->input_seed);
        else if (strcmp(opt, "--quiet") == 0)
            c->quiet = 1;
        else if (strcmp(opt, "--json") == 0)
            c->json = 1;
        else
            rc = usage_error(a.cmd, "unknown option '%s'", opt); /* in run_options but not handled here */
        if (rc)
            return rc;
    }
    if (rc)
        return rc;
    /* one rule with fwd, bwd and the Python package: dropout's seed is the caller's */
    if (c->opts.dropout_p > 0.0f && !seed_given)
        return usage_error(a.cmd, "--dropout %g needs --seed S (the dropout mask is the seed's)", (double)c->opts.dropout_p);
    if (c->seqlen_k < 0)
        c->seqlen_k = c->seqlen_q;
    if (c->heads_kv < 0)
        c->heads_kv = c->heads;
    if (c->dim_v < 0)
        c->dim_v = c->dim;
    if (c->heads % c->heads_kv != 0)
        return usage_error(a.cmd, "--heads %lld is not a multiple of --heads-kv %lld", (long long)c->heads,
                           (long long)c->heads_kv);
    if (c->alibi && c->alibi_path)
        return usage_error(a.cmd, "--alibi (the standard slopes) and --alibi-slopes FILE exclude each other");
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

static double peak_rss_bytes(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0.0;
    return (double)ru.ru_maxrss * 1024.0; /* Linux reports KiB */
}

void *run_host_alloc(run_state *s, size_t bytes)
{
    for (int i = 0; i < RUN_HOST_BUFFERS; ++i)
        if (!s->host[i]) {
            s->host[i] = malloc(bytes ? bytes : 1);
            return s->host[i];
        }
    return NULL;
}

void run_state_release(run_state *s)
{
    device_buffer *bufs[] = {&s->q,  &s->k,  &s->v,     &s->o,    &s->lse,  &s->dout,
                             &s->dq, &s->dk, &s->dv, &s->alibi, &s->sink, &s->dsink};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; ++i)
        device_release(s->ctx, bufs[i]);
    for (int i = 0; i < RUN_HOST_BUFFERS; ++i)
        free(s->host[i]);
    if (s->have_mask)
        fa_block_mask_destroy(&s->mask);
    fa_context_destroy(s->ctx);
}

/* The ALiBi slope of head h (0-based) of heads (Press et al.): 2^(-8 (h + 1) / n) for the n heads
 * of the largest power of two n <= heads; the heads past n take every other slope of 2n heads,
 * 2^(-8 (2 (h - n) + 1) / 2n). */
static float alibi_standard_slope(int64_t h, int64_t heads)
{
    int64_t n = 1;
    while (n * 2 <= heads)
        n *= 2;
    if (h < n)
        return (float)exp2(-8.0 * (double)(h + 1) / (double)n);
    return (float)exp2(-8.0 * (double)(2 * (h - n) + 1) / (double)(2 * n));
}

/* --alibi or --alibi-slopes: the slopes in host memory (s->alibi_host, *count floats, batch
 * stride *stride). Returns 0 (with *count 0 when ALiBi is off), or after a message EXIT_USAGE for a
 * slopes file that cannot be read or does not fit, EXIT_LIBRARY when out of memory. */
static int run_alibi_slopes(const run_config *c, run_state *s, int64_t *count, int64_t *stride)
{
    *count = 0;
    *stride = 0;
    if (c->alibi) {
        s->alibi_host = run_host_alloc(s, (size_t)c->heads * sizeof(float));
        if (!s->alibi_host) {
            fprintf(stderr, "flashattn run: out of host memory for the ALiBi slopes\n");
            return EXIT_LIBRARY;
        }
        for (int64_t h = 0; h < c->heads; ++h)
            s->alibi_host[h] = alibi_standard_slope(h, c->heads);
        *count = c->heads;
        return 0;
    }
    if (!c->alibi_path)
        return 0;
    npy_array slopes;
    char err[1200];
    memset(&slopes, 0, sizeof slopes);
    if (npy_read_accepting(c->alibi_path, "the option takes float32 '<f4'", &slopes, err, sizeof err) != 0) {
        fprintf(stderr, "flashattn run: --alibi-slopes %s\n", err);
        return EXIT_USAGE;
    }
    int rc = 0;
    if (alibi_slopes_layout(&slopes, c->batch, c->heads, stride, err, sizeof err) != 0) {
        fprintf(stderr, "flashattn run: --alibi-slopes %s: %s\n", c->alibi_path, err);
        rc = EXIT_USAGE;
    } else if (!(s->alibi_host = run_host_alloc(s, slopes.bytes))) {
        fprintf(stderr, "flashattn run: out of host memory for the ALiBi slopes\n");
        rc = EXIT_LIBRARY;
    } else {
        memcpy(s->alibi_host, slopes.data, slopes.bytes);
        *count = slopes.count;
    }
    npy_free(&slopes);
    return rc;
}

/* The text report's first lines: backend and device, the problem, the kernels and the plan. */
static void print_problem(const run_config *c, const run_state *s, const char *backend, const char *variant_fwd,
                          const char *variant_bwd, const fa_plan_info *plan, double density)
{
    printf("backend: %s, device %d (%s)", backend, c->device, s->report.device_name);
    if (strcmp(backend, "cpu") == 0)
        printf(", %d threads", fa_context_num_threads(s->ctx));
    printf("\nproblem: batch %lld, seqlen_q %lld, seqlen_k %lld, heads %lld (kv %lld), d %lld", (long long)c->batch,
           (long long)c->seqlen_q, (long long)c->seqlen_k, (long long)c->heads, (long long)c->heads_kv, (long long)c->dim);
    if (c->dim_v != c->dim)
        printf(", d_v %lld", (long long)c->dim_v);
    printf(", %s", fa_dtype_name(c->dtype));
    if (c->opts.causal)
        printf(", causal");
    if (c->opts.window_left >= 0 || c->opts.window_right >= 0)
        printf(", window (%lld, %lld)", (long long)c->opts.window_left, (long long)c->opts.window_right);
    if (c->opts.softmax_scale != 0.0f)
        printf(", scale %g", (double)c->opts.softmax_scale);
    if (c->opts.softcap > 0.0f)
        printf(", softcap %g", (double)c->opts.softcap);
    if (c->alibi)
        printf(", ALiBi (standard slopes %g .. %g)", (double)s->alibi_host[0], (double)s->alibi_host[c->heads - 1]);
    else if (c->alibi_path)
        printf(", ALiBi (slopes %s, batch stride %lld)", c->alibi_path, (long long)c->opts.alibi_batch_stride);
    if (c->sink == 1)
        printf(", sink %g", (double)s->sink_host[0]);
    else if (c->sink == 2)
        printf(", sink random (head 0: %g)", (double)s->sink_host[0]);
    if (c->opts.dropout_p > 0.0f)
        printf(", dropout %g (seed %llu, offset %llu)", (double)c->opts.dropout_p,
               (unsigned long long)c->opts.dropout_seed, (unsigned long long)c->opts.dropout_offset);
    if (s->have_mask) {
        printf(", block-sparse %lld x %lld blocks, density %.3f", (long long)c->block_q, (long long)c->block_k, density);
    }
    if (c->opts.deterministic)
        printf(", deterministic");
    printf("\nkernel: forward %s", variant_fwd);
    if (c->backward)
        printf(", backward %s", variant_bwd);
    printf("\nplan: tiles B_r x B_c = %lld x %lld (paper %lld x %lld from M = %lld bytes), %lld x %lld blocks\n",
           (long long)plan->block_q, (long long)plan->block_k, (long long)plan->paper_block_q,
           (long long)plan->paper_block_k, (long long)plan->onchip_bytes, (long long)plan->num_q_blocks,
           (long long)plan->num_k_blocks);
    fflush(stdout);
}

/* --json: the options, what was measured (the members of parts not reached are null) and how it
 * ended: "exit_status" and "error" (null on success). */
static void run_json(const run_config *c, const run_state *s, int rc)
{
    const run_report *r = &s->report;
    json_writer jw;
    json_init(&jw, stdout);
    json_begin_object(&jw, NULL);
    json_string(&jw, "command", "run");
    json_string(&jw, "version", fa_version());
    json_string(&jw, "backend", r->backend ? r->backend : c->backend);
    json_int(&jw, "device", c->device);
    json_string(&jw, "device_name", r->backend ? r->device_name : NULL);
    if (r->threads > 0)
        json_int(&jw, "threads", r->threads);
    else
        json_null(&jw, "threads");
    json_begin_object(&jw, "problem");
    json_int(&jw, "batch", c->batch);
    json_int(&jw, "seqlen_q", c->seqlen_q);
    json_int(&jw, "seqlen_k", c->seqlen_k);
    json_int(&jw, "heads", c->heads);
    json_int(&jw, "heads_kv", c->heads_kv);
    json_int(&jw, "dim", c->dim);
    json_int(&jw, "dim_v", c->dim_v);
    json_string(&jw, "dtype", r->backend || c->have_dtype ? fa_dtype_name(c->dtype) : NULL);
    json_end_object(&jw);
    json_begin_object(&jw, "options");
    json_bool(&jw, "causal", c->opts.causal);
    json_int(&jw, "window_left", c->opts.window_left);
    json_int(&jw, "window_right", c->opts.window_right);
    json_double(&jw, "softmax_scale", c->opts.softmax_scale); /* 0: 1/sqrt(dim) */
    json_double(&jw, "softcap", c->opts.softcap);
    json_bool(&jw, "alibi", c->alibi || c->alibi_path);
    json_string(&jw, "alibi_slopes_file", c->alibi_path);
    json_string(&jw, "sink", c->sink == 1 ? "constant" : c->sink == 2 ? "random" : NULL);
    json_double(&jw, "sink_value", c->sink == 1 ? c->sink_value : NAN);
    json_double(&jw, "dropout", c->opts.dropout_p);
    json_uint(&jw, "seed", c->opts.dropout_seed);
    json_uint(&jw, "offset", c->opts.dropout_offset);
    if (c->block_sparse) {
        static const char *const patterns[] = {"dense", "butterfly", "local", "strided", "random"};
        json_begin_object(&jw, "block_sparse");
        json_string(&jw, "pattern", (unsigned)c->pattern < 5 ? patterns[c->pattern] : "?");
        json_int(&jw, "block_q", c->block_q);
        json_int(&jw, "block_k", c->block_k);
        json_double(&jw, "density", s->have_mask ? r->density : NAN);
        json_end_object(&jw);
    } else {
        json_null(&jw, "block_sparse");
    }
    json_bool(&jw, "deterministic", c->opts.deterministic);
    json_bool(&jw, "backward", c->backward);
    json_bool(&jw, "check", c->check);
    json_int(&jw, "repeat", c->repeat);
    json_uint(&jw, "input_seed", c->input_seed);
    json_end_object(&jw);
    if (r->have_kernels) {
        json_begin_object(&jw, "kernel");
        json_string(&jw, "forward", r->variant_fwd);
        json_string(&jw, "backward", c->backward ? r->variant_bwd : NULL);
        json_end_object(&jw);
    } else {
        json_null(&jw, "kernel");
    }
    if (r->have_plan) {
        json_begin_object(&jw, "plan");
        json_int(&jw, "block_q", r->plan.block_q);
        json_int(&jw, "block_k", r->plan.block_k);
        json_int(&jw, "paper_block_q", r->plan.paper_block_q);
        json_int(&jw, "paper_block_k", r->plan.paper_block_k);
        json_int(&jw, "onchip_bytes", r->plan.onchip_bytes);
        json_int(&jw, "num_q_blocks", r->plan.num_q_blocks);
        json_int(&jw, "num_k_blocks", r->plan.num_k_blocks);
        json_int(&jw, "workspace_forward_bytes", r->plan.workspace_fwd);
        json_int(&jw, "workspace_backward_bytes", r->plan.workspace_bwd);
        json_end_object(&jw);
    } else {
        json_null(&jw, "plan");
    }
    json_begin_object(&jw, "timings");
    for (int bwd = 0; bwd <= 1; ++bwd) {
        const char *key = bwd ? "backward" : "forward";
        if (!(bwd ? r->have_backward : r->have_forward)) {
            json_null(&jw, key);
            continue;
        }
        double mean = bwd ? r->bwd_mean_ms : r->fwd_mean_ms, flops = bwd ? r->flops_bwd : r->flops_fwd;
        json_begin_object(&jw, key);
        json_double(&jw, "mean_ms", mean);
        json_double(&jw, "min_ms", bwd ? r->bwd_min_ms : r->fwd_min_ms);
        json_int(&jw, "runs", c->repeat);
        json_double(&jw, "flop", flops);
        json_double(&jw, "tflops", mean > 0.0 ? flops / (mean * 1e-3) / 1e12 : 0.0);
        json_end_object(&jw);
    }
    json_end_object(&jw);
    if (r->have_memory) {
        json_begin_object(&jw, "memory");
        json_double(&jw, "tensor_bytes", r->tensor_bytes);
        json_int(&jw, "workspace_forward_bytes", r->plan.workspace_fwd);
        json_int(&jw, "workspace_backward_bytes", r->plan.workspace_bwd);
        json_double(&jw, "peak_rss_bytes", r->rss_after > 0.0 ? r->rss_after : NAN); /* CPU backend only */
        json_double(&jw, "peak_rss_bytes_before", r->rss_before > 0.0 ? r->rss_before : NAN);
        json_end_object(&jw);
    } else {
        json_null(&jw, "memory");
    }
    if (c->check && (r->check_ran || r->n_checks > 0)) {
        json_begin_object(&jw, "check");
        int all_ok = r->check_ran;
        for (int i = 0; i < r->n_checks; ++i)
            all_ok &= r->checks[i].ok;
        json_bool(&jw, "passed", all_ok);
        json_begin_array(&jw, "results");
        for (int i = 0; i < r->n_checks; ++i) {
            const run_check_line *l = &r->checks[i];
            json_begin_object(&jw, NULL);
            json_string(&jw, "tensor", l->tensor);
            json_double(&jw, "max_abs_error", l->error);
            json_double(&jw, "naive_max_abs_error", l->naive_error); /* null for LSE */
            json_double(&jw, "bound", l->bound);
            json_bool(&jw, "ok", l->ok);
            json_end_object(&jw);
        }
        json_end_array(&jw);
        json_end_object(&jw);
    } else {
        json_null(&jw, "check");
    }
    json_int(&jw, "exit_status", rc);
    if (rc == 0)
        json_null(&jw, "error");
    else if (*last_error_message())
        json_string(&jw, "error", last_error_message());
    else
        json_string(&jw, "error", "failed; the message is on standard error");
    json_end_object(&jw);
    json_finish(&jw);
}

int cmd_run(int argc, char **argv)
{
    const char *cmd = "run";
    for (int i = 1; i < argc; ++i)
        if (strcmp(argv[i], "--decode") == 0 || strncmp(argv[i], "--decode=", 9) == 0)
            return run_decode(argc, argv); /* whose parser refuses a value */
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
    run_report *rep = &s.report;
    const char *backend = NULL;
    fa_status st;
    int64_t alibi_count, alibi_stride;
    if ((rc = run_alibi_slopes(&c, &s, &alibi_count, &alibi_stride)) != 0)
        goto done;
    st = fa_context_create(&s.ctx, c.backend, c.device);
    if (st != FA_SUCCESS) {
        rc = context_error(cmd, c.backend, c.device, st);
        goto done;
    }
    backend = fa_context_backend_name(s.ctx);
    rep->backend = backend;
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
    int64_t vshape[4] = {c.batch, c.seqlen_k, c.heads_kv, c.dim_v};
    int64_t oshape[4] = {c.batch, c.seqlen_q, c.heads, c.dim_v};
    int64_t lshape[3] = {c.batch, c.heads, c.seqlen_q};
    int64_t n_q, n_k, n_v, n_o, n_lse;
    size_t b_q, b_k, b_v, b_o, b_lse;
    size_t es = fa_dtype_size(c.dtype);
    if (!shape_bytes(4, qshape, es, &n_q, &b_q) || !shape_bytes(4, kshape, es, &n_k, &b_k) ||
        !shape_bytes(4, vshape, es, &n_v, &b_v) || !shape_bytes(4, oshape, es, &n_o, &b_o) ||
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
        void *hq = run_host_alloc(&s, b_q), *hk = run_host_alloc(&s, b_k), *hv = run_host_alloc(&s, b_v);
        void *hdo = c.backward ? run_host_alloc(&s, b_o) : NULL;
        s.sink_host = c.sink ? run_host_alloc(&s, (size_t)c.heads * sizeof(float)) : NULL;
        if (!hq || !hk || !hv || (c.backward && !hdo) || (c.sink && !s.sink_host)) {
            fprintf(stderr, "flashattn run: out of host memory for the inputs\n");
            goto done;
        }
        fill_normal(&rng, c.dtype, hq, n_q);
        fill_normal(&rng, c.dtype, hk, n_k);
        fill_normal(&rng, c.dtype, hv, n_v);
        if (c.backward)
            fill_normal(&rng, c.dtype, hdo, n_o);
        /* drawn after the inputs, which are then the same with and without a sink */
        for (int64_t h = 0; h < c.heads && c.sink; ++h)
            s.sink_host[h] = c.sink == 2 ? (float)normal_next(&rng) : (float)c.sink_value;
        if ((rc = check_score_range(cmd, c.opts.softmax_scale, c.dtype, c.dim, hq, n_q, "the random q", hk, n_k,
                                    "the random k")) != 0)
            goto done;
        rc = EXIT_LIBRARY;
        size_t b_sink = (size_t)c.heads * sizeof(float);
        if ((st = device_upload(s.ctx, hq, b_q, &s.q)) || (st = device_upload(s.ctx, hk, b_k, &s.k)) ||
            (st = device_upload(s.ctx, hv, b_v, &s.v)) || (st = device_alloc(s.ctx, b_o, &s.o)) ||
            (st = device_alloc(s.ctx, b_lse, &s.lse)) ||
            (c.sink && (st = device_upload(s.ctx, s.sink_host, b_sink, &s.sink))) ||
            (c.backward && ((st = device_upload(s.ctx, hdo, b_o, &s.dout)) || (st = device_alloc(s.ctx, b_q, &s.dq)) ||
                            (st = device_alloc(s.ctx, b_k, &s.dk)) || (st = device_alloc(s.ctx, b_v, &s.dv)) ||
                            (c.sink && (st = device_alloc(s.ctx, b_sink, &s.dsink)))))) {
            rc = library_error(cmd, s.ctx, "allocating and uploading the inputs", st);
            goto done;
        }
        if (s.alibi_host) {
            if ((st = device_upload(s.ctx, s.alibi_host, (size_t)alibi_count * sizeof(float), &s.alibi))) {
                rc = library_error(cmd, s.ctx, "uploading the ALiBi slopes", st);
                goto done;
            }
            c.opts.alibi_slopes = s.alibi.ptr;
            c.opts.alibi_batch_stride = alibi_stride;
        }
        c.opts.learnable_sink = s.sink.ptr;
    }

    fa_fwd_args fwd;
    memset(&fwd, 0, sizeof fwd);
    fwd.q = fa_tensor_contiguous(s.q.ptr, c.dtype, 4, qshape);
    fwd.k = fa_tensor_contiguous(s.k.ptr, c.dtype, 4, kshape);
    fwd.v = fa_tensor_contiguous(s.v.ptr, c.dtype, 4, vshape);
    fwd.o = fa_tensor_contiguous(s.o.ptr, c.dtype, 4, oshape);
    fwd.lse = fa_tensor_contiguous(s.lse.ptr, FA_DTYPE_F32, 3, lshape);
    fwd.opts = c.opts;
    fa_bwd_args bwd;
    memset(&bwd, 0, sizeof bwd);
    bwd.q = fwd.q;
    bwd.k = fwd.k;
    bwd.v = fwd.v;
    bwd.o = fwd.o;
    bwd.lse = fwd.lse;
    bwd.dout = fa_tensor_contiguous(s.dout.ptr, c.dtype, 4, oshape);
    bwd.dq = fa_tensor_contiguous(s.dq.ptr, c.dtype, 4, qshape);
    bwd.dk = fa_tensor_contiguous(s.dk.ptr, c.dtype, 4, kshape);
    bwd.dv = fa_tensor_contiguous(s.dv.ptr, c.dtype, 4, vshape);
    if (c.sink) {
        int64_t sink_shape[1] = {c.heads};
        bwd.dsink = fa_tensor_contiguous(s.dsink.ptr, FA_DTYPE_F32, 1, sink_shape);
    }
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

    rep->have_kernels = 1;
    memcpy(rep->variant_fwd, variant_fwd, sizeof variant_fwd);
    memcpy(rep->variant_bwd, variant_bwd, sizeof variant_bwd);
    rep->plan = plan;
    rep->have_plan = 1;
    char *dev_name = rep->device_name;
    if (fa_device_name(backend, c.device, dev_name, sizeof rep->device_name) != FA_SUCCESS)
        snprintf(dev_name, sizeof rep->device_name, "?");
    dev_name[sizeof rep->device_name - 1] = '\0';
    if (strcmp(backend, "cpu") == 0)
        rep->threads = fa_context_num_threads(s.ctx);
    double density = 1.0;
    if (s.have_mask)
        density = rep->density = fa_block_mask_density(&s.mask);
    char ws_f[32], ws_b[32];
    format_bytes((double)plan.workspace_fwd, ws_f, sizeof ws_f);
    format_bytes((double)plan.workspace_bwd, ws_b, sizeof ws_b);
    if (!c.json)
        print_problem(&c, &s, backend, variant_fwd, variant_bwd, &plan, density);
    /* two FLOPs per multiply-add of each matrix product: forward S = QK^T (d), O = PV (d_v) */
    double pairs = 2.0 * (double)c.batch * (double)c.heads * (double)c.seqlen_q * (double)c.seqlen_k *
                   (c.opts.causal ? 0.5 : 1.0) * density;
    double flops_fwd = pairs * (double)(c.dim + c.dim_v);
    double rss_before = peak_rss_bytes();
    double mean_ms, min_ms;
    if ((st = time_calls(s.ctx, "forward", &fwd, NULL, c.repeat, c.quiet, &mean_ms, &min_ms)) != FA_SUCCESS) {
        rc = library_error(cmd, s.ctx, "fa_forward", st);
        goto done;
    }
    rep->have_forward = 1;
    rep->fwd_mean_ms = mean_ms;
    rep->fwd_min_ms = min_ms;
    rep->flops_fwd = flops_fwd;
    if (!c.json) {
        printf("forward:  %10.3f ms mean, %10.3f ms min over %d runs, %8.4g TFLOP/s (%.3g FLOP)\n", mean_ms, min_ms,
               c.repeat, mean_ms > 0.0 ? flops_fwd / (mean_ms * 1e-3) / 1e12 : 0.0, flops_fwd);
        fflush(stdout);
    }
    if (c.backward) {
        /* S = QK^T recomputed (d), dP = dO V^T (d_v), dV = P^T dO (d_v), dQ = dS K (d), dK = dS^T Q (d) */
        double flops_bwd = pairs * (double)(3 * c.dim + 2 * c.dim_v);
        if ((st = time_calls(s.ctx, "backward", NULL, &bwd, c.repeat, c.quiet, &mean_ms, &min_ms)) != FA_SUCCESS) {
            rc = library_error(cmd, s.ctx, "fa_backward", st);
            goto done;
        }
        rep->have_backward = 1;
        rep->bwd_mean_ms = mean_ms;
        rep->bwd_min_ms = min_ms;
        rep->flops_bwd = flops_bwd;
        if (!c.json)
            printf("backward: %10.3f ms mean, %10.3f ms min over %d runs, %8.4g TFLOP/s (%.3g FLOP)\n", mean_ms,
                   min_ms, c.repeat, mean_ms > 0.0 ? flops_bwd / (mean_ms * 1e-3) / 1e12 : 0.0, flops_bwd);
    }
    {
        double io = (double)(b_q + b_k + b_v + b_o + b_lse) + (c.backward ? (double)(b_o + b_q + b_k + b_v) : 0.0);
        char io_text[32];
        rep->have_memory = 1;
        rep->tensor_bytes = io;
        format_bytes(io, io_text, sizeof io_text);
        if (!c.json)
            printf("memory: tensors %s; library workspace forward %s, backward %s", io_text, ws_f, ws_b);
        if (strcmp(backend, "cpu") == 0) {
            char before[32], after[32];
            double rss_after = peak_rss_bytes();
            rep->rss_before = rss_before;
            rep->rss_after = rss_after;
            format_bytes(rss_before, before, sizeof before);
            format_bytes(rss_after, after, sizeof after);
            if (!c.json)
                printf("; peak RSS %s (%s before the first call)", after, before);
        }
        if (!c.json) {
            printf("\n");
            fflush(stdout);
        }
    }
    rc = 0;
    if (c.check)
        rc = run_check(&c, &s, &fwd, c.backward ? &bwd : NULL, n_q, n_k, n_v, n_o);
done:
    if (c.json)
        run_json(&c, &s, rc);
    run_state_release(&s);
    return rc;
}
