/* forward_mma.cl: the fused forward on NVIDIA's matrix instructions (nv_mma.cl), for fp16 and
 * bf16 storage and head dims that are multiples of 16 up to 128. One work-group of 4 warps per
 * (query tile of 64 rows, query head, batch); each warp owns 16 query rows, FlashAttention-2's
 * split: Q's fragments stay in registers for the whole key loop; per key tile of FA_BN keys, K and
 * V pass through __local memory as 16-bit values (rows padded by 8 elements, so a warp's fragment
 * reads fall in distinct banks; copied by cp.async while the products before them run), S = Q K^T and O += P V run as m16n8k16 products with fp32
 * accumulation, and the online softmax works on the accumulators in registers: each row's four
 * lanes reduce its maximum and sum with shuffles. P is rounded to the operand type for P V, as the
 * CUDA kernels do. Scores are log2-scaled as in forward.cl (exp2; the score modifiers in units of
 * ln 2); every mask option, dropout (core/philox.h), block-sparse lists, varlen and GQA are handled
 * per element as in forward.cl, and the LSE is written the same way (with the learnable sink
 * folded in under FA_SINK). d_v = d only: the chooser sends other value head dims to forward.cl. */

#if FA_KERNELS == 6
#define FA_MW 4             /* warps per work-group, 16 query rows each */
#define FA_MG (32 * FA_MW)  /* work-items per work-group */
#define FA_KP (FA_D + 8)    /* __local row pitch of K and V, 16-bit elements */
#define FA_NT (FA_BN / 8)   /* 8-key column blocks of S per warp */
#define FA_KS (FA_D / 16)   /* 16-wide steps of Q K^T */
#define FA_OT (FA_D / 8)    /* 8-column blocks of O */
#if FA_BM != 16 * FA_MW || FA_D % 16 || FA_BN % 16 || FA_DTYPE == 0 || FA_D_V != FA_D
#error "forward_mma.cl: 64-row tiles, d and B_c multiples of 16, fp16 or bf16, d_v = d"
#endif

