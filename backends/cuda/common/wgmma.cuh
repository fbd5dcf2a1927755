/* wgmma.cuh: the Hopper (sm_90a) warpgroup matrix instructions the sm90 kernels and the Hopper MLA
 * decode kernel use: wgmma.mma_async with fp32 accumulators, A from shared memory (SS) or registers (RS), B from
 * shared memory, and their fences. Shared-memory operands are described by 64-bit matrix
 * descriptors over the canonical no-swizzle layout: 8 x 8 "core matrices" of 16-byte rows stored
 * as 128 contiguous bytes (blocked(), below). Accumulators of m64nNk16: thread t of the
 * warpgroup holds, for each n8 block j, rows 16 (t / 32) + (t % 32) / 4 (+ 8) and columns
 * 8 j + 2 (t % 4) (+ 1): per warp the layout of mma.sync m16n8, so the sm80 softmax step and the
 * accumulator-to-A conversion apply unchanged. Compile for -gencode=arch=compute_90a,code=sm_90a. */
#ifndef FA_GPU_WGMMA_CUH
#define FA_GPU_WGMMA_CUH

#if defined(__CUDACC_RTC__) /* NVRTC: the toolkit's names from common/rtc_prelude.cuh */
#include "common/rtc_prelude.cuh"
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#endif

