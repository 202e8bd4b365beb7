/* sdnotify: the systemd adapter (see sdnotify.h). */
#define _GNU_SOURCE
#include "io/sdnotify.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>

#include <systemd/sd-daemon.h>

#include "detd/error.h"

/* One datagram: the state and its status line. */
static void notify(const char *state, const char *status) {
    if (status != NULL)
        sd_notifyf(0, "%s%sSTATUS=%s", state != NULL ? state : "",
                   state != NULL ? "\n" : "", status);
    else if (state != NULL)
        sd_notify(0, state);
}

/* See sdnotify.h. */
void sdnotify_ready(const char *status) {
    notify("READY=1", status);
}

/* See sdnotify.h. */
void sdnotify_status(const char *status) {
    notify(NULL, status);
}

/* See sdnotify.h. */
void sdnotify_stopping(const char *status) {
    notify("STOPPING=1", status);
}

/* See sdnotify.h. */
void sdnotify_watchdog(void) {
    sd_notify(0, "WATCHDOG=1");
}

/* See sdnotify.h. */
uint64_t sdnotify_watchdog_usec(void) {
    uint64_t usec = 0;
    if (sd_watchdog_enabled(0, &usec) <= 0)
        return 0;
    return usec;
}

/* See sdnotify.h. */
int sdnotify_listen_fd(int *ret_fd, char **ret_err) {
    int n = sd_listen_fds(1);
    *ret_fd = -1;
    if (n <= 0)
        return 0; /* not socket-activated (or unusable variables) */
    if (n != 1) {
        if (asprintf(ret_err,
                     "socket activation passed %d sockets; detd takes one "
                     "unix stream socket",
                     n) < 0)
            *ret_err = NULL;
        return DETD_EINVAL;
    }
    if (sd_is_socket_unix(SD_LISTEN_FDS_START, SOCK_STREAM, 1, NULL, 0) <= 0) {
        if (asprintf(ret_err, "socket activation passed a descriptor that "
                              "is not a listening unix stream socket") < 0)
            *ret_err = NULL;
        return DETD_EINVAL;
    }
    *ret_fd = SD_LISTEN_FDS_START;
    return 0;
}
