/* isa.h: the CPU kernels whose speed depends on the vector instruction set. One source
 * (isa_kernels.c) is compiled once per instruction set the compiler can target (generic; on
 * x86-64 also AVX2 + FMA and AVX-512), each into its own table with its own register blocking;
 * the backend picks the widest table the CPU runs (cpuid) when a context opens.
 *
 * Matrices are row-major fp32. A "panel" layout holds B in column panels of FA_CPU_PANEL
 * columns: panel j (columns 16 j .. 16 j + 15) is K x 16 contiguous at B + j * ldp. */
#ifndef FA_CPU_ISA_H
#define FA_CPU_ISA_H

#include "philox.h"
#include "softmax.h"

#include <stdint.h>

#define FA_CPU_PANEL 16 /* columns of a packed panel; every tile width is a multiple of it */
#define FA_CPU_DROPOUT_BATCH 16 /* Philox blocks per dropout_row call, one per vector lane */
#define FA_CPU_DROPOUT_KEYS (FA_CPU_DROPOUT_BATCH * FA_DROPOUT_BLOCK_KEYS) /* keys per dropout_row call */

typedef struct fa_cpu_isa {
    const char *name; /* "avx512", "avx2" or "generic": the value FLASHATTN_CPU_ISA takes */
    int lanes;        /* fp32 lanes of one vector */
    /* C[M x N] (+)= A[M x K] B[K x N], B in panels (ldp >= 16 K); N a multiple of 16. Prefetches
     * pf_bytes at pf (may be NULL) into L2, spread over the product. */
    void (*gemm_panels)(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldp,
                        float *C, int64_t ldc, int accumulate, const char *pf, int64_t pf_bytes);
    /* The same with B row-major (ldb); N a multiple of 16. */
    void (*gemm_rows)(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                      float *C, int64_t ldc, int accumulate);
    /* C[M x N] (+)= A^T B with A stored K x M row-major (lda), B row-major; N a multiple of 16. */
    void (*gemm_tn)(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                    float *C, int64_t ldc, int accumulate);
    /* The online-softmax step of one score tile (nr rows, width a multiple of 16, row stride ld,
     * masked scores -inf): per row the new running max, P = exp(S - max) in place, the running
     * sum, and the rescaling of that row of the output tile o (ldo a multiple of 16 floats). */
    void (*online_softmax_tile)(float *s, int64_t nr, int64_t width, int64_t ld, fa_softmax_row *rows, float *o,
                                int64_t ldo);
    /* x[0..n) = exp(x - shift) (n a multiple of 16); returns the sum. 0 for -inf, NaN stays. */
    float (*exp_row)(float *x, int64_t n, float shift);
    /* x[0..n) *= a (n a multiple of 16) */
    void (*scale_row)(float *x, int64_t n, float a);
    /* The backward's dS = P o (dP - D) scale on nr rows of n columns (a multiple of 16, row stride
     * ld), dP given in ds and overwritten; 0 wherever P is 0, even where dP is NaN or inf. */
    void (*softmax_grad_tile)(float *ds, const float *p, int64_t nr, int64_t n, int64_t ld, const float *dsum,
                              float scale);
    /* y[0..n) = x rounded to bf16, to nearest even (n a multiple of 16); NaN stays NaN */
    void (*to_bf16_row)(const float *x, uint16_t *y, int64_t n);
    /* y[0..n) = bf16(x0) | bf16(x1) << 16: two rows rounded (as to_bf16_row) into pairs; x1 NULL
     * gives 0 in the high halves */
    void (*to_bf16_pairs)(const float *x0, const float *x1, uint32_t *y, int64_t n);
    /* Dropout on keys col0 .. col0 + n - 1 of one row (n <= FA_CPU_DROPOUT_KEYS, col0 a multiple
     * of FA_DROPOUT_BLOCK_KEYS): x[t] *= scale where the rule of core/philox.h keeps key col0 + t
     * under threshold, x[t] = 0 where it drops it. The Philox blocks are computed in a loop over
     * independent blocks, vectorised one block per lane, and applied by vector selects. */
    void (*dropout_row)(uint64_t seed, uint64_t offset, uint64_t batch, uint64_t heads_q, uint64_t head, uint64_t row,
                        uint64_t col0, int64_t n, uint32_t threshold, float scale, float *x);
    /* online_softmax_tile on unscaled scores with the scale (> 0) folded in, P written rounded to
     * bf16 into p (row stride ldp) instead of over s; the sums are of the fp32 values */
    void (*online_softmax_tile_bf16)(const float *s, int64_t nr, int64_t width, int64_t ld, float scale,
                                     fa_softmax_row *rows, float *o, int64_t ldo, uint16_t *p, int64_t ldp);

    /* bf16 products; NULL in tables without them. C[M x N] fp32 (+)= A[M x K] B[K x N]: A bf16
     * row-major (lda elements), B "pair-packed": a uint32_t array whose element (kp, n), at
     * B[kp * ldb + n], holds the bf16 pair B[2 kp][n] (low half), B[2 kp + 1][n] (high half).
     * M and N multiples of 16, K a multiple of 32 (callers pad with zeros). Used only between
     * bf16_tiles_begin and bf16_tiles_end on the same thread. */
    void (*bf16_tiles_begin)(void);
    void (*bf16_tiles_end)(void);
    void (*gemm_bf16)(int64_t M, int64_t N, int64_t K, const uint16_t *A, int64_t lda, const uint32_t *B,
                      int64_t ldb, float *C, int64_t ldc, int accumulate);
} fa_cpu_isa;

/* The tables compiled in (backends/cpu/meson.build): generic always, the others on x86-64. */
extern const fa_cpu_isa fa_cpu_isa_generic, fa_cpu_isa_avx2, fa_cpu_isa_avx512, fa_cpu_isa_amx,
    fa_cpu_isa_amx_emulated;

/* The widest table this CPU runs, or the one FLASHATTN_CPU_ISA names ("amx", "avx512", "avx2",
 * "generic", and the test aid "amx-emulated" where the build has it: never chosen unless named). NULL when the variable names a table that is not compiled in or that this CPU
 * cannot run; *why then says which. */
const fa_cpu_isa *fa_cpu_isa_select(const char **why);

#endif
