/*
 * detctl_table: `detctl table export` (see detctl_table.h).
 */
#define _GNU_SOURCE
#include "detctl_table.h"

#include "detctl_exit.h"

#include <errno.h>
#include <math.h>
#include <regex.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "detd.pb-c.h"
#include "detd/client.h"
#include "tablefmt.h"
#include "wire.h"

/* The table format's cap on entries per file, applied to rows fetched. */
#define TABLE_MAX_ROWS 1000000

int detctl_table_entry_from_config(const char *config, json_t **ret, char *err,
                                   size_t errlen) {
    char *msg = NULL;
    int rc = tablefmt_entry_from_config(config, ret, &msg);
    if (rc != 0)
        snprintf(err, errlen, "%s", msg != NULL ? msg : "out of memory");
    free(msg);
    return rc != 0 ? -1 : 0;
}

/* ---- building ---- */

int detctl_table_tally_add(json_t *counts, const json_t *entry,
                           json_int_t weight) {
    char *ser = json_dumps(entry, JSON_COMPACT | JSON_SORT_KEYS);
    if (ser == NULL)
        return -1;
    json_int_t c = json_integer_value(json_object_get(counts, ser)) + weight;
    int rc = json_object_set_new(counts, ser, json_integer(c));
    free(ser);
    return rc;
}

const char *detctl_table_tally_winner(json_t *counts, json_int_t *ret_n,
                                      json_int_t *ret_total) {
    const char *win = NULL, *ser;
    json_int_t win_n = 0, total = 0;
    json_t *cv;
    json_object_foreach(counts, ser, cv) {
        json_int_t c = json_integer_value(cv);
        total += c;
        if (win == NULL || c > win_n || (c == win_n && strcmp(ser, win) < 0)) {
            win = ser;
            win_n = c;
        }
    }
    if (ret_n != NULL)
        *ret_n = win_n;
    if (ret_total != NULL)
        *ret_total = total;
    return win;
}

/* The kernel name without its code-version guard: "module:qualname". */
static char *table_kernel_name(const char *kernel) {
    const char *at = strrchr(kernel, '@');
    return strndup(kernel, at != NULL ? (size_t)(at - kernel) : strlen(kernel));
}

static int table_strcmp_p(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

const char **detctl_table_sorted_keys(json_t *o, size_t *ret_n) {
    size_t n = json_object_size(o), i = 0;
    const char **keys = calloc(n ? n : 1, sizeof(*keys));
    if (keys == NULL)
        return NULL;
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v) keys[i++] = k;
    qsort(keys, n, sizeof(*keys), table_strcmp_p);
    *ret_n = n;
    return keys;
}

/* Add row index i to obj[name] (an array), creating it. */
static int table_push(json_t *obj, const char *name, size_t i) {
    json_t *a = json_object_get(obj, name);
    if (a == NULL) {
        a = json_array();
        if (a == NULL || json_object_set_new(obj, name, a) != 0)
            return -1;
    }
    return json_array_append_new(a, json_integer((json_int_t)i));
}

static const struct detctl_table_row *
table_row(const struct detctl_table_row *rows, json_t *idx) {
    return &rows[json_integer_value(idx)];
}

/* The code version to use among group g's kernels: newest row wins,
 * then the larger id. Warns naming the versions left out. */
