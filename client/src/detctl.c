/*
 * detctl: the operator's view of a node's detd.
 *
 *   detctl [GLOBAL OPTIONS] COMMAND [OPTIONS]
 *
 * The command line (one option set per command, --help per command) is
 * detctl_cli.c; the exit statuses are listed once in detctl_exit.h; verify
 * is detctl_verify.c and its reports detctl_report.c; JSON documents are
 * described in docs/detctl-json.md.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "detctl_call.h"
#include "detctl_cli.h"
#include "detctl_key.h"
#include "detctl_lock.h"
#include "detctl_merge.h"
#include "detctl_print.h"
#include "detctl_table.h"
#include "detctl_tables.h"
#include "detctl_verify.h"
#include "detd.pb-c.h"
#include "detd/client.h"
#include "wire.h"

/* Put the members of src (stolen) into dst after its own. */
static json_t *doc_merge(json_t *dst, json_t *src) {
    if (dst == NULL || src == NULL) {
        json_decref(dst);
        json_decref(src);
        return NULL;
    }
    json_object_del(src, "api_version");
    json_object_update(dst, src);
    json_decref(src);
    return dst;
}

/* Add "<name>" (ISO 8601 UTC) beside each "<name>_ms" member of o. */
static void add_iso(json_t *o, const char *name) {
    char ms[64];
    snprintf(ms, sizeof ms, "%s_ms", name);
    json_t *v = json_object_get(o, ms);
    if (json_is_integer(v))
        json_object_set_new(o, name,
                            detctl_cli_json_time(json_integer_value(v)));
}

static json_t *decision_json(const Detd__V1__Decision *d) {
    json_t *j = detctl_print_json_decision(d);
    if (j != NULL)
        add_iso(j, "decided_at");
    return j;
}

static void ns_members(json_t *doc, const char *ns, const char *src) {
    if (doc == NULL)
        return;
    json_object_set_new(doc, "namespace", json_string(ns));
    json_object_set_new(doc, "namespace_source", json_string(src));
}

static json_t *status_doc(const struct detctl_opts *o,
                          const Detd__V1__StatusResponse *s) {
    json_t *j = detctl_print_json_status(s);
    if (j == NULL)
        return NULL;
    json_object_set_new(j, "daemon_api_version",
                        json_integer((json_int_t)s->api_version));
    json_object_set_new(j, "selected_namespace",
                        json_pack("{s:s, s:s}", "name",
                                  o->namespace_ ? o->namespace_ : s->namespace_,
                                  "source",
                                  o->namespace_ ? o->namespace_src : "daemon"));
    json_object_set_new(
        j, "table_files",
        detctl_tables_json_files(s->table_files, s->n_table_files));
    json_object_set_new(
        j, "table_errors",
        detctl_tables_json_errors(s->table_errors, s->n_table_errors));
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(j, "clients"), i, c)
        add_iso(c, "attached_at");
    json_array_foreach(json_object_get(json_object_get(j, "etcd"), "nodes"), i,
                       c) add_iso(c, "started_at");
    return doc_merge(detctl_cli_doc("Status"), j);
}

/* The nodes of a status after its first page: later pages asked with
 * nodes_only, this many nodes each. */
#define STATUS_NODES_PAGE 1000

/* The registered nodes' pages after the first answer s, followed to the
 * last: *ret_pages (the answers, n of them) and *ret_all (every node: s's
 * then each page's, borrowed from them) are the caller's to free (the
 * answers with protobuf_c_message_free_unpacked(), the arrays with
 * free()). A daemon that does not page answers no token: s alone. */
