/* kernels.cuh: the portable SIMT kernel family, written once for CUDA and HIP (vendor.h maps the
 * names): plain fp32 FMAs, no tensor cores, so it runs on any NVIDIA GPU (sm_50+) and on AMD.
 * Forward: forward.cl's design, one block of 256 threads per (64-row query tile, head, batch),
 * a 16 x 16 grid of threads each owning a 4 x 4 block of the 64 x 64 score tile and the matching
 * rows of O; Q and K pass through shared memory 32 head-dim columns at a time, V 64 at a time.
 * Backward: backward.cl's structure without atomics (bitwise reproducible): D = rowsum(dO o O),
 * then dK/dV per key tile and dQ per query tile, each key (query) row spread over D/16 adjacent
 * threads that hold 16 of its columns and add their partial dot products with xor shuffles. */
#ifndef FA_PORTABLE_KERNELS_CUH
#define FA_PORTABLE_KERNELS_CUH

#include "vendor.h"

#include "empty_row.h"
#include "mask.h"
#include "params.h"
#include "philox.h"

#include <stdint.h>

namespace FA_PORTABLE_NS {

/* Query and key tiles: the granularity at which the core builds block-sparse lists for the CUDA
 * backend (cuda_tile_limits), so a tile's list entry is found directly. */
constexpr int BM = 64, BN = 64, THREADS = 256;
static_assert(BM == FA_SM80_BLOCK && BN == FA_SM80_BLOCK, "tiles must match the core's block lists");

/* ---------------------------------------------------------------- storage types */

struct store_f32 {
    typedef float T;
    static constexpr bool bf16 = false;
    static FA_DEVICE float load(const T *p, int64_t i) { return p[i]; }
    static FA_DEVICE void store(T *p, int64_t i, float x) { p[i] = x; }
    static FA_DEVICE float4 load4v(const T *p, int64_t i) { return *reinterpret_cast<const float4 *>(p + i); }
    static FA_DEVICE void store4v(T *p, int64_t i, float4 x) { *reinterpret_cast<float4 *>(p + i) = x; }
};

struct store_f16 {
    typedef unsigned short T;
    static constexpr bool bf16 = false;
    static FA_DEVICE float load(const T *p, int64_t i) { return fa_f16_bits_to_float(p[i]); }
    static FA_DEVICE void store(T *p, int64_t i, float x) { p[i] = fa_float_to_f16_bits(x); }
    static FA_DEVICE float4 load4v(const T *p, int64_t i)
    {
        const uint2 u = *reinterpret_cast<const uint2 *>(p + i);
        return make_float4(fa_f16_bits_to_float((unsigned short)(u.x & 0xffffu)),
                           fa_f16_bits_to_float((unsigned short)(u.x >> 16)),
                           fa_f16_bits_to_float((unsigned short)(u.y & 0xffffu)),
                           fa_f16_bits_to_float((unsigned short)(u.y >> 16)));
    }
    static FA_DEVICE void store4v(T *p, int64_t i, float4 x)
    {
        uint2 u;
        u.x = (unsigned)fa_float_to_f16_bits(x.x) | ((unsigned)fa_float_to_f16_bits(x.y) << 16);
        u.y = (unsigned)fa_float_to_f16_bits(x.z) | ((unsigned)fa_float_to_f16_bits(x.w) << 16);
        *reinterpret_cast<uint2 *>(p + i) = u;
    }
};

struct store_bf16 {
    typedef unsigned short T;
    static constexpr bool bf16 = true;
    static FA_DEVICE float load(const T *p, int64_t i) { return fa_bf16_bits_to_float(p[i]); }
    static FA_DEVICE void store(T *p, int64_t i, float x) { p[i] = fa_float_to_bf16_bits(x); }
    static FA_DEVICE float4 load4v(const T *p, int64_t i)
    {
        const uint2 u = *reinterpret_cast<const uint2 *>(p + i);
        return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u),
                           __uint_as_float(u.y << 16), __uint_as_float(u.y & 0xffff0000u));
    }
    static FA_DEVICE void store4v(T *p, int64_t i, float4 x)
    {
        uint2 u;
        u.x = (unsigned)fa_float_to_bf16_bits(x.x) | ((unsigned)fa_float_to_bf16_bits(x.y) << 16);
        u.y = (unsigned)fa_float_to_bf16_bits(x.z) | ((unsigned)fa_float_to_bf16_bits(x.w) << 16);
        *reinterpret_cast<uint2 *>(p + i) = u;
    }
};