static const char *table_pick_version(const struct detctl_table_row *rows,
                                      json_t *g, const char *kname,
                                      const char *key, FILE *warn,
                                      struct detctl_table_stats *st) {
    const char *best = NULL;
    int64_t best_at = INT64_MIN;
    size_t n = 0;
    const char **ks = detctl_table_sorted_keys(g, &n);
    if (ks == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        json_t *a = json_object_get(g, ks[i]), *x;
        size_t j;
        json_array_foreach(a, j, x) {
            int64_t at = table_row(rows, x)->at_ms;
            if (at > best_at || (at == best_at && strcmp(ks[i], best) > 0)) {
                best_at = at;
                best = ks[i];
            }
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (ks[i] == best)
            continue;
        st->superseded += json_array_size(json_object_get(g, ks[i]));
        fprintf(warn,
                "detctl: warning: %s key %s: code versions %s and %s both "
                "have rows; using %s (the newest)\n",
                kname, key, ks[i], best, best);
    }
    free(ks);
    return best;
}

int detctl_table_build(const char *arch, const char *source, int votes,
                       const struct detctl_table_row *rows, size_t n,
                       FILE *warn, json_t **ret_doc,
                       struct detctl_table_stats *ret_stats) {
    struct detctl_table_stats st = {0};
    json_t *groups = json_object(); /* kname -> key -> kernel -> [rows] */
    json_t *kernels = json_object(), *prov = json_object();
    json_t *tritons = json_object(), *doc = NULL;
    int rc = -1;
    if (groups == NULL || kernels == NULL || prov == NULL || tritons == NULL)
        goto out;
    for (size_t i = 0; i < n; i++) {
        char *kname = table_kernel_name(rows[i].kernel);
        if (kname == NULL)
            goto out;
        json_t *byk = json_object_get(groups, kname);
        if (byk == NULL) {
            byk = json_object();
            json_object_set_new(groups, kname, byk);
        }
        free(kname);
        if (byk == NULL)
            goto out;
        json_t *g = json_object_get(byk, rows[i].key);
        if (g == NULL) {
            g = json_object();
            if (g == NULL || json_object_set_new(byk, rows[i].key, g) != 0)
                goto out;
        }
        if (table_push(g, rows[i].kernel, i) != 0)
            goto out;
    }
    size_t nk = 0;
    const char **knames = detctl_table_sorted_keys(groups, &nk);
    if (knames == NULL)
        goto out;
    for (size_t a = 0; a < nk; a++) {
        json_t *byk = json_object_get(groups, knames[a]);
        size_t nkeys = 0;
        const char **keys = detctl_table_sorted_keys(byk, &nkeys);
        if (keys == NULL) {
            free(knames);
            goto out;
        }
        for (size_t b = 0; b < nkeys; b++) {
            json_t *g = json_object_get(byk, keys[b]);
            const char *ver =
                table_pick_version(rows, g, knames[a], keys[b], warn, &st);
            json_t *idxs = json_object_get(g, ver), *x;
            json_t *counts = json_object();
            json_t *hosts = json_object(), *devices = json_object();
            size_t j, valid = 0;
            json_int_t win_n = 0;
            char err[256];
            /* Decisions: the newest row of this version (one per key and
             * candidate set); votes: every row. */
            const struct detctl_table_row *newest = NULL;
            json_array_foreach(idxs, j, x) {
                const struct detctl_table_row *r = table_row(rows, x);
                if (!votes) {
                    if (newest == NULL || r->at_ms > newest->at_ms ||
                        (r->at_ms == newest->at_ms &&
                         strcmp(r->config, newest->config) > 0))
                        newest = r;
                    continue;
                }
            }
            json_array_foreach(idxs, j, x) {
                const struct detctl_table_row *r = table_row(rows, x);
                if (!votes && r != newest) {
                    if (strcmp(r->config, newest->config) != 0)
                        fprintf(warn,
                                "detctl: warning: %s key %s: decisions %s "
                                "(%s) and %s (%s) for other candidate sets; "
                                "using the newest, %s\n",
                                knames[a], keys[b], r->label, r->config,
                                newest->label, newest->config, newest->label);
                    st.superseded++;
                    continue;
                }
                json_t *e = NULL;
                if (detctl_table_entry_from_config(r->config, &e, err,
                                                   sizeof err) != 0) {
                    st.skipped++;
                    fprintf(warn,
                            "detctl: skipped %s (%s key %s): config '%s': "
                            "%s\n",
                            r->label, r->kernel, r->key, r->config, err);
                    continue;
                }
                int added = detctl_table_tally_add(counts, e, 1);
                json_decref(e);
                if (added != 0)
                    continue;
                json_object_set_new(hosts, r->host ? r->host : "", json_true());
                if (r->device != NULL && r->device[0] != '\0')
                    json_object_set_new(devices, r->device, json_true());
                if (r->triton_version != NULL && r->triton_version[0] != '\0')
                    json_object_set_new(tritons, r->triton_version,
                                        json_true());
                valid++;
            }
            const char *win = detctl_table_tally_winner(counts, &win_n, NULL);
            json_t *won = win != NULL ? json_loads(win, 0, NULL) : NULL;
            if (won != NULL) {
                json_t *kt = json_object_get(kernels, knames[a]);
                if (kt == NULL) {
                    kt = json_object();
                    json_object_set_new(kernels, knames[a], kt);
                }
                json_object_set_new(kt, keys[b], won);
                st.entries++;
                if (votes) {
                    json_t *pt = json_object_get(prov, knames[a]);
                    if (pt == NULL) {
                        pt = json_object();
                        json_object_set_new(prov, knames[a], pt);
                    }
                    json_t *devs = json_array();
                    size_t nd = 0;
                    const char **ds = detctl_table_sorted_keys(devices, &nd);
                    for (size_t d = 0; ds != NULL && d < nd; d++)
                        json_array_append_new(devs, json_string(ds[d]));
                    free(ds);
                    json_object_set_new(
                        pt, keys[b],
                        json_pack("{s:I, s:I, s:o, s:I}", "votes",
                                  (json_int_t)valid, "agree", win_n, "devices",
                                  devs, "hosts",
                                  (json_int_t)json_object_size(hosts)));
                    if ((size_t)win_n < valid)
                        st.disagreeing++;
                }
            }
            json_decref(counts);
            json_decref(hosts);
            json_decref(devices);
        }
        free(keys);
    }
    free(knames);
    st.kernels = json_object_size(kernels);
    doc = json_pack("{s:s, s:s, s:s, s:O}", "format", "detd-table-1", "arch",
                    arch, "source", source, "kernels", kernels);
    if (doc == NULL)
        goto out;
    if (votes)
        json_object_set(doc, "provenance", prov);
    if (json_object_size(tritons) == 1) {
        const char *tv;
        json_t *tx;
        json_object_foreach(tritons, tv, tx)
            json_object_set_new(doc, "triton", json_string(tv));
    } else if (json_object_size(tritons) > 1) {
        fprintf(warn,
                "detctl: warning: the rows were recorded with %zu "
                "Triton versions; no \"triton\" member written\n",
                json_object_size(tritons));
    }
    *ret_doc = doc;
    *ret_stats = st;
    rc = 0;
out:
    json_decref(groups);
    json_decref(kernels);
    json_decref(prov);
    json_decref(tritons);
    return rc;
}

/* ---- fetching and writing ---- */

struct table_fetch {
    ProtobufCMessage **resps;
    size_t nresps, capresps;
    struct detctl_table_row *rows;
    char **labels;
    size_t n, cap;
};

static int table_keep(struct table_fetch *f, ProtobufCMessage *m) {
    if (f->nresps == f->capresps) {
        size_t cap = f->capresps ? f->capresps * 2 : 16;
        ProtobufCMessage **p = realloc(f->resps, cap * sizeof(*p));
        if (p == NULL)
            return -1;
        f->resps = p;
        f->capresps = cap;
    }
    f->resps[f->nresps++] = m;
    return 0;
}

static struct detctl_table_row *table_add_row(struct table_fetch *f,
                                              char *label) {
    if (label == NULL)
        return NULL;
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 256;
        struct detctl_table_row *r = realloc(f->rows, cap * sizeof(*r));
        char **l = r != NULL ? realloc(f->labels, cap * sizeof(*l)) : NULL;
        if (r != NULL)
            f->rows = r;
        if (l == NULL) {
            free(label);
            return NULL;
        }
        f->labels = l;
        f->cap = cap;
    }
    f->labels[f->n] = label;
    struct detctl_table_row *r = &f->rows[f->n++];
    memset(r, 0, sizeof(*r));
    r->label = label;
    return r;
}

