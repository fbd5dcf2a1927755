/* test_lists_cache.c: core/lists_cache.c, the block lists a context keeps between calls.
 * A mask reused is built once; a mask edited in place, another geometry or another tiling is built
 * again and gives the answer a fresh context gives; the least recently used entry goes when the
 * table is full; entries in use are never evicted (a call then gets lists of its own), nor are
 * masks over 16 MiB kept; calls from
 * several threads on one context agree with single-threaded calls. Answers are compared bit for
 * bit with fresh contexts (the CPU backend is deterministic in fp32). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

enum { B = 1, S = 256, H = 2, D = 32, MB = 64, CACHE_ENTRIES = 8 };
#define ELEMS ((size_t)B * S * H * D)

typedef struct problem {
    float *q, *k, *v, *o, *lse, *dout, *dq, *dk, *dv;
} problem;

static void problem_init(problem *p)
{
    float **all[] = {&p->q, &p->k, &p->v, &p->o, &p->lse, &p->dout, &p->dq, &p->dk, &p->dv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) {
        *all[i] = calloc(ELEMS, sizeof(float));
        assert_non_null(*all[i]);
    }
    uint32_t x = 12345u;
    for (size_t i = 0; i < ELEMS; ++i) {
        float *in[] = {p->q, p->k, p->v, p->dout};
        for (int t = 0; t < 4; ++t) {
            x = x * 1664525u + 1013904223u;
            in[t][i] = (float)(x >> 8) / 16777216.0f - 0.5f;
        }
    }
}

static void problem_free(problem *p)
{
    float *all[] = {p->q, p->k, p->v, p->o, p->lse, p->dout, p->dq, p->dk, p->dv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i)
        free(all[i]);
}

static fa_tensor qkv_tensor(float *data, int64_t seqlen)
{
    const int64_t shape[4] = {B, seqlen, H, D};
    return fa_tensor_contiguous(data, FA_DTYPE_F32, 4, shape);
}

/* Forward with the mask over the first seqlen rows; O (and LSE) into out / lse_out. */
static fa_status forward(fa_context *ctx, problem *p, const fa_block_mask *m, int64_t seqlen, float *out,
                         float *lse_out)
{
    fa_fwd_args a;
    memset(&a, 0, sizeof a);
    a.q = qkv_tensor(p->q, seqlen);
    a.k = qkv_tensor(p->k, seqlen);
    a.v = qkv_tensor(p->v, seqlen);
    a.o = qkv_tensor(out, seqlen);
    const int64_t lshape[3] = {B, H, seqlen};
    a.lse = fa_tensor_contiguous(lse_out, FA_DTYPE_F32, 3, lshape);
    a.opts = fa_options_default();
    a.opts.block_mask = m;
    return fa_forward(ctx, &a);
}

static fa_status backward(fa_context *ctx, problem *p, const fa_block_mask *m)
{
    fa_bwd_args a;
    memset(&a, 0, sizeof a);
    a.q = qkv_tensor(p->q, S);
    a.k = qkv_tensor(p->k, S);
    a.v = qkv_tensor(p->v, S);
    a.o = qkv_tensor(p->o, S);
    const int64_t lshape[3] = {B, H, S};
    a.lse = fa_tensor_contiguous(p->lse, FA_DTYPE_F32, 3, lshape);
    a.dout = qkv_tensor(p->dout, S);
    a.dq = qkv_tensor(p->dq, S);
    a.dk = qkv_tensor(p->dk, S);
    a.dv = qkv_tensor(p->dv, S);
    a.opts = fa_options_default();
    a.opts.block_mask = m;
    return fa_backward(ctx, &a);
}

/* O of the mask from a context of its own (nothing cached) */
static void fresh_forward(problem *p, const fa_block_mask *m, int64_t seqlen, float *out)
{
    fa_context *ctx = NULL;
    float *lse = calloc(ELEMS, sizeof(float));
    assert_non_null(lse);
    assert_int_equal(fa_context_create(&ctx, "cpu", 0), FA_SUCCESS);
    assert_int_equal(forward(ctx, p, m, seqlen, out, lse), FA_SUCCESS);
    fa_context_destroy(ctx);
    free(lse);
}

static void random_mask(fa_block_mask *m, double density, uint64_t seed)
{
    assert_int_equal(fa_block_mask_create(m, FA_BLOCK_RANDOM, 1, S, S, MB, MB, 0, density, seed), FA_SUCCESS);
}

static void stats(fa_context *ctx, int *entries, int64_t *builds)
{
    fa_lists_cache_stats(ctx, entries, builds);
}

