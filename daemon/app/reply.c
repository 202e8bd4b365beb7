/*
 * reply: DecideResponse and ReportResponse (see reply.h).
 */
#define _GNU_SOURCE
#include "app/reply.h"

#include <stdlib.h>

#include "app/convert.h"
#include "app/daemon.h"
#include "app/passes.h"
#include "detd/client.h"

/* See reply.h. */
void reply_decided(rpc_call *call, const struct decision *r,
                   uint32_t waited_ms) {
    struct convert_decision p;
    convert_decision_fill(r, &p, 0);
    Detd__V1__DecideResponse resp = DETD__V1__DECIDE_RESPONSE__INIT;
    resp.api_version = DETD_API_VERSION;
    resp.outcome = DETD__V1__OUTCOME__OUTCOME_DECIDED;
    resp.decision = &p.msg;
    resp.waited_ms = waited_ms;
    rpc_reply(call, &resp.base);
    convert_decision_clear(&p);
}

/* See reply.h. */
void reply_decided_cached(hotcache *hot, rpc_call *call,
                          const struct decision *r) {
    struct convert_decision p;
    convert_decision_fill(r, &p, 0);
    Detd__V1__DecideResponse resp = DETD__V1__DECIDE_RESPONSE__INIT;
    resp.api_version = DETD_API_VERSION;
    resp.outcome = DETD__V1__OUTCOME__OUTCOME_DECIDED;
    resp.decision = &p.msg;
    size_t n = protobuf_c_message_get_packed_size(&resp.base);
    uint8_t *buf = n <= HOTCACHE_MAX_ENTRY ? malloc(n) : NULL;
    if (buf != NULL) {
        protobuf_c_message_pack(&resp.base, buf);
        hotcache_put(hot, r->id, buf, n);
        rpc_reply_packed(call, buf, n);
        free(buf);
    } else {
        rpc_reply(call, &resp.base);
    }
    convert_decision_clear(&p);
}

/* See reply.h. */
void reply_designated(struct daemon *d, rpc_call *call, const char *id,
                      uint64_t claim, int takeover, uint32_t waited_ms) {
    Detd__V1__Decision dec = DETD__V1__DECISION__INIT;
    dec.id = (char *)id;
    Detd__V1__DecideResponse resp = DETD__V1__DECIDE_RESPONSE__INIT;
    resp.api_version = DETD_API_VERSION;
    resp.outcome = DETD__V1__OUTCOME__OUTCOME_DESIGNATED;
    resp.decision = &dec;
    resp.claim_id = claim;
    resp.lease_ms = d->cfg->lease_ms;
    resp.takeover = takeover != 0;
    resp.waited_ms = waited_ms;
    /* A holder asking again under its claim is the same pass: counted and
     * journaled once. */
    if (engine_claim_told(d->engine, id, claim)) {
        d->counters.designations++;
        passes_designated(d, call, id);
    }
    if (takeover)
        d->counters.takeovers++;
    rpc_reply(call, &resp.base);
}

/* See reply.h. */
void reply_timeout(rpc_call *call, uint32_t waited_ms,
                   const struct reply_holder *h) {
    Detd__V1__DecideResponse resp = DETD__V1__DECIDE_RESPONSE__INIT;
    resp.api_version = DETD_API_VERSION;
    resp.outcome = DETD__V1__OUTCOME__OUTCOME_TIMEOUT;
    resp.waited_ms = waited_ms;
    if (h != NULL && h->host != NULL && h->host[0] != '\0') {
        resp.holder_host = (char *)h->host;
        resp.holder_rank = h->rank;
        resp.holder_pid = h->pid;
        resp.held_ms = h->held_ms;
    }
    if (h != NULL) {
        resp.share_index = h->share_index;
        resp.bench = h->bench != 0;
    }
    rpc_reply(call, &resp.base);
}

/* See reply.h. */
void reply_miss(rpc_call *call) {
    Detd__V1__DecideResponse resp = DETD__V1__DECIDE_RESPONSE__INIT;
    resp.api_version = DETD_API_VERSION;
    resp.outcome = DETD__V1__OUTCOME__OUTCOME_MISS;
    rpc_reply(call, &resp.base);
}

/* See reply.h. */
void reply_report(rpc_call *call, const struct decision *r, int superseded) {
    struct convert_decision p;
    convert_decision_fill(r, &p, 0);
    Detd__V1__ReportResponse resp = DETD__V1__REPORT_RESPONSE__INIT;
    resp.api_version = DETD_API_VERSION;
    resp.decision = &p.msg;
    resp.superseded = superseded != 0;
    rpc_reply(call, &resp.base);
    convert_decision_clear(&p);
}
