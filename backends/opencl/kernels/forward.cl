/* forward.cl: the fused forward (Dao et al. 2022, Algorithm 1) for GPUs, written the way a SIMT
 * matrix product is: one work-group per (query tile of FA_BM rows, query head, batch), a
 * FA_TY x FA_TX grid of work-items, each owning an FA_TM x FA_TN block of the score tile S and
 * the FA_TM x (4 FA_G) block of O on the same rows, all in registers. Per key tile:
 *   S = (scale log2 e) Q K^T   Q and K pass through __local memory transposed, FA_DC head-dim
 *                              columns at a time (region A), each work-item reading one float4 of
 *                              Q^T and FA_TN / 4 of K^T per column for FA_TM x FA_TN multiply-adds;
 *   online softmax             each row's maximum is reduced over the FA_TX work-items sharing it
 *                              through __local memory (no subgroups needed); the row sums stay
 *                              partial per work-item, all scaled by the same factors, and are
 *                              added up once at the end; exp2 on the log2-scaled scores;
 *   O += P V                   P goes to __local memory transposed (region P), V in chunks of
 *                              FA_VC columns through region A.
 * Every mask option, dropout (core/philox.h, one block per 4 keys), block-sparse lists and varlen
 * are handled as in the other backends. Transposed __local tiles are stored with their float4
 * slots XOR-swizzled by the column (FA_SWZ), so that the transposing scalar stores of a warp hit
 * distinct banks while the float4 reads of one column stay whole. fp32 compute; fp16 and bf16 as
 * storage. CPU devices run forward_vec.cl instead (FLASHATTN_OPENCL_TILES=gpu runs this kernel
 * anywhere, as the tests do). */

#if FA_KERNELS == 1
#ifndef FA_TM
#define FA_TM 4 /* rows of S and O per work-item, a multiple of 4 */
#endif
#ifndef FA_TN
#define FA_TN 4 /* keys of S per work-item, a multiple of 4 */
#endif
#ifndef FA_DC
#define FA_DC 32 /* head-dim columns of Q and K per pass through __local memory */
#endif
#define FA_TY (FA_BM / FA_TM)
#define FA_TX (FA_BN / FA_TN)
#define FA_WG (FA_TY * FA_TX)
#define FA_DS ((FA_D + FA_DC - 1) / FA_DC * FA_DC) /* head dim rounded up to whole Q K^T passes */
#define FA_OW (4 * FA_TX)                           /* O columns one float4 per work-item covers */
#define FA_G ((FA_D + FA_OW - 1) / FA_OW)           /* float4 columns of O per work-item */
#define FA_RA (FA_DC * (FA_BM + FA_BN))             /* region A, floats: Q^T and K^T, then V */
#define FA_VG_MAX (FA_RA / FA_BN / FA_OW)           /* float4 groups of V region A holds */
#define FA_VG (FA_VG_MAX < FA_G ? FA_VG_MAX : FA_G) /* float4 groups per V chunk */
#define FA_VC (FA_VG * FA_OW)                       /* V chunk width */
#define FA_SWZ(c) (((c) >> 2) & 7)                  /* the float4 slot swizzle of column c */

#if FA_BM % FA_TM || FA_BN % FA_TN || FA_TM % 4 || FA_TN % 4 || FA_DC % 4 || FA_BM < 32 || FA_BN < 32
#error "forward.cl: tile shape"
#endif
#if FA_VG_MAX < 1
#error "forward.cl: region A holds no V chunk"
#endif

/* Element offset of (row, column) in a transposed tile of `ld` rows (ld a multiple of 32). */
#define FA_TIDX(col, row, ld) ((col) * (ld) + ((((row) >> 2) ^ FA_SWZ(col)) << 2) + ((row) & 3))
/* float4 access to __local floats at an index that is a multiple of 4 (16-byte aligned, so the
 * compiler emits one 128-bit access) */
#define FA_LD4(ptr, idx) (((__local const float4 *)(ptr))[(idx) >> 2])
#define FA_ST4(ptr, idx, x) (((__local float4 *)(ptr))[(idx) >> 2] = (x))
#define FA_SPLIT4(arr, at, x)                                                                                          \
    do {                                                                                                               \
        const float4 x_ = (x);                                                                                         \
        (arr)[(at)] = x_.s0;                                                                                           \
        (arr)[(at) + 1] = x_.s1;                                                                                       \
        (arr)[(at) + 2] = x_.s2;                                                                                       \
        (arr)[(at) + 3] = x_.s3;                                                                                       \
    } while (0)

