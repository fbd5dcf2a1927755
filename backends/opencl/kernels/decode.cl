/* decode.cl: fa_forward_kvcache on OpenCL (FA_KERNELS == 5): correct first, simple, and the same
 * arithmetic as the CPU backend (backends/cpu/kvcache.c):
 *   fa_kv_append   one work-item per (sequence, new token, kv head, channel): k_new rotated in
 *                  fp32 and rounded to the dtype, v_new copied, into the cache;
 *   fa_kv_decode   one work-item per (query row, split): q rotated, rounded and scaled, then the
 *                  online softmax over the split's keys with a private accumulator of FA_D_V
 *                  floats; one split writes O and LSE, several write fp32 partials
 *                  [row][split][d_v + 1];
 *   fa_kv_combine  one work-item per (query row, channel): the splits merged by their LSE.
 * q and the keys have FA_D channels, the values and o FA_D_V (MLA's absorbed decode: 576 / 512);
 * no __local memory, so every head dim up to FA_MAX_HEAD_DIM_KVCACHE compiles. With FA_SINK the
 * learnable sink is folded in where a row's LSE is final (core/sink.h): in fa_kv_decode for one
 * split, in fa_kv_combine after the merge. The parameter block is fa_ocl_kv_param's (params.h);
 * rotary.h, mask.h, score_mod.h and sink.h are prepended by the build. */
#if FA_KERNELS == 5
#define FA_DKV (FA_D > FA_D_V ? FA_D : FA_D_V) /* channels fa_kv_append covers per token and head */

static inline fa_ocl_view fa_kv_view(__global const long *prm, int t)
{
    return fa_view_at(prm, FA_KV_TENSORS, t);
}

static inline long fa_kv_cached(__global const long *prm, __global const int *ints, long b)
{
    return prm[FA_KV_HAS_SEQLENS] ? (long)ints[prm[FA_KV_CS_OFF] + b] : prm[FA_KV_SEQLEN_CACHE];
}

/* The cache position of sequence b's first key (cache_leftpad; 0 without it). */
static inline long fa_kv_leftpad(__global const long *prm, __global const int *ints, long b)
{
    return prm[FA_KV_HAS_LEFTPAD] ? (long)ints[prm[FA_KV_LP_OFF] + b] : 0;
}

/* Element offset of token t, kv head h of sequence b in a cache view. */
static inline long fa_kv_token(__global const long *prm, __global const int *ints, fa_ocl_view c, long b, long t, long h)
{
    if (prm[FA_KV_PAGED]) {
        const long ps = prm[FA_KV_PAGE_SIZE];
        const long page = ints[prm[FA_KV_BT_OFF] + b * prm[FA_KV_BT_STRIDE] + t / ps];
        return c.off + page * c.sb + (t % ps) * c.ss + h * c.sh;
    }
    const long row = prm[FA_KV_HAS_BIDX] ? (long)ints[prm[FA_KV_BI_OFF] + b] : b;
    return c.off + row * c.sb + t * c.ss + h * c.sh;
}

/* Channel c of the row at off rotated to position pos (fp32). */
static inline float fa_kv_rotated(__global const long *prm, __global const fa_store_t *x, long off, int c, long pos,
                                  __global const fa_store_t *cosb, __global const fa_store_t *sinb)
{
    const int rd = (int)prm[FA_KV_ROTARY_DIM];
    if (c >= rd)
        return FA_LOAD(x, off + c);
    const int inter = (int)prm[FA_KV_ROTARY_INTERLEAVED], i = fa_rotary_pair_of(inter, rd, c);
    int cx, cy;
    fa_rotary_pair(inter, rd, i, &cx, &cy);
    float vx = FA_LOAD(x, off + cx), vy = FA_LOAD(x, off + cy);
    fa_rotary_apply(FA_LOAD(cosb, prm[FA_KV_COS_OFF] + pos * prm[FA_KV_COS_STRIDE] + i),
                    FA_LOAD(sinb, prm[FA_KV_SIN_OFF] + pos * prm[FA_KV_SIN_STRIDE] + i), &vx, &vy);
    return c == cx ? vx : vy;
}

/* x rounded to the dtype (what storing it keeps) */
static inline float fa_kv_round(float x)
{
#if FA_DTYPE == 0
    return x;
#elif FA_DTYPE == 1
    ushort u; /* half storage without cl_khr_fp16, as common.cl's fa_load4 */
    vstore_half_rte(x, 0, (half *)&u);
    return vload_half(0, (const half *)&u);
#else
    return as_float((uint)fa_float_to_bf16(x) << 16);
#endif
}

/* global: (tokens x heads_kv x FA_DKV, rounded up), batch; channel c of k below FA_D, of v below
 * FA_D_V */
