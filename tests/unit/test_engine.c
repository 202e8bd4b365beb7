/*
 * engine: every transition of the claim/waiter state machine, the limits,
 * the next-deadline answer of engine_tick, a 100k-key stress run, and
 * the winner rule.
 */
#include "core/engine.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "detd/error.h"
#include "runner.h"

#include "failalloc.h"

/* ---- event log ---- */

struct logged {
    engine_event_kind kind;
    uint64_t token;
    uint64_t claim_id;
    int takeover;
    char id[65];
};

struct evlog {
    struct logged *v;
    size_t n, cap;
};

static struct evlog g_log;

static void record(void *ctx, const struct engine_event *ev) {
    struct evlog *l = ctx;
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 64;
        /* Not counted: only the engine's allocations may fail. */
        l->v = __real_realloc(l->v, l->cap * sizeof(*l->v));
        CHECK(l->v != NULL);
    }
    struct logged *x = &l->v[l->n++];
    x->kind = ev->kind;
    x->token = ev->token;
    x->claim_id = ev->claim_id;
    x->takeover = ev->takeover;
    CHECK(ev->id != NULL && strlen(ev->id) <= 64);
    snprintf(x->id, sizeof(x->id), "%s", ev->id);
}

static void log_reset(void) {
    g_log.n = 0;
}

static void check_event(size_t i, engine_event_kind kind, uint64_t token,
                        const char *id, uint64_t claim_id, int takeover) {
    CHECK(i < g_log.n);
    CHECK_EQ_INT(g_log.v[i].kind, kind);
    CHECK_EQ_INT(g_log.v[i].token, token);
    CHECK_STR(g_log.v[i].id, id);
    CHECK_EQ_INT(g_log.v[i].claim_id, claim_id);
    CHECK_EQ_INT(g_log.v[i].takeover, takeover);
}

/* ---- helpers ---- */

#define LEASE 1000
#define FAR 1000000000LL

/* A 64-char id, as keyid would produce. */
static const char *kid(unsigned i) {
    static char buf[8][65];
    static int slot;
    char *b = buf[slot++ % 8];
    snprintf(b, 65, "%064x", i);
    return b;
}

static engine *mk_limited(uint32_t max_waiters, uint32_t max_claims) {
    struct engine_limits lim = {max_waiters, max_claims, LEASE};
    engine *e = NULL;
    log_reset();
    CHECK_EQ_INT(engine_new(&lim, record, &g_log, &e), 0);
    CHECK(e != NULL);
    return e;
}

static engine *mk(void) {
    return mk_limited(100000, 200000);
}

static struct engine_stats stats(const engine *e) {
    struct engine_stats s;
    memset(&s, 0xff, sizeof(s));
    engine_get_stats(e, &s);
    return s;
}

/* Ask and expect DESIGNATED; returns the claim id. */
static uint64_t ask_claim(engine *e, const char *id, uint64_t session,
                          uint64_t token, int64_t now) {
    uint64_t claim = 0;
    CHECK_EQ_INT(engine_ask(e, id, session, token, FAR, now, &claim),
                 ENGINE_ASK_DESIGNATED);
    CHECK(claim != 0);
    return claim;
}

static void ask_wait(engine *e, const char *id, uint64_t session,
                     uint64_t token, int64_t deadline, int64_t now) {
    uint64_t claim = 12345;
    CHECK_EQ_INT(engine_ask(e, id, session, token, deadline, now, &claim),
                 ENGINE_ASK_WAIT);
    CHECK_EQ_INT(claim, 12345);
}

/* ---- construction ---- */

TEST(new_rejects_bad_arguments) {
    struct engine_limits lim = {10, 10, LEASE};
    struct engine_limits zero_lease = {10, 10, 0};
    engine *e = (engine *)&lim; /* must stay untouched on error */
    CHECK_EQ_INT(engine_new(NULL, record, &g_log, &e), DETD_EINVAL);
    CHECK_EQ_INT(engine_new(&lim, NULL, &g_log, &e), DETD_EINVAL);
    CHECK_EQ_INT(engine_new(&zero_lease, record, &g_log, &e), DETD_EINVAL);
    CHECK_EQ_INT(engine_new(&lim, record, &g_log, NULL), DETD_EINVAL);
    CHECK(e == (engine *)&lim);
    CHECK_EQ_INT(engine_new(&lim, record, NULL, &e), 0);
    struct engine_stats s = stats(e);
    CHECK_EQ_INT(s.claims, 0);
    CHECK_EQ_INT(s.waiters, 0);
    CHECK_EQ_INT(s.designations, 0);
    CHECK_EQ_INT(s.takeovers, 0);
    CHECK_EQ_INT(s.timeouts, 0);
    CHECK_EQ_INT(s.stale_reports, 0);
    CHECK_EQ_INT(engine_tick(e, 0), INT64_MAX);
    engine_free(e);
    engine_free(NULL);
}

/* ---- ask ---- */

TEST(first_ask_designates) {
    engine *e = mk();
    CHECK_EQ_INT(engine_session_attach(e, 1, 0), 0);
    CHECK_EQ_INT(ask_claim(e, kid(1), 1, 100, 0), 1);
    struct engine_stats s = stats(e);
    CHECK_EQ_INT(s.claims, 1);
    CHECK_EQ_INT(s.waiters, 0);
    CHECK_EQ_INT(s.designations, 1);
    CHECK_EQ_INT(engine_session_claims(e, 1), 1);
    CHECK_EQ_INT(engine_session_claims(e, 2), 0);
    CHECK_EQ_INT(g_log.n, 0);
    engine_free(e);
}

TEST(second_asker_waits) {
    engine *e = mk();
    ask_claim(e, kid(1), 1, 100, 0);
    ask_wait(e, kid(1), 2, 200, 5000, 0);
    ask_wait(e, kid(1), 3, 300, 5000, 0);
    struct engine_stats s = stats(e);
    CHECK_EQ_INT(s.claims, 1);
    CHECK_EQ_INT(s.waiters, 2);
    CHECK_EQ_INT(s.designations, 1);
    CHECK_EQ_INT(engine_session_claims(e, 2), 0);
    CHECK_EQ_INT(g_log.n, 0);
    engine_free(e);
}

TEST(same_session_reask_gets_same_claim) {
    engine *e = mk();
    uint64_t c = ask_claim(e, kid(1), 1, 100, 0);
    CHECK_EQ_INT(ask_claim(e, kid(1), 1, 101, 10), c);
    CHECK_EQ_INT(ask_claim(e, kid(1), 1, 100, 20), c);
    struct engine_stats s = stats(e);
    CHECK_EQ_INT(s.claims, 1);
    CHECK_EQ_INT(s.waiters, 0);
    CHECK_EQ_INT(s.designations, 1);
    CHECK_EQ_INT(engine_session_claims(e, 1), 1);
    engine_free(e);
}

/* A claim is told once: its holder asking again under it is the same
 * pass; a new claim on the key is told anew. */
TEST(a_claim_is_told_once) {
    engine *e = mk();
    uint64_t c = ask_claim(e, kid(1), 1, 100, 0);
    CHECK_EQ_INT(engine_claim_told(e, kid(1), c), 1);
    CHECK_EQ_INT(ask_claim(e, kid(1), 1, 101, 10), c);
    CHECK_EQ_INT(engine_claim_told(e, kid(1), c), 0);
    CHECK_EQ_INT(engine_claim_told(e, kid(1), c), 0);
    CHECK_EQ_INT(engine_claim_told(e, kid(1), c + 1), 1); /* not its claim */
    CHECK_EQ_INT(engine_claim_told(e, kid(2), c), 1);     /* no claim */
    CHECK_EQ_INT(engine_release(e, kid(1), c, 20), 0);
    uint64_t c2 = ask_claim(e, kid(1), 2, 102, 30);
    CHECK(c2 != c);
    CHECK_EQ_INT(engine_claim_told(e, kid(1), c2), 1);
    CHECK_EQ_INT(engine_claim_told(e, kid(1), c2), 0);
    engine_free(e);
}

/* Session 0 is every unattached caller: a second one must wait. */
TEST(session_zero_is_never_a_retry) {
    engine *e = mk();
    CHECK_EQ_INT(ask_claim(e, kid(1), 0, 100, 0), 1);
    ask_wait(e, kid(1), 0, 101, 5000, 0);
    struct engine_stats s = stats(e);
    CHECK_EQ_INT(s.claims, 1);
    CHECK_EQ_INT(s.waiters, 1);
    CHECK_EQ_INT(engine_session_claims(e, 0), 1);
    engine_free(e);
}

TEST(claim_ids_are_unique_and_increasing) {
    engine *e = mk();
    CHECK_EQ_INT(ask_claim(e, kid(1), 1, 1, 0), 1);
    CHECK_EQ_INT(ask_claim(e, kid(2), 1, 2, 0), 2);
    CHECK_EQ_INT(ask_claim(e, kid(3), 2, 3, 0), 3);
    CHECK_EQ_INT(engine_decided(e, kid(2)), 0);
    /* The same key again after its claim ended: a new id, never 2. */
    CHECK_EQ_INT(ask_claim(e, kid(2), 1, 4, 0), 4);
    CHECK_EQ_INT(engine_session_claims(e, 1), 2);
    CHECK_EQ_INT(stats(e).designations, 4);
    engine_free(e);
}

