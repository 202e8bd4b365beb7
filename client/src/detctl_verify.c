/* detctl_verify: `detctl verify` (see detctl_verify.h). */
#define _GNU_SOURCE
#include "detctl_verify.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "detctl_call.h"
#include "detctl_jobs.h"
#include "detctl_lock.h"
#include "detctl_nondet.h"
#include "detctl_tuners.h"
#include "detctl_print.h"
#include "detctl_report.h"
#include "detd.pb-c.h"
#include "detd/client.h"
#include "wire.h"

static const char *str0(const char *s) {
    return s != NULL ? s : "";
}

static int obs_cmp(const void *pa, const void *pb) {
    const Detd__V1__Observation *a = *(Detd__V1__Observation *const *)pa;
    const Detd__V1__Observation *b = *(Detd__V1__Observation *const *)pb;
    int c = strcmp(a->id, b->id);
    if (c == 0)
        c = strcmp(a->config, b->config);
    int ra = a->client ? a->client->rank : -1,
        rb = b->client ? b->client->rank : -1;
    if (c == 0 && ra != rb)
        c = ra < rb ? -1 : 1;
    if (c == 0 && a->client && b->client)
        c = strcmp(str0(a->client->host), str0(b->client->host));
    if (c == 0 && a->client && b->client && a->client->pid != b->client->pid)
        c = a->client->pid < b->client->pid ? -1 : 1;
    return c;
}

static int dec_cmp(const void *pa, const void *pb) {
    const Detd__V1__Decision *a = *(Detd__V1__Decision *const *)pa;
    const Detd__V1__Decision *b = *(Detd__V1__Decision *const *)pb;
    return strcmp(a->id, b->id);
}

static int dbl_cmp(const void *pa, const void *pb) {
    double a = *(const double *)pa, b = *(const double *)pb;
    return a < b ? -1 : a > b;
}

static json_t *timings_json(const Detd__V1__Decision *d) {
    json_t *a = json_array();
    for (size_t i = 0; d != NULL && a != NULL && i < d->n_timings; i++) {
        const Detd__V1__CandidateTiming *t = d->timings[i];
        json_t *ms = json_array();
        double *s = t->n_ms ? malloc(t->n_ms * sizeof(*s)) : NULL;
        for (size_t j = 0; j < t->n_ms; j++) {
            json_array_append_new(ms, json_real(t->ms[j]));
            if (s != NULL)
                s[j] = t->ms[j];
        }
        json_t *med = json_null();
        if (s != NULL) {
            qsort(s, t->n_ms, sizeof(*s), dbl_cmp);
            size_t m = t->n_ms / 2;
            med = json_real(t->n_ms % 2 ? s[m] : (s[m - 1] + s[m]) / 2);
        }
        free(s);
        json_array_append_new(
            a, json_pack("{s:s, s:o, s:o, s:b, s:b}", "config", t->config,
                         "median_ms", med, "ms", ms, "failed", t->failed,
                         "decided", strcmp(t->config, d->config) == 0));
    }
    return a;
}

/* A client as it claimed to be and (p set) as the daemon saw it. */
static json_t *client_json(const Detd__V1__ClientIdentity *c,
                           const Detd__V1__PeerIdentity *p) {
    char who[320];
    detctl_print_who_seen(c, p, who, sizeof who);
    json_t *o = json_pack(
        "{s:i, s:s, s:i, s:i, s:s, s:s}", "rank", c ? (int)c->rank : -1, "host",
        c ? str0(c->host) : "", "pid", c ? (int)c->pid : 0, "local_rank",
        c ? (int)c->local_rank : -1, "job", c ? str0(c->job) : "", "who", who);
    if (o != NULL && p != NULL)
        json_object_set_new(o, "seen", detctl_print_json_peer(p));
    return o;
}

/* A failure of a key, added to the key and to the run's list. */
static void add_failure(json_t *all, json_t *key, const char *kind,
                        const char *msg) {
    json_t *f = json_pack("{s:s, s:s}", "kind", kind, "message", msg);
    if (f == NULL)
        return;
    if (key != NULL) {
        json_array_append(json_object_get(key, "failures"), f);
        json_object_set_new(key, "ok", json_false());
        static const char *const m[] = {"id", "kernel", "key", "arch"};
        for (size_t i = 0; i < 4; i++)
            json_object_set(f, m[i], json_object_get(key, m[i]));
    }
    json_array_append_new(all, f);
}

/* Whether a use is checked for agreement: governed, or launched by a
 * tuner detd cannot govern (source "ungoverned"). */
static int use_checked(json_t *u) {
    if (json_is_true(json_object_get(u, "governed")))
        return 1;
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(u, "sources"), i, s) {
        if (strcmp(json_string_value(s), "ungoverned") == 0)
            return 1;
    }
    return 0;
}

