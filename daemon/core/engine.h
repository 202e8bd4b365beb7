/*
 * engine: the decide engine's claim and waiter state machine.
 *
 * Pure logic: no sockets, files, clocks or logging. Time comes in as
 * now_ms arguments; callers (the loop) act on the events the engine emits.
 *
 * Model. A key is identified by its decision id (hex SHA-256, see keyid.h).
 * For a key without a decision, the first asker gets a claim (it is
 * "designated" to time the candidates); every later asker becomes a
 * waiter, held server-side until the decision is committed, the claim
 * passes to it, or its own deadline expires. A claim belongs to a session
 * (one attached client process). It passes to the oldest waiter (FIFO)
 * when its session ends or when its lease expires; a session that stays
 * attached keeps its claims' leases renewed (engine_tick renews them).
 * Passing a claim always makes a new claim id, so a report for the old
 * one is stale. By default ids count from 1; engine_set_options() may
 * give a source of ids (the daemon draws 63 random bits), and the engine
 * then keeps every live claim id nonzero and unique. The waiter
 * designated is the oldest one whose session has not ended, preferring
 * named sessions over session 0 (never session 0 with the named_only
 * option); if there is none the claim is dropped and the next asker gets
 * a new one. A timing pass may have a deadline of its own
 * (pass_timeout_ms): past it the claim passes on as if its session had
 * ended, whatever the session does. A claim whose report is rejected
 * (engine_reject) ends, and every waiter of its key is told at once.
 *
 * Ids are NUL-terminated strings of 1..64 chars (a decision id is 64).
 * Waiters are identified by caller-chosen tokens (uint64, nonzero, unique
 * among live waiters). The engine never dereferences them.
 * Operations are O(1) or O(log n) in the number of keys and waiters
 * (passing a claim also steps over waiters of ended sessions).
 */
#ifndef DETD_ENGINE_H
#define DETD_ENGINE_H

#include <stddef.h>
#include <stdint.h>

typedef struct engine engine;

struct engine_limits {
    uint32_t max_waiters; /* live waiters; over it: DETD_EBUSY */
    uint32_t max_claims;  /* live claims; over it: DETD_EBUSY */
    uint32_t lease_ms;    /* claim lease */
};

/* What happened to a waiter or asker; emitted through engine_event_cb. */
typedef enum engine_event_kind {
    ENGINE_EV_DESIGNATE = 1, /* token now holds claim_id: reply DESIGNATED */
    ENGINE_EV_TIMEOUT = 2,   /* token's deadline passed: reply TIMEOUT */
    ENGINE_EV_RELEASE = 3,   /* key decided: reply with the decision */
    ENGINE_EV_ABORT = 4,     /* nothing will be decided for token: fail it
                                with the reason (see abort) */
} engine_event_kind;

/* Why a waiter was aborted (ENGINE_EV_ABORT). */
typedef enum engine_abort_reason {
    ENGINE_ABORT_REJECTED = 1,   /* the holder's report was rejected */
    ENGINE_ABORT_UNATTACHED = 2, /* named_only: the claim ended and only
                                    session-0 waiters were left */
} engine_abort_reason;

struct engine_event {
    engine_event_kind kind;
    uint64_t token;
    const char *id;            /* decision id; borrowed for the callback only */
    uint64_t claim_id;         /* DESIGNATE */
    int takeover;              /* DESIGNATE: the claim passed from another */
    engine_abort_reason abort; /* ABORT */
};

typedef void (*engine_event_cb)(void *ctx, const struct engine_event *ev);

/*
 * Create an engine. cb receives every event, synchronously, from inside
 * the engine call that caused it; it must not call back into the engine.
 * limits is copied; cb_ctx is borrowed for the engine's lifetime.
 * Returns 0, DETD_EINVAL (NULL limits, cb or ret; lease_ms 0) or
 * DETD_ENOMEM; *ret owns the engine (engine_free()).
 */
int engine_new(const struct engine_limits *limits, engine_event_cb cb,
               void *cb_ctx, engine **ret);

/* A source of claim ids (the daemon's draws random bits). */
typedef uint64_t (*engine_claim_id_cb)(void *ctx);

