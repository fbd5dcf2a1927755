/* cpu_tile_parts.c: where one forward tile's time goes on this CPU, phase by phase, for every
 * kernel table (backends/cpu/isa.h) the CPU runs, on one thread with the tile's buffers in cache:
 * the two products (fp32 on panels; bf16 on the tables that have them), the scaling of S, the
 * online-softmax step, and the rounding of P to bf16. Prints ns per call, ns per score element
 * and the products' GFLOP/s. Usage: cpu_tile_parts [--dims 64,128] [--bq 64] [--bk 128]
 * [--tables amx,avx512,...]. Assert nothing: a benchmark. */
#include "isa.h"
#include "provenance.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

typedef struct tile {
    const fa_cpu_isa *t;
    int64_t bq, bk, dp;
    float *q, *s, *o, *kp, *vp;          /* fp32: Q, S, O, K^T and V in panels */
    uint16_t *qb, *pb;                   /* bf16 Q and P */
    uint32_t *kpairs, *vpairs;           /* pair-packed K^T (dp / 2 x bk) and V (bk / 2 x dp) */
    fa_softmax_row rows[256];
} tile;

enum { PH_S_F32, PH_S_BF16, PH_SCALE, PH_SOFTMAX, PH_TO_BF16, PH_SOFTMAX_BF16, PH_PV_F32, PH_PV_BF16, PH_TILES_CFG, PH_N };
static const char *const phase_names[PH_N] = {"S = Q K^T fp32 panels", "S = Q K^T bf16 tiles", "S *= scale",
                                              "online softmax step", "P to bf16", "softmax step, scale and P to bf16 fused",
                                              "O += P V fp32 panels", "O += P V bf16 tiles", "tile config + release"};

static void run_phase(tile *x, int ph)
{
    const fa_cpu_isa *t = x->t;
    int64_t bq = x->bq, bk = x->bk, dp = x->dp;
    switch (ph) {
    case PH_S_F32: t->gemm_panels(bq, bk, dp, x->q, dp, x->kp, dp * FA_CPU_PANEL, x->s, bk, 0, NULL, 0); break;
    case PH_S_BF16: t->gemm_bf16(bq, bk, dp, x->qb, dp, x->kpairs, bk, x->s, bk, 0); break;
    case PH_SCALE:
        for (int64_t r = 0; r < bq; ++r)
            t->scale_row(x->s + r * bk, bk, 0.0883883f);
        break;
    case PH_SOFTMAX: t->online_softmax_tile(x->s, bq, bk, bk, x->rows, x->o, dp); break;
    case PH_TO_BF16:
        for (int64_t r = 0; r < bq; ++r)
            t->to_bf16_row(x->s + r * bk, x->pb + r * bk, bk);
        break;
    case PH_SOFTMAX_BF16:
        t->online_softmax_tile_bf16(x->s, bq, bk, bk, 0.0883883f, x->rows, x->o, dp, x->pb, bk);
        break;
    case PH_PV_F32: t->gemm_panels(bq, dp, bk, x->s, bk, x->vp, bk * FA_CPU_PANEL, x->o, dp, 1, NULL, 0); break;
    case PH_PV_BF16: t->gemm_bf16(bq, dp, bk, x->pb, bk, x->vpairs, dp, x->o, dp, 1); break;
    case PH_TILES_CFG:
        t->bf16_tiles_begin();
        t->bf16_tiles_end();
        break;
    default: break;
    }
}

/* the best of 5 timings of a loop long enough for 10 ms */
static double time_phase(tile *x, int ph)
{
    int reps = 1;
    const int bf16 = ph == PH_S_BF16 || ph == PH_PV_BF16;
    for (;;) {
        if (bf16)
            x->t->bf16_tiles_begin();
        double t0 = now_ns();
        for (int i = 0; i < reps; ++i)
            run_phase(x, ph);
        double dt = now_ns() - t0;
        if (bf16)
            x->t->bf16_tiles_end();
        if (dt > 1e7 || reps > (1 << 24))
            break;
        reps *= 4;
    }
    double best = 1e30;
    for (int k = 0; k < 5; ++k) {
        if (bf16)
            x->t->bf16_tiles_begin();
        double t0 = now_ns();
        for (int i = 0; i < reps; ++i)
            run_phase(x, ph);
        double dt = (now_ns() - t0) / reps;
        if (bf16)
            x->t->bf16_tiles_end();
        if (dt < best)
            best = dt;
    }
    return best;
}

static void *zalloc(size_t bytes)
{
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) {
        fprintf(stderr, "cpu_tile_parts: out of memory\n");
        exit(1);
    }
    memset(p, 0, bytes);
    return p;
}

