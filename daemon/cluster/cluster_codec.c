/*
 * cluster_codec: the JSON values the etcd backend writes and reads (see
 * cluster_codec.h). Values read are untrusted bytes: every field of a
 * decision is type- and size-checked and the id must be the hash of the
 * key fields.
 */
#define _GNU_SOURCE
#include "cluster/cluster_codec.h"

#include "cluster/etcd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "detd/error.h"
#include "core/keyid.h"

static int get_str(json_t *o, const char *name, size_t max, int required,
                   char **ret) {
    json_t *v = json_object_get(o, name);
    const char *s = json_string_value(v);
    if (s == NULL) {
        if (required || v != NULL)
            return DETD_EPROTO;
        s = "";
    }
    if (strlen(s) > max)
        return DETD_ELIMIT;
    *ret = strdup(s);
    return *ret != NULL ? 0 : DETD_ENOMEM;
}

static int get_int(json_t *o, const char *name, int64_t min, int64_t max,
                   int64_t *ret) {
    json_t *v = json_object_get(o, name);
    if (!json_is_integer(v))
        return DETD_EPROTO;
    int64_t x = json_integer_value(v);
    if (x < min || x > max)
        return DETD_EPROTO;
    *ret = x;
    return 0;
}

/* An optional integer: absent is dflt (a record of an older daemon),
 * anything else must be an integer in [min, max]. */
static int get_int_or(json_t *o, const char *name, int64_t min, int64_t max,
                      int64_t dflt, int64_t *ret) {
    if (json_object_get(o, name) == NULL) {
        *ret = dflt;
        return 0;
    }
    return get_int(o, name, min, max, ret);
}

/* See cluster.h. */
int cluster_decision_decode(const char *json, size_t len, struct decision *ret,
                            char **ret_writer) {
    json_error_t je;
    struct decision d;
    memset(&d, 0, sizeof(d));
    char *writer = NULL;
    if (json == NULL || ret == NULL)
        return DETD_EINVAL;
    json_t *o = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(o)) {
        json_decref(o);
        return DETD_EPROTO;
    }
    int64_t n_cand, source, claim, pid, rank, lrank, at, uid, claimed, world;
    const size_t big = 1024 * 1024;
    int err;
    if ((err = get_str(o, "id", KEYID_HEX_LEN, 1, &d.id)) < 0 ||
        (err = get_str(o, "ns", 4096, 1, &d.ns)) < 0 ||
        (err = get_str(o, "arch", 4096, 1, &d.arch)) < 0 ||
        (err = get_str(o, "kernel", 4096, 1, &d.kernel)) < 0 ||
        (err = get_str(o, "key", big, 1, &d.key)) < 0 ||
        (err = get_str(o, "candidates_fp", KEYID_HEX_LEN, 1,
                       &d.candidates_fp)) < 0 ||
        (err = get_str(o, "config", 4096, 1, &d.config)) < 0 ||
        (err = get_str(o, "by_host", 4096, 0, &d.by_host)) < 0 ||
        (err = get_str(o, "by_device", 4096, 0, &d.by_device)) < 0 ||
        (err = get_str(o, "by_arch", 4096, 0, &d.by_arch)) < 0 ||
        (err = get_str(o, "triton_version", 4096, 0, &d.triton_version)) < 0 ||
        (err = get_str(o, "timings", big, 0, &d.timings_json)) < 0 ||
        (err = get_str(o, "table_file", 4096, 0, &d.table_file)) < 0 ||
        (err = get_str(o, "writer", 512, 0, &writer)) < 0 ||
        (err = get_int(o, "n_candidates", 0, INT32_MAX, &n_cand)) < 0 ||
        (err = get_int(o, "source", 0, 7, &source)) < 0 ||
        (err = get_int(o, "claim_id", INT64_MIN, INT64_MAX, &claim)) < 0 ||
        (err = get_int(o, "by_pid", INT32_MIN, INT32_MAX, &pid)) < 0 ||
        (err = get_int(o, "by_rank", INT32_MIN, INT32_MAX, &rank)) < 0 ||
        (err = get_int(o, "by_local_rank", INT32_MIN, INT32_MAX, &lrank)) < 0 ||
        (err = get_int(o, "decided_at_ms", INT64_MIN, INT64_MAX, &at)) < 0 ||
        /* Who the receiving daemon saw: absent from older records. */
        (err = get_str(o, "by_node", CLUSTER_MAX_NODE_ID, 0, &d.by_node)) < 0 ||
        (err = get_int_or(o, "by_uid", -1, UINT32_MAX, -1, &uid)) < 0 ||
        (err = get_int_or(o, "by_claimed_pid", INT32_MIN, INT32_MAX, 0,
                          &claimed)) < 0 ||
        /* The timing process's job: absent from older records. */
        (err = get_int_or(o, "by_world_size", INT32_MIN, INT32_MAX, 0,
                          &world)) < 0 ||
        (err = get_str(o, "by_job", 4096, 0, &d.by_job)) < 0 ||
        /* How it was timed (a JSON object's text): absent from older
         * records. */
        (err = get_str(o, "timing", 8192, 0, &d.timing_json)) < 0)
        goto fail;
    d.n_candidates = (int32_t)n_cand;
    d.source = (int32_t)source;
    d.claim_id = (uint64_t)claim;
    d.by_pid = (int32_t)pid;
    d.by_rank = (int32_t)rank;
    d.by_local_rank = (int32_t)lrank;
    d.decided_at_ms = at;
    d.by_uid = uid;
    d.by_claimed_pid = (int32_t)claimed;
    d.by_world_size = (int32_t)world;
    /* The id must be what the key fields hash to. */
    char id[KEYID_HEX_LEN + 1];
    keyid_decision_id(d.ns, d.arch, d.kernel, d.key, d.candidates_fp, id);
    if (strcmp(id, d.id) != 0 || d.config[0] == '\0') {
        err = DETD_EPROTO;
        goto fail;
    }
    json_decref(o);
    *ret = d;
    if (ret_writer != NULL)
        *ret_writer = writer;
    else
        free(writer);
    return 0;
