/*
 * cluster_claimant: one claimant per key (README, "Scale").
 *
 * When every node meets a new key at the same moment and each sends its
 * own claim transaction, a key costs etcd N Raft proposals. Instead, the
 * key's owner, the registered node of highest rendezvous weight for it
 * (cluster_rendezvous_rank()), claims at once; every other node defers:
 * it makes no etcd call while the owner claims, times and commits, and the
 * decision reaches it through the watch. Only when its deferral ends
 * (--claim-defer-ms after it met the key, plus a step per rank) without a
 * decision does it read the claim key, and it writes a claim only when
 * nobody holds one: the owner never met the key (pipeline or expert
 * parallelism), is cut off, or died. The nodes after the owner in the
 * key's order end their deferral one step apart, so the first of them
 * that met the key claims and the others read its claim and wait. Once a
 * node's deferral for a key is over, it asks etcd as before: a re-check
 * (a claim held elsewhere, every COORD_RECLAIM_MS) reads the claim key
 * and writes only when it is gone, so a takeover after the holder's
 * lease expired or its pass was given up is not deferred again.
 *
 * Nothing here decides: the claim key's first-writer-wins transaction and
 * the decision's still do, so a node that claims early (a registry read
 * late, clocks apart) costs a proposal, never a second decision.
 *
 * Loop thread only (cluster_claim() and the event queue's drain), except
 * the registry, read under c->mu.
 */
#define _GNU_SOURCE
#include "cluster/cluster_int.h"
#include "cluster/cluster_nodes.h"
#include "clock.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "detd/error.h"

#define GATE_BUCKETS 4096

/* What this node knows of one new key it asked etcd about. */
struct claimant {
    char id[KEYID_HEX_LEN + 1];
    int64_t start_ms; /* the deferral began: the key was first met */
    int64_t used_ms;  /* last activity, for forgetting idle keys */
    int pending;      /* a claim waits for due_ms */
    int64_t due_ms;
    int64_t deadline_ms;
    struct claimant *next;
};

/* A commit this node has in flight: its job deletes the claim key after
 * the decision is stored, so a release asked meanwhile is not sent too. */
struct inflight {
    char id[KEYID_HEX_LEN + 1];
    int release_asked; /* cluster_release() came while it ran */
    struct inflight *next;
};

struct cluster_gate {
    struct inflight *commits;
    struct claimant *buckets[GATE_BUCKETS];
    size_t n;
    int64_t armed_ms; /* the timer's due time, or 0 when stopped */
};

static size_t bucket_of(const char *id) {
    return (size_t)(cluster_rendezvous_weight("", id) % GATE_BUCKETS);
}

static struct claimant *find(struct cluster_gate *g, const char *id) {
    for (struct claimant *e = g->buckets[bucket_of(id)]; e != NULL; e = e->next)
        if (strcmp(e->id, id) == 0)
            return e;
    return NULL;
}

/* The entry of id, created when absent; NULL when the table is full or
 * out of memory (the caller claims at once). */
static struct claimant *get(struct cluster_gate *g, const char *id) {
    struct claimant *e = find(g, id);
    if (e != NULL || g->n >= CLUSTER_GATE_MAX)
        return e;
    e = calloc(1, sizeof(*e));
    if (e == NULL)
        return NULL;
    snprintf(e->id, sizeof(e->id), "%s", id);
    size_t b = bucket_of(id);
    e->next = g->buckets[b];
    g->buckets[b] = e;
    g->n++;
    return e;
}

static void drop(struct cluster_gate *g, const char *id) {
    for (struct claimant **pp = &g->buckets[bucket_of(id)]; *pp != NULL;
         pp = &(*pp)->next) {
        if (strcmp((*pp)->id, id) == 0) {
            struct claimant *e = *pp;
            *pp = e->next;
            free(e);
            g->n--;
            return;
        }
    }
}

/* This node's rank for id in the registry as last read (0: the owner,
 * or no registry with this node in it yet). */
static size_t rank_of(cluster *c, const char *id) {
    pthread_mutex_lock(&c->mu);
    size_t r =
        cluster_rendezvous_rank(c->nodes, c->n_nodes, c->node_id, id, NULL);
    pthread_mutex_unlock(&c->mu);
    return r;
}

/* See cluster.h. */
int64_t cluster_defer_of(cluster *c, const char *id) {
    return cluster_defer_ms(rank_of(c, id), c->defer_ms, c->defer_step_ms,
                            (size_t)c->defer_slots);
}

static void on_timer(uv_timer_t *t);

/* Have the timer fire by due_ms (an active timer is moved earlier). */
static void arm(cluster *c, int64_t due_ms) {
    struct cluster_gate *g = c->gate;
    if (g->armed_ms != 0 && g->armed_ms <= due_ms)
        return;
    int64_t now = clock_mono_ms();
    g->armed_ms = due_ms;
    uv_timer_start(&c->gate_timer, on_timer,
                   (uint64_t)(due_ms > now ? due_ms - now : 0), 0);
}

/* e's claim, now or when its deferral ends: the owner (rank 0) at once;
 * another node when its deferral is over; both read the claim key first
 * (recheck) so that they write only when nobody holds it. */