static void one_table(const fa_cpu_isa *t, int64_t d, int64_t bq, int64_t bk)
{
    tile x = {.t = t, .bq = bq, .bk = bk, .dp = (d + 31) / 32 * 32};
    int64_t dp = x.dp;
    x.q = zalloc(sizeof(float) * (size_t)(bq * dp));
    x.s = zalloc(sizeof(float) * (size_t)(bq * bk));
    x.o = zalloc(sizeof(float) * (size_t)(bq * dp));
    x.kp = zalloc(sizeof(float) * (size_t)(dp * bk));
    x.vp = zalloc(sizeof(float) * (size_t)(dp * bk));
    x.qb = zalloc(sizeof(uint16_t) * (size_t)(bq * dp));
    x.pb = zalloc(sizeof(uint16_t) * (size_t)(bq * bk));
    x.kpairs = zalloc(sizeof(uint32_t) * (size_t)(dp * bk / 2));
    x.vpairs = zalloc(sizeof(uint32_t) * (size_t)(dp * bk / 2));
    unsigned seed = 12345u;
    for (int64_t i = 0; i < bq * dp; ++i) {
        seed = seed * 1664525u + 1013904223u;
        x.q[i] = (float)(seed >> 8) / 16777216.0f - 0.5f;
        x.qb[i] = (uint16_t)0x3e00u; /* 0.125 */
    }
    for (int64_t i = 0; i < dp * bk; ++i) {
        seed = seed * 1664525u + 1013904223u;
        x.kp[i] = x.vp[i] = (float)(seed >> 8) / 16777216.0f - 0.5f;
    }
    for (int64_t i = 0; i < dp * bk / 2; ++i)
        x.kpairs[i] = x.vpairs[i] = 0x3e003e00u;
    for (int64_t r = 0; r < bq; ++r)
        x.rows[r] = fa_softmax_init();
    run_phase(&x, PH_S_F32);
    const double elems = (double)(bq * bk), flops = 2.0 * (double)(bq * bk * dp);
    for (int ph = 0; ph < PH_N; ++ph) {
        int needs_bf16 = ph == PH_S_BF16 || ph == PH_PV_BF16 || ph == PH_TILES_CFG;
        if (needs_bf16 && !t->gemm_bf16)
            continue;
        double ns = time_phase(&x, ph);
        int product = ph == PH_S_F32 || ph == PH_S_BF16 || ph == PH_PV_F32 || ph == PH_PV_BF16;
        if (product)
            printf("| %s | %lld | %lld x %lld | %s | %.0f | %.3f | %.1f |\n", t->name, (long long)d, (long long)bq,
                   (long long)bk, phase_names[ph], ns, ns / elems, flops / ns);
        else
            printf("| %s | %lld | %lld x %lld | %s | %.0f | %.3f | |\n", t->name, (long long)d, (long long)bq,
                   (long long)bk, phase_names[ph], ns, ns / elems);
    }
    free(x.q);
    free(x.s);
    free(x.o);
    free(x.kp);
    free(x.vp);
    free(x.qb);
    free(x.pb);
    free(x.kpairs);
    free(x.vpairs);
}

int main(int argc, char **argv)
{
    const char *dims = "64,128", *tables = "amx,avx512,avx2,generic";
    int64_t bq = 64, bk = 128;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--dims") && i + 1 < argc)
            dims = argv[++i];
        else if (!strcmp(argv[i], "--tables") && i + 1 < argc)
            tables = argv[++i];
        else if (!strcmp(argv[i], "--bq") && i + 1 < argc)
            bq = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--bk") && i + 1 < argc)
            bk = atoll(argv[++i]);
        else {
            fprintf(stderr, "usage: cpu_tile_parts [--dims 64,128] [--bq 64] [--bk 128] [--tables amx,avx512,...]\n");
            return 2;
        }
    }
    if (bq < 32 || bq > 256 || bq % 32 || bk < 32 || bk > 1024 || bk % 32) {
        fprintf(stderr, "cpu_tile_parts: --bq in 32..256 and --bk in 32..1024, both multiples of 32\n");
        return 2;
    }
    const char *why = NULL;
    const fa_cpu_isa *best = fa_cpu_isa_select(&why);
    char device[96];
    snprintf(device, sizeof device, "this CPU, 1 thread, default table %s", best ? best->name : "?");
    fa_bench_provenance(stdout, device, argc, argv);
    printf("| table | d | tile | phase | ns per call | ns per score | GFLOP/s |\n|---|---|---|---|---|---|---|\n");
    char list[256];
    snprintf(list, sizeof list, "%s", tables);
    for (char *name = strtok(list, ","); name; name = strtok(NULL, ",")) {
        setenv("FLASHATTN_CPU_ISA", name, 1);
        const fa_cpu_isa *t = fa_cpu_isa_select(&why);
        unsetenv("FLASHATTN_CPU_ISA");
        if (!t) {
            printf("| %s | | | not run: %s | | | |\n", name, why ? why : "?");
            continue;
        }
        char dl[64];
        snprintf(dl, sizeof dl, "%s", dims);
        for (char *save = NULL, *ds = strtok_r(dl, ",", &save); ds; ds = strtok_r(NULL, ",", &save)) {
            long long d = atoll(ds);
            if (d < 1 || d > 256) {
                fprintf(stderr, "cpu_tile_parts: head dims in 1..256\n");
                return 2;
            }
            one_table(t, d, bq, bk);
        }
    }
    return 0;
}
