/*
 * detctl: the operator's view of a node's detd.
 *
 *   detctl [--socket PATH] [--timeout MS] COMMAND [options]
 *
 * Exit status: 0 success; 1 the answer is "no" (verify found divergences,
 * health is not SERVING); 2 the question could not be answered (daemon
 * unreachable, error, bad usage).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "detctl_merge.h"
#include "detctl_print.h"
#include "detctl_tables.h"
#include "detctl_table.h"
#include "detd.pb-c.h"
#include "detd/client.h"
#include "wire.h"

#define DETCTL_EXIT_OK 0
#define DETCTL_EXIT_NO 1
#define DETCTL_EXIT_ERR 2

struct detctl_opts {
    const char *socket;
    int64_t timeout_ms;
    int json;
    int all;
    const char *kernel;
    const char *namespace_;
    const char *command;
    int cluster;         /* verify --cluster */
    const char *address; /* --address HOST:PORT: a daemon's --listen */
    const char *tls_ca;  /* --tls-ca/--tls-cert/--tls-key: TLS to it */
    const char *tls_cert;
    const char *tls_key;
    /* explain */
    const char *key;
    const char *arch;
    const char *table_key;
    const char **candidates;
    size_t n_candidates;
    const char *subcommand; /* table export */
    const char *source;     /* table export --source */
    const char *out;        /* table export -o */
    int votes;              /* table export --votes, reset --votes */
    const char **files;     /* table merge/report/import inputs */
    size_t n_files;
    int verbose; /* table merge --verbose */
    int imports; /* reset --imports */
};

static void detctl_usage(FILE *out) {
    fprintf(out,
            "usage: detctl [--socket PATH] [--timeout MS] COMMAND [options]\n"
            "\n"
            "commands:\n"
            "  status [--json]                       daemon, clients, "
            "counters\n"
            "  decisions [--json] [--kernel K] [--namespace NS]\n"
            "                                        stored decisions\n"
            "  verify [--json] [--namespace NS] [--cluster]\n"
            "                                        compare the configs "
            "ranks used\n"
            "                                        (--cluster: on every "
            "node);\n"
            "                                        exit 1 on divergence\n"
            "  reset (--kernel K | --all) [--namespace NS] [--votes | "
            "--imports]\n"
            "                                        forget decisions (with "
            "--votes:\n"
            "                                        record-mode votes "
            "instead; with\n"
            "                                        --imports: imported "
            "entries too)\n"
            "  votes [--json] [--arch A] [--kernel K] [--namespace NS]\n"
            "                                        record-mode votes\n"
            "  table export --arch A -o FILE [--votes] [--kernel K]\n"
            "        [--namespace NS] [--source TEXT]\n"
            "                                        write the table of arch "
            "A from\n"
            "                                        the decisions (--votes: "
            "the\n"
            "                                        majority of the votes)\n"
            "  table merge FILE... -o OUT [--source TEXT] [--verbose]\n"
            "                                        majority of tables and "
            "recordings,\n"
            "                                        one table per arch (OUT: "
            "a directory\n"
            "                                        for several)\n"
            "  table import FILE [--namespace NS]    the table's entries "
            "answer Decide\n"
            "                                        in NS before the tables "
            "(admin)\n"
            "  table report FILE... [--json]         entries, votes and "
            "disagreements\n"
            "                                        per kernel of those "
            "inputs\n"
            "  health                                grpc.health.v1 check; "
            "exit 0 when SERVING\n"
            "  reload [--json]                       re-read the table "
            "directories;\n"
            "                                        lists files loaded and "
            "skipped\n"
            "  explain --kernel K --key S --arch A [--table-key T]\n"
            "          [--candidate C]... [--namespace NS] [--json]\n"
            "                                        where the answer for a "
            "key comes\n"
            "                                        from: a decision, a table "
            "entry,\n"
            "                                        or a timing pass\n"
            "\n"
            "options:\n"
            "  --socket PATH   the daemon's socket (default $DETD_SOCKET, "
            "else %s)\n"
            "  --address HOST:PORT  a daemon's --listen address instead of\n"
            "                  the socket (Admin calls only; also --server)\n"
            "  --tls-ca FILE   TLS to --address, checking the daemon's\n"
            "                  certificate against this CA (PEM)\n"
            "  --tls-cert FILE, --tls-key FILE  client certificate and key\n"
            "                  (PEM) for a --listen-client-ca daemon\n"
            "  --timeout MS    deadline of each call (default 5000)\n"
            "  --help, --version\n"
            "\n"
            "exit status: 0 ok, 1 divergence / not serving, 2 could not "
            "check\n",
            DETD_DEFAULT_SOCKET);
}