/* Optional behaviour, set once after engine_new() and before any ask;
 * zero fields keep the defaults (the engine_new() behaviour). */
struct engine_options {
    /* A claim's timing pass ends this long after it was handed out (a
     * takeover starts a new one): the claim passes on (ENGINE_EV_DESIGNATE
     * with takeover=1, counted in pass_timeouts) even while its session
     * is attached. 0: no deadline of its own. */
    uint32_t pass_timeout_ms;
    /* Session 0 (unattached callers) is never designated: engine_ask()
     * answers ENGINE_ASK_UNATTACHED when it would be, and when a claim
     * ends with only session-0 waiters left they get ENGINE_EV_ABORT
     * (ENGINE_ABORT_UNATTACHED). */
    int named_only;
    /* Claim ids come from claim_id(claim_id_ctx); the engine draws again
     * on 0, on an id a live claim holds and on the key's previous id.
     * NULL: ids count from 1. */
    engine_claim_id_cb claim_id;
    void *claim_id_ctx;
};

/* Use opts (copied; claim_id_ctx borrowed for the engine's lifetime).
 * Returns 0 or DETD_EINVAL (NULL arguments). */
int engine_set_options(engine *e, const struct engine_options *opts);

/* Free the engine and all its state. Emits nothing. NULL is a no-op. */
void engine_free(engine *e);

/* Result of engine_ask(). */
typedef enum engine_ask_result {
    ENGINE_ASK_DESIGNATED = 1, /* *ret_claim_id is the caller's claim */
    ENGINE_ASK_WAIT = 2,       /* token queued; an event will follow */
    ENGINE_ASK_UNATTACHED = 3, /* named_only: session 0 would have been
                                  designated; nothing changed */
} engine_ask_result;

/*
 * An undecided key was asked for (the caller checked the store and the
 * tables first). If nobody holds a claim for id, session gets one:
 * returns ENGINE_ASK_DESIGNATED with *ret_claim_id set. If session already
 * holds the claim for id (a retry), the same claim is returned. Otherwise
 * token waits until deadline_ms (absolute, same clock as now_ms):
 * ENGINE_ASK_WAIT; the engine remembers the waiter's session, which owns
 * the claim if it passes to this waiter. session 0 (not attached) may
 * wait but never be designated while another session could; with no
 * claim it gets one with a lease that is never renewed. Session 0 is
 * shared by every unattached caller, so it never counts as a retry. A
 * claim's lease runs from now_ms; it is renewed only while its session
 * is attached. A deadline at or before now_ms times out on the next tick.
 * id is copied. Returns an engine_ask_result, or DETD_EINVAL (bad id,
 * token 0 or already waiting, NULL ret_claim_id), DETD_EBUSY (over
 * max_waiters or max_claims) or DETD_ENOMEM; on error nothing changed.
 */
int engine_ask(engine *e, const char *id, uint64_t session, uint64_t token,
               int64_t deadline_ms, int64_t now_ms, uint64_t *ret_claim_id);

/* Result of engine_report(). */
typedef enum engine_report_result {
    ENGINE_REPORT_ACCEPT = 1,  /* commit the winner, then engine_decided() */
    ENGINE_REPORT_STALE = 2,   /* claim_id is not the live claim for id */
    ENGINE_REPORT_FOREIGN = 3, /* engine_report_from(): claim_id is live
                                  but another session holds it */
} engine_report_result;

/*
 * A report arrived for claim_id on id. Returns ENGINE_REPORT_ACCEPT if
 * claim_id is the live claim for id (any session may report it: the claim
 * id is the capability), else ENGINE_REPORT_STALE (counted in
 * stale_reports), or DETD_EINVAL for a bad id. Accepting does not end the
 * claim: the caller commits the decision and calls engine_decided().
 */
int engine_report(engine *e, const char *id, uint64_t claim_id);

/*
 * As engine_report(), but the claim belongs to the session that got it:
 * ENGINE_REPORT_ACCEPT only when session holds claim_id, and
 * ENGINE_REPORT_FOREIGN (counted in foreign_reports; the claim stays as
 * it is) when claim_id is live but held by another session.
 */
