/*
 * admin: the methods of detd.v1.Admin and grpc.health.v1.Health, answered
 * on the loop thread: status, decision listing, cross-rank verify, reset.
 */
#define _GNU_SOURCE
#include "ops/admin.h"
#include "clock.h"
#include "strfmt.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/storeerr.h"
#include "cluster/cluster.h"
#include "app/convert.h"
#include "app/coord.h"
#include "detd/client.h"
#include "detd/error.h"
#include "health.pb-c.h"
#include "io/listener.h"
#include "app/imports.h"
#include "app/validate.h"
#include "core/keyid.h"
#include "ops/tableadmin.h"
#include "ops/votes.h"

#define SVC_API_VERSION DETD_API_VERSION

/* Status's page of registered nodes: 256 when the client does not say (the
 * whole list before it was paged, so an older detctl sees what it saw),
 * at most 1,000 (about 440 bytes each at most: well within
 * DETD_MAX_MESSAGE_BYTES with the rest of the status). */
#define ADMIN_NODES_PAGE 256
#define ADMIN_NODES_PAGE_MAX 1000
/* A nodes page token: this prefix, then the last node id of the page. */
#define ADMIN_NODES_TOKEN "n1:"

/* One page of Status's nodes, freed by nodes_page_clear(). */
struct nodes_page {
    struct cluster_node *nodes;
    Detd__V1__ClusterNode *pb;
    Detd__V1__ClusterNode **pbp;
    char *next;
};

static void nodes_page_clear(struct nodes_page *p) {
    free(p->nodes);
    free(p->pb);
    free(p->pbp);
    free(p->next);
}

/* Fill resp's nodes, nodes_next_page_token and nodes_total with the page
 * req asks for (nothing without a cluster). 0, or -1 with the call
 * failed. */
static int nodes_page_fill(struct daemon *d, const Detd__V1__StatusRequest *req,
                           Detd__V1__StatusResponse *resp, rpc_call *call,
                           struct nodes_page *p) {
    const char *tok =
        req->nodes_page_token != NULL ? req->nodes_page_token : "";
    const char *after = "";
    size_t tl = strlen(ADMIN_NODES_TOKEN);
    if (tok[0] != '\0') {
        if (strncmp(tok, ADMIN_NODES_TOKEN, tl) != 0 ||
            strlen(tok) > tl + CLUSTER_MAX_NODE_ID) {
            rpc_fail(call, RPC_INVALID_ARGUMENT,
                     "nodes_page_token '%.64s' is not one this daemon gives",
                     tok);
            return -1;
        }
        after = tok + tl;
    }
    if (d->cluster == NULL)
        return 0;
    size_t max = req->nodes_page_size == 0 ? ADMIN_NODES_PAGE
                 : req->nodes_page_size > ADMIN_NODES_PAGE_MAX
                     ? ADMIN_NODES_PAGE_MAX
                     : req->nodes_page_size;
    p->nodes = malloc(max * sizeof(*p->nodes));
    p->pb = calloc(max, sizeof(*p->pb));
    p->pbp = calloc(max, sizeof(*p->pbp));
    if (p->nodes == NULL || p->pb == NULL || p->pbp == NULL) {
        rpc_fail(call, RPC_RESOURCE_EXHAUSTED, "out of memory");
        return -1;
    }
    size_t n = 0, total = 0;
    int more = 0;
    cluster_nodes_page(d->cluster, after, max, p->nodes, &n, &total, &more);
    for (size_t i = 0; i < n; i++) {
        const struct cluster_node *nd = &p->nodes[i];
        Detd__V1__ClusterNode *x = &p->pb[i];
        detd__v1__cluster_node__init(x);
        x->node_id = (char *)nd->node_id;
        x->listen = (char *)nd->listen;
        x->pid = (uint32_t)nd->pid;
        x->started_at_ms = nd->started_at_ms;
        x->version = (char *)nd->version;
        x->socket = (char *)nd->socket;
        p->pbp[i] = x;
    }
    if (more && n > 0 &&
        (p->next = strfmt("%s%s", ADMIN_NODES_TOKEN,
                          p->nodes[n - 1].node_id)) == NULL) {
        rpc_fail(call, RPC_RESOURCE_EXHAUSTED, "out of memory");
        return -1;
    }
    resp->nodes = p->pbp;
    resp->n_nodes = n;
    resp->nodes_next_page_token = p->next != NULL ? p->next : "";
    resp->nodes_total = total;
    return 0;
}

