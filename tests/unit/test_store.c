/*
 * Unit tests of the SQLite store: a real database in a temporary
 * directory per test. Tests may use sqlite3 directly to inspect or damage
 * the file; the code under test may not.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include <sqlite3.h>

#include "detd/client.h"
#include "detd/error.h"
#include "runner.h"
#include "data/store.h"
#include "store_fixture.h"

/* ---- sync counting: proves synchronous=FULL on the store's connection */

/*
 * synchronous is a per-connection setting, so a second connection cannot
 * read the store's. What it changes is observable: in WAL mode, FULL
 * syncs the WAL on every commit, NORMAL only at checkpoints. These
 * definitions interpose libc's for the whole test process (libsqlite3
 * resolves them here) and count the calls.
 */
static volatile long sync_calls;

int fsync(int fd) {
    sync_calls++;
    return (int)syscall(SYS_fsync, fd);
}

int fdatasync(int fd) {
    sync_calls++;
    return (int)syscall(SYS_fdatasync, fd);
}

/* ---- decisions built from a number */

struct dec {
    char id[65];
    char ns[32];
    char kernel[64];
    char key[64];
    char fp[65];
    char config[96];
    char host[32];
    char timings[192];
    struct decision d;
};

static void dec_make(struct dec *b, const char *ns, const char *kernel,
                     const char *key, int i) {
    memset(b, 0, sizeof *b);
    unsigned h = 5381;
    for (const char *p = ns; *p; p++)
        h = h * 33 + (unsigned char)*p;
    for (const char *p = kernel; *p; p++)
        h = h * 33 + (unsigned char)*p;
    for (const char *p = key; *p; p++)
        h = h * 33 + (unsigned char)*p;
    snprintf(b->id, sizeof b->id, "%032x%032x", h, (unsigned)i);
    snprintf(b->ns, sizeof b->ns, "%s", ns);
    snprintf(b->kernel, sizeof b->kernel, "%s", kernel);
    snprintf(b->key, sizeof b->key, "%s", key);
    snprintf(b->fp, sizeof b->fp, "%064x", (unsigned)i * 7u);
    snprintf(b->config, sizeof b->config,
             "BLOCK=%d,num_ctas=1,num_stages=3,num_warps=4", 64 << (i % 5));
    snprintf(b->host, sizeof b->host, "node%02d", i % 17);
    snprintf(b->timings, sizeof b->timings,
             "[{\"config\":\"%s\",\"ms\":[0.%03d],\"failed\":false}]",
             b->config, i % 1000);
    b->d = (struct decision){
        .id = b->id,
        .ns = b->ns,
        .arch = "sm90",
        .kernel = b->kernel,
        .key = b->key,
        .candidates_fp = b->fp,
        .n_candidates = 1 + i % 12,
        .config = b->config,
        .source = DETD_SOURCE_TIMED,
        .claim_id = 0xfedcba9876543210ull + (uint64_t)i,
        .by_host = b->host,
        .by_pid = 4000 + i,
        .by_rank = i % 96,
        .by_local_rank = i % 8,
        .by_device = "NVIDIA H200",
        .by_arch = "sm90",
        .triton_version = "3.6.0",
        .timings_json = b->timings,
        .table_file = "",
        .decided_at_ms = 1700000000000 + i,
        .by_uid = 1000 + i % 3,
        .by_claimed_pid = 4000 + i % 2,
        .by_node = "node-b",
        .by_world_size = 8,
        .by_job = "run-17",
    };
}

static const char *nz(const char *s) {
    return s != NULL ? s : "";
}

static void check_dec_eq(const struct decision *a, const struct decision *b) {
    CHECK_STR(a->id, b->id);
    CHECK_STR(a->ns, b->ns);
    CHECK_STR(a->arch, b->arch);
    CHECK_STR(a->kernel, b->kernel);
    CHECK_STR(a->key, b->key);
    CHECK_STR(nz(a->candidates_fp), nz(b->candidates_fp));
    CHECK_EQ_INT(a->n_candidates, b->n_candidates);
    CHECK_STR(a->config, b->config);
    CHECK_EQ_INT(a->source, b->source);
    CHECK(a->claim_id == b->claim_id);
    CHECK_STR(nz(a->by_host), nz(b->by_host));
    CHECK_EQ_INT(a->by_pid, b->by_pid);
    CHECK_EQ_INT(a->by_rank, b->by_rank);
    CHECK_EQ_INT(a->by_local_rank, b->by_local_rank);
    CHECK_STR(nz(a->by_device), nz(b->by_device));
    CHECK_STR(nz(a->by_arch), nz(b->by_arch));
    CHECK_STR(nz(a->triton_version), nz(b->triton_version));
    CHECK_STR(nz(a->timings_json), nz(b->timings_json));
    CHECK_STR(nz(a->table_file), nz(b->table_file));
    CHECK_EQ_INT(a->decided_at_ms, b->decided_at_ms);
    CHECK_EQ_INT(a->by_uid, b->by_uid);
    CHECK_EQ_INT(a->by_claimed_pid, b->by_claimed_pid);
    CHECK_STR(nz(a->by_node), nz(b->by_node));
    CHECK_EQ_INT(a->by_world_size, b->by_world_size);
    CHECK_STR(nz(a->by_job), nz(b->by_job));
}

static void check_stored(store *s, const struct decision *want) {
    struct decision got;
    memset(&got, 0, sizeof got);
    CHECK_EQ_INT(store_get_decision(s, want->id, &got), 0);
    check_dec_eq(&got, want);
    decision_clear(&got);
}

static uint64_t count_all(store *s, const char *ns) {
    uint64_t total = 0;
    CHECK_EQ_INT(store_count_decisions(s, ns, &total, NULL), 0);
    return total;
}

/* ---- collecting callbacks */

struct seen {
    int n;
    int stop_after; /* 0: never stop */
    char rows[64][160];
};

static int collect_dec(void *ctx, const struct decision *d) {
    struct seen *sn = ctx;
    if (sn->n < 64)
        snprintf(sn->rows[sn->n], sizeof sn->rows[0], "%s|%s|%s|%s", d->ns,
                 d->kernel, d->key, d->config);
    sn->n++;
    return sn->stop_after != 0 && sn->n >= sn->stop_after;
}

static int collect_obs(void *ctx, const struct store_observation *o) {
    struct seen *sn = ctx;
    if (sn->n < 64)
        snprintf(sn->rows[sn->n], sizeof sn->rows[0], "%s|%s|%s|%d|%d|%d|%d",
                 o->id, o->config, o->host, o->rank, o->pid, o->governed,
                 o->chaos);
    sn->n++;
    return sn->stop_after != 0 && sn->n >= sn->stop_after;
}

