/* detctl_nondet: runtime findings in `detctl verify` (see detctl_nondet.h). */
#define _GNU_SOURCE
#include "detctl_nondet.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "detctl_print.h"

/* The kinds, as the key's kernel names them (daemon/app/validate.c). */
#define KIND_PREFIX "runtime::"

int detctl_nondet_is(const Detd__V1__Observation *x) {
    return x != NULL && x->source == DETD__V1__SOURCE__SOURCE_RUNTIME;
}

static const char *str0(const char *s) {
    return s != NULL ? s : "";
}

/* acc: "kind\nname" -> {kind, name, why, values: {value -> {value,
 * ranks, who}}}. */
int detctl_nondet_add(json_t *acc, const Detd__V1__Observation *x) {
    const char *kernel = str0(x->kernel);
    const char *kind = strncmp(kernel, KIND_PREFIX, strlen(KIND_PREFIX)) == 0
                           ? kernel + strlen(KIND_PREFIX)
                           : kernel;
    char *id = NULL;
    if (asprintf(&id, "%s\n%s", kind, str0(x->key)) < 0)
        return -1;
    json_t *e = json_object_get(acc, id);
    if (e == NULL) {
        e = json_pack("{s:s, s:s, s:s, s:{}}", "kind", kind, "name",
                      str0(x->key), "why", "", "values");
        if (e == NULL || json_object_set_new(acc, id, e) != 0) {
            free(id);
            return -1;
        }
    }
    free(id);
    const char *why = str0(x->why);
    if (why[0] != '\0' && json_string_length(json_object_get(e, "why")) == 0)
        json_object_set_new(e, "why", json_string(why));
    json_t *vals = json_object_get(e, "values");
    json_t *v = json_object_get(vals, str0(x->config));
    if (v == NULL) {
        v = json_pack("{s:s, s:[], s:[]}", "value", str0(x->config), "ranks",
                      "who");
        if (v == NULL || json_object_set_new(vals, str0(x->config), v) != 0)
            return -1;
    }
    char w[160];
    detctl_print_who(x->client, w, sizeof w);
    json_array_append_new(json_object_get(v, "who"), json_string(w));
    int rank = x->client != NULL ? x->client->rank : -1;
    if (rank >= 0)
        json_array_append_new(json_object_get(v, "ranks"), json_integer(rank));
    return 0;
}

static int int_cmp(const void *pa, const void *pb) {
    json_int_t a = *(const json_int_t *)pa, b = *(const json_int_t *)pb;
    return a < b ? -1 : a > b;
}

