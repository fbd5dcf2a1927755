/* kv_rows.h: score and P V micro-kernels for attention over a KV cache that read each key and
 * value row where it lies in the cache (fp32, or bf16 / fp16 widened in registers) instead of
 * copying it to fp32 scratch first. For decode a row serves only the few query rows of its group,
 * so a copy would cost as much as the arithmetic and put every cache miss on the critical path.
 * Rows are addressed through pointer arrays (one per key), which serves contiguous and paged
 * caches alike; every row holds d elements with d a multiple of 16 (callers check). */
#ifndef FA_CPU_KV_ROWS_H
#define FA_CPU_KV_ROWS_H

#include "flashattn.h"
#include "simd.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__clang__)
#define KV_SHUFFLE(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define KV_SHUFFLE(a, b, ...) __builtin_shuffle(a, b, (v8i){__VA_ARGS__})
#endif

/* IEEE binary16 bit patterns (in the low 16 bits of each lane; the high bits are ignored) to
 * fp32, exactly: the exponent and mantissa moved into fp32's places and scaled by 2^112 (normals
 * and subnormals alike), infinities and NaNs given fp32's all-ones exponent, then the sign. */
FA_VINLINE v8f kv_half8_to_float(v8i h)
{
    const v8i em = h & 0x7fff, sign = (h & 0x8000) << 16;
    const v8f scaled = bits_as_float(em << 13) * 0x1p112f;
    const v8i special = em >= 0x7c00; /* -1 where inf or NaN */
    const v8i bits = (float_as_bits(scaled) & ~special) | (((em << 13) | 0x7f800000) & special);
    return bits_as_float(bits | sign);
}

/* Channels c .. c + 15 of a row of dtype dt as two fp32 vectors. fp32: channels c .. c + 7 in lo,
 * c + 8 .. c + 15 in hi. 16-bit dtypes: one 32-byte load split into the even channels (lo) and
 * the odd ones (hi) by a shift and a mask, no widening shuffles; the query rows and accumulators
 * that meet such rows are kept in that order (kv_to_load_order). */
FA_VINLINE void kv_load16(fa_dtype dt, const void *row, int64_t c, v8f *lo, v8f *hi)
{
    if (dt == FA_DTYPE_F32) {
        *lo = load8((const float *)row + c);
        *hi = load8((const float *)row + c + VEC);
        return;
    }
    v8i u;
    memcpy(&u, (const uint16_t *)row + c, sizeof u);
    if (dt == FA_DTYPE_BF16) {
        *lo = bits_as_float(u << 16);
        *hi = bits_as_float(u & -65536);
    } else {
        *lo = kv_half8_to_float(u);
        *hi = kv_half8_to_float(u >> 16);
    }
}

/* x (d floats, d a multiple of 16) from channel order to the order kv_load16 gives rows of dtype
 * dt, and back. */
static inline void kv_to_load_order(fa_dtype dt, float *x, int64_t d)
{
    if (dt == FA_DTYPE_F32)
        return;
    for (int64_t c = 0; c < d; c += 2 * VEC) {
        float t[2 * VEC];
        for (int k = 0; k < VEC; ++k) {
            t[k] = x[c + 2 * k];
            t[VEC + k] = x[c + 2 * k + 1];
        }
        memcpy(x + c, t, sizeof t);
    }
}

static inline void kv_from_load_order(fa_dtype dt, float *x, int64_t d)
{
    if (dt == FA_DTYPE_F32)
        return;
    for (int64_t c = 0; c < d; c += 2 * VEC) {
        float t[2 * VEC];
        for (int k = 0; k < VEC; ++k) {
            t[2 * k] = x[c + k];
            t[2 * k + 1] = x[c + VEC + k];
        }
        memcpy(x + c, t, sizeof t);
    }
}

/* The sums of the lanes of eight vectors, as the lanes of one: pairwise sums of neighbouring
 * lanes three times over, the vectors interleaved so that lane i ends with the sum of x_i. */
