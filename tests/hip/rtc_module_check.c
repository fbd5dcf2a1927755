/* rtc_module_check.c: the HIP module of this build through the public API, on a machine with no
 * AMD GPU: it loads (meson's test setup names the build tree's module), the backend reports itself
 * unavailable with the reason ("no device" or "no driver"), a context on it is refused with that
 * reason, its capabilities are listed with the notes saying how its kernels are compiled (argument
 * "rtc": "hipRTC"; "aot": "built for"), and the default context falls back to the CPU backend,
 * which computes. The module opens hipRTC only on a kernel's first compile, so a missing hipRTC
 * (FLASHATTN_HIPRTC_LIBRARY naming no file, as the rtc test sets it) changes none of this. */
#include "flashattn.h"

#include <stdio.h>
#include <string.h>

#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);                                            \
            return 1;                                                                                                  \
        }                                                                                                              \
    } while (0)

int main(int argc, char **argv)
{
    if (argc != 2 || (strcmp(argv[1], "rtc") != 0 && strcmp(argv[1], "aot") != 0)) {
        fprintf(stderr, "usage: rtc_module_check rtc|aot\n");
        return 2;
    }
    char why[512] = "";
    fa_status st = fa_backend_availability("hip", why, sizeof why);
    printf("hip: %s (%s)\n", why, fa_status_string(st));
    if (st == FA_SUCCESS) {
        printf("SKIP: an AMD GPU is present: this check is for machines without one\n");
        return 77;
    }
    CHECK(strncmp(why, "no device", 9) == 0 || strncmp(why, "no driver", 9) == 0);

    fa_context *ctx = NULL;
    CHECK(fa_context_create(&ctx, "hip", 0) != FA_SUCCESS);
    CHECK(ctx == NULL);
    printf("fa_context_create(\"hip\"): %s\n", fa_last_error());
    CHECK(strstr(fa_last_error(), "hip") != NULL);

    fa_capabilities caps;
    CHECK(fa_backend_capabilities("hip", &caps) == FA_SUCCESS);
    printf("notes: %s\n", caps.notes);
    CHECK(caps.features & FA_FEATURE_BACKWARD);
    CHECK(caps.features & FA_FEATURE_KVCACHE);
    CHECK(strstr(caps.notes, strcmp(argv[1], "rtc") == 0 ? "hipRTC" : "built for") != NULL);

    /* the default backend: the CPU's; with one key, each head's output is that key's value row */
    CHECK(fa_context_create(&ctx, NULL, 0) == FA_SUCCESS);
    printf("default backend: %s\n", fa_context_backend_name(ctx));
    CHECK(strcmp(fa_context_backend_name(ctx), "cpu") == 0);
    float q[4] = {1.0f, 2.0f, -1.0f, 0.5f}, k[4] = {0.5f, 0.25f, 2.0f, -3.0f}, v[4] = {3.0f, -4.0f, 7.0f, 8.0f};
    float o[4] = {0};
    const int64_t shape[4] = {1, 1, 2, 2}; /* batch, one position, two heads, d 2 */
    fa_fwd_args a;
    memset(&a, 0, sizeof a);
    a.q = fa_tensor_contiguous(q, FA_DTYPE_F32, 4, shape);
    a.k = fa_tensor_contiguous(k, FA_DTYPE_F32, 4, shape);
    a.v = fa_tensor_contiguous(v, FA_DTYPE_F32, 4, shape);
    a.o = fa_tensor_contiguous(o, FA_DTYPE_F32, 4, shape);
    a.opts = fa_options_default();
    CHECK(fa_forward(ctx, &a) == FA_SUCCESS);
    for (int i = 0; i < 4; ++i)
        CHECK(o[i] == v[i]);
    fa_context_destroy(ctx);
    printf("PASS: the %s module reports no device with the reason; the CPU backend computes\n", argv[1]);
    return 0;
}
