/*
 * Unit tests of the store's integrity check and repair (store_repair.c):
 * real files, real damage (a b-tree page overwritten), every table.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "runner.h"
#include "data/store.h"
#include "detd/client.h"
#include "detd/error.h"

#include "store_fixture.h"

#define N_DEC 400

struct dec {
    char id[65], key[32], config[64], timings[160];
    struct decision d;
};

static void dec_make(struct dec *b, int i) {
    memset(b, 0, sizeof *b);
    snprintf(b->id, sizeof b->id, "%064x", (unsigned)i + 1);
    snprintf(b->key, sizeof b->key, "N=%d|torch.float32", i);
    snprintf(b->config, sizeof b->config, "BLOCK=%d,num_warps=%d",
             16 << (i % 6), 1 << (i % 4));
    snprintf(b->timings, sizeof b->timings,
             "[{\"config\":\"%s\",\"ms\":[0.%04d],\"failed\":false}]",
             b->config, i);
    b->d = (struct decision){
        .id = b->id,
        .ns = "default",
        .arch = "sm90",
        .kernel = "m:row_sum@00ff",
        .key = b->key,
        .candidates_fp = "fp",
        .n_candidates = 6,
        .config = b->config,
        .source = DETD_SOURCE_TIMED,
        .by_host = "node-a",
        .by_pid = 100 + i,
        .timings_json = b->timings,
        .decided_at_ms = 1700000000000 + i,
    };
}

/* A store with N_DEC decisions, 3 votes, 2 imports, 5 observations and an
 * etcd revision; closed. */
static void fill_store(const char *path) {
    store *s = open_ok(path);
    for (int i = 0; i < N_DEC; i++) {
        struct dec b;
        dec_make(&b, i);
        CHECK_EQ_INT(store_put_decision(s, &b.d, NULL), 0);
    }
    for (int i = 0; i < 3; i++) {
        struct store_vote v = {.id = "v",
                               .ns = "default",
                               .arch = "sm90",
                               .kernel = "m:k@1",
                               .key = "N=1",
                               .config = "BLOCK=16",
                               .host = "h",
                               .pid = i};
        CHECK_EQ_INT(store_put_vote(s, &v, 0, NULL, NULL), 0);
    }
    struct store_import im[2] = {
        {"default", "sm90", "m:k", "N=1", "", "BLOCK=16", "a.json", 1},
        {"default", "sm90", "m:k", "N=2", "", "BLOCK=32", "a.json", 2},
    };
    CHECK_EQ_INT(store_put_imports(s, im, 2, NULL, NULL), 0);
    struct store_observation o[5];
    char ids[5][8];
    for (int i = 0; i < 5; i++) {
        snprintf(ids[i], sizeof ids[i], "o%d", i);
        o[i] = (struct store_observation){.id = ids[i],
                                          .ns = "default",
                                          .config = "BLOCK=16",
                                          .host = "h",
                                          .pid = i,
                                          .governed = 1};
    }
    CHECK_EQ_INT(store_put_observations(s, o, 5), 0);
    for (int i = 0; i < 2; i++) {
        char id[16];
        snprintf(id, sizeof id, "failed%d", i);
        struct store_failure f = {.id = id,
                                  .ns = "default",
                                  .arch = "sm90",
                                  .kernel = "m:k@0123456789abcdef",
                                  .key = "[i:1]",
                                  .reason = "no candidate has a valid timing",
                                  .by_host = "h",
                                  .by_pid = 7,
                                  .by_rank = 1,
                                  .at_ms = 1000 + i,
                                  .by_claimed_pid = 8,
                                  .by_uid = 1000,
                                  .by_node = "node-r"};
        CHECK_EQ_INT(store_put_failure(s, &f), 0);
    }
    CHECK_EQ_INT(store_set_meta(s, "etcd_revision", "42"), 0);
    store_close(s);
}

