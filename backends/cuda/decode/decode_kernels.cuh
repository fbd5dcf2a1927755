/* decode_kernels.cuh: fa_forward_kvcache on CUDA and HIP, written once (vendor.h maps the names):
 * three kernels on the context's stream, after check.cuh's when the device checks the int32
 * arrays (decode.cuh launches them).
 *
 *   append_kernel   one thread per (sequence, new token, kv head, channel): k_new rotated in fp32
 *                   and rounded to the dtype, v_new copied, into the cache rows at cache_seqlens.
 *   decode_kernel   one block of FA_KV_THREADS per (sequence, kv head, tile of RT query rows of
 *                   that head, split of the keys): the rows share every key and value row the
 *                   block reads, so the cache is read once per kv head (GQA, speculative tokens).
 *                   D / 8 threads hold one key row, 8 channels each, loaded 16 bytes at a time
 *                   where rows are aligned; FA_KV_THREADS / (D / 8) such groups ("streams") each
 *                   keep their own online softmax over the keys they read, U keys in flight per
 *                   thread for K and V alike; the streams merge in shared memory at the end. One
 *                   split writes O and LSE, several write fp32 partials.
 *   combine_kernel  one block per (query row, 32 channels): the splits merged by their LSE.
 * q, k_cache and k_new have head dim d, v_cache, v_new and o d_v (both at most the instance's D).
 * The learnable sink joins each row once its final LSE is known (core/sink.h): in the decode
 * kernel's epilogue when the keys are not split, else in the combine kernel, never per split.
 * The arithmetic is the CPU backend's (backends/cpu/kvcache.c): q rotated and rounded to its
 * dtype, scores in fp32, the score modifiers on the raw product, exp2 of scores in log2 units. */
#ifndef FA_GPU_DECODE_KERNELS_CUH
#define FA_GPU_DECODE_KERNELS_CUH

#include "common/portable.cuh"
#include "decode/check.cuh"
#include "common/kv_geometry.h"
#include "common/kv_params.h"
#include "rotary.h"
#include "sink.h"

#if defined(__CUDACC_RTC__) || defined(__HIPCC_RTC__) /* NVRTC, hipRTC: the toolkit's names from common/rtc_prelude.cuh */
#include "common/rtc_prelude.cuh"
#else
#include <math.h>
#endif

namespace fa_gpu {
namespace decode {

/* ---------------------------------------------------------------- rows of 8 channels */

/* 8 elements of storage S as loaded: one 16-byte word for fp16 / bf16, two for fp32. */
template <class S> struct raw8 {
    uint4 w[sizeof(typename S::T) == 4 ? 2 : 1];
};

/* 8 elements from p + i, 16-byte aligned. */
template <class S> FA_DEVICE raw8<S> load8(const typename S::T *p, int64_t i)
{
    raw8<S> r;
    const uint4 *src = reinterpret_cast<const uint4 *>(p + i);
#pragma unroll
    for (int k = 0; k < (int)(sizeof r.w / sizeof r.w[0]); ++k)
        r.w[k] = src[k];
    return r;
}

/* The first n (0..8) elements from p + i, any alignment; the others zero. */
template <class S> FA_DEVICE raw8<S> load8_partial(const typename S::T *p, int64_t i, int n)
{
    typename S::T e[8];
#pragma unroll
    for (int c = 0; c < 8; ++c)
        e[c] = c < n ? p[i + c] : (typename S::T)0;
    raw8<S> r;
    memcpy(&r, e, sizeof r);
    return r;
}

template <class S> FA_DEVICE void unpack8(const raw8<S> &r, float (&x)[8])
{
    if constexpr (sizeof(typename S::T) == 4) {
        const float *f = reinterpret_cast<const float *>(r.w);
#pragma unroll
        for (int c = 0; c < 8; ++c)
            x[c] = f[c];
    } else {
        const unsigned u[4] = {r.w[0].x, r.w[0].y, r.w[0].z, r.w[0].w};
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            if constexpr (S::bf16) {
                x[2 * k] = __uint_as_float(u[k] << 16);
                x[2 * k + 1] = __uint_as_float(u[k] & 0xffff0000u);
            } else {
                x[2 * k] = fa_f16_bits_to_float((unsigned short)(u[k] & 0xffffu));
                x[2 * k + 1] = fa_f16_bits_to_float((unsigned short)(u[k] >> 16));
            }
        }
    }
}

/* The larger of a and b, NaN if either is (fmaxf drops a NaN): the combine's maximum of the splits'
 * LSEs, so that a split whose rows saw a NaN score keeps the row NaN (the NaN rule). */
FA_DEVICE float max_nan(float a, float b)
{
    return (a > b || a != a) ? a : b;
}

/* 2^x for the softmax weights (x <= 0, or -inf: 0): the hardware approximation on CUDA (relative
 * error about 2^-22), exp2f elsewhere. */
FA_DEVICE float fast_exp2(float x)
{
#if defined(__CUDA_ARCH__)
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
#else
    return exp2f(x);
#endif
}

/* x rounded to the storage's precision (what storing it keeps). */
template <class S> FA_DEVICE float round_to(float x)
{
    typename S::T t;
    S::store(&t, 0, x);
    return S::load(&t, 0);
}

/* ---------------------------------------------------------------- asynchronous copies */

/* 16 bytes from global src to shared dst without a register (cp.async, sm_80 and later; a plain
 * copy elsewhere, so the ASYNC kernels stay correct on any target); cp_async_wait<N> returns once
 * at most N of this thread's committed groups are still in flight. */
FA_DEVICE void cp_async16(uint4 *dst, const void *src)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src) : "memory");
#else
    *dst = *static_cast<const uint4 *>(src);
