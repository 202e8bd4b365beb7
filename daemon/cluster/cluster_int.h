/*
 * cluster_int: what the etcd backend's translation units share inside
 * daemon/cluster (cluster.c: jobs, boot, claims, the watch;
 * cluster_peers.c: the verify fan-out and the status monitor;
 * cluster_events.c: the stop flag and the event queue, which both use).
 * Not for other layers: they use cluster.h.
 */
#ifndef DETD_CLUSTER_INT_H
#define DETD_CLUSTER_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "cluster/cluster.h"
#include "cluster/cluster_nodes.h"
#include "cluster/etcd.h"
#include "core/keyid.h"

#define CLUSTER_WORKERS 4
#define CLUSTER_BACKOFF_MS 200
#define CLUSTER_ATTEMPT_MS 1000
#define CLUSTER_BUDGET_MS 3000
#define CLUSTER_RELEASE_MS 15000
#define CLUSTER_MONITOR_MS 1000
/* The registry is read again when the watch shows a nodes/ change, and at
 * least this often (README, "Scale": no read per second per daemon). */
#define CLUSTER_NODES_REFRESH_MS 30000
#define CLUSTER_CLOSE_REVOKE_MS 500
/* Boot and resync retries: full-jitter exponential backoff (README,
 * "Scale"): the n-th retry waits uniform [0, min(cap, base * 2^n)]. */
#define CLUSTER_BOOT_RETRY_BASE_MS 100
#define CLUSTER_BOOT_RETRY_CAP_MS 3000
/* One claimant per key (README, "Scale"; cluster_claimant.c): a node that
 * is not a new key's rendezvous owner waits CLUSTER_DEFER_MS after it met
 * the key, plus CLUSTER_DEFER_STEP_MS per rank past the first (at most
 * CLUSTER_DEFER_SLOTS steps; these are the defaults of --claim-defer-ms,
 * --claim-defer-step-ms and --claim-defer-slots), for the decision before
 * it reads the claim
 * key and claims only when nobody holds it. A claim seen held by a node
 * still registered is taken as held, without a read, for
 * CLUSTER_CLAIM_TRUST_MS. At most CLUSTER_GATE_MAX keys are tracked (past
 * it a node claims at once, as every node did before); a key with nothing
 * pending is forgotten after CLUSTER_GATE_IDLE_MS. */
#define CLUSTER_DEFER_MS 500
#define CLUSTER_DEFER_STEP_MS 50
#define CLUSTER_DEFER_SLOTS 8
#define CLUSTER_GATE_MAX 65536
/* Claims (and commits) queued together, or within CLUSTER_BATCH_WINDOW_MS
 * of the first, go out as one Txn of at most CLUSTER_BATCH_MAX keys
 * (cluster.c, etcd_create_batch()). */
#define CLUSTER_BATCH_MAX ETCD_BATCH_MAX
#define CLUSTER_BATCH_WINDOW_MS 2
#define CLUSTER_GATE_IDLE_MS 60000

enum job_kind {
    JOB_BOOT = 1,
    JOB_RESYNC,
    JOB_CLAIM,
    JOB_COMMIT,
    JOB_RELEASE,
    JOB_FANOUT,
    JOB_READ
};

struct job {
    enum job_kind kind;
    char id[KEYID_HEX_LEN + 1];
    /* JOB_COMMIT: the decision JSON; JOB_FANOUT: request; JOB_READ: the
     * ids, KEYID_HEX_LEN bytes each, back to back */
    char *value;
    char *method; /* JOB_FANOUT */
    cluster_pager pager;
    size_t value_len;
    int64_t deadline_ms;
    int64_t node_timeout_ms; /* JOB_FANOUT: one page of one node */
    uint64_t cookie;
    /* JOB_CLAIM: read the claim key and the decision key before the
     * transaction (cluster_batch.c) */
    int recheck;
    struct job *next;
};