static void test_reused_mask_is_built_once(void **state)
{
    (void)state;
    problem p;
    problem_init(&p);
    fa_block_mask m;
    random_mask(&m, 0.5, 7);
    fa_context *ctx = NULL;
    assert_int_equal(fa_context_create(&ctx, "cpu", 0), FA_SUCCESS);
    float *o1 = calloc(ELEMS, sizeof(float)), *ref = calloc(ELEMS, sizeof(float));
    assert_non_null(o1);
    assert_non_null(ref);
    int entries;
    int64_t builds;
    assert_int_equal(forward(ctx, &p, &m, S, p.o, p.lse), FA_SUCCESS);
    stats(ctx, &entries, &builds);
    assert_int_equal(entries, 1);
    assert_int_equal(builds, 1);
    for (int i = 0; i < 3; ++i)
        assert_int_equal(forward(ctx, &p, &m, S, o1, p.lse), FA_SUCCESS);
    stats(ctx, &entries, &builds);
    assert_int_equal(builds, 1);
    assert_memory_equal(o1, p.o, ELEMS * sizeof(float));
    fresh_forward(&p, &m, S, ref);
    assert_memory_equal(o1, ref, ELEMS * sizeof(float));
    /* the backward's tiling may differ from the forward's: at most one more build, then none */
    assert_int_equal(backward(ctx, &p, &m), FA_SUCCESS);
    int64_t after_bwd;
    stats(ctx, &entries, &after_bwd);
    assert_true(after_bwd <= 2);
    assert_int_equal(backward(ctx, &p, &m), FA_SUCCESS);
    stats(ctx, &entries, &builds);
    assert_int_equal(builds, after_bwd);
    fa_context_destroy(ctx);
    fa_block_mask_destroy(&m);
    free(o1);
    free(ref);
    problem_free(&p);
}

static void test_mask_edited_in_place_is_rebuilt(void **state)
{
    (void)state;
    problem p;
    problem_init(&p);
    fa_block_mask m;
    random_mask(&m, 1.0, 3); /* every block kept */
    fa_context *ctx = NULL;
    assert_int_equal(fa_context_create(&ctx, "cpu", 0), FA_SUCCESS);
    float *before = calloc(ELEMS, sizeof(float)), *after = calloc(ELEMS, sizeof(float)),
          *ref = calloc(ELEMS, sizeof(float));
    assert_true(before && after && ref);
    assert_int_equal(forward(ctx, &p, &m, S, before, p.lse), FA_SUCCESS);
    /* query block 2 no longer sees key block 0: the same mask object, other bytes */
    m.bits[2 * m.cols + 0] = 0;
    assert_int_equal(forward(ctx, &p, &m, S, after, p.lse), FA_SUCCESS);
    int entries;
    int64_t builds;
    stats(ctx, &entries, &builds);
    assert_int_equal(builds, 2);
    assert_int_equal(entries, 2);
    fresh_forward(&p, &m, S, ref);
    assert_memory_equal(after, ref, ELEMS * sizeof(float));
    assert_memory_not_equal(after, before, ELEMS * sizeof(float));
    /* restored: the first entry serves it again, with the first answer */
    m.bits[2 * m.cols + 0] = 1;
    assert_int_equal(forward(ctx, &p, &m, S, after, p.lse), FA_SUCCESS);
    stats(ctx, &entries, &builds);
    assert_int_equal(builds, 2);
    assert_memory_equal(after, before, ELEMS * sizeof(float));
    fa_context_destroy(ctx);
    fa_block_mask_destroy(&m);
    free(before);
    free(after);
    free(ref);
    problem_free(&p);
}

static void test_other_lengths_are_other_entries(void **state)
{
    (void)state;
    problem p;
    problem_init(&p);
    fa_block_mask m;
    random_mask(&m, 0.5, 11); /* covers S: also the first S / 2 rows */
    fa_context *ctx = NULL;
    assert_int_equal(fa_context_create(&ctx, "cpu", 0), FA_SUCCESS);
    float *o = calloc(ELEMS, sizeof(float)), *ref = calloc(ELEMS, sizeof(float));
    assert_true(o && ref);
    assert_int_equal(forward(ctx, &p, &m, S, o, p.lse), FA_SUCCESS);
    assert_int_equal(forward(ctx, &p, &m, S / 2 + 3, o, p.lse), FA_SUCCESS);
    int entries;
    int64_t builds;
    stats(ctx, &entries, &builds);
    assert_int_equal(builds, 2);
    fresh_forward(&p, &m, S / 2 + 3, ref);
    assert_memory_equal(o, ref, (size_t)B * (S / 2 + 3) * H * D * sizeof(float));
    fa_context_destroy(ctx);
    fa_block_mask_destroy(&m);
    free(o);
    free(ref);
    problem_free(&p);
}

