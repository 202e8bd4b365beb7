/*
 * coord: the etcd backend's cluster-wide claims against a fake cluster
 * table (fake_cluster.h), with a real store, engine, hot cache and
 * waiters table. The engine's events go to the daemon's own callback
 * (decide_engine_event), so a local claim passed on by the engine is
 * held and claimed as in the daemon. Cluster answers are events fed in
 * by the test; time is driven through coord_tick()'s now.
 */
#define _GNU_SOURCE
#include "app/coord.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "app/decide.h"
#include "runner.h"

#include "app_fixture.h"

#define RECLAIM_MS 1000 /* coord.c: re-check a claim held elsewhere */

static const char CFG_A[] = "BLOCK=64,num_warps=4";

static struct row R1, R2; /* two keys */

static void open_coord(void) {
    fx_open(1, decide_engine_event, &D);
    row_make(&R1, "k1", CFG_A, DETD_SOURCE_TIMED, 1, "node-b");
    row_make(&R2, "k2", CFG_A, DETD_SOURCE_TIMED, 1, "node-b");
    int64_t now = clock_mono_ms();
    for (uint64_t s = 1; s <= 3; s++)
        CHECK_EQ_INT(engine_session_attach(D.engine, s, now), 0);
}

/* Take every pending left (as the daemon's drain does). */
static void drain_waiters(void) {
    coord_drain(D.coord);
    struct pending *p;
    while ((p = waiters_take_any(D.waiters)) != NULL) {
        engine_cancel(D.engine, p->token);
        pending_free(p);
    }
}

/*
 * A Decide for id from session with token, as decide.c handles one:
 * designated by the engine -> coord_hold() with deadline_ms; else held
 * as a waiter. call_deadline: the call's gRPC deadline. *ret_designated
 * (may be NULL) says which.
 */
static rpc_call *ask(const char *id, uint64_t session, uint64_t token,
                     int64_t deadline_ms, int64_t call_deadline,
                     int *ret_designated) {
    rpc_call *call = fake_call_new(call_deadline);
    int64_t now = clock_mono_ms();
    uint64_t claim = 0;
    int rc = engine_ask(D.engine, id, session, token, deadline_ms, now, &claim);
    CHECK(rc == ENGINE_ASK_DESIGNATED || rc == ENGINE_ASK_WAIT);
    struct pending *p =
        pending_new(token, call, fake_decide_request(0), id, now);
    CHECK(p != NULL);
    if (rc == ENGINE_ASK_DESIGNATED) {
        p->claim_id = claim;
        p->deadline_ms = deadline_ms;
        coord_hold(D.coord, p);
    } else {
        waiters_add(D.waiters, p);
    }
    if (ret_designated != NULL)
        *ret_designated = rc == ENGINE_ASK_DESIGNATED;
    return call;
}

/* The call's client gave up (RPC_EV_CLOSED), as decide_closed() does it. */
static void client_closed(rpc_call *call) {
    struct pending *p = waiters_take_call(D.waiters, call);
    CHECK(p != NULL);
    CHECK(p->held);
    coord_held_cancelled(D.coord, p);
}

static void event(cluster_event_kind kind, const char *id, int err,
                  const char *value) {
    struct cluster_event ev = {
        .kind = kind,
        .id = id,
        .err = err,
        .value = value,
        .value_len = value != NULL ? strlen(value) : 0,
        .node = "",
    };
    coord_event(D.coord, &ev);
}

static void revision_event(int64_t revision, const char *value) {
    struct cluster_event ev = {
        .kind = CLUSTER_EV_REVISION,
        .id = "",
        .revision = revision,
        .value = value,
        .value_len = value != NULL ? strlen(value) : 0,
        .node = "",
    };
    coord_event(D.coord, &ev);
}

