/* module.h: the contract between the library and a backend built as a shared module
 * (libflashattn-<name>.so, loaded at first use by core/module.c): the module exports one function,
 * FA_MODULE_INIT, which takes the core services it may call (error messages, dtype names) and
 * returns its backend table. Both sides are built from one tree: the module refuses a library whose
 * version, ABI number or shared structures' sizes differ from its own. No vendor header. */
#ifndef FA_MODULE_H
#define FA_MODULE_H

#include "internal.h"

#include <stdio.h>
#include <string.h>

/* Bump when fa_backend, fa_context, fa_problem, fa_kv_problem or fa_module_services change in a
 * way their sizes do not show. */
#define FA_MODULE_ABI 1

#define FA_MODULE_STR2(x) #x
#define FA_MODULE_STR(x) FA_MODULE_STR2(x)
#define FA_MODULE_VERSION                                                                                          \
    FA_MODULE_STR(FA_VERSION_MAJOR) "." FA_MODULE_STR(FA_VERSION_MINOR) "." FA_MODULE_STR(FA_VERSION_PATCH)

typedef struct fa_module_services {
    int abi;             /* FA_MODULE_ABI */
    const char *version; /* FA_MODULE_VERSION */
    size_t sizes[5];     /* FA_MODULE_SIZES */
    /* fa_error_at with the message already formatted */
    fa_status (*error)(fa_context *ctx, fa_status status, const char *file, int line, const char *message);
    size_t (*dtype_size)(fa_dtype dtype);
    const char *(*dtype_name)(fa_dtype dtype);
} fa_module_services;

#define FA_MODULE_SIZES                                                                                            \
    {sizeof(fa_module_services), sizeof(fa_backend), sizeof(struct fa_context), sizeof(fa_problem),               \
     sizeof(fa_kv_problem)}

/* The module's one exported function: its table, or NULL with the reason in why. */
typedef const fa_backend *(*fa_module_init_fn)(const fa_module_services *core, char *why, size_t len);
#define FA_MODULE_INIT "fa_backend_module_init"

/* The module's check that the library loading it was built from the same tree. */
static inline int fa_module_services_match(const fa_module_services *core, char *why, size_t len)
{
    const size_t sizes[5] = FA_MODULE_SIZES;
    if (core && core->abi == FA_MODULE_ABI && strcmp(core->version, FA_MODULE_VERSION) == 0 &&
        memcmp(core->sizes, sizes, sizeof sizes) == 0)
        return 1;
    snprintf(why, len, "the module is built for flashattn %s (module ABI %d), the library is %s (ABI %d): install "
             "both from one build", FA_MODULE_VERSION, FA_MODULE_ABI, core ? core->version : "?", core ? core->abi : -1);
    return 0;
}

/* core/module.c: the table of the backend built as module `name` (loaded at the first call, once),
 * or NULL with why it cannot be loaded in why ("library not found: ..."). */
const fa_backend *fa_module_backend(const char *name, char *why, size_t len);

#endif /* FA_MODULE_H */