namespace fa_gpu::sm90 {

/* Byte offset of element (r, c) in a [rows][C] tile of 16-bit elements stored as core matrices:
 * row block r / 8 (C / 8 matrices each), matrix c / 8, row r % 8 (16 bytes), column c % 8. One
 * 16-byte chunk e of the tile in this order is rows 8 (e / 8 / (C / 8)) + e % 8, columns
 * 8 ((e / 8) % (C / 8)): chunk e lands at byte 16 e. */
template <int C> __device__ __forceinline__ int blocked(int r, int c)
{
    return (r / 8) * (C / 8) * 128 + (c / 8) * 128 + (r % 8) * 16 + (c % 8) * 2;
}

/* Descriptor of a no-swizzle operand at shared address addr: lbo, sbo are the byte distances
 * between core matrices neighbouring along K (leading) and along M or N (stride). */
__device__ __forceinline__ uint64_t desc(uint32_t addr, uint32_t lbo, uint32_t sbo)
{
    return (uint64_t)((addr & 0x3ffffu) >> 4) | ((uint64_t)((lbo & 0x3ffffu) >> 4) << 16) |
           ((uint64_t)((sbo & 0x3ffffu) >> 4) << 32);
}

/* The same over the 128-byte swizzled layout (sw128(), below; every 8-row atom 1024-byte
 * aligned). K-major operands: rows 128 bytes apart, sbo between 8-row groups (1024), lbo unused;
 * a k-step inside the 128-byte row advances the start address (the hardware swizzles the final
 * address). MN-major operands: lbo between 64-element blocks along M or N, sbo between 8-row
 * groups along K. */
__device__ __forceinline__ uint64_t desc_sw128(uint32_t addr, uint32_t lbo, uint32_t sbo)
{
    return desc(addr, lbo, sbo) | (1ull << 62);
}

/* Byte offset of 16-byte chunk c (8 elements) of row r in a ROWS-row tile stored in the 128-byte
 * swizzled layout: 64-column blocks of ROWS rows x 128 bytes one after another, chunk c % 8 of a
 * row at position (c % 8) ^ (r % 8). */
template <int ROWS> __device__ __forceinline__ uint32_t sw128(int r, int c)
{
    return (uint32_t)((c >> 3) * ROWS * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

__device__ __forceinline__ void fence()
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void commit()
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

template <int N> __device__ __forceinline__ void wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

/* Ordinary shared-memory writes (cp.async included) made visible to the async proxy that wgmma
 * reads through; each writing thread, before the barrier. */
__device__ __forceinline__ void fence_proxy_async()
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/* mbarriers (shared memory, 8-byte aligned): initialise with an expected arrival count; wait
 * for the completion of the phase with the given parity; arrive; and arrive when all of this
 * thread's earlier cp.async copies have landed (.noinc: that arrival counts toward the expected
 * count). */
__device__ __forceinline__ void mbar_init(uint32_t bar, int count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity)
{
    asm volatile("{\n.reg .pred P1;\nWAIT:\nmbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n@P1 bra DONE;\n"
                 "bra WAIT;\nDONE:\n}\n" ::"r"(bar),
                 "r"(parity)
                 : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint32_t bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void mbar_arrive_cp_async(uint32_t bar)
{
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

/* Bulk asynchronous reduction (the TMA unit, no tensor map): global[dst .. dst + bytes) += the
 * fp32 values at shared address src; 16-byte aligned, bytes a multiple of 16. Completion is
 * tracked per issuing thread in bulk groups: commit, then wait until at most N groups have not
 * finished reading their source (wait_read) or completed (wait). */
__device__ __forceinline__ void bulk_reduce_add_f32(float *dst, uint32_t src, uint32_t bytes)
{
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst), "r"(src),
                 "r"(bytes)
                 : "memory");
}

__device__ __forceinline__ void bulk_commit()
{
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}

template <int N> __device__ __forceinline__ void bulk_wait_read()
{
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}

template <int N> __device__ __forceinline__ void bulk_wait()
{
    asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}

/* Register reallocation between warpgroups (every warp of the warpgroup executes it). */
template <int N> __device__ __forceinline__ void setmaxnreg_inc()
{
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

template <int N> __device__ __forceinline__ void setmaxnreg_dec()
{
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}

/* Arrive on named barrier ID (COUNT threads take part, some syncing, some arriving) without waiting. */
template <int ID, int COUNT> __device__ __forceinline__ void bar_arrive()
{
    asm volatile("bar.arrive %0, %1;\n" ::"n"(ID), "n"(COUNT) : "memory");
}

/* Named barrier ID among COUNT threads (whole warps). */
template <int ID, int COUNT> __device__ __forceinline__ void bar_sync()
{
    asm volatile("bar.sync %0, %1;\n" ::"n"(ID), "n"(COUNT) : "memory");
}

#define FA_WG_ACC8(d, i)                                                                                            \
    "+f"(d[i + 0]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
        "+f"(d[i + 7])
#define FA_WG_ACC16(d) FA_WG_ACC8(d, 0), FA_WG_ACC8(d, 8)
#define FA_WG_ACC32(d) FA_WG_ACC8(d, 0), FA_WG_ACC8(d, 8), FA_WG_ACC8(d, 16), FA_WG_ACC8(d, 24)
#define FA_WG_ACC64(d) FA_WG_ACC32(d), FA_WG_ACC8(d, 32), FA_WG_ACC8(d, 40), FA_WG_ACC8(d, 48), FA_WG_ACC8(d, 56)
#define FA_WG_ACC80(d) FA_WG_ACC64(d), FA_WG_ACC8(d, 64), FA_WG_ACC8(d, 72)
#define FA_WG_R16 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}"
#define FA_WG_R32                                                                                                   \
    "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,"    \
    "%29,%30,%31}"
#define FA_WG_R80                                                                                                   \
    "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,"    \
    "%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,"   \
    "%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79}"
#define FA_WG_R64                                                                                                   \
    "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,"    \
    "%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,"   \
    "%56,%57,%58,%59,%60,%61,%62,%63}"

/* One specialisation per (operand type, shape), written by these macros: TY is the C++ type, TN
 * its PTX name. */
/* N accumulators in registers R (ACC); DESC: the descriptors' operands, SCALE: the operand that
 * says whether D accumulates (0: D = A B) */
#define FA_WG_SS(NAME, TY, TN, N, R, ACC, DESC, SCALE, TRANS)                                                      \
    template <> struct NAME<TY, N> {                                                                                \
        static __device__ __forceinline__ void run(float(&d)[N / 2], uint64_t da, uint64_t db, int accumulate)     \
        {                                                                                                           \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " SCALE ", 0;\nwgmma.mma_async.sync.aligned.m64n" #N    \
                         "k16.f32." TN "." TN " " R ", " DESC ", p, 1, 1, " TRANS ";\n}\n"                           \
                         : ACC(d)                                                                                   \
                         : "l"(da), "l"(db), "r"(accumulate));                                                     \
        }                                                                                                           \
    };
/* N accumulators in registers R (ACC), the A fragment and B's descriptor at operands A_OPS */
#define FA_WG_RS(TY, TN, N, R, ACC, A_OPS)                                                                          \
    template <> struct rs<TY, N> {                                                                                  \
        static __device__ __forceinline__ void run(float(&d)[N / 2], const uint32_t(&a)[4], uint64_t db)           \
        {                                                                                                           \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\nwgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TN \
                         "." TN " " R ", " A_OPS ", p, 1, 1, 1;\n}\n"                                                 \
                         : ACC(d)                                                                                   \
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));                                    \
        }                                                                                                           \
    };

/* D(64 x N) (+)= A(64 x 16, shared, K-major) B(16 x N, shared, K-major: B^T stored [n][k]). */
template <typename T, int N> struct ss;
FA_WG_SS(ss, __nv_bfloat16, "bf16", 32, FA_WG_R16, FA_WG_ACC16, "%16, %17", "%18", "0, 0")
FA_WG_SS(ss, __half, "f16", 32, FA_WG_R16, FA_WG_ACC16, "%16, %17", "%18", "0, 0")
FA_WG_SS(ss, __nv_bfloat16, "bf16", 64, FA_WG_R32, FA_WG_ACC32, "%32, %33", "%34", "0, 0")
FA_WG_SS(ss, __half, "f16", 64, FA_WG_R32, FA_WG_ACC32, "%32, %33", "%34", "0, 0")
FA_WG_SS(ss, __nv_bfloat16, "bf16", 128, FA_WG_R64, FA_WG_ACC64, "%64, %65", "%66", "0, 0")
FA_WG_SS(ss, __half, "f16", 128, FA_WG_R64, FA_WG_ACC64, "%64, %65", "%66", "0, 0")
FA_WG_SS(ss, __nv_bfloat16, "bf16", 160, FA_WG_R80, FA_WG_ACC80, "%80, %81", "%82", "0, 0")
FA_WG_SS(ss, __half, "f16", 160, FA_WG_R80, FA_WG_ACC80, "%80, %81", "%82", "0, 0")

/* The same with both operands MN-major (A stored [k][m], B stored [k][n], both transposed by the
 * instruction): the backward's dQ = dS K from dS^T and K as they lie in shared memory. */
template <typename T, int N> struct ss_tt;
FA_WG_SS(ss_tt, __nv_bfloat16, "bf16", 64, FA_WG_R32, FA_WG_ACC32, "%32, %33", "%34", "1, 1")
FA_WG_SS(ss_tt, __half, "f16", 64, FA_WG_R32, FA_WG_ACC32, "%32, %33", "%34", "1, 1")
FA_WG_SS(ss_tt, __nv_bfloat16, "bf16", 128, FA_WG_R64, FA_WG_ACC64, "%64, %65", "%66", "1, 1")
FA_WG_SS(ss_tt, __half, "f16", 128, FA_WG_R64, FA_WG_ACC64, "%64, %65", "%66", "1, 1")

/* A K-major (stored [m][k]), B MN-major (stored [k][n], transposed by the instruction): the
 * d 256 backward's dV += P^T dO and dK += dS^T Q, P^T and dS^T from shared memory. */
template <typename T, int N> struct ss_nt;
FA_WG_SS(ss_nt, __nv_bfloat16, "bf16", 128, FA_WG_R64, FA_WG_ACC64, "%64, %65", "%66", "0, 1")
FA_WG_SS(ss_nt, __half, "f16", 128, FA_WG_R64, FA_WG_ACC64, "%64, %65", "%66", "0, 1")

/* D(64 x N) += A(64 x 16, registers: the mma.sync A fragment per warp) B(16 x N, shared,
 * MN-major: stored [k][n], transposed by the instruction). */
template <typename T, int N> struct rs;
FA_WG_RS(__nv_bfloat16, "bf16", 64, FA_WG_R32, FA_WG_ACC32, "{%32,%33,%34,%35}, %36")
FA_WG_RS(__half, "f16", 64, FA_WG_R32, FA_WG_ACC32, "{%32,%33,%34,%35}, %36")
FA_WG_RS(__nv_bfloat16, "bf16", 128, FA_WG_R64, FA_WG_ACC64, "{%64,%65,%66,%67}, %68")
FA_WG_RS(__half, "f16", 128, FA_WG_R64, FA_WG_ACC64, "{%64,%65,%66,%67}, %68")
#undef FA_WG_SS
#undef FA_WG_RS

} // namespace fa_gpu::sm90

#endif /* FA_GPU_WGMMA_CUH */
