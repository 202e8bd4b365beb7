/*
 * fake_rpc: the rpc functions app/ calls, recording into struct rpc_call
 * (see fake_rpc.h).
 */
#define _GNU_SOURCE
#include "fake_rpc.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n, size);
    if (p == NULL) {
        fprintf(stderr, "fake_rpc: out of memory\n");
        abort();
    }
    return p;
}

/* See fake_rpc.h. */
rpc_call *fake_call_new(int64_t deadline_ms) {
    rpc_call *c = xcalloc(1, sizeof(*c));
    c->deadline_ms = deadline_ms;
    return c;
}

/* See fake_rpc.h. */
void fake_call_free(rpc_call *call) {
    if (call == NULL)
        return;
    free(call->buf);
    free(call);
}

/* Count an answer; only the first is recorded. Returns 1 for the first. */
static int first_answer(rpc_call *call, enum fake_answer kind) {
    call->answers++;
    if (call->answers > 1)
        return 0;
    call->kind = kind;
    return 1;
}

void rpc_reply(rpc_call *call, const ProtobufCMessage *msg) {
    if (!first_answer(call, FAKE_REPLY))
        return;
    call->desc = msg->descriptor;
    call->len = protobuf_c_message_get_packed_size(msg);
    call->buf = xcalloc(1, call->len + 1);
    protobuf_c_message_pack(msg, call->buf);
}

void rpc_reply_packed(rpc_call *call, const uint8_t *buf, size_t len) {
    if (!first_answer(call, FAKE_REPLY_PACKED))
        return;
    call->len = len;
    call->buf = xcalloc(1, len + 1);
    memcpy(call->buf, buf, len);
}

void rpc_fail(rpc_call *call, rpc_code code, const char *fmt, ...) {
    if (!first_answer(call, FAKE_FAIL))
        return;
    call->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(call->msg, sizeof(call->msg), fmt, ap);
    va_end(ap);
}

void rpc_finish(rpc_call *call) {
    first_answer(call, FAKE_FINISH);
}

void rpc_watch_close(rpc_call *call) {
    call->watched++;
}

void rpc_stream_send(rpc_call *call, const ProtobufCMessage *msg) {
    (void)msg;
    call->streamed++;
}

void rpc_call_ref(rpc_call *call) {
    call->refs++;
}

void rpc_call_unref(rpc_call *call) {
    call->refs--;
}

int64_t rpc_call_deadline_ms(const rpc_call *call) {
    return call->deadline_ms;
}

/* See fake_rpc.h. */
Detd__V1__DecideResponse *fake_decide_response(const rpc_call *call) {
    if (call->kind == FAKE_REPLY &&
        call->desc != &detd__v1__decide_response__descriptor)
        return NULL;
    if (call->kind != FAKE_REPLY && call->kind != FAKE_REPLY_PACKED)
        return NULL;
    return detd__v1__decide_response__unpack(NULL, call->len, call->buf);
}

/* See fake_rpc.h. */
Detd__V1__ReportResponse *fake_report_response(const rpc_call *call) {
    if (call->kind != FAKE_REPLY ||
        call->desc != &detd__v1__report_response__descriptor)
        return NULL;
    return detd__v1__report_response__unpack(NULL, call->len, call->buf);
}

/* See fake_rpc.h. */
Detd__V1__DecideRequest *fake_decide_request(uint32_t wait_ms) {
    Detd__V1__DecideRequest r = DETD__V1__DECIDE_REQUEST__INIT;
    r.wait_ms = wait_ms;
    uint8_t buf[64];
    size_t n = protobuf_c_message_get_packed_size(&r.base);
    if (n > sizeof(buf))
        abort();
    protobuf_c_message_pack(&r.base, buf);
    Detd__V1__DecideRequest *u = detd__v1__decide_request__unpack(NULL, n, buf);
    if (u == NULL)
        abort();
    return u;
}

const struct rpc_peer_cred *rpc_call_cred(const rpc_call *call) {
    return call->has_cred ? &call->cred : NULL;
}
