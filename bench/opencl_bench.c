/* opencl_bench: the fused forward (and backward) of a flashattn backend (--backend, default
 * opencl) beside the CPU backend's fused path and a materialising standard attention written in
 * OpenCL (bench/standard_attention.cl: S = Q K^T into an N x N buffer, softmax, P V) on the same
 * OpenCL device. Prints a markdown table: median times, TFLOP/s (4 b h sq sk d, halved when
 * causal; backward 2.5x the forward), the fused/standard speedup and the OpenCL/CPU time ratio.
 * A benchmark, not a test: it asserts nothing. Devices are numbered as the OpenCL backend numbers
 * them (every platform's devices in order; FLASHATTN_OPENCL_PLATFORM keeps one platform).
 *
 *   opencl_bench [--backend opencl|cpu|cuda] [--device N] [--seqlens 512,1024,...] [--dims 64,128]
 *                [--heads H] [--batch B] [--dtype fp32|fp16] [--causal] [--backward] [--repeat R]
 *                [--no-cpu] [--no-standard] */
#define CL_TARGET_OPENCL_VERSION 120
#include "flashattn.h"
#include "provenance.h"

#include <CL/cl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern const char fa_bench_std_source[];
extern const size_t fa_bench_std_source_len;

#define MAX_LIST 16
#define MAX_REPS 50

typedef struct opts {
    const char *backend;
    int device, heads, batch, causal, backward, repeat, cpu, standard;
    fa_dtype dtype;
    int64_t seqlens[MAX_LIST], dims[MAX_LIST];
    int nseq, ndim;
} opts;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

static int parse_list(const char *s, int64_t *out)
{
    int n = 0;
    while (*s && n < MAX_LIST) {
        out[n++] = strtoll(s, (char **)&s, 10);
        if (*s == ',')
            ++s;
    }
    return n;
}

/* ------------------------------------------------------------------ fused, through flashattn */

typedef struct shape {
    int64_t b, h, sq, d;
} shape;

/* Median seconds of fa_forward (and of fa_backward when bwd_time is not NULL) on backend; the
 * forward's output into o_host (fp32). Returns 0 when the backend cannot run it. */
