/* lock_etcd: Admin.ImportLock's etcd backend (see lock.h, lock_int.h). */
#define _GNU_SOURCE
#include "ops/lock_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "app/commit.h"
#include "app/coord.h"
#include "clock.h"
#include "config/log.h"
#include "lockfmt.h"
#include "core/keyid.h"
#include "detd/error.h"
#include "strfmt.h"

/*
 * The etcd backend, one lock imported by many nodes at once (every node's
 * detd --lock at job start): the cost must not grow with the nodes.
 *
 * 1. Read: every row's decision key is read from etcd (Txns of reads
 *    only, 64 keys each: no Raft proposal). A row etcd holds is settled
 *    from etcd's copy (unchanged, or a conflict), which is stored here as
 *    the watch's would be. The local store is not trusted instead: it is
 *    the watch's copy of etcd, but it may hold a row etcd lacks (a state
 *    directory that decided without etcd, a key reset in etcd since), and
 *    a row settled from it would then never reach etcd or the other
 *    nodes. Only when etcd cannot be read by the deadline is a row the
 *    store holds settled from the store (a decision etcd held is never
 *    overwritten, so the store's copy is etcd's unless the key was reset);
 *    one it does not hold is not committed.
 * 2. One writer: the rows etcd lacks are written at once only by the
 *    lock's rendezvous owner among the registered nodes (the lock named
 *    by its namespace and its rows' ids, so every node importing the same
 *    entries names the same owner). Owning the whole lock rather than
 *    each key keeps a lock's writes in as few Txns as one node's import
 *    takes (64 keys each, one Raft proposal each, won or lost): an owner
 *    per key would make every node write a Txn of its share.
 * 3. The others wait for the watch to bring the owner's writes: at most
 *    their deferral (cluster_defer_of(): --claim-defer-ms plus a step
 *    per rank, as a claim's), less when every row has arrived. Then they read
 *    etcd again for the rows still pending and write those etcd still
 *    lacks themselves, so a lone node, an owner that never imports the
 *    lock or one that died still completes; the nodes after the owner end
 *    their wait a step apart, so the next one's writes reach the others
 *    before their own reads.
 * Nothing decides but etcd's create-if-absent: two writers of one key (a
 * registry read late, an owner slower than the wait) cost a proposal,
 * never a second decision, and no row is counted landed before etcd
 * answered it.
 */

static void lock_on_read(struct daemon *d, void *ctx, struct commit_result *res,
                         size_t n);

/* A read's or a chunk's deadline: the call's, or at start
 * LOCK_START_ETCD_MS from now (the first read's: from the start of the
 * wait for the registry, lock_await_registry()). */
static int64_t lock_deadline(struct lock_job *j) {
    if (!j->at_start)
        return j->deadline_ms;
    int64_t from = j->budget_from != 0 ? j->budget_from : clock_mono_ms();
    j->budget_from = 0;
    return from + LOCK_START_ETCD_MS;
}

/* Read rows read_of[0..n_read) from etcd (lock_on_read() follows).
 * Returns 0 or DETD_ENOMEM. */
static int lock_read(struct lock_job *j) {
    for (size_t k = 0; k < j->n_read; k++)
        j->read_ids[k] = j->ids[j->read_of[k]];
    j->n_send = j->send_at = 0;
    j->chunk_deadline = lock_deadline(j);
    return commit_read(j->d, j->read_ids, j->n_read, j->chunk_deadline,
                       lock_on_read, j);
}

