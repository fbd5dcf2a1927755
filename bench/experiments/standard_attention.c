/* standard_attention.c: the benchmark baseline, standard attention that materialises S and P
 * (N x N fp32 per head) in three passes: S = scale * Q K^T, P = softmax(S) row by row, O = P V.
 * The matrix products, exp and the row softmax use the library's own kernel table (backends/cpu
 * isa.h, the same table a library context takes on this CPU, FLASHATTN_CPU_ISA included) on
 * packed panels with cache blocking, so a comparison with the fused path measures
 * materialisation and its memory traffic, not a weaker matmul. */
#include "standard_attention.h"

/* the library's own kernel tables and parallel loop (backends/cpu), so the baseline computes with
 * exactly the code the fused kernels use */
#include "isa.h"
#include "pool.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NR FA_CPU_PANEL
#define ROWS 64     /* query rows per task */
#define KC 256      /* depth of one block of the P V product (a V panel block stays in L1) */

static int64_t fa_round_up(int64_t x, int64_t m)
{
    return (x + m - 1) / m * m;
}

/* S rows [0, nr) of one head, panels [0, npanels): S = scale * Q K^T. Q rows have stride ldq,
 * ktp holds K^T as panels of d x 16. */
static void scores_rows(const fa_cpu_isa *isa, const float *q, int64_t ldq, int64_t nr, const float *ktp, int64_t d,
                        int64_t npanels, float *s, int64_t ld, float scale)
{
    isa->gemm_panels(nr, npanels * NR, d, q, ldq, ktp, d * NR, s, ld, 0, NULL, 0);
    for (int64_t i = 0; i < nr; ++i)
        isa->scale_row(s + i * ld, npanels * NR, scale);
}

/* P row = softmax(S row[0, lim)); P[lim, zero_to) = 0 so a row block's product with V may read
 * a few columns past a row's causal limit (the row has room for lim rounded up to 16). lim = 0 (a
 * fully masked row) gives P = 0. */
static void softmax_row(const fa_cpu_isa *isa, const float *s, float *p, int64_t lim, int64_t zero_to)
{
    int64_t w = fa_round_up(lim, NR);
    fa_softmax_row row = fa_softmax_init();
    if (lim > 0) {
        memcpy(p, s, sizeof(float) * (size_t)lim);
        for (int64_t j = lim; j < w; ++j)
            p[j] = -INFINITY; /* exp gives 0 */
        float rescaled[NR] = {0}; /* a fresh row has no output to rescale */
        isa->online_softmax_tile(p, 1, w, w, &row, rescaled, NR);
    }
    if (lim == 0 || row.m == -INFINITY) {
        memset(p, 0, sizeof(float) * (size_t)(zero_to > w ? zero_to : w));
        return;
    }
    isa->scale_row(p, w, 1.0f / row.l);
    if (zero_to > w)
        memset(p + w, 0, sizeof(float) * (size_t)(zero_to - w));
}

/* obuf[nr x d_pad] = P[nr x klim] V[klim x d_pad]; vp holds V as panels of ld x 16 (ld rows). */
static void pv_rows(const fa_cpu_isa *isa, const float *p, int64_t ld, int64_t nr, int64_t klim, const float *vp,
                    int64_t ncp, float *obuf, int64_t d_pad)
{
    if (klim <= 0) {
        memset(obuf, 0, sizeof(float) * (size_t)(nr * d_pad));
        return;
    }
    for (int64_t k0 = 0; k0 < klim; k0 += KC) {
        int64_t kc = klim - k0 < KC ? klim - k0 : KC;
        isa->gemm_panels(nr, ncp * NR, kc, p + k0, ld, vp + k0 * NR, ld * NR, obuf, d_pad, k0 > 0, NULL, 0);
    }
}

/* ------------------------------------------------------------------ threads */

/* ------------------------------------------------------------------ the passes */

typedef struct sa_run {
    const sa_problem *p;
    const fa_cpu_isa *isa;
    sa_workspace *ws;
    float scale;
    int64_t nblocks; /* row blocks of ROWS query rows per head */
    int64_t offset;  /* seqlen_k - seqlen_q */
} sa_run;

