/* testrand.h: the seeded random inputs of the conformance tests (SplitMix64 and Box-Muller),
 * shared by the grid harness and the long-sequence test. */
#ifndef FA_TESTRAND_H
#define FA_TESTRAND_H

#include <math.h>
#include <stdint.h>

static inline uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* one standard normal sample */
static inline double rng_normal(uint64_t *s)
{
    double u1 = ((double)(rng_next(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
    double u2 = (double)(rng_next(s) >> 11) * (1.0 / 9007199254740992.0);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#endif
