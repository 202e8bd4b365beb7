/*
 * admin: the Admin and Health methods that read or reset the daemon's
 * state (Status, ListDecisions, Verify, Reset, Health; ListObservations
 * is ops/obslist.c),
 * on the loop thread, and the verify --cluster gatherings it owns.
 */
#ifndef DETD_ADMIN_H
#define DETD_ADMIN_H

#include "app/daemon.h"
#include "cluster/cluster.h"

/* the Admin and Health methods (loop thread). Each consumes the
 * event: it answers the call and frees the request. */
void admin_status(struct daemon *d, struct rpc_event *ev);
void admin_list(struct daemon *d, struct rpc_event *ev);
void admin_verify(struct daemon *d, struct rpc_event *ev);
void admin_reset(struct daemon *d, struct rpc_event *ev);
void admin_health(struct daemon *d, struct rpc_event *ev);

/* verify --cluster. A peer's observations (or why not) arrived,
 * or all did (CLUSTER_EV_PEER / _PEERS_DONE); drain fails those pending. */
void admin_verify_peer(struct daemon *d, const struct cluster_event *ev);
void admin_verify_drain(struct daemon *d);

/* The gatherings' table: *ret owned by the caller (admin_verifies_free());
 * returns 0 or DETD_ENOMEM. */
int admin_verifies_new(struct admin_verifies **ret);
void admin_verifies_free(struct admin_verifies *v);

#endif /* DETD_ADMIN_H */
