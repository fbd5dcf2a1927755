/* programs.c: the kernels' programs. The .cl files in kernels/ are embedded at build time
 * (embed_cl.py) and compiled at first use per (kernels, dtype, head dims d and d_v, tile shape,
 * score modifiers, learnable sink): the options string is the key of the context's list, and a hash of the source,
 * options, device and driver names the binary in the disk cache (core/kernel_cache.c, kind "opencl"). */
#include "opencl_backend.h"
#include "kernel_cache.h"
#include "kernels_switch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern const char fa_opencl_source[];
extern const size_t fa_opencl_source_len;

void ocl_release_programs(ocl_state *s)
{
    for (int i = 0; i < s->nprograms; ++i) {
        ocl_program *p = &s->programs[i];
        cl_kernel ks[] = {p->forward, p->forward_vec, p->forward_mma, p->dsum, p->dsink, p->dkdv, p->dq,
                          p->kv_append, p->kv_decode, p->kv_combine};
        for (size_t k = 0; k < sizeof ks / sizeof ks[0]; ++k)
            if (ks[k])
                ocl_api.clReleaseKernel(ks[k]);
        if (p->program)
            ocl_api.clReleaseProgram(p->program);
    }
    s->nprograms = 0;
}

/* Best effort: the cache only saves time, so a failure to write it is not an error. */
static void save_binary(cl_program prog, const fa_kernel_key *key)
{
    size_t size = 0;
    if (ocl_api.clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL) != CL_SUCCESS || size == 0)
        return;
    unsigned char *bin = malloc(size);
    if (!bin)
        return;
    unsigned char *bins[1] = {bin};
    if (ocl_api.clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof bins, bins, NULL) == CL_SUCCESS)
        fa_kernel_cache_store("opencl", key, bin, size);
    free(bin);
}

static fa_status build_failed(fa_context *ctx, const ocl_state *s, cl_program prog, cl_int e, const char *options)
{
    char log[400] = "";
    size_t n = 0;
    ocl_api.clGetProgramBuildInfo(prog, s->device, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, &n);
    log[sizeof log - 1] = '\0';
    return FA_ERROR(ctx, FA_ERR_BACKEND, "clBuildProgram: %s (%s): %s", ocl_error_name(e), options, log);
}

static fa_status program_for(fa_context *ctx, char *options, int n, int kernels, ocl_program **out);

/* The forward's or backward's program for this call's dtype, head dims, tiles, modifiers and sink.
 * The sink changes the forward's epilogue only: a backward program is the same with or without
 * one (its fa_backward_dsink reads the sink from memory), so only the forward's key names it. */
