/* test_ring.c: ring attention simulated on the CPU, threads standing in for ranks
 * (fa_ring_local): 2, 3, 4 and 8 ranks, contiguous and zigzag shards, causal and not, GQA, fp32
 * and bf16, forward and backward, shards of a few tokens and shards that span several CPU key
 * tiles. The shards' results, put back in sequence order, are held to the float64 reference of
 * the whole sequence with the conformance pass rule (factor 2 of the naive same-precision error
 * for O and LSE, 3 for the gradients), as single-device attention is; the single-device result
 * is printed beside them. A learnable sink (joined to each query row once; the ranks' dsink
 * parts summed in rank order against the reference's dsink) and a value head dim d_v != d. Plus
 * the ring's input checks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "flashattn.h"
#include "internal.h"
#include "reference.h"
#include "testrand.h"

#include <math.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* sizes of the CPU cases; the GPU cases (problem.gpu) take their own */
enum { B = 2, H = 4, HK = 2, D = 32, N = 12 }; /* N tokens per rank */

enum transport { LOCAL, NCCL_THREADS, NCCL_PROCESSES };

typedef struct problem {
    int ranks, causal;
    float softcap; /* fa_options.softcap of every call (0: off) */
    int pad; /* elements of padding after each head's row in the shards (strided views) */
    fa_ring_layout layout;
    fa_dtype dt;
    enum transport tr;
    int sink; /* a learnable sink (fa_options.learnable_sink) on every call, dsink asked */
    int64_t b, h, hk, d, n; /* batch, heads, kv heads, head dim of Q and K, tokens per rank */
    int64_t dv;             /* head dim of V, O, dO, dV (0: d) */
    int64_t total;          /* tokens of the whole sequence */
    unsigned char nccl_id[FA_RING_NCCL_ID_BYTES];
    void *q, *k, *v, *dout;                      /* global inputs [b, total, heads, d or dv] */
    void *o, *dq, *dk, *dV;                      /* global outputs of the ring, in sequence order */
    float *lse;                                  /* [b, h, total] */
    float *sinkv;                                /* the sink [h] (sink set) */
    float *dsink;                                /* each rank's dsink part [ranks][h] (sink set) */
} problem;

/* the sequence row of row s of rank r's shard */
static int64_t global_row(const problem *pr, int r, int64_t s)
{
    if (pr->layout == FA_RING_CONTIGUOUS)
        return r * pr->n + s;
    const int64_t c = pr->n / 2;
    return s < c ? r * c + s : (2 * (int64_t)pr->ranks - 1 - r) * c + (s - c);
}

static fa_tensor t4(const problem *pr, void *data, fa_dtype dt, int64_t n, int64_t heads, int64_t dim)
{
    const int64_t shape[4] = {pr->b, n, heads, dim};
    return fa_tensor_contiguous(data, dt, 4, shape);
}

static fa_tensor t3(const problem *pr, float *data, int64_t n)
{
    const int64_t shape[3] = {pr->b, pr->h, n};
    return fa_tensor_contiguous(data, FA_DTYPE_F32, 3, shape);
}

/* a shard [b, n, heads, dim] whose head rows are dim + pad elements apart */
static fa_tensor shard4(const problem *pr, void *data, int64_t heads, int64_t dim)
{
    fa_tensor t = t4(pr, data, pr->dt, pr->n, heads, dim);
    const int64_t row = dim + pr->pad;
    t.stride[2] = row;
    t.stride[1] = heads * row;
    t.stride[0] = pr->n * heads * row;
    return t;
}

static size_t shard_bytes(const problem *pr, int64_t heads, int64_t dim)
{
    return (size_t)(pr->b * pr->n * heads * (dim + pr->pad)) * fa_dtype_size(pr->dt);
}

/* copy rows between a global [b, total, heads, dim] array and a shard (shard4 layout) */
static void move_rows(const problem *pr, int r, void *global, void *shard, int64_t heads, int64_t dim, int to_shard)
{
    const size_t es = fa_dtype_size(pr->dt), row = (size_t)dim * es;
    for (int64_t b = 0; b < pr->b; ++b)
        for (int64_t s = 0; s < pr->n; ++s)
            for (int64_t h = 0; h < heads; ++h) {
                char *g = (char *)global + (size_t)(((b * pr->total + global_row(pr, r, s)) * heads + h) * dim) * es;
                char *l = (char *)shard + (size_t)(((b * pr->n + s) * heads + h) * (dim + pr->pad)) * es;
                memcpy(to_shard ? l : g, to_shard ? g : l, row);
            }
}

typedef struct rank_job {
    problem *pr;
    fa_ring_local *ring;
    int rank;
    fa_status fwd, bwd;
    int64_t gaps_written; /* padding bytes of the output shards that changed */
    char msg[256];
} rank_job;

/* bytes of the padding after each head row of a shard that differ from the poison 0xA5 */
static int64_t gaps_changed(const problem *pr, const void *shard, int64_t heads, int64_t dim)
{
    const size_t es = fa_dtype_size(pr->dt);
    int64_t bad = 0;
    for (int64_t row = 0; row < pr->b * pr->n * heads; ++row)
        for (size_t i = (size_t)dim * es; i < (size_t)(dim + pr->pad) * es; ++i)
            bad += ((const unsigned char *)shard)[(size_t)row * (size_t)(dim + pr->pad) * es + i] != 0xA5;
    return bad;
}

/* Host shard buffers (q, k, v, dout, o, dq, dk, dv, lse, dsink: the outputs from index 4; then the
 * sink, an input) and, on a GPU, their device copies */
