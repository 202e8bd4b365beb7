/*
 * etcd adapter: etcd_create_batch(), many first-writer-wins creations in
 * one Txn, and etcd_put_if_absent(), a batch of one (contracts in etcd.h).
 *
 * The request is one outer Txn without compares whose success branch
 * holds one inner Txn per key (RequestOp.request_txn, etcd 3.3 and
 * later), each with its own compares, so each key wins or loses on its
 * own and the response carries one inner result per key, in order:
 *
 *   compare  key absent [and guard absent]
 *   success  put key [, drop]
 *   failure  range key [, range guard] [, drop]
 *   drop     Txn: compare drop's lease == drop_lease; success delete drop
 *
 * etcd's --max-txn-ops (default 128) bounds the operations of one level
 * and, for a nested Txn, what is left of it: n keys leave 128 - n to each
 * inner Txn (at most 3), hence ETCD_BATCH_MAX.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>
#include <string.h>

#include "detd/error.h"
#include "cluster/etcd.h"
#include "cluster/etcd_int.h"

#define M_TXN "/etcdserverpb.KV/Txn"

/* The messages of one key's inner Txn. */
struct batch_item {
    Etcdserverpb__Compare cmp[2], dcmp;
    Etcdserverpb__Compare *cmps[2], *dcmps[1];
    Etcdserverpb__PutRequest put;
    Etcdserverpb__RangeRequest rkey, rguard;
    Etcdserverpb__DeleteRangeRequest del;
    Etcdserverpb__RequestOp put_op, rkey_op, rguard_op, del_op, drop_op, op;
    Etcdserverpb__RequestOp *dsucc[1], *succ[2], *fail[3];
    Etcdserverpb__TxnRequest dtxn, txn;
};

static int key_ok(const char *k) {
    size_t n;
    return etcd_check_key(k, &n);
}

static ProtobufCBinaryData bytes_of(const char *k) {
    ProtobufCBinaryData b = {strlen(k), (uint8_t *)k};
    return b;
}

static void absent(Etcdserverpb__Compare *c, const char *key) {
    etcdserverpb__compare__init(c);
    c->result = ETCDSERVERPB__COMPARE__COMPARE_RESULT__EQUAL;
    c->target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__CREATE;
    c->key = bytes_of(key);
    c->target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_CREATE_REVISION;
    c->create_revision = 0;
}

static void range_op(Etcdserverpb__RequestOp *op, Etcdserverpb__RangeRequest *r,
                     const char *key) {
    etcdserverpb__range_request__init(r);
    r->key = bytes_of(key);
    etcdserverpb__request_op__init(op);
    op->request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_RANGE;
    op->request_range = r;
}

/* The drop: delete it->drop when etcd holds it under drop_lease. */
static void drop_txn(struct batch_item *it, const struct etcd_create *o) {
    etcdserverpb__compare__init(&it->dcmp);
    it->dcmp.result = ETCDSERVERPB__COMPARE__COMPARE_RESULT__EQUAL;
    it->dcmp.target = ETCDSERVERPB__COMPARE__COMPARE_TARGET__LEASE;
    it->dcmp.key = bytes_of(o->drop);
    it->dcmp.target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_LEASE;
    it->dcmp.lease = o->drop_lease;
    it->dcmps[0] = &it->dcmp;
    etcdserverpb__delete_range_request__init(&it->del);
    it->del.key = bytes_of(o->drop);
    etcdserverpb__request_op__init(&it->del_op);
    it->del_op.request_case =
        ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_DELETE_RANGE;
    it->del_op.request_delete_range = &it->del;
    it->dsucc[0] = &it->del_op;
    etcdserverpb__txn_request__init(&it->dtxn);
    it->dtxn.n_compare = 1;
    it->dtxn.compare = it->dcmps;
    it->dtxn.n_success = 1;
    it->dtxn.success = it->dsucc;
    etcdserverpb__request_op__init(&it->drop_op);
    it->drop_op.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_TXN;
    it->drop_op.request_txn = &it->dtxn;
}

