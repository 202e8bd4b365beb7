/*
 * commit: the one path that commits a decision and releases its waiters,
 * with a real store (temporary directory), engine, hot cache and waiters
 * table. Local backend: first writer wins in the store. Etcd backend: the
 * commit goes to a fake cluster first and is answered from the
 * COMMITTED event built with the real encoder; watch decisions release
 * waiters the same way; the drain fails what is in flight.
 */
#define _GNU_SOURCE
#include "app/commit.h"

#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "runner.h"

#include "app_fixture.h"

static const char CFG_A[] = "BLOCK=64,num_warps=4";
static const char CFG_B[] = "BLOCK=128,num_warps=4";
static const char CFG_C[] = "BLOCK=256,num_warps=8";

/* Engine events that reached the engine's own callback: releases must
 * all go to commit.c's (engine_decided_each), so none may arrive here. */
static int engine_events;
static int engine_releases;

static void on_engine(void *ctx, const struct engine_event *ev) {
    (void)ctx;
    engine_events++;
    if (ev->kind == ENGINE_EV_RELEASE)
        engine_releases++;
}

static void open_local(void) {
    engine_events = engine_releases = 0;
    fx_open(0, on_engine, NULL);
}

static void open_etcd(void) {
    engine_events = engine_releases = 0;
    fx_open(1, on_engine, NULL);
}

/* The first asker of id: the engine designates it; returns its claim. */
static uint64_t designate(const char *id, uint64_t token) {
    uint64_t claim = 0;
    int64_t now = clock_mono_ms();
    CHECK_EQ_INT(engine_ask(D.engine, id, 0, token, now + 600000, now, &claim),
                 ENGINE_ASK_DESIGNATED);
    CHECK(claim != 0);
    return claim;
}

/* A later asker of id, held as decide.c holds one, that has waited
 * waited_ms already; returns its call. */
static rpc_call *add_waiter(const char *id, uint64_t token, int64_t waited_ms) {
    uint64_t claim = 0;
    int64_t now = clock_mono_ms();
    CHECK_EQ_INT(engine_ask(D.engine, id, 0, token, now + 600000, now, &claim),
                 ENGINE_ASK_WAIT);
    rpc_call *call = fake_call_new(INT64_MAX);
    struct pending *p =
        pending_new(token, call, fake_decide_request(0), id, now - waited_ms);
    CHECK(p != NULL);
    waiters_add(D.waiters, p);
    return call;
}

/* Take every waiter left (as the drain does); the test frees the calls. */
static void drop_waiters(void) {
    struct pending *p;
    while ((p = waiters_take_any(D.waiters)) != NULL) {
        engine_cancel(D.engine, p->token);
        pending_free(p);
    }
}

static uint64_t committed_total(void) {
    uint64_t n = 0;
    for (int i = 0; i < 8; i++)
        n += D.counters.committed[i];
    return n;
}

/* ---- local backend ---------------------------------------------------- */

TEST(local_first_writer_wins) {
    open_local();
    struct row a, b, other;
    row_make(&a, "k1", CFG_A, DETD_SOURCE_TIMED, 1, "node-a");
    row_make(&b, "k1", CFG_B, DETD_SOURCE_TIMED, 2, "node-b");
    row_make(&other, "k2", CFG_C, DETD_SOURCE_TIMED, 1, "node-a");
    CHECK_STR(a.id, b.id);
    uint64_t claim = designate(a.id, 1);
    rpc_call *w2 = add_waiter(a.id, 2, 300);
    rpc_call *w3 = add_waiter(a.id, 3, 700);
    designate(other.id, 10);
    rpc_call *w11 = add_waiter(other.id, 11, 0);
    CHECK_EQ_INT(waiters_count(D.waiters), 3);

    rpc_call *r1 = fake_call_new(INT64_MAX);
    commit_decision(&D, r1, COMMIT_ANSWER_REPORT, &a.d, NULL, INT64_MAX);
    check_report(r1, CFG_A, 0);
    CHECK_STR(stored_config(a.id), CFG_A);
    /* Every waiter of the key: DECIDED with the winner and its wait. */
    check_decided(w2, CFG_A, 300);
    check_decided(w3, CFG_A, 700);
    CHECK_EQ_INT(w11->answers, 0);
    CHECK_EQ_INT(waiters_count(D.waiters), 1);
    CHECK_EQ_INT(engine_claim_of(D.engine, a.id, NULL), 0);
    uint64_t held = 0;
    CHECK_EQ_INT(engine_claim_of(D.engine, other.id, &held), 1);
    CHECK(claim != 0);
    CHECK_EQ_INT(D.counters.committed[DETD_SOURCE_TIMED], 1);
    CHECK_EQ_INT(committed_total(), 1);

    /* A second writer with another config: the first stands. */
    rpc_call *r2 = fake_call_new(INT64_MAX);
    commit_decision(&D, r2, COMMIT_ANSWER_REPORT, &b.d, NULL, INT64_MAX);
    check_report(r2, CFG_A, 1);
    CHECK_STR(stored_config(a.id), CFG_A);
    CHECK_EQ_INT(D.counters.committed[DETD_SOURCE_TIMED], 1);
    CHECK_EQ_INT(committed_total(), 1);
    /* Nobody was answered twice, the other key's waiter not at all. */
    CHECK_EQ_INT(r1->answers, 1);
    CHECK_EQ_INT(w2->answers, 1);
    CHECK_EQ_INT(w3->answers, 1);
    CHECK_EQ_INT(w11->answers, 0);
    CHECK_EQ_INT(engine_releases, 0);

    /* The other key now: only its own waiter. */
    rpc_call *r3 = fake_call_new(INT64_MAX);
    commit_decision(&D, r3, COMMIT_ANSWER_REPORT, &other.d, NULL, INT64_MAX);
    check_report(r3, CFG_C, 0);
    check_decided(w11, CFG_C, 0);
    CHECK_EQ_INT(w2->answers, 1);
    CHECK_EQ_INT(D.counters.committed[DETD_SOURCE_TIMED], 2);
    CHECK_EQ_INT(waiters_count(D.waiters), 0);

    fake_call_free(r1);
    fake_call_free(r2);
    fake_call_free(r3);
    fake_call_free(w2);
    fake_call_free(w3);
    fake_call_free(w11);
    fx_close();
}

