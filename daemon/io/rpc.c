/*
 * rpc: the gRPC server adapter (see rpc.h). Every grpc_* call of the
 * daemon is in this file.
 *
 * One completion queue, one thread draining it. Each call is an rpc_call
 * with a reference count: every batch in flight holds one reference, and
 * so does every event handed to the owner. Tags are small structs inside
 * the call that name what completed.
 */
#define _GNU_SOURCE
#include "grpc_unary.h"
#include "io/rpc.h"
#include "clock.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#ifndef SO_PEERGROUPS
#define SO_PEERGROUPS 59
#endif

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_posix.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include "detd.pb-c.h"
#include "detd/error.h"
#include "strfmt.h"
#include "health.pb-c.h"
#include "core/metrics.h"
#include "core/wirecheck.h"

#define RPC_MAX_STREAM_QUEUE 8
#define RPC_MAX_PEER_GROUPS 64

enum tag_kind {
    TAG_NEW = 1,
    TAG_RECV,
    TAG_SEND,
    TAG_STATUS,
    TAG_CLOSE,
    TAG_SHUTDOWN,
};

struct rpc_tag {
    enum tag_kind kind;
    rpc_call *call;
};

struct method_info {
    const char *path;
    const ProtobufCMessageDescriptor *req;
    int streaming;
    int admin;
};

