/*
 * verify: cross-rank agreement over Observe reports. Pure logic.
 *
 * The verifier keeps only the observations of the id being fed (rows of
 * an id are contiguous), closes that group when the next id starts, and
 * remembers the ids already closed so an id that comes back (a caller
 * feeding rows out of order) is refused instead of being checked twice
 * with half its rows each time.
 *
 * Every step allocates what it needs before it changes the verifier, so
 * an error leaves it as it was.
 */
#include "core/verify.h"

#include <stdlib.h>
#include <string.h>

#include "detd/error.h"

/* One governed (or must-agree) observation of the current id. */
struct row {
    char *config;
    char *host;
    int32_t pid;
    int32_t rank;
    int32_t local_rank;
    int chaos;
};

/* Open-addressing set of the ids already closed. */
struct idset {
    char **slot;
    size_t cap; /* power of two, or 0 */
    size_t n;
};

struct verifier {
    int finished;
    struct verify_result res;
    size_t div_cap;
    /* The current id's group; id == NULL when none is open. */
    char *id, *kernel, *key, *arch, *decided;
    struct row *rows;
    size_t n_rows, rows_cap;
    struct idset seen;
};

static char *dup_str(const char *s) {
    if (s == NULL)
        s = "";
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d != NULL)
        memcpy(d, s, n);
    return d;
}

static uint64_t hash_str(const char *s) {
    uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a */
    for (; *s != '\0'; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ULL;
    }
    return h ^ (h >> 29);
}

static int idset_has(const struct idset *s, const char *id) {
    if (s->cap == 0)
        return 0;
    for (size_t i = hash_str(id) & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
        if (s->slot[i] == NULL)
            return 0;
        if (strcmp(s->slot[i], id) == 0)
            return 1;
    }
}

static void idset_put(struct idset *s, char *id) {
    size_t i = hash_str(id) & (s->cap - 1);
    while (s->slot[i] != NULL)
        i = (i + 1) & (s->cap - 1);
    s->slot[i] = id;
    s->n++;
}

/* Room for one more id at a load factor of at most 1/2. */
static int idset_reserve(struct idset *s) {
    if ((s->n + 1) * 2 <= s->cap)
        return 0;
    struct idset g = {NULL, s->cap > 0 ? s->cap * 2 : 64, 0};
    g.slot = calloc(g.cap, sizeof(*g.slot));
    if (g.slot == NULL)
        return DETD_ENOMEM;
    for (size_t i = 0; i < s->cap; i++)
        if (s->slot[i] != NULL)
            idset_put(&g, s->slot[i]);
    free(s->slot);
    *s = g;
    return 0;
}

static void idset_free(struct idset *s) {
    for (size_t i = 0; i < s->cap; i++)
        free(s->slot[i]);
    free(s->slot);
    memset(s, 0, sizeof(*s));
}

static int streq_opt(const char *a, const char *b) {
    if (a == NULL || b == NULL)
        return a == b;
    return strcmp(a, b) == 0;
}

/* Order of uses and of clients within a use. */
static int row_cmp(const void *pa, const void *pb) {
    const struct row *a = pa, *b = pb;
    int c = strcmp(a->config, b->config);
    if (c != 0)
        return c;
    c = strcmp(a->host, b->host);
    if (c != 0)
        return c;
    if (a->rank != b->rank)
        return a->rank < b->rank ? -1 : 1;
    if (a->pid != b->pid)
        return a->pid < b->pid ? -1 : 1;
    if (a->local_rank != b->local_rank)
        return a->local_rank < b->local_rank ? -1 : 1;
    return 0;
}

static int same_client(const struct row *a, const struct row *b) {
    return strcmp(a->host, b->host) == 0 && a->rank == b->rank &&
           a->pid == b->pid && a->local_rank == b->local_rank;
}

static void use_clear(struct verify_use *u) {
    free(u->config);
    for (size_t i = 0; i < u->n_clients; i++)
        free(u->clients[i].host);
    free(u->clients);
}

static void divergence_clear(struct verify_divergence *d) {
    free(d->id);
    free(d->kernel);
    free(d->key);
    free(d->arch);
    free(d->decided);
    for (size_t i = 0; i < d->n_uses; i++)
        use_clear(&d->uses[i]);
    free(d->uses);
    free(d->reason);
    memset(d, 0, sizeof(*d));
}

/* Build the uses of rows[0..n) (sorted): one per config. */
static int build_uses(struct row *rows, size_t n, size_t n_uses,
                      struct verify_divergence *d) {
    d->uses = calloc(n_uses, sizeof(*d->uses));
    if (d->uses == NULL)
        return DETD_ENOMEM;
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && strcmp(rows[j].config, rows[i].config) == 0)
            j++;
        struct verify_use *u = &d->uses[d->n_uses++];
        u->config = dup_str(rows[i].config);
        u->clients = calloc(j - i, sizeof(*u->clients));
        if (u->config == NULL || u->clients == NULL)
            return DETD_ENOMEM;
        for (size_t r = i; r < j; r++) {
            u->chaos |= rows[r].chaos != 0;
            /* A process observing the same key twice is listed once. */
            if (r > i && same_client(&rows[r], &rows[r - 1]))
                continue;
            struct verify_client *c = &u->clients[u->n_clients];
            c->host = dup_str(rows[r].host);
            if (c->host == NULL)
                return DETD_ENOMEM;
            c->pid = rows[r].pid;
            c->rank = rows[r].rank;
            c->local_rank = rows[r].local_rank;
            u->n_clients++;
        }
        i = j;
    }
    return 0;
}

