/* tiles.c: the tile table (B_r, B_c and the kernel kind per device type and head dim, data rather
 * than literals in the code), the limits the core plans with, and the chooser: one function that
 * decides whether a call runs and which kernel runs it, so the capability query and the launch
 * never disagree. */
#include "opencl_backend.h"

#include <stdio.h>
#include <stdlib.h>

/* The tile table: per device type and head-dim bound, B_r (query rows per work-group) and B_c
 * (keys per tile), the kernel kind (1: the work-group kernels of forward.cl and backward.cl, 0:
 * one work-item per tile, forward_vec.cl and backward_vec.cl, for CPU devices) and, for the GPU
 * forward, the work-item's block of S (tm x tn) and the head-dim columns per pass (dc). */
static const ocl_tile_row gpu_fwd_tiles[] = {
    /* 64 x 64, 4 x 4 per work-item: 256 work-items, 16 scores and 4 x d / 16 outputs each in
     * registers; Q^T and K^T in 32-column passes (17 KiB) then V in 64-column chunks through the
     * same region, P^T 17 KiB: 34 KiB of __local memory at every head dim */
    {.max_d = 256, .block_q = 64, .block_k = 64, .kernel = 1, .tm = 4, .tn = 4, .dc = 32, .maxreg = 128},
};
/* The GPU backward (backward.cl): 64 x 64 tiles, 256 work-items of 4 x 4 scores each, the four
 * operands in 16-column passes (region A 20 KiB, P / dS 17 KiB: 38 KiB of __local memory). dK and
 * dV take 2 x 4 keys x d / 16 floats per work-item in registers (64 at d 128); above d 128 each
 * work-group accumulates 128 of the columns and a second one the rest (S and dP computed twice)
 * rather than holding 128 floats per work-item. On NVIDIA the registers are capped at 128, so that
 * two work-groups fit on an SM. */
static const ocl_tile_row gpu_bwd_tiles[] = {
    {.max_d = 128, .block_q = 64, .block_k = 64, .kernel = 1, .tm = 4, .tn = 4, .dc = 16, .da = 128, .maxreg = 128},
    {.max_d = 256, .block_q = 64, .block_k = 64, .kernel = 1, .tm = 4, .tn = 4, .dc = 16, .da = 128, .maxreg = 128},
};
/* The matrix-path forward (forward_mma.cl, NVIDIA) and backward (backward_mma.cl, with the same
 * caps): 64 x 64 tiles, 4 warps; only the register cap differs by head dim. Uncapped, ptxas takes
 * nearly all 255 registers; the cap trades some spilling for more resident warps: 128 at d <= 64,
 * where the accumulators are small, 168 at d 128, whose O accumulators need more. */
static const ocl_tile_row mma_fwd_tiles[] = {
    {.max_d = 64, .block_q = 64, .block_k = 64, .kernel = 2, .maxreg = 128},
    {.max_d = 128, .block_q = 64, .block_k = 64, .kernel = 2, .maxreg = 168},
};

/* CPU devices run the forward as fa_forward_vec (one work-item per query tile, float8 blocks) */
static const ocl_tile_row cpu_fwd_tiles[] = {
    /* d <= 64: 64 x 128 (Q, O, K^T, V and S: 128 KiB, a core's L2 share), as the CPU backend;
     * the fastest of the shapes measured (docs/backends/opencl.md) */
    {.max_d = 64, .block_q = 64, .block_k = 128, .kernel = 0},
    /* d <= 128: 64 x 64 (144 KiB), likewise the fastest measured */
    {.max_d = 128, .block_q = 64, .block_k = 64, .kernel = 0},
    /* larger head dims: 32 x 32 keeps the tiles at 136 KiB at d 256 */
    {.max_d = 256, .block_q = 32, .block_k = 32, .kernel = 0},
};
/* and the backward as backward_vec.cl's kernels: 64 x 64 tiles at d <= 128 (the CPU backend's
 * backward tile at d 64; no other shape measured clearly faster, and the core's B_r <= d rules
 * out 128 rows at d 64), 32 x 32 above, so that the dK/dV kernel's tiles stay within PoCL's
 * 512 KiB of local memory. */
static const ocl_tile_row cpu_bwd_tiles[] = {
    {.max_d = 128, .block_q = 64, .block_k = 64, .kernel = 0},
    {.max_d = 256, .block_q = 32, .block_k = 32, .kernel = 0},
};

#define OCL_ROWS(t) (sizeof(t) / sizeof((t)[0]))

/* The call sets a score modifier: its program is compiled with FA_SCORE_MOD=1. */
int ocl_score_mod_on(const fa_problem *p)
{
    return fa_score_mod_active(p->mod);
}