enum { NBUF = 11, SINK = 10 };

static void *run_rank(void *arg)
{
    rank_job *j = arg;
    problem *pr = j->pr;
    const int gpu = pr->tr != LOCAL;
    const int64_t d = pr->d, dv = pr->dv;
    const size_t qb = shard_bytes(pr, pr->h, d), kb = shard_bytes(pr, pr->hk, d);
    const size_t qvb = shard_bytes(pr, pr->h, dv), kvb = shard_bytes(pr, pr->hk, dv);
    const size_t lb = sizeof(float) * (size_t)(pr->b * pr->h * pr->n), sb = sizeof(float) * (size_t)pr->h;
    const size_t bytes[NBUF] = {qb, kb, kvb, qvb, qvb, qb, kb, kvb, lb, sb, sb};
    void *host[NBUF] = {0}, *dev[NBUF] = {0};
    fa_context *ctx = NULL;
    fa_ring_nccl *nccl = NULL;
    j->fwd = j->bwd = FA_ERR_INTERNAL;
    int ok = 1;
    for (int i = 0; i < NBUF; ++i)
        ok = ok && (host[i] = malloc(bytes[i])) != NULL;
    if (ok && fa_context_create(&ctx, gpu ? "cuda" : "cpu", gpu ? j->rank : 0) != FA_SUCCESS) {
        snprintf(j->msg, sizeof j->msg, "rank %d: no context", j->rank);
        ok = 0;
    }
    if (ok && !gpu)
        fa_context_set_num_threads(ctx, 1);
    if (ok && gpu) {
        const fa_status st = fa_ring_nccl_create(&nccl, ctx, pr->nccl_id, j->rank, pr->ranks);
        if (st != FA_SUCCESS) {
            snprintf(j->msg, sizeof j->msg, "rank %d: fa_ring_nccl_create: %s", j->rank, fa_context_last_error(ctx));
            ok = 0;
        }
    }
    if (ok) {
        move_rows(pr, j->rank, pr->q, host[0], pr->h, d, 1);
        move_rows(pr, j->rank, pr->k, host[1], pr->hk, d, 1);
        move_rows(pr, j->rank, pr->v, host[2], pr->hk, dv, 1);
        move_rows(pr, j->rank, pr->dout, host[3], pr->h, dv, 1);
        for (int i = 4; i < 8; ++i)
            memset(host[i], 0xA5, bytes[i]);
        memset(host[9], 0xFF, bytes[9]); /* dsink: NaN where not written */
        if (pr->sink)
            memcpy(host[SINK], pr->sinkv, bytes[SINK]);
        void **buf = host;
        if (gpu) {
            for (int i = 0; i < NBUF && ok; ++i)
                ok = fa_malloc(ctx, bytes[i], &dev[i]) == FA_SUCCESS &&
                     fa_memcpy(ctx, dev[i], host[i], bytes[i], FA_COPY_HOST_TO_DEVICE) == FA_SUCCESS;
            buf = dev;
        }
        const fa_ring_comm comm = gpu ? fa_ring_nccl_comm(nccl) : fa_ring_local_comm(j->ring, j->rank);
        fa_fwd_args f;
        memset(&f, 0, sizeof f);
        f.q = shard4(pr, buf[0], pr->h, d);
        f.k = shard4(pr, buf[1], pr->hk, d);
        f.v = shard4(pr, buf[2], pr->hk, dv);
        f.o = shard4(pr, buf[4], pr->h, dv);
        f.lse = t3(pr, buf[8], pr->n);
        f.opts = fa_options_default();
        f.opts.causal = pr->causal;
        f.opts.softcap = pr->softcap;
        f.opts.learnable_sink = pr->sink ? buf[SINK] : NULL;
        if (ok)
            j->fwd = fa_ring_forward(ctx, &comm, pr->layout, &f);
        fa_bwd_args g;
        memset(&g, 0, sizeof g);
        g.q = f.q;
        g.k = f.k;
        g.v = f.v;
        g.o = f.o;
        g.lse = f.lse;
        g.dout = shard4(pr, buf[3], pr->h, dv);
        g.dq = shard4(pr, buf[5], pr->h, d);
        g.dk = shard4(pr, buf[6], pr->hk, d);
        g.dv = shard4(pr, buf[7], pr->hk, dv);
        if (pr->sink)
            g.dsink = fa_tensor_contiguous(buf[9], FA_DTYPE_F32, 1, &pr->h);
        g.opts = f.opts;
        if (ok && j->fwd == FA_SUCCESS)
            j->bwd = fa_ring_backward(ctx, &comm, pr->layout, &g);
        if (j->fwd != FA_SUCCESS || j->bwd != FA_SUCCESS)
            snprintf(j->msg, sizeof j->msg, "rank %d: %s", j->rank, fa_context_last_error(ctx));
        for (int i = 4; i < SINK && gpu && ok; ++i)
            ok = fa_memcpy(ctx, host[i], dev[i], bytes[i], FA_COPY_DEVICE_TO_HOST) == FA_SUCCESS;
        j->gaps_written = gaps_changed(pr, host[4], pr->h, dv) + gaps_changed(pr, host[5], pr->h, d) +
                          gaps_changed(pr, host[6], pr->hk, d) + gaps_changed(pr, host[7], pr->hk, dv);
        move_rows(pr, j->rank, pr->o, host[4], pr->h, dv, 0);
        move_rows(pr, j->rank, pr->dq, host[5], pr->h, d, 0);
        move_rows(pr, j->rank, pr->dk, host[6], pr->hk, d, 0);
        move_rows(pr, j->rank, pr->dV, host[7], pr->hk, dv, 0);
        if (pr->sink)
            memcpy(pr->dsink + (size_t)j->rank * (size_t)pr->h, host[9], bytes[9]);
        const float *lse = host[8];
        for (int64_t b = 0; b < pr->b; ++b)
            for (int64_t h = 0; h < pr->h; ++h)
                for (int64_t s = 0; s < pr->n; ++s)
                    pr->lse[(b * pr->h + h) * pr->total + global_row(pr, j->rank, s)] = lse[(b * pr->h + h) * pr->n + s];
    }
    for (int i = 0; i < NBUF; ++i) {
        if (dev[i])
            fa_free(ctx, dev[i]);
        free(host[i]);
    }
    fa_ring_nccl_destroy(nccl);
    fa_context_destroy(ctx);
    return NULL;
}

