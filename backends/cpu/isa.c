/* isa.c: which of the compiled-in kernel tables (isa.h) this CPU runs, and the choice among them.
 * A table compiled with -mavx512f ... (meson.build) runs only where cpuid reports every one of
 * those extensions and the OS saves the registers they use (both are what
 * __builtin_cpu_supports answers). */
#include "isa.h"

#include <stdlib.h>
#include <string.h>

#if defined(FA_CPU_HAVE_AMX) && defined(__linux__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define FA_CPU_X86_CHECKS 1
#endif

/* the tables in the order of preference, each with whether this CPU runs it and whether it may
 * be chosen without being named */
typedef struct isa_entry {
    const fa_cpu_isa *table;
    int (*runs)(void);
    int named_only;
} isa_entry;

#if defined(FA_CPU_HAVE_AVX512) && defined(FA_CPU_X86_CHECKS)
static int runs_avx512(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2");
}
#endif

#if defined(FA_CPU_HAVE_AMX) && defined(FA_CPU_X86_CHECKS)
/* AMX on Linux: cpuid's AMX-TILE and AMX-BF16 bits, the OS's XSAVE state for the tiles (XCR0
 * bits 17 and 18), and the process's permission to use the tile data, which Linux grants on
 * request (arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA; kernel 5.16 and later). The
 * permission holds for every thread of the process; asking again is harmless. Other systems:
 * never (their rules for the tile state are not handled here). */
static int runs_amx(void)
{
#if defined(__linux__)
    unsigned a, b, c, d;
    if (!runs_avx512() || !__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 22)) || !(d & (1u << 24)))
        return 0;
    if (!__get_cpuid_count(1, 0, &a, &b, &c, &d) || !(c & (1u << 27))) /* OSXSAVE: xgetbv works */
        return 0;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & (3u << 17)) != (3u << 17))
        return 0;
    const long arch_req_xcomp_perm = 0x1023, xfeature_xtiledata = 18;
    return syscall(SYS_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata) == 0;
#else
    return 0;
#endif
}
#endif

#if defined(FA_CPU_HAVE_AVX2) && defined(FA_CPU_X86_CHECKS)
static int runs_avx2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi") &&
           __builtin_cpu_supports("bmi2");
}
#endif

static int runs_always(void)
{
    return 1;
}

static const isa_entry isa_entries[] = {
#if defined(FA_CPU_HAVE_AMX) && defined(FA_CPU_X86_CHECKS)
    {&fa_cpu_isa_amx, runs_amx, 0},
#endif
#if defined(FA_CPU_HAVE_AVX512) && defined(FA_CPU_X86_CHECKS)
    {&fa_cpu_isa_avx512, runs_avx512, 0},
#endif
#if defined(FA_CPU_HAVE_AVX2) && defined(FA_CPU_X86_CHECKS)
    {&fa_cpu_isa_avx2, runs_avx2, 0},
#endif
#if defined(FA_CPU_HAVE_AMX_EMULATED)
    {&fa_cpu_isa_amx_emulated, runs_always, 1},
#endif
    {&fa_cpu_isa_generic, runs_always, 0},
};

const fa_cpu_isa *fa_cpu_isa_select(const char **why)
{
    const size_t n = sizeof isa_entries / sizeof isa_entries[0];
    const char *want = getenv("FLASHATTN_CPU_ISA");
    if (why)
        *why = NULL;
    if (!want || !*want) {
        for (size_t i = 0; i < n; ++i)
            if (!isa_entries[i].named_only && isa_entries[i].runs())
                return isa_entries[i].table;
        return &fa_cpu_isa_generic; /* not reached: the last entry always runs */
    }
    for (size_t i = 0; i < n; ++i) {
        if (strcmp(want, isa_entries[i].table->name) != 0)
            continue;
        if (isa_entries[i].runs())
            return isa_entries[i].table;
        if (why)
            *why = "this CPU lacks the instructions of that kernel table";
        return NULL;
    }
    if (why)
        *why = "no kernel table of that name is compiled in (amx, avx512 and avx2 exist on x86-64 builds, "
               "amx-emulated, a test aid, in builds with -Dtests=true; generic always)";
    return NULL;
}
