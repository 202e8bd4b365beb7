/*
 * coord: the etcd backend's side of Decide and Report, on the loop
 * thread. service.c calls in here only when the daemon runs with --etcd;
 * the local backend never reaches this file.
 *
 * The local engine still orders the askers of one node: one local claim
 * per key, the other askers wait in the engine. What changes is what a
 * local designation means. The designated asker is held (not answered)
 * while this node takes the cluster-wide claim key in etcd:
 *   - won: answer DESIGNATED; the rank times and reports;
 *   - lost: keep holding it until the decision arrives through the watch
 *     (answer DECIDED), or the other node's claim key disappears without
 *     a decision (its lease expired, its client died): claim again;
 *   - etcd unreachable: keep trying until the asker's deadline, then
 *     answer UNAVAILABLE naming etcd. Never decide locally.
 * If the held asker goes away (cancelled, deadline) the local claim
 * passes to the next local waiter (engine_release), which is held in
 * turn; when no local claim remains the cluster claim key is deleted.
 *
 * Report: an accepted report is committed to etcd first (first writer
 * wins, never leased), then to the local store, then local waiters are
 * released, then the reporter gets the winning decision (superseded when
 * another node's won). Watch events store decisions made elsewhere and
 * release local waiters the same way. The last applied etcd revision is
 * kept in the store's meta table ("etcd_revision").
 */
#define _GNU_SOURCE
#include "app/daemon.h"
#include "clock.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster.h"
#include "detd/client.h"
#include "detd/error.h"
#include "core/keyid.h"

#define COORD_RECLAIM_MS 1000 /* re-check a claim held elsewhere */

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

/* A report waiting for its etcd commit. */
struct commit_op {
    uint64_t cookie;
    rpc_call *call;
    int decide; /* a Decide answered from a table (DecideResponse) */
    char id[KEYID_HEX_LEN + 1];
    struct commit_op *next;
};

static struct ckey *ckey_find(struct daemon *d, const char *id) {
    for (struct ckey *k = d->ckeys; k != NULL; k = k->next)
        if (strcmp(k->id, id) == 0)
            return k;
    return NULL;
}

static struct ckey *ckey_get(struct daemon *d, const char *id) {
    struct ckey *k = ckey_find(d, id);
    if (k != NULL)
        return k;
    k = calloc(1, sizeof(*k));
    if (k == NULL)
        return NULL;
    snprintf(k->id, sizeof(k->id), "%s", id);
    k->next = d->ckeys;
    d->ckeys = k;
    return k;
}

static void ckey_remove(struct daemon *d, struct ckey *k) {
    for (struct ckey **pp = &d->ckeys; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == k) {
            *pp = k->next;
            free(k);
            return;
        }
    }
}

/* Free k when nothing refers to it any more; release the claim key when
 * ours and no local claim remains. */
static void ckey_settle(struct daemon *d, struct ckey *k) {
    if (k->held != NULL || k->claiming)
        return;
    if (engine_claim_of(d->engine, k->id, NULL))
        return;
    if (k->ours) {
        cluster_release(d->cluster, k->id);
        k->ours = 0;
    }
    ckey_remove(d, k);
}

static const char *etcd_why(struct daemon *d, const struct ckey *k) {
    if (k != NULL && k->err != 0)
        return detd_strerror(k->err);
    return d->etcd_error[0] != '\0' ? d->etcd_error : "no answer";
}

/* Answer a held asker whose deadline passed. */
static void answer_held_timeout(struct daemon *d, struct ckey *k,
                                struct pending *p) {
    d->counters.wait_timeouts++;
    if (k->err == 0 && k->remote && d->etcd_connected) {
        /* Another node is timing it: an ordinary wait timeout. */
        Detd__V1__DecideResponse resp = DETD__V1__DECIDE_RESPONSE__INIT;
        resp.api_version = DETD_API_VERSION;
        resp.outcome = DETD__V1__OUTCOME__OUTCOME_TIMEOUT;
        resp.waited_ms = service_waited(p);
        rpc_reply(p->call, &resp.base);
        return;
    }
    rpc_fail(p->call, RPC_UNAVAILABLE,
             "etcd unreachable (%s): detd never decides a new key without "
             "etcd; key %.12s stays undecided (apply on_miss)",
             etcd_why(d, k), k->id);
}

/* Drop k's held asker (already answered or gone): its local claim moves
 * on to the next local waiter, if any. */
static void drop_held(struct daemon *d, struct ckey *k) {
    struct pending *p = k->held;
    k->held = NULL;
    service_pending_take(d, p->token);
    uint64_t claim = p->claim_id;
    service_pending_free(p);
    /* May designate the next local waiter: coord_hold() re-enters. */
    engine_release(d->engine, k->id, claim, clock_mono_ms());
}

