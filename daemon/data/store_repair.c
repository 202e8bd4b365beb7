/*
 * store_repair: the integrity check of a store file and the salvage of a
 * damaged one into a fresh file (contracts in store.h).
 *
 * The salvage reads each table of the damaged file by rowid. A damaged
 * b-tree page makes a seek into its rowid range fail while seeks past it
 * still land on the next good page, so after a failure the scan searches
 * (doubling, then bisecting) for the first rowid it can seek to again and
 * goes on from there: every row on a readable page is kept. Each row is
 * checked as the store's readers check it before it is copied; the count
 * of rows that were there comes from the table's unique index (a separate
 * b-tree, usually intact when a table page is not), so lost rows are
 * counted, not guessed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "core/decision.h"
#include "data/store.h"
#include "data/store_int.h"
#include "detd/error.h"

/* Problems quoted from quick_check (the message has room for a few). */
#define CHECK_MAX_PROBLEMS 3

/* See store.h. */
int store_check(store *s) {
    static const char op[] = "integrity check";
    if (s == NULL)
        return DETD_EINVAL;
    sqlite3_stmt *st = NULL;
    char quoted[384] = "";
    size_t len = 0;
    int n = 0;
    int err = store_prepare(s, "PRAGMA quick_check(3)", 0, &st, op);
    if (err < 0)
        return err;
    while ((err = store_step(s, st, op)) > 0) {
        const unsigned char *t = sqlite3_column_text(st, 0);
        const char *line = t != NULL ? (const char *)t : "(null)";
        if (n == 0 && strcmp(line, "ok") == 0)
            break;
        if (n < CHECK_MAX_PROBLEMS && len < sizeof quoted - 1) {
            int w = snprintf(quoted + len, sizeof quoted - len, "%s%s",
                             n > 0 ? "; " : "", line);
            if (w > 0)
                len += (size_t)w < sizeof quoted - len
                           ? (size_t)w
                           : sizeof quoted - 1 - len;
        }
        n++;
    }
    sqlite3_finalize(st);
    if (err < 0) /* the check itself failed (the message says why) */
        return err;
    if (n > 0)
        return store_failf(s, DETD_ECORRUPT, "%s found %s%d problem%s: %s", op,
                           n >= CHECK_MAX_PROBLEMS ? "at least " : "", n,
                           n == 1 ? "" : "s", quoted);
    return 0;
}

/* ---- salvage ---- */

/* Check a row of the damaged file as the store's readers would. */
typedef int (*salvage_check_fn)(store *s, sqlite3_stmt *st, const char *op);

static int check_decision(store *s, sqlite3_stmt *st, const char *op) {
    struct decision d;
    int err = store_read_decision(s, st, op, &d);
    if (err == 0)
        decision_clear(&d);
    return err;
}

static int check_observation(store *s, sqlite3_stmt *st, const char *op) {
    struct store_observation o;
    return store_read_observation(s, st, op, &o);
}

/* One table: its columns as the readers want them (NULL: the declared
 * ones, checked by declared type) and its unique index (to count rows). */
static const struct salvage_table {
    const char *name;
    const char *cols;
    salvage_check_fn check;
    const char *index;
} salvage_tables[STORE_REPAIR_TABLES] = {
    {"decisions", DECISION_COLS, check_decision,
     "sqlite_autoindex_decisions_1"},
    {"votes", NULL, NULL, "sqlite_autoindex_votes_1"},
    {"imports", NULL, NULL, "sqlite_autoindex_imports_1"},
    {"observations", OBSERVATION_COLS, check_observation,
     "sqlite_autoindex_observations_1"},
    {"failures", NULL, NULL, "sqlite_autoindex_failures_1"},
};

struct salvage {
    store *s; /* the fresh store, written in one transaction */
    store *o; /* the damaged file, read on a connection of its own (an
                 error there must not poison the fresh store's writes) */
    const struct salvage_table *t;
    char cols[1024]; /* column list */
    char sel[1024];  /* what the scan selects for cols (salvage_select()) */
    int ncols;       /* rowid is column ncols of the scan */
    int is_int[64];  /* declared INTEGER (the others are TEXT) */
    sqlite3_stmt *scan, *probe, *insert;
    uint64_t kept, invalid;
    int damaged; /* the scan hit unreadable pages */
};

