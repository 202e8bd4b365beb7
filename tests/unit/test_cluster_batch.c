/*
 * Batched claims and commits: the Txn etcd_create_batch() sends (one
 * nested Txn per key, each with its own compares), the mapping of etcd's
 * inner results back to the keys, and how workers gather queued jobs into
 * a batch. The same requests against a real etcd: test_etcd_adapter's
 * create_batch case.
 */
#define _GNU_SOURCE
#include "cluster/cluster_int.h"
#include "cluster/etcd_int.h"

#include <stdlib.h>
#include <string.h>

#include "detd/error.h"
#include "runner.h"

static void check_key(ProtobufCBinaryData b, const char *want) {
    CHECK_EQ_INT(b.len, strlen(want));
    CHECK(memcmp(b.data, want, b.len) == 0);
}

static void check_absent(const Etcdserverpb__Compare *c, const char *key) {
    CHECK_EQ_INT(c->target, ETCDSERVERPB__COMPARE__COMPARE_TARGET__CREATE);
    CHECK_EQ_INT(c->result, ETCDSERVERPB__COMPARE__COMPARE_RESULT__EQUAL);
    CHECK_EQ_INT(c->create_revision, 0);
    check_key(c->key, key);
}

/* The drop: delete key when held under lease. */
static void check_drop(const Etcdserverpb__RequestOp *op, const char *key,
                       int64_t lease) {
    CHECK_EQ_INT(op->request_case,
                 ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_TXN);
    const Etcdserverpb__TxnRequest *d = op->request_txn;
    CHECK_EQ_INT(d->n_compare, 1);
    CHECK_EQ_INT(d->compare[0]->target,
                 ETCDSERVERPB__COMPARE__COMPARE_TARGET__LEASE);
    CHECK_EQ_INT(d->compare[0]->lease, lease);
    check_key(d->compare[0]->key, key);
    CHECK_EQ_INT(d->n_success, 1);
    CHECK_EQ_INT(d->n_failure, 0);
    CHECK_EQ_INT(d->success[0]->request_case,
                 ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_DELETE_RANGE);
    check_key(d->success[0]->request_delete_range->key, key);
    CHECK_EQ_INT(d->success[0]->request_delete_range->range_end.len, 0);
}

/* What goes on the wire, packed and read back as etcd would. */
TEST(batch_request_nests_one_txn_per_key) {
    struct etcd_create ops[2] = {
        {.key = "/c/a",
         .value = "claim",
         .value_len = 5,
         .lease = 7,
         .guard = "/d/a"},
        {.key = "/d/b",
         .value = "dec",
         .value_len = 3,
         .drop = "/c/b",
         .drop_lease = 7},
    };
    struct etcd_batch b;
    CHECK_EQ_INT(etcd_batch_build(ops, 2, &b), 0);
    size_t n = protobuf_c_message_get_packed_size(&b.txn.base);
    uint8_t *buf = malloc(n);
    CHECK(buf != NULL);
    protobuf_c_message_pack(&b.txn.base, buf);
    etcd_batch_free(&b);
    Etcdserverpb__TxnRequest *t =
        etcdserverpb__txn_request__unpack(NULL, n, buf);
    free(buf);
    CHECK(t != NULL);
    /* The outer Txn: no compare, one inner Txn per key, in order. */
    CHECK_EQ_INT(t->n_compare, 0);
    CHECK_EQ_INT(t->n_failure, 0);
    CHECK_EQ_INT(t->n_success, 2);
    for (size_t i = 0; i < 2; i++)
        CHECK_EQ_INT(t->success[i]->request_case,
                     ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_TXN);
    /* A claim: created if it and the decision are absent; else both
     * read. */
    const Etcdserverpb__TxnRequest *a = t->success[0]->request_txn;
    CHECK_EQ_INT(a->n_compare, 2);
    check_absent(a->compare[0], "/c/a");
    check_absent(a->compare[1], "/d/a");
    CHECK_EQ_INT(a->n_success, 1);
    CHECK_EQ_INT(a->success[0]->request_case,
                 ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT);
    check_key(a->success[0]->request_put->key, "/c/a");
    check_key(a->success[0]->request_put->value, "claim");
    CHECK_EQ_INT(a->success[0]->request_put->lease, 7);
    CHECK_EQ_INT(a->n_failure, 2);
    check_key(a->failure[0]->request_range->key, "/c/a");
    check_key(a->failure[1]->request_range->key, "/d/a");
    /* A commit: the decision if absent; the claim deleted either way
     * when it is ours. */
    const Etcdserverpb__TxnRequest *d = t->success[1]->request_txn;
    CHECK_EQ_INT(d->n_compare, 1);
    check_absent(d->compare[0], "/d/b");
    CHECK_EQ_INT(d->n_success, 2);
    check_key(d->success[0]->request_put->key, "/d/b");
    CHECK_EQ_INT(d->success[0]->request_put->lease, 0);
    check_drop(d->success[1], "/c/b", 7);
    CHECK_EQ_INT(d->n_failure, 2);
    check_key(d->failure[0]->request_range->key, "/d/b");
    check_drop(d->failure[1], "/c/b", 7);
    etcdserverpb__txn_request__free_unpacked(t, NULL);
}

