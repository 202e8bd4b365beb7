/* session: channel, Attach stream and its keeper thread. See session.h. */
#define _GNU_SOURCE
#include "session.h"
#include "clock.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "detd/client.h"

/* Every live session, so the fork handlers can reach them. */
static pthread_mutex_t session_reg_mu_ = PTHREAD_MUTEX_INITIALIZER;
static struct session *session_reg_head_;
static pthread_once_t session_reg_once_ = PTHREAD_ONCE_INIT;
static int session_reg_err_;

/* Forget what another process created, without touching it. */
static void session_forget_(struct session *s) {
    s->pid = getpid();
    s->channel = NULL;
    s->attach_channel = NULL;
    s->n_retired = 0; /* the parent's: never touched in a child */
    s->stream = NULL;
    s->thread_joinable = 0;
    s->state = SESSION_IDLE;
    s->session_id = 0;
    s->lease_ms = 0;
    s->attaches = 0;
    s->heartbeats = 0;
    s->stopping = 0;
    s->keeper_running = 0;
    s->attaching = NULL;
    s->down_since = 0;
    s->renewing_gen = 0;
    s->outages = 0;
    s->renewed = 0;
    /* The parent's claims are its own: never taken again here (their
     * copies are left allocated, as the parent's channels are). */
    for (unsigned i = 0; i < SESSION_CLAIMS; i++)
        s->claims[i].key = NULL;
    s->attach_failures = 0;
    s->last_err = 0;
    s->last_msg[0] = '\0';
}

static int session_cond_init_(pthread_cond_t *cond) {
    return clock_cond_init(cond) == 0 ? 0 : DETD_EINTERNAL;
}

/* fork(): hold every session still so the child sees a consistent copy.
 * No network I/O ever happens under a session mutex, so this is short. */
static void session_atfork_prepare_(void) {
    pthread_mutex_lock(&session_reg_mu_);
    for (struct session *s = session_reg_head_; s != NULL; s = s->reg_next)
        pthread_mutex_lock(&s->mu);
}

static void session_atfork_parent_(void) {
    for (struct session *s = session_reg_head_; s != NULL; s = s->reg_next)
        pthread_mutex_unlock(&s->mu);
    pthread_mutex_unlock(&session_reg_mu_);
}

static void session_atfork_child_(void) {
    for (struct session *s = session_reg_head_; s != NULL; s = s->reg_next) {
        session_forget_(s);
        /* Waiters of the parent do not exist here: start the condition
         * variable afresh rather than destroy it. */
        memset(&s->cond, 0, sizeof(s->cond));
        session_cond_init_(&s->cond);
        pthread_mutex_unlock(&s->mu);
    }
    pthread_mutex_unlock(&session_reg_mu_);
}

static void session_reg_once_fn_(void) {
    if (pthread_atfork(session_atfork_prepare_, session_atfork_parent_,
                       session_atfork_child_) != 0)
        session_reg_err_ = DETD_ENOMEM;
}

int session_init(struct session *s, const char *target,
                 const Detd__V1__ClientIdentity *identity,
                 uint32_t reconnect_ms) {
    int rc = wire_init();
    if (rc < 0)
        return rc;
    pthread_once(&session_reg_once_, session_reg_once_fn_);
    if (session_reg_err_ < 0)
        return session_reg_err_;
    memset(s, 0, sizeof(*s));
    s->target = strdup(target);
    if (s->target == NULL)
        return DETD_ENOMEM;
    if (pthread_mutex_init(&s->mu, NULL) != 0) {
        free(s->target);
        return DETD_EINTERNAL;
    }
    rc = session_cond_init_(&s->cond);
    if (rc < 0) {
        pthread_mutex_destroy(&s->mu);
        free(s->target);
        return rc;
    }
    s->identity = identity;
    s->reconnect_ms = reconnect_ms;
    s->pid = getpid();
    pthread_mutex_lock(&session_reg_mu_);
    s->reg_next = session_reg_head_;
    if (session_reg_head_ != NULL)
        session_reg_head_->reg_prev = s;
    session_reg_head_ = s;
    pthread_mutex_unlock(&session_reg_mu_);
    return 0;
}

