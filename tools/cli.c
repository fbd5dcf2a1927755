/* cli.c: the flashattn tool's messages and option parser (cli.h), the parser over getopt_long. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================ messages */

static char last_error[512];

const char *last_error_message(void)
{
    return last_error;
}

static void remember_error_v(const char *fmt, va_list ap)
{
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    last_error[strcspn(last_error, "\n")] = '\0';
}

void remember_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    remember_error_v(fmt, ap);
    va_end(ap);
}

static void print_usage_hint(const char *cmd)
{
    if (cmd)
        fprintf(stderr, "Try 'flashattn %s --help'.\n", cmd);
    else
        fprintf(stderr, "Try 'flashattn --help'.\n");
}

int usage_error(const char *cmd, const char *fmt, ...)
{
    /* formatted once, then printed and remembered: GCC's -Wformat-overflow, under UBSan's
     * instrumentation at -O2, took a second pass over fmt for a possible NULL */
    char message[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    fprintf(stderr, "flashattn%s%s: %s\n", cmd ? " " : "", cmd ? cmd : "", message);
    remember_error("%s", message);
    print_usage_hint(cmd);
    return EXIT_USAGE;
}

/* --debug (any command): library messages also say where in the library they were raised. */
static int debug_locations;

static void print_location(const char *location)
{
    if (debug_locations && location && *location)
        fprintf(stderr, "  (raised at %s in the library)\n", location);
}

int library_error(const char *cmd, fa_context *ctx, const char *what, fa_status st)
{
    const char *detail = ctx ? fa_context_last_error(ctx) : "";
    fprintf(stderr, "flashattn %s: %s failed: %s%s%s\n", cmd, what, fa_status_string(st),
            detail && *detail ? "\n  " : "", detail ? detail : "");
    if (ctx)
        print_location(fa_context_last_error_location(ctx));
    remember_error("%s failed: %s%s%s", what, fa_status_string(st), detail && *detail ? ": " : "",
                   detail ? detail : "");
    return st == FA_ERR_INVALID_ARG ? EXIT_USAGE : EXIT_LIBRARY;
}

int context_error(const char *cmd, const char *backend, int device, fa_status st)
{
    fprintf(stderr, "flashattn %s: cannot create a context for backend '%s', device %d: %s\n", cmd,
            backend ? backend : "default", device, fa_status_string(st));
    const char *why = fa_last_error(); /* e.g. the backend's library not found */
    remember_error("cannot create a context for backend '%s', device %d: %s%s%s", backend ? backend : "default",
                   device, fa_status_string(st), *why ? ": " : "", why);
    if (*why)
        fprintf(stderr, "  %s\n", why);
    print_location(fa_last_error_location());
    fprintf(stderr, "  backends compiled in:");
    for (int i = 0; i < fa_backend_count(); ++i)
        fprintf(stderr, " %s", fa_backend_name(i));
    fprintf(stderr, " (see 'flashattn info')\n");
    return EXIT_LIBRARY;
}

void format_bytes(double bytes, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024.0 && u < 4) {
        bytes /= 1024.0;
        ++u;
    }
    if (u == 0)
        snprintf(buf, len, "%.0f B", bytes);
    else
        snprintf(buf, len, "%.1f %s", bytes, units[u]);
}

/* ================================================================ option parsing */

void arg_begin(arg_cursor *a, const char *cmd, int argc, char **argv, const struct option *options)
{
    memset(a, 0, sizeof *a);
    a->cmd = cmd;
    a->argc = argc;
    a->argv = argv;
    a->options = options;
    optind = 0; /* glibc: 0 restarts the scan from argv[1] with fresh internal state */
    opterr = 0; /* the messages are ours */
}

/* The option of options whose name is the n bytes at name, or NULL. */
static const struct option *find_option(const struct option *options, const char *name, size_t n)
{
    for (const struct option *o = options; o->name; ++o)
        if (strlen(o->name) == n && strncmp(o->name, name, n) == 0)
            return o;
    return NULL;
}

