/*
 * store_int: what the files of the SQLite adapter (store.c, store_sql.c,
 * store_vote.c, store_import.c, store_repair.c) share. Internal to the adapter:
 * nothing outside daemon/data/store*.c includes it, and sqlite3_* stays inside
 * those files.
 *
 * Every helper below records why it failed in s->errmsg (store_errmsg())
 * and returns a negative DETD_E* code; "op" names the operation in that
 * message. Text read back is borrowed from the statement (valid until it
 * is stepped, reset or finalized) unless the helper says it copies.
 */
#ifndef DETD_STORE_INT_H
#define DETD_STORE_INT_H

#include <stdint.h>

#include <sqlite3.h>

#include "detd/client.h"
#include "data/store.h"

/* Longest string stored or read back: the largest message we accept. */
#define STORE_MAX_TEXT DETD_MAX_MESSAGE_BYTES

struct store {
    sqlite3 *db;
    /* Cached statements for the hot paths; the rest are prepared per call. */
    sqlite3_stmt *get_decision;
    sqlite3_stmt *put_decision;
    sqlite3_stmt *put_observation; /* prepared at first use (store_obs.c) */
    char *path;                    /* the file, named in messages (disk full) */
    uint64_t writes_ok;            /* writes committed (store_writes()) */
    char errmsg[512];
};

/* Column order of every decision SELECT and INSERT (store_read_decision),
 * and of every observation SELECT (store_read_observation). */
#define DECISION_COLS                                                          \
    "id, ns, arch, kernel, key, candidates_fp, n_candidates, config, "         \
    "source, claim_id, by_host, by_pid, by_rank, by_local_rank, by_device, "   \
    "by_arch, triton_version, timings_json, table_file, decided_at_ms, "       \
    "by_uid, by_node, by_claimed_pid, by_world_size, by_job, timing_json"
#define OBSERVATION_COLS                                                       \
    "id, host, pid, ns, arch, kernel, key, config, source, governed, "         \
    "chaos, rank, local_rank, device, at_ms, claimed_pid, peer_uid, node, "    \
    "job, failed, error, audit, audit_differing, why, proc_start"

/* Read and check the current row of a DECISION_COLS statement into *ret
 * (heap strings: decision_clear()). DETD_ECORRUPT for a bad value. */
struct decision;
int store_read_decision(store *s, sqlite3_stmt *st, const char *op,
                        struct decision *ret);
/* Read and check the current row of an OBSERVATION_COLS statement; the
 * strings are borrowed from st. */
struct store_observation;
int store_read_observation(store *s, sqlite3_stmt *st, const char *op,
                           struct store_observation *ret);

/* Format the message into s->errmsg; returns err. */
int store_failf(store *s, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* An argument error (s may be NULL: then only the code). */
int store_einval(store *s, const char *op, const char *why);
/* SQLite's message for rc, converted to a DETD_E* code: a full disk (or
 * quota) is -ENOSPC with a message naming the file and "disk full"; an
 * I/O error or a file system gone read-only is -EIO naming the file and
 * "disk error". */
int store_fail(store *s, int rc, const char *op);
int store_exec(store *s, const char *sql, const char *op);
/* *ret owns the statement (sqlite3_finalize()). */
int store_prepare(store *s, const char *sql, unsigned flags, sqlite3_stmt **ret,
                  const char *op);
/* Reset a cached statement and clear its bindings. */
void store_stmt_done(sqlite3_stmt *st);
/* BEGIN IMMEDIATE / COMMIT (rolls back on failure; counts a committed
 * write on success) / ROLLBACK if open. */
int store_begin(store *s, const char *op);
int store_commit(store *s, const char *op);
void store_rollback(store *s);
/* A one-row, one-integer query. */
int store_query_int(store *s, const char *sql, const char *op, int64_t *ret);
/* A one-row, one-text query with one or two text parameters (a2 NULL:
 * one): a heap copy into *ret, DETD_ENOTFOUND without a row. */
int store_query_text(store *s, const char *sql, const char *op, const char *a1,
                     const char *a2, char **ret);
/* Step st: 1 with a row to read, 0 when done (a write outside a
 * transaction is counted as committed), or a negative DETD_E* code with
 * the error recorded for op. */
int store_step(store *s, sqlite3_stmt *st, const char *op);
/* Run a DELETE whose ?1 is the namespace and ?2 a kernel filter (NULL:
 * none); *ret_removed (may be NULL) gets the rows deleted. */
int store_delete_ns(store *s, const char *sql, const char *ns,
                    const char *kernel, const char *op, uint64_t *ret_removed);
/* The rows of table (a fixed name, never input) in namespace ns (NULL:
 * all namespaces) into *ret. */
int store_count_ns(store *s, const char *table, const char *ns, const char *op,
                   uint64_t *ret);
/* Bind v (NULL: "") borrowed until the statement is reset; over
 * DETD_MAX_MESSAGE_BYTES: DETD_ELIMIT naming what. */
int store_bind_text(store *s, sqlite3_stmt *st, int idx, const char *v,
                    const char *what);
int store_bind_int(store *s, sqlite3_stmt *st, int idx, int64_t v,
                   const char *what);
/* Column i checked (length cap, no NUL byte; NULL reads as ""),
 * borrowed; store_col_strdup() returns a heap copy instead. */
int store_col_text(store *s, sqlite3_stmt *st, int i, const char *op,
                   const char **ret, size_t *ret_len);
int store_col_strdup(store *s, sqlite3_stmt *st, int i, const char *op,
                     char **ret);
/* Column i as an integer in [min, max]; else DETD_ECORRUPT. */
int store_col_int(store *s, sqlite3_stmt *st, int i, int64_t min, int64_t max,
                  const char *op, int64_t *ret);
int store_col_int32(store *s, sqlite3_stmt *st, int i, int64_t min, int64_t max,
                    const char *op, int32_t *ret);

/*
 * The SQL condition on a kernel column matching filter parameter ?N: an
 * exact kernel id, or "module:qualname" (no '@') for every code version
 * of it. Used with a NULL parameter meaning "all".
 */
#define STORE_KERNEL_MATCH(col, n)                                             \
    "(?" #n " IS NULL OR " col " = ?" #n " OR (instr(?" #n ", '@') = 0 AND"    \
    " substr(" col ", 1, length(?" #n ") + 1) = ?" #n " || '@'))"

#endif /* DETD_STORE_INT_H */
