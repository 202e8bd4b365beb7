/*
 * admin_verify: detd.v1.Admin/Verify, answered on the loop thread: the
 * comparison of this node's observations, and verify --cluster: every
 * registered node's observations gathered through the cluster fan-out
 * (page by page, many nodes at once), compared here, and the node lists
 * of the answer given in pages (the rest held for their page token).
 */
#define _GNU_SOURCE
#include "ops/admin.h"
#include "clock.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster.h"
#include "cluster/cluster_nodes.h"
#include "detd/client.h"
#include "detd/error.h"
#include "core/keyid.h"
#include "core/text.h"
#include "core/verify.h"
#include "ops/peertab.h"

#define SVC_API_VERSION DETD_API_VERSION

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
    if (o->source == DETD_SOURCE_RUNTIME)
        return 0; /* not a config choice: detctl lists it beside */
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
    struct verify_obs vo = {
        o->id,       o->kernel, o->key,
        o->arch,     o->config, o->host,
        o->pid,      o->rank,   o->local_rank,
        o->governed, o->chaos,  o->source == DETD_SOURCE_UNGOVERNED};
    vc->rc = verify_add(vc->v, &vo, vc->decided);
    if (vc->rc == 0 && o->governed &&
        peer_tab_add(&vc->peers, o->id, o->host, o->pid, o->claimed_pid,
                     o->peer_uid, o->node[0] ? o->node : vc->d->node) != 0)
        vc->rc = DETD_ENOMEM;
    return vc->rc != 0;
}

/* Answer a Verify call from a finished verifier's result, with the names
 * [0, end) of checked followed by unreachable (the first page) and
 * next_token ("" when that is all). */
static void reply_verify(rpc_call *call, const struct verify_result *r,
                         struct peer_tab *pt, char **checked, size_t n_checked,
                         char **unreachable, size_t n_unreachable, size_t end,
                         const char *next_token) {
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
        resp.n_nodes_checked = end < n_checked ? end : n_checked;
        resp.nodes_unreachable = unreachable;
        resp.n_nodes_unreachable = end > n_checked ? end - n_checked : 0;
        resp.nodes_checked_total = n_checked;
        resp.nodes_unreachable_total = n_unreachable;
        resp.next_page_token = (char *)next_token;
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
    /* The nodes whose further pages are ignored (named incomplete). Pages
     * of the nodes asked at once interleave, so there may be several. */
    char **skip;
    size_t n_skip;
    char **checked, **unreachable;
    size_t n_checked, n_unreachable;
    size_t page_size; /* of the node lists in the answer */
    struct verify_op *next;
};

/* The node lists of a verify --cluster answered, kept for their later
 * pages (VerifyRequest.page_token). */
struct verify_held {
    uint64_t id;
    char **checked, **unreachable;
    size_t n_checked, n_unreachable;
    int ok;
    int64_t expires_ms; /* ADMIN_VERIFY_HELD_MS after its last page */
    struct verify_held *next;
};

/* The verify --cluster gatherings in flight, and the answers held. */
struct admin_verifies {
    struct verify_op *ops;
    uint64_t next; /* the last cookie handed out */
    struct verify_held *held;
    size_t n_held;
    uint64_t next_held; /* the last held id handed out */
};

/* verify --cluster's node lists: pages of at most ADMIN_VERIFY_PAGE names
 * and ADMIN_VERIFY_PAGE_BYTES of them (a name with its reason is at most
 * about 700 bytes: far within DETD_MAX_MESSAGE_BYTES). Answers with more
 * pages are held for their token, at most ADMIN_VERIFY_HELD of them (the
 * oldest goes first), each for ADMIN_VERIFY_HELD_MS after a page of it
 * was given. */
#define ADMIN_VERIFY_PAGE 1000
#define ADMIN_VERIFY_PAGE_BYTES (256 << 10)
#define ADMIN_VERIFY_HELD 8
#define ADMIN_VERIFY_HELD_MS 60000
#define ADMIN_VERIFY_TOKEN "v1:"
/* How long verify --cluster may take when the caller sets no sooner
 * deadline. */
#define ADMIN_VERIFY_MAX_MS 120000

/* See admin.h. */
int admin_verifies_new(struct admin_verifies **ret) {
    struct admin_verifies *v = calloc(1, sizeof(*v));
    if (v == NULL)
        return DETD_ENOMEM;
    *ret = v;
    return 0;
}

