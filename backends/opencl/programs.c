/* programs.c: the kernels' programs. The .cl files in kernels/ are embedded at build time
 * (embed_cl.py) and compiled at first use per (kernels, dtype, head dims d and d_v, tile shape,
 * score modifiers, learnable sink): the options string is the key of the context's list, and a hash of the source,
 * options, device and driver names the binary cached on disk. */
#include "opencl_backend.h"
#include "kernels_switch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

static uint64_t fnv1a(uint64_t h, const void *data, size_t n)
{
    const unsigned char *c = data;
    for (size_t i = 0; i < n; ++i) {
        h ^= c[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* The directory for program binaries: $FLASHATTN_CACHE_DIR/opencl, else
 * $XDG_CACHE_HOME/flashattn/opencl, else $HOME/.cache/flashattn/opencl; FLASHATTN_CACHE_DIR=off
 * disables the disk cache. Returns 0 when there is none. */
static int cache_dir(char *buf, size_t len)
{
    const char *v = getenv("FLASHATTN_CACHE_DIR");
    int n;
    if (v && strcmp(v, "off") == 0)
        return 0;
    if (v && *v)
        n = snprintf(buf, len, "%s/opencl", v);
    else if ((v = getenv("XDG_CACHE_HOME")) && *v)
        n = snprintf(buf, len, "%s/flashattn/opencl", v);
    else if ((v = getenv("HOME")) && *v)
        n = snprintf(buf, len, "%s/.cache/flashattn/opencl", v);
    else
        return 0;
    return n > 0 && (size_t)n < len;
}

static void make_dirs(char *path)
{
    for (char *c = path + 1; *c; ++c)
        if (*c == '/') {
            *c = '\0';
            mkdir(path, 0755);
            *c = '/';
        }
    mkdir(path, 0755);
}

static unsigned char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    unsigned char *data = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 && (data = malloc((size_t)n)) &&
        fread(data, 1, (size_t)n, f) != (size_t)n) {
        free(data);
        data = NULL;
    }
    fclose(f);
    *len = data ? (size_t)n : 0;
    return data;
}

/* Best effort: the cache only saves time, so a failure to write it is not an error. Written to a
 * temporary name and renamed, so a concurrent reader never sees half a file. */
static void save_binary(cl_program prog, const char *dir, const char *path)
{
    size_t size = 0;
    if (ocl_api.clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL) != CL_SUCCESS || size == 0)
        return;
    unsigned char *bin = malloc(size);
    if (!bin)
        return;
    unsigned char *bins[1] = {bin};
    if (ocl_api.clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof bins, bins, NULL) == CL_SUCCESS) {
        char tmp[4300], d[4096];
        snprintf(d, sizeof d, "%s", dir);
        make_dirs(d);
        if (snprintf(tmp, sizeof tmp, "%.4200s.%ld.tmp", path, (long)getpid()) >= (int)sizeof tmp) {
            free(bin);
            return;
        }
        FILE *f = fopen(tmp, "wb");
        if (f) {
            int ok = fwrite(bin, 1, size, f) == size;
            ok = (fclose(f) == 0) && ok;
            if (!ok || rename(tmp, path) != 0)
                remove(tmp);
        }
    }
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

    uint64_t key = 0xcbf29ce484222325ull;
    const char *parts[] = {fa_opencl_source, options, s->device_name, s->device_version, s->driver_version,
                           s->platform_version};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; ++i)
        key = fnv1a(key, parts[i], strlen(parts[i]) + 1);
    char dir[4096], path[4200];
    int cached = cache_dir(dir, sizeof dir);
    if (cached)
        snprintf(path, sizeof path, "%s/%016llx.bin", dir, (unsigned long long)key);

    cl_program prog = NULL;
    cl_int e = CL_SUCCESS;
    size_t blen = 0;
    unsigned char *bin = cached ? read_file(path, &blen) : NULL;
    if (bin) {
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
        if (cached)
            save_binary(prog, dir, path);
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
