/* backward.cl: the fused backward (Dao et al. 2022, Algorithm 2) without atomics, so every run
 * gives the same bits. Three kernels: fa_backward_dsum (D = rowsum(dO o O) per query row),
 * fa_backward_dkdv (one work-group per key tile of FA_BN keys, one key per work-item: K, V, dK, dV
 * rows in private memory; the Q and dO tiles of FA_BM rows in __local memory; S and P recomputed
 * from LSE; the query heads of a GQA group summed in order) and fa_backward_dq (one work-group
 * per query tile, one query row per work-item, K and V tiles in __local memory, the same
 * recomputation). Dropout factors are regenerated from core/philox.h; the score modifiers
 * (FA_SCORE_MOD) are applied to the recomputed scores as the forward did, and dS is multiplied by
 * their derivative. */

#if FA_KERNELS == 3 || FA_KERNELS == 4
__kernel void fa_backward_dsum(__global const long *prm, __global const fa_store_t *o,
                               __global const fa_store_t *dout, __global float *dsum, __global const int *cu_q,
                               __global const int *cu_k)
{
    const long i = (long)get_global_id(0), h = (long)get_global_id(1), b = (long)get_global_id(2);
    long sq, sk, qs, ks;
    fa_seq(prm, cu_q, cu_k, b, &sq, &sk, &qs, &ks);
    if (i >= sq)
        return;
    const fa_ocl_view vo = fa_view_of(prm, FA_T_O), vd = fa_view_of(prm, FA_T_DO);
    const long ao = fa_at(vo, b, qs + i, h), ad = fa_at(vd, b, qs + i, h);
    float acc = 0.0f;
    for (int c = 0; c < FA_D; ++c)
        acc = mad(FA_LOAD(o, ao + c), FA_LOAD(dout, ad + c), acc);
    const long row = prm[FA_P_VARLEN] ? qs + i : b * prm[FA_P_SEQLEN_Q] + i;
    dsum[h * prm[FA_P_TOTAL_Q] + row] = acc;
}
#endif

#if FA_KERNELS == 3