static void start_claim(struct daemon *d, struct ckey *k) {
    if (k->claiming || k->held == NULL)
        return;
    if (cluster_claim(d->cluster, k->id, k->held->deadline_ms) == 0)
        k->claiming = 1;
}

/* See daemon.h. */
void coord_hold(struct daemon *d, struct pending *p) {
    struct ckey *k = ckey_get(d, p->id);
    if (k == NULL) {
        engine_release(d->engine, p->id, p->claim_id, clock_mono_ms());
        rpc_fail(p->call, RPC_RESOURCE_EXHAUSTED, "out of memory");
        service_pending_free(p);
        return;
    }
    if (k->ours) {
        service_reply_designated(d, p->call, p->id, p->claim_id, p->takeover,
                                 service_waited(p));
        service_pending_free(p);
        return;
    }
    if (k->held != NULL && k->held != p) {
        /* The engine passed the local claim away from the old holder
         * (its session ended or its lease ran out): it no longer holds
         * anything. */
        struct pending *old = k->held;
        k->held = NULL;
        service_pending_take(d, old->token);
        if (old->claim_id == p->claim_id)
            rpc_fail(old->call, RPC_CANCELLED,
                     "a newer Decide for key %.12s from the same session "
                     "replaced this call",
                     k->id);
        else
            rpc_fail(old->call, RPC_UNAVAILABLE,
                     "the claim on key %.12s passed to another rank", k->id);
        service_pending_free(old);
    }
    p->held = 1;
    k->held = p;
    service_pending_add(d, p);
    if (!k->remote)
        start_claim(d, k);
    else if (k->retry_at == 0)
        k->retry_at = clock_mono_ms() + COORD_RECLAIM_MS;
}

/* See daemon.h. */
void coord_held_cancelled(struct daemon *d, struct pending *p) {
    struct ckey *k = ckey_find(d, p->id);
    if (k == NULL || k->held != p) {
        service_pending_free(p);
        return;
    }
    k->held = NULL;
    uint64_t claim = p->claim_id;
    rpc_fail(p->call, RPC_CANCELLED, "cancelled by the client");
    service_pending_free(p);
    engine_release(d->engine, k->id, claim, clock_mono_ms());
    ckey_settle(d, k);
}

/* See daemon.h. */
void coord_sweep(struct daemon *d) {
    struct ckey *k = d->ckeys;
    while (k != NULL) {
        struct ckey *next = k->next;
        ckey_settle(d, k);
        k = next;
    }
}

#define COORD_PERSIST_MS 500 /* how often the applied revision is stored */

static void persist_revision(struct daemon *d) {
    if (d->etcd_revision <= d->etcd_revision_stored)
        return;
    char buf[32];
    snprintf(buf, sizeof(buf), "%" PRId64, d->etcd_revision);
    if (store_set_meta(d->store, "etcd_revision", buf) != 0)
        log_error("store etcd revision: %s", store_errmsg(d->store));
    else
        d->etcd_revision_stored = d->etcd_revision;
}

/* See daemon.h. */
int64_t coord_tick(struct daemon *d, int64_t now) {
    int64_t next = INT64_MAX;
    if (d->etcd_revision > d->etcd_revision_stored) {
        if (now >= d->persist_at) {
            persist_revision(d);
            d->persist_at = now + COORD_PERSIST_MS;
        } else {
            next = d->persist_at;
        }
    }
    struct ckey *k = d->ckeys;
    while (k != NULL) {
        struct ckey *nk = k->next;
        if (k->held != NULL && k->held->deadline_ms <= now) {
            answer_held_timeout(d, k, k->held);
            drop_held(d, k);
        }
        if (k->held != NULL && k->remote && !k->claiming &&
            k->retry_at <= now) {
            start_claim(d, k);
            k->retry_at = now + COORD_RECLAIM_MS;
        }
        if (k->held != NULL) {
            if (k->held->deadline_ms < next)
                next = k->held->deadline_ms;
            if (k->remote && k->retry_at < next)
                next = k->retry_at;
        }
        ckey_settle(d, k);
        k = nk;
    }
    return next;
}