static void group_clear(verifier *v) {
    for (size_t i = 0; i < v->n_rows; i++) {
        free(v->rows[i].config);
        free(v->rows[i].host);
    }
    v->n_rows = 0;
    free(v->id);
    free(v->kernel);
    free(v->key);
    free(v->arch);
    free(v->decided);
    v->id = v->kernel = v->key = v->arch = v->decided = NULL;
}

/* Check the open group and close it. On error nothing changed. */
static int group_close(verifier *v) {
    if (v->id == NULL)
        return 0;
    if (idset_reserve(&v->seen) < 0)
        return DETD_ENOMEM;
    qsort(v->rows, v->n_rows, sizeof(*v->rows), row_cmp);
    size_t n_uses = 0;
    for (size_t i = 0; i < v->n_rows; i++)
        if (i == 0 || strcmp(v->rows[i].config, v->rows[i - 1].config) != 0)
            n_uses++;
    const char *reason = NULL;
    if (n_uses > 1)
        reason = "ranks disagree";
    else if (n_uses == 1 && v->decided != NULL &&
             strcmp(v->rows[0].config, v->decided) != 0)
        reason = "differs from decision";

    if (reason != NULL) {
        if (v->res.n_divergences == v->div_cap) {
            size_t cap = v->div_cap > 0 ? v->div_cap * 2 : 16;
            struct verify_divergence *a =
                realloc(v->res.divergences, cap * sizeof(*a));
            if (a == NULL)
                return DETD_ENOMEM;
            v->res.divergences = a;
            v->div_cap = cap;
        }
        struct verify_divergence d = {0};
        d.id = dup_str(v->id);
        d.kernel = dup_str(v->kernel);
        d.key = dup_str(v->key);
        d.arch = dup_str(v->arch);
        d.reason = dup_str(reason);
        if (v->decided != NULL)
            d.decided = dup_str(v->decided);
        if (d.id == NULL || d.kernel == NULL || d.key == NULL ||
            d.arch == NULL || d.reason == NULL ||
            (v->decided != NULL && d.decided == NULL) ||
            build_uses(v->rows, v->n_rows, n_uses, &d) < 0) {
            divergence_clear(&d);
            return DETD_ENOMEM;
        }
        v->res.divergences[v->res.n_divergences++] = d;
    }
    idset_put(&v->seen, v->id);
    v->id = NULL; /* now owned by the set */
    group_clear(v);
    return 0;
}

/* See verify.h. */
int verify_new(verifier **ret) {
    if (ret == NULL)
        return DETD_EINVAL;
    verifier *v = calloc(1, sizeof(*v));
    if (v == NULL)
        return DETD_ENOMEM;
    *ret = v;
    return 0;
}

/* See verify.h. o's strings and decided are borrowed for the call. */
int verify_add(verifier *v, const struct verify_obs *o, const char *decided) {
    if (v == NULL || o == NULL || o->id == NULL || o->config == NULL ||
        v->finished)
        return DETD_EINVAL;
    int rc;
    if (v->id != NULL && strcmp(v->id, o->id) == 0) {
        /* The committed config of one id cannot change between rows. */
        if (!streq_opt(v->decided, decided))
            return DETD_EINVAL;
    } else {
        if (idset_has(&v->seen, o->id))
            return DETD_EINVAL;
        rc = group_close(v);
        if (rc < 0)
            return rc;
        char *id = dup_str(o->id), *kernel = dup_str(o->kernel);
        char *key = dup_str(o->key), *arch = dup_str(o->arch);
        char *dec = decided != NULL ? dup_str(decided) : NULL;
        if (id == NULL || kernel == NULL || key == NULL || arch == NULL ||
            (decided != NULL && dec == NULL)) {
            free(id);
            free(kernel);
            free(key);
            free(arch);
            free(dec);
            return DETD_ENOMEM;
        }
        v->id = id;
        v->kernel = kernel;
        v->key = key;
        v->arch = arch;
        v->decided = dec;
        v->res.keys_checked++;
    }
    if (o->governed || o->must_agree) {
        if (v->n_rows == v->rows_cap) {
            size_t cap = v->rows_cap > 0 ? v->rows_cap * 2 : 16;
            struct row *r = realloc(v->rows, cap * sizeof(*r));
            if (r == NULL)
                return DETD_ENOMEM;
            v->rows = r;
            v->rows_cap = cap;
        }
        struct row *r = &v->rows[v->n_rows];
        r->config = dup_str(o->config);
        r->host = dup_str(o->host);
        if (r->config == NULL || r->host == NULL) {
            free(r->config);
            free(r->host);
            return DETD_ENOMEM;
        }
        r->pid = o->pid;
        r->rank = o->rank;
        r->local_rank = o->local_rank;
        r->chaos = o->chaos != 0;
        v->n_rows++;
    }
    if (!o->governed)
        v->res.ungoverned++;
    v->res.observations++;
    return 0;
}

/* See verify.h. */
int verify_finish(verifier *v, struct verify_result *ret) {
    if (v == NULL || ret == NULL || v->finished)
        return DETD_EINVAL;
    int rc = group_close(v);
    if (rc < 0)
        return rc;
    *ret = v->res;
    memset(&v->res, 0, sizeof(v->res));
    v->div_cap = 0;
    v->finished = 1;
    return 0;
}

/* See verify.h. */
void verify_result_clear(struct verify_result *r) {
    if (r == NULL)
        return;
    for (size_t i = 0; i < r->n_divergences; i++)
        divergence_clear(&r->divergences[i]);
    free(r->divergences);
    memset(r, 0, sizeof(*r));
}

/* See verify.h. */
void verify_free(verifier *v) {
    if (v == NULL)
        return;
    group_clear(v);
    free(v->rows);
    idset_free(&v->seen);
    verify_result_clear(&v->res);
    free(v);
}