/* call was answered once, DESIGNATED with claim (and takeover). */
static void check_designated(const rpc_call *call, uint64_t claim,
                             int takeover) {
    CHECK_EQ_INT(call->answers, 1);
    Detd__V1__DecideResponse *r = fake_decide_response(call);
    CHECK(r != NULL);
    CHECK_EQ_INT(r->outcome, DETD__V1__OUTCOME__OUTCOME_DESIGNATED);
    CHECK_EQ_INT(r->claim_id, claim);
    CHECK_EQ_INT(r->takeover, takeover);
    CHECK_EQ_INT(r->lease_ms, CFG.lease_ms);
    CHECK(r->decision != NULL);
    CHECK_STR(r->decision->id, R1.id);
    detd__v1__decide_response__free_unpacked(r, NULL);
}

static void check_timeout(const rpc_call *call) {
    CHECK_EQ_INT(call->answers, 1);
    Detd__V1__DecideResponse *r = fake_decide_response(call);
    CHECK(r != NULL);
    CHECK_EQ_INT(r->outcome, DETD__V1__OUTCOME__OUTCOME_TIMEOUT);
    detd__v1__decide_response__free_unpacked(r, NULL);
}

static const char *meta_revision(void) {
    static char buf[32];
    char *v = NULL;
    int rc = store_get_meta(D.store, "etcd_revision", &v);
    if (rc == DETD_ENOTFOUND)
        return "";
    CHECK_EQ_INT(rc, 0);
    snprintf(buf, sizeof(buf), "%s", v);
    free(v);
    return buf;
}

/* ---- claims ----------------------------------------------------------- */

TEST(claim_won_designates_the_first_asker) {
    open_coord();
    int64_t dl = clock_mono_ms() + 60000;
    int des = 0;
    rpc_call *a = ask(R1.id, 1, 1, dl, INT64_MAX, &des);
    CHECK_EQ_INT(des, 1);
    /* Held, not answered, while the cluster claim is taken. */
    CHECK_EQ_INT(a->answers, 0);
    CHECK_EQ_INT(a->watched, 1);
    CHECK_EQ_INT(waiters_count(D.waiters), 1);
    CHECK_EQ_INT(FC.n_claims, 1);
    CHECK_STR(FC.claims[0], R1.id);
    CHECK_EQ_INT(FC.claim_deadlines[0], dl);
    CHECK_EQ_INT(FC.claim_rechecks[0], 0); /* a first claim writes at once */
    rpc_call *b = ask(R1.id, 2, 2, dl, INT64_MAX, &des);
    CHECK_EQ_INT(des, 0);
    CHECK_EQ_INT(FC.n_claims, 1);
    CHECK_EQ_INT(waiters_count(D.waiters), 2);

    event(CLUSTER_EV_CLAIMED, R1.id, 0, NULL);
    uint64_t claim = 0;
    CHECK_EQ_INT(engine_claim_of(D.engine, R1.id, &claim), 1);
    check_designated(a, claim, 0);
    CHECK_EQ_INT(b->answers, 0);
    CHECK_EQ_INT(waiters_count(D.waiters), 1);
    CHECK_EQ_INT(D.counters.designations, 1);
    CHECK_EQ_INT(D.counters.takeovers, 0);
    CHECK_EQ_INT(FC.n_releases, 0);
    /* A repeated answer changes nothing. */
    event(CLUSTER_EV_CLAIMED, R1.id, 0, NULL);
    CHECK_EQ_INT(a->answers, 1);
    CHECK_EQ_INT(b->answers, 0);
    CHECK_EQ_INT(FC.n_releases, 0);
    CHECK_EQ_INT(D.counters.designations, 1);
    drain_waiters();
    fake_call_free(a);
    fake_call_free(b);
    fx_close();
}

