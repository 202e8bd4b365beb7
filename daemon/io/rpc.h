/*
 * rpc: the gRPC server adapter, the daemon's only server-side caller of
 * grpc_* (the etcd client in cluster/ and common/grpc_unary.c make calls).
 *
 * The server runs one completion-queue thread. It accepts calls for the
 * methods of detd.v1.Decider, detd.v1.Admin and grpc.health.v1.Health,
 * checks each request's strings on the wire (core/wirecheck.h), decodes it
 * (protobuf-c, size-capped) and hands it to the owner through the event
 * callback. That runs on the rpc thread and must not block: it either
 * answers the call there (the daemon's hot-cache Decide) or queues the
 * event for the owner's loop, which drains the queue on its own thread.
 * Calls for unknown methods, refused calls and undecodable requests are
 * answered here (UNIMPLEMENTED / PERMISSION_DENIED / INVALID_ARGUMENT)
 * without reaching the owner.
 *
 * Replies may be sent from any thread. Every event carries one reference
 * to its call: a REQUEST's reference is consumed by exactly one of
 * rpc_reply() / rpc_fail() (for Attach: rpc_stream_send() keeps it, and
 * rpc_fail()/rpc_finish() consume it); STREAM and CLOSED references are
 * dropped with rpc_call_unref().
 */
#ifndef DETD_RPC_H
#define DETD_RPC_H

#include "io/conns.h"
#include "io/rpc_methods.h"
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <protobuf-c/protobuf-c.h>

typedef struct rpc_server rpc_server;
typedef struct rpc_call rpc_call;

/* The methods, one per row of RPC_METHODS (rpc_methods.h). */
#define RPC_METHOD_ENUM(name, path, desc, streaming, admin, handler) RPC_##name,
typedef enum rpc_method {
    RPC_METHODS(RPC_METHOD_ENUM) RPC_METHOD_COUNT
} rpc_method;
#undef RPC_METHOD_ENUM

/* 1 when m changes state an operator owns (the admin column). */
int rpc_method_admin(rpc_method m);

/* gRPC status codes (the standard numeric values). */
typedef enum rpc_code {
    RPC_OK = 0,
    RPC_CANCELLED = 1,
    RPC_INVALID_ARGUMENT = 3,
    RPC_DEADLINE_EXCEEDED = 4,
    RPC_NOT_FOUND = 5,
    RPC_FAILED_PRECONDITION = 9,
    RPC_RESOURCE_EXHAUSTED = 8,
    RPC_PERMISSION_DENIED = 7,
    RPC_UNIMPLEMENTED = 12,
    RPC_INTERNAL = 13,
    RPC_UNAVAILABLE = 14,
} rpc_code;

typedef enum rpc_event_kind {
    RPC_EV_REQUEST = 1, /* a new call with its first message */
    RPC_EV_STREAM = 2,  /* a later message on a streaming call (Attach) */
    RPC_EV_CLOSED = 3,  /* the call ended on the client side (cancelled,
                           disconnected, half-closed stream) */
} rpc_event_kind;

struct rpc_event {
    rpc_event_kind kind;
    rpc_method method;
    rpc_call *call;
    ProtobufCMessage *msg; /* REQUEST/STREAM: owned by the receiver, free
                              with protobuf_c_message_free_unpacked() */
    /* The owner's: NULL from the server, which never reads it. The event
     * callback may hang what it worked out on the rpc thread here (heap)
     * for the handler on the loop; whoever consumes the event free()s it. */
    void *owner_data;
};

/* The owner's event callback (rpc thread; see the top of this file). */
typedef void (*rpc_event_cb)(void *ctx, struct rpc_event *ev);

/* The credentials of a caller on a local (fd) connection. */
struct rpc_peer_cred {
    pid_t pid;
    uid_t uid;
    gid_t gid;
    const gid_t *groups; /* supplementary groups; borrowed */
    size_t n_groups;
};

/*
 * Decide whether a call on a local connection may go on (rpc thread,
 * before the request is decoded). cred is NULL when the peer credentials
 * could not be read. Return 0 to serve the call, nonzero to refuse it with
 * PERMISSION_DENIED and the message written to why (why_len bytes).
 */
typedef int (*rpc_authorize_cb)(void *ctx, rpc_method method,
                                const struct rpc_peer_cred *cred, char *why,
                                size_t why_len);

/* A line for the daemon's log, from the server (see rpc_options). */
typedef conns_note_cb rpc_note_cb;