static int64_t key_limit(const sa_run *r, int64_t i)
{
    int64_t sk = r->p->seqlen_k;
    if (!r->p->causal)
        return sk;
    int64_t lim = i + r->offset + 1;
    return lim < 0 ? 0 : lim > sk ? sk : lim;
}

/* K^T and V of one (batch, head) into 16-wide panels, zero-padded. */
static void pack_task(void *argp, int64_t bh, float *scratch)
{
    (void)scratch;
    const sa_run *r = argp;
    const sa_problem *p = r->p;
    sa_workspace *ws = r->ws;
    int64_t b = bh / p->heads, h = bh % p->heads, d = p->d, sk = p->seqlen_k, ld = ws->ld;
    int64_t rs = p->heads * d; /* row stride of K, V */
    const float *k = p->k + b * sk * rs + h * d, *v = p->v + b * sk * rs + h * d;
    float *ktp = ws->kt_packed + bh * ld * d, *vp = ws->v_packed + bh * ld * ws->d_pad;
    for (int64_t jp = 0; jp < ld / NR; ++jp) {
        float *panel = ktp + jp * d * NR;
        for (int64_t l = 0; l < NR; ++l) {
            int64_t j = jp * NR + l;
            for (int64_t c = 0; c < d; ++c)
                panel[c * NR + l] = j < sk ? k[j * rs + c] : 0.0f;
        }
    }
    for (int64_t cp = 0; cp < ws->d_pad / NR; ++cp) {
        float *panel = vp + cp * ld * NR;
        for (int64_t j = 0; j < ld; ++j)
            for (int64_t l = 0; l < NR; ++l) {
                int64_t c = cp * NR + l;
                panel[j * NR + l] = j < sk && c < d ? v[j * rs + c] : 0.0f;
            }
    }
}

static void block_of(const sa_run *r, int64_t task, int64_t *bh, int64_t *i0, int64_t *nr)
{
    *bh = task / r->nblocks;
    *i0 = task % r->nblocks * ROWS;
    int64_t left = r->p->seqlen_q - *i0;
    *nr = left < ROWS ? left : ROWS;
}

static void scores_task(void *argp, int64_t task, float *scratch)
{
    (void)scratch;
    const sa_run *r = argp;
    const sa_problem *p = r->p;
    int64_t bh, i0, nr;
    block_of(r, task, &bh, &i0, &nr);
    int64_t b = bh / p->heads, h = bh % p->heads, ld = r->ws->ld;
    int64_t klim = key_limit(r, i0 + nr - 1);
    const float *q = p->q + (b * p->seqlen_q + i0) * p->heads * p->d + h * p->d;
    float *s = r->ws->s + (bh * p->seqlen_q + i0) * ld;
    scores_rows(r->isa, q, p->heads * p->d, nr, r->ws->kt_packed + bh * ld * p->d, p->d, fa_round_up(klim, NR) / NR, s, ld,
                r->scale);
}

static void softmax_task(void *argp, int64_t task, float *scratch)
{
    (void)scratch;
    const sa_run *r = argp;
    const sa_problem *p = r->p;
    int64_t bh, i0, nr;
    block_of(r, task, &bh, &i0, &nr);
    int64_t ld = r->ws->ld, zero_to = key_limit(r, i0 + nr - 1);
    for (int64_t i = i0; i < i0 + nr; ++i) {
        int64_t off = (bh * p->seqlen_q + i) * ld;
        softmax_row(r->isa, r->ws->s + off, r->ws->p + off, key_limit(r, i), zero_to);
    }
}

static void pv_task(void *argp, int64_t task, float *obuf)
{
    const sa_run *r = argp;
    const sa_problem *p = r->p;
    int64_t bh, i0, nr;
    block_of(r, task, &bh, &i0, &nr);
    int64_t b = bh / p->heads, h = bh % p->heads, ld = r->ws->ld, dp = r->ws->d_pad;
    pv_rows(r->isa, r->ws->p + (bh * p->seqlen_q + i0) * ld, ld, nr, key_limit(r, i0 + nr - 1),
            r->ws->v_packed + bh * ld * dp, dp / NR, obuf, dp);
    for (int64_t i = 0; i < nr; ++i)
        memcpy(p->o + (b * p->seqlen_q + i0 + i) * p->heads * p->d + h * p->d, obuf + i * dp,
               sizeof(float) * (size_t)p->d);
}

