/*
 * wire: the gRPC adapter of libdetd and detctl (internal, not installed).
 *
 * Every grpc_* call of the client side lives here. The module turns
 * protobuf-c messages into gRPC byte buffers and back (with a size cap),
 * runs unary calls, each on its own completion queue so calls on many
 * threads never wait for one another, and drives one bidirectional stream
 * for the Attach call. gRPC status codes become DETD_E* codes here and
 * nowhere else; the daemon's status message is kept per thread and read
 * with wire_last_error().
 *
 * Fork: gRPC objects must not cross fork(); the caller (session.c) drops
 * objects created by another process without calling into them. The
 * process-wide part is here: wire_init() enables gRPC's fork support and
 * runs its fork handlers around every fork(), and every wait on a
 * completion queue steps out of gRPC at least every 20 ms so those
 * handlers can run (see the comment in wire.c). A child of a process whose
 * libgrpc lacks the handlers gets DETD_EFORK from wire_channel_new().
 */
#ifndef DETD_WIRE_H
#define DETD_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

/* Method paths (protobuf-c has no stub generator). */
#define WIRE_METHOD_ATTACH "/detd.v1.Decider/Attach"
#define WIRE_METHOD_DECIDE "/detd.v1.Decider/Decide"
#define WIRE_METHOD_REPORT "/detd.v1.Decider/Report"
#define WIRE_METHOD_SHARE "/detd.v1.Decider/Share"
#define WIRE_METHOD_OBSERVE "/detd.v1.Decider/Observe"
#define WIRE_METHOD_STATUS "/detd.v1.Admin/Status"
#define WIRE_METHOD_LIST_DECISIONS "/detd.v1.Admin/ListDecisions"
#define WIRE_METHOD_VERIFY "/detd.v1.Admin/Verify"
#define WIRE_METHOD_RESET "/detd.v1.Admin/Reset"
#define WIRE_METHOD_RELOAD "/detd.v1.Admin/Reload"
#define WIRE_METHOD_EXPLAIN "/detd.v1.Admin/Explain"
#define WIRE_METHOD_HEALTH_CHECK "/grpc.health.v1.Health/Check"
#define WIRE_METHOD_VOTE "/detd.v1.Decider/Vote"
#define WIRE_METHOD_LIST_VOTES "/detd.v1.Admin/ListVotes"
#define WIRE_METHOD_EXPORT_DECISIONS "/detd.v1.Admin/ExportDecisions"
#define WIRE_METHOD_IMPORT_TABLE "/detd.v1.Admin/ImportTable"

/* Values of grpc.health.v1.HealthCheckResponse.ServingStatus. */
#define WIRE_HEALTH_UNKNOWN 0
#define WIRE_HEALTH_SERVING 1
#define WIRE_HEALTH_NOT_SERVING 2
#define WIRE_HEALTH_SERVICE_UNKNOWN 3

struct wire_channel;
struct wire_stream;

/*
 * Initialize gRPC once per process (thread-safe, idempotent). gRPC's own
 * logging is silenced unless GRPC_VERBOSITY or GRPC_TRACE is set, so the
 * library never prints. Sets GRPC_ENABLE_FORK_SUPPORT=1 and
 * GRPC_POLL_STRATEGY=poll unless the environment already names them, and
 * registers the fork handlers. Returns 0 or DETD_EINTERNAL.
 */
int wire_init(void);

/*
 * The detail of the last failure on this thread: the daemon's status
 * message ("key exceeds 4096 bytes") or a local explanation. Never NULL;
 * "" when none. Valid until the next wire or client call on this thread.
 */
const char *wire_last_error(void);

/* Set or clear (fmt NULL) this thread's last error detail. */
void wire_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The socket a client uses when none is given (detd_client_default_socket()
 * in detd/client.h: the rule, for libdetd and detctl alike). */
const char *wire_default_socket(void);

/*
 * Convert a gRPC status code and its message to a DETD_E* code (0 for
 * OK). message may be NULL. Exposed for tests.
 */
int wire_status_to_err(int grpc_status, const char *message);

/*
 * Create a channel to target ("unix:/abs/path"). The channel has its own
 * subchannel (never shared with another channel, so a forked child's new
 * channel never reuses its parent's connection) and message caps of
 * DETD_MAX_MESSAGE_BYTES. Nothing connects until the first call.
 * On success *ret owns the channel (wire_channel_free()).
 * Returns 0, DETD_EINVAL or DETD_ENOMEM.
 */
int wire_channel_new(const char *target, struct wire_channel **ret);

/* TLS for wire_channel_new_tls(): PEM paths; NULL members are unused. */
struct wire_tls {
    const char *ca_file;   /* roots to check the server against (NULL:
                              gRPC's default roots) */
    const char *cert_file; /* client certificate and key, or both NULL */
    const char *key_file;
};

/*
 * As wire_channel_new(), over TLS when tls is non-NULL (a TCP target
 * "HOST:PORT"; the server's certificate must name HOST). The files are
 * read here. Returns 0, DETD_EINVAL, DETD_ELIMIT, -errno (a file could not
 * be read; wire_last_error() names it) or DETD_ENOMEM.
 */
