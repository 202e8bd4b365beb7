/*
 * loop: the daemon's libuv loop. It owns all mutable state; the rpc
 * thread only queues events here and wakes the loop with uv_async_send,
 * which coalesces wake-ups, so each wake-up drains the whole queue.
 */
#define _GNU_SOURCE
#include "loop.h"

#include "app/benchsplit.h"
#include "app/commit.h"
#include "app/coord.h"
#include "app/daemon.h"
#include "app/decide.h"
#include "app/fair.h"
#include "app/passes.h"
#include "app/waiters.h"
#include "dispatch.h"
#include "ops/admin.h"
#include "ops/lock.h"
#include "ops/tableadmin.h"
#include "clock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/time.h>
#include <unistd.h>

#include "cluster/cluster.h"
#include "data/store.h"
#include "detd/client.h"
#include "ops/exporter.h"
#include "io/conns.h"
#include "io/listener.h"
#include "detd/error.h"
#include "io/sdnotify.h"

/* rpc thread: queue the event and wake the loop. */
static void on_rpc_event(void *ctx, struct rpc_event *ev) {
    struct daemon *d = ctx;
    if (decide_fast(d, ev))
        return; /* a decided key, answered here without the loop hop */
    pthread_mutex_lock(&d->qmu);
    if (d->nqueue == d->capqueue) {
        size_t cap = d->capqueue ? d->capqueue * 2 : 256;
        struct rpc_event *q = cap <= d->cfg->max_queue
                                  ? realloc(d->queue, cap * sizeof(*q))
                                  : NULL;
        if (q == NULL) {
            pthread_mutex_unlock(&d->qmu);
            /* Over the queue cap: refuse, never block the rpc thread. */
            free(ev->owner_data);
            if (ev->msg != NULL)
                protobuf_c_message_free_unpacked(ev->msg, NULL);
            if (ev->kind == RPC_EV_REQUEST)
                rpc_fail(ev->call, RPC_RESOURCE_EXHAUSTED,
                         "daemon request queue is full (%u events)",
                         d->cfg->max_queue);
            else
                rpc_call_unref(ev->call);
            return;
        }
        d->queue = q;
        d->capqueue = cap;
    }
    d->queue[d->nqueue++] = *ev;
    pthread_mutex_unlock(&d->qmu);
    uv_async_send(&d->wake);
}

static size_t take_queue(struct daemon *d) {
    pthread_mutex_lock(&d->qmu);
    size_t n = d->nqueue;
    struct rpc_event *q = d->queue;
    size_t cap = d->capqueue;
    d->queue = d->work;
    d->capqueue = d->capwork;
    d->nqueue = 0;
    d->work = q;
    d->capwork = cap;
    pthread_mutex_unlock(&d->qmu);
    return n;
}

static void arm_tick(struct daemon *d);

static void on_wake(uv_async_t *h) {
    struct daemon *d = h->data;
    /* Events queued while we work are picked up by the next wake-up. */
    size_t n = take_queue(d);
    for (size_t i = 0; i < n; i++)
        dispatch_event(d, &d->work[i]);
    if (n > 0 && !d->draining)
        arm_tick(d);
}

static void on_tick(uv_timer_t *t) {
    struct daemon *d = t->data;
    (void)engine_tick(d->engine, clock_mono_ms());
    arm_tick(d);
}

/* The cluster backend's events (loop thread): decisions go to the one
 * commit path, verify answers to admin, claims and state to coord. */
static void on_cluster_event(void *ctx, const struct cluster_event *ev) {
    struct daemon *d = ctx;
    switch (ev->kind) {
    case CLUSTER_EV_COMMITTED:
    case CLUSTER_EV_DECISION:
    case CLUSTER_EV_READ:
        commit_cluster_event(d, ev);
        break;
    case CLUSTER_EV_PEER:
    case CLUSTER_EV_PEERS_DONE:
        admin_verify_peer(d, ev);
        break;
    default:
        coord_event(d->coord, ev);
        break;
    }
    /* Held askers and retries may have moved the next wake-up. */
    if (!d->draining)
        arm_tick(d);
}

