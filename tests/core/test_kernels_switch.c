/* test_kernels_switch.c: core/kernels_switch.h, FLASHATTN_KERNELS' tokens. fa_kernels_switch finds
 * a token by its whole name (not a prefix of another) anywhere in the list and copies its value,
 * cut to the buffer; fa_kernels_switch_valid accepts exactly the known tokens, each with a value
 * where it takes one and none where it does not, and names the first bad one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "kernels_switch.h"

static void set_kernels(const char *value)
{
    if (value)
        setenv(FA_KERNELS_ENV, value, 1);
    else
        unsetenv(FA_KERNELS_ENV);
}

static void test_switch_finds_tokens_and_values(void **state)
{
    (void)state;
    char v[16];
    set_kernels(NULL);
    assert_false(fa_kernels_switch("simt", v, sizeof v));
    set_kernels("");
    assert_false(fa_kernels_switch("simt", v, sizeof v));

    set_kernels("simt,opencl-tiles=cpu,sm80-backward=rows");
    strcpy(v, "junk");
    assert_true(fa_kernels_switch("simt", v, sizeof v));
    assert_string_equal(v, ""); /* a token without a value reads as "" */
    assert_true(fa_kernels_switch("opencl-tiles", v, sizeof v));
    assert_string_equal(v, "cpu");
    assert_true(fa_kernels_switch("sm80-backward", v, sizeof v));
    assert_string_equal(v, "rows");
    assert_true(fa_kernels_switch("simt", NULL, 0)); /* presence only */
    /* whole names only: neither a prefix nor an extension of a token matches it */
    assert_false(fa_kernels_switch("sm80", v, sizeof v));
    assert_false(fa_kernels_switch("opencl", v, sizeof v));
    assert_false(fa_kernels_switch("simt-x", v, sizeof v));
    set_kernels("kv-simt");
    assert_false(fa_kernels_switch("simt", v, sizeof v));
    assert_true(fa_kernels_switch("kv-simt", v, sizeof v));

    /* an empty value, and a value cut to the buffer (always terminated) */
    set_kernels("opencl-matrix=");
    strcpy(v, "junk");
    assert_true(fa_kernels_switch("opencl-matrix", v, sizeof v));
    assert_string_equal(v, "");
    set_kernels("sm90,opencl-matrix=emulate");
    char small[4];
    assert_true(fa_kernels_switch("opencl-matrix", small, sizeof small));
    assert_string_equal(small, "emu");
    /* empty items between commas are skipped */
    set_kernels(",,sm90,,opencl-log,");
    assert_true(fa_kernels_switch("sm90", v, sizeof v));
    assert_true(fa_kernels_switch("opencl-log", v, sizeof v));
    assert_string_equal(v, "");
    set_kernels(NULL);
}

static void expect_valid(const char *value)
{
    char bad[48] = "untouched";
    set_kernels(value);
    if (!fa_kernels_switch_valid(bad, sizeof bad)) {
        print_error("FLASHATTN_KERNELS=%s refused (bad \"%s\"), expected accepted\n", value ? value : "(unset)", bad);
        fail();
    }
}

static void expect_refused(const char *value, const char *first_bad)
{
    char bad[48] = "";
    set_kernels(value);
    if (fa_kernels_switch_valid(bad, sizeof bad) || strcmp(bad, first_bad) != 0) {
        print_error("FLASHATTN_KERNELS=%s: bad \"%s\", expected refused with \"%s\"\n", value, bad, first_bad);
        fail();
    }
}

static void test_switch_validity(void **state)
{
    (void)state;
    expect_valid(NULL);
    expect_valid("");
    expect_valid("simt,sm80,sm90,mfma-emulated,sm80-backward=rows,kv-simt");
    expect_valid("opencl-tiles=gpu,opencl-matrix=emulate,opencl-log");
    expect_valid(",simt,");
    expect_refused("no-such-token", "no-such-token");
    expect_refused("simt,SIMT", "SIMT");                     /* names are case-sensitive */
    expect_refused("sm80-backward", "sm80-backward");        /* a value is needed */
    expect_refused("opencl-tiles,simt", "opencl-tiles");
    expect_refused("simt=yes", "simt=yes");                  /* no value is taken */
    expect_refused("simt,sm80,sm8", "sm8");                  /* the first bad one is named */
    expect_refused(" simt", " simt");                        /* no spaces around tokens */
    char bad[4];
    set_kernels("mfma-emulated=1");
    assert_false(fa_kernels_switch_valid(bad, sizeof bad));
    assert_string_equal(bad, "mfm"); /* cut to the buffer */
    set_kernels(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_switch_finds_tokens_and_values),
        cmocka_unit_test(test_switch_validity),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
