/* driver.c: a bounded random-mutation driver for the fuzz targets, for compilers without libFuzzer
 * (gcc) and for the fixed-time runs of meson test and CI. It calls the target's
 * LLVMFuzzerTestOneInput, like libFuzzer, on inputs mutated from a seed corpus (byte flips,
 * interesting values, insertions, deletions, splices) by a seeded generator, so a run is
 * reproducible from its seed. No coverage feedback: the sanitizers (ASan, UBSan) are the oracle.
 * When a sanitizer reports an error (UBSan: with abort_on_error=1), an abort or a time-out, the input
 * being run is written to ./fuzz-crash-<pid>.bin.
 * Usage: driver [-runs=N] [-max_total_time=S] [-seed=N] [-timeout=S] [DIR_OR_FILE ...]
 * A FILE argument is run once (replay of a saved input); DIR arguments are seed corpora. */
#include <dirent.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define DRIVER_MAX_INPUT 4096
#define MAX_SEEDS 256

typedef struct seed {
    uint8_t *data;
    size_t size;
} seed;

static seed g_seeds[MAX_SEEDS];
static int g_nseeds;
static uint8_t g_current[DRIVER_MAX_INPUT];
static size_t g_current_size;
static uint64_t g_rng;

static uint64_t next_random(void)
{
    /* splitmix64 */
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void save_current(void)
{
    char name[64];
    snprintf(name, sizeof name, "fuzz-crash-%d.bin", (int)getpid());
    FILE *f = fopen(name, "wb");
    if (!f)
        return;
    size_t wrote = fwrite(g_current, 1, g_current_size, f);
    fclose(f);
    fprintf(stderr, "driver: the input (%zu of %zu bytes written) is in %s\n", wrote, g_current_size, name);
}

/* The sanitizers call this before they exit on an error. */
void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "driver: an input ran longer than the time-out (a hang)\n";
    if (write(2, msg, sizeof msg - 1) < 0) {
        /* nothing more can be reported */
    }
    save_current();
    _exit(70);
}

/* abort(): a property the target checks, glibc's heap checks, or UBSan with abort_on_error=1 */
static void on_abort(int sig)
{
    save_current();
    signal(sig, SIG_DFL);
    raise(sig);
}

static int read_file(const char *path, seed *s)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    s->data = malloc(DRIVER_MAX_INPUT);
    s->size = s->data ? fread(s->data, 1, DRIVER_MAX_INPUT, f) : 0;
    fclose(f);
    return s->data ? 0 : -1;
}

static void add_corpus_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) && g_nseeds < MAX_SEEDS) {
        if (e->d_name[0] == '.')
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode) && read_file(path, &g_seeds[g_nseeds]) == 0)
            ++g_nseeds;
    }
    closedir(d);
}

static const uint8_t interesting[] = {0, 1, 2, 3, 4, 7, 8, 15, 16, 31, 32, 63, 64, 127, 128, 200, 224, 240, 254, 255};

static void mutate(uint8_t *buf, size_t *size)
{
    int steps = 1 + (int)(next_random() % 8);
    for (int s = 0; s < steps; ++s) {
        size_t n = *size;
        switch (next_random() % 7) {
        case 0: /* flip a bit */
            if (n)
                buf[next_random() % n] ^= (uint8_t)(1u << (next_random() % 8));
            break;
        case 1: /* an interesting byte */
            if (n)
                buf[next_random() % n] = interesting[next_random() % sizeof interesting];
            break;
        case 2: /* a random byte */
            if (n)
                buf[next_random() % n] = (uint8_t)next_random();
            break;
        case 3: /* insert random bytes */
        {
            size_t k = 1 + next_random() % 8, at = n ? next_random() % (n + 1) : 0;
            if (n + k > DRIVER_MAX_INPUT)
                break;
            memmove(buf + at + k, buf + at, n - at);
            for (size_t i = 0; i < k; ++i)
                buf[at + i] = (uint8_t)next_random();
            *size = n + k;
            break;
        }
        case 4: /* delete bytes */
        {
            if (!n)
                break;
            size_t at = next_random() % n, k = 1 + next_random() % 8;
            if (k > n - at)
                k = n - at;
            memmove(buf + at, buf + at + k, n - at - k);
            *size = n - k;
            break;
        }
        case 5: /* splice the tail of another seed */
        {
            if (!g_nseeds || !n)
                break;
            const seed *o = &g_seeds[next_random() % (uint64_t)g_nseeds];
            size_t at = next_random() % n, from = o->size ? next_random() % o->size : 0;
            size_t k = o->size - from;
            if (at + k > DRIVER_MAX_INPUT)
                k = DRIVER_MAX_INPUT - at;
            memcpy(buf + at, o->data + from, k);
            *size = at + k > n ? at + k : n;
            break;
        }
        default: /* truncate */
            if (n)
                *size = next_random() % n;
            break;
        }
    }
}

