/*
 * store_sql: the SQLite helpers the store's files share (store_int.h):
 * result codes turned into DETD_E* (the only place), statements and
 * transactions, binding caller values and reading values back from the
 * file, which is untrusted: every value read is checked (type, range,
 * length, embedded NUL) before it reaches a caller.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "data/store_int.h"
#include "detd/error.h"

/* ---- errors ---- */

static int store_sqlite_err(int rc) {
    switch (rc & 0xff) {
    case SQLITE_NOMEM:
        return DETD_ENOMEM;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
        return DETD_ECORRUPT;
    default:
        return DETD_ESTORE;
    }
}

int store_failf(store *s, int err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->errmsg, sizeof s->errmsg, fmt, ap);
    va_end(ap);
    return err;
}

/* Argument errors; s may be NULL (then there is nowhere to say why). */
int store_einval(store *s, const char *op, const char *why) {
    return s != NULL ? store_failf(s, DETD_EINVAL, "%s: %s", op, why)
                     : DETD_EINVAL;
}

/* Record SQLite's message for op; call before anything else touches db. */
int store_fail(store *s, int rc, const char *op) {
    /* A write that found no room: SQLITE_FULL, or an I/O error whose
     * system error says so (the errno is only meaningful then). */
    int sys = (rc & 0xff) == SQLITE_IOERR ? sqlite3_system_errno(s->db) : 0;
    const char *path = s->path != NULL ? s->path : "(unknown)";
    if ((rc & 0xff) == SQLITE_FULL || sys == ENOSPC || sys == EDQUOT)
        return store_failf(s, -ENOSPC,
                           "%s: disk full: the store '%s' cannot grow (%s); "
                           "nothing was written",
                           op, path, sqlite3_errmsg(s->db));
    /* The file system failed under the file (EIO, a read-only remount):
     * the same request can succeed once the disk recovers. */
    if ((rc & 0xff) == SQLITE_IOERR || (rc & 0xff) == SQLITE_READONLY)
        return store_failf(s, -EIO,
                           "%s: disk error on the store '%s' (%s%s%s); "
                           "nothing was written",
                           op, path, sqlite3_errmsg(s->db),
                           sys != 0 ? ": " : "", sys != 0 ? strerror(sys) : "");
    return store_failf(s, store_sqlite_err(rc), "%s: %s", op,
                       sqlite3_errmsg(s->db));
}

/* ---- statements and transactions ---- */

int store_exec(store *s, const char *sql, const char *op) {
    int rc = sqlite3_exec(s->db, sql, NULL, NULL, NULL);
    if (rc != SQLITE_OK)
        return store_fail(s, rc, op);
    return 0;
}

int store_prepare(store *s, const char *sql, unsigned flags, sqlite3_stmt **ret,
                  const char *op) {
    int rc = sqlite3_prepare_v3(s->db, sql, -1, flags, ret, NULL);
    if (rc != SQLITE_OK)
        return store_fail(s, rc, op);
    return 0;
}

/* Make a cached statement ready for the next use. */
void store_stmt_done(sqlite3_stmt *st) {
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
}

/* IMMEDIATE: take the write lock now, not at the first write. */
int store_begin(store *s, const char *op) {
    return store_exec(s, "BEGIN IMMEDIATE", op);
}

/* Roll back an open transaction, if SQLite has not already done so. */
void store_rollback(store *s) {
    if (!sqlite3_get_autocommit(s->db))
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
}

int store_commit(store *s, const char *op) {
    int err = store_exec(s, "COMMIT", op);
    if (err < 0)
        store_rollback(s);
    else
        s->writes_ok++;
    return err;
}

/* A one-row, one-integer query (PRAGMA user_version, ...). */
int store_query_int(store *s, const char *sql, const char *op, int64_t *ret) {
    sqlite3_stmt *st = NULL;
    int err = store_prepare(s, sql, 0, &st, op);
    if (err < 0)
        return err;
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        err = rc == SQLITE_DONE
                  ? store_failf(s, DETD_ESTORE, "%s: no result", op)
                  : store_fail(s, rc, op);
        goto out;
    }
    *ret = sqlite3_column_int64(st, 0);
out:
    sqlite3_finalize(st);
    return err;
}

int store_query_text(store *s, const char *sql, const char *op, const char *a1,
                     const char *a2, char **ret) {
    sqlite3_stmt *st = NULL;
    int err = store_prepare(s, sql, 0, &st, op);
    if (err < 0)
        return err;
    if ((err = store_bind_text(s, st, 1, a1, op)) < 0 ||
        (a2 != NULL && (err = store_bind_text(s, st, 2, a2, op)) < 0))
        goto out;
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE)
        err = DETD_ENOTFOUND;
    else if (rc != SQLITE_ROW)
        err = store_fail(s, rc, op);
    else
        err = store_col_strdup(s, st, 0, op, ret);
out:
    sqlite3_finalize(st);
    return err;
}

/* ---- binding (values from callers; lengths capped) ---- */

int store_bind_text(store *s, sqlite3_stmt *st, int idx, const char *v,
                    const char *what) {
    if (v == NULL)
        v = "";
    size_t n = strlen(v);
    if (n > STORE_MAX_TEXT)
        return store_failf(s, DETD_ELIMIT, "%s is %zu bytes (limit %d)", what,
                           n, STORE_MAX_TEXT);
    int rc = sqlite3_bind_text(st, idx, v, (int)n, SQLITE_STATIC);
    if (rc != SQLITE_OK)
        return store_fail(s, rc, what);
    return 0;
}