TEST(ask_rejects_bad_arguments) {
    engine *e = mk();
    uint64_t claim = 77;
    char long_id[66];
    memset(long_id, 'a', 65);
    long_id[65] = '\0';
    CHECK_EQ_INT(engine_ask(NULL, kid(1), 1, 1, FAR, 0, &claim), DETD_EINVAL);
    CHECK_EQ_INT(engine_ask(e, NULL, 1, 1, FAR, 0, &claim), DETD_EINVAL);
    CHECK_EQ_INT(engine_ask(e, "", 1, 1, FAR, 0, &claim), DETD_EINVAL);
    CHECK_EQ_INT(engine_ask(e, long_id, 1, 1, FAR, 0, &claim), DETD_EINVAL);
    CHECK_EQ_INT(engine_ask(e, kid(1), 1, 0, FAR, 0, &claim), DETD_EINVAL);
    CHECK_EQ_INT(engine_ask(e, kid(1), 1, 1, FAR, 0, NULL), DETD_EINVAL);
    CHECK_EQ_INT(claim, 77);
    /* A short id is fine. */
    CHECK_EQ_INT(ask_claim(e, "k", 1, 1, 0), 1);
    /* A token already waiting is refused, whatever the key. */
    ask_wait(e, "k", 2, 9, 5000, 0);
    CHECK_EQ_INT(engine_ask(e, "k", 3, 9, FAR, 0, &claim), DETD_EINVAL);
    CHECK_EQ_INT(engine_ask(e, "other", 3, 9, FAR, 0, &claim), DETD_EINVAL);
    struct engine_stats s = stats(e);
    CHECK_EQ_INT(s.claims, 1);
    CHECK_EQ_INT(s.waiters, 1);
    CHECK_EQ_INT(s.designations, 1);
    engine_free(e);
}

/* ---- report ---- */

TEST(report_with_live_claim_is_accepted) {
    engine *e = mk();
    uint64_t c = ask_claim(e, kid(1), 1, 1, 0);
    ask_wait(e, kid(1), 2, 2, 5000, 0);
    CHECK_EQ_INT(engine_report(e, kid(1), c), ENGINE_REPORT_ACCEPT);
    /* Accepting does not end the claim: a new asker still waits. */
    CHECK_EQ_INT(stats(e).claims, 1);
    ask_wait(e, kid(1), 3, 3, 5000, 0);
    CHECK_EQ_INT(engine_report(e, kid(1), c), ENGINE_REPORT_ACCEPT);
    CHECK_EQ_INT(stats(e).stale_reports, 0);
    CHECK_EQ_INT(g_log.n, 0);
    engine_free(e);
}

TEST(report_for_wrong_claim_or_key_is_stale) {
    engine *e = mk();
    uint64_t c1 = ask_claim(e, kid(1), 1, 1, 0);
    uint64_t c2 = ask_claim(e, kid(2), 1, 2, 0);
    CHECK_EQ_INT(engine_report(e, kid(1), c2), ENGINE_REPORT_STALE);
    CHECK_EQ_INT(engine_report(e, kid(3), c1), ENGINE_REPORT_STALE);
    CHECK_EQ_INT(engine_report(e, kid(1), 0), ENGINE_REPORT_STALE);
    CHECK_EQ_INT(engine_report(e, kid(1), c1 + 100), ENGINE_REPORT_STALE);
    CHECK_EQ_INT(engine_report(e, NULL, c1), DETD_EINVAL);
    CHECK_EQ_INT(engine_report(NULL, kid(1), c1), DETD_EINVAL);
    CHECK_EQ_INT(stats(e).stale_reports, 4);
    CHECK_EQ_INT(engine_report(e, kid(1), c1), ENGINE_REPORT_ACCEPT);
    engine_free(e);
}

TEST(report_after_takeover_is_stale_for_old_claim) {
    engine *e = mk();
    CHECK_EQ_INT(engine_session_attach(e, 1, 0), 0);
    CHECK_EQ_INT(engine_session_attach(e, 2, 0), 0);
    uint64_t c1 = ask_claim(e, kid(1), 1, 10, 0);
    ask_wait(e, kid(1), 2, 20, 5000, 0);
    engine_session_end(e, 1, 100);
    CHECK_EQ_INT(g_log.n, 1);
    uint64_t c2 = g_log.v[0].claim_id;
    CHECK(c2 > c1);
    CHECK_EQ_INT(engine_report(e, kid(1), c1), ENGINE_REPORT_STALE);
    CHECK_EQ_INT(engine_report(e, kid(1), c2), ENGINE_REPORT_ACCEPT);
    CHECK_EQ_INT(stats(e).stale_reports, 1);
    engine_free(e);
}

/* ---- decided ---- */

TEST(decided_releases_all_waiters_in_order) {
    engine *e = mk();
    uint64_t c = ask_claim(e, kid(1), 1, 10, 0);
    ask_wait(e, kid(1), 2, 20, 5000, 0);
    ask_wait(e, kid(1), 3, 30, 3000, 0);
    ask_wait(e, kid(1), 0, 40, 4000, 0);
    ask_claim(e, kid(2), 2, 50, 0);
    ask_wait(e, kid(2), 3, 60, 5000, 0);
    CHECK_EQ_INT(engine_report(e, kid(1), c), ENGINE_REPORT_ACCEPT);
    CHECK_EQ_INT(engine_decided(e, kid(1)), 3);
    CHECK_EQ_INT(g_log.n, 3);
    check_event(0, ENGINE_EV_RELEASE, 20, kid(1), 0, 0);
    check_event(1, ENGINE_EV_RELEASE, 30, kid(1), 0, 0);
    check_event(2, ENGINE_EV_RELEASE, 40, kid(1), 0, 0);
    struct engine_stats s = stats(e);
    CHECK_EQ_INT(s.claims, 1);
    CHECK_EQ_INT(s.waiters, 1);
    CHECK_EQ_INT(engine_session_claims(e, 1), 0);
    /* The claim ended: a late report for it is stale. */
    CHECK_EQ_INT(engine_report(e, kid(1), c), ENGINE_REPORT_STALE);
    /* Released waiters are gone: their tokens are unknown. */
    CHECK_EQ_INT(engine_cancel(e, 20), DETD_ENOTFOUND);
    /* And their deadlines no longer count. */
    CHECK_EQ_INT(engine_tick(e, 100), 1000);
    CHECK_EQ_INT(g_log.n, 3);
    engine_free(e);
}

TEST(decided_without_waiters_or_unknown) {
    engine *e = mk();
    CHECK_EQ_INT(engine_decided(e, kid(9)), 0);
    CHECK_EQ_INT(engine_decided(e, NULL), 0);
    ask_claim(e, kid(1), 1, 10, 0);
    CHECK_EQ_INT(engine_decided(e, kid(1)), 0);
    CHECK_EQ_INT(stats(e).claims, 0);
    CHECK_EQ_INT(engine_session_claims(e, 1), 0);
    CHECK_EQ_INT(engine_decided(e, kid(1)), 0);
    CHECK_EQ_INT(g_log.n, 0);
    /* Unclaimed lease is gone too: nothing left to tick. */
    CHECK_EQ_INT(engine_tick(e, 0), INT64_MAX);
    engine_free(e);
}

/* Decided by another node while nobody held a claim (waiters left behind
 * by an ended session). */
TEST(decided_releases_waiters_of_unclaimed_key) {
    engine *e = mk();
    ask_claim(e, kid(1), 2, 10, 0);
    ask_wait(e, kid(1), 1, 11, 5000, 0);
    engine_session_end(e, 1, 5); /* 11's call is not cancelled yet */
    engine_session_end(e, 2, 10);
    CHECK_EQ_INT(g_log.n, 0);
    CHECK_EQ_INT(stats(e).claims, 0);
    CHECK_EQ_INT(stats(e).waiters, 1);
    CHECK_EQ_INT(engine_decided(e, kid(1)), 1);
    check_event(0, ENGINE_EV_RELEASE, 11, kid(1), 0, 0);
    CHECK_EQ_INT(stats(e).waiters, 0);
    engine_free(e);
}

/* ---- session end ---- */

TEST(session_end_passes_claim_to_oldest_waiter) {
    engine *e = mk();
    CHECK_EQ_INT(engine_session_attach(e, 1, 0), 0);
    CHECK_EQ_INT(engine_session_attach(e, 2, 0), 0);
    CHECK_EQ_INT(engine_session_attach(e, 3, 0), 0);
    CHECK_EQ_INT(ask_claim(e, kid(1), 1, 10, 0), 1);
    ask_wait(e, kid(1), 2, 20, 5000, 0);
    ask_wait(e, kid(1), 3, 30, 5000, 0);
    engine_session_end(e, 1, 100);
    CHECK_EQ_INT(g_log.n, 1);
    check_event(0, ENGINE_EV_DESIGNATE, 20, kid(1), 2, 1);
    struct engine_stats s = stats(e);
    CHECK_EQ_INT(s.claims, 1);
    CHECK_EQ_INT(s.waiters, 1);
    CHECK_EQ_INT(s.designations, 2);
    CHECK_EQ_INT(s.takeovers, 1);
    CHECK_EQ_INT(engine_session_claims(e, 1), 0);
    CHECK_EQ_INT(engine_session_claims(e, 2), 1);
    /* The designated waiter is no longer waiting. */
    CHECK_EQ_INT(engine_cancel(e, 20), DETD_ENOTFOUND);
    /* The new owner's retry gets its claim back. */
    CHECK_EQ_INT(ask_claim(e, kid(1), 2, 21, 100), 2);
    /* And it passes on again when that session ends too. */
    engine_session_end(e, 2, 200);
    CHECK_EQ_INT(g_log.n, 2);
    check_event(1, ENGINE_EV_DESIGNATE, 30, kid(1), 3, 1);
    CHECK_EQ_INT(engine_session_claims(e, 3), 1);
    CHECK_EQ_INT(stats(e).waiters, 0);
    CHECK_EQ_INT(stats(e).takeovers, 2);
    engine_free(e);
}

