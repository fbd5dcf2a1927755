/* rtc_launch_gpu.c: the SIMT forward launched the run-time way (host/rtc_launch.h: NVRTC, the
 * disk cache, the driver API) against the same kernel built by nvcc and launched by the backend,
 * on a real device. For each shape the backend runs fa_forward with FLASHATTN_KERNELS=simt (the
 * variant must be a simt one), then fa_rtc_launch_simt_forward runs on the parameter block the
 * backend builds for that call (core's fa_validate_forward, then gpu_host.c's fa_gpu_make_params:
 * the code path fa_forward takes, not a copy of it), and O and LSE must be bitwise identical.
 *
 * Why bitwise: both are forward_kernel<S, D, MOD> from the same source (simt/kernels.cuh), for the
 * same architecture, with the same grid, block and arguments (common/simt_geometry.h), and the
 * arithmetic options agree: NVRTC, like nvcc, contracts a * b + c into FMA by default (-fmad=true),
 * flushes no denormals and uses no fast math unless asked, and neither build asks (rtc_compiler.c
 * passes -std=c++17, and -DNDEBUG where the library is built with it, besides the arch; meson
 * gives nvcc -O3, which NVRTC applies by default). Each output element is computed by one thread in a fixed order (no atomics, no
 * reduction whose order depends on scheduling), so register allocation or instruction scheduling
 * (which do differ: NVRTC addresses shared memory with 64-bit registers, tests/cuda/rtc_sass.py)
 * cannot change a result. A difference would mean the two builds compile different code.
 *
 * Also printed, as information (nothing asserted): per shape the latency of the first
 * fa_rtc_launch_simt_forward call (cold: FLASHATTN_CACHE_DIR is a fresh temporary directory, so
 * NVRTC compiles; NVRTC's own seconds beside it), of a call after fa_rtc_launch_release (the cubin
 * from the disk cache, loaded again) and of a call with the module loaded, each until the stream
 * has finished; and for bf16, d 128, seqlen 4096, 16 heads the kernel time of both paths (CUDA
 * events around the launch on one stream, the best of a few runs).
 *
 * Exit 0 when every comparison holds, 1 on a failure, 77 (meson's skip) with the reason where
 * there is no CUDA device or libnvrtc cannot be opened. Run by bench/device/rtc_gpu.sh. */
#include "flashattn.h"
#include "host/gpu_host.h"
#include "host/rtc_compiler.h"
#include "host/rtc_launch.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SKIP 77

static fa_context *ctx;
static cudaStream_t stream;
static int failures;
static double nvrtc_seconds; /* NVRTC's time in the calls since it was last reset */
static int compiles;

static void on_progress(const fa_rtc_progress *progress, void *user)
{
    (void)user;
    if (progress->event == FA_RTC_COMPILE_END) {
        nvrtc_seconds += progress->seconds;
        ++compiles;
    }
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static uint64_t next(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

/* k / 1024 for k in [-1024, 1024]: exact in fp16, bf16 rounds it (the same bits for both paths) */
static float value(uint64_t *s)
{
    return (float)((int64_t)(next(s) % 2049) - 1024) / 1024.0f;
}

static uint16_t to_half(float x) /* x is 0 or a normal fp16 number with at most 11 significant bits */
{
    if (x == 0.0f)
        return 0;
    uint32_t u;
    memcpy(&u, &x, 4);
    const uint32_t sign = (u >> 16) & 0x8000u;
    const int exp = (int)((u >> 23) & 0xff) - 127 + 15;
    return (uint16_t)(sign | (uint32_t)exp << 10 | (u & 0x7fffffu) >> 13);
}

static uint16_t to_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

typedef struct shape {
    const char *name;
    fa_dtype dtype;
    int64_t batch, seqlen_q, seqlen_k, heads_q, heads_kv, d;
    int64_t pad; /* elements between one head's row and the next in Q, K and V: misaligns them */
    int causal;
    float softcap;
} shape;

static size_t elem_bytes(fa_dtype dt)
{
    return dt == FA_DTYPE_F32 ? 4 : 2;
}

/* a [batch, seqlen, heads, d] view whose heads lie d + pad apart, filled with random values */
static fa_tensor make_input(const shape *sh, int64_t seqlen, int64_t heads, uint64_t *seed)
{
    const int64_t hs = sh->d + sh->pad, n = sh->batch * seqlen * heads * hs;
    const size_t es = elem_bytes(sh->dtype);
    unsigned char *h = malloc((size_t)n * es);
    for (int64_t i = 0; i < n; ++i) {
        const float x = value(seed);
        if (sh->dtype == FA_DTYPE_F32) {
            memcpy(h + i * 4, &x, 4);
        } else {
            const uint16_t b = sh->dtype == FA_DTYPE_F16 ? to_half(x) : to_bf16(x);
            memcpy(h + i * 2, &b, 2);
        }
    }
    fa_tensor t;
    memset(&t, 0, sizeof t);
    if (fa_malloc(ctx, (size_t)n * es, &t.data) != FA_SUCCESS ||
        fa_memcpy(ctx, t.data, h, (size_t)n * es, FA_COPY_HOST_TO_DEVICE) != FA_SUCCESS) {
        fprintf(stderr, "input: %s\n", fa_context_last_error(ctx));
        exit(1);
    }
    free(h);
    t.dtype = sh->dtype;
    t.ndim = 4;
    const int64_t shp[4] = {sh->batch, seqlen, heads, sh->d};
    const int64_t str[4] = {seqlen * heads * hs, heads * hs, hs, 1};
    memcpy(t.shape, shp, sizeof shp);
    memcpy(t.stride, str, sizeof str);
    return t;
}

static fa_tensor make_output(fa_dtype dt, int ndim, const int64_t *shape_)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i)
        n *= shape_[i];
    void *p = NULL;
    if (fa_malloc(ctx, (size_t)n * elem_bytes(dt), &p) != FA_SUCCESS) {
        fprintf(stderr, "output: %s\n", fa_context_last_error(ctx));
        exit(1);
    }
    return fa_tensor_contiguous(p, dt, ndim, shape_);
}

