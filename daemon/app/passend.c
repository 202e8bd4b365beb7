/*
 * passend: how a timing pass ends without a decision (see passend.h):
 * a report the daemon cannot use, a pass in which every candidate failed
 * (kept for the askers that come after), and a claim given back because
 * the pass could not run in its holder's environment (nothing kept).
 */
#define _GNU_SOURCE
#include "app/passend.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "app/coord.h"
#include "app/storeerr.h"
#include "app/waiters.h"
#include "clock.h"
#include "config/limits.h"
#include "detd/client.h"
#include "detd/error.h"

/*
 * A key whose timing pass failed on every candidate: answer call
 * FAILED_PRECONDITION with the recorded failure (the same words every
 * waiter got), so that a rerun of the same code fails at once instead of
 * timing again; a new code guard is a new id and `detctl reset` clears
 * it. Returns 1 when it answered, 0 when id has no failure recorded.
 */
int passend_answer_failed(struct daemon *d, rpc_call *call, const char *id) {
    struct store_failure f;
    int rc = store_get_failure(d->store, id, &f);
    if (rc == DETD_ENOTFOUND)
        return 0;
    if (rc != 0) {
        storeerr_reply(d, call, rc);
        return 1;
    }
    d->counters.failed_pass_answers++;
    rpc_fail(call, RPC_FAILED_PRECONDITION,
             "%s (the timing pass of key %.12s by rank %d pid %d on %s); "
             "not timed again until the kernel's code changes or detctl "
             "reset clears it",
             f.reason, id, (int)f.by_rank, (int)f.by_pid, f.by_host);
    store_failure_clear(&f);
    return 1;
}

/* What a rejected report tells the waiters of its key. */
struct rejection {
    struct daemon *d;
    const char *why;
};

static void on_rejected(void *ctx, const struct engine_event *ev) {
    const struct rejection *r = ctx;
    struct pending *p = waiters_take(r->d->waiters, ev->token);
    if (p == NULL)
        return;
    rpc_fail(p->call, RPC_FAILED_PRECONDITION,
             "the timing pass for key %.12s was rejected by the daemon: %s; "
             "nothing was decided (apply on_miss)",
             ev->id, r->why);
    pending_free(p);
}

/*
 * The holder of claim on vk sent a report the daemon cannot use (why):
 * answer it INVALID_ARGUMENT, end its claim at once and fail every waiter
 * of the key with why, so that nobody times it again in turn.
 */
void passend_reject(struct daemon *d, rpc_call *call, const struct vkey *vk,
                    uint64_t claim, const char *why) {
    d->counters.rejected++;
    d->counters.reports_rejected++;
    struct rejection r = {d, why};
    int n = engine_reject(d->engine, vk->id, claim, on_rejected, &r);
    if (d->coord != NULL)
        coord_sweep(d->coord); /* the cluster claim goes too */
    log_warn("rejected the report for claim %" PRIu64 " on key %.12s: %s; "
             "claim ended, %d waiters told",
             claim, vk->id, why, n < 0 ? 0 : n);
    rpc_fail(call, RPC_INVALID_ARGUMENT, "%s", why);
}

/* Cut buf's string where it ends inside a UTF-8 character (snprintf
 * cuts bytes): the text goes into messages, logs and the store. */
static void passend_utf8_end(char *buf) {
    size_t n = strlen(buf), i = n;
    while (i > 0 && ((unsigned char)buf[i - 1] & 0xc0) == 0x80)
        i--;
    if (i == 0)
        return;
    unsigned char lead = (unsigned char)buf[i - 1];
    size_t want = lead < 0x80 ? 1 : lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : 2;
    if (lead >= 0xc0 && n - (i - 1) < want)
        buf[i - 1] = '\0';
}

/* What an environment release tells the waiters of its key. */
struct env_release {
    struct daemon *d;
    const char *text;
};

static void on_env_released(void *ctx, const struct engine_event *ev) {
    const struct env_release *r = ctx;
    struct pending *p = waiters_take(r->d->waiters, ev->token);
    if (p == NULL)
        return;
    rpc_fail(p->call, RPC_FAILED_PRECONDITION, "%s", r->text);
    pending_free(p);
}

/*
 * The holder of claim on vk says its timing pass could not run in its
 * process's environment (err: a module missing, no GPU driver): nothing
 * about the candidates is known, so nothing is stored. The claim ends at
 * once, like a rejected report's, and every waiter of the key gets the
 * error (it would most likely meet it too); the next asker is designated
 * anew. The holder gets an empty ReportResponse (no decision).
 */
