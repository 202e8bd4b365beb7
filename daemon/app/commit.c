/*
 * commit: first writer wins, then release, then answer (see commit.h).
 */
#define _GNU_SOURCE
#include "app/commit.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "app/coord.h"
#include "app/daemon.h"
#include "app/reply.h"
#include "app/storeerr.h"
#include "clock.h"
#include "detd/client.h"
#include "detd/error.h"

static const char *const source_names[8] = {
    "unspecified", "timed",    "table", "override",
    "import",      "fallback", "local", "ungoverned"};

/* A commit waiting for etcd's answer. */
struct commit_op {
    uint64_t cookie;
    rpc_call *call; /* NULL once answered at its deadline (commit_tick) */
    commit_answer how;
    int64_t deadline_ms;
    char id[KEYID_HEX_LEN + 1];
    struct commit_op *next;
};

/* A batch of commits (commit_batch()) or reads (commit_read()) waiting
 * for etcd's answers: row i has cookie first_cookie + i. */
struct commit_batch_op {
    int read;
    uint64_t first_cookie;
    size_t n, left;
    int64_t deadline_ms;
    struct commit_result *res;
    unsigned char *answered;
    commit_batch_cb cb;
    void *ctx;
    struct commit_batch_op *next;
};

struct commit_state {
    struct commit_op *ops;
    struct commit_batch_op *batches;
    uint64_t next_cookie;
};

/* See commit.h. */
int commit_state_new(commit_state **ret) {
    commit_state *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return DETD_ENOMEM;
    *ret = s;
    return 0;
}

/* See commit.h. */
void commit_state_free(commit_state *s) {
    free(s);
}

/* See commit.h. */
void commit_log_decision(const struct decision *r, const char *origin,
                         const char *via) {
    /* Claim ids are 63 random bits: unsigned, as every other line and
     * libdetd write them (a JSON number, as the claim field of every
     * other event: log.c). */
    const struct log_field f[] = {
        LOG_STR("id", r->id),
        LOG_STR("namespace", r->ns),
        LOG_STR("arch", r->arch),
        LOG_STR("kernel", r->kernel),
        LOG_STR("key", r->key),
        LOG_STR("config", r->config),
        LOG_STR("source", source_names[r->source & 7]),
        LOG_UNUM("claim", r->claim_id),
        LOG_STR("host", r->by_host),
        LOG_NUM("pid", r->by_pid),
        LOG_NUM("rank", r->by_rank),
        LOG_NUM("uid", r->by_uid),
        LOG_STR("node", r->by_node),
        LOG_STR("origin", origin),
        LOG_STR("via", via),
    };
    log_event(LOG_INFO, f, sizeof(f) / sizeof(f[0]), "decided");
}

/* What a release answers its waiters with. */
struct release {
    struct daemon *d;
    const struct decision *won;
};

static void on_release(void *ctx, const struct engine_event *ev) {
    const struct release *r = ctx;
    struct pending *p = waiters_take(r->d->waiters, ev->token);
    if (p == NULL)
        return;
    reply_decided(p->call, r->won, pending_waited(p));
    pending_free(p);
}

/*
 * Store row in the local store (first writer wins), count and log it when
 * it is new, and release everyone on this node waiting for the key with
 * the row that won. *ret_won is row or existing (filled from the store
 * when another writer was first: the caller clears it then). what: see
 * commit_decision(); origin and via: see commit_log_decision();
 * committed_here: see coord_decided(). Returns 0,
 * or the store's error (nothing released).
 */
