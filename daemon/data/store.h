/*
 * store: the SQLite adapter. The only module that calls sqlite3_*.
 *
 * One database file per daemon, WAL mode, synchronous=FULL: a function
 * that writes returns only after its transaction committed, so a decision
 * is acknowledged only once it is durable. The schema is versioned
 * (PRAGMA user_version); opening a newer schema than this build knows
 * fails with DETD_ECORRUPT naming both versions; older ones are migrated.
 *
 * Single-threaded: a store handle is used by the loop thread only.
 * Strings in returned rows are heap copies owned by the row.
 *
 * Errors. Functions return 0 or a negative DETD_E* code: DETD_ESTORE for
 * a failure reported by SQLite, DETD_ECORRUPT for a damaged file or a
 * row that fails validation (every value read from the file is checked:
 * string lengths, counts, enum ranges), -ENOSPC when a write found the
 * disk (or the quota) full, with a message naming the file and "disk
 * full", -EIO when the file system failed (an I/O error, a read-only
 * remount), naming the file and "disk error", DETD_ENOMEM, DETD_EINVAL
 * for bad arguments. -ENOSPC and -EIO are the disk's state, not the
 * request's: the same call can succeed once the disk recovers. After a failure
 * store_errmsg() names the operation and the cause. A failed write leaves
 * the database as it was.
 *
 * Damage. store_open() reads only the header and the schema, so a file
 * with a damaged page opens; store_check() finds it, and store_repair()
 * (store_repair.c) salvages what is readable into a fresh file.
 */
#ifndef DETD_STORE_H
#define DETD_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "core/decision.h"

typedef struct store store;

/* One Observe report: which config a process launched for a key. */
struct store_observation {
    const char *id;
    const char *ns;
    const char *arch;
    const char *kernel;
    const char *key;
    const char *config;
    int32_t source;
    int governed;
    int chaos;
    const char *host;
    int32_t pid;
    int32_t rank;
    int32_t local_rank;
    const char *device;
    int64_t at_ms;
    /* Since schema 4. pid is the pid the daemon saw (SO_PEERCRED);
     * claimed_pid the one the caller wrote; peer_uid the caller's uid
     * (-1: unknown); node the daemon's node ("" in older rows; NULL is
     * stored as ""). */
    int32_t claimed_pid;
    int64_t peer_uid;
    const char *node;
    /* Since schema 6 ("" and 0 in older rows; NULL is stored as "").
     * job: the job label the client attached with. failed: the launch
     * raised (error: why); sticky, a later put of the same (id, host, pid)
     * without failed keeps it. audit: a STORE_AUDIT_* value, with
     * audit_differing the differing argument names joined by '\n'; a put
     * with STORE_AUDIT_NONE keeps the stored audit. why: why the autotuner
     * is ungoverned. */
    const char *job;
    int failed;
    const char *error;
    int32_t audit;
    const char *audit_differing;
    const char *why;
    /* Since schema 7: the start time of the process pid names (clock
     * ticks after boot; 0: unknown), part of the row's identity with
     * (id, host, pid): another process that gets the same pid later
     * writes rows of its own. */
    int64_t proc_start;
};

/* store_observation.audit: the values of the proto's AuditStatus. */
enum {
    STORE_AUDIT_NONE = 0,
    STORE_AUDIT_DETERMINISTIC = 1,
    STORE_AUDIT_NONDETERMINISTIC = 2,
    STORE_AUDIT_ERROR = 3,
};

/*
 * Open (creating if needed) the database at path; the directory must
 * exist. Sets WAL mode and synchronous=FULL and migrates an older schema.
 * Returns 0 with *ret owning the handle (store_close()), or on failure
 * -errno (the file cannot be opened: ENOENT, EACCES, ...), DETD_ECORRUPT
 * (not a detd database, or a schema newer than this build knows),
 * DETD_ESTORE, DETD_ENOMEM or DETD_EINVAL, with *ret untouched.
 * If ret_errmsg is not NULL it is always set: NULL on success; on failure
 * a heap string naming the path and the problem (the caller free()s it),
 * or NULL if even that allocation failed.
 */
int store_open(const char *path, store **ret, char **ret_errmsg);

/* Close the handle. NULL is a no-op. */
void store_close(store *s);

/*
 * The message of the last failed call on s (never NULL; "" before any
 * failure). Borrowed: valid until the next call on s. s may be NULL.
 */
const char *store_errmsg(const store *s);

/*
 * Writes committed on s since it was opened (a transaction or a write
 * outside one); a caller compares two readings to learn whether a write
 * succeeded in between. s may be NULL (0).
 */
uint64_t store_writes(const store *s);

