/*
 * store: the SQLite adapter. The only module that calls sqlite3_*.
 *
 * One database file per daemon, WAL mode, synchronous=FULL: a function
 * that writes returns only after its transaction committed, so a decision
 * is acknowledged only once it is durable. The schema is versioned
 * (PRAGMA user_version); opening a newer schema than this build knows
 * fails with DETD_ECORRUPT naming the version; older ones are migrated.
 *
 * Single-threaded: a store handle is used by the loop thread only.
 * Strings in returned rows are heap copies owned by the row.
 */
#ifndef DETD_STORE_H
#define DETD_STORE_H

#include <stddef.h>
#include <stdint.h>

typedef struct store store;

/* A committed decision and its provenance. */
struct store_decision {
    char *id;            /* hex SHA-256 decision id (primary key) */
    char *ns;
    char *arch;
    char *kernel;
    char *key;
    char *candidates_fp;
    int32_t n_candidates;
    char *config;        /* the chosen canonical config string */
    int32_t source;      /* detd_source */
    uint64_t claim_id;
    char *by_host;       /* who timed it ("" for tables) */
    int32_t by_pid;
    int32_t by_rank;
    int32_t by_local_rank;
    char *by_device;
    char *by_arch;
    char *triton_version;
    char *timings_json;  /* [{"config":..,"ms":[..],"failed":bool},..] */
    char *table_file;
    int64_t decided_at_ms;
};

/* Free the strings of a row (not the row itself). NULL is a no-op. */
void store_decision_clear(struct store_decision *d);

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
};

/*
 * Open (creating if needed) the database at path. Returns 0, -errno,
 * DETD_ESTORE or DETD_ECORRUPT; on success *ret owns the handle.
 * ret_err (may be NULL) receives a static or heap-free message naming
 * the problem, valid until the next store call on any handle.
 */
int store_open(const char *path, store **ret);

/* Close the handle. NULL is a no-op. */
void store_close(store *s);

/* The last error message (never NULL). */
const char *store_errmsg(const store *s);

/*
 * Look up a decision by id. Returns 0 with *ret filled (caller clears it
 * with store_decision_clear()), DETD_ENOTFOUND, or DETD_ESTORE.
 */
int store_get_decision(store *s, const char *id, struct store_decision *ret);

/*
 * First writer wins: insert d unless a decision with d->id exists.
 * Returns 0 if d was inserted and committed, DETD_EEXIST if one existed
 * (then *ret_existing, if not NULL, receives it), or DETD_ESTORE.
 */
int store_put_decision(store *s, const struct store_decision *d,
                       struct store_decision *ret_existing);

/*
 * Insert or replace a batch of observations (keyed by id, host, pid) in
 * one transaction. Returns 0 or DETD_ESTORE (nothing written).
 */
int store_put_observations(store *s, const struct store_observation *obs,
                           size_t n);

/*
 * Call cb for each decision of namespace ns (NULL: all), kernel filter
 * (NULL: all), ordered by kernel then key, at most limit (0: no limit).
 * The row passed to cb is borrowed for the callback. cb returns nonzero
 * to stop. Returns 0 or DETD_ESTORE.
 */
typedef int (*store_decision_cb)(void *ctx, const struct store_decision *d);
int store_each_decision(store *s, const char *ns, const char *kernel,
                        uint32_t limit, store_decision_cb cb, void *ctx);

/*
 * Call cb for each observation of namespace ns ordered by id, then
 * config, then host, rank, pid. Row borrowed for the callback.
 */
typedef int (*store_observation_cb)(void *ctx,
                                    const struct store_observation *o);
int store_each_observation(store *s, const char *ns, store_observation_cb cb,
                           void *ctx);

/*
 * Delete decisions (and their observations) of namespace ns: those of
 * kernel, or all when kernel is NULL. *ret_removed gets the count of
 * decisions removed. Returns 0 or DETD_ESTORE.
 */
int store_reset(store *s, const char *ns, const char *kernel,
                uint64_t *ret_removed);

/* Count decisions, by source (array of 8 indexed by detd_source). */
int store_count_decisions(store *s, const char *ns, uint64_t *ret_total,
                          uint64_t ret_by_source[8]);

#endif /* DETD_STORE_H */