/* The wider of the head dims d (Q, K) and d_v (V, O): what the tile table's rows are bounded by. */
static int64_t wide_dim(const fa_problem *p)
{
    return p->d > p->d_v ? p->d : p->d_v;
}

static ocl_tile_row tile_row(const ocl_state *s, const fa_problem *p)
{
    int gpu = s->gpu_tiles;
    const ocl_tile_row *t = p->backward ? (gpu ? gpu_bwd_tiles : cpu_bwd_tiles) : (gpu ? gpu_fwd_tiles : cpu_fwd_tiles);
    size_t n = p->backward ? (gpu ? OCL_ROWS(gpu_bwd_tiles) : OCL_ROWS(cpu_bwd_tiles))
                           : (gpu ? OCL_ROWS(gpu_fwd_tiles) : OCL_ROWS(cpu_fwd_tiles));
    size_t i = 0;
    while (i + 1 < n && wide_dim(p) > t[i].max_d)
        ++i;
    return t[i];
}

/* The core plans (and builds block lists) at exactly the table's tile: M is made large enough
 * that the paper's formula never binds below the table, except B_r = min(.., d) for small d
 * (then the kernel is compiled for that smaller B_r). */
void ocl_tile_limits(const fa_context *ctx, const fa_problem *p, fa_tile_limits *out)
{
    ocl_tile_row t = tile_row(ocl_state_of(ctx), p);
    int64_t small = t.block_q < t.block_k ? t.block_q : t.block_k;
    out->onchip_bytes = 16 * t.block_q * t.block_k * (wide_dim(p) > 0 ? wide_dim(p) : 1);
    out->min_block = small;
    out->max_block_q = t.block_q;
    out->max_block_k = t.block_k;
    out->multiple = small;
}

/* The kernel kind for the planned tile: the table's, except that the vec kernels need B_r a
 * multiple of 4 and B_c of 16 (the work-group kernels take any planned tile). */
static int kernel_kind(const ocl_state *s, const fa_problem *p)
{
    ocl_tile_row t = tile_row(s, p);
    if (t.kernel == 0)
        return p->block_q % 4 == 0 && p->block_k % 16 == 0 ? 0 : 1;
    return 1;
}

/* The GPU forward's work-item block for the planned tile: the table's when the tile is the
 * table's, else 4 x 4 in 32-column passes (a tile of at least 32 x 32 keeps its kernel valid). */
ocl_tile_row ocl_fwd_block(const ocl_state *s, const fa_problem *p)
{
    ocl_tile_row t = tile_row(s, p);
    if (t.block_q != p->block_q || t.block_k != p->block_k || t.tm == 0)
        t = (ocl_tile_row){.block_q = p->block_q, .block_k = p->block_k, .kernel = 1, .tm = 4, .tn = 4, .dc = 32,
                           .maxreg = 128};
    return t;
}

/* The GPU backward's work-item block for the planned tile: the table's when the tile is the
 * table's, else 4 x 4 in 16-column passes, all columns of d <= 128 per work-group. */
ocl_tile_row ocl_bwd_block(const ocl_state *s, const fa_problem *p)
{
    ocl_tile_row t = tile_row(s, p);
    if (t.block_q != p->block_q || t.block_k != p->block_k || t.tm == 0)
        t = (ocl_tile_row){.block_q = p->block_q, .block_k = p->block_k, .kernel = 1, .tm = 4, .tn = 4, .dc = 16,
                           .da = 128};
    if (t.da <= 0 || t.da > wide_dim(p)) /* every column in one work-group (a multiple of 4: float4 columns) */
        t.da = (wide_dim(p) + 3) / 4 * 4;
    return t;
}

/* __local bytes and the check of a GPU backward block (backward.cl's regions and its #error
 * rules); 0 when the block is not one the kernels take. */
static int64_t bwd_local_bytes(const ocl_tile_row *t)
{
    int64_t bq = t->block_q, bk = t->block_k;
    if (t->tm < 4 || t->tn < 4 || t->tm % 4 || t->tn % 4 || bq % t->tm || bk % t->tn || t->dc < 4 || t->dc % 4 ||
        t->da % 4)
        return 0;
    int64_t wg = (bq / t->tm) * (bk / t->tn), owk = 4 * (bq / t->tm), owq = 4 * (bk / t->tn);
    if ((bq * t->dc / 4) % wg || (bk * t->dc / 4) % wg || (bq * owk / 4) % wg || (bk * owq / 4) % wg)
        return 0;
    int64_t ra = (t->dc + 4) * 2 * (bq + bk), rp = bq * (bk + 4);
    if (bq * owk > ra)
        ra = bq * owk;
    if (bk * owq > ra)
        ra = bk * owq;
    if (bk * (bq + 4) > rp)
        rp = bk * (bq + 4);
    return 4 * (ra + rp + 2 * bq) + 4 * 2 * bq;
}

