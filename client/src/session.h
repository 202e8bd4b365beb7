/*
 * session: one handle's connection to its daemon (internal).
 *
 * Owns the gRPC channels, the Attach stream and the thread that keeps the
 * stream alive (a receive always pending, a heartbeat every lease_ms / 3).
 * The stream has a channel (a connection) of its own: a keeper thread
 * waiting on a connection that also carries the unary calls would pick up
 * their replies and hand them over, costing a thread switch per call.
 * Everything is created on first use.
 *
 * Reconnect: when the stream is lost (the daemon exited, was killed or
 * restarted, or ended the stream), the session id is cleared and the
 * keeper thread attaches again on its own, with exponential backoff and
 * jitter (SESSION_BACKOFF_FIRST_MS doubling to SESSION_BACKOFF_MAX_MS,
 * each wait drawn uniformly from [d/2, d]), until it succeeds or the
 * session is destroyed. A successful re-attach is a new session: a new
 * session id and a new generation; heartbeats resume on the new stream.
 * Claims handed out under an earlier generation are void (the daemon that
 * knew them is gone, or it ended their session), unless the keeper takes
 * them again: right after a re-attach, before anything else, it asks the
 * new daemon for the key of every claim still open here (the reclaim
 * callback); a claim designated again is renewed under the new generation
 * and its report goes out with the new claim id (session_claim_current()).
 * Meanwhile the daemon keeps such a pass for its holder (a restarted
 * daemon restores the passes open at its end for the processes still
 * running: docs/daemon-restarts.md), so other processes wait for it
 * rather than claim the key. While the keeper
 * reconnects, session_acquire() waits for it, but only for the reconnect
 * window (reconnect_ms from the first failure seen); after that it fails
 * at once until the daemon is back. A handle that never reached a daemon
 * is not waited for: its first failure is returned at once.
 *
 * Fork: every session is registered for pthread_atfork. Fork waits for
 * no network I/O: the mutex is only held for bookkeeping. In the child,
 * the session forgets the parent's channel, stream and thread without
 * calling into gRPC (their memory is left allocated on purpose) and the
 * next call builds a channel and an Attach of its own. Each call also
 * compares the owning pid with getpid(), so a child made without the
 * atfork handlers running (a raw clone) is caught too.
 */
#ifndef DETD_SESSION_H
#define DETD_SESSION_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include "detd.pb-c.h"
#include "detd/client.h"
#include "wire.h"

/* Claims remembered with the generation that received them. */
#define SESSION_CLAIMS 64

struct session_claim {
    uint64_t claim_id; /* 0: free slot */
    uint64_t generation;
    uint64_t renewed_id;  /* the claim taken again for it, 0: none */
    uint64_t renewed_gen; /* ... under this generation */
    struct detd_key *key; /* owned copy (session_key_dup()); NULL: none */
};

/*
 * Ask the daemon again for key on channel ch under session sid (the
 * keeper, after a re-attach). Returns 1 and sets *ret_claim when this
 * process is designated again, 0 when not (decided, or held by another),
 * a negative DETD_E* code on failure.
 */
typedef int (*session_reclaim_cb)(void *user, struct wire_channel *ch,
                                  uint64_t sid, const struct detd_key *key,
                                  uint64_t *ret_claim);

enum session_state {
    SESSION_IDLE = 0,  /* no stream (never attached, failed or lost) */
    SESSION_ATTACHING, /* one thread is attaching; others wait */
    SESSION_ATTACHED,  /* stream up, session_id valid */
};

/* Channel pairs a handle keeps after daemon restarts before it stops
 * replacing them (and reuses the last, whose own reconnect then applies). */
#define SESSION_MAX_RETIRED 64

struct session {
    pthread_mutex_t mu;
    pthread_cond_t cond; /* CLOCK_MONOTONIC; signals state changes */
    char *target;        /* "unix:/path", owned */
    const Detd__V1__ClientIdentity *identity; /* borrowed, pid ignored */
    /* The fields below belong to process `pid`; guarded by mu. */
    pid_t pid;
    struct wire_channel *channel;        /* unary calls */
    struct wire_channel *attach_channel; /* the Attach stream only */
    /* Channels replaced after the daemon went away: a call may still hold
     * one, so they are freed with the session (a restart costs one pair). */
    struct wire_channel *retired[SESSION_MAX_RETIRED];
    unsigned n_retired;
    struct wire_stream *stream; /* owned by the thread while it runs */
    pthread_t thread;
    int thread_joinable;
    enum session_state state;
    uint64_t session_id;
    uint32_t lease_ms;
    uint32_t features;   /* SESSION_FEATURE_*: what the attached daemon
                            named in its AttachEvent */
    uint64_t generation; /* bumped on every attach */
    uint64_t attaches;   /* successful attaches in this process */
    uint64_t heartbeats; /* heartbeats acknowledged as sent */
    int stopping;
    /* Reconnect bookkeeping (guarded by mu). reached survives fork: a
     * child of a process that reached the daemon waits for it too. */
    int reached;           /* a daemon answered this handle at least once */
    int64_t down_since;    /* clock_mono_ms() of the first failure of the
                              current outage; 0: none */
    uint32_t reconnect_ms; /* the reconnect window */
    int keeper_running;    /* the keeper is alive (streaming or
                              reconnecting) */
    struct wire_stream *attaching; /* the keeper's attach in progress */
    uint64_t attach_failures;      /* failed re-attach attempts */
    uint64_t outages;              /* outages met after reaching a daemon */
    uint64_t renewing_gen;         /* the generation whose claims the keeper is
                                      taking again; 0: none */
    uint64_t renewed;              /* claims taken again */
    session_reclaim_cb reclaim;
    void *reclaim_user;
    int last_err;       /* the last re-attach failure */
    char last_msg[256]; /* ... and its detail */
    /* Designations handed out, with their generation (a ring; kept
     * across fork, where every generation of the parent is void). */
    struct session_claim claims[SESSION_CLAIMS];
    unsigned claims_next;
    struct session *reg_prev, *reg_next; /* fork registry */
};