int engine_report_from(engine *e, const char *id, uint64_t claim_id,
                       uint64_t session);

/*
 * The report for the live claim claim_id on id was rejected (no usable
 * timing, a config outside the key's candidates, ...): the claim ends at
 * once, and every waiter of id gets an ENGINE_EV_ABORT
 * (ENGINE_ABORT_REJECTED), oldest first, through cb(ctx, ev) so that the
 * caller can give them its reason. Counted in rejected_reports. cb may
 * not call back into the engine for id. Returns the number of waiters
 * aborted, DETD_ENOTFOUND (claim_id is not the live claim for id) or
 * DETD_EINVAL.
 */
int engine_reject(engine *e, const char *id, uint64_t claim_id,
                  engine_event_cb cb, void *ctx);

/*
 * The key id is decided and committed (by a report, a table, another
 * node): every waiter on id gets ENGINE_EV_RELEASE (oldest first) and the
 * claim ends. Unknown ids are a no-op. Returns the number of waiters
 * released.
 */
size_t engine_decided(engine *e, const char *id);

/*
 * As engine_decided(), but each ENGINE_EV_RELEASE goes to cb(ctx, ev)
 * instead of the engine's callback, so that the caller can answer the
 * released waiters with the decision it holds (no state kept between the
 * calls). cb may not call back into the engine for id.
 */
size_t engine_decided_each(engine *e, const char *id, engine_event_cb cb,
                           void *ctx);

/*
 * Whether id has a live claim: returns 1 and sets *ret_claim_id (may be
 * NULL) to it, or 0 (no claim, unknown id, bad id).
 */
int engine_claim_of(const engine *e, const char *id, uint64_t *ret_claim_id);

/*
 * Note that claim, id's live claim, was answered DESIGNATED. Returns 1 the
 * first time for that claim (its timing pass begins), 0 when it was
 * answered before (its holder asked again under it: the same pass); 1
 * when id has no such live claim (nothing to tell it from).
 */
int engine_claim_told(engine *e, const char *id, uint64_t claim);

/* The live claim of a key (engine_claim_info()). */
struct engine_claim_info {
    uint64_t claim_id;
    uint64_t session;   /* its holder */
    int64_t claimed_ms; /* when it was granted (the engine's clock) */
    uint32_t shares;    /* shares given so far (engine_claim_share()) */
};

/*
 * The live claim of id into *ret: returns 1, or 0 (no claim, unknown or
 * bad id; *ret untouched).
 */
int engine_claim_info(const engine *e, const char *id,
                      struct engine_claim_info *ret);

/*
 * Give session (a waiter, not the holder) the next share of the timing
 * pass of id's live claim: *ret_index = 1 for the first share of this
 * claim, 2 for the next, ... (a new claim starts at 1 again). Returns 1,
 * or 0 when id has no live claim, session holds it, or session is 0.
 */
int engine_claim_share(engine *e, const char *id, uint64_t session,
                       uint32_t *ret_index);

/*
 * The holder of claim_id on id gives it up before timing anything (its
 * call was cancelled or timed out before it was told it was designated,
 * e.g. while the cluster claim was pending). The claim passes to the
 * oldest live waiter (ENGINE_EV_DESIGNATE with takeover=0, not counted as
 * a takeover) or is dropped. Returns 1 (passed), 0 (dropped),
 * DETD_ENOTFOUND (claim_id is not the live claim for id) or DETD_EINVAL.
 */
int engine_release(engine *e, const char *id, uint64_t claim_id,
                   int64_t now_ms);

/*
 * A session attached (its claims' leases are renewed while attached,
 * starting now). Attaching again is harmless.
 * Returns 0, DETD_EINVAL (session 0) or DETD_ENOMEM.
 */
int engine_session_attach(engine *e, uint64_t session, int64_t now_ms);

/*
 * A session ended (its Attach stream closed or the process died). Each
 * claim it holds passes to the oldest live waiter of that key
 * (ENGINE_EV_DESIGNATE with takeover=1) or, with no waiter, is dropped.
 * Its own waiters are left alone (their calls end on their own: the
 * caller cancels them) and are never designated. Session 0 and unknown
 * sessions are a no-op.
 */
