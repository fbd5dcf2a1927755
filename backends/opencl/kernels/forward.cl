/* forward.cl: the fused forward (Dao et al. 2022, Algorithm 1) for GPUs, written the way a SIMT
 * matrix product is: one work-group per (query tile of FA_BM rows, query head, batch), a
 * FA_TY x FA_TX grid of work-items, each owning an FA_TM x FA_TN block of the score tile S and
 * the FA_TM x (4 FA_G) block of O on the same rows, all in registers. Per key tile:
 *   S = (scale log2 e) Q K^T   Q and K pass through __local memory FA_DC head-dim columns at a
 *                              time (region A); per 4 columns a work-item reads a float4 of each
 *                              of its FA_TM rows and FA_TN keys (keys tx + FA_TX j) for
 *                              4 FA_TM FA_TN multiply-adds;
 *   online softmax             each row's maximum is reduced over the FA_TX work-items sharing it
 *                              through __local memory (no subgroups needed); the row sums stay
 *                              partial per work-item, all scaled by the same factors, and are
 *                              added up once at the end; exp2 on the log2-scaled scores;
 *   O += P V                   P goes to __local memory transposed (region P), V in chunks of
 *                              FA_VC columns through region A.
 * Every mask option, the score modifiers (core/score_mod.h, with FA_SCORE_MOD), dropout
 * (core/philox.h, one block per 8 keys), block-sparse lists and varlen are handled as in the other
 * backends. __local rows are one float4 longer than the data, so that the float4 stores of the
 * coalesced loaders and the float4 reads of a warp (consecutive keys) fall in distinct banks, at
 * offsets the compiler knows (transposed tiles with an XOR swizzle cost integer instructions per
 * read, padded transposed ones uncoalesced loads: docs/backends/opencl.md). fp32 compute; fp16
 * and bf16 as storage. CPU devices run forward_vec.cl instead (FLASHATTN_KERNELS=opencl-tiles=gpu
 * runs this kernel anywhere, as the tests do). */

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
#ifndef FA_UC
#define FA_UC 8 /* unrolling of the head-dim loop of S (in float4 steps): immediate __local offsets */
#endif
#ifndef FA_UJ
#define FA_UJ 4 /* unrolling of the key loop of O += P V */
#endif
#define FA_TY (FA_BM / FA_TM)
#define FA_TX (FA_BN / FA_TN)
#define FA_WG (FA_TY * FA_TX)
#define FA_DS ((FA_D + FA_DC - 1) / FA_DC * FA_DC) /* head dim rounded up to whole Q K^T passes */
#define FA_OW (4 * FA_TX)                           /* O columns one float4 per work-item covers */
#define FA_G ((FA_D_V + FA_OW - 1) / FA_OW)         /* float4 columns of O (d_v) per work-item */
#define FA_CP (FA_DC + 4)                           /* row pitches of the Q and K passes and of P^T: */
#define FA_QP (FA_BM + 4)                           /* one float4 of padding spreads a warp's float4 */
#define FA_RA (FA_CP * (FA_BM + FA_BN))             /* region A, floats: Q and K passes, then V */
#define FA_RP (FA_BN * FA_QP)                       /* region P, floats: P^T (and row reductions) */
#define FA_VG_MAX (FA_RA / FA_BN / FA_OW)           /* float4 groups of V region A holds */
#define FA_VG (FA_VG_MAX < FA_G ? FA_VG_MAX : FA_G) /* float4 groups per V chunk */
#define FA_VC (FA_VG * FA_OW)                       /* V chunk width */

#define FA_NQ (FA_BM * FA_DC / 4 / FA_WG) /* float4 of a Q pass, a K pass and a V chunk per work-item */
#define FA_NK (FA_BN * FA_DC / 4 / FA_WG)
#define FA_NV (FA_BN * FA_VC / 4 / FA_WG)

#if (FA_BM * FA_DC / 4) % FA_WG || (FA_BN * FA_DC / 4) % FA_WG || (FA_BN * FA_VC / 4) % FA_WG
#error "forward.cl: a pass is not a whole number of float4 per work-item"
#endif
#if FA_BM % FA_TM || FA_BN % FA_TN || FA_TM % 4 || FA_TN % 4 || FA_DC % 4 || FA_BM < 32 || FA_BN < 32
#error "forward.cl: tile shape"
#endif
#if FA_VG_MAX < 1
#error "forward.cl: region A holds no V chunk"
#endif

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

