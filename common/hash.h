/* common/hash.h - a fast 64-bit checksum of bytes: checkpoints seal their state with it, and the
 * loader fingerprints its shards with it so that a resume can tell whether the data is the same. */
#ifndef FUSEDGPT_HASH_H
#define FUSEDGPT_HASH_H

#include <stddef.h>
#include <stdint.h>

/* Four independent lanes over 32-byte blocks (multiply, rotate), so it runs near memory speed on
 * GBs, then the tail. Chaining: pass one call's result as the next call's seed. Catches bit flips
 * and overwritten or swapped ranges; not cryptographic. */
uint64_t fgpt_hash64(const void *data, size_t n, uint64_t seed);

/* The same hash over bytes that arrive in pieces: the value of fgpt_hash64 over their
 * concatenation, whatever the pieces' sizes. */
typedef struct {
    uint64_t lane[4];
    uint64_t total;
    unsigned char pending[32];
    size_t npending;
} FgptHashStream;

void fgpt_hash_begin(FgptHashStream *s, uint64_t seed);
void fgpt_hash_add(FgptHashStream *s, const void *data, size_t n);
uint64_t fgpt_hash_end(const FgptHashStream *s);

#endif
