/* rtc_compiler.c: NVRTC through dlopen, and the disk cache around it (rtc_compiler.h says what for).
 *
 * libnvrtc: $FLASHATTN_NVRTC_LIBRARY when set (a path or a name, the only one tried), else
 * libnvrtc.so.13, libnvrtc.so.12, libnvrtc.so by the dynamic loader's search (LD_LIBRARY_PATH, the
 * ld.so cache, which a distribution's package fills), then in a CUDA toolkit's library folder:
 * $CUDA_HOME's, $CUDA_PATH's, /usr/local/cuda's (lib64, then lib). The Python package points the
 * variable at the NVRTC of the nvidia-cuda-nvrtc wheel (PyTorch's) where it finds one. The nvrtc*
 * prototypes are written out below
 * (NVRTC's C ABI: an int result, an opaque program pointer), so building this file needs no
 * CUDA header. A library that opened is kept for the life of the process; one that did not is
 * tried again on the next call.
 *
 * The program NVRTC compiles is one line, #include of the family's entry header; every file it
 * reaches is given to nvrtcCreateProgram as an in-memory header under the name its include spells.
 * The cache entry's payload is the lowered name, a NUL, then the cubin. */
#include "host/rtc_compiler.h"
#include "host/dl_symbols.h"

#include "host/rtc_sources.h"
#include "kernel_cache.h"
#include "host/why.h"

#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CACHE_KIND "cuda"
/* names the payload layout above: a change to it changes every key */
#define PAYLOAD_FORMAT "flashattn cuda rtc payload 1"
#define PROGRAM_NAME "flashattn_rtc.cu"

typedef int nvrtc_result; /* nvrtcResult: 0 is NVRTC_SUCCESS */
typedef struct nvrtc_program *nvrtc_program;

typedef struct nvrtc_api {
    const char *(*GetErrorString)(nvrtc_result);
    nvrtc_result (*Version)(int *, int *);
    nvrtc_result (*CreateProgram)(nvrtc_program *, const char *, const char *, int, const char *const *,
                                  const char *const *);
    nvrtc_result (*DestroyProgram)(nvrtc_program *);
    nvrtc_result (*CompileProgram)(nvrtc_program, int, const char *const *);
    nvrtc_result (*AddNameExpression)(nvrtc_program, const char *);
    nvrtc_result (*GetLoweredName)(nvrtc_program, const char *, const char **);
    nvrtc_result (*GetCUBINSize)(nvrtc_program, size_t *);
    nvrtc_result (*GetCUBIN)(nvrtc_program, char *);
    nvrtc_result (*GetProgramLogSize)(nvrtc_program, size_t *);
    nvrtc_result (*GetProgramLog)(nvrtc_program, char *);
    char version[32]; /* "13.0" */
} nvrtc_api;

static nvrtc_api api;
static atomic_int api_ready;                          /* 1 once api is filled; never reset */
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
/* one compile at a time: a thread that waited here finds the kernel another thread just compiled
 * in the cache, and nothing depends on NVRTC's own thread safety */
static pthread_mutex_t compile_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t notify_lock = PTHREAD_MUTEX_INITIALIZER;
static fa_rtc_notify_fn notify_fn;
static void *notify_user;

/* ---- the library ---- */

static fa_rtc_status resolve(void *lib, const char *name, char *why, size_t why_len)
{
    const fa_dl_symbol table[] = {
        {"nvrtcGetErrorString", (void **)&api.GetErrorString},
        {"nvrtcVersion", (void **)&api.Version},
        {"nvrtcCreateProgram", (void **)&api.CreateProgram},
        {"nvrtcDestroyProgram", (void **)&api.DestroyProgram},
        {"nvrtcCompileProgram", (void **)&api.CompileProgram},
        {"nvrtcAddNameExpression", (void **)&api.AddNameExpression},
        {"nvrtcGetLoweredName", (void **)&api.GetLoweredName},
        {"nvrtcGetCUBINSize", (void **)&api.GetCUBINSize}, /* NVRTC 11.1 and later */
        {"nvrtcGetCUBIN", (void **)&api.GetCUBIN},
        {"nvrtcGetProgramLogSize", (void **)&api.GetProgramLogSize},
        {"nvrtcGetProgramLog", (void **)&api.GetProgramLog},
    };
    const char *err, *missing = fa_dl_resolve(lib, table, sizeof table / sizeof table[0], &err);
    if (missing) {
        fa_why_set(why, why_len, "%s has no %s (NVRTC 11.1 or later is needed): %s", name, missing, err);
        return FA_RTC_NO_LIBRARY;
    }
    int major = 0, minor = 0;
    nvrtc_result r = api.Version(&major, &minor);
    if (r != 0) {
        fa_why_set(why, why_len, "%s: nvrtcVersion failed (%d)", name, r);
        return FA_RTC_NO_LIBRARY;
    }
    snprintf(api.version, sizeof api.version, "%d.%d", major, minor);
    return FA_RTC_OK;
}

