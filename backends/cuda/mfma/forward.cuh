/* forward.cuh: the matrix-core forward for CDNA (gfx90a, gfx94x), fp16 and bf16, head dims up to
 * 128, every option of the API (causal, window, varlen, GQA, dropout, block-sparse, LSE, strides,
 * softcap and ALiBi).
 * One 64-lane wavefront per block owns 32 query rows and walks the key tiles 32 keys at a time,
 * with no shared memory and no barriers:
 *   S^T (32 keys x 32 queries) = K Q^T   in D/8 mma32 steps, Q's fragments kept in registers;
 *   O^T (D x 32 queries)      += V^T P^T in 4 steps per 32 output dims.
 * Computing the transposes makes each lane own one query (column l % 32) and 16 of its keys, the
 * other 16 in lane l ^ 32: row maxima and sums take one xor32, and P's accumulator registers are
 * already in the B-operand layout of the second product (registers 4c..4c+3 hold keys
 * 8c + 4 (l / 32) + 0..3), so P never leaves the registers. Softmax follows core/softmax.h (exp2
 * of log2-scaled scores, the -inf guards, an unchanged maximum rescales by exactly 1); masks,
 * dropout and the block-sparse walk are the SIMT kernels' (common/portable.cuh). */
#ifndef FA_HIP_MFMA_FORWARD_CUH
#define FA_HIP_MFMA_FORWARD_CUH

#include "common/portable.cuh"
#include "mfma/mfma.cuh"

