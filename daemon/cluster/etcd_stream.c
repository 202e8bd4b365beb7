/*
 * The etcd adapter's long-lived streams: Watch and LeaseKeepAlive. Each
 * runs on its own thread with its own completion queue; the stream is
 * re-opened after it breaks. Contracts are in etcd.h.
 *
 * Stopping: the owner sets stop under the mutex and cancels the published
 * call (grpc_call_cancel is thread-safe). The thread un-publishes a call
 * under the same mutex before releasing it, so a cancel never races an
 * unref, and it never opens a call once stop is set.
 */
#define _POSIX_C_SOURCE 200809L

#include <assert.h>
#include <sys/types.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "detd/error.h"
#include "clock.h"
#include "cluster/etcd.h"
#include "cluster/etcd_int.h"

#define M_WATCH "/etcdserverpb.Watch/Watch"
#define M_KEEPALIVE "/etcdserverpb.Lease/LeaseKeepAlive"
#define RECONNECT_FIRST_MS 100
#define RECONNECT_MAX_MS 2000
#define TICK_MS 100

enum { TAG_START = 1, TAG_RECV, TAG_SEND, TAG_STATUS };

/* One bidirectional call and what its pending batches write into. */
struct stream {
    grpc_completion_queue *cq;
    grpc_call *call;
    grpc_metadata md[2];
    size_t nmd;
    grpc_metadata_array init_md;
    grpc_metadata_array trail_md;
    grpc_status_code code;
    grpc_slice details;
    grpc_byte_buffer *recv;
    grpc_byte_buffer *send;
    int pending; /* batches started and not completed */
    int sending;
    int ended; /* status received */
};

/* Shared by watch and keep-alive: the stop flag and the published call. */
struct owner {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    grpc_call *call;
};

static int owner_init(struct owner *o) {
    if (clock_cond_init(&o->cv) != 0)
        return DETD_ENOMEM;
    if (pthread_mutex_init(&o->mu, NULL) != 0) {
        pthread_cond_destroy(&o->cv);
        return DETD_ENOMEM;
    }
    o->stop = 0;
    o->call = NULL;
    return 0;
}

static void owner_destroy(struct owner *o) {
    pthread_mutex_destroy(&o->mu);
    pthread_cond_destroy(&o->cv);
}

static void owner_stop(struct owner *o) {
    pthread_mutex_lock(&o->mu);
    o->stop = 1;
    if (o->call != NULL)
        grpc_call_cancel(o->call, NULL);
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
}

static int owner_stopping(struct owner *o) {
    pthread_mutex_lock(&o->mu);
    int s = o->stop;
    pthread_mutex_unlock(&o->mu);
    return s;
}

/* Sleep up to ms unless stopped; returns the stop flag. */
static int owner_wait(struct owner *o, int64_t ms) {
    struct timespec ts = clock_after(ms);
    pthread_mutex_lock(&o->mu);
    while (!o->stop && pthread_cond_timedwait(&o->cv, &o->mu, &ts) == 0)
        ;
    int s = o->stop;
    pthread_mutex_unlock(&o->mu);
    return s;
}

static void stream_op_start(struct stream *s, grpc_op *ops, size_t n,
                            intptr_t tag) {
    grpc_call_error e =
        grpc_call_start_batch(s->call, ops, n, (void *)tag, NULL);
    assert(e == GRPC_CALL_OK);
    (void)e;
    s->pending++;
}

static void stream_recv(struct stream *s) {
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &s->recv;
    stream_op_start(s, &op, 1, TAG_RECV);
}

/* Send bb (taken over) on an idle send side. */
static void stream_send(struct stream *s, grpc_byte_buffer *bb) {
    assert(!s->sending);
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_SEND_MESSAGE;
    op.data.send_message.send_message = bb;
    s->send = bb;
    s->sending = 1;
    stream_op_start(s, &op, 1, TAG_SEND);
}

/*
 * Open method on c's channel, publish the call in o, and start the
 * initial batches: metadata (+ first, taken over, if not NULL), status,
 * and the first receive. DETD_ECANCELLED if o is stopping.
 */
