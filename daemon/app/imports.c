/*
 * imports: imported table entries (see imports.h).
 */
#define _GNU_SOURCE
#include "app/imports.h"
#include "clock.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "app/storeerr.h"
#include "core/keyid.h"
#include "detd/client.h"
#include "detd/error.h"
#include "tablefmt.h"

void imports_changed(struct daemon *d) {
    d->n_imports_known = 0;
}

/* 1 when the store holds imported entries (any namespace). */
static int imports_any(struct daemon *d) {
    if (!d->n_imports_known) {
        uint64_t n = 0;
        if (store_count_imports(d->store, NULL, &n) != 0)
            return 1; /* look, and let the lookup report the error */
        d->n_imports = n;
        d->n_imports_known = 1;
    }
    return d->n_imports > 0;
}

/* The rows a lookup fetched (heap copies). */
struct found {
    struct imports_entry rows[IMPORTS_MAX_CONSIDERED];
    size_t n;
    int oom;
};

static int found_cb(void *ctx, const struct store_import *v) {
    struct found *f = ctx;
    if (f->n == IMPORTS_MAX_CONSIDERED)
        return 1;
    struct imports_entry *e = &f->rows[f->n];
    e->kernel = strdup(v->kernel);
    e->key = strdup(v->key);
    e->config = strdup(v->config);
    e->file = strdup(v->file);
    f->n++;
    if (e->kernel == NULL || e->key == NULL || e->config == NULL ||
        e->file == NULL) {
        f->oom = 1;
        return 1;
    }
    return 0;
}

static void entry_clear(struct imports_entry *e) {
    free(e->kernel);
    free(e->key);
    free(e->config);
    free(e->file);
    memset(e, 0, sizeof(*e));
}

void imports_result_clear(struct imports_result *r) {
    for (size_t i = 0; i < r->n; i++)
        entry_clear(&r->e[i]);
    r->n = 0;
}

int imports_lookup(struct daemon *d, const char *ns, const char *arch,
                   const char *kernel_id, const char *key,
                   const char *table_key, const char *const *cands,
                   size_t n_cands, struct imports_result *ret) {
    memset(ret, 0, sizeof(*ret));
    if (!imports_any(d))
        return 0;
    char *names[4] = {0};
    size_t nn = tables_kernel_names(kernel_id, names);
    if (nn == 0)
        return DETD_ENOMEM;
    const char *keys[3];
    size_t nk = 0;
    if (key != NULL && key[0] != '\0')
        keys[nk++] = key;
    if (table_key != NULL && table_key[0] != '\0' &&
        (nk == 0 || strcmp(table_key, key) != 0))
        keys[nk++] = table_key;
    keys[nk++] = "*";
    struct found f = {0};
    int rc = store_find_imports(d->store, ns, arch, (const char *const *)names,
                                nn, keys, nk, found_cb, &f);
    if (rc == 0 && f.oom)
        rc = DETD_ENOMEM;
    /* In lookup order: names first, then keys. */
    for (size_t ni = 0; rc == 0 && ni < nn && !ret->hit; ni++) {
        for (size_t ki = 0; ki < nk && !ret->hit; ki++) {
            for (size_t i = 0; i < f.n; i++) {
                struct imports_entry *e = &f.rows[i];
                if (e->kernel == NULL || strcmp(e->kernel, names[ni]) != 0 ||
                    strcmp(e->key, keys[ki]) != 0)
                    continue;
                e->stale = !keyid_has_candidate(e->config, cands, n_cands);
                ret->n_stale += e->stale != 0;
                ret->e[ret->n++] = *e; /* moved */
                memset(e, 0, sizeof(*e));
                if (!ret->e[ret->n - 1].stale)
                    ret->hit = 1;
                break;
            }
        }
    }
    for (size_t i = 0; i < f.n; i++)
        entry_clear(&f.rows[i]);
    for (size_t i = 0; i < nn; i++)
        free(names[i]);
    if (rc != 0)
        imports_result_clear(ret);
    return rc;
}

