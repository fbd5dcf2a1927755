/* provenance.h: the line a C benchmark writes first into everything it writes (its stdout table,
 * a --csv file), so that a saved result carries the date (UTC), the commit the binary was built
 * from, the device and the exact command line:
 *   # provenance: date 2026-12-01T08:30:00Z | commit <hash>[-dirty] | device <name> | command <argv>
 * bench/provenance.py writes the same line for the Python benchmarks. A build made without git
 * metadata reads "unknown" for the commit; FLASHATTN_BENCH_COMMIT in the environment then names it
 * ("<value> (from FLASHATTN_BENCH_COMMIT)"), and beside a known one ("<value> (from
 * FLASHATTN_BENCH_COMMIT; git here: <hash>)") for a tree copied without its own git metadata. */
#ifndef FA_BENCH_PROVENANCE_H
#define FA_BENCH_PROVENANCE_H

#include "provenance_commit.h" /* FA_BENCH_COMMIT */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One argument as a POSIX shell reads it back: bare when it holds only safe characters, else in
 * single quotes (an embedded quote as '\''). */
static inline void fa_bench_print_shell_word(FILE *f, const char *arg)
{
    const char *safe = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./=,:+-@%";
    if (*arg && strspn(arg, safe) == strlen(arg)) {
        fputs(arg, f);
        return;
    }
    fputc('\'', f);
    for (const char *c = arg; *c; ++c) {
        if (*c == '\'')
            fputs("'\\''", f);
        else
            fputc(*c, f);
    }
    fputc('\'', f);
}

/* The host CPU's name from /proc/cpuinfo ("model name"), for the device field of the line; "unknown
 * CPU" where there is none. */
static inline void fa_bench_cpu_model(char *buf, size_t len)
{
    snprintf(buf, len, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[256];
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "model name", 10) == 0) {
            const char *colon = strchr(line, ':');
            if (colon) {
                snprintf(buf, len, "%s", colon + 2);
                buf[strcspn(buf, "\n")] = '\0';
            }
            break;
        }
    fclose(f);
}

static inline void fa_bench_provenance(FILE *f, const char *device, int argc, char **argv)
{
    char date[32] = "unknown";
    time_t now = time(NULL);
    struct tm utc;
    if (now != (time_t)-1 && gmtime_r(&now, &utc))
        strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &utc);
    const char *env = getenv("FLASHATTN_BENCH_COMMIT");
    fprintf(f, "# provenance: date %s | commit ", date);
    if (env && *env && strcmp(FA_BENCH_COMMIT, "unknown") == 0)
        fprintf(f, "%s (from FLASHATTN_BENCH_COMMIT)", env);
    else if (env && *env) /* a copied tree whose git metadata is not the tree's (as bench/provenance.py) */
        fprintf(f, "%s (from FLASHATTN_BENCH_COMMIT; git here: %s)", env, FA_BENCH_COMMIT);
    else
        fputs(FA_BENCH_COMMIT, f);
    fprintf(f, " | device %s | command ", device && *device ? device : "unknown");
    for (int i = 0; i < argc; ++i) {
        if (i)
            fputc(' ', f);
        fa_bench_print_shell_word(f, argv[i]);
    }
    fputc('\n', f);
}

#endif
