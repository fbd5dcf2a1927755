/* cpu_bench: the fused CPU path (fa_forward on a "cpu" context) against a standard attention that
 * materialises S and P (bench/experiments/standard_attention.c), side by side, fp32 forward. Prints markdown
 * tables: time (median of R runs after a warm-up), GFLOP/s (4 b h sq sk d, halved when causal),
 * speedup, and the extra peak memory of each implementation. A benchmark, not a test: it asserts
 * nothing.
 *
 * Time: one forked child per configuration holds both implementations and alternates them run by
 * run (F S, S F, F S, ...), so load from other processes on a shared machine hits both alike; it
 * also compares the two outputs. Memory: one forked child per implementation and configuration
 * makes a single call: extra = its ru_maxrss (getrusage RUSAGE_SELF, KiB, page granularity) after
 * the call minus its ru_maxrss once inputs and outputs are allocated and touched and a small
 * warm-up call has made code pages, thread stacks and the allocator's arenas resident.
 *
 *   cpu_bench [--seqlens 512,1024,...] [--dims 64,128] [--heads 2] [--batch 1] [--threads N]
 *             [--causal no|yes|both] [--budget SECONDS] [--quick] [--memory] [--no-check] */
#include "flashattn.h"
#include "provenance.h"
#include "standard_attention.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_LIST 32
#define MAX_REPS 25
#define MIN_REPS 3

enum impl { IMPL_FUSED = 0, IMPL_STANDARD = 1 };

typedef struct config {
    int64_t batch, heads, seqlen, d;
    int causal;
    int threads;
    double budget_s; /* timed seconds per implementation to aim for (R adapts to it) */
} config;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static long maxrss_kib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