static void test_least_recently_used_is_evicted(void **state)
{
    (void)state;
    problem p;
    problem_init(&p);
    enum { MASKS = CACHE_ENTRIES + 2 };
    fa_block_mask m[MASKS];
    for (int i = 0; i < MASKS; ++i)
        random_mask(&m[i], 0.5, 100 + (uint64_t)i);
    fa_context *ctx = NULL;
    assert_int_equal(fa_context_create(&ctx, "cpu", 0), FA_SUCCESS);
    float *o = calloc(ELEMS, sizeof(float)), *ref = calloc(ELEMS, sizeof(float));
    assert_true(o && ref);
    for (int i = 0; i < CACHE_ENTRIES; ++i)
        assert_int_equal(forward(ctx, &p, &m[i], S, o, p.lse), FA_SUCCESS);
    assert_int_equal(forward(ctx, &p, &m[0], S, o, p.lse), FA_SUCCESS); /* mask 0: now the newest */
    int entries;
    int64_t builds;
    stats(ctx, &entries, &builds);
    assert_int_equal(entries, CACHE_ENTRIES);
    assert_int_equal(builds, CACHE_ENTRIES);
    assert_int_equal(forward(ctx, &p, &m[CACHE_ENTRIES], S, o, p.lse), FA_SUCCESS); /* evicts mask 1 */
    assert_int_equal(forward(ctx, &p, &m[0], S, o, p.lse), FA_SUCCESS);
    stats(ctx, &entries, &builds);
    assert_int_equal(entries, CACHE_ENTRIES);
    assert_int_equal(builds, CACHE_ENTRIES + 1);
    assert_int_equal(forward(ctx, &p, &m[1], S, o, p.lse), FA_SUCCESS); /* built again */
    stats(ctx, &entries, &builds);
    assert_int_equal(builds, CACHE_ENTRIES + 2);
    fresh_forward(&p, &m[1], S, ref);
    assert_memory_equal(o, ref, ELEMS * sizeof(float));
    fa_context_destroy(ctx);
    for (int i = 0; i < MASKS; ++i)
        fa_block_mask_destroy(&m[i]);
    free(o);
    free(ref);
    problem_free(&p);
}

/* Entries in use are not evicted: with every entry held, the next call's lists are its own. */
static void test_entries_in_use_are_kept(void **state)
{
    (void)state;
    enum { MASKS = CACHE_ENTRIES + 1 };
    fa_block_mask m[MASKS];
    fa_block_lists *held[MASKS];
    fa_context *ctx = NULL;
    assert_int_equal(fa_context_create(&ctx, "cpu", 0), FA_SUCCESS);
    for (int i = 0; i < MASKS; ++i) {
        random_mask(&m[i], 0.5, 200 + (uint64_t)i);
        assert_int_equal(fa_lists_acquire(ctx, &m[i], H, S, S, 32, 32, &held[i]), FA_SUCCESS);
    }
    for (int i = 0; i < CACHE_ENTRIES; ++i)
        assert_true(held[i]->cached);
    assert_false(held[CACHE_ENTRIES]->cached);
    /* the call's own lists are the same as built directly */
    fa_block_lists direct;
    assert_int_equal(fa_block_lists_build(&m[CACHE_ENTRIES], H, S, S, 32, 32, &direct), FA_SUCCESS);
    assert_int_equal(held[CACHE_ENTRIES]->nnz, direct.nnz);
    assert_memory_equal(held[CACHE_ENTRIES]->col, direct.col, sizeof(int32_t) * (size_t)direct.nnz);
    assert_memory_equal(held[CACHE_ENTRIES]->row_ptr, direct.row_ptr,
                        sizeof(int64_t) * (size_t)(direct.heads * direct.nq + 1));
    fa_block_lists_free(&direct);
    /* a second acquire of a held mask shares its entry */
    fa_block_lists *again;
    assert_int_equal(fa_lists_acquire(ctx, &m[0], H, S, S, 32, 32, &again), FA_SUCCESS);
    assert_ptr_equal(again, held[0]);
    fa_lists_release(ctx, again);
    for (int i = 0; i < MASKS; ++i)
        fa_lists_release(ctx, held[i]);
    int entries;
    int64_t builds;
    stats(ctx, &entries, &builds);
    assert_int_equal(entries, CACHE_ENTRIES);
    fa_context_destroy(ctx);
    for (int i = 0; i < MASKS; ++i)
        fa_block_mask_destroy(&m[i]);
}