/*
 * Look up a decision by id. Returns 0 with *ret filled (caller clears it
 * with decision_clear()), DETD_ENOTFOUND, or an error (above); on
 * any failure *ret is untouched.
 */
int store_get_decision(store *s, const char *id, struct decision *ret);

/*
 * First writer wins: insert d unless a decision with d->id exists.
 * Returns 0 if d was inserted and committed, DETD_EEXIST if one existed
 * (then *ret_existing, if not NULL, receives it; clear it with
 * decision_clear()), or an error. d is borrowed for the call;
 * d->id, ns, arch, kernel, key and config must not be NULL, the other
 * strings may be (stored as ""). A string over 1 MiB: DETD_ELIMIT.
 */
int store_put_decision(store *s, const struct decision *d,
                       struct decision *ret_existing);

/*
 * First writer wins for a batch, in one transaction (a resync or an
 * import): each ds[i] is inserted unless its id exists. ret_results (may
 * be NULL) gets n entries: 0 (inserted) or DETD_EEXIST. Returns 0 once
 * the batch committed, or an error with nothing written.
 */
int store_put_decisions(store *s, const struct decision *ds, size_t n,
                        int *ret_results);

/*
 * Insert or replace a batch of observations (keyed by id, host, pid) in
 * one transaction. obs is borrowed for the call; id, ns and host must not
 * be NULL, the other strings may be (stored as ""). Returns 0 or an error
 * with nothing written.
 */
int store_put_observations(store *s, const struct store_observation *obs,
                           size_t n);

/*
 * Call cb for each decision of namespace ns (NULL: all), kernel filter
 * (NULL: all), ordered by kernel then key (then namespace, arch, id), at
 * most limit (0: no limit). The row passed to cb is borrowed for the
 * callback. cb returns nonzero to stop and must not write through s.
 * Returns 0 (also when cb stopped) or an error.
 */
typedef int (*store_decision_cb)(void *ctx, const struct decision *d);
int store_each_decision(store *s, const char *ns, const char *kernel,
                        uint32_t limit, store_decision_cb cb, void *ctx);

/*
 * Like store_each_decision(), for export in pages: decisions of namespace
 * ns and arch (each NULL: all) whose kernel is kernel (NULL: all; an
 * exact id, or "module:qualname" for every code version of it), with id
 * greater than after_id (NULL or "": from the start), ordered by id, at
 * most limit (0: no limit). Same callback contract.
 */
int store_each_decision_page(store *s, const char *ns, const char *arch,
                             const char *kernel, const char *after_id,
                             uint32_t limit, store_decision_cb cb, void *ctx);

/*
 * Call cb for each observation of namespace ns (NULL: all) ordered by id,
 * then config, then host, rank, pid. Row borrowed for the callback; cb
 * returns nonzero to stop and must not write through s. Returns 0 or an
 * error.
 */
typedef int (*store_observation_cb)(void *ctx,
                                    const struct store_observation *o);
int store_each_observation(store *s, const char *ns, store_observation_cb cb,
                           void *ctx);

/*
 * Like store_each_observation(), for listing in pages: observations of
 * namespace ns (NULL: all) stored after position after (0: from the
 * start), in the order they were first stored, at most limit (0: no
 * limit). cb also gets each row's position (ret_pos of the last row read
 * is the next page's after; a row keeps its position when it is
 * updated). Same callback contract. Returns 0 or an error.
 */
typedef int (*store_observation_page_cb)(void *ctx,
                                         const struct store_observation *o,
                                         int64_t pos);
int store_each_observation_page(store *s, const char *ns, int64_t after,
                                uint32_t limit, store_observation_page_cb cb,
                                void *ctx);

/*
 * Delete decisions of namespace ns, with their failed passes and the
 * observations of what is reset: those of kernel (the observations of
 * kernel and those of its decisions' ids), or with kernel NULL every
 * decision and every observation of ns (failed launches of keys never
 * decided included, so a verify after a reset sees only later runs).
 * *ret_removed gets the count of decisions removed, *ret_removed_obs of
 * observations (each may be NULL). One transaction. ns must not be NULL.
 * Returns 0 or an error (nothing removed).
 */
int store_reset(store *s, const char *ns, const char *kernel,
                uint64_t *ret_removed, uint64_t *ret_removed_obs);

/*
 * Count decisions of namespace ns (NULL: all): *ret_total (may be NULL)
 * and ret_by_source (may be NULL; 8 entries indexed by detd_source, all
 * written). Returns 0 or an error.
 */
int store_count_decisions(store *s, const char *ns, uint64_t *ret_total,
                          uint64_t ret_by_source[8]);

