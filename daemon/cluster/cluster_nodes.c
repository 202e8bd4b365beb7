/*
 * cluster_nodes: registered nodes and the node's lease file (see
 * cluster_nodes.h).
 */
#define _GNU_SOURCE
#include "cluster/cluster_nodes.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "detd/error.h"
#include "strfmt.h"

struct nodes_ctx {
    struct cluster_node *v;
    size_t n, cap, max;
    size_t plen;
};

static int nodes_cb(const struct etcd_kv *kv, void *arg) {
    struct nodes_ctx *x = arg;
    if (x->n >= x->max)
        return DETD_ELIMIT;
    if (x->n == x->cap) {
        size_t cap = x->cap != 0 ? x->cap * 2 : 64;
        if (cap > x->max)
            cap = x->max;
        struct cluster_node *v = realloc(x->v, cap * sizeof(*v));
        if (v == NULL)
            return DETD_ENOMEM;
        x->v = v;
        x->cap = cap;
    }
    struct cluster_node *n = &x->v[x->n];
    memset(n, 0, sizeof(*n));
    snprintf(n->node_id, sizeof(n->node_id), "%s", kv->key + x->plen);
    cluster_node_decode((const char *)kv->value, kv->value_len, n);
    x->n++;
    return 0;
}

static int node_cmp(const void *a, const void *b) {
    return strcmp(((const struct cluster_node *)a)->node_id,
                  ((const struct cluster_node *)b)->node_id);
}

/* See cluster_nodes.h. */
int cluster_nodes_read(etcd_client *e, const char *ns_prefix, size_t max,
                       struct cluster_node **ret_nodes, size_t *ret_n) {
    char *nprefix = strfmt("%snodes/", ns_prefix);
    if (nprefix == NULL)
        return DETD_ENOMEM;
    struct nodes_ctx x = {NULL, 0, 0, max, strlen(nprefix)};
    int err = etcd_range_prefix(e, nprefix, 0, nodes_cb, &x, NULL);
    free(nprefix);
    if (err != 0) {
        free(x.v);
        return err;
    }
    /* etcd answers in key order; the cursor of cluster_nodes_after() relies
     * on it, so make sure (a node id cut to CLUSTER_MAX_NODE_ID may move). */
    if (x.n > 1)
        qsort(x.v, x.n, sizeof(*x.v), node_cmp);
    *ret_nodes = x.v;
    *ret_n = x.n;
    return 0;
}

