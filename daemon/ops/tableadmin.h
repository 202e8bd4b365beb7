/*
 * tableadmin: the tables on the loop thread.
 * tableadmin_load_initial: load the set synchronously at start-up
 * (logs each skipped file); returns 0 or DETD_ENOMEM.
 * tableadmin_reload: load a new set on a worker thread and swap it in on
 * the loop thread when complete; call (may be NULL: SIGHUP) is answered
 * then with a ReloadResponse (its request event's reference is taken).
 * tableadmin_explain: the Explain method (consumes the event).
 * tableadmin_status: fill the table part of a status answer; the arrays
 * live until tableadmin_status_clear().
 * tableadmin_free: free the set (at exit, after the loop stopped).
 */
#ifndef DETD_TABLEADMIN_H
#define DETD_TABLEADMIN_H

#include "app/daemon.h"

int tableadmin_load_initial(struct daemon *d);
void tableadmin_reload(struct daemon *d, rpc_call *call);
void tableadmin_reload_rpc(struct daemon *d, struct rpc_event *ev);
void tableadmin_explain(struct daemon *d, struct rpc_event *ev);
struct tableadmin_status {
    Detd__V1__TableFile *files;
    Detd__V1__TableFile **filep;
    size_t nfiles;
    Detd__V1__TableError *errors;
    Detd__V1__TableError **errorp;
    size_t nerrors;
};
int tableadmin_status_fill(struct daemon *d, struct tableadmin_status *ret);
void tableadmin_status_clear(struct tableadmin_status *s);
void tableadmin_free(struct daemon *d);

#endif /* DETD_TABLEADMIN_H */