TEST(local_counts_by_source) {
    open_local();
    struct row t, i, again;
    row_make(&t, "kt", CFG_A, DETD_SOURCE_TABLE, 0, "");
    row_make(&i, "ki", CFG_B, DETD_SOURCE_IMPORT, 0, "");
    row_make(&again, "kt", CFG_B, DETD_SOURCE_TIMED, 5, "node-a");
    rpc_call *c1 = fake_call_new(INT64_MAX), *c2 = fake_call_new(INT64_MAX),
             *c3 = fake_call_new(INT64_MAX);
    commit_decision(&D, c1, COMMIT_ANSWER_DECIDE, &t.d,
                    "t.json \"mod:k\" \"kt\"", INT64_MAX);
    commit_decision(&D, c2, COMMIT_ANSWER_DECIDE, &i.d, "import", INT64_MAX);
    commit_decision(&D, c3, COMMIT_ANSWER_REPORT, &again.d, NULL, INT64_MAX);
    CHECK_EQ_INT(D.counters.committed[DETD_SOURCE_TABLE], 1);
    CHECK_EQ_INT(D.counters.committed[DETD_SOURCE_IMPORT], 1);
    CHECK_EQ_INT(D.counters.committed[DETD_SOURCE_TIMED], 0);
    CHECK_EQ_INT(committed_total(), 2);
    check_decided(c1, CFG_A, 0);
    check_decided(c2, CFG_B, 0);
    check_report(c3, CFG_A, 1); /* the table's row stands */
    uint64_t by_source[8];
    CHECK_EQ_INT(store_count_decisions(D.store, NULL, NULL, by_source), 0);
    CHECK_EQ_INT(by_source[DETD_SOURCE_TABLE], 1);
    CHECK_EQ_INT(by_source[DETD_SOURCE_IMPORT], 1);
    CHECK_EQ_INT(by_source[DETD_SOURCE_TIMED], 0);
    fake_call_free(c1);
    fake_call_free(c2);
    fake_call_free(c3);
    fx_close();
}

TEST(local_decide_answer_is_kept_hot) {
    open_local();
    struct row a, b, r;
    row_make(&a, "hot", CFG_A, DETD_SOURCE_TABLE, 0, "");
    row_make(&b, "hot", CFG_B, DETD_SOURCE_TABLE, 0, "");
    row_make(&r, "cold", CFG_C, DETD_SOURCE_TIMED, 1, "node-a");
    uint8_t buf[HOTCACHE_MAX_ENTRY];
    size_t len = 0;
    CHECK_EQ_INT(hotcache_get(D.hot, a.id, buf, sizeof(buf), &len), 0);

    rpc_call *c1 = fake_call_new(INT64_MAX);
    commit_decision(&D, c1, COMMIT_ANSWER_DECIDE, &a.d, "t.json", INT64_MAX);
    check_decided(c1, CFG_A, 0);
    CHECK_EQ_INT(c1->kind, FAKE_REPLY_PACKED);
    CHECK_EQ_INT(hotcache_get(D.hot, a.id, buf, sizeof(buf), &len), 1);
    /* The cached bytes are the answer the caller got. */
    CHECK_EQ_INT(len, c1->len);
    CHECK(memcmp(buf, c1->buf, len) == 0);

    /* A later table commit of another config: answered with the winner. */
    rpc_call *c2 = fake_call_new(INT64_MAX);
    commit_decision(&D, c2, COMMIT_ANSWER_DECIDE, &b.d, "t.json", INT64_MAX);
    check_decided(c2, CFG_A, 0);
    CHECK_EQ_INT(hotcache_get(D.hot, a.id, buf, sizeof(buf), &len), 1);
    Detd__V1__DecideResponse *resp =
        detd__v1__decide_response__unpack(NULL, len, buf);
    CHECK(resp != NULL);
    CHECK_STR(resp->decision->config, CFG_A);
    detd__v1__decide_response__free_unpacked(resp, NULL);

    /* A report's answer is not kept hot. */
    rpc_call *c3 = fake_call_new(INT64_MAX);
    commit_decision(&D, c3, COMMIT_ANSWER_REPORT, &r.d, NULL, INT64_MAX);
    check_report(c3, CFG_C, 0);
    CHECK_EQ_INT(hotcache_get(D.hot, r.id, buf, sizeof(buf), &len), 0);
    CHECK_STR(stored_config(r.id), CFG_C);
    fake_call_free(c1);
    fake_call_free(c2);
    fake_call_free(c3);
    fx_close();
}

