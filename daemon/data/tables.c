/*
 * tables: loading a set of table files and looking entries up.
 * See tables.h for the search order and the contracts.
 */
#define _GNU_SOURCE
#include "data/tables.h"

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/keyid.h"
#include "detd/error.h"

/* One loaded file: its document and a hash of "kernel\0key" -> entry. */
struct tfile {
    char *path;
    struct tablefmt_doc *doc;
    uint32_t *slots;  /* entry index + 1; 0 = empty */
    uint32_t *kslots; /* by kernel name alone: its first entry + 1 */
    size_t nslots;    /* of both; a power of two */
};

struct tables {
    struct tfile *files;
    size_t nfiles, capfiles;
    struct tables_file_info *infos;
    struct tables_error *errors;
    size_t nerrors, caperrors;
    size_t nentries;
};

/* FNV-1a over kernel, a 0 byte, key; ':' in kernel may be read as '.'. */
static uint64_t hash_step(uint64_t h, const char *s, size_t n, int dots) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (dots && c == ':')
            c = '.';
        h = (h ^ c) * 0x100000001b3ULL;
    }
    return h;
}

static uint64_t hash_pair(const char *k, size_t kn, int dots, const char *key,
                          size_t keyn) {
    uint64_t h = 0xcbf29ce484222325ULL;
    h = hash_step(h, k, kn, dots);
    h = (h ^ 0) * 0x100000001b3ULL;
    return hash_step(h, key, keyn, 0);
}

/* kernel (kn bytes, ':' read as '.' with dots) equals the string s. */
static int name_eq(const char *k, size_t kn, int dots, const char *s) {
    for (size_t i = 0; i < kn; i++) {
        char c = k[i];
        if (dots && c == ':')
            c = '.';
        if (s[i] != c)
            return 0;
    }
    return s[kn] == '\0';
}

static int tfile_index(struct tfile *f) {
    size_t n = f->doc->n_entries;
    size_t ns = 16;
    while (ns < n * 2)
        ns *= 2;
    f->slots = calloc(ns, sizeof(*f->slots));
    f->kslots = calloc(ns, sizeof(*f->kslots));
    if (f->slots == NULL || f->kslots == NULL)
        return DETD_ENOMEM;
    f->nslots = ns;
    for (size_t i = 0; i < n; i++) {
        const struct tablefmt_entry *e = &f->doc->entries[i];
        size_t kl = strlen(e->kernel);
        uint64_t h = hash_pair(e->kernel, kl, 0, e->key, strlen(e->key));
        size_t s = (size_t)h & (ns - 1);
        while (f->slots[s] != 0)
            s = (s + 1) & (ns - 1);
        f->slots[s] = (uint32_t)i + 1;
        h = hash_pair(e->kernel, kl, 0, "", 0);
        for (s = (size_t)h & (ns - 1); f->kslots[s] != 0;
             s = (s + 1) & (ns - 1))
            if (strcmp(f->doc->entries[f->kslots[s] - 1].kernel, e->kernel) ==
                0)
                break;
        if (f->kslots[s] == 0)
            f->kslots[s] = (uint32_t)i + 1;
    }
    return 0;
}

static const struct tablefmt_entry *tfile_find(const struct tfile *f,
                                               const char *k, size_t kn,
                                               int dots, const char *key) {
    size_t keyn = strlen(key);
    uint64_t h = hash_pair(k, kn, dots, key, keyn);
    for (size_t s = (size_t)h & (f->nslots - 1); f->slots[s] != 0;
         s = (s + 1) & (f->nslots - 1)) {
        const struct tablefmt_entry *e = &f->doc->entries[f->slots[s] - 1];
        if (name_eq(k, kn, dots, e->kernel) && strcmp(e->key, key) == 0)
            return e;
    }
    return NULL;
}

/* Does any entry of f have this kernel name (any key)? */
static int tfile_has_kernel(const struct tfile *f, const char *k, size_t kn,
                            int dots) {
    uint64_t h = hash_pair(k, kn, dots, "", 0);
    for (size_t s = (size_t)h & (f->nslots - 1); f->kslots[s] != 0;
         s = (s + 1) & (f->nslots - 1))
        if (name_eq(k, kn, dots, f->doc->entries[f->kslots[s] - 1].kernel))
            return 1;
    return 0;
}