TEST(session_end_skips_waiters_of_the_ended_session) {
    engine *e = mk();
    ask_claim(e, kid(1), 2, 10, 0);
    ask_wait(e, kid(1), 1, 20, 5000, 0);
    ask_wait(e, kid(1), 1, 21, 5000, 0); /* session 1 waits twice */
    ask_wait(e, kid(1), 3, 30, 5000, 0);
    engine_session_end(e, 2, 100);
    check_event(0, ENGINE_EV_DESIGNATE, 20, kid(1), 2, 1);
    CHECK_EQ_INT(engine_session_claims(e, 1), 1);
    /* Session 1 holds the claim and still has waiter 21 on the same key:
     * that waiter must not inherit it. */
    engine_session_end(e, 1, 200);
    CHECK_EQ_INT(g_log.n, 2);
    check_event(1, ENGINE_EV_DESIGNATE, 30, kid(1), 3, 1);
    CHECK_EQ_INT(engine_session_claims(e, 3), 1);
    /* 21 is left waiting until its call is cancelled. */
    CHECK_EQ_INT(stats(e).waiters, 1);
    /* Session 3 ends: 21 belongs to an ended session, so the claim drops. */
    engine_session_end(e, 3, 300);
    CHECK_EQ_INT(g_log.n, 2);
    CHECK_EQ_INT(stats(e).claims, 0);
    CHECK_EQ_INT(stats(e).waiters, 1);
    CHECK_EQ_INT(engine_cancel(e, 21), 0);
    CHECK_EQ_INT(stats(e).waiters, 0);
    engine_free(e);
}

TEST(session_end_without_waiter_drops_claim) {
    engine *e = mk();
    CHECK_EQ_INT(engine_session_attach(e, 1, 0), 0);
    uint64_t c = ask_claim(e, kid(1), 1, 10, 0);
    engine_session_end(e, 1, 100);
    CHECK_EQ_INT(g_log.n, 0);
    struct engine_stats s = stats(e);
    CHECK_EQ_INT(s.claims, 0);
    CHECK_EQ_INT(s.takeovers, 0);
    CHECK_EQ_INT(engine_session_claims(e, 1), 0);
    CHECK_EQ_INT(engine_report(e, kid(1), c), ENGINE_REPORT_STALE);
    /* The next asker gets a fresh claim. */
    CHECK_EQ_INT(ask_claim(e, kid(1), 2, 20, 100), c + 1);
    engine_free(e);
}

TEST(session_end_handles_every_claim_of_the_session) {
    engine *e = mk();
    CHECK_EQ_INT(engine_session_attach(e, 1, 0), 0);
    ask_claim(e, kid(1), 1, 10, 0);
    ask_claim(e, kid(2), 1, 11, 0);
    ask_claim(e, kid(3), 1, 12, 0);
    ask_claim(e, kid(4), 2, 13, 0); /* another session's, untouched */
    ask_wait(e, kid(1), 2, 20, 5000, 0);
    ask_wait(e, kid(3), 3, 30, 5000, 0);
    ask_wait(e, kid(3), 4, 40, 5000, 0);
    CHECK_EQ_INT(engine_session_claims(e, 1), 3);
    engine_session_end(e, 1, 100);
    CHECK_EQ_INT(g_log.n, 2);
    int seen20 = 0, seen30 = 0;
    for (size_t i = 0; i < g_log.n; i++) {
        CHECK_EQ_INT(g_log.v[i].kind, ENGINE_EV_DESIGNATE);
        CHECK_EQ_INT(g_log.v[i].takeover, 1);
        CHECK(g_log.v[i].claim_id >= 5 && g_log.v[i].claim_id <= 6);
        if (g_log.v[i].token == 20) {
            CHECK_STR(g_log.v[i].id, kid(1));
            seen20++;
        }
        if (g_log.v[i].token == 30) {
            CHECK_STR(g_log.v[i].id, kid(3));
            seen30++;
        }
    }
    CHECK(seen20 == 1 && seen30 == 1);
    CHECK(g_log.v[0].claim_id != g_log.v[1].claim_id);
    struct engine_stats s = stats(e);
    CHECK_EQ_INT(s.claims, 3); /* kid(1), kid(3) passed, kid(4); 2 dropped */
    CHECK_EQ_INT(s.waiters, 1);
    CHECK_EQ_INT(engine_session_claims(e, 1), 0);
    CHECK_EQ_INT(engine_session_claims(e, 2), 2);
    CHECK_EQ_INT(engine_session_claims(e, 3), 1);
    /* Unknown and zero sessions: no-ops. */
    engine_session_end(e, 99, 100);
    engine_session_end(e, 0, 100);
    CHECK_EQ_INT(g_log.n, 2);
    CHECK_EQ_INT(stats(e).claims, 3);
    engine_free(e);
}

TEST(session_end_prefers_named_session_over_session_zero) {
    engine *e = mk();
    ask_claim(e, kid(1), 1, 10, 0);
    ask_wait(e, kid(1), 0, 20, 50000, 0); /* older, but unattached */
    ask_wait(e, kid(1), 3, 30, 50000, 0);
    engine_session_end(e, 1, 100);
    check_event(0, ENGINE_EV_DESIGNATE, 30, kid(1), 2, 1);
    /* Only session 0 is left: now it may be designated. */
    engine_session_end(e, 3, 200);
    CHECK_EQ_INT(g_log.n, 2);
    check_event(1, ENGINE_EV_DESIGNATE, 20, kid(1), 3, 1);
    CHECK_EQ_INT(engine_session_claims(e, 0), 1);
    /* Session 0's claim has a lease from the takeover: 200 + LEASE. */
    CHECK_EQ_INT(engine_tick(e, 300), 200 + LEASE);
    engine_free(e);
}

/* ---- leases ---- */

TEST(lease_expiry_of_unattached_session_passes_claim) {
    engine *e = mk();
    CHECK_EQ_INT(ask_claim(e, kid(1), 0, 10, 0), 1);
    ask_wait(e, kid(1), 2, 20, 10000, 0);
    ask_wait(e, kid(1), 3, 30, 20000, 0);
    CHECK_EQ_INT(engine_tick(e, 0), LEASE);
    CHECK_EQ_INT(engine_tick(e, LEASE - 1), LEASE);
    CHECK_EQ_INT(g_log.n, 0);
    /* Session 2 is not attached: its new lease runs from the takeover. */
    CHECK_EQ_INT(engine_tick(e, LEASE), 2 * LEASE);
    CHECK_EQ_INT(g_log.n, 1);
    check_event(0, ENGINE_EV_DESIGNATE, 20, kid(1), 2, 1);
    CHECK_EQ_INT(engine_session_claims(e, 0), 0);
    CHECK_EQ_INT(engine_session_claims(e, 2), 1);
    CHECK_EQ_INT(engine_report(e, kid(1), 1), ENGINE_REPORT_STALE);
    CHECK_EQ_INT(engine_report(e, kid(1), 2), ENGINE_REPORT_ACCEPT);
    /* Late tick: expiry at 2000 seen at 2500 still passes it on. */
    CHECK_EQ_INT(engine_tick(e, 2500), 2500 + LEASE);
    check_event(1, ENGINE_EV_DESIGNATE, 30, kid(1), 3, 1);
    struct engine_stats s = stats(e);
    CHECK_EQ_INT(s.takeovers, 2);
    CHECK_EQ_INT(s.designations, 3);
    CHECK_EQ_INT(s.waiters, 0);
    /* Nobody left to take it: it is dropped. */
    CHECK_EQ_INT(engine_tick(e, 2500 + LEASE), INT64_MAX);
    CHECK_EQ_INT(g_log.n, 2);
    CHECK_EQ_INT(stats(e).claims, 0);
    CHECK_EQ_INT(engine_report(e, kid(1), 3), ENGINE_REPORT_STALE);
    engine_free(e);
}

TEST(attached_session_lease_is_renewed_across_ticks) {
    engine *e = mk();
    CHECK_EQ_INT(engine_session_attach(e, 1, 0), 0);
    uint64_t c = ask_claim(e, kid(1), 1, 10, 0);
    ask_wait(e, kid(1), 2, 20, 100000, 0);
    /* Only the waiter's deadline is pending: the lease never runs out. */
    for (int64_t t = 0; t <= 20 * LEASE; t += LEASE / 2)
        CHECK_EQ_INT(engine_tick(e, t), 100000);
    CHECK_EQ_INT(g_log.n, 0);
    CHECK_EQ_INT(stats(e).claims, 1);
    CHECK_EQ_INT(engine_report(e, kid(1), c), ENGINE_REPORT_ACCEPT);
    /* Once the session ends, the claim moves on. */
    engine_session_end(e, 1, 20 * LEASE);
    check_event(0, ENGINE_EV_DESIGNATE, 20, kid(1), c + 1, 1);
    engine_free(e);
}

TEST(attach_after_claim_stops_lease_expiry) {
    engine *e = mk();
    uint64_t c = ask_claim(e, kid(1), 1, 10, 0); /* not attached yet */
    ask_wait(e, kid(1), 2, 20, 100000, 0);
    CHECK_EQ_INT(engine_tick(e, 0), LEASE);
    CHECK_EQ_INT(engine_session_attach(e, 1, 500), 0);
    CHECK_EQ_INT(engine_session_attach(e, 1, 600), 0); /* again: harmless */
    CHECK_EQ_INT(engine_tick(e, LEASE), 100000);
    CHECK_EQ_INT(engine_tick(e, 10 * LEASE), 100000);
    CHECK_EQ_INT(g_log.n, 0);
    CHECK_EQ_INT(engine_report(e, kid(1), c), ENGINE_REPORT_ACCEPT);
    CHECK_EQ_INT(engine_session_attach(e, 0, 0), DETD_EINVAL);
    engine_free(e);
}

TEST(takeover_by_attached_waiter_has_no_lease_deadline) {
    engine *e = mk();
    CHECK_EQ_INT(engine_session_attach(e, 2, 0), 0);
    ask_claim(e, kid(1), 0, 10, 0);
    ask_wait(e, kid(1), 2, 20, 100000, 0);
    CHECK_EQ_INT(engine_tick(e, LEASE), INT64_MAX);
    check_event(0, ENGINE_EV_DESIGNATE, 20, kid(1), 2, 1);
    CHECK_EQ_INT(engine_tick(e, 50 * LEASE), INT64_MAX);
    CHECK_EQ_INT(g_log.n, 1);
    CHECK_EQ_INT(engine_session_claims(e, 2), 1);
    engine_free(e);
}