struct cev {
    struct cluster_event ev;
    char id[KEYID_HEX_LEN + 1];
    char node[CLUSTER_MAX_NODE_ID + 1];
    char *value;
    struct cev *next;
};

struct cluster_gate; /* cluster_claimant.c: loop thread only */

struct cluster {
    etcd_client *etcd;
    uv_async_t async;
    uv_timer_t gate_timer;     /* the next deferred claim is due */
    int open_handles;          /* freed when both handles closed */
    struct cluster_gate *gate; /* one claimant per key */
    cluster_event_cb cb;
    void *cb_ctx;
    char *ns_prefix; /* "/detd/v1/<ns>/" */
    char *node_key;
    char *node_value;
    char *lease_file; /* cluster_options.lease_file (owned), or NULL */
    char *writer;
    char *endpoints;
    char node_id[CLUSTER_MAX_NODE_ID + 1];
    int64_t lease_ttl_s;
    int64_t defer_ms, defer_step_ms, defer_slots; /* cluster_options */
    char *peer_ca, *peer_cert, *peer_key;

    pthread_mutex_t mu;
    pthread_cond_t cv; /* jobs queued, lease granted, stop */
    int stopping;
    struct job *jobs, *jobs_tail;
    unsigned gathering; /* 1 << kind: a worker gathers a batch of kind */
    struct cev *evs, *evs_tail;
    int64_t lease_id;
    int booting; /* a JOB_BOOT is queued or running */
    etcd_watch *watch;
    etcd_keepalive *ka;
    int64_t start_revision;
    int64_t watch_rev; /* highest revision the watch delivered */
    int connected;
    char last_error[256];
    uint64_t resyncs;
    uint64_t boot_retries;
    uint64_t rng; /* backoff jitter */
    size_t n_members;
    struct etcd_member_status members[ETCD_MAX_ENDPOINTS];
    size_t n_nodes;
    struct cluster_node *nodes; /* sorted by id; malloc'd, NULL when none */
    int nodes_dirty;            /* the watch saw a nodes/ key change */
    int64_t nodes_read_ms;      /* when the monitor last read them */
    int64_t registered_ms;      /* when this node's key was last put */
    int64_t nodes_asked_ms;     /* cluster_registry_settled() woke it */
    char nodes_error[256];      /* why the last read failed, or "" */

    pthread_t workers[CLUSTER_WORKERS];
    int n_workers;
    pthread_t monitor;
    int monitor_started;
};

/* 1 once cluster_close() began (takes c->mu). */
int cluster_stopping(cluster *c);

/* Wait on c->cv for at most ms (c->mu held). */
void cluster_timed_wait_locked(cluster *c, int64_t ms);

/* Queue an event for the loop thread and wake it (takes c->mu). */
void cluster_deliver(cluster *c, struct cev *e);

/* Build and deliver one event (value copied, NUL-terminated). */
void cluster_post(cluster *c, cluster_event_kind kind, const char *id, int err,
                  int won, const void *value, size_t value_len,
                  int64_t revision, uint64_t cookie);

/* The job queue (cluster_events.c). A job of kind for id (NULL: none)
 * owning value; NULL when out of memory, value freed. */
struct job *cluster_job_new(enum job_kind kind, const char *id, char *value,
                            size_t value_len, int64_t deadline_ms,
                            uint64_t cookie);
/* Hand a filled job to the workers (takes c->mu). */
void cluster_enqueue(cluster *c, struct job *j);
/* Hand the jobs first..last (linked by next) to the workers at once, so
 * that a worker gathers them together (takes c->mu). */
void cluster_enqueue_list(cluster *c, struct job *first, struct job *last);
/* cluster_job_new() and cluster_enqueue(): 0 or DETD_ENOMEM. */
int cluster_submit(cluster *c, enum job_kind kind, const char *id, char *value,
                   size_t value_len, int64_t deadline_ms, uint64_t cookie);

/* Queue a JOB_CLAIM for id (recheck: see struct job). Returns 0 or
 * DETD_ENOMEM. Any thread (cluster_events.c). */
