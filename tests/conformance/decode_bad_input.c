/* decode_bad_input.c: fa_forward_kvcache's bad arguments (decode.c runs them): each "breaker" spoils
 * one argument of a good paged call, which must then return its status, set a message, and leave o
 * and the caches untouched; the bad int32 array values (pages out of range, lengths past the cache,
 * two sequences or one sequence twice appending into one page) also through the device check. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode_case.h"

typedef void (*breaker)(fa_kvcache_args *a, void *scratch);
static void b_null_q(fa_kvcache_args *a, void *s) { (void)s; a->q.data = NULL; }
static void b_page_size(fa_kvcache_args *a, void *s) { (void)s; a->k_cache.shape[1] = a->v_cache.shape[1] = 24; }
static void b_table_range(fa_kvcache_args *a, void *s)
{
    int32_t *t = s; /* holds the case's block table (run_bad): a->block_table may be device memory */
    t[0] = 999; /* sequence 0's first page: in use */
    a->block_table = t;
}
static void b_overflow_len(fa_kvcache_args *a, void *s)
{
    int32_t *t = s;
    t[0] = 0;
    t[1] = (int32_t)(a->block_table_stride * a->k_cache.shape[1]); /* full: no room for the new token */
    a->cache_seqlens = t;
}
/* sequence 1's sixth page (keys 80 .. 95 of its 100): in the second split of run_bad's case without
 * appends (pages of 16, 8 per sequence, two splits of 64 keys) */
static void b_table_range_late(fa_kvcache_args *a, void *s)
{
    int32_t *t = s;
    t[a->block_table_stride + 5] = 999;
    a->block_table = t;
}
static void b_negative_len(fa_kvcache_args *a, void *s) { int32_t *t = s; t[0] = -1; t[1] = 0; a->cache_seqlens = t; }
static void b_rotary_short(fa_kvcache_args *a, void *s) { (void)s; a->rotary_cos.shape[0] = a->rotary_sin.shape[0] = 3; }
static void b_rotary_odd(fa_kvcache_args *a, void *s) { (void)s; a->rotary_cos.shape[1] = a->rotary_sin.shape[1] = a->q.shape[3]; }
static void b_batch_idx_paged(fa_kvcache_args *a, void *s) { int32_t *t = s; t[0] = t[1] = 0; a->cache_batch_idx = t; }
static void b_dropout(fa_kvcache_args *a, void *s) { (void)s; a->opts.dropout_p = 0.1f; }
static void b_splits(fa_kvcache_args *a, void *s) { (void)s; a->num_splits = -2; }
static void b_head_dim(fa_kvcache_args *a, void *s) { (void)s; a->q.shape[3] = FA_MAX_HEAD_DIM_KVCACHE + 24; }
static void b_gqa(fa_kvcache_args *a, void *s) { (void)s; a->q.shape[2] = 3; }
/* d_v is v_cache's last dimension: v_new and o must follow it */
static void b_v_cache_dv(fa_kvcache_args *a, void *s) { (void)s; a->v_cache.shape[3] = 32; }
static void b_v_new_dv(fa_kvcache_args *a, void *s) { (void)s; a->v_new.shape[3] = 32; }
static void b_o_dv(fa_kvcache_args *a, void *s) { (void)s; a->v_cache.shape[3] = a->v_new.shape[3] = 32; }
static void b_dv_above_max(fa_kvcache_args *a, void *s)
{
    (void)s;
    a->v_cache.shape[3] = a->v_new.shape[3] = a->o.shape[3] = FA_MAX_HEAD_DIM_KVCACHE + 24;
}
/* a learnable sink with a NaN (run_bad copies the scratch to the context's memory) */
static void b_sink_nan(fa_kvcache_args *a, void *s)
{
    const float logits[4] = {0.5f, NAN, 1.0f, -1.0f}; /* heads_q = 4 */
    memcpy(s, logits, sizeof logits);
    a->opts.learnable_sink = s;
}
static void b_new_shape(fa_kvcache_args *a, void *s) { (void)s; a->v_new.shape[1] = 2; }
static void b_o_overlaps_cache(fa_kvcache_args *a, void *s) { (void)s; a->o.data = a->k_cache.data; }
/* v_cache two bytes into k_cache, one layout: appending into k_cache would write v_cache's elements
 * (caches of one layout are compared element by element, so this must not pass as interleaved) */
