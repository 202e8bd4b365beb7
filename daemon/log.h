/*
 * log: the daemon's log lines, one per event, to stderr.
 * Only the daemon logs; library code never does.
 */
#ifndef DETD_LOG_H
#define DETD_LOG_H

typedef enum log_level {
    LOG_ERROR = 0,
    LOG_WARN = 1,
    LOG_INFO = 2,
    LOG_DEBUG = 3,
} log_level;

/* Parse "error|warn|info|debug". Returns 0 or DETD_EINVAL. */
int log_parse_level(const char *s, log_level *ret);

/* Set the threshold (default LOG_INFO). Call before threads start. */
void log_set_level(log_level level);

/* Is a message of this level printed? */
int log_enabled(log_level level);

/* Print one line: "<UTC time> <level> detd: <message>". Thread-safe. */
void log_msg(log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...)                                                         \
    do {                                                                       \
        if (log_enabled(LOG_DEBUG))                                            \
            log_msg(LOG_DEBUG, __VA_ARGS__);                                   \
    } while (0)

#endif /* DETD_LOG_H */