TEST(batch_request_refuses_bad_ops) {
    struct etcd_create ops[ETCD_BATCH_MAX + 1];
    memset(ops, 0, sizeof(ops));
    for (size_t i = 0; i <= ETCD_BATCH_MAX; i++)
        ops[i].key = "/k";
    struct etcd_batch b;
    CHECK_EQ_INT(etcd_batch_build(ops, ETCD_BATCH_MAX + 1, &b), DETD_ELIMIT);
    CHECK_EQ_INT(etcd_batch_build(ops, 0, &b), DETD_EINVAL);
    ops[0].key = "";
    CHECK_EQ_INT(etcd_batch_build(ops, 1, &b), DETD_EINVAL);
    /* A drop needs the lease it is held under. */
    ops[0] = (struct etcd_create){.key = "/k", .drop = "/c"};
    CHECK_EQ_INT(etcd_batch_build(ops, 1, &b), DETD_EINVAL);
}

/* ---- inner results to keys ------------------------------------------ */

static Mvccpb__KeyValue kvs[4];
static Mvccpb__KeyValue *kvp[4];
static Etcdserverpb__RangeResponse ranges[4];
static Etcdserverpb__ResponseOp rops[8];

/* A range response op at slot i holding value v for key k (k NULL: no
 * key). */
static Etcdserverpb__ResponseOp *range_op(int i, const char *k, const char *v) {
    etcdserverpb__range_response__init(&ranges[i]);
    if (k != NULL) {
        mvccpb__key_value__init(&kvs[i]);
        kvs[i].key = (ProtobufCBinaryData){strlen(k), (uint8_t *)k};
        kvs[i].value = (ProtobufCBinaryData){strlen(v), (uint8_t *)v};
        kvs[i].lease = 9;
        kvp[i] = &kvs[i];
        ranges[i].n_kvs = 1;
        ranges[i].kvs = &kvp[i];
    }
    etcdserverpb__response_op__init(&rops[i]);
    rops[i].response_case = ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_RANGE;
    rops[i].response_range = &ranges[i];
    return &rops[i];
}

/* Three claims met together: one fresh key (won), one another node holds
 * (lost: its value), one decided meanwhile (not claimed: the decision). */
TEST(batch_results_map_to_their_keys) {
    struct etcd_create ops[3] = {
        {.key = "/c/fresh",
         .value = "me",
         .value_len = 2,
         .lease = 5,
         .guard = "/d/fresh"},
        {.key = "/c/held",
         .value = "me",
         .value_len = 2,
         .lease = 5,
         .guard = "/d/held"},
        {.key = "/c/done",
         .value = "me",
         .value_len = 2,
         .lease = 5,
         .guard = "/d/done"},
    };
    Etcdserverpb__ResponseOp *won_ops[1] = {NULL};
    Etcdserverpb__PutResponse put = ETCDSERVERPB__PUT_RESPONSE__INIT;
    Etcdserverpb__ResponseOp put_op = ETCDSERVERPB__RESPONSE_OP__INIT;
    put_op.response_case = ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_PUT;
    put_op.response_put = &put;
    won_ops[0] = &put_op;
    Etcdserverpb__ResponseOp *held_ops[2] = {range_op(0, "/c/held", "them"),
                                             range_op(1, NULL, NULL)};
    Etcdserverpb__ResponseOp *done_ops[2] = {range_op(2, NULL, NULL),
                                             range_op(3, "/d/done", "dec")};
    Etcdserverpb__TxnResponse inner[3];
    Etcdserverpb__ResponseOp outer_ops[3], *outer_p[3];
    Etcdserverpb__ResponseOp **lists[3] = {won_ops, held_ops, done_ops};
    size_t counts[3] = {1, 2, 2};
    for (int i = 0; i < 3; i++) {
        etcdserverpb__txn_response__init(&inner[i]);
        inner[i].succeeded = i == 0;
        inner[i].n_responses = counts[i];
        inner[i].responses = lists[i];
        etcdserverpb__response_op__init(&outer_ops[i]);
        outer_ops[i].response_case =
            ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_TXN;
        outer_ops[i].response_txn = &inner[i];
        outer_p[i] = &outer_ops[i];
    }
    Etcdserverpb__ResponseHeader h = ETCDSERVERPB__RESPONSE_HEADER__INIT;
    h.revision = 42;
    Etcdserverpb__TxnResponse r = ETCDSERVERPB__TXN_RESPONSE__INIT;
    r.header = &h;
    r.succeeded = 1;
    r.n_responses = 3;
    r.responses = outer_p;
    CHECK_EQ_INT(etcd_batch_parse(&r, ops, 3), 0);
    CHECK(ops[0].won && ops[0].same_value);
    CHECK_STR(ops[0].kv.key, "/c/fresh");
    CHECK_STR((char *)ops[0].kv.value, "me");
    CHECK_EQ_INT(ops[0].kv.lease, 5);
    CHECK_EQ_INT(ops[0].kv.create_revision, 42);
    CHECK(ops[0].guard_kv.key == NULL);
    CHECK(!ops[1].won && !ops[1].same_value);
    CHECK_STR((char *)ops[1].kv.value, "them");
    CHECK(ops[1].guard_kv.key == NULL);
    CHECK(!ops[2].won && ops[2].kv.key == NULL);
    CHECK_STR((char *)ops[2].guard_kv.value, "dec");
    for (int i = 0; i < 3; i++)
        etcd_create_clear(&ops[i]);

    /* Not the answer to this request: refused, nothing kept. */
    r.n_responses = 2;
    CHECK_EQ_INT(etcd_batch_parse(&r, ops, 3), DETD_EPROTO);
    r.n_responses = 3;
    inner[1].n_responses = 1; /* the guard's range is missing */
    CHECK_EQ_INT(etcd_batch_parse(&r, ops, 3), DETD_EPROTO);
    CHECK(ops[0].kv.key == NULL);
    inner[1].n_responses = 2;
    /* A compare that failed with neither key present. */
    held_ops[0] = range_op(0, NULL, NULL);
    CHECK_EQ_INT(etcd_batch_parse(&r, ops, 3), DETD_EPROTO);
}

