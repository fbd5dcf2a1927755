/* progress.h: a progress line for the long phases of `flashattn run` (the float64 reference of
 * --check, the timed calls): on a terminal, one line on stderr rewritten in place, at most four
 * times a second, with an estimate of the time left; nothing when stderr is not a terminal or
 * with --quiet, so logs and pipes see no carriage returns. */
#ifndef FA_TOOL_PROGRESS_H
#define FA_TOOL_PROGRESS_H

#include <stdint.h>

typedef struct progress_line {
    const char *label; /* "reference forward" */
    int enabled;       /* stderr is a terminal and not --quiet */
    int shown;         /* a line is on the terminal, to be cleared */
    double start, last;
} progress_line;

/* Seconds of a monotonic clock. */
double progress_clock(void);
/* Starts a phase; quiet: --quiet. */
void progress_begin(progress_line *p, const char *label, int quiet);
/* The fraction done (0..1): rewrites the line if the last was drawn 0.25 s ago or more. */
void progress_update(progress_line *p, double fraction);
/* done of total units, for callbacks such as the reference's (user is the progress_line). */
void progress_report_units(void *user, int64_t done, int64_t total);
/* Clears the line, if one was drawn. */
void progress_end(progress_line *p);

#endif
