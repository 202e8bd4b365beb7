/*
 * conns: local connections counted, capped and ended when idle (see
 * conns.h).
 */
#define _GNU_SOURCE
#include "io/conns.h"

#include <errno.h>
#include <fcntl.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "detd/error.h"

/* Connections ended in one sweep after which memory is trimmed. */
#define CONNS_TRIM_AFTER 64

/* One connection, at the index of gRPC's descriptor. */
struct conn {
    int wfd; /* the duplicate; -1: slot free */
    dev_t dev;
    ino_t ino;
    uint32_t uid;
    int64_t since_ms; /* accepted, CLOCK_MONOTONIC */
    int used;         /* a call arrived on it */
    int ended;        /* shut down for idleness */
};

/* The open connections of one uid. */
struct uid_slots {
    uint32_t uid;
    uint32_t open;
    int refusing; /* refusals since its last connection taken: noted */
};

struct conns {
    pthread_mutex_t mu; /* guards everything below */
    struct conn *v;
    size_t len;
    /* uids with connections open (few: linear search), when capped */
    struct uid_slots *uids;
    size_t nuids, capuids;
    struct conns_options opts;
    int64_t every_ms; /* 0: nothing to sweep for */
    int64_t next_sweep_ms;
    int64_t last_sweep_ms;
    int refusing;   /* refusals since the last connection taken: noted */
    int trims_left; /* sweeps that still trim memory after a flood */
    struct conns_stats st;
};

/* See conns.h. */
int conns_new(const struct conns_options *opts, conns **ret) {
    conns *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return DETD_ENOMEM;
    pthread_mutex_init(&t->mu, NULL);
    t->opts = *opts;
    /* Closed connections are forgotten (and idle ones ended) by a sweep:
     * every second, or a quarter of the idle timeout when that is
     * shorter. */
    if (opts->max_connections > 0 || opts->idle_timeout_ms > 0) {
        t->every_ms = 1000;
        if (opts->idle_timeout_ms > 0 && opts->idle_timeout_ms / 4 < 1000)
            t->every_ms =
                opts->idle_timeout_ms / 4 > 10 ? opts->idle_timeout_ms / 4 : 10;
        t->next_sweep_ms = clock_mono_ms() + t->every_ms;
    }
    *ret = t;
    return 0;
}

