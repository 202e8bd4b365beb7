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
#include "lockfmt.h"
#include "core/keyid.h"
#include "detd/client.h"
#include "detd/error.h"
#include "strfmt.h"

#define LOCK_API_VERSION DETD_API_VERSION

/* s (NULL: "") at most max bytes and, when required, not empty; else why
 * names the field. */
static int str_ok(const char *what, size_t i, const char *field, const char *s,
                  size_t max, int required, char *why, size_t len) {
    size_t n = s != NULL ? strlen(s) : 0;
    if (required && n == 0)
        snprintf(why, len, "%s[%zu].%s is required", what, i, field);
    else if (n > max)
        snprintf(why, len, "%s[%zu].%s is %zu bytes, over the limit of %zu",
                 what, i, field, n, max);
    else
        return 1;
    return 0;
}

/* One decision of a lock (what[i]), checked: 0, or -1 with why naming
 * the field ("decisions[3].config"). */
static int check_one(const char *what, size_t i, const Detd__V1__Decision *m,
                     char *why, size_t len) {
    const Detd__V1__ClientIdentity *by = m->decided_by;
    if (!str_ok(what, i, "arch", m->arch, DAEMON_MAX_ARCH, 1, why, len) ||
        !str_ok(what, i, "kernel", m->kernel, DAEMON_MAX_KERNEL, 1, why, len) ||
        !str_ok(what, i, "key", m->key, DETD_MAX_KEY_BYTES, 0, why, len) ||
        !str_ok(what, i, "config", m->config, DAEMON_MAX_CONFIG, 1, why, len) ||
        !str_ok(what, i, "triton_version", m->triton_version,
                DAEMON_MAX_IDENTITY_STRING, 0, why, len) ||
        (by != NULL &&
         (!str_ok(what, i, "decided_by.host", by->host,
                  DAEMON_MAX_IDENTITY_STRING, 0, why, len) ||
          !str_ok(what, i, "decided_by.device_name", by->device_name,
                  DAEMON_MAX_IDENTITY_STRING, 0, why, len) ||
          !str_ok(what, i, "decided_by.arch", by->arch,
                  DAEMON_MAX_IDENTITY_STRING, 0, why, len))) ||
        (m->decided_peer != NULL &&
         !str_ok(what, i, "decided_peer.node", m->decided_peer->node,
                 DAEMON_MAX_IDENTITY_STRING, 0, why, len)))
        return -1;
    if (m->candidates_fp == NULL || !lockfmt_is_hex64(m->candidates_fp)) {
        snprintf(why, len,
                 "%s[%zu].candidates_fp is not 64 lowercase hex digits", what,
                 i);
        return -1;
    }
    if (m->n_candidates < 1 || m->n_candidates > DETD_MAX_CANDIDATES) {
        snprintf(why, len, "%s[%zu].n_candidates %d is not 1 to %d", what, i,
                 (int)m->n_candidates, DETD_MAX_CANDIDATES);
        return -1;
    }
    if (m->n_timings > DETD_MAX_CANDIDATES) {
        snprintf(why, len, "%s[%zu].timings: %zu, over the limit of %d", what,
                 i, m->n_timings, DETD_MAX_CANDIDATES);
        return -1;
    }
    for (size_t t = 0; t < m->n_timings; t++) {
        const Detd__V1__CandidateTiming *c = m->timings[t];
        if (!str_ok(what, i, "timings[].config", c->config, DAEMON_MAX_CONFIG,
                    1, why, len))
            return -1;
        if (c->n_ms > DAEMON_MAX_TIMING_SAMPLES) {
            snprintf(why, len,
                     "%s[%zu].timings[%zu].ms: %zu samples, over the limit of "
                     "%d",
                     what, i, t, c->n_ms, DAEMON_MAX_TIMING_SAMPLES);
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

/* What storing a lock's decisions did. */
struct lock_result {
    size_t added, unchanged, conflicts, shown;
    struct decision stored[LOCK_MAX_CONFLICTS]; /* the first conflicts */
};

static void lock_result_clear(struct lock_result *r) {
    for (size_t i = 0; i < r->shown; i++)
        decision_clear(&r->stored[i]);
    r->shown = 0;
}

/*
 * Store ms[0..n) (checked) as decisions of namespace ns from lock file
 * (sha256 its hash), in one transaction; *r gets the counts and the first
 * conflicts (lock_result_clear()). Returns 0, DETD_ENOMEM or the store's
 * error (nothing stored).
 */
static int lock_store(struct daemon *d, const char *ns, const char *file,
                      const char *sha256, Detd__V1__Decision *const *ms,
                      size_t n, struct lock_result *r) {
    struct decision *rows = calloc(n + 1, sizeof(*rows));
    char(*ids)[KEYID_HEX_LEN + 1] = calloc(n + 1, sizeof(*ids));
    char **timings = calloc(n + 1, sizeof(*timings));
    int *res = calloc(n + 1, sizeof(*res));
    char *tf = strfmt("lock:%s", file);
    int rc = DETD_ENOMEM;
    if (rows == NULL || ids == NULL || timings == NULL || res == NULL ||
        tf == NULL)
        goto out;
    for (size_t i = 0; i < n; i++)
        if (row_of(ns, tf, ms[i], ids[i], &rows[i], &timings[i]) != 0)
            goto out;
    if ((rc = store_put_decisions(d->store, rows, n, res)) != 0)
        goto out;
    for (size_t i = 0; i < n; i++) {
        if (res[i] == 0) {
            r->added++;
            continue;
        }
        struct decision got;
        if ((rc = store_get_decision(d->store, rows[i].id, &got)) != 0)
            goto out;
        if (strcmp(got.config, rows[i].config) == 0) {
            r->unchanged++;
            decision_clear(&got);
            continue;
        }
        if (r->conflicts++ == 0)
            log_warn("lock '%s': %s key %s is decided already as %s, the "
                     "lock says %s: the store's decision is kept (detctl "
                     "reset first to take the lock's)",
                     file, rows[i].kernel, rows[i].key, got.config,
                     rows[i].config);
        if (r->shown < LOCK_MAX_CONFLICTS)
            r->stored[r->shown++] = got;
        else
            decision_clear(&got);
    }
    log_info("lock '%s' (sha256 %.12s) into namespace '%s': %zu decisions "
             "added, %zu unchanged, %zu conflicting (kept as stored)",
             file, sha256 != NULL ? sha256 : "", ns, r->added, r->unchanged,
             r->conflicts);
out:
    for (size_t i = 0; timings != NULL && i < n; i++)
        free(timings[i]);
    free(timings);
    free(rows);
    free(ids);
    free(res);
    free(tf);
    return rc;
}

/* See lock.h. */
void lock_import(struct daemon *d, struct rpc_event *ev) {
    const Detd__V1__ImportLockRequest *req =
        (const Detd__V1__ImportLockRequest *)ev->msg;
    const char *ns =
        req->namespace_ && req->namespace_[0] ? req->namespace_ : d->cfg->ns;
    size_t n = req->n_decisions;
    char why[512];
    struct lock_result *r = NULL;
    struct convert_decision *pbs = NULL;
    Detd__V1__Decision **conflicts = NULL;
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
        if (check_one("decisions", i, req->decisions[i], why, sizeof why)) {
            rpc_fail(ev->call, RPC_INVALID_ARGUMENT, "%s", why);
            goto out;
        }
    r = calloc(1, sizeof(*r));
    pbs = calloc(LOCK_MAX_CONFLICTS, sizeof(*pbs));
    conflicts = calloc(LOCK_MAX_CONFLICTS, sizeof(*conflicts));
    if (r == NULL || pbs == NULL || conflicts == NULL) {
        rpc_fail(ev->call, RPC_RESOURCE_EXHAUSTED, "out of memory");
        goto out;
    }
    int rc = lock_store(d, ns, req->file, req->sha256, req->decisions, n, r);
    if (rc != 0) {
        storeerr_reply(d, ev->call, rc);
        goto out;
    }
    for (size_t i = 0; i < r->shown; i++) {
        convert_decision_fill(&r->stored[i], &pbs[i], 1);
        conflicts[i] = &pbs[i].msg;
    }
    Detd__V1__ImportLockResponse resp = DETD__V1__IMPORT_LOCK_RESPONSE__INIT;
    resp.api_version = LOCK_API_VERSION;
    resp.added = r->added;
    resp.unchanged = r->unchanged;
    resp.conflicts = conflicts;
    resp.n_conflicts = r->shown;
    resp.conflicts_total = r->conflicts;
    rpc_reply(ev->call, &resp.base);
    for (size_t i = 0; i < r->shown; i++)
        convert_decision_clear(&pbs[i]);
out:
    if (r != NULL)
        lock_result_clear(r);
    free(r);
    free(pbs);
    free(conflicts);
    protobuf_c_message_free_unpacked(ev->msg, NULL);
}

/* See lock.h. */
int lock_load_at_start(struct daemon *d) {
    const char *path = d->cfg->lock;
    if (path == NULL)
        return 0;
    char why[700];
    struct lockfmt *f = NULL;
    struct lockfmt_msg *m = NULL;
    Detd__V1__Decision **ms = NULL;
    struct lock_result *r = NULL;
    int ret = -1, rc = lockfmt_load(path, &f, why, sizeof why);
    if (rc != 0) {
        log_error("--lock '%s': %s", path,
                  rc == DETD_ENOMEM ? "out of memory" : why);
        return -1;
    }
    m = calloc(f->n + 1, sizeof(*m));
    ms = calloc(f->n + 1, sizeof(*ms));
    r = calloc(1, sizeof(*r));
    if (m == NULL || ms == NULL || r == NULL)
        goto oom;
    for (size_t i = 0; i < f->n; i++) {
        if (lockfmt_msg_fill(&f->e[i], &m[i]) != 0)
            goto oom;
        ms[i] = &m[i].d;
        if (check_one("entries", i, ms[i], why, sizeof why) != 0) {
            log_error("--lock '%s': %s", path, why);
            goto out;
        }
    }
    const char *base = strrchr(path, '/');
    rc = lock_store(d, d->cfg->ns, base != NULL ? base + 1 : path, f->sha256,
                    ms, f->n, r);
    if (rc != 0) {
        log_error("--lock '%s': store its decisions: %s", path,
                  rc == DETD_ENOMEM ? "out of memory" : store_errmsg(d->store));
        goto out;
    }
    ret = 0;
    goto out;
oom:
    log_error("--lock '%s': out of memory", path);
out:
    if (r != NULL)
        lock_result_clear(r);
    free(r);
    for (size_t i = 0; m != NULL && i < f->n; i++)
        lockfmt_msg_clear(&m[i]);
    free(m);
    free(ms);
    lockfmt_free(f);
    return ret;
}