#define RPC_METHOD_INFO(name, path, desc, streaming, admin, handler)           \
    [RPC_##name] = {path, &desc, streaming, admin},
static const struct method_info methods[RPC_METHOD_COUNT] = {
    RPC_METHODS(RPC_METHOD_INFO)};
#undef RPC_METHOD_INFO

/* RPC_METHOD_COUNT stands for "unknown method" (generic request). */
#define METHOD_UNKNOWN RPC_METHOD_COUNT

struct rpc_call {
    atomic_int refs;
    rpc_server *srv;
    grpc_call *call;
    int method; /* rpc_method or METHOD_UNKNOWN */
    uint64_t id;
    gpr_timespec deadline;
    grpc_call_details details; /* unknown methods only */
    grpc_metadata_array md;
    grpc_byte_buffer *payload; /* registered unary: the request */
    grpc_byte_buffer *recv_bb; /* streaming: the message just received */
    int cancelled;
    int got_first; /* streaming: first message delivered */
    int closed;    /* close seen (rpc thread only) */
    char *peer;
    int64_t deadline_ms;
    int64_t started_us; /* CLOCK_MONOTONIC, when the call arrived */
    int have_cred;      /* local call with credentials read */
    struct rpc_peer_cred cred;
    gid_t groups[RPC_MAX_PEER_GROUPS];

    pthread_mutex_t mu; /* guards everything below */
    int initial_md_sent;
    int send_busy;
    int ended;         /* status queued or sent */
    int close_watched; /* RECV_CLOSE_ON_SERVER started */
    int status_pending;
    grpc_status_code pending_code;
    char *pending_msg;
    grpc_byte_buffer *queue[RPC_MAX_STREAM_QUEUE];
    int nqueue;
    grpc_byte_buffer *send_bb;
    grpc_slice status_slice;
    int status_slice_set;

    struct rpc_tag t_new, t_recv, t_send, t_status, t_close;
};

struct rpc_server {
    grpc_server *server;
    grpc_completion_queue *cq;
    void *registered[RPC_METHOD_COUNT];
    pthread_t thread;
    int thread_started;
    rpc_event_cb cb;
    void *cb_ctx;
    unsigned pending_per_method;
    atomic_int shutting_down;
    atomic_int stopped;
    atomic_uint_fast64_t next_id;
    /* Calls ended (status queued or sent) whose status batch has not
     * completed: what a stop waits for before it cuts calls off. */
    atomic_int unflushed;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    int shutdown_done;
    struct rpc_tag t_shutdown;
    rpc_authorize_cb authorize;
    void *authorize_ctx;
    int peer_groups;
    pthread_mutex_t lat_mu; /* guards lat */
    struct metrics_hist lat[RPC_METHOD_COUNT];

    conns *conns; /* the local connections (conns.h) */
};

/* The descriptor of a local call's peer ("fd:N"), -1 if none. */
static int peer_fd(const char *peer) {
    char *end = NULL;
    if (peer == NULL || strncmp(peer, "fd:", 3) != 0)
        return -1;
    long fd = strtol(peer + 3, &end, 10);
    if (end == peer + 3 || *end != '\0' || fd < 0 || fd > 1 << 30)
        return -1;
    return (int)fd;
}

/* See rpc.h. */
void rpc_server_conn_stats(rpc_server *srv, struct conns_stats *ret) {
    memset(ret, 0, sizeof(*ret));
    if (srv != NULL)
        conns_stats(srv->conns, ret);
}

static void call_free(rpc_call *c) {
    if (c->call != NULL)
        grpc_call_unref(c->call);
    grpc_metadata_array_destroy(&c->md);
    if (c->method == METHOD_UNKNOWN)
        grpc_call_details_destroy(&c->details);
    if (c->payload != NULL)
        grpc_byte_buffer_destroy(c->payload);
    if (c->recv_bb != NULL)
        grpc_byte_buffer_destroy(c->recv_bb);
    if (c->send_bb != NULL)
        grpc_byte_buffer_destroy(c->send_bb);
    for (int i = 0; i < c->nqueue; i++)
        grpc_byte_buffer_destroy(c->queue[i]);
    if (c->status_slice_set)
        grpc_slice_unref(c->status_slice);
    free(c->pending_msg);
    if (c->peer != NULL)
        gpr_free(c->peer);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

void rpc_call_ref(rpc_call *c) {
    atomic_fetch_add(&c->refs, 1);
}

void rpc_call_unref(rpc_call *c) {
    if (c != NULL && atomic_fetch_sub(&c->refs, 1) == 1)
        call_free(c);
}

int64_t rpc_call_deadline_ms(const rpc_call *c) {
    return c->deadline_ms;
}

const char *rpc_call_peer(const rpc_call *c) {
    return c->peer != NULL ? c->peer : "";
}

const struct rpc_peer_cred *rpc_call_cred(const rpc_call *c) {
    return c->have_cred ? &c->cred : NULL;
}

uint64_t rpc_call_id(const rpc_call *c) {
    return c->id;
}

static grpc_byte_buffer *encode(const ProtobufCMessage *msg) {
    size_t n = protobuf_c_message_get_packed_size(msg);
    uint8_t stackbuf[512];
    uint8_t *buf = n <= sizeof(stackbuf) ? stackbuf : malloc(n);
    if (buf == NULL)
        return NULL;
    protobuf_c_message_pack(msg, buf);
    grpc_slice s = grpc_slice_from_copied_buffer((const char *)buf, n);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    if (buf != stackbuf)
        free(buf);
    return bb;
}

/*
 * Decode a request: its strings are checked on the wire first
 * (wirecheck.h), so that no field is cut at a NUL byte or stored as
 * invalid UTF-8. NULL on failure, with why (why_len bytes) naming the
 * field or saying that the bytes do not decode.
 */
static ProtobufCMessage *decode(const ProtobufCMessageDescriptor *desc,
                                grpc_byte_buffer *bb, char *why,
                                size_t why_len) {
    grpc_byte_buffer_reader r;
    snprintf(why, why_len, "cannot decode %s", desc->short_name);
    if (!grpc_byte_buffer_reader_init(&r, bb))
        return NULL;
    grpc_slice s = grpc_byte_buffer_reader_readall(&r);
    grpc_byte_buffer_reader_destroy(&r);
    ProtobufCMessage *m = NULL;
    char bad[256];
    int rc = wirecheck_message(desc, GRPC_SLICE_START_PTR(s),
                               GRPC_SLICE_LENGTH(s), bad, sizeof(bad));
    if (rc == DETD_EINVAL)
        snprintf(why, why_len, "%s", bad);
    else if (rc != 0)
        snprintf(why, why_len, "cannot decode %s: %s", desc->short_name, bad);
    else
        m = protobuf_c_message_unpack(desc, NULL, GRPC_SLICE_LENGTH(s),
                                      GRPC_SLICE_START_PTR(s));
    grpc_slice_unref(s);
    return m;
}

static int64_t deadline_to_ms(gpr_timespec d) {
    if (gpr_time_cmp(d, gpr_inf_future(d.clock_type)) == 0)
        return INT64_MAX;
    gpr_timespec now = gpr_now(d.clock_type);
    gpr_timespec left = gpr_time_sub(d, now);
    int64_t left_ms = (int64_t)left.tv_sec * 1000 + left.tv_nsec / 1000000;
    if (left_ms > (int64_t)365 * 24 * 3600 * 1000)
        return INT64_MAX;
    return clock_mono_ms() + left_ms;
}

/* Post one request for method m (or the generic catch-all). */
static void post_request(rpc_server *srv, int m) {
    if (atomic_load(&srv->shutting_down))
        return;
    rpc_call *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return;
    atomic_init(&c->refs, 1);
    c->srv = srv;
    c->method = m;
    c->id = atomic_fetch_add(&srv->next_id, 1) + 1;
    pthread_mutex_init(&c->mu, NULL);
    grpc_metadata_array_init(&c->md);
    c->t_new = (struct rpc_tag){TAG_NEW, c};
    c->t_recv = (struct rpc_tag){TAG_RECV, c};
    c->t_send = (struct rpc_tag){TAG_SEND, c};
    c->t_status = (struct rpc_tag){TAG_STATUS, c};
    c->t_close = (struct rpc_tag){TAG_CLOSE, c};
    grpc_call_error e;
    if (m == METHOD_UNKNOWN) {
        grpc_call_details_init(&c->details);
        e = grpc_server_request_call(srv->server, &c->call, &c->details, &c->md,
                                     srv->cq, srv->cq, &c->t_new);
    } else {
        e = grpc_server_request_registered_call(
            srv->server, srv->registered[m], &c->call, &c->deadline, &c->md,
            methods[m].streaming ? NULL : &c->payload, srv->cq, srv->cq,
            &c->t_new);
    }
    if (e != GRPC_CALL_OK)
        call_free(c);
}

static int start_batch(rpc_call *c, const grpc_op *ops, size_t n,
                       struct rpc_tag *tag) {
    rpc_call_ref(c);
    if (grpc_call_start_batch(c->call, ops, n, tag, NULL) != GRPC_CALL_OK) {
        rpc_call_unref(c);
        return -1;
    }
    return 0;
}

/* Start the status batch. Caller holds c->mu, no send in flight. */
static void start_status_locked(rpc_call *c, grpc_status_code code,
                                const char *msg, grpc_byte_buffer *bb) {
    grpc_op ops[3];
    size_t n = 0;
    memset(ops, 0, sizeof(ops));
    if (!c->initial_md_sent) {
        ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
        n++;
        c->initial_md_sent = 1;
    }
    if (bb != NULL) {
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n].data.send_message.send_message = bb;
        n++;
        c->send_bb = bb;
    }
    c->status_slice = grpc_slice_from_copied_string(msg != NULL ? msg : "");
    c->status_slice_set = 1;
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = code;
    ops[n].data.send_status_from_server.status_details = &c->status_slice;
    n++;
    c->send_busy = 1;
    start_batch(c, ops, n, &c->t_status);
}

/* Start sending the next queued stream message. Caller holds c->mu. */
static void start_send_locked(rpc_call *c) {
    grpc_op ops[2];
    size_t n = 0;
    memset(ops, 0, sizeof(ops));
    if (!c->initial_md_sent) {
        ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
        n++;
        c->initial_md_sent = 1;
    }
    c->send_bb = c->queue[0];
    memmove(c->queue, c->queue + 1,
            (size_t)(c->nqueue - 1) * sizeof(c->queue[0]));
    c->nqueue--;
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n].data.send_message.send_message = c->send_bb;
    n++;
    c->send_busy = 1;
    start_batch(c, ops, n, &c->t_send);
}

