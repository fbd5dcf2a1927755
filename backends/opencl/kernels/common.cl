/* common.cl: what the forward and backward kernels share: the storage type of the dtype, loads
 * that widen to fp32 and stores that round to nearest even (core/half.h's rule), the parameter
 * block, sequence bounds and per-element visibility. OpenCL C 1.2; fp16 only as storage through
 * vload_half / vstore_half_rte (core OpenCL, no cl_khr_fp16), bf16 as 16-bit words. The build
 * prepends params.h, core/mask.h, core/philox.h, core/empty_row.h, core/sink.h and
 * core/score_mod.h to this file (see meson.build). */

/* Compile-time shape; the host passes every one with -D (tiles.c's tile table). */
#ifndef FA_DTYPE
#define FA_DTYPE 0 /* fa_dtype: 0 fp32, 1 fp16, 2 bf16 */
#endif
#ifndef FA_D
#define FA_D 64 /* head dim of Q and K (dQ, dK), exact: private rows are FA_D floats */
#endif
#ifndef FA_D_V
#define FA_D_V FA_D /* head dim of V and O (dO, dV), exact */
#endif
#ifndef FA_BM
#define FA_BM 64 /* query rows per tile */
#endif
#ifndef FA_BN
#define FA_BN 64 /* keys per tile (a multiple of 4: one Philox block covers 4 keys) */
#endif
/* Full unrolling of the loops that index private rows, so a GPU compiler keeps them in
 * registers; the host sets FA_UNROLL=1 on GPUs only (on a CPU runtime it costs tens of seconds of
 * compile time per program and the CPU kernels do not need it). */
#if defined(FA_UNROLL) && FA_UNROLL
#define FA_UNROLL_LOOP _Pragma("unroll")
#define FA_PRAGMA(x) _Pragma(#x)
#define FA_UNROLL_BY(n) FA_PRAGMA(unroll n)
#else
#define FA_UNROLL_LOOP
#define FA_UNROLL_BY(n)
#endif
#ifndef FA_KERNELS
#define FA_KERNELS 1 /* which kernels a program holds: 1 fa_forward, 2 fa_forward_vec, 3 the backward's
                      * three, 4 the backward for CPU devices (backward_vec.cl), 5 decode.cl's, 6
                      * fa_forward_mma (NVIDIA only: nv_mma.cl); one program per direction and kind
                      * keeps the compile time at first use short */
#endif

#ifndef FA_SINK
#define FA_SINK 0 /* 1: the forward folds the learnable sink (core/sink.h) into each row's epilogue; the
                   * host compiles a program of its own for calls with a sink */
#endif

#ifndef FA_SCORE_MOD
#define FA_SCORE_MOD 0 /* 1: the score modifiers (softcap, ALiBi) are compiled in; the host builds a
                        * second program with it for calls that set one, so a plain call runs code
                        * without them */
#endif

#if FA_DTYPE == 0
typedef float fa_store_t;
#define FA_LOAD(p, i) ((p)[(i)])
#define FA_STORE(p, i, x) ((p)[(i)] = (x))
#elif FA_DTYPE == 1
typedef half fa_store_t; /* pointers to half need no extension; arithmetic on half would */
#define FA_LOAD(p, i) vload_half((size_t)(i), (p))
#define FA_STORE(p, i, x) vstore_half_rte((x), (size_t)(i), (p))
#else
typedef ushort fa_store_t;
#define FA_LOAD(p, i) as_float((uint)(p)[(i)] << 16)
#define FA_STORE(p, i, x) ((p)[(i)] = fa_float_to_bf16(x))
#endif

/* core/half.h's fa_float_to_bfloat: round to nearest even, NaN kept quiet. */
static inline ushort fa_float_to_bf16(float f)
{
    uint x = as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (ushort)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (ushort)(x >> 16);
}

/* Four consecutive elements from index i, widened to fp32; only the first n (< 4 at a row's end)
 * are read, the rest are 0. Where i is a multiple of 4 (and buffers are, as OpenCL allocates
 * them, aligned) one aligned vector load: vload4 / vload_half4 only promise element alignment, and
 * NVIDIA's compiler splits them into scalar loads. fp16 widens through vload_half4 on the private
 * copy (core OpenCL, no cl_khr_fp16). */
