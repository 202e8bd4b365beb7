/*
 * detctl_merge: `detctl table merge` and `detctl table report` (see
 * detctl_merge.h).
 */
#define _GNU_SOURCE
#include "detctl_merge.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "detctl_table.h"
#include "tablefmt.h"

/* The votes one provenance entry may carry (keeps sums far from overflow). */
#define MERGE_MAX_WEIGHT 1000000000LL

struct detctl_merge {
    /* arch -> kernel -> key -> {"counts": {canonical JSON: votes},
     * "devices": {name: true}, "hosts": n, "hosts_unknown": bool} */
    json_t *tree;
    json_t *tritons; /* versions named by the inputs */
    json_t *stats;   /* arch -> [entries, kernels, disagreeing] (build) */
    size_t n_inputs;
};

static int merge_errf(char **ret, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int merge_errf(char **ret, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (ret != NULL && vasprintf(ret, fmt, ap) < 0)
        *ret = NULL;
    va_end(ap);
    return -1;
}

int detctl_merge_new(struct detctl_merge **ret) {
    struct detctl_merge *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return -1;
    m->tree = json_object();
    m->tritons = json_object();
    m->stats = json_object();
    if (m->tree == NULL || m->tritons == NULL || m->stats == NULL) {
        detctl_merge_free(m);
        return -1;
    }
    *ret = m;
    return 0;
}

void detctl_merge_free(struct detctl_merge *m) {
    if (m == NULL)
        return;
    json_decref(m->tree);
    json_decref(m->tritons);
    json_decref(m->stats);
    free(m);
}

size_t detctl_merge_n_inputs(const struct detctl_merge *m) {
    return m->n_inputs;
}

/* obj[name] as an object, created when absent; NULL when out of memory. */
static json_t *merge_child(json_t *obj, const char *name) {
    json_t *c = json_object_get(obj, name);
    if (c != NULL)
        return c;
    c = json_object();
    if (c == NULL || json_object_set_new(obj, name, c) != 0)
        return NULL;
    return c;
}

/* The entry with its defaults spelled out, so that a Megatron entry and a
 * detd entry for the same config count as one: a new reference. */
static json_t *merge_normalize(const json_t *e) {
    json_t *ctas = json_object_get(e, "num_ctas");
    json_t *nreg = json_object_get(e, "maxnreg");
    return json_pack("{s:O, s:O, s:O, s:o, s:o}", "kwargs",
                     json_object_get(e, "kwargs"), "num_warps",
                     json_object_get(e, "num_warps"), "num_stages",
                     json_object_get(e, "num_stages"), "num_ctas",
                     ctas != NULL ? json_incref(ctas) : json_integer(1),
                     "maxnreg", nreg != NULL ? json_incref(nreg) : json_null());
}

/* One vote (or weight votes) for entry at (arch, kernel, key). prov: the
 * entry's provenance (devices, hosts), or NULL. */
static int merge_vote(struct detctl_merge *m, const char *arch,
                      const char *kernel, const char *key, const json_t *entry,
                      json_int_t weight, const json_t *prov) {
    json_t *a = merge_child(m->tree, arch);
    json_t *k = a != NULL ? merge_child(a, kernel) : NULL;
    json_t *slot = k != NULL ? merge_child(k, key) : NULL;
    json_t *counts = slot != NULL ? merge_child(slot, "counts") : NULL;
    json_t *devs = slot != NULL ? merge_child(slot, "devices") : NULL;
    json_t *norm = merge_normalize(entry);
    int rc = -1;
    if (counts == NULL || devs == NULL || norm == NULL)
        goto out;
    if (detctl_table_tally_add(counts, norm, weight) != 0)
        goto out;
    const json_t *d = prov != NULL ? json_object_get(prov, "devices") : NULL;
    size_t i;
    json_t *v;
    json_array_foreach((json_t *)d, i, v) {
        if (json_is_string(v))
            json_object_set_new(devs, json_string_value(v), json_true());
    }
    const json_t *h = prov != NULL ? json_object_get(prov, "hosts") : NULL;
    if (json_is_integer(h) && json_integer_value(h) >= 0)
        json_object_set_new(
            slot, "hosts",
            json_integer(json_integer_value(json_object_get(slot, "hosts")) +
                         json_integer_value(h)));
    else
        json_object_set_new(slot, "hosts_unknown", json_true());
    rc = 0;
out:
    json_decref(norm);
    return rc;
}

/* The votes an entry of a table counts for: provenance.votes, else 1. */
static int merge_weight(const char *where, const json_t *prov, json_int_t *ret,
                        char **ret_errmsg) {
    const json_t *v = prov != NULL ? json_object_get(prov, "votes") : NULL;
    *ret = 1;
    if (prov != NULL && !json_is_object(prov))
        return merge_errf(ret_errmsg, "%s: expected an object", where);
    if (v == NULL)
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 1 ||
        json_integer_value(v) > MERGE_MAX_WEIGHT)
        return merge_errf(ret_errmsg,
                          "%s.votes: expected an integer from 1 to %lld", where,
                          MERGE_MAX_WEIGHT);
    const json_t *d = json_object_get(prov, "devices");
    if (d != NULL && !json_is_array(d))
        return merge_errf(ret_errmsg, "%s.devices: expected an array", where);
    *ret = json_integer_value(v);
    return 0;
}