/* Four elements from index i, widened; only the first n (< 4 at a row's end) are read, the rest
 * are 0. vec: the launcher checked that every row start and the data pointer are aligned to four
 * elements (and i is a multiple of 4 at every call), so one vector load does. */
template <class S> FA_DEVICE float4 load4(const typename S::T *p, int64_t i, int n, bool vec)
{
    if (vec && n >= 4)
        return S::load4v(p, i);
    float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    x.x = n > 0 ? S::load(p, i) : 0.0f;
    x.y = n > 1 ? S::load(p, i + 1) : 0.0f;
    x.z = n > 2 ? S::load(p, i + 2) : 0.0f;
    x.w = n > 3 ? S::load(p, i + 3) : 0.0f;
    return x;
}

template <class S> FA_DEVICE void store4(typename S::T *p, int64_t i, int n, float4 x, bool vec)
{
    if (vec && n >= 4) {
        S::store4v(p, i, x);
        return;
    }
    if (n > 0)
        S::store(p, i, x.x);
    if (n > 1)
        S::store(p, i + 1, x.y);
    if (n > 2)
        S::store(p, i + 2, x.z);
    if (n > 3)
        S::store(p, i + 3, x.w);
}

/* ---------------------------------------------------------------- problem helpers */

/* Element offset of (batch b, packed row, head h, column 0): fa_view's form (core/internal.h). */
FA_DEVICE int64_t offset_of(const fa_cuda_tensor &t, int64_t b, int64_t row, int64_t h)
{
    return b * t.sb + row * t.ss + h * t.sh;
}

/* The block-mask bit of query head h's local element (i, j) (fa_problem_block_keep). */
FA_DEVICE bool block_keep(const fa_cuda_params &p, int64_t h, int64_t i, int64_t j)
{
    const int64_t mh = p.bm_heads == 1 ? 0 : h;
    return p.bm_bits[(mh * p.bm_rows + i / p.bm_bq) * p.bm_cols + j / p.bm_bk] != 0;
}

/* Class of (64-row query tile qt, 64-key tile kt) in the core's list of query head h: EMPTY when
 * the list has no entry (binary search: a row's columns ascend). */
FA_DEVICE int list_class(const fa_cuda_params &p, int64_t h, int64_t qt, int64_t kt)
{
    const int64_t lh = p.bl_heads == 1 ? 0 : h;
    int64_t lo = p.bl_row_ptr[lh * p.bl_nq + qt];
    const int64_t end = p.bl_row_ptr[lh * p.bl_nq + qt + 1];
    int64_t hi = end;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (p.bl_col[mid] < kt)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < end && p.bl_col[lo] == kt ? (int)p.bl_cls[lo] : (int)FA_TILE_EMPTY;
}

/* The 64-key tiles that query rows [q0, q0 + nr) visit (rows inside one 64-row list tile qt):
 * the core's list for block-sparse masks, else the tiles between the first row's first visible
 * key and the last row's last (both ends are monotone in the row). */
struct key_walk {
    int64_t begin, end, base;
    bool list;
};

FA_DEVICE key_walk walk_of(const fa_cuda_params &p, const fa_mask &m, int64_t h, int64_t qt, int64_t q0,
                           int64_t nr, int64_t sk)
{
    key_walk w;
    w.list = p.bl_row_ptr != nullptr;
    w.base = 0;
    if (w.list) {
        const int64_t lh = p.bl_heads == 1 ? 0 : h;
        w.begin = p.bl_row_ptr[lh * p.bl_nq + qt];
        w.end = p.bl_row_ptr[lh * p.bl_nq + qt + 1];
    } else {
        int64_t first_lo, first_hi, last_lo, last_hi;
        fa_mask_row_range(&m, q0, &first_lo, &first_hi);
        fa_mask_row_range(&m, q0 + nr - 1, &last_lo, &last_hi);
        const int64_t nk = (sk + BN - 1) / BN, stop = (last_hi + BN - 1) / BN;
        w.base = first_lo / BN;
        w.begin = 0;
        w.end = last_hi <= first_lo ? 0 : (stop < nk ? stop : nk) - w.base;
    }
    return w;
}

