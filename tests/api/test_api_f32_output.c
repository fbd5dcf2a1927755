/* test_api_f32_output.c: fp32 outputs from fp16 / bf16 inputs (FA_FEATURE_F32_OUTPUT). The
 * kernels compute in fp32 and round once when they store, so the fp32 output rounded to the input
 * dtype must equal, bit for bit, the output written in that dtype: forward (O; LSE unchanged)
 * and backward (dQ, dK, dV), causal and not, on every backend with a device that claims the
 * feature. Backends that do not claim it must refuse with FA_ERR_UNSUPPORTED and leave the
 * output untouched. Mixed dtypes other than that (an fp16 output from bf16, fp32 dq with bf16
 * dk) are invalid arguments. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "flashattn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 2, S = 150, H = 4, HK = 2 }; /* 150: a partial tile at the end */

static uint16_t round_to(fa_dtype dt, float x)
{
    return dt == FA_DTYPE_BF16 ? fa_f32_to_bf16(x) : fa_f32_to_f16(x);
}

/* device buffers of a problem: inputs in dt, outputs in dt and in fp32 */
typedef struct bufs {
    fa_context *ctx;
    void *in[4];           /* q, k, v, dout */
    void *o16, *o32, *lse16, *lse32;
    void *g16[3], *g32[3]; /* dq, dk, dv */
} bufs;

static void *upload(fa_context *ctx, const void *host, size_t bytes)
{
    void *d = NULL;
    assert_int_equal(fa_malloc(ctx, bytes, &d), FA_SUCCESS);
    if (host)
        assert_int_equal(fa_memcpy(ctx, d, host, bytes, FA_COPY_HOST_TO_DEVICE), FA_SUCCESS);
    return d;
}

static void *download(fa_context *ctx, const void *dev, size_t bytes)
{
    void *h = malloc(bytes);
    assert_int_equal(fa_memcpy(ctx, h, dev, bytes, FA_COPY_DEVICE_TO_HOST), FA_SUCCESS);
    return h;
}

static fa_tensor t4(void *data, fa_dtype dt, int64_t heads, int64_t d)
{
    const int64_t shape[4] = {B, S, heads, d};
    return fa_tensor_contiguous(data, dt, 4, shape);
}

/* 0 when a (n values in dt) equals round(b) (n fp32 values) bit for bit; else the first index + 1 */
static int64_t mismatch(fa_dtype dt, const uint16_t *a, const float *b, int64_t n)
{
    for (int64_t i = 0; i < n; ++i)
        if (a[i] != round_to(dt, b[i]))
            return i + 1;
    return 0;
}