/* See lock_int.h. lock_on_read() settles the rows. */
int lock_precheck(struct lock_job *j) {
    j->send = calloc(j->n + 1, sizeof(*j->send));
    j->send_of = calloc(j->n + 1, sizeof(*j->send_of));
    j->read_ids = calloc(j->n + 1, sizeof(*j->read_ids));
    j->read_of = calloc(j->n + 1, sizeof(*j->read_of));
    j->held_before = calloc(j->n + 1, 1);
    char *all = malloc(strlen(j->ns) + 1 + j->n * KEYID_HEX_LEN + 1);
    if (j->send == NULL || j->send_of == NULL || j->read_ids == NULL ||
        j->read_of == NULL || j->held_before == NULL || all == NULL) {
        free(all);
        return DETD_ENOMEM;
    }
    /* The lock's name for its owner: its namespace and its rows' ids. */
    size_t len = (size_t)sprintf(all, "%s/", j->ns);
    for (size_t i = 0; i < j->n; i++) {
        memcpy(all + len, j->ids[i], KEYID_HEX_LEN);
        len += KEYID_HEX_LEN;
    }
    char name[LOCKFMT_HEX + 1];
    lockfmt_sha256_hex(all, len, name);
    free(all);
    const struct coord_cluster *cc = coord_cluster_ops(j->d->coord);
    j->defer_ms = cc->defer(cc->ctx, name);
    for (size_t i = 0; i < j->n; i++)
        j->read_of[i] = i;
    j->n_read = j->n;
    return lock_read(j);
}

/* See lock_int.h. */
const char *lock_why(int err) {
    switch (err) {
    case DETD_ETIMEDOUT:
    case DETD_EUNAVAILABLE:
        return "etcd unreachable: no answer by the deadline";
    case DETD_ECANCELLED:
        return "the daemon is shutting down";
    case DETD_ELIMIT:
        return "the decision is over etcd's value size limit";
    default:
        return detd_strerror(err);
    }
}

/* Row i was not committed (err): counted, the first ones named. */
static void lock_missing(struct lock_job *j, size_t i, int err) {
    const struct decision *w = &j->rows[i];
    if (j->r.not_committed++ == 0)
        j->first_err = err;
    if (j->r.not_committed > LOCK_MAX_NAMED)
        return;
    char *m = strfmt("%s%s%.96s %.96s [%s]", j->missing ? j->missing : "",
                     j->missing ? ", " : "", w->kernel, w->key, w->arch);
    if (m != NULL) {
        free(j->missing);
        j->missing = m;
    }
}

static void lock_on_batch(struct daemon *d, void *ctx,
                          struct commit_result *res, size_t n);

/* Send the next chunk of the rows to etcd (at most LOCK_ETCD_CHUNK: the
 * commits in flight stay few); its deadline is the call's, or at start
 * LOCK_START_ETCD_MS from now (a lock etcd keeps taking is not cut off by
 * its size). Returns 0 (lock_on_batch() follows, maybe before this
 * returns) or DETD_ENOMEM. */
static int lock_send(struct lock_job *j) {
    j->chunk = j->n_send - j->send_at;
    if (j->chunk > LOCK_ETCD_CHUNK)
        j->chunk = LOCK_ETCD_CHUNK;
    j->chunk_deadline = lock_deadline(j);
    return commit_batch(j->d, j->send + j->send_at, j->chunk, j->chunk_deadline,
                        lock_on_batch, j);
}

/* Rows send_of[send_at..n_send) are not committed (err, or the first
 * row's error), and the job ends. */
static void lock_give_up(struct lock_job *j, int err) {
    for (; j->send_at < j->n_send; j->send_at++)
        lock_missing(j, j->send_of[j->send_at],
                     j->r.not_committed > 0 ? j->first_err : err);
    j->end(j);
}

/* Write the rows etcd lacks (j->send); the job ends when etcd answered
 * them (lock_on_batch()), or now when none are left. */
static void lock_write(struct lock_job *j) {
    int rc;
    if (j->n_send == 0) {
        j->end(j);
        return;
    }
    if ((rc = lock_send(j)) != 0)
        lock_give_up(j, rc);
}

/* Every pending row not held here before has reached the store (the
 * watch brought it); the first ones found are not looked up again. */
static int lock_all_arrived(struct lock_job *j) {
    for (; j->arrived < j->n_send; j->arrived++) {
        size_t i = j->send_of[j->arrived];
        struct decision got;
        if (j->held_before[i] ||
            store_get_decision(j->d->store, j->ids[i], &got) != 0)
            return 0;
        decision_clear(&got);
    }
    return 1;
}