/* Step it of a walk: the key tile's index and its class from the list (FULL without a list). */
FA_DEVICE int64_t walk_tile(const fa_cuda_params &p, const key_walk &w, int64_t it, int *list_cls)
{
    if (w.list) {
        *list_cls = (int)p.bl_cls[it];
        return p.bl_col[it];
    }
    *list_cls = (int)FA_TILE_FULL;
    return w.base + it;
}

FA_DEVICE int meet(int a, int b)
{
    return (int)fa_tile_class_meet((fa_tile_class)a, (fa_tile_class)b);
}

/* The dropout factor of element (b, h, i, j): 0 or 1/(1-p), from its Philox block's word. */
FA_DEVICE float drop_factor(const fa_cuda_params &p, int64_t b, int64_t h, int64_t i, int64_t j)
{
    const fa_philox4 bits = fa_dropout_block(p.seed, p.offset, (fa_u64)b, (fa_u64)p.heads_q, (fa_u64)h, (fa_u64)i,
                                             (fa_u64)(j & ~(int64_t)3));
    /* the word by selects, not by a dynamic index (which would put the block in local memory) */
    const unsigned t = (unsigned)j & 3u;
    const fa_u32 word = t == 0 ? bits.v[0] : t == 1 ? bits.v[1] : t == 2 ? bits.v[2] : bits.v[3];
    return word >= p.dropout_threshold ? p.dropout_scale : 0.0f;
}

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