/* Report a failed call once, naming the daemon; returns exit status 2. */
static int detctl_fail(const struct detctl_opts *o, const char *what, int rc) {
    const char *detail = wire_last_error();
    if (detail[0] == '\0')
        detail = detd_strerror(rc);
    if (rc == DETD_ECONNECT || rc == DETD_EUNAVAILABLE)
        fprintf(stderr, "detctl: cannot reach detd at '%s': %s\n", o->socket,
                detail);
    else
        fprintf(stderr, "detctl: %s (detd at '%s'): %s\n", what, o->socket,
                detail);
    return DETCTL_EXIT_ERR;
}

static int detctl_print_json(json_t *j) {
    if (j == NULL) {
        fprintf(stderr, "detctl: out of memory\n");
        return DETCTL_EXIT_ERR;
    }
    json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    fputc('\n', stdout);
    json_decref(j);
    return DETCTL_EXIT_OK;
}

/* One admin call; on failure the message is printed, 2 returned. */
static int detctl_unary(const struct detctl_opts *o, struct wire_channel *ch,
                        const char *method, const ProtobufCMessage *req,
                        const ProtobufCMessageDescriptor *desc,
                        ProtobufCMessage **ret) {
    int rc = wire_unary(ch, method, req, desc, o->timeout_ms, ret);
    if (rc < 0) {
        const char *what = strrchr(method, '/');
        return detctl_fail(o, what != NULL ? what + 1 : method, rc);
    }
    return DETCTL_EXIT_OK;
}

static int detctl_status(const struct detctl_opts *o, struct wire_channel *ch) {
    Detd__V1__StatusRequest req = DETD__V1__STATUS_REQUEST__INIT;
    Detd__V1__StatusResponse *s = NULL;
    req.api_version = DETD_API_VERSION;
    int ex = detctl_unary(o, ch, WIRE_METHOD_STATUS, &req.base,
                          &detd__v1__status_response__descriptor,
                          (ProtobufCMessage **)&s);
    if (ex != DETCTL_EXIT_OK)
        return ex;
    if (o->json) {
        json_t *j = detctl_print_json_status(s);
        if (j != NULL) {
            json_object_set_new(
                j, "table_files",
                detctl_tables_json_files(s->table_files, s->n_table_files));
            json_object_set_new(
                j, "table_errors",
                detctl_tables_json_errors(s->table_errors, s->n_table_errors));
        }
        ex = detctl_print_json(j);
        goto out;
    }
    char up[32], buf[64];
    detctl_print_duration(s->uptime_ms, up, sizeof(up));
    printf("detd %s (pid %u) at %s, up %s\n", s->version, s->pid, o->socket,
           up);
    printf("  namespace    %s\n", s->namespace_[0] ? s->namespace_ : "-");
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
    protobuf_c_message_free_unpacked(&s->base, NULL);
    return ex;
}