static int status_node_pages(const struct detctl_opts *o,
                             struct wire_channel *ch,
                             const Detd__V1__StatusResponse *s,
                             Detd__V1__StatusResponse ***ret_pages,
                             size_t *ret_n, Detd__V1__ClusterNode ***ret_all,
                             size_t *ret_all_n) {
    Detd__V1__StatusResponse **pages = NULL;
    size_t n = 0, total = s->n_nodes;
    const char *tok = s->nodes_next_page_token;
    int ex = DETCTL_EXIT_OK;
    while (tok != NULL && tok[0] != '\0') {
        Detd__V1__StatusRequest req = DETD__V1__STATUS_REQUEST__INIT;
        Detd__V1__StatusResponse *p = NULL;
        req.api_version = DETD_API_VERSION;
        req.nodes_only = 1;
        req.nodes_page_size = STATUS_NODES_PAGE;
        req.nodes_page_token = (char *)tok;
        ex = detctl_call(o, ch, WIRE_METHOD_STATUS, &req.base,
                         &detd__v1__status_response__descriptor,
                         (ProtobufCMessage **)&p);
        if (ex != DETCTL_EXIT_OK)
            break;
        Detd__V1__StatusResponse **np = realloc(pages, (n + 1) * sizeof(*np));
        if (np == NULL) {
            protobuf_c_message_free_unpacked(&p->base, NULL);
            fprintf(stderr, "detctl: out of memory\n");
            ex = DETCTL_EXIT_ERROR;
            break;
        }
        pages = np;
        pages[n++] = p;
        total += p->n_nodes;
        const char *next = p->nodes_next_page_token;
        /* The cursor is the page's last node id: it only moves forward. */
        if (next[0] != '\0' && (p->n_nodes == 0 || strcmp(next, tok) <= 0)) {
            fprintf(stderr,
                    "detctl: status (detd at '%s'): a page of %zu nodes "
                    "whose next page token does not move on\n",
                    o->socket, p->n_nodes);
            ex = DETCTL_EXIT_ERROR;
            break;
        }
        tok = next;
    }
    Detd__V1__ClusterNode **all = NULL;
    if (ex == DETCTL_EXIT_OK &&
        (all = malloc((total > 0 ? total : 1) * sizeof(*all))) == NULL) {
        fprintf(stderr, "detctl: out of memory\n");
        ex = DETCTL_EXIT_ERROR;
    }
    if (all != NULL) {
        size_t k = 0;
        for (size_t i = 0; i < s->n_nodes; i++)
            all[k++] = s->nodes[i];
        for (size_t p = 0; p < n; p++)
            for (size_t i = 0; i < pages[p]->n_nodes; i++)
                all[k++] = pages[p]->nodes[i];
    }
    *ret_pages = pages;
    *ret_n = n;
    *ret_all = all;
    *ret_all_n = total;
    return ex;
}

