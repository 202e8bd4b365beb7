/*
 * detctl_exit: detctl's exit statuses, one list for the code, the help
 * text, docs/operating.md (detctl) and docs/detctl-json.md.
 *
 *   0  ok
 *   1  the check said no: verify found a divergence or another failure,
 *      health is not SERVING
 *   2  usage: an unknown command or option, an option the command does
 *      not take, a missing or malformed value, a bad input file
 *   3  the daemon is unreachable or unavailable (no socket, connection
 *      refused, TLS handshake failed, deadline exceeded)
 *   4  permission denied by the daemon (--allow-*, --admin-* lists)
 *   5  the daemon answered with another error, or a local failure (out of
 *      memory, a file that cannot be written)
 */
#ifndef DETD_DETCTL_EXIT_H
#define DETD_DETCTL_EXIT_H

#include "detd/error.h"

#define DETCTL_EXIT_OK 0
#define DETCTL_EXIT_NO 1
#define DETCTL_EXIT_USAGE 2
#define DETCTL_EXIT_UNAVAILABLE 3
#define DETCTL_EXIT_DENIED 4
#define DETCTL_EXIT_ERROR 5

/* The exit status for a failed call's detd code (negative). */
static inline int detctl_exit_for_rc(int rc) {
    switch (rc) {
    case DETD_ECONNECT:
    case DETD_EUNAVAILABLE:
    case DETD_ETIMEDOUT:
        return DETCTL_EXIT_UNAVAILABLE;
    case DETD_EDENIED:
        return DETCTL_EXIT_DENIED;
    default:
        return DETCTL_EXIT_ERROR;
    }
}

#endif /* DETD_DETCTL_EXIT_H */
