/* ring_bench.c: ring attention (context parallel) over NCCL on the GPUs of one host, one thread a
 * GPU: time per forward and backward for a sequence split over the ranks, against
 *  - the same schedule with a transport that moves nothing (compute alone),
 *  - the transfers alone (the same sends, no attention),
 *  - one GPU running the whole sequence (fa_forward / fa_backward), where it is asked for.
 * hidden = 1 - (ring - compute) / transfers, clamped to [0, 1]: the share of the transfer time that
 * the attention covers. efficiency = one GPU / (ranks x ring). A benchmark: it prints a table and
 * checks nothing (the ring's results are tested in tests/ring). Inputs are a repeated block of
 * seeded normal values (the kernels' speed does not depend on them).
 *
 *   ring_bench [--ranks R] [--seqlens 131072,262144] [--heads 16] [--dim 128] [--dtype bf16|fp16]
 *              [--causal] [--iters 2] [--single-max S] [--csv FILE]
 * --csv appends one row per seqlen, after a provenance comment line (bench/provenance.h); a new
 * file starts with the column names. */
#include "flashattn.h"
#include "provenance.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct config {
    int ranks, heads, dim, causal, iters;
    fa_dtype dt;
    int64_t seqlens[16];
    int nseq;
    int64_t single_max; /* one-GPU baseline only up to this length (0: never) */
    const char *csv;
} config;

typedef struct shared {
    const config *cfg;
    pthread_barrier_t bar;
    unsigned char id[FA_RING_NCCL_ID_BYTES];
    volatile int failed;
} shared;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* a transport that moves nothing: the ring's compute alone */
typedef struct null_comm {
    pthread_barrier_t *bar;
} null_comm;

static int null_start(void *u, int c, const void *s, void *r, size_t b, void *st)
{
    (void)u, (void)c, (void)s, (void)r, (void)b, (void)st;
    return 0;
}

static int null_finish(void *u, int c, void *st)
{
    (void)u, (void)c, (void)st;
    return 0;
}

static int null_agree(void *u, int ok, int *all_ok)
{
    null_comm *n = u;
    pthread_barrier_wait(n->bar);
    *all_ok = ok;
    return 0;
}

typedef struct rank_arg {
    shared *sh;
    int rank;
} rank_arg;

static fa_status fill(fa_context *ctx, void *dst, size_t bytes, const void *block, size_t block_bytes)
{
    for (size_t o = 0; o < bytes; o += block_bytes) {
        fa_status st = fa_memcpy(ctx, (char *)dst + o, block, bytes - o < block_bytes ? bytes - o : block_bytes,
                                 FA_COPY_HOST_TO_DEVICE);
        if (st != FA_SUCCESS)
            return st;
    }
    return FA_SUCCESS;
}

static uint16_t *random_block(fa_dtype dt, size_t count)
{
    uint16_t *b = malloc(count * 2);
    uint64_t s = 12345;
    for (size_t i = 0; b && i < count; ++i) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        const double u1 = ((double)(s >> 11) + 0.5) / 9007199254740992.0;
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        const double u2 = (double)(s >> 11) / 9007199254740992.0;
        const float x = (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
        b[i] = dt == FA_DTYPE_BF16 ? fa_f32_to_bf16(x) : fa_f32_to_f16(x);
    }
    return b;
}

#define CHECK(call)                                                                                                \
    do {                                                                                                           \
        fa_status st_ = (call);                                                                                    \
        if (st_ != FA_SUCCESS) {                                                                                   \
            fprintf(stderr, "rank %d: %s: %s (%s)\n", a->rank, #call, fa_status_string(st_),                       \
                    ctx ? fa_context_last_error(ctx) : "");                                                        \
            sh->failed = 1;                                                                                        \
            goto out;                                                                                              \
        }                                                                                                          \
    } while (0)

/* the stream the transfers-alone timing orders against: the legacy default stream, which the
 * context is switched to for that part (fa_context_set_stream's cudaStreamLegacy) */