fa_status ocl_get_program(fa_context *ctx, const fa_problem *p, int kind, ocl_program **out)
{
    ocl_state *s = ocl_state_of(ctx);
    char options[320];
    int kernels = p->backward ? (kind == 2 ? 7 : kind ? 3 : 4) : kind == 2 ? 6 : kind ? 1 : 2;
    int n = snprintf(options, sizeof options,
                     "-cl-std=CL1.2 -DFA_KERNELS=%d -DFA_DTYPE=%d -DFA_D=%lld -DFA_D_V=%lld -DFA_BM=%lld -DFA_BN=%lld "
                     "-DFA_UNROLL=%d",
                     kernels, (int)p->dtype, (long long)p->d, (long long)p->d_v, (long long)p->block_q,
                     (long long)p->block_k, (s->type & CL_DEVICE_TYPE_GPU) != 0);
    if (!p->backward && p->sink)
        n += snprintf(options + n, sizeof options - (size_t)n, " -DFA_SINK=1");
    if (kernels == 1) {
        ocl_tile_row t = ocl_fwd_block(s, p);
        n += snprintf(options + n, sizeof options - (size_t)n, " -DFA_TM=%lld -DFA_TN=%lld -DFA_DC=%lld",
                      (long long)t.tm, (long long)t.tn, (long long)t.dc);
        /* two work-groups of 256 per SM instead of one: the kernel has no reqd_work_group_size,
         * so the cap reaches ptxas */
        if (s->nv_options && t.maxreg)
            n += snprintf(options + n, sizeof options - (size_t)n, " -cl-nv-maxrregcount=%lld", (long long)t.maxreg);
    }
    if (kernels == 6 || kernels == 7) {
        ocl_tile_row t = ocl_mma_block(p->d);
        if (s->nv_emulate)
            n += snprintf(options + n, sizeof options - (size_t)n, " -DFA_NV_EMULATE=1");
        else if (s->nv_options && t.maxreg)
            n += snprintf(options + n, sizeof options - (size_t)n, " -cl-nv-maxrregcount=%lld", (long long)t.maxreg);
        if (kernels == 7)
            n += snprintf(options + n, sizeof options - (size_t)n, " -DFA_QB=%d -DFA_KB=%d", ocl_mma_bwd_buffers(s, p->d, 0),
                          ocl_mma_bwd_buffers(s, p->d, 1));
    }
    if (kernels == 3) {
        ocl_tile_row t = ocl_bwd_block(s, p);
        n += snprintf(options + n, sizeof options - (size_t)n, " -DFA_TM=%lld -DFA_TN=%lld -DFA_DC=%lld -DFA_DA=%lld",
                      (long long)t.tm, (long long)t.tn, (long long)t.dc, (long long)t.da);
        if (s->nv_options && t.maxreg)
            n += snprintf(options + n, sizeof options - (size_t)n, " -cl-nv-maxrregcount=%lld", (long long)t.maxreg);
    }
    if (!kind && s->fma) /* only the CPU kernels read it: the GPU programs' options stay as they were */
        n += snprintf(options + n, sizeof options - (size_t)n, " -DFA_FMA=1");
    if (ocl_score_mod_on(p)) /* a second program: the plain one is compiled without the modifiers */
        n += snprintf(options + n, sizeof options - (size_t)n, " -DFA_SCORE_MOD=1");
    return program_for(ctx, options, n, kernels, out);
}

/* fa_forward_kvcache's program (decode.cl) for a dtype, exact head dims d and d_v, the modifiers
 * and the sink. */
fa_status ocl_get_kv_program(fa_context *ctx, fa_dtype dtype, int64_t d, int64_t d_v, int mod, int sink,
                             ocl_program **out)
{
    char options[320];
    int n = snprintf(options, sizeof options,
                     "-cl-std=CL1.2 -DFA_KERNELS=5 -DFA_DTYPE=%d -DFA_D=%lld -DFA_D_V=%lld%s%s", (int)dtype,
                     (long long)d, (long long)d_v, mod ? " -DFA_SCORE_MOD=1" : "", sink ? " -DFA_SINK=1" : "");
    return program_for(ctx, options, n, 5, out);
}

/* The program for options (n characters used of 320) holding the kernels of FA_KERNELS: from the
 * context's list, else from a cached binary, else from the embedded source (then cached). */