#endif
}

FA_DEVICE void cp_async_commit()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

template <int N> FA_DEVICE void cp_async_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

/* ---------------------------------------------------------------- addressing */

FA_DEVICE int64_t cached_len(const fa_gpu_kv_params &p, int64_t b)
{
    return p.cache_seqlens ? (int64_t)p.cache_seqlens[b] : p.seqlen_cache;
}

/* Element offset of token t, kv head h of sequence b in a cache view. in_pool: the page number
 * clamped into the pool, for reads issued before the block knows the call's arrays are good (a
 * bad page of a device-checked call is then read from a page that exists, and the block, which
 * finds the fault, uses nothing it read). */
FA_DEVICE int64_t token_offset(const fa_gpu_kv_params &p, const fa_gpu_tensor &c, int64_t b, int64_t t, int64_t h,
                               bool in_pool = false)
{
    if (p.block_table) {
        int64_t page, row;
        if (p.page_shift >= 0) {
            page = t >> p.page_shift;
            row = t & (p.page_size - 1);
        } else { /* t and the page size are below 2^31 (the core's limits): 32-bit division */
            page = (int64_t)((uint32_t)t / (uint32_t)p.page_size);
            row = t - page * p.page_size;
        }
        int64_t pg = p.block_table[b * p.block_table_stride + page];
        if (in_pool)
            pg = min(max(pg, (int64_t)0), p.num_pages - 1);
        return pg * c.sb + row * c.ss + h * c.sh;
    }
    const int64_t cache_row = p.batch_idx ? (int64_t)p.batch_idx[b] : b;
    return cache_row * c.sb + t * c.ss + h * c.sh;
}

/* Channel c (< d) of the row at x + off rotated to position pos, in fp32. */
template <class S>
FA_DEVICE float rotated(const fa_gpu_kv_params &p, const typename S::T *x, int64_t off, int c, int64_t pos)
{
    const int rd = (int)p.rotary_dim;
    if (c >= rd)
        return S::load(x, off + c);
    const int inter = p.rotary_interleaved, i = fa_rotary_pair_of(inter, rd, c);
    int cx, cy;
    fa_rotary_pair(inter, rd, i, &cx, &cy);
    float vx = S::load(x, off + cx), vy = S::load(x, off + cy);
    const typename S::T *cosb = static_cast<const typename S::T *>(p.rotary_cos);
    const typename S::T *sinb = static_cast<const typename S::T *>(p.rotary_sin);
    fa_rotary_apply(S::load(cosb, pos * p.cos_stride + i), S::load(sinb, pos * p.sin_stride + i), &vx, &vy);
    return c == cx ? vx : vy;
}

/* ---------------------------------------------------------------- append */

template <class S> __global__ FA_LAUNCH_BOUNDS(256) void append_kernel(const fa_gpu_kv_params p)
{
    typedef typename S::T T;
    if (skip_on_fault(p))
        return;
    /* channels of the wider of the key (d) and value (d_v) rows; each tensor's own are copied */
    const int64_t dw = p.d > p.d_v ? p.d : p.d_v;
    const int64_t per_seq = p.seqlen_knew * p.heads_kv * dw, total = p.batch * per_seq;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        const int64_t b = e / per_seq, r = e % per_seq;
        const int64_t j = r / (p.heads_kv * dw), h = r / dw % p.heads_kv;
        const int c = (int)(r % dw);
        const int64_t t = cached_len(p, b) + j;
        const T *kn = static_cast<const T *>(p.k_new.data), *vn = static_cast<const T *>(p.v_new.data);
        if (c < p.d) {
            const int64_t ks = b * p.k_new.sb + j * p.k_new.ss + h * p.k_new.sh;
            const float k = p.rotary_cos ? rotated<S>(p, kn, ks, c, t) : S::load(kn, ks + c);
            S::store(static_cast<T *>(p.k_cache.data), token_offset(p, p.k_cache, b, t, h) + c, k);
        }
        if (c < p.d_v) {
            const int64_t vs = b * p.v_new.sb + j * p.v_new.ss + h * p.v_new.sh;
            S::store(static_cast<T *>(p.v_cache.data), token_offset(p, p.v_cache, b, t, h) + c, S::load(vn, vs + c));
        }
    }
}

/* ---------------------------------------------------------------- a decode block's rows and keys */

/* Channel c of output row i (query head h, sequence b): O in o's dtype or fp32, and the row's LSE
 * from channel 0. */