/* The divergence JSON (as the daemon's) of one key's checked uses. */
static json_t *divergence_json(json_t *key, const char *reason) {
    json_t *uses = json_array();
    size_t i;
    json_t *u;
    json_array_foreach(json_object_get(key, "uses"), i, u) {
        if (!use_checked(u))
            continue;
        json_array_append_new(uses,
                              json_pack("{s:O, s:O, s:O}", "config",
                                        json_object_get(u, "config"), "clients",
                                        json_object_get(u, "clients"), "chaos",
                                        json_object_get(u, "chaos")));
    }
    json_t *dec = json_object_get(key, "decided");
    return json_pack(
        "{s:O, s:O, s:O, s:O, s:s, s:o, s:s}", "id", json_object_get(key, "id"),
        "kernel", json_object_get(key, "kernel"), "key",
        json_object_get(key, "key"), "arch", json_object_get(key, "arch"),
        "decided", json_is_string(dec) ? json_string_value(dec) : "", "uses",
        uses, "reason", reason);
}

struct vctx {
    const struct detctl_opts *o;
    json_t *doc, *keys, *failures, *divs;
    const Detd__V1__VerifyResponse *v; /* NULL with --job */
    Detd__V1__Decision **decs;
    size_t n_decs;
    uint64_t observations, ungoverned, fallbacks, failed_launches;
    struct detctl_lock *lock; /* --lock, or NULL */
    const char *ns;
    json_t *tuners;   /* kernel -> {kernel, kind, governed, ...} */
    json_t *warnings; /* audit findings: listed, never a failure */
};

static const Detd__V1__Decision *find_dec(const struct vctx *c,
                                          const char *id) {
    if (c->n_decs == 0) /* no decisions (NULL list): bsearch may not */
        return NULL;
    Detd__V1__Decision key = DETD__V1__DECISION__INIT, *kp = &key;
    key.id = (char *)id;
    Detd__V1__Decision **d =
        bsearch(&kp, c->decs, c->n_decs, sizeof(*c->decs), dec_cmp);
    return d != NULL ? *d : NULL;
}

/* The audit of observation x, on its key (one per status and argument
 * list) and, when it found something, in the run's warnings. */
static void add_audit(struct vctx *c, json_t *key,
                      const Detd__V1__Observation *x) {
    static const char *const st[] = {"none", "deterministic",
                                     "nondeterministic", "error"};
    int s = (int)x->audit->status;
    const char *status = s >= 0 && s <= 3 ? st[s] : "unknown";
    json_t *diff = json_array();
    char names[600] = "";
    size_t len = 0;
    for (size_t i = 0; i < x->audit->n_differing; i++) {
        json_array_append_new(diff, json_string(x->audit->differing[i]));
        if (len < sizeof names - 1)
            len += (size_t)snprintf(names + len, sizeof names - len, "%s%s",
                                    i ? ", " : "", x->audit->differing[i]);
    }
    if (len >= sizeof names)
        len = sizeof names - 1;
    char w[160];
    detctl_print_who(x->client, w, sizeof w);
    json_t *a = json_object_get(key, "audit");
    if (a == NULL || strcmp(json_string_value(json_object_get(a, "status")),
                            "deterministic") == 0) {
        json_object_set_new(key, "audit",
                            json_pack("{s:s, s:O, s:[s]}", "status", status,
                                      "differing", diff, "by", w));
    } else {
        json_array_append_new(json_object_get(a, "by"), json_string(w));
    }
    if (s == DETD__V1__AUDIT_STATUS__AUDIT_NONDETERMINISTIC ||
        s == DETD__V1__AUDIT_STATUS__AUDIT_ERROR) {
        char msg[900];
        if (s == DETD__V1__AUDIT_STATUS__AUDIT_ERROR)
            snprintf(msg, sizeof msg,
                     "%s: the determinism audit could not replay the launch",
                     w);
        else
            snprintf(msg, sizeof msg,
                     "%s: nondeterministic under the fixed config %s: "
                     "arguments %s differ between replays",
                     w, x->config, names[0] ? names : "(none named)");
        json_t *f = json_pack(
            "{s:s, s:s, s:O, s:O, s:O, s:O, s:O}", "kind", status, "message",
            msg, "differing", diff, "id", json_object_get(key, "id"), "kernel",
            json_object_get(key, "kernel"), "key", json_object_get(key, "key"),
            "arch", json_object_get(key, "arch"));
        if (f != NULL)
            json_array_append_new(c->warnings, f);
    }
    json_decref(diff);
}

