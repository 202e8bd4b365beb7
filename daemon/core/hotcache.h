/*
 * hotcache: packed Decide answers for decided keys, so a repeated Decide
 * skips the store lookup and the encoding. Pure memory, loop thread only.
 *
 * Decisions never change once committed (first writer wins) except
 * through an operator reset, which must call hotcache_clear(). The cache
 * is direct-mapped with a fixed number of slots: memory is bounded by
 * slots x (entry size), and a collision simply replaces the older entry.
 */
#ifndef DETD_HOTCACHE_H
#define DETD_HOTCACHE_H

#include <stddef.h>
#include <stdint.h>

typedef struct hotcache hotcache;

/* Largest answer kept; bigger ones are served from the store each time. */
#define HOTCACHE_MAX_ENTRY 2048

/*
 * Create a cache of nslots slots (rounded up to a power of two).
 * Returns 0 or DETD_ENOMEM; *ret owns the cache (hotcache_free()).
 */
int hotcache_new(size_t nslots, hotcache **ret);

/* Free the cache. NULL is a no-op. */
void hotcache_free(hotcache *hc);

/*
 * Look up id (thread-safe: the loop puts and clears, the rpc thread may
 * get). On a hit the packed answer is copied into buf (cap bytes; an entry
 * never exceeds HOTCACHE_MAX_ENTRY), *ret_len set, and 1 returned; 0 on a
 * miss.
 */
int hotcache_get(hotcache *hc, const char *id, uint8_t *buf, size_t cap,
                 size_t *ret_len);

/* Keep a copy of buf for id (ignored over HOTCACHE_MAX_ENTRY or on OOM). */
void hotcache_put(hotcache *hc, const char *id, const uint8_t *buf, size_t len);

/* Forget everything (after a reset). */
void hotcache_clear(hotcache *hc);

#endif /* DETD_HOTCACHE_H */
