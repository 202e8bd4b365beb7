/*
 * fair: per-session and per-uid caps (see fair.h).
 */
#define _GNU_SOURCE
#include "app/fair.h"

#include <inttypes.h>
#include <stdlib.h>

#include "app/daemon.h"
#include "clock.h"

/* The per-minute caps count in windows of this length. */
#define FAIR_WINDOW_MS 60000
/* uids remembered at most; past it, those with nothing to remember go. */
#define FAIR_MAX_UIDS 4096

/* What one uid has used, its sessions together. */
struct fair_uid {
    uint32_t uid;
    struct fair_usage use;
};

struct fair {
    struct fair_uid *v;
    size_t n, cap;
};

static const struct {
    const char *key;  /* the setting */
    const char *what; /* what it caps, for the answer */
} caps[FAIR_CAP_COUNT] = {
    [FAIR_CLAIMS_SESSION] = {"max-claims-per-session",
                             "open claims per session"},
    [FAIR_CLAIMS_UID] = {"max-claims-per-uid", "open claims per uid"},
    [FAIR_KEYS_SESSION] = {"max-new-keys-per-session",
                           "new keys per minute per session"},
    [FAIR_KEYS_UID] = {"max-new-keys-per-uid", "new keys per minute per uid"},
    [FAIR_GROWTH_SESSION] = {"max-store-kib-per-session",
                             "store growth (KiB per minute) per session"},
    [FAIR_GROWTH_UID] = {"max-store-kib-per-uid",
                         "store growth (KiB per minute) per uid"},
};

/* See fair.h. */
const char *fair_cap_key(fair_cap c) {
    return (unsigned)c < FAIR_CAP_COUNT ? caps[c].key : "";
}

static uint64_t cap_value(const struct daemon *d, fair_cap c) {
    const struct daemon_config *cfg = d->cfg;
    switch (c) {
    case FAIR_CLAIMS_SESSION:
        return cfg->max_claims_per_session;
    case FAIR_CLAIMS_UID:
        return cfg->max_claims_per_uid;
    case FAIR_KEYS_SESSION:
        return cfg->max_new_keys_per_session;
    case FAIR_KEYS_UID:
        return cfg->max_new_keys_per_uid;
    case FAIR_GROWTH_SESSION:
        return cfg->max_store_kib_per_session;
    case FAIR_GROWTH_UID:
        return cfg->max_store_kib_per_uid;
    default:
        return 0;
    }
}

/* uid's usage (NULL: out of memory). */
static struct fair_usage *uid_usage(struct daemon *d, uint32_t uid,
                                    int64_t now) {
    struct fair *f = d->fair;
    if (f == NULL && (f = d->fair = calloc(1, sizeof(*f))) == NULL)
        return NULL;
    for (size_t i = 0; i < f->n; i++)
        if (f->v[i].uid == uid)
            return &f->v[i].use;
    if (f->n >= FAIR_MAX_UIDS) {
        /* Forget the uids whose windows ended and that refuse nothing:
         * they start again from zero, as they would next minute. */
        size_t k = 0;
        for (size_t i = 0; i < f->n; i++) {
            const struct fair_usage *u = &f->v[i].use;
            if (u->refusing != 0 || now - u->keys_since_ms < FAIR_WINDOW_MS ||
                now - u->growth_since_ms < FAIR_WINDOW_MS)
                f->v[k++] = f->v[i];
        }
        f->n = k;
        if (f->n >= FAIR_MAX_UIDS)
            return NULL;
    }
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 16;
        struct fair_uid *v = realloc(f->v, cap * sizeof(*v));
        if (v == NULL)
            return NULL;
        f->v = v;
        f->cap = cap;
    }
    f->v[f->n] = (struct fair_uid){.uid = uid};
    f->v[f->n].use.keys_since_ms = now - FAIR_WINDOW_MS;
    f->v[f->n].use.growth_since_ms = now - FAIR_WINDOW_MS;
    return &f->v[f->n++].use;
}

/* Open claims of uid's sessions. */
static uint64_t uid_claims(const struct daemon *d, uint32_t uid) {
    uint64_t n = 0;
    for (size_t i = 0; i < d->nsessions; i++)
        if (d->sessions[i]->peer_uid == uid)
            n += engine_session_claims(d->engine, d->sessions[i]->id);
    return n;
}

/* The used amount of a per-minute window, restarting it when over. */
static uint64_t *window(int64_t *since, uint64_t *used, int64_t now) {
    if (now - *since >= FAIR_WINDOW_MS) {
        *since = now;
        *used = 0;
    }
    return used;
}

/* Refuse call over cap c (value max) of a subject whose usage is u: log
 * once per episode, count, answer. */
