/* test_runtime_absent.c: the library without the vendor runtimes, simulated by naming
 * files that do not exist (FLASHATTN_OPENCL_LIBRARY, FLASHATTN_HIP_MODULE; meson sets them): it
 * loads, the CPU backend computes, and each GPU backend compiled in is unavailable with the
 * loader's message: fa_backend_availability says "library not found", fa_device_count is 0, and a
 * context on it is FA_ERR_NO_BACKEND whose message says why. Through flashattn.h only.
 * With the argument "present" it checks the other side instead: the build tree's HIP module loads
 * (its availability is anything but a load failure: no AMD GPU here means "no device"). */
#include "flashattn.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static int compiled_in(const char *name)
{
    for (int i = 0; i < fa_backend_count(); ++i)
        if (strcmp(fa_backend_name(i), name) == 0)
            return 1;
    return 0;
}

static void check_absent(const char *backend, const char *path)
{
    if (!compiled_in(backend)) {
        print_message("%s is not compiled in: nothing to check\n", backend);
        return;
    }
    char why[512] = "";
    assert_int_equal(fa_backend_availability(backend, why, sizeof why), FA_ERR_NO_BACKEND);
    print_message("%s: %s\n", backend, why);
    assert_non_null(strstr(why, "library not found: "));
    assert_non_null(strstr(why, path));
    int n = -1;
    assert_int_equal(fa_device_count(backend, &n), FA_SUCCESS);
    assert_int_equal(n, 0);
    char name[64];
    assert_int_equal(fa_device_name(backend, 0, name, sizeof name), FA_ERR_NO_DEVICE);
    fa_context *ctx = (fa_context *)&n; /* set to NULL by the failing call */
    assert_int_equal(fa_context_create(&ctx, backend, 0), FA_ERR_NO_BACKEND);
    assert_null(ctx);
    const char *msg = fa_last_error();
    print_message("fa_context_create(\"%s\"): %s\n", backend, msg);
    assert_non_null(strstr(msg, backend));
    assert_non_null(strstr(msg, "library not found: "));
    assert_non_null(strstr(msg, path));
}

static void opencl_absent(void **state)
{
    (void)state;
    check_absent("opencl", getenv("FLASHATTN_OPENCL_LIBRARY") ? getenv("FLASHATTN_OPENCL_LIBRARY") : "?");
}

static void hip_absent(void **state)
{
    (void)state;
    check_absent("hip", getenv("FLASHATTN_HIP_MODULE") ? getenv("FLASHATTN_HIP_MODULE") : "?");
}

/* The default context is on a backend that is present (the CPU's, or CUDA's where a GPU is), never on
 * an absent one; the CPU backend computes: one query row attends to two keys. */
static void cpu_works(void **state)
{
    (void)state;
    fa_context *ctx = NULL;
    assert_int_equal(fa_context_create(&ctx, NULL, 0), FA_SUCCESS);
    const char *chosen = fa_context_backend_name(ctx);
    print_message("default backend: %s\n", chosen);
    assert_true(strcmp(chosen, "opencl") != 0 && strcmp(chosen, "hip") != 0);
    fa_context_destroy(ctx);
    ctx = NULL;
    assert_int_equal(fa_context_create(&ctx, "cpu", 0), FA_SUCCESS);
    assert_string_equal(fa_context_backend_name(ctx), "cpu");
    char why[256];
    assert_int_equal(fa_backend_availability("cpu", why, sizeof why), FA_SUCCESS);
    assert_non_null(strstr(why, "available: "));
    float q[2] = {1.0f, 0.0f}, k[4] = {1.0f, 0.0f, 0.0f, 1.0f}, v[4] = {1.0f, 2.0f, 3.0f, 4.0f}, o[2] = {0};
    const int64_t qs[4] = {1, 1, 1, 2}, ks[4] = {1, 2, 1, 2};
    fa_fwd_args a;
    memset(&a, 0, sizeof a);
    a.q = fa_tensor_contiguous(q, FA_DTYPE_F32, 4, qs);
    a.k = fa_tensor_contiguous(k, FA_DTYPE_F32, 4, ks);
    a.v = fa_tensor_contiguous(v, FA_DTYPE_F32, 4, ks);
    a.o = fa_tensor_contiguous(o, FA_DTYPE_F32, 4, qs);
    a.opts = fa_options_default();
    a.opts.softmax_scale = 1.0f;
    assert_int_equal(fa_forward(ctx, &a), FA_SUCCESS);
    /* weights softmax(1, 0) over the rows (1, 2) and (3, 4) of v */
    const double w0 = exp(1.0) / (exp(1.0) + 1.0), w1 = 1.0 - w0;
    assert_true(fabs(o[0] - (w0 * 1 + w1 * 3)) < 1e-5);
    assert_true(fabs(o[1] - (w0 * 2 + w1 * 4)) < 1e-5);
    fa_context_destroy(ctx);
}

static void hip_module_loads(void **state)
{
    (void)state;
    if (!compiled_in("hip")) {
        print_message("hip is not compiled in: nothing to check\n");
        return;
    }
    char why[512] = "";
    fa_status st = fa_backend_availability("hip", why, sizeof why);
    print_message("hip (FLASHATTN_HIP_MODULE=%s): %s\n", getenv("FLASHATTN_HIP_MODULE") ? getenv("FLASHATTN_HIP_MODULE") : "(unset)", why);
    assert_null(strstr(why, "library not"));
    assert_true(st == FA_SUCCESS || strncmp(why, "no device", 9) == 0 || strncmp(why, "no driver", 9) == 0);
    fa_capabilities caps;
    assert_int_equal(fa_backend_capabilities("hip", &caps), FA_SUCCESS);
    assert_true(caps.features & FA_FEATURE_BACKWARD);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "present") == 0) {
        const struct CMUnitTest present[] = {cmocka_unit_test(hip_module_loads)};
        return cmocka_run_group_tests(present, NULL, NULL);
    }
    const struct CMUnitTest absent[] = {
        cmocka_unit_test(opencl_absent),
        cmocka_unit_test(hip_absent),
        cmocka_unit_test(cpu_works),
    };
    return cmocka_run_group_tests(absent, NULL, NULL);
}
