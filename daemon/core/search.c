/*
 * search: the descriptor grammar and the shape rule of a key that names a
 * search (see search.h).
 */
#include "core/search.h"

#include <stdio.h>
#include <string.h>

#define SEARCH_MAX_VALUE 2147483647LL

struct field {
    const char *name;
    size_t len;
    long long lo, hi;
};

struct tune {
    size_t n;
    struct field f[SEARCH_MAX_FIELDS];
};

#define WHY(...)                                                               \
    do {                                                                       \
        if (why != NULL && why_len > 0)                                        \
            snprintf(why, why_len, __VA_ARGS__);                               \
    } while (0)

/* A canonical decimal integer in 1..SEARCH_MAX_VALUE: no sign, no leading
 * zero. */
static int parse_value(const char *s, size_t len, long long *ret) {
    if (len == 0 || len > 10 || s[0] == '0')
        return -1;
    long long v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    if (v > SEARCH_MAX_VALUE)
        return -1;
    *ret = v;
    return 0;
}

static int is_ident(const char *s, size_t len) {
    if (len == 0 || (s[0] >= '0' && s[0] <= '9'))
        return 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!(c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9')))
            return 0;
    }
    return 1;
}

static const char *find(const char *s, const char *end, char c) {
    const char *p = memchr(s, c, (size_t)(end - s));
    return p != NULL ? p : end;
}

/* The tune part's value [s, end): <F>:<lo>-<hi>,... */
static int parse_tune(const char *s, const char *end, struct tune *t, char *why,
                      size_t why_len) {
    t->n = 0;
    while (s <= end) {
        const char *e = find(s, end, ',');
        const char *colon = find(s, e, ':');
        const char *dash = colon < e ? find(colon + 1, e, '-') : e;
        struct field f = {s, (size_t)(colon - s), 0, 0};
        if (!is_ident(f.name, f.len) || dash == e ||
            parse_value(colon + 1, (size_t)(dash - colon - 1), &f.lo) != 0 ||
            parse_value(dash + 1, (size_t)(e - dash - 1), &f.hi) != 0 ||
            f.lo > f.hi) {
            WHY("tune entry '%.*s' is not <field>:<lo>-<hi> (an identifier, "
                "then integers 1 <= lo <= hi <= %lld)",
                (int)(e - s > 200 ? 200 : e - s), s, SEARCH_MAX_VALUE);
            return -1;
        }
        for (size_t i = 0; i < t->n; i++)
            if (t->f[i].len == f.len &&
                memcmp(t->f[i].name, f.name, f.len) == 0) {
                WHY("tune names field '%.*s' twice", (int)f.len, f.name);
                return -1;
            }
        if (t->n == SEARCH_MAX_FIELDS) {
            WHY("tune names more than %d fields", SEARCH_MAX_FIELDS);
            return -1;
        }
        t->f[t->n++] = f;
        s = e + 1;
    }
    return 0;
}

static int parse_desc(const char *d, struct tune *t, char *why,
                      size_t why_len) {
    if (!search_is_descriptor(d)) {
        WHY("does not begin with '" SEARCH_PREFIX "'");
        return -1;
    }
    const char *end = d + strlen(d);
    const char *p = d + strlen(SEARCH_PREFIX);
    const char *e = find(p, end, ';');
    if (e == p) {
        WHY("names no method (search:<method>;tune=...)");
        return -1;
    }
    int tuned = 0;
    while (e < end) {
        p = e + 1;
        e = find(p, end, ';');
        const char *eq = find(p, e, '=');
        if (eq == p || eq + 1 >= e) {
            WHY("part '%.*s' is not <name>=<value>",
                (int)(e - p > 200 ? 200 : e - p), p);
            return -1;
        }
        if (eq - p == 4 && memcmp(p, "tune", 4) == 0) {
            if (tuned) {
                WHY("names tune twice");
                return -1;
            }
            if (parse_tune(eq + 1, e, t, why, why_len) != 0)
                return -1;
            tuned = 1;
        }
    }
    if (!tuned) {
        WHY("has no part tune=<field>:<lo>-<hi>,...");
        return -1;
    }
    return 0;
}

