/* wire: the gRPC adapter of the client side. See wire.h. */
#define _GNU_SOURCE
#include "grpc_unary.h"
#include "wire.h"
#include "clock.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/log.h>
#include <grpc/support/time.h>

#include "detd/client.h"
#include "health.pb-c.h"

struct wire_channel {
    grpc_channel *channel;
};

/* Completion-queue tags of a stream. */
enum { WIRE_TAG_SEND = 1, WIRE_TAG_RECV, WIRE_TAG_STATUS };

struct wire_stream {
    grpc_completion_queue *cq;
    grpc_call *call;
    const ProtobufCMessageDescriptor *recv_desc;
    grpc_metadata_array initial_md;
    grpc_metadata_array trailing_md;
    grpc_byte_buffer *send_buf;
    grpc_byte_buffer *recv_buf;
    grpc_status_code status;
    grpc_slice details;
    int sent_initial;
    int recv_initial;
    int send_pending;
    int recv_pending;
    int status_pending;
    int local_err; /* a decoding failure that made us cancel */
};

static pthread_once_t wire_once_ = PTHREAD_ONCE_INIT;
/* Room for the daemon's longest verdict: a failed pass's reason with its
 * first candidate's error, and who reported it. */
static _Thread_local char wire_err_[2048];

static void wire_log_discard_(gpr_log_func_args *args) {
    (void)args;
}

/*
 * Fork. Training processes fork (data-loader workers) and a child may
 * call the daemon. gRPC core 1.51 cannot be used in a child unless its
 * fork handlers ran around fork(): measured here, a child's calls hang or
 * miss their deadlines otherwise (its timer and executor threads are gone
 * and the poller's kernel objects are shared with the parent). Those
 * handlers (grpc_prefork/grpc_postfork_*) need GRPC_ENABLE_FORK_SUPPORT and
 * refuse to act while any thread is inside a gRPC call, so every gRPC call
 * of this module passes a gate: a thread waits on a completion queue in
 * slices of WIRE_SLICE_MS and steps out of gRPC between slices; the
 * prepare handler closes the gate, waits until no thread is inside, and
 * runs grpc_prefork. The handlers are not registered by libgrpc itself and
 * 1.51 exports them with C++ linkage, hence the lookup of both names.
 */
#define WIRE_SLICE_MS 20

typedef void (*wire_fork_fn_)(void);
static wire_fork_fn_ wire_prefork_, wire_postfork_parent_, wire_postfork_child_;
/* The EventEngine's threads (timers, thread pool) have fork hooks too. */
static wire_fork_fn_ wire_ee_prefork_, wire_ee_postfork_parent_,
    wire_ee_postfork_child_;
static pthread_mutex_t wire_gate_mu_ = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wire_gate_cond_ = PTHREAD_COND_INITIALIZER;
static int wire_gate_closed_;
static int wire_gate_inside_;
static int wire_fork_broken_; /* a child without gRPC's fork handling */
static _Thread_local int wire_depth_;

static void wire_gate_enter_(void) {
    if (wire_depth_++ > 0)
        return;
    pthread_mutex_lock(&wire_gate_mu_);
    while (wire_gate_closed_)
        pthread_cond_wait(&wire_gate_cond_, &wire_gate_mu_);
    wire_gate_inside_++;
    pthread_mutex_unlock(&wire_gate_mu_);
}

static void wire_gate_leave_(void) {
    if (--wire_depth_ > 0)
        return;
    pthread_mutex_lock(&wire_gate_mu_);
    if (--wire_gate_inside_ == 0 && wire_gate_closed_)
        pthread_cond_broadcast(&wire_gate_cond_);
    pthread_mutex_unlock(&wire_gate_mu_);
}

/* Between two waits: let a fork through. */
static void wire_gate_yield_(void) {
    int depth = wire_depth_;
    wire_depth_ = 1;
    wire_gate_leave_();
    wire_gate_enter_();
    wire_depth_ = depth;
}

