/* backward_mma.cl: the backward on NVIDIA's matrix instructions (nv_mma.cl), for fp16 and bf16 and
 * head dims that are multiples of 16 up to 128; deterministic like backward.cl (no atomics: dQ in
 * its own kernel, which recomputes S and dP). D comes from backward.cl's fa_backward_dsum, built
 * into the same program. Scores are raw q . k as in backward.cl (the score modifiers in units of
 * the softmax scale), P = exp2(s scale log2 e - LSE log2 e), dS = P o (Z o dP - D) scale.
 *   fa_backward_dkdv_mma  one work-group of 4 warps per (key tile of 64 keys, KV head, batch), each
 *                         warp 16 keys; K and V stay in __local memory, their A fragments read by
 *                         ldmatrix; the query tiles (and a GQA group's heads) are walked 16 rows at
 *                         a time: S^T = K Q^T and dP^T = V dO^T (16 x 16 per warp), P^T and dS^T on
 *                         the accumulators, then dV += P^T dO and dK += dS^T Q with P^T, dS^T as A
 *                         fragments and dO, Q's B fragments by transposing ldmatrix. dK and dV
 *                         (16 keys x d per warp) stay in registers to the end.
 *   fa_backward_dq_mma    one work-group of 4 warps per (64-row query tile, query head, batch), each
 *                         warp 16 rows with Q's and dO's A fragments in registers; per key tile S and
 *                         dP as in the forward, dS on the accumulators, dQ += dS K with K's B
 *                         fragments by transposing ldmatrix.
 * Rows that saw no key (LSE -inf) and elements outside the mask get P = dS = 0 by selection; such
 * rows of Q and dO are loaded as zeros. */

#if FA_KERNELS == 7
#define FA_MW 4            /* warps per work-group */
#define FA_MG (32 * FA_MW) /* work-items per work-group */
#define FA_KP (FA_D + 8)   /* __local row pitch, 16-bit elements */
#define FA_KS (FA_D / 16)  /* 16-wide steps over the head dim */
#define FA_OT (FA_D / 8)   /* 8-column blocks of dK, dV, dQ */
#ifndef FA_DQ_KEYS
#define FA_DQ_KEYS 32 /* keys of a key tile that fa_backward_dq_mma takes at a time (its S and dP registers) */
#endif
#define FA_NT (FA_DQ_KEYS / 8) /* 8-key blocks of S in fa_backward_dq_mma */
#define FA_QS 16           /* query rows per step of fa_backward_dkdv_mma */
#if FA_BM != 16 * FA_MW || FA_BN != 16 * FA_MW || FA_D % 16 || FA_DTYPE == 0 || FA_BN % FA_DQ_KEYS ||                 \
    FA_DQ_KEYS % 16 || FA_D_V != FA_D
#error "backward_mma.cl: 64 x 64 tiles, d a multiple of 16, fp16 or bf16, d_v = d"
#endif

/* The A fragment of rows [r0, r0 + 16) and columns [c0, c0 + 16) of a __local [rows][FA_KP] array:
 * matrices (rows 0-7, columns 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15) of the block. */
#define FA_A_FRAG(base, r0, c0, lm, lr) FA_NV_LDM((base), ((r0) + (lr) + 8 * ((lm) % 2)) * FA_KP + (c0) + 8 * ((lm) / 2))
/* B fragments of two 8-row blocks [r0, r0 + 16) against columns [c0, c0 + 16) (B = the array's
 * rows transposed: S = Q K^T's K): (.x, .y) for rows r0.., (.z, .w) for rows r0 + 8.. */
#define FA_BT_FRAG(base, r0, c0, lm, lr) FA_NV_LDM((base), ((r0) + 8 * ((lm) / 2) + (lr)) * FA_KP + (c0) + 8 * ((lm) % 2))
/* B fragments of rows [r0, r0 + 16) (the product's k) against two 8-column blocks from c0 (P V's V):
 * (.x, .y) for columns c0.., (.z, .w) for c0 + 8.. */
#define FA_B_FRAG(base, r0, c0, lm, lr) FA_NV_LDMT((base), ((r0) + 8 * ((lm) % 2) + (lr)) * FA_KP + (c0) + 8 * ((lm) / 2))

