/*
 * admin: the methods of detd.v1.Admin and grpc.health.v1.Health, answered
 * on the loop thread: status, decision listing, cross-rank verify, reset.
 */
#define _GNU_SOURCE
#include "daemon.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "convert.h"
#include "detd/client.h"
#include "detd/error.h"
#include "health.pb-c.h"
#include "keyid.h"
#include "verify.h"

#define SVC_API_VERSION DETD_API_VERSION

void admin_status(struct daemon *d, struct rpc_event *ev) {
    Detd__V1__StatusResponse resp = DETD__V1__STATUS_RESPONSE__INIT;
    uint64_t total = 0, by_source[8] = {0};
    struct engine_stats es;
    engine_get_stats(d->engine, &es);
    store_count_decisions(d->store, d->cfg->ns, &total, by_source);
    resp.api_version = SVC_API_VERSION;
    resp.version = (char *)DETD_VERSION;
    resp.namespace_ = (char *)d->cfg->ns;
    resp.backend = "local";
    resp.uptime_ms = rpc_now_ms() - d->started_mono_ms;
    resp.decisions = total;
    resp.open_claims = es.claims;
    resp.waiters = es.waiters;
    resp.store_path = d->store_path;
    resp.gpu_probe = d->gpus.state;
    resp.pid = (uint32_t)getpid();
    resp.tables = (char **)d->cfg->tables;
    resp.n_tables = d->cfg->n_tables;

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
        {"decide_calls", d->counters.decide_calls},
        {"decide_hits", d->counters.decide_hits},
        {"decide_misses", d->counters.decide_misses},
        {"timing_passes", d->counters.designations},
        {"takeovers", d->counters.takeovers},
        {"waits", d->counters.waits},
        {"wait_timeouts", d->counters.wait_timeouts},
        {"reports", d->counters.reports},
        {"reports_stale", d->counters.reports_stale},
        {"reports_repeated", d->counters.reports_repeated},
        {"observes", d->counters.observes},
        {"rejected", d->counters.rejected},
        {"busy", d->counters.busy},
    };
    enum { NCOUNTERS = sizeof(counters) / sizeof(counters[0]) };
    Detd__V1__Counter cn[NCOUNTERS];
    Detd__V1__Counter *cnp[NCOUNTERS];
    if (ci == NULL || cip == NULL || gi == NULL || gip == NULL) {
        rpc_fail(ev->call, RPC_RESOURCE_EXHAUSTED, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < nc; i++) {
        const struct session *s = d->sessions[i];
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
    rpc_reply(ev->call, &resp.base);
out:
    free(ci);
    free(cip);
    free(gi);
    free(gip);
    protobuf_c_message_free_unpacked(ev->msg, NULL);
}

struct list_ctx {
    Detd__V1__Decision **items;
    struct convert_decision *pbs;
    struct store_decision *rows;
    size_t n, cap;
    int oom;
};

static char *dup0(const char *s) {
    return strdup(s != NULL ? s : "");
}

static int list_cb(void *ctx, const struct store_decision *r) {
    struct list_ctx *l = ctx;
    if (l->n == l->cap)
        return 1;
    struct store_decision *c = &l->rows[l->n];
    c->id = dup0(r->id);
    c->ns = dup0(r->ns);
    c->arch = dup0(r->arch);
    c->kernel = dup0(r->kernel);
    c->key = dup0(r->key);
    c->candidates_fp = dup0(r->candidates_fp);
    c->n_candidates = r->n_candidates;
    c->config = dup0(r->config);
    c->source = r->source;
    c->claim_id = r->claim_id;
    c->by_host = dup0(r->by_host);
    c->by_pid = r->by_pid;
    c->by_rank = r->by_rank;
    c->by_local_rank = r->by_local_rank;
    c->by_device = dup0(r->by_device);
    c->by_arch = dup0(r->by_arch);
    c->triton_version = dup0(r->triton_version);
    c->timings_json = dup0(r->timings_json);
    c->table_file = dup0(r->table_file);
    c->decided_at_ms = r->decided_at_ms;
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
        store_decision_clear(&l.rows[i]);
    }
    free(l.items);
    free(l.pbs);
    free(l.rows);
    protobuf_c_message_free_unpacked(ev->msg, NULL);
}

struct verify_ctx {
    struct daemon *d;
    verifier *v;
    char last_id[KEYID_HEX_LEN + 1];
    char *decided;
    int rc;
};

