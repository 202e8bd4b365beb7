/*
 * coord: the etcd backend's cluster-wide claims, on the loop thread.
 *
 * The local engine still orders the askers of one node: one local claim
 * per key, the other askers wait in the engine. What changes is what a
 * local designation means. The designated asker is held (not answered)
 * while this node takes the cluster-wide claim key in etcd:
 *   - won: answer DESIGNATED; the rank times and reports;
 *   - lost: keep holding it until the decision arrives (coord_decided(),
 *     from commit.c: answer DECIDED), or the other node's claim key
 *     disappears without a decision (its lease expired, its client
 *     died): claim again; the watch reports that at once, and a
 *     re-check every second (a read of the claim key, a transaction
 *     only when it is gone) covers an event the watch missed;
 *   - etcd unreachable: keep trying until the asker's deadline, then
 *     answer UNAVAILABLE naming etcd. Never decide locally.
 * If the held asker goes away (cancelled, deadline) the local claim
 * passes to the next local waiter (engine_release), which is held in
 * turn; when no local claim remains the cluster claim key is deleted.
 * coord also keeps the last applied etcd revision (stored in the store's
 * meta table as "etcd_revision") and whether etcd answers.
 *
 * coord reaches the cluster only through struct coord_cluster, so that
 * its unit test drives it with a fake cluster.
 */
#ifndef DETD_COORD_H
#define DETD_COORD_H

#include <stdint.h>

#include "app/waiters.h"
#include "cluster/cluster.h"
#include "core/decision.h"

struct daemon;
typedef struct coord coord;

/* What coord and commit.c ask of the cluster backend: cluster.h's
 * functions (coord_cluster_of()), or a test's. ctx is passed back. */
struct coord_cluster {
    void *ctx;
    int (*claim)(void *ctx, const char *id, int recheck, int64_t deadline_ms);
    int (*release)(void *ctx, const char *id);
    int (*commit)(void *ctx, const struct decision *row, uint64_t claim_id,
                  int64_t deadline_ms, uint64_t cookie);
    int (*commit_many)(void *ctx, const struct decision *rows, size_t n,
                       uint64_t claim_id, int64_t deadline_ms,
                       uint64_t first_cookie, int *ret_err);
    int (*read)(void *ctx, const char *const *ids, size_t n,
                int64_t deadline_ms, uint64_t first_cookie);
    int64_t (*defer)(void *ctx, const char *id);
    /* Whether the registry lists this node, read late enough to choose
     * among the registered nodes at start (cluster_registry_settled());
     * *ret_bound_ms: how long waiting for it is worth it. NULL: always. */
    int (*settled)(void *ctx, int64_t *ret_bound_ms);
};

/* The table for a real backend c (borrowed for the table's use). */
struct coord_cluster coord_cluster_of(cluster *c);

/*
 * Create the coordinator of daemon d (borrowed; d->store, d->engine and
 * d->waiters must be set) and read the last applied etcd revision from
 * the store. Returns 0 with *ret owned by the caller (coord_free()), or
 * DETD_ENOMEM.
 */
int coord_new(struct daemon *d, coord **ret);

/* Use ops (copied) from now on: set once the backend is open. */
void coord_set_cluster(coord *c, const struct coord_cluster *ops);

/* The cluster table set by coord_set_cluster() (borrowed). */
const struct coord_cluster *coord_cluster_ops(const coord *c);

/* Free c (its held askers were answered by the drain). NULL: no-op. */
void coord_free(coord *c);

/* The last etcd revision applied here. */
int64_t coord_revision(const coord *c);

/*
 * p (allocated, not in the waiters table; p->claim_id, p->takeover,
 * p->deadline_ms set) was designated by the engine: answer it at once
 * when this node holds the cluster claim, else hold it (it goes into
 * d->waiters) while the cluster claim is taken. Takes p.
 */
void coord_hold(coord *c, struct pending *p);

/* p (taken out of the waiters table, held) ended before its answer:
 * answers it CANCELLED, frees it, and passes the local claim on. */
void coord_held_cancelled(coord *c, struct pending *p);

/*
 * Decision id stands (won: the row now in the local store, borrowed), or
 * (won NULL) an event for id carried no usable decision: no claim job is
 * in flight for it any more. With won, the held asker of id (if any) is
 * answered DECIDED and the claim state of id is settled. committed_here:
 * the decision came back from this node's own commit, which deleted this
 * node's claim key (cluster_commit() does, won or lost); otherwise (the
 * watch: another node decided) a claim key this node holds for id is
 * released here, or it would outlive the decision until the node's lease.
 */
void coord_decided(coord *c, const char *id, const struct decision *won,
                   int committed_here);

/* Deadlines of held askers and claim retries; returns the next time it
 * needs to run (or INT64_MAX). */
int64_t coord_tick(coord *c, int64_t now);

/* Release cluster claims no local claim needs any more. */
void coord_sweep(coord *c);

/* A claim, revision, lease or state event of the cluster (the other
 * kinds are not coord's and are ignored). */
void coord_event(coord *c, const struct cluster_event *ev);

/* Whether etcd did not answer lately (for key id). */
int coord_etcd_trouble(const coord *c, const char *id);

/* Why etcd is unreachable ("no answer" when nothing is known). */
const char *coord_etcd_error(const coord *c);

/* Store the applied revision and forget claim state (drain). */
void coord_drain(coord *c);

#endif /* DETD_COORD_H */
