/*
 * admin: the methods of detd.v1.Admin and grpc.health.v1.Health, answered
 * on the loop thread: status, decision listing, cross-rank verify, reset.
 */
#define _GNU_SOURCE
#include "ops/admin.h"
#include "clock.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster/cluster.h"
#include "app/convert.h"
#include "app/coord.h"
#include "detd/client.h"
#include "detd/error.h"
#include "health.pb-c.h"
#include "core/keyid.h"
#include "core/text.h"
#include "core/verify.h"
#include "io/listener.h"
#include "app/imports.h"
#include "ops/tableadmin.h"
#include "ops/peertab.h"
#include "ops/votes.h"

#define SVC_API_VERSION DETD_API_VERSION

void admin_status(struct daemon *d, struct rpc_event *ev) {
    Detd__V1__StatusResponse resp = DETD__V1__STATUS_RESPONSE__INIT;
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
        {"reports_refused", d->counters.reports_refused},
        {"reports_rejected", d->counters.reports_rejected},
        {"calls_refused_session", d->counters.calls_refused_session},
        {"unattached_refused", d->counters.unattached_refused},
        {"pass_timeouts", es.pass_timeouts},
        {"commit_deadlines", d->counters.commit_deadlines},
        {"observes", d->counters.observes},
        {"votes", votes},
        {"votes_max", d->cfg->max_votes},
        {"vote_calls", d->counters.vote_calls},
        {"votes_refused_full", d->counters.votes_refused_full},
        {"rejected", d->counters.rejected},
        {"busy", d->counters.busy},
        {"refused_allow_list", atomic_load(&d->refused[ACCESS_DENIED_ALLOW])},
        {"refused_admin_list", atomic_load(&d->refused[ACCESS_DENIED_ADMIN])},
        {"refused_no_credentials",
         atomic_load(&d->refused[ACCESS_DENIED_NOCRED])},
        {"refused_connections", d->refused_connections},
        {"connections_open", conn_st.open},
        {"connections_refused_max", conn_st.refused_max},
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
    static Detd__V1__ClusterNode nds[CLUSTER_MAX_NODES];
    static Detd__V1__ClusterNode *ndp[CLUSTER_MAX_NODES];
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
        for (size_t i = 0; i < cs->n_nodes; i++) {
            const struct cluster_node *n = &cs->nodes[i];
            Detd__V1__ClusterNode *x = &nds[i];
            detd__v1__cluster_node__init(x);
            x->node_id = (char *)n->node_id;
            x->listen = (char *)n->listen;
            x->pid = (uint32_t)n->pid;
            x->started_at_ms = n->started_at_ms;
            x->version = (char *)n->version;
            x->socket = (char *)n->socket;
            ndp[i] = x;
        }
        resp.nodes = ndp;
        resp.n_nodes = cs->n_nodes;
    }
    rpc_reply(ev->call, &resp.base);
out:
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
    int oom;
};