__kernel void fa_kv_append(__global const long *prm, __global const fa_store_t *kn, __global const fa_store_t *vn,
                           __global fa_store_t *kc, __global fa_store_t *vc, __global const int *ints,
                           __global const fa_store_t *cosb, __global const fa_store_t *sinb)
{
    const long e = get_global_id(0), b = get_global_id(1);
    const long hk = prm[FA_KV_HEADS_KV], knew = prm[FA_KV_SEQLEN_KNEW];
    if (e >= knew * hk * FA_DKV)
        return;
    const long j = e / (hk * FA_DKV), h = e / FA_DKV % hk;
    const int c = (int)(e % FA_DKV);
    const long t = fa_kv_cached(prm, ints, b) + j;
    const fa_ocl_view vkn = fa_kv_view(prm, FA_KT_KN), vvn = fa_kv_view(prm, FA_KT_VN);
    const long src = vkn.off + b * vkn.sb + j * vkn.ss + h * vkn.sh, vsrc = vvn.off + b * vvn.sb + j * vvn.ss + h * vvn.sh;
    if (c < FA_D) {
        const float k = prm[FA_KV_ROTARY_DIM] ? fa_kv_rotated(prm, kn, src, c, t, cosb, sinb) : FA_LOAD(kn, src + c);
        FA_STORE(kc, fa_kv_token(prm, ints, fa_kv_view(prm, FA_KT_KC), b, t, h) + c, k);
    }
    if (c < FA_D_V)
        FA_STORE(vc, fa_kv_token(prm, ints, fa_kv_view(prm, FA_KT_VC), b, t, h) + c, FA_LOAD(vn, vsrc + c));
}

/* global: (rows of one sequence = heads_q x seqlen_new) x splits (rounded up), batch */
__kernel void fa_kv_decode(__global const long *prm, float scale, __global const fa_store_t *q,
                           __global const fa_store_t *kc, __global const fa_store_t *vc, __global fa_store_t *o,
                           __global float *lse, __global float *partial, __global const int *ints,
                           __global const fa_store_t *cosb, __global const fa_store_t *sinb,
                           __global const float *slopes, __global const float *sink)
{
    const long sn = prm[FA_KV_SEQLEN_NEW], hq = prm[FA_KV_HEADS_Q], splits = prm[FA_KV_SPLITS];
    const long id = get_global_id(0), b = get_global_id(1);
    if (id >= hq * sn * splits)
        return;
    const long split = id % splits, row = id / splits, h = row / sn, i = row % sn;
    const long hk = h / prm[FA_KV_GROUP];
    /* key t is cache position pad + t (cache_leftpad); the masks count keys, rotary positions */
    const long cached = fa_kv_cached(prm, ints, b), pad = fa_kv_leftpad(prm, ints, b);
    const long sk = cached - pad + prm[FA_KV_SEQLEN_KNEW];
    const int advance = prm[FA_KV_CAUSAL] || prm[FA_KV_WINDOW_LEFT] >= 0 || prm[FA_KV_WINDOW_RIGHT] >= 0;
    const fa_ocl_view vq = fa_kv_view(prm, FA_KT_Q), vkc = fa_kv_view(prm, FA_KT_KC), vvc = fa_kv_view(prm, FA_KT_VC);
    float qr[FA_D], acc[FA_D_V];
    const long qoff = vq.off + b * vq.sb + i * vq.ss + h * vq.sh;
    for (int c = 0; c < FA_D; ++c) {
        const float x = prm[FA_KV_ROTARY_DIM]
                            ? fa_kv_round(fa_kv_rotated(prm, q, qoff, c, advance ? cached + i : cached, cosb, sinb))
                            : FA_LOAD(q, qoff + c);
        qr[c] = x * scale;
    }
    for (int c = 0; c < FA_D_V; ++c)
        acc[c] = 0.0f;
    const fa_mask m = fa_mask_make(sn, sk, (int)prm[FA_KV_CAUSAL], prm[FA_KV_WINDOW_LEFT], prm[FA_KV_WINDOW_RIGHT]);
    long lo, hi;
    fa_mask_row_range(&m, i, &lo, &hi);
    const long per = (sk + splits - 1) / splits;
    const long k_lo = max(lo, min(split * per, sk)), k_hi = min(hi, min(split * per + per, sk));
#if FA_SCORE_MOD
    const fa_score_mod_factors f = fa_score_mod_prepare(*(__global const fa_score_mod *)(prm + FA_KV_MOD), 1.0f);
    const fa_score_mod_state sm =
        fa_score_mod_begin(f, f.alibi ? slopes[prm[FA_KV_ALIBI_OFF] + fa_alibi_slope_index(f, b, h)] : 0.0f, sk - sn);
#else
    (void)slopes;
#endif
    float mx = -INFINITY, l = 0.0f;
    for (long t = k_lo; t < k_hi; ++t) {
        const long ko = fa_kv_token(prm, ints, vkc, b, pad + t, hk), vo = fa_kv_token(prm, ints, vvc, b, pad + t, hk);
        float s = 0.0f;
        for (int c = 0; c < FA_D; ++c)
            s += qr[c] * FA_LOAD(kc, ko + c);
#if FA_SCORE_MOD
        float grad;
        s = fa_score_mod_apply_at(&sm, s, i, t, &grad);
#endif
        const float mnew = fmax(mx, s);
        const float alpha = mx == -INFINITY ? 0.0f : exp(mx - mnew), w = exp(s - mnew);
        l = l * alpha + w;
        for (int c = 0; c < FA_D_V; ++c)
            acc[c] = acc[c] * alpha + w * FA_LOAD(vc, vo + c);
        mx = mnew;
    }
    /* l is 0 only when the row saw no key; NaN (from a NaN score) stays NaN in o and lse */
    float inv = l == 0.0f ? 0.0f : 1.0f / l, lrow = l == 0.0f ? -INFINITY : mx + log(l);
    if (splits > 1) {
        __global float *dst = partial + ((b * hq + h) * sn * splits + i * splits + split) * (FA_D_V + 1);
        for (int c = 0; c < FA_D_V; ++c)
            dst[c] = acc[c] * inv;
        dst[FA_D_V] = lrow;
        return;
    }
#if FA_SINK
    {
        const float lse0 = lrow;
        lrow = fa_sink_lse(lse0, sink[prm[FA_KV_SINK_OFF] + h]);
        inv *= fa_sink_factor(lse0, lrow);
    }
#else
    (void)sink;
#endif
    const fa_ocl_view vo_ = fa_kv_view(prm, FA_KT_O);
    const long ooff = vo_.off + b * vo_.sb + i * vo_.ss + h * vo_.sh;
    for (int c = 0; c < FA_D_V; ++c)
        FA_STORE(o, ooff + c, acc[c] * inv);
    if (prm[FA_KV_HAS_LSE]) {
        const fa_ocl_view vl = fa_kv_view(prm, FA_KT_LSE);
        lse[vl.off + b * vl.sb + h * vl.sh + i * vl.ss] = lrow;
    }
}

