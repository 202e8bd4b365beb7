/* libdetd's public API: see include/detd/client.h for the contracts. */
#define _GNU_SOURCE
#include "detd/client.h"
#include "clock.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "detd.pb-c.h"
#include "client_int.h"
#include "session.h"
#include "wire.h"

#define CLIENT_CONNECT_TIMEOUT_MS 5000
#define CLIENT_DECIDE_TIMEOUT_MS (10 * 60 * 1000)
/* Retries of a call the daemon asked to make again (no outage). */
#define CLIENT_MAX_AGAIN 16
/* The keeper's ask for a claim it takes again after a re-attach. */
#define CLIENT_RECLAIM_TIMEOUT_MS 2000

static char *client_strdup_or_empty_(const char *s) {
    return strdup(s != NULL ? s : "");
}

static void client_identity_free_(Detd__V1__ClientIdentity *id) {
    free(id->host);
    free(id->device_name);
    free(id->arch);
    free(id->client_version);
    free(id->job);
}

/* An integer launcher variable (RANK, WORLD_SIZE, ...), or dflt when it
 * is unset or not an integer. */
static int32_t client_env_int_(const char *name, int32_t dflt) {
    const char *v = getenv(name);
    if (v == NULL || v[0] == '\0')
        return dflt;
    char *end = NULL;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (errno != 0 || *end != '\0' || n < INT32_MIN || n > INT32_MAX)
        return dflt;
    return (int32_t)n;
}

/* The job label when the caller gave none: $DETD_JOB, else the
 * launcher's run id (torchrun, Slurm), as the Python package reads it. */
static const char *client_env_job_(void) {
    static const char *const vars[] = {"DETD_JOB", "TORCHELASTIC_RUN_ID",
                                       "SLURM_JOB_ID"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v != NULL && v[0] != '\0')
            return v;
    }
    return NULL;
}

static int client_identity_init_(Detd__V1__ClientIdentity *id,
                                 const struct detd_identity *in) {
    Detd__V1__ClientIdentity init = DETD__V1__CLIENT_IDENTITY__INIT;
    char host[HOST_NAME_MAX + 1] = "";
    *id = init;
    if (in == NULL || in->host == NULL) {
        if (gethostname(host, sizeof(host)) != 0)
            host[0] = '\0';
        host[sizeof(host) - 1] = '\0';
    }
    id->host = strdup(in != NULL && in->host != NULL ? in->host : host);
    /* Unknown: what the launcher says (torchrun's variables). */
    id->rank =
        in != NULL && in->rank >= 0 ? in->rank : client_env_int_("RANK", -1);
    id->local_rank = in != NULL && in->local_rank >= 0
                         ? in->local_rank
                         : client_env_int_("LOCAL_RANK", -1);
    id->world_size = in != NULL && in->world_size > 0
                         ? in->world_size
                         : client_env_int_("WORLD_SIZE", 0);
    id->sm_count = in != NULL ? in->sm_count : 0;
    id->device_name = client_strdup_or_empty_(in ? in->device_name : NULL);
    id->arch = client_strdup_or_empty_(in ? in->arch : NULL);
    id->job = client_strdup_or_empty_(
        in != NULL && in->job != NULL ? in->job : client_env_job_());
    id->client_version = strdup(detd_version());
    if (id->host == NULL || id->device_name == NULL || id->arch == NULL ||
        id->job == NULL || id->client_version == NULL) {
        client_identity_free_(id);
        return DETD_ENOMEM;
    }
    return 0;
}

/* The reconnect window from $DETD_RECONNECT_MS, when set. */
static int client_reconnect_ms_(uint32_t *ms) {
    const char *env = getenv("DETD_RECONNECT_MS");
    if (env == NULL || env[0] == '\0')
        return 0;
    char *end = NULL;
    errno = 0;
    unsigned long v = strtoul(env, &end, 10);
    if (errno != 0 || *end != '\0' || env[0] == '-' ||
        v > DETD_RECONNECT_MAX_MS) {
        wire_set_error("DETD_RECONNECT_MS='%.40s' is not a number of "
                       "milliseconds from 0 to %d",
                       env, DETD_RECONNECT_MAX_MS);
        return DETD_EINVAL;
    }
    *ms = (uint32_t)v;
    return 0;
}

DETD_EXPORT const char *detd_client_default_socket(void) {
    return wire_default_socket();
}

/* The keeper's ask for a claim it takes again after a re-attach
 * (session_reclaim_cb; user: the detd_client): a Decide under the new
 * session that waits for nobody. */
