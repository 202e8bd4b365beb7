/*
 * cluster_nodes: what the etcd backend keeps about nodes outside the
 * decision path: the registered nodes read back from etcd, and the file
 * in which a node keeps its own lease id so that its next run can revoke
 * a lease this run could not (cluster.c, do_boot).
 */
#ifndef DETD_CLUSTER_NODES_H
#define DETD_CLUSTER_NODES_H

#include <stddef.h>
#include <stdint.h>

#include "cluster/cluster.h"
#include "cluster/cluster_codec.h"
#include "cluster/etcd.h"
#include "grpc_unary.h"

/*
 * Read the nodes registered under ns_prefix ("/detd/v1/<ns>/"), in pages
 * of the etcd client's range page, into a malloc'd array sorted by node id
 * (*ret_nodes, caller frees; NULL when none) and their count into *ret_n.
 * The array grows with the registry: at most max nodes, beyond which the
 * read fails with DETD_ELIMIT. 0 or a DETD_E* error (*ret_nodes untouched).
 */
int cluster_nodes_read(etcd_client *e, const char *ns_prefix, size_t max,
                       struct cluster_node **ret_nodes, size_t *ret_n);

/*
 * The paging cursor of the registry: the index in v (n nodes sorted by
 * node id, as cluster_nodes_read() leaves them) of the first node whose id
 * sorts after `after` (strcmp order, etcd's key order); 0 for NULL or "".
 * A page that ends with node id X goes on from cluster_nodes_after(X), so
 * a node present while a listing runs is listed exactly once and in order,
 * whatever joins or leaves between pages.
 */
size_t cluster_nodes_after(const struct cluster_node *v, size_t n,
                           const char *after);

/*
 * The end of one page of node names (verify --cluster's lists): the names
 * are a[0..na) followed by b[0..nb); the page starts at index start and
 * takes names while it holds fewer than max_items and their bytes (string
 * lengths) stay within max_bytes, but always at least one when one is
 * left. Returns the index after the page's last name (start when start is
 * at or past the end). Pure.
 */
size_t cluster_names_page_end(char *const *a, size_t na, char *const *b,
                              size_t nb, size_t start, size_t max_items,
                              size_t max_bytes);

/* One answer of cluster_node_call(): a page (err 0, n bytes of v) or the
 * error that ended the node's pages (err, v its text). */
typedef void (*cluster_page_cb)(const char *node, int err, const void *v,
                                size_t n, void *arg);

/*
 * Call method (a full path) on node nd through its --listen address with
 * req_len bytes of req (tls NULL: plaintext), each call (page) bounded by
 * call_ms and all of them by deadline_ms (clock_mono_ms clock; past it:
 * DETD_ETIMEDOUT); with a pager, ask
 * again for the next page while the pager says there is one, at most
 * CLUSTER_MAX_PAGES. cb gets every page, in order, and the error that ended
 * them, if any. Blocking (cluster worker).
 */
void cluster_node_call(const struct cluster_node *nd, const char *method,
                       const void *req, size_t req_len,
                       const struct grpc_unary_tls *tls, int64_t call_ms,
                       int64_t deadline_ms, cluster_pager pager,
                       cluster_page_cb cb, void *arg);

/* The lease id stored in path, or 0 when path is NULL, missing or does not
 * hold one decimal id (32 bytes read at most). */
int64_t cluster_lease_file_read(const char *path);

/*
 * Store id in path (written to path.tmp, then renamed), or remove the
 * file when id is 0. NULL path: nothing. 0 or -errno; a failure only
 * means the next run cannot revoke this lease early.
 */
int cluster_lease_file_write(const char *path, int64_t id);

/*
 * The lease a previous run of this node left in path (it was killed
 * before it could revoke it; the caller's state-directory lock proves it
 * is over): revoke it, so that its claims and node key go now rather than
 * when it expires, and remove the file. Returns that lease's id once it is
 * gone (*ret_revoked 1: revoked now; 0: it had expired), 0 when there was
 * none or etcd could not be asked (the file stays for the next attempt;
 * *ret_err is then the revoke's error, else 0).
 */
int64_t cluster_lease_file_revoke(etcd_client *e, const char *path,
                                  int *ret_revoked, int *ret_err);

/*
 * Retry delay of the boot (lease grant, node registration, first resync):
 * exponential backoff with full jitter. Retry number attempt (0 for the
 * first retry) waits a uniform draw in [0, min(cap_ms, base_ms * 2^attempt)]
 * milliseconds, so daemons that all failed at the same moment (a start-up
 * storm, etcd coming up late) spread their next calls over the whole window
 * instead of arriving together again. *rng is a xorshift64 state, advanced
 * (0 is replaced by a fixed nonzero seed). base_ms >= 1, cap_ms >= base_ms.
 */
int64_t cluster_backoff_ms(unsigned attempt, int64_t base_ms, int64_t cap_ms,
                           uint64_t *rng);

/*
 * Rendezvous (highest-random-weight) hashing of decision key id over the
 * registered nodes v[0..n) (README, "Scale"): the rank of node `self` in
 * the order of the weights cluster_rendezvous_weight(node, id), 0 for the
 * key's owner. Nodes named `exclude` (NULL or "": none; a previous claim
 * holder after its claim went) are left out. Every node computes the same
 * order from the same registry, so one node per key claims at once and
 * the others defer. 0 also when self is not among v (a registry not read
 * yet, or a node that has not registered): such a node claims at once, as
 * before rendezvous existed. Pure.
 */
size_t cluster_rendezvous_rank(const struct cluster_node *v, size_t n,
                               const char *self, const char *id,
                               const char *exclude);

/* The weight of node for key id: a 64-bit hash of both (FNV-1a over
 * "node\0id", then a splitmix64 finaliser). Pure. */
uint64_t cluster_rendezvous_weight(const char *node, const char *id);

/*
 * How long a node of rendezvous rank `rank` defers its claim of a new key
 * after it first met it (or after the claim of a previous holder went):
 * 0 for the owner; defer_ms + min(rank - 1, slots) * step_ms for the
 * others, so that when the owner never claims, the next nodes in the
 * order claim one after the other (each reads the claim key before it
 * writes, so the first one's claim stops the rest) and none waits longer
 * than defer_ms + slots * step_ms. Pure.
 */
int64_t cluster_defer_ms(size_t rank, int64_t defer_ms, int64_t step_ms,
                         size_t slots);

/* 0 when id is a valid node id (1 to CLUSTER_MAX_NODE_ID characters, no
 * '/'); else DETD_EINVAL and, when ret_errmsg is not NULL, a message in
 * *ret_errmsg (free() it). */
int cluster_node_id_check(const char *id, char **ret_errmsg);

/* 64 random bits from /dev/urandom mixed with the clock and the pid (the
 * clock and pid alone when it cannot be read). */
uint64_t cluster_random_u64(void);

#endif
