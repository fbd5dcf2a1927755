/* test_kernel_cache.c: the disk cache of compiled kernels (core/kernel_cache.c): keys, round trips,
 * every kind of damage to an entry (a miss, the file removed, and a store then repairs it), forked
 * writers and readers of one directory, threads of one process, FLASHATTN_CACHE_DIR=off and directories that cannot be
 * written. Each test runs in a fresh directory under /tmp named by FLASHATTN_CACHE_DIR. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "kernel_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define HEADER_BYTES 84 /* kernel_cache.c's entry header */

static char root[64]; /* this test's directory */

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int setup_root(void **state)
{
    (void)state;
    snprintf(root, sizeof root, "/tmp/fa-kcache-XXXXXX");
    if (!mkdtemp(root))
        return -1;
    setenv("FLASHATTN_CACHE_DIR", root, 1);
    return 0;
}

static int teardown_root(void **state)
{
    (void)state;
    chmod(root, 0700);
    return nftw(root, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

static fa_kernel_key key_of(const char *a, const char *b)
{
    fa_kernel_key_part parts[2] = {{a, strlen(a)}, {b, strlen(b)}};
    return fa_kernel_cache_key(parts, 2);
}

static void hex_of(const fa_kernel_key *k, char out[65])
{
    for (int i = 0; i < 32; ++i)
        snprintf(out + 2 * i, 3, "%02x", k->bytes[i]);
}

static void entry_file(const char *kind, const fa_kernel_key *k, char *path, size_t n)
{
    char hex[65];
    hex_of(k, hex);
    snprintf(path, n, "%s/%s/%s.bin", root, kind, hex);
}

/* files in dir other than . and .. ; -1 when dir cannot be opened */
static int count_files(const char *dir, const char *containing)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strstr(e->d_name, containing);
    closedir(d);
    return n;
}

static int file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static void assert_hit(const char *kind, const fa_kernel_key *k, const void *want, size_t want_len)
{
    unsigned char *got = NULL;
    size_t len = 99;
    assert_int_equal(fa_kernel_cache_load(kind, k, &got, &len), 1);
    assert_non_null(got);
    assert_int_equal(len, want_len);
    if (want_len)
        assert_memory_equal(got, want, want_len);
    free(got);
}

static void assert_miss(const char *kind, const fa_kernel_key *k)
{
    unsigned char *got = (unsigned char *)1;
    size_t len = 99;
    assert_int_equal(fa_kernel_cache_load(kind, k, &got, &len), 0);
    assert_null(got);
    assert_int_equal(len, 0);
}

/* ---- keys ---- */

static void assert_key_hex(const fa_kernel_key_part *parts, size_t n, const char *want)
{
    fa_kernel_key k = fa_kernel_cache_key(parts, n);
    char hex[65];
    hex_of(&k, hex);
    assert_string_equal(hex, want);
}

static void assert_keys_differ(fa_kernel_key a, fa_kernel_key b)
{
    assert_memory_not_equal(a.bytes, b.bytes, sizeof a.bytes);
}

/* Known answers (Python: hashlib.sha256 over struct.pack('<Q', len(p)) + p for each part), with
 * part lengths around SHA-256's 64-byte block and its padding edge, and a million bytes. */
static void test_key_known_answers(void **state)
{
    (void)state;
    assert_key_hex(NULL, 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    fa_kernel_key_part abc = {"abc", 3};
    assert_key_hex(&abc, 1, "ce91dc5eec0139adf091900d225971d6ad246a845bad791b5693a9d0d55dd391");
    char *big = malloc(1000000);
    assert_non_null(big);
    memset(big, 'a', 1000000);
    fa_kernel_key_part m = {big, 1000000};
    assert_key_hex(&m, 1, "ed0b8b8c0574374dfd3c74e6e7c903ebc27c256dc3feb2752e112bd44c0b1608");
    free(big);
    char x[55], y[56], z[63], w[64];
    memset(x, 'x', sizeof x);
    memset(y, 'y', sizeof y);
    memset(z, 'z', sizeof z);
    memset(w, 'w', sizeof w);
    fa_kernel_key_part edges[5] = {{x, sizeof x}, {y, sizeof y}, {z, sizeof z}, {w, sizeof w}, {NULL, 0}};
    assert_key_hex(edges, 5, "7b7f418d8de5dbc8dae27f83b304452acbe67b56d8c80d5cd2085ff3438bd614");
}

/* Any one input changed changes the key; so do their order, a byte moved across a boundary and
 * an empty part added; the same inputs give the same key. */
static void test_key_changes(void **state)
{
    (void)state;
    const char *base[4] = {"__global__ void k() {}", "sm_90", "nvrtc 12.4", "-O3 -DFA_D=128"};
    fa_kernel_key_part parts[5];
    for (int i = 0; i < 4; ++i)
        parts[i] = (fa_kernel_key_part){base[i], strlen(base[i])};
    fa_kernel_key k0 = fa_kernel_cache_key(parts, 4);
    fa_kernel_key again = fa_kernel_cache_key(parts, 4);
    assert_memory_equal(k0.bytes, again.bytes, sizeof k0.bytes);

    for (int i = 0; i < 4; ++i) {
        char changed[64];
        fa_kernel_key_part p[4];
        memcpy(p, parts, sizeof p);
        /* the last byte flipped in one bit */
        snprintf(changed, sizeof changed, "%s", base[i]);
        changed[strlen(changed) - 1] ^= 1;
        p[i] = (fa_kernel_key_part){changed, strlen(changed)};
        assert_keys_differ(k0, fa_kernel_cache_key(p, 4));
        /* one byte longer, one byte shorter */
        snprintf(changed, sizeof changed, "%s ", base[i]);
        p[i].len = strlen(changed);
        assert_keys_differ(k0, fa_kernel_cache_key(p, 4));
        p[i] = (fa_kernel_key_part){base[i], strlen(base[i]) - 1};
        assert_keys_differ(k0, fa_kernel_cache_key(p, 4));
    }
    /* order */
    fa_kernel_key_part swapped[4] = {parts[0], parts[2], parts[1], parts[3]};
    assert_keys_differ(k0, fa_kernel_cache_key(swapped, 4));
    /* "ab" + "c" against "a" + "bc" */
    fa_kernel_key_part ab_c[2] = {{"ab", 2}, {"c", 1}}, a_bc[2] = {{"a", 1}, {"bc", 2}};
    assert_keys_differ(fa_kernel_cache_key(ab_c, 2), fa_kernel_cache_key(a_bc, 2));
    /* an empty part added, at the end or between two others */
    parts[4] = (fa_kernel_key_part){"", 0};
    assert_keys_differ(k0, fa_kernel_cache_key(parts, 5));
    fa_kernel_key_part between[5] = {parts[0], {NULL, 0}, parts[1], parts[2], parts[3]};
    assert_keys_differ(k0, fa_kernel_cache_key(between, 5));
}

/* ---- round trip ---- */

static void test_round_trip(void **state)
{
    (void)state;
    static const size_t lens[] = {0, 1, 63, 64, 65, 100000};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; ++i) {
        unsigned char *p = malloc(lens[i] + 1);
        assert_non_null(p);
        for (size_t j = 0; j < lens[i]; ++j)
            p[j] = (unsigned char)(j * 131 + i);
        char name[16];
        snprintf(name, sizeof name, "%zu", i);
        fa_kernel_key k = key_of("round trip", name);
        assert_miss("cuda", &k);
        assert_int_equal(fa_kernel_cache_store("cuda", &k, p, lens[i]), FA_KERNEL_CACHE_STORED);
        assert_hit("cuda", &k, p, lens[i]);
        char path[200];
        entry_file("cuda", &k, path, sizeof path);
        struct stat st;
        assert_int_equal(stat(path, &st), 0);
        assert_int_equal(st.st_size, HEADER_BYTES + (off_t)lens[i]);
        /* the same key in another kind's directory is another entry */
        assert_miss("hip", &k);
        assert_miss("opencl", &k);
        free(p);
    }
    /* a store replaces the entry */
    fa_kernel_key k = key_of("round trip", "replaced");
    assert_int_equal(fa_kernel_cache_store("hip", &k, "first", 5), FA_KERNEL_CACHE_STORED);
    assert_int_equal(fa_kernel_cache_store("hip", &k, "second!", 7), FA_KERNEL_CACHE_STORED);
    assert_hit("hip", &k, "second!", 7);
    assert_miss("cuda", &k);
    /* new directories are private; no temporary file is left behind */
    char dir[200];
    snprintf(dir, sizeof dir, "%s/cuda", root);
    struct stat st;
    assert_int_equal(stat(dir, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0700);
    assert_int_equal(count_files(dir, ".tmp"), 0);
    assert_int_equal(count_files(dir, ".bin"), 6);
    /* kinds that would name another directory, and missing arguments */
    const char *bad[] = {"", "..", "../cuda", "a/b", "CUDA", "x23456789012345678901234567890123", NULL};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
        assert_int_equal(fa_kernel_cache_store(bad[i], &k, "x", 1), FA_KERNEL_CACHE_FAILED);
        assert_miss(bad[i], &k);
    }
    assert_int_equal(fa_kernel_cache_store("hip", NULL, "x", 1), FA_KERNEL_CACHE_FAILED);
    assert_int_equal(fa_kernel_cache_store("hip", &k, NULL, 1), FA_KERNEL_CACHE_FAILED);
    assert_miss("hip", NULL);
    size_t len;
    assert_int_equal(fa_kernel_cache_load("hip", &k, NULL, &len), 0);
    assert_hit("hip", &k, "second!", 7);
}

/* ---- damaged entries ---- */

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    unsigned char *b = malloc(1 << 16);
    assert_non_null(b);
    *n = fread(b, 1, 1 << 16, f);
    fclose(f);
    return b;
}

