/* report: detd_report(), detd_report_ex(), detd_claim_release() and
 * detd_claim_pass_on(): the end of a designated timing pass, over the
 * calls of client.c. See detd/client.h. */
#include "detd/client.h"
#include "clock.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "client_int.h"
#include "detd.pb-c.h"
#include "session.h"
#include "wire.h"

/* The length of UTF-8 character starting at s[0] (valid and complete
 * within n bytes), or 0 when it is not one. */
static size_t report_utf8_len_(const unsigned char *s, size_t n) {
    size_t len = s[0] < 0x80             ? 1
                 : (s[0] & 0xe0) == 0xc0 ? 2
                 : (s[0] & 0xf0) == 0xe0 ? 3
                 : (s[0] & 0xf8) == 0xf0 ? 4
                                         : 0;
    if (len == 0 || len > n || (len == 2 && s[0] < 0xc2) || s[0] > 0xf4)
        return 0;
    /* No overlong forms, no surrogates, nothing past U+10FFFF. */
    if ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] >= 0xa0) ||
        (s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] >= 0x90))
        return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    return len;
}

/*
 * A copy of an error text fit to send: at most DETD_MAX_ERROR_BYTES,
 * cut at a character boundary, each byte that is no valid UTF-8 (the
 * daemon takes only UTF-8 strings) written as '?'. NULL: "". The
 * caller frees it; NULL when out of memory.
 */
static char *report_error_text_(const char *s) {
    size_t n = s != NULL ? strlen(s) : 0;
    char *out =
        malloc((n < DETD_MAX_ERROR_BYTES ? n : DETD_MAX_ERROR_BYTES) + 1);
    if (out == NULL)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t len = report_utf8_len_((const unsigned char *)s + i, n - i);
        size_t take = len != 0 ? len : 1;
        if (o + take > DETD_MAX_ERROR_BYTES)
            break;
        if (len != 0)
            memcpy(out + o, s + i, len);
        else
            out[o] = '?';
        o += take;
        i += take;
    }
    out[o] = '\0';
    return out;
}

/* What one Report call sends beside the timings. */
struct report_what {
    const char *const *errors;             /* per timing, or NULL */
    const char *env_error;                 /* a claim given back, or NULL */
    const struct detd_timing_info *timing; /* how it was timed, or NULL */
    int pass_on;                           /* a claim passed on untimed */
};

static char *nz_(const char *s) {
    return (char *)(s != NULL ? s : "");
}

/* t as the message (strings borrowed from t). */
static void report_timing_(const struct detd_timing_info *t,
                           Detd__V1__TimingProvenance *m) {
    detd__v1__timing_provenance__init(m);
    m->benchmarker = nz_(t->benchmarker);
    m->warmup = t->warmup;
    m->rep = t->rep;
    m->return_mode = nz_(t->return_mode);
    m->cuda_graphs = t->cuda_graphs != 0;
    m->timing_lock = t->timing_lock != 0;
    m->torch_version = nz_(t->torch_version);
    m->cuda_version = nz_(t->cuda_version);
    m->driver = nz_(t->driver);
    m->package = nz_(t->package);
    m->package_version = nz_(t->package_version);
}

/*
 * One Report for claim_id: timings with their errors, or a claim given
 * back (what->env_error). *ret_resp: the daemon's answer (the caller
 * frees it) on success.
 */
