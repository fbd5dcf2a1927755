/* forward.cl: the fused forward (Dao et al. 2022, Algorithm 1) for any OpenCL device.
 * One work-group per (query tile of FA_BM rows, query head, batch); FA_BM / FA_RM work-items, each
 * owning FA_RM query rows: their scaled Q, the output accumulators and the online-softmax state
 * stay in private memory. Key and value tiles (FA_BN x FA_D, widened to fp32) live in __local
 * memory shared by the work-group; every work-item reads the same key at the same time (a
 * broadcast, no bank conflicts on GPUs). On GPUs the loops over the head dim and the tile's keys
 * are unrolled (FA_UNROLL_LOOP) so that the private rows indexed by them live in registers. CPU devices run
 * forward_vec.cl instead (FLASHATTN_OPENCL_TILES=gpu runs this kernel anywhere, as the tests do). */

#if FA_KERNELS == 1
__kernel __attribute__((reqd_work_group_size(FA_WG, 1, 1))) void
fa_forward(__global const long *prm, const float scale, const float drop_scale, __global const fa_store_t *q,
           __global const fa_store_t *k, __global const fa_store_t *v, __global fa_store_t *o, __global float *lse,
           __global const int *cu_q, __global const int *cu_k, __global const uchar *bm_bits,
           __global const long *bl_row_ptr, __global const int *bl_col, __global const uchar *bl_cls)
{
    __local float k_tile[FA_BN * FA_D];
    __local float v_tile[FA_BN * FA_D];

    const int tid = (int)get_local_id(0);
    const long qt = (long)get_group_id(0), h = (long)get_group_id(1), b = (long)get_group_id(2);
    long sq, sk, qs, ks;
    fa_seq(prm, cu_q, cu_k, b, &sq, &sk, &qs, &ks);
    const long q0 = qt * FA_BM;
    if (q0 >= sq) /* the same for the whole work-group: no barrier is skipped by part of it */
        return;
    const long q1 = min(q0 + (long)FA_BM, sq);
    const long heads_q = prm[FA_P_HEADS_Q], hk = h / prm[FA_P_GROUP];
    const fa_ocl_view vq = fa_view_of(prm, FA_T_Q), vk = fa_view_of(prm, FA_T_K), vv = fa_view_of(prm, FA_T_V);
    const fa_mask m = fa_mask_make(sq, sk, (int)prm[FA_P_CAUSAL], prm[FA_P_WINDOW_LEFT], prm[FA_P_WINDOW_RIGHT]);
    const uint threshold = (uint)prm[FA_P_DROPOUT_THRESHOLD];
    const ulong seed = (ulong)prm[FA_P_SEED], offset = (ulong)prm[FA_P_OFFSET];
    const fa_ocl_blocks blk = fa_blocks_of(prm, h);

    float qr[FA_RM][FA_D], acc[FA_RM][FA_D], row_max[FA_RM], row_sum[FA_RM];
    long lo[FA_RM], hi[FA_RM];
    FA_UNROLL_LOOP
    for (int r = 0; r < FA_RM; ++r) {
        const long i = q0 + tid + (long)r * FA_WG;
        const int valid = i < sq;
        const long at = valid ? fa_at(vq, b, qs + i, h) : 0;
        FA_UNROLL_LOOP
        for (int c = 0; c < FA_D; ++c) {
            qr[r][c] = valid ? scale * FA_LOAD(q, at + c) : 0.0f;
            acc[r][c] = 0.0f;
        }
        row_max[r] = -INFINITY;
        row_sum[r] = 0.0f;
        lo[r] = 0;
        hi[r] = 0;
        if (valid) {
            int64_t a, z;
            fa_mask_row_range(&m, i, &a, &z);
            lo[r] = a;
            hi[r] = z;
        }
    }

    const fa_walk walk = fa_walk_of(prm, bl_row_ptr, &m, &blk, qt, q0, q1 - q0, sk);
    for (long it = walk.begin; it < walk.end; ++it) {
        long k0;
        const int cls = fa_walk_step(&walk, it, bl_col, bl_cls, &m, q0, &k0);
        if (cls == FA_TILE_EMPTY)
            continue;
        const int nc = (int)min((long)FA_BN, sk - k0);
        barrier(CLK_LOCAL_MEM_FENCE); /* everyone is done with the previous tile */
        for (int e = tid; e < FA_BN * FA_D; e += FA_WG) {
            const int j = e / FA_D, c = e - j * FA_D;
            float kx = 0.0f, vx = 0.0f;
            if (j < nc) {
                kx = FA_LOAD(k, fa_at(vk, b, ks + k0 + j, hk) + c);
                vx = FA_LOAD(v, fa_at(vv, b, ks + k0 + j, hk) + c);
            }
            k_tile[e] = kx;
            v_tile[e] = vx;
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        FA_UNROLL_LOOP
        for (int r = 0; r < FA_RM; ++r) {
            const long i = q0 + tid + (long)r * FA_WG;
            if (i >= sq)
                continue;
            /* visible columns [jlo, jhi) of this tile for row i */
            const long jlo = max(lo[r] - k0, 0L), jhi = min(hi[r] - k0, (long)nc);
            float s[FA_BN];
            float tile_max = -INFINITY;
            FA_UNROLL_LOOP
            for (int j = 0; j < FA_BN; ++j) {
                float x = 0.0f;
                FA_UNROLL_LOOP
                for (int c = 0; c < FA_D; ++c)
                    x = mad(qr[r][c], k_tile[j * FA_D + c], x);
                int vis = j >= jlo && j < jhi;
                if (vis && cls == FA_TILE_PARTIAL && blk.on)
                    vis = fa_block_keep(&blk, bm_bits, i, k0 + j);
                s[j] = vis ? x : -INFINITY;
                tile_max = fmax(tile_max, s[j]);
            }
            /* core/softmax.h: the -inf guards and the exact 1 for an unchanged max */
            const float m_old = row_max[r], m_new = fmax(m_old, tile_max);
            const float alpha = m_old == -INFINITY ? 0.0f : m_new == m_old ? 1.0f : exp(m_old - m_new);
            const float shift = m_new == -INFINITY ? 0.0f : m_new;
            row_max[r] = m_new;
            float sum = 0.0f;
            FA_UNROLL_LOOP
            for (int j = 0; j < FA_BN; ++j) {
                s[j] = exp(s[j] - shift);
                sum += s[j];
            }
            row_sum[r] = row_sum[r] * alpha + sum;
            if (threshold) { /* k0 is a multiple of 4: one Philox block per 4 keys */
                FA_UNROLL_LOOP
                for (int j = 0; j < FA_BN; j += 4) {
                    const fa_philox4 bits = fa_dropout_block(seed, offset, (ulong)b, (ulong)heads_q, (ulong)h,
                                                             (ulong)i, (ulong)(k0 + j));
                    FA_UNROLL_LOOP
                    for (int t = 0; t < 4; ++t)
                        s[j + t] *= fa_drop_factor(bits.v[t], threshold, drop_scale);
                }
            }
            if (alpha != 1.0f) {
                FA_UNROLL_LOOP
                for (int c = 0; c < FA_D; ++c)
                    acc[r][c] *= alpha;
            }
            FA_UNROLL_LOOP
            for (int j = 0; j < FA_BN; ++j) {
                const float pj = s[j];
                FA_UNROLL_LOOP
                for (int c = 0; c < FA_D; ++c)
                    acc[r][c] = mad(pj, v_tile[j * FA_D + c], acc[r][c]);
            }
        }
    }

    const fa_ocl_view vo = fa_view_of(prm, FA_T_O), vl = fa_view_of(prm, FA_T_LSE);
    FA_UNROLL_LOOP
    for (int r = 0; r < FA_RM; ++r) {
        const long i = q0 + tid + (long)r * FA_WG;
        if (i >= sq)
            continue;
        const float l = row_sum[r], mx = row_max[r];
        const float inv = l == 0.0f ? 0.0f : 1.0f / l;
        const long at = fa_at(vo, b, qs + i, h);
        FA_UNROLL_LOOP
        for (int c = 0; c < FA_D; ++c)
            FA_STORE(o, at + c, acc[r][c] * inv);
        if (prm[FA_P_HAS_LSE])
            lse[fa_at(vl, b, qs + i, h)] = (l == 0.0f || mx == -INFINITY) ? -INFINITY : mx + log(l);
    }
}
#endif
