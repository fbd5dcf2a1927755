/* test_ring.c: ring attention simulated on the CPU, threads standing in for ranks
 * (fa_ring_local): 2, 3, 4 and 8 ranks, contiguous and zigzag shards, causal and not, GQA, fp32
 * and bf16, forward and backward. The shards' results, put back in sequence order, are held to
 * the float64 reference of the whole sequence with the conformance pass rule (factor 2 of the
 * naive same-precision error for O and LSE, 3 for the gradients), as single-device attention
 * is; the single-device result is printed beside them. Plus the ring's input checks. */
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 2, H = 4, HK = 2, D = 32, N = 12 }; /* N tokens per rank */

typedef struct problem {
    int ranks, causal;
    int pad; /* elements of padding after each head's row in the shards (strided views) */
    fa_ring_layout layout;
    fa_dtype dt;
    int64_t total; /* tokens of the whole sequence */
    void *q, *k, *v, *dout;                      /* global inputs [B, total, heads, D] */
    void *o, *dq, *dk, *dv;                      /* global outputs of the ring, in sequence order */
    float *lse;                                  /* [B, H, total] */
} problem;

/* the sequence row of row s of rank r's shard */
static int64_t global_row(const problem *pr, int r, int64_t s)
{
    if (pr->layout == FA_RING_CONTIGUOUS)
        return r * (int64_t)N + s;
    const int64_t c = N / 2;
    return s < c ? r * c + s : (2 * (int64_t)pr->ranks - 1 - r) * c + (s - c);
}

static fa_tensor t4(void *data, fa_dtype dt, int64_t n, int64_t heads)
{
    const int64_t shape[4] = {B, n, heads, D};
    return fa_tensor_contiguous(data, dt, 4, shape);
}

static fa_tensor t3(float *data, int64_t n)
{
    const int64_t shape[3] = {B, H, n};
    return fa_tensor_contiguous(data, FA_DTYPE_F32, 3, shape);
}

/* a shard [B, N, heads, D] whose head rows are D + pad elements apart */
static fa_tensor shard4(void *data, fa_dtype dt, int64_t heads, int64_t pad)
{
    fa_tensor t = t4(data, dt, N, heads);
    t.stride[2] = D + pad;
    t.stride[1] = heads * (D + pad);
    t.stride[0] = N * heads * (D + pad);
    return t;
}

/* copy rows between a global [B, total, heads, D] array and a shard (shard4 layout) */
static void move_rows(const problem *pr, int r, void *global, void *shard, int64_t heads, int to_shard)
{
    const size_t es = fa_dtype_size(pr->dt), row = (size_t)D * es;
    for (int64_t b = 0; b < B; ++b)
        for (int64_t s = 0; s < N; ++s)
            for (int64_t h = 0; h < heads; ++h) {
                char *g = (char *)global + (size_t)(((b * pr->total + global_row(pr, r, s)) * heads + h) * D) * es;
                char *l = (char *)shard + (size_t)(((b * N + s) * heads + h) * (D + pr->pad)) * es;
                memcpy(to_shard ? l : g, to_shard ? g : l, row);
            }
}

typedef struct rank_job {
    problem *pr;
    fa_ring_local *ring;
    int rank;
    fa_status fwd, bwd;
    int64_t gaps_written; /* padding bytes of the output shards that changed */
} rank_job;

/* bytes of the padding after each head row of a shard that differ from the poison 0xA5 */
static int64_t gaps_changed(const problem *pr, const void *shard, int64_t heads)
{
    const size_t es = fa_dtype_size(pr->dt);
    int64_t bad = 0;
    for (int64_t row = 0; row < B * N * heads; ++row)
        for (size_t i = (size_t)D * es; i < (size_t)(D + pr->pad) * es; ++i)
            bad += ((const unsigned char *)shard)[(size_t)row * (size_t)(D + pr->pad) * es + i] != 0xA5;
    return bad;
}

