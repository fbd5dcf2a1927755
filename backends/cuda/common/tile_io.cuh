/* tile_io.cuh: row pointers into a tensor and the copies of row tiles between global and shared
 * memory (cp.async when rows are 16-byte aligned, plain loads otherwise). */
#ifndef FA_CUDA_COMMON_TILE_IO_CUH
#define FA_CUDA_COMMON_TILE_IO_CUH

#include "common/params.h"
#include "common/primitives.cuh"
#include "common/tile_geometry.cuh"

namespace fa_gpu {

template <typename T>
__device__ __forceinline__ const T *row_ptr(const fa_gpu_tensor &t, int64_t b, int64_t row, int64_t h)
{
    return static_cast<const T *>(t.data) + b * t.sb + row * t.ss + h * t.sh;
}

/* ROWS rows x D columns of head h into a shared tile (leading dimension D + 8), rows >= nrows and
 * columns >= d zero-filled. ALIGNED: 16-byte cp.async (caller commits and waits). */
template <typename T, int D, bool ALIGNED, int ROWS = BLOCK, int NT = THREADS>
__device__ __forceinline__ void load_tile(T *dst, const fa_gpu_tensor &t, int64_t b, int64_t row0, int64_t nrows,
                                          int64_t h, int d)
{
    constexpr int LD = D + 8;
    if (ALIGNED && NT % (D / 8) == 0) {
        /* each thread copies one 16-byte column chunk of every RS-th row: one pointer and one
         * shared address, both advanced by a constant (nothing per row kept in registers) */
        constexpr int CHUNKS = D / 8, RS = NT / CHUNKS;
        const int c = (threadIdx.x % CHUNKS) * 8, r0 = threadIdx.x / CHUNKS;
        const bool cvalid = c < d;
        const T *src = row_ptr<T>(t, b, row0 + r0, h) + c;
        const int64_t step = RS * t.ss;
        uint32_t sdst = smem_addr(dst + r0 * LD + c);
#pragma unroll
        for (int r = r0; r < ROWS; r += RS) {
            const bool valid = cvalid && r < nrows;
            cp_async16_s(sdst, valid ? src : static_cast<const T *>(t.data), valid);
            src += step;
            sdst += RS * LD * (int)sizeof(T);
        }
    } else if (ALIGNED) {
        constexpr int CHUNKS = D / 8;
#pragma unroll 1
        for (int i = threadIdx.x; i < ROWS * CHUNKS; i += NT) {
            int r = i / CHUNKS, c = (i % CHUNKS) * 8;
            bool valid = r < nrows && c < d;
            const T *src = valid ? row_ptr<T>(t, b, row0 + r, h) + c : static_cast<const T *>(t.data);
            cp_async16(dst + r * LD + c, src, valid);
        }
    } else {
        for (int i = threadIdx.x; i < ROWS * D; i += NT) {
            int r = i / D, c = i % D;
            T v = elem<T>::from_float(0.0f);
            if (r < nrows && c < d)
                v = row_ptr<T>(t, b, row0 + r, h)[c];
            dst[r * LD + c] = v;
        }
    }
}

/* The reverse: rows < nrows, columns < d of a shared tile to head h of t. ALIGNED: 16-byte
 * stores where a whole chunk lies inside d. The caller synchronises before. */
template <typename T, int D, bool ALIGNED, int ROWS = BLOCK, int NT = THREADS>
__device__ __forceinline__ void store_tile(const fa_gpu_tensor &t, const T *src, int64_t b, int64_t row0,
                                           int64_t nrows, int64_t h, int d)
{
    constexpr int LD = D + 8, CHUNKS = D / 8;
    for (int i = threadIdx.x; i < ROWS * CHUNKS; i += NT) {
        const int r = i / CHUNKS, c = (i % CHUNKS) * 8;
        if (r >= nrows || c >= d)
            continue;
        T *dst = static_cast<T *>(t.data) + b * t.sb + (row0 + r) * t.ss + h * t.sh + c;
        if (ALIGNED && c + 8 <= d) {
            *reinterpret_cast<uint4 *>(dst) = *reinterpret_cast<const uint4 *>(src + r * LD + c);
        } else {
            for (int e = 0; e < 8 && c + e < d; ++e)
                dst[e] = src[r * LD + c + e];
        }
    }
}

} // namespace fa_gpu

#endif
