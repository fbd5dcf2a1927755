/* outputs.h: how the flashattn tool replaces its output files without losing data.
 *
 * Every output of a command is checked before anything is computed: the path must be absent or a
 * regular file (a symbolic link counts as the file it points to, and is written through: the link
 * stays and its target is replaced); its directory must exist and be writable, an existing file
 * writable too; no two outputs may name one file (the same path, another spelling of it, a link or
 * a hard link) and no output may name an input. After the computation each output is written to a
 * temporary created next to its target with O_CREAT | O_EXCL, and only when all of them were
 * written are they renamed onto their targets. On any failure the temporaries are removed: a user's
 * path is never removed or truncated. */
#ifndef FA_TOOLS_OUTPUTS_H
#define FA_TOOLS_OUTPUTS_H

#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

#ifndef PATH_MAX
#define PATH_MAX 4096
#endif

typedef struct output_file {
    const char *option;      /* "--out", for messages */
    const char *path;        /* as given on the command line */
    char target[PATH_MAX];   /* the file replaced: path, or the file a symbolic link path resolves to */
    char dir[PATH_MAX];      /* target's directory */
    char canonical[PATH_MAX]; /* the directory's real path + '/' + the target's name */
    char temp[PATH_MAX];     /* the temporary being written, "" when none exists */
    int exists;
    dev_t dev;               /* identity of an existing target */
    ino_t ino;
    mode_t mode;             /* the replacement's permissions: the existing file's, else 0666 & ~umask */
} output_file;

/* Checks outs[0..n) as described above against each other and against the input paths
 * (inputs[0..n_inputs), NULL entries skipped, input_options naming them in messages). Returns 0,
 * or -1 with a message in err. */
int outputs_check(output_file *outs, int n, const char *const *inputs, const char *const *input_options,
                  int n_inputs, char *err, size_t err_len);

/* Creates out's temporary and returns it open for writing, or NULL with a message in err. */
FILE *outputs_open_temp(output_file *out, char *err, size_t err_len);

/* Closes a stream from outputs_open_temp; 0, or -1 with a message (a late write error). */
int outputs_close_temp(output_file *out, FILE *f, char *err, size_t err_len);

/* Renames every temporary onto its target, in order. Returns 0, or -1 with a message in err after
 * removing the temporaries not yet renamed. */
int outputs_commit(output_file *outs, int n, char *err, size_t err_len);

/* Removes the temporaries that exist (never a target). */
void outputs_discard(output_file *outs, int n);

#endif /* FA_TOOLS_OUTPUTS_H */