static struct store_observation obs_make(const char *id, const char *ns,
                                         const char *config, const char *host,
                                         int32_t pid, int32_t rank) {
    return (struct store_observation){
        .id = id,
        .ns = ns,
        .arch = "sm90",
        .kernel = "m:k@1",
        .key = "(i:1024,)",
        .config = config,
        .source = DETD_SOURCE_TIMED,
        .governed = 1,
        .chaos = 0,
        .host = host,
        .pid = pid,
        .rank = rank,
        .local_rank = rank % 8,
        .device = "NVIDIA H200",
        .at_ms = 1700000000000,
    };
}

static int count_obs(store *s, const char *ns) {
    struct seen sn;
    memset(&sn, 0, sizeof sn);
    CHECK_EQ_INT(store_each_observation(s, ns, collect_obs, &sn), 0);
    return sn.n;
}

/* Run one SQL statement on a second connection; text of the first cell. */
static void sql_on_side(const char *path, const char *sql, char *ret,
                        size_t ret_size) {
    sqlite3 *db = NULL;
    CHECK_EQ_INT(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL),
                 SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    sqlite3_stmt *st = NULL;
    CHECK_EQ_INT(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    int rc = sqlite3_step(st);
    CHECK(rc == SQLITE_ROW || rc == SQLITE_DONE);
    if (ret != NULL) {
        CHECK(rc == SQLITE_ROW);
        const unsigned char *t = sqlite3_column_text(st, 0);
        snprintf(ret, ret_size, "%s", t ? (const char *)t : "(null)");
    }
    sqlite3_finalize(st);
    CHECK_EQ_INT(sqlite3_close(db), SQLITE_OK);
}

/* ---- tests */

TEST(null_handles_are_noops) {
    store_close(NULL);
    decision_clear(NULL);
    CHECK(store_errmsg(NULL) != NULL);
    store *s = (store *)0x1;
    char *msg = NULL;
    CHECK_EQ_INT(store_open(NULL, &s, &msg), DETD_EINVAL);
    CHECK(s == (store *)0x1);
    CHECK(msg != NULL && strstr(msg, "path") != NULL);
    free(msg);
    tmp_cleanup();
}

TEST(open_close_reopen_keeps_data) {
    const char *path = tmp_path("s.db");
    struct dec a;
    dec_make(&a, "ns1", "m:k@1", "(i:1024,)", 1);
    store *s = open_ok(path);
    CHECK_EQ_INT(store_errmsg(s)[0], '\0');
    CHECK_EQ_INT(store_put_decision(s, &a.d, NULL), 0);
    store_close(s);

    s = open_ok(path);
    check_stored(s, &a.d);
    CHECK_EQ_INT(count_all(s, NULL), 1);
    store_close(s);

    /* The schema and its bookkeeping, seen from outside. */
    char v[64];
    sql_on_side(path, "PRAGMA user_version", v, sizeof v);
    CHECK_STR(v, "11");
    sql_on_side(path, "SELECT value FROM meta WHERE name = 'schema_version'", v,
                sizeof v);
    CHECK_STR(v, "11");
    sql_on_side(path,
                "SELECT CAST(value AS INTEGER) > 1600000000000 FROM meta"
                " WHERE name = 'created_at_ms'",
                v, sizeof v);
    CHECK_STR(v, "1");
    sql_on_side(path,
                "SELECT count(*) FROM sqlite_schema WHERE type = 'index'"
                " AND name IN ('decisions_ns_kernel_key',"
                " 'observations_ns_id')",
                v, sizeof v);
    CHECK_STR(v, "2");
    tmp_cleanup();
}

TEST(put_then_get_returns_identical_fields) {
    store *s = open_ok(tmp_path("s.db"));
    struct dec a;
    dec_make(&a, "ns1", "pkg.mod:matmul_kernel@3f2a", "(i:4096,i:4096,f16)",
             42);
    a.d.claim_id = UINT64_MAX - 3; /* above INT64_MAX: bit pattern kept */
    a.d.by_rank = -1;
    a.d.by_local_rank = -1;
    a.d.by_pid = INT32_MAX;
    a.d.decided_at_ms = INT64_MIN + 1;
    a.d.source = DETD_SOURCE_TABLE;
    a.d.table_file = "/etc/detd/tables/sm90.json";
    a.d.timings_json = "[{\"config\":\"x\",\"ms\":[1.5,\"\xc3\xa9\"]}]";
    CHECK_EQ_INT(store_put_decision(s, &a.d, NULL), 0);
    check_stored(s, &a.d);

    /* Optional strings left NULL come back as "". */
    struct dec b;
    dec_make(&b, "ns1", "m:k@1", "(i:1,)", 2);
    b.d.by_host = NULL;
    b.d.by_device = NULL;
    b.d.timings_json = NULL;
    b.d.candidates_fp = NULL;
    CHECK_EQ_INT(store_put_decision(s, &b.d, NULL), 0);
    struct decision got;
    memset(&got, 0, sizeof got);
    CHECK_EQ_INT(store_get_decision(s, b.d.id, &got), 0);
    CHECK_STR(got.by_host, "");
    CHECK_STR(got.timings_json, "");
    CHECK_STR(got.candidates_fp, "");
    check_dec_eq(&got, &b.d);
    decision_clear(&got);
    CHECK(got.id == NULL);

    /* Not found leaves *ret untouched. */
    memset(&got, 0x5a, sizeof got);
    CHECK_EQ_INT(store_get_decision(s, "nope", &got), DETD_ENOTFOUND);
    CHECK(got.id == (char *)(uintptr_t)0x5a5a5a5a5a5a5a5aull);
    CHECK(strstr(store_errmsg(s), "nope") != NULL);
    store_close(s);
    tmp_cleanup();
}

TEST(second_put_of_same_id_first_writer_wins) {
    store *s = open_ok(tmp_path("s.db"));
    struct dec a, b;
    dec_make(&a, "ns1", "m:k@1", "(i:8,)", 7);
    dec_make(&b, "ns1", "m:k@1", "(i:8,)", 7);
    b.d.config = "BLOCK=2048,num_ctas=1,num_stages=2,num_warps=8";
    b.d.by_host = "other";
    b.d.by_rank = 95;
    b.d.claim_id = 1;
    CHECK_EQ_INT(store_put_decision(s, &a.d, NULL), 0);

    struct decision existing;
    memset(&existing, 0, sizeof existing);
    CHECK_EQ_INT(store_put_decision(s, &b.d, &existing), DETD_EEXIST);
    check_dec_eq(&existing, &a.d);
    decision_clear(&existing);
    CHECK_EQ_INT(store_put_decision(s, &b.d, NULL), DETD_EEXIST);

    check_stored(s, &a.d);
    CHECK_EQ_INT(count_all(s, "ns1"), 1);
    store_close(s);
    tmp_cleanup();
}

TEST(put_decision_rejects_bad_input_and_stores_nothing) {
    store *s = open_ok(tmp_path("s.db"));
    struct dec a;
    dec_make(&a, "ns1", "m:k@1", "(i:8,)", 1);
    a.d.config = NULL;
    CHECK_EQ_INT(store_put_decision(s, &a.d, NULL), DETD_EINVAL);
    CHECK(strstr(store_errmsg(s), "put decision") != NULL);

    dec_make(&a, "ns1", "m:k@1", "(i:8,)", 1);
    a.d.n_candidates = DETD_MAX_CANDIDATES + 1;
    CHECK_EQ_INT(store_put_decision(s, &a.d, NULL), DETD_ELIMIT);
    a.d.n_candidates = -1;
    CHECK_EQ_INT(store_put_decision(s, &a.d, NULL), DETD_EINVAL);
    a.d.n_candidates = 3;
    a.d.source = 8;
    CHECK_EQ_INT(store_put_decision(s, &a.d, NULL), DETD_EINVAL);
    a.d.source = DETD_SOURCE_TIMED;
    a.d.by_uid = -2; /* -1 is "unknown", a uid is 32 bits */
    CHECK_EQ_INT(store_put_decision(s, &a.d, NULL), DETD_EINVAL);
    a.d.by_uid = (int64_t)UINT32_MAX + 1;
    CHECK_EQ_INT(store_put_decision(s, &a.d, NULL), DETD_EINVAL);
    a.d.by_uid = -1;

    /* Over the size cap: refused inside the transaction, rolled back. */
    size_t big = DETD_MAX_MESSAGE_BYTES + 1;
    char *huge = malloc(big + 1);
    CHECK(huge != NULL);
    memset(huge, 'x', big);
    huge[big] = '\0';
    a.d.timings_json = huge;
    CHECK_EQ_INT(store_put_decision(s, &a.d, NULL), DETD_ELIMIT);
    free(huge);
    CHECK_EQ_INT(count_all(s, NULL), 0);

    /* The handle still works afterwards. */
    dec_make(&a, "ns1", "m:k@1", "(i:8,)", 1);
    CHECK_EQ_INT(store_put_decision(s, &a.d, NULL), 0);
    check_stored(s, &a.d);
    store_close(s);
    tmp_cleanup();
}

TEST(put_decisions_batch_first_writer_wins_all_or_nothing) {
    store *s = open_ok(tmp_path("s.db"));
    struct dec b[5];
    struct decision ds[5];
    for (int i = 0; i < 5; i++) {
        dec_make(&b[i], "ns1", "m:k@1", "(i:8,)", i);
        ds[i] = b[i].d;
    }
    CHECK_EQ_INT(store_put_decision(s, &ds[2], NULL), 0);
    ds[4].id = ds[0].id; /* duplicate inside the batch */
    ds[4].config = "later";
    int res[5] = {9, 9, 9, 9, 9};
    CHECK_EQ_INT(store_put_decisions(s, ds, 5, res), 0);
    CHECK_EQ_INT(res[0], 0);
    CHECK_EQ_INT(res[1], 0);
    CHECK_EQ_INT(res[2], DETD_EEXIST);
    CHECK_EQ_INT(res[3], 0);
    CHECK_EQ_INT(res[4], DETD_EEXIST);
    CHECK_EQ_INT(count_all(s, NULL), 4);
    check_stored(s, &b[0].d);

    /* A failure in the middle writes nothing. */
    struct dec c[3];
    struct decision cs[3];
    for (int i = 0; i < 3; i++) {
        dec_make(&c[i], "ns2", "m:k@1", "(i:8,)", 100 + i);
        cs[i] = c[i].d;
    }
    size_t big = DETD_MAX_MESSAGE_BYTES + 1;
    char *huge = malloc(big + 1);
    CHECK(huge != NULL);
    memset(huge, 'y', big);
    huge[big] = '\0';
    cs[2].key = huge;
    CHECK_EQ_INT(store_put_decisions(s, cs, 3, NULL), DETD_ELIMIT);
    free(huge);
    CHECK_EQ_INT(count_all(s, "ns2"), 0);
    struct decision got;
    CHECK_EQ_INT(store_get_decision(s, cs[0].id, &got), DETD_ENOTFOUND);
    CHECK_EQ_INT(store_put_decisions(s, NULL, 0, NULL), 0);
    store_close(s);
    tmp_cleanup();
}

TEST(observations_batch_replace_semantics) {
    store *s = open_ok(tmp_path("s.db"));
    struct store_observation o[3] = {
        obs_make("id1", "ns1", "cfgA", "h1", 10, 0),
        obs_make("id1", "ns1", "cfgA", "h1", 11, 1),
        obs_make("id1", "ns1", "cfgA", "h2", 10, 2),
    };
    CHECK_EQ_INT(store_put_observations(s, o, 3), 0);
    CHECK_EQ_INT(count_obs(s, "ns1"), 3);

    /* Same (id, host, pid): replaced, not added. */
    struct store_observation r = obs_make("id1", "ns1", "cfgB", "h1", 11, 1);
    r.chaos = 1;
    r.governed = 0;
    CHECK_EQ_INT(store_put_observations(s, &r, 1), 0);
    struct seen sn;
    memset(&sn, 0, sizeof sn);
    CHECK_EQ_INT(store_each_observation(s, "ns1", collect_obs, &sn), 0);
    CHECK_EQ_INT(sn.n, 3);
    CHECK_STR(sn.rows[0], "id1|cfgA|h1|0|10|1|0");
    CHECK_STR(sn.rows[1], "id1|cfgA|h2|2|10|1|0");
    CHECK_STR(sn.rows[2], "id1|cfgB|h1|1|11|0|1");

    /* All or nothing: the second item fails inside the transaction. */
    size_t big = DETD_MAX_MESSAGE_BYTES + 1;
    char *huge = malloc(big + 1);
    CHECK(huge != NULL);
    memset(huge, 'z', big);
    huge[big] = '\0';
    struct store_observation bad[2] = {
        obs_make("id2", "ns1", "cfgA", "h1", 10, 0),
        obs_make("id2", "ns1", huge, "h1", 12, 0),
    };
    CHECK_EQ_INT(store_put_observations(s, bad, 2), DETD_ELIMIT);
    free(huge);
    bad[1] = obs_make("id2", "ns1", "cfgA", NULL, 12, 0);
    CHECK_EQ_INT(store_put_observations(s, bad, 2), DETD_EINVAL);
    CHECK_EQ_INT(count_obs(s, "ns1"), 3);
    CHECK_EQ_INT(store_put_observations(s, NULL, 0), 0);
    store_close(s);
    tmp_cleanup();
}

TEST(each_decision_filter_limit_order) {
    store *s = open_ok(tmp_path("s.db"));
    /* Inserted out of order; listed by kernel, then key. */
    const char *rows[][3] = {
        {"ns1", "k:b", "(2)"}, {"ns1", "k:a", "(3)"}, {"ns1", "k:c", "(1)"},
        {"ns1", "k:a", "(1)"}, {"ns2", "k:a", "(0)"}, {"ns1", "k:b", "(1)"},
        {"ns1", "k:a", "(2)"},
    };
    for (int i = 0; i < 7; i++) {
        struct dec b;
        dec_make(&b, rows[i][0], rows[i][1], rows[i][2], i);
        snprintf(b.config, sizeof b.config, "%s", rows[i][2]);
        CHECK_EQ_INT(store_put_decision(s, &b.d, NULL), 0);
    }
    struct seen sn;
    memset(&sn, 0, sizeof sn);
    CHECK_EQ_INT(store_each_decision(s, "ns1", NULL, 0, collect_dec, &sn), 0);
    CHECK_EQ_INT(sn.n, 6);
    CHECK_STR(sn.rows[0], "ns1|k:a|(1)|(1)");
    CHECK_STR(sn.rows[1], "ns1|k:a|(2)|(2)");
    CHECK_STR(sn.rows[2], "ns1|k:a|(3)|(3)");
    CHECK_STR(sn.rows[3], "ns1|k:b|(1)|(1)");
    CHECK_STR(sn.rows[4], "ns1|k:b|(2)|(2)");
    CHECK_STR(sn.rows[5], "ns1|k:c|(1)|(1)");

    memset(&sn, 0, sizeof sn);
    CHECK_EQ_INT(store_each_decision(s, "ns1", "k:b", 0, collect_dec, &sn), 0);
    CHECK_EQ_INT(sn.n, 2);
    CHECK_STR(sn.rows[0], "ns1|k:b|(1)|(1)");
    CHECK_STR(sn.rows[1], "ns1|k:b|(2)|(2)");

    memset(&sn, 0, sizeof sn);
    CHECK_EQ_INT(store_each_decision(s, "ns1", "k:a", 2, collect_dec, &sn), 0);
    CHECK_EQ_INT(sn.n, 2);
    CHECK_STR(sn.rows[0], "ns1|k:a|(1)|(1)");
    CHECK_STR(sn.rows[1], "ns1|k:a|(2)|(2)");

    /* All namespaces: ns2's k:a (0) sorts first by key. */
    memset(&sn, 0, sizeof sn);
    CHECK_EQ_INT(store_each_decision(s, NULL, "k:a", 0, collect_dec, &sn), 0);
    CHECK_EQ_INT(sn.n, 4);
    CHECK_STR(sn.rows[0], "ns2|k:a|(0)|(0)");

    /* The callback stops the walk. */
    memset(&sn, 0, sizeof sn);
    sn.stop_after = 3;
    CHECK_EQ_INT(store_each_decision(s, NULL, NULL, 0, collect_dec, &sn), 0);
    CHECK_EQ_INT(sn.n, 3);

    memset(&sn, 0, sizeof sn);
    CHECK_EQ_INT(store_each_decision(s, "none", NULL, 0, collect_dec, &sn), 0);
    CHECK_EQ_INT(sn.n, 0);
    store_close(s);
    tmp_cleanup();
}

TEST(each_observation_order_and_namespace) {
    store *s = open_ok(tmp_path("s.db"));
    struct store_observation o[] = {
        obs_make("id2", "ns1", "cfgA", "h1", 5, 0),
        obs_make("id1", "ns1", "cfgB", "h1", 5, 0),
        obs_make("id1", "ns1", "cfgA", "h2", 3, 1),
        obs_make("id1", "ns1", "cfgA", "h1", 9, 3),
        obs_make("id1", "ns1", "cfgA", "h1", 8, 2),
        obs_make("id1", "ns1", "cfgA", "h1", 4, 2),
        obs_make("id0", "ns2", "cfgA", "h1", 4, 2),
    };
    CHECK_EQ_INT(store_put_observations(s, o, 7), 0);
    struct seen sn;
    memset(&sn, 0, sizeof sn);
    CHECK_EQ_INT(store_each_observation(s, "ns1", collect_obs, &sn), 0);
    CHECK_EQ_INT(sn.n, 6);
    CHECK_STR(sn.rows[0], "id1|cfgA|h1|2|4|1|0");
    CHECK_STR(sn.rows[1], "id1|cfgA|h1|2|8|1|0");
    CHECK_STR(sn.rows[2], "id1|cfgA|h1|3|9|1|0");
    CHECK_STR(sn.rows[3], "id1|cfgA|h2|1|3|1|0");
    CHECK_STR(sn.rows[4], "id1|cfgB|h1|0|5|1|0");
    CHECK_STR(sn.rows[5], "id2|cfgA|h1|0|5|1|0");
    CHECK_EQ_INT(count_obs(s, NULL), 7);
    CHECK_EQ_INT(count_obs(s, "ns2"), 1);
    store_close(s);
    tmp_cleanup();
}

TEST(reset_by_kernel_and_all_removes_observations) {
    store *s = open_ok(tmp_path("s.db"));
    struct dec b[6];
    const char *kernels[] = {"k:a", "k:a", "k:b", "k:b", "k:b", "k:a"};
    const char *nss[] = {"ns1", "ns1", "ns1", "ns1", "ns1", "ns2"};
    for (int i = 0; i < 6; i++) {
        dec_make(&b[i], nss[i], kernels[i], "(i:1,)", i);
        CHECK_EQ_INT(store_put_decision(s, &b[i].d, NULL), 0);
        struct store_observation o[2] = {
            obs_make(b[i].id, nss[i], "cfg", "h1", 1, 0),
            obs_make(b[i].id, nss[i], "cfg", "h1", 2, 1),
        };
        CHECK_EQ_INT(store_put_observations(s, o, 2), 0);
    }
    /* An observation of a key never decided, of another kernel: a reset
     * of kernel k:a keeps it. */
    struct store_observation lone =
        obs_make("undecided", "ns1", "cfg", "h9", 1, 0);
    CHECK_EQ_INT(store_put_observations(s, &lone, 1), 0);
    CHECK_EQ_INT(count_obs(s, "ns1"), 11);

    uint64_t removed = 99;
    CHECK_EQ_INT(store_reset(s, "ns1", "k:a", &removed, NULL), 0);
    CHECK_EQ_INT(removed, 2);
    CHECK_EQ_INT(count_all(s, "ns1"), 3);
    CHECK_EQ_INT(count_all(s, "ns2"), 1);
    CHECK_EQ_INT(count_obs(s, "ns1"), 7);
    struct decision got;
    CHECK_EQ_INT(store_get_decision(s, b[0].id, &got), DETD_ENOTFOUND);
    check_stored(s, &b[2].d);

    CHECK_EQ_INT(store_reset(s, "ns1", "k:none", &removed, NULL), 0);
    CHECK_EQ_INT(removed, 0);

    /* A reset of every kernel forgets every observation of the namespace,
     * those of keys never decided too (failed launches of broken runs). */
    uint64_t removed_obs = 99;
    CHECK_EQ_INT(store_reset(s, "ns1", NULL, &removed, &removed_obs), 0);
    CHECK_EQ_INT(removed, 3);
    CHECK_EQ_INT(removed_obs, 7);
    CHECK_EQ_INT(count_all(s, "ns1"), 0);
    CHECK_EQ_INT(count_obs(s, "ns1"), 0);

    /* The other namespace is untouched. */
    check_stored(s, &b[5].d);
    CHECK_EQ_INT(count_obs(s, "ns2"), 2);
    CHECK_EQ_INT(store_reset(s, NULL, NULL, &removed, NULL), DETD_EINVAL);
    CHECK_EQ_INT(count_all(s, NULL), 1);
    store_close(s);
    tmp_cleanup();
}

TEST(count_by_source) {
    store *s = open_ok(tmp_path("s.db"));
    const int32_t sources[] = {DETD_SOURCE_TIMED, DETD_SOURCE_TABLE,
                               DETD_SOURCE_TABLE, DETD_SOURCE_IMPORT,
                               DETD_SOURCE_TIMED, DETD_SOURCE_TIMED};
    for (int i = 0; i < 6; i++) {
        struct dec b;
        dec_make(&b, i < 5 ? "ns1" : "ns2", "k", "(1)", i);
        b.d.source = sources[i];
        CHECK_EQ_INT(store_put_decision(s, &b.d, NULL), 0);
    }
    uint64_t total = 0, by[8];
    memset(by, 0xff, sizeof by);
    CHECK_EQ_INT(store_count_decisions(s, "ns1", &total, by), 0);
    CHECK_EQ_INT(total, 5);
    CHECK_EQ_INT(by[DETD_SOURCE_UNSPECIFIED], 0);
    CHECK_EQ_INT(by[DETD_SOURCE_TIMED], 2);
    CHECK_EQ_INT(by[DETD_SOURCE_TABLE], 2);
    CHECK_EQ_INT(by[DETD_SOURCE_IMPORT], 1);
    CHECK_EQ_INT(by[DETD_SOURCE_LOCAL], 0);
    CHECK_EQ_INT(by[7], 0);
    CHECK_EQ_INT(store_count_decisions(s, NULL, &total, by), 0);
    CHECK_EQ_INT(total, 6);
    CHECK_EQ_INT(by[DETD_SOURCE_TIMED], 3);
    CHECK_EQ_INT(store_count_decisions(s, "empty", &total, by), 0);
    CHECK_EQ_INT(total, 0);
    CHECK_EQ_INT(by[DETD_SOURCE_TIMED], 0);
    store_close(s);
    tmp_cleanup();
}

TEST(newer_schema_version_is_refused_naming_both_versions) {
    const char *path = tmp_path("s.db");
    store_close(open_ok(path));
    sql_on_side(path, "PRAGMA user_version = 12", NULL, 0);

    store *s = (store *)0x1;
    char *msg = NULL;
    CHECK_EQ_INT(store_open(path, &s, &msg), DETD_ECORRUPT);
    CHECK(s == (store *)0x1);
    CHECK(msg != NULL);
    CHECK(strstr(msg, "version 12") != NULL);
    CHECK(strstr(msg, "version 11") != NULL);
    CHECK(strstr(msg, path) != NULL);
    free(msg);

    /* Nothing was changed: a build that knows version 12 still finds it. */
    char v[16];
    sql_on_side(path, "PRAGMA user_version", v, sizeof v);
    CHECK_STR(v, "12");
    /* ret_errmsg is optional. */
    CHECK_EQ_INT(store_open(path, &s, NULL), DETD_ECORRUPT);
    tmp_cleanup();
}

TEST(migration_from_version_7_reads_decisions_as_unknown_peer) {
    const char *path = tmp_path("s.db");
    struct dec a;
    dec_make(&a, "ns1", "m:k@1", "(i:7,)", 7);
    store *s = open_ok(path);
    CHECK_EQ_INT(store_put_decision(s, &a.d, NULL), 0);
    store_close(s);
    /* The decisions table as schema 7 had it, with the row. */
    store_fx_to_v7(path);

    s = open_ok(path);
    struct decision got;
    CHECK_EQ_INT(store_get_decision(s, a.id, &got), 0);
    CHECK_STR(got.config, a.config);
    CHECK_EQ_INT(got.by_pid, a.d.by_pid);
    CHECK_EQ_INT(got.by_uid, -1);
    CHECK_STR(got.by_node, "");
    CHECK_EQ_INT(got.by_claimed_pid, 0);
    decision_clear(&got);
    /* New rows keep what they carry beside the old one. */
    struct dec b;
    dec_make(&b, "ns1", "m:k@1", "(i:8,)", 8);
    CHECK_EQ_INT(store_put_decision(s, &b.d, NULL), 0);
    check_stored(s, &b.d);
    store_close(s);
    char v[16];
    sql_on_side(path, "PRAGMA user_version", v, sizeof v);
    CHECK_STR(v, "11");

    /* A value no daemon writes is corruption, not a uid. */
    sql_on_side(path, "UPDATE decisions SET by_uid = -7", NULL, 0);
    s = open_ok(path);
    CHECK_EQ_INT(store_get_decision(s, a.id, &got), DETD_ECORRUPT);
    CHECK(strstr(store_errmsg(s), "by_uid") != NULL);
    store_close(s);
    tmp_cleanup();
}

TEST(non_database_file_fails_naming_the_path) {
    const char *path = tmp_path("junk.db");
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0);
    char junk[4096];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (char)('a' + i % 26);
    CHECK(write(fd, junk, sizeof junk) == (ssize_t)sizeof junk);
    close(fd);

    store *s = (store *)0x1;
    char *msg = NULL;
    int rc = store_open(path, &s, &msg);
    CHECK(rc == DETD_ECORRUPT || rc == DETD_ESTORE);
    CHECK(s == (store *)0x1);
    CHECK(msg != NULL && strstr(msg, path) != NULL);
    free(msg);
    tmp_cleanup();
}