/* End the call (status, optional message). Consumes one reference. */
static void end_call_bb(rpc_call *c, grpc_status_code code, const char *msg,
                        grpc_byte_buffer *bb);

static void end_call(rpc_call *c, grpc_status_code code, const char *msg,
                     const ProtobufCMessage *reply) {
    grpc_byte_buffer *bb = NULL;
    if (reply != NULL) {
        bb = encode(reply);
        if (bb == NULL) {
            code = GRPC_STATUS_INTERNAL;
            msg = "out of memory encoding the reply";
        }
    }
    end_call_bb(c, code, msg, bb);
}

void rpc_reply_packed(rpc_call *c, const uint8_t *buf, size_t len) {
    grpc_slice s = grpc_slice_from_copied_buffer((const char *)buf, len);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    end_call_bb(c, GRPC_STATUS_OK, "", bb);
}

/* End the call with bb (owned; may be NULL). Consumes one reference. */
static void end_call_bb(rpc_call *c, grpc_status_code code, const char *msg,
                        grpc_byte_buffer *bb) {
    pthread_mutex_lock(&c->mu);
    if (c->ended || atomic_load(&c->srv->stopped)) {
        pthread_mutex_unlock(&c->mu);
        if (bb != NULL)
            grpc_byte_buffer_destroy(bb);
        rpc_call_unref(c);
        return;
    }
    c->ended = 1;
    atomic_fetch_add(&c->srv->unflushed, 1);
    if (c->method != METHOD_UNKNOWN && !methods[c->method].streaming &&
        c->started_us > 0) {
        /* Request latency, arrival to status: every unary call counts,
         * refused and failed ones too. */
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        int64_t us = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
        pthread_mutex_lock(&c->srv->lat_mu);
        metrics_hist_observe(&c->srv->lat[c->method],
                             (double)(us - c->started_us) / 1e6);
        pthread_mutex_unlock(&c->srv->lat_mu);
    }
    if (c->send_busy || c->nqueue > 0) {
        /* A stream message is in flight: send the status after it. */
        c->status_pending = 1;
        c->pending_code = code;
        c->pending_msg = strdup(msg != NULL ? msg : "");
        if (bb != NULL)
            grpc_byte_buffer_destroy(bb);
    } else {
        start_status_locked(c, code, msg, bb);
    }
    pthread_mutex_unlock(&c->mu);
    rpc_call_unref(c);
}

