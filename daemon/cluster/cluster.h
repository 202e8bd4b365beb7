/*
 * cluster: the etcd backend. Owns the etcd client (etcd.h), the node
 * lease and its keep-alive, the node registration key, the watch on the
 * namespace's keys, and a small pool of worker threads that make the
 * blocking etcd calls. Results and watch events are queued and handed to
 * the libuv loop thread (mutex queue + uv_async_send, drained whole on
 * each wake-up), where the callback given to cluster_open() receives
 * them one at a time. Everything the loop calls here is non-blocking.
 *
 * Keys, for namespace <ns>:
 *   /detd/v1/<ns>/decisions/<id>  a decision: first writer wins (a Txn on
 *                                 "key does not exist"), never leased
 *   /detd/v1/<ns>/claims/<id>     the cluster-wide claim: attached to this
 *                                 node's lease, deleted after the commit
 *   /detd/v1/<ns>/nodes/<node>    node registration (lease): for status
 *                                 and verify --cluster
 * Values are JSON. A decision carries the full row plus "writer" (node
 * id, pid, a per-process nonce and the claim id), so a commit whose first
 * attempt succeeded unseen recognises its own win on retry. A claim
 * carries the writer of the node that holds it.
 *
 * One claimant per key (cluster_claimant.c): cluster_claim() on the
 * key's rendezvous owner among the registered nodes sends the claim at
 * once; on any other node it waits --claim-defer-ms (plus a step per
 * rank) for the decision, then reads the claim key and writes one only
 * when nobody holds it. A claim is created only if the claim key and the
 * decision key are both absent (one Txn: a decision committed before the
 * claim is found by it), so a key is timed once even when the watch lags.
 * The commit deletes the committer's claim key in its own Txn. Claims
 * (commits) of keys met together go out as one Txn (cluster_batch.c).
 *
 * One watch covers decisions/ and nodes/ (not claims/: their puts and
 * deletes would reach every node for every key). A claim held elsewhere
 * is re-checked by reading it (recheck), never by watching it.
 *
 * The watch starts from the last revision the daemon applied (stored in
 * SQLite by the caller, passed as start_revision) and resumes after it on
 * restart. With no stored revision, or when etcd has compacted past it,
 * the worker reads every decision as one snapshot (full resync: DECISION
 * events followed by one REVISION event) and watches from there.
 *
 * Every etcd call has a per-attempt deadline and a budget (etcd.h) and is
 * retried here until the job's own deadline. The cluster never decides
 * anything: when etcd cannot be reached, claims and commits fail with
 * DETD_EUNAVAILABLE / DETD_ETIMEDOUT when their deadline passes.
 */
#ifndef DETD_CLUSTER_H
#define DETD_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "cluster/etcd.h"
#include "cluster/cluster_codec.h"
#include "core/decision.h"

/* The most nodes the registry holds (README, "Scale"). Memory grows with
 * the nodes registered (about 430 bytes each), not with this cap; a
 * registry past it is refused whole: status names the error and verify
 * --cluster fails, rather than either showing a part as the whole. */
#define CLUSTER_MAX_NODES 65536
/* verify --cluster: how many nodes are asked at once, and how long one
 * node may take to answer one page (less when the caller's deadline comes
 * first): a node silent that long is named with the error, one that keeps
 * answering is read to its last page. */
#define CLUSTER_FANOUT_CONCURRENCY 16
#define CLUSTER_PEER_TIMEOUT_MS 5000
/* The most pages cluster_fanout() asks one node for (one ListObservations
 * page holds at most 1,000 observations or 512 KiB). */
#define CLUSTER_MAX_PAGES 256

typedef struct cluster cluster;