/* global: (rows x FA_D_V, rounded up), batch */
__kernel void fa_kv_combine(__global const long *prm, __global const float *partial, __global fa_store_t *o,
                            __global float *lse, __global const float *sink)
{
    const long sn = prm[FA_KV_SEQLEN_NEW], hq = prm[FA_KV_HEADS_Q], splits = prm[FA_KV_SPLITS];
    const long id = get_global_id(0), b = get_global_id(1);
    if (id >= hq * sn * FA_D_V)
        return;
    const int c = (int)(id % FA_D_V);
    const long row = id / FA_D_V, h = row / sn, i = row % sn;
    __global const float *part = partial + ((b * hq + h) * sn + i) * splits * (FA_D_V + 1);
    float mx = -INFINITY;
    for (long s = 0; s < splits; ++s) {
        const float ls = part[s * (FA_D_V + 1) + FA_D_V];
        mx = ls > mx || isnan(ls) ? ls : mx; /* a NaN part makes the row NaN */
    }
    float sum = 0.0f, a = 0.0f;
    if (mx != -INFINITY)
        for (long s = 0; s < splits; ++s) {
            const float ls = part[s * (FA_D_V + 1) + FA_D_V];
            if (ls == -INFINITY)
                continue;
            const float w = exp(ls - mx);
            sum += w;
            a += w * part[s * (FA_D_V + 1) + c];
        }
    float out = sum == 0.0f ? 0.0f : a / sum, lrow = sum == 0.0f ? -INFINITY : mx + log(sum);
#if FA_SINK
    {
        const float lse0 = lrow;
        lrow = fa_sink_lse(lse0, sink[prm[FA_KV_SINK_OFF] + h]);
        out *= fa_sink_factor(lse0, lrow);
    }
#else
    (void)sink;
#endif
    const fa_ocl_view vo_ = fa_kv_view(prm, FA_KT_O);
    FA_STORE(o, vo_.off + b * vo_.sb + i * vo_.ss + h * vo_.sh + c, out);
    if (c == 0 && prm[FA_KV_HAS_LSE]) {
        const fa_ocl_view vl = fa_kv_view(prm, FA_KT_LSE);
        lse[vl.off + b * vl.sb + h * vl.sh + i * vl.ss] = lrow;
    }
}

#endif
