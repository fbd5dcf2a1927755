/* forward.cuh: the SIMT forward (forward.cl's design): one block of 256 threads per
 * (64-row query tile, head, batch), a 16 x 16 grid of threads each owning a 4 x 4 block of the
 * 64 x 64 score tile and the matching rows of O; Q and K pass through shared memory 32 head-dim
 * columns at a time, V 64 at a time. Plain fp32 FMAs, CUDA and HIP alike. The learnable sink is
 * folded into each row's LSE and O in the epilogue (core/sink.h). */
#ifndef FA_PORTABLE_FORWARD_CUH
#define FA_PORTABLE_FORWARD_CUH

#include "common/portable.cuh"
#include "common/simt_geometry.h"
#include "sink.h"

namespace fa_gpu::simt {

/* ---------------------------------------------------------------- forward */

namespace fwd {
constexpr int TM = 4, TN = 4;                 /* rows and keys of S per thread */
constexpr int TY = BM / TM, TX = BN / TN;     /* 16 x 16 threads */
constexpr int DC = 32;                        /* head-dim columns of Q and K per pass */
constexpr int CP = DC + 4;                    /* padded row pitch of the Q and K passes */
constexpr int QP = BM + 4;                    /* padded row pitch of P^T */
constexpr int OW = 4 * TX;                    /* O columns one float4 per thread covers: 64 */
constexpr int VC = OW;                        /* V columns per chunk */
constexpr int RA = CP * (BM + BN);            /* region A, floats: Q and K passes, then V */
constexpr int RP = BN * QP;                   /* region P, floats: P^T, row reductions */
constexpr int NQ = BM * DC / 4 / THREADS;     /* float4 per thread of a Q pass, a K pass, a V chunk */
constexpr int NK = BN * DC / 4 / THREADS;
constexpr int NV = BN * VC / 4 / THREADS;
static_assert(TY * TX == THREADS && TM == 4 && NQ * THREADS * 4 == BM * DC && NK * THREADS * 4 == BN * DC &&
                  NV * THREADS * 4 == BN * VC && BN * VC <= RA && BM * TX <= RP,
              "forward tile shape");
} // namespace fwd

/* D: the head-dim bucket (64, 128, 256) of the larger of the two head dims: p.d <= D columns of Q
 * and K are real, p.d_v <= D of V and O. MOD: the call has a score modifier, applied to the raw
 * q . k products (Q then is not prescaled), which are then scaled. */
template <class S, int D, bool MOD>
__global__ void FA_LAUNCH_BOUNDS(THREADS) forward_kernel(const fa_gpu_params p, const bool vec)
{
    using namespace fwd;
    typedef typename S::T T;
    constexpr int G = D / OW; /* float4 columns of O per thread */
    __shared__ float4 region_a[RA / 4]; /* Q [BM][CP], K [BN][CP]; V [BN][VC] */
    __shared__ float4 region_p[RP / 4]; /* P^T [BN][QP]; row reductions [BM][TX] */
    __shared__ int range_l[2 * BM];     /* each row's visible keys [lo, hi), sequence-relative */
    float *const q_l = reinterpret_cast<float *>(region_a), *const k_l = q_l + BM * CP;
    float *const v_l = reinterpret_cast<float *>(region_a), *const p_l = reinterpret_cast<float *>(region_p);

    const int tid = (int)threadIdx.x, tx = tid % TX, ty = tid / TX;
    const int64_t qtile = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const fa_seq sqi = fa_sequence(p, b);
    const int64_t q0 = qtile * BM;
    if (q0 >= sqi.sq) /* the same for the whole block: no barrier is skipped by part of it */
        return;
    const int nr = (int)(sqi.sq - q0 < BM ? sqi.sq - q0 : BM);
    const int d = (int)p.d, dv = (int)p.d_v;
    const int64_t hk = h / p.group;
    const fa_mask m = fa_mask_make(sqi.sq, sqi.sk, p.causal, p.window_left, p.window_right);
    const float qscale = MOD ? 1.0f : p.scale_log2;
    const T *const qp = static_cast<const T *>(p.q.data) + offset_of(p.q, b, sqi.q_start + q0, h);
    const T *const kp = static_cast<const T *>(p.k.data) + offset_of(p.k, b, sqi.k_start, hk);
    const T *const vp = static_cast<const T *>(p.v.data) + offset_of(p.v, b, sqi.k_start, hk);
    for (int r = tid; r < BM; r += THREADS) {
        int64_t a = 0, z = 0;
        if (r < nr)
            fa_mask_row_range(&m, q0 + r, &a, &z);
        range_l[2 * r] = (int)a;
        range_l[2 * r + 1] = (int)z;
    }
    FA_SYNC(); /* publish the ranges before any use */

    /* this thread's rows ty TM + r and keys tx + TX j; O columns 4 tx + OW g */
    float4 acc[TM][G];
    float row_max[TM], row_sum[TM];
#pragma unroll
    for (int r = 0; r < TM; ++r) {
        row_max[r] = -INFINITY;
        row_sum[r] = 0.0f;
#pragma unroll
        for (int g = 0; g < G; ++g)
            acc[r][g] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }

    const fa_score_mod_state mod = MOD ? fa_gpu_score_mod(p, sqi, b, h) : fa_score_mod_state{};
    const key_walk walk = walk_of(p, m, h, qtile, q0, nr, sqi.sk);
    for (int64_t it = walk.begin; it < walk.end; ++it) {
        int lcls;
        const int64_t kt = walk_tile(p, walk, it, &lcls);
        const int64_t k0l = kt * BN;
        const int cls = meet(fa_mask_classify_tile(&m, q0, q0 + BM, k0l, k0l + BN), lcls);
        if (cls == FA_TILE_EMPTY) /* uniform: depends on the block's tiles only */
            continue;
        const int k0 = (int)k0l, nc = (int)(sqi.sk - k0l < BN ? sqi.sk - k0l : BN);

        /* S = (scale log2 e) Q K^T (for MOD: Q K^T), DC columns at a time; consecutive threads load
         * consecutive float4 of a row (coalesced), the pitch CP spreads a warp's float4 stores over
         * banks */
        float s[TM][TN];
#pragma unroll
        for (int r = 0; r < TM; ++r)
#pragma unroll
            for (int j = 0; j < TN; ++j)
                s[r][j] = 0.0f;
        for (int dc = 0; dc < d; dc += DC) {
            float4 qn[NQ], kn[NK];
#pragma unroll
            for (int u = 0; u < NQ; ++u) {
                const int e = tid + u * THREADS, r = e / (DC / 4), c = dc + (e % (DC / 4)) * 4;
                qn[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                if (r < nr && c < d) {
                    const float4 x = load4<S>(qp, (int64_t)r * p.q.ss + c, d - c, vec);
                    qn[u] = make_float4(qscale * x.x, qscale * x.y, qscale * x.z, qscale * x.w);
                }
            }
#pragma unroll
            for (int u = 0; u < NK; ++u) {
                const int e = tid + u * THREADS, j = e / (DC / 4), c = dc + (e % (DC / 4)) * 4;
                kn[u] = j < nc && c < d ? load4<S>(kp, (int64_t)(k0 + j) * p.k.ss + c, d - c, vec)
                                        : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
            FA_SYNC(); /* the previous pass (or tile) is done with region A and region P */
#pragma unroll
            for (int u = 0; u < NQ; ++u) {
                const int e = tid + u * THREADS;
                *reinterpret_cast<float4 *>(q_l + e / (DC / 4) * CP + (e % (DC / 4)) * 4) = qn[u];
            }
#pragma unroll
            for (int u = 0; u < NK; ++u) {
                const int e = tid + u * THREADS;
                *reinterpret_cast<float4 *>(k_l + e / (DC / 4) * CP + (e % (DC / 4)) * 4) = kn[u];
            }
            FA_SYNC();
#pragma unroll
            for (int c = 0; c < DC; c += 4) {
                float4 a[TM], bk[TN];
#pragma unroll
                for (int r = 0; r < TM; ++r)
                    a[r] = *reinterpret_cast<const float4 *>(q_l + (ty * TM + r) * CP + c);
#pragma unroll
                for (int j = 0; j < TN; ++j)
                    bk[j] = *reinterpret_cast<const float4 *>(k_l + (tx + TX * j) * CP + c);
#pragma unroll
                for (int r = 0; r < TM; ++r)
#pragma unroll
                    for (int j = 0; j < TN; ++j) {
                        float x = fmaf(a[r].x, bk[j].x, s[r][j]);
                        x = fmaf(a[r].y, bk[j].y, x);
                        x = fmaf(a[r].z, bk[j].z, x);
                        s[r][j] = fmaf(a[r].w, bk[j].w, x);
                    }
            }
        }

        /* the score modifier, the mask, and each row's maximum over this thread's keys; region P
         * is free: the last S pass began with a barrier after every read of the previous tile's P^T */
#pragma unroll
        for (int r = 0; r < TM; ++r) {
            const int rr = ty * TM + r;
            const int jlo = range_l[2 * rr] - k0, jhi0 = range_l[2 * rr + 1] - k0;
            const int jhi = jhi0 < nc ? jhi0 : nc;
            float mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < TN; ++j) {
                const int jj = tx + TX * j;
                if constexpr (MOD) {
                    float grad;
                    s[r][j] = fa_score_mod_apply_at(&mod, s[r][j], q0 + rr, k0l + jj, &grad) * p.scale_log2;
                }
                bool vis = jj >= jlo && jj < jhi;
                if (vis && cls == FA_TILE_PARTIAL && p.bm_bits)
                    vis = block_keep(p, h, q0 + rr, k0 + jj);
                s[r][j] = vis ? s[r][j] : -INFINITY;
                mx = fmaxf(mx, s[r][j]);
            }
            p_l[rr * TX + tx] = mx;
        }
        FA_SYNC();
        /* core/softmax.h's update, on every thread of a row alike (same inputs, same bits): the
         * -inf guards and the exact 1 for an unchanged maximum; exp2 on log2-scaled scores */
#pragma unroll
        for (int r = 0; r < TM; ++r) {
            const int rr = ty * TM + r;
            float tile_max = -INFINITY;
#pragma unroll
            for (int x = 0; x < TX; x += 4) {
                const float4 t4 = *reinterpret_cast<const float4 *>(p_l + rr * TX + x);
                tile_max = fmaxf(tile_max, fmaxf(fmaxf(t4.x, t4.y), fmaxf(t4.z, t4.w)));
            }
            const float m_old = row_max[r], m_new = fmaxf(m_old, tile_max);
            const float alpha = m_old == -INFINITY ? 0.0f : m_new == m_old ? 1.0f : exp2f(m_old - m_new);
            const float shift = m_new == -INFINITY ? 0.0f : m_new;
            row_max[r] = m_new;
            float sum = 0.0f;
#pragma unroll
            for (int j = 0; j < TN; ++j) {
                s[r][j] = exp2f(s[r][j] - shift);
                sum += s[r][j];
            }
            row_sum[r] = row_sum[r] * alpha + sum;
            if (p.dropout_threshold) { /* keys TX apart: each takes 16 bits of its own Philox block */
#pragma unroll
                for (int j = 0; j < TN; ++j)
                    if (s[r][j] != 0.0f)
                        s[r][j] *= drop_factor(p, b, h, q0 + rr, k0 + tx + TX * j);
            }
            if (alpha != 1.0f) {
#pragma unroll
                for (int g = 0; g < G; ++g) {
                    acc[r][g].x *= alpha;
                    acc[r][g].y *= alpha;
                    acc[r][g].z *= alpha;
                    acc[r][g].w *= alpha;
                }
            }
        }
        FA_SYNC(); /* the maxima are read before P^T overwrites them */
#pragma unroll
        for (int j = 0; j < TN; ++j)
            *reinterpret_cast<float4 *>(p_l + (tx + TX * j) * QP + ty * TM) =
                make_float4(s[0][j], s[1][j], s[2][j], s[3][j]);

        /* O += P V, VC columns of V at a time; chunks past V's head dim are skipped (uniform) */
#pragma unroll
        for (int g = 0; g < G; ++g) {
            if (g * VC < dv) {
                float4 vn[NV];
#pragma unroll
                for (int u = 0; u < NV; ++u) {
                    const int e = tid + u * THREADS, j = e / (VC / 4), col = g * VC + (e % (VC / 4)) * 4;
                    vn[u] = j < nc && col < dv ? load4<S>(vp, (int64_t)(k0 + j) * p.v.ss + col, dv - col, vec)
                                               : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                }
                /* region A: the S passes' last reads (g = 0) or the previous chunk's are done */
                FA_SYNC();
#pragma unroll
                for (int u = 0; u < NV; ++u)
                    *reinterpret_cast<float4 *>(v_l + (tid + u * THREADS) * 4) = vn[u];
                FA_SYNC(); /* also publishes P^T */
#pragma unroll 4
                for (int j = 0; j < BN; ++j) {
                    const float4 pj = *reinterpret_cast<const float4 *>(p_l + j * QP + ty * TM);
                    const float4 vx = *reinterpret_cast<const float4 *>(v_l + j * VC + 4 * tx);
                    const float pr[TM] = {pj.x, pj.y, pj.z, pj.w};
#pragma unroll
                    for (int r = 0; r < TM; ++r) {
                        acc[r][g].x = fmaf(pr[r], vx.x, acc[r][g].x);
                        acc[r][g].y = fmaf(pr[r], vx.y, acc[r][g].y);
                        acc[r][g].z = fmaf(pr[r], vx.z, acc[r][g].z);
                        acc[r][g].w = fmaf(pr[r], vx.w, acc[r][g].w);
                    }
                }
            }
        }
    }

    /* the row sums, added over the TX threads of each row in a fixed order */
    FA_SYNC();
#pragma unroll
    for (int r = 0; r < TM; ++r)
        p_l[(ty * TM + r) * TX + tx] = row_sum[r];
    FA_SYNC();
    typedef typename S::T TO;
    TO *const op = static_cast<TO *>(p.o.data);
#pragma unroll
    for (int r = 0; r < TM; ++r) {
        const int rr = ty * TM + r;
        float l = 0.0f;
        for (int x = 0; x < TX; ++x)
            l += p_l[rr * TX + x];
        if (rr >= nr)
            continue;
        /* the row's LSE over its keys; with a sink, the LSE over the keys and the sink, and O
         * scaled by exp(LSE0 - LSE) (0 for a row that saw no key) */
        const float lse0 =
            l == 0.0f ? -INFINITY : row_max[r] * 0.69314718055994531f + logf(l); /* NaN l: NaN */
        const float lse = p.sink ? fa_sink_lse(lse0, p.sink[h]) : lse0;
        float inv = l == 0.0f ? 0.0f : 1.0f / l;
        if (p.sink)
            inv *= fa_sink_factor(lse0, lse);
        const int64_t at = offset_of(p.o, b, sqi.q_start + q0 + rr, h);
#pragma unroll
        for (int g = 0; g < G; ++g) {
            const int col = 4 * tx + OW * g;
            if (col < dv)
                store4<S>(op, at + col, dv - col,
                          make_float4(fa_row_output(acc[r][g].x, inv), fa_row_output(acc[r][g].y, inv),
                                      fa_row_output(acc[r][g].z, inv), fa_row_output(acc[r][g].w, inv)),
                          vec);
        }
        if (tx == 0 && p.lse.data)
            static_cast<float *>(p.lse.data)[offset_of(p.lse, b, sqi.q_start + q0 + rr, h)] = lse;
    }
}

#if !defined(__CUDACC_RTC__) && !defined(__HIPCC_RTC__) /* host code: NVRTC and hipRTC compile the kernels alone */
/* The geometry (common/simt_geometry.h) is the driver-API launcher's too (host/rtc_launch.c). */
template <class S, int D> fa_gpu_error launch_forward(const fa_gpu_params &p, fa_gpu_stream stream)
{
    const int64_t nq = fa_simt_query_tiles(p.seqlen_q);
    if (nq == 0 || p.batch == 0)
        return FA_GPU_SUCCESS;
    if (!grid_ok(nq, p.heads_q, p.batch))
        return FA_GPU_INVALID_VALUE;
    const bool vec = view_vec4<S>(p.q) && view_vec4<S>(p.k) && view_vec4<S>(p.v) && view_vec4<S>(p.o);
    const dim3 grid((unsigned)nq, (unsigned)p.heads_q, (unsigned)p.batch);
    if (fa_gpu_has_score_mod(p))
        forward_kernel<S, D, true><<<grid, THREADS, 0, stream>>>(p, vec);
    else
        forward_kernel<S, D, false><<<grid, THREADS, 0, stream>>>(p, vec);
    return fa_gpu_last_error();
}
#endif

} // namespace fa_gpu::simt

#endif /* FA_PORTABLE_FORWARD_CUH */
