/*
 * imports: table entries imported into a namespace (`detctl table
 * import`, Admin.ImportTable), on the loop thread.
 *
 * A decision id includes the fingerprint of the asking process's
 * candidate set, so an entry cannot become a decision before a client
 * asks. Imported entries are kept in the store per (namespace, arch,
 * kernel, key as written in the table) and the Decide path consults them
 * right after the decision store and before the tables, with the tables'
 * lookup rules: the kernel names "m.sub:fn@abcd", "m.sub:fn", "m.sub.fn",
 * "fn", and for each the keys: the canonical key, the Megatron-form
 * table_key, "*". The first entry whose config is a live candidate is
 * committed as a decision (source import); an entry naming no live
 * candidate is stale: a miss (counted), and the search goes on.
 */
#ifndef DETD_IMPORTS_H
#define DETD_IMPORTS_H

#include "app/daemon.h"

/* Entries of one ImportTable request (its message is capped at 1 MiB). */
#define IMPORTS_MAX_BATCH 100000
/* Replacements listed in one answer. */
#define IMPORTS_MAX_REPLACEMENTS 100
/* At most 4 kernel names x 3 keys can match. */
#define IMPORTS_MAX_CONSIDERED 12

/* An imported entry a lookup looked at (heap strings). */
struct imports_entry {
    char *kernel; /* as written in the table */
    char *key;    /* as written in the table */
    char *config;
    char *file;
    int stale; /* its config is not among the candidates */
};

struct imports_result {
    int hit; /* e[n - 1] is the answer */
    size_t n_stale;
    size_t n;
    struct imports_entry e[IMPORTS_MAX_CONSIDERED];
};

/*
 * Look up the imported entries of namespace ns for (arch, kernel_id, key,
 * table_key) with the live candidates cands (NULL: no check, every entry
 * counts as live). Fills *ret (clear it with imports_result_clear()).
 * Returns 0 or an error of the store (*ret then holds no entry).
 */
int imports_lookup(struct daemon *d, const char *ns, const char *arch,
                   const char *kernel_id, const char *key,
                   const char *table_key, const char *const *cands,
                   size_t n_cands, struct imports_result *ret);
void imports_result_clear(struct imports_result *r);

/*
 * The import step of Decide for key k (namespace ns): look for a usable
 * imported entry. Returns 1 with *ret filled (its answer is ret->e[ret->n
 * - 1]: the caller commits it like a table hit, then clears *ret), 0 for
 * a miss (counted; a stale entry is a miss too), or -1 after answering
 * call with the store's error.
 */
int imports_find(struct daemon *d, rpc_call *call, const char *ns,
                 const Detd__V1__DecisionKey *k, struct imports_result *ret);

/* Admin.ImportTable: check every entry of the batch again, then store
 * them in one transaction (consumes the event). */
void imports_on_import(struct daemon *d, struct rpc_event *ev);

/* The number of imported entries changed (import, reset). */
void imports_changed(struct daemon *d);

#endif /* DETD_IMPORTS_H */