int cluster_claim_job(cluster *c, const char *id, int recheck,
                      int64_t deadline_ms);

/* The gate of one claimant per key (cluster_claimant.c): a new, empty
 * one (NULL when out of memory); close c->gate_timer (closed: the close
 * callback); free it (NULL: no-op). The timer is initialised by
 * cluster_open(). */
struct cluster_gate *cluster_gate_new(void);
void cluster_gate_close(cluster *c, uv_close_cb closed);
void cluster_gate_free(struct cluster_gate *g);

/* cluster_claim() through the gate: the owner of id (rendezvous rank 0)
 * claims at once; another node defers (no etcd call until the decision
 * arrives or its deferral ends), then checks the claim key before it
 * writes one. Returns 0 or DETD_ENOMEM. Loop thread. */
int cluster_gate_claim(cluster *c, const char *id, int recheck,
                       int64_t deadline_ms);

/* Every event on its way to the loop's callback passes here first: the
 * gate forgets decided and claimed keys, and commits that ended. Loop
 * thread. */
void cluster_gate_event(cluster *c, const struct cluster_event *ev);

/* A commit of id was queued (cluster_commit()); until its COMMITTED event,
 * cluster_gate_release() holds a release of id back and returns 1 (the
 * commit job deletes the claim itself; a failed commit sends the release
 * then), else returns 0. Loop thread. */
void cluster_gate_commit(cluster *c, const char *id);
int cluster_gate_release(cluster *c, const char *id);

/* Queue a JOB_RELEASE of id (cluster_events.c). Returns 0 or
 * DETD_ENOMEM. */
int cluster_release_job(cluster *c, const char *id);

/* JOB_FANOUT on a worker: every registered node but this one, page by
 * page, CLUSTER_FANOUT_CONCURRENCY at a time, then PEERS_DONE
 * (cluster_peers.c; the four above:
 * cluster_events.c). */
void cluster_do_fanout(cluster *c, struct job *j);

/* The monitor thread: endpoint health every CLUSTER_MONITOR_MS, the
 * registered nodes when the watch saw them change and at least every
 * CLUSTER_NODES_REFRESH_MS (cluster_peers.c). */
void *cluster_monitor_main(void *arg);

/* Helpers of cluster.c that cluster_batch.c shares: a transient etcd
 * error; sleep ms unless stopping (nonzero: stopping); record an etcd
 * call's outcome for status; "<prefix><kind>/<id>" (heap; NULL: out of
 * memory); the node lease, waiting for the boot until deadline_ms (0:
 * none); whether a claim value is this process's; delete a claim key
 * this node made, with its own budget. */
int cluster_transient(int err);
int cluster_nap(cluster *c, int64_t ms);
void cluster_note(cluster *c, int err, const char *what);
char *cluster_key_of(const cluster *c, const char *kind, const char *id);
int64_t cluster_wait_lease(cluster *c, int64_t deadline_ms);
int cluster_value_is_mine(const cluster *c, const unsigned char *v, size_t n);
void cluster_drop_claim_key(cluster *c, const char *ckey);

/* The job queue's batches (cluster_batch.c), c->mu held: unlink the first
 * job a worker may take (not a claim or commit while another worker
 * gathers those), or NULL; move queued jobs of kind whose id is not in
 * batch yet into it, up to CLUSTER_BATCH_MAX. */
struct job *cluster_take_job(cluster *c);
void cluster_gather(cluster *c, enum job_kind kind, struct job **batch,
                    size_t *n);

/* Run a batch of claim or commit jobs (one kind, distinct ids) on a
 * worker: each is answered (CLAIMED, CLAIM_LOST, DECISION or
 * CLAIM_FAILED; COMMITTED) within its own deadline. */
void cluster_run_batch(cluster *c, struct job **jobs, size_t n);

/* Run a JOB_READ on a worker (cluster_batch.c): one READ event per id,
 * each within the job's deadline. */
void cluster_do_read(cluster *c, struct job *j);

#endif
