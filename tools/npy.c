/* npy.c: a strict reader and a writer of NumPy .npy files. The header is parsed as the small Python
 * dict literal the format defines, and no size in it is trusted: the header length, every shape
 * entry and the product of the shape are checked for overflow and against the file's real size
 * before any data is read. */
#include "npy.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* "\x93NUMPY", major, minor, then a 2-byte (v1) or 4-byte (v2, v3) little-endian header length. */
static const unsigned char npy_magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

/* NumPy refuses headers above 10000 bytes by default; a file with one this large is not something
 * this tool wrote or needs to read, and the bound keeps a corrupt length from allocating gigabytes. */
#define NPY_MAX_HEADER_LEN (1u << 20)

static const struct {
    const char *descr;
    npy_type type;
    size_t size;
} npy_known_types[] = {
    {"<f4", NPY_TYPE_F32, 4}, {"<f2", NPY_TYPE_F16, 2}, {"<u2", NPY_TYPE_U16, 2},
    {"<i4", NPY_TYPE_I32, 4}, {"|u1", NPY_TYPE_U8, 1},  {"|b1", NPY_TYPE_BOOL, 1},
    /* one-byte types have no byte order; some writers say '<' or '=' anyway */
    {"<u1", NPY_TYPE_U8, 1},  {"=u1", NPY_TYPE_U8, 1},  {"<b1", NPY_TYPE_BOOL, 1},
    {"=b1", NPY_TYPE_BOOL, 1},
};

const char *npy_type_descr(npy_type t)
{
    for (size_t i = 0; i < sizeof npy_known_types / sizeof npy_known_types[0]; ++i)
        if (npy_known_types[i].type == t)
            return npy_known_types[i].descr;
    return "?";
}

size_t npy_type_size(npy_type t)
{
    for (size_t i = 0; i < sizeof npy_known_types / sizeof npy_known_types[0]; ++i)
        if (npy_known_types[i].type == t)
            return npy_known_types[i].size;
    return 0;
}

static void set_error(char *err, size_t err_len, const char *path, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

static void set_error(char *err, size_t err_len, const char *path, const char *fmt, ...)
{
    if (!err || err_len == 0)
        return;
    int n = snprintf(err, err_len, "%s: ", path);
    if (n < 0 || (size_t)n >= err_len)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + n, err_len - (size_t)n, fmt, ap);
    va_end(ap);
}

void npy_format_shape(int ndim, const int64_t *shape, char *buf, size_t len)
{
    size_t used = 0;
    if (len == 0)
        return;
    buf[0] = '\0';
    int n = snprintf(buf, len, "(");
    if (n < 0 || (size_t)n >= len)
        return;
    used = (size_t)n;
    for (int i = 0; i < ndim; ++i) {
        n = snprintf(buf + used, len - used, "%s%lld", i ? ", " : "", (long long)shape[i]);
        if (n < 0 || (size_t)n >= len - used)
            return;
        used += (size_t)n;
    }
    snprintf(buf + used, len - used, ndim == 1 ? ",)" : ")");
}

/* Header text goes into messages: anything but printable ASCII becomes '?' so a corrupt file
 * cannot put control bytes or invalid UTF-8 on the user's terminal. */
static void printable_copy(char *dst, size_t dst_len, const char *src)
{
    size_t n = 0;
    for (; src[n] && n + 1 < dst_len; ++n)
        dst[n] = (src[n] >= 0x20 && src[n] < 0x7f) ? src[n] : '?';
    dst[n] = '\0';
}

/* ---------------------------------------------------------------- header dict parser */

typedef struct header_cursor {
    const char *text;
    size_t len, pos;
} header_cursor;

static void skip_space(header_cursor *c)
{
    while (c->pos < c->len && (c->text[c->pos] == ' ' || c->text[c->pos] == '\t' || c->text[c->pos] == '\n' ||
                               c->text[c->pos] == '\r'))
        c->pos++;
}