#define LEGACY_STREAM ((void *)0x1)

/* seconds of one ring transfer of `bytes` (mean over iters after a warm-up), every rank at once */
static double time_transfer(shared *sh, fa_context *ctx, const fa_ring_comm *comm, void *a, void *b, size_t bytes)
{
    const int iters = sh->cfg->iters;
    double t = 0.0;
    for (int it = -1; it < iters; ++it) {
        pthread_barrier_wait(&sh->bar);
        const double t0 = now();
        if (comm->start(comm->user, 0, a, b, bytes, LEGACY_STREAM) || comm->finish(comm->user, 0, LEGACY_STREAM) ||
            fa_synchronize(ctx) != FA_SUCCESS)
            sh->failed = 1;
        pthread_barrier_wait(&sh->bar);
        if (it >= 0)
            t += (now() - t0) / iters;
    }
    return t;
}

static void *rank_main(void *arg)
{
    rank_arg *a = arg;
    shared *sh = a->sh;
    const config *c = sh->cfg;
    fa_context *ctx = NULL;
    fa_ring_nccl *ring = NULL;
    enum { NB = 11 };
    void *buf[NB] = {0};
    const size_t blk = 1 << 20;
    uint16_t *block = random_block(c->dt, blk);
    CHECK(block ? FA_SUCCESS : FA_ERR_OUT_OF_MEMORY);
    CHECK(fa_context_create(&ctx, "cuda", a->rank));
    CHECK(fa_ring_nccl_create(&ring, ctx, sh->id, a->rank, c->ranks));
    const fa_ring_comm comm = fa_ring_nccl_comm(ring);
    null_comm nc = {&sh->bar};
    const fa_ring_comm none = {a->rank, c->ranks, null_start, null_finish, null_agree, &nc};
    for (int si = 0; si < c->nseq && !sh->failed; ++si) {
        const int64_t S = c->seqlens[si], n = S / c->ranks, H = c->heads, D = c->dim;
        const fa_ring_layout layout = c->causal ? FA_RING_ZIGZAG : FA_RING_CONTIGUOUS;
        const size_t es = fa_dtype_size(c->dt), tb = (size_t)(n * H * D) * es;
        for (int i = 0; i < 8; ++i) {
            CHECK(fa_malloc(ctx, tb, &buf[i]));
            CHECK(fill(ctx, buf[i], tb, block, blk * 2));
        }
        CHECK(fa_malloc(ctx, sizeof(float) * (size_t)(H * n), &buf[8]));
        const size_t grad_bytes = 2 * tb / es * sizeof(float); /* dK | dV in fp32 */
        CHECK(fa_malloc(ctx, grad_bytes, &buf[9]));
        CHECK(fa_malloc(ctx, grad_bytes, &buf[10]));
        const int64_t shape[4] = {1, n, H, D}, lshape[3] = {1, H, n};
        fa_fwd_args f;
        memset(&f, 0, sizeof f);
        f.q = fa_tensor_contiguous(buf[0], c->dt, 4, shape);
        f.k = fa_tensor_contiguous(buf[1], c->dt, 4, shape);
        f.v = fa_tensor_contiguous(buf[2], c->dt, 4, shape);
        f.o = fa_tensor_contiguous(buf[3], c->dt, 4, shape);
        f.lse = fa_tensor_contiguous(buf[8], FA_DTYPE_F32, 3, lshape);
        f.opts = fa_options_default();
        f.opts.causal = c->causal;
        fa_bwd_args g;
        memset(&g, 0, sizeof g);
        g.q = f.q, g.k = f.k, g.v = f.v, g.o = f.o, g.lse = f.lse;
        g.dout = fa_tensor_contiguous(buf[4], c->dt, 4, shape);
        g.dq = fa_tensor_contiguous(buf[5], c->dt, 4, shape);
        g.dk = fa_tensor_contiguous(buf[6], c->dt, 4, shape);
        g.dv = fa_tensor_contiguous(buf[7], c->dt, 4, shape);
        g.opts = f.opts;
        /* long sequences: one measured run, no warm-up (the shorter ones before warmed up) */
        const int iters = S >= 524288 ? 1 : c->iters, first = S >= 524288 ? 0 : -1;
        double tf[2] = {0, 0}, tbw[2] = {0, 0};
        for (int mode = 0; mode < 2; ++mode) { /* 0 the ring over NCCL, 1 compute alone */
            const fa_ring_comm *cm = mode == 0 ? &comm : &none;
            for (int it = first; it < iters; ++it) {
                pthread_barrier_wait(&sh->bar);
                const double t0 = now();
                CHECK(fa_ring_forward(ctx, cm, layout, &f));
                CHECK(fa_synchronize(ctx));
                pthread_barrier_wait(&sh->bar);
                const double t1 = now();
                CHECK(fa_ring_backward(ctx, cm, layout, &g));
                CHECK(fa_synchronize(ctx));
                pthread_barrier_wait(&sh->bar);
                if (it >= 0) {
                    tf[mode] += (t1 - t0) / iters;
                    tbw[mode] += (now() - t1) / iters;
                }
            }
        }
        /* the transfers alone: one K | V move and one dK | dV move timed, summed over the schedule
         * (the forward moves K | V size - 1 times, the backward K | V size - 1 times and dK | dV size times) */
        double tkv = 0.0, tgr = 0.0;
        if (c->ranks > 1) {
            CHECK(fa_context_set_stream(ctx, LEGACY_STREAM));
            tkv = time_transfer(sh, ctx, &comm, buf[9], buf[10], 2 * tb);
            tgr = time_transfer(sh, ctx, &comm, buf[9], buf[10], grad_bytes);
            CHECK(fa_context_set_stream(ctx, NULL));
        }
        /* one GPU, the whole sequence (rank 0 alone; the others wait at the barrier) */
        double t1f = 0.0, t1b = 0.0;
        if (a->rank == 0 && S <= c->single_max) {
            void *w[9] = {0};
            const int64_t s1[4] = {1, S, H, D}, l1[3] = {1, H, S};
            int ok = 1;
            for (int i = 0; i < 9 && ok; ++i)
                ok = fa_malloc(ctx, i == 8 ? sizeof(float) * (size_t)(H * S) : tb * (size_t)c->ranks, &w[i]) == FA_SUCCESS &&
                     (i == 8 || fill(ctx, w[i], tb * (size_t)c->ranks, block, blk * 2) == FA_SUCCESS);
            if (ok) {
                fa_fwd_args f1 = f;
                f1.q = fa_tensor_contiguous(w[0], c->dt, 4, s1);
                f1.k = fa_tensor_contiguous(w[1], c->dt, 4, s1);
                f1.v = fa_tensor_contiguous(w[2], c->dt, 4, s1);
                f1.o = fa_tensor_contiguous(w[3], c->dt, 4, s1);
                f1.lse = fa_tensor_contiguous(w[8], FA_DTYPE_F32, 3, l1);
                fa_bwd_args g1 = g;
                g1.q = f1.q, g1.k = f1.k, g1.v = f1.v, g1.o = f1.o, g1.lse = f1.lse;
                g1.dout = fa_tensor_contiguous(w[4], c->dt, 4, s1);
                g1.dq = fa_tensor_contiguous(w[5], c->dt, 4, s1);
                g1.dk = fa_tensor_contiguous(w[6], c->dt, 4, s1);
                g1.dv = fa_tensor_contiguous(w[7], c->dt, 4, s1);
                for (int it = first; it < iters && ok; ++it) {
                    const double t0 = now();
                    ok = fa_forward(ctx, &f1) == FA_SUCCESS && fa_synchronize(ctx) == FA_SUCCESS;
                    const double t1 = now();
                    ok = ok && fa_backward(ctx, &g1) == FA_SUCCESS && fa_synchronize(ctx) == FA_SUCCESS;
                    if (it >= 0) {
                        t1f += (t1 - t0) / iters;
                        t1b += (now() - t1) / iters;
                    }
                }
            }
            if (!ok) {
                fprintf(stderr, "one GPU at %lld tokens: %s\n", (long long)S, fa_context_last_error(ctx));
                t1f = t1b = 0.0;
            }
            for (int i = 0; i < 9; ++i)
                if (w[i])
                    fa_free(ctx, w[i]);
        }
        pthread_barrier_wait(&sh->bar);
        if (a->rank == 0) {
            const double flop_f = 4.0 * (double)S * (double)S * (double)D * (double)H * (c->causal ? 0.5 : 1.0);
            const double flop_b = 2.5 * flop_f;
            const double ring = tf[0] + tbw[0], comp = tf[1] + tbw[1];
            const double comm_f = (c->ranks - 1) * tkv, comm_b = (c->ranks - 1) * tkv + c->ranks * tgr;
            double hidden = c->ranks > 1 ? 1.0 - (ring - comp) / (comm_f + comm_b) : 1.0;
            hidden = hidden < 0.0 ? 0.0 : hidden > 1.0 ? 1.0 : hidden;
            const double one = t1f + t1b;
            printf("%8lld %6s %5d | %9.1f %9.1f %9.1f | %9.1f %9.1f | %7.1f %7.1f %7.0f%% | %9.1f %6.2f | %6.0f %6.0f\n",
                   (long long)S, c->causal ? "causal" : "full", c->ranks, 1e3 * tf[0], 1e3 * tbw[0], 1e3 * ring,
                   1e3 * comp, 1e3 * (comm_f + comm_b), 1e3 * tkv, 1e3 * tgr, 100.0 * hidden, 1e3 * one,
                   one > 0 ? one / (c->ranks * ring) : 0.0, flop_f / tf[0] / c->ranks * 1e-12,
                   flop_b / tbw[0] / c->ranks * 1e-12);
            fflush(stdout);
            if (c->csv) {
                FILE *fp = fopen(c->csv, "a");
                if (fp) {
                    fprintf(fp, "%lld,%s,%d,%d,%d,%s,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.4f\n", (long long)S,
                            c->causal ? "causal" : "full", c->ranks, c->heads, c->dim, fa_dtype_name(c->dt), tf[0],
                            tbw[0], tf[1], tbw[1], tkv, tgr, t1f, t1b, hidden);
                    fclose(fp);
                }
            }
        }
        for (int i = 0; i < NB; ++i) {
            fa_free(ctx, buf[i]);
            buf[i] = NULL;
        }
    }
out:
    for (int i = 0; i < NB; ++i)
        if (buf[i])
            fa_free(ctx, buf[i]);
    fa_ring_nccl_destroy(ring);
    fa_context_destroy(ctx);
    free(block);
    return NULL;
}

