/* detctl_lock: lockfiles (see detctl_lock.h, docs/lockfile.md). */
#define _GNU_SOURCE
#include "detctl_lock.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "detctl_call.h"
#include "lockfmt.h"
#include "provfmt.h"
#include "detctl_jobs.h"
#include "detctl_print.h"
#include "detd.pb-c.h"
#include "detd/client.h"
#include "detd/error.h"
#include "wire.h"

/* An ImportLock request stays under the daemon's 1 MiB message cap. */
#define LOCK_BATCH_BYTES (768 * 1024)
#define METHOD_IMPORT_LOCK "/detd.v1.Admin/ImportLock"
/* The daemon's winner rule (daemon/core/engine.h), named in each lock. */
#define WINNER_RULE                                                            \
    "each candidate's score is the median of its samples; failed ones and "    \
    "those without a finite median are out; of those within 1% of the best "   \
    "score, the smallest config string (strcmp) wins"

struct detctl_lock {
    struct lockfmt *f;
    char *path;
    const char *sha256, *ns; /* borrowed from f */
    struct lockfmt_entry *e; /* f's */
    size_t n;
    char (*ns_id)[LOCKFMT_HEX + 1]; /* e[i]'s id in ids_ns */
    char ids_ns[256];               /* the namespace ns_id is for */
    int ids_done;
};

static const char *str_of(const json_t *o, const char *name) {
    return json_string_value(json_object_get(o, name));
}

/* ---- export ---- */

static json_t *timings_of(const Detd__V1__Decision *d) {
    json_t *a = json_array();
    for (size_t i = 0; a != NULL && i < d->n_timings; i++) {
        json_t *ms = json_array();
        for (size_t j = 0; ms != NULL && j < d->timings[i]->n_ms; j++)
            json_array_append_new(ms, json_real(d->timings[i]->ms[j]));
        json_array_append_new(a, json_pack("{s:s, s:o, s:b}", "config",
                                           d->timings[i]->config, "ms",
                                           ms ? ms : json_array(), "failed",
                                           d->timings[i]->failed));
    }
    return a;
}

/* A decision as a lock entry, with what is known of how it was made. */
static json_t *entry_of(const Detd__V1__Decision *d) {
    const Detd__V1__ClientIdentity *by = d->decided_by;
    char claim[32];
    snprintf(claim, sizeof claim, "%" PRIu64, (uint64_t)d->claim_id);
    int timed = by != NULL && by->host != NULL && by->host[0] != '\0';
    /* What a decision row records of who timed it (the rest of an
     * identity is not stored). */
    json_t *who =
        timed ? json_pack("{s:s, s:i, s:i, s:i, s:s, s:s}", "host", by->host,
                          "pid", (int)by->pid, "rank", (int)by->rank,
                          "local_rank", (int)by->local_rank, "device_name",
                          by->device_name, "arch", by->arch)
              : json_null();
    json_t *prov = json_pack(
        "{s:s, s:s, s:o, s:o, s:s, s:I, s:o, s:s, s:o}", "device",
        by ? by->device_name : "", "triton_version", d->triton_version,
        "timed_by", who, "seen",
        timed ? detctl_print_json_peer(d->decided_peer) : json_null(),
        "claim_id", claim, "decided_at_ms", (json_int_t)d->decided_at_ms,
        "decided_at", detctl_cli_json_time(d->decided_at_ms), "table_file",
        d->table_file, "timings", timings_of(d));
    /* How it was timed (null members: not recorded). */
    if (prov == NULL || provfmt_put(prov, d->timing) != 0) {
        json_decref(prov);
        return NULL;
    }
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:i, s:s, s:s, s:o}", "id",
                     d->id, "arch", d->arch, "kernel", d->kernel, "key", d->key,
                     "candidates_fp", d->candidates_fp, "n_candidates",
                     (int)d->n_candidates, "config", d->config, "source",
                     detctl_print_source(d->source), "provenance", prov);
}

static int dec_by_id(const void *pa, const void *pb) {
    const Detd__V1__Decision *a = *(Detd__V1__Decision *const *)pa;
    const Detd__V1__Decision *b = *(Detd__V1__Decision *const *)pb;
    return strcmp(a->id, b->id);
}