/* ranks sorted and without repeats, as a new array. */
static json_t *sorted_ranks(json_t *ranks) {
    size_t n = json_array_size(ranks), m = 0;
    json_int_t *r = calloc(n + 1, sizeof(*r));
    json_t *out = json_array();
    if (r == NULL || out == NULL) {
        free(r);
        json_decref(out);
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        r[i] = json_integer_value(json_array_get(ranks, i));
    if (n > 1)
        qsort(r, n, sizeof(*r), int_cmp);
    for (size_t i = 0; i < n; i++)
        if (m == 0 || r[i] != r[m - 1])
            r[m++] = r[i];
    for (size_t i = 0; i < m; i++)
        json_array_append_new(out, json_integer(r[i]));
    free(r);
    return out;
}

/* "ranks 0-3, 5" (sorted ranks), or "N processes" when none has a rank. */
static void ranks_text(json_t *ranks, size_t n_who, char *buf, size_t len) {
    size_t n = json_array_size(ranks), off = 0;
    if (n == 0) {
        snprintf(buf, len, "%zu process%s", n_who, n_who == 1 ? "" : "es");
        return;
    }
    off = (size_t)snprintf(buf, len, "rank%s ", n == 1 ? "" : "s");
    for (size_t i = 0; i < n && off < len;) {
        json_int_t a = json_integer_value(json_array_get(ranks, i)), b = a;
        size_t j = i + 1;
        while (j < n && json_integer_value(json_array_get(ranks, j)) == b + 1)
            b = json_integer_value(json_array_get(ranks, j++));
        off += (size_t)snprintf(buf + off, len - off, "%s%lld", i ? ", " : "",
                                (long long)a);
        if (b != a && off < len)
            off +=
                (size_t)snprintf(buf + off, len - off, "-%lld", (long long)b);
        i = j;
    }
}

/* Values by their lowest rank (none: last), then by value. */
static int value_cmp(const void *pa, const void *pb) {
    json_t *a = *(json_t *const *)pa, *b = *(json_t *const *)pb;
    json_t *ra = json_array_get(json_object_get(a, "ranks"), 0);
    json_t *rb = json_array_get(json_object_get(b, "ranks"), 0);
    if ((ra == NULL) != (rb == NULL))
        return ra == NULL ? 1 : -1;
    if (ra != NULL && json_integer_value(ra) != json_integer_value(rb))
        return json_integer_value(ra) < json_integer_value(rb) ? -1 : 1;
    return strcmp(json_string_value(json_object_get(a, "value")),
                  json_string_value(json_object_get(b, "value")));
}

/* arr sorted in place by cmp. Returns 0, or -1 when out of memory. */
static int sort_array(json_t *arr, int (*cmp)(const void *, const void *)) {
    size_t n = json_array_size(arr);
    json_t **v = calloc(n + 1, sizeof(*v));
    if (v == NULL)
        return -1;
    for (size_t i = 0; i < n; i++)
        v[i] = json_incref(json_array_get(arr, i));
    if (n > 1)
        qsort(v, n, sizeof(*v), cmp);
    json_array_clear(arr);
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, v[i]);
    free(v);
    return 0;
}

static int entry_cmp(const void *pa, const void *pb) {
    json_t *a = *(json_t *const *)pa, *b = *(json_t *const *)pb;
    int c = strcmp(json_string_value(json_object_get(a, "kind")),
                   json_string_value(json_object_get(b, "kind")));
    return c != 0 ? c
                  : strcmp(json_string_value(json_object_get(a, "name")),
                           json_string_value(json_object_get(b, "name")));
}

/* One entry of the "runtime" array from acc's e; NULL: out of memory. */
static json_t *entry_json(json_t *e) {
    json_t *vals = json_array(), *all = json_array();
    json_t *out = NULL;
    const char *vk;
    json_t *v;
    size_t n_who = 0;
    if (vals == NULL || all == NULL)
        goto out;
    json_object_foreach(json_object_get(e, "values"), vk, v) {
        json_t *r = sorted_ranks(json_object_get(v, "ranks"));
        if (r == NULL)
            goto out;
        size_t i;
        json_t *x;
        json_array_foreach(r, i, x) json_array_append(all, x);
        n_who += json_array_size(json_object_get(v, "who"));
        json_array_append_new(vals,
                              json_pack("{s:O, s:o, s:O}", "value",
                                        json_object_get(v, "value"), "ranks", r,
                                        "who", json_object_get(v, "who")));
    }
    json_t *ranks = sorted_ranks(all);
    if (ranks == NULL)
        goto out;
    if (sort_array(vals, value_cmp) != 0) {
        json_decref(ranks);
        goto out;
    }
    const char *kind = json_string_value(json_object_get(e, "kind"));
    const char *name = json_string_value(json_object_get(e, "name"));
    const char *why = json_string_value(json_object_get(e, "why"));
    int differs = json_array_size(vals) > 1;
    char msg[1600], rt[256];
    ranks_text(ranks, n_who, rt, sizeof rt);
    if (differs) {
        size_t off = (size_t)snprintf(
            msg, sizeof msg, "%s %s differs across ranks:", kind, name);
        size_t i;
        json_array_foreach(vals, i, v) {
            char r[256];
            ranks_text(json_object_get(v, "ranks"),
                       json_array_size(json_object_get(v, "who")), r, sizeof r);
            if (off < sizeof msg)
                off += (size_t)snprintf(
                    msg + off, sizeof msg - off, "%s %s (%s)", i ? "," : "",
                    json_string_value(json_object_get(v, "value")), r);
        }
        if (why[0] != '\0' && off < sizeof msg)
            snprintf(msg + off, sizeof msg - off, "; %s", why);
    } else {
        const char *val = json_string_value(
            json_object_get(json_array_get(vals, 0), "value"));
        /* An op's value says nothing beyond its kind: not printed. */
        if (val == NULL || strcmp(kind, "op") == 0)
            val = "";
        snprintf(msg, sizeof msg, "%s %s%s%s (%s)%s%s", kind, name,
                 val[0] ? (strcmp(kind, "setting") == 0 ? "=" : " ") : "", val,
                 rt, why[0] ? ": " : "", why);
    }
    out = json_pack("{s:s, s:s, s:s, s:b, s:b, s:O, s:o, s:s}", "kind", kind,
                    "name", name, "why", why, "nondeterministic",
                    differs || why[0] != '\0', "differs", differs, "values",
                    vals, "ranks", ranks, "message", msg);
out:
    json_decref(vals);
    json_decref(all);
    return out;
}