TEST(foreign_sqlite_database_is_refused) {
    const char *path = tmp_path("other.db");
    sqlite3 *db = NULL;
    CHECK_EQ_INT(sqlite3_open(path, &db), SQLITE_OK);
    CHECK_EQ_INT(
        sqlite3_exec(db, "CREATE TABLE decisions (x)", NULL, NULL, NULL),
        SQLITE_OK);
    sqlite3_close(db);

    store *s = NULL;
    char *msg = NULL;
    CHECK_EQ_INT(store_open(path, &s, &msg), DETD_ECORRUPT);
    CHECK(s == NULL);
    CHECK(msg != NULL && strstr(msg, "not a detd database") != NULL);
    free(msg);
    tmp_cleanup();
}

TEST(missing_directory_fails_naming_the_path) {
    const char *path = tmp_path("no/such/dir/s.db");
    store *s = NULL;
    char *msg = NULL;
    int rc = store_open(path, &s, &msg);
    CHECK_EQ_INT(rc, -ENOENT);
    CHECK(s == NULL);
    CHECK(msg != NULL && strstr(msg, path) != NULL);
    free(msg);
    tmp_cleanup();
}

TEST(corrupt_rows_are_rejected_not_trusted) {
    const char *path = tmp_path("s.db");
    store *s = open_ok(path);
    struct dec a, b, c;
    dec_make(&a, "ns1", "k", "(1)", 1);
    dec_make(&b, "ns1", "k", "(2)", 2);
    dec_make(&c, "ns1", "k", "(3)", 3);
    CHECK_EQ_INT(store_put_decision(s, &a.d, NULL), 0);
    CHECK_EQ_INT(store_put_decision(s, &b.d, NULL), 0);
    CHECK_EQ_INT(store_put_decision(s, &c.d, NULL), 0);

    char sql[512];
    snprintf(sql, sizeof sql,
             "UPDATE decisions SET n_candidates = 1000000000 WHERE id = '%s'",
             a.id);
    sql_on_side(path, sql, NULL, 0);
    snprintf(sql, sizeof sql,
             "UPDATE decisions SET config = CAST(X'41004243' AS BLOB)"
             " WHERE id = '%s'",
             b.id);
    sql_on_side(path, sql, NULL, 0);
    snprintf(sql, sizeof sql,
             "UPDATE decisions SET source = 'timed' WHERE id = '%s'", c.id);
    sql_on_side(path, sql, NULL, 0);

    struct decision got;
    CHECK_EQ_INT(store_get_decision(s, a.id, &got), DETD_ECORRUPT);
    CHECK(strstr(store_errmsg(s), "n_candidates") != NULL);
    CHECK_EQ_INT(store_get_decision(s, b.id, &got), DETD_ECORRUPT);
    CHECK(strstr(store_errmsg(s), "config") != NULL);
    CHECK_EQ_INT(store_get_decision(s, c.id, &got), DETD_ECORRUPT);
    CHECK(strstr(store_errmsg(s), "source") != NULL);
    struct seen sn;
    memset(&sn, 0, sizeof sn);
    CHECK_EQ_INT(store_each_decision(s, NULL, NULL, 0, collect_dec, &sn),
                 DETD_ECORRUPT);
    CHECK_EQ_INT(sn.n, 0);
    store_close(s);
    tmp_cleanup();
}

