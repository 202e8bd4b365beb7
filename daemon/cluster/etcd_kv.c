/*
 * etcd adapter: key-value and lease calls, each one Txn/Range/Put/... with
 * the deadlines, retries and auth of etcd_call_unary(). Contracts in etcd.h.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>
#include <string.h>

#include "detd/error.h"
#include "cluster/etcd.h"
#include "cluster/etcd_int.h"

#define M_RANGE "/etcdserverpb.KV/Range"
#define M_PUT "/etcdserverpb.KV/Put"
#define M_DELETE "/etcdserverpb.KV/DeleteRange"
#define M_TXN "/etcdserverpb.KV/Txn"
#define M_COMPACT "/etcdserverpb.KV/Compact"
#define M_GRANT "/etcdserverpb.Lease/LeaseGrant"
#define M_REVOKE "/etcdserverpb.Lease/LeaseRevoke"
#define M_TTL "/etcdserverpb.Lease/LeaseTimeToLive"

/* ---- key-values ---------------------------------------------------- */

/* See etcd_int.h. */
int etcd_check_key(const char *key, size_t *ret_len) {
    if (key == NULL)
        return DETD_EINVAL;
    size_t n = strnlen(key, ETCD_MAX_KEY + 1);
    if (n == 0)
        return DETD_EINVAL;
    if (n > ETCD_MAX_KEY)
        return DETD_ELIMIT;
    *ret_len = n;
    return 0;
}

void etcd_kv_clear(struct etcd_kv *kv) {
    if (kv == NULL)
        return;
    free(kv->key);
    free(kv->value);
    memset(kv, 0, sizeof(*kv));
}

void etcd_put_result_clear(struct etcd_put_result *r) {
    if (r == NULL)
        return;
    etcd_kv_clear(&r->kv);
    memset(r, 0, sizeof(*r));
}

/* See etcd_int.h. */
int etcd_kv_fill(const void *key, size_t klen, const void *val, size_t vlen,
                 struct etcd_kv *dst) {
    if (klen > ETCD_MAX_KEY || vlen > ETCD_MAX_VALUE)
        return DETD_ELIMIT;
    char *k = malloc(klen + 1);
    unsigned char *v = malloc(vlen + 1);
    if (k == NULL || v == NULL) {
        free(k);
        free(v);
        return DETD_ENOMEM;
    }
    if (klen > 0)
        memcpy(k, key, klen);
    k[klen] = '\0';
    if (vlen > 0)
        memcpy(v, val, vlen);
    v[vlen] = '\0';
    dst->key = k;
    dst->key_len = klen;
    dst->value = v;
    dst->value_len = vlen;
    return 0;
}

int etcd_kv_copy(const Mvccpb__KeyValue *src, struct etcd_kv *dst) {
    struct etcd_kv kv = {0};
    int err = etcd_kv_fill(src->key.data, src->key.len, src->value.data,
                           src->value.len, &kv);
    if (err != 0)
        return err;
    kv.create_revision = src->create_revision;
    kv.mod_revision = src->mod_revision;
    kv.version = src->version;
    kv.lease = src->lease;
    *dst = kv;
    return 0;
}

static int64_t header_rev(const Etcdserverpb__ResponseHeader *h) {
    return h != NULL ? h->revision : 0;
}

int etcd_put(etcd_client *c, const char *key, const void *value,
             size_t value_len, int64_t lease, int64_t *ret_revision) {
    size_t klen;
    int err;
    if (c == NULL || (value == NULL && value_len > 0) || lease < 0)
        return DETD_EINVAL;
    if ((err = etcd_check_key(key, &klen)) != 0)
        return err;
    if (value_len > ETCD_MAX_VALUE)
        return DETD_ELIMIT;
    Etcdserverpb__PutRequest put = ETCDSERVERPB__PUT_REQUEST__INIT;
    put.key.len = klen;
    put.key.data = (uint8_t *)key;
    put.value.len = value_len;
    put.value.data = (uint8_t *)value;
    put.lease = lease;
    ProtobufCMessage *m = NULL;
    err = etcd_call_unary(c, M_PUT, &put.base,
                          &etcdserverpb__put_response__descriptor, &m);
    if (err != 0)
        return err;
    if (ret_revision != NULL)
        *ret_revision = header_rev(((Etcdserverpb__PutResponse *)m)->header);
    protobuf_c_message_free_unpacked(m, NULL);
    return 0;
}