TEST(claim_lost_holds_and_retries) {
    open_coord();
    event(CLUSTER_EV_STATE, "", 0, "etcd");
    int64_t dl = clock_mono_ms() + 600000;
    rpc_call *a = ask(R1.id, 1, 1, dl, INT64_MAX, NULL);
    CHECK_EQ_INT(FC.n_claims, 1);
    int64_t before = clock_mono_ms();
    event(CLUSTER_EV_CLAIM_LOST, R1.id, 0, "{\"writer\":\"node-b/1/x\"}");
    int64_t after = clock_mono_ms();
    CHECK_EQ_INT(a->answers, 0);
    CHECK_EQ_INT(waiters_count(D.waiters), 1);
    CHECK_EQ_INT(coord_etcd_trouble(D.coord, R1.id), 0);

    /* Before the reclaim interval: nothing; it says when to come back. */
    int64_t next = coord_tick(D.coord, before);
    CHECK_EQ_INT(FC.n_claims, 1);
    CHECK(next >= before + RECLAIM_MS && next <= after + RECLAIM_MS);
    next = coord_tick(D.coord, next - 1);
    CHECK_EQ_INT(FC.n_claims, 1);
    CHECK(next >= before + RECLAIM_MS && next <= after + RECLAIM_MS);
    /* At it: claimed again, with the asker's deadline, as a re-check (a
     * read of the claim key first: no etcd write while it is held). */
    int64_t t = after + RECLAIM_MS;
    coord_tick(D.coord, t);
    CHECK_EQ_INT(FC.n_claims, 2);
    CHECK_STR(FC.claims[1], R1.id);
    CHECK_EQ_INT(FC.claim_deadlines[1], dl);
    CHECK_EQ_INT(FC.claim_rechecks[1], 1);
    /* In flight: the next ticks do not claim twice. */
    coord_tick(D.coord, t + 5 * RECLAIM_MS);
    CHECK_EQ_INT(FC.n_claims, 2);
    CHECK_EQ_INT(a->answers, 0);
    /* Lost again, then won: the asker is designated at last. */
    event(CLUSTER_EV_CLAIM_LOST, R1.id, 0, NULL);
    coord_tick(D.coord, clock_mono_ms() + RECLAIM_MS);
    CHECK_EQ_INT(FC.n_claims, 3);
    event(CLUSTER_EV_CLAIMED, R1.id, 0, NULL);
    check_designated(a, 1, 0);
    CHECK_EQ_INT(waiters_count(D.waiters), 0);
    drain_waiters();
    fake_call_free(a);
    fx_close();
}

/* ---- deadlines -------------------------------------------------------- */

TEST(deadline_held_elsewhere_is_timeout) {
    open_coord();
    event(CLUSTER_EV_STATE, "", 0, "etcd");
    int64_t now = clock_mono_ms();
    int64_t dl_a = now + 5000;
    int64_t call_b = now + 30000;
    rpc_call *a = ask(R1.id, 1, 1, dl_a, INT64_MAX, NULL);
    rpc_call *b = ask(R1.id, 2, 2, now + 600000, call_b, NULL);
    int64_t after_b = clock_mono_ms(); /* b arrived in [now, after_b] */
    event(CLUSTER_EV_CLAIM_LOST, R1.id, 0, NULL);
    int64_t next = coord_tick(D.coord, now);
    CHECK(next <= clock_mono_ms() + RECLAIM_MS); /* the retry comes first */
    CHECK_EQ_INT(FC.n_claims, 1);
    CHECK_EQ_INT(a->answers, 0);

    coord_tick(D.coord, dl_a);
    /* Another node is timing it and etcd answers: an ordinary TIMEOUT. */
    check_timeout(a);
    CHECK_EQ_INT(D.counters.wait_timeouts, 1);
    /* The local claim passed to b, which is held and claimed in turn,
     * with its own deadline (its call's, less the answer margin). */
    uint64_t claim = 0;
    CHECK_EQ_INT(engine_claim_of(D.engine, R1.id, &claim), 1);
    CHECK_EQ_INT(claim, 2);
    CHECK_EQ_INT(b->answers, 0);
    CHECK_EQ_INT(waiters_count(D.waiters), 1);
    CHECK_EQ_INT(FC.n_claims, 2);
    /* Its call's deadline less the answer margin (decide_answer_by(), as
     * of its arrival, between now and after_b; later in that range is a
     * smaller margin, so a later answer-by). */
    CHECK(FC.claim_deadlines[1] >= decide_answer_by(call_b, 0, now));
    CHECK(FC.claim_deadlines[1] <= decide_answer_by(call_b, 0, after_b));
    CHECK(FC.claim_deadlines[1] < call_b - 50);
    event(CLUSTER_EV_CLAIMED, R1.id, 0, NULL);
    check_designated(b, 2, 0);
    CHECK_EQ_INT(a->answers, 1);
    drain_waiters();
    fake_call_free(a);
    fake_call_free(b);
    fx_close();
}