static int add_error(struct tables *t, const char *path, const char *msg) {
    if (t->nerrors == t->caperrors) {
        size_t cap = t->caperrors ? t->caperrors * 2 : 8;
        struct tables_error *e = realloc(t->errors, cap * sizeof(*e));
        if (e == NULL)
            return DETD_ENOMEM;
        t->errors = e;
        t->caperrors = cap;
    }
    char *p = strdup(path);
    char *m = strdup(msg != NULL ? msg : "out of memory");
    if (p == NULL || m == NULL) {
        free(p);
        free(m);
        return DETD_ENOMEM;
    }
    t->errors[t->nerrors].path = p;
    t->errors[t->nerrors].message = m;
    t->nerrors++;
    return 0;
}

static int add_file(struct tables *t, const char *path,
                    const struct tablefmt_limits *lim) {
    struct tablefmt_doc *doc = NULL;
    char *err = NULL;
    int rc = tablefmt_read_file(path, lim, &doc, &err);
    if (rc != 0) {
        rc = rc == DETD_ENOMEM && err == NULL ? rc : add_error(t, path, err);
        free(err);
        return rc;
    }
    if (t->nfiles == t->capfiles) {
        size_t cap = t->capfiles ? t->capfiles * 2 : 8;
        struct tfile *f = realloc(t->files, cap * sizeof(*f));
        if (f == NULL)
            goto oom;
        t->files = f;
        t->capfiles = cap;
    }
    struct tfile *f = &t->files[t->nfiles];
    memset(f, 0, sizeof(*f));
    f->doc = doc;
    f->path = strdup(path);
    if (f->path == NULL || tfile_index(f) != 0) {
        free(f->path);
        free(f->slots);
        free(f->kslots);
        goto oom;
    }
    t->nfiles++;
    t->nentries += doc->n_entries;
    return 0;
oom:
    tablefmt_free(doc);
    return DETD_ENOMEM;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int is_table_name(const char *n) {
    size_t l = strlen(n);
    return strncmp(n, "sm", 2) == 0 && l > 5 && strcmp(n + l - 5, ".json") == 0;
}

/* Load every sm*.json of dir, sorted by name. */
static int load_dir(struct tables *t, const char *dir, int required,
                    const struct tablefmt_limits *lim) {
    DIR *dh = opendir(dir);
    if (dh == NULL) {
        if (!required && errno == ENOENT)
            return 0;
        char msg[512];
        snprintf(msg, sizeof(msg), "%s: cannot read the table directory: %s",
                 dir, strerror(errno));
        return add_error(t, dir, msg);
    }
    int rc = 0;
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(dh)) != NULL) {
        if (!is_table_name(de->d_name))
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            char **p = realloc(names, cap * sizeof(*p));
            if (p == NULL) {
                rc = DETD_ENOMEM;
                goto out;
            }
            names = p;
        }
        if (asprintf(&names[n], "%s/%s", dir, de->d_name) < 0) {
            rc = DETD_ENOMEM;
            goto out;
        }
        n++;
    }
    qsort(names, n, sizeof(*names), cmp_name);
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = add_file(t, names[i], lim);
out:
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    closedir(dh);
    return rc;
}

/* See tables.h. */
int tables_load(const char *const *dirs, size_t n_dirs,
                const char *packaged_dir, const struct tablefmt_limits *lim,
                tables **ret) {
    struct tables *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return DETD_ENOMEM;
    int rc = 0;
    for (size_t i = 0; i < n_dirs && rc == 0; i++)
        rc = load_dir(t, dirs[i], 1, lim);
    if (rc == 0 && packaged_dir != NULL && packaged_dir[0] != '\0')
        rc = load_dir(t, packaged_dir, 0, lim);
    if (rc == 0) {
        t->infos = calloc(t->nfiles ? t->nfiles : 1, sizeof(*t->infos));
        if (t->infos == NULL)
            rc = DETD_ENOMEM;
    }
    if (rc != 0) {
        tables_free(t);
        return rc;
    }
    for (size_t i = 0; i < t->nfiles; i++) {
        t->infos[i].path = t->files[i].path;
        t->infos[i].arch = t->files[i].doc->arch;
        t->infos[i].n_entries = t->files[i].doc->n_entries;
    }
    *ret = t;
    return 0;
}

/* See tables.h. */
void tables_free(tables *t) {
    if (t == NULL)
        return;
    for (size_t i = 0; i < t->nfiles; i++) {
        free(t->files[i].path);
        free(t->files[i].slots);
        free(t->files[i].kslots);
        tablefmt_free(t->files[i].doc);
    }
    for (size_t i = 0; i < t->nerrors; i++) {
        free((char *)t->errors[i].path);
        free((char *)t->errors[i].message);
    }
    free(t->files);
    free(t->infos);
    free(t->errors);
    free(t);
}

/* See tables.h. */
size_t tables_n_files(const tables *t) {
    return t != NULL ? t->nfiles : 0;
}