#ifndef FA_QB
#define FA_QB 1 /* buffers of a step's Q and dO rows: the host passes 2 where they fit (tiles.c) */
#endif
#if FA_QB != 1 && FA_QB != 2
#error "backward_mma.cl: FA_QB is 1 or 2"
#endif

#ifndef FA_KB
#define FA_KB 1 /* buffers of fa_backward_dq_mma's K and V tiles: the host passes 2 where they fit */
#endif
#if FA_KB != 1 && FA_KB != 2
#error "backward_mma.cl: FA_KB is 1 or 2"
#endif

/* Starts the copies of keys [k0, k0 + n) of KV head hk (n <= FA_BN, the rest zeros) into k_l and
 * v_l (fa_nv_load_rows_async). */
static inline void fa_bwd_load_kv_async(__local ushort *k_l, __local ushort *v_l, __global const long *prm,
                                        __global const fa_store_t *k, __global const fa_store_t *v, long b, long k0,
                                        long hk, int n, int tid)
{
    const fa_ocl_view vk = fa_view_of(prm, FA_T_K), vv = fa_view_of(prm, FA_T_V);
    fa_nv_load_rows_async(k_l, (__global const ushort *)k, fa_at(vk, b, k0, hk), vk.ss, n, FA_BN, tid, FA_MG);
    fa_nv_load_rows_async(v_l, (__global const ushort *)v, fa_at(vv, b, k0, hk), vv.ss, n, FA_BN, tid, FA_MG);
}

/* One step of fa_backward_dkdv_mma: FA_QS query rows from q0, in query tile qt of query head h;
 * cls is the class of the pair (query tile, the work-group's key tile). */
typedef struct fa_bwd_step {
    long h, qt, q0;
    int cls;
} fa_bwd_step;

/* The step after *st: the next FA_QS rows of its query tile, else the first rows of the next query
 * tile (of heads up to h_end, tiles 0 .. nq - 1) that sees a key of key tile kt; st->h == h_end
 * when none is left. st->qt == -1 starts the walk at head st->h. */
static inline void fa_bwd_step_next(fa_bwd_step *st, __global const long *prm, __global const long *bl_row_ptr,
                                    __global const int *bl_col, __global const uchar *bl_cls, const fa_mask *m,
                                    long kt, long nq, long sq, long h_end)
{
    if (st->qt >= 0) {
        st->q0 += FA_QS;
        if (st->q0 < min(st->qt * FA_BM + FA_BM, sq))
            return;
    }
    while (st->h < h_end) {
        if (++st->qt >= nq) {
            st->qt = -1;
            ++st->h;
            continue;
        }
        const fa_ocl_blocks blk = fa_blocks_of(prm, st->h);
        st->cls = fa_pair_class(prm, bl_row_ptr, bl_col, bl_cls, m, &blk, st->qt, kt);
        if (st->cls != FA_TILE_EMPTY) {
            st->q0 = st->qt * FA_BM;
            return;
        }
    }
}

/* Starts step st: its Q and dO rows into q_l and d_l by cp.async (element by element where the
 * rows do not start at multiples of 8 elements), rows past the sequence and rows that see no key
 * (empty range or LSE -inf) as zeros, since such a row's Q or dO may hold NaN and 0 * NaN is NaN;
 * and its rows' LSE (log2 units), D and visible key ranges (empty for a row that sees no key) into
 * lse_l, dsum_l and range_l. All of it is readable after fa_nv_cp_wait and the barrier after it. */