static int report_send_(detd_client *client, uint64_t claim_id,
                        const struct detd_key *key,
                        const struct detd_timing *timings, size_t n_timings,
                        const struct report_what *what,
                        const char *triton_version, int64_t timeout_ms,
                        Detd__V1__ReportResponse **ret_resp) {
    Detd__V1__CandidateTiming *tm = NULL, **tmp = NULL;
    Detd__V1__ReportResponse *resp = NULL;
    char **errs = NULL;
    char *env = NULL;
    int rc = client_check_key(key);
    if (rc < 0)
        return rc;
    rc = client_pack_timings(timings, n_timings, &tm, &tmp);
    if (rc < 0)
        return rc;
    if (what->errors != NULL && n_timings > 0) {
        errs = calloc(n_timings, sizeof(*errs));
        if (errs == NULL) {
            rc = DETD_ENOMEM;
            goto out;
        }
        for (size_t i = 0; i < n_timings; i++) {
            if (what->errors[i] == NULL || what->errors[i][0] == '\0')
                continue;
            if ((errs[i] = report_error_text_(what->errors[i])) == NULL) {
                rc = DETD_ENOMEM;
                goto out;
            }
            tm[i].error = errs[i];
        }
    }
    if (what->env_error != NULL &&
        (env = report_error_text_(what->env_error)) == NULL) {
        rc = DETD_ENOMEM;
        goto out;
    }
    int64_t timeout = client_timeout(timeout_ms, CLIENT_CALL_TIMEOUT_MS);
    int64_t deadline = clock_mono_ms() + timeout;
    /* The claim belongs to the session (generation) that received it. A
     * report goes to that same session, or, after the daemon restarted (or
     * the stream was lost), to the new session under the claim the keeper
     * took again for it (session.h); it is never replayed to a daemon that
     * gave neither. */
    uint64_t claim_gen = 0;
    int known = session_claim_find(&client->session, claim_id, 0, &claim_gen);
    struct client_retry retry;
    client_retry_init(&retry, deadline);
    for (;;) {
        struct wire_channel *ch;
        uint64_t sid = 0, gen = 0, send_id = claim_id;
        rc = client_acquire(client, 1, deadline, &ch, &sid, &gen);
        if (rc == 0 && !known) {
            /* Not remembered (an old or foreign claim): from now on it
             * belongs to the session it is first sent with. */
            known = 1;
            claim_gen = gen;
        } else if (rc == 0 &&
                   !session_claim_current(&client->session, claim_id, claim_gen,
                                          gen, deadline, &send_id)) {
            session_claim_find(&client->session, claim_id, 1, &claim_gen);
            wire_set_error("report: claim %llu was given to a session "
                           "that has ended (the daemon restarted or the "
                           "connection to it was lost) and could not be "
                           "taken again; it is void and nothing was sent: "
                           "ask again with detd_decide()",
                           (unsigned long long)claim_id);
            rc = DETD_ESTALE;
            goto out;
        }
        if (rc == 0) {
            struct client_head h;
            client_head_init(client, key, &h);
            Detd__V1__ReportRequest req = DETD__V1__REPORT_REQUEST__INIT;
            req.api_version = DETD_API_VERSION;
            req.client = &h.id;
            req.session_id = sid;
            req.claim_id = send_id;
            req.key = &h.km;
            req.n_timings = n_timings;
            req.timings = tmp;
            if (triton_version != NULL)
                req.triton_version = (char *)triton_version;
            if (env != NULL)
                req.env_error = env;
            req.pass_on = what->pass_on != 0;
            Detd__V1__TimingProvenance tp;
            if (what->timing != NULL) {
                report_timing_(what->timing, &tp);
                req.timing = &tp;
            }
            int64_t left = deadline - clock_mono_ms();
            rc = wire_unary(ch, WIRE_METHOD_REPORT, &req.base,
                            &detd__v1__report_response__descriptor,
                            left > 0 ? left : 1, (ProtobufCMessage **)&resp);
            if (rc == 0) {
                session_note(&client->session, 1);
                break;
            }
        }
        /* Only an outage is retried (the same session, if it survives,
         * gets the same report again: harmless). A session the daemon
         * does not know is final here: the claim went with it. */
        if (!client_gone(rc) || !client_retry(client, &retry, rc, sid)) {
            /* The daemon answered (refused, rejected, ended the claim):
             * the claim is over; never taken again after a restart. */
            if (!client_gone(rc))
                session_claim_find(&client->session, claim_id, 1, &claim_gen);
            client_conn_err(client, rc);
            goto out;
        }
    }
    session_claim_find(&client->session, claim_id, 1, &claim_gen);
    *ret_resp = resp;
    resp = NULL;
out:
    if (resp != NULL)
        protobuf_c_message_free_unpacked(&resp->base, NULL);
    for (size_t i = 0; errs != NULL && i < n_timings; i++)
        free(errs[i]);
    free(errs);
    free(env);
    free(tmp);
    free(tm);
    return rc;
}

