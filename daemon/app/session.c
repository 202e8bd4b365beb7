/*
 * session: the caller of a call against the attached sessions (see
 * session.h).
 */
#define _GNU_SOURCE
#include "app/session.h"

#include <inttypes.h>
#include <stddef.h>

#include "app/daemon.h"

/* See session.h. */
struct client_session *session_find(struct daemon *d, uint64_t id) {
    for (size_t i = 0; i < d->nsessions; i++)
        if (d->sessions[i]->id == id)
            return d->sessions[i];
    return NULL;
}

/* See session.h. */
void session_peer(const rpc_call *call, int32_t *ret_pid, uint32_t *ret_uid) {
    const struct rpc_peer_cred *pc = rpc_call_cred(call);
    *ret_pid = pc != NULL ? (int32_t)pc->pid : 0;
    *ret_uid = pc != NULL ? (uint32_t)pc->uid : UINT32_MAX;
}

/* See session.h. */
int session_is_caller(const struct client_session *s, const rpc_call *call) {
    int32_t pid;
    uint32_t uid;
    session_peer(call, &pid, &uid);
    return pid == s->peer_pid && uid == s->peer_uid;
}

/* See session.h. */
int session_of_call(struct daemon *d, rpc_call *call, uint64_t id,
                    struct client_session **ret) {
    if (d->draining) {
        rpc_fail(call, RPC_UNAVAILABLE, "daemon is shutting down");
        return -1;
    }
    struct client_session *s = id != 0 ? session_find(d, id) : NULL;
    if (s != NULL && !session_is_caller(s, call)) {
        int32_t pid;
        uint32_t uid;
        session_peer(call, &pid, &uid);
        d->counters.calls_refused_session++;
        rpc_fail(call, RPC_PERMISSION_DENIED,
                 "session %" PRIu64 " belongs to the process that attached it "
                 "(pid %d uid %u), not to this caller (pid %d uid %u)",
                 s->id, (int)s->peer_pid, (unsigned)s->peer_uid, (int)pid,
                 (unsigned)uid);
        return -1;
    }
    *ret = s;
    return 0;
}