static void run(const char *backend, int device, fa_dtype dt, int64_t d, int causal)
{
    fa_context *ctx;
    assert_int_equal(fa_context_create(&ctx, backend, device), FA_SUCCESS);
    const int64_t nq = B * S * H * d, nk = B * S * HK * d, nl = B * H * S;
    uint64_t seed = 7;
    uint16_t *host[4];
    const int64_t counts[4] = {nq, nk, nk, nq};
    for (int i = 0; i < 4; ++i) {
        host[i] = malloc(sizeof(uint16_t) * (size_t)counts[i]);
        for (int64_t e = 0; e < counts[i]; ++e) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            host[i][e] = round_to(dt, (float)((double)(seed >> 11) / 9007199254740992.0 * 4.0 - 2.0));
        }
    }
    void *in[4];
    for (int i = 0; i < 4; ++i)
        in[i] = upload(ctx, host[i], sizeof(uint16_t) * (size_t)counts[i]);
    void *o16 = upload(ctx, NULL, 2 * (size_t)nq), *o32 = upload(ctx, NULL, 4 * (size_t)nq);
    void *l16 = upload(ctx, NULL, 4 * (size_t)nl), *l32 = upload(ctx, NULL, 4 * (size_t)nl);
    const int64_t lshape[3] = {B, H, S};
    fa_fwd_args f;
    memset(&f, 0, sizeof f);
    f.q = t4(in[0], dt, H, d);
    f.k = t4(in[1], dt, HK, d);
    f.v = t4(in[2], dt, HK, d);
    f.opts = fa_options_default();
    f.opts.causal = causal;
    f.o = t4(o16, dt, H, d);
    f.lse = fa_tensor_contiguous(l16, FA_DTYPE_F32, 3, lshape);
    assert_int_equal(fa_forward(ctx, &f), FA_SUCCESS);
    f.o = t4(o32, FA_DTYPE_F32, H, d);
    f.lse = fa_tensor_contiguous(l32, FA_DTYPE_F32, 3, lshape);
    assert_int_equal(fa_forward(ctx, &f), FA_SUCCESS);
    uint16_t *ho16 = download(ctx, o16, 2 * (size_t)nq);
    float *ho32 = download(ctx, o32, 4 * (size_t)nq), *hl16 = download(ctx, l16, 4 * (size_t)nl),
          *hl32 = download(ctx, l32, 4 * (size_t)nl);
    printf("  %s %s d %lld %s: forward O %s\n", backend, fa_dtype_name(dt), (long long)d, causal ? "causal" : "full",
           mismatch(dt, ho16, ho32, nq) ? "MISMATCH" : "equal");
    assert_int_equal(mismatch(dt, ho16, ho32, nq), 0);
    assert_memory_equal(hl16, hl32, 4 * (size_t)nl);

    /* backward: the same O and LSE (dtype O), gradients in dt and in fp32 */
    fa_bwd_args g;
    memset(&g, 0, sizeof g);
    g.q = t4(in[0], dt, H, d);
    g.k = t4(in[1], dt, HK, d);
    g.v = t4(in[2], dt, HK, d);
    g.o = t4(o16, dt, H, d);
    g.lse = fa_tensor_contiguous(l16, FA_DTYPE_F32, 3, lshape);
    g.dout = t4(in[3], dt, H, d);
    g.opts = f.opts;
    const int64_t gn[3] = {nq, nk, nk};
    void *g16[3], *g32[3];
    for (int i = 0; i < 3; ++i) {
        g16[i] = upload(ctx, NULL, 2 * (size_t)gn[i]);
        g32[i] = upload(ctx, NULL, 4 * (size_t)gn[i]);
    }
    /* twice: as called (the GPU's fused backward adds dQ with atomics in no fixed order, so there
     * only dK and dV, each written once, are compared), then deterministic (all three) */
    for (int det = 0; det < 2; ++det) {
        g.opts.deterministic = det;
        g.dq = t4(g16[0], dt, H, d), g.dk = t4(g16[1], dt, HK, d), g.dv = t4(g16[2], dt, HK, d);
        assert_int_equal(fa_backward(ctx, &g), FA_SUCCESS);
        g.dq = t4(g32[0], FA_DTYPE_F32, H, d), g.dk = t4(g32[1], FA_DTYPE_F32, HK, d);
        g.dv = t4(g32[2], FA_DTYPE_F32, HK, d);
        assert_int_equal(fa_backward(ctx, &g), FA_SUCCESS);
        for (int i = det ? 0 : 1; i < 3; ++i) {
            uint16_t *a = download(ctx, g16[i], 2 * (size_t)gn[i]);
            float *b = download(ctx, g32[i], 4 * (size_t)gn[i]);
            const int64_t m = mismatch(dt, a, b, gn[i]);
            if (m)
                printf("  d%c (deterministic %d) mismatch at %lld: %g vs %g\n", "QKV"[i], det, (long long)(m - 1),
                       dt == FA_DTYPE_BF16 ? fa_bf16_to_f32(a[m - 1]) : fa_f16_to_f32(a[m - 1]), b[m - 1]);
            assert_int_equal(m, 0);
            free(a), free(b);
        }
    }
    /* mixed dtypes that are not "inputs' dtype or fp32": refused, outputs untouched */
    g.dk = t4(g16[1], dt, HK, d); /* dq fp32, dk in dt */
    assert_int_equal(fa_backward(ctx, &g), FA_ERR_INVALID_ARG);
    f.o = t4(o16, dt == FA_DTYPE_BF16 ? FA_DTYPE_F16 : FA_DTYPE_BF16, H, d);
    assert_int_equal(fa_forward(ctx, &f), FA_ERR_INVALID_ARG);
    for (int i = 0; i < 3; ++i)
        fa_free(ctx, g16[i]), fa_free(ctx, g32[i]);
    for (int i = 0; i < 4; ++i)
        fa_free(ctx, in[i]), free(host[i]);
    fa_free(ctx, o16), fa_free(ctx, o32), fa_free(ctx, l16), fa_free(ctx, l32);
    free(ho16), free(ho32), free(hl16), free(hl32);
    fa_context_destroy(ctx);
}

static void test_f32_output(void **state)
{
    (void)state;
    int ran = 0;
    for (int b = 0; b < fa_backend_count(); ++b) {
        const char *name = fa_backend_name(b);
        int devices = 0;
        fa_capabilities caps;
        if (fa_device_count(name, &devices) != FA_SUCCESS || devices == 0 ||
            fa_backend_capabilities(name, &caps) != FA_SUCCESS) {
            printf("  %s: no device, not run\n", name);
            continue;
        }
        if (!(caps.features & FA_FEATURE_F32_OUTPUT)) { /* must refuse, clearly */
            fa_context *ctx;
            assert_int_equal(fa_context_create(&ctx, name, 0), FA_SUCCESS);
            void *q = NULL, *o = NULL;
            assert_int_equal(fa_malloc(ctx, 2 * B * S * H * 64, &q), FA_SUCCESS);
            assert_int_equal(fa_malloc(ctx, 4 * B * S * H * 64, &o), FA_SUCCESS);
            fa_fwd_args f;
            memset(&f, 0, sizeof f);
            f.q = t4(q, FA_DTYPE_BF16, H, 64);
            f.k = f.v = t4(q, FA_DTYPE_BF16, HK, 64);
            f.o = t4(o, FA_DTYPE_F32, H, 64);
            f.opts = fa_options_default();
            assert_int_equal(fa_forward(ctx, &f), FA_ERR_UNSUPPORTED);
            printf("  %s: refuses fp32 outputs: %s\n", name, fa_context_last_error(ctx));
            fa_free(ctx, q), fa_free(ctx, o);
            fa_context_destroy(ctx);
            continue;
        }
        for (int t = 0; t < 2; ++t)
            for (int64_t d = 64; d <= 128; d += 64)
                for (int causal = 0; causal < 2; ++causal)
                    run(name, 0, t ? FA_DTYPE_F16 : FA_DTYPE_BF16, d, causal);
        ++ran;
    }
    assert_true(ran >= 1); /* the CPU backend always has the feature */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f32_output),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