static int run_fused(const opts *op, const char *backend, int device, const shape *s, const float *host_in,
                     float *o_host, double *fwd_time, double *bwd_time)
{
    fa_context *ctx;
    if (fa_context_create(&ctx, backend, device) != FA_SUCCESS)
        return 0;
    size_t n = (size_t)(s->b * s->sq * s->h * s->d), es = fa_dtype_size(op->dtype);
    void *host = malloc(n * es), *dev[9] = {0};
    int ok = host != NULL;
    for (int t = 0; t < 9 && ok; ++t)
        ok = fa_malloc(ctx, t == 4 ? (size_t)(s->b * s->h * s->sq) * 4 : n * es, &dev[t]) == FA_SUCCESS;
    for (int t = 0; t < 4 && ok; ++t) { /* q, k, v, dO */
        for (size_t i = 0; i < n; ++i) {
            float x = host_in[(size_t)t * n + i];
            if (op->dtype == FA_DTYPE_F16)
                ((uint16_t *)host)[i] = fa_f32_to_f16(x);
            else
                ((float *)host)[i] = x;
        }
        ok = fa_memcpy(ctx, dev[t == 3 ? 5 : t], host, n * es, FA_COPY_HOST_TO_DEVICE) == FA_SUCCESS;
    }
    int64_t sh[4] = {s->b, s->sq, s->h, s->d}, ls[3] = {s->b, s->h, s->sq};
    fa_fwd_args f = {
        .q = fa_tensor_contiguous(dev[0], op->dtype, 4, sh),
        .k = fa_tensor_contiguous(dev[1], op->dtype, 4, sh),
        .v = fa_tensor_contiguous(dev[2], op->dtype, 4, sh),
        .o = fa_tensor_contiguous(dev[3], op->dtype, 4, sh),
        .lse = fa_tensor_contiguous(dev[4], FA_DTYPE_F32, 3, ls),
        .opts = fa_options_default(),
    };
    f.opts.causal = op->causal;
    fa_bwd_args g = {.q = f.q, .k = f.k, .v = f.v, .o = f.o, .lse = f.lse, .opts = f.opts,
                     .dout = fa_tensor_contiguous(dev[5], op->dtype, 4, sh),
                     .dq = fa_tensor_contiguous(dev[6], op->dtype, 4, sh),
                     .dk = fa_tensor_contiguous(dev[7], op->dtype, 4, sh),
                     .dv = fa_tensor_contiguous(dev[8], op->dtype, 4, sh)};
    double t[MAX_REPS];
    if (ok && (fa_forward(ctx, &f) != FA_SUCCESS || fa_synchronize(ctx) != FA_SUCCESS)) { /* warm-up: builds */
        fprintf(stderr, "%s forward: %s\n", backend, fa_context_last_error(ctx));
        ok = 0;
    }
    for (int r = 0; r < op->repeat && ok; ++r) {
        double t0 = now();
        ok = fa_forward(ctx, &f) == FA_SUCCESS && fa_synchronize(ctx) == FA_SUCCESS;
        t[r] = now() - t0;
    }
    if (ok) {
        *fwd_time = median(t, op->repeat);
        ok = fa_memcpy(ctx, host, dev[3], n * es, FA_COPY_DEVICE_TO_HOST) == FA_SUCCESS;
        for (size_t i = 0; i < n && ok; ++i)
            o_host[i] = op->dtype == FA_DTYPE_F16 ? fa_f16_to_f32(((uint16_t *)host)[i]) : ((float *)host)[i];
    }
    if (ok && bwd_time) {
        ok = fa_backward(ctx, &g) == FA_SUCCESS && fa_synchronize(ctx) == FA_SUCCESS;
        for (int r = 0; r < op->repeat && ok; ++r) {
            double t0 = now();
            ok = fa_backward(ctx, &g) == FA_SUCCESS && fa_synchronize(ctx) == FA_SUCCESS;
            t[r] = now() - t0;
        }
        if (ok)
            *bwd_time = median(t, op->repeat);
        else
            fprintf(stderr, "%s backward: %s\n", backend, fa_context_last_error(ctx));
    }
    for (int i = 0; i < 9; ++i)
        fa_free(ctx, dev[i]);
    free(host);
    fa_context_destroy(ctx);
    return ok;
}

/* ------------------------------------------------------------------ standard, own OpenCL setup */

typedef struct std_cl {
    cl_context context;
    cl_command_queue queue;
    cl_device_id device;
    cl_program program;
    cl_kernel scores, softmax, output;
    cl_ulong max_alloc;
} std_cl;

static int std_open(std_cl *c, int index, fa_dtype dt)
{
    memset(c, 0, sizeof *c);
    cl_platform_id pl[16];
    cl_uint np = 0;
    if (clGetPlatformIDs(16, pl, &np) != CL_SUCCESS)
        return 0;
    const char *env = getenv("FLASHATTN_OPENCL_PLATFORM");
    long only = env && *env ? strtol(env, NULL, 10) : -1;
    int seen = 0;
    for (cl_uint i = 0; i < np && i < 16 && !c->device; ++i) {
        cl_device_id d[64];
        cl_uint nd = 0;
        if ((only >= 0 && (long)i != only) || clGetDeviceIDs(pl[i], CL_DEVICE_TYPE_ALL, 64, d, &nd) != CL_SUCCESS)
            continue;
        for (cl_uint j = 0; j < nd && j < 64; ++j, ++seen)
            if (seen == index)
                c->device = d[j];
    }
    if (!c->device)
        return 0;
    cl_int e;
    c->context = clCreateContext(NULL, 1, &c->device, NULL, NULL, &e);
    if (e == CL_SUCCESS)
        c->queue = clCreateCommandQueue(c->context, c->device, 0, &e);
    const char *src = fa_bench_std_source;
    size_t len = fa_bench_std_source_len;
    if (e == CL_SUCCESS)
        c->program = clCreateProgramWithSource(c->context, 1, &src, &len, &e);
    char options[64];
    snprintf(options, sizeof options, "-cl-std=CL1.2 -DSTD_DTYPE=%d", dt == FA_DTYPE_F16);
    if (e == CL_SUCCESS)
        e = clBuildProgram(c->program, 1, &c->device, options, NULL, NULL);
    if (e == CL_SUCCESS)
        c->scores = clCreateKernel(c->program, "std_scores", &e);
    if (e == CL_SUCCESS)
        c->softmax = clCreateKernel(c->program, "std_softmax", &e);
    if (e == CL_SUCCESS)
        c->output = clCreateKernel(c->program, "std_output", &e);
    if (e == CL_SUCCESS)
        e = clGetDeviceInfo(c->device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof c->max_alloc, &c->max_alloc, NULL);
    if (e != CL_SUCCESS)
        fprintf(stderr, "standard attention: OpenCL error %d\n", (int)e);
    return e == CL_SUCCESS;
}

