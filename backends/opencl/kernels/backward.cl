/* backward.cl: the fused backward for GPUs (Dao et al. 2022, Algorithm 2) without atomics, so every
 * run gives the same bits, written the way forward.cl is: work-groups of FA_WG work-items, each
 * owning a register block of the score tile, its operands passing through __local memory in
 * FA_DC-column passes. Four kernels:
 *   fa_backward_dsum   D = rowsum(dO o O), one query row per work-item;
 *   fa_backward_dsink  the learnable sink's gradient from LSE and D (core/sink.h), one work-group
 *                      per query head, summed in a fixed order;
 *   fa_backward_dkdv   one work-group per (key tile of FA_BN keys, FA_DA head-dim columns, KV
 *                      head, batch). Per query tile of FA_BM rows (the query heads of a GQA group
 *                      in order): S^T = K Q^T and dP^T = V dO^T (FA_TN keys x FA_TM queries per
 *                      work-item), P and dS from LSE and D, then dV += P^T dO and dK += dS^T Q
 *                      with P and dS through __local memory and dO, Q in FA_DA-wide chunks; dK and
 *                      dV (FA_TN keys x the work-item's columns) stay in registers to the end;
 *   fa_backward_dq     one work-group per (query tile, FA_DA columns, query head, batch): S, dP
 *                      recomputed per key tile, dQ += dS K with dS^T through __local memory.
 * dQ's own kernel recomputes S and dP (seven products of a tile where an atomic dQ would need
 * five) so that no float atomics are needed. Dropout factors are regenerated from core/philox.h;
 * the score modifiers (FA_SCORE_MOD) are applied to the recomputed raw scores q . k as the forward
 * did, and dS is multiplied by their derivative. Rows with LSE = -inf (core/empty_row.h) and
 * elements outside the mask get P = dS = 0 by selection, and such rows of Q and dO enter dK and
 * dV as zeros. Q and K have FA_D columns, V and dO FA_D_V: the passes run over the larger, the
 * other operands' columns past their own width loaded as zeros. fp32 compute; fp16 and bf16 as
 * storage. CPU devices run backward_vec.cl. */

#if FA_KERNELS == 3 || FA_KERNELS == 4 || FA_KERNELS == 7 /* 7: backward_mma.cl's program */
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
    for (int c = 0; c < FA_D_V; ++c)
        acc = mad(FA_LOAD(o, ao + c), FA_LOAD(dout, ad + c), acc);
    const long row = prm[FA_P_VARLEN] ? qs + i : b * prm[FA_P_SEQLEN_Q] + i;
    dsum[h * prm[FA_P_TOTAL_Q] + row] = acc;
}

#define FA_SINK_WG 64 /* work-items of fa_backward_dsink (the host launches exactly this many) */

/* dsink_h = sum over the rows i of head h (every sequence's, in packed order) of
 * fa_sink_grad_term(sink_h, LSE_i, D_i), D from fa_backward_dsum. Work-item t adds rows t,
 * t + FA_SINK_WG, ... in order, then a fixed tree adds the partial sums: the same bits on every
 * run. Written, not accumulated, to dsink[prm[FA_P_DSINK_OFF] + h]. */
__kernel __attribute__((reqd_work_group_size(FA_SINK_WG, 1, 1))) void
fa_backward_dsink(__global const long *prm, __global const float *lse, __global const float *dsum,
                  __global const float *sink, __global float *dsink, __global const int *cu_q)
{
    __local float part[FA_SINK_WG];
    const int tid = (int)get_local_id(0);
    const long h = (long)get_group_id(1), total_q = prm[FA_P_TOTAL_Q];
    const int varlen = prm[FA_P_VARLEN] != 0;
    const long sq = prm[FA_P_SEQLEN_Q];
    const float sh = sink[prm[FA_P_SINK_OFF] + h];
    const fa_ocl_view vl = fa_view_of(prm, FA_T_LSE);
    /* varlen: the rows of the sequences, [0, cu_seqlens_q[batch]); the packed rows past them belong
     * to none (their D is not computed) */
    const long rows = varlen ? (long)cu_q[prm[FA_P_CU_Q_OFF] + prm[FA_P_BATCH]] : total_q;
    float acc = 0.0f;
    for (long row = tid; row < rows; row += FA_SINK_WG) {
        /* varlen views address rows by their packed index (no batch stride), dense ones by batch
         * and row */
        const long b = varlen ? 0 : row / sq, i = varlen ? row : row % sq;
        acc += fa_sink_grad_term(sh, lse[fa_at(vl, b, i, h)], dsum[h * total_q + row]);
    }
    part[tid] = acc;
    for (int w = FA_SINK_WG / 2; w > 0; w /= 2) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (tid < w)
            part[tid] += part[tid + w];
    }
    if (tid == 0)
        dsink[prm[FA_P_DSINK_OFF] + h] = part[0];
}
#endif


