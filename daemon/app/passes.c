/*
 * passes: open timing passes across a restart (see passes.h).
 */
#define _GNU_SOURCE
#include "app/passes.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>

#include "app/daemon.h"
#include "app/session.h"
#include "clock.h"
#include "data/claimlog.h"
#include "detd/error.h"

/* Engine session of a restored pass: this bit, the holder's uid (31 bits)
 * and pid (32 bits). Attached sessions count from 1 and never reach it. */
#define PASSES_RESTORED (UINT64_C(1) << 63)

static uint64_t restored_session(int32_t pid, uint32_t uid) {
    return PASSES_RESTORED | (uint64_t)uid << 32 | (uint32_t)pid;
}

/* See passes.h. */
int passes_start(struct daemon *d) {
    if (d->coord != NULL)
        return 0; /* etcd holds the cluster's claims, with their leases */
    struct claimlog_entry *v = NULL;
    size_t n = 0;
    int64_t written = 0;
    int rc = claimlog_open(d->cfg->state_dir, &d->claims_log, &v, &n, &written);
    if (rc != 0) {
        log_error("open the timing-pass journal in '%s': %s", d->cfg->state_dir,
                  detd_strerror(rc));
        return -1;
    }
    int64_t now = clock_mono_ms(), now_unix = clock_unix_ms();
    size_t restored = 0;
    for (size_t i = 0; i < n; i++) {
        const struct claimlog_entry *e = &v[i];
        struct decision row;
        int st = store_get_decision(d->store, e->id, &row);
        if (st == 0)
            decision_clear(&row);
        /* Decided, unreadable, or its process is gone: nothing to keep. */
        if (st != DETD_ENOTFOUND || e->uid > INT32_MAX ||
            (kill(e->pid, 0) != 0 && errno == ESRCH))
            continue;
        /* It ran at least until the journal's last write (a later pass
         * was handed out then); the time the daemon was down is not
         * counted. */
        int64_t ran = written > e->at_unix_ms ? written - e->at_unix_ms : 0;
        uint64_t claim = 0;
        if (engine_claim_restore(d->engine, e->id,
                                 restored_session(e->pid, e->uid), ran, now,
                                 &claim) != 0)
            continue;
        claimlog_add(d->claims_log, e->id, e->pid, e->uid, now_unix - ran);
        restored++;
        log_info("timing pass of key %.12s restored for pid %d uid %u (open "
                 "when the daemon stopped); other ranks wait for it",
                 e->id, (int)e->pid, (unsigned)e->uid);
    }
    free(v);
    if (n > 0)
        log_info("timing passes: %zu restored of %zu journaled", restored, n);
    return 0;
}

/* See passes.h. */
void passes_stop(struct daemon *d) {
    claimlog_close(d->claims_log);
    d->claims_log = NULL;
}

/* See passes.h. */
void passes_designated(struct daemon *d, rpc_call *call, const char *id) {
    if (d->claims_log == NULL)
        return;
    int32_t pid;
    uint32_t uid;
    session_peer(call, &pid, &uid);
    if (pid > 0)
        claimlog_add(d->claims_log, id, pid, uid, clock_unix_ms());
}

/* See passes.h. */
int passes_adopt(struct daemon *d, rpc_call *call, struct client_session *s,
                 const char *id, uint64_t *ret_claim) {
    struct engine_claim_info ci;
    if (s == NULL || !engine_claim_info(d->engine, id, &ci) ||
        !(ci.session & PASSES_RESTORED))
        return 0;
    int32_t pid;
    uint32_t uid;
    session_peer(call, &pid, &uid);
    if (pid <= 0 || ci.session != restored_session(pid, uid) ||
        engine_claim_adopt(d->engine, id, ci.session, s->id) != 0)
        return 0;
    log_info("timing pass of key %.12s (restored) given back to pid %d uid "
             "%u, session %" PRIu64,
             id, (int)pid, (unsigned)uid, s->id);
    *ret_claim = ci.claim_id;
    return 1;
}
