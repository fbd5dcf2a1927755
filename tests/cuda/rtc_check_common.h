/* rtc_check_common.h: what the fake-driver checks of tests/cuda share (rtc_*_check.c,
 * driver_runtime_check.c): the CHECK macro (print the failed condition with a message, exit 1),
 * meson's skip status, the fake libcuda opened by path with its state (fake_libcuda.h), and a
 * fresh kernel cache directory given as FLASHATTN_CACHE_DIR and removed at exit. Where the check
 * includes host/rtc_compiler.h first: the lowered name NVRTC gives a name expression. Where it
 * includes flashattn.h first: device memory of zeros and a forward's and a backward's arguments
 * over nine buffers. A clock for the compiles' seconds. */
#ifndef RTC_CHECK_COMMON_H
#define RTC_CHECK_COMMON_H

#include "fake_libcuda.h"

#include <dlfcn.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SKIP 77

#define CHECK(cond, ...)                                                                                              \
    do {                                                                                                              \
        if (!(cond)) {                                                                                                \
            printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                                                    \
            printf(__VA_ARGS__);                                                                                      \
            printf("\n");                                                                                             \
            exit(1);                                                                                                  \
        }                                                                                                             \
    } while (0)

/* the fake driver at path (opened as the backend opens it through FLASHATTN_CUDA_DRIVER_LIBRARY,
 * so both see one state) and its state; *lib the library's handle when lib is not NULL */
static inline fake_cuda_state *fake_cuda_open(const char *path, void **lib)
{
    void *fake_lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    CHECK(fake_lib != NULL, "open %s: %s", path, dlerror());
    fake_cuda_state *(*state_of)(void);
    *(void **)&state_of = dlsym(fake_lib, "fake_cuda_state_get");
    CHECK(state_of != NULL, "%s exports fake_cuda_state_get", path);
    if (lib)
        *lib = fake_lib;
    return state_of();
}

/* the kernel cache directory of this process (empty until check_cache_dir made it) */
static inline char *check_cache_root(void)
{
    static char root[64];
    return root;
}

static inline int check_remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static inline void check_remove_cache(void)
{
    nftw(check_cache_root(), check_remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* a fresh directory from template ("/tmp/NAME-XXXXXX") as FLASHATTN_CACHE_DIR, removed at exit */
static inline void check_cache_dir(const char *template_path)
{
    char *root = check_cache_root();
    snprintf(root, 64, "%s", template_path);
    CHECK(mkdtemp(root) != NULL, "a cache directory");
    setenv("FLASHATTN_CACHE_DIR", root, 1);
    atexit(check_remove_cache);
}

static inline double now_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#ifdef FA_RTC_COMPILER_H
/* The lowered name NVRTC gives name, a kernel of family (NULL: fa_rtc_compile's, the SIMT one),
 * for sm_<arch><suffix>: a cache hit once the backend compiled it (the cache key covers the
 * architecture and the name expression), which must_be_cached asks to be so. */
static inline void lowered_name_of(const char *family, int arch, char suffix, int must_be_cached, const char *name,
                                   char *out, size_t n)
{
    fa_rtc_kernel k;
    char why[1024];
    fa_rtc_status st = family ? fa_rtc_compile_family(family, arch, suffix, name, NULL, 0, &k, why, sizeof why)
                              : fa_rtc_compile(arch, suffix, name, NULL, 0, &k, why, sizeof why);
    CHECK(st == FA_RTC_OK, "compile %s: %s", name, why);
    if (must_be_cached)
        CHECK(k.from_cache, "%s was not compiled for sm_%d%s by the backend", name, arch, suffix ? "a" : "");
    snprintf(out, n, "%s", k.lowered_name);
    fa_rtc_kernel_free(&k);
}
#endif

#ifdef FLASHATTN_H
/* bytes of zeros in the context's device memory (the fake's is the host's) */
static inline void *device_zeros(fa_context *ctx, size_t bytes)
{
    void *d = NULL, *h = calloc(1, bytes);
    CHECK(h != NULL, "host memory");
    CHECK(fa_malloc(ctx, bytes, &d) == FA_SUCCESS, "fa_malloc: %s", fa_context_last_error(ctx));
    CHECK(fa_memcpy(ctx, d, h, bytes, FA_COPY_HOST_TO_DEVICE) == FA_SUCCESS, "fa_memcpy: %s",
          fa_context_last_error(ctx));
    free(h);
    return d;
}

/* fwd and bwd (zeroed by the caller) over bufs: q, k, v, o, dout, dq, dk, dv of dtype and shape,
 * lse fp32 of lse_shape; the default options in both */
static inline void attention_args(void *const bufs[9], fa_dtype dtype, const int64_t shape[4],
                                  const int64_t lse_shape[3], fa_fwd_args *fwd, fa_bwd_args *bwd)
{
    fa_tensor t[8];
    for (int i = 0; i < 8; ++i)
        t[i] = fa_tensor_contiguous(bufs[i], dtype, 4, shape);
    const fa_tensor lse = fa_tensor_contiguous(bufs[8], FA_DTYPE_F32, 3, lse_shape);
    fwd->q = bwd->q = t[0];
    fwd->k = bwd->k = t[1];
    fwd->v = bwd->v = t[2];
    fwd->o = bwd->o = t[3];
    bwd->dout = t[4];
    bwd->dq = t[5];
    bwd->dk = t[6];
    bwd->dv = t[7];
    fwd->lse = bwd->lse = lse;
    fwd->opts = fa_options_default();
    bwd->opts = fwd->opts;
}

/* A bf16 causal forward of one sequence, sq query rows over sk keys, heads heads of d (a short
 * grid over long keys: the split forwards' case); its buffers q, k, v, o, lse in bufs[5] */
static inline fa_fwd_args long_keys_call(fa_context *ctx, int64_t sq, int64_t sk, int64_t heads, int64_t d,
                                         void *bufs[5])
{
    const int64_t qshape[4] = {1, sq, heads, d}, kshape[4] = {1, sk, heads, d}, lshape[3] = {1, heads, sq};
    const size_t qbytes = (size_t)(sq * heads * d * 2), kbytes = (size_t)(sk * heads * d * 2);
    const size_t sizes[5] = {qbytes, kbytes, kbytes, qbytes, (size_t)(heads * sq * 4)};
    for (int i = 0; i < 5; ++i)
        bufs[i] = device_zeros(ctx, sizes[i]);
    fa_fwd_args a;
    memset(&a, 0, sizeof a);
    a.q = fa_tensor_contiguous(bufs[0], FA_DTYPE_BF16, 4, qshape);
    a.k = fa_tensor_contiguous(bufs[1], FA_DTYPE_BF16, 4, kshape);
    a.v = fa_tensor_contiguous(bufs[2], FA_DTYPE_BF16, 4, kshape);
    a.o = fa_tensor_contiguous(bufs[3], FA_DTYPE_BF16, 4, qshape);
    a.lse = fa_tensor_contiguous(bufs[4], FA_DTYPE_F32, 3, lshape);
    a.opts = fa_options_default();
    a.opts.causal = 1;
    return a;
}
#endif

#endif