int wire_channel_new_tls(const char *target, const struct wire_tls *tls,
                         struct wire_channel **ret);

/* Destroy a channel; no call or stream may still use it. NULL: no-op. */
void wire_channel_free(struct wire_channel *ch);

/*
 * Pack msg into a new grpc_byte_buffer (returned as void * to keep gRPC
 * types out of this header). The caller destroys it with
 * wire_buffer_free(). Returns 0, DETD_ELIMIT (over
 * DETD_MAX_MESSAGE_BYTES) or DETD_ENOMEM.
 */
int wire_pack(const ProtobufCMessage *msg, void **ret_buffer);

/* Destroy a buffer from wire_pack() or gRPC. NULL: no-op. */
void wire_buffer_free(void *buffer);

/*
 * Unpack a grpc_byte_buffer into a message of type desc. Messages over
 * DETD_MAX_MESSAGE_BYTES are refused (DETD_ELIMIT) before decoding.
 * On success *ret_msg is owned by the caller
 * (protobuf_c_message_free_unpacked(msg, NULL)).
 * Returns 0, DETD_ELIMIT, DETD_EPROTO or DETD_ENOMEM.
 */
int wire_unpack(void *buffer, const ProtobufCMessageDescriptor *desc,
                ProtobufCMessage **ret_msg);

/*
 * One unary call: send req to method, wait until the response or the
 * deadline (timeout_ms from now; <= 0: no deadline). Uses a completion
 * queue of its own, so any number of threads may call at once on one
 * channel. On success *ret_resp holds a message of type resp_desc owned by
 * the caller. On failure the daemon's status message (or a local reason)
 * is available from wire_last_error().
 * Returns 0 or a DETD_E* code (see wire_status_to_err()).
 */
int wire_unary(struct wire_channel *ch, const char *method,
               const ProtobufCMessage *req,
               const ProtobufCMessageDescriptor *resp_desc, int64_t timeout_ms,
               ProtobufCMessage **ret_resp);

/*
 * grpc.health.v1 Check for service ("" for the whole server).
 * On success *ret_status is a WIRE_HEALTH_* value.
 */
int wire_health_check(struct wire_channel *ch, const char *service,
                      int64_t timeout_ms, int *ret_status);

/* What wire_stream_next() saw. */
enum wire_event_kind {
    WIRE_EV_TIMEOUT = 1, /* the deadline passed, nothing happened */
    WIRE_EV_SENT,        /* the pending send finished (ok tells) */
    WIRE_EV_MESSAGE,     /* a message arrived: msg, owned by the caller */
    WIRE_EV_END,         /* the server sent no more messages */
    WIRE_EV_CLOSED,      /* the call ended: err holds the mapped status */
};

struct wire_event {
    enum wire_event_kind kind;
    int ok;                /* WIRE_EV_SENT: the message left */
    ProtobufCMessage *msg; /* WIRE_EV_MESSAGE */
    int err;               /* WIRE_EV_CLOSED: 0 or DETD_E* */
};

/*
 * Start a bidirectional streaming call on method, without a deadline.
 * Messages received are decoded as recv_desc. The stream uses its own
 * completion queue; one thread at a time may wait on it
 * (wire_stream_next()). On success *ret owns the stream
 * (wire_stream_free()). Returns 0, DETD_ENOMEM or DETD_EINTERNAL.
 */
int wire_stream_open(struct wire_channel *ch, const char *method,
                     const ProtobufCMessageDescriptor *recv_desc,
                     struct wire_stream **ret);

/*
 * Queue msg for sending. Only one send may be in flight: returns
 * DETD_EBUSY until WIRE_EV_SENT was seen for the previous one.
 * Returns 0, DETD_EBUSY, DETD_ELIMIT, DETD_ENOMEM or DETD_ECANCELLED.
 */
int wire_stream_send(struct wire_stream *s, const ProtobufCMessage *msg);

/* Whether a send is still in flight. */
int wire_stream_sending(const struct wire_stream *s);

/*
 * Ask for the next message (one receive in flight at most; a second
 * request while one is pending is a no-op). Returns 0 or DETD_ECANCELLED.
 */
int wire_stream_recv(struct wire_stream *s);

/*
 * Wait for one event until deadline_ms (clock_mono_ms() clock; < 0: no
 * deadline) and describe it in *ret_ev.
 */
void wire_stream_next(struct wire_stream *s, int64_t deadline_ms,
                      struct wire_event *ret_ev);

/* Cancel the call. Thread-safe; may be called while another thread waits
 * in wire_stream_next(), which then sees the call close. */
void wire_stream_cancel(struct wire_stream *s);

/*
 * Cancel if still open, wait for every pending operation to finish, and
 * free the stream. Only the thread that waits on it may free it.
 * NULL: no-op.
 */
void wire_stream_free(struct wire_stream *s);

#endif /* DETD_WIRE_H */