static void std_close(std_cl *c)
{
    cl_kernel ks[] = {c->scores, c->softmax, c->output};
    for (int i = 0; i < 3; ++i)
        if (ks[i])
            clReleaseKernel(ks[i]);
    if (c->program)
        clReleaseProgram(c->program);
    if (c->queue)
        clReleaseCommandQueue(c->queue);
    if (c->context)
        clReleaseContext(c->context);
}

/* Median seconds of the three kernels; 0 when S does not fit one allocation. o_host gets O. */
static int run_standard(std_cl *c, const opts *op, const shape *s, const float *host_in, float *o_host, double *time)
{
    size_t n = (size_t)(s->b * s->sq * s->h * s->d), es = fa_dtype_size(op->dtype);
    size_t sbytes = (size_t)(s->b * s->h) * (size_t)s->sq * (size_t)s->sq * 4;
    if (sbytes > c->max_alloc)
        return 0;
    cl_int e;
    cl_mem buf[4], sm = clCreateBuffer(c->context, CL_MEM_READ_WRITE, sbytes, NULL, &e);
    if (e != CL_SUCCESS)
        return 0;
    void *host = malloc(n * es);
    for (int t = 0; t < 4; ++t) {
        for (size_t i = 0; i < n && t < 3; ++i) {
            float x = host_in[(size_t)t * n + i];
            if (op->dtype == FA_DTYPE_F16)
                ((uint16_t *)host)[i] = fa_f32_to_f16(x);
            else
                ((float *)host)[i] = x;
        }
        buf[t] = clCreateBuffer(c->context, CL_MEM_READ_WRITE | (t < 3 ? CL_MEM_COPY_HOST_PTR : 0), n * es,
                                t < 3 ? host : NULL, &e);
    }
    int sq = (int)s->sq, heads = (int)s->h, d = (int)s->d, causal = op->causal;
    float scale = 1.0f / sqrtf((float)s->d);
    clSetKernelArg(c->scores, 0, sizeof(cl_mem), &buf[0]);
    clSetKernelArg(c->scores, 1, sizeof(cl_mem), &buf[1]);
    clSetKernelArg(c->scores, 2, sizeof(cl_mem), &sm);
    clSetKernelArg(c->scores, 3, sizeof(int), &sq);
    clSetKernelArg(c->scores, 4, sizeof(int), &sq);
    clSetKernelArg(c->scores, 5, sizeof(int), &heads);
    clSetKernelArg(c->scores, 6, sizeof(int), &heads);
    clSetKernelArg(c->scores, 7, sizeof(int), &d);
    clSetKernelArg(c->scores, 8, sizeof(float), &scale);
    clSetKernelArg(c->scores, 9, sizeof(int), &causal);
    clSetKernelArg(c->softmax, 0, sizeof(cl_mem), &sm);
    clSetKernelArg(c->softmax, 1, sizeof(int), &sq);
    clSetKernelArg(c->output, 0, sizeof(cl_mem), &sm);
    clSetKernelArg(c->output, 1, sizeof(cl_mem), &buf[2]);
    clSetKernelArg(c->output, 2, sizeof(cl_mem), &buf[3]);
    clSetKernelArg(c->output, 3, sizeof(int), &sq);
    clSetKernelArg(c->output, 4, sizeof(int), &sq);
    clSetKernelArg(c->output, 5, sizeof(int), &heads);
    clSetKernelArg(c->output, 6, sizeof(int), &heads);
    clSetKernelArg(c->output, 7, sizeof(int), &d);
    size_t ts = 16, rows = (size_t)(s->b * s->h * s->sq);
    size_t g1[3] = {(size_t)(s->sq + 15) / 16 * 16, (size_t)(s->sq + 15) / 16 * 16, (size_t)(s->b * s->h)};
    size_t g3[3] = {(size_t)(s->d + 15) / 16 * 16, (size_t)(s->sq + 15) / 16 * 16, (size_t)(s->b * s->h)};
    size_t l[3] = {ts, ts, 1};
    double t[MAX_REPS];
    e = CL_SUCCESS;
    for (int r = -1; r < op->repeat && e == CL_SUCCESS; ++r) { /* r = -1: warm-up */
        double t0 = now();
        e = clEnqueueNDRangeKernel(c->queue, c->scores, 3, NULL, g1, l, 0, NULL, NULL);
        if (e == CL_SUCCESS)
            e = clEnqueueNDRangeKernel(c->queue, c->softmax, 1, NULL, &rows, NULL, 0, NULL, NULL);
        if (e == CL_SUCCESS)
            e = clEnqueueNDRangeKernel(c->queue, c->output, 3, NULL, g3, l, 0, NULL, NULL);
        if (e == CL_SUCCESS)
            e = clFinish(c->queue);
        if (r >= 0)
            t[r] = now() - t0;
    }
    if (e == CL_SUCCESS) {
        *time = median(t, op->repeat);
        e = clEnqueueReadBuffer(c->queue, buf[3], CL_TRUE, 0, n * es, host, 0, NULL, NULL);
        for (size_t i = 0; i < n && e == CL_SUCCESS; ++i)
            o_host[i] = op->dtype == FA_DTYPE_F16 ? fa_f16_to_f32(((uint16_t *)host)[i]) : ((float *)host)[i];
    } else {
        fprintf(stderr, "standard attention: OpenCL error %d\n", (int)e);
    }
    for (int i = 0; i < 4; ++i)
        clReleaseMemObject(buf[i]);
    clReleaseMemObject(sm);
    free(host);
    return e == CL_SUCCESS;
}