static uint64_t rng_state = 1; /* the inputs of every case in turn (testrand.h) */

/* Each test draws its inputs from the start of the stream, so that a test's cases are the same
 * whichever tests ran before it (the NCCL tests draw where a GPU is found; RING_TEST_FILTER). */
static int restart_inputs(void **state)
{
    (void)state;
    rng_state = 1;
    return 0;
}

static void *random_array(fa_dtype dt, int64_t count)
{
    void *a = malloc((size_t)count * fa_dtype_size(dt));
    for (int64_t i = 0; i < count; ++i) {
        const float x = (float)rng_normal(&rng_state);
        if (dt == FA_DTYPE_BF16)
            ((uint16_t *)a)[i] = fa_f32_to_bf16(x);
        else if (dt == FA_DTYPE_F16)
            ((uint16_t *)a)[i] = fa_f32_to_f16(x);
        else
            ((float *)a)[i] = x;
    }
    return a;
}

static double value(fa_dtype dt, const void *a, int64_t i)
{
    return dt == FA_DTYPE_BF16  ? fa_bf16_to_f32(((const uint16_t *)a)[i])
           : dt == FA_DTYPE_F16 ? fa_f16_to_f32(((const uint16_t *)a)[i])
                                : ((const float *)a)[i];
}

/* max |x - ref| over n elements (x in dt or fp32 when dt < 0) and the reference's max |.| */
static double max_err(const void *x, fa_dtype dt, const double *ref, int64_t n, double *ref_max)
{
    double e = 0.0, m = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        const double d = fabs(value(dt, x, i) - ref[i]);
        e = d > e || isnan(d) ? d : e;
        m = fabs(ref[i]) > m ? fabs(ref[i]) : m;
    }
    *ref_max = m;
    return e;
}

static double max_err64(const double *x, const double *ref, int64_t n)
{
    double e = 0.0;
    for (int64_t i = 0; i < n; ++i)
        e = fabs(x[i] - ref[i]) > e ? fabs(x[i] - ref[i]) : e;
    return e;
}

static double bound_of(double factor, double naive, double ref_max)
{
    return factor * naive + 1e-5 * (ref_max > 1.0 ? ref_max : 1.0);
}

