/*
 * store_fixture: a temporary directory per test and a checked store_open()
 * for the store's unit tests (include once per test executable, after
 * runner.h and store.h).
 *
 * The directory is removed by tmp_cleanup() at the end of each test (the
 * runner leaves a passing test through _exit(), which skips atexit) and at
 * exit after a failed CHECK.
 */
#ifndef DETD_TEST_STORE_FIXTURE_H
#define DETD_TEST_STORE_FIXTURE_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

static char tmp_dir[256];

static void tmp_cleanup(void) {
    if (tmp_dir[0] == '\0')
        return;
    DIR *d = opendir(tmp_dir);
    if (d != NULL) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            char p[512];
            snprintf(p, sizeof p, "%s/%s", tmp_dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(tmp_dir);
    tmp_dir[0] = '\0';
}

/* A fresh directory for this test; returns the path of "name" in it. */
static const char *tmp_path(const char *name) {
    static char path[512];
    if (tmp_dir[0] == '\0') {
        const char *base = getenv("TMPDIR");
        snprintf(tmp_dir, sizeof tmp_dir, "%s/detd-store-XXXXXX",
                 base != NULL && base[0] != '\0' ? base : "/tmp");
        CHECK(mkdtemp(tmp_dir) != NULL);
        atexit(tmp_cleanup);
    }
    snprintf(path, sizeof path, "%s/%s", tmp_dir, name);
    return path;
}

/* SQL that takes the decisions table of a fresh store back to schema 7
 * (before who the daemon saw was kept); the caller sets user_version. */
#define STORE_FX_DECISIONS_V7                                                  \
    "ALTER TABLE decisions DROP COLUMN by_uid;"                                \
    "ALTER TABLE decisions DROP COLUMN by_node;"                               \
    "ALTER TABLE decisions DROP COLUMN by_claimed_pid;"

/* SQL that takes a fresh store back to schema 10 (before how a decision
 * was timed and the skipped lock entries were kept). */
#define STORE_FX_V10                                                           \
    "ALTER TABLE decisions DROP COLUMN timing_json;"                           \
    "DROP TABLE lock_skips;"

/* SQL that takes the decisions table of a fresh store back to schema 9
 * (before the timing process's job was kept). */
#define STORE_FX_DECISIONS_V9                                                  \
    STORE_FX_V10                                                               \
    "ALTER TABLE decisions DROP COLUMN by_world_size;"                         \
    "ALTER TABLE decisions DROP COLUMN by_job;"

/* SQL that takes a fresh store back to schema 8: the decisions table to
 * 9, the failures table to 8 (before who the daemon saw report a failed
 * pass was kept). */
#define STORE_FX_FAILURES_V8                                                   \
    STORE_FX_DECISIONS_V9                                                      \
    "ALTER TABLE failures DROP COLUMN claimed_pid;"                            \
    "ALTER TABLE failures DROP COLUMN by_uid;"                                 \
    "ALTER TABLE failures DROP COLUMN by_node;"

static inline void store_fx_exec(const char *path, const char *sql) {
    sqlite3 *db = NULL;
    CHECK_EQ_INT(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL),
                 SQLITE_OK);
    CHECK_EQ_INT(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    CHECK_EQ_INT(sqlite3_close(db), SQLITE_OK);
}

/* Take the closed store at path back to schema 8, as detd of that
 * version left it. */
static inline void store_fx_to_v8(const char *path) {
    store_fx_exec(path, STORE_FX_FAILURES_V8 "PRAGMA user_version = 8;");
}

/* Take the closed store at path back to schema 7, as detd of that
 * version left it. */
static inline void store_fx_to_v7(const char *path) {
    store_fx_exec(path, STORE_FX_FAILURES_V8 STORE_FX_DECISIONS_V7
                  "PRAGMA user_version = 7;");
}

/* Open the store at path; the test fails unless that succeeds cleanly. */
static store *open_ok(const char *path) {
    store *s = NULL;
    char *msg = NULL;
    int rc = store_open(path, &s, &msg);
    if (rc != 0)
        fprintf(stderr, "store_open: %s\n", msg ? msg : "(no message)");
    CHECK_EQ_INT(rc, 0);
    CHECK(s != NULL);
    CHECK(msg == NULL);
    return s;
}

#endif /* DETD_TEST_STORE_FIXTURE_H */
