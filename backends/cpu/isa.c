/* isa.c: which of the compiled-in kernel tables (isa.h) this CPU runs, and the choice among them.
 * A table compiled with -mavx512f ... (meson.build) runs only where cpuid reports every one of
 * those extensions and the OS saves the registers they use (both are what
 * __builtin_cpu_supports answers). */
#include "isa.h"

#include <stdlib.h>
#include <string.h>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define FA_CPU_X86_CHECKS 1
#endif

/* the tables in the order of preference, each with whether this CPU runs it */
typedef struct isa_entry {
    const fa_cpu_isa *table;
    int (*runs)(void);
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
#if defined(FA_CPU_HAVE_AVX512) && defined(FA_CPU_X86_CHECKS)
    {&fa_cpu_isa_avx512, runs_avx512},
#endif
#if defined(FA_CPU_HAVE_AVX2) && defined(FA_CPU_X86_CHECKS)
    {&fa_cpu_isa_avx2, runs_avx2},
#endif
    {&fa_cpu_isa_generic, runs_always},
};

const fa_cpu_isa *fa_cpu_isa_select(const char **why)
{
    const size_t n = sizeof isa_entries / sizeof isa_entries[0];
    const char *want = getenv("FLASHATTN_CPU_ISA");
    if (why)
        *why = NULL;
    if (!want || !*want) {
        for (size_t i = 0; i < n; ++i)
            if (isa_entries[i].runs())
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
        *why = "no kernel table of that name is compiled in (avx512 and avx2 exist on x86-64 builds; generic always)";
    return NULL;
}