template <class S>
FA_DEVICE void store_output(const fa_gpu_kv_params &p, int64_t b, int64_t i, int64_t h, int64_t c, float out, float lse)
{
    const int64_t oo = b * p.o.sb + i * p.o.ss + h * p.o.sh + c;
    if (p.out_f32)
        static_cast<float *>(p.o.data)[oo] = out;
    else
        S::store(static_cast<typename S::T *>(p.o.data), oo, out);
    if (c == 0 && p.lse.data)
        static_cast<float *>(p.lse.data)[b * p.lse.sb + i * p.lse.ss + h * p.lse.sh] = lse;
}

/* The keys a decode block reads: its split's, inside the union of its rows' ranges (k_begin ..
 * k_end), and the keys every row of it sees (lo_full .. hi_full: steps inside need no
 * per-element mask). skip: a device check recorded a fault, and the block must write nothing. */
struct block_keys {
    int64_t k_begin, k_end, lo_full, hi_full;
    bool skip;
};

/* The start every decode kernel shares, for the block of rows tile * RT .. + RT of kv head hk of
 * sequence b and split `split`: each row's query channels, rotated and rounded to the dtype,
 * through put_q(r, c, x) (zero for rows past p.rows and channels past d); each row's visible keys
 * (lo_s, hi_s; empty past p.rows) and score modifiers (mod_s), in shared memory; then a barrier.
 * The fault record, the sequence's length and (without rotary) the query channels are loaded side
 * by side before the record is tested (each read is in bounds whatever the checked arrays hold), so
 * their latencies overlap; a block that finds a fault returns skip before anything else (the
 * record is written by an earlier kernel: every thread reads the same). Where the call checks in
 * its blocks (fa_kv_checks_in_blocks), the block checks the arrays it reads first (check_block),
 * and skips where any of its threads found a bad value. Launched with THREADS threads.
 * DIRECT_Q (the tensor-core kernel's start): the fault record and the length are loaded first, so
 * that early() has the length soonest; with one new token per sequence and no rotary, each thread
 * then finds its rows' query offsets itself (row r of the tile is query head hk * group + tile * RT
 * + r) and loads its query channels, consecutive ones of one row, as 16-byte words where q's rows
 * allow (8-byte for four channels), without the barrier that shares the row offsets; with one new
 * token every row sees the same keys, and the block's range is row 0's. early(cached): called once
 * the block's loads are issued, with the sequence's cached length (not yet checked), for a kernel
 * that issues its first copies before the loads' results are used. ONE_TOKEN (with DIRECT_Q): the
 * call has one new token per sequence and no rotary, so the paths for more rows a head, for
 * rotated queries and for ALiBi slopes are compiled out (mod_s keeps no slope: the caller has no
 * score modifiers). */
struct no_early {
    FA_DEVICE void operator()(int64_t) const {}
};
template <class S, int RT, int D, int THREADS = FA_KV_THREADS, bool DIRECT_Q = false, bool ONE_TOKEN = false,
          class PutQ, class Early = no_early>
