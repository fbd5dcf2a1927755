/* run_check.c: `flashattn run --check`: the results against the float64 reference
 * (tests/support/oracle.h), with the error of a naive same-precision implementation as yardstick;
 * the pass rule is the conformance suite's. */
#include "cli.h"
#include "oracle.h"
#include "progress.h"
#include "run.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* max |got - ref| over n elements; -inf == -inf counts as 0, a NaN or a lone infinity as +inf. */
static double max_abs_error(const double *got, const double *ref, int64_t n)
{
    double worst = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        double e;
        if (got[i] == ref[i])
            e = 0.0;
        else
            e = fabs(got[i] - ref[i]);
        if (isnan(e))
            e = INFINITY;
        if (e > worst)
            worst = e;
    }
    return worst;
}

static double max_abs(const double *x, int64_t n)
{
    double m = 0.0;
    for (int64_t i = 0; i < n; ++i)
        if (isfinite(x[i]) && fabs(x[i]) > m)
            m = fabs(x[i]);
    return m;
}

/* Keeps one line of the check in s->report and prints it unless --json. */
static int add_check_line(const run_config *c, run_state *s, const char *name, double err, double naive_err,
                          double bound)
{
    int ok = err <= bound;
    run_report *r = &s->report;
    if (r->n_checks < (int)(sizeof r->checks / sizeof r->checks[0]))
        r->checks[r->n_checks++] = (run_check_line){name, err, naive_err, bound, ok};
    if (!c->json) {
        if (isnan(naive_err))
            printf("check: max|%s - ref64| = %.3e   tolerance %.0e   %s\n", name, err, bound, ok ? "ok" : "EXCEEDS BOUND");
        else
            printf("check: max|%s - ref64| = %.3e   naive same-precision %.3e   bound %.3e   %s\n", name, err,
                   naive_err, bound, ok ? "ok" : "EXCEEDS BOUND");
    }
    return ok;
}

/* One line of the check; returns 1 if within the conformance bound (factor x the naive error +
 * 1e-5 * max(1, max|ref|)). */
static int report_error(const run_config *c, run_state *s, const char *name, const double *got, const double *naive,
                        const double *ref, int64_t n, double factor)
{
    double err = max_abs_error(got, ref, n);
    double naive_err = max_abs_error(naive, ref, n);
    double scale = max_abs(ref, n);
    double bound = factor * naive_err + 1e-5 * (scale > 1.0 ? scale : 1.0);
    return add_check_line(c, s, name, err, naive_err, bound);
}

/* Device tensor (contiguous, dtype dt) to doubles. */
static void to_doubles(fa_dtype dt, const void *host, int64_t n, double *out)
{
    for (int64_t i = 0; i < n; ++i)
        out[i] = dtype_load(dt, host, i);
}

/* LSE: device [b, h, s], reference [h, b*s]. Not in the conformance factor rule: within 1e-3 for
 * half types and 1e-5 for fp32, and -inf exactly where the reference is -inf. */
static int report_lse_error(const run_config *c, run_state *s, const float *lse, const double *ref)
{
    double lse_err = 0.0;
    for (int64_t b = 0; b < c->batch; ++b)
        for (int64_t h = 0; h < c->heads; ++h)
            for (int64_t i = 0; i < c->seqlen_q; ++i) {
                double r = ref[h * c->batch * c->seqlen_q + b * c->seqlen_q + i];
                double g = lse[(b * c->heads + h) * c->seqlen_q + i];
                double e = g == r ? 0.0 : fabs(g - r);
                if (isnan(e))
                    e = INFINITY;
                if (e > lse_err)
                    lse_err = e;
            }
    double tol = c->dtype == FA_DTYPE_F32 ? 1e-5 : 1e-3;
    return add_check_line(c, s, "LSE", lse_err, NAN, tol);
}

/* dsink's float64 reference and its naive same-precision yardstick, which the oracle does not
 * give: -sum over batch and rows of exp(sink_h - LSE_i) D_i, D_i = dO_i . O_i; the reference from
 * the reference's O and LSE in float64, the yardstick in float32 from the O the backward was given
 * (rounded to the dtype, an error every implementation's dsink inherits) and the naive LSE. O and
 * dO are [batch * seqlen_q, heads, d_v] rows, LSE [heads, batch * seqlen_q]. */