static int client_reclaim_(void *user, struct wire_channel *ch, uint64_t sid,
                           const struct detd_key *key, uint64_t *ret_claim) {
    const detd_client *c = user;
    Detd__V1__DecideResponse *resp = NULL;
    struct client_head h;
    client_head_init(c, key, &h);
    Detd__V1__DecideRequest req = DETD__V1__DECIDE_REQUEST__INIT;
    req.api_version = DETD_API_VERSION;
    req.client = &h.id;
    req.session_id = sid;
    req.key = &h.km;
    req.wait_ms = 1;
    int rc = wire_unary(ch, WIRE_METHOD_DECIDE, &req.base,
                        &detd__v1__decide_response__descriptor,
                        CLIENT_RECLAIM_TIMEOUT_MS, (ProtobufCMessage **)&resp);
    if (rc < 0)
        return rc;
    rc = 0;
    if (resp->outcome == DETD__V1__OUTCOME__OUTCOME_DESIGNATED &&
        resp->claim_id != 0) {
        *ret_claim = resp->claim_id;
        rc = 1;
    }
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    return rc;
}

DETD_EXPORT int detd_client_open(const char *socket_path,
                                 const struct detd_identity *identity,
                                 detd_client **ret_client) {
    struct detd_client *c = NULL;
    char *target = NULL;
    int rc;

    wire_set_error(NULL);
    if (ret_client == NULL) {
        wire_set_error("ret_client is NULL");
        return DETD_EINVAL;
    }
    if (socket_path == NULL)
        socket_path = detd_client_default_socket();
    if (socket_path[0] == '\0') {
        wire_set_error("the socket path is empty");
        return DETD_EINVAL;
    }
    size_t max = sizeof(((struct sockaddr_un *)0)->sun_path) - 1;
    if (strlen(socket_path) > max) {
        wire_set_error("socket path '%s' exceeds %zu bytes", socket_path, max);
        return DETD_EINVAL;
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL)
        return DETD_ENOMEM;
    c->socket_path = strdup(socket_path);
    if (c->socket_path == NULL ||
        asprintf(&target, "unix:%s", socket_path) < 0) {
        target = NULL;
        rc = DETD_ENOMEM;
        goto fail_path;
    }
    rc = client_identity_init_(&c->identity, identity);
    if (rc < 0)
        goto fail_path;
    uint32_t reconnect_ms = DETD_RECONNECT_DEFAULT_MS;
    rc = client_reconnect_ms_(&reconnect_ms);
    if (rc < 0)
        goto fail_identity;
    rc = session_init(&c->session, target, &c->identity, reconnect_ms);
    if (rc < 0)
        goto fail_identity;
    session_set_reclaim(&c->session, client_reclaim_, c);
    free(target);
    *ret_client = c;
    return 0;
fail_identity:
    client_identity_free_(&c->identity);
fail_path:
    free(target);
    free(c->socket_path);
    free(c);
    return rc;
}

DETD_EXPORT void detd_client_close(detd_client *client) {
    if (client == NULL)
        return;
    session_destroy(&client->session);
    client_identity_free_(&client->identity);
    free(client->socket_path);
    free(client->device);
    free(client);
}

DETD_EXPORT const char *detd_client_socket(const detd_client *client) {
    return client != NULL ? client->socket_path : NULL;
}

DETD_EXPORT const char *detd_client_last_error(void) {
    return wire_last_error();
}

/* See client_int.h: gRPC's reason is kept. */
int client_conn_err(const detd_client *c, int rc) {
    if (rc == DETD_ECONNECT || rc == DETD_EUNAVAILABLE) {
        char detail[400];
        snprintf(detail, sizeof(detail), "%s", wire_last_error());
        wire_set_error("cannot reach detd at '%s': %s", c->socket_path,
                       detail[0] != '\0' ? detail : detd_strerror(rc));
    }
    return rc;
}

DETD_EXPORT int detd_client_connect(detd_client *client, int64_t timeout_ms) {
    wire_set_error(NULL);
    if (client == NULL) {
        wire_set_error("client is NULL");
        return DETD_EINVAL;
    }
    if (timeout_ms <= 0)
        timeout_ms = CLIENT_CONNECT_TIMEOUT_MS;
    struct wire_channel *ch;
    uint64_t sid;
    int rc = session_acquire(&client->session, 1, clock_mono_ms() + timeout_ms,
                             &ch, &sid, NULL);
    return client_conn_err(client, rc);
}