static int detctl_status(const struct detctl_opts *o, struct wire_channel *ch) {
    Detd__V1__StatusRequest req = DETD__V1__STATUS_REQUEST__INIT;
    Detd__V1__StatusResponse *s = NULL;
    Detd__V1__StatusResponse **pages = NULL;
    size_t n_pages = 0;
    Detd__V1__ClusterNode **all = NULL, **first_nodes = NULL;
    size_t n_all = 0, first_n = 0;
    req.api_version = DETD_API_VERSION;
    int ex = detctl_call(o, ch, WIRE_METHOD_STATUS, &req.base,
                         &detd__v1__status_response__descriptor,
                         (ProtobufCMessage **)&s);
    if (ex != DETCTL_EXIT_OK)
        return ex;
    /* Every node, whatever the pages: s->nodes points at all of them while
     * it is printed (and back at its own before it is freed). */
    first_nodes = s->nodes;
    first_n = s->n_nodes;
    ex = status_node_pages(o, ch, s, &pages, &n_pages, &all, &n_all);
    if (ex != DETCTL_EXIT_OK)
        goto out;
    s->nodes = all;
    s->n_nodes = n_all;
    if (o->json) {
        ex = detctl_cli_print_doc(status_doc(o, s));
        goto out;
    }
    char up[32], buf[64];
    detctl_print_duration(s->uptime_ms, up, sizeof(up));
    printf("detd %s (pid %u) at %s, up %s\n", s->version, s->pid, o->socket,
           up);
    printf("  namespace    %s\n", s->namespace_[0] ? s->namespace_ : "-");
    if (o->namespace_ != NULL && strcmp(o->namespace_, s->namespace_) != 0)
        printf("  selected     %s (%s: the other commands act on it)\n",
               o->namespace_, o->namespace_src);
    printf("  backend      %s\n", s->backend[0] ? s->backend : "-");
    printf("  store        %s\n", s->store_path[0] ? s->store_path : "-");
    printf("  decisions    %llu\n", (unsigned long long)s->decisions);
    printf("  claims       %u open, %u waiting\n", s->open_claims, s->waiters);
    printf("  gpu probe    %s\n", s->gpu_probe[0] ? s->gpu_probe : "-");
    for (size_t i = 0; i < s->n_tables; i++)
        printf("  %-12s %s\n", i == 0 ? "tables" : "", s->tables[i]);
    detctl_tables_print_files(s->table_files, s->n_table_files, s->table_errors,
                              s->n_table_errors);
    if (s->listen[0])
        printf("  listen       %s\n", s->listen);
    if (strcmp(s->backend, "etcd") == 0) {
        printf("  node         %s\n", s->node_id);
        printf("  etcd         %s%s%s\n",
               s->etcd_connected ? "connected" : "NOT CONNECTED",
               s->etcd_error[0] ? ": " : "", s->etcd_error);
        printf("  revision     %lld (last applied)\n",
               (long long)s->last_revision);
        static const char *const eh[] = {"ENDPOINT", "HEALTH", "LEADER",
                                         "VERSION", "ERROR"};
        struct detctl_print_table *et = detctl_print_table_new(5, eh);
        for (size_t i = 0; et != NULL && i < s->n_etcd_endpoints; i++) {
            const Detd__V1__EtcdEndpoint *e = s->etcd_endpoints[i];
            const char *row[] = {e->url, e->healthy ? "healthy" : "DOWN",
                                 e->leader ? "leader" : "-",
                                 e->version[0] ? e->version : "-",
                                 e->error[0] ? e->error : "-"};
            detctl_print_table_add(et, row);
        }
        printf("\netcd endpoints (%zu)\n", s->n_etcd_endpoints);
        if (et != NULL)
            detctl_print_table_write(et, stdout, 2);
        detctl_print_table_free(et);
        static const char *const nh[] = {"NODE", "LISTEN", "PID", "VERSION"};
        struct detctl_print_table *nt = detctl_print_table_new(4, nh);
        for (size_t i = 0; nt != NULL && i < s->n_nodes; i++) {
            const Detd__V1__ClusterNode *n = s->nodes[i];
            char pid[16];
            snprintf(pid, sizeof(pid), "%u", n->pid);
            const char *row[] = {n->node_id, n->listen[0] ? n->listen : "-",
                                 pid, n->version};
            detctl_print_table_add(nt, row);
        }
        printf("\nnodes (%zu registered)\n", s->n_nodes);
        if (s->nodes_error[0] != '\0')
            printf("  NOT COMPLETE: %s\n", s->nodes_error);
        if (nt != NULL)
            detctl_print_table_write(nt, stdout, 2);
        detctl_print_table_free(nt);
    }

    if (s->n_gpus > 0) {
        static const char *const h[] = {"GPU", "NAME",   "ARCH",
                                        "SMS", "MEMORY", "UUID"};
        struct detctl_print_table *t = detctl_print_table_new(6, h);
        for (size_t i = 0; t != NULL && i < s->n_gpus; i++) {
            char idx[16], sms[16], mem[32];
            snprintf(idx, sizeof(idx), "%d", s->gpus[i]->index);
            snprintf(sms, sizeof(sms), "%d", s->gpus[i]->sm_count);
            snprintf(mem, sizeof(mem), "%.1f GiB",
                     (double)s->gpus[i]->memory_bytes / (1 << 30));
            const char *row[] = {idx, s->gpus[i]->name, s->gpus[i]->arch, sms,
                                 mem, s->gpus[i]->uuid};
            detctl_print_table_add(t, row);
        }
        printf("\ngpus\n");
        if (t != NULL)
            detctl_print_table_write(t, stdout, 2);
        detctl_print_table_free(t);
    }

    printf("\nclients (%zu)\n", s->n_clients);
    if (s->n_clients > 0) {
        static const char *const h[] = {"SESSION", "RANK",  "HOST",  "PID",
                                        "JOB",     "SINCE", "CLAIMS"};
        struct detctl_print_table *t = detctl_print_table_new(7, h);
        for (size_t i = 0; t != NULL && i < s->n_clients; i++) {
            const Detd__V1__ClientInfo *c = s->clients[i];
            const Detd__V1__ClientIdentity *id = c->client;
            char sid[32], rank[16] = "-", pid[16] = "-", claims[16];
            snprintf(sid, sizeof(sid), "%llu",
                     (unsigned long long)c->session_id);
            if (id != NULL && id->rank >= 0)
                snprintf(rank, sizeof(rank), "%d", id->rank);
            if (id != NULL)
                snprintf(pid, sizeof(pid), "%d", id->pid);
            snprintf(claims, sizeof(claims), "%u", c->claims);
            detctl_print_time(c->attached_at_ms, buf, sizeof(buf));
            const char *row[] = {sid,
                                 rank,
                                 id != NULL ? id->host : NULL,
                                 pid,
                                 id != NULL ? id->job : NULL,
                                 buf,
                                 claims};
            detctl_print_table_add(t, row);
        }
        if (t != NULL)
            detctl_print_table_write(t, stdout, 2);
        detctl_print_table_free(t);
    }

    if (s->n_counters > 0) {
        static const char *const h[] = {"COUNTER", "VALUE"};
        struct detctl_print_table *t = detctl_print_table_new(2, h);
        for (size_t i = 0; t != NULL && i < s->n_counters; i++) {
            char v[32];
            snprintf(v, sizeof(v), "%llu",
                     (unsigned long long)s->counters[i]->value);
            const char *row[] = {s->counters[i]->name, v};
            detctl_print_table_add(t, row);
        }
        printf("\ncounters\n");
        if (t != NULL)
            detctl_print_table_write(t, stdout, 2);
        detctl_print_table_free(t);
    }
out:
    s->nodes = first_nodes;
    s->n_nodes = first_n;
    free(all);
    for (size_t i = 0; i < n_pages; i++)
        protobuf_c_message_free_unpacked(&pages[i]->base, NULL);
    free(pages);
    protobuf_c_message_free_unpacked(&s->base, NULL);
    return ex;
}

