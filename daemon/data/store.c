/*
 * store: the SQLite adapter. See store.h for the contract.
 *
 * Every SQLite result code is converted here (store_sqlite_err()) and
 * never leaves this file. The file on disk is treated as untrusted input:
 * every value read back is checked (type, range, length, embedded NUL)
 * before it reaches a caller, so a damaged or hostile database yields
 * DETD_ECORRUPT instead of an out-of-range enum or a truncated string.
 */
#include "data/store.h"

#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "detd/client.h"
#include "detd/error.h"
#include "data/store_int.h"

#ifndef DETD_VERSION
#define DETD_VERSION "unknown"
#endif

/* Readers (detctl, backups) may hold the file briefly; wait, don't fail. */
#define STORE_BUSY_TIMEOUT_MS 5000
#define STORE_N_SOURCES 8
/* PRAGMA application_id: "detd", tells our files from other databases. */
#define STORE_APPLICATION_ID 0x64657464

/*
 * Schema migrations. Step i takes the database from user_version i to
 * i + 1 and runs inside the migration transaction, so a crash mid-way
 * leaves the previous version intact. Append a step to change the schema
 * (e.g. "ALTER TABLE decisions ADD COLUMN ..."); never edit a released one.
 *
 * No foreign keys: an observation may arrive for a key that has no
 * decision (auto mode, ungoverned autotuners), and store_reset() removes
 * the observations of what it resets explicitly.
 */
struct store_migration {
    int version; /* user_version after this step */
    const char *sql;
};