/* The column list and types from the fresh (trusted) schema. */
static int salvage_columns(struct salvage *v) {
    static const char op[] = "repair: read the schema";
    char sql[128];
    snprintf(sql, sizeof sql, "PRAGMA main.table_info(%s)", v->t->name);
    sqlite3_stmt *st = NULL;
    int err = store_prepare(v->s, sql, 0, &st, op);
    if (err < 0)
        return err;
    size_t len = 0;
    while ((err = store_step(v->s, st, op)) > 0) {
        const char *name = (const char *)sqlite3_column_text(st, 1);
        const char *type = (const char *)sqlite3_column_text(st, 2);
        if (name == NULL || type == NULL ||
            v->ncols == (int)(sizeof v->is_int / sizeof v->is_int[0]) ||
            len + strlen(name) + 3 > sizeof v->cols) {
            err = store_failf(v->s, DETD_EINTERNAL, "%s: table %s", op,
                              v->t->name);
            break;
        }
        v->is_int[v->ncols++] = strcmp(type, "INTEGER") == 0;
        len += (size_t)snprintf(v->cols + len, sizeof v->cols - len, "%s%s",
                                len > 0 ? ", " : "", name);
    }
    sqlite3_finalize(st);
    if (err < 0)
        return err;
    if (v->t->cols != NULL) {
        /* The readers' order: count its columns. */
        snprintf(v->cols, sizeof v->cols, "%s", v->t->cols);
        v->ncols = 1;
        for (const char *p = v->cols; *p != '\0'; p++)
            v->ncols += *p == ',';
    }
    return 0;
}

/* The columns of table t in db, as ",a,b,c," into buf. */
static int salvage_names(store *db, const char *t, char *buf, size_t cap) {
    static const char op[] = "repair: read the schema";
    char sql[128];
    snprintf(sql, sizeof sql, "PRAGMA main.table_info(%s)", t);
    sqlite3_stmt *st = NULL;
    int err = store_prepare(db, sql, 0, &st, op);
    if (err < 0)
        return err;
    size_t len = (size_t)snprintf(buf, cap, ",");
    while ((err = store_step(db, st, op)) > 0) {
        const char *name = (const char *)sqlite3_column_text(st, 1);
        if (name == NULL || len + strlen(name) + 2 > cap) {
            err = store_failf(db, DETD_ECORRUPT, "%s: table %s", op, t);
            break;
        }
        len += (size_t)snprintf(buf + len, cap - len, "%s,", name);
    }
    sqlite3_finalize(st);
    return err;
}

/* What the scan selects: v->cols, where a column the damaged table lacks
 * (a file of an older schema version) reads as the fresh schema's default
 * for it, as the migration that added the column fills older rows. */
static int salvage_select(struct salvage *v) {
    static const char op[] = "repair: read the schema";
    char have[2048], tok[128], sql[256];
    int err = salvage_names(v->o, v->t->name, have, sizeof have);
    if (err < 0)
        return err;
    size_t len = 0;
    v->sel[0] = '\0';
    for (const char *p = v->cols; *p != '\0';) {
        size_t n = strcspn(p, ", ");
        if (n >= sizeof tok - 2)
            return store_failf(v->s, DETD_EINTERNAL, "%s: column", op);
        snprintf(tok, sizeof tok, ",%.*s,", (int)n, p);
        p += n;
        p += strspn(p, ", ");
        int missing = strstr(have, tok) == NULL;
        tok[n + 1] = '\0'; /* tok + 1: the column's name */
        char dflt[64] = "";
        if (missing) {
            snprintf(sql, sizeof sql,
                     "SELECT dflt_value FROM pragma_table_info('%s')"
                     " WHERE name = '%s'",
                     v->t->name, tok + 1);
            sqlite3_stmt *st = NULL;
            if ((err = store_prepare(v->s, sql, 0, &st, op)) < 0)
                return err;
            if (store_step(v->s, st, op) > 0 &&
                sqlite3_column_type(st, 0) == SQLITE_TEXT)
                snprintf(dflt, sizeof dflt, "%s",
                         (const char *)sqlite3_column_text(st, 0));
            sqlite3_finalize(st);
        }
        /* No default: the scan fails, naming the column. */
        int w = snprintf(v->sel + len, sizeof v->sel - len, "%s%s",
                         len > 0 ? ", " : "", dflt[0] ? dflt : tok + 1);
        if (w < 0 || len + (size_t)w >= sizeof v->sel)
            return store_failf(v->s, DETD_EINTERNAL, "%s: column list", op);
        len += (size_t)w;
    }
    return 0;
}