static const struct field *tuned_field(const struct tune *t, const char *name,
                                       size_t len) {
    for (size_t i = 0; i < t->n; i++)
        if (t->f[i].len == len && memcmp(t->f[i].name, name, len) == 0)
            return &t->f[i];
    return NULL;
}

/* See search.h. */
int search_check_key(const char *const *cands, size_t n, int *ret_desc,
                     char *why, size_t why_len) {
    int desc = -1;
    for (size_t i = 0; i < n; i++) {
        if (!search_is_descriptor(cands[i]))
            continue;
        if (desc >= 0) {
            WHY("[%d] and [%zu] both name a search (" SEARCH_PREFIX
                "...): a key names at most one",
                desc, i);
            return -1;
        }
        desc = (int)i;
    }
    if (desc < 0) {
        *ret_desc = -1;
        return 0;
    }
    if (n != 2) {
        WHY("[%d] names a search: the key must hold it and the config it "
            "starts from, 2 candidates, not %zu",
            desc, n);
        return -1;
    }
    struct tune t;
    char sub[320];
    if (parse_desc(cands[desc], &t, sub, sizeof sub) != 0) {
        WHY("[%d] names a search but %s", desc, sub);
        return -1;
    }
    int si = desc == 0 ? 1 : 0;
    const char *start = cands[si];
    const char *end = start + strlen(start);
    for (size_t k = 0; k < t.n; k++) {
        const struct field *f = &t.f[k];
        int seen = 0;
        for (const char *p = start; p <= end;) {
            const char *e = find(p, end, ',');
            long long v;
            if ((size_t)(e - p) > f->len && p[f->len] == '=' &&
                memcmp(p, f->name, f->len) == 0) {
                if (seen++ ||
                    parse_value(p + f->len + 1, (size_t)(e - p) - f->len - 1,
                                &v) != 0 ||
                    v < f->lo || v > f->hi) {
                    WHY("[%d], the search's start, must hold %.*s once as an "
                        "integer in %lld-%lld",
                        si, (int)f->len, f->name, f->lo, f->hi);
                    return -1;
                }
            }
            p = e + 1;
        }
        if (!seen) {
            WHY("[%d], the search's start, has no field %.*s, which the "
                "search tunes",
                si, (int)f->len, f->name);
            return -1;
        }
    }
    *ret_desc = desc;
    return 0;
}

/* See search.h. */
int search_config_ok(const char *desc, const char *start, const char *config,
                     char *why, size_t why_len) {
    struct tune t;
    char sub[320];
    if (parse_desc(desc, &t, sub, sizeof sub) != 0) {
        WHY("the key's search %s", sub);
        return 0;
    }
    const char *s = start, *s_end = start + strlen(start);
    const char *c = config, *c_end = config + strlen(config);
    for (size_t i = 0;; i++) {
        const char *se = find(s, s_end, ','), *ce = find(c, c_end, ',');
        size_t sl = (size_t)(se - s), cl = (size_t)(ce - c);
        if (sl != cl || memcmp(s, c, sl) != 0) {
            const char *eq = find(s, se, '=');
            const struct field *f =
                eq < se ? tuned_field(&t, s, (size_t)(eq - s)) : NULL;
            long long v;
            if (f == NULL) {
                WHY("part %zu '%.*s' differs from the start's '%.*s', a field "
                    "the search does not tune",
                    i, (int)(cl > 200 ? 200 : cl), c,
                    (int)(sl > 200 ? 200 : sl), s);
                return 0;
            }
            if (cl <= f->len || c[f->len] != '=' ||
                memcmp(c, f->name, f->len) != 0 ||
                parse_value(c + f->len + 1, cl - f->len - 1, &v) != 0 ||
                v < f->lo || v > f->hi) {
                WHY("part %zu '%.*s' is not %.*s=<integer in %lld-%lld>", i,
                    (int)(cl > 200 ? 200 : cl), c, (int)f->len, f->name, f->lo,
                    f->hi);
                return 0;
            }
        }
        if ((se == s_end) != (ce == c_end)) {
            WHY("has %s parts than the start config",
                se == s_end ? "more" : "fewer");
            return 0;
        }
        if (se == s_end)
            return 1;
        s = se + 1;
        c = ce + 1;
    }
}
