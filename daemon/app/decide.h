/*
 * decide: the methods of detd.v1.Decider (Attach, Decide, Report,
 * Observe) and the engine's events, on the loop thread.
 *
 * Resolution order for Decide: the decision store, then the imported
 * entries, then the tables (both committed by commit.c like a report),
 * then a claim from the engine: the first asker times the candidates,
 * the others wait (waiters.c) until the decision is committed or the
 * claim passes to them. With the etcd backend a local designation is
 * held until this node holds the cluster claim (coord.c).
 *
 * Each method handler consumes its event: it answers the call (now or,
 * for a waiter, later) and frees the request.
 */
#ifndef DETD_DECIDE_H
#define DETD_DECIDE_H

#include "core/engine.h"
#include "io/rpc.h"

struct daemon;

void decide_attach(struct daemon *d, struct rpc_event *ev);
void decide_decide(struct daemon *d, struct rpc_event *ev);
void decide_report(struct daemon *d, struct rpc_event *ev);
void decide_observe(struct daemon *d, struct rpc_event *ev);

/*
 * The rpc thread's fast path for Decide on a key whose packed answer is in
 * the hot cache: validate quietly, copy the answer, reply, and free the
 * request, without the hop to the loop. Returns 1 when it answered (ev is
 * consumed), 0 to queue ev for the loop as usual (anything else: a miss,
 * an invalid request, another method). On a miss the checked key (a heap
 * struct vkey, validate.h) goes with the event as ev->owner_data, which
 * decide_decide() takes instead of checking and hashing the key again.
 * Touches only thread-safe state.
 */
int decide_fast(struct daemon *d, struct rpc_event *ev);

/* A call ended (RPC_EV_CLOSED): end its session (Attach) or drop its
 * waiter (Decide). Releases the event's call reference. */
void decide_closed(struct daemon *d, struct rpc_event *ev);

/*
 * Give d's engine (just created) the daemon's claim policy: claim ids of
 * 63 random bits (getrandom), session 0 never designated, and the timing
 * pass deadline --pass-timeout-ms. Also sets d->node (--node-id, else the
 * hostname). Returns 0 or a negative DETD_E*.
 */
int decide_engine_setup(struct daemon *d);

/*
 * The time by which the daemon answers a call with deadline (monotonic
 * ms; INT64_MAX: none), asked at now: a margin before it of 5% of the
 * time left, at least 50 ms and at most 2 s, so that the answer reaches
 * the caller before its deadline does; no later than now + wait_ms
 * (0: no such bound) and now + DAEMON_MAX_WAIT_MS.
 */
int64_t decide_answer_by(int64_t deadline, uint32_t wait_ms, int64_t now);

/* The engine's event callback (ctx: the daemon). */
void decide_engine_event(void *ctx, const struct engine_event *ev);

/* Answer every waiter UNAVAILABLE and end every session (drain). */
void decide_drain(struct daemon *d);

#endif /* DETD_DECIDE_H */