static const struct store_migration store_migrations[] = {
    {1, "CREATE TABLE meta ("
        " name TEXT PRIMARY KEY NOT NULL,"
        " value TEXT NOT NULL);"
        "INSERT INTO meta(name, value) VALUES"
        " ('created_at_ms', CAST((julianday('now') - 2440587.5) * 86400000.0"
        "  AS INTEGER)),"
        " ('created_by', 'detd " DETD_VERSION "');"
        "CREATE TABLE decisions ("
        " id TEXT PRIMARY KEY NOT NULL, ns TEXT NOT NULL,"
        " arch TEXT NOT NULL, kernel TEXT NOT NULL, key TEXT NOT NULL,"
        " candidates_fp TEXT NOT NULL, n_candidates INTEGER NOT NULL,"
        " config TEXT NOT NULL, source INTEGER NOT NULL,"
        " claim_id INTEGER NOT NULL, by_host TEXT NOT NULL,"
        " by_pid INTEGER NOT NULL, by_rank INTEGER NOT NULL,"
        " by_local_rank INTEGER NOT NULL, by_device TEXT NOT NULL,"
        " by_arch TEXT NOT NULL, triton_version TEXT NOT NULL,"
        " timings_json TEXT NOT NULL, table_file TEXT NOT NULL,"
        " decided_at_ms INTEGER NOT NULL);"
        "CREATE INDEX decisions_ns_kernel_key ON decisions(ns, kernel, key);"
        "CREATE TABLE observations ("
        " id TEXT NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL,"
        " ns TEXT NOT NULL, arch TEXT NOT NULL, kernel TEXT NOT NULL,"
        " key TEXT NOT NULL, config TEXT NOT NULL, source INTEGER NOT NULL,"
        " governed INTEGER NOT NULL, chaos INTEGER NOT NULL,"
        " rank INTEGER NOT NULL, local_rank INTEGER NOT NULL,"
        " device TEXT NOT NULL, at_ms INTEGER NOT NULL,"
        " PRIMARY KEY (id, host, pid));"
        "CREATE INDEX observations_ns_id ON observations(ns, id);"},
    /* Record-mode votes (store_vote.c). seq is never reused (paging);
     * one vote per (decision id, host, pid): a repeat replaces it. */
    {2, "CREATE TABLE votes ("
        " seq INTEGER PRIMARY KEY AUTOINCREMENT,"
        " id TEXT NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL,"
        " ns TEXT NOT NULL, arch TEXT NOT NULL, kernel TEXT NOT NULL,"
        " key TEXT NOT NULL, table_key TEXT NOT NULL,"
        " candidates_fp TEXT NOT NULL, config TEXT NOT NULL,"
        " rank INTEGER NOT NULL, local_rank INTEGER NOT NULL,"
        " device TEXT NOT NULL, timings_json TEXT NOT NULL,"
        " triton_version TEXT NOT NULL, voted_at_ms INTEGER NOT NULL,"
        " UNIQUE (id, host, pid));"
        "CREATE INDEX votes_ns_arch_kernel ON votes(ns, arch, kernel);"},
    /* Imported table entries (store_import.c): one per (ns, arch, kernel,
     * key) as written in the table; a later import replaces it. */
    {3, "CREATE TABLE imports ("
        " ns TEXT NOT NULL, arch TEXT NOT NULL, kernel TEXT NOT NULL,"
        " key TEXT NOT NULL, table_key TEXT NOT NULL, config TEXT NOT NULL,"
        " file TEXT NOT NULL, imported_at_ms INTEGER NOT NULL,"
        " PRIMARY KEY (ns, arch, kernel, key));"},
    /* Who the daemon saw write an observation (SO_PEERCRED): pid holds
     * the peer's pid since version 4; the pid the caller wrote, the
     * peer's uid (-1: unknown) and the daemon's node are kept beside it.
     * Rows of older versions read as claimed_pid 0, uid -1, node "". */
    {4, "ALTER TABLE observations ADD COLUMN claimed_pid INTEGER NOT NULL"
        " DEFAULT 0;"
        "ALTER TABLE observations ADD COLUMN peer_uid INTEGER NOT NULL"
        " DEFAULT -1;"
        "ALTER TABLE observations ADD COLUMN node TEXT NOT NULL DEFAULT '';"},
    /* Timing passes in which every candidate failed (store_failure.c): a
     * rerun of the same code gets the failure instead of timing again. */
    {5, "CREATE TABLE failures ("
        " id TEXT PRIMARY KEY, ns TEXT NOT NULL, arch TEXT NOT NULL,"
        " kernel TEXT NOT NULL, key TEXT NOT NULL, reason TEXT NOT NULL,"
        " by_host TEXT NOT NULL, by_pid INTEGER NOT NULL,"
        " by_rank INTEGER NOT NULL, at_ms INTEGER NOT NULL);"},
    /* What an observation says beyond the config (store_obs.c): the job
     * label the client attached with, a launch that raised (sticky), the
     * client's determinism audit, and why an autotuner is ungoverned. */
    {6, "ALTER TABLE observations ADD COLUMN job TEXT NOT NULL DEFAULT '';"
        "ALTER TABLE observations ADD COLUMN failed INTEGER NOT NULL"
        " DEFAULT 0;"
        "ALTER TABLE observations ADD COLUMN error TEXT NOT NULL DEFAULT '';"
        "ALTER TABLE observations ADD COLUMN audit INTEGER NOT NULL"
        " DEFAULT 0;"
        "ALTER TABLE observations ADD COLUMN audit_differing TEXT NOT NULL"
        " DEFAULT '';"
        "ALTER TABLE observations ADD COLUMN why TEXT NOT NULL DEFAULT '';"},
    /* One row per process, not per pid (store_obs.c): proc_start is the
     * peer process's start time (clock ticks after boot, /proc/PID/stat;
     * 0: unknown), part of the key, so a process that reuses a dead one's
     * pid cannot overwrite the dead one's rows. SQLite cannot change a
     * primary key in place: the table is rebuilt; older rows get 0. */
    {7, "ALTER TABLE observations RENAME TO observations_v6;"
        "DROP INDEX observations_ns_id;"
        "CREATE TABLE observations ("
        " id TEXT NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL,"
        " ns TEXT NOT NULL, arch TEXT NOT NULL, kernel TEXT NOT NULL,"
        " key TEXT NOT NULL, config TEXT NOT NULL, source INTEGER NOT NULL,"
        " governed INTEGER NOT NULL, chaos INTEGER NOT NULL,"
        " rank INTEGER NOT NULL, local_rank INTEGER NOT NULL,"
        " device TEXT NOT NULL, at_ms INTEGER NOT NULL,"
        " claimed_pid INTEGER NOT NULL DEFAULT 0,"
        " peer_uid INTEGER NOT NULL DEFAULT -1,"
        " node TEXT NOT NULL DEFAULT '', job TEXT NOT NULL DEFAULT '',"
        " failed INTEGER NOT NULL DEFAULT 0, error TEXT NOT NULL DEFAULT '',"
        " audit INTEGER NOT NULL DEFAULT 0,"
        " audit_differing TEXT NOT NULL DEFAULT '',"
        " why TEXT NOT NULL DEFAULT '',"
        " proc_start INTEGER NOT NULL DEFAULT 0,"
        " PRIMARY KEY (id, host, pid, proc_start));"
        "INSERT INTO observations (id, host, pid, ns, arch, kernel, key,"
        " config, source, governed, chaos, rank, local_rank, device, at_ms,"
        " claimed_pid, peer_uid, node, job, failed, error, audit,"
        " audit_differing, why) SELECT id, host, pid, ns, arch, kernel, key,"
        " config, source, governed, chaos, rank, local_rank, device, at_ms,"
        " claimed_pid, peer_uid, node, job, failed, error, audit,"
        " audit_differing, why FROM observations_v6 ORDER BY rowid;"
        "DROP TABLE observations_v6;"
        "CREATE INDEX observations_ns_id ON observations(ns, id);"},
    /* Who the daemon saw send a decision's report (SO_PEERCRED), as an
     * observation keeps it: by_pid has been the peer's pid all along; the
     * peer's uid (-1: unknown), the node whose daemon received the report
     * and the pid the client wrote are kept beside it. Tables, imports and
     * rows of older versions read as uid -1, node "", claimed pid 0. */
    {8, "ALTER TABLE decisions ADD COLUMN by_uid INTEGER NOT NULL"
        " DEFAULT -1;"
        "ALTER TABLE decisions ADD COLUMN by_node TEXT NOT NULL DEFAULT '';"
        "ALTER TABLE decisions ADD COLUMN by_claimed_pid INTEGER NOT NULL"
        " DEFAULT 0;"},
    /* Who the daemon saw send the report of a failed timing pass
     * (SO_PEERCRED), as a decision keeps it: by_pid is the peer's pid from
     * this version on; the pid the client wrote, the peer's uid (-1:
     * unknown) and the node whose daemon received the report are kept
     * beside it. Rows of older versions keep in by_pid the pid the client
     * wrote (it is all they had) and read as claimed_pid 0, uid -1,
     * node "". */
    {9, "ALTER TABLE failures ADD COLUMN claimed_pid INTEGER NOT NULL"
        " DEFAULT 0;"
        "ALTER TABLE failures ADD COLUMN by_uid INTEGER NOT NULL DEFAULT -1;"
        "ALTER TABLE failures ADD COLUMN by_node TEXT NOT NULL DEFAULT '';"},
    /* 10: the job of the process that timed a decision, as it said. */
    {10, "ALTER TABLE decisions ADD COLUMN by_world_size INTEGER NOT NULL"
         " DEFAULT 0;"
         "ALTER TABLE decisions ADD COLUMN by_job TEXT NOT NULL DEFAULT '';"},
    /* 11: how a timed decision was timed (the benchmarker, its settings,
     * torch, CUDA and the driver, the kernel's package: a JSON object,
     * docs/lockfile.md; "" for older rows, tables and imports without
     * it), and the lock entries an import skipped because their
     * provenance did not match the importing run (explain says why). */
    {11, "ALTER TABLE decisions ADD COLUMN timing_json TEXT NOT NULL"
         " DEFAULT '';"
         "CREATE TABLE lock_skips (ns TEXT NOT NULL, id TEXT NOT NULL,"
         " file TEXT NOT NULL, reason TEXT NOT NULL, at_ms INTEGER NOT NULL,"
         " PRIMARY KEY (ns, id)) WITHOUT ROWID;"},
};