struct rpc_options {
    size_t max_message_bytes;    /* request cap, enforced by gRPC */
    unsigned pending_per_method; /* calls kept requested per method */
    /* Optional TCP listener "HOST:PORT" for the Admin and Health services
     * (Decider calls over it are refused with PERMISSION_DENIED: clients
     * use the node's unix socket). TLS when listen_cert and listen_key
     * (PEM paths) are set; with listen_client_ca, client certificates
     * signed by it are required. NULL: no TCP listener. */
    const char *listen;
    const char *listen_cert;
    const char *listen_key;
    const char *listen_client_ca;
    /* Optional check of local callers (see rpc_authorize_cb); with
     * peer_groups set, their supplementary groups are read too. */
    rpc_authorize_cb authorize;
    void *authorize_ctx;
    int peer_groups;
    /* Local connections (rpc_server_add_fd()): at most max_connections
     * open at once (0: no cap); one that has made no call idle_timeout_ms
     * after it was accepted is closed (0: never). */
    uint32_t max_connections;
    uint32_t idle_timeout_ms;
    /* At most this many of them from one uid (0: no cap of its own). */
    uint32_t max_connections_per_uid;
    /* Optional: told, once per burst, that connections are being refused
     * (over max_connections, or no descriptor left to track one); msg is
     * one line naming the cause, borrowed for the call. Runs on the
     * thread that called rpc_server_add_fd(). */
    rpc_note_cb note;
    void *note_ctx;
};

/*
 * Create and start the server: the optional TCP listener, the rpc
 * thread. Local connections are accepted by the owner (listener.c) and
 * added with rpc_server_add_fd(). Returns 0 or a negative DETD_E* /
 * -errno; *ret_errmsg (heap, caller frees) names the problem on failure.
 * cb runs on the rpc thread.
 */
int rpc_server_start(const struct rpc_options *opts, rpc_event_cb cb,
                     void *cb_ctx, rpc_server **ret, char **ret_errmsg);

/*
 * Serve gRPC on an accepted local connection (a connected unix socket).
 * Takes fd in every case: closed here when the server is shutting down
 * (DETD_EUNAVAILABLE), when max_connections are open (DETD_EBUSY) or
 * when no descriptor is left to track it (-errno). Calls on it carry the peer's
 * credentials (rpc_call_cred()) and pass opts->authorize. Any thread.
 */
int rpc_server_add_fd(rpc_server *srv, int fd, uint32_t uid);

/* Copy the connection counters into *ret. Any thread. */
void rpc_server_conn_stats(rpc_server *srv, struct conns_stats *ret);

struct metrics_hist;

/*
 * Copy the latency histogram of a method's unary calls (arrival to
 * status, every call including refused ones) into *ret. Any thread.
 */
void rpc_server_latency(rpc_server *srv, rpc_method m,
                        struct metrics_hist *ret);

/* A method's short name ("Decide", "Check"); static text. */
const char *rpc_method_name(rpc_method m);

/* Is the method a stream (no latency histogram)? */
int rpc_method_streaming(rpc_method m);

/* A local call's peer credentials (read when the call arrived); NULL for
 * calls over TCP or when unknown. Borrowed while the call lives. */
const struct rpc_peer_cred *rpc_call_cred(const rpc_call *call);

/*
 * Stop accepting calls, cancel those still open after grace_ms, stop the
 * rpc thread and free the server. Outstanding call references stay valid
 * until released (replies then fail quietly). Must not run on the rpc
 * thread. NULL is a no-op.
 */
void rpc_server_stop(rpc_server *srv, int64_t grace_ms);

/* Begin shutdown without waiting: new calls are refused. */
void rpc_server_shutdown_begin(rpc_server *srv);

/*
 * Reply to a unary call with msg (serialized here; msg stays the
 * caller's) and status OK. Consumes the REQUEST reference.
 */
void rpc_reply(rpc_call *call, const ProtobufCMessage *msg);

/*
 * Reply to a unary call with an already packed message (buf is copied)
 * and status OK. Consumes the REQUEST reference.
 */
void rpc_reply_packed(rpc_call *call, const uint8_t *buf, size_t len);

/*
 * End a call with a non-OK status and a message (copied). Consumes the
 * REQUEST reference (for any method).
 */
void rpc_fail(rpc_call *call, rpc_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * Report this unary call's cancellation by the client as an RPC_EV_CLOSED
 * event (streams are always watched). Call it for calls that are held
 * waiting; thread-safe, idempotent.
 */
void rpc_watch_close(rpc_call *call);

/* Send one message on a streaming call; keeps the reference. */
void rpc_stream_send(rpc_call *call, const ProtobufCMessage *msg);

/* End a streaming call with status OK. Consumes the REQUEST reference. */
void rpc_finish(rpc_call *call);

/* Take / drop a reference. */
void rpc_call_ref(rpc_call *call);
void rpc_call_unref(rpc_call *call);

/*
 * The call's deadline as CLOCK_MONOTONIC milliseconds, INT64_MAX when
 * the client set none.
 */
int64_t rpc_call_deadline_ms(const rpc_call *call);

/* The client's peer string ("fd:N" for local connections, "ipv4:..."
 * over TCP); borrowed while the call lives. */
const char *rpc_call_peer(const rpc_call *call);

/* A stable small id for logs. */
uint64_t rpc_call_id(const rpc_call *call);

#endif /* DETD_RPC_H */