FA_DEVICE block_keys begin_block(const fa_gpu_kv_params &p, int64_t b, int64_t hk, int64_t tile, int64_t split,
                                 int64_t *lo_s, int64_t *hi_s, fa_score_mod_state *mod_s, PutQ put_q,
                                 Early early = Early())
{
    typedef typename S::T T;
    constexpr int QN = RT * D / THREADS; /* query channels per thread */
    static_assert(RT * D % THREADS == 0, "whole rows of channels per pass");
    /* up to 64 channels a thread are loaded before the fault record is tested and held in
     * registers; a larger tile (the Hopper MLA kernel's 64 rows of 576) is loaded after it, eight
     * channels a load, each thread's loads in flight together */
    constexpr bool HOLD_Q = QN <= 64;
    static_assert(HOLD_Q || (!DIRECT_Q && D % 8 == 0 && RT * D % (8 * THREADS) == 0), "whole 8-channel loads per thread");
    static_assert(!ONE_TOKEN || (DIRECT_Q && HOLD_Q), "the one-token start loads its query directly");
    __shared__ int64_t qrow_s[RT]; /* each row's offset in q, -1 past p.rows */
    const int tid = threadIdx.x;
    block_keys k;
    const T *q = static_cast<const T *>(p.q.data);
    const bool direct = ONE_TOKEN || (HOLD_Q && DIRECT_Q && p.seqlen_new == 1 && !p.rotary_cos);
    /* the tile element of the thread's query channel n: strided, or (DIRECT_Q) consecutive */
    auto elem = [&](int n) { return DIRECT_Q ? tid * QN + n : tid + n * THREADS; };
    long long fault = FA_KV_FAULT_NONE;
    int64_t cached = 0;
    auto load_state = [&] {
        fault = p.fault ? *(volatile const long long *)p.fault : (long long)FA_KV_FAULT_NONE;
        cached = cached_len(p, b);
    };
    if constexpr (DIRECT_Q)
        load_state();
    float x[QN];
    if (direct) {
        const int64_t head0 = b * p.q.sb + hk * p.group * p.q.sh;
        bool done = false;
        if constexpr (sizeof(T) == 2 && (QN == 4 || QN % 8 == 0)) {
            static_assert(D % QN == 0, "a thread's channels lie in one row");
            const int r = elem(0) / D, c = elem(0) % D;
            const int64_t rr = tile * RT + r, off = head0 + rr * p.q.sh + c;
            if (p.d % 8 == 0 && p.q.sh % 8 == 0 && reinterpret_cast<unsigned long long>(q + off - c) % 16 == 0) {
#pragma unroll
                for (int w = 0; w < (QN + 7) / 8; ++w) {
                    /* the word's channels: all below d or none (d and c + 8 w are multiples of 8,
                     * or of 4 with four channels) */
                    const bool in = rr < p.rows && c + 8 * w < p.d;
                    raw8<S> v{};
                    if constexpr (QN == 4) {
                        const uint2 h2 = in ? *reinterpret_cast<const uint2 *>(q + off) : make_uint2(0, 0);
                        v.w[0] = make_uint4(h2.x, h2.y, 0, 0);
                    } else if (in) {
                        v = load8<S>(q, off + 8 * w);
                    }
                    float f[8];
                    unpack8<S>(v, f);
#pragma unroll
                    for (int j = 0; j < 8 && 8 * w + j < QN; ++j)
                        x[8 * w + j] = f[j];
                }
                done = true;
            }
        }
        if (!done) {
#pragma unroll
            for (int n = 0; n < QN; ++n) {
                const int e = elem(n), r = e / D, c = e % D;
                const int64_t rr = tile * RT + r;
                x[n] = rr < p.rows && c < p.d ? S::load(q, head0 + rr * p.q.sh + c) : 0.0f;
            }
        }
    }
    if constexpr (!DIRECT_Q)
        load_state();
    const int64_t sk = cached + p.seqlen_knew, sn = ONE_TOKEN ? 1 : p.seqlen_new;
    const int advance = p.causal || p.window_left >= 0 || p.window_right >= 0;
    early(cached);
    const int64_t row = tile * RT + tid; /* threads below RT: that row's head and position */
    int64_t h = 0, i = 0;
    if (tid < RT) {
        if (row < p.rows) {
            h = hk * p.group + row / sn;
            i = row % sn;
        }
        qrow_s[tid] = row < p.rows ? b * p.q.sb + i * p.q.ss + h * p.q.sh : -1;
    }
    if (!direct) {
        FA_SYNC();
        if constexpr (HOLD_Q) {
#pragma unroll
            for (int n = 0; n < QN; ++n) {
                const int e = elem(n), r = e / D, c = e % D;
                const int64_t off = qrow_s[r];
                x[n] = !p.rotary_cos && off >= 0 && c < p.d ? S::load(q, off + c) : 0.0f;
            }
        }
    }
    if (tid < RT) {
        const fa_mask mask = fa_mask_make(sn, sk, p.causal, p.window_left, p.window_right);
        int64_t lo = 0, hi = 0;
        float slope = 0.0f;
        if (row < p.rows) {
            fa_mask_row_range(&mask, i, &lo, &hi);
            if (!ONE_TOKEN && p.mod.alibi)
                slope = p.alibi_slopes[fa_alibi_slope_index(p.mod, b, h)];
        }
        mod_s[tid] = fa_score_mod_begin(p.mod, slope, sk - sn);
        lo_s[tid] = lo;
        hi_s[tid] = hi;
    }
    k.skip = fault != FA_KV_FAULT_NONE;
    if (fa_kv_checks_in_blocks(&p)) /* this call has no check kernel: the block checks what it reads */
        k.skip = FA_SYNC_OR(k.skip || check_block(p, b, split, cached)) != 0;
    if (k.skip)
        return k;
    if (ONE_TOKEN || !p.rotary_cos) {
        if constexpr (HOLD_Q) {
#pragma unroll
            for (int n = 0; n < QN; ++n)
                put_q(elem(n) / D, elem(n) % D, x[n]);
        } else { /* 16-byte loads where every row offset is a multiple of 8 elements from an aligned q */
            constexpr int LOADS = RT * D / 8 / THREADS;
            const bool vec = p.d % 8 == 0 && p.q.sb % 8 == 0 && p.q.ss % 8 == 0 && p.q.sh % 8 == 0 &&
                             reinterpret_cast<unsigned long long>(q) % 16 == 0;
            if (vec) {
                raw8<S> v[LOADS];
#pragma unroll
                for (int n = 0; n < LOADS; ++n) {
                    const int e = 8 * (tid + n * THREADS), r = e / D, c = e % D;
                    const int64_t off = qrow_s[r];
                    v[n] = raw8<S>{};
                    if (off >= 0 && c < p.d)
                        v[n] = load8<S>(q, off + c);
                }
#pragma unroll
                for (int n = 0; n < LOADS; ++n) {
                    const int e = 8 * (tid + n * THREADS), r = e / D, c = e % D;
                    float f[8];
                    unpack8<S>(v[n], f);
#pragma unroll
                    for (int j = 0; j < 8; ++j)
                        put_q(r, c + j, f[j]);
                }
            } else {
                for (int e = tid; e < RT * D; e += THREADS) {
                    const int r = e / D, c = e % D;
                    const int64_t off = qrow_s[r];
                    put_q(r, c, off >= 0 && c < p.d ? S::load(q, off + c) : 0.0f);
                }
            }
        }
    } else { /* rotated to the row's position: the table rows the check holds present */
        for (int e = tid; e < RT * D; e += THREADS) {
            const int r = e / D, c = e % D;
            const int64_t off = qrow_s[r], pos = cached + (advance ? (tile * RT + r) % sn : 0);
            put_q(r, c, off >= 0 && c < p.d ? round_to<S>(rotated<S>(p, q, off, c, pos)) : 0.0f);
        }
    }
    FA_SYNC();
    int64_t lo_all = INT64_MAX, hi_all = 0;
    k.lo_full = 0;
    k.hi_full = INT64_MAX;
    if (DIRECT_Q && sn == 1) { /* every row is position 0: row 0's keys (row 0 is below p.rows) */
        lo_all = k.lo_full = lo_s[0];
        hi_all = k.hi_full = hi_s[0];
    } else {
#pragma unroll
        for (int r = 0; r < RT; ++r)
            if (tile * RT + r < p.rows) {
                lo_all = min(lo_all, lo_s[r]);
                hi_all = max(hi_all, hi_s[r]);
                k.lo_full = max(k.lo_full, lo_s[r]);
                k.hi_full = min(k.hi_full, hi_s[r]);
            }
    }
    k.k_begin = max(lo_all, split * p.keys_per_split);
    k.k_end = min(hi_all, min(sk, (split + 1) * p.keys_per_split));
    return k;
}