/* ------------------------------------------------------------------ main */

static double max_diff(const float *a, const float *b, size_t n)
{
    double m = 0.0;
    for (size_t i = 0; i < n; ++i)
        m = fmax(m, fabs((double)a[i] - (double)b[i]));
    return m;
}

int main(int argc, char **argv)
{
    opts op = {.backend = "opencl", .heads = 4, .batch = 1, .repeat = 5, .cpu = 1, .standard = 1,
               .dtype = FA_DTYPE_F32, .seqlens = {512, 1024, 2048}, .nseq = 3, .dims = {64, 128}, .ndim = 2};
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--backend") && v) op.backend = argv[++i];
        else if (!strcmp(a, "--device") && v) op.device = atoi(argv[++i]);
        else if (!strcmp(a, "--seqlens") && v) op.nseq = parse_list(argv[++i], op.seqlens);
        else if (!strcmp(a, "--dims") && v) op.ndim = parse_list(argv[++i], op.dims);
        else if (!strcmp(a, "--heads") && v) op.heads = atoi(argv[++i]);
        else if (!strcmp(a, "--batch") && v) op.batch = atoi(argv[++i]);
        else if (!strcmp(a, "--repeat") && v) op.repeat = atoi(argv[++i]);
        else if (!strcmp(a, "--dtype") && v) op.dtype = !strcmp(argv[++i], "fp16") ? FA_DTYPE_F16 : FA_DTYPE_F32;
        else if (!strcmp(a, "--causal")) op.causal = 1;
        else if (!strcmp(a, "--backward")) op.backward = 1;
        else if (!strcmp(a, "--no-cpu")) op.cpu = 0;
        else if (!strcmp(a, "--no-standard")) op.standard = 0;
        else {
            fprintf(stderr, "usage: %s [--backend opencl|cpu|cuda] [--device N] [--seqlens 512,1024] [--dims 64,128] "
                            "[--heads H] [--batch B] [--dtype fp32|fp16] [--causal] [--backward] [--repeat R] "
                            "[--no-cpu] [--no-standard]\n", argv[0]);
            return 2;
        }
    }
    if (op.repeat < 1)
        op.repeat = 1;
    if (op.repeat > MAX_REPS)
        op.repeat = MAX_REPS;
    char name[256] = "?";
    fa_device_name(op.backend, op.device, name, sizeof name);
    char device[320];
    snprintf(device, sizeof device, "%s device %d: %s", op.backend, op.device, name);
    fa_bench_provenance(stdout, device, argc, argv);
    printf("fused: %s device %d: %s; %s, batch %d, heads %d%s; median of %d runs after a warm-up\n\n", op.backend,
           op.device, name, fa_dtype_name(op.dtype), op.batch, op.heads, op.causal ? ", causal" : "", op.repeat);
    std_cl sc;
    int have_std = op.standard && std_open(&sc, op.device, op.dtype);
    printf("| seqlen | d | fused fwd ms | TFLOP/s |%s%s%s%s\n", op.backward ? " fused bwd ms | TFLOP/s |" : "",
           op.cpu ? " cpu fwd ms | fused/cpu time |" : "", op.cpu && op.backward ? " cpu bwd ms | fused/cpu time |" : "",
           have_std ? " standard fwd ms | TFLOP/s | speedup | max abs O diff |" : "");
    printf("|---|---|---|---|%s%s%s%s\n", op.backward ? "---|---|" : "", op.cpu ? "---|---|" : "",
           op.cpu && op.backward ? "---|---|" : "", have_std ? "---|---|---|---|" : "");
    for (int si = 0; si < op.nseq; ++si)
        for (int di = 0; di < op.ndim; ++di) {
            shape s = {op.batch, op.heads, op.seqlens[si], op.dims[di]};
            size_t n = (size_t)(s.b * s.sq * s.h * s.d);
            float *in = malloc(4 * n * sizeof(float)), *o1 = malloc(n * 4), *o2 = malloc(n * 4);
            if (!in || !o1 || !o2)
                return 1;
            uint64_t st = 12345;
            for (size_t i = 0; i < 4 * n; ++i) {
                st = st * 6364136223846793005ull + 1442695040888963407ull;
                in[i] = (float)((double)(st >> 11) / 9007199254740992.0 * 2.0 - 1.0);
            }
            double flops = 4.0 * (double)(s.b * s.h) * (double)s.sq * (double)s.sq * (double)s.d * (op.causal ? 0.5 : 1.0);
            double tf = 0, tb = 0, tc = 0, tcb = 0, ts = 0;
            printf("| %lld | %lld |", (long long)s.sq, (long long)s.d);
            if (run_fused(&op, op.backend, op.device, &s, in, o1, &tf, op.backward ? &tb : NULL))
                printf(" %.2f | %.4f |", tf * 1e3, flops / tf * 1e-12);
            else
                printf(" n/a | |");
            if (op.backward)
                printf(tb > 0 ? " %.2f | %.4f |" : " n/a | |", tb * 1e3, tb > 0 ? 2.5 * flops / tb * 1e-12 : 0.0);
            if (op.cpu) {
                if (run_fused(&op, "cpu", 0, &s, in, o2, &tc, op.backward ? &tcb : NULL) && tf > 0)
                    printf(" %.2f | %.2fx |", tc * 1e3, tf / tc);
                else
                    printf(" n/a | |");
                if (op.backward)
                    printf(tcb > 0 && tb > 0 ? " %.2f | %.2fx |" : " n/a | |", tcb * 1e3, tcb > 0 ? tb / tcb : 0.0);
            }
            if (have_std) {
                if (run_standard(&sc, &op, &s, in, o2, &ts))
                    printf(" %.2f | %.4f | %.1fx | %.2g |", ts * 1e3, flops / ts * 1e-12, tf > 0 ? ts / tf : 0.0,
                           tf > 0 ? max_diff(o1, o2, n) : 0.0);
                else
                    printf(" n/a (S too large) | | | |");
            }
            printf("\n");
            fflush(stdout);
            free(in);
            free(o1);
            free(o2);
        }
    if (have_std)
        std_close(&sc);
    return 0;
}