static inline void fa_bwd_stage(const fa_bwd_step *st, __global const long *prm, const fa_mask *m,
                                __global const ushort *q, __global const ushort *dout, __global const float *lse,
                                __global const float *dsum, long b, long qs, long sq, long row0, __local ushort *q_l,
                                __local ushort *d_l, __local float *lse_l, __local float *dsum_l, __local int *range_l,
                                int tid)
{
    const long h = st->h, q0 = st->q0;
    const int ns = (int)min((long)FA_QS, sq - q0);
    const fa_ocl_view vl = fa_view_of(prm, FA_T_LSE);
    if (tid < FA_QS) {
        int64_t a = 0, z = 0;
        float l = -INFINITY, dsr = 0.0f;
        if (tid < ns) {
            fa_mask_row_range(m, q0 + tid, &a, &z);
            l = lse[fa_at(vl, b, qs + q0 + tid, h)];
            dsr = dsum[h * prm[FA_P_TOTAL_Q] + row0 + q0 + tid];
        }
        if (l == -INFINITY)
            z = a;
        lse_l[tid] = l * M_LOG2E_F;
        dsum_l[tid] = dsr;
        range_l[2 * tid] = (int)a;
        range_l[2 * tid + 1] = (int)z;
    }
    const fa_ocl_view vq = fa_view_of(prm, FA_T_Q), vd = fa_view_of(prm, FA_T_DO);
    const long bq = fa_at(vq, b, qs + q0, h), bd = fa_at(vd, b, qs + q0, h);
    const int whole = bq % 8 == 0 && vq.ss % 8 == 0 && bd % 8 == 0 && vd.ss % 8 == 0;
    for (int e = tid; e < FA_QS * FA_D / 8; e += FA_MG) {
        const int r = e / (FA_D / 8), c = (e % (FA_D / 8)) * 8;
        int live = 0;
        if (r < ns) {
            int64_t a, z;
            fa_mask_row_range(m, q0 + r, &a, &z);
            live = a < z && lse[fa_at(vl, b, qs + q0 + r, h)] != -INFINITY;
        }
        /* a row that is not copied reads from row 0, which exists */
        const long oq = live ? bq + r * vq.ss + c : bq, od = live ? bd + r * vd.ss + c : bd;
        if (whole) {
            fa_nv_cp16(q_l + r * FA_KP + c, q + oq, live);
            fa_nv_cp16(d_l + r * FA_KP + c, dout + od, live);
        } else {
            for (int x = 0; x < 8; ++x) {
                q_l[r * FA_KP + c + x] = live ? q[oq + x] : (ushort)0;
                d_l[r * FA_KP + c + x] = live ? dout[od + x] : (ushort)0;
            }
        }
    }
}