TEST(lease_expiry_without_waiter_drops_claim) {
    engine *e = mk();
    uint64_t c = ask_claim(e, kid(1), 0, 10, 100);
    CHECK_EQ_INT(engine_tick(e, 100), 100 + LEASE);
    CHECK_EQ_INT(engine_tick(e, 100 + LEASE), INT64_MAX);
    CHECK_EQ_INT(g_log.n, 0);
    CHECK_EQ_INT(stats(e).claims, 0);
    CHECK_EQ_INT(stats(e).takeovers, 0);
    CHECK_EQ_INT(engine_report(e, kid(1), c), ENGINE_REPORT_STALE);
    CHECK_EQ_INT(ask_claim(e, kid(1), 0, 11, 2000), c + 1);
    engine_free(e);
}

/* ---- waiter deadlines ---- */

TEST(waiter_deadline_emits_timeout) {
    engine *e = mk();
    CHECK_EQ_INT(engine_session_attach(e, 1, 0), 0);
    ask_claim(e, kid(1), 1, 10, 0);
    ask_wait(e, kid(1), 2, 20, 300, 0);
    ask_wait(e, kid(1), 3, 30, 200, 0);
    ask_wait(e, kid(1), 4, 40, 400, 0);
    CHECK_EQ_INT(engine_tick(e, 199), 200);
    CHECK_EQ_INT(g_log.n, 0);
    CHECK_EQ_INT(engine_tick(e, 250), 300);
    CHECK_EQ_INT(g_log.n, 1);
    check_event(0, ENGINE_EV_TIMEOUT, 30, kid(1), 0, 0);
    CHECK_EQ_INT(engine_tick(e, 1000), INT64_MAX);
    CHECK_EQ_INT(g_log.n, 3);
    check_event(1, ENGINE_EV_TIMEOUT, 20, kid(1), 0, 0);
    check_event(2, ENGINE_EV_TIMEOUT, 40, kid(1), 0, 0);
    struct engine_stats s = stats(e);
    CHECK_EQ_INT(s.timeouts, 3);
    CHECK_EQ_INT(s.waiters, 0);
    CHECK_EQ_INT(s.claims, 1); /* the claim is not affected */
    CHECK_EQ_INT(engine_cancel(e, 30), DETD_ENOTFOUND);
    /* Nobody waits: the holder's session ending just drops the claim. */
    engine_session_end(e, 1, 1000);
    CHECK_EQ_INT(g_log.n, 3);
    CHECK_EQ_INT(stats(e).claims, 0);
    engine_free(e);
}

TEST(equal_deadlines_time_out_in_arrival_order) {
    engine *e;
    e = mk();
    ask_claim(e, kid(1), 1, 10, 0);
    ask_claim(e, kid(2), 1, 11, 0);
    uint64_t order[] = {23, 21, 29, 22, 28};
    for (int i = 0; i < 5; i++)
        ask_wait(e, kid(1 + i % 2), 2, order[i], 100, 0);
    CHECK_EQ_INT(engine_tick(e, 100), LEASE);
    CHECK_EQ_INT(g_log.n, 5);
    for (int i = 0; i < 5; i++)
        check_event((size_t)i, ENGINE_EV_TIMEOUT, order[i], kid(1 + i % 2), 0,
                    0);
    engine_free(e);
}

TEST(deadline_in_the_past_times_out_on_next_tick) {
    engine *e = mk();
    ask_claim(e, kid(1), 1, 10, 500);
    ask_wait(e, kid(1), 2, 20, 400, 500);
    CHECK_EQ_INT(engine_tick(e, 500), 500 + LEASE);
    check_event(0, ENGINE_EV_TIMEOUT, 20, kid(1), 0, 0);
    engine_free(e);
}

/* A waiter whose deadline passed in the same tick is not designated. */
TEST(timed_out_waiter_is_not_designated) {
    engine *e = mk();
    ask_claim(e, kid(1), 0, 10, 0);
    ask_wait(e, kid(1), 2, 20, LEASE, 0);
    ask_wait(e, kid(1), 3, 30, 5 * LEASE, 0);
    CHECK_EQ_INT(engine_tick(e, LEASE), 2 * LEASE);
    CHECK_EQ_INT(g_log.n, 2);
    check_event(0, ENGINE_EV_TIMEOUT, 20, kid(1), 0, 0);
    check_event(1, ENGINE_EV_DESIGNATE, 30, kid(1), 2, 1);
    engine_free(e);
}

TEST(tick_returns_earliest_deadline) {
    engine *e = mk();
    CHECK_EQ_INT(engine_tick(e, 0), INT64_MAX);
    ask_claim(e, kid(1), 0, 10, 0); /* lease 1000 */
    CHECK_EQ_INT(engine_tick(e, 0), LEASE);
    ask_wait(e, kid(1), 2, 20, 700, 0); /* earlier than the lease */
    CHECK_EQ_INT(engine_tick(e, 1), 700);
    ask_claim(e, kid(2), 0, 11, 100); /* lease 1100 */
    CHECK_EQ_INT(engine_tick(e, 2), 700);
    CHECK_EQ_INT(engine_cancel(e, 20), 0);
    CHECK_EQ_INT(engine_tick(e, 3), LEASE);
    CHECK_EQ_INT(engine_decided(e, kid(1)), 0);
    CHECK_EQ_INT(engine_tick(e, 4), 1100);
    CHECK_EQ_INT(engine_tick(e, 1100), INT64_MAX);
    CHECK_EQ_INT(stats(e).claims, 0);
    CHECK_EQ_INT(g_log.n, 0);
    engine_free(e);
}

TEST(lease_saturates_near_int64_max) {
    engine *e = mk();
    ask_claim(e, kid(1), 0, 10, INT64_MAX - 10);
    CHECK_EQ_INT(engine_tick(e, INT64_MAX - 10), INT64_MAX);
    CHECK_EQ_INT(stats(e).claims, 1);
    engine_free(e);
}

/* ---- cancel ---- */

TEST(cancel_removes_the_waiter) {
    engine *e = mk();
    CHECK_EQ_INT(engine_session_attach(e, 1, 0), 0);
    ask_claim(e, kid(1), 1, 10, 0);
    ask_wait(e, kid(1), 2, 20, 300, 0);
    ask_wait(e, kid(1), 3, 30, 400, 0);
    CHECK_EQ_INT(engine_cancel(e, 20), 0);
    CHECK_EQ_INT(stats(e).waiters, 1);
    CHECK_EQ_INT(engine_cancel(e, 20), DETD_ENOTFOUND);
    CHECK_EQ_INT(engine_cancel(e, 0), DETD_EINVAL);
    CHECK_EQ_INT(engine_cancel(e, 999), DETD_ENOTFOUND);
    /* Its deadline is gone too. */
    CHECK_EQ_INT(engine_tick(e, 0), 400);
    /* The cancelled waiter is skipped on takeover ... */
    engine_session_end(e, 1, 10);
    CHECK_EQ_INT(g_log.n, 1);
    check_event(0, ENGINE_EV_DESIGNATE, 30, kid(1), 2, 1);
    /* ... and a token may be reused once its waiter is gone. */
    ask_wait(e, kid(1), 4, 20, 5000, 10);
    CHECK_EQ_INT(engine_decided(e, kid(1)), 1);
    check_event(1, ENGINE_EV_RELEASE, 20, kid(1), 0, 0);
    CHECK_EQ_INT(g_log.n, 2);
    engine_free(e);
}

TEST(cancel_last_waiter_of_unclaimed_key_frees_it) {
    engine *e = mk_limited(10, 1);
    ask_claim(e, kid(1), 2, 10, 0);
    ask_wait(e, kid(1), 1, 11, 5000, 0);
    engine_session_end(e, 1, 1);
    engine_session_end(e, 2, 1); /* claim dropped, waiter 11 left */
    CHECK_EQ_INT(stats(e).claims, 0);
    CHECK_EQ_INT(engine_cancel(e, 11), 0);
    struct engine_stats s = stats(e);
    CHECK_EQ_INT(s.waiters, 0);
    CHECK_EQ_INT(s.claims, 0);
    CHECK_EQ_INT(engine_tick(e, 2), INT64_MAX);
    CHECK_EQ_INT(engine_decided(e, kid(1)), 0);
    CHECK_EQ_INT(g_log.n, 0);
    engine_free(e);
}

/* ---- limits ---- */

TEST(max_claims_gives_ebusy_without_change) {
    engine *e = mk_limited(10, 2);
    CHECK_EQ_INT(ask_claim(e, kid(1), 1, 1, 0), 1);
    CHECK_EQ_INT(ask_claim(e, kid(2), 2, 2, 0), 2);
    struct engine_stats before = stats(e);
    uint64_t claim = 55;
    CHECK_EQ_INT(engine_ask(e, kid(3), 3, 3, FAR, 0, &claim), DETD_EBUSY);
    CHECK_EQ_INT(claim, 55);
    struct engine_stats after = stats(e);
    CHECK(memcmp(&before, &after, sizeof(before)) == 0);
    CHECK_EQ_INT(engine_session_claims(e, 3), 0);
    CHECK_EQ_INT(engine_report(e, kid(3), 3), ENGINE_REPORT_STALE);
    /* Retries and waiters are not new claims. */
    CHECK_EQ_INT(ask_claim(e, kid(1), 1, 4, 0), 1);
    ask_wait(e, kid(2), 3, 5, 5000, 0);
    /* A freed slot is usable again; the refused ask consumed no id. */
    CHECK_EQ_INT(engine_decided(e, kid(1)), 0);
    CHECK_EQ_INT(ask_claim(e, kid(3), 3, 6, 0), 3);
    CHECK_EQ_INT(g_log.n, 0);
    engine_free(e);
}

