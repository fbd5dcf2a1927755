/* loader.c: opens the OpenCL ICD loader at run time and fills ocl_api (loader.h), once. The
 * library is never closed: contexts may hold its objects until the process ends. */
#define CL_TARGET_OPENCL_VERSION 120
#include "loader.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ocl_api_table ocl_api;
static char load_error[512];
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

static int symbol(void *lib, const char *name, void *fn)
{
    void *sym = dlsym(lib, name);
    memcpy(fn, &sym, sizeof sym); /* object pointer to function pointer without a cast */
    return sym != NULL;
}

static void load(void)
{
    const char *env = getenv("FLASHATTN_OPENCL_LIBRARY");
    const char *names[2] = {"libOpenCL.so.1", "libOpenCL.so"};
    int nnames = 2;
    if (env && *env) { /* the named file only: a test or a user pointing at one ICD loader */
        names[0] = env;
        nnames = 1;
    }
    void *lib = NULL;
    const char *opened = NULL;
    for (int i = 0; i < nnames && !lib; ++i) {
        lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (lib) {
            opened = names[i];
        } else if (i == 0) { /* the first name's message: the one the user can act on */
            const char *e = dlerror();
            snprintf(load_error, sizeof load_error, "library not found: %s%s", e ? e : names[i],
                     env && *env ? " (FLASHATTN_OPENCL_LIBRARY)" : "");
        }
    }
    if (!lib)
        return;
    ocl_api_table t;
#define OCL_API_SYMBOL(name)                                                                                       \
    if (!symbol(lib, #name, &t.name)) {                                                                            \
        snprintf(load_error, sizeof load_error, "library not usable: %s has no %s", opened, #name);                \
        dlclose(lib);                                                                                              \
        return;                                                                                                    \
    }
    OCL_API_FUNCTIONS(OCL_API_SYMBOL)
#undef OCL_API_SYMBOL
    ocl_api = t;
    load_error[0] = '\0';
}

const char *ocl_api_load(void)
{
    pthread_once(&load_once, load);
    return load_error[0] ? load_error : NULL;
}
