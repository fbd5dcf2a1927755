/* nv_mma.cl: NVIDIA's warp-level matrix instructions as inline PTX, for the matrix-path kernels
 * (FA_KERNELS 6: forward_mma.cl, 7: backward_mma.cl). Compiled only into programs the host builds for a device whose OpenCL driver
 * is NVIDIA's and whose compute capability is 8.0 or newer (runtime.c, ocl_open); no other OpenCL
 * compiler ever sees it. NVIDIA's OpenCL forms warps from 32 consecutive work-items of a 1-D
 * work-group, so a work-item's lane is its %laneid. Fragment layouts (PTX ISA, "Matrix Fragments
 * for mma.m16n8k16"), with g = lane / 4 and t = lane % 4:
 *   A (16 x 16, row-major)  a.x: row g, columns 2t, 2t + 1; a.y: row g + 8; a.z: row g, columns
 *                            2t + 8, 2t + 9; a.w: row g + 8, columns 2t + 8, 2t + 9
 *   B (16 x 8, column)      b.x: rows 2t, 2t + 1 of column g; b.y: rows 2t + 8, 2t + 9
 *   C, D (16 x 8, fp32)     .x, .y: row g, columns 2t, 2t + 1; .z, .w: row g + 8
 * Each 32-bit register holds two 16-bit values, the lower column (or row) in the low half.
 *
 * With FA_NV_EMULATE=1 (FLASHATTN_KERNELS=opencl-matrix=emulate, any device) the same functions are
 * plain OpenCL C: the lanes exchange their fragments through a __local area per warp (FA_NV_XS,
 * 6 words per lane) between work-group barriers, so that the matrix-path kernels' fragment
 * layouts, softmax and masking run under PoCL in CI. Every call must then be reached by the whole
 * work-group, which the kernels keep to (their calls sit in uniform control flow). Products are
 * summed in fp32 in k order, which the tests' float64-derived bounds cover as they do the tensor
 * cores' own order. */
#if FA_KERNELS == 6 || FA_KERNELS == 7
#ifndef FA_NV_EMULATE
#define FA_NV_EMULATE 0
#endif

#ifndef FA_NV_LDMATRIX
#define FA_NV_LDMATRIX 1 /* B fragments by ldmatrix (0: by 16- and 32-bit __local reads, for comparison) */
#endif
#ifndef FA_NV_CPASYNC
#define FA_NV_CPASYNC 1 /* global -> __local copies by cp.async (0: through registers, for comparison) */
#endif

#if !FA_NV_EMULATE

static inline uint fa_nv_lane(void)
{
    uint lane;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
    return lane;
}

/* c + A B for one m16n8k16 product: fp16 or bf16 operands (FA_DTYPE), fp32 accumulation. */
static inline float4 fa_nv_mma(float4 c, uint4 a, uint2 b)
{
    float d0, d1, d2, d3;
#if FA_DTYPE == 2
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%11,%12,%13};"
        : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3)
        : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b.x), "r"(b.y), "f"(c.x), "f"(c.y), "f"(c.z), "f"(c.w));
#else
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%11,%12,%13};"
        : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3)
        : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b.x), "r"(b.y), "f"(c.x), "f"(c.y), "f"(c.z), "f"(c.w));
#endif
    return (float4)(d0, d1, d2, d3);
}

/* Two fp32 values rounded to nearest even into one register of the operand type, lo in the low half. */
static inline uint fa_nv_pack(float lo, float hi)
{
    uint r;
#if FA_DTYPE == 2
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
#else
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
#endif
    return r;
}

/* The maximum and the sum over the four lanes of a quad (the lanes that share a fragment row). */
static inline float fa_nv_quad_max(float x)
{
    float y;
    asm volatile("shfl.sync.bfly.b32 %0, %1, 1, 0x1f, 0xffffffff;" : "=f"(y) : "f"(x));
    x = fmax(x, y);
    asm volatile("shfl.sync.bfly.b32 %0, %1, 2, 0x1f, 0xffffffff;" : "=f"(y) : "f"(x));
    return fmax(x, y);
}

