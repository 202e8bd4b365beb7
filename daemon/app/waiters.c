/*
 * waiters: the held Decide calls, hashed by engine token (see waiters.h).
 */
#include "app/waiters.h"

#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "detd/error.h"

#define WAITERS_BUCKETS 1024

struct waiters {
    struct pending **buckets;
    size_t nbuckets;
    size_t n;
    struct metrics_hist hist;
};

/* See waiters.h. */
int waiters_new(waiters **ret) {
    waiters *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return DETD_ENOMEM;
    w->nbuckets = WAITERS_BUCKETS;
    w->buckets = calloc(w->nbuckets, sizeof(*w->buckets));
    if (w->buckets == NULL) {
        free(w);
        return DETD_ENOMEM;
    }
    *ret = w;
    return 0;
}

/* See waiters.h. */
void waiters_free(waiters *w) {
    if (w == NULL)
        return;
    free(w->buckets);
    free(w);
}

/* See waiters.h. */
struct pending *pending_new(uint64_t token, rpc_call *call,
                            Detd__V1__DecideRequest *req, const char *id,
                            int64_t now_ms) {
    struct pending *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return NULL;
    p->token = token;
    p->call = call;
    p->req = req;
    memcpy(p->id, id, sizeof(p->id) - 1);
    p->started_ms = now_ms;
    return p;
}

/* See waiters.h. */
void pending_free(struct pending *p) {
    if (p == NULL)
        return;
    protobuf_c_message_free_unpacked(&p->req->base, NULL);
    free(p);
}

/* See waiters.h. */
uint32_t pending_waited(const struct pending *p) {
    int64_t w = clock_mono_ms() - p->started_ms;
    return w < 0 ? 0 : (uint32_t)w;
}

static size_t bucket(const waiters *w, uint64_t token) {
    return (size_t)((token * 0x9E3779B97F4A7C15ULL) >> 32) % w->nbuckets;
}

/* See waiters.h. */
void waiters_add(waiters *w, struct pending *p) {
    size_t b = bucket(w, p->token);
    p->next = w->buckets[b];
    w->buckets[b] = p;
    w->n++;
    rpc_watch_close(p->call);
}

/* See waiters.h. */
struct pending *waiters_take(waiters *w, uint64_t token) {
    for (struct pending **pp = &w->buckets[bucket(w, token)]; *pp != NULL;
         pp = &(*pp)->next) {
        if ((*pp)->token == token) {
            struct pending *p = *pp;
            *pp = p->next;
            p->next = NULL;
            w->n--;
            metrics_hist_observe(&w->hist, (double)pending_waited(p) / 1000.0);
            return p;
        }
    }
    return NULL;
}

/* See waiters.h. */
struct pending *waiters_take_call(waiters *w, rpc_call *call) {
    for (size_t b = 0; b < w->nbuckets; b++)
        for (struct pending *p = w->buckets[b]; p != NULL; p = p->next)
            if (p->call == call)
                return waiters_take(w, p->token);
    return NULL;
}

/* See waiters.h. */
struct pending *waiters_take_any(waiters *w) {
    for (size_t b = 0; b < w->nbuckets && w->n > 0; b++)
        if (w->buckets[b] != NULL)
            return waiters_take(w, w->buckets[b]->token);
    return NULL;
}

/* See waiters.h. */
size_t waiters_count(const waiters *w) {
    return w->n;
}

/* See waiters.h. */
const struct metrics_hist *waiters_hist(const waiters *w) {
    return &w->hist;
}
