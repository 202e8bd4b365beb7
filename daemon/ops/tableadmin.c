/*
 * tableadmin: the per-architecture tables on the loop thread: the first
 * load, reloads (SIGHUP and Admin.Reload), Admin.Explain, and the table
 * part of Admin.Status.
 *
 * A reload reads and validates every file on a libuv worker thread into
 * a new set; the loop thread swaps it in whole when it is complete, so a
 * Decide sees either the old set or the new one, never a mix, and the
 * loop keeps serving while files are read. A reload asked for while one
 * runs is started again after it (the files may have changed since the
 * running one read them); its callers are answered by that second load.
 */
#define _GNU_SOURCE
#include "ops/tableadmin.h"
#include "clock.h"

#include <inttypes.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/convert.h"
#include "app/imports.h"
#include "app/storeerr.h"
#include "app/validate.h"
#include "detd/client.h"
#include "detd/error.h"
#include "core/keyid.h"

#ifndef DETD_TABLES_DIR
#define DETD_TABLES_DIR "/usr/local/share/detd/tables"
#endif

struct call_list {
    rpc_call **v;
    size_t n, cap;
};

struct tables_reload {
    uv_work_t work;
    struct daemon *d;
    tables *result; /* the new set (worker thread), NULL on ENOMEM */
    int rc;
    int64_t started_ms;
    struct call_list calls; /* answered when this load completes */
    struct call_list next;  /* asked while it ran: the next load's */
    int again;
};

static int calls_add(struct call_list *l, rpc_call *call) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        rpc_call **v = realloc(l->v, cap * sizeof(*v));
        if (v == NULL)
            return DETD_ENOMEM;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = call;
    return 0;
}

static void log_set(const tables *t, const char *why) {
    for (size_t i = 0; i < tables_n_errors(t); i++)
        log_warn("table file skipped: %s", tables_error(t, i)->message);
    log_info("%s: %zu table file%s, %zu entries, %zu skipped", why,
             tables_n_files(t), tables_n_files(t) == 1 ? "" : "s",
             tables_n_entries(t), tables_n_errors(t));
}

/* See tableadmin.h. */
int tableadmin_load_initial(struct daemon *d) {
    tables *t = NULL;
    int rc = tables_load(d->cfg->tables, d->cfg->n_tables, DETD_TABLES_DIR,
                         NULL, &t);
    if (rc != 0)
        return rc;
    d->tables = t;
    log_set(t, "tables loaded");
    return 0;
}

static void reload_work(uv_work_t *w) {
    struct tables_reload *r = w->data;
    r->rc = tables_load(r->d->cfg->tables, r->d->cfg->n_tables, DETD_TABLES_DIR,
                        NULL, &r->result);
}

/* Fill TableFile/TableError arrays of t (freed by status_clear). */
static int describe(const tables *t, struct tableadmin_status *ret) {
    memset(ret, 0, sizeof(*ret));
    size_t nf = tables_n_files(t), ne = tables_n_errors(t);
    ret->files = calloc(nf ? nf : 1, sizeof(*ret->files));
    ret->filep = calloc(nf ? nf : 1, sizeof(*ret->filep));
    ret->errors = calloc(ne ? ne : 1, sizeof(*ret->errors));
    ret->errorp = calloc(ne ? ne : 1, sizeof(*ret->errorp));
    if (ret->files == NULL || ret->filep == NULL || ret->errors == NULL ||
        ret->errorp == NULL) {
        tableadmin_status_clear(ret);
        return DETD_ENOMEM;
    }
    for (size_t i = 0; i < nf; i++) {
        const struct tables_file_info *f = tables_file(t, i);
        detd__v1__table_file__init(&ret->files[i]);
        ret->files[i].path = (char *)f->path;
        ret->files[i].arch = (char *)f->arch;
        ret->files[i].entries = f->n_entries;
        ret->filep[i] = &ret->files[i];
    }
    for (size_t i = 0; i < ne; i++) {
        const struct tables_error *e = tables_error(t, i);
        detd__v1__table_error__init(&ret->errors[i]);
        ret->errors[i].path = (char *)e->path;
        ret->errors[i].error = (char *)e->message;
        ret->errorp[i] = &ret->errors[i];
    }
    ret->nfiles = nf;
    ret->nerrors = ne;
    return 0;
}