/* See client_int.h. */
int client_check_key(const struct detd_key *k) {
    if (k == NULL) {
        wire_set_error("key is NULL");
        return DETD_EINVAL;
    }
    if (k->arch == NULL || k->kernel == NULL || k->key == NULL) {
        wire_set_error("key: %s is NULL", k->arch == NULL     ? "arch"
                                          : k->kernel == NULL ? "kernel"
                                                              : "key");
        return DETD_EINVAL;
    }
    size_t n = strlen(k->key);
    if (n > DETD_MAX_KEY_BYTES) {
        wire_set_error("key exceeds %d bytes (%zu)", DETD_MAX_KEY_BYTES, n);
        return DETD_ELIMIT;
    }
    if (k->table_key != NULL && strlen(k->table_key) > DETD_MAX_KEY_BYTES) {
        wire_set_error("table_key exceeds %d bytes (%zu)", DETD_MAX_KEY_BYTES,
                       strlen(k->table_key));
        return DETD_ELIMIT;
    }
    if (k->n_candidates > DETD_MAX_CANDIDATES) {
        wire_set_error("%zu candidates exceed the limit of %d", k->n_candidates,
                       DETD_MAX_CANDIDATES);
        return DETD_ELIMIT;
    }
    if (k->n_candidates == 0 || k->candidates == NULL) {
        wire_set_error("key has no candidates");
        return DETD_EINVAL;
    }
    for (size_t i = 0; i < k->n_candidates; i++) {
        if (k->candidates[i] == NULL) {
            wire_set_error("candidate %zu is NULL", i);
            return DETD_EINVAL;
        }
    }
    return 0;
}

/* A protobuf view of k; borrows k's strings (protobuf-c wants char *). */
static Detd__V1__DecisionKey client_key_msg_(const struct detd_key *k) {
    Detd__V1__DecisionKey m = DETD__V1__DECISION_KEY__INIT;
    if (k->namespace_ != NULL)
        m.namespace_ = (char *)k->namespace_;
    m.arch = (char *)k->arch;
    m.kernel = (char *)k->kernel;
    m.key = (char *)k->key;
    m.n_candidates = k->n_candidates;
    m.candidates = (char **)k->candidates;
    if (k->table_key != NULL)
        m.table_key = (char *)k->table_key;
    return m;
}

/* See client_int.h. */
void client_head_init(const detd_client *c, const struct detd_key *key,
                      struct client_head *ret) {
    ret->id = c->identity;
    ret->id.pid = (int32_t)getpid(); /* the caller's, after a fork too */
    ret->km = client_key_msg_(key);
}

static char *client_dup_nonempty_(const char *s) {
    return s != NULL && s[0] != '\0' ? strdup(s) : NULL;
}

/* See client_int.h. */
int client_answer_new(detd_outcome outcome, const Detd__V1__Decision *d,
                      struct detd_answer **ret) {
    struct detd_answer *a = calloc(1, sizeof(*a));
    if (a == NULL)
        return DETD_ENOMEM;
    a->outcome = outcome;
    a->decided_by_rank = -1;
    if (d != NULL) {
        a->source = (detd_source)d->source;
        a->config = client_dup_nonempty_(d->config);
        a->decision_id = client_dup_nonempty_(d->id);
        if ((d->config[0] != '\0' && a->config == NULL) ||
            (d->id[0] != '\0' && a->decision_id == NULL))
            goto nomem;
        if (d->decided_by != NULL) {
            a->decided_by_host = client_dup_nonempty_(d->decided_by->host);
            if (d->decided_by->host[0] != '\0' && a->decided_by_host == NULL)
                goto nomem;
            a->decided_by_rank = d->decided_by->rank;
            a->decided_by_pid = d->decided_by->pid;
        }
    }
    *ret = a;
    return 0;
nomem:
    detd_answer_free(a);
    return DETD_ENOMEM;
}

/* See client_int.h. */
int64_t client_timeout(int64_t timeout_ms, int64_t dflt) {
    return timeout_ms > 0 ? timeout_ms : dflt;
}

