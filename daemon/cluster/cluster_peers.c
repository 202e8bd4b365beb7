/*
 * cluster_peers: the etcd backend's calls about the other nodes: the
 * verify --cluster fan-out (every node's pages) and the status monitor
 * (endpoint health, the registered nodes). See cluster_int.h.
 */
#define _GNU_SOURCE
#include "cluster/cluster_int.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "detd/error.h"
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

/* The registry as etcd has it now (the monitor's copy may predate nodes
 * that registered since); without etcd, that copy. *ret_nodes: malloc'd
 * or NULL. 0, or the error of a registry past CLUSTER_MAX_NODES with its
 * text in why. */
static int fanout_nodes(cluster *c, struct cluster_node **ret_nodes,
                        size_t *ret_n, char *why, size_t why_len) {
    int err = cluster_nodes_read(c->etcd, c->ns_prefix, CLUSTER_MAX_NODES,
                                 ret_nodes, ret_n);
    if (err == 0)
        return 0;
    if (err == DETD_ELIMIT) {
        snprintf(why, why_len,
                 "more than %d nodes registered under %snodes/ (the "
                 "registry's cap): no node was asked",
                 CLUSTER_MAX_NODES, c->ns_prefix);
        return err;
    }
    pthread_mutex_lock(&c->mu);
    size_t n = c->n_nodes;
    struct cluster_node *v = malloc((n > 0 ? n : 1) * sizeof(*v));
    if (v != NULL && n > 0)
        memcpy(v, c->nodes, n * sizeof(*v));
    pthread_mutex_unlock(&c->mu);
    if (v == NULL) {
        snprintf(why, why_len, "out of memory reading the registry");
        return DETD_ENOMEM;
    }
    *ret_nodes = v;
    *ret_n = n;
    return 0;
}

/* One fan-out: its nodes, handed to CLUSTER_FANOUT_CONCURRENCY threads. */
struct fan {
    cluster *c;
    const struct job *j;
    const struct cluster_node *nodes;
    size_t n;
    atomic_size_t next; /* the next node to ask */
    const struct grpc_unary_tls *tls;
    struct page_arg pa;
};

static void *fan_main(void *arg) {
    struct fan *f = arg;
    for (;;) {
        size_t i = atomic_fetch_add(&f->next, 1);
        if (i >= f->n)
            break;
        const struct cluster_node *nd = &f->nodes[i];
        if (strcmp(nd->node_id, f->c->node_id) == 0)
            continue;
        if (clock_mono_ms() >= f->j->deadline_ms || cluster_stopping(f->c)) {
            const char *why = "not asked: the deadline passed before its turn";
            post_peer(nd->node_id, DETD_ETIMEDOUT, why, strlen(why), &f->pa);
            continue;
        }
        cluster_node_call(nd, f->j->method, f->j->value, f->j->value_len,
                          f->tls, f->j->node_timeout_ms, f->j->deadline_ms,
                          f->j->pager, post_peer, &f->pa);
    }
    return NULL;
}

void cluster_do_fanout(cluster *c, struct job *j) {
    struct cluster_node *nodes = NULL;
    size_t n = 0;
    char why[256];
    struct page_arg pa = {c, j->cookie};
    int err = fanout_nodes(c, &nodes, &n, why, sizeof(why));
    if (err != 0) {
        post_peer("", err, why, strlen(why), &pa);
        goto done;
    }
    struct grpc_unary_tls tls = {c->peer_ca, c->peer_cert, c->peer_key};
    int use_tls = c->peer_ca != NULL || c->peer_cert != NULL;
    struct fan f = {.c = c,
                    .j = j,
                    .nodes = nodes,
                    .n = n,
                    .tls = use_tls ? &tls : NULL,
                    .pa = pa};
    atomic_init(&f.next, 0);
    pthread_t th[CLUSTER_FANOUT_CONCURRENCY - 1];
    size_t nth = 0;
    /* This worker is one of the askers; the others are threads of their
     * own (fewer when the nodes are fewer, or a thread cannot start). */
    while (nth < CLUSTER_FANOUT_CONCURRENCY - 1 && nth + 1 < n &&
           pthread_create(&th[nth], NULL, fan_main, &f) == 0)
        nth++;
    fan_main(&f);
    for (size_t i = 0; i < nth; i++)
        pthread_join(th[i], NULL);
done:
    free(nodes);
    cluster_post(c, CLUSTER_EV_PEERS_DONE, "", 0, 0, NULL, 0, 0, j->cookie);
}

void *cluster_monitor_main(void *arg) {
    cluster *c = arg;
    struct etcd_member_status *ms = calloc(ETCD_MAX_ENDPOINTS, sizeof(*ms));
    if (ms == NULL)
        return NULL;
    while (!cluster_stopping(c)) {
        size_t nm = 0, nn = 0;
        etcd_status(c->etcd, ms, ETCD_MAX_ENDPOINTS, &nm);
        int64_t now = clock_mono_ms();
        pthread_mutex_lock(&c->mu);
        int due = c->nodes_dirty || c->nodes_read_ms == 0 ||
                  now - c->nodes_read_ms >= CLUSTER_NODES_REFRESH_MS;
        c->nodes_dirty = 0;
        pthread_mutex_unlock(&c->mu);
        struct cluster_node *nodes = NULL;
        int err = due ? cluster_nodes_read(c->etcd, c->ns_prefix,
                                           CLUSTER_MAX_NODES, &nodes, &nn)
                      : 1;
        pthread_mutex_lock(&c->mu);
        memcpy(c->members, ms, nm * sizeof(*ms));
        c->n_members = nm;
        if (err == 0) {
            free(c->nodes);
            c->nodes = nodes; /* the old copy goes, the new one stays */
            nodes = NULL;
            c->n_nodes = nn;
            c->nodes_read_ms = now;
            c->nodes_error[0] = '\0';
        } else if (err == DETD_ELIMIT) {
            /* Not a passing fault: read again at the usual refresh, and
             * say why the list is the last one that could be read. */
            c->nodes_read_ms = now;
            snprintf(c->nodes_error, sizeof(c->nodes_error),
                     "more than %d nodes registered under %snodes/ (the "
                     "registry's cap): the list is the last read within it",
                     CLUSTER_MAX_NODES, c->ns_prefix);
        } else if (due) {
            c->nodes_dirty = 1; /* read again on the next round */
        }
        if (!c->stopping)
            cluster_timed_wait_locked(c, CLUSTER_MONITOR_MS);
        pthread_mutex_unlock(&c->mu);
        free(nodes);
    }
    free(ms);
    return NULL;
}

/* See cluster.h. */
void cluster_nodes_page(cluster *c, const char *after, size_t max,
                        struct cluster_node *ret_nodes, size_t *ret_n,
                        size_t *ret_total, int *ret_more) {
    pthread_mutex_lock(&c->mu);
    size_t i = cluster_nodes_after(c->nodes, c->n_nodes, after);
    size_t k = c->n_nodes - i < max ? c->n_nodes - i : max;
    if (k > 0)
        memcpy(ret_nodes, &c->nodes[i], k * sizeof(*ret_nodes));
    *ret_n = k;
    *ret_total = c->n_nodes;
    *ret_more = i + k < c->n_nodes;
    pthread_mutex_unlock(&c->mu);
}