/* A detd or Megatron table, validated whole by tablefmt. */
static int merge_add_table(struct detctl_merge *m, const char *name,
                           const void *buf, size_t len, char **ret_errmsg) {
    struct tablefmt_limits lim;
    tablefmt_default_limits(&lim);
    lim.any_name = 1;
    struct tablefmt_doc *doc = NULL;
    char *where = NULL;
    int rc = tablefmt_parse(name, buf, len, &lim, &doc, ret_errmsg);
    if (rc != 0)
        return -1;
    json_int_t *w = calloc(doc->n_entries ? doc->n_entries : 1, sizeof(*w));
    rc = -1;
    if (w == NULL)
        goto oom;
    /* Check every weight before anything is counted. */
    for (size_t i = 0; i < doc->n_entries; i++) {
        const struct tablefmt_entry *e = &doc->entries[i];
        free(where);
        if (asprintf(&where, "%s: provenance.\"%.200s\".\"%.200s\"", name,
                     e->kernel, e->key) < 0) {
            where = NULL;
            goto oom;
        }
        if (merge_weight(where, e->provenance, &w[i], ret_errmsg) != 0)
            goto out;
    }
    for (size_t i = 0; i < doc->n_entries; i++) {
        const struct tablefmt_entry *e = &doc->entries[i];
        if (merge_vote(m, doc->arch, e->kernel, e->key, e->raw, w[i],
                       e->provenance) != 0)
            goto oom;
    }
    if (doc->triton != NULL)
        json_object_set_new(m->tritons, doc->triton, json_true());
    rc = 0;
    goto out;
oom:
    merge_errf(ret_errmsg, "%s: out of memory", name);
out:
    free(where);
    free(w);
    tablefmt_free(doc);
    return rc;
}

/* A Megatron per-rank recording: {"<arch>": {"<kernel>": {"<key>": e}}}.
 * Pass 0 validates everything, pass 1 counts. */
