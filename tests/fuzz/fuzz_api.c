/* fuzz_api.c: fuzz target for argument validation through the public API on the CPU backend.
 * The input bytes choose a forward or backward call (and fa_plan / fa_query_support on the same
 * arguments), or fa_forward_kvcache (contiguous or paged caches, appended keys, rotary tables,
 * the int32 arrays in range or not): shapes, strides, dtypes, NULL pointers, head dims, windows (INT64 extremes
 * included), softmax scale (NaN, inf), dropout p, varlen cu_seqlens and max_seqlen, block masks,
 * aliased buffers. Each tensor gets a buffer of exactly the bytes its shape and strides address,
 * so AddressSanitizer sees any access outside it. Properties: every call returns a status of the
 * enum and never crashes, hangs or hits undefined behaviour (UBSan); a failed call leaves a
 * message and every buffer byte-identical (inputs and outputs).
 * A tensor whose addressed bytes overflow 64 bits gets a 16-byte buffer (it must be rejected);
 * arguments that are valid but would address more than BUFFER_CAP bytes are not run (the library
 * cannot know a buffer's size, so such a call is the caller's promise, not validation's). */
#include <flashattn.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BUFFER_CAP (1 << 20)

typedef struct reader {
    const uint8_t *p;
    size_t n;
} reader;

static unsigned take(reader *r)
{
    if (!r->n)
        return 0;
    r->n--;
    return *r->p++;
}

static const int64_t extreme_ints[] = {-1, -2, INT64_MIN, INT64_MAX, INT64_MAX - 1, INT32_MAX, (int64_t)INT32_MAX + 1,
                                       (int64_t)1 << 32, (int64_t)1 << 40, (int64_t)1 << 62, -((int64_t)1 << 62),
                                       INT64_MIN + 1, 255, 256, 257, 4096, 65536, 1000003, (int64_t)1 << 31,
                                       INT64_MAX / 2, INT64_MAX / 3 + 1, -1000, 3, 5, 7, 9, 17, 33, 65, 129, 1, 0};

/* mostly 0 .. small, sometimes an extreme value */
static int64_t take_int(reader *r, int64_t small)
{
    unsigned b = take(r);
    if (b < 224)
        return (int64_t)(b % (unsigned)(small + 1));
    return extreme_ints[b - 224];
}

static int64_t take_head_dim(reader *r)
{
    static const int64_t dims[] = {1, 2, 3, 7, 8, 16, 24, 31, 32, 40, 48, 64, 80, 96, 128, 160, 192, 224, 256, 257, 512, 0};
    unsigned b = take(r);
    if (b < 240)
        return dims[b % (sizeof dims / sizeof dims[0])];
    return extreme_ints[b % (sizeof extreme_ints / sizeof extreme_ints[0])];
}

static float take_float(reader *r)
{
    static const float values[] = {0.0f, 1.0f, 0.125f, 0.5f, -1.0f, -0.0f, 1e-30f, 1e-45f, 3e38f, -3e38f, 1e4f, 100.0f};
    unsigned b = take(r);
    switch (b % 16) {
    case 12: return NAN;
    case 13: return INFINITY;
    case 14: return -INFINITY;
    case 15: return (float)(int)(b / 16) / 8.0f;
    default: return values[b % 16];
    }
}

static float take_dropout(reader *r)
{
    static const float values[] = {0.0f, 0.0f, 0.0f, 0.1f, 0.5f, 0.9f, 0.999f, 1.0f, -0.1f, 1e-8f, 0.99999994f, -0.0f};
    unsigned b = take(r);
    switch (b % 16) {
    case 12: return NAN;
    case 13: return INFINITY;
    case 14: return 2.0f;
    case 15: return 0.25f;
    default: return values[b % 16];
    }
}

/* saturating 64-bit arithmetic for the fuzzer's own sizes (its inputs include the extremes) */
static int64_t sat_add(int64_t a, int64_t b)
{
    int64_t x;
    return __builtin_add_overflow(a, b, &x) ? (b > 0 ? INT64_MAX : INT64_MIN) : x;
}

