/* backward_vec.cl: the same deterministic backward for CPU devices (PoCL), one work-item per tile
 * computing with float8 4 x 16 register blocks like forward_vec.cl: fa_backward_dkdv_vec (one key
 * tile: S = Q K^T, P from LSE, dP = dO V^T, dV += (P o Z)^T dO, dS = P o (Z o dP - D) scale,
 * dK += dS^T Q, over every query tile and query head of the GQA group in order) and
 * fa_backward_dq_vec (one query tile: the same recomputation, dQ += dS K). D comes from
 * fa_backward_dsum (backward.cl). FA_BM and FA_BN are multiples of 16; the head dims are padded
 * with zeros to multiples of 16: d (Q, K, dQ, dK) to FA_DQP, d_v (V, dO, dV) to FA_DVP. */
#if FA_KERNELS == 4
#define FA_DQP ((FA_D + 15) / 16 * 16)
#define FA_DVP ((FA_D_V + 15) / 16 * 16)
#define FA_DMP (FA_DQP > FA_DVP ? FA_DQP : FA_DVP)

/* Eight consecutive elements of a tensor widened to fp32 (FA_LOAD's rule, one vector load). */
#if FA_DTYPE == 0
#define FA_LOAD8(p, i) vload8(0, (p) + (i))
#elif FA_DTYPE == 1
#define FA_LOAD8(p, i) vload_half8(0, (p) + (i))
#else
#define FA_LOAD8(p, i) as_float8(convert_uint8(vload8(0, (p) + (i))) << 16)
#endif

FA_MM_DEFINE(fa_mm_tn, A[k * lda + i], A[k * lda + i + 1], A[k * lda + i + 2], A[k * lda + i + 3])

/* rows [row0, row0 + n) of a tensor's head, `width` columns each, into dst (rows of `pitch`
 * columns, zero-padded, `rows` rows), eight columns per load */
static void fa_load_rows(__global const fa_store_t *src, fa_ocl_view v, long b, long row0, int n, int rows, long h,
                         int width, int pitch, __local float *dst)
{
    for (int r = 0; r < rows; ++r) {
        __local float *d = dst + r * pitch;
        int c = 0;
        if (r < n) {
            const long at = fa_at(v, b, row0 + r, h);
            for (; c + 8 <= width; c += 8)
                vstore8(FA_LOAD8(src, at + c), 0, d + c);
            for (; c < width; ++c)
                d[c] = FA_LOAD(src, at + c);
        }
        for (; c < pitch; ++c)
            d[c] = 0.0f;
    }
}

/* dst[c * ld + r] = src[r * pitch + c]: a tile of `pitch` columns transposed */
static void fa_transpose_rows(__local const float *src, int rows, int pitch, __local float *dst, int ld)
{
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < pitch; ++c)
            dst[c * ld + r] = src[r * pitch + c];
}

/* Whether query row i saw no key (core/empty_row.h): its LSE is -inf, or, where a sink made its
 * LSE the sink's, the mask leaves it no key */
static int fa_row_sees_none(const fa_mask *m, long i, float lse)
{
    int64_t lo, hi;
    fa_mask_row_range(m, i, &lo, &hi);
    return fa_row_absent(lse) || hi <= lo;
}

/* The shared recomputation of one (query tile, key tile): P (into p, masked and fully masked rows
 * 0), dS = P o (Z o dP - D) scale (into dp) with Z the dropout factors, and P o Z (into z, when
 * dropout is on: dV's left factor). s and dp must hold S = Q K^T (unscaled) and dO V^T on entry.
 * With FA_SCORE_MOD the visible scores are modified first (sm, in units of raw q . k) and dS is
 * multiplied by the modifier's derivative.
 * Eight keys per step with vector exp, as the forward; steps wholly outside a row's visible keys
 * skip the exp, and a row with none (masked, beyond the sequence, or LSE = -inf) is zeroed. */