/* ---- gathering queued jobs ------------------------------------------ */

static struct job *job(enum job_kind kind, const char *id) {
    struct job *j = calloc(1, sizeof(*j));
    CHECK(j != NULL);
    j->kind = kind;
    snprintf(j->id, sizeof(j->id), "%s", id);
    return j;
}

static void queue(cluster *c, struct job *j) {
    if (c->jobs_tail != NULL)
        c->jobs_tail->next = j;
    else
        c->jobs = j;
    c->jobs_tail = j;
}

static size_t queued(const cluster *c) {
    size_t n = 0;
    for (const struct job *j = c->jobs; j != NULL; j = j->next)
        n++;
    return n;
}

/* A batch takes the queued jobs of its kind, each id once; other kinds
 * and a second job of an id stay queued, in order; while a worker
 * gathers claims, other workers skip them. */
TEST(gather_takes_one_job_per_id_of_its_kind) {
    static cluster c;
    memset(&c, 0, sizeof(c));
    queue(&c, job(JOB_CLAIM, "a"));
    queue(&c, job(JOB_COMMIT, "a"));
    queue(&c, job(JOB_CLAIM, "b"));
    queue(&c, job(JOB_CLAIM, "a"));
    queue(&c, job(JOB_FANOUT, ""));
    queue(&c, job(JOB_CLAIM, "c"));
    struct job *batch[CLUSTER_BATCH_MAX];
    size_t n = 0;
    batch[n++] = cluster_take_job(&c);
    CHECK_STR(batch[0]->id, "a");
    c.gathering = 1u << JOB_CLAIM;
    cluster_gather(&c, JOB_CLAIM, batch, &n);
    CHECK_EQ_INT(n, 3);
    CHECK_STR(batch[1]->id, "b");
    CHECK_STR(batch[2]->id, "c");
    CHECK_EQ_INT(queued(&c), 3);
    /* Another worker: the commit, then the fan-out; not the claim. */
    struct job *j = cluster_take_job(&c);
    CHECK_EQ_INT(j->kind, JOB_COMMIT);
    free(j);
    j = cluster_take_job(&c);
    CHECK_EQ_INT(j->kind, JOB_FANOUT);
    free(j);
    CHECK(cluster_take_job(&c) == NULL);
    c.gathering = 0;
    j = cluster_take_job(&c);
    CHECK(j != NULL && j->kind == JOB_CLAIM);
    CHECK(c.jobs == NULL && c.jobs_tail == NULL);
    free(j);
    for (size_t i = 0; i < n; i++)
        free(batch[i]);

    /* At most CLUSTER_BATCH_MAX keys. */
    char id[16];
    for (int i = 0; i < CLUSTER_BATCH_MAX + 5; i++) {
        snprintf(id, sizeof(id), "k%d", i);
        queue(&c, job(JOB_COMMIT, id));
    }
    n = 0;
    cluster_gather(&c, JOB_COMMIT, batch, &n);
    CHECK_EQ_INT(n, CLUSTER_BATCH_MAX);
    CHECK_EQ_INT(queued(&c), 5);
    CHECK_STR(c.jobs_tail->id, "k68");
    for (size_t i = 0; i < n; i++)
        free(batch[i]);
    while ((j = cluster_take_job(&c)) != NULL)
        free(j);
}

int main(int argc, char **argv) {
    return runner_main(argc, argv);
}