static void arm_tick(struct daemon *d) {
    int64_t now = clock_mono_ms();
    int64_t next = engine_tick(d->engine, now);
    if (d->coord != NULL) {
        /* Held askers' deadlines and claim retries (etcd backend). */
        int64_t cn = coord_tick(d->coord, now);
        if (cn < next)
            next = cn;
        coord_sweep(d->coord);
        /* etcd commits whose caller's deadline comes first. */
        int64_t mn = commit_tick(d, now);
        if (mn < next)
            next = mn;
    }
    /* Leases of attached sessions are renewed on ticks: tick at least
     * four times per lease. */
    int64_t period = d->cfg->lease_ms / 4 > 0 ? d->cfg->lease_ms / 4 : 1;
    int64_t delay = next == INT64_MAX ? period : next - now;
    if (delay > period)
        delay = period;
    if (delay < 1)
        delay = 1;
    uv_timer_start(&d->tick, on_tick, (uint64_t)delay, 0);
}

/* rpc thread: may this local call go on? (the policy is read-only) */
static int authorize(void *ctx, rpc_method m, const struct rpc_peer_cred *pc,
                     char *why, size_t why_len) {
    struct daemon *d = ctx;
    struct access_cred c = {0};
    if (pc != NULL)
        c = (struct access_cred){pc->pid, pc->uid, pc->gid, pc->groups,
                                 pc->n_groups};
    int admin = rpc_method_admin(m); /* calls that change operator state */
    access_reason r = access_check(d->cfg->access, pc != NULL ? &c : NULL,
                                   admin, why, why_len);
    if (r == ACCESS_OK)
        return 0;
    atomic_fetch_add(&d->refused[r], 1);
    /* A refused connection is logged once, when accepted; a refused admin
     * call each time (they are rare and worth seeing). */
    if (r == ACCESS_DENIED_ADMIN)
        log_warn("refused %s from pid %d: %s", rpc_method_name(m), (int)c.pid,
                 why);
    return 1;
}

/* The io layer's notes (connections refused, descriptors exhausted):
 * it does not log, the daemon does. */
static void on_io_note(void *ctx, const char *msg) {
    (void)ctx;
    log_warn("%s", msg);
}

/* loop thread: a connection on the unix socket. */
static int on_connection(void *ctx, int fd, const struct access_cred *cred) {
    struct daemon *d = ctx;
    char why[256];
    if (access_check(d->cfg->access, cred, 0, why, sizeof(why)) != ACCESS_OK) {
        d->refused_connections++;
        if (cred != NULL)
            log_warn("connection from pid %d uid %u: refusing its calls: %s",
                     (int)cred->pid, (unsigned)cred->uid, why);
        else
            log_warn("connection with unknown credentials: refusing its "
                     "calls: %s",
                     why);
    }
    /* Slots per uid: the kernel's word on who connected, never the
     * caller's. */
    return rpc_server_add_fd(
        d->rpc, fd, cred != NULL ? (uint32_t)cred->uid : CONNS_UID_UNKNOWN);
}

static void close_cb(uv_handle_t *h) {
    (void)h;
}

/* The watchdog is fed by the loop itself: a stuck loop stops the pings
 * and systemd kills the daemon. */
static void on_watchdog(uv_timer_t *t) {
    (void)t;
    sdnotify_watchdog();
}

static void drain_coord(struct daemon *d) {
    if (d->coord != NULL)
        coord_drain(d->coord);
}

/* The drain, in order: what waits on etcd first (commits in flight,
 * cluster claim state; the applied revision is stored), then the verify
 * gatherings, then every held Decide and every session. Each step
 * answers what it owns UNAVAILABLE and may run again (exit). */
static const struct drain_step {
    const char *what;
    void (*run)(struct daemon *d);
} drain_steps[] = {
    {"etcd commits", commit_drain},
    {"cluster claims", drain_coord},
    {"verify gatherings", admin_verify_drain},
    {"lock imports", lock_drain},
    {"waiters and sessions", decide_drain},
};

static void drain(struct daemon *d) {
    for (size_t i = 0; i < sizeof drain_steps / sizeof drain_steps[0]; i++) {
        log_debug("drain: %s", drain_steps[i].what);
        drain_steps[i].run(d);
    }
}

static void begin_drain(struct daemon *d, const char *why) {
    if (d->draining)
        return;
    d->draining = 1;
    log_info("%s: draining (refusing new calls, answering waiters)", why);
    char status[128];
    snprintf(status, sizeof(status), "draining (%s)", why);
    sdnotify_stopping(status);
    listener_stop(d->listener);
    rpc_server_shutdown_begin(d->rpc);
    on_wake(&d->wake); /* handle what already arrived */
    drain(d);
    uv_timer_stop(&d->tick);
    uv_timer_stop(&d->idle_exit);
    uv_stop(&d->loop);
}