static int64_t sat_mul(int64_t a, int64_t b)
{
    int64_t x;
    return __builtin_mul_overflow(a, b, &x) ? ((a < 0) != (b < 0) ? INT64_MIN : INT64_MAX) : x;
}

static int64_t ceil_div_or(int64_t n, int64_t block, int64_t otherwise)
{
    if (block < 1 || n < 0)
        return otherwise;
    return n / block + (n % block != 0);
}

/* ------------------------------------------------------------------ buffers */

#define MAX_BUFFERS 16

typedef struct buffer {
    uint8_t *data;
    size_t bytes;
    uint8_t *copy; /* contents before the call */
} buffer;

typedef struct arena {
    buffer b[MAX_BUFFERS];
    int n;
    int too_big; /* valid but larger than BUFFER_CAP: the input is not run */
} arena;

static void *arena_alloc(arena *a, size_t bytes, reader *r)
{
    if (a->n == MAX_BUFFERS)
        abort();
    buffer *b = &a->b[a->n++];
    b->bytes = bytes;
    b->data = malloc(bytes ? bytes : 1);
    b->copy = malloc(bytes ? bytes : 1);
    if (!b->data || !b->copy)
        abort();
    /* contents: small finite values mostly, NaN / inf / huge where the input says so */
    unsigned fill = take(r);
    for (size_t i = 0; i < bytes; ++i)
        b->data[i] = (uint8_t)((i * 2654435761u) >> (fill % 24)) & (fill & 0x80 ? 0xff : 0x3b);
    return b->data;
}

static void arena_snapshot(arena *a)
{
    for (int i = 0; i < a->n; ++i)
        memcpy(a->b[i].copy, a->b[i].data, a->b[i].bytes);
}

static int arena_unchanged(const arena *a)
{
    for (int i = 0; i < a->n; ++i)
        if (memcmp(a->b[i].copy, a->b[i].data, a->b[i].bytes) != 0)
            return 0;
    return 1;
}

static void arena_free(arena *a)
{
    for (int i = 0; i < a->n; ++i) {
        free(a->b[i].data);
        free(a->b[i].copy);
    }
    a->n = 0;
}

static size_t dtype_bytes(fa_dtype dt)
{
    size_t s = fa_dtype_size(dt);
    return s ? s : 4;
}

/* The bytes t addresses: (offset of the last element + 1) * element size, computed in 128 bits;
 * 0 for an empty tensor; -1 when a shape or stride is negative or the result exceeds INT64_MAX
 * (the library must reject such a tensor). */
static __int128 tensor_extent(const fa_tensor *t)
{
    if (t->ndim < 1 || t->ndim > FA_MAX_DIMS)
        return 16;
    __int128 last = 0;
    for (int i = 0; i < t->ndim; ++i) {
        if (t->shape[i] < 0 || t->stride[i] < 0)
            return -1;
        if (t->shape[i] == 0)
            return 0;
    }
    for (int i = 0; i < t->ndim; ++i) {
        last += (__int128)(t->shape[i] - 1) * t->stride[i];
        if (last > INT64_MAX)
            return -1;
    }
    __int128 bytes = (last + 1) * (__int128)dtype_bytes(t->dtype);
    return bytes > INT64_MAX ? -1 : bytes;
}

/* Gives t a buffer of exactly its extent (NULL data stays NULL). */
static void attach(arena *a, fa_tensor *t, reader *r)
{
    if (!t->data)
        return;
    __int128 e = tensor_extent(t);
    if (e < 0)
        t->data = arena_alloc(a, 16, r);
    else if (e > BUFFER_CAP)
        a->too_big = 1;
    else
        t->data = arena_alloc(a, (size_t)e, r);
}

