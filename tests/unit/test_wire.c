/*
 * Tests of the wire layer and of libdetd against a small stand-in daemon:
 * a real gRPC core server on a real unix socket, run in its own process.
 * It implements just enough of detd.v1 (Attach, Decide, Report, Observe,
 * Status) and grpc.health.v1 to check what travels over the wire.
 *
 * Stand-in behaviour (keys are test vocabulary, not the daemon's):
 *   Decide "designate*"  -> DESIGNATED, claim_id = session_id * 1000 + 1;
 *                           sessions count from 100 in the first stand-in
 *                           of a test, from 200 in the one started again,
 *                           and so on: like the daemon's random claim ids,
 *                           a restarted stand-in never repeats a claim id
 *                           its predecessor gave
 *   Decide "hang"        -> never answered (deadline tests); the time
 *                           left to the call's deadline when it arrived
 *                           is the counter hang_deadline_ms
 *   Decide "late"        -> the first: TIMEOUT at once (another process
 *                           times the key); the rest never answered (a
 *                           daemon whose answer to the last slice comes
 *                           late on a loaded machine)
 *   Decide "limit"       -> INVALID_ARGUMENT "key exceeds 4096 bytes"
 *   Decide other         -> DECIDED, config = candidates[0], decided_by =
 *                           the asking client (so tests see pid, rank)
 *   Decide with an unknown nonzero session -> FAILED_PRECONDITION
 *   Report               -> the timing with the lowest first sample
 *   Reset kernel "kick"  -> cancels every open Attach stream
 *   Status               -> counters: attaches, heartbeats, decides,
 *                           reports, observes, streams_open, sessions_sent,
 *                           hang_deadline_ms
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include "detd.pb-c.h"
#include "clock.h"
#include "detd/autotune.h"
#include "detd/client.h"
#include "health.pb-c.h"
#include "runner.h"
#include "wire.h"

/* ---- the stand-in daemon ------------------------------------------- */

enum fake_op { FAKE_NEW, FAKE_RECV, FAKE_SEND, FAKE_CLOSE, FAKE_STATUS };

struct fake_call;
struct fake_tag {
    struct fake_call *call;
    enum fake_op op;
};

struct fake_call {
    grpc_call *call;
    grpc_call_details details;
    grpc_metadata_array md;
    grpc_byte_buffer *recv;
    grpc_byte_buffer *send;
    struct fake_tag tags[5];
    int pending;
    int closed;
    int cancelled;
    int attach;
    int attached;
    uint64_t session_id;
    int status_sent;
    struct fake_call *next; /* list of attach streams */
};

struct fake {
    grpc_server *server;
    grpc_completion_queue *cq;
    struct fake_call *streams;
    uint64_t next_session;
    uint32_t lease_ms;
    uint64_t attaches, heartbeats, decides, reports, observes, open;
    uint64_t sessions_sent;    /* decides that carried a live session id */
    uint64_t hang_deadline_ms; /* left to the last "hang" call's deadline */
    uint64_t late_asks;        /* Decides of "late" */
};

static void fake_request_(struct fake *f) {
    struct fake_call *c = calloc(1, sizeof(*c));
    for (int i = 0; i < 5; i++)
        c->tags[i] = (struct fake_tag){c, (enum fake_op)i};
    grpc_call_details_init(&c->details);
    grpc_metadata_array_init(&c->md);
    grpc_server_request_call(f->server, &c->call, &c->details, &c->md, f->cq,
                             f->cq, &c->tags[FAKE_NEW]);
}

static void fake_batch_(struct fake_call *c, grpc_op *ops, size_t n,
                        enum fake_op op) {
    if (grpc_call_start_batch(c->call, ops, n, &c->tags[op], NULL) ==
        GRPC_CALL_OK)
        c->pending++;
}

static void fake_recv_(struct fake_call *c) {
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &c->recv;
    fake_batch_(c, &op, 1, FAKE_RECV);
}

/* Answer a unary call: msg (may be NULL) and a status. */
static void fake_reply_(struct fake_call *c, const ProtobufCMessage *msg,
                        grpc_status_code status, const char *details) {
    grpc_op ops[2];
    size_t n = 0;
    memset(ops, 0, sizeof(ops));
    grpc_slice d = grpc_slice_from_copied_string(details ? details : "");
    if (msg != NULL && status == GRPC_STATUS_OK) {
        void *bb = NULL;
        wire_pack(msg, &bb);
        c->send = bb;
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = c->send;
    }
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = status;
    ops[n++].data.send_status_from_server.status_details = &d;
    fake_batch_(c, ops, n, FAKE_STATUS);
    c->status_sent = 1;
    grpc_slice_unref(d);
}

static int fake_session_live_(struct fake *f, uint64_t sid) {
    for (struct fake_call *s = f->streams; s != NULL; s = s->next)
        if (s->session_id == sid && !s->closed)
            return 1;
    return 0;
}