/* The SIMT kernel's end: STREAMS partial results of each of the block's RT rows (acc_s
 * [STREAMS][RT][D] outputs scaled by 2^-m, m_s the maxima in log2 units, l_s the sums; shared
 * memory, after a barrier) merged, and written as O and LSE (p.d_v channels, the sink folded in),
 * or as the split's partials. */
template <class S, int D, int RT, int STREAMS>
FA_DEVICE void merge_store(const fa_gpu_kv_params &p, const float *acc_s, const float (*m_s)[RT],
                           const float (*l_s)[RT], int64_t b, int64_t hk, int64_t tile, int64_t split)
{
    const int64_t hq = p.heads_q, sn = p.seqlen_new;
    for (int e = threadIdx.x; e < RT * D; e += (int)blockDim.x) {
        const int r = e / D, c = e % D;
        const int64_t row = tile * RT + r;
        if (row >= p.rows || c >= p.d_v)
            continue;
        float mx = -INFINITY;
#pragma unroll
        for (int st = 0; st < STREAMS; ++st)
            mx = fmaxf(mx, m_s[st][r]);
        const float base = mx == -INFINITY ? 0.0f : mx;
        float sum = 0.0f, a = 0.0f;
#pragma unroll
        for (int st = 0; st < STREAMS; ++st) {
            const float w = exp2f(m_s[st][r] - base);
            sum += l_s[st][r] * w;
            a += acc_s[(st * RT + r) * D + c] * w;
        }
        /* sum 0: no key seen (O 0, LSE -inf); NaN (a NaN score seen) stays NaN in both */
        float out = sum == 0.0f ? 0.0f : a / sum;
        float lse = sum == 0.0f ? -INFINITY : (base + log2f(sum)) * 0.69314718055994531f;
        const int64_t h = hk * p.group + row / sn, i = row % sn;
        if (p.splits > 1) {
            const int64_t at = ((b * hq + h) * sn + i) * p.splits + split;
            p.partial[at * p.d_v + c] = out;
            if (c == 0)
                p.partial[p.batch * hq * sn * p.splits * p.d_v + at] = lse;
            continue;
        }
        if (p.sink) {
            const float lse0 = lse;
            lse = fa_sink_lse(lse0, p.sink[h]);
            out *= fa_sink_factor(lse0, lse);
        }
        store_output<S>(p, b, i, h, c, out, lse);
    }
}

/* ---------------------------------------------------------------- decode */

/* Keys in flight per thread: every thread keeps U key rows and U value rows of 8 channels
 * loading at once (64 to 256 bytes). */
template <int D> struct decode_shape { /* common/kv_geometry.h's FA_KV_SIMT_* */
    static constexpr int LPK = FA_KV_SIMT_LPK(D);         /* threads per key row */
    static constexpr int STREAMS = FA_KV_SIMT_STREAMS(D); /* key rows read side by side */
    static constexpr int U = FA_KV_SIMT_U(D);
    static constexpr int STEP = STREAMS * U;              /* keys per step of the block's loop */
    static constexpr int STAGES = FA_KV_SIMT_STAGES(D);   /* the ASYNC ring: steps in shared memory */
    static constexpr int RING_BYTES = FA_KV_SIMT_RING_BYTES(D);
    static_assert(FA_KV_KEY_CHUNK % STEP == 0, "a split is a whole number of steps");
};

