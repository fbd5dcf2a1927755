/* outputs.c: output files checked before the computation, written to temporaries beside their
 * targets and renamed into place only when every output was written (see outputs.h). */
#include "outputs.h"
#include "npy.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void set_error(char *err, size_t err_len, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static void set_error(char *err, size_t err_len, const char *fmt, ...)
{
    if (!err || err_len == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
}

/* Copies src into dst[PATH_MAX]; 0, or -1 when it does not fit. */
static int copy_path(char *dst, const char *src)
{
    size_t n = strlen(src);
    if (n >= PATH_MAX)
        return -1;
    memcpy(dst, src, n + 1);
    return 0;
}

/* The last component of path (path has no trailing '/'). */
static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* path's directory into dir[PATH_MAX]: "." for a bare name, "/" for "/name". */
static void dir_name(const char *path, char *dir)
{
    const char *slash = strrchr(path, '/');
    if (!slash) {
        strcpy(dir, ".");
        return;
    }
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    memcpy(dir, path, n);
    dir[n] = '\0';
}

static mode_t new_file_mode(void)
{
    mode_t mask = umask(022); /* the only way to read the umask; set back at once */
    umask(mask);
    return 0666 & ~mask;
}

/* Resolves and checks one output; fills everything but temp. */
static int check_one(output_file *o, char *err, size_t err_len)
{
    const char *p = o->path;
    size_t len = strlen(p);
    o->temp[0] = '\0';
    o->exists = 0;
    if (len == 0 || p[len - 1] == '/') {
        set_error(err, err_len, "%s '%s': names a directory, not a file", o->option, p);
        return -1;
    }
    if (copy_path(o->target, p) != 0) {
        set_error(err, err_len, "%s: the path is longer than %d bytes", o->option, PATH_MAX - 1);
        return -1;
    }
    struct stat st;
    if (lstat(p, &st) == 0) {
        if (S_ISLNK(st.st_mode)) {
            char resolved[PATH_MAX];
            if (!realpath(p, resolved)) {
                if (errno == ENOENT)
                    set_error(err, err_len,
                              "%s %s: a symbolic link to a missing file; an output written through a link needs "
                              "the file it points to",
                              o->option, p);
                else
                    set_error(err, err_len, "%s %s: cannot resolve the symbolic link: %s", o->option, p,
                              strerror(errno));
                return -1;
            }
            memcpy(o->target, resolved, strlen(resolved) + 1);
            if (stat(o->target, &st) != 0) {
                set_error(err, err_len, "%s %s: cannot check %s: %s", o->option, p, o->target, strerror(errno));
                return -1;
            }
        }
        if (!S_ISREG(st.st_mode)) {
            set_error(err, err_len, "%s %s: is %s, not a regular file; an output must be a regular file or absent",
                      o->option, p, npy_file_kind(st.st_mode));
            return -1;
        }
        if (access(o->target, W_OK) != 0) {
            set_error(err, err_len, "%s %s: the existing file cannot be replaced: %s", o->option, p, strerror(errno));
            return -1;
        }
        o->exists = 1;
        o->dev = st.st_dev;
        o->ino = st.st_ino;
        o->mode = st.st_mode & 07777;
    } else if (errno == ENOENT) {
        o->mode = new_file_mode();
    } else {
        set_error(err, err_len, "%s %s: cannot check the path: %s", o->option, p, strerror(errno));
        return -1;
    }

    dir_name(o->target, o->dir);
    struct stat dst;
    if (stat(o->dir, &dst) != 0) {
        set_error(err, err_len, "%s %s: the directory '%s' %s", o->option, p, o->dir,
                  errno == ENOENT ? "does not exist" : strerror(errno));
        return -1;
    }
    if (!S_ISDIR(dst.st_mode)) {
        set_error(err, err_len, "%s %s: '%s' is not a directory", o->option, p, o->dir);
        return -1;
    }
    if (access(o->dir, W_OK | X_OK) != 0) {
        set_error(err, err_len, "%s %s: cannot create files in the directory '%s': %s", o->option, p, o->dir,
                  strerror(errno));
        return -1;
    }
    char real_dir[PATH_MAX];
    if (!realpath(o->dir, real_dir)) {
        set_error(err, err_len, "%s %s: cannot resolve the directory '%s': %s", o->option, p, o->dir,
                  strerror(errno));
        return -1;
    }
    int n = snprintf(o->canonical, sizeof o->canonical, "%s/%s", strcmp(real_dir, "/") == 0 ? "" : real_dir,
                     base_name(o->target));
    if (n < 0 || (size_t)n >= sizeof o->canonical) {
        set_error(err, err_len, "%s: the path is longer than %d bytes", o->option, PATH_MAX - 1);
        return -1;
    }
    return 0;
}

int outputs_check(output_file *outs, int n, const char *const *inputs, const char *const *input_options,
                  int n_inputs, char *err, size_t err_len)
{
    for (int i = 0; i < n; ++i)
        if (check_one(&outs[i], err, err_len) != 0)
            return -1;
    for (int i = 0; i < n; ++i)
        for (int j = i + 1; j < n; ++j) {
            int same = (outs[i].exists && outs[j].exists && outs[i].dev == outs[j].dev && outs[i].ino == outs[j].ino) ||
                       strcmp(outs[i].canonical, outs[j].canonical) == 0;
            if (same) {
                set_error(err, err_len, "%s %s and %s %s name the same file; every output needs its own",
                          outs[i].option, outs[i].path, outs[j].option, outs[j].path);
                return -1;
            }
        }
    for (int r = 0; r < n_inputs; ++r) {
        struct stat st;
        if (!inputs[r] || stat(inputs[r], &st) != 0) /* a missing input is reported when it is read */
            continue;
        for (int i = 0; i < n; ++i)
            if (outs[i].exists && outs[i].dev == st.st_dev && outs[i].ino == st.st_ino) {
                set_error(err, err_len, "%s %s names the same file as the input %s %s; an output may not replace "
                          "an input", outs[i].option, outs[i].path, input_options[r], inputs[r]);
                return -1;
            }
    }
    return 0;
}

FILE *outputs_open_temp(output_file *o, char *err, size_t err_len)
{
    /* ".NAME.XXXXXX" beside the target; the name is cut so the temporary stays within NAME_MAX */
    int n = snprintf(o->temp, sizeof o->temp, "%s/.%.200s.XXXXXX", o->dir, base_name(o->target));
    if (n < 0 || (size_t)n >= sizeof o->temp) {
        o->temp[0] = '\0';
        set_error(err, err_len, "%s %s: the temporary's path is too long", o->option, o->path);
        return NULL;
    }
    int fd = mkstemp(o->temp); /* O_CREAT | O_EXCL: never an existing file */
    if (fd < 0) {
        set_error(err, err_len, "%s %s: cannot create a temporary file in '%s': %s", o->option, o->path, o->dir,
                  strerror(errno));
        o->temp[0] = '\0';
        return NULL;
    }
    FILE *f = NULL;
    if (fchmod(fd, o->mode) != 0 || !(f = fdopen(fd, "wb"))) {
        set_error(err, err_len, "%s %s: cannot prepare the temporary %s: %s", o->option, o->path, o->temp,
                  strerror(errno));
        close(fd);
        unlink(o->temp);
        o->temp[0] = '\0';
        return NULL;
    }
    return f;
}

int outputs_close_temp(output_file *o, FILE *f, char *err, size_t err_len)
{
    if (fclose(f) != 0) {
        set_error(err, err_len, "%s %s: writing the temporary %s failed: %s", o->option, o->path, o->temp,
                  strerror(errno));
        return -1;
    }
    return 0;
}

void outputs_discard(output_file *outs, int n)
{
    for (int i = 0; i < n; ++i)
        if (outs[i].temp[0]) {
            unlink(outs[i].temp);
            outs[i].temp[0] = '\0';
        }
}

int outputs_commit(output_file *outs, int n, char *err, size_t err_len)
{
    for (int i = 0; i < n; ++i) {
        if (rename(outs[i].temp, outs[i].target) != 0) {
            set_error(err, err_len, "%s %s: cannot move the finished temporary %s into place: %s%s", outs[i].option,
                      outs[i].path, outs[i].temp, strerror(errno),
                      i ? " (the outputs before it were already replaced)" : "");
            outputs_discard(outs + i, n - i);
            return -1;
        }
        outs[i].temp[0] = '\0';
    }
    return 0;
}
