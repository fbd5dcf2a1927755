/* isa_kernels.c: the fused kernels' hot loops, written once with GCC vector extensions and
 * compiled once per instruction set (the top-level meson.build passes -DFA_CPU_ISA_AVX512 with
 * -mavx512f -mavx512vl -mavx512bw -mavx512dq -mavx512cd and the AVX2 flags, -DFA_CPU_ISA_AVX2
 * with -mavx -mavx2 -mfma -mbmi -mbmi2, -DFA_CPU_ISA_GENERIC with no target flags);
 * each compile defines one fa_cpu_isa table (isa.h). What differs per instruction set is the
 * vector width and the register block of the matrix micro-kernel:
 *
 *   table    lanes  block (rows x columns)  accumulators
 *   avx512   16     8 x 32 (two panels)     16 of 32 zmm
 *   avx2     8      4 x 16 (one panel)      8 of 16 ymm
 *   generic  4      2 x 16 (4 x 16 on Arm)  8 of 16 xmm (16 of 32 NEON)
 *
 * Each k step of the micro-kernel loads one row of each panel, broadcasts one element of A per
 * row, and issues rows x columns / lanes FMAs into independent accumulators, enough of them to
 * cover the FMA latency on two pipes. */
#include "isa.h"

#include <string.h>
#if defined(__SSE__)
#include <immintrin.h>
#endif

#if defined(FA_CPU_ISA_AVX512) || defined(FA_CPU_ISA_AMX)
#define LANES 16
#define MR 8
#define NP 2
#if defined(FA_CPU_ISA_AMX) /* avx512's kernels and the bf16 products on AMX tiles */
#define TABLE fa_cpu_isa_amx
#define ISA_NAME "amx"
#define BF16_FN(name) fa_cpu_amx_##name
#else
#define TABLE fa_cpu_isa_avx512
#define ISA_NAME "avx512"
#endif
#elif defined(FA_CPU_ISA_AVX2)
#define LANES 8
#define MR 4
#define NP 1
#define TABLE fa_cpu_isa_avx2
#define ISA_NAME "avx2"
#else
#define LANES 4
#if defined(__aarch64__)
#define MR 4
#else
#define MR 2
#endif
#define NP 1
#if defined(FA_CPU_ISA_AMX_EMULATED) /* generic's kernels and the AMX tile program run by plain C */
#define TABLE fa_cpu_isa_amx_emulated
#define ISA_NAME "amx-emulated"
#define BF16_FN(name) fa_cpu_amx_emulated_##name
#else
#define TABLE fa_cpu_isa_generic
#define ISA_NAME "generic"
#endif
#endif

#if defined(BF16_FN) /* defined in bf16_tiles.c */
void BF16_FN(bf16_tiles_begin)(void);
void BF16_FN(bf16_tiles_end)(void);
void BF16_FN(gemm_bf16)(int64_t M, int64_t N, int64_t K, const uint16_t *A, int64_t lda, const uint32_t *B,
                        int64_t ldb, float *C, int64_t ldc, int accumulate);
#endif

#define PANEL FA_CPU_PANEL
#define PV (PANEL / LANES) /* vectors in one row of a panel */

typedef float vf __attribute__((vector_size(LANES * 4)));
typedef int32_t vi __attribute__((vector_size(LANES * 4)));

/* Helpers are always inlined: vectors never cross a call boundary. */
#define VINLINE static inline __attribute__((always_inline))

VINLINE vf vload(const float *p)
{
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}

VINLINE void vstore(float *p, vf v)
{
    memcpy(p, &v, sizeof v);
}

VINLINE vf vsplat(float x)
{
    vf v = {0};
    return v + x;
}

VINLINE vf as_float(vi x)
{
    vf f;
    memcpy(&f, &x, sizeof f);
    return f;
}

VINLINE vi as_bits(vf x)
{
    vi i;
    memcpy(&i, &x, sizeof i);
    return i;
}

/* mask ? a : b, lane by lane */
VINLINE vf vselect(vi mask, vf a, vf b)
{
    return as_float((as_bits(a) & mask) | (as_bits(b) & ~mask));
}

