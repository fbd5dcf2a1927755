/* fuzz_npy.c: fuzz target for the flashattn tool's .npy reader (tools/npy.c). The input bytes are
 * a file's contents: they are written to a private temporary file and read with npy_read (the
 * reader has no in-memory entry point; a regular file is what every caller passes). Properties:
 * npy_read returns 0 or -1 and never crashes or touches memory outside its buffers (ASan, UBSan);
 * a failure leaves the array empty and a non-empty message naming the file; a success gives a
 * consistent array (ndim, count = product of the shape, bytes = count * element size), which
 * npy_write_stream writes and npy_read reads back identically. */
#include "npy.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_dir[64];

static void remove_dir(void)
{
    char path[128];
    snprintf(path, sizeof path, "%s/in.npy", g_dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/out.npy", g_dir);
    unlink(path);
    rmdir(g_dir);
}

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "fuzz_npy: property violated: %s\n", what);
        abort();
    }
}

static int array_is_empty(const npy_array *a)
{
    static const npy_array zero;
    return memcmp(a, &zero, sizeof zero) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_dir[0]) {
        /* memory-backed /dev/shm where there is one: a file per input on a busy disk is slow */
        const char *tmp = getenv("TMPDIR");
        if (!tmp || strlen(tmp) >= 40)
            tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        snprintf(g_dir, sizeof g_dir, "%s/fuzz-npy-XXXXXX", tmp);
        if (!mkdtemp(g_dir)) {
            perror("fuzz_npy: mkdtemp");
            abort();
        }
        atexit(remove_dir);
    }
    char in_path[128], out_path[128];
    snprintf(in_path, sizeof in_path, "%s/in.npy", g_dir);
    snprintf(out_path, sizeof out_path, "%s/out.npy", g_dir);
    FILE *f = fopen(in_path, "wb");
    check(f != NULL, "the temporary input file can be created");
    check(fwrite(data, 1, size, f) == size && fclose(f) == 0, "the temporary input file can be written");

    npy_array a;
    char err[512];
    memset(&a, 0x5a, sizeof a);
    err[0] = '\0';
    int rc = npy_read(in_path, &a, err, sizeof err);
    check(rc == 0 || rc == -1, "npy_read returns 0 or -1");
    if (rc != 0) {
        check(array_is_empty(&a), "a failed read leaves the array empty");
        check(strncmp(err, in_path, strlen(in_path)) == 0, "a failed read's message starts with the path");
        npy_free(&a);
        return 0;
    }
    check(a.ndim >= 0 && a.ndim <= NPY_MAX_NDIM, "ndim in range");
    check(a.data != NULL, "data is not NULL after a successful read");
    int64_t count = 1;
    for (int i = 0; i < a.ndim; ++i) {
        check(a.shape[i] >= 0, "dimensions are not negative");
        check(!__builtin_mul_overflow(count, a.shape[i], &count), "the count does not overflow");
    }
    check(count == a.count, "count is the product of the shape");
    check((uint64_t)a.bytes == (uint64_t)a.count * npy_type_size(a.type), "bytes is count times the element size");
    check(a.bytes <= size, "the data fits in the file");
    if (a.bytes) /* every data byte is readable (ASan checks the extent) */
        check(memcmp(a.data, data + size - a.bytes, a.bytes) == 0, "the data are the file's last bytes");

    /* round trip: what was read, written and read again is the same array */
    char werr[512];
    FILE *out = fopen(out_path, "wb");
    check(out != NULL, "the output file opens");
    check(npy_write_stream(out, out_path, a.type, a.ndim, a.shape, a.data, werr, sizeof werr) == 0,
          "npy_write_stream succeeds");
    check(fclose(out) == 0, "the output file closes");
    npy_array b;
    check(npy_read(out_path, &b, werr, sizeof werr) == 0, "the written file reads back");
    check(b.type == a.type && b.ndim == a.ndim && b.count == a.count && b.bytes == a.bytes, "round trip: header");
    check(memcmp(b.shape, a.shape, sizeof(int64_t) * (size_t)a.ndim) == 0, "round trip: shape");
    check(a.bytes == 0 || memcmp(b.data, a.data, a.bytes) == 0, "round trip: data");
    npy_free(&b);
    npy_free(&a);
    return 0;
}