TEST(max_waiters_gives_ebusy_without_change) {
    engine *e = mk_limited(2, 10);
    ask_claim(e, kid(1), 1, 1, 0);
    ask_wait(e, kid(1), 2, 20, 100, 0);
    ask_wait(e, kid(1), 3, 30, 200, 0);
    struct engine_stats before = stats(e);
    uint64_t claim = 55;
    CHECK_EQ_INT(engine_ask(e, kid(1), 4, 40, 50, 0, &claim), DETD_EBUSY);
    CHECK_EQ_INT(claim, 55);
    struct engine_stats after = stats(e);
    CHECK(memcmp(&before, &after, sizeof(before)) == 0);
    CHECK_EQ_INT(engine_cancel(e, 40), DETD_ENOTFOUND);
    /* The refused waiter's deadline (50) is not pending. */
    CHECK_EQ_INT(engine_tick(e, 0), 100);
    /* New keys can still be claimed. */
    CHECK_EQ_INT(ask_claim(e, kid(2), 4, 41, 0), 2);
    /* Room again after a cancel. */
    CHECK_EQ_INT(engine_cancel(e, 20), 0);
    ask_wait(e, kid(1), 4, 40, 50, 0);
    CHECK_EQ_INT(stats(e).waiters, 2);
    CHECK_EQ_INT(g_log.n, 0);
    engine_free(e);
}

TEST(zero_limits_refuse_everything) {
    engine *e = mk_limited(0, 0);
    uint64_t claim = 0;
    CHECK_EQ_INT(engine_ask(e, kid(1), 1, 1, FAR, 0, &claim), DETD_EBUSY);
    CHECK_EQ_INT(stats(e).claims, 0);
    engine_free(e);
    e = mk_limited(0, 1);
    ask_claim(e, kid(1), 1, 1, 0);
    CHECK_EQ_INT(engine_ask(e, kid(1), 2, 2, FAR, 0, &claim), DETD_EBUSY);
    CHECK_EQ_INT(stats(e).waiters, 0);
    engine_free(e);
}

/* ---- scale ---- */

TEST(stress_100k_keys) {
    enum { KEYS = 100000, SESSIONS = 1000, WAITERS = 5000 };
    engine *e = mk_limited(WAITERS, KEYS);
    for (uint64_t s = 1; s <= SESSIONS; s++)
        CHECK_EQ_INT(engine_session_attach(e, s, 0), 0);
    /* Key i is held by session 1 + i % SESSIONS, claim id i + 1. */
    for (unsigned i = 0; i < KEYS; i++)
        CHECK_EQ_INT(ask_claim(e, kid(i), 1 + i % SESSIONS, 1 + i, 0), i + 1);
    uint64_t claim = 0;
    CHECK_EQ_INT(engine_ask(e, kid(KEYS), 1, 1, FAR, 0, &claim), DETD_EBUSY);
    /* One waiter on each of keys 0..WAITERS-1, from the next session. */
    for (unsigned i = 0; i < WAITERS; i++)
        ask_wait(e, kid(i), 1 + (i + 1) % SESSIONS, 1000000 + i, 10000 + i, 0);
    CHECK_EQ_INT(engine_ask(e, kid(0), 5, 999, FAR, 0, &claim), DETD_EBUSY);
    struct engine_stats s = stats(e);
    CHECK_EQ_INT(s.claims, KEYS);
    CHECK_EQ_INT(s.waiters, WAITERS);
    CHECK_EQ_INT(s.designations, KEYS);
    CHECK_EQ_INT(engine_session_claims(e, 1), KEYS / SESSIONS);
    for (unsigned i = 0; i < KEYS; i += 997) {
        CHECK_EQ_INT(engine_report(e, kid(i), i + 1), ENGINE_REPORT_ACCEPT);
        CHECK_EQ_INT(engine_report(e, kid(i), i + 2), ENGINE_REPORT_STALE);
    }

    /* Decide keys 0..2499: releases exactly their waiters. */
    size_t released = 0;
    for (unsigned i = 0; i < 2500; i++)
        released += engine_decided(e, kid(i));
    CHECK_EQ_INT(released, 2500);
    CHECK_EQ_INT(g_log.n, 2500);
    for (size_t i = 0; i < g_log.n; i++) {
        CHECK_EQ_INT(g_log.v[i].kind, ENGINE_EV_RELEASE);
        CHECK_EQ_INT(g_log.v[i].token, 1000000 + i);
    }
    s = stats(e);
    CHECK_EQ_INT(s.claims, KEYS - 2500);
    CHECK_EQ_INT(s.waiters, WAITERS - 2500);

    /* Session 1 holds keys 3000, 4000, ..., 99000 (97 claims); keys 3000
     * and 4000 have a waiter of session 2, the other 95 are dropped. */
    log_reset();
    CHECK_EQ_INT(engine_session_claims(e, 1), 97);
    CHECK_EQ_INT(engine_session_claims(e, 2), 97);
    engine_session_end(e, 1, 1);
    CHECK_EQ_INT(g_log.n, 2);
    for (size_t i = 0; i < 2; i++) {
        CHECK_EQ_INT(g_log.v[i].kind, ENGINE_EV_DESIGNATE);
        CHECK_EQ_INT(g_log.v[i].takeover, 1);
        CHECK(g_log.v[i].claim_id == KEYS + 1 ||
              g_log.v[i].claim_id == KEYS + 2);
        CHECK(g_log.v[i].token == 1003000 || g_log.v[i].token == 1004000);
    }
    s = stats(e);
    CHECK_EQ_INT(s.claims, KEYS - 2500 - 95);
    CHECK_EQ_INT(s.waiters, WAITERS - 2500 - 2);
    CHECK_EQ_INT(s.takeovers, 2);
    CHECK_EQ_INT(s.designations, KEYS + 2);
    CHECK_EQ_INT(engine_session_claims(e, 1), 0);
    CHECK_EQ_INT(engine_session_claims(e, 2), 99);

    /* All remaining waiters time out, in deadline order; attached
     * sessions' claims leave nothing else pending. */
    log_reset();
    CHECK_EQ_INT(engine_tick(e, 10000 + 2499), 10000 + 2500);
    CHECK_EQ_INT(g_log.n, 0);
    CHECK_EQ_INT(engine_tick(e, 10000 + WAITERS), INT64_MAX);
    CHECK_EQ_INT(g_log.n, WAITERS - 2500 - 2);
    for (size_t i = 0; i < g_log.n; i++) {
        CHECK_EQ_INT(g_log.v[i].kind, ENGINE_EV_TIMEOUT);
        if (i > 0)
            CHECK(g_log.v[i].token > g_log.v[i - 1].token);
    }
    s = stats(e);
    CHECK_EQ_INT(s.waiters, 0);
    CHECK_EQ_INT(s.timeouts, WAITERS - 2500 - 2);
    CHECK_EQ_INT(s.claims, KEYS - 2500 - 95);
    engine_free(e);
}

/* Ten thousand waiters on one key, all released, then 100k distinct
 * tokens cycling through: counts stay exact. */
TEST(stress_waiters_one_key_and_takeovers) {
    enum { N = 10000, SESS = 100 };
    engine *e = mk_limited(N, 100000);
    for (uint64_t s = 1; s <= SESS; s++)
        CHECK_EQ_INT(engine_session_attach(e, s, 0), 0);
    ask_claim(e, kid(7), 1, 1, 0);
    for (unsigned i = 0; i < N; i++)
        ask_wait(e, kid(7), 2 + i % (SESS - 1), 100 + i, 1000000, 0);
    CHECK_EQ_INT(stats(e).waiters, N);
    /* End sessions 1..SESS-2 in turn. Waiters of ended sessions are
     * skipped, so the claim goes to tokens 100, 101, ... (sessions 2, 3,
     * ...), each the oldest waiter of a live session. */
    uint64_t owner = 1;
    for (unsigned round = 0; round < SESS - 2; round++) {
        size_t before = g_log.n;
        engine_session_end(e, owner, round);
        CHECK_EQ_INT(g_log.n, before + 1);
        check_event(before, ENGINE_EV_DESIGNATE, 100 + round, kid(7), round + 2,
                    1);
        owner = round + 2;
        CHECK_EQ_INT(engine_session_claims(e, owner), 1);
    }
    CHECK_EQ_INT(stats(e).takeovers, SESS - 2);
    size_t before = g_log.n;
    size_t live = stats(e).waiters;
    CHECK_EQ_INT(engine_decided(e, kid(7)), live);
    CHECK_EQ_INT(g_log.n, before + live);
    for (size_t i = before + 1; i < g_log.n; i++)
        CHECK(g_log.v[i].token > g_log.v[i - 1].token); /* FIFO */
    CHECK_EQ_INT(stats(e).waiters, 0);
    CHECK_EQ_INT(stats(e).claims, 0);
    engine_free(e);
}

#define T(cfg, arr, failed)                                                    \
    { cfg, arr, sizeof(arr) / sizeof(arr[0]), failed }

/* ---- allocation failures ---- */

struct snapshot {
    struct engine_stats st;
    int64_t next;
};

static struct snapshot snap(engine *e) {
    struct snapshot x;
    memset(&x, 0, sizeof(x));
    x.st = stats(e);
    x.next = engine_tick(e, 0); /* expires nothing: all times are later */
    return x;
}

/*
 * Every allocation made by engine_new, engine_session_attach and
 * engine_ask (designation and wait, through the growth of every table and
 * heap) fails in turn: each failure returns DETD_ENOMEM with the engine
 * unchanged, and the retry then succeeds with the expected result.
 */