static double flops_of(const config *c)
{
    double f = 4.0 * (double)c->batch * (double)c->heads * (double)c->seqlen * (double)c->seqlen * (double)c->d;
    return c->causal ? f / 2 : f;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void fill_uniform(float *x, int64_t n, uint64_t seed)
{
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t i = 0; i < n; ++i) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        x[i] = (float)((double)(s >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
    }
}

static long mem_available_kib(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    long kib = -1;
    if (!f)
        return -1;
    char line[256];
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %ld kB", &kib) == 1)
            break;
    fclose(f);
    return kib;
}

/* ------------------------------------------------------------------ measurements (children) */

typedef struct buffers {
    float *q, *k, *v, *o_fused, *o_std;
    int64_t elems;
} buffers;

static void buffers_free(buffers *bf)
{
    free(bf->q);
    free(bf->k);
    free(bf->v);
    free(bf->o_fused);
    free(bf->o_std);
}

/* Inputs (uniform in [-1, 1), fixed seeds) and the outputs asked for, all touched. */
static int buffers_alloc(buffers *bf, const config *c, int want_fused, int want_std)
{
    memset(bf, 0, sizeof *bf);
    bf->elems = c->batch * c->seqlen * c->heads * c->d;
    size_t bytes = ((size_t)bf->elems * sizeof(float) + 63) / 64 * 64;
    bf->q = aligned_alloc(64, bytes);
    bf->k = aligned_alloc(64, bytes);
    bf->v = aligned_alloc(64, bytes);
    if (want_fused)
        bf->o_fused = aligned_alloc(64, bytes);
    if (want_std)
        bf->o_std = aligned_alloc(64, bytes);
    if (!bf->q || !bf->k || !bf->v || (want_fused && !bf->o_fused) || (want_std && !bf->o_std)) {
        buffers_free(bf);
        return -1;
    }
    fill_uniform(bf->q, bf->elems, 1);
    fill_uniform(bf->k, bf->elems, 2);
    fill_uniform(bf->v, bf->elems, 3);
    if (want_fused)
        memset(bf->o_fused, 0, bytes);
    if (want_std)
        memset(bf->o_std, 0, bytes);
    return 0;
}

static fa_fwd_args fused_args(const config *c, const buffers *bf)
{
    int64_t shape[4] = {c->batch, c->seqlen, c->heads, c->d};
    fa_fwd_args a;
    memset(&a, 0, sizeof a);
    a.q = fa_tensor_contiguous(bf->q, FA_DTYPE_F32, 4, shape);
    a.k = fa_tensor_contiguous(bf->k, FA_DTYPE_F32, 4, shape);
    a.v = fa_tensor_contiguous(bf->v, FA_DTYPE_F32, 4, shape);
    a.o = fa_tensor_contiguous(bf->o_fused, FA_DTYPE_F32, 4, shape);
    a.lse.data = NULL; /* the standard path produces no LSE either */
    a.opts = fa_options_default();
    a.opts.causal = c->causal;
    return a;
}

static sa_problem std_problem(const config *c, const buffers *bf)
{
    sa_problem sp = {.batch = c->batch, .seqlen_q = c->seqlen, .seqlen_k = c->seqlen, .heads = c->heads, .d = c->d,
                     .scale = 0.0f, .causal = c->causal, .q = bf->q, .k = bf->k, .v = bf->v, .o = bf->o_std};
    return sp;
}

static int std_fits(const config *c, double *need_bytes)
{
    sa_problem sp = {.batch = c->batch, .seqlen_q = c->seqlen, .seqlen_k = c->seqlen, .heads = c->heads, .d = c->d};
    *need_bytes = (double)sa_workspace_bytes(&sp);
    long avail = mem_available_kib();
    return avail <= 0 || *need_bytes <= 0.8 * (double)avail * 1024.0;
}

typedef struct mem_result {
    int ok;
    double extra_mib;    /* peak RSS of one call beyond inputs and outputs */
    double declared_mib; /* fa_plan workspace_fwd, or the standard path's workspace size */
    double ms;           /* the call's time (informative: one call, no warm-up) */
    char variant[64];
    char msg[160];
} mem_result;

/* One call of one implementation; runs in a forked child. */
static void measure_memory(enum impl which, const config *c, mem_result *r)
{
    memset(r, 0, sizeof *r);
    fa_context *ctx = NULL;
    fa_status st = fa_context_create(&ctx, "cpu", 0);
    if (st != FA_SUCCESS) {
        snprintf(r->msg, sizeof r->msg, "fa_context_create: %s", fa_status_string(st));
        return;
    }
    fa_context_set_num_threads(ctx, c->threads);
    buffers bf;
    if (buffers_alloc(&bf, c, which == IMPL_FUSED, which == IMPL_STANDARD) != 0) {
        snprintf(r->msg, sizeof r->msg, "out of memory for inputs");
        return;
    }
    /* the small warm-up call: same d, causal and threads, enough tasks for every thread */
    config tiny = *c;
    tiny.seqlen = 64 * (int64_t)c->threads;
    tiny.heads = 1;
    buffers tb;
    if (buffers_alloc(&tb, &tiny, which == IMPL_FUSED, which == IMPL_STANDARD) == 0) {
        if (which == IMPL_FUSED) {
            fa_fwd_args ta = fused_args(&tiny, &tb);
            fa_forward(ctx, &ta);
        } else {
            sa_problem tp = std_problem(&tiny, &tb);
            sa_workspace tw;
            if (sa_workspace_alloc(&tw, &tp) == 0) {
                sa_forward(&tp, &tw, c->threads);
                sa_workspace_free(&tw);
            }
        }
    }

    fa_fwd_args args = fused_args(c, &bf);
    sa_problem sp = std_problem(c, &bf);
    sa_workspace ws;
    long base = maxrss_kib();
    double t0;
    if (which == IMPL_FUSED) {
        fa_plan_info plan;
        if (fa_plan(ctx, &args, &plan) == FA_SUCCESS)
            r->declared_mib = (double)plan.workspace_fwd / (1024.0 * 1024.0);
        fa_query_support(ctx, &args, 0, r->variant, sizeof r->variant);
        t0 = now_s();
        st = fa_forward(ctx, &args);
        if (st != FA_SUCCESS) {
            snprintf(r->msg, sizeof r->msg, "fa_forward: %s: %s", fa_status_string(st), fa_context_last_error(ctx));
            return;
        }
    } else {
        r->declared_mib = (double)sa_workspace_bytes(&sp) / (1024.0 * 1024.0);
        if (sa_workspace_alloc(&ws, &sp) != 0) {
            snprintf(r->msg, sizeof r->msg, "out of memory: needs %.1f GiB", r->declared_mib / 1024.0);
            return;
        }
        snprintf(r->variant, sizeof r->variant, "standard (S, P materialised)");
        t0 = now_s(); /* the call, not the allocation (the timing table does the same) */
        if (sa_forward(&sp, &ws, c->threads) != 0) {
            snprintf(r->msg, sizeof r->msg, "sa_forward failed");
            return;
        }
    }
    r->ms = (now_s() - t0) * 1e3;
    r->extra_mib = (double)(maxrss_kib() - base) / 1024.0;
    r->ok = 1;
}

typedef struct time_result {
    int ok, std_ok;
    int reps;
    double fused_ms, std_ms; /* medians */
    double max_abs_diff;     /* -1: not compared */
    char variant[64];
    char msg[160];
} time_result;

static double median(double *x, int n)
{
    qsort(x, (size_t)n, sizeof x[0], cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

/* Both implementations in one child, alternated run by run; runs in a forked child. */
static void measure_time(const config *c, int run_std, int check, time_result *r)
{
    memset(r, 0, sizeof *r);
    r->max_abs_diff = -1;
    fa_context *ctx = NULL;
    fa_status st = fa_context_create(&ctx, "cpu", 0);
    if (st != FA_SUCCESS) {
        snprintf(r->msg, sizeof r->msg, "fa_context_create: %s", fa_status_string(st));
        return;
    }
    fa_context_set_num_threads(ctx, c->threads);
    buffers bf;
    if (buffers_alloc(&bf, c, 1, run_std) != 0) {
        snprintf(r->msg, sizeof r->msg, "out of memory for inputs");
        return;
    }
    fa_fwd_args args = fused_args(c, &bf);
    fa_query_support(ctx, &args, 0, r->variant, sizeof r->variant);
    sa_problem sp = std_problem(c, &bf);
    sa_workspace ws; /* allocated and first-touched once, outside the timed calls */
    if (run_std && sa_workspace_alloc(&ws, &sp) != 0)
        run_std = 0;

    double tf[MAX_REPS + 1], ts[MAX_REPS + 1];
    int target = 1;
    for (int it = 0; it <= target; ++it) { /* it 0 is the warm-up of both */
        for (int half = 0; half < 2; ++half) {
            int fused_now = (half == 0) == (it % 2 == 0); /* F S, then S F, ... */
            if (!fused_now && !run_std)
                continue;
            double t0 = now_s();
            if (fused_now) {
                st = fa_forward(ctx, &args);
                if (st != FA_SUCCESS) {
                    snprintf(r->msg, sizeof r->msg, "fa_forward: %s: %s", fa_status_string(st),
                             fa_context_last_error(ctx));
                    return;
                }
                tf[it] = now_s() - t0;
            } else {
                if (sa_forward(&sp, &ws, c->threads) != 0) {
                    snprintf(r->msg, sizeof r->msg, "sa_forward failed");
                    return;
                }
                ts[it] = now_s() - t0;
            }
        }
        if (it == 0) {
            double per = run_std ? 0.5 * (tf[0] + ts[0]) : tf[0];
            target = (int)(c->budget_s / per + 0.5);
            target = target < MIN_REPS ? MIN_REPS : target > MAX_REPS ? MAX_REPS : target;
        }
    }
    r->reps = target;
    r->fused_ms = median(tf + 1, target) * 1e3;
    if (run_std) {
        r->std_ms = median(ts + 1, target) * 1e3;
        r->std_ok = 1;
        if (check) {
            double mx = 0;
            for (int64_t i = 0; i < bf.elems; ++i) {
                double e = fabs((double)bf.o_std[i] - (double)bf.o_fused[i]);
                if (!(e <= mx)) /* NaN counts as the largest */
                    mx = isnan(e) ? INFINITY : e;
            }
            r->max_abs_diff = mx;
        }
    }
    r->ok = 1;
}

/* Forks, runs fn in the child, reads `size` bytes of result back through a pipe. */
typedef void (*child_fn)(const void *arg, void *out);

static void run_in_child(child_fn fn, const void *arg, void *out, size_t size, char *msg, size_t msg_len)
{
    int fd[2];
    memset(out, 0, size);
    if (pipe(fd) != 0) {
        snprintf(msg, msg_len, "pipe: %s", strerror(errno));
        return;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(msg, msg_len, "fork: %s", strerror(errno));
        close(fd[0]);
        close(fd[1]);
        return;
    }
    if (pid == 0) {
        close(fd[0]);
        fn(arg, out);
        ssize_t w = write(fd[1], out, size);
        _exit(w == (ssize_t)size ? 0 : 1);
    }
    close(fd[1]);
    size_t got = 0;
    while (got < size) {
        ssize_t n = read(fd[0], (char *)out + got, size - got);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (got != size) {
        memset(out, 0, size);
        if (WIFSIGNALED(status))
            snprintf(msg, msg_len, "child killed by signal %d (out of memory?)", WTERMSIG(status));
        else
            snprintf(msg, msg_len, "child exited with status %d", WEXITSTATUS(status));
    }
}

typedef struct mem_job {
    enum impl which;
    config c;
} mem_job;

static void mem_child(const void *arg, void *out)
{
    const mem_job *j = arg;
    measure_memory(j->which, &j->c, out);
}

static void memory_in_child(enum impl which, const config *c, mem_result *r)
{
    mem_job j = {.which = which, .c = *c};
    char msg[160] = "";
    run_in_child(mem_child, &j, r, sizeof *r, msg, sizeof msg);
    if (msg[0])
        snprintf(r->msg, sizeof r->msg, "%s", msg);
}

typedef struct time_job {
    config c;
    int run_std, check;
} time_job;

static void time_child(const void *arg, void *out)
{
    const time_job *j = arg;
    measure_time(&j->c, j->run_std, j->check, out);
}

static void time_in_child(const config *c, int run_std, int check, time_result *r)
{
    time_job j = {.c = *c, .run_std = run_std, .check = check};
    char msg[160] = "";
    run_in_child(time_child, &j, r, sizeof *r, msg, sizeof msg);
    if (msg[0])
        snprintf(r->msg, sizeof r->msg, "%s", msg);
}

/* ------------------------------------------------------------------ options */

typedef struct options {
    int64_t seqlens[MAX_LIST], dims[MAX_LIST];
    int nseq, ndims;
    int64_t heads, batch;
    int threads;
    int causal_modes[2], ncausal;
    double budget_s;
    int quick, memory, check;
    int argc; /* the command line, for the provenance line */
    char **argv;
} options;

static int parse_list(const char *s, int64_t *out, int *n)
{
    *n = 0;
    while (*s) {
        char *end;
        long long v = strtoll(s, &end, 10);
        if (end == s || v <= 0 || *n >= MAX_LIST)
            return -1;
        if (*end == 'k' || *end == 'K') {
            v *= 1024;
            ++end;
        }
        out[(*n)++] = v;
        if (*end == ',')
            ++end;
        else if (*end)
            return -1;
        s = end;
    }
    return *n > 0 ? 0 : -1;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: cpu_bench [options]\n"
            "  --seqlens LIST   sequence lengths (default 512,1024,2048,4096,8192,16384;\n"
            "                   --memory: 1k,4k,16k,64k; --quick: 512,1024,2048)\n"
            "  --dims LIST      head dims (default 64,128)\n"
            "  --heads H        heads (default 2)        --batch B   batch (default 1)\n"
            "  --threads N      threads for both paths (default: online processors)\n"
            "  --causal MODE    no, yes or both (default both; --memory: yes, half the time, same memory)\n"
            "  --budget S       timed seconds per implementation; R = clamp(S / warm-up time, %d, %d)\n"
            "                   (default 2, --quick 0.3)\n"
            "  --quick          small grid, short budget\n"
            "  --memory         memory-only mode: one forward per size, extra memory of each path\n"
            "  --no-check       skip the fused-vs-standard output comparison\n",
            MIN_REPS, MAX_REPS);
}

static int parse_args(int argc, char **argv, options *o)
{
    memset(o, 0, sizeof *o);
    o->argc = argc;
    o->argv = argv;
    o->heads = 2;
    o->batch = 1;
    o->threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    o->budget_s = -1;
    o->check = 1;
    const char *seq = NULL, *dims = "64,128", *causal = NULL;
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--quick"))
            o->quick = 1;
        else if (!strcmp(a, "--memory"))
            o->memory = 1;
        else if (!strcmp(a, "--no-check"))
            o->check = 0;
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            exit(0);
        } else if (val && !strcmp(a, "--seqlens"))
            seq = argv[++i];
        else if (val && !strcmp(a, "--dims"))
            dims = argv[++i];
        else if (val && !strcmp(a, "--causal"))
            causal = argv[++i];
        else if (val && !strcmp(a, "--heads"))
            o->heads = strtoll(argv[++i], NULL, 10);
        else if (val && !strcmp(a, "--batch"))
            o->batch = strtoll(argv[++i], NULL, 10);
        else if (val && !strcmp(a, "--threads"))
            o->threads = (int)strtol(argv[++i], NULL, 10);
        else if (val && !strcmp(a, "--budget"))
            o->budget_s = strtod(argv[++i], NULL);
        else {
            fprintf(stderr, "cpu_bench: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            return -1;
        }
    }
    if (!seq)
        seq = o->memory ? "1024,4096,16384,65536" : o->quick ? "512,1024,2048" : "512,1024,2048,4096,8192,16384";
    if (!causal)
        causal = o->memory ? "yes" : "both";
    if (parse_list(seq, o->seqlens, &o->nseq) || parse_list(dims, o->dims, &o->ndims)) {
        fprintf(stderr, "cpu_bench: bad --seqlens or --dims list\n");
        return -1;
    }
    if (!strcmp(causal, "no")) {
        o->causal_modes[0] = 0;
        o->ncausal = 1;
    } else if (!strcmp(causal, "yes")) {
        o->causal_modes[0] = 1;
        o->ncausal = 1;
    } else if (!strcmp(causal, "both")) {
        o->causal_modes[0] = 0;
        o->causal_modes[1] = 1;
        o->ncausal = 2;
    } else {
        fprintf(stderr, "cpu_bench: --causal takes no, yes or both\n");
        return -1;
    }
    if (o->budget_s < 0)
        o->budget_s = o->quick ? 0.3 : 2.0;
    if (o->heads < 1 || o->batch < 1 || o->threads < 1) {
        fprintf(stderr, "cpu_bench: --heads, --batch and --threads must be positive\n");
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ reports */

static void print_preamble(const options *o, const char *what)
{
    char model[160];
    fa_bench_cpu_model(model, sizeof model);
    fa_bench_provenance(stdout, model, o->argc, o->argv);
    printf("cpu_bench %s: fp32 forward, batch %lld, heads %lld, threads %d (both paths); %s, %ld online processors\n",
           what, (long long)o->batch, (long long)o->heads, o->threads, model, sysconf(_SC_NPROCESSORS_ONLN));
    printf("fused = fa_forward on a \"cpu\" context (no LSE); standard = bench/experiments/standard_attention.c "
           "(S and P materialised)\n");
}

static double gib(double bytes)
{
    return bytes / (1024.0 * 1024.0 * 1024.0);
}

static int run_timing(const options *o)
{
    print_preamble(o, "timing");
    printf("time: median of R runs after one warm-up, both paths alternated in one process, "
           "R = clamp(%.1f s / warm-up, %d, %d); GFLOP/s = 4*b*h*s*s*d (/2 causal) / time\n",
           o->budget_s, MIN_REPS, MAX_REPS);
    printf("extra memory: peak RSS of one call in its own forked child beyond inputs and outputs "
           "(standard: S, P and packed K^T, V)\n");
    printf("max abs diff: max |O_standard - O_fused| over all elements\n\n");
    printf("| seqlen | d | causal | fused ms | fused GFLOP/s | standard ms | standard GFLOP/s | speedup "
           "| fused extra MiB | standard extra MiB | runs | max abs diff |\n");
    printf("|---:|---:|:---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    fflush(stdout);
    int failures = 0;
    char variant_note[64] = "";
    for (int di = 0; di < o->ndims; ++di)
        for (int ci = 0; ci < o->ncausal; ++ci)
            for (int si = 0; si < o->nseq; ++si) {
                config c = {.batch = o->batch, .heads = o->heads, .seqlen = o->seqlens[si], .d = o->dims[di],
                            .causal = o->causal_modes[ci], .threads = o->threads, .budget_s = o->budget_s};
                double need;
                int run_std = std_fits(&c, &need);
                mem_result fm, sm;
                time_result t;
                memory_in_child(IMPL_FUSED, &c, &fm);
                if (run_std)
                    memory_in_child(IMPL_STANDARD, &c, &sm);
                time_in_child(&c, run_std, o->check, &t);
                double fl = flops_of(&c);
                char fms[176] = "-", fgf[32] = "-", sms[176] = "-", sgf[32] = "-", spd[32] = "-", fmem[176] = "-",
                     smem[176] = "-", diff[32] = "-";
                if (t.ok) {
                    snprintf(fms, sizeof fms, "%.2f", t.fused_ms);
                    snprintf(fgf, sizeof fgf, "%.1f", fl / (t.fused_ms * 1e-3) / 1e9);
                    if (!variant_note[0])
                        snprintf(variant_note, sizeof variant_note, "%s", t.variant);
                } else {
                    snprintf(fms, sizeof fms, "%s", t.msg);
                    ++failures;
                }
                if (!run_std) {
                    snprintf(sms, sizeof sms, "not run: needs %.1f GiB", gib(need));
                } else if (t.std_ok) {
                    snprintf(sms, sizeof sms, "%.2f", t.std_ms);
                    snprintf(sgf, sizeof sgf, "%.1f", fl / (t.std_ms * 1e-3) / 1e9);
                    snprintf(spd, sizeof spd, "%.2fx", t.std_ms / t.fused_ms);
                    if (t.max_abs_diff >= 0)
                        snprintf(diff, sizeof diff, "%.1e", t.max_abs_diff);
                }
                if (fm.ok)
                    snprintf(fmem, sizeof fmem, "%.2f", fm.extra_mib);
                else
                    snprintf(fmem, sizeof fmem, "%s", fm.msg);
                if (run_std) {
                    if (sm.ok)
                        snprintf(smem, sizeof smem, "%.1f", sm.extra_mib);
                    else
                        snprintf(smem, sizeof smem, "%s", sm.msg);
                }
                printf("| %lld | %lld | %s | %s | %s | %s | %s | %s | %s | %s | %d | %s |\n", (long long)c.seqlen,
                       (long long)c.d, c.causal ? "yes" : "no", fms, fgf, sms, sgf, spd, fmem, smem, t.reps, diff);
                fflush(stdout);
            }
    printf("\nfused kernel (first row): %s\n", variant_note);
    return failures ? 1 : 0;
}

static int run_memory(const options *o)
{
    print_preamble(o, "--memory");
    printf("one call per cell, each in its own forked child; extra = peak RSS beyond inputs and outputs; "
           "declared = fa_plan workspace_fwd (fused) or S + P + packed K^T, V (standard); ms: that one call "
           "(informative: no warm-up, the standard path's allocation excluded)\n\n");
    printf("| seqlen | d | causal | inputs+outputs MiB | fused extra MiB | fused declared MiB | fused ms "
           "| standard extra MiB | standard declared MiB | standard ms |\n");
    printf("|---:|---:|:---:|---:|---:|---:|---:|---:|---:|---:|\n");
    fflush(stdout);
    int failures = 0;
    for (int di = 0; di < o->ndims; ++di)
        for (int ci = 0; ci < o->ncausal; ++ci)
            for (int si = 0; si < o->nseq; ++si) {
                config c = {.batch = o->batch, .heads = o->heads, .seqlen = o->seqlens[si], .d = o->dims[di],
                            .causal = o->causal_modes[ci], .threads = o->threads, .budget_s = 0};
                double need;
                int run_std = std_fits(&c, &need);
                mem_result f, s;
                memory_in_child(IMPL_FUSED, &c, &f);
                if (run_std)
                    memory_in_child(IMPL_STANDARD, &c, &s);
                double io = 4.0 * 4.0 * (double)(c.batch * c.seqlen * c.heads * c.d) / (1024.0 * 1024.0);
                char fx[176] = "-", fd[32] = "-", fm[32] = "-", sx[176] = "-", sd[32] = "-", sm[32] = "-";
                if (f.ok) {
                    snprintf(fx, sizeof fx, "%.2f", f.extra_mib);
                    snprintf(fd, sizeof fd, "%.2f", f.declared_mib);
                    snprintf(fm, sizeof fm, "%.0f", f.ms);
                } else {
                    snprintf(fx, sizeof fx, "%s", f.msg);
                    ++failures;
                }
                snprintf(sd, sizeof sd, "%.1f", need / (1024.0 * 1024.0));
                if (!run_std) {
                    snprintf(sx, sizeof sx, "not run: needs %.1f GiB (S alone %.1f GiB per head)", gib(need),
                             gib(4.0 * (double)c.seqlen * (double)c.seqlen));
                } else if (s.ok) {
                    snprintf(sx, sizeof sx, "%.1f", s.extra_mib);
                    snprintf(sm, sizeof sm, "%.0f", s.ms);
                } else {
                    snprintf(sx, sizeof sx, "%s", s.msg);
                }
                printf("| %lld | %lld | %s | %.1f | %s | %s | %s | %s | %s | %s |\n", (long long)c.seqlen,
                       (long long)c.d, c.causal ? "yes" : "no", io, fx, fd, fm, sx, sd, sm);
                fflush(stdout);
            }
    return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
    options o;
    if (parse_args(argc, argv, &o) != 0)
        return 2;
    return o.memory ? run_memory(&o) : run_timing(&o);
}
