/*
 * obslist: the Admin ListObservations method, paged (loop thread).
 */
#ifndef DETD_OBSLIST_H
#define DETD_OBSLIST_H

#include "app/daemon.h"

/* Answer one ListObservations call: at most page_size (0: the default,
 * capped at DAEMON_MAX_OBS_PAGE) observations and DAEMON_MAX_PAGE_BYTES
 * of them after page_token, with next_page_token when more follow; a
 * page_token this daemon did not give is INVALID_ARGUMENT. Consumes the
 * event (answers the call and frees the request). */
void obslist_serve(struct daemon *d, struct rpc_event *ev);

#endif /* DETD_OBSLIST_H */