TEST(alloc_failures_leave_state_unchanged) {
    check_wrapped();
    struct engine_limits lim = {100000, 100000, LEASE};
    engine *e = NULL;
    long f;
    for (f = 1;; f++) {
        fail_at = f;
        int rc = engine_new(&lim, record, &g_log, &e);
        long left = fail_at;
        fail_at = 0;
        if (rc == 0) {
            CHECK(left > 0);
            break;
        }
        CHECK_EQ_INT(rc, DETD_ENOMEM);
        CHECK(e == NULL);
    }
    CHECK(f > 1);
    log_reset();
    long failures = 0;
    for (unsigned i = 0; i < 300; i++) {
        for (f = 1;; f++) {
            struct snapshot before = snap(e);
            uint64_t claim = 0;
            int rc;
            fail_at = f;
            if (i % 3 == 0)
                rc = engine_session_attach(e, 1000 + i, 0);
            else if (i % 3 == 1) /* new key, new unattached session */
                rc = engine_ask(e, kid(i), 1000 + i, 1 + i, FAR, 1, &claim);
            else /* a waiter from a new session on the previous key */
                rc = engine_ask(e, kid(i - 1), 5000 + i, 1 + i, 2 * FAR, 1,
                                &claim);
            long left = fail_at;
            fail_at = 0;
            if (left == 0) { /* an allocation failed */
                CHECK_EQ_INT(rc, DETD_ENOMEM);
                struct snapshot after = snap(e);
                CHECK(memcmp(&before, &after, sizeof(before)) == 0);
                CHECK_EQ_INT(engine_session_claims(e, 1000 + i), 0);
                CHECK_EQ_INT(engine_cancel(e, 1 + i), DETD_ENOTFOUND);
                failures++;
                continue;
            }
            if (i % 3 == 0) {
                CHECK_EQ_INT(rc, 0);
            } else if (i % 3 == 1) {
                CHECK_EQ_INT(rc, ENGINE_ASK_DESIGNATED);
                CHECK_EQ_INT(claim, i / 3 + 1); /* failures used no id */
            } else {
                CHECK_EQ_INT(rc, ENGINE_ASK_WAIT);
            }
            break;
        }
    }
    CHECK(failures >= 300);
    struct engine_stats s = stats(e);
    CHECK_EQ_INT(s.claims, 100);
    CHECK_EQ_INT(s.waiters, 100);
    CHECK_EQ_INT(s.designations, 100);
    CHECK_EQ_INT(engine_tick(e, 1), 1 + LEASE);
    CHECK_EQ_INT(g_log.n, 0);
    /* Every claim lapses and passes to its waiter, without allocating. */
    fail_at = 1;
    CHECK_EQ_INT(engine_tick(e, 1 + LEASE), 1 + 2 * LEASE);
    CHECK_EQ_INT(fail_at, 1);
    fail_at = 0;
    CHECK_EQ_INT(g_log.n, 100);
    for (unsigned i = 0; i < 100; i++) {
        check_event(i, ENGINE_EV_DESIGNATE, 3 * i + 3, kid(3 * i + 1), 101 + i,
                    1);
        CHECK_EQ_INT(engine_session_claims(e, 5000 + 3 * i + 2), 1);
    }
    CHECK_EQ_INT(stats(e).waiters, 0);
    engine_free(e);
}

TEST(pick_winner_alloc_failure) {
    check_wrapped();
    static double a[100];
    for (int i = 0; i < 100; i++)
        a[i] = 1.0;
    struct engine_timing t[] = {T("a", a, 0)};
    fail_at = 1;
    CHECK_EQ_INT(engine_pick_winner(t, 1, NULL, 0), DETD_ENOMEM);
    fail_at = 0;
    CHECK_EQ_INT(engine_pick_winner(t, 1, NULL, 0), 0);
}

/* ---- the winner rule ---- */

TEST(pick_median_odd_count) {
    /* Means would pick "b" (outlier 100 in a); medians pick "a". */
    static const double a[] = {1.0, 100.0, 1.0};
    static const double b[] = {2.0, 2.0, 2.0};
    struct engine_timing t[] = {T("b", b, 0), T("a", a, 0)};
    CHECK_EQ_INT(engine_pick_winner(t, 2, NULL, 0), 1);
}

TEST(pick_median_even_count_is_mean_of_middle) {
    /* median(a) = (2 + 4) / 2 = 3; median(b) = 3.5; median(c) = 3.0 */
    static const double a[] = {4.0, 1.0, 9.0, 2.0};
    static const double b[] = {3.0, 4.0};
    static const double c[] = {2.5, 3.5};
    struct engine_timing ab[] = {T("b", b, 0), T("a", a, 0)};
    CHECK_EQ_INT(engine_pick_winner(ab, 2, NULL, 0), 1);
    /* a and c tie at exactly 3.0: the smaller string "a" wins. */
    struct engine_timing ac[] = {T("c", c, 0), T("a", a, 0)};
    CHECK_EQ_INT(engine_pick_winner(ac, 2, NULL, 0), 1);
    struct engine_timing ca[] = {T("a", a, 0), T("c", c, 0)};
    CHECK_EQ_INT(engine_pick_winner(ca, 2, NULL, 0), 0);
}

TEST(pick_median_even_count_huge_values_do_not_overflow) {
    static const double a[] = {1.5e308, 1.7e308}; /* sum overflows */
    static const double b[] = {1.7e308};
    struct engine_timing t[] = {T("b", b, 0), T("a", a, 0)};
    CHECK_EQ_INT(engine_pick_winner(t, 2, NULL, 0), 1);
}

TEST(pick_ties_go_to_smallest_config_string) {
    static const double x[] = {5.0};
    struct engine_timing t[] = {
        T("BLOCK=64,num_warps=4", x, 0),
        T("BLOCK=128,num_warps=4", x, 0),
        T("BLOCK=64,num_warps=2", x, 0),
    };
    /* strcmp: "BLOCK=128..." < "BLOCK=64,num_warps=2" < "...=4" */
    CHECK_EQ_INT(engine_pick_winner(t, 3, NULL, 0), 1);
    /* A lower score inside the noise band (1%) does not beat a smaller
     * string; one outside it does. */
    static const double y[] = {4.999};
    t[0].ms = y;
    CHECK_EQ_INT(engine_pick_winner(t, 3, NULL, 0), 1);
    static const double z[] = {4.9};
    t[0].ms = z;
    CHECK_EQ_INT(engine_pick_winner(t, 3, NULL, 0), 0);
}

TEST(pick_excludes_failed_and_empty) {
    static const double fast[] = {0.1};
    static const double slow[] = {9.0};
    struct engine_timing t[] = {
        T("a", fast, 1),   /* failed, even though fastest */
        {"b", NULL, 0, 0}, /* no samples */
        {"c", fast, 0, 0}, /* n_ms 0 */
        T("d", slow, 0),
    };
    CHECK_EQ_INT(engine_pick_winner(t, 4, NULL, 0), 3);
}

TEST(pick_excludes_nan_inf_and_negative) {
    static const double nan_s[] = {NAN};
    static const double nan_mixed[] = {0.1, NAN, 0.1};
    static const double inf_s[] = {INFINITY, INFINITY, 1.0};
    static const double neg[] = {-1.0, -2.0, -3.0};
    static const double neg_inf[] = {-INFINITY};
    static const double inf_tail[] = {0.5, 0.5, INFINITY}; /* median 0.5 */
    static const double ok[] = {0.7};
    struct engine_timing t[] = {
        T("a", nan_s, 0), T("b", nan_mixed, 0), T("c", inf_s, 0),
        T("d", neg, 0),   T("e", neg_inf, 0),   T("f", ok, 0),
    };
    CHECK_EQ_INT(engine_pick_winner(t, 6, NULL, 0), 5);
    /* An infinite sample does not exclude a finite median. */
    struct engine_timing u[] = {T("f", ok, 0), T("g", inf_tail, 0)};
    CHECK_EQ_INT(engine_pick_winner(u, 2, NULL, 0), 1);
    /* Zero is a valid (if unlikely) time, -0.0 included. */
    static const double zero[] = {-0.0};
    struct engine_timing z[] = {T("f", ok, 0), T("z", zero, 0)};
    CHECK_EQ_INT(engine_pick_winner(z, 2, NULL, 0), 1);
}

TEST(pick_allowed_filter) {
    static const double fast[] = {0.1};
    static const double mid[] = {0.5};
    static const double slow[] = {0.9};
    struct engine_timing t[] = {T("x", fast, 0), T("y", mid, 0),
                                T("z", slow, 0)};
    const char *allow_yz[] = {"z", "y"};
    const char *allow_none[] = {"q"};
    CHECK_EQ_INT(engine_pick_winner(t, 3, NULL, 0), 0);
    CHECK_EQ_INT(engine_pick_winner(t, 3, allow_yz, 2), 1);
    CHECK_EQ_INT(engine_pick_winner(t, 3, allow_yz, 1), 2);
    CHECK_EQ_INT(engine_pick_winner(t, 3, allow_none, 1), DETD_ENOCAND);
    CHECK_EQ_INT(engine_pick_winner(t, 3, allow_yz, 0), DETD_ENOCAND);
}

TEST(pick_no_candidate) {
    static const double x[] = {1.0};
    struct engine_timing t[] = {T("a", x, 1), T("b", x, 1)};
    CHECK_EQ_INT(engine_pick_winner(t, 2, NULL, 0), DETD_ENOCAND);
    CHECK_EQ_INT(engine_pick_winner(t, 0, NULL, 0), DETD_ENOCAND);
    CHECK_EQ_INT(engine_pick_winner(NULL, 0, NULL, 0), DETD_ENOCAND);
    CHECK_EQ_INT(engine_pick_winner(NULL, 1, NULL, 0), DETD_EINVAL);
    CHECK_EQ_INT(engine_pick_winner(t, 2, NULL, 3), DETD_EINVAL);
}

