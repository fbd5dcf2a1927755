/* tensor_map.cuh: the tensor maps through which the Hopper kernels' producers load whole tiles
 * with the tensor memory accelerator (TMA), encoded on the host (the device side of those loads is
 * tma.cuh). A map describes
 * one view of a dense call (K or V for the forward, Q or dO for the backward) as a 4-D tensor
 * (head dim, rows, heads, batch) with the view's strides, read in boxes of 64 columns x the
 * kernel's tile rows, written to shared memory in the 128-byte swizzled layout that wgmma reads
 * (sw128 in common/wgmma.cuh; every box 1024-byte aligned); rows past the sequence and columns
 * past d read as zeros. The maps' shapes come from common/sm90_geometry.h, which the run-time
 * compiled build's launcher (host/rtc_sm90.c) encodes as well; the encoder here is the driver's
 * cuTensorMapEncodeTiled, found at run time through the runtime (no link dependency on libcuda).
 * Varlen calls keep the cp.async producers: a map cannot stop at a sequence's end. */
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
#include "common/sm90_geometry.h"

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

static_assert(FA_SM90_TMA_FLOAT16 == CU_TENSOR_MAP_DATA_TYPE_FLOAT16 &&
                  FA_SM90_TMA_BFLOAT16 == CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 &&
                  FA_SM90_TMA_INTERLEAVE_NONE == CU_TENSOR_MAP_INTERLEAVE_NONE &&
                  FA_SM90_TMA_SWIZZLE_128B == CU_TENSOR_MAP_SWIZZLE_128B &&
                  FA_SM90_TMA_L2_PROMOTION_256B == CU_TENSOR_MAP_L2_PROMOTION_L2_256B &&
                  FA_SM90_TMA_OOB_FILL_NONE == CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
              "common/sm90_geometry.h numbers the tensor maps' enums as cuda.h does");

/* The 4-D map of view t (cols columns, rows rows per sequence, heads heads, p.batch sequences) in boxes of 64
 * columns x box_rows rows (common/sm90_geometry.h's fa_sm90_map_shape_of, which host/rtc_sm90.c
 * encodes too); false where TMA cannot describe it (the caller keeps cp.async). */
template <typename T>
inline bool make_map(CUtensorMap *map, const fa_gpu_tensor &t, const fa_gpu_params &p, int64_t cols, int64_t rows,
                     int64_t heads, int box_rows)
{
    const encode_tiled_fn enc = encode_tiled();
    fa_sm90_map_shape m;
    if (!enc || !fa_sm90_map_shape_of(&t, &p, cols, rows, heads, box_rows, sizeof(T),
                                      std::is_same<T, __half>::value ? FA_SM90_TMA_FLOAT16 : FA_SM90_TMA_BFLOAT16, &m))
        return false;
    return enc(map, (CUtensorMapDataType)m.data_type, 4, t.data, m.dims, m.strides, m.box, m.step,
               (CUtensorMapInterleave)FA_SM90_TMA_INTERLEAVE_NONE, (CUtensorMapSwizzle)FA_SM90_TMA_SWIZZLE_128B,
               (CUtensorMapL2promotion)FA_SM90_TMA_L2_PROMOTION_256B,
               (CUtensorMapFloatOOBfill)FA_SM90_TMA_OOB_FILL_NONE) == CUDA_SUCCESS;
}

/* The forward's maps: K then V of a dense call, key tiles of box_rows rows; false for varlen
 * calls and views TMA cannot describe. */
template <typename T> inline bool make_kv_maps(const fa_gpu_params &p, int box_rows, tile_maps *out)
{
    return !p.cu_k && make_map<T>(&out->first, p.k, p, p.d, p.seqlen_k, p.heads_kv, box_rows) &&
           make_map<T>(&out->second, p.v, p, p.d_v, p.seqlen_k, p.heads_kv, box_rows);
}

/* The backward's maps: Q then dO of a dense call, query tiles of box_rows rows. */
template <typename T> inline bool make_qdo_maps(const fa_gpu_params &p, int box_rows, tile_maps *out)
{
    return !p.cu_q && make_map<T>(&out->first, p.q, p, p.d, p.seqlen_q, p.heads_q, box_rows) &&
           make_map<T>(&out->second, p.dout, p, p.d_v, p.seqlen_q, p.heads_q, box_rows);
}

} // namespace fa_gpu::sm90

#endif
