/* simd.h: the vector building blocks of the CPU kernels: 8-lane fp32 vectors through GCC vector
 * extensions, a 4 x 16 register-blocked matrix micro-kernel, and a vectorised exp. Shared by the
 * library's fused kernels (flash.c) and the benchmark's materialising baseline, so the two compare
 * attention algorithms, not code generation. Functions that use them are compiled twice
 * (x86-64-v3 and baseline, FA_MULTIVERSION) where the compiler supports it. */
#ifndef FA_CPU_SIMD_H
#define FA_CPU_SIMD_H

#include <stdint.h>
#include <string.h>

#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define FA_MULTIVERSION __attribute__((target_clones("arch=x86-64-v3", "default")))
#endif
#endif
#ifndef FA_MULTIVERSION
#define FA_MULTIVERSION
#endif

typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

/* The helpers below are always inlined into their (multiversioned) callers: a 32-byte vector
 * must never be passed between a default-target helper and an x86-64-v3 clone, whose calling
 * conventions for it differ. (GCC's -Wpsabi note about that convention cannot apply to a call that
 * does not exist; the build turns it off with -Wno-psabi, since a pragma does not silence it.) */
#define FA_VINLINE static inline __attribute__((always_inline))

#define VEC 8
#define NR 16 /* columns of the micro-kernel: two vectors */
#define MR 4  /* rows of the micro-kernel */

static inline int64_t fa_round_up(int64_t x, int64_t m)
{
    return (x + m - 1) / m * m;
}

FA_VINLINE v8f load8(const float *p)
{
    v8f v;
    memcpy(&v, p, sizeof v);
    return v;
}

FA_VINLINE void store8(float *p, v8f v)
{
    memcpy(p, &v, sizeof v);
}

FA_VINLINE v8f bits_as_float(v8i x)
{
    v8f f;
    memcpy(&f, &x, sizeof f);
    return f;
}

FA_VINLINE v8i float_as_bits(v8f x)
{
    v8i i;
    memcpy(&i, &x, sizeof i);
    return i;
}

/* mask ? a : b, lane by lane (C has no vector ?: ) */
FA_VINLINE v8f select8(v8i mask, v8f a, v8f b)
{
    return bits_as_float((float_as_bits(a) & mask) | (float_as_bits(b) & ~mask));
}

/* e^x for 8 lanes: Cody-Waite range reduction x = k ln2 + r, a degree-6 polynomial for e^r
 * (relative error about 2 ulp), 2^k by exponent bits. Exactly 0 below -87.3 (so masked -inf
 * scores give 0), NaN propagates. */
FA_VINLINE v8f fa_exp8(v8f v)
{
    const v8f lo = {-87.3f, -87.3f, -87.3f, -87.3f, -87.3f, -87.3f, -87.3f, -87.3f};
    const v8f hi = {88.3f, 88.3f, 88.3f, 88.3f, 88.3f, 88.3f, 88.3f, 88.3f};
    v8i nan_mask = v != v;
    v8i under = v < lo;
    v8f c = select8(v > hi, hi, v);
    c = select8(c < lo, lo, c);
    v8f kf = c * 1.44269504088896341f + 0.5f;
    /* floor(kf): truncate, then step down where truncation rounded a negative value up */
    v8i ki = __builtin_convertvector(kf, v8i);
    v8f kt = __builtin_convertvector(ki, v8f);
    ki += kt > kf; /* the comparison is -1 where true */
    kt = __builtin_convertvector(ki, v8f);
    v8f r = c - kt * 0.693359375f;
    r = r + kt * 2.12194440e-4f;
    v8f p = r * 1.9875691500e-4f + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    v8f res = p * bits_as_float((ki + 127) << 23);
    res = bits_as_float(float_as_bits(res) & ~under);
    return select8(nan_mask, v, res);
}

/* C[4 x 16] (+)= alpha * A[4 x K] B[K x 16]; A row-major (lda), B row-major (ldb). */
FA_VINLINE void fa_kernel_4x16(int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb, float *C,
                               int64_t ldc, float alpha, int accumulate)
{
    v8f c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0}, c30 = {0}, c31 = {0};
    const float *a0 = A, *a1 = a0 + lda, *a2 = a1 + lda, *a3 = a2 + lda;
    for (int64_t k = 0; k < K; ++k) {
        v8f b0 = load8(B + k * ldb), b1 = load8(B + k * ldb + VEC);
        /* scalar * vector: GCC broadcasts the scalar (vbroadcastss) */
        float x0 = a0[k], x1 = a1[k], x2 = a2[k], x3 = a3[k];
        c00 += x0 * b0;
        c01 += x0 * b1;
        c10 += x1 * b0;
        c11 += x1 * b1;
        c20 += x2 * b0;
        c21 += x2 * b1;
        c30 += x3 * b0;
        c31 += x3 * b1;
    }
    float *r0 = C, *r1 = r0 + ldc, *r2 = r1 + ldc, *r3 = r2 + ldc;
    if (alpha != 1.0f) {
        c00 *= alpha; c01 *= alpha; c10 *= alpha; c11 *= alpha;
        c20 *= alpha; c21 *= alpha; c30 *= alpha; c31 *= alpha;
    }
    if (accumulate) {
        c00 += load8(r0); c01 += load8(r0 + VEC);
        c10 += load8(r1); c11 += load8(r1 + VEC);
        c20 += load8(r2); c21 += load8(r2 + VEC);
        c30 += load8(r3); c31 += load8(r3 + VEC);
    }
    store8(r0, c00); store8(r0 + VEC, c01);
    store8(r1, c10); store8(r1 + VEC, c11);
    store8(r2, c20); store8(r2 + VEC, c21);
    store8(r3, c30); store8(r3 + VEC, c31);
}

/* The same for one row (the tail of a row block). */
FA_VINLINE void fa_kernel_1x16(int64_t K, const float *A, const float *B, int64_t ldb, float *C, float alpha,
                               int accumulate)
{
    v8f c0 = {0}, c1 = {0};
    for (int64_t k = 0; k < K; ++k) {
        float x = A[k];
        c0 += x * load8(B + k * ldb);
        c1 += x * load8(B + k * ldb + VEC);
    }
    if (alpha != 1.0f) {
        c0 *= alpha;
        c1 *= alpha;
    }
    if (accumulate) {
        c0 += load8(C);
        c1 += load8(C + VEC);
    }
    store8(C, c0);
    store8(C + VEC, c1);
}

#endif