static int verify_cb(void *ctx, const struct store_observation *o) {
    struct verify_ctx *vc = ctx;
    if (strcmp(vc->last_id, o->id) != 0) {
        free(vc->decided);
        vc->decided = NULL;
        struct store_decision row;
        if (store_get_decision(vc->d->store, o->id, &row) == 0) {
            vc->decided = strdup(row.config);
            store_decision_clear(&row);
        }
        snprintf(vc->last_id, sizeof(vc->last_id), "%s", o->id);
    }
    struct verify_obs vo = {o->id,         o->kernel,   o->key,  o->arch,
                            o->config,     o->host,     o->pid,  o->rank,
                            o->local_rank, o->governed, o->chaos};
    vc->rc = verify_add(vc->v, &vo, vc->decided);
    return vc->rc != 0;
}

void admin_verify(struct daemon *d, struct rpc_event *ev) {
    Detd__V1__VerifyRequest *req = (Detd__V1__VerifyRequest *)ev->msg;
    const char *ns =
        req->namespace_ && req->namespace_[0] ? req->namespace_ : d->cfg->ns;
    struct verify_ctx vc = {.d = d};
    struct verify_result r = {0};
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
    size_t nd = r.n_divergences, nu = 0, ncl = 0;
    for (size_t i = 0; i < nd; i++) {
        nu += r.divergences[i].n_uses;
        for (size_t j = 0; j < r.divergences[i].n_uses; j++)
            ncl += r.divergences[i].uses[j].n_clients;
    }
    Detd__V1__Divergence *dv = calloc(nd + 1, sizeof(*dv));
    Detd__V1__Divergence **dvp = calloc(nd + 1, sizeof(*dvp));
    Detd__V1__VerifyUse *us = calloc(nu + 1, sizeof(*us));
    Detd__V1__VerifyUse **usp = calloc(nu + 1, sizeof(*usp));
    Detd__V1__ClientIdentity *cl = calloc(ncl + 1, sizeof(*cl));
    Detd__V1__ClientIdentity **clp = calloc(ncl + 1, sizeof(*clp));
    if (dv && dvp && us && usp && cl && clp) {
        size_t ui = 0, ki = 0;
        for (size_t i = 0; i < nd; i++) {
            const struct verify_divergence *x = &r.divergences[i];
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
                for (size_t k = 0; k < u->n_clients; k++, ki++) {
                    detd__v1__client_identity__init(&cl[ki]);
                    cl[ki].host = u->clients[k].host;
                    cl[ki].pid = u->clients[k].pid;
                    cl[ki].rank = u->clients[k].rank;
                    cl[ki].local_rank = u->clients[k].local_rank;
                    clp[ki] = &cl[ki];
                }
                usp[ui] = &us[ui];
            }
            dvp[i] = &dv[i];
        }
        Detd__V1__VerifyResponse resp = DETD__V1__VERIFY_RESPONSE__INIT;
        resp.api_version = SVC_API_VERSION;
        resp.ok = nd == 0;
        resp.keys_checked = r.keys_checked;
        resp.observations = r.observations;
        resp.ungoverned = r.ungoverned;
        resp.divergences = dvp;
        resp.n_divergences = nd;
        rpc_reply(ev->call, &resp.base);
    } else {
        rpc_fail(ev->call, RPC_RESOURCE_EXHAUSTED, "out of memory");
    }
    free(dv);
    free(dvp);
    free(us);
    free(usp);
    free(cl);
    free(clp);
out:
    verify_result_clear(&r);
    verify_free(vc.v);
    free(vc.decided);
    protobuf_c_message_free_unpacked(ev->msg, NULL);
}

void admin_reset(struct daemon *d, struct rpc_event *ev) {
    Detd__V1__ResetRequest *req = (Detd__V1__ResetRequest *)ev->msg;
    const char *ns =
        req->namespace_ && req->namespace_[0] ? req->namespace_ : d->cfg->ns;
    const char *kernel = req->kernel && req->kernel[0] ? req->kernel : NULL;
    uint64_t removed = 0;
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
    if (store_reset(d->store, ns, kernel, &removed) != 0) {
        rpc_fail(ev->call, RPC_INTERNAL, "store: %s", store_errmsg(d->store));
        goto out;
    }
    log_info("reset namespace '%s' %s%s: %" PRIu64 " decisions removed", ns,
             kernel ? "kernel " : "all", kernel ? kernel : "", removed);
    Detd__V1__ResetResponse resp = DETD__V1__RESET_RESPONSE__INIT;
    resp.api_version = SVC_API_VERSION;
    resp.removed = removed;
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