static int detctl_decisions(const struct detctl_opts *o,
                            struct wire_channel *ch) {
    Detd__V1__ListDecisionsRequest req = DETD__V1__LIST_DECISIONS_REQUEST__INIT;
    Detd__V1__ListDecisionsResponse *r = NULL;
    req.api_version = DETD_API_VERSION;
    if (o->namespace_ != NULL)
        req.namespace_ = (char *)o->namespace_;
    if (o->kernel != NULL)
        req.kernel = (char *)o->kernel;
    int ex = detctl_unary(o, ch, WIRE_METHOD_LIST_DECISIONS, &req.base,
                          &detd__v1__list_decisions_response__descriptor,
                          (ProtobufCMessage **)&r);
    if (ex != DETCTL_EXIT_OK)
        return ex;
    if (o->json) {
        json_t *arr = json_array();
        for (size_t i = 0; arr != NULL && i < r->n_decisions; i++)
            json_array_append_new(arr,
                                  detctl_print_json_decision(r->decisions[i]));
        ex = detctl_print_json(json_pack("{s:o, s:b}", "decisions", arr,
                                         "truncated", r->truncated));
        goto out;
    }
    static const char *const h[] = {"KERNEL", "KEY", "ARCH",      "CONFIG",
                                    "SOURCE", "BY",  "DECIDED AT"};
    struct detctl_print_table *t = detctl_print_table_new(7, h);
    for (size_t i = 0; t != NULL && i < r->n_decisions; i++) {
        const Detd__V1__Decision *d = r->decisions[i];
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
    }
    if (t != NULL)
        detctl_print_table_write(t, stdout, 0);
    detctl_print_table_free(t);
    printf("%zu decision%s%s\n", r->n_decisions, r->n_decisions == 1 ? "" : "s",
           r->truncated ? " (truncated: the daemon's cap)" : "");
out:
    protobuf_c_message_free_unpacked(&r->base, NULL);
    return ex;
}

static int detctl_verify(const struct detctl_opts *o, struct wire_channel *ch) {
    Detd__V1__VerifyRequest req = DETD__V1__VERIFY_REQUEST__INIT;
    Detd__V1__VerifyResponse *v = NULL;
    req.api_version = DETD_API_VERSION;
    if (o->namespace_ != NULL)
        req.namespace_ = (char *)o->namespace_;
    req.cluster = o->cluster != 0;
    int ex = detctl_unary(o, ch, WIRE_METHOD_VERIFY, &req.base,
                          &detd__v1__verify_response__descriptor,
                          (ProtobufCMessage **)&v);
    if (ex != DETCTL_EXIT_OK)
        return ex;
    int diverged = !v->ok || v->n_divergences > 0;
    if (o->json) {
        ex = detctl_print_json(detctl_print_json_verify(v));
        if (ex == DETCTL_EXIT_OK && diverged)
            ex = DETCTL_EXIT_NO;
        goto out;
    }
    for (size_t i = 0; i < v->n_divergences; i++) {
        const Detd__V1__Divergence *d = v->divergences[i];
        printf("DIVERGED %s %s [%s]\n", d->kernel, d->key, d->arch);
        printf("  decided: %s\n", d->decided[0] ? d->decided : "(none)");
        if (d->reason[0])
            printf("  reason:  %s\n", d->reason);
        for (size_t j = 0; j < d->n_uses; j++) {
            const Detd__V1__VerifyUse *u = d->uses[j];
            printf("  %s%s used by:\n", u->config, u->chaos ? " (chaos)" : "");
            for (size_t k = 0; k < u->n_clients; k++) {
                char who[320];
                detctl_print_use_client(u, k, who, sizeof(who));
                printf("    %s\n", who);
            }
        }
    }
    printf("%s: %llu key%s checked, %llu observation%s, %zu divergence%s",
           diverged ? "FAIL" : "ok", (unsigned long long)v->keys_checked,
           v->keys_checked == 1 ? "" : "s", (unsigned long long)v->observations,
           v->observations == 1 ? "" : "s", v->n_divergences,
           v->n_divergences == 1 ? "" : "s");
    if (v->ungoverned > 0)
        printf(", %llu ungoverned", (unsigned long long)v->ungoverned);
    if (v->n_nodes_checked > 0)
        printf(", %zu node%s", v->n_nodes_checked,
               v->n_nodes_checked == 1 ? "" : "s");
    printf("\n");
    for (size_t i = 0; i < v->n_nodes_unreachable; i++)
        printf("UNREACHABLE %s\n", v->nodes_unreachable[i]);
    ex = diverged ? DETCTL_EXIT_NO : DETCTL_EXIT_OK;
out:
    protobuf_c_message_free_unpacked(&v->base, NULL);
    return ex;
}