static inline float4 fa_load4(__global const fa_store_t *p, long i, long n)
{
    if (n >= 4 && (i & 3) == 0) {
#if FA_DTYPE == 0
        return *(__global const float4 *)(p + i);
#elif FA_DTYPE == 1
        const ushort4 u = *(__global const ushort4 *)((__global const ushort *)p + i);
        return vload_half4(0, (const half *)&u);
#else
        return as_float4(convert_uint4(*(__global const ushort4 *)(p + i)) << 16);
#endif
    }
    float4 x = (float4)(0.0f);
    x.s0 = n > 0 ? FA_LOAD(p, i) : 0.0f;
    x.s1 = n > 1 ? FA_LOAD(p, i + 1) : 0.0f;
    x.s2 = n > 2 ? FA_LOAD(p, i + 2) : 0.0f;
    x.s3 = n > 3 ? FA_LOAD(p, i + 3) : 0.0f;
    return x;
}

/* The first n (at most 4) elements of x to index i, rounded to the storage type (aligned vector
 * stores as in fa_load4). */
static inline void fa_store4(__global fa_store_t *p, long i, long n, float4 x)
{
    if (n >= 4 && (i & 3) == 0) {
#if FA_DTYPE == 0
        *(__global float4 *)(p + i) = x;
        return;
#elif FA_DTYPE == 1
        ushort4 u;
        vstore_half4_rte(x, 0, (half *)&u);
        *(__global ushort4 *)((__global ushort *)p + i) = u;
        return;
#else
        *(__global ushort4 *)(p + i) = (ushort4)(fa_float_to_bf16(x.s0), fa_float_to_bf16(x.s1),
                                                 fa_float_to_bf16(x.s2), fa_float_to_bf16(x.s3));
        return;
#endif
    }
    if (n > 0)
        FA_STORE(p, i, x.s0);
    if (n > 1)
        FA_STORE(p, i + 1, x.s1);
    if (n > 2)
        FA_STORE(p, i + 2, x.s2);
    if (n > 3)
        FA_STORE(p, i + 3, x.s3);
}

typedef struct fa_ocl_view {
    long off, sb, ss, sh;
} fa_ocl_view;

/* Tensor t's view in a parameter block whose views (offset and three strides each) start at
 * prm[base]. */
static inline fa_ocl_view fa_view_at(__global const long *prm, int base, int t)
{
    fa_ocl_view v;
    v.off = prm[base + 4 * t];
    v.sb = prm[base + 4 * t + 1];
    v.ss = prm[base + 4 * t + 2];
    v.sh = prm[base + 4 * t + 3];
    return v;
}

static inline fa_ocl_view fa_view_of(__global const long *prm, int t)
{
    return fa_view_at(prm, FA_P_TENSORS, t);
}

/* Element offset of (batch b, packed row, head h, column 0). */
static inline long fa_at(fa_ocl_view v, long b, long row, long h)
{
    return v.off + b * v.sb + row * v.ss + h * v.sh;
}

/* Sequence b's lengths and first packed rows (fa_problem_seq in core/internal.h). */
static inline void fa_seq(__global const long *prm, __global const int *cu_q, __global const int *cu_k, long b,
                          long *sq, long *sk, long *qs, long *ks)
{
    if (prm[FA_P_VARLEN]) {
        __global const int *cq = cu_q + prm[FA_P_CU_Q_OFF], *ck = cu_k + prm[FA_P_CU_K_OFF];
        *qs = cq[b];
        *ks = ck[b];
        *sq = cq[b + 1] - *qs;
        *sk = ck[b + 1] - *ks;
    } else {
        *qs = 0;
        *ks = 0;
        *sq = prm[FA_P_SEQLEN_Q];
        *sk = prm[FA_P_SEQLEN_K];
    }
}

/* The block-sparse state of one (mask head, query tile): the core's list of non-empty key tiles. */
typedef struct fa_ocl_blocks {
    int on;
    long mh, bm_rows, bm_cols, bm_bq, bm_bk;
} fa_ocl_blocks;

static inline fa_ocl_blocks fa_blocks_of(__global const long *prm, long h)
{
    fa_ocl_blocks bl;
    bl.on = prm[FA_P_BLOCK_MASK] != 0;
    bl.mh = prm[FA_P_BM_HEADS] == 1 ? 0 : h;
    bl.bm_rows = prm[FA_P_BM_ROWS];
    bl.bm_cols = prm[FA_P_BM_COLS];
    bl.bm_bq = prm[FA_P_BM_BQ];
    bl.bm_bk = prm[FA_P_BM_BK];
    return bl;
}