/* Strings are borrowed for the duration of cluster_open() only. */
struct cluster_options {
    const char *endpoints; /* --etcd: comma-separated URLs */
    const char *ca_file;   /* TLS: PEM paths, NULL when unused */
    const char *cert_file;
    const char *key_file;
    const char *user; /* etcd auth: both or neither */
    const char *password;
    const char *node_id;     /* this node's name (unique in the cluster) */
    const char *ns;          /* the daemon's namespace */
    const char *listen;      /* advertised admin address, or NULL */
    const char *socket_path; /* for the node key (information) */
    uint32_t lease_ms;       /* node lease; rounded up to whole seconds */
    int64_t start_revision;  /* last applied revision; 0: full resync */
    /* Where this node keeps its lease id (in its locked state directory),
     * or NULL: at boot the lease a previous run left (killed before it
     * could revoke it) is revoked, so its claims go at once instead of
     * holding their keys until the lease expires. */
    const char *lease_file;
    /* TLS towards other nodes' --listen (verify --cluster): roots and an
     * optional client certificate; all NULL: plaintext. */
    const char *peer_ca;
    const char *peer_cert;
    const char *peer_key;
    /* One claimant per key (cluster_claimant.c): a node that is not a new
     * key's owner defers its claim defer_ms, plus defer_step_ms per rank
     * past the first, at most defer_slots steps. defer_ms 0: the defaults
     * (CLUSTER_DEFER_MS, _STEP_MS, _SLOTS) for all three. */
    uint32_t defer_ms;
    uint32_t defer_step_ms;
    uint32_t defer_slots;
};

typedef enum cluster_event_kind {
    /* Results of cluster_claim(): */
    CLUSTER_EV_CLAIMED = 1,  /* this node holds the claim key for id */
    CLUSTER_EV_CLAIM_LOST,   /* another node holds it (value: its JSON) */
    CLUSTER_EV_CLAIM_FAILED, /* etcd unreachable until the deadline (err) */
    /* Result of cluster_commit(): err 0 with value the winning decision's
     * JSON and won set when it is ours, or err != 0 (not committed). */
    CLUSTER_EV_COMMITTED,
    /* A decision seen in etcd (watch, resync, or found by a claim):
     * value is its JSON; revision its mod revision (0 in a resync). */
    CLUSTER_EV_DECISION,
    /* Every decision up to revision has been delivered: persist it.
     * At the end of a full resync value is "resync" and cookie the count
     * of decisions read. */
    CLUSTER_EV_REVISION,
    /* The node lease was lost (claim keys under it are gone) and is
     * being re-granted: claims held must be taken again. */
    CLUSTER_EV_LEASE_LOST,
    /* Connection state changed: err 0 connected, else why not. */
    CLUSTER_EV_STATE,
    /* cluster_fanout(): one per node and page (node; err, or value the
     * response bytes), then PEERS_DONE; both with the cookie. */
    CLUSTER_EV_PEER,
    CLUSTER_EV_PEERS_DONE,
    /* At boot, the lease a previous run of this node left: revision is
     * its id; won 1 when revoked now (its claims went), 0 when it had
     * expired already. */
    CLUSTER_EV_PREVIOUS_LEASE,
    /* Result of cluster_read(), one per key, with its cookie: err 0 and
     * value the decision's JSON, or NULL when etcd holds none; or err
     * (not read by the deadline). */
    CLUSTER_EV_READ,
} cluster_event_kind;

/* Borrowed: valid only during the callback. */
struct cluster_event {
    cluster_event_kind kind;
    const char *id; /* decision id (claims, commits, decisions) or "" */
    int err;
    int won;
    const char *value; /* NUL-terminated JSON or NULL */
    size_t value_len;
    int64_t revision;
    uint64_t cookie;  /* cluster_commit()'s / cluster_fanout()'s cookie */
    const char *node; /* PEER: the node's id; else "" */
};

/* Runs on the loop thread; may call any cluster_* function except
 * cluster_close(). */
typedef void (*cluster_event_cb)(void *ctx, const struct cluster_event *ev);

/*
 * Create the backend and start its threads (bootstrap, watch, workers)
 * on loop. etcd is contacted by the threads, not here: the daemon starts
 * and serves stored decisions while etcd is down. cb and ctx are kept
 * until cluster_close(). Returns 0 with *ret owned by the caller, or
 * DETD_EINVAL / DETD_ENOMEM / -errno with *ret_errmsg (heap; caller
 * frees; may be NULL) naming the problem.
 */