static int detctl_reset(const struct detctl_opts *o, struct wire_channel *ch) {
    if ((o->kernel == NULL) == (o->all == 0)) {
        fprintf(stderr, "detctl: reset needs exactly one of --kernel K or "
                        "--all\n");
        return DETCTL_EXIT_ERR;
    }
    Detd__V1__ResetRequest req = DETD__V1__RESET_REQUEST__INIT;
    Detd__V1__ResetResponse *r = NULL;
    req.api_version = DETD_API_VERSION;
    if (o->namespace_ != NULL)
        req.namespace_ = (char *)o->namespace_;
    if (o->kernel != NULL)
        req.kernel = (char *)o->kernel;
    req.all = o->all != 0;
    req.votes = o->votes != 0;
    req.imports = o->imports != 0;
    if (o->imports && o->votes) {
        fprintf(stderr, "detctl: reset takes --votes or --imports, not "
                        "both\n");
        return DETCTL_EXIT_ERR;
    }
    int ex = detctl_unary(o, ch, WIRE_METHOD_RESET, &req.base,
                          &detd__v1__reset_response__descriptor,
                          (ProtobufCMessage **)&r);
    if (ex != DETCTL_EXIT_OK)
        return ex;
    if (o->json)
        ex = detctl_print_json(
            json_pack("{s:I, s:I}", "removed", (json_int_t)r->removed,
                      "removed_imports", (json_int_t)r->removed_imports));
    else
        printf("removed %llu %s%s\n", (unsigned long long)r->removed,
               o->votes ? "vote" : "decision", r->removed == 1 ? "" : "s");
    if (!o->json && o->imports)
        printf("removed %llu imported entr%s\n",
               (unsigned long long)r->removed_imports,
               r->removed_imports == 1 ? "y" : "ies");
    protobuf_c_message_free_unpacked(&r->base, NULL);
    return ex;
}

static int detctl_health(const struct detctl_opts *o, struct wire_channel *ch) {
    static const char *const names[] = {"UNKNOWN", "SERVING", "NOT_SERVING",
                                        "SERVICE_UNKNOWN"};
    int st = 0;
    int rc = wire_health_check(ch, "", o->timeout_ms, &st);
    if (rc < 0)
        return detctl_fail(o, "health", rc);
    const char *name = st >= 0 && st <= 3 ? names[st] : "UNKNOWN";
    if (o->json)
        detctl_print_json(json_pack("{s:s}", "status", name));
    else
        printf("%s\n", name);
    return st == WIRE_HEALTH_SERVING ? DETCTL_EXIT_OK : DETCTL_EXIT_NO;
}