static size_t bytes_of(const fa_tensor *t)
{
    size_t n = elem_bytes(t->dtype);
    for (int i = 0; i < t->ndim; ++i)
        n *= (size_t)t->shape[i];
    return n;
}

/* the backend's SIMT forward on a, on the test's stream */
static int backend_forward(const fa_fwd_args *a)
{
    if (fa_forward(ctx, a) != FA_SUCCESS || fa_synchronize(ctx) != FA_SUCCESS) {
        fprintf(stderr, "fa_forward: %s\n", fa_context_last_error(ctx));
        return 1;
    }
    return 0;
}

/* The parameter block the backend builds for a (fa_forward's validation, then the CUDA backend's
 * fa_gpu_make_params), launched through the driver API on the test's stream. */
static int rtc_forward(const fa_fwd_args *a, int sync)
{
    fa_problem p;
    int32_t *cu_host = NULL;
    memset(&p, 0, sizeof p);
    if (fa_validate_forward(ctx, a, &p, &cu_host) != FA_SUCCESS) {
        fprintf(stderr, "fa_validate_forward: %s\n", fa_context_last_error(ctx));
        free(cu_host);
        return 1;
    }
    fa_gpu_params kp;
    fa_gpu_buffers cb;
    int rc = 0;
    if (fa_gpu_make_params(ctx, &p, &kp, &cb) != FA_SUCCESS) {
        fprintf(stderr, "fa_gpu_make_params: %s\n", fa_context_last_error(ctx));
        rc = 1;
    } else {
        char why[512];
        fa_rtc_status st = fa_rtc_launch_simt_forward(&kp, (int)p.dtype, stream, why, sizeof why);
        if (st != FA_RTC_OK) {
            fprintf(stderr, "fa_rtc_launch_simt_forward: status %d: %s\n", (int)st, why);
            rc = 1;
        } else if (sync) {
            cudaError_t e = cudaStreamSynchronize(stream);
            if (e != cudaSuccess) {
                fprintf(stderr, "after the run-time compiled kernel: %s\n", cudaGetErrorString(e));
                rc = 1;
            }
        }
        fa_gpu_release(ctx, &cb);
    }
    free(cu_host);
    return rc;
}

