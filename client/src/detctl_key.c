/* detctl_key: --kernel patterns and Triton's printed keys (see the header). */
#define _GNU_SOURCE
#include "detctl_key.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* See detctl_key.h. */
enum detctl_kernel_form detctl_kernel_form(const char *pattern) {
    if (strchr(pattern, '@') != NULL)
        return DETCTL_KERNEL_ID;
    if (strchr(pattern, ':') != NULL)
        return DETCTL_KERNEL_QUALNAME;
    return DETCTL_KERNEL_BARE;
}

/* See detctl_key.h. */
int detctl_kernel_match(const char *pattern, const char *kernel_id) {
    if (pattern == NULL || kernel_id == NULL)
        return 0;
    const char *at = strchr(kernel_id, '@');
    size_t base = at != NULL ? (size_t)(at - kernel_id) : strlen(kernel_id);
    switch (detctl_kernel_form(pattern)) {
    case DETCTL_KERNEL_ID:
        return strcmp(pattern, kernel_id) == 0;
    case DETCTL_KERNEL_QUALNAME:
        return strlen(pattern) == base &&
               strncmp(pattern, kernel_id, base) == 0;
    case DETCTL_KERNEL_BARE:
    default: {
        const char *colon = memchr(kernel_id, ':', base);
        const char *q = colon != NULL ? colon + 1 : kernel_id;
        size_t qn = (size_t)(kernel_id + base - q), pn = strlen(pattern);
        if (pn == 0 || pn > qn)
            return 0;
        if (memcmp(q + qn - pn, pattern, pn) != 0)
            return 0;
        return pn == qn || q[qn - pn - 1] == '.';
    }
    }
}

/* The output being built, and the parse position. */
struct kparse {
    const char *s, *p;
    char *out;
    size_t n, cap;
    int oom;
    char *err;
    size_t errlen;
};

static void put(struct kparse *k, const char *s, size_t n) {
    if (k->oom)
        return;
    if (k->n + n + 1 > k->cap) {
        size_t cap = k->cap ? k->cap * 2 : 64;
        while (cap < k->n + n + 1)
            cap *= 2;
        char *o = realloc(k->out, cap);
        if (o == NULL) {
            k->oom = 1;
            return;
        }
        k->out = o;
        k->cap = cap;
    }
    memcpy(k->out + k->n, s, n);
    k->n += n;
    k->out[k->n] = '\0';
}

static void puts_(struct kparse *k, const char *s) {
    put(k, s, strlen(s));
}

__attribute__((format(printf, 2, 3))) static int fail(struct kparse *k,
                                                      const char *fmt, ...) {
    char msg[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(k->err, k->errlen, "at offset %zu: %s", (size_t)(k->p - k->s),
             msg);
    return -1;
}

static void skip_ws(struct kparse *k) {
    while (*k->p == ' ' || *k->p == '\t' || *k->p == '\n')
        k->p++;
}

/* JSON-escape code point c (ASCII output, as json.dumps(ensure_ascii)). */
static void put_json_cp(struct kparse *k, uint32_t c) {
    char b[16];
    switch (c) {
    case '"':
        puts_(k, "\\\"");
        return;
    case '\\':
        puts_(k, "\\\\");
        return;
    case '\n':
        puts_(k, "\\n");
        return;
    case '\r':
        puts_(k, "\\r");
        return;
    case '\t':
        puts_(k, "\\t");
        return;
    case '\b':
        puts_(k, "\\b");
        return;
    case '\f':
        puts_(k, "\\f");
        return;
    default:
        break;
    }
    if (c < 0x20 || (c >= 0x7f && c < 0x10000)) {
        snprintf(b, sizeof b, "\\u%04x", (unsigned)c);
        puts_(k, b);
    } else if (c >= 0x10000) {
        c -= 0x10000;
        snprintf(b, sizeof b, "\\u%04x\\u%04x", 0xd800u + (unsigned)(c >> 10),
                 0xdc00u + (unsigned)(c & 0x3ff));
        puts_(k, b);
    } else {
        b[0] = (char)c;
        put(k, b, 1);
    }
}

/* One UTF-8 sequence at p; returns its length, 0 when malformed. */
static size_t utf8_decode(const unsigned char *p, uint32_t *ret) {
    if (p[0] < 0x80) {
        *ret = p[0];
        return 1;
    }
    size_t n = (p[0] & 0xe0) == 0xc0   ? 2
               : (p[0] & 0xf0) == 0xe0 ? 3
               : (p[0] & 0xf8) == 0xf0 ? 4
                                       : 0;
    if (n == 0)
        return 0;
    uint32_t c = p[0] & (0x7f >> n);
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        c = (c << 6) | (p[i] & 0x3f);
    }
    *ret = c;
    return n;
}

