/* forward_vec.cl: the same fused forward for CPU devices (PoCL): one work-item per query tile of
 * FA_BM rows, computing with explicit float8 vectors (AVX2's width) the way the CPU backend's
 * micro-kernel does: S = Q K^T in 4 x 16 register blocks over a transposed K tile, the online
 * softmax row by row with vector exp, O += P V in 4 x 16 blocks. A CPU OpenCL runtime runs a
 * work-group of one work-item as plain compiled code; the work-item kernel in forward.cl instead
 * relies on vectorisation across work-items, which its private arrays defeat. Tiles live in
 * __local memory (an ordinary cache-resident array on a CPU). FA_BM is a multiple of 4, FA_BN of
 * 16; the head dims are padded with zeros to multiples of 16: d of Q and K to FA_DQP, d_v of V
 * and O to FA_DVP. */

/* The CPU kernels' float8 multiply-add (here and in backward_vec.cl, later in the same source):
 * fma() where the device has a fused multiply-add (the host passes FA_FMA=1 when
 * CL_DEVICE_SINGLE_FP_CONFIG says CL_FP_FMA), since PoCL compiles mad() to a separate multiply and
 * add (vmulps + vaddps on AVX2) and fma() to one vfmadd; without the hardware instruction fma()
 * would be a software routine, so mad() there. */
#if defined(FA_FMA) && FA_FMA
#define FA_VMAD(a, b, c) fma((a), (b), (c))
#else
#define FA_VMAD(a, b, c) mad((a), (b), (c))
#endif

#if FA_KERNELS == 2 || FA_KERNELS == 4
/* C[M x N] (+)= op(A) B for row-major __local matrices, M a multiple of 4, N of 16, in 4 x 16
 * register blocks (eight float8 accumulators, FA_VMAD: one FMA each per step). X0..X3 read the
 * block's four values of op(A) at step k: A[(i + t) lda + k] for A itself (fa_mm_nn) and
 * A[k lda + i + t] for A^T with A stored K x M (fa_mm_tn, backward_vec.cl), so that the backward's
 * P^T dO and dS^T Q read P and dS in place instead of a transposed copy (a 64 x 64 transpose per
 * product cost about as much as a sixth of the product). Panel-outer like the CPU backend's gemm:
 * one K x 16 panel of B (4 KiB at K = 64) stays in L1 while every row block of A streams past it.
 * The forward's S = Q K^T and O += P V use fa_mm_nn too. */
#define FA_MM_DEFINE(name, X0, X1, X2, X3)                                                                          \
    static void name(int M, int N, int K, __local const float *A, int lda, __local const float *B, int ldb,        \
                     __local float *C, int ldc, int accumulate)                                                     \
    {                                                                                                               \
        for (int j = 0; j < N; j += 16)                                                                             \
            for (int i = 0; i < M; i += 4) {                                                                        \
                __local float *c0 = C + i * ldc + j;                                                                \
                float8 a00 = 0.0f, a01 = 0.0f, a10 = 0.0f, a11 = 0.0f, a20 = 0.0f, a21 = 0.0f, a30 = 0.0f,          \
                       a31 = 0.0f;                                                                                  \
                if (accumulate) {                                                                                   \
                    a00 = vload8(0, c0);                                                                            \
                    a01 = vload8(0, c0 + 8);                                                                        \
                    a10 = vload8(0, c0 + ldc);                                                                      \
                    a11 = vload8(0, c0 + ldc + 8);                                                                  \
                    a20 = vload8(0, c0 + 2 * ldc);                                                                  \
                    a21 = vload8(0, c0 + 2 * ldc + 8);                                                              \
                    a30 = vload8(0, c0 + 3 * ldc);                                                                  \
                    a31 = vload8(0, c0 + 3 * ldc + 8);                                                              \
                }                                                                                                   \
                for (int k = 0; k < K; ++k) {                                                                       \
                    const float8 b0 = vload8(0, B + k * ldb + j), b1 = vload8(0, B + k * ldb + j + 8);              \
                    const float8 x0 = (float8)(X0), x1 = (float8)(X1), x2 = (float8)(X2), x3 = (float8)(X3);        \
                    a00 = FA_VMAD(x0, b0, a00);                                                                     \
                    a01 = FA_VMAD(x0, b1, a01);                                                                     \
                    a10 = FA_VMAD(x1, b0, a10);                                                                     \
                    a11 = FA_VMAD(x1, b1, a11);                                                                     \
                    a20 = FA_VMAD(x2, b0, a20);                                                                     \
                    a21 = FA_VMAD(x2, b1, a21);                                                                     \
                    a30 = FA_VMAD(x3, b0, a30);                                                                     \
                    a31 = FA_VMAD(x3, b1, a31);                                                                     \
                }                                                                                                   \
                vstore8(a00, 0, c0);                                                                                \
                vstore8(a01, 0, c0 + 8);                                                                            \
                vstore8(a10, 0, c0 + ldc);                                                                          \
                vstore8(a11, 0, c0 + ldc + 8);                                                                      \
                vstore8(a20, 0, c0 + 2 * ldc);                                                                      \
                vstore8(a21, 0, c0 + 2 * ldc + 8);                                                                  \
                vstore8(a30, 0, c0 + 3 * ldc);                                                                      \
                vstore8(a31, 0, c0 + 3 * ldc + 8);                                                                  \
            }                                                                                                       \
    }
