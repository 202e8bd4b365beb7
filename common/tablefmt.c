/*
 * tablefmt: parsing, validation and rendering of one table document.
 * See tablefmt.h for the format and the contracts.
 */
#define _GNU_SOURCE
#include "tablefmt.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "detd/error.h"

/* A growable string; on allocation failure oom is set and it stays so. */
struct sbuf {
    char *s;
    size_t n, cap;
    int oom;
};

static void sb_add(struct sbuf *b, const char *s, size_t n) {
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->s, cap);
        if (p == NULL) {
            b->oom = 1;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = '\0';
}

static void sb_str(struct sbuf *b, const char *s) {
    sb_add(b, s, strlen(s));
}

/* Set *ret (if ret is not NULL) to a formatted heap message. */
static void set_err(char **ret, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void set_err(char **ret, const char *fmt, ...) {
    if (ret == NULL)
        return;
    va_list ap;
    va_start(ap, fmt);
    if (vasprintf(ret, fmt, ap) < 0)
        *ret = NULL;
    va_end(ap);
}

/* See tablefmt.h. */
void tablefmt_default_limits(struct tablefmt_limits *ret) {
    ret->max_file_bytes = TABLEFMT_MAX_FILE_BYTES;
    ret->max_name = TABLEFMT_MAX_NAME;
    ret->max_entries = TABLEFMT_MAX_ENTRIES;
    ret->any_name = 0;
}

/* See tablefmt.h. */
int tablefmt_arch_valid(const char *arch) {
    if (arch == NULL || strncmp(arch, "sm", 2) != 0)
        return 0;
    const char *p = arch + 2;
    size_t digits = 0;
    while (p[digits] >= '0' && p[digits] <= '9')
        digits++;
    if (digits < 2 || digits > 3)
        return 0;
    p += digits;
    if (*p >= 'a' && *p <= 'z')
        p++;
    return *p == '\0';
}

/* See tablefmt.h. */
char *tablefmt_repr_double(double v, char *buf, size_t size) {
    if (isnan(v)) {
        snprintf(buf, size, "nan");
        return buf;
    }
    if (isinf(v)) {
        snprintf(buf, size, v < 0 ? "-inf" : "inf");
        return buf;
    }
    /* The shortest %e form that reads back as v: Python's 'r' digits. */
    char e[40];
    for (int prec = 0; prec < 17; prec++) {
        snprintf(e, sizeof(e), "%.*e", prec, v);
        if (strtod(e, NULL) == v)
            break;
    }
    /* e = [-]d[.ddd]e[+-]XX */
    const char *p = e;
    int neg = 0;
    if (*p == '-') {
        neg = 1;
        p++;
    }
    char digits[24];
    size_t nd = 0;
    for (; *p != 'e'; p++)
        if (*p != '.' && nd + 1 < sizeof(digits))
            digits[nd++] = *p;
    digits[nd] = '\0';
    int exp10 = atoi(p + 1);
    /* Drop trailing zeros (keep one digit). */
    while (nd > 1 && digits[nd - 1] == '0')
        digits[--nd] = '\0';
    int decpt = exp10 + 1; /* digits[0] sits before this many places */
    struct sbuf b = {0};
    char tmp[16];
    if (neg)
        sb_str(&b, "-");
    if (v == 0) {
        sb_str(&b, "0.0");
    } else if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            sb_str(&b, "0.");
            for (int i = 0; i < -decpt; i++)
                sb_str(&b, "0");
            sb_str(&b, digits);
        } else if ((size_t)decpt >= nd) {
            sb_str(&b, digits);
            for (size_t i = nd; i < (size_t)decpt; i++)
                sb_str(&b, "0");
            sb_str(&b, ".0");
        } else {
            sb_add(&b, digits, (size_t)decpt);
            sb_str(&b, ".");
            sb_str(&b, digits + decpt);
        }
    } else {
        sb_add(&b, digits, 1);
        if (nd > 1) {
            sb_str(&b, ".");
            sb_str(&b, digits + 1);
        }
        snprintf(tmp, sizeof(tmp), "e%c%02d", exp10 < 0 ? '-' : '+',
                 exp10 < 0 ? -exp10 : exp10);
        sb_str(&b, tmp);
    }
    snprintf(buf, size, "%s", b.oom || b.s == NULL ? "nan" : b.s);
    free(b.s);
    return buf;
}

