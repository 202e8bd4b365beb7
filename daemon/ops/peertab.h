/*
 * peertab: who the daemon saw write each observation (a row's peer pid,
 * uid, node and the pid it claimed), found again by (decision id, host,
 * pid) when a verify answer lists the clients of a use. Loop thread.
 */
#ifndef DETD_PEERTAB_H
#define DETD_PEERTAB_H

#include <stddef.h>
#include <stdint.h>

struct peer_row {
    char *id;
    char *host;
    int32_t pid;
    int32_t claimed_pid;
    int64_t uid;
    char *node;
};

struct peer_tab {
    struct peer_row *v;
    size_t n, cap;
    int sorted;
    int oom;
};

/*
 * Add one row (strings copied; NULL reads as ""). Returns 0, or -1 when
 * out of memory (t->oom set, nothing added).
 */
int peer_tab_add(struct peer_tab *t, const char *id, const char *host,
                 int32_t pid, int32_t claimed_pid, int64_t uid,
                 const char *node);

/* The row of (id, host, pid), or NULL (none, or t NULL); borrowed until
 * the next peer_tab_add() or peer_tab_clear(). Sorts t on first use. */
const struct peer_row *peer_tab_find(struct peer_tab *t, const char *id,
                                     const char *host, int32_t pid);

/* Free every row and reset t to empty. */
void peer_tab_clear(struct peer_tab *t);

#endif /* DETD_PEERTAB_H */
