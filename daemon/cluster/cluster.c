/*
 * cluster: the etcd backend's threads (see cluster.h for the model).
 *
 * Threads. CLUSTER_WORKERS workers take jobs (bootstrap, resync, claim,
 * commit, release) from one queue and make blocking etcd calls; a monitor
 * thread (cluster_peers.c) refreshes the endpoint health and the
 * registered nodes for status; the adapter runs the watch and the lease
 * keep-alive on threads of its own. Every result goes through the event queue
 * to the loop. Several workers keep one slow call (a member down, a leader
 * election) from delaying every other key.
 *
 * Locking: c->mu guards the job queue, the event queue, the lease, the
 * watch handle and the status cache. No etcd call is made holding it.
 */
#define _GNU_SOURCE
#include "cluster/cluster.h"
#include "cluster/cluster_int.h"
#include "cluster/cluster_nodes.h"
#include "clock.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "detd/error.h"
#include "strfmt.h"
#include "core/keyid.h"
#include "grpc_unary.h"

/* A boot or resync attempt failed: count it, then wait out the next
 * backoff step (*attempt counts this run of retries). */
static void retry_nap(cluster *c, unsigned *attempt) {
    pthread_mutex_lock(&c->mu);
    int64_t ms = cluster_backoff_ms((*attempt)++, CLUSTER_BOOT_RETRY_BASE_MS,
                                    CLUSTER_BOOT_RETRY_CAP_MS, &c->rng);
    c->boot_retries++;
    pthread_mutex_unlock(&c->mu);
    cluster_nap(c, ms);
}

/* ---- the event queue (any thread -> loop) ---- */

static void on_async(uv_async_t *h) {
    cluster *c = h->data;
    pthread_mutex_lock(&c->mu);
    struct cev *e = c->evs;
    c->evs = c->evs_tail = NULL;
    pthread_mutex_unlock(&c->mu);
    while (e != NULL) {
        struct cev *next = e->next;
        e->ev.id = e->id;
        e->ev.node = e->node;
        e->ev.value = e->value;
        cluster_gate_event(c, &e->ev);
        c->cb(c->cb_ctx, &e->ev);
        free(e->value);
        free(e);
        e = next;
    }
}

/* ---- jobs ---- */

/* Delete our claim key for id if it still holds our writer. */
static void release_claim(cluster *c, const char *id, int64_t deadline_ms) {
    char *key = cluster_key_of(c, "claims", id);
    if (key == NULL)
        return;
    while (!cluster_stopping(c)) {
        struct etcd_kv kv = {0};
        int err = etcd_get(c->etcd, key, &kv, NULL);
        cluster_note(c, err, "release claim");
        if (err == 0) {
            int mine = cluster_value_is_mine(c, kv.value, kv.value_len);
            etcd_kv_clear(&kv);
            if (!mine)
                break;
            err = etcd_delete(c->etcd, key, 0, NULL, NULL);
            cluster_note(c, err, "release claim");
        }
        if (!cluster_transient(err) || clock_mono_ms() >= deadline_ms)
            break;
        cluster_nap(c, CLUSTER_BACKOFF_MS);
    }
    free(key);
}

/* ---- watch and resync ---- */

static void on_watch(const struct etcd_event *ev, void *arg);

struct resync_ctx {
    cluster *c;
    size_t plen;
    uint64_t n;
};

static int resync_cb(const struct etcd_kv *kv, void *arg) {
    struct resync_ctx *r = arg;
    const char *id = kv->key + r->plen;
    if (strlen(id) == KEYID_HEX_LEN) {
        cluster_post(r->c, CLUSTER_EV_DECISION, id, 0, 0, kv->value,
                     kv->value_len, 0, 0);
        r->n++;
    }
    return 0;
}

/* The namespace's watch: decisions/ and nodes/, and nothing between
 * them in key order. Claim keys (claims/ sorts before) are not watched:
 * with one claimant per key their puts and deletes would only add two
 * messages per node to every key; a node learns of a claim by reading
 * it (cluster_claimant.c). */
static int start_watch(cluster *c, int64_t from, etcd_watch **ret) {
    char *first = cluster_key_of(c, "decisions", "");
    char *last = cluster_key_of(c, "nodes", "");
    int err = DETD_ENOMEM;
    if (first != NULL && last != NULL)
        err = etcd_watch_start_range(c->etcd, first, last, from, on_watch, c,
                                     ret);
    free(first);
    free(last);
    return err;
}

