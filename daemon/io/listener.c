/*
 * listener: the daemon-owned unix socket (see listener.h).
 */
#define _GNU_SOURCE
#include "io/listener.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "detd/error.h"
#include "strfmt.h"

#ifndef SO_PEERGROUPS
#define SO_PEERGROUPS 59
#endif

/* Accepting pauses this long when descriptors run out. */
#define LISTENER_BACKOFF_MS 100
/* Connections closed at most per pause. */
#define LISTENER_DROP_MAX 512
/* EMFILE again within this long of the last one: the same episode. */
#define LISTENER_EPISODE_MS 1000

struct listener {
    uv_poll_t poll;
    uv_timer_t backoff; /* resumes accepting after a pause */
    int handles_open;   /* of poll and backoff, not yet closed */
    int fd;
    int polling;
    int paused;     /* out of descriptors: the poll waits for backoff */
    int reserve_fd; /* a spare descriptor, given up to drop a connection */
    uint64_t last_exhausted_ms; /* uv_now() of the last EMFILE, 0: never */
    struct listener_stats stats;
    listener_note_cb note;
    void *note_ctx;
    char *path;
    dev_t dev; /* the socket file this listener created */
    ino_t ino;
    int activated; /* the socket came from systemd: never unlink it */
    listener_conn_cb cb;
    void *cb_ctx;
};

/* Does a server accept connections on this unix socket right now? */
static int socket_is_live(const char *path) {
    struct sockaddr_un sa;
    if (strlen(path) >= sizeof(sa.sun_path))
        return 0;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int live = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    close(fd);
    return live;
}

int listener_peer_cred(int fd, struct access_cred *ret, gid_t *groups,
                       size_t max_groups, size_t *ret_n_groups) {
    struct ucred uc;
    socklen_t len = sizeof(uc);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &len) != 0)
        return -errno;
    ret->pid = uc.pid;
    ret->uid = uc.uid;
    ret->gid = uc.gid;
    ret->groups = NULL;
    ret->n_groups = 0;
    if (groups != NULL && ret_n_groups != NULL) {
        socklen_t glen = (socklen_t)(max_groups * sizeof(gid_t));
        *ret_n_groups = 0;
        /* ERANGE (more groups than room): the first ones are not given;
         * look at none rather than at a part. */
        if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &glen) == 0) {
            *ret_n_groups = glen / sizeof(gid_t);
            ret->groups = groups;
            ret->n_groups = *ret_n_groups;
        }
    }
    return 0;
}

static void on_readable(uv_poll_t *h, int status, int events);

static int open_reserve(void) {
    return open("/dev/null", O_RDONLY | O_CLOEXEC);
}

static void on_backoff(uv_timer_t *t) {
    listener *l = t->data;
    l->paused = 0;
    if (l->reserve_fd < 0)
        l->reserve_fd = open_reserve();
    if (l->polling)
        uv_poll_start(&l->poll, UV_READABLE, on_readable);
}

static const char *errno_name(int e) {
    switch (e) {
    case EMFILE:
        return "EMFILE";
    case ENFILE:
        return "ENFILE";
    case ENOBUFS:
        return "ENOBUFS";
    default:
        return "ENOMEM";
    }
}

/*
 * accept() failed for want of descriptors (or kernel memory). The pending
 * connection stays queued and the socket stays readable, so retrying at
 * once would spin: give up the spare descriptor to accept and close the
 * queued connections (their clients see the end at once instead of timing
 * out), taking the spare again after each, and pause accepting for
 * LISTENER_BACKOFF_MS.
 */
