/*
 * daemon: the daemon's context, shared by the loop (loop.c), the
 * dispatch (dispatch.c), the Decider (app/) and the operator services
 * (ops/).
 *
 * loop.c owns the libuv loop: the event queue filled by the rpc thread,
 * signals, the tick timer, start-up and drain. dispatch.c hands each
 * event to its method's handler (one table, io/rpc_methods.h). The state
 * below is touched by the loop thread only, except the event queue (its
 * mutex), the hot cache (its own mutex) and the atomics. Modules own
 * their state: the waiters (waiters.c), the benchmark splits
 * (benchsplit.c), the cluster claims (coord.c),
 * the etcd commits in flight (commit.c) and the verify gatherings
 * (ops/admin.c) are opaque here.
 */
#ifndef DETD_DAEMON_H
#define DETD_DAEMON_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "app/fair.h"
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
    uint64_t shares;          /* shares of timing passes given to waiters */
    uint64_t bench_splits;    /* benchmark splits opened (Share) */
    uint64_t bench_helpers;   /* waiters admitted to benchmark a share */
    uint64_t bench_given;     /* candidate results given by helpers */
    uint64_t bench_reclaimed; /* candidates the holder took back */
    uint64_t reports;
    uint64_t reports_stale;
    uint64_t reports_repeated;
    uint64_t reports_refused;       /* for another session's claim, or from a
                                       process that is not the session's */
    uint64_t reports_rejected;      /* the holder's report was unusable: its
                                       claim ended and its waiters were told */
    uint64_t calls_refused_session; /* Decide/Observe naming a session or
                                       rank that is not the caller's */
    uint64_t unattached_refused;    /* session-0 Decide never designated */
    uint64_t commit_deadlines;      /* Report/Decide answered UNAVAILABLE
                                       at its deadline while etcd had not
                                       answered the commit */
    /* lock entries etcd did not take (their import failed, naming them) */
    uint64_t lock_not_committed;
    /* detd --lock through etcd chose the lock's owner before the registry
     * listed this node (it did not within its bound): maybe two writers */
    uint64_t lock_registry_late;
    uint64_t observes;
    uint64_t lock_skipped; /* lock entries not stored: their provenance
                              did not match the importing run */
    uint64_t rejected;     /* invalid or over a limit */
    uint64_t busy;         /* refused for capacity */
    uint64_t committed[8]; /* decisions committed, by source */
    uint64_t table_hits;   /* Decide answered from a table entry */
    uint64_t table_misses; /* table step found no usable entry */
    uint64_t table_stale;  /* ... and met an entry that named no live
                              candidate (also counted as a miss) */
    uint64_t table_reloads;
    uint64_t table_reload_failures; /* reloads that kept the old set */
    uint64_t failed_passes;         /* passes recorded as failed everywhere */
    uint64_t failed_pass_answers;   /* Decides answered with such a failure */
    uint64_t passes_env_released;   /* claims given back: the holder's pass
                                       could not run in its environment */
    uint64_t passes_passed_on;      /* claims passed on untimed by their
                                       holder (ReportRequest.pass_on) */
    uint64_t import_hits;           /* Decide answered from an imported entry */
    uint64_t import_misses;         /* the import step found no usable entry */
    uint64_t import_stale;       /* ... and met an imported entry that named no
                                    live candidate (also counted as a miss) */
    uint64_t import_calls;       /* ImportTable batches stored */
    uint64_t verify_divergences; /* divergent keys found by Verify */
    uint64_t vote_calls;
    uint64_t votes_refused_full; /* votes refused: --max-votes reached */
    uint64_t store_disk_full;    /* store calls failed: disk full */
    uint64_t store_disk_errors;  /* store calls failed: I/O error */
    uint64_t fair_refused[FAIR_CAP_COUNT]; /* calls over a fair.h cap */
};