static int apply(struct daemon *d, const struct decision *row, const char *what,
                 const char *origin, const char *via, int committed_here,
                 struct decision *existing, const struct decision **ret_won) {
    int rc = store_put_decision(d->store, row, existing);
    const struct decision *won = row;
    if (rc == DETD_EEXIST) {
        won = existing;
        if (d->coord != NULL && strcmp(existing->config, row->config) != 0)
            log_error("key %.12s: the local store holds '%s' but etcd holds "
                      "'%s' (this state directory decided without etcd); "
                      "serving the local one",
                      row->id, existing->config, row->config);
    } else if (rc != 0) {
        return rc;
    } else {
        d->counters.committed[row->source & 7]++;
        if (what != NULL)
            log_info("decided %s key %s -> %s (source %s, %s)", row->kernel,
                     row->key, row->config, source_names[row->source & 7],
                     what);
        else
            commit_log_decision(row, origin, via);
    }
    struct release rel = {d, won};
    size_t n = engine_decided_each(d->engine, won->id, on_release, &rel);
    log_debug("released %zu waiters on %.12s", n, won->id);
    if (d->coord != NULL)
        coord_decided(d->coord, won->id, won, committed_here);
    *ret_won = won;
    return 0;
}

static void answer(struct daemon *d, rpc_call *call, commit_answer how,
                   const struct decision *won, int superseded) {
    if (how == COMMIT_ANSWER_DECIDE)
        reply_decided_cached(d->hot, call, won);
    else
        reply_report(call, won, superseded);
}

/* See commit.h. */
void commit_decision(struct daemon *d, rpc_call *call, commit_answer how,
                     const struct decision *row, const char *what,
                     int64_t deadline_ms) {
    if (d->coord != NULL) {
        /* etcd first; the answer follows the commit's result. */
        struct commit_op *op = calloc(1, sizeof(*op));
        int rc = DETD_ENOMEM;
        if (op != NULL) {
            op->cookie = ++d->commits->next_cookie;
            op->call = call;
            op->how = how;
            op->deadline_ms = deadline_ms;
            snprintf(op->id, sizeof(op->id), "%s", row->id);
            const struct coord_cluster *cc = coord_cluster_ops(d->coord);
            rc = cc->commit(cc->ctx, row, row->claim_id, deadline_ms,
                            op->cookie);
        }
        if (rc != 0) {
            free(op);
            rpc_fail(call, RPC_INTERNAL, "commit: %s", detd_strerror(rc));
            return;
        }
        op->next = d->commits->ops;
        d->commits->ops = op;
        return;
    }
    struct decision existing;
    const struct decision *won;
    int rc = apply(d, row, what, "local", "report", 1, &existing, &won);
    if (rc != 0) {
        /* A failing disk is the caller's UNAVAILABLE, the store named. */
        storeerr_reply(d, call, rc);
        return;
    }
    answer(d, call, how, won, won != row);
    if (won != row)
        decision_clear(&existing);
}

/* The batch whose row has cookie and is not answered yet (its index in
 * *ret_i), or NULL. */
static struct commit_batch_op *batch_of(commit_state *s, uint64_t cookie,
                                        size_t *ret_i) {
    for (struct commit_batch_op *b = s->batches; b != NULL; b = b->next) {
        if (cookie < b->first_cookie || cookie - b->first_cookie >= b->n)
            continue;
        *ret_i = (size_t)(cookie - b->first_cookie);
        return b->answered[*ret_i] ? NULL : b;
    }
    return NULL;
}

/* Take b out of the table. */
static void batch_unlink(struct daemon *d, struct commit_batch_op *b) {
    for (struct commit_batch_op **pp = &d->commits->batches; *pp != NULL;
         pp = &(*pp)->next)
        if (*pp == b) {
            *pp = b->next;
            break;
        }
}

/* Free b (unlinked) and what its results still hold. */
static void batch_free(struct commit_batch_op *b) {
    for (size_t i = 0; i < b->n; i++)
        decision_clear(&b->res[i].stands);
    free(b->res);
    free(b->answered);
    free(b);
}

/* Unlink b, hand its results to its owner, free it. */
static void batch_finish(struct daemon *d, struct commit_batch_op *b) {
    batch_unlink(d, b);
    b->cb(d, b->ctx, b->res, b->n);
    batch_free(b);
}

/* Row i of b came to err (0: etcd answered), won, and stands (taken; NULL
 * when won or failed). The last answer finishes the batch. */