static inline float fa_nv_quad_sum(float x)
{
    float y;
    asm volatile("shfl.sync.bfly.b32 %0, %1, 1, 0x1f, 0xffffffff;" : "=f"(y) : "f"(x));
    x += y;
    asm volatile("shfl.sync.bfly.b32 %0, %1, 2, 0x1f, 0xffffffff;" : "=f"(y) : "f"(x));
    return x + y;
}

/* Four 8 x 8 matrices of 16-bit values from __local memory: lane l gives the address (base + off) of row l % 8
 * of matrix l / 8 (16 bytes, 16-byte aligned) and receives, in .x .. .w, its fragment of each
 * matrix: row l / 4, columns 2 (l % 4) and + 1 (with .trans: rows 2 (l % 4) and + 1 of column
 * l / 4). A __local pointer is an offset in the shared window, the address ldmatrix takes. The
 * memory clobber keeps the compiler from moving the read across the work-group's barriers. */
static inline uint4 fa_nv_ldmatrix_x4(__local const ushort *base, int off)
{
    __local const ushort *row = base + off;
    uint r0, r1, r2, r3;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"((uint)(size_t)row)
                 : "memory");
    return (uint4)(r0, r1, r2, r3);
}

static inline uint4 fa_nv_ldmatrix_x4_trans(__local const ushort *base, int off)
{
    __local const ushort *row = base + off;
    uint r0, r1, r2, r3;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"((uint)(size_t)row)
                 : "memory");
    return (uint4)(r0, r1, r2, r3);
}

/* 16 bytes from global to __local memory (both 16-byte aligned) by cp.async: the copy is in flight,
 * bypassing registers and L1, until this work-item's fa_nv_cp_wait; keep 0 writes zeros instead
 * (src must still be a valid address). A global pointer's value is its global address. */
static inline void fa_nv_cp16(__local ushort *dst, __global const ushort *src, int keep)
{
#if FA_NV_CPASYNC
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                 :
                 : "r"((uint)(size_t)dst), "l"((ulong)(size_t)src), "r"(keep ? 16 : 0)
                 : "memory");
#else
    *(__local uint4 *)dst = keep ? *(__global const uint4 *)src : (uint4)(0u);
#endif
}

/* Every cp.async this work-item started has landed; a barrier after it publishes them. */
static inline void fa_nv_cp_wait(void)
{
#if FA_NV_CPASYNC
    asm volatile("cp.async.wait_all;" ::: "memory");
#endif
}

#else

/* ---- the same operations in plain OpenCL C (FA_NV_EMULATE), xs: this warp's exchange area */

static inline void fa_nv_cp16(__local ushort *dst, __global const ushort *src, int keep)
{
    *(__local uint4 *)dst = keep ? *(__global const uint4 *)src : (uint4)(0u);
}

static inline void fa_nv_cp_wait(void)
{
}

static inline uint fa_nv_lane(void)
{
    return (uint)get_local_id(0) % 32u;
}

static inline float fa_nv_half_to_float(ushort x)
{
#if FA_DTYPE == 2
    return as_float((uint)x << 16);
#else
    return vload_half(0, (const half *)&x);
#endif
}

static inline float fa_nv_elem(__local const uint *xs, int lane, int reg, int hi)
{
    const uint w = xs[6 * lane + reg];
    return fa_nv_half_to_float((ushort)(hi ? w >> 16 : w & 0xffffu));
}

