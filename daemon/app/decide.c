/*
 * decide: the Decider methods and the engine's events (see decide.h).
 */
#define _GNU_SOURCE
#include "app/decide.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/random.h>
#include <unistd.h>

#include "app/benchsplit.h"
#include "app/commit.h"
#include "app/convert.h"
#include "provfmt.h"
#include "app/coord.h"
#include "app/daemon.h"
#include "app/imports.h"
#include "app/reply.h"
#include "app/fair.h"
#include "app/passend.h"
#include "app/passes.h"
#include "app/session.h"
#include "app/storeerr.h"
#include "app/validate.h"
#include "app/waiters.h"
#include "clock.h"
#include "detd/client.h"
#include "detd/error.h"
#include "io/listener.h"

/* ---- deadlines -------------------------------------------------------- */

#define ANSWER_MARGIN_MIN_MS 50
#define ANSWER_MARGIN_MAX_MS 2000

/* See decide.h. */
int64_t decide_answer_by(int64_t deadline, uint32_t wait_ms, int64_t now) {
    int64_t dl = deadline;
    /* Answer before the caller's deadline, with room for the answer to
     * travel: a fixed few ms lost the race about once in 19 calls. */
    if (dl != INT64_MAX) {
        int64_t margin = (dl - now) / 20;
        if (margin < ANSWER_MARGIN_MIN_MS)
            margin = ANSWER_MARGIN_MIN_MS;
        if (margin > ANSWER_MARGIN_MAX_MS)
            margin = ANSWER_MARGIN_MAX_MS;
        dl -= margin;
    }
    if (wait_ms > 0 && now + wait_ms < dl)
        dl = now + wait_ms;
    if (now + DAEMON_MAX_WAIT_MS < dl)
        dl = now + DAEMON_MAX_WAIT_MS;
    return dl;
}

static int64_t wait_deadline(const rpc_call *call, uint32_t wait_ms,
                             int64_t now) {
    return decide_answer_by(rpc_call_deadline_ms(call), wait_ms, now);
}

/* ---- claim policy ------------------------------------------------------ */

/* 63 random bits: below 2^63, so every reader writes the same number
 * (detctl's JSON integers, a signed or an unsigned log field, ctypes);
 * 0 (the engine draws again, then counts) if the kernel has none to give,
 * which getrandom() only does before Linux 3.17. */
static uint64_t claim_id_random(void *ctx) {
    (void)ctx;
    uint64_t v = 0;
    if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v))
        return 0;
    return v & (uint64_t)INT64_MAX;
}

/* See decide.h. */
int decide_engine_setup(struct daemon *d) {
    if (d->cfg->node_id != NULL && d->cfg->node_id[0] != '\0')
        snprintf(d->node, sizeof(d->node), "%s", d->cfg->node_id);
    else if (gethostname(d->node, sizeof(d->node) - 1) != 0)
        snprintf(d->node, sizeof(d->node), "unknown");
    d->node[sizeof(d->node) - 1] = '\0';
    struct engine_options o = {
        .pass_timeout_ms = d->cfg->pass_timeout_ms,
        .named_only = 1,
        .claim_id = claim_id_random,
        .claim_id_ctx = NULL,
    };
    return engine_set_options(d->engine, &o);
}

/* ---- sessions -------------------------------------------------------- */

static struct client_session *session_by_call(struct daemon *d, rpc_call *call,
                                              size_t *ret_index) {
    for (size_t i = 0; i < d->nsessions; i++) {
        if (d->sessions[i]->call == call) {
            *ret_index = i;
            return d->sessions[i];
        }
    }
    return NULL;
}

