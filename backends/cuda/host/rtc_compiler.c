/* rtc_compiler.c: NVRTC through dlopen, and the disk cache around it (rtc_compiler.h says what for).
 * Compiled with -DFA_RTC_HIP (the HIP backend's module, -Dhip-kernels=rtc) the same file drives
 * hipRTC, whose C API is NVRTC's under other names: the vendor block below names the library, the
 * functions, the architecture option, the cache kind and the embedded sources (fa_hip_rtc_*).
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

#ifdef FA_RTC_HIP
/* hipRTC: $FLASHATTN_HIPRTC_LIBRARY when set, else libhiprtc (ROCm 5.3 and later ship it apart),
 * else libamdhip64, which holds hipRTC itself in ROCm 5.2 and earlier (Debian 12's) */
#define COMPILER "hipRTC"
#define SYMBOL(nvrtc, hiprtc) hiprtc
#define LIBRARY_VARIABLE "FLASHATTN_HIPRTC_LIBRARY"
#define LIBRARY_HELP "install ROCm's hipRTC: libhiprtc, or libamdhip64 of ROCm 5.2 and earlier"
static const char *const library_names[] = {"libhiprtc.so.6",   "libhiprtc.so.5",   "libhiprtc.so",
                                            "libamdhip64.so.6", "libamdhip64.so.5", "libamdhip64.so"};
#define TOOLKIT_LIBRARY ((const char *)NULL) /* no toolkit folders: ROCm's are in the loader's search */
#define ARCH_OPTION "--offload-arch="
#define CACHE_KIND "hip"
/* names the payload layout above: a change to it changes every key */
#define PAYLOAD_FORMAT "flashattn hip rtc payload 1"
#define RTC_SOURCES fa_hip_rtc_sources
#define RTC_FAMILIES fa_hip_rtc_families
#define RTC_FAMILY_COUNT fa_hip_rtc_family_count
#else
#define COMPILER "NVRTC"
#define SYMBOL(nvrtc, hiprtc) nvrtc
#define LIBRARY_VARIABLE "FLASHATTN_NVRTC_LIBRARY"
#define LIBRARY_HELP "install the CUDA toolkit's NVRTC or point FLASHATTN_NVRTC_LIBRARY at it"
static const char *const library_names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
#define TOOLKIT_LIBRARY "libnvrtc.so"
#define ARCH_OPTION "-arch="
#define CACHE_KIND "cuda"
/* names the payload layout above: a change to it changes every key */
#define PAYLOAD_FORMAT "flashattn cuda rtc payload 1"
#define RTC_SOURCES fa_cuda_rtc_sources
#define RTC_FAMILIES fa_cuda_rtc_families
#define RTC_FAMILY_COUNT fa_cuda_rtc_family_count
#endif
#define PROGRAM_NAME "flashattn_rtc.cu"