/* Write doc to path (or stdout for "-") whole: a temporary file renamed. */
static int write_doc(const char *path, json_t *doc) {
    int flags = JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(17);
    if (strcmp(path, "-") == 0) {
        json_dumpf(doc, stdout, flags);
        fputc('\n', stdout);
        return DETCTL_EXIT_OK;
    }
    char *tmp = NULL;
    if (asprintf(&tmp, "%s.tmp.%d", path, (int)getpid()) < 0)
        return DETCTL_EXIT_ERROR;
    FILE *f = fopen(tmp, "w");
    int ok = f != NULL && json_dumpf(doc, f, flags) == 0 &&
             fputc('\n', f) != EOF && fflush(f) == 0;
    int err = errno;
    if (f != NULL && fclose(f) != 0 && ok) {
        ok = 0;
        err = errno;
    }
    if (ok && rename(tmp, path) != 0) {
        ok = 0;
        err = errno;
    }
    if (!ok) {
        unlink(tmp);
        fprintf(stderr, "detctl: lock export: cannot write '%s': %s\n", path,
                strerror(err));
    }
    free(tmp);
    return ok ? DETCTL_EXIT_OK : DETCTL_EXIT_ERROR;
}

/* See detctl_lock.h. */
int detctl_lock_export_run(const struct detctl_opts *o,
                           struct wire_channel *ch) {
    if (o->out == NULL) {
        fprintf(stderr, "detctl: lock export needs -o FILE (see 'detctl lock "
                        "export --help')\n");
        return DETCTL_EXIT_USAGE;
    }
    if (o->all + (o->job != NULL) + o->all_jobs > 1) {
        fprintf(stderr, "detctl: lock export takes one of --all, --job J and "
                        "--all-jobs\n");
        return DETCTL_EXIT_USAGE;
    }
    char ns[256];
    const char *src = NULL;
    detctl_call_namespace(o, ch, ns, sizeof ns, &src);
    Detd__V1__StatusRequest sq = DETD__V1__STATUS_REQUEST__INIT;
    Detd__V1__StatusResponse *st = NULL;
    Detd__V1__ListDecisionsResponse *ld = NULL;
    Detd__V1__ListObservationsResponse **pages = NULL;
    size_t n_pages = 0, used = 0, undecided = 0;
    int capped = 0;
    struct detctl_jobs jobs = {0};
    json_t *doc = NULL, *entries = NULL;
    char **ids = NULL;
    size_t n_ids = 0;
    sq.api_version = DETD_API_VERSION;
    int ex = detctl_call(o, ch, WIRE_METHOD_STATUS, &sq.base,
                         &detd__v1__status_response__descriptor,
                         (ProtobufCMessage **)&st);
    if (ex != DETCTL_EXIT_OK)
        goto out;
    ex = detctl_call_decisions(o, ch, ns, NULL, &ld);
    if (ex != DETCTL_EXIT_OK)
        goto out;
    if (ld->truncated) {
        fprintf(stderr,
                "detctl: lock export: namespace '%s' holds more decisions "
                "than one list of the daemon's (%zu): not exported\n",
                ns, ld->n_decisions);
        ex = DETCTL_EXIT_ERROR;
        goto out;
    }
    if (ld->n_decisions > 1)
        qsort(ld->decisions, ld->n_decisions, sizeof(*ld->decisions),
              dec_by_id);
    if (!o->all) {
        ex = detctl_call_observations(o, ch, ns, &pages, &n_pages, &capped);
        if (ex != DETCTL_EXIT_OK)
            goto out;
        ex = DETCTL_EXIT_ERROR;
        if (detctl_jobs_pick(o, pages, n_pages, &jobs) != 0)
            goto oom;
        size_t n_all = 0;
        for (size_t p = 0; p < n_pages; p++)
            n_all += pages[p]->n_observations;
        if (n_all == 0 || capped) {
            fprintf(stderr,
                    "detctl: lock export: %s in namespace '%s': a lock holds "
                    "the decisions a job used; --all exports every decision\n",
                    capped ? "the observations were cut at the daemon's cap"
                           : "nothing was observed",
                    ns);
            goto out;
        }
        if ((ids = calloc(n_all, sizeof(*ids))) == NULL)
            goto oom;
        for (size_t p = 0; p < n_pages; p++)
            for (size_t i = 0; i < pages[p]->n_observations; i++) {
                Detd__V1__Observation *x = pages[p]->observations[i];
                if (!detctl_jobs_match(&jobs, x) || x->config[0] == '\0')
                    continue;
                int dup = 0;
                for (size_t k = 0; k < n_ids && !dup; k++)
                    dup = strcmp(ids[k], x->id) == 0;
                if (!dup)
                    ids[n_ids++] = x->id;
            }
    }
    ex = DETCTL_EXIT_ERROR;
    entries = json_array();
    if (entries == NULL)
        goto oom;
    for (size_t i = 0; i < ld->n_decisions; i++) {
        const Detd__V1__Decision *d = ld->decisions[i];
        int want = o->all;
        for (size_t k = 0; k < n_ids && !want; k++)
            want = strcmp(ids[k], d->id) == 0;
        if (want && json_array_append_new(entries, entry_of(d)) != 0)
            goto oom;
        used += want;
    }
    undecided = n_ids - used;
    json_t *gpus = json_array();
    for (size_t i = 0; gpus != NULL && i < st->n_gpus; i++)
        json_array_append_new(gpus, json_pack("{s:s, s:s, s:s, s:i}", "name",
                                              st->gpus[i]->name, "arch",
                                              st->gpus[i]->arch, "uuid",
                                              st->gpus[i]->uuid, "sm_count",
                                              (int)st->gpus[i]->sm_count));
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    doc = json_pack(
        "{s:s, s:i, s:s, s:o, s:o, s:{s:s, s:s, s:s, s:o, s:s}, "
        "s:{s:s, s:f}, s:I, s:O}",
        "kind", LOCKFMT_KIND, "format", LOCKFMT_FORMAT, "namespace", ns, "job",
        o->all        ? json_null()
        : jobs.pick   ? json_string(jobs.pick)
        : jobs.n == 1 ? json_string(jobs.v[0].job)
                      : json_null(),
        "created_at", detctl_cli_json_time(now), "created_by", "detctl",
        DETD_VERSION, "daemon", st->version, "host", host, "gpus",
        gpus ? gpus : json_array(), "gpu_probe", st->gpu_probe, "winner_rule",
        "text", WINNER_RULE, "epsilon", 0.01, "keys_without_decision",
        (json_int_t)undecided, "entries", entries);
    if (doc == NULL)
        goto oom;
    char hash[65];
    if (lockfmt_hash(doc, hash) != 0)
        goto oom;
    json_object_set_new(doc, "sha256", json_string(hash));
    ex = write_doc(o->out, doc);
    if (ex == DETCTL_EXIT_OK && strcmp(o->out, "-") != 0) {
        detctl_call_print_namespace(ns, src);
        printf("wrote %s: %zu decision%s of %s, sha256 %s\n", o->out, used,
               used == 1 ? "" : "s",
               o->all                             ? "the namespace"
               : jobs.pick != NULL || jobs.n == 1 ? "the job"
                                                  : "every job",
               hash);
        if (undecided > 0)
            printf("%zu key%s the job used had no decision (fallback or "
                   "ungoverned): not in the lock\n",
                   undecided, undecided == 1 ? "" : "s");
    }
    goto out;
oom:
    fprintf(stderr, "detctl: out of memory\n");
    ex = DETCTL_EXIT_ERROR;
out:
    json_decref(doc);
    json_decref(entries); /* doc holds its own reference ("O") */
    free(ids);
    detctl_jobs_clear(&jobs);
    for (size_t i = 0; i < n_pages; i++)
        protobuf_c_message_free_unpacked(&pages[i]->base, NULL);
    free(pages);
    if (ld != NULL)
        protobuf_c_message_free_unpacked(&ld->base, NULL);
    if (st != NULL)
        protobuf_c_message_free_unpacked(&st->base, NULL);
    return ex;
}