/* A Status call with nodes_only: a later page of the nodes. */
static void status_nodes_only(struct daemon *d, struct rpc_event *ev) {
    const Detd__V1__StatusRequest *req =
        (const Detd__V1__StatusRequest *)ev->msg;
    Detd__V1__StatusResponse resp = DETD__V1__STATUS_RESPONSE__INIT;
    struct nodes_page np = {0};
    struct cluster_status *cs = NULL;
    resp.api_version = SVC_API_VERSION;
    if (nodes_page_fill(d, req, &resp, ev->call, &np) != 0)
        goto out;
    if (d->cluster != NULL) {
        if ((cs = malloc(sizeof(*cs))) == NULL) {
            rpc_fail(ev->call, RPC_RESOURCE_EXHAUSTED, "out of memory");
            goto out;
        }
        cluster_get_status(d->cluster, cs);
        resp.nodes_error = cs->nodes_error;
    }
    rpc_reply(ev->call, &resp.base);
out:
    free(cs);
    nodes_page_clear(&np);
    protobuf_c_message_free_unpacked(ev->msg, NULL);
}

void admin_status(struct daemon *d, struct rpc_event *ev) {
    const Detd__V1__StatusRequest *req =
        (const Detd__V1__StatusRequest *)ev->msg;
    if (req->nodes_only) {
        status_nodes_only(d, ev);
        return;
    }
    Detd__V1__StatusResponse resp = DETD__V1__STATUS_RESPONSE__INIT;
    struct nodes_page np = {0};
    uint64_t total = 0, by_source[8] = {0};
    struct engine_stats es;
    engine_get_stats(d->engine, &es);
    store_count_decisions(d->store, d->cfg->ns, &total, by_source);
    uint64_t votes = 0;
    store_count_votes(d->store, NULL, &votes);
    uint64_t imported = 0;
    store_count_imports(d->store, d->cfg->ns, &imported);
    resp.api_version = SVC_API_VERSION;
    resp.version = (char *)DETD_VERSION;
    resp.namespace_ = (char *)d->cfg->ns;
    resp.backend = d->cluster != NULL ? "etcd" : "local";
    resp.uptime_ms = clock_mono_ms() - d->started_mono_ms;
    resp.decisions = total;
    resp.open_claims = es.claims;
    resp.waiters = es.waiters;
    resp.store_path = d->store_path;
    resp.gpu_probe = d->gpus.state;
    resp.pid = (uint32_t)getpid();
    resp.tables = (char **)d->cfg->tables;
    resp.n_tables = d->cfg->n_tables;

    struct conns_stats conn_st;
    struct listener_stats ls;
    rpc_server_conn_stats(d->rpc, &conn_st);
    listener_get_stats(d->listener, &ls);

    size_t nc = d->nsessions;
    Detd__V1__ClientInfo *ci = calloc(nc ? nc : 1, sizeof(*ci));
    Detd__V1__ClientInfo **cip = calloc(nc ? nc : 1, sizeof(*cip));
    size_t ng = d->gpus.n;
    Detd__V1__GpuInfo *gi = calloc(ng ? ng : 1, sizeof(*gi));
    Detd__V1__GpuInfo **gip = calloc(ng ? ng : 1, sizeof(*gip));
    struct {
        const char *name;
        uint64_t value;
    } counters[] = {
        {"decisions_timed", by_source[DETD_SOURCE_TIMED]},
        {"decisions_table", by_source[DETD_SOURCE_TABLE]},
        {"decisions_import", by_source[DETD_SOURCE_IMPORT]},
        {"decide_calls",
         d->counters.decide_calls + atomic_load(&d->fast_decide_hits)},
        {"decide_hits",
         d->counters.decide_hits + atomic_load(&d->fast_decide_hits)},
        {"decide_misses", d->counters.decide_misses},
        {"timing_passes", d->counters.designations},
        {"takeovers", d->counters.takeovers},
        {"waits", d->counters.waits},
        {"wait_timeouts", d->counters.wait_timeouts},
        {"pass_shares", d->counters.shares},
        {"bench_splits", d->counters.bench_splits},
        {"bench_helpers", d->counters.bench_helpers},
        {"bench_given", d->counters.bench_given},
        {"bench_reclaimed", d->counters.bench_reclaimed},
        {"reports", d->counters.reports},
        {"reports_stale", d->counters.reports_stale},
        {"reports_repeated", d->counters.reports_repeated},
        {"passes_env_released", d->counters.passes_env_released},
        {"passes_passed_on", d->counters.passes_passed_on},
        {"reports_refused", d->counters.reports_refused},
        {"reports_rejected", d->counters.reports_rejected},
        {"calls_refused_session", d->counters.calls_refused_session},
        {"unattached_refused", d->counters.unattached_refused},
        {"pass_timeouts", es.pass_timeouts},
        {"commit_deadlines", d->counters.commit_deadlines},
        {"observes", d->counters.observes},
        {"lock_skipped", d->counters.lock_skipped},
        {"lock_not_committed", d->counters.lock_not_committed},
        {"lock_registry_late", d->counters.lock_registry_late},
        {"votes", votes},
        {"votes_max", d->cfg->max_votes},
        {"vote_calls", d->counters.vote_calls},
        {"votes_refused_full", d->counters.votes_refused_full},
        {"store_disk_full", d->counters.store_disk_full},
        {"store_disk_errors", d->counters.store_disk_errors},
        {"refused_max_claims_per_session",
         d->counters.fair_refused[FAIR_CLAIMS_SESSION]},
        {"refused_max_claims_per_uid",
         d->counters.fair_refused[FAIR_CLAIMS_UID]},
        {"refused_max_new_keys_per_session",
         d->counters.fair_refused[FAIR_KEYS_SESSION]},
        {"refused_max_new_keys_per_uid",
         d->counters.fair_refused[FAIR_KEYS_UID]},
        {"refused_max_store_kib_per_session",
         d->counters.fair_refused[FAIR_GROWTH_SESSION]},
        {"refused_max_store_kib_per_uid",
         d->counters.fair_refused[FAIR_GROWTH_UID]},
        {"rejected", d->counters.rejected},
        {"busy", d->counters.busy},
        {"refused_allow_list", atomic_load(&d->refused[ACCESS_DENIED_ALLOW])},
        {"refused_admin_list", atomic_load(&d->refused[ACCESS_DENIED_ADMIN])},
        {"refused_no_credentials",
         atomic_load(&d->refused[ACCESS_DENIED_NOCRED])},
        {"refused_connections", d->refused_connections},
        {"connections_open", conn_st.open},
        {"connections_refused_max", conn_st.refused_max},
        {"connections_refused_uid", conn_st.refused_uid},
        {"connections_refused_no_fd", conn_st.refused_no_fd + ls.dropped},
        {"connections_idle_closed", conn_st.idle_closed},
        {"accept_fd_exhausted", ls.fd_exhausted},
        {"table_hits", d->counters.table_hits},
        {"table_misses", d->counters.table_misses},
        {"table_stale", d->counters.table_stale},
        {"table_reloads", d->counters.table_reloads},
        {"imported_entries", imported},
        {"import_hits", d->counters.import_hits},
        {"import_misses", d->counters.import_misses},
        {"import_stale", d->counters.import_stale},
    };
    enum { NCOUNTERS = sizeof(counters) / sizeof(counters[0]) };
    Detd__V1__Counter cn[NCOUNTERS];
    Detd__V1__Counter *cnp[NCOUNTERS];
    struct cluster_status *cs = NULL;
    struct tableadmin_status ts = {0};
    /* Scratch for the etcd part of the answer (loop thread only). */
    static Detd__V1__EtcdEndpoint eps[ETCD_MAX_ENDPOINTS];
    static Detd__V1__EtcdEndpoint *epp[ETCD_MAX_ENDPOINTS];
    if (ci == NULL || cip == NULL || gi == NULL || gip == NULL) {
        rpc_fail(ev->call, RPC_RESOURCE_EXHAUSTED, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < nc; i++) {
        const struct client_session *s = d->sessions[i];
        detd__v1__client_info__init(&ci[i]);
        ci[i].client = s->req->client;
        ci[i].session_id = s->id;
        ci[i].attached_at_ms = s->attached_at_ms;
        ci[i].claims = engine_session_claims(d->engine, s->id);
        cip[i] = &ci[i];
    }
    resp.clients = cip;
    resp.n_clients = nc;
    for (size_t i = 0; i < ng; i++) {
        const struct gpu_info *g = &d->gpus.gpus[i];
        detd__v1__gpu_info__init(&gi[i]);
        gi[i].index = g->index;
        gi[i].name = (char *)g->name;
        gi[i].arch = (char *)g->arch;
        gi[i].uuid = (char *)g->uuid;
        gi[i].sm_count = g->sm_count;
        gi[i].memory_bytes = g->memory_bytes;
        gip[i] = &gi[i];
    }
    resp.gpus = gip;
    resp.n_gpus = ng;
    for (size_t i = 0; i < NCOUNTERS; i++) {
        detd__v1__counter__init(&cn[i]);
        cn[i].name = (char *)counters[i].name;
        cn[i].value = counters[i].value;
        cnp[i] = &cn[i];
    }
    resp.counters = cnp;
    resp.n_counters = NCOUNTERS;
    resp.listen = (char *)(d->cfg->listen != NULL ? d->cfg->listen : "");
    if (tableadmin_status_fill(d, &ts) != 0) {
        rpc_fail(ev->call, RPC_RESOURCE_EXHAUSTED, "out of memory");
        goto out;
    }
    resp.table_files = ts.filep;
    resp.n_table_files = ts.nfiles;
    resp.table_errors = ts.errorp;
    resp.n_table_errors = ts.nerrors;
    if (d->cluster != NULL) {
        cs = malloc(sizeof(*cs));
        if (cs == NULL) {
            rpc_fail(ev->call, RPC_RESOURCE_EXHAUSTED, "out of memory");
            goto out;
        }
        cluster_get_status(d->cluster, cs);
        resp.node_id = cs->node_id;
        resp.last_revision = coord_revision(d->coord);
        resp.etcd_connected = cs->connected;
        resp.etcd_error = cs->connected ? "" : cs->last_error;
        for (size_t i = 0; i < cs->n_members; i++) {
            const struct etcd_member_status *m = &cs->members[i];
            Detd__V1__EtcdEndpoint *x = &eps[i];
            detd__v1__etcd_endpoint__init(x);
            x->url = (char *)m->endpoint;
            x->healthy = m->err == 0 && m->leader_id != 0;
            x->error = (char *)(m->err != 0         ? detd_strerror(m->err)
                                : m->leader_id == 0 ? "no leader"
                                                    : "");
            x->leader = m->err == 0 && m->member_id == m->leader_id;
            x->version = (char *)m->version;
            x->member_id = m->member_id;
            x->db_size = m->db_size;
            x->raft_term = m->raft_term;
            epp[i] = x;
        }
        resp.etcd_endpoints = epp;
        resp.n_etcd_endpoints = cs->n_members;
        resp.nodes_error = cs->nodes_error;
    }
    if (nodes_page_fill(d, req, &resp, ev->call, &np) != 0)
        goto out;
    rpc_reply(ev->call, &resp.base);
out:
    nodes_page_clear(&np);
    tableadmin_status_clear(&ts);
    free(cs);
    free(ci);
    free(cip);
    free(gi);
    free(gip);
    protobuf_c_message_free_unpacked(ev->msg, NULL);
}

struct list_ctx {
    Detd__V1__Decision **items;
    struct convert_decision *pbs;
    struct decision *rows;
    size_t n, cap;
    size_t bytes;
    int full; /* stopped at the cap or the page's bytes */
    int oom;
};

static int list_cb(void *ctx, const struct decision *r) {
    struct list_ctx *l = ctx;
    if (l->n == l->cap) {
        l->full = 1;
        return 1;
    }
    struct decision *c = &l->rows[l->n];
    if (decision_copy(r, 1, c) != 0) {
        l->oom = 1;
        return 1;
    }
    convert_decision_fill(c, &l->pbs[l->n], 1);
    /* An answer the client can take: at most DAEMON_MAX_PAGE_BYTES of
     * rows (a decision with its timings can be kilobytes). */
    size_t sz = protobuf_c_message_get_packed_size(&l->pbs[l->n].msg.base) + 16;
    if (l->n > 0 && l->bytes + sz > DAEMON_MAX_PAGE_BYTES) {
        convert_decision_clear(&l->pbs[l->n]);
        decision_clear(c);
        l->full = 1;
        return 1;
    }
    l->bytes += sz;
    l->items[l->n] = &l->pbs[l->n].msg;
    l->n++;
    return 0;
}

void admin_list(struct daemon *d, struct rpc_event *ev) {
    Detd__V1__ListDecisionsRequest *req =
        (Detd__V1__ListDecisionsRequest *)ev->msg;
    struct list_ctx l = {0};
    uint32_t limit = req->limit > 0 && req->limit < DAEMON_MAX_LIST
                         ? req->limit
                         : DAEMON_MAX_LIST;
    const char *ns =
        req->namespace_ && req->namespace_[0] ? req->namespace_ : d->cfg->ns;
    const char *kernel = req->kernel && req->kernel[0] ? req->kernel : NULL;
    if (validate_str(ev->call, "after_id", req->after_id, KEYID_HEX_LEN, 0) !=
        0)
        goto out;
    l.cap = limit;
    uint64_t total = 0;
    store_count_decisions(d->store, ns, &total, NULL);
    size_t alloc = total < limit ? (size_t)total + 1 : limit + 1;
    l.cap = alloc - 1;
    l.items = calloc(alloc, sizeof(*l.items));
    l.pbs = calloc(alloc, sizeof(*l.pbs));
    l.rows = calloc(alloc, sizeof(*l.rows));
    if (l.items == NULL || l.pbs == NULL || l.rows == NULL) {
        rpc_fail(ev->call, RPC_RESOURCE_EXHAUSTED, "out of memory");
        goto out;
    }
    int rc =
        req->paged
            ? store_each_decision_page(d->store, ns, NULL, kernel,
                                       req->after_id, limit + 1, list_cb, &l)
            : store_each_decision(d->store, ns, kernel, limit + 1, list_cb, &l);
    if (rc != 0) {
        storeerr_reply(d, ev->call, rc);
        goto out;
    }
    if (l.oom) {
        rpc_fail(ev->call, RPC_RESOURCE_EXHAUSTED, "out of memory");
        goto out;
    }
    Detd__V1__ListDecisionsResponse resp =
        DETD__V1__LIST_DECISIONS_RESPONSE__INIT;
    resp.api_version = SVC_API_VERSION;
    resp.decisions = l.items;
    resp.n_decisions = l.n;
    resp.truncated = l.full && (l.n < l.cap || total > l.n);
    if (req->paged)
        resp.next_after_id = l.n > 0
                                 ? l.rows[l.n - 1].id
                                 : (req->after_id != NULL ? req->after_id : "");
    rpc_reply(ev->call, &resp.base);
out:
    for (size_t i = 0; i < l.n; i++) {
        convert_decision_clear(&l.pbs[i]);
        decision_clear(&l.rows[i]);
    }
    free(l.items);
    free(l.pbs);
    free(l.rows);
    protobuf_c_message_free_unpacked(ev->msg, NULL);
}

void admin_reset(struct daemon *d, struct rpc_event *ev) {
    Detd__V1__ResetRequest *req = (Detd__V1__ResetRequest *)ev->msg;
    const char *ns =
        req->namespace_ && req->namespace_[0] ? req->namespace_ : d->cfg->ns;
    const char *kernel = req->kernel && req->kernel[0] ? req->kernel : NULL;
    uint64_t removed = 0, removed_obs = 0;
    if (req->votes) {
        votes_reset(d, ev);
        return;
    }
    if (kernel == NULL && !req->all) {
        rpc_fail(ev->call, RPC_INVALID_ARGUMENT,
                 "reset needs a kernel or all=true");
        goto out;
    }
    if (kernel != NULL && req->all) {
        rpc_fail(ev->call, RPC_INVALID_ARGUMENT,
                 "reset takes a kernel or all=true, not both");
        goto out;
    }
    /* Cached answers may name removed decisions: drop them all. */
    hotcache_clear(d->hot);
    int rc = store_reset(d->store, ns, kernel, &removed, &removed_obs);
    if (rc != 0) {
        storeerr_reply(d, ev->call, rc);
        goto out;
    }
    uint64_t removed_imports = 0;
    if (req->imports && (rc = store_reset_imports(d->store, ns, kernel,
                                                  &removed_imports)) != 0) {
        storeerr_reply(d, ev->call, rc);
        goto out;
    }
    imports_changed(d);
    /* Two formats, one line: "kernel %s" gives JSON lines a kernel. */
    if (kernel != NULL)
        log_info("reset namespace '%s' kernel %s: %" PRIu64
                 " decisions and %" PRIu64 " observations removed%s",
                 ns, kernel, removed, removed_obs,
                 req->imports ? ", and imported entries" : "");
    else
        log_info("reset namespace '%s' all: %" PRIu64 " decisions and %" PRIu64
                 " observations removed%s",
                 ns, removed, removed_obs,
                 req->imports ? ", and imported entries" : "");
    if (req->imports)
        log_info("reset namespace '%s': %" PRIu64 " imported entries removed",
                 ns, removed_imports);
    Detd__V1__ResetResponse resp = DETD__V1__RESET_RESPONSE__INIT;
    resp.api_version = SVC_API_VERSION;
    resp.removed = removed;
    resp.removed_imports = removed_imports;
    resp.removed_observations = removed_obs;
    rpc_reply(ev->call, &resp.base);
out:
    protobuf_c_message_free_unpacked(ev->msg, NULL);
}

void admin_health(struct daemon *d, struct rpc_event *ev) {
    Grpc__Health__V1__HealthCheckRequest *req =
        (Grpc__Health__V1__HealthCheckRequest *)ev->msg;
    Grpc__Health__V1__HealthCheckResponse resp =
        GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
    const char *svc = req->service ? req->service : "";
    if (svc[0] != '\0' && strcmp(svc, "detd.v1.Decider") != 0 &&
        strcmp(svc, "detd.v1.Admin") != 0) {
        rpc_fail(ev->call, RPC_NOT_FOUND, "unknown service '%.200s'", svc);
        goto out;
    }
    resp.status =
        d->draining
            ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING
            : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
    rpc_reply(ev->call, &resp.base);
out:
    protobuf_c_message_free_unpacked(ev->msg, NULL);
}