#define STORE_SCHEMA_VERSION                                                   \
    ((int)(sizeof store_migrations / sizeof store_migrations[0]))

enum {
    DC_ID,
    DC_NS,
    DC_ARCH,
    DC_KERNEL,
    DC_KEY,
    DC_CANDIDATES_FP,
    DC_N_CANDIDATES,
    DC_CONFIG,
    DC_SOURCE,
    DC_CLAIM_ID,
    DC_BY_HOST,
    DC_BY_PID,
    DC_BY_RANK,
    DC_BY_LOCAL_RANK,
    DC_BY_DEVICE,
    DC_BY_ARCH,
    DC_TRITON_VERSION,
    DC_TIMINGS_JSON,
    DC_TABLE_FILE,
    DC_DECIDED_AT_MS,
    DC_BY_UID,
    DC_BY_NODE,
    DC_BY_CLAIMED_PID,
    DC_BY_WORLD_SIZE,
    DC_BY_JOB,
    DC_TIMING_JSON
};

/* The string fields of a decision and their columns. */
static const struct {
    int col;
    size_t off;
} decision_strings[] = {
    {DC_ID, offsetof(struct decision, id)},
    {DC_NS, offsetof(struct decision, ns)},
    {DC_ARCH, offsetof(struct decision, arch)},
    {DC_KERNEL, offsetof(struct decision, kernel)},
    {DC_KEY, offsetof(struct decision, key)},
    {DC_CANDIDATES_FP, offsetof(struct decision, candidates_fp)},
    {DC_CONFIG, offsetof(struct decision, config)},
    {DC_BY_HOST, offsetof(struct decision, by_host)},
    {DC_BY_DEVICE, offsetof(struct decision, by_device)},
    {DC_BY_ARCH, offsetof(struct decision, by_arch)},
    {DC_TRITON_VERSION, offsetof(struct decision, triton_version)},
    {DC_TIMINGS_JSON, offsetof(struct decision, timings_json)},
    {DC_TABLE_FILE, offsetof(struct decision, table_file)},
    {DC_BY_NODE, offsetof(struct decision, by_node)},
    {DC_BY_JOB, offsetof(struct decision, by_job)},
    {DC_TIMING_JSON, offsetof(struct decision, timing_json)},
};
#define N_DECISION_STRINGS                                                     \
    (sizeof decision_strings / sizeof decision_strings[0])

static const char sql_get_decision[] =
    "SELECT " DECISION_COLS " FROM decisions WHERE id = ?1";