namespace fa_gpu::mfma {

namespace pk = fa_gpu;

constexpr int ROWS = FA_MFMA_ROWS; /* query rows per wavefront (block): common/mfma_geometry.h */
constexpr int KC = FA_MFMA_KEYS;   /* keys per step */

/* four 16-bit words of row `row` from column c (zero past n valid columns); vec: 8-byte aligned */
template <class S>
FA_DEVICE void load_bits4(const unsigned short *p, int64_t i, int n, bool vec, unsigned short (&out)[4])
{
    if (vec && n >= 4) {
        const uint2 u = *reinterpret_cast<const uint2 *>(p + i);
        out[0] = (unsigned short)(u.x & 0xffffu);
        out[1] = (unsigned short)(u.x >> 16);
        out[2] = (unsigned short)(u.y & 0xffffu);
        out[3] = (unsigned short)(u.y >> 16);
        return;
    }
#pragma unroll
    for (int e = 0; e < 4; ++e)
        out[e] = e < n ? p[i + e] : (unsigned short)0;
}

template <class S> FA_DEVICE unsigned short to_bits(float x)
{
    unsigned short u;
    S::store(&u, 0, x);
    return u;
}

/* MOD: the call has a score modifier, applied to the raw q . k products before the scale */
template <class S, int D, bool MOD>
__global__ void FA_LAUNCH_BOUNDS(WAVE) forward_kernel(const fa_gpu_params p, const bool vec)
{
    typedef unsigned short T;
    constexpr bool BF16 = S::bf16;
    constexpr int KS = D / 8;  /* k-steps of S^T = K Q^T */
    constexpr int OB = D / 32; /* 32-dim blocks of O^T */
#if defined(__CUDACC__) && !defined(__HIPCC__)
    __shared__ scratch sc;
#else
    scratch sc;
#endif
    const int l = lane_id(), col = l % 32, half = l / 32;
    const int64_t h = blockIdx.y, b = blockIdx.z;
    const fa_seq sq = fa_sequence(p, b);
    const int64_t q0 = (int64_t)blockIdx.x * ROWS;
    if (q0 >= sq.sq) /* uniform */
        return;
    const int nr = (int)(sq.sq - q0 < ROWS ? sq.sq - q0 : ROWS);
    const int d = (int)p.d;
    const int64_t hk = h / p.group, i = q0 + col; /* this lane's query row */
    const bool row_ok = col < nr;
    const fa_mask m = fa_mask_make(sq.sq, sq.sk, p.causal, p.window_left, p.window_right);
    int64_t lo = 0, hi = 0;
    if (row_ok)
        fa_mask_row_range(&m, i, &lo, &hi);
    const T *const kp = static_cast<const T *>(p.k.data) + pk::offset_of(p.k, b, sq.k_start, hk);
    const T *const vp = static_cast<const T *>(p.v.data) + pk::offset_of(p.v, b, sq.k_start, hk);

    /* Q^T's B-operand fragments: Q[i][8 t + 4 half + 0..3] */
    unsigned short qf[KS][4];
    {
        const T *const qp = static_cast<const T *>(p.q.data) + (row_ok ? pk::offset_of(p.q, b, sq.q_start + i, h) : 0);
#pragma unroll
        for (int t = 0; t < KS; ++t) {
            const int c = 8 * t + 4 * half;
            load_bits4<S>(qp, c, row_ok ? d - c : 0, vec, qf[t]);
        }
    }
    float o[OB][16];
#pragma unroll
    for (int ob = 0; ob < OB; ++ob)
#pragma unroll
        for (int r = 0; r < 16; ++r)
            o[ob][r] = 0.0f;
    float row_max = -INFINITY, part_sum = 0.0f; /* part_sum: this lane's 16 keys of each step */
    const fa_score_mod_state mod = MOD ? fa_gpu_score_mod(p, sq, b, h) : fa_score_mod_state{};

    const pk::key_walk walk = pk::walk_of(p, m, h, q0 / pk::BM, q0, nr, sq.sk);
    for (int64_t it = walk.begin; it < walk.end; ++it) {
        int lcls;
        const int64_t kt = pk::walk_tile(p, walk, it, &lcls);
        for (int64_t k0 = kt * pk::BN; k0 < kt * pk::BN + pk::BN && k0 < sq.sk; k0 += KC) {
            const int cls = pk::meet(fa_mask_classify_tile(&m, q0, q0 + ROWS, k0, k0 + KC), lcls);
            if (cls == FA_TILE_EMPTY) /* uniform */
                continue;
            const int nc = (int)(sq.sk - k0 < KC ? sq.sk - k0 : KC);

            /* S^T = K Q^T: lane l's A operand is K[k0 + col][8 t + 4 half + 0..3] */
            float s[16];
#pragma unroll
            for (int r = 0; r < 16; ++r)
                s[r] = 0.0f;
            const bool key_ok = col < nc;
#pragma unroll
            for (int t = 0; t < KS; ++t) {
                const int c = 8 * t + 4 * half;
                unsigned short kf[4];
                load_bits4<S>(kp, (key_ok ? (int64_t)(k0 + col) * p.k.ss : 0) + c, key_ok ? d - c : 0, vec, kf);
                mma32<BF16>(sc, kf, qf[t], s);
            }

            /* the score modifier, the mask, the scale; register r holds key k0 + 8 (r / 4) +
             * 4 half + r % 4 of query i */
            float mx = -INFINITY;
#pragma unroll
            for (int r = 0; r < 16; ++r) {
                const int64_t j = k0 + 8 * (r / 4) + 4 * half + r % 4;
                if constexpr (MOD) {
                    float grad;
                    s[r] = fa_score_mod_apply_at(&mod, s[r], i, j, &grad);
                }
                bool vis = j >= lo && j < hi && j < sq.sk;
                if (vis && cls == FA_TILE_PARTIAL && p.bm_bits)
                    vis = pk::block_keep(p, h, i, j);
                s[r] = vis ? s[r] * p.scale_log2 : -INFINITY;
                mx = fmaxf(mx, s[r]);
            }
            mx = fmaxf(mx, xor32(sc, mx));
            const float m_new = fmaxf(row_max, mx);
            const float alpha = row_max == -INFINITY ? 0.0f : m_new == row_max ? 1.0f : exp2f(row_max - m_new);
            const float shift = m_new == -INFINITY ? 0.0f : m_new;
            row_max = m_new;
            float sum = 0.0f;
#pragma unroll
            for (int r = 0; r < 16; ++r) {
                s[r] = exp2f(s[r] - shift);
                sum += s[r];
            }
            part_sum = part_sum * alpha + sum;
            if (p.dropout_threshold) {
#pragma unroll
                for (int r = 0; r < 16; ++r)
                    if (s[r] != 0.0f)
                        s[r] *= pk::drop_factor(p, b, h, i, k0 + 8 * (r / 4) + 4 * half + r % 4);
            }
            if (alpha != 1.0f) {
#pragma unroll
                for (int ob = 0; ob < OB; ++ob)
#pragma unroll
                    for (int r = 0; r < 16; ++r)
                        o[ob][r] *= alpha;
            }

            /* O^T += V^T P^T: step c covers keys k0 + 8 c + 0..7; lane l's B operand is P's
             * registers 4 c .. 4 c + 3, its A operand V[k0 + 8 c + 4 half + 0..3][32 ob + col] */
#pragma unroll
            for (int c = 0; c < 4; ++c) {
                unsigned short pf[4];
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    pf[e] = to_bits<S>(s[4 * c + e]);
#pragma unroll
                for (int ob = 0; ob < OB; ++ob) {
                    const int dim = 32 * ob + col;
                    unsigned short vf[4];
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int jj = 8 * c + 4 * half + e;
                        vf[e] = jj < nc && dim < d ? vp[(int64_t)(k0 + jj) * p.v.ss + dim] : (unsigned short)0;
                    }
                    mma32<BF16>(sc, vf, pf, o[ob]);
                }
            }
        }
    }