/* The forward runs on the matrix path (forward_mma.cl) when the device has one (nv_mma), the
 * inputs are fp16 or bf16, d is a multiple of 16 up to 128, d_v = d (other value head dims run on
 * forward.cl) and the planned tile is 64 rows by a multiple of 16 keys up to 64. */
static int mma_forward(const ocl_state *s, const fa_problem *p)
{
    return s->nv_mma && s->gpu_tiles && !p->backward && (p->dtype == FA_DTYPE_F16 || p->dtype == FA_DTYPE_BF16) &&
           p->d % 16 == 0 && p->d <= 128 && p->d_v == p->d && p->block_q == 64 && p->block_k % 16 == 0 &&
           p->block_k <= 64;
}

/* The backward likewise (backward_mma.cl), at 64 x 64 tiles. */
static int mma_backward(const ocl_state *s, const fa_problem *p)
{
    return s->nv_mma && s->gpu_tiles && p->backward && (p->dtype == FA_DTYPE_F16 || p->dtype == FA_DTYPE_BF16) &&
           p->d % 16 == 0 && p->d <= 128 && p->d_v == p->d && p->block_q == 64 && p->block_k == 64;
}

/* __local bytes of backward_mma.cl's kernels with qb buffers of a step's Q and dO rows (FA_QB)
 * and kb of the K and V tiles in fa_backward_dq_mma (FA_KB): fa_backward_dkdv_mma holds K and V of
 * 64 keys and per buffer 16 Q and dO rows (rows padded by 8 elements) with their LSE, D and key
 * ranges; fa_backward_dq_mma K and V of 64 keys per buffer and 64 rows' key ranges; both the
 * emulation's exchange area. */
static int64_t mma_bwd_local_bytes(const ocl_state *s, int64_t d, int qb, int kb)
{
    int64_t dkdv = 2 * 2 * 64 * (d + 8) + qb * (2 * 2 * 16 * (d + 8) + 4 * 4 * 16);
    int64_t dq = kb * 2 * 2 * 64 * (d + 8) + 4 * 2 * 64;
    return (dkdv > dq ? dkdv : dq) + (s->nv_emulate ? 4 * 6 * 128 : 0);
}

/* The buffers of backward_mma.cl (-DFA_QB, -DFA_KB; ocl_mma_bwd_buffers(s, d, 0) and (s, d, 1)):
 * two, so that the next step's or tile's copies overlap this one's products, where they fit the
 * device's __local memory (on a 48 KiB device: Q and dO at d <= 112, K and V at d <= 80), else one. */
int ocl_mma_bwd_buffers(const ocl_state *s, int64_t d, int kv)
{
    return (cl_ulong)mma_bwd_local_bytes(s, d, kv ? 1 : 2, kv ? 2 : 1) <= s->local_bytes ? 2 : 1;
}

/* The matrix-path forward's row for head dim d (mma_forward decides whether it runs). */
ocl_tile_row ocl_mma_block(int64_t d)
{
    size_t i = 0;
    while (i + 1 < OCL_ROWS(mma_fwd_tiles) && d > mma_fwd_tiles[i].max_d)
        ++i;
    return mma_fwd_tiles[i];
}