static const char sql_put_decision[] =
    "INSERT INTO decisions (" DECISION_COLS ") VALUES (?1, ?2, ?3, ?4, ?5, "
    "?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, "
    "?21, ?22, ?23, ?24, ?25, ?26) "
    "ON CONFLICT (id) DO NOTHING";

/* See store_int.h. */
int store_read_decision(store *s, sqlite3_stmt *st, const char *op,
                        struct decision *ret) {
    struct decision d;
    memset(&d, 0, sizeof d);
    int err = 0;
    for (size_t i = 0; i < N_DECISION_STRINGS; i++) {
        char **field = (char **)((char *)&d + decision_strings[i].off);
        err = store_col_strdup(s, st, decision_strings[i].col, op, field);
        if (err < 0)
            goto out;
    }
    int64_t v;
    if ((err = store_col_int32(s, st, DC_N_CANDIDATES, 0, DETD_MAX_CANDIDATES,
                               op, &d.n_candidates)) < 0 ||
        (err = store_col_int32(s, st, DC_SOURCE, 0, STORE_N_SOURCES - 1, op,
                               &d.source)) < 0 ||
        (err = store_col_int(s, st, DC_CLAIM_ID, INT64_MIN, INT64_MAX, op,
                             &v)) < 0)
        goto out;
    d.claim_id = (uint64_t)v;
    if ((err = store_col_int32(s, st, DC_BY_PID, INT32_MIN, INT32_MAX, op,
                               &d.by_pid)) < 0 ||
        (err = store_col_int32(s, st, DC_BY_RANK, INT32_MIN, INT32_MAX, op,
                               &d.by_rank)) < 0 ||
        (err = store_col_int32(s, st, DC_BY_LOCAL_RANK, INT32_MIN, INT32_MAX,
                               op, &d.by_local_rank)) < 0 ||
        (err = store_col_int(s, st, DC_DECIDED_AT_MS, INT64_MIN, INT64_MAX, op,
                             &d.decided_at_ms)) < 0 ||
        (err = store_col_int(s, st, DC_BY_UID, -1, UINT32_MAX, op, &d.by_uid)) <
            0 ||
        (err = store_col_int32(s, st, DC_BY_CLAIMED_PID, INT32_MIN, INT32_MAX,
                               op, &d.by_claimed_pid)) < 0 ||
        (err = store_col_int32(s, st, DC_BY_WORLD_SIZE, INT32_MIN, INT32_MAX,
                               op, &d.by_world_size)) < 0)
        goto out;
    *ret = d;
    return 0;
out:
    decision_clear(&d);
    return err;
}

/* ---- open, schema ---- */

static int store_newer_schema(store *s, int64_t v) {
    return store_failf(s, DETD_ECORRUPT,
                       "schema version %lld is newer than version %d, the "
                       "newest this build of detd knows",
                       (long long)v, STORE_SCHEMA_VERSION);
}

/* Bring the schema to STORE_SCHEMA_VERSION, one step at a time. */
static int store_migrate(store *s) {
    static const char op[] = "migrate schema";
    int64_t v, app_id, n_objects;
    int err = store_query_int(s, "PRAGMA user_version", op, &v);
    if (err < 0)
        return err;
    if (v > STORE_SCHEMA_VERSION)
        return store_newer_schema(s, v);
    if (v == STORE_SCHEMA_VERSION)
        return 0;
    if ((err = store_begin(s, op)) < 0)
        return err;
    /* Another process may have migrated before we took the lock. */
    if ((err = store_query_int(s, "PRAGMA user_version", op, &v)) < 0)
        goto out;
    if (v > STORE_SCHEMA_VERSION) {
        err = store_newer_schema(s, v);
        goto out;
    }
    if (v < 0) {
        err = store_failf(s, DETD_ECORRUPT, "schema version %lld is invalid",
                          (long long)v);
        goto out;
    }
    if (v == 0) {
        /* A fresh file has no tables; anything else belongs to someone. */
        err = store_query_int(s, "SELECT count(*) FROM sqlite_schema", op,
                              &n_objects);
        if (err < 0)
            goto out;
        if (n_objects > 0) {
            err = store_failf(s, DETD_ECORRUPT,
                              "not a detd database: schema version 0 but "
                              "%lld schema objects",
                              (long long)n_objects);
            goto out;
        }
    }
    for (int i = 0; i < STORE_SCHEMA_VERSION; i++) {
        assert(store_migrations[i].version == i + 1);
        if (store_migrations[i].version <= v)
            continue;
        if ((err = store_exec(s, store_migrations[i].sql, op)) < 0)
            goto out;
    }
    char sql[256];
    snprintf(sql, sizeof sql,
             "PRAGMA user_version = %d; PRAGMA application_id = %d;"
             "INSERT OR REPLACE INTO meta(name, value)"
             " VALUES ('schema_version', %d)",
             STORE_SCHEMA_VERSION, STORE_APPLICATION_ID, STORE_SCHEMA_VERSION);
    if ((err = store_exec(s, sql, op)) < 0)
        goto out;
    if ((err = store_query_int(s, "PRAGMA application_id", op, &app_id)) < 0)
        goto out;
    assert(app_id == STORE_APPLICATION_ID);
    err = store_commit(s, op);
out:
    if (err < 0)
        store_rollback(s);
    return err;
}