/* Read every decision, then watch from that snapshot. */
static void do_resync(cluster *c) {
    pthread_mutex_lock(&c->mu);
    etcd_watch *old = c->watch;
    c->watch = NULL;
    pthread_mutex_unlock(&c->mu);
    etcd_watch_stop(old);
    char *dprefix = NULL;
    if (asprintf(&dprefix, "%sdecisions/", c->ns_prefix) < 0)
        return;
    unsigned attempt = 0;
    while (!cluster_stopping(c)) {
        struct resync_ctx r = {c, strlen(dprefix), 0};
        int64_t rev = 0;
        int err = etcd_range_prefix(c->etcd, dprefix, 0, resync_cb, &r, &rev);
        cluster_note(c, err, "resync");
        if (err == 0) {
            cluster_post(c, CLUSTER_EV_REVISION, "", 0, 0, "resync", 6, rev,
                         r.n);
            etcd_watch *w = NULL;
            if (start_watch(c, rev + 1, &w) == 0) {
                pthread_mutex_lock(&c->mu);
                c->watch = w;
                c->watch_rev = rev;
                c->resyncs++;
                /* A node that registered before this snapshot is in no
                 * event of the new watch, and the monitor's last read may
                 * predate it: read the registry again. */
                c->nodes_dirty = 1;
                pthread_mutex_unlock(&c->mu);
                break;
            }
        }
        retry_nap(c, &attempt);
    }
    free(dprefix);
}

static void on_watch(const struct etcd_event *ev, void *arg) {
    cluster *c = arg;
    size_t plen = strlen(c->ns_prefix);
    switch (ev->type) {
    case ETCD_EVENT_PUT:
    case ETCD_EVENT_DELETE: {
        pthread_mutex_lock(&c->mu);
        if (ev->revision > c->watch_rev)
            c->watch_rev = ev->revision;
        c->nodes_dirty |=
            ev->key_len > plen && strncmp(ev->key + plen, "nodes/", 6) == 0;
        pthread_mutex_unlock(&c->mu);
        if (ev->key_len <= plen)
            break;
        const char *rest = ev->key + plen;
        int put = ev->type == ETCD_EVENT_PUT;
        if (strncmp(rest, "decisions/", 10) == 0) {
            if (put && strlen(rest + 10) == KEYID_HEX_LEN)
                cluster_post(c, CLUSTER_EV_DECISION, rest + 10, 0, 0, ev->value,
                             ev->value_len, ev->revision, 0);
        }
        /* Every event moves the applied revision forward. */
        cluster_post(c, CLUSTER_EV_REVISION, "", 0, 0, NULL, 0, ev->revision,
                     0);
        break;
    }
    case ETCD_EVENT_CONNECTED:
        cluster_note(c, 0, "watch");
        break;
    case ETCD_EVENT_DISCONNECTED:
        cluster_note(c, ev->err != 0 ? ev->err : DETD_EUNAVAILABLE, "watch");
        break;
    case ETCD_EVENT_COMPACTED:
        /* Events were lost: read everything again. */
        cluster_submit(c, JOB_RESYNC, "", NULL, 0, 0, 0);
        break;
    case ETCD_EVENT_ERROR:
        break;
    }
}

/* ---- lease and registration ---- */

static void on_lease_lost(int64_t id, int err, void *arg) {
    cluster *c = arg;
    pthread_mutex_lock(&c->mu);
    int ours = c->lease_id == id;
    if (ours)
        c->lease_id = 0;
    int boot = ours && !c->booting && !c->stopping;
    if (boot)
        c->booting = 1;
    pthread_mutex_unlock(&c->mu);
    if (!ours)
        return;
    snprintf(c->last_error, sizeof(c->last_error), "node lease lost: %s",
             detd_strerror(err));
    cluster_post(c, CLUSTER_EV_LEASE_LOST, "", err, 0, NULL, 0, 0, 0);
    if (boot)
        cluster_submit(c, JOB_BOOT, "", NULL, 0, 0, 0);
}

/* Grant the node lease, keep it alive and register the node key; retried
 * until it works or the cluster stops. The first boot also starts the
 * watch. */
