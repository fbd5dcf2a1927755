/* cli.h: what the flashattn tool's subcommands share: the exit statuses, the messages for usage and
 * library errors, and the option parser (tools/cli.c). The tool sees the library through
 * include/flashattn.h only.
 * Exit status (main_help in main.c states it for users): 0 success; 1 the library or the device
 * could not do it, an output could not be written, or --check failed; 2 a usage error: a bad
 * option, an input that is missing, unreadable, not a valid .npy file or does not fit the others
 * (what the library rejects as an invalid argument included), an output path refused before
 * computing. */
#ifndef FA_TOOL_CLI_H
#define FA_TOOL_CLI_H

#include "flashattn.h"

#include <stddef.h>
#include <stdint.h>

#define EXIT_LIBRARY 1
#define EXIT_USAGE 2

#if defined(__GNUC__)
#define FA_TOOL_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define FA_TOOL_PRINTF(fmt, args)
#endif

/* ---------------------------------------------------------------- messages */

/* A usage error of subcommand cmd (NULL: the command word itself): the message, a hint, and
 * EXIT_USAGE to return. */
int usage_error(const char *cmd, const char *fmt, ...) FA_TOOL_PRINTF(2, 3);
/* A failed library call: the status string and the context's message (with its file and line).
 * An argument the library rejects as invalid (a bad shape, option or size) is the user's input:
 * EXIT_USAGE; anything else is the library's or the device's failure: EXIT_LIBRARY. */
int library_error(const char *cmd, fa_context *ctx, const char *what, fa_status st);
/* fa_context_create leaves no context to hold a message, so this explains the common causes. */
int context_error(const char *cmd, const char *backend, int device, fa_status st);
/* "12.0 MiB" */
void format_bytes(double bytes, char *buf, size_t len);

/* ---------------------------------------------------------------- option parsing */

/* Walks argv after the subcommand name. */
typedef struct arg_cursor {
    const char *cmd;
    int argc;
    char **argv;
    int pos; /* index of the option being handled */
} arg_cursor;

int is_help(const char *s);
/* The next word as the value of option opt; each returns 0 or EXIT_USAGE after a message. */
int take_value(arg_cursor *a, const char *opt, const char **value);
int take_i64(arg_cursor *a, const char *opt, int64_t lo, int64_t hi, int64_t *out);
int take_int(arg_cursor *a, const char *opt, int lo, int hi, int *out);
int take_u64(arg_cursor *a, const char *opt, uint64_t *out);
/* A finite number in [lo, hi] ([lo, hi) when hi_inclusive is 0). */
int take_f64(arg_cursor *a, const char *opt, double lo, double hi, int hi_inclusive, double *out);

/* Options shared by run, fwd and bwd that map straight onto fa_options (--causal, --window,
 * --scale, --softcap, --dropout, --seed, --offset, --deterministic). *handled is set when
 * a->argv[a->pos] was one of them. */
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

#endif
