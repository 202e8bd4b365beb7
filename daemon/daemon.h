/*
 * daemon: the daemon's context and its two halves.
 *
 * loop.c owns the libuv loop: the event queue filled by the rpc thread,
 * signals, the engine tick timer, start-up and drain. service.c answers
 * each method on the loop thread: it is the only place that combines the
 * store, the engine and the rpc replies. All mutable state below is
 * touched by the loop thread only, except the event queue (its mutex).
 */
#ifndef DETD_DAEMON_H
#define DETD_DAEMON_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "detd.pb-c.h"
#include "engine.h"
#include "gpu.h"
#include "log.h"
#include "rpc.h"
#include "store.h"

/* Hard caps on what a client can make the daemon hold or parse. */
#define DAEMON_MAX_NAMESPACE 128
#define DAEMON_MAX_ARCH 64
#define DAEMON_MAX_KERNEL 1024
#define DAEMON_MAX_CONFIG 1024
#define DAEMON_MAX_TIMING_SAMPLES 1024
#define DAEMON_MAX_IDENTITY_STRING 256
#define DAEMON_MAX_WAIT_MS (60LL * 60 * 1000)
#define DAEMON_MAX_LIST 10000

struct daemon_config {
    const char *socket_path;
    const char *state_dir;
    const char **tables; /* --tables, in order */
    size_t n_tables;
    const char *ns;
    uint32_t lease_ms;
    log_level level;
    uint32_t max_clients;
    uint32_t max_waiters;
    uint32_t max_claims;
    uint32_t max_queue; /* events queued for the loop */
    const char *cuda_library;
};

/* Counters shown by status (and later exported as metrics). */
struct daemon_counters {
    uint64_t decide_calls;
    uint64_t decide_hits;
    uint64_t decide_misses; /* no_claim asks that found nothing */
    uint64_t designations;
    uint64_t takeovers;
    uint64_t waits;
    uint64_t wait_timeouts;
    uint64_t reports;
    uint64_t reports_stale;
    uint64_t reports_repeated;
    uint64_t observes;
    uint64_t rejected;     /* invalid or over a limit */
    uint64_t busy;         /* refused for capacity */
    uint64_t committed[8]; /* decisions committed, by source */
};

struct session {
    uint64_t id;
    rpc_call *call;               /* the Attach stream (holds a reference) */
    Detd__V1__AttachRequest *req; /* identity storage */
    int64_t attached_at_ms;       /* unix time */
};

/* A Decide waiting server-side for another rank's timing pass. */
struct pending {
    uint64_t token;
    rpc_call *call;
    Detd__V1__DecideRequest *req;
    char id[65];
    int64_t started_ms;
    struct pending *next; /* hash chain by token */
};

struct daemon {
    const struct daemon_config *cfg;
    uv_loop_t loop;
    uv_async_t wake;
    uv_signal_t sig_term, sig_int, sig_hup;
    uv_timer_t tick;
    rpc_server *rpc;
    store *store;
    engine *engine;
    char *store_path;
    struct gpu_probe gpus;
    int64_t started_unix_ms;
    int64_t started_mono_ms;
    int draining;

    pthread_mutex_t qmu; /* event queue, filled by the rpc thread */
    struct rpc_event *queue;
    size_t nqueue, capqueue;
    struct rpc_event *work; /* swapped in by the loop */
    size_t capwork;

    struct session **sessions;
    size_t nsessions, capsessions;
    uint64_t next_session;

    struct pending **pending; /* hash table by token */
    size_t npending_buckets;
    size_t npending;
    uint64_t next_token;

    /* The decision being released by engine_decided(), for its events. */
    const struct store_decision *releasing;

    struct daemon_counters counters;
};

/* service.c: handle one event from the rpc thread (loop thread). */
void service_handle(struct daemon *d, struct rpc_event *ev);

/* service.c: engine event callback (loop thread). */
void service_engine_event(void *ctx, const struct engine_event *ev);

/* admin.c: the Admin and Health methods (loop thread). Each consumes the
 * event: it answers the call and frees the request. */
void admin_status(struct daemon *d, struct rpc_event *ev);
void admin_list(struct daemon *d, struct rpc_event *ev);
void admin_verify(struct daemon *d, struct rpc_event *ev);
void admin_reset(struct daemon *d, struct rpc_event *ev);
void admin_health(struct daemon *d, struct rpc_event *ev);

/* service.c: answer every waiter and end every stream (drain). */
void service_drain(struct daemon *d);

/* service.c: free sessions and pending tables at exit. */
void service_free(struct daemon *d);

/* loop.c: run the daemon until SIGTERM/SIGINT; returns an exit code. */
int daemon_run(const struct daemon_config *cfg);

/* loop.c: wall-clock milliseconds. */
int64_t daemon_unix_ms(void);

#endif /* DETD_DAEMON_H */
