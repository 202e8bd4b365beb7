/*
 * store_obs: the observations of the SQLite adapter (see store.h): the
 * upsert of Observe reports and the reads of them, whole or in pages.
 *
 * An observation is keyed by (id, host, pid). A repeat updates the row in
 * place (its rowid, the paging position, stays): the config and identity
 * are the latest, a failed launch stays failed, and an audit stays until
 * another audit replaces it.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <sqlite3.h>

#include "detd/error.h"
#include "data/store.h"
#include "data/store_int.h"

/* detd.v1.Source: observations also carry SOURCE_RUNTIME (8). */
#define STORE_N_SOURCES 9

enum {
    OC_ID,
    OC_HOST,
    OC_PID,
    OC_NS,
    OC_ARCH,
    OC_KERNEL,
    OC_KEY,
    OC_CONFIG,
    OC_SOURCE,
    OC_GOVERNED,
    OC_CHAOS,
    OC_RANK,
    OC_LOCAL_RANK,
    OC_DEVICE,
    OC_AT_MS,
    OC_CLAIMED_PID,
    OC_PEER_UID,
    OC_NODE,
    OC_JOB,
    OC_FAILED,
    OC_ERROR,
    OC_AUDIT,
    OC_AUDIT_DIFFERING,
    OC_WHY,
    OC_PROC_START,
    OC_N
};

/* The upsert of one observation, prepared once per handle. */
static const char sql_put_observation[] =
    "INSERT INTO observations (" OBSERVATION_COLS ") VALUES (?1, ?2, ?3, ?4, "
    "?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, "
    "?20, ?21, ?22, ?23, ?24, ?25) ON CONFLICT (id, host, pid, proc_start) "
    "DO UPDATE SET "
    "ns = excluded.ns, arch = excluded.arch, kernel = excluded.kernel, "
    "key = excluded.key, config = excluded.config, source = excluded.source, "
    "governed = excluded.governed, chaos = excluded.chaos, "
    "rank = excluded.rank, local_rank = excluded.local_rank, "
    "device = excluded.device, at_ms = excluded.at_ms, "
    "claimed_pid = excluded.claimed_pid, peer_uid = excluded.peer_uid, "
    "node = excluded.node, job = excluded.job, "
    "error = CASE WHEN excluded.failed THEN excluded.error ELSE error END, "
    "failed = max(failed, excluded.failed), "
    "audit_differing = CASE WHEN excluded.audit != 0 THEN "
    "excluded.audit_differing ELSE audit_differing END, "
    "audit = CASE WHEN excluded.audit != 0 THEN excluded.audit ELSE audit END, "
    "why = excluded.why";

/* See store_int.h. */
int store_read_observation(store *s, sqlite3_stmt *st, const char *op,
                           struct store_observation *ret) {
    struct store_observation o;
    memset(&o, 0, sizeof o);
    const struct {
        int col;
        const char **field;
    } strs[] = {
        {OC_ID, &o.id},         {OC_HOST, &o.host},
        {OC_NS, &o.ns},         {OC_ARCH, &o.arch},
        {OC_KERNEL, &o.kernel}, {OC_KEY, &o.key},
        {OC_CONFIG, &o.config}, {OC_DEVICE, &o.device},
        {OC_NODE, &o.node},     {OC_JOB, &o.job},
        {OC_ERROR, &o.error},   {OC_AUDIT_DIFFERING, &o.audit_differing},
        {OC_WHY, &o.why},
    };
    int err;
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) {
        size_t n;
        err = store_col_text(s, st, strs[i].col, op, strs[i].field, &n);
        if (err < 0)
            return err;
    }
    int32_t governed = 0, chaos = 0, failed = 0;
    if ((err = store_col_int32(s, st, OC_PID, INT32_MIN, INT32_MAX, op,
                               &o.pid)) < 0 ||
        (err = store_col_int32(s, st, OC_SOURCE, 0, STORE_N_SOURCES - 1, op,
                               &o.source)) < 0 ||
        (err = store_col_int32(s, st, OC_GOVERNED, 0, 1, op, &governed)) < 0 ||
        (err = store_col_int32(s, st, OC_CHAOS, 0, 1, op, &chaos)) < 0 ||
        (err = store_col_int32(s, st, OC_RANK, INT32_MIN, INT32_MAX, op,
                               &o.rank)) < 0 ||
        (err = store_col_int32(s, st, OC_LOCAL_RANK, INT32_MIN, INT32_MAX, op,
                               &o.local_rank)) < 0 ||
        (err = store_col_int(s, st, OC_AT_MS, INT64_MIN, INT64_MAX, op,
                             &o.at_ms)) < 0 ||
        (err = store_col_int32(s, st, OC_CLAIMED_PID, INT32_MIN, INT32_MAX, op,
                               &o.claimed_pid)) < 0 ||
        (err = store_col_int(s, st, OC_PEER_UID, -1, UINT32_MAX, op,
                             &o.peer_uid)) < 0 ||
        (err = store_col_int32(s, st, OC_FAILED, 0, 1, op, &failed)) < 0 ||
        (err = store_col_int32(s, st, OC_AUDIT, STORE_AUDIT_NONE,
                               STORE_AUDIT_ERROR, op, &o.audit)) < 0 ||
        (err = store_col_int(s, st, OC_PROC_START, 0, INT64_MAX, op,
                             &o.proc_start)) < 0)
        return err;
    o.governed = governed;
    o.chaos = chaos;
    o.failed = failed;
    *ret = o;
    return 0;
}

