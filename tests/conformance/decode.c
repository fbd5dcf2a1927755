/* decode.c: fa_forward_kvcache on one backend (public API only) against a float64 reference
 * written here from the header's definition: contiguous and paged caches (pages in shuffled
 * order), cache lengths 0, 1, odd and full, appended tokens 0, 1 and 7, rotary in both layouts and
 * partial, GQA and MQA, causal and windows, a batch index, one split and many, softcap; and
 * cache_leftpad (contiguous caches, NaN before each pad so that a read of it shows); the learnable
 * sink and a value head dim of its own (up to MLA's 576 / 512, and its latent cache: v_cache a view of
 * k_cache); ALiBi, per head and per sequence.
 * Checks:
 *   - O and LSE: max|kernel - ref64| <= 2 max|naive fp32 - ref64| + 1e-5 max(1, max|ref|), the
 *     conformance rule (naive: the same attention in fp32, scores and sums unfused);
 *   - the caches: appended rows equal k_new / v_new (rotated keys within one unit in the last place
 *     of the float64 rotation rounded to the dtype), every other byte unchanged;
 *   - bad arguments: the status, and o and the caches untouched.
 * Usage: decode --backend NAME [--filter SUBSTRING]. Exits 77 (SKIP, with the reason) when the
 * backend is not compiled in or has no device.
 * Files: this one the grid, its reference and main; decode_case.c the case's buffers;
 * decode_bad_input.c the bad arguments; decode_nan_rule.c the NaN rule. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode_case.h"

static const dcase cases[] = {
    {"contig-decode-bf16", B16, 3, 1, 8, 2, 64, 0, 300, {0, 1, 257}, 1, 0, 0, 0, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"contig-full-nolens-f16", F16, 2, 1, 4, 4, 40, 0, 129, {0}, 0, 0, 0, 0, -1, -1, 0, 0, 0, 1, 0, 0, 0, 0, 0},
    {"contig-full-lens-bf16", B16, 2, 3, 4, 1, 64, 0, 200, {-1, -1}, 0, 0, 0, 1, -1, -1, 0, 1, 0, 0, 0, 0, 0, 0, 0},
    {"contig-batchidx-append7-f16", F16, 3, 7, 6, 2, 64, 0, 90, {10, 0, 83}, 7, 0, 0, 1, -1, -1, 1, 3, 0, 0, 0, 0, 0, 0, 0},
    {"contig-rotary-half-causal-bf16", B16, 2, 5, 8, 2, 128, 0, 160, {31, 100}, 5, 128, 0, 1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"contig-rotary-partial-noncausal-f32", F32, 2, 3, 4, 2, 64, 0, 100, {17, 40}, 3, 32, 1, 0, -1, -1, 0, 4, 0, 0, 0, 0, 0, 0, 0},
    {"paged16-shuffled-decode-bf16", B16, 4, 1, 8, 1, 64, 16, 160, {0, 1, 33, 143}, 1, 0, 0, 0, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"paged64-append7-rotary-inter-f16", F16, 3, 7, 4, 2, 128, 64, 256, {63, 1, 200}, 7, 64, 1, 1, -1, -1, 0, 5, 0, 0, 0, 0, 0, 0, 0},
    {"paged256-window-mqa-bf16", B16, 2, 2, 6, 1, 64, 256, 512, {300, 511}, 1, 0, 0, 0, 40, 3, 0, 2, 0, 0, 0, 0, 0, 0, 0},
    {"paged16-chunked-causal-softcap-bf16", B16, 2, 33, 4, 2, 64, 16, 128, {50, 0}, 33, 16, 0, 1, -1, -1, 0, 0,
     30.0f, 0, 0, 0, 0, 0, 0},
    {"paged64-full-nosplit-f32", F32, 2, 1, 2, 2, 40, 64, 128, {-1, 64}, 0, 0, 0, 0, -1, -1, 0, 1, 0, 0, 0, 0, 0, 0, 0},
    {"contig-manysplits-long-bf16", B16, 1, 1, 32, 8, 128, 0, 2100, {2099}, 1, 128, 0, 0, -1, -1, 0, 16, 0, 0, 0, 0, 0, 0, 0},
    /* speculative decoding: two new tokens per sequence, causal and a window, so some rows see only
     * part of a key block */
    {"contig-spec2-causal-window-f16", F16, 2, 2, 8, 2, 64, 0, 300, {70, 200}, 2, 0, 0, 1, 40, -1, 0, 3, 0, 0, 0, 0, 0, 0, 0},
    {"paged32-decode-gqa4-rotary-f16", F16, 3, 1, 16, 4, 128, 32, 256, {255, 0, 97}, 1, 64, 1, 0, -1, -1, 0, 0, 0,
     0, 0, 0, 0, 0, 0},
    {"contig-decode-softcap-d48-f32", F32, 2, 1, 6, 2, 48, 0, 100, {98, 40}, 1, 0, 0, 0, -1, -1, 0, 0, 20.0f, 0, 0, 0, 0, 0, 0},
    {"contig-decode-d36-bf16", B16, 2, 1, 8, 2, 36, 0, 90, {50, 88}, 1, 0, 0, 0, -1, -1, 0, 2, 0, 0, 0, 0, 0, 0, 0},
    /* more splits asked for than there are keys: each backend uses what it can */
    {"contig-splits-beyond-keys-f32", F32, 2, 1, 4, 2, 64, 0, 80, {3, 70}, 1, 0, 0, 0, -1, -1, 0, 1 << 20, 0, 0, 0, 0, 0, 0, 0},
    /* head rows shorter than a kernel's head-dim bucket, NaN in the cache after each (16-byte
     * aligned strides): reading past d shows */
    {"contig-nanpad-d40-bf16", B16, 2, 1, 8, 2, 40, 0, 300, {299, 100}, 1, 0, 0, 0, -1, -1, 0, 0, 0, 0, 8, 0, 0, 0, 0},
    {"paged16-nanpad-d48-append-f16", F16, 2, 2, 4, 1, 48, 16, 64, {30, 0}, 2, 48, 0, 1, -1, -1, 0, 2, 0, 0, 16, 0, 0, 0, 0},
    /* a window whose first key is not a multiple of 16 in pages of 16: a kernel that reads 16 keys
     * from one page address must start them on a page's first key */
    {"paged16-window-unaligned-bf16", B16, 2, 1, 8, 2, 128, 16, 160, {150, 77}, 1, 0, 0, 0, 37, -1, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    /* pages of 48 tokens, not a power of two: a row inside a page is t % 48, not a bit mask */
    {"paged48-append3-causal-gqa-bf16", B16, 3, 3, 8, 2, 64, 48, 192, {47, 100, 0}, 3, 0, 0, 1, -1, -1, 0, 0, 0, 0,
     0, 0, 0, 0, 0},
    /* the learnable sink: sequence 0 of the first case sees no key (empty cache, nothing appended:
     * O = 0, LSE = sink); a dominating sink (+8) over pages with splits and softcap; a window that
     * leaves the speculative rows few keys */
    {"contig-sink-decode-gqa-emptyseq-bf16", B16, 3, 1, 8, 2, 64, 0, 300, {0, 5, 257}, 0, 0, 0, 0, -1, -1, 0, 0, 0, 0,
     0, 0, 1, 0, 0},
    {"paged16-sink8-splits-softcap-causal-f16", F16, 2, 2, 4, 2, 64, 16, 128, {50, 100}, 2, 0, 0, 1, -1, -1, 0, 4,
     30.0f, 0, 0, 0, 2, 0, 0},
    {"contig-sink-window-spec3-mqa-f32", F32, 2, 3, 4, 1, 40, 0, 100, {60, 0}, 3, 0, 0, 0, 5, 0, 0, 2, 0, 0, 0, 0, 1, 0, 0},
    /* a value head dim of its own: MLA's training dims with rotary keys and appended tokens, its
     * absorbed decode (d 576 over a 512-wide latent value) paged and contiguous with a sink and
     * splits, and values wider than keys with NaN after each cache head row */
    {"contig-dv-d192-dv128-append3-causal-rotary-bf16", B16, 2, 3, 8, 2, 192, 0, 150, {40, 100}, 3, 64, 0, 1, -1, -1,
     0, 0, 0, 0, 0, 128, 0, 0, 0},
    {"paged64-mla-d576-dv512-mqa-decode-bf16", B16, 2, 1, 16, 1, 576, 64, 256, {200, 37}, 1, 0, 0, 0, -1, -1, 0, 0,
     0, 0, 0, 512, 0, 0, 0},
    {"contig-mla-d576-dv512-sink-splits-causal-f16", F16, 2, 2, 8, 1, 576, 0, 128, {100, 0}, 1, 0, 0, 1, -1, -1, 0, 3,
     0, 0, 0, 512, 1, 0, 0},
    /* MLA-sized heads with the rest of the options: two row tiles of query heads, one split (the
     * sink folded in without the combine), a window, softcap and ALiBi, a value dim that leaves
     * output channel groups empty; GQA over pages of 16 with speculative rows, appends and NaN
     * after each cache head row */
    {"contig-mla-d512-dv448-sink-1split-window-softcap-alibi-bf16", B16, 2, 1, 32, 1, 512, 0, 300, {257, 33}, 1, 0, 0,
     0, 100, -1, 0, 1, 30.0f, 0, 0, 448, 1, 1, 0},
    {"paged16-mla-d576-dv512-gqa-spec4-append-nanpad-f16", F16, 2, 4, 8, 2, 576, 16, 128, {100, 20}, 4, 0, 0, 1, -1,
     -1, 0, 0, 0, 0, 8, 512, 0, 0, 0},
    /* MLA's latent cache: v_cache a view of k_cache's first dv channels; paged, two row tiles with
     * speculative rows, a sink and splits over NaN-padded rows, and a batch index with a window,
     * softcap and ALiBi */
    {"paged64-mla-sharedv-d576-dv512-mqa-decode-bf16", B16, 2, 1, 16, 1, 576, 64, 256, {200, 37}, 0, 0, 0, 0, -1, -1,
     0, 0, 0, 0, 0, 512, 0, 0, 1},
    {"contig-mla-sharedv-d576-dv512-spec2-sink-splits-nanpad-f16", F16, 2, 2, 16, 1, 576, 0, 300, {257, 90}, 0, 0, 0,
     1, -1, -1, 0, 3, 0, 0, 8, 512, 1, 0, 1},
    {"contig-mla-sharedv-d512-dv448-batchidx-window-softcap-alibi-bf16", B16, 2, 1, 32, 1, 512, 0, 300, {299, 64}, 0,
     0, 0, 0, 100, -1, 1, 0, 30.0f, 0, 0, 448, 0, 1, 1},
    /* 64 query heads of one KV head with two speculative rows each: 128 rows, two full tiles of the
     * Hopper MLA kernel's 64, causal over splits */
    {"contig-mla-sharedv-d576-dv512-heads64-spec2-splits-causal-bf16", B16, 2, 2, 64, 1, 576, 0, 200, {150, 77}, 0, 0,
     0, 1, -1, -1, 0, 3, 0, 0, 0, 512, 0, 0, 1},
    {"paged16-dv-d64-dv128-nanpad-sink-f32", F32, 2, 1, 4, 2, 64, 16, 64, {30, 62}, 1, 0, 0, 0, -1, -1, 0, 2, 0, 0, 8,
     128, 1, 0, 0},
    /* ALiBi: one slope per sequence and head over speculative rows, appended keys and splits; one
     * per head with softcap and a window over pages */
    {"contig-alibi-batch-spec3-append-causal-bf16", B16, 3, 3, 8, 2, 64, 0, 200, {50, 0, 150}, 3, 0, 0, 1, -1, -1, 0, 2,
     0, 0, 0, 0, 0, 2, 0},
    {"paged16-alibi-heads-softcap-window-f16", F16, 2, 1, 4, 4, 128, 16, 128, {100, 30}, 1, 0, 0, 0, 20, 0, 0, 3, 30.0f,
     0, 0, 0, 0, 1, 0},
    {"contig-alibi-batch-noncausal-gqa-f32", F32, 2, 2, 8, 2, 40, 0, 100, {70, 9}, 2, 0, 0, 0, -1, -1, 0, 0, 0, 0, 0, 0,
     1, 2, 0},
    /* chunked prefill: sequences of equal lengths in a run (the dense path batches them: one call
     * for sequences 0..2, another for 3), per-sequence ALiBi slopes, appended keys */
    {"contig-chunk-equal-lens-alibi-causal-bf16", B16, 4, 24, 8, 2, 64, 0, 200, {100, 100, 100, 37}, 24, 0, 0, 1, -1,
     -1, 0, 0, 0, 0, 0, 0, 0, 2, 0},
    /* values wider than keys on the path that widens rows into scratch (16 rows per kv head, d
     * not a multiple of 16) */
    {"contig-dv-d40-dv72-spec4-gqa-causal-f16", F16, 2, 4, 8, 2, 40, 0, 120, {60, 90}, 4, 0, 0, 1, -1, -1, 0, 2, 0, 0,
     0, 72, 0, 0, 0},
};