/* ---- load ---- */

/* See detctl_lock.h. */
void detctl_lock_free(struct detctl_lock *l) {
    if (l == NULL)
        return;
    lockfmt_free(l->f);
    free(l->ns_id);
    free(l->path);
    free(l);
}

/* See detctl_lock.h. */
int detctl_lock_load(const char *path, struct detctl_lock **ret) {
    char why[600];
    struct detctl_lock *l = calloc(1, sizeof(*l));
    if (l == NULL || (l->path = strdup(path)) == NULL) {
        free(l);
        fprintf(stderr, "detctl: out of memory\n");
        return DETCTL_EXIT_ERROR;
    }
    int rc = lockfmt_load(path, &l->f, why, sizeof why);
    if (rc == 0 && (l->ns_id = calloc(l->f->n + 1, sizeof(*l->ns_id))) == NULL)
        rc = DETD_ENOMEM;
    if (rc != 0) {
        if (rc == DETD_ENOMEM)
            fprintf(stderr, "detctl: out of memory\n");
        else
            fprintf(stderr, "detctl: lockfile '%s': %s\n", path, why);
        detctl_lock_free(l);
        return rc == DETD_ENOMEM ? DETCTL_EXIT_ERROR : DETCTL_EXIT_USAGE;
    }
    l->sha256 = l->f->sha256;
    l->ns = l->f->ns;
    l->e = l->f->e;
    l->n = l->f->n;
    *ret = l;
    return DETCTL_EXIT_OK;
}

