/*
 * decision: a committed decision and its provenance, as the store keeps
 * it, the cluster carries it and the daemon answers it. Plain data: the
 * strings of a row filled by store_get_decision() or
 * cluster_decision_decode() are owned by the row (decision_clear());
 * a row built by a caller may borrow them instead and is never cleared.
 */
#ifndef DETD_DECISION_H
#define DETD_DECISION_H

#include <stdint.h>

/* A committed decision and its provenance. */
struct decision {
    char *id; /* hex SHA-256 decision id (primary key) */
    char *ns;
    char *arch;
    char *kernel;
    char *key;
    char *candidates_fp;
    int32_t n_candidates;
    char *config;      /* the chosen canonical config string */
    int32_t source;    /* detd_source */
    uint64_t claim_id; /* stored as its int64 bit pattern */
    char *by_host;     /* who timed it, as it claimed ("" for tables) */
    int32_t by_pid;    /* the reporter's pid as the kernel saw it */
    int32_t by_rank;
    int32_t by_local_rank;
    char *by_device;
    char *by_arch;
    char *triton_version;
    char *timings_json; /* [{"config":..,"ms":[..],"failed":bool},..] */
    char *table_file;
    int64_t decided_at_ms;
    /* Who the daemon saw send the report (SO_PEERCRED), beside what the
     * client claimed: its uid (-1: unknown, and for tables, imports and
     * rows older than schema 8), the pid it wrote in its identity (0:
     * unknown) and the node whose daemon received it (--node-id, else the
     * hostname; "" when not from a report). */
    int64_t by_uid;
    int32_t by_claimed_pid;
    char *by_node;
    /* The job of the process that timed it, as it said (schema 10; 0 and
     * "" for tables, imports and older rows): its world size and its job
     * label (DETD_JOB, or the launcher's run id). */
    int32_t by_world_size;
    char *by_job;
    /* How it was timed, as the timing process said (schema 11; "" for
     * tables, older rows and imports without it): a JSON object of
     * common/provfmt.h's members. */
    char *timing_json;
};

/* Free the strings of a row (not the row itself) and zero it. NULL is a
 * no-op. */
void decision_clear(struct decision *d);

/* Copy src into *ret with strings of its own (a NULL string becomes "");
 * with_timings 0 leaves ret->timings_json NULL. The caller clears *ret
 * (decision_clear()). Returns 0 or DETD_ENOMEM, *ret untouched then. */
int decision_copy(const struct decision *src, int with_timings,
                  struct decision *ret);

#endif /* DETD_DECISION_H */
