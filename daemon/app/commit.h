/*
 * commit: the one path by which a decision is committed and its waiters
 * released (loop thread), for both backends and every source (a timing
 * rank's report, a table or an imported entry).
 *
 *   local backend:  the local store, first writer wins -> release -> answer
 *   etcd backend:   etcd, first writer wins (cluster_commit) -> when etcd
 *                   answers: the local store -> release -> answer
 *
 * A decision learned from etcd's watch (another node's) takes the same
 * second half: store, release. "Release" is: every waiter of the key on
 * this node gets DECIDED with the winning row (engine_decided_each), and
 * so does the etcd backend's held asker (coord_decided). The caller is
 * answered with the row that won, which is not its own when another
 * writer was first (superseded).
 */
#ifndef DETD_COMMIT_H
#define DETD_COMMIT_H

#include <stddef.h>
#include <stdint.h>

#include "cluster/cluster.h"
#include "core/decision.h"
#include "io/rpc.h"

struct daemon;

/* How the committer's call is answered with the winning row. */
typedef enum commit_answer {
    COMMIT_ANSWER_REPORT = 1, /* ReportResponse (superseded if not ours) */
    COMMIT_ANSWER_DECIDE = 2, /* DecideResponse, DECIDED (kept hot) */
} commit_answer;

typedef struct commit_state commit_state;

/* Create the etcd backend's table of commits in flight; *ret owned by
 * the caller (commit_state_free()). Returns 0 or DETD_ENOMEM. */
int commit_state_new(commit_state **ret);

/* Free it; commit_drain() answered what was in flight. NULL: no-op. */
void commit_state_free(commit_state *s);

/*
 * Commit row (borrowed for the call) and answer call as how says. what
 * names the entry in the log line of a table or import commit ("t.json
 * \"kernel\" \"key\""); NULL for a timing rank's report. deadline_ms is
 * when the call must be answered by (the etcd commit's deadline).
 */
void commit_decision(struct daemon *d, rpc_call *call, commit_answer how,
                     const struct decision *row, const char *what,
                     int64_t deadline_ms);

/* What one row of commit_batch() came to. */
struct commit_result {
    /* 0: etcd answered; else the row is not committed, or not known to be
     * (DETD_ETIMEDOUT: etcd had not answered by the deadline; its commit
     * goes on and a late answer is stored as any), and why. */
    int err;
    int won; /* err 0: this row is the key's decision now */
    /* err 0 and not won: the decision etcd holds for the key (another
     * writer's; the same config or not). Owned by commit.c: a callback
     * that keeps it moves it out (and zeroes it). */
    struct decision stands;
    /* commit_read(): err 0 and etcd holds no decision for the key (else
     * stands is etcd's). */
    int absent;
};

/* A batch's results, res[i] for rows[i], once every row has one (loop
 * thread; may run before commit_batch() returns when no row could be
 * sent). */
typedef void (*commit_batch_cb)(struct daemon *d, void *ctx,
                                struct commit_result *res, size_t n);

/*
 * The etcd backend (d->coord set): commit rows[0..n) (borrowed for the
 * call) through etcd as a timing pass's report is, each key on its own
 * (first writer wins, never overwritten; cluster_commit(), batched into
 * Txns by the cluster), with no call to answer: cb gets every row's
 * result (the rows committed are stored, logged, counted and their
 * waiters released as any commit's, here and on every node by the watch).
 * Rows etcd has not answered by deadline_ms are DETD_ETIMEDOUT; a drain
 * ends them DETD_ECANCELLED. Returns 0 (cb will run, exactly once) or
 * DETD_ENOMEM (nothing sent, cb never runs).
 */
int commit_batch(struct daemon *d, const struct decision *rows, size_t n,
                 int64_t deadline_ms, commit_batch_cb cb, void *ctx);

/*
 * The etcd backend: read the decisions of ids[0..n) (borrowed for the
 * call) from etcd (cluster_read(): reads only, no Raft proposal); cb gets
 * each key's result: err 0 with stands etcd's decision (stored here and
 * its waiters released, as the watch's would be) or absent set, or err
 * (not read by deadline_ms: DETD_ETIMEDOUT; a drain: DETD_ECANCELLED).
 * Returns 0 (cb will run, exactly once) or DETD_ENOMEM (nothing asked, cb
 * never runs).
 */
int commit_read(struct daemon *d, const char *const *ids, size_t n,
                int64_t deadline_ms, commit_batch_cb cb, void *ctx);

/* A cluster event of kind CLUSTER_EV_COMMITTED, CLUSTER_EV_DECISION or
 * CLUSTER_EV_READ:
 * store the decision, release its waiters, answer the committer. */
void commit_cluster_event(struct daemon *d, const struct cluster_event *ev);

/*
 * Answer UNAVAILABLE, naming etcd, every committer whose deadline (the
 * deadline_ms given to commit_decision(), which leaves a margin before
 * the call's own) passed while etcd had not answered; the commit goes
 * on, and its result still reaches the store and the waiters; end every
 * batch past its deadline (commit_batch()). Returns the next deadline of
 * an unanswered commit or batch, or INT64_MAX.
 */
int64_t commit_tick(struct daemon *d, int64_t now);

/* Fail every commit in flight UNAVAILABLE, and end every batch (drain). */
void commit_drain(struct daemon *d);

/*
 * Log a decision just committed to this daemon's store, once, at info
 * level, with its fields. origin: the node that committed it ("local"
 * for the local backend); via: how this daemon learned it ("report",
 * "committed here", "watch", ...). Everything is borrowed.
 */
void commit_log_decision(const struct decision *r, const char *origin,
                         const char *via);

#endif /* DETD_COMMIT_H */
