/*
 * client_int: the handle of libdetd and the helpers of client.c that its
 * other calls (share.c) use too (internal, not installed).
 */
#ifndef DETD_CLIENT_INT_H
#define DETD_CLIENT_INT_H

#include <stddef.h>
#include <stdint.h>

#include "detd.pb-c.h"
#include "detd/client.h"
#include "session.h"
#include "wire.h"

#define DETD_EXPORT __attribute__((visibility("default")))

/* The default timeout of a unary call other than Decide. */
#define CLIENT_CALL_TIMEOUT_MS 30000

struct detd_client {
    char *socket_path;
    Detd__V1__ClientIdentity identity; /* strings owned; pid unused */
    struct session session;
    char *device; /* detd_client_set_device(); NULL: none */
};

/* Name the daemon in a connection failure rc of c (the thread's error
 * message); returns rc. */
int client_conn_err(const detd_client *c, int rc);

/* Check key k before it goes out: 0, or DETD_EINVAL / DETD_ELIMIT with
 * the thread's error message naming the bad member. */
int client_check_key(const struct detd_key *k);

/* What every request of c about a key carries: the identity (this
 * process's pid) and the key (checked). Borrows c's and key's strings. */
struct client_head {
    Detd__V1__ClientIdentity id;
    Detd__V1__DecisionKey km;
};

void client_head_init(const detd_client *c, const struct detd_key *key,
                      struct client_head *ret);

/* timeout_ms, or dflt when timeout_ms <= 0. */
int64_t client_timeout(int64_t timeout_ms, int64_t dflt);

/*
 * Get c's channel (*ch, borrowed from c) and session (*sid, its
 * generation *gen; gen may be NULL) for a call that ends at deadline
 * (clock_mono_ms()), attaching first when attach is nonzero. The error,
 * if any, is left for the caller to name (client_conn_err()).
 */
int client_acquire(detd_client *c, int attach, int64_t deadline,
                   struct wire_channel **ch, uint64_t *sid, uint64_t *gen);

/*
 * Check timings[0..n) and wrap them as CandidateTiming messages that
 * borrow the caller's strings and arrays. On success *ret_tm and
 * *ret_tmp (NULL when n is 0) are the caller's to free(); on failure
 * nothing is allocated and the thread's error message names the bad
 * timing.
 */
int client_pack_timings(const struct detd_timing *timings, size_t n,
                        Detd__V1__CandidateTiming **ret_tm,
                        Detd__V1__CandidateTiming ***ret_tmp);

/* A new answer (outcome, and what decision d says; d may be NULL) in
 * *ret, the caller's to free with detd_answer_free(). Returns 0 or
 * DETD_ENOMEM. */
int client_answer_new(detd_outcome outcome, const Detd__V1__Decision *d,
                      struct detd_answer **ret);

/* Retry bookkeeping of one call (client_retry()). */
struct client_retry {
    int64_t deadline;
    int64_t delay_ms;
    int again; /* retries the daemon asked for, or of a lost session */
};

/* Start r for a call that ends at deadline (clock_mono_ms()). */
void client_retry_init(struct client_retry *r, int64_t deadline);

/*
 * After a failed attempt (rc) of an idempotent call made under session
 * sid (0: none): whether to make another attempt, after the wait this
 * function makes. A daemon that went away is waited for within the
 * call's deadline and the handle's reconnect window; one that was never
 * reached is not.
 */
int client_retry(detd_client *c, struct client_retry *r, int rc, uint64_t sid);

/* Whether a failed attempt's rc (and the thread's error message) says
 * the daemon is gone (refused, socket gone, connection lost, draining),
 * rather than answered. */
int client_gone(int rc);

#endif /* DETD_CLIENT_INT_H */