/* Per-connection settings, and the checks that the file is ours. */
static int store_configure(store *s) {
    sqlite3_busy_timeout(s->db, STORE_BUSY_TIMEOUT_MS);
    /* The file is untrusted: no schema tricks, no functions from it. */
    sqlite3_db_config(s->db, SQLITE_DBCONFIG_DEFENSIVE, 1, (int *)NULL);
    sqlite3_db_config(s->db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, (int *)NULL);

    /* The first read of the file: a non-database fails here. */
    sqlite3_stmt *st = NULL;
    int err = store_prepare(s, "PRAGMA journal_mode = WAL", 0, &st,
                            "set journal_mode=WAL");
    if (err < 0)
        return err;
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        err = store_fail(s, rc, "set journal_mode=WAL");
        sqlite3_finalize(st);
        return err;
    }
    const unsigned char *mode = sqlite3_column_text(st, 0);
    if (mode == NULL || strcmp((const char *)mode, "wal") != 0)
        err = store_failf(s, DETD_ESTORE, "set journal_mode=WAL: got '%s'",
                          mode != NULL ? (const char *)mode : "(null)");
    sqlite3_finalize(st);
    if (err < 0)
        return err;
    /* Per connection, not persistent: set on every open. */
    if ((err = store_exec(s, "PRAGMA synchronous = FULL",
                          "set synchronous=FULL")) < 0)
        return err;
    int64_t app_id;
    if ((err = store_query_int(s, "PRAGMA application_id",
                               "read application_id", &app_id)) < 0)
        return err;
    if (app_id != 0 && app_id != STORE_APPLICATION_ID)
        return store_failf(s, DETD_ECORRUPT,
                           "not a detd database (application_id 0x%08llx)",
                           (unsigned long long)app_id);
    return 0;
}

static char *store_dup_printf(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
static char *store_dup_printf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return NULL;
    char *p = malloc((size_t)n + 1);
    if (p == NULL)
        return NULL;
    va_start(ap, fmt);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return p;
}

int store_open(const char *path, store **ret, char **ret_errmsg) {
    store *s = NULL;
    int err = 0;
    if (ret_errmsg != NULL)
        *ret_errmsg = NULL;
    if (path == NULL || ret == NULL) {
        if (ret_errmsg != NULL)
            *ret_errmsg = store_dup_printf("store_open: %s is NULL",
                                           path == NULL ? "path" : "ret");
        return DETD_EINVAL;
    }
    s = calloc(1, sizeof *s);
    if (s == NULL || (s->path = store_dup_printf("%s", path)) == NULL) {
        err = DETD_ENOMEM;
        goto out;
    }
    int rc = sqlite3_open_v2(path, &s->db,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                                 SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXRESCODE,
                             NULL);
    if (rc != SQLITE_OK) {
        if (s->db == NULL) {
            err = store_failf(s, DETD_ENOMEM, "out of memory");
            goto out;
        }
        int sys = sqlite3_system_errno(s->db);
        if ((rc & 0xff) == SQLITE_CANTOPEN && sys > 0)
            err = store_failf(s, -sys, "cannot open: %s (%s)",
                              sqlite3_errmsg(s->db), strerror(sys));
        else
            err = store_fail(s, rc, "cannot open");
        goto out;
    }
    if ((err = store_configure(s)) < 0 || (err = store_migrate(s)) < 0)
        goto out;
    if ((err = store_prepare(s, sql_get_decision, SQLITE_PREPARE_PERSISTENT,
                             &s->get_decision, "prepare")) < 0 ||
        (err = store_prepare(s, sql_put_decision, SQLITE_PREPARE_PERSISTENT,
                             &s->put_decision, "prepare")) < 0)
        goto out;
    s->errmsg[0] = '\0';
out:
    if (err < 0) {
        if (ret_errmsg != NULL)
            *ret_errmsg =
                store_dup_printf("database '%s': %s", path,
                                 s != NULL ? s->errmsg : "out of memory");
        store_close(s);
        return err;
    }
    *ret = s;
    return 0;
}

void store_close(store *s) {
    if (s == NULL)
        return;
    sqlite3_finalize(s->get_decision);
    sqlite3_finalize(s->put_decision);
    sqlite3_finalize(s->put_observation);
    /* Every statement is finalized: close cannot be left pending. */
    int rc = sqlite3_close(s->db);
    assert(rc == SQLITE_OK);
    (void)rc;
    free(s->path);
    free(s);
}

const char *store_errmsg(const store *s) {
    return s != NULL ? s->errmsg : "no store handle";
}

/* See store.h. */
uint64_t store_writes(const store *s) {
    return s != NULL ? s->writes_ok : 0;
}