static void lock_wait_closed(uv_handle_t *h) {
    free(h);
}

/* See lock_int.h. */
void lock_wait_end(struct lock_job *j) {
    for (struct lock_job **pp = &j->d->lock_waits; *pp != NULL;
         pp = &(*pp)->next_wait)
        if (*pp == j) {
            *pp = j->next_wait;
            break;
        }
    uv_timer_stop(j->wait);
    uv_close((uv_handle_t *)j->wait, lock_wait_closed);
    j->wait = NULL;
    if (j->d->lock_waits == NULL)
        j->d->on_etcd_applied = NULL;
}

/* See lock.h. */
void lock_drain(struct daemon *d) {
    while (d->lock_waits != NULL) {
        struct lock_job *j = d->lock_waits;
        lock_wait_end(j);
        lock_give_up(j, DETD_ECANCELLED);
    }
}

/* The wait for the owner's writes: its timer fires at the wait's end and
 * on the next loop turn after a decision from etcd was stored
 * (lock_on_applied()); when every pending row arrived, or the wait is
 * over, the pending rows are read from etcd again (round 1: what etcd
 * still lacks is written). */
static void lock_on_wait(uv_timer_t *t) {
    struct lock_job *j = t->data;
    int64_t now = clock_mono_ms();
    if (!lock_all_arrived(j) && now < j->wait_until) {
        uv_timer_start(t, lock_on_wait, (uint64_t)(j->wait_until - now), 0);
        return;
    }
    lock_wait_end(j);
    j->round = 1;
    j->n_read = 0;
    for (size_t k = 0; k < j->n_send; k++)
        j->read_of[j->n_read++] = j->send_of[k];
    int rc = lock_read(j);
    if (rc != 0) {
        for (size_t k = 0; k < j->n_read; k++)
            j->send_of[k] = j->read_of[k];
        j->n_send = j->n_read;
        j->send_at = 0;
        lock_give_up(j, rc);
    }
}

/* A decision from etcd was stored (commit.c): every waiting import looks
 * for its rows on the next loop turn, once however many decisions this
 * turn brings (the store is not read inside commit.c's call). */
static void lock_on_applied(struct daemon *d) {
    for (struct lock_job *j = d->lock_waits; j != NULL; j = j->next_wait)
        uv_timer_start(j->wait, lock_on_wait, 0, 0);
}

/* Wait (a node that is not the lock's owner) for the watch to bring the
 * rows etcd lacked: at most j->defer_ms, and for a call at most half the
 * time left to it (the reads and writes after the wait need the rest).
 * Returns 0 or DETD_ENOMEM. */
static int lock_wait(struct lock_job *j) {
    int64_t now = clock_mono_ms();
    j->wait_until = now + j->defer_ms;
    if (!j->at_start && j->wait_until > now + (j->deadline_ms - now) / 2)
        j->wait_until = now + (j->deadline_ms - now) / 2;
    j->chunk_deadline = j->wait_until + LOCK_START_ETCD_MS;
    j->arrived = 0;
    for (size_t k = 0; k < j->n_send; k++) {
        struct decision got;
        size_t i = j->send_of[k];
        if (store_get_decision(j->d->store, j->ids[i], &got) == 0) {
            j->held_before[i] = 1;
            decision_clear(&got);
        }
    }
    j->wait = calloc(1, sizeof(*j->wait));
    if (j->wait == NULL)
        return DETD_ENOMEM;
    uv_timer_init(&j->d->loop, j->wait);
    j->wait->data = j;
    uv_timer_start(j->wait, lock_on_wait,
                   j->wait_until > now ? (uint64_t)(j->wait_until - now) : 0,
                   0);
    j->next_wait = j->d->lock_waits;
    j->d->lock_waits = j;
    j->d->on_etcd_applied = lock_on_applied;
    return 0;
}

/* etcd's answers for a read (commit_read()): a row etcd holds is settled
 * from etcd's copy; one it lacks is pending; one not read is settled from
 * the store when it holds the row, else not committed. Then the pending
 * rows are written, or first waited for (round 0, not the owner). */