/* See client_int.h. */
int client_acquire(detd_client *c, int attach, int64_t deadline,
                   struct wire_channel **ch, uint64_t *sid, uint64_t *gen) {
    int64_t attach_deadline = deadline;
    if (attach_deadline - clock_mono_ms() > CLIENT_CONNECT_TIMEOUT_MS * 2)
        attach_deadline = clock_mono_ms() + CLIENT_CONNECT_TIMEOUT_MS * 2;
    int rc =
        session_acquire(&c->session, attach, attach_deadline, ch, sid, gen);
    /* An attach that got no answer in time, with time left in the call
     * or within the reconnect window: a daemon that accepts but does not
     * serve yet (starting, or its socket held by systemd) is not there. */
    if (rc == DETD_ETIMEDOUT && (clock_mono_ms() < deadline ||
                                 session_may_wait(&c->session, NULL, NULL)))
        rc = DETD_EUNAVAILABLE;
    return rc;
}

/* What a failed attempt of a call means for the next one. */
enum client_failure {
    CLIENT_FINAL,   /* an answer: return it */
    CLIENT_AGAIN,   /* the daemon asks to ask again (no outage) */
    CLIENT_SESSION, /* the daemon does not know our session: re-attach */
    CLIENT_GONE,    /* no daemon (refused, socket gone, connection lost,
                       draining): wait for it within the window */
};

static enum client_failure client_classify_(int rc) {
    const char *m = wire_last_error();
    switch (rc) {
    case DETD_ECONNECT:
        return CLIENT_GONE;
    case DETD_EUNAVAILABLE:
        /* The daemon's own verdict on etcd ("apply on_miss") is final;
         * matched on its words, not on any "etcd" (a store path may hold
         * it: a store write failure is retried). */
        if (strstr(m, "etcd unreachable") != NULL ||
            strstr(m, "etcd did not answer") != NULL)
            return CLIENT_FINAL;
        if (strstr(m, "passed to another rank") != NULL)
            return CLIENT_AGAIN;
        return CLIENT_GONE; /* shutting down, or the transport broke */
    case DETD_ESTALE:
        return strstr(m, "session") != NULL ? CLIENT_SESSION : CLIENT_FINAL;
    case DETD_ECANCELLED:
        /* libdetd never cancels its own unary calls: a cancelled call was
         * cut by a daemon going away (a draining server cancels what is
         * still open), unless the daemon says a newer call replaced it. */
        return strstr(m, "replaced") != NULL ? CLIENT_FINAL : CLIENT_GONE;
    default:
        return CLIENT_FINAL;
    }
}

/* Sleep until until (clock_mono_ms()); no-op when past. */
static void client_sleep_until_(int64_t until) {
    int64_t d = until - clock_mono_ms();
    if (d > 0) {
        struct timespec ts = {(time_t)(d / 1000), (long)(d % 1000) * 1000000};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
    }
}

/* Sleep a jittered *delay_ms (never past until), then double it up to
 * SESSION_BACKOFF_MAX_MS. */
static void client_backoff_(int64_t *delay_ms, int64_t until) {
    int64_t d = session_jitter_ms(*delay_ms);
    int64_t left = until - clock_mono_ms();
    client_sleep_until_(clock_mono_ms() + (d < left ? d : left));
    *delay_ms = *delay_ms * 2 > SESSION_BACKOFF_MAX_MS ? SESSION_BACKOFF_MAX_MS
                                                       : *delay_ms * 2;
}

/* See client_int.h. */
void client_retry_init(struct client_retry *r, int64_t deadline) {
    r->deadline = deadline;
    r->delay_ms = SESSION_BACKOFF_FIRST_MS;
    r->again = 0;
}

/* See client_int.h. */
int client_gone(int rc) {
    return client_classify_(rc) == CLIENT_GONE;
}

/* See client_int.h. */
int client_retry(detd_client *c, struct client_retry *r, int rc, uint64_t sid) {
    switch (client_classify_(rc)) {
    case CLIENT_FINAL:
        return 0;
    case CLIENT_SESSION:
        if (sid != 0)
            session_invalidate(&c->session, sid);
        /* The keeper attaches again meanwhile. */
        __attribute__((fallthrough));
    case CLIENT_AGAIN:
        if (r->again++ >= CLIENT_MAX_AGAIN || clock_mono_ms() >= r->deadline)
            return 0;
        if (r->again > 1)
            client_backoff_(&r->delay_ms, r->deadline);
        return clock_mono_ms() < r->deadline;
    case CLIENT_GONE:
    default: {
        session_note(&c->session, 0);
        int64_t until = 0, down = 0;
        char detail[400];
        snprintf(detail, sizeof(detail), "%s", wire_last_error());
        if (session_may_wait(&c->session, &until, &down) &&
            clock_mono_ms() < r->deadline) {
            client_backoff_(&r->delay_ms,
                            until < r->deadline ? until : r->deadline);
            session_may_wait(&c->session, &until, &down);
        }
        wire_set_error("%s", detail);
        int64_t now = clock_mono_ms();
        if (until != 0 && now >= until) {
            /* reached before, gone for longer than the window */
            wire_set_error("%s (no daemon for %lld ms, over the reconnect "
                           "window of %u ms)",
                           detail, (long long)down, c->session.reconnect_ms);
            return 0;
        }
        return until != 0 && now < r->deadline;
    }
    }
}

