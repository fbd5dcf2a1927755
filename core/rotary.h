/* rotary.h: rotary position embedding of one channel pair, and which channels pair up. One
 * source for the C backends and GPU kernels (CUDA, HIP, OpenCL C), like mask.h.
 *
 * rotary_dim channels rotate (the rest pass through): interleaved, pair i is channels (2i, 2i+1);
 * otherwise (GPT-NeoX's halves) channels (i, i + rotary_dim / 2). At position p with
 * c = cos[p][i], s = sin[p][i]: x' = x c - y s, y' = x s + y c, in fp32. */
#ifndef FA_ROTARY_H
#define FA_ROTARY_H

#if defined(__CUDACC__) || defined(__HIPCC__)
#define FA_ROTARY_FN static __host__ __device__ __forceinline__
#else
#define FA_ROTARY_FN static inline
#endif

/* The channels of pair i (0 <= i < rotary_dim / 2). */
FA_ROTARY_FN void fa_rotary_pair(int interleaved, int rotary_dim, int i, int *cx, int *cy)
{
    if (interleaved) {
        *cx = 2 * i;
        *cy = 2 * i + 1;
    } else {
        *cx = i;
        *cy = i + rotary_dim / 2;
    }
}

/* The pair that channel c (< rotary_dim) belongs to. */
FA_ROTARY_FN int fa_rotary_pair_of(int interleaved, int rotary_dim, int c)
{
    return interleaved ? c / 2 : c < rotary_dim / 2 ? c : c - rotary_dim / 2;
}

FA_ROTARY_FN void fa_rotary_apply(float c, float s, float *x, float *y)
{
    float x0 = *x, y0 = *y;
    *x = x0 * c - y0 * s;
    *y = x0 * s + y0 * c;
}

#endif
