/*
 * votes: record-mode votes and table export rows (see votes.h).
 */
#define _GNU_SOURCE
#include "ops/votes.h"
#include "clock.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "app/convert.h"
#include "app/session.h"
#include "app/storeerr.h"
#include "app/validate.h"
#include "detd/client.h"
#include "detd/error.h"
#include "core/keyid.h"
#include "core/text.h"

#define VOTES_API_VERSION DETD_API_VERSION

void votes_on_vote(struct daemon *d, struct rpc_event *ev) {
    Detd__V1__VoteRequest *req = (Detd__V1__VoteRequest *)ev->msg;
    struct vkey vk;
    char *tj = NULL;
    d->counters.vote_calls++;
    if (validate_identity(ev->call, req->client) != 0 ||
        validate_key(d->cfg->ns, ev->call, req->key, &vk) != 0 ||
        validate_str(ev->call, "config", req->config, DAEMON_MAX_CONFIG, 1) !=
            0 ||
        validate_str(ev->call, "triton_version", req->triton_version,
                     DAEMON_MAX_IDENTITY_STRING, 0) != 0 ||
        validate_str(ev->call, "table_key", req->table_key, DETD_MAX_KEY_BYTES,
                     0) != 0)
        goto rejected;
    if (!validate_has_candidate(req->key, req->config)) {
        rpc_fail(ev->call, RPC_INVALID_ARGUMENT,
                 "config '%.200s' is not one of the key's candidates",
                 req->config);
        goto rejected;
    }
    if (req->n_timings > DETD_MAX_CANDIDATES) {
        rpc_fail(ev->call, RPC_INVALID_ARGUMENT,
                 "timings has %zu entries, over the limit of %d",
                 req->n_timings, DETD_MAX_CANDIDATES);
        goto rejected;
    }
    for (size_t i = 0; i < req->n_timings; i++) {
        const Detd__V1__CandidateTiming *t = req->timings[i];
        if (t->n_ms > DAEMON_MAX_TIMING_SAMPLES) {
            rpc_fail(ev->call, RPC_INVALID_ARGUMENT,
                     "timings[%zu].ms has %zu samples, over the limit of %d", i,
                     t->n_ms, DAEMON_MAX_TIMING_SAMPLES);
            goto rejected;
        }
        if (!validate_has_candidate(req->key, t->config)) {
            rpc_fail(ev->call, RPC_INVALID_ARGUMENT,
                     "timings[%zu].config '%.200s' is not one of the key's "
                     "candidates",
                     i, t->config);
            goto rejected;
        }
    }
    int32_t ppid;
    uint32_t puid;
    session_peer(ev->call, &ppid, &puid);
    if (fair_grow(d, ev->call, NULL, puid,
                  protobuf_c_message_get_packed_size(ev->msg)) != 0)
        goto out;
    tj = convert_timings_json(req->timings, req->n_timings);
    if (tj == NULL) {
        rpc_fail(ev->call, RPC_RESOURCE_EXHAUSTED, "out of memory");
        goto out;
    }
    const Detd__V1__ClientIdentity *c = req->client;
    const Detd__V1__DecisionKey *k = req->key;
    struct store_vote v = {
        .id = vk.id,
        .ns = vk.ns,
        .arch = k->arch,
        .kernel = k->kernel,
        .key = k->key != NULL ? k->key : "",
        .table_key = req->table_key,
        .candidates_fp = vk.fp,
        .config = req->config,
        .host = c != NULL && c->host != NULL ? c->host : "",
        .pid = c != NULL ? c->pid : 0,
        .rank = c != NULL ? c->rank : -1,
        .local_rank = c != NULL ? c->local_rank : -1,
        .device = c != NULL ? c->device_name : "",
        .timings_json = tj,
        .triton_version = req->triton_version,
        .voted_at_ms = clock_unix_ms(),
    };
    int replaced = 0;
    uint64_t total = 0;
    int rc = store_put_vote(d->store, &v, d->cfg->max_votes, &replaced, &total);
    if (rc == DETD_ELIMIT && strstr(store_errmsg(d->store), "full") != NULL) {
        d->counters.votes_refused_full++;
        if (d->counters.votes_refused_full == 1)
            log_warn("votes: the store holds --max-votes %" PRIu32
                     " votes; new votes are refused until some are "
                     "cleared (detctl reset --votes)",
                     d->cfg->max_votes);
        rpc_fail(ev->call, RPC_RESOURCE_EXHAUSTED,
                 "votes limit (--max-votes %" PRIu32 ") reached: vote for "
                 "%.200s not stored",
                 d->cfg->max_votes, k->kernel);
        goto out;
    }
    if (rc == DETD_ELIMIT) {
        rpc_fail(ev->call, RPC_INVALID_ARGUMENT, "store: %s",
                 store_errmsg(d->store));
        goto out;
    }
    if (rc != 0) {
        storeerr_reply(d, ev->call, rc);
        goto out;
    }
    log_debug("vote %s key %s -> %s (host %s pid %d%s)", k->kernel, v.key,
              v.config, v.host, v.pid, replaced ? ", replaced" : "");
    Detd__V1__VoteResponse resp = DETD__V1__VOTE_RESPONSE__INIT;
    resp.api_version = VOTES_API_VERSION;
    resp.replaced = replaced != 0;
    resp.votes = total;
    resp.max_votes = d->cfg->max_votes;
    rpc_reply(ev->call, &resp.base);
    goto out;
rejected:
    d->counters.rejected++;
out:
    free(tj);
    protobuf_c_message_free_unpacked(ev->msg, NULL);
}