static void table_fetch_free(struct table_fetch *f) {
    for (size_t i = 0; i < f->nresps; i++)
        protobuf_c_message_free_unpacked(f->resps[i], NULL);
    for (size_t i = 0; i < f->n; i++)
        free(f->labels[i]);
    free(f->resps);
    free(f->rows);
    free(f->labels);
}

static int table_call_fail(const char *what, int rc) {
    const char *detail = wire_last_error();
    fprintf(stderr, "detctl: table export: %s: %s\n", what,
            detail[0] ? detail : detd_strerror(rc));
    return detctl_exit_for_rc(rc);
}

static int table_fetch_decisions(const struct detctl_table_opts *o,
                                 struct wire_channel *ch,
                                 struct table_fetch *f) {
    char after[80] = "";
    for (;;) {
        Detd__V1__ExportDecisionsRequest req =
            DETD__V1__EXPORT_DECISIONS_REQUEST__INIT;
        Detd__V1__ExportDecisionsResponse *r = NULL;
        req.api_version = DETD_API_VERSION;
        req.namespace_ = (char *)(o->ns ? o->ns : "");
        req.arch = (char *)o->arch;
        req.kernel = (char *)(o->kernel ? o->kernel : "");
        req.after_id = after;
        int rc = wire_unary(ch, WIRE_METHOD_EXPORT_DECISIONS, &req.base,
                            &detd__v1__export_decisions_response__descriptor,
                            o->timeout_ms, (ProtobufCMessage **)&r);
        if (rc < 0)
            return table_call_fail("ExportDecisions", rc);
        if (table_keep(f, &r->base) != 0) {
            protobuf_c_message_free_unpacked(&r->base, NULL);
            goto oom;
        }
        for (size_t i = 0; i < r->n_decisions; i++) {
            const Detd__V1__Decision *d = r->decisions[i];
            char *label = NULL;
            if (asprintf(&label, "decision %.12s", d->id) < 0)
                goto oom;
            struct detctl_table_row *row = table_add_row(f, label);
            if (row == NULL)
                goto oom;
            row->kernel = d->kernel;
            row->key = d->key;
            row->config = d->config;
            row->host = d->decided_by ? d->decided_by->host : "";
            row->device = d->decided_by ? d->decided_by->device_name : "";
            row->triton_version = d->triton_version;
            row->at_ms = d->decided_at_ms;
        }
        if (f->n > TABLE_MAX_ROWS) {
            fprintf(stderr,
                    "detctl: table export: more than %d decisions: over "
                    "the table format's cap on entries per file\n",
                    TABLE_MAX_ROWS);
            return 2;
        }
        if (!r->truncated || r->n_decisions == 0)
            return 0;
        snprintf(after, sizeof after, "%s", r->next_after_id);
    }
oom:
    fprintf(stderr, "detctl: out of memory\n");
    return 2;
}