static int merge_add_recording(struct detctl_merge *m, const char *name,
                               const json_t *root, char **ret_errmsg) {
    struct tablefmt_limits lim;
    tablefmt_default_limits(&lim);
    char *where = NULL;
    size_t total = 0;
    int rc = -1;
    for (int pass = 0; pass < 2; pass++) {
        const char *arch, *kn, *key;
        json_t *av, *kv, *ev;
        json_object_foreach((json_t *)root, arch, av) {
            if (pass == 0 && !tablefmt_arch_valid(arch)) {
                merge_errf(ret_errmsg,
                           "%s: \"%.100s\": not an architecture name (a "
                           "recording maps sm<digits>[letter] to its "
                           "kernels; a table needs \"arch\" and "
                           "\"kernels\")",
                           name, arch);
                goto out;
            }
            if (pass == 0 && !json_is_object(av)) {
                merge_errf(ret_errmsg, "%s: \"%s\": expected an object", name,
                           arch);
                goto out;
            }
            json_object_foreach(av, kn, kv) {
                if (pass == 0 &&
                    (strlen(kn) == 0 || strlen(kn) > lim.max_name ||
                     !json_is_object(kv))) {
                    merge_errf(ret_errmsg, "%s: \"%s\".\"%.200s\": %s", name,
                               arch, kn,
                               json_is_object(kv)
                                   ? "a kernel name must be 1 to 4096 bytes"
                                   : "expected an object");
                    goto out;
                }
                json_object_foreach(kv, key, ev) {
                    if (pass == 1) {
                        if (merge_vote(m, arch, kn, key, ev, 1, NULL) != 0) {
                            merge_errf(ret_errmsg, "%s: out of memory", name);
                            goto out;
                        }
                        continue;
                    }
                    if (strlen(key) == 0 || strlen(key) > lim.max_name) {
                        merge_errf(ret_errmsg,
                                   "%s: \"%s\".\"%.200s\": a key of %zu bytes "
                                   "(must be 1 to %zu)",
                                   name, arch, kn, strlen(key), lim.max_name);
                        goto out;
                    }
                    if (++total > lim.max_entries) {
                        merge_errf(ret_errmsg,
                                   "%s: more than %zu entries, over the "
                                   "entries cap of a table file",
                                   name, lim.max_entries);
                        goto out;
                    }
                    free(where);
                    if (asprintf(&where, "%s: \"%s\".\"%.200s\".\"%.200s\"",
                                 name, arch, kn, key) < 0) {
                        where = NULL;
                        merge_errf(ret_errmsg, "%s: out of memory", name);
                        goto out;
                    }
                    char *cfg = NULL;
                    if (tablefmt_render_entry(ev, where, &cfg, ret_errmsg) != 0)
                        goto out;
                    free(cfg);
                }
            }
        }
    }
    rc = 0;
out:
    free(where);
    return rc;
}

int detctl_merge_add(struct detctl_merge *m, const char *name, const void *buf,
                     size_t len, char **ret_errmsg) {
    if (ret_errmsg != NULL)
        *ret_errmsg = NULL;
    if (len > TABLEFMT_MAX_FILE_BYTES)
        return merge_errf(ret_errmsg,
                          "%s: %zu bytes, over the table file cap of %zu "
                          "bytes",
                          name, len, TABLEFMT_MAX_FILE_BYTES);
    json_error_t jerr;
    json_t *root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
    int rc;
    if (root == NULL) {
        return merge_errf(ret_errmsg, "%s: line %d column %d: invalid JSON: %s",
                          name, jerr.line, jerr.column, jerr.text);
    }
    if (json_is_object(root) && json_object_size(root) > 0 &&
        json_object_get(root, "kernels") == NULL &&
        json_object_get(root, "arch") == NULL)
        rc = merge_add_recording(m, name, root, ret_errmsg);
    else
        rc = merge_add_table(m, name, buf, len, ret_errmsg);
    json_decref(root);
    if (rc == 0)
        m->n_inputs++;
    return rc;
}