TEST(deadline_etcd_unreachable_is_unavailable) {
    open_coord();
    /* Never heard from etcd: trouble, "no answer". */
    CHECK_EQ_INT(coord_etcd_trouble(D.coord, R1.id), 1);
    CHECK_STR(coord_etcd_error(D.coord), "no answer");
    event(CLUSTER_EV_STATE, "", DETD_EUNAVAILABLE, "http://127.0.0.1:2379");
    CHECK_EQ_INT(coord_etcd_trouble(D.coord, R1.id), 1);
    CHECK_STR(coord_etcd_error(D.coord),
              "http://127.0.0.1:2379: daemon unavailable");
    int64_t dl = clock_mono_ms() + 3000;
    rpc_call *a = ask(R1.id, 1, 1, dl, INT64_MAX, NULL);
    CHECK_EQ_INT(FC.n_claims, 1);
    CHECK_EQ_INT(coord_tick(D.coord, dl - 1), dl);
    CHECK_EQ_INT(a->answers, 0);
    coord_tick(D.coord, dl);
    check_fail(a, RPC_UNAVAILABLE, "etcd unreachable");
    CHECK(strstr(a->msg, "http://127.0.0.1:2379: daemon unavailable") != NULL);
    CHECK_EQ_INT(D.counters.wait_timeouts, 1);
    /* Nothing was decided: no local claim is left (nobody waits). */
    CHECK_EQ_INT(engine_claim_of(D.engine, R1.id, NULL), 0);
    CHECK_EQ_INT(waiters_count(D.waiters), 0);
    CHECK_EQ_INT(FC.n_commits, 0);
    /* etcd back: no trouble, the error is gone. */
    event(CLUSTER_EV_STATE, "", 0, "etcd");
    CHECK_EQ_INT(coord_etcd_trouble(D.coord, R1.id), 0);
    CHECK_STR(coord_etcd_error(D.coord), "no answer");
    drain_waiters();
    fake_call_free(a);
    fx_close();
}

TEST(claim_failed_retries_then_unavailable) {
    open_coord();
    event(CLUSTER_EV_STATE, "", 0, "etcd");
    int64_t dl = clock_mono_ms() + 10000;
    rpc_call *a = ask(R1.id, 1, 1, dl, INT64_MAX, NULL);
    event(CLUSTER_EV_CLAIM_FAILED, R1.id, DETD_ETIMEDOUT, NULL);
    /* Trouble for that key only, while the connection is up. */
    CHECK_EQ_INT(coord_etcd_trouble(D.coord, R1.id), 1);
    CHECK_EQ_INT(coord_etcd_trouble(D.coord, R2.id), 0);
    CHECK_EQ_INT(a->answers, 0);
    coord_tick(D.coord, clock_mono_ms() + RECLAIM_MS);
    CHECK_EQ_INT(FC.n_claims, 2);
    event(CLUSTER_EV_CLAIM_FAILED, R1.id, DETD_ETIMEDOUT, NULL);
    coord_tick(D.coord, dl);
    check_fail(a, RPC_UNAVAILABLE, "etcd unreachable (deadline exceeded)");
    CHECK_EQ_INT(waiters_count(D.waiters), 0);
    drain_waiters();
    fake_call_free(a);
    fx_close();
}

/* ---- decisions, cancellations, takeovers ------------------------------ */