static void out_of_descriptors(listener *l, int err) {
    uint64_t now = uv_now(l->poll.loop);
    if (l->last_exhausted_ms == 0 ||
        now - l->last_exhausted_ms > LISTENER_EPISODE_MS) {
        l->stats.fd_exhausted++;
        if (l->note != NULL) {
            char msg[512];
            snprintf(msg, sizeof(msg),
                     "accept on socket '%s': %s (%s): out of file "
                     "descriptors; closing new connections and pausing "
                     "accepts for %d ms until descriptors are free",
                     l->path, errno_name(err), strerror(err),
                     LISTENER_BACKOFF_MS);
            l->note(l->note_ctx, msg);
        }
    }
    l->last_exhausted_ms = now > 0 ? now : 1;
    /* Every connection queued now is closed (at most a backlog's worth
     * per pause): its client learns at once instead of timing out. */
    for (int i = 0; i < LISTENER_DROP_MAX && l->reserve_fd >= 0; i++) {
        close(l->reserve_fd);
        int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            close(fd);
            l->stats.dropped++;
        }
        l->reserve_fd = open_reserve();
        if (fd < 0)
            break; /* none left, or another thread took the descriptor */
    }
    uv_poll_stop(&l->poll);
    l->paused = 1;
    uv_timer_start(&l->backoff, on_backoff, LISTENER_BACKOFF_MS, 0);
}

static void on_readable(uv_poll_t *h, int status, int events) {
    listener *l = h->data;
    (void)events;
    if (status < 0)
        return;
    /* Accept what is queued now; a burst larger than this waits for the
     * next poll round so the loop keeps serving calls. */
    for (int i = 0; i < 64 && l->fd >= 0 && !l->paused; i++) {
        int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            int err = errno;
            if (err == EMFILE || err == ENFILE || err == ENOBUFS ||
                err == ENOMEM)
                out_of_descriptors(l, err);
            else if (err == EINTR || err == ECONNABORTED)
                continue;
            return; /* EAGAIN: all taken */
        }
        struct access_cred cred;
        gid_t groups[ACCESS_MAX_GROUPS];
        size_t ng = 0;
        int ok =
            listener_peer_cred(fd, &cred, groups, ACCESS_MAX_GROUPS, &ng) == 0;
        int rc = l->cb(l->cb_ctx, fd, ok ? &cred : NULL);
        if (rc == -EMFILE || rc == -ENFILE) {
            /* Accepted, but no descriptor left to serve it with (each
             * connection needs more than one): the same episode. */
            out_of_descriptors(l, -rc);
            return;
        }
    }
}

int listener_open(const struct listener_options *opts, uv_loop_t *loop,
                  listener_conn_cb cb, void *cb_ctx, listener **ret,
                  char **ret_errmsg) {
    char *err = NULL;
    int rc = 0;
    struct sockaddr_un sa;
    if (opts == NULL || opts->path == NULL || cb == NULL || ret == NULL)
        return DETD_EINVAL;
    if (strlen(opts->path) >= sizeof(sa.sun_path)) {
        err = strfmt("socket path '%s' is too long", opts->path);
        rc = DETD_EINVAL;
        goto fail;
    }
    listener *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return DETD_ENOMEM;
    l->fd = -1;
    l->reserve_fd = -1;
    l->cb = cb;
    l->cb_ctx = cb_ctx;
    l->note = opts->note;
    l->note_ctx = opts->note_ctx;
    l->path = strdup(opts->path);
    if (l->path == NULL) {
        rc = DETD_ENOMEM;
        goto out;
    }
    if (opts->fd >= 0) {
        /* Socket activation: the socket file belongs to systemd. */
        l->fd = opts->fd;
        l->activated = 1;
        goto start;
    }

    /* Remove a stale socket, never anything else. */
    struct stat st;
    if (lstat(opts->path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode)) {
            err = strfmt("socket path '%s' exists and is not a socket",
                         opts->path);
            rc = -EEXIST;
            goto out;
        }
        if (socket_is_live(opts->path)) {
            err =
                strfmt("socket '%s' is in use by a running daemon", opts->path);
            rc = DETD_EBUSY;
            goto out;
        }
        if (unlink(opts->path) != 0) {
            rc = -errno;
            err = strfmt("remove stale socket '%s': %s", opts->path,
                         strerror(errno));
            goto out;
        }
    }
    l->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (l->fd < 0) {
        rc = -errno;
        err = strfmt("socket: %s", strerror(errno));
        goto out;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, opts->path, strlen(opts->path) + 1);
    /* bind creates the file: the umask gives it its mode from the start,
     * with no window where it is more open. */
    mode_t old = umask((mode_t)(~opts->mode & 0777));
    int b = bind(l->fd, (struct sockaddr *)&sa, sizeof(sa));
    int berr = errno;
    umask(old);
    if (b != 0) {
        rc = -berr;
        err = strfmt("cannot listen on unix socket '%s': %s", opts->path,
                     strerror(berr));
        goto out;
    }
    if (lstat(opts->path, &st) == 0) {
        l->dev = st.st_dev;
        l->ino = st.st_ino;
    }
    if (opts->gid >= 0 && chown(opts->path, (uid_t)-1, (gid_t)opts->gid) != 0) {
        rc = -errno;
        err = strfmt("set group %ld on socket '%s': %s", opts->gid, opts->path,
                     strerror(errno));
        goto out_unlink;
    }
    if (chmod(opts->path, opts->mode) != 0) {
        rc = -errno;
        err = strfmt("chmod socket '%s': %s", opts->path, strerror(errno));
        goto out_unlink;
    }
    if (listen(l->fd, 512) != 0) {
        rc = -errno;
        err = strfmt("listen on '%s': %s", opts->path, strerror(errno));
        goto out_unlink;
    }