/* A row read from the damaged file, checked by declared type. */
static int salvage_typecheck(struct salvage *v, sqlite3_stmt *st,
                             const char *op) {
    for (int i = 0; i < v->ncols; i++) {
        if (v->is_int[i]) {
            int64_t x;
            int err = store_col_int(v->o, st, i, INT64_MIN, INT64_MAX, op, &x);
            if (err < 0)
                return err;
        } else {
            const char *p;
            size_t n;
            if (sqlite3_column_type(st, i) != SQLITE_TEXT)
                return store_failf(v->o, DETD_ECORRUPT, "%s: not text", op);
            int err = store_col_text(v->o, st, i, op, &p, &n);
            if (err < 0)
                return err;
        }
    }
    return 0;
}

/* Copy the current row of st (a scan of the damaged file) into the fresh
 * store; a row that fails the checks is counted, not copied. */
static int salvage_row(struct salvage *v, sqlite3_stmt *st) {
    static const char op[] = "repair: copy a row";
    int err = v->t->check != NULL ? v->t->check(v->o, st, op)
                                  : salvage_typecheck(v, st, op);
    if (err == DETD_ECORRUPT) {
        v->invalid++;
        return 0;
    }
    if (err < 0)
        return err;
    for (int i = 0; i < v->ncols; i++) {
        int rc =
            sqlite3_bind_value(v->insert, i + 1, sqlite3_column_value(st, i));
        if (rc != SQLITE_OK) {
            err = store_fail(v->s, rc, "repair: bind a row");
            goto out;
        }
    }
    if ((err = store_step(v->s, v->insert, "repair: insert a row")) < 0)
        goto out;
    if (sqlite3_changes(v->s->db) > 0)
        v->kept++;
    else
        v->invalid++; /* a duplicate key: only one copy is kept */
out:
    store_stmt_done(v->insert);
    return err;
}

/* Can a scan seek to the first row with rowid >= from? 1: yes (*ret_rowid
 * is that row, *ret_end set when there is none), 0: the seek hit damage. */
static int salvage_probe(struct salvage *v, int64_t from, int64_t *ret_rowid,
                         int *ret_end) {
    sqlite3_bind_int64(v->probe, 1, from);
    int rc = sqlite3_step(v->probe);
    int ok = rc == SQLITE_ROW || rc == SQLITE_DONE;
    *ret_end = rc == SQLITE_DONE;
    if (rc == SQLITE_ROW)
        *ret_rowid = sqlite3_column_int64(v->probe, 0);
    sqlite3_reset(v->probe);
    return ok;
}

/* After a failed seek at from: the first rowid > from that a seek
 * reaches (*ret_next, returns 1), or 0 when none does (the rest of the
 * table is unreadable). Unsigned arithmetic: rowids span all of int64. */