static void fake_unary_(struct fake *f, struct fake_call *c,
                        const char *method) {
    void *bb = c->recv;
    ProtobufCMessage *in = NULL;
    if (strcmp(method, WIRE_METHOD_HEALTH_CHECK) == 0) {
        Grpc__Health__V1__HealthCheckResponse r =
            GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
        r.status =
            GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
        fake_reply_(c, &r.base, GRPC_STATUS_OK, NULL);
    } else if (strcmp(method, WIRE_METHOD_DECIDE) == 0) {
        wire_unpack(bb, &detd__v1__decide_request__descriptor, &in);
        Detd__V1__DecideRequest *q = (Detd__V1__DecideRequest *)in;
        f->decides++;
        Detd__V1__DecideResponse r = DETD__V1__DECIDE_RESPONSE__INIT;
        Detd__V1__Decision d = DETD__V1__DECISION__INIT;
        char id[128];
        if (q->session_id != 0 && !fake_session_live_(f, q->session_id)) {
            fake_reply_(c, NULL, GRPC_STATUS_FAILED_PRECONDITION,
                        "unknown session");
        } else if (strcmp(q->key->key, "hang") == 0) {
            /* never answered */
            gpr_timespec now = gpr_now(GPR_CLOCK_MONOTONIC);
            gpr_timespec at = gpr_convert_clock_type(c->details.deadline,
                                                     GPR_CLOCK_MONOTONIC);
            int64_t left = gpr_time_to_millis(gpr_time_sub(at, now));
            f->hang_deadline_ms = left > 0 ? (uint64_t)left : 0;
        } else if (strcmp(q->key->key, "late") == 0) {
            if (f->late_asks++ == 0) {
                r.outcome = DETD__V1__OUTCOME__OUTCOME_TIMEOUT;
                r.holder_rank = 3;
                r.waited_ms = 1;
                fake_reply_(c, &r.base, GRPC_STATUS_OK, NULL);
            }
        } else if (strcmp(q->key->key, "limit") == 0) {
            fake_reply_(c, NULL, GRPC_STATUS_INVALID_ARGUMENT,
                        "key exceeds 4096 bytes");
        } else if (strncmp(q->key->key, "designate", 9) == 0 &&
                   q->session_id != 0) {
            f->sessions_sent++;
            r.outcome = DETD__V1__OUTCOME__OUTCOME_DESIGNATED;
            r.claim_id = q->session_id * 1000 + 1;
            r.lease_ms = 5000;
            fake_reply_(c, &r.base, GRPC_STATUS_OK, NULL);
        } else {
            if (q->session_id != 0)
                f->sessions_sent++;
            snprintf(id, sizeof(id), "id-%s", q->key->key);
            d.id = id;
            d.config = q->key->n_candidates ? q->key->candidates[0] : "";
            d.source = DETD__V1__SOURCE__SOURCE_TABLE;
            d.decided_by = q->client;
            r.outcome = DETD__V1__OUTCOME__OUTCOME_DECIDED;
            r.decision = &d;
            r.waited_ms = 7;
            fake_reply_(c, &r.base, GRPC_STATUS_OK, NULL);
        }
    } else if (strcmp(method, WIRE_METHOD_REPORT) == 0) {
        wire_unpack(bb, &detd__v1__report_request__descriptor, &in);
        Detd__V1__ReportRequest *q = (Detd__V1__ReportRequest *)in;
        f->reports++;
        Detd__V1__ReportResponse r = DETD__V1__REPORT_RESPONSE__INIT;
        Detd__V1__Decision d = DETD__V1__DECISION__INIT;
        size_t best = 0;
        for (size_t i = 1; i < q->n_timings; i++)
            if (q->timings[i]->n_ms > 0 &&
                q->timings[i]->ms[0] < q->timings[best]->ms[0])
                best = i;
        d.config = q->n_timings ? q->timings[best]->config : "";
        d.source = DETD__V1__SOURCE__SOURCE_TIMED;
        d.claim_id = q->claim_id;
        d.decided_by = q->client;
        r.decision = &d;
        fake_reply_(c, &r.base, GRPC_STATUS_OK, NULL);
    } else if (strcmp(method, WIRE_METHOD_OBSERVE) == 0) {
        f->observes++;
        Detd__V1__ObserveResponse r = DETD__V1__OBSERVE_RESPONSE__INIT;
        fake_reply_(c, &r.base, GRPC_STATUS_OK, NULL);
    } else if (strcmp(method, WIRE_METHOD_STATUS) == 0) {
        Detd__V1__StatusResponse r = DETD__V1__STATUS_RESPONSE__INIT;
        Detd__V1__Counter cs[9];
        Detd__V1__Counter *cp[9];
        const char *names[9] = {
            "attaches",      "heartbeats",       "decides",
            "reports",       "observes",         "streams_open",
            "sessions_sent", "hang_deadline_ms", "late_asks"};
        uint64_t vals[9] = {
            f->attaches,      f->heartbeats,       f->decides,
            f->reports,       f->observes,         f->open,
            f->sessions_sent, f->hang_deadline_ms, f->late_asks};
        for (int i = 0; i < 9; i++) {
            Detd__V1__Counter init = DETD__V1__COUNTER__INIT;
            cs[i] = init;
            cs[i].name = (char *)names[i];
            cs[i].value = vals[i];
            cp[i] = &cs[i];
        }
        r.version = "fake";
        r.n_counters = 9;
        r.counters = cp;
        r.pid = (uint32_t)getpid();
        fake_reply_(c, &r.base, GRPC_STATUS_OK, NULL);
    } else if (strcmp(method, WIRE_METHOD_RESET) == 0) {
        wire_unpack(bb, &detd__v1__reset_request__descriptor, &in);
        Detd__V1__ResetRequest *q = (Detd__V1__ResetRequest *)in;
        if (strcmp(q->kernel, "kick") == 0)
            for (struct fake_call *s = f->streams; s != NULL; s = s->next)
                if (!s->closed)
                    grpc_call_cancel_with_status(
                        s->call, GRPC_STATUS_UNAVAILABLE, "kicked", NULL);
        Detd__V1__ResetResponse r = DETD__V1__RESET_RESPONSE__INIT;
        fake_reply_(c, &r.base, GRPC_STATUS_OK, NULL);
    } else {
        fake_reply_(c, NULL, GRPC_STATUS_UNIMPLEMENTED, "unknown method");
    }
    if (in != NULL)
        protobuf_c_message_free_unpacked(in, NULL);
}

static void fake_attach_msg_(struct fake *f, struct fake_call *c) {
    ProtobufCMessage *in = NULL;
    if (wire_unpack(c->recv, &detd__v1__attach_request__descriptor, &in) < 0)
        return;
    Detd__V1__AttachRequest *q = (Detd__V1__AttachRequest *)in;
    if (q->heartbeat) {
        f->heartbeats++;
    } else if (!c->attached) {
        c->attached = 1;
        c->session_id = ++f->next_session;
        f->attaches++;
        Detd__V1__AttachEvent e = DETD__V1__ATTACH_EVENT__INIT;
        e.api_version = 1;
        e.session_id = c->session_id;
        e.lease_ms = f->lease_ms;
        e.daemon_version = "fake";
        void *bb = NULL;
        wire_pack(&e.base, &bb);
        c->send = bb;
        grpc_op op;
        memset(&op, 0, sizeof(op));
        op.op = GRPC_OP_SEND_MESSAGE;
        op.data.send_message.send_message = c->send;
        fake_batch_(c, &op, 1, FAKE_SEND);
    }
    protobuf_c_message_free_unpacked(in, NULL);
}

static void fake_free_(struct fake *f, struct fake_call *c) {
    for (struct fake_call **p = &f->streams; *p != NULL; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            break;
        }
    if (c->attach)
        f->open--;
    grpc_call_unref(c->call);
    grpc_call_details_destroy(&c->details);
    grpc_metadata_array_destroy(&c->md);
    wire_buffer_free(c->send);
    wire_buffer_free(c->recv);
    free(c);
}

