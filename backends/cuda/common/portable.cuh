/* portable.cuh: the device helpers written once for CUDA and HIP (vendor.h maps the names) that
 * the SIMT kernels (simt/), the decode kernels (decode/) and the MFMA forward (mfma/) share:
 * storage types and their loads, the
 * problem's offsets, the block-sparse lists and the key walk, the dropout factor, the score
 * modifiers, and the launchers' checks. */
#ifndef FA_PORTABLE_COMMON_CUH
#define FA_PORTABLE_COMMON_CUH

#include "common/vendor.h"

#include "empty_row.h"
#include "mask.h"
#include "common/params.h"
#include "common/simt_geometry.h"
#include "philox.h"
#include "score_mod.h"

#if !defined(__CUDACC_RTC__) && !defined(__HIPCC_RTC__) /* NVRTC: common/rtc_prelude.cuh (through vendor.h) */
#include <stdint.h>
#endif

namespace fa_gpu {

/* Query and key tiles: the granularity at which the core builds block-sparse lists for the CUDA
 * backend (cuda_tile_limits), so a tile's list entry is found directly; the values are
 * common/simt_geometry.h's, which the driver-API launcher reads too. */
constexpr int BM = FA_SIMT_BM, BN = FA_SIMT_BN, THREADS = FA_SIMT_THREADS;
static_assert(BM == FA_GPU_BLOCK && BN == FA_GPU_BLOCK, "tiles must match the core's block lists");

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
FA_DEVICE int64_t offset_of(const fa_gpu_tensor &t, int64_t b, int64_t row, int64_t h)
{
    return b * t.sb + row * t.ss + h * t.sh;
}

/* The block-mask bit of query head h's local element (i, j) (fa_problem_block_keep). */
FA_DEVICE bool block_keep(const fa_gpu_params &p, int64_t h, int64_t i, int64_t j)
{
    const int64_t mh = p.bm_heads == 1 ? 0 : h;
    return p.bm_bits[(mh * p.bm_rows + i / p.bm_bq) * p.bm_cols + j / p.bm_bk] != 0;
}

/* Class of (64-row query tile qt, 64-key tile kt) in the core's list of query head h: EMPTY when
 * the list has no entry (binary search: a row's columns ascend). */
FA_DEVICE int list_class(const fa_gpu_params &p, int64_t h, int64_t qt, int64_t kt)
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

FA_DEVICE key_walk walk_of(const fa_gpu_params &p, const fa_mask &m, int64_t h, int64_t qt, int64_t q0,
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
FA_DEVICE int64_t walk_tile(const fa_gpu_params &p, const key_walk &w, int64_t it, int *list_cls)
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

/* The dropout factor of element (b, h, i, j): 0 or 1/(1-p), from its 16 bits of its Philox block
 * (fa_dropout_word picks the word by selects, so the block stays in registers). */
FA_DEVICE float drop_factor(const fa_gpu_params &p, int64_t b, int64_t h, int64_t i, int64_t j)
{
    const fa_philox4 bits = fa_dropout_block(p.seed, p.offset, (fa_u64)b, (fa_u64)p.heads_q, (fa_u64)h, (fa_u64)i,
                                             (fa_u64)j);
    return fa_dropout_bits(fa_dropout_word(bits, (fa_u64)j), (fa_u64)j) >= p.dropout_threshold ? p.dropout_scale
                                                                                                : 0.0f;
}

/* The score modifiers: fa_gpu_score_mod (common/params.h) once per head, so the ALiBi
 * slope is loaded once, then fa_score_mod_apply_at (core/score_mod.h) on every computed score
 * before the mask; fa_gpu_has_score_mod picks the kernels' MOD instantiation, and the plain
 * instances carry none of this. */

/* ---------------------------------------------------------------- launch checks */

#if !defined(__CUDACC_RTC__) && !defined(__HIPCC_RTC__) /* host code: NVRTC and hipRTC compile the kernels alone */

/* common/simt_geometry.h's rules, under the names the kernels' launchers use */
inline int bucket_of(int64_t d)
{
    return fa_simt_bucket_of(d);
}

template <class S> inline bool view_vec4(const fa_gpu_tensor &t)
{
    return fa_simt_view_vec4(&t, sizeof(typename S::T));
}

inline bool grid_ok(int64_t x, int64_t y, int64_t z)
{
    return fa_simt_grid_ok(x, y, z);
}
#endif

} // namespace fa_gpu

#endif /* FA_PORTABLE_COMMON_CUH */
