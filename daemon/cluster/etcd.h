/*
 * etcd adapter: the only module that speaks etcd's v3 gRPC API.
 *
 * A client is a gRPC channel to a set of etcd members plus the settings
 * every call shares (deadlines, retry budget, credentials). Calls are
 * blocking and may be made from any thread at the same time: each call
 * owns its own completion queue. Watches and lease keep-alives run on
 * their own threads and report through callbacks.
 *
 * Deadlines and retries. Every unary call makes attempts of at most
 * attempt_timeout_ms each, retrying UNAVAILABLE and DEADLINE_EXCEEDED
 * (member down, leader lost, no quorum) with a jittered exponential
 * backoff, until total_timeout_ms have passed since the call began. A call
 * therefore returns within total_timeout_ms (with auth, plus at most one
 * attempt spent waiting for another thread's Authenticate). When the
 * budget is spent it returns the last attempt's error: DETD_ETIMEDOUT or
 * DETD_EUNAVAILABLE. Other errors are not retried.
 *
 * Ambiguous writes. An attempt that timed out may still have been applied
 * by etcd. Writes are therefore retried only where a repeat is harmless:
 * etcd_put_if_absent() is a compare-and-create whose repeat after a hidden
 * success reports "lost" with our own value as the existing one. Callers
 * that need to tell "I won on an earlier attempt" from "someone else won"
 * embed a writer id (node id + a per-process nonce) in the value: the
 * result's same_value flag (or comparing the writer id in kv.value) then
 * settles it. This is how decisions are committed: first writer wins, and
 * a retried writer recognises its own win.
 *
 * Keys are NUL-terminated strings of at most ETCD_MAX_KEY bytes; values are
 * byte strings of at most ETCD_MAX_VALUE bytes. Sizes read from the network
 * are capped the same way, and responses at ETCD_MAX_MESSAGE bytes.
 *
 * Errors: 0 or a negative DETD_E* code. DETD_EINVAL bad argument;
 * DETD_ELIMIT a size cap; DETD_ETIMEDOUT / DETD_EUNAVAILABLE etcd not
 * reachable or without quorum within the budget; DETD_EDENIED wrong
 * credentials or permission; DETD_ENOTFOUND no such key or lease;
 * DETD_ESTALE the requested revision was compacted; DETD_EPROTO a
 * malformed response; DETD_ENOMEM.
 *
 * The adapter never logs; gRPC core itself may write to stderr (the
 * daemon can silence it with GRPC_VERBOSITY or gpr_set_log_verbosity()).
 * Clients must not be used across fork().
 */
#ifndef DETD_ETCD_H
#define DETD_ETCD_H

#include <stddef.h>
#include <stdint.h>

#define ETCD_MAX_ENDPOINTS 16
#define ETCD_MAX_KEY 4096
#define ETCD_MAX_VALUE (2 * 1024 * 1024)
#define ETCD_MAX_MESSAGE (16 * 1024 * 1024)
/* Most events accepted in one watch response, most keys in a range page. */
#define ETCD_MAX_EVENTS 100000
#define ETCD_MAX_PAGE 10000

typedef struct etcd_client etcd_client;
typedef struct etcd_watch etcd_watch;
typedef struct etcd_keepalive etcd_keepalive;

/*
 * Client settings. Initialise with etcd_options_init(), then set fields.
 * Strings are borrowed for the duration of etcd_open() only.
 */
struct etcd_options {
    /* "http://127.0.0.1:2379,http://127.0.0.1:22379": comma-separated
     * URLs, all http:// or all https://. Hosts are IPv4 or bracketed IPv6
     * literals or "localhost"; a single endpoint may name any host. */
    const char *endpoints;
    /* TLS (https:// endpoints): PEM file paths. ca_file NULL uses the
     * system roots; cert_file and key_file are both set or both NULL. */
    const char *ca_file;
    const char *cert_file;
    const char *key_file;
    /* The name checked against each member's certificate. Default: the
     * member's own address with one endpoint, the first endpoint's host
     * with several (the channel has one name), so with several endpoints
     * every certificate must be valid for it. */
    const char *tls_server_name;
    /* etcd authentication: both set or both NULL. */
    const char *user;
    const char *password;
    int attempt_timeout_ms; /* per attempt; default 2000 */
    int total_timeout_ms;   /* per call including retries; default 10000 */
    int range_page;         /* keys per range page; default 500 */
    /* "round_robin" (default: spreads calls, fails over at once) or
     * "pick_first". */
    const char *lb_policy;
};

/* Fill *opt with the defaults above (endpoints NULL). */
void etcd_options_init(struct etcd_options *opt);

