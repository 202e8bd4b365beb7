/*
 * coord: the etcd backend's cluster-wide claims (see coord.h).
 */
#define _GNU_SOURCE
#include "app/coord.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/daemon.h"
#include "app/reply.h"
#include "clock.h"
#include "detd/error.h"

#define COORD_RECLAIM_MS 1000 /* re-check a claim held elsewhere */
#define COORD_PERSIST_MS 500  /* how often the applied revision is stored */

/* Cluster claim state of one key with local interest. */
struct ckey {
    char id[KEYID_HEX_LEN + 1];
    int claiming;         /* a claim job is in flight */
    int ours;             /* this node holds the claim key */
    int remote;           /* claim again at retry_at: another node held
                             it, or etcd did not answer (err) */
    int err;              /* the last claim failure (etcd), or 0 */
    struct pending *held; /* designated locally, not answered yet */
    int64_t retry_at;     /* remote: next claim attempt */
    struct ckey *next;
};

struct coord {
    struct daemon *d;
    struct coord_cluster ops;
    struct ckey *ckeys;      /* keys with cluster claim activity */
    int64_t revision;        /* last applied etcd revision */
    int64_t revision_stored; /* ... as stored in the meta table */
    int64_t persist_at;      /* next time it may be stored */
    int connected;
    char error[256];
};

static int real_claim(void *ctx, const char *id, int recheck,
                      int64_t deadline_ms) {
    return cluster_claim(ctx, id, recheck, deadline_ms);
}

static int real_release(void *ctx, const char *id) {
    return cluster_release(ctx, id);
}

static int real_commit(void *ctx, const struct decision *row, uint64_t claim_id,
                       int64_t deadline_ms, uint64_t cookie) {
    return cluster_commit(ctx, row, claim_id, deadline_ms, cookie);
}

static int real_commit_many(void *ctx, const struct decision *rows, size_t n,
                            uint64_t claim_id, int64_t deadline_ms,
                            uint64_t first_cookie, int *ret_err) {
    return cluster_commit_many(ctx, rows, n, claim_id, deadline_ms,
                               first_cookie, ret_err);
}

static int real_read(void *ctx, const char *const *ids, size_t n,
                     int64_t deadline_ms, uint64_t first_cookie) {
    return cluster_read(ctx, ids, n, deadline_ms, first_cookie);
}

static int64_t real_defer(void *ctx, const char *id) {
    return cluster_defer_of(ctx, id);
}

static int real_settled(void *ctx, int64_t *ret_bound_ms) {
    *ret_bound_ms = cluster_registry_settle_ms(ctx);
    return cluster_registry_settled(ctx);
}

/* See coord.h. */
struct coord_cluster coord_cluster_of(cluster *cl) {
    return (struct coord_cluster){cl,          real_claim,       real_release,
                                  real_commit, real_commit_many, real_read,
                                  real_defer,  real_settled};
}

/* See coord.h. */
int coord_new(struct daemon *d, coord **ret) {
    coord *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return DETD_ENOMEM;
    c->d = d;
    char *rev = NULL;
    if (store_get_meta(d->store, "etcd_revision", &rev) == 0) {
        c->revision = strtoll(rev, NULL, 10);
        c->revision_stored = c->revision;
        free(rev);
    }
    *ret = c;
    return 0;
}

/* See coord.h. */
void coord_set_cluster(coord *c, const struct coord_cluster *ops) {
    c->ops = *ops;
}

/* See coord.h. */
const struct coord_cluster *coord_cluster_ops(const coord *c) {
    return &c->ops;
}

/* See coord.h. */
void coord_free(coord *c) {
    if (c == NULL)
        return;
    while (c->ckeys != NULL) {
        struct ckey *k = c->ckeys;
        c->ckeys = k->next;
        free(k);
    }
    free(c);
}

/* See coord.h. */
int64_t coord_revision(const coord *c) {
    return c->revision;
}

static struct ckey *ckey_find(const coord *c, const char *id) {
    for (struct ckey *k = c->ckeys; k != NULL; k = k->next)
        if (strcmp(k->id, id) == 0)
            return k;
    return NULL;
}

static struct ckey *ckey_get(coord *c, const char *id) {
    struct ckey *k = ckey_find(c, id);
    if (k != NULL)
        return k;
    k = calloc(1, sizeof(*k));
    if (k == NULL)
        return NULL;
    snprintf(k->id, sizeof(k->id), "%s", id);
    k->next = c->ckeys;
    c->ckeys = k;
    return k;
}

static void ckey_remove(coord *c, struct ckey *k) {
    for (struct ckey **pp = &c->ckeys; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == k) {
            *pp = k->next;
            free(k);
            return;
        }
    }
}

/* Free k when nothing refers to it any more; release the claim key when
 * ours and no local claim remains. */
static void ckey_settle(coord *c, struct ckey *k) {
    if (k->held != NULL || k->claiming)
        return;
    if (engine_claim_of(c->d->engine, k->id, NULL))
        return;
    if (k->ours) {
        c->ops.release(c->ops.ctx, k->id);
        k->ours = 0;
    }
    ckey_remove(c, k);
}