static void do_boot(cluster *c) {
    unsigned attempt = 0;
    while (!cluster_stopping(c)) {
        int revoked = 0; /* the state directory's lock: that run is over */
        int rerr = 0;
        int64_t old =
            cluster_lease_file_revoke(c->etcd, c->lease_file, &revoked, &rerr);
        if (old != 0)
            cluster_post(c, CLUSTER_EV_PREVIOUS_LEASE, "", 0, revoked, NULL, 0,
                         old, 0);
        if (cluster_transient(rerr)) {
            /* etcd is unreachable: the grant would spend its whole budget
             * failing too. The attempt has failed; count it and back off. */
            cluster_note(c, rerr, "revoke previous lease");
            retry_nap(c, &attempt);
            continue;
        }
        int64_t id = 0, ttl = 0;
        int err = etcd_lease_grant(c->etcd, c->lease_ttl_s, &id, &ttl);
        cluster_note(c, err, "grant node lease");
        if (err == 0) {
            err = etcd_keepalive_add(c->ka, id, ttl > 0 ? ttl : c->lease_ttl_s);
            if (err == 0) {
                err = etcd_put(c->etcd, c->node_key, c->node_value,
                               strlen(c->node_value), id, NULL);
                cluster_note(c, err, "register node");
                if (err != 0)
                    etcd_keepalive_remove(c->ka, id);
            }
            if (err == 0) {
                cluster_lease_file_write(c->lease_file, id);
                pthread_mutex_lock(&c->mu);
                c->lease_id = id;
                c->booting = 0;
                c->registered_ms = clock_mono_ms();
                pthread_cond_broadcast(&c->cv);
                int need_watch = c->watch == NULL;
                int64_t from = c->start_revision;
                pthread_mutex_unlock(&c->mu);
                etcd_watch *w = NULL;
                if (need_watch && from > 0 &&
                    start_watch(c, from + 1, &w) == 0) {
                    pthread_mutex_lock(&c->mu);
                    c->watch = w;
                    c->watch_rev = from;
                    c->nodes_dirty = 1; /* as in do_resync */
                    pthread_mutex_unlock(&c->mu);
                } else if (need_watch) {
                    do_resync(c);
                }
                return;
            }
            etcd_lease_revoke(c->etcd, id);
        }
        retry_nap(c, &attempt);
    }
}

/* ---- threads ---- */

static void job_free(struct job *j) {
    free(j->value);
    free(j->method);
    free(j);
}

static void *worker_main(void *arg) {
    cluster *c = arg;
    for (;;) {
        pthread_mutex_lock(&c->mu);
        struct job *j = NULL;
        while (!c->stopping && (j = cluster_take_job(c)) == NULL)
            pthread_cond_wait(&c->cv, &c->mu);
        if (c->stopping) {
            pthread_mutex_unlock(&c->mu);
            if (j != NULL)
                job_free(j);
            return NULL;
        }
        /* Claims (commits) met together go out as one Txn: those queued
         * now or within CLUSTER_BATCH_WINDOW_MS; meanwhile other workers
         * leave them to this one. */
        struct job *batch[CLUSTER_BATCH_MAX] = {j};
        size_t n = 1;
        if (j->kind == JOB_CLAIM || j->kind == JOB_COMMIT) {
            unsigned bit = 1u << j->kind;
            c->gathering |= bit;
            int64_t until = clock_mono_ms() + CLUSTER_BATCH_WINDOW_MS;
            for (;;) {
                cluster_gather(c, j->kind, batch, &n);
                int64_t left = until - clock_mono_ms();
                if (n >= CLUSTER_BATCH_MAX || left <= 0 || c->stopping)
                    break;
                cluster_timed_wait_locked(c, left);
            }
            c->gathering &= ~bit;
            pthread_cond_broadcast(&c->cv);
        }
        pthread_mutex_unlock(&c->mu);
        switch (j->kind) {
        case JOB_BOOT:
            do_boot(c);
            break;
        case JOB_RESYNC:
            do_resync(c);
            break;
        case JOB_CLAIM:
        case JOB_COMMIT:
            /* A claim or commit answers within its job's deadline: no
             * etcd call inside may run past it. */
            cluster_run_batch(c, batch, n);
            break;
        case JOB_RELEASE:
            release_claim(c, j->id, j->deadline_ms);
            break;
        case JOB_FANOUT:
            cluster_do_fanout(c, j);
            break;
        case JOB_READ:
            cluster_do_read(c, j);
            break;
        }
        for (size_t i = 0; i < n; i++)
            job_free(batch[i]);
    }
}

/* ---- public API ---- */

