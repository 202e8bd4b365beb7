/*
 * lock_etcd: Admin.ImportLock through etcd (ops/lock.c, ops/lock_etcd.c)
 * with a real store, coord and commit table over a fake cluster. The
 * test plays etcd: it holds the keys etcd holds, answers the reads and
 * the commits the import sends (READ and COMMITTED events built with the
 * real encoder) and delivers the owner's writes as the watch would
 * (DECISION events). The wait for the owner runs on the daemon's libuv
 * loop, driven here until the state a test waits for.
 */
#define _GNU_SOURCE
#include "ops/lock.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "runner.h"

#include "app_fixture.h"

static const char CFG_A[] = "BLOCK=64,num_warps=4";
static const char CFG_B[] = "BLOCK=128,num_warps=4";

/* ---- etcd, as the test plays it ---------------------------------------- */

#define ETCD_MAX 1100

/* The keys etcd holds: each one's id and value (heap). */
static struct {
    char id[KEYID_HEX_LEN + 1];
    char *value;
    size_t len;
} ETCD[ETCD_MAX];
static size_t n_etcd;

/* The lock's entries (the rows the import makes have the same ids). */
static struct row ENT[ETCD_MAX];
static size_t n_ent;

/* The reads and commits of FC answered so far. */
static int reads_answered, commits_answered;

static void fake_etcd_reset(void) {
    for (size_t i = 0; i < n_etcd; i++)
        free(ETCD[i].value);
    n_etcd = n_ent = 0;
    reads_answered = commits_answered = 0;
}

static int fake_etcd_find(const char *id) {
    for (size_t i = 0; i < n_etcd; i++)
        if (strcmp(ETCD[i].id, id) == 0)
            return (int)i;
    return -1;
}

/* etcd now holds r, written by writer. */
static void fake_etcd_put(const struct decision *r, const char *writer) {
    CHECK(fake_etcd_find(r->id) < 0);
    CHECK(n_etcd < ETCD_MAX);
    snprintf(ETCD[n_etcd].id, sizeof(ETCD[n_etcd].id), "%s", r->id);
    ETCD[n_etcd].value = row_value(r, writer, &ETCD[n_etcd].len);
    n_etcd++;
}

/* The watch brings etcd's key id to this node. */
static void watch_delivers(const char *id, int64_t revision) {
    int k = fake_etcd_find(id);
    CHECK(k >= 0);
    struct cluster_event ev = {
        .kind = CLUSTER_EV_DECISION,
        .id = ETCD[k].id,
        .value = ETCD[k].value,
        .value_len = ETCD[k].len,
        .revision = revision,
        .node = "",
    };
    commit_cluster_event(&D, &ev);
}

/* Answer every read sent and not answered yet: etcd's value or none; or
 * err for each (etcd did not answer). */
static void answer_reads(int err) {
    int end = FC.n_read_ids;
    for (; reads_answered < end; reads_answered++) {
        const char *id = FC.read_ids[reads_answered];
        int k = fake_etcd_find(id);
        struct cluster_event ev = {
            .kind = CLUSTER_EV_READ,
            .id = id,
            .err = err,
            .value = err == 0 && k >= 0 ? ETCD[k].value : NULL,
            .value_len = err == 0 && k >= 0 ? ETCD[k].len : 0,
            .cookie = FC.read_cookies[reads_answered],
            .node = "",
        };
        commit_cluster_event(&D, &ev);
    }
}

/* Answer every commit sent and not answered yet, first writer wins: a
 * key etcd lacks becomes the entry's (won), one it holds stands. */
static void answer_commits(void) {
    int end = FC.n_commits;
    for (; commits_answered < end; commits_answered++) {
        const struct fake_commit *c = &FC.commits[commits_answered];
        int k = fake_etcd_find(c->id);
        int won = k < 0;
        if (won) {
            const struct row *e = NULL;
            for (size_t i = 0; i < n_ent && e == NULL; i++)
                if (strcmp(ENT[i].id, c->id) == 0)
                    e = &ENT[i];
            CHECK(e != NULL);
            fake_etcd_put(&e->d, "this-node/1/n/1");
            k = (int)n_etcd - 1;
        }
        struct cluster_event ev = {
            .kind = CLUSTER_EV_COMMITTED,
            .id = c->id,
            .won = won,
            .value = ETCD[k].value,
            .value_len = ETCD[k].len,
            .cookie = c->cookie,
            .node = "",
        };
        commit_cluster_event(&D, &ev);
    }
}

