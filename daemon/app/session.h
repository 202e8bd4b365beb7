/*
 * session: who a call comes from, against the attached sessions of the
 * daemon (struct client_session, daemon.h), on the loop thread. A session
 * belongs to the process that attached it (SO_PEERCRED): a call naming a
 * session from another process is refused.
 */
#ifndef DETD_SESSION_H
#define DETD_SESSION_H

#include <stdint.h>

#include "io/rpc.h"

struct daemon;
struct client_session;

/* The attached session of id in d, or NULL (borrowed from d until the
 * session ends). */
struct client_session *session_find(struct daemon *d, uint64_t id);

/* The caller's peer credentials (pid 0, uid -1 when unknown). */
void session_peer(const rpc_call *call, int32_t *ret_pid, uint32_t *ret_uid);

/* 1 when call comes from the process that attached s, else 0. */
int session_is_caller(const struct client_session *s, const rpc_call *call);

/*
 * The session a call that takes part in a timing pass names (id; 0:
 * none): *ret is the attached session (NULL when id is 0 or names no
 * attached session) and 0 is returned. While d drains, the call is
 * answered UNAVAILABLE; for a session attached by another process,
 * PERMISSION_DENIED (counted in d's calls_refused_session); -1 is then
 * returned (*ret untouched).
 */
int session_of_call(struct daemon *d, rpc_call *call, uint64_t id,
                    struct client_session **ret);

#endif /* DETD_SESSION_H */
