/* kv_host.c: fa_forward_kvcache's host side on the CUDA and HIP backends: the decode kernels'
 * parameter block from the core's validated fa_kv_problem, the head-dim bucket and row tile, the
 * number of key splits, and the fp32 partials the splits merge through. The kernels are decode/.
 * Compiled once per runtime, as gpu_host.c. */
#include "common/kv_geometry.h"
#include "host/gpu_host.h"

#include <stdint.h>
#include <string.h>

static int gpu_kv_bucket(int64_t d)
{
    return d <= 64 ? 64 : d <= 128 ? 128 : d <= 256 ? 256 : 0;
}

static int gpu_kv_view_aligned(const fa_view *v, size_t elem)
{
    const int64_t e = 16 / (int64_t)elem; /* elements per 16 bytes */
    return (uintptr_t)v->data % 16 == 0 && v->sb % e == 0 && v->ss % e == 0 && v->sh % e == 0;
}

/* Splits of each sequence's keys: the caller's (at most one per chunk of FA_KV_KEY_CHUNK keys),
 * else, among 1 .. 128 splits of at least 256 keys each, the fewest whose blocks fill the
 * processors' resident slots (`slots` blocks at a time) within 5 % as evenly as the best count
 * does: the kernel's time is its number of waves of blocks, so 1.3 waves cost as much as 2.
 * *keys_per_split is a multiple of FA_KV_KEY_CHUNK. */
static int64_t gpu_kv_splits(const fa_kv_problem *kp, int64_t blocks, int64_t slots, int64_t min_splits,
                             int64_t *keys_per_split)
{
    const int64_t keys = kp->p.seqlen_k, chunks = (keys + FA_KV_KEY_CHUNK - 1) / FA_KV_KEY_CHUNK;
    int64_t splits = 1;
    if (kp->num_splits > 0) {
        splits = kp->num_splits;
    } else if (slots > 0) {
        int64_t most = keys / 256;
        most = most > 128 ? 128 : most < 1 ? 1 : most;
        double best = 0.0, eff[129];
        for (int64_t n = 1; n <= most; ++n) {
            const double waves = (double)(blocks * n) / (double)slots;
            eff[n] = waves / (double)((blocks * n + slots - 1) / slots);
            best = eff[n] > best ? eff[n] : best;
        }
        for (splits = 1; splits < most && eff[splits] < 0.95 * best; ++splits)
            ;
    }
    if (splits < min_splits)
        splits = min_splits;
    if (splits > chunks)
        splits = chunks;
    if (splits < 1)
        splits = 1;
    int64_t per = (chunks + splits - 1) / splits;
    *keys_per_split = (per > 0 ? per : 1) * FA_KV_KEY_CHUNK;
    return per > 0 ? (chunks + per - 1) / per : 1;
}

/* The refusal of a call whose context memory (the device check's fault words, the split partials'
 * scratch) would have to be allocated while the stream is being captured into a graph, which
 * allows neither the allocation nor the device-wide wait after it. */
static fa_status refuse_in_capture(fa_context *ctx, const char *what)
{
    return FA_ERROR(ctx, FA_ERR_UNSUPPORTED,
                    "fa_forward_kvcache on %s: %s would be allocated while the stream is being captured into a "
                    "graph; make one call of this shape outside the capture first",
                    FA_RT_NAME, what);
}

