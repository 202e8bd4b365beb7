/*
 * session: one handle's connection to its daemon (internal).
 *
 * Owns the gRPC channels, the Attach stream and the thread that keeps the
 * stream alive (a receive always pending, a heartbeat every lease_ms / 3).
 * The stream has a channel (a connection) of its own: a keeper thread
 * waiting on a connection that also carries the unary calls would pick up
 * their replies and hand them over, costing a thread switch per call.
 * Everything is created on first use. When the stream is lost the session
 * id is cleared and the next session_acquire() attaches again.
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
#include "wire.h"

enum session_state {
    SESSION_IDLE = 0,  /* no stream (never attached, failed or lost) */
    SESSION_ATTACHING, /* one thread is attaching; others wait */
    SESSION_ATTACHED,  /* stream up, session_id valid */
};

struct session {
    pthread_mutex_t mu;
    pthread_cond_t cond; /* CLOCK_MONOTONIC; signals state changes */
    char *target;        /* "unix:/path", owned */
    const Detd__V1__ClientIdentity *identity; /* borrowed, pid ignored */
    /* The fields below belong to process `pid`; guarded by mu. */
    pid_t pid;
    struct wire_channel *channel;        /* unary calls */
    struct wire_channel *attach_channel; /* the Attach stream only */
    struct wire_stream *stream;          /* owned by the thread while it runs */
    pthread_t thread;
    int thread_joinable;
    enum session_state state;
    uint64_t session_id;
    uint32_t lease_ms;
    uint64_t generation; /* bumped on every attach */
    uint64_t attaches;   /* successful attaches in this process */
    uint64_t heartbeats; /* heartbeats acknowledged as sent */
    int stopping;
    struct session *reg_prev, *reg_next; /* fork registry */
};

/*
 * Prepare s (caller-owned memory) for target. identity is borrowed and
 * must outlive the session. Returns 0, DETD_ENOMEM or DETD_EINTERNAL.
 */
int session_init(struct session *s, const char *target,
                 const Detd__V1__ClientIdentity *identity);

/*
 * Detach and release everything s holds: cancel the stream, join the
 * thread, destroy the channel. Objects created by another process are
 * left alone. No call may still be using the session.
 */
void session_destroy(struct session *s);

/*
 * Get the channel, connecting and (when attach is nonzero) attaching
 * first, waiting until deadline_ms (clock_mono_ms() clock) at most.
 * *ret_channel is borrowed until session_destroy(); *ret_session_id is 0
 * when attach is zero and no session is up.
 * Returns 0, DETD_ECONNECT, DETD_EUNAVAILABLE, DETD_ETIMEDOUT,
 * DETD_EPROTO, DETD_ENOMEM or another DETD_E* code from the daemon.
 */
int session_acquire(struct session *s, int attach, int64_t deadline_ms,
                    struct wire_channel **ret_channel,
                    uint64_t *ret_session_id);

/*
 * Forget the session id after the daemon said it does not know it
 * (generation: the one current when the id was handed out), so the next
 * call attaches again.
 */
void session_invalidate(struct session *s, uint64_t session_id);

#endif /* DETD_SESSION_H */
