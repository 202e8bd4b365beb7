/*
 * service: the methods of detd.v1.Decider, detd.v1.Admin and
 * grpc.health.v1.Health, answered on the loop thread.
 *
 * Resolution order for Decide (the local backend): the decision store,
 * then the tables (tables_answer below), then a claim from the
 * engine: the first asker times the candidates, the others wait here
 * until the decision is committed or the claim passes to them.
 */
#define _GNU_SOURCE
#include "app/daemon.h"
#include "clock.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "detd/client.h"
#include "detd/error.h"
#include "app/convert.h"
#include "core/keyid.h"
#include "app/imports.h"
#include "ops/votes.h"

#define SVC_API_VERSION DETD_API_VERSION

static const char *const source_names[8] = {
    "unspecified", "timed",    "table", "override",
    "import",      "fallback", "local", "reserved"};

/* ---- validation ------------------------------------------------------ */

/* A key after validation, with its fingerprint and decision id. */
struct vkey {
    const char *ns;
    const Detd__V1__DecisionKey *k;
    char fp[KEYID_HEX_LEN + 1];
    char id[KEYID_HEX_LEN + 1];
};

/* Answer call with an error; with call NULL (the rpc thread's fast path,
 * which leaves every error to the loop) say nothing. */
#define VFAIL(call, ...)                                                       \
    do {                                                                       \
        if ((call) != NULL)                                                    \
            rpc_fail((call), __VA_ARGS__);                                     \
    } while (0)

static int check_str(rpc_call *call, const char *what, const char *s,
                     size_t max, int required) {
    size_t n = s != NULL ? strlen(s) : 0;
    if (required && n == 0) {
        VFAIL(call, RPC_INVALID_ARGUMENT, "%s is required", what);
        return -1;
    }
    if (n > max) {
        VFAIL(call, RPC_INVALID_ARGUMENT,
              "%s is %zu bytes, over the limit of %zu bytes", what, n, max);
        return -1;
    }
    return 0;
}

static int check_identity(rpc_call *call, const Detd__V1__ClientIdentity *c) {
    if (c == NULL)
        return 0;
    const char *f[] = {c->host, c->device_name, c->arch, c->client_version,
                       c->job};
    const char *names[] = {"client.host", "client.device_name", "client.arch",
                           "client.client_version", "client.job"};
    for (int i = 0; i < 5; i++)
        if (check_str(call, names[i], f[i], DAEMON_MAX_IDENTITY_STRING, 0))
            return -1;
    return 0;
}

/* Validate a key and compute its id. On failure the call is answered. */
static int validate_key(struct daemon *d, rpc_call *call,
                        const Detd__V1__DecisionKey *k, struct vkey *ret) {
    if (k == NULL) {
        VFAIL(call, RPC_INVALID_ARGUMENT, "key is required");
        return -1;
    }
    if (check_str(call, "key.namespace", k->namespace_, DAEMON_MAX_NAMESPACE,
                  0) ||
        check_str(call, "key.arch", k->arch, DAEMON_MAX_ARCH, 1) ||
        check_str(call, "key.kernel", k->kernel, DAEMON_MAX_KERNEL, 1) ||
        check_str(call, "key.key", k->key, DETD_MAX_KEY_BYTES, 0) ||
        check_str(call, "key.table_key", k->table_key, DETD_MAX_KEY_BYTES, 0))
        return -1;
    if (k->n_candidates == 0) {
        VFAIL(call, RPC_INVALID_ARGUMENT,
              "key.candidates is empty: at least one config is required");
        return -1;
    }
    if (k->n_candidates > DETD_MAX_CANDIDATES) {
        VFAIL(call, RPC_INVALID_ARGUMENT,
              "key.candidates has %zu configs, over the limit of %d",
              k->n_candidates, DETD_MAX_CANDIDATES);
        return -1;
    }
    for (size_t i = 0; i < k->n_candidates; i++) {
        size_t n = strlen(k->candidates[i]);
        if (n == 0 || n > DAEMON_MAX_CONFIG) {
            VFAIL(call, RPC_INVALID_ARGUMENT,
                  "key.candidates[%zu] is %zu bytes: must be 1 to %d", i, n,
                  DAEMON_MAX_CONFIG);
            return -1;
        }
    }
    ret->k = k;
    ret->ns = k->namespace_ != NULL && k->namespace_[0] != '\0' ? k->namespace_
                                                                : d->cfg->ns;
    if (keyid_candidates_fp((const char *const *)k->candidates, k->n_candidates,
                            ret->fp) != 0) {
        VFAIL(call, RPC_RESOURCE_EXHAUSTED, "out of memory");
        return -1;
    }
    keyid_decision_id(ret->ns, k->arch, k->kernel, k->key ? k->key : "",
                      ret->fp, ret->id);
    return 0;
}