static void fake_serve_(const char *path, uint32_t lease_ms, unsigned boot) {
    struct fake f;
    memset(&f, 0, sizeof(f));
    f.next_session = 99 + 100 * (uint64_t)boot;
    f.lease_ms = lease_ms;
    grpc_init();
    f.cq = grpc_completion_queue_create_for_next(NULL);
    f.server = grpc_server_create(NULL, NULL);
    grpc_server_register_completion_queue(f.server, f.cq, NULL);
    char target[256];
    snprintf(target, sizeof(target), "unix:%s", path);
    grpc_server_credentials *creds = grpc_insecure_server_credentials_create();
    if (grpc_server_add_http2_port(f.server, target, creds) == 0)
        _exit(3);
    grpc_server_credentials_release(creds);
    grpc_server_start(f.server);
    for (int i = 0; i < 8; i++)
        fake_request_(&f);
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(
            f.cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type != GRPC_OP_COMPLETE)
            continue;
        struct fake_tag *t = ev.tag;
        struct fake_call *c = t->call;
        if (t->op == FAKE_NEW) {
            fake_request_(&f);
            char *method = grpc_slice_to_c_string(c->details.method);
            c->attach = strcmp(method, WIRE_METHOD_ATTACH) == 0;
            gpr_free(method);
            if (c->attach) {
                c->next = f.streams;
                f.streams = c;
                f.open++;
            }
            grpc_op op;
            memset(&op, 0, sizeof(op));
            op.op = GRPC_OP_SEND_INITIAL_METADATA;
            fake_batch_(c, &op, 1, FAKE_SEND);
            memset(&op, 0, sizeof(op));
            op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
            op.data.recv_close_on_server.cancelled = &c->cancelled;
            fake_batch_(c, &op, 1, FAKE_CLOSE);
            fake_recv_(c);
            continue;
        }
        c->pending--;
        if (t->op == FAKE_RECV) {
            if (c->recv == NULL) {
                if (c->attach && !c->status_sent)
                    fake_reply_(c, NULL, GRPC_STATUS_OK, NULL);
            } else if (c->attach) {
                fake_attach_msg_(&f, c);
                wire_buffer_free(c->recv);
                c->recv = NULL;
                fake_recv_(c);
            } else {
                char *method = grpc_slice_to_c_string(c->details.method);
                fake_unary_(&f, c, method);
                gpr_free(method);
                wire_buffer_free(c->recv);
                c->recv = NULL;
            }
        } else if (t->op == FAKE_SEND) {
            wire_buffer_free(c->send);
            c->send = NULL;
        } else if (t->op == FAKE_CLOSE) {
            c->closed = 1;
        }
        if (c->closed && c->pending == 0)
            fake_free_(&f, c);
    }
}

struct fake_proc {
    pid_t pid;
    unsigned boot; /* stand-ins started at path before this one */
    char dir[64];
    char path[128];
};

/* Start the stand-in daemon in its own process; wait for its socket. */
/* Does path accept a connection now? (closed at once: no call is made) */
static int accepts_(const char *path) {
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return 0;
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    size_t n = strlen(path);
    CHECK(n < sizeof(a.sun_path));
    memcpy(a.sun_path, path, n + 1);
    int ok = connect(s, (struct sockaddr *)&a, sizeof(a)) == 0;
    close(s);
    return ok;
}

static void fake_start_at_(struct fake_proc *p, uint32_t lease_ms) {
    unlink(p->path);
    fflush(NULL);
    p->pid = fork();
    CHECK(p->pid >= 0);
    if (p->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        /* A fresh image: the caller may have gRPC running already. */
        char lease[16], boot[16];
        snprintf(lease, sizeof(lease), "%u", (unsigned)lease_ms);
        snprintf(boot, sizeof(boot), "%u", p->boot);
        execl("/proc/self/exe", "test_wire", "--fake-serve", p->path, lease,
              boot, (char *)NULL);
        _exit(127);
    }
    /* Ready when the socket accepts a connection: the file appears at
     * bind(), a moment before listen(), and a connect in between is
     * refused. */
    int ready = 0;
    for (int i = 0; i < 500 && !(ready = accepts_(p->path)); i++)
        usleep(10000);
    CHECK(ready);
    p->boot++;
}

static void fake_start_(struct fake_proc *p, uint32_t lease_ms) {
    snprintf(p->dir, sizeof(p->dir), "/tmp/detd-wire-XXXXXX");
    CHECK(mkdtemp(p->dir) != NULL);
    snprintf(p->path, sizeof(p->path), "%s/detd.sock", p->dir);
    p->boot = 0;
    fake_start_at_(p, lease_ms);
}

static void fake_kill_(struct fake_proc *p) {
    kill(p->pid, SIGKILL);
    waitpid(p->pid, NULL, 0);
}

static void fake_stop_(struct fake_proc *p) {
    fake_kill_(p);
    unlink(p->path);
    rmdir(p->dir);
}

static struct wire_channel *fake_channel_(const struct fake_proc *p) {
    char target[160];
    snprintf(target, sizeof(target), "unix:%s", p->path);
    struct wire_channel *ch = NULL;
    CHECK_EQ_INT(wire_channel_new(target, &ch), 0);
    return ch;
}

/* One named counter from the stand-in's Status. */
static uint64_t fake_counter_(const struct fake_proc *p, const char *name) {
    struct wire_channel *ch = fake_channel_(p);
    Detd__V1__StatusRequest req = DETD__V1__STATUS_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;
    CHECK_EQ_INT(wire_unary(ch, WIRE_METHOD_STATUS, &req.base,
                            &detd__v1__status_response__descriptor, 5000,
                            &resp),
                 0);
    Detd__V1__StatusResponse *r = (Detd__V1__StatusResponse *)resp;
    uint64_t v = UINT64_MAX;
    for (size_t i = 0; i < r->n_counters; i++)
        if (strcmp(r->counters[i]->name, name) == 0)
            v = r->counters[i]->value;
    protobuf_c_message_free_unpacked(resp, NULL);
    wire_channel_free(ch);
    CHECK(v != UINT64_MAX);
    return v;
}

static void fake_kick_(const struct fake_proc *p) {
    struct wire_channel *ch = fake_channel_(p);
    Detd__V1__ResetRequest req = DETD__V1__RESET_REQUEST__INIT;
    req.kernel = "kick";
    ProtobufCMessage *resp = NULL;
    CHECK_EQ_INT(wire_unary(ch, WIRE_METHOD_RESET, &req.base,
                            &detd__v1__reset_response__descriptor, 5000, &resp),
                 0);
    protobuf_c_message_free_unpacked(resp, NULL);
    wire_channel_free(ch);
}

static const char *const cands_[] = {"BLOCK=128,num_warps=4",
                                     "BLOCK=256,num_warps=8"};