void rpc_reply(rpc_call *c, const ProtobufCMessage *msg) {
    end_call(c, GRPC_STATUS_OK, "", msg);
}

void rpc_fail(rpc_call *c, rpc_code code, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    end_call(c, (grpc_status_code)code, buf, NULL);
}

void rpc_finish(rpc_call *c) {
    end_call(c, GRPC_STATUS_OK, "", NULL);
}

static void start_close_watch(rpc_call *c);

void rpc_watch_close(rpc_call *c) {
    pthread_mutex_lock(&c->mu);
    int skip = c->ended || c->close_watched || atomic_load(&c->srv->stopped);
    c->close_watched = 1;
    pthread_mutex_unlock(&c->mu);
    if (!skip)
        start_close_watch(c);
}

void rpc_stream_send(rpc_call *c, const ProtobufCMessage *msg) {
    grpc_byte_buffer *bb = encode(msg);
    if (bb == NULL)
        return;
    pthread_mutex_lock(&c->mu);
    if (c->ended || c->nqueue >= RPC_MAX_STREAM_QUEUE ||
        atomic_load(&c->srv->stopped)) {
        pthread_mutex_unlock(&c->mu);
        grpc_byte_buffer_destroy(bb);
        return;
    }
    c->queue[c->nqueue++] = bb;
    if (!c->send_busy)
        start_send_locked(c);
    pthread_mutex_unlock(&c->mu);
}

static void emit(rpc_server *srv, rpc_event_kind kind, rpc_call *c,
                 ProtobufCMessage *msg) {
    struct rpc_event ev = {kind, (rpc_method)c->method, c, msg, NULL};
    srv->cb(srv->cb_ctx, &ev);
}

static void start_close_watch(rpc_call *c) {
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &c->cancelled;
    start_batch(c, &op, 1, &c->t_close);
}

static void start_recv(rpc_call *c) {
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &c->recv_bb;
    start_batch(c, &op, 1, &c->t_recv);
}

/*
 * A local call: gRPC names the connection "fd:N" (channels added with
 * grpc_server_add_channel_from_fd), so the credentials are read from that
 * socket now, while the connection that carried the call is open. (A call
 * whose connection already closed and whose fd number was reused before
 * this point would read the new connection's credentials; its reply goes
 * nowhere, and the window is one completion-queue hop.)
 */