/* --exit-when-idle-s: idle is no client attached, no claim open and no
 * call waiting, at every check for that long. */
static void on_idle_check(uv_timer_t *t) {
    struct daemon *d = t->data;
    struct engine_stats es;
    engine_get_stats(d->engine, &es);
    int64_t now = clock_mono_ms();
    if (d->nsessions > 0 || es.claims > 0 || es.waiters > 0) {
        d->idle_since_ms = 0;
        return;
    }
    if (d->idle_since_ms == 0) {
        d->idle_since_ms = now;
        return;
    }
    if (now - d->idle_since_ms >= (int64_t)d->cfg->exit_idle_s * 1000) {
        log_info("no client for %u s (--exit-when-idle-s): exiting",
                 d->cfg->exit_idle_s);
        begin_drain(d, "idle");
    }
}

static void on_signal(uv_signal_t *s, int signum) {
    struct daemon *d = s->data;
    if (signum == SIGHUP) {
        log_info("SIGHUP: reloading tables");
        if (!d->draining)
            tableadmin_reload(d, NULL);
        return;
    }
    begin_drain(d, signum == SIGTERM ? "SIGTERM" : "SIGINT");
}

static int make_dir(const char *path, mode_t mode) {
    if (mkdir(path, mode) == 0 || errno == EEXIST)
        return 0;
    return -errno;
}

/* Create every missing parent directory of path (like mkdir -p dirname). */
static int make_parents(const char *path) {
    char buf[4096];
    if (strlen(path) >= sizeof(buf))
        return -ENAMETOOLONG;
    strcpy(buf, path);
    for (char *p = buf + 1; *p != '\0'; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        int rc = make_dir(buf, 0755);
        *p = '/';
        if (rc != 0)
            return rc;
    }
    return 0;
}

/*
 * The state directory's lock: an exclusive flock on <dir>/detd.lock, held
 * (the descriptor stays open, close-on-exec) for the life of the process,
 * so a second daemon on the same store refuses at once instead of timing
 * the same keys again. The holder's pid is written into the file for the
 * message. Returns the descriptor, or -1 (logged).
 */
static int lock_state_dir(const char *dir) {
    char path[4096];
    if ((size_t)snprintf(path, sizeof(path), "%s/detd.lock", dir) >=
        sizeof(path)) {
        log_error("state directory '%s': path too long", dir);
        return -1;
    }
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0640);
    if (fd < 0) {
        log_error("lock state directory '%s': open '%s': %s", dir, path,
                  strerror(errno));
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char pid[32] = "";
        if (e == EWOULDBLOCK) {
            ssize_t n = pread(fd, pid, sizeof(pid) - 1, 0);
            pid[n > 0 ? n : 0] = '\0';
            pid[strcspn(pid, "\n")] = '\0';
            log_error("state directory '%s' is in use by another detd (pid "
                      "%s, which holds the lock on '%s'): two daemons on one "
                      "store would time the same keys twice; stop that one, "
                      "or give this one its own --state-dir",
                      dir, pid[0] != '\0' ? pid : "unknown", path);
        } else {
            log_error("lock state directory '%s': flock '%s': %s", dir, path,
                      strerror(e));
        }
        close(fd);
        return -1;
    }
    char line[32];
    int n = snprintf(line, sizeof(line), "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, line, (size_t)n, 0) != n)
        log_warn("lock file '%s': cannot write our pid: %s", path,
                 strerror(errno));
    return fd;
}

/* Log what --repair kept and lost, one line. */
static void log_repair(const struct daemon *d, const char *aside,
                       const struct store_repair_report *rep) {
    char line[512];
    size_t len = 0;
    for (int i = 0; i < STORE_REPAIR_TABLES && len < sizeof(line); i++) {
        int w = snprintf(line + len, sizeof(line) - len,
                         "%s%s %llu kept, %s%llu lost", i > 0 ? "; " : "",
                         rep->t[i].table != NULL ? rep->t[i].table : "?",
                         (unsigned long long)rep->t[i].kept,
                         rep->t[i].lost_unknown ? "at least " : "",
                         (unsigned long long)rep->t[i].lost);
        if (w < 0)
            break;
        len += (size_t)w;
    }
    log_warn("repair of store '%s' done: %s; the damaged file is kept as "
             "'%s'%s",
             d->store_path, line, aside,
             d->cfg->etcd_endpoints != NULL
                 ? "; decisions lost here come back from etcd (full resync)"
                 : "");
}

