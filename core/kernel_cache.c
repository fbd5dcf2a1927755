/* kernel_cache.c: the disk cache of compiled kernel binaries (kernel_cache.h says what it is for).
 *
 * An entry is one file, <dir>/<64 hex digits of the key>.bin, holding a header and the payload:
 *   offset  0  8 bytes   magic "FAKCACHE"
 *           8  4 bytes   format version (FORMAT_VERSION), little-endian
 *          12 32 bytes   the full key
 *          44  8 bytes   payload length, little-endian
 *          52 32 bytes   SHA-256 of the payload
 *          84            the payload
 * The header has no padding or reserved byte, so a change to any byte of the file is seen by a
 * load: a wrong magic, version, key or length, a file size other than 84 + length, or a payload
 * whose digest differs. Such a file is a miss and is removed; the caller then compiles and stores
 * a good entry under the same name.
 *
 * Keys and checksums are SHA-256 (FIPS 180-4). Nothing here defends against someone who can
 * write the cache directory (they could as well replace the library): SHA-256 is used because its
 * collisions are out of practical reach, so two different key lists never name one entry and a
 * damaged payload never passes for a good one, and because it is short to write down.
 *
 * A store writes the whole file under a temporary name of its own in the same directory, created
 * with O_EXCL (pid, a per-process counter and a clock-derived nonce make it unique, O_EXCL makes
 * sure), then rename()s it over the entry's name. rename is atomic on POSIX file systems: a
 * concurrent load opens either the old file or the new one, both complete, and concurrent stores
 * of one entry each replace it whole, the last rename winning. There is no fsync: after a crash a
 * renamed file may be empty or short on some file systems, and the checks above make that a miss.
 * A temporary file left by a process killed between its creation and the rename stays behind
 * (its name starts with '.' and ends in .tmp); it is never read.
 *
 * The only state shared between threads is the atomic counter of temporary names. */
#include "kernel_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define FORMAT_VERSION 1u
#define HEADER_BYTES 84
static const char MAGIC[8] = {'F', 'A', 'K', 'C', 'A', 'C', 'H', 'E'};

/* ---- SHA-256 (FIPS 180-4) ---- */

typedef struct sha256_state {
    uint32_t h[8];
    unsigned char block[64];
    size_t fill;    /* bytes in block */
    uint64_t total; /* bytes hashed so far */
} sha256_state;

static const uint32_t SHA256_K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t rotr32(uint32_t x, int n)
{
    return (x >> n) | (x << (32 - n));
}