__kernel __attribute__((reqd_work_group_size(FA_BN, 1, 1))) void
fa_backward_dkdv(__global const long *prm, const float scale, const float drop_scale, __global const fa_store_t *q,
                 __global const fa_store_t *k, __global const fa_store_t *v, __global const fa_store_t *dout,
                 __global const float *lse, __global const float *dsum, __global fa_store_t *dk,
                 __global fa_store_t *dv, __global const int *cu_q, __global const int *cu_k,
                 __global const uchar *bm_bits, __global const long *bl_row_ptr, __global const int *bl_col,
                 __global const uchar *bl_cls, __global const float *alibi_slopes)
{
    __local float q_tile[FA_BM * FA_D];
    __local float do_tile[FA_BM * FA_D];
    __local float lse_tile[FA_BM];
    __local float dsum_tile[FA_BM];

    const int tid = (int)get_local_id(0);
    const long kt = (long)get_group_id(0), hk = (long)get_group_id(1), b = (long)get_group_id(2);
    long sq, sk, qs, ks;
    fa_seq(prm, cu_q, cu_k, b, &sq, &sk, &qs, &ks);
    const long k0 = kt * FA_BN;
    if (k0 >= sk) /* uniform over the work-group */
        return;
    const long j = k0 + tid;
    const int valid = j < sk;
    const long heads_q = prm[FA_P_HEADS_Q], group = prm[FA_P_GROUP], total_q = prm[FA_P_TOTAL_Q];
    const fa_ocl_view vq = fa_view_of(prm, FA_T_Q), vk = fa_view_of(prm, FA_T_K), vv = fa_view_of(prm, FA_T_V);
    const fa_ocl_view vd = fa_view_of(prm, FA_T_DO), vl = fa_view_of(prm, FA_T_LSE);
    const fa_mask m = fa_mask_make(sq, sk, (int)prm[FA_P_CAUSAL], prm[FA_P_WINDOW_LEFT], prm[FA_P_WINDOW_RIGHT]);
    const uint threshold = (uint)prm[FA_P_DROPOUT_THRESHOLD];
    const ulong seed = (ulong)prm[FA_P_SEED], offset = (ulong)prm[FA_P_OFFSET];
    const long row0 = prm[FA_P_VARLEN] ? qs : b * prm[FA_P_SEQLEN_Q]; /* D's row of query 0 */

    float kr[FA_D], vr[FA_D], dkr[FA_D], dvr[FA_D];
    {
        const long ak = valid ? fa_at(vk, b, ks + j, hk) : 0, av = valid ? fa_at(vv, b, ks + j, hk) : 0;
        for (int c = 0; c < FA_D; ++c) {
            kr[c] = valid ? FA_LOAD(k, ak + c) : 0.0f;
            vr[c] = valid ? FA_LOAD(v, av + c) : 0.0f;
            dkr[c] = 0.0f;
            dvr[c] = 0.0f;
        }
    }
    const long nq = (sq + FA_BM - 1) / FA_BM;
    /* no query rows (nq = 0): dK = dV = 0 without walking the group's heads */
    for (long h = hk * group; nq > 0 && h < (hk + 1) * group; ++h) {
        const fa_ocl_blocks blk = fa_blocks_of(prm, h);
        const fa_score_mod_state sm = fa_score_mod_of(prm, alibi_slopes, scale, b, h, sq, sk); /* raw q . k */
        for (long qt = 0; qt < nq; ++qt) {
            const long q0 = qt * FA_BM;
            const int cls = fa_pair_class(prm, bl_row_ptr, bl_col, bl_cls, &m, &blk, qt, kt);
            if (cls == FA_TILE_EMPTY)
                continue;
            const int nr = (int)min((long)FA_BM, sq - q0);
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int e = tid; e < FA_BM * FA_D; e += FA_BN) {
                const int r = e / FA_D, c = e - r * FA_D;
                float qx = 0.0f, dx = 0.0f;
                if (r < nr) {
                    qx = FA_LOAD(q, fa_at(vq, b, qs + q0 + r, h) + c);
                    dx = FA_LOAD(dout, fa_at(vd, b, qs + q0 + r, h) + c);
                }
                q_tile[e] = qx;
                do_tile[e] = dx;
            }
            for (int r = tid; r < FA_BM; r += FA_BN) {
                lse_tile[r] = r < nr ? lse[fa_at(vl, b, qs + q0 + r, h)] : -INFINITY;
                dsum_tile[r] = r < nr ? dsum[h * total_q + row0 + q0 + r] : 0.0f;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            /* no `continue` past a barrier inside this loop: PoCL 3.1 miscompiles a divergent
             * continue in a loop that holds barriers (rows were dropped); a bound of 0 instead */
            const int rows = valid ? nr : 0;
            for (int r = 0; r < rows; ++r) {
                const long i = q0 + r;
                if (cls != FA_TILE_FULL) {
                    int64_t a, z;
                    fa_mask_row_range(&m, i, &a, &z);
                    if (j < a || j >= z || (blk.on && !fa_block_keep(&blk, bm_bits, i, j)))
                        continue;
                }
                const float l = lse_tile[r];
                if (l == -INFINITY) /* a fully masked row: P = 0 */
                    continue;
                float s = 0.0f, dp = 0.0f;
                for (int c = 0; c < FA_D; ++c) {
                    s = mad(q_tile[r * FA_D + c], kr[c], s);
                    dp = mad(do_tile[r * FA_D + c], vr[c], dp);
                }
#if FA_SCORE_MOD
                float grad;
                s = fa_score_mod_apply_at(&sm, s, i, j, &grad);
                const float ds_scale = scale * grad; /* dS of the unmodified score */
#else
                const float ds_scale = scale;
#endif
                const float p = exp(scale * s - l);
                float z = 1.0f;
                if (threshold) {
                    const fa_philox4 bits = fa_dropout_block(seed, offset, (ulong)b, (ulong)heads_q, (ulong)h,
                                                             (ulong)i, (ulong)j);
                    z = fa_drop_factor(bits.v[j & 3], threshold, drop_scale);
                }
                /* dV += (P o Z)^T dO; dS = P o (Z o dP - D) * scale; dK += dS^T Q */
                const float pz = p * z, ds = p * (z * dp - dsum_tile[r]) * ds_scale;
                for (int c = 0; c < FA_D; ++c) {
                    dvr[c] = mad(pz, do_tile[r * FA_D + c], dvr[c]);
                    dkr[c] = mad(ds, q_tile[r * FA_D + c], dkr[c]);
                }
            }
        }
    }
    if (valid) {
        const fa_ocl_view vdk = fa_view_of(prm, FA_T_DK), vdv = fa_view_of(prm, FA_T_DV);
        const long ak = fa_at(vdk, b, ks + j, hk), av = fa_at(vdv, b, ks + j, hk);
        for (int c = 0; c < FA_D; ++c) {
            FA_STORE(dk, ak + c, dkr[c]);
            FA_STORE(dv, av + c, dvr[c]);
        }
    }
}