static int store_insert_observation(store *s, const struct store_observation *o,
                                    const char *op) {
    int err = 0;
    if (s->put_observation == NULL &&
        (err = store_prepare(s, sql_put_observation, SQLITE_PREPARE_PERSISTENT,
                             &s->put_observation, op)) < 0)
        return err;
    sqlite3_stmt *st = s->put_observation;
    const struct {
        int col;
        const char *v;
    } strs[] = {
        {OC_ID, o->id},         {OC_HOST, o->host},
        {OC_NS, o->ns},         {OC_ARCH, o->arch},
        {OC_KERNEL, o->kernel}, {OC_KEY, o->key},
        {OC_CONFIG, o->config}, {OC_DEVICE, o->device},
        {OC_NODE, o->node},     {OC_JOB, o->job},
        {OC_ERROR, o->error},   {OC_AUDIT_DIFFERING, o->audit_differing},
        {OC_WHY, o->why},
    };
    const struct {
        int col;
        int64_t v;
    } ints[] = {
        {OC_PID, o->pid},
        {OC_SOURCE, o->source},
        {OC_GOVERNED, o->governed != 0},
        {OC_CHAOS, o->chaos != 0},
        {OC_RANK, o->rank},
        {OC_LOCAL_RANK, o->local_rank},
        {OC_AT_MS, o->at_ms},
        {OC_CLAIMED_PID, o->claimed_pid},
        {OC_PEER_UID, o->peer_uid},
        {OC_FAILED, o->failed != 0},
        {OC_AUDIT, o->audit},
        {OC_PROC_START, o->proc_start},
    };
    for (size_t i = 0; err == 0 && i < sizeof strs / sizeof strs[0]; i++)
        err = store_bind_text(s, st, strs[i].col + 1, strs[i].v, op);
    for (size_t i = 0; err == 0 && i < sizeof ints / sizeof ints[0]; i++)
        err = store_bind_int(s, st, ints[i].col + 1, ints[i].v, op);
    if (err < 0)
        goto out;
    int rc = sqlite3_step(st);
    if (rc != SQLITE_DONE)
        err = store_fail(s, rc, op);
out:
    store_stmt_done(st);
    return err;
}

/* See store.h. */
int store_put_observations(store *s, const struct store_observation *obs,
                           size_t n) {
    static const char op[] = "put observations";
    if (s == NULL || (obs == NULL && n > 0))
        return store_einval(s, op, "a NULL argument");
    for (size_t i = 0; i < n; i++) {
        const struct store_observation *o = &obs[i];
        if (o->id == NULL || o->ns == NULL || o->host == NULL)
            return store_failf(s, DETD_EINVAL,
                               "%s: observation %zu lacks id, ns or host", op,
                               i);
        if (o->source < 0 || o->source >= STORE_N_SOURCES)
            return store_failf(s, DETD_EINVAL,
                               "%s: observation %zu: source %d out of range",
                               op, i, o->source);
        if (o->audit < STORE_AUDIT_NONE || o->audit > STORE_AUDIT_ERROR)
            return store_failf(s, DETD_EINVAL,
                               "%s: observation %zu: audit %d out of range", op,
                               i, o->audit);
    }
    if (n == 0)
        return 0;
    int err = store_begin(s, op);
    if (err < 0)
        return err;
    for (size_t i = 0; i < n; i++)
        if ((err = store_insert_observation(s, &obs[i], op)) < 0)
            goto out;
    if ((err = store_commit(s, op)) < 0)
        goto out;
    return 0;
out:
    store_rollback(s);
    return err;
}

/* Run a SELECT of OBSERVATION_COLS (then rowid) whose ?1 is ns. */
static int store_obs_scan(store *s, const char *sql, const char *ns,
                          int64_t after, uint32_t limit,
                          store_observation_page_cb pcb,
                          store_observation_cb cb, void *ctx) {
    static const char op[] = "list observations";
    sqlite3_stmt *st = NULL;
    int err = store_prepare(s, sql, 0, &st, op);
    if (err < 0)
        return err;
    if ((ns != NULL && (err = store_bind_text(s, st, 1, ns, op)) < 0) ||
        (pcb != NULL &&
         ((err = store_bind_int(s, st, 2, after, op)) < 0 ||
          (err = store_bind_int(s, st, 3, limit > 0 ? (int64_t)limit : -1,
                                op)) < 0)))
        goto out;
    while ((err = store_step(s, st, op)) > 0) {
        struct store_observation o;
        if ((err = store_read_observation(s, st, op, &o)) < 0)
            goto out;
        int stop = pcb != NULL ? pcb(ctx, &o, sqlite3_column_int64(st, OC_N))
                               : cb(ctx, &o);
        if (stop)
            break;
    }
    if (err > 0)
        err = 0; /* stopped early by the callback */
out:
    sqlite3_finalize(st);
    return err;
}

/* See store.h. */
int store_each_observation(store *s, const char *ns, store_observation_cb cb,
                           void *ctx) {
    if (s == NULL || cb == NULL)
        return store_einval(s, "list observations", "a NULL argument");
    return store_obs_scan(s,
                          "SELECT " OBSERVATION_COLS ", rowid FROM observations"
                          " WHERE (?1 IS NULL OR ns = ?1)"
                          " ORDER BY id, config, host, rank, pid",
                          ns, 0, 0, NULL, cb, ctx);
}

/* See store.h. */
int store_each_observation_page(store *s, const char *ns, int64_t after,
                                uint32_t limit, store_observation_page_cb cb,
                                void *ctx) {
    if (s == NULL || cb == NULL)
        return store_einval(s, "list observations", "a NULL argument");
    return store_obs_scan(s,
                          "SELECT " OBSERVATION_COLS ", rowid FROM observations"
                          " WHERE (?1 IS NULL OR ns = ?1) AND rowid > ?2"
                          " ORDER BY rowid LIMIT ?3",
                          ns, after, limit, cb, NULL, ctx);
}