int main(int argc, char **argv)
{
    long long runs = 100000, max_time = 0, timeout = 20;
    unsigned long long seed_value = 1;
    int replayed = 0;
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i];
        if (!strncmp(a, "-runs=", 6))
            runs = atoll(a + 6);
        else if (!strncmp(a, "-max_total_time=", 16))
            max_time = atoll(a + 16);
        else if (!strncmp(a, "-seed=", 6))
            seed_value = strtoull(a + 6, NULL, 10);
        else if (!strncmp(a, "-timeout=", 9))
            timeout = atoll(a + 9);
        else if (a[0] == '-') {
            fprintf(stderr, "driver: unknown option %s\n", a);
            return 2;
        }
    }
    if (__sanitizer_set_death_callback)
        __sanitizer_set_death_callback(save_current);
    signal(SIGALRM, on_alarm);
    signal(SIGABRT, on_abort);
    for (int i = 1; i < argc; ++i) {
        struct stat st;
        if (argv[i][0] == '-' || stat(argv[i], &st) != 0)
            continue;
        if (S_ISDIR(st.st_mode)) {
            add_corpus_dir(argv[i]);
        } else {
            seed s;
            if (read_file(argv[i], &s) != 0)
                return 2;
            memcpy(g_current, s.data, s.size);
            g_current_size = s.size;
            alarm((unsigned)timeout);
            LLVMFuzzerTestOneInput(g_current, g_current_size);
            alarm(0);
            free(s.data);
            printf("driver: replayed %s (%zu bytes)\n", argv[i], g_current_size);
            replayed = 1;
        }
    }
    if (replayed)
        return 0;
    /* every seed once as it is, then mutations */
    for (int i = 0; i < g_nseeds; ++i) {
        memcpy(g_current, g_seeds[i].data, g_seeds[i].size);
        g_current_size = g_seeds[i].size;
        alarm((unsigned)timeout);
        LLVMFuzzerTestOneInput(g_current, g_current_size);
    }
    g_rng = seed_value;
    time_t start = time(NULL);
    long long done = 0;
    for (; done < runs; ++done) {
        if (max_time > 0 && (done & 63) == 0 && time(NULL) - start >= max_time)
            break;
        if (g_nseeds && next_random() % 8) {
            const seed *s = &g_seeds[next_random() % (uint64_t)g_nseeds];
            memcpy(g_current, s->data, s->size);
            g_current_size = s->size;
        } else {
            g_current_size = next_random() % 256;
            for (size_t i = 0; i < g_current_size; ++i)
                g_current[i] = (uint8_t)next_random();
        }
        mutate(g_current, &g_current_size);
        alarm((unsigned)timeout);
        LLVMFuzzerTestOneInput(g_current, g_current_size);
    }
    alarm(0);
    printf("driver: %lld mutated inputs and %d seeds in %lld s (seed %llu), no failure\n", done, g_nseeds,
           (long long)(time(NULL) - start), seed_value);
    for (int i = 0; i < g_nseeds; ++i)
        free(g_seeds[i].data);
    return 0;
}
