/* tokenizer/hash_maps.c - the two hash maps of the tokenizer: token pair -> id (training's pair
 * table and encoding's merge table) and byte string -> value (chunk counts in training, the chunk
 * cache in encoding). Open addressing with linear probing; both grow at 1/2 load. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer_internal.h"

static size_t capacity_for(size_t expected) {
    size_t cap = 64;
    while (cap < 2 * expected) cap <<= 1;
    return cap;
}

/* ---- pair map ---- */

int pair_map_init(PairMap *m, size_t expected) {
    size_t cap = capacity_for(expected);
    m->keys = malloc(cap * sizeof *m->keys);
    m->values = malloc(cap * sizeof *m->values);
    if (!m->keys || !m->values) {
        free(m->keys);
        free(m->values);
        m->keys = NULL;
        m->values = NULL;
        return -1;
    }
    /* PAIR_MAP_EMPTY is all ones, so memset can fill it. */
    memset(m->keys, 0xff, cap * sizeof *m->keys);
    m->mask = cap - 1;
    m->count = 0;
    return 0;
}

void pair_map_free(PairMap *m) {
    free(m->keys);
    free(m->values);
    m->keys = NULL;
    m->values = NULL;
}

static int pair_map_grow(PairMap *m) {
    PairMap bigger;
    if (pair_map_init(&bigger, m->mask + 1) != 0) return -1;
    for (size_t i = 0; i <= m->mask; i++) {
        if (m->keys[i] == PAIR_MAP_EMPTY) continue;
        size_t j = pair_hash(m->keys[i]) & bigger.mask;
        while (bigger.keys[j] != PAIR_MAP_EMPTY) j = (j + 1) & bigger.mask;
        bigger.keys[j] = m->keys[i];
        bigger.values[j] = m->values[i];
    }
    bigger.count = m->count;
    pair_map_free(m);
    *m = bigger;
    return 0;
}

int64_t pair_map_upsert(PairMap *m, uint64_t key, uint32_t fresh, int *inserted) {
    if (2 * (m->count + 1) > m->mask + 1 && pair_map_grow(m) != 0) return -1;
    size_t i = pair_hash(key) & m->mask;
    for (;;) {
        uint64_t k = m->keys[i];
        if (k == key) {
            *inserted = 0;
            return (int64_t)i;
        }
        if (k == PAIR_MAP_EMPTY) break;
        i = (i + 1) & m->mask;
    }
    m->keys[i] = key;
    m->values[i] = fresh;
    m->count++;
    *inserted = 1;
    return (int64_t)i;
}

/* ---- bytes map ---- */

/* Eight bytes at a time through a multiply-xorshift mix: chunks are short, so the tail matters as
 * much as the loop. */
uint64_t bytes_hash(const uint8_t *s, size_t n) {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (n * 0xff51afd7ed558ccdull);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 31;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    for (size_t i = 0; i < n; i++) w |= (uint64_t)s[i] << (8 * i);
    h = (h ^ w) * 0x94d049bb133111ebull;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return h;
}

int bytes_map_init(BytesMap *m, size_t expected) {
    memset(m, 0, sizeof *m);
    size_t cap = capacity_for(expected);
    m->slots = calloc(cap, sizeof *m->slots);
    m->arena_cap = 1 << 16;
    m->arena = malloc(m->arena_cap);
    if (!m->slots || !m->arena) {
        bytes_map_free(m);
        return -1;
    }
    m->mask = cap - 1;
    return 0;
}

void bytes_map_free(BytesMap *m) {
    free(m->slots);
    free(m->arena);
    memset(m, 0, sizeof *m);
}

void bytes_map_clear(BytesMap *m) {
    memset(m->slots, 0, (m->mask + 1) * sizeof *m->slots);
    m->count = 0;
    m->arena_len = 0;
}

static int bytes_map_grow(BytesMap *m) {
    size_t cap = 2 * (m->mask + 1);
    BytesSlot *slots = calloc(cap, sizeof *slots);
    if (!slots) return -1;
    for (size_t i = 0; i <= m->mask; i++) {
        if (!m->slots[i].used) continue;
        size_t j = m->slots[i].hash & (cap - 1);
        while (slots[j].used) j = (j + 1) & (cap - 1);
        slots[j] = m->slots[i];
    }
    free(m->slots);
    m->slots = slots;
    m->mask = cap - 1;
    return 0;
}

BytesSlot *bytes_map_find(const BytesMap *m, const uint8_t *s, size_t n, uint64_t h) {
    size_t i = h & m->mask;
    for (;;) {
        BytesSlot *slot = &m->slots[i];
        if (!slot->used) return NULL;
        if (slot->hash == h && slot->key_len == n && memcmp(m->arena + slot->key_off, s, n) == 0) return slot;
        i = (i + 1) & m->mask;
    }
}

BytesSlot *bytes_map_upsert(BytesMap *m, const uint8_t *s, size_t n, uint64_t h, int *inserted) {
    size_t i = h & m->mask;
    for (;;) {
        BytesSlot *slot = &m->slots[i];
        if (!slot->used) break;
        if (slot->hash == h && slot->key_len == n && memcmp(m->arena + slot->key_off, s, n) == 0) {
            *inserted = 0;
            return slot;
        }
        i = (i + 1) & m->mask;
    }
    if (m->arena_len + n > m->arena_cap) {
        size_t cap = m->arena_cap;
        while (cap < m->arena_len + n) cap *= 2;
        uint8_t *arena = realloc(m->arena, cap);
        if (!arena) return NULL;
        m->arena = arena;
        m->arena_cap = cap;
    }
    if (2 * (m->count + 1) > m->mask + 1) {
        if (bytes_map_grow(m) != 0) return NULL;
        i = h & m->mask;
        while (m->slots[i].used) i = (i + 1) & m->mask;
    }
    memcpy(m->arena + m->arena_len, s, n);
    BytesSlot *slot = &m->slots[i];
    slot->hash = h;
    slot->key_off = m->arena_len;
    slot->key_len = (uint32_t)n;
    slot->used = 1;
    slot->value = 0;
    m->arena_len += n;
    m->count++;
    *inserted = 1;
    return slot;
}
