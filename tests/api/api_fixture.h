/* api_fixture.h: the fixture the API tests share (test_api_errors.c, test_api_varlen_limits.c,
 * test_api_edges.c): a CPU context with poisoned buffers for every tensor, the base problem's
 * argument structs, and the checks that a failed call touched no buffer and left a message that
 * says where and what. It includes cmocka and flashattn.h; every function is static inline, so a
 * test file that leaves one unused gets no warning. */
#ifndef FLASHATTN_TESTS_API_FIXTURE_H
#define FLASHATTN_TESTS_API_FIXTURE_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flashattn.h"

/* The base problem: GQA with 4 query heads on 2 KV heads, seqlen_q != seqlen_k. */
enum { BATCH = 2, SEQ_Q = 5, SEQ_K = 7, HEADS_Q = 4, HEADS_KV = 2, HEAD_DIM = 16 };

/* Elements per buffer: room for every mutated shape below, so that a validation bug shows up as
 * a wrong status or a touched buffer rather than as a crash. */
#define CAPACITY 8192
#define POISON_BYTE 0xa5

enum { BUF_Q, BUF_K, BUF_V, BUF_O, BUF_LSE, BUF_DOUT, BUF_DQ, BUF_DK, BUF_DV, BUF_COUNT };

typedef struct fixture {
    fa_context *ctx;
    float *buf[BUF_COUNT];
    unsigned char *snapshot;
} fixture;

static inline int setup(void **state)
{
    fixture *fx = calloc(1, sizeof *fx);
    if (!fx || fa_context_create(&fx->ctx, "cpu", 0) != FA_SUCCESS)
        return -1;
    for (int b = 0; b < BUF_COUNT; ++b) {
        void *p = NULL;
        if (fa_malloc(fx->ctx, CAPACITY * sizeof(float), &p) != FA_SUCCESS)
            return -1;
        fx->buf[b] = p;
    }
    fx->snapshot = malloc((size_t)BUF_COUNT * CAPACITY * sizeof(float));
    if (!fx->snapshot)
        return -1;
    *state = fx;
    return 0;
}

static inline int teardown(void **state)
{
    fixture *fx = *state;
    for (int b = 0; b < BUF_COUNT; ++b)
        fa_free(fx->ctx, fx->buf[b]);
    fa_context_destroy(fx->ctx);
    free(fx->snapshot);
    free(fx);
    return 0;
}

/* Inputs get small finite values, outputs the poison pattern; then a copy of everything. */
static inline void fill_buffers(fixture *fx)
{
    for (int b = 0; b < BUF_COUNT; ++b) {
        int output = b == BUF_O || b == BUF_LSE || b == BUF_DQ || b == BUF_DK || b == BUF_DV;
        if (output) {
            memset(fx->buf[b], POISON_BYTE, CAPACITY * sizeof(float));
        } else {
            for (int i = 0; i < CAPACITY; ++i)
                fx->buf[b][i] = (float)((i * 37 + b * 11) % 17) / 17.0f - 0.5f;
        }
    }
    for (int b = 0; b < BUF_COUNT; ++b)
        memcpy(fx->snapshot + (size_t)b * CAPACITY * sizeof(float), fx->buf[b], CAPACITY * sizeof(float));
}

static const char *const buffer_names[BUF_COUNT] = {"q", "k", "v", "o", "lse", "dout", "dq", "dk", "dv"};

static inline int no_buffer_touched(const fixture *fx, const char *case_name)
{
    int untouched = 1;
    for (int b = 0; b < BUF_COUNT; ++b)
        if (memcmp(fx->snapshot + (size_t)b * CAPACITY * sizeof(float), fx->buf[b], CAPACITY * sizeof(float)) != 0) {
            print_error("%s: buffer %s was modified by a call that failed\n", case_name, buffer_names[b]);
            untouched = 0;
        }
    return untouched;
}

static inline void assert_no_buffer_touched(const fixture *fx, const char *case_name)
{
    if (!no_buffer_touched(fx, case_name))
        fail();
}

static inline void fill_lse_for_backward(fixture *fx)
{
    /* in the backward the LSE is an input; any finite value will do for validation */
    for (int i = 0; i < CAPACITY; ++i)
        fx->buf[BUF_LSE][i] = 1.0f;
    memcpy(fx->snapshot + (size_t)BUF_LSE * CAPACITY * sizeof(float), fx->buf[BUF_LSE], CAPACITY * sizeof(float));
}

static inline fa_tensor tensor4(void *data, fa_dtype dt, int64_t a, int64_t b, int64_t c, int64_t d)
{
    const int64_t shape[4] = {a, b, c, d};
    return fa_tensor_contiguous(data, dt, 4, shape);
}

/* Strides given by hand, for shapes whose contiguous strides would not fit 64 bits. */
static inline fa_tensor tensor4_strided(void *data, int64_t a, int64_t b, int64_t c, int64_t d, int64_t stride0,
                                        int64_t stride1, int64_t stride2)
{
    fa_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = FA_DTYPE_F32;
    t.ndim = 4;
    t.shape[0] = a;
    t.shape[1] = b;
    t.shape[2] = c;
    t.shape[3] = d;
    t.stride[0] = stride0;
    t.stride[1] = stride1;
    t.stride[2] = stride2;
    t.stride[3] = 1;
    return t;
}

static inline fa_tensor tensor3(void *data, fa_dtype dt, int64_t a, int64_t b, int64_t c)
{
    const int64_t shape[3] = {a, b, c};
    return fa_tensor_contiguous(data, dt, 3, shape);
}