FA_VINLINE v8f kv_sum8x8(v8f x0, v8f x1, v8f x2, v8f x3, v8f x4, v8f x5, v8f x6, v8f x7)
{
    const v8f p01 = KV_SHUFFLE(x0, x1, 0, 8, 2, 10, 4, 12, 6, 14) + KV_SHUFFLE(x0, x1, 1, 9, 3, 11, 5, 13, 7, 15);
    const v8f p23 = KV_SHUFFLE(x2, x3, 0, 8, 2, 10, 4, 12, 6, 14) + KV_SHUFFLE(x2, x3, 1, 9, 3, 11, 5, 13, 7, 15);
    const v8f p45 = KV_SHUFFLE(x4, x5, 0, 8, 2, 10, 4, 12, 6, 14) + KV_SHUFFLE(x4, x5, 1, 9, 3, 11, 5, 13, 7, 15);
    const v8f p67 = KV_SHUFFLE(x6, x7, 0, 8, 2, 10, 4, 12, 6, 14) + KV_SHUFFLE(x6, x7, 1, 9, 3, 11, 5, 13, 7, 15);
    /* p01 = [x0 01, x1 01, x0 23, x1 23, x0 45, x1 45, x0 67, x1 67] (lane pairs summed) */
    const v8f q03 = KV_SHUFFLE(p01, p23, 0, 1, 8, 9, 4, 5, 12, 13) + KV_SHUFFLE(p01, p23, 2, 3, 10, 11, 6, 7, 14, 15);
    const v8f q47 = KV_SHUFFLE(p45, p67, 0, 1, 8, 9, 4, 5, 12, 13) + KV_SHUFFLE(p45, p67, 2, 3, 10, 11, 6, 7, 14, 15);
    /* q03 = [x0..x3 over lanes 0-3, x0..x3 over lanes 4-7] */
    return KV_SHUFFLE(q03, q47, 0, 1, 2, 3, 8, 9, 10, 11) + KV_SHUFFLE(q03, q47, 4, 5, 6, 7, 12, 13, 14, 15);
}

/* s[r * lds + j], r < 4, j < nk (rounded up to 2: the caller pads krow): four query rows (dp
 * floats apart, in dt's load order) against keys two at a time; each key slice is loaded once for
 * the four rows and the eight sums are reduced together. */
FA_VINLINE void kv_scores4(fa_dtype dt, const float *q, int64_t dp, const void *const *krow, int64_t nk, int64_t d,
                           float *s, int64_t lds)
{
    for (int64_t j = 0; j < nk; j += 2) {
        const void *k0 = krow[j], *k1 = krow[j + 1];
        v8f a00 = {0}, a01 = {0}, a10 = {0}, a11 = {0}, a20 = {0}, a21 = {0}, a30 = {0}, a31 = {0};
        for (int64_t c = 0; c < d; c += 2 * VEC) {
            v8f x0, y0, x1, y1;
            kv_load16(dt, k0, c, &x0, &y0);
            kv_load16(dt, k1, c, &x1, &y1);
            const v8f q0 = load8(q + c), q1 = load8(q + dp + c), q2 = load8(q + 2 * dp + c), q3 = load8(q + 3 * dp + c);
            a00 += q0 * x0;
            a01 += q0 * x1;
            a10 += q1 * x0;
            a11 += q1 * x1;
            a20 += q2 * x0;
            a21 += q2 * x1;
            a30 += q3 * x0;
            a31 += q3 * x1;
            const v8f r0 = load8(q + c + VEC), r1 = load8(q + dp + c + VEC), r2 = load8(q + 2 * dp + c + VEC),
                      r3 = load8(q + 3 * dp + c + VEC);
            a00 += r0 * y0;
            a01 += r0 * y1;
            a10 += r1 * y0;
            a11 += r1 * y1;
            a20 += r2 * y0;
            a21 += r2 * y1;
            a30 += r3 * y0;
            a31 += r3 * y1;
        }
        float t[VEC];
        store8(t, kv_sum8x8(a00, a01, a10, a11, a20, a21, a30, a31));
        for (int r = 0; r < 4; ++r) {
            s[r * lds + j] = t[2 * r];
            s[r * lds + j + 1] = t[2 * r + 1];
        }
    }
}

/* s[j], j < nk (rounded up to VEC: the caller pads krow): one query row (in dt's load order)
 * against eight keys at a time. */