static int hexval(int c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    c = tolower(c);
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* A Python str repr: '...' or "...", with Python's escapes. */
static int parse_str(struct kparse *k) {
    char q = *k->p++;
    puts_(k, "s:\"");
    for (;;) {
        unsigned char c = (unsigned char)*k->p;
        if (c == '\0')
            return fail(k, "unterminated string");
        if (c == (unsigned char)q) {
            k->p++;
            break;
        }
        uint32_t cp;
        if (c == '\\') {
            k->p++;
            char e = *k->p++;
            int digits = 0;
            switch (e) {
            case 'n':
                cp = '\n';
                break;
            case 't':
                cp = '\t';
                break;
            case 'r':
                cp = '\r';
                break;
            case 'b':
                cp = '\b';
                break;
            case 'f':
                cp = '\f';
                break;
            case 'a':
                cp = 7;
                break;
            case 'v':
                cp = 11;
                break;
            case '0':
                cp = 0;
                break;
            case '\\':
            case '\'':
            case '"':
                cp = (unsigned char)e;
                break;
            case 'x':
                digits = 2;
                break;
            case 'u':
                digits = 4;
                break;
            case 'U':
                digits = 8;
                break;
            default:
                k->p--;
                return fail(k, "unknown escape '\\%c'", e ? e : '0');
            }
            if (digits > 0) {
                cp = 0;
                for (int i = 0; i < digits; i++) {
                    int h = hexval(*k->p);
                    if (h < 0)
                        return fail(k, "bad \\%c escape", e);
                    cp = cp * 16 + (uint32_t)h;
                    k->p++;
                }
                if (cp > 0x10ffff)
                    return fail(k, "code point out of range");
            }
        } else {
            size_t n = utf8_decode((const unsigned char *)k->p, &cp);
            if (n == 0)
                return fail(k, "invalid UTF-8");
            k->p += n;
        }
        put_json_cp(k, cp);
    }
    puts_(k, "\"");
    return 0;
}

/* An int or a float as Python prints them (the repr is kept as is). */
static int parse_number(struct kparse *k) {
    const char *start = k->p;
    const char *p = k->p;
    if (*p == '-' || *p == '+')
        p++;
    if (strncmp(p, "inf", 3) == 0 || strncmp(p, "nan", 3) == 0) {
        p += 3;
        if (isalnum((unsigned char)*p) || *p == '_')
            return fail(k, "unexpected name");
        puts_(k, "f:");
        put(k, start, (size_t)(p - start));
        k->p = p;
        return 0;
    }
    int is_float = 0;
    if (!isdigit((unsigned char)*p))
        return fail(k, "expected a value");
    while (isdigit((unsigned char)*p) || *p == '_')
        p++;
    if (*p == '.') {
        is_float = 1;
        p++;
        while (isdigit((unsigned char)*p))
            p++;
    }
    if (*p == 'e' || *p == 'E') {
        is_float = 1;
        p++;
        if (*p == '+' || *p == '-')
            p++;
        if (!isdigit((unsigned char)*p))
            return fail(k, "bad exponent");
        while (isdigit((unsigned char)*p))
            p++;
    }
    if (isalpha((unsigned char)*p))
        return fail(k, "unexpected '%c' in a number", *p);
    puts_(k, is_float ? "f:" : "i:");
    if (*start == '+')
        start++;
    /* Python's int repr has no leading zeros and no underscores. */
    for (const char *c = start; c < p; c++)
        if (*c != '_')
            put(k, c, 1);
    k->p = p;
    return 0;
}

static int parse_value(struct kparse *k, int depth);

/* (..) or [..]: items separated by commas, a trailing comma allowed. */
static int parse_seq(struct kparse *k, int depth, char close, const char *tag,
                     int *ret_n, int *ret_trailing) {
    k->p++;
    puts_(k, tag);
    int n = 0, trailing = 0;
    skip_ws(k);
    while (*k->p != close) {
        if (n > 0)
            puts_(k, ",");
        if (parse_value(k, depth + 1) != 0)
            return -1;
        n++;
        trailing = 0;
        skip_ws(k);
        if (*k->p == ',') {
            k->p++;
            trailing = 1;
            skip_ws(k);
        } else if (*k->p != close) {
            return *k->p ? fail(k, "expected ',' or '%c'", close)
                         : fail(k, "missing '%c'", close);
        }
    }
    k->p++;
    puts_(k, "]");
    *ret_n = n;
    *ret_trailing = trailing;
    return 0;
}

static int parse_value(struct kparse *k, int depth) {
    if (depth > 32)
        return fail(k, "nested too deeply");
    skip_ws(k);
    int n, tr;
    switch (*k->p) {
    case '(':
        if (parse_seq(k, depth, ')', "t[", &n, &tr) != 0)
            return -1;
        if (n == 1 && !tr)
            return fail(k, "a parenthesized value is not a tuple (write "
                           "'(x,)')");
        return 0;
    case '[':
        return parse_seq(k, depth, ']', "l[", &n, &tr);
    case '\'':
    case '"':
        return parse_str(k);
    default:
        break;
    }
    static const struct {
        const char *word, *tag;
    } words[] = {{"True", "b:true"}, {"False", "b:false"}, {"None", "n:null"}};
    for (size_t i = 0; i < 3; i++) {
        size_t wl = strlen(words[i].word);
        if (strncmp(k->p, words[i].word, wl) == 0 &&
            !isalnum((unsigned char)k->p[wl]) && k->p[wl] != '_') {
            k->p += wl;
            puts_(k, words[i].tag);
            return 0;
        }
    }
    return parse_number(k);
}

/* See detctl_key.h. */
int detctl_key_canonical(const char *in, char **ret, char *err, size_t errlen) {
    struct kparse k = {.s = in, .p = in, .err = err, .errlen = errlen};
    if (in == NULL || ret == NULL) {
        snprintf(err, errlen, "no key");
        return -1;
    }
    while (*k.p == ' ')
        k.p++;
    if (*k.p != '(') { /* the canonical form, or a client's own string */
        char *d = strdup(in);
        if (d == NULL) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        *ret = d;
        return 0;
    }
    int n, tr;
    /* The outer tuple is the key's list. */
    if (parse_seq(&k, 0, ')', "[", &n, &tr) != 0)
        goto bad;
    skip_ws(&k);
    if (*k.p != '\0') {
        fail(&k, "unexpected text after the key");
        goto bad;
    }
    if (k.oom) {
        snprintf(err, errlen, "out of memory");
        goto bad;
    }
    if (k.out == NULL && (k.out = strdup("[]")) == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    *ret = k.out;
    return 0;
bad:
    free(k.out);
    return -1;
}