/* ---- ListVotes ------------------------------------------------------- */

/* One vote as a message, with the storage it points into. */
struct vote_item {
    Detd__V1__Vote msg;
    Detd__V1__ClientIdentity cl;
    struct decision row;          /* the strings (heap) */
    struct convert_decision conv; /* the parsed timings */
};

struct vote_page {
    struct vote_item *items;
    Detd__V1__Vote **ptrs;
    size_t n, cap;
    size_t bytes;
    int full; /* stopped for the byte or count budget */
    int oom;
};

static int vote_page_cb(void *ctx, const struct store_vote *v) {
    struct vote_page *pg = ctx;
    if (pg->n == pg->cap) {
        pg->full = 1;
        return 1;
    }
    struct vote_item *it = &pg->items[pg->n];
    memset(it, 0, sizeof(*it));
    /* The store's decision row carries the strings, and its converter
     * parses the timings JSON (the same format) into messages. */
    struct decision *r = &it->row;
    r->ns = text_dup(v->ns);
    r->arch = text_dup(v->arch);
    r->kernel = text_dup(v->kernel);
    r->key = text_dup(v->key);
    r->candidates_fp = text_dup(v->candidates_fp);
    r->config = text_dup(v->config);
    r->by_host = text_dup(v->host);
    r->by_device = text_dup(v->device);
    r->triton_version = text_dup(v->triton_version);
    r->timings_json = text_dup(v->timings_json);
    r->table_file = text_dup(v->table_key); /* the table_key, see below */
    if (!r->ns || !r->arch || !r->kernel || !r->key || !r->candidates_fp ||
        !r->config || !r->by_host || !r->by_device || !r->triton_version ||
        !r->timings_json || !r->table_file) {
        decision_clear(r);
        pg->oom = 1;
        return 1;
    }
    convert_decision_fill(r, &it->conv, 1);
    detd__v1__vote__init(&it->msg);
    detd__v1__client_identity__init(&it->cl);
    it->msg.seq = v->seq;
    it->msg.namespace_ = r->ns;
    it->msg.arch = r->arch;
    it->msg.kernel = r->kernel;
    it->msg.key = r->key;
    it->msg.table_key = r->table_file;
    it->msg.candidates_fp = r->candidates_fp;
    it->msg.config = r->config;
    it->cl.host = r->by_host;
    it->cl.pid = v->pid;
    it->cl.rank = v->rank;
    it->cl.local_rank = v->local_rank;
    it->cl.device_name = r->by_device;
    it->msg.client = &it->cl;
    it->msg.timings = it->conv.msg.timings;
    it->msg.n_timings = it->conv.msg.n_timings;
    it->msg.triton_version = r->triton_version;
    it->msg.voted_at_ms = v->voted_at_ms;
    size_t sz = protobuf_c_message_get_packed_size(&it->msg.base) + 16;
    if (pg->n > 0 && pg->bytes + sz > DAEMON_MAX_PAGE_BYTES) {
        convert_decision_clear(&it->conv);
        decision_clear(r);
        pg->full = 1;
        return 1;
    }
    pg->bytes += sz;
    pg->ptrs[pg->n] = &it->msg;
    pg->n++;
    return 0;
}