#if FA_KERNELS == 3
#ifndef FA_TM
#define FA_TM 4 /* query rows per work-item, a multiple of 4 */
#endif
#ifndef FA_TN
#define FA_TN 4 /* keys per work-item, a multiple of 4 */
#endif
#ifndef FA_DC
#define FA_DC 16 /* head-dim columns of the four operands per pass through __local memory */
#endif
#ifndef FA_DA
#define FA_DA FA_DM /* head-dim columns of dK, dV or dQ one work-group accumulates */
#endif
#define FA_MAX2(a, b) ((a) > (b) ? (a) : (b))
#define FA_TXK (FA_BM / FA_TM) /* fa_backward_dkdv: work-items across the queries, */
#define FA_TXQ (FA_BN / FA_TN) /* fa_backward_dq: across the keys */
#define FA_WG ((FA_BM / FA_TM) * (FA_BN / FA_TN))
#define FA_OWK (4 * FA_TXK) /* accumulator columns one float4 per work-item covers */
#define FA_OWQ (4 * FA_TXQ)
#define FA_GK ((FA_DA + FA_OWK - 1) / FA_OWK) /* float4 columns per work-item and key */
#define FA_GQ ((FA_DA + FA_OWQ - 1) / FA_OWQ) /* and per query row */
#define FA_DM FA_MAX2(FA_D, FA_D_V) /* the wider head dim: the passes' extent, dK and dV's columns */
#define FA_NSPLIT_KV ((FA_DM + FA_DA - 1) / FA_DA) /* work-groups per tile, one per FA_DA columns: */
#define FA_NSPLIT_Q ((FA_D + FA_DA - 1) / FA_DA)   /* of dK and dV, of dQ */
#define FA_DS ((FA_DM + FA_DC - 1) / FA_DC * FA_DC)
#define FA_CP (FA_DC + 4) /* pass row pitch: a float4 of padding spreads a warp's reads over banks */
#define FA_PK (FA_BN + 4) /* P, dS of fa_backward_dkdv as [query][key] */
#define FA_PQ (FA_BM + 4) /* dS^T of fa_backward_dq as [key][query] */
/* region A: the four operands' passes, or one chunk of dO, Q (FA_BM x FA_OWK) or K (FA_BN x FA_OWQ) */
#define FA_RA FA_MAX2(FA_CP * 2 * (FA_BM + FA_BN), FA_MAX2(FA_BM * FA_OWK, FA_BN * FA_OWQ))
#define FA_RP FA_MAX2(FA_BM * FA_PK, FA_BN * FA_PQ) /* region P */
#define FA_NPM (FA_BM * FA_DC / 4 / FA_WG) /* float4 per work-item of a query-side pass, */
#define FA_NPN (FA_BN * FA_DC / 4 / FA_WG) /* a key-side pass, */
#define FA_NCK (FA_BM * FA_OWK / 4 / FA_WG) /* a chunk of dO or Q, */
#define FA_NCQ (FA_BN * FA_OWQ / 4 / FA_WG) /* a chunk of K */

#if (FA_BM * FA_DC / 4) % FA_WG || (FA_BN * FA_DC / 4) % FA_WG || (FA_BM * FA_OWK / 4) % FA_WG ||                      \
    (FA_BN * FA_OWQ / 4) % FA_WG
#error "backward.cl: a pass or chunk is not a whole number of float4 per work-item"
#endif
#if FA_BM % FA_TM || FA_BN % FA_TN || FA_TM % 4 || FA_TN % 4 || FA_DC % 4 || FA_DA % 4
#error "backward.cl: tile shape"
#endif

#define FA_LD4(ptr, idx) (((__local const float4 *)(ptr))[(idx) >> 2])
#define FA_ST4(ptr, idx, x) (((__local float4 *)(ptr))[(idx) >> 2] = (x))

/* Float4 e of a pass (rows of FA_DC / 4 float4): its place in __local memory, and its value from
 * the tensor rows at base + r stride (rows at or past nvalid, and columns past the tensor's width,
 * FA_D or FA_D_V, are 0). */
static inline int fa_pass_at(int e)
{
    return e / (FA_DC / 4) * FA_CP + (e % (FA_DC / 4)) * 4;
}