/*
 * One record-mode vote: the winner of one process's own timing pass for a
 * key (store_vote.c). Strings are borrowed: for the call when passed in,
 * for the callback when read back.
 */
struct store_vote {
    uint64_t seq;   /* assigned by the store (paging order); ignored by put */
    const char *id; /* the decision id of the key */
    const char *ns;
    const char *arch;
    const char *kernel;
    const char *key;
    const char *table_key; /* Megatron-form key, "" when not sent */
    const char *candidates_fp;
    const char *config;
    const char *host;
    int32_t pid;
    int32_t rank;
    int32_t local_rank;
    const char *device;
    const char *timings_json; /* as decision.timings_json */
    const char *triton_version;
    int64_t voted_at_ms;
};

/*
 * Store v in one transaction. A vote with the same (id, host, pid)
 * replaces the earlier one (*ret_replaced = 1, may be NULL) and gets a
 * new seq. A new vote when max_votes (0: no cap) are stored already is
 * refused with DETD_ELIMIT (nothing written). *ret_total (may be NULL)
 * gets the number of votes stored afterwards, all namespaces. id, ns,
 * arch, kernel, config and host must not be NULL. Returns 0 or an error.
 */
int store_put_vote(store *s, const struct store_vote *v, uint64_t max_votes,
                   int *ret_replaced, uint64_t *ret_total);

/* Count votes of namespace ns (NULL: all) into *ret_total. */
int store_count_votes(store *s, const char *ns, uint64_t *ret_total);

/*
 * Call cb for each vote of namespace ns, arch and kernel (each NULL: all;
 * kernel as in store_each_decision_page()) with seq > after, ordered by
 * seq, at most limit (0: no limit). The row is borrowed for the callback;
 * cb returns nonzero to stop and must not write through s. Returns 0 or
 * an error.
 */
typedef int (*store_vote_cb)(void *ctx, const struct store_vote *v);
int store_each_vote(store *s, const char *ns, const char *arch,
                    const char *kernel, uint64_t after, uint32_t limit,
                    store_vote_cb cb, void *ctx);

/*
 * Delete the votes of namespace ns (not NULL) and kernel (NULL: all;
 * matched as in store_each_vote()). *ret_removed (may be NULL) gets the
 * count. One transaction. Returns 0 or an error (nothing removed).
 */
int store_reset_votes(store *s, const char *ns, const char *kernel,
                      uint64_t *ret_removed);

/*
 * One imported table entry (store_import.c): kernel and key as written in
 * the table (key: canonical, Megatron form or "*"). Strings are borrowed:
 * for the call when passed in, for the callback when read back.
 */
struct store_import {
    const char *ns;
    const char *arch;
    const char *kernel;
    const char *key;
    const char *table_key; /* = key for a Megatron-form key, else "" */
    const char *config;    /* canonical config string */
    const char *file;      /* the table file it came from */
    int64_t imported_at_ms;
};

/* What store_put_imports() did with one entry. */
enum store_import_result {
    STORE_IMPORT_ADDED = 0,
    STORE_IMPORT_REPLACED = 1,  /* another config was stored: replaced */
    STORE_IMPORT_UNCHANGED = 2, /* the same config was stored already */
};

/*
 * Store the n entries of v in one transaction (all or nothing). An entry
 * for the same (ns, arch, kernel, key) with the same config is left as it
 * is; with another config it is replaced (the newest import wins).
 * ret_results (n entries, may be NULL) gets what happened to each, and
 * ret_old (n entries, may be NULL) for each replaced entry a heap string
 * "config\tfile" of the entry it replaced (else NULL; the caller frees
 * them). Returns 0 or an error (nothing stored, nothing allocated).
 */
int store_put_imports(store *s, const struct store_import *v, size_t n,
                      enum store_import_result *ret_results, char **ret_old);

/*
 * Call cb for each imported entry of namespace ns and arch whose kernel
 * is one of kernels[0..nk) and whose key one of keys[0..nkeys) (at most 8
 * of each), in no particular order. The row is borrowed for the callback;
 * cb returns nonzero to stop and must not write through s. Returns 0 or
 * an error.
 */
typedef int (*store_import_cb)(void *ctx, const struct store_import *v);
int store_find_imports(store *s, const char *ns, const char *arch,
                       const char *const *kernels, size_t nk,
                       const char *const *keys, size_t nkeys,
                       store_import_cb cb, void *ctx);

/* Count imported entries of namespace ns (NULL: all) into *ret_total. */
int store_count_imports(store *s, const char *ns, uint64_t *ret_total);

/*
 * Delete the imported entries of namespace ns (not NULL) and kernel
 * (NULL: all; exact, as written in the table). *ret_removed (may be
 * NULL) gets the count. Returns 0 or an error (nothing removed).
 */