int imports_find(struct daemon *d, rpc_call *call, const char *ns,
                 const Detd__V1__DecisionKey *k, struct imports_result *ret) {
    int rc = imports_lookup(d, ns, k->arch, k->kernel, k->key, k->table_key,
                            (const char *const *)k->candidates, k->n_candidates,
                            ret);
    if (rc == DETD_ENOMEM) {
        rpc_fail(call, RPC_INTERNAL, "store: out of memory");
        return -1;
    }
    if (rc != 0) {
        storeerr_reply(d, call, rc);
        return -1;
    }
    if (!d->n_imports_known || d->n_imports == 0) {
        imports_result_clear(ret);
        return 0; /* nothing imported: not a step of its own */
    }
    if (!ret->hit) {
        d->counters.import_misses++;
        if (ret->n_stale > 0) {
            const struct imports_entry *e = &ret->e[0];
            d->counters.import_stale++;
            log_debug("imported entry %s \"%s\" \"%s\" -> %s is stale for %s "
                      "key %s: not among the %zu candidates",
                      e->file, e->kernel, e->key, e->config, k->kernel, k->key,
                      k->n_candidates);
        }
        imports_result_clear(ret);
        return 0;
    }
    d->counters.import_hits++;
    return 1;
}

/* ---- ImportTable ---- */

/* s cut to fit buf, with bytes outside printable ASCII as '?': a value
 * from the request named in an error (it may not even be UTF-8). */
static const char *shown(const char *s, char *buf, size_t size) {
    size_t i = 0;
    for (; s != NULL && s[i] != '\0' && i + 1 < size; i++)
        buf[i] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
    buf[i] = '\0';
    return buf;
}

/* A string field of entry i: 0, or -1 after answering the call. */
static int check_field(rpc_call *call, size_t i, const char *what,
                       const char *s, size_t max) {
    size_t n = s != NULL ? strlen(s) : 0;
    if (n == 0 || n > max) {
        rpc_fail(call, RPC_INVALID_ARGUMENT,
                 "entries[%zu].%s is %zu bytes: must be 1 to %zu", i, what, n,
                 max);
        return -1;
    }
    return 0;
}

/* The config must be one a table entry renders to, exactly. */
static int check_config(rpc_call *call, size_t i,
                        const Detd__V1__ImportEntry *e) {
    json_t *entry = NULL;
    char *msg = NULL, *back = NULL;
    char k[128], y[128], c[256], m[256];
    int rc = -1;
    if (tablefmt_entry_from_config(e->config, &entry, &msg) != 0 ||
        tablefmt_render_entry(entry, "", &back, &msg) != 0) {
        rpc_fail(call, RPC_INVALID_ARGUMENT,
                 "entries[%zu] (kernel \"%s\" key \"%s\"): config '%s': %s", i,
                 shown(e->kernel, k, sizeof k), shown(e->key, y, sizeof y),
                 shown(e->config, c, sizeof c),
                 msg != NULL ? shown(msg, m, sizeof m) : "out of memory");
        goto out;
    }
    if (strcmp(back, e->config) != 0) {
        rpc_fail(call, RPC_INVALID_ARGUMENT,
                 "entries[%zu] (kernel \"%s\" key \"%s\"): config '%s' is "
                 "not canonical (it renders as '%s')",
                 i, shown(e->kernel, k, sizeof k), shown(e->key, y, sizeof y),
                 shown(e->config, c, sizeof c), shown(back, m, sizeof m));
        goto out;
    }
    rc = 0;
out:
    json_decref(entry);
    free(msg);
    free(back);
    return rc;
}