start:
    l->reserve_fd = open_reserve();
    if (l->reserve_fd < 0) {
        rc = -errno;
        err =
            strfmt("open /dev/null (a spare descriptor): %s", strerror(errno));
        goto out_unlink;
    }
    rc = uv_poll_init(loop, &l->poll, l->fd);
    if (rc != 0) {
        err = strfmt("poll socket '%s': %s", opts->path, uv_strerror(rc));
        rc = DETD_EINTERNAL;
        goto out_unlink;
    }
    uv_timer_init(loop, &l->backoff);
    l->handles_open = 2;
    l->poll.data = l;
    l->backoff.data = l;
    uv_poll_start(&l->poll, UV_READABLE, on_readable);
    l->polling = 1;
    *ret = l;
    return 0;
out_unlink:
    if (!l->activated)
        unlink(opts->path);
out:
    if (l->fd >= 0 && !l->activated)
        close(l->fd);
    if (l->reserve_fd >= 0)
        close(l->reserve_fd);
    free(l->path);
    free(l);
fail:
    if (ret_errmsg != NULL)
        *ret_errmsg = err;
    else
        free(err);
    return rc;
}

void listener_stop(listener *l) {
    if (l == NULL || !l->polling)
        return;
    uv_poll_stop(&l->poll);
    uv_timer_stop(&l->backoff);
    l->polling = 0;
    /* New connections are refused from now on, not left in the backlog. */
    close(l->fd);
    l->fd = -1;
}

static void on_closed(uv_handle_t *h) {
    listener *l = h->data;
    if (--l->handles_open > 0)
        return;
    if (l->fd >= 0)
        close(l->fd);
    if (l->reserve_fd >= 0)
        close(l->reserve_fd);
    free(l->path);
    free(l);
}

/* See listener.h. */
void listener_get_stats(const listener *l, struct listener_stats *ret) {
    memset(ret, 0, sizeof(*ret));
    if (l != NULL)
        *ret = l->stats;
}

void listener_close(listener *l) {
    if (l == NULL)
        return;
    listener_stop(l);
    /* Remove the socket only if it is still ours: another daemon may have
     * taken the path over since. */
    struct stat st;
    if (!l->activated && lstat(l->path, &st) == 0 && st.st_dev == l->dev &&
        st.st_ino == l->ino)
        unlink(l->path);
    uv_close((uv_handle_t *)&l->poll, on_closed);
    uv_close((uv_handle_t *)&l->backoff, on_closed);
}

/* See listener.h. */
int64_t listener_proc_start(pid_t pid) {
    if (pid <= 0)
        return 0;
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    /* "pid (comm) state ...": comm may hold spaces and parentheses; the
     * fields after it start at the last ')'. starttime is field 22, the
     * 20th after comm. */
    char *p = strrchr(buf, ')');
    if (p == NULL)
        return 0;
    for (int field = 2; field < 22; field++) {
        p = strchr(p + 1, ' ');
        if (p == NULL)
            return 0;
    }
    char *end = NULL;
    errno = 0;
    long long v = strtoll(p + 1, &end, 10);
    if (errno != 0 || end == p + 1 || v <= 0)
        return 0;
    return (int64_t)v;
}