static inline float4 fa_pass_load(__global const fa_store_t *t, long base, long stride, int e, int nvalid, int dc,
                                   int width)
{
    const int r = e / (FA_DC / 4), c = dc + (e % (FA_DC / 4)) * 4;
    return r < nvalid && c < width ? fa_load4(t, base + r * stride + c, width - c) : (float4)(0.0f);
}

/* One pass: FA_DC columns from dc of the query tile's Q and dO rows (nr valid, from bq and bd with
 * row strides sq and sd) and of the key tile's K and V rows (nc valid) into their __local regions;
 * every load is issued before the first store. */
static inline void fa_bwd_pass(__local float *qp_l, __local float *dp_l, __local float *kp_l, __local float *vp_l,
                               __global const fa_store_t *q, long bq, long sq, __global const fa_store_t *dout, long bd,
                               long sd, __global const fa_store_t *k, long bk, long sk, __global const fa_store_t *v,
                               long bv, long sv, int nr, int nc, int dc, int tid)
{
    float4 xk[FA_NPN], xv[FA_NPN], xq[FA_NPM], xd[FA_NPM];
    FA_UNROLL_LOOP
    for (int u = 0; u < FA_NPM; ++u) {
        xq[u] = fa_pass_load(q, bq, sq, tid + u * FA_WG, nr, dc, FA_D);
        xd[u] = fa_pass_load(dout, bd, sd, tid + u * FA_WG, nr, dc, FA_D_V);
    }
    FA_UNROLL_LOOP
    for (int u = 0; u < FA_NPN; ++u) {
        xk[u] = fa_pass_load(k, bk, sk, tid + u * FA_WG, nc, dc, FA_D);
        xv[u] = fa_pass_load(v, bv, sv, tid + u * FA_WG, nc, dc, FA_D_V);
    }
    FA_UNROLL_LOOP
    for (int u = 0; u < FA_NPM; ++u) {
        FA_ST4(qp_l, fa_pass_at(tid + u * FA_WG), xq[u]);
        FA_ST4(dp_l, fa_pass_at(tid + u * FA_WG), xd[u]);
    }
    FA_UNROLL_LOOP
    for (int u = 0; u < FA_NPN; ++u) {
        FA_ST4(kp_l, fa_pass_at(tid + u * FA_WG), xk[u]);
        FA_ST4(vp_l, fa_pass_at(tid + u * FA_WG), xv[u]);
    }
}

/* Float4 e of a chunk of width w (a multiple of 4) from column c0: row e / (w / 4), stored densely. */
static inline float4 fa_chunk_load(__global const fa_store_t *t, long base, long stride, int e, int w, int nvalid,
                                   int c0, int c_end)
{
    const int r = e / (w / 4), c = c0 + (e % (w / 4)) * 4;
    return r < nvalid && c < c_end ? fa_load4(t, base + r * stride + c, c_end - c) : (float4)(0.0f);
}

/* acc[x][y] += (row ra0 + x of a_l) . (row rb0 + y stride_b of b_l) over one pass, for X rows and Y
 * columns per work-item. */
#define FA_PASS_PRODUCT(acc, a_l, b_l, X, Y, ra0, rb0, stride_b)                                                       \
    do {                                                                                                               \
        FA_UNROLL_LOOP                                                                                                 \
        for (int c = 0; c < FA_DC; c += 4) {                                                                           \
            float4 a_[X], b_[Y];                                                                                       \
            FA_UNROLL_LOOP                                                                                             \
            for (int x = 0; x < (X); ++x)                                                                              \
                a_[x] = FA_LD4(a_l, ((ra0) + x) * FA_CP + c);                                                          \
            FA_UNROLL_LOOP                                                                                             \
            for (int y = 0; y < (Y); ++y)                                                                              \
                b_[y] = FA_LD4(b_l, ((rb0) + (stride_b) * y) * FA_CP + c);                                             \
            FA_UNROLL_LOOP                                                                                             \
            for (int x = 0; x < (X); ++x) {                                                                            \
                FA_UNROLL_LOOP                                                                                         \
                for (int y = 0; y < (Y); ++y) {                                                                        \
                    float s_ = mad(a_[x].s0, b_[y].s0, acc[x][y]);                                                     \
                    s_ = mad(a_[x].s1, b_[y].s1, s_);                                                                  \
                    s_ = mad(a_[x].s2, b_[y].s2, s_);                                                                  \
                    acc[x][y] = mad(a_[x].s3, b_[y].s3, s_);                                                           \
                }                                                                                                      \
            }                                                                                                          \
        }                                                                                                              \
    } while (0)