static void batch_answer(struct daemon *d, struct commit_batch_op *b, size_t i,
                         int err, int won, struct decision *stands) {
    b->answered[i] = 1;
    b->res[i].err = err;
    b->res[i].won = won;
    if (stands != NULL) {
        b->res[i].stands = *stands;
        memset(stands, 0, sizeof(*stands));
    }
    if (--b->left == 0)
        batch_finish(d, b);
}

/* The writer id's claim part of a batch: 63 random bits (as claim ids),
 * so that a retried Txn recognises its own write while another batch of
 * the same rows (a second import) does not pass for this one. */
static uint64_t batch_writer_id(void) {
    uint64_t v = 0;
    if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v))
        v = (uint64_t)clock_mono_ms() * 2654435761u;
    return v & (uint64_t)INT64_MAX;
}

/* A batch of n rows in the table (its results for cb), or NULL when out
 * of memory. */
static struct commit_batch_op *batch_new(struct daemon *d, size_t n,
                                         int64_t deadline_ms,
                                         commit_batch_cb cb, void *ctx) {
    struct commit_batch_op *b = calloc(1, sizeof(*b));
    if (b != NULL) {
        b->res = calloc(n + 1, sizeof(*b->res));
        b->answered = calloc(n + 1, 1);
    }
    if (b == NULL || b->res == NULL || b->answered == NULL) {
        if (b != NULL) {
            free(b->res);
            free(b->answered);
        }
        free(b);
        return NULL;
    }
    b->first_cookie = d->commits->next_cookie + 1;
    d->commits->next_cookie += n;
    b->n = b->left = n;
    b->deadline_ms = deadline_ms;
    b->cb = cb;
    b->ctx = ctx;
    b->next = d->commits->batches;
    d->commits->batches = b;
    return b;
}

/* See commit.h. */
int commit_batch(struct daemon *d, const struct decision *rows, size_t n,
                 int64_t deadline_ms, commit_batch_cb cb, void *ctx) {
    assert(d->coord != NULL && d->commits != NULL && cb != NULL);
    struct commit_batch_op *b = batch_new(d, n, deadline_ms, cb, ctx);
    if (b == NULL)
        return DETD_ENOMEM;
    if (n == 0) {
        batch_finish(d, b);
        return 0;
    }
    uint64_t writer = batch_writer_id();
    const struct coord_cluster *cc = coord_cluster_ops(d->coord);
    /* Queued together, so that they go out in as few Txns as the cluster
     * allows. Answers arrive through the loop, never during this call: b
     * is whole until the last refusal below (which finishes it). */
    int *err = calloc(n, sizeof(*err));
    int rc = err == NULL ? DETD_ENOMEM
                         : cc->commit_many(cc->ctx, rows, n, writer,
                                           deadline_ms, b->first_cookie, err);
    for (size_t i = 0; i < n; i++)
        if (rc != 0 || err[i] != 0)
            batch_answer(d, b, i, rc != 0 ? rc : err[i], 0, NULL);
    free(err);
    return 0;
}

/* See commit.h. */
int commit_read(struct daemon *d, const char *const *ids, size_t n,
                int64_t deadline_ms, commit_batch_cb cb, void *ctx) {
    assert(d->coord != NULL && d->commits != NULL && cb != NULL);
    struct commit_batch_op *b = batch_new(d, n, deadline_ms, cb, ctx);
    if (b == NULL)
        return DETD_ENOMEM;
    b->read = 1;
    if (n == 0) {
        batch_finish(d, b);
        return 0;
    }
    const struct coord_cluster *cc = coord_cluster_ops(d->coord);
    int rc = cc->read(cc->ctx, ids, n, deadline_ms, b->first_cookie);
    if (rc != 0) { /* nothing sent: the batch goes without an answer */
        batch_unlink(d, b);
        batch_free(b);
    }
    return rc;
}

static struct commit_op *op_take(commit_state *s, uint64_t cookie) {
    for (struct commit_op **pp = &s->ops; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->cookie == cookie) {
            struct commit_op *op = *pp;
            *pp = op->next;
            return op;
        }
    }
    return NULL;
}

