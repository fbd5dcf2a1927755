/* decode_case.h: one case of the decode test (decode.c): its description, its inputs in host memory
 * and the fa_forward_kvcache arguments over device copies of them, shared by the grid (decode.c),
 * the bad-argument checks (decode_bad_input.c) and the NaN rule (decode_nan_rule.c). */
#ifndef FA_DECODE_CASE_H
#define FA_DECODE_CASE_H

#include <stddef.h>
#include <stdint.h>

#include "flashattn.h"

/* One case: the problem's shape, the cache layout and the call's options. */
typedef struct dcase {
    const char *name;
    fa_dtype dtype;
    int64_t batch, sn, hq, hkv, d;
    int64_t page;        /* 0: contiguous */
    int64_t capacity;    /* tokens per sequence: seqlen_cache, or pages per sequence x page */
    int64_t lens[4];     /* cache_seqlens; -1: the full capacity minus knew */
    int64_t knew;        /* appended tokens */
    int64_t rotary_dim;  /* 0: none */
    int interleaved, causal;
    int64_t left, right;
    int batch_idx, splits;
    float softcap;
    int no_seqlens;      /* cache_seqlens NULL (contiguous, every sequence full) */
    int64_t pad;         /* NaN channels after each cache head row (its stride d + pad): read by no kernel */
    int64_t dv;          /* value head dim of v_cache, v_new and o; 0: d */
    int sink;            /* learnable sink: 0 none, 1 random per head in [-2, 2], 2 about +8 (dominating) */
    int alibi;           /* ALiBi slopes: 0 none, 1 one per query head, 2 one per sequence and query head */
    int shared_v;        /* v_cache a view of k_cache, its first dv channels (MLA's latent cache); no appends */
} dcase;

#define B16 FA_DTYPE_BF16
#define F16 FA_DTYPE_F16
#define F32 FA_DTYPE_F32

/* The case's inputs in host memory (the caches as they are before the call). */
typedef struct host_case {
    int64_t nb, rows, pages_per_seq, seqlen_ro;
    int64_t dp; /* a key cache head row's stride: d + pad */
    int64_t dv, dvp; /* the value head dim and a value cache head row's stride: dv + pad */
    int64_t qn, cn, nn, rn; /* element counts: q, k_cache, k_new, each rotary table */
    int64_t on, cvn, nvn;   /* element counts: o, v_cache, v_new */
    void *q, *kc, *vc, *kn, *vn, *cos, *sin;
    float *sink; /* heads_q sink logits, NULL: none */
    float *slopes; /* ALiBi: [heads_q], or [batch][heads_q] (slope_stride heads_q); NULL: none */
    int64_t slope_stride;
    int32_t *lens, *table, *bidx;
    int32_t *pads; /* cache_leftpad (set_leftpad), NULL: none */
} host_case;

/* The arguments in device memory; every pointer in ptr[] for freeing. */
typedef struct dev_case {
    void *ptr[16];
    int n;
    fa_kvcache_args a;
} dev_case;

/* element size, and element i of a buffer of dtype dt read or written as a double */
size_t esz(fa_dtype dt);
double get(fa_dtype dt, const void *base, int64_t i);
void put(fa_dtype dt, void *base, int64_t i, double x);

/* The case's inputs from the seed: random q, caches (NaN in the pad channels), new tokens, the
 * lengths, a shuffled block table with spare pages, a batch index, rotary tables. */
void make_host(const dcase *c, host_case *h, uint64_t seed);
/* Gives the case a cache_leftpad (contiguous caches): h->pads from pads, and NaN in every key and
 * value before each sequence's pad, which no call may read. */
void set_leftpad(const dcase *c, host_case *h, const int64_t *pads);
void free_host(host_case *h);

/* device copy of n bytes of host data (src NULL: an output, filled with a poison pattern) */
void *dev(fa_context *ctx, const void *src, size_t n);
/* records p in x for free_dev; returns p */
void *track(dev_case *x, void *p);
/* check_on_device for every call the grid makes (--device-check, or the second pass on backends
 * that list FA_FEATURE_KVCACHE_DEVICE_CHECK) */
extern int device_check;
/* The call's arguments over device copies of h; 0 when an allocation or copy failed. */
int make_dev(fa_context *ctx, const dcase *c, const host_case *h, dev_case *x);
void free_dev(fa_context *ctx, dev_case *x);
/* a host copy of n bytes of device memory (free it), NULL when the copy failed */
void *back(fa_context *ctx, const void *src, size_t n);

/* The checks beside the grid; each returns its number of failures. */
int run_bad(fa_context *ctx, int device_check_pass);  /* decode_bad_input.c */
int run_nan_rule(fa_context *ctx, fa_dtype dt);       /* decode_nan_rule.c */

#endif
