/* detctl_print: tables, durations and JSON for detctl. */
#define _GNU_SOURCE
#include "detctl_print.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct detctl_print_table {
    size_t ncols;
    const char *const *headers;
    char **cells; /* nrows * ncols */
    size_t nrows;
    size_t cap;
};

struct detctl_print_table *detctl_print_table_new(size_t ncols,
                                                  const char *const *headers) {
    struct detctl_print_table *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return NULL;
    t->ncols = ncols;
    t->headers = headers;
    return t;
}

int detctl_print_table_add(struct detctl_print_table *t,
                           const char *const *cells) {
    if (t->nrows == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 16;
        char **n = realloc(t->cells, cap * t->ncols * sizeof(*n));
        if (n == NULL)
            return -ENOMEM;
        t->cells = n;
        t->cap = cap;
    }
    char **row = &t->cells[t->nrows * t->ncols];
    for (size_t i = 0; i < t->ncols; i++) {
        /* Cells show what clients sent: escaped, one line each. */
        row[i] = detctl_print_escape(
            cells[i] != NULL && cells[i][0] != '\0' ? cells[i] : "-");
        if (row[i] == NULL) {
            while (i-- > 0)
                free(row[i]);
            return -ENOMEM;
        }
    }
    t->nrows++;
    return 0;
}

void detctl_print_table_write(const struct detctl_print_table *t, FILE *out,
                              int indent) {
    size_t w[32] = {0};
    size_t n = t->ncols < 32 ? t->ncols : 32;
    for (size_t c = 0; c < n; c++) {
        w[c] = strlen(t->headers[c]);
        for (size_t r = 0; r < t->nrows; r++) {
            size_t l = strlen(t->cells[r * t->ncols + c]);
            if (l > w[c])
                w[c] = l;
        }
    }
    for (size_t r = 0; r <= t->nrows; r++) {
        fprintf(out, "%*s", indent, "");
        for (size_t c = 0; c < n; c++) {
            const char *s =
                r == 0 ? t->headers[c] : t->cells[(r - 1) * t->ncols + c];
            if (c + 1 == n)
                fprintf(out, "%s\n", s);
            else
                fprintf(out, "%-*s  ", (int)w[c], s);
        }
    }
}

void detctl_print_table_free(struct detctl_print_table *t) {
    if (t == NULL)
        return;
    for (size_t i = 0; i < t->nrows * t->ncols; i++)
        free(t->cells[i]);
    free(t->cells);
    free(t);
}

void detctl_print_duration(int64_t ms, char *buf, size_t len) {
    if (ms < 0)
        ms = 0;
    int64_t s = ms / 1000, m = s / 60, h = m / 60, d = h / 24;
    if (ms < 1000)
        snprintf(buf, len, "%lldms", (long long)ms);
    else if (s < 60)
        snprintf(buf, len, "%llds", (long long)s);
    else if (m < 60)
        snprintf(buf, len, "%lldm%02llds", (long long)m, (long long)(s % 60));
    else if (h < 24)
        snprintf(buf, len, "%lldh%02lldm", (long long)h, (long long)(m % 60));
    else
        snprintf(buf, len, "%lldd%02lldh", (long long)d, (long long)(h % 24));
}