TEST(pick_many_samples) {
    /* More samples than the on-stack buffer: a is 1..201 reversed
     * (median 101), b is constant 99 (more than epsilon faster). */
    static double a[201], b[200];
    for (int i = 0; i < 201; i++)
        a[i] = 201 - i;
    for (int i = 0; i < 200; i++)
        b[i] = 99.0;
    struct engine_timing t[] = {T("a", a, 0), T("b", b, 0)};
    CHECK_EQ_INT(engine_pick_winner(t, 2, NULL, 0), 1);
    b[100] = b[99] = 101.0; /* b's median still 99: sorted middles */
    CHECK_EQ_INT(engine_pick_winner(t, 2, NULL, 0), 1);
    for (int i = 0; i < 200; i++)
        b[i] = 101.0;
    /* Now tie at 101: "a" < "b". */
    CHECK_EQ_INT(engine_pick_winner(t, 2, NULL, 0), 0);
    /* The rule does not modify the caller's samples. */
    CHECK(a[0] == 201 && a[200] == 1);
}

TEST(pick_within_epsilon_goes_to_smallest_config_string) {
    /* Epsilon is 1%: c (best, 1.000) and a (1.009) are tied, a wins by
     * its string; b (1.011) is outside the band and never wins. */
    CHECK(ENGINE_WINNER_EPSILON == 0.01);
    static const double best[] = {1.000, 0.990, 1.010}; /* median 1.000 */
    static const double near[] = {1.009};
    static const double out[] = {1.011};
    struct engine_timing t[] = {T("c", best, 0), T("b", out, 0),
                                T("a", near, 0)};
    CHECK_EQ_INT(engine_pick_winner(t, 3, NULL, 0), 2);
    /* Without a, the band holds c alone: the fastest wins. */
    CHECK_EQ_INT(engine_pick_winner(t, 2, NULL, 0), 0);
    /* The band is measured from the best, never chained: z at 1.0, m at
     * 1.009 and a at 1.018 (within 1% of m, not of z): m wins. */
    static const double z1[] = {1.0}, m1[] = {1.009}, a1[] = {1.018};
    struct engine_timing u[] = {T("z", z1, 0), T("m", m1, 0), T("a", a1, 0)};
    CHECK_EQ_INT(engine_pick_winner(u, 3, NULL, 0), 1);
    /* Same timings in another order: the same winner. */
    struct engine_timing v[] = {T("a", a1, 0), T("m", m1, 0), T("z", z1, 0)};
    CHECK_EQ_INT(engine_pick_winner(v, 3, NULL, 0), 1);
    /* A failed candidate inside the band is still excluded. */
    struct engine_timing w[] = {T("z", z1, 0), T("m", m1, 1)};
    CHECK_EQ_INT(engine_pick_winner(w, 2, NULL, 0), 0);
}

TEST(pick_epsilon_with_remeasured_samples) {
    /* The client re-measures the near candidates and reports both
     * measurements as one sample list: the median of all decides. A
     * first measurement of "y" that was lucky (0.95, 2% ahead of x) is
     * outweighed by its re-measure (1.10): x wins, outside the band. */
    static const double x[] = {0.97, 0.96, 0.98, 0.97, 0.96, 0.98};
    static const double y1[] = {0.95, 0.94, 0.96};
    static const double y2[] = {0.95, 0.94, 0.96, 1.10, 1.09, 1.11};
    struct engine_timing first[] = {T("x", x, 0), T("y", y1, 0)};
    CHECK_EQ_INT(engine_pick_winner(first, 2, NULL, 0), 1);
    struct engine_timing both[] = {T("x", x, 0), T("y", y2, 0)};
    CHECK_EQ_INT(engine_pick_winner(both, 2, NULL, 0), 0);
}

TEST(claim_info_and_shares) {
    engine *e = mk();
    struct engine_claim_info ci = {.claim_id = 7};
    uint32_t idx = 99;
    CHECK_EQ_INT(engine_claim_info(e, kid(1), &ci), 0);
    CHECK_EQ_INT(ci.claim_id, 7);
    CHECK_EQ_INT(engine_claim_share(e, kid(1), 2, &idx), 0);
    CHECK_EQ_INT(idx, 99);
    CHECK_EQ_INT(engine_session_attach(e, 1, 0), 0);
    uint64_t claim = ask_claim(e, kid(1), 1, 100, 40);
    CHECK_EQ_INT(engine_claim_info(e, kid(1), &ci), 1);
    CHECK_EQ_INT(ci.claim_id, claim);
    CHECK_EQ_INT(ci.session, 1);
    CHECK_EQ_INT(ci.claimed_ms, 40);
    CHECK_EQ_INT(ci.shares, 0);
    /* The holder gets no share of its own pass; others get 1, 2, 3. */
    CHECK_EQ_INT(engine_claim_share(e, kid(1), 1, &idx), 0);
    CHECK_EQ_INT(engine_claim_share(e, kid(1), 0, &idx), 0);
    CHECK_EQ_INT(engine_claim_share(e, kid(1), 2, &idx), 1);
    CHECK_EQ_INT(idx, 1);
    CHECK_EQ_INT(engine_claim_share(e, kid(1), 3, &idx), 1);
    CHECK_EQ_INT(idx, 2);
    CHECK_EQ_INT(engine_claim_share(e, kid(1), 2, &idx), 1);
    CHECK_EQ_INT(idx, 3);
    CHECK_EQ_INT(engine_claim_info(e, kid(1), &ci), 1);
    CHECK_EQ_INT(ci.shares, 3);
    /* Another key's claim has its own count; bad ids have none. */
    CHECK_EQ_INT(engine_claim_share(e, kid(2), 2, &idx), 0);
    CHECK_EQ_INT(engine_claim_info(e, "nothex", &ci), 0);
    CHECK_EQ_INT(engine_claim_info(NULL, kid(1), &ci), 0);
    CHECK_EQ_INT(engine_claim_info(e, kid(1), NULL), 0);
    CHECK_EQ_INT(engine_claim_share(e, kid(1), 2, NULL), 0);
    /* A waiter, then the holder leaves: the claim passes and a new
     * claim's shares start at 1 again. */
    CHECK_EQ_INT(engine_session_attach(e, 4, 0), 0);
    ask_wait(e, kid(1), 4, 101, FAR, 50);
    engine_session_end(e, 1, 60);
    CHECK_EQ_INT(engine_claim_info(e, kid(1), &ci), 1);
    CHECK_EQ_INT(ci.session, 4);
    CHECK_EQ_INT(ci.claimed_ms, 60);
    CHECK_EQ_INT(ci.shares, 0);
    CHECK_EQ_INT(engine_claim_share(e, kid(1), 2, &idx), 1);
    CHECK_EQ_INT(idx, 1);
    engine_free(e);
}

/* ---- release (the etcd backend: a held asker gives up) ---- */

TEST(claim_of_reports_the_live_claim) {
    engine *e = mk();
    uint64_t c = 99;
    CHECK_EQ_INT(engine_claim_of(e, kid(1), &c), 0);
    CHECK_EQ_INT(c, 99);
    uint64_t claim = ask_claim(e, kid(1), 1, 100, 0);
    CHECK_EQ_INT(engine_claim_of(e, kid(1), &c), 1);
    CHECK_EQ_INT(c, claim);
    CHECK_EQ_INT(engine_claim_of(e, kid(1), NULL), 1);
    CHECK_EQ_INT(engine_claim_of(e, "", &c), 0);
    CHECK_EQ_INT(engine_claim_of(NULL, kid(1), &c), 0);
    engine_decided(e, kid(1));
    CHECK_EQ_INT(engine_claim_of(e, kid(1), &c), 0);
    engine_free(e);
}

TEST(release_passes_to_oldest_waiter_without_takeover) {
    engine *e = mk();
    CHECK_EQ_INT(engine_session_attach(e, 1, 0), 0);
    CHECK_EQ_INT(engine_session_attach(e, 2, 0), 0);
    CHECK_EQ_INT(engine_session_attach(e, 3, 0), 0);
    uint64_t claim = ask_claim(e, kid(1), 1, 100, 0);
    ask_wait(e, kid(1), 2, 200, 5000, 0);
    ask_wait(e, kid(1), 3, 300, 5000, 0);
    CHECK_EQ_INT(engine_release(e, kid(1), claim + 7, 10), DETD_ENOTFOUND);
    CHECK_EQ_INT(engine_release(e, kid(2), claim, 10), DETD_ENOTFOUND);
    CHECK_EQ_INT(engine_release(e, kid(1), 0, 10), DETD_EINVAL);
    CHECK_EQ_INT(engine_release(e, "", claim, 10), DETD_EINVAL);
    CHECK_EQ_INT(g_log.n, 0);
    CHECK_EQ_INT(engine_release(e, kid(1), claim, 10), 1);
    CHECK_EQ_INT(g_log.n, 1);
    check_event(0, ENGINE_EV_DESIGNATE, 200, kid(1), claim + 1, 0);
    struct engine_stats s = stats(e);
    CHECK_EQ_INT(s.claims, 1);
    CHECK_EQ_INT(s.waiters, 1);
    CHECK_EQ_INT(s.takeovers, 0);
    CHECK_EQ_INT(s.designations, 2);
    CHECK_EQ_INT(engine_session_claims(e, 1), 0);
    CHECK_EQ_INT(engine_session_claims(e, 2), 1);
    /* The old claim id is stale now. */
    CHECK_EQ_INT(engine_report(e, kid(1), claim), ENGINE_REPORT_STALE);
    CHECK_EQ_INT(engine_report(e, kid(1), claim + 1), ENGINE_REPORT_ACCEPT);
    engine_free(e);
}

TEST(release_without_waiter_drops_claim_and_key) {
    engine *e = mk();
    uint64_t claim = ask_claim(e, kid(1), 0, 100, 0);
    CHECK_EQ_INT(engine_release(e, kid(1), claim, 10), 0);
    CHECK_EQ_INT(g_log.n, 0);
    struct engine_stats s = stats(e);
    CHECK_EQ_INT(s.claims, 0);
    CHECK_EQ_INT(s.waiters, 0);
    CHECK_EQ_INT(engine_claim_of(e, kid(1), NULL), 0);
    /* The session-0 lease left the heap with the claim. */
    CHECK_EQ_INT(engine_tick(e, 10), INT64_MAX);
    /* The next asker gets a new claim. */
    CHECK_EQ_INT(ask_claim(e, kid(1), 0, 101, 20), claim + 1);
    engine_free(e);
}