/* The key of the observations g[0..n) (one id). */
static void check_group(struct vctx *c, Detd__V1__Observation **g, size_t n) {
    const Detd__V1__Observation *o0 = g[0];
    const Detd__V1__Decision *d = find_dec(c, o0->id);
    char who[160] = "", at[48];
    if (d != NULL && d->decided_by != NULL && d->decided_by->host[0])
        detctl_print_who(d->decided_by, who, sizeof who);
    else if (d != NULL)
        snprintf(who, sizeof who, "%s", d->table_file);
    detctl_cli_iso_time(d ? d->decided_at_ms : 0, at, sizeof at);
    json_t *key = json_pack(
        "{s:s, s:s, s:s, s:s, s:o, s:o, s:o, s:o, s:o, s:[], s:[], s:o, "
        "s:[], s:b}",
        "id", o0->id, "kernel", o0->kernel, "key", o0->key, "arch", o0->arch,
        "decided", d ? json_string(d->config) : json_null(), "source",
        d ? json_string(detctl_print_source(d->source)) : json_null(),
        "decided_by", d ? json_string(who) : json_null(), "decided_at",
        d ? json_string(at) : json_null(), "timings", timings_json(d), "uses",
        "ranks", "missing_ranks", json_null(), "failures", "ok", 1);
    if (key == NULL)
        return;
    json_object_set_new(key, "autotuner",
                        json_string(detctl_tuner_kind(o0->kernel)));
    json_t *uses = json_object_get(key, "uses");
    json_t *ranks = json_object_get(key, "ranks");
    char *seen =
        c->o->expect_ranks > 0 ? calloc((size_t)c->o->expect_ranks, 1) : NULL;
    size_t governed_configs = 0;
    const char *governed_one = NULL;
    for (size_t i = 0; i < n; i++) {
        const Detd__V1__Observation *x = g[i];
        c->observations++;
        if (!x->governed)
            c->ungoverned++;
        detctl_tuners_add(c->tuners, x);
        if (x->failed && x->config[0] == '\0') {
            /* Raised before a config was chosen: no use to compare. */
            char msg[1400], w[160];
            detctl_print_who(x->client, w, sizeof w);
            snprintf(msg, sizeof msg, "%s: the launch raised: %s", w,
                     x->error && x->error[0] ? x->error : "(no message)");
            add_failure(c->failures, key, "failed_launch", msg);
            c->failed_launches++;
            int r = x->client ? x->client->rank : -1;
            if (seen != NULL && r >= 0 && r < c->o->expect_ranks)
                seen[r] = 1;
            continue;
        }
        /* One use per (config, governed). */
        json_t *u = NULL;
        size_t ui;
        json_t *e;
        json_array_foreach(uses, ui, e) {
            if (strcmp(json_string_value(json_object_get(e, "config")),
                       x->config) == 0 &&
                json_is_true(json_object_get(e, "governed")) ==
                    (x->governed != 0))
                u = e;
        }
        if (u == NULL) {
            u = json_pack("{s:s, s:b, s:b, s:[], s:[]}", "config", x->config,
                          "governed", x->governed, "chaos", x->chaos, "sources",
                          "clients");
            json_array_append_new(uses, u);
            /* A tuner detd cannot govern must agree too (verify.h). */
            int checked =
                x->governed || x->source == DETD__V1__SOURCE__SOURCE_UNGOVERNED;
            if (checked &&
                (governed_one == NULL || strcmp(governed_one, x->config))) {
                governed_configs++;
                governed_one = x->config;
            }
        }
        if (x->chaos)
            json_object_set_new(u, "chaos", json_true());
        const char *sname = detctl_print_source(x->source);
        int have = 0;
        json_array_foreach(json_object_get(u, "sources"), ui, e) have |=
            strcmp(json_string_value(e), sname) == 0;
        if (!have)
            json_array_append_new(json_object_get(u, "sources"),
                                  json_string(sname));
        json_t *cj = client_json(x->client, x->peer);
        if (cj != NULL)
            json_object_set_new(cj, "source", json_string(sname));
        json_array_append_new(json_object_get(u, "clients"), cj);
        int rank = x->client ? x->client->rank : -1;
        int dup = 0;
        json_array_foreach(ranks, ui, e) dup |= json_integer_value(e) == rank;
        if (rank >= 0 && !dup)
            json_array_append_new(ranks, json_integer(rank));
        if (seen != NULL && rank >= 0 && rank < c->o->expect_ranks)
            seen[rank] = 1;
        if (x->failed) {
            char msg[1400], w[160];
            detctl_print_who(x->client, w, sizeof w);
            snprintf(msg, sizeof msg, "%s: the launch%s%s raised: %s", w,
                     x->config[0] ? " of " : "", x->config,
                     x->error && x->error[0] ? x->error : "(no message)");
            add_failure(c->failures, key, "failed_launch", msg);
            c->failed_launches++;
        }
        if (x->audit != NULL &&
            x->audit->status != DETD__V1__AUDIT_STATUS__AUDIT_NONE)
            add_audit(c, key, x);
        if (x->source == DETD__V1__SOURCE__SOURCE_FALLBACK) {
            char msg[512];
            char w[160];
            detctl_print_who(x->client, w, sizeof w);
            snprintf(msg, sizeof msg,
                     "%s launched %s by its on_miss fallback, not a "
                     "decision",
                     w, x->config);
            add_failure(c->failures, key, "fallback", msg);
            c->fallbacks++;
        }
    }
    /* Divergence: the daemon's, or (--job) computed the daemon's way. */
    if (c->v != NULL) {
        for (size_t i = 0; i < c->v->n_divergences; i++)
            if (strcmp(c->v->divergences[i]->id, o0->id) == 0)
                add_failure(c->failures, key, "divergence",
                            c->v->divergences[i]->reason);
    } else {
        const char *reason = NULL;
        if (governed_configs > 1)
            reason = "ranks disagree";
        else if (governed_configs == 1 && d != NULL &&
                 strcmp(governed_one, d->config) != 0)
            reason = "differs from decision";
        if (reason != NULL) {
            add_failure(c->failures, key, "divergence", reason);
            json_array_append_new(c->divs, divergence_json(key, reason));
        }
    }
    if (d != NULL) {
        size_t failed = 0;
        int decided_failed = 0;
        for (size_t i = 0; i < d->n_timings; i++) {
            failed += d->timings[i]->failed != 0;
            if (d->timings[i]->failed &&
                strcmp(d->timings[i]->config, d->config) == 0)
                decided_failed = 1;
        }
        if (decided_failed || (d->n_timings > 0 && failed == d->n_timings)) {
            char msg[512];
            snprintf(msg, sizeof msg,
                     "the decided config %s failed in the timing pass (%zu "
                     "of %zu candidates failed)",
                     d->config, failed, d->n_timings);
            add_failure(c->failures, key, "failed_launch", msg);
        }
    }
    char lmsg[1200];
    if (c->lock != NULL &&
        detctl_lock_check(c->lock, c->ns, key, lmsg, sizeof lmsg))
        add_failure(c->failures, key, "lock", lmsg);
    if (seen != NULL) {
        json_t *miss = json_array();
        char list[512] = "";
        size_t len = 0, nm = 0;
        for (long r = 0; r < c->o->expect_ranks; r++)
            if (!seen[r]) {
                json_array_append_new(miss, json_integer(r));
                if (len < sizeof list - 16)
                    len += (size_t)snprintf(list + len, sizeof list - len,
                                            "%s%ld", nm ? ", " : "", r);
                nm++;
            }
        json_object_set_new(key, "missing_ranks", miss);
        if (nm > 0) {
            char msg[700];
            snprintf(msg, sizeof msg,
                     "observed by %ld of %ld ranks; missing rank%s %s",
                     c->o->expect_ranks - (long)nm, c->o->expect_ranks,
                     nm == 1 ? "" : "s", list);
            add_failure(c->failures, key, "missing_ranks", msg);
        }
        free(seen);
    }
    json_array_append_new(c->keys, key);
}

