/* sink_dv_check.c: the learnable sink and d_v != d on a GPU backend against a float64 reference,
 * through the public API: forward (O, LSE), backward (dQ, dK, dV, dsink, and dsink's bits again
 * on a second run), fa_forward_kvcache (O, LSE; one split and several, an empty sequence whose
 * row is the sink alone) and the refusal of d 576 / d_v 512 there. fp32 and bf16, head-dim pairs
 * (64, 64), (192, 128), (40, 72), (64, 32), (256, 128), GQA, causal. A check of the kernels ahead
 * of the conformance grid's cases, for bench/device/sink_dv_gpu.sh.
 * Usage: sink_dv_check [BACKEND]. Exits 77 (SKIP) without a device or when the backend lists
 * neither FA_FEATURE_SINK nor FA_FEATURE_HEAD_DIM_V, 1 on any failure. */
#include "flashattn.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;
static fa_context *ctx;

static float bf16_round(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}

static double urand(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

/* device buffer from host floats in dtype dt (fp32 or bf16) */
static void *upload(const float *h, int64_t n, fa_dtype dt)
{
    void *d = NULL;
    size_t es = dt == FA_DTYPE_F32 ? 4 : 2;
    void *tmp = malloc((size_t)n * es + 1);
    for (int64_t i = 0; i < n; ++i) {
        if (dt == FA_DTYPE_F32) {
            ((float *)tmp)[i] = h[i];
        } else {
            uint32_t u;
            memcpy(&u, &h[i], 4);
            ((uint16_t *)tmp)[i] = (uint16_t)(u >> 16);
        }
    }
    fa_malloc(ctx, (size_t)n * es + 1, &d);
    fa_memcpy(ctx, d, tmp, (size_t)n * es, FA_COPY_HOST_TO_DEVICE);
    free(tmp);
    return d;
}

static void download(float *h, const void *d, int64_t n, fa_dtype dt)
{
    size_t es = dt == FA_DTYPE_F32 ? 4 : 2;
    void *tmp = malloc((size_t)n * es + 1);
    fa_memcpy(ctx, tmp, d, (size_t)n * es, FA_COPY_DEVICE_TO_HOST);
    for (int64_t i = 0; i < n; ++i) {
        if (dt == FA_DTYPE_F32) {
            h[i] = ((float *)tmp)[i];
        } else {
            uint32_t u = (uint32_t)((uint16_t *)tmp)[i] << 16;
            memcpy(&h[i], &u, 4);
        }
    }
    free(tmp);
}

static void fill(float *x, int64_t n, uint64_t *s, fa_dtype dt)
{
    for (int64_t i = 0; i < n; ++i) {
        x[i] = (float)urand(s);
        if (dt != FA_DTYPE_F32)
            x[i] = bf16_round(x[i]);
    }
}

static double relerr(const float *got, const double *ref, int64_t n)
{
    double e = 0, m = 1e-30;
    for (int64_t i = 0; i < n; ++i) {
        double d = (double)got[i] == ref[i] ? 0.0 : fabs((double)got[i] - ref[i]);
        if (!(d <= e))
            e = isnan(d) ? INFINITY : d;
        if (fabs(ref[i]) > m && isfinite(ref[i]))
            m = fabs(ref[i]);
    }
    return e / m;
}

static void verdict(const char *name, const char *what, double err, double tol)
{
    int ok = err <= tol;
    printf("  %-44s %-6s rel err %.3g (tol %.1g) %s\n", name, what, err, tol, ok ? "ok" : "FAIL");
    if (!ok)
        failures++;
}

/* reference attention: q [B][Sq][Hq][d], k [B][Sk][Hk][d], v [B][Sk][Hk][dv], per-batch key
 * lengths sk[b] (<= Sk), causal bottom-right against sk[b] */
typedef struct {
    int64_t B, Sq, Sk, Hq, Hk, d, dv;
    int causal;
    double scale;
} shape;

static void reference(const shape *s, const int64_t *sk, const float *q, const float *k, const float *v,
                      const float *sink, const float *dout, double *o, double *lse, double *dq, double *dk, double *dv,
                      double *dsink)
{
    const int64_t g = s->Hq / s->Hk;
    double *p = malloc(sizeof(double) * (size_t)s->Sk), *dp = malloc(sizeof(double) * (size_t)s->Sk);
    if (dq) {
        memset(dq, 0, sizeof(double) * (size_t)(s->B * s->Sq * s->Hq * s->d));
        memset(dk, 0, sizeof(double) * (size_t)(s->B * s->Sk * s->Hk * s->d));
        memset(dv, 0, sizeof(double) * (size_t)(s->B * s->Sk * s->Hk * s->dv));
        memset(dsink, 0, sizeof(double) * (size_t)s->Hq);
    }
    for (int64_t b = 0; b < s->B; ++b)
        for (int64_t h = 0; h < s->Hq; ++h)
            for (int64_t i = 0; i < s->Sq; ++i) {
                const int64_t hk = h / g, n = sk[b];
                const int64_t hi = s->causal ? (i + n - s->Sq + 1 < n ? i + n - s->Sq + 1 : n) : n;
                const float *qi = q + ((b * s->Sq + i) * s->Hq + h) * s->d;
                double mx = sink ? sink[h] : -INFINITY;
                for (int64_t j = 0; j < hi; ++j) {
                    const float *kj = k + ((b * s->Sk + j) * s->Hk + hk) * s->d;
                    double x = 0;
                    for (int64_t c = 0; c < s->d; ++c)
                        x += (double)qi[c] * kj[c];
                    p[j] = x * s->scale;
                    if (p[j] > mx)
                        mx = p[j];
                }
                double sum = sink ? exp(sink[h] - mx) : 0;
                for (int64_t j = 0; j < hi; ++j)
                    sum += exp(p[j] - mx);
                const double l = (hi <= 0 && !sink) ? -INFINITY : mx + log(sum);
                lse[(b * s->Hq + h) * s->Sq + i] = l;
                double *oi = o + ((b * s->Sq + i) * s->Hq + h) * s->dv;
                for (int64_t c = 0; c < s->dv; ++c)
                    oi[c] = 0;
                for (int64_t j = 0; j < hi; ++j) {
                    p[j] = exp(p[j] - l);
                    const float *vj = v + ((b * s->Sk + j) * s->Hk + hk) * s->dv;
                    for (int64_t c = 0; c < s->dv; ++c)
                        oi[c] += p[j] * vj[c];
                }
                if (!dq)
                    continue;
                const float *doi = dout + ((b * s->Sq + i) * s->Hq + h) * s->dv;
                double D = 0;
                for (int64_t c = 0; c < s->dv; ++c)
                    D += (double)doi[c] * oi[c];
                if (sink)
                    dsink[h] -= exp(sink[h] - l) * D;
                for (int64_t j = 0; j < hi; ++j) {
                    const float *vj = v + ((b * s->Sk + j) * s->Hk + hk) * s->dv;
                    const float *kj = k + ((b * s->Sk + j) * s->Hk + hk) * s->d;
                    double x = 0;
                    for (int64_t c = 0; c < s->dv; ++c)
                        x += (double)doi[c] * vj[c];
                    dp[j] = p[j] * (x - D) * s->scale;
                    double *dqi = dq + ((b * s->Sq + i) * s->Hq + h) * s->d;
                    double *dkj = dk + ((b * s->Sk + j) * s->Hk + hk) * s->d;
                    double *dvj = dv + ((b * s->Sk + j) * s->Hk + hk) * s->dv;
                    for (int64_t c = 0; c < s->d; ++c) {
                        dqi[c] += dp[j] * kj[c];
                        dkj[c] += dp[j] * qi[c];
                    }
                    for (int64_t c = 0; c < s->dv; ++c)
                        dvj[c] += p[j] * doi[c];
                }
            }
    free(p);
    free(dp);
}

static void run_fwd_bwd(int64_t B, int64_t S, int64_t Hq, int64_t Hk, int64_t d, int64_t dv, int causal, int with_sink,
                        fa_dtype dt)
{
    char name[128];
    snprintf(name, sizeof name, "fwd/bwd B%lld S%lld H%lld/%lld d%lld dv%lld%s%s %s", (long long)B, (long long)S,
             (long long)Hq, (long long)Hk, (long long)d, (long long)dv, causal ? " causal" : "", with_sink ? " sink" : "",
             fa_dtype_name(dt));
    uint64_t seed = 1234 + (uint64_t)(d * 7 + dv + S);
    shape s = {B, S, S, Hq, Hk, d, dv, causal, 1.0 / sqrt((double)d)};
    const int64_t nq = B * S * Hq * d, nk = B * S * Hk * d, nv = B * S * Hk * dv, no = B * S * Hq * dv, nl = B * Hq * S;
    float *q = malloc(4 * nq), *k = malloc(4 * nk), *v = malloc(4 * nv), *dout = malloc(4 * no), *sink = malloc(4 * Hq);
    fill(q, nq, &seed, dt);
    fill(k, nk, &seed, dt);
    fill(v, nv, &seed, dt);
    fill(dout, no, &seed, dt);
    for (int64_t h = 0; h < Hq; ++h)
        sink[h] = (float)(urand(&seed) * 2.0 + (h == 0 ? 3.0 : 0.0));
    double *o_r = malloc(8 * no), *l_r = malloc(8 * nl), *dq_r = malloc(8 * nq), *dk_r = malloc(8 * nk),
           *dv_r = malloc(8 * nv), *ds_r = malloc(8 * Hq);
    int64_t *skl = malloc(8 * B);
    for (int64_t b = 0; b < B; ++b)
        skl[b] = S;
    reference(&s, skl, q, k, v, with_sink ? sink : NULL, dout, o_r, l_r, dq_r, dk_r, dv_r, ds_r);
    int64_t shq[4] = {B, S, Hq, d}, shk[4] = {B, S, Hk, d}, shv[4] = {B, S, Hk, dv}, sho[4] = {B, S, Hq, dv},
            shl[3] = {B, Hq, S}, shs[1] = {Hq};
    void *Q = upload(q, nq, dt), *K = upload(k, nk, dt), *V = upload(v, nv, dt), *DO = upload(dout, no, dt),
         *SK = upload(sink, Hq, FA_DTYPE_F32);
    void *O, *L, *DQ, *DK, *DV, *DS;
    fa_malloc(ctx, 4 * no, &O);
    fa_malloc(ctx, 4 * nl, &L);
    fa_malloc(ctx, 4 * nq, &DQ);
    fa_malloc(ctx, 4 * nk, &DK);
    fa_malloc(ctx, 4 * nv, &DV);
    fa_malloc(ctx, 4 * Hq, &DS);
    fa_fwd_args a;
    memset(&a, 0, sizeof a);
    a.q = fa_tensor_contiguous(Q, dt, 4, shq);
    a.k = fa_tensor_contiguous(K, dt, 4, shk);
    a.v = fa_tensor_contiguous(V, dt, 4, shv);
    a.o = fa_tensor_contiguous(O, dt, 4, sho);
    a.lse = fa_tensor_contiguous(L, FA_DTYPE_F32, 3, shl);
    a.opts = fa_options_default();
    a.opts.causal = causal;
    a.opts.learnable_sink = with_sink ? SK : NULL;
    char variant[64] = "";
    fa_query_support(ctx, &a, 0, variant, sizeof variant);
    fa_status st = fa_forward(ctx, &a);
    if (st != FA_SUCCESS) {
        printf("  %-44s forward: %s (%s) FAIL\n", name, fa_status_string(st), fa_context_last_error(ctx));
        failures++;
        return;
    }
    fa_synchronize(ctx);
    float *o = malloc(4 * no), *l = malloc(4 * nl);
    download(o, O, no, dt);
    download(l, L, nl, FA_DTYPE_F32);
    const double tf = dt == FA_DTYPE_F32 ? 2e-5 : 2e-2, tb = dt == FA_DTYPE_F32 ? 1e-4 : 5e-2;
    printf("  %s: forward variant %s\n", name, variant);
    verdict(name, "O", relerr(o, o_r, no), tf);
    verdict(name, "LSE", relerr(l, l_r, nl), 1e-5);
    fa_bwd_args ba;
    memset(&ba, 0, sizeof ba);
    ba.q = a.q;
    ba.k = a.k;
    ba.v = a.v;
    ba.o = a.o;
    ba.lse = a.lse;
    ba.dout = fa_tensor_contiguous(DO, dt, 4, sho);
    ba.dq = fa_tensor_contiguous(DQ, dt, 4, shq);
    ba.dk = fa_tensor_contiguous(DK, dt, 4, shk);
    ba.dv = fa_tensor_contiguous(DV, dt, 4, shv);
    ba.opts = a.opts;
    if (with_sink)
        ba.dsink = fa_tensor_contiguous(DS, FA_DTYPE_F32, 1, shs);
    fa_query_support(ctx, &a, 1, variant, sizeof variant);
    st = fa_backward(ctx, &ba);
    if (st != FA_SUCCESS) {
        printf("  %-44s backward: %s (%s) FAIL\n", name, fa_status_string(st), fa_context_last_error(ctx));
        failures++;
        return;
    }
    fa_synchronize(ctx);
    float *dqh = malloc(4 * nq), *dkh = malloc(4 * nk), *dvh = malloc(4 * nv), *dsh = malloc(4 * Hq);
    download(dqh, DQ, nq, dt);
    download(dkh, DK, nk, dt);
    download(dvh, DV, nv, dt);
    printf("  %s: backward variant %s\n", name, variant);
    verdict(name, "dQ", relerr(dqh, dq_r, nq), tb);
    verdict(name, "dK", relerr(dkh, dk_r, nk), tb);
    verdict(name, "dV", relerr(dvh, dv_r, nv), tb);
    if (with_sink) {
        download(dsh, DS, Hq, FA_DTYPE_F32);
        verdict(name, "dsink", relerr(dsh, ds_r, Hq), tb);
        /* deterministic: a second backward gives the same dsink bits */
        float *ds2 = malloc(4 * Hq);
        fa_backward(ctx, &ba);
        fa_synchronize(ctx);
        download(ds2, DS, Hq, FA_DTYPE_F32);
        int same = memcmp(ds2, dsh, 4 * Hq) == 0;
        printf("  %-44s dsink bitwise the same on a second run: %s\n", name, same ? "ok" : "FAIL");
        failures += !same;
        free(ds2);
    }
    fa_free(ctx, Q);
    fa_free(ctx, K);
    fa_free(ctx, V);
    fa_free(ctx, DO);
    fa_free(ctx, SK);
    fa_free(ctx, O);
    fa_free(ctx, L);
    fa_free(ctx, DQ);
    fa_free(ctx, DK);
    fa_free(ctx, DV);
    fa_free(ctx, DS);
    free(q);
    free(k);
    free(v);
    free(dout);
    free(sink);
    free(o_r);
    free(l_r);
    free(dq_r);
    free(dk_r);
    free(dv_r);
    free(ds_r);
    free(skl);
    free(o);
    free(l);
    free(dqh);
    free(dkh);
    free(dvh);
    free(dsh);
}

static void run_decode(int64_t B, int64_t Sc, int64_t Hq, int64_t Hk, int64_t d, int64_t dv, int with_sink, int splits,
                       fa_dtype dt, int expect_unsupported)
{
    char name[128];
    snprintf(name, sizeof name, "kvcache B%lld Sc%lld H%lld/%lld d%lld dv%lld%s splits%d %s", (long long)B,
             (long long)Sc, (long long)Hq, (long long)Hk, (long long)d, (long long)dv, with_sink ? " sink" : "", splits,
             fa_dtype_name(dt));
    uint64_t seed = 99 + (uint64_t)(d + dv + splits);
    const int64_t nq = B * Hq * d, nk = B * Sc * Hk * d, nv = B * Sc * Hk * dv, no = B * Hq * dv, nl = B * Hq;
    float *q = malloc(4 * nq), *k = malloc(4 * nk), *v = malloc(4 * nv), *sink = malloc(4 * Hq);
    fill(q, nq, &seed, dt);
    fill(k, nk, &seed, dt);
    fill(v, nv, &seed, dt);
    for (int64_t h = 0; h < Hq; ++h)
        sink[h] = (float)(urand(&seed) * 2.0 + (h == 1 ? 2.5 : 0.0));
    int32_t *lens = malloc(4 * B);
    int64_t *skl = malloc(8 * B);
    for (int64_t b = 0; b < B; ++b) {
        lens[b] = (int32_t)(b == 0 ? 0 : Sc - 3 * b); /* sequence 0 empty: O = 0, LSE = sink */
        skl[b] = lens[b];
    }
    shape s = {B, 1, Sc, Hq, Hk, d, dv, 0, 1.0 / sqrt((double)d)};
    double *o_r = malloc(8 * no), *l_r = malloc(8 * nl);
    reference(&s, skl, q, k, v, with_sink ? sink : NULL, NULL, o_r, l_r, NULL, NULL, NULL, NULL);
    int64_t shq[4] = {B, 1, Hq, d}, shk[4] = {B, Sc, Hk, d}, shv[4] = {B, Sc, Hk, dv}, sho[4] = {B, 1, Hq, dv},
            shl[3] = {B, Hq, 1};
    void *Q = upload(q, nq, dt), *K = upload(k, nk, dt), *V = upload(v, nv, dt), *SK = upload(sink, Hq, FA_DTYPE_F32);
    void *O, *L, *LN;
    fa_malloc(ctx, 4 * no, &O);
    fa_malloc(ctx, 4 * nl, &L);
    fa_malloc(ctx, 4 * B, &LN);
    fa_memcpy(ctx, LN, lens, 4 * B, FA_COPY_HOST_TO_DEVICE);
    fa_kvcache_args a;
    memset(&a, 0, sizeof a);
    a.q = fa_tensor_contiguous(Q, dt, 4, shq);
    a.k_cache = fa_tensor_contiguous(K, dt, 4, shk);
    a.v_cache = fa_tensor_contiguous(V, dt, 4, shv);
    a.cache_seqlens = LN;
    a.o = fa_tensor_contiguous(O, dt, 4, sho);
    a.lse = fa_tensor_contiguous(L, FA_DTYPE_F32, 3, shl);
    a.opts = fa_options_default();
    a.opts.learnable_sink = with_sink ? SK : NULL;
    a.num_splits = splits;
    fa_status st = fa_forward_kvcache(ctx, &a);
    if (expect_unsupported) {
        int ok = st == FA_ERR_UNSUPPORTED;
        printf("  %-44s refused: %s (%s) %s\n", name, fa_status_string(st), fa_context_last_error(ctx), ok ? "ok" : "FAIL");
        failures += !ok;
    } else if (st != FA_SUCCESS) {
        printf("  %-44s %s (%s) FAIL\n", name, fa_status_string(st), fa_context_last_error(ctx));
        failures++;
    } else {
        fa_synchronize(ctx);
        float *o = malloc(4 * no), *l = malloc(4 * nl);
        download(o, O, no, dt);
        download(l, L, nl, FA_DTYPE_F32);
        verdict(name, "O", relerr(o, o_r, no), dt == FA_DTYPE_F32 ? 2e-5 : 2e-2);
        verdict(name, "LSE", relerr(l, l_r, nl), 1e-5);
        free(o);
        free(l);
    }
    fa_free(ctx, Q);
    fa_free(ctx, K);
    fa_free(ctx, V);
    fa_free(ctx, SK);
    fa_free(ctx, O);
    fa_free(ctx, L);
    fa_free(ctx, LN);
    free(q);
    free(k);
    free(v);
    free(sink);
    free(lens);
    free(skl);
    free(o_r);
    free(l_r);
}

int main(int argc, char **argv)
{
    const char *backend = argc > 1 ? argv[1] : "cuda";
    fa_capabilities caps;
    if (fa_backend_capabilities(backend, &caps) != FA_SUCCESS || fa_context_create(&ctx, backend, 0) != FA_SUCCESS) {
        printf("SKIP: %s: %s\n", backend, fa_last_error());
        return 77;
    }
    if (!(caps.features & FA_FEATURE_SINK) || !(caps.features & FA_FEATURE_HEAD_DIM_V)) {
        printf("SKIP: %s does not list FA_FEATURE_SINK and FA_FEATURE_HEAD_DIM_V\n", backend);
        fa_context_destroy(ctx);
        return 77;
    }
    run_fwd_bwd(2, 77, 4, 2, 64, 64, 0, 1, FA_DTYPE_F32);
    run_fwd_bwd(2, 77, 4, 2, 64, 64, 1, 1, FA_DTYPE_F32);
    run_fwd_bwd(1, 130, 2, 1, 192, 128, 1, 0, FA_DTYPE_F32);
    run_fwd_bwd(1, 130, 2, 1, 192, 128, 1, 1, FA_DTYPE_F32);
    run_fwd_bwd(2, 70, 3, 3, 40, 72, 0, 1, FA_DTYPE_F32);
    run_fwd_bwd(1, 65, 2, 2, 64, 32, 1, 1, FA_DTYPE_BF16);
    run_fwd_bwd(1, 100, 4, 1, 128, 128, 1, 1, FA_DTYPE_BF16);
    run_fwd_bwd(1, 64, 2, 2, 256, 128, 0, 1, FA_DTYPE_F32);
    run_decode(3, 300, 8, 2, 128, 64, 1, 1, FA_DTYPE_F32, 0);
    run_decode(3, 300, 8, 2, 128, 64, 1, 4, FA_DTYPE_F32, 0);
    run_decode(3, 300, 8, 2, 64, 64, 1, 1, FA_DTYPE_BF16, 0);
    run_decode(3, 300, 8, 2, 64, 64, 1, 3, FA_DTYPE_BF16, 0);
    run_decode(2, 200, 4, 1, 192, 128, 0, 2, FA_DTYPE_BF16, 0);
    run_decode(2, 200, 4, 1, 40, 72, 1, 2, FA_DTYPE_F32, 0);
    run_decode(1, 64, 2, 1, 576, 512, 1, 1, FA_DTYPE_BF16, 1);
    fa_context_destroy(ctx);
    printf("%s\n", failures ? "FAILED" : "PASSED");
    return failures ? 1 : 0;
}
