/* hotcache: a direct-mapped cache of packed Decide answers (hotcache.h). */
#include "core/hotcache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "detd/error.h"

struct slot {
    char id[65];
    uint8_t *buf;
    size_t len;
};

struct hotcache {
    pthread_mutex_t mu; /* the loop writes, the rpc thread reads */
    struct slot *slots;
    size_t mask;
};

int hotcache_new(size_t nslots, hotcache **ret) {
    size_t n = 1;
    while (n < nslots)
        n <<= 1;
    hotcache *hc = calloc(1, sizeof(*hc));
    if (hc == NULL)
        return DETD_ENOMEM;
    hc->slots = calloc(n, sizeof(*hc->slots));
    if (hc->slots == NULL) {
        free(hc);
        return DETD_ENOMEM;
    }
    hc->mask = n - 1;
    pthread_mutex_init(&hc->mu, NULL);
    *ret = hc;
    return 0;
}

static void clear_locked(hotcache *hc) {
    for (size_t i = 0; i <= hc->mask; i++) {
        free(hc->slots[i].buf);
        memset(&hc->slots[i], 0, sizeof(hc->slots[i]));
    }
}

void hotcache_clear(hotcache *hc) {
    if (hc == NULL)
        return;
    pthread_mutex_lock(&hc->mu);
    clear_locked(hc);
    pthread_mutex_unlock(&hc->mu);
}

void hotcache_free(hotcache *hc) {
    if (hc == NULL)
        return;
    clear_locked(hc);
    pthread_mutex_destroy(&hc->mu);
    free(hc->slots);
    free(hc);
}

/* The id is a hex SHA-256 digest: its first 16 hex digits are uniform. */
static size_t slot_of(const hotcache *hc, const char *id) {
    uint64_t h = 0;
    for (int i = 0; i < 16 && id[i] != '\0'; i++) {
        char c = id[i];
        h = h << 4 | (uint64_t)(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    return (size_t)(h & hc->mask);
}

int hotcache_get(hotcache *hc, const char *id, uint8_t *buf, size_t cap,
                 size_t *ret_len) {
    pthread_mutex_lock(&hc->mu);
    struct slot *s = &hc->slots[slot_of(hc, id)];
    if (s->buf == NULL || strcmp(s->id, id) != 0 || s->len > cap) {
        pthread_mutex_unlock(&hc->mu);
        return 0;
    }
    memcpy(buf, s->buf, s->len);
    *ret_len = s->len;
    pthread_mutex_unlock(&hc->mu);
    return 1;
}

void hotcache_put(hotcache *hc, const char *id, const uint8_t *buf,
                  size_t len) {
    if (len == 0 || len > HOTCACHE_MAX_ENTRY || strlen(id) >= 65)
        return;
    uint8_t *copy = malloc(len);
    if (copy == NULL)
        return;
    memcpy(copy, buf, len);
    pthread_mutex_lock(&hc->mu);
    struct slot *s = &hc->slots[slot_of(hc, id)];
    free(s->buf);
    strcpy(s->id, id);
    s->buf = copy;
    s->len = len;
    pthread_mutex_unlock(&hc->mu);
}