TEST(wal_and_synchronous_full_are_set) {
    const char *path = tmp_path("s.db");
    store *s = open_ok(path);
    char v[32];
    /* journal_mode=WAL is stored in the file: a second connection sees it. */
    sql_on_side(path, "PRAGMA journal_mode", v, sizeof v);
    CHECK_STR(v, "wal");
    sql_on_side(path, "PRAGMA application_id", v, sizeof v);
    CHECK_STR(v, "1684370532"); /* 0x64657464, "detd" */

    struct dec b;
    dec_make(&b, "ns1", "k", "(0)", 0);
    CHECK_EQ_INT(store_put_decision(s, &b.d, NULL), 0);
    struct stat stw;
    char wal[600];
    snprintf(wal, sizeof wal, "%s-wal", path);
    CHECK_EQ_INT(stat(wal, &stw), 0);
    CHECK(stw.st_size > 0);

    /* FULL: every commit syncs the WAL; NORMAL would not sync at all. */
    long before = sync_calls;
    for (int i = 1; i <= 10; i++) {
        dec_make(&b, "ns1", "k", "(0)", i);
        CHECK_EQ_INT(store_put_decision(s, &b.d, NULL), 0);
    }
    long synced = sync_calls - before;
    CHECK(synced >= 10);

    /* A read-only call syncs nothing (the counter is not fooled). */
    before = sync_calls;
    check_stored(s, &b.d);
    CHECK_EQ_INT(sync_calls - before, 0);
    store_close(s);
    tmp_cleanup();
}

