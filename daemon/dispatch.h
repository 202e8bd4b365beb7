/*
 * dispatch: hand each event of the rpc thread to its method's handler
 * (loop thread), by the one method table (io/rpc_methods.h).
 */
#ifndef DETD_DISPATCH_H
#define DETD_DISPATCH_H

#include "app/daemon.h"

/* Handle ev: a request goes to its method's handler, which consumes it;
 * a stream message (an Attach heartbeat) and the end of a call are
 * handled here. */
void dispatch_event(struct daemon *d, struct rpc_event *ev);

#endif /* DETD_DISPATCH_H */