/* ---- decisions ---- */

/* The result of a get_decision statement bound and stepped. */
static int store_get_locked(store *s, const char *id, const char *op,
                            struct decision *ret) {
    sqlite3_stmt *st = s->get_decision;
    int err = store_bind_text(s, st, 1, id, "decision id");
    if (err < 0)
        goto out;
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) {
        err = store_failf(s, DETD_ENOTFOUND, "%s: no decision %s", op, id);
        goto out;
    }
    if (rc != SQLITE_ROW) {
        err = store_fail(s, rc, op);
        goto out;
    }
    err = store_read_decision(s, st, op, ret);
out:
    store_stmt_done(st);
    return err;
}

int store_get_decision(store *s, const char *id, struct decision *ret) {
    if (s == NULL || id == NULL || ret == NULL)
        return store_einval(s, "get decision", "a NULL argument");
    return store_get_locked(s, id, "get decision", ret);
}

/* Argument checks, before any transaction starts. */
static int store_check_decision(store *s, const struct decision *d,
                                const char *op) {
    if (d->id == NULL || d->ns == NULL || d->arch == NULL ||
        d->kernel == NULL || d->key == NULL || d->config == NULL)
        return store_failf(s, DETD_EINVAL,
                           "%s: id, ns, arch, kernel, key and config are "
                           "required",
                           op);
    if (d->n_candidates < 0)
        return store_failf(s, DETD_EINVAL, "%s: n_candidates %d < 0", op,
                           d->n_candidates);
    if (d->n_candidates > DETD_MAX_CANDIDATES)
        return store_failf(s, DETD_ELIMIT, "%s: n_candidates %d > %d", op,
                           d->n_candidates, DETD_MAX_CANDIDATES);
    if (d->source < 0 || d->source >= STORE_N_SOURCES)
        return store_failf(s, DETD_EINVAL, "%s: source %d out of range", op,
                           d->source);
    if (d->by_uid < -1 || d->by_uid > (int64_t)UINT32_MAX)
        return store_failf(s, DETD_EINVAL, "%s: by_uid %lld out of range", op,
                           (long long)d->by_uid);
    return 0;
}

/* Inside a transaction: insert d unless its id exists. */
static int store_insert_decision(store *s, const struct decision *d,
                                 const char *op, int *ret_inserted) {
    sqlite3_stmt *st = s->put_decision;
    int err = 0;
    for (size_t i = 0; i < N_DECISION_STRINGS; i++) {
        const char *v =
            *(const char *const *)((const char *)d + decision_strings[i].off);
        err = store_bind_text(s, st, decision_strings[i].col + 1, v, op);
        if (err < 0)
            goto out;
    }
    if ((err = store_bind_int(s, st, DC_N_CANDIDATES + 1, d->n_candidates,
                              op)) < 0 ||
        (err = store_bind_int(s, st, DC_SOURCE + 1, d->source, op)) < 0 ||
        (err = store_bind_int(s, st, DC_CLAIM_ID + 1, (int64_t)d->claim_id,
                              op)) < 0 ||
        (err = store_bind_int(s, st, DC_BY_PID + 1, d->by_pid, op)) < 0 ||
        (err = store_bind_int(s, st, DC_BY_RANK + 1, d->by_rank, op)) < 0 ||
        (err = store_bind_int(s, st, DC_BY_LOCAL_RANK + 1, d->by_local_rank,
                              op)) < 0 ||
        (err = store_bind_int(s, st, DC_DECIDED_AT_MS + 1, d->decided_at_ms,
                              op)) < 0 ||
        (err = store_bind_int(s, st, DC_BY_UID + 1, d->by_uid, op)) < 0 ||
        (err = store_bind_int(s, st, DC_BY_CLAIMED_PID + 1, d->by_claimed_pid,
                              op)) < 0 ||
        (err = store_bind_int(s, st, DC_BY_WORLD_SIZE + 1, d->by_world_size,
                              op)) < 0)
        goto out;
    int rc = sqlite3_step(st);
    if (rc != SQLITE_DONE) {
        err = store_fail(s, rc, op);
        goto out;
    }
    *ret_inserted = sqlite3_changes(s->db) > 0;
out:
    store_stmt_done(st);
    return err;
}

int store_put_decision(store *s, const struct decision *d,
                       struct decision *ret_existing) {
    static const char op[] = "put decision";
    if (s == NULL || d == NULL)
        return store_einval(s, op, "a NULL argument");
    int err = store_check_decision(s, d, op);
    if (err < 0)
        return err;
    if ((err = store_begin(s, op)) < 0)
        return err;
    int inserted = 0;
    struct decision existing;
    memset(&existing, 0, sizeof existing);
    if ((err = store_insert_decision(s, d, op, &inserted)) < 0)
        goto out;
    /* Read the winner in the same transaction: it cannot change under us. */
    if (!inserted && ret_existing != NULL &&
        (err = store_get_locked(s, d->id, op, &existing)) < 0)
        goto out;
    if ((err = store_commit(s, op)) < 0)
        goto out;
    if (inserted)
        return 0;
    if (ret_existing != NULL)
        *ret_existing = existing;
    return store_failf(s, DETD_EEXIST, "%s: decision %s exists", op, d->id);
out:
    decision_clear(&existing);
    store_rollback(s);
    return err;
}