static int list_cb(void *ctx, const struct decision *r) {
    struct list_ctx *l = ctx;
    if (l->n == l->cap)
        return 1;
    struct decision *c = &l->rows[l->n];
    if (decision_copy(r, 1, c) != 0) {
        l->oom = 1;
        return 1;
    }
    convert_decision_fill(c, &l->pbs[l->n], 1);
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
    if (store_each_decision(d->store, ns, kernel, limit + 1, list_cb, &l) !=
        0) {
        rpc_fail(ev->call, RPC_INTERNAL, "store: %s", store_errmsg(d->store));
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
    resp.truncated = l.n == l.cap && total > l.n;
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

struct verify_ctx {
    struct daemon *d;
    struct peer_tab peers;
    verifier *v;
    char last_id[KEYID_HEX_LEN + 1];
    char *decided;
    int rc;
};

static int verify_cb(void *ctx, const struct store_observation *o) {
    struct verify_ctx *vc = ctx;
    if (o->failed && o->config[0] == '\0')
        return 0; /* raised before a config was chosen: detctl lists it */
    if (strcmp(vc->last_id, o->id) != 0) {
        free(vc->decided);
        vc->decided = NULL;
        struct decision row;
        if (store_get_decision(vc->d->store, o->id, &row) == 0) {
            vc->decided = strdup(row.config);
            decision_clear(&row);
        }
        snprintf(vc->last_id, sizeof(vc->last_id), "%s", o->id);
    }
    struct verify_obs vo = {o->id,         o->kernel,   o->key,  o->arch,
                            o->config,     o->host,     o->pid,  o->rank,
                            o->local_rank, o->governed, o->chaos};
    vc->rc = verify_add(vc->v, &vo, vc->decided);
    if (vc->rc == 0 && o->governed &&
        peer_tab_add(&vc->peers, o->id, o->host, o->pid, o->claimed_pid,
                     o->peer_uid, o->node[0] ? o->node : vc->d->node) != 0)
        vc->rc = DETD_ENOMEM;
    return vc->rc != 0;
}

/* Answer a Verify call from a finished verifier's result. */
static void reply_verify(rpc_call *call, const struct verify_result *r,
                         struct peer_tab *pt, char **checked, size_t n_checked,
                         char **unreachable, size_t n_unreachable) {
    size_t nd = r->n_divergences, nu = 0, ncl = 0;
    for (size_t i = 0; i < nd; i++) {
        nu += r->divergences[i].n_uses;
        for (size_t j = 0; j < r->divergences[i].n_uses; j++)
            ncl += r->divergences[i].uses[j].n_clients;
    }
    Detd__V1__Divergence *dv = calloc(nd + 1, sizeof(*dv));
    Detd__V1__Divergence **dvp = calloc(nd + 1, sizeof(*dvp));
    Detd__V1__VerifyUse *us = calloc(nu + 1, sizeof(*us));
    Detd__V1__VerifyUse **usp = calloc(nu + 1, sizeof(*usp));
    Detd__V1__ClientIdentity *cl = calloc(ncl + 1, sizeof(*cl));
    Detd__V1__ClientIdentity **clp = calloc(ncl + 1, sizeof(*clp));
    Detd__V1__PeerIdentity *pe = calloc(ncl + 1, sizeof(*pe));
    Detd__V1__PeerIdentity **pep = calloc(ncl + 1, sizeof(*pep));
    if (dv && dvp && us && usp && cl && clp && pe && pep) {
        size_t ui = 0, ki = 0;
        for (size_t i = 0; i < nd; i++) {
            const struct verify_divergence *x = &r->divergences[i];
            detd__v1__divergence__init(&dv[i]);
            dv[i].id = x->id;
            dv[i].kernel = x->kernel;
            dv[i].key = x->key;
            dv[i].arch = x->arch;
            dv[i].decided = x->decided ? x->decided : "";
            dv[i].reason = x->reason;
            dv[i].uses = &usp[ui];
            dv[i].n_uses = x->n_uses;
            for (size_t j = 0; j < x->n_uses; j++, ui++) {
                const struct verify_use *u = &x->uses[j];
                detd__v1__verify_use__init(&us[ui]);
                us[ui].config = u->config;
                us[ui].chaos = u->chaos;
                us[ui].clients = &clp[ki];
                us[ui].n_clients = u->n_clients;
                us[ui].peers = &pep[ki];
                us[ui].n_peers = u->n_clients;
                for (size_t k = 0; k < u->n_clients; k++, ki++) {
                    detd__v1__client_identity__init(&cl[ki]);
                    cl[ki].host = u->clients[k].host;
                    cl[ki].pid = u->clients[k].pid;
                    cl[ki].rank = u->clients[k].rank;
                    cl[ki].local_rank = u->clients[k].local_rank;
                    clp[ki] = &cl[ki];
                    /* Who the daemon saw, beside what was claimed. */
                    detd__v1__peer_identity__init(&pe[ki]);
                    pe[ki].pid = u->clients[k].pid;
                    pe[ki].uid = -1;
                    pe[ki].node = "";
                    const struct peer_row *pr = peer_tab_find(
                        pt, x->id, u->clients[k].host, u->clients[k].pid);
                    if (pr != NULL) {
                        pe[ki].uid = pr->uid;
                        pe[ki].node = pr->node;
                        pe[ki].claimed_pid = pr->claimed_pid;
                        if (pr->claimed_pid != 0)
                            cl[ki].pid = pr->claimed_pid;
                    }
                    pep[ki] = &pe[ki];
                }
                usp[ui] = &us[ui];
            }
            dvp[i] = &dv[i];
        }
        Detd__V1__VerifyResponse resp = DETD__V1__VERIFY_RESPONSE__INIT;
        resp.api_version = SVC_API_VERSION;
        resp.ok = nd == 0 && n_unreachable == 0;
        resp.keys_checked = r->keys_checked;
        resp.observations = r->observations;
        resp.ungoverned = r->ungoverned;
        resp.divergences = dvp;
        resp.n_divergences = nd;
        resp.nodes_checked = checked;
        resp.n_nodes_checked = n_checked;
        resp.nodes_unreachable = unreachable;
        resp.n_nodes_unreachable = n_unreachable;
        rpc_reply(call, &resp.base);
    } else {
        rpc_fail(call, RPC_RESOURCE_EXHAUSTED, "out of memory");
    }
    free(dv);
    free(dvp);
    free(us);
    free(usp);
    free(cl);
    free(clp);
    free(pe);
    free(pep);
}

/* verify --cluster in flight: peers' observations being gathered. */
struct verify_op {
    uint64_t cookie;
    rpc_call *call;
    char *ns;
    Detd__V1__ListObservationsResponse **resps;
    size_t n_resps;
    size_t bytes; /* of the pages kept (DAEMON_MAX_VERIFY_BYTES) */
    char *skip;   /* the node whose further pages are ignored */
    char **checked, **unreachable;
    size_t n_checked, n_unreachable;
    struct verify_op *next;
};

/* The verify --cluster gatherings in flight. */
struct admin_verifies {
    struct verify_op *ops;
    uint64_t next; /* the last cookie handed out */
};

/* See admin.h. */
int admin_verifies_new(struct admin_verifies **ret) {
    struct admin_verifies *v = calloc(1, sizeof(*v));
    if (v == NULL)
        return DETD_ENOMEM;
    *ret = v;
    return 0;
}

/* See admin.h. */
void admin_verifies_free(struct admin_verifies *v) {
    free(v); /* admin_verify_drain() answered what was in flight */
}

static void verify_op_free(struct verify_op *op) {
    for (size_t i = 0; i < op->n_resps; i++)
        protobuf_c_message_free_unpacked(&op->resps[i]->base, NULL);
    for (size_t i = 0; i < op->n_checked; i++)
        free(op->checked[i]);
    for (size_t i = 0; i < op->n_unreachable; i++)
        free(op->unreachable[i]);
    free(op->resps);
    free(op->checked);
    free(op->unreachable);
    free(op->ns);
    free(op->skip);
    free(op);
}

/* The cluster_pager of verify --cluster: the ListObservations request
 * again with the answer's next_page_token. */
static int obs_next_page(const void *req, size_t req_len, const void *resp,
                         size_t resp_len, void **ret_next, size_t *ret_len) {
    Detd__V1__ListObservationsResponse *lr =
        detd__v1__list_observations_response__unpack(NULL, resp_len, resp);
    if (lr == NULL)
        return DETD_EPROTO;
    int rc = 0;
    if (lr->next_page_token != NULL && lr->next_page_token[0] != '\0') {
        Detd__V1__ListObservationsRequest *q =
            detd__v1__list_observations_request__unpack(NULL, req_len, req);
        uint8_t *buf = NULL;
        size_t n = 0;
        if (q == NULL) {
            rc = DETD_EPROTO;
        } else {
            char *was = q->page_token;
            q->page_token = lr->next_page_token;
            n = protobuf_c_message_get_packed_size(&q->base);
            if ((buf = malloc(n + 1)) == NULL)
                rc = DETD_ENOMEM;
            else
                protobuf_c_message_pack(&q->base, buf);
            q->page_token = was;
            protobuf_c_message_free_unpacked(&q->base, NULL);
        }
        if (rc == 0) {
            *ret_next = buf;
            *ret_len = n;
            rc = 1;
        }
    }
    protobuf_c_message_free_unpacked(&lr->base, NULL);
    return rc;
}

static int push_str(char ***v, size_t *n, const char *s) {
    char **nv = realloc(*v, (*n + 1) * sizeof(**v));
    if (nv == NULL)
        return -1;
    *v = nv;
    if ((nv[*n] = strdup(s)) == NULL)
        return -1;
    (*n)++;
    return 0;
}

void admin_verify(struct daemon *d, struct rpc_event *ev) {
    Detd__V1__VerifyRequest *req = (Detd__V1__VerifyRequest *)ev->msg;
    const char *ns =
        req->namespace_ && req->namespace_[0] ? req->namespace_ : d->cfg->ns;
    struct verify_ctx vc = {.d = d};
    struct verify_result r = {0};
    if (req->cluster && d->cluster != NULL) {
        /* Gather every node's observations first (cluster worker). */
        struct verify_op *op = calloc(1, sizeof(*op));
        Detd__V1__ListObservationsRequest lr =
            DETD__V1__LIST_OBSERVATIONS_REQUEST__INIT;
        lr.api_version = SVC_API_VERSION;
        lr.namespace_ = (char *)ns;
        lr.page_size = DAEMON_MAX_OBS_PAGE;
        size_t n = protobuf_c_message_get_packed_size(&lr.base);
        uint8_t *buf = malloc(n + 1);
        if (op == NULL || buf == NULL || (op->ns = strdup(ns)) == NULL) {
            free(buf);
            free(op);
            rpc_fail(ev->call, RPC_RESOURCE_EXHAUSTED, "out of memory");
            goto out;
        }
        protobuf_c_message_pack(&lr.base, buf);
        op->cookie = ++d->verifies->next;
        op->call = ev->call;
        int64_t left = rpc_call_deadline_ms(ev->call) - clock_mono_ms() - 200;
        if (left > 10000 || left < 0)
            left = 10000;
        if (cluster_fanout(d->cluster, "/detd.v1.Admin/ListObservations", buf,
                           n, left, obs_next_page, op->cookie) != 0) {
            free(buf);
            free(op->ns);
            free(op);
            rpc_fail(ev->call, RPC_RESOURCE_EXHAUSTED, "out of memory");
            goto out;
        }
        free(buf);
        op->next = d->verifies->ops;
        d->verifies->ops = op;
        goto out;
    }
    if (verify_new(&vc.v) != 0) {
        rpc_fail(ev->call, RPC_RESOURCE_EXHAUSTED, "out of memory");
        goto out;
    }
    if (store_each_observation(d->store, ns, verify_cb, &vc) != 0 ||
        vc.rc != 0) {
        rpc_fail(ev->call, RPC_INTERNAL, "verify: %s",
                 vc.rc ? detd_strerror(vc.rc) : store_errmsg(d->store));
        goto out;
    }
    if (verify_finish(vc.v, &r) != 0) {
        rpc_fail(ev->call, RPC_RESOURCE_EXHAUSTED, "out of memory");
        goto out;
    }
    d->counters.verify_divergences += r.n_divergences;
    reply_verify(ev->call, &r, &vc.peers, NULL, 0, NULL, 0);
out:
    peer_tab_clear(&vc.peers);
    verify_result_clear(&r);
    verify_free(vc.v);
    free(vc.decided);
    protobuf_c_message_free_unpacked(ev->msg, NULL);
}

/* One observation of the merged set (strings borrowed or owned). */
struct mobs {
    struct verify_obs o;
    char *own[6]; /* local rows: heap copies, freed after */
};

struct collect_ctx {
    struct mobs *v;
    size_t n, cap;
    int oom;
    struct daemon *d;
    struct peer_tab peers;
};

static int collect_cb(void *ctx, const struct store_observation *o) {
    struct collect_ctx *c = ctx;
    if (o->failed && o->config[0] == '\0')
        return 0; /* as verify_cb */
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 256;
        struct mobs *v = realloc(c->v, cap * sizeof(*v));
        if (v == NULL) {
            c->oom = 1;
            return 1;
        }
        c->v = v;
        c->cap = cap;
    }
    struct mobs *m = &c->v[c->n];
    memset(m, 0, sizeof(*m));
    const char *src[6] = {o->id,   o->kernel, o->key,
                          o->arch, o->config, o->host};
    for (int i = 0; i < 6; i++) {
        if ((m->own[i] = text_dup(src[i])) == NULL) {
            for (int j = 0; j < i; j++)
                free(m->own[j]);
            c->oom = 1;
            return 1;
        }
    }
    m->o = (struct verify_obs){m->own[0],     m->own[1],   m->own[2], m->own[3],
                               m->own[4],     m->own[5],   o->pid,    o->rank,
                               o->local_rank, o->governed, o->chaos};
    c->n++;
    if (o->governed &&
        peer_tab_add(&c->peers, o->id, o->host, o->pid, o->claimed_pid,
                     o->peer_uid, o->node[0] ? o->node : c->d->node) != 0)
        return 1;
    return 0;
}

static int add_remote(struct collect_ctx *c, const Detd__V1__Observation *o) {
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 256;
        struct mobs *v = realloc(c->v, cap * sizeof(*v));
        if (v == NULL)
            return -1;
        c->v = v;
        c->cap = cap;
    }
    struct mobs *m = &c->v[c->n++];
    memset(m, 0, sizeof(*m));
    const Detd__V1__ClientIdentity *ci = o->client;
    m->o = (struct verify_obs){o->id,
                               o->kernel,
                               o->key,
                               o->arch,
                               o->config,
                               ci ? ci->host : "",
                               ci ? ci->pid : 0,
                               ci ? ci->rank : -1,
                               ci ? ci->local_rank : -1,
                               o->governed,
                               o->chaos};
    if (o->governed && o->peer != NULL &&
        peer_tab_add(&c->peers, o->id, ci ? ci->host : "", ci ? ci->pid : 0,
                     o->peer->claimed_pid, o->peer->uid, o->peer->node) != 0)
        return -1;
    return 0;
}