TEST(local_store_rejects_row) {
    open_local();
    struct row bad, good;
    row_make(&bad, "k1", CFG_A, DETD_SOURCE_TIMED, 1, "node-a");
    bad.d.source = 99; /* out of range: the store refuses the row */
    row_make(&good, "k1", CFG_B, DETD_SOURCE_TIMED, 1, "node-a");
    designate(bad.id, 1);
    rpc_call *w2 = add_waiter(bad.id, 2, 0);

    rpc_call *r1 = fake_call_new(INT64_MAX);
    commit_decision(&D, r1, COMMIT_ANSWER_REPORT, &bad.d, NULL, INT64_MAX);
    check_fail(r1, RPC_INTERNAL, "store: ");
    CHECK(strstr(r1->msg, "source 99") != NULL);
    CHECK_EQ_INT(w2->answers, 0);
    CHECK_EQ_INT(waiters_count(D.waiters), 1);
    CHECK_EQ_INT(engine_claim_of(D.engine, bad.id, NULL), 1);
    CHECK_STR(stored_config(bad.id), "");
    CHECK_EQ_INT(committed_total(), 0);
    uint8_t buf[HOTCACHE_MAX_ENTRY];
    size_t len;
    rpc_call *r2 = fake_call_new(INT64_MAX);
    bad.d.source = DETD_SOURCE_TABLE;
    bad.d.n_candidates = -1;
    commit_decision(&D, r2, COMMIT_ANSWER_DECIDE, &bad.d, "t.json", INT64_MAX);
    check_fail(r2, RPC_INTERNAL, "n_candidates");
    CHECK_EQ_INT(hotcache_get(D.hot, bad.id, buf, sizeof(buf), &len), 0);
    CHECK_EQ_INT(w2->answers, 0);

    /* The waiter is still held: a good commit releases it. */
    rpc_call *r3 = fake_call_new(INT64_MAX);
    commit_decision(&D, r3, COMMIT_ANSWER_REPORT, &good.d, NULL, INT64_MAX);
    check_report(r3, CFG_B, 0);
    check_decided(w2, CFG_B, 0);
    CHECK_EQ_INT(committed_total(), 1);
    fake_call_free(r1);
    fake_call_free(r2);
    fake_call_free(r3);
    fake_call_free(w2);
    fx_close();
}

TEST(local_store_failure) {
    open_local();
    struct row a;
    row_make(&a, "k1", CFG_A, DETD_SOURCE_TIMED, 1, "node-a");
    designate(a.id, 1);
    rpc_call *w2 = add_waiter(a.id, 2, 0);
    /* Damage the database under the store: its table goes away. */
    sqlite3 *db = NULL;
    CHECK_EQ_INT(sqlite3_open(tmp_path("detd.db"), &db), SQLITE_OK);
    CHECK_EQ_INT(sqlite3_exec(db, "DROP TABLE decisions", NULL, NULL, NULL),
                 SQLITE_OK);
    sqlite3_close(db);

    rpc_call *r1 = fake_call_new(INT64_MAX);
    commit_decision(&D, r1, COMMIT_ANSWER_REPORT, &a.d, NULL, INT64_MAX);
    check_fail(r1, RPC_INTERNAL, "store: ");
    CHECK(strlen(r1->msg) > strlen("store: "));
    CHECK_EQ_INT(w2->answers, 0);
    CHECK_EQ_INT(waiters_count(D.waiters), 1);
    CHECK_EQ_INT(engine_claim_of(D.engine, a.id, NULL), 1);
    CHECK_EQ_INT(committed_total(), 0);
    CHECK_EQ_INT(engine_releases, 0);
    drop_waiters();
    fake_call_free(r1);
    fake_call_free(w2);
    fx_close();
}