static inline float4 fa_nv_mma(float4 c, uint4 a, uint2 b, __local uint *xs)
{
    const int lane = (int)fa_nv_lane(), g = lane / 4, t = lane % 4;
    xs[6 * lane] = a.x;
    xs[6 * lane + 1] = a.y;
    xs[6 * lane + 2] = a.z;
    xs[6 * lane + 3] = a.w;
    xs[6 * lane + 4] = b.x;
    xs[6 * lane + 5] = b.y;
    barrier(CLK_LOCAL_MEM_FENCE);
    float d[4] = {c.x, c.y, c.z, c.w};
    for (int e = 0; e < 4; ++e) {
        const int r = g + 8 * (e / 2), n = 2 * t + e % 2;
        float acc = d[e];
        for (int k = 0; k < 16; ++k) {
            /* A (r, k): lane (r % 8) 4 + (k % 8) / 2, register (r / 8) + 2 (k / 8); B (k, n): lane
             * 4 n + (k % 8) / 2, register 4 + k / 8; the half k % 2 */
            const float av = fa_nv_elem(xs, (r % 8) * 4 + (k % 8) / 2, r / 8 + 2 * (k / 8), k % 2);
            const float bv = fa_nv_elem(xs, 4 * n + (k % 8) / 2, 4 + k / 8, k % 2);
            acc = fma(av, bv, acc);
        }
        d[e] = acc;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    return (float4)(d[0], d[1], d[2], d[3]);
}

static inline uint fa_nv_pack(float lo, float hi)
{
#if FA_DTYPE == 2
    return (uint)fa_float_to_bf16(lo) | ((uint)fa_float_to_bf16(hi) << 16);
#else
    ushort l, h;
    vstore_half_rte(lo, 0, (half *)&l);
    vstore_half_rte(hi, 0, (half *)&h);
    return (uint)l | ((uint)h << 16);
#endif
}

/* the butterfly's order: (x_l + x_l^1) + (x_l^2 + x_l^3) */
static inline float fa_nv_quad_max(float x, __local uint *xs)
{
    const int lane = (int)fa_nv_lane(), q = lane & ~3;
    xs[lane] = as_uint(x);
    barrier(CLK_LOCAL_MEM_FENCE);
    const float y = fmax(fmax(as_float(xs[q]), as_float(xs[q + 1])), fmax(as_float(xs[q + 2]), as_float(xs[q + 3])));
    barrier(CLK_LOCAL_MEM_FENCE);
    return y;
}

static inline float fa_nv_quad_sum(float x, __local uint *xs)
{
    const int lane = (int)fa_nv_lane();
    xs[lane] = as_uint(x);
    barrier(CLK_LOCAL_MEM_FENCE);
    const float y = (as_float(xs[lane]) + as_float(xs[lane ^ 1])) + (as_float(xs[lane ^ 2]) + as_float(xs[lane ^ 3]));
    barrier(CLK_LOCAL_MEM_FENCE);
    return y;
}

static inline uint4 fa_nv_ldmatrix_emu(__local const ushort *base, int off, int trans, __local uint *xs)
{
    const int lane = (int)fa_nv_lane();
    xs[lane] = (uint)off;
    barrier(CLK_LOCAL_MEM_FENCE);
    uint r[4];
    for (int m = 0; m < 4; ++m) {
        uint lo, hi;
        if (trans) { /* rows 2 (l % 4) and + 1 of column l / 4 */
            lo = base[(int)xs[8 * m + 2 * (lane % 4)] + lane / 4];
            hi = base[(int)xs[8 * m + 2 * (lane % 4) + 1] + lane / 4];
        } else { /* row l / 4, columns 2 (l % 4) and + 1 */
            lo = base[(int)xs[8 * m + lane / 4] + 2 * (lane % 4)];
            hi = base[(int)xs[8 * m + lane / 4] + 2 * (lane % 4) + 1];
        }
        r[m] = lo | (hi << 16);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    return (uint4)(r[0], r[1], r[2], r[3]);
}

static inline uint4 fa_nv_ldmatrix_x4(__local const ushort *base, int off, __local uint *xs)
{
    return fa_nv_ldmatrix_emu(base, off, 0, xs);
}

static inline uint4 fa_nv_ldmatrix_x4_trans(__local const ushort *base, int off, __local uint *xs)
{
    return fa_nv_ldmatrix_emu(base, off, 1, xs);
}

#endif

/* The kernels call these through the macros, which pass the exchange area only when emulating;
 * FA_NV_XS_DECL declares that area in a kernel (4 warps) and FA_NV_XS is this warp's part. */
#if FA_NV_EMULATE
#define FA_NV_XS_DECL __local uint fa_nv_xs_l[6 * 32 * 4];
#define FA_NV_XS (fa_nv_xs_l + 6 * 32 * ((int)get_local_id(0) / 32))
#define FA_NV_MMA(c, a, b) fa_nv_mma((c), (a), (b), FA_NV_XS)
#define FA_NV_LDM(base, off) fa_nv_ldmatrix_x4((base), (off), FA_NV_XS)
#define FA_NV_LDMT(base, off) fa_nv_ldmatrix_x4_trans((base), (off), FA_NV_XS)
#define FA_NV_QMAX(x) fa_nv_quad_max((x), FA_NV_XS)
#define FA_NV_QSUM(x) fa_nv_quad_sum((x), FA_NV_XS)
#else
#define FA_NV_XS_DECL
#define FA_NV_MMA(c, a, b) fa_nv_mma((c), (a), (b))
#define FA_NV_LDM(base, off) fa_nv_ldmatrix_x4((base), (off))
#define FA_NV_LDMT(base, off) fa_nv_ldmatrix_x4_trans((base), (off))
#define FA_NV_QMAX(x) fa_nv_quad_max(x)
#define FA_NV_QSUM(x) fa_nv_quad_sum(x)
#endif

/* Rows [0, n) of a 16-bit tensor (row r at base + r stride) into a __local [rows][FA_D + 8] array,
 * rows [n, rows) zero: whole 16-byte vectors when the rows start at multiples of 8 elements, else
 * element by element. Work-items tid, tid + nthreads, ... share the copy. */
static inline void fa_nv_load_rows(__local ushort *dst, __global const ushort *src, long base, long stride, int n,
                                   int rows, int tid, int nthreads)
{
    if (base % 8 == 0 && stride % 8 == 0) {
        for (int e = tid; e < rows * FA_D / 8; e += nthreads) {
            const int r = e / (FA_D / 8), c = (e % (FA_D / 8)) * 8;
            *(__local uint4 *)(dst + r * (FA_D + 8) + c) =
                r < n ? *(__global const uint4 *)(src + base + r * stride + c) : (uint4)(0u);
        }
    } else {
        for (int e = tid; e < rows * FA_D; e += nthreads) {
            const int r = e / FA_D, c = e % FA_D;
            dst[r * (FA_D + 8) + c] = r < n ? src[base + r * stride + c] : (ushort)0;
        }
    }
}

/* fa_nv_load_rows started asynchronously: by cp.async where the rows start at multiples of 8
 * elements (complete after fa_nv_cp_wait, visible to the work-group after the barrier that
 * follows it), else element by element at once. */
static inline void fa_nv_load_rows_async(__local ushort *dst, __global const ushort *src, long base, long stride,
                                         int n, int rows, int tid, int nthreads)
{
    if (base % 8 == 0 && stride % 8 == 0) {
        for (int e = tid; e < rows * FA_D / 8; e += nthreads) {
            const int r = e / (FA_D / 8), c = (e % (FA_D / 8)) * 8;
            fa_nv_cp16(dst + r * (FA_D + 8) + c, src + base + (r < n ? r : 0) * stride + c, r < n);
        }
    } else {
        fa_nv_load_rows(dst, src, base, stride, n, rows, tid, nthreads);
    }
}

/* Two consecutive 16-bit elements from index i of a tensor (any alignment), lo in the low half. */
static inline uint fa_nv_ld2(__global const ushort *p, long i)
{
    return (uint)p[i] | ((uint)p[i + 1] << 16);
}

#endif