static void wire_atfork_prepare_(void) {
    pthread_mutex_lock(&wire_gate_mu_);
    wire_gate_closed_ = 1;
    while (wire_gate_inside_ > 0)
        pthread_cond_wait(&wire_gate_cond_, &wire_gate_mu_);
    /* the gate mutex stays held until the fork is over */
    if (wire_prefork_ != NULL)
        wire_prefork_();
    if (wire_ee_prefork_ != NULL)
        wire_ee_prefork_();
}

static void wire_atfork_parent_(void) {
    if (wire_ee_postfork_parent_ != NULL)
        wire_ee_postfork_parent_();
    if (wire_postfork_parent_ != NULL)
        wire_postfork_parent_();
    wire_gate_closed_ = 0;
    pthread_cond_broadcast(&wire_gate_cond_);
    pthread_mutex_unlock(&wire_gate_mu_);
}

static void wire_atfork_child_(void) {
    if (wire_ee_postfork_child_ != NULL)
        wire_ee_postfork_child_();
    if (wire_postfork_child_ != NULL)
        wire_postfork_child_();
    else
        wire_fork_broken_ = 1;
    /* Threads parked at the gate stayed in the parent. */
    wire_gate_closed_ = 0;
    wire_gate_inside_ = 0;
    memset(&wire_gate_cond_, 0, sizeof(wire_gate_cond_));
    pthread_cond_init(&wire_gate_cond_, NULL);
    pthread_mutex_unlock(&wire_gate_mu_);
}

static wire_fork_fn_ wire_lookup_(const char *c_name, const char *cxx_name) {
    void *p = dlsym(RTLD_DEFAULT, c_name);
    if (p == NULL)
        p = dlsym(RTLD_DEFAULT, cxx_name);
    wire_fork_fn_ fn = NULL;
    memcpy(&fn, &p, sizeof(fn));
    return fn;
}

/*
 * A channel that never connects, held for the life of the process. gRPC
 * (1.51) keeps its default EventEngine only while some channel's
 * arguments refer to it, and the last channel's cleanup runs later on one
 * of the engine's own threads; a process that closed its last client just
 * before exit() raced that teardown against the exit handlers and died of
 * SIGSEGV in PollPoller::Shutdown (seen under load, about 1 exit in 40 of
 * test_daemon_start's ranks). With this reference the engine outlives
 * every client, so closing one never tears it down. Nothing is ever sent
 * on it: a channel connects only when a call or a connectivity check asks.
 */
static grpc_channel *wire_engine_keeper_;

static void wire_keep_engine_(void) {
    grpc_channel_credentials *creds = grpc_insecure_credentials_create();
    if (creds == NULL)
        return; /* no reference held: as before, nothing worse */
    wire_engine_keeper_ =
        grpc_channel_create("unix:/dev/null/detd-engine-keeper", creds, NULL);
    grpc_channel_credentials_release(creds);
}

static void wire_init_once_(void) {
    /* The library never prints: keep gRPC quiet unless asked for logs. */
    if (getenv("GRPC_VERBOSITY") == NULL && getenv("GRPC_TRACE") == NULL)
        gpr_set_log_function(wire_log_discard_);
    /* Read once by grpc_init(); a value the user set is kept. Measured
     * with 1.51: with epoll1 a child's calls still fail after the fork
     * handlers ran (EPIPE or a hang); with the poll engine they work. */
    setenv("GRPC_ENABLE_FORK_SUPPORT", "1", 0);
    setenv("GRPC_POLL_STRATEGY", "poll", 0);
    grpc_init();
    wire_keep_engine_();
    wire_prefork_ = wire_lookup_("grpc_prefork", "_Z12grpc_preforkv");
    wire_postfork_parent_ =
        wire_lookup_("grpc_postfork_parent", "_Z20grpc_postfork_parentv");
    wire_postfork_child_ =
        wire_lookup_("grpc_postfork_child", "_Z19grpc_postfork_childv");
    wire_ee_prefork_ =
        wire_lookup_("grpc_event_engine_prepare_fork",
                     "_ZN17grpc_event_engine12experimental11PrepareForkEv");
    wire_ee_postfork_parent_ =
        wire_lookup_("grpc_event_engine_postfork_parent",
                     "_ZN17grpc_event_engine12experimental14PostforkParentEv");
    wire_ee_postfork_child_ =
        wire_lookup_("grpc_event_engine_postfork_child",
                     "_ZN17grpc_event_engine12experimental13PostforkChildEv");
    if (wire_ee_prefork_ == NULL || wire_ee_postfork_parent_ == NULL ||
        wire_ee_postfork_child_ == NULL)
        wire_ee_prefork_ = wire_ee_postfork_parent_ = wire_ee_postfork_child_ =
            NULL;
    if (wire_prefork_ == NULL || wire_postfork_parent_ == NULL ||
        wire_postfork_child_ == NULL)
        wire_prefork_ = wire_postfork_parent_ = wire_postfork_child_ = NULL;
    pthread_atfork(wire_atfork_prepare_, wire_atfork_parent_,
                   wire_atfork_child_);
}