static int salvage_skip(struct salvage *v, int64_t from, int64_t *ret_next) {
    const uint64_t room = (uint64_t)INT64_MAX - (uint64_t)from;
    int64_t lo = from, hi = from, r;
    int end, found = 0;
    for (uint64_t step = 1; step <= room && step != 0;) {
        hi = (int64_t)((uint64_t)from + step);
        if (salvage_probe(v, hi, &r, &end)) {
            found = 1;
            break;
        }
        lo = hi;
        if (step == room)
            break;
        step = step > room / 2 ? room : step * 2;
    }
    if (!found)
        return 0;
    while ((uint64_t)hi - (uint64_t)lo > 1) { /* lo fails, hi seeks */
        int64_t mid =
            (int64_t)((uint64_t)lo + ((uint64_t)hi - (uint64_t)lo) / 2);
        if (salvage_probe(v, mid, &r, &end))
            hi = mid;
        else
            lo = mid;
    }
    *ret_next = hi;
    return 1;
}

/* Rows of the damaged table by its unique index (no table page read). */
static int salvage_count(struct salvage *v, uint64_t *ret) {
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM (SELECT 1 FROM %s INDEXED BY %s"
             " ORDER BY 1)",
             v->t->name, v->t->index);
    int64_t n;
    if (store_query_int(v->o, sql, "repair: count rows", &n) < 0 || n < 0)
        return -1;
    *ret = (uint64_t)n;
    return 0;
}

static int salvage_table(store *s, store *o, const struct salvage_table *t,
                         uint64_t *ret_kept, uint64_t *ret_lost,
                         int *ret_unknown) {
    static const char op[] = "repair: read the damaged file";
    struct salvage v;
    memset(&v, 0, sizeof v);
    v.s = s;
    v.o = o;
    v.t = t;
    int err = salvage_columns(&v);
    if (err < 0 || (err = salvage_select(&v)) < 0)
        return err;
    char sql[2048];
    snprintf(sql, sizeof sql,
             "SELECT %s, rowid FROM %s WHERE rowid >= ?1 ORDER BY rowid", v.sel,
             t->name);
    if ((err = store_prepare(o, sql, 0, &v.scan, op)) < 0)
        goto out;
    snprintf(sql, sizeof sql,
             "SELECT rowid FROM %s WHERE rowid >= ?1 ORDER BY rowid LIMIT 1",
             t->name);
    if ((err = store_prepare(o, sql, 0, &v.probe, op)) < 0)
        goto out;
    int n =
        snprintf(sql, sizeof sql, "INSERT OR IGNORE INTO %s (%s) VALUES (?1",
                 t->name, v.cols);
    for (int i = 2; i <= v.ncols && n > 0 && (size_t)n < sizeof sql; i++)
        n += snprintf(sql + n, sizeof sql - (size_t)n, ", ?%d", i);
    if (n > 0 && (size_t)n < sizeof sql)
        snprintf(sql + n, sizeof sql - (size_t)n, ")");
    if ((err = store_prepare(s, sql, 0, &v.insert, op)) < 0)
        goto out;

    int64_t next = INT64_MIN;
    for (;;) {
        sqlite3_bind_int64(v.scan, 1, next);
        int rc, more = 1;
        while ((rc = sqlite3_step(v.scan)) == SQLITE_ROW) {
            int64_t rowid = sqlite3_column_int64(v.scan, v.ncols);
            if ((err = salvage_row(&v, v.scan)) < 0)
                goto out;
            if (rowid == INT64_MAX) {
                more = 0;
                break;
            }
            next = rowid + 1;
        }
        sqlite3_reset(v.scan);
        if (rc == SQLITE_DONE || !more)
            break;
        if ((rc & 0xff) == SQLITE_NOMEM) {
            err = store_failf(s, DETD_ENOMEM, "%s: out of memory", op);
            goto out;
        }
        /* Damage at next. A seek that works means one row's content is
         * unreadable: skip that row. Else skip the unreadable range: a
         * b-tree keeps every rowid up to a divider key left of it, so the
         * first rowid a seek reaches again is the next readable row. */
        v.damaged = 1;
        int64_t r;
        int end;
        if (salvage_probe(&v, next, &r, &end)) {
            if (end || r == INT64_MAX)
                break;
            v.invalid++;
            next = r + 1;
            continue;
        }
        if (!salvage_skip(&v, next, &next))
            break; /* nothing past the damage can be reached */
    }
    uint64_t there;
    *ret_kept = v.kept;
    *ret_unknown = 0;
    if (salvage_count(&v, &there) == 0 && there >= v.kept)
        *ret_lost = there - v.kept;
    else if (!v.damaged)
        *ret_lost = v.invalid; /* every row was read: the count is exact */
    else {
        *ret_lost = v.invalid;
        *ret_unknown = 1;
    }
    err = 0;
out:
    sqlite3_finalize(v.scan);
    sqlite3_finalize(v.probe);
    sqlite3_finalize(v.insert);
    return err;
}

