/* backward.cuh: the SIMT backward, forward.cuh's twin without atomics (bitwise
 * reproducible): D = rowsum(dO o O), then dK/dV per key tile and dQ per query tile, each key (query)
 * row spread over D/16 adjacent threads that hold 16 of its columns and add their partial dot
 * products with xor shuffles; with a learnable sink, dsink per head by one block in a fixed order. */
#ifndef FA_PORTABLE_BACKWARD_CUH
#define FA_PORTABLE_BACKWARD_CUH

#include "common/portable.cuh"
#include "sink.h"

namespace fa_gpu::simt {

/* ---------------------------------------------------------------- backward */

/* D = rowsum(dO o O) of every query row, to p.dsum[h][row] (row: the packed row, or b seqlen_q + i
 * for dense tensors). One thread per row. */
template <class S> __global__ void FA_LAUNCH_BOUNDS(THREADS) dsum_kernel(const fa_gpu_params p)
{
    typedef typename S::T T;
    const int64_t i = (int64_t)blockIdx.x * THREADS + threadIdx.x, h = blockIdx.y, b = blockIdx.z;
    const fa_seq sqi = fa_sequence(p, b);
    if (i >= sqi.sq)
        return;
    const T *const op = static_cast<const T *>(p.o.data) + offset_of(p.o, b, sqi.q_start + i, h);
    const T *const dp = static_cast<const T *>(p.dout.data) + offset_of(p.dout, b, sqi.q_start + i, h);
    float acc = 0.0f;
    for (int64_t c = 0; c < p.d_v; ++c)
        acc = fmaf(S::load(op, c), S::load(dp, c), acc);
    const int64_t row = p.cu_q ? sqi.q_start + i : b * p.seqlen_q + i;
    p.dsum[h * p.total_q + row] = acc;
}

/* dsink_h = sum over the rows i of head h of fa_sink_grad_term(sink_h, LSE_i, D_i) (core/sink.h),
 * written, not added: one block of NT threads per query head, after dsum_kernel. Thread t takes
 * rows t, t + NT, ... of each sequence in turn, and the block adds the threads' sums in a fixed tree,
 * so the result is the same bits on every run. */
template <int NT> __global__ void FA_LAUNCH_BOUNDS(NT) dsink_kernel(const fa_gpu_params p)
{
    static_assert((NT & (NT - 1)) == 0, "the tree needs a power of two threads");
    __shared__ float part[NT];
    const int tid = (int)threadIdx.x;
    const int64_t h = blockIdx.x;
    const float sink = p.sink[h];
    float acc = 0.0f;
    for (int64_t b = 0; b < p.batch; ++b) {
        const fa_seq sqi = fa_sequence(p, b);
        const int64_t row0 = p.cu_q ? sqi.q_start : b * p.seqlen_q; /* D's row of query 0 */
        for (int64_t i = tid; i < sqi.sq; i += NT) {
            const float l = static_cast<const float *>(p.lse.data)[offset_of(p.lse, b, sqi.q_start + i, h)];
            acc += fa_sink_grad_term(sink, l, p.dsum[h * p.total_q + row0 + i]);
        }
    }
    part[tid] = acc;
    FA_SYNC();
#pragma unroll
    for (int w = NT / 2; w > 0; w >>= 1) {
        if (tid < w)
            part[tid] += part[tid + w];
        FA_SYNC();
    }
    if (tid == 0)
        p.dsink[h] = part[0];
}

/* The backward's decomposition for head-dim bucket D (of the larger of d and d_v): TPK adjacent threads share one key (dK/dV)
 * or one query row (dQ), each holding CPT = 16 of its columns (c = lane + TPK u: adjacent threads
 * read adjacent shared-memory words); the streamed Q, dO (or K, V) tiles of STEP rows take 32 KiB
 * of shared memory. Keys per dK/dV block and rows per dQ block: THREADS / TPK, a divisor of 64 so
 * a block lies inside one tile of the core's block lists. */
template <int D> struct bwd_shape {
    static constexpr int CPT = FA_SIMT_BWD_CPT;
    static constexpr int TPK = D / CPT;
    static constexpr int ROWS = FA_SIMT_BWD_ROWS(D); /* keys (dK/dV) or query rows (dQ) per block */
    static constexpr int STEP = 4096 / D;      /* streamed rows per shared-memory tile */
    static_assert(ROWS == THREADS / TPK && D % CPT == 0 && TPK >= 1 && (TPK & (TPK - 1)) == 0 && TPK <= FA_WARP_SIZE && ROWS <= 64 &&
                      64 % ROWS == 0 && 64 % STEP == 0,
                  "backward shape");
};

/* The sum over the TPK lanes of a group, bitwise the same on each of them (xor butterfly: every
 * level adds the same two values in either order). Every lane of the warp must call it. */
template <int TPK> FA_DEVICE float group_sum(float x)
{
#pragma unroll
    for (int m = 1; m < TPK; m <<= 1)
        x += FA_SHFL_XOR(x, m);
    return x;
}

/* Rows [r0, r0 + STEP) of head hd of two tensors with the same rows (Q and dO, or K and V) and
 * da and db columns (d and d_v) into shared tiles [STEP][D], widened; rows >= n and columns past
 * each tensor's are 0. Every thread of the block takes part (the caller's barriers bracket it). */
template <class S, int D, int STEP>
FA_DEVICE void load_tile_pair(const fa_gpu_tensor &ta, const fa_gpu_tensor &tb, int da, int db, int64_t b, int64_t r0,
                              int n, int64_t hd, float *a_t, float *b_t)
{
    typedef typename S::T T;
    for (int e = (int)threadIdx.x; e < STEP * D; e += THREADS) {
        const int r = e / D, c = e - r * D;
        float ax = 0.0f, bx = 0.0f;
        if (r < n && c < da)
            ax = S::load(static_cast<const T *>(ta.data), offset_of(ta, b, r0 + r, hd) + c);
        if (r < n && c < db)
            bx = S::load(static_cast<const T *>(tb.data), offset_of(tb, b, r0 + r, hd) + c);
        a_t[e] = ax;
        b_t[e] = bx;
    }
}

/* This thread's CPT columns (lane + TPK u) of row `row` of head hd of two tensors (K and V, or Q
 * and dO, of da and db columns) into registers; 0 for an invalid row and past each tensor's
 * columns. */
template <class S, int CPT, int TPK>
FA_DEVICE void load_row_pair(const fa_gpu_tensor &ta, const fa_gpu_tensor &tb, int da, int db, int64_t b, int64_t row,
                             int64_t hd, bool valid, int lane, float *ar, float *br)
{
    typedef typename S::T T;
    const T *const ap = static_cast<const T *>(ta.data) + (valid ? offset_of(ta, b, row, hd) : 0);
    const T *const bp = static_cast<const T *>(tb.data) + (valid ? offset_of(tb, b, row, hd) : 0);
#pragma unroll
    for (int u = 0; u < CPT; ++u) {
        const int c = lane + TPK * u;
        ar[u] = valid && c < da ? S::load(ap, c) : 0.0f;
        br[u] = valid && c < db ? S::load(bp, c) : 0.0f;
    }
}

/* dK, dV for ROWS keys of kv head hk: the query heads of the GQA group in order, each query tile
 * in order (the same sums on every run). MOD: the call has a score modifier (the forward's). */
template <class S, int D, bool MOD> __global__ void FA_LAUNCH_BOUNDS(THREADS) dkdv_kernel(const fa_gpu_params p)
{
    typedef typename S::T T;
    typedef bwd_shape<D> sh;
    constexpr int CPT = sh::CPT, TPK = sh::TPK, STEP = sh::STEP;
    __shared__ float q_t[STEP * D], do_t[STEP * D], lse_t[STEP], dsum_t[STEP];

    const int tid = (int)threadIdx.x, lane = tid % TPK;
    const int64_t kb = blockIdx.x, hk = blockIdx.y, b = blockIdx.z;
    const fa_seq sqi = fa_sequence(p, b);
    const int64_t k0 = kb * sh::ROWS;
    if (k0 >= sqi.sk) /* uniform */
        return;
    const int64_t j = k0 + tid / TPK, kt = k0 / BN;
    const bool valid = j < sqi.sk;
    const int d = (int)p.d, dv = (int)p.d_v;
    const fa_mask m = fa_mask_make(sqi.sq, sqi.sk, p.causal, p.window_left, p.window_right);
    const int64_t row0 = p.cu_q ? sqi.q_start : b * p.seqlen_q; /* D's row of query 0 */

    float kr[CPT], vr[CPT], dkr[CPT], dvr[CPT];
    load_row_pair<S, CPT, TPK>(p.k, p.v, d, dv, b, sqi.k_start + j, hk, valid, lane, kr, vr);
#pragma unroll
    for (int u = 0; u < CPT; ++u) {
        dkr[u] = 0.0f;
        dvr[u] = 0.0f;
    }
    const int64_t nsteps = (sqi.sq + STEP - 1) / STEP;
    /* no query rows (nsteps = 0): dK = dV = 0 without walking the group's heads */
    for (int64_t h = hk * p.group; nsteps > 0 && h < (hk + 1) * p.group; ++h) {
        const fa_score_mod_state mod = MOD ? fa_gpu_score_mod(p, sqi, b, h) : fa_score_mod_state{};
        for (int64_t qi = 0; qi < nsteps; ++qi) {
            const int64_t q0 = qi * STEP;
            int cls = (int)fa_mask_classify_tile(&m, q0, q0 + STEP, k0, k0 + sh::ROWS);
            if (cls != FA_TILE_EMPTY && p.bl_row_ptr)
                cls = meet(cls, list_class(p, h, q0 / BM, kt));
            if (cls == FA_TILE_EMPTY) /* uniform */
                continue;
            const int nr = (int)(sqi.sq - q0 < STEP ? sqi.sq - q0 : STEP);
            FA_SYNC(); /* the previous tile's reads are done */
            load_tile_pair<S, D, STEP>(p.q, p.dout, d, dv, b, sqi.q_start + q0, nr, h, q_t, do_t);
            for (int r = tid; r < STEP; r += THREADS) {
                lse_t[r] = r < nr ? static_cast<const float *>(p.lse.data)[offset_of(p.lse, b, sqi.q_start + q0 + r, h)]
                                  : -INFINITY;
                dsum_t[r] = r < nr ? p.dsum[h * p.total_q + row0 + q0 + r] : 0.0f;
            }
            FA_SYNC();
            for (int r = 0; r < nr; ++r) { /* uniform bound: every lane reaches the shuffles */
                float s = 0.0f, dp = 0.0f;
#pragma unroll
                for (int u = 0; u < CPT; ++u) {
                    s = fmaf(q_t[r * D + lane + TPK * u], kr[u], s);
                    dp = fmaf(do_t[r * D + lane + TPK * u], vr[u], dp);
                }
                s = group_sum<TPK>(s);
                dp = group_sum<TPK>(dp);
                const int64_t i = q0 + r;
                const float l = lse_t[r];
                bool vis = valid && l != -INFINITY; /* a fully masked row: P = 0 */
                if (vis && cls != FA_TILE_FULL) {
                    int64_t lo, hi;
                    fa_mask_row_range(&m, i, &lo, &hi);
                    vis = j >= lo && j < hi && (!p.bm_bits || block_keep(p, h, i, j));
                }
                if (!vis)
                    continue; /* no barrier or shuffle follows inside this loop */
                float grad = 1.0f; /* the modifier's derivative */
                if constexpr (MOD)
                    s = fa_score_mod_apply_at(&mod, s, i, j, &grad);
                const float pr = expf(p.scale * s - l);
                const float z = p.dropout_threshold ? drop_factor(p, b, h, i, j) : 1.0f;
                /* dV += (P o Z)^T dO; dS = P o (Z o dP - D) * scale (times the modifier's
                 * derivative); dK += dS^T Q */
                const float pz = pr * z;
                float ds = pr * (z * dp - dsum_t[r]) * p.scale;
                if constexpr (MOD)
                    ds *= grad;
#pragma unroll
                for (int u = 0; u < CPT; ++u) {
                    dvr[u] = fmaf(pz, do_t[r * D + lane + TPK * u], dvr[u]);
                    dkr[u] = fmaf(ds, q_t[r * D + lane + TPK * u], dkr[u]);
                }
            }
        }
    }
    if (valid) {
        T *const dkp = static_cast<T *>(p.dk.data) + offset_of(p.dk, b, sqi.k_start + j, hk);
        T *const dvp = static_cast<T *>(p.dv.data) + offset_of(p.dv, b, sqi.k_start + j, hk);
#pragma unroll
        for (int u = 0; u < CPT; ++u) {
            const int c = lane + TPK * u;
            if (c < d)
                S::store(dkp, c, dkr[u]);
            if (c < dv)
                S::store(dvp, c, dvr[u]);
        }
    }
}

/* dQ for ROWS query rows of head h: the key tiles in ascending order (the same sums every run).
 * MOD: the call has a score modifier (the forward's). */
template <class S, int D, bool MOD> __global__ void FA_LAUNCH_BOUNDS(THREADS) dq_kernel(const fa_gpu_params p)
{
    typedef typename S::T T;
    typedef bwd_shape<D> sh;
    constexpr int CPT = sh::CPT, TPK = sh::TPK, STEP = sh::STEP;
    __shared__ float k_t[STEP * D], v_t[STEP * D];

    const int tid = (int)threadIdx.x, lane = tid % TPK;
    const int64_t rb = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const fa_seq sqi = fa_sequence(p, b);
    const int64_t q0 = rb * sh::ROWS;
    if (q0 >= sqi.sq) /* uniform */
        return;
    const int64_t nr = sqi.sq - q0 < sh::ROWS ? sqi.sq - q0 : sh::ROWS;
    const int64_t i = q0 + tid / TPK, hk = h / p.group;
    const bool valid = i < sqi.sq;
    const int d = (int)p.d, dv = (int)p.d_v;
    const fa_mask m = fa_mask_make(sqi.sq, sqi.sk, p.causal, p.window_left, p.window_right);

    float qr[CPT], dor[CPT], dqr[CPT];
    float l = -INFINITY, di = 0.0f;
    int64_t lo = 0, hi = 0;
    load_row_pair<S, CPT, TPK>(p.q, p.dout, d, dv, b, sqi.q_start + i, h, valid, lane, qr, dor);
#pragma unroll
    for (int u = 0; u < CPT; ++u)
        dqr[u] = 0.0f;
    if (valid) {
        l = static_cast<const float *>(p.lse.data)[offset_of(p.lse, b, sqi.q_start + i, h)];
        di = p.dsum[h * p.total_q + (p.cu_q ? sqi.q_start : b * p.seqlen_q) + i];
        fa_mask_row_range(&m, i, &lo, &hi);
    }
    const bool live = valid && l != -INFINITY; /* rows outside or fully masked: P = 0 */
    const fa_score_mod_state mod = MOD ? fa_gpu_score_mod(p, sqi, b, h) : fa_score_mod_state{};

    const key_walk walk = walk_of(p, m, h, q0 / BM, q0, nr, sqi.sk);
    for (int64_t it = walk.begin; it < walk.end; ++it) {
        int lcls;
        const int64_t kt = walk_tile(p, walk, it, &lcls);
        for (int64_t kc0 = kt * BN; kc0 < kt * BN + BN && kc0 < sqi.sk; kc0 += STEP) {
            const int cls = meet(fa_mask_classify_tile(&m, q0, q0 + sh::ROWS, kc0, kc0 + STEP), lcls);
            if (cls == FA_TILE_EMPTY) /* uniform */
                continue;
            const int nc = (int)(sqi.sk - kc0 < STEP ? sqi.sk - kc0 : STEP);
            FA_SYNC(); /* the previous tile's reads are done */
            load_tile_pair<S, D, STEP>(p.k, p.v, d, dv, b, sqi.k_start + kc0, nc, hk, k_t, v_t);
            FA_SYNC();
            for (int jj = 0; jj < nc; ++jj) { /* uniform bound: every lane reaches the shuffles */
                float s = 0.0f, dp = 0.0f;
#pragma unroll
                for (int u = 0; u < CPT; ++u) {
                    s = fmaf(qr[u], k_t[jj * D + lane + TPK * u], s);
                    dp = fmaf(dor[u], v_t[jj * D + lane + TPK * u], dp);
                }
                s = group_sum<TPK>(s);
                dp = group_sum<TPK>(dp);
                const int64_t j = kc0 + jj;
                bool vis = live && j >= lo && j < hi;
                if (vis && cls == FA_TILE_PARTIAL && p.bm_bits)
                    vis = block_keep(p, h, i, j);
                if (!vis)
                    continue; /* no barrier or shuffle follows inside this loop */
                float grad = 1.0f; /* the modifier's derivative */
                if constexpr (MOD)
                    s = fa_score_mod_apply_at(&mod, s, i, j, &grad);
                const float pr = expf(p.scale * s - l);
                const float z = p.dropout_threshold ? drop_factor(p, b, h, i, j) : 1.0f;
                float ds = pr * (z * dp - di) * p.scale;
                if constexpr (MOD)
                    ds *= grad;
#pragma unroll
                for (int u = 0; u < CPT; ++u)
                    dqr[u] = fmaf(ds, k_t[jj * D + lane + TPK * u], dqr[u]);
            }
        }
    }
    if (valid) {
        T *const dqp = static_cast<T *>(p.dq.data) + offset_of(p.dq, b, sqi.q_start + i, h);
#pragma unroll
        for (int u = 0; u < CPT; ++u) {
            const int c = lane + TPK * u;
            if (c < d)
                S::store(dqp, c, dqr[u]);
        }
    }
}

/* p.dsum: [heads_q][total_q] floats of workspace. p.dsink (with p.sink): written by dsink_kernel
 * after dsum_kernel, for every head (0 where the heads have no query row). */
#if !defined(__CUDACC_RTC__) && !defined(__HIPCC_RTC__) /* host code: NVRTC and hipRTC compile the kernels alone */
/* dsink_kernel for p (p.sink and p.dsink set) after a dsum on the same stream: the SIMT backward's,
 * or the tensor-core families' (common/backward_elementwise.cuh, the same D in p.dsum). */
inline fa_gpu_error launch_dsink(const fa_gpu_params &p, fa_gpu_stream stream)
{
    if (!grid_ok(p.heads_q, 1, 1))
        return FA_GPU_INVALID_VALUE;
    dsink_kernel<THREADS><<<(unsigned)p.heads_q, THREADS, 0, stream>>>(p);
    return fa_gpu_last_error();
}

template <class S, int D> fa_gpu_error launch_backward(const fa_gpu_params &p, fa_gpu_stream stream)
{
    typedef bwd_shape<D> sh;
    if (p.batch == 0)
        return FA_GPU_SUCCESS;
    fa_gpu_error e = FA_GPU_SUCCESS;
    const bool mod = fa_gpu_has_score_mod(p);
    const int64_t nd = (p.seqlen_q + THREADS - 1) / THREADS, nq = (p.seqlen_q + sh::ROWS - 1) / sh::ROWS;
    const int64_t nk = (p.seqlen_k + sh::ROWS - 1) / sh::ROWS;
    if (nd > 0) {
        if (!grid_ok(nd, p.heads_q, p.batch))
            return FA_GPU_INVALID_VALUE;
        dsum_kernel<S><<<dim3((unsigned)nd, (unsigned)p.heads_q, (unsigned)p.batch), THREADS, 0, stream>>>(p);
        if ((e = fa_gpu_last_error()) != FA_GPU_SUCCESS)
            return e;
    }
    if (p.sink && p.dsink && (e = launch_dsink(p, stream)) != FA_GPU_SUCCESS) /* after dsum on the same stream */
        return e;
    if (nk > 0) { /* after dsum on the same stream */
        if (!grid_ok(nk, p.heads_kv, p.batch))
            return FA_GPU_INVALID_VALUE;
        const dim3 grid((unsigned)nk, (unsigned)p.heads_kv, (unsigned)p.batch);
        if (mod)
            dkdv_kernel<S, D, true><<<grid, THREADS, 0, stream>>>(p);
        else
            dkdv_kernel<S, D, false><<<grid, THREADS, 0, stream>>>(p);
        if ((e = fa_gpu_last_error()) != FA_GPU_SUCCESS)
            return e;
    }
    if (nq > 0) {
        if (!grid_ok(nq, p.heads_q, p.batch))
            return FA_GPU_INVALID_VALUE;
        const dim3 grid((unsigned)nq, (unsigned)p.heads_q, (unsigned)p.batch);
        if (mod)
            dq_kernel<S, D, true><<<grid, THREADS, 0, stream>>>(p);
        else
            dq_kernel<S, D, false><<<grid, THREADS, 0, stream>>>(p);
        e = fa_gpu_last_error();
    }
    return e;
}
#endif

} // namespace fa_gpu::simt

#endif /* FA_PORTABLE_BACKWARD_CUH */