/*
 * Open the store and check it (store_check(): PRAGMA quick_check). A
 * damaged store is refused, naming the file and the problem, unless
 * --repair: then it is salvaged into a fresh file (the damaged one kept
 * as <store>.corrupt-<unix-ms>) and the fresh one opened and checked.
 * Returns 0 with d->store open, or -1 (logged).
 */
static int open_checked_store(struct daemon *d) {
    char *err = NULL;
    char problem[600];
    int64_t t0 = clock_mono_ms();
    int rc = store_open(d->store_path, &d->store, &err);
    if (rc == 0) {
        rc = store_check(d->store);
        if (rc == 0) {
            log_info("store '%s': integrity check ok (%lld ms)", d->store_path,
                     (long long)(clock_mono_ms() - t0));
            if (d->cfg->repair)
                log_info("--repair: the store is sound, nothing to repair");
            return 0;
        }
        snprintf(problem, sizeof(problem), "%s", store_errmsg(d->store));
        store_close(d->store);
        d->store = NULL;
    } else {
        snprintf(problem, sizeof(problem), "%s",
                 err != NULL ? err : detd_strerror(rc));
        free(err);
        err = NULL;
    }
    if (rc != DETD_ECORRUPT) {
        log_error("open store '%s': %s", d->store_path, problem);
        return -1;
    }
    if (!d->cfg->repair) {
        log_error("store '%s' is damaged (%s): refusing to start on it. Keep "
                  "a copy of the state directory, then start detd once with "
                  "--repair (same settings): it keeps every readable decision "
                  "in a fresh store, moves the damaged file aside as "
                  "'%s.corrupt-<unix-ms>' and reports what was kept and lost",
                  d->store_path, problem, d->store_path);
        return -1;
    }
    char *aside = NULL;
    if (asprintf(&aside, "%s.corrupt-%lld", d->store_path,
                 (long long)clock_unix_ms()) < 0) {
        log_error("out of memory");
        return -1;
    }
    log_warn("store '%s' is damaged (%s); --repair: salvaging it into a "
             "fresh store",
             d->store_path, problem);
    struct store_repair_report rep;
    rc = store_repair(d->store_path, aside, &rep, &err);
    if (rc != 0) {
        log_error("repair store '%s': %s", d->store_path,
                  err != NULL ? err : detd_strerror(rc));
        free(err);
        free(aside);
        return -1;
    }
    log_repair(d, aside, &rep);
    free(aside);
    rc = store_open(d->store_path, &d->store, &err);
    if (rc == 0 && (rc = store_check(d->store)) != 0) {
        log_error("the repaired store '%s' fails its check: %s", d->store_path,
                  store_errmsg(d->store));
        store_close(d->store);
        d->store = NULL;
        return -1;
    }
    if (rc != 0) {
        log_error("open the repaired store: %s",
                  err != NULL ? err : detd_strerror(rc));
        free(err);
        return -1;
    }
    return 0;
}

/* ---- start-up: a table of steps ------------------------------------- */

/* The daemon's own state: the event queue's lock, the loop, the held
 * calls, the benchmark splits and the verify gatherings. */
static int start_state(struct daemon *d) {
    d->started_unix_ms = clock_unix_ms();
    d->started_mono_ms = clock_mono_ms();
    pthread_mutex_init(&d->qmu, NULL);
    uv_loop_init(&d->loop);
    if (waiters_new(&d->waiters) != 0 || benchsplit_new(&d->splits) != 0 ||
        admin_verifies_new(&d->verifies) != 0) {
        log_error("out of memory");
        return -1;
    }
    return 0;
}

static void stop_state(struct daemon *d) {
    uv_loop_close(&d->loop);
    admin_verifies_free(d->verifies);
    waiters_free(d->waiters);
    benchsplit_free(d->splits);
    free(d->queue);
    free(d->work);
    pthread_mutex_destroy(&d->qmu);
}

/* Socket activation (systemd's detd.socket): take the socket now, before
 * anything else could inherit it. */