int wire_init(void) {
    if (pthread_once(&wire_once_, wire_init_once_) != 0)
        return DETD_EINTERNAL;
    return 0;
}

const char *wire_last_error(void) {
    return wire_err_;
}

void wire_set_error(const char *fmt, ...) {
    if (fmt == NULL) {
        wire_err_[0] = '\0';
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(wire_err_, sizeof(wire_err_), fmt, ap);
    va_end(ap);
}

/* A deadline timeout_ms from now (<= 0: none) on gRPC's clock. */
static gpr_timespec wire_deadline_(int64_t timeout_ms) {
    if (timeout_ms <= 0)
        return gpr_inf_future(GPR_CLOCK_MONOTONIC);
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                        gpr_time_from_millis(timeout_ms, GPR_TIMESPAN));
}

static int wire_mentions_limit_(const char *m) {
    static const char *const words[] = {"limit",    "exceed",    "too many",
                                        "too long", "too large", "larger than",
                                        "maximum"};
    if (m == NULL)
        return 0;
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
        if (strcasestr(m, words[i]) != NULL)
            return 1;
    return 0;
}

static int wire_mentions_connect_(const char *m) {
    static const char *const words[] = {"connect", "refused", "no such file",
                                        "not found"};
    if (m == NULL)
        return 0;
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
        if (strcasestr(m, words[i]) != NULL)
            return 1;
    return 0;
}

int wire_status_to_err(int grpc_status, const char *message) {
    switch ((grpc_status_code)grpc_status) {
    case GRPC_STATUS_OK:
        return 0;
    case GRPC_STATUS_CANCELLED:
        return DETD_ECANCELLED;
    case GRPC_STATUS_INVALID_ARGUMENT:
        return wire_mentions_limit_(message) ? DETD_ELIMIT : DETD_EINVAL;
    case GRPC_STATUS_DEADLINE_EXCEEDED:
        return DETD_ETIMEDOUT;
    case GRPC_STATUS_NOT_FOUND:
        return DETD_ENOTFOUND;
    case GRPC_STATUS_ALREADY_EXISTS:
        return DETD_EEXIST;
    case GRPC_STATUS_PERMISSION_DENIED:
    case GRPC_STATUS_UNAUTHENTICATED:
        return DETD_EDENIED;
    case GRPC_STATUS_RESOURCE_EXHAUSTED:
        return wire_mentions_limit_(message) ? DETD_ELIMIT : DETD_EBUSY;
    case GRPC_STATUS_FAILED_PRECONDITION:
    case GRPC_STATUS_ABORTED:
        return DETD_ESTALE;
    case GRPC_STATUS_OUT_OF_RANGE:
        return DETD_ELIMIT;
    case GRPC_STATUS_UNIMPLEMENTED:
        return DETD_EUNIMPL;
    case GRPC_STATUS_UNAVAILABLE:
        /* No connection at all vs. a daemon that said it cannot serve. */
        return wire_mentions_connect_(message) ? DETD_ECONNECT
                                               : DETD_EUNAVAILABLE;
    case GRPC_STATUS_DATA_LOSS:
        return DETD_ECORRUPT;
    case GRPC_STATUS_INTERNAL:
    case GRPC_STATUS_UNKNOWN:
    default:
        return DETD_EINTERNAL;
    }
}