static void read_cred(rpc_server *srv, rpc_call *c) {
    int fd = peer_fd(c->peer);
    if (fd < 0)
        return;
    struct ucred uc;
    socklen_t len = sizeof(uc);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &len) != 0)
        return;
    c->cred.pid = uc.pid;
    c->cred.uid = uc.uid;
    c->cred.gid = uc.gid;
    if (srv->peer_groups) {
        socklen_t glen = sizeof(c->groups);
        if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, c->groups, &glen) == 0) {
            c->cred.groups = c->groups;
            c->cred.n_groups = glen / sizeof(gid_t);
        }
    }
    c->have_cred = 1;
}

static void on_new(rpc_server *srv, rpc_call *c, int ok) {
    /* Keep one request posted per slot: replace the one just used. */
    post_request(srv, c->method);
    if (!ok) {
        rpc_call_unref(c);
        return;
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    c->started_us = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
    c->peer = grpc_call_get_peer(c->call);
    conns_used(srv->conns, peer_fd(c->peer));
    c->deadline_ms = c->method == METHOD_UNKNOWN
                         ? deadline_to_ms(c->details.deadline)
                         : deadline_to_ms(c->deadline);
    if (c->method != METHOD_UNKNOWN && methods[c->method].streaming)
        start_close_watch(c);
    /* Unary calls are watched for cancellation only once they wait
     * (rpc_watch_close()): most are answered at once, and a watch costs
     * a batch and a completion per call. */
    if (c->method == METHOD_UNKNOWN) {
        char path[256];
        size_t len = GRPC_SLICE_LENGTH(c->details.method);
        if (len >= sizeof(path))
            len = sizeof(path) - 1;
        memcpy(path, GRPC_SLICE_START_PTR(c->details.method), len);
        path[len] = '\0';
        for (size_t i = 0; i < len; i++)
            if (path[i] < 0x20 || path[i] > 0x7e)
                path[i] = '?';
        rpc_fail(c, RPC_UNIMPLEMENTED, "unknown method '%s'", path);
        return;
    }
    const struct method_info *mi = &methods[c->method];
    int local = c->peer != NULL && strncmp(c->peer, "fd:", 3) == 0;
    if (local) {
        read_cred(srv, c);
        char why[512] = "";
        if (srv->authorize != NULL &&
            srv->authorize(srv->authorize_ctx, (rpc_method)c->method,
                           rpc_call_cred(c), why, sizeof(why)) != 0) {
            rpc_fail(c, RPC_PERMISSION_DENIED, "%s: %s", mi->path, why);
            return;
        }
    }
    if ((c->method <= RPC_OBSERVE || c->method == RPC_VOTE) && !local) {
        /* The TCP listener serves Admin and Health only. */
        rpc_fail(c, RPC_PERMISSION_DENIED,
                 "%s is served on the node's unix socket only, not over TCP",
                 mi->path);
        return;
    }
    if (mi->streaming) {
        start_recv(c);
        rpc_call_unref(c); /* the new-call reference */
        return;
    }
    if (c->payload == NULL) {
        rpc_fail(c, RPC_INVALID_ARGUMENT, "%s: no request message", mi->path);
        return;
    }
    char why[320];
    ProtobufCMessage *m = decode(mi->req, c->payload, why, sizeof(why));
    grpc_byte_buffer_destroy(c->payload);
    c->payload = NULL;
    if (m == NULL) {
        rpc_fail(c, RPC_INVALID_ARGUMENT, "%s: %s", mi->path, why);
        return;
    }
    emit(srv, RPC_EV_REQUEST, c, m); /* transfers the new-call reference */
}

static void on_recv(rpc_server *srv, rpc_call *c, int ok) {
    grpc_byte_buffer *bb = c->recv_bb;
    c->recv_bb = NULL;
    if (ok && bb != NULL && !c->closed) {
        const struct method_info *mi = &methods[c->method];
        char why[320];
        ProtobufCMessage *m = decode(mi->req, bb, why, sizeof(why));
        grpc_byte_buffer_destroy(bb);
        if (m == NULL) {
            rpc_call_ref(c);
            rpc_fail(c, RPC_INVALID_ARGUMENT, "%s: %s", mi->path, why);
        } else {
            rpc_call_ref(c);
            emit(srv, c->got_first ? RPC_EV_STREAM : RPC_EV_REQUEST, c, m);
            c->got_first = 1;
            pthread_mutex_lock(&c->mu);
            int ended = c->ended;
            pthread_mutex_unlock(&c->mu);
            if (!ended)
                start_recv(c);
        }
    } else if (bb != NULL) {
        grpc_byte_buffer_destroy(bb);
    }
    rpc_call_unref(c);
}

static void on_send_done(rpc_call *c, int is_status) {
    pthread_mutex_lock(&c->mu);
    if (c->send_bb != NULL) {
        grpc_byte_buffer_destroy(c->send_bb);
        c->send_bb = NULL;
    }
    c->send_busy = 0;
    if (is_status && atomic_fetch_sub(&c->srv->unflushed, 1) == 1) {
        pthread_mutex_lock(&c->srv->mu);
        pthread_cond_broadcast(&c->srv->cond);
        pthread_mutex_unlock(&c->srv->mu);
    }
    if (!is_status) {
        if (c->nqueue > 0)
            start_send_locked(c);
        else if (c->status_pending) {
            c->status_pending = 0;
            start_status_locked(c, c->pending_code, c->pending_msg, NULL);
        }
    }
    pthread_mutex_unlock(&c->mu);
    rpc_call_unref(c);
}

static void on_close(rpc_server *srv, rpc_call *c) {
    pthread_mutex_lock(&c->mu);
    int ended = c->ended;
    pthread_mutex_unlock(&c->mu);
    int streaming = c->method != METHOD_UNKNOWN && methods[c->method].streaming;
    c->closed = 1;
    /* Streams report every end (the session is over); unary calls only a
     * cancellation that arrived before the reply (a waiter gave up). */
    if ((streaming && c->got_first) || (!streaming && !ended && c->cancelled)) {
        rpc_call_ref(c);
        emit(srv, RPC_EV_CLOSED, c, NULL);
    }
    rpc_call_unref(c);
}

static void *rpc_thread(void *arg) {
    rpc_server *srv = arg;
    for (;;) {
        /* With connections to sweep, wake up for it (conns.h). */
        int64_t every = conns_sweep_every_ms(srv->conns);
        gpr_timespec until =
            every > 0 ? gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                     gpr_time_from_millis(every, GPR_TIMESPAN))
                      : gpr_inf_future(GPR_CLOCK_REALTIME);
        grpc_event ev = grpc_completion_queue_next(srv->cq, until, NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN)
            break;
        conns_sweep(srv->conns);
        if (ev.type != GRPC_OP_COMPLETE)
            continue;
        struct rpc_tag *t = ev.tag;
        switch (t->kind) {
        case TAG_NEW:
            on_new(srv, t->call, ev.success);
            break;
        case TAG_RECV:
            on_recv(srv, t->call, ev.success);
            break;
        case TAG_SEND:
            on_send_done(t->call, 0);
            break;
        case TAG_STATUS:
            on_send_done(t->call, 1);
            break;
        case TAG_CLOSE:
            on_close(srv, t->call);
            break;
        case TAG_SHUTDOWN:
            pthread_mutex_lock(&srv->mu);
            srv->shutdown_done = 1;
            pthread_cond_broadcast(&srv->cond);
            pthread_mutex_unlock(&srv->mu);
            break;
        }
    }
    return NULL;
}