/* See client_int.h. */
int client_pack_timings(const struct detd_timing *timings, size_t n,
                        Detd__V1__CandidateTiming **ret_tm,
                        Detd__V1__CandidateTiming ***ret_tmp) {
    *ret_tm = NULL;
    *ret_tmp = NULL;
    if (n > DETD_MAX_CANDIDATES) {
        wire_set_error("%zu timings exceed the limit of %d", n,
                       DETD_MAX_CANDIDATES);
        return DETD_ELIMIT;
    }
    for (size_t i = 0; i < n; i++) {
        if (timings[i].config == NULL ||
            (timings[i].ms == NULL && timings[i].n_ms > 0)) {
            wire_set_error("timing %zu: %s is NULL", i,
                           timings[i].config == NULL ? "config" : "ms");
            return DETD_EINVAL;
        }
    }
    if (n == 0)
        return 0;
    Detd__V1__CandidateTiming *tm = calloc(n, sizeof(*tm));
    Detd__V1__CandidateTiming **tmp = calloc(n, sizeof(*tmp));
    if (tm == NULL || tmp == NULL) {
        free(tm);
        free(tmp);
        return DETD_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        Detd__V1__CandidateTiming init = DETD__V1__CANDIDATE_TIMING__INIT;
        tm[i] = init;
        tm[i].config = (char *)timings[i].config;
        tm[i].n_ms = timings[i].n_ms;
        tm[i].ms = (double *)timings[i].ms;
        tm[i].failed = timings[i].failed != 0;
        tmp[i] = &tm[i];
    }
    *ret_tm = tm;
    *ret_tmp = tmp;
    return 0;
}

/*
 * The daemon's final word on a key comes as FAILED_PRECONDITION, which
 * the wire maps to DETD_ESTALE ("claim no longer held": wrong for a
 * Decide): the key's pass failed for every candidate (kept), or it could
 * not run in its timing process's environment (given back). Matched on
 * the daemon's words (daemon/app/decide.c).
 */
static int client_verdict_(int rc) {
    const char *m = wire_last_error();
    if (rc != DETD_ESTALE)
        return rc;
    if (strstr(m, "no candidate has a valid timing") != NULL)
        return DETD_ENOCAND;
    if (strstr(m, "could not run in the environment of") != NULL)
        return DETD_EENV;
    return rc;
}

