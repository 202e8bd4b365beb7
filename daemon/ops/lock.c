/* lock: Admin.ImportLock (see lock.h). */
#define _GNU_SOURCE
#include "ops/lock.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/convert.h"
#include "app/storeerr.h"
#include "clock.h"
#include "app/validate.h"
#include "config/limits.h"
#include "config/log.h"
#include "lockfmt.h"
#include "core/keyid.h"
#include "detd/client.h"
#include "detd/error.h"
#include "provfmt.h"
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
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%s[%zu].timing", what, i);
    if (provfmt_check(m->timing, prefix, why, len) != 0)
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
                  char **ret_timings, char **ret_timing) {
    const Detd__V1__ClientIdentity *by = m->decided_by;
    const Detd__V1__PeerIdentity *peer = m->decided_peer;
    keyid_decision_id(ns, m->arch, m->kernel, m->key ? m->key : "",
                      m->candidates_fp, id);
    *ret_timings = convert_timings_json(m->timings, m->n_timings);
    *ret_timing = m->timing != NULL ? provfmt_json(m->timing) : strdup("");
    if (*ret_timings == NULL || *ret_timing == NULL)
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
        .timing_json = *ret_timing,
    };
    return 0;
}

/* What storing a lock's decisions did. */
struct lock_result {
    size_t added, unchanged, conflicts, shown, skipped;
    struct decision stored[LOCK_MAX_CONFLICTS]; /* the first conflicts */
    char *skips[LOCK_MAX_CONFLICTS];            /* the first skips' lines */
};

static void lock_result_clear(struct lock_result *r) {
    for (size_t i = 0; i < r->shown; i++)
        decision_clear(&r->stored[i]);
    for (size_t i = 0; i < r->skipped && i < LOCK_MAX_CONFLICTS; i++)
        free(r->skips[i]);
    r->shown = 0;
}

/* One field of the importing run's provenance that a lock entry must
 * match (ImportLockRequest.require, --lock-require). */
struct lock_req {
    const char *field, *value;
};

/* Why m does not match the run (heap; NULL: it matches, or out of
 * memory with *ret_oom set). */
static char *lock_mismatch(const Detd__V1__Decision *m,
                           const struct lock_req *req, size_t n_req,
                           int *ret_oom) {
    for (size_t k = 0; k < n_req; k++) {
        const char *v = provfmt_field(m, req[k].field);
        if (v == NULL || strcmp(v, req[k].value) == 0)
            continue;
        char *why =
            strfmt("%s: the lock says %s, this run %s (must match)",
                   req[k].field, v[0] ? v : "(not recorded)", req[k].value);
        *ret_oom = why == NULL;
        return why;
    }
    return NULL;
}

/*
 * Leave out of ms[0..*n) (reordered in place, *n the entries kept) every
 * entry that does not match req: recorded in the store for explain
 * (key id in ns), counted, its line kept in r (the first ones). 0, or an
 * error (the store's, DETD_ENOMEM).
 */
static int lock_filter(struct daemon *d, const char *ns, const char *tf,
                       Detd__V1__Decision **ms, size_t *n,
                       const struct lock_req *req, size_t n_req,
                       struct lock_result *r) {
    size_t kept = 0;
    for (size_t i = 0; i < *n; i++) {
        int oom = 0;
        char *why = lock_mismatch(ms[i], req, n_req, &oom);
        if (oom)
            return DETD_ENOMEM;
        if (why == NULL) {
            ms[kept++] = ms[i];
            continue;
        }
        char id[KEYID_HEX_LEN + 1];
        const Detd__V1__Decision *m = ms[i];
        keyid_decision_id(ns, m->arch, m->kernel, m->key ? m->key : "",
                          m->candidates_fp, id);
        int rc =
            store_put_lock_skip(d->store, ns, id, tf, why, clock_unix_ms());
        char *line = rc == 0 ? strfmt("%s %s [%s]: %s", m->kernel,
                                      m->key ? m->key : "", m->arch, why)
                             : NULL;
        free(why);
        if (rc != 0)
            return rc;
        if (line == NULL)
            return DETD_ENOMEM;
        if (r->skipped == 0)
            log_warn("lock '%s': not imported (a miss, timed by the job): %s",
                     tf + strlen("lock:"), line);
        d->counters.lock_skipped++;
        if (r->skipped < LOCK_MAX_CONFLICTS)
            r->skips[r->skipped] = line;
        else
            free(line);
        r->skipped++;
    }
    *n = kept;
    return 0;
}

/*
 * Store ms[0..n) (checked) as decisions of namespace ns from lock file
 * (sha256 its hash), in one transaction; *r gets the counts and the first
 * conflicts (lock_result_clear()). Returns 0, DETD_ENOMEM or the store's
 * error (nothing stored).
 */
