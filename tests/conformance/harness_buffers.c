/* harness_buffers.c: the harness's tensors (harness_buffers.h): host images with guard bytes after
 * them and device copies, strides for each layout, random inputs, and the checks of an output
 * buffer (guard bytes, gaps between strided elements, elements never written). */
#include "harness_buffers.h"
#include "half.h"
#include "testrand.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the bytes from the first element to one past the last */
static size_t span_bytes(const fa_tensor *t)
{
    int64_t last = 0, n = 1;
    for (int i = 0; i < t->ndim; ++i) {
        last += (t->shape[i] - 1) * t->stride[i];
        n *= t->shape[i];
    }
    if (n == 0)
        return 0;
    return (size_t)(last + 1) * fa_dtype_size(t->dtype);
}

/* strides for [outer, rows, heads, d] (ndim 4) or [rows, heads, d] (ndim 3) in a layout */
void make_strides(fa_tensor *t, layout_kind layout)
{
    int nd = t->ndim;
    int64_t d = t->shape[nd - 1], h = t->shape[nd - 2], s = t->shape[nd - 3];
    int64_t sd = 1, sh, ss, sb = 0;
    switch (layout) {
    case LAYOUT_PADDED:
        sh = d + 3;
        ss = h * sh + 5;
        sb = s * ss + 7;
        break;
    case LAYOUT_BHSD:
        ss = d;
        sh = s * d;
        sb = h * s * d;
        break;
    default:
        sh = d;
        ss = h * d;
        sb = s * h * d;
        break;
    }
    t->stride[nd - 1] = sd;
    t->stride[nd - 2] = sh;
    t->stride[nd - 3] = ss;
    if (nd == 4)
        t->stride[0] = sb;
}

void make_lse_strides(fa_tensor *t, layout_kind layout)
{
    int64_t pad = layout == LAYOUT_PADDED ? 2 : 0;
    if (t->ndim == 3) { /* [b, h, s] */
        t->stride[2] = 1;
        t->stride[1] = t->shape[2] + pad;
        t->stride[0] = t->shape[1] * t->stride[1];
    } else { /* [h, total] */
        t->stride[1] = 1;
        t->stride[0] = t->shape[1] + pad;
    }
}

int tbuf_alloc(fa_context *ctx, tbuf *b, int output)
{
    b->bytes = span_bytes(&b->t);
    b->host = malloc(b->bytes + GUARD_BYTES);
    if (!b->host)
        return 0;
    memset(b->host, output ? POISON_BYTE : 0, b->bytes);
    memset(b->host + b->bytes, GUARD_BYTE, GUARD_BYTES);
    if (fa_malloc(ctx, b->bytes + GUARD_BYTES, &b->dev) != FA_SUCCESS)
        return 0;
    b->t.data = b->dev;
    if (output) {
        size_t esz = fa_dtype_size(b->t.dtype);
        b->elem_map = calloc(b->bytes / esz + 1, 1);
        if (!b->elem_map)
            return 0;
        int64_t idx[FA_MAX_DIMS] = {0}, n = 1;
        for (int i = 0; i < b->t.ndim; ++i)
            n *= b->t.shape[i];
        for (int64_t e = 0; e < n; ++e) {
            int64_t off = 0, rem = e;
            for (int i = b->t.ndim - 1; i >= 0; --i) {
                idx[i] = rem % b->t.shape[i];
                rem /= b->t.shape[i];
                off += idx[i] * b->t.stride[i];
            }
            b->elem_map[off] = 1;
        }
    }
    return 1;
}

fa_status tbuf_upload(fa_context *ctx, tbuf *b)
{
    return fa_memcpy(ctx, b->dev, b->host, b->bytes + GUARD_BYTES, FA_COPY_HOST_TO_DEVICE);
}

fa_status tbuf_download(fa_context *ctx, tbuf *b)
{
    return fa_memcpy(ctx, b->host, b->dev, b->bytes + GUARD_BYTES, FA_COPY_DEVICE_TO_HOST);
}

void tbuf_free(fa_context *ctx, tbuf *b)
{
    if (b->dev)
        fa_free(ctx, b->dev);
    free(b->host);
    free(b->elem_map);
    memset(b, 0, sizeof *b);
}

/* The host image as a tensor (same strides), for the reference. */
fa_tensor tbuf_host_tensor(const tbuf *b)
{
    fa_tensor t = b->t;
    t.data = b->host;
    return t;
}

void set_elem(tbuf *b, int64_t off, double x)
{
    switch (b->t.dtype) {
    case FA_DTYPE_F32: ((float *)b->host)[off] = (float)x; break;
    case FA_DTYPE_F16: ((uint16_t *)b->host)[off] = fa_float_to_half((float)x); break;
    case FA_DTYPE_BF16: ((uint16_t *)b->host)[off] = fa_float_to_bfloat((float)x); break;
    }
}

void fill_normal(tbuf *b, uint64_t *rng)
{
    int64_t n = 1;
    for (int i = 0; i < b->t.ndim; ++i)
        n *= b->t.shape[i];
    for (int64_t e = 0; e < n; ++e) {
        int64_t off = 0, rem = e;
        for (int i = b->t.ndim - 1; i >= 0; --i) {
            off += (rem % b->t.shape[i]) * b->t.stride[i];
            rem /= b->t.shape[i];
        }
        set_elem(b, off, rng_normal(rng));
    }
}

/* Guard bytes untouched, gaps between strided elements untouched, every element written. */
int check_output_buffer(const char *name, const tbuf *b, char *why, size_t len)
{
    for (size_t i = 0; i < GUARD_BYTES; ++i)
        if (b->host[b->bytes + i] != GUARD_BYTE) {
            snprintf(why, len, "%s: guard byte %zu after the buffer was overwritten", name, i);
            return 0;
        }
    size_t esz = fa_dtype_size(b->t.dtype), n = b->bytes / esz;
    for (size_t e = 0; e < n; ++e) {
        const uint8_t *p = b->host + e * esz;
        int all_poison = 1;
        for (size_t k = 0; k < esz; ++k)
            all_poison &= p[k] == POISON_BYTE;
        if (b->elem_map[e] && all_poison) {
            snprintf(why, len, "%s: element at offset %zu was never written", name, e);
            return 0;
        }
        if (!b->elem_map[e] && !all_poison) {
            snprintf(why, len, "%s: gap at offset %zu between strided elements was written", name, e);
            return 0;
        }
    }
    return 1;
}

void poison_elements(tbuf *b, uint16_t half_pattern)
{
    size_t esz = fa_dtype_size(b->t.dtype), n = b->bytes / esz;
    uint32_t word = (uint32_t)half_pattern << 16 | half_pattern;
    for (size_t e = 0; e < n; ++e) {
        if (!b->elem_map[e])
            continue;
        if (esz == 4)
            memcpy(b->host + e * 4, &word, 4);
        else
            memcpy(b->host + e * 2, &half_pattern, 2);
    }
}

/* The offset of the first element that still holds the pattern, or -1. */
int64_t first_poisoned_element(const tbuf *b, uint16_t half_pattern)
{
    size_t esz = fa_dtype_size(b->t.dtype), n = b->bytes / esz;
    uint32_t word = (uint32_t)half_pattern << 16 | half_pattern;
    for (size_t e = 0; e < n; ++e) {
        if (!b->elem_map[e])
            continue;
        if (esz == 4 ? memcmp(b->host + e * 4, &word, 4) == 0 : memcmp(b->host + e * 2, &half_pattern, 2) == 0)
            return (int64_t)e;
    }
    return -1;
}