void imports_on_import(struct daemon *d, struct rpc_event *ev) {
    Detd__V1__ImportTableRequest *req = (Detd__V1__ImportTableRequest *)ev->msg;
    Detd__V1__ImportTableResponse resp = DETD__V1__IMPORT_TABLE_RESPONSE__INIT;
    struct store_import *rows = NULL;
    enum store_import_result *res = NULL;
    char **old = NULL;
    Detd__V1__ImportReplacement *rp = NULL, **rpp = NULL;
    size_t n = req->n_entries;
    const char *ns =
        req->namespace_ && req->namespace_[0] ? req->namespace_ : d->cfg->ns;
    if (req->namespace_ != NULL &&
        strlen(req->namespace_) > DAEMON_MAX_NAMESPACE) {
        rpc_fail(ev->call, RPC_INVALID_ARGUMENT,
                 "namespace is %zu bytes, over the limit of %d",
                 strlen(req->namespace_), DAEMON_MAX_NAMESPACE);
        goto out;
    }
    if (req->file == NULL || req->file[0] == '\0' ||
        strlen(req->file) > TABLEFMT_MAX_NAME) {
        rpc_fail(ev->call, RPC_INVALID_ARGUMENT,
                 "file must be 1 to %d bytes (the table's file name)",
                 TABLEFMT_MAX_NAME);
        goto out;
    }
    if (n == 0 || n > IMPORTS_MAX_BATCH) {
        rpc_fail(ev->call, RPC_INVALID_ARGUMENT,
                 "entries: %zu in one request; must be 1 to %d", n,
                 IMPORTS_MAX_BATCH);
        goto out;
    }
    rows = calloc(n, sizeof(*rows));
    res = calloc(n, sizeof(*res));
    old = calloc(n, sizeof(*old));
    if (rows == NULL || res == NULL || old == NULL) {
        rpc_fail(ev->call, RPC_RESOURCE_EXHAUSTED, "out of memory");
        goto out;
    }
    int64_t now = clock_unix_ms();
    for (size_t i = 0; i < n; i++) {
        const Detd__V1__ImportEntry *e = req->entries[i];
        if (!tablefmt_arch_valid(e->arch)) {
            char a[64];
            rpc_fail(ev->call, RPC_INVALID_ARGUMENT,
                     "entries[%zu].arch '%s' is not an architecture name "
                     "(sm<digits>[letter], e.g. sm90)",
                     i, shown(e->arch, a, sizeof a));
            goto out;
        }
        if (check_field(ev->call, i, "kernel", e->kernel, DAEMON_MAX_KERNEL) ||
            check_field(ev->call, i, "key", e->key, DETD_MAX_KEY_BYTES) ||
            check_field(ev->call, i, "config", e->config, DAEMON_MAX_CONFIG) ||
            check_config(ev->call, i, e))
            goto out;
        if (e->table_key != NULL && e->table_key[0] != '\0' &&
            strcmp(e->table_key, e->key) != 0) {
            rpc_fail(ev->call, RPC_INVALID_ARGUMENT,
                     "entries[%zu].table_key differs from its key: an "
                     "imported entry has one key, as written in the table",
                     i);
            goto out;
        }
        rows[i] = (struct store_import){ns,
                                        e->arch,
                                        e->kernel,
                                        e->key,
                                        e->table_key ? e->table_key : "",
                                        e->config,
                                        req->file,
                                        now};
    }
    int rc = store_put_imports(d->store, rows, n, res, old);
    if (rc != 0) {
        storeerr_reply(d, ev->call, rc);
        goto out;
    }
    imports_changed(d);
    d->counters.import_calls++;
    size_t nrep = 0;
    for (size_t i = 0; i < n; i++) {
        if (res[i] == STORE_IMPORT_ADDED)
            resp.added++;
        else if (res[i] == STORE_IMPORT_UNCHANGED)
            resp.unchanged++;
        else
            resp.replaced++;
    }
    rp = calloc(resp.replaced ? resp.replaced : 1, sizeof(*rp));
    rpp = calloc(resp.replaced ? resp.replaced : 1, sizeof(*rpp));
    for (size_t i = 0; rp != NULL && rpp != NULL && i < n; i++) {
        if (res[i] != STORE_IMPORT_REPLACED || old[i] == NULL)
            continue;
        char *tab = strchr(old[i], '\t');
        if (tab != NULL)
            *tab = '\0';
        log_info("import into namespace '%s': %s %s key %s: %s (from %s) "
                 "replaced by %s (from %s)",
                 ns, rows[i].arch, rows[i].kernel, rows[i].key, old[i],
                 tab != NULL ? tab + 1 : "?", rows[i].config, req->file);
        if (nrep == IMPORTS_MAX_REPLACEMENTS)
            continue;
        Detd__V1__ImportReplacement *x = &rp[nrep];
        detd__v1__import_replacement__init(x);
        x->arch = (char *)rows[i].arch;
        x->kernel = (char *)rows[i].kernel;
        x->key = (char *)rows[i].key;
        x->old_config = old[i];
        x->old_file = tab != NULL ? tab + 1 : "";
        x->config = (char *)rows[i].config;
        rpp[nrep++] = x;
    }
    resp.replacements = rpp;
    resp.n_replacements = nrep;
    uint64_t total = 0;
    store_count_imports(d->store, ns, &total);
    resp.total = total;
    resp.api_version = DETD_API_VERSION;
    log_info("imported %zu entries of %s into namespace '%s': %" PRIu64
             " added, %" PRIu64 " replaced, %" PRIu64 " unchanged",
             n, req->file, ns, resp.added, resp.replaced, resp.unchanged);
    rpc_reply(ev->call, &resp.base);
out:
    for (size_t i = 0; old != NULL && i < n; i++)
        free(old[i]);
    free(old);
    free(res);
    free(rows);
    free(rp);
    free(rpp);
    protobuf_c_message_free_unpacked(ev->msg, NULL);
}