/* ---- etcd backend ----------------------------------------------------- */

/* Feed a COMMITTED event for cookie: value (NULL: none) of len bytes. */
static void committed(const char *id, uint64_t cookie, int err, int won,
                      const char *value, size_t len) {
    struct cluster_event ev = {
        .kind = CLUSTER_EV_COMMITTED,
        .id = id,
        .err = err,
        .won = won,
        .value = value,
        .value_len = len,
        .cookie = cookie,
        .node = "",
    };
    commit_cluster_event(&D, &ev);
}

static void decision_event(const char *id, const char *value, size_t len,
                           int64_t revision) {
    struct cluster_event ev = {
        .kind = CLUSTER_EV_DECISION,
        .id = id,
        .value = value,
        .value_len = len,
        .revision = revision,
        .node = "",
    };
    commit_cluster_event(&D, &ev);
}

TEST(etcd_commit_waits_for_etcd_then_wins) {
    open_etcd();
    struct row a;
    row_make(&a, "k1", CFG_A, DETD_SOURCE_TIMED, 1, "node-a");
    uint64_t claim = designate(a.id, 1);
    a.d.claim_id = claim;
    rpc_call *w2 = add_waiter(a.id, 2, 400);
    rpc_call *w3 = add_waiter(a.id, 3, 0);

    rpc_call *r = fake_call_new(INT64_MAX);
    commit_decision(&D, r, COMMIT_ANSWER_REPORT, &a.d, NULL, 987654);
    /* etcd first: nothing stored, nobody answered yet. */
    CHECK_EQ_INT(FC.n_commits, 1);
    CHECK_STR(FC.commits[0].id, a.id);
    CHECK_STR(FC.commits[0].config, CFG_A);
    CHECK_EQ_INT(FC.commits[0].claim_id, claim);
    CHECK_EQ_INT(FC.commits[0].deadline_ms, 987654);
    CHECK(FC.commits[0].cookie != 0);
    CHECK_EQ_INT(r->answers, 0);
    CHECK_EQ_INT(w2->answers, 0);
    CHECK_EQ_INT(w3->answers, 0);
    CHECK_STR(stored_config(a.id), "");
    CHECK_EQ_INT(committed_total(), 0);
    CHECK_EQ_INT(FC.n_claims, 0);

    /* An answer for a cookie nobody waits for answers nobody. */
    size_t len = 0;
    char *v = row_value(&a.d, "node-a/4242/n0nce/1", &len);
    committed(a.id, FC.commits[0].cookie + 100, DETD_EUNAVAILABLE, 0, NULL, 0);
    CHECK_EQ_INT(r->answers, 0);

    committed(a.id, FC.commits[0].cookie, 0, 1, v, len);
    check_report(r, CFG_A, 0);
    check_decided(w2, CFG_A, 400);
    check_decided(w3, CFG_A, 0);
    CHECK_STR(stored_config(a.id), CFG_A);
    CHECK_EQ_INT(D.counters.committed[DETD_SOURCE_TIMED], 1);
    CHECK_EQ_INT(engine_claim_of(D.engine, a.id, NULL), 0);
    CHECK_EQ_INT(waiters_count(D.waiters), 0);

    /* The same answer again: the commit is no longer in flight. */
    committed(a.id, FC.commits[0].cookie, 0, 1, v, len);
    CHECK_EQ_INT(r->answers, 1);
    CHECK_EQ_INT(w2->answers, 1);
    CHECK_EQ_INT(D.counters.committed[DETD_SOURCE_TIMED], 1);
    /* The committer deletes the claim key (cluster_commit): not coord. */
    CHECK_EQ_INT(FC.n_releases, 0);
    CHECK_EQ_INT(engine_releases, 0);
    free(v);
    fake_call_free(r);
    fake_call_free(w2);
    fake_call_free(w3);
    commit_drain(&D);
    fx_close();
}

TEST(etcd_commit_lost_race) {
    open_etcd();
    struct row ours, theirs;
    row_make(&ours, "k1", CFG_A, DETD_SOURCE_TIMED, 1, "node-a");
    row_make(&theirs, "k1", CFG_B, DETD_SOURCE_TIMED, 9, "node-b");
    designate(ours.id, 1);
    rpc_call *w2 = add_waiter(ours.id, 2, 0);
    rpc_call *r = fake_call_new(INT64_MAX);
    commit_decision(&D, r, COMMIT_ANSWER_REPORT, &ours.d, NULL, INT64_MAX);
    CHECK_EQ_INT(FC.n_commits, 1);
    size_t len = 0;
    char *v = row_value(&theirs.d, "node-b/77/other/9", &len);
    committed(ours.id, FC.commits[0].cookie, 0, 0, v, len);
    /* The other node's decision is stored and answered. */
    check_report(r, CFG_B, 1);
    check_decided(w2, CFG_B, 0);
    CHECK_STR(stored_config(ours.id), CFG_B);
    struct decision got;
    CHECK_EQ_INT(store_get_decision(D.store, ours.id, &got), 0);
    CHECK_STR(got.by_host, "node-b");
    CHECK_EQ_INT(got.claim_id, 9);
    decision_clear(&got);
    CHECK_EQ_INT(D.counters.committed[DETD_SOURCE_TIMED], 1);
    free(v);
    fake_call_free(r);
    fake_call_free(w2);
    fx_close();
}