static void b_v_cache_into_k_cache(fa_kvcache_args *a, void *s)
{
    (void)s;
    a->v_cache.data = (char *)a->k_cache.data + 2;
}
static void b_nan_scale(fa_kvcache_args *a, void *s) { (void)s; a->opts.softmax_scale = NAN; }
static void b_page_count_overflow(fa_kvcache_args *a, void *s) { (void)s; a->block_table_stride = INT64_MAX / 8; }
/* run_bad's case: pages of 16, 4 per sequence, lengths 5 and 20, one new token each, rotary
 * positions up to 20 (21 table rows) */
static void b_rotary_one_short(fa_kvcache_args *a, void *s) { (void)s; a->rotary_cos.shape[0] = a->rotary_sin.shape[0] = 20; }
static void b_leftpad_paged(fa_kvcache_args *a, void *s) { int32_t *t = s; t[0] = t[1] = 0; a->cache_leftpad = t; }
static void b_two_seqs_one_page(fa_kvcache_args *a, void *s)
{
    int32_t *t = s; /* sequence 1 reads rows 0 .. 15 of sequence 0's first page, where sequence 0 appends row 5 */
    t[4] = t[0];
    a->block_table = t;
}
static void b_page_twice_in_row(fa_kvcache_args *a, void *s)
{
    int32_t *t = s; /* sequence 1's pages 0 and 1 are one page: its new token (row 4 of page 1) overwrites key 4 */
    t[5] = t[4];
    a->block_table = t;
}

static const struct {
    const char *name;
    breaker fn;
    fa_status want;
} bad[] = {
    {"q NULL", b_null_q, FA_ERR_INVALID_ARG},
    {"page size 24", b_page_size, FA_ERR_INVALID_ARG},
    {"block_table entry out of range", b_table_range, FA_ERR_INVALID_ARG},
    {"block_table entry out of range, second split", b_table_range_late, FA_ERR_INVALID_ARG},
    {"cache full, token appended", b_overflow_len, FA_ERR_INVALID_ARG},
    {"negative cache_seqlens", b_negative_len, FA_ERR_INVALID_ARG},
    {"rotary table too short", b_rotary_short, FA_ERR_INVALID_ARG},
    {"rotary_dim > d", b_rotary_odd, FA_ERR_INVALID_ARG},
    {"cache_batch_idx with a paged cache", b_batch_idx_paged, FA_ERR_INVALID_ARG},
    {"cache_leftpad with a paged cache", b_leftpad_paged, FA_ERR_INVALID_ARG},
    {"dropout", b_dropout, FA_ERR_INVALID_ARG},
    {"num_splits < 0", b_splits, FA_ERR_INVALID_ARG},
    {"head dim above FA_MAX_HEAD_DIM_KVCACHE", b_head_dim, FA_ERR_UNSUPPORTED},
    {"heads_q not a multiple of heads_kv", b_gqa, FA_ERR_INVALID_ARG},
    {"v_cache's head dim d_v not o's", b_v_cache_dv, FA_ERR_INVALID_ARG},
    {"v_new's head dim not v_cache's", b_v_new_dv, FA_ERR_INVALID_ARG},
    {"o of q's head dim, not v's d_v", b_o_dv, FA_ERR_INVALID_ARG},
    {"d_v above FA_MAX_HEAD_DIM_KVCACHE", b_dv_above_max, FA_ERR_UNSUPPORTED},
    {"learnable_sink with a NaN", b_sink_nan, FA_ERR_INVALID_ARG},
    {"v_new of another length", b_new_shape, FA_ERR_INVALID_ARG},
    {"o inside k_cache", b_o_overlaps_cache, FA_ERR_INVALID_ARG},
    {"v_cache one element into k_cache", b_v_cache_into_k_cache, FA_ERR_INVALID_ARG},
    {"NaN scale", b_nan_scale, FA_ERR_INVALID_ARG},
    {"block_table_stride x batch overflows", b_page_count_overflow, FA_ERR_OVERFLOW},
    {"rotary table one row short", b_rotary_one_short, FA_ERR_INVALID_ARG},
    {"two sequences append into one page", b_two_seqs_one_page, FA_ERR_INVALID_ARG},
    {"one page twice in a sequence's row, appended into", b_page_twice_in_row, FA_ERR_INVALID_ARG},
};

