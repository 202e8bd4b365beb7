/*
 * Unit tests of the store's votes (store_vote.c), imported table entries
 * (store_import.c) and the migrations from schema versions 1 and 2: a
 * real database in a temporary directory per test. Tests may use sqlite3
 * directly to build or inspect the file.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdint.h>
#include <sys/stat.h>

#include <sqlite3.h>

#include "detd/client.h"
#include "detd/error.h"
#include "runner.h"
#include "data/store.h"
#include "store_fixture.h"

/* Run SQL (several statements) on a second connection; the text of the
 * first cell of the last row into ret when not NULL. */
static int side_cb(void *ctx, int n, char **vals, char **names) {
    (void)names;
    if (ctx != NULL && n > 0)
        snprintf(ctx, 64, "%s", vals[0] ? vals[0] : "(null)");
    return 0;
}

static void sql_side(const char *path, const char *sql, char ret[64]) {
    sqlite3 *db = NULL;
    CHECK_EQ_INT(sqlite3_open_v2(path, &db,
                                 SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
                                 NULL),
                 SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    char *err = NULL;
    int rc = sqlite3_exec(db, sql, side_cb, ret, &err);
    if (rc != SQLITE_OK)
        fprintf(stderr, "sql_side: %s\n", err ? err : "?");
    sqlite3_free(err);
    CHECK_EQ_INT(rc, SQLITE_OK);
    CHECK_EQ_INT(sqlite3_close(db), SQLITE_OK);
}

static struct store_vote vote_make(const char *id, const char *host,
                                   int32_t pid, const char *config) {
    return (struct store_vote){
        .id = id,
        .ns = "default",
        .arch = "sm90",
        .kernel = "m.sub:fn@0123456789abcdef",
        .key = "[i:128,s:\"torch.float32\"]",
        .table_key = "N=128|torch.float32",
        .candidates_fp = "fp",
        .config = config,
        .host = host,
        .pid = pid,
        .rank = pid % 8,
        .local_rank = pid % 8,
        .device = "NVIDIA H200",
        .timings_json = "[{\"config\":\"x\",\"ms\":[1.0],\"failed\":false}]",
        .triton_version = "3.6.0",
        .voted_at_ms = 1700000000000 + pid,
    };
}

struct seen {
    int n;
    int stop_after;
    uint64_t last_seq;
    char rows[32][200];
};

static int collect(void *ctx, const struct store_vote *v) {
    struct seen *sn = ctx;
    CHECK(v->seq > sn->last_seq); /* ordered by seq */
    sn->last_seq = v->seq;
    if (sn->n < 32)
        snprintf(sn->rows[sn->n], sizeof sn->rows[0],
                 "%s|%s|%d|%s|%s|%s|%s|%lld", v->id, v->host, v->pid, v->config,
                 v->kernel, v->table_key, v->device, (long long)v->voted_at_ms);
    sn->n++;
    return sn->stop_after != 0 && sn->n >= sn->stop_after;
}

static struct seen list(store *s, const char *ns, const char *arch,
                        const char *kernel, uint64_t after, uint32_t limit) {
    struct seen sn;
    memset(&sn, 0, sizeof sn);
    sn.last_seq = after;
    CHECK_EQ_INT(
        store_each_vote(s, ns, arch, kernel, after, limit, collect, &sn), 0);
    return sn;
}

TEST(insert_then_list_returns_every_field) {
    const char *path = tmp_path("v.db");
    store *s = open_ok(path);
    struct store_vote v = vote_make("id1", "node-a", 101, "BLOCK=16");
    int replaced = -1;
    uint64_t total = 0;
    CHECK_EQ_INT(store_put_vote(s, &v, 0, &replaced, &total), 0);
    CHECK_EQ_INT(replaced, 0);
    CHECK_EQ_INT(total, 1);
    store_close(s);

    s = open_ok(path); /* durable */
    struct seen sn = list(s, NULL, NULL, NULL, 0, 0);
    CHECK_EQ_INT(sn.n, 1);
    CHECK_STR(sn.rows[0], "id1|node-a|101|BLOCK=16|m.sub:fn@0123456789abcdef|"
                          "N=128|torch.float32|NVIDIA H200|1700000000101");
    uint64_t n = 0;
    CHECK_EQ_INT(store_count_votes(s, "default", &n), 0);
    CHECK_EQ_INT(n, 1);
    CHECK_EQ_INT(store_count_votes(s, "other", &n), 0);
    CHECK_EQ_INT(n, 0);
    store_close(s);
    tmp_cleanup();
}

TEST(same_host_pid_key_replaces_others_add) {
    store *s = open_ok(tmp_path("v.db"));
    struct store_vote a = vote_make("id1", "node-a", 101, "BLOCK=16");
    struct store_vote b = vote_make("id1", "node-a", 102, "BLOCK=32");
    struct store_vote c = vote_make("id1", "node-b", 101, "BLOCK=32");
    struct store_vote d = vote_make("id2", "node-a", 101, "BLOCK=64");
    int replaced = -1;
    uint64_t total = 0;
    CHECK_EQ_INT(store_put_vote(s, &a, 0, &replaced, &total), 0);
    CHECK_EQ_INT(store_put_vote(s, &b, 0, &replaced, &total), 0);
    CHECK_EQ_INT(replaced, 0);
    CHECK_EQ_INT(store_put_vote(s, &c, 0, &replaced, &total), 0);
    CHECK_EQ_INT(replaced, 0);
    CHECK_EQ_INT(store_put_vote(s, &d, 0, &replaced, &total), 0);
    CHECK_EQ_INT(replaced, 0);
    CHECK_EQ_INT(total, 4);
    /* node-a pid 101 votes again on id1: its first vote is replaced. */
    struct store_vote a2 = vote_make("id1", "node-a", 101, "BLOCK=128");
    a2.voted_at_ms = 1800000000000;
    CHECK_EQ_INT(store_put_vote(s, &a2, 0, &replaced, &total), 0);
    CHECK_EQ_INT(replaced, 1);
    CHECK_EQ_INT(total, 4);
    struct seen sn = list(s, "default", "sm90", NULL, 0, 0);
    CHECK_EQ_INT(sn.n, 4);
    /* The replacement comes last (a new seq) and holds the new config. */
    CHECK_STR(sn.rows[3], "id1|node-a|101|BLOCK=128|m.sub:fn@0123456789abcdef|"
                          "N=128|torch.float32|NVIDIA H200|1800000000000");
    for (int i = 0; i < 3; i++)
        CHECK(strstr(sn.rows[i], "BLOCK=16") == NULL);
    store_close(s);
    tmp_cleanup();
}

TEST(cap_refuses_new_votes_but_accepts_replacements) {
    store *s = open_ok(tmp_path("v.db"));
    char id[16];
    for (int i = 0; i < 3; i++) {
        snprintf(id, sizeof id, "id%d", i);
        struct store_vote v = vote_make(id, "node-a", 7, "BLOCK=16");
        CHECK_EQ_INT(store_put_vote(s, &v, 3, NULL, NULL), 0);
    }
    struct store_vote over = vote_make("id9", "node-a", 7, "BLOCK=16");
    uint64_t total = 99;
    int replaced = -1;
    CHECK_EQ_INT(store_put_vote(s, &over, 3, &replaced, &total), DETD_ELIMIT);
    CHECK_EQ_INT(total, 99); /* untouched on failure */
    CHECK(strstr(store_errmsg(s), "full") != NULL);
    CHECK(strstr(store_errmsg(s), "3 votes") != NULL);
    /* Nothing was written. */
    CHECK_EQ_INT(list(s, NULL, NULL, NULL, 0, 0).n, 3);
    /* A replacement does not grow the store: accepted when full. */
    struct store_vote again = vote_make("id1", "node-a", 7, "BLOCK=32");
    CHECK_EQ_INT(store_put_vote(s, &again, 3, &replaced, &total), 0);
    CHECK_EQ_INT(replaced, 1);
    CHECK_EQ_INT(total, 3);
    store_close(s);
    tmp_cleanup();
}

TEST(filters_and_paging) {
    store *s = open_ok(tmp_path("v.db"));
    char id[16];
    for (int i = 0; i < 10; i++) {
        snprintf(id, sizeof id, "id%d", i);
        struct store_vote v = vote_make(id, "node-a", 7, "BLOCK=16");
        if (i % 2)
            v.kernel = "m.sub:fn@ffffffffffffffff"; /* another code version */
        if (i == 9) {
            v.kernel = "m.sub:fnx@0123456789abcdef"; /* not a version of fn */
            v.arch = "sm100";
        }
        if (i == 8)
            v.ns = "other";
        CHECK_EQ_INT(store_put_vote(s, &v, 0, NULL, NULL), 0);
    }
    CHECK_EQ_INT(list(s, NULL, NULL, NULL, 0, 0).n, 10);
    CHECK_EQ_INT(list(s, "default", NULL, NULL, 0, 0).n, 9);
    CHECK_EQ_INT(list(s, NULL, "sm100", NULL, 0, 0).n, 1);
    /* "module:qualname" matches every code version, not other names. */
    CHECK_EQ_INT(list(s, NULL, NULL, "m.sub:fn", 0, 0).n, 9);
    CHECK_EQ_INT(list(s, NULL, NULL, "m.sub:fn@ffffffffffffffff", 0, 0).n, 4);
    CHECK_EQ_INT(list(s, NULL, NULL, "m.sub:f", 0, 0).n, 0);
    /* Pages of 4 cover everything once. */
    uint64_t after = 0;
    int total = 0, pages = 0;
    for (;;) {
        struct seen sn = list(s, NULL, NULL, NULL, after, 4);
        if (sn.n == 0)
            break;
        CHECK(sn.n <= 4);
        total += sn.n;
        after = sn.last_seq;
        pages++;
    }
    CHECK_EQ_INT(total, 10);
    CHECK_EQ_INT(pages, 3);
    uint64_t removed = 0;
    CHECK_EQ_INT(store_reset_votes(s, "default", "m.sub:fn", &removed), 0);
    CHECK_EQ_INT(removed, 8);
    CHECK_EQ_INT(list(s, NULL, NULL, NULL, 0, 0).n, 2);
    store_close(s);
    tmp_cleanup();
}

TEST(put_vote_rejects_bad_input_and_stores_nothing) {
    store *s = open_ok(tmp_path("v.db"));
    struct store_vote v = vote_make("id1", "node-a", 7, "BLOCK=16");
    v.config = NULL;
    CHECK_EQ_INT(store_put_vote(s, &v, 0, NULL, NULL), DETD_EINVAL);
    CHECK(strstr(store_errmsg(s), "config") != NULL);
    static char big[DETD_MAX_MESSAGE_BYTES + 2];
    memset(big, 'x', sizeof big - 1);
    v = vote_make("id1", "node-a", 7, "BLOCK=16");
    v.timings_json = big;
    CHECK_EQ_INT(store_put_vote(s, &v, 0, NULL, NULL), DETD_ELIMIT);
    CHECK(strstr(store_errmsg(s), "timings") != NULL);
    CHECK_EQ_INT(list(s, NULL, NULL, NULL, 0, 0).n, 0);
    CHECK_EQ_INT(store_put_vote(NULL, &v, 0, NULL, NULL), DETD_EINVAL);
    store_close(s);
    tmp_cleanup();
}

/* The schema of version 1 as released (store.c's first migration). */
static const char schema_v1[] =
    "CREATE TABLE meta ("
    " name TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL);"
    "INSERT INTO meta(name, value) VALUES ('created_at_ms', '1700000000000'),"
    " ('created_by', 'detd 0.1.0'), ('schema_version', '1');"
    "CREATE TABLE decisions ("
    " id TEXT PRIMARY KEY NOT NULL, ns TEXT NOT NULL,"
    " arch TEXT NOT NULL, kernel TEXT NOT NULL, key TEXT NOT NULL,"
    " candidates_fp TEXT NOT NULL, n_candidates INTEGER NOT NULL,"
    " config TEXT NOT NULL, source INTEGER NOT NULL,"
    " claim_id INTEGER NOT NULL, by_host TEXT NOT NULL,"
    " by_pid INTEGER NOT NULL, by_rank INTEGER NOT NULL,"
    " by_local_rank INTEGER NOT NULL, by_device TEXT NOT NULL,"
    " by_arch TEXT NOT NULL, triton_version TEXT NOT NULL,"
    " timings_json TEXT NOT NULL, table_file TEXT NOT NULL,"
    " decided_at_ms INTEGER NOT NULL);"
    "CREATE INDEX decisions_ns_kernel_key ON decisions(ns, kernel, key);"
    "CREATE TABLE observations ("
    " id TEXT NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL,"
    " ns TEXT NOT NULL, arch TEXT NOT NULL, kernel TEXT NOT NULL,"
    " key TEXT NOT NULL, config TEXT NOT NULL, source INTEGER NOT NULL,"
    " governed INTEGER NOT NULL, chaos INTEGER NOT NULL,"
    " rank INTEGER NOT NULL, local_rank INTEGER NOT NULL,"
    " device TEXT NOT NULL, at_ms INTEGER NOT NULL,"
    " PRIMARY KEY (id, host, pid));"
    "CREATE INDEX observations_ns_id ON observations(ns, id);"
    "INSERT INTO decisions VALUES ('d1', 'default', 'sm90', 'm:k@1',"
    " '[i:1]', 'fp', 2, 'BLOCK=16,num_warps=4,num_stages=3,num_ctas=1', 1,"
    " 7, 'node-a', 11, 0, 0, 'NVIDIA H200', 'sm90', '3.6.0', '[]', '',"
    " 1700000000000);"
    "PRAGMA user_version = 1; PRAGMA application_id = 1684370532;";

TEST(migration_from_version_1_keeps_decisions_and_adds_votes) {
    const char *path = tmp_path("v1.db");
    sql_side(path, schema_v1, NULL);
    char v[64];
    sql_side(path, "PRAGMA user_version", v);
    CHECK_STR(v, "1");

    store *s = open_ok(path);
    struct decision d;
    memset(&d, 0, sizeof d);
    CHECK_EQ_INT(store_get_decision(s, "d1", &d), 0);
    CHECK_STR(d.config, "BLOCK=16,num_warps=4,num_stages=3,num_ctas=1");
    decision_clear(&d);
    struct store_vote vt = vote_make("d1", "node-a", 7, "BLOCK=16");
    CHECK_EQ_INT(store_put_vote(s, &vt, 0, NULL, NULL), 0);
    CHECK_EQ_INT(list(s, NULL, NULL, NULL, 0, 0).n, 1);
    store_close(s);

    sql_side(path, "PRAGMA user_version", v);
    CHECK_STR(v, "11");
    sql_side(path, "SELECT value FROM meta WHERE name = 'schema_version'", v);
    CHECK_STR(v, "11");
    sql_side(path,
             "SELECT count(*) FROM sqlite_schema WHERE name IN"
             " ('votes', 'votes_ns_arch_kernel')",
             v);
    CHECK_STR(v, "2");
    /* The creation record of the old file is kept. */
    sql_side(path, "SELECT value FROM meta WHERE name = 'created_by'", v);
    CHECK_STR(v, "detd 0.1.0");
    tmp_cleanup();
}

TEST(corrupt_vote_rows_are_rejected) {
    const char *path = tmp_path("v.db");
    store *s = open_ok(path);
    struct store_vote v = vote_make("id1", "node-a", 7, "BLOCK=16");
    CHECK_EQ_INT(store_put_vote(s, &v, 0, NULL, NULL), 0);
    store_close(s);
    sql_side(path, "UPDATE votes SET pid = 'seven'", NULL);
    s = open_ok(path);
    struct seen sn;
    memset(&sn, 0, sizeof sn);
    CHECK_EQ_INT(store_each_vote(s, NULL, NULL, NULL, 0, 0, collect, &sn),
                 DETD_ECORRUPT);
    CHECK(strstr(store_errmsg(s), "pid") != NULL);
    store_close(s);
    tmp_cleanup();
}

/* ---- imported table entries ---- */

static struct store_import imp(const char *ns, const char *kernel,
                               const char *key, const char *config,
                               const char *file) {
    return (struct store_import){ns, "sm90", kernel, key,
                                 "", config, file,   1700000000000};
}

struct found_imports {
    char got[8][160];
    size_t n;
};

static int found_cb(void *ctx, const struct store_import *v) {
    struct found_imports *f = ctx;
    if (f->n < 8)
        snprintf(f->got[f->n++], 160, "%s|%s|%s|%s", v->kernel, v->key,
                 v->config, v->file);
    return 0;
}

TEST(imports_are_added_replaced_or_left_and_found_by_name_and_key) {
    const char *path = tmp_path("i.db");
    store *s = open_ok(path);
    struct store_import a[3] = {
        imp("job", "m:f", "[i:1]", "A=1,num_warps=4,num_stages=1,num_ctas=1",
            "t1.json"),
        imp("job", "f", "*", "A=2,num_warps=4,num_stages=1,num_ctas=1",
            "t1.json"),
        imp("other", "m:f", "[i:1]", "A=3,num_warps=4,num_stages=1,num_ctas=1",
            "t1.json"),
    };
    enum store_import_result res[3];
    char *old[3];
    CHECK_EQ_INT(store_put_imports(s, a, 3, res, old), 0);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ_INT(res[i], STORE_IMPORT_ADDED);
        CHECK(old[i] == NULL);
    }
    /* Again: unchanged; another config for one entry: replaced, naming the
     * old config and file. */
    struct store_import b[2] = {
        a[0], imp("job", "f", "*", "A=9,num_warps=4,num_stages=1,num_ctas=1",
                  "t2.json")};
    CHECK_EQ_INT(store_put_imports(s, b, 2, res, old), 0);
    CHECK_EQ_INT(res[0], STORE_IMPORT_UNCHANGED);
    CHECK_EQ_INT(res[1], STORE_IMPORT_REPLACED);
    CHECK(old[0] == NULL);
    CHECK_STR(old[1], "A=2,num_warps=4,num_stages=1,num_ctas=1\tt1.json");
    free(old[1]);
    uint64_t n = 0;
    CHECK_EQ_INT(store_count_imports(s, "job", &n), 0);
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(store_count_imports(s, NULL, &n), 0);
    CHECK_EQ_INT(n, 3);
    /* Found by any of the names and keys, in its namespace only. */
    const char *kernels[] = {"m:f@abc", "m:f", "m.f", "f"};
    const char *keys[] = {"[i:1]", "*"};
    struct found_imports f = {0};
    CHECK_EQ_INT(
        store_find_imports(s, "job", "sm90", kernels, 4, keys, 2, found_cb, &f),
        0);
    CHECK_EQ_INT(f.n, 2);
    int saw_exact = 0, saw_star = 0;
    for (size_t i = 0; i < f.n; i++) {
        saw_exact |= strcmp(f.got[i], "m:f|[i:1]|A=1,num_warps=4,num_stages=1,"
                                      "num_ctas=1|t1.json") == 0;
        saw_star |= strcmp(f.got[i], "f|*|A=9,num_warps=4,num_stages=1,"
                                     "num_ctas=1|t2.json") == 0;
    }
    CHECK(saw_exact && saw_star);
    memset(&f, 0, sizeof f);
    CHECK_EQ_INT(store_find_imports(s, "job", "sm100", kernels, 4, keys, 2,
                                    found_cb, &f),
                 0);
    CHECK_EQ_INT(f.n, 0);
    /* Reset one namespace: the other keeps its entry. */
    uint64_t removed = 0;
    CHECK_EQ_INT(store_reset_imports(s, "job", NULL, &removed), 0);
    CHECK_EQ_INT(removed, 2);
    CHECK_EQ_INT(store_count_imports(s, NULL, &n), 0);
    CHECK_EQ_INT(n, 1);
    /* Bad arguments: nothing stored. */
    struct store_import bad = a[0];
    bad.config = NULL;
    CHECK_EQ_INT(store_put_imports(s, &bad, 1, NULL, NULL), DETD_EINVAL);
    CHECK(strstr(store_errmsg(s), "entry 0") != NULL);
    store_close(s);
    tmp_cleanup();
}

