/* npy_job.h: what `flashattn fwd` and `flashattn bwd` share (tools/npy_job.c): their options, the
 * output paths checked before anything is read (tools/outputs.h), the .npy inputs read and checked
 * against each other, the context with the inputs in its memory, and the outputs written all or
 * nothing. A command runs file_job_parse, file_job_load, file_job_open, its own library call with
 * file_job_tensor, file_job_write_outputs, and always file_job_release. */
#ifndef FA_TOOL_NPY_JOB_H
#define FA_TOOL_NPY_JOB_H

#include "flashattn.h"
#include "npy.h"
#include "outputs.h"
#include "tensors.h"

/* The arrays fwd/bwd read, by role; the option that names each is kept for messages. */
enum {
    IN_Q,
    IN_K,
    IN_V,
    IN_O,
    IN_LSE,
    IN_DO,
    IN_CU_Q,
    IN_CU_K,
    IN_MASK,
    IN_ALIBI,
    IN_SINK,
    IN_COUNT
};
enum { OUT_O, OUT_LSE, OUT_DQ, OUT_DK, OUT_DV, OUT_DSINK, OUT_COUNT };

typedef struct file_job {
    /* the command line (file_job_parse) */
    int backward;
    const char *cmd;
    const char *in_path[IN_COUNT];
    const char *out_path[OUT_COUNT];
    int have_block_size;
    int64_t block_q, block_k;
    int bf16;
    const char *backend;
    int device, threads;
    fa_options opts;
    /* the checked inputs (file_job_load) */
    npy_array in[IN_COUNT];
    output_file outs[OUT_COUNT]; /* the outputs given, in role order */
    int out_role[OUT_COUNT], n_out;
    fa_dtype dtype;
    int varlen, nd;              /* nd: 4 dense, 3 packed */
    int64_t o_shape[4];          /* Q's shape with V's head dim d_v: O and dO */
    int64_t sink_shape[1];       /* [heads_q]: the sink logits and their gradient */
    fa_varlen vl;                /* cu_seqlens pointers set by file_job_open */
    int64_t lse_shape[3];
    int lse_nd;
    int64_t alibi_stride;
    fa_block_mask mask;
    int have_mask;
    /* the library (file_job_open) */
    fa_context *ctx;
    device_buffer dev[IN_COUNT], out[OUT_COUNT];
    size_t lse_bytes;
    void *host_out[OUT_COUNT];
} file_job;

/* A zeroed job for fwd (backward 0) or bwd; NULL when out of memory. */
file_job *file_job_new(int backward);
/* The options; *help is set for --help. 0 or EXIT_USAGE after a message. */
int file_job_parse(file_job *j, int argc, char **argv, int *help);
/* The output paths checked, then every input read and checked against the others (shapes,
 * dtypes, cu_seqlens, block mask, ALiBi slopes, sink logits, the score range). 0 or EXIT_USAGE. */
int file_job_load(file_job *j);
/* The context (with --threads), the inputs uploaded into its memory and j->opts / j->vl pointing
 * at them, the outputs allocated. 0, or the exit status after a message. */
int file_job_open(file_job *j);
/* A tensor of role in (IN_*) or, with is_output, out (OUT_*): the .npy shape of Q for Q and dQ,
 * of K for K and dK, of V for V and dV, Q's with V's head dim d_v for O and dO, the LSE shape for
 * LSE, [heads_q] float32 for dsink. */
fa_tensor file_job_tensor(const file_job *j, int role, int is_output);
/* Every output downloaded into its temporary, all renamed into place only when all were written.
 * 0, or after a message EXIT_IO when a file could not be written, EXIT_LIBRARY when out of memory
 * or the download failed. */
int file_job_write_outputs(file_job *j);
/* Frees everything and removes any temporary left; j may be NULL. */
void file_job_release(file_job *j);

/* The rules for output files and the exit status, for fwd's and bwd's help. */
#define OUTPUT_FILES_HELP                                                                                   \
    "\n"                                                                                                     \
    "Output files are checked before anything is computed: each must be absent or a regular file\n"         \
    "(writable) in an existing, writable directory. A symbolic link is written through: the link\n"          \
    "stays and the file it points to is replaced (a link to a missing file is refused). Two outputs\n"       \
    "naming one file, or an output naming an input (the same path, a link or a hard link), are\n"           \
    "refused. Every output is written to a temporary '.NAME.XXXXXX' beside it, and all are renamed\n"       \
    "into place only when all were written: a failure before then removes the temporaries and\n"           \
    "changes no existing file (a process killed while writing leaves its temporary behind). A\n"           \
    "replaced file keeps its permissions; it is a new file, so its other hard links keep the old\n"        \
    "contents.\n"                                                                                           \
    "\n" EXIT_STATUS_HELP

#endif