/* Store a decision from etcd and release everyone waiting for it. writer
 * is the value's writer ("node/pid/nonce/claim"): its node part is the
 * origin logged. */
static void apply_from_etcd(struct daemon *d, const struct decision *row,
                            const char *writer, const char *via,
                            int committed_here) {
    char origin[DAEMON_MAX_NAMESPACE + 1];
    const char *w = writer != NULL ? writer : "";
    size_t n = strcspn(w, "/");
    if (n > DAEMON_MAX_NAMESPACE)
        n = DAEMON_MAX_NAMESPACE;
    memcpy(origin, w, n);
    origin[n] = '\0';
    struct decision existing;
    const struct decision *won;
    int rc = apply(d, row, NULL, n > 0 ? origin : "unknown", via,
                   committed_here, &existing, &won);
    if (rc != 0) {
        if (!storeerr_note(d, rc))
            log_error("store decision %.12s from etcd: %s", row->id,
                      store_errmsg(d->store));
        return;
    }
    if (won != row)
        decision_clear(&existing);
    if (d->on_etcd_applied != NULL)
        d->on_etcd_applied(d);
}

/* The decision in ev's value into *ret_row and *ret_writer (heap), or an
 * error, logged once naming the key. */
static int decode_from_etcd(const struct cluster_event *ev,
                            struct decision *ret_row, char **ret_writer) {
    int rc =
        cluster_decision_decode(ev->value, ev->value_len, ret_row, ret_writer);
    if (rc != 0)
        log_error("decision %.12s in etcd is malformed: %s", ev->id,
                  detd_strerror(rc));
    return rc;
}

static void on_committed(struct daemon *d, const struct cluster_event *ev) {
    struct commit_op *op = op_take(d->commits, ev->cookie);
    size_t bi = 0;
    struct commit_batch_op *b =
        op == NULL ? batch_of(d->commits, ev->cookie, &bi) : NULL;
    if (ev->err != 0) {
        /* A batch's owner logs its failures once (commit_batch()). */
        if (b != NULL) {
            batch_answer(d, b, bi, ev->err, 0, NULL);
            return;
        }
        log_warn("commit %.12s to etcd failed: %s", ev->id,
                 detd_strerror(ev->err));
        if (op != NULL && op->call != NULL)
            rpc_fail(op->call, RPC_UNAVAILABLE,
                     "etcd unreachable (%s): the decision for key %.12s was "
                     "not committed and nothing was decided; %s",
                     detd_strerror(ev->err), ev->id,
                     op->how == COMMIT_ANSWER_DECIDE ? "ask again"
                                                     : "report again");
        free(op);
        return;
    }
    struct decision row;
    char *writer = NULL;
    int rc = decode_from_etcd(ev, &row, &writer);
    if (rc != 0) {
        if (op != NULL && op->call != NULL)
            rpc_fail(op->call, RPC_INTERNAL,
                     "the decision stored in etcd for %.12s is malformed",
                     ev->id);
        if (b != NULL)
            batch_answer(d, b, bi, rc, 0, NULL);
        free(op);
        return;
    }
    apply_from_etcd(d, &row, writer,
                    ev->won ? "committed here" : "another node won", 1);
    free(writer);
    if (b != NULL) {
        batch_answer(d, b, bi, 0, ev->won, ev->won ? NULL : &row);
        decision_clear(&row);
        return;
    }
    if (op != NULL && op->call != NULL) {
        /* Answer with what this node serves from now on. */
        struct decision cur;
        int have = store_get_decision(d->store, row.id, &cur) == 0;
        const struct decision *r = have ? &cur : &row;
        if (op->how == COMMIT_ANSWER_DECIDE)
            reply_decided_cached(d->hot, op->call, r);
        else
            reply_report(op->call, r, !ev->won);
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
        coord_decided(d->coord, ev->id, NULL, 0);
        return;
    }
    coord_decided(d->coord, ev->id, NULL, 0); /* no claim job in flight */
    apply_from_etcd(d, &row, writer, ev->revision > 0 ? "watch" : "read", 0);
    free(writer);
    decision_clear(&row);
}