typedef int nvrtc_result; /* nvrtcResult, hiprtcResult: 0 is success */
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
    nvrtc_result (*GetCUBINSize)(nvrtc_program, size_t *); /* hiprtcGetCodeSize */
    nvrtc_result (*GetCUBIN)(nvrtc_program, char *);       /* hiprtcGetCode */
    nvrtc_result (*GetProgramLogSize)(nvrtc_program, size_t *);
    nvrtc_result (*GetProgramLog)(nvrtc_program, char *);
    char version[32]; /* "13.0"; hipRTC numbers itself apart from ROCm ("9.0" in ROCm 5.2) */
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
        {SYMBOL("nvrtcGetErrorString", "hiprtcGetErrorString"), (void **)&api.GetErrorString},
        {SYMBOL("nvrtcVersion", "hiprtcVersion"), (void **)&api.Version},
        {SYMBOL("nvrtcCreateProgram", "hiprtcCreateProgram"), (void **)&api.CreateProgram},
        {SYMBOL("nvrtcDestroyProgram", "hiprtcDestroyProgram"), (void **)&api.DestroyProgram},
        {SYMBOL("nvrtcCompileProgram", "hiprtcCompileProgram"), (void **)&api.CompileProgram},
        {SYMBOL("nvrtcAddNameExpression", "hiprtcAddNameExpression"), (void **)&api.AddNameExpression},
        {SYMBOL("nvrtcGetLoweredName", "hiprtcGetLoweredName"), (void **)&api.GetLoweredName},
        {SYMBOL("nvrtcGetCUBINSize", "hiprtcGetCodeSize"), (void **)&api.GetCUBINSize}, /* NVRTC 11.1 and later */
        {SYMBOL("nvrtcGetCUBIN", "hiprtcGetCode"), (void **)&api.GetCUBIN},
        {SYMBOL("nvrtcGetProgramLogSize", "hiprtcGetProgramLogSize"), (void **)&api.GetProgramLogSize},
        {SYMBOL("nvrtcGetProgramLog", "hiprtcGetProgramLog"), (void **)&api.GetProgramLog},
    };
    const char *err, *missing = fa_dl_resolve(lib, table, sizeof table / sizeof table[0], &err);
    if (missing) {
        fa_why_set(why, why_len, "%s has no %s (%s is needed): %s", name, missing,
                   SYMBOL("NVRTC 11.1 or later", "hipRTC of ROCm 4.2 or later"), err);
        return FA_RTC_NO_LIBRARY;
    }
    int major = 0, minor = 0;
    nvrtc_result r = api.Version(&major, &minor);
    if (r != 0) {
        fa_why_set(why, why_len, "%s: %s failed (%d)", name, SYMBOL("nvrtcVersion", "hiprtcVersion"), r);
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
        const char *override = getenv(LIBRARY_VARIABLE);
        void *lib = NULL;
        const char *name = NULL;
        if (override && *override) {
            name = override;
            lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
            if (!lib) {
                const char *e = dlerror();
                fa_why_set(why, why_len, "cannot open %s: %s=%s: %s", COMPILER, LIBRARY_VARIABLE, override,
                    e ? e : "dlopen failed");
            }
        } else {
            fa_why_set(why, why_len, "cannot open %s (%s):", COMPILER, LIBRARY_HELP);
            for (size_t i = 0; i < sizeof library_names / sizeof library_names[0] && !lib; ++i) {
                name = library_names[i];
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
            for (size_t r = 0; r < sizeof roots / sizeof roots[0] && !lib && TOOLKIT_LIBRARY; ++r) {
                if (!roots[r] || !*roots[r])
                    continue;
                for (size_t d = 0; d < sizeof dirs / sizeof dirs[0] && !lib; ++d) {
                    const int n = snprintf(path, sizeof path, "%s/%s/%s", roots[r], dirs[d], TOOLKIT_LIBRARY);
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
            if (why && why_len > 0)
                why[0] = 0; /* the names tried before the one that opened are no failure */
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
    for (size_t f = 0; f < RTC_FAMILY_COUNT && f < MAX_FAMILIES; ++f) {
        const fa_rtc_family *fam = &RTC_FAMILIES[f];
        size_t n = 2 * fam->file_count;
        fa_kernel_key_part *parts = malloc(n * sizeof *parts);
        if (!parts)
            return;
        for (size_t i = 0; i < fam->file_count; ++i) {
            const fa_rtc_source *src = &RTC_SOURCES[fam->files[i]];
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

/* The compiler's run over one program holding the kernels exprs[0..nexprs) of family fam under options:
 * the payload (each lowered name and a NUL, then the cubin) in *payload. One name: a cache entry. */
static fa_rtc_status nvrtc_compile(const fa_rtc_family *fam, const char *const *exprs, size_t nexprs,
                                   const char *const *options, int noptions, unsigned char **payload,
                                   size_t *payload_len, char *why, size_t why_len)
{
    const char *name = exprs[0]; /* the one a message names */
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
        texts[i] = RTC_SOURCES[fam->files[i]].text;
        names[i] = RTC_SOURCES[fam->files[i]].name;
    }
    snprintf(program, sizeof program, "#include \"%s\"\n", names[0]);
    if ((r = api.CreateProgram(&prog, program, PROGRAM_NAME, (int)nsrc, texts, names)) != 0) {
        call = SYMBOL("nvrtcCreateProgram", "hiprtcCreateProgram");
        goto nvrtc_failed;
    }
    for (size_t e = 0; e < nexprs; ++e)
        if ((r = api.AddNameExpression(prog, name = exprs[e])) != 0) {
            call = SYMBOL("nvrtcAddNameExpression", "hiprtcAddNameExpression");
            goto nvrtc_failed;
        }
    name = exprs[0];
    nvrtc_result compiled = api.CompileProgram(prog, noptions, options);
    size_t log_len = 0;
    if (api.GetProgramLogSize(prog, &log_len) == 0 && log_len > 0 && (log = malloc(log_len + 1)) != NULL) {
        if (api.GetProgramLog(prog, log) != 0)
            log[0] = 0;
        log[log_len] = 0;
    }
    if (compiled != 0) {
        fa_why_set(why, why_len, COMPILER " %s could not compile %s (%s):", api.version, name, api.GetErrorString(compiled));
        for (int i = 0; i < noptions; ++i)
            fa_why_append(why, why_len, " %s", options[i]);
        say_log(why, why_len, log ? log : "");
        st = FA_RTC_COMPILE_FAILED;
        goto done;
    }
    size_t lowered_len = 0; /* every lowered name with its NUL */
    for (size_t e = 0; e < nexprs; ++e) {
        const char *lowered = NULL;
        if ((r = api.GetLoweredName(prog, name = exprs[e], &lowered)) != 0 || !lowered) {
            call = SYMBOL("nvrtcGetLoweredName", "hiprtcGetLoweredName");
            goto nvrtc_failed;
        }
        lowered_len += strlen(lowered) + 1;
    }
    name = exprs[0];
    size_t cubin_len = 0;
    if ((r = api.GetCUBINSize(prog, &cubin_len)) != 0 || cubin_len == 0) {
        call = SYMBOL("nvrtcGetCUBINSize", "hiprtcGetCodeSize");
        goto nvrtc_failed;
    }
    if (!(*payload = malloc(lowered_len + cubin_len))) {
        st = FA_RTC_OUT_OF_MEMORY;
        goto done;
    }
    size_t at = 0;
    for (size_t e = 0; e < nexprs; ++e) {
        const char *lowered = NULL;
        api.GetLoweredName(prog, exprs[e], &lowered); /* succeeded above */
        memcpy(*payload + at, lowered, strlen(lowered) + 1);
        at += strlen(lowered) + 1;
    }
    if ((r = api.GetCUBIN(prog, (char *)*payload + lowered_len)) != 0) {
        call = SYMBOL("nvrtcGetCUBIN", "hiprtcGetCode");
        goto nvrtc_failed;
    }
    *payload_len = lowered_len + cubin_len;
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

#ifndef FA_RTC_HIP
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
    if (out)
        memset(out, 0, sizeof *out);
    if (arch < 50 || arch > 999 || !(suffix == 0 || suffix == 'a' || suffix == 'f')) {
        char letter[2] = {suffix, 0};
        fa_why_set(why, why_len, "no CUDA architecture sm_%d%s", arch, letter);
        return FA_RTC_INVALID_ARG;
    }
    char target[16];
    snprintf(target, sizeof target, "sm_%d%s", arch, suffix == 'a' ? "a" : suffix == 'f' ? "f" : "");
    return fa_rtc_compile_target(family, target, name_expression, defines, ndefines, out, why, why_len);
}
#endif /* !FA_RTC_HIP */

/* Whether target can be an architecture option's value: "sm_90a", "gfx90a:sramecc+:xnack-". */
static int target_ok(const char *target)
{
    size_t n = target ? strlen(target) : 0;
    if (n == 0 || n > 63)
        return 0;
    for (size_t i = 0; i < n; ++i)
        if (!((target[i] >= 'a' && target[i] <= 'z') || (target[i] >= 'A' && target[i] <= 'Z') ||
              (target[i] >= '0' && target[i] <= '9') || strchr("_:+-", target[i])))
            return 0;
    return 1;
}

/* What a compile needs: the family's index and the options. */
typedef struct compile_setup {
    size_t family_index;
    char arch_option[80];
    const char *options[8 + 64];
    int noptions;
    char *define_options[64];
} compile_setup;

static void setup_free(compile_setup *c)
{
    for (size_t i = 0; i < 64; ++i)
        free(c->define_options[i]);
}

/* Checks the arguments, opens the compiler and fills *c (setup_free releases it, whatever the
 * result). */
static fa_rtc_status setup(const char *family, const char *target, const char *const *defines, size_t ndefines,
                           compile_setup *c, char *why, size_t why_len)
{
    memset(c, 0, sizeof *c);
    while (c->family_index < RTC_FAMILY_COUNT &&
           (!family || strcmp(RTC_FAMILIES[c->family_index].name, family) != 0))
        ++c->family_index;
    if (c->family_index == RTC_FAMILY_COUNT) {
        fa_why_set(why, why_len, "no kernel family %s embedded", family ? family : "(null)");
        return FA_RTC_INVALID_ARG;
    }
    if (!target_ok(target)) {
        fa_why_set(why, why_len, "no %s architecture %.64s", COMPILER, target ? target : "(null)");
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

    /* the options: those meson gives nvcc (hipcc) for these kernels that reach device code, then
     * the caller's defines. NVRTC's default is -O3; hipRTC is given hipcc's -O3 and the two LLVM
     * options hipcc adds to every compile (hipcc -v shows them) */
    snprintf(c->arch_option, sizeof c->arch_option, "%s%s", ARCH_OPTION, target);
    c->options[c->noptions++] = c->arch_option;
    c->options[c->noptions++] = "-std=c++17";
#ifdef FA_RTC_HIP
    c->options[c->noptions++] = "-O3";
    c->options[c->noptions++] = "-mllvm";
    c->options[c->noptions++] = "-amdgpu-early-inline-all=true";
    c->options[c->noptions++] = "-mllvm";
    c->options[c->noptions++] = "-amdgpu-function-calls=false";
#endif
/* meson's b_ndebug gives -DNDEBUG to nvcc and to this file alike (not to hipcc) */
#if defined(NDEBUG) && !defined(FA_RTC_HIP)
    c->options[c->noptions++] = "-DNDEBUG";
#endif
    for (size_t i = 0; i < ndefines; ++i) {
        size_t n = strlen(defines[i]);
        if (!(c->define_options[i] = malloc(n + 3)))
            return FA_RTC_OUT_OF_MEMORY;
        memcpy(c->define_options[i], "-D", 2);
        memcpy(c->define_options[i] + 2, defines[i], n + 1);
        c->options[c->noptions++] = c->define_options[i];
    }
    return FA_RTC_OK;
}

fa_rtc_status fa_rtc_compile_names(const char *family, const char *target, const char *const *names, size_t n,
                                   char **lowered, unsigned char **code, size_t *code_len, char *why, size_t why_len)
{
    if (why && why_len > 0)
        why[0] = 0;
    if (!names || n == 0 || !lowered || !code || !code_len) {
        fa_why_set(why, why_len, "no name expressions or nowhere to put the result");
        return FA_RTC_INVALID_ARG;
    }
    *code = NULL;
    *code_len = 0;
    for (size_t i = 0; i < n; ++i)
        lowered[i] = NULL;
    for (size_t i = 0; i < n; ++i)
        if (!names[i] || !*names[i]) {
            fa_why_set(why, why_len, "name expression %zu is empty", i);
            return FA_RTC_INVALID_ARG;
        }
    compile_setup c;
    fa_rtc_status st = setup(family, target, NULL, 0, &c, why, why_len);
    unsigned char *payload = NULL;
    size_t payload_len = 0;
    if (st == FA_RTC_OK) {
        pthread_mutex_lock(&compile_lock);
        st = nvrtc_compile(&RTC_FAMILIES[c.family_index], names, n, c.options, c.noptions, &payload, &payload_len,
                           why, why_len);
        pthread_mutex_unlock(&compile_lock);
    }
    setup_free(&c);
    size_t at = 0;
    for (size_t i = 0; i < n && st == FA_RTC_OK; ++i) {
        if (!(lowered[i] = strdup((const char *)payload + at)))
            st = FA_RTC_OUT_OF_MEMORY;
        at += strlen((const char *)payload + at) + 1;
    }
    if (st == FA_RTC_OK) {
        *code_len = payload_len - at;
        if ((*code = malloc(*code_len)) != NULL)
            memcpy(*code, payload + at, *code_len);
        else
            st = FA_RTC_OUT_OF_MEMORY;
    }
    if (st != FA_RTC_OK)
        for (size_t i = 0; i < n; ++i) {
            free(lowered[i]);
            lowered[i] = NULL;
        }
    free(payload);
    return st;
}

fa_rtc_status fa_rtc_compile_target(const char *family, const char *target, const char *name_expression,
                                    const char *const *defines, size_t ndefines, fa_rtc_kernel *out, char *why,
                                    size_t why_len)
{
    if (why && why_len > 0)
        why[0] = 0;
    if (!out)
        return FA_RTC_INVALID_ARG;
    memset(out, 0, sizeof *out);
    if (!name_expression || !*name_expression) {
        fa_why_set(why, why_len, "no name expression");
        return FA_RTC_INVALID_ARG;
    }
    compile_setup c;
    fa_rtc_status st = setup(family, target, defines, ndefines, &c, why, why_len);
    if (st != FA_RTC_OK)
        goto done;
    const size_t family_index = c.family_index;
    const fa_rtc_family *fam = &RTC_FAMILIES[family_index];
    const char *const arch_name = target;
    const char *const *options = c.options;
    const int noptions = c.noptions;

    /* the key: the payload's layout, the family's source, NVRTC's version, each option, the name
     * expression (the family's root is its first file, in the source digest) */
    fa_kernel_key source;
    if (!source_digest(family_index, &source)) {
        st = FA_RTC_OUT_OF_MEMORY;
        goto done;
    }
    fa_kernel_key_part parts[4 + 8 + 64];
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
        st = nvrtc_compile(fam, &name_expression, 1, options, noptions, &payload, &payload_len, why, why_len);
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
                fa_why_set(why, why_len, COMPILER "'s output for %s is not an ELF image", name_expression);
        }
        free(payload);
        free(dir);
    }
    pthread_mutex_unlock(&compile_lock);

done:
    setup_free(&c);
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