TEST(release_skips_waiters_of_ended_sessions) {
    engine *e = mk();
    CHECK_EQ_INT(engine_session_attach(e, 1, 0), 0);
    CHECK_EQ_INT(engine_session_attach(e, 2, 0), 0);
    uint64_t claim = ask_claim(e, kid(1), 1, 100, 0);
    ask_wait(e, kid(1), 2, 200, 5000, 0);
    ask_wait(e, kid(1), 0, 300, 5000, 0);
    engine_session_end(e, 2, 1);
    CHECK_EQ_INT(g_log.n, 0);
    CHECK_EQ_INT(engine_release(e, kid(1), claim, 10), 1);
    check_event(0, ENGINE_EV_DESIGNATE, 300, kid(1), claim + 1, 0);
    CHECK_EQ_INT(engine_cancel(e, 200), 0);
    engine_free(e);
}

/* ---- options: claim ids, session 0, pass deadline, rejection ---- */

static uint64_t g_draws[8];
static size_t g_ndraws, g_drawn;

static uint64_t scripted_id(void *ctx) {
    (void)ctx;
    return g_drawn < g_ndraws ? g_draws[g_drawn++] : 0;
}

TEST(claim_ids_come_from_the_source_nonzero_and_unique) {
    engine *e = mk();
    uint64_t script[] = {0, 77, 77, 77, 99, 77};
    memcpy(g_draws, script, sizeof(script));
    g_ndraws = sizeof(script) / sizeof(script[0]);
    g_drawn = 0;
    struct engine_options o = {.claim_id = scripted_id};
    CHECK_EQ_INT(engine_set_options(e, &o), 0);
    CHECK_EQ_INT(engine_set_options(e, NULL), DETD_EINVAL);
    /* 0 is skipped; 77 is live, so the second key gets 99. */
    CHECK_EQ_INT(ask_claim(e, kid(1), 1, 10, 0), 77);
    CHECK_EQ_INT(ask_claim(e, kid(2), 2, 20, 0), 99);
    /* Passing kid(1)'s claim never reuses its last id (77). */
    ask_wait(e, kid(1), 3, 30, FAR, 0);
    engine_session_end(e, 1, 5);
    CHECK_EQ_INT(g_log.n, 1);
    CHECK(g_log.v[0].claim_id != 77 && g_log.v[0].claim_id != 99);
    CHECK(g_log.v[0].claim_id != 0);
    engine_free(e);
}

TEST(named_only_never_designates_session_zero) {
    engine *e = mk();
    struct engine_options o = {.named_only = 1};
    CHECK_EQ_INT(engine_set_options(e, &o), 0);
    uint64_t claim = 5;
    CHECK_EQ_INT(engine_ask(e, kid(1), 0, 10, FAR, 0, &claim),
                 ENGINE_ASK_UNATTACHED);
    CHECK_EQ_INT(claim, 5);
    CHECK_EQ_INT(stats(e).claims, 0);
    /* With a pass in progress it waits; when the pass ends with only
     * session 0 waiting, it is aborted, not designated. */
    claim = ask_claim(e, kid(1), 1, 20, 0);
    ask_wait(e, kid(1), 0, 30, FAR, 0);
    CHECK_EQ_INT(engine_release(e, kid(1), claim, 1), 0);
    CHECK_EQ_INT(g_log.n, 1);
    CHECK_EQ_INT(g_log.v[0].kind, ENGINE_EV_ABORT);
    CHECK_EQ_INT(g_log.v[0].token, 30);
    CHECK_EQ_INT(stats(e).waiters, 0);
    CHECK_EQ_INT(stats(e).claims, 0);
    engine_free(e);
}

TEST(pass_deadline_passes_an_attached_sessions_claim) {
    engine *e = mk();
    struct engine_options o = {.pass_timeout_ms = 500};
    CHECK_EQ_INT(engine_set_options(e, &o), 0);
    CHECK_EQ_INT(engine_session_attach(e, 1, 0), 0);
    CHECK_EQ_INT(engine_session_attach(e, 2, 0), 0);
    uint64_t claim = ask_claim(e, kid(1), 1, 10, 100);
    ask_wait(e, kid(1), 2, 20, FAR, 100);
    CHECK_EQ_INT(engine_tick(e, 599), 600);
    CHECK_EQ_INT(g_log.n, 0);
    engine_tick(e, 600);
    check_event(0, ENGINE_EV_DESIGNATE, 20, kid(1), claim + 1, 1);
    CHECK_EQ_INT(stats(e).pass_timeouts, 1);
    CHECK_EQ_INT(stats(e).takeovers, 1);
    /* The old holder's report is stale; the new pass has its own clock. */
    CHECK_EQ_INT(engine_report(e, kid(1), claim), ENGINE_REPORT_STALE);
    CHECK_EQ_INT(engine_tick(e, 700), 1100);
    engine_free(e);
}

TEST(report_from_another_session_is_foreign_and_leaves_the_claim) {
    engine *e = mk();
    uint64_t claim = ask_claim(e, kid(1), 1, 10, 0);
    CHECK_EQ_INT(engine_report_from(e, kid(1), claim, 2),
                 ENGINE_REPORT_FOREIGN);
    CHECK_EQ_INT(engine_report_from(e, kid(1), claim, 0),
                 ENGINE_REPORT_FOREIGN);
    CHECK_EQ_INT(engine_report_from(e, kid(1), claim + 1, 1),
                 ENGINE_REPORT_STALE);
    CHECK_EQ_INT(engine_report_from(e, kid(1), claim, 1), ENGINE_REPORT_ACCEPT);
    CHECK_EQ_INT(stats(e).foreign_reports, 2);
    uint64_t held = 0;
    CHECK_EQ_INT(engine_claim_of(e, kid(1), &held), 1);
    CHECK_EQ_INT(held, claim);
    engine_free(e);
}

TEST(rejected_report_ends_the_claim_and_aborts_every_waiter) {
    engine *e = mk();
    uint64_t claim = ask_claim(e, kid(1), 1, 10, 0);
    ask_wait(e, kid(1), 2, 20, FAR, 0);
    ask_wait(e, kid(1), 3, 30, FAR, 0);
    CHECK_EQ_INT(engine_reject(e, kid(1), claim + 1, record, &g_log),
                 DETD_ENOTFOUND);
    CHECK_EQ_INT(engine_reject(e, kid(1), claim, record, &g_log), 2);
    CHECK_EQ_INT(g_log.n, 2);
    CHECK_EQ_INT(g_log.v[0].kind, ENGINE_EV_ABORT);
    CHECK_EQ_INT(g_log.v[0].token, 20);
    CHECK_EQ_INT(g_log.v[1].token, 30);
    struct engine_stats st = stats(e);
    CHECK_EQ_INT(st.claims, 0);
    CHECK_EQ_INT(st.waiters, 0);
    CHECK_EQ_INT(st.rejected_reports, 1);
    CHECK_EQ_INT(st.takeovers, 0);
    CHECK_EQ_INT(engine_claim_of(e, kid(1), NULL), 0);
    engine_free(e);
}

/* ---- restored passes (a daemon restart) ---- */

TEST(restored_claim_makes_askers_wait_and_is_adopted) {
    engine *e = mk();
    struct engine_options o = {.pass_timeout_ms = 500};
    CHECK_EQ_INT(engine_set_options(e, &o), 0);
    const uint64_t stand_in = UINT64_C(1) << 63 | 7;
    uint64_t claim = 0;
    /* Ran 200 ms before the restart: 300 ms of its deadline are left. */
    CHECK_EQ_INT(engine_claim_restore(e, kid(1), stand_in, 200, 1000, &claim),
                 0);
    CHECK(claim != 0);
    CHECK_EQ_INT(engine_claim_restore(e, kid(1), stand_in, 0, 1000, &claim),
                 DETD_EEXIST);
    CHECK_EQ_INT(engine_session_attach(e, 2, 1000), 0);
    ask_wait(e, kid(1), 2, 20, FAR, 1000);
    /* The next due time: the pass deadline (1300) before the lease. */
    CHECK_EQ_INT(engine_tick(e, 1000), 1300);
    CHECK_EQ_INT(engine_claim_adopt(e, kid(1), 99, 3), DETD_ENOTFOUND);
    CHECK_EQ_INT(engine_session_attach(e, 3, 1100), 0);
    CHECK_EQ_INT(engine_claim_adopt(e, kid(1), stand_in, 3), 0);
    CHECK_EQ_INT(engine_session_claims(e, 3), 1);
    CHECK_EQ_INT(engine_session_claims(e, stand_in), 0);
    CHECK_EQ_INT(engine_report_from(e, kid(1), claim, 3), ENGINE_REPORT_ACCEPT);
    CHECK_EQ_INT(g_log.n, 0);
    /* Its deadline stays: at 1300 the pass goes to the waiter. */
    engine_tick(e, 1300);
    check_event(0, ENGINE_EV_DESIGNATE, 20, kid(1), g_log.v[0].claim_id, 1);
    engine_free(e);
}

TEST(restored_claim_not_adopted_passes_at_its_lease) {
    engine *e = mk();
    const uint64_t stand_in = UINT64_C(1) << 63 | 7;
    uint64_t claim = 0;
    CHECK_EQ_INT(engine_claim_restore(e, kid(1), stand_in, 0, 0, &claim), 0);
    ask_wait(e, kid(1), 2, 20, FAR, 0);
    CHECK_EQ_INT(engine_tick(e, LEASE - 1), LEASE);
    CHECK_EQ_INT(g_log.n, 0);
    engine_tick(e, LEASE);
    check_event(0, ENGINE_EV_DESIGNATE, 20, kid(1), g_log.v[0].claim_id, 1);
    engine_free(e);
}

int main(int argc, char **argv) {
    return runner_main(argc, argv);
}