static struct detd_key key_(const char *k) {
    struct detd_key key = {NULL, "sm90", "mod:kern@1", k, cands_, 2, NULL};
    return key;
}

static detd_client *open_(const struct fake_proc *p, int32_t rank) {
    struct detd_identity id = {"hostA",       rank,   0,   8,
                               "NVIDIA H200", "sm90", 132, "job-1"};
    detd_client *c = NULL;
    CHECK_EQ_INT(detd_client_open(p->path, &id, &c), 0);
    return c;
}

/* ---- wire layer ---------------------------------------------------- */

TEST(pack_unpack_roundtrip) {
    Detd__V1__AttachEvent e = DETD__V1__ATTACH_EVENT__INIT;
    e.session_id = 12345678901ULL;
    e.namespace_ = "ns";
    void *bb = NULL;
    CHECK_EQ_INT(wire_pack(&e.base, &bb), 0);
    ProtobufCMessage *m = NULL;
    CHECK_EQ_INT(wire_unpack(bb, &detd__v1__attach_event__descriptor, &m), 0);
    Detd__V1__AttachEvent *out = (Detd__V1__AttachEvent *)m;
    CHECK_EQ_INT(out->session_id, 12345678901ULL);
    CHECK_STR(out->namespace_, "ns");
    protobuf_c_message_free_unpacked(m, NULL);
    wire_buffer_free(bb);
}

TEST(pack_refuses_oversized_message) {
    CHECK_EQ_INT(wire_init(), 0);
    size_t n = DETD_MAX_MESSAGE_BYTES + 1;
    char *big = malloc(n + 1);
    memset(big, 'x', n);
    big[n] = '\0';
    Detd__V1__AttachEvent e = DETD__V1__ATTACH_EVENT__INIT;
    e.namespace_ = big;
    void *bb = NULL;
    CHECK_EQ_INT(wire_pack(&e.base, &bb), DETD_ELIMIT);
    CHECK(bb == NULL);
    CHECK(strstr(wire_last_error(), "limit") != NULL);
    free(big);
}

TEST(unpack_caps_size_and_rejects_garbage) {
    CHECK_EQ_INT(wire_init(), 0);
    grpc_slice s = grpc_slice_malloc(DETD_MAX_MESSAGE_BYTES + 1);
    memset(GRPC_SLICE_START_PTR(s), 0, GRPC_SLICE_LENGTH(s));
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    ProtobufCMessage *m = NULL;
    CHECK_EQ_INT(wire_unpack(bb, &detd__v1__attach_event__descriptor, &m),
                 DETD_ELIMIT);
    CHECK(m == NULL);
    grpc_byte_buffer_destroy(bb);

    /* field 2 (varint) with a truncated value */
    static const unsigned char junk[] = {0x10, 0xff, 0xff};
    s = grpc_slice_from_copied_buffer((const char *)junk, sizeof(junk));
    bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    CHECK_EQ_INT(wire_unpack(bb, &detd__v1__attach_event__descriptor, &m),
                 DETD_EPROTO);
    grpc_byte_buffer_destroy(bb);
}

TEST(status_mapping) {
    CHECK_EQ_INT(wire_status_to_err(GRPC_STATUS_OK, NULL), 0);
    CHECK_EQ_INT(wire_status_to_err(GRPC_STATUS_DEADLINE_EXCEEDED, ""),
                 DETD_ETIMEDOUT);
    CHECK_EQ_INT(wire_status_to_err(GRPC_STATUS_INVALID_ARGUMENT, "bad"),
                 DETD_EINVAL);
    CHECK_EQ_INT(wire_status_to_err(GRPC_STATUS_INVALID_ARGUMENT,
                                    "key exceeds 4096 bytes"),
                 DETD_ELIMIT);
    CHECK_EQ_INT(
        wire_status_to_err(GRPC_STATUS_RESOURCE_EXHAUSTED, "too many waiters"),
        DETD_ELIMIT);
    CHECK_EQ_INT(wire_status_to_err(GRPC_STATUS_RESOURCE_EXHAUSTED, "busy"),
                 DETD_EBUSY);
    CHECK_EQ_INT(wire_status_to_err(GRPC_STATUS_FAILED_PRECONDITION, NULL),
                 DETD_ESTALE);
    CHECK_EQ_INT(wire_status_to_err(GRPC_STATUS_UNIMPLEMENTED, NULL),
                 DETD_EUNIMPL);
    CHECK_EQ_INT(wire_status_to_err(GRPC_STATUS_PERMISSION_DENIED, NULL),
                 DETD_EDENIED);
    CHECK_EQ_INT(wire_status_to_err(GRPC_STATUS_UNAVAILABLE,
                                    "failed to connect to all addresses"),
                 DETD_ECONNECT);
    CHECK_EQ_INT(
        wire_status_to_err(GRPC_STATUS_UNAVAILABLE, "etcd unreachable"),
        DETD_EUNAVAILABLE);
    CHECK_EQ_INT(wire_status_to_err(GRPC_STATUS_NOT_FOUND, NULL),
                 DETD_ENOTFOUND);
    CHECK_EQ_INT(wire_status_to_err(GRPC_STATUS_CANCELLED, NULL),
                 DETD_ECANCELLED);
    CHECK_EQ_INT(wire_status_to_err(GRPC_STATUS_DATA_LOSS, NULL),
                 DETD_ECORRUPT);
    CHECK_EQ_INT(wire_status_to_err(GRPC_STATUS_INTERNAL, NULL),
                 DETD_EINTERNAL);
}

TEST(health_check_serving) {
    struct fake_proc p;
    fake_start_(&p, 300);
    struct wire_channel *ch = fake_channel_(&p);
    int st = -1;
    CHECK_EQ_INT(wire_health_check(ch, "", 5000, &st), 0);
    CHECK_EQ_INT(st, WIRE_HEALTH_SERVING);
    wire_channel_free(ch);
    fake_stop_(&p);
}

TEST(unary_nonexistent_socket_is_connect_error) {
    struct wire_channel *ch = NULL;
    CHECK_EQ_INT(wire_channel_new("unix:/nonexistent/detd.sock", &ch), 0);
    int st = -1;
    /* Refused at once, not after the deadline (far away, so a loaded
     * machine cannot blur the two). */
    int64_t t0 = clock_mono_ms();
    int rc = wire_health_check(ch, "", 60000, &st);
    CHECK(rc == DETD_ECONNECT || rc == DETD_EUNAVAILABLE);
    CHECK(clock_mono_ms() - t0 < 30000);
    CHECK(wire_last_error()[0] != '\0');
    wire_channel_free(ch);
}