static int accept_char(header_cursor *c, char ch)
{
    skip_space(c);
    if (c->pos < c->len && c->text[c->pos] == ch) {
        c->pos++;
        return 1;
    }
    return 0;
}

/* A quoted Python string without escapes (none of the format's keys or values have any). */
static int parse_string(header_cursor *c, char *out, size_t out_len)
{
    skip_space(c);
    if (c->pos >= c->len || (c->text[c->pos] != '\'' && c->text[c->pos] != '"'))
        return 0;
    char quote = c->text[c->pos++];
    size_t n = 0;
    while (c->pos < c->len && c->text[c->pos] != quote) {
        if (c->text[c->pos] == '\\' || n + 1 >= out_len)
            return 0;
        out[n++] = c->text[c->pos++];
    }
    if (c->pos >= c->len)
        return 0;
    c->pos++;
    out[n] = '\0';
    return 1;
}

static int parse_word(header_cursor *c, const char *word)
{
    skip_space(c);
    size_t n = strlen(word);
    if (c->len - c->pos >= n && memcmp(c->text + c->pos, word, n) == 0) {
        c->pos += n;
        return 1;
    }
    return 0;
}

/* A non-negative decimal integer (Python 2 era files may append 'L'). */
static int parse_dim(header_cursor *c, int64_t *out)
{
    skip_space(c);
    int64_t v = 0;
    size_t start = c->pos;
    while (c->pos < c->len && c->text[c->pos] >= '0' && c->text[c->pos] <= '9') {
        int digit = c->text[c->pos] - '0';
        if (v > (INT64_MAX - digit) / 10)
            return 0;
        v = v * 10 + digit;
        c->pos++;
    }
    if (c->pos == start)
        return 0;
    if (c->pos < c->len && c->text[c->pos] == 'L')
        c->pos++;
    *out = v;
    return 1;
}

typedef struct npy_header {
    char descr[32];
    int fortran_order;
    int ndim;
    int64_t shape[NPY_MAX_NDIM];
} npy_header;

/* Returns 0 or -1 with a message. */
static int parse_header(const char *path, const char *text, size_t len, npy_header *h, char *err, size_t err_len)
{
    header_cursor c = {text, len, 0};
    int have_descr = 0, have_order = 0, have_shape = 0;
    if (!accept_char(&c, '{')) {
        set_error(err, err_len, path, "not a valid .npy header: it does not start with a dict");
        return -1;
    }
    for (;;) {
        if (accept_char(&c, '}'))
            break;
        char key[32];
        if (!parse_string(&c, key, sizeof key) || !accept_char(&c, ':')) {
            set_error(err, err_len, path, "not a valid .npy header: malformed dict near byte %zu", c.pos);
            return -1;
        }
        if (strcmp(key, "descr") == 0 && !have_descr) {
            if (!parse_string(&c, h->descr, sizeof h->descr)) {
                set_error(err, err_len, path, "not a valid .npy header: 'descr' is not a simple type string "
                                              "(structured arrays are not supported)");
                return -1;
            }
            have_descr = 1;
        } else if (strcmp(key, "fortran_order") == 0 && !have_order) {
            if (parse_word(&c, "True"))
                h->fortran_order = 1;
            else if (parse_word(&c, "False"))
                h->fortran_order = 0;
            else {
                set_error(err, err_len, path, "not a valid .npy header: 'fortran_order' is not True or False");
                return -1;
            }
            have_order = 1;
        } else if (strcmp(key, "shape") == 0 && !have_shape) {
            if (!accept_char(&c, '(')) {
                set_error(err, err_len, path, "not a valid .npy header: 'shape' is not a tuple");
                return -1;
            }
            h->ndim = 0;
            for (;;) {
                if (accept_char(&c, ')'))
                    break;
                if (h->ndim >= NPY_MAX_NDIM) {
                    set_error(err, err_len, path, "arrays of more than %d dimensions are not supported",
                              NPY_MAX_NDIM);
                    return -1;
                }
                if (!parse_dim(&c, &h->shape[h->ndim])) {
                    set_error(err, err_len, path,
                              "not a valid .npy header: shape entry %d is not a non-negative integer below 2^63",
                              h->ndim);
                    return -1;
                }
                h->ndim++;
                if (accept_char(&c, ')'))
                    break;
                if (!accept_char(&c, ',')) {
                    set_error(err, err_len, path, "not a valid .npy header: malformed shape tuple");
                    return -1;
                }
            }
            have_shape = 1;
        } else {
            char shown[sizeof key];
            printable_copy(shown, sizeof shown, key);
            set_error(err, err_len, path, "not a valid .npy header: unexpected or repeated key '%s'", shown);
            return -1;
        }
        if (accept_char(&c, '}'))
            break;
        if (!accept_char(&c, ',')) {
            set_error(err, err_len, path, "not a valid .npy header: expected ',' or '}' near byte %zu", c.pos);
            return -1;
        }
    }
    skip_space(&c);
    while (c.pos < c.len && c.text[c.pos] == '\0') /* some writers pad with NULs */
        c.pos++;
    if (c.pos != c.len) {
        set_error(err, err_len, path, "not a valid .npy header: unexpected text after the dict");
        return -1;
    }
    if (!have_descr || !have_order || !have_shape) {
        set_error(err, err_len, path, "not a valid .npy header: missing key '%s'",
                  !have_descr ? "descr" : !have_order ? "fortran_order" : "shape");
        return -1;
    }
    return 0;
}

