/*
 * log: one line per event to stderr, with a UTC timestamp, in the human
 * format or as JSON lines. Each line is built in memory and written with
 * one write(), so lines from several threads never interleave.
 */
#define _GNU_SOURCE
#include "config/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "detd/error.h"

/* A line never grows past this (a message is cut, never split). */
#define LOG_MAX_LINE (16 * 1024)
#define LOG_MAX_MSG 8192

static log_level threshold = LOG_INFO;
static log_format format = LOG_FORMAT_HUMAN;

const char *const log_level_names[] = {"error", "warn", "info", "debug", NULL};
const char *const log_format_names[] = {"human", "json", NULL};

int log_parse_level(const char *s, log_level *ret) {
    for (int i = 0; log_level_names[i] != NULL; i++) {
        if (strcmp(s, log_level_names[i]) == 0) {
            *ret = (log_level)i;
            return 0;
        }
    }
    return DETD_EINVAL;
}

int log_parse_format(const char *s, log_format *ret) {
    for (int i = 0; log_format_names[i] != NULL; i++) {
        if (strcmp(s, log_format_names[i]) == 0) {
            *ret = (log_format)i;
            return 0;
        }
    }
    return DETD_EINVAL;
}

void log_set_level(log_level level) {
    threshold = level;
}

void log_set_format(log_format f) {
    format = f;
}

int log_enabled(log_level level) {
    return level <= threshold;
}

/* A bounded line buffer: appends past the cap are dropped. */
struct line {
    char buf[LOG_MAX_LINE];
    size_t n;
};

static void put(struct line *l, const char *s, size_t n) {
    /* Keep room for the newline. */
    if (n > sizeof(l->buf) - 1 - l->n)
        n = sizeof(l->buf) - 1 - l->n;
    memcpy(l->buf + l->n, s, n);
    l->n += n;
}

static void puts_(struct line *l, const char *s) {
    put(l, s, strlen(s));
}

/* Length of the valid UTF-8 sequence at s (0: invalid). */
static size_t utf8_len(const unsigned char *s, size_t left) {
    unsigned char c = s[0];
    size_t n;
    unsigned min;
    unsigned cp;
    if (c < 0x80)
        return 1;
    if ((c & 0xe0) == 0xc0) {
        n = 2;
        cp = c & 0x1f;
        min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
        n = 3;
        cp = c & 0x0f;
        min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
        n = 4;
        cp = c & 0x07;
        min = 0x10000;
    } else {
        return 0;
    }
    if (n > left)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

/* A JSON string: quotes, escapes; invalid UTF-8 becomes U+FFFD. */
static void put_json_str(struct line *l, const char *str) {
    const unsigned char *s = (const unsigned char *)str;
    size_t len = strlen(str);
    char esc[8];
    put(l, "\"", 1);
    for (size_t i = 0; i < len;) {
        unsigned char c = s[i];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            put(l, esc, 2);
            i++;
        } else if (c == '\n') {
            put(l, "\\n", 2);
            i++;
        } else if (c == '\t') {
            put(l, "\\t", 2);
            i++;
        } else if (c == '\r') {
            put(l, "\\r", 2);
            i++;
        } else if (c < 0x20 || c == 0x7f) {
            snprintf(esc, sizeof(esc), "\\u%04x", c);
            put(l, esc, 6);
            i++;
        } else {
            size_t n = utf8_len(s + i, len - i);
            if (n == 0) {
                put(l, "\\ufffd", 6);
                i++;
            } else {
                put(l, (const char *)s + i, n);
                i += n;
            }
        }
    }
    put(l, "\"", 1);
}

/* A human-format value: bare when plain, else quoted and escaped. */
static void put_human_value(struct line *l, const char *str) {
    const unsigned char *s = (const unsigned char *)str;
    int plain = *s != '\0';
    for (const unsigned char *p = s; *p != '\0'; p++)
        if (*p <= ' ' || *p == '"' || *p == '=' || *p == '\\' || *p == 0x7f)
            plain = 0;
    if (plain) {
        puts_(l, str);
        return;
    }
    char esc[8];
    put(l, "\"", 1);
    for (const unsigned char *p = s; *p != '\0'; p++) {
        if (*p == '"' || *p == '\\') {
            esc[0] = '\\';
            esc[1] = (char)*p;
            put(l, esc, 2);
        } else if (*p == '\n') {
            put(l, "\\n", 2);
        } else if (*p == '\t') {
            put(l, "\\t", 2);
        } else if (*p < 0x20 || *p == 0x7f) {
            snprintf(esc, sizeof(esc), "\\x%02x", *p);
            put(l, esc, 4);
        } else {
            put(l, (const char *)p, 1);
        }
    }
    put(l, "\"", 1);
}

/* Control characters of a human message become '?' (one line). */
static void put_human_msg(struct line *l, const char *msg) {
    size_t start = l->n;
    puts_(l, msg);
    for (size_t i = start; i < l->n; i++)
        if ((unsigned char)l->buf[i] < 0x20 && l->buf[i] != '\t')
            l->buf[i] = '?';
}

