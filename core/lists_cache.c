/* lists_cache.c: the block lists of the last few block masks a context ran, kept between calls.
 *
 * A call with a block mask needs the per-tile lists (fa_block_lists_build), and a GPU backend needs
 * them, and the mask's bits, in device memory. Building and uploading them on every call costs
 * host time and allocations in proportion to the mask, which a training loop that reuses one mask
 * pays at every step. The cache keeps, per context, up to FA_LISTS_CACHE_ENTRIES lists with a copy
 * of the bits they were built from; a call whose mask has the same geometry and the same bytes
 * (compared in full, so a mask edited in place is never served stale lists) and whose tiling is the
 * same reuses them, and the backend's device copies with them (fa_backend.lists_upload). Masks of
 * more than FA_LISTS_CACHE_MAX_BITS bytes are built per call.
 *
 * Calls may share a context from several threads (flashattn.h): the table is locked, and an entry
 * in use by a call (refs > 0) is never evicted. When every entry is in use, or the backend declines
 * to keep device copies now, the call gets lists of its own, freed at its end. */
#include "internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define FA_LISTS_CACHE_ENTRIES 8
/* A mask of more bytes is not kept: the table holds at most 8 x 16 MiB of bits (and lists, and
 * their device copies), and building the lists of such a mask costs little beside the attention
 * over the sequences it covers. */
#define FA_LISTS_CACHE_MAX_BITS ((size_t)16 << 20)

typedef struct lists_entry {
    fa_block_lists lists; /* lists.cached != 0: the slot holds an entry */
    fa_block_mask mask;   /* the geometry, and bits: the cache's copy */
    int64_t seqlen_q, seqlen_k;
    int refs;           /* calls using the entry now */
    uint64_t last_use;  /* for least-recently-used eviction */
} lists_entry;

struct fa_lists_cache {
    pthread_mutex_t mu;
    uint64_t clock;
    int64_t builds;
    lists_entry e[FA_LISTS_CACHE_ENTRIES];
};

fa_status fa_lists_cache_create(fa_context *ctx)
{
    fa_lists_cache *c = calloc(1, sizeof *c);
    if (!c)
        return FA_ERR_OUT_OF_MEMORY;
    if (pthread_mutex_init(&c->mu, NULL) != 0) {
        free(c);
        return FA_ERR_OUT_OF_MEMORY;
    }
    ctx->lists_cache = c;
    return FA_SUCCESS;
}

static void entry_clear(fa_context *ctx, lists_entry *e)
{
    if (e->lists.device && ctx->backend->lists_free)
        ctx->backend->lists_free(ctx, &e->lists);
    fa_block_lists_free(&e->lists);
    free(e->mask.bits);
    memset(e, 0, sizeof *e);
}

void fa_lists_cache_destroy(fa_context *ctx)
{
    fa_lists_cache *c = ctx->lists_cache;
    if (!c)
        return;
    for (int i = 0; i < FA_LISTS_CACHE_ENTRIES; ++i)
        if (c->e[i].lists.cached)
            entry_clear(ctx, &c->e[i]);
    pthread_mutex_destroy(&c->mu);
    free(c);
    ctx->lists_cache = NULL;
}

static int entry_matches(const lists_entry *e, const fa_block_mask *m, int64_t seqlen_q, int64_t seqlen_k,
                         int64_t block_q, int64_t block_k, size_t bytes)
{
    return e->lists.cached && e->mask.heads == m->heads && e->mask.rows == m->rows && e->mask.cols == m->cols &&
           e->mask.block_q == m->block_q && e->mask.block_k == m->block_k && e->seqlen_q == seqlen_q &&
           e->seqlen_k == seqlen_k && e->lists.block_q == block_q && e->lists.block_k == block_k &&
           (bytes == 0 || memcmp(e->mask.bits, m->bits, bytes) == 0);
}

/* The bytes of m's bits (validated by fa_block_mask_check: the product does not overflow). */
static size_t mask_bytes(const fa_block_mask *m)
{
    return (size_t)(m->heads * m->rows * m->cols);
}