int detctl_merge_add_file(struct detctl_merge *m, const char *path,
                          char **ret_errmsg) {
    if (ret_errmsg != NULL)
        *ret_errmsg = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return merge_errf(ret_errmsg, "%s: cannot open: %s", path,
                          strerror(errno));
    size_t cap = TABLEFMT_MAX_FILE_BYTES, n = 0, size = 0;
    char *buf = NULL;
    int rc = -1;
    for (;;) {
        if (n == size) {
            size_t want = size ? size * 2 : 65536;
            if (want > cap + 1)
                want = cap + 1;
            if (want <= size) {
                merge_errf(ret_errmsg,
                           "%s: over the table file cap of %zu bytes", path,
                           cap);
                goto out;
            }
            char *p = realloc(buf, want);
            if (p == NULL) {
                merge_errf(ret_errmsg, "%s: out of memory", path);
                goto out;
            }
            buf = p;
            size = want;
        }
        ssize_t r = read(fd, buf + n, size - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            merge_errf(ret_errmsg, "%s: read: %s", path, strerror(errno));
            goto out;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    rc = detctl_merge_add(m, path, buf, n, ret_errmsg);
out:
    free(buf);
    close(fd);
    return rc;
}

/* The sorted device names of a slot as a new array. */
static json_t *merge_devices(json_t *slot) {
    json_t *arr = json_array();
    size_t n = 0;
    const char **ds =
        detctl_table_sorted_keys(json_object_get(slot, "devices"), &n);
    for (size_t i = 0; arr != NULL && ds != NULL && i < n; i++)
        json_array_append_new(arr, json_string(ds[i]));
    free(ds);
    return arr;
}

/* Build one arch's document into docs. */
static int merge_build_arch(struct detctl_merge *m, const char *arch,
                            const char *source, json_t *docs,
                            char **ret_errmsg) {
    json_t *a = json_object_get(m->tree, arch);
    json_t *kernels = json_object(), *prov = json_object(), *doc = NULL;
    size_t entries = 0, disagreeing = 0;
    int rc = -1;
    if (kernels == NULL || prov == NULL)
        goto out;
    const char *kn, *key;
    json_t *kv, *slot;
    json_object_foreach(a, kn, kv) {
        json_t *kt = merge_child(kernels, kn), *pt = merge_child(prov, kn);
        if (kt == NULL || pt == NULL)
            goto out;
        json_object_foreach(kv, key, slot) {
            json_int_t win_n = 0, total = 0;
            const char *win = detctl_table_tally_winner(
                json_object_get(slot, "counts"), &win_n, &total);
            json_t *e = win != NULL ? json_loads(win, 0, NULL) : NULL;
            if (e == NULL || json_object_set_new(kt, key, e) != 0)
                goto out;
            json_t *p = json_pack("{s:I, s:I}", "votes", total, "agree", win_n);
            json_t *devs = merge_devices(slot);
            if (p == NULL || devs == NULL) {
                json_decref(p);
                json_decref(devs);
                goto out;
            }
            if (json_array_size(devs) > 0)
                json_object_set_new(p, "devices", devs);
            else
                json_decref(devs);
            if (!json_is_true(json_object_get(slot, "hosts_unknown")))
                json_object_set(p, "hosts", json_object_get(slot, "hosts"));
            json_object_set_new(pt, key, p);
            entries++;
            if (win_n < total)
                disagreeing++;
        }
    }
    if (entries > TABLEFMT_MAX_ENTRIES) {
        merge_errf(ret_errmsg,
                   "%s: %zu entries, over the table format's cap of %d per "
                   "file",
                   arch, entries, TABLEFMT_MAX_ENTRIES);
        rc = -2;
        goto out;
    }
    doc = json_pack("{s:s, s:s, s:s, s:O, s:O}", "format", TABLEFMT_FORMAT,
                    "arch", arch, "source", source, "kernels", kernels,
                    "provenance", prov);
    if (doc == NULL)
        goto out;
    if (json_object_size(m->tritons) == 1) {
        const char *tv;
        json_t *tx;
        json_object_foreach(m->tritons, tv, tx)
            json_object_set_new(doc, "triton", json_string(tv));
    }
    json_object_set_new(m->stats, arch,
                        json_pack("[I, I, I]", (json_int_t)entries,
                                  (json_int_t)json_object_size(kernels),
                                  (json_int_t)disagreeing));
    if (json_object_set_new(docs, arch, doc) != 0)
        goto out;
    rc = 0;
out:
    json_decref(kernels);
    json_decref(prov);
    return rc;
}

int detctl_merge_build(struct detctl_merge *m, const char *source,
                       json_t **ret_docs, char **ret_errmsg) {
    if (ret_errmsg != NULL)
        *ret_errmsg = NULL;
    json_t *docs = json_object();
    if (docs == NULL)
        return -1;
    const char *arch;
    json_t *a;
    json_object_foreach(m->tree, arch, a) {
        int rc = merge_build_arch(m, arch, source, docs, ret_errmsg);
        if (rc != 0) {
            json_decref(docs);
            return rc;
        }
    }
    *ret_docs = docs;
    return 0;
}

void detctl_merge_stats(const struct detctl_merge *m, const char *arch,
                        struct detctl_merge_stats *ret) {
    const json_t *s = json_object_get(m->stats, arch);
    ret->entries = (size_t)json_integer_value(json_array_get(s, 0));
    ret->kernels = (size_t)json_integer_value(json_array_get(s, 1));
    ret->disagreeing = (size_t)json_integer_value(json_array_get(s, 2));
}

/* The votes of a slot by config string: a new object. */
static json_t *merge_split(json_t *slot) {
    json_t *out = json_object();
    const char *ser;
    json_t *cv;
    json_object_foreach(json_object_get(slot, "counts"), ser, cv) {
        json_t *e = json_loads(ser, 0, NULL);
        char *cfg = NULL;
        if (e != NULL && tablefmt_render_entry(e, "", &cfg, NULL) == 0)
            json_object_set_new(out, cfg, json_integer(json_integer_value(cv)));
        free(cfg);
        json_decref(e);
    }
    return out;
}

json_t *detctl_merge_report(struct detctl_merge *m) {
    json_t *archs = json_object();
    if (archs == NULL)
        return NULL;
    const char *arch, *kn, *key;
    json_t *a, *kv, *slot;
    json_object_foreach(m->tree, arch, a) {
        json_int_t ae = 0, av = 0, ad = 0;
        json_t *ks = json_object();
        json_object_foreach(a, kn, kv) {
            json_int_t ke = 0, kvotes = 0, kd = 0;
            json_t *splits = json_array();
            size_t nkeys = 0;
            const char **keys = detctl_table_sorted_keys(kv, &nkeys);
            for (size_t i = 0; keys != NULL && i < nkeys; i++) {
                key = keys[i];
                slot = json_object_get(kv, key);
                json_int_t win_n = 0, total = 0;
                detctl_table_tally_winner(json_object_get(slot, "counts"),
                                          &win_n, &total);
                ke++;
                kvotes += total;
                if (win_n < total) {
                    kd++;
                    json_array_append_new(splits, json_pack("{s:s, s:o}", "key",
                                                            key, "votes",
                                                            merge_split(slot)));
                }
            }
            free(keys);
            json_object_set_new(ks, kn,
                                json_pack("{s:I, s:I, s:I, s:o}", "entries", ke,
                                          "votes", kvotes, "disagreeing", kd,
                                          "splits", splits));
            ae += ke;
            av += kvotes;
            ad += kd;
        }
        json_object_set_new(archs, arch,
                            json_pack("{s:I, s:I, s:I, s:o}", "entries", ae,
                                      "votes", av, "disagreeing", ad, "kernels",
                                      ks));
    }
    return json_pack("{s:I, s:o}", "inputs", (json_int_t)m->n_inputs, "archs",
                     archs);
}

/* One split as "CONFIG: n, CONFIG: n" (most votes first). */
static void merge_print_split(json_t *votes, FILE *out) {
    size_t n = 0;
    const char **cs = detctl_table_sorted_keys(votes, &n);
    int first = 1;
    /* Most votes first; equal counts in config order. */
    for (json_int_t want = INT64_MAX; cs != NULL;) {
        json_int_t next = 0;
        for (size_t i = 0; i < n; i++) {
            json_int_t c = json_integer_value(json_object_get(votes, cs[i]));
            if (c == want) {
                fprintf(out, "%s%s: %lld", first ? "" : ", ", cs[i],
                        (long long)c);
                first = 0;
            } else if (c < want && c > next) {
                next = c;
            }
        }
        if (next == 0)
            break;
        want = next;
    }
    free(cs);
}

void detctl_merge_print_disagreements(struct detctl_merge *m, FILE *out) {
    json_t *r = detctl_merge_report(m);
    json_t *archs = json_object_get(r, "archs");
    size_t na = 0;
    const char **as = detctl_table_sorted_keys(archs, &na);
    for (size_t i = 0; as != NULL && i < na; i++) {
        json_t *ks = json_object_get(json_object_get(archs, as[i]), "kernels");
        size_t nk = 0;
        const char **kn = detctl_table_sorted_keys(ks, &nk);
        for (size_t j = 0; kn != NULL && j < nk; j++) {
            size_t x;
            json_t *s;
            json_array_foreach(
                json_object_get(json_object_get(ks, kn[j]), "splits"), x, s) {
                fprintf(out, "  disagreement: %s %s key %s: ", as[i], kn[j],
                        json_string_value(json_object_get(s, "key")));
                merge_print_split(json_object_get(s, "votes"), out);
                fputc('\n', out);
            }
        }
        free(kn);
    }
    free(as);
    json_decref(r);
}

/* ---- the commands ---- */

static int merge_load(const struct detctl_merge_opts *o, const char *cmd,
                      struct detctl_merge **ret) {
    struct detctl_merge *m = NULL;
    if (o->n_files == 0) {
        fprintf(stderr, "detctl: table %s needs at least one input file\n",
                cmd);
        return 2;
    }
    if (detctl_merge_new(&m) != 0) {
        fprintf(stderr, "detctl: out of memory\n");
        return 2;
    }
    for (size_t i = 0; i < o->n_files; i++) {
        char *err = NULL;
        if (detctl_merge_add_file(m, o->files[i], &err) != 0) {
            fprintf(stderr, "detctl: table %s: %s\n", cmd,
                    err != NULL ? err : "out of memory");
            free(err);
            detctl_merge_free(m);
            return 2;
        }
    }
    *ret = m;
    return 0;
}

int detctl_merge_run(const struct detctl_merge_opts *o) {
    struct detctl_merge *m = NULL;
    json_t *docs = NULL;
    char *source = NULL, *err = NULL;
    char **paths = NULL;
    size_t n = 0;
    int ex = 2;
    if (o->out == NULL) {
        fprintf(stderr, "detctl: table merge needs -o FILE (or -o DIR)\n");
        return 2;
    }
    if ((ex = merge_load(o, "merge", &m)) != 0)
        return ex;
    ex = 2;
    if (o->source != NULL)
        source = strdup(o->source);
    else if (asprintf(&source, "detctl table merge: majority of %zu input%s",
                      m->n_inputs, m->n_inputs == 1 ? "" : "s") < 0)
        source = NULL;
    int rc = source != NULL ? detctl_merge_build(m, source, &docs, &err) : -1;
    if (rc != 0) {
        fprintf(stderr, "detctl: table merge: %s\n",
                err != NULL ? err : "out of memory");
        goto out;
    }
    n = json_object_size(docs);
    if (n == 0) {
        fprintf(stderr, "detctl: table merge: the inputs have no entries\n");
        goto out;
    }
    size_t na = 0;
    const char **archs = detctl_table_sorted_keys(docs, &na);
    paths = calloc(na ? na : 1, sizeof(*paths));
    if (archs == NULL || paths == NULL) {
        free(archs);
        fprintf(stderr, "detctl: out of memory\n");
        goto out;
    }
    struct stat st;
    int is_dir = stat(o->out, &st) == 0 && S_ISDIR(st.st_mode);
    if (na > 1 && !is_dir) {
        fprintf(stderr,
                "detctl: table merge: the inputs have %zu architectures (", na);
        for (size_t i = 0; i < na; i++)
            fprintf(stderr, "%s%s", i ? ", " : "", archs[i]);
        fprintf(stderr, "): -o must be a directory, where each is written "
                        "as <arch>.json\n");
        free(archs);
        goto out;
    }
    for (size_t i = 0; i < na; i++) {
        if (is_dir ? asprintf(&paths[i], "%s/%s.json", o->out, archs[i]) < 0
                   : (paths[i] = strdup(o->out)) == NULL) {
            paths[i] = NULL;
            free(archs);
            fprintf(stderr, "detctl: out of memory\n");
            goto out;
        }
    }
    printf("merged %zu input%s\n", m->n_inputs, m->n_inputs == 1 ? "" : "s");
    for (size_t i = 0; i < na; i++) {
        struct detctl_merge_stats s;
        if ((ex = detctl_table_write(paths[i],
                                     json_object_get(docs, archs[i]))) != 0) {
            free(archs);
            goto out;
        }
        detctl_merge_stats(m, archs[i], &s);
        printf("wrote %s: %s, %zu entr%s of %zu kernel%s, %zu with "
               "disagreeing inputs\n",
               paths[i], archs[i], s.entries, s.entries == 1 ? "y" : "ies",
               s.kernels, s.kernels == 1 ? "" : "s", s.disagreeing);
    }
    free(archs);
    if (o->verbose)
        detctl_merge_print_disagreements(m, stdout);
    ex = 0;
out:
    for (size_t i = 0; paths != NULL && i < n; i++)
        free(paths[i]);
    free(paths);
    free(source);
    free(err);
    json_decref(docs);
    detctl_merge_free(m);
    return ex;
}

int detctl_merge_report_run(const struct detctl_merge_opts *o) {
    struct detctl_merge *m = NULL;
    int ex = merge_load(o, "report", &m);
    if (ex != 0)
        return ex;
    json_t *r = detctl_merge_report(m);
    if (r == NULL) {
        fprintf(stderr, "detctl: out of memory\n");
        detctl_merge_free(m);
        return 2;
    }
    if (o->json) {
        /* The envelope of every detctl document (docs/detctl-json.md). */
        json_object_set_new(r, "api_version", json_integer(1));
        json_object_set_new(r, "kind", json_string("TableReport"));
        json_dumpf(r, stdout, JSON_INDENT(2) | JSON_SORT_KEYS);
        fputc('\n', stdout);
        goto out;
    }
    printf("%zu input%s\n", m->n_inputs, m->n_inputs == 1 ? "" : "s");
    size_t na = 0;
    json_t *archs = json_object_get(r, "archs");
    const char **as = detctl_table_sorted_keys(archs, &na);
    for (size_t i = 0; as != NULL && i < na; i++) {
        json_t *a = json_object_get(archs, as[i]);
        printf(
            "%s: %lld entries, %lld votes, %lld with disagreeing inputs\n",
            as[i], (long long)json_integer_value(json_object_get(a, "entries")),
            (long long)json_integer_value(json_object_get(a, "votes")),
            (long long)json_integer_value(json_object_get(a, "disagreeing")));
        json_t *ks = json_object_get(a, "kernels");
        size_t nk = 0;
        const char **kn = detctl_table_sorted_keys(ks, &nk);
        for (size_t j = 0; kn != NULL && j < nk; j++) {
            json_t *k = json_object_get(ks, kn[j]);
            printf("  %s: %lld entries, %lld votes, %lld disagreeing\n", kn[j],
                   (long long)json_integer_value(json_object_get(k, "entries")),
                   (long long)json_integer_value(json_object_get(k, "votes")),
                   (long long)json_integer_value(
                       json_object_get(k, "disagreeing")));
            size_t x;
            json_t *s;
            json_array_foreach(json_object_get(k, "splits"), x, s) {
                printf("    key %s: ",
                       json_string_value(json_object_get(s, "key")));
                merge_print_split(json_object_get(s, "votes"), stdout);
                fputc('\n', stdout);
            }
        }
        free(kn);
    }
    free(as);
out:
    json_decref(r);
    detctl_merge_free(m);
    return 0;
}