static int channel_new(const char *target, int use_tls, const char *ca,
                       const char *cert, const char *key,
                       struct wire_channel **ret);

/* Read a PEM file (capped at 1 MiB) into a NUL-terminated heap string. */
static int read_pem_file(const char *path, char **ret) {
    int rc = grpc_unary_read_pem(path, ret);
    if (rc == DETD_ELIMIT)
        wire_set_error("read '%s': larger than 1 MiB", path);
    else if (rc < 0 && rc != DETD_ENOMEM)
        wire_set_error("read '%s': %s", path, strerror(-rc));
    return rc;
}

int wire_channel_new(const char *target, struct wire_channel **ret) {
    return wire_channel_new_tls(target, NULL, ret);
}

int wire_channel_new_tls(const char *target, const struct wire_tls *tls,
                         struct wire_channel **ret) {
    if (target == NULL || ret == NULL)
        return DETD_EINVAL;
    if (tls != NULL && (tls->cert_file != NULL) != (tls->key_file != NULL)) {
        wire_set_error("a client certificate and its key go together");
        return DETD_EINVAL;
    }
    char *ca = NULL, *cert = NULL, *key = NULL;
    if (tls != NULL) {
        int prc = 0;
        if (tls->ca_file != NULL)
            prc = read_pem_file(tls->ca_file, &ca);
        if (prc == 0 && tls->cert_file != NULL)
            prc = read_pem_file(tls->cert_file, &cert);
        if (prc == 0 && tls->key_file != NULL)
            prc = read_pem_file(tls->key_file, &key);
        if (prc != 0) {
            free(ca);
            free(cert);
            free(key);
            return prc;
        }
    }
    int rc = channel_new(target, tls != NULL, ca, cert, key, ret);
    free(ca);
    free(cert);
    if (key != NULL) {
        memset(key, 0, strlen(key));
        free(key);
    }
    return rc;
}

static int channel_new(const char *target, int use_tls, const char *ca,
                       const char *cert, const char *key,
                       struct wire_channel **ret) {
    int rc = wire_init();
    if (rc < 0)
        return rc;
    if (wire_fork_broken_) {
        wire_set_error("gRPC cannot be used after fork() in this process "
                       "(no fork handlers in libgrpc)");
        return DETD_EFORK;
    }
    struct wire_channel *ch = calloc(1, sizeof(*ch));
    if (ch == NULL)
        return DETD_ENOMEM;
    grpc_arg args[] = {
        {.type = GRPC_ARG_INTEGER,
         .key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
         .value.integer = DETD_MAX_MESSAGE_BYTES},
        {.type = GRPC_ARG_INTEGER,
         .key = GRPC_ARG_MAX_SEND_MESSAGE_LENGTH,
         .value.integer = DETD_MAX_MESSAGE_BYTES},
        /* A private subchannel: a forked child's channel must never pick
         * up the connection its parent opened. */
        {.type = GRPC_ARG_INTEGER,
         .key = GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL,
         .value.integer = 1},
        /* A local daemon that restarts is back within a second: retry
         * the socket often rather than backing off to minutes. */
        {.type = GRPC_ARG_INTEGER,
         .key = GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
         .value.integer = 100},
        {.type = GRPC_ARG_INTEGER,
         .key = GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
         .value.integer = 1000},
    };
    grpc_channel_args cargs = {sizeof(args) / sizeof(args[0]), args};
    wire_gate_enter_();
    grpc_channel_credentials *creds = NULL;
    if (use_tls) {
        grpc_ssl_pem_key_cert_pair pair = {key, cert};
        creds = grpc_ssl_credentials_create(ca, cert != NULL ? &pair : NULL,
                                            NULL, NULL);
    } else {
        creds = grpc_insecure_credentials_create();
    }
    if (creds == NULL) {
        wire_gate_leave_();
        free(ch);
        return DETD_ENOMEM;
    }
    ch->channel = grpc_channel_create(target, creds, &cargs);
    grpc_channel_credentials_release(creds);
    wire_gate_leave_();
    if (ch->channel == NULL) {
        free(ch);
        return DETD_ENOMEM;
    }
    *ret = ch;
    return 0;
}

