/*
 * waiters: the Decide calls held server-side (loop thread only).
 *
 * A Decide that must wait for another rank's timing pass, or (etcd
 * backend) a designated asker held while this node takes the cluster
 * claim, becomes a struct pending, found again by its engine token or by
 * its call. Every held call leaves through waiters_take*(), answered,
 * timed out, cancelled or drained; the wait it had is observed into the
 * module's histogram (detd_wait_duration_seconds) then.
 */
#ifndef DETD_WAITERS_H
#define DETD_WAITERS_H

#include <stddef.h>
#include <stdint.h>

#include "core/keyid.h"
#include "core/metrics.h"
#include "detd.pb-c.h"
#include "io/rpc.h"

/* One held Decide. */
struct pending {
    uint64_t token;               /* the engine's handle of the asker */
    rpc_call *call;               /* the request's reference */
    Detd__V1__DecideRequest *req; /* owned */
    char id[KEYID_HEX_LEN + 1];   /* the decision id it waits for */
    int64_t started_ms;           /* clock_mono_ms() when it arrived */
    /* etcd backend: designated locally, held until the cluster claim. */
    int held;
    uint64_t claim_id;
    int takeover;
    int64_t deadline_ms;
    struct pending *next; /* hash chain by token */
};

typedef struct waiters waiters;

/* Create an empty table; *ret owns it (waiters_free()). Returns 0 or
 * DETD_ENOMEM. */
int waiters_new(waiters **ret);

/* Free the table; every pending must have been taken. NULL is a no-op. */
void waiters_free(waiters *w);

/*
 * A new pending for call (its reference and req are taken) waiting for
 * id, arrived at now_ms; NULL when out of memory (nothing taken).
 */
struct pending *pending_new(uint64_t token, rpc_call *call,
                            Detd__V1__DecideRequest *req, const char *id,
                            int64_t now_ms);

/* Free p and its request (the call's reference was answered by then). */
void pending_free(struct pending *p);

/* Milliseconds p has waited so far. */
uint32_t pending_waited(const struct pending *p);

/* Hold p (owned by the table until taken) and watch its call, so that a
 * client giving up is seen (RPC_EV_CLOSED). */
void waiters_add(waiters *w, struct pending *p);

/* Take the pending of token (NULL if none): the caller owns it. */
struct pending *waiters_take(waiters *w, uint64_t token);

/* Take the pending of call (NULL if none). */
struct pending *waiters_take_call(waiters *w, rpc_call *call);

/* Take any pending (NULL when empty): the drain's loop. */
struct pending *waiters_take_any(waiters *w);

/* Held calls now. */
size_t waiters_count(const waiters *w);

/* The waits of the calls that left, in seconds (borrowed). */
const struct metrics_hist *waiters_hist(const waiters *w);

#endif /* DETD_WAITERS_H */