/*
 * Durability of an acknowledgement: a child puts decisions and writes
 * one byte to a pipe after each store_put_decision() returns; the parent
 * SIGKILLs it mid-stream; the child, if it gets that far, SIGKILLs
 * itself right after the 200th. Every acknowledged decision must be in
 * the reopened database, unchanged, and at most one more.
 */
TEST(kill_9_after_ack_loses_nothing) {
    const char *path = tmp_path("s.db");
    store_close(open_ok(path));
    int p[2];
    CHECK_EQ_INT(pipe(p), 0);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        store *s = NULL;
        if (store_open(path, &s, NULL) != 0)
            _exit(2);
        for (int i = 0; i < 200; i++) {
            struct dec b;
            dec_make(&b, "ns1", "k:crash", "(i:1,)", i);
            if (store_put_decision(s, &b.d, NULL) != 0)
                _exit(3);
            if (i == 199)
                raise(SIGKILL);
            char one = 1;
            if (write(p[1], &one, 1) != 1)
                _exit(4);
        }
        _exit(5);
    }
    close(p[1]);
    int acked = 0;
    char buf[64];
    ssize_t n;
    while ((n = read(p[0], buf, sizeof buf)) != 0) {
        if (n < 0 && errno == EINTR)
            continue;
        CHECK(n > 0);
        acked += (int)n;
        if (acked >= 120)
            kill(pid, SIGKILL);
    }
    close(p[0]);
    int st = 0;
    CHECK_EQ_INT(waitpid(pid, &st, 0), pid);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    CHECK(acked >= 120);

    store *s = open_ok(path);
    for (int i = 0; i < acked; i++) {
        struct dec b;
        dec_make(&b, "ns1", "k:crash", "(i:1,)", i);
        check_stored(s, &b.d);
    }
    uint64_t total = count_all(s, "ns1");
    CHECK(total >= (uint64_t)acked && total <= (uint64_t)acked + 1);
    store_close(s);
    tmp_cleanup();
}