/* Store a decision from etcd and release everyone waiting for it. */
static void apply_decision(struct daemon *d, const struct decision *row,
                           const char *writer, const char *why) {
    struct decision existing;
    const struct decision *won = row;
    int rc = store_put_decision(d->store, row, &existing);
    if (rc == DETD_EEXIST) {
        won = &existing;
        if (strcmp(existing.config, row->config) != 0)
            log_error("key %.12s: the local store holds '%s' but etcd holds "
                      "'%s' (this state directory decided without etcd); "
                      "serving the local one",
                      row->id, existing.config, row->config);
    } else if (rc != 0) {
        log_error("store decision %.12s from etcd: %s", row->id,
                  store_errmsg(d->store));
        return;
    } else {
        d->counters.committed[row->source & 7]++;
        /* Logged once per daemon, by whichever path stored it first
         * (the commit's answer or the watch). origin: the node part of
         * the writer ("node/pid/nonce/claim"). */
        char origin[DAEMON_MAX_NAMESPACE + 1];
        const char *w = writer != NULL ? writer : "";
        size_t n = strcspn(w, "/");
        if (n > DAEMON_MAX_NAMESPACE)
            n = DAEMON_MAX_NAMESPACE;
        memcpy(origin, w, n);
        origin[n] = '\0';
        service_log_decision(row, n > 0 ? origin : "unknown", why);
    }
    d->releasing = won;
    engine_decided(d->engine, won->id);
    d->releasing = NULL;
    struct ckey *k = ckey_find(d, won->id);
    if (k != NULL) {
        if (k->held != NULL) {
            struct pending *p = k->held;
            k->held = NULL;
            service_pending_take(d, p->token);
            service_reply_decided(d, p->call, won, service_waited(p));
            service_pending_free(p);
        }
        k->ours = 0; /* the committer deletes the claim key */
        ckey_settle(d, k);
    }
    if (won != row)
        decision_clear(&existing);
}

static int commit_start(struct daemon *d, rpc_call *call,
                        const struct decision *row, int64_t deadline_ms,
                        int decide) {
    struct commit_op *op = calloc(1, sizeof(*op));
    if (op == NULL)
        return DETD_ENOMEM;
    op->cookie = ++d->next_commit;
    op->call = call;
    op->decide = decide;
    snprintf(op->id, sizeof(op->id), "%s", row->id);
    int rc =
        cluster_commit(d->cluster, row, row->claim_id, deadline_ms, op->cookie);
    if (rc != 0) {
        free(op);
        return rc;
    }
    op->next = d->commits;
    d->commits = op;
    return 0;
}

/* See daemon.h. */
int coord_commit(struct daemon *d, rpc_call *call, const struct decision *row,
                 int64_t deadline_ms) {
    return commit_start(d, call, row, deadline_ms, 0);
}

/* See daemon.h. */
int coord_commit_decide(struct daemon *d, rpc_call *call,
                        const struct decision *row, int64_t deadline_ms) {
    return commit_start(d, call, row, deadline_ms, 1);
}

static struct commit_op *commit_take(struct daemon *d, uint64_t cookie) {
    for (struct commit_op **pp = &d->commits; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->cookie == cookie) {
            struct commit_op *op = *pp;
            *pp = op->next;
            return op;
        }
    }
    return NULL;
}

static void on_committed(struct daemon *d, const struct cluster_event *ev) {
    struct commit_op *op = commit_take(d, ev->cookie);
    if (ev->err != 0) {
        log_warn("commit %.12s to etcd failed: %s", ev->id,
                 detd_strerror(ev->err));
        if (op != NULL)
            rpc_fail(op->call, RPC_UNAVAILABLE,
                     "etcd unreachable (%s): the decision for key %.12s was "
                     "not committed and nothing was decided; %s",
                     detd_strerror(ev->err), ev->id,
                     op->decide ? "ask again" : "report again");
        free(op);
        return;
    }
    struct decision row;
    char *writer = NULL;
    int rc = cluster_decision_decode(ev->value, ev->value_len, &row, &writer);
    if (rc != 0) {
        log_error("decision %.12s in etcd is malformed: %s", ev->id,
                  detd_strerror(rc));
        if (op != NULL)
            rpc_fail(op->call, RPC_INTERNAL,
                     "the decision stored in etcd for %.12s is malformed",
                     ev->id);
        free(op);
        return;
    }
    apply_decision(d, &row, writer,
                   ev->won ? "committed here" : "another node won");
    free(writer);
    if (op != NULL) {
        struct decision cur;
        int have = store_get_decision(d->store, row.id, &cur) == 0;
        const struct decision *r = have ? &cur : &row;
        if (op->decide)
            service_reply_decided(d, op->call, r, 0);
        else
            service_reply_report(op->call, r, !ev->won);
        if (have)
            decision_clear(&cur);
    }
    free(op);
    decision_clear(&row);
}

static void on_decision(struct daemon *d, const struct cluster_event *ev) {
    struct decision row;
    char *writer = NULL;
    int rc = cluster_decision_decode(ev->value, ev->value_len, &row, &writer);
    if (rc != 0) {
        log_error("decision %.12s in etcd is malformed (%s): ignored", ev->id,
                  detd_strerror(rc));
        struct ckey *k = ckey_find(d, ev->id);
        if (k != NULL)
            k->claiming = 0;
        return;
    }
    struct ckey *k = ckey_find(d, ev->id);
    if (k != NULL)
        k->claiming = 0;
    apply_decision(d, &row, writer, ev->revision > 0 ? "watch" : "read");
    free(writer);
    decision_clear(&row);
}