TEST(etcd_decide_commit_lost_race) {
    open_etcd();
    struct row ours, theirs;
    row_make(&ours, "k1", CFG_A, DETD_SOURCE_TABLE, 0, "");
    row_make(&theirs, "k1", CFG_C, DETD_SOURCE_TIMED, 4, "node-b");
    rpc_call *c = fake_call_new(INT64_MAX);
    commit_decision(&D, c, COMMIT_ANSWER_DECIDE, &ours.d, "t.json", INT64_MAX);
    CHECK_EQ_INT(c->answers, 0);
    size_t len = 0;
    char *v = row_value(&theirs.d, "node-b/77/other/4", &len);
    committed(ours.id, FC.commits[0].cookie, 0, 0, v, len);
    check_decided(c, CFG_C, 0);
    CHECK_STR(stored_config(ours.id), CFG_C);
    /* A Decide's answer is kept hot for the next askers, as locally. */
    uint8_t buf[HOTCACHE_MAX_ENTRY];
    size_t hlen = 0;
    CHECK_EQ_INT(hotcache_get(D.hot, ours.id, buf, sizeof(buf), &hlen), 1);
    CHECK_EQ_INT(D.counters.committed[DETD_SOURCE_TIMED], 1);
    CHECK_EQ_INT(D.counters.committed[DETD_SOURCE_TABLE], 0);
    free(v);
    fake_call_free(c);
    fx_close();
}

TEST(etcd_commit_error_is_unavailable) {
    open_etcd();
    struct row a, b;
    row_make(&a, "k1", CFG_A, DETD_SOURCE_TIMED, 1, "node-a");
    row_make(&b, "k1", CFG_B, DETD_SOURCE_TIMED, 3, "node-b");
    designate(a.id, 1);
    rpc_call *w2 = add_waiter(a.id, 2, 0);
    rpc_call *r = fake_call_new(INT64_MAX), *c = fake_call_new(INT64_MAX);
    commit_decision(&D, r, COMMIT_ANSWER_REPORT, &a.d, NULL, INT64_MAX);
    commit_decision(&D, c, COMMIT_ANSWER_DECIDE, &a.d, "t.json", INT64_MAX);
    CHECK_EQ_INT(FC.n_commits, 2);
    CHECK(FC.commits[0].cookie != FC.commits[1].cookie);
    committed(a.id, FC.commits[0].cookie, DETD_EUNAVAILABLE, 0, NULL, 0);
    check_fail(r, RPC_UNAVAILABLE, "etcd");
    CHECK(strstr(r->msg, "report again") != NULL);
    CHECK_EQ_INT(c->answers, 0);
    committed(a.id, FC.commits[1].cookie, DETD_ETIMEDOUT, 0, NULL, 0);
    check_fail(c, RPC_UNAVAILABLE, "etcd");
    CHECK(strstr(c->msg, "ask again") != NULL);
    CHECK_STR(stored_config(a.id), "");
    CHECK_EQ_INT(w2->answers, 0);
    CHECK_EQ_INT(waiters_count(D.waiters), 1);
    CHECK_EQ_INT(committed_total(), 0);

    /* The waiter stayed: the decision seen later on the watch frees it. */
    size_t len = 0;
    char *v = row_value(&b.d, "node-b/1/x/3", &len);
    decision_event(b.id, v, len, 42);
    check_decided(w2, CFG_B, 0);
    CHECK_STR(stored_config(a.id), CFG_B);
    CHECK_EQ_INT(r->answers, 1);
    CHECK_EQ_INT(c->answers, 1);
    free(v);
    fake_call_free(r);
    fake_call_free(c);
    fake_call_free(w2);
    fx_close();
}