/* See decide.h. */
void decide_attach(struct daemon *d, struct rpc_event *ev) {
    Detd__V1__AttachRequest *req = (Detd__V1__AttachRequest *)ev->msg;
    if (d->draining) {
        rpc_fail(ev->call, RPC_UNAVAILABLE, "daemon is shutting down");
        goto free_msg;
    }
    if (validate_identity(ev->call, req->client) != 0) {
        d->counters.rejected++;
        goto free_msg;
    }
    if (d->nsessions >= d->cfg->max_clients) {
        d->counters.busy++;
        rpc_fail(ev->call, RPC_RESOURCE_EXHAUSTED,
                 "attached clients limit (%u) reached", d->cfg->max_clients);
        goto free_msg;
    }
    if (d->nsessions == d->capsessions) {
        size_t cap = d->capsessions ? d->capsessions * 2 : 64;
        struct client_session **s = realloc(d->sessions, cap * sizeof(*s));
        if (s == NULL)
            goto oom;
        d->sessions = s;
        d->capsessions = cap;
    }
    struct client_session *s = calloc(1, sizeof(*s));
    if (s == NULL)
        goto oom;
    s->id = ++d->next_session;
    s->call = ev->call; /* keeps the REQUEST reference until the end */
    s->req = req;
    s->attached_at_ms = clock_unix_ms();
    session_peer(ev->call, &s->peer_pid, &s->peer_uid);
    s->rank = req->client != NULL ? req->client->rank : -1;
    d->sessions[d->nsessions++] = s;
    engine_session_attach(d->engine, s->id, clock_mono_ms());
    const Detd__V1__ClientIdentity *c = req->client;
    log_debug("attach session %" PRIu64 ": host %s pid %d rank %d (peer pid "
              "%d uid %u on %s)",
              s->id, c ? c->host : "?", c ? c->pid : -1, c ? c->rank : -1,
              (int)s->peer_pid, (unsigned)s->peer_uid, d->node);
    Detd__V1__AttachEvent ae = DETD__V1__ATTACH_EVENT__INIT;
    ae.api_version = DETD_API_VERSION;
    ae.session_id = s->id;
    ae.daemon_version = (char *)DETD_VERSION;
    ae.namespace_ = (char *)d->cfg->ns;
    ae.lease_ms = d->cfg->lease_ms;
    static char feature_pass_on[] = "pass_on";
    char *features[] = {feature_pass_on};
    ae.n_features = sizeof features / sizeof features[0];
    ae.features = features;
    rpc_stream_send(ev->call, &ae.base);
    return;
oom:
    rpc_fail(ev->call, RPC_RESOURCE_EXHAUSTED, "out of memory");
free_msg:
    protobuf_c_message_free_unpacked(ev->msg, NULL);
}

static void session_end(struct daemon *d, size_t index) {
    struct client_session *s = d->sessions[index];
    d->sessions[index] = d->sessions[--d->nsessions];
    log_debug("session %" PRIu64 " ended", s->id);
    engine_session_end(d->engine, s->id, clock_mono_ms());
    if (d->coord != NULL)
        coord_sweep(d->coord);
    rpc_finish(s->call);
    protobuf_c_message_free_unpacked(&s->req->base, NULL);
    free(s);
}

/*
 * Who holds the live claim of id on this daemon, into *ret (share_index
 * 0): host "" when the claim is not held here or its session is gone.
 * The strings are borrowed from d's sessions until the loop moves on.
 */
static void holder_of(struct daemon *d, const char *id,
                      struct reply_holder *ret) {
    struct engine_claim_info ci;
    *ret = (struct reply_holder){.host = "", .rank = -1};
    if (!engine_claim_info(d->engine, id, &ci))
        return;
    const struct client_session *s = session_find(d, ci.session);
    if (s == NULL)
        return;
    const Detd__V1__ClientIdentity *c = s->req->client;
    ret->host =
        c != NULL && c->host != NULL && c->host[0] != '\0' ? c->host : d->node;
    ret->rank = s->rank;
    ret->pid = s->peer_pid != 0 ? s->peer_pid : (c != NULL ? c->pid : 0);
    int64_t held = clock_mono_ms() - ci.claimed_ms;
    ret->held_ms = held < 0            ? 0
                   : held > UINT32_MAX ? UINT32_MAX
                                       : (uint32_t)held;
}

/* ---- engine events ---------------------------------------------------- */

/* See decide.h. */
void decide_engine_event(void *ctx, const struct engine_event *ev) {
    struct daemon *d = ctx;
    struct pending *p = waiters_take(d->waiters, ev->token);
    if (p == NULL)
        return;
    switch (ev->kind) {
    case ENGINE_EV_DESIGNATE:
        if (d->coord != NULL) {
            /* The cluster claim decides whether it may time. */
            p->claim_id = ev->claim_id;
            p->takeover = ev->takeover;
            p->deadline_ms =
                wait_deadline(p->call, p->req->wait_ms, p->started_ms);
            coord_hold(d->coord, p);
            return;
        }
        log_info("claim %" PRIu64 " on %.12s passes to a waiter%s",
                 ev->claim_id, ev->id, ev->takeover ? " (takeover)" : "");
        reply_designated(d, p->call, p->id, ev->claim_id, ev->takeover,
                         pending_waited(p));
        break;
    case ENGINE_EV_TIMEOUT: {
        d->counters.wait_timeouts++;
        if (d->coord != NULL && coord_etcd_trouble(d->coord, p->id)) {
            rpc_fail(p->call, RPC_UNAVAILABLE,
                     "etcd unreachable (%s): detd never decides a new key "
                     "without etcd; key %.12s stays undecided (apply on_miss)",
                     coord_etcd_error(d->coord), p->id);
            break;
        }
        struct reply_holder h;
        holder_of(d, p->id, &h);
        reply_timeout(p->call, pending_waited(p), &h);
        break;
    }
    case ENGINE_EV_ABORT:
        /* Rejections go to decide_report's callback: this is the claim
         * of a pass that ended with only unattached callers waiting. */
        if (p->req->wait_only) {
            /* It asked never to time: no pass in progress any more. */
            d->counters.decide_misses++;
            reply_miss(p->call);
            break;
        }
        d->counters.unattached_refused++;
        rpc_fail(p->call, RPC_FAILED_PRECONDITION,
                 "the timing pass for key %.12s ended without a decision "
                 "and a caller that is not attached (no Attach stream) is "
                 "never designated to time it: attach, or apply on_miss",
                 p->id);
        break;
    case ENGINE_EV_RELEASE:
        /* Releases go to commit.c's callback (engine_decided_each), which
         * holds the row: one here means the engine was told "decided"
         * without one. */
        rpc_fail(p->call, RPC_INTERNAL, "decision released without row");
        break;
    }
    pending_free(p);
}