/*
 * Create a client. Does not contact etcd: the first call connects (and
 * authenticates when a user is set), so a daemon can start while etcd is
 * down. Returns DETD_EINVAL for a malformed endpoint list or option,
 * -errno when a TLS file cannot be read. On success *ret is owned by the
 * caller and released with etcd_close().
 */
int etcd_open(const struct etcd_options *opt, etcd_client **ret);

/*
 * Release a client. Every watch and keep-alive made from it must have been
 * stopped, and no call may be in flight. etcd_close(NULL) is a no-op.
 */
void etcd_close(etcd_client *c);

/* A key-value pair. Every pointer is owned by the struct. */
struct etcd_kv {
    char *key; /* NUL-terminated */
    size_t key_len;
    unsigned char *value; /* value_len bytes plus a NUL, never NULL */
    size_t value_len;
    int64_t create_revision;
    int64_t mod_revision;
    int64_t version;
    int64_t lease;
};

/* Free what *kv owns and zero it. Safe on a zeroed struct. */
void etcd_kv_clear(struct etcd_kv *kv);

struct etcd_put_result {
    int won;           /* 1: this call created the key */
    int same_value;    /* 1: the stored value is byte-equal to ours */
    struct etcd_kv kv; /* the key as stored: ours if won, else the winner's */
    int64_t revision;  /* store revision of the response header */
};

/*
 * A deadline (CLOCK_MONOTONIC ms; 0: none) for every call this thread
 * makes from now on: a call and its retries end by it, even when the
 * client's own total timeout is longer (a job with a deadline must not
 * overrun it inside one call). Thread-local.
 */
void etcd_thread_deadline(int64_t deadline_ms);

/*
 * With on set, calls start no new attempt (those in flight end at their
 * attempt deadline) and fail DETD_ECANCELLED: a stop does not wait for
 * retries against an unreachable etcd. Off again for what must still be
 * tried (the stop's lease revoke). Any thread.
 */
void etcd_set_cancelled(etcd_client *c, int on);

/*
 * First writer wins: create key with value (attached to lease, 0 for none)
 * only if the key does not exist, in one Txn (etcd_create_batch() of one
 * op: compare create_revision == 0, then put; else range). On success fills
 * *ret (release with etcd_put_result_clear()): won == 1 if this call's Txn
 * created the key; otherwise kv holds the existing key. Because the call
 * retries, won == 0 with same_value == 1 means an earlier attempt of this call
 * (or a writer with identical bytes) created it: embed a writer id in the
 * value.
 */
int etcd_put_if_absent(etcd_client *c, const char *key, const void *value,
                       size_t value_len, int64_t lease,
                       struct etcd_put_result *ret);

/* Free what *r owns and zero it. */
void etcd_put_result_clear(struct etcd_put_result *r);

/*
 * Many etcd_put_if_absent() in one Txn (one Raft proposal), each key on its
 * own: one inner Txn per key inside an outer Txn without compares (nested
 * transactions, etcd 3.3 and later). For each op, key is created with
 * value (under lease, 0 for none) only if it is absent and, when guard is
 * set, guard is absent too; when drop is set, drop is deleted in the same
 * Txn, won or not, if etcd holds it under drop_lease (not 0). Keys of all
 * ops must be distinct (etcd refuses a Txn writing one key twice). At most
 * ETCD_BATCH_MAX ops (etcd's --max-txn-ops, default 128, also bounds what
 * a nested Txn holds: see etcd_batch.c); a server with a lower limit
 * refuses the Txn with DETD_EINVAL: split the batch.
 * Fills each op's results: won (this call created key; same_value 1 and
 * kv ours), or else kv (key as stored; key NULL when absent) and guard_kv
 * (guard as stored when guard is set; key NULL when absent): at least one
 * of them is present. same_value as in etcd_put_if_absent() (the call
 * retries: embed a writer id). Release with etcd_create_clear(). Inputs
 * are borrowed for the call. *ret_revision (may be NULL) gets the store
 * revision.
 */
#define ETCD_BATCH_MAX 64
struct etcd_create {
    const char *key;
    const void *value;
    size_t value_len;
    int64_t lease;
    const char *guard; /* may be NULL */
    const char *drop;  /* may be NULL */
    int64_t drop_lease;
    int won;
    int same_value;
    struct etcd_kv kv;
    struct etcd_kv guard_kv;
};
int etcd_create_batch(etcd_client *c, struct etcd_create *ops, size_t n,
                      int64_t *ret_revision);

/* Free the results of *op and zero them (inputs kept). */
void etcd_create_clear(struct etcd_create *op);