/* The bad values of the int32 arrays (and of the rotary rows they need): what a device check
 * finds, and fa_synchronize reports. */
static int value_fault(breaker fn)
{
    return fn == b_table_range || fn == b_table_range_late || fn == b_overflow_len || fn == b_negative_len || fn == b_rotary_short ||
           fn == b_rotary_one_short;
}

/* Points the call's int32 arrays (and the sink) that a breaker set to `scratch` (host memory) at a
 * copy of it in the context's memory. */
static int upload_scratch(fa_context *ctx, fa_kvcache_args *a, const int32_t *scratch, size_t n, dev_case *x)
{
    const int32_t **arrays[4] = {&a->cache_seqlens, &a->block_table, &a->cache_batch_idx, &a->cache_leftpad};
    void *copy = NULL;
    for (int i = 0; i < 4; ++i)
        if (*arrays[i] == scratch) {
            if (!copy && !(copy = track(x, dev(ctx, scratch, sizeof(int32_t) * n))))
                return 0;
            *arrays[i] = copy;
        }
    if ((const void *)a->opts.learnable_sink == (const void *)scratch) {
        if (!copy && !(copy = track(x, dev(ctx, scratch, sizeof(int32_t) * n))))
            return 0;
        a->opts.learnable_sink = copy;
    }
    return 1;
}

/* Bad cache_leftpad values on a good contiguous call (lengths 5 and 20, pads 1 and 3, one new
 * token): FA_ERR_INVALID_ARG naming the sequence and the value, o and the caches untouched. */
static int run_bad_leftpad(fa_context *ctx)
{
    const dcase c = {"bad-leftpad", F16, 2, 1, 4, 2, 64, 0, 64, {5, 20}, 1, 32, 0, 1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    static const struct {
        const char *name;
        int32_t pads[2];
        int alias_o; /* the pads inside o instead */
        const char *msg;
    } cases[] = {
        {"negative cache_leftpad", {-1, 3}, 0, "cache_leftpad[0] = -1"},
        {"cache_leftpad past cache_seqlens", {1, 21}, 0, "cache_leftpad[1] = 21"},
        {"cache_leftpad far past the cache", {INT32_MAX, 3}, 0, "cache_leftpad[0] = 2147483647"},
        {"cache_leftpad inside o", {1, 3}, 1, "cache_leftpad overlaps o"},
    };
    const int64_t good[2] = {1, 3};
    int failures = 0;
    const size_t es = esz(c.dtype);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        host_case h;
        make_host(&c, &h, 98);
        set_leftpad(&c, &h, good);
        memcpy(h.pads, cases[i].pads, sizeof cases[i].pads);
        dev_case x;
        void *o0 = NULL, *o1 = NULL, *k1 = NULL, *v1 = NULL;
        fa_status st = FA_ERR_INTERNAL;
        if (make_dev(ctx, &c, &h, &x)) {
            fa_kvcache_args a = x.a;
            if (cases[i].alias_o)
                a.cache_leftpad = a.o.data;
            o0 = back(ctx, x.a.o.data, es * (size_t)h.qn);
            st = fa_forward_kvcache(ctx, &a);
            o1 = back(ctx, x.a.o.data, es * (size_t)h.qn);
            k1 = back(ctx, x.a.k_cache.data, es * (size_t)h.cn);
            v1 = back(ctx, x.a.v_cache.data, es * (size_t)h.cn);
        }
        int untouched = o0 && o1 && k1 && v1 && memcmp(o0, o1, es * (size_t)h.qn) == 0 &&
                        memcmp(k1, h.kc, es * (size_t)h.cn) == 0 && memcmp(v1, h.vc, es * (size_t)h.cn) == 0;
        const char *msg = fa_context_last_error(ctx);
        const int ok = st == FA_ERR_INVALID_ARG && untouched && msg && strstr(msg, cases[i].msg);
        printf("  bad argument, %s: %s%s (%s)\n", cases[i].name, fa_status_string(st),
               untouched ? "" : ", OUTPUTS CHANGED", msg);
        if (!ok) {
            printf("    FAILED: expected FA_ERR_INVALID_ARG saying \"%s\", outputs untouched\n", cases[i].msg);
            ++failures;
        }
        free(o0), free(o1), free(k1), free(v1);
        free_dev(ctx, &x);
        free_host(&h);
    }
    return failures;
}