int next_option(arg_cursor *a, int *rc)
{
    *rc = 0;
    /* '-': words that are not options come back in order as 1 (no permutation, so argv[at] is the
     * option word getopt_long reads); ':': a missing value comes back as ':' */
    int at, index, c;
    for (;;) {
        at = optind > 0 ? optind : 1;
        index = -1;
        c = getopt_long(a->argc, a->argv, "-:h", a->options, &index);
        /* --debug, which every command takes, is in no command's table: getopt_long calls it
         * unknown and it is taken here ('--debug=x' goes on to the message for a value) */
        if (c == '?' && at < a->argc && strcmp(a->argv[at], "--debug") == 0) {
            debug_locations = 1;
            continue;
        }
        break;
    }
    if (c == -1) {
        if (optind < a->argc) /* the words after "--" */
            *rc = usage_error(a->cmd, "unexpected argument '%s'", a->argv[optind]);
        return 0;
    }
    const char *word = at < a->argc ? a->argv[at] : "";
    size_t name_len = strncmp(word, "--", 2) == 0 ? strcspn(word + 2, "=") : 0;
    if (c == 1) {
        *rc = usage_error(a->cmd, "unexpected argument '%s' (options start with --)", optarg);
    } else if (c == ':') {
        *rc = usage_error(a->cmd, "option %.*s needs a value", (int)(name_len + 2), word);
    } else if (c == '?') {
        const struct option *o = name_len ? find_option(a->options, word + 2, name_len) : NULL;
        if (name_len == 5 && strncmp(word + 2, "debug", 5) == 0)
            *rc = usage_error(a->cmd, "option --debug takes no value ('%s')", word);
        else if (o && o->has_arg == no_argument)
            *rc = usage_error(a->cmd, "option --%s takes no value ('%s')", o->name, word);
        else if (name_len)
            *rc = usage_error(a->cmd, "unknown option '%.*s'", (int)(name_len + 2), word);
        else
            *rc = usage_error(a->cmd, "unknown option '-%c'", optopt ? optopt : '?');
    } else if (c == 'h') {
        a->opt = "--help";
        a->value = NULL;
        return 1;
    } else if (c == 0 && index >= 0) {
        const char *name = a->options[index].name;
        if (strlen(name) != name_len || strncmp(word + 2, name, name_len) != 0) {
            *rc = usage_error(a->cmd, "unknown option '%.*s' (did you mean --%s? options are not abbreviated)",
                              (int)(name_len + 2), word, name);
        } else {
            snprintf(a->opt_text, sizeof a->opt_text, "--%s", name);
            a->opt = a->opt_text;
            a->value = optarg;
            return 1;
        }
    } else {
        *rc = usage_error(a->cmd, "cannot parse '%s'", word);
    }
    return 0;
}

int take_value(arg_cursor *a, const char *opt, const char **value)
{
    if (!a->value) /* not reached: the table marks options with a value required_argument */
        return usage_error(a->cmd, "option %s needs a value", opt);
    *value = a->value;
    return 0;
}

static int parse_i64_text(const char *cmd, const char *opt, const char *text, int64_t lo, int64_t hi, int64_t *out)
{
    errno = 0;
    char *end = NULL;
    long long v = strtoll(text, &end, 10);
    if (end == text || *end != '\0' || errno == ERANGE)
        return usage_error(cmd, "%s: '%s' is not an integer", opt, text);
    if (v < lo || v > hi)
        return usage_error(cmd, "%s: %lld is out of range [%lld, %lld]", opt, v, (long long)lo, (long long)hi);
    *out = (int64_t)v;
    return 0;
}

static int parse_u64_text(const char *cmd, const char *opt, const char *text, uint64_t *out)
{
    const char *s = text;
    while (*s == ' ')
        ++s;
    if (*s == '-')
        return usage_error(cmd, "%s: '%s' must not be negative", opt, text);
    errno = 0;
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 0);
    if (end == s || *end != '\0' || errno == ERANGE)
        return usage_error(cmd, "%s: '%s' is not an unsigned 64-bit integer", opt, text);
    *out = (uint64_t)v;
    return 0;
}

static int parse_f64_text(const char *cmd, const char *opt, const char *text, double lo, double hi,
                          int hi_inclusive, double *out)
{
    errno = 0;
    char *end = NULL;
    double v = strtod(text, &end);
    if (end == text || *end != '\0' || errno == ERANGE || !isfinite(v))
        return usage_error(cmd, "%s: '%s' is not a finite number", opt, text);
    if (v < lo || v > hi || (!hi_inclusive && v == hi))
        return usage_error(cmd, "%s: %g is out of range [%g, %g%s", opt, v, lo, hi, hi_inclusive ? "]" : ")");
    *out = v;
    return 0;
}

int take_i64(arg_cursor *a, const char *opt, int64_t lo, int64_t hi, int64_t *out)
{
    const char *v = NULL;
    int rc = take_value(a, opt, &v);
    return rc ? rc : parse_i64_text(a->cmd, opt, v, lo, hi, out);
}