void session_destroy(struct session *s) {
    pthread_mutex_lock(&session_reg_mu_);
    if (s->reg_prev != NULL)
        s->reg_prev->reg_next = s->reg_next;
    else
        session_reg_head_ = s->reg_next;
    if (s->reg_next != NULL)
        s->reg_next->reg_prev = s->reg_prev;
    pthread_mutex_unlock(&session_reg_mu_);

    pthread_mutex_lock(&s->mu);
    if (s->pid != getpid())
        session_forget_(s);
    s->stopping = 1;
    if (s->stream != NULL)
        wire_stream_cancel(s->stream);
    if (s->attaching != NULL)
        wire_stream_cancel(s->attaching);
    pthread_cond_broadcast(&s->cond);
    int joinable = s->thread_joinable;
    s->thread_joinable = 0;
    pthread_mutex_unlock(&s->mu);
    if (joinable)
        pthread_join(s->thread, NULL);
    wire_channel_free(s->channel);
    wire_channel_free(s->attach_channel);
    for (unsigned i = 0; i < s->n_retired; i++)
        wire_channel_free(s->retired[i]);
    for (unsigned i = 0; i < SESSION_CLAIMS; i++)
        free(s->claims[i].key);
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->mu);
    free(s->target);
}

/* The identity as sent by this process. */
static Detd__V1__ClientIdentity session_identity_(const struct session *s) {
    Detd__V1__ClientIdentity id = *s->identity;
    id.pid = (int32_t)getpid();
    return id;
}

int64_t session_jitter_ms(int64_t delay_ms) {
    static _Thread_local uint64_t x;
    if (x == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        x = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^
            ((uint64_t)getpid() << 40) ^ (uint64_t)(uintptr_t)&x;
        if (x == 0)
            x = 0x9e3779b97f4a7c15ull;
    }
    /* xorshift64 */
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    if (delay_ms <= 1)
        return delay_ms;
    int64_t half = delay_ms / 2;
    return half + (int64_t)(x % (uint64_t)(delay_ms - half + 1));
}

/* An outage starts now unless one is already counted (mu held). */
static void session_down_(struct session *s) {
    if (s->down_since != 0)
        return;
    s->down_since = clock_mono_ms();
    if (s->reached)
        s->outages++;
}

/* Wait on the session's condition until abs_ms at most (mu held). */
static void session_wait_until_(struct session *s, int64_t abs_ms) {
    int64_t left = abs_ms - clock_mono_ms();
    if (left <= 0)
        return;
    struct timespec ts = clock_after(left);
    pthread_cond_timedwait(&s->cond, &s->mu, &ts);
}

static int session_attach_(struct session *s, struct wire_channel *ch,
                           int64_t deadline_ms, struct wire_stream **ret_st,
                           uint64_t *ret_session_id, uint32_t *ret_lease_ms,
                           uint32_t *ret_features);

/* Keep one stream: a receive always pending, heartbeats every lease / 3.
 * Returns when the stream closed (lost, ended by the daemon, or cancelled
 * by session_destroy() or session_invalidate()). */