static int has_candidate(const Detd__V1__DecisionKey *k, const char *config) {
    for (size_t i = 0; i < k->n_candidates; i++)
        if (strcmp(k->candidates[i], config) == 0)
            return 1;
    return 0;
}

static void reply_decided(struct daemon *d, rpc_call *call,
                          const struct decision *r, uint32_t waited_ms) {
    struct convert_decision p;
    convert_decision_fill(r, &p, 0);
    Detd__V1__DecideResponse resp = DETD__V1__DECIDE_RESPONSE__INIT;
    resp.api_version = SVC_API_VERSION;
    resp.outcome = DETD__V1__OUTCOME__OUTCOME_DECIDED;
    resp.decision = &p.msg;
    resp.waited_ms = waited_ms;
    rpc_reply(call, &resp.base);
    convert_decision_clear(&p);
    (void)d;
}

/* Answer a store hit and keep the packed answer for the next asker. */
static void reply_decided_cached(struct daemon *d, rpc_call *call,
                                 const struct decision *r) {
    struct convert_decision p;
    convert_decision_fill(r, &p, 0);
    Detd__V1__DecideResponse resp = DETD__V1__DECIDE_RESPONSE__INIT;
    resp.api_version = SVC_API_VERSION;
    resp.outcome = DETD__V1__OUTCOME__OUTCOME_DECIDED;
    resp.decision = &p.msg;
    size_t n = protobuf_c_message_get_packed_size(&resp.base);
    uint8_t *buf = n <= HOTCACHE_MAX_ENTRY ? malloc(n) : NULL;
    if (buf != NULL) {
        protobuf_c_message_pack(&resp.base, buf);
        hotcache_put(d->hot, r->id, buf, n);
        rpc_reply_packed(call, buf, n);
        free(buf);
    } else {
        rpc_reply(call, &resp.base);
    }
    convert_decision_clear(&p);
}

static void reply_designated(struct daemon *d, rpc_call *call, const char *id,
                             uint64_t claim, int takeover, uint32_t waited_ms) {
    Detd__V1__Decision dec = DETD__V1__DECISION__INIT;
    dec.id = (char *)id;
    Detd__V1__DecideResponse resp = DETD__V1__DECIDE_RESPONSE__INIT;
    resp.api_version = SVC_API_VERSION;
    resp.outcome = DETD__V1__OUTCOME__OUTCOME_DESIGNATED;
    resp.decision = &dec;
    resp.claim_id = claim;
    resp.lease_ms = d->cfg->lease_ms;
    resp.takeover = takeover != 0;
    resp.waited_ms = waited_ms;
    d->counters.designations++;
    if (takeover)
        d->counters.takeovers++;
    rpc_reply(call, &resp.base);
}

/* ---- sessions -------------------------------------------------------- */

static struct session *session_find(struct daemon *d, uint64_t id) {
    for (size_t i = 0; i < d->nsessions; i++)
        if (d->sessions[i]->id == id)
            return d->sessions[i];
    return NULL;
}

static struct session *session_by_call(struct daemon *d, rpc_call *call,
                                       size_t *ret_index) {
    for (size_t i = 0; i < d->nsessions; i++) {
        if (d->sessions[i]->call == call) {
            *ret_index = i;
            return d->sessions[i];
        }
    }
    return NULL;
}

