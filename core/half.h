/* half.h: fp16 and bf16 <-> fp32 conversions in portable C (round to nearest even, NaN kept
 * quiet, subnormals exact), used by the core, the CPU backend, the tools and the tests. */
#ifndef FA_HALF_H
#define FA_HALF_H

#include "flashattn.h"

#include <stdint.h>
#include <string.h>

static inline uint32_t fa_f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline float fa_bits_f32(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static inline float fa_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1fu) /* inf / nan */
        return fa_bits_f32(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        /* zero or subnormal: man * 2^-24, exact in fp32 */
        float v = (float)man * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return fa_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

static inline uint16_t fa_float_to_half(float f)
{
    uint32_t x = fa_f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) /* inf or nan */
        return (uint16_t)(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u | ((absx >> 13) & 0x3ffu) : 0u));
    if (absx >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
        return (uint16_t)(sign | 0x7c00u);
    if (absx < 0x38800000u) {
        /* result is subnormal or zero: scale so the integer part is the half mantissa */
        float a = fa_bits_f32(absx);
        float scaled = a * 16777216.0f; /* 2^24, exact */
        /* round half to even on the integer */
        uint32_t i = (uint32_t)scaled;
        float frac = scaled - (float)i;
        if (frac > 0.5f || (frac == 0.5f && (i & 1u)))
            i++;
        return (uint16_t)(sign | i);
    }
    uint32_t mant = absx & 0x7fffffu;
    uint32_t exp = (absx >> 23) - 112u;
    uint32_t h = (exp << 10) | (mant >> 13);
    uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
        h++; /* may carry into the exponent: still correct */
    return (uint16_t)(sign | h);
}

static inline float fa_bfloat_to_float(uint16_t h)
{
    return fa_bits_f32((uint32_t)h << 16);
}

static inline uint16_t fa_float_to_bfloat(float f)
{
    uint32_t x = fa_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u); /* quiet nan */
    uint32_t lsb = (x >> 16) & 1u;
    x += 0x7fffu + lsb;
    return (uint16_t)(x >> 16);
}

/* Element off of an array of dtype dt, as fp32; and the store that rounds to dt. */
static inline float fa_load_elem(fa_dtype dt, const void *base, int64_t off)
{
    switch (dt) {
    case FA_DTYPE_F16: return fa_half_to_float(((const uint16_t *)base)[off]);
    case FA_DTYPE_BF16: return fa_bfloat_to_float(((const uint16_t *)base)[off]);
    default: return ((const float *)base)[off];
    }
}

static inline void fa_store_elem(fa_dtype dt, void *base, int64_t off, float x)
{
    switch (dt) {
    case FA_DTYPE_F16: ((uint16_t *)base)[off] = fa_float_to_half(x); break;
    case FA_DTYPE_BF16: ((uint16_t *)base)[off] = fa_float_to_bfloat(x); break;
    default: ((float *)base)[off] = x; break;
    }
}

#endif /* FA_HALF_H */