/* ---- the daemon and the call ------------------------------------------- */

static void on_engine(void *ctx, const struct engine_event *ev) {
    (void)ctx;
    (void)ev;
}

static void open_daemon(int64_t defer_ms) {
    fake_etcd_reset();
    fx_open(1, on_engine, NULL);
    CHECK_EQ_INT(uv_loop_init(&D.loop), 0);
    FC.defer_ms = defer_ms;
}

/* Every handle closed (the wait's timer too): the loop closes. */
static void close_daemon(void) {
    CHECK(D.lock_waits == NULL);
    uv_run(&D.loop, UV_RUN_NOWAIT);
    CHECK_EQ_INT(uv_loop_close(&D.loop), 0);
    fx_close();
    fake_etcd_reset();
}

/* Entry i of the lock: key "k<i>" choosing config. */
static void entry(size_t i, const char *config) {
    char key[32];
    snprintf(key, sizeof(key), "k%zu", i);
    CHECK(i == n_ent && n_ent < ETCD_MAX);
    row_make(&ENT[n_ent++], key, config, DETD_SOURCE_IMPORT, 0, "");
}

/* Admin.ImportLock of ENT[0..n_ent) as detctl sends it (the request
 * unpacked as the rpc adapter hands it over); returns the call. */
static rpc_call *import_lock(void) {
    Detd__V1__Decision *ms = calloc(n_ent + 1, sizeof(*ms));
    Detd__V1__Decision **ps = calloc(n_ent + 1, sizeof(*ps));
    CHECK(ms != NULL && ps != NULL);
    for (size_t i = 0; i < n_ent; i++) {
        detd__v1__decision__init(&ms[i]);
        ms[i].arch = "sm90";
        ms[i].kernel = ENT[i].kernel;
        ms[i].key = ENT[i].key;
        ms[i].config = ENT[i].config;
        ms[i].candidates_fp = ENT[i].fp;
        ms[i].n_candidates = 3;
        ps[i] = &ms[i];
    }
    Detd__V1__ImportLockRequest req = DETD__V1__IMPORT_LOCK_REQUEST__INIT;
    req.file = "job.lock";
    req.decisions = ps;
    req.n_decisions = n_ent;
    size_t len = detd__v1__import_lock_request__get_packed_size(&req);
    uint8_t *buf = malloc(len + 1);
    CHECK(buf != NULL);
    detd__v1__import_lock_request__pack(&req, buf);
    Detd__V1__ImportLockRequest *msg =
        detd__v1__import_lock_request__unpack(NULL, len, buf);
    CHECK(msg != NULL);
    free(buf);
    free(ps);
    free(ms);
    rpc_call *call = fake_call_new(clock_mono_ms() + 20000);
    struct rpc_event ev = {
        .kind = RPC_EV_REQUEST,
        .method = RPC_IMPORT_LOCK,
        .call = call,
        .msg = &msg->base,
    };
    lock_import(&D, &ev);
    return call;
}

/* What the call was answered with: an ImportLockResponse. */
struct answer {
    uint64_t added, unchanged, conflicts;
    char conflict[128]; /* the first conflict's config (etcd's) */
};

static void check_answer(const rpc_call *call, struct answer *ret) {
    CHECK_EQ_INT(call->answers, 1);
    if (call->kind == FAKE_FAIL)
        fprintf(stderr, "failed: %s\n", call->msg);
    CHECK_EQ_INT(call->kind, FAKE_REPLY);
    CHECK(call->desc == &detd__v1__import_lock_response__descriptor);
    Detd__V1__ImportLockResponse *r =
        detd__v1__import_lock_response__unpack(NULL, call->len, call->buf);
    CHECK(r != NULL);
    memset(ret, 0, sizeof(*ret));
    ret->added = r->added;
    ret->unchanged = r->unchanged;
    ret->conflicts = r->conflicts_total;
    CHECK_EQ_INT(r->n_conflicts, r->conflicts_total);
    if (r->n_conflicts > 0)
        snprintf(ret->conflict, sizeof(ret->conflict), "%s",
                 r->conflicts[0]->config);
    detd__v1__import_lock_response__free_unpacked(r, NULL);
}

