/* long_seq.c: forward and backward at long sequence lengths, checked on sampled rows. The full
 * float64 reference is O(N^2) per head and out of reach at N = 65536, so the check recomputes,
 * in float64, the outputs of sampled query rows (O, LSE, dQ) exactly, and of sampled key rows
 * (dK, dV) given the kernel's LSE for every query row (P_ij = exp(s_ij - LSE_i)); tolerances
 * follow the conformance pass rule against a naive same-precision computation of the same rows.
 * Usage: long_seq --backend NAME [--seqlen N] [--heads H] [--dim D] [--dtype bf16|fp16|fp32]
 *                 [--rows R] [--causal]     exit 0 pass, 1 fail, 77 backend or case unsupported */
#include "flashattn.h"
#include "half.h"
#include "reference.h"
#include "testrand.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct opts {
    const char *backend;
    int64_t n, heads, d, rows;
    fa_dtype dt;
    int causal;
} opts;

static double get(fa_dtype dt, const void *base, int64_t i)
{
    switch (dt) {
    case FA_DTYPE_F16: return fa_half_to_float(((const uint16_t *)base)[i]);
    case FA_DTYPE_BF16: return fa_bfloat_to_float(((const uint16_t *)base)[i]);
    default: return ((const float *)base)[i];
    }
}

static void put(fa_dtype dt, void *base, int64_t i, double x)
{
    switch (dt) {
    case FA_DTYPE_F16: ((uint16_t *)base)[i] = fa_float_to_half((float)x); break;
    case FA_DTYPE_BF16: ((uint16_t *)base)[i] = fa_float_to_bfloat((float)x); break;
    default: ((float *)base)[i] = (float)x; break;
    }
}

/* Worst errors of the kernel and of the naive baseline, and the reference's largest magnitude. */
typedef struct worst {
    double kernel, naive, ref_max;
    int nonfinite;
} worst;

static void track(worst *w, double kernel, double naive, double ref)
{
    if (!isfinite(kernel)) {
        w->nonfinite = 1;
        return;
    }
    w->kernel = fmax(w->kernel, fabs(kernel - ref));
    w->naive = fmax(w->naive, fabs(naive - ref));
    w->ref_max = fmax(w->ref_max, fabs(ref));
}

static int verdict(const char *name, const worst *w, double factor)
{
    double bound = factor * w->naive + 1e-5 * fmax(1.0, w->ref_max);
    int ok = !w->nonfinite && w->kernel <= bound;
    printf("%-4s max|kernel - ref64| = %.3e   naive %.3e   bound %.3e   %s\n", name, w->kernel, w->naive, bound,
           ok ? "ok" : (w->nonfinite ? "FAIL (non-finite)" : "FAIL"));
    return ok;
}

static int parse(int argc, char **argv, opts *o)
{
    o->backend = NULL;
    o->n = 4096;
    o->heads = 2;
    o->d = 64;
    o->rows = 8;
    o->dt = FA_DTYPE_BF16;
    o->causal = 0;
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--causal"))
            o->causal = 1;
        else if (v && !strcmp(a, "--backend"))
            o->backend = argv[++i];
        else if (v && !strcmp(a, "--seqlen"))
            o->n = atoll(argv[++i]);
        else if (v && !strcmp(a, "--heads"))
            o->heads = atoll(argv[++i]);
        else if (v && !strcmp(a, "--dim"))
            o->d = atoll(argv[++i]);
        else if (v && !strcmp(a, "--rows"))
            o->rows = atoll(argv[++i]);
        else if (v && !strcmp(a, "--dtype")) {
            ++i;
            o->dt = !strcmp(v, "fp32") ? FA_DTYPE_F32 : !strcmp(v, "fp16") ? FA_DTYPE_F16 : FA_DTYPE_BF16;
        } else
            return 0;
    }
    return o->backend && o->n > 0 && o->heads > 0 && o->d > 0 && o->rows > 0;
}