DETD_EXPORT int detd_decide(detd_client *client, const struct detd_key *key,
                            int flags, int64_t timeout_ms,
                            struct detd_answer **ret_answer) {
    Detd__V1__DecideResponse *resp = NULL;
    int rc;

    wire_set_error(NULL);
    if (client == NULL || ret_answer == NULL) {
        wire_set_error("%s is NULL", client == NULL ? "client" : "ret_answer");
        return DETD_EINVAL;
    }
    if ((flags & ~(DETD_DECIDE_NO_CLAIM | DETD_DECIDE_SHARE |
                   DETD_DECIDE_BENCH | DETD_DECIDE_WAIT_ONLY)) != 0) {
        wire_set_error("unknown flags 0x%x", (unsigned)flags);
        return DETD_EINVAL;
    }
    if ((flags & DETD_DECIDE_BENCH) != 0 && (flags & DETD_DECIDE_SHARE) == 0) {
        wire_set_error("flags: DETD_DECIDE_BENCH needs DETD_DECIDE_SHARE");
        return DETD_EINVAL;
    }
    rc = client_check_key(key);
    if (rc < 0)
        return rc;
    int64_t timeout = client_timeout(timeout_ms, CLIENT_DECIDE_TIMEOUT_MS);
    int64_t deadline = clock_mono_ms() + timeout;

    struct client_retry retry;
    client_retry_init(&retry, deadline);
    uint64_t gen = 0;
    int away = 0; /* the deadline passed while the daemon was away */
    for (;;) {
        struct wire_channel *ch;
        uint64_t sid = 0;
        rc = client_acquire(client, 1, deadline, &ch, &sid, &gen);
        if (rc == 0) {
            int64_t left = deadline - clock_mono_ms();
            if (left <= 0) {
                wire_set_error("decide: the deadline passed while attaching");
                rc = DETD_ETIMEDOUT;
                away = session_may_wait(&client->session, NULL, NULL);
                break;
            }
            struct client_head h;
            client_head_init(client, key, &h);
            Detd__V1__DecideRequest req = DETD__V1__DECIDE_REQUEST__INIT;
            req.api_version = DETD_API_VERSION;
            req.client = &h.id;
            req.session_id = sid;
            req.key = &h.km;
            req.no_claim = (flags & DETD_DECIDE_NO_CLAIM) != 0;
            req.share = (flags & DETD_DECIDE_SHARE) != 0;
            req.wait_only = (flags & DETD_DECIDE_WAIT_ONLY) != 0;
            /* Without a device the offer means nothing (client.h). */
            if ((flags & DETD_DECIDE_BENCH) != 0 && client->device != NULL) {
                req.bench = 1;
                req.device = client->device;
            }
            /* Let the daemon answer OUTCOME_TIMEOUT before our deadline:
             * a tenth of it, at least 250 ms (half of a shorter one) so
             * that a loaded machine's scheduling does not turn the answer
             * of a short last slice into a deadline with no answer. */
            int64_t margin = left / 10 < 1000 ? left / 10 : 1000;
            if (margin < 250)
                margin = left / 2 < 250 ? left / 2 : 250;
            req.wait_ms =
                (uint32_t)(left - margin > UINT32_MAX ? UINT32_MAX
                                                      : left - margin);
            rc = wire_unary(ch, WIRE_METHOD_DECIDE, &req.base,
                            &detd__v1__decide_response__descriptor, left,
                            (ProtobufCMessage **)&resp);
            if (rc == 0) {
                session_note(&client->session, 1);
                break;
            }
        }
        /* Decide is idempotent: ask again across a restart. */
        if (!client_retry(client, &retry, rc, sid)) {
            /* ETIMEDOUT: the call's own deadline (its timeout is what
             * was left of it), whatever the clocks' rounding says. */
            away = (rc == DETD_ETIMEDOUT ||
                    (client_gone(rc) && clock_mono_ms() >= deadline)) &&
                   session_may_wait(&client->session, NULL, NULL);
            break;
        }
    }
    if (rc < 0 && away) {
        /* The caller's deadline came before any answer, within the
         * reconnect window (the daemon away, starting, just back or not
         * answering): a wait that ended (ask again), not an error. */
        struct detd_answer *a = NULL;
        rc = client_answer_new(DETD_OUTCOME_TIMEOUT, NULL, &a);
        if (rc < 0)
            return rc;
        a->holder_rank = -1;
        a->daemon_away = 1;
        a->waited_ms = (uint32_t)(timeout > UINT32_MAX ? UINT32_MAX : timeout);
        wire_set_error(NULL);
        *ret_answer = a;
        return 0;
    }
    if (rc < 0)
        return client_conn_err(client, client_verdict_(rc));

    switch (resp->outcome) {
    case DETD__V1__OUTCOME__OUTCOME_DECIDED:
        if (resp->decision == NULL || resp->decision->config[0] == '\0') {
            wire_set_error("decide: DECIDED without a config");
            rc = DETD_EPROTO;
            goto out;
        }
        break;
    case DETD__V1__OUTCOME__OUTCOME_DESIGNATED:
        if (resp->claim_id == 0) {
            wire_set_error("decide: DESIGNATED without a claim");
            rc = DETD_EPROTO;
            goto out;
        }
        if ((flags & DETD_DECIDE_WAIT_ONLY) != 0) {
            /* A daemon older than 0.8 ignores wait_only. */
            wire_set_error("decide: designated although DETD_DECIDE_WAIT_ONLY "
                           "was asked (a daemon older than 0.8); claim %" PRIu64
                           " ends at its pass deadline",
                           resp->claim_id);
            rc = DETD_EPROTO;
            goto out;
        }
        break;
    case DETD__V1__OUTCOME__OUTCOME_MISS:
    case DETD__V1__OUTCOME__OUTCOME_TIMEOUT:
        break;
    default:
        wire_set_error("decide: unknown outcome %d", (int)resp->outcome);
        rc = DETD_EPROTO;
        goto out;
    }
    struct detd_answer *a = NULL;
    rc = client_answer_new((detd_outcome)resp->outcome, resp->decision, &a);
    if (rc < 0)
        goto out;
    a->claim_id = resp->claim_id;
    if (a->outcome == DETD_OUTCOME_DESIGNATED)
        session_claim_note(&client->session, a->claim_id, gen, key);
    a->lease_ms = resp->lease_ms;
    a->takeover = resp->takeover != 0;
    a->waited_ms = resp->waited_ms;
    a->holder_rank = -1;
    if (resp->outcome == DETD__V1__OUTCOME__OUTCOME_TIMEOUT) {
        a->holder_host = client_dup_nonempty_(resp->holder_host);
        if (resp->holder_host[0] != '\0' && a->holder_host == NULL) {
            detd_answer_free(a);
            rc = DETD_ENOMEM;
            goto out;
        }
        if (a->holder_host != NULL) {
            a->holder_rank = resp->holder_rank;
            a->holder_pid = resp->holder_pid;
            a->held_ms = resp->held_ms;
        }
        a->share_index = resp->share_index;
        a->bench = resp->share_index != 0 && resp->bench;
    }
    *ret_answer = a;
out:
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    return rc;
}