static void sha256_block(uint32_t h[8], const unsigned char *p)
{
    uint32_t w[64];
    for (int i = 0; i < 16; ++i)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; ++i) {
        uint32_t s0 = rotr32(w[i - 15], 7) ^ rotr32(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = rotr32(w[i - 2], 17) ^ rotr32(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int i = 0; i < 64; ++i) {
        uint32_t t1 = hh + (rotr32(e, 6) ^ rotr32(e, 11) ^ rotr32(e, 25)) + ((e & f) ^ (~e & g)) + SHA256_K[i] + w[i];
        uint32_t t2 = (rotr32(a, 2) ^ rotr32(a, 13) ^ rotr32(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        hh = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
    h[5] += f;
    h[6] += g;
    h[7] += hh;
}

static void sha256_init(sha256_state *s)
{
    static const uint32_t h0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(s->h, h0, sizeof h0);
    s->fill = 0;
    s->total = 0;
}

static void sha256_update(sha256_state *s, const void *data, size_t n)
{
    const unsigned char *p = data;
    s->total += n;
    if (s->fill) {
        size_t take = 64 - s->fill < n ? 64 - s->fill : n;
        memcpy(s->block + s->fill, p, take);
        s->fill += take;
        p += take;
        n -= take;
        if (s->fill < 64)
            return;
        sha256_block(s->h, s->block);
        s->fill = 0;
    }
    for (; n >= 64; p += 64, n -= 64)
        sha256_block(s->h, p);
    memcpy(s->block, p, n);
    s->fill = n;
}

static void sha256_final(sha256_state *s, unsigned char out[32])
{
    uint64_t bits = s->total * 8; /* the message length modulo 2^64 bits, as FIPS 180-4 has it */
    unsigned char pad[72] = {0x80};
    size_t npad = (s->fill < 56 ? 56 : 120) - s->fill;
    for (int i = 0; i < 8; ++i)
        pad[npad + (size_t)i] = (unsigned char)(bits >> (56 - 8 * i));
    sha256_update(s, pad, npad + 8);
    for (int i = 0; i < 8; ++i)
        for (int j = 0; j < 4; ++j)
            out[4 * i + j] = (unsigned char)(s->h[i] >> (24 - 8 * j));
}

/* ---- keys ---- */

static void put_le64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; ++i)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* The digest of (length, bytes) for each part in turn: that stream decodes back into the parts,
 * so two different part lists never hash the same stream. */
fa_kernel_key fa_kernel_cache_key(const fa_kernel_key_part *parts, size_t nparts)
{
    sha256_state s;
    sha256_init(&s);
    for (size_t i = 0; i < nparts; ++i) {
        unsigned char len[8];
        put_le64(len, (uint64_t)parts[i].len);
        sha256_update(&s, len, sizeof len);
        if (parts[i].len)
            sha256_update(&s, parts[i].data, parts[i].len);
    }
    fa_kernel_key key;
    sha256_final(&s, key.bytes);
    return key;
}

/* ---- paths ---- */

/* A kind names a directory: 1 to 32 of [a-z0-9_-], so it can never climb out of the root. */
static int kind_ok(const char *kind)
{
    size_t n = 0;
    if (!kind)
        return 0;
    for (; kind[n]; ++n)
        if (n == 32 || !((kind[n] >= 'a' && kind[n] <= 'z') || (kind[n] >= '0' && kind[n] <= '9') ||
                         kind[n] == '_' || kind[n] == '-'))
            return 0;
    return n > 0;
}

/* a, b and c concatenated in a malloc'd string; NULL when out of memory */
static char *concat3(const char *a, const char *b, const char *c)
{
    size_t la = strlen(a), lb = strlen(b), lc = strlen(c);
    if (lb > SIZE_MAX - la || lc > SIZE_MAX - la - lb || la + lb + lc == SIZE_MAX)
        return NULL;
    char *s = malloc(la + lb + lc + 1);
    if (!s)
        return NULL;
    memcpy(s, a, la);
    memcpy(s + la, b, lb);
    memcpy(s + la + lb, c, lc + 1);
    return s;
}

/* The directory of kind's entries in a malloc'd string: $FLASHATTN_CACHE_DIR/<kind>, else
 * $XDG_CACHE_HOME/flashattn/<kind>, else $HOME/.cache/flashattn/<kind>. NULL with *result
 * DISABLED when FLASHATTN_CACHE_DIR=off or none of these is set, FAILED when out of memory. */
static char *kind_dir(const char *kind, fa_kernel_cache_store_result *result)
{
    const char *v = getenv("FLASHATTN_CACHE_DIR");
    char *dir;
    *result = FA_KERNEL_CACHE_DISABLED;
    if (v && strcmp(v, "off") == 0)
        return NULL;
    if (v && *v)
        dir = concat3(v, "/", kind);
    else if ((v = getenv("XDG_CACHE_HOME")) && *v)
        dir = concat3(v, "/flashattn/", kind);
    else if ((v = getenv("HOME")) && *v)
        dir = concat3(v, "/.cache/flashattn/", kind);
    else
        return NULL;
    if (!dir)
        *result = FA_KERNEL_CACHE_FAILED;
    return dir;
}

char *fa_kernel_cache_dir(const char *kind)
{
    fa_kernel_cache_store_result why;
    return kind_ok(kind) ? kind_dir(kind, &why) : NULL;
}

/* <dir>/<prefix><64 hex digits of key><suffix> in a malloc'd string */
static char *entry_path(const char *dir, const char *prefix, const fa_kernel_key *key, const char *suffix)
{
    char name[2 * FA_KERNEL_CACHE_KEY_BYTES + 1];
    for (int i = 0; i < FA_KERNEL_CACHE_KEY_BYTES; ++i)
        snprintf(name + 2 * i, 3, "%02x", key->bytes[i]);
    char *pre = concat3(dir, "/", prefix);
    char *path = pre ? concat3(pre, name, suffix) : NULL;
    free(pre);
    return path;
}

/* mkdir -p with mode 0700 for the directories it creates; 1 when path is then a directory */
static int make_dirs(const char *path)
{
    char *p = concat3(path, "", "");
    if (!p)
        return 0;
    for (char *c = p + 1; *c; ++c)
        if (*c == '/' && c[-1] != '/') {
            *c = '\0';
            mkdir(p, 0700); /* EEXIST and the rest: the final check below decides */
            *c = '/';
        }
    int ok = mkdir(p, 0700) == 0 || errno == EEXIST;
    struct stat st;
    ok = ok && stat(p, &st) == 0 && S_ISDIR(st.st_mode);
    free(p);
    return ok;
}

/* ---- load ---- */

static int read_all(int fd, void *buf, size_t n)
{
    unsigned char *p = buf;
    while (n) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return 0;
        p += r;
        n -= (size_t)r;
    }
    return 1;
}

/* The payload of the entry open at fd, of st->st_size bytes, after every check of the header
 * (kernel_cache.c's first comment); NULL when one fails. */
static unsigned char *read_entry(int fd, const struct stat *st, const fa_kernel_key *key, size_t *len)
{
    unsigned char h[HEADER_BYTES];
    if (st->st_size < HEADER_BYTES || !read_all(fd, h, sizeof h))
        return NULL;
    uint32_t version = (uint32_t)h[8] | (uint32_t)h[9] << 8 | (uint32_t)h[10] << 16 | (uint32_t)h[11] << 24;
    uint64_t n = get_le64(h + 44);
    if (memcmp(h, MAGIC, sizeof MAGIC) != 0 || version != FORMAT_VERSION ||
        memcmp(h + 12, key->bytes, FA_KERNEL_CACHE_KEY_BYTES) != 0 ||
        n != (uint64_t)st->st_size - HEADER_BYTES || n > SIZE_MAX - 1)
        return NULL;
    unsigned char *payload = malloc((size_t)n + 1); /* + 1: malloc(0) may return NULL */
    if (!payload)
        return NULL;
    unsigned char digest[32];
    sha256_state s;
    sha256_init(&s);
    if (read_all(fd, payload, (size_t)n)) {
        sha256_update(&s, payload, (size_t)n);
        sha256_final(&s, digest);
        if (memcmp(digest, h + 52, sizeof digest) == 0) {
            *len = (size_t)n;
            return payload;
        }
    }
    free(payload);
    return NULL;
}

int fa_kernel_cache_load(const char *kind, const fa_kernel_key *key, unsigned char **bytes, size_t *len)
{
    if (!bytes || !len)
        return 0;
    *bytes = NULL;
    *len = 0;
    if (!key || !kind_ok(kind))
        return 0;
    fa_kernel_cache_store_result why;
    char *dir = kind_dir(kind, &why);
    char *path = dir ? entry_path(dir, "", key, ".bin") : NULL;
    free(dir);
    if (!path)
        return 0;
    /* O_NONBLOCK: opening a FIFO put in the entry's place returns at once (then fails the
     * regular-file check) instead of waiting for a writer; reads of a regular file ignore it */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        *bytes = read_entry(fd, &st, key, len);
        if (!*bytes) {
            /* Damaged: remove it, unless a store has renamed a new file over the name since the
             * open (then the name is no longer the inode read). A store can still land between
             * this check and the unlink; the good entry lost is one more miss, never a bad load. */
            struct stat now;
            if (stat(path, &now) == 0 && now.st_dev == st.st_dev && now.st_ino == st.st_ino)
                unlink(path);
        }
    }
    if (fd >= 0)
        close(fd);
    free(path);
    return *bytes != NULL;
}

/* ---- store ---- */

static atomic_ulong temp_counter;

/* splitmix64's finaliser: spreads the clock's low-entropy bits over the nonce */
static uint64_t mix64(uint64_t x)
{
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static int write_all(int fd, const void *buf, size_t n)
{
    const unsigned char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return 0;
        p += w;
        n -= (size_t)w;
    }
    return 1;
}

fa_kernel_cache_store_result fa_kernel_cache_store(const char *kind, const fa_kernel_key *key, const void *bytes,
                                                   size_t len)
{
    if (!key || !kind_ok(kind) || (!bytes && len))
        return FA_KERNEL_CACHE_FAILED;
    fa_kernel_cache_store_result result;
    char *dir = kind_dir(kind, &result);
    if (!dir)
        return result;
    result = FA_KERNEL_CACHE_FAILED;
    char *path = NULL, *tmp = NULL;
    int fd = -1;
    if (!make_dirs(dir) || !(path = entry_path(dir, "", key, ".bin")))
        goto out;
    /* a name of this process's own; O_EXCL refuses one that exists, and a few tries get past a
     * leftover of an earlier process that had this pid */
    for (int tries = 0; fd < 0 && tries < 8; ++tries) {
        struct timespec ts = {0, 0};
        clock_gettime(CLOCK_REALTIME, &ts);
        unsigned long count = atomic_fetch_add(&temp_counter, 1);
        uint64_t nonce = mix64(((uint64_t)ts.tv_sec << 30) ^ (uint64_t)ts.tv_nsec ^ (uint64_t)(uintptr_t)&ts ^ count);
        char suffix[80];
        snprintf(suffix, sizeof suffix, ".%ld.%lu.%016llx.tmp", (long)getpid(), count, (unsigned long long)nonce);
        free(tmp);
        if (!(tmp = entry_path(dir, ".", key, suffix)))
            goto out;
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0 && errno != EEXIST)
            goto out;
    }
    if (fd < 0)
        goto out;
    unsigned char h[HEADER_BYTES];
    memcpy(h, MAGIC, sizeof MAGIC);
    for (int i = 0; i < 4; ++i)
        h[8 + i] = (unsigned char)(FORMAT_VERSION >> (8 * i));
    memcpy(h + 12, key->bytes, FA_KERNEL_CACHE_KEY_BYTES);
    put_le64(h + 44, (uint64_t)len);
    sha256_state s;
    sha256_init(&s);
    if (len)
        sha256_update(&s, bytes, len);
    sha256_final(&s, h + 52);
    int ok = write_all(fd, h, sizeof h) && (len == 0 || write_all(fd, bytes, len));
    ok = close(fd) == 0 && ok;
    fd = -1;
    if (ok && rename(tmp, path) == 0)
        result = FA_KERNEL_CACHE_STORED;
    else
        unlink(tmp);
out:
    free(tmp);
    free(path);
    free(dir);
    return result;
}