__kernel __attribute__((reqd_work_group_size(FA_BM, 1, 1))) void
fa_backward_dq(__global const long *prm, const float scale, const float drop_scale, __global const fa_store_t *q,
               __global const fa_store_t *k, __global const fa_store_t *v, __global const fa_store_t *dout,
               __global const float *lse, __global const float *dsum, __global fa_store_t *dq,
               __global const int *cu_q, __global const int *cu_k, __global const uchar *bm_bits,
               __global const long *bl_row_ptr, __global const int *bl_col, __global const uchar *bl_cls,
               __global const float *alibi_slopes)
{
    __local float k_tile[FA_BN * FA_D];
    __local float v_tile[FA_BN * FA_D];

    const int tid = (int)get_local_id(0);
    const long qt = (long)get_group_id(0), h = (long)get_group_id(1), b = (long)get_group_id(2);
    long sq, sk, qs, ks;
    fa_seq(prm, cu_q, cu_k, b, &sq, &sk, &qs, &ks);
    const long q0 = qt * FA_BM;
    if (q0 >= sq)
        return;
    const long q1 = min(q0 + (long)FA_BM, sq);
    const long i = q0 + tid;
    const int valid = i < sq;
    const long heads_q = prm[FA_P_HEADS_Q], hk = h / prm[FA_P_GROUP];
    const fa_ocl_view vq = fa_view_of(prm, FA_T_Q), vk = fa_view_of(prm, FA_T_K), vv = fa_view_of(prm, FA_T_V);
    const fa_ocl_view vd = fa_view_of(prm, FA_T_DO), vl = fa_view_of(prm, FA_T_LSE);
    const fa_mask m = fa_mask_make(sq, sk, (int)prm[FA_P_CAUSAL], prm[FA_P_WINDOW_LEFT], prm[FA_P_WINDOW_RIGHT]);
    const uint threshold = (uint)prm[FA_P_DROPOUT_THRESHOLD];
    const ulong seed = (ulong)prm[FA_P_SEED], offset = (ulong)prm[FA_P_OFFSET];
    const fa_ocl_blocks blk = fa_blocks_of(prm, h);
    const fa_score_mod_state sm = fa_score_mod_of(prm, alibi_slopes, scale, b, h, sq, sk); /* raw q . k */

    float qr[FA_D], dor[FA_D], dqr[FA_D];
    float l = -INFINITY, di = 0.0f;
    long lo = 0, hi = 0;
    {
        const long aq = valid ? fa_at(vq, b, qs + i, h) : 0, ad = valid ? fa_at(vd, b, qs + i, h) : 0;
        for (int c = 0; c < FA_D; ++c) {
            qr[c] = valid ? FA_LOAD(q, aq + c) : 0.0f;
            dor[c] = valid ? FA_LOAD(dout, ad + c) : 0.0f;
            dqr[c] = 0.0f;
        }
        if (valid) {
            l = lse[fa_at(vl, b, qs + i, h)];
            di = dsum[h * prm[FA_P_TOTAL_Q] + (prm[FA_P_VARLEN] ? qs : b * prm[FA_P_SEQLEN_Q]) + i];
            int64_t a, z;
            fa_mask_row_range(&m, i, &a, &z);
            lo = a;
            hi = z;
        }
    }

    const fa_walk walk = fa_walk_of(prm, bl_row_ptr, &m, &blk, qt, q0, q1 - q0, sk);
    for (long it = walk.begin; it < walk.end; ++it) {
        long k0;
        const int cls = fa_walk_step(&walk, it, bl_col, bl_cls, &m, q0, &k0);
        if (cls == FA_TILE_EMPTY)
            continue;
        const int nc = (int)min((long)FA_BN, sk - k0);
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int e = tid; e < FA_BN * FA_D; e += FA_BM) {
            const int jj = e / FA_D, c = e - jj * FA_D;
            float kx = 0.0f, vx = 0.0f;
            if (jj < nc) {
                kx = FA_LOAD(k, fa_at(vk, b, ks + k0 + jj, hk) + c);
                vx = FA_LOAD(v, fa_at(vv, b, ks + k0 + jj, hk) + c);
            }
            k_tile[e] = kx;
            v_tile[e] = vx;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        /* rows outside the sequence or fully masked (LSE -inf, P = 0) see an empty range; no
         * divergent `continue` here (see fa_backward_dkdv) */
        const long jlo = max(lo - k0, 0L), jhi = valid && l != -INFINITY ? min(hi - k0, (long)nc) : 0L;
        for (int jb = 0; jb < FA_BN; jb += 4) {
            fa_philox4 bits = {{0u, 0u, 0u, 0u}};
            if (threshold)
                bits = fa_dropout_block(seed, offset, (ulong)b, (ulong)heads_q, (ulong)h, (ulong)i, (ulong)(k0 + jb));
            for (int t = 0; t < 4; ++t) {
                const int jj = jb + t;
                float s = 0.0f, dp = 0.0f;
                for (int c = 0; c < FA_D; ++c) {
                    s = mad(qr[c], k_tile[jj * FA_D + c], s);
                    dp = mad(dor[c], v_tile[jj * FA_D + c], dp);
                }
#if FA_SCORE_MOD
                float grad;
                s = fa_score_mod_apply_at(&sm, s, i, k0 + jj, &grad);
                const float ds_scale = scale * grad; /* dS of the unmodified score */
#else
                const float ds_scale = scale;
#endif
                int vis = jj >= jlo && jj < jhi;
                if (vis && cls == FA_TILE_PARTIAL && blk.on)
                    vis = fa_block_keep(&blk, bm_bits, i, k0 + jj);
                const float p = vis ? exp(scale * s - l) : 0.0f;
                const float z = threshold ? fa_drop_factor(bits.v[t], threshold, drop_scale) : 1.0f;
                /* a select: a masked element's dP (V = NaN) or score (K = NaN) may be NaN, and
                 * 0 * NaN is NaN */
                const float ds = vis ? p * (z * dp - di) * ds_scale : 0.0f;
                for (int c = 0; c < FA_D; ++c)
                    dqr[c] = mad(ds, k_tile[jj * FA_D + c], dqr[c]);
            }
        }
    }
    if (valid) {
        /* a row that saw no key: dQ = 0 (its dS is 0, but 0 times a NaN in K is NaN) */
        const float keep = fa_row_absent(l) ? 0.0f : 1.0f;
        const long at = fa_at(fa_view_of(prm, FA_T_DQ), b, qs + i, h);
        for (int c = 0; c < FA_D; ++c)
            FA_STORE(dq, at + c, fa_row_output(dqr[c], keep));
    }
}
#endif