TEST(decided_answers_the_held_asker) {
    open_coord();
    rpc_call *a = ask(R1.id, 1, 1, clock_mono_ms() + 600000, INT64_MAX, NULL);
    /* An event that carried no usable decision: still held. */
    coord_decided(D.coord, R1.id, NULL, 0);
    CHECK_EQ_INT(a->answers, 0);
    CHECK_EQ_INT(waiters_count(D.waiters), 1);
    coord_decided(D.coord, R2.id, &R2.d, 0); /* nobody here: no-op */
    CHECK_EQ_INT(a->answers, 0);
    coord_decided(D.coord, R1.id, &R1.d, 0);
    check_decided(a, CFG_A, 0);
    CHECK_EQ_INT(waiters_count(D.waiters), 0);
    /* This node never held the claim key: nothing to release. */
    CHECK_EQ_INT(FC.n_releases, 0);
    coord_decided(D.coord, R1.id, &R1.d, 0);
    CHECK_EQ_INT(a->answers, 1);
    drain_waiters();
    fake_call_free(a);
    fx_close();
}

TEST(decided_after_our_claim_leaves_the_key_to_the_committer) {
    open_coord();
    rpc_call *a = ask(R1.id, 1, 1, clock_mono_ms() + 600000, INT64_MAX, NULL);
    event(CLUSTER_EV_CLAIMED, R1.id, 0, NULL);
    check_designated(a, 1, 0);
    /* The rank reported; its commit (cluster_commit) deletes the claim
     * key, so the decision settles the key without a release here. */
    CHECK_EQ_INT(engine_decided(D.engine, R1.id), 0);
    coord_decided(D.coord, R1.id, &R1.d, 1);
    CHECK_EQ_INT(FC.n_releases, 0);
    coord_sweep(D.coord);
    CHECK_EQ_INT(FC.n_releases, 0);
    CHECK_EQ_INT(a->answers, 1);
    drain_waiters();
    fake_call_free(a);
    fx_close();
}

TEST(decided_elsewhere_while_ours_releases_our_claim_key) {
    open_coord();
    rpc_call *a = ask(R1.id, 1, 1, clock_mono_ms() + 600000, INT64_MAX, NULL);
    event(CLUSTER_EV_CLAIMED, R1.id, 0, NULL);
    check_designated(a, 1, 0);
    /* Before our rank reports, another node's decision arrives through the
     * watch: nobody else deletes our claim key, so coord does, once. */
    CHECK_EQ_INT(engine_decided(D.engine, R1.id), 0);
    coord_decided(D.coord, R1.id, &R1.d, 0);
    CHECK_EQ_INT(FC.n_releases, 1);
    CHECK_STR(FC.releases[0], R1.id);
    coord_sweep(D.coord);
    (void)coord_tick(D.coord, clock_mono_ms());
    CHECK_EQ_INT(FC.n_releases, 1);
    CHECK_EQ_INT(a->answers, 1);
    drain_waiters();
    fake_call_free(a);
    fx_close();
}

TEST(ended_claim_releases_our_claim_key) {
    open_coord();
    rpc_call *a = ask(R1.id, 1, 1, clock_mono_ms() + 600000, INT64_MAX, NULL);
    event(CLUSTER_EV_CLAIMED, R1.id, 0, NULL);
    check_designated(a, 1, 0);
    coord_sweep(D.coord); /* the local claim is alive: kept */
    CHECK_EQ_INT(FC.n_releases, 0);
    /* The timing rank's session ends with nobody waiting: the claim is
     * dropped, and with it this node's claim key. */
    engine_session_end(D.engine, 1, clock_mono_ms());
    CHECK_EQ_INT(engine_claim_of(D.engine, R1.id, NULL), 0);
    coord_sweep(D.coord);
    CHECK_EQ_INT(FC.n_releases, 1);
    CHECK_STR(FC.releases[0], R1.id);
    coord_sweep(D.coord);
    coord_tick(D.coord, clock_mono_ms());
    CHECK_EQ_INT(FC.n_releases, 1);
    drain_waiters();
    fake_call_free(a);
    fx_close();
}