int etcd_get(etcd_client *c, const char *key, struct etcd_kv *ret_kv,
             int64_t *ret_revision) {
    size_t klen;
    int err;
    if (c == NULL || ret_kv == NULL)
        return DETD_EINVAL;
    if ((err = etcd_check_key(key, &klen)) != 0)
        return err;
    Etcdserverpb__RangeRequest req = ETCDSERVERPB__RANGE_REQUEST__INIT;
    req.key.len = klen;
    req.key.data = (uint8_t *)key;
    ProtobufCMessage *m = NULL;
    err = etcd_call_unary(c, M_RANGE, &req.base,
                          &etcdserverpb__range_response__descriptor, &m);
    if (err != 0)
        return err;
    Etcdserverpb__RangeResponse *r = (void *)m;
    if (r->n_kvs == 0)
        err = DETD_ENOTFOUND;
    else if (r->n_kvs > 1)
        err = DETD_EPROTO;
    else if ((err = etcd_kv_copy(r->kvs[0], ret_kv)) == 0 &&
             ret_revision != NULL)
        *ret_revision = header_rev(r->header);
    protobuf_c_message_free_unpacked(m, NULL);
    return err;
}

/*
 * The end of the range of keys starting with prefix: prefix with its last
 * byte below 0xff incremented (trailing 0xff bytes dropped), or "\0"
 * (every key) when there is none. Writes into end (cap >= len + 1).
 */
size_t etcd_prefix_end(const char *prefix, size_t len, uint8_t *end) {
    memcpy(end, prefix, len);
    while (len > 0) {
        if (end[len - 1] < 0xff) {
            end[len - 1]++;
            return len;
        }
        len--;
    }
    end[0] = 0;
    return 1;
}

int etcd_range_prefix(etcd_client *c, const char *prefix, int64_t revision,
                      etcd_kv_cb cb, void *arg, int64_t *ret_revision) {
    size_t plen;
    int err;
    if (c == NULL || cb == NULL || revision < 0)
        return DETD_EINVAL;
    if ((err = etcd_check_key(prefix, &plen)) != 0)
        return err;
    uint8_t end[ETCD_MAX_KEY + 1], from[ETCD_MAX_KEY + 2];
    size_t elen = etcd_prefix_end(prefix, plen, end);
    memcpy(from, prefix, plen);
    size_t flen = plen;
    int64_t rev = revision;
    for (;;) {
        Etcdserverpb__RangeRequest req = ETCDSERVERPB__RANGE_REQUEST__INIT;
        req.key.len = flen;
        req.key.data = from;
        req.range_end.len = elen;
        req.range_end.data = end;
        req.limit = c->range_page;
        req.revision = rev;
        ProtobufCMessage *m = NULL;
        err = etcd_call_unary(c, M_RANGE, &req.base,
                              &etcdserverpb__range_response__descriptor, &m);
        if (err != 0)
            return err;
        Etcdserverpb__RangeResponse *r = (void *)m;
        if (rev == 0)
            rev = header_rev(r->header);
        int more = r->more;
        if (r->n_kvs > (size_t)c->range_page || rev <= 0 ||
            (more && r->n_kvs == 0))
            err = DETD_EPROTO;
        for (size_t i = 0; err == 0 && i < r->n_kvs; i++) {
            struct etcd_kv kv = {0};
            if ((err = etcd_kv_copy(r->kvs[i], &kv)) != 0)
                break;
            err = cb(&kv, arg);
            etcd_kv_clear(&kv);
        }
        if (err == 0 && more) {
            /* Next page starts just after the last key: key + "\0". */
            const ProtobufCBinaryData *last = &r->kvs[r->n_kvs - 1]->key;
            if (last->len > ETCD_MAX_KEY) {
                err = DETD_ELIMIT;
            } else {
                memcpy(from, last->data, last->len);
                from[last->len] = 0;
                flen = last->len + 1;
            }
        }
        protobuf_c_message_free_unpacked(m, NULL);
        if (err != 0)
            return err;
        if (!more)
            break;
    }
    if (ret_revision != NULL)
        *ret_revision = rev;
    return 0;
}