/* ---- Decide ----------------------------------------------------------- */

/*
 * The table step: the entry of the tables for vk that names one of its
 * live candidates (borrowed from *tr), or NULL for a miss (counted; a
 * stale entry is a miss too).
 */
static const struct tables_considered *
tables_find(struct daemon *d, const struct vkey *vk, struct tables_result *tr) {
    const Detd__V1__DecisionKey *k = vk->k;
    tables_lookup(d->tables, k->arch, k->kernel, k->key, k->table_key,
                  (const char *const *)k->candidates, k->n_candidates, tr);
    if (!tr->hit) {
        d->counters.table_misses++;
        if (tr->n_stale > 0) {
            d->counters.table_stale++;
            const struct tables_considered *c = &tr->considered[0];
            log_debug("table entry %s \"%s\" \"%s\" -> %s is stale for %s "
                      "key %s: not among the %zu candidates",
                      c->file, c->kernel, c->key, c->config, k->kernel, k->key,
                      k->n_candidates);
        }
        return NULL;
    }
    d->counters.table_hits++;
    return &tr->considered[tr->n_considered - 1];
}

/*
 * Commit config, the answer of a table or an imported entry for key vk,
 * as a decision of source (DETD_SOURCE_TABLE or _IMPORT; file: the table
 * file it came from) and answer call (a Decide) with the decision that
 * won. Waiters on a timing pass for the key get it too (commit.c). what
 * names the entry in the log line. Everything is borrowed.
 */
static void commit_entry(struct daemon *d, rpc_call *call,
                         const struct vkey *vk, const char *config, int source,
                         const char *file, const char *what) {
    const Detd__V1__DecisionKey *k = vk->k;
    struct decision row = {
        .id = (char *)vk->id,
        .ns = (char *)vk->ns,
        .arch = k->arch,
        .kernel = k->kernel,
        .key = k->key ? k->key : "",
        .candidates_fp = (char *)vk->fp,
        .n_candidates = (int32_t)k->n_candidates,
        .config = (char *)config,
        .source = source,
        .claim_id = 0,
        .by_host = "",
        .by_pid = 0,
        .by_rank = -1,
        .by_local_rank = -1,
        .by_device = "",
        .by_arch = "",
        .triton_version = "",
        .timings_json = "[]",
        .table_file = (char *)file,
        .decided_at_ms = clock_unix_ms(),
        .by_uid = -1,
        .by_claimed_pid = 0,
        .by_node = "",
    };
    commit_decision(d, call, COMMIT_ANSWER_DECIDE, &row, what,
                    wait_deadline(call, 0, clock_mono_ms()));
}

/* See decide.h. */
int decide_fast(struct daemon *d, struct rpc_event *ev) {
    if (ev->kind != RPC_EV_REQUEST || ev->method != RPC_DECIDE)
        return 0;
    Detd__V1__DecideRequest *req = (Detd__V1__DecideRequest *)ev->msg;
    struct vkey vk;
    uint8_t packed[HOTCACHE_MAX_ENTRY];
    size_t npacked;
    /* Quiet checks: anything wrong goes to the loop, which answers it. */
    if (validate_pass_call(d->cfg->ns, NULL, req->client, req->key, req->device,
                           &vk) != 0)
        return 0;
    if (!hotcache_get(d->hot, vk.id, packed, sizeof(packed), &npacked)) {
        /* A miss: the loop takes the checked key with the event rather
         * than checking and hashing it again (without memory, it does). */
        struct vkey *checked = malloc(sizeof(*checked));
        if (checked != NULL) {
            *checked = vk;
            ev->owner_data = checked;
        }
        return 0;
    }
    atomic_fetch_add(&d->fast_decide_hits, 1);
    rpc_reply_packed(ev->call, packed, npacked);
    protobuf_c_message_free_unpacked(ev->msg, NULL);
    return 1;
}