/* acc[x][g] += sum over n rows of (X values at n * pitch + r0 of w_l) x (float4 at n * ow + 4 tx
 * + ow g of c_l): the rank-n update of the accumulators from a weight matrix (P, dS or dS^T) and a
 * chunk (dO, Q or K) in __local memory; g0 selects the chunk's accumulator column. */
#define FA_CHUNK_PRODUCT(acc, g0, w_l, c_l, X, n_rows, pitch, r0, ow, txx)                                             \
    do {                                                                                                               \
        FA_UNROLL_BY(4)                                                                                                \
        for (int n = 0; n < (n_rows); ++n) {                                                                           \
            float w_[X];                                                                                               \
            FA_UNROLL_LOOP                                                                                             \
            for (int x4 = 0; x4 < (X) / 4; ++x4) {                                                                     \
                const float4 t_ = FA_LD4(w_l, n * (pitch) + (r0) + 4 * x4);                                            \
                w_[4 * x4] = t_.s0;                                                                                    \
                w_[4 * x4 + 1] = t_.s1;                                                                                \
                w_[4 * x4 + 2] = t_.s2;                                                                                \
                w_[4 * x4 + 3] = t_.s3;                                                                                \
            }                                                                                                          \
            const float4 cx_ = FA_LD4(c_l, n * (ow) + 4 * (txx));                                                     \
            FA_UNROLL_LOOP                                                                                             \
            for (int x = 0; x < (X); ++x)                                                                              \
                acc[x][g0] = mad((float4)(w_[x]), cx_, acc[x][g0]);                                                    \
        }                                                                                                              \
    } while (0)

