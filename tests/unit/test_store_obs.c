/*
 * Unit tests for store_obs.c: what an observation carries since schema 6
 * (job, failed, audit, why), the rules of a repeated put (failed and the
 * audit are sticky), listing in pages, and the migration from schema 5.
 */
#define _GNU_SOURCE
#include <stdint.h>

#include <sqlite3.h>

#include "detd/client.h"
#include "detd/error.h"
#include "runner.h"
#include "data/store.h"
#include "store_fixture.h"

static void sql_side(const char *path, const char *sql) {
    sqlite3 *db = NULL;
    CHECK_EQ_INT(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL),
                 SQLITE_OK);
    char *err = NULL;
    int rc = sqlite3_exec(db, sql, NULL, NULL, &err);
    if (rc != SQLITE_OK)
        fprintf(stderr, "sql_side: %s\n", err ? err : "?");
    sqlite3_free(err);
    CHECK_EQ_INT(rc, SQLITE_OK);
    CHECK_EQ_INT(sqlite3_close(db), SQLITE_OK);
}

static struct store_observation obs(const char *id, const char *host,
                                    int32_t pid, const char *config) {
    return (struct store_observation){.id = id,
                                      .ns = "ns1",
                                      .arch = "sm90",
                                      .kernel = "m:k@1",
                                      .key = "[i:1]",
                                      .config = config,
                                      .source = 1,
                                      .governed = 1,
                                      .host = host,
                                      .pid = pid,
                                      .rank = pid,
                                      .local_rank = 0,
                                      .device = "GPU",
                                      .at_ms = 1,
                                      .claimed_pid = pid,
                                      .peer_uid = 0,
                                      .node = "n",
                                      .job = "job-a"};
}

/* The rows read back, copied. */
struct seen {
    int n;
    char config[8][64], job[8][32], error[8][64], diff[8][64], why[8][64];
    int failed[8], audit[8];
    int64_t pos[8];
};

static void keep(struct seen *sn, const struct store_observation *o,
                 int64_t pos) {
    CHECK(sn->n < 8);
    int i = sn->n++;
    snprintf(sn->config[i], 64, "%s", o->config);
    snprintf(sn->job[i], 32, "%s", o->job);
    snprintf(sn->error[i], 64, "%s", o->error);
    snprintf(sn->diff[i], 64, "%s", o->audit_differing);
    snprintf(sn->why[i], 64, "%s", o->why);
    sn->failed[i] = o->failed;
    sn->audit[i] = o->audit;
    sn->pos[i] = pos;
}

static int page_cb(void *ctx, const struct store_observation *o, int64_t pos) {
    keep(ctx, o, pos);
    return 0;
}

static int all_cb(void *ctx, const struct store_observation *o) {
    keep(ctx, o, 0);
    return 0;
}

TEST(failed_and_audit_are_sticky_and_the_rest_is_the_latest) {
    store *s = open_ok(tmp_path("s.db"));
    struct store_observation o = obs("id1", "h", 7, "A");
    CHECK_EQ_INT(store_put_observations(s, &o, 1), 0);
    o.failed = 1;
    o.error = "OutOfResources: shared memory";
    CHECK_EQ_INT(store_put_observations(s, &o, 1), 0);
    o.failed = 0;
    o.error = "";
    o.audit = STORE_AUDIT_NONDETERMINISTIC;
    o.audit_differing = "dA\nddt_bias";
    CHECK_EQ_INT(store_put_observations(s, &o, 1), 0);
    /* A plain repeat, with another config and job: those are replaced. */
    struct store_observation p = obs("id1", "h", 7, "B");
    p.job = "job-b";
    CHECK_EQ_INT(store_put_observations(s, &p, 1), 0);
    struct seen sn = {0};
    CHECK_EQ_INT(store_each_observation(s, "ns1", all_cb, &sn), 0);
    CHECK_EQ_INT(sn.n, 1);
    CHECK_STR(sn.config[0], "B");
    CHECK_STR(sn.job[0], "job-b");
    CHECK_EQ_INT(sn.failed[0], 1);
    CHECK_STR(sn.error[0], "OutOfResources: shared memory");
    CHECK_EQ_INT(sn.audit[0], STORE_AUDIT_NONDETERMINISTIC);
    CHECK_STR(sn.diff[0], "dA\nddt_bias");
    /* A later audit replaces the earlier one. */
    p.audit = STORE_AUDIT_DETERMINISTIC;
    p.audit_differing = "";
    CHECK_EQ_INT(store_put_observations(s, &p, 1), 0);
    memset(&sn, 0, sizeof sn);
    CHECK_EQ_INT(store_each_observation(s, "ns1", all_cb, &sn), 0);
    CHECK_EQ_INT(sn.audit[0], STORE_AUDIT_DETERMINISTIC);
    CHECK_STR(sn.diff[0], "");
    CHECK_EQ_INT(sn.failed[0], 1);
    /* An audit out of range is refused, nothing written. */
    p.audit = 4;
    CHECK_EQ_INT(store_put_observations(s, &p, 1), DETD_EINVAL);
    CHECK(strstr(store_errmsg(s), "audit 4 out of range") != NULL);
    store_close(s);
    tmp_cleanup();
}

