/* run_timing.c: the timed calls of `flashattn run` (run.h), with their progress line. */
#include "progress.h"
#include "run.h"

#include <math.h>
#include <stdio.h>

/* One timed call: fa_forward or fa_backward, then a synchronize so GPU time is counted. */
static fa_status call_once(fa_context *ctx, const fa_fwd_args *fwd, const fa_bwd_args *bwd)
{
    fa_status st = bwd ? fa_backward(ctx, bwd) : fa_forward(ctx, fwd);
    return st == FA_SUCCESS ? fa_synchronize(ctx) : st;
}

fa_status time_calls(fa_context *ctx, const char *label, const fa_fwd_args *fwd, const fa_bwd_args *bwd, int repeat,
                     int quiet, double *mean_ms, double *min_ms)
{
    char line_label[64];
    snprintf(line_label, sizeof line_label, "%s: timed runs", label);
    double t0 = progress_clock();
    fa_status st = call_once(ctx, fwd, bwd);
    if (st != FA_SUCCESS)
        return st;
    double warm = progress_clock() - t0;
    if (warm > 2.0 && !quiet)
        fprintf(stderr, "%s: warm-up took %.1f s, %d timed runs follow\n", label, warm, repeat);
    progress_line line;
    progress_begin(&line, line_label, quiet);
    double total = 0.0, best = INFINITY, start = progress_clock(), last_note = start;
    for (int r = 0; r < repeat; ++r) {
        double a = progress_clock();
        st = call_once(ctx, fwd, bwd);
        double b = progress_clock();
        if (st != FA_SUCCESS) {
            progress_end(&line);
            return st;
        }
        total += b - a;
        if (b - a < best)
            best = b - a;
        progress_update(&line, (double)(r + 1) / repeat);
        /* not a terminal (a log): a line now and then instead */
        if (!line.enabled && !quiet && b - start > 2.0 && b - last_note >= 1.0 && r + 1 < repeat) {
            fprintf(stderr, "run %d/%d (%s, %.1f s so far)\n", r + 1, repeat, label, b - start);
            last_note = b;
        }
    }
    progress_end(&line);
    *mean_ms = 1e3 * total / repeat;
    *min_ms = 1e3 * best;
    return FA_SUCCESS;
}