TEST(an_import_batch_is_all_or_nothing) {
    const char *path = tmp_path("i.db");
    store *s = open_ok(path);
    static char big[DETD_MAX_MESSAGE_BYTES + 2];
    memset(big, 'x', sizeof big - 1);
    struct store_import a[2] = {
        imp("job", "m:f", "[i:1]", "A=1,num_warps=4,num_stages=1,num_ctas=1",
            "t.json"),
        imp("job", "m:f", "[i:2]", big, "t.json"),
    };
    CHECK_EQ_INT(store_put_imports(s, a, 2, NULL, NULL), DETD_ELIMIT);
    uint64_t n = 1;
    CHECK_EQ_INT(store_count_imports(s, NULL, &n), 0);
    CHECK_EQ_INT(n, 0);
    store_close(s);
    tmp_cleanup();
}

TEST(migration_from_version_2_adds_imports_and_keeps_votes) {
    const char *path = tmp_path("v2.db");
    /* Version 1 as released, then version 2's step as released. */
    sql_side(path, schema_v1, NULL);
    sql_side(path,
             "CREATE TABLE votes ("
             " seq INTEGER PRIMARY KEY AUTOINCREMENT,"
             " id TEXT NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL,"
             " ns TEXT NOT NULL, arch TEXT NOT NULL, kernel TEXT NOT NULL,"
             " key TEXT NOT NULL, table_key TEXT NOT NULL,"
             " candidates_fp TEXT NOT NULL, config TEXT NOT NULL,"
             " rank INTEGER NOT NULL, local_rank INTEGER NOT NULL,"
             " device TEXT NOT NULL, timings_json TEXT NOT NULL,"
             " triton_version TEXT NOT NULL, voted_at_ms INTEGER NOT NULL,"
             " UNIQUE (id, host, pid));"
             "CREATE INDEX votes_ns_arch_kernel ON votes(ns, arch, kernel);"
             "INSERT INTO votes VALUES (NULL, 'd1', 'node-a', 7, 'default',"
             " 'sm90', 'm:k@1', '[i:1]', '', 'fp', 'BLOCK=16', 0, 0, '', '[]',"
             " '', 1700000000000);"
             "UPDATE meta SET value = '2' WHERE name = 'schema_version';"
             "PRAGMA user_version = 2;",
             NULL);
    store *s = open_ok(path);
    CHECK_EQ_INT(list(s, NULL, NULL, NULL, 0, 0).n, 1);
    struct store_import a = imp("default", "m:k", "*",
                                "A=1,num_warps=4,num_stages=1,num_ctas=1", "t");
    CHECK_EQ_INT(store_put_imports(s, &a, 1, NULL, NULL), 0);
    store_close(s);
    char v[64];
    sql_side(path, "PRAGMA user_version", v);
    CHECK_STR(v, "11");
    sql_side(path, "SELECT count(*) FROM imports", v);
    CHECK_STR(v, "1");
    tmp_cleanup();
}

int main(int argc, char **argv) {
    return runner_main(argc, argv);
}