/* Render one kwargs value; returns 0 or -1 (not a scalar). */
static int render_value(struct sbuf *b, const json_t *v) {
    char tmp[64];
    if (json_is_integer(v)) {
        snprintf(tmp, sizeof(tmp), "%" JSON_INTEGER_FORMAT,
                 json_integer_value(v));
        sb_str(b, tmp);
    } else if (json_is_real(v)) {
        sb_str(b, tablefmt_repr_double(json_real_value(v), tmp, sizeof(tmp)));
    } else if (json_is_true(v)) {
        sb_str(b, "True");
    } else if (json_is_false(v)) {
        sb_str(b, "False");
    } else if (json_is_null(v)) {
        sb_str(b, "None");
    } else if (json_is_string(v)) {
        sb_add(b, json_string_value(v), json_string_length(v));
    } else {
        return -1;
    }
    return 0;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* See tablefmt.h. */
int tablefmt_render_entry(const json_t *entry, const char *where,
                          char **ret_config, char **ret_errmsg) {
    int rc = DETD_EINVAL;
    const char **names = NULL;
    struct sbuf b = {0};
    if (!json_is_object(entry)) {
        set_err(ret_errmsg, "%s: expected an object", where);
        return DETD_EINVAL;
    }
    const char *name;
    json_t *v;
    json_object_foreach((json_t *)entry, name, v) {
        if (strcmp(name, "kwargs") != 0 && strcmp(name, "num_warps") != 0 &&
            strcmp(name, "num_stages") != 0 && strcmp(name, "num_ctas") != 0 &&
            strcmp(name, "maxnreg") != 0 && strcmp(name, "ir_override") != 0) {
            set_err(ret_errmsg,
                    "%s.%.200s: unknown member (an entry has kwargs, "
                    "num_warps, num_stages, num_ctas, maxnreg, ir_override)",
                    where, name);
            goto out;
        }
    }
    const json_t *kw = json_object_get(entry, "kwargs");
    if (kw == NULL || !json_is_object(kw)) {
        set_err(ret_errmsg, "%s.kwargs: %s", where,
                kw == NULL ? "missing (an object is required)"
                           : "expected an object");
        goto out;
    }
    static const char *const opts[] = {"num_warps", "num_stages", "num_ctas",
                                       "maxnreg"};
    for (int i = 0; i < 4; i++) {
        const json_t *o = json_object_get(entry, opts[i]);
        if (o == NULL && i < 2) {
            set_err(ret_errmsg, "%s.%s: missing (an integer is required)",
                    where, opts[i]);
            goto out;
        }
        if (o != NULL && !json_is_integer(o) && !(i == 3 && json_is_null(o))) {
            set_err(ret_errmsg, "%s.%s: expected an integer%s", where, opts[i],
                    i == 3 ? " or null" : "");
            goto out;
        }
    }
    const json_t *ir = json_object_get(entry, "ir_override");
    if (ir != NULL && !json_is_null(ir)) {
        set_err(ret_errmsg, "%s.ir_override: only null is supported", where);
        goto out;
    }
    size_t n = json_object_size(kw), i = 0;
    names = calloc(n ? n : 1, sizeof(*names));
    if (names == NULL) {
        rc = DETD_ENOMEM;
        set_err(ret_errmsg, "%s: out of memory", where);
        goto out;
    }
    json_object_foreach((json_t *)kw, name, v) {
        if (!json_is_integer(v) && !json_is_real(v) && !json_is_boolean(v) &&
            !json_is_string(v) && !json_is_null(v)) {
            set_err(ret_errmsg,
                    "%s.kwargs.%.200s: expected an integer, real, bool, "
                    "string or null",
                    where, name);
            goto out;
        }
        names[i++] = name;
    }
    qsort(names, n, sizeof(*names), cmp_str);
    for (i = 0; i < n; i++) {
        if (i > 0)
            sb_str(&b, ",");
        sb_str(&b, names[i]);
        sb_str(&b, "=");
        render_value(&b, json_object_get(kw, names[i]));
    }
    for (int k = 0; k < 4; k++) {
        const json_t *o = json_object_get(entry, opts[k]);
        json_int_t val;
        if (k == 2 && o == NULL)
            val = 1; /* num_ctas defaults to 1 */
        else if (o == NULL || json_is_null(o))
            continue;
        else
            val = json_integer_value(o);
        char tmp[64];
        snprintf(tmp, sizeof(tmp), "%s%s=%" JSON_INTEGER_FORMAT,
                 b.n > 0 ? "," : "", opts[k], val);
        sb_str(&b, tmp);
    }
    if (b.oom) {
        rc = DETD_ENOMEM;
        set_err(ret_errmsg, "%s: out of memory", where);
        goto out;
    }
    *ret_config = b.s;
    b.s = NULL;
    rc = 0;
out:
    free(b.s);
    free(names);
    return rc;
}

void tablefmt_free(struct tablefmt_doc *doc) {
    if (doc == NULL)
        return;
    for (size_t i = 0; i < doc->n_entries; i++)
        free(doc->entries[i].config);
    free(doc->entries);
    json_decref(doc->root);
    free(doc);
}

/* The last path component. */
static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s != NULL ? s + 1 : path;
}