FA_MM_DEFINE(fa_mm_nn, A[i * lda + k], A[(i + 1) * lda + k], A[(i + 2) * lda + k], A[(i + 3) * lda + k])
#endif

#if FA_KERNELS == 2
#define FA_DQP ((FA_D + 15) / 16 * 16)
#define FA_DVP ((FA_D_V + 15) / 16 * 16)

__kernel __attribute__((reqd_work_group_size(1, 1, 1))) void
fa_forward_vec(__global const long *prm, const float scale, const float drop_scale, __global const fa_store_t *q,
               __global const fa_store_t *k, __global const fa_store_t *v, __global fa_store_t *o,
               __global float *lse, __global const int *cu_q, __global const int *cu_k,
               __global const uchar *bm_bits, __global const long *bl_row_ptr, __global const int *bl_col,
               __global const uchar *bl_cls, __global const float *alibi_slopes, __global const float *sink)
{
    __local float k_t[FA_DQP * FA_BN]; /* K^T: k_t[c * FA_BN + j] */
    __local float v_t[FA_BN * FA_DVP];
    __local float q_t[FA_BM * FA_DQP]; /* scaled Q */
    __local float acc[FA_BM * FA_DVP];
    __local float s_t[FA_BM * FA_BN];

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
    const long q1 = min(q0 + (long)FA_BM, sq);
    const int nr = (int)(q1 - q0);
    const long heads_q = prm[FA_P_HEADS_Q], hk = h / prm[FA_P_GROUP];
    const fa_ocl_view vq = fa_view_of(prm, FA_T_Q), vk = fa_view_of(prm, FA_T_K), vv = fa_view_of(prm, FA_T_V);
    const fa_mask m = fa_mask_make(sq, sk, (int)prm[FA_P_CAUSAL], prm[FA_P_WINDOW_LEFT], prm[FA_P_WINDOW_RIGHT]);
    const uint threshold = (uint)prm[FA_P_DROPOUT_THRESHOLD];
    const ulong seed = (ulong)prm[FA_P_SEED], offset = (ulong)prm[FA_P_OFFSET];
    const fa_ocl_blocks blk = fa_blocks_of(prm, h);
    const fa_score_mod_state sm = fa_score_mod_of(prm, alibi_slopes, 1.0f, b, h, sq, sk); /* Q is prescaled */

    float row_max[FA_BM], row_sum[FA_BM];
    long lo[FA_BM], hi[FA_BM];
    for (int r = 0; r < FA_BM; ++r) {
        const long at = r < nr ? fa_at(vq, b, qs + q0 + r, h) : 0;
        for (int c = 0; c < FA_DQP; ++c)
            q_t[r * FA_DQP + c] = r < nr && c < FA_D ? scale * FA_LOAD(q, at + c) : 0.0f;
        for (int c = 0; c < FA_DVP; ++c)
            acc[r * FA_DVP + c] = 0.0f;
        row_max[r] = -INFINITY;
        row_sum[r] = 0.0f;
        int64_t a = 0, z = 0;
        if (r < nr)
            fa_mask_row_range(&m, q0 + r, &a, &z);
        lo[r] = a;
        hi[r] = r < nr ? z : 0;
    }

    const int8 lane = (int8)(0, 1, 2, 3, 4, 5, 6, 7);
    const fa_walk walk = fa_walk_of(prm, bl_row_ptr, &m, &blk, qt, q0, nr, sk);
    for (long it = walk.begin; it < walk.end; ++it) {
        long k0;
        const int cls = fa_walk_step(&walk, it, bl_col, bl_cls, &m, q0, &k0);
        if (cls == FA_TILE_EMPTY)
            continue;
        const int nc = (int)min((long)FA_BN, sk - k0);
        for (int j = 0; j < FA_BN; ++j) {
            const long ak = j < nc ? fa_at(vk, b, ks + k0 + j, hk) : 0, av = j < nc ? fa_at(vv, b, ks + k0 + j, hk) : 0;
            for (int c = 0; c < FA_DQP; ++c)
                k_t[c * FA_BN + j] = j < nc && c < FA_D ? FA_LOAD(k, ak + c) : 0.0f;
            for (int c = 0; c < FA_DVP; ++c)
                v_t[j * FA_DVP + c] = j < nc && c < FA_D_V ? FA_LOAD(v, av + c) : 0.0f;
        }
        /* S = (scale Q) K^T, 4 rows x 16 keys per block */
        fa_mm_nn(FA_BM, FA_BN, FA_DQP, q_t, FA_DQP, k_t, FA_BN, s_t, FA_BN, 0);
        /* score modifiers, mask, online softmax (core/softmax.h's guards), dropout, rescale of the
         * accumulators */
        for (int r = 0; r < FA_BM; ++r) {
            __local float *srow = s_t + r * FA_BN;
            const int jlo = (int)clamp(lo[r] - k0, 0L, (long)FA_BN), jhi = (int)clamp(hi[r] - k0, 0L, (long)nc);
#if FA_SCORE_MOD
            for (int j = jlo; j < jhi; ++j) { /* the rest is masked below */
                float grad;
                srow[j] = fa_score_mod_apply_at(&sm, srow[j], q0 + r, k0 + j, &grad);
            }
#endif
            if (cls == FA_TILE_PARTIAL && blk.on)
                for (int j = jlo; j < jhi; ++j)
                    if (!fa_block_keep(&blk, bm_bits, q0 + r, k0 + j))
                        srow[j] = -INFINITY;
            float8 mx8 = (float8)(-INFINITY);
            for (int j = 0; j < FA_BN; j += 8) {
                const int8 idx = lane + j;
                float8 x = select(vload8(0, srow + j), (float8)(-INFINITY), idx < jlo || idx >= jhi);
                vstore8(x, 0, srow + j);
                mx8 = fmax(mx8, x);
            }
            const float4 mx4 = fmax(mx8.lo, mx8.hi);
            const float2 mx2 = fmax(mx4.lo, mx4.hi);
            const float tile_max = fmax(mx2.lo, mx2.hi);
            const float m_old = row_max[r], m_new = fmax(m_old, tile_max);
            const float alpha = m_old == -INFINITY ? 0.0f : m_new == m_old ? 1.0f : exp(m_old - m_new);
            const float shift = m_new == -INFINITY ? 0.0f : m_new;
            row_max[r] = m_new;
            float8 sum8 = 0.0f;
            for (int j = 0; j < FA_BN; j += 8) {
                const float8 e = exp(vload8(0, srow + j) - shift);
                vstore8(e, 0, srow + j);
                sum8 += e;
            }
            const float4 s4 = sum8.lo + sum8.hi;
            const float2 s2 = s4.lo + s4.hi;
            row_sum[r] = row_sum[r] * alpha + (s2.lo + s2.hi);
            if (threshold && jhi > jlo)
                for (int j = jlo & ~(FA_DROPOUT_BLOCK_KEYS - 1); j < jhi; j += FA_DROPOUT_BLOCK_KEYS) {
                    const fa_philox4 bits = fa_dropout_block(seed, offset, (ulong)b, (ulong)heads_q, (ulong)h,
                                                             (ulong)(q0 + r), (ulong)(k0 + j));
                    for (int t = 0; t < FA_DROPOUT_BLOCK_KEYS; ++t)
                        srow[j + t] *= fa_drop_factor(bits, k0 + j + t, threshold, drop_scale);
                }
            if (alpha != 1.0f)
                for (int c = 0; c < FA_DVP; c += 8)
                    vstore8(vload8(0, acc + r * FA_DVP + c) * alpha, 0, acc + r * FA_DVP + c);
        }
        /* O += P V, 4 rows x 16 columns per block */
        fa_mm_nn(FA_BM, FA_DVP, FA_BN, s_t, FA_BN, v_t, FA_DVP, acc, FA_DVP, 1);
    }

    const fa_ocl_view vo = fa_view_of(prm, FA_T_O), vl = fa_view_of(prm, FA_T_LSE);
    for (int r = 0; r < nr; ++r) {
        float inv;
        const float lrow = fa_row_finish(prm, FA_P_SINK_OFF, sink, h, row_max[r], row_sum[r], &inv);
        const long at = fa_at(vo, b, qs + q0 + r, h);
        for (int c = 0; c < FA_D_V; ++c)
            FA_STORE(o, at + c, fa_row_output(acc[r * FA_DVP + c], inv));
        if (prm[FA_P_HAS_LSE])
            lse[fa_at(vl, b, qs + q0 + r, h)] = lrow;
    }
}
#endif
