/* module.c: backends built as shared modules, loaded at first use: the HIP backend lives in
 * libflashattn-hip.so (it links the ROCm runtime, whose module constructors run when it loads), so
 * that libflashattn itself loads where ROCm is absent. The module is looked for, in order:
 *   FLASHATTN_<NAME>_MODULE    a path (then only there: tests and users pointing at one build);
 *   beside the file holding the library's code (libflashattn.so, or the program that linked
 *                              libflashattn.a), found with dladdr;
 *   a Python install's copy    the program's directory /../lib/python3.* /{site,dist}-packages/
 *                              .flashattn.mesonpy.libs (a wheel puts the flashattn tool in bin/
 *                              and both libraries there; the tool links libflashattn.a);
 *   the library search path    LD_LIBRARY_PATH, the program's runpath, ld.so.cache;
 *   FA_MODULE_DIR              where `meson install` puts it (prefix / libdir).
 * A module that is found but cannot load (its runtime is missing) stops the search with dlopen's
 * message. Modules are never closed: contexts point into their tables. */
#include "module.h"

#include <ctype.h>
#include <stdarg.h>
#include <dlfcn.h>
#include <glob.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct module_slot {
    const char *name;
    int tried;
    const fa_backend *table;
    char why[FA_ERROR_MESSAGE_BYTES];
} module_slot;

static module_slot slots[] = {
#ifdef FA_HAVE_HIP
    {.name = "hip"},
#endif
    {.name = NULL},
};
static pthread_mutex_t slots_lock = PTHREAD_MUTEX_INITIALIZER;
static const char anchor; /* an address inside the file that holds this code, for dladdr */

/* A reason into why (truncated to len: a long path must not fail the load). */
static void set_why(char *why, size_t len, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static void set_why(char *why, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, len, fmt, ap);
    va_end(ap);
}

static fa_status module_error(fa_context *ctx, fa_status status, const char *file, int line, const char *message)
{
    return fa_error_at(ctx, status, file, line, "%s", message);
}

static const fa_module_services services = {
    .abi = FA_MODULE_ABI,
    .version = FA_MODULE_VERSION,
    .sizes = FA_MODULE_SIZES,
    .error = module_error,
    .dtype_size = fa_dtype_size,
    .dtype_name = fa_dtype_name,
};

/* dlopen of one candidate; a file that exists but does not load ends the search (*stop). */
static void *open_candidate(const char *path, int must_exist, char *why, size_t len, int *stop)
{
    if (must_exist && access(path, F_OK) != 0)
        return NULL;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        set_why(why, len, "library not found: %s", e ? e : path);
        *stop = must_exist;
    }
    return h;
}

/* The module in a Python install of the wheel, found from the running program's path. */
static void *open_in_python_install(const char *file, char *why, size_t len, int *stop)
{
    char exe[4096], pattern[4096 + 128];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return NULL;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash)
        return NULL;
    *slash = '\0';
    snprintf(pattern, sizeof pattern, "%s/../lib/python3*/*-packages/.flashattn.mesonpy.libs/%s", exe, file);
    glob_t g;
    void *h = NULL;
    if (glob(pattern, 0, NULL, &g) == 0) {
        for (size_t i = 0; !h && !*stop && i < g.gl_pathc; ++i)
            h = open_candidate(g.gl_pathv[i], 1, why, len, stop);
        globfree(&g);
    }
    return h;
}

static void *open_module(const char *name, char *why, size_t len)
{
    char env_name[64], file[64], path[4096];
    snprintf(env_name, sizeof env_name, "FLASHATTN_%s_MODULE", name);
    for (char *c = env_name; *c; ++c)
        *c = (char)toupper((unsigned char)*c);
    snprintf(file, sizeof file, "libflashattn-%s.so", name);
    const char *env = getenv(env_name);
    if (env && *env) {
        void *h = dlopen(env, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            const char *e = dlerror();
            set_why(why, len, "library not found: %s (%s)", e ? e : env, env_name);
        }
        return h;
    }
    int stop = 0;
    void *h = NULL;
    Dl_info info;
    if (dladdr(&anchor, &info) && info.dli_fname) {
        const char *slash = strrchr(info.dli_fname, '/');
        int dir_len = slash ? (int)(slash - info.dli_fname) : 1;
        snprintf(path, sizeof path, "%.*s/%s", dir_len, slash ? info.dli_fname : ".", file);
        h = open_candidate(path, 1, why, len, &stop);
    }
    if (!h && !stop)
        h = open_in_python_install(file, why, len, &stop);
    if (!h && !stop)
        h = open_candidate(file, 0, why, len, &stop);
#ifdef FA_MODULE_DIR
    if (!h && !stop) {
        char bare_why[FA_ERROR_MESSAGE_BYTES];
        snprintf(bare_why, sizeof bare_why, "%s", why);
        snprintf(path, sizeof path, "%s/%s", FA_MODULE_DIR, file);
        h = open_candidate(path, 1, why, len, &stop);
        if (!h && !stop) /* not there either: the search path's message */
            set_why(why, len, "%s (nor in %s)", bare_why, FA_MODULE_DIR);
    }
#endif
    return h;
}

static void load(module_slot *m)
{
    void *h = open_module(m->name, m->why, sizeof m->why);
    if (!h)
        return;
    fa_module_init_fn init;
    void *sym = dlsym(h, FA_MODULE_INIT);
    memcpy(&init, &sym, sizeof sym); /* object pointer to function pointer without a cast */
    if (!sym) {
        set_why(m->why, sizeof m->why, "library not usable: libflashattn-%s.so has no %s", m->name, FA_MODULE_INIT);
        return;
    }
    char why[FA_ERROR_MESSAGE_BYTES] = "";
    m->table = init(&services, why, sizeof why);
    if (!m->table)
        set_why(m->why, sizeof m->why, "library not usable: libflashattn-%s.so: %s", m->name, why);
}

const fa_backend *fa_module_backend(const char *name, char *why, size_t len)
{
    module_slot *m = NULL;
    for (module_slot *s = slots; s->name; ++s)
        if (strcmp(s->name, name) == 0)
            m = s;
    if (!m) {
        if (why && len)
            set_why(why, len, "not built as a module");
        return NULL;
    }
    pthread_mutex_lock(&slots_lock);
    if (!m->tried) {
        m->tried = 1;
        load(m);
    }
    pthread_mutex_unlock(&slots_lock);
    if (!m->table && why && len)
        set_why(why, len, "%s", m->why);
    return m->table;
}