static int lookup_type(const char *descr, npy_type *type)
{
    for (size_t i = 0; i < sizeof npy_known_types / sizeof npy_known_types[0]; ++i)
        if (strcmp(npy_known_types[i].descr, descr) == 0) {
            *type = npy_known_types[i].type;
            return 1;
        }
    return 0;
}

/* ---------------------------------------------------------------- reading */

static uint32_t read_le32(const unsigned char *b)
{
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

void npy_free(npy_array *arr)
{
    if (!arr)
        return;
    free(arr->data);
    memset(arr, 0, sizeof *arr);
}

const char *npy_file_kind(mode_t mode)
{
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISFIFO(mode))
        return "a FIFO (named pipe)";
    if (S_ISCHR(mode))
        return "a character device";
    if (S_ISBLK(mode))
        return "a block device";
    if (S_ISSOCK(mode))
        return "a socket";
    return "not a regular file";
}

/* Opens a regular file for reading without ever blocking: a FIFO or a device would make a plain
 * open (or fopen) wait for a writer or for the device, so the file is opened with O_NONBLOCK,
 * checked to be a regular file with fstat, and only then switched back to blocking reads. */
static FILE *open_regular_file(const char *path, struct stat *st, char *err, size_t err_len)
{
    /* a path seen to be something else is not opened at all (opening some devices acts on them);
     * the fstat below closes the race with a path replaced in between */
    if (stat(path, st) == 0 && !S_ISREG(st->st_mode)) {
        set_error(err, err_len, path, "is %s, not a regular file: inputs must be .npy files", npy_file_kind(st->st_mode));
        return NULL;
    }
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        set_error(err, err_len, path, "cannot open: %s", strerror(errno));
        return NULL;
    }
    if (fstat(fd, st) != 0) {
        set_error(err, err_len, path, "cannot stat: %s", strerror(errno));
        close(fd);
        return NULL;
    }
    if (!S_ISREG(st->st_mode)) {
        set_error(err, err_len, path, "is %s, not a regular file: inputs must be .npy files", npy_file_kind(st->st_mode));
        close(fd);
        return NULL;
    }
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
        set_error(err, err_len, path, "cannot set blocking reads: %s", strerror(errno));
        close(fd);
        return NULL;
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        set_error(err, err_len, path, "cannot open: %s", strerror(errno));
        close(fd);
    }
    return f;
}

