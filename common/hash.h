/* common/hash.h - a fast 64-bit checksum of bytes: checkpoints seal their state with it, and the
 * loader fingerprints its shard with it so that a resume can tell whether the data is the same. */
#ifndef FUSEDGPT_HASH_H
#define FUSEDGPT_HASH_H

#include <stddef.h>
#include <stdint.h>

/* Four independent lanes over 32-byte blocks (multiply, rotate), so it runs near memory speed on
 * GBs, then the tail. Chaining: pass one call's result as the next call's seed. Catches bit flips
 * and overwritten or swapped ranges; not cryptographic. */
uint64_t fgpt_hash64(const void *data, size_t n, uint64_t seed);

#endif