static void *run_rank(void *arg)
{
    rank_job *j = arg;
    problem *pr = j->pr;
    const size_t es = fa_dtype_size(pr->dt);
    const size_t qb = (size_t)(B * N * H * (D + pr->pad)) * es, kb = (size_t)(B * N * HK * (D + pr->pad)) * es;
    void *q = malloc(qb), *k = malloc(kb), *v = malloc(kb), *dout = malloc(qb), *o = malloc(qb), *dq = malloc(qb),
         *dk = malloc(kb), *dv = malloc(kb);
    float *lse = malloc(sizeof(float) * B * H * N);
    fa_context *ctx = NULL;
    j->fwd = j->bwd = FA_ERR_INTERNAL;
    if (q && k && v && dout && o && dq && dk && dv && lse && fa_context_create(&ctx, "cpu", 0) == FA_SUCCESS) {
        fa_context_set_num_threads(ctx, 1);
        move_rows(pr, j->rank, pr->q, q, H, 1);
        move_rows(pr, j->rank, pr->k, k, HK, 1);
        move_rows(pr, j->rank, pr->v, v, HK, 1);
        move_rows(pr, j->rank, pr->dout, dout, H, 1);
        memset(o, 0xA5, qb), memset(dq, 0xA5, qb), memset(dk, 0xA5, kb), memset(dv, 0xA5, kb);
        const fa_ring_comm comm = fa_ring_local_comm(j->ring, j->rank);
        fa_fwd_args f;
        memset(&f, 0, sizeof f);
        f.q = shard4(q, pr->dt, H, pr->pad);
        f.k = shard4(k, pr->dt, HK, pr->pad);
        f.v = shard4(v, pr->dt, HK, pr->pad);
        f.o = shard4(o, pr->dt, H, pr->pad);
        f.lse = t3(lse, N);
        f.opts = fa_options_default();
        f.opts.causal = pr->causal;
        j->fwd = fa_ring_forward(ctx, &comm, pr->layout, &f);
        fa_bwd_args g;
        memset(&g, 0, sizeof g);
        g.q = f.q;
        g.k = f.k;
        g.v = f.v;
        g.o = f.o;
        g.lse = f.lse;
        g.dout = shard4(dout, pr->dt, H, pr->pad);
        g.dq = shard4(dq, pr->dt, H, pr->pad);
        g.dk = shard4(dk, pr->dt, HK, pr->pad);
        g.dv = shard4(dv, pr->dt, HK, pr->pad);
        g.opts = f.opts;
        j->bwd = fa_ring_backward(ctx, &comm, pr->layout, &g);
        j->gaps_written = gaps_changed(pr, o, H) + gaps_changed(pr, dq, H) + gaps_changed(pr, dk, HK) +
                          gaps_changed(pr, dv, HK);
        move_rows(pr, j->rank, pr->o, o, H, 0);
        move_rows(pr, j->rank, pr->dq, dq, H, 0);
        move_rows(pr, j->rank, pr->dk, dk, HK, 0);
        move_rows(pr, j->rank, pr->dv, dv, HK, 0);
        for (int64_t b = 0; b < B; ++b)
            for (int64_t h = 0; h < H; ++h)
                for (int64_t s = 0; s < N; ++s)
                    pr->lse[(b * H + h) * pr->total + global_row(pr, j->rank, s)] = lse[(b * H + h) * N + s];
    }
    fa_context_destroy(ctx);
    free(q), free(k), free(v), free(dout), free(o), free(dq), free(dk), free(dv), free(lse);
    return NULL;
}

static uint64_t rng_state = 1; /* the inputs of every case in turn (testrand.h) */

static void *random_array(fa_dtype dt, int64_t count)
{
    void *a = malloc((size_t)count * fa_dtype_size(dt));
    for (int64_t i = 0; i < count; ++i) {
        const float x = (float)rng_normal(&rng_state);
        if (dt == FA_DTYPE_BF16)
            ((uint16_t *)a)[i] = fa_f32_to_bf16(x);
        else
            ((float *)a)[i] = x;
    }
    return a;
}