static const char *etcd_why(const coord *c, const struct ckey *k) {
    if (k != NULL && k->err != 0)
        return detd_strerror(k->err);
    return c->error[0] != '\0' ? c->error : "no answer";
}

/* Answer a held asker whose deadline passed. */
static void answer_held_timeout(coord *c, struct ckey *k, struct pending *p) {
    c->d->counters.wait_timeouts++;
    if (k->err == 0 && k->remote && c->connected) {
        /* Another node is timing it: an ordinary wait timeout. */
        reply_timeout(p->call, pending_waited(p), NULL);
        return;
    }
    rpc_fail(p->call, RPC_UNAVAILABLE,
             "etcd unreachable (%s): detd never decides a new key without "
             "etcd; key %.12s stays undecided (apply on_miss)",
             etcd_why(c, k), k->id);
}

/* Drop k's held asker (already answered or gone): its local claim moves
 * on to the next local waiter, if any. */
static void drop_held(coord *c, struct ckey *k) {
    struct pending *p = k->held;
    k->held = NULL;
    waiters_take(c->d->waiters, p->token);
    uint64_t claim = p->claim_id;
    pending_free(p);
    /* May designate the next local waiter: coord_hold() re-enters. */
    engine_release(c->d->engine, k->id, claim, clock_mono_ms());
}

/* recheck: the periodic re-check of a claim held elsewhere, or a retry
 * after etcd failed (cluster_claim reads before it writes). */
static void start_claim(coord *c, struct ckey *k, int recheck) {
    if (k->claiming || k->held == NULL)
        return;
    if (c->ops.claim(c->ops.ctx, k->id, recheck, k->held->deadline_ms) == 0)
        k->claiming = 1;
}

/* See coord.h. */
void coord_hold(coord *c, struct pending *p) {
    struct ckey *k = ckey_get(c, p->id);
    if (k == NULL) {
        engine_release(c->d->engine, p->id, p->claim_id, clock_mono_ms());
        rpc_fail(p->call, RPC_RESOURCE_EXHAUSTED, "out of memory");
        pending_free(p);
        return;
    }
    if (k->ours) {
        reply_designated(c->d, p->call, p->id, p->claim_id, p->takeover,
                         pending_waited(p));
        pending_free(p);
        return;
    }
    if (k->held != NULL && k->held != p) {
        /* The engine passed the local claim away from the old holder
         * (its session ended or its lease ran out): it no longer holds
         * anything. */
        struct pending *old = k->held;
        k->held = NULL;
        waiters_take(c->d->waiters, old->token);
        if (old->claim_id == p->claim_id)
            rpc_fail(old->call, RPC_CANCELLED,
                     "a newer Decide for key %.12s from the same session "
                     "replaced this call",
                     k->id);
        else
            rpc_fail(old->call, RPC_UNAVAILABLE,
                     "the claim on key %.12s passed to another rank", k->id);
        pending_free(old);
    }
    p->held = 1;
    k->held = p;
    waiters_add(c->d->waiters, p);
    if (!k->remote)
        start_claim(c, k, 0);
    else if (k->retry_at == 0)
        k->retry_at = clock_mono_ms() + COORD_RECLAIM_MS;
}

/* See coord.h. */
void coord_held_cancelled(coord *c, struct pending *p) {
    struct ckey *k = ckey_find(c, p->id);
    if (k == NULL || k->held != p) {
        pending_free(p);
        return;
    }
    k->held = NULL;
    uint64_t claim = p->claim_id;
    rpc_fail(p->call, RPC_CANCELLED, "cancelled by the client");
    pending_free(p);
    engine_release(c->d->engine, k->id, claim, clock_mono_ms());
    ckey_settle(c, k);
}

/* See coord.h. */
void coord_sweep(coord *c) {
    struct ckey *k = c->ckeys;
    while (k != NULL) {
        struct ckey *next = k->next;
        ckey_settle(c, k);
        k = next;
    }
}

static void persist_revision(coord *c) {
    if (c->revision <= c->revision_stored)
        return;
    char buf[32];
    snprintf(buf, sizeof(buf), "%" PRId64, c->revision);
    if (store_set_meta(c->d->store, "etcd_revision", buf) != 0)
        log_error("store etcd revision: %s", store_errmsg(c->d->store));
    else
        c->revision_stored = c->revision;
}

/* See coord.h. */
int64_t coord_tick(coord *c, int64_t now) {
    int64_t next = INT64_MAX;
    if (c->revision > c->revision_stored) {
        if (now >= c->persist_at) {
            persist_revision(c);
            c->persist_at = now + COORD_PERSIST_MS;
        } else {
            next = c->persist_at;
        }
    }
    struct ckey *k = c->ckeys;
    while (k != NULL) {
        struct ckey *nk = k->next;
        if (k->held != NULL && k->held->deadline_ms <= now) {
            answer_held_timeout(c, k, k->held);
            drop_held(c, k);
        }
        if (k->held != NULL && k->remote && !k->claiming &&
            k->retry_at <= now) {
            start_claim(c, k, 1);
            k->retry_at = now + COORD_RECLAIM_MS;
        }
        if (k->held != NULL) {
            if (k->held->deadline_ms < next)
                next = k->held->deadline_ms;
            if (k->remote && k->retry_at < next)
                next = k->retry_at;
        }
        ckey_settle(c, k);
        k = nk;
    }
    return next;
}