void wire_channel_free(struct wire_channel *ch) {
    if (ch == NULL)
        return;
    wire_gate_enter_();
    grpc_channel_destroy(ch->channel);
    wire_gate_leave_();
    free(ch);
}

static int wire_pack_impl_(const ProtobufCMessage *msg, void **ret_buffer) {
    size_t len = protobuf_c_message_get_packed_size(msg);
    if (len > DETD_MAX_MESSAGE_BYTES) {
        wire_set_error("request of %zu bytes exceeds the %d-byte message "
                       "limit",
                       len, DETD_MAX_MESSAGE_BYTES);
        return DETD_ELIMIT;
    }
    grpc_slice slice = grpc_slice_malloc(len);
    protobuf_c_message_pack(msg, GRPC_SLICE_START_PTR(slice));
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&slice, 1);
    grpc_slice_unref(slice);
    if (bb == NULL)
        return DETD_ENOMEM;
    *ret_buffer = bb;
    return 0;
}

int wire_pack(const ProtobufCMessage *msg, void **ret_buffer) {
    wire_gate_enter_();
    int rc_ = wire_pack_impl_(msg, ret_buffer);
    wire_gate_leave_();
    return rc_;
}

static void wire_buffer_free_impl_(void *buffer) {
    if (buffer != NULL)
        grpc_byte_buffer_destroy(buffer);
}

void wire_buffer_free(void *buffer) {
    wire_gate_enter_();
    wire_buffer_free_impl_(buffer);
    wire_gate_leave_();
}

static int wire_unpack_impl_(void *buffer,
                             const ProtobufCMessageDescriptor *desc,
                             ProtobufCMessage **ret_msg) {
    grpc_byte_buffer *bb = buffer;
    size_t len = grpc_byte_buffer_length(bb);
    if (len > DETD_MAX_MESSAGE_BYTES) {
        wire_set_error("response of %zu bytes exceeds the %d-byte message "
                       "limit",
                       len, DETD_MAX_MESSAGE_BYTES);
        return DETD_ELIMIT;
    }
    grpc_byte_buffer_reader reader;
    if (!grpc_byte_buffer_reader_init(&reader, bb)) {
        wire_set_error("cannot read a %s message", desc->name);
        return DETD_EPROTO;
    }
    grpc_slice slice = grpc_byte_buffer_reader_readall(&reader);
    grpc_byte_buffer_reader_destroy(&reader);
    /* Decompressed data may be larger than what came over the wire. */
    size_t n = GRPC_SLICE_LENGTH(slice);
    if (n > DETD_MAX_MESSAGE_BYTES) {
        grpc_slice_unref(slice);
        wire_set_error("response of %zu bytes exceeds the %d-byte message "
                       "limit",
                       n, DETD_MAX_MESSAGE_BYTES);
        return DETD_ELIMIT;
    }
    ProtobufCMessage *msg =
        protobuf_c_message_unpack(desc, NULL, n, GRPC_SLICE_START_PTR(slice));
    grpc_slice_unref(slice);
    if (msg == NULL) {
        wire_set_error("malformed %s message", desc->name);
        return DETD_EPROTO;
    }
    *ret_msg = msg;
    return 0;
}

int wire_unpack(void *buffer, const ProtobufCMessageDescriptor *desc,
                ProtobufCMessage **ret_msg) {
    wire_gate_enter_();
    int rc_ = wire_unpack_impl_(buffer, desc, ret_msg);
    wire_gate_leave_();
    return rc_;
}

/* Keep the status details of a failed call as this thread's error. */
static int wire_status_err_(grpc_status_code status, const char *msg,
                            const char *method) {
    int err = wire_status_to_err(status, msg);
    if (err < 0) {
        if (msg[0] != '\0')
            wire_set_error("%s", msg);
        else
            wire_set_error("%s: %s", method, detd_strerror(err));
    }
    return err;
}