fa_status fa_lists_acquire(fa_context *ctx, const fa_block_mask *m, int64_t heads_q, int64_t seqlen_q,
                           int64_t seqlen_k, int64_t block_q, int64_t block_k, fa_block_lists **out)
{
    const size_t bytes = mask_bytes(m);
    fa_lists_cache *c = bytes <= FA_LISTS_CACHE_MAX_BITS ? ctx->lists_cache : NULL;
    *out = NULL;
    if (c) {
        pthread_mutex_lock(&c->mu);
        for (int i = 0; i < FA_LISTS_CACHE_ENTRIES; ++i) {
            lists_entry *e = &c->e[i];
            if (entry_matches(e, m, seqlen_q, seqlen_k, block_q, block_k, bytes)) {
                e->refs++;
                e->last_use = ++c->clock;
                *out = &e->lists;
                pthread_mutex_unlock(&c->mu);
                return FA_SUCCESS;
            }
        }
        pthread_mutex_unlock(&c->mu);
    }
    /* a miss: build outside the lock, with a copy of the bits the lists are built from */
    fa_block_lists *own = calloc(1, sizeof *own);
    uint8_t *bits = malloc(bytes ? bytes : 1);
    fa_status st = own && bits ? FA_SUCCESS : FA_ERR_OUT_OF_MEMORY;
    if (st == FA_SUCCESS) {
        memcpy(bits, m->bits, bytes);
        fa_block_mask copy = *m;
        copy.bits = bits;
        st = fa_block_lists_build(&copy, heads_q, seqlen_q, seqlen_k, block_q, block_k, own);
    }
    if (st != FA_SUCCESS) {
        free(own);
        free(bits);
        return st;
    }
    own->bits = bits;
    if (c) {
        pthread_mutex_lock(&c->mu);
        c->builds++;
        lists_entry *slot = NULL;
        for (int i = 0; i < FA_LISTS_CACHE_ENTRIES; ++i) {
            lists_entry *e = &c->e[i];
            if (e->refs == 0 && (!slot || !e->lists.cached || (slot->lists.cached && e->last_use < slot->last_use)))
                slot = e;
        }
        fa_block_mask geometry = *m;
        geometry.bits = bits;
        /* device copies first: a backend that declines keeps the call on lists of its own */
        if (slot && (!ctx->backend->lists_upload || ctx->backend->lists_upload(ctx, own, &geometry) == FA_SUCCESS)) {
            if (slot->lists.cached)
                entry_clear(ctx, slot);
            slot->lists = *own;
            slot->lists.cached = 1;
            slot->mask = geometry;
            slot->seqlen_q = seqlen_q;
            slot->seqlen_k = seqlen_k;
            slot->refs = 1;
            slot->last_use = ++c->clock;
            *out = &slot->lists;
            free(own);
            own = NULL;
        }
        pthread_mutex_unlock(&c->mu);
    }
    if (own)
        *out = own;
    return FA_SUCCESS;
}

void fa_lists_release(fa_context *ctx, fa_block_lists *l)
{
    if (!l)
        return;
    if (!l->cached) { /* the call's own */
        free((void *)l->bits);
        fa_block_lists_free(l);
        free(l);
        return;
    }
    fa_lists_cache *c = ctx->lists_cache;
    pthread_mutex_lock(&c->mu);
    lists_entry *e = (lists_entry *)(void *)l; /* lists is the entry's first member */
    e->refs--;
    pthread_mutex_unlock(&c->mu);
}

void fa_lists_cache_stats(const fa_context *ctx, int *entries, int64_t *builds)
{
    fa_lists_cache *c = ctx->lists_cache;
    *entries = 0;
    *builds = 0;
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < FA_LISTS_CACHE_ENTRIES; ++i)
        *entries += c->e[i].lists.cached != 0;
    *builds = c->builds;
    pthread_mutex_unlock(&c->mu);
}
