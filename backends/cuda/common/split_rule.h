/* split_rule.h: how many blocks share each query tile's keys in a forward whose grid leaves the
 * GPU idle (fa_gpu_params.splits; the split instances of the Hopper and sm80 forwards, merged by
 * common/split_combine.cuh), for every launcher: backend.c, the nvcc launchers and host/rtc_*.c.
 * Compiles as C and CUDA; under NVRTC the constants only.
 *
 * FlashAttention-2's rule: no split where the grid's blocks fill 80 % of the resident slots (SMs x
 * blocks per SM); else, among 1 .. FA_SPLIT_MAX splits of at least FA_SPLIT_MIN_KEYS keys each
 * (counts that change the key tiles per split only), the fewest whose blocks fill the slots' waves
 * within 85 % of the best count's efficiency (waves / whole waves). */
#ifndef FA_GPU_SPLIT_RULE_H
#define FA_GPU_SPLIT_RULE_H

#include "common/params.h"

#define FA_SPLIT_MIN_KEYS 512
#define FA_SPLIT_MAX 128
#define FA_SPLIT_COMBINE_THREADS 128 /* split_combine_kernel: a warp per (query row, head) */

#ifndef __CUDACC_RTC__
/* blocks: query tiles x heads x sequences; slots: blocks resident at once; key_tiles: the longest
 * row's key tiles, of tile_keys keys each. */
static inline int64_t fa_split_count(int64_t blocks, int64_t slots, int64_t key_tiles, int64_t tile_keys)
{
    const int64_t min_tiles = tile_keys > 0 ? (FA_SPLIT_MIN_KEYS + tile_keys - 1) / tile_keys : 1;
    if (blocks <= 0 || slots <= 0 || key_tiles < 2 * min_tiles || 5 * blocks >= 4 * slots)
        return 1;
    int64_t most = key_tiles / min_tiles;
    most = most < FA_SPLIT_MAX ? most : FA_SPLIT_MAX;
    double eff[FA_SPLIT_MAX + 1], best = 0.0;
    for (int64_t n = 1; n <= most; ++n) {
        const int64_t per = (key_tiles + n - 1) / n;
        eff[n] = 0.0;
        if (n > 1 && per == (key_tiles + n - 2) / (n - 1))
            continue; /* the same tiles per split as n - 1 splits: not a count of its own */
        const double waves = (double)(blocks * n) / (double)slots;
        eff[n] = waves / (double)((blocks * n + slots - 1) / slots);
        best = eff[n] > best ? eff[n] : best;
    }
    for (int64_t n = 1; n <= most; ++n)
        if (eff[n] >= 0.85 * best)
            return n;
    return 1;
}
#endif

#endif /* FA_GPU_SPLIT_RULE_H */
