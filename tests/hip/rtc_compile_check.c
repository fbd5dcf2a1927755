/* rtc_compile_check.c: the HIP families' kernels compiled by hipRTC from the source the module
 * embeds (backends/hip/meson.build's hip_rtc_sources, through the run-time compiler built for
 * hipRTC), with no AMD GPU: every kernel instance the hipcc build ships (instances/ *.cu marked hip:
 * the SIMT forward and backward, the decode kernels, the MFMA forward, each dtype, head-dim bucket,
 * row tile and score-modifier variant its launchers instantiate) compiles for each target given,
 * and each kernel's lowered name is in the code object. One program per family and target, as
 * the check wants the whole family, not the first-use latency (tests/hip/meson.build).
 *
 * usage: rtc_compile_check ARCHS [OUTDIR [FAMILY]]   (ARCHS ';'-separated, e.g. "gfx90a;gfx1030"):
 *          OUTDIR receives <family>-<arch>.co and <family>-<arch>.names (lowered names, one a
 *          line) for compare_isa.py; FAMILY: that family alone;
 *        rtc_compile_check --list   the name expressions, one a line (compare_isa.py matches them
 *          with the kernels of hipcc's objects);
 *        rtc_compile_check --missing-library   with FLASHATTN_HIPRTC_LIBRARY naming a missing file:
 *          the compile fails with the library's name and the variable in its message.
 * Exit 77 (meson: SKIP) where hipRTC cannot be opened. */
#include "common/kv_geometry.h"
#include "common/simt_geometry.h"
#include "host/rtc_compiler.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_NAMES 64
#define NAME_BYTES 160

typedef struct name_list {
    char text[MAX_NAMES][NAME_BYTES];
    size_t n;
} name_list;

/* the next name's buffer (NAME_BYTES) */
static char *next(name_list *l)
{
    if (l->n == MAX_NAMES) {
        fprintf(stderr, "rtc_compile_check: more than %d names\n", MAX_NAMES);
        exit(1);
    }
    return l->text[l->n++];
}

/* The kernels of each family as the hipcc build's instances instantiate them
 * (instances/simt_*.cu, decode_*.cu, mfma_*.cu; the launchers' name expressions: host/rtc_simt.c,
 * host/rtc_decode.c, backends/hip/rtc_kernels.c). */
static void family_names(const char *family, name_list *l)
{
    static const int buckets[] = {64, 128, 256};
    static const char *const mods[] = {"false", "true"};
    static const char *const simt[] = {"forward_kernel", "dkdv_kernel", "dq_kernel"};
    static const char *const elementwise[] = {"check_kernel", "append_kernel", "combine_kernel",
                                              "combine_groups_kernel"};
    const int rows[] = {FA_KV_ROW_TILE_SMALL, FA_KV_ROW_TILE_LARGE};
    l->n = 0;
    for (int dtype = 0; dtype < 3; ++dtype) {
        const char *s = fa_simt_storage_name(dtype);
        if (strcmp(family, "simt") == 0) {
            snprintf(next(l), NAME_BYTES, "fa_gpu::simt::dsum_kernel<%s>", s);
            for (int k = 0; k < 3; ++k)
                for (int b = 0; b < 3; ++b)
                    for (int m = 0; m < 2; ++m)
                        snprintf(next(l), NAME_BYTES, "fa_gpu::simt::%s<%s, %d, %s>", simt[k], s, buckets[b], mods[m]);
        } else if (strcmp(family, "decode") == 0) {
            for (int k = 0; k < 4; ++k)
                snprintf(next(l), NAME_BYTES, "fa_gpu::decode::%s<%s>", elementwise[k], s);
            /* HIP has no cp.async ring (FA_KV_HAVE_ASYNC 0): the instances without it alone */
            for (int b = 0; b < 3; ++b)
                for (int r = 0; r < 2; ++r)
                    snprintf(next(l), NAME_BYTES, "fa_gpu::decode::decode_kernel<%s, %d, %d, false>", s, buckets[b],
                             rows[r]);
        } else if (strcmp(family, "mfma") == 0 && dtype > 0) {
            for (int b = 0; b < 2; ++b)
                for (int m = 0; m < 2; ++m)
                    snprintf(next(l), NAME_BYTES, "fa_gpu::mfma::forward_kernel<%s, %d, %s>", s, buckets[b], mods[m]);
        }
    }
    if (strcmp(family, "simt") == 0)
        snprintf(next(l), NAME_BYTES, "fa_gpu::simt::dsink_kernel<%d>", FA_SIMT_THREADS);
}

