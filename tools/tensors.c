/* tensors.c: buffers in the context's memory, element access, sizes and the score-range check
 * (tensors.h). */
#include "tensors.h"
#include "cli.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

fa_status device_alloc(fa_context *ctx, size_t bytes, device_buffer *buf)
{
    buf->ptr = NULL;
    buf->bytes = bytes;
    if (bytes == 0)
        return FA_SUCCESS;
    return fa_malloc(ctx, bytes, &buf->ptr);
}

fa_status device_upload(fa_context *ctx, const void *host, size_t bytes, device_buffer *buf)
{
    fa_status st = device_alloc(ctx, bytes, buf);
    if (st == FA_SUCCESS && bytes)
        st = fa_memcpy(ctx, buf->ptr, host, bytes, FA_COPY_HOST_TO_DEVICE);
    return st;
}

fa_status device_download(fa_context *ctx, const device_buffer *buf, void *host)
{
    if (buf->bytes == 0)
        return FA_SUCCESS;
    return fa_memcpy(ctx, host, buf->ptr, buf->bytes, FA_COPY_DEVICE_TO_HOST);
}

void device_release(fa_context *ctx, device_buffer *buf)
{
    if (ctx && buf->ptr)
        fa_free(ctx, buf->ptr);
    buf->ptr = NULL;
    buf->bytes = 0;
}

npy_type npy_type_of(fa_dtype dt)
{
    switch (dt) {
    case FA_DTYPE_F16: return NPY_TYPE_F16;
    case FA_DTYPE_BF16: return NPY_TYPE_U16;
    default: return NPY_TYPE_F32;
    }
}

float dtype_load(fa_dtype dt, const void *data, int64_t i)
{
    switch (dt) {
    case FA_DTYPE_F16: return fa_f16_to_f32(((const uint16_t *)data)[i]);
    case FA_DTYPE_BF16: return fa_bf16_to_f32(((const uint16_t *)data)[i]);
    default: return ((const float *)data)[i];
    }
}

void dtype_store(fa_dtype dt, void *data, int64_t i, float x)
{
    switch (dt) {
    case FA_DTYPE_F16: ((uint16_t *)data)[i] = fa_f32_to_f16(x); break;
    case FA_DTYPE_BF16: ((uint16_t *)data)[i] = fa_f32_to_bf16(x); break;
    default: ((float *)data)[i] = x; break;
    }
}

int shape_bytes(int ndim, const int64_t *shape, size_t elem, int64_t *count, size_t *bytes)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i)
        if (shape[i] < 0 || !tool_mul_ok(n, shape[i], &n))
            return 0;
    int64_t b;
    if (!tool_mul_ok(n, (int64_t)elem, &b) || (uint64_t)b > (uint64_t)SIZE_MAX)
        return 0;
    if (count)
        *count = n;
    *bytes = (size_t)b;
    return 1;
}

/* The largest Euclidean norm of the count / d rows of d elements (non-finite elements left out:
 * they propagate as documented, and are not what the score bound is about). */
double max_row_norm(fa_dtype dt, const void *data, int64_t count, int64_t d)
{
    double best = 0.0;
    if (d <= 0)
        return best;
    for (int64_t row = 0; row < count / d; ++row) {
        double sum = 0.0;
        for (int64_t c = 0; c < d; ++c) {
            double x = dtype_load(dt, data, row * d + c);
            if (isfinite(x))
                sum += x * x;
        }
        if (sqrt(sum) > best)
            best = sqrt(sum);
    }
    return best;
}

int check_score_range(const char *cmd, float softmax_scale, fa_dtype dt, int64_t d, const void *q, int64_t q_count,
                      const char *q_name, const void *k, int64_t k_count, const char *k_name)
{
    if (d <= 0) /* no scores at all; the library judges the shape */
        return 0;
    return check_score_bound(cmd, softmax_scale, d, max_row_norm(dt, q, q_count, d), q_name,
                             max_row_norm(dt, k, k_count, d), k_name);
}

int check_score_bound(const char *cmd, float softmax_scale, int64_t d, double nq, const char *q_name, double nk,
                      const char *k_name)
{
    if (d <= 0)
        return 0;
    double scale = softmax_scale != 0.0f ? fabs((double)softmax_scale) : 1.0 / sqrt((double)d);
    double reach = scale * nq * nk;
    if (reach <= (double)FLT_MAX / 4.0)
        return 0;
    fprintf(stderr,
            "flashattn %s: the scores can reach %.3g (scale %.3g x largest row norm of %s %.3g x of %s %.3g), above "
            "FLT_MAX / 4 = %.3g: they could overflow float32; use a smaller --scale or scale the inputs down\n",
            cmd, reach, scale, q_name, nq, k_name, nk, (double)FLT_MAX / 4.0);
    return EXIT_USAGE;
}

int alibi_slopes_layout(const npy_array *slopes, int64_t batch, int64_t heads, int64_t *stride, char *why,
                        size_t why_len)
{
    if (slopes->type != NPY_TYPE_F32) {
        snprintf(why, why_len, "dtype '%s'; ALiBi slopes must be float32 '<f4'", npy_type_descr(slopes->type));
        return -1;
    }
    if (slopes->ndim == 1 && slopes->shape[0] == heads) {
        *stride = 0;
        return 0;
    }
    if (slopes->ndim == 2 && slopes->shape[0] == batch && slopes->shape[1] == heads) {
        *stride = heads;
        return 0;
    }
    char got[256];
    npy_format_shape(slopes->ndim, slopes->shape, got, sizeof got);
    snprintf(why, why_len, "shape %s; ALiBi slopes are [heads_q] = (%lld,) or [batch, heads_q] = (%lld, %lld)", got,
             (long long)heads, (long long)batch, (long long)heads);
    return -1;
}

int sink_layout(const npy_array *sink, int64_t heads, char *why, size_t why_len)
{
    if (sink->type != NPY_TYPE_F32) {
        snprintf(why, why_len, "dtype '%s'; sink logits must be float32 '<f4'", npy_type_descr(sink->type));
        return -1;
    }
    if (sink->ndim == 1 && sink->shape[0] == heads)
        return 0;
    char got[256];
    npy_format_shape(sink->ndim, sink->shape, got, sizeof got);
    snprintf(why, why_len, "shape %s; sink logits are one per query head: [heads_q] = (%lld,)", got, (long long)heads);
    return -1;
}