static void session_run_stream_(struct session *s, struct wire_stream *st,
                                uint64_t gen, int64_t period) {
    Detd__V1__ClientIdentity id = session_identity_(s);
    Detd__V1__AttachRequest hb = DETD__V1__ATTACH_REQUEST__INIT;
    hb.api_version = DETD_API_VERSION;
    hb.client = &id;
    hb.heartbeat = 1;

    if (period <= 0)
        period = 1000;
    if (period < 20)
        period = 20;
    int64_t next_hb = clock_mono_ms() + period;
    if (wire_stream_recv(st) < 0)
        wire_stream_cancel(st);
    for (;;) {
        struct wire_event ev;
        wire_stream_next(st, next_hb, &ev);
        if (ev.kind == WIRE_EV_CLOSED)
            break;
        switch (ev.kind) {
        case WIRE_EV_TIMEOUT:
            if (!wire_stream_sending(st))
                wire_stream_send(st, &hb.base);
            next_hb = clock_mono_ms() + period;
            break;
        case WIRE_EV_SENT:
            if (ev.ok) {
                pthread_mutex_lock(&s->mu);
                s->heartbeats++;
                pthread_mutex_unlock(&s->mu);
            }
            break;
        case WIRE_EV_MESSAGE: {
            /* The daemon may renew the session or change the lease. */
            Detd__V1__AttachEvent *ae = (Detd__V1__AttachEvent *)ev.msg;
            pthread_mutex_lock(&s->mu);
            if (s->generation == gen && ae->session_id != 0)
                s->session_id = ae->session_id;
            if (s->generation == gen && ae->lease_ms != 0) {
                s->lease_ms = ae->lease_ms;
                period = ae->lease_ms / 3 < 20 ? 20 : ae->lease_ms / 3;
            }
            pthread_mutex_unlock(&s->mu);
            protobuf_c_message_free_unpacked(ev.msg, NULL);
            if (wire_stream_recv(st) < 0)
                wire_stream_cancel(st);
            break;
        }
        default:
            break; /* WIRE_EV_END: the status follows */
        }
    }
}

/* Install a new stream as the attached session (mu held). */
static void session_install_(struct session *s, struct wire_stream *st,
                             uint64_t sid, uint32_t lease, uint32_t features) {
    s->stream = st;
    s->session_id = sid;
    s->lease_ms = lease;
    s->features = features;
    s->generation++;
    s->attaches++;
    s->state = SESSION_ATTACHED;
    s->reached = 1;
    s->down_since = 0;
    s->last_err = 0;
    s->last_msg[0] = '\0';
    pthread_cond_broadcast(&s->cond);
}

/*
 * A fresh channel for *slot (mu held), the old one retired when calls may
 * hold it (retire) or freed. A channel whose connection broke keeps gRPC's
 * reconnect backoff (and can keep an attempt pending on the old socket)
 * for seconds after a new daemon serves, while a new channel connects at
 * once. Retired channels are freed with the session; past
 * SESSION_MAX_RETIRED the old channel is kept as it is.
 */
static void session_renew_(struct session *s, struct wire_channel **slot,
                           int retire) {
    if (*slot == NULL || (retire && s->n_retired >= SESSION_MAX_RETIRED))
        return;
    struct wire_channel *fresh = NULL;
    if (wire_channel_new(s->target, &fresh) != 0)
        return; /* keep the old one */
    if (retire)
        s->retired[s->n_retired++] = *slot;
    else
        wire_channel_free(*slot);
    *slot = fresh;
}

/*
 * Take the claims still open in this process again on the session just
 * installed (mu held; released around each call): the first asks the new
 * daemon gets from this process.
 */
static void session_renew_claims_(struct session *s, uint64_t sid) {
    uint64_t gen = s->generation;
    if (s->reclaim == NULL)
        return;
    s->renewing_gen = gen;
    for (unsigned i = 0; i < SESSION_CLAIMS; i++) {
        struct session_claim *c = &s->claims[i];
        if (s->stopping || s->generation != gen)
            break;
        if (c->claim_id == 0 || c->key == NULL || c->generation == gen ||
            c->renewed_gen == gen)
            continue;
        uint64_t id = c->claim_id, fresh = 0;
        struct detd_key *k = session_key_dup(c->key);
        struct wire_channel *ch = s->channel;
        if (k == NULL)
            continue;
        pthread_mutex_unlock(&s->mu);
        int rc = s->reclaim(s->reclaim_user, ch, sid, k, &fresh);
        free(k);
        pthread_mutex_lock(&s->mu);
        /* The slot may have been reused meanwhile: find the claim again. */
        for (unsigned j = 0; rc == 1 && j < SESSION_CLAIMS; j++)
            if (s->claims[j].claim_id == id) {
                s->claims[j].renewed_id = fresh;
                s->claims[j].renewed_gen = gen;
                s->renewed++;
                break;
            }
    }
    s->renewing_gen = 0;
    pthread_cond_broadcast(&s->cond);
}

/*
 * The keeper: runs the stream of the current session; when it is lost,
 * attaches again with backoff and runs the new one, until the session is
 * destroyed.
 */