static fa_tensor make_tensor(fa_dtype dt, int ndim, const int64_t *shape)
{
    /* data non-NULL as a marker: attach() replaces it with a real buffer */
    static char marker;
    return fa_tensor_contiguous(&marker, dt, ndim, shape);
}

/* One change to a tensor: the input picks the field and the value. */
static void corrupt(fa_tensor *t, reader *r)
{
    unsigned what = take(r) % 8, i = take(r) % FA_MAX_DIMS;
    switch (what) {
    case 0: t->data = NULL; break;
    case 1: t->dtype = (fa_dtype)(take(r) % 5 == 4 ? -1 : (int)(take(r) % 4)); break;
    case 2: t->ndim = (int)(take(r) % 7) - 1; break;
    case 3: t->shape[i] = take_int(r, 9); break;
    case 4: t->stride[i] = take_int(r, 64); break;
    case 5: /* padded, still valid: a larger stride on an outer dimension */
        if ((int)i < t->ndim - 1)
            t->stride[i] = sat_add(t->stride[i], take_int(r, 16));
        break;
    case 6: t->shape[i] = sat_add(t->shape[i], 1); break;
    default: t->stride[i] = t->stride[i] ? sat_add(t->stride[i], -1) : 1; break;
    }
}

/* ------------------------------------------------------------------ the call */

static fa_context *g_ctx;

static void check(int ok, const char *what, fa_status st)
{
    if (!ok) {
        fprintf(stderr, "fuzz_api: property violated: %s (status %d: %s; message: %s)\n", what, (int)st,
                fa_status_string(st), fa_context_last_error(g_ctx));
        abort();
    }
}

static void check_status(fa_status st, arena *a, const char *call)
{
    check(st >= FA_SUCCESS && st <= FA_ERR_INTERNAL, call, st);
    check(st != FA_ERR_INTERNAL, "no internal error", st);
    if (st != FA_SUCCESS) {
        const char *msg = fa_context_last_error(g_ctx);
        check(msg && msg[0], "a failed call leaves a message", st);
        check(arena_unchanged(a), "a failed call touches no buffer", st);
    }
}

/* ------------------------------------------------------------------ fa_forward_kvcache */

/* int32 values for the cache's arrays: mostly in 0 .. limit, sometimes anything */
static int32_t take_i32(reader *r, int64_t limit)
{
    unsigned c = take(r);
    if (c < 224) /* limit may be any int64 (INT64_MAX included): no limit + 1 before the clamp */
        return (int32_t)(limit > 0 ? (int64_t)(c % (unsigned)(limit >= 223 ? 224 : limit + 1)) : 0);
    int64_t v = take_int(r, 100);
    return v > INT32_MAX ? INT32_MAX : v < INT32_MIN ? INT32_MIN : (int32_t)v;
}

/* An int32 array of n entries (exactly what validation reads), or 16 bytes when n is not a size
 * (validation must refuse the call before reading it). NULL when the input says so. */
static int32_t *take_ints(arena *a, reader *r, int64_t n, int64_t limit)
{
    if (take(r) % 16 == 0)
        return NULL;
    if (n < 0 || n > BUFFER_CAP / 4) {
        if (n > BUFFER_CAP / 4)
            a->too_big = 1;
        return arena_alloc(a, 16, r);
    }
    int32_t *x = arena_alloc(a, (size_t)(n > 0 ? n : 1) * 4, r);
    for (int64_t i = 0; i < n; ++i)
        x[i] = take_i32(r, limit);
    return x;
}

/* A contiguous or paged cache, appended keys, rotary tables, the int32 arrays and options, each
 * valid or not as the input says; the same properties as the other calls: a status, and a failed
 * call changes no byte (caches included). */