static int mobs_cmp(const void *a, const void *b) {
    const struct mobs *x = a, *y = b;
    return strcmp(x->o.id, y->o.id);
}

static void verify_cluster_finish(struct daemon *d, struct verify_op *op) {
    struct collect_ctx c = {0};
    c.d = d;
    struct verify_result r = {0};
    verifier *v = NULL;
    char *decided = NULL;
    const char *last = NULL;
    if (store_each_observation(d->store, op->ns, collect_cb, &c) != 0 ||
        c.oom) {
        rpc_fail(op->call, RPC_INTERNAL, "verify: %s",
                 c.oom ? "out of memory" : store_errmsg(d->store));
        goto out;
    }
    for (size_t i = 0; i < op->n_resps; i++)
        for (size_t j = 0; j < op->resps[i]->n_observations; j++) {
            const Detd__V1__Observation *o = op->resps[i]->observations[j];
            if (o->id == NULL || o->config == NULL || o->id[0] == '\0' ||
                (o->failed && o->config[0] == '\0'))
                continue;
            if (add_remote(&c, o) != 0) {
                rpc_fail(op->call, RPC_RESOURCE_EXHAUSTED, "out of memory");
                goto out;
            }
        }
    if (c.n > 0)
        qsort(c.v, c.n, sizeof(*c.v), mobs_cmp);
    if (verify_new(&v) != 0) {
        rpc_fail(op->call, RPC_RESOURCE_EXHAUSTED, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < c.n; i++) {
        if (last == NULL || strcmp(last, c.v[i].o.id) != 0) {
            free(decided);
            decided = NULL;
            struct decision row;
            if (store_get_decision(d->store, c.v[i].o.id, &row) == 0) {
                decided = strdup(row.config);
                decision_clear(&row);
            }
            last = c.v[i].o.id;
        }
        int rc = verify_add(v, &c.v[i].o, decided);
        if (rc != 0) {
            rpc_fail(op->call, RPC_INTERNAL, "verify: %s", detd_strerror(rc));
            goto out;
        }
    }
    if (verify_finish(v, &r) != 0) {
        rpc_fail(op->call, RPC_RESOURCE_EXHAUSTED, "out of memory");
        goto out;
    }
    d->counters.verify_divergences += r.n_divergences;
    reply_verify(op->call, &r, &c.peers, op->checked, op->n_checked,
                 op->unreachable, op->n_unreachable);
out:
    verify_result_clear(&r);
    verify_free(v);
    free(decided);
    for (size_t i = 0; i < c.n; i++)
        for (int j = 0; j < 6; j++)
            free(c.v[i].own[j]);
    free(c.v);
    peer_tab_clear(&c.peers);
}

/* See admin.h. */
void admin_verify_peer(struct daemon *d, const struct cluster_event *ev) {
    struct verify_op *op = d->verifies->ops;
    while (op != NULL && op->cookie != ev->cookie)
        op = op->next;
    if (op == NULL)
        return;
    if (ev->kind == CLUSTER_EV_PEERS_DONE) {
        struct verify_op **pp = &d->verifies->ops;
        while (*pp != op)
            pp = &(*pp)->next;
        *pp = op->next;
        if (push_str(&op->checked, &op->n_checked, d->cfg->node_id) != 0) {
            rpc_fail(op->call, RPC_RESOURCE_EXHAUSTED, "out of memory");
        } else {
            verify_cluster_finish(d, op);
        }
        verify_op_free(op);
        return;
    }
    char why[512];
    if (op->skip != NULL && strcmp(op->skip, ev->node) == 0)
        return; /* already named incomplete: the rest of its pages */
    if (ev->err == 0 && op->bytes + ev->value_len > DAEMON_MAX_VERIFY_BYTES) {
        snprintf(why, sizeof(why),
                 "%s: its observations go past the %d MiB verify --cluster "
                 "keeps: verify --cluster is incomplete",
                 ev->node, DAEMON_MAX_VERIFY_BYTES >> 20);
        log_warn("verify --cluster: node %s", why);
        push_str(&op->unreachable, &op->n_unreachable, why);
        free(op->skip);
        op->skip = strdup(ev->node);
        return;
    }
    if (ev->err == 0) {
        Detd__V1__ListObservationsResponse *lr =
            detd__v1__list_observations_response__unpack(
                NULL, ev->value_len, (const uint8_t *)ev->value);
        Detd__V1__ListObservationsResponse **nv =
            lr != NULL ? realloc(op->resps, (op->n_resps + 1) * sizeof(*nv))
                       : NULL;
        if (nv != NULL) {
            op->resps = nv;
            op->resps[op->n_resps++] = lr;
            op->bytes += ev->value_len;
            if (lr->next_page_token && lr->next_page_token[0] != '\0')
                return; /* more pages of this node follow */
            if (lr->truncated) {
                /* A peer that cannot page: say so rather than pass on a
                 * part. */
                snprintf(why, sizeof(why),
                         "%s: more observations than one page (%zu "
                         "compared) and no next page: verify --cluster is "
                         "incomplete",
                         ev->node, lr->n_observations);
                log_warn("verify --cluster: node %s", why);
                push_str(&op->unreachable, &op->n_unreachable, why);
                return;
            }
            push_str(&op->checked, &op->n_checked, ev->node);
            return;
        }
        if (lr != NULL)
            protobuf_c_message_free_unpacked(&lr->base, NULL);
        snprintf(why, sizeof(why), "%s: undecodable answer", ev->node);
    } else {
        snprintf(why, sizeof(why), "%s: %s (%s)", ev->node,
                 detd_strerror(ev->err), ev->value ? ev->value : "");
    }
    log_warn("verify --cluster: node %s", why);
    push_str(&op->unreachable, &op->n_unreachable, why);
}

/* See admin.h. */
void admin_verify_drain(struct daemon *d) {
    if (d->verifies == NULL)
        return;
    while (d->verifies->ops != NULL) {
        struct verify_op *op = d->verifies->ops;
        d->verifies->ops = op->next;
        rpc_fail(op->call, RPC_UNAVAILABLE, "daemon is shutting down");
        verify_op_free(op);
    }
}

void admin_reset(struct daemon *d, struct rpc_event *ev) {
    Detd__V1__ResetRequest *req = (Detd__V1__ResetRequest *)ev->msg;
    const char *ns =
        req->namespace_ && req->namespace_[0] ? req->namespace_ : d->cfg->ns;
    const char *kernel = req->kernel && req->kernel[0] ? req->kernel : NULL;
    uint64_t removed = 0;
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
    if (store_reset(d->store, ns, kernel, &removed) != 0) {
        rpc_fail(ev->call, RPC_INTERNAL, "store: %s", store_errmsg(d->store));
        goto out;
    }
    uint64_t removed_imports = 0;
    if (req->imports &&
        store_reset_imports(d->store, ns, kernel, &removed_imports) != 0) {
        rpc_fail(ev->call, RPC_INTERNAL, "store: %s", store_errmsg(d->store));
        goto out;
    }
    imports_changed(d);
    log_info("reset namespace '%s' %s%s: %" PRIu64 " decisions removed%s", ns,
             kernel ? "kernel " : "all", kernel ? kernel : "", removed,
             req->imports ? ", and imported entries" : "");
    if (req->imports)
        log_info("reset namespace '%s': %" PRIu64 " imported entries removed",
                 ns, removed_imports);
    Detd__V1__ResetResponse resp = DETD__V1__RESET_RESPONSE__INIT;
    resp.api_version = SVC_API_VERSION;
    resp.removed = removed;
    resp.removed_imports = removed_imports;
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