static inline fa_tensor tensor2(void *data, fa_dtype dt, int64_t a, int64_t b)
{
    const int64_t shape[2] = {a, b};
    return fa_tensor_contiguous(data, dt, 2, shape);
}

/* The base problem with its sizes overridden (-1 keeps the base value). */
static inline fa_fwd_args make_forward(fixture *fx, int64_t batch, int64_t seq_q, int64_t seq_k)
{
    batch = batch < 0 ? BATCH : batch;
    seq_q = seq_q < 0 ? SEQ_Q : seq_q;
    seq_k = seq_k < 0 ? SEQ_K : seq_k;
    fa_fwd_args a;
    memset(&a, 0, sizeof a);
    a.q = tensor4(fx->buf[BUF_Q], FA_DTYPE_F32, batch, seq_q, HEADS_Q, HEAD_DIM);
    a.k = tensor4(fx->buf[BUF_K], FA_DTYPE_F32, batch, seq_k, HEADS_KV, HEAD_DIM);
    a.v = tensor4(fx->buf[BUF_V], FA_DTYPE_F32, batch, seq_k, HEADS_KV, HEAD_DIM);
    a.o = tensor4(fx->buf[BUF_O], FA_DTYPE_F32, batch, seq_q, HEADS_Q, HEAD_DIM);
    a.lse = tensor3(fx->buf[BUF_LSE], FA_DTYPE_F32, batch, HEADS_Q, seq_q);
    a.varlen = NULL;
    a.opts = fa_options_default();
    return a;
}

static inline fa_bwd_args make_backward(fixture *fx, int64_t batch, int64_t seq_q, int64_t seq_k)
{
    fa_fwd_args f = make_forward(fx, batch, seq_q, seq_k);
    fa_bwd_args a;
    memset(&a, 0, sizeof a);
    a.q = f.q;
    a.k = f.k;
    a.v = f.v;
    a.o = f.o;
    a.lse = f.lse;
    a.dout = f.o;
    a.dout.data = fx->buf[BUF_DOUT];
    a.dq = f.q;
    a.dq.data = fx->buf[BUF_DQ];
    a.dk = f.k;
    a.dk.data = fx->buf[BUF_DK];
    a.dv = f.v;
    a.dv.data = fx->buf[BUF_DV];
    a.opts = f.opts;
    return a;
}

/* Case-insensitive search; a short identifier (a tensor name such as "q" or "lse") must stand as
 * a word of its own, so that "q" is not found inside "sequence". */
static inline int message_mentions(const char *message, const char *needle)
{
    size_t n = strlen(needle), m = strlen(message);
    int as_word = n <= 4;
    for (size_t i = 0; i + n <= m; ++i) {
        size_t j = 0;
        while (j < n && tolower((unsigned char)message[i + j]) == tolower((unsigned char)needle[j]))
            ++j;
        if (j < n)
            continue;
        if (!as_word)
            return 1;
        int left_ok = i == 0 || !(isalnum((unsigned char)message[i - 1]) || message[i - 1] == '_');
        int right_ok = i + n == m || !(isalnum((unsigned char)message[i + n]) || message[i + n] == '_');
        if (left_ok && right_ok)
            return 1;
    }
    return 0;
}

/* A source location as fa_*last_error_location give it: "validate.c:261" (a file name with a dot,
 * a colon, a line number, nothing else). */
static inline int is_source_location(const char *s)
{
    const char *colon = s ? strrchr(s, ':') : NULL;
    if (!colon || colon == s || !colon[1] || !memchr(s, '.', (size_t)(colon - s)) || strchr(s, ' '))
        return 0;
    for (const char *c = colon + 1; *c; ++c)
        if (!isdigit((unsigned char)*c))
            return 0;
    return 1;
}

/* A message carries a C source location ("dispatch.c:196") somewhere in its text. */
static inline int has_source_location(const char *message)
{
    for (const char *m = message; (m = strchr(m, ':')) != NULL; ++m)
        if (m - message >= 2 && isdigit((unsigned char)m[1]) &&
            (strncmp(m - 2, ".c", 2) == 0 || (m - message >= 3 && strncmp(m - 3, ".cu", 3) == 0)))
            return 1;
    return 0;
}

/* The last error must be non-empty, free of the library's file:line (kept apart, in
 * fa_context_last_error_location, which must say where it was raised) and mention each needle. */
static inline int error_message_ok(const fa_context *ctx, const char *case_name, const char *needle_a,
                                   const char *needle_b)
{
    const char *message = fa_context_last_error(ctx);
    const char *location = fa_context_last_error_location(ctx);
    int ok = message != NULL && strlen(message) > 0 && !has_source_location(message) &&
             is_source_location(location);
    if (ok && needle_a)
        ok = message_mentions(message, needle_a);
    if (ok && needle_b)
        ok = message_mentions(message, needle_b);
    if (!ok)
        print_error("%s: last error \"%s\" (location \"%s\") should mention \"%s\" and \"%s\", with file:line in "
                    "the location only\n", case_name, message ? message : "(null)", location ? location : "(null)",
                    needle_a ? needle_a : "", needle_b ? needle_b : "");
    return ok;
}

static inline void assert_error_message(const fa_context *ctx, const char *case_name, const char *needle_a,
                                        const char *needle_b)
{
    if (!error_message_ok(ctx, case_name, needle_a, needle_b))
        fail();
}

/* A fake, never-mapped address: if validation let it through, the test would crash. */
#define FAKE_POINTER ((void *)(uintptr_t)0x1000)

#endif