static int start_activation(struct daemon *d) {
    char *err = NULL;
    int rc = sdnotify_listen_fd(&d->listen_fd, &err);
    if (rc != 0) {
        log_error("%s", err != NULL ? err : detd_strerror(rc));
        free(err);
        return -1;
    }
    if (d->listen_fd < 0)
        return 0;
    struct sockaddr_un sa;
    socklen_t salen = sizeof(sa);
    memset(&sa, 0, sizeof(sa));
    int fl = fcntl(d->listen_fd, F_GETFL);
    if (fl < 0 || fcntl(d->listen_fd, F_SETFL, fl | O_NONBLOCK) != 0) {
        log_error("socket activation: set O_NONBLOCK: %s", strerror(errno));
        return -1;
    }
    if (getsockname(d->listen_fd, (struct sockaddr *)&sa, &salen) != 0)
        sa.sun_path[0] = '\0';
    sa.sun_path[sizeof(sa.sun_path) - 1] = '\0';
    snprintf(d->activated_path, sizeof(d->activated_path), "%s",
             sa.sun_path[0] != '\0' ? sa.sun_path : "(unnamed socket)");
    log_info("socket activation: serving the socket passed by systemd "
             "(%s) instead of creating %s",
             d->activated_path, d->cfg->socket_path);
    return 0;
}

/* The passed socket, while no listener has taken it. */
static void stop_activation(struct daemon *d) {
    if (d->listen_fd >= 0)
        close(d->listen_fd);
    d->listen_fd = -1;
}

static int start_state_dir(struct daemon *d) {
    const char *dir = d->cfg->state_dir;
    int rc = make_parents(dir);
    if (rc == 0)
        rc = make_dir(dir, 0750);
    if (rc != 0) {
        log_error("create state directory '%s': %s%s", dir, detd_strerror(rc),
                  rc == -EACCES || rc == -EPERM || rc == -EROFS
                      ? " (pass --state-dir DIR, a directory this user can "
                        "write, or run detd as root)"
                      : "");
        return -1;
    }
    if (asprintf(&d->store_path, "%s/detd.sqlite", dir) < 0) {
        d->store_path = NULL;
        return -1;
    }
    return 0;
}

static void stop_state_dir(struct daemon *d) {
    free(d->store_path);
    d->store_path = NULL;
}

/* One daemon per state directory. */
static int start_lock(struct daemon *d) {
    d->lock_fd = lock_state_dir(d->cfg->state_dir);
    return d->lock_fd >= 0 ? 0 : -1;
}

/* After the store is closed: the next daemon may open it. */
static void stop_lock(struct daemon *d) {
    if (d->lock_fd >= 0)
        close(d->lock_fd);
    d->lock_fd = -1;
}

static void stop_store(struct daemon *d) {
    store_close(d->store);
    d->store = NULL;
}

static int start_hotcache(struct daemon *d) {
    int rc = hotcache_new(16384, &d->hot);
    if (rc != 0) {
        log_error("create answer cache: %s", detd_strerror(rc));
        return -1;
    }
    return 0;
}

static void stop_hotcache(struct daemon *d) {
    hotcache_free(d->hot);
    d->hot = NULL;
}

static int start_engine(struct daemon *d) {
    const struct daemon_config *cfg = d->cfg;
    struct engine_limits lim = {cfg->max_waiters, cfg->max_claims,
                                cfg->lease_ms};
    int rc = engine_new(&lim, decide_engine_event, d, &d->engine);
    if (rc == 0)
        rc = decide_engine_setup(d);
    if (rc != 0) {
        log_error("create engine: %s", detd_strerror(rc));
        return -1;
    }
    return 0;
}

static void stop_engine(struct daemon *d) {
    engine_free(d->engine);
    d->engine = NULL;
}

/* A bad table file is skipped (and listed by status). */
static int start_tables(struct daemon *d) {
    int rc = tableadmin_load_initial(d);
    if (rc != 0) {
        log_error("load tables: %s", detd_strerror(rc));
        return -1;
    }
    return 0;
}

/* "No GPU" is a normal state: this step never fails. */
static int start_gpus(struct daemon *d) {
    if (gpu_probe_run(d->cfg->cuda_library, &d->gpus) != 0)
        return 0;
    if (d->gpus.n == 0)
        log_info("GPU probe: %s", d->gpus.state);
    for (size_t i = 0; i < d->gpus.n; i++)
        log_info("GPU %d: %s (%s, %d SMs, %s)", d->gpus.gpus[i].index,
                 d->gpus.gpus[i].name, d->gpus.gpus[i].arch,
                 d->gpus.gpus[i].sm_count, d->gpus.gpus[i].uuid);
    return 0;
}