static fa_status program_for(fa_context *ctx, char *options, int n, int kernels, ocl_program **out)
{
    ocl_state *s = ocl_state_of(ctx);
    /* FLASHATTN_OPENCL_OPTIONS: more compiler options, for tuning (for example NVIDIA's
     * -cl-nv-verbose -cl-nv-maxrregcount=N); they are part of the program cache's key */
    const char *extra = getenv("FLASHATTN_OPENCL_OPTIONS");
    if (extra && *extra && (size_t)n + strlen(extra) + 2 < 320)
        snprintf(options + n, 320 - (size_t)n, " %s", extra);
    for (int i = 0; i < s->nprograms; ++i)
        if (strcmp(s->programs[i].options, options) == 0) {
            *out = &s->programs[i];
            return FA_SUCCESS;
        }
    if (s->nprograms == OCL_MAX_PROGRAMS) /* many shapes in one context: start over */
        ocl_release_programs(s);

    /* the disk cache's key: the source, the options, and the device, driver and platform names and
     * versions that a binary is valid for (core/kernel_cache.c keeps the entries) */
    const char *parts[] = {options, s->device_name, s->device_version, s->driver_version, s->platform_version};
    fa_kernel_key_part kparts[1 + sizeof parts / sizeof parts[0]] = {{fa_opencl_source, fa_opencl_source_len}};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; ++i)
        kparts[1 + i] = (fa_kernel_key_part){parts[i], strlen(parts[i])};
    fa_kernel_key key = fa_kernel_cache_key(kparts, sizeof kparts / sizeof kparts[0]);

    cl_program prog = NULL;
    cl_int e = CL_SUCCESS;
    size_t blen = 0;
    unsigned char *bin = NULL;
    if (fa_kernel_cache_load("opencl", &key, &bin, &blen)) {
        const unsigned char *bins[1] = {bin};
        cl_int bstatus;
        prog = ocl_api.clCreateProgramWithBinary(s->context, 1, &s->device, &blen, bins, &bstatus, &e);
        free(bin);
        if (e == CL_SUCCESS && bstatus == CL_SUCCESS)
            e = ocl_api.clBuildProgram(prog, 1, &s->device, options, NULL, NULL);
        if (e != CL_SUCCESS || bstatus != CL_SUCCESS) { /* stale or foreign: rebuild from source */
            if (prog)
                ocl_api.clReleaseProgram(prog);
            prog = NULL;
        }
    }
    if (!prog) {
        const char *src = fa_opencl_source;
        size_t len = fa_opencl_source_len;
        prog = ocl_api.clCreateProgramWithSource(s->context, 1, &src, &len, &e);
        if (e != CL_SUCCESS)
            return OCL_FAIL(ctx, e, "clCreateProgramWithSource");
        e = ocl_api.clBuildProgram(prog, 1, &s->device, options, NULL, NULL);
        if (e != CL_SUCCESS) {
            fa_status st = build_failed(ctx, s, prog, e, options);
            ocl_api.clReleaseProgram(prog);
            return st;
        }
        if (fa_kernels_switch("opencl-log", NULL, 0)) { /* the compiler's report, e.g. NVIDIA's register counts */
            size_t ln = 0;
            ocl_api.clGetProgramBuildInfo(prog, s->device, CL_PROGRAM_BUILD_LOG, 0, NULL, &ln);
            char *log = ln ? malloc(ln + 1) : NULL;
            if (log &&
                ocl_api.clGetProgramBuildInfo(prog, s->device, CL_PROGRAM_BUILD_LOG, ln, log, NULL) == CL_SUCCESS) {
                log[ln] = '\0';
                fprintf(stderr, "flashattn opencl build (%s):\n%s\n", options, log);
            }
            free(log);
        }
        save_binary(prog, &key); /* also replaces an entry that the device refused */
    }
    ocl_program *pr = &s->programs[s->nprograms];
    memset(pr, 0, sizeof *pr);
    snprintf(pr->options, sizeof pr->options, "%s", options);
    pr->program = prog;
    if (kernels == 1)
        pr->forward = ocl_api.clCreateKernel(prog, "fa_forward", &e);
    if (kernels == 2)
        pr->forward_vec = ocl_api.clCreateKernel(prog, "fa_forward_vec", &e);
    if (kernels == 6)
        pr->forward_mma = ocl_api.clCreateKernel(prog, "fa_forward_mma", &e);
    if (kernels == 5) {
        pr->kv_append = ocl_api.clCreateKernel(prog, "fa_kv_append", &e);
        if (e == CL_SUCCESS)
            pr->kv_decode = ocl_api.clCreateKernel(prog, "fa_kv_decode", &e);
        if (e == CL_SUCCESS)
            pr->kv_combine = ocl_api.clCreateKernel(prog, "fa_kv_combine", &e);
    }
    if (kernels == 3 || kernels == 4 || kernels == 7) {
        const char *dkdv = kernels == 3 ? "fa_backward_dkdv" : kernels == 4 ? "fa_backward_dkdv_vec" : "fa_backward_dkdv_mma";
        const char *dq = kernels == 3 ? "fa_backward_dq" : kernels == 4 ? "fa_backward_dq_vec" : "fa_backward_dq_mma";
        pr->dsum = ocl_api.clCreateKernel(prog, "fa_backward_dsum", &e);
        if (e == CL_SUCCESS)
            pr->dsink = ocl_api.clCreateKernel(prog, "fa_backward_dsink", &e);
        if (e == CL_SUCCESS)
            pr->dkdv = ocl_api.clCreateKernel(prog, dkdv, &e);
        if (e == CL_SUCCESS)
            pr->dq = ocl_api.clCreateKernel(prog, dq, &e);
    }
    s->nprograms++;
    if (e != CL_SUCCESS)
        return OCL_FAIL(ctx, e, "clCreateKernel");
    *out = pr;
    return FA_SUCCESS;
}
