/* nv_mma.cl: NVIDIA's warp-level matrix instructions as inline PTX, for the matrix-path kernels
 * (FA_KERNELS == 6). Compiled only into programs the host builds for a device whose OpenCL driver
 * is NVIDIA's and whose compute capability is 8.0 or newer (runtime.c, ocl_open); no other OpenCL
 * compiler ever sees it. NVIDIA's OpenCL forms warps from 32 consecutive work-items of a 1-D
 * work-group, so a work-item's lane is its %laneid. Fragment layouts (PTX ISA, "Matrix Fragments
 * for mma.m16n8k16"), with g = lane / 4 and t = lane % 4:
 *   A (16 x 16, row-major)  a.x: row g, columns 2t, 2t + 1; a.y: row g + 8; a.z: row g, columns
 *                            2t + 8, 2t + 9; a.w: row g + 8, columns 2t + 8, 2t + 9
 *   B (16 x 8, column)      b.x: rows 2t, 2t + 1 of column g; b.y: rows 2t + 8, 2t + 9
 *   C, D (16 x 8, fp32)     .x, .y: row g, columns 2t, 2t + 1; .z, .w: row g + 8
 * Each 32-bit register holds two 16-bit values, the lower column (or row) in the low half. */
#if FA_KERNELS == 6

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

#ifndef FA_NV_LDMATRIX
#define FA_NV_LDMATRIX 1 /* B fragments by ldmatrix (0: by 16- and 32-bit __local reads, for comparison) */
#endif

/* Four 8 x 8 matrices of 16-bit values from __local memory: lane l gives the address of row l % 8
 * of matrix l / 8 (16 bytes, 16-byte aligned) and receives, in .x .. .w, its fragment of each
 * matrix: row l / 4, columns 2 (l % 4) and + 1 (with .trans: rows 2 (l % 4) and + 1 of column
 * l / 4). A __local pointer is an offset in the shared window, the address ldmatrix takes. The
 * memory clobber keeps the compiler from moving the read across the work-group's barriers. */
static inline uint4 fa_nv_ldmatrix_x4(__local const ushort *row)
{
    uint r0, r1, r2, r3;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"((uint)(size_t)row)
                 : "memory");
    return (uint4)(r0, r1, r2, r3);
}

static inline uint4 fa_nv_ldmatrix_x4_trans(__local const ushort *row)
{
    uint r0, r1, r2, r3;
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"((uint)(size_t)row)
                 : "memory");
    return (uint4)(r0, r1, r2, r3);
}

/* Two consecutive 16-bit elements from index i of a tensor (any alignment), lo in the low half. */
static inline uint fa_nv_ld2(__global const ushort *p, long i)
{
    return (uint)p[i] | ((uint)p[i + 1] << 16);
}

#endif
