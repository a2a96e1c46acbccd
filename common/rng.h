/* common/rng.h - the project's one random number generator (splitmix64 seeding xoshiro256**).
 * Used for parameter init, batch shuffling, sampling and test inputs. Its whole state is four
 * words, so checkpoints save and restore it and a resumed run draws the same numbers. */
#ifndef FUSEDGPT_RNG_H
#define FUSEDGPT_RNG_H

#include <math.h>
#include <stdint.h>

typedef struct {
    uint64_t s[4];
} Rng;

static inline uint64_t rng_splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline void rng_seed(Rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = rng_splitmix64(&seed);
}

static inline uint64_t rng_rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

static inline uint64_t rng_next(Rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rng_rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rng_rotl(s[3], 45);
    return result;
}

/* Uniform in [0, 1) with 53 random bits. */
static inline double rng_uniform(Rng *r) {
    return (double)(rng_next(r) >> 11) * 0x1.0p-53;
}

/* Uniform integer in [0, n), n > 0 (Lemire's multiply-shift; the bias is below 2^-32 for the n
 * used here). */
static inline uint64_t rng_below(Rng *r, uint64_t n) {
    return (uint64_t)(((unsigned __int128)rng_next(r) * n) >> 64);
}

/* Standard normal by Box-Muller (one value per call; simple beats fast here). */
static inline double rng_normal(Rng *r) {
    double u1 = rng_uniform(r), u2 = rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#endif