static int parse_seqlens(const char *s, config *c)
{
    c->nseq = 0;
    while (*s && c->nseq < 16) {
        char *end;
        long long v = strtoll(s, &end, 10);
        if (end == s || v <= 0)
            return 0;
        c->seqlens[c->nseq++] = v;
        s = *end == ',' ? end + 1 : end;
    }
    return c->nseq > 0;
}

int main(int argc, char **argv)
{
    config c = {.ranks = 0, .heads = 16, .dim = 128, .causal = 0, .iters = 2, .dt = FA_DTYPE_BF16,
                .single_max = 1 << 20, .csv = NULL};
    parse_seqlens("131072,262144", &c);
    for (int i = 1; i < argc; ++i) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(o, "--causal")) {
            c.causal = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "%s needs a value\n", o);
            return 2;
        }
        ++i;
        if (!strcmp(o, "--ranks"))
            c.ranks = atoi(v);
        else if (!strcmp(o, "--heads"))
            c.heads = atoi(v);
        else if (!strcmp(o, "--dim"))
            c.dim = atoi(v);
        else if (!strcmp(o, "--iters"))
            c.iters = atoi(v);
        else if (!strcmp(o, "--single-max"))
            c.single_max = atoll(v);
        else if (!strcmp(o, "--csv"))
            c.csv = v;
        else if (!strcmp(o, "--dtype"))
            c.dt = !strcmp(v, "fp16") ? FA_DTYPE_F16 : FA_DTYPE_BF16;
        else if (!strcmp(o, "--seqlens")) {
            if (!parse_seqlens(v, &c)) {
                fprintf(stderr, "bad --seqlens %s\n", v);
                return 2;
            }
        } else {
            fprintf(stderr, "unknown option %s\n", o);
            return 2;
        }
    }
    int ndev = 0;
    if (fa_device_count("cuda", &ndev) != FA_SUCCESS || ndev == 0) {
        fprintf(stderr, "ring_bench: no CUDA device\n");
        return 77;
    }
    if (c.ranks <= 0 || c.ranks > ndev)
        c.ranks = ndev;
    if (c.iters < 1)
        c.iters = 1;
    for (int i = 0; i < c.nseq; ++i)
        if (c.seqlens[i] % (2 * c.ranks)) {
            fprintf(stderr, "seqlen %lld is not a multiple of 2 x ranks\n", (long long)c.seqlens[i]);
            return 2;
        }
    shared sh;
    memset(&sh, 0, sizeof sh);
    sh.cfg = &c;
    if (fa_ring_nccl_unique_id(sh.id) != FA_SUCCESS) {
        fprintf(stderr, "ring_bench: no NCCL (built without it, or libnccl.so.2 not found)\n");
        return 77;
    }
    char name[256];
    fa_device_name("cuda", 0, name, sizeof name);
    char device[300];
    snprintf(device, sizeof device, "%d x %s", c.ranks, name);
    fa_bench_provenance(stdout, device, argc, argv);
    if (c.csv) { /* a provenance comment before this run's rows; the column names where the file starts */
        FILE *fp = fopen(c.csv, "a");
        if (!fp) {
            fprintf(stderr, "ring_bench: cannot open %s for appending\n", c.csv);
            return 2;
        }
        if (fseek(fp, 0, SEEK_END) == 0 && ftell(fp) == 0)
            fputs("seqlen,mask,ranks,heads,dim,dtype,ring_fwd_s,ring_bwd_s,compute_fwd_s,compute_bwd_s,kv_move_1x_s,"
                  "grad_move_1x_s,one_gpu_fwd_s,one_gpu_bwd_s,hidden\n", fp);
        fa_bench_provenance(fp, device, argc, argv);
        fclose(fp);
    }
    printf("# ring_bench: %d x %s, %s, heads %d, d %d, batch 1, NCCL ring, one thread a GPU\n", c.ranks, name,
           fa_dtype_name(c.dt), c.heads, c.dim);
    printf("# times in ms; hidden = 1 - (ring - compute alone) / transfers alone; eff = one GPU / (ranks x ring);\n"
           "# TFLOP/s per GPU of the ring (4 S^2 d H forward, x 0.5 causal, x 2.5 backward)\n");
    printf("%8s %6s %5s | %9s %9s %9s | %9s %9s | %7s %7s %8s | %9s %6s | %6s %6s\n", "seqlen", "mask", "ranks",
           "ring fwd", "ring bwd", "ring", "compute", "transfer", "kv 1x", "grad 1x", "hidden", "one GPU", "eff",
           "TF fwd", "TF bwd");
    pthread_barrier_init(&sh.bar, NULL, (unsigned)c.ranks);
    pthread_t th[16];
    rank_arg args[16];
    for (int r = 0; r < c.ranks; ++r) {
        args[r] = (rank_arg){&sh, r};
        pthread_create(&th[r], NULL, rank_main, &args[r]);
    }
    for (int r = 0; r < c.ranks; ++r)
        pthread_join(th[r], NULL);
    pthread_barrier_destroy(&sh.bar);
    return sh.failed ? 1 : 0;
}
