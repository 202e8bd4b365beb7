/*
 * obslist: ListObservations in pages (see obslist.h).
 *
 * A page is bounded twice: by count and by the bytes of its strings, so an
 * answer stays well under the message cap whatever the keys weigh. The
 * page token is the store position of the page's last row (decimal).
 */
#define _GNU_SOURCE
#include "ops/obslist.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/limits.h"
#include "core/text.h"
#include "data/store.h"
#include "detd.pb-c.h"
#include "detd/client.h"
#include "io/rpc.h"

enum {
    OS_ID,
    OS_NS,
    OS_ARCH,
    OS_KERNEL,
    OS_KEY,
    OS_CONFIG,
    OS_HOST,
    OS_DEVICE,
    OS_NODE,
    OS_JOB,
    OS_ERROR,
    OS_WHY,
    OS_N
};

/* One observation of the page, its strings owned. */
struct obs_row {
    Detd__V1__Observation o;
    Detd__V1__ClientIdentity c;
    Detd__V1__PeerIdentity p;
    Detd__V1__AuditResult a;
    char *s[OS_N];
    char *differing; /* the names joined by '\n', split in place */
    char **names;
};

struct obs_page {
    struct obs_row *rows;
    size_t n, max;
    size_t bytes;
    const char *node; /* rows older than schema 4 */
    int64_t last_pos;
    int more, oom;
};

static void row_clear(struct obs_row *r) {
    for (int i = 0; i < OS_N; i++)
        free(r->s[i]);
    free(r->differing);
    free(r->names);
}

/* Split r->differing into r->a's names. */
static int row_audit(struct obs_row *r, int32_t status) {
    detd__v1__audit_result__init(&r->a);
    r->a.status = (Detd__V1__AuditStatus)status;
    size_t n = r->differing[0] != '\0';
    for (const char *p = r->differing; *p != '\0'; p++)
        n += *p == '\n';
    if (n == 0)
        return 0;
    if ((r->names = calloc(n, sizeof(*r->names))) == NULL)
        return -1;
    char *p = r->differing;
    for (size_t i = 0; i < n; i++) {
        r->names[i] = p;
        char *nl = strchr(p, '\n');
        if (nl != NULL) {
            *nl = '\0';
            p = nl + 1;
        }
    }
    r->a.differing = r->names;
    r->a.n_differing = n;
    return 0;
}

static int page_cb(void *ctx, const struct store_observation *o, int64_t pos) {
    struct obs_page *pg = ctx;
    const char *src[OS_N] = {
        [OS_ID] = o->id,
        [OS_NS] = o->ns,
        [OS_ARCH] = o->arch,
        [OS_KERNEL] = o->kernel,
        [OS_KEY] = o->key,
        [OS_CONFIG] = o->config,
        [OS_HOST] = o->host,
        [OS_DEVICE] = o->device,
        [OS_NODE] = o->node[0] ? o->node : pg->node,
        [OS_JOB] = o->job,
        [OS_ERROR] = o->error,
        [OS_WHY] = o->why,
    };
    size_t sz = 96 + strlen(o->audit_differing);
    for (int i = 0; i < OS_N; i++)
        sz += strlen(src[i]);
    if (pg->n == pg->max ||
        (pg->n > 0 && pg->bytes + sz > DAEMON_MAX_PAGE_BYTES)) {
        pg->more = 1;
        return 1;
    }
    struct obs_row *r = &pg->rows[pg->n];
    memset(r, 0, sizeof(*r));
    for (int i = 0; i < OS_N; i++)
        if ((r->s[i] = text_dup(src[i])) == NULL)
            goto oom;
    if ((r->differing = text_dup(o->audit_differing)) == NULL ||
        row_audit(r, o->audit) != 0)
        goto oom;
    detd__v1__client_identity__init(&r->c);
    r->c.host = r->s[OS_HOST];
    r->c.pid = o->pid;
    r->c.rank = o->rank;
    r->c.local_rank = o->local_rank;
    r->c.device_name = r->s[OS_DEVICE];
    r->c.job = r->s[OS_JOB];
    detd__v1__peer_identity__init(&r->p);
    r->p.pid = o->pid;
    r->p.uid = o->peer_uid;
    r->p.node = r->s[OS_NODE];
    r->p.claimed_pid = o->claimed_pid;
    Detd__V1__Observation *x = &r->o;
    detd__v1__observation__init(x);
    x->id = r->s[OS_ID];
    x->namespace_ = r->s[OS_NS];
    x->arch = r->s[OS_ARCH];
    x->kernel = r->s[OS_KERNEL];
    x->key = r->s[OS_KEY];
    x->config = r->s[OS_CONFIG];
    x->source = (Detd__V1__Source)o->source;
    x->governed = o->governed;
    x->chaos = o->chaos;
    x->at_ms = o->at_ms;
    x->failed = o->failed;
    x->error = r->s[OS_ERROR];
    x->why = r->s[OS_WHY];
    pg->n++;
    pg->bytes += sz;
    pg->last_pos = pos;
    return 0;
oom:
    row_clear(r);
    pg->oom = 1;
    return 1;
}

