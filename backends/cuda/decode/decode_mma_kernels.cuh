/* decode_mma_kernels.cuh: fa_forward_kvcache's decode kernel on the tensor cores (sm_80 and later, fp16 /
 * bf16, 16-byte aligned rows, head-dim buckets 64 and 128; CUDA only), the alternative to the SIMT
 * decode kernel of decode.cuh, whose start (begin_block), check, append and combine kernels it
 * shares.
 *
 * One block of W warps per (sequence, kv head, tile of 16 of that head's query rows, split): eight,
 * or four where a block's shared memory cannot hold eight rings (common/kv_geometry.h's
 * fa_kv_mma_warps; the host's p.mma_warps picks the instance).
 * The tile's rows are the A operand of mma.sync m16n8k16 (rows past the head's are zeros), so the
 * scores of a GQA group's rows against 16 keys are 2 x D/16 mma and P V another D/8: a handful of
 * instructions per key row where the SIMT kernel spends about 85. Each warp takes 16 keys of every
 * step of 16 W keys through its own cp.async ring of ST stages (common/kv_geometry.h's
 * FA_KV_MMA_STAGES: two; rows padded by 16 bytes so that ldmatrix reads without bank conflicts),
 * keeps its own online softmax (rows g and g + 8 of the mma layout per thread), and the W warps
 * merge in shared memory at the end. With one new token per sequence the first ST steps are
 * issued from inside begin_block, as soon as the block's own loads are (early, below).
 *
 * ONE_TOKEN: an instance for the plain decode step (one new token per sequence, no rotary, no
 * softcap or ALiBi; the host's p.one_token), whose code for the other calls is compiled out. Each
 * block runs its code once over a few steps, so the instructions it fetches are a large part of
 * its time. */
#ifndef FA_GPU_DECODE_MMA_KERNELS_CUH
#define FA_GPU_DECODE_MMA_KERNELS_CUH

#include "decode/decode_kernels.cuh"
#include "common/primitives.cuh"