/* Run the loop until the import sent its n-th read, within limit_ms. */
static void run_until_reads(int n, int64_t limit_ms) {
    int64_t until = clock_mono_ms() + limit_ms;
    while (FC.n_reads < n) {
        CHECK(clock_mono_ms() < until);
        uv_run(&D.loop, UV_RUN_ONCE);
    }
}

/* How many commits named id. */
static int commits_of(const char *id) {
    int n = 0;
    for (int i = 0; i < FC.n_commits; i++)
        n += strcmp(FC.commits[i].id, id) == 0;
    return n;
}

/* ---- 1. the lock's owner ----------------------------------------------- */

TEST(owner_settles_from_etcd_and_writes_only_what_etcd_lacks) {
    open_daemon(0);
    entry(0, CFG_A); /* etcd: the same config */
    entry(1, CFG_A); /* etcd: another config */
    entry(2, CFG_A); /* etcd lacks the others */
    entry(3, CFG_B);
    struct row theirs;
    row_make(&theirs, "k1", CFG_B, DETD_SOURCE_TIMED, 6, "node-b");
    fake_etcd_put(&ENT[0].d, "node-b/9/o/5");
    fake_etcd_put(&theirs.d, "node-b/9/o/6");

    rpc_call *call = import_lock();
    /* Every entry is read first, nothing written yet. */
    CHECK_EQ_INT(FC.n_reads, 1);
    CHECK_EQ_INT(FC.n_read_ids, 4);
    for (int i = 0; i < 4; i++)
        CHECK_STR(FC.read_ids[i], ENT[i].id);
    CHECK_EQ_INT(FC.n_commits, 0);
    CHECK(FC.defer_of[0] != '\0');
    answer_reads(0);
    /* The owner writes at once, and exactly what etcd lacked. */
    CHECK_EQ_INT(FC.n_commit_many, 1);
    CHECK_EQ_INT(FC.commit_many_sizes[0], 2);
    CHECK_EQ_INT(FC.n_commits, 2);
    CHECK_STR(FC.commits[0].id, ENT[2].id);
    CHECK_STR(FC.commits[1].id, ENT[3].id);
    CHECK_EQ_INT(call->answers, 0);
    answer_commits();

    struct answer a;
    check_answer(call, &a);
    CHECK_EQ_INT(a.added, 2);
    CHECK_EQ_INT(a.unchanged, 1);
    CHECK_EQ_INT(a.conflicts, 1);
    CHECK_STR(a.conflict, CFG_B);
    /* The store serves etcd's copy: the conflict kept, not the lock's. */
    CHECK_STR(stored_config(ENT[0].id), CFG_A);
    CHECK_STR(stored_config(ENT[1].id), CFG_B);
    CHECK_STR(stored_config(ENT[2].id), CFG_A);
    CHECK_STR(stored_config(ENT[3].id), CFG_B);
    fake_call_free(call);
    close_daemon();
}

TEST(owner_writes_in_chunks_each_after_the_last_landed) {
    open_daemon(0);
    size_t n = LOCK_ETCD_CHUNK + 6;
    for (size_t i = 0; i < n; i++)
        entry(i, CFG_A);
    fake_etcd_put(&ENT[5].d, "node-b/9/o/5"); /* one etcd holds already */
    rpc_call *call = import_lock();
    CHECK_EQ_INT(FC.n_read_ids, (int)n);
    answer_reads(0);
    CHECK_EQ_INT(FC.n_commit_many, 1);
    CHECK_EQ_INT(FC.commit_many_sizes[0], LOCK_ETCD_CHUNK);
    /* The next chunk goes when every row of this one landed. */
    answer_commits();
    CHECK_EQ_INT(FC.n_commit_many, 2);
    CHECK_EQ_INT(FC.commit_many_sizes[1], n - 1 - LOCK_ETCD_CHUNK);
    CHECK_EQ_INT(call->answers, 0);
    answer_commits();
    CHECK_EQ_INT(FC.n_commits, (int)n - 1);
    for (size_t i = 0; i < n; i++)
        CHECK_EQ_INT(commits_of(ENT[i].id), i == 5 ? 0 : 1);
    struct answer a;
    check_answer(call, &a);
    CHECK_EQ_INT(a.added, n - 1);
    CHECK_EQ_INT(a.unchanged, 1);
    CHECK_EQ_INT(a.conflicts, 0);
    fake_call_free(call);
    close_daemon();
}