TEST(etcd_commit_malformed_value) {
    open_etcd();
    struct row a;
    row_make(&a, "k1", CFG_A, DETD_SOURCE_TIMED, 1, "node-a");
    designate(a.id, 1);
    rpc_call *w2 = add_waiter(a.id, 2, 0);
    rpc_call *r1 = fake_call_new(INT64_MAX), *r2 = fake_call_new(INT64_MAX);
    commit_decision(&D, r1, COMMIT_ANSWER_REPORT, &a.d, NULL, INT64_MAX);
    commit_decision(&D, r2, COMMIT_ANSWER_REPORT, &a.d, NULL, INT64_MAX);
    const char junk[] = "{\"v\":1,\"id\":";
    committed(a.id, FC.commits[0].cookie, 0, 1, junk, sizeof(junk) - 1);
    check_fail(r1, RPC_INTERNAL, "malformed");
    /* Well-formed JSON whose id is not what its key fields hash to. */
    struct row liar;
    row_make(&liar, "k1", CFG_B, DETD_SOURCE_TIMED, 1, "node-b");
    liar.d.key = "another key";
    size_t len = 0;
    char *v = row_value(&liar.d, "node-b/1/x/1", &len);
    committed(a.id, FC.commits[1].cookie, 0, 0, v, len);
    check_fail(r2, RPC_INTERNAL, "malformed");
    CHECK_STR(stored_config(a.id), "");
    CHECK_EQ_INT(w2->answers, 0);
    CHECK_EQ_INT(committed_total(), 0);
    /* The same on the watch: ignored, nobody released. */
    decision_event(a.id, v, len, 50);
    CHECK_EQ_INT(w2->answers, 0);
    CHECK_STR(stored_config(a.id), "");
    free(v);
    drop_waiters();
    fake_call_free(r1);
    fake_call_free(r2);
    fake_call_free(w2);
    fx_close();
}

TEST(etcd_cluster_refuses_commit) {
    open_etcd();
    struct row a;
    row_make(&a, "k1", CFG_A, DETD_SOURCE_TIMED, 1, "node-a");
    FC.commit_rc = DETD_ENOMEM;
    rpc_call *r = fake_call_new(INT64_MAX);
    commit_decision(&D, r, COMMIT_ANSWER_REPORT, &a.d, NULL, INT64_MAX);
    CHECK_EQ_INT(FC.n_commits, 1);
    check_fail(r, RPC_INTERNAL, "commit: ");
    /* Nothing stays in flight for it. */
    size_t len = 0;
    char *v = row_value(&a.d, "node-a/1/x/1", &len);
    committed(a.id, FC.commits[0].cookie, 0, 1, v, len);
    CHECK_EQ_INT(r->answers, 1);
    free(v);
    fake_call_free(r);
    fx_close();
}

TEST(etcd_watch_decision_releases_waiters) {
    open_etcd();
    struct row theirs, other;
    row_make(&theirs, "k1", CFG_B, DETD_SOURCE_TIMED, 5, "node-b");
    row_make(&other, "k2", CFG_A, DETD_SOURCE_TIMED, 1, "node-a");
    /* This node's designated asker is held while the claim is taken. */
    uint64_t claim = designate(theirs.id, 1);
    rpc_call *held = fake_call_new(INT64_MAX);
    struct pending *p = pending_new(1, held, fake_decide_request(0), theirs.id,
                                    clock_mono_ms() - 250);
    CHECK(p != NULL);
    p->claim_id = claim;
    p->deadline_ms = clock_mono_ms() + 600000;
    coord_hold(D.coord, p);
    CHECK_EQ_INT(FC.n_claims, 1);
    CHECK_EQ_INT(held->answers, 0);
    rpc_call *w2 = add_waiter(theirs.id, 2, 0);
    rpc_call *w3 = add_waiter(theirs.id, 3, 0);
    designate(other.id, 10);
    rpc_call *w11 = add_waiter(other.id, 11, 0);
    CHECK_EQ_INT(waiters_count(D.waiters), 4);

    size_t len = 0;
    char *v = row_value(&theirs.d, "node-b/1/x/5", &len);
    decision_event(theirs.id, v, len, 42);
    CHECK_STR(stored_config(theirs.id), CFG_B);
    check_decided(w2, CFG_B, 0);
    check_decided(w3, CFG_B, 0);
    check_decided(held, CFG_B, 250);
    CHECK_EQ_INT(w11->answers, 0);
    CHECK_EQ_INT(waiters_count(D.waiters), 1);
    CHECK_EQ_INT(D.counters.committed[DETD_SOURCE_TIMED], 1);
    CHECK_EQ_INT(engine_claim_of(D.engine, theirs.id, NULL), 0);
    /* Seen again (a resync): stored once, nobody answered twice. */
    decision_event(theirs.id, v, len, 0);
    CHECK_EQ_INT(D.counters.committed[DETD_SOURCE_TIMED], 1);
    CHECK_EQ_INT(w2->answers, 1);
    CHECK_EQ_INT(held->answers, 1);
    CHECK_EQ_INT(FC.n_commits, 0);
    free(v);
    drop_waiters();
    fake_call_free(held);
    fake_call_free(w2);
    fake_call_free(w3);
    fake_call_free(w11);
    fx_close();
}