namespace fa_gpu {
namespace decode {

/* The toolkit's element type of a storage (std::conditional's work, spelled here: NVRTC has no
 * <type_traits>) */
template <bool BF16> struct mma_elem {
    typedef __half type;
};
template <> struct mma_elem<true> {
    typedef __nv_bfloat16 type;
};

template <int D, int ST, int W> struct mma_shape { /* common/kv_geometry.h's FA_KV_MMA_* */
    static constexpr int WARPS = W, KEYS = FA_KV_MMA_KEYS, LD = FA_KV_MMA_LD(D);
    static constexpr int STAGES = ST;
    static constexpr int STEP = WARPS * KEYS;          /* keys per step of the block */
    static constexpr int WARP_TILE = 2 * KEYS * LD;    /* K and V elements of one warp's stage */
    static constexpr int RING_BYTES = FA_KV_MMA_RING_BYTES(D, ST, W);
    static constexpr int MERGE_BYTES = FA_KV_MMA_MERGE_BYTES(D, W);
    static constexpr int SMEM = FA_KV_MMA_SMEM(D, ST, W);
    static_assert(RING_BYTES == STAGES * WARPS * WARP_TILE * 2, "the ring holds every warp's stages");
    static_assert(W == FA_KV_MMA_MIN_WARPS || W == FA_KV_MMA_MAX_WARPS, "the two instances");
    static_assert(FA_KV_KEY_CHUNK % KEYS == 0, "a split is a whole number of warps' keys (a step may pass its end)");
    static_assert(D % 16 == 0 && D <= 128, "mma decode: buckets 64 and 128");
    static_assert(ST >= 2, "a stage copied while one is read");
};

/* One online-softmax step of a warp's rows g (h 0) and g + 8 (h 1) in the mma.sync accumulator
 * layout: s[NT][4], the scores (log2 units, masked to -inf) of NT n8 key tiles, the row's keys in
 * the lane's quad, become their weights 2^(s - m); the maxima m, the sums l and the NO n8 tiles of
 * the output o are rescaled to the new maxima (a row that has seen no key keeps base 0). */
template <int NT, int NO> FA_DEVICE void online_softmax_step(float (*s)[4], float *m, float *l, float (*o)[4])
{
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float mx = fmaxf(s[0][2 * h], s[0][2 * h + 1]);
#pragma unroll
        for (int nt = 1; nt < NT; ++nt)
            mx = fmaxf(mx, fmaxf(s[nt][2 * h], s[nt][2 * h + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float mnew = fmaxf(m[h], mx), base = mnew == -INFINITY ? 0.0f : mnew;
        const float alpha = fast_exp2(m[h] - base);
        m[h] = mnew;
        l[h] *= alpha;
#pragma unroll
        for (int nn = 0; nn < NO; ++nn) {
            o[nn][2 * h] *= alpha;
            o[nn][2 * h + 1] *= alpha;
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int c = 0; c < 2; ++c) {
                const float w = fast_exp2(s[nt][2 * h + c] - base);
                s[nt][2 * h + c] = w;
                l[h] += w;
            }
    }
}

/* The end of the tensor-core kernel, each row's weights found once: thread r < RT turns row r's maxima and sums (m_s, l_s) into the WARPS weights of
 * its partial outputs, 2^(m - base) / sum, in l_s, and its LSE (log2 units) in m_s[0]; after a
 * barrier, each of the THREADS threads sums D / (THREADS / RT) consecutive channels of one row,
 * reading acc_s and writing the split's partials four channels a word. A row with no key seen
 * gives 0 and LSE -inf; a NaN stays NaN in both. */
template <class S, int D, int RT, int WARPS, int THREADS, bool ONE_TOKEN>
FA_DEVICE void merge_store_rows(const fa_gpu_kv_params &p, const float *acc_s, float (*m_s)[RT], float (*l_s)[RT],
                                int64_t b, int64_t hk, int64_t tile, int64_t split)
{
    constexpr int TPR = THREADS / RT, CPT = D / TPR; /* threads per row, channels per thread */
    static_assert(THREADS % RT == 0 && D % TPR == 0 && CPT % 4 == 0, "whole words of a row per thread");
    const int tid = threadIdx.x;
    if (tid < RT) {
        float mx = -INFINITY;
#pragma unroll
        for (int w = 0; w < WARPS; ++w)
            mx = fmaxf(mx, m_s[w][tid]);
        const float base = mx == -INFINITY ? 0.0f : mx;
        float e[WARPS], sum = 0.0f;
#pragma unroll
        for (int w = 0; w < WARPS; ++w) {
            e[w] = exp2f(m_s[w][tid] - base);
            sum += l_s[w][tid] * e[w];
        }
        const float inv = sum == 0.0f ? 0.0f : 1.0f / sum;
#pragma unroll
        for (int w = 0; w < WARPS; ++w)
            l_s[w][tid] = e[w] * inv;
        m_s[0][tid] = sum == 0.0f ? -INFINITY : base + log2f(sum);
    }
    FA_SYNC();
    const int r = tid / TPR, c0 = (tid % TPR) * CPT;
    const int64_t row = tile * RT + r;
    if (row >= p.rows)
        return;
    float out[CPT];
#pragma unroll
    for (int c = 0; c < CPT; ++c)
        out[c] = 0.0f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) {
        const float wt = l_s[w][r];
        const float4 *a = reinterpret_cast<const float4 *>(acc_s + (w * RT + r) * D + c0);
#pragma unroll
        for (int c = 0; c < CPT / 4; ++c) {
            const float4 x = a[c];
            out[4 * c] += x.x * wt;
            out[4 * c + 1] += x.y * wt;
            out[4 * c + 2] += x.z * wt;
            out[4 * c + 3] += x.w * wt;
        }
    }
    const float lse = m_s[0][r] * 0.69314718055994531f;
    const int64_t sn = ONE_TOKEN ? 1 : p.seqlen_new, h = hk * p.group + row / sn, i = row % sn;
    if (p.splits > 1) {
        const int64_t at = ((b * p.heads_q + h) * sn + i) * p.splits + split;
        float *dst = p.partial + at * p.d + c0;
        if (c0 + CPT <= p.d && p.d % 4 == 0) {
#pragma unroll
            for (int c = 0; c < CPT / 4; ++c)
                reinterpret_cast<float4 *>(dst)[c] = make_float4(out[4 * c], out[4 * c + 1], out[4 * c + 2], out[4 * c + 3]);
        } else {
#pragma unroll
            for (int c = 0; c < CPT; ++c)
                if (c0 + c < p.d)
                    dst[c] = out[c];
        }
        if (c0 == 0)
            p.partial[p.batch * p.heads_q * sn * p.splits * p.d + at] = lse;
        return;
    }
#pragma unroll
    for (int c = 0; c < CPT; ++c)
        if (c0 + c < p.d)
            store_output<S>(p, b, i, h, c0 + c, out[c], lse);
}

template <class S, int D, int ST, int W, bool ONE_TOKEN = false>
__global__ __launch_bounds__(32 * W) void decode_mma_kernel(const fa_gpu_kv_params p)
{
    typedef typename S::T T;
    typedef typename mma_elem<S::bf16>::type E;
    typedef mma_shape<D, ST, W> shape;
    constexpr int RT = 16, LD = shape::LD, KEYS = shape::KEYS, WARPS = shape::WARPS, STEP = shape::STEP;
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ __align__(16) E q_s[RT * LD];
    __shared__ float m_s[WARPS][RT], l_s[WARPS][RT];
    __shared__ int64_t lo_s[RT], hi_s[RT];
    __shared__ fa_score_mod_state mod_s[RT];
    /* with begin_block's row offsets: what fa_kv_mma_warps leaves beside the ring */
    static_assert(sizeof q_s + sizeof m_s + sizeof l_s + sizeof lo_s + sizeof hi_s + sizeof mod_s + RT * sizeof(int64_t) <=
                      FA_KV_MMA_STATIC_BYTES,
                  "static shared memory within FA_KV_MMA_STATIC_BYTES");

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
    /* the block's place in 32 bits: row_tiles and heads_kv divide a grid's x, below 2^31 */
    const uint32_t bx = blockIdx.x, tiles = (uint32_t)p.row_tiles, hkv = (uint32_t)p.heads_kv;
    const int64_t tile = bx % tiles, bh = bx / tiles;
    const int64_t hk = (uint32_t)bh % hkv, b = (uint32_t)bh / hkv, split = blockIdx.y;
    const int64_t sn = ONE_TOKEN ? 1 : p.seqlen_new;
    const bool has_mod = !ONE_TOKEN && fa_score_mod_factors_active(p.mod);
    const T *kc = static_cast<const T *>(p.k_cache.data), *vc = static_cast<const T *>(p.v_cache.data);
    E *ring = reinterpret_cast<E *>(smem);
    /* A warp's stage is 16 key rows of D / 8 16-byte chunks for each of K and V; lane copies chunk
     * ch of rows key0, key0 + KSTEP, ... (D / 16 of them), so its source and destination offsets
     * are fixed here and step by KSTEP rows: row pitches in elements, 64-bit in global memory. */
    constexpr int CPR = D / 8, KSTEP = 32 / CPR, COPIES = D / 16;
    static_assert(32 % CPR == 0 && COPIES * KSTEP == KEYS, "a warp's copies cover its 16 rows");
    const int key0 = lane / CPR, ch = (lane % CPR) * 8;
    const bool ch_in = ch < p.d;
    const int64_t k_lane = key0 * p.k_cache.ss + ch, v_lane = key0 * p.v_cache.ss + ch;
    const int64_t k_step = KSTEP * p.k_cache.ss, v_step = KSTEP * p.v_cache.ss;
    /* The block's keys k_begin .. k_end, k_begin down to a multiple of KEYS, so that each warp's
     * keys of a step lie in one page (page sizes are multiples of 16) and one address per step
     * serves them all. The keys this adds lie below every row's first visible key (k_begin is the
     * split's first key, a multiple of 64, or above it the lowest first key of the rows), so the
     * mask removes them. */
    int64_t k_begin = 0, k_end = 0, steps = 0;
    auto set_keys = [&](int64_t first, int64_t end) {
        k_end = end;
        k_begin = first < end ? first & ~(int64_t)(KEYS - 1) : first;
        steps = k_end > k_begin ? (k_end - k_begin + STEP - 1) / STEP : 0;
    };
    /* this warp's 16 keys of the step at t0 into stage `stage`, addressed from the first key's row
     * (the 16 share a page; in_pool: token_offset's); rows past k_end and channels past d
     * zero-filled, their source the cache's start (not read). Each copy asks L2 for the 128 bytes
     * around it: a row's chunks are copied by neighbouring lanes. */
    auto issue = [&](const int64_t t0, const int stage, const bool in_pool) {
        E *kt = ring + (stage * WARPS + warp) * shape::WARP_TILE, *vt = kt + KEYS * LD;
        const int64_t tw = t0 + warp * KEYS;
        const int64_t left = k_end - tw - key0; /* this lane's rows below k_end: those with i KSTEP < left */
        const bool any = tw < k_end;
        const T *ks = kc + (any ? token_offset(p, p.k_cache, b, tw, hk, in_pool) + k_lane : 0);
        const T *vs = vc + (any ? token_offset(p, p.v_cache, b, tw, hk, in_pool) + v_lane : 0);
#pragma unroll
        for (int i = 0; i < COPIES; ++i) {
            const bool ok = ch_in && i * KSTEP < left;
            const int at = (key0 + i * KSTEP) * LD + ch;
            fa_gpu::cp_async16_prefetch<128>(kt + at, ok ? ks : kc, ok);
            fa_gpu::cp_async16_prefetch<128>(vt + at, ok ? vs : vc, ok);
            ks += k_step;
            vs += v_step;
        }
        fa_gpu::cp_async_commit();
    };
    /* the first ST steps, one commit group each (empty past the last step, so that the count of
     * groups in flight is fixed); ONE_TOKEN keeps one copy of issue's code for them */
    auto issue_stage = [&](const int st, const bool in_pool) {
        if (st < steps)
            issue(k_begin + st * STEP, st, in_pool);
        else
            fa_gpu::cp_async_commit();
    };
    auto issue_first = [&](const bool in_pool) {
        if constexpr (ONE_TOKEN) {
#pragma unroll 1
            for (int st = 0; st < ST; ++st)
                issue_stage(st, in_pool);
        } else {
#pragma unroll
            for (int st = 0; st < ST; ++st)
                issue_stage(st, in_pool);
        }
    };

    /* Early copies: with one new token per sequence and no rotary, every row sees the keys of
     * query position 0 (fa_mask_row_range), so the block's keys follow from the sequence's length
     * alone, and its first steps go out from begin_block as soon as its own loads are issued. The
     * arrays of a device-checked call are not known good yet: a length or batch row out of range
     * issues nothing early, and pages are clamped into the pool (in_pool); begin_block then finds
     * the fault and the block uses nothing. Without a fault, begin_block finds the same keys. */
    bool issued = false;
    auto early = [&](const int64_t cached) {
        if (!ONE_TOKEN && (sn != 1 || p.rotary_cos))
            return;
        const int64_t sk = cached + p.seqlen_knew;
        const int64_t row = p.batch_idx ? (int64_t)p.batch_idx[b] : b;
        if (p.fault && !(cached >= 0 && sk <= p.capacity && row >= 0 && row < (p.batch_idx ? p.batch_cache : p.batch)))
            return;
        const fa_mask mask = fa_mask_make(1, sk, p.causal, p.window_left, p.window_right);
        int64_t lo, hi;
        fa_mask_row_range(&mask, 0, &lo, &hi);
        set_keys(max(lo, split * p.keys_per_split), min(hi, min(sk, (split + 1) * p.keys_per_split)));
        issue_first(p.fault != nullptr);
        issued = true;
    };

    /* q stays unscaled and in the dtype (what the rounding rule leaves it): the scale comes after
     * the product, in fp32 */
    const block_keys keys = begin_block<S, RT, D, 32 * W, true, ONE_TOKEN>(
        p, b, hk, tile, split, lo_s, hi_s, mod_s,
        [&](int r, int c, float x) { q_s[r * LD + c] = fa_gpu::elem<E>::from_float(x); }, early);
    if (keys.skip) { /* no copy may land after the block is gone */
        fa_gpu::cp_async_wait<0>();
        return;
    }
    uint32_t qf[D / 16][4];
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
        fa_gpu::load_a(qf[kk], q_s, LD, 0, kk * 16);
    /* One new token without rotary always issues early, unless the length or the batch row of a
     * device-checked call is bad, which begin_block has found (skip): ONE_TOKEN needs no second
     * copy of the first steps' issue. */
    if (!ONE_TOKEN && !issued) {
        set_keys(keys.k_begin, keys.k_end);
        issue_first(false);
    }

    float o[D / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e)
            o[n][e] = 0.0f;

    /* ST steps in flight: step n is read once its group is in (ST + n groups committed before
     * it), and its stage takes step n + ST's copies once every lane has read it */
    for (int64_t n = 0; n < steps; ++n) {
        const int64_t t0 = k_begin + n * STEP;
        fa_gpu::cp_async_wait<ST - 1>();
        __syncwarp();
        const E *kt = ring + ((n % ST) * WARPS + warp) * shape::WARP_TILE, *vt = kt + KEYS * LD;

        /* S (16 rows x 16 keys) = Q K^T */
        float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            uint32_t bf[4];
            fa_gpu::load_b_nt(bf, kt, LD, 0, kk * 16);
            fa_gpu::elem<E>::mma(s[0], qf[kk], bf[0], bf[1]);
            fa_gpu::elem<E>::mma(s[1], qf[kk], bf[2], bf[3]);
        }
        /* modifiers on the raw product, log2 units, the mask; element e of tile nt: row
         * g + 8 (e / 2), key t0w + 8 nt + 2 t4 + e % 2 */
        const int64_t t0w = t0 + warp * KEYS;
        const bool full = t0w >= keys.lo_full && t0w + KEYS <= keys.hi_full && t0w + KEYS <= k_end;
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int r = g + 8 * (e / 2);
                const int64_t t = t0w + 8 * nt + 2 * t4 + e % 2;
                float x = s[nt][e];
                if (has_mod)
                    x = fa_score_mod_apply_at(&mod_s[r], x, (tile * RT + r) % sn, t, nullptr);
                x *= p.scale_log2;
                if (!full && (t >= k_end || t < lo_s[r] || t >= hi_s[r]))
                    x = -INFINITY;
                s[nt][e] = x;
            }
        /* online softmax of rows g and g + 8: their 16 keys lie in the lane's quad */
        online_softmax_step<2, D / 8>(s, m, l, o);
        /* O += P V, P as the A operand (the accumulator layout of two key tiles is A's) */
        const uint32_t pf[4] = {fa_gpu::elem<E>::pack(s[0][0], s[0][1]), fa_gpu::elem<E>::pack(s[0][2], s[0][3]),
                                fa_gpu::elem<E>::pack(s[1][0], s[1][1]), fa_gpu::elem<E>::pack(s[1][2], s[1][3])};
#pragma unroll
        for (int nn = 0; nn < D / 16; ++nn) {
            uint32_t bf[4];
            fa_gpu::load_b_nn(bf, vt, LD, 0, nn * 16);
            fa_gpu::elem<E>::mma(o[2 * nn], pf, bf[0], bf[1]);
            fa_gpu::elem<E>::mma(o[2 * nn + 1], pf, bf[2], bf[3]);
        }
        __syncwarp();
        if (n + ST < steps)
            issue(t0 + ST * STEP, (int)(n % ST), false);
        else
            fa_gpu::cp_async_commit();
    }
    fa_gpu::cp_async_wait<0>();

    /* the four warps merged: each row's sum over its quad, then through shared memory */
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    }
    FA_SYNC(); /* the ring is free */
    float *acc_s = reinterpret_cast<float *>(smem); /* [WARPS][RT][D] */
#pragma unroll
    for (int nn = 0; nn < D / 8; ++nn)
#pragma unroll
        for (int e = 0; e < 4; ++e)
            acc_s[(warp * RT + g + 8 * (e / 2)) * D + nn * 8 + 2 * t4 + e % 2] = o[nn][e];
    if (t4 == 0) {
        m_s[warp][g] = m[0];
        m_s[warp][g + 8] = m[1];
        l_s[warp][g] = l[0];
        l_s[warp][g + 8] = l[1];
    }
    FA_SYNC();
    merge_store_rows<S, D, RT, WARPS, 32 * W, ONE_TOKEN>(p, acc_s, m_s, l_s, b, hk, tile, split);
}

} // namespace decode
} // namespace fa_gpu

#endif /* FA_GPU_DECODE_MMA_KERNELS_CUH */