static int detctl_decisions(const struct detctl_opts *o,
                            struct wire_channel *ch) {
    char ns[256];
    const char *src = NULL;
    detctl_call_namespace(o, ch, ns, sizeof ns, &src);
    Detd__V1__ListDecisionsResponse *r = NULL;
    int exact =
        o->kernel != NULL && detctl_kernel_form(o->kernel) == DETCTL_KERNEL_ID;
    int ex = detctl_call_decisions(o, ch, ns, exact ? o->kernel : NULL, &r);
    if (ex != DETCTL_EXIT_OK)
        return ex;
    size_t shown = 0;
    if (o->json) {
        json_t *arr = json_array();
        for (size_t i = 0; arr != NULL && i < r->n_decisions; i++)
            if (o->kernel == NULL ||
                detctl_kernel_match(o->kernel, r->decisions[i]->kernel))
                json_array_append_new(arr, decision_json(r->decisions[i]));
        json_t *doc = detctl_cli_doc("DecisionList");
        ns_members(doc, ns, src);
        if (doc != NULL) {
            json_object_set_new(doc, "kernel",
                                o->kernel ? json_string(o->kernel)
                                          : json_null());
            json_object_set_new(doc, "decisions", arr ? arr : json_array());
            json_object_set_new(doc, "truncated", json_boolean(r->truncated));
        } else {
            json_decref(arr);
        }
        ex = detctl_cli_print_doc(doc);
        goto out;
    }
    detctl_call_print_namespace(ns, src);
    static const char *const h[] = {"KERNEL", "KEY", "ARCH",      "CONFIG",
                                    "SOURCE", "BY",  "DECIDED AT"};
    struct detctl_print_table *t = detctl_print_table_new(7, h);
    for (size_t i = 0; t != NULL && i < r->n_decisions; i++) {
        const Detd__V1__Decision *d = r->decisions[i];
        if (o->kernel != NULL && !detctl_kernel_match(o->kernel, d->kernel))
            continue;
        char who[160], at[64];
        if (d->decided_by != NULL)
            detctl_print_who(d->decided_by, who, sizeof(who));
        else
            snprintf(who, sizeof(who), "%s", d->table_file);
        detctl_print_time(d->decided_at_ms, at, sizeof(at));
        const char *row[] = {d->kernel,
                             d->key,
                             d->arch,
                             d->config,
                             detctl_print_source(d->source),
                             who,
                             at};
        detctl_print_table_add(t, row);
        shown++;
    }
    if (t != NULL)
        detctl_print_table_write(t, stdout, 0);
    detctl_print_table_free(t);
    printf("%zu decision%s%s\n", shown, shown == 1 ? "" : "s",
           r->truncated ? " (truncated: the daemon's cap)" : "");
out:
    protobuf_c_message_free_unpacked(&r->base, NULL);
    return ex;
}

/* One Reset call; adds to the sums. */
static int reset_one(const struct detctl_opts *o, struct wire_channel *ch,
                     const char *ns, const char *kernel, uint64_t *removed,
                     uint64_t *removed_imports, uint64_t *removed_obs) {
    Detd__V1__ResetRequest req = DETD__V1__RESET_REQUEST__INIT;
    Detd__V1__ResetResponse *r = NULL;
    req.api_version = DETD_API_VERSION;
    req.namespace_ = (char *)ns;
    if (kernel != NULL)
        req.kernel = (char *)kernel;
    req.all = kernel == NULL;
    req.votes = o->votes != 0;
    req.imports = o->imports != 0;
    int ex = detctl_call(o, ch, WIRE_METHOD_RESET, &req.base,
                         &detd__v1__reset_response__descriptor,
                         (ProtobufCMessage **)&r);
    if (ex != DETCTL_EXIT_OK)
        return ex;
    *removed += r->removed;
    *removed_imports += r->removed_imports;
    *removed_obs += r->removed_observations;
    protobuf_c_message_free_unpacked(&r->base, NULL);
    return DETCTL_EXIT_OK;
}