/* See conns.h. */
void conns_free(conns *t) {
    if (t == NULL)
        return;
    for (size_t fd = 0; fd < t->len; fd++)
        if (t->v[fd].wfd >= 0)
            close(t->v[fd].wfd);
    free(t->v);
    free(t->uids);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

/* uid's slots (NULL: none open and no room to add them when add). */
static struct uid_slots *uid_find(conns *t, uint32_t uid, int add) {
    for (size_t i = 0; i < t->nuids; i++)
        if (t->uids[i].uid == uid)
            return &t->uids[i];
    if (!add)
        return NULL;
    if (t->nuids == t->capuids) {
        size_t cap = t->capuids ? t->capuids * 2 : 8;
        struct uid_slots *v = realloc(t->uids, cap * sizeof(*v));
        if (v == NULL)
            return NULL;
        t->uids = v;
        t->capuids = cap;
    }
    t->uids[t->nuids] = (struct uid_slots){uid, 0, 0};
    return &t->uids[t->nuids++];
}

static void drop_locked(conns *t, size_t fd) {
    close(t->v[fd].wfd);
    t->v[fd].wfd = -1;
    t->st.open--;
    struct uid_slots *u = uid_find(t, t->v[fd].uid, 0);
    if (u != NULL && u->open > 0 && --u->open == 0 && !u->refusing)
        *u = t->uids[--t->nuids]; /* forget a uid with nothing open */
}

/* Does gRPC still serve connection fd (its descriptor names our socket)? */
static int alive(const struct conn *c, int fd) {
    struct stat st;
    return fstat(fd, &st) == 0 && st.st_dev == c->dev && st.st_ino == c->ino;
}

static void sweep_locked(conns *t, int64_t now) {
    size_t gone = 0;
    t->last_sweep_ms = now;
    t->next_sweep_ms = now + t->every_ms;
    for (size_t fd = 0; fd < t->len; fd++) {
        struct conn *c = &t->v[fd];
        if (c->wfd < 0)
            continue;
        if (!alive(c, (int)fd)) {
            drop_locked(t, fd);
            gone++;
        } else if (t->opts.idle_timeout_ms > 0 && !c->used && !c->ended &&
                   now - c->since_ms >= (int64_t)t->opts.idle_timeout_ms) {
            /* gRPC reads the end of the stream and closes its side; a
             * later sweep forgets it. */
            shutdown(c->wfd, SHUT_RDWR);
            c->ended = 1;
            t->st.idle_closed++;
        }
    }
#ifdef __GLIBC__
    /* Many connections ended (an idle flood swept out): give their
     * memory, freed on gRPC's threads, back to the system rather than
     * keep it in malloc's per-thread arenas; for a few sweeps, as gRPC
     * frees some of it after closing. */
    if (gone >= CONNS_TRIM_AFTER)
        t->trims_left = 4; /* gRPC frees some of it after the close */
    if (t->trims_left > 0) {
        t->trims_left--;
        malloc_trim(0);
    }
#endif
}

/* See conns.h. */
void conns_sweep(conns *t) {
    if (t == NULL || t->every_ms == 0)
        return;
    int64_t now = clock_mono_ms();
    pthread_mutex_lock(&t->mu);
    if (now >= t->next_sweep_ms)
        sweep_locked(t, now);
    pthread_mutex_unlock(&t->mu);
}

/* See conns.h. */
int64_t conns_sweep_every_ms(const conns *t) {
    return t != NULL ? t->every_ms : 0;
}

/* See conns.h. */
void conns_used(conns *t, int fd) {
    if (t == NULL || fd < 0)
        return;
    pthread_mutex_lock(&t->mu);
    if ((size_t)fd < t->len && t->v[fd].wfd >= 0)
        t->v[fd].used = 1;
    pthread_mutex_unlock(&t->mu);
}

/* See conns.h. */
int conns_track(conns *t, int fd, uint32_t uid) {
    char note[256] = "";
    int rc = 0;
    int64_t now = clock_mono_ms();
    uint32_t max = t->opts.max_connections;
    uint32_t max_uid = t->opts.max_per_uid;
    struct uid_slots *u = NULL;
    pthread_mutex_lock(&t->mu);
    if ((size_t)fd < t->len && t->v[fd].wfd >= 0)
        drop_locked(t, (size_t)fd); /* its number came back: it is gone */
    /* At the cap, forget the closed ones first (at most every 100 ms
     * here: a flood of refusals must not become a flood of sweeps). */
    if (max > 0 && t->st.open >= max && now - t->last_sweep_ms >= 100)
        sweep_locked(t, now);
    if (max > 0 && t->st.open >= max) {
        t->st.refused_max++;
        if (!t->refusing)
            snprintf(note, sizeof(note),
                     "%u local connections are open (--max-connections): "
                     "closing new connections at once until one ends",
                     max);
        t->refusing = 1;
        rc = DETD_EBUSY;
        goto out;
    }
    if (max_uid > 0) {
        if ((u = uid_find(t, uid, 1)) == NULL) {
            rc = DETD_ENOMEM;
            goto refuse;
        }
        if (u->open >= max_uid && now - t->last_sweep_ms >= 100) {
            sweep_locked(t, now);
            u = uid_find(t, uid, 1);
        }
        if (u == NULL || u->open >= max_uid) {
            rc = u == NULL ? DETD_ENOMEM : DETD_EBUSY;
            if (u == NULL)
                goto refuse;
            t->st.refused_uid++;
            if (!u->refusing)
                snprintf(note, sizeof(note),
                         "uid %u holds %u local connections "
                         "(--max-connections-per-uid): closing its new "
                         "connections at once until one ends",
                         uid, max_uid);
            u->refusing = 1;
            goto out;
        }
    }
    if ((size_t)fd >= t->len) {
        size_t len = t->len > 0 ? t->len : 64;
        while (len <= (size_t)fd)
            len *= 2;
        struct conn *v = realloc(t->v, len * sizeof(*v));
        if (v == NULL) {
            rc = DETD_ENOMEM;
            goto refuse;
        }
        for (size_t i = t->len; i < len; i++)
            v[i].wfd = -1;
        t->v = v;
        t->len = len;
    }
    struct stat st;
    int wfd = -1;
    if (fstat(fd, &st) != 0 || (wfd = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0) {
        rc = -errno;
        goto refuse;
    }
    t->v[fd] = (struct conn){wfd, st.st_dev, st.st_ino, uid, now, 0, 0};
    t->st.open++;
    t->refusing = 0;
    if (u != NULL) {
        u->open++;
        u->refusing = 0;
    }
    goto out;
refuse:
    t->st.refused_no_fd++;
    if (!t->refusing)
        snprintf(note, sizeof(note),
                 "cannot watch a new local connection: %s: closing it",
                 rc == DETD_ENOMEM ? "out of memory" : strerror(-rc));
    t->refusing = 1;
out:
    pthread_mutex_unlock(&t->mu);
    if (rc != 0)
        close(fd);
    if (note[0] != '\0' && t->opts.note != NULL)
        t->opts.note(t->opts.note_ctx, note);
    return rc;
}

/* See conns.h. */
void conns_stats(conns *t, struct conns_stats *ret) {
    memset(ret, 0, sizeof(*ret));
    if (t == NULL)
        return;
    pthread_mutex_lock(&t->mu);
    *ret = t->st;
    pthread_mutex_unlock(&t->mu);
}