__kernel void fa_backward_dkdv(__global const long *prm, const float scale, const float drop_scale,
                               __global const fa_store_t *q, __global const fa_store_t *k, __global const fa_store_t *v,
                               __global const fa_store_t *dout, __global const float *lse,
                               __global const float *dsum, __global fa_store_t *dk, __global fa_store_t *dv,
                               __global const int *cu_q, __global const int *cu_k, __global const uchar *bm_bits,
                               __global const long *bl_row_ptr, __global const int *bl_col,
                               __global const uchar *bl_cls, __global const float *alibi_slopes)
{
    __local float4 region_a[FA_RA / 4];
    __local float4 region_p[FA_RP / 4];
    __local float lse_l[FA_BM], dsum_l[FA_BM]; /* the query tile's LSE (log2 units) and D */
    __local int range_l[2 * FA_BM];            /* each query row's visible keys [lo, hi) */
    __local float *const a_l = (__local float *)region_a, *const p_l = (__local float *)region_p;
    __local float *const kp_l = a_l, *const vp_l = kp_l + FA_BN * FA_CP;
    __local float *const qp_l = vp_l + FA_BN * FA_CP, *const dp_l = qp_l + FA_BM * FA_CP;

    const int tid = (int)get_local_id(0), tx = tid % FA_TXK, ty = tid / FA_TXK;
    const long kt = (long)get_group_id(0) / FA_NSPLIT_KV, hk = (long)get_group_id(1), b = (long)get_group_id(2);
    /* this work-group's columns [col0, col_end_k) of dK and [col0, col_end_v) of dV (either may be
     * empty when d != d_v) */
    const int col0 = (int)(get_group_id(0) % FA_NSPLIT_KV) * FA_DA, col_end_k = min(FA_D, col0 + FA_DA);
    const int col_end_v = min(FA_D_V, col0 + FA_DA);
    long sq, sk, qs, ks;
    fa_seq(prm, cu_q, cu_k, b, &sq, &sk, &qs, &ks);
    const long k0 = kt * FA_BN;
    if (k0 >= sk) /* uniform over the work-group */
        return;
    const int nc = (int)min((long)FA_BN, sk - k0);
    const long heads_q = prm[FA_P_HEADS_Q], group = prm[FA_P_GROUP], total_q = prm[FA_P_TOTAL_Q];
    const fa_mask m = fa_mask_make(sq, sk, (int)prm[FA_P_CAUSAL], prm[FA_P_WINDOW_LEFT], prm[FA_P_WINDOW_RIGHT]);
    const uint threshold = (uint)prm[FA_P_DROPOUT_THRESHOLD];
    const long row0 = prm[FA_P_VARLEN] ? qs : b * prm[FA_P_SEQLEN_Q]; /* D's row of query 0 */
    const float l2 = scale * M_LOG2E_F;
    const long nq = (sq + FA_BM - 1) / FA_BM;

    float4 dk_acc[FA_TN][FA_GK], dv_acc[FA_TN][FA_GK];
    FA_UNROLL_LOOP
    for (int x = 0; x < FA_TN; ++x) {
        FA_UNROLL_LOOP
        for (int g = 0; g < FA_GK; ++g) {
            dk_acc[x][g] = (float4)(0.0f);
            dv_acc[x][g] = (float4)(0.0f);
        }
    }

    /* no query rows (nq = 0): dK = dV = 0 without walking the group's heads */
    for (long h = hk * group; nq > 0 && h < (hk + 1) * group; ++h) {
        const fa_ocl_blocks blk = fa_blocks_of(prm, h);
        const fa_score_mod_state sm = fa_score_mod_of(prm, alibi_slopes, scale, b, h, sq, sk); /* raw q . k */
        for (long qt = 0; qt < nq; ++qt) {
            const int cls = fa_pair_class(prm, bl_row_ptr, bl_col, bl_cls, &m, &blk, qt, kt);
            if (cls == FA_TILE_EMPTY) /* uniform */
                continue;
            const long q0 = qt * FA_BM;
            const int nr = (int)min((long)FA_BM, sq - q0);
            const fa_ocl_view vq = fa_view_of(prm, FA_T_Q), vd = fa_view_of(prm, FA_T_DO);
            const long bq = fa_at(vq, b, qs + q0, h), bd = fa_at(vd, b, qs + q0, h);
            barrier(CLK_LOCAL_MEM_FENCE); /* the previous tile is done with every __local array */
            for (int r = tid; r < FA_BM; r += FA_WG) {
                int64_t a = 0, z = 0;
                float l = -INFINITY, dsr = 0.0f;
                if (r < nr) {
                    fa_mask_row_range(&m, q0 + r, &a, &z);
                    l = lse[fa_at(fa_view_of(prm, FA_T_LSE), b, qs + q0 + r, h)];
                    dsr = dsum[h * total_q + row0 + q0 + r];
                }
                if (l == -INFINITY) /* a row that saw no key: P = 0 */
                    z = a;
                lse_l[r] = l * M_LOG2E_F;
                dsum_l[r] = dsr;
                range_l[2 * r] = (int)a;
                range_l[2 * r + 1] = (int)z;
            }

            /* S^T = K Q^T and dP^T = V dO^T */
            float s[FA_TN][FA_TM], dpt[FA_TN][FA_TM];
            FA_UNROLL_LOOP
            for (int x = 0; x < FA_TN; ++x) {
                FA_UNROLL_LOOP
                for (int y = 0; y < FA_TM; ++y) {
                    s[x][y] = 0.0f;
                    dpt[x][y] = 0.0f;
                }
            }
            for (int dc = 0; dc < FA_DS; dc += FA_DC) {
                if (dc > 0)
                    barrier(CLK_LOCAL_MEM_FENCE); /* the previous pass is read */
                {
                    const fa_ocl_view vk = fa_view_of(prm, FA_T_K), vv = fa_view_of(prm, FA_T_V);
                    fa_bwd_pass(qp_l, dp_l, kp_l, vp_l, q, bq, vq.ss, dout, bd, vd.ss, k, fa_at(vk, b, ks + k0, hk), vk.ss,
                                v, fa_at(vv, b, ks + k0, hk), vv.ss, nr, nc, dc, tid);
                }
                barrier(CLK_LOCAL_MEM_FENCE);
                FA_PASS_PRODUCT(s, kp_l, qp_l, FA_TN, FA_TM, ty * FA_TN, tx, FA_TXK);
                FA_PASS_PRODUCT(dpt, vp_l, dp_l, FA_TN, FA_TM, ty * FA_TN, tx, FA_TXK);
            }

            /* P o Z (into s) and dS (into dpt) of key ty FA_TN + x, query tx + FA_TXK y */
            FA_UNROLL_LOOP
            for (int y = 0; y < FA_TM; ++y) {
                const int qq = tx + FA_TXK * y;
                const long i = q0 + qq;
                const int lo = range_l[2 * qq], hi = range_l[2 * qq + 1];
                const float lrow = lse_l[qq], drow = dsum_l[qq];
                fa_philox4 bits = {{0u, 0u, 0u, 0u}};
                FA_UNROLL_LOOP
                for (int x4 = 0; x4 < FA_TN / 4; ++x4) {
                    /* this work-item's keys come 4 at a time: a Philox block per 8 keys, fetched
                     * where a block starts (or at the first four) */
                    const long key4 = k0 + ty * FA_TN + 4 * x4;
                    if (threshold && (x4 == 0 || (key4 & 7) == 0))
                        bits = fa_dropout_block((ulong)prm[FA_P_SEED], (ulong)prm[FA_P_OFFSET], (ulong)b,
                                                (ulong)heads_q, (ulong)h, (ulong)i, (ulong)key4);
                    FA_UNROLL_LOOP
                    for (int t = 0; t < 4; ++t) {
                        const int x = 4 * x4 + t;
                        const long key = key4 + t;
                        const float z = threshold ? fa_drop_factor(bits, key, threshold, drop_scale) : 1.0f;
                        const float2 pd = fa_bwd_element(&sm, &blk, bm_bits, cls == FA_TILE_PARTIAL,
                                                         key >= lo && key < hi, i, key, s[x][y], dpt[x][y], scale,
                                                         l2, lrow, drow, z);
                        s[x][y] = pd.x;
                        dpt[x][y] = pd.y;
                    }
                }
            }

            /* dV += (P o Z)^T dO, then dK += dS^T Q: the weights to region P as [query][key], the
             * other operand through region A in FA_OWK-column chunks. Rows with no visible key enter
             * as zeros (their dO or Q may hold anything). */
            for (int pass = 0; pass < 2; ++pass) {
                if (pass)
                    barrier(CLK_LOCAL_MEM_FENCE); /* P is read */
                FA_UNROLL_LOOP
                for (int y = 0; y < FA_TM; ++y) {
                    FA_UNROLL_LOOP
                    for (int x4 = 0; x4 < FA_TN / 4; ++x4) {
                        float4 w;
                        if (pass)
                            w = (float4)(dpt[4 * x4][y], dpt[4 * x4 + 1][y], dpt[4 * x4 + 2][y], dpt[4 * x4 + 3][y]);
                        else
                            w = (float4)(s[4 * x4][y], s[4 * x4 + 1][y], s[4 * x4 + 2][y], s[4 * x4 + 3][y]);
                        FA_ST4(p_l, (tx + FA_TXK * y) * FA_PK + ty * FA_TN + 4 * x4, w);
                    }
                }
                FA_UNROLL_LOOP
                for (int g = 0; g < FA_GK; ++g) {
                    barrier(CLK_LOCAL_MEM_FENCE); /* region A free, the weights published */
                    {
                        float4 xc[FA_NCK];
                        FA_UNROLL_LOOP
                        for (int u = 0; u < FA_NCK; ++u) {
                            const int e = tid + u * FA_WG, r = e / (FA_OWK / 4);
                            const int live = r < nr && range_l[2 * r] < range_l[2 * r + 1];
                            xc[u] = fa_chunk_load(pass ? q : dout, pass ? bq : bd, pass ? vq.ss : vd.ss, e, FA_OWK,
                                                  live ? nr : 0, col0 + g * FA_OWK, pass ? col_end_k : col_end_v);
                        }
                        FA_UNROLL_LOOP
                        for (int u = 0; u < FA_NCK; ++u)
                            FA_ST4(a_l, 4 * (tid + u * FA_WG), xc[u]);
                    }
                    barrier(CLK_LOCAL_MEM_FENCE);
                    if (pass)
                        FA_CHUNK_PRODUCT(dk_acc, g, p_l, a_l, FA_TN, FA_BM, FA_PK, ty * FA_TN, FA_OWK, tx);
                    else
                        FA_CHUNK_PRODUCT(dv_acc, g, p_l, a_l, FA_TN, FA_BM, FA_PK, ty * FA_TN, FA_OWK, tx);
                }
            }
        }
    }
    const fa_ocl_view vdk = fa_view_of(prm, FA_T_DK), vdv = fa_view_of(prm, FA_T_DV);
    FA_UNROLL_LOOP
    for (int x = 0; x < FA_TN; ++x) {
        const long j = k0 + ty * FA_TN + x;
        if (j >= sk)
            continue;
        const long ak = fa_at(vdk, b, ks + j, hk), av = fa_at(vdv, b, ks + j, hk);
        FA_UNROLL_LOOP
        for (int g = 0; g < FA_GK; ++g) {
            const int col = col0 + g * FA_OWK + 4 * tx;
            if (col < col_end_k)
                fa_store4(dk, ak + col, col_end_k - col, dk_acc[x][g]);
            if (col < col_end_v)
                fa_store4(dv, av + col, col_end_v - col, dv_acc[x][g]);
        }
    }
}