/* ------------------------------------------------------------------ API */

static void sizes(const sa_problem *p, int64_t *ld, int64_t *dp, int64_t *floats_sp, int64_t *floats_pack)
{
    *ld = fa_round_up(p->seqlen_k, NR);
    *dp = fa_round_up(p->d, NR);
    *floats_sp = p->batch * p->heads * p->seqlen_q * *ld;
    *floats_pack = p->batch * p->heads * *ld * (p->d + *dp);
}

int64_t sa_workspace_bytes(const sa_problem *p)
{
    int64_t ld, dp, sp, pack;
    sizes(p, &ld, &dp, &sp, &pack);
    return (2 * sp + pack) * (int64_t)sizeof(float);
}

int sa_workspace_alloc(sa_workspace *ws, const sa_problem *p)
{
    int64_t sp, pack;
    memset(ws, 0, sizeof *ws);
    sizes(p, &ws->ld, &ws->d_pad, &sp, &pack);
    ws->s = malloc(sizeof(float) * (size_t)(sp > 0 ? sp : 1));
    ws->p = malloc(sizeof(float) * (size_t)(sp > 0 ? sp : 1));
    ws->kt_packed = malloc(sizeof(float) * (size_t)(pack > 0 ? pack : 1));
    ws->v_packed = ws->kt_packed + p->batch * p->heads * ws->ld * p->d;
    if (!ws->s || !ws->p || !ws->kt_packed) {
        sa_workspace_free(ws);
        return -1;
    }
    /* first touch here, not in the timed calls */
    memset(ws->s, 0, sizeof(float) * (size_t)sp);
    memset(ws->p, 0, sizeof(float) * (size_t)sp);
    memset(ws->kt_packed, 0, sizeof(float) * (size_t)pack);
    ws->bytes = (2 * sp + pack) * (int64_t)sizeof(float);
    return 0;
}

void sa_workspace_free(sa_workspace *ws)
{
    free(ws->s);
    free(ws->p);
    free(ws->kt_packed);
    memset(ws, 0, sizeof *ws);
}

int sa_forward(const sa_problem *p, sa_workspace *ws, int threads)
{
    if (!p || !ws || !p->q || !p->k || !p->v || !p->o || p->batch < 0 || p->heads < 1 || p->d < 1 ||
        p->seqlen_q < 0 || p->seqlen_k < 0 || threads < 1)
        return -1;
    if (ws->ld != fa_round_up(p->seqlen_k, NR) || ws->d_pad != fa_round_up(p->d, NR))
        return -1;
    sa_run r = {.p = p, .ws = ws, .scale = p->scale != 0.0f ? p->scale : 1.0f / sqrtf((float)p->d)};
    r.isa = fa_cpu_isa_select(NULL);
    if (!r.isa) /* FLASHATTN_CPU_ISA names a table this CPU lacks: the library refuses it too */
        return -1;
    r.nblocks = (p->seqlen_q + ROWS - 1) / ROWS;
    r.offset = p->seqlen_k - p->seqlen_q;
    int64_t bh = p->batch * p->heads, ntasks = bh * r.nblocks;
    if (ntasks == 0)
        return 0;
    int nt = threads < FA_POOL_MAX_THREADS ? threads : FA_POOL_MAX_THREADS;
    float *obuf = malloc(sizeof(float) * (size_t)(nt * ROWS * ws->d_pad));
    if (!obuf)
        return -1;
    fa_parallel_for(threads, bh, pack_task, &r, NULL, 0);
    fa_parallel_for(threads, ntasks, scores_task, &r, NULL, 0);
    fa_parallel_for(threads, ntasks, softmax_task, &r, NULL, 0);
    fa_parallel_for(threads, ntasks, pv_task, &r, obuf, ROWS * ws->d_pad);
    free(obuf);
    return 0;
}
