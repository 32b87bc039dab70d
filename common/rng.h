#ifndef KVCPT_RNG_H
#define KVCPT_RNG_H
/* Deterministic, platform-independent random numbers (splitmix64 seeding a
 * xoshiro256** stream), so that a seed means the same run everywhere and a
 * checkpoint can store the exact generator state. */
#include <stdint.h>

typedef struct {
    uint64_t s[4];
} Rng;

void rng_seed(Rng *r, uint64_t seed);
uint64_t rng_u64(Rng *r);
/* uniform in [0, 1) with 24 random bits */
float rng_uniform(Rng *r);
/* standard normal (Box-Muller, both values consumed one at a time) */
float rng_normal(Rng *r);
/* 64-bit mix of a value: stable hash for splits and per-stream seeds */
uint64_t hash_u64(uint64_t x);

#endif