/* AttachEvent.features this client uses. */
#define SESSION_FEATURE_PASS_ON 0x1u

/* Backoff between reconnect attempts (see above). */
#define SESSION_BACKOFF_FIRST_MS 50
#define SESSION_BACKOFF_MAX_MS 1000

/*
 * Prepare s (caller-owned memory) for target. identity is borrowed and
 * must outlive the session. reconnect_ms: how long calls wait for a
 * daemon that went away (0: not at all). Returns 0, DETD_ENOMEM or
 * DETD_EINTERNAL.
 */
int session_init(struct session *s, const char *target,
                 const Detd__V1__ClientIdentity *identity,
                 uint32_t reconnect_ms);

/* Set the callback the keeper takes claims again with (before the first
 * call; NULL: claims are not taken again). */
void session_set_reclaim(struct session *s, session_reclaim_cb cb, void *user);

/*
 * Detach and release everything s holds: cancel the stream, join the
 * thread, destroy the channel. Objects created by another process are
 * left alone. No call may still be using the session.
 */
void session_destroy(struct session *s);

/*
 * Get the channel, connecting and (when attach is nonzero) attaching
 * first, waiting until deadline_ms (clock_mono_ms() clock) at most. While
 * the keeper reconnects, waits for its next attempt (within deadline_ms
 * and the reconnect window) and returns its error if that attempt fails.
 * *ret_channel is borrowed until session_destroy(); *ret_session_id is 0
 * and *ret_generation 0 when attach is zero and no session is up
 * (ret_generation may be NULL).
 * Returns 0, DETD_ECONNECT, DETD_EUNAVAILABLE, DETD_ETIMEDOUT,
 * DETD_EPROTO, DETD_ENOMEM or another DETD_E* code from the daemon.
 */
int session_acquire(struct session *s, int attach, int64_t deadline_ms,
                    struct wire_channel **ret_channel, uint64_t *ret_session_id,
                    uint64_t *ret_generation);

/*
 * The session now, without connecting: *ret_session_id and
 * *ret_generation of the attached session, or 0 and 0 when none is up
 * (in this process). Never blocks on the network.
 */
void session_peek(struct session *s, uint64_t *ret_session_id,
                  uint64_t *ret_generation);

/*
 * SESSION_FEATURE_* of the daemon this process is attached to now; 0
 * when none is attached. Never blocks on the network.
 */
uint32_t session_features(struct session *s);

/*
 * Record the outcome of a call: ok nonzero when the daemon answered
 * (the outage, if any, is over), zero when it could not be reached (an
 * outage starts now unless one is already counted).
 */
void session_note(struct session *s, int ok);

/*
 * Whether a call that could not reach the daemon may keep trying: the
 * handle reached a daemon before and the outage is younger than the
 * reconnect window. *ret_until (may be NULL) is the window's end
 * (clock_mono_ms() clock); *ret_down_ms how long the outage has lasted.
 */
int session_may_wait(struct session *s, int64_t *ret_until,
                     int64_t *ret_down_ms);

/*
 * Remember that claim_id was handed out under generation for key (copied;
 * NULL or no memory: the claim is not taken again after a restart). The
 * oldest remembered claim is forgotten when the ring is full.
 */
void session_claim_note(struct session *s, uint64_t claim_id,
                        uint64_t generation, const struct detd_key *key);

/*
 * The id under which claim_id (remembered, from generation claim_gen) may
 * be reported in generation gen: claim_id itself when gen is claim_gen,
 * the claim the keeper took again in gen, else none. Waits (until
 * deadline_ms at most) while the keeper is still taking claims again in
 * gen. Returns 1 and sets *ret_id, or 0.
 */
int session_claim_current(struct session *s, uint64_t claim_id,
                          uint64_t claim_gen, uint64_t gen, int64_t deadline_ms,
                          uint64_t *ret_id);

/* A copy of k in one allocation (free() it), or NULL without memory. */
struct detd_key *session_key_dup(const struct detd_key *k);

/*
 * The generation claim_id was handed out under: returns 1 and sets
 * *ret_generation, or 0 when the claim is not remembered. With forget
 * nonzero the claim is forgotten.
 */
int session_claim_find(struct session *s, uint64_t claim_id, int forget,
                       uint64_t *ret_generation);

/*
 * A wait drawn uniformly from [delay_ms / 2, delay_ms] (thread-safe
 * jitter, so that many clients of a restarted daemon do not reconnect in
 * lockstep).
 */
int64_t session_jitter_ms(int64_t delay_ms);

/*
 * Forget the session id after the daemon said it does not know it
 * (generation: the one current when the id was handed out), so the next
 * call attaches again.
 */
void session_invalidate(struct session *s, uint64_t session_id);

#endif /* DETD_SESSION_H */