static int build_item(struct batch_item *it, const struct etcd_create *o) {
    int err;
    if ((err = key_ok(o->key)) != 0 ||
        (o->guard != NULL && (err = key_ok(o->guard)) != 0) ||
        (o->drop != NULL && (err = key_ok(o->drop)) != 0))
        return err;
    if ((o->value == NULL && o->value_len > 0) || o->lease < 0 ||
        (o->drop != NULL && o->drop_lease == 0))
        return DETD_EINVAL;
    if (o->value_len > ETCD_MAX_VALUE)
        return DETD_ELIMIT;
    size_t nc = 0, ns = 0, nf = 0;
    absent(&it->cmp[nc], o->key);
    it->cmps[nc] = &it->cmp[nc];
    nc++;
    if (o->guard != NULL) {
        absent(&it->cmp[nc], o->guard);
        it->cmps[nc] = &it->cmp[nc];
        nc++;
    }
    etcdserverpb__put_request__init(&it->put);
    it->put.key = bytes_of(o->key);
    it->put.value.len = o->value_len;
    it->put.value.data = (uint8_t *)o->value;
    it->put.lease = o->lease;
    etcdserverpb__request_op__init(&it->put_op);
    it->put_op.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
    it->put_op.request_put = &it->put;
    it->succ[ns++] = &it->put_op;
    range_op(&it->rkey_op, &it->rkey, o->key);
    it->fail[nf++] = &it->rkey_op;
    if (o->guard != NULL) {
        range_op(&it->rguard_op, &it->rguard, o->guard);
        it->fail[nf++] = &it->rguard_op;
    }
    if (o->drop != NULL) {
        drop_txn(it, o);
        it->succ[ns++] = &it->drop_op;
        it->fail[nf++] = &it->drop_op;
    }
    etcdserverpb__txn_request__init(&it->txn);
    it->txn.n_compare = nc;
    it->txn.compare = it->cmps;
    it->txn.n_success = ns;
    it->txn.success = it->succ;
    it->txn.n_failure = nf;
    it->txn.failure = it->fail;
    etcdserverpb__request_op__init(&it->op);
    it->op.request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_TXN;
    it->op.request_txn = &it->txn;
    return 0;
}

/* See etcd_int.h. */
int etcd_batch_build(const struct etcd_create *ops, size_t n,
                     struct etcd_batch *b) {
    memset(b, 0, sizeof(*b));
    if (ops == NULL || n == 0)
        return DETD_EINVAL;
    if (n > ETCD_BATCH_MAX)
        return DETD_ELIMIT;
    b->items = calloc(n, sizeof(*b->items));
    b->ops = calloc(n, sizeof(*b->ops));
    if (b->items == NULL || b->ops == NULL) {
        etcd_batch_free(b);
        return DETD_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        int err = build_item(&b->items[i], &ops[i]);
        if (err != 0) {
            etcd_batch_free(b);
            return err;
        }
        b->ops[i] = &b->items[i].op;
    }
    etcdserverpb__txn_request__init(&b->txn);
    b->txn.n_success = n;
    b->txn.success = b->ops;
    return 0;
}

/* See etcd_int.h. */
void etcd_batch_free(struct etcd_batch *b) {
    free(b->items);
    free(b->ops);
    memset(b, 0, sizeof(*b));
}

/* The one key of range response op, or none (kv left zeroed). */
static int range_kv(const Etcdserverpb__ResponseOp *op, struct etcd_kv *kv) {
    if (op == NULL ||
        op->response_case !=
            ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_RANGE ||
        op->response_range == NULL || op->response_range->n_kvs > 1)
        return DETD_EPROTO;
    if (op->response_range->n_kvs == 0)
        return 0;
    return etcd_kv_copy(op->response_range->kvs[0], kv);
}

static int parse_item(const Etcdserverpb__ResponseOp *rop, int64_t rev,
                      struct etcd_create *o) {
    if (rop == NULL ||
        rop->response_case !=
            ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_TXN ||
        rop->response_txn == NULL)
        return DETD_EPROTO;
    const Etcdserverpb__TxnResponse *t = rop->response_txn;
    size_t want = t->succeeded ? 1 + (o->drop != NULL)
                               : 1 + (o->guard != NULL) + (o->drop != NULL);
    if (t->n_responses != want)
        return DETD_EPROTO;
    int err;
    if (t->succeeded) {
        o->won = 1;
        o->same_value = 1;
        if ((err = etcd_kv_fill(o->key, strlen(o->key), o->value, o->value_len,
                                &o->kv)) != 0)
            return err;
        o->kv.create_revision = o->kv.mod_revision = rev;
        o->kv.version = 1;
        o->kv.lease = o->lease;
        return 0;
    }
    if ((err = range_kv(t->responses[0], &o->kv)) != 0)
        return err;
    if (o->guard != NULL &&
        (err = range_kv(t->responses[1], &o->guard_kv)) != 0)
        return err;
    /* The compare failed: the key or the guard exists. */
    if (o->kv.key == NULL && o->guard_kv.key == NULL)
        return DETD_EPROTO;
    o->same_value =
        o->kv.key != NULL && o->kv.value_len == o->value_len &&
        (o->value_len == 0 || memcmp(o->kv.value, o->value, o->value_len) == 0);
    return 0;
}