/* Optional top-level string member: 0, or -1 with the message set. */
static int opt_string(const char *name, const json_t *root, const char *m,
                      const char **ret, char **ret_errmsg) {
    const json_t *v = json_object_get(root, m);
    *ret = NULL;
    if (v == NULL)
        return 0;
    if (!json_is_string(v)) {
        set_err(ret_errmsg, "%s: %s: expected a string", name, m);
        return -1;
    }
    *ret = json_string_value(v);
    return 0;
}

/* See tablefmt.h. */
int tablefmt_parse(const char *name, const void *buf, size_t len,
                   const struct tablefmt_limits *lim, struct tablefmt_doc **ret,
                   char **ret_errmsg) {
    struct tablefmt_limits dl;
    if (lim == NULL) {
        tablefmt_default_limits(&dl);
        lim = &dl;
    }
    if (ret_errmsg != NULL)
        *ret_errmsg = NULL;
    if (name == NULL || (buf == NULL && len > 0) || ret == NULL) {
        set_err(ret_errmsg, "tablefmt_parse: invalid argument");
        return DETD_EINVAL;
    }
    if (len > lim->max_file_bytes) {
        set_err(ret_errmsg,
                "%s: %zu bytes, over the table file cap of %zu bytes", name,
                len, lim->max_file_bytes);
        return DETD_ELIMIT;
    }
    int rc = DETD_EINVAL;
    char *where = NULL;
    struct tablefmt_doc *doc = calloc(1, sizeof(*doc));
    if (doc == NULL) {
        set_err(ret_errmsg, "%s: out of memory", name);
        return DETD_ENOMEM;
    }
    json_error_t jerr;
    doc->root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
    if (doc->root == NULL) {
        set_err(ret_errmsg, "%s: line %d column %d: invalid JSON: %s", name,
                jerr.line, jerr.column, jerr.text);
        goto fail;
    }
    const json_t *root = doc->root;
    if (!json_is_object(root)) {
        set_err(ret_errmsg, "%s: the document must be a JSON object", name);
        goto fail;
    }
    if (opt_string(name, root, "format", &doc->format, ret_errmsg) ||
        opt_string(name, root, "triton", &doc->triton, ret_errmsg) ||
        opt_string(name, root, "source", &doc->source, ret_errmsg))
        goto fail;
    if (doc->format != NULL && strcmp(doc->format, TABLEFMT_FORMAT) != 0) {
        set_err(ret_errmsg, "%s: format: '%.100s' is not %s", name, doc->format,
                TABLEFMT_FORMAT);
        goto fail;
    }
    const json_t *arch = json_object_get(root, "arch");
    if (arch == NULL || !json_is_string(arch)) {
        set_err(ret_errmsg, "%s: arch: %s", name,
                arch == NULL ? "missing (a string such as \"sm90\" is "
                               "required)"
                             : "expected a string");
        goto fail;
    }
    doc->arch = json_string_value(arch);
    if (!tablefmt_arch_valid(doc->arch)) {
        set_err(ret_errmsg,
                "%s: arch: unknown architecture '%.100s' (expected sm "
                "followed by 2 or 3 digits and an optional letter, e.g. "
                "sm90, sm100a)",
                name, doc->arch);
        goto fail;
    }
    const char *bn = base_name(name);
    size_t al = strlen(doc->arch);
    if (!lim->any_name &&
        (strncmp(bn, doc->arch, al) != 0 || strcmp(bn + al, ".json") != 0)) {
        set_err(ret_errmsg,
                "%s: arch: '%s' does not match the file name (an %s table "
                "must be named %s.json)",
                name, doc->arch, doc->arch, doc->arch);
        goto fail;
    }
    doc->packages = json_object_get(root, "packages");
    if (doc->packages != NULL) {
        const char *pn;
        json_t *pv;
        if (!json_is_object(doc->packages)) {
            set_err(ret_errmsg, "%s: packages: expected an object", name);
            goto fail;
        }
        json_object_foreach((json_t *)doc->packages, pn, pv) {
            if (!json_is_string(pv)) {
                set_err(ret_errmsg,
                        "%s: packages.\"%.200s\": expected a string", name, pn);
                goto fail;
            }
        }
    }
    const json_t *prov = json_object_get(root, "provenance");
    if (prov != NULL && !json_is_object(prov)) {
        set_err(ret_errmsg, "%s: provenance: expected an object", name);
        goto fail;
    }
    const json_t *kernels = json_object_get(root, "kernels");
    if (kernels == NULL || !json_is_object(kernels)) {
        set_err(ret_errmsg, "%s: kernels: %s", name,
                kernels == NULL ? "missing (an object is required)"
                                : "expected an object");
        goto fail;
    }
    /* Count first: the cap is checked before anything is rendered. */
    size_t total = 0;
    const char *kn;
    json_t *kv;
    json_object_foreach((json_t *)kernels, kn, kv) {
        size_t kl = strlen(kn);
        if (kl == 0 || kl > lim->max_name) {
            rc = kl == 0 ? DETD_EINVAL : DETD_ELIMIT;
            set_err(ret_errmsg,
                    "%s: kernels: a kernel name of %zu bytes (must be 1 to "
                    "%zu, the kernel name cap)",
                    name, kl, lim->max_name);
            goto fail;
        }
        if (!json_is_object(kv)) {
            set_err(ret_errmsg, "%s: kernels.\"%.200s\": expected an object",
                    name, kn);
            goto fail;
        }
        total += json_object_size(kv);
        if (total > lim->max_entries) {
            rc = DETD_ELIMIT;
            set_err(ret_errmsg,
                    "%s: kernels: more than %zu entries, over the entries "
                    "cap of a table file",
                    name, lim->max_entries);
            goto fail;
        }
    }
    doc->entries = calloc(total ? total : 1, sizeof(*doc->entries));
    if (doc->entries == NULL) {
        rc = DETD_ENOMEM;
        set_err(ret_errmsg, "%s: out of memory", name);
        goto fail;
    }
    json_object_foreach((json_t *)kernels, kn, kv) {
        const char *key;
        json_t *ev;
        const json_t *kprov = prov != NULL ? json_object_get(prov, kn) : NULL;
        json_object_foreach(kv, key, ev) {
            size_t kl = strlen(key);
            if (kl == 0 || kl > lim->max_name) {
                rc = kl == 0 ? DETD_EINVAL : DETD_ELIMIT;
                set_err(ret_errmsg,
                        "%s: kernels.\"%.200s\": a key of %zu bytes (must be "
                        "1 to %zu, the key cap)",
                        name, kn, kl, lim->max_name);
                goto fail;
            }
            free(where);
            if (asprintf(&where, "%s: kernels.\"%.200s\".\"%.200s\"", name, kn,
                         key) < 0) {
                where = NULL;
                rc = DETD_ENOMEM;
                set_err(ret_errmsg, "%s: out of memory", name);
                goto fail;
            }
            struct tablefmt_entry *e = &doc->entries[doc->n_entries];
            rc = tablefmt_render_entry(ev, where, &e->config, ret_errmsg);
            if (rc != 0)
                goto fail;
            doc->n_entries++;
            e->kernel = kn;
            e->key = key;
            e->raw = ev;
            e->provenance =
                json_is_object(kprov) ? json_object_get(kprov, key) : NULL;
        }
    }
    free(where);
    *ret = doc;
    return 0;
fail:
    free(where);
    tablefmt_free(doc);
    if (rc == 0)
        rc = DETD_EINVAL;
    return rc;
}