TEST(etcd_commits_answer_their_own_calls) {
    open_etcd();
    struct row a, b;
    row_make(&a, "k1", CFG_A, DETD_SOURCE_TIMED, 1, "node-a");
    row_make(&b, "k2", CFG_B, DETD_SOURCE_TABLE, 0, "");
    rpc_call *ra = fake_call_new(INT64_MAX), *cb = fake_call_new(INT64_MAX);
    commit_decision(&D, ra, COMMIT_ANSWER_REPORT, &a.d, NULL, INT64_MAX);
    commit_decision(&D, cb, COMMIT_ANSWER_DECIDE, &b.d, "t.json", INT64_MAX);
    CHECK_EQ_INT(FC.n_commits, 2);
    size_t la = 0, lb = 0;
    char *va = row_value(&a.d, "node-a/1/x/1", &la);
    char *vb = row_value(&b.d, "node-a/1/x/0", &lb);
    /* Answered in the other order than they were sent. */
    committed(b.id, FC.commits[1].cookie, 0, 1, vb, lb);
    CHECK_EQ_INT(ra->answers, 0);
    check_decided(cb, CFG_B, 0);
    committed(a.id, FC.commits[0].cookie, 0, 1, va, la);
    check_report(ra, CFG_A, 0);
    CHECK_EQ_INT(cb->answers, 1);
    CHECK_EQ_INT(D.counters.committed[DETD_SOURCE_TIMED], 1);
    CHECK_EQ_INT(D.counters.committed[DETD_SOURCE_TABLE], 1);
    free(va);
    free(vb);
    fake_call_free(ra);
    fake_call_free(cb);
    fx_close();
}

TEST(etcd_drain_fails_commits_in_flight) {
    open_etcd();
    struct row a, b;
    row_make(&a, "k1", CFG_A, DETD_SOURCE_TIMED, 1, "node-a");
    row_make(&b, "k2", CFG_B, DETD_SOURCE_TABLE, 0, "");
    rpc_call *r = fake_call_new(INT64_MAX), *c = fake_call_new(INT64_MAX);
    commit_decision(&D, r, COMMIT_ANSWER_REPORT, &a.d, NULL, INT64_MAX);
    commit_decision(&D, c, COMMIT_ANSWER_DECIDE, &b.d, "t.json", INT64_MAX);
    commit_drain(&D);
    check_fail(r, RPC_UNAVAILABLE, "shutting down");
    check_fail(c, RPC_UNAVAILABLE, "shutting down");
    commit_drain(&D);
    CHECK_EQ_INT(r->answers, 1);
    CHECK_EQ_INT(c->answers, 1);
    /* etcd answering afterwards answers nobody again. */
    size_t len = 0;
    char *v = row_value(&a.d, "node-a/1/x/1", &len);
    committed(a.id, FC.commits[0].cookie, 0, 1, v, len);
    CHECK_EQ_INT(r->answers, 1);
    free(v);
    /* The local backend has nothing in flight: a no-op. */
    fake_call_free(r);
    fake_call_free(c);
    fx_close();
    open_local();
    commit_drain(&D);
    fx_close();
}

/* ---- batches (commit_batch(): a lock's entries through etcd) ---------- */

/* What a batch's callback got. */
struct batch_seen {
    int calls;
    size_t n;
    int err[4], won[4];
    char stands[4][128];
};

static void on_batch(struct daemon *d, void *ctx, struct commit_result *res,
                     size_t n) {
    (void)d;
    struct batch_seen *s = ctx;
    s->calls++;
    s->n = n;
    for (size_t i = 0; i < n && i < 4; i++) {
        s->err[i] = res[i].err;
        s->won[i] = res[i].won;
        snprintf(s->stands[i], sizeof(s->stands[i]), "%s",
                 res[i].stands.config ? res[i].stands.config : "");
    }
}

