/* test_api_indexing64.c: 64-bit element offsets through the public API on the CPU backend.
 * The second batch of every tensor sits (1 << 31) + 256 elements (over 4 GiB of fp16) past the
 * first, so any 32-bit index arithmetic wraps; its output must equal, bit for bit, the same
 * computation on a compact copy. Only a few pages of the huge mappings are ever touched. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "flashattn.h"

enum { BATCH = 2, SEQ_Q = 2, SEQ_K = 3, HEADS = 1, HEAD_DIM = 64 };

/* Elements between batches: past 2^31, and a multiple of 64 so rows stay aligned. */
static const int64_t far_batch_stride = ((int64_t)1 << 31) + 256;

/* Inside one batch slot of the input mapping, Q, K and V sit at these element offsets. */
enum { Q_AT = 0, K_AT = 1024, V_AT = 2048, SLOT = 4096 };

#ifndef MAP_NORESERVE
#define MAP_NORESERVE 0
#endif

/* Reserves address space without committing it: pages materialise only where written. */
static void *reserve(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static fa_tensor strided(void *data, int64_t seqlen, int64_t batch_stride)
{
    const int64_t shape[4] = {BATCH, seqlen, HEADS, HEAD_DIM};
    fa_tensor t = fa_tensor_contiguous(data, FA_DTYPE_F16, 4, shape);
    t.stride[0] = batch_stride;
    return t;
}

static uint16_t input_value(int tensor, int64_t b, int64_t row, int64_t c)
{
    /* distinct per batch, so reading the wrong batch cannot go unnoticed */
    float x = (float)((tensor * 131 + b * 977 + row * 31 + c * 7) % 97) / 48.0f - 1.0f;
    return fa_f32_to_f16(x);
}

static void test_far_batch_matches_compact_copy(void **state)
{
    (void)state;
    const size_t in_bytes = (size_t)(far_batch_stride + SLOT) * sizeof(uint16_t);
    const size_t out_bytes = (size_t)(far_batch_stride + SLOT) * sizeof(uint16_t);
    uint16_t *far_in = reserve(in_bytes);
    uint16_t *far_out = reserve(out_bytes);
    if (!far_in || !far_out) {
        if (far_in)
            munmap(far_in, in_bytes);
        if (far_out)
            munmap(far_out, out_bytes);
        skip(); /* no room for 8 GiB of address space: nothing to test here */
    }
    /* compact: the same values with batch stride SLOT */
    uint16_t *near_in = calloc((size_t)BATCH * SLOT, sizeof(uint16_t));
    uint16_t *near_out = calloc((size_t)BATCH * SLOT, sizeof(uint16_t));
    assert_non_null(near_in);
    assert_non_null(near_out);
    const int at[3] = {Q_AT, K_AT, V_AT}, rows[3] = {SEQ_Q, SEQ_K, SEQ_K};
    for (int t = 0; t < 3; ++t)
        for (int64_t b = 0; b < BATCH; ++b)
            for (int64_t r = 0; r < rows[t]; ++r)
                for (int64_t c = 0; c < HEAD_DIM; ++c) {
                    uint16_t value = input_value(t, b, r, c);
                    far_in[b * far_batch_stride + at[t] + r * HEAD_DIM + c] = value;
                    near_in[b * SLOT + at[t] + r * HEAD_DIM + c] = value;
                }

    fa_context *ctx = NULL;
    assert_int_equal(fa_context_create(&ctx, "cpu", 0), FA_SUCCESS);
    float far_lse[BATCH * HEADS * SEQ_Q], near_lse[BATCH * HEADS * SEQ_Q];
    const int64_t lse_shape[3] = {BATCH, HEADS, SEQ_Q};

    fa_fwd_args far;
    memset(&far, 0, sizeof far);
    far.q = strided(far_in + Q_AT, SEQ_Q, far_batch_stride);
    far.k = strided(far_in + K_AT, SEQ_K, far_batch_stride);
    far.v = strided(far_in + V_AT, SEQ_K, far_batch_stride);
    far.o = strided(far_out, SEQ_Q, far_batch_stride);
    far.lse = fa_tensor_contiguous(far_lse, FA_DTYPE_F32, 3, lse_shape);
    far.opts = fa_options_default();
    far.opts.causal = 1; /* so the rows differ in what they see */

    fa_fwd_args near = far;
    near.q = strided(near_in + Q_AT, SEQ_Q, SLOT);
    near.k = strided(near_in + K_AT, SEQ_K, SLOT);
    near.v = strided(near_in + V_AT, SEQ_K, SLOT);
    near.o = strided(near_out, SEQ_Q, SLOT);
    near.lse = fa_tensor_contiguous(near_lse, FA_DTYPE_F32, 3, lse_shape);

    fa_status st = fa_forward(ctx, &far);
    if (st != FA_SUCCESS)
        print_error("far forward: %s\n", fa_context_last_error(ctx));
    assert_int_equal(st, FA_SUCCESS);
    assert_int_equal(fa_forward(ctx, &near), FA_SUCCESS);

    for (int64_t b = 0; b < BATCH; ++b)
        for (int64_t r = 0; r < SEQ_Q; ++r) {
            const uint16_t *far_row = far_out + b * far_batch_stride + r * HEAD_DIM;
            const uint16_t *near_row = near_out + b * SLOT + r * HEAD_DIM;
            if (memcmp(far_row, near_row, HEAD_DIM * sizeof(uint16_t)) != 0) {
                print_error("batch %lld row %lld: output at element offset %lld differs from the compact copy\n",
                            (long long)b, (long long)r, (long long)(b * far_batch_stride + r * HEAD_DIM));
                fail();
            }
            assert_memory_equal(&far_lse[b * SEQ_Q + r], &near_lse[b * SEQ_Q + r], sizeof(float));
        }
    /* the two batches really hold different answers (so a kernel that read batch 0 twice fails) */
    assert_memory_not_equal(far_out, far_out + far_batch_stride, HEAD_DIM * sizeof(uint16_t));
    /* and the answers are attention: finite and within the range of V */
    for (int64_t c = 0; c < HEAD_DIM; ++c) {
        float x = fa_f16_to_f32(far_out[far_batch_stride + c]);
        assert_true(isfinite(x) && fabsf(x) <= 1.0f);
    }

    fa_context_destroy(ctx);
    free(near_in);
    free(near_out);
    munmap(far_in, in_bytes);
    munmap(far_out, out_bytes);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_far_batch_matches_compact_copy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