static void free_queues(cluster *c) {
    while (c->jobs != NULL) {
        struct job *j = c->jobs;
        c->jobs = j->next;
        job_free(j);
    }
    while (c->evs != NULL) {
        struct cev *e = c->evs;
        c->evs = e->next;
        free(e->value);
        free(e);
    }
}

static void cluster_free(cluster *c) {
    free_queues(c);
    cluster_gate_free(c->gate);
    free(c->ns_prefix);
    free(c->node_key);
    free(c->node_value);
    free(c->writer);
    free(c->endpoints);
    free(c->lease_file);
    free(c->nodes);
    free(c->peer_ca);
    free(c->peer_cert);
    free(c->peer_key);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c);
}

static void on_handle_closed(uv_handle_t *h) {
    cluster *c = h->data;
    if (--c->open_handles == 0)
        cluster_free(c);
}

/* See cluster.h. */
int cluster_open(const struct cluster_options *opt, uv_loop_t *loop,
                 cluster_event_cb cb, void *ctx, cluster **ret,
                 char **ret_errmsg) {
    char *err = NULL;
    int rc;
    if (ret_errmsg != NULL)
        *ret_errmsg = NULL;
    if (opt == NULL || opt->endpoints == NULL || opt->node_id == NULL ||
        opt->ns == NULL || loop == NULL || cb == NULL || ret == NULL)
        return DETD_EINVAL;
    if (cluster_node_id_check(opt->node_id, ret_errmsg) != 0)
        return DETD_EINVAL;
    cluster *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return DETD_ENOMEM;
    pthread_mutex_init(&c->mu, NULL);
    clock_cond_init(&c->cv); /* cluster_timed_wait_locked() */
    c->cb = cb;
    c->cb_ctx = ctx;
    c->start_revision = opt->start_revision;
    if (opt->lease_file != NULL)
        c->lease_file = strdup(opt->lease_file);
    c->booting = 1;
    c->connected = -1; /* unknown: the first answer is reported */
    snprintf(c->node_id, sizeof(c->node_id), "%s", opt->node_id);
    c->lease_ttl_s = (opt->lease_ms + 999) / 1000;
    c->defer_ms = opt->defer_ms != 0 ? opt->defer_ms : CLUSTER_DEFER_MS;
    c->defer_step_ms =
        opt->defer_ms != 0 ? opt->defer_step_ms : CLUSTER_DEFER_STEP_MS;
    c->defer_slots =
        opt->defer_ms != 0 ? opt->defer_slots : CLUSTER_DEFER_SLOTS;
    if (c->lease_ttl_s < 1)
        c->lease_ttl_s = 1;
    c->rng = cluster_random_u64();
    unsigned nonce = (unsigned)(c->rng >> 32);
    c->node_value =
        cluster_node_encode(opt->node_id, opt->listen, opt->socket_path,
                            (int)getpid(), clock_unix_ms(), DETD_VERSION);
    c->endpoints = strdup(opt->endpoints);
    if (opt->peer_ca != NULL)
        c->peer_ca = strdup(opt->peer_ca);
    if (opt->peer_cert != NULL && opt->peer_key != NULL) {
        c->peer_cert = strdup(opt->peer_cert);
        c->peer_key = strdup(opt->peer_key);
    }
    if (asprintf(&c->ns_prefix, "/detd/v1/%s/", opt->ns) < 0)
        c->ns_prefix = NULL;
    if (asprintf(&c->node_key, "/detd/v1/%s/nodes/%s", opt->ns, opt->node_id) <
        0)
        c->node_key = NULL;
    if (asprintf(&c->writer, "%s/%d/%08x", opt->node_id, (int)getpid(), nonce) <
        0)
        c->writer = NULL;
    if (c->node_value == NULL || c->endpoints == NULL || c->ns_prefix == NULL ||
        c->node_key == NULL || c->writer == NULL) {
        rc = DETD_ENOMEM;
        goto fail;
    }

    struct etcd_options eo;
    etcd_options_init(&eo);
    eo.endpoints = opt->endpoints;
    eo.ca_file = opt->ca_file;
    eo.cert_file = opt->cert_file;
    eo.key_file = opt->key_file;
    eo.user = opt->user;
    eo.password = opt->password;
    eo.attempt_timeout_ms = CLUSTER_ATTEMPT_MS;
    eo.total_timeout_ms = CLUSTER_BUDGET_MS;
    rc = etcd_open(&eo, &c->etcd);
    if (rc != 0) {
        err = strfmt("etcd client for '%s': %s", opt->endpoints,
                     detd_strerror(rc));
        goto fail;
    }
    rc = etcd_keepalive_start(c->etcd, on_lease_lost, c, &c->ka);
    if (rc != 0) {
        err = strfmt("etcd lease keep-alive: %s", detd_strerror(rc));
        goto fail;
    }
    c->gate = cluster_gate_new();
    if (c->gate == NULL) {
        rc = DETD_ENOMEM;
        goto fail;
    }
    rc = uv_async_init(loop, &c->async, on_async);
    if (rc != 0) {
        err = strfmt("async handle: %s", uv_strerror(rc));
        rc = DETD_EINTERNAL;
        goto fail;
    }
    c->async.data = c;
    /* Never fails (libuv): both handles are closed by cluster_close(). */
    uv_timer_init(loop, &c->gate_timer);
    c->gate_timer.data = c;
    c->open_handles = 2;
    cluster_submit(c, JOB_BOOT, "", NULL, 0, 0, 0);
    for (int i = 0; i < CLUSTER_WORKERS; i++)
        if (pthread_create(&c->workers[i], NULL, worker_main, c) == 0)
            c->n_workers++;
    if (pthread_create(&c->monitor, NULL, cluster_monitor_main, c) == 0)
        c->monitor_started = 1;
    *ret = c;
    return 0;
fail:
    if (ret_errmsg != NULL)
        *ret_errmsg = err;
    else
        free(err);
    etcd_keepalive_stop(c->ka);
    etcd_close(c->etcd);
    cluster_free(c);
    return rc;
}