/* A daemon divergence with no local observations (verify --cluster). */
static void add_remote(struct vctx *c, const Detd__V1__Divergence *dv) {
    size_t i;
    json_t *k;
    json_array_foreach(c->keys, i, k) {
        if (strcmp(json_string_value(json_object_get(k, "id")), dv->id) == 0)
            return;
    }
    const Detd__V1__Decision *d = find_dec(c, dv->id);
    json_t *uses = json_array();
    for (size_t j = 0; j < dv->n_uses; j++) {
        json_t *cl = json_array();
        for (size_t m = 0; m < dv->uses[j]->n_clients; m++)
            json_array_append_new(cl, client_json(dv->uses[j]->clients[m],
                                                  m < dv->uses[j]->n_peers
                                                      ? dv->uses[j]->peers[m]
                                                      : NULL));
        json_array_append_new(
            uses, json_pack("{s:s, s:b, s:b, s:[], s:o}", "config",
                            dv->uses[j]->config, "governed", 1, "chaos",
                            dv->uses[j]->chaos, "sources", "clients", cl));
    }
    json_t *key = json_pack(
        "{s:s, s:s, s:s, s:s, s:o, s:o, s:n, s:n, s:o, s:o, s:[], s:n, s:[], "
        "s:b}",
        "id", dv->id, "kernel", dv->kernel, "key", dv->key, "arch", dv->arch,
        "decided", dv->decided[0] ? json_string(dv->decided) : json_null(),
        "source", d ? json_string(detctl_print_source(d->source)) : json_null(),
        "decided_by", "decided_at", "timings", timings_json(d), "uses", uses,
        "ranks", "missing_ranks", "failures", "ok", 1);
    if (key == NULL)
        return;
    add_failure(c->failures, key, "divergence", dv->reason);
    json_array_append_new(c->keys, key);
}