static grpc_call *wire_call_new_(struct wire_channel *ch,
                                 grpc_completion_queue *cq, const char *method,
                                 gpr_timespec deadline) {
    grpc_slice m = grpc_slice_from_copied_string(method);
    grpc_call *call =
        grpc_channel_create_call(ch->channel, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
                                 m, NULL, deadline, NULL);
    grpc_slice_unref(m);
    return call;
}

static void wire_yield_cb_(void *ctx) {
    (void)ctx;
    wire_gate_yield_();
}

static int wire_unary_impl_(struct wire_channel *ch, const char *method,
                            const ProtobufCMessage *req,
                            const ProtobufCMessageDescriptor *resp_desc,
                            int64_t timeout_ms, ProtobufCMessage **ret_resp) {
    grpc_byte_buffer *send_buf = NULL;
    struct grpc_unary_result res = {.resp = NULL};
    int rc;

    wire_set_error(NULL);
    rc = wire_pack(req, (void **)&send_buf);
    if (rc < 0)
        goto out;
    /* Wait in slices, stepping out of gRPC between them for a fork. */
    rc = grpc_unary_call(ch->channel, method, send_buf, NULL, 0,
                         wire_deadline_(timeout_ms), wire_yield_cb_, NULL,
                         WIRE_SLICE_MS, 0, &res);
    if (rc < 0) {
        if (res.details[0] != '\0')
            wire_set_error("%s", res.details);
        goto out;
    }
    rc = wire_status_err_(res.code, res.details, method);
    if (rc < 0)
        goto out;
    if (res.resp == NULL) {
        wire_set_error("%s: the daemon sent no response", method);
        rc = DETD_EPROTO;
        goto out;
    }
    rc = wire_unpack(res.resp, resp_desc, ret_resp);
out:
    wire_buffer_free(res.resp);
    wire_buffer_free(send_buf);
    return rc;
}

int wire_unary(struct wire_channel *ch, const char *method,
               const ProtobufCMessage *req,
               const ProtobufCMessageDescriptor *resp_desc, int64_t timeout_ms,
               ProtobufCMessage **ret_resp) {
    wire_gate_enter_();
    int rc_ =
        wire_unary_impl_(ch, method, req, resp_desc, timeout_ms, ret_resp);
    wire_gate_leave_();
    return rc_;
}

int wire_health_check(struct wire_channel *ch, const char *service,
                      int64_t timeout_ms, int *ret_status) {
    Grpc__Health__V1__HealthCheckRequest req =
        GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;
    req.service = (char *)(service != NULL ? service : "");
    int rc = wire_unary(ch, WIRE_METHOD_HEALTH_CHECK, &req.base,
                        &grpc__health__v1__health_check_response__descriptor,
                        timeout_ms, &resp);
    if (rc < 0)
        return rc;
    *ret_status = ((Grpc__Health__V1__HealthCheckResponse *)resp)->status;
    protobuf_c_message_free_unpacked(resp, NULL);
    return 0;
}

static int wire_stream_open_impl_(struct wire_channel *ch, const char *method,
                                  const ProtobufCMessageDescriptor *recv_desc,
                                  struct wire_stream **ret) {
    struct wire_stream *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return DETD_ENOMEM;
    s->recv_desc = recv_desc;
    s->details = grpc_empty_slice();
    s->status = GRPC_STATUS_UNKNOWN;
    grpc_metadata_array_init(&s->initial_md);
    grpc_metadata_array_init(&s->trailing_md);
    s->cq = grpc_completion_queue_create_for_next(NULL);
    if (s->cq == NULL)
        goto fail;
    s->call =
        wire_call_new_(ch, s->cq, method, gpr_inf_future(GPR_CLOCK_REALTIME));
    if (s->call == NULL)
        goto fail;
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    op.data.recv_status_on_client.trailing_metadata = &s->trailing_md;
    op.data.recv_status_on_client.status = &s->status;
    op.data.recv_status_on_client.status_details = &s->details;
    if (grpc_call_start_batch(s->call, &op, 1,
                              (void *)(intptr_t)WIRE_TAG_STATUS,
                              NULL) != GRPC_CALL_OK)
        goto fail;
    s->status_pending = 1;
    *ret = s;
    return 0;
fail:
    if (s->call != NULL)
        grpc_call_unref(s->call);
    if (s->cq != NULL) {
        grpc_completion_queue_shutdown(s->cq);
        grpc_completion_queue_destroy(s->cq);
    }
    grpc_metadata_array_destroy(&s->initial_md);
    grpc_metadata_array_destroy(&s->trailing_md);
    free(s);
    wire_set_error("%s: cannot start the stream", method);
    return DETD_EINTERNAL;
}