/* ASYNC: the key and value rows travel by cp.async (sm_80 and later, 16-bit dtypes, aligned rows)
 * into a ring of STAGES steps in shared memory, each thread copying and later reading its own
 * 16-byte words (no barrier), so STAGES - 1 steps are in flight beside the one being computed
 * without holding registers; else each step's rows are loaded into registers. */
template <class S, int D, int RT, bool ASYNC>
__global__ FA_LAUNCH_BOUNDS(FA_KV_THREADS) void decode_kernel(const fa_gpu_kv_params p)
{
    typedef typename S::T T;
    typedef decode_shape<D> shape;
    constexpr int LPK = shape::LPK, STREAMS = shape::STREAMS, U = shape::U, STEP = shape::STEP;
    __shared__ float q_s[RT][D];
    __shared__ float acc_s[STREAMS][RT][D];
    __shared__ float m_s[STREAMS][RT], l_s[STREAMS][RT];
    __shared__ int64_t lo_s[RT], hi_s[RT];
    __shared__ fa_score_mod_state mod_s[RT];

    const int tid = threadIdx.x, stream = tid / LPK, c0 = (tid % LPK) * 8;
    const int64_t tile = blockIdx.x % p.row_tiles, bh = blockIdx.x / p.row_tiles;
    const int64_t hk = bh % p.heads_kv, b = bh / p.heads_kv, split = blockIdx.y;
    const int64_t sn = p.seqlen_new;
    const bool has_mod = fa_score_mod_factors_active(p.mod);

    /* the tile's query rows into shared memory: rotated and rounded, scaled to log2 units
     * unless a score modifier needs the raw product */
    const float qmul = has_mod ? 1.0f : p.scale_log2;
    const block_keys keys = begin_block<S, RT, D>(p, b, hk, tile, split, lo_s, hi_s, mod_s,
                                                  [&](int r, int c, float x) { q_s[r][c] = x * qmul; });
    if (keys.skip)
        return;
    const int64_t k_begin = keys.k_begin, k_end = keys.k_end, lo_full = keys.lo_full, hi_full = keys.hi_full;

    float qr[RT][8], acc[RT][8], m[RT], l[RT];
#pragma unroll
    for (int r = 0; r < RT; ++r) {
#pragma unroll
        for (int c = 0; c < 8; ++c) {
            qr[r][c] = q_s[r][c0 + c];
            acc[r][c] = 0.0f;
        }
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }

    const T *kc = static_cast<const T *>(p.k_cache.data), *vc = static_cast<const T *>(p.v_cache.data);
    /* this thread's 8 channels of the key row (d) and of the value row (d_v): all inside the row
     * (aligned rows have d % 8 == 0 and d_v % 8 == 0) or, past its end, none */
    const int nvalid_k = (int)min((int64_t)8, max((int64_t)0, p.d - c0));
    const int nvalid_v = (int)min((int64_t)8, max((int64_t)0, p.d_v - c0));
    const bool k_in_row = nvalid_k > 0, v_in_row = nvalid_v > 0;
    /* one step: the scores of U keys per stream, this stream's online softmax, P V */
    auto consume = [&](const int64_t t0, const raw8<S>(&kr)[U], const raw8<S>(&vr)[U]) {
        float s[U][RT];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            float kf[8];
            unpack8<S>(kr[u], kf);
#pragma unroll
            for (int r = 0; r < RT; ++r) {
                float x = 0.0f;
#pragma unroll
                for (int c = 0; c < 8; ++c)
                    x = fmaf(qr[r][c], kf[c], x);
                s[u][r] = x;
            }
        }
#pragma unroll
        for (int o = 1; o < LPK; o <<= 1)
#pragma unroll
            for (int u = 0; u < U; ++u)
#pragma unroll
                for (int r = 0; r < RT; ++r)
                    s[u][r] += FA_SHFL_XOR(s[u][r], o);
        if (has_mod) {
#pragma unroll
            for (int r = 0; r < RT; ++r) {
                const int64_t i = (tile * RT + r) % sn;
#pragma unroll
                for (int u = 0; u < U; ++u)
                    s[u][r] = fa_score_mod_apply_at(&mod_s[r], s[u][r], i, t0 + u * STREAMS + stream, nullptr) *
                              p.scale_log2;
            }
        }
        if (t0 < lo_full || t0 + STEP > hi_full || t0 + STEP > k_end) {
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int64_t t = t0 + u * STREAMS + stream;
#pragma unroll
                for (int r = 0; r < RT; ++r)
                    if (t >= k_end || t < lo_s[r] || t >= hi_s[r])
                        s[u][r] = -INFINITY;
            }
        }
        /* this stream's online softmax over its U keys */