static int detctl_reset(const struct detctl_opts *o, struct wire_channel *ch) {
    if ((o->kernel == NULL) == (o->all == 0)) {
        fprintf(stderr, "detctl: reset needs exactly one of --kernel K or "
                        "--all (see 'detctl reset --help')\n");
        return DETCTL_EXIT_USAGE;
    }
    if (o->imports && o->votes) {
        fprintf(stderr, "detctl: reset takes --votes or --imports, not "
                        "both\n");
        return DETCTL_EXIT_USAGE;
    }
    char ns[256];
    const char *src = NULL;
    detctl_call_namespace(o, ch, ns, sizeof ns, &src);
    char **ids = NULL;
    size_t n = 0;
    int ex = DETCTL_EXIT_OK;
    if (o->kernel != NULL &&
        detctl_kernel_form(o->kernel) != DETCTL_KERNEL_ID) {
        ex = detctl_call_kernels(o, ch, ns, o->kernel,
                                 o->votes ? DETCTL_KERNELS_VOTES
                                          : DETCTL_KERNELS_OBSERVED,
                                 &ids, &n);
        if (ex != DETCTL_EXIT_OK)
            return ex;
    } else if (o->kernel != NULL) {
        ids = calloc(1, sizeof(*ids));
        if (ids == NULL || (ids[0] = strdup(o->kernel)) == NULL) {
            free(ids);
            fprintf(stderr, "detctl: out of memory\n");
            return DETCTL_EXIT_ERROR;
        }
        n = 1;
    }
    uint64_t removed = 0, removed_imports = 0, removed_obs = 0;
    if (o->all)
        ex = reset_one(o, ch, ns, NULL, &removed, &removed_imports,
                       &removed_obs);
    for (size_t i = 0; ex == DETCTL_EXIT_OK && i < n; i++)
        ex = reset_one(o, ch, ns, ids[i], &removed, &removed_imports,
                       &removed_obs);
    /* Imported entries are named as their table writes the kernel:
     * module:qualname is tried as it is too. */
    if (ex == DETCTL_EXIT_OK && o->imports && o->kernel != NULL &&
        detctl_kernel_form(o->kernel) == DETCTL_KERNEL_QUALNAME)
        ex = reset_one(o, ch, ns, o->kernel, &removed, &removed_imports,
                       &removed_obs);
    if (ex != DETCTL_EXIT_OK)
        goto out;
    if (o->json) {
        json_t *doc = detctl_cli_doc("ResetResult");
        ns_members(doc, ns, src);
        json_t *ks = json_array();
        for (size_t i = 0; ks != NULL && i < n; i++)
            json_array_append_new(ks, json_string(ids[i]));
        if (doc != NULL)
            json_object_set_new(doc, "kernels",
                                o->all ? json_null()
                                       : (ks ? ks : json_array()));
        if (o->all)
            json_decref(ks);
        if (doc != NULL) {
            json_object_set_new(doc, "what",
                                json_string(o->votes ? "votes" : "decisions"));
            json_object_set_new(doc, "removed",
                                json_integer((json_int_t)removed));
            json_object_set_new(doc, "removed_imports",
                                json_integer((json_int_t)removed_imports));
            json_object_set_new(doc, "removed_observations",
                                json_integer((json_int_t)removed_obs));
        }
        ex = detctl_cli_print_doc(doc);
        goto out;
    }
    detctl_call_print_namespace(ns, src);
    if (o->kernel != NULL && n == 0)
        printf("no kernel matches '%s'\n", o->kernel);
    for (size_t i = 0; n > 1 && i < n; i++)
        printf("kernel %s\n", ids[i]);
    printf("removed %llu %s%s\n", (unsigned long long)removed,
           o->votes ? "vote" : "decision", removed == 1 ? "" : "s");
    if (!o->votes)
        printf("removed %llu observation%s (verify no longer sees them)\n",
               (unsigned long long)removed_obs, removed_obs == 1 ? "" : "s");
    if (o->imports)
        printf("removed %llu imported entr%s\n",
               (unsigned long long)removed_imports,
               removed_imports == 1 ? "y" : "ies");
out:
    detctl_call_kernels_free(ids, n);
    return ex;
}

static int detctl_health(const struct detctl_opts *o, struct wire_channel *ch) {
    static const char *const names[] = {"UNKNOWN", "SERVING", "NOT_SERVING",
                                        "SERVICE_UNKNOWN"};
    int st = 0;
    int rc = wire_health_check(ch, "", o->timeout_ms, &st);
    if (rc < 0)
        return detctl_call_fail(o, "health", rc);
    const char *name = st >= 0 && st <= 3 ? names[st] : "UNKNOWN";
    if (o->json) {
        json_t *doc = detctl_cli_doc("Health");
        if (doc != NULL)
            json_object_set_new(doc, "status", json_string(name));
        if (detctl_cli_print_doc(doc) != DETCTL_EXIT_OK)
            return DETCTL_EXIT_ERROR;
    } else {
        printf("%s\n", name);
    }
    return st == WIRE_HEALTH_SERVING ? DETCTL_EXIT_OK : DETCTL_EXIT_NO;
}

static int detctl_reload(const struct detctl_opts *o, struct wire_channel *ch) {
    Detd__V1__ReloadRequest req = DETD__V1__RELOAD_REQUEST__INIT;
    Detd__V1__ReloadResponse *r = NULL;
    req.api_version = DETD_API_VERSION;
    int ex = detctl_call(o, ch, WIRE_METHOD_RELOAD, &req.base,
                         &detd__v1__reload_response__descriptor,
                         (ProtobufCMessage **)&r);
    if (ex != DETCTL_EXIT_OK)
        return ex;
    if (o->json) {
        ex = detctl_cli_print_doc(doc_merge(detctl_cli_doc("ReloadResult"),
                                            detctl_tables_json_reload(r)));
    } else {
        printf("reloaded: %zu table file%s, %llu entries, %zu skipped (%lld "
               "ms)\n",
               r->n_files, r->n_files == 1 ? "" : "s",
               (unsigned long long)r->entries, r->n_errors,
               (long long)r->took_ms);
        detctl_tables_print_files(r->files, r->n_files, r->errors, r->n_errors);
    }
    protobuf_c_message_free_unpacked(&r->base, NULL);
    return ex;
}