TEST(unary_unknown_method_is_unimpl) {
    struct fake_proc p;
    fake_start_(&p, 300);
    struct wire_channel *ch = fake_channel_(&p);
    Detd__V1__StatusRequest req = DETD__V1__STATUS_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;
    CHECK_EQ_INT(wire_unary(ch, "/detd.v1.Nope/Nothing", &req.base,
                            &detd__v1__status_response__descriptor, 5000,
                            &resp),
                 DETD_EUNIMPL);
    CHECK(resp == NULL);
    wire_channel_free(ch);
    fake_stop_(&p);
}

/* ---- libdetd against the stand-in ---------------------------------- */

TEST(decide_sends_identity_and_session) {
    struct fake_proc p;
    fake_start_(&p, 300);
    detd_client *c = open_(&p, 3);
    struct detd_key k = key_("K1");
    struct detd_answer *a = NULL;
    CHECK_EQ_INT(detd_decide(c, &k, 0, 5000, &a), 0);
    CHECK_EQ_INT(a->outcome, DETD_OUTCOME_DECIDED);
    CHECK_STR(a->config, cands_[0]);
    CHECK_STR(a->decision_id, "id-K1");
    CHECK_EQ_INT(a->source, DETD_SOURCE_TABLE);
    CHECK_STR(a->decided_by_host, "hostA");
    CHECK_EQ_INT(a->decided_by_rank, 3);
    CHECK_EQ_INT(a->decided_by_pid, getpid());
    CHECK_EQ_INT(a->waited_ms, 7);
    detd_answer_free(a);
    CHECK_EQ_INT(fake_counter_(&p, "attaches"), 1);
    CHECK_EQ_INT(fake_counter_(&p, "sessions_sent"), 1);
    detd_client_close(c);
    fake_stop_(&p);
}

TEST(designated_then_report_uses_committed_config) {
    struct fake_proc p;
    fake_start_(&p, 300);
    detd_client *c = open_(&p, 0);
    struct detd_key k = key_("designate-1");
    struct detd_answer *a = NULL;
    CHECK_EQ_INT(detd_decide(c, &k, 0, 5000, &a), 0);
    CHECK_EQ_INT(a->outcome, DETD_OUTCOME_DESIGNATED);
    CHECK_EQ_INT(a->claim_id, 100 * 1000 + 1); /* first session is 100 */
    CHECK_EQ_INT(a->lease_ms, 5000);
    CHECK(a->config == NULL);
    uint64_t claim = a->claim_id;
    detd_answer_free(a);

    double t0[] = {2.0, 2.1}, t1[] = {1.5, 1.6};
    struct detd_timing tm[] = {{cands_[0], t0, 2, 0}, {cands_[1], t1, 2, 0}};
    CHECK_EQ_INT(detd_report(c, claim, &k, tm, 2, "3.6.0", 5000, &a), 0);
    CHECK_EQ_INT(a->outcome, DETD_OUTCOME_DECIDED);
    CHECK_STR(a->config, cands_[1]);
    CHECK_EQ_INT(a->source, DETD_SOURCE_TIMED);
    CHECK_EQ_INT(a->claim_id, claim);
    CHECK_EQ_INT(a->superseded, 0);
    detd_answer_free(a);

    CHECK_EQ_INT(detd_observe(c, &k, cands_[1], DETD_SOURCE_TIMED,
                              DETD_OBSERVE_GOVERNED, 5000),
                 0);
    CHECK_EQ_INT(fake_counter_(&p, "observes"), 1);
    CHECK_EQ_INT(fake_counter_(&p, "reports"), 1);
    detd_client_close(c);
    fake_stop_(&p);
}

TEST(daemon_status_message_is_kept) {
    struct fake_proc p;
    fake_start_(&p, 300);
    detd_client *c = open_(&p, 0);
    struct detd_key k = key_("limit");
    struct detd_answer *a = NULL;
    CHECK_EQ_INT(detd_decide(c, &k, 0, 5000, &a), DETD_ELIMIT);
    CHECK(a == NULL);
    CHECK_STR(detd_client_last_error(), "key exceeds 4096 bytes");
    /* the next successful call clears it */
    k = key_("K2");
    CHECK_EQ_INT(detd_decide(c, &k, 0, 5000, &a), 0);
    CHECK_STR(detd_client_last_error(), "");
    detd_answer_free(a);
    detd_client_close(c);
    fake_stop_(&p);
}

TEST(decide_deadline) {
    struct fake_proc p;
    fake_start_(&p, 300);
    detd_client *c = open_(&p, 0);
    CHECK_EQ_INT(detd_client_connect(c, 5000), 0);
    struct detd_key k = key_("hang");
    struct detd_answer *a = NULL;
    int64_t t0 = clock_mono_ms();
    /* No answer before the deadline: a wait that ended, not an error. 2 s:
     * the call reaches the stand-in well before its deadline even on a
     * loaded machine (one that came after it would leave the counter 0). */
    CHECK_EQ_INT(detd_decide(c, &k, 0, 2000, &a), 0);
    int64_t took = clock_mono_ms() - t0;
    CHECK_EQ_INT(a->outcome, DETD_OUTCOME_TIMEOUT);
    CHECK(a->daemon_away);
    detd_answer_free(a);
    /* Not before the deadline; the deadline the server saw is the 2000 ms
     * asked for (less what the trip took), so a deadline in the wrong unit
     * or never sent fails here; the local bound only says the call did
     * not hang (generous: the machine may be loaded). */
    CHECK(took >= 1950 && took < 30000);
    /* gRPC sends a timeout to three significant figures, rounded up: up
     * to 1% more (2000 ms can arrive as 2010). */
    uint64_t seen = fake_counter_(&p, "hang_deadline_ms");
    CHECK(seen > 0 && seen <= 2000 + 2000 / 100);
    detd_client_close(c);
    fake_stop_(&p);
}

/* A wait whose budget ends on a slice the daemon did not answer in time,
 * after it had answered the wait (another process times the key) and with
 * no outage: the reason is the wait for that pass, not an absent daemon
 * (docs/resolve-contract.md). */
static int never_launched_(void *user, size_t index, const char *config) {
    (void)user, (void)index, (void)config;
    return DETD_EENV;
}

static int never_timed_(void *user, size_t index, const char *config,
                        detd_launch_cb launch, void *launch_user,
                        unsigned warmup, unsigned reps, double *ret_ms) {
    (void)user, (void)index, (void)config, (void)launch, (void)launch_user;
    (void)warmup, (void)reps, (void)ret_ms;
    return DETD_EENV;
}