/* lane i ^ w of v in lane i: the butterfly step of a horizontal reduction (__builtin_shufflevector:
 * clang, and GCC from 12) */
#if LANES == 16
#define XOR_LANES(v, w)                                                                                    \
    __builtin_shufflevector(v, v, 0 ^ (w), 1 ^ (w), 2 ^ (w), 3 ^ (w), 4 ^ (w), 5 ^ (w), 6 ^ (w), 7 ^ (w),     \
                            8 ^ (w), 9 ^ (w), 10 ^ (w), 11 ^ (w), 12 ^ (w), 13 ^ (w), 14 ^ (w), 15 ^ (w))
#elif LANES == 8
#define XOR_LANES(v, w)                                                                                    \
    __builtin_shufflevector(v, v, 0 ^ (w), 1 ^ (w), 2 ^ (w), 3 ^ (w), 4 ^ (w), 5 ^ (w), 6 ^ (w), 7 ^ (w))
#else
#define XOR_LANES(v, w) __builtin_shufflevector(v, v, 0 ^ (w), 1 ^ (w), 2 ^ (w), 3 ^ (w))
#endif

/* the sum and the max of the lanes, by log2(LANES) butterfly steps (every lane ends with the
 * result) rather than LANES - 1 extractions */
VINLINE float hsum(vf v)
{
#if LANES >= 16
    v += XOR_LANES(v, 8);
#endif
#if LANES >= 8
    v += XOR_LANES(v, 4);
#endif
    v += XOR_LANES(v, 2);
    v += XOR_LANES(v, 1);
    return v[0];
}

/* b where b > a, else a (so a NaN in b keeps a): the max instruction where there is one, whose
 * rule for NaN (the second operand when either is NaN) is the same */
VINLINE vf vmax(vf a, vf b)
{
#if LANES == 16 && defined(__AVX512F__)
    return (vf)_mm512_max_ps((__m512)b, (__m512)a);
#elif LANES == 8 && defined(__AVX__)
    return (vf)_mm256_max_ps((__m256)b, (__m256)a);
#elif LANES == 4 && defined(__SSE__)
    return (vf)_mm_max_ps((__m128)b, (__m128)a);
#else
    return vselect(b > a, b, a);
#endif
}

/* b where b < a, else a (so a NaN in a stays): the min instruction where there is one */
VINLINE vf vmin(vf a, vf b)
{
#if LANES == 16 && defined(__AVX512F__)
    return (vf)_mm512_min_ps((__m512)b, (__m512)a);
#elif LANES == 8 && defined(__AVX__)
    return (vf)_mm256_min_ps((__m256)b, (__m256)a);
#elif LANES == 4 && defined(__SSE__)
    return (vf)_mm_min_ps((__m128)b, (__m128)a);
#else
    return vselect(b < a, b, a);
#endif
}

VINLINE float hmax(vf v)
{
#if LANES >= 16
    v = vmax(v, XOR_LANES(v, 8));
#endif
#if LANES >= 8
    v = vmax(v, XOR_LANES(v, 4));
#endif
    v = vmax(v, XOR_LANES(v, 2));
    v = vmax(v, XOR_LANES(v, 1));
    return v[0];
}

/* the max of row[0..width) (width a multiple of LANES), two accumulators: the max's latency,
 * not its throughput, would bound one */
VINLINE float row_max(const float *row, int64_t width)
{
    vf m0 = vload(row), m1 = m0;
    int64_t t = LANES;
    for (; t + 2 * LANES <= width; t += 2 * LANES) {
        m0 = vmax(m0, vload(row + t));
        m1 = vmax(m1, vload(row + t + LANES));
    }
    if (t < width)
        m0 = vmax(m0, vload(row + t));
    return hmax(vmax(m0, m1));
}

/* e^x lane by lane: x = n ln2 + r with n = round(x / ln2), |r| <= ln2 / 2 (Cody-Waite: ln2 in two
 * parts), a degree-6 polynomial for e^r, 2^n by exponent bits. The rounding is one FMA: adding
 * 1.5 x 2^23 + 127 leaves n + 127 in the low mantissa bits (the spacing of floats there is 1), so
 * those bits shifted up by 23 are the exponent field of 2^n, and subtracting the constant again
 * gives n exactly. tests/core/test_cpu_isa.c bounds the relative error by 4 x 2^-23 against double
 * precision. Inputs below -87.3 (masked -inf scores among them) give exactly 0, inputs above 88.3
 * give e^88.3; NaN propagates through the arithmetic. */