/* See tables.h. */
const struct tables_file_info *tables_file(const tables *t, size_t i) {
    return t != NULL && i < t->nfiles ? &t->infos[i] : NULL;
}

/* See tables.h. */
size_t tables_n_entries(const tables *t) {
    return t != NULL ? t->nentries : 0;
}

/* See tables.h. */
size_t tables_n_errors(const tables *t) {
    return t != NULL ? t->nerrors : 0;
}

/* See tables.h. */
const struct tables_error *tables_error(const tables *t, size_t i) {
    return t != NULL && i < t->nerrors ? &t->errors[i] : NULL;
}

/* A kernel name variant: kernel_id[0..n), ':' read as '.' when dots. */
struct kname {
    const char *s;
    size_t n;
    int dots;
};

/* The names tried for a kernel id, most specific first, no repeats. */
static size_t kernel_names(const char *id, struct kname out[4]) {
    size_t len = strlen(id), k = 0;
    const char *at = strrchr(id, '@');
    size_t base = at != NULL ? (size_t)(at - id) : len;
    const char *colon = memchr(id, ':', base);
    out[k++] = (struct kname){id, len, 0};
    if (base != len)
        out[k++] = (struct kname){id, base, 0};
    if (colon != NULL)
        out[k++] = (struct kname){id, base, 1};
    /* The bare function name: after the ':' and the qualname's last '.'. */
    const char *fn = colon != NULL ? colon + 1 : id;
    for (const char *p = fn; p < id + base; p++)
        if (*p == '.')
            fn = p + 1;
    size_t fnn = (size_t)(id + base - fn);
    if (fn != id && fnn > 0)
        out[k++] = (struct kname){fn, fnn, 0};
    return k;
}

/* See tables.h. */
size_t tables_kernel_names(const char *kernel_id, char *ret[4]) {
    struct kname names[4];
    size_t n = kernel_names(kernel_id, names);
    for (size_t i = 0; i < n; i++) {
        ret[i] = strndup(names[i].s, names[i].n);
        if (ret[i] == NULL) {
            while (i > 0)
                free(ret[--i]);
            return 0;
        }
        if (names[i].dots)
            for (char *p = ret[i]; *p != '\0'; p++)
                if (*p == ':')
                    *p = '.';
    }
    return n;
}

/* See tables.h. */
void tables_lookup(const tables *t, const char *arch, const char *kernel_id,
                   const char *key, const char *table_key,
                   const char *const *cands, size_t n_cands,
                   struct tables_result *ret) {
    memset(ret, 0, sizeof(*ret));
    if (t == NULL || arch == NULL || kernel_id == NULL)
        return;
    struct kname names[4];
    size_t nn = kernel_names(kernel_id, names);
    const char *keys[3];
    size_t nk = 0;
    if (key != NULL && key[0] != '\0')
        keys[nk++] = key;
    if (table_key != NULL && table_key[0] != '\0' &&
        (nk == 0 || strcmp(table_key, key) != 0))
        keys[nk++] = table_key;
    keys[nk++] = "*";
    for (size_t fi = 0; fi < t->nfiles; fi++) {
        const struct tfile *f = &t->files[fi];
        if (strcmp(f->doc->arch, arch) != 0)
            continue;
        ret->n_files++;
        for (size_t ni = 0; ni < nn; ni++) {
            if (!ret->kernel_found &&
                tfile_has_kernel(f, names[ni].s, names[ni].n, names[ni].dots))
                ret->kernel_found = 1;
            for (size_t ki = 0; ki < nk; ki++) {
                const struct tablefmt_entry *e = tfile_find(
                    f, names[ni].s, names[ni].n, names[ni].dots, keys[ki]);
                if (e == NULL)
                    continue;
                ret->kernel_found = 1;
                int live = keyid_has_candidate(e->config, cands, n_cands);
                if (!live)
                    ret->n_stale++;
                if (ret->n_considered < TABLES_MAX_CONSIDERED) {
                    struct tables_considered *c =
                        &ret->considered[ret->n_considered++];
                    c->file = f->path;
                    c->kernel = e->kernel;
                    c->key = e->key;
                    c->config = e->config;
                    c->stale = !live;
                } else if (live) {
                    /* Keep the answer even past the cap. */
                    struct tables_considered *c =
                        &ret->considered[TABLES_MAX_CONSIDERED - 1];
                    *c = (struct tables_considered){f->path, e->kernel, e->key,
                                                    e->config, 0};
                }
                if (live) {
                    ret->hit = 1;
                    return;
                }
            }
        }
    }
}