TEST(held_cancelled_passes_the_claim_on) {
    open_coord();
    int64_t now = clock_mono_ms();
    rpc_call *a = ask(R1.id, 1, 1, now + 600000, INT64_MAX, NULL);
    rpc_call *b = ask(R1.id, 2, 2, now + 600000, INT64_MAX, NULL);
    rpc_call *c = ask(R1.id, 3, 3, now + 600000, INT64_MAX, NULL);
    CHECK_EQ_INT(FC.n_claims, 1);
    client_closed(a);
    check_fail(a, RPC_CANCELLED, "cancelled");
    /* b holds the local claim now (a new claim id) and is held while the
     * cluster claim already in flight completes. */
    uint64_t claim = 0;
    CHECK_EQ_INT(engine_claim_of(D.engine, R1.id, &claim), 1);
    CHECK_EQ_INT(claim, 2);
    CHECK_EQ_INT(b->answers, 0);
    CHECK_EQ_INT(c->answers, 0);
    CHECK_EQ_INT(waiters_count(D.waiters), 2);
    CHECK_EQ_INT(FC.n_claims, 1);
    event(CLUSTER_EV_CLAIMED, R1.id, 0, NULL);
    check_designated(b, 2, 0);
    CHECK_EQ_INT(c->answers, 0);
    CHECK_EQ_INT(a->answers, 1);
    CHECK_EQ_INT(D.counters.designations, 1);
    drain_waiters();
    fake_call_free(a);
    fake_call_free(b);
    fake_call_free(c);
    fx_close();
}

TEST(held_cancelled_after_lost_claim_next_is_claimed_in_turn) {
    open_coord();
    int64_t now = clock_mono_ms();
    rpc_call *a = ask(R1.id, 1, 1, now + 600000, INT64_MAX, NULL);
    int64_t call_b = now + 40000;
    rpc_call *b = ask(R1.id, 2, 2, now + 600000, call_b, NULL);
    int64_t after_b = clock_mono_ms(); /* b arrived in [now, after_b] */
    event(CLUSTER_EV_CLAIM_LOST, R1.id, 0, NULL);
    client_closed(a);
    check_fail(a, RPC_CANCELLED, "cancelled");
    CHECK_EQ_INT(b->answers, 0);
    CHECK_EQ_INT(waiters_count(D.waiters), 1);
    CHECK_EQ_INT(FC.n_claims, 1);
    coord_tick(D.coord, clock_mono_ms() + RECLAIM_MS);
    CHECK_EQ_INT(FC.n_claims, 2);
    /* Its call's deadline less the answer margin (decide_answer_by(), as
     * of its arrival, between now and after_b; later in that range is a
     * smaller margin, so a later answer-by). */
    CHECK(FC.claim_deadlines[1] >= decide_answer_by(call_b, 0, now));
    CHECK(FC.claim_deadlines[1] <= decide_answer_by(call_b, 0, after_b));
    CHECK(FC.claim_deadlines[1] < call_b - 50);
    event(CLUSTER_EV_CLAIMED, R1.id, 0, NULL);
    check_designated(b, 2, 0);
    drain_waiters();
    fake_call_free(a);
    fake_call_free(b);
    fx_close();
}

TEST(claim_won_for_nobody_is_released) {
    open_coord();
    rpc_call *a = ask(R1.id, 1, 1, clock_mono_ms() + 600000, INT64_MAX, NULL);
    client_closed(a);
    check_fail(a, RPC_CANCELLED, "cancelled");
    CHECK_EQ_INT(engine_claim_of(D.engine, R1.id, NULL), 0);
    CHECK_EQ_INT(FC.n_releases, 0);
    /* The claim in flight is won after its asker left: given back. */
    event(CLUSTER_EV_CLAIMED, R1.id, 0, NULL);
    CHECK_EQ_INT(FC.n_releases, 1);
    CHECK_STR(FC.releases[0], R1.id);
    CHECK_EQ_INT(a->answers, 1);
    /* A claim won for a key this node does not know: given back too. */
    event(CLUSTER_EV_CLAIMED, R2.id, 0, NULL);
    CHECK_EQ_INT(FC.n_releases, 2);
    CHECK_STR(FC.releases[1], R2.id);
    CHECK_EQ_INT(D.counters.designations, 0);
    drain_waiters();
    fake_call_free(a);
    fx_close();
}

