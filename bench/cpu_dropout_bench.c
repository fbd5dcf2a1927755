/* cpu_dropout_bench: what dropout costs on the CPU backend. For each shape, fa_forward and
 * fa_backward without and with dropout (p, default 0.1) on the same inputs in one process, the two
 * alternated run by run so that load from other processes hits both alike; prints a markdown table
 * of the medians and their ratio (time with dropout / time without). A benchmark, not a test: it
 * asserts nothing.
 *
 *   cpu_dropout_bench [--seqlens 1024,4096] [--dims 64,128] [--heads 4] [--threads N] [--p 0.1]
 *                     [--dtype fp32|bf16] [--reps 5] */
#include "flashattn.h"
#include "provenance.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_LIST 16

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *x, int n)
{
    qsort(x, (size_t)n, sizeof x[0], cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

static int parse_list(const char *s, int64_t *out)
{
    int n = 0;
    for (char *end; *s && n < MAX_LIST; s = *end ? end + 1 : end) {
        out[n] = strtoll(s, &end, 10);
        if (end == s || out[n] < 1)
            return -1;
        ++n;
    }
    return n;
}

/* Random inputs, uniform in [-1, 1) (fp32) or their bf16 bit patterns (truncated). */
static void *random_tensor(int64_t n, fa_dtype dt, uint64_t seed)
{
    const size_t esize = dt == FA_DTYPE_F32 ? 4 : 2;
    unsigned char *p = malloc((size_t)n * esize);
    if (!p)
        return NULL;
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t i = 0; i < n; ++i) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        const float x = (float)((double)(s >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
        uint32_t bits;
        memcpy(&bits, &x, 4);
        if (dt == FA_DTYPE_F32)
            memcpy(p + 4 * i, &bits, 4);
        else {
            const uint16_t h = (uint16_t)(bits >> 16);
            memcpy(p + 2 * i, &h, 2);
        }
    }
    return p;
}

/* Medians of reps forward and backward calls without (t[0], t[1]) and with (t[2], t[3]) dropout. */
static int measure(fa_context *ctx, int64_t s, int64_t d, int64_t heads, int causal, fa_dtype dt, float p, int reps,
                   double t[4])
{
    const int64_t shape[4] = {1, s, heads, d}, lse_shape[3] = {1, heads, s}, n = s * heads * d;
    void *x[8]; /* q, k, v, o, dO, dQ, dK, dV */
    for (int i = 0; i < 8; ++i)
        x[i] = random_tensor(n, dt, (uint64_t)i + 1);
    float *lse = malloc(sizeof(float) * (size_t)(heads * s));
    int rc = 0;
    for (int i = 0; i < 8; ++i)
        rc |= !x[i];
    if (rc || !lse) {
        fprintf(stderr, "cpu_dropout_bench: out of memory at seqlen %lld\n", (long long)s);
        rc = -1;
        goto done;
    }
    fa_fwd_args fa;
    memset(&fa, 0, sizeof fa);
    fa.q = fa_tensor_contiguous(x[0], dt, 4, shape);
    fa.k = fa_tensor_contiguous(x[1], dt, 4, shape);
    fa.v = fa_tensor_contiguous(x[2], dt, 4, shape);
    fa.o = fa_tensor_contiguous(x[3], dt, 4, shape);
    fa.lse = fa_tensor_contiguous(lse, FA_DTYPE_F32, 3, lse_shape);
    fa.opts = fa_options_default();
    fa.opts.causal = causal;
    fa_bwd_args ba;
    memset(&ba, 0, sizeof ba);
    ba.q = fa.q;
    ba.k = fa.k;
    ba.v = fa.v;
    ba.o = fa.o;
    ba.lse = fa.lse;
    ba.dout = fa_tensor_contiguous(x[4], dt, 4, shape);
    ba.dq = fa_tensor_contiguous(x[5], dt, 4, shape);
    ba.dk = fa_tensor_contiguous(x[6], dt, 4, shape);
    ba.dv = fa_tensor_contiguous(x[7], dt, 4, shape);
    double *samples = malloc(sizeof(double) * 4 * (size_t)reps);
    if (!samples) {
        rc = -1;
        goto done;
    }
    for (int r = -1; r < reps; ++r) /* r = -1: the warm-up */
        for (int k = 0; k < 2; ++k) {
            const int drop = (r + k) % 2 != 0; /* plain first on even runs, dropout first on odd */
            fa.opts.dropout_p = drop ? p : 0.0f;
            fa.opts.dropout_seed = 1;
            ba.opts = fa.opts;
            double t0 = now_s();
            fa_status st = fa_forward(ctx, &fa);
            double t1 = now_s();
            if (st == FA_SUCCESS)
                st = fa_backward(ctx, &ba);
            double t2 = now_s();
            if (st != FA_SUCCESS) {
                fprintf(stderr, "cpu_dropout_bench: %s\n", fa_context_last_error(ctx));
                free(samples);
                rc = -1;
                goto done;
            }
            if (r >= 0) {
                samples[(2 * drop) * reps + r] = (t1 - t0) * 1e3;
                samples[(2 * drop + 1) * reps + r] = (t2 - t1) * 1e3;
            }
        }
    for (int i = 0; i < 4; ++i)
        t[i] = median(samples + i * reps, reps);
    free(samples);
done:
    for (int i = 0; i < 8; ++i)
        free(x[i]);
    free(lse);
    return rc;
}

int main(int argc, char **argv)
{
    int64_t seqlens[MAX_LIST] = {1024, 4096}, dims[MAX_LIST] = {64, 128}, heads = 4;
    int nseq = 2, ndims = 2, reps = 5, threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    float p = 0.1f;
    fa_dtype dt = FA_DTYPE_F32;
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        int ok = val != NULL;
        if (ok && !strcmp(a, "--seqlens"))
            ok = (nseq = parse_list(argv[++i], seqlens)) > 0;
        else if (ok && !strcmp(a, "--dims"))
            ok = (ndims = parse_list(argv[++i], dims)) > 0;
        else if (ok && !strcmp(a, "--heads"))
            ok = (heads = strtoll(argv[++i], NULL, 10)) > 0;
        else if (ok && !strcmp(a, "--threads"))
            ok = (threads = (int)strtol(argv[++i], NULL, 10)) > 0;
        else if (ok && !strcmp(a, "--reps"))
            ok = (reps = (int)strtol(argv[++i], NULL, 10)) > 0;
        else if (ok && !strcmp(a, "--p"))
            ok = (p = strtof(argv[++i], NULL)) > 0.0f && p < 1.0f;
        else if (ok && !strcmp(a, "--dtype"))
            ok = !strcmp(argv[++i], "fp32") ? (dt = FA_DTYPE_F32, 1) : !strcmp(argv[i], "bf16") ? (dt = FA_DTYPE_BF16, 1) : 0;
        else
            ok = 0;
        if (!ok) {
            fprintf(stderr, "usage: cpu_dropout_bench [--seqlens LIST] [--dims LIST] [--heads H] [--threads N] "
                            "[--p P] [--dtype fp32|bf16] [--reps R]\n");
            return 2;
        }
    }
    fa_context *ctx = NULL;
    if (fa_context_create(&ctx, "cpu", 0) != FA_SUCCESS) {
        fprintf(stderr, "cpu_dropout_bench: %s\n", fa_last_error());
        return 1;
    }
    fa_context_set_num_threads(ctx, threads);
    char model[160];
    fa_bench_cpu_model(model, sizeof model);
    fa_bench_provenance(stdout, model, argc, argv);
    printf("cpu_dropout_bench: %s, batch 1, heads %lld, threads %d, dropout p = %g; medians of %d runs after a "
           "warm-up, plain and dropout alternated; x = time with dropout / time without\n\n",
           dt == FA_DTYPE_F32 ? "fp32" : "bf16", (long long)heads, threads, (double)p, reps);
    printf("| seqlen | d | causal | fwd ms plain / dropout (x) | bwd ms plain / dropout (x) |\n|---:|---:|:---:|---|---|\n");
    int failures = 0;
    for (int di = 0; di < ndims; ++di)
        for (int causal = 0; causal < 2; ++causal)
            for (int si = 0; si < nseq; ++si) {
                double t[4];
                if (measure(ctx, seqlens[si], dims[di], heads, causal, dt, p, reps, t) != 0) {
                    ++failures;
                    continue;
                }
                printf("| %lld | %lld | %s | %.1f / %.1f (%.2fx) | %.1f / %.1f (%.2fx) |\n", (long long)seqlens[si],
                       (long long)dims[di], causal ? "yes" : "no", t[0], t[2], t[2] / t[0], t[1], t[3], t[3] / t[1]);
                fflush(stdout);
            }
    fa_context_destroy(ctx);
    return failures ? 1 : 0;
}
