/* cli.h: what the flashattn tool's subcommands share: the exit statuses, the messages for usage and
 * library errors, and the option parser (tools/cli.c, over getopt_long). The tool sees the library
 * through include/flashattn.h only. */
#ifndef FA_TOOL_CLI_H
#define FA_TOOL_CLI_H

#include "flashattn.h"

#include <getopt.h>
#include <stddef.h>
#include <stdint.h>

/* The exit statuses of every subcommand, here only; EXIT_STATUS_HELP states them for users (main's
 * --help prints it, docs/tool.md repeats it). */
enum {
    EXIT_CHECK_FAILED = 1, /* run --check: an error exceeds its bound */
    EXIT_USAGE = 2,        /* a bad option or value, an input file missing, unreadable, not a valid
                              .npy or not fitting the others (also what the library rejects as an
                              invalid argument), an output path refused before computing */
    EXIT_LIBRARY = 3,      /* the library or the device could not do it: no such backend or device,
                              an unsupported case, out of memory */
    EXIT_IO = 4            /* an output file or standard output could not be written */
};

#define EXIT_STATUS_HELP                                                                                  \
    "Exit status: 0 success; 1 run --check found an error over its bound; 2 a usage error: a bad\n"       \
    "option or value, an input file missing, unreadable, not a valid .npy or not fitting the others\n"    \
    "(also when the library rejects it as an invalid argument), or an output path refused before\n"      \
    "computing; 3 the library or the device failed (no such backend or device, an unsupported case,\n"  \
    "out of memory); 4 an output could not be written (a file or standard output).\n"

#if defined(__GNUC__)
#define FA_TOOL_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define FA_TOOL_PRINTF(fmt, args)
#endif

/* ---------------------------------------------------------------- messages */

/* A usage error of subcommand cmd (NULL: the command word itself): the message, a hint, and
 * EXIT_USAGE to return. */
int usage_error(const char *cmd, const char *fmt, ...) FA_TOOL_PRINTF(2, 3);
/* A failed library call: the status string and the context's message (with --debug, the library
 * file and line that raised it on a line of its own).
 * An argument the library rejects as invalid (a bad shape, option or size) is the user's input:
 * EXIT_USAGE; anything else is the library's or the device's failure: EXIT_LIBRARY. */
int library_error(const char *cmd, fa_context *ctx, const char *what, fa_status st);
/* fa_context_create leaves no context to hold a message, so this explains the common causes. */
int context_error(const char *cmd, const char *backend, int device, fa_status st);
/* The first line of the last message usage_error, library_error or context_error printed ("" when
 * none), for the "error" member of --json output. */
const char *last_error_message(void);
/* Keeps a message for last_error_message (the callers that print their own message to stderr). */
void remember_error(const char *fmt, ...) FA_TOOL_PRINTF(1, 2);
/* "12.0 MiB" */
void format_bytes(double bytes, char *buf, size_t len);

/* ---------------------------------------------------------------- option parsing */

/* Options are GNU style, parsed by getopt_long: '--name VALUE' or '--name=VALUE'; '-h' is the only
 * short option. Names are never abbreviated (a prefix is refused, so a later option cannot make an
 * old command line ambiguous). Each subcommand lists its options in a struct option table ending
 * in OPTIONS_END; has_arg is no_argument or required_argument, flag NULL and val 0. */
#define HELP_OPTION {"help", no_argument, NULL, 0}
#define OPTIONS_END {NULL, 0, NULL, 0}

/* Every command also takes --debug (next_option handles it; it is in no table): library errors
 * then show where in the library they were raised (fa_context_last_error_location). */

/* Walks argv after the subcommand name. */
typedef struct arg_cursor {
    const char *cmd;
    int argc;
    char **argv;
    const struct option *options;
    const char *opt;   /* the option next_option returned, as "--name" ("--help" for -h) */
    const char *value; /* its value, NULL for a flag */
    char opt_text[64];
} arg_cursor;

/* Starts the walk of argv[1..argc) against options. */
void arg_begin(arg_cursor *a, const char *cmd, int argc, char **argv, const struct option *options);
/* The next option into a->opt / a->value: 1, or 0 after the last one, or EXIT_USAGE after a message
 * (an unknown or abbreviated option, a missing value, a value given to a flag, a word that is not
 * an option). */
int next_option(arg_cursor *a, int *rc);

int is_help(const char *s);
/* The value of the option just returned, as opt (the name for messages) wants it; each returns 0
 * or EXIT_USAGE after a message. */
int take_value(arg_cursor *a, const char *opt, const char **value);
int take_i64(arg_cursor *a, const char *opt, int64_t lo, int64_t hi, int64_t *out);
int take_int(arg_cursor *a, const char *opt, int lo, int hi, int *out);
int take_u64(arg_cursor *a, const char *opt, uint64_t *out);
/* A finite number in [lo, hi] ([lo, hi) when hi_inclusive is 0). */
int take_f64(arg_cursor *a, const char *opt, double lo, double hi, int hi_inclusive, double *out);
/* Two integers in [lo, hi] for options such as --window L R: '--opt A B', '--opt=A B' or
 * '--opt=A,B' (the second word is taken from argv when the value has no comma). */
int take_i64_pair(arg_cursor *a, const char *opt_first, const char *opt_second, int64_t lo, int64_t hi,
                  int64_t *first, int64_t *second);

/* Options shared by run, fwd and bwd that map straight onto fa_options: ATTENTION_OPTIONS in a
 * command's table, parse_attention_option in its loop (*handled is set when a->opt was one). */
#define ATTENTION_OPTIONS                                                                                 \
    {"causal", no_argument, NULL, 0}, {"deterministic", no_argument, NULL, 0},                          \
        {"window", required_argument, NULL, 0}, {"scale", required_argument, NULL, 0},                  \
        {"softcap", required_argument, NULL, 0}, {"dropout", required_argument, NULL, 0},               \
        {"seed", required_argument, NULL, 0}, {"offset", required_argument, NULL, 0}
int parse_attention_option(arg_cursor *a, fa_options *opts, int *handled);
/* fp32 / fp16 / bf16 and their aliases; 0 when s names none. */
int parse_dtype_name(const char *s, fa_dtype *out);

/* ---------------------------------------------------------------- subcommands */

int cmd_info(int argc, char **argv);
int cmd_run(int argc, char **argv);
/* `flashattn run --decode` (run_decode.c), which cmd_run hands over to */
int run_decode(int argc, char **argv);
int cmd_fwd(int argc, char **argv);
/* `flashattn fwd --k-cache ...` (cmd_fwd_kvcache.c), which cmd_fwd hands over to */
int cmd_fwd_kvcache(int argc, char **argv);
int cmd_bwd(int argc, char **argv);
int cmd_iomodel(int argc, char **argv);
int cmd_warmup(int argc, char **argv);

#endif