static void fa_tile_grads(__local float *p, __local float *dp, __local float *z, const fa_mask *m,
                          const fa_ocl_blocks *blk, __global const uchar *bm_bits, int cls, long q0, long k0, int nr,
                          int nc, const float *lse_r, const float *d_r, float scale, uint threshold, float drop_scale,
                          ulong seed, ulong offset, long b, long heads_q, long h, const fa_score_mod_state *sm)
{
    const int8 lane = (int8)(0, 1, 2, 3, 4, 5, 6, 7);
    for (int r = 0; r < FA_BM; ++r) {
        __local float *prow = p + r * FA_BN, *dprow = dp + r * FA_BN, *zrow = z + r * FA_BN;
        int64_t lo = 0, hi = 0;
        if (r < nr)
            fa_mask_row_range(m, q0 + r, &lo, &hi);
        const float l = lse_r[r];
        const int jlo = (int)clamp(lo - k0, 0L, (long)FA_BN), jhi = (int)clamp(hi - k0, 0L, (long)nc);
        if (jhi <= jlo || l == -INFINITY) {
            for (int j = 0; j < FA_BN; j += 8) {
                vstore8((float8)0.0f, 0, prow + j);
                vstore8((float8)0.0f, 0, dprow + j);
                if (threshold)
                    vstore8((float8)0.0f, 0, zrow + j);
            }
            continue;
        }
#if FA_SCORE_MOD
        float grad[FA_BN];
        for (int j = jlo; j < jhi; ++j)
            prow[j] = fa_score_mod_apply_at(sm, prow[j], q0 + r, k0 + j, &grad[j]);
#else
        (void)sm;
#endif
        const int jv0 = jlo & ~7, jv1 = (jhi + 7) & ~7;
        for (int j = 0; j < FA_BN; j += 8) {
            float8 e = 0.0f;
            if (j >= jv0 && j < jv1) {
                const int8 idx = lane + j;
                e = select(exp(scale * vload8(0, prow + j) - l), (float8)0.0f, idx < jlo || idx >= jhi);
            }
            vstore8(e, 0, prow + j);
        }
        if (cls == FA_TILE_PARTIAL && blk->on)
            for (int j = jlo; j < jhi; ++j)
                if (!fa_block_keep(blk, bm_bits, q0 + r, k0 + j))
                    prow[j] = 0.0f;
        const float d = d_r[r];
        if (threshold) {
            for (int j = 0; j < FA_BN; j += FA_DROPOUT_BLOCK_KEYS) {
                const fa_philox4 bits = fa_dropout_block(seed, offset, (ulong)b, (ulong)heads_q, (ulong)h,
                                                         (ulong)(q0 + r), (ulong)(k0 + j));
                for (int t = 0; t < FA_DROPOUT_BLOCK_KEYS; ++t)
                    zrow[j + t] = fa_drop_factor(bits, k0 + j + t, threshold, drop_scale);
            }
            for (int j = 0; j < FA_BN; j += 8) {
                const float8 pv = vload8(0, prow + j), zv = vload8(0, zrow + j);
                vstore8(select(pv * (zv * vload8(0, dprow + j) - d) * scale, (float8)0.0f, pv == 0.0f), 0, dprow + j);
                vstore8(pv * zv, 0, zrow + j);
            }
        } else /* a select where P = 0: a masked element's dP may be NaN (V = NaN), 0 * NaN is NaN */
            for (int j = 0; j < FA_BN; j += 8) {
                const float8 pv = vload8(0, prow + j);
                vstore8(select(pv * (vload8(0, dprow + j) - d) * scale, (float8)0.0f, pv == 0.0f), 0, dprow + j);
            }
#if FA_SCORE_MOD
        for (int j = jlo; j < jhi; ++j) /* where P = 0, dS stays 0 (the derivative may be NaN there) */
            if (prow[j] != 0.0f)
                dprow[j] *= grad[j];
#endif
    }
}