fa_status fa_gpu_forward_kvcache(fa_context *ctx, const fa_kv_problem *kp, const fa_gpu_kv_entries *entry)
{
    const fa_problem *p = &kp->p;
    /* the decode kernels and their device check start every sequence's keys at position 0: the
     * core runs cache_leftpad on the dense forward (core/kvcache_dense.c) where that path serves
     * the call (fa_kv_dense_takes): not with rotary embeddings, check_on_device, no query rows, or
     * appended keys where the backend has no device copy */
    if (kp->cache_leftpad)
        return FA_ERROR(ctx, FA_ERR_UNSUPPORTED,
                        "cache_leftpad is not implemented on %s yet for calls with rotary embeddings, "
                        "check_on_device or no query rows%s",
                        FA_RT_NAME, ctx->backend->ring_copy ? "" : ", or with appended keys");
    if (p->batch == 0 || (p->seqlen_q == 0 && (!kp->has_new || kp->seqlen_knew == 0)))
        return FA_SUCCESS;
    /* the SIMT and tensor-core decode kernels hold one key row and one value row across the threads
     * of a warp, 8 channels each: both head dims at most 256; above that (MLA's 576 / 512) the MLA
     * kernel (bucket FA_KV_MLA_D) */
    fa_gpu_state *s = fa_gpu_of(ctx);
    const int wide = p->d > 256 || p->d_v > 256;
    const int bucket = wide ? FA_KV_MLA_D : gpu_kv_bucket(p->d > p->d_v ? p->d : p->d_v);
    FA_GPU_TRY(ctx, FA_RT(SetDevice)(ctx->device));
    fa_gpu_kv_params kv;
    memset(&kv, 0, sizeof kv);
    kv.q = fa_gpu_tensor_of(&p->q);
    kv.o = fa_gpu_tensor_of(&p->o);
    kv.lse = fa_gpu_tensor_of(&p->lse);
    if (!p->has_lse)
        kv.lse.data = NULL;
    kv.k_cache = fa_gpu_tensor_of(&kp->k_cache);
    kv.v_cache = fa_gpu_tensor_of(&kp->v_cache);
    if (kp->has_new) {
        kv.k_new = fa_gpu_tensor_of(&kp->k_new);
        kv.v_new = fa_gpu_tensor_of(&kp->v_new);
    }
    kv.cache_seqlens = kp->cache_seqlens;
    kv.block_table = kp->paged ? kp->block_table : NULL;
    kv.batch_idx = kp->paged ? NULL : kp->batch_idx;
    if (kp->rotary) {
        kv.rotary_cos = kp->rotary_cos;
        kv.rotary_sin = kp->rotary_sin;
        kv.cos_stride = kp->cos_stride;
        kv.sin_stride = kp->sin_stride;
        kv.rotary_dim = kp->rotary_dim;
        kv.rotary_interleaved = kp->rotary_interleaved;
    }
    kv.batch = p->batch;
    kv.seqlen_new = p->seqlen_q;
    kv.seqlen_knew = kp->has_new ? kp->seqlen_knew : 0;
    kv.heads_q = p->heads_q;
    kv.heads_kv = p->heads_kv;
    kv.group = p->group;
    kv.d = p->d;
    kv.d_v = p->d_v;
    kv.sink = p->sink;
    kv.seqlen_cache = kp->seqlen_cache;
    /* tokens are below 2^31, so a larger page holds all of them: 2^31 divides the same */
    kv.page_size = kp->paged ? (kp->page_size < ((int64_t)1 << 31) ? kp->page_size : ((int64_t)1 << 31)) : 0;
    kv.page_shift = -1;
    for (int sh = 0; sh < 32 && kp->paged; ++sh)
        if (((int64_t)1 << sh) == kv.page_size)
            kv.page_shift = sh;
    kv.block_table_stride = kp->block_table_stride;
    kv.causal = p->causal;
    kv.window_left = p->window_left;
    kv.window_right = p->window_right;
    kv.scale = p->scale;
    kv.scale_log2 = (float)((double)p->scale * 1.4426950408889634);
    kv.out_f32 = p->out_dtype != p->dtype;
    kv.mod = fa_score_mod_prepare(p->mod, p->scale);
    kv.alibi_slopes = p->alibi_slopes;
    if (kp->device_check) {
        if (!s->fault && fa_gpu_capturing(ctx))
            return refuse_in_capture(ctx, "the device check's fault words");
        if (!s->fault) {
            FA_GPU_TRY(ctx, FA_RT(Malloc)((void **)&s->fault, sizeof(long long) * FA_KV_FAULT_WORDS));
            FA_GPU_TRY(ctx, FA_RT(Memset)(s->fault, 0, sizeof(long long) * FA_KV_FAULT_WORDS));
            FA_GPU_TRY(ctx, FA_RT(DeviceSynchronize)());
        }
        kv.fault = s->fault;
        kv.capacity = kp->capacity;
        kv.num_pages = kp->num_pages;
        kv.batch_cache = kp->batch_cache;
        kv.seqlen_ro = kp->seqlen_ro;
    }
    const size_t elem = fa_dtype_size(p->dtype);
    kv.aligned = p->d % 8 == 0 && p->d_v % 8 == 0 && gpu_kv_view_aligned(&kp->k_cache, elem) && gpu_kv_view_aligned(&kp->v_cache, elem);
    /* the kernel: the tensor-core one where it exists (cc >= 8.0, fp16 / bf16, aligned rows, d <=
     * 128, d_v == d; FLASHATTN_KERNELS=kv-simt turns it off), else the SIMT one with the cp.async
     * ring (fp16 / bf16, aligned rows) or register loads. The tensor-core kernel does not read the
     * learnable sink: it takes a call with a sink whose keys span two chunks or more, split at
     * least in two so that the combine kernel folds the sink in (decode_kernels.cuh); the SIMT
     * kernel takes the shorter ones. */
#if defined(FA_RUNTIME_HIP) /* no MLA kernel */
    if (wide)
        return FA_ERROR(ctx, FA_ERR_UNSUPPORTED,
                        "fa_forward_kvcache on %s: head dims d = %lld, d_v = %lld; the decode kernels take 1..256",
                        FA_RT_NAME, (long long)p->d, (long long)p->d_v);
#else
    if (wide && !(entry->forward_mma && s->prop.major >= 8 && kv.aligned && p->dtype != FA_DTYPE_F32 &&
                  p->d <= FA_KV_MLA_D && p->d_v <= FA_KV_MLA_DV &&
                  (long long)s->prop.sharedMemPerBlockOptin >= FA_KV_MLA_SMEM + FA_KV_MLA_STATIC_BYTES))
        return FA_ERROR(ctx, FA_ERR_UNSUPPORTED,
                        "fa_forward_kvcache on %s: head dims d = %lld, d_v = %lld need the MLA decode kernel: fp16 or "
                        "bf16, d <= %d, d_v <= %d, both multiples of 8, 16-byte aligned cache rows, compute capability "
                        "8.0 or later and %d bytes of shared memory a block (this device: %lld)",
                        FA_RT_NAME, (long long)p->d, (long long)p->d_v, FA_KV_MLA_D, FA_KV_MLA_DV,
                        FA_KV_MLA_SMEM + FA_KV_MLA_STATIC_BYTES, (long long)s->prop.sharedMemPerBlockOptin);
#endif
    const int sink_mma = p->sink && p->seqlen_k > FA_KV_KEY_CHUNK;
    const int mma = wide || (entry->forward_mma && s->prop.major >= 8 && kv.aligned && p->dtype != FA_DTYPE_F32 &&
                             bucket <= 128 && (!p->sink || sink_mma) && p->d_v == p->d && !s->kv_simt);
    const int async_copy = kv.aligned && p->dtype != FA_DTYPE_F32;
#if defined(FA_RUNTIME_HIP) /* no tensor-core decode kernel */
    kv.mma_warps = FA_KV_MMA_MIN_WARPS;
#else
    kv.mma_warps = s->kv_mma_four ? FA_KV_MMA_MIN_WARPS
                                  : fa_kv_mma_warps(bucket, (long long)s->prop.sharedMemPerBlockOptin);
#endif
    if (wide) /* the MLA kernel's warps (its name has none) */
        kv.mma_warps = FA_KV_MLA_WARPS;
    /* the tensor-core kernel's instance for the plain decode step (one new token, no rotary, no
     * softcap or ALiBi), the code for the other calls compiled out (decode_mma_kernels.cuh) */
    kv.one_token = mma && !wide && p->seqlen_q == 1 && !kv.rotary_cos && !fa_score_mod_factors_active(kv.mod);
#if defined(FA_HAVE_SM90) && !defined(FA_RUNTIME_HIP)
    /* The Hopper MLA kernel (decode_mla_sm90_kernels.cuh) on cc 9.0 where v_cache is a view of
     * k_cache's first d_v channels, so that one copy of each key row serves as K and V: for calls
     * with a full 64-row tile per kv head and FA_KV_MLA_SM90_MIN_KEYS keys or more (batch x the
     * longest cache), where its one block an SM outruns the 16-row kernel's; everywhere it fits
     * under FLASHATTN_KERNELS=kv-mla-sm90, nowhere under kv-mla-16-rows */
    int64_t mla_keys;
    const int mla_sm90_pays = p->group * p->seqlen_q >= FA_KV_MLA_SM90_ROWS &&
                              (!fa_mul_ok(p->batch, p->seqlen_k, &mla_keys) || mla_keys >= FA_KV_MLA_SM90_MIN_KEYS);
    kv.mla_sm90 = wide && (s->kv_mla_sm90 || (!s->kv_mla_16_rows && mla_sm90_pays)) && s->prop.major == 9 &&
                  kp->v_cache.data == kp->k_cache.data &&
                  kp->v_cache.sb == kp->k_cache.sb && kp->v_cache.ss == kp->k_cache.ss &&
                  kp->v_cache.sh == kp->k_cache.sh && p->d_v <= p->d &&
                  (long long)s->prop.sharedMemPerBlockOptin >= FA_KV_MLA_SM90_SMEM + FA_KV_MLA_SM90_STATIC_BYTES;
#endif
    /* query rows per kv head, in tiles of 16 (tensor cores; 64 for the Hopper MLA kernel), or 4 or 8 */
    kv.rows = p->group * p->seqlen_q;
    const int row_tile = kv.mla_sm90                          ? FA_KV_MLA_SM90_ROWS
                         : mma                                ? FA_KV_ROW_TILE_MMA
                         : kv.rows <= FA_KV_ROW_TILE_SMALL ? FA_KV_ROW_TILE_SMALL
                                                           : FA_KV_ROW_TILE_LARGE;
    kv.row_tiles = (kv.rows + row_tile - 1) / row_tile;
    int64_t blocks;
    if (!fa_mul_ok(p->batch, p->heads_kv, &blocks) || !fa_mul_ok(blocks, kv.row_tiles, &blocks) || blocks > INT32_MAX)
        return FA_ERROR(ctx, FA_ERR_UNSUPPORTED,
                        "fa_forward_kvcache on %s: batch x heads_kv x row tiles = %lld blocks (at most 2^31 - 1)",
                        FA_RT_NAME, (long long)blocks);
    kv.splits = 1;
    kv.keys_per_split = FA_KV_KEY_CHUNK;
    if (p->seqlen_q > 0) {
        int resident = 1; /* the Hopper MLA kernel: one block a multiprocessor (kv_geometry.h) */
        /* the instance the call launches (an rtc build compiles only that one) */
        fa_rt_error e = (fa_rt_error)(kv.mla_sm90 ? FA_RT(Success)
                                      : mma ? entry->blocks_per_processor_mma((int)p->dtype, bucket, kv.mma_warps,
                                                                              kv.one_token, &resident)
                                            : entry->blocks_per_processor((int)p->dtype, bucket, row_tile, async_copy,
                                                                          &resident));
        if (e != FA_RT(Success))
            return fa_gpu_fail(ctx, e, "fa_forward_kvcache: occupancy of the decode kernel");
        kv.splits = gpu_kv_splits(kp, blocks > 0 ? blocks : 1, (int64_t)resident * s->prop.multiProcessorCount,
                                  mma && !wide && p->sink ? 2 : 1, &kv.keys_per_split);
    }
    /* the lane groups' combine (combine_groups.cuh) where each row's splits are read in the same
     * round trip as its LSEs; the block combine for more splits */
    kv.group_combine = kv.splits > 1 && kv.splits <= FA_KV_COMBINE_AHEAD;
    void *partial = NULL;
    if (kv.splits > 1) {
        int64_t floats;
        if (!fa_mul_ok(p->total_q * p->heads_q, kv.splits, &floats) || !fa_mul_ok(floats, p->d_v + 1, &floats) ||
            (uint64_t)floats > SIZE_MAX / sizeof(float))
            return FA_ERROR(ctx, FA_ERR_OVERFLOW, "fa_forward_kvcache: the split partials' size overflows");
        if (!fa_gpu_scratch_usable(ctx, sizeof(float) * (size_t)floats))
            return refuse_in_capture(ctx, "the split partials' scratch");
        fa_status st = fa_gpu_scratch(ctx, sizeof(float) * (size_t)floats, &partial);
        if (st != FA_SUCCESS)
            return st;
        kv.partial = partial;
    }
    s->fault_armed |= kp->device_check;
    fa_rt_error e = (fa_rt_error)(mma ? entry->forward_mma(&kv, (int)p->dtype, bucket, s->stream)
                                      : entry->forward(&kv, (int)p->dtype, bucket, row_tile, async_copy, s->stream));
    if (e != FA_RT(Success))
        return fa_gpu_fail(ctx, e, "fa_forward_kvcache kernels");
    return FA_SUCCESS;
}