static void sink_gradients(const run_config *c, const float *sink, const double *ref_o, const double *ref_lse,
                           const void *o, const double *naive_lse, const void *dout, double *ref_ds, double *naive_ds)
{
    const int64_t rows = c->batch * c->seqlen_q, dv = c->dim_v;
    for (int64_t h = 0; h < c->heads; ++h) {
        double r = 0.0;
        float n = 0.0f;
        for (int64_t i = 0; i < rows; ++i) {
            const int64_t at = (i * c->heads + h) * dv;
            double d_ref = 0.0;
            float d_naive = 0.0f;
            for (int64_t x = 0; x < dv; ++x) {
                const float g = dtype_load(c->dtype, dout, at + x);
                d_ref += (double)g * ref_o[at + x];
                d_naive += g * dtype_load(c->dtype, o, at + x);
            }
            if (ref_lse[h * rows + i] > -INFINITY)
                r -= exp((double)sink[h] - ref_lse[h * rows + i]) * d_ref;
            if (naive_lse[h * rows + i] > -INFINITY)
                n -= expf(sink[h] - (float)naive_lse[h * rows + i]) * d_naive;
        }
        ref_ds[h] = r;
        naive_ds[h] = n;
    }
}

/* Downloads inputs and outputs and hands the host copies, with the same options (the ALiBi slopes
 * and the sink logits as uploaded, from host memory), to the reference on a separate CPU context.
 * The reference writes [total, heads, d or d_v] rows b*seqlen + i, which is exactly the dense
 * contiguous layout used here; LSE comes back as [heads, total]. */