int npy_read(const char *path, npy_array *arr, char *err, size_t err_len)
{
    return npy_read_accepting(path, NULL, arr, err, err_len);
}

int npy_read_accepting(const char *path, const char *accepts, npy_array *arr, char *err, size_t err_len)
{
    memset(arr, 0, sizeof *arr);
    struct stat st;
    FILE *f = open_regular_file(path, &st, err, err_len);
    if (!f)
        return -1;
    char *header = NULL;
    int result = -1;
    uint64_t file_size = (uint64_t)st.st_size;

    unsigned char pre[12];
    if (file_size < 10 || fread(pre, 1, 10, f) != 10) {
        set_error(err, err_len, path, "not a .npy file: shorter than the 10-byte preamble");
        goto done;
    }
    if (memcmp(pre, npy_magic, sizeof npy_magic) != 0) {
        set_error(err, err_len, path, "not a .npy file: the magic string \\x93NUMPY is missing");
        goto done;
    }
    int major = pre[6], minor = pre[7];
    uint64_t preamble, header_len;
    if (major == 1) {
        preamble = 10;
        header_len = (uint64_t)pre[8] | (uint64_t)pre[9] << 8;
    } else if (major == 2 || major == 3) {
        if (file_size < 12 || fread(pre + 10, 1, 2, f) != 2) {
            set_error(err, err_len, path, "truncated: the version %d.%d preamble needs 12 bytes", major, minor);
            goto done;
        }
        preamble = 12;
        header_len = read_le32(pre + 8);
    } else {
        set_error(err, err_len, path, "unsupported .npy format version %d.%d (1.0, 2.0 and 3.0 are read)", major,
                  minor);
        goto done;
    }
    if (header_len > NPY_MAX_HEADER_LEN) {
        set_error(err, err_len, path, "header length %llu is implausibly large", (unsigned long long)header_len);
        goto done;
    }
    if (header_len > file_size - preamble) {
        set_error(err, err_len, path, "truncated: the header claims %llu bytes but the file has only %llu after the "
                  "preamble", (unsigned long long)header_len, (unsigned long long)(file_size - preamble));
        goto done;
    }
    header = malloc((size_t)header_len + 1);
    if (!header) {
        set_error(err, err_len, path, "out of memory reading the header");
        goto done;
    }
    if (fread(header, 1, (size_t)header_len, f) != (size_t)header_len) {
        set_error(err, err_len, path, "read error in the header");
        goto done;
    }
    header[header_len] = '\0';

    npy_header h;
    memset(&h, 0, sizeof h);
    if (parse_header(path, header, (size_t)header_len, &h, err, err_len) != 0)
        goto done;
    npy_type type;
    if (!lookup_type(h.descr, &type)) {
        const char *why = "";
        if (h.descr[0] == '>')
            why = " (big-endian data is not supported: convert with a.astype(a.dtype.newbyteorder('<')))";
        else if (strcmp(h.descr, "<f8") == 0)
            why = " (float64: convert with .astype(numpy.float32) first)";
        char shown[sizeof h.descr];
        printable_copy(shown, sizeof shown, h.descr);
        set_error(err, err_len, path, "unsupported dtype '%s'%s; %s", shown, why,
                  accepts ? accepts : "supported: '<f4', '<f2', '<u2', '<i4', '|u1', '|b1'");
        goto done;
    }
    if (h.fortran_order) {
        set_error(err, err_len, path,
                  "fortran_order is True: only C-order arrays are supported (save numpy.ascontiguousarray(a))");
        goto done;
    }
    size_t elem = npy_type_size(type);
    int64_t count = 1;
    for (int i = 0; i < h.ndim; ++i)
        if (__builtin_mul_overflow(count, h.shape[i], &count)) {
            set_error(err, err_len, path, "the shape's element count overflows 64 bits");
            goto done;
        }
    uint64_t data_bytes;
    if (__builtin_mul_overflow((uint64_t)count, (uint64_t)elem, &data_bytes) || data_bytes > (uint64_t)SIZE_MAX) {
        set_error(err, err_len, path, "the data size overflows");
        goto done;
    }
    uint64_t available = file_size - preamble - header_len;
    char shape_text[256];
    npy_format_shape(h.ndim, h.shape, shape_text, sizeof shape_text);
    if (available < data_bytes) {
        set_error(err, err_len, path, "truncated: shape %s of '%s' needs %llu data bytes, the file has %llu",
                  shape_text, h.descr, (unsigned long long)data_bytes, (unsigned long long)available);
        goto done;
    }
    if (available > data_bytes) {
        set_error(err, err_len, path, "%llu unexpected bytes after the data of shape %s '%s'",
                  (unsigned long long)(available - data_bytes), shape_text, h.descr);
        goto done;
    }
    void *data = malloc(data_bytes ? (size_t)data_bytes : 1);
    if (!data) {
        set_error(err, err_len, path, "out of memory for %llu data bytes", (unsigned long long)data_bytes);
        goto done;
    }
    if (data_bytes && fread(data, 1, (size_t)data_bytes, f) != (size_t)data_bytes) {
        free(data);
        set_error(err, err_len, path, "read error in the data");
        goto done;
    }
    arr->type = type;
    arr->ndim = h.ndim;
    memcpy(arr->shape, h.shape, sizeof h.shape);
    arr->count = count;
    arr->bytes = (size_t)data_bytes;
    arr->data = data;
    result = 0;
done:
    free(header);
    fclose(f);
    return result;
}