/* See cluster.h. */
void cluster_close(cluster *c) {
    if (c == NULL)
        return;
    pthread_mutex_lock(&c->mu);
    c->stopping = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    etcd_set_cancelled(c->etcd, 1); /* no retries against a gone etcd */
    for (int i = 0; i < c->n_workers; i++)
        pthread_join(c->workers[i], NULL);
    if (c->monitor_started)
        pthread_join(c->monitor, NULL);
    etcd_watch_stop(c->watch);
    c->watch = NULL;
    etcd_keepalive_stop(c->ka);
    c->ka = NULL;
    /* Claims and the node key go with the lease, at once; etcd gone, the
     * stop does not wait: the next run revokes it (lease file). */
    etcd_set_cancelled(c->etcd, 0);
    etcd_thread_deadline(clock_mono_ms() + CLUSTER_CLOSE_REVOKE_MS);
    if (c->lease_id != 0 && etcd_lease_revoke(c->etcd, c->lease_id) == 0)
        cluster_lease_file_write(c->lease_file, 0);
    etcd_thread_deadline(0);
    etcd_close(c->etcd);
    c->etcd = NULL;
    cluster_gate_close(c, on_handle_closed);
    uv_close((uv_handle_t *)&c->async, on_handle_closed);
}

/* See cluster.h. */
int cluster_claim(cluster *c, const char *id, int recheck,
                  int64_t deadline_ms) {
    return cluster_gate_claim(c, id, recheck, deadline_ms);
}

/* See cluster.h. timeout_ms rides in the job's deadline field. */
int cluster_fanout(cluster *c, const char *method, const void *req,
                   size_t req_len, int64_t node_timeout_ms, int64_t deadline_ms,
                   cluster_pager pager, uint64_t cookie) {
    char *v = malloc(req_len > 0 ? req_len : 1);
    char *m = strdup(method);
    if (v == NULL || m == NULL) {
        free(v);
        free(m);
        return DETD_ENOMEM;
    }
    memcpy(v, req, req_len);
    struct job *j =
        cluster_job_new(JOB_FANOUT, NULL, v, req_len, deadline_ms, cookie);
    if (j == NULL) {
        free(m);
        return DETD_ENOMEM;
    }
    j->node_timeout_ms = node_timeout_ms;
    j->method = m;
    j->pager = pager;
    cluster_enqueue(c, j);
    return 0;
}

/* See cluster.h. A decision seen by the watch before this node's own
 * commit answered makes the caller release the claim the commit job is
 * about to delete: one delete, not two. */
int cluster_release(cluster *c, const char *id) {
    if (cluster_gate_release(c, id))
        return 0;
    return cluster_release_job(c, id);
}

/* See cluster.h. */
const char *cluster_writer(const cluster *c) {
    return c->writer;
}