/* D: the head-dim bucket (64, 128, 256); p.d <= D columns are real. */
template <class S, int D> __global__ void FA_LAUNCH_BOUNDS(THREADS) forward_kernel(const fa_cuda_params p, const bool vec)
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
    const int d = (int)p.d;
    const int64_t hk = h / p.group;
    const fa_mask m = fa_mask_make(sqi.sq, sqi.sk, p.causal, p.window_left, p.window_right);
    const float qscale = p.scale_log2;
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

    const key_walk walk = walk_of(p, m, h, qtile, q0, nr, sqi.sk);
    for (int64_t it = walk.begin; it < walk.end; ++it) {
        int lcls;
        const int64_t kt = walk_tile(p, walk, it, &lcls);
        const int64_t k0l = kt * BN;
        const int cls = meet(fa_mask_classify_tile(&m, q0, q0 + BM, k0l, k0l + BN), lcls);
        if (cls == FA_TILE_EMPTY) /* uniform: depends on the block's tiles only */
            continue;
        const int k0 = (int)k0l, nc = (int)(sqi.sk - k0l < BN ? sqi.sk - k0l : BN);

        /* S = (scale log2 e) Q K^T, DC columns at a time; consecutive threads load consecutive
         * float4 of a row (coalesced), the pitch CP spreads a warp's float4 stores over banks */
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

        /* the mask, and each row's maximum over this thread's keys; region P is free: the last
         * S pass began with a barrier after every read of the previous tile's P^T */
#pragma unroll
        for (int r = 0; r < TM; ++r) {
            const int rr = ty * TM + r;
            const int jlo = range_l[2 * rr] - k0, jhi0 = range_l[2 * rr + 1] - k0;
            const int jhi = jhi0 < nc ? jhi0 : nc;
            float mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < TN; ++j) {
                const int jj = tx + TX * j;
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
            if (p.dropout_threshold) { /* keys TX apart: each takes a word of its own Philox block */
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

        /* O += P V, VC columns of V at a time; chunks past the head dim are skipped (uniform) */
#pragma unroll
        for (int g = 0; g < G; ++g) {
            if (g * VC < d) {
                float4 vn[NV];
#pragma unroll
                for (int u = 0; u < NV; ++u) {
                    const int e = tid + u * THREADS, j = e / (VC / 4), col = g * VC + (e % (VC / 4)) * 4;
                    vn[u] = j < nc && col < d ? load4<S>(vp, (int64_t)(k0 + j) * p.v.ss + col, d - col, vec)
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
        const float inv = l == 0.0f ? 0.0f : 1.0f / l;
        const int64_t at = offset_of(p.o, b, sqi.q_start + q0 + rr, h);
#pragma unroll
        for (int g = 0; g < G; ++g) {
            const int col = 4 * tx + OW * g;
            if (col < d)
                store4<S>(op, at + col, d - col,
                          make_float4(fa_row_output(acc[r][g].x, inv), fa_row_output(acc[r][g].y, inv),
                                      fa_row_output(acc[r][g].z, inv), fa_row_output(acc[r][g].w, inv)),
                          vec);
        }
        if (tx == 0 && p.lse.data)
            static_cast<float *>(p.lse.data)[offset_of(p.lse, b, sqi.q_start + q0 + rr, h)] =
                (l == 0.0f || row_max[r] == -INFINITY) ? -INFINITY : row_max[r] * 0.69314718055994531f + logf(l);
    }
}

/* ---------------------------------------------------------------- backward */

/* D = rowsum(dO o O) of every query row, to p.dsum[h][row] (row: the packed row, or b seqlen_q + i
 * for dense tensors). One thread per row. */
template <class S> __global__ void FA_LAUNCH_BOUNDS(THREADS) dsum_kernel(const fa_cuda_params p)
{
    typedef typename S::T T;
    const int64_t i = (int64_t)blockIdx.x * THREADS + threadIdx.x, h = blockIdx.y, b = blockIdx.z;
    const fa_seq sqi = fa_sequence(p, b);
    if (i >= sqi.sq)
        return;
    const T *const op = static_cast<const T *>(p.o.data) + offset_of(p.o, b, sqi.q_start + i, h);
    const T *const dp = static_cast<const T *>(p.dout.data) + offset_of(p.dout, b, sqi.q_start + i, h);
    float acc = 0.0f;
    for (int64_t c = 0; c < p.d; ++c)
        acc = fmaf(S::load(op, c), S::load(dp, c), acc);
    const int64_t row = p.cu_q ? sqi.q_start + i : b * p.seqlen_q + i;
    p.dsum[h * p.total_q + row] = acc;
}

/* The backward's decomposition for head-dim bucket D: TPK adjacent threads share one key (dK/dV)
 * or one query row (dQ), each holding CPT = 16 of its columns (c = lane + TPK u: adjacent threads
 * read adjacent shared-memory words); the streamed Q, dO (or K, V) tiles of STEP rows take 32 KiB
 * of shared memory. Keys per dK/dV block and rows per dQ block: THREADS / TPK, a divisor of 64 so
 * a block lies inside one tile of the core's block lists. */
template <int D> struct bwd_shape {
    static constexpr int CPT = 16;
    static constexpr int TPK = D / CPT;
    static constexpr int ROWS = THREADS / TPK; /* keys (dK/dV) or query rows (dQ) per block */
    static constexpr int STEP = 4096 / D;      /* streamed rows per shared-memory tile */
    static_assert(D % CPT == 0 && TPK >= 1 && (TPK & (TPK - 1)) == 0 && TPK <= FA_WARP_SIZE && ROWS <= 64 &&
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

/* Rows [r0, r0 + STEP) of head hd of two tensors with the same shape (Q and dO, or K and V) into
 * shared tiles [STEP][D], widened; rows >= n and columns >= d are 0. Every thread of the block
 * takes part (the caller's barriers bracket it). */
template <class S, int D, int STEP>
FA_DEVICE void load_tile_pair(const fa_cuda_params &p, const fa_cuda_tensor &ta, const fa_cuda_tensor &tb, int64_t b,
                              int64_t r0, int n, int64_t hd, float *a_t, float *b_t)
{
    typedef typename S::T T;
    const int d = (int)p.d;
    for (int e = (int)threadIdx.x; e < STEP * D; e += THREADS) {
        const int r = e / D, c = e - r * D;
        float ax = 0.0f, bx = 0.0f;
        if (r < n && c < d) {
            ax = S::load(static_cast<const T *>(ta.data), offset_of(ta, b, r0 + r, hd) + c);
            bx = S::load(static_cast<const T *>(tb.data), offset_of(tb, b, r0 + r, hd) + c);
        }
        a_t[e] = ax;
        b_t[e] = bx;
    }
}

/* This thread's CPT columns (lane + TPK u) of row `row` of head hd of two tensors (K and V, or Q
 * and dO) into registers; 0 for an invalid row and past d. */
template <class S, int CPT, int TPK>
FA_DEVICE void load_row_pair(const fa_cuda_params &p, const fa_cuda_tensor &ta, const fa_cuda_tensor &tb, int64_t b,
                             int64_t row, int64_t hd, bool valid, int lane, float *ar, float *br)
{
    typedef typename S::T T;
    const int d = (int)p.d;
    const T *const ap = static_cast<const T *>(ta.data) + (valid ? offset_of(ta, b, row, hd) : 0);
    const T *const bp = static_cast<const T *>(tb.data) + (valid ? offset_of(tb, b, row, hd) : 0);
#pragma unroll
    for (int u = 0; u < CPT; ++u) {
        const int c = lane + TPK * u;
        ar[u] = valid && c < d ? S::load(ap, c) : 0.0f;
        br[u] = valid && c < d ? S::load(bp, c) : 0.0f;
    }
}

/* dK, dV for ROWS keys of kv head hk: the query heads of the GQA group in order, each query tile
 * in order (the same sums on every run). */
template <class S, int D> __global__ void FA_LAUNCH_BOUNDS(THREADS) dkdv_kernel(const fa_cuda_params p)
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
    const int d = (int)p.d;
    const fa_mask m = fa_mask_make(sqi.sq, sqi.sk, p.causal, p.window_left, p.window_right);
    const int64_t row0 = p.cu_q ? sqi.q_start : b * p.seqlen_q; /* D's row of query 0 */

    float kr[CPT], vr[CPT], dkr[CPT], dvr[CPT];
    load_row_pair<S, CPT, TPK>(p, p.k, p.v, b, sqi.k_start + j, hk, valid, lane, kr, vr);
#pragma unroll
    for (int u = 0; u < CPT; ++u) {
        dkr[u] = 0.0f;
        dvr[u] = 0.0f;
    }
    const int64_t nsteps = (sqi.sq + STEP - 1) / STEP;
    /* no query rows (nsteps = 0): dK = dV = 0 without walking the group's heads */
    for (int64_t h = hk * p.group; nsteps > 0 && h < (hk + 1) * p.group; ++h) {
        for (int64_t qi = 0; qi < nsteps; ++qi) {
            const int64_t q0 = qi * STEP;
            int cls = (int)fa_mask_classify_tile(&m, q0, q0 + STEP, k0, k0 + sh::ROWS);
            if (cls != FA_TILE_EMPTY && p.bl_row_ptr)
                cls = meet(cls, list_class(p, h, q0 / BM, kt));
            if (cls == FA_TILE_EMPTY) /* uniform */
                continue;
            const int nr = (int)(sqi.sq - q0 < STEP ? sqi.sq - q0 : STEP);
            FA_SYNC(); /* the previous tile's reads are done */
            load_tile_pair<S, D, STEP>(p, p.q, p.dout, b, sqi.q_start + q0, nr, h, q_t, do_t);
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
                const float pr = expf(p.scale * s - l);
                const float z = p.dropout_threshold ? drop_factor(p, b, h, i, j) : 1.0f;
                /* dV += (P o Z)^T dO; dS = P o (Z o dP - D) * scale; dK += dS^T Q */
                const float pz = pr * z, ds = pr * (z * dp - dsum_t[r]) * p.scale;
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
            if (c < d) {
                S::store(dkp, c, dkr[u]);
                S::store(dvp, c, dvr[u]);
            }
        }
    }
}

/* dQ for ROWS query rows of head h: the key tiles in ascending order (the same sums every run). */
template <class S, int D> __global__ void FA_LAUNCH_BOUNDS(THREADS) dq_kernel(const fa_cuda_params p)
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
    const int d = (int)p.d;
    const fa_mask m = fa_mask_make(sqi.sq, sqi.sk, p.causal, p.window_left, p.window_right);

    float qr[CPT], dor[CPT], dqr[CPT];
    float l = -INFINITY, di = 0.0f;
    int64_t lo = 0, hi = 0;
    load_row_pair<S, CPT, TPK>(p, p.q, p.dout, b, sqi.q_start + i, h, valid, lane, qr, dor);
#pragma unroll
    for (int u = 0; u < CPT; ++u)
        dqr[u] = 0.0f;
    if (valid) {
        l = static_cast<const float *>(p.lse.data)[offset_of(p.lse, b, sqi.q_start + i, h)];
        di = p.dsum[h * p.total_q + (p.cu_q ? sqi.q_start : b * p.seqlen_q) + i];
        fa_mask_row_range(&m, i, &lo, &hi);
    }
    const bool live = valid && l != -INFINITY; /* rows outside or fully masked: P = 0 */

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
            load_tile_pair<S, D, STEP>(p, p.k, p.v, b, sqi.k_start + kc0, nc, hk, k_t, v_t);
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
                const float pr = expf(p.scale * s - l);
                const float z = p.dropout_threshold ? drop_factor(p, b, h, i, j) : 1.0f;
                const float ds = pr * (z * dp - di) * p.scale;
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

/* ---------------------------------------------------------------- launchers */

/* The head-dim buckets the instances cover; 0 when d is out of range. */
inline int bucket_of(int64_t d)
{
    return d < 1 ? 0 : d <= 64 ? 64 : d <= 128 ? 128 : d <= 256 ? 256 : 0;
}

template <class S> inline bool view_vec4(const fa_cuda_tensor &t)
{
    const uintptr_t align = 4 * sizeof(typename S::T);
    return (uintptr_t)t.data % align == 0 && t.sb % 4 == 0 && t.ss % 4 == 0 && t.sh % 4 == 0;
}

inline bool grid_ok(int64_t x, int64_t y, int64_t z)
{
    return x > 0 && x <= 0x7fffffff && y > 0 && y <= 65535 && z > 0 && z <= 65535;
}

template <class S, int D> fa_gpu_error launch_forward(const fa_cuda_params &p, fa_gpu_stream stream)
{
    const int64_t nq = (p.seqlen_q + BM - 1) / BM;
    if (nq == 0 || p.batch == 0)
        return FA_GPU_SUCCESS;
    if (!grid_ok(nq, p.heads_q, p.batch))
        return FA_GPU_INVALID_VALUE;
    const bool vec = view_vec4<S>(p.q) && view_vec4<S>(p.k) && view_vec4<S>(p.v) && view_vec4<S>(p.o);
    forward_kernel<S, D><<<dim3((unsigned)nq, (unsigned)p.heads_q, (unsigned)p.batch), THREADS, 0, stream>>>(p, vec);
    return fa_gpu_last_error();
}

/* p.dsum: [heads_q][total_q] floats of workspace. */
template <class S, int D> fa_gpu_error launch_backward(const fa_cuda_params &p, fa_gpu_stream stream)
{
    typedef bwd_shape<D> sh;
    if (p.batch == 0)
        return FA_GPU_SUCCESS;
    fa_gpu_error e = FA_GPU_SUCCESS;
    const int64_t nd = (p.seqlen_q + THREADS - 1) / THREADS, nq = (p.seqlen_q + sh::ROWS - 1) / sh::ROWS;
    const int64_t nk = (p.seqlen_k + sh::ROWS - 1) / sh::ROWS;
    if (nd > 0) {
        if (!grid_ok(nd, p.heads_q, p.batch))
            return FA_GPU_INVALID_VALUE;
        dsum_kernel<S><<<dim3((unsigned)nd, (unsigned)p.heads_q, (unsigned)p.batch), THREADS, 0, stream>>>(p);
        if ((e = fa_gpu_last_error()) != FA_GPU_SUCCESS)
            return e;
    }
    if (nk > 0) { /* after dsum on the same stream */
        if (!grid_ok(nk, p.heads_kv, p.batch))
            return FA_GPU_INVALID_VALUE;
        dkdv_kernel<S, D><<<dim3((unsigned)nk, (unsigned)p.heads_kv, (unsigned)p.batch), THREADS, 0, stream>>>(p);
        if ((e = fa_gpu_last_error()) != FA_GPU_SUCCESS)
            return e;
    }
    if (nq > 0) {
        if (!grid_ok(nq, p.heads_q, p.batch))
            return FA_GPU_INVALID_VALUE;
        dq_kernel<S, D><<<dim3((unsigned)nq, (unsigned)p.heads_q, (unsigned)p.batch), THREADS, 0, stream>>>(p);
        e = fa_gpu_last_error();
    }
    return e;
}

} // namespace FA_PORTABLE_NS

#endif /* FA_PORTABLE_KERNELS_CUH */
