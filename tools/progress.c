/* progress.c: the progress line of progress.h. */
#include "progress.h"

#include <stdio.h>
#include <time.h>
#include <unistd.h>

#define PROGRESS_INTERVAL_S 0.25

double progress_clock(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void progress_begin(progress_line *p, const char *label, int quiet)
{
    p->label = label;
    p->enabled = !quiet && isatty(fileno(stderr));
    p->shown = 0;
    p->start = progress_clock();
    p->last = p->start;
}

/* "about 2 min left", from the rate so far; nothing to say until 1 % is done or 1 s has gone. */
static void format_left(double elapsed, double fraction, char *buf, size_t len)
{
    if (fraction < 0.01 && elapsed < 1.0) {
        snprintf(buf, len, "estimating the time left");
        return;
    }
    double left = fraction > 0.0 ? elapsed * (1.0 - fraction) / fraction : 0.0;
    if (fraction <= 0.0)
        snprintf(buf, len, "estimating the time left");
    else if (left < 60.0)
        snprintf(buf, len, "about %.0f s left", left < 1.0 ? 1.0 : left);
    else if (left < 3600.0)
        snprintf(buf, len, "about %.0f min left", left / 60.0);
    else
        snprintf(buf, len, "about %.1f h left", left / 3600.0);
}

void progress_update(progress_line *p, double fraction)
{
    if (!p->enabled)
        return;
    double now = progress_clock();
    if (now - p->last < PROGRESS_INTERVAL_S)
        return;
    p->last = now;
    if (fraction < 0.0)
        fraction = 0.0;
    if (fraction > 1.0)
        fraction = 1.0;
    char left[64];
    format_left(now - p->start, fraction, left, sizeof left);
    /* \r back to the start of the line, ESC [ K erases what a longer line left */
    fprintf(stderr, "\r%s: %.0f %% (%s)\033[K", p->label, 100.0 * fraction, left);
    fflush(stderr);
    p->shown = 1;
}

void progress_report_units(void *user, int64_t done, int64_t total)
{
    progress_update(user, total > 0 ? (double)done / (double)total : 1.0);
}

void progress_end(progress_line *p)
{
    if (p->shown) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
    }
    p->shown = 0;
}