static void on_attach(struct daemon *d, struct rpc_event *ev) {
    Detd__V1__AttachRequest *req = (Detd__V1__AttachRequest *)ev->msg;
    if (d->draining) {
        rpc_fail(ev->call, RPC_UNAVAILABLE, "daemon is shutting down");
        goto free_msg;
    }
    if (check_identity(ev->call, req->client) != 0) {
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
        struct session **s = realloc(d->sessions, cap * sizeof(*s));
        if (s == NULL)
            goto oom;
        d->sessions = s;
        d->capsessions = cap;
    }
    struct session *s = calloc(1, sizeof(*s));
    if (s == NULL)
        goto oom;
    s->id = ++d->next_session;
    s->call = ev->call; /* keeps the REQUEST reference until the end */
    s->req = req;
    s->attached_at_ms = clock_unix_ms();
    d->sessions[d->nsessions++] = s;
    engine_session_attach(d->engine, s->id, clock_mono_ms());
    const Detd__V1__ClientIdentity *c = req->client;
    log_debug("attach session %" PRIu64 ": host %s pid %d rank %d", s->id,
              c ? c->host : "?", c ? c->pid : -1, c ? c->rank : -1);
    Detd__V1__AttachEvent ae = DETD__V1__ATTACH_EVENT__INIT;
    ae.api_version = SVC_API_VERSION;
    ae.session_id = s->id;
    ae.daemon_version = (char *)DETD_VERSION;
    ae.namespace_ = (char *)d->cfg->ns;
    ae.lease_ms = d->cfg->lease_ms;
    rpc_stream_send(ev->call, &ae.base);
    return;
oom:
    rpc_fail(ev->call, RPC_RESOURCE_EXHAUSTED, "out of memory");
free_msg:
    protobuf_c_message_free_unpacked(ev->msg, NULL);
}

static void session_end(struct daemon *d, size_t index) {
    struct session *s = d->sessions[index];
    d->sessions[index] = d->sessions[--d->nsessions];
    log_debug("session %" PRIu64 " ended", s->id);
    engine_session_end(d->engine, s->id, clock_mono_ms());
    if (d->cluster != NULL)
        coord_sweep(d);
    rpc_finish(s->call);
    protobuf_c_message_free_unpacked(&s->req->base, NULL);
    free(s);
}

/* ---- pending waiters ------------------------------------------------- */

static size_t pending_bucket(const struct daemon *d, uint64_t token) {
    return (size_t)((token * 0x9E3779B97F4A7C15ULL) >> 32) %
           d->npending_buckets;
}

static void pending_add(struct daemon *d, struct pending *p) {
    size_t b = pending_bucket(d, p->token);
    p->next = d->pending[b];
    d->pending[b] = p;
    d->npending++;
    /* A held call must learn when its client gives up. */
    rpc_watch_close(p->call);
}

static uint32_t waited(const struct pending *p);

static struct pending *pending_take(struct daemon *d, uint64_t token) {
    struct pending **pp = &d->pending[pending_bucket(d, token)];
    for (; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->token == token) {
            struct pending *p = *pp;
            *pp = p->next;
            d->npending--;
            /* Every held call leaves through here: answered, timed out,
             * cancelled or drained. */
            metrics_hist_observe(&d->wait_hist, (double)waited(p) / 1000.0);
            return p;
        }
    }
    return NULL;
}

static struct pending *pending_take_call(struct daemon *d, rpc_call *call) {
    for (size_t b = 0; b < d->npending_buckets; b++)
        for (struct pending *p = d->pending[b]; p != NULL; p = p->next)
            if (p->call == call)
                return pending_take(d, p->token);
    return NULL;
}

static void pending_free(struct pending *p) {
    protobuf_c_message_free_unpacked(&p->req->base, NULL);
    free(p);
}

static uint32_t waited(const struct pending *p) {
    int64_t w = clock_mono_ms() - p->started_ms;
    return w < 0 ? 0 : (uint32_t)w;
}

static int64_t wait_deadline(const rpc_call *call, uint32_t wait_ms,
                             int64_t now);

void service_engine_event(void *ctx, const struct engine_event *ev) {
    struct daemon *d = ctx;
    struct pending *p = pending_take(d, ev->token);
    if (p == NULL)
        return;
    switch (ev->kind) {
    case ENGINE_EV_DESIGNATE:
        if (d->cluster != NULL) {
            /* The cluster claim decides whether it may time. */
            p->claim_id = ev->claim_id;
            p->takeover = ev->takeover;
            p->deadline_ms =
                wait_deadline(p->call, p->req->wait_ms, p->started_ms);
            coord_hold(d, p);
            return;
        }
        log_info("claim %" PRIu64 " on %.12s passes to a waiter%s",
                 ev->claim_id, ev->id, ev->takeover ? " (takeover)" : "");
        reply_designated(d, p->call, p->id, ev->claim_id, ev->takeover,
                         waited(p));
        break;
    case ENGINE_EV_TIMEOUT: {
        d->counters.wait_timeouts++;
        if (d->cluster != NULL && coord_etcd_trouble(d, p->id)) {
            rpc_fail(p->call, RPC_UNAVAILABLE,
                     "etcd unreachable (%s): detd never decides a new key "
                     "without etcd; key %.12s stays undecided (apply on_miss)",
                     coord_etcd_error(d), p->id);
            break;
        }
        Detd__V1__DecideResponse resp = DETD__V1__DECIDE_RESPONSE__INIT;
        resp.api_version = SVC_API_VERSION;
        resp.outcome = DETD__V1__OUTCOME__OUTCOME_TIMEOUT;
        resp.waited_ms = waited(p);
        rpc_reply(p->call, &resp.base);
        break;
    }
    case ENGINE_EV_RELEASE:
        if (d->releasing != NULL)
            reply_decided(d, p->call, d->releasing, waited(p));
        else
            rpc_fail(p->call, RPC_INTERNAL, "decision released without row");
        break;
    }
    pending_free(p);
}

