/* lock: Admin.ImportLock (see lock.h). */
#define _GNU_SOURCE
#include "ops/lock.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "app/commit.h"
#include "app/convert.h"
#include "app/coord.h"
#include "app/decide.h"
#include "app/storeerr.h"
#include "clock.h"
#include "app/validate.h"
#include "config/limits.h"
#include "config/log.h"
#include "lockfmt.h"
#include "core/keyid.h"
#include "detd/client.h"
#include "detd/error.h"
#include "provfmt.h"
#include "strfmt.h"

#define LOCK_API_VERSION DETD_API_VERSION

/* s (NULL: "") at most max bytes and, when required, not empty; else why
 * names the field. */
static int str_ok(const char *what, size_t i, const char *field, const char *s,
                  size_t max, int required, char *why, size_t len) {
    size_t n = s != NULL ? strlen(s) : 0;
    if (required && n == 0)
        snprintf(why, len, "%s[%zu].%s is required", what, i, field);
    else if (n > max)
        snprintf(why, len, "%s[%zu].%s is %zu bytes, over the limit of %zu",
                 what, i, field, n, max);
    else
        return 1;
    return 0;
}

/* One decision of a lock (what[i]), checked: 0, or -1 with why naming
 * the field ("decisions[3].config"). */
static int check_one(const char *what, size_t i, const Detd__V1__Decision *m,
                     char *why, size_t len) {
    const Detd__V1__ClientIdentity *by = m->decided_by;
    if (!str_ok(what, i, "arch", m->arch, DAEMON_MAX_ARCH, 1, why, len) ||
        !str_ok(what, i, "kernel", m->kernel, DAEMON_MAX_KERNEL, 1, why, len) ||
        !str_ok(what, i, "key", m->key, DETD_MAX_KEY_BYTES, 0, why, len) ||
        !str_ok(what, i, "config", m->config, DAEMON_MAX_CONFIG, 1, why, len) ||
        !str_ok(what, i, "triton_version", m->triton_version,
                DAEMON_MAX_IDENTITY_STRING, 0, why, len) ||
        (by != NULL &&
         (!str_ok(what, i, "decided_by.host", by->host,
                  DAEMON_MAX_IDENTITY_STRING, 0, why, len) ||
          !str_ok(what, i, "decided_by.device_name", by->device_name,
                  DAEMON_MAX_IDENTITY_STRING, 0, why, len) ||
          !str_ok(what, i, "decided_by.arch", by->arch,
                  DAEMON_MAX_IDENTITY_STRING, 0, why, len))) ||
        (m->decided_peer != NULL &&
         !str_ok(what, i, "decided_peer.node", m->decided_peer->node,
                 DAEMON_MAX_IDENTITY_STRING, 0, why, len)))
        return -1;
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%s[%zu].timing", what, i);
    if (provfmt_check(m->timing, prefix, why, len) != 0)
        return -1;
    if (m->candidates_fp == NULL || !lockfmt_is_hex64(m->candidates_fp)) {
        snprintf(why, len,
                 "%s[%zu].candidates_fp is not 64 lowercase hex digits", what,
                 i);
        return -1;
    }
    if (m->n_candidates < 1 || m->n_candidates > DETD_MAX_CANDIDATES) {
        snprintf(why, len, "%s[%zu].n_candidates %d is not 1 to %d", what, i,
                 (int)m->n_candidates, DETD_MAX_CANDIDATES);
        return -1;
    }
    if (m->n_timings > DETD_MAX_CANDIDATES) {
        snprintf(why, len, "%s[%zu].timings: %zu, over the limit of %d", what,
                 i, m->n_timings, DETD_MAX_CANDIDATES);
        return -1;
    }
    for (size_t t = 0; t < m->n_timings; t++) {
        const Detd__V1__CandidateTiming *c = m->timings[t];
        if (!str_ok(what, i, "timings[].config", c->config, DAEMON_MAX_CONFIG,
                    1, why, len))
            return -1;
        if (c->n_ms > DAEMON_MAX_TIMING_SAMPLES) {
            snprintf(why, len,
                     "%s[%zu].timings[%zu].ms: %zu samples, over the limit of "
                     "%d",
                     what, i, t, c->n_ms, DAEMON_MAX_TIMING_SAMPLES);
            return -1;
        }
    }
    return 0;
}