static int schedule(cluster *c, struct claimant *e, int64_t deadline_ms,
                    int64_t now) {
    e->used_ms = now;
    e->pending = 0;
    size_t rank = rank_of(c, e->id);
    /* The owner reads the claim key first too (a read, not a Raft
     * proposal): when it meets the key late, another node that met it
     * early may hold the claim already, and a losing transaction would
     * cost a proposal. */
    if (rank == 0)
        return cluster_claim_job(c, e->id, 1, deadline_ms);
    if (e->start_ms == 0)
        e->start_ms = now;
    int64_t due =
        e->start_ms + cluster_defer_ms(rank, c->defer_ms, c->defer_step_ms,
                                       (size_t)c->defer_slots);
    if (due <= now)
        return cluster_claim_job(c, e->id, 1, deadline_ms);
    e->pending = 1;
    e->due_ms = due;
    e->deadline_ms = deadline_ms;
    arm(c, due);
    return 0;
}

/* The timer: claims whose deferral ended go out (or fail when their
 * asker's deadline passed first); idle keys are forgotten. */
static void on_timer(uv_timer_t *t) {
    cluster *c = t->data;
    struct cluster_gate *g = c->gate;
    int64_t now = clock_mono_ms();
    int64_t next = INT64_MAX;
    g->armed_ms = 0;
    for (size_t b = 0; b < GATE_BUCKETS; b++) {
        struct claimant **pp = &g->buckets[b];
        while (*pp != NULL) {
            struct claimant *e = *pp;
            if (e->pending && e->due_ms <= now) {
                e->pending = 0;
                e->used_ms = now;
                if (e->deadline_ms <= now)
                    cluster_post(c, CLUSTER_EV_CLAIM_FAILED, e->id,
                                 DETD_ETIMEDOUT, 0, NULL, 0, 0, 0);
                else if (cluster_claim_job(c, e->id, 1, e->deadline_ms))
                    cluster_post(c, CLUSTER_EV_CLAIM_FAILED, e->id, DETD_ENOMEM,
                                 0, NULL, 0, 0, 0);
            }
            if (!e->pending && now - e->used_ms >= CLUSTER_GATE_IDLE_MS) {
                *pp = e->next;
                free(e);
                g->n--;
                continue;
            }
            int64_t due =
                e->pending ? e->due_ms : e->used_ms + CLUSTER_GATE_IDLE_MS;
            if (due < next)
                next = due;
            pp = &e->next;
        }
    }
    if (next != INT64_MAX)
        arm(c, next);
}

/* See cluster_int.h. */
struct cluster_gate *cluster_gate_new(void) {
    return calloc(1, sizeof(struct cluster_gate));
}

/* See cluster_int.h. */
void cluster_gate_close(cluster *c, uv_close_cb closed) {
    uv_timer_stop(&c->gate_timer);
    uv_close((uv_handle_t *)&c->gate_timer, closed);
}

/* See cluster_int.h. */
void cluster_gate_free(struct cluster_gate *g) {
    if (g == NULL)
        return;
    while (g->commits != NULL) {
        struct inflight *f = g->commits;
        g->commits = f->next;
        free(f);
    }
    for (size_t b = 0; b < GATE_BUCKETS; b++) {
        while (g->buckets[b] != NULL) {
            struct claimant *e = g->buckets[b];
            g->buckets[b] = e->next;
            free(e);
        }
    }
    free(g);
}

/* See cluster_int.h. */
int cluster_gate_claim(cluster *c, const char *id, int recheck,
                       int64_t deadline_ms) {
    struct claimant *e = get(c->gate, id);
    if (e == NULL)
        return cluster_claim_job(c, id, recheck, deadline_ms);
    return schedule(c, e, deadline_ms, clock_mono_ms());
}

/* See cluster_int.h. */
void cluster_gate_commit(cluster *c, const char *id) {
    struct inflight *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return; /* then a release may be sent twice: harmless */
    snprintf(f->id, sizeof(f->id), "%s", id);
    f->next = c->gate->commits;
    c->gate->commits = f;
}

/* See cluster_int.h. */
int cluster_gate_release(cluster *c, const char *id) {
    for (struct inflight *f = c->gate->commits; f != NULL; f = f->next) {
        if (strcmp(f->id, id) == 0) {
            f->release_asked = 1;
            return 1;
        }
    }
    return 0;
}

/* See cluster_int.h. */
void cluster_gate_event(cluster *c, const struct cluster_event *ev) {
    /* Decided, or this node times it: nothing left to defer. */
    if (ev->kind == CLUSTER_EV_DECISION || ev->kind == CLUSTER_EV_CLAIMED)
        drop(c->gate, ev->id);
    if (ev->kind != CLUSTER_EV_COMMITTED)
        return;
    for (struct inflight **pp = &c->gate->commits; *pp != NULL;
         pp = &(*pp)->next) {
        struct inflight *f = *pp;
        if (strcmp(f->id, ev->id) != 0)
            continue;
        *pp = f->next;
        /* A failed commit does not delete the claim: send the release
         * that was held back. */
        if (f->release_asked && ev->err != 0)
            cluster_release_job(c, f->id);
        free(f);
        return;
    }
}