static int contains(const unsigned char *code, size_t len, const char *s)
{
    size_t n = strlen(s);
    for (size_t i = 0; i + n <= len; ++i)
        if (code[i] == (unsigned char)s[0] && memcmp(code + i, s, n) == 0)
            return 1;
    return 0;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* 0 on success, 1 on a failure, 77 without hipRTC */
static int check_family(const char *family, const char *arch, const char *outdir)
{
    static name_list l;
    family_names(family, &l);
    const char *names[MAX_NAMES];
    char *lowered[MAX_NAMES];
    for (size_t i = 0; i < l.n; ++i)
        names[i] = l.text[i];
    unsigned char *code;
    size_t code_len;
    char why[4096];
    const double t0 = now();
    fa_rtc_status st = fa_rtc_compile_names(family, arch, names, l.n, lowered, &code, &code_len, why, sizeof why);
    if (st == FA_RTC_NO_LIBRARY) {
        printf("SKIP: %s\n", why);
        return 77;
    }
    if (st != FA_RTC_OK) {
        fprintf(stderr, "FAIL: %s for %s: %s\n", family, arch, why);
        return 1;
    }
    int bad = 0;
    for (size_t i = 0; i < l.n; ++i)
        if (!lowered[i][0] || !contains(code, code_len, lowered[i])) {
            fprintf(stderr, "FAIL: %s for %s: %s (lowered %s) is not in the code object\n", family, arch, names[i],
                    lowered[i]);
            bad = 1;
        }
    printf("%s for %s: %zu kernels in %.1f s, code object %zu bytes (%s)\n", family, arch, l.n, now() - t0, code_len,
           code_len >= 4 && memcmp(code, "\177ELF", 4) == 0 ? "ELF" : "not ELF");
    if (code_len < 4 || memcmp(code, "\177ELF", 4) != 0)
        bad = 1;
    if (outdir) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s-%s.co", outdir, family, arch);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(code, 1, code_len, f) != code_len)
            bad = 1;
        if (f)
            fclose(f);
        snprintf(path, sizeof path, "%s/%s-%s.names", outdir, family, arch);
        if (!(f = fopen(path, "w")))
            bad = 1;
        for (size_t i = 0; f && i < l.n; ++i)
            fprintf(f, "%s\n", lowered[i]);
        if (f)
            fclose(f);
    }
    for (size_t i = 0; i < l.n; ++i)
        free(lowered[i]);
    free(code);
    return bad;
}

static int missing_library(void)
{
    const char *lib = getenv("FLASHATTN_HIPRTC_LIBRARY");
    fa_rtc_kernel k;
    char why[1024];
    fa_rtc_status st = fa_rtc_compile_target("simt", "gfx90a", "fa_gpu::simt::dsum_kernel<fa_gpu::store_f32>", NULL, 0,
                                             &k, why, sizeof why);
    printf("status %d: %s\n", (int)st, why);
    if (st != FA_RTC_NO_LIBRARY || !lib || !strstr(why, "cannot open hipRTC") ||
        !strstr(why, "FLASHATTN_HIPRTC_LIBRARY") || !strstr(why, lib)) {
        fprintf(stderr, "FAIL: expected FA_RTC_NO_LIBRARY naming hipRTC, FLASHATTN_HIPRTC_LIBRARY and %s\n",
                lib ? lib : "(unset)");
        return 1;
    }
    printf("PASS: a missing hipRTC is FA_RTC_NO_LIBRARY with the reason\n");
    return 0;
}

int main(int argc, char **argv)
{
    static const char *const families[] = {"simt", "decode", "mfma"};
    if (argc == 2 && strcmp(argv[1], "--missing-library") == 0)
        return missing_library();
    if (argc == 2 && strcmp(argv[1], "--list") == 0) {
        static name_list l;
        for (size_t f = 0; f < sizeof families / sizeof families[0]; ++f) {
            family_names(families[f], &l);
            for (size_t i = 0; i < l.n; ++i)
                printf("%s\n", l.text[i]);
        }
        return 0;
    }
    if (argc < 2 || argc > 4) {
        fprintf(stderr, "usage: rtc_compile_check ARCHS [OUTDIR [FAMILY]] | --list | --missing-library\n");
        return 2;
    }
    char archs[512];
    snprintf(archs, sizeof archs, "%s", argv[1]);
    int result = 0;
    for (char *save = NULL, *arch = strtok_r(archs, ";", &save); arch; arch = strtok_r(NULL, ";", &save))
        for (size_t f = 0; f < sizeof families / sizeof families[0]; ++f) {
            if (argc == 4 && strcmp(argv[3], families[f]) != 0)
                continue;
            int r = check_family(families[f], arch, argc >= 3 ? argv[2] : NULL);
            if (r == 77)
                return 77;
            result |= r;
        }
    if (result == 0)
        printf("PASS: every instance of %s compiles under hipRTC for %s\n", argc == 4 ? argv[3] : "simt, decode and mfma",
               argv[1]);
    return result;
}
