/*
 * lock: Admin.ImportLock, a lockfile's decisions stored as decisions of a
 * namespace (`detctl lock import`, docs/lockfile.md), on the loop thread.
 *
 * detctl checks the file (its content hash, its fields, the provenance the
 * importer asked for) and sends its decisions in batches; each batch is
 * checked again here and stored in one transaction. A decision's id is
 * made again for this daemon's namespace from arch, kernel, key and the
 * candidates' fingerprint, so a client asking the same key with the same
 * candidates on the same arch gets it DECIDED without timing anything,
 * while one asking with other candidates or on another arch asks another
 * id: the lock does not answer it. First writer wins: a key decided
 * already keeps its decision (the same config: unchanged; another: a
 * conflict, listed).
 *
 * With etcd, an entry becomes a cluster decision as a timed one does:
 * committed through etcd (commit_batch(): create-if-absent per key, in
 * Txns of up to ETCD_BATCH_MAX keys), then stored here and on every node
 * by the watch, so no node times it. Every entry's key is read from etcd
 * first (commit_read(): no Raft proposal): one etcd holds is settled from
 * etcd's copy without a write (another config: a conflict, never
 * overwritten). What etcd lacks is written by the lock's rendezvous
 * owner; the other nodes wait for it (bounded by their claim deferral),
 * then write what is still missing: N nodes importing one lock at once
 * cost etcd one import's Txns (lock_etcd.c says how). Entries etcd does not
 * take by the call's deadline fail the call UNAVAILABLE, naming them and
 * what landed.
 */
#ifndef DETD_LOCK_H
#define DETD_LOCK_H

#include "app/daemon.h"

/* Decisions in one ImportLock request (its message is capped at 1 MiB). */
#define LOCK_MAX_BATCH 100000
/* Conflicts listed in one answer. */
#define LOCK_MAX_CONFLICTS 100
/* Entries etcd did not take, named in one error. */
#define LOCK_MAX_NAMED 5
/* --lock with etcd: how long start-up waits for etcd to take the lock's
 * entries (an election and a slow boot fit in it) before it stops. */
#define LOCK_START_ETCD_MS 10000
/* With etcd, entries in flight at once (the next go when these landed):
 * 16 Txns of ETCD_BATCH_MAX keys. */
#define LOCK_ETCD_CHUNK 1024
/* --lock with etcd: start-up looks at the cluster's node registry this
 * often while it waits for it to list this node (lock_await_registry()). */
#define LOCK_WAIT_POLL_MS 10

/* Drain: every import waiting for its lock's owner (etcd) ends now, its
 * rows not landed failing as not committed (DETD_ECANCELLED). */
void lock_drain(struct daemon *d);

/* Admin.ImportLock (consumes the event). */
void lock_import(struct daemon *d, struct rpc_event *ev);

/*
 * --lock FILE at start (after the store and the etcd backend are open,
 * before the server): check the file as `detctl lock import` does and
 * store its decisions in the daemon's namespace; with etcd, commit them
 * through etcd, running the loop until etcd took each (at most
 * LOCK_START_ETCD_MS for each LOCK_ETCD_CHUNK entries). 0 (also without
 * --lock, and with conflicts, which are logged), or -1 after logging why
 * (the daemon does not start).
 */
int lock_load_at_start(struct daemon *d);

#endif /* DETD_LOCK_H */
