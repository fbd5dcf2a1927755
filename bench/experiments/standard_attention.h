/* standard_attention.h: the benchmarks' baseline, a plain "standard" attention in C (fp32) that
 * materialises the full score matrix S = scale * Q K^T and P = softmax(S) in memory and then
 * computes O = P V, as three separate passes (the paper's Algorithm 0). It is not part of the
 * library; it exists so bench/cpu_bench can measure what fusion saves.
 *
 * Layout: Q, O [batch, seqlen_q, heads, d], K, V [batch, seqlen_k, heads, d], contiguous.
 * Causal is bottom-right aligned (query i sees key j iff j <= i + seqlen_k - seqlen_q), like
 * flashattn; masked blocks of S are neither computed nor read. */
#ifndef FA_BENCH_STANDARD_ATTENTION_H
#define FA_BENCH_STANDARD_ATTENTION_H

#include <stdint.h>

typedef struct sa_problem {
    int64_t batch, seqlen_q, seqlen_k, heads, d;
    float scale; /* 0: 1/sqrt(d) */
    int causal;
    const float *q, *k, *v;
    float *o;
} sa_problem;

/* The materialised intermediates, allocated once and reused by every call (as a framework's
 * caching allocator would), so timed calls pay the memory traffic of S and P but no page faults:
 *   S, P   [batch * heads][seqlen_q][ld]  fp32, ld = seqlen_k rounded up to 16
 *   K^T, V packed in 16-column panels, [batch * heads][...]  (O(N d), what a BLAS packs too) */
typedef struct sa_workspace {
    float *s, *p, *kt_packed, *v_packed;
    int64_t ld, d_pad;
    int64_t bytes; /* total bytes of the four buffers */
} sa_workspace;

/* Bytes sa_workspace_alloc would allocate for this problem (no allocation). */
int64_t sa_workspace_bytes(const sa_problem *p);
/* Allocates and first-touches the workspace; returns 0 on success, -1 when out of memory. */
int sa_workspace_alloc(sa_workspace *ws, const sa_problem *p);
void sa_workspace_free(sa_workspace *ws);

/* O = softmax(scale * Q K^T + mask) V with `threads` pthreads (the caller is one of them).
 * Returns 0, or -1 on a bad argument. */
int sa_forward(const sa_problem *p, sa_workspace *ws, int threads);

#endif
