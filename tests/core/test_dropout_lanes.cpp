/* test_dropout_lanes.cpp: the CUDA kernels' dropout exchanges (backends/cuda/common/dropout.cuh)
 * on an emulated warp, against the rule of core/philox.h.
 *
 * Each lane of the mma layouts computes one Philox block and hands its partners the words they
 * need with __shfl_xor_sync. Compiled here as plain C++ for 32 emulated lanes run one after
 * another, in two passes: the first records what every lane sends at each shuffle, the second
 * delivers it (what a lane sends depends only on its own block, never on what it received). Every
 * verdict bit is checked against fa_dropout_keep for the element the layout says the bit is. */
#define __device__
#define __host__
#define __forceinline__ inline

#include <cstdint>
#include <cstdio>

namespace {
int g_lane, g_pass, g_call;
uint32_t g_sent[32][256];

uint32_t __shfl_xor_sync(unsigned mask, uint32_t v, int lane_mask)
{
    (void)mask;
    const int call = g_call++;
    if (g_pass == 0) {
        g_sent[g_lane][call] = v;
        return 0u;
    }
    return g_sent[g_lane ^ lane_mask][call];
}
} // namespace

#include "common/dropout.cuh"

namespace {
struct position {
    uint64_t seed, offset;
    int64_t b, heads_q, h, q0, k0; /* q0, k0: the warp's first query and key (k0 a multiple of 8) */
};

const position positions[] = {
    {0x0123456789abcdefull, 0, 0, 1, 0, 0, 0},
    {42, 7, 1, 8, 5, 48, 128},
    {0xfffffffffffffff0ull, 0xfffffffffffffff0ull, 3, 16, 15, 4096 - 16, 65536 + 40},
    {0x00000001fffffff0ull, 1ull << 40, 2, 32, 31, (int64_t)0xffffffffll - 64, 8},
};
const uint32_t thresholds[] = {0u, 1u, 0x2b85u, 0x8000u, 0xfffeu, 0xffffu};

int failures;

void check(bool got, const fa_gpu_params &p, const position &x, int64_t i, int64_t j, const char *what, int lane,
           int bit)
{
    const bool want = fa_dropout_keep(x.seed, x.offset, (uint64_t)x.b, (uint64_t)x.heads_q, (uint64_t)x.h, (uint64_t)i,
                                      (uint64_t)j, p.dropout_threshold) != 0;
    if (got != want && failures++ < 10)
        std::printf("%s: lane %d bit %d (query %lld, key %lld, threshold %u): got %d, want %d\n", what, lane, bit,
                    (long long)i, (long long)j, p.dropout_threshold, (int)got, (int)want);
}

/* The accumulator layout: lane = 4 g + t4 holds rows q0 + g (+ 8) and keys k0 + 8 nt + 2 t4 (+ 1). */
template <int NT8>
void rows_by_keys(const fa_gpu_params &p, const position &x)
{
    uint32_t keep[32][(4 * NT8 + 31) / 32];
    for (g_pass = 0; g_pass < 2; ++g_pass)
        for (g_lane = 0; g_lane < 32; ++g_lane) {
            g_call = 0;
            fa_gpu::dropout_keep_rows_by_keys_all<NT8>(p, x.b, x.h, x.q0 + g_lane / 4, x.k0 + 2 * (g_lane % 4),
                                                       keep[g_lane]);
        }
    for (int lane = 0; lane < 32; ++lane)
        for (int nt = 0; nt < NT8; ++nt)
            for (int e = 0; e < 4; ++e) {
                const int bit = 4 * nt + e;
                const int64_t i = x.q0 + lane / 4 + 8 * (e >> 1), j = x.k0 + 8 * nt + 2 * (lane % 4) + (e & 1);
                check((keep[lane][bit / 32] >> (bit % 32)) & 1u, p, x, i, j, "rows by keys", lane, bit);
            }
}

/* The transposed layout: lane = 4 g + t4 holds keys k0 + g (+ 8) and queries q0 + 8 nt + 2 t4 (+ 1). */
template <int NT8>
void keys_by_rows(const fa_gpu_params &p, const position &x)
{
    uint32_t keep[32][(4 * NT8 + 31) / 32];
    for (g_pass = 0; g_pass < 2; ++g_pass)
        for (g_lane = 0; g_lane < 32; ++g_lane) {
            g_call = 0;
            fa_gpu::dropout_keep_keys_by_rows<NT8>(p, x.b, x.h, x.q0 + 2 * (g_lane % 4), x.k0 + g_lane / 4,
                                                   keep[g_lane]);
        }
    for (int lane = 0; lane < 32; ++lane)
        for (int nt = 0; nt < NT8; ++nt)
            for (int e = 0; e < 4; ++e) {
                const int bit = 4 * nt + e;
                const int64_t i = x.q0 + 8 * nt + 2 * (lane % 4) + (e & 1), j = x.k0 + lane / 4 + 8 * (e >> 1);
                check((keep[lane][bit / 32] >> (bit % 32)) & 1u, p, x, i, j, "keys by rows", lane, bit);
            }
}
} // namespace

int main()
{
    int verdicts = 0;
    for (const position &x : positions)
        for (uint32_t t : thresholds) {
            fa_gpu_params p = {};
            p.seed = x.seed;
            p.offset = x.offset;
            p.heads_q = x.heads_q;
            p.dropout_threshold = t;
            /* the n8 block counts of the kernels' tiles, odd ones included */
            rows_by_keys<1>(p, x);
            rows_by_keys<3>(p, x);
            rows_by_keys<8>(p, x);
            rows_by_keys<16>(p, x);
            keys_by_rows<1>(p, x);
            keys_by_rows<3>(p, x);
            keys_by_rows<8>(p, x);
            keys_by_rows<16>(p, x);
            verdicts += 32 * 4 * 2 * (1 + 3 + 8 + 16);
        }
    std::printf("%d verdicts, %d wrong\n", verdicts, failures);
    return failures ? 1 : 0;
}
