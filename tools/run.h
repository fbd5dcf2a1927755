/* run.h: what `flashattn run` (cmd_run.c) and its --check (run_check.c) share: the parsed options
 * and everything the command owns. */
#ifndef FA_TOOL_RUN_H
#define FA_TOOL_RUN_H

#include "flashattn.h"
#include "tensors.h"

typedef struct run_config {
    const char *backend;
    int device;
    int64_t batch, seqlen_q, seqlen_k, heads, heads_kv, dim;
    int64_t dim_v; /* --dim-v: the head dim of V and O (= dim unless given) */
    int have_dtype;
    fa_dtype dtype;
    fa_options opts;
    int block_sparse;
    fa_block_pattern pattern;
    int64_t block_q, block_k, block_param;
    double density;
    int alibi;              /* --alibi: the standard slopes, one per head */
    const char *alibi_path; /* --alibi-slopes FILE.npy */
    int sink;               /* --sink: 0 off, 1 every head sink_value, 2 random (from --input-seed) */
    double sink_value;
    int backward, check, threads, repeat;
    int json; /* --json: one JSON object on stdout instead of the text report */
    int quiet; /* --quiet: no notes, no progress line on stderr */
    uint64_t input_seed;
} run_config;

/* One line of --check: max |got - ref| against its bound. */
typedef struct run_check_line {
    const char *tensor; /* "O", "LSE", "dQ", "dK", "dV", "dsink" */
    double error, naive_error, bound; /* naive_error NaN for LSE (a fixed tolerance) */
    int ok;
} run_check_line;

/* What `run` measured, kept for --json (the text report prints it as it goes); have_* say which
 * parts were reached before an error. */
typedef struct run_report {
    const char *backend;
    char device_name[256];
    int threads; /* the CPU backend's workers, else 0 */
    int have_kernels, have_plan, have_forward, have_backward, have_memory;
    char variant_fwd[128], variant_bwd[128];
    fa_plan_info plan;
    double density;
    double fwd_mean_ms, fwd_min_ms, flops_fwd, bwd_mean_ms, bwd_min_ms, flops_bwd;
    double tensor_bytes, rss_before, rss_after;
    int check_ran; /* every line below was computed */
    run_check_line checks[6];
    int n_checks;
} run_report;

#define RUN_HOST_BUFFERS 16

/* Everything `run` owns, released in one place (run_state_release). */
typedef struct run_state {
    fa_context *ctx;
    fa_block_mask mask;
    int have_mask;
    device_buffer q, k, v, o, lse, dout, dq, dk, dv, alibi, sink, dsink;
    float *alibi_host; /* the slopes as uploaded (run_host_alloc), for --check */
    float *sink_host;  /* the sink logits as uploaded, for the report and --check */
    void *host[RUN_HOST_BUFFERS]; /* host staging buffers, freed at the end */
    run_report report;
} run_state;

/* A host buffer freed by run_state_release; NULL when out of memory or out of slots. */
void *run_host_alloc(run_state *s, size_t bytes);
void run_state_release(run_state *s);

/* A warm-up call, then `repeat` timed calls of fwd (or bwd when not NULL); the mean and the
 * fastest in ms. The progress line (progress.h) on a terminal; elsewhere a note on stderr once a
 * loop passes 2 s, unless quiet. (run_timing.c) */
fa_status time_calls(fa_context *ctx, const char *label, const fa_fwd_args *fwd, const fa_bwd_args *bwd, int repeat,
                     int quiet, double *mean_ms, double *min_ms);

/* --check: compares the results of fwd (and bwd when not NULL), which ran on s's context, with the
 * float64 reference (and dsink with its own, from the reference's O and LSE); n_q, n_k, n_v and n_o
 * are the element counts of Q, K, V and O. Each line goes to s->report
 * (and to stdout unless --json). Returns 0, EXIT_CHECK_FAILED when an error exceeds its bound,
 * EXIT_LIBRARY when the check cannot run, or what library_error says. FA_TEST_RUN_CHECK_PERTURB
 * (a number) is added to the first element of O before it is compared: the tests use it to see
 * the check fail. */
int run_check(const run_config *c, run_state *s, const fa_fwd_args *fwd, const fa_bwd_args *bwd, int64_t n_q,
              int64_t n_k, int64_t n_v, int64_t n_o);

#endif
