/* rtc_compiler_check.c: the CUDA backend's run-time compiler (backends/cuda/host/rtc_compiler.c)
 * on the host alone, with no GPU and no CUDA runtime: a SIMT forward instance compiled by NVRTC for
 * sm_80 and sm_90a is an ELF cubin that holds its lowered name; the second call is a cache hit
 * (both times printed; the hit must take at most 50 ms); a changed define is another key (a miss);
 * a damaged cache entry is compiled again, not loaded; a compile error and an impossible
 * architecture say why; a kernel of each other family (sm80, sm90, decode) compiles from its own
 * root header, under a key of its own, and an unknown family says why; threads that ask for one
 * kernel at once compile it once;
 * FLASHATTN_NVRTC_LIBRARY naming no library fails with a message that names
 * it. Exit 0 when every check holds, 1 on the first that fails, 77 (meson's skip) with the reason
 * where libnvrtc cannot be opened. The cache is a fresh directory of its own. */
#include "host/rtc_compiler.h"
#include "rtc_check_common.h"

#include <pthread.h>
#define KERNEL "fa_gpu::simt::forward_kernel<fa_gpu::store_f16, 64, false>"
#define HIT_LIMIT_SECONDS 0.050

static int begins, ends; /* compiles the notify function saw */

static void count_compiles(const fa_rtc_progress *p, void *user)
{
    (void)user;
    if (p->event == FA_RTC_COMPILE_BEGIN)
        ++begins;
    else
        ++ends;
    fa_rtc_notify_stderr(p, NULL);
}

/* one call, timed; exits on a status other than OK */
static fa_rtc_kernel compile(int arch, char suffix, const char *const *defines, size_t ndefines, double *seconds)
{
    fa_rtc_kernel k;
    char why[2048];
    double t0 = now_seconds();
    fa_rtc_status st = fa_rtc_compile(arch, suffix, KERNEL, defines, ndefines, &k, why, sizeof why);
    *seconds = now_seconds() - t0;
    CHECK(st == FA_RTC_OK, "status %d: %s", (int)st, why);
    return k;
}

static int contains(const unsigned char *hay, size_t n, const char *needle)
{
    size_t m = strlen(needle);
    for (size_t i = 0; m <= n && i <= n - m; ++i)
        if (memcmp(hay + i, needle, m) == 0)
            return 1;
    return 0;
}

static int same_kernel(const fa_rtc_kernel *a, const fa_rtc_kernel *b)
{
    return a->cubin_len == b->cubin_len && memcmp(a->cubin, b->cubin, a->cubin_len) == 0 &&
           strcmp(a->lowered_name, b->lowered_name) == 0;
}

/* the cache file of key (core/kernel_cache.c: <dir>/<64 hex digits>.bin) */
static void entry_path(const fa_kernel_key *key, char *path, size_t n)
{
    char hex[2 * FA_KERNEL_CACHE_KEY_BYTES + 1];
    for (int i = 0; i < FA_KERNEL_CACHE_KEY_BYTES; ++i)
        snprintf(hex + 2 * i, 3, "%02x", key->bytes[i]);
    snprintf(path, n, "%s/cuda/%s.bin", check_cache_root(), hex);
}

#define THREADS 4
static fa_rtc_kernel thread_kernels[THREADS];
static fa_rtc_status thread_status[THREADS];

static void *compile_in_thread(void *arg)
{
    size_t i = (size_t)arg;
    char why[256];
    thread_status[i] = fa_rtc_compile(80, 0, "fa_gpu::simt::forward_kernel<fa_gpu::store_bf16, 128, true>", NULL, 0,
                                      &thread_kernels[i], why, sizeof why);
    return NULL;
}

