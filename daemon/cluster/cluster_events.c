/*
 * cluster_events: the state the etcd backend's threads share: the stop
 * flag, the condition wait, and the event queue to the loop thread (see
 * cluster_int.h), and the job queue to the workers; and the helpers of
 * the workers' etcd calls (status notes, keys, the lease, claim values).
 * Uses nothing of cluster.c, cluster_peers.c, cluster_batch.c or
 * cluster_claimant.c.
 */
#define _GNU_SOURCE
#include "cluster/cluster_int.h"
#include "clock.h"
#include "detd/error.h"
#include "cluster/cluster_codec.h"

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

/* ---- the job queue (loop -> workers) ---- */

/* See cluster_int.h. */
void cluster_enqueue(cluster *c, struct job *j) {
    cluster_enqueue_list(c, j, j);
}

/* See cluster_int.h. */
void cluster_enqueue_list(cluster *c, struct job *first, struct job *last) {
    pthread_mutex_lock(&c->mu);
    if (c->jobs_tail != NULL)
        c->jobs_tail->next = first;
    else
        c->jobs = first;
    c->jobs_tail = last;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

/* See cluster_int.h. */
struct job *cluster_job_new(enum job_kind kind, const char *id, char *value,
                            size_t value_len, int64_t deadline_ms,
                            uint64_t cookie) {
    struct job *j = calloc(1, sizeof(*j));
    if (j == NULL) {
        free(value);
        return NULL;
    }
    j->kind = kind;
    snprintf(j->id, sizeof(j->id), "%s", id != NULL ? id : "");
    j->value = value;
    j->value_len = value_len;
    j->deadline_ms = deadline_ms;
    j->cookie = cookie;
    return j;
}

/* See cluster_int.h. */
int cluster_submit(cluster *c, enum job_kind kind, const char *id, char *value,
                   size_t value_len, int64_t deadline_ms, uint64_t cookie) {
    struct job *j =
        cluster_job_new(kind, id, value, value_len, deadline_ms, cookie);
    if (j == NULL)
        return DETD_ENOMEM;
    cluster_enqueue(c, j);
    return 0;
}

/* See cluster_int.h. */
int cluster_claim_job(cluster *c, const char *id, int recheck,
                      int64_t deadline_ms) {
    struct job *j = cluster_job_new(JOB_CLAIM, id, NULL, 0, deadline_ms, 0);
    if (j == NULL)
        return DETD_ENOMEM;
    j->recheck = recheck != 0;
    cluster_enqueue(c, j);
    return 0;
}

/* See cluster_int.h. */
int cluster_release_job(cluster *c, const char *id) {
    return cluster_submit(c, JOB_RELEASE, id, NULL, 0,
                          clock_mono_ms() + CLUSTER_RELEASE_MS, 0);
}

/* ---- the workers' helpers (see cluster_int.h) ---- */

int cluster_transient(int err) {
    return err == DETD_ETIMEDOUT || err == DETD_EUNAVAILABLE;
}

/* Sleep ms unless stopping; returns nonzero when stopping. */
int cluster_nap(cluster *c, int64_t ms) {
    pthread_mutex_lock(&c->mu);
    if (!c->stopping)
        cluster_timed_wait_locked(c, ms);
    int stop = c->stopping;
    pthread_mutex_unlock(&c->mu);
    return stop;
}

/* Record the outcome of an etcd call for status (and tell the loop when
 * the state flips). */
void cluster_note(cluster *c, int err, const char *what) {
    pthread_mutex_lock(&c->mu);
    int was = c->connected;
    if (err == 0 || !cluster_transient(err)) {
        c->connected = 1;
    } else {
        c->connected = 0;
        snprintf(c->last_error, sizeof(c->last_error), "%s: %s", what,
                 detd_strerror(err));
    }
    int conn = c->connected;
    int flip = was != conn;
    pthread_mutex_unlock(&c->mu);
    if (flip)
        cluster_post(c, CLUSTER_EV_STATE, "", conn ? 0 : err, 0, what,
                     strlen(what), 0, 0);
}

char *cluster_key_of(const cluster *c, const char *kind, const char *id) {
    char *k = NULL;
    if (asprintf(&k, "%s%s/%s", c->ns_prefix, kind, id) < 0)
        return NULL;
    return k;
}

/* The lease to attach claims to, waiting for the bootstrap until
 * deadline_ms. 0 if none. */
int64_t cluster_wait_lease(cluster *c, int64_t deadline_ms) {
    pthread_mutex_lock(&c->mu);
    while (c->lease_id == 0 && !c->stopping && clock_mono_ms() < deadline_ms)
        cluster_timed_wait_locked(c, CLUSTER_BACKOFF_MS);
    int64_t id = c->lease_id;
    pthread_mutex_unlock(&c->mu);
    return id;
}

/* Whether the claim value v (n bytes) names our writer prefix followed by
 * '/' (or the end): this process wrote it. */
int cluster_value_is_mine(const cluster *c, const unsigned char *v, size_t n) {
    char w[512];
    cluster_value_writer(v, n, w, sizeof(w));
    size_t len = strlen(c->writer);
    return strncmp(w, c->writer, len) == 0 && (w[len] == '\0' || w[len] == '/');
}

/* Delete a claim key this job created, past the job's deadline if need
 * be: a claim key left behind holds the key for every node until the
 * lease goes. */
void cluster_drop_claim_key(cluster *c, const char *ckey) {
    etcd_thread_deadline(clock_mono_ms() + CLUSTER_RELEASE_MS);
    etcd_delete(c->etcd, ckey, 0, NULL, NULL);
}
