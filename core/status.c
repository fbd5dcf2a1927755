/* status.c: status strings, dtype names and sizes, and the last-error messages (per thread). */
#include "internal.h"
#include "half.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#define FA_STR2(x) #x
#define FA_STR(x) FA_STR2(x)

const char *fa_version(void)
{
    return FA_STR(FA_VERSION_MAJOR) "." FA_STR(FA_VERSION_MINOR) "." FA_STR(FA_VERSION_PATCH);
}

const char *fa_status_string(fa_status status)
{
    switch (status) {
    case FA_SUCCESS: return "FA_SUCCESS: success";
    case FA_ERR_INVALID_ARG: return "FA_ERR_INVALID_ARG: an argument is invalid (null pointer, shape, stride, option or size)";
    case FA_ERR_UNSUPPORTED: return "FA_ERR_UNSUPPORTED: valid, but the backend has no kernel for it";
    case FA_ERR_OUT_OF_MEMORY: return "FA_ERR_OUT_OF_MEMORY: a host or device allocation failed";
    case FA_ERR_NO_BACKEND: return "FA_ERR_NO_BACKEND: the backend is not compiled in or has no usable device";
    case FA_ERR_NO_DEVICE: return "FA_ERR_NO_DEVICE: the device index is out of range";
    case FA_ERR_BACKEND: return "FA_ERR_BACKEND: the vendor runtime reported an error";
    case FA_ERR_OVERFLOW: return "FA_ERR_OVERFLOW: a size or offset overflows 64 bits or size_t";
    case FA_ERR_INTERNAL: return "FA_ERR_INTERNAL: internal error in flashattn";
    }
    return "unknown fa_status value";
}

size_t fa_dtype_size(fa_dtype dtype)
{
    switch (dtype) {
    case FA_DTYPE_F32: return 4;
    case FA_DTYPE_F16: return 2;
    case FA_DTYPE_BF16: return 2;
    }
    return 0;
}

const char *fa_dtype_name(fa_dtype dtype)
{
    switch (dtype) {
    case FA_DTYPE_F32: return "fp32";
    case FA_DTYPE_F16: return "fp16";
    case FA_DTYPE_BF16: return "bf16";
    }
    return "unknown";
}

/* A thread's messages: slot 0 for calls without a context, the others for the contexts this thread
 * used most recently (reused in turn when there are more). Thread-local, so that threads sharing a
 * context never read or clear each other's message; no lock is needed. */
#define FA_ERROR_SLOTS 8

typedef struct error_slot {
    const fa_context *ctx;
    uint64_t serial;
    char message[FA_ERROR_MESSAGE_BYTES];
    char location[FA_ERROR_LOCATION_BYTES]; /* "validate.c:261": kept apart so messages read clean */
} error_slot;

static _Thread_local error_slot thread_errors[FA_ERROR_SLOTS];
static _Thread_local unsigned thread_next_slot;

static atomic_uint_fast64_t context_serials;

uint64_t fa_context_next_serial(void)
{
    return (uint64_t)atomic_fetch_add(&context_serials, 1) + 1;
}

/* The calling thread's slot for ctx; NULL if it has none and create is 0. */
static error_slot *thread_slot(const fa_context *ctx, int create)
{
    if (!ctx)
        return &thread_errors[0];
    error_slot *free_slot = NULL;
    for (int i = 1; i < FA_ERROR_SLOTS; ++i) {
        error_slot *s = &thread_errors[i];
        if (s->ctx == ctx && s->serial == ctx->serial)
            return s;
        if (!s->ctx && !free_slot)
            free_slot = s;
    }
    if (!create)
        return NULL;
    error_slot *s = free_slot ? free_slot : &thread_errors[1 + thread_next_slot++ % (FA_ERROR_SLOTS - 1)];
    s->ctx = ctx;
    s->serial = ctx->serial;
    s->message[0] = '\0';
    s->location[0] = '\0';
    return s;
}

fa_status fa_error_at(fa_context *ctx, fa_status status, const char *file, int line, const char *fmt, ...)
{
    if (status == FA_SUCCESS) {
        fa_clear_error(ctx);
        return status;
    }
    error_slot *s = thread_slot(ctx, 1);
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    snprintf(s->location, sizeof s->location, "%s:%d", base, line);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->message, sizeof s->message, fmt, ap);
    va_end(ap);
    return status;
}

void fa_clear_error(const fa_context *ctx)
{
    error_slot *s = thread_slot(ctx, 0);
    if (s) {
        s->message[0] = '\0';
        s->location[0] = '\0';
    }
}

void fa_error_move_to_thread(const fa_context *ctx)
{
    error_slot *s = ctx ? thread_slot(ctx, 0) : NULL;
    if (!s)
        return;
    memcpy(thread_errors[0].message, s->message, sizeof s->message);
    memcpy(thread_errors[0].location, s->location, sizeof s->location);
    s->ctx = NULL;
    s->message[0] = '\0';
    s->location[0] = '\0';
}

const char *fa_context_last_error(const fa_context *ctx)
{
    if (!ctx)
        return "no context";
    const error_slot *s = thread_slot(ctx, 0);
    return s ? s->message : "";
}

const char *fa_last_error(void)
{
    return thread_errors[0].message;
}

const char *fa_context_last_error_location(const fa_context *ctx)
{
    if (!ctx)
        return "";
    const error_slot *s = thread_slot(ctx, 0);
    return s ? s->location : "";
}

const char *fa_last_error_location(void)
{
    return thread_errors[0].location;
}

uint16_t fa_f32_to_f16(float x) { return fa_float_to_half(x); }
float fa_f16_to_f32(uint16_t h) { return fa_half_to_float(h); }
uint16_t fa_f32_to_bf16(float x) { return fa_float_to_bfloat(x); }
float fa_bf16_to_f32(uint16_t h) { return fa_bfloat_to_float(h); }

fa_tensor fa_tensor_contiguous(void *data, fa_dtype dtype, int ndim, const int64_t *shape)
{
    fa_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = dtype;
    t.ndim = ndim < 0 ? 0 : (ndim > FA_MAX_DIMS ? FA_MAX_DIMS : ndim);
    int64_t s = 1;
    for (int i = t.ndim - 1; i >= 0; --i) {
        t.shape[i] = shape ? shape[i] : 0;
        t.stride[i] = s;
        /* saturate rather than overflow (undefined behaviour): fa_forward then reports the
         * impossible size as FA_ERR_OVERFLOW */
        if (!fa_mul_ok(s, t.shape[i] > 0 ? t.shape[i] : 1, &s))
            s = INT64_MAX;
    }
    return t;
}
