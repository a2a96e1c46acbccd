/* common/hash.c - see hash.h. */
#include "common/hash.h"

#include <string.h>

#define H_P1 0x9E3779B185EBCA87ull
#define H_P2 0xC2B2AE3D27D4EB4Full
static uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static uint64_t hash_round(uint64_t acc, uint64_t w) { return rotl64(acc + w * H_P2, 31) * H_P1; }

static void add_block(uint64_t lane[4], const unsigned char *p) {
    for (int k = 0; k < 4; k++) {
        uint64_t w;
        memcpy(&w, p + 8 * k, 8);
        lane[k] = hash_round(lane[k], w);
    }
}

void fgpt_hash_begin(FgptHashStream *s, uint64_t seed) {
    s->lane[0] = seed + H_P1 + H_P2, s->lane[1] = seed + H_P2, s->lane[2] = seed, s->lane[3] = seed - H_P1;
    s->total = 0;
    s->npending = 0;
}

void fgpt_hash_add(FgptHashStream *s, const void *data, size_t n) {
    const unsigned char *p = data;
    s->total += n;
    if (s->npending) { /* complete the block an earlier piece began */
        size_t take = 32 - s->npending < n ? 32 - s->npending : n;
        memcpy(s->pending + s->npending, p, take);
        s->npending += take, p += take, n -= take;
        if (s->npending < 32) return;
        add_block(s->lane, s->pending);
        s->npending = 0;
    }
    for (; n >= 32; p += 32, n -= 32) add_block(s->lane, p);
    memcpy(s->pending, p, n);
    s->npending = n;
}

uint64_t fgpt_hash_end(const FgptHashStream *s) {
    const uint64_t *lane = s->lane;
    uint64_t h = rotl64(lane[0], 1) + rotl64(lane[1], 7) + rotl64(lane[2], 12) + rotl64(lane[3], 18) + s->total;
    for (size_t i = 0; i < s->npending; i++) h = rotl64(h ^ (s->pending[i] * H_P1), 11) * H_P2;
    h ^= h >> 33, h *= H_P2, h ^= h >> 29, h *= H_P1, h ^= h >> 32;
    return h;
}

uint64_t fgpt_hash64(const void *data, size_t n, uint64_t seed) {
    FgptHashStream s;
    fgpt_hash_begin(&s, seed);
    fgpt_hash_add(&s, data, n);
    return fgpt_hash_end(&s);
}
