/*
 * store_vote: record-mode votes in the SQLite store (see store.h). Part
 * of the store adapter: shares its helpers through store_int.h.
 */
#include <stdlib.h>
#include <string.h>

#include "detd/error.h"
#include "data/store_int.h"

#define VOTE_COLS                                                              \
    "seq, id, host, pid, ns, arch, kernel, key, table_key, candidates_fp, "    \
    "config, rank, local_rank, device, timings_json, triton_version, "         \
    "voted_at_ms"
enum {
    VC_SEQ,
    VC_ID,
    VC_HOST,
    VC_PID,
    VC_NS,
    VC_ARCH,
    VC_KERNEL,
    VC_KEY,
    VC_TABLE_KEY,
    VC_CANDIDATES_FP,
    VC_CONFIG,
    VC_RANK,
    VC_LOCAL_RANK,
    VC_DEVICE,
    VC_TIMINGS_JSON,
    VC_TRITON_VERSION,
    VC_VOTED_AT_MS
};

/* Inside the transaction: insert v (every column but seq). */
static int vote_insert(store *s, const struct store_vote *v, const char *op) {
    sqlite3_stmt *st = NULL;
    int err = store_prepare(s,
                            "INSERT INTO votes (" VOTE_COLS ") VALUES (NULL,"
                            " ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12,"
                            " ?13, ?14, ?15, ?16, ?17)",
                            0, &st, op);
    if (err < 0)
        return err;
    const struct {
        int col;
        const char *v;
        const char *what;
    } strs[] = {
        {VC_ID, v->id, "vote id"},
        {VC_HOST, v->host, "host"},
        {VC_NS, v->ns, "namespace"},
        {VC_ARCH, v->arch, "arch"},
        {VC_KERNEL, v->kernel, "kernel"},
        {VC_KEY, v->key, "key"},
        {VC_TABLE_KEY, v->table_key, "table_key"},
        {VC_CANDIDATES_FP, v->candidates_fp, "candidates_fp"},
        {VC_CONFIG, v->config, "config"},
        {VC_DEVICE, v->device, "device"},
        {VC_TIMINGS_JSON, v->timings_json, "timings"},
        {VC_TRITON_VERSION, v->triton_version, "triton_version"},
    };
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++)
        if ((err = store_bind_text(s, st, strs[i].col + 1, strs[i].v,
                                   strs[i].what)) < 0)
            goto out;
    if ((err = store_bind_int(s, st, VC_PID + 1, v->pid, op)) < 0 ||
        (err = store_bind_int(s, st, VC_RANK + 1, v->rank, op)) < 0 ||
        (err = store_bind_int(s, st, VC_LOCAL_RANK + 1, v->local_rank, op)) <
            0 ||
        (err = store_bind_int(s, st, VC_VOTED_AT_MS + 1, v->voted_at_ms, op)) <
            0)
        goto out;
    int rc = sqlite3_step(st);
    if (rc != SQLITE_DONE)
        err = store_fail(s, rc, op);
out:
    sqlite3_finalize(st);
    return err;
}

/* Inside the transaction: delete the vote of (id, host, pid), if any. */
static int vote_delete_same(store *s, const struct store_vote *v,
                            const char *op, int *ret_deleted) {
    sqlite3_stmt *st = NULL;
    int err = store_prepare(
        s, "DELETE FROM votes WHERE id = ?1 AND host = ?2 AND pid = ?3", 0, &st,
        op);
    if (err < 0)
        return err;
    if ((err = store_bind_text(s, st, 1, v->id, op)) < 0 ||
        (err = store_bind_text(s, st, 2, v->host, op)) < 0 ||
        (err = store_bind_int(s, st, 3, v->pid, op)) < 0)
        goto out;
    int rc = sqlite3_step(st);
    if (rc != SQLITE_DONE) {
        err = store_fail(s, rc, op);
        goto out;
    }
    *ret_deleted = sqlite3_changes(s->db) > 0;
out:
    sqlite3_finalize(st);
    return err;
}

int store_put_vote(store *s, const struct store_vote *v, uint64_t max_votes,
                   int *ret_replaced, uint64_t *ret_total) {
    static const char op[] = "put vote";
    if (s == NULL || v == NULL)
        return store_einval(s, op, "a NULL argument");
    if (v->id == NULL || v->ns == NULL || v->arch == NULL ||
        v->kernel == NULL || v->config == NULL || v->host == NULL)
        return store_failf(s, DETD_EINVAL,
                           "%s: id, ns, arch, kernel, config and host are "
                           "required",
                           op);
    int err = store_begin(s, op);
    if (err < 0)
        return err;
    int replaced = 0;
    int64_t total = 0;
    if ((err = vote_delete_same(s, v, op, &replaced)) < 0 ||
        (err = store_query_int(s, "SELECT count(*) FROM votes", op, &total)) <
            0)
        goto out;
    if (max_votes > 0 && (uint64_t)total >= max_votes) {
        err = store_failf(s, DETD_ELIMIT,
                          "%s: the vote store is full (%llu votes, the "
                          "limit): export and clear votes to record more",
                          op, (unsigned long long)max_votes);
        goto out;
    }
    if ((err = vote_insert(s, v, op)) < 0 || (err = store_commit(s, op)) < 0)
        goto out;
    if (ret_replaced != NULL)
        *ret_replaced = replaced;
    if (ret_total != NULL)
        *ret_total = (uint64_t)total + 1;
    return 0;
out:
    store_rollback(s);
    return err;
}

