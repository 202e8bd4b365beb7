/*
 * cluster_peers: the etcd backend's calls about the other nodes: the
 * verify --cluster fan-out (every node's pages) and the status monitor
 * (endpoint health, the registered nodes). See cluster_int.h.
 */
#define _GNU_SOURCE
#include "cluster/cluster_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "grpc_unary.h"

/* ---- verify --cluster ---- */

struct page_arg {
    cluster *c;
    uint64_t cookie;
};

/* A cluster_page_cb: one PEER event (arg: the fan-out's page_arg). */
static void post_peer(const char *node, int err, const void *v, size_t n,
                      void *arg) {
    struct page_arg *pa = arg;
    struct cev *e = calloc(1, sizeof(*e));
    if (e == NULL)
        return;
    e->value = malloc(n + 1);
    if (e->value == NULL) {
        free(e);
        return;
    }
    if (n > 0)
        memcpy(e->value, v, n);
    e->value[n] = '\0';
    snprintf(e->node, sizeof(e->node), "%s", node);
    e->ev.kind = CLUSTER_EV_PEER;
    e->ev.err = err;
    e->ev.value_len = n;
    e->ev.cookie = pa->cookie;
    cluster_deliver(pa->c, e);
}

void cluster_do_fanout(cluster *c, struct job *j) {
    struct cluster_node *nodes = calloc(CLUSTER_MAX_NODES, sizeof(*nodes));
    size_t n = 0;
    /* The registry as etcd has it now: the monitor's copy may predate
     * nodes that registered since. Without etcd, fall back to that copy. */
    if (nodes != NULL &&
        cluster_nodes_read(c->etcd, c->ns_prefix, nodes, &n) != 0) {
        pthread_mutex_lock(&c->mu);
        n = c->n_nodes;
        memcpy(nodes, c->nodes, n * sizeof(*nodes));
        pthread_mutex_unlock(&c->mu);
    }
    struct grpc_unary_tls tls = {c->peer_ca, c->peer_cert, c->peer_key};
    int use_tls = c->peer_ca != NULL || c->peer_cert != NULL;
    struct page_arg pa = {c, j->cookie};
    for (size_t i = 0; i < n; i++)
        if (strcmp(nodes[i].node_id, c->node_id) != 0)
            cluster_node_call(&nodes[i], j->method, j->value, j->value_len,
                              use_tls ? &tls : NULL, j->deadline_ms, j->pager,
                              post_peer, &pa);
    free(nodes);
    cluster_post(c, CLUSTER_EV_PEERS_DONE, "", 0, 0, NULL, 0, 0, j->cookie);
}

void *cluster_monitor_main(void *arg) {
    cluster *c = arg;
    struct cluster_node *nodes = calloc(CLUSTER_MAX_NODES, sizeof(*nodes));
    struct etcd_member_status *ms = calloc(ETCD_MAX_ENDPOINTS, sizeof(*ms));
    if (nodes == NULL || ms == NULL)
        goto out;
    while (!cluster_stopping(c)) {
        size_t nm = 0, nn = 0;
        etcd_status(c->etcd, ms, ETCD_MAX_ENDPOINTS, &nm);
        int64_t now = clock_mono_ms();
        pthread_mutex_lock(&c->mu);
        int due = c->nodes_dirty || c->nodes_read_ms == 0 ||
                  now - c->nodes_read_ms >= CLUSTER_NODES_REFRESH_MS;
        c->nodes_dirty = 0;
        pthread_mutex_unlock(&c->mu);
        int err =
            due ? cluster_nodes_read(c->etcd, c->ns_prefix, nodes, &nn) : 1;
        pthread_mutex_lock(&c->mu);
        memcpy(c->members, ms, nm * sizeof(*ms));
        c->n_members = nm;
        if (err == 0) {
            memcpy(c->nodes, nodes, nn * sizeof(*nodes));
            c->n_nodes = nn;
            c->nodes_read_ms = now;
        } else if (due) {
            c->nodes_dirty = 1; /* read again on the next round */
        }
        if (!c->stopping)
            cluster_timed_wait_locked(c, CLUSTER_MONITOR_MS);
        pthread_mutex_unlock(&c->mu);
    }
out:
    free(nodes);
    free(ms);
    return NULL;
}