void passend_release_env(struct daemon *d, rpc_call *call,
                         const struct vkey *vk, uint64_t claim,
                         const Detd__V1__ClientIdentity *c, int32_t ppid,
                         const char *err) {
    char text[DAEMON_MAX_NOTE + 512];
    /* The words "could not run in the environment of" are what clients
     * match (libdetd's DETD_EENV); never "session" (a re-attach). */
    snprintf(text, sizeof text,
             "the timing pass of kernel %.200s key %.12s could not run in "
             "the environment of rank %d (pid %d on %.100s): %s; nothing "
             "was stored: the key is timed again once that is fixed",
             vk->k->kernel, vk->id, c != NULL ? (int)c->rank : -1, (int)ppid,
             c != NULL && c->host != NULL ? c->host : "", err);
    passend_utf8_end(text);
    d->counters.passes_env_released++;
    struct env_release r = {d, text};
    int n = engine_reject(d->engine, vk->id, claim, on_env_released, &r);
    if (d->coord != NULL)
        coord_sweep(d->coord); /* the cluster claim goes too */
    log_warn("claim %" PRIu64 " on %s key %s given back: its timing pass "
             "could not run in the environment of pid %d (rank %d) on %s: "
             "%s; nothing stored, %d waiters told",
             claim, vk->k->kernel, vk->k->key ? vk->k->key : "", (int)ppid,
             c != NULL ? (int)c->rank : -1, d->node, err, n < 0 ? 0 : n);
    Detd__V1__ReportResponse resp = DETD__V1__REPORT_RESPONSE__INIT;
    resp.api_version = DETD_API_VERSION;
    rpc_reply(call, &resp.base);
}

/* See passend.h. */
void passend_pass_on(struct daemon *d, rpc_call *call, const struct vkey *vk,
                     uint64_t claim, const Detd__V1__ClientIdentity *c,
                     int32_t ppid) {
    int rc = engine_release(d->engine, vk->id, claim, clock_mono_ms());
    if (rc < 0) {
        /* Checked as the live claim just before, on the same thread. */
        rpc_fail(call, RPC_INTERNAL, "pass on: %s", detd_strerror(rc));
        return;
    }
    if (d->coord != NULL)
        coord_sweep(d->coord); /* dropped: the cluster claim goes too */
    d->counters.passes_passed_on++;
    log_info("claim %" PRIu64 " on %s key %.12s passed on before timing by "
             "pid %d (rank %d) on %s: %s",
             claim, vk->k->kernel, vk->id, (int)ppid,
             c != NULL ? (int)c->rank : -1, d->node,
             rc == 1 ? "the oldest waiter holds it now"
                     : "no waiter: dropped, the next asker is designated");
    Detd__V1__ReportResponse resp = DETD__V1__REPORT_RESPONSE__INIT;
    resp.api_version = DETD_API_VERSION;
    rpc_reply(call, &resp.base);
}

/* The reason a pass in which every candidate failed is kept with: the
 * daemon's verdict (the words clients match), then the first failed
 * candidate's own error when the report carried one. */
void passend_failed_reason(const Detd__V1__ReportRequest *req, char *buf,
                           size_t size) {
    static const char all_failed[] = "timings: no candidate has a valid timing "
                                     "(all failed, empty or not finite)";
    for (size_t i = 0; i < req->n_timings; i++) {
        const Detd__V1__CandidateTiming *t = req->timings[i];
        if (t->error != NULL && t->error[0] != '\0') {
            /* At most 400 bytes of it: the whole verdict (with who sent it)
             * must fit the clients' messages. */
            char first[401];
            snprintf(first, sizeof first, "%s", t->error);
            passend_utf8_end(first);
            snprintf(buf, size, "%s; the first error, candidate '%.200s': %s",
                     all_failed, t->config, first);
            passend_utf8_end(buf);
            return;
        }
    }
    snprintf(buf, size, "%s", all_failed);
}

/* Keep the failure of the pass on vk (every candidate failed) for the
 * askers that come after (passend_answer_failed()), with who the daemon saw
 * report it (ppid, puid: SO_PEERCRED) beside what the client wrote. A
 * store that cannot keep it only costs a rerun its timing pass: logged,
 * not answered. */
void passend_record_failed(struct daemon *d, const struct vkey *vk,
                           const Detd__V1__ClientIdentity *c, int32_t ppid,
                           uint32_t puid, const char *why) {
    struct store_failure f = {
        .id = (char *)vk->id,
        .ns = (char *)vk->ns,
        .arch = vk->k->arch,
        .kernel = vk->k->kernel,
        .key = vk->k->key ? vk->k->key : "",
        .reason = (char *)why,
        .by_host = c != NULL && c->host != NULL ? c->host : "",
        /* What the kernel saw, not what the caller wrote. */
        .by_pid = ppid != 0 ? ppid : (c != NULL ? c->pid : 0),
        .by_rank = c != NULL ? c->rank : -1,
        .at_ms = clock_unix_ms(),
        .by_claimed_pid = c != NULL ? c->pid : 0,
        .by_uid = puid == UINT32_MAX ? -1 : (int64_t)puid,
        .by_node = d->node,
    };
    int rc = store_put_failure(d->store, &f);
    if (rc != 0) {
        if (!storeerr_note(d, rc))
            log_error("record the failed timing pass of key %.12s: %s", vk->id,
                      store_errmsg(d->store));
        return;
    }
    d->counters.failed_passes++;
    log_warn("timing pass of %s key %s failed on every candidate: %s; "
             "reported by pid %d uid %u on %s, rank %d; recorded, not timed "
             "again until its code changes or a reset",
             vk->k->kernel, vk->k->key ? vk->k->key : "", why, (int)f.by_pid,
             (unsigned)puid, d->node, (int)f.by_rank);
}