__kernel void fa_backward_dkdv_mma(__global const long *prm, const float scale, const float drop_scale,
                                   __global const fa_store_t *q, __global const fa_store_t *k,
                                   __global const fa_store_t *v, __global const fa_store_t *dout,
                                   __global const float *lse, __global const float *dsum, __global fa_store_t *dk,
                                   __global fa_store_t *dv, __global const int *cu_q, __global const int *cu_k,
                                   __global const uchar *bm_bits, __global const long *bl_row_ptr,
                                   __global const int *bl_col, __global const uchar *bl_cls,
                                   __global const float *alibi_slopes)
{
    __local uint4 kv_l[2 * FA_BN * FA_KP / 8];
    __local uint4 qd_l[FA_QB * 2 * FA_QS * FA_KP / 8]; /* per buffer: Q's rows, then dO's */
    __local float lse_l[FA_QB * FA_QS], dsum_l[FA_QB * FA_QS]; /* per buffer: the rows' LSE (log2 units), D */
    __local int range_l[FA_QB * 2 * FA_QS]; /* and visible keys, empty for a row that sees none */
    FA_NV_XS_DECL
    __local ushort *const k_l = (__local ushort *)kv_l, *const v_l = k_l + FA_BN * FA_KP;

    const int tid = (int)get_local_id(0), warp = tid / 32;
    const int lane = (int)fa_nv_lane(), g = lane / 4, t = lane % 4, lm = lane / 8, lr = lane % 8;
    const long kt = (long)get_group_id(0), hk = (long)get_group_id(1), b = (long)get_group_id(2);
    long sq, sk, qs, ks;
    fa_seq(prm, cu_q, cu_k, b, &sq, &sk, &qs, &ks);
    const long k0 = kt * FA_BN;
    if (k0 >= sk) /* uniform over the work-group */
        return;
    const int nc = (int)min((long)FA_BN, sk - k0);
    const long heads_q = prm[FA_P_HEADS_Q], group = prm[FA_P_GROUP];
    const fa_mask m = fa_mask_make(sq, sk, (int)prm[FA_P_CAUSAL], prm[FA_P_WINDOW_LEFT], prm[FA_P_WINDOW_RIGHT]);
    const uint threshold = (uint)prm[FA_P_DROPOUT_THRESHOLD];
    const long row0 = prm[FA_P_VARLEN] ? qs : b * prm[FA_P_SEQLEN_Q]; /* D's row of query 0 */
    const float l2 = scale * M_LOG2E_F;
    const long nq = (sq + FA_BM - 1) / FA_BM, h_end = (hk + 1) * group;
    __global const ushort *const qg = (__global const ushort *)q, *const dg = (__global const ushort *)dout;
    fa_bwd_load_kv_async(k_l, v_l, prm, k, v, b, ks + k0, hk, nc, tid);
    /* this lane's keys (rows of S^T): kr0 = 16 warp + g and kr0 + 8 */
    const int kr0 = 16 * warp + g;
    float4 dk_acc[FA_OT], dv_acc[FA_OT];
    FA_UNROLL_LOOP
    for (int n = 0; n < FA_OT; ++n) {
        dk_acc[n] = (float4)(0.0f);
        dv_acc[n] = (float4)(0.0f);
    }

    /* The query rows are walked FA_QS at a time over the group's heads and the query tiles that see
     * this key tile; with two buffers the next step's rows are copied while this one's products
     * run (one barrier per step), with one after them (two). */
    fa_bwd_step st;
    st.h = hk * group;
    st.qt = -1;
    st.q0 = 0;
    st.cls = FA_TILE_EMPTY;
    fa_bwd_step_next(&st, prm, bl_row_ptr, bl_col, bl_cls, &m, kt, nq, sq, h_end);
    if (st.h < h_end) /* uniform */
        fa_bwd_stage(&st, prm, &m, qg, dg, lse, dsum, b, qs, sq, row0, (__local ushort *)qd_l,
                     (__local ushort *)qd_l + FA_QS * FA_KP, lse_l, dsum_l, range_l, tid);
    long h_mod = hk * group; /* the head of blk and sm */
    fa_ocl_blocks blk = fa_blocks_of(prm, h_mod);
    fa_score_mod_state sm = fa_score_mod_of(prm, alibi_slopes, scale, b, h_mod, sq, sk); /* raw q . k */
    int u = 0; /* the buffer of st */
    while (st.h < h_end) {
        const fa_bwd_step cur = st;
        fa_nv_cp_wait();
        barrier(CLK_LOCAL_MEM_FENCE); /* cur's rows (at the first step, K and V too) are in; the last step is done */
        fa_bwd_step_next(&st, prm, bl_row_ptr, bl_col, bl_cls, &m, kt, nq, sq, h_end);
        const int u_next = (u + 1) % FA_QB;
        if (FA_QB == 2 && st.h < h_end) {
            __local ushort *const qn = (__local ushort *)qd_l + u_next * 2 * FA_QS * FA_KP;
            fa_bwd_stage(&st, prm, &m, qg, dg, lse, dsum, b, qs, sq, row0, qn, qn + FA_QS * FA_KP,
                         lse_l + u_next * FA_QS, dsum_l + u_next * FA_QS, range_l + u_next * 2 * FA_QS, tid);
        }
        if (cur.h != h_mod) {
            h_mod = cur.h;
            blk = fa_blocks_of(prm, h_mod);
            sm = fa_score_mod_of(prm, alibi_slopes, scale, b, h_mod, sq, sk);
        }
        __local const ushort *const q_l = (__local const ushort *)qd_l + u * 2 * FA_QS * FA_KP;
        __local const ushort *const d_l = q_l + FA_QS * FA_KP;
        __local const float *const lse_u = lse_l + u * FA_QS, *const dsum_u = dsum_l + u * FA_QS;
        __local const int *const range_u = range_l + u * 2 * FA_QS;
        const long qq0 = cur.q0, h = cur.h;
        const int cls = cur.cls;

        /* S^T = K Q^T and dP^T = V dO^T: block n holds queries 8 n + 2t, + 1 of keys kr0
         * (.x, .y) and kr0 + 8 (.z, .w) */
        float4 s_t[2] = {(float4)(0.0f), (float4)(0.0f)}, dpt[2] = {(float4)(0.0f), (float4)(0.0f)};
        FA_UNROLL_LOOP
        for (int s = 0; s < FA_KS; ++s) {
            const uint4 ka = FA_A_FRAG(k_l, 16 * warp, 16 * s, lm, lr);
            const uint4 qb = FA_BT_FRAG(q_l, 0, 16 * s, lm, lr);
            s_t[0] = FA_NV_MMA(s_t[0], ka, qb.xy);
            s_t[1] = FA_NV_MMA(s_t[1], ka, qb.zw);
            const uint4 va = FA_A_FRAG(v_l, 16 * warp, 16 * s, lm, lr);
            const uint4 db = FA_BT_FRAG(d_l, 0, 16 * s, lm, lr);
            dpt[0] = FA_NV_MMA(dpt[0], va, db.xy);
            dpt[1] = FA_NV_MMA(dpt[1], va, db.zw);
        }

        /* P^T o Z (into s_t) and dS^T (into dpt) */
        FA_UNROLL_LOOP
        for (int n = 0; n < 2; ++n) {
            float pv[4] = {s_t[n].x, s_t[n].y, s_t[n].z, s_t[n].w};
            float dv4[4] = {dpt[n].x, dpt[n].y, dpt[n].z, dpt[n].w};
            FA_UNROLL_LOOP
            for (int e = 0; e < 4; ++e) {
                const int c = 8 * n + 2 * t + e % 2; /* query of the step */
                const long key = k0 + kr0 + 8 * (e / 2), i = qq0 + c;
                float z = 1.0f;
                if (threshold) {
                    const fa_philox4 bits = fa_dropout_block((ulong)prm[FA_P_SEED], (ulong)prm[FA_P_OFFSET],
                                                             (ulong)b, (ulong)heads_q, (ulong)h, (ulong)i,
                                                             (ulong)key);
                    z = fa_drop_factor(bits, key, threshold, drop_scale);
                }
                const int vis = key >= range_u[2 * c] && key < range_u[2 * c + 1];
                const float2 pd = fa_bwd_element(&sm, &blk, bm_bits, cls == FA_TILE_PARTIAL, vis, i, key, pv[e],
                                                 dv4[e], scale, l2, lse_u[c], dsum_u[c], z);
                pv[e] = pd.x;
                dv4[e] = pd.y;
            }
            s_t[n] = (float4)(pv[0], pv[1], pv[2], pv[3]);
            dpt[n] = (float4)(dv4[0], dv4[1], dv4[2], dv4[3]);
        }

        /* dV += P^T dO and dK += dS^T Q: the accumulators of the 16 queries are one A fragment */
        const uint4 pa = (uint4)(fa_nv_pack(s_t[0].x, s_t[0].y), fa_nv_pack(s_t[0].z, s_t[0].w),
                                 fa_nv_pack(s_t[1].x, s_t[1].y), fa_nv_pack(s_t[1].z, s_t[1].w));
        const uint4 sa = (uint4)(fa_nv_pack(dpt[0].x, dpt[0].y), fa_nv_pack(dpt[0].z, dpt[0].w),
                                 fa_nv_pack(dpt[1].x, dpt[1].y), fa_nv_pack(dpt[1].z, dpt[1].w));
        FA_UNROLL_LOOP
        for (int n = 0; n < FA_OT; n += 2) {
            const uint4 db = FA_B_FRAG(d_l, 0, 8 * n, lm, lr);
            dv_acc[n] = FA_NV_MMA(dv_acc[n], pa, db.xy);
            dv_acc[n + 1] = FA_NV_MMA(dv_acc[n + 1], pa, db.zw);
            const uint4 qb = FA_B_FRAG(q_l, 0, 8 * n, lm, lr);
            dk_acc[n] = FA_NV_MMA(dk_acc[n], sa, qb.xy);
            dk_acc[n + 1] = FA_NV_MMA(dk_acc[n + 1], sa, qb.zw);
        }
        if (FA_QB == 1 && st.h < h_end) { /* uniform */
            barrier(CLK_LOCAL_MEM_FENCE); /* every warp is done with the buffer */
            fa_bwd_stage(&st, prm, &m, qg, dg, lse, dsum, b, qs, sq, row0, (__local ushort *)qd_l,
                         (__local ushort *)qd_l + FA_QS * FA_KP, lse_l, dsum_l, range_l, tid);
        }
        u = u_next;
    }
    fa_nv_cp_wait(); /* K's and V's copies, where no step ran */
    const fa_ocl_view vdk = fa_view_of(prm, FA_T_DK), vdv = fa_view_of(prm, FA_T_DV);
    FA_UNROLL_LOOP
    for (int hr = 0; hr < 2; ++hr) {
        const long j = k0 + kr0 + 8 * hr;
        if (j >= sk)
            continue;
        const long ak = fa_at(vdk, b, ks + j, hk), av = fa_at(vdv, b, ks + j, hk);
        FA_UNROLL_LOOP
        for (int n = 0; n < FA_OT; ++n) {
            const int col = 8 * n + 2 * t;
            FA_STORE(dk, ak + col, hr ? dk_acc[n].z : dk_acc[n].x);
            FA_STORE(dk, ak + col + 1, hr ? dk_acc[n].w : dk_acc[n].y);
            FA_STORE(dv, av + col, hr ? dv_acc[n].z : dv_acc[n].x);
            FA_STORE(dv, av + col + 1, hr ? dv_acc[n].w : dv_acc[n].y);
        }
    }
}