static void print_text(const json_t *doc) {
    size_t i, j, k;
    json_t *d, *u, *cl, *f;
    detctl_jobs_print_line(doc);
    printf("namespace: %s (%s)\n",
           json_string_value(json_object_get(doc, "namespace")),
           strcmp(json_string_value(json_object_get(doc, "namespace_source")),
                  "daemon") == 0
               ? "the daemon's"
               : json_string_value(json_object_get(doc, "namespace_source")));
    json_array_foreach(json_object_get(doc, "divergences"), i, d) {
        printf("DIVERGED %s %s [%s]\n",
               json_string_value(json_object_get(d, "kernel")),
               json_string_value(json_object_get(d, "key")),
               json_string_value(json_object_get(d, "arch")));
        const char *dec = json_string_value(json_object_get(d, "decided"));
        printf("  decided: %s\n", dec && dec[0] ? dec : "(none)");
        const char *reason = json_string_value(json_object_get(d, "reason"));
        if (reason && reason[0])
            printf("  reason:  %s\n", reason);
        json_array_foreach(json_object_get(d, "uses"), j, u) {
            printf("  %s%s used by:\n",
                   json_string_value(json_object_get(u, "config")),
                   json_is_true(json_object_get(u, "chaos")) ? " (chaos)" : "");
            json_array_foreach(json_object_get(u, "clients"), k, cl) {
                const char *w = json_string_value(json_object_get(cl, "who"));
                if (w == NULL) { /* the daemon's form */
                    char buf[320];
                    int n =
                        snprintf(buf, sizeof buf, "rank %lld %s pid %lld",
                                 (long long)json_integer_value(
                                     json_object_get(cl, "rank")),
                                 json_string_value(json_object_get(cl, "host")),
                                 (long long)json_integer_value(
                                     json_object_get(cl, "pid")));
                    /* And what the daemon saw of it (peers[k], same order). */
                    json_t *p = json_array_get(json_object_get(u, "peers"), k);
                    if (p != NULL && n > 0 && (size_t)n < sizeof buf) {
                        long long pid =
                            json_integer_value(json_object_get(p, "pid"));
                        long long uid =
                            json_integer_value(json_object_get(p, "uid"));
                        long long claimed = json_integer_value(
                            json_object_get(p, "claimed_pid"));
                        const char *node =
                            json_string_value(json_object_get(p, "node"));
                        char uids[32] = "?";
                        if (uid >= 0)
                            snprintf(uids, sizeof uids, "%lld", uid);
                        snprintf(buf + n, sizeof buf - (size_t)n,
                                 " (seen: pid %lld uid %s on %s)%s", pid, uids,
                                 node && node[0] ? node : "?",
                                 claimed != 0 && claimed != pid
                                     ? " claimed pid differs"
                                     : "");
                    }
                    printf("    %s\n", buf);
                } else {
                    printf("    %s\n", w);
                }
            }
        }
    }
    static const struct {
        const char *kind, *label;
    } labels[] = {{"fallback", "FALLBACK"},
                  {"failed_launch", "FAILED"},
                  {"missing_ranks", "MISSING"},
                  {"empty", "EMPTY"},
                  {"lock", "LOCK"},
                  {"truncated", "INCOMPLETE"},
                  {"not_governed", "NOT-GOVERNED"}};
    json_array_foreach(json_object_get(doc, "failures"), i, f) {
        const char *kind = json_string_value(json_object_get(f, "kind"));
        const char *label = NULL;
        for (size_t m = 0; m < sizeof labels / sizeof labels[0]; m++)
            if (strcmp(kind, labels[m].kind) == 0)
                label = labels[m].label;
        if (label == NULL)
            continue; /* divergences and unreachable nodes: printed apart */
        if (json_object_get(f, "kernel") != NULL)
            printf("%s %s %s [%s]: %s\n", label,
                   json_string_value(json_object_get(f, "kernel")),
                   json_string_value(json_object_get(f, "key")),
                   json_string_value(json_object_get(f, "arch")),
                   json_string_value(json_object_get(f, "message")));
        else
            printf("%s %s\n", label,
                   json_string_value(json_object_get(f, "message")));
    }
    json_array_foreach(json_object_get(doc, "warnings"), i, f)
        printf("WARN %s %s [%s]: %s\n",
               json_string_value(json_object_get(f, "kernel")),
               json_string_value(json_object_get(f, "key")),
               json_string_value(json_object_get(f, "arch")),
               json_string_value(json_object_get(f, "message")));
    detctl_nondet_print(doc);
    detctl_tuners_print(doc);
    int ok = json_is_true(json_object_get(doc, "ok"));
    if (!ok)
        detctl_jobs_print_hint(doc);
    long long kc = json_integer_value(json_object_get(doc, "keys_checked"));
    long long ob = json_integer_value(json_object_get(doc, "observations"));
    size_t nd = json_array_size(json_object_get(doc, "divergences"));
    printf("%s: %lld key%s checked, %lld observation%s, %zu divergence%s",
           ok ? "ok" : "FAIL", kc, kc == 1 ? "" : "s", ob, ob == 1 ? "" : "s",
           nd, nd == 1 ? "" : "s");
    long long ug = json_integer_value(json_object_get(doc, "ungoverned"));
    if (ug > 0)
        printf(", %lld ungoverned", ug);
    size_t nn = json_array_size(json_object_get(doc, "nodes_checked"));
    if (nn > 0)
        printf(", %zu node%s", nn, nn == 1 ? "" : "s");
    long long fb = json_integer_value(json_object_get(doc, "fallbacks"));
    if (fb > 0)
        printf(", %lld fallback%s", fb, fb == 1 ? "" : "s");
    long long fl = json_integer_value(json_object_get(doc, "failed_launches"));
    if (fl > 0)
        printf(", %lld failed launch%s", fl, fl == 1 ? "" : "es");
    size_t nw = json_array_size(json_object_get(doc, "warnings"));
    if (nw > 0)
        printf(", %zu warning%s", nw, nw == 1 ? "" : "s");
    detctl_nondet_print_count(doc);
    size_t nf = json_array_size(json_object_get(doc, "failures"));
    if (nf > nd)
        printf(", %zu failure%s in all", nf, nf == 1 ? "" : "s");
    printf("\n");
    json_array_foreach(json_object_get(doc, "nodes_unreachable"), i, d)
        printf("UNREACHABLE %s\n", json_string_value(d));
}

/* The node lists of a verify --cluster answer v after its first page:
 * later pages asked with v's next_page_token, followed to the last. On
 * return v's lists point at every name (v's own, then each page's; arrays
 * in *ret_checked and *ret_unreachable, the answers in *ret_pages: the
 * caller frees them after restore_node_lists()). A daemon that does not
 * page answers no token: v alone. */
struct node_lists {
    Detd__V1__VerifyResponse **pages;
    size_t n_pages;
    char **checked, **unreachable;
    char **own_checked, **own_unreachable; /* v's, to put back */
    size_t own_n_checked, own_n_unreachable;
};

static int append_strs(char ***v, size_t *n, char **add, size_t n_add) {
    if (n_add == 0)
        return 0;
    char **nv = realloc(*v, (*n + n_add) * sizeof(*nv));
    if (nv == NULL)
        return -1;
    memcpy(nv + *n, add, n_add * sizeof(*nv));
    *v = nv;
    *n += n_add;
    return 0;
}