static char *repair_msg(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
static char *repair_msg(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *p = NULL;
    if (vasprintf(&p, fmt, ap) < 0)
        p = NULL;
    va_end(ap);
    return p;
}

/* path + suffix into buf (sized PATH_MAX-ish by the caller). */
static int with_suffix(char *buf, size_t cap, const char *path,
                       const char *suffix) {
    int n = snprintf(buf, cap, "%s%s", path, suffix);
    return n > 0 && (size_t)n < cap ? 0 : -ENAMETOOLONG;
}

/* Remove a file that may be missing. */
static int remove_if_there(const char *p) {
    return unlink(p) == 0 || errno == ENOENT ? 0 : -errno;
}

/* Make the directory of path durable (the renames in it). */
static int sync_dir_of(const char *path) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == NULL)
        snprintf(dir, sizeof dir, ".");
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = fsync(fd) == 0 ? 0 : -errno;
    close(fd);
    return rc;
}

/* Open the damaged file on a connection of its own (never written: no
 * migration, no journal-mode change; defensive, as store_open() is). */
static int open_damaged(const char *aside, store **ret, char **ret_errmsg) {
    store *o = calloc(1, sizeof *o);
    if (o == NULL)
        return DETD_ENOMEM;
    int rc = sqlite3_open_v2(aside, &o->db,
                             SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX |
                                 SQLITE_OPEN_EXRESCODE,
                             NULL);
    if (rc != SQLITE_OK) {
        int err = o->db != NULL ? store_fail(o, rc, "open") : DETD_ENOMEM;
        *ret_errmsg = repair_msg("damaged file '%s': %s", aside, o->errmsg);
        store_close(o);
        return err;
    }
    sqlite3_db_config(o->db, SQLITE_DBCONFIG_DEFENSIVE, 1, (int *)NULL);
    sqlite3_db_config(o->db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, (int *)NULL);
    *ret = o;
    return 0;
}

/* Build the fresh store at tmp from the damaged file at aside. */
static int repair_build(const char *tmp, const char *aside,
                        struct store_repair_report *rep, char **ret_errmsg) {
    store *s = NULL, *o = NULL;
    char *msg = NULL;
    int err = store_open(tmp, &s, &msg);
    if (err < 0) {
        *ret_errmsg = repair_msg("create the fresh store: %s",
                                 msg != NULL ? msg : detd_strerror(err));
        free(msg);
        return err;
    }
    if ((err = open_damaged(aside, &o, ret_errmsg)) < 0) {
        store_close(s);
        return err;
    }
    store *bad = o; /* whose message explains a failure */
    int64_t version = 0, ours = 0;
    if ((err = store_query_int(o, "PRAGMA user_version",
                               "read the schema version", &version)) < 0)
        goto out;
    bad = s;
    if ((err = store_query_int(s, "PRAGMA user_version",
                               "repair: schema version", &ours)) < 0)
        goto out;
    if (version > ours) {
        err = store_failf(s, DETD_ECORRUPT,
                          "schema version %lld is newer than version %lld, "
                          "the newest this build knows: use a newer detd",
                          (long long)version, (long long)ours);
        goto out;
    }
    if ((err = store_begin(s, "repair: copy")) < 0)
        goto out;
    for (int i = 0; i < STORE_REPAIR_TABLES; i++) {
        const struct salvage_table *t = &salvage_tables[i];
        rep->t[i].table = t->name;
        /* A table the old schema lacks (an older version) has no rows. */
        char q[160];
        int64_t has = 0;
        snprintf(q, sizeof q,
                 "SELECT count(*) FROM sqlite_schema WHERE type = 'table'"
                 " AND name = '%s'",
                 t->name);
        bad = o;
        if ((err = store_query_int(o, q, "read the schema", &has)) < 0)
            goto out;
        bad = s;
        if (has == 0)
            continue;
        if ((err = salvage_table(s, o, t, &rep->t[i].kept, &rep->t[i].lost,
                                 &rep->t[i].lost_unknown)) < 0)
            goto out;
    }
    if ((err = store_exec(s,
                          "INSERT OR REPLACE INTO meta(name, value) VALUES"
                          " ('repaired_at_ms', CAST((julianday('now') -"
                          " 2440587.5) * 86400000.0 AS INTEGER))",
                          "repair: mark the store")) < 0 ||
        (err = store_commit(s, "repair: commit the salvaged rows")) < 0)
        goto out;
out:
    if (err < 0) {
        store_rollback(s);
        *ret_errmsg =
            bad == o ? repair_msg("damaged file '%s': %s", aside, o->errmsg)
                     : repair_msg("fresh store '%s': %s", tmp,
                                  s->errmsg[0] != '\0' ? s->errmsg : o->errmsg);
    }
    store_close(o);
    store_close(s);
    return err;
}