int store_bind_int(store *s, sqlite3_stmt *st, int idx, int64_t v,
                   const char *what) {
    int rc = sqlite3_bind_int64(st, idx, v);
    if (rc != SQLITE_OK)
        return store_fail(s, rc, what);
    return 0;
}

/* ---- reading (values from the file; untrusted) ---- */

/*
 * Borrow column i as a NUL-terminated string of at most STORE_MAX_TEXT
 * bytes without embedded NULs. SQL NULL reads as "". The pointer lives
 * until st is stepped, reset or finalized.
 */
int store_col_text(store *s, sqlite3_stmt *st, int i, const char *op,
                   const char **ret, size_t *ret_len) {
    if (sqlite3_column_type(st, i) == SQLITE_NULL) {
        *ret = "";
        *ret_len = 0;
        return 0;
    }
    const unsigned char *p = sqlite3_column_text(st, i);
    if (p == NULL)
        return store_fail(s, sqlite3_errcode(s->db), op);
    int n = sqlite3_column_bytes(st, i);
    if (n < 0 || n > STORE_MAX_TEXT)
        return store_failf(s, DETD_ECORRUPT,
                           "%s: column %s is %d bytes (limit %d)", op,
                           sqlite3_column_name(st, i), n, STORE_MAX_TEXT);
    if (memchr(p, '\0', (size_t)n) != NULL)
        return store_failf(s, DETD_ECORRUPT, "%s: column %s holds a NUL byte",
                           op, sqlite3_column_name(st, i));
    *ret = (const char *)p;
    *ret_len = (size_t)n;
    return 0;
}

/* Column i as a heap copy (see store_col_text()). */
int store_col_strdup(store *s, sqlite3_stmt *st, int i, const char *op,
                     char **ret) {
    const char *p;
    size_t n;
    int err = store_col_text(s, st, i, op, &p, &n);
    if (err < 0)
        return err;
    char *c = malloc(n + 1);
    if (c == NULL)
        return store_failf(s, DETD_ENOMEM, "%s: out of memory", op);
    memcpy(c, p, n);
    c[n] = '\0';
    *ret = c;
    return 0;
}

/* Column i as an integer in [min, max]; anything else is corruption. */
int store_col_int(store *s, sqlite3_stmt *st, int i, int64_t min, int64_t max,
                  const char *op, int64_t *ret) {
    if (sqlite3_column_type(st, i) != SQLITE_INTEGER)
        return store_failf(s, DETD_ECORRUPT, "%s: column %s is not an integer",
                           op, sqlite3_column_name(st, i));
    int64_t v = sqlite3_column_int64(st, i);
    if (v < min || v > max)
        return store_failf(s, DETD_ECORRUPT,
                           "%s: column %s = %lld is out of range [%lld, %lld]",
                           op, sqlite3_column_name(st, i), (long long)v,
                           (long long)min, (long long)max);
    *ret = v;
    return 0;
}

int store_col_int32(store *s, sqlite3_stmt *st, int i, int64_t min, int64_t max,
                    const char *op, int32_t *ret) {
    int64_t v;
    int err = store_col_int(s, st, i, min, max, op, &v);
    if (err == 0)
        *ret = (int32_t)v;
    return err;
}

/* See store_int.h. */
int store_step(store *s, sqlite3_stmt *st, const char *op) {
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        return 1;
    if (rc == SQLITE_DONE) {
        /* A write outside a transaction is committed now. */
        if (!sqlite3_stmt_readonly(st) && sqlite3_get_autocommit(s->db))
            s->writes_ok++;
        return 0;
    }
    return store_fail(s, rc, op);
}

/* See store_int.h. */
int store_delete_ns(store *s, const char *sql, const char *ns,
                    const char *kernel, const char *op, uint64_t *ret_removed) {
    sqlite3_stmt *st = NULL;
    int err = store_prepare(s, sql, 0, &st, op);
    if (err < 0)
        return err;
    if ((err = store_bind_text(s, st, 1, ns, op)) < 0 ||
        (kernel != NULL && (err = store_bind_text(s, st, 2, kernel, op)) < 0))
        goto out;
    if ((err = store_step(s, st, op)) > 0)
        err = store_failf(s, DETD_ESTORE, "%s: a DELETE returned a row", op);
    if (err == 0 && ret_removed != NULL)
        *ret_removed = (uint64_t)sqlite3_changes64(s->db);
out:
    sqlite3_finalize(st);
    return err;
}

/* See store_int.h. */
int store_count_ns(store *s, const char *table, const char *ns, const char *op,
                   uint64_t *ret) {
    char sql[128];
    snprintf(sql, sizeof(sql),
             "SELECT count(*) FROM %s WHERE (?1 IS NULL OR ns = ?1)", table);
    sqlite3_stmt *st = NULL;
    int err = store_prepare(s, sql, 0, &st, op);
    if (err < 0)
        return err;
    if (ns != NULL && (err = store_bind_text(s, st, 1, ns, op)) < 0)
        goto out;
    if ((err = store_step(s, st, op)) == 0)
        err = store_failf(s, DETD_ESTORE, "%s: no row", op);
    if (err < 0)
        goto out;
    int64_t n;
    if ((err = store_col_int(s, st, 0, 0, INT64_MAX, op, &n)) < 0)
        goto out;
    *ret = (uint64_t)n;
out:
    sqlite3_finalize(st);
    return err;
}
