/* score_mod_accuracy.cu: the softcap's device arithmetic (core/score_mod.h compiled by nvcc, as the
 * CUDA kernels use it) against the float64 tanh, on the GPU: the largest |t - tanh(y)| over a
 * dense grid of y in [-40, 40], and the special values (+-0, +-inf, NaN, the clamps of the
 * exponential). The bound is 6 units in the last place of 1.0 (3.6e-7); the C path's error is
 * about 1.8e-7 (docs/options.md), and the error bounds of ex2.approx and rcp.approx (PTX ISA)
 * give about 3e-7 for the NVIDIA path. Exit 77 (skip) where no CUDA device is present. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "score_mod.h"

__global__ void softcap_kernel(const float *x, float *y, int n, fa_softcap_factors f)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = fa_softcap_apply(f, x[i]);
}

static int check(cudaError_t e, const char *what)
{
    if (e != cudaSuccess) {
        fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
        return 0;
    }
    return 1;
}

int main(void)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        printf("no CUDA device: skipped\n");
        return 77;
    }
    const int grid = 1 << 22;
    const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-30f, -1e-30f, 43.6f, -43.6f,
                              44.0f, -44.0f, 88.0f, -88.0f, 1e30f, -1e30f, 3.4e38f, -3.4e38f};
    const int ns = (int)(sizeof specials / sizeof specials[0]), n = grid + ns;
    float *hx = (float *)malloc(sizeof(float) * n), *hy = (float *)malloc(sizeof(float) * n);
    if (!hx || !hy)
        return 1;
    for (int i = 0; i < grid; ++i)
        hx[i] = -40.0f + 80.0f * (float)i / (float)(grid - 1);
    for (int i = 0; i < ns; ++i)
        hx[grid + i] = specials[i];
    float *dx = NULL, *dy = NULL;
    if (!check(cudaMalloc(&dx, sizeof(float) * n), "cudaMalloc") ||
        !check(cudaMalloc(&dy, sizeof(float) * n), "cudaMalloc") ||
        !check(cudaMemcpy(dx, hx, sizeof(float) * n, cudaMemcpyHostToDevice), "cudaMemcpy"))
        return 1;
    /* u = 1, c = 1: x' = tanh(x) */
    softcap_kernel<<<(n + 255) / 256, 256>>>(dx, dy, n, fa_softcap_make(1.0f, 1.0f));
    if (!check(cudaGetLastError(), "launch") ||
        !check(cudaMemcpy(hy, dy, sizeof(float) * n, cudaMemcpyDeviceToHost), "cudaMemcpy"))
        return 1;
    double worst = 0.0, worst_x = 0.0;
    int bad = 0;
    for (int i = 0; i < n; ++i) {
        const double want = tanh((double)hx[i]);
        if (isnan(hx[i])) {
            if (!isnan(hy[i])) {
                fprintf(stderr, "softcap(NaN) = %g, want NaN\n", (double)hy[i]);
                bad = 1;
            }
            continue;
        }
        const double err = fabs((double)hy[i] - want);
        if (isnan(err)) {
            fprintf(stderr, "softcap(%g) = %g, want %g\n", (double)hx[i], (double)hy[i], want);
            bad = 1;
        } else if (err > worst) {
            worst = err;
            worst_x = hx[i];
        }
    }
    const double bound = 6.0 * 5.9604644775390625e-8;
    printf("softcap on the device: largest |t - tanh(y)| %.3g at y = %.9g (bound %.3g) over %d values\n", worst,
           worst_x, bound, n);
    if (!(worst <= bound)) {
        fprintf(stderr, "FAIL: the error exceeds the bound\n");
        bad = 1;
    }
    cudaFree(dx);
    cudaFree(dy);
    free(hx);
    free(hy);
    return bad;
}