/* See decide.h. */
void decide_decide(struct daemon *d, struct rpc_event *ev) {
    Detd__V1__DecideRequest *req = (Detd__V1__DecideRequest *)ev->msg;
    struct vkey vk;
    struct decision row;
    d->counters.decide_calls++;
    /* The key as decide_fast() checked it on the rpc thread; else (an
     * invalid request, or no memory there) checked here, answering. */
    struct vkey *checked = ev->owner_data;
    ev->owner_data = NULL;
    if (checked != NULL) {
        vk = *checked;
        free(checked);
    } else if (validate_pass_call(d->cfg->ns, ev->call, req->client, req->key,
                                  req->device, &vk) != 0) {
        d->counters.rejected++;
        goto free_msg;
    }
    /* The hot cache was asked on the rpc thread (decide_fast()). */
    int rc = store_get_decision(d->store, vk.id, &row);
    if (rc == 0) {
        d->counters.decide_hits++;
        reply_decided_cached(d->hot, ev->call, &row);
        decision_clear(&row);
        goto free_msg;
    }
    if (rc != DETD_ENOTFOUND) {
        storeerr_reply(d, ev->call, rc);
        goto free_msg;
    }
    if (passend_answer_failed(d, ev->call, vk.id))
        goto free_msg;
    char what[512];
    struct imports_result ir;
    rc = imports_find(d, ev->call, vk.ns, vk.k, &ir);
    if (rc < 0)
        goto free_msg; /* answered */
    if (rc > 0) {
        const struct imports_entry *e = &ir.e[ir.n - 1];
        d->counters.decide_hits++;
        snprintf(what, sizeof what, "imported from %s \"%.200s\" \"%.200s\"",
                 e->file, e->kernel, e->key);
        commit_entry(d, ev->call, &vk, e->config, DETD_SOURCE_IMPORT, e->file,
                     what);
        imports_result_clear(&ir);
        goto free_msg;
    }
    struct tables_result tr;
    const struct tables_considered *te = tables_find(d, &vk, &tr);
    if (te != NULL) {
        d->counters.decide_hits++;
        snprintf(what, sizeof what, "%s \"%.200s\" \"%.200s\"", te->file,
                 te->kernel, te->key);
        commit_entry(d, ev->call, &vk, te->config, DETD_SOURCE_TABLE, te->file,
                     what);
        goto free_msg;
    }
    /* wait_only: a waiter that never times. The engine sees session 0,
     * which is never designated (a takeover passes over it); with no
     * pass in progress it is answered MISS below. */
    int wait_only = req->wait_only != 0;
    if (req->no_claim && !wait_only) {
        d->counters.decide_misses++;
        reply_miss(ev->call);
        goto free_msg;
    }
    struct client_session *s;
    if (session_of_call(d, ev->call, req->session_id, &s) != 0)
        goto free_msg;
    uint64_t session = s != NULL && !wait_only ? s->id : 0;
    uint32_t share;
    if (req->share && !wait_only &&
        engine_claim_share(d->engine, vk.id, session, &share)) {
        /* A waiter that helps the pass (compiles its share): answered
         * at once, it asks again to wait. */
        struct reply_holder h;
        holder_of(d, vk.id, &h);
        h.share_index = share;
        /* With bench, on a GPU of its own: it benchmarks a share too. */
        if (req->bench)
            h.bench =
                benchsplit_admit(d, vk.id, s, req->device, &h.share_index);
        d->counters.shares++;
        reply_timeout(ev->call, 0, &h);
        goto free_msg;
    }
    /* A pass restored for this process after a restart: its own. */
    uint64_t adopted;
    if (!wait_only && passes_adopt(d, ev->call, s, vk.id, &adopted)) {
        reply_designated(d, ev->call, vk.id, adopted, 0, 0);
        goto free_msg;
    }
    /* A key nobody claims would start a timing pass for this caller:
     * within its caps (a retry of its own claim is no new pass). */
    int fresh = !engine_claim_of(d->engine, vk.id, NULL);
    if (fresh && s != NULL && !wait_only) {
        int32_t ppid;
        uint32_t puid;
        session_peer(ev->call, &ppid, &puid);
        if (fair_new_claim(d, ev->call, s, puid) != 0)
            goto free_msg;
    }
    int64_t now = clock_mono_ms();
    uint64_t token = ++d->next_token;
    uint64_t claim = 0;
    rc = engine_ask(d->engine, vk.id, session, token,
                    wait_deadline(ev->call, req->wait_ms, now), now, &claim);
    if (rc == ENGINE_ASK_DESIGNATED && d->coord != NULL) {
        struct pending *p = pending_new(token, ev->call, req, vk.id, now);
        if (p == NULL) {
            engine_release(d->engine, vk.id, claim, now);
            rpc_fail(ev->call, RPC_RESOURCE_EXHAUSTED, "out of memory");
            goto free_msg;
        }
        p->claim_id = claim;
        p->deadline_ms = wait_deadline(ev->call, req->wait_ms, now);
        coord_hold(d->coord, p);
        return; /* the call and the request stay with p */
    }
    if (rc == ENGINE_ASK_DESIGNATED) {
        log_debug("designate session %" PRIu64 " claim %" PRIu64
                  " for %s %.12s",
                  session, claim, req->key->kernel, vk.id);
        reply_designated(d, ev->call, vk.id, claim, 0, 0);
        goto free_msg;
    }
    if (rc == ENGINE_ASK_WAIT) {
        struct pending *p = pending_new(token, ev->call, req, vk.id, now);
        if (p == NULL) {
            engine_cancel(d->engine, token);
            rpc_fail(ev->call, RPC_RESOURCE_EXHAUSTED, "out of memory");
            goto free_msg;
        }
        waiters_add(d->waiters, p);
        d->counters.waits++;
        return; /* the call and the request stay with the waiter */
    }
    if (rc == ENGINE_ASK_UNATTACHED && wait_only) {
        d->counters.decide_misses++;
        reply_miss(ev->call);
        goto free_msg;
    }
    if (rc == ENGINE_ASK_UNATTACHED) {
        d->counters.unattached_refused++;
        if (req->session_id != 0)
            rpc_fail(ev->call, RPC_FAILED_PRECONDITION,
                     "session %" PRIu64 " is not attached (it ended, or the "
                     "daemon restarted): attach again; only an attached "
                     "process is designated to time key %.12s",
                     req->session_id, vk.id);
        else
            rpc_fail(ev->call, RPC_FAILED_PRECONDITION,
                     "not attached (session_id 0): a caller without an "
                     "Attach stream is never designated to time a key, and "
                     "key %.12s has no timing pass in progress to wait for "
                     "(attach, or apply on_miss)",
                     vk.id);
        goto free_msg;
    }
    if (rc == DETD_EBUSY) {
        d->counters.busy++;
        rpc_fail(ev->call, RPC_RESOURCE_EXHAUSTED,
                 "waiters limit (%u) or claims limit (%u) reached",
                 d->cfg->max_waiters, d->cfg->max_claims);
    } else {
        rpc_fail(ev->call, RPC_INTERNAL, "engine: %s", detd_strerror(rc));
    }
free_msg:
    protobuf_c_message_free_unpacked(ev->msg, NULL);
}