/* The bad calls on case c, one new token appended (knew 1), or none and two splits asked for
 * (no_append: the bad array values only, the late page among them), each checked as run_bad
 * describes. */
/* whether the n bytes of device output o are `want` (NULL: never) */
static int output_is(fa_context *ctx, const void *o, const void *want, size_t n)
{
    void *got = back(ctx, o, n);
    const int same = want && got && memcmp(want, got, n) == 0;
    free(got);
    return same;
}

static int run_bad_case(fa_context *ctx, const dcase *c, int device_check_pass, int no_append)
{
    host_case h;
    make_host(c, &h, 99);
    if (c->batch * h.pages_per_seq > 64) {
        printf("  bad: the block table does not fit the scratch array\n");
        free_host(&h);
        return 1;
    }
    int failures = 0;
    const size_t es = esz(c->dtype);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
        const int rotary_breaker = bad[i].fn == b_rotary_short || bad[i].fn == b_rotary_one_short || bad[i].fn == b_rotary_odd;
        if (((device_check_pass || no_append) && !value_fault(bad[i].fn)) || (no_append && bad[i].fn == b_overflow_len) ||
            (!no_append && bad[i].fn == b_table_range_late) || (c->rotary_dim == 0 && rotary_breaker))
            continue;
        dev_case x;
        int32_t scratch[64];
        memcpy(scratch, h.table, sizeof(int32_t) * (size_t)(c->batch * h.pages_per_seq));
        int made = make_dev(ctx, c, &h, &x);
        if (no_append)
            x.a.num_splits = 2;
        fa_kvcache_args a = x.a;
        bad[i].fn(&a, scratch);
        if (!made || !upload_scratch(ctx, &a, scratch, 64, &x)) {
            printf("  bad: cannot allocate\n");
            free_dev(ctx, &x);
            ++failures;
            continue;
        }
        /* without appends, the good call's output first, and that of the same call with the second
         * sequence cut to 50 keys (all in the first split, the second split keyless): after the
         * fault both must give theirs again, so a fault leaves nothing behind that a later call
         * reads (the device-checked calls in splits share the context's scratch and fault record;
         * a keyless split finishes first, so state that let it finish the call early shows) */
        void *o_good = NULL, *o_short = NULL, *lens_short = NULL;
        fa_kvcache_args shortened = x.a;
        if (device_check_pass && no_append) {
            const int32_t lens[2] = {(int32_t)c->lens[0], 50};
            lens_short = dev(ctx, lens, sizeof lens);
            shortened.cache_seqlens = lens_short;
            if (lens_short && fa_forward_kvcache(ctx, &shortened) == FA_SUCCESS && fa_synchronize(ctx) == FA_SUCCESS)
                o_short = back(ctx, x.a.o.data, es * (size_t)h.qn);
            if (fa_forward_kvcache(ctx, &x.a) == FA_SUCCESS && fa_synchronize(ctx) == FA_SUCCESS)
                o_good = back(ctx, x.a.o.data, es * (size_t)h.qn);
        }
        void *o0 = back(ctx, x.a.o.data, es * (size_t)h.qn);
        fa_status st = fa_forward_kvcache(ctx, &a), st_good = FA_SUCCESS, st_after = FA_SUCCESS;
        int deferred = 0;
        if (device_check_pass) {
            deferred = st == FA_SUCCESS;
            st_good = fa_forward_kvcache(ctx, &x.a); /* must write nothing: the fault is not yet reported */
            if (deferred)
                st = fa_synchronize(ctx);
        }
        void *o1 = back(ctx, x.a.o.data, es * (size_t)h.qn), *k1 = back(ctx, x.a.k_cache.data, es * (size_t)h.cn);
        void *v1 = back(ctx, x.a.v_cache.data, es * (size_t)h.cn);
        int untouched = o0 && o1 && k1 && v1 && memcmp(o0, o1, es * (size_t)h.qn) == 0 &&
                        memcmp(k1, h.kc, es * (size_t)h.cn) == 0 && memcmp(v1, h.vc, es * (size_t)h.cn) == 0;
        const char *msg = fa_context_last_error(ctx);
        int ok = st == bad[i].want && untouched && msg && msg[0];
        printf("  bad argument%s%s, %s: %s%s (%s)\n",
               !device_check_pass ? ""
               : no_append        ? " (checked on the device, nothing appended, 2 splits)"
                                  : " (checked on the device)",
               c->rotary_dim ? "" : " (no rotary)", bad[i].name, fa_status_string(st), untouched ? "" : ", OUTPUTS CHANGED", msg);
        if (device_check_pass) {
            /* reported once: the same context then runs the good call */
            int same = 1;
            if (no_append) {
                st_after = fa_forward_kvcache(ctx, &shortened);
                if (st_after == FA_SUCCESS)
                    st_after = fa_synchronize(ctx);
                same = st_after == FA_SUCCESS && output_is(ctx, x.a.o.data, o_short, es * (size_t)h.qn);
            }
            if (st_after == FA_SUCCESS)
                st_after = fa_forward_kvcache(ctx, &x.a);
            if (st_after == FA_SUCCESS)
                st_after = fa_synchronize(ctx);
            if (no_append)
                same = same && st_after == FA_SUCCESS && output_is(ctx, x.a.o.data, o_good, es * (size_t)h.qn);
            ok = ok && deferred && st_good == FA_SUCCESS && st_after == FA_SUCCESS && same;
            if (!deferred || st_good != FA_SUCCESS || st_after != FA_SUCCESS || !same)
                printf("    the call %s, the good call after it %s, the good call after fa_synchronize %s%s\n",
                       deferred ? "returned FA_SUCCESS" : "was refused at once", fa_status_string(st_good),
                       fa_status_string(st_after), same ? "" : ", OUTPUTS NOT THOSE OF THE GOOD CALLS BEFORE IT");
        }
        free(o_good);
        free(o_short);
        if (lens_short)
            fa_free(ctx, lens_short);
        if (!ok) {
            printf("    FAILED: expected %s with outputs untouched\n", fa_status_string(bad[i].want));
            ++failures;
        }
        free(o0), free(o1), free(k1), free(v1);
        free_dev(ctx, &x);
    }
    free_host(&h);
    return failures;
}