int cluster_open(const struct cluster_options *opt, uv_loop_t *loop,
                 cluster_event_cb cb, void *ctx, cluster **ret,
                 char **ret_errmsg);

/*
 * Stop the threads, revoke the node lease (its claims and node key go at
 * once; bounded by the call budget) and close the async handle; the
 * memory is freed in its close callback, so the loop must run once more.
 * No callback runs after it returns. Loop thread. NULL is a no-op.
 */
void cluster_close(cluster *c);

/*
 * Take the cluster-wide claim for id, retrying until deadline_ms
 * (clock_mono_ms clock). Answers CLAIMED, CLAIM_LOST, CLAIM_FAILED, or
 * DECISION when the key turns out to be decided (from the watch, when
 * this node deferred the claim). The claim key is read first and the
 * claim transaction sent only when it is absent or this node's, so that
 * a claim another node holds costs etcd a read, not a Raft proposal. On a
 * node that is not the key's rendezvous owner, nothing is sent until the
 * deferral ends (cluster_claimant.c); a decision arriving first answers
 * the call. The reads before the claim take the claim key and the
 * decision key at once (the commit deletes the claim in the Txn that
 * stores the decision: a read answered just after a commit, before the
 * watch brought it, finds the decision there instead of paying a claim
 * Txn). recheck is that read asked for explicitly: it matters only when
 * more than CLUSTER_GATE_MAX keys are being claimed at once (the gate then
 * passes the call through as it came). Returns 0 or DETD_ENOMEM. Loop
 * thread.
 */
int cluster_claim(cluster *c, const char *id, int recheck, int64_t deadline_ms);

/*
 * Commit a decision row (first writer wins, never leased), retrying until
 * deadline_ms; the same Txn deletes this node's claim key for it. claim_id goes
 * into the writer id. Answers COMMITTED with cookie. row is borrowed for
 * the call. Returns 0, DETD_ENOMEM or DETD_EINVAL. Loop thread.
 */
int cluster_commit(cluster *c, const struct decision *row, uint64_t claim_id,
                   int64_t deadline_ms, uint64_t cookie);

/*
 * cluster_commit() of rows[0..n) (borrowed for the call) at once, row i
 * with cookie first_cookie + i: every job is queued together, so that
 * the workers send them in as few Txns as CLUSTER_BATCH_MAX allows (one
 * at a time, a worker may start a Txn before the next is queued).
 * ret_err[i] (room for n) is 0 when row i was queued, else why it was
 * refused (DETD_EINVAL, DETD_ELIMIT: no event for it). Returns 0, or
 * DETD_ENOMEM with nothing sent. Loop thread.
 */
int cluster_commit_many(cluster *c, const struct decision *rows, size_t n,
                        uint64_t claim_id, int64_t deadline_ms,
                        uint64_t first_cookie, int *ret_err);

/*
 * Read the decisions of ids[0..n) (borrowed for the call) from etcd,
 * ETCD_GET_MANY_MAX keys per request (a Txn of reads only: no Raft
 * proposal), retrying until deadline_ms. Answers one READ event per id,
 * cookie first_cookie + i for ids[i]. Returns 0 or DETD_ENOMEM (no event
 * then). Loop thread.
 */
int cluster_read(cluster *c, const char *const *ids, size_t n,
                 int64_t deadline_ms, uint64_t first_cookie);

/*
 * How long this node waits before it writes what every node may write at
 * the same moment, for the work named id (a lock import: daemon/ops/
 * lock_etcd.c): 0 when it is id's rendezvous owner among the registered nodes
 * (or the registry as last read does not list this node yet), else the
 * deferral of its rank as a claim's (cluster_defer_ms() with this
 * daemon's --claim-defer-* settings). Loop thread.
 */
int64_t cluster_defer_of(cluster *c, const char *id);