/* whether dst and ref hold the same bytes; on a difference, the first one */
static int same_bits(const char *what, const char *name, const fa_tensor *ref, const fa_tensor *got)
{
    const size_t n = bytes_of(ref);
    unsigned char *a = malloc(n), *b = malloc(n);
    fa_memcpy(ctx, a, ref->data, n, FA_COPY_DEVICE_TO_HOST);
    fa_memcpy(ctx, b, got->data, n, FA_COPY_DEVICE_TO_HOST);
    int same = memcmp(a, b, n) == 0;
    if (!same) {
        const size_t es = elem_bytes(ref->dtype);
        size_t i = 0, diff = 0;
        while (i < n && a[i] == b[i])
            ++i;
        for (size_t j = 0; j < n; j += es)
            diff += memcmp(a + j, b + j, es) != 0;
        uint32_t x = 0, y = 0;
        memcpy(&x, a + i / es * es, es);
        memcpy(&y, b + i / es * es, es);
        printf("FAIL %s: %s differs in %zu of %zu elements; first, element %zu: backend 0x%0*x, run-time 0x%0*x\n",
               name, what, diff, n / es, i / es, (int)es * 2, x, (int)es * 2, y);
        ++failures;
    }
    free(a);
    free(b);
    return same;
}

typedef struct buffers {
    fa_fwd_args a1, a2; /* the backend's outputs, the run-time path's */
} buffers;

static void make_buffers(const shape *sh, buffers *b, uint64_t seed)
{
    memset(b, 0, sizeof *b);
    fa_fwd_args *a = &b->a1;
    a->q = make_input(sh, sh->seqlen_q, sh->heads_q, &seed);
    a->k = make_input(sh, sh->seqlen_k, sh->heads_kv, &seed);
    a->v = make_input(sh, sh->seqlen_k, sh->heads_kv, &seed);
    const int64_t so[4] = {sh->batch, sh->seqlen_q, sh->heads_q, sh->d};
    const int64_t sl[3] = {sh->batch, sh->heads_q, sh->seqlen_q};
    a->o = make_output(sh->dtype, 4, so);
    a->lse = make_output(FA_DTYPE_F32, 3, sl);
    a->opts = fa_options_default();
    a->opts.causal = sh->causal;
    a->opts.softcap = sh->softcap;
    b->a2 = *a;
    b->a2.o = make_output(sh->dtype, 4, so);
    b->a2.lse = make_output(FA_DTYPE_F32, 3, sl);
}

static void free_buffers(buffers *b)
{
    void *p[] = {b->a1.q.data, b->a1.k.data, b->a1.v.data, b->a1.o.data, b->a1.lse.data, b->a2.o.data, b->a2.lse.data};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; ++i)
        fa_free(ctx, p[i]);
}

/* the run-time path's outputs filled with a pattern neither path writes, so that an element the
 * kernel skipped cannot match */
static void poison(const buffers *b)
{
    cudaMemset(b->a2.o.data, 0x7f, bytes_of(&b->a2.o));
    cudaMemset(b->a2.lse.data, 0x7f, bytes_of(&b->a2.lse));
    cudaDeviceSynchronize();
}

static int compare(const char *name, const buffers *b)
{
    int ok = same_bits("O", name, &b->a1.o, &b->a2.o);
    return same_bits("LSE", name, &b->a1.lse, &b->a2.lse) && ok;
}

static void check_shape(const shape *sh, uint64_t seed)
{
    buffers b;
    make_buffers(sh, &b, seed);
    char variant[128] = "";
    if (fa_query_support(ctx, &b.a1, 0, variant, sizeof variant) != FA_SUCCESS || strncmp(variant, "simt", 4) != 0) {
        printf("FAIL %s: the backend's variant is \"%s\", not a SIMT one (%s)\n", sh->name, variant,
               fa_context_last_error(ctx));
        ++failures;
        free_buffers(&b);
        return;
    }
    if (backend_forward(&b.a1)) {
        printf("FAIL %s: the backend's forward\n", sh->name);
        ++failures;
        free_buffers(&b);
        return;
    }
    /* cold (NVRTC, disk cache written, module loaded), from the disk cache (module loaded again),
     * loaded */
    static const char *const steps[3] = {"cold", "disk-cached", "loaded"};
    double ms[3] = {0}, nvrtc[3] = {0};
    int compiled[3] = {0}, ok = 1;
    for (int step = 0; step < 3 && ok; ++step) {
        if (step == 1)
            fa_rtc_launch_release();
        poison(&b);
        nvrtc_seconds = 0;
        compiles = 0;
        const double t0 = now_ms();
        if (rtc_forward(&b.a2, 1)) {
            printf("FAIL %s: the run-time compiled forward (%s)\n", sh->name, steps[step]);
            ++failures;
            ok = 0;
            break;
        }
        ms[step] = now_ms() - t0;
        nvrtc[step] = nvrtc_seconds * 1e3;
        compiled[step] = compiles;
        char what[96];
        snprintf(what, sizeof what, "%s (%s)", sh->name, steps[step]);
        ok = compare(what, &b);
    }
    if (ok) {
        printf("PASS %s (%s): O and LSE bitwise identical\n", sh->name, variant);
        printf("  latency to the end of the kernel: cold %.1f ms (NVRTC %.1f ms, %d compile%s), disk-cached %.1f ms "
               "(%d compiles), loaded %.3f ms\n",
               ms[0], nvrtc[0], compiled[0], compiled[0] == 1 ? "" : "s", ms[1], compiled[1], ms[2]);
    }
    free_buffers(&b);
}

