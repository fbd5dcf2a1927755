/* mfma.cuh: the two wavefront-wide operations the MFMA forward (forward.cuh) is written in, for
 * CDNA's 64-lane wavefronts:
 *   mma32   D(32 x 32, fp32) += A(32 x 8) B(8 x 32), fp16 or bf16 operands: v_mfma_f32_32x32x8f16 /
 *           v_mfma_f32_32x32x8bf16_1k (gfx90a, gfx94x);
 *   xor32   a value from lane l ^ 32 (the other half of the wavefront).
 * Operand layout of the 32x32x8 instructions (AMD's CDNA ISA, "matrix fused multiply-add"), lane
 * l = 0..63, i = 0..3, r = 0..15:
 *   A[l % 32][4 (l / 32) + i] is element i of lane l's A operand;
 *   B[4 (l / 32) + i][l % 32] is element i of lane l's B operand;
 *   D[8 (r / 4) + 4 (l / 32) + r % 4][l % 32] is accumulator r of lane l.
 * Compiled as HIP for a CDNA target these are the instructions. Compiled as CUDA (test builds of
 * the CUDA backend, FLASHATTN_KERNELS=mfma-emulated) a block of 64 threads (two warps) stands
 * for one wavefront and both operations go through shared memory with exactly the semantics above,
 * so the forward's fragment indexing, masking and softmax run on an NVIDIA GPU against the same
 * conformance grid; only the instruction itself is not the hardware's. Every lane of the wavefront
 * must call both (they contain barriers when emulated). */
#ifndef FA_HIP_MFMA_CUH
#define FA_HIP_MFMA_CUH

#include "common/mfma_geometry.h"
#include "common/vendor.h"

namespace fa_gpu::mfma {

constexpr int WAVE = FA_MFMA_WAVE; /* common/mfma_geometry.h */

#if defined(__HIPCC__)
/* the device passes for CDNA targets carry the instructions; other targets (RDNA, gfx1030) get no
 * body: the backend never selects this path on them */
#if !defined(__HIP_DEVICE_COMPILE__) || defined(__gfx90a__) || defined(__gfx940__) || defined(__gfx941__) ||        \
    defined(__gfx942__)
#define FA_MFMA_AVAILABLE 1
#else
#define FA_MFMA_AVAILABLE 0
#endif

typedef float f32x16 __attribute__((ext_vector_type(16)));
typedef _Float16 f16x4 __attribute__((ext_vector_type(4)));
typedef short i16x4 __attribute__((ext_vector_type(4)));

struct scratch {}; /* no shared memory needed */

/* bf16: whether the operands' 16-bit words are bf16 (else fp16) */
template <bool bf16>
FA_DEVICE void mma32(scratch &, const unsigned short (&a)[4], const unsigned short (&b)[4], float (&acc)[16])
{
#if FA_MFMA_AVAILABLE && defined(__HIP_DEVICE_COMPILE__)
    f32x16 c;
#pragma unroll
    for (int r = 0; r < 16; ++r)
        c[r] = acc[r];
    if constexpr (bf16) {
        const i16x4 va = {(short)a[0], (short)a[1], (short)a[2], (short)a[3]};
        const i16x4 vb = {(short)b[0], (short)b[1], (short)b[2], (short)b[3]};
        c = __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(va, vb, c, 0, 0, 0);
    } else {
        f16x4 va, vb;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            va[i] = __builtin_bit_cast(_Float16, a[i]);
            vb[i] = __builtin_bit_cast(_Float16, b[i]);
        }
        c = __builtin_amdgcn_mfma_f32_32x32x8f16(va, vb, c, 0, 0, 0);
    }
#pragma unroll
    for (int r = 0; r < 16; ++r)
        acc[r] = c[r];
#else
    (void)a;
    (void)b;
    (void)acc;
#endif
}

FA_DEVICE float xor32(scratch &, float x)
{
    return __shfl_xor(x, 32);
}

FA_DEVICE int lane_id()
{
    return (int)(threadIdx.x % WAVE);
}

#elif defined(__CUDACC__)
#define FA_MFMA_AVAILABLE 1

/* one wavefront's exchange area: both operands widened, and one word per lane for xor32 */
struct scratch {
    float a[WAVE * 4], b[WAVE * 4], x[WAVE];
};

FA_DEVICE int lane_id()
{
    return (int)(threadIdx.x % WAVE);
}

template <bool bf16> FA_DEVICE float widen(unsigned short u)
{
    return bf16 ? fa_bf16_bits_to_float(u) : fa_f16_bits_to_float(u);
}

template <bool bf16>
FA_DEVICE void mma32(scratch &s, const unsigned short (&a)[4], const unsigned short (&b)[4], float (&acc)[16])
{
    const int l = lane_id();
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        s.a[l * 4 + i] = widen<bf16>(a[i]);
        s.b[l * 4 + i] = widen<bf16>(b[i]);
    }
    __syncthreads();
    const int col = l % 32, half = l / 32;
#pragma unroll
    for (int r = 0; r < 16; ++r) {
        const int row = 8 * (r / 4) + 4 * half + r % 4;
        float x = acc[r];
#pragma unroll
        for (int k = 0; k < 8; ++k) /* A[row][k] from lane row + 32 (k / 4), B[k][col] from col + 32 (k / 4) */
            x = fmaf(s.a[(row + 32 * (k / 4)) * 4 + k % 4], s.b[(col + 32 * (k / 4)) * 4 + k % 4], x);
        acc[r] = x;
    }
    __syncthreads();
}

FA_DEVICE float xor32(scratch &s, float x)
{
    const int l = lane_id();
    s.x[l] = x;
    __syncthreads();
    const float y = s.x[l ^ 32];
    __syncthreads();
    return y;
}
#endif

} // namespace fa_gpu::mfma

#endif /* FA_HIP_MFMA_CUH */