int take_i64_pair(arg_cursor *a, const char *opt_first, const char *opt_second, int64_t lo, int64_t hi,
                  int64_t *first, int64_t *second)
{
    const char *v = NULL;
    int rc = take_value(a, opt_first, &v);
    if (rc)
        return rc;
    const char *comma = strchr(v, ',');
    if (comma) {
        char text[64];
        size_t n = (size_t)(comma - v);
        if (n >= sizeof text)
            return usage_error(a->cmd, "%s: '%s' is not an integer", opt_first, v);
        memcpy(text, v, n);
        text[n] = '\0';
        rc = parse_i64_text(a->cmd, opt_first, text, lo, hi, first);
        return rc ? rc : parse_i64_text(a->cmd, opt_second, comma + 1, lo, hi, second);
    }
    rc = parse_i64_text(a->cmd, opt_first, v, lo, hi, first);
    if (rc)
        return rc;
    if (optind >= a->argc)
        return usage_error(a->cmd, "option %s needs a second value", a->opt);
    return parse_i64_text(a->cmd, opt_second, a->argv[optind++], lo, hi, second);
}

int take_int(arg_cursor *a, const char *opt, int lo, int hi, int *out)
{
    int64_t v = 0;
    int rc = take_i64(a, opt, lo, hi, &v);
    if (!rc)
        *out = (int)v;
    return rc;
}

int take_u64(arg_cursor *a, const char *opt, uint64_t *out)
{
    const char *v = NULL;
    int rc = take_value(a, opt, &v);
    return rc ? rc : parse_u64_text(a->cmd, opt, v, out);
}

int take_f64(arg_cursor *a, const char *opt, double lo, double hi, int hi_inclusive, double *out)
{
    const char *v = NULL;
    int rc = take_value(a, opt, &v);
    return rc ? rc : parse_f64_text(a->cmd, opt, v, lo, hi, hi_inclusive, out);
}

int is_help(const char *s)
{
    return strcmp(s, "--help") == 0 || strcmp(s, "-h") == 0;
}

int parse_attention_option(arg_cursor *a, fa_options *opts, int *handled)
{
    const char *opt = a->opt;
    *handled = 1;
    if (strcmp(opt, "--causal") == 0) {
        opts->causal = 1;
        return 0;
    }
    if (strcmp(opt, "--deterministic") == 0) {
        opts->deterministic = 1;
        return 0;
    }
    if (strcmp(opt, "--window") == 0) {
        return take_i64_pair(a, "--window (left)", "--window (right)", -1, INT64_MAX, &opts->window_left,
                             &opts->window_right);
    }
    if (strcmp(opt, "--scale") == 0) {
        double s;
        int rc = take_f64(a, opt, -3.0e38, 3.0e38, 1, &s);
        if (!rc)
            opts->softmax_scale = (float)s;
        if (!rc && s != 0.0 && opts->softmax_scale == 0.0f) /* 0 would mean the default 1/sqrt(d) */
            return usage_error(a->cmd, "--scale: %g rounds to 0 in single precision (0 means 1/sqrt(d))", s);
        return rc;
    }
    if (strcmp(opt, "--softcap") == 0) {
        double c;
        int rc = take_f64(a, opt, 0.0, 3.0e38, 1, &c);
        if (!rc)
            opts->softcap = (float)c;
        if (!rc && c != 0.0 && opts->softcap == 0.0f) /* 0 would mean no softcap */
            return usage_error(a->cmd, "--softcap: %g rounds to 0 in single precision (0 means no softcap)", c);
        return rc;
    }
    if (strcmp(opt, "--dropout") == 0) {
        double p;
        int rc = take_f64(a, opt, 0.0, 1.0, 0, &p);
        if (!rc)
            opts->dropout_p = (float)p;
        if (!rc && opts->dropout_p >= 1.0f) /* p just below 1 can round up to 1 in float */
            return usage_error(a->cmd, "--dropout: %.17g rounds to 1 in single precision", p);
        return rc;
    }
    if (strcmp(opt, "--seed") == 0)
        return take_u64(a, opt, &opts->dropout_seed);
    if (strcmp(opt, "--offset") == 0)
        return take_u64(a, opt, &opts->dropout_offset);
    *handled = 0;
    return 0;
}

int parse_dtype_name(const char *s, fa_dtype *out)
{
    if (strcmp(s, "fp32") == 0 || strcmp(s, "f32") == 0 || strcmp(s, "float32") == 0)
        *out = FA_DTYPE_F32;
    else if (strcmp(s, "fp16") == 0 || strcmp(s, "f16") == 0 || strcmp(s, "float16") == 0)
        *out = FA_DTYPE_F16;
    else if (strcmp(s, "bf16") == 0 || strcmp(s, "bfloat16") == 0)
        *out = FA_DTYPE_BF16;
    else
        return 0;
    return 1;
}