static void stop_gpus(struct daemon *d) {
    gpu_probe_clear(&d->gpus);
}

/* Before the server: its events need the async handle. */
static int start_handles(struct daemon *d) {
    uv_async_init(&d->loop, &d->wake, on_wake);
    d->wake.data = d;
    uv_timer_init(&d->loop, &d->tick);
    d->tick.data = d;
    uv_timer_init(&d->loop, &d->watchdog);
    d->watchdog.data = d;
    uv_timer_init(&d->loop, &d->idle_exit);
    d->idle_exit.data = d;
    uv_signal_init(&d->loop, &d->sig_term);
    uv_signal_init(&d->loop, &d->sig_int);
    uv_signal_init(&d->loop, &d->sig_hup);
    d->sig_term.data = d->sig_int.data = d->sig_hup.data = d;
    uv_signal_start(&d->sig_term, on_signal, SIGTERM);
    uv_signal_start(&d->sig_int, on_signal, SIGINT);
    uv_signal_start(&d->sig_hup, on_signal, SIGHUP);
    return 0;
}

/* The later steps' handles are closed by then: one run of the loop
 * ends them all. */
static void stop_handles(struct daemon *d) {
    uv_close((uv_handle_t *)&d->wake, close_cb);
    uv_close((uv_handle_t *)&d->tick, close_cb);
    uv_close((uv_handle_t *)&d->watchdog, close_cb);
    uv_close((uv_handle_t *)&d->idle_exit, close_cb);
    uv_close((uv_handle_t *)&d->sig_term, close_cb);
    uv_close((uv_handle_t *)&d->sig_int, close_cb);
    uv_close((uv_handle_t *)&d->sig_hup, close_cb);
    uv_run(&d->loop, UV_RUN_DEFAULT);
}

static int start_socket_dir(struct daemon *d) {
    const char *path = d->cfg->socket_path;
    int rc = d->listen_fd >= 0 ? 0 : make_parents(path);
    if (rc != 0) {
        log_error("create socket directory for '%s': %s%s", path,
                  detd_strerror(rc),
                  rc == -EACCES || rc == -EPERM || rc == -EROFS
                      ? " (pass --socket PATH in a directory this user can "
                        "write, and give clients the same path in "
                        "DETD_SOCKET)"
                      : "");
        return -1;
    }
    return 0;
}

/* The etcd backend (--etcd-endpoints only): its claims (coord.c), its
 * commits waiting for etcd (commit.c) and the cluster client. */
static int start_etcd(struct daemon *d) {
    const struct daemon_config *cfg = d->cfg;
    if (cfg->etcd_endpoints == NULL)
        return 0;
    if (coord_new(d, &d->coord) != 0 || commit_state_new(&d->commits) != 0) {
        log_error("etcd backend: out of memory");
        return -1;
    }
    int64_t revision = coord_revision(d->coord);
    char lease_file[4096];
    snprintf(lease_file, sizeof(lease_file), "%s/etcd-lease", cfg->state_dir);
    struct cluster_options co = {
        .endpoints = cfg->etcd_endpoints,
        .ca_file = cfg->etcd_ca,
        .cert_file = cfg->etcd_cert,
        .key_file = cfg->etcd_key,
        .user = cfg->etcd_user,
        .password = cfg->etcd_password,
        .node_id = cfg->node_id,
        .ns = cfg->ns,
        .listen = cfg->listen,
        .socket_path = cfg->socket_path,
        .lease_ms = cfg->lease_ms,
        .defer_ms = cfg->claim_defer_ms,
        .defer_step_ms = cfg->claim_defer_step_ms,
        .defer_slots = cfg->claim_defer_slots,
        .start_revision = revision,
        .lease_file = lease_file,
        /* Other nodes' listeners: same CA and certificate as ours. */
        .peer_ca = cfg->listen_client_ca,
        .peer_cert = cfg->listen_cert,
        .peer_key = cfg->listen_key,
    };
    char *err = NULL;
    int rc =
        cluster_open(&co, &d->loop, on_cluster_event, d, &d->cluster, &err);
    if (rc != 0) {
        log_error("etcd backend: %s", err != NULL ? err : detd_strerror(rc));
        free(err);
        return -1;
    }
    log_info("etcd backend: node '%s', endpoints %s, resuming after "
             "revision %lld%s",
             cfg->node_id, cfg->etcd_endpoints, (long long)revision,
             revision == 0 ? " (full resync)" : "");
    struct coord_cluster cc = coord_cluster_of(d->cluster);
    coord_set_cluster(d->coord, &cc);
    return 0;
}