static int lock_store(struct daemon *d, const char *ns, const char *file,
                      const char *sha256, Detd__V1__Decision **ms, size_t n,
                      const struct lock_req *req, size_t n_req,
                      struct lock_result *r) {
    struct decision *rows = calloc(n + 1, sizeof(*rows));
    char(*ids)[KEYID_HEX_LEN + 1] = calloc(n + 1, sizeof(*ids));
    char **timings = calloc(n + 1, sizeof(*timings));
    char **timing = calloc(n + 1, sizeof(*timing));
    int *res = calloc(n + 1, sizeof(*res));
    char *tf = strfmt("lock:%s", file);
    size_t n_all = n;
    int rc = DETD_ENOMEM;
    if (rows == NULL || ids == NULL || timings == NULL || timing == NULL ||
        res == NULL || tf == NULL)
        goto out;
    if ((rc = lock_filter(d, ns, tf, ms, &n, req, n_req, r)) != 0)
        goto out;
    rc = DETD_ENOMEM;
    for (size_t i = 0; i < n; i++)
        if (row_of(ns, tf, ms[i], ids[i], &rows[i], &timings[i], &timing[i]) !=
            0)
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
             "added, %zu unchanged, %zu conflicting (kept as stored), %zu "
             "skipped (provenance)",
             file, sha256 != NULL ? sha256 : "", ns, r->added, r->unchanged,
             r->conflicts, r->skipped);
out:
    for (size_t i = 0; timings != NULL && timing != NULL && i < n_all; i++) {
        free(timings[i]);
        free(timing[i]);
    }
    free(timings);
    free(timing);
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
    struct lock_req lr[PROVFMT_MAX_REQUIRE];
    if (req->n_require > PROVFMT_MAX_REQUIRE) {
        rpc_fail(ev->call, RPC_INVALID_ARGUMENT,
                 "require: %zu, over the limit of %d", req->n_require,
                 PROVFMT_MAX_REQUIRE);
        goto out;
    }
    for (size_t i = 0; i < req->n_require; i++) {
        const Detd__V1__LockRequirement *q = req->require[i];
        static const Detd__V1__Decision probe = DETD__V1__DECISION__INIT;
        if (q->field == NULL || provfmt_field(&probe, q->field) == NULL) {
            rpc_fail(ev->call, RPC_INVALID_ARGUMENT,
                     "require[%zu].field '%.64s' is not one of "
                     "triton_version, torch_version, cuda_version, driver",
                     i, q->field ? q->field : "");
            goto out;
        }
        snprintf(why, sizeof why, "require[%zu].value", i);
        if (validate_str(ev->call, why, q->value, PROVFMT_MAX_STRING, 1))
            goto out;
        lr[i] = (struct lock_req){q->field, q->value};
    }
    r = calloc(1, sizeof(*r));
    pbs = calloc(LOCK_MAX_CONFLICTS, sizeof(*pbs));
    conflicts = calloc(LOCK_MAX_CONFLICTS, sizeof(*conflicts));
    if (r == NULL || pbs == NULL || conflicts == NULL) {
        rpc_fail(ev->call, RPC_RESOURCE_EXHAUSTED, "out of memory");
        goto out;
    }
    int rc = lock_store(d, ns, req->file, req->sha256, req->decisions, n, lr,
                        req->n_require, r);
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
    resp.skipped = r->skipped;
    resp.skipped_reasons = r->skips;
    resp.n_skipped_reasons =
        r->skipped < LOCK_MAX_CONFLICTS ? r->skipped : LOCK_MAX_CONFLICTS;
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
    struct lock_req lr[PROVFMT_MAX_REQUIRE];
    size_t n_lr = 0;
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
    /* --lock-require FIELD=VALUE (checked by the options). */
    for (size_t i = 0; i < d->cfg->n_lock_require; i++) {
        const char *q = d->cfg->lock_require[i], *eq = strchr(q, '=');
        if (eq == NULL || n_lr == PROVFMT_MAX_REQUIRE) {
            log_error("--lock-require '%s': %s", q,
                      eq == NULL ? "not FIELD=VALUE" : "too many (at most 8)");
            goto out;
        }
        char *field = strndup(q, (size_t)(eq - q));
        if (field == NULL)
            goto oom;
        lr[n_lr++] = (struct lock_req){field, eq + 1};
    }
    const char *base = strrchr(path, '/');
    rc = lock_store(d, d->cfg->ns, base != NULL ? base + 1 : path, f->sha256,
                    ms, f->n, lr, n_lr, r);
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
    for (size_t i = 0; i < n_lr; i++)
        free((char *)lr[i].field);
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