/* The row of m for namespace ns (strings borrowed from m, ids and the
 * timings JSON into the caller's id and *ret_timings, heap). */
static int row_of(const char *ns, const char *file, const Detd__V1__Decision *m,
                  char id[KEYID_HEX_LEN + 1], struct decision *r,
                  char **ret_timings, char **ret_timing) {
    const Detd__V1__ClientIdentity *by = m->decided_by;
    const Detd__V1__PeerIdentity *peer = m->decided_peer;
    keyid_decision_id(ns, m->arch, m->kernel, m->key ? m->key : "",
                      m->candidates_fp, id);
    *ret_timings = convert_timings_json(m->timings, m->n_timings);
    *ret_timing = m->timing != NULL ? provfmt_json(m->timing) : strdup("");
    if (*ret_timings == NULL || *ret_timing == NULL)
        return DETD_ENOMEM;
    *r = (struct decision){
        .id = id,
        .ns = (char *)ns,
        .arch = m->arch,
        .kernel = m->kernel,
        .key = m->key ? m->key : "",
        .candidates_fp = m->candidates_fp,
        .n_candidates = m->n_candidates,
        .config = m->config,
        .source = DETD_SOURCE_IMPORT,
        .claim_id = m->claim_id,
        .by_host = by ? by->host : "",
        .by_pid = by ? by->pid : 0,
        .by_rank = by ? by->rank : -1,
        .by_local_rank = by ? by->local_rank : -1,
        .by_device = by ? by->device_name : "",
        .by_arch = by ? by->arch : "",
        .triton_version = m->triton_version ? m->triton_version : "",
        .timings_json = *ret_timings,
        .table_file = (char *)file,
        .decided_at_ms = m->decided_at_ms,
        .by_uid = peer ? peer->uid : -1,
        .by_claimed_pid = peer ? peer->claimed_pid : 0,
        .by_node = peer ? peer->node : "",
        .timing_json = *ret_timing,
    };
    return 0;
}

/* What storing a lock's decisions did. */
struct lock_result {
    size_t added, unchanged, conflicts, shown, skipped;
    size_t not_committed; /* etcd did not take them (lock_missing()) */
    struct decision stored[LOCK_MAX_CONFLICTS]; /* the first conflicts */
    char *skips[LOCK_MAX_CONFLICTS];            /* the first skips' lines */
};

static void lock_result_clear(struct lock_result *r) {
    for (size_t i = 0; i < r->shown; i++)
        decision_clear(&r->stored[i]);
    for (size_t i = 0; i < r->skipped && i < LOCK_MAX_CONFLICTS; i++)
        free(r->skips[i]);
    r->shown = 0;
}

/* One field of the importing run's provenance that a lock entry must
 * match (ImportLockRequest.require, --lock-require). */
struct lock_req {
    const char *field, *value;
};

/* Why m does not match the run (heap; NULL: it matches, or out of
 * memory with *ret_oom set). */
static char *lock_mismatch(const Detd__V1__Decision *m,
                           const struct lock_req *req, size_t n_req,
                           int *ret_oom) {
    for (size_t k = 0; k < n_req; k++) {
        const char *v = provfmt_field(m, req[k].field);
        if (v == NULL || strcmp(v, req[k].value) == 0)
            continue;
        char *why =
            strfmt("%s: the lock says %s, this run %s (must match)",
                   req[k].field, v[0] ? v : "(not recorded)", req[k].value);
        *ret_oom = why == NULL;
        return why;
    }
    return NULL;
}

/*
 * Leave out of ms[0..*n) (reordered in place, *n the entries kept) every
 * entry that does not match req: recorded in the store for explain
 * (key id in ns), counted, its line kept in r (the first ones). 0, or an
 * error (the store's, DETD_ENOMEM).
 */