static int detctl_reload(const struct detctl_opts *o, struct wire_channel *ch) {
    Detd__V1__ReloadRequest req = DETD__V1__RELOAD_REQUEST__INIT;
    Detd__V1__ReloadResponse *r = NULL;
    req.api_version = DETD_API_VERSION;
    int ex = detctl_unary(o, ch, WIRE_METHOD_RELOAD, &req.base,
                          &detd__v1__reload_response__descriptor,
                          (ProtobufCMessage **)&r);
    if (ex != DETCTL_EXIT_OK)
        return ex;
    if (o->json) {
        ex = detctl_print_json(detctl_tables_json_reload(r));
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

static int detctl_explain(const struct detctl_opts *o,
                          struct wire_channel *ch) {
    if (o->kernel == NULL || o->key == NULL || o->arch == NULL) {
        fprintf(stderr, "detctl: explain needs --kernel K, --key S and "
                        "--arch A\n");
        return DETCTL_EXIT_ERR;
    }
    Detd__V1__ExplainRequest req = DETD__V1__EXPLAIN_REQUEST__INIT;
    Detd__V1__ExplainResponse *r = NULL;
    req.api_version = DETD_API_VERSION;
    if (o->namespace_ != NULL)
        req.namespace_ = (char *)o->namespace_;
    req.kernel = (char *)o->kernel;
    req.key = (char *)o->key;
    req.arch = (char *)o->arch;
    if (o->table_key != NULL)
        req.table_key = (char *)o->table_key;
    req.candidates = (char **)o->candidates;
    req.n_candidates = o->n_candidates;
    int ex = detctl_unary(o, ch, WIRE_METHOD_EXPLAIN, &req.base,
                          &detd__v1__explain_response__descriptor,
                          (ProtobufCMessage **)&r);
    if (ex != DETCTL_EXIT_OK)
        return ex;
    if (o->json)
        ex = detctl_print_json(detctl_tables_json_explain(r));
    else
        detctl_tables_print_explain(r, stdout);
    protobuf_c_message_free_unpacked(&r->base, NULL);
    return ex;
}

static int detctl_votes(const struct detctl_opts *o, struct wire_channel *ch) {
    json_t *arr = o->json ? json_array() : NULL;
    static const char *const h[] = {"KERNEL", "KEY",  "ARCH",
                                    "CONFIG", "RANK", "WHO"};
    struct detctl_print_table *t =
        o->json ? NULL : detctl_print_table_new(6, h);
    uint64_t after = 0, total = 0, max = 0;
    size_t n = 0;
    int ex = DETCTL_EXIT_OK;
    for (;;) {
        Detd__V1__ListVotesRequest req = DETD__V1__LIST_VOTES_REQUEST__INIT;
        Detd__V1__ListVotesResponse *r = NULL;
        req.api_version = DETD_API_VERSION;
        req.namespace_ = (char *)(o->namespace_ ? o->namespace_ : "");
        req.arch = (char *)(o->arch ? o->arch : "");
        req.kernel = (char *)(o->kernel ? o->kernel : "");
        req.after = after;
        ex = detctl_unary(o, ch, WIRE_METHOD_LIST_VOTES, &req.base,
                          &detd__v1__list_votes_response__descriptor,
                          (ProtobufCMessage **)&r);
        if (ex != DETCTL_EXIT_OK)
            goto out;
        total = r->total;
        max = r->max_votes;
        for (size_t i = 0; i < r->n_votes; i++) {
            const Detd__V1__Vote *v = r->votes[i];
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
                    arr,
                    json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:o, s:o, s:s, "
                              "s:I}",
                              "namespace", v->namespace_, "arch", v->arch,
                              "kernel", v->kernel, "key", v->key, "table_key",
                              v->table_key, "config", v->config, "client",
                              detctl_print_json_identity(v->client), "timings",
                              tm, "triton_version", v->triton_version,
                              "voted_at_ms", (json_int_t)v->voted_at_ms));
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
        ex = detctl_print_json(json_pack("{s:o, s:I, s:I}", "votes", arr,
                                         "total", (json_int_t)total, "max",
                                         (json_int_t)max));
        arr = NULL;
        goto out;
    }
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
    if (o->subcommand != NULL && strcmp(o->subcommand, "import") == 0) {
        if (o->n_files != 1) {
            fprintf(stderr, "detctl: table import needs exactly one FILE\n");
            return DETCTL_EXIT_ERR;
        }
        struct detctl_table_opts t = {
            .ns = o->namespace_,
            .out = o->files[0],
            .timeout_ms = o->timeout_ms,
        };
        return detctl_table_import(&t, ch);
    }
    if (o->subcommand == NULL || strcmp(o->subcommand, "export") != 0) {
        fprintf(stderr, "detctl: table needs a subcommand: export, merge, "
                        "report or import (see --help)\n");
        return DETCTL_EXIT_ERR;
    }
    if (o->n_files > 0) {
        fprintf(stderr, "detctl: unexpected argument '%s'\n", o->files[0]);
        return DETCTL_EXIT_ERR;
    }
    struct detctl_table_opts t = {
        .arch = o->arch,
        .ns = o->namespace_,
        .kernel = o->kernel,
        .source = o->source,
        .out = o->out,
        .votes = o->votes,
        .timeout_ms = o->timeout_ms,
    };
    return detctl_table_export(&t, ch);
}

/* "--name=value" or "--name value". */
static int detctl_optval(int argc, char **argv, int *i, const char *name,
                         const char **ret) {
    size_t n = strlen(name);
    if (strncmp(argv[*i], name, n) != 0)
        return 0;
    if (argv[*i][n] == '=') {
        *ret = argv[*i] + n + 1;
        return 1;
    }
    if (argv[*i][n] != '\0')
        return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "detctl: %s needs a value\n", name);
        exit(DETCTL_EXIT_ERR);
    }
    *ret = argv[++*i];
    return 1;
}

