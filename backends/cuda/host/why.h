/* why.h: the host layer's failure messages, written into a caller's (why, why_len) buffer, which
 * every function of host/ that can fail takes: fa_why_set replaces it, fa_why_append adds to it
 * what fits. A NULL or empty buffer is left alone. Plain C. */
#ifndef FA_CUDA_HOST_WHY_H
#define FA_CUDA_HOST_WHY_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#if defined(__GNUC__)
#define FA_WHY_FORMAT __attribute__((format(printf, 3, 4)))
#else
#define FA_WHY_FORMAT
#endif

static inline FA_WHY_FORMAT void fa_why_set(char *why, size_t why_len, const char *fmt, ...)
{
    if (!why || why_len == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, why_len, fmt, ap);
    va_end(ap);
}

static inline FA_WHY_FORMAT void fa_why_append(char *why, size_t why_len, const char *fmt, ...)
{
    if (!why || why_len == 0)
        return;
    const size_t used = strnlen(why, why_len - 1);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why + used, why_len - used, fmt, ap);
    va_end(ap);
}

#endif