/* No reqd_work_group_size: with it NVIDIA's ptxas takes up to 255 registers for 256 work-items and
 * ignores -cl-nv-maxrregcount, and one work-group per SM cannot hide its own loads; the host
 * always launches FA_WG work-items and caps the registers on NVIDIA (programs.c). */
__kernel void
fa_forward(__global const long *prm, const float scale, const float drop_scale, __global const fa_store_t *q,
           __global const fa_store_t *k, __global const fa_store_t *v, __global fa_store_t *o, __global float *lse,
           __global const int *cu_q, __global const int *cu_k, __global const uchar *bm_bits,
           __global const long *bl_row_ptr, __global const int *bl_col, __global const uchar *bl_cls,
           __global const float *alibi_slopes, __global const float *sink)
{
    __local float4 region_a[FA_RA / 4]; /* Q [FA_BM][FA_CP], K [FA_BN][FA_CP]; V [FA_BN][FA_VC] */
    __local float4 region_p[FA_RP / 4]; /* P^T [FA_BN][FA_QP]; row reductions [FA_BM][FA_TX] */
    __local float *const q_l = (__local float *)region_a, *const k_l = q_l + FA_BM * FA_CP;
    __local float *const v_l = (__local float *)region_a, *const p_l = (__local float *)region_p;
    /* What every tile needs but no work-item should hold in registers through the key loop (the
     * loop's barriers keep the compiler from hoisting these loads; holding the 64-bit views, mask
     * ranges and block-mask fields in registers overflows the register cap): the element offsets
     * of row 0 of Q (this tile), K and V (this sequence and head) with their row strides, and each
     * row's visible keys [lo, hi) (sequence-relative; the host keeps sequences below 2^31). */
    __local long base_l[6];
    __local int range_l[2 * FA_BM];

    const int tid = (int)get_local_id(0), tx = tid % FA_TX, ty = tid / FA_TX;
    const long qtile = (long)get_group_id(0), h = (long)get_group_id(1), b = (long)get_group_id(2);
    long sq, sk, qs, ks;
    fa_seq(prm, cu_q, cu_k, b, &sq, &sk, &qs, &ks);
    const long q0 = qtile * FA_BM;
    if (q0 >= sq) /* the same for the whole work-group: no barrier is skipped by part of it */
        return;
    const int nr = (int)min((long)FA_BM, sq - q0);
    const long hk = h / prm[FA_P_GROUP];
    const fa_mask m = fa_mask_make(sq, sk, (int)prm[FA_P_CAUSAL], prm[FA_P_WINDOW_LEFT], prm[FA_P_WINDOW_RIGHT]);
    const uint threshold = (uint)prm[FA_P_DROPOUT_THRESHOLD];
    const int bm_on = prm[FA_P_BLOCK_MASK] != 0;
    const float qscale = scale * M_LOG2E_F;
    /* the scores here are log2-scaled: S = ln 2 x */
    const fa_score_mod_state sm = fa_score_mod_of(prm, alibi_slopes, M_LN2_F, b, h, sq, sk);
    if (tid == 0) {
        const fa_ocl_view vq = fa_view_of(prm, FA_T_Q), vk = fa_view_of(prm, FA_T_K), vv = fa_view_of(prm, FA_T_V);
        base_l[0] = fa_at(vq, b, qs + q0, h);
        base_l[1] = vq.ss;
        base_l[2] = fa_at(vk, b, ks, hk);
        base_l[3] = vk.ss;
        base_l[4] = fa_at(vv, b, ks, hk);
        base_l[5] = vv.ss;
    }
    for (int r = tid; r < FA_BM; r += FA_WG) {
        int64_t a = 0, z = 0;
        if (r < nr)
            fa_mask_row_range(&m, q0 + r, &a, &z);
        range_l[2 * r] = (int)a;
        range_l[2 * r + 1] = (int)z;
    }
    barrier(CLK_LOCAL_MEM_FENCE); /* publish them before any use */

    /* this work-item's rows ty FA_TM + r and keys 4 tx + FA_OW u + t (u < FA_TN / 4, t < 4) */
    float4 acc[FA_TM][FA_G];
    float row_max[FA_TM], row_sum[FA_TM];
    FA_UNROLL_LOOP
    for (int r = 0; r < FA_TM; ++r) {
        row_max[r] = -INFINITY;
        row_sum[r] = 0.0f;
        FA_UNROLL_LOOP
        for (int g = 0; g < FA_G; ++g)
            acc[r][g] = (float4)(0.0f);
    }

    fa_walk walk;
    {
        const fa_ocl_blocks blk = fa_blocks_of(prm, h);
        walk = fa_walk_of(prm, bl_row_ptr, &m, &blk, qtile, q0, nr, sk);
    }
    for (long it = walk.begin; it < walk.end; ++it) {
        long k0l;
        const int cls = fa_walk_step(&walk, it, bl_col, bl_cls, &m, q0, &k0l);
        if (cls == FA_TILE_EMPTY) /* uniform: depends on the work-group's tiles only */
            continue;
        const int k0 = (int)k0l, nc = min(FA_BN, (int)sk - k0);

        /* S = (scale log2 e) Q K^T, FA_DC columns at a time. Loads: consecutive work-items take
         * consecutive float4 of a row (coalesced), and the row pitch FA_CP puts a warp's float4
         * stores in distinct banks. (Each pass is not prefetched into registers a pass ahead: it
         * spills under the 128-register cap, docs/backends/opencl.md.) */
        float4 qn[FA_NQ], kn[FA_NK], vn[FA_NV];
#define FA_FETCH_QK(dc_)                                                                                               \
    do {                                                                                                               \
        FA_UNROLL_LOOP                                                                                                 \
        for (int u = 0; u < FA_NQ; ++u) {                                                                              \
            const int e = tid + u * FA_WG, r = e / (FA_DC / 4), c = (dc_) + (e % (FA_DC / 4)) * 4;                     \
            qn[u] = r < nr && c < FA_D ? qscale * fa_load4(q, base_l[0] + r * base_l[1] + c, FA_D - c)                 \
                                       : (float4)(0.0f);                                                               \
        }                                                                                                              \
        FA_UNROLL_LOOP                                                                                                 \
        for (int u = 0; u < FA_NK; ++u) {                                                                              \
            const int e = tid + u * FA_WG, j = e / (FA_DC / 4), c = (dc_) + (e % (FA_DC / 4)) * 4;                     \
            kn[u] = j < nc && c < FA_D ? fa_load4(k, base_l[2] + (k0 + j) * base_l[3] + c, FA_D - c) : (float4)(0.0f); \
        }                                                                                                              \
    } while (0)
#define FA_STORE_QK()                                                                                                  \
    do {                                                                                                               \
        FA_UNROLL_LOOP                                                                                                 \
        for (int u = 0; u < FA_NQ; ++u) {                                                                              \
            const int e = tid + u * FA_WG;                                                                             \
            FA_ST4(q_l, e / (FA_DC / 4) * FA_CP + (e % (FA_DC / 4)) * 4, qn[u]);                                       \
        }                                                                                                              \
        FA_UNROLL_LOOP                                                                                                 \
        for (int u = 0; u < FA_NK; ++u) {                                                                              \
            const int e = tid + u * FA_WG;                                                                             \
            FA_ST4(k_l, e / (FA_DC / 4) * FA_CP + (e % (FA_DC / 4)) * 4, kn[u]);                                       \
        }                                                                                                              \
    } while (0)
#define FA_FETCH_V(g0_)                                                                                                \
    do {                                                                                                               \
        FA_UNROLL_LOOP                                                                                                 \
        for (int u = 0; u < FA_NV; ++u) {                                                                              \
            const int e = tid + u * FA_WG, j = e / (FA_VC / 4), col = (g0_) * FA_OW + (e % (FA_VC / 4)) * 4;          \
            vn[u] = j < nc && col < FA_D_V ? fa_load4(v, base_l[4] + (k0 + j) * base_l[5] + col, FA_D_V - col)         \
                                           : (float4)(0.0f);                                                           \
        }                                                                                                              \
    } while (0)
#define FA_STORE_V()                                                                                                   \
    do {                                                                                                               \
        FA_UNROLL_LOOP                                                                                                 \
        for (int u = 0; u < FA_NV; ++u)                                                                                \
            FA_ST4(v_l, tid * 4 + u * FA_WG * 4, vn[u]);                                                               \
    } while (0)
        float s[FA_TM][FA_TN];
        FA_UNROLL_LOOP
        for (int r = 0; r < FA_TM; ++r) {
            FA_UNROLL_LOOP
            for (int j = 0; j < FA_TN; ++j)
                s[r][j] = 0.0f;
        }
        for (int dc = 0; dc < FA_DS; dc += FA_DC) {
            barrier(CLK_LOCAL_MEM_FENCE); /* the previous pass (or tile) is done with region A, P */
            FA_FETCH_QK(dc);
            FA_STORE_QK();
            barrier(CLK_LOCAL_MEM_FENCE);
            FA_UNROLL_BY(FA_UC)
            for (int c = 0; c < FA_DC; c += 4) {
                float4 a[FA_TM], bk[FA_TN];
                FA_UNROLL_LOOP
                for (int r = 0; r < FA_TM; ++r)
                    a[r] = FA_LD4(q_l, (ty * FA_TM + r) * FA_CP + c);
                FA_UNROLL_LOOP
                for (int j = 0; j < FA_TN; ++j)
                    bk[j] = FA_LD4(k_l, (tx + FA_TX * j) * FA_CP + c);
                FA_UNROLL_LOOP
                for (int r = 0; r < FA_TM; ++r) {
                    FA_UNROLL_LOOP
                    for (int j = 0; j < FA_TN; ++j) {
                        float x = mad(a[r].s0, bk[j].s0, s[r][j]);
                        x = mad(a[r].s1, bk[j].s1, x);
                        x = mad(a[r].s2, bk[j].s2, x);
                        s[r][j] = mad(a[r].s3, bk[j].s3, x);
                    }
                }
            }
        }

        /* the score modifiers, the mask, and each row's maximum over this work-item's keys */
        FA_UNROLL_LOOP
        for (int r = 0; r < FA_TM; ++r) {
            const int rr = ty * FA_TM + r;
            const int jlo = range_l[2 * rr] - k0, jhi = min(range_l[2 * rr + 1] - k0, nc);
            float mx = -INFINITY;
            FA_UNROLL_LOOP
            for (int j = 0; j < FA_TN; ++j) {
                const int jj = tx + FA_TX * j;
#if FA_SCORE_MOD
                float grad;
                s[r][j] = fa_score_mod_apply_at(&sm, s[r][j], q0 + rr, (long)k0 + jj, &grad);
#endif
                int vis = jj >= jlo && jj < jhi;
                if (vis && cls == FA_TILE_PARTIAL && bm_on) {
                    const fa_ocl_blocks blk = fa_blocks_of(prm, h);
                    vis = fa_block_keep(&blk, bm_bits, q0 + rr, k0 + jj);
                }
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
            if (threshold) { /* one Philox block per 8 keys; this work-item's keys are FA_TX apart, so
                              * each takes 16 bits of its own block */
                const long i = q0 + ty * FA_TM + r;
                const ulong seed = (ulong)prm[FA_P_SEED], offset = (ulong)prm[FA_P_OFFSET];
                FA_UNROLL_LOOP
                for (int j = 0; j < FA_TN; ++j) {
                    const int key = k0 + tx + FA_TX * j;
                    const fa_philox4 bits = fa_dropout_block(seed, offset, (ulong)b, (ulong)prm[FA_P_HEADS_Q],
                                                             (ulong)h, (ulong)i, (ulong)key);
                    s[r][j] *= fa_drop_factor(bits, key, threshold, drop_scale);
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
            const int jj = tx + FA_TX * j;
            FA_UNROLL_LOOP
            for (int w = 0; w < FA_TM / 4; ++w)
                FA_ST4(p_l, jj * FA_QP + ty * FA_TM + 4 * w,
                       (float4)(s[4 * w][j], s[4 * w + 1][j], s[4 * w + 2][j], s[4 * w + 3][j]));
        }
        /* O += P V, FA_VC columns of V at a time */
        FA_UNROLL_LOOP
        for (int g0 = 0; g0 < FA_G; g0 += FA_VG) {
            if (g0 > 0)
                barrier(CLK_LOCAL_MEM_FENCE); /* the previous chunk is read */
            FA_FETCH_V(g0);
            FA_STORE_V();
            barrier(CLK_LOCAL_MEM_FENCE);
            FA_UNROLL_BY(FA_UJ)
            for (int j = 0; j < FA_BN; ++j) {
                float p[FA_TM];
                FA_UNROLL_LOOP
                for (int w = 0; w < FA_TM / 4; ++w)
                    FA_SPLIT4(p, 4 * w, FA_LD4(p_l, j * FA_QP + ty * FA_TM + 4 * w));
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
        float inv;
        const float lrow = fa_row_finish(prm, FA_P_SINK_OFF, sink, h, row_max[r] * M_LN2_F, l, &inv);
        const long at = fa_at(vo, b, qs + i, h);
        FA_UNROLL_LOOP
        for (int g = 0; g < FA_G; ++g) {
            const int col = 4 * tx + FA_OW * g;
            if (col < FA_D_V)
                fa_store4(o, at + col, FA_D_V - col, fa_row_output4(acc[r][g], inv));
        }
        if (tx == 0 && prm[FA_P_HAS_LSE])
            lse[fa_at(vl, b, qs + i, h)] = lrow;
    }
}
#endif