int main(int argc, char **argv) {
    struct detctl_opts o = {0};
    const char *timeout = NULL;
    const char *cand = NULL;
    o.timeout_ms = 5000;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            detctl_usage(stdout);
            return DETCTL_EXIT_OK;
        } else if (strcmp(a, "--version") == 0) {
            printf("detctl %s\n", DETD_VERSION);
            return DETCTL_EXIT_OK;
        } else if (strcmp(a, "--json") == 0) {
            o.json = 1;
        } else if (strcmp(a, "--all") == 0) {
            o.all = 1;
        } else if (strcmp(a, "--cluster") == 0) {
            o.cluster = 1;
        } else if (strcmp(a, "--votes") == 0) {
            o.votes = 1;
        } else if (strcmp(a, "--verbose") == 0 || strcmp(a, "-v") == 0) {
            o.verbose = 1;
        } else if (strcmp(a, "--imports") == 0) {
            o.imports = 1;
        } else if (detctl_optval(argc, argv, &i, "--socket", &o.socket) ||
                   detctl_optval(argc, argv, &i, "--timeout", &timeout) ||
                   detctl_optval(argc, argv, &i, "--address", &o.address) ||
                   detctl_optval(argc, argv, &i, "--server", &o.address) ||
                   detctl_optval(argc, argv, &i, "--tls-ca", &o.tls_ca) ||
                   detctl_optval(argc, argv, &i, "--tls-cert", &o.tls_cert) ||
                   detctl_optval(argc, argv, &i, "--tls-key", &o.tls_key) ||
                   detctl_optval(argc, argv, &i, "--kernel", &o.kernel) ||
                   detctl_optval(argc, argv, &i, "--namespace",
                                 &o.namespace_) ||
                   detctl_optval(argc, argv, &i, "--key", &o.key) ||
                   detctl_optval(argc, argv, &i, "--arch", &o.arch) ||
                   detctl_optval(argc, argv, &i, "--table-key", &o.table_key) ||
                   detctl_optval(argc, argv, &i, "--source", &o.source) ||
                   detctl_optval(argc, argv, &i, "--output", &o.out) ||
                   detctl_optval(argc, argv, &i, "-o", &o.out)) {
            continue;
        } else if (detctl_optval(argc, argv, &i, "--candidate", &cand)) {
            if (o.candidates == NULL)
                o.candidates = calloc((size_t)argc, sizeof(*o.candidates));
            if (o.candidates == NULL) {
                fprintf(stderr, "detctl: out of memory\n");
                return DETCTL_EXIT_ERR;
            }
            o.candidates[o.n_candidates++] = cand;
        } else if (a[0] == '-') {
            fprintf(stderr, "detctl: unknown option '%s' (see --help)\n", a);
            return DETCTL_EXIT_ERR;
        } else if (o.command == NULL) {
            o.command = a;
        } else if (o.subcommand == NULL && strcmp(o.command, "table") == 0) {
            o.subcommand = a;
        } else if (o.subcommand != NULL) {
            if (o.files == NULL)
                o.files = calloc((size_t)argc, sizeof(*o.files));
            if (o.files == NULL) {
                fprintf(stderr, "detctl: out of memory\n");
                return DETCTL_EXIT_ERR;
            }
            o.files[o.n_files++] = a;
        } else {
            fprintf(stderr, "detctl: unexpected argument '%s'\n", a);
            return DETCTL_EXIT_ERR;
        }
    }
    if (timeout != NULL) {
        char *end = NULL;
        errno = 0;
        long long t = strtoll(timeout, &end, 10);
        if (errno != 0 || end == timeout || *end != '\0' || t <= 0) {
            fprintf(stderr,
                    "detctl: --timeout '%s' is not a positive number "
                    "of milliseconds\n",
                    timeout);
            return DETCTL_EXIT_ERR;
        }
        o.timeout_ms = t;
    }
    if (o.command == NULL) {
        detctl_usage(stderr);
        return DETCTL_EXIT_ERR;
    }
    if (strcmp(o.command, "table") == 0 && o.subcommand != NULL &&
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
        int ex = strcmp(o.subcommand, "merge") == 0
                     ? detctl_merge_run(&mo)
                     : detctl_merge_report_run(&mo);
        free(o.files);
        free(o.candidates);
        return ex;
    }
    if (o.socket == NULL) {
        const char *env = getenv("DETD_SOCKET");
        o.socket = env != NULL && env[0] != '\0' ? env : DETD_DEFAULT_SOCKET;
    }

    int (*fn)(const struct detctl_opts *, struct wire_channel *) = NULL;
    if (strcmp(o.command, "status") == 0)
        fn = detctl_status;
    else if (strcmp(o.command, "decisions") == 0)
        fn = detctl_decisions;
    else if (strcmp(o.command, "verify") == 0)
        fn = detctl_verify;
    else if (strcmp(o.command, "reset") == 0)
        fn = detctl_reset;
    else if (strcmp(o.command, "health") == 0)
        fn = detctl_health;
    else if (strcmp(o.command, "reload") == 0)
        fn = detctl_reload;
    else if (strcmp(o.command, "explain") == 0)
        fn = detctl_explain;
    else if (strcmp(o.command, "votes") == 0)
        fn = detctl_votes;
    else if (strcmp(o.command, "table") == 0)
        fn = detctl_table;
    if (fn == NULL) {
        fprintf(stderr, "detctl: unknown command '%s' (see --help)\n",
                o.command);
        return DETCTL_EXIT_ERR;
    }

    char *target = NULL;
    struct wire_channel *ch = NULL;
    if (o.address != NULL)
        o.socket = o.address; /* named in messages */
    if (o.address != NULL ? (target = strdup(o.address)) == NULL
                          : asprintf(&target, "unix:%s", o.socket) < 0) {
        fprintf(stderr, "detctl: out of memory\n");
        return DETCTL_EXIT_ERR;
    }
    int use_tls = o.tls_ca != NULL || o.tls_cert != NULL || o.tls_key != NULL;
    if (use_tls && o.address == NULL) {
        free(target);
        fprintf(stderr, "detctl: --tls-ca/--tls-cert/--tls-key need --address "
                        "HOST:PORT\n");
        return DETCTL_EXIT_ERR;
    }
    if ((o.tls_cert != NULL) != (o.tls_key != NULL)) {
        free(target);
        fprintf(stderr, "detctl: --tls-cert and --tls-key go together\n");
        return DETCTL_EXIT_ERR;
    }
    struct wire_tls tls = {o.tls_ca, o.tls_cert, o.tls_key};
    int rc = wire_channel_new_tls(target, use_tls ? &tls : NULL, &ch);
    free(target);
    if (rc < 0)
        return detctl_fail(&o, "connect", rc);
    int ex = fn(&o, ch);
    wire_channel_free(ch);
    free(o.candidates);
    free(o.files);
    return ex;
}