DETD_EXPORT int detd_observe(detd_client *client, const struct detd_key *key,
                             const char *config, detd_source source, int flags,
                             int64_t timeout_ms) {
    if ((flags & DETD_OBSERVE_FAILED) != 0) {
        wire_set_error("unknown flags 0x%x", (unsigned)flags);
        return DETD_EINVAL;
    }
    return detd_observe_ex(client, key, config, source, flags, NULL,
                           timeout_ms);
}

DETD_EXPORT int detd_observe_ex(detd_client *client, const struct detd_key *key,
                                const char *config, detd_source source,
                                int flags,
                                const struct detd_observe_extra *extra,
                                int64_t timeout_ms) {
    ProtobufCMessage *resp = NULL;
    wire_set_error(NULL);
    if (client == NULL || config == NULL) {
        wire_set_error("%s is NULL", client == NULL ? "client" : "config");
        return DETD_EINVAL;
    }
    if ((flags & ~(DETD_OBSERVE_GOVERNED | DETD_OBSERVE_CHAOS |
                   DETD_OBSERVE_FAILED)) != 0) {
        wire_set_error("unknown flags 0x%x", (unsigned)flags);
        return DETD_EINVAL;
    }
    if (extra != NULL && (extra->size == 0 || extra->size > sizeof(*extra))) {
        wire_set_error("extra->size %zu is not sizeof(struct "
                       "detd_observe_extra) of this release (%zu)",
                       extra->size, sizeof(*extra));
        return DETD_EINVAL;
    }
    /* Members past extra->size read as zero (an older caller). */
    struct detd_observe_extra ex;
    memset(&ex, 0, sizeof ex);
    if (extra != NULL)
        memcpy(&ex, extra, extra->size);
    if ((int)ex.audit < DETD_AUDIT_NONE || (int)ex.audit > DETD_AUDIT_ERROR) {
        wire_set_error("extra->audit %d is not a detd_audit_status",
                       (int)ex.audit);
        return DETD_EINVAL;
    }
    if (ex.n_differing > 0 && ex.differing == NULL) {
        wire_set_error("extra->differing is NULL with n_differing %zu",
                       ex.n_differing);
        return DETD_EINVAL;
    }
    for (size_t i = 0; i < ex.n_differing; i++)
        if (ex.differing[i] == NULL) {
            wire_set_error("extra->differing[%zu] is NULL", i);
            return DETD_EINVAL;
        }
    if ((int)source < DETD_SOURCE_UNSPECIFIED ||
        (int)source > DETD_SOURCE_RUNTIME) {
        wire_set_error("unknown source %d", (int)source);
        return DETD_EINVAL;
    }
    int rc = client_check_key(key);
    if (rc < 0)
        return rc;
    int64_t timeout = client_timeout(timeout_ms, CLIENT_CALL_TIMEOUT_MS);
    int64_t deadline = clock_mono_ms() + timeout;
    struct client_retry retry;
    client_retry_init(&retry, deadline);
    for (;;) {
        struct wire_channel *ch;
        uint64_t sid = 0;
        rc = client_acquire(client, 0, deadline, &ch, &sid, NULL);
        if (rc == 0) {
            struct client_head h;
            client_head_init(client, key, &h);
            Detd__V1__ObserveRequest req = DETD__V1__OBSERVE_REQUEST__INIT;
            req.api_version = DETD_API_VERSION;
            req.client = &h.id;
            req.key = &h.km;
            req.config = (char *)config;
            req.source = (Detd__V1__Source)source;
            req.governed = (flags & DETD_OBSERVE_GOVERNED) != 0;
            req.chaos = (flags & DETD_OBSERVE_CHAOS) != 0;
            req.failed = (flags & DETD_OBSERVE_FAILED) != 0;
            req.error = (char *)(ex.error != NULL ? ex.error : "");
            req.why = (char *)(ex.why != NULL ? ex.why : "");
            Detd__V1__AuditResult ar = DETD__V1__AUDIT_RESULT__INIT;
            if (ex.audit != DETD_AUDIT_NONE) {
                ar.status = (Detd__V1__AuditStatus)ex.audit;
                ar.differing = (char **)ex.differing;
                ar.n_differing = ex.n_differing;
                req.audit = &ar;
            }
            int64_t left = deadline - clock_mono_ms();
            rc = wire_unary(ch, WIRE_METHOD_OBSERVE, &req.base,
                            &detd__v1__observe_response__descriptor,
                            left > 0 ? left : 1, &resp);
            if (rc == 0) {
                session_note(&client->session, 1);
                break;
            }
        }
        /* An observation is idempotent: send it again after a restart. */
        if (!client_retry(client, &retry, rc, 0))
            return client_conn_err(client, rc);
    }
    protobuf_c_message_free_unpacked(resp, NULL);
    return 0;
}