/*
 * The one kernel id pattern names in ns, into *ret (heap): an id as it
 * is; else the only matching id of the decisions and votes; none and
 * module:qualname: the pattern itself (tables name kernels so).
 */
static int resolve_one_kernel(const struct detctl_opts *o,
                              struct wire_channel *ch, const char *ns,
                              const char *pattern, char **ret) {
    if (detctl_kernel_form(pattern) == DETCTL_KERNEL_ID) {
        *ret = strdup(pattern);
        return *ret != NULL ? DETCTL_EXIT_OK : DETCTL_EXIT_ERROR;
    }
    char **ids = NULL;
    size_t n = 0;
    int ex =
        detctl_call_kernels(o, ch, ns, pattern, DETCTL_KERNELS_VOTES, &ids, &n);
    if (ex != DETCTL_EXIT_OK)
        return ex;
    if (n == 1) {
        *ret = ids[0];
        ids[0] = NULL;
    } else if (n == 0 &&
               detctl_kernel_form(pattern) == DETCTL_KERNEL_QUALNAME) {
        *ret = strdup(pattern);
        ex = *ret != NULL ? DETCTL_EXIT_OK : DETCTL_EXIT_ERROR;
    } else if (n == 0) {
        fprintf(stderr,
                "detctl: --kernel '%s': no decision or vote of a kernel of "
                "that name in namespace '%s'; give module:qualname\n",
                pattern, ns);
        ex = DETCTL_EXIT_USAGE;
    } else {
        fprintf(stderr,
                "detctl: --kernel '%s' names %zu kernels in "
                "namespace '%s'; give one of:\n",
                pattern, n, ns);
        for (size_t i = 0; i < n; i++)
            fprintf(stderr, "  %s\n", ids[i]);
        ex = DETCTL_EXIT_USAGE;
    }
    detctl_call_kernels_free(ids, n);
    return ex;
}

static int detctl_explain(const struct detctl_opts *o,
                          struct wire_channel *ch) {
    if (o->kernel == NULL || o->key == NULL || o->arch == NULL) {
        fprintf(stderr, "detctl: explain needs --kernel K, --key S and "
                        "--arch A (see 'detctl explain --help')\n");
        return DETCTL_EXIT_USAGE;
    }
    char err[256], *key = NULL, *kernel = NULL;
    if (detctl_key_canonical(o->key, &key, err, sizeof err) != 0) {
        fprintf(stderr, "detctl: --key '%s': %s\n", o->key, err);
        return DETCTL_EXIT_USAGE;
    }
    char ns[256];
    const char *src = NULL;
    detctl_call_namespace(o, ch, ns, sizeof ns, &src);
    int ex = resolve_one_kernel(o, ch, ns, o->kernel, &kernel);
    if (ex != DETCTL_EXIT_OK) {
        free(key);
        return ex;
    }
    Detd__V1__ExplainRequest req = DETD__V1__EXPLAIN_REQUEST__INIT;
    Detd__V1__ExplainResponse *r = NULL;
    req.api_version = DETD_API_VERSION;
    req.namespace_ = ns;
    req.kernel = kernel;
    req.key = key;
    req.arch = (char *)o->arch;
    if (o->table_key != NULL)
        req.table_key = (char *)o->table_key;
    req.candidates = (char **)o->candidates;
    req.n_candidates = o->n_candidates;
    ex = detctl_call(o, ch, WIRE_METHOD_EXPLAIN, &req.base,
                     &detd__v1__explain_response__descriptor,
                     (ProtobufCMessage **)&r);
    if (ex != DETCTL_EXIT_OK)
        goto out;
    if (o->json) {
        json_t *doc = detctl_cli_doc("Explanation");
        ns_members(doc, ns, src);
        if (doc != NULL) {
            json_object_set_new(doc, "kernel", json_string(kernel));
            json_object_set_new(doc, "key", json_string(key));
            json_object_set_new(doc, "arch", json_string(o->arch));
        }
        json_t *e = detctl_tables_json_explain(r);
        if (e != NULL && json_object_get(e, "decision") != NULL)
            add_iso(json_object_get(e, "decision"), "decided_at");
        ex = detctl_cli_print_doc(doc_merge(doc, e));
    } else {
        detctl_call_print_namespace(ns, src);
        printf("kernel: %s\nkey: %s\n", kernel, key);
        detctl_tables_print_explain(r, stdout);
    }
    protobuf_c_message_free_unpacked(&r->base, NULL);
out:
    free(key);
    free(kernel);
    return ex;
}

