/* outage: the public calls about daemon outages beyond the calls' own
 * retries (client.c) and the claims the keeper takes again (session.h):
 * a claim given up, and the counters. See detd/client.h, "Daemon
 * restarts". */
#define _GNU_SOURCE
#include "clock.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "client_int.h"
#include "session.h"

DETD_EXPORT int detd_claim_forget(detd_client *client, uint64_t claim_id) {
    wire_set_error(NULL);
    if (client == NULL || claim_id == 0) {
        wire_set_error("%s",
                       client == NULL ? "client is NULL" : "claim_id is 0");
        return DETD_EINVAL;
    }
    uint64_t gen = 0;
    session_claim_find(&client->session, claim_id, 1, &gen);
    return 0;
}

DETD_EXPORT int detd_client_stats(detd_client *client,
                                  struct detd_stats *ret_stats) {
    wire_set_error(NULL);
    if (client == NULL || ret_stats == NULL) {
        wire_set_error("%s is NULL", client == NULL ? "client" : "ret_stats");
        return DETD_EINVAL;
    }
    if (ret_stats->size == 0 || ret_stats->size > sizeof(*ret_stats)) {
        wire_set_error("ret_stats->size %zu is not sizeof(struct "
                       "detd_client_stats) of this release (%zu)",
                       ret_stats->size, sizeof(*ret_stats));
        return DETD_EINVAL;
    }
    struct detd_stats st;
    memset(&st, 0, sizeof st);
    st.size = ret_stats->size;
    struct session *s = &client->session;
    pthread_mutex_lock(&s->mu);
    int mine = s->pid == getpid();
    st.outages = s->outages;
    st.down_ms = s->down_since != 0 ? clock_mono_ms() - s->down_since : 0;
    st.attaches = mine ? s->attaches : 0;
    st.claims_renewed = s->renewed;
    st.reconnect_ms = s->reconnect_ms;
    pthread_mutex_unlock(&s->mu);
    memcpy(ret_stats, &st, ret_stats->size);
    return 0;
}