static fa_rtc_status open_nvrtc(char *why, size_t why_len)
{
    if (atomic_load_explicit(&api_ready, memory_order_acquire))
        return FA_RTC_OK;
    pthread_mutex_lock(&load_lock);
    fa_rtc_status st = FA_RTC_OK;
    if (!atomic_load_explicit(&api_ready, memory_order_relaxed)) {
        static const char *const names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
        const char *override = getenv("FLASHATTN_NVRTC_LIBRARY");
        void *lib = NULL;
        const char *name = NULL;
        if (override && *override) {
            name = override;
            lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
            if (!lib) {
                const char *e = dlerror();
                fa_why_set(why, why_len, "cannot open libnvrtc: FLASHATTN_NVRTC_LIBRARY=%s: %s", override,
                    e ? e : "dlopen failed");
            }
        } else {
            fa_why_set(why, why_len, "cannot open libnvrtc (install the CUDA toolkit's NVRTC or point "
                              "FLASHATTN_NVRTC_LIBRARY at it):");
            for (size_t i = 0; i < sizeof names / sizeof names[0] && !lib; ++i) {
                name = names[i];
                lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
                if (!lib) {
                    const char *e = dlerror();
                    fa_why_append(why, why_len, " %s: %s;", name, e ? e : "dlopen failed");
                }
            }
            /* a toolkit that is not in the loader's search: its own folders */
            static char path[4096];
            const char *roots[] = {getenv("CUDA_HOME"), getenv("CUDA_PATH"), "/usr/local/cuda"};
            static const char *const dirs[] = {"lib64", "lib"};
            for (size_t r = 0; r < sizeof roots / sizeof roots[0] && !lib; ++r) {
                if (!roots[r] || !*roots[r])
                    continue;
                for (size_t d = 0; d < sizeof dirs / sizeof dirs[0] && !lib; ++d) {
                    const int n = snprintf(path, sizeof path, "%s/%s/libnvrtc.so", roots[r], dirs[d]);
                    if (n <= 0 || (size_t)n >= sizeof path || access(path, F_OK) != 0)
                        continue;
                    name = path;
                    lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
                    if (!lib) {
                        const char *e = dlerror();
                        fa_why_append(why, why_len, " %s: %s;", path, e ? e : "dlopen failed");
                    }
                }
            }
        }
        if (!lib) {
            st = FA_RTC_NO_LIBRARY;
        } else if ((st = resolve(lib, name, why, why_len)) != FA_RTC_OK) {
            dlclose(lib);
        } else {
            atomic_store_explicit(&api_ready, 1, memory_order_release);
        }
    }
    pthread_mutex_unlock(&load_lock);
    return st;
}

const char *fa_rtc_nvrtc_version(char *why, size_t why_len)
{
    return open_nvrtc(why, why_len) == FA_RTC_OK ? api.version : NULL;
}

/* ---- notification ---- */

void fa_rtc_set_notify(fa_rtc_notify_fn fn, void *user)
{
    pthread_mutex_lock(&notify_lock);
    notify_fn = fn;
    notify_user = user;
    pthread_mutex_unlock(&notify_lock);
}

static void notify(const fa_rtc_progress *p)
{
    pthread_mutex_lock(&notify_lock);
    fa_rtc_notify_fn fn = notify_fn;
    void *user = notify_user;
    pthread_mutex_unlock(&notify_lock);
    if (fn)
        fn(p, user);
}

void fa_rtc_notify_stderr(const fa_rtc_progress *p, void *user)
{
    (void)user;
    if (p->event == FA_RTC_COMPILE_BEGIN)
        fprintf(stderr, "flashattn: compiling %s for %s (first use; %s%s)\n", p->name_expression, p->arch,
                p->cache_dir ? "cached in " : "cache off", p->cache_dir ? p->cache_dir : "");
}

/* ---- compiling ---- */

static double now_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* A family's source key part: one digest over the name and text of each of its embedded files,
 * computed once per family. */
#define MAX_FAMILIES 16
static fa_kernel_key source_digest_value[MAX_FAMILIES];
static int source_digest_ok[MAX_FAMILIES];