static int verify_node_pages(const struct detctl_opts *o,
                             struct wire_channel *ch, const char *ns,
                             Detd__V1__VerifyResponse *v,
                             struct node_lists *nl) {
    nl->own_checked = v->nodes_checked;
    nl->own_n_checked = v->n_nodes_checked;
    nl->own_unreachable = v->nodes_unreachable;
    nl->own_n_unreachable = v->n_nodes_unreachable;
    const char *tok = str0(v->next_page_token);
    if (tok[0] == '\0')
        return DETCTL_EXIT_OK;
    size_t nc = 0, nu = 0;
    if (append_strs(&nl->checked, &nc, v->nodes_checked, v->n_nodes_checked) !=
            0 ||
        append_strs(&nl->unreachable, &nu, v->nodes_unreachable,
                    v->n_nodes_unreachable) != 0)
        goto oom;
    while (tok[0] != '\0') {
        Detd__V1__VerifyRequest req = DETD__V1__VERIFY_REQUEST__INIT;
        Detd__V1__VerifyResponse *p = NULL;
        req.api_version = DETD_API_VERSION;
        req.namespace_ = (char *)ns;
        req.cluster = 1;
        req.page_token = (char *)tok;
        int ex = detctl_call(o, ch, WIRE_METHOD_VERIFY, &req.base,
                             &detd__v1__verify_response__descriptor,
                             (ProtobufCMessage **)&p);
        if (ex != DETCTL_EXIT_OK)
            return ex;
        Detd__V1__VerifyResponse **np =
            realloc(nl->pages, (nl->n_pages + 1) * sizeof(*np));
        if (np == NULL) {
            protobuf_c_message_free_unpacked(&p->base, NULL);
            goto oom;
        }
        nl->pages = np;
        np[nl->n_pages++] = p;
        if (append_strs(&nl->checked, &nc, p->nodes_checked,
                        p->n_nodes_checked) != 0 ||
            append_strs(&nl->unreachable, &nu, p->nodes_unreachable,
                        p->n_nodes_unreachable) != 0)
            goto oom;
        const char *next = str0(p->next_page_token);
        if (next[0] != '\0' &&
            (p->n_nodes_checked + p->n_nodes_unreachable == 0 ||
             strcmp(next, tok) == 0)) {
            fprintf(stderr,
                    "detctl: verify --cluster: detd at '%s' answered a page "
                    "of node names whose next page token '%.40s' does not "
                    "move on\n",
                    o->socket, next);
            return DETCTL_EXIT_ERROR;
        }
        tok = next;
    }
    v->nodes_checked = nl->checked;
    v->n_nodes_checked = nc;
    v->nodes_unreachable = nl->unreachable;
    v->n_nodes_unreachable = nu;
    return DETCTL_EXIT_OK;
oom:
    fprintf(stderr, "detctl: out of memory\n");
    return DETCTL_EXIT_ERROR;
}

/* Put v's own lists back and free what verify_node_pages() made. */
static void node_lists_clear(Detd__V1__VerifyResponse *v,
                             struct node_lists *nl) {
    if (v != NULL) {
        v->nodes_checked = nl->own_checked;
        v->n_nodes_checked = nl->own_n_checked;
        v->nodes_unreachable = nl->own_unreachable;
        v->n_nodes_unreachable = nl->own_n_unreachable;
    }
    free(nl->checked);
    free(nl->unreachable);
    for (size_t i = 0; i < nl->n_pages; i++)
        protobuf_c_message_free_unpacked(&nl->pages[i]->base, NULL);
    free(nl->pages);
}