static void spit(const char *path, const unsigned char *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

/* The entry, damaged by damage(), is a miss and its file is removed; a store then repairs it. */
static void check_damage(const fa_kernel_key *k, const char *path, const unsigned char *payload, size_t len,
                         const unsigned char *damaged, size_t damaged_len)
{
    spit(path, damaged, damaged_len);
    assert_miss("opencl", k);
    assert_false(file_exists(path));
    assert_int_equal(fa_kernel_cache_store("opencl", k, payload, len), FA_KERNEL_CACHE_STORED);
    assert_hit("opencl", k, payload, len);
}

static void test_corruption(void **state)
{
    (void)state;
    unsigned char payload[300];
    for (size_t j = 0; j < sizeof payload; ++j)
        payload[j] = (unsigned char)(j * 7 + 3);
    fa_kernel_key k = key_of("corruption", "a"), other = key_of("corruption", "b");
    char path[200], other_path[200];
    entry_file("opencl", &k, path, sizeof path);
    entry_file("opencl", &other, other_path, sizeof other_path);
    assert_int_equal(fa_kernel_cache_store("opencl", &k, payload, sizeof payload), FA_KERNEL_CACHE_STORED);
    size_t n;
    unsigned char *good = slurp(path, &n);
    assert_int_equal(n, HEADER_BYTES + sizeof payload);
    unsigned char *bad = malloc(n + 1);
    assert_non_null(bad);

    /* truncated anywhere, or one byte too long */
    const size_t cuts[] = {0, 1, 8, HEADER_BYTES - 1, HEADER_BYTES, HEADER_BYTES + 1, n - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; ++i)
        check_damage(&k, path, payload, sizeof payload, good, cuts[i]);
    memcpy(bad, good, n);
    bad[n] = 0;
    check_damage(&k, path, payload, sizeof payload, bad, n + 1);
    /* one bit flipped in every header byte (magic, version, key, length, checksum), and in the
     * payload's first, middle and last bytes */
    for (size_t i = 0; i < n; i = i < HEADER_BYTES ? i + 1 : i + (sizeof payload - 1) / 2) {
        memcpy(bad, good, n);
        bad[i] ^= (unsigned char)(1u << (i % 8));
        check_damage(&k, path, payload, sizeof payload, bad, n);
    }
    /* another key's entry, whole and valid, under this key's name */
    unsigned char other_payload[300];
    memset(other_payload, 0x5a, sizeof other_payload);
    assert_int_equal(fa_kernel_cache_store("opencl", &other, other_payload, sizeof other_payload),
                     FA_KERNEL_CACHE_STORED);
    size_t on;
    unsigned char *o = slurp(other_path, &on);
    check_damage(&k, path, payload, sizeof payload, o, on);
    assert_hit("opencl", &other, other_payload, sizeof other_payload);
    free(o);
    /* a directory where the entry should be: a miss, and the store fails without harm */
    assert_int_equal(unlink(path), 0);
    assert_int_equal(mkdir(path, 0700), 0);
    assert_miss("opencl", &k);
    assert_int_equal(fa_kernel_cache_store("opencl", &k, payload, sizeof payload), FA_KERNEL_CACHE_FAILED);
    assert_miss("opencl", &k);
    assert_int_equal(rmdir(path), 0);
    /* a FIFO there: a miss at once, not a wait for a writer; a store replaces it */
    assert_int_equal(mkfifo(path, 0600), 0);
    assert_miss("opencl", &k);
    assert_int_equal(fa_kernel_cache_store("opencl", &k, payload, sizeof payload), FA_KERNEL_CACHE_STORED);
    assert_hit("opencl", &k, payload, sizeof payload);
    char dir[200];
    snprintf(dir, sizeof dir, "%s/opencl", root);
    assert_int_equal(count_files(dir, ".tmp"), 0);
    free(bad);
    free(good);
}

/* ---- several processes at once ---- */

#define WRITERS 6
#define READERS 2
#define ROUNDS 200
#define SHARED_KEYS 4

/* A payload that says what it is: the key's name, its writer, its round and its length, then bytes
 * that follow from those, so a reader can tell a whole payload of the right key from anything else. */
typedef struct payload_head {
    char key_name[16];
    uint32_t writer, round, len, pad;
} payload_head;

static unsigned char pattern_byte(const payload_head *h, size_t j)
{
    return (unsigned char)(j * 2654435761u + h->writer * 97u + h->round * 13u);
}

static size_t make_payload(unsigned char *buf, const char *key_name, uint32_t writer, uint32_t round)
{
    payload_head h = {{0}, writer, round, 0, 0};
    snprintf(h.key_name, sizeof h.key_name, "%s", key_name);
    /* 1 to 40 KiB: several pages, so a torn write shows */
    h.len = (uint32_t)(sizeof h + 1 + (writer * 7919u + round * 104729u) % 40000u);
    memcpy(buf, &h, sizeof h);
    for (size_t j = sizeof h; j < h.len; ++j)
        buf[j] = pattern_byte(&h, j);
    return h.len;
}

/* 0 when bytes is a whole payload of key_name, else why not */
static int check_payload(const unsigned char *bytes, size_t len, const char *key_name)
{
    payload_head h;
    if (len < sizeof h)
        return 1;
    memcpy(&h, bytes, sizeof h);
    if (strncmp(h.key_name, key_name, sizeof h.key_name) != 0)
        return 2;
    if (h.len != len)
        return 3;
    for (size_t j = sizeof h; j < len; ++j)
        if (bytes[j] != pattern_byte(&h, j))
            return 4;
    return 0;
}

/* One load: 0 when a miss is allowed and seen, or a hit has a good payload; else an error code */
static int load_and_check(const char *key_name, int must_hit)
{
    fa_kernel_key k = key_of("concurrency", key_name);
    unsigned char *got = NULL;
    size_t len = 0;
    if (!fa_kernel_cache_load("cuda", &k, &got, &len))
        return must_hit ? 10 : 0;
    int bad = check_payload(got, len, key_name);
    free(got);
    return bad;
}

/* A writer stores and loads the shared keys and keys of its own; once one of its stores of a key
 * has returned, every later load of that key must hit, since entries are only ever replaced whole. */
static int writer(uint32_t id)
{
    unsigned char *buf = malloc(64 << 10);
    if (!buf)
        return 20;
    int stored[SHARED_KEYS + 1] = {0};
    unsigned seed = id * 7 + 1;
    for (uint32_t round = 0; round < ROUNDS; ++round) {
        int which = rand_r(&seed) % (SHARED_KEYS + 1); /* SHARED_KEYS: this writer's own */
        char name[16];
        if (which < SHARED_KEYS)
            snprintf(name, sizeof name, "shared%d", which);
        else
            snprintf(name, sizeof name, "own%u.%u", id, round % 8);
        size_t len = make_payload(buf, name, id, round);
        fa_kernel_key k = key_of("concurrency", name);
        if (fa_kernel_cache_store("cuda", &k, buf, len) != FA_KERNEL_CACHE_STORED) {
            free(buf);
            return 21;
        }
        stored[which < SHARED_KEYS ? which : SHARED_KEYS] = 1;
        int bad = load_and_check(name, 1);
        for (int s = 0; !bad && s < SHARED_KEYS; ++s) {
            snprintf(name, sizeof name, "shared%d", s);
            bad = load_and_check(name, stored[s]);
        }
        if (bad) {
            free(buf);
            return bad;
        }
    }
    free(buf);
    return 0;
}

static int reader(uint32_t id)
{
    unsigned seed = id * 13 + 5;
    for (int i = 0; i < ROUNDS * 4; ++i) {
        char name[16];
        snprintf(name, sizeof name, "shared%d", rand_r(&seed) % SHARED_KEYS);
        int bad = load_and_check(name, 0);
        if (bad)
            return bad;
    }
    return 0;
}

static void test_concurrency(void **state)
{
    (void)state;
    pid_t pids[WRITERS + READERS];
    for (int i = 0; i < WRITERS + READERS; ++i) {
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0)
            _exit(i < WRITERS ? writer((uint32_t)i) : reader((uint32_t)i));
    }
    for (int i = 0; i < WRITERS + READERS; ++i) {
        int status = 0;
        assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
        assert_true(WIFEXITED(status));
        if (WEXITSTATUS(status))
            print_message("process %d (%s) failed: %d\n", i, i < WRITERS ? "writer" : "reader", WEXITSTATUS(status));
        assert_int_equal(WEXITSTATUS(status), 0);
    }
    for (int s = 0; s < SHARED_KEYS; ++s) {
        char name[16];
        snprintf(name, sizeof name, "shared%d", s);
        assert_int_equal(load_and_check(name, 1), 0);
    }
    char dir[200];
    snprintf(dir, sizeof dir, "%s/cuda", root);
    assert_int_equal(count_files(dir, ".tmp"), 0);
    int entries = count_files(dir, ".bin");
    assert_true(entries >= SHARED_KEYS && entries <= SHARED_KEYS + WRITERS * 8);
}