/* ---- import ---- */

/* Why entry e is not imported given --arch ("" when it is). The run's
 * provenance (--triton-version, --require) is the daemon's check. */
static void skip_reason(const struct detctl_opts *o,
                        const struct lockfmt_entry *e, char *why, size_t len) {
    why[0] = '\0';
    if (o->arch != NULL && strcmp(o->arch, e->arch) != 0)
        snprintf(why, len, "decided for arch %s, not %s (--arch)", e->arch,
                 o->arch);
}

/* --triton-version V and --require FIELD=VALUE as requirements (their
 * strings borrowed from o and buf); returns how many. */
static size_t requirements(const struct detctl_opts *o,
                           Detd__V1__LockRequirement *q,
                           Detd__V1__LockRequirement **qp, char buf[][64]) {
    size_t n = 0;
    if (o->triton_version != NULL) {
        detd__v1__lock_requirement__init(&q[n]);
        q[n].field = "triton_version";
        q[n].value = (char *)o->triton_version;
        qp[n] = &q[n];
        n++;
    }
    for (size_t i = 0; i < o->n_require; i++, n++) {
        const char *eq = strchr(o->require[i], '=');
        snprintf(buf[n], 64, "%.*s", (int)(eq - o->require[i]), o->require[i]);
        detd__v1__lock_requirement__init(&q[n]);
        q[n].field = buf[n];
        q[n].value = (char *)eq + 1;
        qp[n] = &q[n];
    }
    return n;
}