fail:
    json_decref(o);
    decision_clear(&d);
    free(writer);
    return err;
}

/* See cluster_codec.h. */
int cluster_decision_encode(const struct decision *r, const char *writer,
                            char **ret_value, size_t *ret_len) {
#define S(x) ((x) != NULL ? (x) : "")
    json_t *o = json_pack(
        "{s:i, s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:i, s:s, s:i, s:I, s:s, "
        "s:i, s:i, s:i, s:s, s:s, s:s, s:s, s:s, s:I, s:I, s:s, s:i, s:i, "
        "s:s, s:s}",
        "v", 1, "writer", writer, "id", r->id, "ns", S(r->ns), "arch",
        S(r->arch), "kernel", S(r->kernel), "key", S(r->key), "candidates_fp",
        S(r->candidates_fp), "n_candidates", (int)r->n_candidates, "config",
        r->config, "source", (int)r->source, "claim_id",
        (json_int_t)r->claim_id, "by_host", S(r->by_host), "by_pid",
        (int)r->by_pid, "by_rank", (int)r->by_rank, "by_local_rank",
        (int)r->by_local_rank, "by_device", S(r->by_device), "by_arch",
        S(r->by_arch), "triton_version", S(r->triton_version), "timings",
        S(r->timings_json), "table_file", S(r->table_file), "decided_at_ms",
        (json_int_t)r->decided_at_ms, "by_uid", (json_int_t)r->by_uid,
        "by_node", S(r->by_node), "by_claimed_pid", (int)r->by_claimed_pid,
        "by_world_size", (int)r->by_world_size, "by_job", S(r->by_job),
        "timing", S(r->timing_json));
#undef S
    char *v = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (v == NULL)
        return DETD_ENOMEM;
    size_t n = strlen(v);
    if (n > ETCD_MAX_VALUE) {
        free(v);
        return DETD_ELIMIT;
    }
    *ret_value = v;
    *ret_len = n;
    return 0;
}

/* See cluster_codec.h. */
int cluster_value_writer(const unsigned char *v, size_t n, char *buf,
                         size_t cap) {
    json_error_t je;
    json_t *o = json_loadb((const char *)v, n, 0, &je);
    buf[0] = '\0';
    if (o == NULL)
        return -1;
    const char *w = json_string_value(json_object_get(o, "writer"));
    if (w != NULL)
        snprintf(buf, cap, "%s", w);
    json_decref(o);
    return 0;
}

/* See cluster_codec.h. */
char *cluster_node_encode(const char *node_id, const char *listen,
                          const char *socket_path, int pid, int64_t started_ms,
                          const char *version) {
    json_t *nv =
        json_pack("{s:s, s:s, s:s, s:i, s:I, s:s}", "node", node_id, "listen",
                  listen != NULL ? listen : "", "socket",
                  socket_path != NULL ? socket_path : "", "pid", pid, "started",
                  (json_int_t)started_ms, "version", version);
    char *v = nv != NULL ? json_dumps(nv, JSON_COMPACT) : NULL;
    json_decref(nv);
    return v;
}

static void copy_str(char *dst, size_t cap, json_t *o, const char *name) {
    const char *s = json_string_value(json_object_get(o, name));
    snprintf(dst, cap, "%s", s != NULL ? s : "");
}

/* See cluster_codec.h. */
void cluster_node_decode(const char *value, size_t len,
                         struct cluster_node *n) {
    json_error_t je;
    json_t *o = json_loadb(value, len, 0, &je);
    if (o == NULL)
        return;
    copy_str(n->listen, sizeof(n->listen), o, "listen");
    copy_str(n->socket, sizeof(n->socket), o, "socket");
    copy_str(n->version, sizeof(n->version), o, "version");
    n->pid = (int32_t)json_integer_value(json_object_get(o, "pid"));
    n->started_at_ms = json_integer_value(json_object_get(o, "started"));
    json_decref(o);
}