json_t *detctl_nondet_json(json_t *acc, int strict, json_t *failures,
                           size_t *ret_n) {
    size_t bad = 0;
    json_t *out = json_array();
    const char *key;
    json_t *e;
    if (out == NULL)
        return NULL;
    json_object_foreach(acc, key, e) {
        json_t *j = entry_json(e);
        if (j == NULL || json_array_append_new(out, j) != 0)
            goto oom;
    }
    if (sort_array(out, entry_cmp) != 0)
        goto oom;
    size_t i;
    json_array_foreach(out, i, e) {
        if (!json_is_true(json_object_get(e, "nondeterministic")))
            continue;
        bad++;
        if (strict && failures != NULL)
            json_array_append_new(
                failures, json_pack("{s:s, s:O}", "kind", "nondeterminism",
                                    "message", json_object_get(e, "message")));
    }
    *ret_n = bad;
    return out;
oom:
    json_decref(out);
    return NULL;
}

void detctl_nondet_print(const json_t *doc) {
    json_t *rt = json_object_get(doc, "runtime");
    long long nn = json_integer_value(json_object_get(doc, "nondeterministic"));
    size_t i;
    json_t *e;
    if (json_array_size(rt) == 0)
        return;
    if (nn == 0) {
        /* Nothing breaks bit-identity: the attention backends seen. */
        char line[512] = "";
        size_t off = 0, settings = 0;
        json_array_foreach(rt, i, e) {
            const char *kind = json_string_value(json_object_get(e, "kind"));
            if (strcmp(kind, "setting") == 0) {
                settings++;
                continue;
            }
            if (off < sizeof line)
                off += (size_t)snprintf(
                    line + off, sizeof line - off, "%s%s %s", off ? ", " : "",
                    kind, json_string_value(json_object_get(e, "name")));
        }
        printf("runtime: nothing nondeterministic reported (%s%s%zu "
               "setting%s)\n",
               line, off ? "; " : "", settings, settings == 1 ? "" : "s");
        return;
    }
    /* Configs agree when no failure but these findings' own. */
    int agree = 1;
    json_array_foreach(json_object_get(doc, "failures"), i, e) agree &=
        strcmp(json_string_value(json_object_get(e, "kind")),
               "nondeterminism") == 0;
    long long kc = json_integer_value(json_object_get(doc, "keys_checked"));
    if (agree && kc > 0)
        printf("configs agree (%lld key%s); nondeterminism no config fixes, "
               "on some ranks:\n",
               kc, kc == 1 ? "" : "s");
    else
        printf("nondeterminism no config fixes:\n");
    json_array_foreach(rt, i, e) {
        if (json_is_true(json_object_get(e, "nondeterministic")))
            printf("NONDET %s\n",
                   json_string_value(json_object_get(e, "message")));
    }
}

void detctl_nondet_print_count(const json_t *doc) {
    long long n = json_integer_value(json_object_get(doc, "nondeterministic"));
    if (n > 0)
        printf(", %lld nondeterministic%s", n,
               json_is_true(json_object_get(doc, "strict_determinism"))
                   ? " (--strict-determinism)"
                   : " (not failing: --strict-determinism fails)");
}