static void put_num(struct line *l, const struct log_field *f, char *num,
                    size_t len) {
    if (f->u)
        snprintf(num, len, "%llu", (unsigned long long)f->n);
    else
        snprintf(num, len, "%lld", f->n);
    puts_(l, num);
}

/* Fields named by the words before a conversion (see log.h). */
#define LOG_MAX_AUTO 8
static const struct {
    const char *word, *field;
    int num; /* a number field (a string conversion is kept as a string) */
} auto_words[] = {
    {"claim", "claim", 1}, {"session", "session", 1},
    {"pid", "pid", 1},     {"uid", "uid", 1},
    {"rank", "rank", 1},   {"helper", "helper", 1},
    {"key", "key", 0},     {"kernel", "kernel", 0},
    {"host", "host", 0},   {"namespace", "namespace", 0},
    {"node", "node", 0},   {"device", "device", 0},
};

/* The field the word ending right before fmt[at] (a '%') names, or NULL:
 * "word %", "word '%" or "word \"%". */
static const char *auto_field(const char *fmt, size_t at, int *ret_num) {
    size_t e = at;
    if (e > 0 && (fmt[e - 1] == '\'' || fmt[e - 1] == '"'))
        e--;
    if (e == 0 || fmt[e - 1] != ' ')
        return NULL;
    e--;
    size_t b = e;
    while (b > 0 &&
           ((fmt[b - 1] >= 'a' && fmt[b - 1] <= 'z') || fmt[b - 1] == '_'))
        b--;
    if (b > 0 && ((fmt[b - 1] >= 'A' && fmt[b - 1] <= 'Z') ||
                  (fmt[b - 1] >= '0' && fmt[b - 1] <= '9')))
        return NULL; /* part of a longer name */
    for (size_t i = 0; i < sizeof auto_words / sizeof auto_words[0]; i++)
        if (strlen(auto_words[i].word) == e - b &&
            strncmp(fmt + b, auto_words[i].word, e - b) == 0) {
            *ret_num = auto_words[i].num;
            return auto_words[i].field;
        }
    return NULL;
}

/*
 * The arguments of fmt (a printf format the compiler checked against
 * them) that follow a field word, as fields into out[0..LOG_MAX_AUTO);
 * strings are copied into buf (as printed: a precision cuts them).
 * Every argument is read with the type its conversion names, in order.
 */
static size_t auto_fields(const char *fmt, va_list ap, struct log_field *out,
                          char *buf, size_t buflen) {
    size_t n = 0, used = 0;
    for (size_t i = 0; fmt[i] != '\0'; i++) {
        if (fmt[i] != '%')
            continue;
        size_t at = i++;
        if (fmt[i] == '%')
            continue;
        while (fmt[i] != '\0' && strchr("-+ #0'I", fmt[i]) != NULL)
            i++;
        if (fmt[i] == '*') {
            (void)va_arg(ap, int);
            i++;
        }
        while (fmt[i] >= '0' && fmt[i] <= '9')
            i++;
        long prec = -1;
        if (fmt[i] == '.') {
            i++;
            if (fmt[i] == '*') {
                prec = va_arg(ap, int);
                i++;
            } else {
                prec = 0;
                while (fmt[i] >= '0' && fmt[i] <= '9')
                    prec = prec * 10 + (fmt[i++] - '0');
            }
        }
        int len = 0; /* 0 int, 1 long, 2 long long, 3 size_t, 4 intmax,
                        5 ptrdiff, 6 long double */
        for (;; i++) {
            if (fmt[i] == 'h')
                continue;
            if (fmt[i] == 'l')
                len = len == 1 ? 2 : 1;
            else if (fmt[i] == 'q')
                len = 2;
            else if (fmt[i] == 'z')
                len = 3;
            else if (fmt[i] == 'j')
                len = 4;
            else if (fmt[i] == 't')
                len = 5;
            else if (fmt[i] == 'L')
                len = 6;
            else
                break;
        }
        char conv = fmt[i];
        if (conv == '\0')
            break;
        int num = 0;
        const char *name = auto_field(fmt, at, &num);
        int dup = 0;
        for (size_t k = 0; name != NULL && k < n; k++)
            dup |= strcmp(out[k].key, name) == 0;
        int keep = name != NULL && !dup && n < LOG_MAX_AUTO;
        struct log_field f = {name, NULL, 0, 0};
        switch (conv) {
        case 'd':
        case 'i': {
            long long v = len == 1   ? va_arg(ap, long)
                          : len == 2 ? va_arg(ap, long long)
                          : len == 3 ? (long long)va_arg(ap, ssize_t)
                          : len == 4 ? (long long)va_arg(ap, intmax_t)
                          : len == 5 ? (long long)va_arg(ap, ptrdiff_t)
                                     : va_arg(ap, int);
            f.n = v;
            break;
        }
        case 'u':
        case 'o':
        case 'x':
        case 'X': {
            unsigned long long v =
                len == 1   ? va_arg(ap, unsigned long)
                : len == 2 ? va_arg(ap, unsigned long long)
                : len == 3 ? va_arg(ap, size_t)
                : len == 4 ? (unsigned long long)va_arg(ap, uintmax_t)
                : len == 5 ? (unsigned long long)va_arg(ap, ptrdiff_t)
                           : va_arg(ap, unsigned int);
            f.n = (long long)v;
            f.u = 1;
            keep &= conv == 'u';
            break;
        }
        case 'c':
            (void)va_arg(ap, int);
            keep = 0;
            break;
        case 's': {
            const char *v = va_arg(ap, const char *);
            if (v == NULL)
                v = "";
            size_t vl = strlen(v);
            if (prec >= 0 && (size_t)prec < vl)
                vl = (size_t)prec;
            if (!keep || used + vl + 1 > buflen) {
                keep = 0;
                break;
            }
            memcpy(buf + used, v, vl);
            buf[used + vl] = '\0';
            f.s = buf + used;
            used += vl + 1;
            if (strcmp(name, "key") == 0 && prec >= 0)
                f.key = "key_id";
            break;
        }
        case 'p':
        case 'n':
            (void)va_arg(ap, void *);
            keep = 0;
            break;
        case 'e':
        case 'E':
        case 'f':
        case 'F':
        case 'g':
        case 'G':
        case 'a':
        case 'A':
            if (len == 6)
                (void)va_arg(ap, long double);
            else
                (void)va_arg(ap, double);
            keep = 0;
            break;
        default: /* %m: no argument */
            keep = 0;
            break;
        }
        if (keep && (f.s != NULL || num))
            out[n++] = f;
    }
    return n;
}

