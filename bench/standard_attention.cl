/* standard_attention.cl: the materialising baseline for opencl_bench: S = scale Q K^T written to
 * a global [batch*heads, seqlen_q, seqlen_k] fp32 buffer (16 x 16 tiles through __local memory),
 * a row softmax in place, then O = P V (the same tiled product). What an implementation without
 * fusion does; its time and its N^2 buffer are what FlashAttention removes. Layout [b, s, h, d],
 * contiguous; STD_DTYPE 0 fp32, 1 fp16 (storage only, vload_half). */
#ifndef STD_DTYPE
#define STD_DTYPE 0
#endif
#define TS 16

#if STD_DTYPE == 0
typedef float std_t;
#define LD(p, i) ((p)[(i)])
#define ST(p, i, x) ((p)[(i)] = (x))
#else
typedef half std_t;
#define LD(p, i) vload_half((size_t)(i), (p))
#define ST(p, i, x) vstore_half_rte((x), (size_t)(i), (p))
#endif

/* one work-group per 16 x 16 tile of S for (batch, head) = group id 2 */
__kernel __attribute__((reqd_work_group_size(TS, TS, 1))) void
std_scores(__global const std_t *q, __global const std_t *k, __global float *s, const int sq, const int sk,
           const int heads, const int heads_kv, const int d, const float scale, const int causal)
{
    __local float qa[TS][TS + 1], ka[TS][TS + 1];
    const int tx = (int)get_local_id(0), ty = (int)get_local_id(1);
    const int j = (int)get_group_id(0) * TS + tx, i = (int)get_group_id(1) * TS + ty;
    const int bh = (int)get_group_id(2), b = bh / heads, h = bh % heads, hk = h / (heads / heads_kv);
    float acc = 0.0f;
    for (int c0 = 0; c0 < d; c0 += TS) {
        const int iq = (int)get_group_id(1) * TS + ty, jk = (int)get_group_id(0) * TS + ty;
        qa[ty][tx] = iq < sq && c0 + tx < d ? LD(q, (((long)b * sq + iq) * heads + h) * d + c0 + tx) : 0.0f;
        ka[ty][tx] = jk < sk && c0 + tx < d ? LD(k, (((long)b * sk + jk) * heads_kv + hk) * d + c0 + tx) : 0.0f;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int c = 0; c < TS; ++c)
            acc = mad(qa[ty][c], ka[tx][c], acc);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (i < sq && j < sk)
        s[((long)bh * sq + i) * sk + j] = causal && j > i + sk - sq ? -INFINITY : acc * scale;
}

/* one work-item per row: max, exp, sum, normalise (a fully masked row gives zeros) */
__kernel void std_softmax(__global float *s, const int sk)
{
    __global float *row = s + (long)get_global_id(0) * sk;
    float mx = -INFINITY, sum = 0.0f;
    for (int j = 0; j < sk; ++j)
        mx = fmax(mx, row[j]);
    const float shift = mx == -INFINITY ? 0.0f : mx;
    for (int j = 0; j < sk; ++j) {
        const float e = exp(row[j] - shift);
        row[j] = e;
        sum += e;
    }
    const float inv = sum == 0.0f ? 0.0f : 1.0f / sum;
    for (int j = 0; j < sk; ++j)
        row[j] *= inv;
}

/* O = P V: one work-group per 16 rows x 16 columns of O for (batch, head) = group id 2 */
__kernel __attribute__((reqd_work_group_size(TS, TS, 1))) void
std_output(__global const float *s, __global const std_t *v, __global std_t *o, const int sq, const int sk,
           const int heads, const int heads_kv, const int d)
{
    __local float pa[TS][TS + 1], va[TS][TS + 1];
    const int tx = (int)get_local_id(0), ty = (int)get_local_id(1);
    const int c = (int)get_group_id(0) * TS + tx, i = (int)get_group_id(1) * TS + ty;
    const int bh = (int)get_group_id(2), b = bh / heads, h = bh % heads, hk = h / (heads / heads_kv);
    float acc = 0.0f;
    for (int j0 = 0; j0 < sk; j0 += TS) {
        pa[ty][tx] = i < sq && j0 + tx < sk ? s[((long)bh * sq + i) * sk + j0 + tx] : 0.0f;
        va[ty][tx] = j0 + ty < sk && c < d ? LD(v, (((long)b * sk + j0 + ty) * heads_kv + hk) * d + c) : 0.0f;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int j = 0; j < TS; ++j)
            acc = mad(pa[ty][j], va[j][tx], acc);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (i < sq && c < d)
        ST(o, (((long)b * sq + i) * heads + h) * d + c, acc);
}