int store_count_votes(store *s, const char *ns, uint64_t *ret_total) {
    static const char op[] = "count votes";
    if (s == NULL || ret_total == NULL)
        return store_einval(s, op, "a NULL argument");
    return store_count_ns(s, "votes", ns, op, ret_total);
}

/* The current row of a VOTE_COLS statement, borrowed. */
static int vote_read(store *s, sqlite3_stmt *st, const char *op,
                     struct store_vote *ret) {
    struct store_vote v;
    memset(&v, 0, sizeof v);
    const struct {
        int col;
        const char **field;
    } strs[] = {
        {VC_ID, &v.id},
        {VC_HOST, &v.host},
        {VC_NS, &v.ns},
        {VC_ARCH, &v.arch},
        {VC_KERNEL, &v.kernel},
        {VC_KEY, &v.key},
        {VC_TABLE_KEY, &v.table_key},
        {VC_CANDIDATES_FP, &v.candidates_fp},
        {VC_CONFIG, &v.config},
        {VC_DEVICE, &v.device},
        {VC_TIMINGS_JSON, &v.timings_json},
        {VC_TRITON_VERSION, &v.triton_version},
    };
    int err;
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) {
        size_t n;
        if ((err = store_col_text(s, st, strs[i].col, op, strs[i].field, &n)) <
            0)
            return err;
    }
    int64_t seq;
    if ((err = store_col_int(s, st, VC_SEQ, 1, INT64_MAX, op, &seq)) < 0 ||
        (err = store_col_int32(s, st, VC_PID, INT32_MIN, INT32_MAX, op,
                               &v.pid)) < 0 ||
        (err = store_col_int32(s, st, VC_RANK, INT32_MIN, INT32_MAX, op,
                               &v.rank)) < 0 ||
        (err = store_col_int32(s, st, VC_LOCAL_RANK, INT32_MIN, INT32_MAX, op,
                               &v.local_rank)) < 0 ||
        (err = store_col_int(s, st, VC_VOTED_AT_MS, INT64_MIN, INT64_MAX, op,
                             &v.voted_at_ms)) < 0)
        return err;
    v.seq = (uint64_t)seq;
    *ret = v;
    return 0;
}

int store_each_vote(store *s, const char *ns, const char *arch,
                    const char *kernel, uint64_t after, uint32_t limit,
                    store_vote_cb cb, void *ctx) {
    static const char op[] = "list votes";
    if (s == NULL || cb == NULL)
        return store_einval(s, op, "a NULL argument");
    if (after > INT64_MAX)
        return store_einval(s, op, "after is out of range");
    sqlite3_stmt *st = NULL;
    int err = store_prepare(
        s,
        "SELECT " VOTE_COLS " FROM votes"
        " WHERE (?1 IS NULL OR ns = ?1) AND (?2 IS NULL OR arch = ?2)"
        " AND " STORE_KERNEL_MATCH("kernel", 3) " AND seq > ?4"
                                                " ORDER BY seq LIMIT ?5",
        0, &st, op);
    if (err < 0)
        return err;
    if ((ns != NULL && (err = store_bind_text(s, st, 1, ns, op)) < 0) ||
        (arch != NULL && (err = store_bind_text(s, st, 2, arch, op)) < 0) ||
        (kernel != NULL && (err = store_bind_text(s, st, 3, kernel, op)) < 0) ||
        (err = store_bind_int(s, st, 4, (int64_t)after, op)) < 0 ||
        (err = store_bind_int(s, st, 5, limit == 0 ? -1 : (int64_t)limit, op)) <
            0)
        goto out;
    while ((err = store_step(s, st, op)) > 0) {
        struct store_vote v;
        if ((err = vote_read(s, st, op, &v)) < 0)
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

int store_reset_votes(store *s, const char *ns, const char *kernel,
                      uint64_t *ret_removed) {
    static const char op[] = "reset votes";
    if (s == NULL || ns == NULL)
        return store_einval(s, op, "ns is NULL");
    return store_delete_ns(s,
                           "DELETE FROM votes WHERE ns = ?1"
                           " AND " STORE_KERNEL_MATCH("kernel", 2),
                           ns, kernel, op, ret_removed);
}