/* Threads of one process share the pid: their temporary names must still differ. */
#define THREADS 4

static void *thread_writer(void *arg)
{
    return (void *)(intptr_t)writer((uint32_t)(intptr_t)arg);
}

static void test_threads(void **state)
{
    (void)state;
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; ++i)
        assert_int_equal(pthread_create(&t[i], NULL, thread_writer, (void *)(intptr_t)i), 0);
    for (int i = 0; i < THREADS; ++i) {
        void *bad = NULL;
        assert_int_equal(pthread_join(t[i], &bad), 0);
        if (bad)
            print_message("thread %d failed: %d\n", i, (int)(intptr_t)bad);
        assert_null(bad);
    }
    char dir[200];
    snprintf(dir, sizeof dir, "%s/cuda", root);
    assert_int_equal(count_files(dir, ".tmp"), 0);
}

/* ---- the cache off, or unwritable ---- */

static void test_off(void **state)
{
    (void)state;
    char home[200], xdg[200], cwd[200], old_cwd[4096];
    snprintf(home, sizeof home, "%s/home", root);
    snprintf(xdg, sizeof xdg, "%s/xdg", root);
    snprintf(cwd, sizeof cwd, "%s/cwd", root);
    assert_int_equal(mkdir(home, 0700), 0);
    assert_int_equal(mkdir(xdg, 0700), 0);
    assert_int_equal(mkdir(cwd, 0700), 0);
    assert_non_null(getcwd(old_cwd, sizeof old_cwd));
    assert_int_equal(chdir(cwd), 0);
    char *old_home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
    char *old_xdg = getenv("XDG_CACHE_HOME") ? strdup(getenv("XDG_CACHE_HOME")) : NULL;
    setenv("HOME", home, 1);
    setenv("XDG_CACHE_HOME", xdg, 1);

    /* an entry stored while the cache was on is not read while it is off */
    fa_kernel_key k = key_of("off", "x");
    assert_int_equal(fa_kernel_cache_store("hip", &k, "payload", 7), FA_KERNEL_CACHE_STORED);
    setenv("FLASHATTN_CACHE_DIR", "off", 1);
    assert_miss("hip", &k);
    assert_null(fa_kernel_cache_dir("hip"));
    assert_int_equal(fa_kernel_cache_store("hip", &k, "other", 5), FA_KERNEL_CACHE_DISABLED);
    assert_int_equal(fa_kernel_cache_store("cuda", &k, "other", 5), FA_KERNEL_CACHE_DISABLED);
    assert_int_equal(count_files(home, ""), 0);
    assert_int_equal(count_files(xdg, ""), 0);
    assert_int_equal(count_files(cwd, ""), 0);
    /* unset, XDG_CACHE_HOME then HOME name the root; with neither there is no cache */
    unsetenv("FLASHATTN_CACHE_DIR");
    assert_int_equal(fa_kernel_cache_store("cuda", &k, "xdg", 3), FA_KERNEL_CACHE_STORED);
    char dir[300];
    snprintf(dir, sizeof dir, "%s/flashattn/cuda", xdg);
    assert_int_equal(count_files(dir, ".bin"), 1);
    char *named = fa_kernel_cache_dir("cuda"); /* the directory messages name is the one written */
    assert_string_equal(named, dir);
    free(named);
    assert_null(fa_kernel_cache_dir("../cuda"));
    unsetenv("XDG_CACHE_HOME");
    assert_miss("cuda", &k);
    assert_int_equal(fa_kernel_cache_store("cuda", &k, "home", 4), FA_KERNEL_CACHE_STORED);
    assert_hit("cuda", &k, "home", 4);
    snprintf(dir, sizeof dir, "%s/.cache/flashattn/cuda", home);
    assert_int_equal(count_files(dir, ".bin"), 1);
    named = fa_kernel_cache_dir("cuda");
    assert_string_equal(named, dir);
    free(named);
    unsetenv("HOME");
    assert_miss("cuda", &k);
    assert_null(fa_kernel_cache_dir("cuda"));
    assert_int_equal(fa_kernel_cache_store("cuda", &k, "none", 4), FA_KERNEL_CACHE_DISABLED);
    assert_int_equal(count_files(cwd, ""), 0);

    setenv("FLASHATTN_CACHE_DIR", root, 1);
    assert_hit("hip", &k, "payload", 7);
    if (old_home)
        setenv("HOME", old_home, 1);
    if (old_xdg)
        setenv("XDG_CACHE_HOME", old_xdg, 1);
    free(old_home);
    free(old_xdg);
    assert_int_equal(chdir(old_cwd), 0);
}

