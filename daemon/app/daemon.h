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
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "core/access.h"
#include "config/limits.h"
#include "config/options.h"
#include "detd.pb-c.h"
#include "core/engine.h"
#include "io/gpu.h"
#include "core/hotcache.h"
#include "core/metrics.h"
#include "config/log.h"
#include "io/rpc.h"
#include "data/store.h"
#include "data/tables.h"

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
    uint64_t table_hits;   /* Decide answered from a table entry */
    uint64_t table_misses; /* table step found no usable entry */
    uint64_t table_stale;  /* ... and met an entry that named no live
                              candidate (also counted as a miss) */
    uint64_t table_reloads;
    uint64_t import_hits;        /* Decide answered from an imported entry */
    uint64_t import_misses;      /* the import step found no usable entry */
    uint64_t import_stale;       /* ... and met an imported entry that named no
                                    live candidate (also counted as a miss) */
    uint64_t import_calls;       /* ImportTable batches stored */
    uint64_t verify_divergences; /* divergent keys found by Verify */
    uint64_t vote_calls;
    uint64_t votes_refused_full; /* votes refused: --max-votes reached */
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
    /* etcd backend: designated locally, held until the cluster claim. */
    int held;
    uint64_t claim_id;
    int takeover;
    int64_t deadline_ms;
    struct pending *next; /* hash chain by token */
};

struct ckey;
struct listener;
struct exporter;
struct commit_op;
struct tables_reload;
struct verify_op;
struct cluster;

struct daemon {
    const struct daemon_config *cfg;
    uv_loop_t loop;
    uv_async_t wake;
    uv_signal_t sig_term, sig_int, sig_hup;
    uv_timer_t tick;
    uv_timer_t watchdog; /* systemd watchdog pings, from the loop */
    /* Socket activation: the listening socket systemd passed (else -1),
     * polled by the loop; each connection goes to the rpc server. */
    int listen_fd; /* socket activation: the passed socket until opened */
    char activated_path[108];
    rpc_server *rpc;
    struct listener *listener; /* the unix socket (listener.c) */
    struct exporter *exporter; /* --metrics (exporter.c) */
    store *store;
    engine *engine;
    hotcache *hot; /* packed answers of decided keys */
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
    const struct decision *releasing;

    struct daemon_counters counters;
    struct metrics_hist wait_hist; /* held Decide calls, when they end */
    /* Refused calls by access_reason (rpc thread and loop) and refused
     * connections (loop). */
    atomic_uint_fast64_t refused[ACCESS_REASON_COUNT];
    /* Decide calls answered on the rpc thread from the hot cache (also
     * counted in decide_calls and decide_hits by status and metrics). */
    atomic_uint_fast64_t fast_decide_hits;
    uint64_t refused_connections;

    /* etcd backend (coord.c); cluster NULL for the local backend. */
    struct cluster *cluster;
    struct ckey *ckeys;        /* keys with cluster claim activity */
    struct commit_op *commits; /* reports waiting for their commit */
    uint64_t next_commit;
    int64_t etcd_revision;        /* last applied etcd revision */
    int64_t etcd_revision_stored; /* ... as stored in the meta table */
    int64_t persist_at;           /* next time it may be stored */
    int etcd_connected;
    char etcd_error[256];
    struct verify_op *verifies; /* verify --cluster gathering (admin.c) */
    uint64_t next_verify;

    /* Per-architecture tables (tableadmin.c): the set in use, swapped
     * whole by a reload; the reload being loaded off the loop, if any. */
    tables *tables;
    struct tables_reload *reload;

    /* Imported entries stored, all namespaces (imports.c): the import
     * step is skipped while there are none; counted again when unknown. */
    uint64_t n_imports;
    int n_imports_known;
};

/* service.c: handle one event from the rpc thread (loop thread). */
/*
 * The rpc thread's fast path for Decide on a key whose packed answer is in
 * the hot cache: validate quietly, copy the answer, reply, and free the
 * request, without the hop to the loop. Returns 1 when it answered (ev is
 * consumed), 0 to queue ev for the loop as usual (anything else: a miss,
 * an invalid request, another method). Touches only thread-safe state.
 */
int service_decide_fast(struct daemon *d, struct rpc_event *ev);
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
void admin_list_observations(struct daemon *d, struct rpc_event *ev);

/* admin.c: verify --cluster. A peer's observations (or why not) arrived,
 * or all did (CLUSTER_EV_PEER / _PEERS_DONE); drain fails those pending. */
struct cluster_event;
void admin_verify_peer(struct daemon *d, const struct cluster_event *ev);
void admin_verify_drain(struct daemon *d);

/*
 * tableadmin.c: tables on the loop thread.
 * tableadmin_load_initial: load the set synchronously at start-up
 * (logs each skipped file); returns 0 or DETD_ENOMEM.
 * tableadmin_reload: load a new set on a worker thread and swap it in on
 * the loop thread when complete; call (may be NULL: SIGHUP) is answered
 * then with a ReloadResponse (its request event's reference is taken).
 * tableadmin_explain: the Explain method (consumes the event).
 * tableadmin_status: fill the table part of a status answer; the arrays
 * live until tableadmin_status_clear().
 * tableadmin_free: free the set (at exit, after the loop stopped).
 */
