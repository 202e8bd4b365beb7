/*
 * storeerr: failed store calls (see storeerr.h).
 */
#define _GNU_SOURCE
#include "app/storeerr.h"

#include <errno.h>
#include <inttypes.h>

#include "app/daemon.h"
#include "clock.h"

static int is_disk(int rc) {
    return rc == -ENOSPC || rc == -EIO;
}

/* See storeerr.h. */
int storeerr_note(struct daemon *d, int rc) {
    if (!is_disk(rc))
        return 0;
    struct store_health *h = &d->store_health;
    if (rc == -ENOSPC)
        d->counters.store_disk_full++;
    else
        d->counters.store_disk_errors++;
    h->failures++;
    if (h->failing)
        return 1;
    h->failing = 1;
    h->since_ms = clock_mono_ms();
    h->writes_mark = store_writes(d->store);
    log_error("store write failed: %s; callers are answered UNAVAILABLE and "
              "retry until a write succeeds (logged once until then)",
              store_errmsg(d->store));
    return 1;
}

/* See storeerr.h. */
void storeerr_reply(struct daemon *d, rpc_call *call, int rc) {
    storeerr_note(d, rc);
    rpc_fail(call, is_disk(rc) ? RPC_UNAVAILABLE : RPC_INTERNAL, "store: %s",
             store_errmsg(d->store));
}

/* See storeerr.h. */
void storeerr_check(struct daemon *d) {
    struct store_health *h = &d->store_health;
    if (!h->failing || store_writes(d->store) == h->writes_mark)
        return;
    log_info("store '%s' writes again after %" PRIu64 " failed calls in "
             "%" PRId64 " ms",
             d->store_path != NULL ? d->store_path : "(unknown)", h->failures,
             clock_mono_ms() - h->since_ms);
    h->failing = 0;
    h->failures = 0;
}