fa_status ocl_choose(const fa_context *ctx, const fa_problem *p, fa_variant *out)
{
    if (p->out_dtype != p->dtype)
        return FA_ERROR((fa_context *)ctx, FA_ERR_UNSUPPORTED,
                        "opencl: fp32 outputs from %s inputs are not supported (the cpu and cuda backends have them)",
                        fa_dtype_name(p->dtype));
    const ocl_state *s = ocl_state_of(ctx);
    if (p->d > FA_MAX_HEAD_DIM || p->d_v > FA_MAX_HEAD_DIM)
        return FA_ERROR((fa_context *)ctx, FA_ERR_UNSUPPORTED, "opencl: head dims d = %lld, d_v = %lld: at most %d",
                        (long long)p->d, (long long)p->d_v, FA_MAX_HEAD_DIM);
    if (p->seqlen_q > INT32_MAX || p->seqlen_k > INT32_MAX) /* the kernels index within a sequence in 32 bits */
        return FA_ERROR((fa_context *)ctx, FA_ERR_UNSUPPORTED, "opencl: sequences longer than %d tokens",
                        (int)INT32_MAX);
    int kind = kernel_kind(s, p);
    /* the vec kernels pad d (Q, K) and d_v (V, O) to multiples of 16 each */
    const int64_t dqp = (p->d + 15) / 16 * 16, dvp = (p->d_v + 15) / 16 * 16, dmp = dqp > dvp ? dqp : dvp;
    int64_t group, local;
    if (mma_backward(s, p)) { /* backward_mma.cl: K and V rows (both kernels), Q and dO rows of a step */
        kind = 2;
        group = 128;
        local = mma_bwd_local_bytes(s, p->d, ocl_mma_bwd_buffers(s, p->d, 0), ocl_mma_bwd_buffers(s, p->d, 1));
    } else if (p->backward) { /* backward.cl: bwd_local_bytes; backward_vec.cl: dK/dV holds Q and dO, K^T, V^T, a
                        * row buffer, dK and dV, dQ holds Q, dO, dQ, K^T, V^T and K, both P, dS and Z
                        * (B_r x B_c each) */
        const int64_t bq = p->block_q, bk = p->block_k;
        const int64_t dkdv = bq * (dqp + dvp) + bk * (2 * dqp + 2 * dvp + dmp);
        const int64_t dq = bq * (2 * dqp + dvp) + bk * (dqp + dvp + dmp);
        group = 1;
        local = 4 * ((dkdv > dq ? dkdv : dq) + 3 * bq * bk);
        if (kind) {
            ocl_tile_row t = ocl_bwd_block(s, p);
            local = bwd_local_bytes(&t);
            if (!local)
                return FA_ERROR((fa_context *)ctx, FA_ERR_UNSUPPORTED,
                                "opencl: backward tile %lld x %lld with %lld x %lld per work-item, %lld columns per "
                                "pass and %lld per work-group is not a shape backward.cl takes",
                                (long long)p->block_q, (long long)p->block_k, (long long)t.tm, (long long)t.tn,
                                (long long)t.dc, (long long)t.da);
            group = (p->block_q / t.tm) * (p->block_k / t.tn);
        }
    } else if (mma_forward(s, p)) { /* forward_mma.cl: K and V as 16-bit rows, the row ranges */
        kind = 2;
        group = 128;
        local = 2 * 2 * p->block_k * (p->d + 8) + 4 * 2 * p->block_q + (s->nv_emulate ? 4 * 6 * 128 : 0);
    } else if (kind) { /* forward.cl: region A (Q and K passes; V chunks) and P^T */
        ocl_tile_row t = ocl_fwd_block(s, p);
        if (p->block_q < 32 || p->block_k < 32 || p->block_q % t.tm || p->block_k % t.tn ||
            (t.dc + 4) * (p->block_q + p->block_k) / p->block_k < 4 * (p->block_k / t.tn))
            return FA_ERROR((fa_context *)ctx, FA_ERR_UNSUPPORTED,
                            "opencl: forward tile %lld x %lld with %lld x %lld per work-item and %lld columns per "
                            "pass is not a shape forward.cl takes",
                            (long long)p->block_q, (long long)p->block_k, (long long)t.tm, (long long)t.tn,
                            (long long)t.dc);
        group = (p->block_q / t.tm) * (p->block_k / t.tn);
        local = 4 * ((t.dc + 4) * (p->block_q + p->block_k) + p->block_k * (p->block_q + 4));
    } else { /* forward_vec.cl: K^T and Q (d), V and the accumulators (d_v), S */
        group = 1;
        local = 4 * ((dqp + dvp) * (p->block_k + p->block_q) + p->block_q * p->block_k);
    }
    if ((size_t)group > s->max_group || (cl_ulong)local > s->local_bytes)
        return FA_ERROR((fa_context *)ctx, FA_ERR_UNSUPPORTED,
                        "opencl: tile %lld x %lld at d %lld, d_v %lld needs %lld work-items and %lld bytes of local "
                        "memory; the device has %zu and %llu",
                        (long long)p->block_q, (long long)p->block_k, (long long)p->d, (long long)p->d_v,
                        (long long)group, (long long)local, s->max_group, (unsigned long long)s->local_bytes);
    char dv_name[32] = "";
    if (p->d_v != p->d)
        snprintf(dv_name, sizeof dv_name, "v%lld", (long long)p->d_v);
    snprintf(out->name, sizeof out->name, "opencl-%s-%s-d%lld%s-b%lldx%lld-%s%lld%s%s", p->backward ? "bwd" : "fwd",
             fa_dtype_name(p->dtype), (long long)p->d, dv_name, (long long)p->block_q, (long long)p->block_k,
             kind == 2 ? "mma" : kind ? "wg" : "vec", (long long)group, ocl_score_mod_on(p) ? "-scoremod" : "",
             p->sink ? "-sink" : "");
    out->kernel = kind;
    return FA_SUCCESS;
}