int etcd_delete(etcd_client *c, const char *key, int prefix,
                int64_t *ret_deleted, int64_t *ret_revision) {
    size_t klen;
    int err;
    if (c == NULL)
        return DETD_EINVAL;
    if ((err = etcd_check_key(key, &klen)) != 0)
        return err;
    uint8_t end[ETCD_MAX_KEY + 1];
    Etcdserverpb__DeleteRangeRequest req =
        ETCDSERVERPB__DELETE_RANGE_REQUEST__INIT;
    req.key.len = klen;
    req.key.data = (uint8_t *)key;
    if (prefix) {
        req.range_end.len = etcd_prefix_end(key, klen, end);
        req.range_end.data = end;
    }
    ProtobufCMessage *m = NULL;
    err = etcd_call_unary(c, M_DELETE, &req.base,
                          &etcdserverpb__delete_range_response__descriptor, &m);
    if (err != 0)
        return err;
    Etcdserverpb__DeleteRangeResponse *r = (void *)m;
    if (ret_deleted != NULL)
        *ret_deleted = r->deleted;
    if (ret_revision != NULL)
        *ret_revision = header_rev(r->header);
    protobuf_c_message_free_unpacked(m, NULL);
    return 0;
}

int etcd_compact(etcd_client *c, int64_t revision) {
    if (c == NULL || revision <= 0)
        return DETD_EINVAL;
    Etcdserverpb__CompactionRequest req =
        ETCDSERVERPB__COMPACTION_REQUEST__INIT;
    req.revision = revision;
    req.physical = 1;
    ProtobufCMessage *m = NULL;
    int err =
        etcd_call_unary(c, M_COMPACT, &req.base,
                        &etcdserverpb__compaction_response__descriptor, &m);
    if (err == 0)
        protobuf_c_message_free_unpacked(m, NULL);
    return err;
}

/* ---- leases -------------------------------------------------------- */

int etcd_lease_grant(etcd_client *c, int64_t ttl_s, int64_t *ret_id,
                     int64_t *ret_ttl) {
    if (c == NULL || ttl_s <= 0 || ret_id == NULL)
        return DETD_EINVAL;
    Etcdserverpb__LeaseGrantRequest req =
        ETCDSERVERPB__LEASE_GRANT_REQUEST__INIT;
    req.ttl = ttl_s;
    ProtobufCMessage *m = NULL;
    int err =
        etcd_call_unary(c, M_GRANT, &req.base,
                        &etcdserverpb__lease_grant_response__descriptor, &m);
    if (err != 0)
        return err;
    Etcdserverpb__LeaseGrantResponse *r = (void *)m;
    if ((r->error != NULL && r->error[0] != '\0') || r->id == 0 ||
        r->ttl <= 0) {
        err = DETD_EPROTO;
    } else {
        *ret_id = r->id;
        if (ret_ttl != NULL)
            *ret_ttl = r->ttl;
    }
    protobuf_c_message_free_unpacked(m, NULL);
    return err;
}

int etcd_lease_revoke(etcd_client *c, int64_t id) {
    if (c == NULL || id == 0)
        return DETD_EINVAL;
    Etcdserverpb__LeaseRevokeRequest req =
        ETCDSERVERPB__LEASE_REVOKE_REQUEST__INIT;
    req.id = id;
    ProtobufCMessage *m = NULL;
    int err =
        etcd_call_unary(c, M_REVOKE, &req.base,
                        &etcdserverpb__lease_revoke_response__descriptor, &m);
    if (err == 0)
        protobuf_c_message_free_unpacked(m, NULL);
    return err;
}

int etcd_lease_ttl(etcd_client *c, int64_t id, int64_t *ret_ttl) {
    if (c == NULL || id == 0 || ret_ttl == NULL)
        return DETD_EINVAL;
    Etcdserverpb__LeaseTimeToLiveRequest req =
        ETCDSERVERPB__LEASE_TIME_TO_LIVE_REQUEST__INIT;
    req.id = id;
    ProtobufCMessage *m = NULL;
    int err = etcd_call_unary(
        c, M_TTL, &req.base,
        &etcdserverpb__lease_time_to_live_response__descriptor, &m);
    if (err != 0)
        return err;
    Etcdserverpb__LeaseTimeToLiveResponse *r = (void *)m;
    if (r->ttl < 0)
        err = DETD_ENOTFOUND;
    else
        *ret_ttl = r->ttl;
    protobuf_c_message_free_unpacked(m, NULL);
    return err;
}