void engine_session_end(engine *e, uint64_t session, int64_t now_ms);

/*
 * Remove a waiter whose call ended (cancelled by the client). No event.
 * Returns 0 or DETD_ENOTFOUND.
 */
int engine_cancel(engine *e, uint64_t token);

/*
 * Advance time: renew the leases of attached sessions' claims (to
 * now_ms + lease_ms), expire waiters whose deadline is at or before
 * now_ms (ENGINE_EV_TIMEOUT), then pass claims whose lease expired or
 * whose timing pass ran past pass_timeout_ms to the next waiter
 * (ENGINE_EV_DESIGNATE, takeover=1) or drop them when nobody waits (a
 * later report for a dropped claim is stale).
 * Returns the next absolute time engine_tick() should run (the earliest
 * waiter deadline, unrenewed lease expiry or pass deadline), or
 * INT64_MAX.
 */
int64_t engine_tick(engine *e, int64_t now_ms);

/* Counts for status. designations counts every claim handed out,
 * takeovers included; retries by the holder are not counted. */
struct engine_stats {
    uint32_t claims;
    uint32_t waiters;
    uint64_t designations;
    uint64_t takeovers;
    uint64_t timeouts;
    uint64_t stale_reports;
    uint64_t pass_timeouts;    /* claims passed on at pass_timeout_ms */
    uint64_t foreign_reports;  /* reports for another session's claim */
    uint64_t rejected_reports; /* claims ended by engine_reject() */
};
void engine_get_stats(const engine *e, struct engine_stats *ret);

/* Claims held by a session (for status). */
uint32_t engine_session_claims(const engine *e, uint64_t session);

/*
 * A timing pass that was open on id when the daemon stopped, restored at
 * start-up for session (a stand-in for the process that held it, never
 * attached: its lease runs from now_ms, so the pass passes on if nobody
 * adopts it within lease_ms). The pass has already run ran_ms: its
 * deadline (pass_timeout_ms) counts only the time the daemon ran. A new
 * claim id is drawn (*ret_claim_id); askers of id now wait. Returns 0,
 * DETD_EEXIST (id has a claim), DETD_EBUSY, DETD_ENOMEM or DETD_EINVAL.
 */
int engine_claim_restore(engine *e, const char *id, uint64_t session,
                         int64_t ran_ms, int64_t now_ms,
                         uint64_t *ret_claim_id);

/*
 * Give the live claim of id, held by session from, to session to (the
 * process that held it before a restart, attached anew); its deadlines
 * stay. Returns 0, DETD_ENOTFOUND (id has no claim held by from),
 * DETD_ENOMEM or DETD_EINVAL.
 */
int engine_claim_adopt(engine *e, const char *id, uint64_t from, uint64_t to);

/*
 * The noise band of the winner rule: candidates whose score is within
 * this fraction of the best score are tied (the client re-measures them
 * once before it reports: detd/_hook.py WINNER_EPSILON, the same value).
 */
#define ENGINE_WINNER_EPSILON 0.01

/*
 * The winner rule, documented in the README: each candidate's score is
 * the median of its samples (mean of the two middle ones for an even
 * count); failed candidates, candidates without samples and non-finite
 * or negative medians are excluded; of the candidates whose score is at
 * most best * (1 + ENGINE_WINNER_EPSILON), best being the lowest score,
 * the lexicographically smallest (strcmp) config string wins (exact ties
 * included). Configs not in the allowed set (if allowed != NULL) are
 * ignored. A candidate with a
 * NaN sample has no median and is excluded; infinite samples are ordered
 * normally (only the median must be finite). Inputs are borrowed.
 * Returns the winning index into timings, DETD_ENOCAND, DETD_EINVAL (NULL
 * arrays with a nonzero count) or DETD_ENOMEM (very large sample sets).
 */
struct engine_timing {
    const char *config;
    const double *ms;
    size_t n_ms;
    int failed;
};
int engine_pick_winner(const struct engine_timing *timings, size_t n,
                       const char *const *allowed, size_t n_allowed);

#endif /* DETD_ENGINE_H */