static void compute_source_digests(void)
{
    for (size_t f = 0; f < fa_cuda_rtc_family_count && f < MAX_FAMILIES; ++f) {
        const fa_rtc_family *fam = &fa_cuda_rtc_families[f];
        size_t n = 2 * fam->file_count;
        fa_kernel_key_part *parts = malloc(n * sizeof *parts);
        if (!parts)
            return;
        for (size_t i = 0; i < fam->file_count; ++i) {
            const fa_rtc_source *src = &fa_cuda_rtc_sources[fam->files[i]];
            parts[2 * i] = (fa_kernel_key_part){src->name, strlen(src->name)};
            parts[2 * i + 1] = (fa_kernel_key_part){src->text, src->len};
        }
        source_digest_value[f] = fa_kernel_cache_key(parts, n);
        source_digest_ok[f] = 1;
        free(parts);
    }
}

static int source_digest(size_t family, fa_kernel_key *out)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, compute_source_digests);
    if (family >= MAX_FAMILIES || !source_digest_ok[family])
        return 0;
    *out = source_digest_value[family];
    return 1;
}

/* The payload's parts: 1 with *lowered and *cubin pointing into payload when it is a lowered
 * name, a NUL and an ELF image; 0 otherwise (an entry of another layout: a miss). */
static int split_payload(const unsigned char *payload, size_t len, const char **lowered, const unsigned char **cubin,
                         size_t *cubin_len)
{
    const unsigned char *nul = memchr(payload, 0, len);
    if (!nul || nul == payload)
        return 0;
    size_t rest = len - (size_t)(nul + 1 - payload);
    if (rest < 4 || memcmp(nul + 1, "\177ELF", 4) != 0)
        return 0;
    *lowered = (const char *)payload;
    *cubin = nul + 1;
    *cubin_len = rest;
    return 1;
}

/* *out from a payload (copies); FA_RTC_OUT_OF_MEMORY or FA_RTC_NVRTC_ERROR (not a valid payload) */
static fa_rtc_status kernel_from_payload(const unsigned char *payload, size_t len, fa_rtc_kernel *out)
{
    const char *lowered;
    const unsigned char *cubin;
    size_t cubin_len;
    if (!split_payload(payload, len, &lowered, &cubin, &cubin_len))
        return FA_RTC_NVRTC_ERROR;
    out->lowered_name = strdup(lowered);
    out->cubin = malloc(cubin_len);
    if (!out->lowered_name || !out->cubin) {
        fa_rtc_kernel_free(out);
        return FA_RTC_OUT_OF_MEMORY;
    }
    memcpy(out->cubin, cubin, cubin_len);
    out->cubin_len = cubin_len;
    return FA_RTC_OK;
}

/* The cache's entry for key, into *out: 1 on a hit */
static int load_cached(const fa_kernel_key *key, fa_rtc_kernel *out)
{
    unsigned char *payload;
    size_t len;
    if (!fa_kernel_cache_load(CACHE_KIND, key, &payload, &len))
        return 0;
    fa_rtc_status st = kernel_from_payload(payload, len, out);
    free(payload);
    return st == FA_RTC_OK;
}

/* the first lines of NVRTC's log (at most 8, and what fits in why), after a prefix */
static void say_log(char *why, size_t why_len, const char *log)
{
    const char *p = log;
    for (int line = 0; line < 8 && *p; ++line) {
        const char *end = strchr(p, '\n');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n > 0)
            fa_why_append(why, why_len, "\n  %.*s", (int)(n > 400 ? 400 : n), p);
        p += n + (end ? 1 : 0);
    }
}

/* NVRTC's compile of name in family fam under options: the payload (lowered name, NUL, cubin) in
 * *payload */
