/*
 * peertab: who the daemon saw write each observation (see peertab.h).
 */
#define _GNU_SOURCE
#include "ops/peertab.h"

#include <stdlib.h>
#include <string.h>

#include "core/text.h"

/* See peertab.h. */
int peer_tab_add(struct peer_tab *t, const char *id, const char *host,
                 int32_t pid, int32_t claimed_pid, int64_t uid,
                 const char *node) {
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 256;
        struct peer_row *v = realloc(t->v, cap * sizeof(*v));
        if (v == NULL)
            goto oom;
        t->v = v;
        t->cap = cap;
    }
    struct peer_row *r = &t->v[t->n];
    r->id = text_dup(id);
    r->host = text_dup(host);
    r->node = text_dup(node);
    r->pid = pid;
    r->claimed_pid = claimed_pid;
    r->uid = uid;
    if (r->id == NULL || r->host == NULL || r->node == NULL) {
        free(r->id);
        free(r->host);
        free(r->node);
        goto oom;
    }
    t->n++;
    t->sorted = 0;
    return 0;
oom:
    t->oom = 1;
    return -1;
}

static int peer_row_cmp(const void *a, const void *b) {
    const struct peer_row *x = a, *y = b;
    int c = strcmp(x->id, y->id);
    if (c == 0)
        c = strcmp(x->host, y->host);
    if (c == 0)
        c = (x->pid > y->pid) - (x->pid < y->pid);
    return c;
}

/* See peertab.h. */
const struct peer_row *peer_tab_find(struct peer_tab *t, const char *id,
                                     const char *host, int32_t pid) {
    if (t == NULL || t->n == 0)
        return NULL;
    if (!t->sorted) {
        qsort(t->v, t->n, sizeof(*t->v), peer_row_cmp);
        t->sorted = 1;
    }
    struct peer_row key = {(char *)id, (char *)host, pid, 0, 0, NULL};
    return bsearch(&key, t->v, t->n, sizeof(*t->v), peer_row_cmp);
}

/* See peertab.h. */
void peer_tab_clear(struct peer_tab *t) {
    for (size_t i = 0; i < t->n; i++) {
        free(t->v[i].id);
        free(t->v[i].host);
        free(t->v[i].node);
    }
    free(t->v);
    memset(t, 0, sizeof(*t));
}