static void *session_thread_(void *arg) {
    struct session *s = arg;
    pthread_mutex_lock(&s->mu);
    struct wire_stream *st = s->stream;
    for (;;) {
        uint64_t gen = s->generation;
        int64_t period = s->lease_ms / 3;
        pthread_mutex_unlock(&s->mu);
        session_run_stream_(s, st, gen, period);

        /* Lost (or cancelled): the session and its claims are over. */
        pthread_mutex_lock(&s->mu);
        if (s->generation == gen) {
            s->stream = NULL;
            s->state = SESSION_IDLE;
            s->session_id = 0;
            if (!s->stopping)
                session_down_(s);
            pthread_cond_broadcast(&s->cond);
        }
        pthread_mutex_unlock(&s->mu);
        wire_stream_free(st);
        st = NULL;

        /* Attach again: at once, then with exponential backoff, each
         * attempt on a fresh channel (only this thread uses the attach
         * channel while it runs). */
        int64_t delay = SESSION_BACKOFF_FIRST_MS;
        pthread_mutex_lock(&s->mu);
        for (;;) {
            if (s->stopping)
                goto out;
            session_renew_(s, &s->attach_channel, 0);
            s->state = SESSION_ATTACHING;
            struct wire_channel *ch = s->attach_channel;
            pthread_mutex_unlock(&s->mu);
            uint64_t sid = 0;
            uint32_t lease = 0, features = 0;
            int rc = session_attach_(
                s, ch, clock_mono_ms() + 2 * SESSION_BACKOFF_MAX_MS, &st, &sid,
                &lease, &features);
            pthread_mutex_lock(&s->mu);
            if (rc == 0 && s->stopping) {
                s->state = SESSION_IDLE;
                pthread_mutex_unlock(&s->mu);
                wire_stream_free(st);
                pthread_mutex_lock(&s->mu);
                goto out;
            }
            if (rc == 0) {
                /* A daemon serves again: calls get a fresh channel too. */
                session_renew_(s, &s->channel, 1);
                session_install_(s, st, sid, lease, features);
                session_renew_claims_(s, sid);
                break; /* run the new stream (mu held) */
            }
            s->state = SESSION_IDLE;
            s->attach_failures++;
            s->last_err = rc;
            snprintf(s->last_msg, sizeof(s->last_msg), "%s", wire_last_error());
            session_down_(s);
            pthread_cond_broadcast(&s->cond);
            if (s->stopping)
                goto out;
            session_wait_until_(s, clock_mono_ms() + session_jitter_ms(delay));
            delay = delay * 2 > SESSION_BACKOFF_MAX_MS ? SESSION_BACKOFF_MAX_MS
                                                       : delay * 2;
        }
    }
out:
    s->keeper_running = 0;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* Open the Attach stream and wait for the AttachEvent. No lock held.
 * The stream is published in s->attaching while it is set up, so that
 * session_destroy() can cancel it. */
static int session_attach_(struct session *s, struct wire_channel *ch,
                           int64_t deadline_ms, struct wire_stream **ret_st,
                           uint64_t *ret_session_id, uint32_t *ret_lease_ms,
                           uint32_t *ret_features) {
    struct wire_stream *st = NULL;
    Detd__V1__AttachEvent *ae = NULL;
    int rc = wire_stream_open(ch, WIRE_METHOD_ATTACH,
                              &detd__v1__attach_event__descriptor, &st);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&s->mu);
    s->attaching = st;
    if (s->stopping)
        wire_stream_cancel(st);
    pthread_mutex_unlock(&s->mu);
    Detd__V1__ClientIdentity id = session_identity_(s);
    Detd__V1__AttachRequest req = DETD__V1__ATTACH_REQUEST__INIT;
    req.api_version = DETD_API_VERSION;
    req.client = &id;
    rc = wire_stream_send(st, &req.base);
    if (rc == 0)
        rc = wire_stream_recv(st);
    if (rc < 0)
        goto out;
    int sent = 0;
    while (!sent || ae == NULL) {
        struct wire_event ev;
        wire_stream_next(st, deadline_ms, &ev);
        if (ev.kind == WIRE_EV_TIMEOUT) {
            wire_set_error("attach to detd at '%s': no answer before the "
                           "deadline",
                           s->target);
            rc = DETD_ETIMEDOUT;
            goto out;
        }
        if (ev.kind == WIRE_EV_CLOSED) {
            rc = ev.err;
            goto out;
        }
        if (ev.kind == WIRE_EV_SENT && ev.ok)
            sent = 1;
        if (ev.kind == WIRE_EV_MESSAGE) {
            if (ae == NULL)
                ae = (Detd__V1__AttachEvent *)ev.msg;
            else
                protobuf_c_message_free_unpacked(ev.msg, NULL);
        }
    }
    if (ae->session_id == 0) {
        wire_set_error("attach to detd at '%s': the daemon gave no session",
                       s->target);
        rc = DETD_EPROTO;
        goto out;
    }
    *ret_session_id = ae->session_id;
    *ret_lease_ms = ae->lease_ms;
    *ret_features = 0;
    for (size_t i = 0; i < ae->n_features; i++)
        if (strcmp(ae->features[i], "pass_on") == 0)
            *ret_features |= SESSION_FEATURE_PASS_ON;
    *ret_st = st;
    st = NULL;
    rc = 0;
out:
    pthread_mutex_lock(&s->mu);
    s->attaching = NULL;
    pthread_mutex_unlock(&s->mu);
    if (ae != NULL)
        protobuf_c_message_free_unpacked(&ae->base, NULL);
    wire_stream_free(st);
    return rc;
}