#pragma unroll
        for (int r = 0; r < RT; ++r) {
            float mx = m[r];
#pragma unroll
            for (int u = 0; u < U; ++u)
                mx = fmaxf(mx, s[u][r]);
            const float base = mx == -INFINITY ? 0.0f : mx, alpha = fast_exp2(m[r] - base);
            m[r] = mx;
            float sum = 0.0f;
#pragma unroll
            for (int u = 0; u < U; ++u) {
                s[u][r] = fast_exp2(s[u][r] - base);
                sum += s[u][r];
            }
            l[r] = l[r] * alpha + sum;
#pragma unroll
            for (int c = 0; c < 8; ++c)
                acc[r][c] *= alpha;
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            float vf[8];
            unpack8<S>(vr[u], vf);
#pragma unroll
            for (int r = 0; r < RT; ++r)
#pragma unroll
                for (int c = 0; c < 8; ++c)
                    acc[r][c] = fmaf(s[u][r], vf[c], acc[r][c]);
        }
    };

    if constexpr (ASYNC) {
        extern __shared__ uint4 ring[]; /* [STAGES][K, V][U][FA_KV_THREADS] */
        constexpr int STAGES = shape::STAGES;
        auto issue = [&](const int64_t t0, const int stage) {
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int64_t t = t0 + u * STREAMS + stream;
                if (t < k_end && k_in_row)
                    cp_async16(&ring[((stage * 2 + 0) * U + u) * FA_KV_THREADS + tid],
                               kc + token_offset(p, p.k_cache, b, t, hk) + c0);
                if (t < k_end && v_in_row)
                    cp_async16(&ring[((stage * 2 + 1) * U + u) * FA_KV_THREADS + tid],
                               vc + token_offset(p, p.v_cache, b, t, hk) + c0);
            }
            cp_async_commit();
        };
        const int64_t steps = k_end > k_begin ? (k_end - k_begin + STEP - 1) / STEP : 0;
#pragma unroll
        for (int st = 0; st < STAGES - 1; ++st)
            issue(k_begin + st * STEP, st);
        for (int64_t n = 0; n < steps; ++n) {
            const int64_t t0 = k_begin + n * STEP;
            issue(t0 + (STAGES - 1) * STEP, (int)((n + STAGES - 1) % STAGES));
            cp_async_wait<STAGES - 1>();
            const int stage = (int)(n % STAGES);
            raw8<S> kr[U], vr[U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                /* else stale words: zeros instead */
                const bool in = t0 + u * STREAMS + stream < k_end;
                kr[u].w[0] = in && k_in_row ? ring[((stage * 2 + 0) * U + u) * FA_KV_THREADS + tid]
                                            : make_uint4(0, 0, 0, 0);
                vr[u].w[0] = in && v_in_row ? ring[((stage * 2 + 1) * U + u) * FA_KV_THREADS + tid]
                                            : make_uint4(0, 0, 0, 0);
            }
            consume(t0, kr, vr);
        }
        cp_async_wait<0>();
    } else {
        for (int64_t t0 = k_begin; t0 < k_end; t0 += STEP) {
            raw8<S> kr[U], vr[U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int64_t t = t0 + u * STREAMS + stream;
                if (t < k_end) {
                    const int64_t ko = token_offset(p, p.k_cache, b, t, hk) + c0;
                    const int64_t vo = token_offset(p, p.v_cache, b, t, hk) + c0;
                    if (p.aligned) {
                        kr[u] = k_in_row ? load8<S>(kc, ko) : raw8<S>{};
                        vr[u] = v_in_row ? load8<S>(vc, vo) : raw8<S>{};
                    } else {
                        kr[u] = load8_partial<S>(kc, ko, nvalid_k);
                        vr[u] = load8_partial<S>(vc, vo, nvalid_v);
                    }
                } else {
                    kr[u] = raw8<S>{};
                    vr[u] = raw8<S>{};
                }
            }
            consume(t0, kr, vr);
        }
    }

    /* the streams merged: each row's maximum, sum and output channels */
#pragma unroll
    for (int r = 0; r < RT; ++r) {
#pragma unroll
        for (int c = 0; c < 8; ++c)
            acc_s[stream][r][c0 + c] = acc[r][c];
        if (tid % LPK == 0) {
            m_s[stream][r] = m[r];
            l_s[stream][r] = l[r];
        }
    }
    FA_SYNC();
    merge_store<S, D, RT, STREAMS>(p, &acc_s[0][0][0], m_s, l_s, b, hk, tile, split);
}

/* ---------------------------------------------------------------- combine */

/* x reduced over the block by max (MAX; NaN if any is) or sum: within each warp by shuffles, then
 * the warps' results through red[FA_KV_ELEMENTWISE_THREADS / FA_WARP_SIZE]; every thread gets the
 * result, in the same order of operations in every thread. */
template <bool MAX> FA_DEVICE float block_reduce(float *red, float x)
{
    constexpr int WARPS = FA_KV_ELEMENTWISE_THREADS / FA_WARP_SIZE;
    const int tid = threadIdx.x;
#pragma unroll
    for (int k = FA_WARP_SIZE / 2; k > 0; k /= 2) {
        const float y = FA_SHFL_XOR(x, k);
        x = MAX ? max_nan(x, y) : x + y;
    }
    if (tid % FA_WARP_SIZE == 0)
        red[tid / FA_WARP_SIZE] = x;
    FA_SYNC();
    float r = red[0];
#pragma unroll
    for (int w = 1; w < WARPS; ++w)
        r = MAX ? max_nan(r, red[w]) : r + red[w];
    FA_SYNC(); /* red is free again */
    return r;
}