static void free_strs(char **v, size_t n) {
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

static void held_free(struct verify_held *h) {
    free_strs(h->checked, h->n_checked);
    free_strs(h->unreachable, h->n_unreachable);
    free(h);
}

/* Drop the held answers that expired by now. */
static void held_sweep(struct admin_verifies *v, int64_t now) {
    struct verify_held **pp = &v->held;
    while (*pp != NULL) {
        struct verify_held *h = *pp;
        if (h->expires_ms <= now) {
            *pp = h->next;
            held_free(h);
            v->n_held--;
        } else {
            pp = &h->next;
        }
    }
}

/* See admin.h. */
void admin_verifies_free(struct admin_verifies *v) {
    if (v == NULL)
        return;
    /* admin_verify_drain() answered what was in flight. */
    held_sweep(v, INT64_MAX);
    free(v);
}

static void verify_op_free(struct verify_op *op) {
    for (size_t i = 0; i < op->n_resps; i++)
        protobuf_c_message_free_unpacked(&op->resps[i]->base, NULL);
    free_strs(op->checked, op->n_checked);
    free_strs(op->unreachable, op->n_unreachable);
    free(op->resps);
    free(op->ns);
    free_strs(op->skip, op->n_skip);
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

/* A new held answer (empty lists), first in v's list; the oldest goes
 * when ADMIN_VERIFY_HELD are held. NULL: out of memory. */
static struct verify_held *held_new(struct admin_verifies *v) {
    int64_t now = clock_mono_ms();
    held_sweep(v, now);
    if (v->n_held >= ADMIN_VERIFY_HELD) {
        struct verify_held **pp = &v->held, **oldest = pp;
        for (; *pp != NULL; pp = &(*pp)->next)
            if ((*pp)->expires_ms < (*oldest)->expires_ms)
                oldest = pp;
        struct verify_held *h = *oldest;
        *oldest = h->next;
        held_free(h);
        v->n_held--;
    }
    struct verify_held *h = calloc(1, sizeof(*h));
    if (h == NULL)
        return NULL;
    h->id = ++v->next_held;
    h->expires_ms = now + ADMIN_VERIFY_HELD_MS;
    h->next = v->held;
    v->held = h;
    v->n_held++;
    return h;
}

/* A Verify call with a page_token: the next names of a held answer. */
static void verify_page(struct daemon *d, struct rpc_event *ev) {
    const Detd__V1__VerifyRequest *req =
        (const Detd__V1__VerifyRequest *)ev->msg;
    const char *tok = req->page_token;
    uint64_t id = 0;
    size_t start = 0;
    int used = 0;
    size_t tl = strlen(ADMIN_VERIFY_TOKEN);
    if (strncmp(tok, ADMIN_VERIFY_TOKEN, tl) != 0 ||
        sscanf(tok + tl, "%" SCNx64 ":%zu%n", &id, &start, &used) != 2 ||
        tok[tl + (size_t)used] != '\0') {
        rpc_fail(ev->call, RPC_INVALID_ARGUMENT,
                 "page_token '%.64s' is not one this daemon gives", tok);
        return;
    }
    int64_t now = clock_mono_ms();
    held_sweep(d->verifies, now);
    struct verify_held *h = d->verifies->held;
    while (h != NULL && h->id != id)
        h = h->next;
    size_t total = h != NULL ? h->n_checked + h->n_unreachable : 0;
    if (h == NULL || start > total) {
        rpc_fail(ev->call, RPC_NOT_FOUND,
                 "page_token '%.64s': no such answer held (they are kept %d s "
                 "after their last page): run verify again",
                 tok, ADMIN_VERIFY_HELD_MS / 1000);
        return;
    }
    size_t page = req->page_size == 0 || req->page_size > ADMIN_VERIFY_PAGE
                      ? ADMIN_VERIFY_PAGE
                      : req->page_size;
    size_t end = cluster_names_page_end(h->checked, h->n_checked,
                                        h->unreachable, h->n_unreachable, start,
                                        page, ADMIN_VERIFY_PAGE_BYTES);
    char next[64] = "";
    if (end < total)
        snprintf(next, sizeof(next), "%s%" PRIx64 ":%zu", ADMIN_VERIFY_TOKEN,
                 h->id, end);
    h->expires_ms = now + ADMIN_VERIFY_HELD_MS;
    size_t nc = h->n_checked;
    Detd__V1__VerifyResponse resp = DETD__V1__VERIFY_RESPONSE__INIT;
    resp.api_version = SVC_API_VERSION;
    resp.ok = h->ok;
    resp.nodes_checked = start < nc ? h->checked + start : NULL;
    resp.n_nodes_checked = start < nc ? (end < nc ? end : nc) - start : 0;
    size_t us = start > nc ? start - nc : 0, ue = end > nc ? end - nc : 0;
    resp.nodes_unreachable = ue > us ? h->unreachable + us : NULL;
    resp.n_nodes_unreachable = ue - us;
    resp.nodes_checked_total = nc;
    resp.nodes_unreachable_total = h->n_unreachable;
    resp.next_page_token = next;
    rpc_reply(ev->call, &resp.base);
}

void admin_verify(struct daemon *d, struct rpc_event *ev) {
    Detd__V1__VerifyRequest *req = (Detd__V1__VerifyRequest *)ev->msg;
    const char *ns =
        req->namespace_ && req->namespace_[0] ? req->namespace_ : d->cfg->ns;
    struct verify_ctx vc = {.d = d};
    struct verify_result r = {0};
    if (req->page_token != NULL && req->page_token[0] != '\0') {
        verify_page(d, ev);
        goto out;
    }
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
        op->page_size =
            req->page_size == 0 || req->page_size > ADMIN_VERIFY_PAGE
                ? ADMIN_VERIFY_PAGE
                : req->page_size;
        /* Every node is asked before the caller's deadline, with a margin
         * for the comparison and the answer. */
        int64_t now = clock_mono_ms();
        int64_t left = rpc_call_deadline_ms(ev->call) - now - 200;
        if (left > ADMIN_VERIFY_MAX_MS)
            left = ADMIN_VERIFY_MAX_MS;
        if (left < 0)
            left = 0;
        if (cluster_fanout(d->cluster, "/detd.v1.Admin/ListObservations", buf,
                           n, CLUSTER_PEER_TIMEOUT_MS, now + left,
                           obs_next_page, op->cookie) != 0) {
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
    reply_verify(ev->call, &r, &vc.peers, NULL, 0, NULL, 0, 0, "");
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
    if ((o->failed && o->config[0] == '\0') || o->source == DETD_SOURCE_RUNTIME)
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
    m->o = (struct verify_obs){
        m->own[0],   m->own[1], m->own[2],
        m->own[3],   m->own[4], m->own[5],
        o->pid,      o->rank,   o->local_rank,
        o->governed, o->chaos,  o->source == DETD_SOURCE_UNGOVERNED};
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
    m->o =
        (struct verify_obs){o->id,
                            o->kernel,
                            o->key,
                            o->arch,
                            o->config,
                            ci ? ci->host : "",
                            ci ? ci->pid : 0,
                            ci ? ci->rank : -1,
                            ci ? ci->local_rank : -1,
                            o->governed,
                            o->chaos,
                            o->source == DETD__V1__SOURCE__SOURCE_UNGOVERNED};
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
                (o->failed && o->config[0] == '\0') ||
                o->source == DETD__V1__SOURCE__SOURCE_RUNTIME)
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
    size_t total = op->n_checked + op->n_unreachable;
    size_t end = cluster_names_page_end(op->checked, op->n_checked,
                                        op->unreachable, op->n_unreachable, 0,
                                        op->page_size, ADMIN_VERIFY_PAGE_BYTES);
    char token[64] = "";
    if (end < total) {
        /* The rest of the names are given by later calls: keep them. */
        struct verify_held *h = held_new(d->verifies);
        if (h == NULL) {
            rpc_fail(op->call, RPC_RESOURCE_EXHAUSTED, "out of memory");
            goto out;
        }
        h->ok = r.n_divergences == 0 && op->n_unreachable == 0;
        snprintf(token, sizeof(token), "%s%" PRIx64 ":%zu", ADMIN_VERIFY_TOKEN,
                 h->id, end);
        reply_verify(op->call, &r, &c.peers, op->checked, op->n_checked,
                     op->unreachable, op->n_unreachable, end, token);
        h->checked = op->checked;
        h->n_checked = op->n_checked;
        h->unreachable = op->unreachable;
        h->n_unreachable = op->n_unreachable;
        op->checked = op->unreachable = NULL;
        op->n_checked = op->n_unreachable = 0;
        goto out;
    }
    reply_verify(op->call, &r, &c.peers, op->checked, op->n_checked,
                 op->unreachable, op->n_unreachable, end, "");
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
    for (size_t i = 0; i < op->n_skip; i++)
        if (strcmp(op->skip[i], ev->node) == 0)
            return; /* already named incomplete: the rest of its pages */
    if (ev->err == 0 && op->bytes + ev->value_len > DAEMON_MAX_VERIFY_BYTES) {
        snprintf(why, sizeof(why),
                 "%s: its observations go past the %d MiB verify --cluster "
                 "keeps: verify --cluster is incomplete",
                 ev->node, DAEMON_MAX_VERIFY_BYTES >> 20);
        log_warn("verify --cluster: node %s", why);
        push_str(&op->unreachable, &op->n_unreachable, why);
        push_str(&op->skip, &op->n_skip, ev->node);
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
    } else if (ev->node[0] == '\0') {
        snprintf(why, sizeof(why), "node registry: %s (%s)",
                 detd_strerror(ev->err), ev->value ? ev->value : "");
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
