/*
 * reply: the answers of Decide and Report, built in one place (loop
 * thread). Everything is borrowed for the call; each function answers
 * call once (its request reference is released by the rpc adapter).
 */
#ifndef DETD_REPLY_H
#define DETD_REPLY_H

#include <stdint.h>

#include "core/decision.h"
#include "core/hotcache.h"
#include "io/rpc.h"

struct daemon;

/* DECIDED with decision r, after waiting waited_ms. */
void reply_decided(rpc_call *call, const struct decision *r,
                   uint32_t waited_ms);

/* DECIDED with r (no wait), packed once and kept in hot for the rpc
 * thread's answers to the next askers of the key. */
void reply_decided_cached(hotcache *hot, rpc_call *call,
                          const struct decision *r);

/* DESIGNATED for decision id with claim (takeover: it passed from another
 * rank, counted in d's takeovers), counted in d's designations and
 * journaled (passes_designated()) the first time the claim is answered: a
 * holder asking again under it (an early claim asked for at lookup, a
 * retry) starts no new timing pass (engine_claim_told()). */
void reply_designated(struct daemon *d, rpc_call *call, const char *id,
                      uint64_t claim, int takeover, uint32_t waited_ms);

/* Who holds a key's claim, for a TIMEOUT answer (strings borrowed). */
struct reply_holder {
    const char *host; /* NULL or "": not held on this daemon */
    int32_t rank;
    int32_t pid;
    uint32_t held_ms;
    uint32_t share_index; /* 0: no share given */
    int bench;            /* with share_index: a benchmark share */
};

/* TIMEOUT after waited_ms: not decided yet (apply on_miss when the
 * caller's own time is up). h (may be NULL: unknown) says who holds the
 * claim and, for a share answer, the share given. */
void reply_timeout(rpc_call *call, uint32_t waited_ms,
                   const struct reply_holder *h);

/* MISS: a no_claim ask that found nothing. */
void reply_miss(rpc_call *call);

/* A Report's answer: the decision that stands (superseded: not the
 * reporter's). */
void reply_report(rpc_call *call, const struct decision *r, int superseded);

#endif /* DETD_REPLY_H */