/* See tablefmt.h. */
int tablefmt_read_file(const char *path, const struct tablefmt_limits *lim,
                       struct tablefmt_doc **ret, char **ret_errmsg) {
    struct tablefmt_limits dl;
    if (lim == NULL) {
        tablefmt_default_limits(&dl);
        lim = &dl;
    }
    if (ret_errmsg != NULL)
        *ret_errmsg = NULL;
    int rc;
    char *buf = NULL;
    size_t n = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = -errno;
        set_err(ret_errmsg, "%s: cannot open: %s", path, strerror(errno));
        return rc;
    }
    /* Read up to one byte past the cap, so that size never lies. */
    size_t cap = lim->max_file_bytes;
    size_t bufsz = 0;
    for (;;) {
        if (n == bufsz) {
            size_t want = bufsz ? bufsz * 2 : 65536;
            if (want > cap + 1)
                want = cap + 1;
            if (want <= bufsz) {
                rc = DETD_ELIMIT;
                set_err(ret_errmsg, "%s: over the table file cap of %zu bytes",
                        path, cap);
                goto out;
            }
            char *p = realloc(buf, want);
            if (p == NULL) {
                rc = DETD_ENOMEM;
                set_err(ret_errmsg, "%s: out of memory", path);
                goto out;
            }
            buf = p;
            bufsz = want;
        }
        ssize_t r = read(fd, buf + n, bufsz - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = -errno;
            set_err(ret_errmsg, "%s: read: %s", path, strerror(errno));
            goto out;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    if (n > cap) {
        rc = DETD_ELIMIT;
        set_err(ret_errmsg, "%s: over the table file cap of %zu bytes", path,
                cap);
        goto out;
    }
    rc = tablefmt_parse(path, buf, n, lim, ret, ret_errmsg);
out:
    free(buf);
    close(fd);
    return rc;
}

static const char *const cfg_options[4] = {"num_warps", "num_stages",
                                           "num_ctas", "maxnreg"};

/* A decimal integer exactly as Python's str(int) writes it. */
static int cfg_parse_int(const char *s, long long *ret) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0')
        return -1;
    char back[32];
    snprintf(back, sizeof back, "%lld", v);
    if (strcmp(back, s) != 0)
        return -1;
    *ret = v;
    return 0;
}