__kernel void fa_forward_mma(__global const long *prm, const float scale, const float drop_scale,
                             __global const fa_store_t *q, __global const fa_store_t *k, __global const fa_store_t *v,
                             __global fa_store_t *o, __global float *lse, __global const int *cu_q,
                             __global const int *cu_k, __global const uchar *bm_bits, __global const long *bl_row_ptr,
                             __global const int *bl_col, __global const uchar *bl_cls,
                             __global const float *alibi_slopes, __global const float *sink)
{
    __local uint4 kv_l[2 * FA_BN * FA_KP / 8];
    __local ushort *const k_l = (__local ushort *)kv_l, *const v_l = k_l + FA_BN * FA_KP;
    __local int range_l[2 * FA_BM];
    FA_NV_XS_DECL

    const int tid = (int)get_local_id(0), warp = tid / 32;
    const int lane = (int)fa_nv_lane(), g = lane / 4, t = lane % 4;
    const int lm = lane / 8, lr = lane % 8; /* ldmatrix: this lane's matrix and row */
    const long qtile = (long)get_group_id(0), h = (long)get_group_id(1), b = (long)get_group_id(2);
    long sq, sk, qs, ks;
    fa_seq(prm, cu_q, cu_k, b, &sq, &sk, &qs, &ks);
    const long q0 = qtile * FA_BM;
    if (q0 >= sq) /* uniform over the work-group */
        return;
    const int nr = (int)min((long)FA_BM, sq - q0);
    const long hk = h / prm[FA_P_GROUP];
    const fa_mask m = fa_mask_make(sq, sk, (int)prm[FA_P_CAUSAL], prm[FA_P_WINDOW_LEFT], prm[FA_P_WINDOW_RIGHT]);
    const uint threshold = (uint)prm[FA_P_DROPOUT_THRESHOLD];
    const int bm_on = prm[FA_P_BLOCK_MASK] != 0;
    const float qscale = scale * M_LOG2E_F;
    const fa_score_mod_state sm = fa_score_mod_of(prm, alibi_slopes, M_LN2_F, b, h, sq, sk); /* S = ln 2 x */
    for (int r = tid; r < FA_BM; r += FA_MG) {
        int64_t a = 0, z = 0;
        if (r < nr)
            fa_mask_row_range(&m, q0 + r, &a, &z);
        range_l[2 * r] = (int)a;
        range_l[2 * r + 1] = (int)z;
    }

    /* this lane's rows of the tile: rw[0] = 16 warp + g and rw[1] = rw[0] + 8 */
    const int rw0 = 16 * warp + g, rw1 = rw0 + 8;
    uint4 qf[FA_KS];
    {
        const fa_ocl_view vq = fa_view_of(prm, FA_T_Q);
        __global const ushort *qh = (__global const ushort *)q;
        const long a0 = fa_at(vq, b, qs + q0 + min(rw0, nr - 1), h), a1 = fa_at(vq, b, qs + q0 + min(rw1, nr - 1), h);
        FA_UNROLL_LOOP
        for (int s = 0; s < FA_KS; ++s) {
            const int c = 16 * s + 2 * t;
            qf[s].x = rw0 < nr ? fa_nv_ld2(qh, a0 + c) : 0u;
            qf[s].y = rw1 < nr ? fa_nv_ld2(qh, a1 + c) : 0u;
            qf[s].z = rw0 < nr ? fa_nv_ld2(qh, a0 + c + 8) : 0u;
            qf[s].w = rw1 < nr ? fa_nv_ld2(qh, a1 + c + 8) : 0u;
        }
    }
    float4 acc[FA_OT];
    FA_UNROLL_LOOP
    for (int n = 0; n < FA_OT; ++n)
        acc[n] = (float4)(0.0f);
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};

    fa_walk walk;
    {
        const fa_ocl_blocks blk = fa_blocks_of(prm, h);
        walk = fa_walk_of(prm, bl_row_ptr, &m, &blk, qtile, q0, nr, sk);
    }
    /* The copies overlap the products, as in FlashAttention-2: a tile's V is copied while S = Q K^T
     * runs and the next tile's K while P V runs, each into its one __local buffer (cp.async). */
    const fa_ocl_view vk = fa_view_of(prm, FA_T_K), vv = fa_view_of(prm, FA_T_V);
    __global const ushort *const kg = (__global const ushort *)k, *const vg = (__global const ushort *)v;
    int cls_next;
    long k0_next;
    long it = fa_walk_next(&walk, walk.begin, bl_col, bl_cls, &m, q0, &cls_next, &k0_next);
    if (it < walk.end) /* uniform */
        fa_nv_load_rows_async(k_l, kg, fa_at(vk, b, ks + k0_next, hk), vk.ss, (int)min((long)FA_BN, sk - k0_next),
                              FA_BN, tid, FA_MG);
    while (it < walk.end) {
        const int cls = cls_next, k0 = (int)k0_next, nc = min(FA_BN, (int)sk - k0);
        const long it_next = fa_walk_next(&walk, it + 1, bl_col, bl_cls, &m, q0, &cls_next, &k0_next);
        fa_nv_cp_wait();
        barrier(CLK_LOCAL_MEM_FENCE); /* this tile's K is in; the previous tile's V is read; range_l published */
        fa_nv_load_rows_async(v_l, vg, fa_at(vv, b, ks + k0, hk), vv.ss, nc, FA_BN, tid, FA_MG);

        /* S = Q K^T: block n holds keys 8 n + 2t, + 1 of rows rw0 (.x, .y) and rw1 (.z, .w) */
        float4 s[FA_NT];
        FA_UNROLL_LOOP
        for (int n = 0; n < FA_NT; ++n)
            s[n] = (float4)(0.0f);
#if FA_NV_LDMATRIX
        /* K's B fragments for blocks n and n + 1 in one ldmatrix: matrices (keys of n, dims 0-7 of
         * the step), (n, 8-15), (n + 1, 0-7), (n + 1, 8-15) */
        FA_UNROLL_LOOP
        for (int n = 0; n < FA_NT; n += 2) {
            FA_UNROLL_LOOP
            for (int st = 0; st < FA_KS; ++st) {
                const uint4 kb = FA_NV_LDM(k_l, (8 * (n + lm / 2) + lr) * FA_KP + 16 * st + 8 * (lm % 2));
                s[n] = FA_NV_MMA(s[n], qf[st], kb.xy);
                s[n + 1] = FA_NV_MMA(s[n + 1], qf[st], kb.zw);
            }
        }
#else
        FA_UNROLL_LOOP
        for (int n = 0; n < FA_NT; ++n) {
            FA_UNROLL_LOOP
            for (int st = 0; st < FA_KS; ++st) {
                __local const ushort *kr = k_l + (8 * n + g) * FA_KP + 16 * st + 2 * t;
                const uint2 bf = (uint2)(*(__local const uint *)kr, *(__local const uint *)(kr + 8));
                s[n] = FA_NV_MMA(s[n], qf[st], bf);
            }
        }
#endif

        /* scale, score modifiers, mask; each row's maximum over its four lanes */
        float tile_max[2] = {-INFINITY, -INFINITY};
        FA_UNROLL_LOOP
        for (int hr = 0; hr < 2; ++hr) {
            const int rr = hr ? rw1 : rw0;
            const int jlo = range_l[2 * rr] - k0, jhi = min(range_l[2 * rr + 1] - k0, nc);
            FA_UNROLL_LOOP
            for (int n = 0; n < FA_NT; ++n) {
                FA_UNROLL_LOOP
                for (int e = 0; e < 2; ++e) {
                    const int jj = 8 * n + 2 * t + e;
                    float x = (hr ? (e ? s[n].w : s[n].z) : (e ? s[n].y : s[n].x)) * qscale;
#if FA_SCORE_MOD
                    float grad;
                    x = fa_score_mod_apply_at(&sm, x, q0 + rr, (long)k0 + jj, &grad);
#endif
                    int vis = jj >= jlo && jj < jhi;
                    if (vis && cls == FA_TILE_PARTIAL && bm_on) {
                        const fa_ocl_blocks blk = fa_blocks_of(prm, h);
                        vis = fa_block_keep(&blk, bm_bits, q0 + rr, k0 + jj);
                    }
                    x = vis ? x : -INFINITY;
                    tile_max[hr] = fmax(tile_max[hr], x);
                    if (hr) {
                        if (e)
                            s[n].w = x;
                        else
                            s[n].z = x;
                    } else {
                        if (e)
                            s[n].y = x;
                        else
                            s[n].x = x;
                    }
                }
            }
        }
        /* core/softmax.h's update, as forward.cl: the -inf guards and the exact 1 for an unchanged
         * maximum; the sums stay partial per lane until the end */
        float alpha[2], shift[2];
        FA_UNROLL_LOOP
        for (int hr = 0; hr < 2; ++hr) {
            const float m_old = row_max[hr], m_new = fmax(m_old, FA_NV_QMAX(tile_max[hr]));
            alpha[hr] = m_old == -INFINITY ? 0.0f : m_new == m_old ? 1.0f : exp2(m_old - m_new);
            shift[hr] = m_new == -INFINITY ? 0.0f : m_new;
            row_max[hr] = m_new;
        }
        float sum0 = 0.0f, sum1 = 0.0f;
        FA_UNROLL_LOOP
        for (int n = 0; n < FA_NT; ++n) {
            s[n].x = exp2(s[n].x - shift[0]);
            s[n].y = exp2(s[n].y - shift[0]);
            s[n].z = exp2(s[n].z - shift[1]);
            s[n].w = exp2(s[n].w - shift[1]);
            sum0 += s[n].x + s[n].y;
            sum1 += s[n].z + s[n].w;
        }
        row_sum[0] = row_sum[0] * alpha[0] + sum0;
        row_sum[1] = row_sum[1] * alpha[1] + sum1;
        if (threshold) { /* this lane's two keys of a block share one Philox block per row */
            const ulong seed = (ulong)prm[FA_P_SEED], offset = (ulong)prm[FA_P_OFFSET];
            FA_UNROLL_LOOP
            for (int n = 0; n < FA_NT; ++n) {
                const int key = k0 + 8 * n + 2 * t;
                const fa_philox4 b0 = fa_dropout_block(seed, offset, (ulong)b, (ulong)prm[FA_P_HEADS_Q], (ulong)h,
                                                       (ulong)(q0 + rw0), (ulong)key);
                const fa_philox4 b1 = fa_dropout_block(seed, offset, (ulong)b, (ulong)prm[FA_P_HEADS_Q], (ulong)h,
                                                       (ulong)(q0 + rw1), (ulong)key);
                s[n].x *= fa_drop_factor(b0, key, threshold, drop_scale);
                s[n].y *= fa_drop_factor(b0, key + 1, threshold, drop_scale);
                s[n].z *= fa_drop_factor(b1, key, threshold, drop_scale);
                s[n].w *= fa_drop_factor(b1, key + 1, threshold, drop_scale);
            }
        }
        fa_nv_cp_wait();
        barrier(CLK_LOCAL_MEM_FENCE); /* this tile's V is in; its K is read */
        if (it_next < walk.end) /* uniform */
            fa_nv_load_rows_async(k_l, kg, fa_at(vk, b, ks + k0_next, hk), vk.ss, (int)min((long)FA_BN, sk - k0_next),
                                  FA_BN, tid, FA_MG);
        FA_UNROLL_LOOP
        for (int n = 0; n < FA_OT; ++n) {
            acc[n].x *= alpha[0];
            acc[n].y *= alpha[0];
            acc[n].z *= alpha[1];
            acc[n].w *= alpha[1];
        }

        /* O += P V: P's accumulators are already A fragments (keys 16 j .. 16 j + 15 are blocks 2 j
         * and 2 j + 1); V's B fragments pair two keys of one column */
        FA_UNROLL_LOOP
        for (int j = 0; j < FA_BN / 16; ++j) {
            const uint4 pa = (uint4)(fa_nv_pack(s[2 * j].x, s[2 * j].y), fa_nv_pack(s[2 * j].z, s[2 * j].w),
                                     fa_nv_pack(s[2 * j + 1].x, s[2 * j + 1].y),
                                     fa_nv_pack(s[2 * j + 1].z, s[2 * j + 1].w));
#if FA_NV_LDMATRIX
            /* V's B fragments for column blocks n and n + 1 in one transposing ldmatrix: matrices
             * (keys 0-7 of the step, columns of n), (keys 8-15, n), (0-7, n + 1), (8-15, n + 1) */
            FA_UNROLL_LOOP
            for (int n = 0; n < FA_OT; n += 2) {
                const uint4 vb = FA_NV_LDMT(v_l, (16 * j + 8 * (lm % 2) + lr) * FA_KP + 8 * (n + lm / 2));
                acc[n] = FA_NV_MMA(acc[n], pa, vb.xy);
                acc[n + 1] = FA_NV_MMA(acc[n + 1], pa, vb.zw);
            }
#else
            __local const ushort *vr = v_l + (16 * j + 2 * t) * FA_KP + g;
            FA_UNROLL_LOOP
            for (int n = 0; n < FA_OT; ++n) {
                const uint2 bf = (uint2)((uint)vr[8 * n] | ((uint)vr[8 * n + FA_KP] << 16),
                                         (uint)vr[8 * n + 8 * FA_KP] | ((uint)vr[8 * n + 9 * FA_KP] << 16));
                acc[n] = FA_NV_MMA(acc[n], pa, bf);
            }
#endif
        }
        it = it_next;
    }

    /* the row sums over the four lanes, O / l and the LSE */
    const fa_ocl_view vo = fa_view_of(prm, FA_T_O), vl = fa_view_of(prm, FA_T_LSE);
    FA_UNROLL_LOOP
    for (int hr = 0; hr < 2; ++hr) {
        const float l = FA_NV_QSUM(row_sum[hr]);
        const long i = q0 + (hr ? rw1 : rw0);
        if (i >= sq)
            continue;
        float inv;
        const float lrow = fa_row_finish(prm, FA_P_SINK_OFF, sink, h, row_max[hr] * M_LN2_F, l, &inv);
        const long at = fa_at(vo, b, qs + i, h);
        FA_UNROLL_LOOP
        for (int n = 0; n < FA_OT; ++n) {
            const int col = 8 * n + 2 * t;
            FA_STORE(o, at + col, fa_row_output(hr ? acc[n].z : acc[n].x, inv));
            FA_STORE(o, at + col + 1, fa_row_output(hr ? acc[n].w : acc[n].y, inv));
        }
        if (t == 0 && prm[FA_P_HAS_LSE])
            lse[fa_at(vl, b, qs + i, h)] = lrow;
    }
}
#endif