/*
 * Read n keys (at most ETCD_GET_MANY_MAX) in one request, at one
 * revision: a Txn of reads only, which etcd serves as a linearizable read
 * (no Raft proposal). ret[i] gets keys[i] (key NULL when absent); clear
 * each with etcd_kv_clear().
 */
#define ETCD_GET_MANY_MAX 64
int etcd_get_many(etcd_client *c, const char *const *keys, size_t n,
                  struct etcd_kv *ret);

/*
 * Unconditional put (lease 0 for none). *ret_revision (may be NULL) gets
 * the revision of the write.
 */
int etcd_put(etcd_client *c, const char *key, const void *value,
             size_t value_len, int64_t lease, int64_t *ret_revision);

/*
 * Linearizable read of one key. DETD_ENOTFOUND if absent. On success
 * *ret_kv is owned by the caller (etcd_kv_clear()) and *ret_revision (may
 * be NULL) gets the store revision the read saw.
 */
int etcd_get(etcd_client *c, const char *key, struct etcd_kv *ret_kv,
             int64_t *ret_revision);

/*
 * Called once per key by etcd_range_prefix(), in key order, on the calling
 * thread. kv is borrowed for the duration of the call. Return 0 to go on;
 * anything else stops the range and is returned by etcd_range_prefix().
 */
typedef int (*etcd_kv_cb)(const struct etcd_kv *kv, void *arg);

/*
 * Read every key starting with prefix as one consistent snapshot: pages of
 * range_page keys, all read at the revision of the first page (or at
 * revision, if > 0). *ret_revision (may be NULL) gets that revision; a
 * watch from it + 1 then misses nothing. If the snapshot revision is
 * compacted between pages, returns DETD_ESTALE after cb has seen some keys:
 * start over (upserts make the repeat harmless).
 */
int etcd_range_prefix(etcd_client *c, const char *prefix, int64_t revision,
                      etcd_kv_cb cb, void *arg, int64_t *ret_revision);

/*
 * Delete one key (prefix == 0) or every key starting with key (prefix ==
 * 1). *ret_deleted (may be NULL) gets the number of keys deleted,
 * *ret_revision (may be NULL) the store revision after the delete.
 */
int etcd_delete(etcd_client *c, const char *key, int prefix,
                int64_t *ret_deleted, int64_t *ret_revision);

/*
 * Compact the store's history up to revision, waiting until it is
 * physically applied. Watches from an older revision then end with
 * ETCD_EVENT_COMPACTED. DETD_ESTALE if revision is already compacted
 * (also when an earlier attempt of this call did it).
 */
int etcd_compact(etcd_client *c, int64_t revision);

/*
 * Grant a lease of ttl_s seconds. *ret_id gets its id, *ret_ttl (may be
 * NULL) the TTL etcd chose. A lease granted by an attempt whose answer was
 * lost is simply left to expire.
 */
int etcd_lease_grant(etcd_client *c, int64_t ttl_s, int64_t *ret_id,
                     int64_t *ret_ttl);

/*
 * Revoke a lease, deleting the keys attached to it. DETD_ENOTFOUND if it
 * does not exist (expired, or revoked by an earlier attempt).
 */
int etcd_lease_revoke(etcd_client *c, int64_t id);

/*
 * Remaining TTL of a lease in seconds. DETD_ENOTFOUND if it has expired or
 * never existed.
 */
int etcd_lease_ttl(etcd_client *c, int64_t id, int64_t *ret_ttl);

/*
 * Called on the keep-alive thread when a lease is no longer kept: err is
 * DETD_ENOTFOUND when etcd says it is gone (expired or revoked), or
 * DETD_ETIMEDOUT when no refresh succeeded within its TTL (etcd may expire
 * it at any moment: treat claims under it as lost). The lease has been
 * removed from the set. The callback may call etcd_keepalive_add/_remove
 * and blocking client calls, but not etcd_keepalive_stop().
 */
typedef void (*etcd_lease_lost_cb)(int64_t id, int err, void *arg);

/*
 * Start a keep-alive thread that refreshes a set of leases over one
 * LeaseKeepAlive stream, each every third of its TTL, reconnecting when
 * the stream breaks. cb (may be NULL) and arg are kept until
 * etcd_keepalive_stop(). On success *ret is owned by the caller.
 */
int etcd_keepalive_start(etcd_client *c, etcd_lease_lost_cb cb, void *arg,
                         etcd_keepalive **ret);

/*
 * Add a lease with its TTL in seconds (as granted); the first refresh is
 * sent at once. Any thread. DETD_EEXIST if already kept, DETD_ELIMIT past
 * ETCD_MAX_LEASES leases.
 */
