/* dl_symbols.h: a table of symbols resolved from a library opened with dlopen, for the run-time
 * loaders of the CUDA host code (the driver API, NVRTC). */
#ifndef FA_GPU_DL_SYMBOLS_H
#define FA_GPU_DL_SYMBOLS_H

#include <dlfcn.h>
#include <stddef.h>

typedef struct fa_dl_symbol {
    const char *name;
    void **slot; /* a function pointer seen as void *: POSIX's idiom for dlsym's result */
} fa_dl_symbol;

/* Fills every slot of table[0..n); NULL when all resolved, else the name of the first symbol the
 * library lacks, with dlerror's text in *err ("not found" when it has none). */
static inline const char *fa_dl_resolve(void *lib, const fa_dl_symbol *table, size_t n, const char **err)
{
    for (size_t i = 0; i < n; ++i) {
        dlerror();
        *table[i].slot = dlsym(lib, table[i].name);
        if (!*table[i].slot) {
            const char *e = dlerror();
            *err = e ? e : "not found";
            return table[i].name;
        }
    }
    return NULL;
}

#endif /* FA_GPU_DL_SYMBOLS_H */