static double value(fa_dtype dt, const void *a, int64_t i)
{
    return dt == FA_DTYPE_BF16 ? fa_bf16_to_f32(((const uint16_t *)a)[i]) : ((const float *)a)[i];
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

static void run_case(int ranks, fa_ring_layout layout, int causal, fa_dtype dt, int pad)
{
    problem pr;
    memset(&pr, 0, sizeof pr);
    pr.ranks = ranks;
    pr.causal = causal;
    pr.layout = layout;
    pr.dt = dt;
    pr.total = (int64_t)ranks * N;
    pr.pad = pad;
    const int64_t nq = B * pr.total * H * D, nk = B * pr.total * HK * D, nl = B * H * pr.total;
    const size_t es = fa_dtype_size(dt);
    pr.q = random_array(dt, nq);
    pr.k = random_array(dt, nk);
    pr.v = random_array(dt, nk);
    pr.dout = random_array(dt, nq);
    pr.o = calloc((size_t)nq, es);
    pr.dq = calloc((size_t)nq, es);
    pr.dk = calloc((size_t)nk, es);
    pr.dv = calloc((size_t)nk, es);
    pr.lse = calloc((size_t)nl, sizeof(float));

    /* the ranks */
    fa_ring_local *ring;
    assert_int_equal(fa_ring_local_create(&ring, ranks), FA_SUCCESS);
    rank_job jobs[8];
    pthread_t th[8];
    for (int r = 0; r < ranks; ++r) {
        jobs[r] = (rank_job){&pr, ring, r, FA_ERR_INTERNAL, FA_ERR_INTERNAL, -1};
        assert_int_equal(pthread_create(&th[r], NULL, run_rank, &jobs[r]), 0);
    }
    for (int r = 0; r < ranks; ++r)
        pthread_join(th[r], NULL);
    fa_ring_local_destroy(ring);
    for (int r = 0; r < ranks; ++r) {
        assert_int_equal(jobs[r].fwd, FA_SUCCESS);
        assert_int_equal(jobs[r].bwd, FA_SUCCESS);
        assert_int_equal(jobs[r].gaps_written, 0);
    }

    /* the whole sequence on one device, and the float64 reference / naive yardstick of it */
    fa_context *ctx;
    assert_int_equal(fa_context_create(&ctx, "cpu", 0), FA_SUCCESS);
    void *o1 = calloc((size_t)nq, es), *dq1 = calloc((size_t)nq, es), *dk1 = calloc((size_t)nk, es),
         *dv1 = calloc((size_t)nk, es);
    float *lse1 = calloc((size_t)nl, sizeof(float));
    fa_bwd_args g;
    memset(&g, 0, sizeof g);
    g.q = t4(pr.q, dt, pr.total, H);
    g.k = t4(pr.k, dt, pr.total, HK);
    g.v = t4(pr.v, dt, pr.total, HK);
    g.o = t4(o1, dt, pr.total, H);
    g.lse = t3(lse1, pr.total);
    g.dout = t4(pr.dout, dt, pr.total, H);
    g.dq = t4(dq1, dt, pr.total, H);
    g.dk = t4(dk1, dt, pr.total, HK);
    g.dv = t4(dv1, dt, pr.total, HK);
    g.opts = fa_options_default();
    g.opts.causal = causal;
    fa_fwd_args f = {g.q, g.k, g.v, g.o, g.lse, NULL, g.opts};
    assert_int_equal(fa_forward(ctx, &f), FA_SUCCESS);
    assert_int_equal(fa_backward(ctx, &g), FA_SUCCESS);
    fa_problem p;
    int32_t *cu = NULL;
    assert_int_equal(fa_validate_backward(ctx, &g, &p, &cu), FA_SUCCESS);
    double *ro = malloc(sizeof(double) * nq), *rl = malloc(sizeof(double) * nl), *no = malloc(sizeof(double) * nq),
           *nl_ = malloc(sizeof(double) * nl);
    double *rg[3] = {malloc(sizeof(double) * nq), malloc(sizeof(double) * nk), malloc(sizeof(double) * nk)};
    double *ng[3] = {malloc(sizeof(double) * nq), malloc(sizeof(double) * nk), malloc(sizeof(double) * nk)};
    assert_int_equal(fa_ref_forward(&p, ro, rl), FA_SUCCESS);
    assert_int_equal(fa_naive_forward(&p, no, nl_), FA_SUCCESS);
    assert_int_equal(fa_ref_backward(&p, rg[0], rg[1], rg[2]), FA_SUCCESS);
    assert_int_equal(fa_naive_backward(&p, ng[0], ng[1], ng[2]), FA_SUCCESS);

    /* LSE: the reference is [H, total] per batch-major row; ours [B, H, total] */
    double lse_err = 0.0, lse_err1 = 0.0, lmax = 0.0;
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
            for (int64_t s = 0; s < pr.total; ++s) {
                const double r = rl[h * B * pr.total + b * pr.total + s];
                const double x = pr.lse[(b * H + h) * pr.total + s], x1 = lse1[(b * H + h) * pr.total + s];
                lse_err = fmax(lse_err, fabs(x - r));
                lse_err1 = fmax(lse_err1, fabs(x1 - r));
                lmax = fmax(lmax, fabs(r));
            }
    double nlse_err = 0.0;
    for (int64_t i = 0; i < nl; ++i)
        nlse_err = fmax(nlse_err, fabs(nl_[i] - rl[i]));
    double omax, omax1;
    const double oerr = max_err(pr.o, dt, ro, nq, &omax), oerr1 = max_err(o1, dt, ro, nq, &omax1);
    const double obound = bound_of(2.0, max_err64(no, ro, nq), omax);
    printf("  %d ranks %s %s %s%s: O %.2e (one device %.2e, bound %.2e)  LSE %.2e (%.2e, bound %.2e)\n", ranks,
           layout == FA_RING_ZIGZAG ? "zigzag" : "contiguous", causal ? "causal" : "full", fa_dtype_name(dt), pad ? " strided" : "", oerr,
           oerr1, obound, lse_err, lse_err1, bound_of(2.0, nlse_err, lmax));
    assert_true(oerr <= obound);
    assert_true(lse_err <= bound_of(2.0, nlse_err, lmax));
    const void *ours[3] = {pr.dq, pr.dk, pr.dv}, *one[3] = {dq1, dk1, dv1};
    const int64_t cnt[3] = {nq, nk, nk};
    for (int i = 0; i < 3; ++i) {
        double m, m1;
        const double e = max_err(ours[i], dt, rg[i], cnt[i], &m), e1 = max_err(one[i], dt, rg[i], cnt[i], &m1);
        const double bound = bound_of(3.0, max_err64(ng[i], rg[i], cnt[i]), m);
        printf("    d%c %.2e (one device %.2e, bound %.2e)\n", "QKV"[i], e, e1, bound);
        assert_true(e <= bound);
    }
    for (int i = 0; i < 3; ++i)
        free(rg[i]), free(ng[i]);
    free(ro), free(rl), free(no), free(nl_), free(cu);
    free(o1), free(dq1), free(dk1), free(dv1), free(lse1);
    fa_context_destroy(ctx);
    free(pr.q), free(pr.k), free(pr.v), free(pr.dout), free(pr.o), free(pr.dq), free(pr.dk), free(pr.dv), free(pr.lse);
}

static void test_ring_ranks(void **state)
{
    (void)state;
    const int ranks[] = {2, 3, 4, 8};
    for (size_t i = 0; i < sizeof ranks / sizeof ranks[0]; ++i)
        for (int layout = 0; layout < 2; ++layout)
            for (int causal = 0; causal < 2; ++causal) {
                run_case(ranks[i], (fa_ring_layout)layout, causal, FA_DTYPE_F32, 0);
                run_case(ranks[i], (fa_ring_layout)layout, causal, FA_DTYPE_BF16, 0);
            }
    for (size_t i = 0; i < sizeof ranks / sizeof ranks[0]; ++i) /* strided shards */
        run_case(ranks[i], FA_RING_ZIGZAG, 1, FA_DTYPE_BF16, 3);
}

static void test_ring_one_rank(void **state)
{
    (void)state;
    run_case(1, FA_RING_ZIGZAG, 1, FA_DTYPE_BF16, 0);
}

/* a valid fp32 forward of one rank's shard: q, k, v from buf, o into out */
static fa_fwd_args small_args(float *buf, float *out, float *lse)
{
    fa_fwd_args f;
    memset(&f, 0, sizeof f);
    f.q = t4(buf, FA_DTYPE_F32, N, H);
    f.k = f.v = t4(buf, FA_DTYPE_F32, N, HK);
    f.o = t4(out, FA_DTYPE_F32, N, H);
    f.lse = t3(lse, N);
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
    fa_ring_comm none = {0, 1, NULL, NULL};
    assert_int_equal(fa_ring_forward(ctx, &none, FA_RING_CONTIGUOUS, &f), FA_ERR_INVALID_ARG);
    assert_int_equal(fa_ring_forward(ctx, NULL, FA_RING_CONTIGUOUS, &f), FA_ERR_INVALID_ARG);
    assert_int_equal(fa_ring_forward(NULL, NULL, FA_RING_CONTIGUOUS, &f), FA_ERR_INVALID_ARG);
    fa_ring_local *ring;
    assert_int_equal(fa_ring_local_create(&ring, 1), FA_SUCCESS);
    fa_ring_comm one = fa_ring_local_comm(ring, 0);
    fa_ring_comm bad_rank = fa_ring_local_comm(ring, 3);
    assert_null(bad_rank.sendrecv);
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
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring_errors),
        cmocka_unit_test(test_ring_one_rank_rejects),
        cmocka_unit_test(test_ring_one_rank),
        cmocka_unit_test(test_ring_ranks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
