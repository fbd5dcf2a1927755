/* main.c: the flashattn command-line tool: the command word picks a subcommand from `commands`,
 * the one table that both dispatches and lists them in --help. `info` lists backends, devices,
 * capabilities and plans (cmd_info.c); `run` times fa_forward / fa_backward on random inputs and
 * can check them against the float64 reference (cmd_run.c, run_check.c); `fwd` and `bwd` run
 * attention on .npy files (cmd_fwd.c, cmd_bwd.c, npy_job.c); `iomodel` prints the paper's IO model
 * (cmd_iomodel.c); `warmup` runs fa_warmup over a list of shapes (cmd_warmup.c). The exit statuses
 * are in cli.h. */
#include "cli.h"

#include <stdio.h>
#include <string.h>

static const struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary; /* one line of --help */
} commands[] = {
    {"info", cmd_info, "library version, backends, devices, capabilities, the default backend, example plans"},
    {"run", cmd_run, "time fa_forward/fa_backward on random inputs (--check: compare with float64)"},
    {"fwd", cmd_fwd, "attention on .npy files: Q, K, V -> O (and LSE); --k-cache: over a KV cache"},
    {"bwd", cmd_bwd, "gradients on .npy files: Q, K, V, O, LSE, dO -> dQ, dK, dV"},
    {"iomodel", cmd_iomodel, "device-memory traffic of the forward pass under the paper's IO model"},
    {"warmup", cmd_warmup, "compile (or load from the disk cache) the kernels of a list of shapes ahead of use"},
};
#define COMMAND_COUNT (sizeof commands / sizeof commands[0])

static void print_main_help(FILE *f)
{
    fputs("Usage: flashattn COMMAND [options]\n"
          "       flashattn COMMAND --help | flashattn help [COMMAND] | flashattn --version\n"
          "\n"
          "Commands:\n",
          f);
    for (size_t i = 0; i < COMMAND_COUNT; ++i)
        fprintf(f, "  %-9s %s\n", commands[i].name, commands[i].summary);
    fputs("\n"
          "'flashattn COMMAND --help' describes each. Options are GNU style: '--name VALUE' or\n"
          "'--name=VALUE' (two-value options such as --window L R also take '--window=L,R'); names are\n"
          "never abbreviated. FLASHATTN_BACKEND picks the default backend and FLASHATTN_NUM_THREADS the\n"
          "CPU backend's threads. Every command takes --debug: a library error then also shows the file\n"
          "and line in the library that raised it.\n"
          "\n" EXIT_STATUS_HELP,
          f);
}

/* "info, run, fwd, bwd, iomodel or warmup" */
static void command_list(char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < COMMAND_COUNT && used < len; ++i) {
        int n = snprintf(buf + used, len - used, "%s%s", i == 0 ? "" : i + 1 == COMMAND_COUNT ? " or " : ", ",
                         commands[i].name);
        if (n < 0)
            break;
        used += (size_t)n;
    }
}

static const struct command *find_command(const char *name)
{
    for (size_t i = 0; i < COMMAND_COUNT; ++i)
        if (strcmp(commands[i].name, name) == 0)
            return &commands[i];
    return NULL;
}

int main(int argc, char **argv)
{
    char names[256];
    command_list(names, sizeof names);
    if (argc < 2) {
        print_main_help(stderr);
        fputc('\n', stderr);
        return usage_error(NULL, "missing COMMAND (%s)", names);
    }
    const char *cmd = argv[1];
    int rc;
    if (strcmp(cmd, "help") == 0 && argc >= 3) { /* `help run` is `run --help` */
        const struct command *c = find_command(argv[2]);
        if (!c)
            return usage_error(NULL, "unknown command '%s' (%s)", argv[2], names);
        char help_word[] = "--help";
        char *help_argv[] = {argv[2], help_word, NULL};
        rc = c->run(2, help_argv);
    } else if (is_help(cmd) || strcmp(cmd, "help") == 0) {
        print_main_help(stdout);
        rc = 0;
    } else if (strcmp(cmd, "--version") == 0) {
        printf("flashattn %s\n", fa_version());
        rc = 0;
    } else {
        const struct command *c = find_command(cmd);
        if (!c)
            return usage_error(NULL, "unknown command '%s' (%s)", cmd, names);
        rc = c->run(argc - 1, argv + 1);
    }
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "flashattn: cannot write to standard output\n");
        if (rc == 0)
            rc = EXIT_IO;
    }
    return rc;
}
