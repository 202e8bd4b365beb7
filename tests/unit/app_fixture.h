/*
 * app_fixture: a struct daemon for the unit tests of app/ with a real
 * store (temporary directory), engine, hot cache and waiters table, and,
 * for the etcd backend, a real coord and commit table over a fake cluster
 * (fake_cluster.h). Decisions are built with real ids (keyid.h) so that
 * the etcd values made from them decode. Include once per test
 * executable, after runner.h.
 */
#ifndef DETD_TEST_APP_FIXTURE_H
#define DETD_TEST_APP_FIXTURE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/commit.h"
#include "app/coord.h"
#include "app/daemon.h"
#include "app/waiters.h"
#include "clock.h"
#include "cluster/cluster_codec.h"
#include "core/keyid.h"
#include "detd/client.h"
#include "detd/error.h"
#include "fake_cluster.h"
#include "fake_rpc.h"
#include "store_fixture.h"

/* Not every test executable uses every helper. */
#define FX_HELPER static __attribute__((unused))

static struct daemon D;
static struct daemon_config CFG;
static struct fake_cluster FC;

/* Open the fixture: etcd nonzero adds a coord (over FC) and the commit
 * table. cb/ctx: the engine's event callback. */
FX_HELPER void fx_open(int etcd, engine_event_cb cb, void *ctx) {
    memset(&D, 0, sizeof(D));
    memset(&CFG, 0, sizeof(CFG));
    memset(&FC, 0, sizeof(FC));
    log_set_level(LOG_WARN);
    CFG.ns = "ns";
    CFG.lease_ms = 30000;
    D.cfg = &CFG;
    D.store = open_ok(tmp_path("detd.db"));
    struct engine_limits lim = {1000, 1000, 30000};
    CHECK_EQ_INT(engine_new(&lim, cb, ctx, &D.engine), 0);
    CHECK_EQ_INT(hotcache_new(64, &D.hot), 0);
    CHECK_EQ_INT(waiters_new(&D.waiters), 0);
    if (etcd) {
        CHECK_EQ_INT(commit_state_new(&D.commits), 0);
        CHECK_EQ_INT(coord_new(&D, &D.coord), 0);
        struct coord_cluster ops = fake_cluster_ops(&FC);
        coord_set_cluster(D.coord, &ops);
        CHECK(coord_cluster_ops(D.coord)->ctx == &FC);
    }
}

/* Close what fx_open() opened (every pending must have been taken). */
FX_HELPER void fx_close(void) {
    CHECK_EQ_INT(waiters_count(D.waiters), 0);
    coord_free(D.coord);
    commit_state_free(D.commits);
    waiters_free(D.waiters);
    hotcache_free(D.hot);
    engine_free(D.engine);
    store_close(D.store);
    memset(&D, 0, sizeof(D));
    tmp_cleanup();
}

/* A decision row whose strings live in the struct. */
struct row {
    char id[KEYID_HEX_LEN + 1];
    char fp[KEYID_HEX_LEN + 1];
    char kernel[64];
    char key[64];
    char config[96];
    char host[32];
    struct decision d;
};

/* Decision for kernel "mod:k" key key (its id depends on key only),
 * choosing config, by host. */
FX_HELPER void row_make(struct row *r, const char *key, const char *config,
                        int32_t source, uint64_t claim_id, const char *host) {
    memset(r, 0, sizeof(*r));
    const char *cands[] = {"BLOCK=64,num_warps=4", "BLOCK=128,num_warps=4",
                           "BLOCK=256,num_warps=8"};
    CHECK_EQ_INT(keyid_candidates_fp(cands, 3, r->fp), 0);
    snprintf(r->kernel, sizeof(r->kernel), "mod:k");
    snprintf(r->key, sizeof(r->key), "%s", key);
    snprintf(r->config, sizeof(r->config), "%s", config);
    snprintf(r->host, sizeof(r->host), "%s", host);
    keyid_decision_id("ns", "sm90", r->kernel, r->key, r->fp, r->id);
    r->d = (struct decision){
        .id = r->id,
        .ns = "ns",
        .arch = "sm90",
        .kernel = r->kernel,
        .key = r->key,
        .candidates_fp = r->fp,
        .n_candidates = 3,
        .config = r->config,
        .source = source,
        .claim_id = claim_id,
        .by_host = r->host,
        .by_pid = 4242,
        .by_rank = 3,
        .by_local_rank = 1,
        .by_device = "NVIDIA H200",
        .by_arch = "sm90",
        .triton_version = "3.6.0",
        .timings_json = "[]",
        .table_file = "",
        .decided_at_ms = 1700000000000,
    };
}

/* The etcd value of r written by writer (heap; caller frees). */
FX_HELPER char *row_value(const struct decision *r, const char *writer,
                          size_t *ret_len) {
    char *v = NULL;
    CHECK_EQ_INT(cluster_decision_encode(r, writer, &v, ret_len), 0);
    CHECK(v != NULL);
    return v;
}

/* The config stored for id, or "" when none (static buffer). */
FX_HELPER const char *stored_config(const char *id) {
    static char buf[128];
    struct decision got;
    int rc = store_get_decision(D.store, id, &got);
    if (rc == DETD_ENOTFOUND)
        return "";
    CHECK_EQ_INT(rc, 0);
    snprintf(buf, sizeof(buf), "%s", got.config);
    decision_clear(&got);
    return buf;
}

/* call was answered exactly once, DECIDED with config, after waiting
 * between min_waited and min_waited + 5 s. */
FX_HELPER void check_decided(const rpc_call *call, const char *config,
                             uint32_t min_waited) {
    CHECK_EQ_INT(call->answers, 1);
    Detd__V1__DecideResponse *r = fake_decide_response(call);
    CHECK(r != NULL);
    CHECK_EQ_INT(r->outcome, DETD__V1__OUTCOME__OUTCOME_DECIDED);
    CHECK(r->decision != NULL);
    CHECK_STR(r->decision->config, config);
    CHECK(r->waited_ms >= min_waited);
    CHECK(r->waited_ms < min_waited + 5000);
    detd__v1__decide_response__free_unpacked(r, NULL);
}

/* call was answered exactly once with a ReportResponse naming config. */
FX_HELPER void check_report(const rpc_call *call, const char *config,
                            int superseded) {
    CHECK_EQ_INT(call->answers, 1);
    Detd__V1__ReportResponse *r = fake_report_response(call);
    CHECK(r != NULL);
    CHECK(r->decision != NULL);
    CHECK_STR(r->decision->config, config);
    CHECK_EQ_INT(r->superseded, superseded);
    detd__v1__report_response__free_unpacked(r, NULL);
}

/* call was answered exactly once, failed with code, its message holding
 * part. */
FX_HELPER void check_fail(const rpc_call *call, rpc_code code,
                          const char *part) {
    CHECK_EQ_INT(call->answers, 1);
    CHECK_EQ_INT(call->kind, FAKE_FAIL);
    CHECK_EQ_INT(call->code, code);
    if (strstr(call->msg, part) == NULL)
        fprintf(stderr, "message: \"%s\", wanted \"%s\" in it\n", call->msg,
                part);
    CHECK(strstr(call->msg, part) != NULL);
}

#endif /* DETD_TEST_APP_FIXTURE_H */
