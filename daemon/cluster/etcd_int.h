/*
 * Private to the etcd adapter (etcd.c, etcd_kv.c, etcd_stream.c): the
 * client struct and the gRPC/protobuf helpers they share. Nothing else
 * includes it.
 */
#ifndef DETD_ETCD_INT_H
#define DETD_ETCD_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include <grpc/grpc.h>
#include <grpc/support/time.h>

#include "etcd/rpc.pb-c.h"
#include "cluster/etcd.h"

struct etcd_client {
    grpc_channel *channel; /* all endpoints, lb_policy */
    grpc_channel_credentials *creds;
    char *target;
    char *endpoints[ETCD_MAX_ENDPOINTS]; /* URLs, for status */
    char *targets[ETCD_MAX_ENDPOINTS];   /* one gRPC target each */
    size_t n_endpoints;
    int tls;
    char *tls_server_name;
    char *first_host; /* host of the first endpoint */
    char *lb_policy;
    int attempt_ms;
    int total_ms;
    int range_page;
    unsigned seed;
    char *user;
    char *password;
    pthread_mutex_t auth_mu; /* guards token, token_gen */
    char *token;             /* NULL: no auth on the server */
    uint64_t token_gen;      /* 0: not authenticated yet */
    atomic_int cancelled;    /* etcd_set_cancelled(): no new attempts */
};

/* A gRPC deadline at monotonic time at_ms. */
gpr_timespec etcd_deadline(int64_t at_ms);
void etcd_sleep_ms(int64_t ms);
/* d jittered into [d/2, d]. */
int64_t etcd_jitter(int64_t d, unsigned *seed);

/* Map a gRPC status and its details to a DETD_E* code (0 for OK). */
int etcd_status_err(grpc_status_code code, const char *msg);

/* A channel to target with the adapter's arguments (caps, keepalive);
 * with TLS, tls_name (may be NULL) is the name checked in certificates. */
grpc_channel *etcd_channel_new(etcd_client *c, const char *target,
                               const char *tls_name);

/* Current auth token, see etcd.c. *ret_token is malloc'ed or NULL. */
int etcd_auth_token(etcd_client *c, int64_t end_ms, uint64_t stale_gen,
                    char **ret_token, uint64_t *ret_gen);

/* Fill md (room for 2) with the token and, if hasleader, the etcd
 * "hasleader" flag; etcd_md_free() releases the slices. */
void etcd_md_fill(grpc_metadata *md, size_t *n, const char *token,
                  int hasleader);
void etcd_md_free(grpc_metadata *md, size_t n);

/* Serialise m; NULL over ETCD_MAX_MESSAGE. Caller destroys. A send
 * consumes the buffer's contents: use a new buffer for every send. */
grpc_byte_buffer *etcd_pack(const ProtobufCMessage *m);
/* Parse bb (capped) into *ret (caller frees with
 * protobuf_c_message_free_unpacked). */
int etcd_unpack(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *d,
                ProtobufCMessage **ret);
/* Copy status details into msg, truncated, NUL-terminated. */
void etcd_copy_details(grpc_slice details, char *msg, size_t cap);

/*
 * One unary call with the client's deadlines, retries (UNAVAILABLE,
 * DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, with backoff until the total
 * budget) and auth (one re-authentication when the token is rejected).
 * On success *ret is the response (protobuf_c_message_free_unpacked).
 */
int etcd_call_unary(etcd_client *c, const char *method,
                    const ProtobufCMessage *req,
                    const ProtobufCMessageDescriptor *rdesc,
                    ProtobufCMessage **ret);

/* A key's length into *ret_len: DETD_EINVAL when NULL or empty,
 * DETD_ELIMIT over ETCD_MAX_KEY. */
int etcd_check_key(const char *key, size_t *ret_len);
/* Copy key and value bytes (capped: DETD_ELIMIT) into *dst, each
 * NUL-terminated; revisions and lease are left to the caller. */
int etcd_kv_fill(const void *key, size_t klen, const void *val, size_t vlen,
                 struct etcd_kv *dst);
/* Copy a protobuf KeyValue into an owned etcd_kv, capped. */
int etcd_kv_copy(const Mvccpb__KeyValue *src, struct etcd_kv *dst);
/* Range end for a prefix; see etcd.c. */
size_t etcd_prefix_end(const char *prefix, size_t len, uint8_t *end);

/* etcd_create_batch()'s request (etcd_batch.c), built over the ops'
 * borrowed keys and values; b->txn is the message to send. Returns 0,
 * DETD_EINVAL, DETD_ELIMIT or DETD_ENOMEM. Free with etcd_batch_free(). */
struct batch_item;
struct etcd_batch {
    Etcdserverpb__TxnRequest txn;
    Etcdserverpb__RequestOp **ops;
    struct batch_item *items;
};
int etcd_batch_build(const struct etcd_create *ops, size_t n,
                     struct etcd_batch *b);
void etcd_batch_free(struct etcd_batch *b);
/* Map the response r of a built batch to the ops' results (the inner
 * results, in order). DETD_EPROTO when r is not the answer to such a
 * request (results cleared). */
int etcd_batch_parse(const Etcdserverpb__TxnResponse *r,
                     struct etcd_create *ops, size_t n);

#endif /* DETD_ETCD_INT_H */
