/*
 * listener: the node's unix socket, owned by the daemon rather than by
 * gRPC, so that every connection's peer credentials (SO_PEERCRED) are
 * known. The loop accepts (a uv_poll handle on the listening socket),
 * reads the credentials and hands the connected fd to the rpc server
 * (rpc_server_add_fd()).
 *
 * Out of descriptors (EMFILE/ENFILE on accept), the listener does not
 * spin on the still readable socket: it keeps one spare descriptor open,
 * gives it up to accept and close the pending connections (taking it again
 * after each)
 * and pauses accepting for 100 ms; each episode is noted once and
 * counted.
 *
 * The socket file is created with its final mode from the start (bind
 * under a umask), then given its group; at close it is removed only if
 * it is still the file this listener created.
 */
#ifndef DETD_LISTENER_H
#define DETD_LISTENER_H

#include <stdint.h>
#include <sys/types.h>

#include <uv.h>

#include "core/access.h"

typedef struct listener listener;

/*
 * A connection was accepted (loop thread). fd is the caller's from now
 * on (nonblocking, close-on-exec). cred is NULL when SO_PEERCRED failed;
 * else it and its groups are borrowed for the call. Returns 0, or -EMFILE
 * / -ENFILE when fd could not be served for want of descriptors (fd is
 * closed then): the listener treats that as accept's own EMFILE (logs the
 * episode once, closes what is queued, pauses accepting).
 */
typedef int (*listener_conn_cb)(void *ctx, int fd,
                                const struct access_cred *cred);

/* A line for the daemon's log (loop thread); msg is borrowed for the
 * call. */
typedef void (*listener_note_cb)(void *ctx, const char *msg);

struct listener_options {
    const char *path; /* socket file path */
    unsigned mode;    /* e.g. 0660 */
    long gid;         /* group of the socket file, -1: leave as created */
    /* >= 0: an already listening socket to serve (socket activation);
     * path, mode and gid are then left alone, the file is never removed,
     * and the listener owns fd once listener_open() succeeded. -1: create
     * the socket at path. */
    int fd;
    /* Optional: told once per episode of descriptor exhaustion (EMFILE,
     * ENFILE: accepting pauses, pending connections are closed). */
    listener_note_cb note;
    void *note_ctx;
};

/* Counted since the start (loop thread). */
struct listener_stats {
    uint64_t fd_exhausted; /* episodes of EMFILE/ENFILE on accept */
    uint64_t dropped;      /* connections closed for want of descriptors */
};

/* Copy l's counters into *ret (zeros for NULL). Loop thread. */
void listener_get_stats(const listener *l, struct listener_stats *ret);

/*
 * Create the socket file and start accepting on loop. A stale socket file
 * (nobody listening) is replaced; a live one, or a path that is not a
 * socket, is an error. Returns 0 or a negative DETD_E* / -errno with
 * *ret_errmsg (heap, caller frees) naming the path and the problem.
 * On success *ret is freed by listener_close().
 */
int listener_open(const struct listener_options *opts, uv_loop_t *loop,
                  listener_conn_cb cb, void *cb_ctx, listener **ret,
                  char **ret_errmsg);

/* Stop accepting and close the listening socket (drain); the socket file
 * stays until listener_close(). Idempotent; NULL is a no-op. */
void listener_stop(listener *l);

/*
 * Stop, remove the socket file if it is still ours, and free the
 * listener once the loop has closed its handle (run the loop after).
 * NULL is a no-op.
 */
void listener_close(listener *l);

/*
 * Read a connected unix socket's peer credentials: SO_PEERCRED, and with
 * groups non-NULL up to max_groups supplementary groups (SO_PEERGROUPS;
 * *ret_n_groups 0 when the kernel cannot tell). Returns 0 or -errno.
 */
int listener_peer_cred(int fd, struct access_cred *ret, gid_t *groups,
                       size_t max_groups, size_t *ret_n_groups);

/*
 * The start time of process pid (field 22 of /proc/PID/stat: clock ticks
 * after boot), which with the pid names one process for as long as the
 * machine runs: a later process given the same pid has another. 0 when
 * the process is not visible here (gone, another pid namespace) or pid
 * is not positive.
 */
int64_t listener_proc_start(pid_t pid);

#endif /* DETD_LISTENER_H */
