/*
 * store_import: imported table entries in the SQLite store (see store.h).
 * Part of the store adapter: shares its helpers through store_int.h.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "detd/error.h"
#include "data/store_int.h"

/* At most this many kernel names and keys in one lookup. */
#define IMPORT_MAX_MATCH 8

/* Inside the transaction: the stored config and file of v's entry, as a
 * heap "config\tfile" in *ret (NULL when there is none). */
static int import_existing(store *s, const struct store_import *v,
                           const char *op, char **ret) {
    sqlite3_stmt *st = NULL;
    *ret = NULL;
    int err = store_prepare(s,
                            "SELECT config, file FROM imports WHERE ns = ?1"
                            " AND arch = ?2 AND kernel = ?3 AND key = ?4",
                            0, &st, op);
    if (err < 0)
        return err;
    if ((err = store_bind_text(s, st, 1, v->ns, "namespace")) < 0 ||
        (err = store_bind_text(s, st, 2, v->arch, "arch")) < 0 ||
        (err = store_bind_text(s, st, 3, v->kernel, "kernel")) < 0 ||
        (err = store_bind_text(s, st, 4, v->key, "key")) < 0)
        goto out;
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE)
        goto out;
    if (rc != SQLITE_ROW) {
        err = store_fail(s, rc, op);
        goto out;
    }
    const char *config, *file;
    size_t n;
    if ((err = store_col_text(s, st, 0, op, &config, &n)) < 0 ||
        (err = store_col_text(s, st, 1, op, &file, &n)) < 0)
        goto out;
    if (asprintf(ret, "%s\t%s", config, file) < 0) {
        *ret = NULL;
        err = store_failf(s, DETD_ENOMEM, "%s: out of memory", op);
    }
out:
    sqlite3_finalize(st);
    return err;
}

/* Inside the transaction: insert or replace v. */
static int import_put(store *s, sqlite3_stmt *st, const struct store_import *v,
                      const char *op) {
    int err;
    if ((err = store_bind_text(s, st, 1, v->ns, "namespace")) < 0 ||
        (err = store_bind_text(s, st, 2, v->arch, "arch")) < 0 ||
        (err = store_bind_text(s, st, 3, v->kernel, "kernel")) < 0 ||
        (err = store_bind_text(s, st, 4, v->key, "key")) < 0 ||
        (err = store_bind_text(s, st, 5, v->table_key, "table_key")) < 0 ||
        (err = store_bind_text(s, st, 6, v->config, "config")) < 0 ||
        (err = store_bind_text(s, st, 7, v->file, "file")) < 0 ||
        (err = store_bind_int(s, st, 8, v->imported_at_ms, op)) < 0)
        return err;
    int rc = sqlite3_step(st);
    if (rc != SQLITE_DONE)
        err = store_fail(s, rc, op);
    store_stmt_done(st);
    return err;
}

int store_put_imports(store *s, const struct store_import *v, size_t n,
                      enum store_import_result *ret_results, char **ret_old) {
    static const char op[] = "import entries";
    if (s == NULL || (v == NULL && n > 0))
        return store_einval(s, op, "a NULL argument");
    for (size_t i = 0; i < n; i++)
        if (v[i].ns == NULL || v[i].arch == NULL || v[i].kernel == NULL ||
            v[i].key == NULL || v[i].config == NULL || v[i].file == NULL)
            return store_failf(s, DETD_EINVAL,
                               "%s: entry %zu: ns, arch, kernel, key, config "
                               "and file are required",
                               op, i);
    char **old = calloc(n ? n : 1, sizeof(*old));
    enum store_import_result *res = calloc(n ? n : 1, sizeof(*res));
    sqlite3_stmt *st = NULL;
    int err;
    if (old == NULL || res == NULL) {
        err = store_failf(s, DETD_ENOMEM, "%s: out of memory", op);
        goto fail;
    }
    if ((err = store_begin(s, op)) < 0)
        goto fail;
    if ((err = store_prepare(s,
                             "INSERT OR REPLACE INTO imports (ns, arch, "
                             "kernel, key, table_key, config, file, "
                             "imported_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6,"
                             " ?7, ?8)",
                             0, &st, op)) < 0)
        goto rollback;
    for (size_t i = 0; i < n; i++) {
        if ((err = import_existing(s, &v[i], op, &old[i])) < 0)
            goto rollback;
        if (old[i] != NULL) {
            size_t cl = strcspn(old[i], "\t");
            if (strlen(v[i].config) == cl &&
                strncmp(old[i], v[i].config, cl) == 0) {
                res[i] = STORE_IMPORT_UNCHANGED;
                free(old[i]);
                old[i] = NULL;
                continue;
            }
            res[i] = STORE_IMPORT_REPLACED;
        } else {
            res[i] = STORE_IMPORT_ADDED;
        }
        if ((err = import_put(s, st, &v[i], op)) < 0)
            goto rollback;
    }
    sqlite3_finalize(st);
    st = NULL;
    if ((err = store_commit(s, op)) < 0)
        goto fail;
    if (ret_results != NULL)
        memcpy(ret_results, res, n * sizeof(*res));
    for (size_t i = 0; i < n; i++) {
        if (ret_old != NULL)
            ret_old[i] = old[i];
        else
            free(old[i]);
    }
    free(old);
    free(res);
    return 0;
rollback:
    sqlite3_finalize(st);
    store_rollback(s);
fail:
    for (size_t i = 0; old != NULL && i < n; i++)
        free(old[i]);
    free(old);
    free(res);
    return err;
}