    /* the row sum of both halves (the same two values added on both lanes: the same bits) */
    const float l_sum = part_sum + xor32(sc, part_sum);
    if (!row_ok)
        return;
    const float inv = l_sum == 0.0f ? 0.0f : 1.0f / l_sum;
    T *const op = static_cast<T *>(p.o.data) + pk::offset_of(p.o, b, sq.q_start + i, h);
    /* register r of block ob holds O[i][32 ob + 8 (r / 4) + 4 half + r % 4]: four adjacent columns */
#pragma unroll
    for (int ob = 0; ob < OB; ++ob)
#pragma unroll
        for (int g = 0; g < 4; ++g) {
            const int c0 = 32 * ob + 8 * g + 4 * half;
            if (c0 < d)
                pk::store4<S>(op, c0, d - c0,
                              make_float4(fa_row_output(o[ob][4 * g], inv), fa_row_output(o[ob][4 * g + 1], inv),
                                          fa_row_output(o[ob][4 * g + 2], inv), fa_row_output(o[ob][4 * g + 3], inv)),
                              vec);
        }
    if (half == 0 && p.lse.data)
        static_cast<float *>(p.lse.data)[pk::offset_of(p.lse, b, sq.q_start + i, h)] =
            l_sum == 0.0f ? -INFINITY : row_max * 0.69314718055994531f + logf(l_sum); /* NaN l_sum: NaN */
}

#if !defined(__HIPCC_RTC__) /* host code: hipRTC compiles the kernel alone */
template <class S, int D> fa_gpu_error launch_forward(const fa_gpu_params &p, fa_gpu_stream stream)
{
    const int64_t nq = (p.seqlen_q + ROWS - 1) / ROWS;
    if (nq == 0 || p.batch == 0)
        return FA_GPU_SUCCESS;
    if (!pk::grid_ok(nq, p.heads_q, p.batch))
        return FA_GPU_INVALID_VALUE;
    const bool vec = pk::view_vec4<S>(p.q) && pk::view_vec4<S>(p.k) && pk::view_vec4<S>(p.v) && pk::view_vec4<S>(p.o);
    const dim3 grid((unsigned)nq, (unsigned)p.heads_q, (unsigned)p.batch);
    if (fa_gpu_has_score_mod(p))
        forward_kernel<S, D, true><<<grid, WAVE, 0, stream>>>(p, vec);
    else
        forward_kernel<S, D, false><<<grid, WAVE, 0, stream>>>(p, vec);
    return fa_gpu_last_error();
}
#endif /* !__HIPCC_RTC__ */

} // namespace fa_gpu::mfma

#endif /* FA_HIP_MFMA_FORWARD_CUH */
