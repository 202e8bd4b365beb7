/*
 * conns: the local connections the rpc server serves (rpc.c), counted,
 * capped and ended when idle.
 *
 * gRPC owns each connection's descriptor and closes it when the
 * connection ends, without telling. conns keeps a duplicate of it, so the
 * socket cannot be replaced under the same number unseen: while gRPC's
 * descriptor still names the socket (same device and inode) the
 * connection is open, and a sweep forgets the others. The duplicate also
 * ends an idle connection (shutdown(), which gRPC reads as the peer's
 * end) without racing gRPC's close. Thread-safe: one mutex.
 */
#ifndef DETD_CONNS_H
#define DETD_CONNS_H

#include <stdint.h>

typedef struct conns conns;

/* A line for the daemon's log (see conns_options); msg is borrowed for
 * the call. */
typedef void (*conns_note_cb)(void *ctx, const char *msg);

struct conns_options {
    uint32_t max_connections; /* open at once; 0: no cap */
    /* open at once from one uid (unknown credentials count as one uid);
     * 0: no cap of its own */
    uint32_t max_per_uid;
    uint32_t idle_timeout_ms; /* end one with no call after it; 0: never */
    /* Optional: told once per burst of refusals (a burst ends when a
     * connection is taken again), on the thread of conns_track(). */
    conns_note_cb note;
    void *note_ctx;
};

/* The counters: open now, and counted since the start. */
struct conns_stats {
    uint64_t open;
    uint64_t refused_max;   /* over max_connections: closed at once */
    uint64_t refused_uid;   /* over max_per_uid: closed at once */
    uint64_t refused_no_fd; /* no descriptor (or memory) to watch it */
    uint64_t idle_closed;   /* no call within idle_timeout_ms */
};

/* Create the table (*ret, freed by conns_free()). 0 or DETD_ENOMEM. */
int conns_new(const struct conns_options *opts, conns **ret);

/* Close the duplicates and free. NULL is a no-op. */
void conns_free(conns *t);

/* uid of a connection whose peer credentials are unknown. */
#define CONNS_UID_UNKNOWN UINT32_MAX

/*
 * A connection was accepted on descriptor fd from uid (the kernel's
 * SO_PEERCRED; CONNS_UID_UNKNOWN), about to be served by gRPC: count and
 * watch it (0), or refuse it: DETD_EBUSY over either cap, -errno or
 * DETD_ENOMEM when it cannot be watched; fd is then closed here.
 */
int conns_track(conns *t, int fd, uint32_t uid);

/* A call arrived on connection fd (-1: none): it is in use, never idle. */
void conns_used(conns *t, int fd);

/* Forget the connections gRPC has closed and end the idle ones, when a
 * sweep is due. */
void conns_sweep(conns *t);

/* How often conns_sweep() has work (ms); 0: never. */
int64_t conns_sweep_every_ms(const conns *t);

/* Copy the counters into *ret. */
void conns_stats(conns *t, struct conns_stats *ret);

#endif /* DETD_CONNS_H */