int main(void)
{
    char why[2048];
    setvbuf(stdout, NULL, _IONBF, 0);

    /* a library that is not there: the status, and a message naming it (before any library opens:
     * one that opened is kept for the process) */
    const char *user_library = getenv("FLASHATTN_NVRTC_LIBRARY");
    char *saved_library = user_library ? strdup(user_library) : NULL;
    setenv("FLASHATTN_NVRTC_LIBRARY", "/nonexistent/libnvrtc.so", 1);
    fa_rtc_kernel k;
    fa_rtc_status st = fa_rtc_compile(80, 0, KERNEL, NULL, 0, &k, why, sizeof why);
    CHECK(st == FA_RTC_NO_LIBRARY, "status %d: %s", (int)st, why);
    CHECK(strstr(why, "/nonexistent/libnvrtc.so") != NULL, "the message names the library: %s", why);
    CHECK(k.cubin == NULL && k.lowered_name == NULL, "nothing returned on failure");
    printf("ok: FLASHATTN_NVRTC_LIBRARY=/nonexistent/libnvrtc.so: %s\n", why);
    if (saved_library)
        setenv("FLASHATTN_NVRTC_LIBRARY", saved_library, 1);
    else
        unsetenv("FLASHATTN_NVRTC_LIBRARY");
    free(saved_library);

    const char *version = fa_rtc_nvrtc_version(why, sizeof why);
    if (!version) {
        printf("SKIP: %s\n", why);
        return SKIP;
    }
    printf("NVRTC %s\n", version);

    check_cache_dir("/tmp/fa-rtc-check-XXXXXX");
    fa_rtc_set_notify(count_compiles, NULL);

    /* bad arguments and a compile error: statuses with reasons */
    st = fa_rtc_compile(90, 'x', KERNEL, NULL, 0, &k, why, sizeof why);
    CHECK(st == FA_RTC_INVALID_ARG && strstr(why, "sm_90x"), "status %d: %s", (int)st, why);
    st = fa_rtc_compile(80, 0, "fa_gpu::simt::no_such_kernel<1>", NULL, 0, &k, why, sizeof why);
    CHECK(st == FA_RTC_COMPILE_FAILED && strstr(why, "no_such_kernel"), "status %d: %s", (int)st, why);
    CHECK(begins == 1 && ends == 1, "a failed compile is announced too: %d, %d", begins, ends);
    printf("ok: a compile error says why: %.200s...\n", why);

    fa_rtc_kernel sm80 = {0};
    static const struct {
        int arch;
        char suffix;
    } targets[] = {{80, 0}, {90, 'a'}};
    for (size_t t = 0; t < sizeof targets / sizeof targets[0]; ++t) {
        double first, second;
        int before = begins;
        fa_rtc_kernel a = compile(targets[t].arch, targets[t].suffix, NULL, 0, &first);
        CHECK(!a.from_cache && begins == before + 1, "the first call compiles");
        CHECK(a.cubin_len > 64 && memcmp(a.cubin, "\177ELF", 4) == 0, "an ELF image (%zu bytes)", a.cubin_len);
        CHECK(a.cubin[18] == 190 && a.cubin[19] == 0, "e_machine EM_CUDA (190), not %d", a.cubin[18] | a.cubin[19] << 8);
        CHECK(strncmp(a.lowered_name, "_ZN6fa_gpu4simt14forward_kernel", 31) == 0, "lowered name %s",
              a.lowered_name);
        CHECK(contains(a.cubin, a.cubin_len, a.lowered_name), "the cubin holds %s", a.lowered_name);

        fa_rtc_kernel b = compile(targets[t].arch, targets[t].suffix, NULL, 0, &second);
        CHECK(b.from_cache && begins == before + 1, "the second call is a cache hit");
        CHECK(same_kernel(&a, &b), "the hit returns the compiled kernel");
        CHECK(memcmp(&a.key, &b.key, sizeof a.key) == 0, "one key");
        printf("ok: sm_%d%s: %zu-byte cubin, %s; first call %.3f s (NVRTC %.3f s), cached call %.2f ms\n",
               targets[t].arch, targets[t].suffix ? "a" : "", a.cubin_len, a.lowered_name, first, a.compile_seconds,
               1e3 * second);
        CHECK(second <= HIT_LIMIT_SECONDS, "the cached call took %.1f ms", 1e3 * second);
        if (t == 0)
            sm80 = a;
        else
            fa_rtc_kernel_free(&a);
        fa_rtc_kernel_free(&b);
    }

    /* a define is part of the key */
    double seconds;
    const char *define[] = {"FA_RTC_CHECK_DEFINE=1"};
    int before = begins;
    fa_rtc_kernel defined = compile(80, 0, define, 1, &seconds);
    CHECK(!defined.from_cache && begins == before + 1, "a changed define is a miss");
    CHECK(memcmp(&defined.key, &sm80.key, sizeof sm80.key) != 0, "a changed define is another key");
    fa_rtc_kernel_free(&defined);
    printf("ok: -DFA_RTC_CHECK_DEFINE=1 is another key (compiled in %.3f s)\n", seconds);

    /* the other families, each by its root header: a small kernel of each (fa_gpu::dsum_kernel is in
     * both the sm80 and the sm90 family: one name, two sources, two keys); a family not embedded */
    static const struct {
        const char *family, *name, *lowered;
        int arch;
        char suffix;
    } kernels[] = {
        {"sm80", "fa_gpu::dsum_kernel<__nv_bfloat16>", "_ZN6fa_gpu11dsum_kernelI13__nv_bfloat16EEv13fa_gpu_params", 80,
         0},
        {"sm90", "fa_gpu::dsum_kernel<__nv_bfloat16>", "_ZN6fa_gpu11dsum_kernelI13__nv_bfloat16EEv13fa_gpu_params", 90,
         'a'},
        {"decode", "fa_gpu::decode::check_kernel<fa_gpu::store_f16>",
         "_ZN6fa_gpu6decode12check_kernelINS_9store_f16EEEv16fa_gpu_kv_params", 80, 0},
    };
    fa_kernel_key first_key = {{0}};
    for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; ++i) {
        fa_rtc_kernel f;
        double t0 = now_seconds();
        st = fa_rtc_compile_family(kernels[i].family, kernels[i].arch, kernels[i].suffix, kernels[i].name, NULL, 0, &f,
                                   why, sizeof why);
        CHECK(st == FA_RTC_OK, "%s: %s: %s", kernels[i].family, kernels[i].name, why);
        CHECK(strcmp(f.lowered_name, kernels[i].lowered) == 0, "lowered name %s", f.lowered_name);
        CHECK(contains(f.cubin, f.cubin_len, f.lowered_name), "the cubin holds %s", f.lowered_name);
        if (i == 0)
            first_key = f.key;
        else
            CHECK(memcmp(&f.key, &first_key, sizeof first_key) != 0, "another family is another key");
        printf("ok: family %s: %s for sm_%d%s in %.3f s\n", kernels[i].family, f.lowered_name, kernels[i].arch,
               kernels[i].suffix ? "a" : "", now_seconds() - t0);
        fa_rtc_kernel_free(&f);
    }
    st = fa_rtc_compile_family("sm70", 80, 0, KERNEL, NULL, 0, &k, why, sizeof why);
    CHECK(st == FA_RTC_INVALID_ARG && strstr(why, "sm70"), "status %d: %s", (int)st, why);
    printf("ok: an unknown family: %s\n", why);

    /* a damaged entry is compiled again, and the good entry replaces it */
    char path[256];
    entry_path(&sm80.key, path, sizeof path);
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL, "the sm_80 entry is %s", path);
    CHECK(fseek(f, -100, SEEK_END) == 0, "seek");
    int c = fgetc(f);
    CHECK(c != EOF && fseek(f, -100, SEEK_END) == 0 && fputc(c ^ 0x40, f) != EOF, "flip a byte");
    fclose(f);
    before = begins;
    fa_rtc_kernel again = compile(80, 0, NULL, 0, &seconds);
    CHECK(!again.from_cache && begins == before + 1, "a damaged entry is a miss");
    /* the same kernel, though not the same bytes: NVRTC names the internal-linkage symbols of each
     * compile with a hash of its own (_INTERNAL_..._flashattn_rtc_cu_<8 hex digits>_...) */
    CHECK(again.cubin_len == sm80.cubin_len && strcmp(again.lowered_name, sm80.lowered_name) == 0,
          "the recompiled kernel is the first one: %zu bytes, %s", again.cubin_len, again.lowered_name);
    fa_rtc_kernel_free(&again);
    again = compile(80, 0, NULL, 0, &seconds);
    CHECK(again.from_cache && begins == before + 1, "the recompiled entry is stored");
    fa_rtc_kernel_free(&again);
    fa_rtc_kernel_free(&sm80);
    printf("ok: a damaged entry is compiled again and replaced\n");

    /* threads that want one kernel at once: one compiles it, the others wait and load it */
    pthread_t threads[THREADS];
    before = begins;
    for (size_t i = 0; i < THREADS; ++i)
        CHECK(pthread_create(&threads[i], NULL, compile_in_thread, (void *)i) == 0, "thread %zu", i);
    for (size_t i = 0; i < THREADS; ++i)
        pthread_join(threads[i], NULL);
    int compiled = 0;
    for (size_t i = 0; i < THREADS; ++i) {
        CHECK(thread_status[i] == FA_RTC_OK, "thread %zu: status %d", i, (int)thread_status[i]);
        CHECK(same_kernel(&thread_kernels[i], &thread_kernels[0]), "thread %zu got the kernel thread 0 got", i);
        compiled += !thread_kernels[i].from_cache;
    }
    for (size_t i = 0; i < THREADS; ++i)
        fa_rtc_kernel_free(&thread_kernels[i]);
    CHECK(compiled == 1 && begins == before + 1, "%d threads compiled, %d compiles began", compiled, begins - before);
    printf("ok: %d threads asking for one kernel compiled it once\n", THREADS);
    printf("PASS\n");
    return 0;
}