static int lock_filter(struct daemon *d, const char *ns, const char *tf,
                       Detd__V1__Decision **ms, size_t *n,
                       const struct lock_req *req, size_t n_req,
                       struct lock_result *r) {
    size_t kept = 0;
    for (size_t i = 0; i < *n; i++) {
        int oom = 0;
        char *why = lock_mismatch(ms[i], req, n_req, &oom);
        if (oom)
            return DETD_ENOMEM;
        if (why == NULL) {
            ms[kept++] = ms[i];
            continue;
        }
        char id[KEYID_HEX_LEN + 1];
        const Detd__V1__Decision *m = ms[i];
        keyid_decision_id(ns, m->arch, m->kernel, m->key ? m->key : "",
                          m->candidates_fp, id);
        int rc =
            store_put_lock_skip(d->store, ns, id, tf, why, clock_unix_ms());
        char *line = rc == 0 ? strfmt("%s %s [%s]: %s", m->kernel,
                                      m->key ? m->key : "", m->arch, why)
                             : NULL;
        free(why);
        if (rc != 0)
            return rc;
        if (line == NULL)
            return DETD_ENOMEM;
        if (r->skipped == 0)
            log_warn("lock '%s': not imported (a miss, timed by the job): %s",
                     tf + strlen("lock:"), line);
        d->counters.lock_skipped++;
        if (r->skipped < LOCK_MAX_CONFLICTS)
            r->skips[r->skipped] = line;
        else
            free(line);
        r->skipped++;
    }
    *n = kept;
    return 0;
}

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
};

static void lock_wait_closed(uv_handle_t *h) {
    free(h);
}

static void lock_wait_end(struct lock_job *j);

static void lock_job_free(struct lock_job *j) {
    if (j == NULL)
        return;
    if (j->wait != NULL)
        lock_wait_end(j);
    free(j->read_ids);
    free(j->read_of);
    free(j->held_before);
    for (size_t i = 0; j->timings != NULL && i < j->n_all; i++) {
        free(j->timings[i]);
        free(j->timing[i]);
    }
    free(j->timings);
    free(j->timing);
    free(j->rows);
    free(j->ids);
    free(j->send);
    free(j->send_of);
    free(j->missing);
    free(j->tf);
    lock_result_clear(&j->r);
    if (j->msg != NULL)
        protobuf_c_message_free_unpacked(j->msg, NULL);
    free(j);
}

/*
 * A job for the entries ms[0..n) (checked; reordered in place) of lock
 * file (sha256 its hash) into namespace ns: those not matching req are
 * left out (lock_filter()), the others made rows. Returns 0 with *ret
 * (lock_job_free()), DETD_ENOMEM or the store's error.
 */
static int lock_job_new(struct daemon *d, const char *ns, const char *file,
                        const char *sha256, Detd__V1__Decision **ms, size_t n,
                        const struct lock_req *req, size_t n_req,
                        struct lock_job **ret) {
    struct lock_job *j = calloc(1, sizeof(*j));
    if (j == NULL)
        return DETD_ENOMEM;
    *j = (struct lock_job){.d = d, .ns = ns, .file = file, .sha256 = sha256};
    j->n_all = n;
    j->rows = calloc(n + 1, sizeof(*j->rows));
    j->ids = calloc(n + 1, sizeof(*j->ids));
    j->timings = calloc(n + 1, sizeof(*j->timings));
    j->timing = calloc(n + 1, sizeof(*j->timing));
    j->tf = strfmt("lock:%s", file);
    int rc = DETD_ENOMEM;
    if (j->rows == NULL || j->ids == NULL || j->timings == NULL ||
        j->timing == NULL || j->tf == NULL)
        goto fail;
    j->n = n;
    if ((rc = lock_filter(d, ns, j->tf, ms, &j->n, req, n_req, &j->r)) != 0)
        goto fail;
    rc = DETD_ENOMEM;
    for (size_t i = 0; i < j->n; i++)
        if (row_of(ns, j->tf, ms[i], j->ids[i], &j->rows[i], &j->timings[i],
                   &j->timing[i]) != 0)
            goto fail;
    *ret = j;
    return 0;
fail:
    lock_job_free(j);
    return rc;
}

/* Row i is decided already (got: the decision that stands, taken): the
 * same config is unchanged; another is a conflict, kept and listed. */