/* A failure episode of the store's disk (storeerr.c). */
struct store_health {
    int failing;          /* an episode is open */
    uint64_t failures;    /* failed calls in the open episode */
    uint64_t writes_mark; /* store_writes() when it opened */
    int64_t since_ms;     /* monotonic, when it opened */
};

/*
 * A client's session as the daemon holds it: one libdetd handle's Attach
 * stream (the client library's own side is client/src/session.h), with
 * who attached it. The engine keeps the same id's claims and waiters in
 * its own struct engine_session (core/engine.c), which knows no calls.
 */
struct client_session {
    uint64_t id;
    rpc_call *call;               /* the Attach stream (holds a reference) */
    Detd__V1__AttachRequest *req; /* identity storage */
    int64_t attached_at_ms;       /* unix time */
    /* Who attached, as the kernel says (SO_PEERCRED; pid 0 and uid -1
     * when unknown), and the rank it claimed then (bound for the
     * session's life). */
    int32_t peer_pid;
    uint32_t peer_uid;
    int32_t rank;
    struct fair_usage fair; /* its share of the per-session caps */
};

struct listener;
struct exporter;
struct tables_reload;
struct admin_verifies;
struct coord;
struct commit_state;
struct waiters;
struct benchsplit;
struct fair;
struct claimlog;

struct daemon {
    const struct daemon_config *cfg;
    uv_loop_t loop;
    uv_async_t wake;
    uv_signal_t sig_term, sig_int, sig_hup;
    uv_timer_t tick;
    uv_timer_t watchdog;   /* systemd watchdog pings, from the loop */
    uv_timer_t idle_exit;  /* --exit-when-idle-s: checks once a second */
    int64_t idle_since_ms; /* 0: not idle at the last check */
    /* Socket activation: the listening socket systemd passed (else -1),
     * polled by the loop; each connection goes to the rpc server. */
    int listen_fd; /* socket activation: the passed socket until opened */
    int lock_fd;   /* the state directory's lock (loop.c), else -1 */
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

    struct client_session **sessions;
    size_t nsessions, capsessions;
    uint64_t next_session;

    struct waiters *waiters;   /* held Decide calls (waiters.c) */
    struct benchsplit *splits; /* benchmark splits (benchsplit.c) */
    char node[256]; /* --node-id, else the hostname (decide.c sets it) */
    uint64_t next_token;

    struct daemon_counters counters;
    struct store_health store_health;
    struct fair *fair;           /* per-uid usage of the caps (fair.c) */
    struct claimlog *claims_log; /* the passes handed out (passes.c) */
    /* Refused calls by access_reason (rpc thread and loop) and refused
     * connections (loop). */
    atomic_uint_fast64_t refused[ACCESS_REASON_COUNT];
    /* Decide calls answered on the rpc thread from the hot cache (also
     * counted in decide_calls and decide_hits by status and metrics). */
    atomic_uint_fast64_t fast_decide_hits;
    uint64_t refused_connections;

    /* etcd backend; all NULL for the local backend. cluster: the
     * backend (cluster/cluster.c); coord: its claims (coord.c); commits:
     * commits waiting for etcd (commit.c). */
    struct cluster *cluster;
    struct coord *coord;
    struct commit_state *commits;
    struct admin_verifies *verifies; /* verify --cluster (ops/admin.c) */
    /* lock imports waiting for their owner's writes (ops/lock_etcd.c) */
    struct lock_job *lock_waits;
    /* Called (by commit.c) after a decision from etcd is stored, while
     * set: ops/lock_etcd.c sets it while imports wait, to look for the
     * rows they wait for then instead of polling; NULL otherwise. */
    void (*on_etcd_applied)(struct daemon *d);

    /* Per-architecture tables (tableadmin.c): the set in use, swapped
     * whole by a reload; the reload being loaded off the loop, if any. */
    tables *tables;
    struct tables_reload *reload;

    /* Imported entries stored, all namespaces (imports.c): the import
     * step is skipped while there are none; counted again when unknown. */
    uint64_t n_imports;
    int n_imports_known;
};

#endif /* DETD_DAEMON_H */
