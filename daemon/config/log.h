/*
 * log: the daemon's log lines, one per event, to stderr.
 * Only the daemon logs; library code never does.
 */
#ifndef DETD_LOG_H
#define DETD_LOG_H

#include <stddef.h>

typedef enum log_level {
    LOG_ERROR = 0,
    LOG_WARN = 1,
    LOG_INFO = 2,
    LOG_DEBUG = 3,
} log_level;

typedef enum log_format {
    LOG_FORMAT_HUMAN = 0, /* "<UTC time> <level> detd: <message> k=v ..." */
    LOG_FORMAT_JSON = 1,  /* {"ts":..,"level":..,"msg":..,<fields>} */
} log_format;

/* The names of the levels and formats, NULL-terminated (for options). */
extern const char *const log_level_names[];
extern const char *const log_format_names[];

/* Parse "error|warn|info|debug". Returns 0 or DETD_EINVAL. */
int log_parse_level(const char *s, log_level *ret);

/* Set the threshold (default LOG_INFO). Call before threads start. */
void log_set_level(log_level level);

/* Parse "human|json". Returns 0 or DETD_EINVAL. */
int log_parse_format(const char *s, log_format *ret);

/* Set the line format (default human). Call before threads start. */
void log_set_format(log_format format);

/* Is a message of this level printed? */
int log_enabled(log_level level);

/*
 * Print one line: "<UTC time> <level> detd: <message>", or in JSON
 * {"ts":"<RFC 3339 UTC, ms>","level":"info","msg":"<message>",<fields>}.
 * In JSON the values the message names are also members of their own:
 * a conversion right after one of the words claim, session, pid, uid,
 * rank, helper (numbers), key, kernel, host, namespace, node, device
 * (strings; "key %.12s", a key's id cut short, is key_id), with an optional
 * quote between ("namespace '%s'"): "claim %" PRIu64 " on key %.12s" adds
 * "claim":N,"key_id":"...". The first of a name is kept. The human line
 * is the message alone. Thread-safe: each line is one write.
 */
void log_msg(log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* A structured field of an event: a string (s != NULL) or a number,
 * signed, or with u set unsigned (n holds its bits: claim ids use all 64). */
struct log_field {
    const char *key;
    const char *s;
    long long n;
    int u;
};
#define LOG_STR(k, v) ((struct log_field){(k), (v) != NULL ? (v) : "", 0, 0})
#define LOG_NUM(k, v) ((struct log_field){(k), NULL, (long long)(v), 0})
#define LOG_UNUM(k, v)                                                         \
    ((struct log_field){(k), NULL, (long long)(unsigned long long)(v), 1})

/*
 * Print one event with fields (borrowed for the call): in JSON each field
 * is a member of the line's object (strings escaped, numbers bare); in
 * the human format they follow the message as key=value, the value
 * double-quoted (with \" \\ \n \t \xNN escapes) when it holds a
 * space, a quote, '=', a backslash or a control character, or is empty.
 */
void log_event(log_level level, const struct log_field *fields, size_t nfields,
               const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...)                                                         \
    do {                                                                       \
        if (log_enabled(LOG_DEBUG))                                            \
            log_msg(LOG_DEBUG, __VA_ARGS__);                                   \
    } while (0)

#endif /* DETD_LOG_H */