static int refuse(struct daemon *d, rpc_call *call, fair_cap c, uint64_t max,
                  struct fair_usage *u, const struct client_session *s,
                  uint32_t uid) {
    d->counters.fair_refused[c]++;
    if (u != NULL && !(u->refusing & (1u << c))) {
        u->refusing |= 1u << c;
        if (s != NULL && (c == FAIR_CLAIMS_SESSION || c == FAIR_KEYS_SESSION ||
                          c == FAIR_GROWTH_SESSION))
            log_warn("session %" PRIu64 " (pid %d uid %u): %s: limit %" PRIu64
                     " reached (%s); refusing its calls over it until one "
                     "passes (logged once until then)",
                     s->id, (int)s->peer_pid, (unsigned)s->peer_uid,
                     caps[c].what, max, caps[c].key);
        else
            log_warn("uid %u: %s: limit %" PRIu64 " reached (%s); refusing "
                     "its calls over it until one passes (logged once until "
                     "then)",
                     (unsigned)uid, caps[c].what, max, caps[c].key);
    }
    rpc_fail(call, RPC_RESOURCE_EXHAUSTED, "%s: limit %" PRIu64 " reached (%s)",
             caps[c].what, max, caps[c].key);
    return -1;
}

/* See fair.h. */
int fair_new_claim(struct daemon *d, rpc_call *call, struct client_session *s,
                   uint32_t uid) {
    int64_t now = clock_mono_ms();
    struct fair_usage *su = s != NULL ? &s->fair : NULL;
    struct fair_usage *uu = uid_usage(d, uid, now);
    uint64_t max;
    if (su != NULL && (max = cap_value(d, FAIR_CLAIMS_SESSION)) > 0 &&
        engine_session_claims(d->engine, s->id) >= max)
        return refuse(d, call, FAIR_CLAIMS_SESSION, max, su, s, uid);
    if ((max = cap_value(d, FAIR_CLAIMS_UID)) > 0 && uid_claims(d, uid) >= max)
        return refuse(d, call, FAIR_CLAIMS_UID, max, uu, s, uid);
    uint64_t *sk =
        su != NULL ? window(&su->keys_since_ms, &su->keys, now) : NULL;
    uint64_t *uk =
        uu != NULL ? window(&uu->keys_since_ms, &uu->keys, now) : NULL;
    if (sk != NULL && (max = cap_value(d, FAIR_KEYS_SESSION)) > 0 && *sk >= max)
        return refuse(d, call, FAIR_KEYS_SESSION, max, su, s, uid);
    if (uk != NULL && (max = cap_value(d, FAIR_KEYS_UID)) > 0 && *uk >= max)
        return refuse(d, call, FAIR_KEYS_UID, max, uu, s, uid);
    const unsigned passed = 1u << FAIR_CLAIMS_SESSION | 1u << FAIR_CLAIMS_UID |
                            1u << FAIR_KEYS_SESSION | 1u << FAIR_KEYS_UID;
    if (sk != NULL) {
        (*sk)++;
        su->refusing &= ~passed;
    }
    if (uk != NULL) {
        (*uk)++;
        uu->refusing &= ~passed;
    }
    return 0;
}

/* See fair.h. */
int fair_grow(struct daemon *d, rpc_call *call, struct client_session *s,
              uint32_t uid, uint64_t bytes) {
    int64_t now = clock_mono_ms();
    struct fair_usage *su = s != NULL ? &s->fair : NULL;
    struct fair_usage *uu = uid_usage(d, uid, now);
    uint64_t *sg = su != NULL
                       ? window(&su->growth_since_ms, &su->growth_bytes, now)
                       : NULL;
    uint64_t *ug = uu != NULL
                       ? window(&uu->growth_since_ms, &uu->growth_bytes, now)
                       : NULL;
    uint64_t max;
    if (sg != NULL && (max = cap_value(d, FAIR_GROWTH_SESSION)) > 0 &&
        *sg + bytes > max * 1024)
        return refuse(d, call, FAIR_GROWTH_SESSION, max, su, s, uid);
    if (ug != NULL && (max = cap_value(d, FAIR_GROWTH_UID)) > 0 &&
        *ug + bytes > max * 1024)
        return refuse(d, call, FAIR_GROWTH_UID, max, uu, s, uid);
    if (sg != NULL) {
        *sg += bytes;
        su->refusing &= ~(1u << FAIR_GROWTH_SESSION);
    }
    if (ug != NULL) {
        *ug += bytes;
        uu->refusing &= ~(1u << FAIR_GROWTH_UID);
    }
    return 0;
}

/* See fair.h. */
void fair_free(struct daemon *d) {
    if (d->fair == NULL)
        return;
    free(d->fair->v);
    free(d->fair);
    d->fair = NULL;
}