/* One ImportLock call for m[0..n); adds to the sums and prints conflicts. */
static int import_batch(const struct detctl_opts *o, struct wire_channel *ch,
                        const char *ns, const struct detctl_lock *l,
                        struct lockfmt_msg *m, size_t n, uint64_t sums[4]) {
    Detd__V1__ImportLockRequest req = DETD__V1__IMPORT_LOCK_REQUEST__INIT;
    Detd__V1__ImportLockResponse *r = NULL;
    Detd__V1__Decision **dp = calloc(n + 1, sizeof(*dp));
    if (dp == NULL)
        return DETCTL_EXIT_ERROR;
    for (size_t i = 0; i < n; i++)
        dp[i] = &m[i].d;
    const char *base = strrchr(l->path, '/');
    req.api_version = DETD_API_VERSION;
    req.namespace_ = (char *)ns;
    req.file = (char *)(base != NULL ? base + 1 : l->path);
    req.sha256 = (char *)l->sha256;
    req.decisions = dp;
    req.n_decisions = n;
    Detd__V1__LockRequirement q[8], *qp[8];
    char fields[8][64];
    req.require = qp;
    req.n_require = requirements(o, q, qp, fields);
    int rc = wire_unary(ch, METHOD_IMPORT_LOCK, &req.base,
                        &detd__v1__import_lock_response__descriptor,
                        o->timeout_ms, (ProtobufCMessage **)&r);
    free(dp);
    if (rc < 0) {
        /* The daemon answered that etcd did not take some entries (its
         * message names them and what landed), or the call failed. */
        const char *msg = wire_last_error();
        int ex = strncmp(msg, "etcd ", 5) == 0 ? DETCTL_EXIT_UNAVAILABLE
                                               : DETCTL_EXIT_OK;
        if (ex != DETCTL_EXIT_OK)
            fprintf(stderr, "detctl: lock import (detd at '%s'): %s\n",
                    o->socket, msg);
        else
            ex = detctl_call_fail(o, "ImportLock", rc);
        if (sums[0] + sums[1] + sums[2] > 0)
            fprintf(stderr,
                    "detctl: lock import: the requests before this one "
                    "landed: %" PRIu64 " added, %" PRIu64 " unchanged, %" PRIu64
                    " conflicting (kept as stored)\n",
                    sums[0], sums[1], sums[2]);
        return ex;
    }
    sums[0] += r->added;
    sums[1] += r->unchanged;
    sums[2] += r->conflicts_total;
    sums[3] += r->skipped;
    for (size_t i = 0; i < r->n_skipped_reasons; i++)
        printf("SKIPPED %s: a miss, timed by the job\n", r->skipped_reasons[i]);
    for (size_t i = 0; i < r->n_conflicts; i++) {
        const Detd__V1__Decision *c = r->conflicts[i];
        const char *want = "?";
        for (size_t k = 0; k < n; k++)
            if (strcmp(m[k].d.kernel, c->kernel) == 0 &&
                strcmp(m[k].d.key, c->key) == 0 &&
                strcmp(m[k].d.arch, c->arch) == 0)
                want = m[k].d.config;
        printf("CONFLICT %s %s [%s]: decided already as %s (%s); the lock "
               "says %s: kept ('detctl reset --kernel K' first to take the "
               "lock's)\n",
               c->kernel, c->key, c->arch, c->config,
               detctl_print_source(c->source), want);
    }
    protobuf_c_message_free_unpacked(&r->base, NULL);
    return DETCTL_EXIT_OK;
}

/* See detctl_lock.h. */
int detctl_lock_import_run(const struct detctl_opts *o,
                           struct wire_channel *ch) {
    struct detctl_lock *l = NULL;
    int ex = detctl_lock_load(o->files[0], &l);
    if (ex != DETCTL_EXIT_OK)
        return ex;
    char ns[256];
    const char *src = NULL;
    detctl_call_namespace(o, ch, ns, sizeof ns, &src);
    detctl_call_print_namespace(ns, src);
    printf("lock %s: %zu entries of namespace '%s', sha256 %s\n", l->path, l->n,
           l->ns, l->sha256);
    struct lockfmt_msg *m = calloc(l->n + 1, sizeof(*m));
    uint64_t sums[4] = {0, 0, 0, 0};
    size_t skipped = 0, nb = 0, bytes = 0;
    if (m == NULL)
        goto oom;
    for (size_t i = 0; i < l->n; i++) {
        char why[256];
        skip_reason(o, &l->e[i], why, sizeof why);
        if (why[0] != '\0') {
            printf("SKIPPED %s %s [%s]: %s: a miss, timed by the job\n",
                   l->e[i].kernel, l->e[i].key, l->e[i].arch, why);
            skipped++;
            continue;
        }
        if (lockfmt_msg_fill(&l->e[i], &m[nb]) != 0)
            goto oom;
        size_t sz = protobuf_c_message_get_packed_size(&m[nb].d.base) + 8;
        if (nb > 0 && bytes + sz > LOCK_BATCH_BYTES) {
            ex = import_batch(o, ch, ns, l, m, nb, sums);
            for (size_t k = 0; k < nb; k++)
                lockfmt_msg_clear(&m[k]);
            m[0] = m[nb];
            nb = 0;
            bytes = 0;
            if (ex != DETCTL_EXIT_OK) {
                nb = 1; /* m[0]: cleared at out */
                goto out;
            }
        }
        bytes += sz;
        nb++;
    }
    if (nb > 0 &&
        (ex = import_batch(o, ch, ns, l, m, nb, sums)) != DETCTL_EXIT_OK)
        goto out;
    printf("imported into namespace '%s': %" PRIu64 " added, %" PRIu64
           " unchanged, %" PRIu64 " conflicting (kept as stored), %zu "
           "skipped\n",
           ns, sums[0], sums[1], sums[2], skipped + (size_t)sums[3]);
    ex = sums[2] > 0 ? DETCTL_EXIT_NO : DETCTL_EXIT_OK;
    goto out;
oom:
    fprintf(stderr, "detctl: out of memory\n");
    ex = DETCTL_EXIT_ERROR;
out:
    for (size_t k = 0; m != NULL && k < nb; k++)
        lockfmt_msg_clear(&m[k]);
    free(m);
    detctl_lock_free(l);
    return ex;
}