static fa_rtc_status nvrtc_compile(const fa_rtc_family *fam, const char *name, const char *const *options, int noptions,
                                   unsigned char **payload, size_t *payload_len, char *why, size_t why_len)
{
    size_t nsrc = fam->file_count;
    const char **texts = malloc(nsrc * sizeof *texts);
    const char **names = malloc(nsrc * sizeof *names);
    char program[256];
    nvrtc_program prog = NULL;
    char *log = NULL;
    fa_rtc_status st = FA_RTC_OK;
    nvrtc_result r = 0;
    const char *call = "";
    *payload = NULL;
    if (!texts || !names) {
        st = FA_RTC_OUT_OF_MEMORY;
        goto done;
    }
    for (size_t i = 0; i < nsrc; ++i) {
        texts[i] = fa_cuda_rtc_sources[fam->files[i]].text;
        names[i] = fa_cuda_rtc_sources[fam->files[i]].name;
    }
    snprintf(program, sizeof program, "#include \"%s\"\n", names[0]);
    if ((r = api.CreateProgram(&prog, program, PROGRAM_NAME, (int)nsrc, texts, names)) != 0) {
        call = "nvrtcCreateProgram";
        goto nvrtc_failed;
    }
    if ((r = api.AddNameExpression(prog, name)) != 0) {
        call = "nvrtcAddNameExpression";
        goto nvrtc_failed;
    }
    nvrtc_result compiled = api.CompileProgram(prog, noptions, options);
    size_t log_len = 0;
    if (api.GetProgramLogSize(prog, &log_len) == 0 && log_len > 0 && (log = malloc(log_len + 1)) != NULL) {
        if (api.GetProgramLog(prog, log) != 0)
            log[0] = 0;
        log[log_len] = 0;
    }
    if (compiled != 0) {
        fa_why_set(why, why_len, "NVRTC %s could not compile %s (%s):", api.version, name, api.GetErrorString(compiled));
        for (int i = 0; i < noptions; ++i)
            fa_why_append(why, why_len, " %s", options[i]);
        say_log(why, why_len, log ? log : "");
        st = FA_RTC_COMPILE_FAILED;
        goto done;
    }
    const char *lowered = NULL;
    if ((r = api.GetLoweredName(prog, name, &lowered)) != 0 || !lowered) {
        call = "nvrtcGetLoweredName";
        goto nvrtc_failed;
    }
    size_t cubin_len = 0;
    if ((r = api.GetCUBINSize(prog, &cubin_len)) != 0 || cubin_len == 0) {
        call = "nvrtcGetCUBINSize";
        goto nvrtc_failed;
    }
    size_t lowered_len = strlen(lowered);
    if (!(*payload = malloc(lowered_len + 1 + cubin_len))) {
        st = FA_RTC_OUT_OF_MEMORY;
        goto done;
    }
    memcpy(*payload, lowered, lowered_len + 1);
    if ((r = api.GetCUBIN(prog, (char *)*payload + lowered_len + 1)) != 0) {
        call = "nvrtcGetCUBIN";
        goto nvrtc_failed;
    }
    *payload_len = lowered_len + 1 + cubin_len;
    goto done;

nvrtc_failed:
    fa_why_set(why, why_len, "%s failed for %s: %s", call, name, r ? api.GetErrorString(r) : "no result");
    st = FA_RTC_NVRTC_ERROR;
done:
    if (st != FA_RTC_OK) {
        free(*payload);
        *payload = NULL;
    }
    if (prog)
        api.DestroyProgram(&prog);
    free(log);
    free(texts);
    free(names);
    return st;
}

fa_rtc_status fa_rtc_compile(int arch, char suffix, const char *name_expression, const char *const *defines,
                             size_t ndefines, fa_rtc_kernel *out, char *why, size_t why_len)
{
    return fa_rtc_compile_family("simt", arch, suffix, name_expression, defines, ndefines, out, why, why_len);
}

