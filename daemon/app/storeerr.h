/*
 * storeerr: failed store calls, answered and told in one place (loop
 * thread). A failure of the disk under the store (full, an I/O error, a
 * read-only remount) is the disk's state, not the request's: the caller
 * is answered UNAVAILABLE, which libdetd retries within its budget, and
 * the daemon logs it once per episode (from the first failure to the
 * next write that succeeds, which logs the recovery) and counts every
 * failed call (detd_store_write_failures_total).
 */
#ifndef DETD_STOREERR_H
#define DETD_STOREERR_H

#include "io/rpc.h"

struct daemon;

/* Note the failed store call that returned rc (its message:
 * store_errmsg(d->store)): a disk failure is counted, and logged when it
 * opens an episode; returns 1 for one. Other errors are left to the
 * caller (returns 0). */
int storeerr_note(struct daemon *d, int rc);

/* Answer call for the failed store call that returned rc, with the
 * store's message: UNAVAILABLE for a disk failure (noted as by
 * storeerr_note()), INTERNAL for anything else. */
void storeerr_reply(struct daemon *d, rpc_call *call, int rc);

/* Close an open episode, logging the recovery, once a write has
 * succeeded since it opened. Cheap when none is open: called after each
 * event the loop handles. */
void storeerr_check(struct daemon *d);

#endif /* DETD_STOREERR_H */