DETD_EXPORT int detd_vote(detd_client *client, const struct detd_key *key,
                          const char *config, const struct detd_timing *timings,
                          size_t n_timings, const char *triton_version,
                          const char *table_key, int64_t timeout_ms) {
    Detd__V1__CandidateTiming *tm = NULL, **tmp = NULL;
    ProtobufCMessage *resp = NULL;
    wire_set_error(NULL);
    if (client == NULL || config == NULL ||
        (timings == NULL && n_timings > 0)) {
        wire_set_error("%s is NULL", client == NULL   ? "client"
                                     : config == NULL ? "config"
                                                      : "timings");
        return DETD_EINVAL;
    }
    int rc = client_check_key(key);
    if (rc < 0)
        return rc;
    if (table_key != NULL && strlen(table_key) > DETD_MAX_KEY_BYTES) {
        wire_set_error("table_key exceeds %d bytes (%zu)", DETD_MAX_KEY_BYTES,
                       strlen(table_key));
        return DETD_ELIMIT;
    }
    rc = client_pack_timings(timings, n_timings, &tm, &tmp);
    if (rc < 0)
        return rc;
    int64_t timeout = client_timeout(timeout_ms, CLIENT_CALL_TIMEOUT_MS);
    int64_t deadline = clock_mono_ms() + timeout;
    struct client_retry retry;
    client_retry_init(&retry, deadline);
    for (;;) {
        struct wire_channel *ch;
        uint64_t sid = 0;
        rc = client_acquire(client, 0, deadline, &ch, &sid, NULL);
        if (rc == 0) {
            struct client_head h;
            client_head_init(client, key, &h);
            Detd__V1__VoteRequest req = DETD__V1__VOTE_REQUEST__INIT;
            req.api_version = DETD_API_VERSION;
            req.client = &h.id;
            req.key = &h.km;
            req.config = (char *)config;
            req.n_timings = n_timings;
            req.timings = tmp;
            if (triton_version != NULL)
                req.triton_version = (char *)triton_version;
            if (table_key != NULL)
                req.table_key = (char *)table_key;
            int64_t left = deadline - clock_mono_ms();
            rc = wire_unary(ch, WIRE_METHOD_VOTE, &req.base,
                            &detd__v1__vote_response__descriptor,
                            left > 0 ? left : 1, &resp);
            if (rc == 0) {
                session_note(&client->session, 1);
                break;
            }
        }
        /* A vote replaces this process's earlier one: send it again. */
        if (!client_retry(client, &retry, rc, 0)) {
            client_conn_err(client, rc);
            goto out;
        }
    }
    protobuf_c_message_free_unpacked(resp, NULL);
out:
    free(tmp);
    free(tm);
    return rc;
}

DETD_EXPORT void detd_answer_free(struct detd_answer *answer) {
    if (answer == NULL)
        return;
    free(answer->config);
    free(answer->decision_id);
    free(answer->decided_by_host);
    free(answer->holder_host);
    free(answer);
}

DETD_EXPORT const char *detd_version(void) {
    return DETD_VERSION;
}