/* Revokes the node lease: this node's claims go at once. */
static void stop_etcd(struct daemon *d) {
    cluster_close(d->cluster);
    d->cluster = NULL;
    coord_free(d->coord);
    d->coord = NULL;
    commit_state_free(d->commits);
    d->commits = NULL;
}

static int start_rpc(struct daemon *d) {
    const struct daemon_config *cfg = d->cfg;
    struct rpc_options ro = {
        .max_message_bytes = DETD_MAX_MESSAGE_BYTES,
        .pending_per_method = 8,
        .listen = cfg->listen,
        .listen_cert = cfg->listen_cert,
        .listen_key = cfg->listen_key,
        .listen_client_ca = cfg->listen_client_ca,
        .authorize = authorize,
        .authorize_ctx = d,
        .peer_groups = cfg->access != NULL && (cfg->access->allow_gid.n > 0 ||
                                               cfg->access->admin_gid.n > 0),
        .max_connections = cfg->max_connections,
        .idle_timeout_ms = cfg->idle_timeout_ms,
        .max_connections_per_uid = cfg->max_connections_per_uid,
        .note = on_io_note,
    };
    char *err = NULL;
    int rc = rpc_server_start(&ro, on_rpc_event, d, &d->rpc, &err);
    if (rc != 0) {
        log_error("start server: %s", err != NULL ? err : detd_strerror(rc));
        free(err);
        return -1;
    }
    return 0;
}

/* Release the events still queued (their calls are not answered: the
 * server is stopped). */
static void release_queued(struct daemon *d) {
    size_t n = take_queue(d);
    for (size_t i = 0; i < n; i++) {
        struct rpc_event *ev = &d->work[i];
        free(ev->owner_data);
        if (ev->msg != NULL)
            protobuf_c_message_free_unpacked(ev->msg, NULL);
        rpc_call_unref(ev->call);
    }
}

/* The server (already stopped after a run: serve()) and what its calls
 * left: the queue, every held call and session (the drain again). */
static void stop_rpc(struct daemon *d) {
    if (d->rpc != NULL)
        rpc_server_stop(d->rpc, 0);
    d->rpc = NULL;
    release_queued(d);
    drain(d);
    free(d->sessions);
    d->sessions = NULL;
    fair_free(d);
}

static int start_listener(struct daemon *d) {
    const struct daemon_config *cfg = d->cfg;
    struct listener_options lo = {cfg->socket_path, cfg->socket_mode,
                                  cfg->socket_gid,  d->listen_fd,
                                  on_io_note,       NULL};
    char *err = NULL;
    int rc = listener_open(&lo, &d->loop, on_connection, d, &d->listener, &err);
    if (rc != 0) {
        log_error("start server: %s", err != NULL ? err : detd_strerror(rc));
        free(err);
        return -1;
    }
    d->listen_fd = -1; /* the listener owns it now */
    return 0;
}

static void stop_listener(struct daemon *d) {
    listener_close(d->listener);
    d->listener = NULL;
}

static int start_metrics(struct daemon *d) {
    const char *addr = d->cfg->metrics;
    if (addr == NULL)
        return 0;
    char *err = NULL;
    int rc = exporter_open(d, addr, &d->exporter, &err);
    if (rc != 0) {
        log_error("metrics: %s", err != NULL ? err : detd_strerror(rc));
        free(err);
        return -1;
    }
    log_info("metrics on http://%s/metrics", addr);
    return 0;
}

static void stop_metrics(struct daemon *d) {
    exporter_close(d->exporter);
    d->exporter = NULL;
}

/* Ready: the socket accepts calls and the store is open. Tell the log
 * and systemd, and start the ticks and the watchdog's pings. */