/* best kernel time of reps launches of one path, CUDA events on the test's stream */
static double best_ms(const fa_fwd_args *a, int rtc, int reps)
{
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    double best = INFINITY;
    for (int r = 0; r < reps; ++r) {
        cudaEventRecord(e0, stream);
        int rc = rtc ? rtc_forward(a, 0) : (fa_forward(ctx, a) != FA_SUCCESS);
        cudaEventRecord(e1, stream);
        if (rc || cudaEventSynchronize(e1) != cudaSuccess) {
            best = NAN;
            break;
        }
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        if (ms < best)
            best = ms;
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return best;
}

static void time_large(void)
{
    const shape sh = {"bf16 d128 seqlen 4096 heads 16", FA_DTYPE_BF16, 1, 4096, 4096, 16, 16, 128, 0, 0, 0.0f};
    buffers b;
    make_buffers(&sh, &b, 99);
    /* warm both: the run-time kernel compiled and loaded outside the timing */
    if (backend_forward(&b.a1) || rtc_forward(&b.a2, 1)) {
        printf("FAIL %s: a warm-up forward\n", sh.name);
        ++failures;
        free_buffers(&b);
        return;
    }
    if (compare(sh.name, &b))
        printf("PASS %s: O and LSE bitwise identical\n", sh.name);
    const double nvcc_ms = best_ms(&b.a1, 0, 5), rtc_ms = best_ms(&b.a2, 1, 5);
    printf("  kernel time (launch to completion, CUDA events, best of 5): backend (nvcc) %.3f ms, run-time "
           "(NVRTC, driver API) %.3f ms\n",
           nvcc_ms, rtc_ms);
    free_buffers(&b);
}

int main(void)
{
    /* before the context opens: the backend reads FLASHATTN_KERNELS then; the cache directory is
     * fresh, so the first run-time launch of each kernel compiles */
    setenv("FLASHATTN_KERNELS", "simt", 1);
    char cache_dir[] = "/tmp/fa-rtc-gpu-XXXXXX";
    if (!mkdtemp(cache_dir)) {
        perror("mkdtemp");
        return 1;
    }
    setenv("FLASHATTN_CACHE_DIR", cache_dir, 1);

    if (fa_context_create(&ctx, "cuda", 0) != FA_SUCCESS) {
        printf("SKIP: no CUDA device (%s)\n", fa_last_error());
        rmdir(cache_dir);
        return SKIP;
    }
    char why[512];
    const char *nvrtc = fa_rtc_nvrtc_version(why, sizeof why);
    if (!nvrtc) {
        printf("SKIP: libnvrtc cannot be opened (%s)\n", why);
        fa_context_destroy(ctx);
        rmdir(cache_dir);
        return SKIP;
    }
    printf("NVRTC %s, disk cache %s\n", nvrtc, cache_dir);
    if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess ||
        fa_context_set_stream(ctx, stream) != FA_SUCCESS) {
        printf("FAIL: a stream for the test (%s)\n", fa_context_last_error(ctx));
        return 1;
    }
    fa_rtc_set_notify(on_progress, NULL);

    const shape shapes[] = {
        {"bf16 d64 causal", FA_DTYPE_BF16, 2, 200, 200, 4, 2, 64, 0, 1, 0.0f},
        {"fp16 d128 softcap", FA_DTYPE_F16, 1, 130, 257, 4, 4, 128, 0, 0, 30.0f},
        {"fp32 d40 unaligned strides", FA_DTYPE_F32, 2, 77, 100, 3, 1, 40, 3, 0, 0.0f},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; ++i)
        check_shape(&shapes[i], 1 + i);
    time_large();

    fa_rtc_set_notify(NULL, NULL);
    fa_context_set_stream(ctx, NULL);
    fa_rtc_launch_release();
    cudaStreamDestroy(stream);
    fa_context_destroy(ctx);
    printf("%s (cache directory %s left for inspection)\n", failures ? "FAILED" : "PASSED", cache_dir);
    return failures ? 1 : 0;
}