/* ---- Decide ---------------------------------------------------------- */

/*
 * The table step: a table entry for the key that names one of the live
 * candidates is committed as a decision (source table, first writer
 * wins: locally in the store, or through etcd like a report) and
 * answered. Returns 1 when the call was answered (or is being, through
 * etcd), 0 for a miss (counted; a stale entry is a miss too).
 */
static int tables_answer(struct daemon *d, rpc_call *call,
                         const struct vkey *vk) {
    const Detd__V1__DecisionKey *k = vk->k;
    struct tables_result tr;
    tables_lookup(d->tables, k->arch, k->kernel, k->key, k->table_key,
                  (const char *const *)k->candidates, k->n_candidates, &tr);
    if (!tr.hit) {
        d->counters.table_misses++;
        if (tr.n_stale > 0) {
            d->counters.table_stale++;
            const struct tables_considered *c = &tr.considered[0];
            log_debug("table entry %s \"%s\" \"%s\" -> %s is stale for %s "
                      "key %s: not among the %zu candidates",
                      c->file, c->kernel, c->key, c->config, k->kernel, k->key,
                      k->n_candidates);
        }
        return 0;
    }
    const struct tables_considered *e = &tr.considered[tr.n_considered - 1];
    d->counters.table_hits++;
    char what[512];
    snprintf(what, sizeof what, "%s \"%.200s\" \"%.200s\"", e->file, e->kernel,
             e->key);
    service_commit_entry(d, call, vk->ns, k, vk->fp, vk->id, e->config,
                         DETD_SOURCE_TABLE, e->file, what);
    return 1;
}

/* See daemon.h. */
void service_commit_entry(struct daemon *d, rpc_call *call, const char *ns,
                          const Detd__V1__DecisionKey *k, const char *fp,
                          const char *id, const char *config, int source,
                          const char *file, const char *what) {
    struct decision row = {
        .id = (char *)id,
        .ns = (char *)ns,
        .arch = k->arch,
        .kernel = k->kernel,
        .key = k->key ? k->key : "",
        .candidates_fp = (char *)fp,
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
    };
    if (d->cluster != NULL) {
        int rc = coord_commit_decide(d, call, &row,
                                     wait_deadline(call, 0, clock_mono_ms()));
        if (rc != 0)
            rpc_fail(call, RPC_INTERNAL, "commit: %s", detd_strerror(rc));
        return;
    }
    struct decision existing;
    int rc = store_put_decision(d->store, &row, &existing);
    const struct decision *won = &row;
    if (rc == DETD_EEXIST) {
        won = &existing;
    } else if (rc != 0) {
        rpc_fail(call, RPC_INTERNAL, "store: %s", store_errmsg(d->store));
        return;
    } else {
        d->counters.committed[source & 7]++;
        log_info("decided %s key %s -> %s (source %s, %s)", row.kernel, row.key,
                 row.config, source_names[source & 7], what);
    }
    /* Anyone waiting on a timing pass for this key gets the entry too. */
    d->releasing = won;
    engine_decided(d->engine, won->id);
    d->releasing = NULL;
    reply_decided_cached(d, call, won);
    if (won != &row)
        decision_clear(&existing);
}

static int64_t wait_deadline(const rpc_call *call, uint32_t wait_ms,
                             int64_t now) {
    int64_t dl = rpc_call_deadline_ms(call);
    /* Answer TIMEOUT a little before gRPC would cut the call off. */
    if (dl != INT64_MAX)
        dl -= 20;
    if (wait_ms > 0 && now + wait_ms < dl)
        dl = now + wait_ms;
    if (now + DAEMON_MAX_WAIT_MS < dl)
        dl = now + DAEMON_MAX_WAIT_MS;
    return dl;
}