/* ---- verify --lock ---- */

/* See detctl_lock.h. */
int detctl_lock_check(struct detctl_lock *l, const char *ns, const json_t *key,
                      char *msg, size_t len) {
    if (!l->ids_done || strcmp(l->ids_ns, ns) != 0) {
        for (size_t i = 0; i < l->n; i++)
            lockfmt_key_id(ns, l->e[i].arch, l->e[i].kernel, l->e[i].key,
                           l->e[i].fp, l->ns_id[i]);
        snprintf(l->ids_ns, sizeof l->ids_ns, "%s", ns);
        l->ids_done = 1;
    }
    const char *id = str_of(key, "id"), *kernel = str_of(key, "kernel"),
               *k = str_of(key, "key"), *arch = str_of(key, "arch");
    const json_t *uses = json_object_get(key, "uses");
    size_t i;
    json_t *u;
    int governed = 0;
    json_array_foreach(uses, i, u) governed |=
        json_is_true(json_object_get(u, "governed"));
    if (!governed || id == NULL || kernel == NULL || k == NULL || arch == NULL)
        return 0;
    const struct lockfmt_entry *same = NULL, *near = NULL;
    for (size_t e = 0; e < l->n && same == NULL; e++) {
        if (strcmp(l->ns_id[e], id) == 0)
            same = &l->e[e];
        else if (strcmp(l->e[e].kernel, kernel) == 0 &&
                 strcmp(l->e[e].key, k) == 0 &&
                 (near == NULL || strcmp(l->e[e].arch, arch) == 0))
            near = &l->e[e];
    }
    if (same != NULL) {
        json_array_foreach(uses, i, u) {
            const char *c = str_of(u, "config");
            if (json_is_true(json_object_get(u, "governed")) && c != NULL &&
                strcmp(c, same->config) != 0) {
                snprintf(msg, len, "ran %s; the lock %s says %s", c, l->path,
                         same->config);
                return 1;
            }
        }
        return 0;
    }
    if (near != NULL && strcmp(near->arch, arch) != 0)
        snprintf(msg, len,
                 "not from the lock %s: it holds this kernel and key for "
                 "arch %s, not %s",
                 l->path, near->arch, arch);
    else if (near != NULL)
        snprintf(msg, len,
                 "not from the lock %s: it holds this kernel and key for "
                 "other candidates (fingerprint %.12s...): the candidate "
                 "set changed",
                 l->path, near->fp);
    else
        snprintf(msg, len, "not in the lock %s", l->path);
    return 1;
}

/* See detctl_lock.h. */
json_t *detctl_lock_json(const struct detctl_lock *l) {
    return json_pack("{s:s, s:s, s:s, s:I}", "file", l->path, "sha256",
                     l->sha256, "namespace", l->ns, "entries",
                     (json_int_t)l->n);
}