static int table_fetch_votes(const struct detctl_table_opts *o,
                             struct wire_channel *ch, struct table_fetch *f) {
    uint64_t after = 0;
    for (;;) {
        Detd__V1__ListVotesRequest req = DETD__V1__LIST_VOTES_REQUEST__INIT;
        Detd__V1__ListVotesResponse *r = NULL;
        req.api_version = DETD_API_VERSION;
        req.namespace_ = (char *)(o->ns ? o->ns : "");
        req.arch = (char *)o->arch;
        req.kernel = (char *)(o->kernel ? o->kernel : "");
        req.after = after;
        int rc = wire_unary(ch, WIRE_METHOD_LIST_VOTES, &req.base,
                            &detd__v1__list_votes_response__descriptor,
                            o->timeout_ms, (ProtobufCMessage **)&r);
        if (rc < 0)
            return table_call_fail("ListVotes", rc);
        if (table_keep(f, &r->base) != 0) {
            protobuf_c_message_free_unpacked(&r->base, NULL);
            goto oom;
        }
        for (size_t i = 0; i < r->n_votes; i++) {
            const Detd__V1__Vote *v = r->votes[i];
            const Detd__V1__ClientIdentity *c = v->client;
            char *label = NULL;
            if (asprintf(&label, "vote of %s pid %d", c ? c->host : "?",
                         c ? c->pid : 0) < 0)
                goto oom;
            struct detctl_table_row *row = table_add_row(f, label);
            if (row == NULL)
                goto oom;
            row->kernel = v->kernel;
            row->key = v->key;
            row->config = v->config;
            row->host = c ? c->host : "";
            row->device = c ? c->device_name : "";
            row->triton_version = v->triton_version;
            row->at_ms = v->voted_at_ms;
        }
        if (f->n > TABLE_MAX_ROWS) {
            fprintf(stderr,
                    "detctl: table export: more than %d votes: over the "
                    "cap on rows one export reads\n",
                    TABLE_MAX_ROWS);
            return 2;
        }
        if (!r->truncated || r->n_votes == 0)
            return 0;
        after = r->next_after;
    }
oom:
    fprintf(stderr, "detctl: out of memory\n");
    return 2;
}