static void lock_held(struct lock_job *j, size_t i, struct decision *got) {
    struct lock_result *r = &j->r;
    const struct decision *w = &j->rows[i];
    if (strcmp(got->config, w->config) == 0) {
        r->unchanged++;
        decision_clear(got);
        return;
    }
    if (r->conflicts++ == 0)
        log_warn("lock '%s': %s key %s is decided already as %s, the lock "
                 "says %s: the %s decision is kept (detctl reset first to "
                 "take the lock's)",
                 j->file, w->kernel, w->key, got->config, w->config,
                 j->d->coord != NULL ? "cluster's" : "store's");
    if (r->shown < LOCK_MAX_CONFLICTS) {
        r->stored[r->shown++] = *got;
        memset(got, 0, sizeof(*got));
    } else {
        decision_clear(got);
    }
}

/* The local backend: the rows in one transaction, first writer wins.
 * Returns 0, DETD_ENOMEM or the store's error (nothing stored). */
static int lock_store_local(struct lock_job *j) {
    int *res = calloc(j->n + 1, sizeof(*res));
    if (res == NULL)
        return DETD_ENOMEM;
    int rc = store_put_decisions(j->d->store, j->rows, j->n, res);
    for (size_t i = 0; rc == 0 && i < j->n; i++) {
        struct decision got;
        if (res[i] == 0)
            j->r.added++;
        else if ((rc = store_get_decision(j->d->store, j->rows[i].id, &got)) ==
                 0)
            lock_held(j, i, &got);
    }
    free(res);
    return rc;
}

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

/*
 * The etcd backend: the job's buffers, this node's wait for the lock's
 * owner, and every row read from etcd (lock_on_read() settles them).
 * Returns 0, or DETD_ENOMEM (nothing asked).
 */