/* ---------------------------------------------------------------- writing */

int npy_write_stream(FILE *f, const char *path, npy_type type, int ndim, const int64_t *shape, const void *data,
                     char *err, size_t err_len)
{
    if (ndim < 0 || ndim > NPY_MAX_NDIM) {
        set_error(err, err_len, path, "cannot write %d dimensions", ndim);
        return -1;
    }
    int64_t count = 1;
    for (int i = 0; i < ndim; ++i)
        if (shape[i] < 0 || __builtin_mul_overflow(count, shape[i], &count)) {
            set_error(err, err_len, path, "invalid shape to write");
            return -1;
        }
    uint64_t data_bytes;
    if (__builtin_mul_overflow((uint64_t)count, (uint64_t)npy_type_size(type), &data_bytes) ||
        data_bytes > (uint64_t)SIZE_MAX) {
        set_error(err, err_len, path, "data size overflows");
        return -1;
    }
    char shape_text[256];
    npy_format_shape(ndim, shape, shape_text, sizeof shape_text);
    char dict[400];
    int dict_len = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                            npy_type_descr(type), shape_text);
    if (dict_len < 0 || (size_t)dict_len >= sizeof dict) {
        set_error(err, err_len, path, "header too long");
        return -1;
    }
    /* The preamble plus header is padded with spaces to a multiple of 64 and ends in '\n', so the
     * data starts aligned. The dict is at most a few hundred bytes: version 1.0 always suffices. */
    size_t preamble = 10;
    size_t total = preamble + (size_t)dict_len + 1;
    total = (total + 63) / 64 * 64;
    size_t header_len = total - preamble;
    unsigned char head[512];
    memcpy(head, npy_magic, sizeof npy_magic);
    head[6] = 1;
    head[7] = 0;
    head[8] = (unsigned char)(header_len & 0xff);
    head[9] = (unsigned char)(header_len >> 8);
    memcpy(head + preamble, dict, (size_t)dict_len);
    memset(head + preamble + dict_len, ' ', header_len - (size_t)dict_len - 1);
    head[total - 1] = '\n';

    int ok = fwrite(head, 1, total, f) == total;
    if (ok && data_bytes)
        ok = fwrite(data, 1, (size_t)data_bytes, f) == (size_t)data_bytes;
    if (ok && fflush(f) != 0)
        ok = 0;
    if (!ok) {
        set_error(err, err_len, path, "write failed: %s", strerror(errno));
        return -1;
    }
    return 0;
}