TEST(pages_follow_first_storage_and_an_update_keeps_its_place) {
    store *s = open_ok(tmp_path("s.db"));
    const char *ids[5] = {"e", "a", "d", "b", "c"};
    for (int i = 0; i < 5; i++) {
        struct store_observation o = obs(ids[i], "h", 1, "A");
        CHECK_EQ_INT(store_put_observations(s, &o, 1), 0);
    }
    struct store_observation other = obs("z", "h", 1, "A");
    other.ns = "ns2";
    CHECK_EQ_INT(store_put_observations(s, &other, 1), 0);
    /* Updating "a" does not move it to the end. */
    struct store_observation a = obs("a", "h", 1, "B");
    CHECK_EQ_INT(store_put_observations(s, &a, 1), 0);
    struct seen p1 = {0}, p2 = {0}, p3 = {0};
    CHECK_EQ_INT(store_each_observation_page(s, "ns1", 0, 2, page_cb, &p1), 0);
    CHECK_EQ_INT(p1.n, 2);
    CHECK_STR(p1.config[1], "B"); /* "a", second stored */
    CHECK(p1.pos[0] < p1.pos[1]);
    CHECK_EQ_INT(
        store_each_observation_page(s, "ns1", p1.pos[1], 2, page_cb, &p2), 0);
    CHECK_EQ_INT(p2.n, 2);
    CHECK(p2.pos[0] > p1.pos[1]);
    CHECK_EQ_INT(
        store_each_observation_page(s, "ns1", p2.pos[1], 2, page_cb, &p3), 0);
    CHECK_EQ_INT(p3.n, 1); /* ns2's row is not in ns1's pages */
    struct seen rest = {0};
    CHECK_EQ_INT(
        store_each_observation_page(s, "ns1", p3.pos[0], 0, page_cb, &rest), 0);
    CHECK_EQ_INT(rest.n, 0);
    store_close(s);
    tmp_cleanup();
}

TEST(migration_from_version_5_keeps_observations_with_empty_new_fields) {
    const char *path = tmp_path("s.db");
    store *s = open_ok(path);
    struct store_observation o = obs("id1", "h", 7, "A");
    CHECK_EQ_INT(store_put_observations(s, &o, 1), 0);
    store_close(s);
    /* Take the file back to schema 5 as an older detd wrote it. */
    sql_side(path, STORE_FX_FAILURES_V8 STORE_FX_DECISIONS_V7
             "ALTER TABLE observations DROP COLUMN job;"
             "ALTER TABLE observations DROP COLUMN failed;"
             "ALTER TABLE observations DROP COLUMN error;"
             "ALTER TABLE observations DROP COLUMN audit;"
             "ALTER TABLE observations DROP COLUMN audit_differing;"
             "ALTER TABLE observations DROP COLUMN why;"
             "PRAGMA user_version = 5;");
    s = open_ok(path);
    struct seen sn = {0};
    CHECK_EQ_INT(store_each_observation(s, NULL, all_cb, &sn), 0);
    CHECK_EQ_INT(sn.n, 1);
    CHECK_STR(sn.config[0], "A");
    CHECK_STR(sn.job[0], "");
    CHECK_EQ_INT(sn.failed[0], 0);
    CHECK_EQ_INT(sn.audit[0], STORE_AUDIT_NONE);
    CHECK_STR(sn.why[0], "");
    store_close(s);
    tmp_cleanup();
}