/* ---- 2. a node that is not the owner ----------------------------------- */

/* A non-owner's deferral in the tests that must see its wait end before
 * it: a wait that ran it out is the failure, whatever the machine's load. */
#define LONG_DEFER_MS 5000

TEST(non_owner_writes_nothing_when_the_owners_writes_arrive) {
    open_daemon(LONG_DEFER_MS);
    entry(0, CFG_A);
    entry(1, CFG_A);
    entry(2, CFG_B);
    fake_etcd_put(&ENT[0].d, "node-b/9/o/5");
    int64_t t0 = clock_mono_ms();
    rpc_call *call = import_lock();
    answer_reads(0);
    /* Etcd lacked two: this node waits for the owner, writing nothing. */
    CHECK_EQ_INT(FC.n_commits, 0);
    CHECK(D.lock_waits != NULL);
    uv_run(&D.loop, UV_RUN_NOWAIT);
    CHECK_EQ_INT(FC.n_reads, 1);
    CHECK_EQ_INT(call->answers, 0);
    /* The owner writes them; the watch brings them here, one at a time. */
    fake_etcd_put(&ENT[1].d, "owner/3/n/1");
    fake_etcd_put(&ENT[2].d, "owner/3/n/1");
    watch_delivers(ENT[1].id, 10);
    /* Each delivery wakes the wait on the next loop turn (no polling):
     * one row is still missing. */
    uv_run(&D.loop, UV_RUN_NOWAIT);
    CHECK_EQ_INT(FC.n_reads, 1);
    CHECK(D.lock_waits != NULL && D.on_etcd_applied != NULL);
    watch_delivers(ENT[2].id, 11);
    /* Both arrived: the wait ends on that turn, long before the
     * deferral; the two are read again, and found. */
    uv_run(&D.loop, UV_RUN_NOWAIT);
    CHECK_EQ_INT(FC.n_reads, 2);
    CHECK(clock_mono_ms() - t0 < LONG_DEFER_MS);
    CHECK(D.on_etcd_applied == NULL);
    CHECK(D.lock_waits == NULL);
    CHECK_EQ_INT(FC.n_read_ids, 3 + 2);
    CHECK_STR(FC.read_ids[3], ENT[1].id);
    CHECK_STR(FC.read_ids[4], ENT[2].id);
    answer_reads(0);
    CHECK_EQ_INT(FC.n_commits, 0);
    struct answer a;
    check_answer(call, &a);
    CHECK_EQ_INT(a.added, 0);
    CHECK_EQ_INT(a.unchanged, 3);
    CHECK_EQ_INT(a.conflicts, 0);
    fake_call_free(call);
    close_daemon();
}

TEST(non_owner_writes_what_is_still_missing_after_its_deferral) {
    open_daemon(40);
    entry(0, CFG_A);
    entry(1, CFG_A);
    entry(2, CFG_B);
    int64_t t0 = clock_mono_ms();
    rpc_call *call = import_lock();
    answer_reads(0);
    CHECK_EQ_INT(FC.n_commits, 0);
    /* The owner wrote one in the meantime, but the watch never brought
     * it; the others nobody wrote. */
    fake_etcd_put(&ENT[1].d, "owner/3/n/1");
    run_until_reads(2, 60000); /* a bound for a hung loop only */
    CHECK(clock_mono_ms() - t0 >= 40);
    CHECK_EQ_INT(FC.n_commits, 0);
    CHECK_EQ_INT(FC.n_read_ids, 6);
    answer_reads(0);
    /* Etcd's copy settles the owner's row; the rest are written here. */
    CHECK_EQ_INT(FC.n_commit_many, 1);
    CHECK_EQ_INT(FC.n_commits, 2);
    CHECK_EQ_INT(commits_of(ENT[0].id), 1);
    CHECK_EQ_INT(commits_of(ENT[1].id), 0);
    CHECK_EQ_INT(commits_of(ENT[2].id), 1);
    answer_commits();
    struct answer a;
    check_answer(call, &a);
    CHECK_EQ_INT(a.added, 2);
    CHECK_EQ_INT(a.unchanged, 1);
    CHECK_STR(stored_config(ENT[1].id), CFG_A);
    fake_call_free(call);
    close_daemon();
}