TEST(hundred_thousand_decisions_lookups_correct) {
    enum { N = 100000, BATCH = 5000 };
    const char *path = tmp_path("s.db");
    store *s = open_ok(path);
    struct dec *b = malloc(sizeof *b * BATCH);
    struct decision *ds = malloc(sizeof *ds * BATCH);
    CHECK(b != NULL && ds != NULL);
    for (int base = 0; base < N; base += BATCH) {
        for (int j = 0; j < BATCH; j++) {
            char kernel[32];
            snprintf(kernel, sizeof kernel, "k:%d", (base + j) % 100);
            dec_make(&b[j], "ns1", kernel, "(i:1,)", base + j);
            ds[j] = b[j].d;
        }
        CHECK_EQ_INT(store_put_decisions(s, ds, BATCH, NULL), 0);
    }
    CHECK_EQ_INT(count_all(s, "ns1"), N);
    for (int i = 0; i < N; i++) {
        struct dec want;
        char kernel[32];
        snprintf(kernel, sizeof kernel, "k:%d", i % 100);
        dec_make(&want, "ns1", kernel, "(i:1,)", i);
        check_stored(s, &want.d);
    }
    struct decision got;
    CHECK_EQ_INT(store_get_decision(s, "0000", &got), DETD_ENOTFOUND);
    /* A second writer still loses at this size. */
    struct dec again;
    dec_make(&again, "ns1", "k:7", "(i:1,)", 99907);
    again.d.config = "changed";
    CHECK_EQ_INT(store_put_decision(s, &again.d, NULL), DETD_EEXIST);
    struct seen sn;
    memset(&sn, 0, sizeof sn);
    CHECK_EQ_INT(store_each_decision(s, "ns1", "k:42", 0, collect_dec, &sn), 0);
    CHECK_EQ_INT(sn.n, N / 100);
    store_close(s);

    s = open_ok(path);
    struct dec want;
    dec_make(&want, "ns1", "k:7", "(i:1,)", 99907);
    check_stored(s, &want.d);
    CHECK_EQ_INT(count_all(s, NULL), N);
    store_close(s);
    free(b);
    free(ds);
    tmp_cleanup();
}