/* cache_leftpad cases: keys from pads[b] on (a pad equal to the length leaves the new keys only,
 * or none); rotary positions stay absolute */
static const struct {
    dcase c;
    int64_t pads[4];
} leftpad_cases[] = {
    {{"contig-leftpad-append3-causal-rotary-gqa-bf16", B16, 3, 3, 8, 2, 64, 0, 200, {40, 150, 7}, 3, 64, 0, 1, -1,
      -1, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {13, 0, 7}},
    {{"contig-leftpad-window-mqa-batchidx-splits-f16", F16, 2, 2, 4, 1, 128, 0, 300, {250, 90}, 1, 32, 1, 0, 50, 0,
      1, 4, 0, 0, 0, 0, 0, 0, 0}, {100, 89}},
    {{"contig-leftpad-noappend-empty-f32", F32, 2, 1, 4, 2, 64, 0, 130, {129, 64}, 0, 0, 0, 0, -1, -1, 0, 0, 0, 0,
      0, 0, 0, 0, 0}, {65, 64}},
    {{"contig-leftpad-nolens-softcap-bf16", B16, 2, 1, 8, 2, 64, 0, 100, {0}, 0, 0, 0, 0, -1, -1, 0, 2, 30.0f, 1, 0, 0,
      0, 0, 0}, {30, 99}},
    {{"contig-leftpad-long-decode-rotary-bf16", B16, 1, 1, 8, 2, 128, 0, 1000, {999}, 1, 128, 1, 0, -1, -1, 0, 0, 0,
      0, 0, 0, 0, 0, 0}, {300}},
};

/* ------------------------------------------------------------------ dtype helpers */

static double rounded(fa_dtype dt, double x)
{
    char buf[4];
    put(dt, buf, 0, x);
    return get(dt, buf, 0);
}

/* one unit in the last place of |x| in dtype dt */
static double ulp(fa_dtype dt, double x)
{
    int e;
    frexp(x, &e);
    int mant = dt == F32 ? 24 : dt == F16 ? 11 : 8;
    double u = ldexp(1.0, e - mant);
    double tiny = dt == F32 ? ldexp(1.0, -149) : dt == F16 ? ldexp(1.0, -24) : ldexp(1.0, -133);
    return u > tiny ? u : tiny;
}

/* ------------------------------------------------------------------ the reference */

static int visible(const dcase *c, int64_t i, int64_t t, int64_t sk)
{
    int64_t diag = i + sk - c->sn;
    const int64_t right = c->causal ? 0 : c->right; /* causal is a right window of 0 */
    if (t < 0 || t >= sk)
        return 0;
    if (c->left >= 0 && t < diag - c->left)
        return 0;
    if (right >= 0 && t > diag + right)
        return 0;
    return 1;
}

/* Rotates vector x (double) to position pos with the tables (dtype values). */
static void rotate64(const dcase *c, const void *cosb, const void *sinb, int64_t pos, double *x)
{
    int64_t half = c->rotary_dim / 2;
    for (int64_t i = 0; i < half; ++i) {
        int64_t cx = c->interleaved ? 2 * i : i, cy = c->interleaved ? 2 * i + 1 : i + half;
        double co = get(c->dtype, cosb, pos * half + i), si = get(c->dtype, sinb, pos * half + i);
        double a = x[cx], b = x[cy];
        x[cx] = a * co - b * si;
        x[cy] = a * si + b * co;
    }
}

/* Token t of sequence b, KV head `head`, in a cache whose head rows are row_len apart (h->dp for
 * keys, h->dvp for values). */
static int64_t token_offset(const dcase *c, const host_case *h, int64_t b, int64_t t, int64_t head, int64_t row_len)
{
    int64_t row, pos;
    if (c->page) {
        row = h->table[b * h->pages_per_seq + t / c->page];
        pos = t % c->page;
    } else {
        row = h->bidx ? h->bidx[b] : b;
        pos = t;
    }
    return ((row * h->rows + pos) * c->hkv + head) * row_len;
}

static int64_t cached_of(const dcase *c, const host_case *h, int64_t b)
{
    return h->lens ? h->lens[b] : c->capacity;
}

/* float64 (ref) and fp32 (naive) attention over the cache as the call left it (kc, vc). With a
 * sink, exp(sink_h) joins each row's sum of exponentials (the header's definition, written out
 * here): a row that sees no key gets O = 0 and LSE = sink_h. */
static void attention(const dcase *c, const host_case *h, const void *kc, const void *vc, int naive, double *o,
                      double *lse)
{
    const int64_t d = c->d, dv = h->dv, group = c->hq / c->hkv;
    const double scale = 1.0 / sqrt((double)d);
    const int advance = c->causal || c->left >= 0 || c->right >= 0;
    double *qv = malloc(sizeof(double) * (size_t)d), *s = malloc(sizeof(double) * (size_t)(c->capacity + 1));
    double *acc = malloc(sizeof(double) * (size_t)dv);
    for (int64_t b = 0; b < c->batch; ++b) {
        /* key t is cache position pad + t; the query's rotary position stays absolute */
        const int64_t cached = cached_of(c, h, b), pad = h->pads ? h->pads[b] : 0, sk = cached - pad + c->knew;
        for (int64_t hq = 0; hq < c->hq; ++hq)
            for (int64_t i = 0; i < c->sn; ++i) {
                for (int64_t e = 0; e < d; ++e)
                    qv[e] = get(c->dtype, h->q, ((b * c->sn + i) * c->hq + hq) * d + e);
                if (c->rotary_dim) {
                    rotate64(c, h->cos, h->sin, advance ? cached + i : cached, qv);
                    for (int64_t e = 0; e < c->rotary_dim; ++e)
                        qv[e] = rounded(c->dtype, qv[e]);
                }
                double mx = -INFINITY;
                for (int64_t t = 0; t < sk; ++t) {
                    if (!visible(c, i, t, sk)) {
                        s[t] = -INFINITY;
                        continue;
                    }
                    const int64_t off = token_offset(c, h, b, pad + t, hq / group, h->dp);
                    double x = 0;
                    float xf = 0;
                    for (int64_t e = 0; e < d; ++e) {
                        double kv = get(c->dtype, kc, off + e);
                        x += qv[e] * kv;
                        xf += (float)qv[e] * (float)kv;
                    }
                    x = naive ? (double)(xf * (float)scale) : x * scale;
                    if (c->softcap > 0)
                        x = naive ? (double)(c->softcap * tanhf((float)x / c->softcap)) : c->softcap * tanh(x / c->softcap);
                    if (h->slopes) { /* after the softcap: - slope |i + sk - sn - t| */
                        const float a = h->slopes[b * h->slope_stride + hq];
                        const int64_t dist = i + sk - c->sn - t;
                        x = naive ? (double)((float)x - a * (float)(dist < 0 ? -dist : dist))
                                  : x - (double)a * (double)(dist < 0 ? -dist : dist);
                    }
                    s[t] = x;
                    if (x > mx)
                        mx = x;
                }
                const double sink = h->sink ? (double)h->sink[hq] : -INFINITY;
                if (sink > mx)
                    mx = sink;
                double l = 0;
                float lf = 0;
                if (h->sink) { /* the sink's term of the sum; it carries no value */
                    l = exp(sink - mx);
                    lf = expf((float)(sink - mx));
                }
                for (int64_t e = 0; e < dv; ++e)
                    acc[e] = 0;
                for (int64_t t = 0; t < sk && mx > -INFINITY; ++t) {
                    if (s[t] == -INFINITY)
                        continue;
                    double p = naive ? (double)expf((float)(s[t] - mx)) : exp(s[t] - mx);
                    l += p;
                    lf += (float)p;
                    const int64_t off = token_offset(c, h, b, pad + t, hq / group, h->dvp);
                    for (int64_t e = 0; e < dv; ++e)
                        acc[e] = naive ? (double)((float)acc[e] + (float)p * (float)get(c->dtype, vc, off + e))
                                       : acc[e] + p * get(c->dtype, vc, off + e);
                }
                if (naive)
                    l = lf;
                const int64_t ro = ((b * c->sn + i) * c->hq + hq) * dv;
                for (int64_t e = 0; e < dv; ++e)
                    o[ro + e] = l > 0 ? (naive ? rounded(c->dtype, (float)acc[e] / (float)l) : acc[e] / l) : 0.0;
                lse[(b * c->hq + hq) * c->sn + i] = l > 0 ? mx + log(l) : -INFINITY;
            }
    }
    free(qv);
    free(s);
    free(acc);
}

/* The expected caches after the call. rot[i] > 0 for a rotated key element: what the rotation in
 * fp32 may differ by, besides one unit in the last place of the dtype: a few fp32 rounding errors
 * of the pair's terms, 2^-22 (|x| + |y|) (cancellation makes the result itself small). */
static void expected_caches(const dcase *c, const host_case *h, void *ek, void *ev, double *rot)
{
    const size_t es = esz(c->dtype);
    memcpy(ek, h->kc, es * (size_t)h->cn);
    memcpy(ev, h->vc, es * (size_t)h->cvn);
    for (int64_t i = 0; i < h->cn; ++i)
        rot[i] = 0;
    double x[FA_MAX_HEAD_DIM_KVCACHE], mag[FA_MAX_HEAD_DIM_KVCACHE];
    for (int64_t b = 0; b < c->batch; ++b)
        for (int64_t j = 0; j < c->knew; ++j) {
            const int64_t t = cached_of(c, h, b) + j;
            for (int64_t hk = 0; hk < c->hkv; ++hk) {
                const int64_t src = ((b * c->knew + j) * c->hkv + hk) * c->d, dst = token_offset(c, h, b, t, hk, h->dp);
                for (int64_t e = 0; e < c->d; ++e)
                    x[e] = get(c->dtype, h->kn, src + e);
                for (int64_t i = 0; i < c->rotary_dim / 2; ++i) {
                    int64_t cx = c->interleaved ? 2 * i : i, cy = c->interleaved ? 2 * i + 1 : i + c->rotary_dim / 2;
                    mag[cx] = mag[cy] = ldexp(fabs(x[cx]) + fabs(x[cy]), -22);
                }
                if (c->rotary_dim)
                    rotate64(c, h->cos, h->sin, t, x);
                for (int64_t e = 0; e < c->d; ++e) {
                    put(c->dtype, ek, dst + e, x[e]);
                    rot[dst + e] = e < c->rotary_dim ? mag[e] : 0.0;
                }
                const int64_t vsrc = ((b * c->knew + j) * c->hkv + hk) * h->dv, vdst = token_offset(c, h, b, t, hk, h->dvp);
                memcpy((char *)ev + es * (size_t)vdst, (const char *)h->vn + es * (size_t)vsrc, es * (size_t)h->dv);
            }
        }
}

/* cases the backend refused as unsupported (reported as skips, not passes) */
static int skipped;

static int run_case(fa_context *ctx, const dcase *c, uint64_t seed, const int64_t *pads)
{
    host_case h;
    make_host(c, &h, seed);
    if (pads)
        set_leftpad(c, &h, pads);
    dev_case x;
    int ok = 0;
    const size_t es = esz(c->dtype);
    void *ko = NULL, *vo = NULL, *oo = NULL, *lo = NULL, *ek = malloc(es * (size_t)h.cn), *ev = malloc(es * (size_t)h.cvn);
    double *rot = malloc(sizeof(double) * (size_t)h.cn);
    double *ref_o = malloc(sizeof(double) * (size_t)h.on), *nv_o = malloc(sizeof(double) * (size_t)h.on);
    const int64_t nl = c->batch * c->hq * c->sn;
    double *ref_l = malloc(sizeof(double) * (size_t)(nl + 1)), *nv_l = malloc(sizeof(double) * (size_t)(nl + 1));
    if (!make_dev(ctx, c, &h, &x)) {
        printf("  %s: cannot allocate device buffers\n", c->name);
        goto out;
    }
    fa_status st = fa_forward_kvcache(ctx, &x.a);
    if (st == FA_SUCCESS)
        st = fa_synchronize(ctx); /* where the device checks the arrays, their faults surface here */
    /* a backend without cache_leftpad, the sink, a value head dim of its own or the largest head
     * dims says so, and the case is a skip, never a pass */
    if (st == FA_ERR_UNSUPPORTED && (pads || c->sink || h.dv != c->d || c->d > FA_MAX_HEAD_DIM)) {
        printf("  SKIP %s: %s\n", c->name, fa_context_last_error(ctx));
        ++skipped;
        ok = 1;
        goto out;
    }
    if (st != FA_SUCCESS) {
        printf("  %s: fa_forward_kvcache: %s (%s)\n", c->name, fa_status_string(st), fa_context_last_error(ctx));
        goto out;
    }
    ko = back(ctx, x.a.k_cache.data, es * (size_t)h.cn);
    vo = back(ctx, x.a.v_cache.data, es * (size_t)h.cvn);
    oo = back(ctx, x.a.o.data, es * (size_t)h.on);
    lo = back(ctx, x.a.lse.data, sizeof(float) * (size_t)nl);
    if (!ko || !vo || !oo || !lo) {
        printf("  %s: cannot copy the results back\n", c->name);
        goto out;
    }
    /* the caches */
    expected_caches(c, &h, ek, ev, rot);
    for (int64_t i = 0; i < h.cn; ++i) {
        double want = get(c->dtype, ek, i), got = get(c->dtype, ko, i);
        int same = memcmp((char *)ek + es * (size_t)i, (char *)ko + es * (size_t)i, es) == 0;
        if (!same && !(rot[i] > 0 && fabs(got - want) <= ulp(c->dtype, want) + rot[i])) {
            printf("  %s: k_cache element %lld is %.9g, expected %.9g%s\n", c->name, (long long)i, got, want,
                   rot[i] > 0 ? " (rotated: one ulp and fp32 rounding allowed)" : " (bit-identical)");
            goto out;
        }
    }
    if (memcmp(ev, vo, es * (size_t)h.cvn) != 0) {
        printf("  %s: v_cache differs from the expected bytes\n", c->name);
        goto out;
    }
    /* O and LSE against the float64 reference over the cache the call left */
    attention(c, &h, ko, vo, 0, ref_o, ref_l);
    attention(c, &h, ko, vo, 1, nv_o, nv_l);
    double err = 0, nerr = 0, rmax = 0, lerr = 0, nlerr = 0, lmax = 0;
    for (int64_t i = 0; i < h.on; ++i) {
        double k = get(c->dtype, oo, i);
        if (!(fabs(k - ref_o[i]) <= err))
            err = isnan(k) ? INFINITY : fabs(k - ref_o[i]);
        nerr = fmax(nerr, fabs(nv_o[i] - ref_o[i]));
        rmax = fmax(rmax, fabs(ref_o[i]));
    }
    for (int64_t i = 0; i < nl; ++i) {
        double k = ((float *)lo)[i];
        if (isinf(ref_l[i]) || isinf(k)) {
            if (k != ref_l[i]) {
                printf("  %s: LSE %lld is %g, expected %g\n", c->name, (long long)i, k, ref_l[i]);
                goto out;
            }
            continue;
        }
        if (!(fabs(k - ref_l[i]) <= lerr))
            lerr = isnan(k) ? INFINITY : fabs(k - ref_l[i]);
        nlerr = fmax(nlerr, fabs(nv_l[i] - ref_l[i]));
        lmax = fmax(lmax, fabs(ref_l[i]));
    }
    double bound = 2 * nerr + 1e-5 * fmax(1.0, rmax), lbound = 2 * nlerr + 1e-5 * fmax(1.0, lmax);
    printf("  %s: O error %.3g (bound %.3g, naive %.3g), LSE error %.3g (bound %.3g)\n", c->name, err, bound, nerr,
           lerr, lbound);
    ok = err <= bound && lerr <= lbound;
out:
    free_dev(ctx, &x);
    free_host(&h);
    free(ko), free(vo), free(oo), free(lo), free(ek), free(ev), free(rot), free(ref_o), free(nv_o), free(ref_l), free(nv_l);
    return ok;
}

int main(int argc, char **argv)
{
    const char *backend = "cpu", *filter = NULL;
    int only_device_check = 0;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--backend") && i + 1 < argc)
            backend = argv[++i];
        else if (!strcmp(argv[i], "--filter") && i + 1 < argc)
            filter = argv[++i];
        else if (!strcmp(argv[i], "--device-check"))
            only_device_check = 1;
        else {
            fprintf(stderr, "usage: %s [--backend NAME] [--filter SUBSTRING] [--device-check]\n", argv[0]);
            return 2;
        }
    }
    fa_context *ctx = NULL;
    fa_status st = fa_context_create(&ctx, backend, 0);
    if (st == FA_ERR_NO_BACKEND || st == FA_ERR_NO_DEVICE) {
        printf("SKIP: backend %s: %s (%s)\n", backend, fa_status_string(st), fa_last_error());
        return 77;
    }
    if (st != FA_SUCCESS) {
        printf("backend %s: %s (%s)\n", backend, fa_status_string(st), fa_last_error());
        return 1;
    }
    fa_capabilities caps;
    memset(&caps, 0, sizeof caps);
    if (fa_backend_capabilities(backend, &caps) == FA_SUCCESS && !(caps.features & FA_FEATURE_KVCACHE)) {
        printf("SKIP: backend %s has no fa_forward_kvcache (FA_FEATURE_KVCACHE)\n", backend);
        fa_context_destroy(ctx);
        return 77;
    }
    int failures = 0, run = 0;
    /* passes: check_on_device 0, then 1 on backends that offer it (--device-check: 1 alone; a
     * backend without it checks on the host then, and the bad calls fail at once) */
    const int has_device_check = (caps.features & FA_FEATURE_KVCACHE_DEVICE_CHECK) != 0;
    for (int pass = only_device_check; pass <= (has_device_check || only_device_check); ++pass) {
        device_check = pass;
        printf("decode on %s, check_on_device %d%s\n", backend, pass,
               pass && !has_device_check ? " (the backend checks on the host)" : "");
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
            if (filter && !strstr(cases[i].name, filter))
                continue;
            ++run;
            if (!run_case(ctx, &cases[i], 1000 + i, NULL)) {
                printf("  FAILED %s%s\n", cases[i].name, pass ? " (checked on the device)" : "");
                ++failures;
            }
        }
        for (size_t i = 0; i < sizeof leftpad_cases / sizeof leftpad_cases[0]; ++i) {
            const dcase *c = &leftpad_cases[i].c;
            if (filter && !strstr(c->name, filter))
                continue;
            ++run;
            if (!run_case(ctx, c, 2000 + i, leftpad_cases[i].pads)) {
                printf("  FAILED %s%s\n", c->name, pass ? " (checked on the device)" : "");
                ++failures;
            }
        }
        if (!filter || strstr("bad", filter))
            failures += run_bad(ctx, pass && has_device_check);
        if (!filter || strstr("nan", filter)) {
            if (!strcmp(backend, "hip"))
                printf("  SKIP nan rule: the HIP decode kernels (CUDA's source) have not been run on an AMD GPU yet\n");
            else
                failures += run_nan_rule(ctx, F32) + run_nan_rule(ctx, B16);
        }
    }
    fa_context_destroy(ctx);
    printf("%d case(s) run, %d of them skipped (unsupported), %d failure(s)\n", run, skipped, failures);
    return failures ? 1 : 0;
}