int main(int argc, char **argv)
{
    opts o;
    if (!parse(argc, argv, &o)) {
        fprintf(stderr, "usage: long_seq --backend NAME [--seqlen N] [--heads H] [--dim D] [--dtype bf16|fp16|fp32] "
                        "[--rows R] [--causal]\n");
        return 2;
    }
    fa_context *ctx;
    fa_status st = fa_context_create(&ctx, o.backend, 0);
    if (st != FA_SUCCESS) {
        printf("[ SKIPPED ] long_seq/%s: %s\n", o.backend, fa_status_string(st));
        return 77;
    }
    const int64_t n = o.n, h = o.heads, d = o.d, elems = n * h * d;
    const size_t esz = fa_dtype_size(o.dt), bytes = (size_t)elems * esz;
    const double scale = 1.0 / sqrt((double)d);
    printf("long_seq on %s: batch 1, seqlen %lld, heads %lld, d %lld, %s%s, %lld sampled rows per head\n", o.backend,
           (long long)n, (long long)h, (long long)d, fa_dtype_name(o.dt), o.causal ? ", causal" : "",
           (long long)o.rows);

    void *hq = malloc(bytes), *hk = malloc(bytes), *hv = malloc(bytes), *hdo = malloc(bytes);
    void *ho = malloc(bytes), *hdq = malloc(bytes), *hdk = malloc(bytes), *hdv = malloc(bytes);
    float *hlse = malloc(sizeof(float) * (size_t)(n * h));
    double *dsum = malloc(sizeof(double) * (size_t)(n * h));
    void *dev[9] = {NULL};
    int rc = 1;
    if (!hq || !hk || !hv || !hdo || !ho || !hdq || !hdk || !hdv || !hlse || !dsum) {
        fprintf(stderr, "out of host memory\n");
        goto done;
    }
    uint64_t seed = 2026;
    void *inputs[4] = {hq, hk, hv, hdo};
    for (int t = 0; t < 4; ++t)
        for (int64_t i = 0; i < elems; ++i)
            put(o.dt, inputs[t], i, rng_normal(&seed));
    size_t sizes[9] = {bytes, bytes, bytes, bytes, bytes, sizeof(float) * (size_t)(n * h), bytes, bytes, bytes};
    for (int t = 0; t < 9; ++t)
        if (fa_malloc(ctx, sizes[t], &dev[t]) != FA_SUCCESS) {
            fprintf(stderr, "fa_malloc: %s\n", fa_context_last_error(ctx));
            goto done;
        }
    for (int t = 0; t < 4; ++t)
        if (fa_memcpy(ctx, dev[t], inputs[t], bytes, FA_COPY_HOST_TO_DEVICE) != FA_SUCCESS)
            goto done;
    int64_t shape[4] = {1, n, h, d}, lshape[3] = {1, h, n};
    fa_fwd_args fa = {.q = fa_tensor_contiguous(dev[0], o.dt, 4, shape),
                      .k = fa_tensor_contiguous(dev[1], o.dt, 4, shape),
                      .v = fa_tensor_contiguous(dev[2], o.dt, 4, shape),
                      .o = fa_tensor_contiguous(dev[4], o.dt, 4, shape),
                      .lse = fa_tensor_contiguous(dev[5], FA_DTYPE_F32, 3, lshape),
                      .opts = fa_options_default()};
    fa.opts.causal = o.causal;
    fa_bwd_args ba = {.q = fa.q, .k = fa.k, .v = fa.v, .o = fa.o, .lse = fa.lse,
                      .dout = fa_tensor_contiguous(dev[3], o.dt, 4, shape),
                      .dq = fa_tensor_contiguous(dev[6], o.dt, 4, shape),
                      .dk = fa_tensor_contiguous(dev[7], o.dt, 4, shape),
                      .dv = fa_tensor_contiguous(dev[8], o.dt, 4, shape), .opts = fa.opts};
    if ((st = fa_forward(ctx, &fa)) == FA_SUCCESS)
        st = fa_backward(ctx, &ba);
    if (st == FA_SUCCESS)
        st = fa_synchronize(ctx);
    if (st == FA_ERR_UNSUPPORTED) {
        printf("[ SKIPPED ] long_seq/%s: %s\n", o.backend, fa_context_last_error(ctx));
        rc = 77;
        goto done;
    }
    if (st != FA_SUCCESS) {
        printf("FAIL: %s: %s\n", fa_status_string(st), fa_context_last_error(ctx));
        goto done;
    }
    void *outs[5] = {ho, hlse, hdq, hdk, hdv};
    int idx[5] = {4, 5, 6, 7, 8};
    for (int t = 0; t < 5; ++t)
        if (fa_memcpy(ctx, outs[t], dev[idx[t]], sizes[idx[t]], FA_COPY_DEVICE_TO_HOST) != FA_SUCCESS)
            goto done;

    /* D_i = dO_i . O_i (kernel O) for the key-row check */
    for (int64_t i = 0; i < n; ++i)
        for (int64_t hh = 0; hh < h; ++hh) {
            double acc = 0.0;
            for (int64_t c = 0; c < d; ++c)
                acc += get(o.dt, hdo, (i * h + hh) * d + c) * get(o.dt, ho, (i * h + hh) * d + c);
            dsum[hh * n + i] = acc;
        }

    worst wo = {0}, wl = {0}, wdq = {0}, wdk = {0}, wdv = {0};
    double *s = malloc(sizeof(double) * (size_t)n), *p = malloc(sizeof(double) * (size_t)n);
    float *pf = malloc(sizeof(float) * (size_t)n);
    double *acc = calloc((size_t)d * 4, sizeof(double));
    float *accf = calloc((size_t)d * 4, sizeof(float));
    if (!s || !p || !pf || !acc || !accf)
        goto done_rows;
    for (int64_t hh = 0; hh < h; ++hh)
        for (int64_t r = 0; r < o.rows; ++r) {
            /* spread over the sequence: first, last, and evenly between */
            int64_t i = o.rows == 1 ? n - 1 : (r * (n - 1)) / (o.rows - 1);
            /* --- query row i: O, LSE, dQ --- */
            int64_t hi = o.causal ? i + 1 : n; /* seqlen_q == seqlen_k: bottom-right == top-left */
            double mx = -INFINITY;
            float mxf = -INFINITY;
            for (int64_t j = 0; j < hi; ++j) {
                double dot = 0.0;
                float dotf = 0.0f;
                for (int64_t c = 0; c < d; ++c) {
                    double a = get(o.dt, hq, (i * h + hh) * d + c), b = get(o.dt, hk, (j * h + hh) * d + c);
                    dot += a * b;
                    dotf += (float)a * (float)b;
                }
                s[j] = scale * dot;
                pf[j] = (float)scale * dotf;
                mx = fmax(mx, s[j]);
                mxf = fmaxf(mxf, pf[j]);
            }
            double sum = 0.0;
            float sumf = 0.0f;
            for (int64_t j = 0; j < hi; ++j) {
                p[j] = exp(s[j] - mx);
                sum += p[j];
                pf[j] = expf(pf[j] - mxf);
                sumf += pf[j];
            }
            double *o64 = acc, *dq64 = acc + d;
            float *o32 = accf, *dq32 = accf + d;
            memset(acc, 0, sizeof(double) * (size_t)d * 2);
            memset(accf, 0, sizeof(float) * (size_t)d * 2);
            for (int64_t j = 0; j < hi; ++j) {
                p[j] /= sum;
                pf[j] = (float)fa_round_to(o.dt, pf[j] / sumf);
                for (int64_t c = 0; c < d; ++c) {
                    double vv = get(o.dt, hv, (j * h + hh) * d + c);
                    o64[c] += p[j] * vv;
                    o32[c] += pf[j] * (float)vv;
                }
            }
            track(&wl, hlse[hh * n + i], (double)mxf + log((double)sumf), mx + log(sum));
            double dd = 0.0;
            float ddf = 0.0f;
            for (int64_t c = 0; c < d; ++c) {
                track(&wo, get(o.dt, ho, (i * h + hh) * d + c), fa_round_to(o.dt, o32[c]), o64[c]);
                double g = get(o.dt, hdo, (i * h + hh) * d + c);
                dd += g * o64[c];
                ddf += (float)g * (float)fa_round_to(o.dt, o32[c]);
            }
            for (int64_t j = 0; j < hi; ++j) {
                double dp = 0.0;
                float dpf = 0.0f;
                for (int64_t c = 0; c < d; ++c) {
                    double g = get(o.dt, hdo, (i * h + hh) * d + c), vv = get(o.dt, hv, (j * h + hh) * d + c);
                    dp += g * vv;
                    dpf += (float)g * (float)vv;
                }
                double ds = p[j] * (dp - dd) * scale;
                float dsf = (float)fa_round_to(o.dt, pf[j] * ((float)fa_round_to(o.dt, dpf) - ddf)) * (float)scale;
                for (int64_t c = 0; c < d; ++c) {
                    double kk = get(o.dt, hk, (j * h + hh) * d + c);
                    dq64[c] += ds * kk;
                    dq32[c] += dsf * (float)kk;
                }
            }
            for (int64_t c = 0; c < d; ++c)
                track(&wdq, get(o.dt, hdq, (i * h + hh) * d + c), fa_round_to(o.dt, dq32[c]), dq64[c]);

            /* --- key row j = i: dK, dV given the kernel's LSE of every query row --- */
            int64_t j = i, lo = o.causal ? j : 0;
            double *dk64 = acc + 2 * d, *dv64 = acc + 3 * d;
            float *dk32 = accf + 2 * d, *dv32 = accf + 3 * d;
            memset(dk64, 0, sizeof(double) * (size_t)d * 2);
            memset(dk32, 0, sizeof(float) * (size_t)d * 2);
            for (int64_t q = lo; q < n; ++q) {
                double dot = 0.0, dp = 0.0;
                float dotf = 0.0f, dpf = 0.0f;
                for (int64_t c = 0; c < d; ++c) {
                    double a = get(o.dt, hq, (q * h + hh) * d + c), b = get(o.dt, hk, (j * h + hh) * d + c);
                    double g = get(o.dt, hdo, (q * h + hh) * d + c), vv = get(o.dt, hv, (j * h + hh) * d + c);
                    dot += a * b;
                    dotf += (float)a * (float)b;
                    dp += g * vv;
                    dpf += (float)g * (float)vv;
                }
                double lse = hlse[hh * n + q];
                double pij = exp(scale * dot - lse);
                float pijf = (float)fa_round_to(o.dt, expf((float)scale * dotf - (float)lse));
                double ds = pij * (dp - dsum[hh * n + q]) * scale;
                float dsf = (float)fa_round_to(o.dt, pijf * ((float)fa_round_to(o.dt, dpf) - (float)dsum[hh * n + q])) *
                            (float)scale;
                for (int64_t c = 0; c < d; ++c) {
                    double a = get(o.dt, hq, (q * h + hh) * d + c), g = get(o.dt, hdo, (q * h + hh) * d + c);
                    dk64[c] += ds * a;
                    dv64[c] += pij * g;
                    dk32[c] += dsf * (float)a;
                    dv32[c] += pijf * (float)g;
                }
            }
            for (int64_t c = 0; c < d; ++c) {
                track(&wdk, get(o.dt, hdk, (j * h + hh) * d + c), fa_round_to(o.dt, dk32[c]), dk64[c]);
                track(&wdv, get(o.dt, hdv, (j * h + hh) * d + c), fa_round_to(o.dt, dv32[c]), dv64[c]);
            }
        }
    {
        int ok = verdict("O", &wo, 2.0);
        ok &= verdict("LSE", &wl, 2.0);
        ok &= verdict("dQ", &wdq, 3.0);
        ok &= verdict("dK", &wdk, 3.0);
        ok &= verdict("dV", &wdv, 3.0);
        rc = ok ? 0 : 1;
        printf("%s\n", ok ? "PASS" : "FAIL");
    }
done_rows:
    free(s);
    free(p);
    free(pf);
    free(acc);
    free(accf);
done:
    for (int t = 0; t < 9; ++t)
        if (dev[t])
            fa_free(ctx, dev[t]);
    free(hq);
    free(hk);
    free(hv);
    free(hdo);
    free(ho);
    free(hdq);
    free(hdk);
    free(hdv);
    free(hlse);
    free(dsum);
    fa_context_destroy(ctx);
    return rc;
}