TEST(meta_set_get_replace_and_survive_reopen) {
    const char *path = tmp_path("m.db");
    store *s = open_ok(path);
    char *v = (char *)0x1;
    CHECK_EQ_INT(store_get_meta(s, "etcd_revision", &v), DETD_ENOTFOUND);
    CHECK(v == (char *)0x1);
    CHECK_EQ_INT(store_set_meta(s, "etcd_revision", "41"), 0);
    CHECK_EQ_INT(store_set_meta(s, "etcd_revision", "42"), 0);
    CHECK_EQ_INT(store_get_meta(s, "etcd_revision", &v), 0);
    CHECK_STR(v, "42");
    free(v);
    CHECK_EQ_INT(store_set_meta(s, NULL, "x"), DETD_EINVAL);
    CHECK_EQ_INT(store_set_meta(s, "x", NULL), DETD_EINVAL);
    CHECK_EQ_INT(store_get_meta(s, "x", NULL), DETD_EINVAL);
    store_close(s);
    s = open_ok(path);
    CHECK_EQ_INT(store_get_meta(s, "etcd_revision", &v), 0);
    CHECK_STR(v, "42");
    free(v);
    /* The schema's own entries are still there. */
    CHECK_EQ_INT(store_get_meta(s, "created_by", &v), 0);
    CHECK(strncmp(v, "detd ", 5) == 0);
    free(v);
    store_close(s);
    tmp_cleanup();
}

TEST(failed_passes_are_kept_and_reset_with_their_kernel) {
    store *s = open_ok(tmp_path("s.db"));
    const char *ids[] = {"fa", "fb", "fc"};
    const char *kernels[] = {"k:a", "k:b", "k:a"};
    const char *nss[] = {"ns1", "ns1", "ns2"};
    for (int i = 0; i < 3; i++) {
        struct store_failure f = {.id = (char *)ids[i],
                                  .ns = (char *)nss[i],
                                  .arch = "sm90",
                                  .kernel = (char *)kernels[i],
                                  .key = "[i:1]",
                                  .reason = "every candidate failed",
                                  .by_host = "h1",
                                  .by_pid = 40 + i,
                                  .by_rank = i,
                                  .at_ms = 1000 + i,
                                  .by_claimed_pid = 50 + i,
                                  .by_uid = 1000 + i,
                                  .by_node = "node-f"};
        CHECK_EQ_INT(store_put_failure(s, &f), 0);
    }
    struct store_failure got;
    CHECK_EQ_INT(store_get_failure(s, "fb", &got), 0);
    CHECK_STR(got.kernel, "k:b");
    CHECK_STR(got.reason, "every candidate failed");
    CHECK_STR(got.by_host, "h1");
    CHECK_EQ_INT(got.by_pid, 41);
    CHECK_EQ_INT(got.by_rank, 1);
    CHECK_EQ_INT(got.at_ms, 1001);
    CHECK_EQ_INT(got.by_claimed_pid, 51);
    CHECK_EQ_INT(got.by_uid, 1001);
    CHECK_STR(got.by_node, "node-f");
    store_failure_clear(&got);
    CHECK_EQ_INT(store_get_failure(s, "nope", &got), DETD_ENOTFOUND);
    /* A second failure of the same key replaces the first. */
    struct store_failure again = {.id = "fb",
                                  .ns = "ns1",
                                  .arch = "sm90",
                                  .kernel = "k:b",
                                  .key = "[i:1]",
                                  .reason = "again",
                                  .by_host = "h2",
                                  .by_pid = 9,
                                  .by_rank = 5,
                                  .at_ms = 2000,
                                  .by_uid = -1};
    CHECK_EQ_INT(store_put_failure(s, &again), 0);
    CHECK_EQ_INT(store_get_failure(s, "fb", &got), 0);
    CHECK_STR(got.reason, "again");
    CHECK_EQ_INT(got.by_uid, -1);
    CHECK_STR(got.by_node, "");
    store_failure_clear(&got);
    /* A uid no kernel reports is refused, not stored. */
    again.by_uid = -2;
    CHECK_EQ_INT(store_put_failure(s, &again), DETD_EINVAL);
    again.by_uid = (int64_t)UINT32_MAX + 1;
    CHECK_EQ_INT(store_put_failure(s, &again), DETD_EINVAL);
    /* A reset of a kernel forgets its failures (and only its, in its
     * namespace): the key is timed again. */
    uint64_t removed = 99;
    CHECK_EQ_INT(store_reset(s, "ns1", "k:a", &removed, NULL), 0);
    CHECK_EQ_INT(removed, 0); /* decisions: none */
    CHECK_EQ_INT(store_get_failure(s, "fa", &got), DETD_ENOTFOUND);
    CHECK_EQ_INT(store_get_failure(s, "fb", &got), 0);
    store_failure_clear(&got);
    CHECK_EQ_INT(store_get_failure(s, "fc", &got), 0);
    store_failure_clear(&got);
    CHECK_EQ_INT(store_reset(s, "ns1", NULL, &removed, NULL), 0);
    CHECK_EQ_INT(store_get_failure(s, "fb", &got), DETD_ENOTFOUND);
    CHECK_EQ_INT(store_get_failure(s, "fc", &got), 0);
    store_failure_clear(&got);
    store_close(s);
    tmp_cleanup();
}

