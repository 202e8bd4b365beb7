/*
 * passend: how a timing pass ends without a decision, on the loop thread:
 * rejected, failed on every candidate (kept), or given back (environment).
 * Each answers the call it is given and tells the key's waiters.
 */
#ifndef DETD_APP_PASSEND_H
#define DETD_APP_PASSEND_H

#include <stddef.h>
#include <stdint.h>

#include "app/daemon.h"
#include "app/validate.h"
#include "io/rpc.h"

/*
 * Answer call FAILED_PRECONDITION with the failure kept for decision id
 * (every candidate failed in its pass). Returns 1 when it answered (also
 * with a store error), 0 when id has none.
 */
int passend_answer_failed(struct daemon *d, rpc_call *call, const char *id);

/*
 * The holder of claim on vk sent a report the daemon cannot use (why,
 * borrowed): answer call INVALID_ARGUMENT, end the claim, fail every
 * waiter of the key with why.
 */
void passend_reject(struct daemon *d, rpc_call *call, const struct vkey *vk,
                    uint64_t claim, const char *why);

/*
 * The holder of claim on vk (identity c, peer pid ppid) gives it back:
 * its pass could not run in its environment (err, borrowed). Ends the
 * claim, stores nothing, fails every waiter with the error, counts and
 * logs it once, answers call with an empty ReportResponse.
 */
void passend_release_env(struct daemon *d, rpc_call *call,
                         const struct vkey *vk, uint64_t claim,
                         const Detd__V1__ClientIdentity *c, int32_t ppid,
                         const char *err);

/*
 * The holder of claim on vk (identity c, peer pid ppid) passes it on
 * before timing anything, with nothing wrong (ReportRequest.pass_on):
 * the claim goes to the key's oldest live waiter on this daemon, or is
 * dropped with the cluster claim; nothing stored, no waiter failed.
 * Counts and logs it, answers call with an empty ReportResponse.
 */
void passend_pass_on(struct daemon *d, rpc_call *call, const struct vkey *vk,
                     uint64_t claim, const Detd__V1__ClientIdentity *c,
                     int32_t ppid);

/* The reason a pass of req in which every candidate failed is kept with,
 * into buf (size bytes): the daemon's verdict, then the first candidate's
 * error when the report carried one. */
void passend_failed_reason(const Detd__V1__ReportRequest *req, char *buf,
                           size_t size);

/* Keep the failure of vk's pass (why) for later askers, with who sent it
 * (c as it claimed, ppid and puid as the kernel saw them). A store that
 * cannot keep it is logged, not answered. */
void passend_record_failed(struct daemon *d, const struct vkey *vk,
                           const Detd__V1__ClientIdentity *c, int32_t ppid,
                           uint32_t puid, const char *why);

#endif /* DETD_APP_PASSEND_H */