int run_check(const run_config *c, run_state *s, const fa_fwd_args *fwd, const fa_bwd_args *bwd, int64_t n_q,
              int64_t n_k, int64_t n_v, int64_t n_o)
{
    const char *cmd = "run";
    fa_dtype dt = c->dtype;
    int64_t n_lse = c->batch * c->heads * c->seqlen_q;
    size_t es = fa_dtype_size(dt);
    void *hq = run_host_alloc(s, (size_t)n_q * es), *hk = run_host_alloc(s, (size_t)n_k * es);
    void *hv = run_host_alloc(s, (size_t)n_v * es), *ho = run_host_alloc(s, (size_t)n_o * es);
    float *hlse = run_host_alloc(s, (size_t)n_lse * sizeof(float));
    void *hdo = NULL, *hdq = NULL, *hdk = NULL, *hdv = NULL;
    float *hds = NULL;
    if (bwd) {
        hdo = run_host_alloc(s, (size_t)n_o * es);
        hdq = run_host_alloc(s, (size_t)n_q * es);
        hdk = run_host_alloc(s, (size_t)n_k * es);
        hdv = run_host_alloc(s, (size_t)n_v * es);
        hds = c->sink ? run_host_alloc(s, (size_t)c->heads * sizeof(float)) : NULL;
    }
    if (!hq || !hk || !hv || !ho || !hlse || (bwd && (!hdo || !hdq || !hdk || !hdv || (c->sink && !hds)))) {
        fprintf(stderr, "flashattn run: --check: out of host memory\n");
        return EXIT_LIBRARY;
    }
    fa_status st;
    if ((st = device_download(s->ctx, &s->q, hq)) || (st = device_download(s->ctx, &s->k, hk)) ||
        (st = device_download(s->ctx, &s->v, hv)) || (st = device_download(s->ctx, &s->o, ho)) ||
        (st = device_download(s->ctx, &s->lse, hlse)) ||
        (bwd && ((st = device_download(s->ctx, &s->dout, hdo)) || (st = device_download(s->ctx, &s->dq, hdq)) ||
                 (st = device_download(s->ctx, &s->dk, hdk)) || (st = device_download(s->ctx, &s->dv, hdv)) ||
                 (hds && (st = device_download(s->ctx, &s->dsink, hds))))))
        return library_error(cmd, s->ctx, "--check: downloading the results", st);

    fa_context *cpu = NULL;
    st = fa_context_create(&cpu, "cpu", 0);
    if (st != FA_SUCCESS)
        return context_error(cmd, "cpu", 0, st);
    int rc = EXIT_LIBRARY, all_ok = 1;
    /* ref[0] / naive[0] hold O, then dQ; [1] LSE (then dsink's two values per head); [2] dK, [3] dV */
    double *ref[4] = {NULL, NULL, NULL, NULL}, *naive[4] = {NULL, NULL, NULL, NULL}, *got = NULL;
    double *ref_ds = NULL, *naive_ds = NULL;
    int64_t n_qo = n_q > n_o ? n_q : n_o, n_max = n_qo;
    n_max = n_k > n_max ? n_k : n_max;
    n_max = n_v > n_max ? n_v : n_max;
    n_max = n_lse > n_max ? n_lse : n_max;
    got = malloc(sizeof(double) * (size_t)(n_max ? n_max : 1));
    ref[0] = malloc(sizeof(double) * (size_t)(n_qo ? n_qo : 1));
    ref[1] = malloc(sizeof(double) * (size_t)(n_lse ? n_lse : 1));
    naive[0] = malloc(sizeof(double) * (size_t)(n_qo ? n_qo : 1));
    naive[1] = malloc(sizeof(double) * (size_t)(n_lse ? n_lse : 1));
    ref_ds = malloc(sizeof(double) * (size_t)c->heads);
    naive_ds = malloc(sizeof(double) * (size_t)c->heads);
    if (!got || !ref[0] || !ref[1] || !naive[0] || !naive[1] || !ref_ds || !naive_ds) {
        fprintf(stderr, "flashattn run: --check: out of host memory for the reference\n");
        goto done;
    }

    /* forward */
    fa_fwd_args hf = *fwd;
    hf.q.data = hq;
    hf.k.data = hk;
    hf.v.data = hv;
    hf.o.data = ho;
    hf.lse.data = hlse;
    hf.opts.alibi_slopes = s->alibi_host;
    hf.opts.learnable_sink = s->sink_host;
    progress_line line;
    if (!c->quiet)
        fprintf(stderr, "check: running the float64 reference forward...\n");
    progress_begin(&line, "reference forward", c->quiet);
    st = fa_oracle_forward(cpu, &hf, ref[0], ref[1], naive[0], naive[1], progress_report_units, &line);
    progress_end(&line);
    if (st != FA_SUCCESS) {
        rc = library_error(cmd, cpu, "--check: the float64 reference forward on the host copies", st);
        goto done;
    }
    to_doubles(dt, ho, n_o, got);
    const char *perturb = getenv("FA_TEST_RUN_CHECK_PERTURB");
    if (perturb && *perturb && n_o > 0)
        got[0] += strtod(perturb, NULL);
    all_ok &= report_error(c, s, "O", got, naive[0], ref[0], n_o, 2.0);
    all_ok &= report_lse_error(c, s, hlse, ref[1]);
    if (bwd && c->sink) /* before the backward's dQ takes ref[0]'s place */
        sink_gradients(c, s->sink_host, ref[0], ref[1], ho, naive[1], hdo, ref_ds, naive_ds);

    if (bwd) {
        fa_bwd_args hb = *bwd;
        hb.q.data = hq;
        hb.k.data = hk;
        hb.v.data = hv;
        hb.o.data = ho;
        hb.lse.data = hlse;
        hb.dout.data = hdo;
        hb.dq.data = hdq;
        hb.dk.data = hdk;
        hb.dv.data = hdv;
        hb.opts.alibi_slopes = s->alibi_host;
        hb.opts.learnable_sink = s->sink_host;
        memset(&hb.dsink, 0, sizeof hb.dsink); /* the oracle gives no dsink: sink_gradients' is used */
        for (int i = 2; i < 4; ++i) {
            int64_t n = i == 2 ? n_k : n_v;
            ref[i] = malloc(sizeof(double) * (size_t)(n ? n : 1));
            naive[i] = malloc(sizeof(double) * (size_t)(n ? n : 1));
        }
        if (!ref[2] || !ref[3] || !naive[2] || !naive[3]) {
            fprintf(stderr, "flashattn run: --check: out of host memory for the reference\n");
            goto done;
        }
        if (!c->quiet)
            fprintf(stderr, "check: running the float64 reference backward...\n");
        progress_begin(&line, "reference backward", c->quiet);
        st = fa_oracle_backward(cpu, &hb, ref[0], ref[2], ref[3], naive[0], naive[2], naive[3], progress_report_units,
                                &line);
        progress_end(&line);
        if (st != FA_SUCCESS) {
            rc = library_error(cmd, cpu, "--check: the float64 reference backward on the host copies", st);
            goto done;
        }
        to_doubles(dt, hdq, n_q, got);
        all_ok &= report_error(c, s, "dQ", got, naive[0], ref[0], n_q, 3.0);
        to_doubles(dt, hdk, n_k, got);
        all_ok &= report_error(c, s, "dK", got, naive[2], ref[2], n_k, 3.0);
        to_doubles(dt, hdv, n_v, got);
        all_ok &= report_error(c, s, "dV", got, naive[3], ref[3], n_v, 3.0);
        if (hds) {
            for (int64_t h = 0; h < c->heads; ++h)
                got[h] = hds[h];
            all_ok &= report_error(c, s, "dsink", got, naive_ds, ref_ds, c->heads, 3.0);
        }
    }
    s->report.check_ran = 1;
    if (all_ok) {
        rc = 0;
    } else {
        fprintf(stderr, "flashattn run: --check: an error exceeds its bound\n");
        remember_error("--check: an error exceeds its bound");
        rc = EXIT_CHECK_FAILED;
    }
done:
    free(got);
    free(ref_ds);
    free(naive_ds);
    for (int i = 0; i < 4; ++i) {
        free(ref[i]);
        free(naive[i]);
    }
    fa_context_destroy(cpu);
    return rc;
}