/* Start the keeper with every signal blocked: signals are the
 * application's business, not this thread's. */
static int session_start_thread_(struct session *s) {
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&s->thread, NULL, session_thread_, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc == 0 ? 0 : -rc;
}

/* The end of the reconnect window, or 0 when calls must not wait (mu
 * held). */
static int64_t session_window_end_(const struct session *s) {
    if (!s->reached || s->reconnect_ms == 0)
        return 0;
    if (s->down_since == 0)
        return clock_mono_ms() + s->reconnect_ms;
    return s->down_since + s->reconnect_ms;
}

int session_acquire(struct session *s, int attach, int64_t deadline_ms,
                    struct wire_channel **ret_channel, uint64_t *ret_session_id,
                    uint64_t *ret_generation) {
    int rc = 0;
    pthread_mutex_lock(&s->mu);
    if (s->pid != getpid())
        session_forget_(s);
    if (s->channel == NULL) {
        rc = wire_channel_new(s->target, &s->channel);
        if (rc < 0)
            goto out;
    }
    if (attach && s->attach_channel == NULL) {
        rc = wire_channel_new(s->target, &s->attach_channel);
        if (rc < 0)
            goto out;
    }
    while (attach && s->state != SESSION_ATTACHED) {
        if (s->state == SESSION_ATTACHING) {
            if (clock_mono_ms() >= deadline_ms) {
                wire_set_error("attach to detd at '%s': no answer before "
                               "the deadline",
                               s->target);
                rc = DETD_ETIMEDOUT;
                goto out;
            }
            session_wait_until_(s, deadline_ms);
            continue;
        }
        if (s->keeper_running) {
            /* The keeper is reconnecting: wait for its next attempt,
             * within the caller's deadline and the reconnect window. */
            int64_t until = session_window_end_(s);
            if (until > deadline_ms)
                until = deadline_ms;
            uint64_t seen = s->attach_failures;
            while (s->state == SESSION_IDLE && s->keeper_running &&
                   s->attach_failures == seen && clock_mono_ms() < until)
                session_wait_until_(s, until);
            if (s->state != SESSION_IDLE || !s->keeper_running)
                continue; /* attached, or attaching: look again */
            rc = s->last_err != 0 ? s->last_err : DETD_ECONNECT;
            wire_set_error("%s", s->last_msg[0] != '\0'
                                     ? s->last_msg
                                     : "the attach stream was lost");
            goto out;
        }
        /* Idle without a keeper (first use, after fork, or the keeper
         * ended): this thread attaches and starts the keeper. */
        s->state = SESSION_ATTACHING;
        int joinable = s->thread_joinable;
        s->thread_joinable = 0;
        struct wire_channel *ch = s->attach_channel;
        pthread_mutex_unlock(&s->mu);
        if (joinable)
            pthread_join(s->thread, NULL);
        struct wire_stream *st = NULL;
        uint64_t sid = 0;
        uint32_t lease = 0, features = 0;
        rc = session_attach_(s, ch, deadline_ms, &st, &sid, &lease, &features);
        pthread_mutex_lock(&s->mu);
        if (rc < 0) {
            /* The next attempt gets a fresh channel: this one keeps gRPC's
             * connect backoff and would fail at once, for up to a second
             * after a daemon serves (only the attacher uses it). */
            session_renew_(s, &s->attach_channel, 0);
            s->state = SESSION_IDLE;
            pthread_cond_broadcast(&s->cond);
            goto out;
        }
        session_install_(s, st, sid, lease, features);
        s->keeper_running = 1;
        rc = session_start_thread_(s);
        if (rc < 0) {
            /* No keeper: give up this stream, report the failure. */
            s->keeper_running = 0;
            s->stream = NULL;
            s->state = SESSION_IDLE;
            s->session_id = 0;
            pthread_cond_broadcast(&s->cond);
            pthread_mutex_unlock(&s->mu);
            wire_stream_free(st);
            wire_set_error("cannot start the attach thread");
            return rc;
        }
        s->thread_joinable = 1;
    }
    *ret_channel = s->channel;
    *ret_session_id = s->state == SESSION_ATTACHED ? s->session_id : 0;
    if (ret_generation != NULL)
        *ret_generation = s->state == SESSION_ATTACHED ? s->generation : 0;
out:
    pthread_mutex_unlock(&s->mu);
    return rc;
}