/* ---- 3. etcd unreadable ------------------------------------------------ */

TEST(etcd_unreadable_settles_from_the_store_or_not_at_all) {
    open_daemon(0);
    entry(0, CFG_A); /* the store holds it (the watch brought it once) */
    entry(1, CFG_B); /* nobody holds it here */
    fake_etcd_put(&ENT[0].d, "node-b/9/o/5");
    watch_delivers(ENT[0].id, 3);
    rpc_call *call = import_lock();
    CHECK_EQ_INT(FC.n_read_ids, 2);
    /* etcd does not answer by the deadline. */
    commit_tick(&D, INT64_MAX - 1);
    CHECK_EQ_INT(FC.n_commits, 0);
    check_fail(call, RPC_UNAVAILABLE, "etcd did not take 1 of the 2 entries");
    check_fail(call, RPC_UNAVAILABLE,
               "etcd unreachable: no answer by the deadline");
    check_fail(call, RPC_UNAVAILABLE, "mod:k k1 [sm90]");
    check_fail(call, RPC_UNAVAILABLE, "landed: 0 added, 1 unchanged");
    CHECK(strstr(call->msg, "mod:k k0 ") == NULL);
    CHECK_STR(stored_config(ENT[1].id), "");
    CHECK_EQ_INT(D.counters.lock_not_committed, 1);
    fake_call_free(call);

    /* etcd's answer is an error for each key: the same. */
    reads_answered = FC.n_read_ids;
    call = import_lock();
    answer_reads(DETD_EUNAVAILABLE);
    CHECK_EQ_INT(FC.n_commits, 0);
    check_fail(call, RPC_UNAVAILABLE, "etcd did not take 1 of the 2 entries");
    check_fail(call, RPC_UNAVAILABLE, "mod:k k1 [sm90]");
    check_fail(call, RPC_UNAVAILABLE, "landed: 0 added, 1 unchanged");
    CHECK_STR(stored_config(ENT[1].id), "");
    fake_call_free(call);
    close_daemon();
}

/* ---- 4. drain ---------------------------------------------------------- */

TEST(drain_during_the_wait_gives_up_cancelled) {
    open_daemon(60000);
    entry(0, CFG_A);
    entry(1, CFG_B);
    fake_etcd_put(&ENT[0].d, "node-b/9/o/5");
    rpc_call *call = import_lock();
    answer_reads(0);
    CHECK(D.lock_waits != NULL);
    uv_run(&D.loop, UV_RUN_NOWAIT);
    CHECK_EQ_INT(call->answers, 0);
    /* The daemon drains as loop.c does. */
    D.draining = 1;
    commit_drain(&D);
    lock_drain(&D);
    CHECK(D.lock_waits == NULL);
    check_fail(call, RPC_UNAVAILABLE, "the daemon is shutting down");
    check_fail(call, RPC_UNAVAILABLE, "mod:k k1 [sm90]");
    check_fail(call, RPC_UNAVAILABLE, "landed: 0 added, 1 unchanged");
    CHECK_EQ_INT(FC.n_commits, 0);
    CHECK_EQ_INT(FC.n_reads, 1);
    /* The wait's timer is closed: the loop has nothing left. */
    CHECK_EQ_INT(uv_run(&D.loop, UV_RUN_NOWAIT), 0);
    fake_call_free(call);
    close_daemon();
}

int main(int argc, char **argv) {
    return runner_main(argc, argv);
}
