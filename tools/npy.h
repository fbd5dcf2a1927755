/* npy.h: reading and writing NumPy .npy files (format versions 1.0, 2.0 and 3.0) for the flashattn
 * command-line tool. Only what the tool exchanges: little-endian, C-order arrays of a few element
 * types, at most NPY_MAX_NDIM dimensions. Every failure comes back as a message naming the file. */
#ifndef FA_TOOLS_NPY_H
#define FA_TOOLS_NPY_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <sys/types.h>

#define NPY_MAX_NDIM 8

typedef enum npy_type {
    NPY_TYPE_F32 = 0, /* '<f4' */
    NPY_TYPE_F16,     /* '<f2' */
    NPY_TYPE_U16,     /* '<u2' (bfloat16 bit patterns travel as this) */
    NPY_TYPE_I32,     /* '<i4' */
    NPY_TYPE_U8,      /* '|u1' */
    NPY_TYPE_BOOL     /* '|b1' */
} npy_type;

typedef struct npy_array {
    npy_type type;
    int ndim;
    int64_t shape[NPY_MAX_NDIM];
    int64_t count; /* product of the shape */
    size_t bytes;  /* count * element size */
    void *data;    /* malloc'd, never NULL after a successful read (even when bytes is 0) */
} npy_array;

/* The descr string NumPy writes for t ("<f4", ...), and the element size in bytes. */
const char *npy_type_descr(npy_type t);
size_t npy_type_size(npy_type t);

/* Reads path into *arr. Only a regular file is read: anything else (a FIFO, a device, a directory)
 * is refused without blocking. Returns 0 on success; on failure -1 with a message (starting with
 * the path) in err, and *arr left empty (safe to npy_free). */
int npy_read(const char *path, npy_array *arr, char *err, size_t err_len);
/* The attention tensors' dtypes, as the tool names them, for messages. */
#define NPY_ATTENTION_DTYPES "fp32 '<f4', fp16 '<f2' or bf16 ('<u2' with --bf16)"

/* npy_read for an option that takes only some dtypes: a dtype the reader does not know is refused
 * with accepts ("the option takes fp32 '<f4' ...") in place of the list of every type it reads. */
int npy_read_accepting(const char *path, const char *accepts, npy_array *arr, char *err, size_t err_len);

/* Writes a C-order array with a version 1.0 header (ndim <= NPY_MAX_NDIM keeps it far below the
 * 64 KiB that version allows) to the open stream f and flushes it; path only names it in
 * messages. Returns 0 or -1 with a message in err. The stream is neither closed nor removed: the
 * caller owns the file (tools/outputs.h writes to a temporary and renames it). */
int npy_write_stream(FILE *f, const char *path, npy_type type, int ndim, const int64_t *shape, const void *data,
                     char *err, size_t err_len);

void npy_free(npy_array *arr);

/* "(2, 3, 4)" into buf, for messages. */
void npy_format_shape(int ndim, const int64_t *shape, char *buf, size_t len);

/* What a path that is not a regular file is ("a FIFO (named pipe)", ...), for messages. */
const char *npy_file_kind(mode_t mode);

#endif /* FA_TOOLS_NPY_H */