TEST(autotune_budget_ends_on_a_late_answer) {
    struct fake_proc p;
    fake_start_(&p, 300);
    detd_client *c = open_(&p, 0);
    CHECK_EQ_INT(detd_client_connect(c, 5000), 0);
    struct detd_key k = key_("late");
    k.kernel = "native::kern@1";
    struct detd_autotune_options o;
    detd_autotune_options_init(&o);
    /* Room for the first answer and the second Decide to reach the
     * stand-in on a loaded machine; the budget then ends on that Decide. */
    o.timeout_ms = 3000;
    o.timer = never_timed_; /* never designated: nothing is timed */
    struct detd_autotune_result r = {.size = sizeof r};
    size_t index = 99;
    CHECK_EQ_INT(detd_autotune(c, &k, never_launched_, NULL, &o, &index, &r),
                 DETD_ETIMEDOUT);
    CHECK(strstr(detd_client_last_error(),
                 "timed out waiting for another process's timing pass") !=
          NULL);
    CHECK(strstr(detd_client_last_error(), "opts->timeout_ms=3000") != NULL);
    CHECK(fake_counter_(&p, "late_asks") >= 2);
    detd_client_close(c);
    fake_stop_(&p);
}

TEST(heartbeats_keep_the_session) {
    struct fake_proc p;
    fake_start_(&p, 150); /* heartbeat every 50 ms */
    /* Wait for 5 heartbeats (a loaded machine may delay them); they
     * never come faster than every 50 ms: 5 take at least 200 ms from
     * before the client attached. */
    int64_t t0 = clock_mono_ms();
    detd_client *c = open_(&p, 0);
    CHECK_EQ_INT(detd_client_connect(c, 5000), 0);
    CHECK_EQ_INT(detd_client_connect(c, 5000), 0); /* cheap no-op */
    uint64_t hb = 0;
    while ((hb = fake_counter_(&p, "heartbeats")) < 5 &&
           clock_mono_ms() - t0 < 30000)
        usleep(10000);
    int64_t took = clock_mono_ms() - t0;
    CHECK(hb >= 5);
    CHECK(took >= 200);
    CHECK(hb <= (uint64_t)(took / 50) + 2);
    CHECK_EQ_INT(fake_counter_(&p, "attaches"), 1);
    CHECK_EQ_INT(fake_counter_(&p, "streams_open"), 1);
    detd_client_close(c);
    /* close cancelled the stream: the daemon sees it go */
    uint64_t open = 1;
    for (int i = 0; i < 200 && open != 0; i++) {
        usleep(10000);
        open = fake_counter_(&p, "streams_open");
    }
    CHECK_EQ_INT(open, 0);
    fake_stop_(&p);
}

TEST(reattach_after_stream_loss) {
    struct fake_proc p;
    fake_start_(&p, 300);
    detd_client *c = open_(&p, 0);
    struct detd_key k = key_("designate-a");
    struct detd_answer *a = NULL;
    CHECK_EQ_INT(detd_decide(c, &k, 0, 5000, &a), 0);
    CHECK_EQ_INT(a->claim_id, 100 * 1000 + 1);
    detd_answer_free(a);
    fake_kick_(&p);
    /* the keeper notices, the next call attaches with a new session;
     * a call racing the loss is refused once and retried */
    usleep(100 * 1000);
    CHECK_EQ_INT(detd_decide(c, &k, 0, 5000, &a), 0);
    CHECK_EQ_INT(a->claim_id, 101 * 1000 + 1);
    detd_answer_free(a);
    CHECK_EQ_INT(fake_counter_(&p, "attaches"), 2);
    detd_client_close(c);
    fake_stop_(&p);
}

TEST(daemon_restart) {
    struct fake_proc p;
    fake_start_(&p, 300);
    detd_client *c = open_(&p, 0);
    struct detd_key k = key_("K");
    struct detd_answer *a = NULL;
    CHECK_EQ_INT(detd_decide(c, &k, 0, 5000, &a), 0);
    detd_answer_free(a);
    fake_kill_(&p);
    a = NULL;
    /* Within the reconnect window a deadline that comes first is a wait
     * that ended (ask again), with the daemon away. */
    int rc = detd_decide(c, &k, 0, 2000, &a);
    CHECK_EQ_INT(rc, 0);
    CHECK_EQ_INT(a->outcome, DETD_OUTCOME_TIMEOUT);
    CHECK(a->daemon_away);
    detd_answer_free(a);
    struct detd_stats st = {.size = sizeof st};
    CHECK_EQ_INT(detd_client_stats(c, &st), 0);
    CHECK_EQ_INT(st.outages, 1);
    CHECK(st.down_ms > 0);
    fake_start_at_(&p, 300);
    rc = -1;
    for (int i = 0; i < 200 && rc != 0; i++) {
        a = NULL;
        rc = detd_decide(c, &k, 0, 2000, &a);
        if (rc == 0 && a->outcome != DETD_OUTCOME_DECIDED) {
            detd_answer_free(a);
            rc = -1;
        }
        if (rc != 0)
            usleep(50 * 1000);
    }
    if (rc != 0)
        fprintf(stderr, "after restart: %s: %s (server %s)\n",
                detd_err_name(rc), detd_client_last_error(),
                kill(p.pid, 0) == 0 ? "alive" : "gone");
    CHECK_EQ_INT(rc, 0);
    CHECK_STR(a->config, cands_[0]);
    detd_answer_free(a);
    CHECK_EQ_INT(fake_counter_(&p, "attaches"), 1);
    CHECK_EQ_INT(detd_client_stats(c, &st), 0);
    CHECK_EQ_INT(st.outages, 1); /* one outage, however many calls met it */
    CHECK_EQ_INT(st.down_ms, 0);
    CHECK_EQ_INT(st.attaches, 2);
    detd_client_close(c);
    fake_stop_(&p);
}

/* ---- daemon restarts: reconnect, retry, no replayed report -------- */

struct decide_arg {
    detd_client *c;
    const char *key;
    int64_t timeout_ms;
    int rc;
    struct detd_answer *a;
    char err[512];
};

static void *decide_bg_(void *arg) {
    struct decide_arg *d = arg;
    struct detd_key k = key_(d->key);
    d->rc = detd_decide(d->c, &k, 0, d->timeout_ms, &d->a);
    snprintf(d->err, sizeof(d->err), "%s", detd_client_last_error());
    return NULL;
}