TEST(a_process_reusing_a_pid_gets_rows_of_its_own) {
    store *s = open_ok(tmp_path("s.db"));
    struct store_observation o = obs("id1", "h", 7, "A");
    o.proc_start = 1000; /* the first process with pid 7 */
    CHECK_EQ_INT(store_put_observations(s, &o, 1), 0);
    o.config = "A2"; /* the same process again: its row is updated */
    CHECK_EQ_INT(store_put_observations(s, &o, 1), 0);
    struct store_observation later = obs("id1", "h", 7, "B");
    later.proc_start = 5000; /* it died; another process got pid 7 */
    CHECK_EQ_INT(store_put_observations(s, &later, 1), 0);
    struct seen sn = {0};
    CHECK_EQ_INT(store_each_observation(s, "ns1", all_cb, &sn), 0);
    CHECK_EQ_INT(sn.n, 2);
    int a = strcmp(sn.config[0], "A2") == 0 ? 0 : 1;
    CHECK_STR(sn.config[a], "A2");
    CHECK_STR(sn.config[1 - a], "B");
    store_close(s);
    tmp_cleanup();
}

TEST(migration_from_version_6_keys_rows_by_process_with_start_0) {
    const char *path = tmp_path("s.db");
    store *s = open_ok(path);
    store_close(s);
    /* The observations table exactly as schema 6 had it, one row. */
    sql_side(path, STORE_FX_FAILURES_V8 STORE_FX_DECISIONS_V7
             "DROP TABLE observations;"
             "CREATE TABLE observations ("
             " id TEXT NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL,"
             " ns TEXT NOT NULL, arch TEXT NOT NULL, kernel TEXT NOT NULL,"
             " key TEXT NOT NULL, config TEXT NOT NULL,"
             " source INTEGER NOT NULL, governed INTEGER NOT NULL,"
             " chaos INTEGER NOT NULL, rank INTEGER NOT NULL,"
             " local_rank INTEGER NOT NULL, device TEXT NOT NULL,"
             " at_ms INTEGER NOT NULL, claimed_pid INTEGER NOT NULL DEFAULT 0,"
             " peer_uid INTEGER NOT NULL DEFAULT -1,"
             " node TEXT NOT NULL DEFAULT '', job TEXT NOT NULL DEFAULT '',"
             " failed INTEGER NOT NULL DEFAULT 0,"
             " error TEXT NOT NULL DEFAULT '',"
             " audit INTEGER NOT NULL DEFAULT 0,"
             " audit_differing TEXT NOT NULL DEFAULT '',"
             " why TEXT NOT NULL DEFAULT '',"
             " PRIMARY KEY (id, host, pid));"
             "CREATE INDEX observations_ns_id ON observations(ns, id);"
             "INSERT INTO observations (id, host, pid, ns, arch, kernel, key,"
             " config, source, governed, chaos, rank, local_rank, device,"
             " at_ms, job, failed, error) VALUES ('id1', 'h', 7, 'ns1',"
             " 'sm90', 'm:k@1', '[i:1]', 'A', 1, 1, 0, 7, 0, 'GPU', 1,"
             " 'job-a', 1, 'boom');"
             "PRAGMA user_version = 6;");
    s = open_ok(path);
    struct seen sn = {0};
    CHECK_EQ_INT(store_each_observation(s, NULL, all_cb, &sn), 0);
    CHECK_EQ_INT(sn.n, 1);
    CHECK_STR(sn.config[0], "A");
    CHECK_STR(sn.job[0], "job-a");
    CHECK_EQ_INT(sn.failed[0], 1);
    CHECK_STR(sn.error[0], "boom");
    /* The old row is the unknown-start incarnation of pid 7. */
    struct store_observation o = obs("id1", "h", 7, "C");
    CHECK_EQ_INT(store_put_observations(s, &o, 1), 0); /* proc_start 0 */
    o.proc_start = 42;
    o.config = "D";
    CHECK_EQ_INT(store_put_observations(s, &o, 1), 0);
    memset(&sn, 0, sizeof sn);
    CHECK_EQ_INT(store_each_observation(s, NULL, all_cb, &sn), 0);
    CHECK_EQ_INT(sn.n, 2);
    store_close(s);
    tmp_cleanup();
}

TEST(a_damaged_value_in_a_new_column_reads_as_corrupt) {
    const char *path = tmp_path("s.db");
    store *s = open_ok(path);
    struct store_observation o = obs("id1", "h", 7, "A");
    CHECK_EQ_INT(store_put_observations(s, &o, 1), 0);
    store_close(s);
    sql_side(path, "UPDATE observations SET audit = 9");
    s = open_ok(path);
    struct seen sn = {0};
    CHECK_EQ_INT(store_each_observation(s, NULL, all_cb, &sn), DETD_ECORRUPT);
    CHECK_EQ_INT(sn.n, 0);
    store_close(s);
    tmp_cleanup();
}

int main(int argc, char **argv) {
    return runner_main(argc, argv);
}