/* See etcd_int.h. */
int etcd_batch_parse(const Etcdserverpb__TxnResponse *r,
                     struct etcd_create *ops, size_t n) {
    int err = 0;
    if (r == NULL || !r->succeeded || r->n_responses != n)
        return DETD_EPROTO;
    int64_t rev = r->header != NULL ? r->header->revision : 0;
    for (size_t i = 0; i < n && err == 0; i++)
        err = parse_item(r->responses[i], rev, &ops[i]);
    if (err != 0)
        for (size_t i = 0; i < n; i++)
            etcd_create_clear(&ops[i]);
    return err;
}

/* See etcd.h. */
void etcd_create_clear(struct etcd_create *o) {
    etcd_kv_clear(&o->kv);
    etcd_kv_clear(&o->guard_kv);
    o->won = 0;
    o->same_value = 0;
}

/* See etcd.h. */
int etcd_create_batch(etcd_client *c, struct etcd_create *ops, size_t n,
                      int64_t *ret_revision) {
    if (c == NULL)
        return DETD_EINVAL;
    struct etcd_batch b;
    int err = etcd_batch_build(ops, n, &b);
    if (err != 0)
        return err;
    for (size_t i = 0; i < n; i++)
        etcd_create_clear(&ops[i]);
    ProtobufCMessage *m = NULL;
    err = etcd_call_unary(c, M_TXN, &b.txn.base,
                          &etcdserverpb__txn_response__descriptor, &m);
    etcd_batch_free(&b);
    if (err != 0)
        return err;
    Etcdserverpb__TxnResponse *r = (void *)m;
    err = etcd_batch_parse(r, ops, n);
    if (err == 0 && ret_revision != NULL)
        *ret_revision = r->header != NULL ? r->header->revision : 0;
    protobuf_c_message_free_unpacked(m, NULL);
    return err;
}

/* See etcd.h. */
int etcd_get_many(etcd_client *c, const char *const *keys, size_t n,
                  struct etcd_kv *ret) {
    if (c == NULL || keys == NULL || ret == NULL || n == 0)
        return DETD_EINVAL;
    if (n > ETCD_GET_MANY_MAX)
        return DETD_ELIMIT;
    Etcdserverpb__RangeRequest rr[ETCD_GET_MANY_MAX];
    Etcdserverpb__RequestOp op[ETCD_GET_MANY_MAX], *ops[ETCD_GET_MANY_MAX];
    int err;
    for (size_t i = 0; i < n; i++) {
        if ((err = key_ok(keys[i])) != 0)
            return err;
        range_op(&op[i], &rr[i], keys[i]);
        ops[i] = &op[i];
    }
    /* No compare and only reads: etcd serves it as one linearizable read
     * at one revision, without a Raft proposal. */
    Etcdserverpb__TxnRequest txn = ETCDSERVERPB__TXN_REQUEST__INIT;
    txn.n_success = n;
    txn.success = ops;
    ProtobufCMessage *m = NULL;
    err = etcd_call_unary(c, M_TXN, &txn.base,
                          &etcdserverpb__txn_response__descriptor, &m);
    if (err != 0)
        return err;
    Etcdserverpb__TxnResponse *r = (void *)m;
    memset(ret, 0, n * sizeof(*ret));
    if (!r->succeeded || r->n_responses != n)
        err = DETD_EPROTO;
    for (size_t i = 0; err == 0 && i < n; i++)
        err = range_kv(r->responses[i], &ret[i]);
    if (err != 0)
        for (size_t i = 0; i < n; i++)
            etcd_kv_clear(&ret[i]);
    protobuf_c_message_free_unpacked(m, NULL);
    return err;
}

/* See etcd.h. */
int etcd_put_if_absent(etcd_client *c, const char *key, const void *value,
                       size_t value_len, int64_t lease,
                       struct etcd_put_result *ret) {
    if (ret == NULL)
        return DETD_EINVAL;
    /* One key's creation is a batch of one (etcd_batch.c): one Txn shape
     * and one parser for both. */
    struct etcd_create op = {
        .key = key, .value = value, .value_len = value_len, .lease = lease};
    int64_t rev = 0;
    int err = etcd_create_batch(c, &op, 1, &rev);
    if (err != 0)
        return err;
    memset(ret, 0, sizeof(*ret));
    ret->won = op.won;
    ret->same_value = op.same_value;
    ret->kv = op.kv; /* moved: op owns no more than guard_kv now */
    ret->revision = rev;
    memset(&op.kv, 0, sizeof(op.kv));
    etcd_create_clear(&op);
    return 0;
}