static void test_unwritable(void **state)
{
    (void)state;
    fa_kernel_key k = key_of("unwritable", "x");
    /* the root is a regular file: no directory can be made under it (whoever runs the test) */
    char file[200];
    snprintf(file, sizeof file, "%s/file", root);
    spit(file, (const unsigned char *)"x", 1);
    setenv("FLASHATTN_CACHE_DIR", file, 1);
    assert_int_equal(fa_kernel_cache_store("cuda", &k, "payload", 7), FA_KERNEL_CACHE_FAILED);
    assert_miss("cuda", &k);
    /* the kind's directory is a file */
    setenv("FLASHATTN_CACHE_DIR", root, 1);
    char kind_file[200];
    snprintf(kind_file, sizeof kind_file, "%s/hip", root);
    spit(kind_file, (const unsigned char *)"x", 1);
    assert_int_equal(fa_kernel_cache_store("hip", &k, "payload", 7), FA_KERNEL_CACHE_FAILED);
    assert_miss("hip", &k);
    /* a directory without write permission (root writes anyway, so this part needs another user) */
    if (geteuid() != 0) {
        char ro[200];
        snprintf(ro, sizeof ro, "%s/opencl", root);
        assert_int_equal(mkdir(ro, 0500), 0);
        assert_int_equal(fa_kernel_cache_store("opencl", &k, "payload", 7), FA_KERNEL_CACHE_FAILED);
        assert_miss("opencl", &k);
        assert_int_equal(count_files(ro, ""), 0);
        chmod(ro, 0700);
    } else {
        print_message("running as root: the read-only directory case is skipped\n");
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_known_answers),
        cmocka_unit_test(test_key_changes),
        cmocka_unit_test_setup_teardown(test_round_trip, setup_root, teardown_root),
        cmocka_unit_test_setup_teardown(test_corruption, setup_root, teardown_root),
        cmocka_unit_test_setup_teardown(test_concurrency, setup_root, teardown_root),
        cmocka_unit_test_setup_teardown(test_threads, setup_root, teardown_root),
        cmocka_unit_test_setup_teardown(test_off, setup_root, teardown_root),
        cmocka_unit_test_setup_teardown(test_unwritable, setup_root, teardown_root),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