DETD_EXPORT int detd_report_ex(detd_client *client, uint64_t claim_id,
                               const struct detd_key *key,
                               const struct detd_timing *timings,
                               size_t n_timings,
                               const struct detd_report_extra *extra,
                               const char *triton_version, int64_t timeout_ms,
                               struct detd_answer **ret_answer) {
    wire_set_error(NULL);
    if (client == NULL || ret_answer == NULL ||
        (timings == NULL && n_timings > 0)) {
        wire_set_error("%s is NULL", client == NULL       ? "client"
                                     : ret_answer == NULL ? "ret_answer"
                                                          : "timings");
        return DETD_EINVAL;
    }
    if (claim_id == 0) {
        wire_set_error("claim_id is 0");
        return DETD_EINVAL;
    }
    if (extra != NULL && (extra->size == 0 || extra->size > sizeof(*extra))) {
        wire_set_error("extra->size %zu is not sizeof(struct "
                       "detd_report_extra) of this release (%zu)",
                       extra->size, sizeof(*extra));
        return DETD_EINVAL;
    }
    struct report_what what = {extra != NULL ? extra->errors : NULL, NULL, NULL,
                               0};
    if (extra != NULL &&
        extra->size >=
            offsetof(struct detd_report_extra, timing) + sizeof(extra->timing))
        what.timing = extra->timing;
    Detd__V1__ReportResponse *resp = NULL;
    int rc = report_send_(client, claim_id, key, timings, n_timings, &what,
                          triton_version, timeout_ms, &resp);
    if (rc < 0)
        return rc;
    if (resp->decision == NULL || resp->decision->config[0] == '\0') {
        wire_set_error("report: the daemon committed no config");
        rc = DETD_EPROTO;
        goto out;
    }
    struct detd_answer *a = NULL;
    rc = client_answer_new(DETD_OUTCOME_DECIDED, resp->decision, &a);
    if (rc < 0)
        goto out;
    a->claim_id = resp->decision->claim_id;
    a->superseded = resp->superseded != 0;
    *ret_answer = a;
out:
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    return rc;
}

DETD_EXPORT int detd_report(detd_client *client, uint64_t claim_id,
                            const struct detd_key *key,
                            const struct detd_timing *timings, size_t n_timings,
                            const char *triton_version, int64_t timeout_ms,
                            struct detd_answer **ret_answer) {
    return detd_report_ex(client, claim_id, key, timings, n_timings, NULL,
                          triton_version, timeout_ms, ret_answer);
}

/*
 * A claim given up without timings (what: given back, or passed on):
 * 0, or DETD_ESTALE when the key was decided meanwhile (what_done: the
 * words for what did not happen), or report_send_()'s error.
 */
static int report_give_up_(detd_client *client, uint64_t claim_id,
                           const struct detd_key *key,
                           const struct report_what *what, int64_t timeout_ms,
                           const char *what_done) {
    Detd__V1__ReportResponse *resp = NULL;
    int rc = report_send_(client, claim_id, key, NULL, 0, what, NULL,
                          timeout_ms, &resp);
    if (rc < 0)
        return rc;
    if (resp->decision != NULL) {
        /* A claim no longer held for a key decided meanwhile. */
        wire_set_error("claim %llu was no longer held: key decided "
                       "meanwhile ('%.200s'); nothing to %s",
                       (unsigned long long)claim_id, resp->decision->config,
                       what_done);
        rc = DETD_ESTALE;
    }
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    return rc;
}

DETD_EXPORT int detd_claim_release(detd_client *client, uint64_t claim_id,
                                   const struct detd_key *key, const char *why,
                                   int64_t timeout_ms) {
    wire_set_error(NULL);
    if (client == NULL || why == NULL || why[0] == '\0') {
        wire_set_error("%s", client == NULL ? "client is NULL"
                             : why == NULL  ? "why is NULL"
                                            : "why is empty");
        return DETD_EINVAL;
    }
    if (claim_id == 0) {
        wire_set_error("claim_id is 0");
        return DETD_EINVAL;
    }
    struct report_what what = {NULL, why, NULL, 0};
    return report_give_up_(client, claim_id, key, &what, timeout_ms,
                           "give back");
}

DETD_EXPORT int detd_claim_pass_on(detd_client *client, uint64_t claim_id,
                                   const struct detd_key *key,
                                   int64_t timeout_ms) {
    wire_set_error(NULL);
    if (client == NULL || claim_id == 0) {
        wire_set_error("%s",
                       client == NULL ? "client is NULL" : "claim_id is 0");
        return DETD_EINVAL;
    }
    if (!detd_client_can_pass_on(client)) {
        wire_set_error("claim %llu is still held: the daemon this process is "
                       "attached to does not pass claims on (it named no "
                       "'pass_on' feature: older than 0.9, or not attached)",
                       (unsigned long long)claim_id);
        return DETD_EUNIMPL;
    }
    struct report_what what = {NULL, NULL, NULL, 1};
    return report_give_up_(client, claim_id, key, &what, timeout_ms, "pass on");
}

DETD_EXPORT int detd_client_can_pass_on(detd_client *client) {
    return client != NULL &&
           (session_features(&client->session) & SESSION_FEATURE_PASS_ON) != 0;
}
