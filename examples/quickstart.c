/* examples/quickstart.c: causal attention forward on the CPU backend through include/flashattn.h
 * alone, every status checked. It checks one result by hand: under the causal mask the first
 * query sees only the first key, so its output row is that key's V row and its LSE that score. */
#include <flashattn.h>
#include <math.h>
#include <stdio.h>

enum { BATCH = 1, SEQLEN = 128, HEADS = 4, DIM = 64, N = BATCH * SEQLEN * HEADS * DIM };
static float q[N], k[N], v[N], o[N], lse[BATCH * HEADS * SEQLEN];

#define CHECK(call) do { if ((st = (call)) != FA_SUCCESS) goto done; } while (0)

int main(void) {
    for (int i = 0; i < N; i++) {
        q[i] = sinf(0.01f * i);
        k[i] = cosf(0.02f * i);
        v[i] = sinf(0.03f * i + 1.0f);
    }
    fa_context *ctx;
    fa_status st = fa_context_create(&ctx, "cpu", 0); /* NULL instead of "cpu": the best backend */
    if (st != FA_SUCCESS) {
        fprintf(stderr, "fa_context_create: %s: %s\n", fa_status_string(st), fa_last_error());
        return 1;
    }
    /* buffers in the context's memory (device memory on a GPU backend), filled from the host */
    void *dq = NULL, *dk = NULL, *dv = NULL, *d_o = NULL, *dlse = NULL;
    int64_t shape[4] = {BATCH, SEQLEN, HEADS, DIM}, lse_shape[3] = {BATCH, HEADS, SEQLEN};
    CHECK(fa_malloc(ctx, sizeof q, &dq));
    CHECK(fa_malloc(ctx, sizeof k, &dk));
    CHECK(fa_malloc(ctx, sizeof v, &dv));
    CHECK(fa_malloc(ctx, sizeof o, &d_o));
    CHECK(fa_malloc(ctx, sizeof lse, &dlse));
    CHECK(fa_memcpy(ctx, dq, q, sizeof q, FA_COPY_HOST_TO_DEVICE));
    CHECK(fa_memcpy(ctx, dk, k, sizeof k, FA_COPY_HOST_TO_DEVICE));
    CHECK(fa_memcpy(ctx, dv, v, sizeof v, FA_COPY_HOST_TO_DEVICE));

    fa_fwd_args args = {
        .q = fa_tensor_contiguous(dq, FA_DTYPE_F32, 4, shape), /* [batch, seqlen, heads, d] */
        .k = fa_tensor_contiguous(dk, FA_DTYPE_F32, 4, shape),
        .v = fa_tensor_contiguous(dv, FA_DTYPE_F32, 4, shape),
        .o = fa_tensor_contiguous(d_o, FA_DTYPE_F32, 4, shape),
        .lse = fa_tensor_contiguous(dlse, FA_DTYPE_F32, 3, lse_shape), /* [batch, heads, seqlen] */
        .opts = fa_options_default(), /* scale 1/sqrt(d), no mask, no dropout */
    };
    args.opts.causal = 1;
    CHECK(fa_forward(ctx, &args));
    CHECK(fa_memcpy(ctx, o, d_o, sizeof o, FA_COPY_DEVICE_TO_HOST));
    CHECK(fa_memcpy(ctx, lse, dlse, sizeof lse, FA_COPY_DEVICE_TO_HOST));
done:
    if (st != FA_SUCCESS)
        fprintf(stderr, "flashattn: %s: %s\n", fa_status_string(st), fa_context_last_error(ctx));
    void *buffers[] = {dq, dk, dv, d_o, dlse};
    for (int i = 0; i < 5; i++)
        if (buffers[i]) fa_free(ctx, buffers[i]);
    fa_context_destroy(ctx);
    if (st != FA_SUCCESS) return 1;

    double worst = 0; /* query 0 of each head h: O = V of key 0, LSE = q0 . k0 / sqrt(d) */
    for (int h = 0; h < HEADS; h++) {
        double score = 0;
        for (int c = 0; c < DIM; c++) {
            score += (double)q[h * DIM + c] * k[h * DIM + c] / sqrt(DIM);
            worst = fmax(worst, fabs(o[h * DIM + c] - v[h * DIM + c]));
        }
        worst = fmax(worst, fabs(lse[h * SEQLEN] - score));
    }
    printf("causal forward, %d tokens, %d heads, d %d, cpu backend: first rows' max error %.1e\n",
           SEQLEN, HEADS, DIM, worst);
    return worst <= 1e-5 ? 0 : 1;
}