int wire_stream_open(struct wire_channel *ch, const char *method,
                     const ProtobufCMessageDescriptor *recv_desc,
                     struct wire_stream **ret) {
    wire_gate_enter_();
    int rc_ = wire_stream_open_impl_(ch, method, recv_desc, ret);
    wire_gate_leave_();
    return rc_;
}

static int wire_stream_send_impl_(struct wire_stream *s,
                                  const ProtobufCMessage *msg) {
    if (s->send_pending)
        return DETD_EBUSY;
    int rc = wire_pack(msg, (void **)&s->send_buf);
    if (rc < 0)
        return rc;
    grpc_op ops[2];
    size_t n = 0;
    memset(ops, 0, sizeof(ops));
    if (!s->sent_initial)
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n++].data.send_message.send_message = s->send_buf;
    if (grpc_call_start_batch(s->call, ops, n, (void *)(intptr_t)WIRE_TAG_SEND,
                              NULL) != GRPC_CALL_OK) {
        wire_buffer_free(s->send_buf);
        s->send_buf = NULL;
        return DETD_ECANCELLED;
    }
    s->sent_initial = 1;
    s->send_pending = 1;
    return 0;
}

int wire_stream_send(struct wire_stream *s, const ProtobufCMessage *msg) {
    wire_gate_enter_();
    int rc_ = wire_stream_send_impl_(s, msg);
    wire_gate_leave_();
    return rc_;
}

int wire_stream_sending(const struct wire_stream *s) {
    return s->send_pending;
}

static int wire_stream_recv_impl_(struct wire_stream *s) {
    if (s->recv_pending)
        return 0;
    grpc_op ops[2];
    size_t n = 0;
    memset(ops, 0, sizeof(ops));
    if (!s->recv_initial) {
        ops[n].op = GRPC_OP_RECV_INITIAL_METADATA;
        ops[n++].data.recv_initial_metadata.recv_initial_metadata =
            &s->initial_md;
    }
    ops[n].op = GRPC_OP_RECV_MESSAGE;
    ops[n++].data.recv_message.recv_message = &s->recv_buf;
    if (grpc_call_start_batch(s->call, ops, n, (void *)(intptr_t)WIRE_TAG_RECV,
                              NULL) != GRPC_CALL_OK)
        return DETD_ECANCELLED;
    s->recv_initial = 1;
    s->recv_pending = 1;
    return 0;
}

int wire_stream_recv(struct wire_stream *s) {
    wire_gate_enter_();
    int rc_ = wire_stream_recv_impl_(s);
    wire_gate_leave_();
    return rc_;
}