static int lock_precheck(struct lock_job *j) {
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

/* Why etcd did not take a row, for a reader. */
static const char *lock_why(int err) {
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

/* One line in the log for the whole job (and, when some rows were not
 * committed, one warning and the count). */
static void lock_log(struct lock_job *j) {
    struct lock_result *r = &j->r;
    log_info("lock '%s' (sha256 %.12s) into namespace '%s': %zu decisions "
             "added, %zu unchanged, %zu conflicting (kept as stored), %zu "
             "skipped (provenance)%s",
             j->file, j->sha256 != NULL ? j->sha256 : "", j->ns, r->added,
             r->unchanged, r->conflicts, r->skipped,
             j->d->coord != NULL ? ", through etcd" : "");
    if (r->not_committed == 0)
        return;
    j->d->counters.lock_not_committed += r->not_committed;
    log_warn("lock '%s': %zu of %zu entries not committed (%s: %s): %s%s",
             j->file, r->not_committed, j->n_all, lock_why(j->first_err),
             coord_etcd_error(j->d->coord), j->missing ? j->missing : "",
             r->not_committed > LOCK_MAX_NAMED ? ", ..." : "");
}

/* Answer the job's call with its result (consumes the call). */
static void lock_reply(struct lock_job *j) {
    struct lock_result *r = &j->r;
    rpc_call *call = j->call;
    j->call = NULL;
    if (r->not_committed > 0) {
        /* Nothing half-written passes for done: the call fails, naming
         * what did not land and what did. */
        rpc_fail(call, RPC_UNAVAILABLE,
                 "etcd did not take %zu of the %zu entries of this request "
                 "(%s): %s%s; those are not known to be decided (import the "
                 "lock again once etcd answers: what landed is unchanged "
                 "then); landed: "
                 "%zu added, %zu unchanged, %zu conflicting (kept as stored), "
                 "%zu skipped",
                 r->not_committed, j->n_all, lock_why(j->first_err),
                 j->missing ? j->missing : "",
                 r->not_committed > LOCK_MAX_NAMED ? ", ..." : "", r->added,
                 r->unchanged, r->conflicts, r->skipped);
        return;
    }
    struct convert_decision *pbs = calloc(r->shown + 1, sizeof(*pbs));
    Detd__V1__Decision **conflicts = calloc(r->shown + 1, sizeof(*conflicts));
    if (pbs == NULL || conflicts == NULL) {
        rpc_fail(call, RPC_RESOURCE_EXHAUSTED, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < r->shown; i++) {
        convert_decision_fill(&r->stored[i], &pbs[i], 1);
        conflicts[i] = &pbs[i].msg;
    }
    Detd__V1__ImportLockResponse resp = DETD__V1__IMPORT_LOCK_RESPONSE__INIT;
    resp.api_version = LOCK_API_VERSION;
    resp.added = r->added;
    resp.unchanged = r->unchanged;
    resp.conflicts = conflicts;
    resp.n_conflicts = r->shown;
    resp.conflicts_total = r->conflicts;
    resp.skipped = r->skipped;
    resp.skipped_reasons = r->skips;
    resp.n_skipped_reasons =
        r->skipped < LOCK_MAX_CONFLICTS ? r->skipped : LOCK_MAX_CONFLICTS;
    rpc_reply(call, &resp.base);
    for (size_t i = 0; i < r->shown; i++)
        convert_decision_clear(&pbs[i]);
out:
    free(pbs);
    free(conflicts);
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

/* The job is over: logged, then its call answered and the job freed, or
 * at start marked done for the waiting loop. */
static void lock_end(struct lock_job *j) {
    lock_log(j);
    if (j->at_start) {
        j->done = 1;
        return;
    }
    lock_reply(j);
    lock_job_free(j);
}

/* Rows send_of[send_at..n_send) are not committed (err, or the first
 * row's error), and the job ends. */
static void lock_give_up(struct lock_job *j, int err) {
    for (; j->send_at < j->n_send; j->send_at++)
        lock_missing(j, j->send_of[j->send_at],
                     j->r.not_committed > 0 ? j->first_err : err);
    lock_end(j);
}

/* Write the rows etcd lacks (j->send); the job ends when etcd answered
 * them (lock_on_batch()), or now when none are left. */
static void lock_write(struct lock_job *j) {
    int rc;
    if (j->n_send == 0) {
        lock_end(j);
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

/* End j's wait: its timer closed, out of d->lock_waits. */
static void lock_wait_end(struct lock_job *j) {
    for (struct lock_job **pp = &j->d->lock_waits; *pp != NULL;
         pp = &(*pp)->next_wait)
        if (*pp == j) {
            *pp = j->next_wait;
            break;
        }
    uv_timer_stop(j->wait);
    uv_close((uv_handle_t *)j->wait, lock_wait_closed);
    j->wait = NULL;
}

/* See lock.h. */
void lock_drain(struct daemon *d) {
    while (d->lock_waits != NULL) {
        struct lock_job *j = d->lock_waits;
        lock_wait_end(j);
        lock_give_up(j, DETD_ECANCELLED);
    }
}

/* The wait for the owner's writes: polled every LOCK_WAIT_POLL_MS; when
 * every pending row arrived, or the wait is over, the pending rows are
 * read from etcd again (round 1: what etcd still lacks is written). */
static void lock_on_wait(uv_timer_t *t) {
    struct lock_job *j = t->data;
    if (!lock_all_arrived(j) && clock_mono_ms() < j->wait_until)
        return;
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
    uv_timer_start(j->wait, lock_on_wait, LOCK_WAIT_POLL_MS, LOCK_WAIT_POLL_MS);
    j->next_wait = j->d->lock_waits;
    j->d->lock_waits = j;
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
            lock_held(j, i, &res[k].stands);
        } else if (res[k].err == 0) {
            j->send[j->n_send] = j->rows[i];
            j->send_of[j->n_send++] = i;
        } else if (store_get_decision(d->store, j->ids[i], &got) == 0) {
            lock_held(j, i, &got);
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
            lock_held(j, i, &res[k].stands);
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
    lock_end(j);
}

/*
 * Settle job j: stored now (local backend), or through etcd (read, the
 * owner's writes waited for, what etcd lacks written) by deadline_ms (at
 * start: each read and chunk within LOCK_START_ETCD_MS; lock_end() ends
 * it). Returns 1 when the job is over (logged; the caller answers and
 * frees it), 0 when it went to etcd (it is lock_on_read()'s now), or an
 * error (negative: DETD_ENOMEM, the store's; nothing stored).
 */
static int lock_settle(struct lock_job *j, int64_t deadline_ms) {
    int rc = 0;
    j->deadline_ms = deadline_ms;
    if (j->d->coord != NULL && j->n > 0)
        return lock_precheck(j);
    if (j->d->coord == NULL)
        rc = lock_store_local(j);
    if (rc != 0)
        return rc;
    lock_log(j);
    return 1;
}

/* See lock.h. */
void lock_import(struct daemon *d, struct rpc_event *ev) {
    const Detd__V1__ImportLockRequest *req =
        (const Detd__V1__ImportLockRequest *)ev->msg;
    const char *ns =
        req->namespace_ && req->namespace_[0] ? req->namespace_ : d->cfg->ns;
    size_t n = req->n_decisions;
    char why[512];
    struct lock_job *j = NULL;
    if (validate_str(ev->call, "namespace", req->namespace_,
                     DAEMON_MAX_NAMESPACE, 0) ||
        validate_str(ev->call, "file", req->file, DAEMON_MAX_IDENTITY_STRING,
                     1) ||
        validate_str(ev->call, "sha256", req->sha256, KEYID_HEX_LEN, 0))
        goto out;
    if (n > LOCK_MAX_BATCH) {
        rpc_fail(ev->call, RPC_INVALID_ARGUMENT,
                 "decisions: %zu in one request, over the limit of %d", n,
                 LOCK_MAX_BATCH);
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        if (check_one("decisions", i, req->decisions[i], why, sizeof why)) {
            rpc_fail(ev->call, RPC_INVALID_ARGUMENT, "%s", why);
            goto out;
        }
    struct lock_req lr[PROVFMT_MAX_REQUIRE];
    if (req->n_require > PROVFMT_MAX_REQUIRE) {
        rpc_fail(ev->call, RPC_INVALID_ARGUMENT,
                 "require: %zu, over the limit of %d", req->n_require,
                 PROVFMT_MAX_REQUIRE);
        goto out;
    }
    for (size_t i = 0; i < req->n_require; i++) {
        const Detd__V1__LockRequirement *q = req->require[i];
        static const Detd__V1__Decision probe = DETD__V1__DECISION__INIT;
        if (q->field == NULL || provfmt_field(&probe, q->field) == NULL) {
            rpc_fail(ev->call, RPC_INVALID_ARGUMENT,
                     "require[%zu].field '%.64s' is not one of "
                     "triton_version, torch_version, cuda_version, driver",
                     i, q->field ? q->field : "");
            goto out;
        }
        snprintf(why, sizeof why, "require[%zu].value", i);
        if (validate_str(ev->call, why, q->value, PROVFMT_MAX_STRING, 1))
            goto out;
        lr[i] = (struct lock_req){q->field, q->value};
    }
    int rc = lock_job_new(d, ns, req->file, req->sha256, req->decisions, n, lr,
                          req->n_require, &j);
    if (rc != 0) {
        storeerr_reply(d, ev->call, rc);
        goto out;
    }
    /* The job answers the call and frees the request from here on. */
    j->call = ev->call;
    j->msg = ev->msg;
    rc = lock_settle(j, decide_answer_by(rpc_call_deadline_ms(ev->call), 0,
                                         clock_mono_ms()));
    if (rc == 0)
        return; /* through etcd: lock_end() ends it */
    if (rc < 0) {
        j->call = NULL;
        storeerr_reply(d, ev->call, rc);
    } else {
        lock_reply(j);
    }
    lock_job_free(j);
    return;
out:
    protobuf_c_message_free_unpacked(ev->msg, NULL);
}

/* At start: the loop runs until the job ends; at each chunk's deadline
 * commit_tick() ends what etcd has not answered (etcd's own answer of
 * failure comes about then too). */
static void lock_on_start_deadline(uv_timer_t *t) {
    struct lock_job *j = t->data;
    int64_t now = clock_mono_ms();
    commit_tick(j->d, now);
    if (!j->done)
        uv_timer_start(t, lock_on_start_deadline,
                       j->chunk_deadline > now + 10
                           ? (uint64_t)(j->chunk_deadline - now)
                           : 10,
                       0);
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
static void lock_await_registry(struct lock_job *j) {
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

/* --lock with etcd: the registry waited for, then the job's rows go to
 * etcd, and start-up waits (the loop running) until etcd answered each,
 * or a chunk was not answered within LOCK_START_ETCD_MS. Returns 0 or an
 * error (nothing sent). */
static int lock_settle_at_start(struct lock_job *j) {
    struct daemon *d = j->d;
    j->at_start = 1;
    uv_update_time(&d->loop);
    j->budget_from = clock_mono_ms();
    if (d->coord != NULL && j->n > 0)
        lock_await_registry(j);
    int rc = lock_settle(j, 0);
    if (rc != 0)
        return rc > 0 ? 0 : rc;
    int64_t now = clock_mono_ms();
    uv_timer_t t;
    uv_timer_init(&d->loop, &t);
    t.data = j;
    uv_timer_start(
        &t, lock_on_start_deadline,
        j->chunk_deadline > now + 10 ? (uint64_t)(j->chunk_deadline - now) : 10,
        0);
    while (!j->done)
        uv_run(&d->loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)&t, NULL);
    uv_run(&d->loop, UV_RUN_NOWAIT); /* the close completes */
    return 0;
}

/* See lock.h. */
int lock_load_at_start(struct daemon *d) {
    const char *path = d->cfg->lock;
    if (path == NULL)
        return 0;
    char why[700];
    struct lockfmt *f = NULL;
    struct lockfmt_msg *m = NULL;
    Detd__V1__Decision **ms = NULL;
    struct lock_job *j = NULL;
    struct lock_req lr[PROVFMT_MAX_REQUIRE];
    size_t n_lr = 0;
    int ret = -1, rc = lockfmt_load(path, &f, why, sizeof why);
    if (rc != 0) {
        log_error("--lock '%s': %s", path,
                  rc == DETD_ENOMEM ? "out of memory" : why);
        return -1;
    }
    m = calloc(f->n + 1, sizeof(*m));
    ms = calloc(f->n + 1, sizeof(*ms));
    if (m == NULL || ms == NULL)
        goto oom;
    for (size_t i = 0; i < f->n; i++) {
        if (lockfmt_msg_fill(&f->e[i], &m[i]) != 0)
            goto oom;
        ms[i] = &m[i].d;
        if (check_one("entries", i, ms[i], why, sizeof why) != 0) {
            log_error("--lock '%s': %s", path, why);
            goto out;
        }
    }
    /* --lock-require FIELD=VALUE (checked by the options). */
    for (size_t i = 0; i < d->cfg->n_lock_require; i++) {
        const char *q = d->cfg->lock_require[i], *eq = strchr(q, '=');
        if (eq == NULL || n_lr == PROVFMT_MAX_REQUIRE) {
            log_error("--lock-require '%s': %s", q,
                      eq == NULL ? "not FIELD=VALUE" : "too many (at most 8)");
            goto out;
        }
        char *field = strndup(q, (size_t)(eq - q));
        if (field == NULL)
            goto oom;
        lr[n_lr++] = (struct lock_req){field, eq + 1};
    }
    const char *base = strrchr(path, '/');
    rc = lock_job_new(d, d->cfg->ns, base != NULL ? base + 1 : path, f->sha256,
                      ms, f->n, lr, n_lr, &j);
    if (rc == 0)
        rc = lock_settle_at_start(j);
    if (rc != 0) {
        log_error("--lock '%s': store its decisions: %s", path,
                  rc == DETD_ENOMEM ? "out of memory" : store_errmsg(d->store));
        goto out;
    }
    if (j->r.not_committed > 0) {
        log_error("--lock '%s': etcd did not take %zu of its %zu entries "
                  "(%s): the daemon does not start on a lock half given "
                  "(%zu landed: they stand; start it again once etcd "
                  "answers)",
                  path, j->r.not_committed, j->n_all, lock_why(j->first_err),
                  j->r.added + j->r.unchanged + j->r.conflicts);
        goto out;
    }
    ret = 0;
    goto out;
oom:
    log_error("--lock '%s': out of memory", path);
out:
    lock_job_free(j);
    for (size_t i = 0; i < n_lr; i++)
        free((char *)lr[i].field);
    for (size_t i = 0; m != NULL && i < f->n; i++)
        lockfmt_msg_clear(&m[i]);
    free(m);
    free(ms);
    lockfmt_free(f);
    return ret;
}
