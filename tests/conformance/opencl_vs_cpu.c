/* opencl_vs_cpu.c: the OpenCL backend against the CPU backend on the same inputs, options and
 * seed (through the public API only): forward and backward outputs agree to the storage dtype's
 * rounding, the dropout masks are the same elements (read off exactly, see test_dropout_mask),
 * the ALiBi slopes are read from an offset inside their buffer and refused outside one, a call
 * without a score modifier runs the program compiled without them, the backward is bitwise
 * reproducible, and the program-binary cache is written where docs/backends/opencl.md says.
 * Exits 77 (SKIP) when the OpenCL backend is not compiled in or has no device. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "flashattn.h"

static char cache_root[256];

/* ------------------------------------------------------------------ data */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static float rnd(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void put(fa_dtype dt, void *buf, size_t i, float x)
{
    if (dt == FA_DTYPE_F32)
        ((float *)buf)[i] = x;
    else
        ((uint16_t *)buf)[i] = dt == FA_DTYPE_F16 ? fa_f32_to_f16(x) : fa_f32_to_bf16(x);
}

static float get(fa_dtype dt, const void *buf, size_t i)
{
    if (dt == FA_DTYPE_F32)
        return ((const float *)buf)[i];
    uint16_t h = ((const uint16_t *)buf)[i];
    return dt == FA_DTYPE_F16 ? fa_f16_to_f32(h) : fa_bf16_to_f32(h);
}

/* One problem's host tensors; every run uploads them to its own context. */
typedef struct problem {
    fa_dtype dt;
    int64_t batch, sq, sk, hq, hkv, d;
    fa_options opts;
    void *q, *k, *v, *dout;
    /* ALiBi: when slopes is set, run() copies its n_slopes floats to element slopes_at of a
     * device buffer and points opts.alibi_slopes there */
    const float *slopes;
    int64_t n_slopes, slopes_at;
} problem;

enum { T_Q, T_K, T_V, T_O, T_LSE, T_DO, T_DQ, T_DK, T_DV, T_N };

typedef struct outputs {
    void *host[T_N];
    size_t bytes[T_N];
} outputs;

static size_t elems_q(const problem *p) { return (size_t)(p->batch * p->sq * p->hq * p->d); }
static size_t elems_k(const problem *p) { return (size_t)(p->batch * p->sk * p->hkv * p->d); }

/* Forward then backward on the named backend; host copies of every output in *out. */
static void run(const char *backend, const problem *p, outputs *out)
{
    fa_context *ctx;
    assert_int_equal(fa_context_create(&ctx, backend, 0), FA_SUCCESS);
    size_t es = fa_dtype_size(p->dt);
    size_t n[T_N] = {elems_q(p), elems_k(p), elems_k(p), elems_q(p), (size_t)(p->batch * p->hq * p->sq),
                     elems_q(p), elems_q(p), elems_k(p), elems_k(p)};
    void *dev[T_N];
    const void *in[T_N] = {p->q, p->k, p->v, NULL, NULL, p->dout, NULL, NULL, NULL};
    for (int t = 0; t < T_N; ++t) {
        out->bytes[t] = n[t] * (t == T_LSE ? sizeof(float) : es);
        out->host[t] = calloc(1, out->bytes[t]);
        assert_non_null(out->host[t]);
        assert_int_equal(fa_malloc(ctx, out->bytes[t], &dev[t]), FA_SUCCESS);
        if (in[t])
            assert_int_equal(fa_memcpy(ctx, dev[t], in[t], out->bytes[t], FA_COPY_HOST_TO_DEVICE), FA_SUCCESS);
    }
    int64_t qs[4] = {p->batch, p->sq, p->hq, p->d}, ks[4] = {p->batch, p->sk, p->hkv, p->d};
    int64_t ls[3] = {p->batch, p->hq, p->sq};
    fa_options opts = p->opts;
    void *slopes = NULL;
    if (p->slopes) {
        size_t bytes = sizeof(float) * (size_t)(p->slopes_at + p->n_slopes);
        assert_int_equal(fa_malloc(ctx, bytes, &slopes), FA_SUCCESS);
        float *dst = (float *)slopes + p->slopes_at;
        assert_int_equal(fa_memcpy(ctx, dst, p->slopes, sizeof(float) * (size_t)p->n_slopes, FA_COPY_HOST_TO_DEVICE),
                         FA_SUCCESS);
        opts.alibi_slopes = dst;
    }
    fa_fwd_args f = {
        .q = fa_tensor_contiguous(dev[T_Q], p->dt, 4, qs),
        .k = fa_tensor_contiguous(dev[T_K], p->dt, 4, ks),
        .v = fa_tensor_contiguous(dev[T_V], p->dt, 4, ks),
        .o = fa_tensor_contiguous(dev[T_O], p->dt, 4, qs),
        .lse = fa_tensor_contiguous(dev[T_LSE], FA_DTYPE_F32, 3, ls),
        .opts = opts,
    };
    fa_status st = fa_forward(ctx, &f);
    if (st != FA_SUCCESS)
        fail_msg("%s forward: %s", backend, fa_context_last_error(ctx));
    fa_bwd_args g = {
        .q = f.q, .k = f.k, .v = f.v, .o = f.o, .lse = f.lse,
        .dout = fa_tensor_contiguous(dev[T_DO], p->dt, 4, qs),
        .dq = fa_tensor_contiguous(dev[T_DQ], p->dt, 4, qs),
        .dk = fa_tensor_contiguous(dev[T_DK], p->dt, 4, ks),
        .dv = fa_tensor_contiguous(dev[T_DV], p->dt, 4, ks),
        .opts = opts,
    };
    st = fa_backward(ctx, &g);
    if (st != FA_SUCCESS)
        fail_msg("%s backward: %s", backend, fa_context_last_error(ctx));
    for (int t = 0; t < T_N; ++t) {
        if (!in[t])
            assert_int_equal(fa_memcpy(ctx, out->host[t], dev[t], out->bytes[t], FA_COPY_DEVICE_TO_HOST), FA_SUCCESS);
        assert_int_equal(fa_free(ctx, dev[t]), FA_SUCCESS);
    }
    if (slopes)
        assert_int_equal(fa_free(ctx, slopes), FA_SUCCESS);
    fa_context_destroy(ctx);
}

static void release(outputs *o)
{
    for (int t = 0; t < T_N; ++t)
        free(o->host[t]);
}

static void make_problem(problem *p, fa_dtype dt, int64_t sq, int64_t sk, int64_t hq, int64_t hkv, int64_t d)
{
    memset(p, 0, sizeof *p);
    p->dt = dt;
    p->batch = 2;
    p->sq = sq;
    p->sk = sk;
    p->hq = hq;
    p->hkv = hkv;
    p->d = d;
    p->opts = fa_options_default();
    size_t es = fa_dtype_size(dt);
    p->q = malloc(elems_q(p) * es);
    p->k = malloc(elems_k(p) * es);
    p->v = malloc(elems_k(p) * es);
    p->dout = malloc(elems_q(p) * es);
    assert_true(p->q && p->k && p->v && p->dout);
    for (size_t i = 0; i < elems_q(p); ++i) {
        put(dt, p->q, i, rnd());
        put(dt, p->dout, i, rnd());
    }
    for (size_t i = 0; i < elems_k(p); ++i) {
        put(dt, p->k, i, rnd());
        put(dt, p->v, i, rnd());
    }
}

static void free_problem(problem *p)
{
    free(p->q);
    free(p->k);
    free(p->v);
    free(p->dout);
}

/* max |a - b| over a tensor, relative to max |b| (at least 1) */
static double rel_diff(fa_dtype dt, const void *a, const void *b, size_t n)
{
    double diff = 0.0, scale = 1.0;
    for (size_t i = 0; i < n; ++i) {
        double x = get(dt, a, i), y = get(dt, b, i);
        if (isinf(x) || isinf(y)) {
            if (x != y)
                return INFINITY;
            continue;
        }
        diff = fmax(diff, fabs(x - y));
        scale = fmax(scale, fabs(y));
    }
    return diff / scale;
}

/* ------------------------------------------------------------------ tests */

/* Both backends compute in fp32 and round once into the storage dtype: they may differ by the
 * summation order (a few fp32 ulps, more in the gradients' long sums) and then by one rounding
 * step of the storage type. A wrong mask or dropout element would differ by O(1). */
static double tolerance(fa_dtype dt)
{
    return dt == FA_DTYPE_F32 ? 2e-5 : dt == FA_DTYPE_F16 ? 1e-3 : 8e-3;
}

static void agree(const problem *p)
{
    outputs c, o;
    run("cpu", p, &c);
    run("opencl", p, &o);
    static const char *const names[T_N] = {"q", "k", "v", "O", "LSE", "dO", "dQ", "dK", "dV"};
    for (int t = T_O; t < T_N; ++t) {
        if (t == T_DO)
            continue;
        fa_dtype dt = t == T_LSE ? FA_DTYPE_F32 : p->dt;
        double r = rel_diff(dt, o.host[t], c.host[t], o.bytes[t] / (t == T_LSE ? 4 : fa_dtype_size(p->dt)));
        print_message("    %s %s: max relative difference opencl vs cpu %.3g\n", fa_dtype_name(p->dt), names[t], r);
        if (!(r <= tolerance(p->dt) * (t >= T_DQ ? 4 : 1)))
            fail_msg("%s differs: %.3g", names[t], r);
    }
    release(&c);
    release(&o);
}

static void test_agree_causal_gqa_dropout(void **state)
{
    (void)state;
    static const fa_dtype dts[3] = {FA_DTYPE_F32, FA_DTYPE_F16, FA_DTYPE_BF16};
    for (int i = 0; i < 3; ++i) {
        problem p;
        make_problem(&p, dts[i], 77, 130, 4, 2, 64);
        p.opts.causal = 1;
        p.opts.dropout_p = 0.2f;
        p.opts.dropout_seed = 42 + (uint64_t)i;
        p.opts.dropout_offset = 7;
        agree(&p);
        free_problem(&p);
    }
}

static void test_agree_window_blocksparse(void **state)
{
    (void)state;
    problem p;
    make_problem(&p, FA_DTYPE_F32, 150, 150, 2, 2, 40);
    fa_block_mask bm;
    assert_int_equal(fa_block_mask_create(&bm, FA_BLOCK_RANDOM, 1, 150, 150, 32, 48, 0, 0.5, 3), FA_SUCCESS);
    p.opts.block_mask = &bm;
    p.opts.window_left = 40;
    p.opts.window_right = 10;
    agree(&p);
    fa_block_mask_destroy(&bm);
    free_problem(&p);
}

/* Softcap and ALiBi (one slope row per sequence, the slopes at an offset inside their buffer, so
 * the kernels must add the element offset), causal and GQA: the CPU backend's results, in every
 * dtype. */
static void test_agree_softcap_alibi(void **state)
{
    (void)state;
    static const fa_dtype dts[3] = {FA_DTYPE_F32, FA_DTYPE_F16, FA_DTYPE_BF16};
    static const float slopes[2 * 5] = {0.5f, 0.25f, 0.125f, 0.0625f, -1.0f, 0.3f, 0.2f, 0.1f, 0.05f, -1.0f};
    for (int i = 0; i < 3; ++i) {
        problem p;
        make_problem(&p, dts[i], 70, 101, 4, 2, 64);
        p.opts.causal = i != 1;
        p.opts.softcap = 1.5f;
        p.opts.softmax_scale = 1.0f; /* scores of a few units: the cap bends them */
        p.opts.alibi_batch_stride = 5;
        p.slopes = slopes;
        p.n_slopes = 10;
        p.slopes_at = 3;
        agree(&p);
        free_problem(&p);
    }
}

/* Slopes the OpenCL context cannot bind: a host pointer (no fa_malloc buffer holds it) and a range
 * running past the end of its buffer. Both FA_ERR_INVALID_ARG naming alibi_slopes, O untouched. */
static void test_alibi_slopes_outside_buffer(void **state)
{
    (void)state;
    fa_context *ctx;
    assert_int_equal(fa_context_create(&ctx, "opencl", 0), FA_SUCCESS);
    enum { B = 2, S = 16, H = 2, D = 32 };
    int64_t shape[4] = {B, S, H, D};
    const size_t bytes = sizeof(float) * B * S * H * D;
    float *host = malloc(bytes), *o_back = malloc(bytes);
    assert_true(host && o_back);
    for (size_t i = 0; i < bytes / sizeof(float); ++i)
        host[i] = rnd();
    void *q, *o, *slopes;
    assert_int_equal(fa_malloc(ctx, bytes, &q), FA_SUCCESS);
    assert_int_equal(fa_malloc(ctx, bytes, &o), FA_SUCCESS);
    assert_int_equal(fa_malloc(ctx, sizeof(float) * H, &slopes), FA_SUCCESS);
    assert_int_equal(fa_memcpy(ctx, q, host, bytes, FA_COPY_HOST_TO_DEVICE), FA_SUCCESS);
    assert_int_equal(fa_memcpy(ctx, o, host, bytes, FA_COPY_HOST_TO_DEVICE), FA_SUCCESS); /* sentinel */
    assert_int_equal(fa_memcpy(ctx, slopes, (float[H]){0.5f, 0.25f}, sizeof(float) * H, FA_COPY_HOST_TO_DEVICE),
                     FA_SUCCESS);
    fa_fwd_args f = {
        .q = fa_tensor_contiguous(q, FA_DTYPE_F32, 4, shape),
        .k = fa_tensor_contiguous(q, FA_DTYPE_F32, 4, shape),
        .v = fa_tensor_contiguous(q, FA_DTYPE_F32, 4, shape),
        .o = fa_tensor_contiguous(o, FA_DTYPE_F32, 4, shape),
        .opts = fa_options_default(),
    };
    static const float host_slopes[H] = {0.5f, 0.25f};
    f.opts.alibi_slopes = host_slopes;
    assert_int_equal(fa_forward(ctx, &f), FA_ERR_INVALID_ARG);
    print_message("    host slopes: %s\n", fa_context_last_error(ctx));
    assert_non_null(strstr(fa_context_last_error(ctx), "alibi_slopes"));
    f.opts.alibi_slopes = slopes;
    f.opts.alibi_batch_stride = H; /* sequence 1's row lies past the 2-float buffer */
    assert_int_equal(fa_forward(ctx, &f), FA_ERR_INVALID_ARG);
    print_message("    slopes past the buffer: %s\n", fa_context_last_error(ctx));
    assert_non_null(strstr(fa_context_last_error(ctx), "alibi_slopes"));
    assert_int_equal(fa_memcpy(ctx, o_back, o, bytes, FA_COPY_DEVICE_TO_HOST), FA_SUCCESS);
    assert_memory_equal(o_back, host, bytes);
    f.opts.alibi_batch_stride = 0; /* the same slopes for both sequences fit: the call runs */
    assert_int_equal(fa_forward(ctx, &f), FA_SUCCESS);
    free(host);
    free(o_back);
    fa_context_destroy(ctx);
}

/* A call without a score modifier runs the program compiled without them (the chooser's variant
 * names the modifier program "-scoremod"), so the plain kernels stay as they were. */
static void test_plain_call_plain_program(void **state)
{
    (void)state;
    fa_context *ctx;
    assert_int_equal(fa_context_create(&ctx, "opencl", 0), FA_SUCCESS);
    int64_t shape[4] = {1, 64, 2, 64};
    void *in, *out, *slopes;
    assert_int_equal(fa_malloc(ctx, sizeof(float) * 2 * 64 * 64, &in), FA_SUCCESS);
    assert_int_equal(fa_malloc(ctx, sizeof(float) * 2 * 64 * 64, &out), FA_SUCCESS);
    assert_int_equal(fa_malloc(ctx, sizeof(float) * 2, &slopes), FA_SUCCESS);
    fa_fwd_args f = {
        .q = fa_tensor_contiguous(in, FA_DTYPE_F32, 4, shape),
        .k = fa_tensor_contiguous(in, FA_DTYPE_F32, 4, shape),
        .v = fa_tensor_contiguous(in, FA_DTYPE_F32, 4, shape),
        .o = fa_tensor_contiguous(out, FA_DTYPE_F32, 4, shape),
        .opts = fa_options_default(),
    };
    char plain[64], capped[64], alibi[64];
    for (int backward = 0; backward < 2; ++backward) {
        f.opts.softcap = 0.0f;
        f.opts.alibi_slopes = NULL;
        assert_int_equal(fa_query_support(ctx, &f, backward, plain, sizeof plain), FA_SUCCESS);
        f.opts.softcap = 30.0f;
        assert_int_equal(fa_query_support(ctx, &f, backward, capped, sizeof capped), FA_SUCCESS);
        f.opts.softcap = 0.0f;
        f.opts.alibi_slopes = slopes;
        assert_int_equal(fa_query_support(ctx, &f, backward, alibi, sizeof alibi), FA_SUCCESS);
        print_message("    %s / %s / %s\n", plain, capped, alibi);
        assert_null(strstr(plain, "scoremod"));
        assert_non_null(strstr(capped, "-scoremod"));
        assert_non_null(strstr(alibi, "-scoremod"));
    }
    fa_context_destroy(ctx);
}

/* With Q = 0 every visible score is 0, so P = 1/seqlen_k on each row; with V the identity
 * (d = seqlen_k, V[j] = e_j) the output is O[i][j] = P_ij * Z_ij: exactly 0 where dropout drops
 * (i, j) and 1/((1 - p) seqlen_k) where it keeps it. The two backends' zero sets must be equal. */
static void test_dropout_mask(void **state)
{
    (void)state;
    problem p;
    make_problem(&p, FA_DTYPE_F32, 45, 64, 3, 3, 64);
    memset(p.q, 0, elems_q(&p) * sizeof(float));
    memset(p.v, 0, elems_k(&p) * sizeof(float));
    for (int64_t b = 0; b < p.batch; ++b)
        for (int64_t j = 0; j < p.sk; ++j)
            for (int64_t h = 0; h < p.hkv; ++h)
                ((float *)p.v)[((b * p.sk + j) * p.hkv + h) * p.d + j] = 1.0f;
    p.opts.dropout_p = 0.5f;
    p.opts.dropout_seed = 0x123456789abcdefull;
    p.opts.dropout_offset = 1000;
    outputs c, o;
    run("cpu", &p, &c);
    run("opencl", &p, &o);
    size_t n = elems_q(&p), dropped = 0, mismatched = 0;
    for (size_t i = 0; i < n; ++i) {
        float x = ((float *)c.host[T_O])[i], y = ((float *)o.host[T_O])[i];
        dropped += x == 0.0f;
        mismatched += (x == 0.0f) != (y == 0.0f);
    }
    print_message("    %zu of %zu elements dropped by the CPU backend, %zu differ on OpenCL\n", dropped, n, mismatched);
    assert_int_equal(mismatched, 0);
    assert_true(dropped > n / 4 && dropped < 3 * n / 4);
    release(&c);
    release(&o);
    free_problem(&p);
}

/* The contents of path in a malloc'd buffer, its length in *len */
static unsigned char *file_bytes(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    assert_true(n > 0);
    assert_int_equal(fseek(f, 0, SEEK_SET), 0);
    unsigned char *b = malloc((size_t)n);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

/* With damage != 0: the last byte of each .bin in dir flipped, the damaged contents kept in
 * saved. With damage == 0: checks that each file differs from its damaged copy in saved (the
 * entry was compiled anew and rewritten), and frees the copies. Returns the number of .bin files. */
#define MAX_BINS 64
typedef struct saved_bin {
    char path[300];
    unsigned char *bytes;
    size_t len;
} saved_bin;

static int damage_or_check_bins(const char *dir, int damage, saved_bin saved[MAX_BINS])
{
    int bins = 0;
    if (damage) {
        DIR *d = opendir(dir);
        assert_non_null(d);
        for (struct dirent *e; (e = readdir(d));)
            if (strstr(e->d_name, ".bin") && bins < MAX_BINS)
                snprintf(saved[bins++].path, sizeof saved[0].path, "%s/%.200s", dir, e->d_name);
        closedir(d);
    } else {
        while (bins < MAX_BINS && saved[bins].bytes)
            ++bins;
    }
    for (int i = 0; i < bins; ++i) {
        size_t len;
        unsigned char *b = file_bytes(saved[i].path, &len);
        if (damage) {
            b[len - 1] ^= 0x40;
            FILE *f = fopen(saved[i].path, "wb");
            assert_non_null(f);
            assert_int_equal(fwrite(b, 1, len, f), len);
            assert_int_equal(fclose(f), 0);
            saved[i].bytes = b;
            saved[i].len = len;
        } else {
            assert_true(len != saved[i].len || memcmp(b, saved[i].bytes, len) != 0);
            free(b);
            free(saved[i].bytes);
            saved[i].bytes = NULL;
        }
    }
    return bins;
}

static void test_backward_reproducible_and_cached(void **state)
{
    (void)state;
    problem p;
    make_problem(&p, FA_DTYPE_BF16, 100, 90, 4, 1, 96);
    p.opts.causal = 1;
    p.opts.dropout_p = 0.1f;
    /* the earlier tests' entries removed, so the directory holds this test's programs alone */
    char dir[300];
    snprintf(dir, sizeof dir, "%s/opencl", cache_root);
    DIR *d = opendir(dir);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d));)
        if (strstr(e->d_name, ".bin")) {
            char path[600];
            snprintf(path, sizeof path, "%s/%.200s", dir, e->d_name);
            assert_int_equal(remove(path), 0);
        }
    closedir(d);
    outputs a, b;
    run("opencl", &p, &a);
    run("opencl", &p, &b);
    for (int t = T_O; t < T_N; ++t)
        if (t != T_DO)
            assert_memory_equal(a.host[t], b.host[t], a.bytes[t]);
    release(&b);
    /* the programs just built are in the disk cache */
    saved_bin saved[MAX_BINS] = {{"", NULL, 0}};
    int bins = damage_or_check_bins(dir, 1, saved);
    print_message("    %d program binaries in %s, each damaged in its last byte\n", bins, dir);
    assert_true(bins >= 1 && bins < MAX_BINS);
    /* a damaged entry is never loaded: the programs are compiled again, give the same answers,
     * and replace the entries */
    run("opencl", &p, &b);
    for (int t = T_O; t < T_N; ++t)
        if (t != T_DO)
            assert_memory_equal(a.host[t], b.host[t], a.bytes[t]);
    assert_int_equal(damage_or_check_bins(dir, 0, saved), bins);
    release(&a);
    release(&b);
    free_problem(&p);
}

int main(void)
{
    int n = 0;
    if (fa_device_count("opencl", &n) != FA_SUCCESS || n == 0) {
        printf("opencl backend not compiled in or no OpenCL device: skipped\n");
        return 77;
    }
    /* a fresh cache directory, so the cache test sees this run's files */
    snprintf(cache_root, sizeof cache_root, "/tmp/flashattn-test-cache-%ld", (long)getpid());
    setenv("FLASHATTN_CACHE_DIR", cache_root, 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_agree_causal_gqa_dropout),
        cmocka_unit_test(test_agree_window_blocksparse),
        cmocka_unit_test(test_agree_softcap_alibi),
        cmocka_unit_test(test_alibi_slopes_outside_buffer),
        cmocka_unit_test(test_plain_call_plain_program),
        cmocka_unit_test(test_dropout_mask),
        cmocka_unit_test(test_backward_reproducible_and_cached),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", cache_root);
    if (system(cmd) != 0)
        printf("could not remove %s\n", cache_root);
    return failed;
}