void session_peek(struct session *s, uint64_t *ret_session_id,
                  uint64_t *ret_generation) {
    pthread_mutex_lock(&s->mu);
    int mine = s->pid == getpid() && s->state == SESSION_ATTACHED;
    *ret_session_id = mine ? s->session_id : 0;
    *ret_generation = mine ? s->generation : 0;
    pthread_mutex_unlock(&s->mu);
}

uint32_t session_features(struct session *s) {
    pthread_mutex_lock(&s->mu);
    int mine = s->pid == getpid() && s->state == SESSION_ATTACHED;
    uint32_t f = mine ? s->features : 0;
    pthread_mutex_unlock(&s->mu);
    return f;
}

void session_note(struct session *s, int ok) {
    pthread_mutex_lock(&s->mu);
    if (ok) {
        s->reached = 1;
        s->down_since = 0;
    } else {
        session_down_(s);
    }
    pthread_mutex_unlock(&s->mu);
}

int session_may_wait(struct session *s, int64_t *ret_until,
                     int64_t *ret_down_ms) {
    pthread_mutex_lock(&s->mu);
    int64_t until = session_window_end_(s);
    int64_t now = clock_mono_ms();
    int64_t down = s->down_since != 0 ? now - s->down_since : 0;
    pthread_mutex_unlock(&s->mu);
    if (ret_until != NULL)
        *ret_until = until;
    if (ret_down_ms != NULL)
        *ret_down_ms = down;
    return until != 0 && now < until;
}