/* A key commit_read() asked for: what etcd holds is stored as any
 * decision from etcd (the watch may not have brought it yet) and handed
 * to the batch's owner. */
static void on_read(struct daemon *d, const struct cluster_event *ev) {
    size_t bi = 0;
    struct commit_batch_op *b = batch_of(d->commits, ev->cookie, &bi);
    if (b == NULL || !b->read)
        return; /* past its deadline (answered then) */
    if (ev->err != 0 || ev->value == NULL) {
        b->res[bi].absent = ev->err == 0;
        batch_answer(d, b, bi, ev->err, 0, NULL);
        return;
    }
    struct decision row;
    char *writer = NULL;
    int rc = decode_from_etcd(ev, &row, &writer);
    if (rc != 0) {
        batch_answer(d, b, bi, rc, 0, NULL);
        return;
    }
    apply_from_etcd(d, &row, writer, "read", 0);
    free(writer);
    batch_answer(d, b, bi, 0, 0, &row);
    decision_clear(&row);
}

/* See commit.h. */
void commit_cluster_event(struct daemon *d, const struct cluster_event *ev) {
    if (ev->kind == CLUSTER_EV_COMMITTED)
        on_committed(d, ev);
    else if (ev->kind == CLUSTER_EV_DECISION)
        on_decision(d, ev);
    else if (ev->kind == CLUSTER_EV_READ)
        on_read(d, ev);
}

/* See commit.h. */
int64_t commit_tick(struct daemon *d, int64_t now) {
    int64_t next = INT64_MAX;
    if (d->commits == NULL)
        return next;
    /* A batch past its deadline: the rows etcd has not answered are not
     * known to be committed (their commits go on; a late answer still
     * reaches the store and the waiters). */
    for (struct commit_batch_op *b = d->commits->batches; b != NULL;) {
        if (b->deadline_ms > now) {
            if (b->deadline_ms < next)
                next = b->deadline_ms;
            b = b->next;
            continue;
        }
        for (size_t i = 0; i < b->n; i++)
            if (!b->answered[i])
                b->answered[i] = 1, b->res[i].err = DETD_ETIMEDOUT;
        batch_finish(d, b); /* its owner's callback may change the list */
        b = d->commits->batches;
        next = INT64_MAX;
    }
    for (struct commit_op *op = d->commits->ops; op != NULL; op = op->next) {
        if (op->call == NULL)
            continue;
        if (op->deadline_ms > now) {
            if (op->deadline_ms < next)
                next = op->deadline_ms;
            continue;
        }
        d->counters.commit_deadlines++;
        log_warn("commit %.12s: etcd has not answered by the caller's "
                 "deadline (%s)",
                 op->id, coord_etcd_error(d->coord));
        rpc_fail(op->call, RPC_UNAVAILABLE,
                 "etcd did not answer in time (%s): the decision for key "
                 "%.12s is not known to be committed; %s",
                 coord_etcd_error(d->coord), op->id,
                 op->how == COMMIT_ANSWER_DECIDE ? "ask again"
                                                 : "report again");
        op->call = NULL;
    }
    return next;
}

/* See commit.h. */
void commit_drain(struct daemon *d) {
    if (d->commits == NULL)
        return;
    while (d->commits->batches != NULL) {
        struct commit_batch_op *b = d->commits->batches;
        for (size_t i = 0; i < b->n; i++)
            if (!b->answered[i])
                b->answered[i] = 1, b->res[i].err = DETD_ECANCELLED;
        batch_finish(d, b);
    }
    while (d->commits->ops != NULL) {
        struct commit_op *op = d->commits->ops;
        d->commits->ops = op->next;
        if (op->call != NULL)
            rpc_fail(op->call, RPC_UNAVAILABLE, "daemon is shutting down");
        free(op);
    }
}
