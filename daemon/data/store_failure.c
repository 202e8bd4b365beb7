/*
 * store_failure: timing passes in which every candidate failed (see
 * store.h). Kept per decision id, so that a rerun of the same code gets
 * the failure at once; a new code guard is a new id, and `detctl reset`
 * (store_reset()) forgets them with the decisions.
 */
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "data/store_int.h"
#include "detd/error.h"

#define FAILURE_COLS                                                           \
    "id, ns, arch, kernel, key, reason, by_host, by_pid, by_rank, at_ms, "     \
    "claimed_pid, by_uid, by_node"

/* See store.h. */
int store_put_failure(store *s, const struct store_failure *f) {
    static const char op[] = "record a failed timing pass";
    if (s == NULL || f == NULL || f->id == NULL)
        return store_einval(s, op, "a NULL argument");
    if (f->by_uid < -1 || f->by_uid > (int64_t)UINT32_MAX)
        return store_einval(s, op, "by_uid out of range");
    sqlite3_stmt *st = NULL;
    int err =
        store_prepare(s,
                      "INSERT OR REPLACE INTO failures (" FAILURE_COLS
                      ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, "
                      "?12, ?13)",
                      0, &st, op);
    if (err < 0)
        return err;
    const char *strs[] = {f->id,  f->ns,     f->arch,    f->kernel,
                          f->key, f->reason, f->by_host, f->by_node};
    static const int str_cols[] = {1, 2, 3, 4, 5, 6, 7, 13};
    for (int i = 0; i < 8; i++)
        if ((err = store_bind_text(s, st, str_cols[i], strs[i] ? strs[i] : "",
                                   op)) < 0)
            goto out;
    if ((err = store_bind_int(s, st, 8, f->by_pid, op)) < 0 ||
        (err = store_bind_int(s, st, 9, f->by_rank, op)) < 0 ||
        (err = store_bind_int(s, st, 10, f->at_ms, op)) < 0 ||
        (err = store_bind_int(s, st, 11, f->by_claimed_pid, op)) < 0 ||
        (err = store_bind_int(s, st, 12, f->by_uid, op)) < 0)
        goto out;
    if ((err = store_step(s, st, op)) > 0)
        err = store_failf(s, DETD_ESTORE, "%s: an INSERT returned a row", op);
out:
    sqlite3_finalize(st);
    return err;
}

/* See store.h. */
int store_get_failure(store *s, const char *id, struct store_failure *ret) {
    static const char op[] = "read a failed timing pass";
    if (s == NULL || id == NULL || ret == NULL)
        return store_einval(s, op, "a NULL argument");
    struct store_failure f;
    memset(&f, 0, sizeof f);
    sqlite3_stmt *st = NULL;
    int err = store_prepare(
        s, "SELECT " FAILURE_COLS " FROM failures WHERE id = ?1", 0, &st, op);
    if (err < 0)
        return err;
    if ((err = store_bind_text(s, st, 1, id, op)) < 0)
        goto out;
    if ((err = store_step(s, st, op)) == 0)
        err = store_failf(s, DETD_ENOTFOUND, "%s: none for %s", op, id);
    if (err < 0)
        goto out;
    char **strs[] = {&f.id,  &f.ns,     &f.arch,    &f.kernel,
                     &f.key, &f.reason, &f.by_host, &f.by_node};
    static const int str_cols[] = {0, 1, 2, 3, 4, 5, 6, 12};
    for (int i = 0; i < 8; i++)
        if ((err = store_col_strdup(s, st, str_cols[i], op, strs[i])) < 0)
            goto out;
    if ((err = store_col_int32(s, st, 7, INT32_MIN, INT32_MAX, op, &f.by_pid)) <
            0 ||
        (err = store_col_int32(s, st, 8, INT32_MIN, INT32_MAX, op,
                               &f.by_rank)) < 0 ||
        (err = store_col_int(s, st, 9, INT64_MIN, INT64_MAX, op, &f.at_ms)) <
            0 ||
        (err = store_col_int32(s, st, 10, INT32_MIN, INT32_MAX, op,
                               &f.by_claimed_pid)) < 0 ||
        (err = store_col_int(s, st, 11, -1, UINT32_MAX, op, &f.by_uid)) < 0)
        goto out;
    *ret = f;
    memset(&f, 0, sizeof f);
    err = 0;
out:
    store_failure_clear(&f);
    sqlite3_finalize(st);
    return err;
}

/* See store.h. */
void store_failure_clear(struct store_failure *f) {
    if (f == NULL)
        return;
    char *strs[] = {f->id,  f->ns,     f->arch,    f->kernel,
                    f->key, f->reason, f->by_host, f->by_node};
    for (int i = 0; i < 8; i++)
        free(strs[i]);
    memset(f, 0, sizeof *f);
}
