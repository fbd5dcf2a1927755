/* simd.h: 8-lane fp32 vectors through GCC vector extensions and a vectorised exp, used by the
 * decode kernels (kvcache.c, kv_rows.h). Functions that use them are compiled twice (x86-64-v3
 * and baseline, FA_MULTIVERSION) where the compiler supports it. The fused forward and backward
 * use the per-instruction-set tables of isa.h instead. */
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

#endif