struct detd_key *session_key_dup(const struct detd_key *k) {
    const char *str[4] = {k->namespace_, k->arch, k->kernel, k->key};
    size_t need = sizeof(struct detd_key) + k->n_candidates * sizeof(char *);
    for (unsigned i = 0; i < 4; i++)
        need += str[i] != NULL ? strlen(str[i]) + 1 : 0;
    need += k->table_key != NULL ? strlen(k->table_key) + 1 : 0;
    for (size_t i = 0; i < k->n_candidates; i++)
        need += strlen(k->candidates[i]) + 1;
    struct detd_key *d = malloc(need);
    if (d == NULL)
        return NULL;
    const char **cands = (const char **)(d + 1);
    char *p = (char *)(cands + k->n_candidates);
#define SESSION_COPY_(dst, src)                                                \
    do {                                                                       \
        (dst) = NULL;                                                          \
        if ((src) != NULL) {                                                   \
            size_t n_ = strlen(src) + 1;                                       \
            memcpy(p, (src), n_);                                              \
            (dst) = p;                                                         \
            p += n_;                                                           \
        }                                                                      \
    } while (0)
    SESSION_COPY_(d->namespace_, k->namespace_);
    SESSION_COPY_(d->arch, k->arch);
    SESSION_COPY_(d->kernel, k->kernel);
    SESSION_COPY_(d->key, k->key);
    SESSION_COPY_(d->table_key, k->table_key);
    for (size_t i = 0; i < k->n_candidates; i++)
        SESSION_COPY_(cands[i], k->candidates[i]);
#undef SESSION_COPY_
    d->candidates = cands;
    d->n_candidates = k->n_candidates;
    return d;
}

void session_set_reclaim(struct session *s, session_reclaim_cb cb, void *user) {
    pthread_mutex_lock(&s->mu);
    s->reclaim = cb;
    s->reclaim_user = user;
    pthread_mutex_unlock(&s->mu);
}

void session_claim_note(struct session *s, uint64_t claim_id,
                        uint64_t generation, const struct detd_key *key) {
    struct detd_key *copy = key != NULL ? session_key_dup(key) : NULL;
    pthread_mutex_lock(&s->mu);
    unsigned slot = SESSION_CLAIMS;
    for (unsigned i = 0; i < SESSION_CLAIMS; i++)
        if (s->claims[i].claim_id == claim_id) {
            slot = i;
            break;
        }
    if (slot == SESSION_CLAIMS) {
        slot = s->claims_next;
        s->claims_next = (s->claims_next + 1) % SESSION_CLAIMS;
    }
    struct detd_key *old = s->claims[slot].key;
    s->claims[slot].claim_id = claim_id;
    s->claims[slot].generation = generation;
    s->claims[slot].renewed_id = 0;
    s->claims[slot].renewed_gen = 0;
    s->claims[slot].key = copy;
    pthread_mutex_unlock(&s->mu);
    free(old);
}

int session_claim_find(struct session *s, uint64_t claim_id, int forget,
                       uint64_t *ret_generation) {
    int found = 0;
    struct detd_key *gone = NULL;
    pthread_mutex_lock(&s->mu);
    for (unsigned i = 0; i < SESSION_CLAIMS && claim_id != 0; i++)
        if (s->claims[i].claim_id == claim_id) {
            *ret_generation = s->claims[i].generation;
            if (forget) {
                s->claims[i].claim_id = 0;
                gone = s->claims[i].key;
                s->claims[i].key = NULL;
            }
            found = 1;
            break;
        }
    pthread_mutex_unlock(&s->mu);
    free(gone);
    return found;
}

int session_claim_current(struct session *s, uint64_t claim_id,
                          uint64_t claim_gen, uint64_t gen, int64_t deadline_ms,
                          uint64_t *ret_id) {
    if (gen == claim_gen) {
        *ret_id = claim_id;
        return 1;
    }
    int found = 0;
    pthread_mutex_lock(&s->mu);
    while (s->renewing_gen == gen && s->generation == gen &&
           clock_mono_ms() < deadline_ms)
        session_wait_until_(s, deadline_ms);
    for (unsigned i = 0; i < SESSION_CLAIMS && claim_id != 0; i++)
        if (s->claims[i].claim_id == claim_id) {
            if (s->claims[i].renewed_gen == gen &&
                s->claims[i].renewed_id != 0) {
                *ret_id = s->claims[i].renewed_id;
                found = 1;
            }
            break;
        }
    pthread_mutex_unlock(&s->mu);
    return found;
}

void session_invalidate(struct session *s, uint64_t session_id) {
    pthread_mutex_lock(&s->mu);
    if (s->pid == getpid() && s->state == SESSION_ATTACHED &&
        s->session_id == session_id && s->stream != NULL)
        wire_stream_cancel(s->stream);
    pthread_mutex_unlock(&s->mu);
}