static const char *nonempty(const char *s) {
    return s != NULL && s[0] != '\0' ? s : NULL;
}

void votes_list(struct daemon *d, struct rpc_event *ev) {
    Detd__V1__ListVotesRequest *req = (Detd__V1__ListVotesRequest *)ev->msg;
    struct vote_page pg = {0};
    const char *ns = nonempty(req->namespace_) ? req->namespace_ : d->cfg->ns;
    if (validate_str(ev->call, "namespace", req->namespace_,
                     DAEMON_MAX_NAMESPACE, 0) != 0 ||
        validate_str(ev->call, "arch", req->arch, DAEMON_MAX_ARCH, 0) != 0 ||
        validate_str(ev->call, "kernel", req->kernel, DAEMON_MAX_KERNEL, 0) !=
            0)
        goto out;
    if (req->after > INT64_MAX) {
        rpc_fail(ev->call, RPC_INVALID_ARGUMENT,
                 "after %" PRIu64 " is out of range", req->after);
        goto out;
    }
    uint32_t limit = req->limit > 0 && req->limit < DAEMON_MAX_LIST
                         ? req->limit
                         : DAEMON_MAX_LIST;
    uint64_t total = 0;
    if (store_count_votes(d->store, ns, &total) != 0)
        goto store_err;
    size_t alloc = total < limit ? (size_t)total + 1 : (size_t)limit + 1;
    pg.items = calloc(alloc, sizeof(*pg.items));
    pg.ptrs = calloc(alloc, sizeof(*pg.ptrs));
    if (pg.items == NULL || pg.ptrs == NULL) {
        rpc_fail(ev->call, RPC_RESOURCE_EXHAUSTED, "out of memory");
        goto out;
    }
    /* One row more than the page holds tells whether more follow. */
    pg.cap = alloc - 1;
    if (store_each_vote(d->store, ns, nonempty(req->arch),
                        nonempty(req->kernel), req->after, (uint32_t)alloc,
                        vote_page_cb, &pg) != 0)
        goto store_err;
    if (pg.oom) {
        rpc_fail(ev->call, RPC_RESOURCE_EXHAUSTED, "out of memory");
        goto out;
    }
    Detd__V1__ListVotesResponse resp = DETD__V1__LIST_VOTES_RESPONSE__INIT;
    resp.api_version = VOTES_API_VERSION;
    resp.votes = pg.ptrs;
    resp.n_votes = pg.n;
    resp.truncated = pg.full;
    resp.next_after = pg.n > 0 ? pg.items[pg.n - 1].msg.seq : req->after;
    resp.total = total;
    resp.max_votes = d->cfg->max_votes;
    rpc_reply(ev->call, &resp.base);
    goto out;
store_err:
    rpc_fail(ev->call, RPC_INTERNAL, "store: %s", store_errmsg(d->store));
out:
    for (size_t i = 0; i < pg.n; i++) {
        convert_decision_clear(&pg.items[i].conv);
        decision_clear(&pg.items[i].row);
    }
    free(pg.items);
    free(pg.ptrs);
    protobuf_c_message_free_unpacked(ev->msg, NULL);
}

/* ---- ExportDecisions ------------------------------------------------- */

struct dec_page {
    struct decision *rows;
    struct convert_decision *conv;
    Detd__V1__Decision **ptrs;
    size_t n, cap;
    size_t bytes;
    int full;
    int oom;
};

static int dec_page_cb(void *ctx, const struct decision *r) {
    struct dec_page *pg = ctx;
    if (pg->n == pg->cap) {
        pg->full = 1;
        return 1;
    }
    struct decision *c = &pg->rows[pg->n];
    if (decision_copy(r, 0, c) != 0) {
        pg->oom = 1;
        return 1;
    }
    /* Export needs no timings: rows stay small. */
    convert_decision_fill(c, &pg->conv[pg->n], 0);
    size_t sz =
        protobuf_c_message_get_packed_size(&pg->conv[pg->n].msg.base) + 16;
    if (pg->n > 0 && pg->bytes + sz > DAEMON_MAX_PAGE_BYTES) {
        convert_decision_clear(&pg->conv[pg->n]);
        decision_clear(c);
        pg->full = 1;
        return 1;
    }
    pg->bytes += sz;
    pg->ptrs[pg->n] = &pg->conv[pg->n].msg;
    pg->n++;
    return 0;
}

