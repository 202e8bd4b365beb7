/*
 * conffile: tokenizing detd's configuration file (see conffile.h).
 * Bytes from the file are untrusted: the size and every line are capped,
 * NUL and control characters are refused.
 */
#define _GNU_SOURCE
#include "config/conffile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "detd/error.h"

struct reader {
    const char *name;
    conffile_entry_cb entry;
    conffile_error_cb error;
    void *ctx;
    int bad;
};

static void report(struct reader *r, unsigned line, const char *key,
                   const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void report(struct reader *r, unsigned line, const char *key,
                   const char *fmt, ...) {
    char what[512];
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    if (line == 0)
        snprintf(msg, sizeof(msg), "%s: %s", r->name, what);
    else if (key != NULL)
        snprintf(msg, sizeof(msg), "%s:%u: %.128s: %s", r->name, line, key,
                 what);
    else
        snprintf(msg, sizeof(msg), "%s:%u: %s", r->name, line, what);
    r->bad = 1;
    if (r->error != NULL)
        r->error(r->ctx, msg);
}

static int is_space(char c) {
    return c == ' ' || c == '\t';
}

static int is_key_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
}

/* One line (no newline, NUL-terminated in buf, at most the line cap). */
static void parse_line(struct reader *r, char *s, unsigned line) {
    while (is_space(*s))
        s++;
    if (*s == '\0' || *s == '#')
        return;
    char *key = s;
    while (is_key_char(*s))
        s++;
    if (s == key) {
        report(r, line, NULL, "expected 'key = value', found '%.40s'", key);
        return;
    }
    char *key_end = s;
    while (is_space(*s))
        s++;
    char c = *s;
    *key_end = '\0';
    if (c != '=') {
        if (c == '\0' || c == '#')
            report(r, line, key, "missing '=' (lines are 'key = value')");
        else
            report(r, line, key,
                   "missing '=' after the key (lines are 'key = value'; "
                   "keys are the flag names without '--')");
        return;
    }
    s++;
    while (is_space(*s))
        s++;
    char *value = s;
    if (*s == '"') {
        /* Quoted: unescape in place. */
        char *out = value;
        s++;
        for (;;) {
            if (*s == '\0') {
                report(r, line, key,
                       "unterminated quoted value (no closing "
                       "'\"')");
                return;
            }
            if (*s == '"')
                break;
            if (*s == '\\') {
                if (s[1] != '"' && s[1] != '\\') {
                    report(r, line, key,
                           "bad escape '\\%c' in a quoted value (only \\\" "
                           "and \\\\ are escapes)",
                           s[1] != '\0' ? s[1] : ' ');
                    return;
                }
                s++;
            }
            *out++ = *s++;
        }
        *out = '\0';
        s++;
        while (is_space(*s))
            s++;
        if (*s != '\0' && *s != '#') {
            report(r, line, key,
                   "unexpected text after the quoted value: "
                   "'%.40s'",
                   s);
            return;
        }
    } else {
        /* Unquoted: up to a '#' that follows whitespace, trimmed. */
        char *end = s;
        while (*end != '\0' && !(*end == '#' && end > s && is_space(end[-1])))
            end++;
        while (end > value && is_space(end[-1]))
            end--;
        *end = '\0';
    }
    for (const char *p = value; *p != '\0'; p++) {
        if ((unsigned char)*p < 0x20 && *p != '\t') {
            report(r, line, key, "control character 0x%02x in the value",
                   (unsigned)(unsigned char)*p);
            return;
        }
    }
    char *err = NULL;
    int rc = r->entry(r->ctx, key, value, line, &err);
    if (rc != 0)
        report(r, line, key, "%s", err != NULL ? err : detd_strerror(rc));
    free(err);
}

/* See conffile.h. */
int conffile_parse_buffer(const char *name, const char *buf, size_t len,
                          conffile_entry_cb entry, conffile_error_cb error,
                          void *ctx) {
    if (name == NULL || (buf == NULL && len > 0) || entry == NULL)
        return DETD_EINVAL;
    struct reader r = {name, entry, error, ctx, 0};
    if (len > CONFFILE_MAX_BYTES) {
        report(&r, 0, NULL, "larger than %d bytes", CONFFILE_MAX_BYTES);
        return DETD_ELIMIT;
    }
    char line[CONFFILE_MAX_LINE + 2];
    size_t pos = 0;
    unsigned lineno = 0;
    while (pos < len) {
        lineno++;
        const char *nl = memchr(buf + pos, '\n', len - pos);
        size_t n = nl != NULL ? (size_t)(nl - (buf + pos)) : len - pos;
        const char *start = buf + pos;
        pos += n + (nl != NULL ? 1 : 0);
        if (n > 0 && start[n - 1] == '\r')
            n--;
        if (n > CONFFILE_MAX_LINE) {
            report(&r, lineno, NULL, "line longer than %d bytes",
                   CONFFILE_MAX_LINE);
            continue;
        }
        if (memchr(start, '\0', n) != NULL) {
            report(&r, lineno, NULL, "NUL byte in the line");
            continue;
        }
        memcpy(line, start, n);
        line[n] = '\0';
        parse_line(&r, line, lineno);
    }
    return r.bad ? DETD_EINVAL : 0;
}

/* See conffile.h. */
int conffile_parse(const char *path, conffile_entry_cb entry,
                   conffile_error_cb error, void *ctx) {
    if (path == NULL || entry == NULL)
        return DETD_EINVAL;
    struct reader r = {path, entry, error, ctx, 0};
    char *buf = NULL;
    size_t len = 0;
    int rc = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = -errno;
        report(&r, 0, NULL, "cannot open: %s", strerror(errno));
        goto out;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        rc = -errno;
        report(&r, 0, NULL, "cannot stat: %s", strerror(errno));
        goto out;
    }
    if (S_ISDIR(st.st_mode)) {
        rc = -EISDIR;
        report(&r, 0, NULL, "is a directory, not a file");
        goto out;
    }
    /* Read up to one byte past the cap (st_size is 0 for some files). */
    buf = malloc(CONFFILE_MAX_BYTES + 1);
    if (buf == NULL) {
        rc = DETD_ENOMEM;
        report(&r, 0, NULL, "out of memory");
        goto out;
    }
    while (len <= CONFFILE_MAX_BYTES) {
        ssize_t n = read(fd, buf + len, CONFFILE_MAX_BYTES + 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = -errno;
            report(&r, 0, NULL, "cannot read: %s", strerror(errno));
            goto out;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    if (len > CONFFILE_MAX_BYTES) {
        rc = DETD_ELIMIT;
        report(&r, 0, NULL, "larger than %d bytes", CONFFILE_MAX_BYTES);
        goto out;
    }
    rc = conffile_parse_buffer(path, buf, len, entry, error, ctx);
out:
    free(buf);
    if (fd >= 0)
        close(fd);
    return rc;
}
