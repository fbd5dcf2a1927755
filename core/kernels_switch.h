/* kernels_switch.h: FLASHATTN_KERNELS, the library's one debugging switch. It forces a kernel
 * choice that the choosers would not make, to test a kernel family on hardware that a faster one
 * covers or to compare two: a comma-separated list of tokens, each `name` or `name=value`
 * (docs/options.md lists them). A backend reads the tokens it knows when a context opens;
 * fa_context_create refuses a token that no backend knows, so a misspelling is never silently a
 * no-op. Plain C, header-only: the HIP module reads it too, without linking the core. */
#ifndef FA_KERNELS_SWITCH_H
#define FA_KERNELS_SWITCH_H

#include <stdlib.h>
#include <string.h>

#define FA_KERNELS_ENV "FLASHATTN_KERNELS"

/* Every token, with whether it takes a value. */
static const struct fa_kernels_token_info {
    const char *name;
    int takes_value;
} fa_kernels_tokens[] = {
    {"simt", 0},          /* CUDA, HIP: every call on the SIMT family */
    {"sm80", 0},          /* CUDA: the chooser without the Hopper kernels */
    {"sm90", 0},          /* CUDA: the Hopper forward for every call it has an instance for */
    {"mfma-emulated", 0}, /* CUDA: the HIP backend's MFMA forward, each matrix instruction emulated */
    {"sm80-backward", 1}, /* CUDA: =rows, the sm80 backward's row kernel where the grid one fits */
    {"sm80-bwd-narrow", 0}, /* CUDA: the sm80 d 256 backward on 4 warps over 64 keys a block where 8 fit too */
    {"dsum-zero", 0},     /* CUDA: the fused backwards' dQ accumulator cleared by dsum_kernel, not a memset */
    {"sm80-fwd-stages", 1}, /* CUDA: =1, =2 or =auto (the default): the sm80 forward's K / V stages */
    {"kv-simt", 0},       /* CUDA, HIP: fa_forward_kvcache on the SIMT decode kernel */
    {"kv-mma-4-warps", 0}, /* CUDA: the tensor-core decode kernel with four warps a block where eight fit */
    {"kv-mla-sm90", 0},   /* CUDA: MLA decode (a latent cache) on the Hopper kernel of 64-row tiles wherever it fits */
    {"kv-mla-16-rows", 0}, /* CUDA: MLA decode on the 16-row kernel, never the Hopper one */
    {"fwd-split", 1},     /* CUDA: =N, a forward's keys in N splits wherever a split kernel takes it (1: none) */
    {"kv-prefill-dense", 0}, /* every backend: fa_forward_kvcache's attention on the dense forward */
    {"opencl-tiles", 1},  /* OpenCL: =gpu or =cpu, the kernels and tiles of that device type */
    {"opencl-matrix", 1}, /* OpenCL: =off, =require (an error without it) or =emulate (any device) */
    {"opencl-log", 0},    /* OpenCL: print each program's build log to stderr */
};

/* The length of the token's name in [s, end): up to '=' or the end. */
static inline size_t fa_kernels_name_length(const char *s, const char *end)
{
    const char *eq = (const char *)memchr(s, '=', (size_t)(end - s));
    return (size_t)((eq ? eq : end) - s);
}

/* Whether FLASHATTN_KERNELS holds token `name`; when it does and value is not NULL, its value (the
 * text after '=', "" when none) is copied there, cut to cap - 1 bytes. */
static inline int fa_kernels_switch(const char *name, char *value, size_t cap)
{
    const char *env = getenv(FA_KERNELS_ENV);
    size_t n = strlen(name);
    for (const char *s = env; s && *s;) {
        const char *end = strchr(s, ',');
        if (!end)
            end = s + strlen(s);
        if (fa_kernels_name_length(s, end) == n && memcmp(s, name, n) == 0) {
            if (value && cap) {
                size_t len = s + n < end ? (size_t)(end - s - n - 1) : 0;
                if (len >= cap)
                    len = cap - 1;
                memcpy(value, s + n + (s + n < end), len);
                value[len] = '\0';
            }
            return 1;
        }
        s = *end ? end + 1 : end;
    }
    return 0;
}

/* 1 when every token of FLASHATTN_KERNELS is known and has a value exactly where it takes one;
 * otherwise 0, with the first bad token (cut to cap - 1 bytes) in bad. */
static inline int fa_kernels_switch_valid(char *bad, size_t cap)
{
    const char *env = getenv(FA_KERNELS_ENV);
    for (const char *s = env; s && *s;) {
        const char *end = strchr(s, ',');
        if (!end)
            end = s + strlen(s);
        size_t n = fa_kernels_name_length(s, end);
        int known = 0;
        for (size_t i = 0; i < sizeof fa_kernels_tokens / sizeof fa_kernels_tokens[0]; ++i)
            if (strlen(fa_kernels_tokens[i].name) == n && memcmp(s, fa_kernels_tokens[i].name, n) == 0)
                known = fa_kernels_tokens[i].takes_value == (s + n < end);
        if (!known && end > s) {
            size_t len = (size_t)(end - s) < cap ? (size_t)(end - s) : cap - 1;
            memcpy(bad, s, len);
            bad[len] = '\0';
            return 0;
        }
        s = *end ? end + 1 : end;
    }
    return 1;
}

#endif /* FA_KERNELS_SWITCH_H */
