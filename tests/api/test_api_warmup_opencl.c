/* test_api_warmup_opencl.c: fa_warmup on the OpenCL backend fills the program-binary cache
 * (core/kernel_cache.c, kind "opencl") from a cold directory, and a second process warming the
 * same shape loads every program from it: no entry is written again (a store replaces its file
 * through a rename, so a rewritten entry has a new inode). Each warm-up runs in a process of its
 * own (this program run with --warm), so that no program built in memory is reused. Skipped (77)
 * without an OpenCL device. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "flashattn.h"

#define MAX_ENTRIES 64

static char cache_root[256];
static char self_path[4096];

/* The child: one context, the warm-up of one small shape, forward and backward. */
static int warm_once(void)
{
    fa_context *ctx = NULL;
    if (fa_context_create(&ctx, "opencl", 0) != FA_SUCCESS) {
        fprintf(stderr, "opencl context: %s\n", fa_last_error());
        return 1;
    }
    fa_options o = fa_options_default();
    o.causal = 1;
    fa_status st = fa_warmup(ctx, FA_DTYPE_F32, 16, 2, 1, 32, 0, &o, 1);
    if (st != FA_SUCCESS)
        fprintf(stderr, "%s\n", fa_context_last_error(ctx));
    fa_context_destroy(ctx);
    return st == FA_SUCCESS ? 0 : 1;
}

static void run_child(void)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        execl(self_path, self_path, "--warm", (char *)NULL);
        _exit(127);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

typedef struct entry {
    char name[256];
    ino_t inode;
} entry;

/* The cache entries (*.bin) in the opencl directory, with their inodes; the count. */
static int list_entries(entry *out)
{
    char dir[300];
    snprintf(dir, sizeof dir, "%s/opencl", cache_root);
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (!strstr(e->d_name, ".bin"))
            continue;
        assert_true(n < MAX_ENTRIES);
        char path[600];
        snprintf(path, sizeof path, "%s/%.250s", dir, e->d_name);
        struct stat s;
        assert_int_equal(stat(path, &s), 0);
        snprintf(out[n].name, sizeof out[n].name, "%.250s", e->d_name);
        out[n].inode = s.st_ino;
        ++n;
    }
    closedir(d);
    return n;
}

static void test_cold_then_warm(void **state)
{
    (void)state;
    entry before[MAX_ENTRIES], after[MAX_ENTRIES];
    assert_int_equal(list_entries(before), 0); /* a cold cache */
    run_child();
    const int n = list_entries(before);
    print_message("    %d program binaries in %s/opencl after the first warm-up\n", n, cache_root);
    assert_true(n >= 1);
    run_child();
    assert_int_equal(list_entries(after), n);
    for (int i = 0; i < n; ++i) {
        int found = 0;
        for (int j = 0; j < n; ++j)
            if (strcmp(before[i].name, after[j].name) == 0) {
                found = 1;
                if (before[i].inode != after[j].inode)
                    fail_msg("%s was compiled and stored again instead of loaded", before[i].name);
            }
        assert_true(found);
    }
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--warm") == 0)
        return warm_once();
    ssize_t len = readlink("/proc/self/exe", self_path, sizeof self_path - 1);
    if (len <= 0) {
        printf("cannot find this program's path: skipped\n");
        return 77;
    }
    self_path[len] = '\0';
    int n = 0;
    if (fa_device_count("opencl", &n) != FA_SUCCESS || n == 0) {
        printf("opencl backend not compiled in or no OpenCL device: skipped\n");
        return 77;
    }
    /* a fresh cache directory, which the children inherit */
    snprintf(cache_root, sizeof cache_root, "/tmp/flashattn-warmup-cache-%ld", (long)getpid());
    setenv("FLASHATTN_CACHE_DIR", cache_root, 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cold_then_warm),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", cache_root);
    if (system(cmd) != 0)
        printf("could not remove %s\n", cache_root);
    return failed;
}