/* ---- Report ----------------------------------------------------------- */

/*
 * Answer a report for claim on an undecided key vk that is not its live
 * claim, saying what happened: the key's pass is held by another claim
 * (it passed to another rank), or no pass is open for it at all (the
 * claim was never handed out, or it ended).
 */
static void stale_report(struct daemon *d, rpc_call *call,
                         const struct vkey *vk, uint64_t claim) {
    struct engine_claim_info ci;
    if (engine_claim_info(d->engine, vk->id, &ci) || d->coord != NULL)
        rpc_fail(call, RPC_FAILED_PRECONDITION,
                 "claim %" PRIu64 " is no longer held for key %.12s (it "
                 "passed to another rank, which holds its timing pass "
                 "now): ask again",
                 claim, vk->id);
    else
        rpc_fail(call, RPC_FAILED_PRECONDITION,
                 "claim %" PRIu64 " is unknown for key %.12s: no timing "
                 "pass is open for this key (the claim was never handed "
                 "out, or it ended: lease or pass deadline, its process "
                 "detached, a daemon restart); nothing was decided: ask "
                 "again",
                 claim, vk->id);
}

/* See decide.h. */
void decide_report(struct daemon *d, struct rpc_event *ev) {
    Detd__V1__ReportRequest *req = (Detd__V1__ReportRequest *)ev->msg;
    struct vkey vk;
    d->counters.reports++;
    if (validate_identity(ev->call, req->client) != 0 ||
        validate_key(d->cfg->ns, ev->call, req->key, &vk) != 0 ||
        validate_str(ev->call, "triton_version", req->triton_version,
                     DAEMON_MAX_IDENTITY_STRING, 0) != 0 ||
        validate_str(ev->call, "env_error", req->env_error, DAEMON_MAX_NOTE,
                     0) != 0) {
        d->counters.rejected++;
        goto free_msg;
    }
    char twhy[256];
    if (provfmt_check(req->timing, "timing", twhy, sizeof twhy) != 0) {
        rpc_fail(ev->call, RPC_INVALID_ARGUMENT, "%s", twhy);
        d->counters.rejected++;
        goto free_msg;
    }
    /* The claim belongs to the session that got it: the report must come
     * from that session, and from the process that attached it. */
    struct client_session *sess = session_find(d, req->session_id);
    int32_t ppid;
    uint32_t puid;
    session_peer(ev->call, &ppid, &puid);
    int er =
        engine_report_from(d->engine, vk.id, req->claim_id, req->session_id);
    if (er == ENGINE_REPORT_FOREIGN ||
        (er == ENGINE_REPORT_ACCEPT &&
         (sess == NULL || !session_is_caller(sess, ev->call)))) {
        d->counters.reports_refused++;
        log_warn("refused a report for claim %" PRIu64 " on key %.12s from pid "
                 "%d uid %u (session %" PRIu64 "): %s",
                 req->claim_id, vk.id, (int)ppid, (unsigned)puid,
                 req->session_id,
                 er == ENGINE_REPORT_FOREIGN ? "another session holds it"
                                             : "not the session's process");
        if (er == ENGINE_REPORT_FOREIGN)
            rpc_fail(ev->call, RPC_PERMISSION_DENIED,
                     "claim %" PRIu64 " on key %.12s belongs to another "
                     "session, not to session %" PRIu64 " (pid %d uid %u): "
                     "only the session that got a claim commits it",
                     req->claim_id, vk.id, req->session_id, (int)ppid,
                     (unsigned)puid);
        else
            rpc_fail(ev->call, RPC_PERMISSION_DENIED,
                     "session %" PRIu64 " was attached by pid %d uid %u, not "
                     "by this caller (pid %d uid %u): only the session that "
                     "got claim %" PRIu64 " commits it",
                     req->session_id, sess != NULL ? (int)sess->peer_pid : 0,
                     sess != NULL ? (unsigned)sess->peer_uid : 0u, (int)ppid,
                     (unsigned)puid, req->claim_id);
        goto free_msg;
    }
    struct decision existing;
    if (er != ENGINE_REPORT_ACCEPT) {
        /* Stale or repeated: the decision, if any, stands as it is. */
        int rc = store_get_decision(d->store, vk.id, &existing);
        if (rc == 0) {
            int repeat = existing.claim_id == req->claim_id;
            if (repeat)
                d->counters.reports_repeated++;
            else
                d->counters.reports_stale++;
            reply_report(ev->call, &existing, !repeat);
            decision_clear(&existing);
        } else if (rc != DETD_ENOTFOUND) {
            storeerr_reply(d, ev->call, rc);
        } else {
            d->counters.reports_stale++;
            stale_report(d, ev->call, &vk, req->claim_id);
        }
        goto free_msg;
    }

    /* The holder passes its claim on untimed: nothing else may come
     * with that. */
    if (req->pass_on) {
        const char *bad = req->n_timings > 0 ? "timings"
                          : req->env_error != NULL && req->env_error[0] != '\0'
                              ? "env_error"
                              : NULL;
        if (bad != NULL) {
            d->counters.rejected++;
            rpc_fail(ev->call, RPC_INVALID_ARGUMENT,
                     "pass_on: a claim passed on carries no %s (it was not "
                     "timed); the claim is still held",
                     bad);
            goto free_msg;
        }
        passend_pass_on(d, ev->call, &vk, req->claim_id, req->client, ppid);
        goto free_msg;
    }
    /* The holder's pass could not run in its environment: its claim is
     * given back, nothing stored. */
    if (req->env_error != NULL && req->env_error[0] != '\0') {
        passend_release_env(d, ev->call, &vk, req->claim_id, req->client, ppid,
                            req->env_error);
        goto free_msg;
    }
    /* The holder's own report: an unusable one ends its claim at once. */
    char why[DAEMON_MAX_NOTE + 512];
    if (req->n_timings == 0 || req->n_timings > DETD_MAX_CANDIDATES) {
        snprintf(why, sizeof why, "timings has %zu entries: must be 1 to %d",
                 req->n_timings, DETD_MAX_CANDIDATES);
        passend_reject(d, ev->call, &vk, req->claim_id, why);
        goto free_msg;
    }
    for (size_t i = 0; i < req->n_timings; i++) {
        const Detd__V1__CandidateTiming *t = req->timings[i];
        if (t->n_ms > DAEMON_MAX_TIMING_SAMPLES) {
            snprintf(why, sizeof why,
                     "timings[%zu].ms has %zu samples, over the limit of %d", i,
                     t->n_ms, DAEMON_MAX_TIMING_SAMPLES);
            passend_reject(d, ev->call, &vk, req->claim_id, why);
            goto free_msg;
        }
        size_t elen = t->error != NULL ? strlen(t->error) : 0;
        if (elen > DAEMON_MAX_NOTE) {
            snprintf(why, sizeof why,
                     "timings[%zu].error is %zu bytes, over the limit of %d "
                     "bytes",
                     i, elen, DAEMON_MAX_NOTE);
            passend_reject(d, ev->call, &vk, req->claim_id, why);
            goto free_msg;
        }
        char bad[480];
        if (!validate_pass_config(&vk, t->config, bad, sizeof bad)) {
            snprintf(why, sizeof why, "timings[%zu].config '%.200s' %s", i,
                     t->config, bad);
            passend_reject(d, ev->call, &vk, req->claim_id, why);
            goto free_msg;
        }
    }

    struct engine_timing *et = calloc(req->n_timings, sizeof(*et));
    if (et == NULL) {
        rpc_fail(ev->call, RPC_RESOURCE_EXHAUSTED, "out of memory");
        goto free_msg;
    }
    for (size_t i = 0; i < req->n_timings; i++) {
        et[i].config = req->timings[i]->config;
        et[i].ms = req->timings[i]->ms;
        et[i].n_ms = req->timings[i]->n_ms;
        et[i].failed = req->timings[i]->failed;
    }
    /* Every row was checked above; a search's rows are not candidates. */
    int w = engine_pick_winner(
        et, req->n_timings,
        vk.search < 0 ? (const char *const *)vk.k->candidates : NULL,
        vk.search < 0 ? vk.k->n_candidates : 0);
    free(et);
    if (w < 0) {
        passend_failed_reason(req, why, sizeof why);
        passend_record_failed(d, &vk, req->client, ppid, puid, why);
        passend_reject(d, ev->call, &vk, req->claim_id, why);
        goto free_msg;
    }
    /* What the row adds to the store: about the request's size. */
    if (fair_grow(d, ev->call, sess, puid,
                  protobuf_c_message_get_packed_size(ev->msg)) != 0)
        goto free_msg;
    char *tj = convert_timings_json(req->timings, req->n_timings);
    char *pj = req->timing != NULL ? provfmt_json(req->timing) : strdup("");
    if (tj == NULL || pj == NULL) {
        free(tj);
        free(pj);
        rpc_fail(ev->call, RPC_RESOURCE_EXHAUSTED, "out of memory");
        goto free_msg;
    }
    const Detd__V1__ClientIdentity *c = req->client;
    struct decision row = {
        .id = vk.id,
        .ns = (char *)vk.ns,
        .arch = vk.k->arch,
        .kernel = vk.k->kernel,
        .key = vk.k->key ? vk.k->key : "",
        .candidates_fp = vk.fp,
        .n_candidates = (int32_t)vk.k->n_candidates,
        .config = req->timings[w]->config,
        .source = DETD_SOURCE_TIMED,
        .claim_id = req->claim_id,
        .by_host = c ? c->host : "",
        /* What the kernel saw, not what the caller wrote. */
        .by_pid = ppid != 0 ? ppid : (c ? c->pid : 0),
        .by_rank = sess->rank,
        .by_local_rank = c ? c->local_rank : -1,
        .by_world_size = c ? c->world_size : 0,
        .by_job = c ? c->job : "",
        .by_device = c ? c->device_name : "",
        .by_arch = c ? c->arch : "",
        .triton_version = req->triton_version,
        .timings_json = tj,
        .table_file = "",
        .decided_at_ms = clock_unix_ms(),
        .by_uid = puid == UINT32_MAX ? -1 : (int64_t)puid,
        .by_claimed_pid = c ? c->pid : 0,
        .by_node = d->node,
        .timing_json = pj,
    };
    log_info("report for claim %" PRIu64 " on key %.12s from session %" PRIu64
             " (pid %d uid %u on %s, rank %d)",
             req->claim_id, vk.id, sess->id, (int)ppid, (unsigned)puid, d->node,
             (int)sess->rank);
    commit_decision(d, ev->call, COMMIT_ANSWER_REPORT, &row, NULL,
                    wait_deadline(ev->call, 0, clock_mono_ms()));
    free(tj);
    free(pj);
free_msg:
    protobuf_c_message_free_unpacked(ev->msg, NULL);
}