/* Read a whole PEM file into a NUL-terminated heap string. */
static char *read_pem(const char *path, char **ret_err) {
    char *buf = NULL;
    int rc = grpc_unary_read_pem(path, &buf);
    if (rc != 0)
        *ret_err = strfmt("read '%s': %s", path,
                          rc == DETD_ELIMIT ? "too large" : detd_strerror(rc));
    return buf;
}

/* The optional TCP listener (Admin and Health; see rpc.h). */
static int add_tcp_port(rpc_server *srv, const struct rpc_options *opts,
                        char **ret_err) {
    grpc_server_credentials *creds = NULL;
    char *cert = NULL, *key = NULL, *ca = NULL;
    int rc = 0;
    if ((opts->listen_cert != NULL) != (opts->listen_key != NULL)) {
        *ret_err = strfmt("--listen-cert and --listen-key go together");
        return DETD_EINVAL;
    }
    if (opts->listen_cert != NULL) {
        cert = read_pem(opts->listen_cert, ret_err);
        key = cert != NULL ? read_pem(opts->listen_key, ret_err) : NULL;
        if (key != NULL && opts->listen_client_ca != NULL)
            ca = read_pem(opts->listen_client_ca, ret_err);
        if (cert == NULL || key == NULL ||
            (opts->listen_client_ca != NULL && ca == NULL)) {
            rc = -EIO;
            goto out;
        }
        grpc_ssl_pem_key_cert_pair pair = {key, cert};
        creds = grpc_ssl_server_credentials_create_ex(
            ca, &pair, 1,
            ca != NULL
                ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
            NULL);
    } else {
        creds = grpc_insecure_server_credentials_create();
    }
    if (creds == NULL) {
        *ret_err = strfmt("TLS credentials for --listen %s", opts->listen);
        rc = DETD_EINVAL;
        goto out;
    }
    if (grpc_server_add_http2_port(srv->server, opts->listen, creds) == 0) {
        *ret_err = strfmt("cannot listen on '%s'", opts->listen);
        rc = DETD_EUNAVAILABLE;
    }
    grpc_server_credentials_release(creds);
out:
    free(cert);
    if (key != NULL) {
        memset(key, 0, strlen(key));
        free(key);
    }
    free(ca);
    return rc;
}