/* See cluster.h. */
void cluster_get_status(cluster *c, struct cluster_status *ret) {
    memset(ret, 0, sizeof(*ret));
    pthread_mutex_lock(&c->mu);
    snprintf(ret->endpoints, sizeof(ret->endpoints), "%s", c->endpoints);
    snprintf(ret->node_id, sizeof(ret->node_id), "%s", c->node_id);
    ret->connected = c->connected > 0;
    snprintf(ret->last_error, sizeof(ret->last_error), "%s", c->last_error);
    ret->lease_id = c->lease_id;
    ret->n_members = c->n_members;
    memcpy(ret->members, c->members, c->n_members * sizeof(c->members[0]));
    ret->n_nodes = c->n_nodes;
    snprintf(ret->nodes_error, sizeof(ret->nodes_error), "%s", c->nodes_error);
    ret->watch_revision = c->watch_rev;
    ret->resyncs = c->resyncs;
    ret->boot_retries = c->boot_retries;
    pthread_mutex_unlock(&c->mu);
}

/* See cluster.h. */
int cluster_commit(cluster *c, const struct decision *r, uint64_t claim_id,
                   int64_t deadline_ms, uint64_t cookie) {
    if (c == NULL || r == NULL)
        return DETD_EINVAL;
    int err = 0;
    int rc = cluster_commit_many(c, r, 1, claim_id, deadline_ms, cookie, &err);
    return rc != 0 ? rc : err;
}

/* See cluster.h. */
int cluster_commit_many(cluster *c, const struct decision *rows, size_t n,
                        uint64_t claim_id, int64_t deadline_ms,
                        uint64_t first_cookie, int *ret_err) {
    char writer[512];
    snprintf(writer, sizeof(writer), "%s/%" PRIu64, c->writer, claim_id);
    struct job *first = NULL, *last = NULL;
    for (size_t i = 0; i < n; i++) {
        char *v = NULL;
        size_t len = 0;
        ret_err[i] = rows[i].id == NULL || rows[i].config == NULL
                         ? DETD_EINVAL
                         : cluster_decision_encode(&rows[i], writer, &v, &len);
        if (ret_err[i] == DETD_ENOMEM)
            goto oom;
        if (ret_err[i] != 0)
            continue;
        struct job *j = cluster_job_new(JOB_COMMIT, rows[i].id, v, len,
                                        deadline_ms, first_cookie + i);
        if (j == NULL)
            goto oom;
        if (last != NULL)
            last->next = j;
        else
            first = j;
        last = j;
    }
    for (size_t i = 0; i < n; i++)
        if (ret_err[i] == 0)
            cluster_gate_commit(c, rows[i].id);
    if (first != NULL)
        cluster_enqueue_list(c, first, last);
    return 0;
oom:
    while (first != NULL) {
        struct job *j = first;
        first = j->next;
        free(j->value);
        free(j);
    }
    return DETD_ENOMEM;
}

/* See cluster.h. */
int cluster_read(cluster *c, const char *const *ids, size_t n,
                 int64_t deadline_ms, uint64_t first_cookie) {
    char *v = malloc(n * KEYID_HEX_LEN + 1);
    if (v == NULL)
        return DETD_ENOMEM;
    for (size_t i = 0; i < n; i++)
        memcpy(v + i * KEYID_HEX_LEN, ids[i], KEYID_HEX_LEN);
    return cluster_submit(c, JOB_READ, NULL, v, n * KEYID_HEX_LEN, deadline_ms,
                          first_cookie);
}

/* See cluster.h. */
int cluster_registry_settled(cluster *c) {
    pthread_mutex_lock(&c->mu);
    int64_t due = c->registered_ms + c->defer_ms;
    int listed = 0;
    for (size_t i = 0; i < c->n_nodes && !listed; i++)
        listed = strcmp(c->nodes[i].node_id, c->node_id) == 0;
    int settled = c->registered_ms != 0 && c->nodes_read_ms >= due && listed;
    if (!settled && c->registered_ms != 0 && clock_mono_ms() >= due &&
        c->nodes_asked_ms < due) {
        /* The read that settles it is due now, not at the monitor's next
         * round: wake the monitor once. */
        c->nodes_asked_ms = clock_mono_ms();
        c->nodes_dirty = 1;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    return settled;
}

/* See cluster.h. */
int64_t cluster_registry_settle_ms(const cluster *c) {
    return c->defer_ms + 2 * CLUSTER_MONITOR_MS;
}
