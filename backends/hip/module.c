/* module.c: the HIP backend as a shared module, libflashattn-hip.so (core/module.h): its one
 * exported function, and the core services backend.c and the host glue call (error messages, dtype
 * names), forwarded to the library that loaded the module, so that a message recorded here is the
 * one fa_last_error() and fa_context_last_error() return there. The module links the ROCm runtime
 * (libamdhip64), whose registration of the kernels' code objects runs when the module loads;
 * libflashattn itself does not. */
#include "module.h"

#include <stdarg.h>
#include <stdio.h>

extern const fa_backend fa_backend_hip;

static const fa_module_services *core;

fa_status fa_error_at(fa_context *ctx, fa_status status, const char *file, int line, const char *fmt, ...)
{
    char message[FA_ERROR_MESSAGE_BYTES];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    return core->error(ctx, status, file, line, message);
}

size_t fa_dtype_size(fa_dtype dtype)
{
    return core->dtype_size(dtype);
}

const char *fa_dtype_name(fa_dtype dtype)
{
    return core->dtype_name(dtype);
}

/* the only symbol module.map exports */
__attribute__((visibility("default"))) const fa_backend *fa_backend_module_init(const fa_module_services *services,
                                                                                char *why, size_t len)
{
    if (!fa_module_services_match(services, why, len))
        return NULL;
    core = services;
    return &fa_backend_hip;
}