/* Each bad call returns its status and leaves o and the caches as they were. With check_on_device
 * (device_check_pass) only the bad array values are tried: the call returns FA_SUCCESS, a good
 * call made after it writes nothing either, fa_synchronize returns the status, and after that a
 * good call runs again (without appends, giving the outputs good calls gave before the bad one).
 * The bad array values are tried a second time with no token appended, in two splits (pages of
 * 16, 8 per sequence, lengths 5 and 100: where a GPU's decode blocks check what they read instead
 * of a check kernel), adding a bad page in the second split and leaving out the full cache, which
 * only an appended token overflows. Both are run with rotary and without (then the rotary
 * breakers are left out). */
int run_bad(fa_context *ctx, int device_check_pass)
{
    const dcase c = {"bad", B16, 2, 1, 4, 2, 64, 16, 64, {5, 20}, 1, 32, 0, 0, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    const dcase late = {"bad-no-append", B16, 2, 1, 4, 2, 64, 16, 128, {5, 100}, 0, 32, 0, 0, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    /* without rotary, one new token: the GPU's tensor-core decode kernel copies keys before it has
     * checked the block's pages and length (its early copies, clamped into the pool) */
    const dcase plain = {"bad-no-rotary", B16, 2, 1, 4, 2, 64, 16, 64, {5, 20}, 1, 0, 0, 0, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    const dcase plain_late = {"bad-no-append-no-rotary", B16, 2, 1, 4, 2, 64, 16, 128, {5, 100}, 0, 0, 0, 0, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    int failures = run_bad_case(ctx, &c, device_check_pass, 0);
    failures += run_bad_case(ctx, &late, device_check_pass, 1);
    failures += run_bad_case(ctx, &plain, device_check_pass, 0);
    failures += run_bad_case(ctx, &plain_late, device_check_pass, 1);
    if (!device_check_pass) /* the devices that check values do not take cache_leftpad */
        failures += run_bad_leftpad(ctx);
    if (fa_forward_kvcache(ctx, NULL) != FA_ERR_INVALID_ARG || fa_forward_kvcache(NULL, NULL) != FA_ERR_INVALID_ARG) {
        printf("  bad argument, NULL args / context: not FA_ERR_INVALID_ARG\n    FAILED\n");
        ++failures;
    }
    return failures;
}