void votes_export_decisions(struct daemon *d, struct rpc_event *ev) {
    Detd__V1__ExportDecisionsRequest *req =
        (Detd__V1__ExportDecisionsRequest *)ev->msg;
    struct dec_page pg = {0};
    const char *ns = nonempty(req->namespace_) ? req->namespace_ : d->cfg->ns;
    if (validate_str(ev->call, "namespace", req->namespace_,
                     DAEMON_MAX_NAMESPACE, 0) != 0 ||
        validate_str(ev->call, "arch", req->arch, DAEMON_MAX_ARCH, 1) != 0 ||
        validate_str(ev->call, "kernel", req->kernel, DAEMON_MAX_KERNEL, 0) !=
            0 ||
        validate_str(ev->call, "after_id", req->after_id, KEYID_HEX_LEN, 0) !=
            0)
        goto out;
    uint32_t limit = req->limit > 0 && req->limit < DAEMON_MAX_LIST
                         ? req->limit
                         : DAEMON_MAX_LIST;
    size_t alloc = (size_t)limit + 1;
    pg.rows = calloc(alloc, sizeof(*pg.rows));
    pg.conv = calloc(alloc, sizeof(*pg.conv));
    pg.ptrs = calloc(alloc, sizeof(*pg.ptrs));
    if (pg.rows == NULL || pg.conv == NULL || pg.ptrs == NULL) {
        rpc_fail(ev->call, RPC_RESOURCE_EXHAUSTED, "out of memory");
        goto out;
    }
    pg.cap = limit;
    int rc = store_each_decision_page(d->store, ns, req->arch,
                                      nonempty(req->kernel), req->after_id,
                                      (uint32_t)alloc, dec_page_cb, &pg);
    if (rc != 0) {
        storeerr_reply(d, ev->call, rc);
        goto out;
    }
    if (pg.oom) {
        rpc_fail(ev->call, RPC_RESOURCE_EXHAUSTED, "out of memory");
        goto out;
    }
    Detd__V1__ExportDecisionsResponse resp =
        DETD__V1__EXPORT_DECISIONS_RESPONSE__INIT;
    resp.api_version = VOTES_API_VERSION;
    resp.decisions = pg.ptrs;
    resp.n_decisions = pg.n;
    resp.truncated = pg.full;
    resp.next_after_id =
        pg.n > 0 ? pg.rows[pg.n - 1].id : (req->after_id ? req->after_id : "");
    rpc_reply(ev->call, &resp.base);
out:
    for (size_t i = 0; i < pg.n; i++) {
        convert_decision_clear(&pg.conv[i]);
        decision_clear(&pg.rows[i]);
    }
    free(pg.rows);
    free(pg.conv);
    free(pg.ptrs);
    protobuf_c_message_free_unpacked(ev->msg, NULL);
}

/* ---- Reset votes ----------------------------------------------------- */

void votes_reset(struct daemon *d, struct rpc_event *ev) {
    Detd__V1__ResetRequest *req = (Detd__V1__ResetRequest *)ev->msg;
    const char *ns = nonempty(req->namespace_) ? req->namespace_ : d->cfg->ns;
    const char *kernel = nonempty(req->kernel);
    uint64_t removed = 0;
    if ((kernel == NULL) == !req->all) {
        rpc_fail(ev->call, RPC_INVALID_ARGUMENT,
                 "reset of votes takes exactly one of a kernel or all=true");
        goto out;
    }
    int rc = store_reset_votes(d->store, ns, kernel, &removed);
    if (rc != 0) {
        storeerr_reply(d, ev->call, rc);
        goto out;
    }
    log_info("reset votes of namespace '%s' %s%s: %" PRIu64 " removed", ns,
             kernel ? "kernel " : "all", kernel ? kernel : "", removed);
    Detd__V1__ResetResponse resp = DETD__V1__RESET_RESPONSE__INIT;
    resp.api_version = VOTES_API_VERSION;
    resp.removed = removed;
    rpc_reply(ev->call, &resp.base);
out:
    protobuf_c_message_free_unpacked(ev->msg, NULL);
}