/* A mask of more than 16 MiB of bits is built per call and not kept. */
static void test_huge_mask_is_not_kept(void **state)
{
    (void)state;
    const int64_t side = 4100; /* 4100 x 4100 one-row blocks: 16.03 MiB */
    uint8_t *bitmap = malloc((size_t)(side * side));
    assert_non_null(bitmap);
    for (int64_t i = 0; i < side * side; ++i)
        bitmap[i] = (uint8_t)((i / side) % 3 != 0 || i % side == i / side);
    fa_block_mask m;
    assert_int_equal(fa_block_mask_from_bitmap(&m, bitmap, 1, side, side, 1, 1), FA_SUCCESS);
    free(bitmap);
    fa_context *ctx = NULL;
    assert_int_equal(fa_context_create(&ctx, "cpu", 0), FA_SUCCESS);
    fa_block_lists *l = NULL;
    assert_int_equal(fa_lists_acquire(ctx, &m, 1, side, side, 64, 64, &l), FA_SUCCESS);
    assert_false(l->cached);
    fa_block_lists direct;
    assert_int_equal(fa_block_lists_build(&m, 1, side, side, 64, 64, &direct), FA_SUCCESS);
    assert_int_equal(l->nnz, direct.nnz);
    assert_memory_equal(l->col, direct.col, sizeof(int32_t) * (size_t)direct.nnz);
    fa_block_lists_free(&direct);
    fa_lists_release(ctx, l);
    int entries;
    int64_t builds;
    stats(ctx, &entries, &builds);
    assert_int_equal(entries, 0);
    fa_context_destroy(ctx);
    fa_block_mask_destroy(&m);
}

/* ---------------------------------------------------------------- threads */

enum { THREADS = 4, CALLS = 12, SHARED_MASKS = 3 };

typedef struct shared_run {
    fa_context *ctx;
    problem *p;
    fa_block_mask *m;
    float *expected[SHARED_MASKS];
    int failures;
    int id;
} shared_run;

static void *shared_worker(void *arg)
{
    shared_run *r = arg;
    float *o = calloc(ELEMS, sizeof(float)), *lse = calloc(ELEMS, sizeof(float));
    if (!o || !lse) {
        r->failures++;
    } else {
        for (int c = 0; c < CALLS; ++c) {
            int k = (c + r->id) % SHARED_MASKS;
            if (forward(r->ctx, r->p, &r->m[k], S, o, lse) != FA_SUCCESS ||
                memcmp(o, r->expected[k], ELEMS * sizeof(float)) != 0)
                r->failures++;
        }
    }
    free(o);
    free(lse);
    return NULL;
}

static void test_threads_share_the_cache(void **state)
{
    (void)state;
    problem p;
    problem_init(&p);
    fa_block_mask m[SHARED_MASKS];
    float *expected[SHARED_MASKS];
    for (int i = 0; i < SHARED_MASKS; ++i) {
        random_mask(&m[i], 0.25 * (i + 1), 300 + (uint64_t)i);
        expected[i] = calloc(ELEMS, sizeof(float));
        assert_non_null(expected[i]);
        fresh_forward(&p, &m[i], S, expected[i]);
    }
    fa_context *ctx = NULL;
    assert_int_equal(fa_context_create(&ctx, "cpu", 0), FA_SUCCESS);
    assert_int_equal(fa_context_set_num_threads(ctx, 1), FA_SUCCESS);
    shared_run runs[THREADS];
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; ++i) {
        runs[i] = (shared_run){ctx, &p, m, {expected[0], expected[1], expected[2]}, 0, i};
        assert_int_equal(pthread_create(&t[i], NULL, shared_worker, &runs[i]), 0);
    }
    for (int i = 0; i < THREADS; ++i) {
        pthread_join(t[i], NULL);
        assert_int_equal(runs[i].failures, 0);
    }
    int entries;
    int64_t builds;
    stats(ctx, &entries, &builds);
    /* two threads that miss the same mask at once may both keep it */
    assert_true(entries >= SHARED_MASKS && entries <= CACHE_ENTRIES);
    assert_true(builds >= SHARED_MASKS && builds <= SHARED_MASKS * THREADS);
    fa_context_destroy(ctx);
    for (int i = 0; i < SHARED_MASKS; ++i) {
        fa_block_mask_destroy(&m[i]);
        free(expected[i]);
    }
    problem_free(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reused_mask_is_built_once),
        cmocka_unit_test(test_mask_edited_in_place_is_rebuilt),
        cmocka_unit_test(test_other_lengths_are_other_entries),
        cmocka_unit_test(test_least_recently_used_is_evicted),
        cmocka_unit_test(test_entries_in_use_are_kept),
        cmocka_unit_test(test_huge_mask_is_not_kept),
        cmocka_unit_test(test_threads_share_the_cache),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