static int stream_open(struct stream *s, etcd_client *c, struct owner *o,
                       const char *method, const char *token,
                       grpc_byte_buffer *first) {
    pthread_mutex_lock(&o->mu);
    if (o->stop) {
        pthread_mutex_unlock(&o->mu);
        if (first != NULL)
            grpc_byte_buffer_destroy(first);
        return DETD_ECANCELLED;
    }
    s->call = grpc_channel_create_call(
        c->channel, NULL, GRPC_PROPAGATE_DEFAULTS, s->cq,
        grpc_slice_from_static_string(method), NULL,
        gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    o->call = s->call;
    pthread_mutex_unlock(&o->mu);
    if (s->call == NULL) {
        if (first != NULL)
            grpc_byte_buffer_destroy(first);
        return DETD_EINTERNAL;
    }
    etcd_md_fill(s->md, &s->nmd, token, 1);
    grpc_metadata_array_init(&s->init_md);
    grpc_metadata_array_init(&s->trail_md);
    s->details = grpc_empty_slice();
    s->code = GRPC_STATUS_UNKNOWN;
    s->recv = NULL;
    s->send = first;
    s->pending = 0;
    s->sending = first != NULL;
    s->ended = 0;

    grpc_op ops[3];
    size_t n = 0;
    memset(ops, 0, sizeof(ops));
    ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[n].data.send_initial_metadata.count = s->nmd;
    ops[n++].data.send_initial_metadata.metadata = s->md;
    if (first != NULL) {
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = first;
    }
    ops[n].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[n++].data.recv_initial_metadata.recv_initial_metadata = &s->init_md;
    stream_op_start(s, ops, n, TAG_START);

    grpc_op st;
    memset(&st, 0, sizeof(st));
    st.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    st.data.recv_status_on_client.trailing_metadata = &s->trail_md;
    st.data.recv_status_on_client.status = &s->code;
    st.data.recv_status_on_client.status_details = &s->details;
    stream_op_start(s, &st, 1, TAG_STATUS);
    stream_recv(s);
    return 0;
}

/*
 * Wait for one completion until deadline. Returns its tag with bookkeeping
 * done (TAG_RECV leaves s->recv to the caller, NULL at end of stream), or
 * 0 on timeout.
 */
static intptr_t stream_next(struct stream *s, gpr_timespec deadline) {
    grpc_event ev = grpc_completion_queue_next(s->cq, deadline, NULL);
    if (ev.type != GRPC_OP_COMPLETE)
        return 0;
    intptr_t tag = (intptr_t)ev.tag;
    s->pending--;
    if (tag == TAG_START || tag == TAG_SEND) {
        if (s->send != NULL)
            grpc_byte_buffer_destroy(s->send);
        s->send = NULL;
        s->sending = 0;
    } else if (tag == TAG_STATUS) {
        s->ended = 1;
    }
    return tag;
}

static int stream_done(const struct stream *s) {
    return s->ended && s->pending == 0;
}

/* After stream_done(): the status as a DETD_E* code; releases the call. */
static int stream_close(struct stream *s, struct owner *o) {
    char msg[256];
    etcd_copy_details(s->details, msg, sizeof(msg));
    int err = etcd_status_err(s->code, msg);
    if (err == 0)
        err = DETD_EUNAVAILABLE; /* the server ended a stream: reconnect */
    pthread_mutex_lock(&o->mu);
    o->call = NULL;
    pthread_mutex_unlock(&o->mu);
    grpc_call_unref(s->call);
    s->call = NULL;
    etcd_md_free(s->md, s->nmd);
    s->nmd = 0;
    grpc_metadata_array_destroy(&s->init_md);
    grpc_metadata_array_destroy(&s->trail_md);
    grpc_slice_unref(s->details);
    return err;
}

static void cq_drain_destroy(grpc_completion_queue *cq) {
    grpc_completion_queue_shutdown(cq);
    while (
        grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL)
            .type != GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(cq);
}

/* ---- watch --------------------------------------------------------- */

struct etcd_watch {
    etcd_client *c;
    struct owner o;
    char *prefix;
    size_t prefix_len;
    uint8_t range_end[ETCD_MAX_KEY + 1];
    size_t end_len;
    int64_t next_rev; /* where the next (re)created stream starts */
    etcd_watch_cb cb;
    void *arg;
    pthread_t thread;
};

static void watch_emit(etcd_watch *w, enum etcd_event_type type, int64_t rev,
                       int err) {
    struct etcd_event ev;
    memset(&ev, 0, sizeof(ev));
    ev.type = type;
    ev.revision = rev;
    ev.err = err;
    w->cb(&ev, w->arg);
}

/*
 * Handle one WatchResponse. Returns 0 to keep reading, 1 when the watch is
 * over (compacted), or an error that ends this stream.
 */
static int watch_handle(etcd_watch *w, const Etcdserverpb__WatchResponse *r,
                        int *connected) {
    int64_t hrev = r->header != NULL ? r->header->revision : 0;
    if (r->compact_revision != 0) {
        struct etcd_event ev;
        memset(&ev, 0, sizeof(ev));
        ev.type = ETCD_EVENT_COMPACTED;
        ev.compact_revision = r->compact_revision;
        ev.revision = hrev;
        w->cb(&ev, w->arg);
        return 1;
    }
    if (r->canceled) {
        const char *why = r->cancel_reason != NULL ? r->cancel_reason : "";
        return strstr(why, "permission denied") != NULL ? DETD_EDENIED
                                                        : DETD_EPROTO;
    }
    if (r->created) {
        if (w->next_rev == 0)
            w->next_rev = hrev + 1; /* "from now": resume after this */
        *connected = 1;
        watch_emit(w, ETCD_EVENT_CONNECTED, hrev, 0);
    }
    if (r->n_events > ETCD_MAX_EVENTS)
        return DETD_ELIMIT;
    int64_t floor = w->next_rev, top = 0;
    for (size_t i = 0; i < r->n_events; i++) {
        const Mvccpb__Event *e = r->events[i];
        const Mvccpb__KeyValue *kv = e->kv;
        if (kv == NULL)
            return DETD_EPROTO;
        int64_t rev = kv->mod_revision;
        if (rev < floor)
            continue; /* already delivered before a reconnect */
        if (rev > top)
            top = rev;
        if (kv->key.len > ETCD_MAX_KEY || kv->value.len > ETCD_MAX_VALUE) {
            watch_emit(w, ETCD_EVENT_ERROR, rev, DETD_ELIMIT);
            continue;
        }
        char key[ETCD_MAX_KEY + 1];
        memcpy(key, kv->key.data, kv->key.len);
        key[kv->key.len] = '\0';
        struct etcd_event ev;
        memset(&ev, 0, sizeof(ev));
        ev.key = key;
        ev.key_len = kv->key.len;
        ev.revision = rev;
        unsigned char *val = NULL;
        if (e->type == MVCCPB__EVENT__EVENT_TYPE__DELETE) {
            ev.type = ETCD_EVENT_DELETE;
        } else {
            ev.type = ETCD_EVENT_PUT;
            val = malloc(kv->value.len + 1);
            if (val == NULL)
                return DETD_ENOMEM;
            if (kv->value.len > 0)
                memcpy(val, kv->value.data, kv->value.len);
            val[kv->value.len] = '\0';
            ev.value = val;
            ev.value_len = kv->value.len;
            ev.create_revision = kv->create_revision;
            ev.version = kv->version;
            ev.lease = kv->lease;
        }
        w->cb(&ev, w->arg);
        free(val);
    }
    if (top >= w->next_rev)
        w->next_rev = top + 1;
    return 0;
}

/* Run one stream until it ends. *final set when the watch is over. */
static int watch_run(etcd_watch *w, struct stream *s, int *connected,
                     int *final) {
    int perr = 0;
    while (!stream_done(s)) {
        intptr_t tag = stream_next(s, gpr_inf_future(GPR_CLOCK_REALTIME));
        if (tag != TAG_RECV)
            continue;
        if (s->recv == NULL)
            continue; /* end of stream: the status follows */
        ProtobufCMessage *m = NULL;
        int err =
            etcd_unpack(s->recv, &etcdserverpb__watch_response__descriptor, &m);
        grpc_byte_buffer_destroy(s->recv);
        s->recv = NULL;
        if (err == 0) {
            err = watch_handle(w, (Etcdserverpb__WatchResponse *)m, connected);
            protobuf_c_message_free_unpacked(m, NULL);
        }
        if (err == 0) {
            stream_recv(s);
            continue;
        }
        if (err == 1)
            *final = 1;
        else
            perr = err;
        grpc_call_cancel(s->call, NULL);
    }
    int err = stream_close(s, &w->o);
    return perr != 0 ? perr : err;
}

static void *watch_main(void *arg) {
    etcd_watch *w = arg;
    etcd_client *c = w->c;
    struct stream s;
    memset(&s, 0, sizeof(s));
    s.cq = grpc_completion_queue_create_for_next(NULL);
    unsigned seed = (unsigned)clock_mono_ms() ^ (unsigned)(uintptr_t)w;
    int64_t backoff = RECONNECT_FIRST_MS;
    uint64_t stale = 0;
    int reported = 0, final = 0;
    while (!final && !owner_stopping(&w->o)) {
        char *token = NULL;
        uint64_t gen = 0;
        int connected = 0;
        int err = etcd_auth_token(c, clock_mono_ms() + c->attempt_ms, stale,
                                  &token, &gen);
        if (err == 0) {
            Etcdserverpb__WatchCreateRequest cr =
                ETCDSERVERPB__WATCH_CREATE_REQUEST__INIT;
            cr.key.len = w->prefix_len;
            cr.key.data = (uint8_t *)w->prefix;
            cr.range_end.len = w->end_len;
            cr.range_end.data = w->range_end;
            cr.start_revision = w->next_rev;
            Etcdserverpb__WatchRequest req = ETCDSERVERPB__WATCH_REQUEST__INIT;
            req.request_union_case =
                ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST;
            req.create_request = &cr;
            grpc_byte_buffer *bb = etcd_pack(&req.base);
            err = bb == NULL ? DETD_ENOMEM
                             : stream_open(&s, c, &w->o, M_WATCH, token, bb);
            if (err == 0)
                err = watch_run(w, &s, &connected, &final);
        }
        free(token);
        if (final || owner_stopping(&w->o))
            break;
        if (err == DETD_EDENIED)
            stale = gen; /* maybe an expired token: authenticate again */
        if (connected) {
            reported = 0;
            backoff = RECONNECT_FIRST_MS;
        }
        if (!reported) {
            watch_emit(w, ETCD_EVENT_DISCONNECTED, w->next_rev - 1, err);
            reported = 1;
        }
        if (owner_wait(&w->o, etcd_jitter(backoff, &seed)))
            break;
        backoff =
            backoff * 2 < RECONNECT_MAX_MS ? backoff * 2 : RECONNECT_MAX_MS;
    }
    cq_drain_destroy(s.cq);
    return NULL;
}

int etcd_watch_start(etcd_client *c, const char *prefix, int64_t start_revision,
                     etcd_watch_cb cb, void *arg, etcd_watch **ret) {
    return etcd_watch_start_range(c, prefix, prefix, start_revision, cb, arg,
                                  ret);
}

int etcd_watch_start_range(etcd_client *c, const char *prefix,
                           const char *last_prefix, int64_t start_revision,
                           etcd_watch_cb cb, void *arg, etcd_watch **ret) {
    if (c == NULL || prefix == NULL || last_prefix == NULL || cb == NULL ||
        ret == NULL || start_revision < 0)
        return DETD_EINVAL;
    size_t plen = strnlen(prefix, ETCD_MAX_KEY + 1);
    size_t llen = strnlen(last_prefix, ETCD_MAX_KEY + 1);
    if (plen == 0 || llen == 0 || strcmp(last_prefix, prefix) < 0)
        return DETD_EINVAL;
    if (plen > ETCD_MAX_KEY || llen > ETCD_MAX_KEY)
        return DETD_ELIMIT;
    etcd_watch *w = calloc(1, sizeof(*w));
    if (w == NULL)
        return DETD_ENOMEM;
    int err = owner_init(&w->o);
    if (err != 0) {
        free(w);
        return err;
    }
    w->c = c;
    w->prefix = strdup(prefix);
    w->prefix_len = plen;
    w->end_len = etcd_prefix_end(last_prefix, llen, w->range_end);
    w->next_rev = start_revision;
    w->cb = cb;
    w->arg = arg;
    if (w->prefix == NULL) {
        err = DETD_ENOMEM;
        goto fail;
    }
    if (pthread_create(&w->thread, NULL, watch_main, w) != 0) {
        err = DETD_ENOMEM;
        goto fail;
    }
    *ret = w;
    return 0;
fail:
    free(w->prefix);
    owner_destroy(&w->o);
    free(w);
    return err;
}

void etcd_watch_stop(etcd_watch *w) {
    if (w == NULL)
        return;
    owner_stop(&w->o);
    pthread_join(w->thread, NULL);
    owner_destroy(&w->o);
    free(w->prefix);
    free(w);
}

/* ---- lease keep-alive ---------------------------------------------- */

struct ka_lease {
    int64_t id;
    int64_t ttl_ms;
    int64_t next_ms;    /* next refresh due */
    int64_t sent_ms;    /* last refresh sent */
    int64_t expires_ms; /* no confirmed refresh after this: lost */
};

struct etcd_keepalive {
    etcd_client *c;
    struct owner o; /* o.mu also guards leases, n */
    struct ka_lease *leases;
    size_t n, cap;
    etcd_lease_lost_cb cb;
    void *arg;
    pthread_t thread;
};

static ssize_t ka_find(etcd_keepalive *ka, int64_t id) {
    for (size_t i = 0; i < ka->n; i++)
        if (ka->leases[i].id == id)
            return (ssize_t)i;
    return -1;
}

static void ka_drop(etcd_keepalive *ka, size_t i) {
    ka->leases[i] = ka->leases[--ka->n];
}

/* Report leases whose TTL ran out unconfirmed. */
static void ka_expire(etcd_keepalive *ka) {
    for (;;) {
        int64_t id = 0, now = clock_mono_ms();
        pthread_mutex_lock(&ka->o.mu);
        for (size_t i = 0; i < ka->n; i++) {
            if (now >= ka->leases[i].expires_ms) {
                id = ka->leases[i].id;
                ka_drop(ka, i);
                break;
            }
        }
        pthread_mutex_unlock(&ka->o.mu);
        if (id == 0)
            return;
        if (ka->cb != NULL)
            ka->cb(id, DETD_ETIMEDOUT, ka->arg);
    }
}

/* Pick the lease most overdue for a refresh; 0 if none is due. */
static int64_t ka_due(etcd_keepalive *ka, int64_t now) {
    int64_t id = 0, best = INT64_MAX;
    pthread_mutex_lock(&ka->o.mu);
    size_t bi = 0;
    for (size_t i = 0; i < ka->n; i++) {
        if (ka->leases[i].next_ms <= now && ka->leases[i].next_ms < best) {
            best = ka->leases[i].next_ms;
            bi = i;
            id = ka->leases[i].id;
        }
    }
    if (id != 0) {
        struct ka_lease *l = &ka->leases[bi];
        int64_t every = l->ttl_ms / 3 > 200 ? l->ttl_ms / 3 : 200;
        l->sent_ms = now;
        l->next_ms = now + every;
    }
    pthread_mutex_unlock(&ka->o.mu);
    return id;
}

static void ka_answer(etcd_keepalive *ka,
                      const Etcdserverpb__LeaseKeepAliveResponse *r) {
    int lost = 0;
    pthread_mutex_lock(&ka->o.mu);
    ssize_t i = ka_find(ka, r->id);
    if (i >= 0) {
        struct ka_lease *l = &ka->leases[i];
        if (r->ttl <= 0) {
            ka_drop(ka, (size_t)i);
            lost = 1;
        } else {
            l->ttl_ms = r->ttl * 1000;
            l->expires_ms = l->sent_ms + l->ttl_ms;
        }
    }
    pthread_mutex_unlock(&ka->o.mu);
    if (lost && ka->cb != NULL)
        ka->cb(r->id, DETD_ENOTFOUND, ka->arg);
}

/* Run one keep-alive stream until it ends. */
static int ka_run(etcd_keepalive *ka, struct stream *s, int *answered) {
    int perr = 0, cancelled = 0;
    while (!stream_done(s)) {
        ka_expire(ka);
        int64_t now = clock_mono_ms();
        if (!s->sending && !s->ended && !cancelled) {
            int64_t id = ka_due(ka, now);
            if (id != 0) {
                Etcdserverpb__LeaseKeepAliveRequest req =
                    ETCDSERVERPB__LEASE_KEEP_ALIVE_REQUEST__INIT;
                req.id = id;
                grpc_byte_buffer *bb = etcd_pack(&req.base);
                if (bb != NULL) {
                    stream_send(s, bb);
                    continue;
                }
            }
        }
        if (!cancelled && owner_stopping(&ka->o)) {
            grpc_call_cancel(s->call, NULL);
            cancelled = 1;
        }
        intptr_t tag = stream_next(s, etcd_deadline(now + TICK_MS));
        if (tag != TAG_RECV || s->recv == NULL)
            continue;
        ProtobufCMessage *m = NULL;
        int err = etcd_unpack(
            s->recv, &etcdserverpb__lease_keep_alive_response__descriptor, &m);
        grpc_byte_buffer_destroy(s->recv);
        s->recv = NULL;
        if (err == 0) {
            *answered = 1;
            ka_answer(ka, (Etcdserverpb__LeaseKeepAliveResponse *)m);
            protobuf_c_message_free_unpacked(m, NULL);
            stream_recv(s);
        } else if (!cancelled) {
            perr = err;
            grpc_call_cancel(s->call, NULL);
            cancelled = 1;
        }
    }
    int err = stream_close(s, &ka->o);
    return perr != 0 ? perr : err;
}

static void *ka_main(void *arg) {
    etcd_keepalive *ka = arg;
    etcd_client *c = ka->c;
    struct stream s;
    memset(&s, 0, sizeof(s));
    s.cq = grpc_completion_queue_create_for_next(NULL);
    unsigned seed = (unsigned)clock_mono_ms() ^ (unsigned)(uintptr_t)ka;
    int64_t backoff = RECONNECT_FIRST_MS;
    uint64_t stale = 0;
    while (!owner_stopping(&ka->o)) {
        char *token = NULL;
        uint64_t gen = 0;
        int answered = 0;
        int err = etcd_auth_token(c, clock_mono_ms() + c->attempt_ms, stale,
                                  &token, &gen);
        if (err == 0) {
            err = stream_open(&s, c, &ka->o, M_KEEPALIVE, token, NULL);
            if (err == 0)
                err = ka_run(ka, &s, &answered);
        }
        free(token);
        if (err == DETD_EDENIED)
            stale = gen;
        if (answered)
            backoff = RECONNECT_FIRST_MS;
        /* Leases keep expiring locally while the stream is down. */
        int64_t until = clock_mono_ms() + etcd_jitter(backoff, &seed);
        int stop = 0;
        while (!stop && clock_mono_ms() < until) {
            ka_expire(ka);
            stop = owner_wait(&ka->o, TICK_MS);
        }
        if (stop)
            break;
        backoff =
            backoff * 2 < RECONNECT_MAX_MS ? backoff * 2 : RECONNECT_MAX_MS;
    }
    cq_drain_destroy(s.cq);
    return NULL;
}

int etcd_keepalive_start(etcd_client *c, etcd_lease_lost_cb cb, void *arg,
                         etcd_keepalive **ret) {
    if (c == NULL || ret == NULL)
        return DETD_EINVAL;
    etcd_keepalive *ka = calloc(1, sizeof(*ka));
    if (ka == NULL)
        return DETD_ENOMEM;
    int err = owner_init(&ka->o);
    if (err != 0) {
        free(ka);
        return err;
    }
    ka->c = c;
    ka->cb = cb;
    ka->arg = arg;
    if (pthread_create(&ka->thread, NULL, ka_main, ka) != 0) {
        owner_destroy(&ka->o);
        free(ka);
        return DETD_ENOMEM;
    }
    *ret = ka;
    return 0;
}

int etcd_keepalive_add(etcd_keepalive *ka, int64_t id, int64_t ttl_s) {
    if (ka == NULL || id == 0 || ttl_s <= 0 || ttl_s > 1000000000)
        return DETD_EINVAL;
    int err = 0;
    pthread_mutex_lock(&ka->o.mu);
    if (ka_find(ka, id) >= 0) {
        err = DETD_EEXIST;
        goto out;
    }
    if (ka->n == ETCD_MAX_LEASES) {
        err = DETD_ELIMIT;
        goto out;
    }
    if (ka->n == ka->cap) {
        size_t cap = ka->cap == 0 ? 16 : ka->cap * 2;
        struct ka_lease *nl = realloc(ka->leases, cap * sizeof(*nl));
        if (nl == NULL) {
            err = DETD_ENOMEM;
            goto out;
        }
        ka->leases = nl;
        ka->cap = cap;
    }
    int64_t now = clock_mono_ms(), ttl_ms = ttl_s * 1000;
    struct ka_lease *l = &ka->leases[ka->n++];
    l->id = id;
    l->ttl_ms = ttl_ms;
    l->next_ms = now;
    l->sent_ms = now;
    /* Granted a moment ago: assume a tenth of the TTL already gone. */
    l->expires_ms = now + ttl_ms - ttl_ms / 10;
out:
    pthread_mutex_unlock(&ka->o.mu);
    return err;
}

int etcd_keepalive_remove(etcd_keepalive *ka, int64_t id) {
    if (ka == NULL || id == 0)
        return DETD_EINVAL;
    pthread_mutex_lock(&ka->o.mu);
    ssize_t i = ka_find(ka, id);
    if (i >= 0)
        ka_drop(ka, (size_t)i);
    pthread_mutex_unlock(&ka->o.mu);
    return i >= 0 ? 0 : DETD_ENOTFOUND;
}

void etcd_keepalive_stop(etcd_keepalive *ka) {
    if (ka == NULL)
        return;
    owner_stop(&ka->o);
    pthread_join(ka->thread, NULL);
    owner_destroy(&ka->o);
    free(ka->leases);
    free(ka);
}