static void answer_reload(struct daemon *d, rpc_call *call, int64_t took_ms) {
    struct tableadmin_status st;
    if (describe(d->tables, &st) != 0) {
        rpc_fail(call, RPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    Detd__V1__ReloadResponse resp = DETD__V1__RELOAD_RESPONSE__INIT;
    resp.api_version = DETD_API_VERSION;
    resp.files = st.filep;
    resp.n_files = st.nfiles;
    resp.errors = st.errorp;
    resp.n_errors = st.nerrors;
    resp.entries = tables_n_entries(d->tables);
    resp.took_ms = took_ms;
    rpc_reply(call, &resp.base);
    tableadmin_status_clear(&st);
}

/* A replaced set, freed off the loop. */
struct tables_retire {
    uv_work_t work;
    tables *old;
    int64_t since_ms; /* queued */
};

static void retire_work(uv_work_t *w) {
    struct tables_retire *t = w->data;
    tables_free(t->old);
#ifdef __GLIBC__
    /* The set was built on a worker thread, in that thread's malloc
     * arena: give its memory back to the system, or each reload landing
     * on another worker keeps a whole set's worth in an arena. */
    malloc_trim(0);
#endif
}

static void retire_done(uv_work_t *w, int status) {
    struct tables_retire *t = w->data;
    log_info("replaced tables freed (%" PRId64 " ms)%s",
             clock_mono_ms() - t->since_ms, status != 0 ? " (cancelled)" : "");
    free(t);
}

/* Free the replaced set old on a worker: freeing a large set (hundreds of
 * thousands of entries) takes long enough to stall every call the loop
 * serves meanwhile. Inline when no worker can be had. */
static void retire(struct daemon *d, tables *old) {
    struct tables_retire *t = calloc(1, sizeof(*t));
    if (t != NULL) {
        t->old = old;
        t->work.data = t;
        t->since_ms = clock_mono_ms();
        if (uv_queue_work(&d->loop, &t->work, retire_work, retire_done) == 0)
            return;
        free(t);
    }
    tables_free(old);
}

static void reload_start(struct daemon *d, struct tables_reload *r);

static void reload_done(uv_work_t *w, int status) {
    struct tables_reload *r = w->data;
    struct daemon *d = r->d;
    int64_t took = clock_mono_ms() - r->started_ms;
    d->reload = NULL;
    if (status != 0 || r->rc != 0 || r->result == NULL) {
        d->counters.table_reload_failures++;
        log_error("reload tables: %s; the previous tables stay in use",
                  status != 0 ? "cancelled" : detd_strerror(r->rc));
        for (size_t i = 0; i < r->calls.n; i++)
            rpc_fail(r->calls.v[i], RPC_RESOURCE_EXHAUSTED,
                     "reload tables: %s; the previous tables stay in use",
                     status != 0 ? "cancelled" : detd_strerror(r->rc));
    } else {
        /* The swap: lookups from here on see the new set only. Decisions
         * already committed from the old one stand. */
        retire(d, d->tables);
        d->tables = r->result;
        d->counters.table_reloads++;
        log_set(d->tables, "tables reloaded");
        for (size_t i = 0; i < r->calls.n; i++)
            answer_reload(d, r->calls.v[i], took);
    }
    free(r->calls.v);
    if (r->again && !d->draining) {
        struct tables_reload *n = calloc(1, sizeof(*n));
        if (n != NULL) {
            n->calls = r->next;
            reload_start(d, n);
        } else {
            for (size_t i = 0; i < r->next.n; i++)
                rpc_fail(r->next.v[i], RPC_RESOURCE_EXHAUSTED, "out of memory");
            free(r->next.v);
        }
    } else {
        for (size_t i = 0; i < r->next.n; i++)
            rpc_fail(r->next.v[i], RPC_UNAVAILABLE, "daemon is shutting down");
        free(r->next.v);
    }
    free(r);
}

static void reload_start(struct daemon *d, struct tables_reload *r) {
    r->d = d;
    r->work.data = r;
    r->started_ms = clock_mono_ms();
    d->reload = r;
    int rc = uv_queue_work(&d->loop, &r->work, reload_work, reload_done);
    if (rc != 0) {
        /* No worker: load here (the loop blocks for the read). */
        reload_work(&r->work);
        reload_done(&r->work, 0);
    }
}

/* See tableadmin.h. */
void tableadmin_reload(struct daemon *d, rpc_call *call) {
    if (d->reload != NULL) {
        d->reload->again = 1;
        if (call != NULL && calls_add(&d->reload->next, call) != 0)
            rpc_fail(call, RPC_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    struct tables_reload *r = calloc(1, sizeof(*r));
    if (r == NULL || (call != NULL && calls_add(&r->calls, call) != 0)) {
        free(r);
        if (call != NULL)
            rpc_fail(call, RPC_RESOURCE_EXHAUSTED, "out of memory");
        log_error("reload tables: out of memory");
        return;
    }
    log_info("reloading tables from %zu director%s and %s", d->cfg->n_tables,
             d->cfg->n_tables == 1 ? "y" : "ies", DETD_TABLES_DIR);
    reload_start(d, r);
}

/* See tableadmin.h. */
void tableadmin_reload_rpc(struct daemon *d, struct rpc_event *ev) {
    protobuf_c_message_free_unpacked(ev->msg, NULL);
    if (d->draining) {
        rpc_fail(ev->call, RPC_UNAVAILABLE, "daemon is shutting down");
        return;
    }
    tableadmin_reload(d, ev->call);
}

/* See tableadmin.h. */
int tableadmin_status_fill(struct daemon *d, struct tableadmin_status *ret) {
    return describe(d->tables, ret);
}

/* See tableadmin.h. */
void tableadmin_status_clear(struct tableadmin_status *s) {
    free(s->files);
    free(s->filep);
    free(s->errors);
    free(s->errorp);
    memset(s, 0, sizeof(*s));
}

/* See tableadmin.h. */
void tableadmin_free(struct daemon *d) {
    tables_free(d->tables);
    d->tables = NULL;
}

/* ---- Explain --------------------------------------------------------- */

struct find_ctx {
    const char *arch;
    const char *key;
    struct decision row;
    int found;
    int oom;
    size_t matches;
};

/* A lock's decision of this kernel and key made for another arch or
 * other candidates (why a lock does not answer an ask): the first, as a
 * note (heap). */
struct lock_miss_ctx {
    const char *arch, *key, *fp;
    char *note;
};

static int lock_miss_cb(void *ctx, const struct decision *r) {
    struct lock_miss_ctx *m = ctx;
    if (r->source != DETD_SOURCE_IMPORT || strncmp(r->table_file, "lock:", 5) ||
        strcmp(r->key, m->key) != 0)
        return 0;
    int rc =
        strcmp(r->arch, m->arch) != 0
            ? asprintf(&m->note,
                       "the lock '%s' decided this kernel and key for arch "
                       "%s, not %s: it does not answer this ask (a miss)",
                       r->table_file + 5, r->arch, m->arch)
            : asprintf(&m->note,
                       "the lock '%s' decided this kernel and key for other "
                       "candidates (fingerprint %.12s..., these %.12s...): it "
                       "does not answer this ask (a miss)",
                       r->table_file + 5, r->candidates_fp, m->fp);
    if (rc < 0)
        m->note = NULL;
    return 1;
}

static int find_cb(void *ctx, const struct decision *r) {
    struct find_ctx *f = ctx;
    if (strcmp(r->arch, f->arch) != 0 || strcmp(r->key, f->key) != 0)
        return 0;
    f->matches++;
    if (f->found)
        return 0;
    /* Borrowed for the callback only: copy what the answer needs. */
    if (decision_copy(r, 1, &f->row) != 0) {
        f->oom = 1;
        return 1;
    }
    f->found = 1;
    return 0;
}

static int explain_check(rpc_call *call, const char *what, const char *s,
                         size_t max, int required) {
    size_t n = s != NULL ? strlen(s) : 0;
    if (required && n == 0) {
        rpc_fail(call, RPC_INVALID_ARGUMENT, "%s is required", what);
        return -1;
    }
    if (n > max) {
        rpc_fail(call, RPC_INVALID_ARGUMENT,
                 "%s is %zu bytes, over the limit of %zu bytes", what, n, max);
        return -1;
    }
    return 0;
}

/* See tableadmin.h. */
void tableadmin_explain(struct daemon *d, struct rpc_event *ev) {
    Detd__V1__ExplainRequest *req = (Detd__V1__ExplainRequest *)ev->msg;
    Detd__V1__ExplainResponse resp = DETD__V1__EXPLAIN_RESPONSE__INIT;
    struct find_ctx fc = {0};
    struct convert_decision cd;
    int have_cd = 0;
    Detd__V1__TableEntryInfo infos[TABLES_MAX_CONSIDERED];
    Detd__V1__TableEntryInfo *infop[TABLES_MAX_CONSIDERED];
    char *reasons[TABLES_MAX_CONSIDERED] = {0};
    char *notes[4] = {0};
    size_t nnotes = 0;
    struct tables_result tr;
    struct imports_result ir = {0};
    Detd__V1__TableEntryInfo iinfos[IMPORTS_MAX_CONSIDERED];
    Detd__V1__TableEntryInfo *iinfop[IMPORTS_MAX_CONSIDERED];

    if (explain_check(ev->call, "namespace", req->namespace_,
                      DAEMON_MAX_NAMESPACE, 0) ||
        explain_check(ev->call, "arch", req->arch, DAEMON_MAX_ARCH, 1) ||
        explain_check(ev->call, "kernel", req->kernel, DAEMON_MAX_KERNEL, 1) ||
        explain_check(ev->call, "key", req->key, DETD_MAX_KEY_BYTES, 0) ||
        explain_check(ev->call, "table_key", req->table_key, DETD_MAX_KEY_BYTES,
                      0))
        goto out;
    if (validate_candidates(ev->call, "candidates",
                            (const char *const *)req->candidates,
                            req->n_candidates) != 0)
        goto out;
    const char *ns = req->namespace_ != NULL && req->namespace_[0] != '\0'
                         ? req->namespace_
                         : d->cfg->ns;
    const char *key = req->key != NULL ? req->key : "";
    int checked = req->n_candidates > 0;
    resp.api_version = DETD_API_VERSION;
    resp.candidates_checked = checked;

    /* 1. An existing decision: by id with candidates, else any decision
     * of this kernel, arch and key (whatever its candidate set). */
    if (checked) {
        char fp[KEYID_HEX_LEN + 1], id[KEYID_HEX_LEN + 1];
        if (keyid_candidates_fp((const char *const *)req->candidates,
                                req->n_candidates, fp) != 0) {
            rpc_fail(ev->call, RPC_RESOURCE_EXHAUSTED, "out of memory");
            goto out;
        }
        keyid_decision_id(ns, req->arch, req->kernel, key, fp, id);
        int rc = store_get_decision(d->store, id, &fc.row);
        if (rc == 0) {
            fc.found = 1;
            fc.matches = 1;
        } else if (rc != DETD_ENOTFOUND) {
            storeerr_reply(d, ev->call, rc);
            goto out;
        } else {
            struct lock_miss_ctx lm = {req->arch, key, fp, NULL};
            if ((rc = store_each_decision(d->store, ns, req->kernel, 0,
                                          lock_miss_cb, &lm)) != 0) {
                storeerr_reply(d, ev->call, rc);
                goto out;
            }
            if (lm.note != NULL)
                notes[nnotes++] = lm.note;
            /* A lock entry of this very key left out for its provenance. */
            char *file = NULL, *why = NULL;
            rc = store_get_lock_skip(d->store, ns, id, &file, &why);
            if (rc == 0 &&
                asprintf(&notes[nnotes++],
                         "the lock '%s' holds this key but was not imported "
                         "for it: %s: a miss (timed by the job)",
                         strncmp(file, "lock:", 5) == 0 ? file + 5 : file,
                         why) < 0)
                notes[--nnotes] = NULL;
            free(file);
            free(why);
            if (rc != 0 && rc != DETD_ENOTFOUND) {
                storeerr_reply(d, ev->call, rc);
                goto out;
            }
        }
    } else {
        fc.arch = req->arch;
        fc.key = key;
        int rc =
            store_each_decision(d->store, ns, req->kernel, 0, find_cb, &fc);
        if (rc != 0) {
            storeerr_reply(d, ev->call, rc);
            goto out;
        }
        if (fc.oom) {
            rpc_fail(ev->call, RPC_RESOURCE_EXHAUSTED, "out of memory");
            goto out;
        }
        if (fc.matches > 1 &&
            asprintf(&notes[nnotes++],
                     "%zu decisions exist for this kernel, arch and key (with "
                     "different candidate sets); the first is shown: pass "
                     "--candidate to pick one",
                     fc.matches) < 0)
            notes[--nnotes] = NULL;
    }

    /* 2. Imported entries of the namespace, before the tables. */
    if (imports_lookup(d, ns, req->arch, req->kernel, key, req->table_key,
                       checked ? (const char *const *)req->candidates : NULL,
                       req->n_candidates, &ir) != 0) {
        rpc_fail(ev->call, RPC_INTERNAL, "store: %s", store_errmsg(d->store));
        goto out;
    }
    for (size_t i = 0; i < ir.n; i++) {
        Detd__V1__TableEntryInfo *x = &iinfos[i];
        detd__v1__table_entry_info__init(x);
        x->file = ir.e[i].file;
        x->kernel = ir.e[i].kernel;
        x->key = ir.e[i].key;
        x->config = ir.e[i].config;
        x->stale = ir.e[i].stale != 0;
        x->reason = x->stale   ? "stale: its config is not among the candidates"
                    : !checked ? "usable if its config is among the live "
                                 "candidates (no candidates given)"
                               : "";
        iinfop[i] = x;
    }
    resp.imports_considered = iinfop;
    resp.n_imports_considered = ir.n;

    /* 3. The tables, whatever the decision (what they would say). */
    tables_lookup(d->tables, req->arch, req->kernel, key, req->table_key,
                  checked ? (const char *const *)req->candidates : NULL,
                  req->n_candidates, &tr);
    resp.table_files = (uint32_t)tr.n_files;
    for (size_t i = 0; i < tr.n_considered; i++) {
        const struct tables_considered *c = &tr.considered[i];
        Detd__V1__TableEntryInfo *x = &infos[i];
        detd__v1__table_entry_info__init(x);
        x->file = (char *)c->file;
        x->kernel = (char *)c->kernel;
        x->key = (char *)c->key;
        x->config = (char *)c->config;
        x->stale = c->stale != 0;
        int is_answer = tr.hit && i + 1 == tr.n_considered;
        if (c->stale) {
            if (asprintf(&reasons[i],
                         "stale: its config %s is not among the %zu "
                         "candidates",
                         c->config, req->n_candidates) < 0)
                reasons[i] = NULL;
        } else if (!checked) {
            if (asprintf(&reasons[i],
                         "usable if %s is among the live candidates (no "
                         "candidates given)",
                         c->config) < 0)
                reasons[i] = NULL;
        } else if (is_answer && fc.found) {
            if (asprintf(&reasons[i],
                         "not used: the existing decision comes first") < 0)
                reasons[i] = NULL;
        }
        x->reason = reasons[i] != NULL ? reasons[i] : "";
        infop[i] = x;
    }
    resp.considered = infop;
    resp.n_considered = tr.n_considered;
    if (tr.n_files == 0) {
        if (asprintf(&notes[nnotes++], "no table file for arch %s is loaded",
                     req->arch) < 0)
            notes[--nnotes] = NULL;
    } else if (!tr.kernel_found) {
        if (asprintf(&notes[nnotes++],
                     "kernel absent: no entry for %s (or its shorter names) "
                     "in %zu %s table file%s",
                     req->kernel, tr.n_files, req->arch,
                     tr.n_files == 1 ? "" : "s") < 0)
            notes[--nnotes] = NULL;
    } else if (tr.n_considered == 0) {
        if (asprintf(&notes[nnotes++],
                     "key absent: the kernel is in the tables but no entry "
                     "has key %s%s%s or \"*\"",
                     key, req->table_key && req->table_key[0] ? ", " : "",
                     req->table_key ? req->table_key : "") < 0)
            notes[--nnotes] = NULL;
    }
    resp.notes = notes;
    resp.n_notes = nnotes;

    if (fc.found) {
        resp.answer = DETD__V1__EXPLAIN_ANSWER__EXPLAIN_DECISION;
        convert_decision_fill(&fc.row, &cd, 0);
        have_cd = 1;
        resp.decision = &cd.msg;
    } else if (ir.hit) {
        resp.answer = DETD__V1__EXPLAIN_ANSWER__EXPLAIN_IMPORT;
        resp.import_entry = iinfop[ir.n - 1];
    } else if (tr.hit) {
        resp.answer = DETD__V1__EXPLAIN_ANSWER__EXPLAIN_TABLE;
        resp.table_entry = infop[tr.n_considered - 1];
    } else {
        resp.answer = DETD__V1__EXPLAIN_ANSWER__EXPLAIN_TIMED;
    }
    rpc_reply(ev->call, &resp.base);
out:
    if (have_cd)
        convert_decision_clear(&cd);
    if (fc.found)
        decision_clear(&fc.row);
    for (size_t i = 0; i < TABLES_MAX_CONSIDERED; i++)
        free(reasons[i]);
    for (size_t i = 0; i < nnotes; i++)
        free(notes[i]);
    imports_result_clear(&ir);
    protobuf_c_message_free_unpacked(ev->msg, NULL);
}
