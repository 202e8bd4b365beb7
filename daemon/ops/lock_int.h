/*
 * lock_int: what the two halves of Admin.ImportLock share inside
 * daemon/ops (lock.c: the checks, the job, the local backend, the answer
 * and --lock at start; lock_etcd.c: the etcd backend, read first, one
 * writer per lock, the others waiting for the watch). Not for other
 * files: they use lock.h.
 */
#ifndef DETD_LOCK_INT_H
#define DETD_LOCK_INT_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "core/decision.h"
#include "core/keyid.h"
#include "ops/lock.h"

/* What storing a lock's decisions did. */
struct lock_result {
    size_t added, unchanged, conflicts, shown, skipped;
    size_t not_committed; /* etcd did not take them (lock_missing()) */
    struct decision stored[LOCK_MAX_CONFLICTS]; /* the first conflicts */
    char *skips[LOCK_MAX_CONFLICTS];            /* the first skips' lines */
};

/*
 * One lock's entries on their way to decisions: kept (the provenance
 * filter), made rows, then stored (the local backend) or committed
 * through etcd. Owns its rows' ids and JSON; the rows' other strings are
 * borrowed from the entries (the request's, or the file's at start).
 */
struct lock_job {
    struct daemon *d;
    const char *ns, *file, *sha256; /* borrowed, as the entries */
    char *tf;                       /* "lock:<file>" */
    size_t n, n_all;                /* rows (entries kept), entries */
    struct decision *rows;
    char (*ids)[KEYID_HEX_LEN + 1];
    char **timings, **timing;
    /* etcd: the rows read from etcd (their ids and each one's row index;
     * round 0 every row, round 1 those etcd lacked, read again after the
     * wait for the owner's writes); held_before: the local store held the
     * row when etcd lacked it; the rows to send (shallow copies) and each
     * one's row index, sent in chunks (lock_send()): send_at is the
     * current chunk's first, chunk_deadline its deadline (of a read too) */
    const char **read_ids;
    size_t *read_of, n_read;
    unsigned char *held_before;
    int round;
    int64_t defer_ms; /* this node's wait for the owner (0: the owner) */
    uv_timer_t *wait; /* the wait for the owner's writes, or NULL */
    struct lock_job *next_wait; /* in d->lock_waits while waiting */
    int64_t wait_until;
    size_t arrived; /* pending rows up to here are in the store */
    struct decision *send;
    size_t *send_of, n_send, send_at, chunk;
    int64_t deadline_ms, chunk_deadline;
    int64_t budget_from; /* at start: the first read's budget counts from */
    int first_err;       /* why the first row not committed was not */
    char *missing;       /* the first rows not committed, named (heap) */
    struct lock_result r;
    /* How the job ends: its call answered (Admin.ImportLock; msg, the
     * request, freed then), or at start: done set for the waiting loop. */
    rpc_call *call;
    ProtobufCMessage *msg;
    int at_start, done;
    /* What the backend tells the job (lock.c sets them as it makes it;
     * the etcd backend calls them, so that it does not depend on lock.c):
     * held, row i is decided already (got: the decision that stands,
     * taken): the same config is unchanged, another a conflict, kept and
     * listed; end, the job is over: logged, then its call answered and
     * the job freed, or at start marked done for the waiting loop (j must
     * not be used after it unless at start). */
    void (*held)(struct lock_job *j, size_t i, struct decision *got);
    void (*end)(struct lock_job *j);
};

/* The etcd backend (lock_etcd.c). Settle j through etcd: its buffers,
 * this node's wait for the lock's owner, and every row read from etcd;
 * j->end() ends the job once etcd answered (it is the backend's until
 * then). Returns 0, or DETD_ENOMEM (nothing asked; the caller still owns
 * j). */
int lock_precheck(struct lock_job *j);

/* Why etcd did not take a row (err, a DETD_E* code), for a reader
 * (static string). */
const char *lock_why(int err);

/* End j's wait for the owner's writes (j->wait set): its timer closed
 * and freed by the close callback, j out of d->lock_waits. */
void lock_wait_end(struct lock_job *j);

/* At start, before the first read: run the loop until the cluster's
 * node registry lists this node, at most its bound and half the first
 * read's budget (from j->budget_from); past that it is logged and
 * counted. */
void lock_await_registry(struct lock_job *j);

#endif /* DETD_LOCK_INT_H */