int store_put_decisions(store *s, const struct decision *ds, size_t n,
                        int *ret_results) {
    static const char op[] = "put decisions";
    if (s == NULL || (ds == NULL && n > 0))
        return store_einval(s, op, "a NULL argument");
    int err;
    for (size_t i = 0; i < n; i++)
        if ((err = store_check_decision(s, &ds[i], op)) < 0)
            return err;
    if (n == 0)
        return 0;
    if ((err = store_begin(s, op)) < 0)
        return err;
    for (size_t i = 0; i < n; i++) {
        int inserted = 0;
        if ((err = store_insert_decision(s, &ds[i], op, &inserted)) < 0)
            goto out;
        /* Written only on success below: on failure nothing is reported. */
        if (ret_results != NULL)
            ret_results[i] = inserted ? 0 : DETD_EEXIST;
    }
    if ((err = store_commit(s, op)) < 0)
        goto out;
    return 0;
out:
    store_rollback(s);
    return err;
}

/* Hand each row of the bound statement st to cb until it returns nonzero,
 * then finalize st. Returns 0 or the first error. */
static int store_each_row_(store *s, sqlite3_stmt *st, const char *op,
                           store_decision_cb cb, void *ctx) {
    int err;
    while ((err = store_step(s, st, op)) > 0) {
        struct decision d;
        if ((err = store_read_decision(s, st, op, &d)) < 0)
            goto out;
        int stop = cb(ctx, &d);
        decision_clear(&d);
        if (stop)
            break;
    }
    if (err > 0)
        err = 0; /* stopped early by the callback */
out:
    sqlite3_finalize(st);
    return err;
}

int store_each_decision(store *s, const char *ns, const char *kernel,
                        uint32_t limit, store_decision_cb cb, void *ctx) {
    static const char op[] = "list decisions";
    if (s == NULL || cb == NULL)
        return store_einval(s, op, "a NULL argument");
    sqlite3_stmt *st = NULL;
    int err = store_prepare(s,
                            "SELECT " DECISION_COLS " FROM decisions"
                            " WHERE (?1 IS NULL OR ns = ?1)"
                            " AND (?2 IS NULL OR kernel = ?2)"
                            " ORDER BY kernel, key, ns, arch, id LIMIT ?3",
                            0, &st, op);
    if (err < 0)
        return err;
    if ((ns != NULL && (err = store_bind_text(s, st, 1, ns, op)) < 0) ||
        (kernel != NULL && (err = store_bind_text(s, st, 2, kernel, op)) < 0) ||
        (err = store_bind_int(s, st, 3, limit == 0 ? -1 : (int64_t)limit, op)) <
            0)
        goto out;
    return store_each_row_(s, st, op, cb, ctx);
out:
    sqlite3_finalize(st);
    return err;
}

int store_each_decision_page(store *s, const char *ns, const char *arch,
                             const char *kernel, const char *after_id,
                             uint32_t limit, store_decision_cb cb, void *ctx) {
    static const char op[] = "list decisions by id";
    if (s == NULL || cb == NULL)
        return store_einval(s, op, "a NULL argument");
    sqlite3_stmt *st = NULL;
    int err = store_prepare(
        s,
        "SELECT " DECISION_COLS " FROM decisions"
        " WHERE (?1 IS NULL OR ns = ?1) AND (?2 IS NULL OR arch = ?2)"
        " AND " STORE_KERNEL_MATCH("kernel", 3) " AND id > ?4"
                                                " ORDER BY id LIMIT ?5",
        0, &st, op);
    if (err < 0)
        return err;
    if ((ns != NULL && (err = store_bind_text(s, st, 1, ns, op)) < 0) ||
        (arch != NULL && (err = store_bind_text(s, st, 2, arch, op)) < 0) ||
        (kernel != NULL && (err = store_bind_text(s, st, 3, kernel, op)) < 0) ||
        (err = store_bind_text(s, st, 4, after_id, op)) < 0 ||
        (err = store_bind_int(s, st, 5, limit == 0 ? -1 : (int64_t)limit, op)) <
            0)
        goto out;
    return store_each_row_(s, st, op, cb, ctx);
out:
    sqlite3_finalize(st);
    return err;
}