static void fuzz_kvcache(reader *r, arena *a)
{
    fa_dtype dt = (fa_dtype)(take(r) % 3);
    int64_t batch = take_int(r, 3), sn = take_int(r, 4), hkv = sat_add(1, take_int(r, 2));
    int64_t hq = sat_mul(hkv, sat_add(1, take_int(r, 2))), d = take_head_dim(r);
    if (take(r) % 8 == 0)
        hq = take_int(r, 8);
    const int paged = take(r) % 2;
    int64_t page = paged ? (take(r) % 4 ? 16 * (int64_t)(1 + take(r) % 2) : take_int(r, 40)) : 0;
    int64_t per = paged ? take_int(r, 4) : 0, nb = paged ? take_int(r, 8) : sat_add(batch, take(r) % 2);
    int64_t rows = paged ? page : take_int(r, 70), knew = take(r) % 2 ? take_int(r, 4) : 0;
    int64_t cap = paged ? sat_mul(per, page) : rows;
    int64_t qs[4] = {batch, sn, hq, d}, cs[4] = {nb, rows, hkv, d}, ns[4] = {batch, knew, hkv, d}, ls[3] = {batch, hq, sn};
    int64_t rd2 = take(r) % 2 ? take_int(r, 4) : 0, ro[2] = {sat_add(sat_add(cap, sn), take_int(r, 3)), rd2};
    fa_kvcache_args k;
    memset(&k, 0, sizeof k);
    k.q = make_tensor(dt, 4, qs);
    k.k_cache = make_tensor(dt, 4, cs);
    k.v_cache = make_tensor(dt, 4, cs);
    k.o = make_tensor(take(r) % 4 == 0 ? FA_DTYPE_F32 : dt, 4, qs);
    k.lse = make_tensor(FA_DTYPE_F32, 3, ls);
    if (knew > 0 || take(r) % 4 == 0) {
        k.k_new = make_tensor(dt, 4, ns);
        k.v_new = make_tensor(dt, 4, ns);
    }
    if (rd2 > 0) {
        k.rotary_cos = make_tensor(dt, 2, ro);
        k.rotary_sin = make_tensor(dt, 2, ro);
        k.rotary_interleaved = take(r) % 2;
    }
    if (take(r) % 4 == 0)
        k.lse.data = NULL;
    fa_tensor *t[9] = {&k.q, &k.k_cache, &k.v_cache, &k.o, &k.lse, &k.k_new, &k.v_new, &k.rotary_cos, &k.rotary_sin};
    int ncorrupt = (int)(take(r) % 3);
    for (int c = 0; c < ncorrupt; ++c)
        corrupt(t[take(r) % 9], r);
    for (int i = 0; i < 9; ++i)
        attach(a, t[i], r);
    if (take(r) % 16 == 0 && k.o.data && k.k_cache.data) { /* o and the cache in one buffer: refused */
        __int128 e_o = tensor_extent(&k.o), e_c = tensor_extent(&k.k_cache);
        if (e_o >= 0 && e_c >= 0 && e_o <= BUFFER_CAP && e_c <= BUFFER_CAP) {
            uint8_t *shared = arena_alloc(a, (size_t)(e_o > e_c ? e_o : e_c), r);
            k.o.data = shared;
            k.k_cache.data = shared;
        }
    }
    int64_t nbt = paged ? sat_mul(batch, per) : 0; /* the entries validation reads */
    if (paged) {
        k.block_table_stride = per;
        k.block_table = take_ints(a, r, nbt, nb > 0 ? nb - 1 : 0);
    } else if (take(r) % 16 == 0) {
        k.block_table_stride = take_int(r, 4); /* a stride without a table: refused */
    }
    if (take(r) % 8)
        k.cache_seqlens = take_ints(a, r, batch, knew < 0 || cap <= knew ? 0 : cap - knew);
    if (!paged ? take(r) % 4 == 0 : take(r) % 16 == 0)
        k.cache_batch_idx = take_ints(a, r, batch, nb > 0 ? nb - 1 : 0);
    fa_options o = fa_options_default();
    o.causal = take(r) % 2;
    if (take(r) % 4 == 0)
        o.window_left = take_int(r, 20);
    if (take(r) % 4 == 0)
        o.window_right = take_int(r, 20);
    if (take(r) % 8 == 0)
        o.softcap = take_float(r);
    if (take(r) % 16 == 0)
        o.dropout_p = take_dropout(r); /* refused when > 0 */
    if (take(r) % 16 == 0)
        o.softmax_scale = take_float(r);
    k.opts = o;
    k.num_splits = (int)take_int(r, 5);
    k.check_on_device = (int)(take(r) % 2); /* the CPU backend checks on the host either way */
    if (a->too_big)
        return;
    if (getenv("FUZZ_API_VERBOSE"))
        for (int i = 0; i < 9; ++i)
            fprintf(stderr, "  kv tensor %d data %p dtype %d ndim %d shape %lld %lld %lld %lld stride %lld %lld %lld %lld\n", i,
                    t[i]->data, (int)t[i]->dtype, t[i]->ndim, (long long)t[i]->shape[0], (long long)t[i]->shape[1],
                    (long long)t[i]->shape[2], (long long)t[i]->shape[3], (long long)t[i]->stride[0],
                    (long long)t[i]->stride[1], (long long)t[i]->stride[2], (long long)t[i]->stride[3]);
    arena_snapshot(a);
    fa_status st = fa_forward_kvcache(g_ctx, &k);
    check_status(st, a, "fa_forward_kvcache returns a status");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_ctx && fa_context_create(&g_ctx, "cpu", 0) != FA_SUCCESS) {
        fprintf(stderr, "fuzz_api: no CPU context\n");
        abort();
    }
    reader rd = {data, size}, *r = &rd;
    arena a;
    memset(&a, 0, sizeof a);

    unsigned mode = take(r);
    int backward = mode & 1, varlen = (mode >> 1) & 1;
    fa_context_set_num_threads(g_ctx, 1 + (int)((mode >> 2) & 1));
    if (((mode >> 3) & 3) == 0) { /* a quarter of the inputs: attention over a KV cache */
        fuzz_kvcache(r, &a);
        arena_free(&a);
        return 0;
    }
    fa_dtype dt = (fa_dtype)(take(r) % 3);
    int64_t batch = take_int(r, 3), sq = take_int(r, 70), sk = take_int(r, 70);
    int64_t hkv = sat_add(1, take_int(r, 3)), group = sat_add(1, take_int(r, 3)), d = take_head_dim(r);
    int64_t hq = sat_mul(hkv, group);
    if (take(r) % 8 == 0)
        hq = take_int(r, 8); /* anything, GQA ratio included */

    fa_varlen vl;
    memset(&vl, 0, sizeof vl);
    int32_t *cu[2] = {NULL, NULL};
    int64_t total_q = sat_mul(batch, sq), total_k = sat_mul(batch, sk);
    if (varlen) {
        vl.batch = batch;
        if (take(r) % 4 == 0)
            vl.batch = take_int(r, 5);
        vl.max_seqlen_q = sq;
        vl.max_seqlen_k = sk;
        if (take(r) % 2)
            vl.max_seqlen_q = take_int(r, 80);
        if (take(r) % 2)
            vl.max_seqlen_k = take_int(r, 80);
        for (int w = 0; w < 2; ++w) {
            int64_t n = sat_add(vl.batch, 1);
            if (take(r) % 16 == 0)
                continue; /* NULL */
            if (vl.batch < 0 || vl.batch >= INT32_MAX) {
                cu[w] = arena_alloc(&a, 16, r); /* must be rejected before it is read */
                continue;
            }
            if (n > BUFFER_CAP / 4) {
                a.too_big = 1;
                continue;
            }
            cu[w] = arena_alloc(&a, (size_t)n * 4, r);
            int64_t len = w ? sk : sq, acc = 0;
            for (int64_t b = 0; b <= vl.batch; ++b) {
                cu[w][b] = (int32_t)acc;
                unsigned c = take(r);
                acc = sat_add(acc, c < 200 ? (len < 0 ? 0 : (int64_t)(c % ((uint64_t)len + 1))) : take_int(r, 100));
                if (acc > INT32_MAX || acc < INT32_MIN)
                    acc = c & 1 ? INT32_MAX : INT32_MIN;
            }
            if (take(r) % 8 == 0)
                cu[w][take(r) % (unsigned)n] = (int32_t)take_int(r, 100);
            int64_t total = cu[w][vl.batch];
            if (take(r) % 4 == 0)
                total = take_int(r, 100);
            if (w)
                total_k = total;
            else
                total_q = total;
        }
        vl.cu_seqlens_q = cu[0];
        vl.cu_seqlens_k = cu[1];
    }

    int nd = varlen ? 3 : 4;
    int64_t qs[4] = {batch, sq, hq, d}, ks[4] = {batch, sk, hkv, d}, ls[3] = {batch, hq, sq};
    if (varlen) {
        int64_t q3[3] = {total_q, hq, d}, k3[3] = {total_k, hkv, d}, l2[2] = {hq, total_q};
        memcpy(qs, q3, sizeof q3);
        memcpy(ks, k3, sizeof k3);
        memcpy(ls, l2, sizeof l2);
    }
    fa_dtype out_dt = take(r) % 4 == 0 ? FA_DTYPE_F32 : dt;
    /* forward: q k v o lse; backward adds dout dq dk dv */
    fa_tensor t[9];
    static const char *const names[9] = {"q", "k", "v", "o", "lse", "dout", "dq", "dk", "dv"};
    t[0] = make_tensor(dt, nd, qs);
    t[1] = make_tensor(dt, nd, ks);
    t[2] = make_tensor(dt, nd, ks);
    t[3] = make_tensor(backward ? dt : out_dt, nd, qs);
    t[4] = make_tensor(FA_DTYPE_F32, nd - 1, ls);
    t[5] = make_tensor(dt, nd, qs);
    t[6] = make_tensor(out_dt, nd, qs);
    t[7] = make_tensor(out_dt, nd, ks);
    t[8] = make_tensor(out_dt, nd, ks);
    int ntensors = backward ? 9 : 5;
    if (!backward && take(r) % 4 == 0)
        t[4].data = NULL; /* no LSE */
    int ncorrupt = (int)(take(r) % 4);
    for (int c = 0; c < ncorrupt; ++c)
        corrupt(&t[take(r) % (unsigned)ntensors], r);
    for (int i = 0; i < ntensors; ++i)
        attach(&a, &t[i], r);
    if (take(r) % 16 == 0) { /* an output sharing one buffer with another tensor, at some offset */
        int out = backward ? 6 + (int)(take(r) % 3) : 3 + (int)(take(r) % 2);
        int other = (int)(take(r) % (unsigned)ntensors);
        __int128 e_out = tensor_extent(&t[out]), e_other = tensor_extent(&t[other]);
        if (other != out && t[out].data && t[other].data && e_out >= 0 && e_other >= 0 && e_out <= BUFFER_CAP &&
            e_other <= BUFFER_CAP) {
            size_t off = (size_t)(take(r) % ((unsigned)(e_out / 4) + 1)) * 4;
            size_t bytes = (size_t)e_out > off + (size_t)e_other ? (size_t)e_out : off + (size_t)e_other;
            uint8_t *shared = arena_alloc(&a, bytes, r);
            t[out].data = shared;
            t[other].data = shared + off;
        }
    }

    fa_options o = fa_options_default();
    if (take(r) % 2)
        o.softmax_scale = take_float(r);
    o.causal = take(r) % 2;
    unsigned w = take(r);
    if (w & 1)
        o.window_left = take_int(r, 80);
    if (w & 2)
        o.window_right = take_int(r, 80);
    if (take(r) % 4 == 0) {
        o.dropout_p = take_dropout(r);
        o.dropout_seed = (uint64_t)take_int(r, 1000);
        o.dropout_offset = take(r) % 2 ? UINT64_MAX - (uint64_t)take(r) : (uint64_t)take_int(r, 1000);
    }
    o.deterministic = take(r) % 2;
    if (take(r) % 4 == 0) {
        static const float caps[] = {1.5f, 50.0f, 0.0f, -1.0f, NAN, INFINITY, 1e-30f, 3e38f};
        o.softcap = caps[take(r) % 8];
    }
    if (take(r) % 4 == 0) { /* ALiBi slopes: [hq], [batch][stride], bad strides, inside an output */
        int64_t nb = varlen ? vl.batch : batch;
        o.alibi_batch_stride = take(r) % 2 ? 0 : take(r) % 4 ? sat_add(hq, take_int(r, 3)) : take_int(r, 8);
        int64_t count = hq;
        int bad = o.alibi_batch_stride != 0 && (o.alibi_batch_stride < hq || nb < 0 ||
                                                __builtin_mul_overflow(nb > 0 ? nb - 1 : 0, o.alibi_batch_stride, &count) ||
                                                __builtin_add_overflow(count, hq, &count));
        if (!backward && take(r) % 16 == 0 && t[3].data)
            o.alibi_slopes = (const float *)t[3].data; /* inside the output o: validation must refuse it */
        else if (bad || count < 0)
            o.alibi_slopes = arena_alloc(&a, 16, r); /* validation refuses before any read */
        else if (count > BUFFER_CAP / 4)
            a.too_big = 1;
        else {
            float *sl = arena_alloc(&a, (size_t)(count > 0 ? count : 1) * 4, r);
            for (int64_t i = 0; i < count; ++i)
                sl[i] = (float)(take(r) % 64) / 32.0f;
            o.alibi_slopes = sl;
        }
    } else if (take(r) % 32 == 0) {
        o.alibi_batch_stride = take_int(r, 8); /* a stride without slopes */
    }

    fa_block_mask bm;
    memset(&bm, 0, sizeof bm);
    if (take(r) % 4 == 0) {
        static const int64_t blocks[] = {16, 32, 64, 128, 1, 3, 0, -1, 2, 8, 256, INT64_MAX};
        bm.block_q = blocks[take(r) % 12];
        bm.block_k = blocks[take(r) % 12];
        bm.heads = take(r) % 4 ? (take(r) % 2 ? 1 : hq) : take_int(r, 4);
        int64_t eq = varlen ? vl.max_seqlen_q : sq, ek = varlen ? vl.max_seqlen_k : sk;
        bm.rows = ceil_div_or(eq, bm.block_q, 1);
        bm.cols = ceil_div_or(ek, bm.block_k, 1);
        if (take(r) % 4 == 0)
            bm.rows = take(r) % 2 ? sat_add(bm.rows, 1) : take_int(r, 5);
        if (take(r) % 4 == 0)
            bm.cols = take(r) % 2 ? sat_add(bm.cols, -1) : take_int(r, 5);
        int64_t bytes;
        int overflow = __builtin_mul_overflow(bm.heads, bm.rows, &bytes) || __builtin_mul_overflow(bytes, bm.cols, &bytes);
        if (take(r) % 16 == 0)
            bm.bits = NULL;
        else if (bm.heads < 0 || bm.rows < 0 || bm.cols < 0 || overflow)
            bm.bits = arena_alloc(&a, 16, r);
        else if (bytes > BUFFER_CAP)
            a.too_big = 1;
        else {
            bm.bits = arena_alloc(&a, (size_t)bytes, r);
            unsigned density = take(r);
            for (int64_t i = 0; i < (int64_t)bytes; ++i)
                bm.bits[i] = ((uint64_t)i * 0x9e3779b97f4a7c15ull >> 56) < density;
        }
        o.block_mask = &bm;
    }

    if (getenv("FUZZ_API_VERBOSE")) {
        fprintf(stderr, "%s%s dtype %d out %d batch %lld sq %lld sk %lld hq %lld hkv %lld d %lld threads %d\n",
                backward ? "backward" : "forward", varlen ? " varlen" : "", (int)dt, (int)out_dt, (long long)batch,
                (long long)sq, (long long)sk, (long long)hq, (long long)hkv, (long long)d, 1 + (int)((mode >> 2) & 1));
        if (varlen)
            fprintf(stderr, "  varlen batch %lld max_seqlen %lld %lld cu %p %p\n", (long long)vl.batch,
                    (long long)vl.max_seqlen_q, (long long)vl.max_seqlen_k, (void *)cu[0], (void *)cu[1]);
        for (int i = 0; i < ntensors; ++i)
            fprintf(stderr, "  %-4s data %p dtype %d ndim %d shape %lld %lld %lld %lld stride %lld %lld %lld %lld\n",
                    names[i], t[i].data, (int)t[i].dtype, t[i].ndim, (long long)t[i].shape[0], (long long)t[i].shape[1],
                    (long long)t[i].shape[2], (long long)t[i].shape[3], (long long)t[i].stride[0],
                    (long long)t[i].stride[1], (long long)t[i].stride[2], (long long)t[i].stride[3]);
        fprintf(stderr, "  softcap %g alibi %p stride %lld\n", (double)o.softcap, (const void *)o.alibi_slopes,
                (long long)o.alibi_batch_stride);
        fprintf(stderr, "  scale %g causal %d window %lld %lld dropout %g seed %llu offset %llu det %d mask %s%s\n",
                (double)o.softmax_scale, o.causal, (long long)o.window_left, (long long)o.window_right,
                (double)o.dropout_p, (unsigned long long)o.dropout_seed, (unsigned long long)o.dropout_offset,
                o.deterministic, o.block_mask ? "yes" : "no", a.too_big ? " (too big: not run)" : "");
        if (o.block_mask)
            fprintf(stderr, "  mask heads %lld rows %lld cols %lld block %lld x %lld bits %p\n", (long long)bm.heads,
                    (long long)bm.rows, (long long)bm.cols, (long long)bm.block_q, (long long)bm.block_k,
                    (void *)bm.bits);
    }
    if (!a.too_big) {
        arena_snapshot(&a);
        fa_status st;
        if (backward) {
            fa_bwd_args ba = {.q = t[0], .k = t[1], .v = t[2], .o = t[3], .lse = t[4], .dout = t[5], .dq = t[6],
                              .dk = t[7], .dv = t[8], .varlen = varlen ? &vl : NULL, .opts = o};
            st = fa_backward(g_ctx, &ba);
            check_status(st, &a, "fa_backward returns a status");
        } else {
            fa_fwd_args fa = {.q = t[0], .k = t[1], .v = t[2], .o = t[3], .lse = t[4],
                              .varlen = varlen ? &vl : NULL, .opts = o};
            fa_plan_info plan;
            st = fa_plan(g_ctx, &fa, &plan);
            check_status(st, &a, "fa_plan returns a status");
            if (st == FA_SUCCESS) {
                check(plan.num_q_blocks >= 0 && plan.num_k_blocks >= 0, "fa_plan's block counts are >= 0", st);
                check(plan.block_q > 0 && plan.block_k > 0, "fa_plan's block sizes are > 0", st);
                check(plan.workspace_fwd >= 0 && plan.workspace_bwd >= 0, "fa_plan's workspace sizes are >= 0", st);
            }
            char variant[64];
            st = fa_query_support(g_ctx, &fa, take(r) % 2, variant, sizeof variant);
            check_status(st, &a, "fa_query_support returns a status");
            st = fa_forward(g_ctx, &fa);
            check_status(st, &a, "fa_forward returns a status");
        }
    }
    /* a NULL context or NULL arguments: a status, never a crash */
    if (take(r) % 32 == 0) {
        check(fa_forward(NULL, NULL) != FA_SUCCESS && fa_backward(g_ctx, NULL) != FA_SUCCESS, "NULL arguments",
              FA_SUCCESS);
    }
    arena_free(&a);
    return 0;
}