__kernel void fa_backward_dq(__global const long *prm, const float scale, const float drop_scale,
                             __global const fa_store_t *q, __global const fa_store_t *k, __global const fa_store_t *v,
                             __global const fa_store_t *dout, __global const float *lse, __global const float *dsum,
                             __global fa_store_t *dq, __global const int *cu_q, __global const int *cu_k,
                             __global const uchar *bm_bits, __global const long *bl_row_ptr,
                             __global const int *bl_col, __global const uchar *bl_cls,
                             __global const float *alibi_slopes)
{
    __local float4 region_a[FA_RA / 4];
    __local float4 region_p[FA_RP / 4];
    __local int range_l[2 * FA_BM];
    __local float *const a_l = (__local float *)region_a, *const p_l = (__local float *)region_p;
    __local float *const qp_l = a_l, *const dp_l = qp_l + FA_BM * FA_CP;
    __local float *const kp_l = dp_l + FA_BM * FA_CP, *const vp_l = kp_l + FA_BN * FA_CP;

    const int tid = (int)get_local_id(0), tx = tid % FA_TXQ, ty = tid / FA_TXQ;
    const long qt = (long)get_group_id(0) / FA_NSPLIT_Q, h = (long)get_group_id(1), b = (long)get_group_id(2);
    const int col0 = (int)(get_group_id(0) % FA_NSPLIT_Q) * FA_DA, col_end = min(FA_D, col0 + FA_DA);
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
    const fa_ocl_view vq = fa_view_of(prm, FA_T_Q), vd = fa_view_of(prm, FA_T_DO);
    const long bq = fa_at(vq, b, qs + q0, h), bd = fa_at(vd, b, qs + q0, h);

    for (int r = tid; r < FA_BM; r += FA_WG) {
        int64_t a = 0, z = 0;
        if (r < nr)
            fa_mask_row_range(&m, q0 + r, &a, &z);
        range_l[2 * r] = (int)a;
        range_l[2 * r + 1] = (int)z;
    }
    /* this work-item's rows ty FA_TM + x: LSE (log2 units) and D */
    float lrow[FA_TM], drow[FA_TM];
    FA_UNROLL_LOOP
    for (int x = 0; x < FA_TM; ++x) {
        const int r = ty * FA_TM + x;
        lrow[x] = r < nr ? lse[fa_at(fa_view_of(prm, FA_T_LSE), b, qs + q0 + r, h)] * M_LOG2E_F : -INFINITY;
        drow[x] = r < nr ? dsum[h * prm[FA_P_TOTAL_Q] + (prm[FA_P_VARLEN] ? qs : b * prm[FA_P_SEQLEN_Q]) + q0 + r]
                         : 0.0f;
    }
    float4 acc[FA_TM][FA_GQ];
    FA_UNROLL_LOOP
    for (int x = 0; x < FA_TM; ++x) {
        FA_UNROLL_LOOP
        for (int g = 0; g < FA_GQ; ++g)
            acc[x][g] = (float4)(0.0f);
    }

    const fa_walk walk = fa_walk_of(prm, bl_row_ptr, &m, &blk, qt, q0, nr, sk);
    for (long it = walk.begin; it < walk.end; ++it) {
        long k0l;
        const int cls = fa_walk_step(&walk, it, bl_col, bl_cls, &m, q0, &k0l);
        if (cls == FA_TILE_EMPTY) /* uniform */
            continue;
        const int k0 = (int)k0l, nc = min(FA_BN, (int)sk - k0);
        const fa_ocl_view vk = fa_view_of(prm, FA_T_K);
        const long bk = fa_at(vk, b, ks + k0, hk);

        /* S = Q K^T and dP = dO V^T */
        float s[FA_TM][FA_TN], dpm[FA_TM][FA_TN];
        FA_UNROLL_LOOP
        for (int x = 0; x < FA_TM; ++x) {
            FA_UNROLL_LOOP
            for (int y = 0; y < FA_TN; ++y) {
                s[x][y] = 0.0f;
                dpm[x][y] = 0.0f;
            }
        }
        for (int dc = 0; dc < FA_DS; dc += FA_DC) {
            barrier(CLK_LOCAL_MEM_FENCE); /* the previous pass or chunk is read; range_l published */
            {
                const fa_ocl_view vv = fa_view_of(prm, FA_T_V);
                fa_bwd_pass(qp_l, dp_l, kp_l, vp_l, q, bq, vq.ss, dout, bd, vd.ss, k, bk, vk.ss, v,
                            fa_at(vv, b, ks + k0, hk), vv.ss, nr, nc, dc, tid);
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            FA_PASS_PRODUCT(s, qp_l, kp_l, FA_TM, FA_TN, ty * FA_TM, tx, FA_TXQ);
            FA_PASS_PRODUCT(dpm, dp_l, vp_l, FA_TM, FA_TN, ty * FA_TM, tx, FA_TXQ);
        }

        /* dS of row ty FA_TM + x, key tx + FA_TXQ y */
        FA_UNROLL_LOOP
        for (int x = 0; x < FA_TM; ++x) {
            const int rr = ty * FA_TM + x;
            const long i = q0 + rr;
            const int lo = range_l[2 * rr] - k0, hi = min(range_l[2 * rr + 1] - k0, nc);
            FA_UNROLL_LOOP
            for (int y = 0; y < FA_TN; ++y) {
                const int jj = tx + FA_TXQ * y;
                const long key = (long)k0 + jj;
                float sc = s[x][y];
#if FA_SCORE_MOD
                float grad;
                sc = fa_score_mod_apply_at(&sm, sc, i, key, &grad);
                const float ds_scale = scale * grad; /* dS of the unmodified score */
#else
                const float ds_scale = scale;
#endif
                int vis = jj >= lo && jj < hi && lrow[x] != -INFINITY;
                if (vis && cls == FA_TILE_PARTIAL && blk.on)
                    vis = fa_block_keep(&blk, bm_bits, i, key);
                const float p = vis ? exp2(mad(sc, l2, -lrow[x])) : 0.0f;
                float z = 1.0f;
                if (threshold) { /* keys FA_TXQ apart: 16 bits of each one's own Philox block */
                    const fa_philox4 bits = fa_dropout_block((ulong)prm[FA_P_SEED], (ulong)prm[FA_P_OFFSET], (ulong)b,
                                                             (ulong)heads_q, (ulong)h, (ulong)i, (ulong)key);
                    z = fa_drop_factor(bits, key, threshold, drop_scale);
                }
                /* a select: a masked element's score or dP may be NaN, and 0 * NaN is NaN */
                s[x][y] = vis ? p * (z * dpm[x][y] - drow[x]) * ds_scale : 0.0f;
            }
        }

        /* dQ += dS K: dS^T to region P as [key][row], K through region A in FA_OWQ-column chunks
         * (region P's last reader, the previous tile's chunks, finished before this tile's passes) */
        FA_UNROLL_LOOP
        for (int y = 0; y < FA_TN; ++y) {
            FA_UNROLL_LOOP
            for (int x4 = 0; x4 < FA_TM / 4; ++x4)
                FA_ST4(p_l, (tx + FA_TXQ * y) * FA_PQ + ty * FA_TM + 4 * x4,
                       (float4)(s[4 * x4][y], s[4 * x4 + 1][y], s[4 * x4 + 2][y], s[4 * x4 + 3][y]));
        }
        FA_UNROLL_LOOP
        for (int g = 0; g < FA_GQ; ++g) {
            barrier(CLK_LOCAL_MEM_FENCE); /* region A free, dS^T published */
            {
                float4 xc[FA_NCQ];
                FA_UNROLL_LOOP
                for (int u = 0; u < FA_NCQ; ++u)
                    xc[u] = fa_chunk_load(k, bk, vk.ss, tid + u * FA_WG, FA_OWQ, nc, col0 + g * FA_OWQ, col_end);
                FA_UNROLL_LOOP
                for (int u = 0; u < FA_NCQ; ++u)
                    FA_ST4(a_l, 4 * (tid + u * FA_WG), xc[u]);
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            FA_CHUNK_PRODUCT(acc, g, p_l, a_l, FA_TM, FA_BN, FA_PQ, ty * FA_TM, FA_OWQ, tx);
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE); /* range_l published even when no key tile was visited */
    const fa_ocl_view vdq = fa_view_of(prm, FA_T_DQ);
    FA_UNROLL_LOOP
    for (int x = 0; x < FA_TM; ++x) {
        const long i = q0 + ty * FA_TM + x;
        if (i >= sq)
            continue;
        /* a row that saw no key: dQ = 0 (its dS is 0, but 0 times a NaN in K is NaN); with a sink
         * its LSE is the sink's, so its empty key range tells */
        const int rr = ty * FA_TM + x;
        const float keep = fa_row_absent(lrow[x]) || range_l[2 * rr] >= range_l[2 * rr + 1] ? 0.0f : 1.0f;
        const long at = fa_at(vdq, b, qs + i, h);
        FA_UNROLL_LOOP
        for (int g = 0; g < FA_GQ; ++g) {
            const int col = col0 + g * FA_OWQ + 4 * tx;
            if (col < col_end)
                fa_store4(dq, at + col, col_end - col, fa_row_output4(acc[x][g], keep));
        }
    }
}
#endif
