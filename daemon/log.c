/* log: one line per event to stderr, with a UTC timestamp. */
#define _GNU_SOURCE
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "detd/error.h"

static log_level threshold = LOG_INFO;

static const char *const names[] = {"error", "warn", "info", "debug"};

int log_parse_level(const char *s, log_level *ret) {
    for (int i = 0; i < 4; i++) {
        if (strcmp(s, names[i]) == 0) {
            *ret = (log_level)i;
            return 0;
        }
    }
    return DETD_EINVAL;
}

void log_set_level(log_level level) {
    threshold = level;
}

int log_enabled(log_level level) {
    return level <= threshold;
}

void log_msg(log_level level, const char *fmt, ...) {
    if (level > threshold)
        return;
    char line[2048];
    struct timeval tv;
    struct tm tm;
    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    int n = (int)strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%S", &tm);
    n += snprintf(line + n, sizeof(line) - (size_t)n,
                  ".%03ldZ %-5s detd: ", (long)(tv.tv_usec / 1000),
                  names[level]);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    va_end(ap);
    /* One write per line keeps lines whole across threads. */
    size_t len = strlen(line);
    if (len < sizeof(line) - 1) {
        line[len++] = '\n';
        line[len] = '\0';
    }
    fputs(line, stderr);
    fflush(stderr);
}