static pthread_once_t grpc_once = PTHREAD_ONCE_INIT;
static void grpc_init_once(void) {
    grpc_init();
}

static void server_free(rpc_server *srv) {
    if (srv->server != NULL)
        grpc_server_destroy(srv->server);
    if (srv->cq != NULL)
        grpc_completion_queue_destroy(srv->cq);
    conns_free(srv->conns);
    pthread_mutex_destroy(&srv->mu);
    pthread_mutex_destroy(&srv->lat_mu);
    pthread_cond_destroy(&srv->cond);
    free(srv);
}

int rpc_server_start(const struct rpc_options *opts, rpc_event_cb cb,
                     void *cb_ctx, rpc_server **ret, char **ret_errmsg) {
    char *err = NULL;
    int rc = 0;
    if (opts == NULL || cb == NULL || ret == NULL)
        return DETD_EINVAL;
    pthread_once(&grpc_once, grpc_init_once);

    rpc_server *srv = calloc(1, sizeof(*srv));
    if (srv == NULL)
        return DETD_ENOMEM;
    pthread_mutex_init(&srv->mu, NULL);
    clock_cond_init(&srv->cond); /* the stop's timed wait */
    pthread_mutex_init(&srv->lat_mu, NULL);
    srv->cb = cb;
    srv->cb_ctx = cb_ctx;
    srv->authorize = opts->authorize;
    srv->authorize_ctx = opts->authorize_ctx;
    srv->peer_groups = opts->peer_groups;
    srv->pending_per_method =
        opts->pending_per_method > 0 ? opts->pending_per_method : 4;
    srv->t_shutdown = (struct rpc_tag){TAG_SHUTDOWN, NULL};
    struct conns_options co = {
        opts->max_connections, opts->max_connections_per_uid,
        opts->idle_timeout_ms, opts->note, opts->note_ctx};
    rc = conns_new(&co, &srv->conns);
    if (rc != 0) {
        err = strfmt("out of memory");
        goto out;
    }

    grpc_arg args[2];
    args[0].type = GRPC_ARG_INTEGER;
    args[0].key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
    args[0].value.integer = (int)opts->max_message_bytes;
    args[1].type = GRPC_ARG_INTEGER;
    args[1].key = GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
    args[1].value.integer = 4 * (int)opts->max_message_bytes;
    grpc_channel_args cargs = {2, args};
    srv->server = grpc_server_create(&cargs, NULL);
    srv->cq = grpc_completion_queue_create_for_next(NULL);
    for (int m = 0; m < RPC_METHOD_COUNT; m++) {
        srv->registered[m] = grpc_server_register_method(
            srv->server, methods[m].path, NULL,
            methods[m].streaming ? GRPC_SRM_PAYLOAD_NONE
                                 : GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER,
            0);
        if (srv->registered[m] == NULL) {
            err = strfmt("register method %s", methods[m].path);
            rc = DETD_EINTERNAL;
            goto out;
        }
    }
    grpc_server_register_completion_queue(srv->server, srv->cq, NULL);

    if (opts->listen != NULL) {
        rc = add_tcp_port(srv, opts, &err);
        if (rc != 0)
            goto out;
    }
    grpc_server_start(srv->server);

    for (int m = 0; m < RPC_METHOD_COUNT; m++)
        for (unsigned i = 0; i < srv->pending_per_method; i++)
            post_request(srv, m);
    post_request(srv, METHOD_UNKNOWN);

    if (pthread_create(&srv->thread, NULL, rpc_thread, srv) != 0) {
        err = strfmt("cannot start the rpc thread");
        rc = DETD_EINTERNAL;
        goto out;
    }
    srv->thread_started = 1;
    *ret = srv;
    return 0;
out:
    if (ret_errmsg != NULL)
        *ret_errmsg = err;
    else
        free(err);
    if (srv->server != NULL && srv->thread_started == 0) {
        /* Never started, or already shut down above. */
    }
    server_free(srv);
    return rc;
}