/* One integer from a query on a side connection. */
static int64_t side_int(const char *path, const char *sql) {
    sqlite3 *db = NULL;
    CHECK_EQ_INT(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL),
                 SQLITE_OK);
    sqlite3_stmt *st = NULL;
    CHECK_EQ_INT(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    CHECK_EQ_INT(sqlite3_step(st), SQLITE_ROW);
    int64_t v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

/* Overwrite page n of the file with garbage. */
static void smash_page(const char *path, int64_t n, int64_t page_size) {
    char *junk = malloc((size_t)page_size);
    CHECK(junk != NULL);
    for (int64_t i = 0; i < page_size; i++)
        junk[i] = (char)(i * 151 + 7);
    int fd = open(path, O_WRONLY);
    CHECK(fd >= 0);
    CHECK_EQ_INT(pwrite(fd, junk, (size_t)page_size, (n - 1) * page_size),
                 page_size);
    CHECK_EQ_INT(fsync(fd), 0);
    close(fd);
    free(junk);
}

/* Every decision the store holds is one of those written, byte-equal. */
static int each_equal(void *ctx, const struct decision *d) {
    int *n = ctx;
    unsigned idx = 0;
    CHECK(sscanf(d->id, "%x", &idx) == 1 && idx >= 1 && idx <= N_DEC);
    struct dec b;
    dec_make(&b, (int)idx - 1);
    CHECK_STR(d->config, b.config);
    CHECK_STR(d->key, b.key);
    CHECK_STR(d->timings_json, b.timings);
    (*n)++;
    return 0;
}

TEST(check_passes_a_sound_store) {
    const char *path = tmp_path("detd.sqlite");
    fill_store(path);
    store *s = open_ok(path);
    CHECK_EQ_INT(store_check(s), 0);
    store_close(s);
}

TEST(repair_of_a_sound_store_keeps_every_row_of_every_table) {
    char path[512], aside[600];
    snprintf(path, sizeof path, "%s", tmp_path("detd.sqlite"));
    snprintf(aside, sizeof aside, "%s.corrupt-1", path);
    fill_store(path);
    struct store_repair_report rep;
    char *msg = NULL;
    CHECK_EQ_INT(store_repair(path, aside, &rep, &msg), 0);
    CHECK(msg == NULL);
    const char *names[] = {"decisions", "votes", "imports", "observations",
                           "failures"};
    const uint64_t want[] = {N_DEC, 3, 2, 5, 2};
    for (int i = 0; i < STORE_REPAIR_TABLES; i++) {
        CHECK_STR(rep.t[i].table, names[i]);
        CHECK_EQ_INT(rep.t[i].kept, want[i]);
        CHECK_EQ_INT(rep.t[i].lost, 0);
        CHECK_EQ_INT(rep.t[i].lost_unknown, 0);
    }
    store *s = open_ok(path);
    CHECK_EQ_INT(store_check(s), 0);
    int n = 0;
    CHECK_EQ_INT(store_each_decision(s, NULL, NULL, 0, each_equal, &n), 0);
    CHECK_EQ_INT(n, N_DEC);
    uint64_t votes = 0, imports = 0;
    CHECK_EQ_INT(store_count_votes(s, NULL, &votes), 0);
    CHECK_EQ_INT(store_count_imports(s, NULL, &imports), 0);
    CHECK_EQ_INT(votes, 3);
    CHECK_EQ_INT(imports, 2);
    /* The etcd revision is not carried over: a full resync follows. */
    char *rev = NULL;
    CHECK_EQ_INT(store_get_meta(s, "etcd_revision", &rev), DETD_ENOTFOUND);
    store_close(s);
    /* The original is kept, whole. */
    CHECK_EQ_INT(side_int(aside, "SELECT count(*) FROM decisions"), N_DEC);
    unlink(aside);
}

/* A row of an older schema reads as the migration would have filled it. */
static int each_unknown_peer(void *ctx, const struct decision *d) {
    int *n = ctx;
    CHECK_EQ_INT(d->by_uid, -1);
    CHECK_STR(d->by_node, "");
    CHECK_EQ_INT(d->by_claimed_pid, 0);
    (*n)++;
    return 0;
}

TEST(repair_of_an_older_schema_fills_the_columns_it_lacks) {
    char path[512], aside[600];
    snprintf(path, sizeof path, "%s", tmp_path("detd.sqlite"));
    snprintf(aside, sizeof aside, "%s.corrupt-1", path);
    fill_store(path);
    store_fx_to_v7(path);
    struct store_repair_report rep;
    char *msg = NULL;
    int rc = store_repair(path, aside, &rep, &msg);
    if (rc != 0)
        fprintf(stderr, "store_repair: %s\n", msg ? msg : "?");
    CHECK_EQ_INT(rc, 0);
    CHECK_STR(rep.t[0].table, "decisions");
    CHECK_EQ_INT(rep.t[0].kept, N_DEC);
    CHECK_EQ_INT(rep.t[0].lost, 0);
    store *s = open_ok(path);
    int n = 0, m = 0;
    CHECK_EQ_INT(store_each_decision(s, NULL, NULL, 0, each_equal, &n), 0);
    CHECK_EQ_INT(store_each_decision(s, NULL, NULL, 0, each_unknown_peer, &m),
                 0);
    CHECK_EQ_INT(n, N_DEC);
    CHECK_EQ_INT(m, N_DEC);
    CHECK_STR(rep.t[4].table, "failures");
    CHECK_EQ_INT(rep.t[4].kept, 2);
    CHECK_EQ_INT(rep.t[4].lost, 0);
    struct store_failure f;
    CHECK_EQ_INT(store_get_failure(s, "failed1", &f), 0);
    CHECK_EQ_INT(f.by_pid, 7);
    CHECK_EQ_INT(f.by_claimed_pid, 0);
    CHECK_EQ_INT(f.by_uid, -1);
    CHECK_STR(f.by_node, "");
    store_failure_clear(&f);
    store_close(s);
    unlink(aside);
}

TEST(damaged_page_fails_the_check_and_repair_keeps_the_rest) {
    char path[512], aside[600];
    snprintf(path, sizeof path, "%s", tmp_path("detd.sqlite"));
    snprintf(aside, sizeof aside, "%s.corrupt-2", path);
    fill_store(path);
    int64_t psize = side_int(path, "PRAGMA page_size");
    int64_t leaves = side_int(path, "SELECT count(*) FROM dbstat"
                                    " WHERE name = 'decisions'"
                                    " AND pagetype = 'leaf'");
    CHECK(leaves >= 3);
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT pageno FROM dbstat WHERE name = 'decisions'"
             " AND pagetype = 'leaf' ORDER BY path LIMIT 1 OFFSET %lld",
             (long long)(leaves / 2));
    int64_t page = side_int(path, sql);
    snprintf(sql, sizeof sql, "SELECT ncell FROM dbstat WHERE pageno = %lld",
             (long long)page);
    int64_t on_page = side_int(path, sql);
    CHECK(on_page > 0);
    smash_page(path, page, psize);

    store *s = open_ok(path); /* the header and schema are intact */
    CHECK_EQ_INT(store_check(s), DETD_ECORRUPT);
    CHECK(strstr(store_errmsg(s), "integrity check") != NULL);
    store_close(s);

    struct store_repair_report rep;
    char *msg = NULL;
    int rc = store_repair(path, aside, &rep, &msg);
    if (rc != 0)
        fprintf(stderr, "store_repair: %s\n", msg ? msg : "(none)");
    CHECK_EQ_INT(rc, 0);
    CHECK_EQ_INT(rep.t[0].kept, N_DEC - on_page);
    CHECK_EQ_INT(rep.t[0].lost, on_page);
    CHECK_EQ_INT(rep.t[0].lost_unknown, 0);
    CHECK_EQ_INT(rep.t[1].kept, 3);
    CHECK_EQ_INT(rep.t[3].kept, 5);
    s = open_ok(path);
    CHECK_EQ_INT(store_check(s), 0);
    int n = 0;
    CHECK_EQ_INT(store_each_decision(s, NULL, NULL, 0, each_equal, &n), 0);
    CHECK_EQ_INT(n, N_DEC - on_page);
    store_close(s);
    /* The damaged file is kept aside, still damaged. */
    struct stat st;
    CHECK_EQ_INT(stat(aside, &st), 0);
    CHECK(st.st_size > 0);
    unlink(aside);
}

TEST(repair_of_a_missing_file_fails_naming_it) {
    char path[512];
    snprintf(path, sizeof path, "%s", tmp_path("absent.sqlite"));
    struct store_repair_report rep;
    char *msg = NULL;
    int rc = store_repair(path, "/nonexistent-dir/x", &rep, &msg);
    CHECK(rc < 0);
    CHECK(msg != NULL && strstr(msg, path) != NULL);
    free(msg);
}

int main(int argc, char **argv) {
    return runner_main(argc, argv);
}