/* See coord.h. */
void coord_decided(coord *c, const char *id, const struct decision *won,
                   int committed_here) {
    struct ckey *k = ckey_find(c, id);
    if (k == NULL)
        return;
    k->claiming = 0;
    if (won == NULL)
        return;
    if (k->held != NULL) {
        struct pending *p = k->held;
        k->held = NULL;
        waiters_take(c->d->waiters, p->token);
        reply_decided(p->call, won, pending_waited(p));
        pending_free(p);
    }
    if (k->ours && !committed_here)
        c->ops.release(c->ops.ctx, k->id); /* another node decided it */
    k->ours = 0; /* this node's commit deleted the claim key */
    ckey_settle(c, k);
}

/* See coord.h. */
void coord_event(coord *c, const struct cluster_event *ev) {
    struct ckey *k;
    switch (ev->kind) {
    case CLUSTER_EV_CLAIMED:
        k = ckey_find(c, ev->id);
        if (k == NULL) {
            c->ops.release(c->ops.ctx, ev->id);
            break;
        }
        k->claiming = 0;
        k->ours = 1;
        k->remote = 0;
        k->err = 0;
        if (k->held != NULL) {
            struct pending *p = k->held;
            k->held = NULL;
            waiters_take(c->d->waiters, p->token);
            log_debug("cluster claim on %.12s won: claim %" PRIu64, k->id,
                      p->claim_id);
            reply_designated(c->d, p->call, p->id, p->claim_id, p->takeover,
                             pending_waited(p));
            pending_free(p);
        }
        ckey_settle(c, k);
        break;
    case CLUSTER_EV_CLAIM_LOST:
        k = ckey_find(c, ev->id);
        if (k == NULL)
            break;
        k->claiming = 0;
        k->remote = 1;
        k->err = 0;
        k->retry_at = clock_mono_ms() + COORD_RECLAIM_MS;
        log_debug("cluster claim on %.12s held elsewhere: %s", ev->id,
                  ev->value != NULL ? ev->value : "");
        ckey_settle(c, k);
        break;
    case CLUSTER_EV_CLAIM_FAILED:
        k = ckey_find(c, ev->id);
        if (k == NULL)
            break;
        k->claiming = 0;
        k->err = ev->err;
        /* Try again until the held asker's deadline (coord_tick). */
        k->remote = 1;
        k->retry_at = clock_mono_ms() + 200;
        ckey_settle(c, k);
        break;
    case CLUSTER_EV_REVISION:
        /* Stored lazily (coord_tick, drain): a revision older than what
         * is applied only replays events, which are idempotent. */
        if (ev->revision > c->revision)
            c->revision = ev->revision;
        if (ev->value != NULL)
            persist_revision(c);
        if (ev->value != NULL) /* the end of a full resync */
            log_info("resync from etcd: %" PRIu64
                     " decisions at revision %" PRId64,
                     ev->cookie, ev->revision);
        break;
    case CLUSTER_EV_LEASE_LOST:
        log_warn("etcd node lease lost (%s): claims held here are gone; "
                 "re-registering",
                 detd_strerror(ev->err));
        for (k = c->ckeys; k != NULL; k = k->next)
            k->ours = 0;
        break;
    default: /* decisions (commit.c) and verify answers (admin.c) */
        break;
    case CLUSTER_EV_STATE:
        c->connected = ev->err == 0;
        if (ev->err == 0) {
            c->error[0] = '\0';
            log_info("etcd reachable (%s)", ev->value ? ev->value : "");
        } else {
            snprintf(c->error, sizeof(c->error), "%s: %s",
                     ev->value ? ev->value : "etcd", detd_strerror(ev->err));
            log_warn("etcd unreachable: %s", c->error);
        }
        break;
    case CLUSTER_EV_PREVIOUS_LEASE:
        if (ev->won)
            log_info("etcd: revoked lease %llx of this node's previous run "
                     "(it did not stop cleanly): its claims are released",
                     (unsigned long long)ev->revision);
        break;
    }
}

/* See coord.h. */
int coord_etcd_trouble(const coord *c, const char *id) {
    struct ckey *k = ckey_find(c, id);
    return !c->connected || (k != NULL && k->err != 0);
}

/* See coord.h. */
const char *coord_etcd_error(const coord *c) {
    return c->error[0] != '\0' ? c->error : "no answer";
}

/* See coord.h. */
void coord_drain(coord *c) {
    if (c->ops.ctx != NULL)
        persist_revision(c);
    while (c->ckeys != NULL) {
        struct ckey *k = c->ckeys;
        c->ckeys = k->next;
        free(k); /* held askers are answered by the waiters' drain */
    }
}
