/* check.cuh: the int32 arrays of a fa_forward_kvcache call checked on the device (the call's
 * check_on_device), in stream order before its other kernels, so the host never waits for them.
 * CUDA and HIP from one source. The rules are the core's (core/kvcache.c, check_arrays): each
 * sequence's length plus the new tokens within the capacity, its batch row and the pages it uses
 * in range, the rotary rows its positions need present. The first bad value found is recorded
 * (kv_params.h, the fault record); every kernel of a device-checked call starts with
 * skip_on_fault, so a call after a fault writes nothing until the host clears the record. */
#ifndef FA_GPU_DECODE_CHECK_CUH
#define FA_GPU_DECODE_CHECK_CUH

#include "common/portable.cuh"
#include "common/kv_params.h"

namespace fa_gpu {
namespace decode {

/* Whether this call's kernels must write nothing: a device check has recorded a fault. */
FA_DEVICE bool skip_on_fault(const fa_gpu_kv_params &p)
{
    return p.fault && *(volatile const long long *)p.fault != FA_KV_FAULT_NONE;
}

/* Records a fault unless one is recorded already: the record is claimed with -1, filled, then
 * given its code, so a reader never sees a code beside another fault's details. */
FA_DEVICE void report_fault(const fa_gpu_kv_params &p, int code, int64_t seq, int64_t index, int64_t value)
{
    unsigned long long *f = reinterpret_cast<unsigned long long *>(p.fault);
    if (atomicCAS(f, 0ull, ~0ull) != 0ull)
        return;
    p.fault[1] = seq;
    p.fault[2] = index;
    p.fault[3] = value;
    __threadfence();
    atomicExch(f, (unsigned long long)code);
}

/* Sequence b's length, batch row and rotary rows (the call's first thread for the sequence checks
 * them), each bad value reported. Whether one was. */
FA_DEVICE bool check_sequence(const fa_gpu_kv_params &p, int64_t b, int64_t cached)
{
    const int advance = p.causal || p.window_left >= 0 || p.window_right >= 0;
    const int64_t total = cached + p.seqlen_knew;
    bool bad = false;
    if (cached < 0) {
        report_fault(p, FA_KV_FAULT_NEGATIVE_LENGTH, b, 0, cached);
        bad = true;
    } else if (total > p.capacity) {
        report_fault(p, FA_KV_FAULT_OVER_CAPACITY, b, total, cached);
        bad = true;
    }
    if (p.batch_idx && (p.batch_idx[b] < 0 || p.batch_idx[b] >= p.batch_cache)) {
        report_fault(p, FA_KV_FAULT_BATCH_IDX, b, 0, p.batch_idx[b]);
        bad = true;
    }
    if (p.rotary_cos && cached >= 0 && total <= p.capacity) {
        const int64_t qpos = advance ? cached + p.seqlen_new : cached + 1;
        int64_t need = p.k_new.data ? total : 0;
        if (p.seqlen_new > 0 && qpos > need)
            need = qpos;
        if (need > p.seqlen_ro) {
            report_fault(p, FA_KV_FAULT_ROTARY, b, 0, need);
            bad = true;
        }
    }
    return bad;
}

/* Sequence b's pages first .. last (inclusive) of its block table, this thread's share of them
 * (i = first + thread, step threads), each bad one reported. Whether this thread found one. */
FA_DEVICE bool check_pages(const fa_gpu_kv_params &p, int64_t b, int64_t first, int64_t last, int thread, int threads)
{
    bool bad = false;
    for (int64_t i = first + thread; i <= last; i += threads) {
        const int32_t pg = p.block_table[b * p.block_table_stride + i];
        if (pg < 0 || pg >= p.num_pages) {
            report_fault(p, FA_KV_FAULT_PAGE, b, i, pg);
            bad = true;
        }
    }
    return bad;
}

/* One block per sequence (grid-stride): thread 0 checks the length, the batch row and the rotary
 * rows; the block's threads check the pages the sequence uses (only when its length is valid, so
 * the page count stays inside block_table_stride). Templated on S only so that every translation
 * unit gets its own instance. */
template <class S> __global__ FA_LAUNCH_BOUNDS(256) void check_kernel(const fa_gpu_kv_params p)
{
    for (int64_t b = blockIdx.x; b < p.batch; b += gridDim.x) {
        const int64_t cached = p.cache_seqlens ? (int64_t)p.cache_seqlens[b] : p.seqlen_cache;
        const int64_t total = cached + p.seqlen_knew;
        const bool length_ok = cached >= 0 && total <= p.capacity;
        if (threadIdx.x == 0)
            check_sequence(p, b, cached);
        if (p.block_table && length_ok)
            check_pages(p, b, 0, (total + p.page_size - 1) / p.page_size - 1, (int)threadIdx.x, (int)blockDim.x);
    }
}

/* The check a decode block of a call that checks in its blocks (fa_kv_checks_in_blocks) makes of
 * what it reads: sequence b's length, batch row and rotary rows (thread 0), and the pages of its
 * split's keys (every thread), each bad value reported as check_kernel reports it. The splits of
 * a sequence cover its keys, so its blocks together check every page check_kernel would. Whether
 * this thread found a bad value. */
FA_DEVICE bool check_block(const fa_gpu_kv_params &p, int64_t b, int64_t split, int64_t cached)
{
    const int64_t total = cached + p.seqlen_knew;
    bool bad = threadIdx.x == 0 && check_sequence(p, b, cached);
    if (p.block_table && cached >= 0 && total <= p.capacity) {
        const int64_t first = split * p.keys_per_split;
        const int64_t end = total < first + p.keys_per_split ? total : first + p.keys_per_split;
        if (first < end)
            bad |= check_pages(p, b, first / p.page_size, (end - 1) / p.page_size, (int)threadIdx.x, (int)blockDim.x);
    }
    return bad;
}

} // namespace decode
} // namespace fa_gpu

#endif