int tableadmin_load_initial(struct daemon *d);
void tableadmin_reload(struct daemon *d, rpc_call *call);
void tableadmin_reload_rpc(struct daemon *d, struct rpc_event *ev);
void tableadmin_explain(struct daemon *d, struct rpc_event *ev);
struct tableadmin_status {
    Detd__V1__TableFile *files;
    Detd__V1__TableFile **filep;
    size_t nfiles;
    Detd__V1__TableError *errors;
    Detd__V1__TableError **errorp;
    size_t nerrors;
};
int tableadmin_status_fill(struct daemon *d, struct tableadmin_status *ret);
void tableadmin_status_clear(struct tableadmin_status *s);
void tableadmin_free(struct daemon *d);

/* service.c: answer every waiter and end every stream (drain). */
void service_drain(struct daemon *d);

/* service.c: free sessions and pending tables at exit. */
void service_free(struct daemon *d);

/*
 * service.c: log a decision just committed to this daemon's store, once,
 * at info level, with its fields (id, namespace, arch, kernel, key,
 * config, source, claim, and who timed it: host, pid, rank). origin: the
 * node that committed it ("local" for the local backend); via: how this
 * daemon learned it ("report", "committed here", "watch", ...). r and the
 * strings are borrowed.
 */
void service_log_decision(const struct decision *r, const char *origin,
                          const char *via);

/* service.c: helpers shared with coord.c (loop thread). */
void service_pending_add(struct daemon *d, struct pending *p);
struct pending *service_pending_take(struct daemon *d, uint64_t token);
void service_pending_free(struct pending *p);
uint32_t service_waited(const struct pending *p);
void service_reply_decided(struct daemon *d, rpc_call *call,
                           const struct decision *r, uint32_t waited_ms);
void service_reply_designated(struct daemon *d, rpc_call *call, const char *id,
                              uint64_t claim, int takeover, uint32_t waited_ms);
void service_reply_report(rpc_call *call, const struct decision *r,
                          int superseded);

/*
 * service.c: the request checks of Decide, shared with votes.c (loop
 * thread). Each returns 0, or -1 after answering call INVALID_ARGUMENT
 * (or RESOURCE_EXHAUSTED) with a message naming the field.
 * service_validate_key: on success *ret_ns borrows the namespace (the
 * key's, or the daemon's), ret_fp and ret_id get the hex candidate
 * fingerprint and decision id. service_has_candidate: 1 when config is
 * one of k's candidates.
 */
int service_check_identity(rpc_call *call, const Detd__V1__ClientIdentity *c);
int service_check_str(rpc_call *call, const char *what, const char *s,
                      size_t max, int required);
int service_validate_key(struct daemon *d, rpc_call *call,
                         const Detd__V1__DecisionKey *k, const char **ret_ns,
                         char ret_fp[65], char ret_id[65]);
int service_has_candidate(const Detd__V1__DecisionKey *k, const char *config);

/*
 * coord.c: the etcd backend on the loop thread (see coord.c). All of them
 * only run with d->cluster set.
 * coord_hold: p (allocated, not in the pending table; p->claim_id,
 * p->takeover, p->deadline_ms set) was designated by the engine: answer
 * it at once when this node holds the cluster claim, else hold it (it
 * goes into the pending table) while the cluster claim is taken. Takes p.
 * coord_held_cancelled: p (taken out of the pending table, held) ended
 * before its answer; answers it CANCELLED and frees it.
 * coord_commit: commit row through etcd; the reply to call (a Report) is
 * sent when the commit result arrives. row is borrowed for the call.
 * coord_tick: deadlines of held askers and claim retries; returns the
 * next time it needs to run (or INT64_MAX).
 * coord_sweep: release cluster claims no local claim needs any more.
 * coord_etcd_trouble: etcd did not answer lately (for the key id).
 * coord_drain: fail commits in flight and forget claim state (drain).
 * coord_event: the cluster event callback.
 */
struct cluster_event;
void coord_hold(struct daemon *d, struct pending *p);
void coord_held_cancelled(struct daemon *d, struct pending *p);
int coord_commit(struct daemon *d, rpc_call *call, const struct decision *row,
                 int64_t deadline_ms);
/* coord_commit_decide: as coord_commit, for a Decide answered from a
 * table: the reply to call is a DecideResponse with the winning row. */
int coord_commit_decide(struct daemon *d, rpc_call *call,
                        const struct decision *row, int64_t deadline_ms);
int64_t coord_tick(struct daemon *d, int64_t now);
void coord_sweep(struct daemon *d);
int coord_etcd_trouble(struct daemon *d, const char *id);
const char *coord_etcd_error(struct daemon *d);
void coord_drain(struct daemon *d);
void coord_event(void *ctx, const struct cluster_event *ev);

/*
 * service.c: commit config for key k (namespace ns, candidate fingerprint
 * fp, decision id id) as a decision of source (DETD_SOURCE_TABLE or
 * _IMPORT; file: the table file it came from) and answer call (a Decide)
 * with the decision that won: first writer wins, locally in the store,
 * or through etcd (coord_commit_decide). Waiters on a timing pass for the
 * key get it too. what names the entry in the log line. Everything is
 * borrowed for the call.
 */
void service_commit_entry(struct daemon *d, rpc_call *call, const char *ns,
                          const Detd__V1__DecisionKey *k, const char *fp,
                          const char *id, const char *config, int source,
                          const char *file, const char *what);

/* loop.c: re-arm the tick timer after state changed outside a tick. */
void daemon_rearm(struct daemon *d);

/* loop.c: run the daemon until SIGTERM/SIGINT; returns an exit code. */
int daemon_run(const struct daemon_config *cfg);

#endif /* DETD_DAEMON_H */
