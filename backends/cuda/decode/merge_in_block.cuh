/* merge_in_block.cuh: a split decode call's merge done by the last of each row tile's split blocks
 * to finish (fa_gpu_kv_params.arrivals), in place of the combine kernel and its launch; the
 * tensor-core decode kernel's end (decode_mma_kernels.cuh). The arithmetic is the combine
 * kernel's (decode_kernels.cuh): the maximum of the splits' LSEs (NaN if any is), each split's
 * weight exp(LSE - maximum) (0 where the split saw no key, and then its outputs unused), the
 * weighted sum of the splits' outputs over the sum of the weights, then the sink folded in; here
 * each output channel's sum runs over the splits in order. */
#ifndef FA_GPU_DECODE_MERGE_IN_BLOCK_CUH
#define FA_GPU_DECODE_MERGE_IN_BLOCK_CUH

#include "decode/decode_kernels.cuh"

namespace fa_gpu {
namespace decode {

/* Counts the block in on its tile's counter (the block's x index is one per sequence, kv head
 * and row tile) once every thread's partials are stored; true for the last of the tile's p.splits
 * blocks when no block of the call recorded a fault. The last one sets the counter back to zero,
 * so every split block of the tile must come here exactly once, faulted or not. */
FA_DEVICE bool arrive_last(const fa_gpu_kv_params &p)
{
    __shared__ int last_s;
    FA_SYNC(); /* the block's partials are stored */
    if (threadIdx.x == 0) {
        /* acq_rel at gpu scope: releases the stores the barrier ordered before it, and in the
         * last block acquires the other blocks' (the bar.sync then orders them before every
         * thread's reads) */
        unsigned int before;
        asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;\n"
                     : "=r"(before)
                     : "l"(p.arrivals + blockIdx.x)
                     : "memory");
        const bool last = before == (unsigned int)(p.splits - 1);
        if (last) /* every split has counted itself: nothing else touches it in this call */
            p.arrivals[blockIdx.x] = 0u;
        last_s = last && !skip_on_fault(p);
    }
    FA_SYNC();
    return last_s != 0;
}

/* The splits of the query rows of row tile `tile` (RT rows; kv head hk, sequence b) merged into o
 * and lse by the block's THREADS threads; w_s: RT * p.splits floats of shared memory. The partials
 * are read past L1 (ld.global.cg): other blocks wrote them in this kernel. The tensor-core
 * kernel's partials have p.d channels (it runs with d_v == d). Where each thread's (row, channel)
 * items are at most IT and the splits at most NS, the items' partials are loaded into registers
 * beside the LSEs, so the merge waits for one round trip to memory; else in rounds of AHEAD. */
template <class S, int RT, int THREADS>
FA_DEVICE void merge_splits(const fa_gpu_kv_params &p, int64_t b, int64_t hk, int64_t tile, float *w_s)
{
    struct merge_row {
        int64_t at, h, i; /* the partials' row: ((b * heads_q + h) * seqlen_new + i) */
        float mx, sum;
    };
    constexpr int IT = 2, NS = 16, AHEAD = 8;
    __shared__ merge_row row_s[RT];
    const int tid = threadIdx.x, splits = (int)p.splits, dv = (int)p.d;
    const int rows = (int)min((int64_t)RT, p.rows - tile * RT);
    const float *lses = p.partial + p.batch * p.heads_q * p.seqlen_new * p.splits * p.d;
    if (tid < rows) {
        const int64_t row = tile * RT + tid, h = hk * p.group + row / p.seqlen_new, i = row % p.seqlen_new;
        row_s[tid].at = (b * p.heads_q + h) * p.seqlen_new + i;
        row_s[tid].h = h;
        row_s[tid].i = i;
    }
    FA_SYNC();
    const bool held = splits <= NS && rows * dv <= IT * THREADS;
    float x[IT][NS];
    if (held) {
#pragma unroll
        for (int k = 0; k < IT; ++k) {
            const int e = tid + k * THREADS, r = e / dv;
            const float *part = p.partial + row_s[r < rows ? r : 0].at * splits * dv + e % dv;
#pragma unroll
            for (int s = 0; s < NS; ++s)
                x[k][s] = e < rows * dv && s < splits ? __ldcg(part + s * dv) : 0.0f;
        }
    }
#pragma unroll 1
    for (int e = tid; e < rows * splits; e += THREADS)
        w_s[e] = __ldcg(lses + row_s[e / splits].at * splits + e % splits);
    FA_SYNC();
    if (tid < rows) { /* the row's LSEs become its weights */
        float *w = w_s + tid * splits, mx = -INFINITY, sum = 0.0f;
#pragma unroll 1
        for (int s = 0; s < splits; ++s)
            mx = max_nan(mx, w[s]);
#pragma unroll 1
        for (int s = 0; s < splits; ++s) {
            const float y = mx == -INFINITY || w[s] == -INFINITY ? 0.0f : expf(w[s] - mx);
            w[s] = y;
            sum += y;
        }
        row_s[tid].mx = mx;
        row_s[tid].sum = sum;
    }
    FA_SYNC();
    /* item e: row e / dv, channel e % dv; a split of weight 0 adds nothing */
    auto finish = [&](int e, float a) {
        const int r = e / dv, c = e % dv;
        const merge_row &row = row_s[r];
        float out = row.sum == 0.0f ? 0.0f : a / row.sum, lse = row.sum == 0.0f ? -INFINITY : row.mx + logf(row.sum);
        if (p.sink) { /* the row's final LSE: the sink joins it here */
            const float lse0 = lse;
            lse = fa_sink_lse(lse0, p.sink[row.h]);
            out *= fa_sink_factor(lse0, lse);
        }
        store_output<S>(p, b, row.i, row.h, c, out, lse);
    };
    if (held) {
#pragma unroll
        for (int k = 0; k < IT; ++k) {
            const int e = tid + k * THREADS;
            if (e >= rows * dv)
                break;
            const float *w = w_s + (e / dv) * splits;
            float a = 0.0f;
#pragma unroll
            for (int s = 0; s < NS; ++s)
                if (s < splits && w[s] != 0.0f)
                    a += w[s] * x[k][s];
            finish(e, a);
        }
        return;
    }
#pragma unroll 1
    for (int e = tid; e < rows * dv; e += THREADS) {
        const float *part = p.partial + row_s[e / dv].at * splits * dv + e % dv, *w = w_s + (e / dv) * splits;
        float a = 0.0f;
#pragma unroll 1
        for (int s0 = 0; s0 < splits; s0 += AHEAD) {
            float y[AHEAD];
#pragma unroll
            for (int k = 0; k < AHEAD; ++k)
                y[k] = s0 + k < splits ? __ldcg(part + (s0 + k) * dv) : 0.0f;
#pragma unroll
            for (int k = 0; k < AHEAD; ++k)
                if (s0 + k < splits && w[s0 + k] != 0.0f)
                    a += w[s0 + k] * y[k];
        }
        finish(e, a);
    }
}

/* A split block's end: counted in, and the tile's merge where it is the last (shared: the
 * block's dynamic shared memory, free by now, at least RT * FA_KV_MMA_MERGE_MAX_SPLITS floats). */
template <class S, int RT, int THREADS>
FA_DEVICE void merge_if_last(const fa_gpu_kv_params &p, int64_t b, int64_t hk, int64_t tile, float *shared)
{
    if (arrive_last(p))
        merge_splits<S, RT, THREADS>(p, b, hk, tile, shared);
}

} // namespace decode
} // namespace fa_gpu

#endif /* FA_GPU_DECODE_MERGE_IN_BLOCK_CUH */