/* See detctl_verify.h. */
int detctl_verify_run(const struct detctl_opts *o, struct wire_channel *ch) {
    if (o->job != NULL && o->all_jobs) {
        fprintf(stderr, "detctl: verify takes --job J or --all-jobs, not "
                        "both (see 'detctl verify --help')\n");
        return DETCTL_EXIT_USAGE;
    }
    if (o->cluster && (o->job != NULL || o->expect_ranks > 0)) {
        fprintf(stderr, "detctl: verify --cluster takes neither --job nor "
                        "--expect-ranks: the other nodes' observations are "
                        "compared inside the daemon (see 'detctl verify "
                        "--help')\n");
        return DETCTL_EXIT_USAGE;
    }
    char ns[256];
    const char *src = NULL;
    detctl_call_namespace(o, ch, ns, sizeof ns, &src);
    Detd__V1__VerifyResponse *v = NULL;
    Detd__V1__ListObservationsResponse **pages = NULL;
    size_t n_pages = 0;
    int capped = 0;
    Detd__V1__ListDecisionsResponse *ld = NULL;
    Detd__V1__Observation **obs = NULL;
    json_t *doc = NULL, *rt_acc = NULL;
    struct node_lists nl = {0};
    struct detctl_jobs jobs = {0};
    struct detctl_lock *lock = NULL;
    int ex = o->lock != NULL ? detctl_lock_load(o->lock, &lock) : 0;
    if (ex != DETCTL_EXIT_OK)
        goto out;
    ex = detctl_call_observations(o, ch, ns, &pages, &n_pages, &capped);
    if (ex != DETCTL_EXIT_OK)
        goto out;
    if (detctl_jobs_pick(o, pages, n_pages, &jobs) != 0) {
        ex = DETCTL_EXIT_ERROR;
        goto oom;
    }
    /* Every job: the daemon compares (across nodes with --cluster); one
     * job: the comparison is made here, the daemon's way. */
    if (jobs.pick == NULL) {
        Detd__V1__VerifyRequest req = DETD__V1__VERIFY_REQUEST__INIT;
        req.api_version = DETD_API_VERSION;
        req.namespace_ = ns;
        req.cluster = o->cluster != 0;
        ex = detctl_call(o, ch, WIRE_METHOD_VERIFY, &req.base,
                         &detd__v1__verify_response__descriptor,
                         (ProtobufCMessage **)&v);
        if (ex != DETCTL_EXIT_OK)
            goto out;
        ex = verify_node_pages(o, ch, ns, v, &nl);
        if (ex != DETCTL_EXIT_OK)
            goto out;
    }
    size_t n_all = 0;
    for (size_t i = 0; i < n_pages; i++)
        n_all += pages[i]->n_observations;
    ex = detctl_call_decisions(o, ch, ns, NULL, &ld);
    if (ex != DETCTL_EXIT_OK)
        goto out;
    ex = DETCTL_EXIT_ERROR;
    size_t n = 0;
    obs = calloc(n_all + 1, sizeof(*obs));
    if (obs == NULL)
        goto oom;
    int job_labels = 0;
    rt_acc = json_object(); /* runtime findings (detctl_nondet.h) */
    if (rt_acc == NULL)
        goto oom;
    for (size_t p = 0; p < n_pages; p++)
        for (size_t i = 0; i < pages[p]->n_observations; i++) {
            Detd__V1__Observation *x = pages[p]->observations[i];
            const Detd__V1__ClientIdentity *c = x->client;
            job_labels |= c != NULL && c->job != NULL && c->job[0] != '\0';
            if (!detctl_jobs_match(&jobs, x))
                continue;
            if (detctl_nondet_is(x)) {
                if (detctl_nondet_add(rt_acc, x) != 0)
                    goto oom;
                continue;
            }
            obs[n++] = x;
        }
    if (o->job != NULL && n == 0 && json_object_size(rt_acc) == 0 &&
        n_all > 0 && !job_labels) {
        fprintf(stderr,
                "detctl: verify --job: detd at '%s' does not record the job "
                "label of observations, so none can be selected by job\n",
                o->socket);
        goto out;
    }
    /* qsort() needs a non-NULL array, even for 0 elements. */
    if (n > 1)
        qsort(obs, n, sizeof(*obs), obs_cmp);
    if (ld->n_decisions > 1)
        qsort(ld->decisions, ld->n_decisions, sizeof(*ld->decisions), dec_cmp);
    char now[48];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    detctl_cli_iso_time((int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000, now,
                        sizeof now);
    struct vctx c = {.o = o,
                     .v = v,
                     .decs = ld->decisions,
                     .n_decs = ld->n_decisions,
                     .lock = lock,
                     .ns = ns};
    c.doc = detctl_cli_doc("VerifyReport");
    c.keys = json_array();
    c.failures = json_array();
    c.divs = json_array();
    c.tuners = json_object();
    c.warnings = json_array();
    doc = c.doc;
    if (doc == NULL || c.keys == NULL || c.failures == NULL || c.divs == NULL ||
        c.tuners == NULL || c.warnings == NULL) {
        json_decref(c.keys);
        json_decref(c.failures);
        json_decref(c.divs);
        json_decref(c.tuners);
        json_decref(c.warnings);
        goto oom;
    }
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && strcmp(obs[j]->id, obs[i]->id) == 0)
            j++;
        check_group(&c, obs + i, j - i);
        i = j;
    }
    for (size_t i = 0; v != NULL && i < v->n_divergences; i++)
        add_remote(&c, v->divergences[i]);
    uint64_t keys_checked =
        v != NULL ? v->keys_checked : json_array_size(c.keys);
    uint64_t observations = v != NULL ? v->observations : c.observations;
    uint64_t ungoverned = v != NULL ? v->ungoverned : c.ungoverned;
    json_t *checked = json_array(), *unreachable = json_array();
    for (size_t i = 0; v != NULL && i < v->n_nodes_checked; i++)
        json_array_append_new(checked, json_string(v->nodes_checked[i]));
    for (size_t i = 0; v != NULL && i < v->n_nodes_unreachable; i++) {
        json_array_append_new(unreachable,
                              json_string(v->nodes_unreachable[i]));
        char msg[600];
        snprintf(msg, sizeof msg, "node unreachable: %s",
                 v->nodes_unreachable[i]);
        add_failure(c.failures, NULL, "unreachable", msg);
    }
    if (capped || ld->truncated)
        add_failure(c.failures, NULL, "truncated",
                    capped ? "the daemon's list of observations was "
                             "truncated at its cap: not every "
                             "observation was checked here"
                           : "the daemon's list of decisions was "
                             "truncated at its cap: timings and "
                             "failed-launch checks are incomplete");
    if (keys_checked == 0 && !o->allow_empty) {
        char msg[700];
        snprintf(msg, sizeof msg,
                 "nothing was checked: no observation in namespace '%s'%s%s"
                 "%s (a mistyped namespace, DETD_NAMESPACE not set as the "
                 "job's, or a run that launched nothing?); --allow-empty "
                 "accepts it",
                 ns, jobs.pick ? " of job '" : "", jobs.pick ? jobs.pick : "",
                 jobs.pick ? "'" : "");
        add_failure(c.failures, NULL, "empty", msg);
    }
    /* --require-governed: each tuner detd could not govern fails. */
    const char *tk0;
    json_t *t0;
    if (o->require_governed)
        json_object_foreach(c.tuners, tk0, t0) {
            if (!json_is_true(json_object_get(t0, "cannot_govern")))
                continue;
            const char *why = json_string_value(json_object_get(t0, "why"));
            char msg[1400];
            snprintf(msg, sizeof msg, "%s %s: not governed: %s",
                     json_string_value(json_object_get(t0, "kind")), tk0,
                     why != NULL && why[0] ? why : "(no reason sent)");
            add_failure(c.failures, NULL, "not_governed", msg);
        }
    size_t n_nondet = 0;
    json_t *runtime = detctl_nondet_json(rt_acc, o->strict_determinism,
                                         c.failures, &n_nondet);
    if (runtime == NULL)
        goto oom; /* (the process ends: c's arrays are not freed) */
    json_t *divs = c.divs;
    if (v != NULL) {
        json_t *dj = detctl_print_json_verify(v);
        json_decref(c.divs);
        divs = dj != NULL ? json_incref(json_object_get(dj, "divergences"))
                          : json_array();
        json_decref(dj);
    }
    int ok = json_array_size(c.failures) == 0;
    json_object_set_new(doc, "namespace", json_string(ns));
    json_object_set_new(doc, "namespace_source", json_string(src));
    detctl_jobs_json(&jobs, doc);
    json_object_set_new(doc, "lock",
                        lock != NULL ? detctl_lock_json(lock) : json_null());
    json_object_set_new(doc, "cluster", json_boolean(o->cluster));
    json_object_set_new(doc, "expect_ranks",
                        o->expect_ranks > 0
                            ? json_integer((json_int_t)o->expect_ranks)
                            : json_null());
    json_object_set_new(doc, "allow_empty", json_boolean(o->allow_empty));
    json_object_set_new(doc, "generated_at", json_string(now));
    json_object_set_new(doc, "ok", json_boolean(ok));
    json_object_set_new(doc, "keys_checked",
                        json_integer((json_int_t)keys_checked));
    json_object_set_new(doc, "observations",
                        json_integer((json_int_t)observations));
    json_object_set_new(doc, "ungoverned",
                        json_integer((json_int_t)ungoverned));
    json_object_set_new(doc, "fallbacks",
                        json_integer((json_int_t)c.fallbacks));
    json_object_set_new(doc, "failed_launches",
                        json_integer((json_int_t)c.failed_launches));
    json_t *tl = json_array();
    const char *tk;
    json_t *tv;
    json_object_foreach(c.tuners, tk, tv) json_array_append(tl, tv);
    json_decref(c.tuners);
    json_object_set_new(doc, "autotuners", tl);
    json_object_set_new(doc, "warnings", c.warnings);
    json_object_set_new(doc, "strict_determinism",
                        json_boolean(o->strict_determinism));
    json_object_set_new(doc, "require_governed",
                        json_boolean(o->require_governed));
    json_object_set_new(doc, "nondeterministic",
                        json_integer((json_int_t)n_nondet));
    json_object_set_new(doc, "runtime", runtime);
    json_object_set_new(doc, "divergences", divs);
    json_object_set_new(doc, "nodes_checked", checked);
    json_object_set_new(doc, "nodes_unreachable", unreachable);
    json_object_set_new(doc, "failures", c.failures);
    json_object_set_new(doc, "keys", c.keys);
    if (o->json)
        json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER),
            fputc('\n', stdout);
    else {
        /* What clients sent (keys, errors, reasons) cannot forge a line. */
        json_t *safe = detctl_print_json_escaped(doc);
        if (safe == NULL)
            goto oom;
        print_text(safe);
        json_decref(safe);
    }
    ex = ok ? DETCTL_EXIT_OK : DETCTL_EXIT_NO;
    if (o->report != NULL) {
        int rx = detctl_report_write_file(o->report, doc,
                                          detctl_report_format_of(o->report));
        if (rx != DETCTL_EXIT_OK)
            ex = rx;
    }
    if (o->junit != NULL) {
        int rx = detctl_report_write_file(o->junit, doc, DETCTL_REPORT_JUNIT);
        if (rx != DETCTL_EXIT_OK)
            ex = rx;
    }
    goto out;
oom:
    fprintf(stderr, "detctl: out of memory\n");
out:
    json_decref(doc);
    json_decref(rt_acc);
    free(obs);
    detctl_jobs_clear(&jobs);
    detctl_lock_free(lock);
    node_lists_clear(v, &nl);
    if (v != NULL)
        protobuf_c_message_free_unpacked(&v->base, NULL);
    for (size_t i = 0; i < n_pages; i++)
        protobuf_c_message_free_unpacked(&pages[i]->base, NULL);
    free(pages);
    if (ld != NULL)
        protobuf_c_message_free_unpacked(&ld->base, NULL);
    return ex;
}