/* Global arrays: shared with the child processes in the NCCL_PROCESSES mode (mmap), else calloc. */
static void *global_alloc(const problem *pr, size_t bytes)
{
    if (pr->tr != NCCL_PROCESSES)
        return calloc(bytes, 1);
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static void global_free(const problem *pr, void *p, size_t bytes)
{
    if (pr->tr != NCCL_PROCESSES)
        free(p);
    else if (p)
        munmap(p, bytes);
}

/* NCCL_PROCESSES: the ranks are child processes (fork; the parent never touches CUDA). Rank 0
 * makes the NCCL id and hands it to the others through shared memory, as a launcher would. */
typedef struct shared_id {
    volatile int ready;
    unsigned char id[FA_RING_NCCL_ID_BYTES];
} shared_id;

static void run_processes(problem *pr, rank_job *jobs)
{
    shared_id *sid = global_alloc(pr, sizeof *sid);
    assert_non_null(sid);
    pid_t pid[8];
    for (int r = 0; r < pr->ranks; ++r) {
        pid[r] = fork();
        assert_true(pid[r] >= 0);
        if (pid[r] == 0) {
            if (r == 0) {
                if (fa_ring_nccl_unique_id(sid->id) != FA_SUCCESS)
                    _exit(2);
                __sync_synchronize();
                sid->ready = 1;
            }
            for (int t = 0; !sid->ready && t < 120000; ++t)
                usleep(1000);
            if (!sid->ready)
                _exit(3);
            memcpy(pr->nccl_id, sid->id, sizeof sid->id);
            run_rank(&jobs[r]);
            _exit(0);
        }
    }
    for (int r = 0; r < pr->ranks; ++r) {
        int status = 0;
        assert_int_equal(waitpid(pid[r], &status, 0), pid[r]);
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    global_free(pr, sid, sizeof *sid);
}

static void run_case(problem pr)
{
    const int ranks = pr.ranks, causal = pr.causal, pad = pr.pad;
    const fa_ring_layout layout = pr.layout;
    const fa_dtype dt = pr.dt;
    pr.total = (int64_t)ranks * pr.n;
    if (pr.dv == 0)
        pr.dv = pr.d;
    /* elements of Q and dQ, O and dO, K and dK, V and dV, LSE */
    const int64_t nq = pr.b * pr.total * pr.h * pr.d, nqv = pr.b * pr.total * pr.h * pr.dv;
    const int64_t nk = pr.b * pr.total * pr.hk * pr.d, nkv = pr.b * pr.total * pr.hk * pr.dv;
    const int64_t nl = pr.b * pr.h * pr.total;
    const size_t es = fa_dtype_size(dt), sinks = sizeof(float) * (size_t)(ranks * pr.h);
    pr.q = random_array(dt, nq);
    pr.k = random_array(dt, nk);
    pr.v = random_array(dt, nkv);
    pr.dout = random_array(dt, nqv);
    pr.o = global_alloc(&pr, (size_t)nqv * es);
    pr.dq = global_alloc(&pr, (size_t)nq * es);
    pr.dk = global_alloc(&pr, (size_t)nk * es);
    pr.dV = global_alloc(&pr, (size_t)nkv * es);
    pr.lse = global_alloc(&pr, (size_t)nl * sizeof(float));
    assert_true(pr.o && pr.dq && pr.dk && pr.dV && pr.lse);
    if (pr.sink) { /* sink logits in [-2, 2], where the scaled scores of unit-normal inputs lie */
        pr.sinkv = malloc(sizeof(float) * (size_t)pr.h);
        pr.dsink = global_alloc(&pr, sinks);
        assert_true(pr.sinkv && pr.dsink);
        for (int64_t h = 0; h < pr.h; ++h)
            pr.sinkv[h] = (float)(-2.0 + 4.0 * (double)(rng_next(&rng_state) >> 11) * (1.0 / 9007199254740992.0));
    }

    /* the ranks */
    fa_ring_local *ring = NULL;
    rank_job *jobs = global_alloc(&pr, sizeof(rank_job) * 8);
    assert_non_null(jobs);
    for (int r = 0; r < ranks; ++r)
        jobs[r] = (rank_job){&pr, NULL, r, FA_ERR_INTERNAL, FA_ERR_INTERNAL, -1, ""};
    if (pr.tr == NCCL_PROCESSES) {
        run_processes(&pr, jobs);
    } else {
        if (pr.tr == LOCAL)
            assert_int_equal(fa_ring_local_create(&ring, ranks), FA_SUCCESS);
        else
            assert_int_equal(fa_ring_nccl_unique_id(pr.nccl_id), FA_SUCCESS);
        pthread_t th[8];
        for (int r = 0; r < ranks; ++r) {
            jobs[r].ring = ring;
            assert_int_equal(pthread_create(&th[r], NULL, run_rank, &jobs[r]), 0);
        }
        for (int r = 0; r < ranks; ++r)
            pthread_join(th[r], NULL);
        fa_ring_local_destroy(ring);
    }
    for (int r = 0; r < ranks; ++r) {
        if (jobs[r].msg[0])
            printf("  %s\n", jobs[r].msg);
        assert_int_equal(jobs[r].fwd, FA_SUCCESS);
        assert_int_equal(jobs[r].bwd, FA_SUCCESS);
        assert_int_equal(jobs[r].gaps_written, 0);
    }
    global_free(&pr, jobs, sizeof(rank_job) * 8);

    /* the whole sequence on one device, and the float64 reference / naive yardstick of it */
    fa_context *ctx;
    assert_int_equal(fa_context_create(&ctx, "cpu", 0), FA_SUCCESS);
    void *o1 = calloc((size_t)nqv, es), *dq1 = calloc((size_t)nq, es), *dk1 = calloc((size_t)nk, es),
         *dv1 = calloc((size_t)nkv, es);
    float *lse1 = calloc((size_t)nl, sizeof(float)), *dsink1 = calloc((size_t)pr.h, sizeof(float));
    fa_bwd_args g;
    memset(&g, 0, sizeof g);
    g.q = t4(&pr, pr.q, dt, pr.total, pr.h, pr.d);
    g.k = t4(&pr, pr.k, dt, pr.total, pr.hk, pr.d);
    g.v = t4(&pr, pr.v, dt, pr.total, pr.hk, pr.dv);
    g.o = t4(&pr, o1, dt, pr.total, pr.h, pr.dv);
    g.lse = t3(&pr, lse1, pr.total);
    g.dout = t4(&pr, pr.dout, dt, pr.total, pr.h, pr.dv);
    g.dq = t4(&pr, dq1, dt, pr.total, pr.h, pr.d);
    g.dk = t4(&pr, dk1, dt, pr.total, pr.hk, pr.d);
    g.dv = t4(&pr, dv1, dt, pr.total, pr.hk, pr.dv);
    g.opts = fa_options_default();
    g.opts.causal = causal;
    g.opts.softcap = pr.softcap;
    g.opts.learnable_sink = pr.sinkv; /* this process's host copy: the one-device run is on the CPU */
    if (pr.sink)
        g.dsink = fa_tensor_contiguous(dsink1, FA_DTYPE_F32, 1, &pr.h);
    fa_fwd_args f = {g.q, g.k, g.v, g.o, g.lse, NULL, g.opts};
    assert_int_equal(fa_forward(ctx, &f), FA_SUCCESS);
    assert_int_equal(fa_backward(ctx, &g), FA_SUCCESS);
    fa_problem p;
    int32_t *cu = NULL;
    assert_int_equal(fa_validate_backward(ctx, &g, &p, &cu), FA_SUCCESS);
    double *ro = malloc(sizeof(double) * nqv), *rl = malloc(sizeof(double) * nl), *no = malloc(sizeof(double) * nqv),
           *nl_ = malloc(sizeof(double) * nl);
    double *rg[3] = {malloc(sizeof(double) * nq), malloc(sizeof(double) * nk), malloc(sizeof(double) * nkv)};
    double *ng[3] = {malloc(sizeof(double) * nq), malloc(sizeof(double) * nk), malloc(sizeof(double) * nkv)};
    double *rds = malloc(sizeof(double) * (size_t)pr.h), *nds = malloc(sizeof(double) * (size_t)pr.h);
    assert_int_equal(fa_ref_forward(&p, ro, rl), FA_SUCCESS);
    assert_int_equal(fa_naive_forward(&p, no, nl_), FA_SUCCESS);
    assert_int_equal(fa_ref_backward(&p, rg[0], rg[1], rg[2], rds), FA_SUCCESS);
    /* the naive backward is given the O the ring's backward was given: its dsink takes D_i from
     * that O, whose rounding dsink inherits whole (reference.c), and the ring's O, merged across
     * steps, is rounded apart from the one device's (p.o) */
    fa_problem pn = p;
    pn.o.data = pr.o;
    assert_int_equal(fa_naive_backward(&pn, ng[0], ng[1], ng[2], nds), FA_SUCCESS);

    /* LSE: the reference is [H, total] per batch-major row; ours [B, H, total] */
    double lse_err = 0.0, lse_err1 = 0.0, lmax = 0.0;
    for (int64_t b = 0; b < pr.b; ++b)
        for (int64_t h = 0; h < pr.h; ++h)
            for (int64_t s = 0; s < pr.total; ++s) {
                const double r = rl[h * pr.b * pr.total + b * pr.total + s];
                const double x = pr.lse[(b * pr.h + h) * pr.total + s], x1 = lse1[(b * pr.h + h) * pr.total + s];
                lse_err = fmax(lse_err, fabs(x - r));
                lse_err1 = fmax(lse_err1, fabs(x1 - r));
                lmax = fmax(lmax, fabs(r));
            }
    double nlse_err = 0.0;
    for (int64_t i = 0; i < nl; ++i)
        nlse_err = fmax(nlse_err, fabs(nl_[i] - rl[i]));
    double omax, omax1;
    const double oerr = max_err(pr.o, dt, ro, nqv, &omax), oerr1 = max_err(o1, dt, ro, nqv, &omax1);
    const double obound = bound_of(2.0, max_err64(no, ro, nqv), omax);
    char dims[48];
    snprintf(dims, sizeof dims, pr.dv == pr.d ? "d %lld" : "d %lld d_v %lld", (long long)pr.d, (long long)pr.dv);
    printf("  %s %d ranks %s %s %s %s%s%s: O %.2e (one device %.2e, bound %.2e)  LSE %.2e (%.2e, bound %.2e)\n",
           pr.tr == LOCAL ? "cpu" : pr.tr == NCCL_THREADS ? "nccl-threads" : "nccl-processes", ranks, dims,
           layout == FA_RING_ZIGZAG ? "zigzag" : "contiguous", causal ? "causal" : "full", fa_dtype_name(dt),
           pad ? " strided" : "", pr.sink ? " sink" : "", oerr, oerr1, obound, lse_err, lse_err1,
           bound_of(2.0, nlse_err, lmax));
    assert_true(oerr <= obound);
    assert_true(lse_err <= bound_of(2.0, nlse_err, lmax));
    const void *ours[3] = {pr.dq, pr.dk, pr.dV}, *one[3] = {dq1, dk1, dv1};
    const int64_t cnt[3] = {nq, nk, nkv};
    for (int i = 0; i < 3; ++i) {
        double m, m1;
        const double e = max_err(ours[i], dt, rg[i], cnt[i], &m), e1 = max_err(one[i], dt, rg[i], cnt[i], &m1);
        const double bound = bound_of(3.0, max_err64(ng[i], rg[i], cnt[i]), m);
        printf("    d%c %.2e (one device %.2e, bound %.2e)\n", "QKV"[i], e, e1, bound);
        assert_true(e <= bound);
    }
    if (pr.sink) { /* the ranks' parts summed in rank order, as a replicated parameter's gradient */
        float *sum = calloc((size_t)pr.h, sizeof(float));
        assert_non_null(sum);
        for (int r = 0; r < ranks; ++r)
            for (int64_t h = 0; h < pr.h; ++h)
                sum[h] += pr.dsink[r * pr.h + h];
        double m, m1;
        const double e = max_err(sum, FA_DTYPE_F32, rds, pr.h, &m), e1 = max_err(dsink1, FA_DTYPE_F32, rds, pr.h, &m1);
        const double bound = bound_of(3.0, max_err64(nds, rds, pr.h), m);
        printf("    dsink %.2e (one device %.2e, bound %.2e)\n", e, e1, bound);
        assert_true(e <= bound);
        free(sum);
    }
    for (int i = 0; i < 3; ++i)
        free(rg[i]), free(ng[i]);
    free(ro), free(rl), free(no), free(nl_), free(rds), free(nds), free(cu);
    free(o1), free(dq1), free(dk1), free(dv1), free(lse1), free(dsink1);
    fa_context_destroy(ctx);
    free(pr.q), free(pr.k), free(pr.v), free(pr.dout), free(pr.sinkv);
    global_free(&pr, pr.o, (size_t)nqv * es), global_free(&pr, pr.dq, (size_t)nq * es);
    global_free(&pr, pr.dk, (size_t)nk * es), global_free(&pr, pr.dV, (size_t)nkv * es);
    global_free(&pr, pr.lse, (size_t)nl * sizeof(float));
    if (pr.dsink)
        global_free(&pr, pr.dsink, sinks);
}

static problem cpu_case(int ranks, fa_ring_layout layout, int causal, fa_dtype dt, int pad)
{
    problem pr;
    memset(&pr, 0, sizeof pr);
    pr.ranks = ranks;
    pr.causal = causal;
    pr.layout = layout;
    pr.dt = dt;
    pr.pad = pad;
    pr.tr = LOCAL;
    pr.b = B, pr.h = H, pr.hk = HK, pr.d = D, pr.n = N;
    return pr;
}

static void test_ring_ranks(void **state)
{
    (void)state;
    const int ranks[] = {2, 3, 4, 8};
    for (size_t i = 0; i < sizeof ranks / sizeof ranks[0]; ++i)
        for (int layout = 0; layout < 2; ++layout)
            for (int causal = 0; causal < 2; ++causal) {
                run_case(cpu_case(ranks[i], (fa_ring_layout)layout, causal, FA_DTYPE_F32, 0));
                run_case(cpu_case(ranks[i], (fa_ring_layout)layout, causal, FA_DTYPE_BF16, 0));
            }
    for (size_t i = 0; i < sizeof ranks / sizeof ranks[0]; ++i) /* strided shards */
        run_case(cpu_case(ranks[i], FA_RING_ZIGZAG, 1, FA_DTYPE_BF16, 3));
    /* the softcap passes to every step: the merged LSE is that of the capped scores, and each
     * step's backward recomputes them (1.5: where tanh bends at D 32's score spread) */
    for (int layout = 0; layout < 2; ++layout)
        for (int causal = 0; causal < 2; ++causal) {
            problem pr = cpu_case(3, (fa_ring_layout)layout, causal, layout ? FA_DTYPE_BF16 : FA_DTYPE_F32, 0);
            pr.softcap = 1.5f;
            run_case(pr);
        }
}

/* A learnable sink joins each query row's softmax once (the forward gives it to a query chunk's
 * first pair only) and each rank's dsink covers its own query rows (the zigzag layout's two
 * chunks added): 3 ranks, both layouts, causal and not, fp32 and bf16. */
static void test_ring_sink(void **state)
{
    (void)state;
    for (int layout = 0; layout < 2; ++layout)
        for (int causal = 0; causal < 2; ++causal)
            for (int t = 0; t < 2; ++t) {
                problem pr = cpu_case(3, (fa_ring_layout)layout, causal, t ? FA_DTYPE_BF16 : FA_DTYPE_F32, 0);
                pr.sink = 1;
                run_case(pr);
            }
}

/* d_v != d: V, O, dO, dV shards (and the V | dV halves of what travels the ring) of the value
 * head dim, smaller and larger than d, with and without a sink; zigzag causal, 3 ranks. */
static void test_ring_head_dim_v(void **state)
{
    (void)state;
    const int64_t dims[2][2] = {{32, 16}, {24, 40}};
    for (int i = 0; i < 2; ++i)
        for (int sink = 0; sink < 2; ++sink) {
            problem pr = cpu_case(3, FA_RING_ZIGZAG, 1, i ? FA_DTYPE_BF16 : FA_DTYPE_F32, 0);
            pr.d = dims[i][0], pr.dv = dims[i][1];
            pr.sink = sink;
            run_case(pr);
        }
}

static void test_ring_one_rank(void **state)
{
    (void)state;
    run_case(cpu_case(1, FA_RING_ZIGZAG, 1, FA_DTYPE_BF16, 0));
}

/* How many key tiles the CPU backend's forward walks when n_q query rows meet n_k keys of the
 * problem's shape (fa_plan). */
static int64_t cpu_key_tiles(const problem *pr, int64_t n_q, int64_t n_k)
{
    fa_context *ctx;
    assert_int_equal(fa_context_create(&ctx, "cpu", 0), FA_SUCCESS);
    const int64_t qs[4] = {pr->b, n_q, pr->h, pr->d}, ks[4] = {pr->b, n_k, pr->hk, pr->d};
    void *q = calloc((size_t)(pr->b * n_q * pr->h * pr->d), fa_dtype_size(pr->dt));
    void *k = calloc((size_t)(pr->b * n_k * pr->hk * pr->d), fa_dtype_size(pr->dt));
    void *o = calloc((size_t)(pr->b * n_q * pr->h * pr->d), fa_dtype_size(pr->dt));
    assert_true(q && k && o);
    fa_fwd_args f;
    memset(&f, 0, sizeof f);
    f.q = fa_tensor_contiguous(q, pr->dt, 4, qs);
    f.o = fa_tensor_contiguous(o, pr->dt, 4, qs);
    f.k = f.v = fa_tensor_contiguous(k, pr->dt, 4, ks);
    f.opts = fa_options_default();
    fa_plan_info info;
    if (fa_plan(ctx, &f, &info) != FA_SUCCESS)
        fail_msg("fa_plan: %s", fa_context_last_error(ctx));
    free(q), free(k), free(o);
    fa_context_destroy(ctx);
    return info.num_k_blocks;
}

/* Shards longer than the CPU backend's key tile (d 64: 128 keys a tile, forward and backward,
 * backends/cpu/backend.c), so every ring step walks several key tiles (3 for a contiguous shard
 * of 288 tokens, 2 for a zigzag half-shard of 144): the online softmax inside a step and the
 * merge across steps, forward and backward, causal and not, both layouts, fp32 and bf16. */
static void test_ring_several_key_tiles(void **state)
{
    (void)state;
    for (int layout = 0; layout < 2; ++layout)
        for (int causal = 0; causal < 2; ++causal)
            for (int t = 0; t < 2; ++t) {
                problem pr = cpu_case(2 + (layout && causal && t), (fa_ring_layout)layout, causal,
                                      t ? FA_DTYPE_BF16 : FA_DTYPE_F32, 0);
                pr.b = 1, pr.h = 2, pr.hk = 1, pr.d = 64, pr.n = 288;
                const int64_t chunk = layout == FA_RING_ZIGZAG ? pr.n / 2 : pr.n;
                assert_true(cpu_key_tiles(&pr, chunk, chunk) >= 2);
                run_case(pr);
            }
}

/* ---------------------------------------------------------------- on GPUs, over NCCL */

static int gpu_count = -1; /* CUDA devices, counted in a child process (the parent stays CUDA-free for fork) */

static int count_gpus(void)
{
    int fds[2];
    if (pipe(fds) != 0)
        return 0;
    const pid_t pid = fork();
    if (pid == 0) {
        int n = 0;
        if (fa_device_count("cuda", &n) != FA_SUCCESS)
            n = 0;
        unsigned char id[FA_RING_NCCL_ID_BYTES];
        if (fa_ring_nccl_unique_id(id) != FA_SUCCESS) /* built without NCCL, or no libnccl.so.2 */
            n = -1;
        if (write(fds[1], &n, sizeof n) != (ssize_t)sizeof n)
            _exit(1);
        _exit(0);
    }
    int n = 0;
    close(fds[1]);
    if (pid < 0 || read(fds[0], &n, sizeof n) != (ssize_t)sizeof n)
        n = 0;
    close(fds[0]);
    if (pid > 0)
        waitpid(pid, NULL, 0);
    return n;
}

/* every GPU a rank (at most 8): d 64 and 128, contiguous and zigzag, causal and not, bf16 and fp16 */
static void gpu_cases(enum transport tr)
{
    if (gpu_count == 0) {
        printf("  no CUDA device: the NCCL ring cases are not run\n");
        skip();
    }
    if (gpu_count < 0) {
        printf("  flashattn built without NCCL or libnccl.so.2 not loadable: the NCCL ring cases are not run\n");
        skip();
    }
    const int ranks = gpu_count < 8 ? gpu_count : 8;
    const int64_t dims[2] = {64, 128};
    for (int di = 0; di < 2; ++di)
        for (int layout = 0; layout < 2; ++layout)
            for (int causal = 0; causal < 2; ++causal)
                for (int t = 0; t < 2; ++t) {
                    if (tr == NCCL_PROCESSES && (di == 0 || t == 1))
                        continue; /* the process mode: d 128 bf16, both layouts and masks */
                    problem pr = cpu_case(ranks, (fa_ring_layout)layout, causal, t ? FA_DTYPE_F16 : FA_DTYPE_BF16, 0);
                    pr.tr = tr;
                    pr.b = 1, pr.h = 4, pr.hk = 2, pr.d = dims[di], pr.n = 256;
                    run_case(pr);
                }
    if (tr == NCCL_THREADS) { /* strided shards (16-byte aligned rows, and not) */
        for (int pad = 8; pad >= 3; pad -= 5) {
            problem pr = cpu_case(ranks, FA_RING_ZIGZAG, 1, FA_DTYPE_BF16, pad);
            pr.tr = tr;
            pr.b = 2, pr.h = 4, pr.hk = 2, pr.d = 128, pr.n = 128;
            run_case(pr);
        }
    }
}

/* processes first: the threads test initialises CUDA in this process, after which fork is unsafe */
static void test_ring_nccl_processes(void **state)
{
    (void)state;
    gpu_cases(NCCL_PROCESSES);
}

static void test_ring_nccl_threads(void **state)
{
    (void)state;
    gpu_cases(NCCL_THREADS);
}

/* a valid fp32 forward of one rank's shard: q, k, v from buf, o into out */
static fa_fwd_args small_args(float *buf, float *out, float *lse)
{
    fa_fwd_args f;
    memset(&f, 0, sizeof f);
    const problem pr = cpu_case(1, FA_RING_CONTIGUOUS, 0, FA_DTYPE_F32, 0);
    f.q = t4(&pr, buf, FA_DTYPE_F32, N, H, D);
    f.k = f.v = t4(&pr, buf, FA_DTYPE_F32, N, HK, D);
    f.o = t4(&pr, out, FA_DTYPE_F32, N, H, D);
    f.lse = t3(&pr, lse, N);
    f.opts = fa_options_default();
    return f;
}

/* bad input: no communication where the communicator itself is bad, a clear status otherwise */
static void test_ring_errors(void **state)
{
    (void)state;
    fa_context *ctx;
    assert_int_equal(fa_context_create(&ctx, "cpu", 0), FA_SUCCESS);
    static float buf[B * N * H * D], out[B * N * H * D], lse[B * H * N];
    fa_fwd_args f = small_args(buf, out, lse);
    fa_ring_comm none = {0, 1, NULL, NULL, NULL, NULL};
    assert_int_equal(fa_ring_forward(ctx, &none, FA_RING_CONTIGUOUS, &f), FA_ERR_INVALID_ARG);
    assert_int_equal(fa_ring_forward(ctx, NULL, FA_RING_CONTIGUOUS, &f), FA_ERR_INVALID_ARG);
    assert_int_equal(fa_ring_forward(NULL, NULL, FA_RING_CONTIGUOUS, &f), FA_ERR_INVALID_ARG);
    fa_ring_local *ring;
    assert_int_equal(fa_ring_local_create(&ring, 1), FA_SUCCESS);
    fa_ring_comm one = fa_ring_local_comm(ring, 0);
    fa_ring_comm bad_rank = fa_ring_local_comm(ring, 3);
    assert_null(bad_rank.start);
    assert_int_equal(fa_ring_forward(ctx, &bad_rank, FA_RING_CONTIGUOUS, &f), FA_ERR_INVALID_ARG);
    assert_int_equal(fa_ring_forward(ctx, &one, FA_RING_CONTIGUOUS, NULL), FA_ERR_INVALID_ARG);
    assert_int_equal(fa_ring_forward(ctx, &one, (fa_ring_layout)7, &f), FA_ERR_INVALID_ARG);
    f.opts.dropout_p = 0.1f;
    assert_int_equal(fa_ring_forward(ctx, &one, FA_RING_CONTIGUOUS, &f), FA_ERR_UNSUPPORTED);
    assert_true(strstr(fa_context_last_error(ctx), "ring") != NULL);
    f.opts.dropout_p = 0.0f;
    f.opts.window_left = 4;
    assert_int_equal(fa_ring_forward(ctx, &one, FA_RING_CONTIGUOUS, &f), FA_ERR_UNSUPPORTED);
    f.opts.window_left = -1;
    static const float slopes[H] = {0.5f, 0.25f, 0.125f, 0.0625f};
    f.opts.alibi_slopes = slopes; /* its distance needs global positions */
    assert_int_equal(fa_ring_forward(ctx, &one, FA_RING_CONTIGUOUS, &f), FA_ERR_UNSUPPORTED);
    assert_true(strstr(fa_context_last_error(ctx), "ALiBi") != NULL);
    f.opts.alibi_slopes = NULL;
    f.q.shape[1] = N - 1; /* odd shard under zigzag */
    f.o.shape[1] = N - 1;
    f.lse.shape[2] = N - 1;
    f.k.shape[1] = f.v.shape[1] = N - 1;
    assert_int_equal(fa_ring_forward(ctx, &one, FA_RING_ZIGZAG, &f), FA_ERR_INVALID_ARG);
    f.opts.causal = 1;
    f.k.shape[1] = f.v.shape[1] = N; /* causal with n_q != n_k */
    assert_int_equal(fa_ring_forward(ctx, &one, FA_RING_CONTIGUOUS, &f), FA_ERR_INVALID_ARG);
    assert_int_equal(fa_ring_local_create(NULL, 2), FA_ERR_INVALID_ARG);
    assert_int_equal(fa_ring_local_create(&ring, 0), FA_ERR_INVALID_ARG);
    fa_ring_local_destroy(NULL);
    fa_ring_local_destroy(ring);
    fa_context_destroy(ctx);
}

/* one rank's bad arguments stop every rank (no rank waits forever) */
typedef struct disagree_job {
    fa_ring_local *ring;
    int rank;
    fa_status st;
} disagree_job;

static void *disagree_rank(void *arg)
{
    disagree_job *j = arg;
    fa_context *ctx;
    if (fa_context_create(&ctx, "cpu", 0) != FA_SUCCESS)
        return NULL;
    float *buf = calloc(B * N * H * D, sizeof(float)), *out = calloc(B * N * H * D, sizeof(float)),
          *lse = calloc(B * H * N, sizeof(float));
    fa_fwd_args f = small_args(buf, out, lse);
    if (j->rank == 1)
        f.o.data = NULL; /* rejected on this rank only */
    const fa_ring_comm comm = fa_ring_local_comm(j->ring, j->rank);
    j->st = fa_ring_forward(ctx, &comm, FA_RING_CONTIGUOUS, &f);
    free(buf), free(out), free(lse);
    fa_context_destroy(ctx);
    return NULL;
}

static void test_ring_one_rank_rejects(void **state)
{
    (void)state;
    fa_ring_local *ring;
    assert_int_equal(fa_ring_local_create(&ring, 3), FA_SUCCESS);
    disagree_job jobs[3];
    pthread_t th[3];
    for (int r = 0; r < 3; ++r) {
        jobs[r] = (disagree_job){ring, r, FA_ERR_INTERNAL};
        assert_int_equal(pthread_create(&th[r], NULL, disagree_rank, &jobs[r]), 0);
    }
    for (int r = 0; r < 3; ++r)
        pthread_join(th[r], NULL);
    fa_ring_local_destroy(ring);
    for (int r = 0; r < 3; ++r)
        assert_int_equal(jobs[r].st, FA_ERR_INVALID_ARG);
}

int main(void)
{
    gpu_count = count_gpus();
    if (getenv("RING_TEST_FILTER")) /* e.g. "*threads" for one test under compute-sanitizer */
        cmocka_set_test_filter(getenv("RING_TEST_FILTER"));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_ring_nccl_processes, restart_inputs),
        cmocka_unit_test_setup(test_ring_nccl_threads, restart_inputs),
        cmocka_unit_test_setup(test_ring_errors, restart_inputs),
        cmocka_unit_test_setup(test_ring_one_rank_rejects, restart_inputs),
        cmocka_unit_test_setup(test_ring_one_rank, restart_inputs),
        cmocka_unit_test_setup(test_ring_several_key_tiles, restart_inputs),
        cmocka_unit_test_setup(test_ring_ranks, restart_inputs),
        cmocka_unit_test_setup(test_ring_sink, restart_inputs),
        cmocka_unit_test_setup(test_ring_head_dim_v, restart_inputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