/* See daemon.h. */
int service_decide_fast(struct daemon *d, struct rpc_event *ev) {
    if (ev->kind != RPC_EV_REQUEST || ev->method != RPC_DECIDE)
        return 0;
    Detd__V1__DecideRequest *req = (Detd__V1__DecideRequest *)ev->msg;
    struct vkey vk;
    uint8_t packed[HOTCACHE_MAX_ENTRY];
    size_t npacked;
    /* Quiet checks: anything wrong goes to the loop, which answers it. */
    if (check_identity(NULL, req->client) != 0 ||
        validate_key(d, NULL, req->key, &vk) != 0 ||
        !hotcache_get(d->hot, vk.id, packed, sizeof(packed), &npacked))
        return 0;
    atomic_fetch_add(&d->fast_decide_hits, 1);
    rpc_reply_packed(ev->call, packed, npacked);
    protobuf_c_message_free_unpacked(ev->msg, NULL);
    return 1;
}

static void on_decide(struct daemon *d, struct rpc_event *ev) {
    Detd__V1__DecideRequest *req = (Detd__V1__DecideRequest *)ev->msg;
    struct vkey vk;
    struct decision row;
    d->counters.decide_calls++;
    if (check_identity(ev->call, req->client) != 0 ||
        validate_key(d, ev->call, req->key, &vk) != 0) {
        d->counters.rejected++;
        goto free_msg;
    }
    /* The hot cache was asked on the rpc thread (service_decide_fast()). */
    int rc = store_get_decision(d->store, vk.id, &row);
    if (rc == 0) {
        d->counters.decide_hits++;
        reply_decided_cached(d, ev->call, &row);
        decision_clear(&row);
        goto free_msg;
    }
    if (rc != DETD_ENOTFOUND) {
        rpc_fail(ev->call, RPC_INTERNAL, "store: %s", store_errmsg(d->store));
        goto free_msg;
    }
    if (imports_answer(d, ev->call, vk.ns, vk.k, vk.fp, vk.id)) {
        d->counters.decide_hits++;
        goto free_msg;
    }
    if (tables_answer(d, ev->call, &vk)) {
        d->counters.decide_hits++;
        goto free_msg;
    }
    if (req->no_claim) {
        d->counters.decide_misses++;
        Detd__V1__DecideResponse resp = DETD__V1__DECIDE_RESPONSE__INIT;
        resp.api_version = SVC_API_VERSION;
        resp.outcome = DETD__V1__OUTCOME__OUTCOME_MISS;
        rpc_reply(ev->call, &resp.base);
        goto free_msg;
    }
    if (d->draining) {
        rpc_fail(ev->call, RPC_UNAVAILABLE, "daemon is shutting down");
        goto free_msg;
    }
    uint64_t session =
        session_find(d, req->session_id) != NULL ? req->session_id : 0;
    int64_t now = clock_mono_ms();
    uint64_t token = ++d->next_token;
    uint64_t claim = 0;
    rc = engine_ask(d->engine, vk.id, session, token,
                    wait_deadline(ev->call, req->wait_ms, now), now, &claim);
    if (rc == ENGINE_ASK_DESIGNATED && d->cluster != NULL) {
        struct pending *p = calloc(1, sizeof(*p));
        if (p == NULL) {
            engine_release(d->engine, vk.id, claim, now);
            rpc_fail(ev->call, RPC_RESOURCE_EXHAUSTED, "out of memory");
            goto free_msg;
        }
        p->token = token;
        p->call = ev->call;
        p->req = req;
        memcpy(p->id, vk.id, sizeof(p->id));
        p->started_ms = now;
        p->claim_id = claim;
        p->deadline_ms = wait_deadline(ev->call, req->wait_ms, now);
        coord_hold(d, p);
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
        struct pending *p = calloc(1, sizeof(*p));
        if (p == NULL) {
            engine_cancel(d->engine, token);
            rpc_fail(ev->call, RPC_RESOURCE_EXHAUSTED, "out of memory");
            goto free_msg;
        }
        p->token = token;
        p->call = ev->call;
        p->req = req;
        memcpy(p->id, vk.id, sizeof(p->id));
        p->started_ms = now;
        pending_add(d, p);
        d->counters.waits++;
        return; /* the call and the request stay with the waiter */
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

/* ---- Report ---------------------------------------------------------- */

/* See daemon.h. */
void service_log_decision(const struct decision *r, const char *origin,
                          const char *via) {
    const struct log_field f[] = {
        LOG_STR("id", r->id),
        LOG_STR("namespace", r->ns),
        LOG_STR("arch", r->arch),
        LOG_STR("kernel", r->kernel),
        LOG_STR("key", r->key),
        LOG_STR("config", r->config),
        LOG_STR("source", source_names[r->source & 7]),
        LOG_NUM("claim", (long long)r->claim_id),
        LOG_STR("host", r->by_host),
        LOG_NUM("pid", r->by_pid),
        LOG_NUM("rank", r->by_rank),
        LOG_STR("origin", origin),
        LOG_STR("via", via),
    };
    log_event(LOG_INFO, f, sizeof(f) / sizeof(f[0]), "decided");
}

static char *timings_json(const Detd__V1__ReportRequest *req) {
    json_t *arr = json_array();
    for (size_t i = 0; i < req->n_timings; i++) {
        const Detd__V1__CandidateTiming *t = req->timings[i];
        json_t *ms = json_array();
        for (size_t j = 0; j < t->n_ms; j++)
            json_array_append_new(ms, isfinite(t->ms[j]) ? json_real(t->ms[j])
                                                         : json_null());
        json_array_append_new(arr,
                              json_pack("{s:s, s:o, s:b}", "config", t->config,
                                        "ms", ms, "failed", t->failed));
    }
    char *s = json_dumps(arr, JSON_COMPACT);
    json_decref(arr);
    return s;
}

static void reply_report(rpc_call *call, const struct decision *r,
                         int superseded) {
    struct convert_decision p;
    convert_decision_fill(r, &p, 0);
    Detd__V1__ReportResponse resp = DETD__V1__REPORT_RESPONSE__INIT;
    resp.api_version = SVC_API_VERSION;
    resp.decision = &p.msg;
    resp.superseded = superseded != 0;
    rpc_reply(call, &resp.base);
    convert_decision_clear(&p);
}

/* Commit row (first writer wins), release waiters, answer the reporter. */
static void commit_and_release(struct daemon *d, rpc_call *call,
                               const struct decision *row) {
    struct decision existing;
    int rc = store_put_decision(d->store, row, &existing);
    const struct decision *won = row;
    if (rc == DETD_EEXIST) {
        won = &existing;
    } else if (rc != 0) {
        rpc_fail(call, RPC_INTERNAL, "store: %s", store_errmsg(d->store));
        return;
    } else {
        d->counters.committed[row->source & 7]++;
        service_log_decision(row, "local", "report");
    }
    d->releasing = won;
    size_t n = engine_decided(d->engine, won->id);
    d->releasing = NULL;
    log_debug("released %zu waiters on %.12s", n, won->id);
    reply_report(call, won, won != row);
    if (won != row)
        decision_clear(&existing);
}

static void on_report(struct daemon *d, struct rpc_event *ev) {
    Detd__V1__ReportRequest *req = (Detd__V1__ReportRequest *)ev->msg;
    struct vkey vk;
    d->counters.reports++;
    if (check_identity(ev->call, req->client) != 0 ||
        validate_key(d, ev->call, req->key, &vk) != 0 ||
        check_str(ev->call, "triton_version", req->triton_version,
                  DAEMON_MAX_IDENTITY_STRING, 0) != 0) {
        d->counters.rejected++;
        goto free_msg;
    }
    if (req->n_timings == 0 || req->n_timings > DETD_MAX_CANDIDATES) {
        d->counters.rejected++;
        rpc_fail(ev->call, RPC_INVALID_ARGUMENT,
                 "timings has %zu entries: must be 1 to %d", req->n_timings,
                 DETD_MAX_CANDIDATES);
        goto free_msg;
    }
    for (size_t i = 0; i < req->n_timings; i++) {
        const Detd__V1__CandidateTiming *t = req->timings[i];
        if (t->n_ms > DAEMON_MAX_TIMING_SAMPLES) {
            d->counters.rejected++;
            rpc_fail(ev->call, RPC_INVALID_ARGUMENT,
                     "timings[%zu].ms has %zu samples, over the limit of %d", i,
                     t->n_ms, DAEMON_MAX_TIMING_SAMPLES);
            goto free_msg;
        }
        if (!has_candidate(vk.k, t->config)) {
            d->counters.rejected++;
            rpc_fail(ev->call, RPC_INVALID_ARGUMENT,
                     "timings[%zu].config '%.200s' is not one of the "
                     "key's candidates",
                     i, t->config);
            goto free_msg;
        }
    }

    struct decision existing;
    if (engine_report(d->engine, vk.id, req->claim_id) !=
        ENGINE_REPORT_ACCEPT) {
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
        } else {
            d->counters.reports_stale++;
            rpc_fail(ev->call, RPC_FAILED_PRECONDITION,
                     "claim %" PRIu64 " is no longer held for this key "
                     "(it passed to another rank): ask again",
                     req->claim_id);
        }
        goto free_msg;
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
    int w = engine_pick_winner(et, req->n_timings,
                               (const char *const *)vk.k->candidates,
                               vk.k->n_candidates);
    free(et);
    if (w < 0) {
        d->counters.rejected++;
        rpc_fail(ev->call, RPC_INVALID_ARGUMENT,
                 "timings: no candidate has a valid timing (all failed, "
                 "empty or not finite)");
        goto free_msg;
    }
    const Detd__V1__ClientIdentity *c = req->client;
    char *tj = timings_json(req);
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
        .by_pid = c ? c->pid : 0,
        .by_rank = c ? c->rank : -1,
        .by_local_rank = c ? c->local_rank : -1,
        .by_device = c ? c->device_name : "",
        .by_arch = c ? c->arch : "",
        .triton_version = req->triton_version,
        .timings_json = tj,
        .table_file = "",
        .decided_at_ms = clock_unix_ms(),
    };
    if (d->cluster != NULL) {
        /* etcd first; the reply follows the commit's result. */
        int crc = coord_commit(d, ev->call, &row,
                               wait_deadline(ev->call, 0, clock_mono_ms()));
        if (crc != 0)
            rpc_fail(ev->call, RPC_INTERNAL, "commit: %s", detd_strerror(crc));
    } else {
        commit_and_release(d, ev->call, &row);
    }
    free(tj);
free_msg:
    protobuf_c_message_free_unpacked(ev->msg, NULL);
}

/* ---- Observe --------------------------------------------------------- */

static void on_observe(struct daemon *d, struct rpc_event *ev) {
    Detd__V1__ObserveRequest *req = (Detd__V1__ObserveRequest *)ev->msg;
    struct vkey vk;
    d->counters.observes++;
    if (check_identity(ev->call, req->client) != 0 ||
        validate_key(d, ev->call, req->key, &vk) != 0 ||
        check_str(ev->call, "config", req->config, DAEMON_MAX_CONFIG, 1) != 0) {
        d->counters.rejected++;
        goto free_msg;
    }
    const Detd__V1__ClientIdentity *c = req->client;
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
        .pid = c ? c->pid : 0,
        .rank = c ? c->rank : -1,
        .local_rank = c ? c->local_rank : -1,
        .device = c ? c->device_name : "",
        .at_ms = clock_unix_ms(),
    };
    if (store_put_observations(d->store, &o, 1) != 0) {
        rpc_fail(ev->call, RPC_INTERNAL, "store: %s", store_errmsg(d->store));
        goto free_msg;
    }
    Detd__V1__ObserveResponse resp = DETD__V1__OBSERVE_RESPONSE__INIT;
    resp.api_version = SVC_API_VERSION;
    rpc_reply(ev->call, &resp.base);
free_msg:
    protobuf_c_message_free_unpacked(ev->msg, NULL);
}

