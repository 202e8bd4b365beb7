/*
 * dispatch: the method table's handler column (see dispatch.h).
 */
#define _GNU_SOURCE
#include "dispatch.h"

#include "app/benchsplit.h"
#include "app/decide.h"
#include "app/imports.h"
#include "app/storeerr.h"
#include "ops/admin.h"
#include "ops/lock.h"
#include "ops/obslist.h"
#include "ops/tableadmin.h"
#include "ops/votes.h"

typedef void (*dispatch_fn)(struct daemon *d, struct rpc_event *ev);

#define DISPATCH_HANDLER(name, path, desc, streaming, admin, handler)          \
    [RPC_##name] = handler,
static const dispatch_fn handlers[RPC_METHOD_COUNT] = {
    RPC_METHODS(DISPATCH_HANDLER)};
#undef DISPATCH_HANDLER

/* See dispatch.h. */
void dispatch_event(struct daemon *d, struct rpc_event *ev) {
    if (ev->kind == RPC_EV_CLOSED) {
        decide_closed(d, ev);
        return;
    }
    if (ev->kind == RPC_EV_STREAM) {
        /* Heartbeats: being attached is what keeps leases alive. */
        protobuf_c_message_free_unpacked(ev->msg, NULL);
        rpc_call_unref(ev->call);
        return;
    }
    if ((int)ev->method < 0 || ev->method >= RPC_METHOD_COUNT) {
        protobuf_c_message_free_unpacked(ev->msg, NULL);
        rpc_fail(ev->call, RPC_UNIMPLEMENTED, "unknown method");
        return;
    }
    handlers[ev->method](d, ev);
    storeerr_check(d);
}