static void lock_on_read(struct daemon *d, void *ctx, struct commit_result *res,
                         size_t n) {
    struct lock_job *j = ctx;
    for (size_t k = 0; k < n; k++) {
        size_t i = j->read_of[k];
        struct decision got;
        if (res[k].err == 0 && !res[k].absent) {
            j->held(j, i, &res[k].stands);
        } else if (res[k].err == 0) {
            j->send[j->n_send] = j->rows[i];
            j->send_of[j->n_send++] = i;
        } else if (store_get_decision(d->store, j->ids[i], &got) == 0) {
            j->held(j, i, &got);
        } else {
            lock_missing(j, i, res[k].err);
        }
    }
    if (j->n_send > 0 && d->draining) {
        lock_give_up(j, DETD_ECANCELLED);
        return;
    }
    if (j->n_send > 0 && j->round == 0 && j->defer_ms > 0) {
        int rc = lock_wait(j);
        if (rc != 0)
            lock_give_up(j, rc);
        return;
    }
    lock_write(j);
}

/* etcd's answers for a chunk (commit_batch()): the next chunk goes out
 * while every row landed and time is left; otherwise the rows not sent
 * are not committed either, and the job ends. */
static void lock_on_batch(struct daemon *d, void *ctx,
                          struct commit_result *res, size_t n) {
    (void)d;
    struct lock_job *j = ctx;
    for (size_t k = 0; k < n; k++) {
        size_t i = j->send_of[j->send_at + k];
        if (res[k].err != 0)
            lock_missing(j, i, res[k].err);
        else if (res[k].won)
            j->r.added++;
        else
            j->held(j, i, &res[k].stands);
    }
    j->send_at += n;
    if (j->send_at < j->n_send) {
        int rc = DETD_ETIMEDOUT;
        if (j->r.not_committed == 0 &&
            (j->at_start || clock_mono_ms() < j->deadline_ms) &&
            (rc = lock_send(j)) == 0)
            return; /* j may be over already */
        lock_give_up(j, rc);
        return;
    }
    j->end(j);
}

static void lock_on_poll(uv_timer_t *t) {
    (void)t; /* it only wakes the loop */
}

/*
 * At start the lock's owner is chosen before anything else was asked of
 * the cluster: a registry read before this node's registration would make
 * it the owner on every node. So the loop runs (the cluster's answers
 * come through it) until the registry is settled (it lists this node,
 * read the claim deferral after this node registered: the nodes started
 * with it are in it), at most its bound and half the first read's budget.
 * Past that the owner is chosen from the registry as it is (etcd down, a
 * slow boot): logged and counted, and still only etcd decides.
 */
void lock_await_registry(struct lock_job *j) {
    struct daemon *d = j->d;
    const struct coord_cluster *cc = coord_cluster_ops(d->coord);
    int64_t bound = 0;
    if (cc->settled == NULL || cc->settled(cc->ctx, &bound))
        return;
    int64_t until = j->budget_from + bound;
    int settled = 0;
    if (until > j->budget_from + LOCK_START_ETCD_MS / 2)
        until = j->budget_from + LOCK_START_ETCD_MS / 2;
    uv_timer_t t;
    uv_timer_init(&d->loop, &t);
    uv_timer_start(&t, lock_on_poll, LOCK_WAIT_POLL_MS, LOCK_WAIT_POLL_MS);
    while (!d->draining && !(settled = cc->settled(cc->ctx, &bound)) &&
           clock_mono_ms() < until)
        uv_run(&d->loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)&t, NULL);
    uv_run(&d->loop, UV_RUN_NOWAIT); /* the close completes */
    if (settled || d->draining)
        return;
    d->counters.lock_registry_late++;
    log_warn("lock '%s': the cluster's node registry did not list this node "
             "within %" PRId64 " ms (%s): the lock's owner is chosen from the "
             "nodes known now, so another node may write its entries too (a "
             "Raft proposal more per Txn, never a second decision)",
             j->file, until - j->budget_from, coord_etcd_error(d->coord));
}
