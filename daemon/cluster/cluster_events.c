/*
 * cluster_events: the state the etcd backend's threads share: the stop
 * flag, the condition wait, and the event queue to the loop thread (see
 * cluster_int.h). Uses nothing of cluster.c or cluster_peers.c.
 */
#define _GNU_SOURCE
#include "cluster/cluster_int.h"
#include "clock.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Wait on c->cv for at most ms (c->mu held). */
void cluster_timed_wait_locked(cluster *c, int64_t ms) {
    struct timespec ts = clock_after(ms);
    pthread_cond_timedwait(&c->cv, &c->mu, &ts);
}

int cluster_stopping(cluster *c) {
    pthread_mutex_lock(&c->mu);
    int s = c->stopping;
    pthread_mutex_unlock(&c->mu);
    return s;
}

/* Queue an event for the loop thread and wake it. */
void cluster_deliver(cluster *c, struct cev *e) {
    pthread_mutex_lock(&c->mu);
    if (c->evs_tail != NULL)
        c->evs_tail->next = e;
    else
        c->evs = e;
    c->evs_tail = e;
    pthread_mutex_unlock(&c->mu);
    uv_async_send(&c->async);
}

void cluster_post(cluster *c, cluster_event_kind kind, const char *id, int err,
                  int won, const void *value, size_t value_len,
                  int64_t revision, uint64_t cookie) {
    struct cev *e = calloc(1, sizeof(*e));
    if (e == NULL)
        return;
    if (value != NULL) {
        e->value = malloc(value_len + 1);
        if (e->value == NULL) {
            free(e);
            return;
        }
        memcpy(e->value, value, value_len);
        e->value[value_len] = '\0';
    }
    snprintf(e->id, sizeof(e->id), "%s", id != NULL ? id : "");
    e->ev.kind = kind;
    e->ev.err = err;
    e->ev.won = won;
    e->ev.value_len = value_len;
    e->ev.revision = revision;
    e->ev.cookie = cookie;
    cluster_deliver(c, e);
}