/* See daemon.h. */
void coord_event(void *ctx, const struct cluster_event *ev) {
    struct daemon *d = ctx;
    struct ckey *k;
    switch (ev->kind) {
    case CLUSTER_EV_CLAIMED:
        k = ckey_find(d, ev->id);
        if (k == NULL) {
            cluster_release(d->cluster, ev->id);
            break;
        }
        k->claiming = 0;
        k->ours = 1;
        k->remote = 0;
        k->err = 0;
        if (k->held != NULL) {
            struct pending *p = k->held;
            k->held = NULL;
            service_pending_take(d, p->token);
            log_debug("cluster claim on %.12s won: claim %" PRIu64, k->id,
                      p->claim_id);
            service_reply_designated(d, p->call, p->id, p->claim_id,
                                     p->takeover, service_waited(p));
            service_pending_free(p);
        }
        ckey_settle(d, k);
        break;
    case CLUSTER_EV_CLAIM_LOST:
        k = ckey_find(d, ev->id);
        if (k == NULL)
            break;
        k->claiming = 0;
        k->remote = 1;
        k->err = 0;
        k->retry_at = clock_mono_ms() + COORD_RECLAIM_MS;
        log_debug("cluster claim on %.12s held elsewhere: %s", ev->id,
                  ev->value != NULL ? ev->value : "");
        ckey_settle(d, k);
        break;
    case CLUSTER_EV_CLAIM_FAILED:
        k = ckey_find(d, ev->id);
        if (k == NULL)
            break;
        k->claiming = 0;
        k->err = ev->err;
        /* Try again until the held asker's deadline (coord_tick). */
        k->remote = 1;
        k->retry_at = clock_mono_ms() + 200;
        ckey_settle(d, k);
        break;
    case CLUSTER_EV_CLAIM_GONE:
        k = ckey_find(d, ev->id);
        if (k != NULL && k->held != NULL && !k->ours) {
            k->remote = 0;
            start_claim(d, k);
        }
        break;
    case CLUSTER_EV_COMMITTED:
        on_committed(d, ev);
        break;
    case CLUSTER_EV_DECISION:
        on_decision(d, ev);
        break;
    case CLUSTER_EV_REVISION:
        /* Stored lazily (coord_tick, drain): a revision older than what
         * is applied only replays events, which are idempotent. */
        if (ev->revision > d->etcd_revision)
            d->etcd_revision = ev->revision;
        if (ev->value != NULL)
            persist_revision(d);
        if (ev->value != NULL) /* the end of a full resync */
            log_info("resync from etcd: %" PRIu64
                     " decisions at revision %" PRId64,
                     ev->cookie, ev->revision);
        break;
    case CLUSTER_EV_LEASE_LOST:
        log_warn("etcd node lease lost (%s): claims held here are gone; "
                 "re-registering",
                 detd_strerror(ev->err));
        for (k = d->ckeys; k != NULL; k = k->next)
            k->ours = 0;
        break;
    case CLUSTER_EV_PEER:
    case CLUSTER_EV_PEERS_DONE:
        admin_verify_peer(d, ev);
        break;
    case CLUSTER_EV_STATE:
        d->etcd_connected = ev->err == 0;
        if (ev->err == 0) {
            d->etcd_error[0] = '\0';
            log_info("etcd reachable (%s)", ev->value ? ev->value : "");
        } else {
            snprintf(d->etcd_error, sizeof(d->etcd_error), "%s: %s",
                     ev->value ? ev->value : "etcd", detd_strerror(ev->err));
            log_warn("etcd unreachable: %s", d->etcd_error);
        }
        break;
    }
    /* Held askers and retries may have moved the next wake-up. */
    daemon_rearm(d);
}

/* See daemon.h. */
int coord_etcd_trouble(struct daemon *d, const char *id) {
    struct ckey *k = ckey_find(d, id);
    return !d->etcd_connected || (k != NULL && k->err != 0);
}

/* See daemon.h. */
const char *coord_etcd_error(struct daemon *d) {
    return d->etcd_error[0] != '\0' ? d->etcd_error : "no answer";
}

/* See daemon.h. */
void coord_drain(struct daemon *d) {
    if (d->cluster != NULL)
        persist_revision(d);
    while (d->commits != NULL) {
        struct commit_op *op = d->commits;
        d->commits = op->next;
        rpc_fail(op->call, RPC_UNAVAILABLE, "daemon is shutting down");
        free(op);
    }
    while (d->ckeys != NULL) {
        struct ckey *k = d->ckeys;
        d->ckeys = k->next;
        free(k); /* held askers are answered by service_drain */
    }
}