/* ---- dispatch -------------------------------------------------------- */

static void on_closed(struct daemon *d, struct rpc_event *ev) {
    if (ev->method == RPC_ATTACH) {
        size_t i;
        if (session_by_call(d, ev->call, &i) != NULL)
            session_end(d, i);
    } else if (ev->method == RPC_DECIDE) {
        struct pending *p = pending_take_call(d, ev->call);
        if (p != NULL && p->held) {
            coord_held_cancelled(d, p);
        } else if (p != NULL) {
            engine_cancel(d->engine, p->token);
            rpc_fail(p->call, RPC_CANCELLED, "cancelled by the client");
            pending_free(p);
        }
    }
    rpc_call_unref(ev->call);
}

void service_handle(struct daemon *d, struct rpc_event *ev) {
    if (ev->kind == RPC_EV_CLOSED) {
        on_closed(d, ev);
        return;
    }
    if (ev->kind == RPC_EV_STREAM) {
        /* Heartbeats: being attached is what keeps leases alive. */
        protobuf_c_message_free_unpacked(ev->msg, NULL);
        rpc_call_unref(ev->call);
        return;
    }
    switch (ev->method) {
    case RPC_ATTACH:
        on_attach(d, ev);
        break;
    case RPC_DECIDE:
        on_decide(d, ev);
        break;
    case RPC_REPORT:
        on_report(d, ev);
        break;
    case RPC_OBSERVE:
        on_observe(d, ev);
        break;
    case RPC_STATUS:
        admin_status(d, ev);
        break;
    case RPC_LIST_DECISIONS:
        admin_list(d, ev);
        break;
    case RPC_VERIFY:
        admin_verify(d, ev);
        break;
    case RPC_RESET:
        admin_reset(d, ev);
        break;
    case RPC_HEALTH:
        admin_health(d, ev);
        break;
    case RPC_LIST_OBSERVATIONS:
        admin_list_observations(d, ev);
        break;
    case RPC_RELOAD:
        tableadmin_reload_rpc(d, ev);
        break;
    case RPC_EXPLAIN:
        tableadmin_explain(d, ev);
        break;
    case RPC_VOTE:
        votes_on_vote(d, ev);
        break;
    case RPC_LIST_VOTES:
        votes_list(d, ev);
        break;
    case RPC_IMPORT_TABLE:
        imports_on_import(d, ev);
        break;
    case RPC_EXPORT_DECISIONS:
        votes_export_decisions(d, ev);
        break;
    default:
        protobuf_c_message_free_unpacked(ev->msg, NULL);
        rpc_fail(ev->call, RPC_UNIMPLEMENTED, "unknown method");
        break;
    }
}

