/*
 * fake_rpc: a link-time stand-in for the rpc adapter (io/rpc.c) in the
 * unit tests of app/. The test executable defines the rpc_* functions
 * app/ calls, so the linker never takes rpc.o out of libdetd_io.a and no
 * gRPC server is needed.
 *
 * A fake call records every answer it gets: how many (a REQUEST
 * reference is consumed exactly once), the first one's kind, its status
 * code and formatted message (rpc_fail) or its serialized bytes (rpc_reply,
 * rpc_reply_packed). Tests unpack those bytes with the generated
 * unpackers to assert outcome, config, superseded, claim id and wait.
 */
#ifndef DETD_TEST_FAKE_RPC_H
#define DETD_TEST_FAKE_RPC_H

#include <stddef.h>
#include <stdint.h>

#include "detd.pb-c.h"
#include "io/rpc.h"

enum fake_answer {
    FAKE_NONE = 0,
    FAKE_REPLY,        /* rpc_reply(): a message, packed here */
    FAKE_REPLY_PACKED, /* rpc_reply_packed(): bytes packed by the caller */
    FAKE_FAIL,         /* rpc_fail(): code and message */
    FAKE_FINISH,       /* rpc_finish() */
};

struct rpc_call {
    int64_t deadline_ms; /* what rpc_call_deadline_ms() returns */
    int answers;         /* rpc_reply + rpc_reply_packed + rpc_fail +
                            rpc_finish */
    int watched;         /* rpc_watch_close() calls */
    int streamed;        /* rpc_stream_send() calls */
    int refs;            /* rpc_call_ref() minus rpc_call_unref() */
    /* The first answer. */
    enum fake_answer kind;
    rpc_code code;
    char msg[512];
    const ProtobufCMessageDescriptor *desc; /* FAKE_REPLY: its type */
    uint8_t *buf; /* FAKE_REPLY / FAKE_REPLY_PACKED: the bytes (owned) */
    size_t len;
    /* What rpc_call_cred() returns: cred when has_cred, else NULL. */
    struct rpc_peer_cred cred;
    int has_cred;
};

/* A new call with deadline deadline_ms (INT64_MAX: none); free it with
 * fake_call_free(). Never NULL (aborts the test on OOM). */
rpc_call *fake_call_new(int64_t deadline_ms);

/* Free call and what it recorded. NULL is a no-op. */
void fake_call_free(rpc_call *call);

/* The call's answer as a DecideResponse (heap: free it with
 * detd__v1__decide_response__free_unpacked()), or NULL when its first
 * answer was not a DecideResponse reply. */
Detd__V1__DecideResponse *fake_decide_response(const rpc_call *call);

/* The same for a ReportResponse. */
Detd__V1__ReportResponse *fake_report_response(const rpc_call *call);

/* A DecideRequest allocated as the rpc adapter allocates them (unpacked,
 * owned by the caller: pending_free() frees it), with wait_ms set. */
Detd__V1__DecideRequest *fake_decide_request(uint32_t wait_ms);

#endif /* DETD_TEST_FAKE_RPC_H */