VINLINE vf vexp(vf v)
{
    const vf lo = vsplat(-87.3f), hi = vsplat(88.3f), magic = vsplat(12582912.0f + 127.0f);
    vi under = v < lo;
    vf c = vmin(vmax(v, lo), hi); /* a NaN passes both */
    vf kf = c * 1.44269504088896341f + magic;
    vf kt = kf - magic;
    vf r = c - kt * 0.693359375f;
    r = r + kt * 2.12194440e-4f;
    vf p = r * 1.9875691500e-4f + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    vf res = p * as_float(as_bits(kf) << 23);
    return as_float(as_bits(res) & ~under);
}

/* EXP_U independent vexp at once, step by step: one vexp is a chain of about 15 dependent
 * operations, so a core whose scheduler holds only a vexp or two runs them at the chain's latency;
 * interleaved, the chains fill the pipes. */
#define EXP_U (LANES >= 16 ? 4 : 2)
VINLINE void vexp_block(vf *v)
{
    const vf lo = vsplat(-87.3f), hi = vsplat(88.3f), magic = vsplat(12582912.0f + 127.0f);
    vi under[EXP_U];
    vf kf[EXP_U], r[EXP_U], p[EXP_U];
#pragma GCC unroll 4
    for (int i = 0; i < EXP_U; ++i) {
        under[i] = v[i] < lo;
        r[i] = vmin(vmax(v[i], lo), hi);
    }
#pragma GCC unroll 4
    for (int i = 0; i < EXP_U; ++i)
        kf[i] = r[i] * 1.44269504088896341f + magic;
#pragma GCC unroll 4
    for (int i = 0; i < EXP_U; ++i) {
        vf kt = kf[i] - magic;
        r[i] = r[i] - kt * 0.693359375f;
        r[i] = r[i] + kt * 2.12194440e-4f;
    }
#pragma GCC unroll 4
    for (int i = 0; i < EXP_U; ++i)
        p[i] = r[i] * 1.9875691500e-4f + 1.3981999507e-3f;
#pragma GCC unroll 4
    for (int i = 0; i < EXP_U; ++i)
        p[i] = p[i] * r[i] + 8.3334519073e-3f;
#pragma GCC unroll 4
    for (int i = 0; i < EXP_U; ++i)
        p[i] = p[i] * r[i] + 4.1665795894e-2f;
#pragma GCC unroll 4
    for (int i = 0; i < EXP_U; ++i)
        p[i] = p[i] * r[i] + 1.6666665459e-1f;
#pragma GCC unroll 4
    for (int i = 0; i < EXP_U; ++i)
        p[i] = p[i] * r[i] + 5.0000001201e-1f;
#pragma GCC unroll 4
    for (int i = 0; i < EXP_U; ++i)
        p[i] = p[i] * (r[i] * r[i]) + r[i] + 1.0f;
#pragma GCC unroll 4
    for (int i = 0; i < EXP_U; ++i)
        v[i] = as_float(as_bits(p[i] * as_float(as_bits(kf[i]) << 23)) & ~under[i]);
}

/* ------------------------------------------------------------------ matrix products */

/* C[mr x 16 np] (+)= A[mr x K] B, where row k of B's panel p starts at B + p * pstride + k * kstride;
 * A is row-major (element (r, k) at A[r * lda + k]) or, with a_trans, stored transposed (at
 * A[k * lda + r]: the mr elements of one k step are then contiguous). mr <= MR, np <= NP and
 * a_trans are constants at every call, so the accumulators are registers. */
