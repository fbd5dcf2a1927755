/* main.c: the flashattn command-line tool: the command word picks a subcommand. `info` lists
 * backends, devices, capabilities and plans (cmd_info.c); `run` times fa_forward / fa_backward on
 * random inputs and can check them against the float64 reference (cmd_run.c, run_check.c); `fwd`
 * and `bwd` run attention on .npy files (cmd_fwd.c, cmd_bwd.c, npy_job.c); `iomodel` prints the
 * paper's IO model (cmd_iomodel.c). The exit statuses are in cli.h. */
#include "cli.h"

#include <stdio.h>
#include <string.h>

static const char main_help[] =
    "Usage: flashattn COMMAND [options]\n"
    "\n"
    "Commands:\n"
    "  info   library version, backends, devices, capabilities, the default backend, example plans\n"
    "  run    time fa_forward/fa_backward on random inputs (--check: compare with float64)\n"
    "  fwd    attention on .npy files: Q, K, V -> O (and LSE)\n"
    "  bwd    gradients on .npy files: Q, K, V, O, LSE, dO -> dQ, dK, dV\n"
    "  iomodel  device-memory traffic of the forward pass under the paper's IO model\n"
    "\n"
    "'flashattn COMMAND --help' describes each. Exit status: 0 success; 1 the library or the device\n"
    "failed (no such backend or device, an unsupported case, out of memory), an output could not be\n"
    "written, or --check exceeded its bound; 2 a usage error: a bad option, an input file missing,\n"
    "unreadable, not a valid .npy or not fitting the others (also when the library rejects it as an\n"
    "invalid argument), or an output path refused before computing. FLASHATTN_BACKEND picks the\n"
    "default backend and FLASHATTN_NUM_THREADS the CPU backend's threads.\n";

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage_error(NULL, "missing COMMAND (info, run, fwd, bwd or iomodel)");
    const char *cmd = argv[1];
    if (is_help(cmd) || strcmp(cmd, "help") == 0) {
        fputs(main_help, stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0) {
        printf("flashattn %s\n", fa_version());
        return 0;
    }
    int rc;
    if (strcmp(cmd, "info") == 0)
        rc = cmd_info(argc - 1, argv + 1);
    else if (strcmp(cmd, "run") == 0)
        rc = cmd_run(argc - 1, argv + 1);
    else if (strcmp(cmd, "fwd") == 0)
        rc = cmd_fwd(argc - 1, argv + 1);
    else if (strcmp(cmd, "bwd") == 0)
        rc = cmd_bwd(argc - 1, argv + 1);
    else if (strcmp(cmd, "iomodel") == 0)
        rc = cmd_iomodel(argc - 1, argv + 1);
    else
        rc = usage_error(NULL, "unknown command '%s' (info, run, fwd, bwd or iomodel)", cmd);
    if (fflush(stdout) != 0 && rc == 0) {
        fprintf(stderr, "flashattn: cannot write to standard output\n");
        rc = EXIT_LIBRARY;
    }
    return rc;
}