static int detctl_votes(const struct detctl_opts *o, struct wire_channel *ch) {
    char ns[256];
    const char *src = NULL;
    detctl_call_namespace(o, ch, ns, sizeof ns, &src);
    json_t *arr = o->json ? json_array() : NULL;
    static const char *const h[] = {"KERNEL", "KEY",  "ARCH",
                                    "CONFIG", "RANK", "WHO"};
    struct detctl_print_table *t =
        o->json ? NULL : detctl_print_table_new(6, h);
    int bare = o->kernel != NULL &&
               detctl_kernel_form(o->kernel) == DETCTL_KERNEL_BARE;
    uint64_t after = 0, total = 0, max = 0;
    size_t n = 0;
    int ex = DETCTL_EXIT_OK;
    for (;;) {
        Detd__V1__ListVotesRequest req = DETD__V1__LIST_VOTES_REQUEST__INIT;
        Detd__V1__ListVotesResponse *r = NULL;
        req.api_version = DETD_API_VERSION;
        req.namespace_ = ns;
        req.arch = (char *)(o->arch ? o->arch : "");
        req.kernel = (char *)(o->kernel && !bare ? o->kernel : "");
        req.after = after;
        ex = detctl_call(o, ch, WIRE_METHOD_LIST_VOTES, &req.base,
                         &detd__v1__list_votes_response__descriptor,
                         (ProtobufCMessage **)&r);
        if (ex != DETCTL_EXIT_OK)
            goto out;
        total = r->total;
        max = r->max_votes;
        for (size_t i = 0; i < r->n_votes; i++) {
            const Detd__V1__Vote *v = r->votes[i];
            if (bare && !detctl_kernel_match(o->kernel, v->kernel))
                continue;
            char who[160] = "-", rank[16] = "-";
            if (v->client != NULL) {
                detctl_print_who(v->client, who, sizeof(who));
                if (v->client->rank >= 0)
                    snprintf(rank, sizeof(rank), "%d", v->client->rank);
            }
            if (arr != NULL) {
                json_t *tm = json_array();
                for (size_t j = 0; j < v->n_timings; j++) {
                    json_t *ms = json_array();
                    for (size_t k = 0; k < v->timings[j]->n_ms; k++)
                        json_array_append_new(ms,
                                              json_real(v->timings[j]->ms[k]));
                    json_array_append_new(
                        tm, json_pack("{s:s, s:o, s:b}", "config",
                                      v->timings[j]->config, "ms", ms, "failed",
                                      v->timings[j]->failed));
                }
                json_array_append_new(
                    arr, json_pack(
                             "{s:s, s:s, s:s, s:s, s:s, s:s, s:o, s:o, s:s, "
                             "s:I, s:o}",
                             "namespace", v->namespace_, "arch", v->arch,
                             "kernel", v->kernel, "key", v->key, "table_key",
                             v->table_key, "config", v->config, "client",
                             detctl_print_json_identity(v->client), "timings",
                             tm, "triton_version", v->triton_version,
                             "voted_at_ms", (json_int_t)v->voted_at_ms,
                             "voted_at", detctl_cli_json_time(v->voted_at_ms)));
            } else if (t != NULL) {
                const char *row[] = {v->kernel, v->key, v->arch,
                                     v->config, rank,   who};
                detctl_print_table_add(t, row);
            }
            n++;
        }
        int more = r->truncated && r->n_votes > 0;
        after = r->next_after;
        protobuf_c_message_free_unpacked(&r->base, NULL);
        if (!more)
            break;
    }
    if (arr != NULL) {
        json_t *doc = detctl_cli_doc("VoteList");
        ns_members(doc, ns, src);
        if (doc != NULL) {
            json_object_set_new(doc, "votes", arr);
            json_object_set_new(doc, "total", json_integer((json_int_t)total));
            json_object_set_new(doc, "max", json_integer((json_int_t)max));
        } else {
            json_decref(arr);
        }
        arr = NULL;
        ex = detctl_cli_print_doc(doc);
        goto out;
    }
    detctl_call_print_namespace(ns, src);
    if (t != NULL)
        detctl_print_table_write(t, stdout, 0);
    printf("%zu vote%s listed (%llu stored in the namespace, limit %llu)%s\n",
           n, n == 1 ? "" : "s", (unsigned long long)total,
           (unsigned long long)max,
           total >= max && max > 0 ? ": FULL, new votes are refused" : "");
out:
    json_decref(arr);
    detctl_print_table_free(t);
    return ex;
}