FA_VINLINE void kv_scores1(fa_dtype dt, const float *q, const void *const *krow, int64_t nk, int64_t d, float *s)
{
    for (int64_t j = 0; j < nk; j += VEC) {
        v8f a[VEC] = {{0}};
        for (int64_t c = 0; c < d; c += 2 * VEC) {
            const v8f ql = load8(q + c), qh = load8(q + c + VEC);
            for (int k = 0; k < VEC; ++k) {
                v8f x, y;
                kv_load16(dt, krow[j + k], c, &x, &y);
                a[k] += ql * x;
                a[k] += qh * y;
            }
        }
        store8(s + j, kv_sum8x8(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]));
    }
}

/* acc rows 0..3 (dp floats apart, in dt's load order) += sum over keys j < nk of
 * e[r * lde + j] v_j: sixteen channels of the four rows stay in registers through the keys, each
 * value slice loaded once for the four rows. */
FA_VINLINE void kv_pv4(fa_dtype dt, float *acc, int64_t dp, const float *e, int64_t lde, const void *const *vrow,
                       int64_t nk, int64_t d)
{
    for (int64_t c = 0; c < d; c += 2 * VEC) {
        v8f a00 = load8(acc + c), a01 = load8(acc + c + VEC), a10 = load8(acc + dp + c), a11 = load8(acc + dp + c + VEC);
        v8f a20 = load8(acc + 2 * dp + c), a21 = load8(acc + 2 * dp + c + VEC);
        v8f a30 = load8(acc + 3 * dp + c), a31 = load8(acc + 3 * dp + c + VEC);
        for (int64_t j = 0; j < nk; ++j) {
            v8f x0, x1;
            kv_load16(dt, vrow[j], c, &x0, &x1);
            const float e0 = e[j], e1 = e[lde + j], e2 = e[2 * lde + j], e3 = e[3 * lde + j];
            a00 += e0 * x0;
            a01 += e0 * x1;
            a10 += e1 * x0;
            a11 += e1 * x1;
            a20 += e2 * x0;
            a21 += e2 * x1;
            a30 += e3 * x0;
            a31 += e3 * x1;
        }
        store8(acc + c, a00);
        store8(acc + c + VEC, a01);
        store8(acc + dp + c, a10);
        store8(acc + dp + c + VEC, a11);
        store8(acc + 2 * dp + c, a20);
        store8(acc + 2 * dp + c + VEC, a21);
        store8(acc + 3 * dp + c, a30);
        store8(acc + 3 * dp + c + VEC, a31);
    }
}

/* acc (one row, in dt's load order) += sum over keys j < nk of e[j] v_j, skipping the keys whose
 * score is -inf (the row cannot see them, whatever their values hold); 32 channels at a time. */
FA_VINLINE void kv_pv1(fa_dtype dt, float *acc, const float *s, const float *e, const void *const *vrow, int64_t nk,
                       int64_t d)
{
    int64_t c = 0;
    for (; c + 4 * VEC <= d; c += 4 * VEC) {
        v8f a0 = load8(acc + c), a1 = load8(acc + c + VEC), a2 = load8(acc + c + 2 * VEC), a3 = load8(acc + c + 3 * VEC);
        for (int64_t j = 0; j < nk; ++j) {
            if (s[j] == -INFINITY)
                continue;
            v8f x0, x1, x2, x3;
            kv_load16(dt, vrow[j], c, &x0, &x1);
            kv_load16(dt, vrow[j], c + 2 * VEC, &x2, &x3);
            const float w = e[j];
            a0 += w * x0;
            a1 += w * x1;
            a2 += w * x2;
            a3 += w * x3;
        }
        store8(acc + c, a0);
        store8(acc + c + VEC, a1);
        store8(acc + c + 2 * VEC, a2);
        store8(acc + c + 3 * VEC, a3);
    }
    for (; c < d; c += 2 * VEC) {
        v8f a0 = load8(acc + c), a1 = load8(acc + c + VEC);
        for (int64_t j = 0; j < nk; ++j) {
            if (s[j] == -INFINITY)
                continue;
            v8f x0, x1;
            kv_load16(dt, vrow[j], c, &x0, &x1);
            a0 += e[j] * x0;
            a1 += e[j] * x1;
        }
        store8(acc + c, a0);
        store8(acc + c + VEC, a1);
    }
}

#endif