__kernel __attribute__((reqd_work_group_size(1, 1, 1))) void
fa_backward_dkdv_vec(__global const long *prm, const float scale, const float drop_scale, __global const fa_store_t *q,
                     __global const fa_store_t *k, __global const fa_store_t *v, __global const fa_store_t *dout,
                     __global const float *lse, __global const float *dsum, __global fa_store_t *dk,
                     __global fa_store_t *dv, __global const int *cu_q, __global const int *cu_k,
                     __global const uchar *bm_bits, __global const long *bl_row_ptr, __global const int *bl_col,
                     __global const uchar *bl_cls, __global const float *alibi_slopes)
{
    __local float q_t[FA_BM * FA_DQP], do_t[FA_BM * FA_DVP];
    __local float kT[FA_DQP * FA_BN], vT[FA_DVP * FA_BN], kv_rows[FA_BN * FA_DMP];
    __local float dk_t[FA_BN * FA_DQP], dv_t[FA_BN * FA_DVP];
    __local float p[FA_BM * FA_BN], dp[FA_BM * FA_BN], z[FA_BM * FA_BN];

    const long kt = (long)get_group_id(0), hk = (long)get_group_id(1), b = (long)get_group_id(2);
    long sq, sk, qs, ks;
    fa_seq(prm, cu_q, cu_k, b, &sq, &sk, &qs, &ks);
    const long k0 = kt * FA_BN;
    if (k0 >= sk)
        return;
    const int nc = (int)min((long)FA_BN, sk - k0);
    const long heads_q = prm[FA_P_HEADS_Q], group = prm[FA_P_GROUP], total_q = prm[FA_P_TOTAL_Q];
    const fa_ocl_view vq = fa_view_of(prm, FA_T_Q), vk = fa_view_of(prm, FA_T_K), vv = fa_view_of(prm, FA_T_V);
    const fa_ocl_view vd = fa_view_of(prm, FA_T_DO), vl = fa_view_of(prm, FA_T_LSE);
    const fa_mask m = fa_mask_make(sq, sk, (int)prm[FA_P_CAUSAL], prm[FA_P_WINDOW_LEFT], prm[FA_P_WINDOW_RIGHT]);
    const uint threshold = (uint)prm[FA_P_DROPOUT_THRESHOLD];
    const ulong seed = (ulong)prm[FA_P_SEED], offset = (ulong)prm[FA_P_OFFSET];
    const long row0 = prm[FA_P_VARLEN] ? qs : b * prm[FA_P_SEQLEN_Q];

    fa_load_rows(k, vk, b, ks + k0, nc, FA_BN, hk, FA_D, FA_DQP, kv_rows);
    fa_transpose_rows(kv_rows, FA_BN, FA_DQP, kT, FA_BN);
    fa_load_rows(v, vv, b, ks + k0, nc, FA_BN, hk, FA_D_V, FA_DVP, kv_rows);
    fa_transpose_rows(kv_rows, FA_BN, FA_DVP, vT, FA_BN);
    for (int e = 0; e < FA_BN * FA_DQP; e += 8)
        vstore8((float8)0.0f, 0, dk_t + e);
    for (int e = 0; e < FA_BN * FA_DVP; e += 8)
        vstore8((float8)0.0f, 0, dv_t + e);
    const long nq = (sq + FA_BM - 1) / FA_BM;
    float lse_r[FA_BM], d_r[FA_BM];
    /* no query rows (nq = 0): dK = dV = 0 without walking the group's heads */
    for (long h = hk * group; nq > 0 && h < (hk + 1) * group; ++h) {
        const fa_ocl_blocks blk = fa_blocks_of(prm, h);
        const fa_score_mod_state sm = fa_score_mod_of(prm, alibi_slopes, scale, b, h, sq, sk);
        for (long qt = 0; qt < nq; ++qt) {
            const long q0 = qt * FA_BM;
            const int cls = fa_pair_class(prm, bl_row_ptr, bl_col, bl_cls, &m, &blk, qt, kt);
            if (cls == FA_TILE_EMPTY)
                continue;
            const int nr = (int)min((long)FA_BM, sq - q0);
            fa_load_rows(q, vq, b, qs + q0, nr, FA_BM, h, FA_D, FA_DQP, q_t);
            fa_load_rows(dout, vd, b, qs + q0, nr, FA_BM, h, FA_D_V, FA_DVP, do_t);
            for (int r = 0; r < FA_BM; ++r) {
                lse_r[r] = r < nr ? lse[fa_at(vl, b, qs + q0 + r, h)] : -INFINITY;
                d_r[r] = r < nr ? dsum[h * total_q + row0 + q0 + r] : 0.0f;
                if (r < nr && fa_row_sees_none(&m, q0 + r, lse_r[r])) { /* Q and dO enter as 0 */
                    for (int c = 0; c < FA_DQP; c += 8)
                        vstore8((float8)0.0f, 0, q_t + r * FA_DQP + c);
                    for (int c = 0; c < FA_DVP; c += 8)
                        vstore8((float8)0.0f, 0, do_t + r * FA_DVP + c);
                }
            }
            fa_mm_nn(FA_BM, FA_BN, FA_DQP, q_t, FA_DQP, kT, FA_BN, p, FA_BN, 0);
            fa_mm_nn(FA_BM, FA_BN, FA_DVP, do_t, FA_DVP, vT, FA_BN, dp, FA_BN, 0);
            fa_tile_grads(p, dp, z, &m, &blk, bm_bits, cls, q0, k0, nr, nc, lse_r, d_r, scale, threshold, drop_scale,
                          seed, offset, b, heads_q, h, &sm);
            /* dV += (P o Z)^T dO ; dK += dS^T Q */
            fa_mm_tn(FA_BN, FA_DVP, FA_BM, threshold ? z : p, FA_BN, do_t, FA_DVP, dv_t, FA_DVP, 1);
            fa_mm_tn(FA_BN, FA_DQP, FA_BM, dp, FA_BN, q_t, FA_DQP, dk_t, FA_DQP, 1);
        }
    }
    const fa_ocl_view vdk = fa_view_of(prm, FA_T_DK), vdv = fa_view_of(prm, FA_T_DV);
    for (int j = 0; j < nc; ++j) {
        const long ak = fa_at(vdk, b, ks + k0 + j, hk), av = fa_at(vdv, b, ks + k0 + j, hk);
        for (int c = 0; c < FA_D; ++c)
            FA_STORE(dk, ak + c, dk_t[j * FA_DQP + c]);
        for (int c = 0; c < FA_D_V; ++c)
            FA_STORE(dv, av + c, dv_t[j * FA_DVP + c]);
    }
}