/* The position a page token names: decimal digits, nothing else. */
static int parse_token(const char *t, int64_t *ret) {
    int64_t v = 0;
    if (t == NULL || t[0] == '\0') {
        *ret = 0;
        return 0;
    }
    for (const char *p = t; *p != '\0'; p++) {
        if (*p < '0' || *p > '9' || v > (INT64_MAX - 9) / 10)
            return -1;
        v = v * 10 + (*p - '0');
    }
    *ret = v;
    return 0;
}

/* See obslist.h. */
void obslist_serve(struct daemon *d, struct rpc_event *ev) {
    Detd__V1__ListObservationsRequest *req =
        (Detd__V1__ListObservationsRequest *)ev->msg;
    const char *ns =
        req->namespace_ && req->namespace_[0] ? req->namespace_ : d->cfg->ns;
    struct obs_page pg = {0};
    Detd__V1__Observation **pp = NULL;
    char next[24] = "";
    int64_t after;
    if (parse_token(req->page_token, &after) != 0) {
        rpc_fail(ev->call, RPC_INVALID_ARGUMENT,
                 "page_token '%.40s' is not one this daemon gave: pass \"\" "
                 "or a next_page_token",
                 req->page_token);
        goto out;
    }
    pg.max = req->page_size == 0 || req->page_size > DAEMON_MAX_OBS_PAGE
                 ? DAEMON_MAX_OBS_PAGE
                 : req->page_size;
    pg.node = d->node;
    pg.rows = calloc(pg.max, sizeof(*pg.rows));
    pp = calloc(pg.max + 1, sizeof(*pp));
    if (pg.rows == NULL || pp == NULL) {
        rpc_fail(ev->call, RPC_RESOURCE_EXHAUSTED, "out of memory");
        goto out;
    }
    /* One row past the page tells whether another page follows. */
    if (store_each_observation_page(d->store, ns, after, (uint32_t)pg.max + 1,
                                    page_cb, &pg) != 0 ||
        pg.oom) {
        rpc_fail(ev->call, RPC_INTERNAL, "observations: %s",
                 pg.oom ? "out of memory" : store_errmsg(d->store));
        goto out;
    }
    for (size_t i = 0; i < pg.n; i++) {
        pg.rows[i].o.client = &pg.rows[i].c;
        pg.rows[i].o.peer = &pg.rows[i].p;
        pg.rows[i].o.audit = &pg.rows[i].a;
        pp[i] = &pg.rows[i].o;
    }
    if (pg.more)
        snprintf(next, sizeof next, "%" PRId64, pg.last_pos);
    Detd__V1__ListObservationsResponse resp =
        DETD__V1__LIST_OBSERVATIONS_RESPONSE__INIT;
    resp.api_version = DETD_API_VERSION;
    resp.observations = pp;
    resp.n_observations = pg.n;
    resp.truncated = pg.more;
    resp.next_page_token = next;
    rpc_reply(ev->call, &resp.base);
out:
    for (size_t i = 0; i < pg.n; i++)
        row_clear(&pg.rows[i]);
    free(pg.rows);
    free(pp);
    protobuf_c_message_free_unpacked(ev->msg, NULL);
}