TEST(takeover_while_ours_is_answered_at_once) {
    open_coord();
    int64_t now = clock_mono_ms();
    rpc_call *a = ask(R1.id, 1, 1, now + 600000, INT64_MAX, NULL);
    rpc_call *b = ask(R1.id, 2, 2, now + 600000, INT64_MAX, NULL);
    event(CLUSTER_EV_CLAIMED, R1.id, 0, NULL);
    check_designated(a, 1, 0);
    /* a's process dies: this node still holds the cluster claim. */
    engine_session_end(D.engine, 1, clock_mono_ms());
    check_designated(b, 2, 1);
    CHECK_EQ_INT(FC.n_claims, 1);
    CHECK_EQ_INT(D.counters.designations, 2);
    CHECK_EQ_INT(D.counters.takeovers, 1);
    CHECK_EQ_INT(waiters_count(D.waiters), 0);
    drain_waiters();
    fake_call_free(a);
    fake_call_free(b);
    fx_close();
}

TEST(lease_lost_forgets_our_claims) {
    open_coord();
    int64_t now = clock_mono_ms();
    rpc_call *a = ask(R1.id, 1, 1, now + 600000, INT64_MAX, NULL);
    rpc_call *b = ask(R1.id, 2, 2, now + 600000, INT64_MAX, NULL);
    event(CLUSTER_EV_CLAIMED, R1.id, 0, NULL);
    check_designated(a, 1, 0);
    event(CLUSTER_EV_LEASE_LOST, "", DETD_EUNAVAILABLE, NULL);
    /* The claim key went with the lease: b must claim again. */
    engine_session_end(D.engine, 1, clock_mono_ms());
    CHECK_EQ_INT(b->answers, 0);
    CHECK_EQ_INT(waiters_count(D.waiters), 1);
    CHECK_EQ_INT(FC.n_claims, 2);
    CHECK_STR(FC.claims[1], R1.id);
    /* Nor is a claim key that is no longer ours released. */
    CHECK_EQ_INT(FC.n_releases, 0);
    event(CLUSTER_EV_CLAIMED, R1.id, 0, NULL);
    check_designated(b, 2, 1);
    drain_waiters();
    fake_call_free(a);
    fake_call_free(b);
    fx_close();
}

/* ---- revision --------------------------------------------------------- */

TEST(revision_follows_events_and_is_persisted) {
    open_coord();
    CHECK_EQ_INT(coord_revision(D.coord), 0);
    CHECK_STR(meta_revision(), "");
    int64_t now = clock_mono_ms();
    revision_event(10, NULL);
    CHECK_EQ_INT(coord_revision(D.coord), 10);
    CHECK_STR(meta_revision(), ""); /* lazily */
    coord_tick(D.coord, now);
    CHECK_STR(meta_revision(), "10");
    revision_event(20, NULL);
    revision_event(15, NULL); /* older: a replay, never goes back */
    CHECK_EQ_INT(coord_revision(D.coord), 20);
    /* Not more often than every 500 ms. */
    CHECK_EQ_INT(coord_tick(D.coord, now + 100), now + 500);
    CHECK_STR(meta_revision(), "10");
    CHECK_EQ_INT(coord_tick(D.coord, now + 500), INT64_MAX);
    CHECK_STR(meta_revision(), "20");
    /* The end of a full resync is stored at once. */
    revision_event(35, "resync");
    CHECK_STR(meta_revision(), "35");
    /* The drain stores the last one. */
    revision_event(40, NULL);
    CHECK_STR(meta_revision(), "35");
    coord_drain(D.coord);
    CHECK_STR(meta_revision(), "40");
    /* A new coordinator resumes from it. */
    coord *c2 = NULL;
    CHECK_EQ_INT(coord_new(&D, &c2), 0);
    CHECK_EQ_INT(coord_revision(c2), 40);
    coord_free(c2);
    fx_close();
}

int main(int argc, char **argv) {
    return runner_main(argc, argv);
}