/* ---- Observe ---------------------------------------------------------- */

/* See decide.h. */
void decide_observe(struct daemon *d, struct rpc_event *ev) {
    Detd__V1__ObserveRequest *req = (Detd__V1__ObserveRequest *)ev->msg;
    struct vkey vk;
    char *differing = NULL;
    d->counters.observes++;
    if (validate_identity(ev->call, req->client) != 0 ||
        validate_key(d->cfg->ns, ev->call, req->key, &vk) != 0 ||
        validate_str(ev->call, "config", req->config, DAEMON_MAX_CONFIG,
                     !req->failed) != 0 ||
        validate_observe_extra(ev->call, req, &differing) != 0) {
        d->counters.rejected++;
        goto free_msg;
    }
    const Detd__V1__ClientIdentity *c = req->client;
    int32_t ppid;
    uint32_t puid;
    session_peer(ev->call, &ppid, &puid);
    /* The rank is the one the process attached with: a process attached
     * as rank 1 cannot observe as rank 0. */
    int32_t claimed_rank = c ? c->rank : -1;
    struct client_session *bound = NULL;
    size_t n_own = 0;
    for (size_t i = 0; i < d->nsessions; i++) {
        struct client_session *s = d->sessions[i];
        if (!session_is_caller(s, ev->call))
            continue;
        n_own++;
        if (s->rank == claimed_rank)
            bound = s;
    }
    if (n_own > 0 && bound == NULL) {
        d->counters.calls_refused_session++;
        rpc_fail(ev->call, RPC_PERMISSION_DENIED,
                 "rank %d is not the rank this process (pid %d uid %u) "
                 "attached with: an observation carries its session's rank",
                 (int)claimed_rank, (int)ppid, (unsigned)puid);
        goto free_msg;
    }
    if (fair_grow(d, ev->call, bound, puid,
                  protobuf_c_message_get_packed_size(ev->msg)) != 0)
        goto free_msg;
    struct store_observation o = {
        .id = vk.id,
        .ns = vk.ns,
        .arch = vk.k->arch,
        .kernel = vk.k->kernel,
        .key = vk.k->key ? vk.k->key : "",
        .config = req->config,
        .source = (int32_t)req->source,
        .governed = req->governed,
        .chaos = req->chaos,
        .host = c ? c->host : "",
        /* Keyed by the pid the kernel saw: one process cannot overwrite
         * another's row, whatever identity it writes. */
        .pid = ppid != 0 ? ppid : (c ? c->pid : 0),
        .rank = claimed_rank,
        .local_rank = c ? c->local_rank : -1,
        .device = c ? c->device_name : "",
        .at_ms = clock_unix_ms(),
        .claimed_pid = c ? c->pid : 0,
        .peer_uid = (int64_t)(puid == UINT32_MAX ? -1 : (int64_t)puid),
        /* With the pid, the process: a later one given the same pid
         * writes rows of its own. */
        .proc_start = listener_proc_start(ppid),
        .node = d->node,
        .job = c ? c->job : "",
        .failed = req->failed,
        .error = req->failed ? req->error : "",
        .audit = req->audit ? (int32_t)req->audit->status : STORE_AUDIT_NONE,
        .audit_differing = differing,
        .why = req->governed ? "" : req->why,
    };
    int rc = store_put_observations(d->store, &o, 1);
    if (rc != 0) {
        storeerr_reply(d, ev->call, rc);
        goto free_msg;
    }
    Detd__V1__ObserveResponse resp = DETD__V1__OBSERVE_RESPONSE__INIT;
    resp.api_version = DETD_API_VERSION;
    rpc_reply(ev->call, &resp.base);
free_msg:
    free(differing);
    protobuf_c_message_free_unpacked(ev->msg, NULL);
}

/* ---- end of calls ----------------------------------------------------- */

/* See decide.h. */
void decide_closed(struct daemon *d, struct rpc_event *ev) {
    if (ev->method == RPC_ATTACH) {
        size_t i;
        if (session_by_call(d, ev->call, &i) != NULL)
            session_end(d, i);
    } else if (ev->method == RPC_DECIDE) {
        struct pending *p = waiters_take_call(d->waiters, ev->call);
        if (p != NULL && p->held) {
            coord_held_cancelled(d->coord, p);
        } else if (p != NULL) {
            engine_cancel(d->engine, p->token);
            rpc_fail(p->call, RPC_CANCELLED, "cancelled by the client");
            pending_free(p);
        }
    }
    rpc_call_unref(ev->call);
}

/* See decide.h. */
void decide_drain(struct daemon *d) {
    struct pending *p;
    while ((p = waiters_take_any(d->waiters)) != NULL) {
        engine_cancel(d->engine, p->token);
        rpc_fail(p->call, RPC_UNAVAILABLE, "daemon is shutting down");
        pending_free(p);
    }
    while (d->nsessions > 0)
        session_end(d, d->nsessions - 1);
}