int store_count_decisions(store *s, const char *ns, uint64_t *ret_total,
                          uint64_t ret_by_source[8]) {
    static const char op[] = "count decisions";
    if (s == NULL)
        return DETD_EINVAL;
    sqlite3_stmt *st = NULL;
    uint64_t total = 0, by[STORE_N_SOURCES] = {0};
    int err = store_prepare(s,
                            "SELECT source, count(*) FROM decisions"
                            " WHERE (?1 IS NULL OR ns = ?1) GROUP BY source",
                            0, &st, op);
    if (err < 0)
        return err;
    if (ns != NULL && (err = store_bind_text(s, st, 1, ns, op)) < 0)
        goto out;
    while ((err = store_step(s, st, op)) > 0) {
        int64_t source, count;
        if ((err = store_col_int(s, st, 0, 0, STORE_N_SOURCES - 1, op,
                                 &source)) < 0 ||
            (err = store_col_int(s, st, 1, 0, INT64_MAX, op, &count)) < 0)
            goto out;
        by[source] += (uint64_t)count;
        total += (uint64_t)count;
    }
    if (err < 0)
        goto out;
    if (ret_total != NULL)
        *ret_total = total;
    if (ret_by_source != NULL)
        memcpy(ret_by_source, by, sizeof by);
out:
    sqlite3_finalize(st);
    return err;
}

int store_reset(store *s, const char *ns, const char *kernel,
                uint64_t *ret_removed, uint64_t *ret_removed_obs) {
    static const char op[] = "reset decisions";
    if (s == NULL || ns == NULL)
        return store_einval(s, op, "ns is NULL");
    sqlite3_stmt *del_fail = NULL, *del_obs = NULL, *del_dec = NULL;
    uint64_t removed = 0, removed_obs = 0;
    int err;
    if ((err = store_prepare(s,
                             "DELETE FROM failures WHERE ns = ?1"
                             " AND (?2 IS NULL OR kernel = ?2)",
                             0, &del_fail, op)) < 0 ||
        (err = store_prepare(s,
                             "DELETE FROM observations WHERE ns = ?1"
                             " AND (?2 IS NULL OR kernel = ?2 OR id IN"
                             " (SELECT id FROM decisions WHERE ns = ?1"
                             "  AND kernel = ?2))",
                             0, &del_obs, op)) < 0 ||
        (err = store_prepare(s,
                             "DELETE FROM decisions WHERE ns = ?1"
                             " AND (?2 IS NULL OR kernel = ?2)",
                             0, &del_dec, op)) < 0)
        goto out;
    /* Failed passes go with the decisions: a reset times the key again. */
    sqlite3_stmt *sts[] = {del_fail, del_obs, del_dec};
    for (int i = 0; i < 3; i++)
        if ((err = store_bind_text(s, sts[i], 1, ns, op)) < 0 ||
            (kernel != NULL &&
             (err = store_bind_text(s, sts[i], 2, kernel, op)) < 0))
            goto out;
    if ((err = store_begin(s, op)) < 0)
        goto out;
    /* Observations before decisions: the subquery needs the decisions
     * still there. The decisions go last: removed counts them. */
    for (int i = 0; i < 3; i++) {
        int rc = sqlite3_step(sts[i]);
        if (rc != SQLITE_DONE) {
            err = store_fail(s, rc, op);
            goto out;
        }
        if (i == 1)
            removed_obs = (uint64_t)sqlite3_changes64(s->db);
    }
    removed = (uint64_t)sqlite3_changes64(s->db);
    if ((err = store_commit(s, op)) < 0)
        goto out;
    if (ret_removed != NULL)
        *ret_removed = removed;
    if (ret_removed_obs != NULL)
        *ret_removed_obs = removed_obs;
out:
    if (err < 0)
        store_rollback(s);
    sqlite3_finalize(del_fail);
    sqlite3_finalize(del_obs);
    sqlite3_finalize(del_dec);
    return err;
}

/* ---- meta: small named values (the etcd backend's last revision) ---- */

/* See store.h. The value is a heap copy owned by the caller. */
int store_get_meta(store *s, const char *name, char **ret_value) {
    static const char op[] = "get meta";
    if (s == NULL || name == NULL || ret_value == NULL)
        return store_einval(s, op, "a NULL argument");
    return store_query_text(s, "SELECT value FROM meta WHERE name = ?1", op,
                            name, NULL, ret_value);
}

/* See store.h. name and value are borrowed for the call. */
int store_set_meta(store *s, const char *name, const char *value) {
    static const char op[] = "set meta";
    if (s == NULL || name == NULL || value == NULL)
        return store_einval(s, op, "a NULL argument");
    sqlite3_stmt *st = NULL;
    int err = store_prepare(
        s, "INSERT OR REPLACE INTO meta(name, value) VALUES (?1, ?2)", 0, &st,
        op);
    if (err < 0)
        return err;
    if ((err = store_bind_text(s, st, 1, name, op)) < 0 ||
        (err = store_bind_text(s, st, 2, value, op)) < 0)
        goto out;
    int rc = sqlite3_step(st);
    if (rc != SQLITE_DONE)
        err = store_fail(s, rc, op);
out:
    sqlite3_finalize(st);
    return err;
}