int detctl_table_write(const char *path, json_t *doc) {
    char *tmp = NULL;
    if (asprintf(&tmp, "%s.tmp.%d", path, (int)getpid()) < 0) {
        fprintf(stderr, "detctl: out of memory\n");
        return 2;
    }
    FILE *fp = fopen(tmp, "w");
    if (fp == NULL) {
        fprintf(stderr, "detctl: cannot write '%s': %s\n", tmp,
                strerror(errno));
        free(tmp);
        return 2;
    }
    int bad = json_dumpf(doc, fp, JSON_SORT_KEYS | JSON_INDENT(1)) != 0;
    bad |= fputc('\n', fp) == EOF;
    bad |= fflush(fp) != 0 || fsync(fileno(fp)) != 0;
    int saved = errno;
    bad |= fclose(fp) != 0;
    if (bad || rename(tmp, path) != 0) {
        fprintf(stderr, "detctl: cannot write '%s': %s\n", path,
                strerror(bad ? saved : errno));
        unlink(tmp);
        free(tmp);
        return 2;
    }
    free(tmp);
    return 0;
}

int detctl_table_export(const struct detctl_table_opts *o,
                        struct wire_channel *ch) {
    regex_t re;
    if (o->arch == NULL || o->out == NULL) {
        fprintf(stderr, "detctl: table export needs --arch A and -o FILE\n");
        return 2;
    }
    if (regcomp(&re, "^sm[0-9]{2,3}[a-z]?$", REG_EXTENDED | REG_NOSUB) != 0)
        return 2;
    int bad_arch = regexec(&re, o->arch, 0, NULL, 0) != 0;
    regfree(&re);
    if (bad_arch) {
        fprintf(stderr,
                "detctl: table export: --arch '%s' is not an architecture "
                "name of the table format (sm<digits>[letter], e.g. sm90)\n",
                o->arch);
        return 2;
    }
    struct table_fetch f = {0};
    json_t *doc = NULL;
    char *source = NULL;
    int ex = o->votes ? table_fetch_votes(o, ch, &f)
                      : table_fetch_decisions(o, ch, &f);
    if (ex != 0)
        goto out;
    if (o->source != NULL)
        source = strdup(o->source);
    else if (asprintf(&source, "detctl table export%s: %s of namespace %s",
                      o->votes ? " --votes" : "",
                      o->votes ? "majority of record-mode votes" : "decisions",
                      o->ns ? o->ns : "(the daemon's)") < 0)
        source = NULL;
    struct detctl_table_stats st;
    if (source == NULL || detctl_table_build(o->arch, source, o->votes, f.rows,
                                             f.n, stderr, &doc, &st) != 0) {
        fprintf(stderr, "detctl: out of memory\n");
        ex = 2;
        goto out;
    }
    if ((ex = detctl_table_write(o->out, doc)) != 0)
        goto out;
    printf("wrote %s: %zu entr%s of %zu kernel%s from %zu %s", o->out,
           st.entries, st.entries == 1 ? "y" : "ies", st.kernels,
           st.kernels == 1 ? "" : "s", f.n, o->votes ? "votes" : "decisions");
    if (st.skipped > 0)
        printf(", %zu skipped", st.skipped);
    if (st.superseded > 0)
        printf(", %zu superseded", st.superseded);
    printf("\n");
    if (o->votes)
        printf("%zu entr%s with disagreeing ranks\n", st.disagreeing,
               st.disagreeing == 1 ? "y" : "ies");
out:
    json_decref(doc);
    free(source);
    table_fetch_free(&f);
    return ex;
}

/* ---- import ---- */

/* Bytes of entries sent in one ImportTable request: well under the 1 MiB
 * message cap (each entry adds a few bytes of framing). */
#define TABLE_IMPORT_BATCH_BYTES (512 * 1024)

struct table_import_sum {
    uint64_t added, replaced, unchanged, total;
    size_t batches;
};

