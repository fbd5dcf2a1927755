/* tensor_map.cuh: the tensor maps through which the Hopper kernels' producers load whole tiles
 * with the tensor memory accelerator (TMA), encoded on the host (the device side of those loads is
 * tma.cuh). A map describes
 * one view of a dense call (K or V for the forward, Q or dO for the backward) as a 4-D tensor
 * (head dim, rows, heads, batch) with the view's strides, read in boxes of 64 columns x the
 * kernel's tile rows, written to shared memory in the 128-byte swizzled layout that wgmma reads
 * (sw128 in primitives.cuh; every box 1024-byte aligned); rows past the sequence and columns
 * past d read as zeros. The encoder is the driver's cuTensorMapEncodeTiled, found at run time
 * through the runtime (no link dependency on libcuda). Varlen calls keep the cp.async
 * producers: a map cannot stop at a sequence's end. */
#ifndef FA_CUDA_SM90_TENSOR_MAP_CUH
#define FA_CUDA_SM90_TENSOR_MAP_CUH

#include "sm90/tma.cuh"

#include <cuda.h> /* CUtensorMap and its enums only */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstring>
#include <type_traits>

#include "common/params.h"

namespace fa_gpu::sm90 {

using encode_tiled_fn = CUresult (*)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                     const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                     CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

/* The driver's encoder, looked up once (null where the driver has none). */
inline encode_tiled_fn encode_tiled()
{
    static const encode_tiled_fn fn = [] {
        void *f = nullptr;
        cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) !=
                cudaSuccess ||
            q != cudaDriverEntryPointSuccess)
            f = nullptr;
        cudaGetLastError(); /* a failed lookup leaves no error behind for the launch check */
        return reinterpret_cast<encode_tiled_fn>(f);
    }();
    return fn;
}

/* A stride in bytes as TMA takes it: a multiple of 16 below 2^40 (any such value where the
 * dimension has one index, as its stride is then never used). */
inline bool tma_stride(int64_t elems, int64_t extent, size_t elem_bytes, cuuint64_t *out)
{
    if (extent == 1) {
        *out = 16;
        return true;
    }
    if (elems <= 0 || elems > ((int64_t)1 << 40) / (int64_t)elem_bytes)
        return false;
    *out = (cuuint64_t)elems * elem_bytes;
    return *out % 16 == 0;
}

/* The 4-D map of view t (rows rows per sequence, heads heads, p.batch sequences) in boxes of 64
 * columns x box_rows rows; false where TMA cannot describe it (the caller keeps cp.async). */
template <typename T>
inline bool make_map(CUtensorMap *map, const fa_gpu_tensor &t, const fa_gpu_params &p, int64_t rows, int64_t heads,
                     int box_rows)
{
    const encode_tiled_fn enc = encode_tiled();
    const int64_t limit = (int64_t)1 << 31; /* coordinates are 32-bit signed */
    if (!enc || !t.data || (uintptr_t)t.data % 16 != 0 || p.d > 256 || rows < 1 || rows >= limit || heads >= limit ||
        p.batch >= limit)
        return false;
    const cuuint64_t dims[4] = {(cuuint64_t)p.d, (cuuint64_t)rows, (cuuint64_t)heads, (cuuint64_t)p.batch};
    cuuint64_t strides[3];
    if (!tma_stride(t.ss, rows, sizeof(T), &strides[0]) || !tma_stride(t.sh, heads, sizeof(T), &strides[1]) ||
        !tma_stride(t.sb, p.batch, sizeof(T), &strides[2]))
        return false;
    const cuuint32_t box[4] = {64, (cuuint32_t)box_rows, 1, 1}, step[4] = {1, 1, 1, 1};
    const CUtensorMapDataType type =
        std::is_same<T, __half>::value ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    return enc(map, type, 4, t.data, dims, strides, box, step, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

/* The forward's maps: K then V of a dense call, key tiles of box_rows rows; false for varlen
 * calls and views TMA cannot describe. */
template <typename T> inline bool make_kv_maps(const fa_gpu_params &p, int box_rows, tile_maps *out)
{
    return !p.cu_k && make_map<T>(&out->first, p.k, p, p.seqlen_k, p.heads_kv, box_rows) &&
           make_map<T>(&out->second, p.v, p, p.seqlen_k, p.heads_kv, box_rows);
}

/* The backward's maps: Q then dO of a dense call, query tiles of box_rows rows. */
template <typename T> inline bool make_qdo_maps(const fa_gpu_params &p, int box_rows, tile_maps *out)
{
    return !p.cu_q && make_map<T>(&out->first, p.q, p, p.seqlen_q, p.heads_q, box_rows) &&
           make_map<T>(&out->second, p.dout, p, p.seqlen_q, p.heads_q, box_rows);
}

} // namespace fa_gpu::sm90

#endif