fa_rtc_status fa_rtc_compile_family(const char *family, int arch, char suffix, const char *name_expression,
                                    const char *const *defines, size_t ndefines, fa_rtc_kernel *out, char *why,
                                    size_t why_len)
{
    if (why && why_len > 0)
        why[0] = 0;
    if (!out)
        return FA_RTC_INVALID_ARG;
    memset(out, 0, sizeof *out);
    size_t family_index = 0;
    while (family_index < fa_cuda_rtc_family_count &&
           (!family || strcmp(fa_cuda_rtc_families[family_index].name, family) != 0))
        ++family_index;
    if (family_index == fa_cuda_rtc_family_count) {
        fa_why_set(why, why_len, "no kernel family %s embedded", family ? family : "(null)");
        return FA_RTC_INVALID_ARG;
    }
    const fa_rtc_family *fam = &fa_cuda_rtc_families[family_index];
    if (arch < 50 || arch > 999 || !(suffix == 0 || suffix == 'a' || suffix == 'f')) {
        char letter[2] = {suffix, 0};
        fa_why_set(why, why_len, "no CUDA architecture sm_%d%s", arch, letter);
        return FA_RTC_INVALID_ARG;
    }
    if (!name_expression || !*name_expression) {
        fa_why_set(why, why_len, "no name expression");
        return FA_RTC_INVALID_ARG;
    }
    if (ndefines > 64 || (ndefines > 0 && !defines)) {
        fa_why_set(why, why_len, "%zu defines: at most 64", ndefines);
        return FA_RTC_INVALID_ARG;
    }
    for (size_t i = 0; i < ndefines; ++i)
        if (!defines[i] || !*defines[i] || strlen(defines[i]) > 1000) {
            fa_why_set(why, why_len, "define %zu is empty or longer than 1000 characters", i);
            return FA_RTC_INVALID_ARG;
        }
    fa_rtc_status st = open_nvrtc(why, why_len);
    if (st != FA_RTC_OK)
        return st;

    /* the options: those meson gives nvcc for these kernels that reach device code (-O3 is NVRTC's
     * default; the host compiler's flags do not apply), then the caller's defines */
    char arch_name[16], arch_option[32];
    snprintf(arch_name, sizeof arch_name, "sm_%d%s", arch, suffix == 'a' ? "a" : suffix == 'f' ? "f" : "");
    snprintf(arch_option, sizeof arch_option, "-arch=%s", arch_name);
    const char *options[3 + 64];
    char *define_options[64] = {0};
    int noptions = 0;
    options[noptions++] = arch_option;
    options[noptions++] = "-std=c++17";
#ifdef NDEBUG /* meson's b_ndebug gives -DNDEBUG to nvcc and to this file alike */
    options[noptions++] = "-DNDEBUG";
#endif
    for (size_t i = 0; i < ndefines; ++i) {
        size_t n = strlen(defines[i]);
        if (!(define_options[i] = malloc(n + 3))) {
            st = FA_RTC_OUT_OF_MEMORY;
            goto done;
        }
        memcpy(define_options[i], "-D", 2);
        memcpy(define_options[i] + 2, defines[i], n + 1);
        options[noptions++] = define_options[i];
    }

    /* the key: the payload's layout, the family's source, NVRTC's version, each option, the name
     * expression (the family's root is its first file, in the source digest) */
    fa_kernel_key source;
    if (!source_digest(family_index, &source)) {
        st = FA_RTC_OUT_OF_MEMORY;
        goto done;
    }
    fa_kernel_key_part parts[4 + 3 + 64];
    size_t nparts = 0;
    parts[nparts++] = (fa_kernel_key_part){PAYLOAD_FORMAT, strlen(PAYLOAD_FORMAT)};
    parts[nparts++] = (fa_kernel_key_part){source.bytes, sizeof source.bytes};
    parts[nparts++] = (fa_kernel_key_part){api.version, strlen(api.version)};
    for (int i = 0; i < noptions; ++i)
        parts[nparts++] = (fa_kernel_key_part){options[i], strlen(options[i])};
    /* after the options, whose count the parts' framing does not record: an empty part ends them */
    parts[nparts++] = (fa_kernel_key_part){"", 0};
    parts[nparts++] = (fa_kernel_key_part){name_expression, strlen(name_expression)};
    out->key = fa_kernel_cache_key(parts, nparts);

    if (load_cached(&out->key, out)) {
        out->from_cache = 1;
        goto done;
    }
    pthread_mutex_lock(&compile_lock);
    if (load_cached(&out->key, out)) { /* compiled by the thread this one waited for */
        out->from_cache = 1;
    } else {
        char *dir = fa_kernel_cache_dir(CACHE_KIND);
        fa_rtc_progress progress = {FA_RTC_COMPILE_BEGIN, name_expression, arch_name, dir, FA_RTC_OK, 0};
        notify(&progress);
        unsigned char *payload = NULL;
        size_t payload_len = 0;
        double t0 = now_seconds();
        st = nvrtc_compile(fam, name_expression, options, noptions, &payload, &payload_len, why, why_len);
        progress.event = FA_RTC_COMPILE_END;
        progress.status = st;
        progress.seconds = now_seconds() - t0;
        notify(&progress);
        if (st == FA_RTC_OK) {
            fa_kernel_cache_store(CACHE_KIND, &out->key, payload, payload_len); /* a failed store: a miss next time */
            fa_kernel_key key = out->key;
            st = kernel_from_payload(payload, payload_len, out);
            out->key = key;
            out->compile_seconds = progress.seconds;
            if (st == FA_RTC_NVRTC_ERROR)
                fa_why_set(why, why_len, "NVRTC's output for %s is not an ELF cubin", name_expression);
        }
        free(payload);
        free(dir);
    }
    pthread_mutex_unlock(&compile_lock);

done:
    for (size_t i = 0; i < ndefines; ++i)
        free(define_options[i]);
    if (st != FA_RTC_OK) {
        fa_rtc_kernel_free(out);
        memset(out, 0, sizeof *out);
    }
    return st;
}

void fa_rtc_kernel_free(fa_rtc_kernel *kernel)
{
    if (!kernel)
        return;
    free(kernel->cubin);
    free(kernel->lowered_name);
    kernel->cubin = NULL;
    kernel->lowered_name = NULL;
    kernel->cubin_len = 0;
}