/* See cluster_nodes.h. */
size_t cluster_nodes_after(const struct cluster_node *v, size_t n,
                           const char *after) {
    if (after == NULL || after[0] == '\0')
        return 0;
    size_t lo = 0, hi = n; /* the first id > after lies in [lo, hi] */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(v[mid].node_id, after) <= 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* See cluster_nodes.h. */
size_t cluster_names_page_end(char *const *a, size_t na, char *const *b,
                              size_t nb, size_t start, size_t max_items,
                              size_t max_bytes) {
    size_t end = start, bytes = 0;
    while (end < na + nb && end - start < max_items) {
        const char *s = end < na ? a[end] : b[end - na];
        size_t len = strlen(s);
        if (end > start && bytes + len > max_bytes)
            break;
        bytes += len;
        end++;
    }
    return end;
}

/* See cluster_nodes.h. */
int64_t cluster_lease_file_read(const char *path) {
    FILE *f = path != NULL ? fopen(path, "re") : NULL;
    if (f == NULL)
        return 0;
    char buf[32] = {0};
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *end = NULL;
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    if (errno != 0 || end == buf || (*end != '\n' && *end != '\0') || v <= 0)
        return 0;
    return (int64_t)v;
}

/* See cluster_nodes.h. */
int cluster_lease_file_write(const char *path, int64_t id) {
    if (path == NULL)
        return 0;
    if (id == 0)
        return unlink(path) == 0 || errno == ENOENT ? 0 : -errno;
    char *tmp = strfmt("%s.tmp", path);
    if (tmp == NULL)
        return -ENOMEM;
    int rc = 0;
    FILE *f = fopen(tmp, "we");
    if (f == NULL)
        rc = -errno;
    else if (fprintf(f, "%lld\n", (long long)id) < 0)
        rc = -EIO;
    if (f != NULL && fclose(f) != 0 && rc == 0)
        rc = -errno;
    if (rc == 0 && rename(tmp, path) != 0)
        rc = -errno;
    if (rc != 0)
        unlink(tmp);
    free(tmp);
    return rc;
}

/* See cluster_nodes.h. */
int64_t cluster_lease_file_revoke(etcd_client *e, const char *path,
                                  int *ret_revoked, int *ret_err) {
    *ret_revoked = 0;
    *ret_err = 0;
    int64_t old = cluster_lease_file_read(path);
    if (old == 0)
        return 0;
    int err = etcd_lease_revoke(e, old);
    if (err != 0 && err != DETD_ENOTFOUND) {
        *ret_err = err;
        return 0;
    }
    cluster_lease_file_write(path, 0);
    *ret_revoked = err == 0;
    return old;
}

/* See cluster_nodes.h. */
int64_t cluster_backoff_ms(unsigned attempt, int64_t base_ms, int64_t cap_ms,
                           uint64_t *rng) {
    int64_t ceil = base_ms;
    while (attempt-- > 0 && ceil < cap_ms)
        ceil *= 2;
    if (ceil > cap_ms)
        ceil = cap_ms;
    uint64_t x = *rng != 0 ? *rng : 0x9e3779b97f4a7c15ull;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *rng = x;
    return (int64_t)(x % (uint64_t)(ceil + 1));
}

/* See cluster_nodes.h. */
uint64_t cluster_random_u64(void) {
    uint64_t r = 0;
    FILE *ur = fopen("/dev/urandom", "rbe");
    if (ur != NULL) {
        if (fread(&r, sizeof(r), 1, ur) != 1)
            r = 0;
        fclose(ur);
    }
    return r ^ (uint64_t)clock_unix_ms() ^ ((uint64_t)getpid() << 40);
}

/* See cluster_nodes.h. */
int cluster_node_id_check(const char *id, char **ret_errmsg) {
    size_t nl = strlen(id);
    if (nl > 0 && nl <= CLUSTER_MAX_NODE_ID && strchr(id, '/') == NULL)
        return 0;
    if (ret_errmsg != NULL)
        *ret_errmsg = strfmt("node id '%s' must be 1 to %d characters "
                             "without '/'",
                             id, CLUSTER_MAX_NODE_ID);
    return DETD_EINVAL;
}

/* See cluster_nodes.h. */
void cluster_node_call(const struct cluster_node *nd, const char *method,
                       const void *req, size_t req_len,
                       const struct grpc_unary_tls *tls, int64_t call_ms,
                       int64_t deadline_ms, cluster_pager pager,
                       cluster_page_cb cb, void *arg) {
    if (nd->listen[0] == '\0') {
        const char *why = "registered without a --listen address";
        cb(nd->node_id, DETD_EUNAVAILABLE, why, strlen(why), arg);
        return;
    }
    void *own = NULL; /* the request of page 2 on, ours to free */
    for (int page = 0;; page++) {
        void *resp = NULL, *next = NULL;
        size_t rlen = 0, nlen = 0;
        char *err = NULL;
        int64_t left = deadline_ms - clock_mono_ms();
        if (left <= 0) {
            const char *why = "the deadline passed before its next page";
            cb(nd->node_id, DETD_ETIMEDOUT, why, strlen(why), arg);
            break;
        }
        if (left > call_ms)
            left = call_ms;
        int rc = grpc_unary_oneshot(nd->listen, method, req, req_len, tls, left,
                                    &resp, &rlen, &err);
        if (rc != 0) {
            cb(nd->node_id, rc, err != NULL ? err : "",
               err != NULL ? strlen(err) : 0, arg);
            free(err);
            break;
        }
        cb(nd->node_id, 0, resp, rlen, arg);
        int more =
            pager != NULL ? pager(req, req_len, resp, rlen, &next, &nlen) : 0;
        free(resp);
        if (more == 1 && page + 1 >= CLUSTER_MAX_PAGES) {
            char why[96];
            snprintf(why, sizeof(why), "more than %d pages", CLUSTER_MAX_PAGES);
            cb(nd->node_id, DETD_ELIMIT, why, strlen(why), arg);
            free(next);
            break;
        }
        if (more != 1) {
            if (more < 0) {
                const char *why = "undecodable answer";
                cb(nd->node_id, more, why, strlen(why), arg);
            }
            break;
        }
        free(own);
        own = next;
        req = next;
        req_len = nlen;
    }
    free(own);
}

/* See cluster_nodes.h. */
uint64_t cluster_rendezvous_weight(const char *node, const char *id) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char *p = (const unsigned char *)node; *p; p++)
        h = (h ^ *p) * 0x100000001b3ull;
    h = (h ^ 0) * 0x100000001b3ull; /* the separator: "a"+"bc" != "ab"+"c" */
    for (const unsigned char *p = (const unsigned char *)id; *p; p++)
        h = (h ^ *p) * 0x100000001b3ull;
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebull;
    h ^= h >> 31;
    return h;
}

/* See cluster_nodes.h. */
size_t cluster_rendezvous_rank(const struct cluster_node *v, size_t n,
                               const char *self, const char *id,
                               const char *exclude) {
    int found = 0;
    for (size_t i = 0; i < n && !found; i++)
        found = strcmp(v[i].node_id, self) == 0;
    if (!found)
        return 0;
    int excl = exclude != NULL && exclude[0] != '\0';
    uint64_t mine = cluster_rendezvous_weight(self, id);
    size_t rank = 0;
    for (size_t i = 0; i < n; i++) {
        const char *o = v[i].node_id;
        int cmp = strcmp(o, self);
        if (cmp == 0 || (excl && strcmp(o, exclude) == 0))
            continue;
        uint64_t w = cluster_rendezvous_weight(o, id);
        /* Equal weights (never seen in practice): the smaller id first. */
        if (w > mine || (w == mine && cmp < 0))
            rank++;
    }
    return rank;
}

/* See cluster_nodes.h. */
int64_t cluster_defer_ms(size_t rank, int64_t defer_ms, int64_t step_ms,
                         size_t slots) {
    if (rank == 0)
        return 0;
    size_t k = rank - 1 < slots ? rank - 1 : slots;
    return defer_ms + (int64_t)k * step_ms;
}