int store_reset_imports(store *s, const char *ns, const char *kernel,
                        uint64_t *ret_removed);

/*
 * A lock entry that an import skipped because its provenance did not
 * match the importing run (docs/lockfile.md): key id in namespace ns,
 * the lock's file name and the reason (naming the field and both
 * values), kept (replacing an earlier one) for explain. Not salvaged by
 * store_repair(): the next import of the lock records it again.
 * Returns 0 or an error.
 */
int store_put_lock_skip(store *s, const char *ns, const char *id,
                        const char *file, const char *reason, int64_t at_ms);

/*
 * The skipped lock entry of key id in namespace ns: heap copies of its
 * file and reason into *ret_file and *ret_reason (the caller frees
 * them). Returns 0, DETD_ENOTFOUND, or an error.
 */
int store_get_lock_skip(store *s, const char *ns, const char *id,
                        char **ret_file, char **ret_reason);

/*
 * Named values of the meta table (e.g. "etcd_revision": the last etcd
 * revision whose events are applied). store_get_meta() returns 0 with
 * *ret_value a heap copy the caller free()s, DETD_ENOTFOUND, or an error
 * (*ret_value untouched). store_set_meta() inserts or replaces name in one
 * committed transaction; name and value are borrowed for the call.
 */
int store_get_meta(store *s, const char *name, char **ret_value);
int store_set_meta(store *s, const char *name, const char *value);

/*
 * Check the structure of the whole file (PRAGMA quick_check: every b-tree
 * page, cell, overflow chain and the freelist; not the agreement of
 * indexes with their tables, which integrity_check adds at several times
 * the cost). Returns 0 when the file is sound, DETD_ECORRUPT with
 * store_errmsg() quoting the first problems SQLite found, or an error.
 */
int store_check(store *s);

/* A timing pass in which every candidate failed, kept so that a rerun of
 * the same code (the same decision id) gets the failure at once instead of
 * timing again. Strings borrowed from the caller (put) or owned by the
 * row (get: store_failure_clear()). */
struct store_failure {
    char *id;
    char *ns;
    char *arch;
    char *kernel;
    char *key;
    char *reason;   /* why the pass failed, as the daemon answered it */
    char *by_host;  /* the client's own claim */
    int32_t by_pid; /* the reporting peer's pid (SO_PEERCRED); rows of
                       schema 8 and older: the pid the client wrote */
    int32_t by_rank;
    int64_t at_ms;          /* unix time */
    int32_t by_claimed_pid; /* the pid the client wrote (0: older row) */
    int64_t by_uid;         /* the peer's uid; -1: unknown */
    char *by_node;          /* the receiving daemon's node ("": older row) */
};

/* Record f (replacing an older record of its id). Returns 0 or an error
 * (-ENOSPC when the disk is full). */
int store_put_failure(store *s, const struct store_failure *f);

/* The failure recorded for decision id into *ret (clear with
 * store_failure_clear()). Returns 0, DETD_ENOTFOUND, or an error. */
int store_get_failure(store *s, const char *id, struct store_failure *ret);

/* Free the strings of a row filled by store_get_failure(). NULL: no-op. */
void store_failure_clear(struct store_failure *f);

/* Tables store_repair() salvages, in this order. */
#define STORE_REPAIR_TABLES 5

/* What store_repair() kept of each table. */
struct store_repair_report {
    struct {
        const char *table; /* static: "decisions", "votes", ... */
        uint64_t kept;     /* rows copied into the fresh store */
        uint64_t lost;     /* rows unreadable or failing validation */
        int lost_unknown;  /* the damage also hides how many rows there
                              were: lost counts only those seen */
    } t[STORE_REPAIR_TABLES];
};

/*
 * Salvage the damaged store at path into a fresh one at the same path.
 * The damaged file (and its -wal, if any) stays readable under aside (a
 * hard link made first, so path never disappears); the fresh file is
 * built as path + ".repair" and renamed over path only once it is
 * complete and durable. Every row of decisions, votes, imports,
 * observations and failures that reads back and passes the checks
 * store_open()'s readers apply is kept; the meta table is not copied (the etcd
 * backend then resyncs in full, which brings back decisions lost here). No
 * handle may be open on path. Returns 0 with *ret filled, or an error
 * with *ret_errmsg (if not NULL) a heap string naming the file and the
 * cause (the caller free()s it; NULL on success): -errno for a file
 * operation, DETD_ECORRUPT when not even the schema can be read or the
 * schema is newer than this build (nothing changed then but aside).
 */
int store_repair(const char *path, const char *aside,
                 struct store_repair_report *ret, char **ret_errmsg);

#endif /* DETD_STORE_H */