/* The block mask's bit for local element (i, j) (fa_problem_block_keep). */
static inline int fa_block_keep(const fa_ocl_blocks *bl, __global const uchar *bits, long i, long j)
{
    return bits[(bl->mh * bl->bm_rows + i / bl->bm_bq) * bl->bm_cols + j / bl->bm_bk] != 0;
}

/* Class of key tile kt for query tile qt of list head lh in the core's lists: EMPTY when the
 * list has no entry for it (binary search: a row's columns ascend). */
static inline int fa_list_class(__global const long *prm, __global const long *row_ptr, __global const int *col,
                                __global const uchar *cls, long lh, long qt, long kt)
{
    long nq = prm[FA_P_BL_NQ];
    long lo = row_ptr[lh * nq + qt], end = row_ptr[lh * nq + qt + 1], hi = end;
    while (lo < hi) {
        long mid = lo + (hi - lo) / 2;
        if (col[mid] < kt)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < end && col[lo] == kt ? (int)cls[lo] : (int)FA_TILE_EMPTY;
}

/* The dropout factor of key `key` taken from its Philox block (core/philox.h: 16 bits of word
 * (key % 8) / 2): 0 or 1/(1-p). */
static inline float fa_drop_factor(fa_philox4 block, long key, uint threshold, float drop_scale)
{
    return fa_dropout_bits(fa_dropout_word(block, (ulong)key), (ulong)key) >= threshold ? drop_scale : 0.0f;
}

/* The key tiles one query tile (rows [q0, q0 + nr) of tile qt) visits: the core's list for
 * block-sparse masks, else the tiles between the first row's first visible key and the last row's
 * last (both ends are monotone in the row). Steps it in [begin, end) go to fa_walk_step. */
typedef struct fa_walk {
    long begin, end, base;
    int list;
} fa_walk;

static inline fa_walk fa_walk_of(__global const long *prm, __global const long *row_ptr, const fa_mask *m,
                                 const fa_ocl_blocks *blk, long qt, long q0, long nr, long sk)
{
    fa_walk w;
    w.list = blk->on;
    w.base = 0;
    if (blk->on) {
        const long nq = prm[FA_P_BL_NQ];
        w.begin = row_ptr[blk->mh * nq + qt];
        w.end = row_ptr[blk->mh * nq + qt + 1];
    } else {
        int64_t first_lo, first_hi, last_lo, last_hi;
        fa_mask_row_range(m, q0, &first_lo, &first_hi);
        fa_mask_row_range(m, q0 + nr - 1, &last_lo, &last_hi);
        const long nk = (sk + FA_BN - 1) / FA_BN;
        w.base = first_lo / FA_BN;
        w.begin = 0;
        w.end = last_hi <= first_lo ? 0 : min(nk, (last_hi + FA_BN - 1) / FA_BN) - w.base;
    }
    return w;
}

/* Step it of a walk: the key tile's first key (*k0) and its class, the mask's met with the list's;
 * FA_TILE_EMPTY: nothing in it is visible, skip it. */
static inline int fa_walk_step(const fa_walk *w, long it, __global const int *col, __global const uchar *cls,
                               const fa_mask *m, long q0, long *k0)
{
    long kt = w->base + it;
    int c = FA_TILE_FULL;
    if (w->list) {
        kt = col[it];
        c = cls[it];
    }
    *k0 = kt * FA_BN;
    return fa_tile_class_meet(fa_mask_classify_tile(m, q0, q0 + FA_BM, *k0, *k0 + FA_BN), (fa_tile_class)c);
}

/* The first step at or after it whose tile is not empty, with its class (*c) and first key (*k0);
 * w->end when there is none. */
static inline long fa_walk_next(const fa_walk *w, long it, __global const int *col, __global const uchar *cls,
                                const fa_mask *m, long q0, int *c, long *k0)
{
    for (; it < w->end; ++it) {
        *c = fa_walk_step(w, it, col, cls, m, q0, k0);
        if (*c != FA_TILE_EMPTY)
            break;
    }
    return it;
}

/* The class of the pair (query tile qt, key tile kt), the mask's met with the block list's, for
 * the kernels that own a key tile and walk the query tiles. */
static inline int fa_pair_class(__global const long *prm, __global const long *row_ptr, __global const int *col,
                                __global const uchar *cls, const fa_mask *m, const fa_ocl_blocks *blk, long qt,
                                long kt)
{
    const long q0 = qt * FA_BM, k0 = kt * FA_BN;
    int c = fa_mask_classify_tile(m, q0, q0 + FA_BM, k0, k0 + FA_BN);
    if (c != FA_TILE_EMPTY && blk->on)
        c = fa_tile_class_meet((fa_tile_class)c, (fa_tile_class)fa_list_class(prm, row_ptr, col, cls, blk->mh, qt, kt));
    return c;
}

/* A forward row's epilogue, core/sink.h's rule: from the row's running maximum mx (natural-log
 * units) and sum l, the LSE the row writes, and in *inv the factor of its accumulators (1/l, 0 for
 * a row that saw no key). With FA_SINK, query head h's sink (sink[prm[sink_slot] + h]) is folded
 * in: the LSE includes it and *inv carries exp(LSE0 - LSE). */
static inline float fa_row_finish(__global const long *prm, int sink_slot, __global const float *sink, long h,
                                  float mx, float l, float *inv)
{
    /* l 0: no key seen; a NaN score seen leaves l NaN (mx may be -inf: fmax drops NaN), and the
     * LSE NaN */
    const float lse0 = l == 0.0f ? -INFINITY : mx + log(l);
    const float inv0 = l == 0.0f ? 0.0f : 1.0f / l;
#if FA_SINK
    const float lse = fa_sink_lse(lse0, sink[prm[sink_slot] + h]);
    *inv = inv0 * fa_sink_factor(lse0, lse);
    return lse;
#else
    (void)prm;
    (void)sink_slot;
    (void)sink;
    (void)h;
    *inv = inv0;
    return lse0;
#endif
}

/* The score modifiers of one (sequence b, query head h) in the units of a kernel whose score x
 * satisfies S = u x for the scaled score S (core/score_mod.h): u = ln 2 in forward.cl (log2-scaled
 * scores), 1 in forward_vec.cl (prescaled Q), the softmax scale in the backward kernels (raw
 * q . k). The call's fa_score_mod is the parameter block's slots FA_P_MOD..; without
 * FA_SCORE_MOD the state is that of no modifier and the kernels never apply it. */
static inline fa_score_mod_state fa_score_mod_of(__global const long *prm, __global const float *slopes, float u,
                                                 long b, long h, long sq, long sk)
{
#if FA_SCORE_MOD
    const fa_score_mod_factors f = fa_score_mod_prepare(*(__global const fa_score_mod *)(prm + FA_P_MOD), u);
    const float slope = f.alibi ? slopes[prm[FA_P_ALIBI_OFF] + fa_alibi_slope_index(f, b, h)] : 0.0f;
#else
    fa_score_mod m;
    m.softcap = 0.0f;
    m.alibi = 0;
    m.alibi_stride = 0;
    const fa_score_mod_factors f = fa_score_mod_prepare(m, u);
    const float slope = 0.0f;
    (void)prm;
    (void)slopes;
    (void)b;
    (void)h;
#endif
    return fa_score_mod_begin(f, slope, sk - sq);
}

/* One element of a backward tile (backward.cl, backward_mma.cl): from the raw score s = q . k and
 * dp = dO . v of query i and key `key`, returns (P o Z, dS) with P = exp2(S log2 e scale - LSE
 * log2 e) for the modified score S (lse2: the row's LSE in log2 units, l2 = scale log2 e), Z the
 * dropout factor z and dS = P (Z dP - D) scale dS/ds. vis says whether the row sees the key (its
 * range, and a finite LSE); the block mask is read here where the tile is partial. Masked
 * elements give 0 by selection: their s or dp may be NaN, and 0 * NaN is NaN. */
static inline float2 fa_bwd_element(const fa_score_mod_state *sm, const fa_ocl_blocks *blk,
                                    __global const uchar *bm_bits, int partial, int vis, long i, long key, float s,
                                    float dp, float scale, float l2, float lse2, float dsum, float z)
{
#if FA_SCORE_MOD
    float grad;
    s = fa_score_mod_apply_at(sm, s, i, key, &grad);
    const float ds_scale = scale * grad; /* dS of the unmodified score */
#else
    const float ds_scale = scale;
    (void)sm;
#endif
    if (vis && partial && blk->on)
        vis = fa_block_keep(blk, bm_bits, i, key);
    const float p = vis ? exp2(mad(s, l2, -lse2)) : 0.0f;
    return (float2)(vis ? p * z : 0.0f, vis ? p * (z * dp - dsum) * ds_scale : 0.0f);
}