__kernel __attribute__((reqd_work_group_size(1, 1, 1))) void
fa_backward_dq_vec(__global const long *prm, const float scale, const float drop_scale, __global const fa_store_t *q,
                   __global const fa_store_t *k, __global const fa_store_t *v, __global const fa_store_t *dout,
                   __global const float *lse, __global const float *dsum, __global fa_store_t *dq,
                   __global const int *cu_q, __global const int *cu_k, __global const uchar *bm_bits,
                   __global const long *bl_row_ptr, __global const int *bl_col, __global const uchar *bl_cls,
                   __global const float *alibi_slopes)
{
    __local float q_t[FA_BM * FA_DQP], do_t[FA_BM * FA_DVP], dq_t[FA_BM * FA_DQP];
    __local float kT[FA_DQP * FA_BN], vT[FA_DVP * FA_BN], k_rows[FA_BN * FA_DMP];
    __local float p[FA_BM * FA_BN], dp[FA_BM * FA_BN], z[FA_BM * FA_BN];

    /* the last query tiles first: under a causal mask they have the most key tiles, and PoCL hands
     * out work-groups in order, so the short ones fill the end instead of one long one (as the CPU
     * backend orders its tasks) */
    const long qt = (long)(get_num_groups(0) - 1 - get_group_id(0));
    const long h = (long)get_group_id(1), b = (long)get_group_id(2);
    long sq, sk, qs, ks;
    fa_seq(prm, cu_q, cu_k, b, &sq, &sk, &qs, &ks);
    const long q0 = qt * FA_BM;
    if (q0 >= sq)
        return;
    const int nr = (int)min((long)FA_BM, sq - q0);
    const long heads_q = prm[FA_P_HEADS_Q], hk = h / prm[FA_P_GROUP];
    const fa_ocl_view vq = fa_view_of(prm, FA_T_Q), vk = fa_view_of(prm, FA_T_K), vv = fa_view_of(prm, FA_T_V);
    const fa_ocl_view vd = fa_view_of(prm, FA_T_DO), vl = fa_view_of(prm, FA_T_LSE);
    const fa_mask m = fa_mask_make(sq, sk, (int)prm[FA_P_CAUSAL], prm[FA_P_WINDOW_LEFT], prm[FA_P_WINDOW_RIGHT]);
    const uint threshold = (uint)prm[FA_P_DROPOUT_THRESHOLD];
    const ulong seed = (ulong)prm[FA_P_SEED], offset = (ulong)prm[FA_P_OFFSET];
    const fa_ocl_blocks blk = fa_blocks_of(prm, h);
    const fa_score_mod_state sm = fa_score_mod_of(prm, alibi_slopes, scale, b, h, sq, sk);
    const long row0 = prm[FA_P_VARLEN] ? qs : b * prm[FA_P_SEQLEN_Q];

    fa_load_rows(q, vq, b, qs + q0, nr, FA_BM, h, FA_D, FA_DQP, q_t);
    fa_load_rows(dout, vd, b, qs + q0, nr, FA_BM, h, FA_D_V, FA_DVP, do_t);
    float lse_r[FA_BM], d_r[FA_BM];
    for (int r = 0; r < FA_BM; ++r) {
        lse_r[r] = r < nr ? lse[fa_at(vl, b, qs + q0 + r, h)] : -INFINITY;
        d_r[r] = r < nr ? dsum[h * prm[FA_P_TOTAL_Q] + row0 + q0 + r] : 0.0f;
    }
    for (int e = 0; e < FA_BM * FA_DQP; e += 8)
        vstore8((float8)0.0f, 0, dq_t + e);

    const fa_walk walk = fa_walk_of(prm, bl_row_ptr, &m, &blk, qt, q0, nr, sk);
    for (long it = walk.begin; it < walk.end; ++it) {
        long k0;
        const int cls = fa_walk_step(&walk, it, bl_col, bl_cls, &m, q0, &k0);
        if (cls == FA_TILE_EMPTY)
            continue;
        const int nc = (int)min((long)FA_BN, sk - k0);
        fa_load_rows(v, vv, b, ks + k0, nc, FA_BN, hk, FA_D_V, FA_DVP, k_rows);
        fa_transpose_rows(k_rows, FA_BN, FA_DVP, vT, FA_BN);
        fa_load_rows(k, vk, b, ks + k0, nc, FA_BN, hk, FA_D, FA_DQP, k_rows);
        fa_transpose_rows(k_rows, FA_BN, FA_DQP, kT, FA_BN);
        fa_mm_nn(FA_BM, FA_BN, FA_DQP, q_t, FA_DQP, kT, FA_BN, p, FA_BN, 0);
        fa_mm_nn(FA_BM, FA_BN, FA_DVP, do_t, FA_DVP, vT, FA_BN, dp, FA_BN, 0);
        fa_tile_grads(p, dp, z, &m, &blk, bm_bits, cls, q0, k0, nr, nc, lse_r, d_r, scale, threshold, drop_scale, seed,
                      offset, b, heads_q, h, &sm);
        /* dQ += dS K */
        fa_mm_nn(FA_BM, FA_DQP, FA_BN, dp, FA_BN, k_rows, FA_DQP, dq_t, FA_DQP, 1);
    }
    const fa_ocl_view vdq = fa_view_of(prm, FA_T_DQ);
    for (int r = 0; r < nr; ++r) { /* a row that saw no key: dQ = 0 (0 times a NaN in K is NaN) */
        const float keep = fa_row_sees_none(&m, q0 + r, lse_r[r]) ? 0.0f : 1.0f;
        const long at = fa_at(vdq, b, qs + q0 + r, h);
        for (int c = 0; c < FA_D; ++c)
            FA_STORE(dq, at + c, fa_row_output(dq_t[r * FA_DQP + c], keep));
    }
}
#endif