void rpc_server_latency(rpc_server *srv, rpc_method m,
                        struct metrics_hist *ret) {
    memset(ret, 0, sizeof(*ret));
    if (srv == NULL || (int)m < 0 || m >= RPC_METHOD_COUNT)
        return;
    pthread_mutex_lock(&srv->lat_mu);
    *ret = srv->lat[m];
    pthread_mutex_unlock(&srv->lat_mu);
}

const char *rpc_method_name(rpc_method m) {
    if ((int)m < 0 || m >= RPC_METHOD_COUNT)
        return "";
    const char *slash = strrchr(methods[m].path, '/');
    return slash + 1;
}

/* See rpc.h. */
int rpc_method_admin(rpc_method m) {
    return (int)m >= 0 && m < RPC_METHOD_COUNT && methods[m].admin;
}

int rpc_method_streaming(rpc_method m) {
    return (int)m >= 0 && m < RPC_METHOD_COUNT && methods[m].streaming;
}

int rpc_server_add_fd(rpc_server *srv, int fd, uint32_t uid) {
    if (srv == NULL || atomic_load(&srv->shutting_down)) {
        close(fd);
        return DETD_EUNAVAILABLE;
    }
    int rc = conns_track(srv->conns, fd, uid);
    if (rc != 0)
        return rc;
    grpc_server_credentials *creds = grpc_insecure_server_credentials_create();
    grpc_server_add_channel_from_fd(srv->server, fd, creds);
    grpc_server_credentials_release(creds);
    return 0;
}

void rpc_server_shutdown_begin(rpc_server *srv) {
    if (srv == NULL || atomic_exchange(&srv->shutting_down, 1))
        return;
    grpc_server_shutdown_and_notify(srv->server, srv->cq, &srv->t_shutdown);
}

void rpc_server_stop(rpc_server *srv, int64_t grace_ms) {
    if (srv == NULL)
        return;
    rpc_server_shutdown_begin(srv);
    int64_t until = clock_mono_ms() + (grace_ms > 0 ? grace_ms : 0);
    pthread_mutex_lock(&srv->mu);
    /* Wait for every reply already given to reach the transport (or for
     * every call to end on its own), not for streams whose peer keeps
     * them open: the daemon ended those sessions in its drain, and a
     * stopped or hung client would hold the stop for the whole grace. */
    while (!srv->shutdown_done && atomic_load(&srv->unflushed) > 0) {
        int64_t now = clock_mono_ms();
        if (now >= until)
            break;
        struct timespec ts = clock_after(until - now);
        pthread_cond_timedwait(&srv->cond, &srv->mu, &ts);
    }
    pthread_mutex_unlock(&srv->mu);
    /* Whatever is still open now is cut off. */
    grpc_server_cancel_all_calls(srv->server);
    pthread_mutex_lock(&srv->mu);
    while (!srv->shutdown_done)
        pthread_cond_wait(&srv->cond, &srv->mu);
    pthread_mutex_unlock(&srv->mu);
    atomic_store(&srv->stopped, 1);
    grpc_completion_queue_shutdown(srv->cq);
    if (srv->thread_started)
        pthread_join(srv->thread, NULL);
    server_free(srv);
}

/* ---- client side (verify --cluster) ---- */
