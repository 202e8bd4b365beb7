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

/*
 * Read the nodes registered under ns_prefix ("/detd/v1/<ns>/") into nodes
 * (room for CLUSTER_MAX_NODES; more are left out) and their count into
 * *ret_n. 0 or a DETD_E* error.
 */
int cluster_nodes_read(etcd_client *e, const char *ns_prefix,
                       struct cluster_node *nodes, size_t *ret_n);

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
 * none or etcd could not be asked (the file stays for the next attempt).
 */
int64_t cluster_lease_file_revoke(etcd_client *e, const char *path,
                                  int *ret_revoked);

#endif