static int table_import_send(const struct detctl_table_opts *o,
                             struct wire_channel *ch,
                             Detd__V1__ImportTableRequest *req,
                             struct table_import_sum *sum) {
    Detd__V1__ImportTableResponse *r = NULL;
    int rc = wire_unary(ch, WIRE_METHOD_IMPORT_TABLE, &req->base,
                        &detd__v1__import_table_response__descriptor,
                        o->timeout_ms, (ProtobufCMessage **)&r);
    if (rc < 0) {
        const char *detail = wire_last_error();
        fprintf(stderr, "detctl: table import: ImportTable: %s%s\n",
                detail[0] ? detail : detd_strerror(rc),
                sum->batches > 0 ? " (earlier batches were stored)" : "");
        return detctl_exit_for_rc(rc);
    }
    sum->batches++;
    sum->added += r->added;
    sum->replaced += r->replaced;
    sum->unchanged += r->unchanged;
    sum->total = r->total;
    for (size_t i = 0; i < r->n_replacements; i++) {
        const Detd__V1__ImportReplacement *x = r->replacements[i];
        printf("replaced %s %s key %s: %s (from %s) -> %s\n", x->arch,
               x->kernel, x->key, x->old_config, x->old_file, x->config);
    }
    if (r->replaced > r->n_replacements)
        printf("... and %llu more replaced in this batch (see the daemon's "
               "log)\n",
               (unsigned long long)(r->replaced - r->n_replacements));
    protobuf_c_message_free_unpacked(&r->base, NULL);
    return 0;
}

int detctl_table_import(const struct detctl_table_opts *o,
                        struct wire_channel *ch) {
    if (o->out == NULL) {
        fprintf(stderr, "detctl: table import needs one FILE\n");
        return 2;
    }
    struct tablefmt_limits lim;
    tablefmt_default_limits(&lim);
    lim.any_name = 1;
    struct tablefmt_doc *doc = NULL;
    char *err = NULL;
    if (tablefmt_read_file(o->out, &lim, &doc, &err) != 0) {
        fprintf(stderr, "detctl: table import: %s\n",
                err != NULL ? err : "out of memory");
        free(err);
        return 2;
    }
    size_t n = doc->n_entries;
    Detd__V1__ImportEntry *es = calloc(n ? n : 1, sizeof(*es));
    Detd__V1__ImportEntry **ep = calloc(n ? n : 1, sizeof(*ep));
    struct table_import_sum sum = {0};
    int ex = 2;
    if (es == NULL || ep == NULL) {
        fprintf(stderr, "detctl: out of memory\n");
        goto out;
    }
    if (n == 0) {
        fprintf(stderr, "detctl: table import: %s has no entries\n", o->out);
        goto out;
    }
    Detd__V1__ImportTableRequest req = DETD__V1__IMPORT_TABLE_REQUEST__INIT;
    req.api_version = DETD_API_VERSION;
    req.namespace_ = (char *)(o->ns ? o->ns : "");
    req.file = (char *)o->out;
    size_t first = 0, bytes = 0;
    for (size_t i = 0; i < n; i++) {
        const struct tablefmt_entry *t = &doc->entries[i];
        Detd__V1__ImportEntry *e = &es[i];
        detd__v1__import_entry__init(e);
        e->arch = (char *)doc->arch;
        e->kernel = (char *)t->kernel;
        e->key = (char *)t->key;
        e->config = t->config;
        /* A Megatron-form key ("N=128|torch.float32") is sent as the
         * table_key too; detd's canonical keys are lists ("[...]"). */
        if (t->key[0] != '[' && strcmp(t->key, "*") != 0)
            e->table_key = (char *)t->key;
        ep[i] = e;
        size_t sz = strlen(e->arch) + strlen(e->kernel) + 2 * strlen(e->key) +
                    strlen(e->config) + 32;
        if (i > first && bytes + sz > TABLE_IMPORT_BATCH_BYTES) {
            req.entries = &ep[first];
            req.n_entries = i - first;
            if ((ex = table_import_send(o, ch, &req, &sum)) != 0)
                goto out;
            first = i;
            bytes = 0;
        }
        bytes += sz;
    }
    req.entries = &ep[first];
    req.n_entries = n - first;
    if ((ex = table_import_send(o, ch, &req, &sum)) != 0)
        goto out;
    printf("imported %zu entr%s of %s (%s) in %zu batch%s: %llu added, %llu "
           "replaced, %llu unchanged; %llu imported entries in the "
           "namespace\n",
           n, n == 1 ? "y" : "ies", o->out, doc->arch, sum.batches,
           sum.batches == 1 ? "" : "es", (unsigned long long)sum.added,
           (unsigned long long)sum.replaced, (unsigned long long)sum.unchanged,
           (unsigned long long)sum.total);
    ex = 0;
out:
    free(es);
    free(ep);
    tablefmt_free(doc);
    return ex;
}