/*
 * Whether the registry is settled for choosing among the registered nodes
 * at start (detd --lock, before anything else is asked of the cluster):
 * the registry as last read lists this node and was read at least the
 * claim deferral (--claim-defer-ms) after this node registered, so the
 * nodes started with it (within the deferral of each other, as a claim's
 * wait assumes of nodes meeting a key together) are in it. While not,
 * once that read is due the monitor is woken for it (once per
 * registration). Loop thread.
 */
int cluster_registry_settled(cluster *c);

/* How long waiting for cluster_registry_settled() is worth it from the
 * moment the node's boot was asked: the claim deferral and two monitor
 * rounds (the registration, then the read). */
int64_t cluster_registry_settle_ms(const cluster *c);

/*
 * The next page of a paged fan-out: given the request sent (req) and its
 * answer (resp), return 1 with the next request in *ret_next (malloc'd,
 * *ret_len bytes) when the answer says more follow, 0 when it was the
 * last page, or a DETD_E* error (an undecodable answer). Runs on the
 * cluster worker: it must not touch the loop's state.
 */
typedef int (*cluster_pager)(const void *req, size_t req_len, const void *resp,
                             size_t resp_len, void **ret_next, size_t *ret_len);

/*
 * Make one unary call (method: full path; req: req_len bytes, copied) on
 * every registered node but this one, through its --listen address: the
 * registry as etcd has it now, read in pages (the status monitor's copy
 * when etcd cannot be read). At most CLUSTER_FANOUT_CONCURRENCY nodes are
 * asked at once; each call (one page of one node) is bounded by
 * node_timeout_ms, and all of them by deadline_ms (clock_mono_ms clock); a node
 * not started by deadline_ms is answered DETD_ETIMEDOUT without a call. With a
 * pager, each node is asked again for its next page while there is one, up to
 * CLUSTER_MAX_PAGES (then an error event for that node). Answers a PEER event
 * per page (or the error that ended a node's pages; a registry that cannot be
 * read at all: one PEER event with node "" and the error), then PEERS_DONE,
 * with cookie. The pages of one node arrive in order; nodes interleave. Returns
 * 0 or DETD_ENOMEM. Loop thread.
 */
int cluster_fanout(cluster *c, const char *method, const void *req,
                   size_t req_len, int64_t node_timeout_ms, int64_t deadline_ms,
                   cluster_pager pager, uint64_t cookie);

/*
 * One page of the registered nodes (the status monitor's copy, sorted by
 * node id): up to max nodes whose id sorts after `after` (NULL or "": from
 * the first; see cluster_nodes_after()) copied into ret_nodes (room for
 * max); *ret_n the count copied, *ret_total the nodes registered,
 * *ret_more 1 when nodes follow the last one copied. Any thread.
 */
void cluster_nodes_page(cluster *c, const char *after, size_t max,
                        struct cluster_node *ret_nodes, size_t *ret_n,
                        size_t *ret_total, int *ret_more);

/* Delete this node's claim key for id, if it still is ours (no event).
 * Loop thread. */
int cluster_release(cluster *c, const char *id);

/* This process's writer prefix ("node/pid/nonce"); borrowed. */
const char *cluster_writer(const cluster *c);

/* What status shows; refreshed about once a second by a monitor thread. */
struct cluster_status {
    char endpoints[1024];
    char node_id[CLUSTER_MAX_NODE_ID + 1];
    int connected; /* the last etcd call or watch state succeeded */
    char last_error[256];
    int64_t lease_id; /* 0: none held now */
    size_t n_members;
    struct etcd_member_status members[ETCD_MAX_ENDPOINTS];
    size_t n_nodes; /* registered (cluster_nodes_page() lists them) */
    /* Why the registry could not be read last time ("" when it was), e.g.
     * more than CLUSTER_MAX_NODES registered; the nodes are then the last
     * read that worked. */
    char nodes_error[256];
    int64_t watch_revision; /* last revision the watch delivered */
    uint64_t resyncs;
    uint64_t boot_retries; /* failed boot/resync attempts, each backed off */
};

/* Copy the current status into *ret (a large struct: heap-allocate it).
 * Any thread. */
void cluster_get_status(cluster *c, struct cluster_status *ret);

#endif /* DETD_CLUSTER_H */