__kernel __attribute__((reqd_work_group_size(FA_WG, 1, 1))) void
fa_forward(__global const long *prm, const float scale, const float drop_scale, __global const fa_store_t *q,
           __global const fa_store_t *k, __global const fa_store_t *v, __global fa_store_t *o, __global float *lse,
           __global const int *cu_q, __global const int *cu_k, __global const uchar *bm_bits,
           __global const long *bl_row_ptr, __global const int *bl_col, __global const uchar *bl_cls)
{
    __local float4 region_a[FA_RA / 4];      /* Q^T [FA_DC][FA_BM], K^T [FA_DC][FA_BN]; V [FA_BN][FA_VC] */
    __local float4 region_p[FA_BM * FA_BN / 4]; /* P^T [FA_BN][FA_BM]; row reductions [FA_BM][FA_TX] */
    __local float *const qt_l = (__local float *)region_a, *const kt_l = qt_l + FA_DC * FA_BM;
    __local float *const v_l = (__local float *)region_a, *const p_l = (__local float *)region_p;

    const int tid = (int)get_local_id(0), tx = tid % FA_TX, ty = tid / FA_TX;
    const long qtile = (long)get_group_id(0), h = (long)get_group_id(1), b = (long)get_group_id(2);
    long sq, sk, qs, ks;
    fa_seq(prm, cu_q, cu_k, b, &sq, &sk, &qs, &ks);
    const long q0 = qtile * FA_BM;
    if (q0 >= sq) /* the same for the whole work-group: no barrier is skipped by part of it */
        return;
    const int nr = (int)min((long)FA_BM, sq - q0);
    const long heads_q = prm[FA_P_HEADS_Q], hk = h / prm[FA_P_GROUP];
    const fa_ocl_view vq = fa_view_of(prm, FA_T_Q), vk = fa_view_of(prm, FA_T_K), vv = fa_view_of(prm, FA_T_V);
    const fa_mask m = fa_mask_make(sq, sk, (int)prm[FA_P_CAUSAL], prm[FA_P_WINDOW_LEFT], prm[FA_P_WINDOW_RIGHT]);
    const uint threshold = (uint)prm[FA_P_DROPOUT_THRESHOLD];
    const ulong seed = (ulong)prm[FA_P_SEED], offset = (ulong)prm[FA_P_OFFSET];
    const fa_ocl_blocks blk = fa_blocks_of(prm, h);
    const float qscale = scale * M_LOG2E_F;

    /* this work-item's rows ty FA_TM + r and keys 4 tx + FA_OW u + t (u < FA_TN / 4, t < 4) */
    float4 acc[FA_TM][FA_G];
    float row_max[FA_TM], row_sum[FA_TM];
    long lo[FA_TM], hi[FA_TM];
    FA_UNROLL_LOOP
    for (int r = 0; r < FA_TM; ++r) {
        const long i = q0 + ty * FA_TM + r;
        int64_t a = 0, z = 0;
        if (i < sq)
            fa_mask_row_range(&m, i, &a, &z);
        lo[r] = a;
        hi[r] = z;
        row_max[r] = -INFINITY;
        row_sum[r] = 0.0f;
        FA_UNROLL_LOOP
        for (int g = 0; g < FA_G; ++g)
            acc[r][g] = (float4)(0.0f);
    }

    const fa_walk walk = fa_walk_of(prm, bl_row_ptr, &m, &blk, qtile, q0, nr, sk);
    for (long it = walk.begin; it < walk.end; ++it) {
        long k0;
        const int cls = fa_walk_step(&walk, it, bl_col, bl_cls, &m, q0, &k0);
        if (cls == FA_TILE_EMPTY) /* uniform: depends on the work-group's tiles only */
            continue;
        const int nc = (int)min((long)FA_BN, sk - k0);

        /* S = (scale log2 e) Q K^T, FA_DC columns at a time */
        float s[FA_TM][FA_TN];
        FA_UNROLL_LOOP
        for (int r = 0; r < FA_TM; ++r) {
            FA_UNROLL_LOOP
            for (int j = 0; j < FA_TN; ++j)
                s[r][j] = 0.0f;
        }
        for (int dc = 0; dc < FA_DS; dc += FA_DC) {
            barrier(CLK_LOCAL_MEM_FENCE); /* the previous pass (or tile) is done with region A, P */
            /* consecutive work-items take consecutive float4 columns of a row (coalesced) */
            for (int e = tid; e < FA_BM * FA_DC / 4; e += FA_WG) {
                const int r = e / (FA_DC / 4), c = (e % (FA_DC / 4)) * 4;
                float4 x = (float4)(0.0f);
                if (r < nr && dc + c < FA_D)
                    x = qscale * fa_load4(q, fa_at(vq, b, qs + q0 + r, h) + dc + c, FA_D - dc - c);
                qt_l[FA_TIDX(c, r, FA_BM)] = x.s0;
                qt_l[FA_TIDX(c + 1, r, FA_BM)] = x.s1;
                qt_l[FA_TIDX(c + 2, r, FA_BM)] = x.s2;
                qt_l[FA_TIDX(c + 3, r, FA_BM)] = x.s3;
            }
            for (int e = tid; e < FA_BN * FA_DC / 4; e += FA_WG) {
                const int j = e / (FA_DC / 4), c = (e % (FA_DC / 4)) * 4;
                float4 x = (float4)(0.0f);
                if (j < nc && dc + c < FA_D)
                    x = fa_load4(k, fa_at(vk, b, ks + k0 + j, hk) + dc + c, FA_D - dc - c);
                kt_l[FA_TIDX(c, j, FA_BN)] = x.s0;
                kt_l[FA_TIDX(c + 1, j, FA_BN)] = x.s1;
                kt_l[FA_TIDX(c + 2, j, FA_BN)] = x.s2;
                kt_l[FA_TIDX(c + 3, j, FA_BN)] = x.s3;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            FA_UNROLL_LOOP
            for (int c = 0; c < FA_DC; ++c) {
                float a[FA_TM], bk[FA_TN];
                FA_UNROLL_LOOP
                for (int w = 0; w < FA_TM / 4; ++w)
                    FA_SPLIT4(a, 4 * w, FA_LD4(qt_l, FA_TIDX(c, ty * FA_TM + 4 * w, FA_BM)));
                FA_UNROLL_LOOP
                for (int u = 0; u < FA_TN / 4; ++u)
                    FA_SPLIT4(bk, 4 * u, FA_LD4(kt_l, FA_TIDX(c, 4 * tx + FA_OW * u, FA_BN)));
                FA_UNROLL_LOOP
                for (int r = 0; r < FA_TM; ++r) {
                    FA_UNROLL_LOOP
                    for (int j = 0; j < FA_TN; ++j)
                        s[r][j] = mad(a[r], bk[j], s[r][j]);
                }
            }
        }

        /* the mask, and each row's maximum over this work-item's keys */
        FA_UNROLL_LOOP
        for (int r = 0; r < FA_TM; ++r) {
            const long i = q0 + ty * FA_TM + r;
            const long jlo = lo[r] - k0, jhi = min(hi[r] - k0, (long)nc);
            float mx = -INFINITY;
            FA_UNROLL_LOOP
            for (int j = 0; j < FA_TN; ++j) {
                const int jj = 4 * tx + FA_OW * (j / 4) + (j % 4);
                int vis = jj >= jlo && jj < jhi;
                if (vis && cls == FA_TILE_PARTIAL && blk.on)
                    vis = fa_block_keep(&blk, bm_bits, i, k0 + jj);
                s[r][j] = vis ? s[r][j] : -INFINITY;
                mx = fmax(mx, s[r][j]);
            }
            p_l[(ty * FA_TM + r) * FA_TX + tx] = mx; /* region P is free: the S passes had a barrier */
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        /* core/softmax.h's update on every work-item of the row alike (the same inputs, the same
         * bits): the -inf guards and the exact 1 for an unchanged maximum */
        FA_UNROLL_LOOP
        for (int r = 0; r < FA_TM; ++r) {
            float tile_max = -INFINITY;
            for (int x = 0; x < FA_TX; x += 4) {
                const float4 t4 = FA_LD4(p_l, (ty * FA_TM + r) * FA_TX + x);
                tile_max = fmax(tile_max, fmax(fmax(t4.s0, t4.s1), fmax(t4.s2, t4.s3)));
            }
            const float m_old = row_max[r], m_new = fmax(m_old, tile_max);
            const float alpha = m_old == -INFINITY ? 0.0f : m_new == m_old ? 1.0f : exp2(m_old - m_new);
            const float shift = m_new == -INFINITY ? 0.0f : m_new;
            row_max[r] = m_new;
            float sum = 0.0f;
            FA_UNROLL_LOOP
            for (int j = 0; j < FA_TN; ++j) {
                s[r][j] = exp2(s[r][j] - shift);
                sum += s[r][j];
            }
            row_sum[r] = row_sum[r] * alpha + sum;
            if (threshold) { /* 4 tx + FA_OW u is a multiple of 4: one Philox block per 4 keys */
                const long i = q0 + ty * FA_TM + r;
                FA_UNROLL_LOOP
                for (int u = 0; u < FA_TN / 4; ++u) {
                    const fa_philox4 bits = fa_dropout_block(seed, offset, (ulong)b, (ulong)heads_q, (ulong)h,
                                                             (ulong)i, (ulong)(k0 + 4 * tx + FA_OW * u));
                    FA_UNROLL_LOOP
                    for (int t = 0; t < 4; ++t)
                        s[r][4 * u + t] *= fa_drop_factor(bits.v[t], threshold, drop_scale);
                }
            }
            if (alpha != 1.0f) {
                FA_UNROLL_LOOP
                for (int g = 0; g < FA_G; ++g)
                    acc[r][g] *= alpha;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* the maxima are read before P overwrites them */

        /* P^T to region P: per key, this work-item's FA_TM rows as float4 */
        FA_UNROLL_LOOP
        for (int j = 0; j < FA_TN; ++j) {
            const int jj = 4 * tx + FA_OW * (j / 4) + (j % 4);
            FA_UNROLL_LOOP
            for (int w = 0; w < FA_TM / 4; ++w)
                FA_ST4(p_l, FA_TIDX(jj, ty * FA_TM + 4 * w, FA_BM),
                       (float4)(s[4 * w][j], s[4 * w + 1][j], s[4 * w + 2][j], s[4 * w + 3][j]));
        }
        /* O += P V, FA_VC columns of V at a time */
        FA_UNROLL_LOOP
        for (int g0 = 0; g0 < FA_G; g0 += FA_VG) {
            if (g0 > 0)
                barrier(CLK_LOCAL_MEM_FENCE); /* the previous chunk is read */
            for (int e = tid; e < FA_BN * FA_VC / 4; e += FA_WG) {
                const int j = e / (FA_VC / 4), c = (e % (FA_VC / 4)) * 4, col = g0 * FA_OW + c;
                float4 x = (float4)(0.0f);
                if (j < nc && col < FA_D)
                    x = fa_load4(v, fa_at(vv, b, ks + k0 + j, hk) + col, FA_D - col);
                FA_ST4(v_l, j * FA_VC + c, x);
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int j = 0; j < FA_BN; ++j) {
                float p[FA_TM];
                FA_UNROLL_LOOP
                for (int w = 0; w < FA_TM / 4; ++w)
                    FA_SPLIT4(p, 4 * w, FA_LD4(p_l, FA_TIDX(j, ty * FA_TM + 4 * w, FA_BM)));
                FA_UNROLL_LOOP
                for (int gl = 0; gl < FA_VG; ++gl) {
                    if (g0 + gl < FA_G) {
                        const float4 vx = FA_LD4(v_l, j * FA_VC + 4 * tx + FA_OW * gl);
                        FA_UNROLL_LOOP
                        for (int r = 0; r < FA_TM; ++r)
                            acc[r][g0 + gl] = mad((float4)(p[r]), vx, acc[r][g0 + gl]);
                    }
                }
            }
        }
    }

    /* the row sums, added over the FA_TX work-items of each row */
    barrier(CLK_LOCAL_MEM_FENCE);
    FA_UNROLL_LOOP
    for (int r = 0; r < FA_TM; ++r)
        p_l[(ty * FA_TM + r) * FA_TX + tx] = row_sum[r];
    barrier(CLK_LOCAL_MEM_FENCE);
    const fa_ocl_view vo = fa_view_of(prm, FA_T_O), vl = fa_view_of(prm, FA_T_LSE);
    FA_UNROLL_LOOP
    for (int r = 0; r < FA_TM; ++r) {
        const long i = q0 + ty * FA_TM + r;
        float l = 0.0f;
        for (int x = 0; x < FA_TX; ++x)
            l += p_l[(ty * FA_TM + r) * FA_TX + x];
        if (i >= sq)
            continue;
        const float inv = l == 0.0f ? 0.0f : 1.0f / l;
        const long at = fa_at(vo, b, qs + i, h);
        FA_UNROLL_LOOP
        for (int g = 0; g < FA_G; ++g) {
            const int col = 4 * tx + FA_OW * g;
            if (col < FA_D)
                fa_store4(o, at + col, FA_D - col, acc[r][g] * inv);
        }
        if (tx == 0 && prm[FA_P_HAS_LSE])
            lse[fa_at(vl, b, qs + i, h)] =
                (l == 0.0f || row_max[r] == -INFINITY) ? -INFINITY : row_max[r] * M_LN2_F + log(l);
    }
}
#endif