int store_find_imports(store *s, const char *ns, const char *arch,
                       const char *const *kernels, size_t nk,
                       const char *const *keys, size_t nkeys,
                       store_import_cb cb, void *ctx) {
    static const char op[] = "find imported entries";
    if (s == NULL || ns == NULL || arch == NULL || cb == NULL ||
        nk > IMPORT_MAX_MATCH || nkeys > IMPORT_MAX_MATCH)
        return store_einval(s, op, "invalid argument");
    if (nk == 0 || nkeys == 0)
        return 0;
    /* kernel IN (?3..?10), key IN (?11..?18); unused slots stay NULL. */
    sqlite3_stmt *st = NULL;
    int err =
        store_prepare(s,
                      "SELECT ns, arch, kernel, key, table_key, config, file,"
                      " imported_at_ms FROM imports WHERE ns = ?1 AND arch = ?2"
                      " AND kernel IN (?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"
                      " AND key IN (?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)",
                      0, &st, op);
    if (err < 0)
        return err;
    if ((err = store_bind_text(s, st, 1, ns, "namespace")) < 0 ||
        (err = store_bind_text(s, st, 2, arch, "arch")) < 0)
        goto out;
    for (size_t i = 0; i < nk; i++)
        if ((err = store_bind_text(s, st, 3 + (int)i, kernels[i], "kernel")) <
            0)
            goto out;
    for (size_t i = 0; i < nkeys; i++)
        if ((err = store_bind_text(s, st, 11 + (int)i, keys[i], "key")) < 0)
            goto out;
    while ((err = store_step(s, st, op)) > 0) {
        struct store_import v;
        const char **f[] = {&v.ns,        &v.arch,   &v.kernel, &v.key,
                            &v.table_key, &v.config, &v.file};
        size_t n;
        for (int i = 0; i < 7; i++)
            if ((err = store_col_text(s, st, i, op, f[i], &n)) < 0)
                goto out;
        if ((err = store_col_int(s, st, 7, INT64_MIN, INT64_MAX, op,
                                 &v.imported_at_ms)) < 0)
            goto out;
        if (cb(ctx, &v))
            break;
    }
    if (err > 0)
        err = 0; /* stopped early by the callback */
out:
    sqlite3_finalize(st);
    return err;
}

int store_count_imports(store *s, const char *ns, uint64_t *ret_total) {
    static const char op[] = "count imported entries";
    if (s == NULL || ret_total == NULL)
        return store_einval(s, op, "a NULL argument");
    return store_count_ns(s, "imports", ns, op, ret_total);
}

int store_reset_imports(store *s, const char *ns, const char *kernel,
                        uint64_t *ret_removed) {
    static const char op[] = "reset imported entries";
    if (s == NULL || ns == NULL)
        return store_einval(s, op, "ns is NULL");
    return store_delete_ns(s,
                           "DELETE FROM imports WHERE ns = ?1"
                           " AND (?2 IS NULL OR kernel = ?2)",
                           ns, kernel, op, ret_removed);
}

/* ---- lock entries skipped for their provenance (store.h) ---- */

int store_put_lock_skip(store *s, const char *ns, const char *id,
                        const char *file, const char *reason, int64_t at_ms) {
    static const char op[] = "record a skipped lock entry";
    if (s == NULL || ns == NULL || id == NULL || file == NULL || reason == NULL)
        return store_einval(s, op, "a NULL argument");
    sqlite3_stmt *st = NULL;
    int err = store_prepare(s,
                            "INSERT OR REPLACE INTO lock_skips (ns, id, file,"
                            " reason, at_ms) VALUES (?1, ?2, ?3, ?4, ?5)",
                            0, &st, op);
    if (err < 0)
        return err;
    if ((err = store_bind_text(s, st, 1, ns, op)) < 0 ||
        (err = store_bind_text(s, st, 2, id, op)) < 0 ||
        (err = store_bind_text(s, st, 3, file, op)) < 0 ||
        (err = store_bind_text(s, st, 4, reason, op)) < 0 ||
        (err = store_bind_int(s, st, 5, at_ms, op)) < 0)
        goto out;
    err = store_step(s, st, op);
out:
    sqlite3_finalize(st);
    return err;
}

int store_get_lock_skip(store *s, const char *ns, const char *id,
                        char **ret_file, char **ret_reason) {
    static const char op[] = "look up a skipped lock entry";
    if (s == NULL || ns == NULL || id == NULL || ret_file == NULL ||
        ret_reason == NULL)
        return store_einval(s, op, "a NULL argument");
    sqlite3_stmt *st = NULL;
    int err = store_prepare(s,
                            "SELECT file, reason FROM lock_skips"
                            " WHERE ns = ?1 AND id = ?2",
                            0, &st, op);
    if (err < 0)
        return err;
    if ((err = store_bind_text(s, st, 1, ns, op)) < 0 ||
        (err = store_bind_text(s, st, 2, id, op)) < 0)
        goto out;
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) {
        err = DETD_ENOTFOUND;
        goto out;
    }
    if (rc != SQLITE_ROW) {
        err = store_fail(s, rc, op);
        goto out;
    }
    char *file = NULL;
    if ((err = store_col_strdup(s, st, 0, op, &file)) < 0)
        goto out;
    if ((err = store_col_strdup(s, st, 1, op, ret_reason)) < 0) {
        free(file);
        goto out;
    }
    *ret_file = file;
out:
    sqlite3_finalize(st);
    return err;
}