TEST(migration_from_version_10_reads_decisions_without_timing) {
    const char *path = tmp_path("s.db");
    struct dec a;
    dec_make(&a, "ns1", "m:k@1", "(i:7,)", 7);
    store *s = open_ok(path);
    CHECK_EQ_INT(store_put_decision(s, &a.d, NULL), 0);
    store_close(s);
    store_fx_exec(path, STORE_FX_V10 "PRAGMA user_version = 10;");

    s = open_ok(path);
    struct decision got;
    CHECK_EQ_INT(store_get_decision(s, a.id, &got), 0);
    CHECK_STR(got.config, a.config);
    CHECK_STR(got.timing_json, ""); /* not recorded */
    decision_clear(&got);
    /* A new row keeps how it was timed; a skipped lock entry is kept. */
    struct dec b;
    dec_make(&b, "ns1", "m:k@1", "(i:8,)", 8);
    b.d.timing_json = "{\"driver\":\"none\"}";
    CHECK_EQ_INT(store_put_decision(s, &b.d, NULL), 0);
    CHECK_EQ_INT(store_get_decision(s, b.id, &got), 0);
    CHECK_STR(got.timing_json, "{\"driver\":\"none\"}");
    decision_clear(&got);
    char *file = NULL, *why = NULL;
    CHECK_EQ_INT(store_get_lock_skip(s, "ns1", a.id, &file, &why),
                 DETD_ENOTFOUND);
    CHECK_EQ_INT(store_put_lock_skip(s, "ns1", a.id, "lock:l.json",
                                     "driver: the lock says 12.8, this run "
                                     "12.9 (must match)",
                                     1),
                 0);
    CHECK_EQ_INT(store_get_lock_skip(s, "ns1", a.id, &file, &why), 0);
    CHECK_STR(file, "lock:l.json");
    CHECK_STR(why, "driver: the lock says 12.8, this run 12.9 (must match)");
    free(file);
    free(why);
    CHECK_EQ_INT(store_get_lock_skip(s, "ns2", a.id, &file, &why),
                 DETD_ENOTFOUND);
    store_close(s);
    char v[16];
    sql_on_side(path, "PRAGMA user_version", v, sizeof v);
    CHECK_STR(v, "11");
    tmp_cleanup();
}

TEST(migration_from_version_8_reads_failures_as_unknown_peer) {
    const char *path = tmp_path("s.db");
    store *s = open_ok(path);
    struct store_failure f = {.id = "fold",
                              .ns = "ns1",
                              .arch = "sm90",
                              .kernel = "m:k@1",
                              .key = "[i:1]",
                              .reason = "every candidate failed",
                              .by_host = "h1",
                              .by_pid = 77,
                              .by_rank = 2,
                              .at_ms = 1234};
    CHECK_EQ_INT(store_put_failure(s, &f), 0);
    store_close(s);
    /* The failures table as schema 8 had it, with the row. */
    store_fx_to_v8(path);

    s = open_ok(path);
    struct store_failure got;
    CHECK_EQ_INT(store_get_failure(s, "fold", &got), 0);
    CHECK_STR(got.reason, "every candidate failed");
    CHECK_STR(got.by_host, "h1");
    CHECK_EQ_INT(got.by_pid, 77); /* what the client wrote, then */
    CHECK_EQ_INT(got.by_rank, 2);
    CHECK_EQ_INT(got.at_ms, 1234);
    CHECK_EQ_INT(got.by_claimed_pid, 0);
    CHECK_EQ_INT(got.by_uid, -1);
    CHECK_STR(got.by_node, "");
    store_failure_clear(&got);
    /* A new row keeps who reported it beside the old one. */
    struct store_failure n = f;
    n.id = "fnew";
    n.by_claimed_pid = 78;
    n.by_uid = 4242;
    n.by_node = "node-9";
    CHECK_EQ_INT(store_put_failure(s, &n), 0);
    CHECK_EQ_INT(store_get_failure(s, "fnew", &got), 0);
    CHECK_EQ_INT(got.by_pid, 77);
    CHECK_EQ_INT(got.by_claimed_pid, 78);
    CHECK_EQ_INT(got.by_uid, 4242);
    CHECK_STR(got.by_node, "node-9");
    store_failure_clear(&got);
    store_close(s);
    char v[16];
    sql_on_side(path, "PRAGMA user_version", v, sizeof v);
    CHECK_STR(v, "11");

    /* A value no daemon writes is corruption, not a uid. */
    sql_on_side(path, "UPDATE failures SET by_uid = -7", NULL, 0);
    s = open_ok(path);
    CHECK_EQ_INT(store_get_failure(s, "fold", &got), DETD_ECORRUPT);
    store_close(s);
    tmp_cleanup();
}

int main(int argc, char **argv) {
    return runner_main(argc, argv);
}
