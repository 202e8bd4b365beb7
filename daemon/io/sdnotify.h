/*
 * sdnotify: the systemd adapter, the only module that calls sd_*.
 *
 * Readiness, status and watchdog notifications go to $NOTIFY_SOCKET;
 * without it (not started by systemd) every call is a no-op. Socket
 * activation hands over listening sockets through $LISTEN_FDS.
 */
#ifndef DETD_SDNOTIFY_H
#define DETD_SDNOTIFY_H

#include <stdint.h>

/* "READY=1" with a STATUS= line (status may be NULL). */
void sdnotify_ready(const char *status);

/* A STATUS= line alone (what systemctl status shows). */
void sdnotify_status(const char *status);

/* "STOPPING=1" with a STATUS= line: the daemon is draining. */
void sdnotify_stopping(const char *status);

/* "WATCHDOG=1": the loop is alive. */
void sdnotify_watchdog(void);

/*
 * The watchdog interval systemd expects pings within ($WATCHDOG_USEC, for
 * this process), in microseconds; 0 when the watchdog is off.
 */
uint64_t sdnotify_watchdog_usec(void);

/*
 * Socket activation: the one listening unix stream socket passed in
 * $LISTEN_FDS. Returns 0 with *ret_fd = -1 when none was passed, 0 with
 * *ret_fd set (owned by the caller, close-on-exec) when one was, or
 * DETD_EINVAL with *ret_err (malloc'd) when what was passed is not one
 * listening unix stream socket. The variables are unset either way, so
 * child processes do not inherit them.
 */
int sdnotify_listen_fd(int *ret_fd, char **ret_err);

#endif /* DETD_SDNOTIFY_H */