TEST(etcd_batch_each_row_wins_or_finds_what_stands) {
    open_etcd();
    struct row r[4], theirs_same, theirs_other;
    const char *keys[] = {"b1", "b2", "b3", "b4"};
    struct decision rows[4];
    for (int i = 0; i < 4; i++) {
        row_make(&r[i], keys[i], CFG_A, DETD_SOURCE_IMPORT, 77, "node-x");
        rows[i] = r[i].d;
    }
    row_make(&theirs_same, "b2", CFG_A, DETD_SOURCE_TIMED, 5, "node-b");
    row_make(&theirs_other, "b3", CFG_B, DETD_SOURCE_TIMED, 6, "node-b");
    /* A waiter of b1 on this node is released by the batch's commit. */
    designate(r[0].id, 1);
    rpc_call *w = add_waiter(r[0].id, 2, 0);
    struct batch_seen seen = {0};
    CHECK_EQ_INT(commit_batch(&D, rows, 4, 987654, on_batch, &seen), 0);
    /* One commit per row, one writer id for the batch (not the rows'
     * claim ids), consecutive cookies; nothing answered yet. */
    CHECK_EQ_INT(FC.n_commits, 4);
    for (int i = 0; i < 4; i++) {
        CHECK_STR(FC.commits[i].id, r[i].id);
        CHECK_EQ_INT(FC.commits[i].claim_id, FC.commits[0].claim_id);
        CHECK_EQ_INT(FC.commits[i].deadline_ms, 987654);
        CHECK_EQ_INT(FC.commits[i].cookie, FC.commits[0].cookie + i);
    }
    CHECK(FC.commits[0].claim_id != 77);
    CHECK_EQ_INT(seen.calls, 0);

    size_t l0 = 0, l1 = 0, l2 = 0;
    char *v0 = row_value(&r[0].d, "node-x/1/n/2", &l0);
    char *v1 = row_value(&theirs_same.d, "node-b/9/o/5", &l1);
    char *v2 = row_value(&theirs_other.d, "node-b/9/o/6", &l2);
    committed(r[0].id, FC.commits[0].cookie, 0, 1, v0, l0);
    committed(r[1].id, FC.commits[1].cookie, 0, 0, v1, l1);
    committed(r[2].id, FC.commits[2].cookie, 0, 0, v2, l2);
    CHECK_EQ_INT(seen.calls, 0);
    check_decided(w, CFG_A, 0);
    /* Every answer is stored as any commit's: the other writer's rows. */
    CHECK_STR(stored_config(r[0].id), CFG_A);
    CHECK_STR(stored_config(r[2].id), CFG_B);
    CHECK_EQ_INT(D.counters.committed[DETD_SOURCE_IMPORT], 1);
    CHECK_EQ_INT(D.counters.committed[DETD_SOURCE_TIMED], 2);
    /* The last row: etcd silent past the deadline. */
    CHECK_EQ_INT(commit_tick(&D, 987000), 987654);
    CHECK_EQ_INT(seen.calls, 0);
    commit_tick(&D, 987654);
    CHECK_EQ_INT(seen.calls, 1);
    CHECK_EQ_INT(seen.n, 4);
    CHECK_EQ_INT(seen.err[0], 0);
    CHECK_EQ_INT(seen.won[0], 1);
    CHECK_EQ_INT(seen.err[1], 0);
    CHECK_EQ_INT(seen.won[1], 0);
    CHECK_STR(seen.stands[1], CFG_A);
    CHECK_EQ_INT(seen.won[2], 0);
    CHECK_STR(seen.stands[2], CFG_B);
    CHECK_EQ_INT(seen.err[3], DETD_ETIMEDOUT);
    /* etcd's late answer is still stored, and ends nothing twice. */
    committed(r[3].id, FC.commits[3].cookie, 0, 1, v0, l0);
    commit_tick(&D, INT64_MAX - 1);
    commit_drain(&D);
    CHECK_EQ_INT(seen.calls, 1);
    free(v0);
    free(v1);
    free(v2);
    fake_call_free(w);
    fx_close();
}

TEST(etcd_batch_refused_or_drained) {
    open_etcd();
    struct row a, b;
    row_make(&a, "c1", CFG_A, DETD_SOURCE_IMPORT, 0, "");
    row_make(&b, "c2", CFG_B, DETD_SOURCE_IMPORT, 0, "");
    struct decision rows[2] = {a.d, b.d};
    /* Every row refused at once (a value over etcd's cap): the callback
     * runs before commit_batch() returns. */
    FC.commit_rc = DETD_ELIMIT;
    struct batch_seen seen = {0};
    CHECK_EQ_INT(commit_batch(&D, rows, 2, INT64_MAX, on_batch, &seen), 0);
    CHECK_EQ_INT(seen.calls, 1);
    CHECK_EQ_INT(seen.err[0], DETD_ELIMIT);
    CHECK_EQ_INT(seen.err[1], DETD_ELIMIT);
    /* Nothing to commit: answered at once. */
    struct batch_seen none = {0};
    CHECK_EQ_INT(commit_batch(&D, rows, 0, INT64_MAX, on_batch, &none), 0);
    CHECK_EQ_INT(none.calls, 1);
    CHECK_EQ_INT(none.n, 0);
    /* The drain ends a batch in flight. */
    FC.commit_rc = 0;
    struct batch_seen drained = {0};
    CHECK_EQ_INT(commit_batch(&D, rows, 2, INT64_MAX, on_batch, &drained), 0);
    CHECK_EQ_INT(drained.calls, 0);
    commit_drain(&D);
    CHECK_EQ_INT(drained.calls, 1);
    CHECK_EQ_INT(drained.err[0], DETD_ECANCELLED);
    CHECK_EQ_INT(drained.err[1], DETD_ECANCELLED);
    CHECK_STR(stored_config(a.id), "");
    fx_close();
}

int main(int argc, char **argv) {
    return runner_main(argc, argv);
}