/* The splits of each query row merged by their LSEs: one block per (row, FA_KV_COMBINE_CHANNELS
 * channels of o), grid-stride. The threads are G groups of C, group g summing splits g, g + G, ...
 * of the C channels (each group's loads coalesced). The row's split LSEs are read by the threads
 * side by side and, in the same round trip to memory, each group's channels of its first
 * FA_KV_COMBINE_AHEAD splits (a row of at most G * FA_KV_COMBINE_AHEAD splits is read in one
 * round trip); the weights are shared through shared memory, and the groups' sums added there. A
 * split whose weight is 0 (no visible key: LSE -inf) adds nothing (its partials, which may never
 * have been written, are read ahead but not used). */
template <class S> __global__ FA_LAUNCH_BOUNDS(FA_KV_ELEMENTWISE_THREADS) void combine_kernel(const fa_gpu_kv_params p)
{
    constexpr int T = FA_KV_ELEMENTWISE_THREADS, C = FA_KV_COMBINE_CHANNELS, G = T / C, A = FA_KV_COMBINE_AHEAD;
    static_assert(T % C == 0 && (T & (T - 1)) == 0 && T % FA_WARP_SIZE == 0,
                  "groups of C channels; a power-of-two block of whole warps");
    __shared__ float red[T / FA_WARP_SIZE], w_s[T], acc_s[G][C];
    if (skip_on_fault(p))
        return;
    const int tid = threadIdx.x, ci = tid % C, grp = tid / C;
    const int64_t sn = p.seqlen_new, hq = p.heads_q, splits = p.splits, dv = p.d_v;
    const int64_t chunks = (dv + C - 1) / C, items = p.batch * hq * sn * chunks;
    const float *lses = p.partial + p.batch * hq * sn * splits * dv;
    for (int64_t it = blockIdx.x; it < items; it += gridDim.x) {
        const int64_t row = it / chunks, c = (it % chunks) * C + ci; /* row = (b * hq + h) * sn + i */
        const float *ls_row = lses + row * splits, *part_row = p.partial + row * splits * dv + c;
        float ahead[A];
#pragma unroll
        for (int k = 0; k < A; ++k) {
            const int64_t j = grp + (int64_t)k * G;
            ahead[k] = c < dv && j < splits ? part_row[j * dv] : 0.0f;
        }
        float mx = -INFINITY;
        for (int64_t s = tid; s < splits; s += T)
            mx = max_nan(mx, ls_row[s]);
        mx = block_reduce<true>(red, mx);
        float sum = 0.0f, a = 0.0f;
        if (mx != -INFINITY) /* the same for the whole block */
            for (int64_t s0 = 0; s0 < splits; s0 += T) {
                const int64_t s = s0 + tid;
                const float ls = s < splits ? ls_row[s] : -INFINITY;
                const float w = ls == -INFINITY ? 0.0f : expf(ls - mx);
                w_s[tid] = w;
                sum += w;
                FA_SYNC();
                const int n = (int)(splits - s0 < T ? splits - s0 : T);
                int j0 = grp;
                if (s0 == 0) { /* the splits read ahead */
#pragma unroll
                    for (int k = 0; k < A; ++k) {
                        const int j = grp + k * G;
                        if (j < n && w_s[j] != 0.0f)
                            a += w_s[j] * ahead[k];
                    }
                    j0 = grp + A * G;
                }
                if (c < dv) {
                    const float *part = part_row + s0 * dv;
#pragma unroll 4
                    for (int j = j0; j < n; j += G) {
                        const float wj = w_s[j];
                        if (wj != 0.0f)
                            a += wj * part[j * dv];
                    }
                }
                FA_SYNC(); /* w_s is free again */
            }
        sum = block_reduce<false>(red, sum);
        acc_s[grp][ci] = a;
        FA_SYNC();
        if (grp == 0 && c < dv) {
            for (int g = 1; g < G; ++g)
                a += acc_s[g][ci];
            const int64_t i = row % sn, h = row / sn % hq, b = row / (sn * hq);
            float out = sum == 0.0f ? 0.0f : a / sum, lse = sum == 0.0f ? -INFINITY : mx + logf(sum);
            if (p.sink) { /* the row's final LSE over the keys of every split: the sink joins it here */
                const float lse0 = lse;
                lse = fa_sink_lse(lse0, p.sink[h]);
                out *= fa_sink_factor(lse0, lse);
            }
            store_output<S>(p, b, i, h, c, out, lse);
        }
        FA_SYNC(); /* acc_s is free again */
    }
}

} // namespace decode
} // namespace fa_gpu

#endif /* FA_GPU_DECODE_KERNELS_CUH */