__kernel void fa_backward_dq_mma(__global const long *prm, const float scale, const float drop_scale,
                                 __global const fa_store_t *q, __global const fa_store_t *k,
                                 __global const fa_store_t *v, __global const fa_store_t *dout,
                                 __global const float *lse, __global const float *dsum, __global fa_store_t *dq,
                                 __global const int *cu_q, __global const int *cu_k, __global const uchar *bm_bits,
                                 __global const long *bl_row_ptr, __global const int *bl_col,
                                 __global const uchar *bl_cls, __global const float *alibi_slopes)
{
    __local uint4 kv_l[FA_KB * 2 * FA_BN * FA_KP / 8]; /* per buffer: K's rows, then V's */
    __local int range_l[2 * FA_BM];
    FA_NV_XS_DECL

    const int tid = (int)get_local_id(0), warp = tid / 32;
    const int lane = (int)fa_nv_lane(), g = lane / 4, t = lane % 4, lm = lane / 8, lr = lane % 8;
    const long qt = (long)get_group_id(0), h = (long)get_group_id(1), b = (long)get_group_id(2);
    long sq, sk, qs, ks;
    fa_seq(prm, cu_q, cu_k, b, &sq, &sk, &qs, &ks);
    const long q0 = qt * FA_BM;
    if (q0 >= sq)
        return;
    const int nr = (int)min((long)FA_BM, sq - q0);
    const long heads_q = prm[FA_P_HEADS_Q], hk = h / prm[FA_P_GROUP];
    const fa_mask m = fa_mask_make(sq, sk, (int)prm[FA_P_CAUSAL], prm[FA_P_WINDOW_LEFT], prm[FA_P_WINDOW_RIGHT]);
    const uint threshold = (uint)prm[FA_P_DROPOUT_THRESHOLD];
    const fa_ocl_blocks blk = fa_blocks_of(prm, h);
    const fa_score_mod_state sm = fa_score_mod_of(prm, alibi_slopes, scale, b, h, sq, sk); /* raw q . k */
    const float l2 = scale * M_LOG2E_F;
    for (int r = tid; r < FA_BM; r += FA_MG) {
        int64_t a = 0, z = 0;
        if (r < nr)
            fa_mask_row_range(&m, q0 + r, &a, &z);
        range_l[2 * r] = (int)a;
        range_l[2 * r + 1] = (int)z;
    }

    /* this lane's rows rw[0] = 16 warp + g and rw[1] = rw[0] + 8: Q's and dO's A fragments, LSE
     * (log2 units) and D */
    const int rw[2] = {16 * warp + g, 16 * warp + g + 8};
    uint4 qf[FA_KS], df[FA_KS];
    float lrow[2], drow[2];
    {
        const fa_ocl_view vq = fa_view_of(prm, FA_T_Q), vd = fa_view_of(prm, FA_T_DO);
        __global const ushort *qh = (__global const ushort *)q, *dh = (__global const ushort *)dout;
        long aq[2], ad[2];
        FA_UNROLL_LOOP
        for (int hr = 0; hr < 2; ++hr) {
            const long i = q0 + min(rw[hr], nr - 1);
            aq[hr] = fa_at(vq, b, qs + i, h);
            ad[hr] = fa_at(vd, b, qs + i, h);
            lrow[hr] = rw[hr] < nr ? lse[fa_at(fa_view_of(prm, FA_T_LSE), b, qs + i, h)] * M_LOG2E_F : -INFINITY;
            drow[hr] = rw[hr] < nr ? dsum[h * prm[FA_P_TOTAL_Q] + (prm[FA_P_VARLEN] ? qs : b * prm[FA_P_SEQLEN_Q]) + i]
                                   : 0.0f;
        }
        FA_UNROLL_LOOP
        for (int s = 0; s < FA_KS; ++s) {
            const int c = 16 * s + 2 * t;
            qf[s] = (uint4)(rw[0] < nr ? fa_nv_ld2(qh, aq[0] + c) : 0u, rw[1] < nr ? fa_nv_ld2(qh, aq[1] + c) : 0u,
                            rw[0] < nr ? fa_nv_ld2(qh, aq[0] + c + 8) : 0u, rw[1] < nr ? fa_nv_ld2(qh, aq[1] + c + 8) : 0u);
            df[s] = (uint4)(rw[0] < nr ? fa_nv_ld2(dh, ad[0] + c) : 0u, rw[1] < nr ? fa_nv_ld2(dh, ad[1] + c) : 0u,
                            rw[0] < nr ? fa_nv_ld2(dh, ad[0] + c + 8) : 0u, rw[1] < nr ? fa_nv_ld2(dh, ad[1] + c + 8) : 0u);
        }
    }
    float4 acc[FA_OT];
    FA_UNROLL_LOOP
    for (int n = 0; n < FA_OT; ++n)
        acc[n] = (float4)(0.0f);

    /* With two buffers the next key tile is copied while this one's products run (one barrier per
     * tile), with one after them (two). */
    const fa_walk walk = fa_walk_of(prm, bl_row_ptr, &m, &blk, qt, q0, nr, sk);
    int cls_next;
    long k0_next;
    long it = fa_walk_next(&walk, walk.begin, bl_col, bl_cls, &m, q0, &cls_next, &k0_next);
    if (it < walk.end) /* uniform */
        fa_bwd_load_kv_async((__local ushort *)kv_l, (__local ushort *)kv_l + FA_BN * FA_KP, prm, k, v, b,
                             ks + k0_next, hk, (int)min((long)FA_BN, sk - k0_next), tid);
    int u = 0; /* the buffer of the tile */
    while (it < walk.end) {
        const int cls = cls_next, k0 = (int)k0_next, nc = min(FA_BN, (int)sk - k0);
        it = fa_walk_next(&walk, it + 1, bl_col, bl_cls, &m, q0, &cls_next, &k0_next);
        fa_nv_cp_wait();
        barrier(CLK_LOCAL_MEM_FENCE); /* this tile's K and V are in; the previous tile is done; range_l published */
        const int u_next = (u + 1) % FA_KB;
        if (FA_KB == 2 && it < walk.end) {
            __local ushort *const kn = (__local ushort *)kv_l + u_next * 2 * FA_BN * FA_KP;
            fa_bwd_load_kv_async(kn, kn + FA_BN * FA_KP, prm, k, v, b, ks + k0_next, hk,
                                 (int)min((long)FA_BN, sk - k0_next), tid);
        }
        __local const ushort *const k_l = (__local const ushort *)kv_l + u * 2 * FA_BN * FA_KP;
        __local const ushort *const v_l = k_l + FA_BN * FA_KP;

        /* the key tile in parts of FA_DQ_KEYS keys: fewer S and dP registers live at once (the parts
         * are not unrolled into each other) */
        FA_UNROLL_BY(1)
        for (int kp = 0; kp < FA_BN; kp += FA_DQ_KEYS) {
            /* S = Q K^T and dP = dO V^T: block n holds keys kp + 8 n + 2t, + 1 of rows rw[0] (.x, .y), rw[1]
             * (.z, .w) */
            float4 s[FA_NT], dp[FA_NT];
            FA_UNROLL_LOOP
            for (int n = 0; n < FA_NT; ++n) {
                s[n] = (float4)(0.0f);
                dp[n] = (float4)(0.0f);
            }
            FA_UNROLL_LOOP
            for (int n = 0; n < FA_NT; n += 2) {
                FA_UNROLL_LOOP
                for (int st = 0; st < FA_KS; ++st) {
                    const uint4 kb = FA_BT_FRAG(k_l, kp + 8 * n, 16 * st, lm, lr);
                    s[n] = FA_NV_MMA(s[n], qf[st], kb.xy);
                    s[n + 1] = FA_NV_MMA(s[n + 1], qf[st], kb.zw);
                    const uint4 vb = FA_BT_FRAG(v_l, kp + 8 * n, 16 * st, lm, lr);
                    dp[n] = FA_NV_MMA(dp[n], df[st], vb.xy);
                    dp[n + 1] = FA_NV_MMA(dp[n + 1], df[st], vb.zw);
                }
            }

            /* dS (into s) */
            FA_UNROLL_LOOP
            for (int n = 0; n < FA_NT; ++n) {
                float sv[4] = {s[n].x, s[n].y, s[n].z, s[n].w}, pv[4] = {dp[n].x, dp[n].y, dp[n].z, dp[n].w};
                FA_UNROLL_LOOP
                for (int e = 0; e < 4; ++e) {
                    const int hr = e / 2, rr = rw[hr], jj = kp + 8 * n + 2 * t + e % 2;
                    const long i = q0 + rr, key = (long)k0 + jj;
                    float z = 1.0f;
                    if (threshold) {
                        const fa_philox4 bits =
                            fa_dropout_block((ulong)prm[FA_P_SEED], (ulong)prm[FA_P_OFFSET], (ulong)b, (ulong)heads_q,
                                             (ulong)h, (ulong)i, (ulong)key);
                        z = fa_drop_factor(bits, key, threshold, drop_scale);
                    }
                    const int vis =
                        key >= range_l[2 * rr] && key < range_l[2 * rr + 1] && jj < nc && lrow[hr] != -INFINITY;
                    sv[e] = fa_bwd_element(&sm, &blk, bm_bits, cls == FA_TILE_PARTIAL, vis, i, key, sv[e], pv[e], scale,
                                           l2, lrow[hr], drow[hr], z).y;
                }
                s[n] = (float4)(sv[0], sv[1], sv[2], sv[3]);
            }

            /* dQ += dS K: keys kp + 16 j .. + 15 are blocks 2 j and 2 j + 1 of dS, one A fragment */
            FA_UNROLL_LOOP
            for (int j = 0; j < FA_DQ_KEYS / 16; ++j) {
                const uint4 sa = (uint4)(fa_nv_pack(s[2 * j].x, s[2 * j].y), fa_nv_pack(s[2 * j].z, s[2 * j].w),
                                         fa_nv_pack(s[2 * j + 1].x, s[2 * j + 1].y),
                                         fa_nv_pack(s[2 * j + 1].z, s[2 * j + 1].w));
                FA_UNROLL_LOOP
                for (int n = 0; n < FA_OT; n += 2) {
                    const uint4 kb = FA_B_FRAG(k_l, kp + 16 * j, 8 * n, lm, lr);
                    acc[n] = FA_NV_MMA(acc[n], sa, kb.xy);
                    acc[n + 1] = FA_NV_MMA(acc[n + 1], sa, kb.zw);
                }
            }
        }
        if (FA_KB == 1 && it < walk.end) { /* uniform */
            barrier(CLK_LOCAL_MEM_FENCE); /* every warp is done with the buffer */
            fa_bwd_load_kv_async((__local ushort *)kv_l, (__local ushort *)kv_l + FA_BN * FA_KP, prm, k, v, b,
                                 ks + k0_next, hk, (int)min((long)FA_BN, sk - k0_next), tid);
        }
        u = u_next;
    }
    fa_nv_cp_wait();
    const fa_ocl_view vdq = fa_view_of(prm, FA_T_DQ);
    FA_UNROLL_LOOP
    for (int hr = 0; hr < 2; ++hr) {
        const long i = q0 + rw[hr];
        if (i >= sq)
            continue;
        /* a row that saw no key: dQ = 0 (its dS is 0, but 0 times a NaN in K is NaN) */
        const float keep = fa_row_absent(lrow[hr]) ? 0.0f : 1.0f;
        const long at = fa_at(vdq, b, qs + i, h);
        FA_UNROLL_LOOP
        for (int n = 0; n < FA_OT; ++n) {
            const int col = 8 * n + 2 * t;
            FA_STORE(dq, at + col, fa_row_output(hr ? acc[n].z : acc[n].x, keep));
            FA_STORE(dq, at + col + 1, fa_row_output(hr ? acc[n].w : acc[n].y, keep));
        }
    }
}
#endif
