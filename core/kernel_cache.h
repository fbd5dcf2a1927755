/* kernel_cache.h: the disk cache of compiled kernel binaries, shared by the backends that compile
 * kernels at run time (OpenCL program binaries; NVRTC / hipRTC output next).
 *
 * An entry is named by a key, a SHA-256 digest over an ordered list of byte strings that the
 * backend chooses: the kernel source, the architecture, the compiler version and the options.
 * Entries of one kind ("opencl", "cuda", "hip") live in one directory:
 *   $FLASHATTN_CACHE_DIR/<kind>, else $XDG_CACHE_HOME/flashattn/<kind>, else
 *   $HOME/.cache/flashattn/<kind>; FLASHATTN_CACHE_DIR=off turns the cache off.
 * The cache only saves time: a load that finds nothing valid is a miss, a store that fails is
 * ignored by its caller, and neither prints or aborts. Both are thread-safe and safe across
 * processes sharing the directory (the entry format and the rules are in kernel_cache.c).
 *
 * Needs only libc and POSIX, so a backend module that cannot call into libflashattn (the HIP
 * module) can compile kernel_cache.c in. */
#ifndef FA_KERNEL_CACHE_H
#define FA_KERNEL_CACHE_H

#include <stddef.h>

#define FA_KERNEL_CACHE_KEY_BYTES 32

/* A cache key: the SHA-256 digest of the key's parts (fa_kernel_cache_key). */
typedef struct fa_kernel_key {
    unsigned char bytes[FA_KERNEL_CACHE_KEY_BYTES];
} fa_kernel_key;

/* One part of a key: len bytes at data (data may be NULL when len is 0). */
typedef struct fa_kernel_key_part {
    const void *data;
    size_t len;
} fa_kernel_key_part;

/* The key of nparts parts, in order. Each part is hashed with its length in front, so moving bytes
 * from one part to the next, reordering the parts or adding an empty part changes the key. */
fa_kernel_key fa_kernel_cache_key(const fa_kernel_key_part *parts, size_t nparts);

/* The entry of kind and key: 1 and a malloc'd copy of its payload in *bytes (the caller frees it)
 * with its length in *len; 0 (a miss, *bytes NULL, *len 0) when the cache is off, the entry is
 * absent, or the file fails any check, in which case a damaged file is removed. */
int fa_kernel_cache_load(const char *kind, const fa_kernel_key *key, unsigned char **bytes, size_t *len);

/* The directory of kind's entries in a malloc'd string (the caller frees it), for messages that
 * say where a compiled kernel is kept; NULL when the cache is off, kind is invalid or memory runs
 * out. The directory need not exist yet (the first store creates it). */
char *fa_kernel_cache_dir(const char *kind);

typedef enum fa_kernel_cache_store_result {
    FA_KERNEL_CACHE_STORED = 0,   /* the entry is on disk, complete */
    FA_KERNEL_CACHE_DISABLED = 1, /* FLASHATTN_CACHE_DIR=off, or no directory can be named */
    FA_KERNEL_CACHE_FAILED = 2,   /* an invalid kind, or a directory, file or memory error */
} fa_kernel_cache_store_result;

/* Stores len bytes as the entry of kind and key, replacing any entry of that name at once (a
 * concurrent load gets the old entry or the new one, whole). Callers may ignore the result. */
fa_kernel_cache_store_result fa_kernel_cache_store(const char *kind, const fa_kernel_key *key, const void *bytes,
                                                   size_t len);

#endif