static void wire_stream_next_impl_(struct wire_stream *s, int64_t deadline_ms,
                                   struct wire_event *ret_ev) {
    memset(ret_ev, 0, sizeof(*ret_ev));
    grpc_event ev;
    for (;;) {
        int64_t slice = WIRE_SLICE_MS;
        if (deadline_ms >= 0) {
            int64_t left = deadline_ms - clock_mono_ms();
            if (left < slice)
                slice = left > 0 ? left : 1;
        }
        ev = grpc_completion_queue_next(s->cq, wire_deadline_(slice), NULL);
        if (ev.type == GRPC_OP_COMPLETE)
            break;
        if (deadline_ms >= 0 && clock_mono_ms() >= deadline_ms) {
            ret_ev->kind = WIRE_EV_TIMEOUT;
            return;
        }
        wire_gate_yield_();
    }
    switch ((intptr_t)ev.tag) {
    case WIRE_TAG_SEND:
        s->send_pending = 0;
        wire_buffer_free(s->send_buf);
        s->send_buf = NULL;
        ret_ev->kind = WIRE_EV_SENT;
        ret_ev->ok = ev.success;
        break;
    case WIRE_TAG_RECV:
        s->recv_pending = 0;
        ret_ev->kind = WIRE_EV_END;
        if (s->recv_buf == NULL)
            break;
        int rc = wire_unpack(s->recv_buf, s->recv_desc, &ret_ev->msg);
        wire_buffer_free(s->recv_buf);
        s->recv_buf = NULL;
        if (rc < 0) {
            s->local_err = rc;
            grpc_call_cancel(s->call, NULL);
            break;
        }
        ret_ev->kind = WIRE_EV_MESSAGE;
        break;
    case WIRE_TAG_STATUS:
    default:
        s->status_pending = 0;
        ret_ev->kind = WIRE_EV_CLOSED;
        ret_ev->err = s->local_err;
        if (ret_ev->err == 0) {
            char *msg = grpc_slice_to_c_string(s->details);
            ret_ev->err =
                wire_status_err_(s->status, msg != NULL ? msg : "", "stream");
            gpr_free(msg);
        }
        /* A stream that ends "OK" still ended. */
        if (ret_ev->err == 0)
            ret_ev->err = DETD_EUNAVAILABLE;
        break;
    }
}

void wire_stream_next(struct wire_stream *s, int64_t deadline_ms,
                      struct wire_event *ret_ev) {
    wire_gate_enter_();
    wire_stream_next_impl_(s, deadline_ms, ret_ev);
    wire_gate_leave_();
}

static void wire_stream_cancel_impl_(struct wire_stream *s) {
    grpc_call_cancel(s->call, NULL);
}

void wire_stream_cancel(struct wire_stream *s) {
    wire_gate_enter_();
    wire_stream_cancel_impl_(s);
    wire_gate_leave_();
}

static void wire_stream_free_impl_(struct wire_stream *s) {
    if (s == NULL)
        return;
    if (s->status_pending || s->send_pending || s->recv_pending)
        grpc_call_cancel(s->call, NULL);
    while (s->status_pending || s->send_pending || s->recv_pending) {
        struct wire_event ev;
        wire_stream_next(s, -1, &ev);
        if (ev.msg != NULL)
            protobuf_c_message_free_unpacked(ev.msg, NULL);
    }
    grpc_call_unref(s->call);
    grpc_completion_queue_shutdown(s->cq);
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(
            s->cq, wire_deadline_(WIRE_SLICE_MS), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN)
            break;
        wire_gate_yield_();
    }
    grpc_completion_queue_destroy(s->cq);
    grpc_slice_unref(s->details);
    grpc_metadata_array_destroy(&s->initial_md);
    grpc_metadata_array_destroy(&s->trailing_md);
    wire_buffer_free(s->send_buf);
    wire_buffer_free(s->recv_buf);
    free(s);
}

void wire_stream_free(struct wire_stream *s) {
    wire_gate_enter_();
    wire_stream_free_impl_(s);
    wire_gate_leave_();
}

/* Whether path is a unix socket (a daemon's, live or left behind). */
static int is_socket(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISSOCK(st.st_mode);
}

const char *wire_default_socket(void) {
    static __thread char user[sizeof(((struct sockaddr_un *)0)->sun_path)];
    const char *env = getenv("DETD_SOCKET");
    if (env != NULL && env[0] != '\0')
        return env;
    if (is_socket(DETD_DEFAULT_SOCKET))
        return DETD_DEFAULT_SOCKET;
    /* A daemon started on demand for this user (the Python package starts
     * one where none is configured): its socket, when there is one. */
    const char *run = getenv("XDG_RUNTIME_DIR");
    int n = run != NULL && run[0] == '/'
                ? snprintf(user, sizeof user, "%s/detd/detd.sock", run)
                : snprintf(user, sizeof user, "/tmp/detd-%u/detd.sock",
                           (unsigned)getuid());
    if (n > 0 && (size_t)n < sizeof user && is_socket(user))
        return user;
    return DETD_DEFAULT_SOCKET;
}