/* Wait until the stand-in counts at least n of a counter (30 s). */
static uint64_t await_counter_(const struct fake_proc *p, const char *name,
                               uint64_t n) {
    uint64_t v = 0;
    int64_t t0 = clock_mono_ms();
    while ((v = fake_counter_(p, name)) < n && clock_mono_ms() - t0 < 30000)
        usleep(10000);
    return v;
}

/* A Decide made while the daemon is down waits for the new daemon within
 * its deadline (a handle that reached the daemon before), then succeeds on
 * a new session. */
TEST(decide_waits_across_restart) {
    struct fake_proc p;
    fake_start_(&p, 300);
    detd_client *c = open_(&p, 0);
    struct detd_key k = key_("designate-r");
    struct detd_answer *a = NULL;
    CHECK_EQ_INT(detd_decide(c, &k, 0, 5000, &a), 0);
    CHECK_EQ_INT(a->claim_id, 100 * 1000 + 1);
    detd_answer_free(a);
    fake_kill_(&p);
    unlink(p.path);
    /* The stand-in is started from this thread (its parent-death signal
     * follows the thread that forked it). */
    pthread_t th;
    struct decide_arg da = {c, "designate-r", 20000, -1, NULL, ""};
    int64_t t0 = clock_mono_ms();
    CHECK(pthread_create(&th, NULL, decide_bg_, &da) == 0);
    usleep(700 * 1000);
    fake_start_at_(&p, 300);
    pthread_join(th, NULL);
    int64_t took = clock_mono_ms() - t0;
    int rc = da.rc;
    a = da.a;
    if (rc != 0)
        fprintf(stderr, "decide across restart: %s: %s\n", detd_err_name(rc),
                da.err);
    CHECK_EQ_INT(rc, 0);
    /* Answered by the new daemon (it was down for 700 ms), under its
     * first session. */
    CHECK(took >= 600);
    CHECK_EQ_INT(a->outcome, DETD_OUTCOME_DESIGNATED);
    CHECK_EQ_INT(a->claim_id, 200 * 1000 + 1);
    detd_answer_free(a);
    CHECK_EQ_INT(fake_counter_(&p, "attaches"), 1);
    /* The keeper took the open claim again too: its Decide runs beside
     * this one and may still be on its way when this one is answered. */
    CHECK_EQ_INT(await_counter_(&p, "sessions_sent", 2), 2);
    detd_client_close(c);
    fake_stop_(&p);
}

/* After a restart the handle attaches again by itself and heartbeats go
 * on, with no call made. */
TEST(keeper_reattaches_and_heartbeats_after_restart) {
    struct fake_proc p;
    fake_start_(&p, 150);
    detd_client *c = open_(&p, 0);
    CHECK_EQ_INT(detd_client_connect(c, 5000), 0);
    fake_kill_(&p);
    usleep(300 * 1000);
    fake_start_at_(&p, 150);
    CHECK(await_counter_(&p, "heartbeats", 3) >= 3);
    CHECK_EQ_INT(fake_counter_(&p, "attaches"), 1);
    CHECK_EQ_INT(fake_counter_(&p, "streams_open"), 1);
    detd_client_close(c);
    fake_stop_(&p);
}

/* A claim of a session that ended is never reported to the new daemon
 * under its old id (the new daemon's claim ids start again: the old id
 * would name another claim): the keeper takes the claim again as soon as
 * it re-attached, and the report goes out under the claim taken again. */
TEST(report_of_a_claim_from_before_a_restart_goes_under_the_new_claim) {
    struct fake_proc p;
    fake_start_(&p, 300);
    detd_client *c = open_(&p, 0);
    struct detd_key k = key_("designate-x");
    struct detd_answer *a = NULL;
    CHECK_EQ_INT(detd_decide(c, &k, 0, 5000, &a), 0);
    uint64_t claim = a->claim_id;
    CHECK_EQ_INT(claim, 100 * 1000 + 1);
    detd_answer_free(a);
    fake_kill_(&p);
    fake_start_at_(&p, 300);
    CHECK_EQ_INT(await_counter_(&p, "attaches", 1), 1); /* re-attached */
    double t0[] = {2.0}, t1[] = {1.0};
    struct detd_timing tm[] = {{cands_[0], t0, 1, 0}, {cands_[1], t1, 1, 0}};
    a = NULL;
    CHECK_EQ_INT(detd_report(c, claim, &k, tm, 2, "3.6.0", 5000, &a), 0);
    CHECK_STR(a->config, cands_[1]);
    /* sent under the new daemon's claim, not the one of before */
    CHECK_EQ_INT(a->claim_id, 200 * 1000 + 1);
    detd_answer_free(a);
    CHECK_EQ_INT(fake_counter_(&p, "reports"), 1);
    /* the keeper's Decide under the new session took it again */
    CHECK_EQ_INT(fake_counter_(&p, "sessions_sent"), 1);
    struct detd_stats st = {.size = sizeof st};
    CHECK_EQ_INT(detd_client_stats(c, &st), 0);
    CHECK_EQ_INT(st.claims_renewed, 1);
    detd_client_close(c);
    fake_stop_(&p);
}

/* A claim given up (detd_claim_forget()) is not taken again after a
 * restart: nothing asks the new daemon for it. */
TEST(a_forgotten_claim_is_not_taken_again) {
    struct fake_proc p;
    fake_start_(&p, 300);
    detd_client *c = open_(&p, 0);
    struct detd_key k = key_("designate-f");
    struct detd_answer *a = NULL;
    CHECK_EQ_INT(detd_decide(c, &k, 0, 5000, &a), 0);
    uint64_t claim = a->claim_id;
    detd_answer_free(a);
    CHECK_EQ_INT(detd_claim_forget(c, claim), 0);
    CHECK_EQ_INT(detd_claim_forget(c, claim), 0); /* unknown: ignored */
    CHECK_EQ_INT(detd_claim_forget(c, 0), DETD_EINVAL);
    CHECK_EQ_INT(detd_claim_forget(NULL, claim), DETD_EINVAL);
    fake_kill_(&p);
    fake_start_at_(&p, 300);
    /* The keeper takes claims again before it runs the new stream: once
     * it heartbeats there, it has asked for all it would. */
    CHECK(await_counter_(&p, "heartbeats", 1) >= 1);
    CHECK_EQ_INT(fake_counter_(&p, "sessions_sent"), 0);
    struct detd_stats st = {.size = sizeof st};
    CHECK_EQ_INT(detd_client_stats(c, &st), 0);
    CHECK_EQ_INT(st.claims_renewed, 0);
    CHECK_EQ_INT(st.outages, 1);
    detd_client_close(c);
    fake_stop_(&p);
}