void detctl_print_time(int64_t unix_ms, char *buf, size_t len) {
    if (unix_ms <= 0) {
        snprintf(buf, len, "-");
        return;
    }
    time_t t = (time_t)(unix_ms / 1000);
    struct tm tm;
    if (gmtime_r(&t, &tm) == NULL ||
        strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        snprintf(buf, len, "%lld", (long long)unix_ms);
}

void detctl_print_who(const Detd__V1__ClientIdentity *id, char *buf,
                      size_t len) {
    if (id == NULL) {
        snprintf(buf, len, "-");
        return;
    }
    char rank[32] = "";
    if (id->rank >= 0)
        snprintf(rank, sizeof(rank), "rank %d ", id->rank);
    snprintf(buf, len, "%s%s pid %d", rank,
             id->host[0] != '\0' ? id->host : "?", id->pid);
}

void detctl_print_use_client(const Detd__V1__VerifyUse *u, size_t k, char *buf,
                             size_t len) {
    detctl_print_who_seen(u->clients[k], k < u->n_peers ? u->peers[k] : NULL,
                          buf, len);
}

void detctl_print_who_seen(const Detd__V1__ClientIdentity *c,
                           const Detd__V1__PeerIdentity *p, char *buf,
                           size_t len) {
    char who[160];
    detctl_print_who(c, who, sizeof(who));
    if (p == NULL) {
        snprintf(buf, len, "%s", who);
        return;
    }
    char uid[32] = "?";
    if (p->uid >= 0)
        snprintf(uid, sizeof(uid), "%lld", (long long)p->uid);
    snprintf(buf, len, "%s (seen: pid %d uid %s on %s)%s", who, p->pid, uid,
             p->node[0] != '\0' ? p->node : "?",
             p->claimed_pid != 0 && p->claimed_pid != p->pid
                 ? " claimed pid differs"
                 : "");
}

const char *detctl_print_source(Detd__V1__Source s) {
    switch (s) {
    case DETD__V1__SOURCE__SOURCE_TIMED:
        return "timed";
    case DETD__V1__SOURCE__SOURCE_TABLE:
        return "table";
    case DETD__V1__SOURCE__SOURCE_OVERRIDE:
        return "override";
    case DETD__V1__SOURCE__SOURCE_IMPORT:
        return "import";
    case DETD__V1__SOURCE__SOURCE_FALLBACK:
        return "fallback";
    case DETD__V1__SOURCE__SOURCE_LOCAL:
        return "local";
    case DETD__V1__SOURCE__SOURCE_UNGOVERNED:
        return "ungoverned";
    case DETD__V1__SOURCE__SOURCE_RUNTIME:
        return "runtime";
    default:
        return "unspecified";
    }
}

json_t *detctl_print_json_identity(const Detd__V1__ClientIdentity *id) {
    if (id == NULL)
        return json_null();
    return json_pack(
        "{s:s, s:i, s:i, s:i, s:i, s:s, s:s, s:i, s:s, s:s}", "host", id->host,
        "pid", (int)id->pid, "rank", (int)id->rank, "local_rank",
        (int)id->local_rank, "world_size", (int)id->world_size, "device_name",
        id->device_name, "arch", id->arch, "sm_count", (int)id->sm_count,
        "client_version", id->client_version, "job", id->job);
}

json_t *detctl_print_json_peer(const Detd__V1__PeerIdentity *p) {
    if (p == NULL)
        return json_null();
    return json_pack("{s:i, s:I, s:s, s:i}", "pid", (int)p->pid, "uid",
                     (json_int_t)p->uid, "node", p->node != NULL ? p->node : "",
                     "claimed_pid", (int)p->claimed_pid);
}

json_t *detctl_print_json_decision(const Detd__V1__Decision *d) {
    json_t *timings = json_array();
    for (size_t i = 0; timings != NULL && i < d->n_timings; i++) {
        json_t *ms = json_array();
        for (size_t j = 0; ms != NULL && j < d->timings[i]->n_ms; j++)
            json_array_append_new(ms, json_real(d->timings[i]->ms[j]));
        json_array_append_new(timings,
                              json_pack("{s:s, s:o, s:b}", "config",
                                        d->timings[i]->config, "ms", ms,
                                        "failed", d->timings[i]->failed));
    }
    return json_pack(
        "{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:o, s:I, s:o, s:s, s:I, "
        "s:s, s:i, s:o}",
        "id", d->id, "namespace", d->namespace_, "arch", d->arch, "kernel",
        d->kernel, "key", d->key, "candidates_fp", d->candidates_fp, "config",
        d->config, "source", detctl_print_source(d->source), "decided_by",
        detctl_print_json_identity(d->decided_by), "claim_id",
        (json_int_t)d->claim_id, "timings", timings, "triton_version",
        d->triton_version, "decided_at_ms", (json_int_t)d->decided_at_ms,
        "table_file", d->table_file, "n_candidates", (int)d->n_candidates,
        "decided_peer", detctl_print_json_peer(d->decided_peer));
}

json_t *detctl_print_json_status(const Detd__V1__StatusResponse *s) {
    json_t *clients = json_array(), *counters = json_object(),
           *gpus = json_array(), *tables = json_array();
    for (size_t i = 0; i < s->n_clients; i++)
        json_array_append_new(
            clients,
            json_pack("{s:o, s:I, s:I, s:i}", "client",
                      detctl_print_json_identity(s->clients[i]->client),
                      "session_id", (json_int_t)s->clients[i]->session_id,
                      "attached_at_ms",
                      (json_int_t)s->clients[i]->attached_at_ms, "claims",
                      (int)s->clients[i]->claims));
    for (size_t i = 0; i < s->n_counters; i++)
        json_object_set_new(counters, s->counters[i]->name,
                            json_integer((json_int_t)s->counters[i]->value));
    for (size_t i = 0; i < s->n_gpus; i++)
        json_array_append_new(
            gpus,
            json_pack("{s:i, s:s, s:s, s:s, s:i, s:I}", "index",
                      (int)s->gpus[i]->index, "name", s->gpus[i]->name, "arch",
                      s->gpus[i]->arch, "uuid", s->gpus[i]->uuid, "sm_count",
                      (int)s->gpus[i]->sm_count, "memory_bytes",
                      (json_int_t)s->gpus[i]->memory_bytes));
    for (size_t i = 0; i < s->n_tables; i++)
        json_array_append_new(tables, json_string(s->tables[i]));
    json_t *eps = json_array(), *nodes = json_array();
    for (size_t i = 0; i < s->n_etcd_endpoints; i++) {
        const Detd__V1__EtcdEndpoint *e = s->etcd_endpoints[i];
        json_array_append_new(
            eps, json_pack("{s:s, s:b, s:s, s:b, s:s, s:I}", "url", e->url,
                           "healthy", e->healthy, "error", e->error, "leader",
                           e->leader, "version", e->version, "db_size",
                           (json_int_t)e->db_size));
    }
    for (size_t i = 0; i < s->n_nodes; i++) {
        const Detd__V1__ClusterNode *n = s->nodes[i];
        json_array_append_new(
            nodes,
            json_pack("{s:s, s:s, s:i, s:I, s:s}", "node_id", n->node_id,
                      "listen", n->listen, "pid", (int)n->pid, "started_at_ms",
                      (json_int_t)n->started_at_ms, "version", n->version));
    }
    json_t *etcd =
        json_pack("{s:s, s:s, s:I, s:b, s:s, s:o, s:o, s:s}", "node_id",
                  s->node_id, "listen", s->listen, "last_revision",
                  (json_int_t)s->last_revision, "connected", s->etcd_connected,
                  "error", s->etcd_error, "endpoints", eps, "nodes", nodes,
                  "nodes_error", s->nodes_error != NULL ? s->nodes_error : "");
    return json_pack("{s:i, s:s, s:s, s:s, s:I, s:I, s:o, s:i, s:i, s:o, "
                     "s:o, s:s, s:s, s:i, s:o, s:o}",
                     "api_version", (int)s->api_version, "version", s->version,
                     "namespace", s->namespace_, "backend", s->backend,
                     "uptime_ms", (json_int_t)s->uptime_ms, "decisions",
                     (json_int_t)s->decisions, "clients", clients,
                     "open_claims", (int)s->open_claims, "waiters",
                     (int)s->waiters, "counters", counters, "gpus", gpus,
                     "store_path", s->store_path, "gpu_probe", s->gpu_probe,
                     "pid", (int)s->pid, "tables", tables, "etcd", etcd);
}

json_t *detctl_print_json_verify(const Detd__V1__VerifyResponse *v) {
    json_t *divs = json_array();
    for (size_t i = 0; i < v->n_divergences; i++) {
        const Detd__V1__Divergence *d = v->divergences[i];
        json_t *uses = json_array();
        for (size_t j = 0; j < d->n_uses; j++) {
            json_t *who = json_array(), *peers = json_array();
            for (size_t k = 0; k < d->uses[j]->n_clients; k++)
                json_array_append_new(
                    who, detctl_print_json_identity(d->uses[j]->clients[k]));
            /* Who the daemon saw (SO_PEERCRED), one per client. */
            for (size_t k = 0; k < d->uses[j]->n_peers; k++)
                json_array_append_new(
                    peers, detctl_print_json_peer(d->uses[j]->peers[k]));
            json_array_append_new(
                uses, json_pack("{s:s, s:o, s:b, s:o}", "config",
                                d->uses[j]->config, "clients", who, "chaos",
                                d->uses[j]->chaos, "peers", peers));
        }
        json_array_append_new(
            divs, json_pack("{s:s, s:s, s:s, s:s, s:s, s:o, s:s}", "id", d->id,
                            "kernel", d->kernel, "key", d->key, "arch", d->arch,
                            "decided", d->decided, "uses", uses, "reason",
                            d->reason));
    }
    json_t *checked = json_array(), *unreachable = json_array();
    for (size_t i = 0; i < v->n_nodes_checked; i++)
        json_array_append_new(checked, json_string(v->nodes_checked[i]));
    for (size_t i = 0; i < v->n_nodes_unreachable; i++)
        json_array_append_new(unreachable,
                              json_string(v->nodes_unreachable[i]));
    return json_pack("{s:b, s:I, s:I, s:I, s:o, s:o, s:o}", "ok", v->ok,
                     "keys_checked", (json_int_t)v->keys_checked,
                     "observations", (json_int_t)v->observations, "ungoverned",
                     (json_int_t)v->ungoverned, "divergences", divs,
                     "nodes_checked", checked, "nodes_unreachable",
                     unreachable);
}

char *detctl_print_escape(const char *s) {
    size_t n = strlen(s);
    char *out = malloc(n * 4 + 1); /* \xNN: the most a byte becomes */
    if (out == NULL)
        return NULL;
    const unsigned char *p = (const unsigned char *)s;
    char *o = out;
    while (*p != '\0') {
        unsigned char c = *p;
        if (c == '\\') {
            *o++ = '\\';
            *o++ = '\\';
        } else if (c == '\n' || c == '\r' || c == '\t') {
            *o++ = '\\';
            *o++ = c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
        } else if (c < 0x20 || c == 0x7f) {
            o += sprintf(o, "\\x%02x", c);
        } else if (c == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) {
            o += sprintf(o, "\\u%04x", p[1]); /* C1: U+0080..U+009F */
            p++;
        } else if (c == 0xe2 && p[1] == 0x80 &&
                   (p[2] == 0xa8 || p[2] == 0xa9)) {
            o += sprintf(o, "\\u%04x", p[2] == 0xa8 ? 0x2028 : 0x2029);
            p += 2;
        } else {
            *o++ = (char)c;
        }
        p++;
    }
    *o = '\0';
    return out;
}

/* Escape every string value under j in place; 0 or -ENOMEM. */
static int print_escape_tree_(json_t *j) {
    if (json_is_string(j)) {
        char *e = detctl_print_escape(json_string_value(j));
        int rc = e != NULL && json_string_set(j, e) == 0 ? 0 : -ENOMEM;
        free(e);
        return rc;
    }
    if (json_is_array(j)) {
        size_t i;
        json_t *v;
        json_array_foreach(j, i, v) {
            if (print_escape_tree_(v) < 0)
                return -ENOMEM;
        }
    } else if (json_is_object(j)) {
        const char *k;
        json_t *v;
        json_object_foreach(j, k, v) {
            if (print_escape_tree_(v) < 0)
                return -ENOMEM;
        }
    }
    return 0;
}

json_t *detctl_print_json_escaped(const json_t *doc) {
    json_t *copy = json_deep_copy(doc);
    if (copy == NULL || print_escape_tree_(copy) < 0) {
        json_decref(copy);
        return NULL;
    }
    return copy;
}