/* See store.h. */
int store_repair(const char *path, const char *aside,
                 struct store_repair_report *ret, char **ret_errmsg) {
    char tmp[4096], wal[4096], shm[4096], aside_wal[4096], t[4096];
    char *msg = NULL;
    struct store_repair_report rep;
    memset(&rep, 0, sizeof rep);
    int err;
    if (ret_errmsg != NULL)
        *ret_errmsg = NULL;
    if (path == NULL || aside == NULL || ret == NULL)
        return DETD_EINVAL;
    if ((err = with_suffix(tmp, sizeof tmp, path, ".repair")) < 0 ||
        (err = with_suffix(wal, sizeof wal, path, "-wal")) < 0 ||
        (err = with_suffix(shm, sizeof shm, path, "-shm")) < 0 ||
        (err = with_suffix(aside_wal, sizeof aside_wal, aside, "-wal")) < 0) {
        msg = repair_msg("'%s': path too long", path);
        goto out;
    }
    /* Keep the damaged file (and what its WAL holds) under aside. */
    if (link(path, aside) != 0) {
        err = -errno;
        msg = repair_msg("keep the damaged store '%s' as '%s': %s", path, aside,
                         strerror(-err));
        goto out;
    }
    if (link(wal, aside_wal) != 0 && errno != ENOENT) {
        err = -errno;
        msg =
            repair_msg("keep '%s' as '%s': %s", wal, aside_wal, strerror(-err));
        goto out;
    }
    /* Leftovers of an interrupted repair. */
    const char *const sfx[] = {"", "-wal", "-shm"};
    for (size_t i = 0; i < 3; i++) {
        if ((err = with_suffix(t, sizeof t, tmp, sfx[i])) < 0 ||
            (err = remove_if_there(t)) < 0) {
            msg = repair_msg("remove '%s': %s", t, strerror(-err));
            goto out;
        }
    }
    if ((err = repair_build(tmp, aside, &rep, &msg)) < 0)
        goto out;
    /* The fresh file is closed (checkpointed, synced): swap it in. The
     * damaged file's WAL and index must not be applied to it. */
    if ((err = remove_if_there(wal)) < 0 || (err = remove_if_there(shm)) < 0) {
        msg = repair_msg("remove the damaged store's '%s': %s", wal,
                         strerror(-err));
        goto out;
    }
    if (rename(tmp, path) != 0) {
        err = -errno;
        msg = repair_msg("rename '%s' to '%s': %s", tmp, path, strerror(-err));
        goto out;
    }
    if ((err = sync_dir_of(path)) < 0) {
        msg =
            repair_msg("sync the directory of '%s': %s", path, strerror(-err));
        goto out;
    }
    *ret = rep;
    return 0;
out:
    if (ret_errmsg != NULL)
        *ret_errmsg = msg;
    else
        free(msg);
    return err;
}