/* Past the reconnect window calls fail at once, saying how long the
 * daemon has been gone; when it is back, they work again. */
TEST(reconnect_window_bounds_the_wait) {
    struct fake_proc p;
    fake_start_(&p, 300);
    setenv("DETD_RECONNECT_MS", "2000", 1);
    detd_client *c = open_(&p, 0);
    unsetenv("DETD_RECONNECT_MS");
    struct detd_key k = key_("K");
    struct detd_answer *a = NULL;
    CHECK_EQ_INT(detd_decide(c, &k, 0, 5000, &a), 0);
    detd_answer_free(a);
    fake_kill_(&p);
    unlink(p.path);
    a = NULL;
    int64_t t0 = clock_mono_ms();
    int rc = detd_decide(c, &k, 0, 20000, &a);
    int64_t took = clock_mono_ms() - t0;
    CHECK(rc == DETD_ECONNECT || rc == DETD_EUNAVAILABLE);
    CHECK(a == NULL);
    /* waited for the window (2 s from the outage's start), not for the
     * 20 s deadline */
    CHECK(took < 15000);
    CHECK(strstr(detd_client_last_error(), "reconnect window of 2000 ms") !=
          NULL);
    CHECK(strstr(detd_client_last_error(), p.path) != NULL);
    struct detd_stats st = {.size = sizeof st};
    CHECK_EQ_INT(detd_client_stats(c, &st), 0);
    CHECK(st.down_ms >= 2000);
    /* the window has passed: the next call does not wait for it again */
    t0 = clock_mono_ms();
    rc = detd_observe(c, &k, cands_[0], DETD_SOURCE_TABLE, 0, 20000);
    CHECK(rc == DETD_ECONNECT || rc == DETD_EUNAVAILABLE);
    CHECK(clock_mono_ms() - t0 < 2000);
    fake_start_at_(&p, 300);
    rc = -1;
    for (int i = 0; i < 300 && rc != 0; i++) {
        rc = detd_decide(c, &k, 0, 2000, &a);
        if (rc != 0)
            usleep(20 * 1000);
    }
    CHECK_EQ_INT(rc, 0);
    detd_answer_free(a);
    detd_client_close(c);
    fake_stop_(&p);
}

struct thread_arg {
    detd_client *c;
    int id;
    int failures;
};

static void *decide_many_(void *arg) {
    struct thread_arg *t = arg;
    for (int i = 0; i < 100; i++) {
        char key[32];
        snprintf(key, sizeof(key), "T%d-%d", t->id, i);
        struct detd_key k = key_(key);
        struct detd_answer *a = NULL;
        if (detd_decide(t->c, &k, 0, 10000, &a) != 0 ||
            strcmp(a->config, cands_[0]) != 0)
            t->failures++;
        detd_answer_free(a);
    }
    return NULL;
}

TEST(concurrent_threads_share_one_handle) {
    struct fake_proc p;
    fake_start_(&p, 300);
    detd_client *c = open_(&p, 0);
    pthread_t th[8];
    struct thread_arg args[8];
    for (int i = 0; i < 8; i++) {
        args[i] = (struct thread_arg){c, i, 0};
        CHECK(pthread_create(&th[i], NULL, decide_many_, &args[i]) == 0);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ_INT(args[i].failures, 0);
    }
    CHECK_EQ_INT(fake_counter_(&p, "decides"), 800);
    CHECK_EQ_INT(fake_counter_(&p, "attaches"), 1);
    detd_client_close(c);
    fake_stop_(&p);
}

/* The child of a fork uses the handle: its own connection, its own
 * session, its own pid; the parent goes on with its session. */
TEST(fork_child_decides_parent_keeps_working) {
    struct fake_proc p;
    fake_start_(&p, 300);
    detd_client *c = open_(&p, 5);
    struct detd_key k = key_("designate-parent");
    struct detd_answer *a = NULL;
    CHECK_EQ_INT(detd_decide(c, &k, 0, 5000, &a), 0);
    CHECK_EQ_INT(a->claim_id, 100 * 1000 + 1);
    detd_answer_free(a);

    fflush(NULL);
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        struct detd_key kc = key_("child");
        struct detd_answer *ac = NULL;
        int rc = detd_decide(c, &kc, 0, 5000, &ac);
        if (rc != 0) {
            fprintf(stderr, "child: decide: %s: %s\n", detd_err_name(rc),
                    detd_client_last_error());
            _exit(10);
        }
        if (ac->decided_by_pid != getpid() || ac->decided_by_rank != 5)
            _exit(11);
        detd_answer_free(ac);
        kc = key_("designate-child");
        if (detd_decide(c, &kc, 0, 5000, &ac) != 0)
            _exit(12);
        if (ac->claim_id != 101 * 1000 + 1) /* a session of its own */
            _exit(13);
        detd_answer_free(ac);
        /* deadlines work in the child (gRPC's timers run here too) */
        kc = key_("hang");
        int64_t t0 = clock_mono_ms();
        rc = detd_decide(c, &kc, 0, 300, &ac);
        if (rc != 0 || ac->outcome != DETD_OUTCOME_TIMEOUT ||
            clock_mono_ms() - t0 > 30000) {
            fprintf(stderr, "child: hang: %s after %lld ms\n",
                    detd_err_name(rc), (long long)(clock_mono_ms() - t0));
            _exit(14);
        }
        detd_answer_free(ac);
        detd_client_close(c);
        _exit(0);
    }
    /* the parent keeps working while the child runs */
    for (int i = 0; i < 20; i++) {
        k = key_("designate-parent");
        CHECK_EQ_INT(detd_decide(c, &k, 0, 5000, &a), 0);
        CHECK_EQ_INT(a->claim_id, 100 * 1000 + 1);
        detd_answer_free(a);
    }
    int st = 0;
    CHECK(waitpid(child, &st, 0) == child);
    CHECK(WIFEXITED(st));
    CHECK_EQ_INT(WEXITSTATUS(st), 0);
    k = key_("designate-parent");
    CHECK_EQ_INT(detd_decide(c, &k, 0, 5000, &a), 0);
    CHECK_EQ_INT(a->claim_id, 100 * 1000 + 1);
    detd_answer_free(a);
    CHECK_EQ_INT(fake_counter_(&p, "attaches"), 2);
    detd_client_close(c);
    fake_stop_(&p);
}

int main(int argc, char **argv) {
    if (argc == 5 && strcmp(argv[1], "--fake-serve") == 0) {
        fake_serve_(argv[2], (uint32_t)atoi(argv[3]), (unsigned)atoi(argv[4]));
        return 0;
    }
    return runner_main(argc, argv);
}
