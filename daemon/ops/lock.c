/* lock: Admin.ImportLock (see lock.h). */
#define _GNU_SOURCE
#include "ops/lock.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/convert.h"
#include "app/storeerr.h"
#include "app/validate.h"
#include "config/limits.h"
#include "config/log.h"
#include "core/keyid.h"
#include "detd/client.h"
#include "detd/error.h"
#include "strfmt.h"

#define LOCK_API_VERSION DETD_API_VERSION

/* 64 lowercase hex digits. */
static int is_hex64(const char *s) {
    size_t n = 0;
    for (; s[n] != '\0'; n++)
        if (!((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f')))
            return 0;
    return n == KEYID_HEX_LEN;
}

/* One decision of the request, checked: 0, or -1 with the call failed
 * naming the field ("decisions[3].config"). */
static int check_one(rpc_call *call, size_t i, const Detd__V1__Decision *m) {
    char f[6][48];
    static const char *const names[] = {"arch",   "kernel",         "key",
                                        "config", "triton_version", "timings"};
    for (size_t k = 0; k < 6; k++)
        snprintf(f[k], sizeof f[k], "decisions[%zu].%s", i, names[k]);
    if (validate_str(call, f[0], m->arch, DAEMON_MAX_ARCH, 1) ||
        validate_str(call, f[1], m->kernel, DAEMON_MAX_KERNEL, 1) ||
        validate_str(call, f[2], m->key, DETD_MAX_KEY_BYTES, 0) ||
        validate_str(call, f[3], m->config, DAEMON_MAX_CONFIG, 1) ||
        validate_str(call, f[4], m->triton_version, DAEMON_MAX_IDENTITY_STRING,
                     0) ||
        validate_identity(call, m->decided_by))
        return -1;
    if (m->candidates_fp == NULL || !is_hex64(m->candidates_fp)) {
        rpc_fail(call, RPC_INVALID_ARGUMENT,
                 "decisions[%zu].candidates_fp is not 64 lowercase hex digits",
                 i);
        return -1;
    }
    if (m->n_candidates < 1 || m->n_candidates > DETD_MAX_CANDIDATES) {
        rpc_fail(call, RPC_INVALID_ARGUMENT,
                 "decisions[%zu].n_candidates %d is not 1 to %d", i,
                 (int)m->n_candidates, DETD_MAX_CANDIDATES);
        return -1;
    }
    if (m->n_timings > DETD_MAX_CANDIDATES) {
        rpc_fail(call, RPC_INVALID_ARGUMENT, "%s: %zu, over the limit of %d",
                 f[5], m->n_timings, DETD_MAX_CANDIDATES);
        return -1;
    }
    for (size_t t = 0; t < m->n_timings; t++) {
        const Detd__V1__CandidateTiming *c = m->timings[t];
        char what[96];
        snprintf(what, sizeof what, "%s[%zu].config", f[5], t);
        if (validate_str(call, what, c->config, DAEMON_MAX_CONFIG, 1))
            return -1;
        if (c->n_ms > DAEMON_MAX_TIMING_SAMPLES) {
            rpc_fail(call, RPC_INVALID_ARGUMENT,
                     "%s[%zu].ms: %zu samples, over the limit of %d", f[5], t,
                     c->n_ms, DAEMON_MAX_TIMING_SAMPLES);
            return -1;
        }
    }
    return 0;
}

/* The row of m for namespace ns (strings borrowed from m, ids and the
 * timings JSON into the caller's id and *ret_timings, heap). */
static int row_of(const char *ns, const char *file, const Detd__V1__Decision *m,
                  char id[KEYID_HEX_LEN + 1], struct decision *r,
                  char **ret_timings) {
    const Detd__V1__ClientIdentity *by = m->decided_by;
    const Detd__V1__PeerIdentity *peer = m->decided_peer;
    keyid_decision_id(ns, m->arch, m->kernel, m->key ? m->key : "",
                      m->candidates_fp, id);
    *ret_timings = convert_timings_json(m->timings, m->n_timings);
    if (*ret_timings == NULL)
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
    };
    return 0;
}

/* See lock.h. */
void lock_import(struct daemon *d, struct rpc_event *ev) {
    const Detd__V1__ImportLockRequest *req =
        (const Detd__V1__ImportLockRequest *)ev->msg;
    const char *ns =
        req->namespace_ && req->namespace_[0] ? req->namespace_ : d->cfg->ns;
    size_t n = req->n_decisions;
    struct decision *rows = NULL;
    char(*ids)[KEYID_HEX_LEN + 1] = NULL;
    char **timings = NULL, *file = NULL;
    int *res = NULL;
    struct decision *stored = NULL;
    struct convert_decision *pbs = NULL;
    Detd__V1__Decision **conflicts = NULL;
    size_t nconf = 0, shown = 0, added = 0, unchanged = 0;
    if (d->cluster != NULL) {
        rpc_fail(ev->call, RPC_FAILED_PRECONDITION,
                 "a lock is imported into the local backend only: with etcd, "
                 "decisions are committed through etcd (import the lock into "
                 "one daemon's store, or let the job decide)");
        goto out;
    }
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
        if (check_one(ev->call, i, req->decisions[i]) != 0)
            goto out;
    rows = calloc(n + 1, sizeof(*rows));
    ids = calloc(n + 1, sizeof(*ids));
    timings = calloc(n + 1, sizeof(*timings));
    res = calloc(n + 1, sizeof(*res));
    stored = calloc(LOCK_MAX_CONFLICTS, sizeof(*stored));
    pbs = calloc(LOCK_MAX_CONFLICTS, sizeof(*pbs));
    conflicts = calloc(LOCK_MAX_CONFLICTS, sizeof(*conflicts));
    file = strfmt("lock:%s", req->file);
    if (rows == NULL || ids == NULL || timings == NULL || res == NULL ||
        stored == NULL || pbs == NULL || conflicts == NULL || file == NULL)
        goto oom;
    for (size_t i = 0; i < n; i++)
        if (row_of(ns, file, req->decisions[i], ids[i], &rows[i],
                   &timings[i]) != 0)
            goto oom;
    int rc = store_put_decisions(d->store, rows, n, res);
    if (rc != 0) {
        storeerr_reply(d, ev->call, rc);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        if (res[i] == 0) {
            added++;
            continue;
        }
        struct decision got;
        if ((rc = store_get_decision(d->store, rows[i].id, &got)) != 0) {
            storeerr_reply(d, ev->call, rc);
            goto out;
        }
        if (strcmp(got.config, rows[i].config) == 0) {
            unchanged++;
            decision_clear(&got);
            continue;
        }
        if (nconf++ == 0)
            log_warn("lock '%s': %s key %s is decided already as %s, the "
                     "lock says %s: the store's decision is kept (detctl "
                     "reset first to take the lock's)",
                     req->file, rows[i].kernel, rows[i].key, got.config,
                     rows[i].config);
        if (shown < LOCK_MAX_CONFLICTS) {
            stored[shown] = got;
            convert_decision_fill(&stored[shown], &pbs[shown], 1);
            conflicts[shown] = &pbs[shown].msg;
            shown++;
        } else {
            decision_clear(&got);
        }
    }
    log_info("lock '%s' (sha256 %.12s) into namespace '%s': %zu decisions "
             "added, %zu unchanged, %zu conflicting (kept as stored)",
             req->file, req->sha256 ? req->sha256 : "", ns, added, unchanged,
             nconf);
    Detd__V1__ImportLockResponse resp = DETD__V1__IMPORT_LOCK_RESPONSE__INIT;
    resp.api_version = LOCK_API_VERSION;
    resp.added = added;
    resp.unchanged = unchanged;
    resp.conflicts = conflicts;
    resp.n_conflicts = shown;
    resp.conflicts_total = nconf;
    rpc_reply(ev->call, &resp.base);
    goto out;
oom:
    rpc_fail(ev->call, RPC_RESOURCE_EXHAUSTED, "out of memory");
out:
    for (size_t i = 0; i < shown; i++) {
        convert_decision_clear(&pbs[i]);
        decision_clear(&stored[i]);
    }
    for (size_t i = 0; timings != NULL && i < n; i++)
        free(timings[i]);
    free(timings);
    free(rows);
    free(ids);
    free(res);
    free(stored);
    free(pbs);
    free(conflicts);
    free(file);
    protobuf_c_message_free_unpacked(ev->msg, NULL);
}