static int start_ready(struct daemon *d) {
    const struct daemon_config *cfg = d->cfg;
    const char *serving =
        d->activated_path[0] != '\0' ? d->activated_path : cfg->socket_path;
    uint64_t total = 0;
    store_count_decisions(d->store, cfg->ns, &total, NULL);
    log_info("detd %s serving on %s%s%s (namespace '%s', backend %s, store "
             "'%s', %llu decisions, lease %u ms)",
             DETD_VERSION, serving, cfg->listen ? " and " : "",
             cfg->listen ? cfg->listen : "", cfg->ns,
             d->cluster != NULL ? "etcd" : "local", d->store_path,
             (unsigned long long)total, cfg->lease_ms);
    arm_tick(d);
    char status[256];
    snprintf(status, sizeof(status),
             "serving on %.100s (namespace '%.64s', backend %s, %llu "
             "decisions)",
             serving, cfg->ns, d->cluster != NULL ? "etcd" : "local",
             (unsigned long long)total);
    sdnotify_ready(status);
    uint64_t wd_usec = sdnotify_watchdog_usec();
    if (wd_usec > 0) {
        /* Ping at half the interval, as sd_watchdog_enabled(3) advises. */
        uint64_t period_ms = wd_usec / 2000 > 0 ? wd_usec / 2000 : 1;
        sdnotify_watchdog();
        uv_timer_start(&d->watchdog, on_watchdog, period_ms, period_ms);
        log_info("systemd watchdog: pinging every %llu ms",
                 (unsigned long long)period_ms);
    }
    if (cfg->exit_idle_s > 0) {
        log_info("exiting after %u s without a client (--exit-when-idle-s)",
                 cfg->exit_idle_s);
        uv_timer_start(&d->idle_exit, on_idle_check, 1000, 1000);
    }
    return 0;
}

/*
 * Start-up, in order. Each step logs its own failure (naming the object)
 * and returns -1; its undo then runs too, so an undo accepts whatever its
 * step may leave half made (each is a no-op on what was never made).
 * After a failure or the drain, the undos of every step begun run in
 * reverse order: the order is this table, the unwinding one loop.
 */
static const struct start_step {
    const char *what;
    int (*run)(struct daemon *d);
    void (*undo)(struct daemon *d); /* NULL: nothing to undo */
} start_steps[] = {
    {"daemon state", start_state, stop_state},
    {"socket activation", start_activation, stop_activation},
    {"state directory", start_state_dir, stop_state_dir},
    {"state directory lock", start_lock, stop_lock},
    {"store", open_checked_store, stop_store},
    {"answer cache", start_hotcache, stop_hotcache},
    {"engine", start_engine, stop_engine},
    {"tables", start_tables, tableadmin_free},
    {"GPU probe", start_gpus, stop_gpus},
    {"loop handles", start_handles, stop_handles},
    {"socket directory", start_socket_dir, NULL},
    {"etcd backend", start_etcd, stop_etcd},
    {"lockfile", lock_load_at_start, NULL},
    {"open timing passes", passes_start, passes_stop},
    {"rpc server", start_rpc, stop_rpc},
    {"unix socket", start_listener, stop_listener},
    {"metrics endpoint", start_metrics, stop_metrics},
    {"ready", start_ready, NULL},
};

/* Run the loop until the drain stops it, then stop the server (it
 * cancels what is left after the grace) and the unix socket. */
static void serve(struct daemon *d) {
    uv_run(&d->loop, UV_RUN_DEFAULT);
    /* Drained: stop the server (cancels what is left after the grace). */
    rpc_server_stop(d->rpc, 2000);
    d->rpc = NULL;
    listener_close(d->listener);
    d->listener = NULL;
    release_queued(d); /* events that raced the stop */
    log_info("stopped");
}

int daemon_run(const struct daemon_config *cfg) {
    struct daemon *d = calloc(1, sizeof(*d));
    if (d == NULL) {
        log_error("out of memory");
        return 1;
    }
    d->cfg = cfg;
    d->listen_fd = -1;
    d->lock_fd = -1;
    const size_t nsteps = sizeof start_steps / sizeof start_steps[0];
    size_t begun = 0;
    int failed = 0;
    while (begun < nsteps && !failed) {
        log_debug("start: %s", start_steps[begun].what);
        failed = start_steps[begun++].run(d) != 0;
    }
    if (!failed)
        serve(d);
    while (begun > 0) {
        const struct start_step *s = &start_steps[--begun];
        if (s->undo == NULL)
            continue;
        log_debug("stop: %s", s->what);
        s->undo(d);
    }
    free(d);
    return failed ? 1 : 0;
}
