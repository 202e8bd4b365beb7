/*
 * cluster_codec: a decision survives its etcd encoding with who the
 * receiving daemon saw (uid, node, claimed pid); a record an older daemon
 * wrote, which has none of them, decodes as uid -1, node "" and claimed
 * pid 0; those fields are type-, range- and size-checked like the rest.
 */
#define _GNU_SOURCE
#include "cluster/cluster_codec.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "detd/error.h"
#include "core/keyid.h"
#include "runner.h"

/* A reported decision whose id is what its key fields hash to. */
struct row {
    struct decision d;
    char id[KEYID_HEX_LEN + 1];
    char fp[KEYID_HEX_LEN + 1];
};

static void row_make(struct row *r) {
    memset(r, 0, sizeof(*r));
    static const char *const cands[] = {"BLOCK=16", "BLOCK=32"};
    CHECK_EQ_INT(keyid_candidates_fp(cands, 2, r->fp), 0);
    keyid_decision_id("default", "sm90", "m:k@1", "i:0", r->fp, r->id);
    r->d = (struct decision){
        .id = r->id,
        .ns = "default",
        .arch = "sm90",
        .kernel = "m:k@1",
        .key = "i:0",
        .candidates_fp = r->fp,
        .n_candidates = 2,
        .config = "BLOCK=32",
        .source = 1,
        .claim_id = 77,
        .by_host = "node-a",
        .by_pid = 4242,
        .by_rank = 3,
        .by_local_rank = 1,
        .by_device = "GPU",
        .by_arch = "sm90",
        .triton_version = "3.6.0",
        .timings_json = "[]",
        .table_file = "",
        .decided_at_ms = 1700000000000,
        .by_uid = 1234,
        .by_claimed_pid = 99,
        .by_node = "n1",
        .by_world_size = 16,
        .by_job = "run-9",
    };
}

static char *encode(const struct decision *d) {
    char *v = NULL;
    size_t n = 0;
    CHECK_EQ_INT(cluster_decision_encode(d, "n1/1/x/77", &v, &n), 0);
    CHECK(v != NULL && strlen(v) == n);
    return v;
}

/* v with member name removed (name NULL: as is) and, when set is not
 * NULL, member name set to the JSON text set. Heap; caller frees. */
static char *edit(const char *v, const char *name, const char *set) {
    json_t *o = json_loads(v, 0, NULL);
    CHECK(json_is_object(o));
    if (name != NULL) {
        json_object_del(o, name);
        if (set != NULL)
            CHECK_EQ_INT(json_object_set_new(
                             o, name, json_loads(set, JSON_DECODE_ANY, NULL)),
                         0);
    }
    char *out = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    CHECK(out != NULL);
    return out;
}

static int decode(const char *v, struct decision *ret) {
    memset(ret, 0, sizeof(*ret));
    return cluster_decision_decode(v, strlen(v), ret, NULL);
}

TEST(the_peer_fields_survive_the_round_trip) {
    struct row r;
    row_make(&r);
    char *v = encode(&r.d);
    struct decision got;
    char *writer = NULL;
    CHECK_EQ_INT(cluster_decision_decode(v, strlen(v), &got, &writer), 0);
    CHECK_STR(writer, "n1/1/x/77");
    CHECK_STR(got.config, "BLOCK=32");
    CHECK_EQ_INT(got.by_pid, 4242);
    CHECK_EQ_INT(got.by_uid, 1234);
    CHECK_EQ_INT(got.by_claimed_pid, 99);
    CHECK_STR(got.by_node, "n1");
    CHECK_EQ_INT(got.by_world_size, 16);
    CHECK_STR(got.by_job, "run-9");
    decision_clear(&got);
    free(writer);
    /* Unknown uid and no node (a table's decision) too. */
    r.d.by_uid = -1;
    r.d.by_node = NULL;
    r.d.by_claimed_pid = 0;
    free(v);
    v = encode(&r.d);
    CHECK_EQ_INT(decode(v, &got), 0);
    CHECK_EQ_INT(got.by_uid, -1);
    CHECK_STR(got.by_node, "");
    CHECK_EQ_INT(got.by_claimed_pid, 0);
    decision_clear(&got);
    free(v);
}

TEST(a_record_of_an_older_daemon_reads_as_unknown_peer) {
    struct row r;
    row_make(&r);
    char *v = encode(&r.d);
    char *a = edit(v, "by_uid", NULL);
    char *b = edit(a, "by_node", NULL);
    char *old = edit(b, "by_claimed_pid", NULL);
    CHECK(strstr(old, "by_uid") == NULL && strstr(old, "by_node") == NULL &&
          strstr(old, "by_claimed_pid") == NULL);
    struct decision got;
    CHECK_EQ_INT(decode(old, &got), 0);
    CHECK_STR(got.config, "BLOCK=32");
    CHECK_EQ_INT(got.by_pid, 4242);
    CHECK_STR(got.by_host, "node-a");
    CHECK_EQ_INT(got.by_uid, -1);
    CHECK_STR(got.by_node, "");
    CHECK_EQ_INT(got.by_claimed_pid, 0);
    decision_clear(&got);
    free(v);
    free(a);
    free(b);
    free(old);
}

TEST(bad_peer_fields_are_refused) {
    struct row r;
    row_make(&r);
    char *v = encode(&r.d);
    static const struct {
        const char *name, *value;
        int err;
    } bad[] = {
        {"by_uid", "-2", DETD_EPROTO},
        {"by_uid", "4294967296", DETD_EPROTO},
        {"by_uid", "\"1000\"", DETD_EPROTO},
        {"by_uid", "null", DETD_EPROTO},
        {"by_claimed_pid", "2147483648", DETD_EPROTO},
        {"by_claimed_pid", "1.5", DETD_EPROTO},
        {"by_node", "7", DETD_EPROTO},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *e = edit(v, bad[i].name, bad[i].value);
        struct decision got;
        int rc = decode(e, &got);
        if (rc != bad[i].err)
            fprintf(stderr, "%s = %s\n", bad[i].name, bad[i].value);
        CHECK_EQ_INT(rc, bad[i].err);
        free(e);
    }
    /* The node is capped like a node id; at the cap it is kept. */
    char node[CLUSTER_MAX_NODE_ID + 4];
    memset(node, 'n', sizeof(node));
    node[0] = '"';
    node[CLUSTER_MAX_NODE_ID + 1] = '"';
    node[CLUSTER_MAX_NODE_ID + 2] = '\0';
    char *e = edit(v, "by_node", node);
    struct decision got;
    CHECK_EQ_INT(decode(e, &got), 0);
    CHECK_EQ_INT(strlen(got.by_node), CLUSTER_MAX_NODE_ID);
    decision_clear(&got);
    free(e);
    node[CLUSTER_MAX_NODE_ID + 1] = 'n';
    node[CLUSTER_MAX_NODE_ID + 2] = '"';
    node[CLUSTER_MAX_NODE_ID + 3] = '\0';
    e = edit(v, "by_node", node);
    CHECK_EQ_INT(decode(e, &got), DETD_ELIMIT);
    free(e);
    free(v);
}

int main(int argc, char **argv) {
    return runner_main(argc, argv);
}