static void emit(log_level level, const struct log_field *fields,
                 size_t nfields, const char *fmt, va_list ap) {
    struct line l;
    char msg[LOG_MAX_MSG];
    char ts[64];
    struct timeval tv;
    struct tm tm;
    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    size_t n = strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(ts + n, sizeof(ts) - n, ".%03ldZ", (long)(tv.tv_usec / 1000));
    struct log_field autos[LOG_MAX_AUTO];
    char autobuf[1024];
    if (format == LOG_FORMAT_JSON && nfields == 0) {
        va_list aq;
        va_copy(aq, ap);
        nfields = auto_fields(fmt, aq, autos, autobuf, sizeof autobuf);
        va_end(aq);
        fields = autos;
    }
    vsnprintf(msg, sizeof(msg), fmt, ap);
    l.n = 0;
    char num[32];
    if (format == LOG_FORMAT_JSON) {
        puts_(&l, "{\"ts\":\"");
        puts_(&l, ts);
        puts_(&l, "\",\"level\":\"");
        puts_(&l, log_level_names[level]);
        puts_(&l, "\",\"msg\":");
        put_json_str(&l, msg);
        for (size_t i = 0; i < nfields; i++) {
            puts_(&l, ",");
            put_json_str(&l, fields[i].key);
            puts_(&l, ":");
            if (fields[i].s != NULL)
                put_json_str(&l, fields[i].s);
            else
                put_num(&l, &fields[i], num, sizeof num);
        }
        /* A line cut at the cap would not parse: close it properly. */
        if (l.n >= sizeof(l.buf) - 2) {
            l.n = 0;
            puts_(&l, "{\"ts\":\"");
            puts_(&l, ts);
            puts_(&l, "\",\"level\":\"");
            puts_(&l, log_level_names[level]);
            puts_(&l, "\",\"msg\":\"(event too long to log)\"");
        }
        puts_(&l, "}");
    } else {
        puts_(&l, ts);
        puts_(&l, " ");
        puts_(&l, log_level_names[level]);
        put(&l, "     ", 6 - strlen(log_level_names[level]));
        puts_(&l, "detd: ");
        put_human_msg(&l, msg);
        for (size_t i = 0; i < nfields; i++) {
            puts_(&l, " ");
            puts_(&l, fields[i].key);
            puts_(&l, "=");
            if (fields[i].s != NULL)
                put_human_value(&l, fields[i].s);
            else
                put_num(&l, &fields[i], num, sizeof num);
        }
    }
    l.buf[l.n++] = '\n';
    /* One write per line keeps lines whole across threads. */
    size_t off = 0;
    while (off < l.n) {
        ssize_t w = write(STDERR_FILENO, l.buf + off, l.n - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        off += (size_t)w;
    }
}

void log_msg(log_level level, const char *fmt, ...) {
    if (level > threshold)
        return;
    va_list ap;
    va_start(ap, fmt);
    emit(level, NULL, 0, fmt, ap);
    va_end(ap);
}

void log_event(log_level level, const struct log_field *fields, size_t nfields,
               const char *fmt, ...) {
    if (level > threshold)
        return;
    va_list ap;
    va_start(ap, fmt);
    emit(level, fields, nfields, fmt, ap);
    va_end(ap);
}
