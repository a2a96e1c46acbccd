/* common/hash.c - see hash.h. */
#include "common/hash.h"

#include <string.h>

#define H_P1 0x9E3779B185EBCA87ull
#define H_P2 0xC2B2AE3D27D4EB4Full
static uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static uint64_t hash_round(uint64_t acc, uint64_t w) { return rotl64(acc + w * H_P2, 31) * H_P1; }

uint64_t fgpt_hash64(const void *data, size_t n, uint64_t seed) {
    const unsigned char *p = data;
    uint64_t lane[4] = {seed + H_P1 + H_P2, seed + H_P2, seed, seed - H_P1};
    size_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; k++) {
            uint64_t w;
            memcpy(&w, p + i + 8 * k, 8);
            lane[k] = hash_round(lane[k], w);
        }
    uint64_t h = rotl64(lane[0], 1) + rotl64(lane[1], 7) + rotl64(lane[2], 12) + rotl64(lane[3], 18) + (uint64_t)n;
    for (; i < n; i++) h = rotl64(h ^ (p[i] * H_P1), 11) * H_P2;
    h ^= h >> 33, h *= H_P2, h ^= h >> 29, h *= H_P1, h ^= h >> 32;
    return h;
}