VINLINE void micro_kernel(const int mr, const int np, const int a_trans, int64_t K, const float *A, int64_t lda,
                          const float *B, int64_t kstride, int64_t pstride, float *C, int64_t ldc, int accumulate)
{
    vf c[MR][NP * PV];
#pragma GCC unroll 16
    for (int r = 0; r < mr; ++r)
#pragma GCC unroll 16
        for (int x = 0; x < np * PV; ++x)
            c[r][x] = vsplat(0.0f);
    for (int64_t k = 0; k < K; ++k) {
        vf b[NP * PV];
#pragma GCC unroll 16
        for (int x = 0; x < np * PV; ++x)
            b[x] = vload(B + x / PV * pstride + k * kstride + x % PV * LANES);
#pragma GCC unroll 16
        for (int r = 0; r < mr; ++r) {
            const float a = a_trans ? A[k * lda + r] : A[r * lda + k]; /* scalar times vector: a broadcast */
#pragma GCC unroll 16
            for (int x = 0; x < np * PV; ++x)
                c[r][x] += a * b[x];
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < mr; ++r)
#pragma GCC unroll 16
        for (int x = 0; x < np * PV; ++x) {
            float *cp = C + r * ldc + x / PV * PANEL + x % PV * LANES;
            vstore(cp, accumulate ? c[r][x] + vload(cp) : c[r][x]);
        }
}

/* The rows of one column block (np panels): full blocks of MR rows, then the rest in one call
 * of its exact height. */
VINLINE void row_blocks(const int np, const int a_trans, int64_t M, int64_t K, const float *A, int64_t lda, const float *B,
                        int64_t kstride, int64_t pstride, float *C, int64_t ldc, int accumulate, const char *pf,
                        int64_t pf_step, int64_t pf_bytes, int64_t *pf_done)
{
    for (int64_t i = 0; i < M; i += MR) {
        for (int64_t x = 0; x < pf_step && *pf_done < pf_bytes; x += 64, *pf_done += 64)
            __builtin_prefetch(pf + *pf_done, 0, 2);
        const float *a = a_trans ? A + i : A + i * lda;
        float *c = C + i * ldc;
        switch (M - i < MR ? M - i : MR) {
#define FA_ROWS_CASE(n)                                                                                    \
    case n:                                                                                                \
        micro_kernel(n, np, a_trans, K, a, lda, B, kstride, pstride, c, ldc, accumulate);   \
        break;
            FA_ROWS_CASE(1)
            FA_ROWS_CASE(2)
#if MR >= 3
            FA_ROWS_CASE(3)
#endif
#if MR >= 4
            FA_ROWS_CASE(4)
#endif
#if MR >= 5
            FA_ROWS_CASE(5)
#endif
#if MR >= 6
            FA_ROWS_CASE(6)
#endif
#if MR >= 7
            FA_ROWS_CASE(7)
#endif
#if MR >= 8
            FA_ROWS_CASE(8)
#endif
#if MR > 8
#error "row_blocks handles at most 8 rows"
#endif
#undef FA_ROWS_CASE
        default:
            break;
        }
    }
}

/* Column blocks of NP panels outermost: their K x 16 NP floats stay in L1 while the row blocks
 * of A stream past. */
VINLINE void gemm(const int a_trans, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B,
                  int64_t kstride, int64_t pstride, float *C, int64_t ldc, int accumulate, const char *pf,
                  int64_t pf_bytes)
{
    int64_t panels = N / PANEL;
    int64_t calls = (panels + NP - 1) / NP * ((M + MR - 1) / MR);
    int64_t pf_step = pf && calls > 0 ? (pf_bytes + calls - 1) / calls : 0, pf_done = 0;
    for (int64_t j = 0; j < panels; j += NP) {
        const float *b = B + j * pstride;
        float *c = C + j * PANEL;
        if (j + NP <= panels)
            row_blocks(NP, a_trans, M, K, A, lda, b, kstride, pstride, c, ldc, accumulate, pf, pf_step, pf_bytes,
                       &pf_done);
#if NP > 1
        else
            row_blocks(1, a_trans, M, K, A, lda, b, kstride, pstride, c, ldc, accumulate, pf, pf_step, pf_bytes,
                       &pf_done);
#endif
    }
}

static void gemm_panels(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldp,
                        float *C, int64_t ldc, int accumulate, const char *pf, int64_t pf_bytes)
{
    gemm(0, M, N, K, A, lda, B, PANEL, ldp, C, ldc, accumulate, pf, pf_bytes);
}

static void gemm_rows(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                      float *C, int64_t ldc, int accumulate)
{
    gemm(0, M, N, K, A, lda, B, ldb, PANEL, C, ldc, accumulate, NULL, 0);
}

static void gemm_tn(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                    float *C, int64_t ldc, int accumulate)
{
    gemm(1, M, N, K, A, lda, B, ldb, PANEL, C, ldc, accumulate, NULL, 0);
}

/* ------------------------------------------------------------------ softmax */

static float exp_row(float *x, int64_t n, float shift)
{
    vf total = vsplat(0.0f);
    int64_t t = 0;
    for (; t + EXP_U * LANES <= n; t += EXP_U * LANES) {
        vf e[EXP_U];
#pragma GCC unroll 4
        for (int i = 0; i < EXP_U; ++i)
            e[i] = vload(x + t + i * LANES) - shift;
        vexp_block(e);
#pragma GCC unroll 4
        for (int i = 0; i < EXP_U; ++i) {
            vstore(x + t + i * LANES, e[i]);
            total += e[i];
        }
    }
    for (; t < n; t += LANES) {
        vf e = vexp(vload(x + t) - shift);
        vstore(x + t, e);
        total += e;
    }
    return hsum(total);
}

static void scale_row(float *x, int64_t n, float a)
{
    for (int64_t t = 0; t < n; t += LANES)
        vstore(x + t, vload(x + t) * a);
}

static void online_softmax_tile(float *s, int64_t nr, int64_t width, int64_t ld, fa_softmax_row *rows, float *o,
                                int64_t ldo)
{
    for (int64_t r = 0; r < nr; ++r) {
        /* columns past the tile's width hold -inf (the caller's mask), so whole-row passes are exact */
        float *row = s + r * ld;
        float alpha = fa_softmax_update(&rows[r], row_max(row, width));
        rows[r].l += exp_row(row, width, fa_softmax_shift(rows[r].m));
        if (alpha != 1.0f)
            scale_row(o + r * ldo, ldo, alpha);
    }
}

static void softmax_grad_tile(float *ds, const float *p, int64_t nr, int64_t n, int64_t ld, const float *dsum,
                              float scale)
{
    for (int64_t r = 0; r < nr; ++r) {
        float *drow = ds + r * ld;
        const float *prow = p + r * ld;
        const vf zero = vsplat(0.0f);
        for (int64_t t = 0; t < n; t += LANES) {
            vf pv = vload(prow + t);
            vf g = pv * (vload(drow + t) - dsum[r]) * scale;
            vstore(drow + t, vselect(pv == zero, zero, g));
        }
    }
}

/* ------------------------------------------------------------------ bf16 */

/* y[0..LANES) = x rounded to bf16: to nearest even (add 0x7fff plus the kept part's lowest bit,
 * keep the high half); a NaN keeps its high half with the quiet bit set (core/half.h's
 * fa_float_to_bfloat) */
VINLINE void store_bf16(uint16_t *y, vf x)
{
    typedef uint32_t vu __attribute__((vector_size(LANES * 4)));
    typedef uint16_t vh __attribute__((vector_size(LANES * 2)));
    vu b;
    memcpy(&b, &x, sizeof b);
    vu nan_mask = (vu)((b & 0x7fffffffu) > 0x7f800000u);
    vu r = ((b + 0x7fffu + ((b >> 16) & 1u)) >> 16 & ~nan_mask) | ((b >> 16 | 0x40u) & nan_mask);
    vh h = __builtin_convertvector(r, vh);
    memcpy(y, &h, sizeof h);
}

static void to_bf16_row(const float *x, uint16_t *y, int64_t n)
{
    for (int64_t t = 0; t < n; t += LANES)
        store_bf16(y + t, vload(x + t));
}

static void to_bf16_pairs(const float *x0, const float *x1, uint32_t *y, int64_t n)
{
    for (int64_t t = 0; t < n; t += LANES) {
        uint16_t lo[LANES], hi[LANES];
        store_bf16(lo, vload(x0 + t));
        if (x1)
            store_bf16(hi, vload(x1 + t));
        else
            memset(hi, 0, sizeof hi);
#pragma GCC unroll 16
        for (int i = 0; i < LANES; ++i)
            y[t + i] = (uint32_t)lo[i] | (uint32_t)hi[i] << 16;
    }
}

static void online_softmax_tile_bf16(const float *s, int64_t nr, int64_t width, int64_t ld, float scale,
                                     fa_softmax_row *rows, float *o, int64_t ldo, uint16_t *p, int64_t ldp)
{
    for (int64_t r = 0; r < nr; ++r) {
        const float *row = s + r * ld;
        uint16_t *prow = p + r * ldp;
        /* scale > 0: the max of the scaled scores is the scaled max, rounding included */
        float alpha = fa_softmax_update(&rows[r], row_max(row, width) * scale);
        const float shift = fa_softmax_shift(rows[r].m);
        vf total = vsplat(0.0f);
        int64_t t = 0;
        for (; t + EXP_U * LANES <= width; t += EXP_U * LANES) {
            vf e[EXP_U];
#pragma GCC unroll 4
            for (int i = 0; i < EXP_U; ++i)
                e[i] = vload(row + t + i * LANES) * scale - shift;
            vexp_block(e);
#pragma GCC unroll 4
            for (int i = 0; i < EXP_U; ++i) {
                total += e[i];
                store_bf16(prow + t + i * LANES, e[i]);
            }
        }
        for (; t < width; t += LANES) {
            vf e = vexp(vload(row + t) * scale - shift);
            total += e;
            store_bf16(prow + t, e);
        }
        rows[r].l += hsum(total);
        if (alpha != 1.0f)
            scale_row(o + r * ldo, ldo, alpha);
    }
}

static void dropout_row(uint64_t seed, uint64_t offset, uint64_t batch, uint64_t heads_q, uint64_t head, uint64_t row,
                        uint64_t col0, int64_t n, uint32_t threshold, float scale, float *x)
{
    int32_t r[FA_CPU_DROPOUT_KEYS]; /* the rule's 16 bits of key col0 + t at r[t] */
    for (int l = 0; l < FA_CPU_DROPOUT_BATCH; ++l) {
        const fa_philox4 b = fa_dropout_block(seed, offset, batch, heads_q, head, row,
                                              col0 + (uint64_t)l * FA_DROPOUT_BLOCK_KEYS);
        for (int k = 0; k < 4; ++k) {
            r[l * FA_DROPOUT_BLOCK_KEYS + 2 * k] = (int32_t)(b.v[k] & 0xffffu);
            r[l * FA_DROPOUT_BLOCK_KEYS + 2 * k + 1] = (int32_t)(b.v[k] >> 16);
        }
    }
    /* r >= threshold (both below 2^16, so a signed compare); a select, so a dropped NaN or inf
     * becomes 0 too */
    const int32_t tb = (int32_t)threshold;
    int64_t t = 0;
    for (; t + LANES <= n; t += LANES) {
        vi rv;
        memcpy(&rv, r + t, sizeof rv);
        const vi keep = rv >= tb;
        vstore(x + t, vselect(keep, vload(x + t) * scale, vsplat(0.0f)));
    }
    for (; t < n; ++t)
        x[t] = r[t] >= tb ? x[t] * scale : 0.0f;
}

const fa_cpu_isa TABLE = {
    .name = ISA_NAME,
    .lanes = LANES,
    .gemm_panels = gemm_panels,
    .gemm_rows = gemm_rows,
    .gemm_tn = gemm_tn,
    .online_softmax_tile = online_softmax_tile,
    .exp_row = exp_row,
    .scale_row = scale_row,
    .softmax_grad_tile = softmax_grad_tile,
    .to_bf16_row = to_bf16_row,
    .to_bf16_pairs = to_bf16_pairs,
    .online_softmax_tile_bf16 = online_softmax_tile_bf16,
    .dropout_row = dropout_row,
#if defined(BF16_FN)
    .bf16_tiles_begin = BF16_FN(bf16_tiles_begin),
    .bf16_tiles_end = BF16_FN(bf16_tiles_end),
    .gemm_bf16 = BF16_FN(gemm_bf16),
#endif
};
