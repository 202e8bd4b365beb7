/*
 * fake_cluster: a struct coord_cluster that records the claim, release
 * and commit calls coord.c and commit.c make and returns what the test
 * sets (include once per test executable, after runner.h). The cluster's
 * answers are events the test builds and feeds in itself.
 */
#ifndef DETD_TEST_FAKE_CLUSTER_H
#define DETD_TEST_FAKE_CLUSTER_H

#include <stdio.h>
#include <string.h>

#include "app/coord.h"

#define FAKE_CLUSTER_MAX 32
/* Commits and reads recorded (a lock's import sends more than one chunk
 * of LOCK_ETCD_CHUNK rows). */
#define FAKE_CLUSTER_MAX_ROWS 2048

struct fake_commit {
    char id[65];
    char config[128];
    uint64_t claim_id;
    int64_t deadline_ms;
    uint64_t cookie;
};

struct fake_cluster {
    int claim_rc, release_rc, commit_rc; /* what the calls return */
    int64_t defer_ms; /* what defer() returns (0: this node is the owner) */
    int n_claims, n_releases, n_commits, n_reads;
    char claims[FAKE_CLUSTER_MAX][65];
    int64_t claim_deadlines[FAKE_CLUSTER_MAX];
    int claim_rechecks[FAKE_CLUSTER_MAX]; /* the recheck argument */
    char releases[FAKE_CLUSTER_MAX][65];
    struct fake_commit commits[FAKE_CLUSTER_MAX_ROWS];
    /* commit_many() calls, and the rows each one was given */
    int n_commit_many;
    size_t commit_many_sizes[FAKE_CLUSTER_MAX];
    /* every id read (read() calls: n_reads), with its cookie */
    int n_read_ids;
    char read_ids[FAKE_CLUSTER_MAX_ROWS][65];
    uint64_t read_cookies[FAKE_CLUSTER_MAX_ROWS];
    int64_t read_deadlines[FAKE_CLUSTER_MAX];
    char defer_of[65]; /* the name defer() was last asked about */
};

static int fake_claim(void *ctx, const char *id, int recheck,
                      int64_t deadline_ms) {
    struct fake_cluster *f = ctx;
    CHECK(f->n_claims < FAKE_CLUSTER_MAX);
    snprintf(f->claims[f->n_claims], 65, "%s", id);
    f->claim_deadlines[f->n_claims] = deadline_ms;
    f->claim_rechecks[f->n_claims] = recheck;
    f->n_claims++;
    return f->claim_rc;
}

static int fake_release(void *ctx, const char *id) {
    struct fake_cluster *f = ctx;
    CHECK(f->n_releases < FAKE_CLUSTER_MAX);
    snprintf(f->releases[f->n_releases++], 65, "%s", id);
    return f->release_rc;
}

static int fake_commit(void *ctx, const struct decision *row, uint64_t claim_id,
                       int64_t deadline_ms, uint64_t cookie) {
    struct fake_cluster *f = ctx;
    CHECK(f->n_commits < FAKE_CLUSTER_MAX_ROWS);
    struct fake_commit *c = &f->commits[f->n_commits++];
    snprintf(c->id, sizeof(c->id), "%s", row->id);
    snprintf(c->config, sizeof(c->config), "%s", row->config);
    c->claim_id = claim_id;
    c->deadline_ms = deadline_ms;
    c->cookie = cookie;
    return f->commit_rc;
}

static int fake_commit_many(void *ctx, const struct decision *rows, size_t n,
                            uint64_t claim_id, int64_t deadline_ms,
                            uint64_t first_cookie, int *ret_err) {
    struct fake_cluster *f = ctx;
    CHECK(f->n_commit_many < FAKE_CLUSTER_MAX);
    f->commit_many_sizes[f->n_commit_many++] = n;
    for (size_t i = 0; i < n; i++)
        ret_err[i] =
            fake_commit(ctx, &rows[i], claim_id, deadline_ms, first_cookie + i);
    return 0;
}

/* Reads answer nothing (a test feeds CLUSTER_EV_READ events itself, with
 * the cookies recorded here). */
static int fake_read(void *ctx, const char *const *ids, size_t n,
                     int64_t deadline_ms, uint64_t first_cookie) {
    struct fake_cluster *f = ctx;
    CHECK(f->n_reads < FAKE_CLUSTER_MAX);
    CHECK(f->n_read_ids + n <= FAKE_CLUSTER_MAX_ROWS);
    for (size_t i = 0; i < n; i++) {
        snprintf(f->read_ids[f->n_read_ids], 65, "%s", ids[i]);
        f->read_cookies[f->n_read_ids++] = first_cookie + i;
    }
    f->read_deadlines[f->n_reads++] = deadline_ms;
    return 0;
}

/* This node's wait for the work named id: f->defer_ms (0 by default:
 * every node is the owner). */
static int64_t fake_defer(void *ctx, const char *id) {
    struct fake_cluster *f = ctx;
    snprintf(f->defer_of, sizeof(f->defer_of), "%s", id);
    return f->defer_ms;
}

/* The table for f (borrowed while the table is used). */
static struct coord_cluster fake_cluster_ops(struct fake_cluster *f) {
    return (struct coord_cluster){
        f,         fake_claim, fake_release, fake_commit, fake_commit_many,
        fake_read, fake_defer, NULL};
}

#endif /* DETD_TEST_FAKE_CLUSTER_H */
