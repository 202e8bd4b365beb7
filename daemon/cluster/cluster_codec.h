/*
 * cluster_codec: the JSON values of the etcd backend: decisions (written
 * by cluster_commit(), read back from the watch and by other nodes), the
 * writer of a value, and the nodes' registration values.
 */
#ifndef DETD_CLUSTER_CODEC_H
#define DETD_CLUSTER_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "core/decision.h"

/* Bytes of a node id (--node-id). */
#define CLUSTER_MAX_NODE_ID 128

/* A registered node, as read from its node key. */
struct cluster_node {
    char node_id[CLUSTER_MAX_NODE_ID + 1];
    char listen[128];
    char socket[128];
    char version[32];
    int32_t pid;
    int64_t started_at_ms;
};

/*
 * Decode a decision value into *ret (strings are heap copies: clear with
 * decision_clear()). The id must be the one the key fields hash to
 * (keyid.h). *ret_writer (may be NULL) gets a heap copy of the writer id.
 * A record of an older daemon has no by_uid, by_node or by_claimed_pid:
 * they read as -1, "" and 0. by_node is at most CLUSTER_MAX_NODE_ID bytes.
 * Returns 0, DETD_EPROTO (malformed), DETD_ELIMIT or DETD_ENOMEM.
 */
int cluster_decision_decode(const char *json, size_t len, struct decision *ret,
                            char **ret_writer);

/*
 * Encode decision r with writer id writer as the value stored in etcd.
 * Returns 0 with *ret_value (heap, caller frees; *ret_len bytes, NUL-
 * terminated), DETD_ELIMIT (over etcd's value cap) or DETD_ENOMEM.
 */
int cluster_decision_encode(const struct decision *r, const char *writer,
                            char **ret_value, size_t *ret_len);

/* The writer id stored in value v of n bytes into buf ("" if none).
 * Returns 0, or -1 for a value that is not JSON. */
int cluster_value_writer(const unsigned char *v, size_t n, char *buf,
                         size_t cap);

/* A node's registration value (heap, caller frees; NULL: out of memory).
 * listen and socket_path may be NULL. */
char *cluster_node_encode(const char *node_id, const char *listen,
                          const char *socket_path, int pid, int64_t started_ms,
                          const char *version);

/* Fill n's listen, socket, version, pid and start time from a
 * registration value (fields missing or not JSON: left as they are). */
void cluster_node_decode(const char *value, size_t len, struct cluster_node *n);

#endif /* DETD_CLUSTER_CODEC_H */