void service_drain(struct daemon *d) {
    coord_drain(d); /* etcd backend state; nothing for the local one */
    admin_verify_drain(d);
    for (size_t b = 0; b < d->npending_buckets; b++) {
        while (d->pending[b] != NULL) {
            struct pending *p = pending_take(d, d->pending[b]->token);
            engine_cancel(d->engine, p->token);
            rpc_fail(p->call, RPC_UNAVAILABLE, "daemon is shutting down");
            pending_free(p);
        }
    }
    while (d->nsessions > 0)
        session_end(d, d->nsessions - 1);
}

void service_free(struct daemon *d) {
    service_drain(d);
    free(d->sessions);
    d->sessions = NULL;
}

/* ---- shared with coord.c ---- */

void service_pending_add(struct daemon *d, struct pending *p) {
    pending_add(d, p);
}

struct pending *service_pending_take(struct daemon *d, uint64_t token) {
    return pending_take(d, token);
}

void service_pending_free(struct pending *p) {
    pending_free(p);
}

uint32_t service_waited(const struct pending *p) {
    return waited(p);
}

void service_reply_decided(struct daemon *d, rpc_call *call,
                           const struct decision *r, uint32_t waited_ms) {
    reply_decided(d, call, r, waited_ms);
}

void service_reply_designated(struct daemon *d, rpc_call *call, const char *id,
                              uint64_t claim, int takeover,
                              uint32_t waited_ms) {
    reply_designated(d, call, id, claim, takeover, waited_ms);
}

void service_reply_report(rpc_call *call, const struct decision *r,
                          int superseded) {
    reply_report(call, r, superseded);
}

/* ---- shared with votes.c ---- */

int service_check_identity(rpc_call *call, const Detd__V1__ClientIdentity *c) {
    return check_identity(call, c);
}

int service_check_str(rpc_call *call, const char *what, const char *s,
                      size_t max, int required) {
    return check_str(call, what, s, max, required);
}

int service_validate_key(struct daemon *d, rpc_call *call,
                         const Detd__V1__DecisionKey *k, const char **ret_ns,
                         char ret_fp[65], char ret_id[65]) {
    struct vkey vk;
    if (validate_key(d, call, k, &vk) != 0)
        return -1;
    *ret_ns = vk.ns;
    memcpy(ret_fp, vk.fp, sizeof vk.fp);
    memcpy(ret_id, vk.id, sizeof vk.id);
    return 0;
}

int service_has_candidate(const Detd__V1__DecisionKey *k, const char *config) {
    return has_candidate(k, config);
}