#define ETCD_MAX_LEASES 4096
int etcd_keepalive_add(etcd_keepalive *ka, int64_t id, int64_t ttl_s);

/*
 * Stop refreshing a lease; it is not revoked and expires after its TTL.
 * No lost callback is made for it afterwards. Any thread. DETD_ENOTFOUND
 * if not kept.
 */
int etcd_keepalive_remove(etcd_keepalive *ka, int64_t id);

/*
 * Stop the thread and free ka; no callback runs after it returns. Leases
 * are not revoked. Not from the lost callback. NULL is a no-op.
 */
void etcd_keepalive_stop(etcd_keepalive *ka);

enum etcd_event_type {
    ETCD_EVENT_PUT = 0,
    ETCD_EVENT_DELETE,
    /* The watch was (re)created on a member; revision is the store
     * revision at that moment. */
    ETCD_EVENT_CONNECTED,
    /* The stream broke (err says why; revision is the last revision
     * delivered). The watch reconnects by itself and resumes after it;
     * reported once per break, not per failed reconnect. */
    ETCD_EVENT_DISCONNECTED,
    /* History from the watch's position was compacted: events were lost.
     * compact_revision is the oldest revision still available. Final: no
     * event follows. Resync with etcd_range_prefix() and start a new
     * watch from its revision + 1. */
    ETCD_EVENT_COMPACTED,
    /* An event at revision was dropped (err: DETD_ELIMIT for a key or
     * value over the caps); the watch goes on. */
    ETCD_EVENT_ERROR,
};

/*
 * A watch event. Borrowed: valid only during the callback.
 */
struct etcd_event {
    enum etcd_event_type type;
    const char *key; /* PUT, DELETE: NUL-terminated; else NULL */
    size_t key_len;
    const unsigned char *value; /* PUT: NUL-terminated; else NULL */
    size_t value_len;
    /* PUT, DELETE: the event's revision (the key's mod revision; for a
     * DELETE the revision of the deletion). CONNECTED: store revision. */
    int64_t revision;
    int64_t create_revision;  /* PUT */
    int64_t version;          /* PUT */
    int64_t lease;            /* PUT */
    int64_t compact_revision; /* COMPACTED */
    int err;                  /* DISCONNECTED, ERROR */
};

/*
 * Called on the watch's own thread, one event at a time, PUT and DELETE
 * events in revision order, each revision once. It may make blocking
 * client calls (delivery waits meanwhile) but must not call
 * etcd_watch_stop() on its own watch.
 */
typedef void (*etcd_watch_cb)(const struct etcd_event *ev, void *arg);

/*
 * Watch every key starting with prefix, from start_revision (inclusive; 0
 * for "from now"), on a new thread. The stream asks etcd to end it when
 * the member loses its leader, so a watch never hangs on a cut-off member.
 * cb and arg are kept until etcd_watch_stop(). On success *ret is owned by
 * the caller.
 */
int etcd_watch_start(etcd_client *c, const char *prefix, int64_t start_revision,
                     etcd_watch_cb cb, void *arg, etcd_watch **ret);

/*
 * etcd_watch_start() over a range of keys: from prefix (inclusive) up to
 * the last key starting with last_prefix (which must not sort before
 * prefix), e.g. "/ns/decisions/" to "/ns/nodes/" watches both and
 * whatever sorts between them, but not "/ns/claims/".
 */
int etcd_watch_start_range(etcd_client *c, const char *prefix,
                           const char *last_prefix, int64_t start_revision,
                           etcd_watch_cb cb, void *arg, etcd_watch **ret);

/*
 * Stop a watch: cancels the stream (closing the client side would not end
 * it), joins the thread and frees w. No callback runs after it returns.
 * Not from w's callback. NULL is a no-op.
 */
void etcd_watch_stop(etcd_watch *w);

/* One member as seen by Maintenance.Status. */
struct etcd_member_status {
    char endpoint[128]; /* the URL as configured */
    int err;            /* 0, or why this member did not answer */
    uint64_t member_id;
    uint64_t leader_id; /* the leader this member believes in; 0: none */
    uint64_t raft_term;
    uint64_t raft_index;
    uint64_t raft_applied_index;
    int64_t db_size;
    int64_t db_size_in_use;
    int is_learner;
    char version[32];
};

/*
 * Ask every configured endpoint for its status (one attempt each, of
 * attempt_timeout_ms, no retries), for `detctl status`. Fills up to cap
 * entries of ret, one per endpoint in configuration order, each with its
 * own err, and sets *ret_n. Returns 0 even when members are down.
 */
int etcd_status(etcd_client *c, struct etcd_member_status *ret, size_t cap,
                size_t *ret_n);

#endif /* DETD_ETCD_H */
