/* libdetd: the split of a timing pass's benchmarks (detd_share()) and the
 * device it is measured on; see include/detd/client.h for the contracts. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client_int.h"
#include "clock.h"
#include "utf8.h"

/* What the daemon keeps of a device name (DAEMON_MAX_IDENTITY_STRING). */
#define SHARE_MAX_DEVICE 256

DETD_EXPORT int detd_client_set_device(detd_client *client,
                                       const char *device) {
    wire_set_error(NULL);
    if (client == NULL) {
        wire_set_error("client is NULL");
        return DETD_EINVAL;
    }
    size_t n = device != NULL ? strlen(device) : 0;
    if (n > SHARE_MAX_DEVICE) {
        wire_set_error("device is %zu bytes, over the limit of %d bytes", n,
                       SHARE_MAX_DEVICE);
        return DETD_EINVAL;
    }
    size_t off = 0;
    if (utf8_check((const uint8_t *)device, n, &off) != UTF8_OK) {
        wire_set_error("device is not valid UTF-8 (byte %zu)", off);
        return DETD_EINVAL;
    }
    char *copy = NULL;
    if (n > 0 && (copy = strdup(device)) == NULL)
        return DETD_ENOMEM;
    free(client->device);
    client->device = copy;
    return 0;
}

/* Check the members of s that libdetd can judge; name the bad one. */
static int share_check_(const struct detd_share *s) {
    const char *bad = NULL;
    if (s->timings == NULL && s->n_timings > 0)
        bad = "share->timings is NULL with n_timings > 0";
    else if (s->reference_ms == NULL && s->n_reference_ms > 0)
        bad = "share->reference_ms is NULL with n_reference_ms > 0";
    else if (s->claim_id != 0 && s->n_timings > 0)
        bad = "share->timings: the holder (claim_id) gives no timings";
    else if (s->claim_id != 0 && s->n_reference_ms > 0)
        bad = "share->reference_ms: the holder (claim_id) gives none";
    else if (s->claim_id == 0 && s->collect)
        bad = "share->collect needs share->claim_id: only the holder collects";
    else if (s->reclaim && s->claim_id == 0)
        bad = "share->reclaim needs share->claim_id: only the holder reclaims";
    else if (s->reclaim && (s->take == NULL || s->take[0] == '\0'))
        bad = "share->reclaim needs share->take";
    if (bad == NULL)
        return 0;
    wire_set_error("%s", bad);
    return DETD_EINVAL;
}

static int share_dup_samples_(const double *v, size_t n, double **ret,
                              size_t *ret_n) {
    *ret_n = n;
    if (n == 0)
        return 0;
    *ret = malloc(n * sizeof(**ret));
    if (*ret == NULL)
        return DETD_ENOMEM;
    memcpy(*ret, v, n * sizeof(**ret));
    return 0;
}

static int share_is_candidate_(const struct detd_key *k, const char *c) {
    for (size_t i = 0; i < k->n_candidates; i++)
        if (strcmp(k->candidates[i], c) == 0)
            return 1;
    return 0;
}

/* Every config of answer r is one of key's candidates (as every answer
 * libdetd returns): 0, or DETD_EPROTO naming the first that is not. */
static int share_check_answer_(const struct detd_key *key,
                               const Detd__V1__ShareResponse *r) {
    if (r->reference[0] != '\0' && !share_is_candidate_(key, r->reference)) {
        wire_set_error("share: the reference '%.200s' is not a candidate",
                       r->reference);
        return DETD_EPROTO;
    }
    for (size_t i = 0; i < r->n_given; i++) {
        const Detd__V1__CandidateTiming *t = r->given[i]->timing;
        if (t == NULL || !share_is_candidate_(key, t->config)) {
            wire_set_error("share: given[%zu] is not a candidate's timing", i);
            return DETD_EPROTO;
        }
    }
    for (size_t i = 0; i < r->n_pending; i++) {
        if (!share_is_candidate_(key, r->pending[i])) {
            wire_set_error("share: pending[%zu] '%.200s' is not a candidate", i,
                           r->pending[i]);
            return DETD_EPROTO;
        }
    }
    return 0;
}

