/*
 * passes: open timing passes survive a daemon restart (local backend).
 * Each designation is journaled (data/claimlog.h); at start-up every pass
 * of an undecided key whose holder process still runs is restored,
 * reserved for that process: other ranks asking for the key wait, and
 * when the holder (attached anew) asks for the key again it gets the
 * pass back, with its measurements still valid, instead of another rank
 * timing the key a second time. The pass deadline counts only time the
 * daemon ran: a restored pass keeps what --pass-timeout-ms had left when
 * the daemon stopped (as far as the journal shows: the time it ran until
 * the journal's last write is counted, the rest of it and the downtime
 * are not).
 * A holder that does not come back within --lease-ms loses the pass to
 * the next waiter, as any unattached holder does. Loop thread.
 */
#ifndef DETD_PASSES_H
#define DETD_PASSES_H

#include <stdint.h>

#include "io/rpc.h"

struct daemon;
struct client_session;

/* Open the journal and restore the passes it holds (start-up; nothing
 * with etcd). Returns 0, or -1 after logging why the daemon cannot
 * start. */
int passes_start(struct daemon *d);

/* Close the journal. */
void passes_stop(struct daemon *d);

/* Journal a pass of key id handed to the caller of call. */
void passes_designated(struct daemon *d, rpc_call *call, const char *id);

/* If key id's pass was restored for the process calling (its kernel pid
 * and uid), give it to session s: returns 1 with *ret_claim its claim
 * (the caller answers DESIGNATED). Else 0 (nothing done). */
int passes_adopt(struct daemon *d, rpc_call *call, struct client_session *s,
                 const char *id, uint64_t *ret_claim);

#endif /* DETD_PASSES_H */