static int detctl_table(const struct detctl_opts *o, struct wire_channel *ch) {
    char ns[256];
    const char *src = NULL;
    detctl_call_namespace(o, ch, ns, sizeof ns, &src);
    if (strcmp(o->subcommand, "import") == 0) {
        struct detctl_table_opts t = {
            .ns = ns,
            .out = o->files[0],
            .timeout_ms = o->timeout_ms,
        };
        detctl_call_print_namespace(ns, src);
        return detctl_table_import(&t, ch);
    }
    char *kernel = NULL;
    if (o->kernel != NULL &&
        detctl_kernel_form(o->kernel) == DETCTL_KERNEL_BARE) {
        /* Export matches an id or module:qualname: name the bare one. */
        int ex = resolve_one_kernel(o, ch, ns, o->kernel, &kernel);
        if (ex != DETCTL_EXIT_OK)
            return ex;
        char *at = strchr(kernel, '@');
        if (at != NULL)
            *at = '\0';
    }
    struct detctl_table_opts t = {
        .arch = o->arch,
        .ns = ns,
        .kernel = kernel != NULL ? kernel : o->kernel,
        .source = o->source,
        .out = o->out,
        .votes = o->votes,
        .timeout_ms = o->timeout_ms,
    };
    detctl_call_print_namespace(ns, src);
    int ex = detctl_table_export(&t, ch);
    free(kernel);
    return ex;
}

static int detctl_lock(const struct detctl_opts *o, struct wire_channel *ch) {
    return strcmp(o->subcommand, "export") == 0 ? detctl_lock_export_run(o, ch)
                                                : detctl_lock_import_run(o, ch);
}

int main(int argc, char **argv) {
    struct detctl_opts o;
    int ex = detctl_cli_parse(argc, argv, &o);
    if (ex >= 0) {
        detctl_cli_opts_clear(&o);
        return ex;
    }
    if (strcmp(o.command, "table") == 0 &&
        (strcmp(o.subcommand, "merge") == 0 ||
         strcmp(o.subcommand, "report") == 0)) {
        /* Files only: no daemon involved. */
        struct detctl_merge_opts mo = {
            .files = o.files,
            .n_files = o.n_files,
            .out = o.out,
            .source = o.source,
            .verbose = o.verbose,
            .json = o.json,
        };
        ex = strcmp(o.subcommand, "merge") == 0 ? detctl_merge_run(&mo)
                                                : detctl_merge_report_run(&mo);
        detctl_cli_opts_clear(&o);
        return ex;
    }
    if (o.socket == NULL)
        o.socket = wire_default_socket();

    static const struct {
        const char *name;
        int (*fn)(const struct detctl_opts *, struct wire_channel *);
    } cmds[] = {
        {"status", detctl_status},     {"decisions", detctl_decisions},
        {"verify", detctl_verify_run}, {"reset", detctl_reset},
        {"health", detctl_health},     {"reload", detctl_reload},
        {"explain", detctl_explain},   {"votes", detctl_votes},
        {"table", detctl_table},       {"lock", detctl_lock},
    };
    int (*fn)(const struct detctl_opts *, struct wire_channel *) = NULL;
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (strcmp(o.command, cmds[i].name) == 0)
            fn = cmds[i].fn;
    if (fn == NULL) { /* detctl_cli_parse knows the same commands */
        detctl_cli_opts_clear(&o);
        return DETCTL_EXIT_USAGE;
    }

    char *target = NULL;
    struct wire_channel *ch = NULL;
    if (o.address != NULL)
        o.socket = o.address; /* named in messages */
    int use_tls = o.tls_ca != NULL || o.tls_cert != NULL || o.tls_key != NULL;
    if (use_tls && o.address == NULL) {
        fprintf(stderr, "detctl: --tls-ca/--tls-cert/--tls-key need --address "
                        "HOST:PORT\n");
        ex = DETCTL_EXIT_USAGE;
        goto out;
    }
    if ((o.tls_cert != NULL) != (o.tls_key != NULL)) {
        fprintf(stderr, "detctl: --tls-cert and --tls-key go together\n");
        ex = DETCTL_EXIT_USAGE;
        goto out;
    }
    if (o.address != NULL ? (target = strdup(o.address)) == NULL
                          : asprintf(&target, "unix:%s", o.socket) < 0) {
        fprintf(stderr, "detctl: out of memory\n");
        ex = DETCTL_EXIT_ERROR;
        goto out;
    }
    struct wire_tls tls = {o.tls_ca, o.tls_cert, o.tls_key};
    int rc = wire_channel_new_tls(target, use_tls ? &tls : NULL, &ch);
    free(target);
    if (rc < 0) {
        ex = detctl_call_fail(&o, "connect", rc);
        /* A PEM file that cannot be read is a bad argument. */
        if (ex == DETCTL_EXIT_ERROR && rc != DETD_ENOMEM)
            ex = DETCTL_EXIT_USAGE;
        goto out;
    }
    ex = fn(&o, ch);
    wire_channel_free(ch);
out:
    detctl_cli_opts_clear(&o);
    return ex;
}