/* The library's copy of a ShareResponse (already checked). */
static int share_answer_new_(const Detd__V1__ShareResponse *r,
                             struct detd_share_answer **ret) {
    struct detd_share_answer *a = calloc(1, sizeof(*a));
    if (a == NULL)
        return DETD_ENOMEM;
    a->open = r->open != 0;
    a->granted = r->granted != 0;
    if (r->reference[0] != '\0' &&
        (a->reference = strdup(r->reference)) == NULL)
        goto nomem;
    if (r->n_given > 0 &&
        (a->given = calloc(r->n_given, sizeof(*a->given))) == NULL)
        goto nomem;
    for (size_t i = 0; i < r->n_given; i++) {
        const Detd__V1__ShareTiming *g = r->given[i];
        struct detd_share_timing *t = &a->given[a->n_given++];
        t->failed = g->timing->failed != 0;
        t->helper = g->helper;
        if ((t->config = strdup(g->timing->config)) == NULL ||
            (t->device = strdup(g->device)) == NULL ||
            share_dup_samples_(g->timing->ms, g->timing->n_ms, &t->ms,
                               &t->n_ms) != 0 ||
            share_dup_samples_(g->reference_ms, g->n_reference_ms,
                               &t->reference_ms, &t->n_reference_ms) != 0)
            goto nomem;
    }
    if (r->n_pending > 0 &&
        (a->pending = calloc(r->n_pending, sizeof(*a->pending))) == NULL)
        goto nomem;
    for (size_t i = 0; i < r->n_pending; i++)
        if ((a->pending[a->n_pending++] = strdup(r->pending[i])) == NULL)
            goto nomem;
    *ret = a;
    return 0;
nomem:
    detd_share_answer_free(a);
    return DETD_ENOMEM;
}

DETD_EXPORT int detd_share(detd_client *client, const struct detd_key *key,
                           const struct detd_share *share, int64_t timeout_ms,
                           struct detd_share_answer **ret_answer) {
    Detd__V1__CandidateTiming *tm = NULL, **tmp = NULL;
    Detd__V1__ShareResponse *resp = NULL;
    wire_set_error(NULL);
    if (client == NULL || share == NULL || ret_answer == NULL) {
        wire_set_error("%s is NULL", client == NULL  ? "client"
                                     : share == NULL ? "share"
                                                     : "ret_answer");
        return DETD_EINVAL;
    }
    int rc = share_check_(share);
    if (rc == 0)
        rc = client_check_key(key);
    if (rc == 0)
        rc = client_pack_timings(share->timings, share->n_timings, &tm, &tmp);
    if (rc < 0)
        return rc;
    int64_t deadline =
        clock_mono_ms() + client_timeout(timeout_ms, CLIENT_CALL_TIMEOUT_MS);
    struct wire_channel *ch;
    uint64_t sid = 0, gen = 0, claim_gen = 0;
    /* One attempt: a split ends with its claim, and the claim with the
     * session that got it. */
    rc = client_acquire(client, 1, deadline, &ch, &sid, &gen);
    if (rc < 0) {
        client_conn_err(client, rc);
        goto out;
    }
    if (share->claim_id != 0 &&
        session_claim_find(&client->session, share->claim_id, 0, &claim_gen) &&
        claim_gen != gen) {
        wire_set_error("share: claim %llu was given to a session that has "
                       "ended (the daemon restarted or the connection to it "
                       "was lost); nothing was sent",
                       (unsigned long long)share->claim_id);
        rc = DETD_ESTALE;
        goto out;
    }
    struct client_head h;
    client_head_init(client, key, &h);
    Detd__V1__ShareRequest req = DETD__V1__SHARE_REQUEST__INIT;
    req.api_version = DETD_API_VERSION;
    req.client = &h.id;
    req.session_id = sid;
    req.key = &h.km;
    req.claim_id = share->claim_id;
    if (share->claim_id != 0 && client->device != NULL)
        req.device = client->device;
    if (share->take != NULL)
        req.take = (char *)share->take;
    req.reclaim = share->reclaim != 0;
    req.n_timings = share->n_timings;
    req.timings = tmp;
    req.n_reference_ms = share->n_reference_ms;
    req.reference_ms = (double *)share->reference_ms;
    req.collect = share->collect != 0;
    int64_t left = deadline - clock_mono_ms();
    rc = wire_unary(ch, WIRE_METHOD_SHARE, &req.base,
                    &detd__v1__share_response__descriptor, left > 0 ? left : 1,
                    (ProtobufCMessage **)&resp);
    if (rc < 0) {
        client_conn_err(client, rc);
        goto out;
    }
    session_note(&client->session, 1);
    rc = share_check_answer_(key, resp);
    if (rc == 0)
        rc = share_answer_new_(resp, ret_answer);
out:
    if (resp != NULL)
        protobuf_c_message_free_unpacked(&resp->base, NULL);
    free(tmp);
    free(tm);
    return rc;
}

DETD_EXPORT void detd_share_answer_free(struct detd_share_answer *answer) {
    if (answer == NULL)
        return;
    for (size_t i = 0; i < answer->n_given; i++) {
        free(answer->given[i].config);
        free(answer->given[i].ms);
        free(answer->given[i].device);
        free(answer->given[i].reference_ms);
    }
    free(answer->given);
    for (size_t i = 0; i < answer->n_pending; i++)
        free(answer->pending[i]);
    free(answer->pending);
    free(answer->reference);
    free(answer);
}