/* A config value as _canon._value() renders it, back to JSON. */
static json_t *cfg_value(const char *name, const char *v, char **err) {
    long long i;
    if (strcmp(v, "True") == 0)
        return json_true();
    if (strcmp(v, "False") == 0)
        return json_false();
    if (strcmp(v, "None") == 0)
        return json_null();
    if (cfg_parse_int(v, &i) == 0)
        return json_integer(i);
    if (strpbrk(v, ".eE") != NULL || strstr(v, "inf") != NULL ||
        strcmp(v, "nan") == 0) {
        char *end = NULL;
        double d = strtod(v, &end);
        if (end != v && *end == '\0') {
            if (!isfinite(d)) {
                set_err(err,
                        "kwarg %s = %s is not a finite number (JSON has "
                        "none)",
                        name, v);
                return NULL;
            }
            return json_real(d);
        }
    }
    return json_string(v);
}

/* See tablefmt.h. */
int tablefmt_entry_from_config(const char *config, json_t **ret, char **err) {
    long long opt[4] = {0};
    int have[4] = {0}, stage = 0, rc = DETD_EINVAL;
    const char *prev = NULL;
    json_t *kw = json_object(), *entry = NULL;
    char *copy = strdup(config != NULL ? config : "");
    if (kw == NULL || copy == NULL) {
        set_err(err, "out of memory");
        goto out;
    }
    if (copy[0] == '\0') {
        set_err(err, "the config string is empty");
        goto out;
    }
    char *rest = copy, *part;
    while ((part = strsep(&rest, ",")) != NULL) {
        char *eq = strchr(part, '=');
        if (eq == NULL || eq == part) {
            set_err(err, "'%.80s' is not NAME=value", part);
            goto out;
        }
        *eq = '\0';
        const char *name = part, *val = eq + 1;
        int idx = -1;
        for (int k = 0; k < 4; k++)
            if (strcmp(name, cfg_options[k]) == 0)
                idx = k;
        if (idx >= 0) {
            if (idx < stage) {
                set_err(err,
                        "%s after %s: not the canonical order "
                        "(num_warps, num_stages, num_ctas, maxnreg)",
                        name, cfg_options[stage - 1]);
                goto out;
            }
            if (cfg_parse_int(val, &opt[idx]) != 0) {
                set_err(err, "%s = %.40s is not an integer", name, val);
                goto out;
            }
            have[idx] = 1;
            stage = idx + 1;
            continue;
        }
        if (stage > 0) {
            set_err(err,
                    "'%.80s' follows the launch options: a field the "
                    "table format has no member for",
                    name);
            goto out;
        }
        if (prev != NULL && strcmp(prev, name) >= 0) {
            set_err(err,
                    "kwargs not sorted by name (%.80s after "
                    "%.80s)",
                    name, prev);
            goto out;
        }
        prev = name;
        json_t *v = cfg_value(name, val, err);
        if (v == NULL || json_object_set_new(kw, name, v) != 0)
            goto out;
    }
    for (int k = 0; k < 3; k++)
        if (!have[k]) {
            set_err(err, "no %s: a table entry needs it", cfg_options[k]);
            goto out;
        }
    entry = json_pack("{s:O, s:I, s:I, s:I, s:o}", "kwargs", kw, "num_warps",
                      (json_int_t)opt[0], "num_stages", (json_int_t)opt[1],
                      "num_ctas", (json_int_t)opt[2], "maxnreg",
                      have[3] ? json_integer(opt[3]) : json_null());
    if (entry == NULL) {
        set_err(err, "out of memory");
        goto out;
    }
    *ret = entry;
    rc = 0;
out:
    json_decref(kw);
    free(copy);
    return rc;
}
